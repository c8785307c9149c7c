//! Tensor operations over handles. Each op makes one backend call; the
//! checks that give precise messages (`E_SHAPE: matmul [2,3] x [4,5]`) run
//! only after a backend has refused, so the success path pays nothing for
//! them, and both backends refuse in the same words.

use crate::backend::{self, imp, imp::Raw, Tensor};
use crate::dtype::DType;
use crate::error::{Code, Error, Result};
use crate::handles::Ref;
use crate::registry::TENSORS;
use crate::json::{self, write_int_list as fmt};
use crate::tensor::{self, get, register};
pub use crate::vocab::kinds::Binary;

fn shape(t: &Tensor) -> Vec<i64> {
    imp::shape(&t.raw)
}

fn lookup<const N: usize>(hs: [i64; N]) -> Result<[Ref<'static, Tensor>; N]> {
    TENSORS.get_n(hs)
}

/// Why libtorch refused: devices first, then the op's own explanation, then
/// dtypes, and libtorch's message (prefixed with the op) when none applies.
fn diagnose(op: &str, ts: &[&Tensor], e: Error, explain: impl FnOnce() -> Option<Error>) -> Error {
    match e.code {
        Code::E_TORCH => {}
        // A backend's own shape or dtype refusal: the core's explanation, when
        // it has one, so that both backends say the same thing.
        Code::E_SHAPE | Code::E_DTYPE => return explain().unwrap_or(e),
        _ => return e,
    }
    let devs: Vec<_> = ts.iter().map(|t| imp::device(&t.raw)).collect();
    if let Some(d) = devs.iter().find(|d| **d != devs[0]) {
        return crate::err!(E_DEVICE, "{op}: inputs are on {} and {d}", devs[0]);
    }
    if let Some(better) = explain() {
        return better;
    }
    let dts: Vec<_> = ts.iter().filter_map(|t| imp::dtype(&t.raw).ok()).collect();
    if let Some(d) = dts.iter().find(|d| **d != dts[0]) {
        return crate::err!(E_DTYPE, "{op}: inputs are {} and {}", dts[0].name(), d.name());
    }
    // ATen's dtype dispatch refuses a dtype a kernel lacks in these words
    // ("\"addmm_impl_cpu_\" not implemented for 'Bool'"): a dtype error, as
    // the native backend reports it.
    if e.detail.contains("not implemented for '") {
        return crate::err!(E_DTYPE, "{op}: {}", e.detail);
    }
    crate::err!(E_TORCH, "{op}: {}", e.detail)
}

/// The shape of every op: look up the inputs, check they share a backend,
/// compute, register the result; on failure, `diagnose` with `explain`.
fn run<const N: usize>(
    op: &str,
    hs: [i64; N],
    compute: impl FnOnce([&Raw; N]) -> Result<Raw>,
    explain: impl FnOnce([&Tensor; N]) -> Option<Error>,
) -> Result<i64> {
    let ts = lookup(hs)?;
    let refs: [&Tensor; N] = ts.each_ref().map(|a| &**a);
    let b = backend::same_backend(op, &refs)?;
    let raw = compute(refs.map(|t| &t.raw)).map_err(|e| diagnose(op, &refs, e, || explain(refs)))?;
    // The inputs' borrows end in the same lock that registers the output.
    TENSORS.insert_after(Tensor { backend: b, raw }, ts)
}

pub(crate) use crate::vocab::norm_dim;

fn dim_error(op: &str, t: &Tensor, dims: &[i64]) -> Option<Error> {
    let s = shape(t);
    dims.iter().find_map(|&d| norm_dim(op, d, &s).err())
}

fn float_error(op: &str, t: &Tensor) -> Option<Error> {
    let dt = imp::dtype(&t.raw).ok()?;
    (!dt.is_float()).then(|| crate::err!(E_DTYPE, "{op} needs a floating dtype, got {}", dt.name()))
}

pub use crate::vocab::broadcast;

fn matmul_error(op: &str, a: &Tensor, b: &Tensor) -> Option<Error> {
    let (sa, sb) = (shape(a), shape(b));
    (!crate::vocab::matmul_fits(&sa, &sb)).then(|| crate::err!(E_SHAPE, "{op} {} x {}", fmt(&sa), fmt(&sb)))
}

fn numel_error(op: &str, x: &Tensor, target: &[i64]) -> Option<Error> {
    Some(crate::err!(E_SHAPE, "{op}: cannot reshape {} into {}", fmt(&shape(x)), fmt(target)))
}

/// Records a seed function's call when this thread traces (`crate::trace`).
fn traced(r: Result<i64>, name: &'static str, args: &[f64], ints: &[i64], inputs: &[i64]) -> Result<i64> {
    if let (Ok(h), true) = (&r, crate::trace::on()) {
        crate::trace::seed(name, args, ints, inputs, &[*h]);
    }
    r
}

pub fn view(x: i64, target: &[i64]) -> Result<i64> {
    traced(run("view", [x], |[x]| imp::view(x, target), |[x]| numel_error("view", x, target)), "view", &[], target, &[x])
}

