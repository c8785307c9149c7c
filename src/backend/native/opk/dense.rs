//! Native kernels of `torch.linalg`'s factorizations and solvers, on faer
//! (pure Rust, maintained; the factorizations are not written here). Each
//! works on the last two dims, batched over the leading ones, in fp32 or
//! fp64 (PyTorch's CPU kernels take no half dtypes either). A backward is
//! PyTorch's formula (`FunctionsManual.cpp`), computed per matrix with
//! faer's products and triangular solves; the gradients are first-order.
//! A singular or non-positive-definite input is `E_LINALG`, worded as
//! PyTorch words it, with `(Batch element i)` for a batch.

use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::linalg::triangular_solve as tri;
use faer::{Mat, MatRef, Par, Side};

use super::super::autograd::record;
use super::super::elem::{match_elem, Elem};
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::Call;

/// The element types the factorizations run in.
pub(super) trait Real: faer::traits::RealField + Elem + num_traits::Float {
    fn c(v: f64) -> Self;
}
impl Real for f32 {
    fn c(v: f64) -> f32 {
        v as f32
    }
}
impl Real for f64 {
    fn c(v: f64) -> f64 {
        v
    }
}

macro_rules! with_real {
    ($op:expr, $dt:expr, $T:ident => $body:expr) => {
        match_elem!($dt, $T => $body, [F32: f32, F64: f64], _ => crate::bail!(E_DTYPE, "{}: {} is not supported (it takes fp32 and fp64)", $op, $dt.name()))
    };
}
pub(super) use with_real;

/// A batch of matrices: the leading dims and each matrix, row-major in faer.
pub(super) struct Batch<T: Real> {
    pub(super) lead: Vec<i64>,
    pub(super) mats: Vec<Mat<T>>,
}

/// The op's words before a batch element's message.
pub(super) fn at(op: &str, lead: &[i64], b: usize) -> String {
    if lead.is_empty() {
        format!("{op}:")
    } else {
        format!("{op}: (Batch element {b}):")
    }
}

pub(super) fn matrices<T: Real>(op: &str, x: &Raw, square: bool) -> Result<Batch<T>> {
    let s = x.shape();
    if s.len() < 2 {
        crate::bail!(E_SHAPE, "{op}: the input must have at least 2 dimensions, got {}", fmt(s));
    }
    let (m, n) = (s[s.len() - 2] as usize, s[s.len() - 1] as usize);
    if square && m != n {
        crate::bail!(E_SHAPE, "{op}: A must be batches of square matrices, but they are {m} by {n} matrices");
    }
    let lead = s[..s.len() - 2].to_vec();
    let count: usize = lead.iter().product::<i64>() as usize;
    let c = super::real::<T>(x)?;
    let data = c.slice::<T>();
    let mats = (0..count).map(|b| MatRef::from_row_major_slice(&data[b * m * n..(b + 1) * m * n], m, n).to_owned()).collect();
    Ok(Batch { lead, mats })
}

/// Matrices of one shape back into a tensor of `lead` + their shape.
pub(super) fn assemble<T: Real>(lead: &[i64], mats: &[Mat<T>], rows: usize, cols: usize) -> Result<Raw> {
    let shape: Vec<i64> = lead.iter().copied().chain([rows as i64, cols as i64]).collect();
    let out = Raw::empty(&shape, T::DT)?;
    let o = out.slice_mut::<T>();
    for (b, m) in mats.iter().enumerate() {
        for i in 0..rows {
            for j in 0..cols {
                o[(b * rows + i) * cols + j] = m[(i, j)];
            }
        }
    }
    Ok(out)
}

/// Values, one per matrix (or one vector per matrix), into a tensor of `lead` + `tail`.
pub(super) fn assemble_vec<T: Real>(lead: &[i64], tail: &[i64], values: &[T]) -> Result<Raw> {
    let shape: Vec<i64> = lead.iter().chain(tail).copied().collect();
    let out = Raw::empty(&shape, T::DT)?;
    out.slice_mut::<T>().copy_from_slice(values);
    Ok(out)
}

