//! Native ops: elementwise arithmetic with PyTorch's type promotion, views,
//! reductions and casts, each recording its backward when an input
//! requires grad. (Matmul and the fused nn ops are in `matmul.rs`, `nn.rs`.)

use super::autograd::{needs_grad, record, record_saving};
use super::elem::{promote, with_elem, with_float, Arith, Elem, FloatElem};
use super::kernels::{add_assign, cast_to, copy_into, map_into, sum_into, zip_into};
use super::opk::conj_plain;
use super::tensor::{contiguous_strides, numel, Raw};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::kinds::{Binary, Reduce, Unary};

/// `x` converted to `dt` (a copy), or `x` itself (detached) when it already is.
pub fn convert(x: &Raw, dt: DType) -> Result<Raw> {
    if x.dtype() == dt {
        return Ok(x.detached());
    }
    with_elem!(x.dtype(), S => with_elem!(dt, D => cast_to::<S, D>(x)))
}

/// A contiguous copy of `g` (the leaf gradient the engine keeps).
pub fn clone_contiguous(g: &Raw) -> Result<Raw> {
    with_elem!(g.dtype(), T => cast_to::<T, T>(g))
}

/// The core's dim check (`[-rank, rank)`, -1 and 0 for a 0-dim tensor), as an index.
pub fn norm_dim(op: &str, dim: i64, shape: &[i64]) -> Result<usize> {
    crate::vocab::norm_dim(op, dim, shape).map(|d| d as usize)
}

pub fn full_like(x: &Raw, v: f64) -> Result<Raw> {
    full(x.shape(), x.dtype(), v)
}

pub fn full(shape: &[i64], dt: DType, v: f64) -> Result<Raw> {
    let out = Raw::empty(shape, dt)?;
    with_elem!(dt, T => {
        let v: T = super::elem::cast::<f64, T>(v);
        out.slice_mut::<T>().fill(v);
    });
    Ok(out)
}

// ---------------------------------------------------------------- elementwise

fn bin_shape(op: &str, a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    crate::vocab::broadcast(a, b).ok_or_else(|| crate::err!(E_SHAPE, "{op}: shapes {} and {} do not broadcast", fmt(a), fmt(b)))
}

/// `a <op> b` in `dt` (both already of dtype `dt`, any strides), no autograd.
fn arith(op: Binary, a: &Raw, b: &Raw, shape: &[i64]) -> Result<Raw> {
    let out = Raw::empty(shape, a.dtype())?;
    // One loop per op: a `match` inside the element closure would keep the loop scalar.
    with_elem!(a.dtype(), T => {
        match op {
            Binary::Add => zip_into::<T, T, T>(&out, a, b, |x, y| T::down(x.up().add(y.up()))),
            Binary::Sub => zip_into::<T, T, T>(&out, a, b, |x, y| T::down(x.up().sub(y.up()))),
            Binary::Mul => zip_into::<T, T, T>(&out, a, b, |x, y| T::down(x.up().mul(y.up()))),
            Binary::Div => zip_into::<T, T, T>(&out, a, b, |x, y| T::down(x.up().div(y.up()))),
        }
    });
    Ok(out)
}

/// The dtype PyTorch computes `a <op> b` in, or its refusal.
fn binary_dtype(op: Binary, a: &Raw, b: &Raw) -> Result<DType> {
    let dt = promote(a.dtype(), a.dim() > 0, b.dtype(), b.dim() > 0);
    if op == Binary::Sub && (a.dtype() == DType::Bool || b.dtype() == DType::Bool) {
        crate::bail!(E_DTYPE, "sub: subtraction with a bool tensor is not supported (use logical_xor / logical_not)");
    }
    Ok(if op == Binary::Div && !dt.is_inexact() { DType::F32 } else { dt })
}

/// `x` in dtype `dt`: itself when it already is, else a converted copy kept in `slot`.
fn in_dtype<'a>(x: &'a Raw, dt: DType, slot: &'a mut Option<Raw>) -> Result<&'a Raw> {
    if x.dtype() == dt {
        return Ok(x);
    }
    Ok(slot.insert(convert(x, dt)?))
}

