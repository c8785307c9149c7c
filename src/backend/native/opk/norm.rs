//! Native kernels of the op table's batch and group norms (`table/norm.rs`),
//! with `torch.nn.functional`'s semantics, forward and backward (input,
//! weight, bias). Each computes in f32 (fp32, bf16, fp16) or f64 and rounds
//! its result once. Core has checked the shapes, the dtypes and the running
//! stats (`crate::opcall`'s `norm_args`): input `[N, C, *]`, affine
//! parameters and running stats `[C]`, `C % num_groups == 0`.
//!
//! Both kernels work on a contiguous input as `N` blocks of `C` channels of
//! `S` elements (the trailing dims): a channel's (or group's) elements are
//! runs of `S` (or `C / G · S`) contiguous values, so every loop is a
//! vectorisable pass over a slice. The loops run a channel (batch norm) or
//! a group (group norm) per task, each writing only its own slots, so
//! results do not depend on the thread count.

use super::super::autograd::{needs_grad, record_saving};
use super::super::elem::{with_elem, Elem};
use super::super::fused::Real;
use super::super::kernels::{copy_into, Ptr};
use super::super::nn::with_real;
use super::super::ops::convert;
use super::super::par;
use super::super::tensor::Raw;
use super::{input, real, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::Call;

pub const KERNELS: &[(&str, Kernel)] = &[("batch_norm", batch_norm), ("group_norm", group_norm)];

/// Optional tensor input `i` (left out or 0).
fn opt<'a>(ins: &[Option<&'a Raw>], i: usize) -> Option<&'a Raw> {
    ins.get(i).copied().flatten()
}

fn num<R: Real>(v: f64) -> R {
    R::from_f64(v).unwrap_or_else(R::nan)
}

/// `(N, C, S)` of an input `[N, C, *]` (core checked that it has two dims or more).
fn ncs(x: &Raw) -> (usize, usize, usize) {
    let s = x.shape();
    (s[0] as usize, s[1] as usize, s[2..].iter().product::<i64>() as usize)
}

/// Sums of `f(x)` over `x`, in 8 independent lanes: the loop vectorises
/// (no reassociation needed) and the sum is 8 shorter chains, so more exact.
#[inline(always)]
fn lane_sum<R: Real>(x: &[R], f: impl Fn(R) -> R) -> R {
    let mut acc = [R::zero(); 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder().iter().fold(R::zero(), |a, &v| a + f(v));
    for c in chunks {
        for i in 0..8 {
            acc[i] = acc[i] + f(c[i]);
        }
    }
    acc.iter().fold(rest, |a, &v| a + v)
}

/// `(Σ g, Σ g·(x - m))` over two slices of one length, in lanes as `lane_sum`.
#[inline(always)]
fn lane_sums2<R: Real>(g: &[R], x: &[R], m: R) -> (R, R) {
    let (mut a, mut b) = ([R::zero(); 8], [R::zero(); 8]);
    let (gc, xc) = (g.chunks_exact(8), x.chunks_exact(8));
    let (mut ra, mut rb) = (R::zero(), R::zero());
    for (&gv, &xv) in gc.remainder().iter().zip(xc.remainder()) {
        ra = ra + gv;
        rb = rb + gv * (xv - m);
    }
    for (gs, xs) in gc.zip(xc) {
        for i in 0..8 {
            a[i] = a[i] + gs[i];
            b[i] = b[i] + gs[i] * (xs[i] - m);
        }
    }
    (a.iter().fold(ra, |s, &v| s + v), b.iter().fold(rb, |s, &v| s + v))
}

/// `y = x·scale + shift` over a slice (PyTorch's CPU form of the affine normalisation).
#[inline(always)]
fn affine<R: Real>(y: &mut [R], x: &[R], scale: R, shift: R) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x * scale + shift;
    }
}

/// A parameter `[C]` in the computing type (`None`: left out).
fn param<R: Real + Elem>(p: Option<&Raw>) -> Result<Option<Vec<R>>> {
    p.map(|p| real::<R>(p).map(|t| t.slice::<R>().to_vec())).transpose()
}

