//! Complex tensors on the native backend (complex64, complex128).
//!
//! A complex element is `Cx<f32>` or `Cx<f64>` (`elem::Cx`), (re, im)
//! adjacent as PyTorch stores them, so the generic kernels that only move
//! or add elements (copies, cat, views, sums, the GEMM) take complex
//! tensors as they are. This file has the rest:
//! - the ops only complex numbers have (`real`, `imag`, `view_as_real`,
//!   `view_as_complex`, `conj`, `angle`, `polar`, `complex`), in `KERNELS`;
//! - the complex forms of arithmetic and math (`OVERRIDES`), which the
//!   dispatcher runs instead of the real kernel when an input is complex.
//!
//! Gradients follow PyTorch's convention: the gradient of a real loss L
//! with respect to z = x + iy is ∂L/∂x + i ∂L/∂y (the conjugate Wirtinger
//! derivative, doubled). For a holomorphic f that makes the backward
//! `g · conj(f'(z))`; the others are PyTorch's formulas (`FunctionsManual.cpp`).

use super::super::autograd::{needs_grad, record, record_saving};
use super::super::elem::{Cx, C32, C64};
use super::super::kernels::{map_into, zip_into};
use super::super::ops::{self, plain};
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::kinds::Binary;
use crate::vocab::{schema::Scalar, Call};

/// `f` over each element of a complex tensor, into a new one of `out_dt`
/// (`$R` is the element's real type in the closure).
macro_rules! cmap {
    ($x:expr, $out_dt:expr, $D:ident, |$z:ident| $f:expr) => {{
        let x: &Raw = $x;
        let out = Raw::empty(x.shape(), $out_dt)?;
        match x.dtype() {
            DType::C64 => {
                #[allow(dead_code)]
                type $D = f32;
                map_into::<C32, _>(&out, x, x.strides(), |$z: C32| $f)
            }
            DType::C128 => {
                #[allow(dead_code)]
                type $D = f64;
                map_into::<C64, _>(&out, x, x.strides(), |$z: C64| $f)
            }
            d => crate::bail!(E_DTYPE, "expected a complex tensor, got {}", d.name()),
        }
        out
    }};
}

/// The conjugate, materialized (a real tensor is its own conjugate: itself).
pub fn conj_plain(x: &Raw) -> Result<Raw> {
    if !x.dtype().is_complex() {
        return Ok(x.clone());
    }
    Ok(cmap!(x, x.dtype(), R, |z| z.conj()))
}

/// `conj` with its gradient (the conjugate of the incoming one).
fn conj_of(x: &Raw) -> Result<Raw> {
    if !x.dtype().is_complex() {
        return Ok(x.clone());
    }
    let out = conj_plain(x)?;
    Ok(record(out, "ConjPhysicalBackward0", &[x], |g| Ok(vec![Some(conj_plain(g)?)])))
}

/// A complex tensor's `[..., 2]` real view (no history).
fn real_view(z: &Raw) -> Raw {
    let mut shape = z.shape().to_vec();
    shape.push(2);
    let mut strides: Vec<i64> = z.strides().iter().map(|s| s * 2).collect();
    strides.push(1);
    z.reinterpret(z.dtype().to_real(), shape, strides, z.0.offset * 2)
}

/// One component of a complex tensor as a real view (`part` 0: real, 1: imaginary).
fn part_view(z: &Raw, part: usize) -> Raw {
    let strides: Vec<i64> = z.strides().iter().map(|s| s * 2).collect();
    z.reinterpret(z.dtype().to_real(), z.shape().to_vec(), strides, z.0.offset * 2 + part)
}

/// The complex view of a real `[..., 2]` tensor, with PyTorch's conditions on its layout.
fn complex_view(r: &Raw) -> Result<Raw> {
    let (shape, strides) = (r.shape(), r.strides());
    if !matches!(r.dtype(), DType::F32 | DType::F64) {
        crate::bail!(E_DTYPE, "view_as_complex is only supported for float and double tensors, got {}", r.dtype().name());
    }
    if shape.last() != Some(&2) {
        crate::bail!(E_SHAPE, "view_as_complex: the tensor must have a last dimension of size 2, got {}", fmt(shape));
    }
    if strides[strides.len() - 1] != 1 {
        crate::bail!(E_SHAPE, "view_as_complex: the tensor must have a last dimension with stride 1");
    }
    if strides[..strides.len() - 1].iter().any(|s| s % 2 != 0) {
        crate::bail!(E_SHAPE, "view_as_complex: the tensor must have a stride divisible by 2 for all but the last dimension");
    }
    if r.0.offset % 2 != 0 {
        crate::bail!(E_SHAPE, "view_as_complex: the tensor must have a storage offset divisible by 2");
    }
    let n = shape.len() - 1;
    let st: Vec<i64> = strides[..n].iter().map(|s| s / 2).collect();
    Ok(r.reinterpret(r.dtype().to_complex(), shape[..n].to_vec(), st, r.0.offset / 2))
}

