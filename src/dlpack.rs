//! DLPack 1.x exchange: tensors handed to other frameworks without a copy, and
//! foreign memory wrapped as tensors. The structs mirror `dlpack.h`
//! (`DLManagedTensorVersioned`, DLPack ≥ 1.0); the backend only supplies a view
//! of its storage and wraps foreign memory with a release callback.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::backend::{self, imp};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor;

/// The DLPack major version this library speaks; another major is refused.
pub const MAJOR: u32 = 1;
/// The minor version of the structs we produce (1.0 has everything we use).
pub const MINOR: u32 = 0;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub const FLAG_READ_ONLY: u64 = 1;
/// libtorch has no limit, but a DLTensor's `ndim` is an int32 and nothing
/// real comes close to this; it bounds what we read from foreign pointers.
pub const MAX_NDIM: i32 = 64;

const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;
const KDL_CUDA_HOST: i32 = 3;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

fn dl_dtype(d: DType) -> DLDataType {
    // (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5, kDLBool 6)
    let (code, bits) = match d {
        DType::F32 => (2, 32),
        DType::F16 => (2, 16),
        DType::BF16 => (4, 16),
        DType::F64 => (2, 64),
        DType::I64 => (0, 64),
        DType::I32 => (0, 32),
        DType::Bool => (6, 8),
        DType::U8 => (1, 8),
        DType::I8 => (0, 8),
        DType::I16 => (0, 16),
        DType::C64 => (5, 64),
        DType::C128 => (5, 128),
    };
    DLDataType { code, bits, lanes: 1 }
}

fn dtype_of(t: DLDataType) -> Result<DType> {
    DType::ALL.into_iter().find(|&d| dl_dtype(d) == t).ok_or_else(|| {
        crate::err!(
            E_DTYPE,
            "DLPack dtype code {} bits {} lanes {} has no ABI dtype (fp32, fp16, bf16, fp64, int64, int32, int16, int8, bool, uint8, complex64, complex128)",
            t.code,
            t.bits,
            t.lanes
        )
    })
}

fn dl_device(d: Device) -> DLDevice {
    match d {
        Device::Cpu => DLDevice { device_type: KDL_CPU, device_id: 0 },
        Device::Cuda(n) => DLDevice { device_type: KDL_CUDA, device_id: n as i32 },
    }
}

fn device_of(d: DLDevice) -> Result<Device> {
    match d.device_type {
        // Pinned host memory is ordinary CPU memory to a CPU kernel.
        KDL_CPU | KDL_CUDA_HOST => Ok(Device::Cpu),
        KDL_CUDA if d.device_id >= 0 && (d.device_id as i64) < imp::cuda_device_count() => {
            Ok(Device::Cuda(d.device_id as u32))
        }
        KDL_CUDA => crate::bail!(E_DEVICE, "DLPack tensor on cuda:{}, which does not exist here", d.device_id),
        other => crate::bail!(E_DEVICE, "DLPack device type {other} is not supported (CPU, CUDA and CUDA host only)"),
    }
}

/// Exported DLPack tensors whose deleter has not run yet. They count as live
/// tensors: each holds a reference to its storage.
static EXPORTS: AtomicI64 = AtomicI64::new(0);

pub fn live_exports() -> i64 {
    EXPORTS.load(Ordering::Relaxed)
}

/// What an exported tensor owns until its consumer calls the deleter.
struct Export {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _keep: imp::Raw,
}

unsafe extern "C" fn delete_export(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `to_dlpack` as Boxes and the
    // DLPack contract calls the deleter once; dropping a Raw cannot unwind
    // into C (the storage release is a plain decref).
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx.cast::<Export>()));
    }
    EXPORTS.fetch_sub(1, Ordering::Relaxed);
}

/// A DLPack view of tensor `h` sharing its storage, as `torch.to_dlpack`
/// gives: refused for tensors that require grad (export `detach` instead).
pub fn to_dlpack(h: i64) -> Result<*mut DLManagedTensorVersioned> {
    let t = tensor::get(h)?;
    let dtype = imp::dtype(&t.raw)?;
    let view = imp::export_view(&t.raw)?;
    let mut ctx = Box::new(Export { shape: view.shape, strides: view.strides, _keep: view.keep });
    let managed = Box::new(DLManagedTensorVersioned {
        version: DLPackVersion { major: MAJOR, minor: MINOR },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_export),
        flags: 0,
        dl_tensor: DLTensor {
            data: view.data,
            device: dl_device(view.device),
            ndim: ctx.shape.len() as i32,
            dtype: dl_dtype(dtype),
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        },
    });
    let managed = Box::into_raw(managed);
    // SAFETY: just allocated; the context moves in after its pointers were taken
    // (moving the Box does not move the Vecs' buffers).
    unsafe { (*managed).manager_ctx = Box::into_raw(ctx).cast() };
    EXPORTS.fetch_add(1, Ordering::Relaxed);
    Ok(managed)
}

/// Calls a foreign tensor's deleter once its memory is no longer needed: on a
/// refused import at once, on a wrapped one when the storage dies.
unsafe extern "C" fn release_foreign(ctx: *mut c_void) {
    let m = ctx.cast::<DLManagedTensorVersioned>();
    // SAFETY: `m` is the producer's tensor, alive until its deleter runs, and
    // this runs once per tensor (see `from_dlpack`).
    unsafe {
        if let Some(del) = (*m).deleter {
            del(m);
        }
    }
}