/// The gradients of the node's inputs `[x, weight?, bias?]`, each converted to its input's dtype.
fn grads_of(dx: &Raw, dw: &Raw, db: &Raw, dts: (DType, Option<DType>, Option<DType>)) -> Result<Vec<Option<Raw>>> {
    let mut out = vec![Some(convert(dx, dts.0)?)];
    if let Some(d) = dts.1 {
        out.push(Some(convert(dw, d)?));
    }
    if let Some(d) = dts.2 {
        out.push(Some(convert(db, d)?));
    }
    Ok(out)
}

// ------------------------------------------------------------------ batch_norm

/// `F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)`.
fn batch_norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let training = call.bool("training").unwrap_or(false);
    let momentum = call.float("momentum").unwrap_or(0.1);
    let eps = call.float("eps").unwrap_or(1e-5);
    with_real!("batch_norm", x.dtype(), R => bn_run::<R>(x, [opt(ins, 1), opt(ins, 2), opt(ins, 3), opt(ins, 4)], training, momentum, eps))
}

fn bn_run<R: Real + Elem>(x: &Raw, [rm, rv, w, b]: [Option<&Raw>; 4], training: bool, momentum: f64, eps: f64) -> Result<Vec<Raw>> {
    let (n, c, s) = ncs(x);
    let m = n * s;
    let xr = real::<R>(x)?;
    let (wv, bv) = (param::<R>(w)?, param::<R>(b)?);
    let eps_r = num::<R>(eps);
    // Per channel: the mean and 1/sqrt(var + eps) that normalise it.
    let (mean, invstd) = if training {
        if m == 0 {
            // An empty batch: nothing to normalise, running stats kept (as PyTorch).
            (vec![R::zero(); c], vec![R::zero(); c])
        } else {
            let (mean, var_sum) = bn_stats(xr.slice(), n, c, s);
            // As PyTorch: running = momentum·stat + (1 - momentum)·running,
            // with the unbiased variance, written into the caller's tensors.
            if let Some(rm) = rm {
                update_running::<R>(rm, &mean, momentum, R::one())?;
            }
            if let Some(rv) = rv {
                update_running::<R>(rv, &var_sum, momentum, R::one() / num::<R>((m - 1).max(1) as f64))?;
            }
            let mm = num::<R>(m as f64);
            (mean, var_sum.iter().map(|&v| R::one() / (v / mm + eps_r).sqrt()).collect())
        }
    } else {
        let (Some(rm), Some(rv)) = (rm, rv) else {
            crate::bail!(E_INVALID_ARG, "batch_norm: running_mean and running_var must be defined in evaluation mode");
        };
        let mean = real::<R>(rm)?.slice::<R>().to_vec();
        let invstd = real::<R>(rv)?.slice::<R>().iter().map(|&v| R::one() / (v + eps_r).sqrt()).collect();
        (mean, invstd)
    };
    let scale: Vec<R> = (0..c).map(|k| invstd[k] * wv.as_ref().map_or(R::one(), |w| w[k])).collect();
    let shift: Vec<R> = (0..c).map(|k| bv.as_ref().map_or(R::zero(), |b| b[k]) - mean[k] * scale[k]).collect();
    let y = Raw::empty(x.shape(), R::DT)?;
    {
        let (xs, py) = (xr.slice::<R>(), Ptr(y.slice_mut::<R>().as_mut_ptr()));
        let task = |k: usize| {
            for i in 0..n {
                let at = (i * c + k) * s;
                // SAFETY: task k writes only channel k's runs.
                let ys = unsafe { std::slice::from_raw_parts_mut(py.at(at as isize), s) };
                affine(ys, &xs[at..at + s], scale[k], shift[k]);
            }
        };
        for_channels(c, x.numel(), &task);
    }
    let out = convert(&y, x.dtype())?;
    let inputs: Vec<&Raw> = [Some(x), w, b].into_iter().flatten().collect();
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let dts = (x.dtype(), w.map(|w| w.dtype()), b.map(|b| b.dtype()));
    let wk: Vec<R> = wv.unwrap_or_else(|| vec![R::one(); c]);
    Ok(vec![record_saving(out, "NativeBatchNormBackward0", &inputs, &inputs, false, move |g| {
        let gr = real::<R>(g)?;
        let dx = Raw::empty(xr.shape(), R::DT)?;
        let (dw, db) = (Raw::empty(&[c as i64], R::DT)?, Raw::empty(&[c as i64], R::DT)?);
        bn_backward::<R>(gr.slice(), xr.slice(), (n, c, s), &mean, &invstd, &wk, training, dx.slice_mut(), dw.slice_mut(), db.slice_mut());
        grads_of(&dx, &dw, &db, dts)
    })])
}

