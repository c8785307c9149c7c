//! Native kernels of `torch.linalg`'s SVD family and what is built on it
//! (`svd`, `svdvals`, `pinv`, `lstsq`, `matrix_norm`), `qr` and
//! `matrix_exp`, on faer, with PyTorch's backward formulas
//! (`FunctionsManual.cpp`: `svd_backward`, `linalg_qr_backward`,
//! `pinv_backward`, `linalg_lstsq_backward`, `linalg_matrix_exp_differential`).
//! Shapes and batching follow `dense.rs`.

use std::sync::Arc;

use faer::linalg::solvers::Solve;
use faer::{Mat, MatRef, Side};

use super::super::autograd::record;
use super::super::elem::match_elem;
use super::super::tensor::Raw;
use super::dense::{assemble, assemble_vec, at, broadcast_pair, matrices, solve_tri, triu, with_real, Batch, Real};
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::Call;

fn f64_of<T: Real>(v: T) -> f64 {
    num_traits::ToPrimitive::to_f64(&v).unwrap_or(f64::NAN)
}

fn eps<T: Real>() -> f64 {
    f64_of(<T as num_traits::Float>::epsilon())
}

fn dt_of<T: Real>() -> DType {
    T::DT
}

fn t<T: Real>(m: &Mat<T>) -> Mat<T> {
    m.as_ref().transpose().to_owned()
}

fn mm<T: Real>(a: &Mat<T>, b: &Mat<T>) -> Mat<T> {
    a.as_ref() * b.as_ref()
}

fn cols<T: Real>(m: &Mat<T>, from: usize, to: usize) -> Mat<T> {
    m.as_ref().subcols(from, to - from).to_owned()
}

fn rows<T: Real>(m: &Mat<T>, from: usize, to: usize) -> Mat<T> {
    m.as_ref().subrows(from, to - from).to_owned()
}

/// One matrix's SVD: `U` (m×k, or m×m when `full`), `S` descending, `Vᴴ` (k×n or n×n).
struct Svd<T: Real> {
    u: Mat<T>,
    s: Vec<T>,
    vh: Mat<T>,
}

fn svd_one<T: Real>(op: &str, lead: &[i64], b: usize, m: &Mat<T>, full: bool) -> Result<Svd<T>> {
    let (r, c) = (m.nrows(), m.ncols());
    if r.min(c) == 0 {
        // LAPACK's convention for an empty side: the full factors are identities.
        let (ur, vc) = if full { (r, c) } else { (0, 0) };
        return Ok(Svd { u: Mat::identity(r, ur), s: Vec::new(), vh: Mat::identity(vc, c) });
    }
    let f = if full { m.as_ref().svd() } else { m.as_ref().thin_svd() };
    match f {
        Ok(f) => Ok(Svd { u: f.U().to_owned(), s: f.S().column_vector().iter().copied().collect(), vh: f.V().transpose().to_owned() }),
        Err(_) => crate::bail!(E_LINALG, "{} The algorithm failed to converge because the input matrix is ill-conditioned or has too many repeated singular values.", at(op, lead, b)),
    }
}

fn svds<T: Real>(op: &str, a: &Batch<T>, full: bool) -> Result<Vec<Svd<T>>> {
    a.mats.iter().enumerate().map(|(b, m)| svd_one(op, &a.lead, b, m, full)).collect()
}