/// `a <op> b` without recording (for backward formulas).
pub fn plain(op: Binary, a: &Raw, b: &Raw) -> Result<Raw> {
    let dt = binary_dtype(op, a, b)?;
    let (mut ca, mut cb) = (None, None);
    let (a, b) = (in_dtype(a, dt, &mut ca)?, in_dtype(b, dt, &mut cb)?);
    if a.shape() == b.shape() {
        return arith(op, a, b, a.shape());
    }
    arith(op, a, b, &bin_shape("binary", a.shape(), b.shape())?)
}

pub fn add_plain(a: &Raw, b: &Raw) -> Result<Raw> {
    plain(Binary::Add, a, b)
}

fn mul(a: &Raw, b: &Raw) -> Result<Raw> {
    plain(Binary::Mul, a, b)
}

fn scalar(v: f64, dt: DType) -> Result<Raw> {
    full(&[], dt, v)
}

/// `acc += g` in place (same shape; `g` converted to `acc`'s dtype).
pub fn add_in_place(acc: &Raw, g: &Raw) -> Result<()> {
    // The usual case (a leaf's grad plus a new one of its layout): in place,
    // no temporary. Separate storages, so the two slices never alias.
    let same_layout = acc.dtype() == g.dtype() && acc.shape() == g.shape() && acc.is_contiguous() && g.is_contiguous();
    if same_layout && !std::sync::Arc::ptr_eq(&acc.0.storage, &g.0.storage) {
        with_elem!(acc.dtype(), T => add_assign(acc.slice_mut::<T>(), g.slice::<T>()));
        return Ok(());
    }
    let sum = plain(Binary::Add, acc, g)?;
    with_elem!(sum.dtype(), S => with_elem!(acc.dtype(), D => copy_into::<S, D>(acc, &sum)));
    Ok(())
}

pub fn binary(op: Binary, a: &Raw, b: &Raw) -> Result<Raw> {
    let out = plain(op, a, b)?;
    if !needs_grad(&[a, b]) {
        return Ok(out);
    }
    let (sa, sb) = (a.detached(), b.detached());
    let (ga, gb) = (a.requires_grad(), b.requires_grad());
    // add and sub read no values; mul and div read their operands.
    let saved: &[&Raw] = if matches!(op, Binary::Mul | Binary::Div) { &[a, b] } else { &[] };
    Ok(record_saving(out, "BinaryBackward", &[a, b], saved, false, move |g| {
        Ok(match op {
            Binary::Add => vec![Some(g.clone()), Some(g.clone())],
            Binary::Sub => vec![Some(g.clone()), Some(mul(g, &scalar(-1.0, g.dtype())?)?)],
            // Complex operands enter conjugated (PyTorch's Wirtinger convention); a real one is its own conjugate.
            Binary::Mul => vec![
                if ga { Some(mul(g, &conj_plain(&sb)?)?) } else { None },
                if gb { Some(mul(g, &conj_plain(&sa)?)?) } else { None },
            ],
            // As PyTorch: grad / conj(b), and -grad * conj((a / b) / b).
            Binary::Div => vec![
                if ga { Some(plain(Binary::Div, g, &conj_plain(&sb)?)?) } else { None },
                if gb {
                    let q = conj_plain(&plain(Binary::Div, &plain(Binary::Div, &sa, &sb)?, &sb)?)?;
                    Some(mul(&mul(g, &scalar(-1.0, g.dtype())?)?, &q)?)
                } else {
                    None
                },
            ],
        })
    }))
}

/// `f` over a floating tensor's elements in its computing type, into a new tensor of its dtype.
fn map_float(x: &Raw, f: impl Fn(f64) -> f64 + Sync, f32f: impl Fn(f32) -> f32 + Sync) -> Result<Raw> {
    let out = Raw::empty(x.shape(), x.dtype())?;
    with_float!(x.dtype(), T => {
        map_into::<T, T>(&out, x, x.strides(), |v: T| T::down(<T as FloatElem>::Real::apply(v.up(), &f, &f32f)));
    }, _ => unreachable!("callers pass floating tensors"));
    Ok(out)
}

