//! Native kernels of the op table's layers (`table/nn.rs`): `linear`,
//! `layer_norm`, `rms_norm` and `scaled_dot_product_attention`, with
//! `torch.nn.functional`'s semantics. Each computes in f32 (fp32, bf16,
//! fp16) or f64 and rounds its result once.

use super::super::attention::{self, Problem};
use super::super::autograd::{needs_grad, record_saving};
use super::super::elem::{with_elem, Elem};
use super::super::fused::Real;
use super::super::kernels::{copy_into, Ptr};
use super::super::ops::{convert, full, reshape, sum_to, transpose};
use super::super::nn::with_real;
use super::super::par;
use super::super::tensor::{numel, Raw};
use super::{input, real, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::{self, Call};
use num_traits::{FromPrimitive, Zero};

/// Optional tensor input `i` (left out or 0).
fn opt<'a>(ins: &[Option<&'a Raw>], i: usize) -> Option<&'a Raw> {
    ins.get(i).copied().flatten()
}

// ------------------------------------------------------------------ linear

/// `F.linear(input, weight, bias)`: `input @ weight.T + bias`, `weight` `[out, in]`.
fn linear(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, w) = (input(ins, 0), input(ins, 1));
    let wt = if w.dim() == 2 { transpose(w, 0, 1)? } else { w.clone() };
    Ok(vec![super::super::linear(x, &wt, opt(ins, 2))?])
}

// ------------------------------------------------------------------ norms

/// The rows a norm over `normalized_shape` works on, after PyTorch's checks
/// of the input and the affine parameters.
fn norm_shape(op: &str, x: &Raw, shape: &[i64], params: &[(&str, Option<&Raw>)]) -> Result<usize> {
    let xs = x.shape();
    if shape.is_empty() || shape.len() > xs.len() || xs[xs.len() - shape.len()..] != *shape {
        crate::bail!(E_SHAPE, "{op}: given normalized_shape={}, expected input with shape [*, {}], but got input of size {}", fmt(shape), fmt(shape).trim_matches(['[', ']']), fmt(xs));
    }
    for (name, p) in params {
        if let Some(p) = p.filter(|p| p.shape() != shape) {
            crate::bail!(E_SHAPE, "{op}: expected {name} to be of same shape as normalized_shape, but got {name} of shape {} and normalized_shape = {}", fmt(p.shape()), fmt(shape));
        }
    }
    Ok(numel(shape))
}

/// `F.layer_norm(input, normalized_shape, weight, bias, eps)`.
fn layer_norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, w, b) = (input(ins, 0), opt(ins, 1), opt(ins, 2));
    let shape = call.ints("normalized_shape").unwrap_or(&[]);
    norm_shape("layer_norm", x, shape, &[("weight", w), ("bias", b)])?;
    let ones;
    let w = match w {
        Some(w) => w,
        None => {
            ones = full(shape, x.dtype(), 1.0)?;
            &ones
        }
    };
    Ok(vec![super::super::nn::layernorm(x, w, b, call.float("eps").unwrap_or(1e-5))?])
}

