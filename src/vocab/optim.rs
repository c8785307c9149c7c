//! The optimizers' hyperparameters and the scalars of one step (AdamW, Adam,
//! SGD), the learning-rate schedules, and GradScaler's update rule: computed
//! in core or run by each backend's kernels, written once.

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

/// `x` as Python's `repr(float)` writes it ("-1.0", "1e-05", "nan"), so that
/// refusals quote a value in PyTorch's own words.
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust's shortest form "1e-5" in Python's spelling "1e-05".
        let e = format!("{x:e}");
        let (m, exp) = e.split_once('e').expect("{:e} has an exponent");
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
        return format!("{m}e{sign}{digits:0>2}");
    }
    if x == x.trunc() {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// `torch.optim.Adam`'s hyperparameters (coupled L2 weight decay: added to
/// the grad before the moments; `amsgrad` keeps the running max of `exp_avg_sq`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamHyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub amsgrad: bool,
}

impl AdamHyper {
    /// The checks `torch.optim.Adam.__init__` makes, in its order and words
    /// (NaN refused too: PyTorch's `not 0.0 <= x` refuses it as well).
    pub fn validate(self) -> Result<AdamHyper> {
        let AdamHyper { lr, beta1, beta2, eps, weight_decay, .. } = self;
        let f = py_float;
        if lr.is_nan() || lr < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid learning rate: {}", f(lr));
        }
        if eps.is_nan() || eps < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid epsilon value: {}", f(eps));
        }
        if !(0.0..1.0).contains(&beta1) {
            crate::bail!(E_INVALID_ARG, "Invalid beta parameter at index 0: {}", f(beta1));
        }
        if !(0.0..1.0).contains(&beta2) {
            crate::bail!(E_INVALID_ARG, "Invalid beta parameter at index 1: {}", f(beta2));
        }
        if weight_decay.is_nan() || weight_decay < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid weight_decay value: {}", f(weight_decay));
        }
        Ok(self)
    }
}

/// The scalars of one `_single_tensor_adam` step (foreach=False, not
/// capturable), computed in double as PyTorch's Python computes them.
/// Backends apply, in this order:
/// `grad = grad.add(param, alpha=weight_decay)` (skipped when it is 0),
/// `exp_avg.lerp_(grad, lerp)`, `exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=sq_weight)`,
/// with amsgrad `torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)`,
/// `denom = (v.sqrt() / bc2_sqrt).add_(eps)` (v: the max with amsgrad, else exp_avg_sq),
/// `param.addcdiv_(exp_avg, denom, value=-step_size)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    pub weight_decay: f64,
    pub lerp: f64,
    pub beta2: f64,
    pub sq_weight: f64,
    pub bc2_sqrt: f64,
    pub eps: f64,
    pub step_size: f64,
    pub amsgrad: bool,
}

impl AdamStep {
    /// The scalars of step number `step` (1 for the first).
    pub fn new(h: AdamHyper, step: f64) -> AdamStep {
        let bias_correction1 = 1.0 - h.beta1.powf(step);
        let bias_correction2 = 1.0 - h.beta2.powf(step);
        AdamStep {
            weight_decay: h.weight_decay,
            lerp: 1.0 - h.beta1,
            beta2: h.beta2,
            sq_weight: 1.0 - h.beta2,
            bc2_sqrt: bias_correction2.powf(0.5),
            eps: h.eps,
            step_size: h.lr / bias_correction1,
            amsgrad: h.amsgrad,
        }
    }
}

/// `torch.optim.SGD`'s hyperparameters (without `maximize`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdHyper {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
}

impl SgdHyper {
    /// The checks `torch.optim.SGD.__init__` makes, in its order and words
    /// (and NaN refused, as for AdamW).
    pub fn validate(self) -> Result<SgdHyper> {
        let SgdHyper { lr, momentum, dampening, weight_decay, nesterov } = self;
        let f = py_float;
        if lr.is_nan() || lr < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid learning rate: {}", f(lr));
        }
        if momentum.is_nan() || momentum < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid momentum value: {}", f(momentum));
        }
        if weight_decay.is_nan() || weight_decay < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid weight_decay value: {}", f(weight_decay));
        }
        if dampening.is_nan() {
            crate::bail!(E_INVALID_ARG, "Invalid dampening value: {}", f(dampening));
        }
        if nesterov && (momentum <= 0.0 || dampening != 0.0) {
            crate::bail!(E_INVALID_ARG, "Nesterov momentum requires a momentum and zero dampening");
        }
        Ok(self)
    }
}

