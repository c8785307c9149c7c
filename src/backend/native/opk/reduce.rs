//! Reductions, scans and softmax, with their backward formulas (PyTorch's,
//! derivatives.yaml).
//!
//! Most reductions first copy the input into "lanes": a contiguous tensor
//! in which the elements reduced into one output are adjacent, in f64 for
//! floating dtypes (as PyTorch's CPU kernels accumulate floats in double,
//! and every float converts exactly) and in i64 for the others (exact
//! integer results, wrapping as PyTorch's). Each lane is folded on its own,
//! whatever the thread count, and the result is rounded once to the output
//! dtype. Sum and mean read the input in place (`ops::sum_mask`), and
//! softmax runs over the softmax dim in place, vectorised across the dims
//! after it.

use super::super::autograd::{needs_grad, record, record_saving};
use super::super::elem::{cast, with_elem, with_float, Arith, Elem, FloatElem};
use super::super::fused::{self, Real};
use super::super::kernels::{cast_to, Ptr};
use super::super::ops::{convert, expand_back, sum_mask};
use super::super::par;
use super::super::simd::multiversion;
use super::super::tensor::Raw;
use super::{input, real, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::Call;

/// The shapes of one reduction (or of a scan along one dim).
#[derive(Clone)]
struct Red {
    /// The input's shape, and which of its dims are reduced.
    shape: Vec<i64>,
    mask: Vec<bool>,
    /// The result's shape (with 1 for each reduced dim under keepdim).
    out: Vec<i64>,
    /// Lanes (outputs), and elements per lane.
    n: usize,
    r: usize,
}

impl Red {
    /// `dims` None: every dim. A 0-dim input has no dims: one lane of one element.
    fn new(x: &Raw, dims: Option<&[i64]>, keep: bool) -> Red {
        let s = x.shape();
        let mask: Vec<bool> = (0..s.len()).map(|i| dims.is_none_or(|ds| ds.contains(&(i as i64)))).collect();
        let out = s.iter().zip(&mask).filter_map(|(&d, &m)| if !m { Some(d) } else if keep { Some(1) } else { None }).collect();
        let size = |reduced: bool| s.iter().zip(&mask).filter(|(_, &m)| m == reduced).map(|(&d, _)| d as usize).product();
        Red { shape: s.to_vec(), mask: mask.clone(), out, n: size(false), r: size(true) }
    }

    /// The input's dims, kept ones first: the lanes' order.
    fn perm(&self) -> Vec<usize> {
        let d = 0..self.mask.len();
        d.clone().filter(|&i| !self.mask[i]).chain(d.filter(|&i| self.mask[i])).collect()
    }

    /// PyTorch refuses max-like reductions over a dim of size 0 (there is no identity).
    fn nonempty(&self, op: &str) -> Result<()> {
        if let Some(d) = (0..self.shape.len()).find(|&i| self.mask[i] && self.shape[i] == 0) {
            crate::bail!(E_SHAPE, "{op}: expected reduction dim {d} to have non-zero size");
        }
        Ok(())
    }
}

/// `x`'s elements as `A`, one contiguous lane per output.
fn lanes<A: Elem>(x: &Raw, red: &Red) -> Result<Raw> {
    let p = red.perm();
    let v = x.view_as(p.iter().map(|&i| x.shape()[i]).collect::<Vec<_>>(), p.iter().map(|&i| x.strides()[i]).collect::<Vec<_>>(), x.0.offset);
    if x.dtype() == A::DT && v.is_contiguous() {
        return Ok(v);
    }
    with_elem!(x.dtype(), S => cast_to::<S, A>(&v))
}

/// Lanes (as `lanes` orders them) back in the input's order: a contiguous tensor of `dt`.
fn unlanes(t: &Raw, red: &Red, dt: DType) -> Result<Raw> {
    let mut st = vec![0i64; red.shape.len()];
    for (k, i) in red.perm().into_iter().enumerate() {
        st[i] = t.strides()[k];
    }
    let v = t.view_as(red.shape.clone(), st, t.0.offset);
    with_elem!(t.dtype(), S => with_elem!(dt, D => cast_to::<S, D>(&v)))
}

/// Runs `f(first, last)` over ranges of `0..n` items of `cost` elements each, across the pool when large.
pub(super) fn split(n: usize, cost: usize, f: impl Fn(usize, usize) + Sync) {
    let parts = if par::parallel(n.saturating_mul(cost)) { (par::threads() * 4).min(n) } else { 1 };
    par::for_each(parts, &|c| f(n * c / parts, n * (c + 1) / parts));
}

/// `f(i, lane i)` for every lane: one value per output.
fn fold<A: Elem, O: Copy + Send + Sync + Default>(xs: &Raw, red: &Red, f: impl Fn(usize, &[A]) -> O + Sync) -> Vec<O> {
    let (x, r) = (xs.slice::<A>(), red.r);
    let mut out = vec![O::default(); red.n];
    let po = Ptr(out.as_mut_ptr());
    split(red.n, r, |lo, hi| {
        for i in lo..hi {
            // SAFETY: `i < n`; each range writes its own outputs.
            unsafe { *po.at(i as isize) = f(i, &x[i * r..(i + 1) * r]) };
        }
    });
    out
}

/// `f(i, lane i of each input, lane i of the result)` for every lane of `r` elements.
fn map_lanes<A: Elem, B: Elem>(ins: &[&Raw], r: usize, f: impl Fn(usize, &[&[A]], &mut [B]) + Sync) -> Result<Raw> {
    let out = Raw::empty(ins[0].shape(), B::DT)?;
    let n = if r == 0 { 0 } else { out.numel() / r };
    let xs: Vec<&[A]> = ins.iter().map(|t| t.slice::<A>()).collect();
    let po = Ptr(out.slice_mut::<B>().as_mut_ptr());
    split(n, r, |lo, hi| {
        let mut views: Vec<&[A]> = Vec::with_capacity(xs.len());
        for i in lo..hi {
            views.clear();
            views.extend(xs.iter().map(|x| &x[i * r..(i + 1) * r]));
            // SAFETY: lane `i` of `out`, written by this range only.
            f(i, &views, unsafe { std::slice::from_raw_parts_mut(po.at((i * r) as isize), r) });
        }
    });
    Ok(out)
}

/// One value per output, as a new tensor of `shape` and `dt`.
fn write<O: Elem>(vals: &[O], shape: &[i64], dt: DType) -> Result<Raw> {
    let out = Raw::empty(shape, dt)?;
    with_elem!(dt, D => out.slice_mut::<D>().iter_mut().zip(vals).for_each(|(o, &v)| *o = cast::<O, D>(v)));
    Ok(out)
}

/// Binds `$A` to the lane type of dtype `$dt`: f64 for floats, i64 otherwise.
macro_rules! by_kind {
    ($dt:expr, $A:ident => $body:expr) => {
        if $dt.is_float() {
            type $A = f64;
            $body
        } else {
            type $A = i64;
            $body
        }
    };
}

/// Records the backward of a lane reduction of `x0` (computed as `xs`, in
/// f64): `f(i, lane, g_i, dx_lane)` gives the lane's gradient.
fn lane_backward(out: Raw, x0: &Raw, node: &'static str, xs: Raw, red: Red, f: impl Fn(usize, &[f64], f64, &mut [f64]) + Send + Sync + 'static) -> Raw {
    if !out.dtype().is_float() || !needs_grad(&[x0]) {
        return out;
    }
    let dt = out.dtype();
    // `xs` may be a view of `x0` (f64 lanes in order): saved.
    record_saving(out, node, &[x0], &[x0], false, move |g| {
        let gv = with_elem!(g.dtype(), S => cast_to::<S, f64>(g))?;
        let gs = gv.slice::<f64>();
        let dx = map_lanes::<f64, f64>(&[&xs], red.r, |i, x, d| f(i, x[0], gs[i], d))?;
        Ok(vec![Some(unlanes(&dx, &red, dt)?)])
    })
}

/// The input in the `dtype` argument's dtype when one is given (PyTorch casts before reducing).
fn with_dtype(call: &Call, x: &Raw) -> Result<Raw> {
    match call.dtype("dtype") {
        Some(d) if d != x.dtype() => convert(x, d),
        _ => Ok(x.clone()),
    }
}

/// PyTorch's `int[1]? dim` of most reductions: None or `[]` reduce every dim.
fn dims_or_all<'a>(call: &'a Call) -> Option<&'a [i64]> {
    call.ints("dim").filter(|d| !d.is_empty())
}