/// PyTorch's `svd_backward` on the thin factors (a full `U`/`Vᴴ` and its
/// gradient narrowed to the first k columns/rows first, as PyTorch does):
/// `gA = U [(skew(Uᴴ gU) S + S skew(Vᴴ gV)) / E + diag(gS)] Vᴴ` plus the
/// projections of `gU` and `gV` off the range when the matrix is not square,
/// with `E_ij = s_j² - s_i²` (so repeated singular values give inf/nan, as there).
fn svd_back<T: Real>(f: &Svd<T>, gu: Option<&Mat<T>>, gs: Option<&[T]>, gvh: Option<&Mat<T>>) -> Mat<T> {
    let k = f.s.len();
    let (m, n) = (f.u.nrows(), f.vh.ncols());
    let u = cols(&f.u, 0, k);
    let vh = rows(&f.vh, 0, k);
    let gu = gu.map(|g| cols(g, 0, k));
    let gvh = gvh.map(|g| rows(g, 0, k));
    let s = &f.s;
    let mut inner = Mat::<T>::zeros(k, k);
    let e = |i: usize, j: usize| if i == j { T::c(1.0) } else { s[j] * s[j] - s[i] * s[i] };
    if let Some(gu) = &gu {
        let x = mm(&t(&u), gu);
        for i in 0..k {
            for j in 0..k {
                if i != j {
                    inner[(i, j)] = inner[(i, j)] + (x[(i, j)] - x[(j, i)]) / e(i, j) * s[j];
                }
            }
        }
    }
    if let Some(gvh) = &gvh {
        // skew(Vᴴ gV) with gV = gVhᴴ.
        let x = mm(&vh, &t(gvh));
        for i in 0..k {
            for j in 0..k {
                if i != j {
                    inner[(i, j)] = inner[(i, j)] + s[i] * ((x[(i, j)] - x[(j, i)]) / e(i, j));
                }
            }
        }
    }
    if let Some(gs) = gs {
        for i in 0..k {
            inner[(i, i)] = inner[(i, i)] + gs[i];
        }
    }
    match (&gu, &gvh) {
        (Some(gu), _) if m > n => {
            let mut ga = mm(&u, &inner);
            let gus = Mat::from_fn(m, k, |i, j| gu[(i, j)] / s[j]);
            let proj = mm(&u, &mm(&t(&u), &gus));
            ga = Mat::from_fn(m, k, |i, j| ga[(i, j)] + gus[(i, j)] - proj[(i, j)]);
            mm(&ga, &vh)
        }
        (_, Some(gvh)) if m < n => {
            let mut ga = mm(&inner, &vh);
            let sgvh = Mat::from_fn(k, n, |i, j| gvh[(i, j)] / s[i]);
            let proj = mm(&mm(&sgvh, &t(&vh)), &vh);
            ga = Mat::from_fn(k, n, |i, j| ga[(i, j)] + sgvh[(i, j)] - proj[(i, j)]);
            mm(&u, &ga)
        }
        _ => mm(&u, &mm(&inner, &vh)),
    }
}

fn svd(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.svd";
    let full = call.bool("full_matrices").unwrap_or(true);
    with_real!(op, x.dtype(), T => {
        let a = matrices::<T>(op, x, false)?;
        let (m, n) = (x.shape()[x.dim() - 2] as usize, x.shape()[x.dim() - 1] as usize);
        let k = m.min(n);
        let fs = svds(op, &a, full)?;
        let (ur, vr) = if full { (m, n) } else { (k, k) };
        let u = assemble(&a.lead, &fs.iter().map(|f| f.u.clone()).collect::<Vec<_>>(), m, ur)?;
        let flat: Vec<T> = fs.iter().flat_map(|f| f.s.iter().copied()).collect();
        let s = assemble_vec(&a.lead, &[k as i64], &flat)?;
        let vh = assemble(&a.lead, &fs.iter().map(|f| f.vh.clone()).collect::<Vec<_>>(), vr, n)?;
        // gA is linear in (gU, gS, gVh): each output's node adds its own part.
        let parts = Arc::new((a.lead, fs));
        let (p_s, p_vh) = (parts.clone(), parts.clone());
        let u = record(u, "LinalgSvdBackward0", &[x], move |g| {
            let (lead, fs) = &*parts;
            let gm = matrices::<T>(op, g, false)?;
            let ga: Vec<Mat<T>> = fs.iter().zip(&gm.mats).map(|(f, gu)| svd_back(f, Some(gu), None, None)).collect();
            Ok(vec![Some(assemble(lead, &ga, m, n)?)])
        });
        let s = record(s, "LinalgSvdBackward0", &[x], move |g| {
            let (lead, fs) = &*p_s;
            let gs = super::real::<T>(g)?.slice::<T>().to_vec();
            let ga: Vec<Mat<T>> = fs.iter().enumerate().map(|(b, f)| svd_back(f, None, Some(&gs[b * k..(b + 1) * k]), None)).collect();
            Ok(vec![Some(assemble(lead, &ga, m, n)?)])
        });
        let vh = record(vh, "LinalgSvdBackward0", &[x], move |g| {
            let (lead, fs) = &*p_vh;
            let gm = matrices::<T>(op, g, false)?;
            let ga: Vec<Mat<T>> = fs.iter().zip(&gm.mats).map(|(f, gvh)| svd_back(f, None, None, Some(gvh))).collect();
            Ok(vec![Some(assemble(lead, &ga, m, n)?)])
        });
        Ok(vec![u, s, vh])
    })
}

fn svdvals(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.svdvals";
    with_real!(op, x.dtype(), T => {
        let a = matrices::<T>(op, x, false)?;
        let (m, n) = (x.shape()[x.dim() - 2] as usize, x.shape()[x.dim() - 1] as usize);
        let k = m.min(n);
        let fs = svds(op, &a, false)?;
        let flat: Vec<T> = fs.iter().flat_map(|f| f.s.iter().copied()).collect();
        let s = assemble_vec(&a.lead, &[k as i64], &flat)?;
        let lead = a.lead;
        Ok(vec![record(s, "LinalgSvdBackward0", &[x], move |g| {
            let gs = super::real::<T>(g)?.slice::<T>().to_vec();
            let ga: Vec<Mat<T>> = fs.iter().enumerate().map(|(b, f)| svd_back(f, None, Some(&gs[b * k..(b + 1) * k]), None)).collect();
            Ok(vec![Some(assemble(&lead, &ga, m, n)?)])
        })])
    })
}