pub(super) fn tril<T: Real>(m: &mut Mat<T>, k: isize) {
    for i in 0..m.nrows() {
        for j in 0..m.ncols() {
            if (j as isize) - (i as isize) > k {
                m[(i, j)] = T::c(0.0);
            }
        }
    }
}

pub(super) fn triu<T: Real>(m: &mut Mat<T>, k: isize) {
    for i in 0..m.nrows() {
        for j in 0..m.ncols() {
            if (j as isize) - (i as isize) < k {
                m[(i, j)] = T::c(0.0);
            }
        }
    }
}

/// `A⁻ᵀ`-style solves: `x = A⁻¹ b` (left) or `b A⁻¹` (right) for triangular `a`.
pub(super) fn solve_tri<T: Real>(a: MatRef<'_, T>, b: &Mat<T>, upper: bool, left: bool, unit: bool) -> Mat<T> {
    // Right: x A = b  <=>  Aᵀ xᵀ = bᵀ, with Aᵀ of the other triangle.
    let (a, upper, mut x) = if left { (a, upper, b.clone()) } else { (a.transpose(), !upper, b.transpose().to_owned()) };
    match (upper, unit) {
        (false, false) => tri::solve_lower_triangular_in_place(a, x.as_mut(), Par::Seq),
        (false, true) => tri::solve_unit_lower_triangular_in_place(a, x.as_mut(), Par::Seq),
        (true, false) => tri::solve_upper_triangular_in_place(a, x.as_mut(), Par::Seq),
        (true, true) => tri::solve_unit_upper_triangular_in_place(a, x.as_mut(), Par::Seq),
    }
    if left {
        x
    } else {
        x.transpose().to_owned()
    }
}

// ------------------------------------------------------------------ cholesky

fn cholesky_of<T: Real>(op: &str, x: &Raw, upper: bool) -> Result<(Batch<T>, Raw)> {
    let a = matrices::<T>(op, x, true)?;
    let mut ls = Vec::with_capacity(a.mats.len());
    for (b, m) in a.mats.iter().enumerate() {
        match m.as_ref().llt(Side::Lower) {
            Ok(f) => {
                let mut l = f.L().to_owned();
                tril(&mut l, 0);
                ls.push(l);
            }
            Err(faer::linalg::cholesky::llt::factor::LltError::NonPositivePivot { index }) => crate::bail!(
                E_LINALG,
                "{} The factorization could not be completed because the input is not positive-definite (the leading minor of order {} is not positive-definite).",
                at(op, &a.lead, b),
                index + 1
            ),
        }
    }
    let n = x.shape()[x.dim() - 1] as usize;
    let out = if upper {
        assemble(&a.lead, &ls.iter().map(|l| l.transpose().to_owned()).collect::<Vec<_>>(), n, n)?
    } else {
        assemble(&a.lead, &ls, n, n)?
    };
    Ok((Batch { lead: a.lead, mats: ls }, out))
}

/// PyTorch's `cholesky_backward`: `gA = L⁻ᴴ Φ(Lᴴ gL) L⁻¹` with Φ the lower
/// triangle, its strict part mirrored at half weight.
fn cholesky_back<T: Real>(l: &Mat<T>, gl: &Mat<T>) -> Mat<T> {
    let n = l.nrows();
    let mut p = l.as_ref().transpose() * gl.as_ref();
    tril(&mut p, 0);
    let half = T::c(0.5);
    let q = Mat::from_fn(n, n, |i, j| half * (p[(i, j)] + if j > i { p[(j, i)] } else { T::c(0.0) }));
    let x = solve_tri(l.as_ref().transpose(), &q, true, true, false);
    solve_tri(l.as_ref(), &x, false, false, false)
}

