//! One-tensor elementwise ops: a forward formula and a backward formula,
//! each written once, generic over the computing type (f32 for f32, bf16
//! and fp16; f64 for f64), as PyTorch's kernels compute reduced-precision
//! floats in float. The backward formulas are PyTorch's (derivatives.yaml).

use num_traits::Float;

use super::super::autograd::{needs_grad, record_saving};
use super::super::elem::{with_elem, with_float, Elem, FloatElem};
use super::super::fused::Real;
use super::super::kernels::map_into;
use super::super::ops::convert;
use super::super::par;
use super::super::simd::multiversion;
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::Call;

/// A formula's constant in the computing type.
#[inline(always)]
fn c<T: Float>(v: f64) -> T {
    T::from(v).unwrap_or_else(T::nan)
}

/// One elementwise op: forward `f(x)` and the gradient `df(g, x, y)`, with
/// the op's numeric arguments `p` (in the computing type).
pub trait UnaryFn: Copy + Send + Sync + 'static {
    fn f<T: Real>(self, x: T, p: &[T]) -> T;
    fn df<T: Real>(self, g: T, x: T, y: T, p: &[T]) -> T;
    /// The integer form (ops that keep integer dtypes), computed in i64.
    fn int(self, x: i64, p: &[f64]) -> i64 {
        let _ = p;
        x
    }
}

/// `f` over `x` (already of dtype `dt`) into a new tensor.
fn forward<U: UnaryFn>(u: U, x: &Raw, dt: DType, p: &[f64]) -> Result<Raw> {
    let out = Raw::empty(x.shape(), dt)?;
    with_float!(dt, T => {
        type R = <T as FloatElem>::Real;
        let pr: Vec<R> = p.iter().map(|&v| c::<R>(v)).collect();
        map_into::<T, T>(&out, x, x.strides(), |v: T| T::down(u.f::<R>(v.up(), &pr)));
    }, _ => with_elem!(dt, T => map_into::<T, T>(&out, x, x.strides(), |v: T| super::super::elem::cast::<i64, T>(u.int(super::super::elem::cast::<T, i64>(v), p)))));
    Ok(out)
}

/// `df(g, x, y)` elementwise, into a new tensor of `g`'s shape and `dt`.
fn backward<U: UnaryFn>(u: U, g: &Raw, x: &Raw, y: &Raw, dt: DType, p: &[f64]) -> Result<Raw> {
    let (g, x, y) = (convert(g, dt)?.contiguous()?, x.contiguous()?, y.contiguous()?);
    let out = Raw::empty(x.shape(), dt)?;
    with_float!(dt, T => {
        type R = <T as FloatElem>::Real;
        let pr: Vec<R> = p.iter().map(|&v| c::<R>(v)).collect();
        let (o, gs, xs, ys) = (out.slice_mut::<T>(), g.slice::<T>(), x.slice::<T>(), y.slice::<T>());
        let n = o.len();
        let step = n.div_ceil(if par::parallel(n) { par::threads() } else { 1 }).max(1);
        let po = super::super::kernels::Ptr(o.as_mut_ptr());
        par::for_each(n.div_ceil(step), &|i| {
            let (lo, hi) = (i * step, n.min((i + 1) * step));
            // SAFETY: each task writes its own range of `out`, inside its length.
            let o = unsafe { std::slice::from_raw_parts_mut(po.at(lo as isize), hi - lo) };
            df_run::<U, T>(u, o, &gs[lo..hi], &xs[lo..hi], &ys[lo..hi], &pr);
        });
    }, _ => crate::bail!(E_DTYPE, "gradient of dtype {}", dt.name()));
    Ok(out)
}

// The backward formula over a contiguous range, compiled for each SIMD level.
// A generic function rather than a closure handed to a shared loop: LLVM
// declined to inline a closure as large as GELU's (erf and exp polynomials)
// and called it once per element in scalar code.
multiversion!(fn df_run<U: UnaryFn, T: FloatElem>(u: U, o: &mut [T], g: &[T], x: &[T], y: &[T], p: &[<T as FloatElem>::Real]) => df_loop);

#[inline(always)]
fn df_loop<U: UnaryFn, T: FloatElem>(u: U, o: &mut [T], g: &[T], x: &[T], y: &[T], p: &[<T as FloatElem>::Real]) {
    for (o, ((g, x), y)) in o.iter_mut().zip(g.iter().zip(x).zip(y)) {
        *o = T::down(u.df(g.up(), x.up(), y.up(), p));
    }
}