// ---------------------------------------------------------------------- pinv

/// The cut-off of `pinv`/`lstsq`: `max(atol, rtol · σ_max)`, with PyTorch's
/// defaults (no tolerance given: `rtol = eps · max(m, n)`).
fn cutoff<T: Real>(atol: Option<f64>, rtol: Option<f64>, m: usize, n: usize, top: T) -> T {
    let eps = T::epsilon();
    let rtol = match (atol, rtol) {
        (_, Some(r)) => T::c(r),
        (None, None) => eps * T::c(m.max(n) as f64),
        (Some(_), None) => T::c(0.0),
    };
    let atol = T::c(atol.unwrap_or(0.0));
    if atol > rtol * top {
        atol
    } else {
        rtol * top
    }
}

fn pinv_one<T: Real>(op: &str, lead: &[i64], b: usize, a: &Mat<T>, atol: Option<f64>, rtol: Option<f64>, hermitian: bool) -> Result<(Mat<T>, usize, Vec<T>)> {
    let (m, n) = (a.nrows(), a.ncols());
    if m.min(n) == 0 {
        return Ok((Mat::zeros(n, m), 0, Vec::new()));
    }
    if hermitian {
        let e = match a.as_ref().self_adjoint_eigen(Side::Lower) {
            Ok(e) => e,
            Err(_) => crate::bail!(E_LINALG, "{} The algorithm failed to converge because the input matrix is ill-conditioned or has too many repeated eigenvalues.", at(op, lead, b)),
        };
        let l: Vec<T> = e.S().column_vector().iter().copied().collect();
        let top = l.iter().fold(T::c(0.0), |acc, v| if v.abs() > acc { v.abs() } else { acc });
        let tol = cutoff(atol, rtol, m, n, top);
        let inv: Vec<T> = l.iter().map(|&v| if v.abs() > tol { T::c(1.0) / v } else { T::c(0.0) }).collect();
        let u = e.U();
        let rank = inv.iter().filter(|v| **v != T::c(0.0)).count();
        return Ok((Mat::from_fn(n, n, |i, j| (0..n).fold(T::c(0.0), |acc, k| acc + u[(i, k)] * inv[k] * u[(j, k)])), rank, l));
    }
    let f = svd_one(op, lead, b, a, false)?;
    let tol = cutoff(atol, rtol, m, n, f.s[0]);
    let k = f.s.len();
    let inv: Vec<T> = f.s.iter().map(|&v| if v > tol { T::c(1.0) / v } else { T::c(0.0) }).collect();
    let rank = inv.iter().filter(|v| **v != T::c(0.0)).count();
    // V diag(1/s) Uᴴ
    let vs = Mat::from_fn(n, k, |i, j| f.vh[(j, i)] * inv[j]);
    Ok((mm(&vs, &t(&f.u)), rank, f.s))
}

/// PyTorch's `pinv_backward` (the derivative where the rank is locally constant).
fn pinv_back<T: Real>(g: &Mat<T>, p: &Mat<T>, a: &Mat<T>) -> Mat<T> {
    let (m, n) = (a.nrows(), a.ncols());
    let (ph, gh) = (t(p), t(g));
    if m <= n {
        let k = mm(&gh, p);
        let kph = mm(&k, &ph);
        let t1 = t(&mm(p, &k));
        let t3 = mm(&mm(a, p), &kph);
        let t4 = mm(&mm(&ph, p), &(&gh - &mm(&k, a)));
        Mat::from_fn(m, n, |i, j| -t1[(i, j)] + kph[(i, j)] - t3[(i, j)] + t4[(i, j)])
    } else {
        let k = mm(p, &gh);
        let phk = mm(&ph, &k);
        let t1 = t(&mm(&k, p));
        let t2 = mm(&mm(&(&gh - &mm(a, &k)), p), &ph);
        let t4 = mm(&mm(&phk, p), a);
        Mat::from_fn(m, n, |i, j| -t1[(i, j)] + t2[(i, j)] + phk[(i, j)] - t4[(i, j)])
    }
}