fn cholesky(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let upper = call.bool("upper").unwrap_or(false);
    with_real!("linalg.cholesky", x.dtype(), T => {
        let (ls, out) = cholesky_of::<T>("linalg.cholesky", x, upper)?;
        let n = ls.mats.first().map_or(0, |m| m.nrows());
        Ok(vec![record(out, "LinalgCholeskyExBackward0", &[x], move |g| {
            let gb = matrices::<T>("linalg.cholesky", g, true)?;
            let grads: Vec<Mat<T>> = ls.mats.iter().zip(&gb.mats).map(|(l, gl)| {
                let gl = if upper { gl.transpose().to_owned() } else { gl.clone() };
                cholesky_back(l, &gl)
            }).collect();
            Ok(vec![Some(assemble(&ls.lead, &grads, n, n)?)])
        })])
    })
}

// ----------------------------------------------------------- triangular solve

/// Broadcasts the batch dims of `a` and `b` (matrices in their last two dims).
pub(super) fn broadcast_pair<T: Real>(op: &str, a: &Batch<T>, b: &Batch<T>) -> Result<(Vec<i64>, Vec<(usize, usize)>)> {
    let lead = crate::vocab::broadcast_dims(&a.lead, &b.lead)
        .ok_or_else(|| crate::err!(E_SHAPE, "{op}: the batch dims {} and {} do not broadcast", fmt(&a.lead), fmt(&b.lead)))?;
    let index = |src: &[i64], k: usize| -> usize {
        // The element of `src` (right-aligned, size-1 dims broadcast) that batch element `k` reads.
        let mut rem = k;
        let mut idx = 0usize;
        let mut stride = 1usize;
        for (d, &size) in lead.iter().enumerate().rev() {
            let i = rem % size as usize;
            rem /= size as usize;
            let sd = d as isize - (lead.len() - src.len()) as isize;
            if sd >= 0 {
                let s = src[sd as usize] as usize;
                idx += if s == 1 { 0 } else { i * stride };
                stride *= s;
            }
        }
        idx
    };
    let count: usize = lead.iter().product::<i64>() as usize;
    Ok((lead.to_vec(), (0..count).map(|k| (index(&a.lead, k), index(&b.lead, k))).collect()))
}

fn solve_triangular(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (a, b) = (input(ins, 0), input(ins, 1));
    let op = "linalg.solve_triangular";
    let upper = call.bool("upper").unwrap_or(false);
    let left = call.bool("left").unwrap_or(true);
    let unit = call.bool("unitriangular").unwrap_or(false);
    if a.dtype() != b.dtype() {
        crate::bail!(E_DTYPE, "{op}: Expected self and B to have the same dtype, but found self with dtype {} and B with dtype {}", a.dtype().name(), b.dtype().name());
    }
    with_real!(op, a.dtype(), T => {
        let am = matrices::<T>(op, a, true)?;
        let bm = matrices::<T>(op, b, false)?;
        let n = a.shape()[a.dim() - 1] as usize;
        let (rows, cols) = (b.shape()[b.dim() - 2] as usize, b.shape()[b.dim() - 1] as usize);
        if (left && rows != n) || (!left && cols != n) {
            crate::bail!(E_SHAPE, "{op}: Incompatible shapes of A and B for the equation {} ({} and {})", if left { "AX = B" } else { "XA = B" }, fmt(a.shape()), fmt(b.shape()));
        }
        let (lead, pairs) = broadcast_pair(op, &am, &bm)?;
        let xs: Vec<Mat<T>> = pairs.iter().map(|&(i, j)| solve_tri(masked(&am.mats[i], upper, unit).as_ref(), &bm.mats[j], upper, left, unit)).collect();
        let out = assemble(&lead, &xs, rows, cols)?;
        let (a_lead, b_lead) = (am.lead.clone(), bm.lead.clone());
        Ok(vec![record(out, "LinalgSolveTriangularBackward0", &[a, b], move |g| {
            let gm = matrices::<T>(op, g, false)?;
            let mut ga: Vec<Mat<T>> = vec![Mat::zeros(n, n); am.mats.len()];
            let mut gb: Vec<Mat<T>> = vec![Mat::zeros(rows, cols); bm.mats.len()];
            for (k, &(i, j)) in pairs.iter().enumerate() {
                let at = masked(&am.mats[i], upper, unit);
                // gB = A⁻ᴴ gX (left) or gX A⁻ᴴ (right): a solve with Aᵀ, the other triangle.
                let gbk = solve_tri(at.as_ref().transpose(), &gm.mats[k], !upper, left, unit);
                let mut gak = if left { -(gbk.as_ref() * xs[k].as_ref().transpose()) } else { -(xs[k].as_ref().transpose() * gbk.as_ref()) };
                if upper { triu(&mut gak, if unit { 1 } else { 0 }) } else { tril(&mut gak, if unit { -1 } else { 0 }) }
                ga[i] = &ga[i] + &gak;
                gb[j] = &gb[j] + &gbk;
            }
            Ok(vec![Some(assemble(&a_lead, &ga, n, n)?), Some(assemble(&b_lead, &gb, rows, cols)?)])
        })])
    })
}

