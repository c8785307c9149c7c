//! The language-model helpers: a pre-norm GPT whose parameters are plain
//! tensor handles in a fixed order (the header documents it at
//! `enkai_tensor_tinylm_init`), initialised and run here so a
//! client trains it with nothing but handles.
//!
//! Order: `tok_embed[V,D]`, `pos_embed[S,D]`, per layer `ln1_w, ln1_b,
//! qkv_w[D,3D], qkv_b, proj_w[D,D], proj_b, ln2_w, ln2_b, mlp_w1[D,F],
//! mlp_b1, mlp_w2[F,D], mlp_b2`, then `ln_f_w, ln_f_b, head_w[D,V], head_b[V]`
//! (`head_w` is absent when `tie_embeddings`: the head is `tok_embed`ᵀ).

use crate::backend::{self, imp};
use crate::dtype::DType;
use crate::error::Result;
use crate::json;
use crate::registry::TENSORS;
use crate::tensor;
pub use crate::vocab::gpt::{gpt_logits, gpt_loss, Activation, GptOps, Init, LmSpec, Norm, EPS, MAX_LAYERS, MAX_MATRIX_ELEMENTS};

/// Creates the parameters (fp32, on `dev`, requiring grad); returns their handles.
pub fn init(spec: &LmSpec, dev: i64, seed: i64) -> Result<Vec<i64>> {
    let d = tensor::device(dev)?;
    let b = backend::active_built()?;
    b.check_device(d)?;
    tensor::register_all(b, imp::lm_init(b, &spec.layout(), d, seed)?)
}

/// The spec a TinyLM parameter list implies (shapes give V, S, D, L).
fn tiny_spec_of(params: &[crate::handles::Ref<'_, backend::Tensor>], n_heads: i64) -> Result<LmSpec> {
    let n = params.len();
    if n < 6 || !(n - 6).is_multiple_of(12) {
        crate::bail!(E_INVALID_ARG, "tinylm: {n} params is not 6 + 12 x n_layers");
    }
    let tok = imp::shape(&params[0].raw);
    let pos = imp::shape(&params[1].raw);
    if tok.len() != 2 || pos.len() != 2 {
        crate::bail!(E_SHAPE, "tinylm: tok_embed {} and pos_embed {} must be matrices", json::write_int_list(&tok), json::write_int_list(&pos));
    }
    LmSpec::tiny(tok[0], pos[0], tok[1], ((n - 6) / 12) as i64, n_heads)
}

fn ids(what: &str, data: &[u32], batch: i64, seq: i64, m: &Model) -> Result<imp::Raw> {
    let vocab = m.spec.vocab;
    if batch <= 0 || seq <= 0 || batch.checked_mul(seq) != Some(data.len() as i64) {
        crate::bail!(E_SHAPE, "forward: {} {what} ids given for batch {batch} x seq {seq}", data.len());
    }
    if let Some(i) = data.iter().position(|&t| i64::from(t) >= vocab) {
        crate::bail!(E_INVALID_ARG, "forward: {what} id {} at position {i} is not below vocab_size {vocab}", data[i]);
    }
    imp::from_bytes(m.backend, &tensor::ids_as_int64(data), &[batch, seq], DType::I64, m.dev)
}

/// Borrowed params checked against `spec` (or the TinyLM spec their shapes imply).
struct Model {
    params: Vec<crate::handles::Ref<'static, backend::Tensor>>,
    spec: LmSpec,
    backend: backend::BackendId,
    dev: crate::device::Device,
}

fn model(params: &str, spec: Option<&LmSpec>, n_heads: i64, seq: i64) -> Result<Model> {
    let hs = json::handle_list(params)?;
    let ps = TENSORS.get_many(&hs)?;
    let spec = match spec {
        Some(s) => *s,
        None => tiny_spec_of(&ps, n_heads)?,
    };
    let layout = spec.layout();
    if ps.len() != layout.len() {
        crate::bail!(E_INVALID_ARG, "forward: the spec needs {} params, {} given", layout.len(), ps.len());
    }
    for (i, (p, (shape, _))) in ps.iter().zip(&layout).enumerate() {
        let got = imp::shape(&p.raw);
        if got != *shape {
            crate::bail!(E_SHAPE, "forward: param {i} has shape {}, the spec needs {}", json::write_int_list(&got), json::write_int_list(shape));
        }
    }
    if seq > spec.seq {
        crate::bail!(E_SHAPE, "forward: seq {seq} is longer than seq_len {}", spec.seq);
    }
    let refs: Vec<&backend::Tensor> = ps.iter().map(|p| &**p).collect();
    let backend = backend::same_backend("forward", &refs)?;
    let dev = imp::device(&ps[0].raw);
    Ok(Model { params: ps.into_vec(), spec, backend, dev })
}

/// Mean cross-entropy of the model on `input` → `target`; a new loss handle.
#[allow(clippy::too_many_arguments)]
pub fn forward(params: &str, spec: Option<&LmSpec>, n_heads: i64, input: &[u32], target: &[u32], batch: i64, seq: i64, training: bool) -> Result<i64> {
    let m = model(params, spec, n_heads, seq)?;
    let x = ids("input", input, batch, seq, &m)?;
    let y = ids("target", target, batch, seq, &m)?;
    let raws: Vec<&imp::Raw> = m.params.iter().map(|p| &p.raw).collect();
    let loss = imp::lm_forward(&raws, &m.spec, &x, &y, training)?;
    crate::trace::opaque_result("the fused TinyLM loss (enkai_tensor_forward_lm)", &[], tensor::register(m.backend, loss))
}

/// The logits `[batch, seq, vocab]` of the model on `input` (no dropout); a new handle.
pub fn logits(params: &str, spec: &LmSpec, input: &[u32], batch: i64, seq: i64) -> Result<i64> {
    let m = model(params, Some(spec), spec.n_heads, seq)?;
    let x = ids("input", input, batch, seq, &m)?;
    let raws: Vec<&imp::Raw> = m.params.iter().map(|p| &p.raw).collect();
    // A fused step has no ONNX form: traced as such, so an export refuses it by name.
    crate::trace::opaque_result("the fused TinyLM logits (enkai_tensor_lm_logits)", &[], tensor::register(m.backend, imp::lm_logits(&raws, &m.spec, &x)?))
}
