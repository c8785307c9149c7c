//! Native kernels of the op table's create section: factories, with
//! PyTorch's CPU arithmetic (`RangeFactoriesKernel.cpp`), and random
//! sampling from the native generator (`rng.rs`: reproducible for a seed,
//! not torch's stream). No result is differentiable.

use super::super::elem::{cast, with_elem, with_float, Elem, Sc};
use super::super::ops::convert;
use super::super::rng;
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::{Call, Scalar};

pub const KERNELS: &[(&str, Kernel)] = &[
    ("arange", arange),
    ("arange.start", arange),
    ("arange.start_step", arange),
    ("linspace", linspace),
    ("eye", eye),
    ("eye.m", eye),
    ("full_like", full_like),
    ("zeros_like", full_like),
    ("ones_like", full_like),
    ("empty.memory_format", empty),
    ("zeros", full),
    ("ones", full),
    ("full", full),
    ("rand", rand),
    ("randint", randint),
    ("randint.low", randint),
    ("randn_like", randn_like),
    ("bernoulli", bernoulli),
    ("bernoulli.p", bernoulli_p),
    ("multinomial", multinomial),
];

fn sc(s: Scalar) -> Sc {
    match s {
        Scalar::Int(v) => Sc::I(v),
        Scalar::Float(v) => Sc::F(v),
        Scalar::Bool(b) => Sc::B(b),
    }
}

/// `Scalar::to<int64_t>`: floats truncate.
fn to_i64(s: Scalar) -> i64 {
    match s {
        Scalar::Int(v) => v,
        Scalar::Float(v) => v as i64,
        Scalar::Bool(b) => i64::from(b),
    }
}

/// The result dtype: the `dtype` argument, else `default`.
fn dtype_or(call: &Call, default: DType) -> DType {
    call.dtype("dtype").unwrap_or(default)
}

fn refuse(op: &str, dt: DType, takes: &str) -> crate::error::Error {
    crate::err!(E_DTYPE, "{op}: {} is not supported (it takes {takes})", dt.name())
}

/// The largest finite value of a dtype and the integer range, as c10's `overflows` reads them.
fn limits(dt: DType) -> (f64, f64) {
    match dt {
        DType::F64 | DType::C128 => (-f64::MAX, f64::MAX),
        DType::F32 | DType::C64 => (-f64::from(f32::MAX), f64::from(f32::MAX)),
        DType::F16 => (-65504.0, 65504.0),
        DType::BF16 => (-3.3895313892515355e38, 3.3895313892515355e38),
        DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::Bool => (0.0, 1.0),
    }
}

/// c10's checked `Scalar::to<T>`: a number out of the dtype's range is an
/// error (an infinity fits a floating type; a negative int wraps into
/// uint8, as c10 allows; bool takes anything).
fn check_fits(op: &str, s: Scalar, dt: DType) -> Result<()> {
    let (lo, hi) = limits(dt);
    let ok = match s {
        _ if dt == DType::Bool => true,
        Scalar::Bool(_) => true,
        Scalar::Float(v) if dt.is_float() => !v.is_finite() || (lo..=hi).contains(&v),
        Scalar::Float(v) => (lo..=hi).contains(&v),
        Scalar::Int(v) if dt == DType::U8 => (-255..=255).contains(&v),
        Scalar::Int(_) if dt == DType::I64 => true,
        Scalar::Int(v) => (lo..=hi).contains(&(v as f64)),
    };
    if !ok {
        crate::bail!(E_INVALID_ARG, "{op}: value {} cannot be converted to {} without overflow", s.to_f64(), dt.name());
    }
    Ok(())
}

/// A fresh tensor of `shape` holding `v` (converted as c10's `fill_`).
pub(super) fn filled(op: &str, shape: &[i64], dt: DType, v: Scalar) -> Result<Raw> {
    check_fits(op, v, dt)?;
    let out = Raw::empty(shape, dt)?;
    with_elem!(dt, T => out.slice_mut::<T>().fill(T::from_sc(sc(v))));
    Ok(out)
}

