//! Native kernels of the in-place rows (`add_`, `copy_`, ...). Each computes
//! the out-of-place result from `self`'s current value (the out-of-place
//! kernel of the same parameters, or a fill/copy), writes it into `self`
//! through `self`'s own strides (so a view's base sees it), bumps the
//! storage's version counter, and, when autograd records, gives `self` the
//! result's history, as PyTorch rebases an in-place op's self. The returned
//! tensor is `self` itself: every handle on it sees the new values and history.
//!
//! When autograd records, `self` is first cloned (a differentiable copy):
//! the out-of-place backward may save its input, and writing the result
//! into `self` must not change what it saved.

use std::sync::Arc;

use super::super::autograd::{needs_grad, rebase, rebase_view, record};
use super::super::elem::with_elem;
use super::super::kernels::copy_into;
use super::super::ops::{clone_contiguous, convert};
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::{self, Call};

pub static KERNELS: &[(&str, Kernel)] = &[
    ("fill_.Scalar", fill_scalar),
    ("fill_.Tensor", fill_tensor),
    ("zero_", fill_scalar),
    ("copy_", copy),
];

/// A differentiable contiguous copy of `t` (PyTorch's `clone`).
fn cloned(t: &Raw) -> Result<Raw> {
    Ok(record(clone_contiguous(t)?, "CloneBackward0", &[t], |g| Ok(vec![Some(g.clone())])))
}

/// Runs `compute` on `self`'s value (input 0 replaced) and writes its result into `self`.
fn inplace(call: &Call, ins: &[Option<&Raw>], compute: impl FnOnce(&[Option<&Raw>]) -> Result<Raw>) -> Result<Vec<Raw>> {
    let name = call.op.name();
    let s = input(ins, 0);
    let live: Vec<&Raw> = ins.iter().flatten().copied().collect();
    let records = needs_grad(&live);
    if records && s.is_grad_leaf() {
        crate::bail!(E_AUTOGRAD, "{name}: a leaf Variable that requires grad is being used in an in-place operation");
    }
    // A view's live base gets the write in its history too (CopySlices).
    let base = if records && s.0.view { s.base() } else { None };
    if let Some(b) = &base {
        if b.is_grad_leaf() {
            crate::bail!(E_AUTOGRAD, "{name}: a view of a leaf Variable that requires grad is being used in an in-place operation");
        }
        if b.dtype() != s.dtype() {
            crate::bail!(E_AUTOGRAD, "{name}: an in-place operation on a {} view of a {} tensor (real, imag, view_as_real, view_as_complex) while autograd records it is not supported on the cpu backend; clone the view first", s.dtype().name(), b.dtype().name());
        }
        if !b.is_contiguous() || s.0.offset < b.0.offset {
            crate::bail!(E_AUTOGRAD, "{name}: an in-place operation on a view of a non-contiguous tensor while autograd records it is not supported on the cpu backend; make the base contiguous first");
        }
    }
    // A fill writes one value everywhere, so PyTorch lets it write an expanded tensor.
    let fills = matches!(name, "fill_" | "zero_");
    if !fills && s.shape().iter().zip(s.strides()).any(|(&d, &st)| d > 1 && st == 0) {
        crate::bail!(
            E_INVALID_ARG,
            "{name}: unsupported operation: more than one element of the written-to tensor refers to a single memory location; clone the tensor first"
        );
    }
    let value = if records { cloned(s)? } else { s.clone() };
    let mut args: Vec<Option<&Raw>> = ins.to_vec();
    args[0] = Some(&value);
    let mut r = compute(&args)?;
    if r.shape() != s.shape() {
        crate::bail!(E_SHAPE, "{name}: output with shape {} doesn't match the broadcast shape {}", fmt(s.shape()), fmt(r.shape()));
    }
    if r.dtype() != s.dtype() {
        r = convert(&r, s.dtype())?;
    }
    if Arc::ptr_eq(&r.0.storage, &s.0.storage) {
        r = cloned(&r)?; // never read what is being written
    }
    if s.numel() > 0 {
        with_elem!(s.dtype(), T => copy_into::<T, T>(s, &r));
    }
    s.0.storage.bump_version();
    if records {
        match &base {
            Some(b) => rebase_view(s, b, &r),
            None => rebase(s, &r),
        }
    }
    Ok(vec![s.clone()])
}

/// A derived in-place form (`add_` of `add`): its twin's kernel of the same
/// overload (the registry's entry for such forms).
pub fn via(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let Some(t) = call.op.twin else {
        crate::bail!(E_UNSUPPORTED, "{}: no out-of-place twin", call.op.name());
    };
    let twin = &vocab::ops()[t];
    let of = Call { op: twin, sig: call.sig, args: call.args, out_dtype: call.out_dtype, promoted: call.promoted };
    inplace(call, ins, |args| {
        let mut outs = super::run(&of, args)?;
        Ok(outs.swap_remove(0))
    })
}

/// `fill_(value)` and `zero_()`: a constant, whose gradient to `self`'s old value is zero.
fn fill_scalar(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let v = call.scalar("value").unwrap_or(vocab::Scalar::Int(0));
    inplace(call, ins, |args| {
        let s = input(args, 0);
        let r = super::create::filled(call.op.name(), s.shape(), s.dtype(), v)?;
        Ok(record(r, "FillBackward0", &[s], |g| Ok(vec![Some(Raw::zeros(g.shape(), g.dtype())?)])))
    })
}

/// `fill_(value)` with a 0-dim tensor: its value everywhere; the gradient goes to `value` (summed).
fn fill_tensor(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let v = input(ins, 1);
    if v.dim() != 0 {
        crate::bail!(E_INVALID_ARG, "fill_ only supports 0-dimension value tensor but got tensor with {} dimensions", v.dim());
    }
    inplace(call, ins, |args| copied(input(args, 0), v))
}

/// `copy_(src)`: `src` broadcast to `self`'s shape and converted to its dtype.
fn copy(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let src = input(ins, 1);
    if vocab::broadcast(src.shape(), ins[0].map_or(&[][..], |s| s.shape())).as_deref() != ins[0].map(|s| s.shape()) {
        crate::bail!(E_SHAPE, "copy_: the source's shape {} does not broadcast to self's {}", fmt(src.shape()), fmt(input(ins, 0).shape()));
    }
    inplace(call, ins, |args| copied(input(args, 0), src))
}

/// A fresh tensor of `s`'s shape and dtype holding `src` (broadcast), recorded
/// with a zero gradient to `s` and the whole gradient to `src`.
fn copied(s: &Raw, src: &Raw) -> Result<Raw> {
    let r = Raw::empty(s.shape(), s.dtype())?;
    if r.numel() > 0 {
        with_elem!(src.dtype(), S => with_elem!(r.dtype(), D => copy_into::<S, D>(&r, src)));
    }
    Ok(record(r, "CopyBackwards", &[s, src], |g| Ok(vec![Some(Raw::zeros(g.shape(), g.dtype())?), Some(g.clone())])))
}