/// Runs `u` on input 0 with result dtype `call.out_dtype`, recording its backward.
fn run<U: UnaryFn>(call: &Call, ins: &[Option<&Raw>], node: &'static str, u: U, p: Vec<f64>) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let dt = call.out_dtype.unwrap_or(x0.dtype());
    let x = if x0.dtype() == dt { x0.clone() } else { convert(x0, dt)? };
    let y = forward(u, &x, dt, &p)?;
    if !needs_grad(&[x0]) || !dt.is_float() {
        return Ok(vec![y]);
    }
    let (xs, ys) = (x.detached(), y.detached());
    // The derivative may read the input and the result (a converted input is a private copy).
    let kept: &[&Raw] = if x0.dtype() == dt { &[x0] } else { &[] };
    Ok(vec![record_saving(y, node, &[x0], kept, true, move |g| Ok(vec![Some(backward(u, g, &xs, &ys, dt, &p)?)]))])
}

/// Declares a unary op: `name(node) [params] |x, p| forward, |g, x, y, p| backward [, int |v, p| integer form]`.
macro_rules! unary {
    ($name:ident, $node:literal, [$($pn:literal),*], |$x:ident, $p:ident| $f:expr, |$g:ident, $bx:ident, $y:ident, $bp:ident| $df:expr $(, int |$iv:ident, $ip:ident| $int:expr)?) => {
        fn $name(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
            #[derive(Clone, Copy)]
            struct U;
            impl UnaryFn for U {
                #[inline(always)]
                #[allow(unused_variables)]
                fn f<T: Real>(self, $x: T, $p: &[T]) -> T {
                    $f
                }
                #[inline(always)]
                #[allow(unused_variables)]
                fn df<T: Real>(self, $g: T, $bx: T, $y: T, $bp: &[T]) -> T {
                    $df
                }
                $(#[inline(always)] #[allow(unused_variables)] fn int(self, $iv: i64, $ip: &[f64]) -> i64 { $int })?
            }
            let p = vec![$(call.float($pn).unwrap_or(0.0)),*];
            run(call, ins, $node, U, p)
        }
    };
}

const LN2: f64 = std::f64::consts::LN_2;
const LN10: f64 = std::f64::consts::LN_10;
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

#[inline(always)]
fn sigmoid<T: Float>(x: T) -> T {
    T::one() / (T::one() + (-x).exp())
}

fn erfc_f<T: Real>(x: T) -> T {
    match x.to_f64() {
        Some(v) => c(libm::erfc(v)),
        None => T::nan(),
    }
}

unary!(exp, "ExpBackward0", [], |x, p| x.exp(), |g, x, y, p| g * y);
unary!(exp2, "Exp2Backward0", [], |x, p| x.exp2(), |g, x, y, p| g * y * c(LN2));
unary!(expm1, "Expm1Backward0", [], |x, p| x.exp_m1(), |g, x, y, p| g * (y + T::one()));
unary!(log, "LogBackward0", [], |x, p| x.ln(), |g, x, y, p| g / x);
unary!(log2, "Log2Backward0", [], |x, p| x.log2(), |g, x, y, p| g / (x * c(LN2)));
unary!(log10, "Log10Backward0", [], |x, p| x.log10(), |g, x, y, p| g / (x * c(LN10)));
unary!(log1p, "Log1PBackward0", [], |x, p| x.ln_1p(), |g, x, y, p| g / (x + T::one()));
unary!(sqrt, "SqrtBackward0", [], |x, p| x.sqrt(), |g, x, y, p| g / (y + y));
unary!(rsqrt, "RsqrtBackward0", [], |x, p| T::one() / x.sqrt(), |g, x, y, p| c::<T>(-0.5) * g * (y * y * y));
unary!(reciprocal, "ReciprocalBackward0", [], |x, p| T::one() / x, |g, x, y, p| -g * (y * y));
unary!(sin, "SinBackward0", [], |x, p| x.sin(), |g, x, y, p| g * x.cos());
unary!(cos, "CosBackward0", [], |x, p| x.cos(), |g, x, y, p| g * -x.sin());
unary!(tan, "TanBackward0", [], |x, p| x.tan(), |g, x, y, p| g * (y * y + T::one()));
unary!(asin, "AsinBackward0", [], |x, p| x.asin(), |g, x, y, p| g * (T::one() - x * x).sqrt().recip());
unary!(acos, "AcosBackward0", [], |x, p| x.acos(), |g, x, y, p| g * -(T::one() - x * x).sqrt().recip());
unary!(atan, "AtanBackward0", [], |x, p| x.atan(), |g, x, y, p| g / (x * x + T::one()));
unary!(sinh, "SinhBackward0", [], |x, p| x.sinh(), |g, x, y, p| g * x.cosh());
unary!(cosh, "CoshBackward0", [], |x, p| x.cosh(), |g, x, y, p| g * x.sinh());
unary!(erf, "ErfBackward0", [], |x, p| x.erf(), |g, x, y, p| g * c::<T>(TWO_OVER_SQRT_PI) * (-x * x).exp());
unary!(erfc, "ErfcBackward0", [], |x, p| erfc_f(x), |g, x, y, p| -g * c::<T>(TWO_OVER_SQRT_PI) * (-x * x).exp());
unary!(sigmoid_k, "SigmoidBackward0", [], |x, p| sigmoid(x), |g, x, y, p| g * (T::one() - y) * y);
unary!(tanh_k, "TanhBackward0", [], |x, p| x.tanh(), |g, x, y, p| g * (T::one() - y * y));
unary!(abs, "AbsBackward0", [], |x, p| x.abs(), |g, x, y, p| g * sgn(x), int |v, p| v.wrapping_abs());
unary!(neg, "NegBackward0", [], |x, p| -x, |g, x, y, p| -g, int |v, p| v.wrapping_neg());
unary!(sign, "SignBackward0", [], |x, p| sgn(x), |g, x, y, p| T::zero(), int |v, p| v.signum());
unary!(square, "PowBackward0", [], |x, p| x * x, |g, x, y, p| g * c::<T>(2.0) * x, int |v, p| v.wrapping_mul(v));
unary!(floor, "FloorBackward0", [], |x, p| x.floor(), |g, x, y, p| T::zero());
unary!(ceil, "CeilBackward0", [], |x, p| x.ceil(), |g, x, y, p| T::zero());
// Half to even, as std::nearbyint in PyTorch's kernel.
unary!(round, "RoundBackward0", [], |x, p| round_even(x), |g, x, y, p| T::zero());
unary!(trunc, "TruncBackward0", [], |x, p| x.trunc(), |g, x, y, p| T::zero());
unary!(frac, "FracBackward0", [], |x, p| x - x.trunc(), |g, x, y, p| g);
unary!(relu, "ReluBackward0", [], |x, p| if x > T::zero() { x } else if x.is_nan() { x } else { T::zero() }, |g, x, y, p| if y <= T::zero() { T::zero() } else { g }, int |v, p| v.max(0));
unary!(silu, "SiluBackward0", [], |x, p| x * sigmoid(x), |g, x, y, p| {
    let s = sigmoid(x);
    g * s * (T::one() + x * (T::one() - s))
});
unary!(mish, "MishBackward0", [], |x, p| x * x.exp().ln_1p().tanh(), |g, x, y, p| {
    let (s, t) = (sigmoid(x), x.exp().ln_1p().tanh());
    g * (t + x * s * (T::one() - t * t))
});
unary!(log_sigmoid, "LogSigmoidBackward0", [], |x, p| x.min(T::zero()) - (-x.abs()).exp().ln_1p(), |g, x, y, p| {
    let neg = x < T::zero();
    let (max_deriv, sign) = if neg { (T::one(), T::one()) } else { (T::zero(), -T::one()) };
    let z = (-x.abs()).exp();
    g * (max_deriv - sign * (z / (T::one() + z)))
});
unary!(softplus, "SoftplusBackward0", ["beta", "threshold"], |x, p| if x * p[0] > p[1] { x } else { (x * p[0]).exp().ln_1p() / p[0] }, |g, x, y, p| {
    let z = (x * p[0]).exp();
    if x * p[0] > p[1] { g } else { g * z / (z + T::one()) }
});
unary!(hardtanh, "HardtanhBackward0", ["min_val", "max_val"], |x, p| if x < p[0] { p[0] } else if x > p[1] { p[1] } else { x }, |g, x, y, p| if x <= p[0] || x >= p[1] { T::zero() } else { g }, int |v, p| v.clamp(p[0] as i64, p[1] as i64));
unary!(leaky_relu, "LeakyReluBackward0", ["negative_slope"], |x, p| if x > T::zero() { x } else { x * p[0] }, |g, x, y, p| if x > T::zero() { g } else { g * p[0] });
unary!(elu, "EluBackward0", ["alpha", "scale", "input_scale"], |x, p| if x > T::zero() { x * p[1] } else { p[0] * p[1] * ((x * p[2]).exp() - T::one()) }, |g, x, y, p| if x > T::zero() { g * p[1] } else { g * p[2] * p[0] * p[1] * (x * p[2]).exp() });
// As ATen's hardsigmoid/hardswish kernels: relu6(x + 3) / 6; the gradient's bounds as
// theirs, and hardsigmoid's gradient factor is their `1.0f / 6.0f`, a float even for double.
unary!(hardsigmoid, "HardsigmoidBackward0", [], |x, p| (x + c::<T>(3.0)).max(T::zero()).min(c::<T>(6.0)) / c::<T>(6.0), |g, x, y, p| {
    if x > c::<T>(-3.0) && x < c::<T>(3.0) { g * c::<T>(f64::from(1.0f32 / 6.0f32)) } else { T::zero() }
});
unary!(hardswish, "HardswishBackward0", [], |x, p| x * (x + c::<T>(3.0)).max(T::zero()).min(c::<T>(6.0)) / c::<T>(6.0), |g, x, y, p| {
    if x < c::<T>(-3.0) { T::zero() } else if x <= c::<T>(3.0) { g * (x / c::<T>(3.0) + c::<T>(0.5)) } else { g }
});
// selu and celu are elu with fixed parameters in PyTorch (CompositeImplicit), so their node is elu's.
const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_SCALE: f64 = 1.050_700_987_355_480_5;
unary!(selu, "EluBackward0", [], |x, p| if x > T::zero() { x * c::<T>(SELU_SCALE) } else { c::<T>(SELU_ALPHA * SELU_SCALE) * (x.exp() - T::one()) }, |g, x, y, p| {
    if x > T::zero() { g * c::<T>(SELU_SCALE) } else { g * c::<T>(SELU_ALPHA * SELU_SCALE) * x.exp() }
});
unary!(celu, "EluBackward0", ["alpha"], |x, p| if x > T::zero() { x } else { p[0] * ((x / p[0]).exp() - T::one()) }, |g, x, y, p| {
    if x > T::zero() { g } else { g * (x / p[0]).exp() }
});
unary!(gelu_none, "GeluBackward0", [], |x, p| x * c::<T>(0.5) * (T::one() + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf()), |g, x, y, p| {
    let cdf = c::<T>(0.5) * (T::one() + (x * c::<T>(std::f64::consts::FRAC_1_SQRT_2)).erf());
    let pdf = (c::<T>(-0.5) * x * x).vexp() * c::<T>(0.3989422804014327);
    g * (cdf + x * pdf)
});
unary!(gelu_tanh, "GeluBackward0", [], |x, p| {
    let inner = c::<T>(0.7978845608028654) * (x + c::<T>(0.044715) * x * x * x);
    c::<T>(0.5) * x * inner.one_plus_tanh()
}, |g, x, y, p| {
    let (beta, kappa) = (c::<T>(0.7978845608028654), c::<T>(0.044715));
    let t = (beta * (x + kappa * x * x * x)).tanh();
    let left = c::<T>(0.5) * x;
    let right = T::one() + t;
    g * (c::<T>(0.5) * right + left * (T::one() - t * t) * beta * (T::one() + c::<T>(3.0) * kappa * x * x))
});

#[inline(always)]
fn sgn<T: Float>(x: T) -> T {
    if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        x * T::zero()
    }
}

