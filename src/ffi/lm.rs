//! The language-model helpers the Enkai runtime loads by name, so their C
//! signatures are fixed (capi-tests/test_client_loop.c resolves them as it does).

use std::ffi::{c_char, c_int};

use super::{bytes_arg, guard, status, str_arg, OutStr};
use crate::json;
use crate::lm::{self, LmSpec};

/// Creates a TinyLM's parameters (pre-norm GPT, `randn·0.02` matrices from
/// `seed`, norm weights 1, biases 0; fp32, requiring grad) on `dev` and
/// writes their handles as a JSON array to `*out`, in this order:
/// `tok_embed[V,D]`, `pos_embed[S,D]`, per layer `ln1_w, ln1_b, qkv_w[D,3D],
/// qkv_b, proj_w[D,D], proj_b, ln2_w, ln2_b, mlp_w1[D,F], mlp_b1, mlp_w2[F,D],
/// mlp_b2`, then `ln_f_w, ln_f_b, head_w[D,V], head_b[V]` (free with
/// `enkai_tensor_string_free`); the handles are owned by the caller.
/// Returns 0, or 1 with `E_INVALID_ARG`, `E_NULL_POINTER`, `E_HANDLE_*`, `E_DEVICE`.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn enkai_tensor_tinylm_init(
    vocab: i64,
    seq: i64,
    d_model: i64,
    n_layers: i64,
    n_heads: i64,
    dev: i64,
    seed: i64,
    out: *mut *mut c_char,
    out_len: *mut usize,
) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        let spec = LmSpec::tiny(vocab, seq, d_model, n_layers, n_heads)?;
        out.write(&json::write_int_list(&lm::init(&spec, dev, seed)?))
    })
}

/// Mean next-token cross-entropy of the TinyLM `params` (as made by
/// `enkai_tensor_tinylm_init`) on `input` → `target`, each `batch × seq`
/// token ids. Returns a new scalar loss handle owned by the caller (call
/// `enkai_tensor_backward` on it), or 0 with `E_SHAPE`, `E_INVALID_ARG`
/// (id ≥ vocab, bad list), `E_NULL_POINTER`, `E_HANDLE_*`, `E_TORCH`.
///
/// # Safety
/// `params` is NULL or a NUL-terminated string; `input`/`target` are NULL or
/// readable for `n_in`/`n_tgt` values.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn enkai_tensor_forward_tinylm(
    params: *const c_char,
    input: *const u32,
    n_in: usize,
    target: *const u32,
    n_tgt: usize,
    batch: i64,
    seq: i64,
    n_heads: i64,
) -> i64 {
    guard(|| {
        let (input, target) = unsafe { (bytes_arg(input, n_in, "input")?, bytes_arg(target, n_tgt, "target")?) };
        lm::forward(unsafe { str_arg(params, "params")? }, None, n_heads, input, target, batch, seq, false)
    })
}

/// Like `enkai_tensor_tinylm_init` for the model described by `spec_json`
/// (`vocab_size`, `seq_len`, `d_model`, `n_layers`, `n_heads`; optional
/// `ff_mult` 4, `activation` gelu|relu|silu, `norm` layernorm|rmsnorm,
/// `tie_embeddings` (no `head_w`; the head is `tok_embed`ᵀ), `dropout`).
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG` (malformed spec, a
/// size over its limit), `E_HANDLE_*`, `E_DEVICE`, `E_TORCH`; nothing is created on error.
///
/// # Safety
/// `spec_json` is NULL or a NUL-terminated string; `out`, `out_len` NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_lm_init(
    spec_json: *const c_char,
    dev: i64,
    seed: i64,
    out: *mut *mut c_char,
    out_len: *mut usize,
) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        let spec = LmSpec::parse(unsafe { str_arg(spec_json, "spec_json")? })?;
        out.write(&json::write_int_list(&lm::init(&spec, dev, seed)?))
    })
}

/// Like `enkai_tensor_forward_tinylm` for the model of `spec_json`; dropout
/// applies only when `training` is non-zero. Returns the loss (a new handle
/// owned by the caller), or 0 with `E_NULL_POINTER`, `E_INVALID_ARG` (spec),
/// `E_SHAPE` (params or ids do not fit the spec), `E_HANDLE_*`, `E_DTYPE`, `E_TORCH`.
///
/// # Safety
/// As `enkai_tensor_forward_tinylm`; `spec_json` is NULL or a NUL-terminated string.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn enkai_tensor_forward_lm(
    params: *const c_char,
    spec_json: *const c_char,
    input: *const u32,
    n_in: usize,
    target: *const u32,
    n_tgt: usize,
    batch: i64,
    seq: i64,
    training: c_int,
) -> i64 {
    guard(|| {
        let spec = LmSpec::parse(unsafe { str_arg(spec_json, "spec_json")? })?;
        let (input, target) = unsafe { (bytes_arg(input, n_in, "input")?, bytes_arg(target, n_tgt, "target")?) };
        lm::forward(unsafe { str_arg(params, "params")? }, Some(&spec), spec.n_heads, input, target, batch, seq, training != 0)
    })
}

/// The logits `[batch, seq, vocab]` of the model of `spec_json` on `input`
/// (`batch × seq` ids; no dropout), for sampling. Returns a new handle owned
/// by the caller, or 0 with the errors of `enkai_tensor_forward_lm`.
///
/// # Safety
/// `params` and `spec_json` are NULL or NUL-terminated strings; `input` NULL or readable for `n_in` values.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_lm_logits(
    params: *const c_char,
    spec_json: *const c_char,
    input: *const u32,
    n_in: usize,
    batch: i64,
    seq: i64,
) -> i64 {
    guard(|| {
        let spec = LmSpec::parse(unsafe { str_arg(spec_json, "spec_json")? })?;
        let input = unsafe { bytes_arg(input, n_in, "input")? };
        lm::logits(unsafe { str_arg(params, "params")? }, &spec, input, batch, seq)
    })
}