fn pinv(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.pinv";
    let (atol, rtol) = (call.float("atol"), call.float("rtol"));
    let hermitian = call.bool("hermitian").unwrap_or(false);
    with_real!(op, x.dtype(), T => {
        let a = matrices::<T>(op, x, hermitian)?;
        let (m, n) = (x.shape()[x.dim() - 2] as usize, x.shape()[x.dim() - 1] as usize);
        let ps: Vec<Mat<T>> = a.mats.iter().enumerate().map(|(b, mat)| pinv_one(op, &a.lead, b, mat, atol, rtol, hermitian).map(|r| r.0)).collect::<Result<_>>()?;
        let out = assemble(&a.lead, &ps, n, m)?;
        Ok(vec![record(out, "LinalgPinvBackward0", &[x], move |g| {
            let gm = matrices::<T>(op, g, false)?;
            let ga: Vec<Mat<T>> = ps.iter().zip(&a.mats).zip(&gm.mats).map(|((p, am), g)| pinv_back(g, p, am)).collect();
            Ok(vec![Some(assemble(&a.lead, &ga, m, n)?)])
        })])
    })
}

// --------------------------------------------------------------------- lstsq

/// `linalg.lstsq` as the minimum-norm solution `pinv(A) B` with the cut-off
/// `rcond · σ_max`; the outputs each driver fills, as PyTorch's CPU kernels
/// fill them: `rank` (all but `gels`), `singular_values` (`gelsd`, `gelss`),
/// `residuals` (m > n, not `gelsy`; for `gelsd`/`gelss` only when every
/// matrix has full rank). The others are empty.
fn lstsq(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (a, b) = (input(ins, 0), input(ins, 1));
    let op = "linalg.lstsq";
    // Core checked the driver's name (vocab::linalg_args).
    let driver = call.str("driver").unwrap_or("gelsy").to_string();
    let rcond = call.float("rcond");
    let vector = b.dim() == 1 || (b.dim() + 1 == a.dim() && b.shape() == &a.shape()[..a.dim() - 1]);
    let b2 = if vector { super::super::ops::reshape(b, &b.shape().iter().copied().chain([1]).collect::<Vec<_>>())? } else { b.clone() };
    with_real!(op, a.dtype(), T => {
        let am = matrices::<T>(op, a, false)?;
        let bm = matrices::<T>(op, &b2, false)?;
        let (m, n) = (a.shape()[a.dim() - 2] as usize, a.shape()[a.dim() - 1] as usize);
        let nrhs = b2.shape()[b2.dim() - 1] as usize;
        let (lead, pairs) = broadcast_pair(op, &am, &bm)?;
        let mut pinvs = Vec::with_capacity(am.mats.len());
        let mut ranks = Vec::with_capacity(am.mats.len());
        let mut svals: Vec<T> = Vec::new();
        for (k, mat) in am.mats.iter().enumerate() {
            // lstsq's rcond is a relative cut-off only (atol 0).
            let (p, rank, s) = pinv_one(op, &am.lead, k, mat, Some(0.0), Some(rcond.unwrap_or_else(|| eps::<T>() * m.max(n) as f64)), false)?;
            pinvs.push(p);
            ranks.push(rank as i64);
            svals.extend(s);
        }
        let xs: Vec<Mat<T>> = pairs.iter().map(|&(i, j)| mm(&pinvs[i], &bm.mats[j])).collect();
        let sol = assemble(&lead, &xs, n, nrhs)?;
        let sol = if vector { super::super::ops::reshape(&sol, &sol.shape()[..sol.dim() - 1].to_vec())? } else { sol };
        let full_rank = ranks.iter().all(|&r| r as usize == n);
        let residuals = if m > n && (driver == "gels" || (driver != "gelsy" && full_rank)) {
            let res: Vec<T> = pairs.iter().zip(&xs).flat_map(|(&(i, j), x)| {
                let r = &mm(&am.mats[i], x) - &bm.mats[j];
                (0..nrhs).map(move |c| (0..m).fold(T::c(0.0), |acc, row| acc + r[(row, c)] * r[(row, c)])).collect::<Vec<_>>()
            }).collect();
            // One per column of B (one for a vector B too, as PyTorch gives).
            assemble_vec(&lead, &[nrhs as i64], &res)?
        } else {
            Raw::empty(&[0], dt_of::<T>())?
        };
        let rank = if driver == "gels" {
            Raw::empty(&[0], DType::I64)?
        } else {
            let r = Raw::empty(&am.lead, DType::I64)?;
            r.slice_mut::<i64>().copy_from_slice(&ranks);
            r
        };
        let sv = if driver == "gelsd" || driver == "gelss" {
            assemble_vec(&am.lead, &[m.min(n) as i64], &svals)?
        } else {
            Raw::empty(&[0], dt_of::<T>())?
        };
        let (a_lead, b_lead, b_shape) = (am.lead.clone(), bm.lead.clone(), b.shape().to_vec());
        let sol = record(sol, "LinalgLstsqBackward0", &[a, b], move |g| {
            // PyTorch's linalg_lstsq_backward: gA through pinv_backward with g = gX Bᴴ, gB = pinv(A)ᴴ gX.
            let g = if vector { super::super::ops::reshape(g, &g.shape().iter().copied().chain([1]).collect::<Vec<_>>())? } else { g.clone() };
            let gm = matrices::<T>(op, &g, false)?;
            let mut ga: Vec<Mat<T>> = vec![Mat::zeros(m, n); am.mats.len()];
            let mut gb: Vec<Mat<T>> = vec![Mat::zeros(m, nrhs); bm.mats.len()];
            for (k, &(i, j)) in pairs.iter().enumerate() {
                let gp = mm(&gm.mats[k], &t(&bm.mats[j]));
                ga[i] = &ga[i] + &pinv_back(&gp, &pinvs[i], &am.mats[i]);
                gb[j] = &gb[j] + &mm(&t(&pinvs[i]), &gm.mats[k]);
            }
            let gb = assemble(&b_lead, &gb, m, nrhs)?;
            let gb = if vector { super::super::ops::reshape(&gb, &b_shape)? } else { gb };
            Ok(vec![Some(assemble(&a_lead, &ga, m, n)?), Some(gb)])
        });
        Ok(vec![sol, residuals, rank, sv])
    })
}