/// Picks the f32 or f64 form of an elementwise function.
trait Apply: Sized {
    fn apply(self, f: &impl Fn(f64) -> f64, f32f: &impl Fn(f32) -> f32) -> Self;
}
impl Apply for f32 {
    #[inline(always)]
    fn apply(self, _: &impl Fn(f64) -> f64, f32f: &impl Fn(f32) -> f32) -> f32 {
        f32f(self)
    }
}
impl Apply for f64 {
    #[inline(always)]
    fn apply(self, f: &impl Fn(f64) -> f64, _: &impl Fn(f32) -> f32) -> f64 {
        f(self)
    }
}

/// `g * h(y)` elementwise in the computing type, rounding once (as
/// PyTorch's `*_backward` kernels do for reduced-precision floats).
fn grad_map(g: &Raw, y: &Raw, h64: impl Fn(f64, f64) -> f64 + Sync, h32: impl Fn(f32, f32) -> f32 + Sync) -> Result<Raw> {
    let y = convert(y, g.dtype())?;
    let out = Raw::empty(g.shape(), g.dtype())?;
    with_float!(g.dtype(), T => {
        zip_into::<T, T, T>(&out, g, &y, |a: T, b: T| T::down(<T as FloatElem>::Real::apply2(a.up(), b.up(), &h64, &h32)));
    }, _ => crate::bail!(E_DTYPE, "gradient of dtype {}", g.dtype().name()));
    Ok(out)
}

trait Apply2: Sized {
    fn apply2(self, o: Self, f: &impl Fn(f64, f64) -> f64, f32f: &impl Fn(f32, f32) -> f32) -> Self;
}
impl Apply2 for f32 {
    #[inline(always)]
    fn apply2(self, o: f32, _: &impl Fn(f64, f64) -> f64, f32f: &impl Fn(f32, f32) -> f32) -> f32 {
        f32f(self, o)
    }
}
impl Apply2 for f64 {
    #[inline(always)]
    fn apply2(self, o: f64, f: &impl Fn(f64, f64) -> f64, _: &impl Fn(f32, f32) -> f32) -> f64 {
        f(self, o)
    }
}


pub fn unary(op: Unary, x: &Raw) -> Result<Raw> {
    let dt = x.dtype();
    match op {
        Unary::Detach => Ok(x.detached()),
        Unary::Relu => {
            if dt == DType::Bool {
                crate::bail!(E_DTYPE, "relu: boolean inputs are not supported");
            }
            let out = Raw::empty(x.shape(), dt)?;
            // NaN stays NaN, as clamp_min does.
            // (for uint8 the comparison is `== 0`, which clippy sees as always-false `< 0`)
            #[allow(clippy::absurd_extreme_comparisons)]
            {
                with_elem!(dt, T => map_into::<T, T>(&out, x, x.strides(), |v: T| if v.up() <= <T as Elem>::Acc::ZERO { T::down(<T as Elem>::Acc::ZERO) } else { v }));
            }
            if !needs_grad(&[x]) {
                return Ok(out);
            }
            let y = out.detached();
            Ok(record_saving(out, "ReluBackward", &[x], &[], true, move |g| {
                Ok(vec![Some(grad_map(g, &y, |g, y| if y <= 0.0 { 0.0 } else { g }, |g, y| if y <= 0.0 { 0.0 } else { g })?)])
            }))
        }
        Unary::Sigmoid | Unary::Tanh => {
            // Integer and bool inputs compute in the default float dtype, as PyTorch's unary float ops.
            let xf = if dt.is_float() { x.detached() } else { convert(x, DType::F32)? };
            let out = if op == Unary::Sigmoid {
                map_float(&xf, |v| 1.0 / (1.0 + (-v).exp()), |v| 1.0 / (1.0 + (-v).exp()))?
            } else {
                map_float(&xf, f64::tanh, f32::tanh)?
            };
            if !needs_grad(&[x]) {
                return Ok(out);
            }
            let y = out.detached();
            Ok(record_saving(out, if op == Unary::Sigmoid { "SigmoidBackward" } else { "TanhBackward" }, &[x], &[], true, move |g| {
                let r = if op == Unary::Sigmoid {
                    grad_map(g, &y, |g, y| g * (1.0 - y) * y, |g, y| g * (1.0 - y) * y)?
                } else {
                    grad_map(g, &y, |g, y| g * (1.0 - y * y), |g, y| g * (1.0 - y * y))?
                };
                Ok(vec![Some(r)])
            }))
        }
        Unary::Gelu => super::nn::gelu(x),
    }
}

