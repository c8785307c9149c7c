//! Native kernels of the op table's create section.

use super::Kernel;

pub const KERNELS: &[(&str, Kernel)] = &[];
