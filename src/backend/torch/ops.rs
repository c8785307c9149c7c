//! Tensor operations, one libtorch call each.

use super::{torch_err, Raw};
use crate::error::Result;

pub fn matmul(a: &Raw, b: &Raw) -> Result<Raw> {
    a.0.f_matmul(&b.0).map(Raw).map_err(torch_err)
}
