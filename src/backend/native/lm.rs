//! The GPT of `crate::vocab::gpt` on native tensors: its parameters, and the ops it
//! is written in, on this backend's kernels (autograd included).

use super::tensor::Raw;
use super::{nn, ops, rng};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::gpt::{gpt_logits, gpt_loss, Activation, GptOps, Init, LmSpec, EPS};
use crate::vocab::kinds::{Binary, Reduce, Unary};

/// The parameters of `layout`, fp32, requiring grad: `randn·0.02` matrices
/// drawn in order from a generator of this call's own seeded with `seed`,
/// ones and zeros.
pub fn lm_init(layout: &[(Vec<i64>, Init)], seed: i64) -> Result<Vec<Raw>> {
    let ts = layout
        .iter()
        .map(|(shape, init)| match init {
            Init::Normal => Raw::empty(shape, DType::F32),
            Init::One => ops::full(shape, DType::F32, 1.0),
            Init::Zero => Raw::zeros(shape, DType::F32),
        })
        .collect::<Result<Vec<_>>>()?;
    let normal: Vec<&Raw> = ts.iter().zip(layout).filter(|(_, (_, i))| *i == Init::Normal).map(|(t, _)| t).collect();
    rng::randn_seeded(&normal, seed);
    for t in &normal {
        // Each value times 0.02 in fp32, as `randn(...) * 0.02`.
        t.slice_mut::<f32>().iter_mut().for_each(|v| *v *= 0.02);
    }
    for t in &ts {
        super::tensor::set_requires_grad(t, true)?;
    }
    Ok(ts)
}

struct Gpt;

impl GptOps for Gpt {
    type T = Raw;
    fn shape(&self, x: &Raw) -> Vec<i64> {
        x.shape().to_vec()
    }
    fn embedding(&self, w: &Raw, ids: &Raw) -> Result<Raw> {
        nn::embedding(w, ids)
    }
    fn narrow(&self, x: &Raw, dim: i64, start: i64, len: i64) -> Result<Raw> {
        ops::slice(x, dim, start, start + len, 1)
    }
    fn add(&self, a: &Raw, b: &Raw) -> Result<Raw> {
        ops::binary(Binary::Add, a, b)
    }
    fn dropout(&self, x: Raw, p: f64) -> Result<Raw> {
        nn::dropout(&x, p, true)
    }
    fn layer_norm(&self, x: &Raw, w: &Raw, b: &Raw) -> Result<Raw> {
        nn::layernorm(x, w, Some(b), EPS)
    }
    fn rms_norm(&self, x: &Raw, w: &Raw, b: &Raw) -> Result<Raw> {
        let ms = ops::reduce(Reduce::Mean, &ops::binary(Binary::Mul, x, x)?, Some(-1), true)?;
        let r = ops::rsqrt(&ops::binary(Binary::Add, &ms, &ops::full(&[], DType::F64, EPS)?)?)?;
        let y = ops::binary(Binary::Mul, &ops::binary(Binary::Mul, x, &r)?, w)?;
        ops::binary(Binary::Add, &y, b)
    }
    fn linear(&self, x: &Raw, w: &Raw, b: &Raw) -> Result<Raw> {
        super::linear(x, w, Some(b))
    }
    fn linear_t(&self, x: &Raw, w: &Raw, b: &Raw) -> Result<Raw> {
        super::linear(x, &ops::transpose(w, 0, 1)?, Some(b))
    }
    fn view(&self, x: &Raw, shape: &[i64]) -> Result<Raw> {
        ops::view(x, shape)
    }
    fn transpose(&self, x: &Raw, d0: i64, d1: i64) -> Result<Raw> {
        ops::transpose(x, d0, d1)
    }
    fn reshape(&self, x: &Raw, shape: &[i64]) -> Result<Raw> {
        ops::reshape(x, shape)
    }
    fn matmul(&self, a: &Raw, b: &Raw) -> Result<Raw> {
        super::matmul(a, b)
    }
    fn div_scalar(&self, x: &Raw, s: f64) -> Result<Raw> {
        ops::binary(Binary::Div, x, &ops::full(&[], DType::F64, s)?)
    }
    fn causal_softmax(&self, scores: &Raw) -> Result<Raw> {
        let s = *scores.shape().last().unwrap_or(&0);
        let mask: Vec<super::elem::B8> = (0..s * s).map(|i| super::elem::B8(u8::from(i % s > i / s))).collect();
        let mask = Raw::from_vec(&[s, s], &mask)?;
        // `[s, s]` over `[b, h, s, s]`: `torch._masked_softmax`'s mask type 0.
        nn::masked_softmax(scores, &mask, -1, Some(0))
    }
    fn activation(&self, x: &Raw, a: Activation) -> Result<Raw> {
        match a {
            Activation::Gelu => ops::unary(Unary::Gelu, x),
            Activation::Relu => ops::unary(Unary::Relu, x),
            Activation::Silu => ops::silu(x),
        }
    }
    fn cross_entropy(&self, logits: &Raw, targets: &Raw) -> Result<Raw> {
        super::cross_entropy(logits, targets)
    }
}

/// Mean cross-entropy of the logits against `targets`.
pub fn lm_forward(params: &[&Raw], spec: &LmSpec, ids: &Raw, targets: &Raw, training: bool) -> Result<Raw> {
    gpt_loss(&Gpt, params, spec, ids, targets, training)
}

/// Logits `[batch, seq, vocab]`.
pub fn lm_logits(params: &[&Raw], spec: &LmSpec, ids: &Raw) -> Result<Raw> {
    gpt_logits(&Gpt, params, spec, ids, false)
}