/// The scalars of one `_single_tensor_sgd` step. Backends apply, in this order:
/// `d = grad.add(param, alpha=weight_decay)` (skipped when it is 0); with
/// momentum, on the first step `buf = d.clone()` (no dampening), later
/// `buf.mul_(momentum).add_(d, alpha=damp_weight)`, then
/// `d = d.add(buf, alpha=momentum)` with nesterov, else `d = buf`;
/// last `param.add_(d, alpha=-lr)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdStep {
    pub weight_decay: f64,
    pub momentum: f64,
    pub damp_weight: f64,
    pub nesterov: bool,
    pub lr: f64,
}

impl SgdStep {
    pub fn new(h: SgdHyper) -> SgdStep {
        SgdStep { weight_decay: h.weight_decay, momentum: h.momentum, damp_weight: 1.0 - h.dampening, nesterov: h.nesterov, lr: h.lr }
    }
}

/// A learning-rate schedule, parsed from its JSON spec.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// `torch.optim.lr_scheduler.StepLR(step_size, gamma)`.
    Step { step_size: i64, gamma: f64 },
    /// `torch.optim.lr_scheduler.LinearLR(start_factor, end_factor=1.0, total_iters=warmup_steps)`.
    LinearWarmup { warmup_steps: i64, start_factor: f64 },
    /// transformers' `get_cosine_with_min_lr_schedule_with_warmup(num_warmup_steps,
    /// num_training_steps, num_cycles=0.5, min_lr)`.
    Cosine { warmup_steps: i64, total_steps: i64, min_lr: f64 },
}

impl Schedule {
    /// `{"kind":"step","step_size":N,"gamma":g}`,
    /// `{"kind":"linear_warmup","warmup_steps":W,"start_factor":f}` or
    /// `{"kind":"cosine","warmup_steps":W,"total_steps":T,"min_lr":m}`;
    /// every field required, no others.
    pub fn parse(spec: &str) -> Result<Schedule> {
        use serde_json::Value;
        let v: Value = serde_json::from_str(spec).map_err(|e| crate::err!(E_INVALID_ARG, "lr schedule {spec:?}: {e}"))?;
        let obj = v.as_object().ok_or_else(|| crate::err!(E_INVALID_ARG, "lr schedule {spec:?}: not a JSON object"))?;
        let kind = obj.get("kind").and_then(Value::as_str).ok_or_else(|| crate::err!(E_INVALID_ARG, "lr schedule {spec:?}: no \"kind\" string"))?;
        let fields: &[&str] = match kind {
            "step" => &["step_size", "gamma"],
            "linear_warmup" => &["warmup_steps", "start_factor"],
            "cosine" => &["warmup_steps", "total_steps", "min_lr"],
            _ => crate::bail!(E_INVALID_ARG, "lr schedule {spec:?}: unknown kind {kind:?} (step, linear_warmup, cosine)"),
        };
        if let Some(k) = obj.keys().find(|k| *k != "kind" && !fields.contains(&k.as_str())) {
            crate::bail!(E_INVALID_ARG, "lr schedule {spec:?}: unknown field {k:?} for kind {kind:?} (needs {})", fields.join(", "));
        }
        let int = |k: &str| -> Result<i64> {
            obj.get(k).and_then(Value::as_i64).ok_or_else(|| crate::err!(E_INVALID_ARG, "lr schedule {spec:?}: {k:?} must be an integer"))
        };
        let num = |k: &str| -> Result<f64> {
            obj.get(k).and_then(Value::as_f64).ok_or_else(|| crate::err!(E_INVALID_ARG, "lr schedule {spec:?}: {k:?} must be a number"))
        };
        let s = match kind {
            "step" => Schedule::Step { step_size: int("step_size")?, gamma: num("gamma")? },
            "linear_warmup" => Schedule::LinearWarmup { warmup_steps: int("warmup_steps")?, start_factor: num("start_factor")? },
            _ => Schedule::Cosine { warmup_steps: int("warmup_steps")?, total_steps: int("total_steps")?, min_lr: num("min_lr")? },
        };
        match s {
            Schedule::Step { step_size, gamma } => {
                if step_size < 1 {
                    crate::bail!(E_INVALID_ARG, "lr schedule: step_size must be >= 1, got {step_size}");
                }
                if !gamma.is_finite() || gamma < 0.0 {
                    crate::bail!(E_INVALID_ARG, "lr schedule: gamma must be finite and >= 0, got {}", py_float(gamma));
                }
            }
            Schedule::LinearWarmup { warmup_steps, start_factor } => {
                // LinearLR's own check, in its words; total_iters 0 would divide by zero.
                if !(start_factor > 0.0 && start_factor <= 1.0) {
                    crate::bail!(E_INVALID_ARG, "Starting multiplicative factor expected to be greater than 0 and less or equal to 1.");
                }
                if warmup_steps < 1 {
                    crate::bail!(E_INVALID_ARG, "lr schedule: warmup_steps must be >= 1, got {warmup_steps}");
                }
            }
            Schedule::Cosine { warmup_steps, total_steps, min_lr } => {
                if warmup_steps < 0 || total_steps < warmup_steps {
                    crate::bail!(E_INVALID_ARG, "lr schedule: needs 0 <= warmup_steps <= total_steps, got {warmup_steps} and {total_steps}");
                }
                if !min_lr.is_finite() || min_lr < 0.0 {
                    crate::bail!(E_INVALID_ARG, "lr schedule: min_lr must be finite and >= 0, got {}", py_float(min_lr));
                }
            }
        }
        Ok(s)
    }