/// A result shape from a `size` argument: dims non-negative, the element
/// count (in bytes too) bounded before anything is allocated.
fn checked_size(op: &str, size: &[i64], dt: DType) -> Result<Vec<i64>> {
    if let Some(d) = size.iter().find(|&&d| d < 0) {
        crate::bail!(E_SHAPE, "{op}: trying to create a tensor with negative dimension {d}: {}", fmt(size));
    }
    let bytes = size.iter().try_fold(dt.size() as i64, |n, &d| n.checked_mul(d));
    if bytes.is_none() && !size.contains(&0) {
        crate::bail!(E_RESOURCE, "{op}: a tensor of shape {} is too large", fmt(size));
    }
    Ok(size.to_vec())
}

fn size_arg(call: &Call, dt: DType) -> Result<Vec<i64>> {
    checked_size(call.op.name(), call.ints("size").unwrap_or(&[]), dt)
}

fn arange(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let arg = |n: &str, d: i64| call.scalar(n).unwrap_or(Scalar::Int(d));
    let (start, end, step) = (arg("start", 0), arg("end", 0), arg("step", 1));
    let float_arg = [start, end, step].iter().any(|s| matches!(s, Scalar::Float(_)));
    let dt = dtype_or(call, if float_arg { DType::F32 } else { DType::I64 });
    if dt == DType::Bool {
        return Err(refuse("arange", dt, "numeric dtypes (not bool)"));
    }
    // PyTorch validates in double, then sizes int64 results in int64 (with the bounds truncated).
    let (a, b, s) = (start.to_f64(), end.to_f64(), step.to_f64());
    if !(s > 0.0 || s < 0.0) {
        crate::bail!(E_INVALID_ARG, "arange: step must be nonzero");
    }
    if !a.is_finite() || !b.is_finite() {
        crate::bail!(E_INVALID_ARG, "arange: unsupported range: {a} -> {b}");
    }
    if !((s > 0.0 && b >= a) || (s < 0.0 && b <= a)) {
        crate::bail!(E_INVALID_ARG, "arange: upper bound and lower bound inconsistent with step sign");
    }
    let (ia, ib, is) = (to_i64(start), to_i64(end), to_i64(step));
    let n = if dt == DType::I64 {
        if is == 0 {
            crate::bail!(E_INVALID_ARG, "arange: step must be nonzero");
        }
        ((i128::from(ib) - i128::from(ia) + i128::from(is) - i128::from(is.signum())) / i128::from(is)) as f64
    } else {
        ((b - a) / s).ceil()
    };
    if !(0.0..=i64::MAX as f64).contains(&n) {
        crate::bail!(E_RESOURCE, "arange: invalid size {n}, possible overflow");
    }
    let out = Raw::empty(&checked_size("arange", &[n as i64], dt)?, dt)?;
    // Values as PyTorch's kernel computes them: `start + step * i` in the accumulate type
    // (double for fp32/fp64, float for fp16/bf16, int64 for integers).
    let reduced = matches!(dt, DType::F16 | DType::BF16);
    with_float!(dt, T => {
        let (a32, s32) = (a as f32, s as f32);
        out.slice_mut::<T>().iter_mut().enumerate().for_each(|(i, o)| {
            *o = cast::<f64, T>(if reduced { f64::from(a32 + s32 * i as f32) } else { a + s * i as f64 })
        });
    }, _ => with_elem!(dt, T => {
        out.slice_mut::<T>().iter_mut().enumerate().for_each(|(i, o)| *o = T::from_sc(Sc::I(ia.wrapping_add(is.wrapping_mul(i as i64)))));
    }));
    Ok(vec![out])
}

