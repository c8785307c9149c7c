//! The training kernels of the native backend: the AdamW update and the
//! GradScaler's unscale and update, with the arithmetic of PyTorch's CPU
//! kernels (each tensor op computes in the dtype's computing type and rounds
//! to the dtype once, so bf16/fp16 parameters round where libtorch's do).

use std::sync::atomic::{AtomicBool, Ordering};

use num_traits::Float;

use super::elem::{with_float, Arith, Elem, FloatElem};
use super::kernels::{self, Ptr, Walk};
use super::ops;
use super::simd::multiversion;
use super::tensor::Raw;
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::optim::AdamwStep;

/// `torch.lerp(a, b, w)` as ATen's scalar kernel computes it: the form that
/// keeps precision on the side of the nearer end.
#[inline(always)]
fn lerp<R: Float>(a: R, b: R, w: R) -> R {
    if w.abs() < R::from(0.5).expect("0.5") {
        a + w * (b - a)
    } else {
        b - (b - a) * (R::one() - w)
    }
}

/// One AdamW update of `p` (and its moments `m`, `v`) with gradient `g`,
/// in place, in the order of `AdamwStep`'s ops.
pub fn adamw_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, c: &AdamwStep) -> Result<()> {
    for t in [g, m, v] {
        if t.dtype() != p.dtype() {
            crate::bail!(E_DTYPE, "adamw: the param is {} but its grad or state is {}", p.dtype().name(), t.dtype().name());
        }
        if t.shape() != p.shape() {
            crate::bail!(E_SHAPE, "adamw: the param is {} but its grad or state is {}", fmt(p.shape()), fmt(t.shape()));
        }
    }
    with_float!(p.dtype(), T => adamw::<T>(p, g, m, v, c), _ => crate::bail!(E_DTYPE, "adamw: needs floating params, got {}", p.dtype().name()));
    // A graph recorded before the step that saved `p` must not backward through the new values.
    for t in [p, m, v] {
        t.0.storage.bump_version();
    }
    Ok(())
}

/// `AdamwStep`'s scalars in the computing type `R`.
#[derive(Clone, Copy)]
struct Coeffs<R> {
    decays: bool,
    decay: R,
    w1: R,
    b2: R,
    w2: R,
    bc2: R,
    eps: R,
    neg_step: R,
}

/// One element's update. Each tensor op of `AdamwStep` rounds to `T`: `rt`
/// is that rounding, seen in the computing type.
#[inline(always)]
fn adamw_one<T: FloatElem>(c: Coeffs<T::Real>, p: &mut T, g: T, m: &mut T, v: &mut T) {
    let rt = |x: T::Real| T::down(x).up();
    let pv = if c.decays { rt(p.up() * c.decay) } else { p.up() };
    let gv = g.up();
    let mv = rt(lerp(m.up(), gv, c.w1));
    let vv = rt(rt(v.up() * c.b2) + c.w2 * gv * gv);
    let denom = rt(rt(rt(vv.sqrt()) / c.bc2) + c.eps);
    *p = T::down(pv + c.neg_step * mv / denom);
    *m = T::down(mv);
    *v = T::down(vv);
}

multiversion!(fn adamw_run<T: FloatElem>(c: Coeffs<T::Real>, p: &mut [T], g: &[T], m: &mut [T], v: &mut [T]) => adamw_loop);

#[inline(always)]
fn adamw_loop<T: FloatElem>(c: Coeffs<T::Real>, p: &mut [T], g: &[T], m: &mut [T], v: &mut [T]) {
    let n = p.len().min(g.len()).min(m.len()).min(v.len());
    for i in 0..n {
        adamw_one::<T>(c, &mut p[i], g[i], &mut m[i], &mut v[i]);
    }
}