/// `re + i·im` of two real tensors of one dtype, broadcast (no history).
fn assemble(re: &Raw, im: &Raw) -> Result<Raw> {
    let shape = crate::vocab::broadcast(re.shape(), im.shape())
        .ok_or_else(|| crate::err!(E_SHAPE, "complex: shapes {} and {} do not broadcast", fmt(re.shape()), fmt(im.shape())))?;
    let out = Raw::empty(&shape, re.dtype().to_complex())?;
    match re.dtype() {
        DType::F32 => zip_into::<f32, f32, C32>(&out, re, im, Cx::new),
        DType::F64 => zip_into::<f64, f64, C64>(&out, re, im, Cx::new),
        d => crate::bail!(E_DTYPE, "complex: expected float or double parts, got {}", d.name()),
    }
    Ok(out)
}

/// A real tensor as complex (zero imaginary part), no history.
fn widen(x: &Raw) -> Result<Raw> {
    ops::convert(x, x.dtype().to_complex())
}

/// A contiguous copy of one component of a complex tensor.
fn part(z: &Raw, which: usize) -> Result<Raw> {
    part_view(z, which).contiguous()
}

// ----------------------------------------------------------- views and parts

fn real(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let z = input(ins, 0);
    if !z.dtype().is_complex() {
        return Ok(vec![z.clone()]);
    }
    let out = part_view(z, 0);
    Ok(vec![record(out, "RealBackward0", &[z], |g| Ok(vec![Some(widen(g)?)]))])
}

fn imag(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let z = input(ins, 0);
    if !z.dtype().is_complex() {
        crate::bail!(E_DTYPE, "imag is not implemented for tensors with non-complex dtypes (got {})", z.dtype().name());
    }
    let out = part_view(z, 1);
    Ok(vec![record(out, "ImagBackward0", &[z], |g| Ok(vec![Some(assemble(&Raw::zeros(&[], g.dtype())?, g)?)]))])
}

fn view_as_real(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let z = input(ins, 0);
    if !z.dtype().is_complex() {
        crate::bail!(E_DTYPE, "view_as_real is only supported for complex tensors, got {}", z.dtype().name());
    }
    let out = real_view(z);
    Ok(vec![record(out, "ViewAsRealBackward0", &[z], |g| Ok(vec![Some(complex_view(&g.contiguous()?)?)]))])
}

fn view_as_complex(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let r = input(ins, 0);
    let out = complex_view(r)?;
    Ok(vec![record(out, "ViewAsComplexBackward0", &[r], |g| Ok(vec![Some(real_view(g))]))])
}

fn conj(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![conj_of(input(ins, 0))?])
}

fn complex(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (re, im) = (input(ins, 0), input(ins, 1));
    if re.dtype() != im.dtype() {
        crate::bail!(E_DTYPE, "complex: expected real and imag to have the same dtype, got {} and {}", re.dtype().name(), im.dtype().name());
    }
    let out = assemble(re, im)?;
    Ok(vec![record(out, "ComplexBackward0", &[re, im], |g| Ok(vec![Some(part(g, 0)?), Some(part(g, 1)?)]))])
}