/// The triangle a triangular solve reads (the other one is ignored, as LAPACK ignores it).
fn masked<T: Real>(a: &Mat<T>, upper: bool, unit: bool) -> Mat<T> {
    let mut m = a.clone();
    if upper { triu(&mut m, 0) } else { tril(&mut m, 0) }
    if unit {
        for i in 0..m.nrows() {
            m[(i, i)] = T::c(1.0);
        }
    }
    m
}

// -------------------------------------------------------- LU: solve, inv, det

/// The LU factorization of each matrix, refusing a singular one with `what`.
fn lu_checked<T: Real>(op: &str, lead: &[i64], b: usize, m: &Mat<T>, singular: &str) -> Result<faer::linalg::solvers::PartialPivLu<T>> {
    let lu = m.as_ref().partial_piv_lu();
    let u = lu.U();
    if let Some(k) = (0..u.nrows()).find(|&k| u[(k, k)] == T::c(0.0)) {
        let msg = singular.replace("{k}", &(k + 1).to_string());
        crate::bail!(E_LINALG, "{} {msg}", at(op, lead, b));
    }
    Ok(lu)
}

fn inv(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let a = input(ins, 0);
    let op = "linalg.inv";
    with_real!(op, a.dtype(), T => {
        let am = matrices::<T>(op, a, true)?;
        let n = a.shape()[a.dim() - 1] as usize;
        let mut invs = Vec::with_capacity(am.mats.len());
        for (b, m) in am.mats.iter().enumerate() {
            let lu = lu_checked(op, &am.lead, b, m, "The diagonal element {k} is zero, the inversion could not be completed because the input matrix is singular.")?;
            invs.push(lu.inverse());
        }
        let out = assemble(&am.lead, &invs, n, n)?;
        let lead = am.lead;
        Ok(vec![record(out, "LinalgInvExBackward0", &[a], move |g| {
            let gm = matrices::<T>(op, g, true)?;
            // gA = -A⁻ᴴ gX A⁻ᴴ
            let ga: Vec<Mat<T>> = invs.iter().zip(&gm.mats).map(|(x, gx)| -(x.as_ref().transpose() * gx.as_ref() * x.as_ref().transpose())).collect();
            Ok(vec![Some(assemble(&lead, &ga, n, n)?)])
        })])
    })
}

