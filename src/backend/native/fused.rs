//! Fused row kernels, forward and backward: softmax, log-softmax, masked
//! softmax, layer norm, cross-entropy and exact GELU. Inputs are contiguous
//! `rows × n` slices in the computing type (f32 or f64), with PyTorch's
//! formulas. Rows are split across the pool only when the work is large;
//! each row's arithmetic is the same either way, so results do not depend
//! on the thread count.

use rayon::prelude::*;

use super::par;

/// The computing types: f32 (for fp32, bf16, fp16) and f64.
pub trait Real: num_traits::Float + num_traits::FromPrimitive + Copy + Send + Sync + Default + std::fmt::Debug + 'static {
    fn erf(self) -> Self;
    fn of(v: f64) -> Self {
        Self::from_f64(v).expect("a finite constant")
    }
}

// musl's erf and erff (the `libm` crate): within 1 ulp.
impl Real for f32 {
    #[inline(always)]
    fn erf(self) -> f32 {
        libm::erff(self)
    }
}

impl Real for f64 {
    #[inline(always)]
    fn erf(self) -> f64 {
        libm::erf(self)
    }
}

/// Calls `f(row, input rows..., output row)` for every row, in parallel when large.
fn rows2<T: Real>(a: &[T], b: &[T], n: usize, out: &mut [T], f: impl Fn(&[T], &[T], &mut [T]) + Sync) {
    if n == 0 {
        return;
    }
    if par::parallel(out.len()) {
        par::run(out.len(), || {
            out.par_chunks_mut(n).zip(a.par_chunks(n)).zip(b.par_chunks(n)).for_each(|((o, a), b)| f(a, b, o));
        });
    } else {
        out.chunks_mut(n).zip(a.chunks(n)).zip(b.chunks(n)).for_each(|((o, a), b)| f(a, b, o));
    }
}

fn rows1<T: Real>(a: &[T], n: usize, out: &mut [T], f: impl Fn(&[T], &mut [T]) + Sync) {
    rows2(a, a, n, out, |a, _, o| f(a, o));
}

fn max<T: Real>(xs: &[T]) -> T {
    xs.iter().fold(T::neg_infinity(), |m, &v| if v > m || v.is_nan() { v } else { m })
}

fn sum<T: Real>(xs: impl Iterator<Item = T>) -> T {
    xs.fold(T::zero(), |s, v| s + v)
}

/// `exp(x - max)` into `o`, returning the row's sum.
fn exp_shifted<T: Real>(x: &[T], o: &mut [T]) -> T {
    let m = max(x);
    let m = if m.is_infinite() { T::zero() } else { m };
    let mut s = T::zero();
    for (o, &v) in o.iter_mut().zip(x) {
        *o = (v - m).exp();
        s = s + *o;
    }
    s
}

pub fn softmax_fwd<T: Real>(x: &[T], n: usize, y: &mut [T]) {
    rows1(x, n, y, |x, y| {
        let inv = T::one() / exp_shifted(x, y);
        y.iter_mut().for_each(|v| *v = *v * inv);
    });
}

pub fn log_softmax_fwd<T: Real>(x: &[T], n: usize, y: &mut [T]) {
    rows1(x, n, y, |x, y| {
        let m = max(x);
        let lse = m + sum(x.iter().map(|&v| (v - m).exp())).ln();
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = v - lse);
    });
}

/// `dx = y * (g - sum(g * y))` per row.
pub fn softmax_bwd<T: Real>(g: &[T], y: &[T], n: usize, dx: &mut [T]) {
    rows2(g, y, n, dx, |g, y, d| {
        let s = sum(g.iter().zip(y).map(|(&g, &y)| g * y));
        d.iter_mut().zip(g.iter().zip(y)).for_each(|(d, (&g, &y))| *d = y * (g - s));
    });
}