fn adamw<T: FloatElem>(p: &Raw, g: &Raw, m: &Raw, v: &Raw, s: &AdamwStep) {
    let r = |x: f64| <T::Real as Arith>::from_f64(x);
    let c = Coeffs {
        decays: s.decay != 1.0,
        decay: r(s.decay),
        w1: r(s.lerp),
        b2: r(s.beta2),
        w2: r(s.sq_weight),
        bc2: r(s.bc2_sqrt),
        eps: r(s.eps),
        neg_step: r(-s.step_size),
    };
    // A grad that is the param itself (a caller may pass that) takes the
    // strided path, which reads through pointers instead of slices that would alias.
    let distinct = !std::sync::Arc::ptr_eq(&p.0.storage, &g.0.storage);
    if distinct && [p, g, m, v].iter().all(|t| t.is_contiguous()) {
        // The usual case: flat slices, in chunks across the pool when large.
        let n = p.numel();
        let (pp, pg, pm, pv) = (Ptr::<T>::of(p), Ptr::<T>::of(g), Ptr::<T>::of(m), Ptr::<T>::of(v));
        let chunk = |lo: usize, hi: usize| {
            let (pp, pg, pm, pv) = (pp, pg, pm, pv);
            // SAFETY: four distinct contiguous buffers of `n` elements (a param,
            // its grad and the optimizer's own moments); chunks are disjoint.
            unsafe {
                let s = |q: Ptr<T>| std::slice::from_raw_parts_mut(q.0.add(lo), hi - lo);
                adamw_run::<T>(c, s(pp), s(pg), s(pm), s(pv));
            }
        };
        if super::par::parallel(n) {
            let parts = super::par::threads() * 4;
            super::par::for_each(parts, &|k| chunk(n * k / parts, n * (k + 1) / parts));
        } else {
            chunk(0, n);
        }
        return;
    }
    let w = Walk::new(p.shape(), [p.strides(), g.strides(), m.strides(), v.strides()]);
    let (pp, pg, pm, pv) = (Ptr::<T>::of(p), Ptr::<T>::of(g), Ptr::<T>::of(m), Ptr::<T>::of(v));
    let (n, [sp, sg, sm, sv]) = (w.inner, w.inner_strides);
    w.par_rows([0; 4], |[op, og, om, ov]| {
        for k in 0..n as isize {
            // SAFETY: offsets come from the views' own shapes and strides; rows
            // are disjoint and the four tensors are distinct buffers.
            unsafe { adamw_one::<T>(c, &mut *pp.at(op + k * sp), *pg.at(og + k * sg), &mut *pm.at(om + k * sm), &mut *pv.at(ov + k * sv)) }
        }
    });
}

/// A GradScaler's state: a 0-dim float32 scale and int32 growth tracker.
pub fn scaler_state(scale: f64, tracker: i64) -> Result<(Raw, Raw)> {
    Ok((ops::full(&[], DType::F32, scale)?, ops::full(&[], DType::I32, tracker as f64)?))
}

/// `torch._amp_foreach_non_finite_check_and_unscale_`: every grad times
/// `1/scale` (the reciprocal taken in float64, then float32), in the grad's
/// computing type; returns whether any element was inf or NaN.
pub fn unscale(grads: &[&Raw], scale: &Raw) -> Result<bool> {
    let inv = (1.0 / scale.get_f64(0)) as f32;
    let found = AtomicBool::new(false);
    for g in grads {
        with_float!(g.dtype(), T => {
            let k = <<T as Elem>::Acc as Arith>::from_f64(inv as f64);
            kernels::update::<T>(g, |x| {
                let v = x.up();
                if !v.to_f64().is_finite() {
                    found.store(true, Ordering::Relaxed);
                }
                if inv == 1.0 { x } else { T::down(Arith::mul(v, k)) }
            });
        }, _ => crate::bail!(E_DTYPE, "unscale: grads must be floating, got {}", g.dtype().name()));
    }
    Ok(found.into_inner())
}

/// `torch._amp_update_scale_` on the native state tensors, by the rule
/// `crate::vocab::optim::next_scale` writes once for every backend that has no kernel of its own.
pub fn update_scale(scale: &Raw, tracker: &Raw, found_inf: bool, growth: f64, backoff: f64, interval: i64) -> Result<()> {
    if scale.dtype() != DType::F32 || tracker.dtype() != DType::I32 || scale.numel() != 1 || tracker.numel() != 1 {
        crate::bail!(E_DTYPE, "update_scale: needs a one-element float32 scale and int32 growth tracker");
    }
    let (s, t) = crate::vocab::optim::next_scale(scale.get_f64(0) as f32, tracker.get_f64(0) as i32, found_inf, growth, backoff, interval);
    // SAFETY: one element each, of the checked dtypes, owned by the scaler.
    unsafe {
        *Ptr::<f32>::of(scale).0 = s;
        *Ptr::<i32>::of(tracker).0 = t;
    }
    Ok(())
}