fn linspace(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (start, end) = (call.scalar("start").unwrap_or(Scalar::Int(0)), call.scalar("end").unwrap_or(Scalar::Int(0)));
    let steps = call.int("steps").unwrap_or(0);
    if steps < 0 {
        crate::bail!(E_INVALID_ARG, "linspace: number of steps must be non-negative");
    }
    let dt = dtype_or(call, DType::F32);
    // PyTorch's dtype dispatch runs only for a nonempty result (as below).
    if dt == DType::Bool && steps > 0 {
        return Err(refuse("linspace", dt, "numeric dtypes (not bool)"));
    }
    if steps > 0 {
        check_fits("linspace", start, dt)?;
    }
    if steps > 1 {
        check_fits("linspace", end, dt)?;
    }
    let out = Raw::empty(&checked_size("linspace", &[steps], dt)?, dt)?;
    with_elem!(dt, T => {
        let o = out.slice_mut::<T>();
        let (a, b) = (T::from_sc(sc(start)), T::from_sc(sc(end)));
        if steps == 1 {
            o[0] = a;
        } else if steps > 1 {
            // PyTorch's formula: the step in the result type (double for
            // integers), the first half from `start`, the rest from `end`;
            // `r` rounds each float operation to the type (exact through f64).
            let is_float = dt.is_float();
            let r = |v: f64| if is_float { cast::<T, f64>(T::from_sc(Sc::F(v))) } else { v };
            let (a, b) = (cast::<T, f64>(a), cast::<T, f64>(b));
            let step = r(r(b - a) / r((steps - 1) as f64));
            let half = steps / 2;
            for (i, x) in o.iter_mut().enumerate() {
                let i = i as i64;
                let v = if i < half { r(a + r(step * r(i as f64))) } else { r(b - r(step * r((steps - i - 1) as f64))) };
                *x = T::from_sc(Sc::F(v));
            }
        }
    });
    Ok(vec![out])
}

fn eye(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let n = call.int("n").unwrap_or(0);
    let m = call.int("m").unwrap_or(n);
    for (name, v) in [("n", n), ("m", m)] {
        if v < 0 {
            crate::bail!(E_INVALID_ARG, "eye: {name} must be greater or equal to 0, got {v}");
        }
    }
    let dt = dtype_or(call, DType::F32);
    let out = Raw::zeros(&checked_size("eye", &[n, m], dt)?, dt)?;
    with_elem!(dt, T => {
        let o = out.slice_mut::<T>();
        (0..n.min(m) as usize).for_each(|i| o[i * m as usize + i] = T::from_sc(Sc::I(1)));
    });
    Ok(vec![out])
}

fn full_like(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let v = match call.overload() {
        "zeros_like" => Scalar::Int(0),
        "ones_like" => Scalar::Int(1),
        _ => call.scalar("fill_value").unwrap_or(Scalar::Int(0)),
    };
    Ok(vec![filled(call.op.name(), x.shape(), dtype_or(call, x.dtype()), v)?])
}

/// `torch.zeros`, `torch.ones` and `torch.full` (whose dtype, when not
/// given, is the fill value's: bool, int64, or the default float).
fn full(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let v = match call.op.name() {
        "zeros" => Scalar::Int(0),
        "ones" => Scalar::Int(1),
        _ => call.scalar("fill_value").unwrap_or(Scalar::Int(0)),
    };
    let default = match (call.op.name(), v) {
        ("full", Scalar::Bool(_)) => DType::Bool,
        ("full", Scalar::Int(_)) => DType::I64,
        _ => DType::F32,
    };
    let dt = dtype_or(call, default);
    Ok(vec![filled(call.op.name(), &size_arg(call, dt)?, dt, v)?])
}

/// `empty` gives zeros: its values are unspecified, and zeroed pages cost nothing until written.
fn empty(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = dtype_or(call, DType::F32);
    Ok(vec![Raw::zeros(&size_arg(call, dt)?, dt)?])
}

fn rand(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dt = dtype_or(call, DType::F32);
    if !dt.is_float() {
        return Err(refuse("rand", dt, "floating dtypes"));
    }
    let out = Raw::empty(&size_arg(call, dt)?, dt)?;
    rng::rand(&out);
    Ok(vec![out])
}

