//! Native kernels of the op table's losses (`table/loss.rs`), with
//! `torch.nn.functional`'s semantics: the elementwise losses (`mse_loss`,
//! `l1_loss`, `smooth_l1_loss`, `huber_loss`, `kl_div`,
//! `binary_cross_entropy_with_logits`) share one kernel over broadcast
//! operands, and the class losses (`nll_loss`, `cross_entropy`) one over
//! rows of classes. Both compute in f32 (fp32, bf16, fp16) or f64, sum in
//! f64, round once, and recompute what the backward needs from the saved
//! operands instead of holding per-element derivatives.

use super::super::autograd::{needs_grad, record_saving};
use super::super::fused::Real;
use super::super::kernels::expand_strides;
use super::super::nn::with_real;
use super::super::ops::{convert, sum_to};
use super::super::tensor::{numel, Raw};
use super::{input, real, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::{self, Call};
use num_traits::{Float, One, ToPrimitive, Zero};

pub static KERNELS: &[(&str, Kernel)] = &[
    ("mse_loss", |k, i| pointwise(k, i, "mse_loss", "MseLossBackward0", Mse)),
    ("l1_loss", |k, i| pointwise(k, i, "l1_loss", "L1LossBackward0", L1)),
    ("smooth_l1_loss", |k, i| pointwise(k, i, "smooth_l1_loss", "SmoothL1LossBackward0", SmoothL1(k.float("beta").unwrap_or(1.0)))),
    ("huber_loss", |k, i| pointwise(k, i, "huber_loss", "HuberLossBackward0", Huber(k.float("delta").unwrap_or(1.0)))),
    ("kl_div", |k, i| pointwise(k, i, "kl_div", "KlDivBackward0", KlDiv(k.bool("log_target").unwrap_or(false)))),
    ("binary_cross_entropy_with_logits", |k, i| pointwise(k, i, "binary_cross_entropy_with_logits", "BinaryCrossEntropyWithLogitsBackward0", BceLogits)),
    ("nll_loss", |k, i| class_loss(k, i, false)),
    ("cross_entropy", |k, i| class_loss(k, i, true)),
];

/// How a loss reduces its elements (checked in core).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Mean,
    Sum,
    /// `kl_div`'s: the sum over the size of the first dim.
    BatchMean,
}

fn reduction(call: &Call) -> Reduction {
    match call.str("reduction").unwrap_or("mean") {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "batchmean" => Reduction::BatchMean,
        _ => Reduction::Mean,
    }
}

/// Optional tensor input `i` (left out or 0).
fn opt<'a>(ins: &[Option<&'a Raw>], i: usize) -> Option<&'a Raw> {
    ins.get(i).copied().flatten()
}

fn c<R: Real>(v: f64) -> R {
    R::from_f64(v).unwrap_or_else(R::nan)
}

/// `t` broadcast to `shape`, as a contiguous tensor of the computing type `R`.
fn dense<R: Real + super::super::elem::Elem>(t: &Raw, shape: &[i64]) -> Result<Raw> {
    if t.shape() == shape {
        return real::<R>(t);
    }
    real::<R>(&t.view_as(shape.to_vec(), expand_strides(t, shape), t.0.offset))
}

// ---------------------------------------------------------- elementwise losses

/// An elementwise loss of up to four operands (input, target, and for
/// `binary_cross_entropy_with_logits` weight and pos_weight; an absent one
/// is 1): the loss of one element and its derivative in each operand.
trait PointLoss: Copy + Send + Sync + 'static {
    fn f<R: Real>(self, v: [R; 4]) -> (R, [R; 4]);
}

#[derive(Clone, Copy)]
struct Mse;
impl PointLoss for Mse {
    fn f<R: Real>(self, [x, t, ..]: [R; 4]) -> (R, [R; 4]) {
        let d = x - t;
        let two = c::<R>(2.0);
        (d * d, [two * d, -two * d, R::zero(), R::zero()])
    }
}