/// `F.rms_norm(input, normalized_shape, weight, eps)`: `x · rsqrt(mean(x²) + eps) · weight`
/// over the last `len(normalized_shape)` dims; `eps` None is the computing
/// type's machine epsilon, as PyTorch takes it.
fn rms_norm(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, w) = (input(ins, 0), opt(ins, 1));
    let shape = call.ints("normalized_shape").unwrap_or(&[]);
    let n = norm_shape("rms_norm", x, shape, &[("weight", w)])?;
    let out_dt = w.map_or(x.dtype(), |w| vocab::promote_types(x.dtype(), w.dtype()));
    let (out, saved) = with_real!("rms_norm", out_dt, R => {
        let eps = call.float("eps").unwrap_or(if R::DT == DType::F64 { f64::EPSILON } else { f32::EPSILON as f64 });
        let xr = real::<R>(x)?;
        let wr = w.map(real::<R>).transpose()?;
        let rows = xr.numel().checked_div(n).unwrap_or(0);
        let (y, rstd) = (Raw::empty(x.shape(), R::DT)?, Raw::empty(&[rows as i64], R::DT)?);
        rms_rows::<R>(xr.slice(), wr.as_ref().map(|w| w.slice()), n, R::from_f64(eps).unwrap_or(R::zero()), y.slice_mut(), rstd.slice_mut());
        (convert(&y, out_dt)?, (xr, wr, rstd))
    });
    let inputs: Vec<&Raw> = [Some(x), w].into_iter().flatten().collect();
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let (xd, wd) = (x.dtype(), w.map(|w| w.dtype()));
    Ok(vec![record_saving(out, "RmsNormBackward0", &inputs, &inputs, false, move |g| {
        let (xr, wr, rstd) = &saved;
        let (dx, dw) = with_real!("rms_norm", xr.dtype(), R => {
            let gr = real::<R>(g)?;
            let dx = Raw::empty(xr.shape(), R::DT)?;
            let dw = wr.as_ref().map(|w| Raw::zeros(w.shape(), R::DT)).transpose()?;
            rms_back_rows::<R>(gr.slice(), xr.slice(), wr.as_ref().map(|w| w.slice()), rstd.slice(), n, dx.slice_mut(), dw.as_ref().map(|d| d.slice_mut()));
            (dx, dw)
        });
        let mut grads = vec![Some(convert(&dx, xd)?)];
        if let (Some(dw), Some(wd)) = (dw, wd) {
            grads.push(Some(convert(&dw, wd)?));
        }
        Ok(grads)
    })])
}

/// Rows per task of the norm loops, so that a task is about `par::GRAIN` elements.
fn row_block(n: usize) -> usize {
    (par::GRAIN / n.max(1)).max(1)
}

fn rms_rows<R: Real>(x: &[R], w: Option<&[R]>, n: usize, eps: R, y: &mut [R], rstd: &mut [R]) {
    let rows = rstd.len();
    let block = row_block(n);
    let (py, pr) = (Ptr(y.as_mut_ptr()), Ptr(rstd.as_mut_ptr()));
    let nn = R::from_usize(n).unwrap_or(R::one());
    let task = |t: usize| {
        for r in t * block..rows.min((t + 1) * block) {
            let xs = &x[r * n..(r + 1) * n];
            // SAFETY: task t writes its own rows.
            let ys = unsafe { std::slice::from_raw_parts_mut(py.at((r * n) as isize), n) };
            let ms = xs.iter().fold(R::zero(), |a, &v| a + v * v) / nn;
            let rs = R::one() / (ms + eps).sqrt();
            unsafe { *pr.at(r as isize) = rs };
            match w {
                Some(w) => ys.iter_mut().zip(xs.iter().zip(w)).for_each(|(y, (&x, &w))| *y = x * rs * w),
                None => ys.iter_mut().zip(xs).for_each(|(y, &x)| *y = x * rs),
            }
        }
    };
    par::for_each(rows.div_ceil(block), &task);
}

/// `dx = rstd · (g·w) - x · rstd³ · mean(g·w·x)` per row; `dw = Σ_rows g · x · rstd`.
fn rms_back_rows<R: Real>(g: &[R], x: &[R], w: Option<&[R]>, rstd: &[R], n: usize, dx: &mut [R], dw: Option<&mut [R]>) {
    let rows = rstd.len();
    let nn = R::from_usize(n).unwrap_or(R::one());
    let block = row_block(n);
    let pd = Ptr(dx.as_mut_ptr());
    let task = |t: usize| {
        for r in t * block..rows.min((t + 1) * block) {
            let (gs, xs, rs) = (&g[r * n..(r + 1) * n], &x[r * n..(r + 1) * n], rstd[r]);
            // SAFETY: task t writes its own rows.
            let ds = unsafe { std::slice::from_raw_parts_mut(pd.at((r * n) as isize), n) };
            let gw = |i: usize| w.map_or(gs[i], |w| gs[i] * w[i]);
            let dot = (0..n).fold(R::zero(), |a, i| a + gw(i) * xs[i]) / nn;
            let c = rs * rs * rs * dot;
            for (i, d) in ds.iter_mut().enumerate() {
                *d = rs * gw(i) - xs[i] * c;
            }
        }
    };
    par::for_each(rows.div_ceil(block), &task);
    if let Some(dw) = dw {
        // In row order: the sum does not depend on the thread count.
        for r in 0..rows {
            let (gs, xs, rs) = (&g[r * n..(r + 1) * n], &x[r * n..(r + 1) * n], rstd[r]);
            for ((d, &g), &x) in dw.iter_mut().zip(gs).zip(xs) {
                *d = *d + g * x * rs;
            }
        }
    }
}

