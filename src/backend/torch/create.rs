//! Creating tensors and seeding.

use super::{kind, tdevice, torch_err, Raw};
use crate::backend::Init;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

pub fn cuda_device_count() -> i64 {
    tch::Cuda::device_count()
}

pub fn manual_seed(seed: i64) -> Result<()> {
    tch::manual_seed(seed);
    Ok(())
}

pub fn fill(shape: &[i64], dtype: DType, dev: Device, init: Init) -> Result<Raw> {
    let opts = (kind(dtype), tdevice(dev));
    let t = match init {
        Init::Randn => tch::Tensor::f_randn(shape, opts),
        Init::Zeros => tch::Tensor::f_zeros(shape, opts),
        Init::Ones => tch::Tensor::f_ones(shape, opts),
        Init::Full(v) => return full(shape, v, opts).map(Raw),
    };
    t.map(Raw).map_err(torch_err)
}

/// `torch.full`; an allocation failure is an error (see `scalar_op`).
pub fn full(shape: &[i64], v: f64, opts: (tch::Kind, tch::Device)) -> Result<tch::Tensor> {
    super::scalar_op(|| tch::Tensor::f_full(shape, v, opts))
}

/// Copies `bytes` (already checked to be numel × itemsize) into a new tensor on `dev`.
pub fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
    let t = tch::Tensor::f_from_data_size(bytes, shape, kind(dtype)).map_err(torch_err)?;
    let t = match dev {
        Device::Cpu => t,
        _ => t.f_to_device(tdevice(dev)).map_err(torch_err)?,
    };
    Ok(Raw(t))
}

/// A new CPU tensor whose elements are written by `fill` (given exactly
/// numel × itemsize bytes) before anyone else sees it: checkpoint loads read
/// files straight into tensor storage. Errors of `fill` come back as they are.
pub fn filled_cpu<E: From<Error>>(
    shape: &[i64],
    dtype: DType,
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<Raw, E> {
    let t = tch::Tensor::f_empty(shape, (kind(dtype), tch::Device::Cpu)).map_err(torch_err)?;
    let n = t.numel() * dtype.size();
    if n == 0 {
        return fill(&mut []).map(|_| Raw(t));
    }
    // SAFETY: a fresh contiguous CPU tensor of `n` bytes that nothing else
    // references yet; the slice does not outlive this call.
    fill(unsafe { std::slice::from_raw_parts_mut(t.data_ptr().cast::<u8>(), n) })?;
    Ok(Raw(t))
}
