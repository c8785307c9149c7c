//! `torch.fft` on the native backend: rustfft (complex transforms) and
//! realfft (real-input and real-output ones) along one dim, each row one
//! transform, rows split across the pool. Core checked the dtype, `n` and
//! `norm` (`vocab::fft`).
//!
//! Each transform is linear, so its backward is its adjoint, as PyTorch's
//! (`fft_r2c_backward`, `fft_c2r_backward` in `FunctionsManual.cpp`):
//! - `fft`/`ifft` (s·F): s·Fᴴ, the transform the other way with the same scale;
//! - `rfft` (the first n/2+1 bins of s·F on a real signal): the gradient
//!   zero-padded to n bins, transformed the other way, its real part;
//! - `irfft` (s·C2R): the one-sided s·R2C of the gradient, with the bins
//!   that stand for two (1 to n − n/2 − 1) doubled.
//! The trim or zero-pad to `n` points before a transform has as its adjoint
//! the zero-pad or trim back.

use std::sync::{Arc, Mutex, OnceLock};

use num_traits::Float;
use realfft::RealFftPlanner;
use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

use super::super::autograd::record;
use super::super::elem::{Cx, Elem};
use super::super::ops::convert;
use super::super::par;
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::{fft as rule, Call};

/// A real type rustfft transforms in, with its process-wide plan caches
/// (a plan of length n is made once: planning 2^20 points costs more than
/// transforming them).
trait FftReal: rustfft::FftNum + realfft::FftNum + Float + Elem + Default {
    fn plans() -> &'static Mutex<FftPlanner<Self>>;
    fn real_plans() -> &'static Mutex<RealFftPlanner<Self>>;
}

macro_rules! fft_real {
    ($t:ty) => {
        impl FftReal for $t {
            fn plans() -> &'static Mutex<FftPlanner<$t>> {
                static P: OnceLock<Mutex<FftPlanner<$t>>> = OnceLock::new();
                P.get_or_init(|| Mutex::new(FftPlanner::new()))
            }
            fn real_plans() -> &'static Mutex<RealFftPlanner<$t>> {
                static P: OnceLock<Mutex<RealFftPlanner<$t>>> = OnceLock::new();
                P.get_or_init(|| Mutex::new(RealFftPlanner::new()))
            }
        }
    };
}
fft_real!(f32);
fft_real!(f64);

/// `x` with dim `d` moved last, contiguous.
fn to_last(x: &Raw, d: usize) -> Result<Raw> {
    let mut perm: Vec<usize> = (0..x.dim()).filter(|&i| i != d).collect();
    perm.push(d);
    let shape: Vec<i64> = perm.iter().map(|&i| x.shape()[i]).collect();
    let strides: Vec<i64> = perm.iter().map(|&i| x.strides()[i]).collect();
    x.view_as(shape, strides, x.0.offset).contiguous()
}

/// The inverse of `to_last`: `y`'s last dim put back at `d`, contiguous.
fn from_last(y: &Raw, d: usize) -> Result<Raw> {
    let r = y.dim();
    let src = |i: usize| if i < d { i } else if i == d { r - 1 } else { i - 1 };
    let shape: Vec<i64> = (0..r).map(|i| y.shape()[src(i)]).collect();
    let strides: Vec<i64> = (0..r).map(|i| y.strides()[src(i)]).collect();
    y.view_as(shape, strides, y.0.offset).contiguous()
}