pub fn concat(handles: &str, dim: i64) -> Result<i64> {
    let hs = json::handle_list(handles)?;
    if hs.is_empty() {
        crate::bail!(E_INVALID_ARG, "concat: the handle list is empty");
    }
    let ts = TENSORS.get_many(&hs)?;
    let refs: Vec<&Tensor> = ts.iter().map(|t| &**t).collect();
    let b = backend::same_backend("concat", &refs)?;
    let raws: Vec<&Raw> = refs.iter().map(|t| &t.raw).collect();
    match imp::concat(&raws, dim) {
        Ok(r) => traced(register(b, r), "concat", &[], &[dim], &hs),
        Err(e) => Err(diagnose("concat", &refs, e, || {
            let s0 = shape(refs[0]);
            let d = match norm_dim("concat", dim, &s0) {
                Ok(d) => d as usize,
                Err(e) => return Some(e),
            };
            refs.iter().map(|t| shape(t)).find_map(|s| {
                let differs = s.len() != s0.len() || s.iter().zip(&s0).enumerate().any(|(i, (x, y))| i != d && x != y);
                differs.then(|| crate::err!(E_SHAPE, "concat: {} and {} differ outside dim {dim}", fmt(&s0), fmt(&s)))
            })
        })),
    }
}

pub fn slice(x: i64, dim: i64, start: i64, end: i64, step: i64) -> Result<i64> {
    if step <= 0 {
        crate::bail!(E_INVALID_ARG, "slice: step must be positive, got {step}");
    }
    let r = run("slice", [x], |[x]| imp::slice(x, dim, start, end, step), |[x]| dim_error("slice", x, &[dim]));
    traced(r, "slice", &[], &[dim, start, end, step], &[x])
}

fn mask_error(op: &str, x: &Tensor, mask: &Tensor, dim: i64) -> Option<Error> {
    dim_error(op, x, &[dim]).or_else(|| float_error(op, x)).or_else(|| {
        let (sx, sm) = (shape(x), shape(mask));
        Some(crate::err!(E_SHAPE, "{op}: mask {} does not fit input {}", fmt(&sm), fmt(&sx)))
    })
}

/// `mask_type`: 0 = `[L, L]` attention mask, 1 = `[B, L]` key-padding mask
/// (both for a `[B, H, L, L]` input), 2 = a mask of the input's shape.
pub fn masked_softmax(x: i64, mask: i64, dim: i64, mask_type: i64) -> Result<i64> {
    if !(0..=2).contains(&mask_type) {
        crate::bail!(E_INVALID_ARG, "masked_softmax: mask_type must be 0, 1 or 2, got {mask_type}");
    }
    let op = "masked_softmax";
    let r = run(op, [x, mask], |[x, m]| imp::masked_softmax(x, m, dim, Some(mask_type)), |[x, m]| mask_error(op, x, m, dim));
    traced(r, op, &[], &[dim, mask_type], &[x, mask])
}

pub fn masked_softmax_backward(grad: i64, out: i64, mask: i64, dim: i64) -> Result<i64> {
    let op = "masked_softmax_backward";
    let r = run(op, [grad, out, mask], |[g, o, m]| imp::masked_softmax_backward(g, o, m, dim), |[_, o, m]| mask_error(op, o, m, dim));
    traced(r, op, &[], &[dim], &[grad, out, mask])
}

pub fn dropout(x: i64, p: f64, train: bool) -> Result<i64> {
    if !(0.0..=1.0).contains(&p) {
        crate::bail!(E_INVALID_ARG, "dropout: p must be in [0, 1], got {p}");
    }
    let r = run("dropout", [x], |[x]| imp::dropout(x, p, train), |[x]| float_error("dropout", x));
    traced(r, "dropout", &[p], &[i64::from(train)], &[x])
}