// ------------------------------------------------------------------------ qr

/// `linalg_qr_backward` for `A = QR` with m ≥ n (Q m×n, R n×n):
/// `gA = (gQ + Q syminvadj(triu(gR Rᴴ - Qᴴ gQ))) R⁻ᴴ`.
fn qr_back_tall<T: Real>(q: &Mat<T>, r: &Mat<T>, gq: Option<&Mat<T>>, gr: Option<&Mat<T>>) -> Mat<T> {
    let k = r.nrows();
    let mut x = Mat::<T>::zeros(k, k);
    if let Some(gr) = gr {
        x = &x + &mm(gr, &t(r));
    }
    if let Some(gq) = gq {
        x = &x - &mm(&t(q), gq);
    }
    triu(&mut x, 0);
    let sym = Mat::from_fn(k, k, |i, j| if i == j { x[(i, i)] } else { x[(i, j)] + x[(j, i)] });
    let mut ga = mm(q, &sym);
    if let Some(gq) = gq {
        ga = &ga + gq;
    }
    // X Rᴴ = gA: a right solve with the lower-triangular Rᴴ.
    solve_tri(r.as_ref().transpose(), &ga, false, false, false)
}

/// m < n: `A = [X Y]` with `X = Q R₁` square and `Y = Q R₂`, so
/// `gY = Q gR₂` and `gX` is the square case with `gQ + Y gR₂ᴴ`.
fn qr_back<T: Real>(a: &Mat<T>, q: &Mat<T>, r: &Mat<T>, gq: Option<&Mat<T>>, gr: Option<&Mat<T>>) -> Mat<T> {
    let (m, n) = (a.nrows(), a.ncols());
    if m >= n {
        return qr_back_tall(q, r, gq, gr);
    }
    let r1 = cols(r, 0, m);
    let gr1 = gr.map(|g| cols(g, 0, m));
    let (gq2, gy) = match gr {
        Some(g) => {
            let gr2 = cols(g, m, n);
            let y = cols(a, m, n);
            let gq2 = mm(&y, &t(&gr2));
            (Some(match gq { Some(gq) => gq + &gq2, None => gq2 }), mm(q, &gr2))
        }
        None => (gq.cloned(), Mat::zeros(m, n - m)),
    };
    let gx = qr_back_tall(q, &r1, gq2.as_ref(), gr1.as_ref());
    Mat::from_fn(m, n, |i, j| if j < m { gx[(i, j)] } else { gy[(i, j - m)] })
}

