//! The GPT of `crate::vocab::gpt` on libtorch: its parameters, and its ops written
//! with the same libtorch calls as the PyTorch reference in
//! python/tests/lm_reference.py.

use super::{scalar_op, tdevice, Raw, Torch};
use crate::backend::contract::Lm;
use crate::device::Device;
use crate::error::Result;
use crate::vocab::gpt::{gpt_logits, gpt_loss, Activation, GptOps, Init, LmSpec, EPS};

type T = tch::Tensor;

/// The GPT's ops with the libtorch calls of the PyTorch reference model.
/// Every call goes through `scalar_op`: several take a `Scalar`.
struct Gpt;

impl GptOps for Gpt {
    type T = T;
    fn shape(&self, x: &T) -> Vec<i64> {
        x.size()
    }
    fn embedding(&self, w: &T, ids: &T) -> Result<T> {
        scalar_op(|| T::f_embedding(w, ids, -1, false, false))
    }
    fn narrow(&self, x: &T, dim: i64, start: i64, len: i64) -> Result<T> {
        scalar_op(|| x.f_narrow(dim, start, len))
    }
    fn add(&self, a: &T, b: &T) -> Result<T> {
        scalar_op(|| a.f_add(b))
    }
    fn dropout(&self, x: T, p: f64) -> Result<T> {
        scalar_op(|| x.f_dropout(p, true))
    }
    fn layer_norm(&self, x: &T, w: &T, b: &T) -> Result<T> {
        scalar_op(|| x.f_layer_norm(w.size(), Some(w), Some(b), EPS, true))
    }
    fn rms_norm(&self, x: &T, w: &T, b: &T) -> Result<T> {
        scalar_op(|| {
            let ms = x.f_square()?.f_mean_dim(Some(&[-1i64][..]), true, None::<tch::Kind>)?;
            x.f_mul(&ms.f_add_scalar(EPS)?.f_rsqrt()?)?.f_mul(w)?.f_add(b)
        })
    }
    fn linear(&self, x: &T, w: &T, b: &T) -> Result<T> {
        scalar_op(|| x.f_linear(&w.f_tr()?, Some(b)))
    }
    fn linear_t(&self, x: &T, w: &T, b: &T) -> Result<T> {
        scalar_op(|| x.f_linear(w, Some(b)))
    }
    fn view(&self, x: &T, shape: &[i64]) -> Result<T> {
        scalar_op(|| x.f_view(shape))
    }
    fn transpose(&self, x: &T, d0: i64, d1: i64) -> Result<T> {
        scalar_op(|| x.f_transpose(d0, d1))
    }
    fn reshape(&self, x: &T, shape: &[i64]) -> Result<T> {
        scalar_op(|| x.f_contiguous()?.f_view(shape))
    }
    fn matmul(&self, a: &T, b: &T) -> Result<T> {
        scalar_op(|| a.f_matmul(b))
    }
    fn div_scalar(&self, x: &T, s: f64) -> Result<T> {
        scalar_op(|| x.f_div_scalar(s))
    }
    fn causal_softmax(&self, scores: &T) -> Result<T> {
        let s = *scores.size().last().unwrap_or(&0);
        scalar_op(|| {
            let mask = T::f_ones([s, s], (tch::Kind::Bool, scores.device()))?.f_triu(1)?;
            scores.f_masked_fill(&mask, f64::NEG_INFINITY)?.f_softmax(-1, None::<tch::Kind>)
        })
    }
    fn activation(&self, x: &T, a: Activation) -> Result<T> {
        scalar_op(|| match a {
            Activation::Gelu => x.f_gelu("none"),
            Activation::Relu => x.f_relu(),
            Activation::Silu => x.f_silu(),
        })
    }
    fn cross_entropy(&self, logits: &T, targets: &T) -> Result<T> {
        scalar_op(|| logits.f_cross_entropy_loss(targets, None::<T>, tch::Reduction::Mean, -100, 0.0))
    }
}

fn tensors<'a>(params: &[&'a Raw]) -> Vec<&'a T> {
    params.iter().map(|p| &p.0).collect()
}

impl Lm for Torch {
    /// The parameters of `layout`: `randn·0.02` matrices drawn in order from a
    /// CPU generator of this call's own seeded with `seed` (the values
    /// `torch.manual_seed(seed)` then `torch.randn` give, on every device), ones
    /// and zeros. The process's generator is neither read nor reseeded, so
    /// threads initialising at once each get their own seed's weights.
    fn lm_init(layout: &[(Vec<i64>, Init)], dev: Device, seed: i64) -> Result<Vec<Raw>> {
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

    fn lm_forward(params: &[&Raw], spec: &LmSpec, ids: &Raw, targets: &Raw, training: bool) -> Result<Raw> {
        gpt_loss(&Gpt, &tensors(params), spec, &ids.0, &targets.0, training).map(Raw)
    }

    fn lm_logits(params: &[&Raw], spec: &LmSpec, ids: &Raw) -> Result<Raw> {
        gpt_logits(&Gpt, &tensors(params), spec, &ids.0, false).map(Raw)
    }
}
