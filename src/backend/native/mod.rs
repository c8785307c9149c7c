//! The native CPU backend, in Rust: strided tensors over cached storage
//! (`tensor`, `storage`), kernels (`kernels`, `matmul`, `fused`) on `gemm`
//! and a fork-join pool of our own (`par`), and a reverse-mode tape (`autograd`). It needs no
//! libtorch; `Native` implements the contract (`backend::contract`) as `torch::Torch` does.

mod attention;
pub mod autocast;
mod autograd;
pub mod elem;
pub mod fused;
mod gemv;
mod kernels;
mod lm;
mod matmul;
mod nn;
mod ops;
pub mod opk;
pub mod par;
mod bf16gemm;
mod qgemm;
pub mod quant;
mod rng;
mod sgemm;
mod simd;
mod storage;
mod tensor;
mod train;

use std::ffi::c_void;
use std::sync::Arc;

pub use tensor::Raw;

use self::elem::{with_elem, with_float, Elem};
use crate::backend::contract::{Autograd, Backend, Create, Data, Lm, Ops, Runtime, Train};
use crate::backend::{BackendId, Init};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::vocab::kinds::Binary;

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

/// This thread's grad mode, which every built backend follows (`Runtime::set_grad_enabled`).
pub use autograd::is_grad_enabled;

/// The backend, as the contract's traits see it (`backend::contract`).
pub struct Native;

impl Backend for Native {
    type Raw = Raw;
    const ID: BackendId = BackendId::Cpu;
}

impl Runtime for Native {
    fn set_num_threads(n: i64) {
        par::set_threads(n as usize);
    }

    fn get_num_threads() -> Option<i64> {
        Some(par::threads() as i64)
    }

    fn set_grad_enabled(on: bool) -> bool {
        autograd::set_grad_enabled(on)
    }

    fn manual_seed(seed: i64) -> Result<()> {
        rng::manual_seed(seed);
        Ok(())
    }
}

// A Cuda `dev` never arrives here (`BackendId::check_device`): every tensor is on the CPU.
impl Create for Native {
    fn fill(shape: &[i64], dtype: DType, _dev: Device, init: Init) -> Result<Raw> {
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

    fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType, _dev: Device) -> Result<Raw> {
        let t = Raw::empty(shape, dtype)?;
        // SAFETY: a fresh contiguous tensor of exactly `bytes.len()` bytes (checked by the caller).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data_ptr(), bytes.len()) };
        Ok(t)
    }

    fn filled_cpu<E: From<Error>>(
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

    unsafe fn wrap_foreign(
        data: *mut c_void,
        shape: &[i64],
        strides: &[i64],
        dtype: DType,
        _dev: Device,
        release: unsafe extern "C" fn(*mut c_void),
        ctx: *mut c_void,
    ) -> Result<Raw> {
        // SAFETY: the caller's contract.
        Ok(unsafe { wrap_cpu(data, shape, strides, dtype, release, ctx) })
    }

    unsafe fn copy_foreign(data: *mut c_void, shape: &[i64], strides: &[i64], dtype: DType, _dev: Device) -> Result<Raw> {
        // SAFETY: the view lives only for the copy, which is always a new buffer.
        let view = unsafe { wrap_cpu(data, shape, strides, dtype, keep, std::ptr::null_mut()) };
        ops::clone_contiguous(&view)
    }

    fn zeros_like(t: &Raw) -> Result<Raw> {
        Raw::zeros(t.shape(), t.dtype())
    }

    fn shallow(t: &Raw) -> Raw {
        t.clone()
    }
}

impl Data for Native {
    fn shape(t: &Raw) -> Vec<i64> {
        t.shape().to_vec()
    }

    fn dims(t: &Raw) -> smallvec::SmallVec<[i64; 8]> {
        t.shape().into()
    }

    fn layout(t: &Raw) -> (smallvec::SmallVec<[i64; 8]>, i64) {
        (t.strides().into(), t.0.offset as i64)
    }

    fn dtype(t: &Raw) -> Result<DType> {
        Ok(t.dtype())
    }

    fn device(_t: &Raw) -> Device {
        Device::Cpu
    }

    fn item(t: &Raw) -> Result<f64> {
        Ok(t.get_f64(0))
    }

    fn scalar_value(t: &Raw) -> Result<f64> {
        Ok(t.get_f64(0))
    }

    fn copy_to(t: &Raw, dst: &mut [u8]) -> Result<()> {
        Self::with_bytes(t, |b| {
            dst.copy_from_slice(b);
            Ok(())
        })
    }