fn polar(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (abs, angle) = (input(ins, 0), input(ins, 1));
    if abs.dtype() != angle.dtype() {
        crate::bail!(E_DTYPE, "polar: expected abs and angle to have the same dtype, got {} and {}", abs.dtype().name(), angle.dtype().name());
    }
    let shape = crate::vocab::broadcast(abs.shape(), angle.shape())
        .ok_or_else(|| crate::err!(E_SHAPE, "polar: shapes {} and {} do not broadcast", fmt(abs.shape()), fmt(angle.shape())))?;
    let out = Raw::empty(&shape, abs.dtype().to_complex())?;
    match abs.dtype() {
        DType::F32 => zip_into::<f32, f32, C32>(&out, abs, angle, |r, t| Cx::new(r * t.cos(), r * t.sin())),
        DType::F64 => zip_into::<f64, f64, C64>(&out, abs, angle, |r, t| Cx::new(r * t.cos(), r * t.sin())),
        d => crate::bail!(E_DTYPE, "polar: expected float or double inputs, got {}", d.name()),
    }
    if !needs_grad(&[abs, angle]) {
        return Ok(vec![out]);
    }
    let y = out.detached();
    // polar_backward: grad_abs = re(conj(g)·sgn(y)), grad_angle = re(conj(g)·iy).
    Ok(vec![record_saving(out, "PolarBackward0", &[abs, angle], &[], true, move |g| {
        let (ga, gt) = (Raw::empty(g.shape(), y.dtype().to_real())?, Raw::empty(g.shape(), y.dtype().to_real())?);
        macro_rules! go {
            ($C:ty) => {{
                zip_into::<$C, $C, _>(&ga, g, &y, |g: $C, y: $C| {
                    let a = y.abs();
                    if a == 0.0 { 0.0 } else { (g.re * y.re + g.im * y.im) / a }
                });
                zip_into::<$C, $C, _>(&gt, g, &y, |g: $C, y: $C| g.im * y.re - g.re * y.im);
            }};
        }
        match y.dtype() {
            DType::C64 => go!(C32),
            _ => go!(C64),
        }
        Ok(vec![Some(ga), Some(gt)])
    })])
}

fn angle(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if !x.dtype().is_complex() {
        // angle of a real number: 0 or π (NaN stays NaN), with a zero gradient.
        let xf = if x.dtype().is_float() { x.detached() } else { ops::convert(x, DType::F32)? };
        let pi = plain(Binary::Mul, &lt_zero(&xf)?, &ops::full(&[], xf.dtype(), std::f64::consts::PI)?)?;
        let out = plain(Binary::Add, &pi, &plain(Binary::Mul, &xf, &ops::full(&[], xf.dtype(), 0.0)?)?)?;
        return Ok(vec![record(out, "AngleBackward0", &[x], |g| Ok(vec![Some(plain(Binary::Mul, g, &ops::full(&[], g.dtype(), 0.0)?)?)]))]);
    }
    let out = cmap!(x, x.dtype().to_real(), R, |z| z.arg());
    let z = x.detached();
    // angle_backward: g · z / |z|² · i, and 0 where z = 0.
    Ok(vec![record_saving(out, "AngleBackward0", &[x], &[x], false, move |g| {
        let d = Raw::empty(g.shape(), z.dtype())?;
        macro_rules! go {
            ($R:ty) => {
                zip_into::<$R, Cx<$R>, Cx<$R>>(&d, g, &z, |g: $R, z: Cx<$R>| {
                    let n = z.re * z.re + z.im * z.im;
                    if n == 0.0 { Cx::default() } else { Cx::new(-g * z.im / n, g * z.re / n) }
                })
            };
        }
        match z.dtype() {
            DType::C64 => go!(f32),
            _ => go!(f64),
        }
        Ok(vec![Some(d)])
    })])
}

/// 1 where `x < 0`, else 0, in `x`'s (floating) dtype.
fn lt_zero(x: &Raw) -> Result<Raw> {
    let out = Raw::empty(x.shape(), x.dtype())?;
    super::super::elem::with_float!(x.dtype(), T => {
        use super::super::elem::Elem;
        map_into::<T, T>(&out, x, x.strides(), |v: T| T::from_sc(super::super::elem::Sc::F(if super::super::elem::cast::<T, f64>(v) < 0.0 { 1.0 } else { 0.0 })))
    }, _ => crate::bail!(E_DTYPE, "angle: expected a floating tensor"));
    Ok(out)
}

// ---------------------------------------------------------------- arithmetic

/// An operand of an arithmetic op: the tensor, or the number as a 0-dim tensor of `dt`.
fn operand(call: &Call, ins: &[Option<&Raw>], name: &str, dt: DType) -> Result<Raw> {
    if let Some(i) = call.tensor(name) {
        return Ok(input(ins, i).clone());
    }
    match call.scalar(name) {
        Some(s) => ops::full(&[], dt, s.to_f64()),
        None => crate::bail!(E_INVALID_ARG, "{}: missing {name}", call.op.name()),
    }
}

