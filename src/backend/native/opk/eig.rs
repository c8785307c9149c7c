//! `torch.linalg.eig` of real matrices on the native backend: faer's
//! eigendecomposition (Hessenberg reduction, then the Francis QR steps), with
//! complex eigenvalues and eigenvectors. Each eigenvector is scaled to unit
//! norm, as LAPACK's `geev` (and so PyTorch) returns them; its phase, like
//! LAPACK's, is a convention, so tests compare gauge-invariant quantities.
//!
//! The backward is PyTorch's `linalg_eig_backward`:
//! `gA = V⁻ᴴ (diag(gL) + (VᴴgV − VᴴV diag(re(diag(VᴴgV)))) / conj(E)) Vᴴ`,
//! with `E_ij = λ_j − λ_i` (1 on the diagonal), and its real part for a real A.

use faer::linalg::solvers::Solve;
use faer::{c32, c64, Mat};

use super::super::autograd::record;
use super::super::elem::{match_elem, Cx, Elem};
use super::super::tensor::Raw;
use super::dense::{at, matrices, Real};
use super::{input, Kernel};
use crate::error::Result;
use crate::vocab::Call;

/// A real type with its faer complex type.
trait EigReal: Real {
    type C: faer::traits::ComplexField<Real = Self> + Copy;
    fn cx(re: Self, im: Self) -> Self::C;
    fn split(c: Self::C) -> (Self, Self);
}
impl EigReal for f32 {
    type C = c32;
    fn cx(re: f32, im: f32) -> c32 {
        c32::new(re, im)
    }
    fn split(c: c32) -> (f32, f32) {
        (c.re, c.im)
    }
}
impl EigReal for f64 {
    type C = c64;
    fn cx(re: f64, im: f64) -> c64 {
        c64::new(re, im)
    }
    fn split(c: c64) -> (f64, f64) {
        (c.re, c.im)
    }
}

fn div<T: EigReal>(a: T::C, b: T::C) -> T::C {
    let ((ar, ai), (br, bi)) = (T::split(a), T::split(b));
    let r = Cx::new(ar, ai).cdiv(Cx::new(br, bi));
    T::cx(r.re, r.im)
}

/// A `[lead.., rows, cols]` complex tensor from row-major complex matrices.
fn assemble_c<T: EigReal>(lead: &[i64], mats: &[Mat<T::C>], rows: usize, cols: usize) -> Result<Raw>
where
    Cx<T>: Elem,
{
    let shape: Vec<i64> = lead.iter().copied().chain([rows as i64, cols as i64]).collect();
    let mut data = Vec::with_capacity(mats.len() * rows * cols);
    for m in mats {
        for i in 0..rows {
            for j in 0..cols {
                let (re, im) = T::split(m[(i, j)]);
                data.push(Cx::new(re, im));
            }
        }
    }
    Raw::from_vec(&shape, &data)
}

/// The matrices of a complex `[lead.., n, n]` tensor (a gradient).
fn complex_mats<T: EigReal>(g: &Raw, count: usize, rows: usize, cols: usize) -> Result<Vec<Mat<T::C>>>
where
    Cx<T>: Elem,
{
    let c = g.contiguous()?;
    let v = c.slice::<Cx<T>>();
    Ok((0..count).map(|b| Mat::from_fn(rows, cols, |i, j| {
        let z = v[(b * rows + i) * cols + j];
        T::cx(z.re, z.im)
    })).collect())
}

type Parts<T> = (Vec<i64>, Vec<Vec<<T as EigReal>::C>>, Vec<Mat<<T as EigReal>::C>>);

fn eig_of<T: EigReal>(op: &str, x: &Raw) -> Result<Parts<T>> {
    let a = matrices::<T>(op, x, true)?;
    let mut vals = Vec::with_capacity(a.mats.len());
    let mut vecs = Vec::with_capacity(a.mats.len());
    for (b, m) in a.mats.iter().enumerate() {
        let n = m.nrows();
        if n == 0 {
            vals.push(Vec::new());
            vecs.push(Mat::zeros(0, 0));
            continue;
        }
        let e = faer::linalg::solvers::Eigen::new_from_real(m.as_ref())
            .map_err(|_| crate::err!(E_LINALG, "{} The algorithm failed to converge because the input matrix is ill-conditioned or has too many repeated eigenvalues.", at(op, &a.lead, b)))?;
        let (u, s) = (e.U(), e.S());
        let l: Vec<T::C> = (0..n).map(|i| { let (re, im) = (s[i].re, s[i].im); T::cx(re, im) }).collect();
        let mut v = Mat::from_fn(n, n, |i, j| { let z = u[(i, j)]; T::cx(z.re, z.im) });
        for j in 0..n {
            let norm = (0..n).map(|i| { let (re, im) = T::split(v[(i, j)]); re * re + im * im }).fold(T::c(0.0), |a, b| a + b).sqrt();
            if norm > T::c(0.0) {
                for i in 0..n {
                    let (re, im) = T::split(v[(i, j)]);
                    v[(i, j)] = T::cx(re / norm, im / norm);
                }
            }
        }
        vals.push(l);
        vecs.push(v);
    }
    Ok((a.lead, vals, vecs))
}