fn layernorm_error(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Error> {
    let (sx, sw) = (shape(x), shape(w));
    if sw.len() > sx.len() || sx[sx.len() - sw.len()..] != sw[..] {
        return Some(crate::err!(E_SHAPE, "layernorm: input {} does not end with weight shape {}", fmt(&sx), fmt(&sw)));
    }
    let sb = b.map(shape).filter(|sb| *sb != sw)?;
    Some(crate::err!(E_SHAPE, "layernorm: bias {} differs from weight {}", fmt(&sb), fmt(&sw)))
}

/// Layer norm over `w`'s trailing shape; `b == 0` means no bias.
pub fn layernorm(x: i64, w: i64, b: i64, eps: f64) -> Result<i64> {
    traced(layernorm_run(x, w, b, eps), "layernorm", &[eps], &[], &[x, w, b])
}

fn layernorm_run(x: i64, w: i64, b: i64, eps: f64) -> Result<i64> {
    if b == 0 {
        run("layernorm", [x, w], |[x, w]| imp::layernorm(x, w, None, eps), |[x, w]| layernorm_error(x, w, None))
    } else {
        run("layernorm", [x, w, b], |[x, w, b]| imp::layernorm(x, w, Some(b), eps), |[x, w, b]| layernorm_error(x, w, Some(b)))
    }
}

/// `[dx, dw, db]` handles (`db` is 0 when `b` is 0).
pub fn layernorm_backward(x: i64, w: i64, b: i64, eps: f64, grad: i64) -> Result<Vec<i64>> {
    let [tx, tw, tg] = lookup([x, w, grad])?;
    let tb = if b == 0 { None } else { Some(get(b)?) };
    let mut refs = vec![&*tx, &*tw, &*tg];
    refs.extend(tb.as_deref());
    let bk = backend::same_backend("layernorm_backward", &refs)?;
    let grads = imp::layernorm_backward(&tx.raw, &tw.raw, tb.as_ref().map(|t| &t.raw), eps, &tg.raw)
        .map_err(|e| diagnose("layernorm_backward", &refs, e, || layernorm_error(&tx, &tw, tb.as_deref())))?;
    let mut out = tensor::register_all(bk, grads)?;
    if crate::trace::on() {
        crate::trace::opaque("layernorm_backward", &[], &out);
    }
    out.resize(3, 0);
    Ok(out)
}

pub fn embedding(w: i64, ids: i64) -> Result<i64> {
    traced(embedding_run(w, ids), "embedding", &[], &[], &[w, ids])
}

fn embedding_run(w: i64, ids: i64) -> Result<i64> {
    run("embedding", [w, ids], |[w, i]| imp::embedding(w, i), |[w, ids]| {
        let dt = imp::dtype(&ids.raw).ok()?;
        if !matches!(dt, DType::I64 | DType::I32) {
            return Some(crate::err!(E_DTYPE, "embedding: ids must be int64 or int32, got {}", dt.name()));
        }
        let sw = shape(w);
        if sw.len() != 2 {
            return Some(crate::err!(E_SHAPE, "embedding: weight must be [vocab, dim], got {}", fmt(&sw)));
        }
        let (lo, hi) = imp::min_max(&ids.raw).ok()?;
        (lo < 0.0 || hi >= sw[0] as f64)
            .then(|| crate::err!(E_SHAPE, "embedding: ids range over [{lo}, {hi}] but the table has {} rows", sw[0]))
    })
}

/// `x @ w + b` with `w` laid out `[in, out]`; `b == 0` means no bias.
pub fn linear(x: i64, w: i64, b: i64) -> Result<i64> {
    if crate::quant::is_quantized(w) {
        return crate::quant::linear("linear", x, w, b, crate::quant::Layout::InOut);
    }
    traced(linear_run(x, w, b), "linear_in_out", &[], &[], &[x, w, b])
}

fn linear_run(x: i64, w: i64, b: i64) -> Result<i64> {
    if b == 0 {
        return run("linear", [x, w], |[x, w]| imp::linear(x, w, None), |[x, w]| matmul_error("linear", x, w));
    }
    run("linear", [x, w, b], |[x, w, b]| imp::linear(x, w, Some(b)), |[x, w, b]| {
        matmul_error("linear", x, w).or_else(|| {
            let (sw, sb) = (shape(w), shape(b));
            let out = sw.last().copied().unwrap_or(1);
            broadcast(&[out], &sb)
                .filter(|s| s.len() == 1)
                .is_none()
                .then(|| crate::err!(E_SHAPE, "linear: bias {} does not fit {out} outputs", fmt(&sb)))
        })
    })
}

pub fn cross_entropy(logits: i64, targets: i64) -> Result<i64> {
    traced(cross_entropy_run(logits, targets), "cross_entropy", &[], &[], &[logits, targets])
}

fn cross_entropy_run(logits: i64, targets: i64) -> Result<i64> {
    run("cross_entropy", [logits, targets], |[l, t]| imp::cross_entropy(l, t), |[l, t]| {
        let (sl, st) = (shape(l), shape(t));
        let dt = imp::dtype(&t.raw).ok()?;
        let fits = match dt {
            DType::I64 => sl.len() == st.len() + 1 && sl.first() == st.first(),
            d if d.is_float() => sl == st,
            _ => return Some(crate::err!(E_DTYPE, "cross_entropy: targets must be int64 class ids or float probabilities, got {}", dt.name())),
        };
        (!fits).then(|| crate::err!(E_SHAPE, "cross_entropy: logits {} and targets {} do not fit", fmt(&sl), fmt(&st)))
    })
}

pub fn to_device(x: i64, dev: i64) -> Result<i64> {
    let d = tensor::device(dev)?;
    let t = get(x)?;
    t.backend.check_device(d)?;
    traced(run("to_device", [x], |[x]| imp::to_device(x, d), |_| None), "to_device", &[], &[], &[x])
}

pub fn to_dtype(x: i64, dt: DType) -> Result<i64> {
    traced(run("to_dtype", [x], |[x]| imp::to_dtype(x, dt), |_| None), "to_dtype", &[], &[], &[x])
}
