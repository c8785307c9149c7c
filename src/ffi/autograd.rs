//! Autograd and gradient utilities. Handle lists are JSON arrays of integers;
//! in the `*_multi` functions a 0 entry is skipped, and every handle is
//! checked before anything changes.

use std::ffi::{c_char, c_int, c_void};

use super::{guard, guard_or, out_arg, status, str_arg, OutStr};
use crate::{autograd, json};

/// Marks `t` (floating) as a leaf that records gradients. Returns `t` itself —
/// no new reference — or 0 with `E_HANDLE_*`, `E_DTYPE`, `E_AUTOGRAD` (not a leaf).
#[no_mangle]
pub extern "C" fn enkai_tensor_require_grad(t: i64) -> i64 {
    guard(|| autograd::require_grad(t))
}

/// `t.requires_grad_(requires_grad)`: non-zero is `enkai_tensor_require_grad`;
/// zero freezes a leaf, as PyTorch's `param.requires_grad_(False)` (ops
/// record nothing for it, `backward` leaves its grad as it was, optimizers
/// skip it while it has none). Returns 0, or 1 with `E_HANDLE_*`, `E_DTYPE`
/// (setting it on a non-floating tensor), `E_AUTOGRAD` (clearing it on a
/// tensor computed by recorded ops: detach that instead).
#[no_mangle]
pub extern "C" fn enkai_tensor_requires_grad_(t: i64, requires_grad: c_int) -> c_int {
    status(|| autograd::set_requires_grad(t, requires_grad != 0))
}

/// Whether `t` records gradients (`t.requires_grad`): 1 or 0, or -1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_requires_grad(t: i64) -> c_int {
    guard_or(-1, || autograd::requires_grad(t).map(c_int::from))
}

/// Backpropagates from the one-element `loss`; grads accumulate into leaves
/// as in PyTorch. The graph is freed afterwards. Returns 0, or 1 with
/// `E_AUTOGRAD` (not one element, no graph, graph already freed), `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_backward(loss: i64) -> c_int {
    status(|| autograd::backward(loss))
}

/// A new handle (owned by the caller) sharing storage with `t.grad`, or 0
/// with no error when `t` has no grad. On error 0 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_grad(t: i64) -> i64 {
    guard(|| autograd::grad(t))
}

/// Writes a JSON array with one new grad handle per entry of `params` (0 where
/// there is no grad) to `*out` (malloc'ed; free with `enkai_tensor_string_free`).
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*` (nothing created).
///
/// # Safety
/// `params` is NULL or a NUL-terminated string; `out`, `out_len` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_grad_multi(params: *const c_char, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        let grads = autograd::grad_multi(unsafe { str_arg(params, "params")? })?;
        out.write(&json::write_int_list(&grads))
    })
}

/// Zeroes `t.grad` in place if it has one. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_zero_grad(t: i64) -> c_int {
    status(|| autograd::zero_grad(t))
}

/// `enkai_tensor_zero_grad` for each handle of the JSON list `params`.
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_zero_grad_multi(params: *const c_char) -> c_int {
    status(|| autograd::zero_grad_multi(unsafe { str_arg(params, "params")? }))
}

/// Returns 0 when every listed tensor is finite, else 1 with `E_NOT_FINITE`
/// naming the first offending handle (or `E_INVALID_ARG`, `E_HANDLE_*`).
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_check_finite_multi(handles: *const c_char) -> c_int {
    status(|| autograd::check_finite_multi(unsafe { str_arg(handles, "handles")? }))
}

/// Multiplies each listed tensor by `scale` in place. Returns 0, or 1 with
/// `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`.
///
/// # Safety
/// `grads` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_scale_grads_multi(grads: *const c_char, scale: f64) -> c_int {
    status(|| autograd::scale_grads_multi(unsafe { str_arg(grads, "grads")? }, scale))
}

/// `torch.nn.utils.clip_grad_norm_(grads, max_norm, norm_type)`: scales the
/// listed grads in place by `min(1, max_norm / (total + 1e-6))` and writes the
/// pre-clip total norm to `*out_total`. `norm_type` > 0 (`INFINITY` for max-abs).
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`.
///
/// # Safety
/// `grads` is NULL or a NUL-terminated string; `out_total` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_clip_grad_norm_multi(
    grads: *const c_char,
    max_norm: f64,
    norm_type: f64,
    out_total: *mut f64,
) -> c_int {
    status(|| {
        let out = unsafe { out_arg(out_total, "out_total")? };
        *out = autograd::clip_grad_norm_multi(unsafe { str_arg(grads, "grads")? }, max_norm, norm_type)?;
        Ok(())
    })
}

/// Turns gradient recording on (`enabled` = 1) or off (0) for the calling
/// thread, as `torch.set_grad_enabled`: while it is off, ops record no graph
/// on either backend, so their results do not require grad and hold no
/// activations for a backward (inference); a backward of a graph recorded
/// earlier still runs. Every thread starts with it on. Returns the previous
/// mode (1 or 0), or -1 with `E_INVALID_ARG` when `enabled` is neither 0 nor 1.
#[no_mangle]
pub extern "C" fn enkai_set_grad_enabled(enabled: c_int) -> c_int {
    super::guard_or(-1, || autograd::set_grad_enabled(enabled).map(c_int::from))
}

/// 1 when gradient recording is on for the calling thread, else 0
/// (`torch.is_grad_enabled()`). Never fails.
#[no_mangle]
pub extern "C" fn enkai_is_grad_enabled() -> c_int {
    guard(|| Ok(c_int::from(autograd::is_grad_enabled())))
}

