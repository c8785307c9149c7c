//! The fused nn ops (gelu, softmax, masked softmax, layer norm, embedding,
//! cross-entropy, dropout) over the row kernels of `fused.rs`. Each op
//! brings its operands to contiguous rows of its computing type (f32 for
//! fp32/bf16/fp16, f64 for fp64; no copy when they already are), runs the
//! kernel, and rounds the result to the input's dtype once.

use super::autograd::{needs_grad, record, record_saving};
use super::elem::{with_elem, B8, Elem};
use super::fused;
use super::kernels::{cast_to, copy_into};
use super::ops::{convert, norm_dim};
use super::tensor::{contiguous_strides, Raw};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;

/// Runs `$body` with `$R` the computing type of floating dtype `$dt`.
macro_rules! with_real {
    ($op:expr, $dt:expr, $R:ident => $body:expr) => {
        match $dt {
            DType::F64 => {
                type $R = f64;
                $body
            }
            DType::F32 | DType::BF16 | DType::F16 => {
                type $R = f32;
                $body
            }
            d => crate::bail!(E_DTYPE, "{} needs a floating dtype, got {}", $op, d.name()),
        }
    };
}
pub(super) use with_real;

/// `x` with `dim` swapped to the end (a view).
fn dim_last(x: &Raw, dim: usize) -> Raw {
    let (mut s, mut st) = (x.shape().to_vec(), x.strides().to_vec());
    if let Some(last) = s.len().checked_sub(1) {
        s.swap(dim, last);
        st.swap(dim, last);
    }
    x.view_as(s, st, x.0.offset)
}

/// Contiguous rows of `R` along `dim`: `x` itself when it already is.
fn rows<R: Elem>(x: &Raw, dim: usize) -> Result<Raw> {
    let v = dim_last(x, dim);
    if v.dtype() == R::DT && v.is_contiguous() {
        return Ok(v);
    }
    with_elem!(v.dtype(), S => cast_to::<S, R>(&v))
}

/// The rows computed by `rows` put back: a contiguous tensor of `x`'s shape and `dt`.
fn unrows(y: Raw, dim: usize, dt: DType) -> Result<Raw> {
    let back = dim_last(&y, dim);
    if back.dtype() == dt && back.is_contiguous() {
        return Ok(back);
    }
    with_elem!(y.dtype(), S => with_elem!(dt, D => cast_to::<S, D>(&back)))
}

fn row_len(t: &Raw) -> usize {
    t.shape().last().map_or(1, |&n| n as usize)
}

/// `kernel(rows, row length, out)` over the rows of `x` along `d` in the
/// computing type `R`; the result in `x`'s shape, in dtype `dt`.
fn map_rows<R: Elem>(x: &Raw, d: usize, dt: DType, kernel: impl FnOnce(&[R], usize, &mut [R])) -> Result<Raw> {
    let xr = rows::<R>(x, d)?;
    let y = Raw::empty(xr.shape(), R::DT)?;
    kernel(xr.slice::<R>(), row_len(&xr), y.slice_mut::<R>());
    unrows(y, d, dt)
}

/// As `map_rows`, for a kernel of two row-aligned inputs (a gradient and
/// what the forward saved).
fn map_rows2<R: Elem>(a: &Raw, b: &Raw, d: usize, dt: DType, kernel: impl FnOnce(&[R], &[R], usize, &mut [R])) -> Result<Raw> {
    let (ar, br) = (rows::<R>(a, d)?, rows::<R>(b, d)?);
    let y = Raw::empty(br.shape(), R::DT)?;
    kernel(ar.slice::<R>(), br.slice::<R>(), row_len(&br), y.slice_mut::<R>());
    unrows(y, d, dt)
}

