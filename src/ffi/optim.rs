//! AdamW optimizers (`torch.optim.AdamW` semantics). Optimizer handles retain
//! their parameter tensors until the optimizer is freed.

use std::ffi::{c_char, c_int};

use super::{guard, guard_or, status, str_arg};
use crate::optim::{self, Hyper};
use crate::registry::OPTIMIZERS;

fn hyper(lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> Hyper {
    Hyper { lr, beta1, beta2, eps, weight_decay }
}

/// A new AdamW optimizer over the JSON handle list `params` (one param group).
/// Returns an optimizer handle owned by the caller (free with
/// `enkai_tensor_opt_free`), or 0 with `E_NULL_POINTER`, `E_INVALID_ARG`
/// (bad list, duplicate param, invalid hyperparameter), `E_HANDLE_*`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_opt_adamw_create(params: *const c_char, lr: f64, b1: f64, b2: f64, eps: f64, wd: f64) -> i64 {
    guard(|| optim::create(unsafe { str_arg(params, "params")? }, hyper(lr, b1, b2, eps, wd)))
}

/// One AdamW step of every group, on each param's own `.grad` (params without
/// a grad are skipped). On a sharded optimizer (`enkai_opt_shard`) this is a
/// collective: each rank updates the params it owns, then every rank receives
/// each param from its owner. Returns 0, or 1 with `E_HANDLE_*`, `E_TORCH`,
/// and for a sharded optimizer the `E_DIST_*` codes of the group.
#[no_mangle]
pub extern "C" fn enkai_opt_adamw_step(opt: i64) -> c_int {
    status(|| optim::step(opt))
}

/// Shards the optimizer over the ranks of the process group (ZeRO stage 1, as
/// `torch.distributed.optim.ZeroRedundancyOptimizer`): every param gets an
/// owner rank (largest params first, each to the rank owning the fewest bytes
/// so far, group after group), this rank keeps moments only for the params it
/// owns, and `enkai_opt_adamw_step` / `enkai_opt_param_group_step` update those
/// and then broadcast every param from its owner, so all ranks keep identical
/// params. Every rank must shard its optimizer over the same params. Groups
/// added later are partitioned the same way; `enkai_opt_set_lr` and GradScaler
/// skipping keep their meaning (found-inf is the same on every rank once the
/// grads are all-reduced). Ranked checkpoints save each rank's moments and the
/// partition. Returns 0, or 1 with `E_DIST` (no process group), `E_INVALID_ARG`
/// (already sharded), `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_opt_shard(opt: i64) -> c_int {
    status(|| optim::shard(opt).map(drop))
}

/// The bytes of optimizer state (AdamW moments) this process holds for `opt`,
/// counted from the moment tensors that exist (about 1/world of the unsharded
/// figure on a sharded optimizer). Returns −1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_opt_state_bytes(opt: i64) -> i64 {
    guard_or(-1, || optim::state_bytes(opt))
}

/// Adds a reference to an optimizer handle. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_opt_retain(opt: i64) -> c_int {
    status(|| OPTIMIZERS.retain(opt))
}

/// Drops a reference to an optimizer (or AdamW state) handle; the last one
/// frees its moments and releases its params. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_opt_free(opt: i64) -> c_int {
    status(|| OPTIMIZERS.release(opt))
}

/// Functional AdamW step of `p` with the gradient `g`. `state` 0 creates a
/// state bound to `p` (returned, owned by the caller); otherwise the same
/// `state` handle comes back. Returns 0 on error: `E_INVALID_ARG`, `E_HANDLE_*`, `E_TORCH`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn enkai_tensor_adamw_step(p: i64, g: i64, state: i64, lr: f64, b1: f64, b2: f64, eps: f64, wd: f64) -> i64 {
    guard(|| optim::step_multi(&format!("[{p}]"), &format!("[{g}]"), state, hyper(lr, b1, b2, eps, wd)))
}

/// Functional AdamW step of `params[i]` with `grads[i]` (JSON handle lists of
/// equal length; 0 grads are skipped). `state` as in `enkai_tensor_adamw_step`,
/// bound to this params list. Returns the state handle, or 0 with
/// `E_NULL_POINTER`, `E_INVALID_ARG` (lengths differ, other params), `E_HANDLE_*`, `E_TORCH`.
///
/// # Safety
/// `params` and `grads` are NULL or NUL-terminated strings.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn enkai_tensor_adamw_step_multi(
    params: *const c_char,
    grads: *const c_char,
    state: i64,
    lr: f64,
    b1: f64,
    b2: f64,
    eps: f64,
    wd: f64,
) -> i64 {
    guard(|| {
        let (params, grads) = unsafe { (str_arg(params, "params")?, str_arg(grads, "grads")?) };
        optim::step_multi(params, grads, state, hyper(lr, b1, b2, eps, wd))
    })
}

/// Adds a param group with its own `lr` and weight decay (betas and eps of the
/// first group). Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_opt_add_param_group(opt: i64, params: *const c_char, lr: f64, wd: f64) -> c_int {
    status(|| optim::add_group(opt, unsafe { str_arg(params, "params")? }, lr, wd))
}

/// Sets the learning rate of param group `group` (0-based), for schedules.
/// Returns 0, or 1 with `E_INVALID_ARG` (no such group, bad lr), `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_opt_set_lr(opt: i64, group: i64, lr: f64) -> c_int {
    status(|| optim::set_lr(opt, group, lr))
}

/// One AdamW step of param group `group` only. Returns 0, or 1 with
/// `E_INVALID_ARG`, `E_HANDLE_*`, `E_TORCH`.
#[no_mangle]
pub extern "C" fn enkai_opt_param_group_step(opt: i64, group: i64) -> c_int {
    status(|| optim::group_step(opt, group))
}