fn qr(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.qr";
    // Core checked the mode (vocab::linalg_args).
    let mode = call.str("mode").unwrap_or("reduced").to_string();
    with_real!(op, x.dtype(), T => {
        let a = matrices::<T>(op, x, false)?;
        let (m, n) = (x.shape()[x.dim() - 2] as usize, x.shape()[x.dim() - 1] as usize);
        let k = m.min(n);
        let complete = mode == "complete";
        let rr = if complete { m } else { k };
        let mut qs = Vec::with_capacity(a.mats.len());
        let mut rs = Vec::with_capacity(a.mats.len());
        for mat in &a.mats {
            if k == 0 {
                qs.push(Mat::identity(m, if complete { m } else { 0 }));
                rs.push(Mat::zeros(rr, n));
                continue;
            }
            let f = mat.as_ref().qr();
            // faer keeps min(m, n) rows of R; complete mode's R has m, the rest zero.
            let thin = f.thin_R();
            let mut r = Mat::from_fn(rr, n, |i, j| if i < k { thin[(i, j)] } else { T::c(0.0) });
            triu(&mut r, 0);
            qs.push(if complete { f.compute_Q() } else { f.compute_thin_Q() });
            rs.push(r);
        }
        let q = if mode == "r" { Raw::empty(&[0], dt_of::<T>())? } else { assemble(&a.lead, &qs, m, if complete { m } else { k })? };
        let r = assemble(&a.lead, &rs, rr, n)?;
        // The backward needs the thin factors; complete mode with m > n has none.
        let differentiable = mode == "reduced" || (complete && m <= n);
        let parts = Arc::new((a, qs, rs));
        let for_r = parts.clone();
        let refuse_r = move || -> Result<()> {
            if !differentiable {
                if mode == "r" {
                    crate::bail!(E_UNSUPPORTED, "{op}: The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.");
                }
                crate::bail!(E_UNSUPPORTED, "{op}: The QR decomposition is not differentiable when mode='complete' and nrows > ncols.");
            }
            Ok(())
        };
        let q = if differentiable {
            record(q, "LinalgQrBackward0", &[x], move |g| {
                let (a, qs, rs) = &*parts;
                let gm = matrices::<T>(op, g, false)?;
                let ga: Vec<Mat<T>> = (0..qs.len()).map(|b| qr_back(&a.mats[b], &qs[b], &rs[b], Some(&gm.mats[b]), None)).collect();
                Ok(vec![Some(assemble(&a.lead, &ga, m, n)?)])
            })
        } else {
            q
        };
        let r = record(r, "LinalgQrBackward0", &[x], move |g| {
            refuse_r()?;
            let (a, qs, rs) = &*for_r;
            let gm = matrices::<T>(op, g, false)?;
            let ga: Vec<Mat<T>> = (0..qs.len()).map(|b| qr_back(&a.mats[b], &qs[b], &rs[b], None, Some(&gm.mats[b]))).collect();
            Ok(vec![Some(assemble(&a.lead, &ga, m, n)?)])
        });
        Ok(vec![q, r])
    })
}

// --------------------------------------------------------------- matrix_norm

/// The matrix norms `torch.linalg.matrix_norm` takes (core refused the others).
#[derive(Clone, Copy, PartialEq)]
enum Ord {
    Fro,
    Nuc,
    /// ±2: the largest or smallest singular value.
    Spectral(bool),
    /// ±1: the largest or smallest column sum of |a|.
    Col(bool),
    /// ±inf: the largest or smallest row sum of |a|.
    Row(bool),
}

fn norm_ord(call: &Call) -> Result<Ord> {
    let op = "linalg.matrix_norm";
    if let Some(s) = call.str("ord") {
        return match s {
            "fro" => Ok(Ord::Fro),
            "nuc" => Ok(Ord::Nuc),
            _ => crate::bail!(E_INVALID_ARG, "{op}: Order {s} not supported."),
        };
    }
    let o = call.float("ord").unwrap_or(2.0);
    Ok(match o {
        v if v == 2.0 => Ord::Spectral(true),
        v if v == -2.0 => Ord::Spectral(false),
        v if v == 1.0 => Ord::Col(true),
        v if v == -1.0 => Ord::Col(false),
        v if v == f64::INFINITY => Ord::Row(true),
        v if v == f64::NEG_INFINITY => Ord::Row(false),
        v => crate::bail!(E_INVALID_ARG, "{op}: Order {v} not supported."),
    })
}