/// Each channel's mean and sum of squared deviations from it (two passes,
/// as PyTorch's CPU kernel: nothing cancels).
fn bn_stats<R: Real>(x: &[R], n: usize, c: usize, s: usize) -> (Vec<R>, Vec<R>) {
    let (mut mean, mut var) = (vec![R::zero(); c], vec![R::zero(); c]);
    let (pm, pv) = (Ptr(mean.as_mut_ptr()), Ptr(var.as_mut_ptr()));
    let inv_m = R::one() / num::<R>((n * s) as f64);
    let task = |k: usize| {
        let run = move |i: usize| &x[(i * c + k) * s..(i * c + k + 1) * s];
        let mu = (0..n).fold(R::zero(), |a, i| a + lane_sum(run(i), |v| v)) * inv_m;
        let v = (0..n).fold(R::zero(), |a, i| a + lane_sum(run(i), |v| (v - mu) * (v - mu)));
        // SAFETY: task k writes only slot k.
        unsafe {
            *pm.at(k as isize) = mu;
            *pv.at(k as isize) = v;
        }
    };
    for_channels(c, n * c * s, &task);
    (mean, var)
}

/// Runs `task` for each of `c` channels: on the pool when the work is worth it.
fn for_channels(c: usize, work: usize, task: &(dyn Fn(usize) + Sync)) {
    if par::parallel(work) {
        par::for_each(c, task);
    } else {
        (0..c).for_each(task);
    }
}

/// `running = momentum·(stat·factor) + (1 - momentum)·running`, written into
/// the caller's tensor (any float dtype, any strides) under no autograd. As
/// in PyTorch (2.13), the update does not bump the stat's version counter,
/// so a graph that saved the stat reads the updated values, as libtorch's does.
fn update_running<R: Real + Elem>(t: &Raw, stat: &[R], momentum: f64, factor: R) -> Result<()> {
    let old = real::<R>(t)?;
    let (mo, keep) = (num::<R>(momentum), num::<R>(1.0 - momentum));
    let new: Vec<R> = old.slice::<R>().iter().zip(stat).map(|(&r, &v)| mo * (v * factor) + keep * r).collect();
    let new = Raw::from_vec(t.shape(), &new)?;
    with_elem!(t.dtype(), D => copy_into::<R, D>(t, &new));
    Ok(())
}

/// Batch norm's gradients, per channel `k` (`M = N·S` values, `x̂ = (x - mean)·invstd`):
/// `db = Σ g`, `dw = Σ g·x̂`; `dx = w·invstd·(g - db/M - x̂·dw/M)` in
/// training (the batch stats depend on x), `w·invstd·g` in eval.
#[allow(clippy::too_many_arguments)]
fn bn_backward<R: Real>(g: &[R], x: &[R], (n, c, s): (usize, usize, usize), mean: &[R], invstd: &[R], w: &[R], training: bool, dx: &mut [R], dw: &mut [R], db: &mut [R]) {
    let (px, pw, pb) = (Ptr(dx.as_mut_ptr()), Ptr(dw.as_mut_ptr()), Ptr(db.as_mut_ptr()));
    let inv_m = if n * s > 0 { R::one() / num::<R>((n * s) as f64) } else { R::zero() };
    let task = |k: usize| {
        let (mu, is) = (mean[k], invstd[k]);
        let (mut sg, mut sgx) = (R::zero(), R::zero());
        for i in 0..n {
            let at = (i * c + k) * s;
            let (a, b) = lane_sums2(&g[at..at + s], &x[at..at + s], mu);
            sg = sg + a;
            sgx = sgx + b;
        }
        let ws = w[k] * is;
        // dx = g·ws + x·kx + k0: the training terms folded into one affine map.
        let (kx, k0) = if training {
            let kx = -ws * is * is * sgx * inv_m;
            (kx, -ws * sg * inv_m - mu * kx)
        } else {
            (R::zero(), R::zero())
        };
        for i in 0..n {
            let at = (i * c + k) * s;
            // SAFETY: task k writes only channel k's runs and slot k.
            let ds = unsafe { std::slice::from_raw_parts_mut(px.at(at as isize), s) };
            for ((d, &gv), &xv) in ds.iter_mut().zip(&g[at..at + s]).zip(&x[at..at + s]) {
                *d = gv * ws + xv * kx + k0;
            }
        }
        unsafe {
            *pw.at(k as isize) = sgx * is;
            *pb.at(k as isize) = sg;
        }
    };
    for_channels(c, n * c * s, &task);
}

