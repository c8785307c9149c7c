//! Native kernels of the op table's reduce section.

use super::Kernel;

pub const KERNELS: &[(&str, Kernel)] = &[];