fn keepdim(call: &Call) -> bool {
    call.bool("keepdim").unwrap_or(false)
}

/// Integers and bool reduce to int64 (sum, prod, cumsum, cumprod).
fn widened(dt: DType) -> DType {
    if dt.is_float() {
        dt
    } else {
        DType::I64
    }
}

#[inline(always)]
fn is_nan<A: PartialOrd>(v: A) -> bool {
    v.partial_cmp(&v).is_none()
}

#[inline(always)]
fn sgn(v: f64) -> f64 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else {
        0.0
    }
}

// ---------------------------------------------------------------- sum, mean

fn sum_mean(call: &Call, ins: &[Option<&Raw>], mean: bool) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let x = with_dtype(call, x0)?;
    if mean && !x.dtype().is_inexact() {
        crate::bail!(E_DTYPE, "mean: could not infer the output dtype: the input must be floating (or pass dtype=), got {}", x.dtype().name());
    }
    let red = Red::new(&x, dims_or_all(call), keepdim(call));
    let out = match sum_rows(&x, &red, mean) {
        Some(out) => out?,
        None => sum_mask(&x, &red.mask, keepdim(call), mean)?,
    };
    if !out.dtype().is_inexact() || !needs_grad(&[x0]) {
        return Ok(vec![out]);
    }
    let div = if mean { red.r as f64 } else { 1.0 };
    let node = if mean { "MeanBackward1" } else { "SumBackward1" };
    Ok(vec![record(out, node, &[x0], move |g| Ok(vec![Some(expand_back(g, &red.shape, &red.mask, div)?)]))])
}