fn float_only(op: &str, x: &Raw) -> Result<()> {
    if !x.dtype().is_float() {
        crate::bail!(E_DTYPE, "{op} needs a floating tensor, got {}", x.dtype().name());
    }
    Ok(())
}

/// `torch.rsqrt` of a floating tensor; its gradient is `-g·y³/2`, as torch's.
pub fn rsqrt(x: &Raw) -> Result<Raw> {
    float_only("rsqrt", x)?;
    let out = map_float(x, |v| 1.0 / v.sqrt(), |v| 1.0 / v.sqrt())?;
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let y = out.detached();
    Ok(record_saving(out, "RsqrtBackward", &[x], &[], true, move |g| {
        Ok(vec![Some(grad_map(g, &y, |g, y| -0.5 * g * y * y * y, |g, y| -0.5 * g * y * y * y)?)])
    }))
}

/// `F.silu` of a floating tensor, `x / (1 + e^-x)`; its gradient is
/// `g·s·(1 + x·(1 − s))` with `s = sigmoid(x)`, as torch's `silu_backward`.
pub fn silu(x: &Raw) -> Result<Raw> {
    float_only("silu", x)?;
    let out = map_float(x, |v| v / (1.0 + (-v).exp()), |v| v / (1.0 + (-v).exp()))?;
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let sx = x.detached();
    Ok(record_saving(out, "SiluBackward", &[x], &[x], false, move |g| {
        let back64 = |g: f64, x: f64| {
            let s = 1.0 / (1.0 + (-x).exp());
            g * s * (1.0 + x * (1.0 - s))
        };
        let back32 = |g: f32, x: f32| {
            let s = 1.0 / (1.0 + (-x).exp());
            g * s * (1.0 + x * (1.0 - s))
        };
        Ok(vec![Some(grad_map(g, &sx, back64, back32)?)])
    }))
}

// ---------------------------------------------------------------------- views