pub fn gelu(x: &Raw) -> Result<Raw> {
    let d = x.dim().saturating_sub(1);
    if !needs_grad(&[x]) {
        return with_real!("gelu", x.dtype(), R => map_rows::<R>(x, d, x.dtype(), |x, _, y| fused::gelu_fwd(x, y)));
    }
    // Φ(x) is kept, in the computing type, for the backward pass: it then
    // evaluates only exp, not erf again (erf is most of GELU's cost).
    let (out, xr, cdf) = with_real!("gelu", x.dtype(), R => {
        let xr = rows::<R>(x, d)?;
        let (y, cdf) = (Raw::empty(xr.shape(), R::DT)?, Raw::empty(xr.shape(), R::DT)?);
        fused::gelu_fwd_cdf(xr.slice::<R>(), y.slice_mut::<R>(), cdf.slice_mut::<R>());
        (unrows(y, d, x.dtype())?, xr, cdf)
    });
    Ok(record_saving(out, "GeluBackward", &[x], &[x], false, move |g| {
        let dx = with_real!("gelu", xr.dtype(), R => {
            let gr = rows::<R>(g, d)?;
            let dx = Raw::empty(xr.shape(), R::DT)?;
            fused::gelu_bwd_cdf(gr.slice::<R>(), xr.slice::<R>(), cdf.slice::<R>(), dx.slice_mut::<R>());
            unrows(dx, d, g.dtype())?
        });
        Ok(vec![Some(dx)])
    }))
}

/// The mask as `x`'s shape (as `torch._masked_softmax` expands it), true = masked out.
fn expand_mask(x: &Raw, mask: &Raw, mask_type: Option<i64>) -> Result<Raw> {
    let (sx, sm) = (x.shape(), mask.shape());
    let bad = || crate::err!(E_SHAPE, "masked_softmax: mask {} does not fit input {}", fmt(sm), fmt(sx));
    let view = match mask_type {
        Some(0) | Some(1) if sx.len() != 4 || sm.len() != 2 => return Err(bad()),
        // [L, L] attention mask over [B, H, L, L].
        Some(0) => super::ops::reshape(&mask.detached(), &[1, 1, sm[0], sm[1]])?,
        // [B, L] key-padding mask: [B, 1, 1, L].
        Some(1) => super::ops::reshape(&mask.detached(), &[sm[0], 1, 1, sm[1]])?,
        _ => mask.detached(),
    };
    let exact = matches!(mask_type, None | Some(2));
    if crate::vocab::broadcast(view.shape(), sx).as_deref() != Some(sx) || (exact && sm != sx) {
        return Err(bad());
    }
    // Non-zero (NaN included) is masked, whatever the mask's dtype.
    let out = Raw::empty(sx, DType::Bool)?;
    with_elem!(view.dtype(), S => copy_into::<S, B8>(&out, &view));
    Ok(out)
}

/// A converted bool tensor's elements (0 or 1 bytes, so valid `bool`s).
fn bools(m: &Raw) -> &[bool] {
    let s = m.slice::<B8>();
    // SAFETY: B8 is one byte; cast kernels only write 0 or 1.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<bool>(), s.len()) }
}

fn masked_back(g: &Raw, y: &Raw, m: &Raw, d: usize) -> Result<Raw> {
    let mr = rows::<B8>(m, d)?;
    Ok(with_real!("masked_softmax_backward", y.dtype(), R => {
        map_rows2::<R>(g, y, d, y.dtype(), |g, y, n, dx| fused::masked_softmax_bwd(g, y, bools(&mr), n, dx))?
    }))
}

pub fn masked_softmax(x: &Raw, mask: &Raw, dim: i64, mask_type: Option<i64>) -> Result<Raw> {
    let d = norm_dim("masked_softmax", dim, x.shape())?;
    if !x.dtype().is_float() {
        crate::bail!(E_DTYPE, "masked_softmax needs a floating dtype, got {}", x.dtype().name());
    }
    let m = expand_mask(x, mask, mask_type)?;
    let mr = rows::<B8>(&m, d)?;
    let out = with_real!("masked_softmax", x.dtype(), R => {
        map_rows::<R>(x, d, x.dtype(), |x, n, y| fused::masked_softmax_fwd(x, bools(&mr), n, y))?
    });
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let y = out.detached();
    Ok(record_saving(out, "MaskedSoftmaxBackward", &[x], &[mask], true, move |g| Ok(vec![Some(masked_back(g, &y, &m, d)?)])))
}