// ------------------------------------------------------------------ attention

/// For every entry of the batch shape `out`, the flat entry of a tensor
/// with batch shape `t` (right-aligned, size-1 dims broadcast) that it
/// reads; `rep` > 1 maps `rep` consecutive heads (the last batch dim) to one
/// (grouped-query attention).
fn batch_map(out: &[i64], t: &[i64], rep: usize) -> Vec<usize> {
    let (n, off) = (numel(out), out.len() - t.len());
    let strides = super::super::tensor::contiguous_strides(t);
    (0..n)
        .map(|mut f| {
            let mut src = 0;
            for d in (0..out.len()).rev() {
                let i = f % out[d] as usize;
                f /= out[d] as usize;
                if d >= off {
                    let td = d - off;
                    let i = if t[td] == 1 { 0 } else if rep > 1 && d + 1 == out.len() { i / rep } else { i };
                    src += i * strides[td] as usize;
                }
            }
            src
        })
        .collect()
}

/// Sums the slabs of `full` (one per output batch entry, `slab` elements)
/// into the entries of a tensor of `shape` they were read from (`at`); no
/// copy when each entry was read once, in order.
fn gather_sum<R: Real + Elem>(full: &Raw, at: &[usize], slab: usize, shape: &[i64]) -> Result<Raw> {
    if at.iter().enumerate().all(|(i, &a)| a == i) && numel(shape) == full.numel() {
        return reshape(full, shape);
    }
    let out = Raw::zeros(shape, R::DT)?;
    let (o, f) = (out.slice_mut::<R>(), full.slice::<R>());
    for (b, &src) in at.iter().enumerate() {
        for (d, &v) in o[src * slab..(src + 1) * slab].iter_mut().zip(&f[b * slab..(b + 1) * slab]) {
            *d = *d + v;
        }
    }
    Ok(out)
}

/// The shapes of one `scaled_dot_product_attention` call, checked as PyTorch checks them.
struct Shapes {
    batch: Vec<i64>,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
    rep: usize,
}

const SDPA: &str = "scaled_dot_product_attention";