fn solve(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (a, b) = (input(ins, 0), input(ins, 1));
    let op = "linalg.solve";
    let left = call.bool("left").unwrap_or(true);
    if a.dtype() != b.dtype() {
        crate::bail!(E_DTYPE, "{op}: Expected A and B to have the same dtype, but found A of type {} and B of type {} instead", a.dtype().name(), b.dtype().name());
    }
    if a.dim() < 2 {
        crate::bail!(E_SHAPE, "{op}: The input tensor A must have at least 2 dimensions.");
    }
    // B is a batch of vectors when it is 1-D, or has A's batch shape plus one dim (PyTorch's rule).
    let n = a.shape()[a.dim() - 1];
    let vector = left && (b.dim() == 1 || (b.dim() == a.dim() - 1 && b.shape() == &a.shape()[..a.dim() - 1]));
    let b2 = if vector { super::super::ops::reshape(b, &b.shape().iter().copied().chain([1]).collect::<Vec<_>>())? } else { b.clone() };
    with_real!(op, a.dtype(), T => {
        let am = matrices::<T>(op, a, true)?;
        let bm = matrices::<T>(op, &b2, false)?;
        let (rows, cols) = (b2.shape()[b2.dim() - 2] as usize, b2.shape()[b2.dim() - 1] as usize);
        if (left && rows as i64 != n) || (!left && cols as i64 != n) {
            crate::bail!(E_SHAPE, "{op}: Incompatible shapes of A and B for the equation {} ({} and {})", if left { "AX = B" } else { "XA = B" }, fmt(a.shape()), fmt(b.shape()));
        }
        let (lead, pairs) = broadcast_pair(op, &am, &bm)?;
        let mut lus = Vec::with_capacity(am.mats.len());
        for (k, m) in am.mats.iter().enumerate() {
            lus.push(lu_checked(op, &am.lead, k, m, "The solver failed because the input matrix is singular.")?);
        }
        // X = A⁻¹B, or B A⁻¹ (Aᵀ Xᵀ = Bᵀ).
        let solve_one = |lu: &faer::linalg::solvers::PartialPivLu<T>, rhs: &Mat<T>, transposed: bool| -> Mat<T> {
            let mut x = rhs.clone();
            if transposed { lu.solve_transpose_in_place(x.as_mut()) } else { lu.solve_in_place(x.as_mut()) }
            x
        };
        let xs: Vec<Mat<T>> = pairs.iter().map(|&(i, j)| if left { solve_one(&lus[i], &bm.mats[j], false) } else { solve_one(&lus[i], &bm.mats[j].transpose().to_owned(), true).transpose().to_owned() }).collect();
        let out = assemble(&lead, &xs, rows, cols)?;
        let out = if vector { super::super::ops::reshape(&out, &out.shape()[..out.dim() - 1].to_vec())? } else { out };
        let (a_lead, b_lead, nn) = (am.lead.clone(), bm.lead.clone(), n as usize);
        let b_shape = b.shape().to_vec();
        Ok(vec![record(out, "LinalgSolveExBackward0", &[a, b], move |g| {
            let g = if vector { super::super::ops::reshape(g, &g.shape().iter().copied().chain([1]).collect::<Vec<_>>())? } else { g.clone() };
            let gm = matrices::<T>(op, &g, false)?;
            let mut ga: Vec<Mat<T>> = vec![Mat::zeros(nn, nn); lus.len()];
            let mut gb: Vec<Mat<T>> = vec![Mat::zeros(rows, cols); bm.mats.len()];
            for (k, &(i, j)) in pairs.iter().enumerate() {
                // gB = A⁻ᴴ gX (left), gX A⁻ᴴ (right); gA = -gB Xᴴ (left), -Xᴴ gB (right).
                let gbk = if left { solve_one(&lus[i], &gm.mats[k], true) } else { solve_one(&lus[i], &gm.mats[k].transpose().to_owned(), false).transpose().to_owned() };
                let gak = if left { -(gbk.as_ref() * xs[k].as_ref().transpose()) } else { -(xs[k].as_ref().transpose() * gbk.as_ref()) };
                ga[i] = &ga[i] + &gak;
                gb[j] = &gb[j] + &gbk;
            }
            let gb = assemble(&b_lead, &gb, rows, cols)?;
            let gb = if vector { super::super::ops::reshape(&gb, &b_shape)? } else { gb };
            Ok(vec![Some(assemble(&a_lead, &ga, nn, nn)?), Some(gb)])
        })])
    })
}

