//! Native kernels of the op table's sort section.

use super::Kernel;

pub const KERNELS: &[(&str, Kernel)] = &[];
