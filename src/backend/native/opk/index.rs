//! Native kernels of the op table's index section.

use super::Kernel;

pub const KERNELS: &[(&str, Kernel)] = &[];