// ------------------------------------------------------------------ group_norm

/// `F.group_norm(input, num_groups, weight, bias, eps)`.
fn group_norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let groups = call.int("num_groups").unwrap_or(1).max(1) as usize;
    let eps = call.float("eps").unwrap_or(1e-5);
    with_real!("group_norm", x.dtype(), R => gn_run::<R>(x, opt(ins, 1), opt(ins, 2), groups, eps))
}

/// The shape of one group norm: `rows = N·G` groups of `cg` channels of `s` values.
#[derive(Clone, Copy)]
struct Groups {
    n: usize,
    c: usize,
    s: usize,
    g: usize,
    cg: usize,
}

impl Groups {
    /// Values per group.
    fn d(&self) -> usize {
        self.cg * self.s
    }
    fn rows(&self) -> usize {
        self.n * self.g
    }
    /// The channel of group-row `r`'s `j`th channel.
    fn channel(&self, r: usize, j: usize) -> usize {
        (r % self.g) * self.cg + j
    }
}

/// Groups per task, so that a task is about `par::GRAIN` values.
fn group_block(d: usize) -> usize {
    (par::GRAIN / d.max(1)).max(1)
}

fn gn_run<R: Real + Elem>(x: &Raw, w: Option<&Raw>, b: Option<&Raw>, g: usize, eps: f64) -> Result<Vec<Raw>> {
    let (n, c, s) = ncs(x);
    let gs = Groups { n, c, s, g, cg: c / g };
    let (d, rows) = (gs.d(), gs.rows());
    let xr = real::<R>(x)?;
    let (wv, bv) = (param::<R>(w)?, param::<R>(b)?);
    let (mean, rstd) = (Raw::empty(&[rows as i64], R::DT)?, Raw::empty(&[rows as i64], R::DT)?);
    let y = Raw::empty(x.shape(), R::DT)?;
    {
        let (xs, eps_r) = (xr.slice::<R>(), num::<R>(eps));
        let (py, pm, pr) = (Ptr(y.slice_mut::<R>().as_mut_ptr()), Ptr(mean.slice_mut::<R>().as_mut_ptr()), Ptr(rstd.slice_mut::<R>().as_mut_ptr()));
        let inv_d = R::one() / num::<R>(d.max(1) as f64);
        let block = group_block(d);
        let task = |t: usize| {
            for r in t * block..rows.min((t + 1) * block) {
                let xg = &xs[r * d..(r + 1) * d];
                let mu = lane_sum(xg, |v| v) * inv_d;
                let var = lane_sum(xg, |v| (v - mu) * (v - mu)) * inv_d;
                let rs = R::one() / (var + eps_r).sqrt();
                // SAFETY: task t writes only its own groups' values and slots.
                unsafe {
                    *pm.at(r as isize) = mu;
                    *pr.at(r as isize) = rs;
                }
                for j in 0..gs.cg {
                    let k = gs.channel(r, j);
                    let scale = rs * wv.as_ref().map_or(R::one(), |w| w[k]);
                    let shift = bv.as_ref().map_or(R::zero(), |b| b[k]) - mu * scale;
                    let at = r * d + j * s;
                    let ys = unsafe { std::slice::from_raw_parts_mut(py.at(at as isize), s) };
                    affine(ys, &xs[at..at + s], scale, shift);
                }
            }
        };
        par::for_each(rows.div_ceil(block), &task);
    }
    let out = convert(&y, x.dtype())?;
    let inputs: Vec<&Raw> = [Some(x), w, b].into_iter().flatten().collect();
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let dts = (x.dtype(), w.map(|w| w.dtype()), b.map(|b| b.dtype()));
    let wk: Vec<R> = wv.unwrap_or_else(|| vec![R::one(); c]);
    Ok(vec![record_saving(out, "NativeGroupNormBackward0", &inputs, &inputs, false, move |g| {
        let gr = real::<R>(g)?;
        let dx = Raw::empty(xr.shape(), R::DT)?;
        let (dw, db) = gn_backward::<R>(gr.slice(), xr.slice(), gs, mean.slice(), rstd.slice(), &wk, dx.slice_mut());
        grads_of(&dx, &Raw::from_vec(&[c as i64], &dw)?, &Raw::from_vec(&[c as i64], &db)?, dts)
    })])
}