pub fn masked_softmax_backward(grad: &Raw, out: &Raw, mask: &Raw, dim: i64) -> Result<Raw> {
    let d = norm_dim("masked_softmax_backward", dim, out.shape())?;
    if grad.shape() != out.shape() {
        crate::bail!(E_SHAPE, "masked_softmax_backward: grad {} and output {} differ", fmt(grad.shape()), fmt(out.shape()));
    }
    if grad.dtype() != out.dtype() {
        crate::bail!(E_DTYPE, "masked_softmax_backward: inputs are {} and {}", grad.dtype().name(), out.dtype().name());
    }
    let m = expand_mask(out, mask, Some(2))?;
    masked_back(grad, out, &m, d)
}

/// `F.dropout`: the input itself when nothing drops, else `x * mask / (1 - p)`.
pub fn dropout(x: &Raw, p: f64, train: bool) -> Result<Raw> {
    if p == 0.0 || !train || x.numel() == 0 {
        return Ok(x.clone());
    }
    if !x.dtype().is_float() {
        crate::bail!(E_DTYPE, "dropout needs a floating dtype, got {}", x.dtype().name());
    }
    // As `_dropout_impl` (Dropout.cpp): p = 1 multiplies by zero without a
    // draw; else `bernoulli_(1 - p)`, then `div_(1 - p)`, a division in f32
    // for every dtype but f64.
    let keep = 1.0 - p;
    if keep <= 0.0 {
        return super::ops::binary(crate::vocab::kinds::Binary::Mul, x, &Raw::zeros(&[], x.dtype())?);
    }
    let noise = Raw::empty(x.shape(), x.dtype())?;
    let scale = if x.dtype() == DType::F64 { 1.0 / keep } else { f64::from(1.0 / keep as f32) };
    super::rng::bernoulli_scaled(&noise, keep, scale);
    super::ops::binary(crate::vocab::kinds::Binary::Mul, x, &noise)
}

