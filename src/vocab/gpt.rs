//! The language-model helpers' model, below the backends: its spec, its
//! parameters' layout and initialisation rule, and its forward pass written
//! once over `GptOps`, which each backend implements with its own kernels.

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Gelu,
    Relu,
    Silu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    LayerNorm,
    /// `x * rsqrt(mean(x²) + eps) * w + b` over the last dim.
    RmsNorm,
}

/// The most layers a spec may ask for (PyTorch itself has no such limit; ours
/// keeps a spec from one bad integer from exhausting memory before any check).
pub const MAX_LAYERS: i64 = 4096;
/// The most elements one parameter matrix of these helpers may have (1 GiB of
/// fp32; a 70B-parameter model's largest is 2^28), so that one bad integer in
/// a spec is refused instead of allocating and filling gigabytes (found by the fuzzer).
pub const MAX_MATRIX_ELEMENTS: i64 = 1 << 28;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LmSpec {
    pub vocab: i64,
    pub seq: i64,
    pub d_model: i64,
    pub n_layers: i64,
    pub n_heads: i64,
    pub ff_mult: i64,
    pub activation: Activation,
    pub norm: Norm,
    pub tie_embeddings: bool,
    pub dropout: f64,
}

pub const EPS: f64 = 1e-5;

impl LmSpec {
    pub fn tiny(vocab: i64, seq: i64, d_model: i64, n_layers: i64, n_heads: i64) -> Result<LmSpec> {
        LmSpec {
            vocab,
            seq,
            d_model,
            n_layers,
            n_heads,
            ff_mult: 4,
            activation: Activation::Gelu,
            norm: Norm::LayerNorm,
            tie_embeddings: false,
            dropout: 0.0,
        }
        .validate()
    }