fn randint(call: &Call, _: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (low, high) = (call.int("low").unwrap_or(0), call.int("high").unwrap_or(0));
    let dt = dtype_or(call, DType::I64);
    if low >= high {
        crate::bail!(E_INVALID_ARG, "randint: expects 'low' to be less than 'high', but got low={low} >= high={high}");
    }
    // Integer results must hold both bounds (floats merely lose precision, as PyTorch only warns).
    if !dt.is_float() {
        let (lo, hi) = limits(dt);
        for (what, v) in [("low", low), ("high - 1", high - 1)] {
            if !(lo..=hi).contains(&(v as f64)) {
                crate::bail!(E_INVALID_ARG, "randint: {what} is out of bounds for {}", dt.name());
            }
        }
    }
    let (low, high) = if dt.is_float() { float_bounds(dt, low, high) } else { (low, high) };
    if low >= high {
        crate::bail!(E_INVALID_ARG, "randint: expects 'low' casted to {0} to be less than 'high' casted to {0}", dt.name());
    }
    let out = Raw::empty(&size_arg(call, dt)?, dt)?;
    // `random_from_to_kernel`: a 32-bit draw for ranges under 2^28, else a 64-bit
    // one, reduced modulo the range (DistributionsHelper.h, TransformationHelper.h).
    let range = (i128::from(high) - i128::from(low)) as u64;
    rng::with_gen(|g| {
        let mut draw = || if range >= 1 << 28 { g.random64() } else { u64::from(g.random()) };
        with_elem!(dt, T => out.slice_mut::<T>().iter_mut().for_each(|x| *x = T::from_sc(Sc::I((draw() % range).wrapping_add(low as u64) as i64))));
    });
    Ok(vec![out])
}

/// `update_from` and `update_to` (ATen/native/DistributionTemplates.h): a
/// bound the floating dtype rounds outward is moved inward, to a value it holds.
fn float_bounds(dt: DType, low: i64, high: i64) -> (i64, i64) {
    let digits = match dt {
        DType::F16 => 11,
        DType::BF16 => 8,
        DType::F32 => 24,
        _ => 53,
    };
    let through = |v: i64| with_float!(dt, T => cast::<T, i64>(T::from_sc(Sc::I(v))), _ => v);
    let step = |v: i64| 1i64 << (63 - i64::from((v.unsigned_abs() | 1).leading_zeros()) - digits + 1).clamp(0, 62);
    let (up, down) = (through(low + 1), through(high - 1));
    (if up < low { up.wrapping_add(step(low + 1)) } else { low }, if down >= high { down.wrapping_sub(step(high - 1)) } else { high })
}

fn randn_like(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let dt = dtype_or(call, x.dtype());
    if !dt.is_float() && x.numel() > 0 {
        return Err(refuse("randn_like", dt, "floating dtypes"));
    }
    let out = Raw::empty(x.shape(), dt)?;
    rng::randn(&out);
    Ok(vec![out])
}

/// Ones where `hit` says so, zeros elsewhere, in `dt`, drawn in order.
fn draws(shape: &[i64], dt: DType, mut hit: impl FnMut(&mut rng::Gen, usize) -> bool) -> Result<Raw> {
    let out = Raw::empty(shape, dt)?;
    rng::with_gen(|g| with_elem!(dt, T => out.slice_mut::<T>().iter_mut().enumerate().for_each(|(i, x)| *x = T::from_sc(Sc::B(hit(g, i))))));
    Ok(out)
}

/// `v` rounded to `dt` (for arithmetic done in f64 that PyTorch does in `dt`:
/// one correctly rounded f64 operation then rounded to f32 or f16 is the
/// correctly rounded narrow operation).
fn round_to(dt: DType, v: f64) -> f64 {
    with_float!(dt, T => cast::<T, f64>(cast::<f64, T>(v)), _ => v)
}

/// A tensor's values as f64, in row-major order.
fn values(x: &Raw) -> Result<Vec<f64>> {
    Ok(convert(x, DType::F64)?.contiguous()?.slice::<f64>().to_vec())
}

fn bernoulli(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if !x.dtype().is_float() && x.numel() > 0 {
        return Err(refuse("bernoulli", x.dtype(), "floating probabilities"));
    }
    let p = values(x)?;
    if p.iter().any(|v| !(0.0..=1.0).contains(v)) {
        crate::bail!(E_INVALID_ARG, "bernoulli: every probability must be in [0, 1]");
    }
    // `bernoulli_tensor_cpu_p_`: a double probability against a 53-bit draw,
    // any other against a 24-bit one.
    if x.dtype() == DType::F64 {
        Ok(vec![draws(x.shape(), x.dtype(), |g, i| g.unit_f64() < p[i])?])
    } else {
        Ok(vec![draws(x.shape(), x.dtype(), |g, i| g.unit_f32() < p[i] as f32)?])
    }
}

