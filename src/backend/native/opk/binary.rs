//! Elementwise ops of two or three operands (tensors, or numbers in their
//! place): arithmetic, powers, comparisons, logic, clamps, interpolation.
//! Operands are converted to the compute dtype (`call.promoted`, or the
//! result dtype where PyTorch computes in it), broadcast by strides (no
//! copies), and the backward formulas are PyTorch's (derivatives.yaml).

use std::sync::atomic::{AtomicBool, Ordering};

use num_traits::Float;

use super::super::autograd::{needs_grad, record_saving};
use super::super::elem::{cast, match_elem, with_elem, with_float, Elem, FloatElem, B8};
use super::super::fused::Real;
use super::super::kernels::{expand_strides, zip_into, Ptr, Walk};
use super::super::ops::{convert, full};
use super::super::tensor::Raw;
use super::Kernel;
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::{Call, Scalar};

#[inline(always)]
fn c<T: Float>(v: f64) -> T {
    T::from(v).unwrap_or_else(T::nan)
}

/// An elementwise function of N operands.
pub trait NaryFn<const N: usize>: Copy + Send + Sync + 'static {
    fn f<T: Real>(self, v: [T; N], p: &[T]) -> T;
    /// The integer form, in i64 (wrapping as the storage type wraps); `None` is an error (division by zero).
    fn int(self, v: [i64; N], p: &[f64]) -> Option<i64>;
    /// The gradient of operand `i`.
    fn df<T: Real>(self, i: usize, g: T, v: [T; N], y: T, p: &[T]) -> T;
}

/// The operands of a call, by parameter name: tensors (inputs) or numbers.
fn operand(call: &Call, ins: &[Option<&Raw>], name: &str, dt: DType) -> Result<Option<Raw>> {
    if let Some(i) = call.tensor(name) {
        let t = ins[i].expect("core checked");
        return Ok(Some(if t.dtype() == dt { t.clone() } else { convert(t, dt)? }));
    }
    match call.scalar(name) {
        Some(Scalar::Int(v)) if !dt.is_float() => Ok(Some(full_i64(v, dt)?)),
        Some(s) => Ok(Some(full(&[], dt, s.to_f64())?)),
        None => Ok(None),
    }
}

/// A 0-dim tensor holding an exact integer.
fn full_i64(v: i64, dt: DType) -> Result<Raw> {
    let t = Raw::empty(&[], dt)?;
    with_elem!(dt, T => t.slice_mut::<T>()[0] = cast::<i64, T>(v));
    Ok(t)
}

fn out_shape(ops: &[&Raw]) -> Vec<i64> {
    ops.iter().fold(Vec::new(), |s, t| crate::vocab::broadcast(&s, t.shape()).expect("core checked broadcasting"))
}

/// `out[i] = f(a[i], b[i], c[i])` with the operands broadcast to `out`'s shape.
fn zip3_into<T: Elem, D: Elem>(out: &Raw, ops: [&Raw; 3], f: impl Fn([T; 3]) -> D + Sync) {
    let st = ops.map(|t| expand_strides(t, out.shape()));
    let w = Walk::new(out.shape(), [out.strides(), &st[0], &st[1], &st[2]]);
    let po = Ptr::<D>::of(out);
    let ps = ops.map(Ptr::<T>::of);
    let (n, [so, s0, s1, s2]) = (w.inner, w.inner_strides);
    w.par_rows([0; 4], |[o, i, j, k]| {
        for q in 0..n as isize {
            // SAFETY: offsets come from the views' own shapes and strides.
            unsafe { *po.at(o + q * so) = f([*ps[0].at(i + q * s0), *ps[1].at(j + q * s1), *ps[2].at(k + q * s2)]) };
        }
    });
}

/// Materialises `t` broadcast to `shape`, contiguous (for backward loops).
fn expanded(t: &Raw, shape: &[i64]) -> Result<Raw> {
    if t.shape() == shape && t.is_contiguous() {
        return Ok(t.clone());
    }
    t.view_as(shape.to_vec(), expand_strides(t, shape), t.0.offset).contiguous()
}