fn sdpa_shapes(q: &Raw, k: &Raw, v: &Raw, mask: Option<&Raw>, gqa: bool) -> Result<Shapes> {
    if q.dim() < 2 || k.dim() < 2 || v.dim() < 2 {
        crate::bail!(E_SHAPE, "{SDPA}: expected query, key and value to all be at least 2 dimensional, got {}, {} and {}", fmt(q.shape()), fmt(k.shape()), fmt(v.shape()));
    }
    let dt = q.dtype();
    if !dt.is_float() || k.dtype() != dt || v.dtype() != dt {
        crate::bail!(E_DTYPE, "{SDPA}: expected query, key and value to have the same floating dtype, got {}, {} and {}", dt.name(), k.dtype().name(), v.dtype().name());
    }
    if let Some(m) = mask.filter(|m| !matches!(m.dtype(), DType::Bool | DType::F32) && m.dtype() != dt) {
        crate::bail!(E_DTYPE, "{SDPA}: expected attn_mask dtype to be bool or float or to match query dtype, got {} and query {}", m.dtype().name(), dt.name());
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (l, s, e, ev) = (qs[qs.len() - 2], ks[ks.len() - 2], qs[qs.len() - 1], vs[vs.len() - 1]);
    if ks[ks.len() - 1] != e || vs[vs.len() - 2] != s {
        crate::bail!(E_SHAPE, "{SDPA}: query {}, key {} and value {} do not fit: key needs [*, S, {e}], value [*, S, Ev] with the key's S", fmt(qs), fmt(ks), fmt(vs));
    }
    let (qb, mut kb, mut vb) = (qs[..qs.len() - 2].to_vec(), ks[..ks.len() - 2].to_vec(), vs[..vs.len() - 2].to_vec());
    let mut rep = 1;
    if gqa && !qb.is_empty() && !kb.is_empty() && !vb.is_empty() {
        let (hq, hk, hv) = (qb[qb.len() - 1], kb[kb.len() - 1], vb[vb.len() - 1]);
        if hk != hv || hk == 0 || hq % hk != 0 {
            crate::bail!(E_SHAPE, "{SDPA}: with enable_gqa, the number of heads in key and value must be equal and divide the number in query, got {hq}, {hk} and {hv}");
        }
        rep = (hq / hk) as usize;
        *kb.last_mut().unwrap_or(&mut 0) = hq;
        *vb.last_mut().unwrap_or(&mut 0) = hq;
    }
    let batch = vocab::broadcast(&qb, &kb).and_then(|b| vocab::broadcast(&b, &vb));
    let Some(batch) = batch else {
        crate::bail!(E_SHAPE, "{SDPA}: the batch dims of query {}, key {} and value {} do not broadcast", fmt(qs), fmt(ks), fmt(vs));
    };
    if let Some(m) = mask {
        let full: Vec<i64> = batch.iter().copied().chain([l, s]).collect();
        if vocab::broadcast(m.shape(), &full).as_deref() != Some(&full[..]) {
            crate::bail!(E_SHAPE, "{SDPA}: attn_mask {} does not broadcast to the scores' shape {}", fmt(m.shape()), fmt(&full));
        }
    }
    Ok(Shapes { batch, l: l as usize, s: s as usize, e: e as usize, ev: ev as usize, rep })
}

/// `F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
/// is_causal, scale=, enable_gqa=)` on the fused kernel (`native::attention`).
fn scaled_dot_product_attention(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (q, k, v, mask) = (input(ins, 0), input(ins, 1), input(ins, 2), opt(ins, 3));
    let drop = call.float("dropout_p").unwrap_or(0.0); // in [0, 1]: checked by core
    let sh = sdpa_shapes(q, k, v, mask, call.bool("enable_gqa").unwrap_or(false))?;
    with_real!(SDPA, q.dtype(), R => sdpa_run::<R>(call, q, k, v, mask, drop, sh))
}

/// One call's operands in the computing type, kept by the backward pass.
struct Attn<R> {
    sh: Shapes,
    scale: R,
    causal: bool,
    q_at: Vec<usize>,
    k_at: Vec<usize>,
    v_at: Vec<usize>,
    q: Raw,
    k: Raw,
    v: Raw,
    /// The mask as an additive bias `[mask batch.., L, S]`, the entry each
    /// output batch entry reads, and the mask's batch shape; or zeros.
    bias: Option<(Raw, Vec<usize>, Vec<i64>)>,
    no_bias: Vec<usize>,
    /// Dropout's multipliers `[batch, L, S]`.
    keep: Option<Raw>,
}

impl<R: Real + Elem> Attn<R> {
    fn problem(&self) -> Problem<'_, R> {
        let sh = &self.sh;
        Problem {
            l: sh.l,
            s: sh.s,
            e: sh.e,
            ev: sh.ev,
            scale: self.scale,
            causal: self.causal,
            q_at: &self.q_at,
            k_at: &self.k_at,
            v_at: &self.v_at,
            bias_at: self.bias.as_ref().map_or(&self.no_bias[..], |b| &b.1[..]),
            q: self.q.slice(),
            k: self.k.slice(),
            v: self.v.slice(),
            bias: self.bias.as_ref().map(|b| b.0.slice::<R>()),
            keep: self.keep.as_ref().map(|z| z.slice::<R>()),
        }
    }
}