/// The common case, floats reduced over their trailing dims in place:
/// contiguous rows summed across the pool (`sum_mask` reads any layout,
/// on one thread); `None` for the other cases.
fn sum_rows(x: &Raw, red: &Red, mean: bool) -> Option<Result<Raw>> {
    let suffix = red.mask.iter().skip_while(|&&m| !m).all(|&m| m);
    if !x.dtype().is_float() || !x.is_contiguous() || !suffix || red.r == 0 {
        return None;
    }
    let div = if mean { red.r as f64 } else { 1.0 };
    // The rows are the lanes already.
    let sums = with_float!(x.dtype(), T => fold(x, red, |_, l: &[T]| row_sum(l) / div), _ => return None);
    Some(write(&sums, &red.out, x.dtype()))
}

multiversion!(fn row_sum<S: Elem>(x: &[S]) -> f64 => row_sum_imp);

/// A row's sum: 64 interleaved lanes in the computing type (f32 for
/// f32 and the half types) over blocks of 16 elements per lane, each
/// block's lanes then added in f64 (PyTorch sums in blocks too), folded in
/// a fixed order. The order costs no speed where it matters: the inner loop
/// is 4 independent 16-wide adds per 64 elements (AVX-512), summing
/// ~45 elements/ns from L2, while a `[512, 4096]` fp32 input (8 MiB) streams
/// from L3 at ~20-29 elements/ns, the rate PyTorch's sum gets from it too
/// (benches/native_ops_compare.py).
#[inline(always)]
fn row_sum_imp<S: Elem>(x: &[S]) -> f64 {
    const L: usize = 64;
    let mut total = [0f64; L];
    for b in x.chunks(16 * L) {
        let mut acc = [<S::Acc as Arith>::ZERO; L];
        let mut chunks = b.chunks_exact(L);
        for c in &mut chunks {
            for l in 0..L {
                acc[l] = acc[l].add(c[l].up());
            }
        }
        for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
            *a = a.add(v.up());
        }
        for l in 0..L {
            total[l] += acc[l].to_f64();
        }
    }
    let mut w = L;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            total[l] += total[l + w];
        }
    }
    total[0]
}

fn sum(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    sum_mean(call, ins, false)
}

fn mean(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    sum_mean(call, ins, true)
}

// ---------------------------------------------------------------------- prod

fn prod(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let x = with_dtype(call, x0)?;
    let dim = call.int("dim").map(|d| [d]);
    let red = Red::new(&x, dim.as_ref().map(|d| &d[..]), keepdim(call));
    let (out, xs, ys) = by_kind!(x.dtype(), A => {
        let xs = lanes::<A>(&x, &red)?;
        let ys = fold(&xs, &red, |_, l: &[A]| l.iter().fold(A::ONE, |p, &v| p.mul(v)));
        (write(&ys, &red.out, widened(x.dtype()))?, xs, ys.iter().map(|v| v.to_f64()).collect::<Vec<f64>>())
    });
    // As PyTorch: result / x without zeros; with one zero, the product of
    // the others at the zero; with more, nothing.
    Ok(vec![lane_backward(out, x0, "ProdBackward1", xs, red, move |i, x, g, d| match x.iter().filter(|&&v| v == 0.0).count() {
        0 => d.iter_mut().zip(x).for_each(|(d, &v)| *d = g * (ys[i] / v)),
        1 => {
            let rest: f64 = x.iter().filter(|&&v| v != 0.0).product();
            d.iter_mut().zip(x).for_each(|(d, &v)| *d = if v == 0.0 { g * rest } else { 0.0 });
        }
        _ => d.fill(0.0),
    })])
}

// ------------------------------------------------- max, min, argmax, argmin

