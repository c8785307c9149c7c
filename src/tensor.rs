//! Tensor creation and data in/out over handles: the safe Rust API that
//! `ffi::tensor` exposes to C.

use crate::backend::{self, imp, Init, Tensor};
use crate::device::{Device, DeviceSpec};
use crate::dtype::DType;
use crate::error::Result;
use crate::handles::Ref;
use crate::json;
use crate::registry::{DEVICES, TENSORS};

/// Resolves a device name and checks that the device exists.
pub fn device_create(spec: &str) -> Result<i64> {
    crate::threads::apply_env()?;
    let count = imp::cuda_device_count();
    let dev = match DeviceSpec::parse(spec)? {
        DeviceSpec::Auto if count > 0 => Device::Cuda(0),
        DeviceSpec::Auto => Device::Cpu,
        DeviceSpec::Exact(Device::Cuda(n)) if i64::from(n) >= count => {
            crate::bail!(E_DEVICE, "{spec:?}: cuda:{n} does not exist ({count} CUDA devices usable)")
        }
        DeviceSpec::Exact(d) => d,
    };
    DEVICES.insert(dev)
}

pub fn device(h: i64) -> Result<Device> {
    DEVICES.read(h, |d| *d)
}

pub fn get(h: i64) -> Result<Ref<'static, Tensor>> {
    TENSORS.get(h)
}

/// Registers a freshly computed tensor of `backend`.
pub fn register(backend: backend::BackendId, raw: imp::Raw) -> Result<i64> {
    TENSORS.insert(Tensor { backend, raw })
}

/// Handles made along a call of several steps, released again if a later
/// step fails before `keep`.
pub struct Made(pub Vec<i64>);

impl Made {
    pub fn keep(mut self) -> Vec<i64> {
        std::mem::take(&mut self.0)
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        self.0.iter().for_each(|h| drop(crate::quant::release(*h)));
    }
}

/// Registers each of `raws`, or none: on a failure the handles already
/// made are released.
pub fn register_all(backend: backend::BackendId, raws: impl IntoIterator<Item = imp::Raw>) -> Result<Vec<i64>> {
    let mut made = Made(Vec::new());
    for raw in raws {
        made.0.push(register(backend, raw)?);
    }
    Ok(made.keep())
}

/// Elements in `shape`, failing when the product overflows.
pub fn numel_of(shape: &[i64]) -> Result<usize> {
    // libtorch counts elements in int64: a product past i64::MAX cannot be a tensor.
    shape
        .iter()
        .try_fold(1i64, |n, &d| n.checked_mul(d).filter(|_| d >= 0))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| crate::err!(E_SHAPE, "shape {} has too many elements", json::write_int_list(shape)))
}

/// The active backend and the device behind `dev`, checked to fit each other.
pub fn target(dev: i64) -> Result<(backend::BackendId, Device)> {
    let d = device(dev)?;
    let b = backend::active_built()?;
    b.check_device(d)?;
    Ok((b, d))
}

/// A copy of `h` made by backend `to` (or a new handle on it when it is already there).
pub fn to_backend(h: i64, to: backend::BackendId) -> Result<i64> {
    to.require_built()?;
    let t = get(h)?;
    if t.backend == to {
        return register(to, imp::shallow(&t.raw));
    }
    register(to, imp::copy_to_backend(&t.raw, to)?)
}

pub fn create(shape: &[i64], dtype: DType, dev: i64, init: Init) -> Result<i64> {
    let (b, d) = target(dev)?;
    numel_of(shape)?;
    if init == Init::Randn && !dtype.is_float() {
        crate::bail!(E_DTYPE, "randn needs a floating dtype (fp32, fp16, bf16, fp64), got {}", dtype.name());
    }
    if let Init::Full(v) = init {
        if !dtype.holds(v) {
            crate::bail!(E_INVALID_ARG, "full: value {v} cannot be converted to {} without overflow", dtype.name());
        }
    }
    register(b, imp::fill(b, shape, dtype, d, init)?)
}

