//! Native kernels of the op table's binary section.

use super::Kernel;

pub const KERNELS: &[(&str, Kernel)] = &[];