/// The strides that let `shape` view a tensor of `old` shape/strides without
/// a copy (ATen's `computeStride`), or `None`.
fn view_strides(old: &[i64], old_strides: &[i64], shape: &[i64]) -> Option<Vec<i64>> {
    if old.is_empty() || numel(old) <= 1 {
        return Some(contiguous_strides(shape).into_vec());
    }
    let mut out = vec![0i64; shape.len()];
    let mut view_d = shape.len() as i64 - 1;
    let mut chunk_base = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1i64, 1i64);
    for td in (0..old.len()).rev() {
        tensor_numel *= old[td];
        if td == 0 || (old[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base) {
            while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if td > 0 {
                chunk_base = old_strides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

/// Resolves a `-1` and checks the element count.
fn target_shape(op: &str, x: &Raw, shape: &[i64]) -> Result<Vec<i64>> {
    // The typed functions' JSON parser has checked this already; `enkai_op`'s ints have not.
    if let Some(why) = crate::json::DimsRule::Target.fault(shape) {
        crate::bail!(E_INVALID_ARG, "{op}: shape {}: {why}", fmt(shape));
    }
    let n = x.numel() as i64;
    let Some(known) = shape.iter().filter(|&&d| d != -1).try_fold(1i64, |k, &d| k.checked_mul(d)) else {
        crate::bail!(E_SHAPE, "{op}: cannot reshape {} into {}", fmt(x.shape()), fmt(shape));
    };
    let mut out = shape.to_vec();
    if let Some(i) = shape.iter().position(|&d| d == -1) {
        if known == 0 || n % known != 0 {
            crate::bail!(E_SHAPE, "{op}: cannot reshape {} into {}", fmt(x.shape()), fmt(shape));
        }
        out[i] = n / known;
    } else if known != n {
        crate::bail!(E_SHAPE, "{op}: cannot reshape {} into {}", fmt(x.shape()), fmt(shape));
    }
    Ok(out)
}

fn reshape_plain(x: &Raw, shape: &[i64]) -> Result<Raw> {
    match view_strides(x.shape(), x.strides(), shape) {
        Some(st) => Ok(x.view_as(shape.to_vec(), st, x.0.offset)),
        None => {
            let c = x.contiguous()?;
            Ok(c.view_as(shape.to_vec(), contiguous_strides(shape), c.0.offset))
        }
    }
}

/// A view when the strides allow one, else a copy (`torch.reshape`); the ABI's `view` is the same.
pub fn reshape(x: &Raw, shape: &[i64]) -> Result<Raw> {
    let shape = target_shape("reshape", x, shape)?;
    let out = reshape_plain(x, &shape)?;
    let old = x.shape().to_vec();
    Ok(record(out, "ViewBackward", &[x], move |g| Ok(vec![Some(reshape_plain(g, &old)?)])))
}

pub fn view(x: &Raw, shape: &[i64]) -> Result<Raw> {
    reshape(x, shape)
}

/// PyTorch's `view`: an error where the strides allow no view (`enkai_op`'s `view`).
pub fn view_strict(x: &Raw, shape: &[i64]) -> Result<Raw> {
    let target = target_shape("view", x, shape)?;
    if view_strides(x.shape(), x.strides(), &target).is_none() {
        crate::bail!(E_SHAPE, "view: the strides of {} allow no view of shape {} (use reshape, which copies)", fmt(x.shape()), fmt(shape));
    }
    reshape(x, &target)
}

fn transpose_plain(x: &Raw, d0: usize, d1: usize) -> Raw {
    let (mut s, mut st) = (x.shape().to_vec(), x.strides().to_vec());
    if !s.is_empty() {
        s.swap(d0, d1);
        st.swap(d0, d1);
    }
    x.view_as(s, st, x.0.offset)
}

pub fn transpose(x: &Raw, d0: i64, d1: i64) -> Result<Raw> {
    let (a, b) = (norm_dim("transpose", d0, x.shape())?, norm_dim("transpose", d1, x.shape())?);
    let out = transpose_plain(x, a, b);
    Ok(record(out, "TransposeBackward", &[x], move |g| Ok(vec![Some(transpose_plain(g, a, b))])))
}

/// `x[start:end:step]` along `dim`, clamped as Python slicing is.
fn slice_view(x: &Raw, dim: usize, start: i64, end: i64, step: i64) -> Raw {
    let size = x.shape()[dim];
    let clamp = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size);
    let (s, e) = (clamp(start), clamp(end));
    let e = e.max(s);
    let (mut shape, mut strides) = (x.shape().to_vec(), x.strides().to_vec());
    // Written so that a huge step cannot overflow (the fuzzer's i64::MAX made a negative size).
    shape[dim] = if e > s { (e - s - 1) / step + 1 } else { 0 };
    let offset = x.0.offset + (s * strides[dim]) as usize;
    // A dim of at most one element is never stepped over: keep its stride finite.
    if shape[dim] > 1 {
        strides[dim] *= step;
    }
    x.view_as(shape, strides, offset)
}

pub fn slice(x: &Raw, dim: i64, start: i64, end: i64, step: i64) -> Result<Raw> {
    if x.dim() == 0 {
        crate::bail!(E_SHAPE, "slice: cannot slice a 0-dim tensor");
    }
    if step <= 0 {
        crate::bail!(E_INVALID_ARG, "slice: step must be positive, got {step}");
    }
    let d = norm_dim("slice", dim, x.shape())?;
    let out = slice_view(x, d, start, end, step);
    let old = x.shape().to_vec();
    Ok(record(out, "SliceBackward", &[x], move |g| {
        let z = Raw::zeros(&old, g.dtype())?;
        let dst = slice_view(&z, d, start, end, step);
        with_elem!(g.dtype(), T => copy_into::<T, T>(&dst, g));
        Ok(vec![Some(z)])
    }))
}

pub fn concat(ts: &[&Raw], dim: i64) -> Result<Raw> {
    // As torch.cat, 1-D empty tensors are skipped (a legacy PyTorch rule).
    let parts: Vec<&Raw> = ts.iter().copied().filter(|t| !(t.dim() == 1 && t.numel() == 0)).collect();
    let Some(first) = parts.first().or(ts.first()).copied() else {
        crate::bail!(E_INVALID_ARG, "concat: the list is empty");
    };
    if first.dim() == 0 {
        crate::bail!(E_SHAPE, "concat: zero-dimensional tensors cannot be concatenated");
    }
    let d = norm_dim("concat", dim, first.shape())?;
    let mut shape = first.shape().to_vec();
    shape[d] = 0;
    let mut dt = first.dtype();
    for t in &parts {
        let s = t.shape();
        if s.len() != shape.len() || s.iter().zip(first.shape()).enumerate().any(|(i, (x, y))| i != d && x != y) {
            crate::bail!(E_SHAPE, "concat: {} and {} differ outside dim {dim}", fmt(first.shape()), fmt(s));
        }
        shape[d] += s[d];
        dt = super::elem::promote_types(dt, t.dtype());
    }
    let out = Raw::empty(&shape, dt)?;
    let mut at = 0;
    let mut sizes = Vec::with_capacity(parts.len());
    for t in &parts {
        let n = t.shape()[d];
        let dst = slice_view(&out, d, at, at + n, 1);
        with_elem!(t.dtype(), S => with_elem!(dt, D => copy_into::<S, D>(&dst, t)));
        sizes.push(n);
        at += n;
    }
    if !needs_grad(ts) {
        return Ok(out);
    }
    let skipped: Vec<bool> = ts.iter().map(|t| t.dim() == 1 && t.numel() == 0).collect();
    Ok(record(out, "CatBackward", ts, move |g| {
        let mut at = 0;
        let mut sizes = sizes.iter();
        Ok(skipped
            .iter()
            .map(|&skip| {
                if skip {
                    return None;
                }
                let n = *sizes.next().expect("one size per kept input");
                let v = slice_view(g, d, at, at + n, 1);
                at += n;
                Some(v)
            })
            .collect())
    }))
}

// ----------------------------------------------------------------- reductions

/// Sums over the dims flagged in `mask`, keeping them as size 1 when `keep`.
/// Integers and bool sum to int64 (wrapping); floats accumulate in f64.
pub fn sum_mask(x: &Raw, mask: &[bool], keep: bool, mean: bool) -> Result<Raw> {
    let kept: Vec<i64> = x.shape().iter().zip(mask).map(|(&d, &m)| if m { 1 } else { d }).collect();
    let count: i64 = x.shape().iter().zip(mask).filter(|(_, &m)| m).map(|(&d, _)| d).product();
    let acc_strides: Vec<i64> = {
        let cs = contiguous_strides(&kept);
        cs.iter().zip(mask).map(|(&s, &m)| if m { 0 } else { s }).collect()
    };
    let n = numel(&kept);
    let out_dt = if x.dtype().is_inexact() { x.dtype() } else { DType::I64 };
    let out = Raw::empty(&kept, out_dt)?;
    if x.dtype().is_complex() {
        let mut acc = vec![super::elem::C64::default(); n];
        with_elem!(x.dtype(), S => sum_into::<S, super::elem::C64>(&mut acc, x, &acc_strides, |v: S| super::elem::cast::<S, super::elem::C64>(v)));
        let div = if mean { count as f64 } else { 1.0 };
        with_elem!(out_dt, D => out.slice_mut::<D>().iter_mut().zip(&acc).for_each(|(o, a)| *o = super::elem::cast::<super::elem::C64, D>(super::elem::Cx::new(a.re / div, a.im / div))));
    } else if x.dtype().is_float() {
        let mut acc = vec![0f64; n];
        with_elem!(x.dtype(), S => sum_into::<S, f64>(&mut acc, x, &acc_strides, |v: S| super::elem::cast::<S, f64>(v)));
        let div = if mean { count as f64 } else { 1.0 };
        with_elem!(out_dt, D => out.slice_mut::<D>().iter_mut().zip(&acc).for_each(|(o, a)| *o = super::elem::cast::<f64, D>(a / div)));
    } else {
        let acc = out.slice_mut::<i64>();
        acc.fill(0);
        with_elem!(x.dtype(), S => sum_into::<S, i64>(acc, x, &acc_strides, |v: S| super::elem::cast::<S, i64>(v)));
    }
    if keep {
        return Ok(out);
    }
    let shape: Vec<i64> = kept.iter().zip(mask).filter(|(_, &m)| !m).map(|(&d, _)| d).collect();
    Ok(out.view_as(shape.clone(), contiguous_strides(&shape), 0))
}

/// Sums `g` down to `shape` (the reverse of broadcasting).
pub fn sum_to(g: &Raw, shape: &[i64]) -> Result<Raw> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.dim() - shape.len();
    let mask: Vec<bool> = (0..g.dim()).map(|i| i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)).collect();
    let s = sum_mask(g, &mask, true, false)?;
    reshape_plain(&s, shape)
}

/// `g` (of the reduced shape) expanded back over `shape`, divided by `div`.
pub fn expand_back(g: &Raw, shape: &[i64], mask: &[bool], div: f64) -> Result<Raw> {
    let kept: Vec<i64> = shape.iter().zip(mask).map(|(&d, &m)| if m { 1 } else { d }).collect();
    let g = reshape_plain(g, &kept)?;
    let out = Raw::empty(shape, g.dtype())?;
    with_elem!(g.dtype(), T => copy_into::<T, T>(&out, &g));
    if div != 1.0 {
        return plain(Binary::Div, &out, &scalar(div, out.dtype())?);
    }
    Ok(out)
}

pub fn reduce(op: Reduce, x: &Raw, dim: Option<i64>, keepdim: bool) -> Result<Raw> {
    let name = if op == Reduce::Sum { "sum" } else { "mean" };
    let mask: Vec<bool> = match dim {
        None => vec![true; x.dim()],
        Some(d) => {
            let d = norm_dim(name, d, x.shape())?;
            (0..x.dim()).map(|i| i == d).collect()
        }
    };
    if op == Reduce::Mean && !x.dtype().is_inexact() {
        crate::bail!(E_DTYPE, "mean needs a floating dtype, got {}", x.dtype().name());
    }
    let out = sum_mask(x, &mask, keepdim, op == Reduce::Mean)?;
    let shape = x.shape().to_vec();
    let count: i64 = shape.iter().zip(&mask).filter(|(_, &m)| m).map(|(&d, _)| d).product();
    Ok(record(out, "SumBackward", &[x], move |g| {
        let div = if op == Reduce::Mean { count as f64 } else { 1.0 };
        Ok(vec![Some(expand_back(g, &shape, &mask, div)?)])
    }))
}

// ---------------------------------------------------------------------- casts

pub fn to_dtype(x: &Raw, dt: DType) -> Result<Raw> {
    if x.dtype() == dt {
        return Ok(x.clone());
    }
    let out = convert(x, dt)?;
    if !dt.is_inexact() {
        return Ok(out);
    }
    Ok(record(out, "ToCopyBackward", &[x], |g| Ok(vec![Some(g.clone())])))
}

pub fn to_device(x: &Raw, dev: crate::device::Device) -> Result<Raw> {
    match dev {
        crate::device::Device::Cpu => Ok(x.clone()),
        d => crate::bail!(E_DEVICE, "the cpu backend has no {d} device"),
    }
}

/// Smallest and largest element, for error messages.
pub fn min_max(x: &Raw) -> Result<(f64, f64)> {
    let n = x.numel();
    if n == 0 {
        crate::bail!(E_SHAPE, "min/max of an empty tensor");
    }
    let c = with_elem!(x.dtype(), S => cast_to::<S, f64>(x))?;
    let s = c.slice::<f64>();
    Ok(s.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v))))
}

/// Row `i` of a 2-D tensor (a view).
pub fn slice_row(w: &Raw, i: i64) -> Raw {
    w.view_as(vec![w.shape()[1]], vec![w.strides()[1]], w.0.offset + (i * w.strides()[0]) as usize)
}