/// The first extreme of a nonempty lane (`better(v, m)`: v beats m) and its
/// index; a NaN beats everything, as in PyTorch.
#[inline(always)]
fn pick<A: Arith>(l: &[A], better: fn(A, A) -> bool) -> (A, i64) {
    let (mut m, mut k) = (l[0], 0);
    for (i, &v) in l.iter().enumerate().skip(1) {
        if is_nan(m) {
            break;
        }
        if is_nan(v) || better(v, m) {
            (m, k) = (v, i);
        }
    }
    (m, k as i64)
}

fn gt<A: PartialOrd>(a: A, b: A) -> bool {
    a > b
}

fn lt<A: PartialOrd>(a: A, b: A) -> bool {
    a < b
}

/// The gradient of a value picked from its lane, split evenly between its ties (amax, max()).
fn evenly(x: &[f64], y: f64, g: f64, d: &mut [f64]) {
    let ties = x.iter().filter(|&&v| v == y).count() as f64;
    d.iter_mut().zip(x).for_each(|(d, &v)| *d = if v == y { g / ties } else { 0.0 });
}

/// amax, amin, max(), min(): the extreme value of each lane.
fn extreme(ins: &[Option<&Raw>], red: Red, op: &str, max: bool) -> Result<Raw> {
    let x = input(ins, 0);
    red.nonempty(op)?;
    let (out, xs, ys) = by_kind!(x.dtype(), A => {
        let xs = lanes::<A>(x, &red)?;
        let ys = fold(&xs, &red, |_, l: &[A]| pick(l, if max { gt } else { lt }).0);
        (write(&ys, &red.out, x.dtype())?, xs, ys.iter().map(|v| v.to_f64()).collect::<Vec<f64>>())
    });
    let node = if max { "AmaxBackward0" } else { "AminBackward0" };
    Ok(lane_backward(out, x, node, xs, red, move |i, x, g, d| evenly(x, ys[i], g, d)))
}

fn amax(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![extreme(ins, Red::new(input(ins, 0), dims_or_all(call), keepdim(call)), "amax", true)?])
}

fn amin(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![extreme(ins, Red::new(input(ins, 0), dims_or_all(call), keepdim(call)), "amin", false)?])
}

fn max_all(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![extreme(ins, Red::new(input(ins, 0), None, false), "max", true)?])
}

fn min_all(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![extreme(ins, Red::new(input(ins, 0), None, false), "min", false)?])
}

/// The extremes along `dim` and their indices; with `values`, both (max.dim), else the indices (argmax).
fn arg_extreme(call: &Call, ins: &[Option<&Raw>], op: &str, max: bool, values: bool) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let dim = call.int("dim").map(|d| [d]);
    let red = Red::new(x, dim.as_ref().map(|d| &d[..]), keepdim(call));
    red.nonempty(op)?;
    let (out, xs, picks) = by_kind!(x.dtype(), A => {
        let xs = lanes::<A>(x, &red)?;
        let picks = fold(&xs, &red, |_, l: &[A]| pick(l, if max { gt } else { lt }));
        (write(&picks.iter().map(|p| p.0).collect::<Vec<A>>(), &red.out, x.dtype())?, xs, picks.iter().map(|p| p.1).collect::<Vec<i64>>())
    });
    let idx = write(&picks, &red.out, DType::I64)?;
    if !values {
        return Ok(vec![idx]);
    }
    let node = if max { "MaxBackward0" } else { "MinBackward0" };
    let out = lane_backward(out, x, node, xs, red, move |i, _, g, d| {
        d.fill(0.0);
        d[picks[i] as usize] = g;
    });
    Ok(vec![out, idx])
}

fn max_dim(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arg_extreme(call, ins, "max", true, true)
}

fn min_dim(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arg_extreme(call, ins, "min", false, true)
}

fn argmax(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arg_extreme(call, ins, "argmax", true, false)
}

fn argmin(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arg_extreme(call, ins, "argmin", false, false)
}

// ------------------------------------------------------------------ var, std

fn var_std(call: &Call, ins: &[Option<&Raw>], std: bool) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let corr = if call.overload().ends_with(".correction") {
        call.float("correction").unwrap_or(1.0)
    } else {
        f64::from(u8::from(call.bool("unbiased").unwrap_or(true)))
    };
    let red = Red::new(x, dims_or_all(call), keepdim(call));
    let xs = lanes::<f64>(x, &red)?;
    let n = red.r as f64;
    // PyTorch divides by max(N - correction, 0): NaN or inf without degrees of freedom.
    let stats = fold(&xs, &red, |_, l: &[f64]| {
        let m = l.iter().sum::<f64>() / n;
        let v = l.iter().map(|&v| (v - m) * (v - m)).sum::<f64>() / (n - corr).max(0.0);
        (m, if std { v.sqrt() } else { v })
    });
    let out = write(&stats.iter().map(|s| s.1).collect::<Vec<f64>>(), &red.out, x.dtype())?;
    let node = if std { "StdBackward0" } else { "VarBackward0" };
    Ok(vec![lane_backward(out, x, node, xs, red, move |i, x, g, d| {
        let (m, y) = stats[i];
        // std: the var gradient of g / (2 std), 0 where std is 0.
        let g = if !std {
            g
        } else if y == 0.0 {
            0.0
        } else {
            g / (2.0 * y)
        };
        d.iter_mut().zip(x).for_each(|(d, &v)| *d = 2.0 / (n - corr) * g * (v - m));
    })])
}