/// One matrix's norm and its gradient for an upstream 1 (ties share the
/// gradient equally, as `amax`/`amin` share it).
fn norm_one<T: Real>(op: &str, lead: &[i64], b: usize, a: &Mat<T>, ord: Ord) -> Result<(T, Mat<T>)> {
    let (m, n) = (a.nrows(), a.ncols());
    let zero = T::c(0.0);
    let sign = |v: T| if v > zero { T::c(1.0) } else if v < zero { -T::c(1.0) } else { zero };
    let pick = |vals: &[T], largest: bool| -> Result<(T, Vec<T>)> {
        if vals.is_empty() {
            crate::bail!(E_SHAPE, "{op}: Expected a non-empty matrix for this norm (the reduction has no identity)");
        }
        let best = vals.iter().copied().fold(vals[0], |acc, v| if (largest && v > acc) || (!largest && v < acc) || v.is_nan() { v } else { acc });
        let ties = vals.iter().filter(|&&v| v == best).count().max(1);
        Ok((best, vals.iter().map(|&v| if v == best { T::c(1.0) / T::c(ties as f64) } else { zero }).collect()))
    };
    Ok(match ord {
        Ord::Fro => {
            let s = (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).fold(zero, |acc, (i, j)| acc + a[(i, j)] * a[(i, j)]).sqrt();
            // PyTorch's norm backward: 0 where the norm is 0.
            (s, Mat::from_fn(m, n, |i, j| if s == zero { zero } else { a[(i, j)] / s }))
        }
        Ord::Nuc | Ord::Spectral(_) => {
            let f = svd_one(op, lead, b, a, false)?;
            let (v, gs) = match ord {
                Ord::Nuc => (f.s.iter().fold(zero, |acc, &v| acc + v), vec![T::c(1.0); f.s.len()]),
                Ord::Spectral(largest) => pick(&f.s, largest)?,
                _ => unreachable!(),
            };
            (v, svd_back(&f, None, Some(&gs), None))
        }
        Ord::Col(largest) => {
            let sums: Vec<T> = (0..n).map(|j| (0..m).fold(zero, |acc, i| acc + a[(i, j)].abs())).collect();
            let (v, w) = pick(&sums, largest)?;
            (v, Mat::from_fn(m, n, |i, j| w[j] * sign(a[(i, j)])))
        }
        Ord::Row(largest) => {
            let sums: Vec<T> = (0..m).map(|i| (0..n).fold(zero, |acc, j| acc + a[(i, j)].abs())).collect();
            let (v, w) = pick(&sums, largest)?;
            (v, Mat::from_fn(m, n, |i, j| w[i] * sign(a[(i, j)])))
        }
    })
}

fn matrix_norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.matrix_norm";
    let ord = norm_ord(call)?;
    let keepdim = call.bool("keepdim").unwrap_or(false);
    let dims = call.ints("dim").unwrap_or(&[-2, -1]).to_vec();
    let rank = x.dim();
    if dims.len() != 2 {
        crate::bail!(E_INVALID_ARG, "{op}: dim must be a 2-tuple. Got {}", crate::json::write_int_list(&dims));
    }
    let d0 = crate::vocab::norm_dim(op, dims[0], x.shape())? as usize;
    let d1 = crate::vocab::norm_dim(op, dims[1], x.shape())? as usize;
    if d0 == d1 {
        crate::bail!(E_INVALID_ARG, "{op}: dims must be different. Got ({}, {})", dims[0], dims[1]);
    }
    // The two dims moved last, as rows and columns.
    let order: Vec<usize> = (0..rank).filter(|&d| d != d0 && d != d1).chain([d0, d1]).collect();
    let moved = super::super::ops::clone_contiguous(&super::shape::permute_view(x, order.clone()))?;
    // Half inputs compute in fp32 and round once (PyTorch's reductions accumulate so);
    // the SVD-based norms take fp32 and fp64 only, as PyTorch's CPU SVD does.
    let dt = x.dtype();
    let half = matches!(dt, DType::F16 | DType::BF16);
    if half && matches!(ord, Ord::Nuc | Ord::Spectral(_)) {
        crate::bail!(E_DTYPE, "{op}: {} is not supported for the nuclear and spectral norms (they take fp32 and fp64)", dt.name());
    }
    let back = move |r: Raw| if half { super::super::ops::convert(&r, dt) } else { Ok(r) };
    with_real!(op, if half { DType::F32 } else { dt }, T => {
        let a = matrices::<T>(op, &moved, false)?;
        let (m, n) = (moved.shape()[rank - 2] as usize, moved.shape()[rank - 1] as usize);
        let parts: Vec<(T, Mat<T>)> = a.mats.iter().enumerate().map(|(b, mat)| norm_one(op, &a.lead, b, mat, ord)).collect::<Result<_>>()?;
        let vals: Vec<T> = parts.iter().map(|p| p.0).collect();
        let mut shape: Vec<i64> = a.lead.clone();
        if keepdim {
            shape = (0..rank).map(|d| if d == d0 || d == d1 { 1 } else { x.shape()[d] }).collect();
        }
        let out = back(assemble_vec(&[], &shape, &vals)?)?;
        let lead = a.lead.clone();
        Ok(vec![record(out, "LinalgMatrixNormBackward0", &[x], move |g| {
            let gv = super::real::<T>(g)?.slice::<T>().to_vec();
            let ga: Vec<Mat<T>> = parts.iter().zip(&gv).map(|((_, d), &gk)| Mat::from_fn(m, n, |i, j| gk * d[(i, j)])).collect();
            let moved_g = assemble(&lead, &ga, m, n)?;
            // Back to the input's dim order.
            let mut inverse = vec![0usize; rank];
            for (k, &d) in order.iter().enumerate() {
                inverse[d] = k;
            }
            Ok(vec![Some(back(super::super::ops::clone_contiguous(&super::shape::permute_view(&moved_g, inverse))?)?)])
        })])
    })
}

// ---------------------------------------------------------------- matrix_exp