    /// The storage itself when contiguous.
    fn with_bytes<R>(t: &Raw, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
        let c = t.contiguous()?;
        let n = c.numel() * c.dtype().size();
        // SAFETY: contiguous, `n` bytes, alive for the call.
        f(unsafe { std::slice::from_raw_parts(c.data_ptr(), n) })
    }

    fn export_view(t: &Raw) -> Result<crate::backend::ExportView<Raw>> {
        if t.requires_grad() {
            crate::bail!(E_AUTOGRAD, "cannot export a tensor that requires grad; export its detach() (as torch.to_dlpack)");
        }
        Ok(memory_view(t))
    }
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
unsafe fn wrap_cpu(
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

impl Ops for Native {
    fn binary(op: Binary, a: &Raw, b: &Raw) -> Result<Raw> {
        ops::binary(op, a, b)
    }
    fn view(x: &Raw, shape: &[i64]) -> Result<Raw> {
        ops::view(x, shape)
    }
    fn slice(x: &Raw, dim: i64, start: i64, end: i64, step: i64) -> Result<Raw> {
        ops::slice(x, dim, start, end, step)
    }
    fn dropout(x: &Raw, p: f64, train: bool) -> Result<Raw> {
        nn::dropout(x, p, train)
    }
    fn to_device(x: &Raw, dev: Device) -> Result<Raw> {
        ops::to_device(x, dev)
    }
    fn to_dtype(x: &Raw, dtype: DType) -> Result<Raw> {
        ops::to_dtype(x, dtype)
    }
    fn min_max(x: &Raw) -> Result<(f64, f64)> {
        ops::min_max(x)
    }
    fn concat(ts: &[&Raw], dim: i64) -> Result<Raw> {
        ops::concat(ts, dim)
    }
    fn masked_softmax(x: &Raw, mask: &Raw, dim: i64, mask_type: Option<i64>) -> Result<Raw> {
        nn::masked_softmax(x, mask, dim, mask_type)
    }
    fn masked_softmax_backward(grad: &Raw, out: &Raw, mask: &Raw, dim: i64) -> Result<Raw> {
        nn::masked_softmax_backward(grad, out, mask, dim)
    }
    fn layernorm(x: &Raw, w: &Raw, b: Option<&Raw>, eps: f64) -> Result<Raw> {
        nn::layernorm(x, w, b, eps)
    }
    fn layernorm_backward(x: &Raw, w: &Raw, b: Option<&Raw>, eps: f64, grad: &Raw) -> Result<Vec<Raw>> {
        nn::layernorm_backward(x, w, b, eps, grad)
    }
    fn embedding(w: &Raw, ids: &Raw) -> Result<Raw> {
        nn::embedding(w, ids)
    }
    fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
        linear(x, w, b)
    }
    fn cross_entropy(logits: &Raw, targets: &Raw) -> Result<Raw> {
        cross_entropy(logits, targets)
    }
    fn stack_one(t: &Raw) -> Result<Raw> {
        let mut s = t.shape().to_vec();
        s.insert(0, 1);
        ops::reshape(t, &s)
    }
    fn op<O>(call: &crate::vocab::Call, inputs: &[Option<&Raw>], wrap: impl Fn(Raw) -> O) -> Result<smallvec::SmallVec<[O; 2]>> {
        opk::run(call, inputs).map(|v| v.into_iter().map(wrap).collect())
    }
}

impl Autograd for Native {
    fn set_requires_grad(x: &Raw, flag: bool) -> Result<()> {
        tensor::set_requires_grad(x, flag)
    }

    fn requires_grad(t: &Raw) -> bool {
        t.requires_grad()
    }

    fn backward(loss: &Raw) -> Result<()> {
        autograd::backward(loss)
    }

    fn grad(x: &Raw) -> Result<Option<Raw>> {
        Ok(x.0.grad.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(Raw::detached))
    }

    fn zero_grad(x: &Raw) -> Result<()> {
        match Self::grad(x)? {
            Some(g) => fill_in_place(&g, 0.0),
            None => Ok(()),
        }
    }

    fn detach(x: &Raw) -> Result<Raw> {
        Ok(x.detached())
    }

    fn graph_leaves(outs: &[&Raw]) -> Result<Vec<Raw>> {
        Ok(autograd::graph_leaves(outs))
    }

    fn backward_with(outs: &[&Raw], grads: &[&Raw]) -> Result<()> {
        autograd::backward_with(outs, grads)
    }