fn var(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    var_std(call, ins, false)
}

fn std(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    var_std(call, ins, true)
}

// ----------------------------------------------------------------- logsumexp

fn logsumexp(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let x = if x0.dtype().is_float() { x0.clone() } else { convert(x0, DType::F32)? };
    if dims_or_all(call).is_none() && !keepdim(call) && x.dim() > 0 && x.numel() > 0 {
        // PyTorch computes `dim=[]` as all dims kept, then fails to write that into its 0-dim result.
        crate::bail!(E_SHAPE, "logsumexp: with dim=[], the result of shape [] does not take the reduction's shape (pass keepdim=True)");
    }
    let red = Red::new(&x, dims_or_all(call), keepdim(call));
    let xs = lanes::<f64>(&x, &red)?;
    let ys = fold(&xs, &red, |_, l: &[f64]| {
        // Shifted by the max, unless it is infinite (then the sum gives ±inf or NaN itself).
        let m = l.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        let m = if m.is_infinite() { 0.0 } else { m };
        l.iter().map(|&v| (v - m).exp()).sum::<f64>().ln() + m
    });
    let out = write(&ys, &red.out, x.dtype())?;
    Ok(vec![lane_backward(out, x0, "LogsumexpBackward0", xs, red, move |i, x, g, d| {
        d.iter_mut().zip(x).for_each(|(d, &v)| *d = g * (v - ys[i]).exp())
    })])
}

// ---------------------------------------------------------------------- norm

fn vector_norm(l: &[f64], p: f64) -> f64 {
    let abs = l.iter().map(|v| v.abs());
    if p == f64::INFINITY {
        abs.fold(f64::NEG_INFINITY, |m, v| if is_nan(m) || v > m || is_nan(v) { v } else { m })
    } else if p == f64::NEG_INFINITY {
        abs.fold(f64::INFINITY, |m, v| if is_nan(m) || v < m || is_nan(v) { v } else { m })
    } else if p == 0.0 {
        l.iter().filter(|&&v| v != 0.0).count() as f64
    } else if p == 1.0 {
        abs.sum()
    } else if p == 2.0 {
        l.iter().map(|v| v * v).sum::<f64>().sqrt()
    } else {
        abs.map(|v| v.powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

/// PyTorch's `linalg_vector_norm_backward`, per lane.
fn norm_grad(x: &[f64], y: f64, g: f64, p: f64, d: &mut [f64]) {
    let each = |d: &mut [f64], f: &dyn Fn(f64) -> f64| d.iter_mut().zip(x).for_each(|(d, &v)| *d = f(v));
    let scale = |q: f64| if y == 0.0 { 0.0 } else { g / y.powf(q) };
    if p == 0.0 {
        d.fill(0.0);
    } else if p == 1.0 {
        each(d, &|v| g * sgn(v));
    } else if p == 2.0 {
        let s = scale(1.0);
        each(d, &|v| v * s);
    } else if p.is_infinite() {
        let ties = x.iter().filter(|v| v.abs() == y).count() as f64;
        each(d, &|v| if v.abs() == y { sgn(v) * (g / ties) } else { 0.0 });
    } else if p < 1.0 {
        let s = g * y.powf(1.0 - p);
        each(d, &|v| if v == 0.0 { 0.0 } else { sgn(v) * v.abs().powf(p - 1.0) * s });
    } else if p < 2.0 {
        let s = scale(p - 1.0);
        each(d, &|v| sgn(v) * v.abs().powf(p - 1.0) * s);
    } else {
        let s = scale(p - 1.0);
        each(d, &|v| v * v.abs().powf(p - 2.0) * s);
    }
}

fn norm_of(x0: &Raw, x: &Raw, p: f64, red: Red, op: &str) -> Result<Raw> {
    if p.is_infinite() {
        red.nonempty(op)?;
    }
    let xs = lanes::<f64>(x, &red)?;
    let ys = fold(&xs, &red, |_, l: &[f64]| vector_norm(l, p));
    let out = write(&ys, &red.out, x.dtype())?;
    Ok(lane_backward(out, x0, "NormBackward1", xs, red, move |i, x, g, d| norm_grad(x, ys[i], g, p, d)))
}

fn norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let p = call.float("p").unwrap_or(2.0);
    let dims = if call.overload() == "norm.Scalar" { None } else { dims_or_all(call) };
    Ok(vec![norm_of(x, x, p, Red::new(x, dims, keepdim(call)), "norm")?])
}

fn linalg_vector_norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let x = with_dtype(call, x0)?;
    if !x.dtype().is_float() {
        crate::bail!(E_DTYPE, "linalg_vector_norm: dtype must be floating, got {}", x.dtype().name());
    }
    let p = call.float("ord").unwrap_or(2.0);
    let red = Red::new(&x, dims_or_all(call), keepdim(call));
    Ok(vec![norm_of(x0, &x, p, red, "linalg_vector_norm")?])
}

// ------------------------------------------------- all, any, count_nonzero

/// Counts of nonzero elements per lane, with the lanes' shapes.
fn nonzeros(x: &Raw, red: &Red) -> Result<Vec<i64>> {
    Ok(by_kind!(x.dtype(), A => {
        let xs = lanes::<A>(x, red)?;
        fold(&xs, red, |_, l: &[A]| l.iter().filter(|&&v| v != A::ZERO).count() as i64)
    }))
}

/// all / any: whether every / some element of a lane is nonzero; uint8 stays uint8, as PyTorch.
fn all_any(call: &Call, ins: &[Option<&Raw>], all: bool) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let red = match (call.ints("dim"), call.int("dim")) {
        (Some(ds), _) => Red::new(x, Some(ds), keepdim(call)),
        (None, Some(d)) => Red::new(x, Some(&[d]), keepdim(call)),
        _ => Red::new(x, None, keepdim(call)),
    };
    let r = red.r as i64;
    let hits: Vec<bool> = nonzeros(x, &red)?.into_iter().map(|c| if all { c == r } else { c > 0 }).collect();
    let dt = if x.dtype() == DType::U8 { DType::U8 } else { DType::Bool };
    let vals: Vec<i64> = hits.into_iter().map(i64::from).collect();
    Ok(vec![write(&vals, &red.out, dt)?])
}