/// Rows of `x` (contiguous, last dim `m`) as `[rows, len]` of element `T`:
/// each row trimmed or zero-padded to `len`, then handed to `f` with its output row.
fn by_rows<S: Elem, D: Elem>(x: &Raw, len: usize, out_len: usize, f: impl Fn(&mut [S], &mut [D]) + Sync) -> Result<Raw> {
    let m = *x.shape().last().expect("core checked the rank") as usize;
    let rows = if m == 0 { x.shape()[..x.dim() - 1].iter().product::<i64>() as usize } else { x.numel() / m };
    let mut shape = x.shape().to_vec();
    *shape.last_mut().expect("rank >= 1") = out_len as i64;
    let out = Raw::empty(&shape, D::DT)?;
    let (src, dst) = (x.slice::<S>(), out.slice_mut::<D>());
    let (sp, dp) = (src.as_ptr() as usize, dst.as_mut_ptr() as usize);
    let take = m.min(len);
    let body = |i: usize| {
        let mut row = vec![S::default(); len];
        // SAFETY: row i of the source and of the destination, which rows do not share.
        unsafe {
            row[..take].copy_from_slice(std::slice::from_raw_parts((sp as *const S).add(i * m), take));
            f(&mut row, std::slice::from_raw_parts_mut((dp as *mut D).add(i * out_len), out_len));
        }
    };
    if par::parallel(rows * len.max(1)) && rows > 1 {
        par::for_each(rows, &body);
    } else {
        (0..rows).for_each(body);
    }
    Ok(out)
}

fn as_complex<R>(v: &mut [Cx<R>]) -> &mut [Complex<R>] {
    // SAFETY: Cx<R> and num-complex's Complex<R> are both #[repr(C)] { re, im }.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len()) }
}

/// Complex-to-complex along the last dim of contiguous `x`: rows trimmed or padded to `n`.
fn c2c<R: FftReal>(x: &Raw, n: usize, inverse: bool, scale: f64) -> Result<Raw>
where
    Cx<R>: Elem,
{
    let plan = {
        let mut p = R::plans().lock().unwrap_or_else(|e| e.into_inner());
        if inverse { p.plan_fft_inverse(n) } else { p.plan_fft_forward(n) }
    };
    let s = <R as num_traits::NumCast>::from(scale).unwrap_or_else(R::one);
    by_rows::<Cx<R>, Cx<R>>(x, n, n, |row, out| {
        let mut scratch = vec![Complex::default(); plan.get_inplace_scratch_len()];
        plan.process_with_scratch(as_complex(row), &mut scratch);
        for (o, v) in out.iter_mut().zip(row.iter()) {
            *o = Cx { re: v.re * s, im: v.im * s };
        }
    })
}

/// Real-to-complex (one-sided: n/2 + 1 bins) along the last dim of contiguous real `x`.
fn r2c<R: FftReal>(x: &Raw, n: usize, scale: f64) -> Result<Raw>
where
    Cx<R>: Elem,
{
    let plan: Arc<dyn realfft::RealToComplex<R>> = R::real_plans().lock().unwrap_or_else(|e| e.into_inner()).plan_fft_forward(n);
    let s = <R as num_traits::NumCast>::from(scale).unwrap_or_else(R::one);
    by_rows::<R, Cx<R>>(x, n, n / 2 + 1, |row, out| {
        let mut scratch = plan.make_scratch_vec();
        // Lengths match the plan's by construction.
        let _ = plan.process_with_scratch(row, as_complex(out), &mut scratch);
        for o in out.iter_mut() {
            *o = Cx { re: o.re * s, im: o.im * s };
        }
    })
}

/// Complex-to-real of one-sided spectra along the last dim of contiguous `x`
/// (rows trimmed or padded to n/2 + 1 bins); n real outputs. The imaginary
/// parts of bin 0 and, for even n, bin n/2 are ignored, as pocketfft's c2r
/// ignores them.
fn c2r<R: FftReal>(x: &Raw, n: usize, scale: f64) -> Result<Raw>
where
    Cx<R>: Elem,
{
    let plan: Arc<dyn realfft::ComplexToReal<R>> = R::real_plans().lock().unwrap_or_else(|e| e.into_inner()).plan_fft_inverse(n);
    let s = <R as num_traits::NumCast>::from(scale).unwrap_or_else(R::one);
    by_rows::<Cx<R>, R>(x, n / 2 + 1, n, |row, out| {
        row[0].im = R::zero();
        if n % 2 == 0 {
            row[n / 2].im = R::zero();
        }
        let mut scratch = plan.make_scratch_vec();
        let _ = plan.process_with_scratch(as_complex(row), out, &mut scratch);
        for o in out.iter_mut() {
            *o = *o * s;
        }
    })
}

