//! The native CPU backend, in Rust: strided tensors over cached storage
//! (`tensor`, `storage`), kernels (`kernels`, `matmul`, `fused`) on `gemm`
//! and a fork-join pool of our own (`par`), and a reverse-mode tape (`autograd`). It needs no
//! libtorch; the functions here mirror the torch backend's, one for one.

pub mod autocast;
mod autograd;
pub mod elem;
pub mod fused;
mod kernels;
mod lm;
mod matmul;
mod nn;
mod ops;
pub mod opk;
pub mod par;
mod rng;
mod simd;
mod storage;
mod tensor;
mod train;

use std::ffi::c_void;
use std::sync::Arc;

pub use nn::{dropout, embedding, layernorm, layernorm_backward, masked_softmax, masked_softmax_backward, softmax};
pub use ops::{binary, concat, min_max, reduce, reshape, slice, to_device, to_dtype, transpose, unary, view};
pub use lm::{lm_forward, lm_init, lm_logits};
pub use tensor::Raw;
pub use train::{adamw_step, scaler_state, unscale, update_scale};

use self::elem::{with_elem, with_float, Elem};
use crate::backend::Init;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// `a @ b`; in bf16 (or the autocast dtype) inside CPU autocast.
pub fn matmul(a: &Raw, b: &Raw) -> Result<Raw> {
    autocast::lower([a, b], |[a, b]| matmul::matmul(a, b))
}

/// `x @ w + b`; in the autocast dtype inside CPU autocast.
pub fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    match b {
        Some(b) => autocast::lower([x, w, b], |[x, w, b]| matmul::linear(x, w, Some(b))),
        None => autocast::lower([x, w], |[x, w]| matmul::linear(x, w, None)),
    }
}

/// Mean cross-entropy; in fp32 inside CPU autocast.
pub fn cross_entropy(logits: &Raw, targets: &Raw) -> Result<Raw> {
    autocast::fp32([logits, targets], |[l, t]| nn::cross_entropy(l, t))
}

pub fn set_num_threads(n: i64) {
    par::set_threads(n as usize);
}

pub use autograd::{is_grad_enabled, set_grad_enabled};

pub fn get_num_threads() -> i64 {
    par::threads() as i64
}

pub fn manual_seed(seed: i64) {
    rng::manual_seed(seed);
}

pub fn fill(shape: &[i64], dtype: DType, init: Init) -> Result<Raw> {
    match init {
        Init::Zeros => Raw::zeros(shape, dtype),
        Init::Ones => ops::full(shape, dtype, 1.0),
        Init::Full(v) => ops::full(shape, dtype, v),
        Init::Randn => {
            let t = Raw::empty(shape, dtype)?;
            rng::randn(&t);
            Ok(t)
        }
    }
}

pub fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType) -> Result<Raw> {
    let t = Raw::empty(shape, dtype)?;
    // SAFETY: a fresh contiguous tensor of exactly `bytes.len()` bytes (checked by the caller).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data_ptr(), bytes.len()) };
    Ok(t)
}