pub fn from_data(bytes: &[u8], shape: &[i64], dtype: DType, dev: i64) -> Result<i64> {
    let (b, d) = target(dev)?;
    let want = numel_of(shape)?.checked_mul(dtype.size());
    if want != Some(bytes.len()) {
        crate::bail!(
            E_SHAPE,
            "from_data: {} bytes given, shape {} of {} needs {}",
            bytes.len(),
            json::write_int_list(shape),
            dtype.name(),
            want.map_or("more than usize::MAX".to_string(), |w| w.to_string())
        );
    }
    if dtype == DType::Bool {
        if let Some(i) = bytes.iter().position(|&b| b > 1) {
            crate::bail!(E_INVALID_ARG, "from_data: bool byte {i} is {} (must be 0 or 1)", bytes[i]);
        }
    }
    register(b, imp::from_bytes(b, bytes, shape, dtype, d)?)
}

/// The size in bytes of the tensor's elements, contiguous.
pub fn nbytes(t: &Tensor) -> Result<usize> {
    Ok(numel_of(&imp::shape(&t.raw))? * imp::dtype(&t.raw)?.size())
}

/// Copies the tensor's elements into `dst`, which must hold at least `nbytes`.
pub fn copy_to(h: i64, dst: &mut [u8]) -> Result<usize> {
    if crate::quant::is_quantized(h) {
        let bytes = crate::quant::bytes(h)?;
        if dst.len() < bytes.len() {
            crate::bail!(E_SHAPE, "copy_to: buffer of {} bytes is too small for quantized tensor {h} ({} bytes)", dst.len(), bytes.len());
        }
        dst[..bytes.len()].copy_from_slice(&bytes);
        return Ok(bytes.len());
    }
    let t = get(h)?;
    let need = nbytes(&t)?;
    if dst.len() < need {
        crate::bail!(
            E_SHAPE,
            "copy_to: buffer of {} bytes is too small for {} {} ({need} bytes)",
            dst.len(),
            imp::dtype(&t.raw)?.name(),
            json::write_int_list(&imp::shape(&t.raw))
        );
    }
    imp::copy_to(&t.raw, &mut dst[..need])?;
    Ok(need)
}

pub fn item(h: i64) -> Result<f64> {
    let t = get(h)?;
    let shape = imp::shape(&t.raw);
    if numel_of(&shape)? != 1 {
        crate::bail!(E_SHAPE, "item needs exactly one element, tensor has shape {}", json::write_int_list(&shape));
    }
    imp::item(&t.raw)
}

pub fn shape(h: i64) -> Result<Vec<i64>> {
    if crate::quant::is_quantized(h) {
        return crate::quant::shape(h);
    }
    Ok(imp::shape(&get(h)?.raw))
}

/// The dtype's canonical name; a quantized tensor's is `qint8` or `q8_0`.
pub fn dtype_name(h: i64) -> Result<&'static str> {
    if crate::quant::is_quantized(h) {
        return crate::quant::dtype_name(h);
    }
    Ok(dtype(h)?.name())
}

pub fn dtype(h: i64) -> Result<DType> {
    imp::dtype(&get(h)?.raw)
}

/// The device a tensor lives on.
pub fn device_of(h: i64) -> Result<Device> {
    if crate::quant::is_quantized(h) {
        return crate::quant::shape(h).map(|_| Device::Cpu);
    }
    Ok(imp::device(&get(h)?.raw))
}

pub fn numel(h: i64) -> Result<i64> {
    Ok(numel_of(&shape(h)?)? as i64)
}

/// Token ids as an int64 `[batch, seq]` tensor.
pub fn ids_u32(ids: &[u32], batch: i64, seq: i64, dev: i64) -> Result<i64> {
    if batch < 0 || seq < 0 {
        crate::bail!(E_SHAPE, "ids_u32: batch {batch} and seq {seq} must be >= 0");
    }
    let shape = [batch, seq];
    if numel_of(&shape)? != ids.len() {
        crate::bail!(E_SHAPE, "ids_u32: {} ids given, batch {batch} x seq {seq} needs {}", ids.len(), batch * seq);
    }
    from_data(&ids_as_int64(ids), &shape, DType::I64, dev)
}

/// Token ids widened to int64, as native-endian bytes for `from_bytes`.
pub fn ids_as_int64(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|&i| i64::from(i).to_ne_bytes()).collect()
}

pub fn manual_seed(seed: i64) -> Result<()> {
    backend::active_built()?;
    imp::manual_seed(seed)
}
