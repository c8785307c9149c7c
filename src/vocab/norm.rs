//! The shape rules of `batch_norm` and `group_norm`, checked in core before
//! either backend runs, with PyTorch's words and one code on both:
//! `F.batch_norm` refuses one value per channel in training in Python (the
//! ATen operator libtorch runs would return zeros), and libtorch words the
//! others as its own errors (`E_TORCH`).

use super::{Call, In, Value};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;

/// Checks a call of `batch_norm` or `group_norm` (`ins` in the call's input
/// order) against PyTorch's rules: input `[N, C, *]`; running stats and
/// affine parameters `[C]`, of the input's dtype or, for a bf16/fp16 input,
/// all fp32 (PyTorch's CPU rule for mixed dtypes); eval needs both running
/// stats; training more than one value per channel; `C` divisible by
/// `num_groups` > 0; both running stats or neither (`F.batch_norm`'s
/// Python-side rule since torch 2.13).
pub fn check(call: &Call, ins: &[In]) -> Result<()> {
    let op = call.op.name();
    let sig = call.sig();
    let tensor = |p: &str| {
        sig.param(p).and_then(|i| match call.args[i] {
            Value::Tensor(t) => ins.get(t).copied().flatten(),
            _ => None,
        })
    };
    let Some((xs, xd)) = tensor("input") else { return Ok(()) };
    if xs.len() < 2 {
        crate::bail!(E_SHAPE, "{op}: Expected at least 2 dimensions for input tensor ([N, C, *]) but received {}", xs.len());
    }
    let c = xs[1];
    let params: &[&str] = if op == "batch_norm" { &["running_mean", "running_var", "weight", "bias"] } else { &["weight", "bias"] };
    let mut first: Option<DType> = None;
    for &p in params {
        let Some((s, d)) = tensor(p) else { continue };
        if s != &[c][..] {
            if op == "batch_norm" {
                crate::bail!(E_SHAPE, "{op}: {p} should contain {c} elements not {}", s.iter().product::<i64>());
            }
            crate::bail!(E_SHAPE, "{op}: Expected {p} to be a vector of size equal to the number of channels in input, but got {p} of shape {} and input of shape {}", fmt(s), fmt(xs));
        }
        let fits = d == xd || (d == DType::F32 && matches!(xd, DType::BF16 | DType::F16));
        if !fits || first.is_some_and(|f| f != d) {
            crate::bail!(E_DTYPE, "{op}: mixed dtype: {p} is {} with a {} input (parameters share the input's dtype, or are all fp32 with a bf16/fp16 input)", d.name(), xd.name());
        }
        first = Some(d);
    }
    if op == "batch_norm" && tensor("running_mean").is_some() != tensor("running_var").is_some() {
        crate::bail!(E_INVALID_ARG, "{op}: running_mean and running_var must either both be None or neither be None");
    }
    if op == "group_norm" {
        let g = call.int("num_groups").unwrap_or(1);
        if g <= 0 {
            crate::bail!(E_INVALID_ARG, "{op}: Expected num groups to be greater than 0, got {g}");
        }
        if c % g != 0 {
            crate::bail!(E_SHAPE, "{op}: Expected number of channels in input to be divisible by num_groups, but got input of shape {} and num_groups={g}", fmt(xs));
        }
    } else if call.bool("training").unwrap_or(false) {
        if xs[0] * xs[2..].iter().product::<i64>() == 1 {
            crate::bail!(E_INVALID_ARG, "{op}: Expected more than 1 value per channel when training, got input size {}", fmt(xs));
        }
    } else {
        for p in ["running_mean", "running_var"] {
            if tensor(p).is_none() {
                crate::bail!(E_INVALID_ARG, "{op}: {p} must be defined in evaluation mode");
            }
        }
    }
    Ok(())
}