#[inline(always)]
fn round_even<T: Float>(x: T) -> T {
    let r = x.round();
    if (r - x).abs() == c(0.5) {
        (x * c(0.5)).round() * c(2.0)
    } else {
        r
    }
}

/// PyTorch refuses negative limits (as integers) for an unsigned input.
fn hardtanh_checked(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let lim = |n| call.float(n).unwrap_or(0.0) as i64;
    if input(ins, 0).dtype() == DType::U8 && (lim("min_val") < 0 || lim("max_val") < 0) {
        crate::bail!(E_DTYPE, "hardtanh: cannot do hardtanh on an unsigned type with negative limits");
    }
    hardtanh(call, ins)
}

/// celu divides by alpha, which PyTorch refuses to be 0.
fn celu_checked(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    if call.float("alpha") == Some(0.0) {
        crate::bail!(E_INVALID_ARG, "celu: ZeroDivisionError: alpha cannot be 0 for CELU");
    }
    celu(call, ins)
}

/// `square` is `pow(x, 2)`: a bool input squares as int64, as PyTorch promotes it.
fn square_promoted(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if x.dtype() != DType::Bool {
        return square(call, ins);
    }
    let xi = convert(x, DType::I64)?;
    let c2 = Call { out_dtype: Some(DType::I64), ..*call };
    square(&c2, &[Some(&xi)])
}

