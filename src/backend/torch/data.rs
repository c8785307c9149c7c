//! Reading tensors back: metadata, single values, raw bytes.

use super::{device_of, dtype_of, torch_err, Raw};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;

pub fn shape(t: &Raw) -> Vec<i64> {
    t.0.size()
}

pub fn dtype(t: &Raw) -> Result<DType> {
    dtype_of(t.0.f_kind().map_err(torch_err)?)
}

pub fn device(t: &Raw) -> Device {
    device_of(t.0.device())
}

/// The single element as a double; the caller has checked numel == 1.
pub fn item(t: &Raw) -> Result<f64> {
    t.0.f_double_value(&[]).map_err(torch_err)
}

/// Copies the elements, contiguous, in the tensor's dtype; `dst` is exactly numel × itemsize.
pub fn copy_to(t: &Raw, dst: &mut [u8]) -> Result<()> {
    let numel = t.0.numel();
    if numel == 0 {
        return Ok(());
    }
    t.0.f_copy_data_u8(dst, numel).map_err(torch_err)
}