    /// Parses the spec JSON (keys as the header documents them at
    /// `enkai_tensor_lm_init`; unknown keys are ignored so a
    /// client may keep other settings in the same object).
    pub fn parse(text: &str) -> Result<LmSpec> {
        let bad = |why: String| crate::err!(E_INVALID_ARG, "lm spec: {why}");
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| bad("expected a JSON object".into()))?;
        let int = |k: &str, default: Option<i64>| -> Result<i64> {
            match obj.get(k) {
                None => default.ok_or_else(|| bad(format!("missing required key {k:?}"))),
                Some(x) => x.as_i64().ok_or_else(|| bad(format!("{k:?} must be an integer, got {x}"))),
            }
        };
        let word = |k: &str, default: &'static str| -> Result<String> {
            match obj.get(k) {
                None => Ok(default.to_string()),
                Some(x) => x.as_str().map(str::to_string).ok_or_else(|| bad(format!("{k:?} must be a string, got {x}"))),
            }
        };
        let activation = match word("activation", "gelu")?.as_str() {
            "gelu" => Activation::Gelu,
            "relu" => Activation::Relu,
            "silu" => Activation::Silu,
            other => return Err(bad(format!("activation {other:?} is not gelu, relu or silu"))),
        };
        let norm = match word("norm", "layernorm")?.as_str() {
            "layernorm" => Norm::LayerNorm,
            "rmsnorm" => Norm::RmsNorm,
            other => return Err(bad(format!("norm {other:?} is not layernorm or rmsnorm"))),
        };
        let tie_embeddings = match obj.get("tie_embeddings") {
            None => false,
            Some(x) => x.as_bool().ok_or_else(|| bad(format!("\"tie_embeddings\" must be true or false, got {x}")))?,
        };
        let dropout = match obj.get("dropout") {
            None => 0.0,
            Some(x) => x.as_f64().ok_or_else(|| bad(format!("\"dropout\" must be a number, got {x}")))?,
        };
        LmSpec {
            vocab: int("vocab_size", None)?,
            seq: int("seq_len", None)?,
            d_model: int("d_model", None)?,
            n_layers: int("n_layers", None)?,
            n_heads: int("n_heads", None)?,
            ff_mult: int("ff_mult", Some(4))?,
            activation,
            norm,
            tie_embeddings,
            dropout,
        }
        .validate()
    }

    fn validate(self) -> Result<LmSpec> {
        for (k, v) in [("vocab_size", self.vocab), ("seq_len", self.seq), ("d_model", self.d_model), ("n_heads", self.n_heads), ("ff_mult", self.ff_mult)] {
            if v <= 0 {
                crate::bail!(E_INVALID_ARG, "lm spec: {k} must be > 0, got {v}");
            }
        }
        if self.n_layers < 0 {
            crate::bail!(E_INVALID_ARG, "lm spec: n_layers must be >= 0, got {}", self.n_layers);
        }
        // The layout holds 6 + 12 x n_layers entries: bound it before building it.
        if self.n_layers > MAX_LAYERS {
            crate::bail!(E_INVALID_ARG, "lm spec: n_layers {} is larger than the limit of {MAX_LAYERS}", self.n_layers);
        }
        let d = self.d_model;
        let matrices = [
            ("tok_embed [vocab_size, d_model]", self.vocab.checked_mul(d)),
            ("pos_embed [seq_len, d_model]", self.seq.checked_mul(d)),
            ("qkv_w [d_model, 3 d_model]", d.checked_mul(3).and_then(|x| x.checked_mul(d))),
            ("mlp_w1 [d_model, ff_mult d_model]", d.checked_mul(self.ff_mult).and_then(|x| x.checked_mul(d))),
        ];
        if let Some((what, _)) = matrices.iter().find(|(_, n)| n.is_none()) {
            crate::bail!(E_INVALID_ARG, "lm spec: {what} has more elements than an int64 counts");
        }
        if let Some((what, Some(n))) = matrices.iter().find(|(_, n)| n.is_some_and(|n| n > MAX_MATRIX_ELEMENTS)) {
            crate::bail!(E_INVALID_ARG, "lm spec: {what} has {n} elements, more than the limit of {MAX_MATRIX_ELEMENTS} (2^28)");
        }
        if self.d_model % self.n_heads != 0 {
            crate::bail!(E_INVALID_ARG, "lm spec: d_model {} is not a multiple of n_heads {}", self.d_model, self.n_heads);
        }
        if !(0.0..1.0).contains(&self.dropout) {
            crate::bail!(E_INVALID_ARG, "lm spec: dropout must be in [0, 1), got {}", self.dropout);
        }
        Ok(self)
    }

    /// Every parameter's shape and initial value, in ABI order.
    pub fn layout(&self) -> Vec<(Vec<i64>, Init)> {
        let (v, s, d, f) = (self.vocab, self.seq, self.d_model, self.d_model * self.ff_mult);
        let mut out = vec![(vec![v, d], Init::Normal), (vec![s, d], Init::Normal)];
        for _ in 0..self.n_layers {
            out.extend([
                (vec![d], Init::One),
                (vec![d], Init::Zero),
                (vec![d, 3 * d], Init::Normal),
                (vec![3 * d], Init::Zero),
                (vec![d, d], Init::Normal),
                (vec![d], Init::Zero),
                (vec![d], Init::One),
                (vec![d], Init::Zero),
                (vec![d, f], Init::Normal),
                (vec![f], Init::Zero),
                (vec![f, d], Init::Normal),
                (vec![d], Init::Zero),
            ]);
        }
        out.extend([(vec![d], Init::One), (vec![d], Init::Zero)]);
        if !self.tie_embeddings {
            out.push((vec![d, v], Init::Normal));
        }
        out.push((vec![v], Init::Zero));
        out
    }
}