/// Softmax over the unmasked entries (`true` = masked out): masked entries
/// are 0, and a fully masked row is 0/0 = NaN, as `torch._masked_softmax`.
pub fn masked_softmax_fwd<T: Real>(x: &[T], mask: &[bool], n: usize, y: &mut [T]) {
    if n == 0 {
        return;
    }
    let row = |x: &[T], m: &[bool], y: &mut [T]| {
        let mx = x.iter().zip(m).filter(|(_, &k)| !k).fold(T::neg_infinity(), |a, (&v, _)| a.max(v));
        let mut s = T::zero();
        for ((o, &v), &k) in y.iter_mut().zip(x).zip(m) {
            *o = if k { T::zero() } else { (v - mx).exp() };
            s = s + *o;
        }
        let inv = T::one() / s;
        y.iter_mut().for_each(|v| *v = *v * inv);
    };
    if par::parallel(y.len()) {
        par::run(y.len(), || y.par_chunks_mut(n).zip(x.par_chunks(n)).zip(mask.par_chunks(n)).for_each(|((y, x), m)| row(x, m, y)));
    } else {
        y.chunks_mut(n).zip(x.chunks(n)).zip(mask.chunks(n)).for_each(|((y, x), m)| row(x, m, y));
    }
}

/// The softmax gradient over the unmasked entries; masked entries (and
/// fully masked rows) get 0.
pub fn masked_softmax_bwd<T: Real>(g: &[T], y: &[T], mask: &[bool], n: usize, dx: &mut [T]) {
    if n == 0 {
        return;
    }
    let row = |g: &[T], y: &[T], m: &[bool], d: &mut [T]| {
        let s = sum(g.iter().zip(y).zip(m).filter(|(_, &k)| !k).map(|((&g, &y), _)| g * y));
        for (((d, &g), &y), &k) in d.iter_mut().zip(g).zip(y).zip(m) {
            *d = if k { T::zero() } else { y * (g - s) };
        }
    };
    dx.chunks_mut(n).zip(g.chunks(n)).zip(y.chunks(n)).zip(mask.chunks(n)).for_each(|(((d, g), y), m)| row(g, y, m, d));
}

/// Layer norm of each row over its `n` entries (biased variance), saving
/// each row's mean and 1/sqrt(var + eps). Statistics are two-pass in `T`.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_fwd<T: Real>(x: &[T], w: &[T], b: Option<&[T]>, n: usize, eps: f64, y: &mut [T], mean: &mut [T], rstd: &mut [T]) {
    if n == 0 {
        return;
    }
    let (nn, e) = (T::of(n as f64), T::of(eps));
    let row = |x: &[T], y: &mut [T], mean: &mut T, rstd: &mut T| {
        let m = sum(x.iter().copied()) / nn;
        let var = sum(x.iter().map(|&v| (v - m) * (v - m))) / nn;
        let r = T::one() / (var + e).sqrt();
        (*mean, *rstd) = (m, r);
        match b {
            Some(b) => y.iter_mut().zip(x).zip(w.iter().zip(b)).for_each(|((o, &v), (&w, &b))| *o = (v - m) * r * w + b),
            None => y.iter_mut().zip(x).zip(w).for_each(|((o, &v), &w)| *o = (v - m) * r * w),
        }
    };
    let stats = mean.iter_mut().zip(rstd.iter_mut());
    if par::parallel(y.len()) {
        let stats: Vec<_> = stats.collect();
        par::run(y.len(), || {
            y.par_chunks_mut(n).zip(x.par_chunks(n)).zip(stats).for_each(|((y, x), (m, r))| row(x, y, m, r));
        });
    } else {
        y.chunks_mut(n).zip(x.chunks(n)).zip(stats).for_each(|((y, x), (m, r))| row(x, y, m, r));
    }
}