fn sdpa_run<R: Real + Elem>(call: &Call, q: &Raw, k: &Raw, v: &Raw, mask: Option<&Raw>, drop: f64, sh: Shapes) -> Result<Vec<Raw>> {
    let (l, s, e, ev) = (sh.l, sh.s, sh.e, sh.ev);
    let batch = numel(&sh.batch);
    let bshape = |t: &Raw| t.shape()[..t.dim() - 2].to_vec();
    // The mask as an additive bias over its own batch dims, its [L, S] expanded.
    let bias = match mask {
        Some(m) => {
            let mb: Vec<i64> = if m.dim() > 2 { m.shape()[..m.dim() - 2].to_vec() } else { vec![] };
            let shape: Vec<i64> = mb.iter().copied().chain([l as i64, s as i64]).collect();
            let dst = Raw::empty(&shape, R::DT)?;
            with_elem!(m.dtype(), S => copy_into::<S, R>(&dst, m));
            if m.dtype() == DType::Bool {
                dst.slice_mut::<R>().iter_mut().for_each(|x| *x = if *x == R::zero() { R::neg_infinity() } else { R::zero() });
            }
            Some((dst, batch_map(&sh.batch, &mb, 1), mb))
        }
        None => None,
    };
    let keep = if drop > 0.0 {
        let z = Raw::empty(&[batch as i64, l as i64, s as i64], R::DT)?;
        super::super::rng::bernoulli_scaled(&z, 1.0 - drop, if drop < 1.0 { 1.0 / (1.0 - drop) } else { 0.0 });
        Some(z)
    } else {
        None
    };
    let scale = call.float("scale").unwrap_or(1.0 / (e as f64).sqrt());
    let at = Attn {
        scale: R::from_f64(scale).unwrap_or(R::one()),
        causal: call.bool("is_causal").unwrap_or(false),
        q_at: batch_map(&sh.batch, &bshape(q), 1),
        k_at: batch_map(&sh.batch, &bshape(k), sh.rep),
        v_at: batch_map(&sh.batch, &bshape(v), sh.rep),
        q: real::<R>(q)?,
        k: real::<R>(k)?,
        v: real::<R>(v)?,
        bias,
        no_bias: vec![0; batch],
        keep,
        sh,
    };
    let oshape: Vec<i64> = at.sh.batch.iter().copied().chain([l as i64, ev as i64]).collect();
    let (out, lse) = (Raw::empty(&oshape, R::DT)?, Raw::empty(&[batch as i64, l as i64], R::DT)?);
    attention::forward(&at.problem(), out.slice_mut(), lse.slice_mut());
    let result = convert(&out, q.dtype())?;
    let inputs: Vec<&Raw> = [Some(q), Some(k), Some(v), mask].into_iter().flatten().collect();
    if !needs_grad(&inputs) {
        return Ok(vec![result]);
    }
    let dts: Vec<(DType, Vec<i64>)> = inputs.iter().map(|t| (t.dtype(), t.shape().to_vec())).collect();
    let float_mask = mask.is_some_and(|m| m.dtype().is_float() && m.requires_grad());
    Ok(vec![record_saving(result, "ScaledDotProductFlashAttentionForCpuBackward0", &inputs, &inputs, false, move |g| {
        let gr = real::<R>(g)?;
        let full = |n: usize| Raw::empty(&[(batch * n) as i64], R::DT);
        let (dq, dk, dv) = (full(l * e)?, full(s * e)?, full(s * ev)?);
        let db = if float_mask { Some(full(l * s)?) } else { None };
        attention::backward(&at.problem(), out.slice(), lse.slice(), gr.slice(), dq.slice_mut(), dk.slice_mut(), dv.slice_mut(), db.as_ref().map(|d| d.slice_mut()));
        let back = |d: &Raw, at: &[usize], slab: usize, i: usize| -> Result<Option<Raw>> {
            let (dt, shape) = &dts[i];
            Ok(Some(convert(&gather_sum::<R>(d, at, slab, shape)?, *dt)?))
        };
        let mut grads = vec![back(&dq, &at.q_at, l * e, 0)?, back(&dk, &at.k_at, s * e, 1)?, back(&dv, &at.v_at, s * ev, 2)?];
        match (db, at.bias.as_ref()) {
            (Some(db), Some((_, bat, mb))) => {
                let shape: Vec<i64> = mb.iter().copied().chain([l as i64, s as i64]).collect();
                let d = gather_sum::<R>(&db, bat, l * s, &shape)?;
                grads.push(Some(convert(&sum_to(&d, &dts[3].1)?, dts[3].0)?));
            }
            _ if dts.len() > 3 => grads.push(None),
            _ => {}
        }
        Ok(grads)
    })])
}

