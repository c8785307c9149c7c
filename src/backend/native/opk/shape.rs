//! Native kernels of the op table's shape section.

use super::Kernel;

pub const KERNELS: &[(&str, Kernel)] = &[];
