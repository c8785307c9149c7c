//! The training kernels of the native backend: the AdamW, Adam and SGD
//! updates and the GradScaler's unscale and update, with the arithmetic of PyTorch's CPU
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
use crate::vocab::optim::{AdamStep, AdamwStep, SgdStep};

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

/// Checks that `ts` match the param `p` in dtype and shape, as the fused
/// kernels below read them element by element.
fn same_as_param(what: &str, p: &Raw, ts: &[&Raw]) -> Result<()> {
    for t in ts {
        if t.dtype() != p.dtype() {
            crate::bail!(E_DTYPE, "{what}: the param is {} but its grad or state is {}", p.dtype().name(), t.dtype().name());
        }
        if t.shape() != p.shape() {
            crate::bail!(E_SHAPE, "{what}: the param is {} but its grad or state is {}", fmt(p.shape()), fmt(t.shape()));
        }
    }
    if !p.dtype().is_float() {
        crate::bail!(E_DTYPE, "{what}: needs floating params, got {}", p.dtype().name());
    }
    Ok(())
}

/// Runs `f` on the elements at each index of the same-shaped tensors `ts`,
/// in chunks across the pool when large. Pointers rather than slices: a
/// caller's grad may be the param's own storage, so the operands may alias
/// (each `f` reads all its elements before writing any).
fn zip_elems<T: Elem, const N: usize>(ts: [&Raw; N], f: impl Fn([*mut T; N]) + Sync) {
    let ptrs: [Ptr<T>; N] = ts.map(Ptr::<T>::of);
    if ts.iter().all(|t| t.is_contiguous()) {
        let n = ts[0].numel();
        let chunk = |lo: usize, hi: usize| {
            for i in lo..hi {
                // SAFETY: contiguous buffers of `n` elements each; chunks are disjoint.
                f(ptrs.map(|p| unsafe { p.at(i as isize) }));
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
    let w = Walk::new(ts[0].shape(), ts.map(|t| t.strides()));
    let (n, st) = (w.inner, w.inner_strides);
    w.par_rows([0; N], |offs| {
        for k in 0..n as isize {
            // SAFETY: offsets come from the views' own shapes and strides; rows are disjoint.
            f(std::array::from_fn(|j| unsafe { ptrs[j].at(offs[j] + k * st[j]) }));
        }
    });
}

/// `torch.lerp(a, b, w)` as ATen's vectorised kernel computes it: one fused
/// multiply-add from the nearer end (`fmadd(w, b - a, a)` or `fmadd(w - 1, b - a, b)`).
#[inline(always)]
fn lerp_fused<R: Float>(a: R, b: R, w: R) -> R {
    let d = b - a;
    if w.abs() < R::from(0.5).expect("0.5") {
        d.mul_add(w, a)
    } else {
        d.mul_add(w - R::one(), b)
    }
}

/// `torch.maximum`: NaN if either is NaN.
#[inline(always)]
fn maximum<R: Float>(a: R, b: R) -> R {
    if a.is_nan() || b.is_nan() {
        R::nan()
    } else if b > a {
        b
    } else {
        a
    }
}

/// One `torch.optim.Adam` update of `p` (moments `m`, `v`, with amsgrad the
/// running max `vmax`) with gradient `g`, in place, in the order of
/// `AdamStep`'s ops. Each op computes as ATen's CPU kernel does (`add` with
/// alpha and `lerp` as one fused multiply-add, `addcmul` as
/// `fmadd(value * t1, t2, self)`, `addcdiv` as `self + value * t1 / t2`) and
/// rounds to the dtype once.
pub fn adam_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, vmax: Option<&Raw>, c: &AdamStep) -> Result<()> {
    let mut ts = vec![g, m, v];
    ts.extend(vmax);
    same_as_param("adam", p, &ts)?;
    with_float!(p.dtype(), T => adam::<T>(p, g, m, v, vmax, c), _ => unreachable!("checked floating"));
    // A graph recorded before the step that saved `p` must not backward through the new values.
    for t in [p, m, v].into_iter().chain(vmax) {
        t.0.storage.bump_version();
    }
    Ok(())
}

fn adam<T: FloatElem>(p: &Raw, g: &Raw, m: &Raw, v: &Raw, vmax: Option<&Raw>, s: &AdamStep) {
    let r = |x: f64| <T::Real as Arith>::from_f64(x);
    let (decays, wd, w1, b2, w2, bc2, eps, neg_step) =
        (s.weight_decay != 0.0, r(s.weight_decay), r(s.lerp), r(s.beta2), r(s.sq_weight), r(s.bc2_sqrt), r(s.eps), r(-s.step_size));
    let rt = |x: T::Real| T::down(x).up();
    // The update up to the denominator's operand; returns (param, grad, exp_avg, exp_avg_sq) read and updated.
    let moments = move |pp: *mut T, pg: *mut T, pm: *mut T, pv: *mut T| {
        // SAFETY (for the callers below): element pointers of live tensors.
        let (pv0, gv0, mv0, vv0) = unsafe { ((*pp).up(), (*pg).up(), (*pm).up(), (*pv).up()) };
        let gv = if decays { rt(pv0.mul_add(wd, gv0)) } else { gv0 };
        let mv = rt(lerp_fused(mv0, gv, w1));
        let vv = rt(rt(w2 * gv).mul_add(gv, rt(vv0 * b2)));
        (pv0, mv, vv)
    };
    let finish = move |pv0: T::Real, mv: T::Real, s: T::Real| -> T {
        let denom = rt(rt(rt(s.sqrt()) / bc2) + eps);
        T::down(pv0 + rt(rt(neg_step * mv) / denom))
    };
    match vmax {
        None => zip_elems::<T, 4>([p, g, m, v], |[pp, pg, pm, pv]| {
            let (p0, mv, vv) = moments(pp, pg, pm, pv);
            // SAFETY: element pointers of live tensors; every read is done.
            unsafe {
                *pm = T::down(mv);
                *pv = T::down(vv);
                *pp = finish(p0, mv, vv);
            }
        }),
        Some(x) => zip_elems::<T, 5>([p, g, m, v, x], |[pp, pg, pm, pv, px]| {
            let (p0, mv, vv) = moments(pp, pg, pm, pv);
            // SAFETY: element pointers of live tensors; the max is read before any write.
            unsafe {
                let xv = maximum((*px).up(), vv);
                *pm = T::down(mv);
                *pv = T::down(vv);
                *px = T::down(xv);
                *pp = finish(p0, mv, xv);
            }
        }),
    }
}

/// One `torch.optim.SGD` update of `p` with gradient `g`, in place, in the
/// order of `SgdStep`'s ops, each as ATen's CPU kernel computes it (`add`
/// with alpha as one fused multiply-add) rounded to the dtype once. With
/// momentum and no `buf` yet, makes the buffer (the step's direction) and
/// returns it.
pub fn sgd_step(p: &Raw, g: &Raw, buf: Option<&Raw>, c: &SgdStep) -> Result<Option<Raw>> {
    let mut ts = vec![g];
    ts.extend(buf);
    same_as_param("sgd", p, &ts)?;
    let made = match (c.momentum != 0.0, buf) {
        (true, None) => Some(Raw::empty(p.shape(), p.dtype())?),
        _ => None,
    };
    with_float!(p.dtype(), T => sgd::<T>(p, g, buf, made.as_ref(), c), _ => unreachable!("checked floating"));
    for t in [p].into_iter().chain(buf) {
        t.0.storage.bump_version();
    }
    Ok(made)
}

fn sgd<T: FloatElem>(p: &Raw, g: &Raw, buf: Option<&Raw>, made: Option<&Raw>, s: &SgdStep) {
    let r = |x: f64| <T::Real as Arith>::from_f64(x);
    let (decays, wd, mom, damp, neg_lr) = (s.weight_decay != 0.0, r(s.weight_decay), r(s.momentum), r(s.damp_weight), r(-s.lr));
    let nesterov = s.nesterov;
    let rt = |x: T::Real| T::down(x).up();
    // The direction before momentum: `grad.add(param, alpha=weight_decay)`.
    let direction = move |p0: T::Real, g0: T::Real| if decays { rt(p0.mul_add(wd, g0)) } else { g0 };
    // The step's direction given the (updated) buffer.
    let through = move |d: T::Real, b: T::Real| if nesterov { rt(b.mul_add(mom, d)) } else { b };
    match (buf, made) {
        (None, None) => zip_elems::<T, 2>([p, g], |[pp, pg]| {
            // SAFETY: element pointers of live tensors; both read before the write.
            unsafe {
                let p0 = (*pp).up();
                let d = direction(p0, (*pg).up());
                *pp = T::down(d.mul_add(neg_lr, p0));
            }
        }),
        (None, Some(b)) => zip_elems::<T, 3>([p, g, b], |[pp, pg, pb]| {
            // SAFETY: as above; `b` is a new buffer of the param's shape.
            unsafe {
                let p0 = (*pp).up();
                let d = direction(p0, (*pg).up());
                *pb = T::down(d);
                *pp = T::down(through(d, d).mul_add(neg_lr, p0));
            }
        }),
        (Some(b), _) => zip_elems::<T, 3>([p, g, b], |[pp, pg, pb]| {
            // SAFETY: as above.
            unsafe {
                let p0 = (*pp).up();
                let d = direction(p0, (*pg).up());
                let bv = rt(d.mul_add(damp, rt((*pb).up() * mom)));
                *pb = T::down(bv);
                *pp = T::down(through(d, bv).mul_add(neg_lr, p0));
            }
        }),
    }
}