/// The operations the GPT is written in. Each backend implements them with
/// its own kernels (the torch backend with the ops of the PyTorch reference
/// model, python/tests/lm_reference.py); the model itself, `gpt_logits` and
/// `gpt_loss`, is written once, here.
pub trait GptOps {
    type T;
    fn shape(&self, x: &Self::T) -> Vec<i64>;
    /// `F.embedding(w, ids)`.
    fn embedding(&self, w: &Self::T, ids: &Self::T) -> Result<Self::T>;
    /// `x.narrow(dim, start, len)`.
    fn narrow(&self, x: &Self::T, dim: i64, start: i64, len: i64) -> Result<Self::T>;
    fn add(&self, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// `F.dropout(x, p, training=True)`; only called when `p > 0` while training.
    fn dropout(&self, x: Self::T, p: f64) -> Result<Self::T>;
    /// `F.layer_norm` over the last dim, eps `EPS`.
    fn layer_norm(&self, x: &Self::T, w: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// `x * rsqrt(mean(x², -1, keepdim) + EPS) * w + b`.
    fn rms_norm(&self, x: &Self::T, w: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// `x @ w + b` for `w` laid out `[in, out]` (`F.linear(x, w.T, b)`).
    fn linear(&self, x: &Self::T, w: &Self::T, b: &Self::T) -> Result<Self::T>;
    /// `x @ w.T + b` (`F.linear(x, w, b)`: the tied head over `tok_embed`).
    fn linear_t(&self, x: &Self::T, w: &Self::T, b: &Self::T) -> Result<Self::T>;
    fn view(&self, x: &Self::T, shape: &[i64]) -> Result<Self::T>;
    fn transpose(&self, x: &Self::T, d0: i64, d1: i64) -> Result<Self::T>;
    /// `x.contiguous().view(shape)`.
    fn reshape(&self, x: &Self::T, shape: &[i64]) -> Result<Self::T>;
    fn matmul(&self, a: &Self::T, b: &Self::T) -> Result<Self::T>;
    fn div_scalar(&self, x: &Self::T, s: f64) -> Result<Self::T>;
    /// Softmax over the last dim of `[.., s, s]` scores with the future
    /// (`triu(1)`) masked out.
    fn causal_softmax(&self, scores: &Self::T) -> Result<Self::T>;
    fn activation(&self, x: &Self::T, a: Activation) -> Result<Self::T>;
    /// Mean cross-entropy of `[n, V]` logits against `[n]` int64 targets.
    fn cross_entropy(&self, logits: &Self::T, targets: &Self::T) -> Result<Self::T>;
}

fn norm<O: GptOps>(o: &O, x: &O::T, w: &O::T, b: &O::T, kind: Norm) -> Result<O::T> {
    match kind {
        Norm::LayerNorm => o.layer_norm(x, w, b),
        Norm::RmsNorm => o.rms_norm(x, w, b),
    }
}

fn dropout<O: GptOps>(o: &O, x: O::T, p: f64, training: bool) -> Result<O::T> {
    if training && p > 0.0 {
        o.dropout(x, p)
    } else {
        Ok(x)
    }
}

/// The logits `[batch, seq, vocab]` of the pre-norm GPT (module doc) on `ids [batch, seq]`.
pub fn gpt_logits<O: GptOps>(o: &O, p: &[&O::T], spec: &LmSpec, ids: &O::T, training: bool) -> Result<O::T> {
    let size = o.shape(ids);
    let (b, s) = (size[0], size[1]);
    let (d, h) = (spec.d_model, spec.n_heads);
    let dh = d / h;
    let drop = |x: O::T| dropout(o, x, spec.dropout, training);
    let pos = o.narrow(p[1], 0, 0, s)?;
    let mut x = drop(o.add(&o.embedding(p[0], ids)?, &pos)?)?;
    let heads = |t: O::T| o.transpose(&o.view(&t, &[b, s, h, dh])?, 1, 2);
    for l in 0..spec.n_layers as usize {
        let w = |k: usize| p[2 + 12 * l + k];
        let a = norm(o, &x, w(0), w(1), spec.norm)?;
        let qkv = o.linear(&a, w(2), w(3))?;
        let q = heads(o.narrow(&qkv, -1, 0, d)?)?;
        let k = heads(o.narrow(&qkv, -1, d, d)?)?;
        let v = heads(o.narrow(&qkv, -1, 2 * d, d)?)?;
        let scores = o.div_scalar(&o.matmul(&q, &o.transpose(&k, -2, -1)?)?, (dh as f64).sqrt())?;
        let att = o.causal_softmax(&scores)?;
        let y = o.reshape(&o.transpose(&o.matmul(&att, &v)?, 1, 2)?, &[b, s, d])?;
        x = o.add(&x, &drop(o.linear(&y, w(4), w(5))?)?)?;
        let m = o.linear(&norm(o, &x, w(6), w(7), spec.norm)?, w(8), w(9))?;
        let m = o.activation(&m, spec.activation)?;
        x = o.add(&x, &drop(o.linear(&m, w(10), w(11))?)?)?;
    }
    let base = 2 + 12 * spec.n_layers as usize;
    let x = norm(o, &x, p[base], p[base + 1], spec.norm)?;
    if spec.tie_embeddings {
        o.linear_t(&x, p[0], p[base + 2])
    } else {
        o.linear(&x, p[base + 2], p[base + 3])
    }
}

/// Mean cross-entropy of the logits against `targets [batch, seq]`.
pub fn gpt_loss<O: GptOps>(o: &O, p: &[&O::T], spec: &LmSpec, ids: &O::T, targets: &O::T, training: bool) -> Result<O::T> {
    let logits = gpt_logits(o, p, spec, ids, training)?;
    let n: i64 = o.shape(targets).iter().product();
    o.cross_entropy(&o.view(&logits, &[n, spec.vocab])?, &o.view(targets, &[n])?)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// `randn * 0.02`, drawn in parameter order from the seeded generator.
    Normal,
    One,
    Zero,
}