fn arith(call: &Call, ins: &[Option<&Raw>], op: Binary) -> Result<Vec<Raw>> {
    let dt = call.out_dtype.expect("core sets the result dtype of elementwise ops");
    let name = call.op.name();
    if call.str("rounding_mode").is_some() {
        crate::bail!(E_DTYPE, "{name}: rounding_mode is not supported for complex tensors");
    }
    let a = operand(call, ins, "self", dt)?;
    let mut b = operand(call, ins, "other", dt)?;
    match call.scalar("alpha") {
        Some(Scalar::Bool(_)) => crate::bail!(E_DTYPE, "{name}: boolean alpha only supported for Boolean results"),
        Some(s) if s.to_f64() != 1.0 => b = ops::binary(Binary::Mul, &b, &ops::full(&[], dt, s.to_f64())?)?,
        _ => {}
    }
    Ok(vec![ops::binary(op, &a, &b)?])
}

fn add(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arith(call, ins, Binary::Add)
}
fn sub(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arith(call, ins, Binary::Sub)
}
fn mul(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arith(call, ins, Binary::Mul)
}
fn div(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    arith(call, ins, Binary::Div)
}

fn neg(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let out = cmap!(x, x.dtype(), R, |z| Cx::new(-z.re, -z.im));
    Ok(vec![record(out, "NegBackward0", &[x], |g| Ok(vec![Some(plain(Binary::Mul, g, &ops::full(&[], g.dtype(), -1.0)?)?)]))])
}

/// A holomorphic function with its gradient `g · conj(f'(z))`, written from `g`, `z` and `y = f(z)`.
fn holomorphic(x: &Raw, node: &'static str, y: Raw, back: fn(&Raw, &Raw, &Raw) -> Result<Raw>) -> Result<Vec<Raw>> {
    if !needs_grad(&[x]) {
        return Ok(vec![y]);
    }
    let (z, ys) = (x.detached(), y.detached());
    Ok(vec![record_saving(y, node, &[x], &[x], true, move |g| Ok(vec![Some(back(g, &z, &ys)?)]))])
}

fn exp(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let y = cmap!(x, x.dtype(), R, |z| z.exp());
    holomorphic(x, "ExpBackward0", y, |g, _, y| plain(Binary::Mul, g, &conj_plain(y)?))
}

fn log(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let y = cmap!(x, x.dtype(), R, |z| z.ln());
    holomorphic(x, "LogBackward0", y, |g, z, _| plain(Binary::Div, g, &conj_plain(z)?))
}

fn sqrt(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let y = cmap!(x, x.dtype(), R, |z| z.sqrt());
    holomorphic(x, "SqrtBackward0", y, |g, _, y| {
        let two_y = plain(Binary::Mul, &conj_plain(y)?, &ops::full(&[], y.dtype(), 2.0)?)?;
        plain(Binary::Div, g, &two_y)
    })
}

fn abs(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let out = cmap!(x, x.dtype().to_real(), R, |z| z.abs());
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let z = x.detached();
    // abs_backward: g · sgn(z), with sgn(0) = 0.
    Ok(vec![record_saving(out, "AbsBackward0", &[x], &[x], false, move |g| {
        let d = Raw::empty(g.shape(), z.dtype())?;
        macro_rules! go {
            ($R:ty) => {
                zip_into::<$R, Cx<$R>, Cx<$R>>(&d, g, &z, |g: $R, z: Cx<$R>| {
                    let a = z.abs();
                    if a == 0.0 { Cx::default() } else { Cx::new(g * z.re / a, g * z.im / a) }
                })
            };
        }
        match z.dtype() {
            DType::C64 => go!(f32),
            _ => go!(f64),
        }
        Ok(vec![Some(d)])
    })])
}

/// Whether any input is complex: then `OVERRIDES` runs the op.
pub fn any_complex(ins: &[Option<&Raw>]) -> bool {
    ins.iter().flatten().any(|t| t.dtype().is_complex())
}

/// The complex forms of ops whose real kernels compute in a real type.
pub const OVERRIDES: &[(&str, Kernel)] = &[
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
    ("neg", neg),
    ("exp", exp),
    ("log", log),
    ("sqrt", sqrt),
    ("abs", abs),
];

pub const KERNELS: &[(&str, Kernel)] = &[
    ("real", real),
    ("imag", imag),
    ("view_as_real", view_as_real),
    ("view_as_complex", view_as_complex),
    ("conj_physical", conj),
    ("angle", angle),
    ("polar", polar),
    ("complex", complex),
];