/// `x` (contiguous, last dim) trimmed or zero-padded to `len` along the last dim.
fn resize_last(x: &Raw, len: usize) -> Result<Raw> {
    if *x.shape().last().expect("rank >= 1") as usize == len {
        return Ok(x.clone());
    }
    super::super::elem::with_elem!(x.dtype(), T => by_rows::<T, T>(x, len, len, |row, out| out.copy_from_slice(row)))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Fft,
    Ifft,
    Rfft,
    Irfft,
}

/// One transform of contiguous `x` (dim last), forward or as its adjoint (`back`).
fn transform(kind: Kind, x: &Raw, n: usize, scale: f64, back: bool) -> Result<Raw> {
    let dt = x.dtype();
    macro_rules! go {
        ($R:ty) => {{
            match (kind, back) {
                (Kind::Fft, false) | (Kind::Ifft, true) => c2c::<$R>(x, n, false, scale),
                (Kind::Ifft, false) | (Kind::Fft, true) => c2c::<$R>(x, n, true, scale),
                (Kind::Rfft, false) => r2c::<$R>(x, n, scale),
                // The gradient (n/2 + 1 bins) zero-padded to n, transformed back; its real part.
                (Kind::Rfft, true) => {
                    let full = c2c::<$R>(x, n, true, scale)?;
                    convert(&full, full.dtype().to_real())
                }
                (Kind::Irfft, false) => c2r::<$R>(x, n, scale),
                (Kind::Irfft, true) => {
                    let g = r2c::<$R>(x, n, scale)?;
                    let twice = n - (n / 2 + 1);
                    let bins = n / 2 + 1;
                    let v = g.slice_mut::<Cx<$R>>();
                    for row in v.chunks_mut(bins) {
                        for b in &mut row[1..=twice] {
                            *b = Cx { re: b.re * 2.0, im: b.im * 2.0 };
                        }
                    }
                    Ok(g)
                }
            }
        }};
    }
    match dt {
        DType::F32 | DType::C64 => go!(f32),
        _ => go!(f64),
    }
}

fn run(call: &Call, ins: &[Option<&Raw>], kind: Kind) -> Result<Vec<Raw>> {
    let x0 = input(ins, 0);
    let d = call.int("dim").unwrap_or(-1);
    let d = if d < 0 { (d + x0.dim() as i64) as usize } else { d as usize };
    let m = x0.shape()[d];
    let n = rule::length(call, m) as usize;
    let inverse = matches!(kind, Kind::Ifft | Kind::Irfft);
    let scale = rule::scale(call.str("norm"), n as i64, inverse);
    // The computing dtype: complex for fft/ifft/irfft, real for rfft; integers as fp32.
    let real = if x0.dtype().is_inexact() { x0.dtype().to_real() } else { DType::F32 };
    let dt = if kind == Kind::Rfft { real } else { real.to_complex() };
    let x = if x0.dtype() == dt { x0.detached() } else { convert(x0, dt)? };
    let y = from_last(&transform(kind, &to_last(&x, d)?, n, scale, false)?, d)?;
    Ok(vec![record(y, "FftBackward0", &[x0], move |g| {
        let gx = transform(kind, &to_last(&g, d)?, n, scale, true)?;
        // The adjoint of the trim or pad to n points (irfft's input: to n/2 + 1 bins).
        Ok(vec![Some(from_last(&resize_last(&gx, m as usize)?, d)?)])
    })])
}

fn fft(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    run(call, ins, Kind::Fft)
}
fn ifft(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    run(call, ins, Kind::Ifft)
}
fn rfft(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    run(call, ins, Kind::Rfft)
}
fn irfft(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    run(call, ins, Kind::Irfft)
}

pub const KERNELS: &[(&str, Kernel)] = &[("fft_fft", fft), ("fft_ifft", ifft), ("fft_rfft", rfft), ("fft_irfft", irfft)];