/// Applies `u` to the operands (already of dtype `dt`) into a new tensor of `out_dt`.
fn apply<const N: usize, U: NaryFn<N>>(u: U, ops: &[Raw; N], dt: DType, out_dt: DType, p: &[f64], name: &str) -> Result<Raw> {
    let refs: Vec<&Raw> = ops.iter().collect();
    let out = Raw::empty(&out_shape(&refs), out_dt)?;
    let failed = AtomicBool::new(false);
    // Every op computes in its result's dtype (each caller passes one dtype
    // twice), so only those pairs are compiled: each (operand, result) pair
    // instantiates the loop once per op, and all pairs were half the
    // library's code. Complex operands run `complex::OVERRIDES` instead.
    if out_dt != dt {
        crate::bail!(E_DTYPE, "{name}: {} operands with a {} result", dt.name(), out_dt.name());
    }
    with_float!(dt, T => {
        type R = <T as FloatElem>::Real;
        let pr: Vec<R> = p.iter().map(|&v| c::<R>(v)).collect();
        let g = |v: [T; N]| T::down(u.f::<R>(v.map(|x| x.up()), &pr));
        run_n::<N, T, T>(&out, &refs, g);
    }, _ => match_elem!(dt, T => {
        let g = |v: [T; N]| match u.int(v.map(|x| cast::<T, i64>(x)), p) {
            Some(r) => cast::<i64, T>(r),
            None => {
                failed.store(true, Ordering::Relaxed);
                T::default()
            }
        };
        run_n::<N, T, T>(&out, &refs, g);
    }, [I64: i64, I32: i32, Bool: B8, U8: u8, I8: i8, I16: i16], _ => crate::bail!(E_DTYPE, "{name}: {} is not supported here", dt.name())));
    if failed.load(Ordering::Relaxed) {
        crate::bail!(E_INVALID_ARG, "{name}: ZeroDivisionError (integer division by zero)");
    }
    Ok(out)
}

fn run_n<const N: usize, T: Elem, D: Elem>(out: &Raw, ops: &[&Raw], f: impl Fn([T; N]) -> D + Sync) {
    match ops {
        [a] => super::super::kernels::map_into::<T, D>(out, a, &expand_strides(a, out.shape()), |x| f(std::array::from_fn(|_| x))),
        [a, b] => zip_into::<T, T, D>(out, a, b, |x, y| f(std::array::from_fn(|i| if i == 0 { x } else { y }))),
        [a, b, cc] => zip3_into::<T, D>(out, [a, b, cc], |v| f(std::array::from_fn(|i| v[i]))),
        _ => unreachable!("at most three operands"),
    }
}

/// The gradients of the operands that require grad, at the output's shape (the engine sums them down).
fn grads<const N: usize, U: NaryFn<N>>(u: U, g: &Raw, ops: &[Raw; N], y: &Raw, want: [bool; N], dt: DType, p: &[f64]) -> Result<Vec<Option<Raw>>> {
    let shape = y.shape().to_vec();
    let g = convert(g, dt)?.contiguous()?;
    let full: Vec<Raw> = ops.iter().map(|t| expanded(t, &shape)).collect::<Result<_>>()?;
    let y = y.contiguous()?;
    (0..N)
        .map(|i| {
            if !want[i] {
                return Ok(None);
            }
            let out = Raw::empty(&shape, dt)?;
            with_float!(dt, T => {
                type R = <T as FloatElem>::Real;
                let pr: Vec<R> = p.iter().map(|&v| c::<R>(v)).collect();
                let (o, gs, ys) = (out.slice_mut::<T>(), g.slice::<T>(), y.slice::<T>());
                let vs: Vec<&[T]> = full.iter().map(|t| t.slice::<T>()).collect();
                for k in 0..o.len() {
                    o[k] = T::down(u.df::<R>(i, gs[k].up(), std::array::from_fn(|j| vs[j][k].up()), ys[k].up(), &pr));
                }
            }, _ => crate::bail!(E_DTYPE, "gradient of dtype {}", dt.name()));
            Ok(Some(out))
        })
        .collect()
}