fn gelu(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    match call.str("approximate") {
        Some("none") => gelu_none(call, ins),
        Some("tanh") => gelu_tanh(call, ins),
        other => crate::bail!(E_INVALID_ARG, "gelu: approximate must be \"none\" or \"tanh\", got {:?}", other.unwrap_or("")),
    }
}

fn round_decimals(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let d = call.int("decimals").unwrap_or(0);
    let dt = input(ins, 0).dtype();
    if !dt.is_float() {
        crate::bail!(E_DTYPE, "round: decimals are not implemented for {}", dt.name());
    }
    if d == 0 {
        return round(call, ins);
    }
    // As PyTorch: x * 10^d rounded, then divided (or the reverse for d < 0).
    #[derive(Clone, Copy)]
    struct U;
    impl UnaryFn for U {
        fn f<T: Real>(self, x: T, p: &[T]) -> T {
            if p[1] > T::zero() { round_even(x * p[0]) / p[0] } else { round_even(x / p[0]) * p[0] }
        }
        fn df<T: Real>(self, _: T, _: T, _: T, _: &[T]) -> T {
            T::zero()
        }
    }
    run(call, ins, "RoundBackward1", U, vec![10f64.powi(d.unsigned_abs().min(400) as i32), d as f64])
}

/// Predicates: a bool result, no gradient.
fn predicate(ins: &[Option<&Raw>], f: impl Fn(f64) -> bool + Sync, int: bool) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let out = Raw::empty(x.shape(), DType::Bool)?;
    with_elem!(x.dtype(), T => map_into::<T, super::super::elem::B8>(&out, x, x.strides(), |v: T| {
        let d = super::super::elem::cast::<T, f64>(v);
        super::super::elem::B8(u8::from(if T::DT.is_float() { f(d) } else { int }))
    }));
    Ok(vec![out])
}

