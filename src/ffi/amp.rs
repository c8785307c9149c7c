//! Mixed precision: GradScaler handles (`torch.amp.GradScaler` rules) and
//! per-thread autocast regions.

use std::ffi::{c_char, c_int};

use super::{guard, out_arg, status, str_arg};
use crate::amp;
use crate::registry::SCALERS;

/// A new GradScaler (PyTorch defaults: 65536, 2.0, 0.5, 2000). The scale is
/// kept in float32 as PyTorch keeps it, so `init_scale` must be a finite,
/// non-zero float32. Returns a handle owned by the caller, or 0 with `E_AMP_INVALID_SCALE`,
/// `E_AMP_INVALID_GROWTH_FACTOR`, `E_AMP_INVALID_BACKOFF_FACTOR`, `E_AMP_INVALID_GROWTH_INTERVAL`.
#[no_mangle]
pub extern "C" fn enkai_amp_scaler_create(init_scale: f64, growth: f64, backoff: f64, interval: i64) -> i64 {
    guard(|| amp::scaler_create(init_scale, growth, backoff, interval))
}

/// Adds a reference to a scaler handle. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_amp_scaler_retain(scaler: i64) -> c_int {
    status(|| SCALERS.retain(scaler))
}

/// Drops a reference to a scaler handle. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_amp_scaler_free(scaler: i64) -> c_int {
    status(|| SCALERS.release(scaler))
}

/// `loss * scale`: a new tensor handle owned by the caller, or 0 with `E_HANDLE_*`, `E_TORCH`.
#[no_mangle]
pub extern "C" fn enkai_amp_scale_loss(loss: i64, scaler: i64) -> i64 {
    guard(|| amp::scale_loss(loss, scaler))
}

/// Multiplies the listed grads (JSON handle list, 0 entries skipped) in place
/// by 1/scale and writes 1 to `*found_inf` if any was non-finite, else 0 —
/// finding an inf is not an error. Returns 0, or 1 with `E_AMP_STATE`
/// (already unscaled since the last update), `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`.
///
/// # Safety
/// `grads` is NULL or a NUL-terminated string; `found_inf` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_amp_unscale_grads(grads: *const c_char, scaler: i64, found_inf: *mut c_int) -> c_int {
    status(|| {
        let out = unsafe { out_arg(found_inf, "found_inf")? };
        *out = amp::unscale_grads(unsafe { str_arg(grads, "grads")? }, scaler)? as c_int;
        Ok(())
    })
}

/// Updates the scale: × backoff when `found_inf` is non-zero (or unscaling
/// found one), × growth after `growth_interval` clean updates, as PyTorch.
/// Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_amp_scaler_update(scaler: i64, found_inf: c_int) -> c_int {
    status(|| amp::update(scaler, found_inf != 0))
}

/// The current scale, or NaN with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_amp_scaler_get_scale(scaler: i64) -> f64 {
    guard(|| amp::get_scale(scaler))
}

/// Opens an autocast region on this thread: matmul/linear and the other ops
/// PyTorch's autocast lists run in bf16 on the CPU and fp16 on CUDA, for
/// tensors of either backend (the native one applies PyTorch's CPU rules:
/// matmul/linear in bf16, cross_entropy in fp32). Nestable; close with
/// `enkai_autocast_exit`. Returns 0, or 1 with `E_BACKEND_UNAVAILABLE`.
#[no_mangle]
pub extern "C" fn enkai_autocast_enter() -> c_int {
    status(amp::enter)
}

/// Closes the innermost autocast region of this thread, restoring the state
/// before it. Returns 0, or 1 with `E_AMP_STATE` (no open region).
#[no_mangle]
pub extern "C" fn enkai_autocast_exit() -> c_int {
    status(amp::exit)
}

/// Opens an autocast region for the device type of `dev` only, computing in
/// `dtype` (`fp16` or `bf16`). Returns 0, or 1 with `E_HANDLE_*`, `E_DTYPE`,
/// `E_INVALID_ARG`, `E_NULL_POINTER`.
///
/// # Safety
/// `dtype` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_autocast_enter_device(dev: i64, dtype: *const c_char) -> c_int {
    status(|| amp::enter_device(dev, unsafe { str_arg(dtype, "dtype")? }))
}

/// One mixed-precision training step: scale `loss`, backward, unscale the
/// grads of `params`, AdamW-step `opt` unless a grad is non-finite, update
/// the scale. Returns 0 when stepped, 2 when skipped for an inf, 1 on error:
/// `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`, `E_AUTOGRAD`, `E_AMP_STATE`,
/// `E_DTYPE`, `E_TORCH`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_amp_step(loss: i64, scaler: i64, params: *const c_char, opt: i64) -> c_int {
    guard(|| Ok(if amp::step(loss, scaler, unsafe { str_arg(params, "params")? }, opt)? { 2 } else { 0 }))
}