/// The sign of the row permutation of `m`'s LU.
fn parity<T: Real>(lu: &faer::linalg::solvers::PartialPivLu<T>) -> T {
    let (fwd, _) = lu.P().arrays();
    let n = fwd.len();
    // The permutation's parity: n minus its number of cycles.
    let mut seen = vec![false; n];
    let mut swaps = 0usize;
    for s in 0..n {
        let mut k = s;
        let mut len = 0usize;
        while !seen[k] {
            seen[k] = true;
            k = fwd[k];
            len += 1;
        }
        swaps += len.saturating_sub(1);
    }
    if swaps % 2 == 0 {
        T::c(1.0)
    } else {
        -T::c(1.0)
    }
}

/// `det(m)` as the product of its LU's pivots: exactly 0 for a singular
/// matrix (faer's `determinant` gives NaN there).
fn det_of<T: Real>(m: &Mat<T>) -> T {
    if m.nrows() == 0 {
        return T::c(1.0);
    }
    let lu = m.as_ref().partial_piv_lu();
    let u = lu.U();
    // A zero pivot makes the rest of faer's U NaN (0/0), where LAPACK skips the
    // division: the determinant is 0 from the first one on.
    let mut det = parity(&lu);
    for k in 0..m.nrows() {
        if u[(k, k)] == T::c(0.0) {
            return T::c(0.0);
        }
        det = det * u[(k, k)];
    }
    det
}

/// Sign and log|det| of each matrix from its LU (a singular one: sign 0, log|det| -inf).
fn slogdet_of<T: Real>(m: &Mat<T>) -> (T, T, Option<Mat<T>>) {
    let n = m.nrows();
    if n == 0 {
        return (T::c(1.0), T::c(0.0), Some(Mat::zeros(0, 0)));
    }
    let lu = m.as_ref().partial_piv_lu();
    let u = lu.U();
    let mut sign = parity(&lu);
    let mut log = T::c(0.0);
    for k in 0..n {
        let d = u[(k, k)];
        if d == T::c(0.0) {
            return (T::c(0.0), T::c(f64::NEG_INFINITY), None);
        }
        if d < T::c(0.0) {
            sign = -sign;
        }
        log = log + d.abs().ln();
    }
    (sign, log, Some(lu.inverse()))
}

fn slogdet(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let a = input(ins, 0);
    let op = "linalg.slogdet";
    with_real!(op, a.dtype(), T => {
        let am = matrices::<T>(op, a, true)?;
        let n = a.shape()[a.dim() - 1] as usize;
        let parts: Vec<(T, T, Option<Mat<T>>)> = am.mats.iter().map(slogdet_of).collect();
        let signs: Vec<T> = parts.iter().map(|p| p.0).collect();
        let logs: Vec<T> = parts.iter().map(|p| p.1).collect();
        let sign = assemble_vec(&am.lead, &[], &signs)?;
        let logabs = assemble_vec(&am.lead, &[], &logs)?;
        let lead = am.lead;
        let logabs = record(logabs, "LinalgSlogdetBackward0", &[a], move |g| {
            let gv = super::real::<T>(g)?;
            let gv = gv.slice::<T>();
            // d log|det A| = A⁻ᵀ (a singular matrix: its pseudo-inverse's limit is infinite; PyTorch gives inf/nan too).
            let ga: Vec<Mat<T>> = parts.iter().zip(gv).map(|(p, &gk)| match &p.2 {
                Some(inv) => Mat::from_fn(n, n, |i, j| gk * inv[(j, i)]),
                None => Mat::from_fn(n, n, |_, _| T::c(f64::NAN)),
            }).collect();
            Ok(vec![Some(assemble(&lead, &ga, n, n)?)])
        });
        Ok(vec![sign, logabs])
    })
}

