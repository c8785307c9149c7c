//! What a backend offers, as traits: the torch backend (`torch::Torch`) and
//! the native one (`native::Native`) implement each, so the compiler checks
//! that both have every function, with one signature. `dispatch` calls them
//! through generics (no `dyn`: each call is monomorphized per backend).
//!
//! The tensors of one call always come from the backend called. Core checks
//! before a call what a backend cannot (byte counts, numel of `item`, a
//! device the backend has: `BackendId::check_device`); the ops it calls
//! first and, on failure, explains from the arguments (`ops::run`), so every
//! function here fails with an `Error`, never a panic, on any argument.
//!
//! Functions only one backend has (libtorch's CUDA, autocast and c10d
//! process groups; the native CPU autocast) are not part of the contract:
//! `dispatch` names them directly.

use smallvec::SmallVec;

use super::{BackendId, ExportView, Init};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::vocab::kinds::Binary;

/// A backend: the type of its tensors. Every other trait builds on it.
pub trait Backend {
    /// A tensor: cheap to share (a handle onto ref-counted storage), used
    /// from several threads through the handle registry.
    type Raw: Send + Sync;
    const ID: BackendId;
}

/// Making tensors.
pub trait Create: Backend {
    /// A new tensor of `shape` on `dev`, its elements set by `init` (`Randn`
    /// draws from the backend's generator).
    fn fill(shape: &[i64], dtype: DType, dev: Device, init: Init) -> Result<Self::Raw>;

    /// A new contiguous tensor on `dev` holding a copy of `bytes` (the caller
    /// checked they are exactly numel × itemsize).
    fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType, dev: Device) -> Result<Self::Raw>;

    /// A new contiguous CPU tensor whose elements `fill` writes (given exactly
    /// numel × itemsize bytes) before anyone else sees it: checkpoint loads
    /// read files straight into storage. `fill`'s error comes back as it is.
    fn filled_cpu<E: From<Error>>(
        shape: &[i64],
        dtype: DType,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<Self::Raw, E>;

    /// A tensor over foreign memory, without a copy. `release(ctx)` runs
    /// exactly once: when the storage dies, or before this returns an error.
    ///
    /// # Safety
    /// `data` is valid for the extent of `shape`/`strides` in `dtype` on `dev`
    /// until `release(ctx)` runs; `shape` and `strides` have equal lengths.
    #[allow(clippy::too_many_arguments)]
    unsafe fn wrap_foreign(
        data: *mut std::ffi::c_void,
        shape: &[i64],
        strides: &[i64],
        dtype: DType,
        dev: Device,
        release: unsafe extern "C" fn(*mut std::ffi::c_void),
        ctx: *mut std::ffi::c_void,
    ) -> Result<Self::Raw>;

    /// A new tensor holding a copy of foreign memory.
    ///
    /// # Safety
    /// As `wrap_foreign`, for the duration of the call.
    unsafe fn copy_foreign(data: *mut std::ffi::c_void, shape: &[i64], strides: &[i64], dtype: DType, dev: Device) -> Result<Self::Raw>;

    /// Zeros of `t`'s shape, dtype and device.
    fn zeros_like(t: &Self::Raw) -> Result<Self::Raw>;

    /// Another handle onto `t` itself (same storage, same autograd identity).
    fn shallow(t: &Self::Raw) -> Self::Raw;
}

/// Reading tensors back.
pub trait Data: Backend {
    fn shape(t: &Self::Raw) -> Vec<i64>;

    /// `shape`, kept off the heap for up to 8 dims.
    fn dims(t: &Self::Raw) -> SmallVec<[i64; 8]>;

    /// Strides and storage offset, in elements (core's checks of views that
    /// reinterpret bytes, as `view_as_complex`).
    fn layout(t: &Self::Raw) -> (SmallVec<[i64; 8]>, i64);

    /// Fails only for a dtype the ABI has no name for.
    fn dtype(t: &Self::Raw) -> Result<DType>;

    fn device(t: &Self::Raw) -> Device;

    /// The single element as a double (the caller checked numel == 1).
    fn item(t: &Self::Raw) -> Result<f64>;

    /// The value of a 0-dim state tensor (the GradScaler's scale or tracker).
    fn scalar_value(t: &Self::Raw) -> Result<f64>;

    /// Copies the elements, contiguous, in the tensor's dtype, into `dst`
    /// (exactly numel × itemsize bytes).
    fn copy_to(t: &Self::Raw, dst: &mut [u8]) -> Result<()>;

