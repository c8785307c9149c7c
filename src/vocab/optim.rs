//! AdamW's hyperparameters and the scalars of one step, and GradScaler's
//! update rule: computed in core or run by each backend's kernels, written once.

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Hyper {
    /// The checks `torch.optim.AdamW.__init__` makes.
    pub fn validate(self) -> Result<Hyper> {
        let Hyper { lr, beta1, beta2, eps, weight_decay } = self;
        if lr.is_nan() || lr < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid learning rate: {lr}");
        }
        if eps.is_nan() || eps < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid epsilon value: {eps}");
        }
        if !(0.0..1.0).contains(&beta1) {
            crate::bail!(E_INVALID_ARG, "Invalid beta parameter at index 0: {beta1}");
        }
        if !(0.0..1.0).contains(&beta2) {
            crate::bail!(E_INVALID_ARG, "Invalid beta parameter at index 1: {beta2}");
        }
        if weight_decay.is_nan() || weight_decay < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid weight_decay value: {weight_decay}");
        }
        Ok(self)
    }
}

/// The scalars of one `_single_tensor_adamw` step (what `torch.optim.AdamW`
/// runs for CPU tensors), computed in double as PyTorch's Python computes
/// them. Backends apply, in this order:
/// `param.mul_(decay)` (skipped when `decay == 1`, i.e. no weight decay),
/// `exp_avg.lerp_(grad, lerp)`, `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, sq_weight)`,
/// `denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)`, `param.addcdiv_(exp_avg, denom, -step_size)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamwStep {
    pub decay: f64,
    pub lerp: f64,
    pub beta2: f64,
    pub sq_weight: f64,
    pub bc2_sqrt: f64,
    pub eps: f64,
    pub step_size: f64,
}

impl AdamwStep {
    /// The scalars of step number `step` (1 for the first).
    pub fn new(h: Hyper, step: f64) -> AdamwStep {
        let bias_correction1 = 1.0 - h.beta1.powf(step);
        let bias_correction2 = 1.0 - h.beta2.powf(step);
        AdamwStep {
            decay: if h.weight_decay != 0.0 { 1.0 - h.lr * h.weight_decay } else { 1.0 },
            lerp: 1.0 - h.beta1,
            beta2: h.beta2,
            sq_weight: 1.0 - h.beta2,
            bc2_sqrt: bias_correction2.powf(0.5),
            eps: h.eps,
            step_size: h.lr / bias_correction1,
        }
    }
}

/// `torch._amp_update_scale_`'s rule, with its CPU kernel's arithmetic: on
/// an inf the scale backs off and the tracker resets; after `interval`
/// clean steps in a row it grows (the float32 scale times the double
/// factor, rounded to float32, kept only when finite) and the tracker resets.
pub fn next_scale(scale: f32, tracker: i32, found_inf: bool, growth: f64, backoff: f64, interval: i64) -> (f32, i32) {
    if found_inf {
        return ((scale as f64 * backoff) as f32, 0);
    }
    let successful = tracker.wrapping_add(1);
    if i64::from(successful) == interval {
        let grown = (scale as f64 * growth) as f32;
        (if grown.is_finite() { grown } else { scale }, 0)
    } else {
        (scale, successful)
    }
}