    /// The lr after `step` calls of `scheduler.step()` (0: the lr the
    /// scheduler sets when it is created) for an optimizer created with `base_lr`.
    pub fn lr_at(self, step: i64, base_lr: f64) -> Result<f64> {
        if step < 0 {
            crate::bail!(E_INVALID_ARG, "lr schedule: step must be >= 0, got {step}");
        }
        if !base_lr.is_finite() || base_lr < 0.0 {
            crate::bail!(E_INVALID_ARG, "lr schedule: base_lr must be finite and >= 0, got {}", py_float(base_lr));
        }
        Ok(match self {
            // StepLR's closed form (`_get_closed_form_lr`); its `step()` multiplies
            // the group's lr by gamma at each boundary instead, which rounds once
            // per boundary: the two agree to within that many ulps.
            Schedule::Step { step_size, gamma } => base_lr * gamma.powf((step / step_size) as f64),
            // LinearLR's closed form; its `step()` compounds ratios, within ulps of this.
            Schedule::LinearWarmup { warmup_steps, start_factor } => {
                let done = step.min(warmup_steps) as f64;
                base_lr * (start_factor + (1.0 - start_factor) * done / warmup_steps as f64)
            }
            // transformers' lambda, times base_lr as LambdaLR applies it. Like
            // it, the cosine is not clamped past total_steps (it rises again).
            Schedule::Cosine { warmup_steps, total_steps, min_lr } => {
                let factor = if step < warmup_steps {
                    step as f64 / warmup_steps.max(1) as f64
                } else {
                    let min_lr_rate = if min_lr == 0.0 { 0.0 } else { min_lr / base_lr };
                    if !min_lr_rate.is_finite() {
                        crate::bail!(E_INVALID_ARG, "lr schedule: min_lr {} needs a base_lr > 0", py_float(min_lr));
                    }
                    let progress = (step - warmup_steps) as f64 / (total_steps - warmup_steps).max(1) as f64;
                    let factor = 0.5 * (1.0 + (std::f64::consts::PI * 0.5 * 2.0 * progress).cos());
                    (factor * (1.0 - min_lr_rate) + min_lr_rate).max(0.0)
                };
                base_lr * factor
            }
        })
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
