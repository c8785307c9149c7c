//! Optimizers with PyTorch's semantics: AdamW (`torch.optim.AdamW`), Adam
//! (`torch.optim.Adam`) and SGD (`torch.optim.SGD`), and learning-rate
//! schedules. Optimizer handles retain their parameter tensors until the
//! optimizer is freed.

use std::ffi::{c_char, c_int};

use super::{guard, guard_or, out_arg, status, str_arg};
use crate::optim::{self, AdamHyper, Hyper, Hypers, SgdHyper};
use crate::registry::OPTIMIZERS;
use crate::vocab::optim::Schedule;

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
    guard(|| optim::create(unsafe { str_arg(params, "params")? }, Hypers::AdamW(hyper(lr, b1, b2, eps, wd))))
}

/// A new SGD optimizer over the JSON handle list `params` (one param group),
/// `torch.optim.SGD` semantics: `d = grad + weight_decay * param`; with
/// `momentum` > 0 a momentum buffer (a clone of the first step's `d`, then
/// `buf = momentum * buf + (1 - dampening) * d`), and `d = buf`, or with
/// `nesterov` (1) `d = d + momentum * buf`; `param -= lr * d`. Buffers are in
/// each param's dtype and device. Returns an optimizer handle owned by the
/// caller (free with `enkai_tensor_opt_free`), or 0 with `E_NULL_POINTER`,
/// `E_INVALID_ARG` (bad list, duplicate param, invalid hyperparameter in
/// PyTorch's words, e.g. "Invalid learning rate: -1.0", or nesterov without
/// momentum or with dampening; `nesterov` not 0 or 1), `E_HANDLE_*`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_opt_sgd_create(params: *const c_char, lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: c_int) -> i64 {
    guard(|| {
        let params = unsafe { str_arg(params, "params")? };
        let nesterov = flag(nesterov, "nesterov")?;
        optim::create(params, Hypers::Sgd(SgdHyper { lr, momentum, dampening, weight_decay, nesterov }))
    })
}

/// A new Adam optimizer over the JSON handle list `params` (one param group),
/// `torch.optim.Adam` semantics (its single-tensor path): coupled L2 weight
/// decay (`grad + weight_decay * param` feeds the moments), bias-corrected
/// moments, eps added after the square root, and with `amsgrad` (1) the
/// running max of the second moment as the denominator. Moments are in each
/// param's dtype and device. Returns an optimizer handle owned by the caller
/// (free with `enkai_tensor_opt_free`), or 0 with `E_NULL_POINTER`,
/// `E_INVALID_ARG` (bad list, duplicate param, invalid hyperparameter in
/// PyTorch's words; `amsgrad` not 0 or 1), `E_HANDLE_*`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_opt_adam_create(params: *const c_char, lr: f64, b1: f64, b2: f64, eps: f64, weight_decay: f64, amsgrad: c_int) -> i64 {
    guard(|| {
        let params = unsafe { str_arg(params, "params")? };
        let amsgrad = flag(amsgrad, "amsgrad")?;
        optim::create(params, Hypers::Adam(AdamHyper { lr, beta1: b1, beta2: b2, eps, weight_decay, amsgrad }))
    })
}

/// A C boolean that must be 0 or 1.
fn flag(v: c_int, name: &str) -> crate::error::Result<bool> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(crate::err!(E_INVALID_ARG, "{name} must be 0 or 1, got {v}")),
    }
}

/// One step of every group of an optimizer of any kind (AdamW, Adam, SGD),
/// on each param's own `.grad` (params without a grad are skipped, their
/// state untouched). On a sharded optimizer (`enkai_opt_shard`) this is a
/// collective: each rank updates the params it owns, then every rank receives
/// each param from its owner. Returns 0, or 1 with `E_HANDLE_*`, `E_SHAPE` /
/// `E_DTYPE` (a grad unlike its param), `E_TORCH`, and for a sharded
/// optimizer the `E_DIST_*` codes of the group.
#[no_mangle]
pub extern "C" fn enkai_opt_step(opt: i64) -> c_int {
    status(|| optim::step(opt))
}

/// `enkai_opt_step` under its first name: steps an optimizer of any kind.
/// Returns 0, or 1 with the codes of `enkai_opt_step`.
#[no_mangle]
pub extern "C" fn enkai_opt_adamw_step(opt: i64) -> c_int {
    status(|| optim::step(opt))
}

/// The learning rate of schedule `spec` after `step` scheduler steps (0: the
/// lr the schedule starts with) for an optimizer created with `base_lr`,
/// written to `*out_lr`; the caller applies it with `enkai_opt_set_lr`.
/// `spec` is a JSON object:
/// `{"kind":"step","step_size":N,"gamma":g}` (`torch.optim.lr_scheduler.StepLR`),
/// `{"kind":"linear_warmup","warmup_steps":W,"start_factor":f}` (`LinearLR(f, 1.0, W)`:
/// from `f * base_lr` up to `base_lr` over W steps, then constant),
/// `{"kind":"cosine","warmup_steps":W,"total_steps":T,"min_lr":m}` (transformers'
/// `get_cosine_with_min_lr_schedule_with_warmup`: linear from 0 over W steps,
/// then a half cosine from `base_lr` down to `m` at step T; like it, not
/// clamped after T). Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`
/// (bad JSON, unknown kind or field, out-of-range value, negative step or
/// base_lr); `*out_lr` is written only on success.
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string; `out_lr` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_lr_schedule(spec: *const c_char, step: i64, base_lr: f64, out_lr: *mut f64) -> c_int {
    status(|| {
        let out = unsafe { out_arg(out_lr, "out_lr")? };
        *out = Schedule::parse(unsafe { str_arg(spec, "spec")? })?.lr_at(step, base_lr)?;
        Ok(())
    })
}

/// Shards the optimizer over the ranks of the process group (ZeRO stage 1, as
/// `torch.distributed.optim.ZeroRedundancyOptimizer`): every param gets an
/// owner rank (largest params first, each to the rank owning the fewest bytes
/// so far, group after group), this rank keeps state (moments, momentum
/// buffers) only for the params it owns, and `enkai_opt_step` /
/// `enkai_opt_adamw_step` / `enkai_opt_param_group_step` update those
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

/// The bytes of optimizer state (moments, momentum buffers) this process holds
/// for `opt`, counted from the state tensors that exist (about 1/world of the unsharded
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
/// frees its state and releases its params. Returns 0, or 1 with `E_HANDLE_*`.
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
/// `E_NULL_POINTER`, `E_INVALID_ARG` (lengths differ, other params, a state
/// that is an SGD or Adam optimizer), `E_HANDLE_*`, `E_TORCH`.
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

/// Adds a param group with its own `lr` and weight decay; the other
/// hyperparameters are the optimizer's (its first group's), as
/// `add_param_group` fills in PyTorch's defaults: betas, eps and amsgrad
/// (AdamW, Adam), momentum, dampening and nesterov (SGD). Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`, `E_HANDLE_*`.
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

/// One step of param group `group` only (any kind of optimizer). Returns 0, or 1 with
/// `E_INVALID_ARG`, `E_HANDLE_*`, `E_TORCH`.
#[no_mangle]
pub extern "C" fn enkai_opt_param_group_step(opt: i64, group: i64) -> c_int {
    status(|| optim::group_step(opt, group))
}