fn det(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let a = input(ins, 0);
    let op = "linalg.det";
    with_real!(op, a.dtype(), T => {
        let am = matrices::<T>(op, a, true)?;
        let n = a.shape()[a.dim() - 1] as usize;
        let dets: Vec<T> = am.mats.iter().map(det_of).collect();
        let out = assemble_vec(&am.lead, &[], &dets)?;
        let (lead, mats) = (am.lead, am.mats);
        Ok(vec![record(out, "LinalgDetBackward0", &[a], move |g| {
            let gv = super::real::<T>(g)?;
            let gv = gv.slice::<T>();
            // d det A = det(A) A⁻ᵀ = adj(A)ᵀ; through the SVD where A is singular
            // (adj(A) = V diag(∏_{j≠i} s_j) Uᵀ · det(U) det(V)), as PyTorch does.
            let ga: Vec<Mat<T>> = mats.iter().zip(gv).zip(&dets).map(|((m, &gk), &d)| {
                let adj_t = if d != T::c(0.0) {
                    let inv = m.as_ref().partial_piv_lu().inverse();
                    Mat::from_fn(n, n, |i, j| d * inv[(j, i)])
                } else {
                    cofactor_by_svd(m)
                };
                Mat::from_fn(n, n, |i, j| gk * adj_t[(i, j)])
            }).collect();
            Ok(vec![Some(assemble(&lead, &ga, n, n)?)])
        })])
    })
}

/// The cofactor matrix adj(A)ᵀ of a singular `m`, through its SVD.
fn cofactor_by_svd<T: Real>(m: &Mat<T>) -> Mat<T> {
    let n = m.nrows();
    let Ok(svd) = m.as_ref().svd() else { return Mat::from_fn(n, n, |_, _| T::c(f64::NAN)) };
    let (u, s, v) = (svd.U(), svd.S().column_vector(), svd.V());
    let sign = |q: MatRef<'_, T>| if q.determinant() < T::c(0.0) { -T::c(1.0) } else { T::c(1.0) };
    let c = sign(u) * sign(v);
    // adj(A) = det(U)det(V) · V diag(∏_{j≠i} s_j) Uᵀ; its transpose is U diag(...) Vᵀ.
    let prod: Vec<T> = (0..n).map(|i| (0..n).filter(|&j| j != i).fold(T::c(1.0), |p, j| p * s[j])).collect();
    Mat::from_fn(n, n, |i, j| (0..n).fold(T::c(0.0), |acc, k| acc + u[(i, k)] * prod[k] * v[(j, k)]) * c)
}

// ---------------------------------------------------------------------- eigh

pub(super) fn eigh_of<T: Real>(op: &str, x: &Raw, uplo: &str) -> Result<(Batch<T>, Vec<Vec<T>>, Vec<Mat<T>>)> {
    let side = match uplo {
        "L" | "l" => Side::Lower,
        "U" | "u" => Side::Upper,
        _ => crate::bail!(E_INVALID_ARG, "{op}: Expected UPLO argument to be 'L' or 'U', but got {uplo}"),
    };
    let a = matrices::<T>(op, x, true)?;
    let mut vals = Vec::with_capacity(a.mats.len());
    let mut vecs = Vec::with_capacity(a.mats.len());
    for (b, m) in a.mats.iter().enumerate() {
        match m.as_ref().self_adjoint_eigen(side) {
            Ok(e) => {
                vals.push(e.S().column_vector().iter().copied().collect::<Vec<T>>());
                vecs.push(e.U().to_owned());
            }
            Err(_) => crate::bail!(E_LINALG, "{} The algorithm failed to converge because the input matrix is ill-conditioned or has too many repeated eigenvalues.", at(op, &a.lead, b)),
        }
    }
    Ok((a, vals, vecs))
}