/// A new tensor whose bytes `fill` writes before anyone sees it.
pub fn filled_cpu<E: From<Error>>(
    shape: &[i64],
    dtype: DType,
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<Raw, E> {
    let t = Raw::empty(shape, dtype)?;
    let n = t.numel() * dtype.size();
    // SAFETY: fresh, contiguous, `n` bytes, not shared yet.
    fill(unsafe { std::slice::from_raw_parts_mut(t.data_ptr(), n) })?;
    Ok(t)
}

pub fn shape(t: &Raw) -> Vec<i64> {
    t.shape().to_vec()
}

pub fn dtype(t: &Raw) -> DType {
    t.dtype()
}

pub fn device(_t: &Raw) -> Device {
    Device::Cpu
}

/// The single element as a double (the caller checked numel == 1).
pub fn item(t: &Raw) -> f64 {
    t.get_f64(0)
}

/// Runs `f` on the elements as contiguous bytes: the storage itself when contiguous.
pub fn with_bytes<R>(t: &Raw, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    let c = t.contiguous()?;
    let n = c.numel() * c.dtype().size();
    // SAFETY: contiguous, `n` bytes, alive for the call.
    f(unsafe { std::slice::from_raw_parts(c.data_ptr(), n) })
}

pub fn copy_to(t: &Raw, dst: &mut [u8]) -> Result<()> {
    with_bytes(t, |b| {
        dst.copy_from_slice(b);
        Ok(())
    })
}

pub fn export_view(t: &Raw) -> Result<crate::backend::ExportView<Raw>> {
    if t.requires_grad() {
        crate::bail!(E_AUTOGRAD, "cannot export a tensor that requires grad; export its detach() (as torch.to_dlpack)");
    }
    Ok(memory_view(t))
}

/// Where `t`'s elements are (for code that works on the memory in place,
/// such as c10d's collectives), whether or not it requires grad.
pub fn memory_view(t: &Raw) -> crate::backend::ExportView<Raw> {
    crate::backend::ExportView {
        data: t.data_ptr().cast(),
        shape: t.shape().to_vec(),
        strides: t.strides().to_vec(),
        device: Device::Cpu,
        keep: t.clone(),
    }
}

/// Elements spanned by a strided view (0 when empty).
fn extent(shape: &[i64], strides: &[i64]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    1 + shape.iter().zip(strides).map(|(&d, &s)| ((d - 1) * s) as usize).sum::<usize>()
}

/// A tensor over foreign CPU memory; `release(ctx)` runs once, when it dies.
///
/// # Safety
/// `data` is valid for the view's extent until `release(ctx)` runs.
pub unsafe fn wrap_foreign(
    data: *mut c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DType,
    release: unsafe extern "C" fn(*mut c_void),
    ctx: *mut c_void,
) -> Raw {
    let bytes = extent(shape, strides) * dtype.size();
    // SAFETY: the caller's contract.
    let st = unsafe { storage::Storage::foreign(data.cast(), bytes, release, ctx) };
    Raw::from_parts(Arc::new(st), shape.to_vec(), strides.to_vec(), 0, dtype)
}

unsafe extern "C" fn keep(_ctx: *mut c_void) {}

/// A contiguous copy of foreign CPU memory.
///
/// # Safety
/// As `wrap_foreign`, for the duration of the call.
pub unsafe fn copy_foreign(data: *mut c_void, shape: &[i64], strides: &[i64], dtype: DType) -> Result<Raw> {
    // SAFETY: the view lives only for the copy, which is always a new buffer.
    let view = unsafe { wrap_foreign(data, shape, strides, dtype, keep, std::ptr::null_mut()) };
    ops::clone_contiguous(&view)
}

pub fn shallow(t: &Raw) -> Raw {
    t.clone()
}

pub fn requires_grad(t: &Raw) -> bool {
    t.requires_grad()
}

pub fn zeros_like(t: &Raw) -> Result<Raw> {
    Raw::zeros(t.shape(), t.dtype())
}

// ------------------------------------------------------------------ autograd

pub fn set_requires_grad(x: &Raw) -> Result<()> {
    tensor::set_requires_grad(x);
    Ok(())
}

pub fn backward(loss: &Raw) -> Result<()> {
    autograd::backward(loss)
}

/// A tensor sharing storage with `x.grad`, or `None`.
pub fn grad(x: &Raw) -> Option<Raw> {
    x.0.grad.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(Raw::detached)
}

/// Zeroes `x.grad` in place (`zero_grad(set_to_none=False)`).
pub fn zero_grad(x: &Raw) {
    if let Some(g) = grad(x) {
        fill_in_place(&g, 0.0);
    }
}

fn fill_in_place(t: &Raw, v: f64) {
    let src = ops::full(&[], t.dtype(), v).expect("a 0-dim tensor");
    with_elem!(t.dtype(), T => kernels::copy_into::<T, T>(t, &src));
    t.0.storage.bump_version();
}

pub fn all_finite(x: &Raw) -> Result<bool> {
    if !x.dtype().is_float() {
        return Ok(true);
    }
    let c = x.contiguous()?;
    Ok(with_float!(c.dtype(), T => c.slice::<T>().iter().all(|v| v.up().is_finite()), _ => true))
}

/// `x *= s` in place, as `mul_` with a Python float: computed in the
/// computing type (the float is not rounded to a reduced dtype first).
pub fn scale_(x: &Raw, s: f64) -> Result<()> {
    with_float!(x.dtype(), T => {
        let k = <<T as Elem>::Acc as elem::Arith>::from_f64(s);
        kernels::update::<T>(x, |v| T::down(elem::Arith::mul(v.up(), k)));
    }, _ => crate::bail!(E_DTYPE, "scale: needs a floating tensor, got {}", x.dtype().name()));
    x.0.storage.bump_version();
    Ok(())
}

/// `torch.nn.utils.clip_grad_norm_`: per-grad norms (rounded to each grad's
/// dtype), the norm of those, `coef = clamp(max_norm / (total + 1e-6), max=1)`
/// in the total's dtype, every grad multiplied by it. Returns the total.
pub fn clip_grad_norm(grads: &[&Raw], max_norm: f64, norm_type: f64) -> Result<f64> {
    if grads.is_empty() {
        return Ok(0.0);
    }
    let _no_grad = autograd::NoGrad::new();
    let norm = |vals: &mut dyn Iterator<Item = f64>| -> f64 {
        if norm_type == f64::INFINITY {
            vals.fold(0.0, |m: f64, v| m.max(v.abs()))
        } else if norm_type == 0.0 {
            vals.filter(|v| *v != 0.0).count() as f64
        } else {
            vals.map(|v| v.abs().powf(norm_type)).sum::<f64>().powf(1.0 / norm_type)
        }
    };
    let mut total_dt = grads[0].dtype();
    let mut norms = Vec::with_capacity(grads.len());
    for g in grads {
        let c = g.contiguous()?;
        let n = with_elem!(c.dtype(), T => norm(&mut c.slice::<T>().iter().map(|v| elem::cast::<T, f64>(*v))));
        // Each norm is a tensor of the grad's dtype.
        norms.push(with_elem!(g.dtype(), T => elem::cast::<T, f64>(elem::cast::<f64, T>(n))));
        total_dt = elem::promote_types(total_dt, g.dtype());
    }
    let round = |v: f64| with_elem!(total_dt, T => elem::cast::<T, f64>(elem::cast::<f64, T>(v)));
    let total = round(norm(&mut norms.iter().copied()));
    let coef = round(round(round(total + 1e-6).recip()) * max_norm).min(1.0);
    let k = ops::full(&[], total_dt, coef)?;
    for g in grads {
        let r = ops::binary(crate::vocab::kinds::Binary::Mul, &g.detached(), &k)?;
        with_elem!(r.dtype(), S => with_elem!(g.dtype(), D => kernels::copy_into::<S, D>(g, &r)));
    }
    Ok(total)
}

/// The generator state as a uint8 tensor (the checkpoint's RNG entry), in
/// `torch.get_rng_state()`'s format.
pub fn rng_state() -> Result<Raw> {
    Raw::from_vec::<u8>(&[rng::STATE_BYTES as i64], &rng::state())
}

/// Loads a state saved by either backend (or the 32 bytes of earlier versions).
pub fn set_rng_state(s: &Raw) -> Result<()> {
    if s.dtype() != DType::U8 {
        crate::bail!(E_INVALID_ARG, "an RNG state is a uint8 tensor, got {}", s.dtype().name());
    }
    let c = s.contiguous()?;
    rng::set_state(c.slice::<u8>()).map_err(|e| crate::err!(E_INVALID_ARG, "{e}"))
}