/// Runs `u` over the parameters `names` (tensors or numbers), computing in
/// `dt` with a result of `out_dt`, and records its backward to the tensor operands.
fn run<const N: usize, U: NaryFn<N>>(call: &Call, ins: &[Option<&Raw>], names: [&str; N], u: U, dt: DType, out_dt: DType, p: Vec<f64>, node: &'static str) -> Result<Vec<Raw>> {
    let mut ops: Vec<Raw> = Vec::with_capacity(N);
    for n in names {
        ops.push(operand(call, ins, n, dt)?.expect("the overload has the operand"));
    }
    let ops: [Raw; N] = ops.try_into().unwrap_or_else(|_| unreachable!());
    let y = apply(u, &ops, dt, out_dt, &p, call.op.name())?;
    let originals: Vec<Option<&Raw>> = names.iter().map(|n| call.tensor(n).and_then(|i| ins[i])).collect();
    let tensors: Vec<&Raw> = originals.iter().flatten().copied().collect();
    if !out_dt.is_float() || !needs_grad(&tensors) {
        return Ok(vec![y]);
    }
    let want: [bool; N] = std::array::from_fn(|i| originals[i].is_some_and(|t| t.requires_grad()));
    let saved: [Raw; N] = ops.map(|t| t.detached());
    let ys = y.detached();
    // Edges go to the tensor operands, in order; number operands have none.
    let slots: Vec<usize> = (0..N).filter(|&i| originals[i].is_some()).collect();
    // The derivative reads the operands, except add's and sub's (constants),
    // and only pow's reads the result: what PyTorch's backward nodes save, so
    // an in-place write refused here is one PyTorch refuses.
    let name = call.op.name().trim_end_matches('_');
    let kept: &[&Raw] = if matches!(name, "add" | "sub") { &[] } else { &tensors };
    Ok(vec![record_saving(y, node, &tensors, kept, name == "pow", move |g| {
        let all = grads(u, g, &saved, &ys, want, dt, &p)?;
        Ok(slots.iter().map(|&i| all[i].clone()).collect())
    })])
}