fn isnan(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    predicate(ins, f64::is_nan, false)
}
fn isinf(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    predicate(ins, f64::is_infinite, false)
}
fn isfinite(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    predicate(ins, f64::is_finite, true)
}
fn logical_not(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let out = Raw::empty(x.shape(), DType::Bool)?;
    with_elem!(x.dtype(), T => map_into::<T, super::super::elem::B8>(&out, x, x.strides(), |v: T| {
        super::super::elem::B8(u8::from(super::super::elem::cast::<T, f64>(v) == 0.0))
    }));
    Ok(vec![out])
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("exp", exp),
    ("exp2", exp2),
    ("expm1", expm1),
    ("log", log),
    ("log2", log2),
    ("log10", log10),
    ("log1p", log1p),
    ("sqrt", sqrt),
    ("rsqrt", rsqrt),
    ("reciprocal", reciprocal),
    ("sin", sin),
    ("cos", cos),
    ("tan", tan),
    ("asin", asin),
    ("acos", acos),
    ("atan", atan),
    ("sinh", sinh),
    ("cosh", cosh),
    ("erf", erf),
    ("erfc", erfc),
    ("sigmoid", sigmoid_k),
    ("tanh", tanh_k),
    ("abs", abs),
    ("neg", neg),
    ("sign", sign),
    ("square", square_promoted),
    ("floor", floor),
    ("ceil", ceil),
    ("round", round),
    ("round.decimals", round_decimals),
    ("trunc", trunc),
    ("frac", frac),
    ("relu", relu),
    ("silu", silu),
    ("mish", mish),
    ("log_sigmoid", log_sigmoid),
    ("softplus", softplus),
    ("hardtanh", hardtanh_checked),
    ("leaky_relu", leaky_relu),
    ("elu", elu),
    ("gelu", gelu),
    ("hardsigmoid", hardsigmoid),
    ("hardswish", hardswish),
    ("selu", selu),
    ("celu", celu_checked),
    ("isnan", isnan),
    ("isinf", isinf),
    ("isfinite", isfinite),
    ("logical_not", logical_not),
];