// ------------------------------------------------------------ embedding, one_hot, pad

/// `F.embedding(input, weight, padding_idx, scale_grad_by_freq)`; core has
/// made a negative `padding_idx` count from the end, as F does.
fn embedding(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (ids, w) = (input(ins, 0), input(ins, 1));
    Ok(vec![super::super::nn::embedding_ext(w, ids, call.int("padding_idx"), call.bool("scale_grad_by_freq").unwrap_or(false))?])
}

/// `F.one_hot(tensor, num_classes)`: int64 `[*, num_classes]`; -1 infers
/// the count from the largest class, as PyTorch does.
fn one_hot(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if x.dtype() != DType::I64 {
        crate::bail!(E_DTYPE, "one_hot is only applicable to index tensor of type LongTensor, got {}", x.dtype().name());
    }
    let v = x.contiguous()?.slice::<i64>().to_vec();
    let mut n = call.int("num_classes").unwrap_or(-1);
    if n == -1 {
        n = match v.iter().max() {
            Some(&m) => m + 1,
            None => crate::bail!(E_INVALID_ARG, "one_hot: Can not infer total number of classes from empty tensor."),
        };
    } else if n < -1 {
        crate::bail!(E_INVALID_ARG, "one_hot: num_classes should be -1 or non-negative, got {n}");
    }
    if v.iter().any(|&c| c < 0) {
        crate::bail!(E_INVALID_ARG, "one_hot: Class values must be non-negative.");
    }
    if v.iter().any(|&c| c >= n) {
        crate::bail!(E_INVALID_ARG, "one_hot: Class values must be smaller than num_classes.");
    }
    let mut shape = x.shape().to_vec();
    shape.push(n);
    if v.len().checked_mul(n as usize).and_then(|e| e.checked_mul(8)).is_none_or(|b| b > isize::MAX as usize) {
        crate::bail!(E_RESOURCE, "one_hot: {} x {n} elements are too many", v.len());
    }
    let out = Raw::zeros(&shape, DType::I64)?;
    let o = out.slice_mut::<i64>();
    for (r, &c) in v.iter().enumerate() {
        o[r * n as usize + c as usize] = 1;
    }
    Ok(vec![out])
}

#[derive(Clone, Copy, PartialEq)]
enum PadMode {
    Constant,
    Reflect,
    Replicate,
    Circular,
}