fn all(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    all_any(call, ins, true)
}

fn any(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    all_any(call, ins, false)
}

fn count_nonzero(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let one = call.int("dim").map(|d| [d]);
    let dims = if call.overload() == "count_nonzero" { one.as_ref().map(|d| &d[..]) } else { dims_or_all(call) };
    let red = Red::new(x, dims, false);
    Ok(vec![write(&nonzeros(x, &red)?, &red.out, DType::I64)?])
}

// -------------------------------------------------------------------- scans

/// cumsum / cumprod along `dim`: the scan in the lane type, its gradient in f64.
fn scan(call: &Call, ins: &[Option<&Raw>], product: bool) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let x = with_dtype(call, x0)?;
    let d = call.int("dim").unwrap_or(0);
    let red = Red::new(&x, Some(&[d]), true);
    let dt = widened(x.dtype());
    let (out, ys) = by_kind!(x.dtype(), A => {
        let xs = lanes::<A>(&x, &red)?;
        let ys = map_lanes::<A, A>(&[&xs], red.r, |_, l, o| {
            let mut acc = if product { A::ONE } else { A::ZERO };
            for (o, &v) in o.iter_mut().zip(l[0]) {
                acc = if product { acc.mul(v) } else { acc.add(v) };
                *o = acc;
            }
        })?;
        (unlanes(&ys, &red, dt)?, ys)
    });
    if !dt.is_float() || !needs_grad(&[x0]) {
        return Ok(vec![out]);
    }
    let xs = lanes::<f64>(&x, &red)?;
    let node = if product { "CumprodBackward0" } else { "CumsumBackward0" };
    // cumprod reads the input (possibly through a view); cumsum reads nothing.
    let kept: &[&Raw] = if product { &[x0] } else { &[] };
    Ok(vec![record_saving(out, node, &[x0], kept, false, move |g| {
        let gs = lanes::<f64>(g, &red)?;
        let dx = map_lanes::<f64, f64>(&[&gs, &xs, &ys], red.r, |_, l, d| if product { cumprod_grad(l[0], l[1], l[2], d) } else { rev_cumsum(l[0], d, |_, g| g) })?;
        Ok(vec![Some(unlanes(&dx, &red, dt)?)])
    })])
}

/// `d[i] = sum over j >= i of f(j, g[j])`.
fn rev_cumsum(g: &[f64], d: &mut [f64], f: impl Fn(usize, f64) -> f64) {
    let mut acc = 0.0;
    for j in (0..g.len()).rev() {
        acc += f(j, g[j]);
        d[j] = acc;
    }
}