/// Group norm's gradients. Per group (`D` values, `x̂ = (x - mean)·rstd`,
/// `ĝ = g·w` of each value's channel): `dx = rstd·(ĝ - Σĝ/D - x̂·Σ(ĝ·x̂)/D)`;
/// per channel `dw = Σ g·x̂`, `db = Σ g`, summed over the batch in order
/// after the parallel loop (so they do not depend on the thread count).
fn gn_backward<R: Real>(g: &[R], x: &[R], gs: Groups, mean: &[R], rstd: &[R], w: &[R], dx: &mut [R]) -> (Vec<R>, Vec<R>) {
    let (d, rows, s) = (gs.d(), gs.rows(), gs.s);
    // Per (batch entry, channel): Σ g and Σ g·(x - mean).
    let (mut sg, mut sgx) = (vec![R::zero(); gs.n * gs.c], vec![R::zero(); gs.n * gs.c]);
    let (pg, pgx, pd) = (Ptr(sg.as_mut_ptr()), Ptr(sgx.as_mut_ptr()), Ptr(dx.as_mut_ptr()));
    let inv_d = R::one() / num::<R>(d.max(1) as f64);
    let block = group_block(d);
    let task = |t: usize| {
        for r in t * block..rows.min((t + 1) * block) {
            let (mu, rs) = (mean[r], rstd[r]);
            // Σ ĝ and Σ ĝ·(x - mean) over the group.
            let (mut a, mut b) = (R::zero(), R::zero());
            for j in 0..gs.cg {
                let at = r * d + j * s;
                let (cg, cgx) = lane_sums2(&g[at..at + s], &x[at..at + s], mu);
                let k = gs.channel(r, j);
                // SAFETY: task t writes only its own groups' slots and values.
                unsafe {
                    *pg.at(((r / gs.g) * gs.c + k) as isize) = cg;
                    *pgx.at(((r / gs.g) * gs.c + k) as isize) = cgx;
                }
                a = a + w[k] * cg;
                b = b + w[k] * cgx;
            }
            // dx = g·(rstd·w) + x·kx + k0, per channel.
            let kx = -rs * rs * rs * b * inv_d;
            let k0 = -rs * a * inv_d - mu * kx;
            for j in 0..gs.cg {
                let at = r * d + j * s;
                let ws = rs * w[gs.channel(r, j)];
                let ds = unsafe { std::slice::from_raw_parts_mut(pd.at(at as isize), s) };
                for ((dv, &gv), &xv) in ds.iter_mut().zip(&g[at..at + s]).zip(&x[at..at + s]) {
                    *dv = gv * ws + xv * kx + k0;
                }
            }
        }
    };
    par::for_each(rows.div_ceil(block), &task);
    let (mut dw, mut db) = (vec![R::zero(); gs.c], vec![R::zero(); gs.c]);
    for i in 0..gs.n {
        for k in 0..gs.c {
            let rs = rstd[i * gs.g + k / gs.cg];
            dw[k] = dw[k] + sgx[i * gs.c + k] * rs;
            db[k] = db[k] + sg[i * gs.c + k];
        }
    }
    (dw, db)
}