/// For each dim of the result, the source index of each position in the
/// input (-1: the constant), after `F.pad`'s checks of `pad` and `mode`.
fn pad_maps(x: &[i64], pad: &[i64], mode: PadMode, mode_name: &str) -> Result<Vec<Vec<i64>>> {
    if pad.len() % 2 != 0 {
        crate::bail!(E_INVALID_ARG, "pad: Padding length must be divisible by 2");
    }
    let k = pad.len() / 2;
    if k > x.len() {
        crate::bail!(E_INVALID_ARG, "pad: Padding length should be less than or equal to two times the input dimension but got padding length {} and input of dimension {}", pad.len(), x.len());
    }
    if mode != PadMode::Constant {
        // PyTorch's non-constant modes pad the last 1-3 dims of a batched or unbatched input.
        if k == 0 || k > 3 || !(x.len() == k + 1 || x.len() == k + 2) {
            crate::bail!(E_UNSUPPORTED, "pad: Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now (mode {mode_name}, padding length {}, input of dimension {})", pad.len(), x.len());
        }
    }
    let mut maps = Vec::with_capacity(x.len());
    let padding = |d: usize| {
        let from_end = x.len() - 1 - d;
        if from_end < k { (pad[2 * from_end], pad[2 * from_end + 1]) } else { (0, 0) }
    };
    // The result's size, checked before any index map is built (a map is as long as its dim).
    let mut total = 1usize;
    for (d, &n) in x.iter().enumerate() {
        let (before, after) = padding(d);
        let m = n.checked_add(before).and_then(|m| m.checked_add(after)).ok_or_else(|| crate::err!(E_RESOURCE, "pad: the padded size of dim {d} overflows"))?;
        total = total.checked_mul(m.max(0) as usize).filter(|&t| t <= isize::MAX as usize / 16).ok_or_else(|| crate::err!(E_RESOURCE, "pad: the result would be too large"))?;
    }
    for (d, &n) in x.iter().enumerate() {
        let from_end = x.len() - 1 - d;
        let (before, after) = padding(d);
        let m = n + before + after;
        if m < 0 || (from_end < k && m == 0 && n > 0 && mode != PadMode::Constant) {
            crate::bail!(E_SHAPE, "pad: the padded size of dim {d} would be {m} (input size {n}, padding ({before}, {after}))");
        }
        let ok = match mode {
            _ if from_end >= k => true,
            PadMode::Constant => true,
            PadMode::Reflect => before < n && after < n && before >= 0 && after >= 0,
            PadMode::Replicate => n > 0 && before >= 0 && after >= 0,
            PadMode::Circular => before <= n && after <= n && before >= 0 && after >= 0,
        };
        if !ok {
            crate::bail!(E_SHAPE, "pad: padding ({before}, {after}) of dim {d} of input {} is out of range for mode {mode_name} (reflect: less than the size; circular: at most the size)", fmt(x));
        }
        // An empty result needs no maps (and a huge padded dim beside an empty one would build one).
        maps.push(
            (0..if total == 0 { 0 } else { m.max(0) })
                .map(|o| {
                    let i = o - before;
                    match mode {
                        _ if (0..n).contains(&i) => i,
                        PadMode::Constant => -1,
                        PadMode::Reflect => if i < 0 { -i } else { 2 * (n - 1) - i },
                        PadMode::Replicate => i.clamp(0, n - 1),
                        PadMode::Circular => i.rem_euclid(n),
                    }
                })
                .collect(),
        );
    }
    Ok(maps)
}