/// The sign of `v` (0 at 0), as `torch.sign`.
fn sign<R: Real>(v: R) -> R {
    if v > R::zero() {
        R::one()
    } else if v < R::zero() {
        -R::one()
    } else {
        v
    }
}

#[derive(Clone, Copy)]
struct L1;
impl PointLoss for L1 {
    fn f<R: Real>(self, [x, t, ..]: [R; 4]) -> (R, [R; 4]) {
        let d = x - t;
        (d.abs(), [sign(d), -sign(d), R::zero(), R::zero()])
    }
}

/// `beta` 0 is the L1 loss, as PyTorch takes it.
#[derive(Clone, Copy)]
struct SmoothL1(f64);
impl PointLoss for SmoothL1 {
    fn f<R: Real>(self, [x, t, ..]: [R; 4]) -> (R, [R; 4]) {
        let (d, beta, half) = (x - t, c::<R>(self.0), c::<R>(0.5));
        let l = if self.0 == 0.0 { d.abs() } else if d.abs() < beta { half * d * d / beta } else { d.abs() - half * beta };
        // PyTorch's backward: ±1 at and beyond ±beta, d/beta inside.
        let g = if d <= -beta { -R::one() } else if d >= beta { R::one() } else { d / beta };
        (l, [g, -g, R::zero(), R::zero()])
    }
}

#[derive(Clone, Copy)]
struct Huber(f64);
impl PointLoss for Huber {
    fn f<R: Real>(self, [x, t, ..]: [R; 4]) -> (R, [R; 4]) {
        let (d, delta, half) = (x - t, c::<R>(self.0), c::<R>(0.5));
        let l = if d.abs() < delta { half * d * d } else { delta * (d.abs() - half * delta) };
        let g = if d < -delta { -delta } else if d > delta { delta } else { d };
        (l, [g, -g, R::zero(), R::zero()])
    }
}

/// `kl_div(input, target)`: `target · (log target − input)` (0 where the
/// target is 0, as `xlogy`), or with `log_target` `exp(target) · (target − input)`.
#[derive(Clone, Copy)]
struct KlDiv(bool);
impl PointLoss for KlDiv {
    fn f<R: Real>(self, [x, t, ..]: [R; 4]) -> (R, [R; 4]) {
        if self.0 {
            let e = t.exp();
            return (e * (t - x), [-e, e * (t + R::one() - x), R::zero(), R::zero()]);
        }
        let xlogy = if t == R::zero() { R::zero() } else { t * t.ln() };
        // The target's gradient is masked to 0 where the target is 0, as PyTorch's.
        let dt = if t == R::zero() { R::zero() } else { t.ln() + R::one() - x };
        (xlogy - t * x, [-t, dt, R::zero(), R::zero()])
    }
}

/// `binary_cross_entropy_with_logits`: `w · ((1 − t)·x + lw · softplus(−x))`
/// with `lw = (pos_weight − 1)·t + 1`, softplus computed without overflow.
#[derive(Clone, Copy)]
struct BceLogits;
impl PointLoss for BceLogits {
    fn f<R: Real>(self, [x, t, w, pw]: [R; 4]) -> (R, [R; 4]) {
        let one = R::one();
        let sp = (-x.abs()).exp().ln_1p() + (-x).max(R::zero());
        let lw = (pw - one) * t + one;
        let u = (one - t) * x + lw * sp;
        // sigmoid(-x), stable for either sign.
        let sm = if x >= R::zero() { let e = (-x).exp(); e / (one + e) } else { one / (one + x.exp()) };
        (u * w, [w * ((one - t) - lw * sm), w * (-x + (pw - one) * sp), u, w * t * sp])
    }
}