fn bernoulli_p(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let p = call.float("p").unwrap_or(0.5);
    if !(0.0..=1.0).contains(&p) {
        crate::bail!(E_INVALID_ARG, "bernoulli: p must be in [0, 1], got p={p}");
    }
    // `bernoulli_scalar_kernel_default`. PyTorch built with MKL runs on an Intel
    // CPU MKL's own generator (VSL_BRNG_MCG31 seeded from one draw) instead,
    // whose values this does not reproduce.
    Ok(vec![draws(x.shape(), x.dtype(), |g, _| g.unit_f64() < p)?])
}

fn multinomial(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (n, replace) = (call.int("num_samples").unwrap_or(0), call.bool("replacement").unwrap_or(false));
    if !matches!(x.dim(), 1 | 2) {
        crate::bail!(E_SHAPE, "multinomial: prob_dist must be 1 or 2 dim, got shape {}", fmt(x.shape()));
    }
    let cats = x.shape()[x.dim() - 1];
    if n <= 0 {
        crate::bail!(E_INVALID_ARG, "multinomial: cannot sample n_sample <= 0 samples");
    }
    if !replace && n > cats {
        crate::bail!(E_INVALID_ARG, "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement");
    }
    if cats > 1 << 24 {
        crate::bail!(E_SHAPE, "multinomial: number of categories cannot exceed 2^24");
    }
    let rows = if x.dim() == 2 { x.shape()[0] } else { 1 };
    let shape: Vec<i64> = if x.dim() == 2 { vec![rows, n] } else { vec![n] };
    let out = Raw::empty(&checked_size("multinomial", &shape, DType::I64)?, DType::I64)?;
    let p = values(x)?;
    if p.iter().any(|v| !v.is_finite() || *v < 0.0) {
        crate::bail!(E_INVALID_ARG, "multinomial: probability tensor contains either inf, nan or element < 0");
    }
    if (cats == 0 && rows > 0) || p.chunks(cats.max(1) as usize).any(|r| r.iter().sum::<f64>() <= 0.0) {
        crate::bail!(E_INVALID_ARG, "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
    }
    let (cats, n, dt) = (cats as usize, n as usize, x.dtype());
    // Sums in the dtype's computing type: f32 for all but f64 (MultinomialKernel.cpp).
    let acc = if dt == DType::F64 { DType::F64 } else { DType::F32 };
    rng::with_gen(|g| {
        for (row, o) in p.chunks(cats.max(1)).zip(out.slice_mut::<i64>().chunks_mut(n)) {
            if !replace || n == 1 {
                // Distributions.cpp: the top `n` of p / q, q ~ Exp(1) drawn in `dt` (Gumbel-max);
                // ties, which PyTorch leaves unordered, go to the lower index.
                let mut keys: Vec<(f64, usize)> =
                    row.iter().enumerate().map(|(i, &v)| (round_to(dt, v / round_to(dt, g.exponential())), i)).collect();
                keys.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                o.iter_mut().zip(&keys).for_each(|(s, k)| *s = k.1 as i64);
            } else {
                // The normalised cumulative sums, the last set to 1, searched for the
                // first entry not below a 53-bit uniform draw.
                let mut cum: Vec<f64> = row.iter().scan(0.0, |s, &v| {
                    *s = round_to(acc, *s + v);
                    Some(*s)
                })
                .collect();
                let total = cum[cats - 1];
                cum.iter_mut().for_each(|c| *c = round_to(acc, *c / total));
                cum[cats - 1] = 1.0;
                o.iter_mut().for_each(|s| {
                    let u = g.unit_f64();
                    *s = cum.partition_point(|&c| c < u) as i64;
                });
            }
        }
    });
    Ok(vec![out])
}
