//! Creating tensors and seeding.

use std::ffi::{c_char, c_int, c_void};

use super::{kind, tdevice, torch_err, Raw, Torch};
use crate::backend::contract::{Create, Runtime};
use crate::backend::Init;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Code, Error, Result};

pub fn cuda_device_count() -> i64 {
    tch::Cuda::device_count()
}

impl Runtime for Torch {
    fn set_num_threads(n: i64) {
        tch::set_num_threads(n as i32);
    }

    fn set_grad_enabled(on: bool) -> bool {
        // SAFETY: a plain call into libtorch's C wrapper; it sets a thread-local
        // flag and returns the previous one (-1 had libtorch thrown).
        unsafe { torch_sys::at_grad_set_enabled(i32::from(on)) == 1 }
    }

    fn get_num_threads() -> Option<i64> {
        Some(i64::from(tch::get_num_threads()))
    }

    fn manual_seed(seed: i64) -> Result<()> {
        tch::manual_seed(seed);
        Ok(())
    }
}

impl Create for Torch {
    fn fill(shape: &[i64], dtype: DType, dev: Device, init: Init) -> Result<Raw> {
        let opts = (kind(dtype), tdevice(dev));
        let t = match init {
            Init::Zeros if dev == Device::Cpu => {
                let d = scalar_type(dtype);
                // SAFETY: `shape` is valid for its length; a valid out-pointer.
                return super::shim_tensor(Code::E_TORCH, |out| unsafe { enkai_shim_zeros_cpu(shape.as_ptr(), shape.len(), d, out) })
                    .map(Raw);
            }
            Init::Randn => tch::Tensor::f_randn(shape, opts),
            Init::Zeros => tch::Tensor::f_zeros(shape, opts),
            Init::Ones => tch::Tensor::f_ones(shape, opts),
            Init::Full(v) => return full(shape, v, opts).map(Raw),
        };
        t.map(Raw).map_err(torch_err)
    }

    fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
        let t = tch::Tensor::f_from_data_size(bytes, shape, kind(dtype)).map_err(torch_err)?;
        let t = match dev {
            Device::Cpu => t,
            _ => t.f_to_device(tdevice(dev)).map_err(torch_err)?,
        };
        Ok(Raw(t))
    }

    fn filled_cpu<E: From<Error>>(
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

    unsafe fn wrap_foreign(
        data: *mut c_void,
        shape: &[i64],
        strides: &[i64],
        dtype: DType,
        dev: Device,
        release: unsafe extern "C" fn(*mut c_void),
        ctx: *mut c_void,
    ) -> Result<Raw> {
        let (device, index) = match dev {
            Device::Cpu => (0, -1),
            Device::Cuda(n) => (1, n as c_int),
        };
        // SAFETY: the caller's contract; `shape` and `strides` have equal lengths;
        // the shim copies them and catches every C++ exception.
        super::shim_tensor(Code::E_TORCH, |out| unsafe {
            enkai_shim_from_blob(
                data,
                shape.as_ptr(),
                strides.as_ptr(),
                shape.len(),
                scalar_type(dtype),
                device,
                index,
                release,
                ctx,
                out,
            )
        })
        .map(Raw)
    }

    unsafe fn copy_foreign(data: *mut c_void, shape: &[i64], strides: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
        // SAFETY: the view lives only for the copy below.
        let view = unsafe { Self::wrap_foreign(data, shape, strides, dtype, dev, keep, std::ptr::null_mut())? };
        let mut copy = view.0.f_empty_like().map_err(torch_err)?;
        copy.f_copy_(&view.0).map_err(torch_err)?;
        Ok(Raw(copy))
    }

    fn zeros_like(t: &Raw) -> Result<Raw> {
        t.0.f_zeros_like().map(Raw).map_err(torch_err)
    }

    fn shallow(t: &Raw) -> Raw {
        Raw(t.0.shallow_clone())
    }
}

/// `torch.full`; an allocation failure is an error (see `scalar_op`).
pub fn full(shape: &[i64], v: f64, opts: (tch::Kind, tch::Device)) -> Result<tch::Tensor> {
    super::scalar_op(|| tch::Tensor::f_full(shape, v, opts))
}

extern "C" {
    fn enkai_shim_zeros_cpu(shape: *const i64, ndim: usize, dtype: c_int, out: *mut *mut torch_sys::C_tensor) -> *mut c_char;
    fn enkai_shim_from_blob(
        data: *mut c_void,
        sizes: *const i64,
        strides: *const i64,
        ndim: usize,
        dtype: c_int,
        device: c_int,
        index: c_int,
        release: unsafe extern "C" fn(*mut c_void),
        ctx: *mut c_void,
        out: *mut *mut torch_sys::C_tensor,
    ) -> *mut c_char;
}

/// c10's `ScalarType` numbering (stable across releases: serialized files use it).
pub(super) fn scalar_type(d: DType) -> c_int {
    match d {
        DType::U8 => 0,
        DType::I8 => 1,
        DType::I16 => 2,
        DType::I32 => 3,
        DType::I64 => 4,
        DType::F16 => 5,
        DType::F32 => 6,
        DType::F64 => 7,
        DType::C64 => 9,
        DType::C128 => 10,
        DType::Bool => 11,
        DType::BF16 => 15,
    }
}

unsafe extern "C" fn keep(_ctx: *mut c_void) {}