/// Wraps a producer's DLPack tensor as a tensor handle without copying
/// (a read-only one is copied: no backend here has read-only tensors). Takes
/// ownership in every case: on failure the producer's deleter has run.
///
/// # Safety
/// `m` is NULL or a live `DLManagedTensorVersioned` whose deleter has not run;
/// its `shape` (and `strides` when not NULL) hold `ndim` entries.
pub unsafe fn from_dlpack(m: *mut DLManagedTensorVersioned) -> Result<i64> {
    if m.is_null() {
        crate::bail!(E_NULL_POINTER, "from_dlpack: the DLPack tensor is NULL");
    }
    // SAFETY (all blocks): `m` is live until `release_foreign(m)`, which runs
    // exactly once: here when checking fails or after a copy, else by the
    // backend when the wrapped storage dies (or when wrapping it fails).
    let (view, b) = match unsafe { check(m) }.and_then(|v| Ok((v, backend::active_built()?))) {
        Ok(ok) => ok,
        Err(e) => {
            unsafe { release_foreign(m.cast()) };
            return Err(e);
        }
    };
    let raw = if view.read_only {
        let copy = unsafe { imp::copy_foreign(b, view.data, &view.shape, &view.strides, view.dtype, view.device) };
        unsafe { release_foreign(m.cast()) };
        copy?
    } else {
        unsafe {
            imp::wrap_foreign(b, view.data, &view.shape, &view.strides, view.dtype, view.device, release_foreign, m.cast())?
        }
    };
    tensor::register(b, raw)
}

/// A foreign tensor's memory, checked.
struct ForeignView {
    data: *mut c_void,
    shape: Vec<i64>,
    strides: Vec<i64>,
    dtype: DType,
    device: Device,
    read_only: bool,
}

unsafe fn check(m: *mut DLManagedTensorVersioned) -> Result<ForeignView> {
    // SAFETY: `m` is a live DLPack tensor (the caller's contract).
    let (version, flags, dl) = unsafe { ((*m).version, (*m).flags, &(*m).dl_tensor) };
    if version.major != MAJOR {
        crate::bail!(
            E_INVALID_ARG,
            "DLPack major version {} is not supported (this library speaks {MAJOR}.x)",
            version.major
        );
    }
    let dtype = dtype_of(dl.dtype)?;
    let device = device_of(dl.device)?;
    backend::active_built()?.check_device(device)?;
    if !(0..=MAX_NDIM).contains(&dl.ndim) {
        crate::bail!(E_INVALID_ARG, "DLPack ndim {} is outside 0..={MAX_NDIM}", dl.ndim);
    }
    let ndim = dl.ndim as usize;
    if ndim > 0 && dl.shape.is_null() {
        crate::bail!(E_NULL_POINTER, "DLPack tensor with ndim {ndim} has a NULL shape");
    }
    // SAFETY: `shape` and (non-NULL) `strides` hold `ndim` entries.
    let shape = if ndim == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(dl.shape, ndim) }.to_vec() };
    let numel = tensor::numel_of(&shape)?;
    let strides = if dl.strides.is_null() || ndim == 0 {
        contiguous_strides(&shape)
    } else {
        unsafe { std::slice::from_raw_parts(dl.strides, ndim) }.to_vec()
    };
    if strides.iter().any(|&s| s < 0) {
        crate::bail!(E_INVALID_ARG, "DLPack strides {strides:?} are negative; tensors here have none");
    }
    check_extent(&shape, &strides, dtype)?;
    let data = if numel == 0 {
        dl.data
    } else {
        if dl.data.is_null() {
            crate::bail!(E_NULL_POINTER, "DLPack tensor of {numel} elements has NULL data");
        }
        let addr = (dl.data as usize).checked_add(dl.byte_offset as usize).filter(|a| a % dtype.size() == 0);
        match addr {
            Some(a) => a as *mut c_void,
            None => crate::bail!(
                E_INVALID_ARG,
                "DLPack data + byte_offset {} is not aligned to the {}-byte {}",
                dl.byte_offset,
                dtype.size(),
                dtype.name()
            ),
        }
    };
    Ok(ForeignView { data, shape, strides, dtype, device, read_only: flags & FLAG_READ_ONLY != 0 })
}

pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1].max(1));
    }
    strides
}

/// The furthest byte a view reaches must be addressable.
fn check_extent(shape: &[i64], strides: &[i64], dtype: DType) -> Result<()> {
    if shape.contains(&0) {
        return Ok(());
    }
    let last = shape
        .iter()
        .zip(strides)
        .try_fold(0i64, |acc, (&n, &s)| (n - 1).checked_mul(s).and_then(|x| acc.checked_add(x)))
        .and_then(|e| e.checked_add(1))
        .and_then(|e| e.checked_mul(dtype.size() as i64));
    if last.is_none() {
        crate::bail!(E_INVALID_ARG, "DLPack shape {shape:?} with strides {strides:?} spans more than 2^63 bytes");
    }
    Ok(())
}