/// The gradient of `y = cumprod(x)`: sum over j >= i of g_j * y_j / x_i
/// before the first zero of `x`; at the first zero, the products with it
/// left out; after it, 0 (every product there holds the zero).
fn cumprod_grad(g: &[f64], x: &[f64], y: &[f64], d: &mut [f64]) {
    let z = x.iter().position(|&v| v == 0.0).unwrap_or(x.len());
    rev_cumsum(g, d, |j, g| g * y[j]);
    for (d, &v) in d.iter_mut().zip(x).take(z) {
        *d /= v;
    }
    if z < x.len() {
        let before = if z == 0 { 1.0 } else { y[z - 1] };
        let (mut acc, mut t) = (0.0, 1.0);
        for j in z..x.len() {
            if j > z {
                t *= x[j];
            }
            acc += g[j] * t;
        }
        d[z] = before * acc;
        d[z + 1..].fill(0.0);
    }
}

fn cumsum(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    scan(call, ins, false)
}

fn cumprod(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    scan(call, ins, true)
}

// ------------------------------------------------------------------ softmax

/// Columns of the softmax dim handled together: a block of `dd × COLS`
/// values stays in cache across the passes.
const COLS: usize = 256;

/// The size of `shape` before `d`, at `d`, and after it (1 for a 0-dim tensor).
fn around(shape: &[i64], d: usize) -> (usize, usize, usize) {
    let p = |s: &[i64]| s.iter().map(|&v| v as usize).product::<usize>();
    (p(&shape[..d.min(shape.len())]), shape.get(d).map_or(1, |&v| v as usize), p(shape.get(d + 1..).unwrap_or(&[])))
}

/// Runs `f(x block, out block, width)` on every block of up to `COLS`
/// columns of each `dd × inner` slab (`ins` and `out` contiguous, of the
/// same shape), across the pool when large. Column offsets index `inner`.
fn col_blocks<R: Real>(ins: &[&[R]], out: &mut [R], outer: usize, dd: usize, inner: usize, f: impl Fn(&[&[R]], &mut [R], usize, usize) + Sync) {
    let per = inner.div_ceil(COLS);
    let po = Ptr(out.as_mut_ptr());
    split(outer * per, dd * COLS.min(inner), |lo, hi| {
        for b in lo..hi {
            let (o, c) = (b / per, (b % per) * COLS);
            let base = o * dd * inner + c;
            let views: Vec<&[R]> = ins.iter().map(|x| &x[base..]).collect();
            // SAFETY: block `b` writes only its own columns of its own slab.
            let out = unsafe { std::slice::from_raw_parts_mut(po.at(base as isize), (dd - 1) * inner + COLS.min(inner - c)) };
            f(&views, out, COLS.min(inner - c), inner);
        }
    });
}

multiversion!(fn softmax_cols<R: Real>(x: &[R], y: &mut [R], dd: usize, w: usize, inner: usize, log: bool) => softmax_cols_imp);

#[inline(always)]
fn softmax_cols_imp<R: Real>(x: &[R], y: &mut [R], dd: usize, w: usize, inner: usize, log: bool) {
    let mut m = [R::neg_infinity(); COLS];
    let mut s = [R::zero(); COLS];
    let (m, s) = (&mut m[..w], &mut s[..w]);
    for k in 0..dd {
        for (m, &v) in m.iter_mut().zip(&x[k * inner..k * inner + w]) {
            *m = if v > *m { v } else { *m };
        }
    }
    for k in 0..dd {
        let row = &mut y[k * inner..k * inner + w];
        for ((y, &v), (&m, s)) in row.iter_mut().zip(&x[k * inner..k * inner + w]).zip(m.iter().zip(s.iter_mut())) {
            let e = (v - m).vexp();
            *s = *s + e;
            *y = if log { v - m } else { e };
        }
    }
    if log {
        s.iter_mut().for_each(|s| *s = s.ln());
    } else {
        s.iter_mut().for_each(|s| *s = R::one() / *s);
    }
    for k in 0..dd {
        for (y, &s) in y[k * inner..k * inner + w].iter_mut().zip(s.iter()) {
            *y = if log { *y - s } else { *y * s };
        }
    }
}

multiversion!(fn softmax_cols_back<R: Real>(g: &[R], y: &[R], dx: &mut [R], dd: usize, w: usize, inner: usize, log: bool) => softmax_cols_back_imp);

/// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g).
#[inline(always)]
fn softmax_cols_back_imp<R: Real>(g: &[R], y: &[R], dx: &mut [R], dd: usize, w: usize, inner: usize, log: bool) {
    let mut s = [R::zero(); COLS];
    let s = &mut s[..w];
    for k in 0..dd {
        let at = k * inner..k * inner + w;
        for (s, (&g, &y)) in s.iter_mut().zip(g[at.clone()].iter().zip(&y[at])) {
            *s = *s + if log { g } else { g * y };
        }
    }
    for k in 0..dd {
        let at = k * inner..k * inner + w;
        for ((d, &s), (&g, &y)) in dx[at.clone()].iter_mut().zip(s.iter()).zip(g[at.clone()].iter().zip(&y[at])) {
            *d = if log { g - y.vexp() * s } else { y * (g - s) };
        }
    }
}

fn softmax_any(call: &Call, ins: &[Option<&Raw>], log: bool) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let x = with_dtype(call, x0)?;
    let node = if log { "LogSoftmaxBackward0" } else { "SoftmaxBackward0" };
    if x.numel() == 0 {
        // PyTorch returns an empty input as it is, of any dtype.
        return Ok(vec![record(Raw::empty(x.shape(), x.dtype())?, node, &[x0], |g| Ok(vec![Some(g.clone())]))]);
    }
    let (outer, dd, inner) = around(x.shape(), call.int("dim").unwrap_or(0) as usize);
    let (out, y) = with_float!(x.dtype(), T => {
        type R = <T as FloatElem>::Real;
        let xr = real::<R>(&x)?;
        let y = Raw::empty(x.shape(), R::DT)?;
        let (xs, ys) = (xr.slice::<R>(), y.slice_mut::<R>());
        match (inner, log) {
            (1, false) => fused::softmax_fwd(xs, dd, ys),
            (1, true) => fused::log_softmax_fwd(xs, dd, ys),
            _ => col_blocks::<R>(&[xs], ys, outer, dd, inner, |x, y, w, inner| softmax_cols(x[0], y, dd, w, inner, log)),
        }
        (convert(&y, x.dtype())?, y)
    }, _ => crate::bail!(E_DTYPE, "softmax: needs a floating dtype, got {}", x.dtype().name()));
    if !needs_grad(&[x0]) {
        return Ok(vec![out]);
    }
    // `y` may be the result's own buffer.
    Ok(vec![record_saving(out, node, &[x0], &[], true, move |g| {
        let dx = match y.dtype() {
            DType::F64 => softmax_back::<f64>(g, &y, outer, dd, inner, log)?,
            _ => softmax_back::<f32>(g, &y, outer, dd, inner, log)?,
        };
        Ok(vec![Some(dx)])
    })])
}

/// The softmax gradient from `g` and the saved result `y` (of the computing type `R`).
fn softmax_back<R: Real + Elem>(g: &Raw, y: &Raw, outer: usize, dd: usize, inner: usize, log: bool) -> Result<Raw> {
    let gr = real::<R>(g)?;
    let dx = Raw::empty(y.shape(), R::DT)?;
    let (gs, ys, ds) = (gr.slice::<R>(), y.slice::<R>(), dx.slice_mut::<R>());
    match (inner, log) {
        (1, false) => fused::softmax_bwd(gs, ys, dd, ds),
        _ => col_blocks::<R>(&[gs, ys], ds, outer, dd, inner, |v, d, w, inner| softmax_cols_back(v[0], v[1], d, dd, w, inner, log)),
    }
    Ok(dx)
}

fn softmax(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    softmax_any(call, ins, false)
}

fn log_softmax(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    softmax_any(call, ins, true)
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("sum.dim_IntList", sum),
    ("sum", sum),
    ("mean.dim", mean),
    ("mean", mean),
    ("prod.dim_int", prod),
    ("prod", prod),
    ("amax", amax),
    ("amin", amin),
    ("argmax", argmax),
    ("argmin", argmin),
    ("max.dim", max_dim),
    ("max", max_all),
    ("min.dim", min_dim),
    ("min", min_all),
    ("var.correction", var),
    ("var.dim", var),
    ("std.correction", std),
    ("std.dim", std),
    ("logsumexp", logsumexp),
    ("norm.ScalarOpt_dim", norm),
    ("norm.Scalar", norm),
    ("linalg_vector_norm", linalg_vector_norm),
    ("all.dims", all),
    ("all.dim", all),
    ("all", all),
    ("any.dims", any),
    ("any.dim", any),
    ("any", any),
    ("count_nonzero.dim_IntList", count_nonzero),
    ("count_nonzero", count_nonzero),
    ("cumsum", cumsum),
    ("cumprod", cumprod),
    ("softmax.int", softmax),
    ("log_softmax.int", log_softmax),
];