/// The elementwise losses: operands broadcast together, the result in their
/// promoted dtype, reduced as `reduction` says.
fn pointwise<L: PointLoss>(call: &Call, ins: &[Option<&Raw>], name: &'static str, back: &'static str, l: L) -> Result<Vec<Raw>> {
    let ops: Vec<Option<&Raw>> = (0..4).map(|i| opt(ins, i)).collect();
    let given: Vec<&Raw> = ops.iter().flatten().copied().collect();
    let mut shape = given[0].shape().to_vec();
    let mut dt = given[0].dtype();
    for t in &given[1..] {
        shape = vocab::broadcast(&shape, t.shape()).ok_or_else(|| crate::err!(E_SHAPE, "{name}: the size of target {} and input {} do not broadcast", fmt(t.shape()), fmt(&shape)))?;
        dt = vocab::promote_types(dt, t.dtype());
    }
    // F.binary_cross_entropy_with_logits broadcasts only the weights.
    if name == "binary_cross_entropy_with_logits" && given[1].shape() != given[0].shape() {
        crate::bail!(E_SHAPE, "{name}: Target size ({}) must be the same as input size ({})", fmt(given[1].shape()), fmt(given[0].shape()));
    }
    let red = reduction(call);
    // batchmean divides the sum by the input's first dim (1 for a 0-dim input).
    let n = match red {
        Reduction::BatchMean => given[0].shape().first().copied().unwrap_or(1) as usize,
        _ => numel(&shape),
    };
    let (out, saved) = with_real!(name, dt, R => {
        let vals: Vec<Option<Raw>> = ops.iter().map(|t| t.map(|t| dense::<R>(t, &shape)).transpose()).collect::<Result<_>>()?;
        let sl: Vec<Option<&[R]>> = vals.iter().map(|v| v.as_ref().map(|v| v.slice::<R>())).collect();
        let at = |i: usize| -> [R; 4] { std::array::from_fn(|k| sl[k].map_or(R::one(), |s| s[i])) };
        let len = numel(&shape);
        let out = match red {
            Reduction::None => {
                let v: Vec<R> = (0..len).map(|i| l.f(at(i)).0).collect();
                Raw::from_vec::<R>(&shape, &v)?
            }
            _ => {
                let s: f64 = (0..len).map(|i| l.f(at(i)).0.to_f64().unwrap_or(f64::NAN)).sum();
                let v = if red == Reduction::Sum { s } else { s / n as f64 };
                Raw::from_vec::<R>(&[], &[c::<R>(v)])?
            }
        };
        (convert(&out, dt)?, vals)
    });
    if !needs_grad(&given) {
        return Ok(vec![out]);
    }
    let shapes: Vec<Option<(Vec<i64>, DType)>> = ops.iter().map(|t| t.map(|t| (t.shape().to_vec(), t.dtype()))).collect();
    Ok(vec![record_saving(out, back, &given, &given, false, move |g| {
        let len = numel(&shape);
        // Each operand's gradient over the broadcast shape, summed back to its own below.
        let full: Vec<Option<Raw>> = with_real!(name, dt, R => {
            let gr = real::<R>(g)?;
            let gs = gr.slice::<R>();
            let sl: Vec<Option<&[R]>> = saved.iter().map(|v| v.as_ref().map(|v| v.slice::<R>())).collect();
            let at = |i: usize| -> [R; 4] { std::array::from_fn(|k| sl[k].map_or(R::one(), |s| s[i])) };
            let scale = if matches!(red, Reduction::Sum | Reduction::None) { R::one() } else { c::<R>(1.0 / n as f64) };
            let mut ds: Vec<Vec<R>> = (0..4).map(|k| if sl[k].is_some() { vec![R::zero(); len] } else { Vec::new() }).collect();
            for i in 0..len {
                let gi = if red == Reduction::None { gs[i] } else { gs[0] } * scale;
                let (_, d) = l.f(at(i));
                for (k, dk) in ds.iter_mut().enumerate() {
                    if let Some(v) = dk.get_mut(i) {
                        *v = gi * d[k];
                    }
                }
            }
            ds.iter().zip(&sl).map(|(d, s)| s.map(|_| Raw::from_vec::<R>(&shape, d)).transpose()).collect::<Result<_>>()?
        });
        let mut out = Vec::new();
        for (d, s) in full.into_iter().zip(&shapes) {
            if let (Some(d), Some((ts, tdt))) = (d, s) {
                out.push(Some(convert(&sum_to(&d, ts)?, *tdt)?));
            }
        }
        Ok(out)
    })])
}