/// The function of a checkpointed span (`enkai_grad_checkpoint`): reads the
/// borrowed handles `inputs` and writes up to `cap` output handles to
/// `out`, each a new reference that passes to the library (as `enkai_op`
/// writes them); returns how many, or -1 on failure (the last error it
/// left, if any, is reported).
pub type EnkaiCheckpointFn = Option<unsafe extern "C" fn(ctx: *mut c_void, inputs: *const i64, n_inputs: usize, out: *mut i64, cap: usize) -> i64>;

/// Called once with `ctx` when the library no longer needs a checkpointed
/// span's function and context.
pub type EnkaiReleaseFn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// The caller's function and context, called from whichever thread runs
/// the backward pass (the caller's contract, see `enkai_grad_checkpoint`);
/// `release(ctx)` runs when the last copy of the span is dropped.
struct Span {
    f: unsafe extern "C" fn(*mut c_void, *const i64, usize, *mut i64, usize) -> i64,
    release: EnkaiReleaseFn,
    ctx: *mut c_void,
    cap: usize,
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(r) = self.release {
            // SAFETY: the caller's release function, run once with its context.
            unsafe { r(self.ctx) };
        }
    }
}

// SAFETY: `enkai_grad_checkpoint` makes the caller promise that `f` and
// `ctx` may be used from the thread that runs the backward pass.
unsafe impl Send for Span {}
unsafe impl Sync for Span {}

impl Span {
    fn call(&self, inputs: &[i64]) -> crate::error::Result<Vec<i64>> {
        let mut out = vec![0i64; self.cap];
        crate::error::clear();
        // SAFETY: the caller's function, with `inputs.len()` handles and `cap` slots.
        let n = unsafe { (self.f)(self.ctx, inputs.as_ptr(), inputs.len(), out.as_mut_ptr(), self.cap) };
        let failed = crate::error::last();
        crate::error::clear();
        match usize::try_from(n) {
            Ok(n) if n <= self.cap => {
                out.truncate(n);
                Ok(out)
            }
            Ok(n) => crate::bail!(E_INVALID_ARG, "checkpoint: the function returned {n} outputs, more than cap {}", self.cap),
            Err(_) => Err(match failed {
                Some(e) => crate::error::Error::new(e.code, format!("checkpoint: the function failed: {}", e.detail)),
                None => crate::err!(E_INVALID_ARG, "checkpoint: the function returned {n} without an error set"),
            }),
        }
    }
}

/// `torch.utils.checkpoint.checkpoint(fn, *inputs)`: runs
/// `fn(ctx, inputs, n_inputs, out, cap)` and writes its outputs to `out`
/// (new handles owned by the caller), keeping none of the activations
/// inside the span. The backward pass runs `fn` once more, on detached
/// copies of the inputs, with the generator state and autocast settings of
/// the first run, and back-propagates through that run: the gradients
/// equal those without checkpointing. The leaves `fn` uses without
/// receiving them (weights it reaches through `ctx`) get their gradients
/// too, as with PyTorch's `use_reentrant=False`. Outside grad mode `fn`
/// just runs. Returns the number of outputs, or -1 with `E_NULL_POINTER`
/// (`fn`, or `inputs`/`out` with a non-zero count), `E_HANDLE_*`,
/// `E_BACKEND_MISMATCH`, `E_INVALID_ARG` (`fn` returned more than `cap`
/// outputs or a bad handle, or -1 with no error set); when `fn` fails with
/// an error set, that error's code, its detail quoted. A failure of the
/// second run is `E_AUTOGRAD` from the backward call.
///
/// `release` (may be NULL) is called once with `ctx` when the library no
/// longer needs `fn` and `ctx`: when the backward pass has run, when the
/// outputs' graph is freed unrun, or before this call returns when nothing
/// needs the span again (an error, grad mode off, no input or leaf that
/// requires grad). It may run on any thread.
///
/// # Safety
/// `inputs` points to `n_inputs` handles and `out` to `cap` writable slots
/// (either may be NULL when its count is 0). `fn` and `ctx` stay valid, and
/// callable from the thread that runs the backward pass, until `release`
/// is called (with a NULL `release`: until the outputs' graph is freed);
/// `fn` computes the same outputs on both runs.
#[no_mangle]
pub unsafe extern "C" fn enkai_grad_checkpoint(
    f: EnkaiCheckpointFn,
    release: EnkaiReleaseFn,
    ctx: *mut c_void,
    inputs: *const i64,
    n_inputs: usize,
    out: *mut i64,
    cap: usize,
) -> i64 {
    guard_or(-1, || {
        // From here on `span` (or its drop) owns the release.
        let Some(f) = f else {
            drop(Span { f: never, release, ctx, cap: 0 });
            crate::bail!(E_NULL_POINTER, "fn is NULL")
        };
        let span = Span { f, release, ctx, cap };
        let inputs = unsafe { super::bytes_arg(inputs, n_inputs, "inputs")? };
        if out.is_null() && cap > 0 {
            crate::bail!(E_NULL_POINTER, "out is NULL but cap is {cap}");
        }
        let outs = autograd::checkpoint(std::sync::Arc::new(move |ins: &[i64]| span.call(ins)), inputs)?;
        // SAFETY: `out` has `cap` slots, and `checkpoint` returns at most `cap` handles.
        unsafe { std::ptr::copy_nonoverlapping(outs.as_ptr(), out, outs.len()) };
        Ok(outs.len() as i64)
    })
}

/// Stands in for a NULL span function, so its release still runs once.
unsafe extern "C" fn never(_: *mut c_void, _: *const i64, _: usize, _: *mut i64, _: usize) -> i64 {
    -1
}
