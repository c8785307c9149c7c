//! The GPT forward pass of `crate::lm`, written with the same libtorch ops,
//! in the same order, as the PyTorch reference in python/tests/lm_reference.py.

use super::{tdevice, Raw};
use crate::device::Device;
use crate::error::Result;
use crate::lm::{Activation, Init, LmSpec, Norm, EPS};

type T = tch::Tensor;
type R<X> = std::result::Result<X, tch::TchError>;

/// The parameters of `layout`: `randn·0.02` matrices drawn in order from a
/// CPU generator of this call's own seeded with `seed` (the values
/// `torch.manual_seed(seed)` then `torch.randn` give, on every device), ones
/// and zeros. The process's generator is neither read nor reseeded, so
/// threads initialising at once each get their own seed's weights.
pub fn lm_init(layout: &[(Vec<i64>, Init)], dev: Device, seed: i64) -> Result<Vec<Raw>> {
    let gen = super::train::SeededGenerator::new(seed)?;
    let opts = (tch::Kind::Float, tdevice(dev));
    let make = |shape: &[i64], init: Init| -> Result<T> {
        let t = match init {
            Init::Normal => {
                let drawn = gen.randn(shape)?;
                super::scalar_op(|| drawn.f_mul_scalar(0.02)?.f_to_device(opts.1))?
            }
            Init::One => T::f_ones(shape, opts).map_err(super::torch_err)?,
            Init::Zero => T::f_zeros(shape, opts).map_err(super::torch_err)?,
        };
        t.f_set_requires_grad(true).map_err(super::torch_err)
    };
    layout.iter().map(|(s, i)| make(s, *i).map(Raw)).collect()
}

fn norm(x: &T, w: &T, b: &T, kind: Norm) -> R<T> {
    match kind {
        Norm::LayerNorm => x.f_layer_norm(w.size(), Some(w), Some(b), EPS, true),
        Norm::RmsNorm => {
            let ms = x.f_square()?.f_mean_dim(Some(&[-1i64][..]), true, None::<tch::Kind>)?;
            x.f_mul(&ms.f_add_scalar(EPS)?.f_rsqrt()?)?.f_mul(w)?.f_add(b)
        }
    }
}

/// `F.linear(x, w.T, b)` for `w` laid out `[in, out]`.
fn linear(x: &T, w: &T, b: &T) -> R<T> {
    x.f_linear(&w.f_tr()?, Some(b))
}

fn dropout(x: T, p: f64, training: bool) -> R<T> {
    if training && p > 0.0 {
        x.f_dropout(p, true)
    } else {
        Ok(x)
    }
}

/// Mean cross-entropy of the logits against `targets`.
pub fn lm_forward(params: &[&Raw], spec: &LmSpec, ids: &Raw, targets: &Raw, training: bool) -> Result<Raw> {
    let run = || -> R<T> {
        let logits = logits(params, spec, ids, training)?;
        let n = targets.0.numel() as i64;
        logits.f_view([n, spec.vocab])?.f_cross_entropy_loss(&targets.0.f_view([n])?, None::<T>, tch::Reduction::Mean, -100, 0.0)
    };
    super::scalar_op(run).map(Raw)
}

/// Logits `[batch, seq, vocab]`.
pub fn lm_logits(params: &[&Raw], spec: &LmSpec, ids: &Raw) -> Result<Raw> {
    super::scalar_op(|| logits(params, spec, ids, false)).map(Raw)
}

fn logits(params: &[&Raw], spec: &LmSpec, ids: &Raw, training: bool) -> R<T> {
    {
        let p = |i: usize| &params[i].0;
        let size = ids.0.size();
        let (b, s) = (size[0], size[1]);
        let (d, h) = (spec.d_model, spec.n_heads);
        let dh = d / h;
        let pos = p(1).f_narrow(0, 0, s)?;
        let mut x = dropout(T::f_embedding(p(0), &ids.0, -1, false, false)?.f_add(&pos)?, spec.dropout, training)?;
        let mask = T::f_ones([s, s], (tch::Kind::Bool, ids.0.device()))?.f_triu(1)?;
        let heads = |t: T| t.f_view([b, s, h, dh])?.f_transpose(1, 2);
        for l in 0..spec.n_layers as usize {
            let w = |k: usize| p(2 + 12 * l + k);
            let a = norm(&x, w(0), w(1), spec.norm)?;
            let qkv = linear(&a, w(2), w(3))?;
            let q = heads(qkv.f_narrow(-1, 0, d)?)?;
            let k = heads(qkv.f_narrow(-1, d, d)?)?;
            let v = heads(qkv.f_narrow(-1, 2 * d, d)?)?;
            let scores = q.f_matmul(&k.f_transpose(-2, -1)?)?.f_div_scalar((dh as f64).sqrt())?;
            let att = scores.f_masked_fill(&mask, f64::NEG_INFINITY)?.f_softmax(-1, None::<tch::Kind>)?;
            let y = att.f_matmul(&v)?.f_transpose(1, 2)?.f_contiguous()?.f_view([b, s, d])?;
            x = x.f_add(&dropout(linear(&y, w(4), w(5))?, spec.dropout, training)?)?;
            let m = linear(&norm(&x, w(6), w(7), spec.norm)?, w(8), w(9))?;
            let m = match spec.activation {
                Activation::Gelu => m.f_gelu("none")?,
                Activation::Relu => m.f_relu()?,
                Activation::Silu => m.f_silu()?,
            };
            x = x.f_add(&dropout(linear(&m, w(10), w(11))?, spec.dropout, training)?)?;
        }
        let base = 2 + 12 * spec.n_layers as usize;
        let x = norm(&x, p(base), p(base + 1), spec.norm)?;
        if spec.tie_embeddings {
            x.f_linear(p(0), Some(p(base + 2)))
        } else {
            linear(&x, p(base + 2), p(base + 3))
        }
    }
}