    fn custom_node(name: &'static str, inputs: &[&Raw], outs: Vec<Raw>, backward: crate::backend::contract::CustomBackward<Raw>) -> Result<Vec<Raw>> {
        autograd::custom_node(name, inputs, outs, backward)
    }

    fn all_finite(x: &Raw) -> Result<bool> {
        if !x.dtype().is_float() {
            return Ok(true);
        }
        let c = x.contiguous()?;
        Ok(with_float!(c.dtype(), T => c.slice::<T>().iter().all(|v| v.up().is_finite()), _ => true))
    }

    /// Computed in the computing type (the float is not rounded to a reduced dtype first).
    fn scale_(x: &Raw, s: f64) -> Result<()> {
        with_float!(x.dtype(), T => {
            let k = <<T as Elem>::Acc as elem::Arith>::from_f64(s);
            kernels::update::<T>(x, |v| T::down(elem::Arith::mul(v.up(), k)));
        }, _ => crate::bail!(E_DTYPE, "scale: needs a floating tensor, got {}", x.dtype().name()));
        x.0.storage.bump_version();
        Ok(())
    }

    /// Per-grad norms (rounded to each grad's dtype), the norm of those,
    /// `coef = clamp(max_norm / (total + 1e-6), max=1)` in the total's dtype,
    /// every grad multiplied by it.
    fn clip_grad_norm(grads: &[&Raw], max_norm: f64, norm_type: f64) -> Result<f64> {
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
            let r = ops::binary(Binary::Mul, &g.detached(), &k)?;
            with_elem!(r.dtype(), S => with_elem!(g.dtype(), D => kernels::copy_into::<S, D>(g, &r)));
        }
        Ok(total)
    }
}

fn fill_in_place(t: &Raw, v: f64) -> Result<()> {
    let src = ops::full(&[], t.dtype(), v)?;
    with_elem!(t.dtype(), T => kernels::copy_into::<T, T>(t, &src));
    t.0.storage.bump_version();
    Ok(())
}

impl Train for Native {
    fn adam_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, vmax: Option<&Raw>, c: &crate::vocab::optim::AdamStep) -> Result<()> {
        train::adam_step(p, g, m, v, vmax, c)
    }

    fn sgd_step(p: &Raw, g: &Raw, buf: Option<&Raw>, c: &crate::vocab::optim::SgdStep) -> Result<Option<Raw>> {
        train::sgd_step(p, g, buf, c)
    }

    fn adamw_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, c: &crate::vocab::optim::AdamwStep) -> Result<()> {
        train::adamw_step(p, g, m, v, c)
    }

    fn scaler_state(scale: f64, tracker: i64, _dev: Device) -> Result<(Raw, Raw)> {
        train::scaler_state(scale, tracker)
    }

    fn scale_by(loss: &Raw, scale: &Raw) -> Result<Raw> {
        ops::binary(Binary::Mul, loss, scale)
    }

    fn unscale(grads: &[&Raw], scale: &Raw) -> Result<bool> {
        train::unscale(grads, scale)
    }

    fn update_scale(scale: &Raw, tracker: &Raw, found_inf: bool, growth: f64, backoff: f64, interval: i64) -> Result<()> {
        train::update_scale(scale, tracker, found_inf, growth, backoff, interval)
    }

    fn rng_state() -> Result<Raw> {
        Raw::from_vec::<u8>(&[rng::STATE_BYTES as i64], &rng::state())
    }

    /// Also takes the 32 bytes of earlier versions.
    fn set_rng_state(s: &Raw) -> Result<()> {
        if s.dtype() != DType::U8 {
            crate::bail!(E_INVALID_ARG, "an RNG state is a uint8 tensor, got {}", s.dtype().name());
        }
        let c = s.contiguous()?;
        rng::set_state(c.slice::<u8>()).map_err(|e| crate::err!(E_INVALID_ARG, "{e}"))
    }
}

impl Lm for Native {
    fn lm_init(layout: &[(Vec<i64>, crate::vocab::gpt::Init)], _dev: Device, seed: i64) -> Result<Vec<Raw>> {
        lm::lm_init(layout, seed)
    }

    fn lm_forward(params: &[&Raw], spec: &crate::vocab::gpt::LmSpec, ids: &Raw, targets: &Raw, training: bool) -> Result<Raw> {
        lm::lm_forward(params, spec, ids, targets, training)
    }

    fn lm_logits(params: &[&Raw], spec: &crate::vocab::gpt::LmSpec, ids: &Raw) -> Result<Raw> {
        lm::lm_logits(params, spec, ids)
    }
}