fn norm_rows(op: &str, x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<usize> {
    let (sx, sw) = (x.shape(), w.shape());
    if sw.len() > sx.len() || sx[sx.len() - sw.len()..] != sw[..] {
        crate::bail!(E_SHAPE, "{op}: input {} does not end with weight shape {}", fmt(sx), fmt(sw));
    }
    if let Some(b) = b.filter(|b| b.shape() != sw) {
        crate::bail!(E_SHAPE, "{op}: bias {} differs from weight {}", fmt(b.shape()), fmt(sw));
    }
    for t in [Some(x), Some(w), b].into_iter().flatten() {
        if !t.dtype().is_float() {
            crate::bail!(E_DTYPE, "{op} needs floating tensors, got {}", t.dtype().name());
        }
        // PyTorch's CPU layer norm also takes fp32 parameters for a bf16/fp16 input.
        let mixed = matches!(x.dtype(), DType::BF16 | DType::F16) && t.dtype() == DType::F32;
        if t.dtype() != x.dtype() && !mixed {
            crate::bail!(E_DTYPE, "{op}: inputs are {} and {}", x.dtype().name(), t.dtype().name());
        }
    }
    Ok(super::tensor::numel(sw))
}

/// Flat contiguous `R` elements of `t` (its rows along the last dim).
fn flat<R: Elem>(t: &Raw) -> Result<Raw> {
    rows::<R>(t, t.dim().saturating_sub(1))
}

/// Layer norm forward in `R`: `(y, mean, rstd)`.
fn ln_forward<R: fused::Real + Elem>(x: &Raw, w: &Raw, b: Option<&Raw>, n: usize, eps: f64) -> Result<(Raw, Raw, Raw)> {
    let (xr, wr) = (flat::<R>(x)?, flat::<R>(w)?);
    let br = b.map(flat::<R>).transpose()?;
    let rows = xr.numel().checked_div(n).unwrap_or(0);
    let y = Raw::empty(x.shape(), R::DT)?;
    let (mean, rstd) = (Raw::empty(&[rows as i64], R::DT)?, Raw::empty(&[rows as i64], R::DT)?);
    fused::layernorm_fwd(xr.slice::<R>(), wr.slice::<R>(), br.as_ref().map(|b| b.slice::<R>()), n, eps, y.slice_mut::<R>(), mean.slice_mut::<R>(), rstd.slice_mut::<R>());
    Ok((y, mean, rstd))
}

/// `[dx, dw, db]` (db only with a bias), each in its input's dtype.
fn ln_backward(x: &Raw, w: &Raw, b: Option<&Raw>, n: usize, eps: f64, g: &Raw) -> Result<Vec<Raw>> {
    with_real!("layernorm", x.dtype(), R => {
        let (_, mean, rstd) = ln_forward::<R>(x, w, b, n, eps)?;
        let (xr, wr, gr) = (flat::<R>(x)?, flat::<R>(w)?, flat::<R>(g)?);
        let dx = Raw::empty(x.shape(), R::DT)?;
        let dw = Raw::empty(w.shape(), R::DT)?;
        let db = b.map(|b| Raw::empty(b.shape(), R::DT)).transpose()?;
        fused::layernorm_bwd(
            gr.slice::<R>(), xr.slice::<R>(), wr.slice::<R>(), mean.slice::<R>(), rstd.slice::<R>(), n,
            dx.slice_mut::<R>(), dw.slice_mut::<R>(), db.as_ref().map(|d| d.slice_mut::<R>()),
        );
        let mut out = vec![convert(&dx, x.dtype())?, convert(&dw, w.dtype())?];
        if let (Some(db), Some(b)) = (db, b) {
            out.push(convert(&db, b.dtype())?);
        }
        Ok(out)
    })
}

pub fn layernorm(x: &Raw, w: &Raw, b: Option<&Raw>, eps: f64) -> Result<Raw> {
    let n = norm_rows("layernorm", x, w, b)?;
    let out = with_real!("layernorm", x.dtype(), R => convert(&ln_forward::<R>(x, w, b, n, eps)?.0, x.dtype())?);
    let mut inputs = vec![x, w];
    inputs.extend(b);
    if !needs_grad(&inputs) {
        return Ok(out);
    }
    let (sx, sw, sb) = (x.detached(), w.detached(), b.map(Raw::detached));
    Ok(record_saving(out, "LayerNormBackward", &inputs, &inputs, false, move |g| {
        Ok(ln_backward(&sx, &sw, sb.as_ref(), n, eps, g)?.into_iter().map(Some).collect())
    }))
}

pub fn layernorm_backward(x: &Raw, w: &Raw, b: Option<&Raw>, eps: f64, g: &Raw) -> Result<Vec<Raw>> {
    let n = norm_rows("layernorm_backward", x, w, b)?;
    if g.shape() != x.shape() {
        crate::bail!(E_SHAPE, "layernorm_backward: grad {} and input {} differ", fmt(g.shape()), fmt(x.shape()));
    }
    ln_backward(x, w, b, n, eps, g)
}

/// The ids as int64, checked against the table's rows.
fn ids_of(ids: &Raw, rows: i64) -> Result<Vec<i64>> {
    let v = match ids.dtype() {
        DType::I64 | DType::I32 => convert(&ids.contiguous()?, DType::I64)?,
        d => crate::bail!(E_DTYPE, "embedding: ids must be int64 or int32, got {}", d.name()),
    };
    let v = v.slice::<i64>().to_vec();
    if let Some(bad) = v.iter().find(|&&i| i < 0 || i >= rows) {
        crate::bail!(E_SHAPE, "embedding: id {bad} is outside the table's {rows} rows");
    }
    Ok(v)
}

pub fn embedding(w: &Raw, ids: &Raw) -> Result<Raw> {
    embedding_ext(w, ids, None, false)
}

/// `F.embedding`: rows of `w` by `ids`; the row `padding_idx` gets no
/// gradient, and with `scale_grad_by_freq` each row's gradient is divided
/// by how often the batch names it.
pub fn embedding_ext(w: &Raw, ids: &Raw, padding_idx: Option<i64>, scale_grad_by_freq: bool) -> Result<Raw> {
    if w.dim() != 2 {
        crate::bail!(E_SHAPE, "embedding: weight must be [vocab, dim], got {}", fmt(w.shape()));
    }
    let (rows, dim) = (w.shape()[0], w.shape()[1]);
    let idx = ids_of(ids, rows)?;
    let mut shape = ids.shape().to_vec();
    shape.push(dim);
    let out = Raw::empty(&shape, w.dtype())?;
    for (r, &i) in idx.iter().enumerate() {
        let src = super::ops::slice_row(w, i);
        let dst = out.view_as(vec![dim], vec![1], r * dim as usize);
        with_elem!(w.dtype(), T => copy_into::<T, T>(&dst, &src));
    }
    if !needs_grad(&[w]) {
        return Ok(out);
    }
    let wshape = w.shape().to_vec();
    Ok(record(out, "EmbeddingBackward", &[w], move |g| {
        // As index_add_ in id order, rounding each addition to the grad's dtype.
        let dw = Raw::zeros(&wshape, g.dtype())?;
        let gc = g.contiguous()?;
        let d = dim as usize;
        let mut counts = vec![0u32; if scale_grad_by_freq { wshape[0] as usize } else { 0 }];
        for &i in &idx {
            if let Some(c) = counts.get_mut(i as usize) {
                *c += 1;
            }
        }
        with_elem!(g.dtype(), T => {
            let (src, dst) = (gc.slice::<T>(), dw.slice_mut::<T>());
            for (r, &i) in idx.iter().enumerate() {
                if Some(i) == padding_idx {
                    continue;
                }
                let row = &mut dst[i as usize * d..(i as usize + 1) * d];
                let scale = counts.get(i as usize).map(|&c| <<T as Elem>::Acc as super::elem::Arith>::from_f64(1.0 / f64::from(c)));
                for (o, s) in row.iter_mut().zip(&src[r * d..(r + 1) * d]) {
                    let s = match scale {
                        Some(k) => super::elem::Arith::mul(s.up(), k),
                        None => s.up(),
                    };
                    *o = T::down(super::elem::Arith::add(o.up(), s));
                }
            }
        });
        Ok(vec![Some(dw)])
    }))
}

/// `F.cross_entropy(logits, targets)` with class-index targets (mean over
/// non-ignored rows, ignore_index -100); logits `[N, C]`, `[C]`, or `[N, C, d...]`.
pub fn cross_entropy(logits: &Raw, targets: &Raw) -> Result<Raw> {
    if targets.dtype().is_float() {
        return soft_cross_entropy(logits, targets);
    }
    if targets.dtype() != DType::I64 {
        crate::bail!(E_DTYPE, "cross_entropy: targets must be int64 class ids or float probabilities, got {}", targets.dtype().name());
    }
    let (sl, st) = (logits.shape(), targets.shape());
    let class_dim = usize::from(sl.len() >= 2);
    let fits = !sl.is_empty() && sl.len() == st.len() + 1 && {
        let rest: Vec<i64> = sl.iter().enumerate().filter(|(i, _)| *i != class_dim).map(|(_, &d)| d).collect();
        rest == st
    };
    if !fits {
        crate::bail!(E_SHAPE, "cross_entropy: logits {} and targets {} do not fit", fmt(sl), fmt(st));
    }
    let c = sl[class_dim];
    let t = convert(&targets.contiguous()?, DType::I64)?;
    let tv = t.slice::<i64>().to_vec();
    if let Some(bad) = tv.iter().find(|&&v| v != -100 && !(0..c).contains(&v)) {
        crate::bail!(E_SHAPE, "cross_entropy: target {bad} is out of bounds for {c} classes");
    }
    // Rows in class-last order: targets are laid out the same way once the class dim is last.
    let tv = if sl.len() > 2 {
        let perm = dim_last(&t.view_as(with_class(st, class_dim), contiguous_strides(&with_class(st, class_dim)), 0), class_dim);
        convert(&perm.contiguous()?, DType::I64)?.slice::<i64>().to_vec()
    } else {
        tv
    };
    let (out, lse) = with_real!("cross_entropy", logits.dtype(), R => {
        let xr = rows::<R>(logits, class_dim)?;
        let rows_n = tv.len();
        let lse = Raw::empty(&[rows_n as i64], R::DT)?;
        let loss = fused::cross_entropy_fwd(xr.slice::<R>(), &tv, c as usize, -100, lse.slice_mut::<R>());
        (convert(&Raw::from_vec::<R>(&[], &[loss])?, logits.dtype())?, lse)
    });
    if !needs_grad(&[logits]) {
        return Ok(out);
    }
    let sx = logits.detached();
    Ok(record_saving(out, "NllLossBackward", &[logits], &[logits], false, move |g| {
        let gv = g.get_f64(0);
        let dx = with_real!("cross_entropy", sx.dtype(), R => {
            let xr = rows::<R>(&sx, class_dim)?;
            let dx = Raw::empty(xr.shape(), R::DT)?;
            let lr = flat::<R>(&lse)?;
            fused::cross_entropy_bwd(xr.slice::<R>(), &tv, c as usize, -100, lr.slice::<R>(), super::elem::cast::<f64, R>(gv), dx.slice_mut::<R>());
            unrows(dx, class_dim, sx.dtype())?
        });
        Ok(vec![Some(dx)])
    }))
}

/// A shape with a size-1 class dim inserted (targets viewed like logits).
fn with_class(st: &[i64], class_dim: usize) -> Vec<i64> {
    let mut s = st.to_vec();
    s.insert(class_dim, 1);
    s
}

/// Cross-entropy against class probabilities: `-sum(t * log_softmax(x)) / N`.
fn soft_cross_entropy(logits: &Raw, targets: &Raw) -> Result<Raw> {
    if logits.shape() != targets.shape() || logits.dim() == 0 {
        crate::bail!(E_SHAPE, "cross_entropy: logits {} and targets {} do not fit", fmt(logits.shape()), fmt(targets.shape()));
    }
    let class_dim = usize::from(logits.dim() >= 2);
    let logp = log_softmax(logits, class_dim)?;
    let prod = super::ops::binary(crate::vocab::kinds::Binary::Mul, &logp, targets)?;
    let total = super::ops::reduce(crate::vocab::kinds::Reduce::Sum, &prod, None, false)?;
    let rows = if logits.dim() >= 2 { logits.numel() / logits.shape()[class_dim].max(1) as usize } else { 1 };
    let div = super::ops::full(&[], total.dtype(), -(rows as f64))?;
    super::ops::binary(crate::vocab::kinds::Binary::Div, &total, &div)
}

fn log_softmax(x: &Raw, d: usize) -> Result<Raw> {
    let out = with_real!("cross_entropy", x.dtype(), R => map_rows::<R>(x, d, x.dtype(), fused::log_softmax_fwd)?);
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let y = out.detached();
    Ok(record_saving(out, "LogSoftmaxBackward", &[x], &[], true, move |g| {
        // dx = g - exp(y) * sum(g) along the row.
        let dx = with_real!("cross_entropy", y.dtype(), R => map_rows2::<R>(g, &y, d, y.dtype(), |gs, ys, n, ds| {
            for ((gr, yr), dr) in gs.chunks(n.max(1)).zip(ys.chunks(n.max(1))).zip(ds.chunks_mut(n.max(1))) {
                let s = gr.iter().fold(<R as num_traits::Zero>::zero(), |a, &b| a + b);
                for ((d, &g), &y) in dr.iter_mut().zip(gr).zip(yr) {
                    *d = g - y.exp() * s;
                }
            }
        })?);
        Ok(vec![Some(dx)])
    }))
}