/// PyTorch's `linalg_eig_backward` for a symmetric input:
/// `gA = V (skew(Vᵀ gV) / E + diag(gL)) Vᵀ`, with `E_ij = λ_j - λ_i`.
fn eigh_back<T: Real>(l: &[T], v: &Mat<T>, gl: Option<&[T]>, gv: Option<&Mat<T>>) -> Mat<T> {
    let n = l.len();
    let half = T::c(0.5);
    let mut inner = match gv {
        Some(gv) => {
            let vg = v.as_ref().transpose() * gv.as_ref();
            Mat::from_fn(n, n, |i, j| if i == j { T::c(0.0) } else { half * (vg[(i, j)] - vg[(j, i)]) / (l[j] - l[i]) })
        }
        None => Mat::zeros(n, n),
    };
    if let Some(gl) = gl {
        for i in 0..n {
            inner[(i, i)] = inner[(i, i)] + gl[i];
        }
    }
    v.as_ref() * inner.as_ref() * v.as_ref().transpose()
}

fn eigh(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.eigh";
    let uplo = call.str("UPLO").unwrap_or("L").to_string();
    with_real!(op, x.dtype(), T => {
        let (a, vals, vecs) = eigh_of::<T>(op, x, &uplo)?;
        let n = x.shape()[x.dim() - 1] as usize;
        let flat: Vec<T> = vals.iter().flatten().copied().collect();
        let l = assemble_vec(&a.lead, &[n as i64], &flat)?;
        let v = assemble(&a.lead, &vecs, n, n)?;
        // gA is linear in (gL, gV): each output's node adds its own part.
        let parts = std::sync::Arc::new((a.lead, vals, vecs));
        let for_v = parts.clone();
        let l = record(l, "LinalgEighBackward0", &[x], move |g| {
            let (lead, vals, vecs) = &*parts;
            let gl = super::real::<T>(g)?.slice::<T>().to_vec();
            let ga: Vec<Mat<T>> = (0..vals.len()).map(|k| eigh_back(&vals[k], &vecs[k], Some(&gl[k * n..(k + 1) * n]), None)).collect();
            Ok(vec![Some(assemble(lead, &ga, n, n)?)])
        });
        let v = record(v, "LinalgEighBackward0", &[x], move |g| {
            let (lead, vals, vecs) = &*for_v;
            let gv = matrices::<T>(op, g, true)?;
            let ga: Vec<Mat<T>> = (0..vals.len()).map(|k| eigh_back(&vals[k], &vecs[k], None, Some(&gv.mats[k]))).collect();
            Ok(vec![Some(assemble(lead, &ga, n, n)?)])
        });
        Ok(vec![l, v])
    })
}

fn eigvalsh(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.eigvalsh";
    let uplo = call.str("UPLO").unwrap_or("L").to_string();
    with_real!(op, x.dtype(), T => {
        let (a, vals, vecs) = eigh_of::<T>(op, x, &uplo)?;
        let n = x.shape()[x.dim() - 1] as usize;
        let flat: Vec<T> = vals.iter().flatten().copied().collect();
        let out = assemble_vec(&a.lead, &[n as i64], &flat)?;
        let lead = a.lead;
        Ok(vec![record(out, "LinalgEighBackward0", &[x], move |g| {
            let gl = super::real::<T>(g)?.slice::<T>().to_vec();
            let ga: Vec<Mat<T>> = (0..vals.len()).map(|k| eigh_back(&vals[k], &vecs[k], Some(&gl[k * n..(k + 1) * n]), None)).collect();
            Ok(vec![Some(assemble(&lead, &ga, n, n)?)])
        })])
    })
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("linalg_cholesky", cholesky),
    ("linalg_solve_triangular", solve_triangular),
    ("linalg_solve", solve),
    ("linalg_inv", inv),
    ("linalg_det", det),
    ("linalg_slogdet", slogdet),
    ("linalg_eigh", eigh),
    ("linalg_eigvalsh", eigvalsh),
];