/// `linalg_eig_backward` for one matrix (see the module's comment).
fn eig_back<T: EigReal>(l: &[T::C], v: &Mat<T::C>, gl: Option<&[T::C]>, gv: Option<&Mat<T::C>>) -> Mat<T> {
    let n = l.len();
    let zero = T::cx(T::c(0.0), T::c(0.0));
    let vh = v.adjoint().to_owned();
    let mut inner = match gv {
        Some(gv) => {
            let mut vhgv = &vh * gv;
            let vhv = &vh * v;
            let d: Vec<T> = (0..n).map(|j| T::split(vhgv[(j, j)]).0).collect();
            for i in 0..n {
                for j in 0..n {
                    let (re, im) = T::split(vhv[(i, j)]);
                    let (pr, pi) = T::split(vhgv[(i, j)]);
                    vhgv[(i, j)] = T::cx(pr - re * d[j], pi - im * d[j]);
                }
            }
            // E*_ij = conj(λ_j) − conj(λ_i).
            let econj = |i: usize, j: usize| {
                let ((jr, ji), (ir, ii)) = (T::split(l[j]), T::split(l[i]));
                T::cx(jr - ir, ii - ji)
            };
            Mat::from_fn(n, n, |i, j| if i == j { zero } else { div::<T>(vhgv[(i, j)], econj(i, j)) })
        }
        None => Mat::from_fn(n, n, |_, _| zero),
    };
    if let Some(gl) = gl {
        for i in 0..n {
            inner[(i, i)] = gl[i];
        }
    }
    let rhs = &inner * &vh;
    let ga = vh.as_ref().partial_piv_lu().solve(&rhs);
    Mat::from_fn(n, n, |i, j| T::split(ga[(i, j)]).0)
}

fn eig(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let op = "linalg.eig";
    match_elem!(x.dtype(), T => {
        let (lead, vals, vecs) = eig_of::<T>(op, x)?;
        let n = x.shape()[x.dim() - 1] as usize;
        let count = vals.len();
        let flat: Vec<Cx<T>> = vals.iter().flatten().map(|&c| { let (re, im) = T::split(c); Cx::new(re, im) }).collect();
        let shape: Vec<i64> = lead.iter().copied().chain([n as i64]).collect();
        let l = Raw::from_vec(&shape, &flat)?;
        let v = assemble_c::<T>(&lead, &vecs, n, n)?;
        // gA is linear in (gL, gV): each output's node adds its own part.
        let parts = std::sync::Arc::new((lead, vals, vecs));
        let for_v = parts.clone();
        let l = record(l, "LinalgEigBackward0", &[x], move |g| {
            let (lead, vals, vecs) = &*parts;
            let c = g.contiguous()?;
            let gl: Vec<<T as EigReal>::C> = c.slice::<Cx<T>>().iter().map(|z| T::cx(z.re, z.im)).collect();
            let ga: Vec<Mat<T>> = (0..count).map(|k| eig_back::<T>(&vals[k], &vecs[k], Some(&gl[k * n..(k + 1) * n]), None)).collect();
            Ok(vec![Some(super::dense::assemble(lead, &ga, n, n)?)])
        });
        let v = record(v, "LinalgEigBackward0", &[x], move |g| {
            let (lead, vals, vecs) = &*for_v;
            let gv = complex_mats::<T>(g, count, n, n)?;
            let ga: Vec<Mat<T>> = (0..count).map(|k| eig_back::<T>(&vals[k], &vecs[k], None, Some(&gv[k]))).collect();
            Ok(vec![Some(super::dense::assemble(lead, &ga, n, n)?)])
        });
        Ok(vec![l, v])
    }, [F32: f32, F64: f64], _ => crate::bail!(E_DTYPE, "{op}: {} is not supported (it takes fp32 and fp64)", x.dtype().name()))
}

pub const KERNELS: &[(&str, Kernel)] = &[("linalg_eig", eig)];