// ---------------------------------------------------------------- class losses

/// `nll_loss` (`log_softmax` false: the input holds log-probabilities) and
/// `cross_entropy` over the class dim (1, or 0 for a 1-D input): class
/// targets (int64 or uint8, `ignore_index`, class `weight`, and for
/// `cross_entropy` `label_smoothing`) or, for `cross_entropy`, class
/// probabilities of the input's shape. `mean` divides by the summed weights
/// of the counted targets (their number without weights), as PyTorch does;
/// with probabilities by the number of rows.
fn class_loss(call: &Call, ins: &[Option<&Raw>], log_softmax: bool) -> Result<Vec<Raw>> {
    let name = if log_softmax { "cross_entropy" } else { "nll_loss" };
    let (x, t, w) = (input(ins, 0), input(ins, 1), opt(ins, 2));
    let xs = x.shape();
    if xs.is_empty() {
        crate::bail!(E_SHAPE, "{name}: input tensor should be 1D or more, got a 0-dim tensor");
    }
    if !x.dtype().is_float() {
        crate::bail!(E_DTYPE, "{name}: input must be floating, got {}", x.dtype().name());
    }
    let class_dim = usize::from(xs.len() >= 2);
    let classes = xs[class_dim] as usize;
    let outer = if class_dim == 1 { xs[0] as usize } else { 1 };
    let inner = numel(&xs[(class_dim + 1).min(xs.len())..]);
    let probs = t.dtype().is_float();
    let rows_shape: Vec<i64> = xs.iter().enumerate().filter(|&(i, _)| i != class_dim).map(|(_, &d)| d).collect();
    if probs {
        if !log_softmax {
            crate::bail!(E_DTYPE, "nll_loss: expected target dtype to be Long or Byte, but got {}", t.dtype().name());
        }
        if t.shape() != xs {
            crate::bail!(E_SHAPE, "cross_entropy: expected target size {} to match input size {} for class probabilities", fmt(t.shape()), fmt(xs));
        }
        if call.int("ignore_index").is_some_and(|i| i != -100) {
            crate::bail!(E_INVALID_ARG, "cross_entropy: ignore_index is not supported for floating point target");
        }
    } else {
        if !matches!(t.dtype(), DType::I64 | DType::U8) {
            crate::bail!(E_DTYPE, "{name}: expected target dtype to be Long or Byte, but got {}", t.dtype().name());
        }
        if t.shape() != rows_shape.as_slice() {
            crate::bail!(E_SHAPE, "{name}: expected target of shape {} for input of shape {}, got {}", fmt(&rows_shape), fmt(xs), fmt(t.shape()));
        }
    }
    if let Some(w) = w {
        if w.shape() != [classes as i64].as_slice() {
            crate::bail!(E_SHAPE, "{name}: weight tensor should be defined either for all {classes} classes or no classes but got weight tensor of shape: {}", fmt(w.shape()));
        }
        // PyTorch's nll_loss has no derivative for the class weights.
        if !probs && needs_grad(&[w]) {
            crate::bail!(E_AUTOGRAD, "{name}: the function 'nll_loss_forward' is not differentiable with respect to argument 'weight'");
        }
    }
    let ignore = call.int("ignore_index").unwrap_or(-100);
    let eps = if log_softmax { call.float("label_smoothing").unwrap_or(0.0) } else { 0.0 };
    if !(0.0..=1.0).contains(&eps) {
        crate::bail!(E_INVALID_ARG, "cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: {eps}");
    }
    let red = reduction(call);
    // The common case (an LM's loss) runs the fused, vectorised kernel the
    // typed `enkai_tensor_cross_entropy` runs: the same result, bit for bit.
    if log_softmax && !probs && w.is_none() && eps == 0.0 && red == Reduction::Mean && ignore == -100 && t.dtype() == DType::I64 {
        return Ok(vec![super::super::nn::cross_entropy(x, t)?]);
    }
    let rows = outer * inner;
    let ids: Vec<i64> = if probs { Vec::new() } else { convert(&t.contiguous()?, DType::I64)?.slice::<i64>().to_vec() };
    if let Some(&bad) = ids.iter().find(|&&v| v != ignore && !(0..classes as i64).contains(&v)) {
        crate::bail!(E_SHAPE, "{name}: Target {bad} is out of bounds.");
    }
    let dt = x.dtype();
    let geo = Geo { classes, inner, log_softmax };
    let (out, saved) = with_real!(name, dt, R => {
        let xr = real::<R>(x)?;
        let tr = if probs { Some(real::<R>(t)?) } else { None };
        let wr = w.map(real::<R>).transpose()?;
        let (xv, tv, wv) = (xr.slice::<R>(), tr.as_ref().map(|t| t.slice::<R>()), wr.as_ref().map(|w| w.slice::<R>()));
        let mut lse = vec![R::zero(); rows];
        let mut per_row = vec![0f64; rows];
        let mut denom = 0f64;
        for r in 0..rows {
            let at = |k: usize| xv[geo.at(r, k)];
            let wk = |k: usize| wv.map_or(R::one(), |w| w[k]);
            lse[r] = if log_softmax {
                let m = (0..classes).map(at).fold(R::neg_infinity(), R::max);
                let m = if m.is_finite() { m } else { R::zero() };
                m + (0..classes).map(|k| (at(k) - m).exp()).fold(R::zero(), |a, e| a + e).ln()
            } else {
                R::zero()
            };
            let logp = |k: usize| at(k) - lse[r];
            match tv {
                Some(tv) => {
                    // Smoothed probabilities: t·(1 − ε) + ε/C.
                    let tt = |k: usize| tv[geo.at(r, k)] * c::<R>(1.0 - eps) + c::<R>(eps / classes as f64);
                    per_row[r] = -(0..classes).map(|k| (wk(k) * tt(k) * logp(k)).to_f64().unwrap_or(f64::NAN)).sum::<f64>();
                    denom += 1.0;
                }
                None => {
                    let id = ids[r];
                    if id == ignore {
                        continue;
                    }
                    let wt = wk(id as usize).to_f64().unwrap_or(f64::NAN);
                    let nll = -wt * logp(id as usize).to_f64().unwrap_or(f64::NAN);
                    let smooth = if eps > 0.0 { -(0..classes).map(|k| (wk(k) * logp(k)).to_f64().unwrap_or(f64::NAN)).sum::<f64>() } else { 0.0 };
                    per_row[r] = (1.0 - eps) * nll + eps / classes as f64 * smooth;
                    denom += wt;
                }
            }
        }
        let out = match red {
            Reduction::None => Raw::from_vec::<R>(&rows_shape, &per_row.iter().map(|&v| c::<R>(v)).collect::<Vec<R>>())?,
            Reduction::Sum => Raw::from_vec::<R>(&[], &[c::<R>(per_row.iter().sum())])?,
            _ => Raw::from_vec::<R>(&[], &[c::<R>(per_row.iter().sum::<f64>() / denom)])?,
        };
        (convert(&out, dt)?, (xr, tr, wr, Raw::from_vec::<R>(&[rows as i64], &lse)?, denom))
    });
    let mut inputs = vec![x];
    if probs {
        inputs.push(t);
        if let Some(w) = w {
            inputs.push(w);
        }
    }
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let (tdt, wdt) = (t.dtype(), w.map(|w| w.dtype()));
    let back = if log_softmax { "CrossEntropyLossBackward0" } else { "NllLossBackward0" };
    Ok(vec![record_saving(out, back, &inputs, &inputs, false, move |g| {
        let (xr, tr, wr, lse, denom) = &saved;
        with_real!(name, xr.dtype(), R => {
            let gr = real::<R>(g)?;
            let gs = gr.slice::<R>();
            let (xv, tv, wv, lse) = (xr.slice::<R>(), tr.as_ref().map(|t| t.slice::<R>()), wr.as_ref().map(|w| w.slice::<R>()), lse.slice::<R>());
            let wk = |k: usize| wv.map_or(R::one(), |w| w[k]);
            let wsum = (0..classes).fold(R::zero(), |a, k| a + wk(k));
            let mut dx = vec![R::zero(); xv.len()];
            let mut dtg = tv.map(|t| vec![R::zero(); t.len()]);
            let mut dw = tv.and(wv).map(|w| vec![R::zero(); w.len()]);
            let (ceps, ceps_c) = (c::<R>(1.0 - eps), c::<R>(eps / classes as f64));
            for r in 0..rows {
                let gi = match red {
                    Reduction::None => gs[r],
                    Reduction::Sum => gs[0],
                    _ => gs[0] / c::<R>(*denom),
                };
                let p = |k: usize| if geo.log_softmax { (xv[geo.at(r, k)] - lse[r]).exp() } else { R::zero() };
                match tv {
                    Some(tv) => {
                        let tt = |k: usize| tv[geo.at(r, k)] * ceps + ceps_c;
                        let s = (0..classes).fold(R::zero(), |a, k| a + wk(k) * tt(k));
                        for k in 0..classes {
                            let i = geo.at(r, k);
                            let logp = xv[i] - lse[r];
                            dx[i] = gi * (p(k) * s - wk(k) * tt(k));
                            if let Some(d) = dtg.as_mut() {
                                d[i] = -gi * ceps * wk(k) * logp;
                            }
                            if let Some(d) = dw.as_mut() {
                                d[k] = d[k] - gi * tt(k) * logp;
                            }
                        }
                    }
                    None => {
                        let id = ids[r];
                        if id == ignore {
                            continue;
                        }
                        let id = id as usize;
                        let wt = wk(id);
                        if !geo.log_softmax {
                            dx[geo.at(r, id)] = -gi * wt;
                            continue;
                        }
                        for k in 0..classes {
                            let hit = if k == id { R::one() } else { R::zero() };
                            dx[geo.at(r, k)] = gi * (ceps * wt * (p(k) - hit) + ceps_c * (p(k) * wsum - wk(k)));
                        }
                    }
                }
            }
            let mut grads = vec![Some(convert(&Raw::from_vec::<R>(xr.shape(), &dx)?, dt)?)];
            if let Some(d) = dtg {
                grads.push(Some(convert(&Raw::from_vec::<R>(xr.shape(), &d)?, tdt)?));
            }
            if let (Some(d), Some(wdt)) = (dw, wdt) {
                grads.push(Some(convert(&Raw::from_vec::<R>(&[classes as i64], &d)?, wdt)?));
            }
            Ok(grads)
        })
    })])
}

/// A class loss's layout: rows `(outer, inner)` of `classes` values `inner` apart.
#[derive(Clone, Copy)]
struct Geo {
    classes: usize,
    inner: usize,
    log_softmax: bool,
}

impl Geo {
    /// The flat index of class `k` of row `r`.
    #[inline]
    fn at(&self, r: usize, k: usize) -> usize {
        let (o, s) = (r / self.inner.max(1), r % self.inner.max(1));
        (o * self.classes + k) * self.inner + s
    }
}