/// Declares an N-ary op `U` from its float, integer and gradient formulas.
macro_rules! nary {
    ($U:ident, $n:literal, |$v:ident, $p:ident| $f:expr, int |$iv:ident, $ip:ident| $int:expr, |$i:ident, $g:ident, $dv:ident, $y:ident, $dp:ident| $df:expr) => {
        #[derive(Clone, Copy)]
        struct $U;
        impl NaryFn<$n> for $U {
            #[inline(always)]
            #[allow(unused_variables)]
            fn f<T: Real>(self, $v: [T; $n], $p: &[T]) -> T {
                $f
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn int(self, $iv: [i64; $n], $ip: &[f64]) -> Option<i64> {
                $int
            }
            #[inline(always)]
            #[allow(unused_variables)]
            fn df<T: Real>(self, $i: usize, $g: T, $dv: [T; $n], $y: T, $dp: &[T]) -> T {
                $df
            }
        }
    };
}

// p[0] is alpha for add/sub.
nary!(Add, 2, |v, p| v[0] + p[0] * v[1], int |v, p| Some(v[0].wrapping_add((p[0] as i64).wrapping_mul(v[1]))), |i, g, v, y, p| if i == 0 { g } else { g * p[0] });
nary!(Sub, 2, |v, p| v[0] - p[0] * v[1], int |v, p| Some(v[0].wrapping_sub((p[0] as i64).wrapping_mul(v[1]))), |i, g, v, y, p| if i == 0 { g } else { -g * p[0] });
nary!(Mul, 2, |v, p| v[0] * v[1], int |v, p| Some(v[0].wrapping_mul(v[1])), |i, g, v, y, p| g * v[1 - i]);
nary!(Div, 2, |v, p| v[0] / v[1], int |v, p| None, |i, g, v, y, p| if i == 0 { g / v[1] } else { -g * ((v[0] / v[1]) / v[1]) });
// PyTorch's vectorised kernel rounds a half-type quotient to its storage type before truncating (p[0]: 1 bf16, 2 fp16).
nary!(DivTrunc, 2, |v, p| storage_round(v[0] / v[1], p).trunc(), int |v, p| v[0].checked_div(v[1]).or(if v[1] == 0 { None } else { Some(v[0].wrapping_div(v[1])) }), |i, g, v, y, p| T::zero());
nary!(DivFloor, 2, |v, p| floor_div(v[0], v[1]), int |v, p| int_floor_div(v[0], v[1]), |i, g, v, y, p| T::zero());
nary!(Pow, 2, |v, p| v[0].powf(v[1]), int |v, p| Some(int_pow(v[0], v[1])), |i, g, v, y, p| if i == 0 {
    if v[1] == T::zero() { T::zero() } else { g * v[1] * v[0].powf(v[1] - T::one()) }
} else if v[0] == T::zero() && v[1] >= T::zero() { T::zero() } else { g * (y * v[0].ln()) });
nary!(Atan2, 2, |v, p| v[0].atan2(v[1]), int |v, p| None, |i, g, v, y, p| {
    let r = v[0] * v[0] + v[1] * v[1];
    if i == 0 { g * v[1] / r } else { g * -v[0] / r }
});
nary!(Maximum, 2, |v, p| if v[0].is_nan() || v[1].is_nan() { T::nan() } else { v[0].max(v[1]) }, int |v, p| Some(v[0].max(v[1])), |i, g, v, y, p| {
    let (me, other) = (v[i], v[1 - i]);
    if me == other { g / c(2.0) } else if me < other { T::zero() } else { g }
});
nary!(Minimum, 2, |v, p| if v[0].is_nan() || v[1].is_nan() { T::nan() } else { v[0].min(v[1]) }, int |v, p| Some(v[0].min(v[1])), |i, g, v, y, p| {
    let (me, other) = (v[i], v[1 - i]);
    if me == other { g / c(2.0) } else if me > other { T::zero() } else { g }
});
nary!(Fmod, 2, |v, p| v[0] % v[1], int |v, p| if v[1] == 0 { None } else { Some(v[0].wrapping_rem(v[1])) }, |i, g, v, y, p| if i == 0 { g } else { -g * (v[0] / v[1]).trunc() });
nary!(Remainder, 2, |v, p| {
    let m = v[0] % v[1];
    if m != T::zero() && ((v[1] < T::zero()) != (m < T::zero())) { m + v[1] } else { m }
}, int |v, p| if v[1] == 0 { None } else {
    let m = v[0].wrapping_rem(v[1]);
    Some(if m != 0 && ((v[1] < 0) != (m < 0)) { m + v[1] } else { m })
}, |i, g, v, y, p| if i == 0 { g } else { -g * (v[0] / v[1]).floor() });
nary!(Lerp, 3, |v, p| if v[2].abs() < c(0.5) { v[0] + v[2] * (v[1] - v[0]) } else { v[1] - (v[1] - v[0]) * (T::one() - v[2]) }, int |v, p| None,
    |i, g, v, y, p| match i { 0 => g * (T::one() - v[2]), 1 => g * v[2], _ => g * (v[1] - v[0]) });
nary!(Addcmul, 3, |v, p| v[0] + p[0] * v[1] * v[2], int |v, p| Some(v[0].wrapping_add((p[0] as i64).wrapping_mul(v[1]).wrapping_mul(v[2]))),
    |i, g, v, y, p| match i { 0 => g, 1 => g * p[0] * v[2], _ => g * p[0] * v[1] });
nary!(Addcdiv, 3, |v, p| v[0] + p[0] * (v[1] / v[2]), int |v, p| None,
    |i, g, v, y, p| match i { 0 => g, 1 => g * p[0] / v[2], _ => -g * p[0] * v[1] / (v[2] * v[2]) });
// p = [has_min, min, has_max, max] for the Scalar form; the Tensor form passes bounds as operands.
nary!(ClampS, 1, |v, p| {
    let x = v[0];
    // A NaN bound gives NaN, as PyTorch's clamp.
    if x.is_nan() { x } else {
        let x = if p[0] != T::zero() && (x < p[1] || p[1].is_nan()) { p[1] } else { x };
        if p[2] != T::zero() && (x > p[3] || p[3].is_nan()) { p[3] } else { x }
    }
}, int |v, p| {
    let mut x = v[0];
    if p[0] != 0.0 && x < p[1] as i64 { x = p[1] as i64; }
    if p[2] != 0.0 && x > p[3] as i64 { x = p[3] as i64; }
    Some(x)
}, |i, g, v, y, p| if (p[0] != T::zero() && v[0] < p[1]) || (p[2] != T::zero() && v[0] > p[3]) { T::zero() } else { g });
nary!(ClampT, 3, |v, p| {
    let x = v[0];
    if x.is_nan() { return x; }
    let x = if p[0] != T::zero() { if v[1].is_nan() { v[1] } else { x.max(v[1]) } } else { x };
    if p[1] != T::zero() { if v[2].is_nan() { v[2] } else { x.min(v[2]) } } else { x }
}, int |v, p| {
    let mut x = v[0];
    if p[0] != 0.0 { x = x.max(v[1]); }
    if p[1] != 0.0 { x = x.min(v[2]); }
    Some(x)
}, |i, g, v, y, p| {
    // PyTorch's clamp_backward and clamp_backward_min_max.
    let (has_lo, has_hi) = (p[0] != T::zero(), p[1] != T::zero());
    let (x, lo, hi) = (v[0], v[1], v[2]);
    let take = match i {
        0 => (!has_lo || x >= lo) && (!has_hi || x <= hi),
        1 => x < lo && (!has_hi || lo < hi),
        _ => x > hi || (has_lo && hi < lo),
    };
    if take { g } else { T::zero() }
});

#[inline(always)]
fn storage_round<T: Float>(q: T, p: &[T]) -> T {
    let Some(q64) = q.to_f64() else { return q };
    match p.first().and_then(|k| k.to_f64()) {
        Some(k) if k == 1.0 => c(half::bf16::from_f64(q64).to_f64()),
        Some(k) if k == 2.0 => c(half::f16::from_f64(q64).to_f64()),
        _ => q,
    }
}

#[inline(always)]
fn floor_div<T: Float>(a: T, b: T) -> T {
    // As PyTorch's div_floor: the floor of the true quotient, corrected where fmod shows a rounding of the division.
    if b == T::zero() {
        return a / b;
    }
    let m = a % b;
    let mut d = (a - m) / b;
    if m != T::zero() && ((b < T::zero()) != (m < T::zero())) {
        d = d - T::one();
    }
    if d == T::zero() {
        return (T::zero() * (a / b)).abs() * (a / b).signum();
    }
    let f = d.floor();
    if d - f > c(0.5) { f + T::one() } else { f }
}

fn int_floor_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.wrapping_div(b);
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

/// Integer powers as PyTorch's: negative exponents give 0 except for bases 1 and -1.
fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => if exp % 2 == 0 { 1 } else { -1 },
            _ => 0,
        };
    }
    let (mut r, mut b, mut e) = (1i64, base, exp);
    while e > 0 {
        if e & 1 == 1 {
            r = r.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    r
}

fn promoted(call: &Call) -> DType {
    call.promoted.expect("core sets the promoted dtype of elementwise ops")
}

fn out_dt(call: &Call) -> DType {
    call.out_dtype.expect("core sets the result dtype of elementwise ops")
}

/// `alpha` of add/sub, refused where PyTorch refuses it.
fn alpha(call: &Call, dt: DType) -> Result<f64> {
    let name = call.op.name();
    match call.scalar("alpha") {
        Some(Scalar::Float(_)) if !dt.is_float() => crate::bail!(E_DTYPE, "{name}: for integral input tensors, argument alpha must not be a floating point number"),
        Some(Scalar::Bool(_)) if dt != DType::Bool => crate::bail!(E_DTYPE, "{name}: boolean alpha only supported for Boolean results"),
        Some(s) => Ok(s.to_f64()),
        None => Ok(1.0),
    }
}

fn add(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    let a = alpha(call, dt)?;
    run(call, ins, ["self", "other"], Add, dt, dt, vec![a], "AddBackward0")
}

fn sub(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    // Any bool operand, not only a bool result (PyTorch refuses `float - bool` too).
    if ins.iter().flatten().any(|t| t.dtype() == DType::Bool) || matches!(call.scalar("other"), Some(Scalar::Bool(_))) {
        crate::bail!(E_DTYPE, "sub: subtraction with a bool tensor is not supported (use logical_xor / logical_not)");
    }
    let a = alpha(call, dt)?;
    run(call, ins, ["self", "other"], Sub, dt, dt, vec![a], "SubBackward0")
}

fn mul(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    run(call, ins, ["self", "other"], Mul, dt, dt, vec![], "MulBackward0")
}

fn div(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    match call.str("rounding_mode") {
        None => {
            let dt = if promoted(call).is_float() { promoted(call) } else { DType::F32 };
            run(call, ins, ["self", "other"], Div, dt, dt, vec![], "DivBackward0")
        }
        Some(mode) => {
            let dt = promoted(call);
            if dt == DType::Bool {
                crate::bail!(E_DTYPE, "div: rounding_mode {mode:?} is not supported for bool tensors");
            }
            match mode {
                "trunc" => {
                    let k = match dt { DType::BF16 => 1.0, DType::F16 => 2.0, _ => 0.0 };
                    run(call, ins, ["self", "other"], DivTrunc, dt, dt, vec![k], "DivBackward2")
                }
                "floor" => run(call, ins, ["self", "other"], DivFloor, dt, dt, vec![], "DivBackward2"),
                _ => crate::bail!(E_INVALID_ARG, "div: rounding_mode must be None, \"trunc\" or \"floor\", got {mode:?}"),
            }
        }
    }
}

fn pow(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    if let Some(Scalar::Int(e)) = call.scalar("exponent") {
        if e < 0 && !dt.is_float() {
            crate::bail!(E_INVALID_ARG, "pow: integers to negative integer powers are not allowed");
        }
    }
    run(call, ins, ["self", "exponent"], Pow, dt, dt, vec![], "PowBackward0")
}

/// A two-operand op computing in the result dtype.
macro_rules! simple {
    ($fname:ident, $U:ident, $node:literal) => {
        fn $fname(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
            let dt = out_dt(call);
            run(call, ins, ["self", "other"], $U, dt, dt, vec![], $node)
        }
    };
}
simple!(atan2, Atan2, "Atan2Backward0");
simple!(maximum, Maximum, "MaximumBackward0");
simple!(minimum, Minimum, "MinimumBackward0");
simple!(fmod, Fmod, "FmodBackward0");
simple!(remainder, Remainder, "RemainderBackward0");

fn lerp(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    run(call, ins, ["self", "end", "weight"], Lerp, dt, dt, vec![], "LerpBackward0")
}

fn addcmul(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    let v = call.scalar("value").map_or(1.0, Scalar::to_f64);
    run(call, ins, ["self", "tensor1", "tensor2"], Addcmul, dt, dt, vec![v], "AddcmulBackward0")
}

fn addcdiv(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    if !dt.is_float() {
        crate::bail!(E_DTYPE, "addcdiv: integer division with addcdiv is no longer supported (use addcmul with a true division)");
    }
    let v = call.scalar("value").map_or(1.0, Scalar::to_f64);
    run(call, ins, ["self", "tensor1", "tensor2"], Addcdiv, dt, dt, vec![v], "AddcdivBackward0")
}

fn clamp(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    let (lo, hi) = (call.scalar("min"), call.scalar("max"));
    if lo.is_none() && hi.is_none() {
        crate::bail!(E_INVALID_ARG, "clamp: at least one of 'min' or 'max' must not be None");
    }
    let flag = |s: Option<Scalar>| (f64::from(u8::from(s.is_some())), s.map_or(0.0, Scalar::to_f64));
    let ((a, b), (c2, d)) = (flag(lo), flag(hi));
    run(call, ins, ["self"], ClampS, dt, dt, vec![a, b, c2, d], "ClampBackward1")
}

fn clamp_tensor(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = out_dt(call);
    let (lo, hi) = (call.tensor("min"), call.tensor("max"));
    if lo.is_none() && hi.is_none() {
        crate::bail!(E_INVALID_ARG, "clamp: at least one of 'min' or 'max' must not be None");
    }
    // A missing bound is an operand that never applies (flagged off in p).
    let x = ins[call.tensor("self").expect("self")].expect("self");
    let zero = full(&[], x.dtype(), 0.0)?;
    let bound = |i: Option<usize>| -> Result<Raw> {
        let t = i.and_then(|i| ins[i]).unwrap_or(&zero);
        if t.dtype() == dt { Ok(t.clone()) } else { convert(t, dt) }
    };
    let ops = [if x.dtype() == dt { x.clone() } else { convert(x, dt)? }, bound(lo)?, bound(hi)?];
    let p = vec![f64::from(u8::from(lo.is_some())), f64::from(u8::from(hi.is_some()))];
    let y = apply(ClampT, &ops, dt, dt, &p, "clamp")?;
    let originals: Vec<Option<&Raw>> = [Some(x), lo.and_then(|i| ins[i]), hi.and_then(|i| ins[i])].to_vec();
    let tensors: Vec<&Raw> = originals.iter().flatten().copied().collect();
    if !dt.is_float() || !needs_grad(&tensors) {
        return Ok(vec![y]);
    }
    let want: [bool; 3] = std::array::from_fn(|i| originals[i].is_some_and(|t| t.requires_grad()));
    let saved = ops.map(|t| t.detached());
    let ys = y.detached();
    let slots: Vec<usize> = (0..3).filter(|&i| originals[i].is_some()).collect();
    Ok(vec![record_saving(y, "ClampBackward0", &tensors, &tensors, true, move |g| {
        let all = grads(ClampT, g, &saved, &ys, want, dt, &p)?;
        Ok(slots.iter().map(|&i| all[i].clone()).collect())
    })])
}

// ------------------------------------------------------- comparisons, logic

/// A comparison computed in the promoted dtype, into bool.
fn compare(call: &Call, ins: &[Option<&Raw>], f64f: impl Fn(f64, f64) -> bool + Sync, i64f: impl Fn(i64, i64) -> bool + Sync) -> Result<Vec<Raw>> {
    let dt = promoted(call);
    let a = operand(call, ins, "self", dt)?.expect("self");
    let b = operand(call, ins, "other", dt)?.expect("other");
    let out = Raw::empty(&out_shape(&[&a, &b]), DType::Bool)?;
    with_elem!(dt, T => {
        if T::DT.is_float() {
            zip_into::<T, T, B8>(&out, &a, &b, |x, y| B8(u8::from(f64f(cast::<T, f64>(x), cast::<T, f64>(y)))));
        } else {
            zip_into::<T, T, B8>(&out, &a, &b, |x, y| B8(u8::from(i64f(cast::<T, i64>(x), cast::<T, i64>(y)))));
        }
    });
    Ok(vec![out])
}

macro_rules! comparison {
    ($fname:ident, $op:tt) => {
        fn $fname(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
            compare(call, ins, |x, y| x $op y, |x, y| x $op y)
        }
    };
}
comparison!(eq, ==);
comparison!(ne, !=);
comparison!(lt, <);
comparison!(le, <=);
comparison!(gt, >);
comparison!(ge, >=);

fn logical(_call: &Call, ins: &[Option<&Raw>], f: impl Fn(bool, bool) -> bool + Sync) -> Result<Vec<Raw>> {
    let truth = |t: &Raw| -> Result<Raw> { if t.dtype() == DType::Bool { Ok(t.clone()) } else { convert(t, DType::Bool) } };
    let a = truth(ins[0].expect("self"))?;
    let b = truth(ins[1].expect("other"))?;
    let out = Raw::empty(&out_shape(&[&a, &b]), DType::Bool)?;
    zip_into::<B8, B8, B8>(&out, &a, &b, |x, y| B8(u8::from(f(x.0 != 0, y.0 != 0))));
    Ok(vec![out])
}

fn logical_and(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    logical(call, ins, |a, b| a && b)
}
fn logical_or(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    logical(call, ins, |a, b| a || b)
}
fn logical_xor(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    logical(call, ins, |a, b| a != b)
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("add.Tensor", add),
    ("add.Scalar", add),
    ("sub.Tensor", sub),
    ("sub.Scalar", sub),
    ("mul.Tensor", mul),
    ("mul.Scalar", mul),
    ("div.Tensor", div),
    ("div.Scalar", div),
    ("div.Tensor_mode", div),
    ("div.Scalar_mode", div),
    ("pow.Tensor_Tensor", pow),
    ("pow.Tensor_Scalar", pow),
    ("pow.Scalar", pow),
    ("atan2", atan2),
    ("maximum", maximum),
    ("minimum", minimum),
    ("max.other", maximum),
    ("min.other", minimum),
    ("fmod.Tensor", fmod),
    ("fmod.Scalar", fmod),
    ("remainder.Tensor", remainder),
    ("remainder.Scalar", remainder),
    ("remainder.Scalar_Tensor", remainder),
    ("lerp.Scalar", lerp),
    ("lerp.Tensor", lerp),
    ("addcmul", addcmul),
    ("addcdiv", addcdiv),
    ("clamp", clamp),
    ("clamp.Tensor", clamp_tensor),
    ("eq.Tensor", eq),
    ("eq.Scalar", eq),
    ("ne.Tensor", ne),
    ("ne.Scalar", ne),
    ("lt.Tensor", lt),
    ("lt.Scalar", lt),
    ("le.Tensor", le),
    ("le.Scalar", le),
    ("gt.Tensor", gt),
    ("gt.Scalar", gt),
    ("ge.Tensor", ge),
    ("ge.Scalar", ge),
    ("logical_and", logical_and),
    ("logical_or", logical_or),
    ("logical_xor", logical_xor),
];