    /// Runs `f` on the elements as contiguous CPU bytes: the storage itself
    /// where it can, else a copy that lives for the call.
    fn with_bytes<R>(t: &Self::Raw, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R>;

    /// What a DLPack export shares: the storage through `t`'s own sizes and
    /// strides. Refuses (`E_AUTOGRAD`) a tensor that requires grad, as
    /// `torch.to_dlpack` does.
    fn export_view(t: &Self::Raw) -> Result<ExportView<Self::Raw>>;
}

/// Compute, with autograd recorded where grad mode and the inputs ask for it.
/// Each matches PyTorch's op of the same name (dtype promotion, broadcasting,
/// result dtype); the caller checked dims and ranks.
pub trait Ops: Backend {
    fn binary(op: Binary, a: &Self::Raw, b: &Self::Raw) -> Result<Self::Raw>;
    /// A view sharing `x`'s storage when its strides allow one, else a reshaped copy.
    fn view(x: &Self::Raw, shape: &[i64]) -> Result<Self::Raw>;
    fn slice(x: &Self::Raw, dim: i64, start: i64, end: i64, step: i64) -> Result<Self::Raw>;
    /// Draws from the backend's generator when `train` and `p > 0`.
    fn dropout(x: &Self::Raw, p: f64, train: bool) -> Result<Self::Raw>;
    fn to_device(x: &Self::Raw, dev: Device) -> Result<Self::Raw>;
    fn to_dtype(x: &Self::Raw, dtype: DType) -> Result<Self::Raw>;
    /// The smallest and largest elements (for core's error messages).
    fn min_max(x: &Self::Raw) -> Result<(f64, f64)>;
    fn concat(ts: &[&Self::Raw], dim: i64) -> Result<Self::Raw>;
    /// `torch._masked_softmax`: `mask` nonzero where an element is left out.
    fn masked_softmax(x: &Self::Raw, mask: &Self::Raw, dim: i64, mask_type: Option<i64>) -> Result<Self::Raw>;
    fn masked_softmax_backward(grad: &Self::Raw, out: &Self::Raw, mask: &Self::Raw, dim: i64) -> Result<Self::Raw>;
    /// Over the trailing dims of `w`'s shape.
    fn layernorm(x: &Self::Raw, w: &Self::Raw, b: Option<&Self::Raw>, eps: f64) -> Result<Self::Raw>;
    /// The grads of `x`, `w` (and `b` when given) for the output grad `grad`.
    fn layernorm_backward(x: &Self::Raw, w: &Self::Raw, b: Option<&Self::Raw>, eps: f64, grad: &Self::Raw) -> Result<Vec<Self::Raw>>;
    fn embedding(w: &Self::Raw, ids: &Self::Raw) -> Result<Self::Raw>;
    /// `x @ w + b`, with `w` as `[in, out]`.
    fn linear(x: &Self::Raw, w: &Self::Raw, b: Option<&Self::Raw>) -> Result<Self::Raw>;
    /// The mean cross-entropy of `logits` against class indices.
    fn cross_entropy(logits: &Self::Raw, targets: &Self::Raw) -> Result<Self::Raw>;
    /// `t` with a leading dim of 1: an all-gather over a world of one.
    fn stack_one(t: &Self::Raw) -> Result<Self::Raw>;
    /// Runs a call of the op table that core resolved and checked (its
    /// overload, arguments and inputs); each result goes through `wrap`, so
    /// the usual one or two stay off the heap. `E_UNSUPPORTED` for an
    /// overload this backend has no kernel for.
    fn op<O>(call: &crate::vocab::Call, inputs: &[Option<&Self::Raw>], wrap: impl Fn(Self::Raw) -> O) -> Result<SmallVec<[O; 2]>>;
}

/// Gradients. A tensor's grad is accumulated by `backward`; these read and
/// update it as PyTorch's grad utilities do, under no_grad.
pub trait Autograd: Backend {
    /// `x.requires_grad_(flag)`; clearing it on a tensor a recorded op
    /// computed is refused (`E_AUTOGRAD`), as PyTorch refuses it.
    fn set_requires_grad(x: &Self::Raw, flag: bool) -> Result<()>;
    fn requires_grad(t: &Self::Raw) -> bool;
    /// Back-propagates from a scalar `loss` (the caller checked it is one).
    fn backward(loss: &Self::Raw) -> Result<()>;
    /// A tensor sharing storage with `x.grad`, or `None` when there is none.
    fn grad(x: &Self::Raw) -> Result<Option<Self::Raw>>;
    /// Zeroes `x.grad` in place (`zero_grad(set_to_none=False)`).
    fn zero_grad(x: &Self::Raw) -> Result<()>;
    fn all_finite(x: &Self::Raw) -> Result<bool>;
    /// `x *= s` in place, as `mul_` with a Python float.
    fn scale_(x: &Self::Raw, s: f64) -> Result<()>;
    /// `torch.nn.utils.clip_grad_norm_` on the grads themselves; returns
    /// the total norm before clipping.
    fn clip_grad_norm(grads: &[&Self::Raw], max_norm: f64, norm_type: f64) -> Result<f64>;
    /// `x.detach()`: the same storage, no history, not requiring grad.
    fn detach(x: &Self::Raw) -> Result<Self::Raw>;
    /// The leaves that require grad and that `outs`' histories reach (an
    /// output that is such a leaf included), each once.
    fn graph_leaves(outs: &[&Self::Raw]) -> Result<Vec<Self::Raw>>;
    /// `torch.autograd.backward(outs, grads)`; every `outs[i]` requires
    /// grad and `grads[i]` has its shape.
    fn backward_with(outs: &[&Self::Raw], grads: &[&Self::Raw]) -> Result<()>;
    /// Gives the fresh, history-less `outs` one node over `inputs`, as a
    /// custom `torch.autograd.Function` (when grad mode is on and an input
    /// requires grad; otherwise they are returned as they are). Floating
    /// outputs only get a history.
    fn custom_node(name: &'static str, inputs: &[&Self::Raw], outs: Vec<Self::Raw>, backward: CustomBackward<Self::Raw>) -> Result<Vec<Self::Raw>>;
}

/// A custom node's backward: one gradient per output in (`None` where the
/// backward pass brought none), one per input out (`None`: no gradient).
/// Runs at most once; dropped unrun when the graph is.
pub type CustomBackward<R> = Box<dyn FnOnce(Vec<Option<R>>) -> Result<Vec<Option<R>>> + Send + Sync>;

/// Training state: the optimizer step, the GradScaler, the generator.
pub trait Train: Backend {
    /// One fused AdamW step on `p` and its moments `m`, `v`, in place.
    fn adamw_step(p: &Self::Raw, g: &Self::Raw, m: &Self::Raw, v: &Self::Raw, c: &crate::vocab::optim::AdamwStep) -> Result<()>;
    /// One `torch.optim.Adam` step on `p`, its moments `m`, `v` and, with
    /// amsgrad, the running max `vmax`, in place.
    fn adam_step(p: &Self::Raw, g: &Self::Raw, m: &Self::Raw, v: &Self::Raw, vmax: Option<&Self::Raw>, c: &crate::vocab::optim::AdamStep) -> Result<()>;
    /// One `torch.optim.SGD` step on `p` in place. `buf` is its momentum
    /// buffer, `None` before the first step with momentum: that step makes
    /// it (a clone of the step's direction) and returns it.
    fn sgd_step(p: &Self::Raw, g: &Self::Raw, buf: Option<&Self::Raw>, c: &crate::vocab::optim::SgdStep) -> Result<Option<Self::Raw>>;
    /// A GradScaler's state on `dev`: the 0-dim float32 scale and int32 growth tracker.
    fn scaler_state(scale: f64, tracker: i64, dev: Device) -> Result<(Self::Raw, Self::Raw)>;
    /// The loss times the scale (on the loss's device).
    fn scale_by(loss: &Self::Raw, scale: &Self::Raw) -> Result<Self::Raw>;
    /// `torch._amp_foreach_non_finite_check_and_unscale_`: every grad times
    /// `1/scale`, in place; whether any element was inf or NaN.
    fn unscale(grads: &[&Self::Raw], scale: &Self::Raw) -> Result<bool>;
    /// `torch._amp_update_scale_` on the state tensors, in place.
    fn update_scale(scale: &Self::Raw, tracker: &Self::Raw, found_inf: bool, growth: f64, backoff: f64, interval: i64) -> Result<()>;
    /// The generator's state as a uint8 tensor, in `torch.get_rng_state()`'s format.
    fn rng_state() -> Result<Self::Raw>;
    /// Loads a state `rng_state` of either backend saved.
    fn set_rng_state(state: &Self::Raw) -> Result<()>;
}

/// The GPT of `crate::vocab::gpt` on this backend's ops.
pub trait Lm: Backend {
    /// The parameters of `layout` on `dev`, fp32, requiring grad; the
    /// `Normal` ones drawn in order from a generator seeded with `seed`.
    fn lm_init(layout: &[(Vec<i64>, crate::vocab::gpt::Init)], dev: Device, seed: i64) -> Result<Vec<Self::Raw>>;
    /// The mean cross-entropy loss of the model on `ids` against `targets`.
    fn lm_forward(params: &[&Self::Raw], spec: &crate::vocab::gpt::LmSpec, ids: &Self::Raw, targets: &Self::Raw, training: bool) -> Result<Self::Raw>;
    /// Logits `[batch, seq, vocab]`.
    fn lm_logits(params: &[&Self::Raw], spec: &crate::vocab::gpt::LmSpec, ids: &Self::Raw) -> Result<Self::Raw>;
}

/// Process- and thread-wide settings. Core sets them on every built
/// backend, so the two stay in step.
pub trait Runtime: Backend {
    fn set_num_threads(n: i64);
    /// `None` where the backend cannot tell.
    fn get_num_threads() -> Option<i64>;
    /// This thread's grad mode, as `torch.set_grad_enabled`; returns the previous mode.
    fn set_grad_enabled(on: bool) -> bool;
    /// Seeds the backend's generator.
    fn manual_seed(seed: i64) -> Result<()>;
}

/// The whole contract.
pub trait Contract: Create + Data + Ops + Autograd + Train + Lm + Runtime {}

impl<B: Create + Data + Ops + Autograd + Train + Lm + Runtime> Contract for B {}