/// exp(A) by scaling and squaring with the [13/13] Padé approximant
/// (Higham, "The scaling and squaring method for the matrix exponential
/// revisited", 2005), in fp64 whatever the input's dtype.
fn expm(a: &Mat<f64>) -> Mat<f64> {
    const B: [f64; 14] = [
        64764752532480000.0,
        32382376266240000.0,
        7771770303897600.0,
        1187353796428800.0,
        129060195264000.0,
        10559470521600.0,
        670442572800.0,
        33522128640.0,
        1323241920.0,
        40840800.0,
        960960.0,
        16380.0,
        182.0,
        1.0,
    ];
    const THETA13: f64 = 5.371920351148152;
    let n = a.nrows();
    if n == 0 {
        return Mat::zeros(0, 0);
    }
    let norm1 = (0..n).map(|j| (0..n).map(|i| a[(i, j)].abs()).sum::<f64>()).fold(0.0, f64::max);
    if !norm1.is_finite() {
        return Mat::from_fn(n, n, |_, _| f64::NAN);
    }
    let s = if norm1 > THETA13 { (norm1 / THETA13).log2().ceil() as i32 } else { 0 };
    let scale = 0.5f64.powi(s);
    let a = Mat::from_fn(n, n, |i, j| a[(i, j)] * scale);
    let a2 = &a * &a;
    let a4 = &a2 * &a2;
    let a6 = &a4 * &a2;
    let eye = |i: usize, j: usize| if i == j { 1.0 } else { 0.0 };
    let lin = |c6: f64, c4: f64, c2: f64, c0: f64| Mat::from_fn(n, n, |i, j| c6 * a6[(i, j)] + c4 * a4[(i, j)] + c2 * a2[(i, j)] + c0 * eye(i, j));
    let u_in = &a6 * &lin(B[13], B[11], B[9], 0.0) + lin(B[7], B[5], B[3], B[1]);
    let u = &a * &u_in;
    let v = &a6 * &lin(B[12], B[10], B[8], 0.0) + lin(B[6], B[4], B[2], B[0]);
    let p = &v + &u;
    let q = &v - &u;
    let mut r = p;
    q.as_ref().partial_piv_lu().solve_in_place(r.as_mut());
    for _ in 0..s {
        r = &r * &r;
    }
    r
}

fn to_f64<T: Real>(m: MatRef<'_, T>) -> Mat<f64> {
    Mat::from_fn(m.nrows(), m.ncols(), |i, j| f64_of(m[(i, j)]))
}

fn from_f64<T: Real>(m: &Mat<f64>) -> Mat<T> {
    Mat::from_fn(m.nrows(), m.ncols(), |i, j| T::c(m[(i, j)]))
}

fn matrix_exp(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.matrix_exp";
    // Half inputs compute in fp64 like the others and round once.
    let dt = x.dtype();
    let half = matches!(dt, DType::F16 | DType::BF16);
    let back = move |r: Raw| if half { super::super::ops::convert(&r, dt) } else { Ok(r) };
    with_real!(op, if half { DType::F32 } else { dt }, T => {
        let a = matrices::<T>(op, x, true)?;
        let n = x.shape()[x.dim() - 1] as usize;
        let es: Vec<Mat<T>> = a.mats.iter().map(|m| from_f64(&expm(&to_f64(m.as_ref())))).collect();
        let out = back(assemble(&a.lead, &es, n, n)?)?;
        Ok(vec![record(out, "LinalgMatrixExpBackward0", &[x], move |g| {
            let gm = matrices::<T>(op, g, true)?;
            // gA = the top-right block of exp([[Aᴴ, G], [0, Aᴴ]]).
            let ga: Vec<Mat<T>> = a.mats.iter().zip(&gm.mats).map(|(am, gk)| {
                let big = Mat::from_fn(2 * n, 2 * n, |i, j| match (i < n, j < n) {
                    (true, true) => f64_of(am[(j, i)]),
                    (true, false) => f64_of(gk[(i, j - n)]),
                    (false, true) => 0.0,
                    (false, false) => f64_of(am[(j - n, i - n)]),
                });
                let e = expm(&big);
                Mat::from_fn(n, n, |i, j| T::c(e[(i, j + n)]))
            }).collect();
            Ok(vec![Some(back(assemble(&a.lead, &ga, n, n)?)?)])
        })])
    })
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("linalg_svd", svd),
    ("linalg_svdvals", svdvals),
    ("linalg_pinv.atol_rtol_float", pinv),
    ("linalg_lstsq", lstsq),
    ("linalg_qr", qr),
    ("linalg_matrix_norm", matrix_norm),
    ("linalg_matrix_norm.str_ord", matrix_norm),
    ("linalg_matrix_exp", matrix_exp),
];
