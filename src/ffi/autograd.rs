//! Autograd and gradient utilities. Handle lists are JSON arrays of integers;
//! in the `*_multi` functions a 0 entry is skipped, and every handle is
//! checked before anything changes.

use std::ffi::{c_char, c_int};

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