/// Gradients of layer norm: `dx` per row (PyTorch's formula), `dw`, `db`
/// summed over rows (overwritten).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_bwd<T: Real>(g: &[T], x: &[T], w: &[T], mean: &[T], rstd: &[T], n: usize, dx: &mut [T], dw: &mut [T], mut db: Option<&mut [T]>) {
    dw.iter_mut().for_each(|v| *v = T::zero());
    if let Some(db) = db.as_deref_mut() {
        db.iter_mut().for_each(|v| *v = T::zero());
    }
    if n == 0 {
        return;
    }
    let nn = T::of(n as f64);
    for (r, ((d, g), x)) in dx.chunks_mut(n).zip(g.chunks(n)).zip(x.chunks(n)).enumerate() {
        let (m, rs) = (mean[r], rstd[r]);
        let (mut s1, mut s2) = (T::zero(), T::zero());
        for i in 0..n {
            let xh = (x[i] - m) * rs;
            let gw = g[i] * w[i];
            s1 = s1 + gw;
            s2 = s2 + gw * xh;
            dw[i] = dw[i] + g[i] * xh;
        }
        if let Some(db) = db.as_deref_mut() {
            db.iter_mut().zip(g).for_each(|(o, &g)| *o = *o + g);
        }
        let (a, c) = (s1 / nn, s2 / nn);
        for i in 0..n {
            d[i] = rs * (g[i] * w[i] - a - (x[i] - m) * rs * c);
        }
    }
}

/// Mean over non-ignored rows of `logsumexp(row) - row[target]`; `lse` gets
/// each row's logsumexp. Every row ignored gives 0/0 = NaN, as PyTorch.
pub fn cross_entropy_fwd<T: Real>(logits: &[T], targets: &[i64], n: usize, ignore_index: i64, lse: &mut [T]) -> T {
    if n == 0 {
        return T::nan();
    }
    let (mut total, mut count) = (T::zero(), T::zero());
    for ((x, &t), l) in logits.chunks(n).zip(targets).zip(lse.iter_mut()) {
        let m = max(x);
        *l = m + sum(x.iter().map(|&v| (v - m).exp())).ln();
        if t != ignore_index {
            total = total + (*l - x[t as usize]);
            count = count + T::one();
        }
    }
    total / count
}

/// `dx = grad / count * (softmax(row) - onehot(target))`, ignored rows 0.
#[allow(clippy::too_many_arguments)]
pub fn cross_entropy_bwd<T: Real>(logits: &[T], targets: &[i64], n: usize, ignore_index: i64, lse: &[T], grad: T, dx: &mut [T]) {
    if n == 0 {
        return;
    }
    let count = T::of(targets.iter().filter(|&&t| t != ignore_index).count() as f64);
    let k = grad / count;
    for (((d, x), &t), &l) in dx.chunks_mut(n).zip(logits.chunks(n)).zip(targets).zip(lse) {
        if t == ignore_index {
            d.iter_mut().for_each(|v| *v = T::zero());
            continue;
        }
        d.iter_mut().zip(x).for_each(|(d, &v)| *d = k * (v - l).exp());
        d[t as usize] = d[t as usize] - k;
    }
}

/// Elements per parallel task of the elementwise GELU kernels.
const GELU_CHUNK: usize = 4096;

/// Exact GELU, `x/2 * (1 + erf(x/√2))`.
pub fn gelu_fwd<T: Real>(x: &[T], y: &mut [T]) {
    let (h, r) = (T::of(0.5), T::of(std::f64::consts::FRAC_1_SQRT_2));
    rows1(x, GELU_CHUNK, y, |x, y| y.iter_mut().zip(x).for_each(|(o, &v)| *o = h * v * (T::one() + (v * r).erf())));
}

/// `g * (Φ(x) + x φ(x))`.
pub fn gelu_bwd<T: Real>(g: &[T], x: &[T], dx: &mut [T]) {
    let (h, r, k) = (T::of(0.5), T::of(std::f64::consts::FRAC_1_SQRT_2), T::of(0.398_942_280_401_432_7));
    rows2(g, x, GELU_CHUNK, dx, |g, x, d| {
        d.iter_mut().zip(g.iter().zip(x)).for_each(|(d, (&g, &v))| *d = g * (h * (T::one() + (v * r).erf()) + v * (-h * v * v).exp() * k));
    });
}