/// Calls `f(result index, input index or None)` for every result element, in order.
fn pad_walk(x: &[i64], maps: &[Vec<i64>], mut f: impl FnMut(usize, Option<usize>)) {
    let out: Vec<usize> = maps.iter().map(Vec::len).collect();
    let total: usize = out.iter().product();
    let strides = super::super::tensor::contiguous_strides(x);
    let mut idx = vec![0usize; out.len()];
    for flat in 0..total {
        let mut src = Some(0usize);
        for (d, &i) in idx.iter().enumerate() {
            let s = maps[d][i];
            src = if s < 0 { None } else { src.map(|a| a + s as usize * strides[d] as usize) };
        }
        f(flat, src);
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// `F.pad(input, pad, mode, value)`: modes constant (negative pads crop),
/// reflect, replicate and circular; the gradient sums each result position
/// into the input position it was read from.
fn pad(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let mode_name = call.str("mode").unwrap_or("constant");
    let mode = match mode_name {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "replicate" => PadMode::Replicate,
        "circular" => PadMode::Circular,
        m => crate::bail!(E_INVALID_ARG, "pad: Unrecognised padding mode {m}"),
    };
    // PyTorch's reflect and replicate kernels take every dtype but bool.
    if matches!(mode, PadMode::Reflect | PadMode::Replicate) && x.dtype() == DType::Bool {
        crate::bail!(E_DTYPE, "pad: mode {mode_name} is not implemented for bool");
    }
    let value = call.float("value");
    if mode != PadMode::Constant && value.is_some() {
        crate::bail!(E_INVALID_ARG, "pad: Padding mode \"{mode_name}\" doesn't take in value argument");
    }
    let pads = call.ints("pad").unwrap_or(&[]);
    let maps = pad_maps(x.shape(), pads, mode, mode_name)?;
    let k = pads.len() / 2;
    let shape: Vec<i64> = x.shape().iter().enumerate().map(|(d, &n)| {
        let e = x.dim() - 1 - d;
        if e < k { n + pads[2 * e] + pads[2 * e + 1] } else { n }
    }).collect();
    let xc = x.contiguous()?;
    let out = Raw::empty(&shape, x.dtype())?;
    if out.numel() > 0 {
        with_elem!(x.dtype(), T => {
            let fill = <T as Elem>::down(<<T as Elem>::Acc as super::super::elem::Arith>::from_f64(value.unwrap_or(0.0)));
            let (src, o) = (xc.slice::<T>(), out.slice_mut::<T>());
            pad_walk(x.shape(), &maps, |i, s| o[i] = s.map_or(fill, |s| src[s]));
        });
    }
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let xs = x.shape().to_vec();
    Ok(vec![super::super::autograd::record(out, "PadBackward0", &[x], move |g| {
        let gc = g.contiguous()?;
        if gc.numel() == 0 {
            return Ok(vec![Some(Raw::zeros(&xs, g.dtype())?)]);
        }
        let dx = with_elem!(g.dtype(), T => {
            let gs = gc.slice::<T>();
            let mut acc = vec![<T as Elem>::Acc::default(); numel(&xs)];
            pad_walk(&xs, &maps, |o, s| {
                if let Some(s) = s {
                    acc[s] = super::super::elem::Arith::add(acc[s], gs[o].up());
                }
            });
            Raw::from_vec::<T>(&xs, &acc.into_iter().map(<T as Elem>::down).collect::<Vec<T>>())?
        });
        Ok(vec![Some(dx)])
    })])
}

/// `F.dropout(input, p, training)`.
fn dropout(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![super::super::nn::dropout(input(ins, 0), call.float("p").unwrap_or(0.5), call.bool("training").unwrap_or(true))?])
}

/// `F.dropout2d(input, p, training)`, ATen's `feature_dropout`: whole
/// channels (dims 0 and 1 index them) are zeroed, the rest scaled by `1/(1-p)`.
fn dropout2d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (p, train) = (call.float("p").unwrap_or(0.5), call.bool("training").unwrap_or(true));
    if x.dim() < 2 {
        crate::bail!(E_SHAPE, "dropout2d: Feature dropout requires at least 2 dimensions in the input, got {}", fmt(x.shape()));
    }
    if p == 0.0 || !train || x.numel() == 0 {
        return Ok(vec![x.clone()]);
    }
    if !x.dtype().is_float() {
        crate::bail!(E_DTYPE, "dropout2d needs a floating dtype, got {}", x.dtype().name());
    }
    let mut noise_shape = vec![1i64; x.dim()];
    noise_shape[..2].copy_from_slice(&x.shape()[..2]);
    let noise = if p >= 1.0 { Raw::zeros(&noise_shape, x.dtype())? } else { Raw::empty(&noise_shape, x.dtype())? };
    if p < 1.0 {
        // As `_dropout_impl`: bernoulli(1 - p), then divided by 1 - p (in f32 but for f64).
        let keep = 1.0 - p;
        let scale = if x.dtype() == DType::F64 { 1.0 / keep } else { f64::from(1.0 / keep as f32) };
        super::super::rng::bernoulli_scaled(&noise, keep, scale);
    }
    Ok(vec![super::super::ops::binary(crate::vocab::kinds::Binary::Mul, x, &noise)?])
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("dropout", dropout),
    ("dropout2d", dropout2d),
    ("linear", linear),
    ("layer_norm", layer_norm),
    ("rms_norm", rms_norm),
    ("scaled_dot_product_attention", scaled_dot_product_attention),
    ("embedding", embedding),
    ("one_hot", one_hot),
    ("pad", pad),
];
