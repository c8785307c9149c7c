//! The typed ops whose semantics are not an op table row's (the others are
//! generated into `typed.rs`): `view`'s copy fallback, `concat`'s JSON
//! handle list, `linear`'s `[in, out]` weight, and the seed's fused ops
//! and their backwards. Each returns a new tensor handle owned by the caller
//! (release with `enkai_tensor_free`) and leaves its inputs unchanged; on
//! error it returns 0. Every op can fail with `E_HANDLE_*` (bad input handle),
//! `E_BACKEND_MISMATCH`, `E_DEVICE` (inputs on different devices) and
//! `E_TORCH` (libtorch refused for a reason not classified below).

use std::ffi::{c_char, c_int};

use super::{dims_arg, dtype_arg, guard, str_arg, EnkaiSlice};
use crate::json::{self, DimsRule};
use crate::ops;

/// `x.view(shape)`, falling back to a copy when the strides allow no view
/// (where `enkai_op`'s `view` is an error, as PyTorch's).
/// Errors as `enkai_tensor_reshape`.
///
/// # Safety
/// `shape` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_view(x: i64, shape: *const c_char) -> i64 {
    guard(|| ops::view(x, &unsafe { dims_arg(shape, "shape", DimsRule::Target)? }))
}

/// `torch.cat` of the JSON handle list `handles` along `dim`.
/// Errors: `E_NULL_POINTER`, `E_INVALID_ARG` (bad or empty list), `E_SHAPE`, `E_DTYPE`.
///
/// # Safety
/// `handles` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_concat(handles: *const c_char, dim: i64) -> i64 {
    guard(|| ops::concat(unsafe { str_arg(handles, "handles")? }, dim))
}

/// `x[start:end:step]` along `dim` (Python slice semantics, clamped; `step > 0`).
/// Errors: `E_INVALID_ARG` (step), `E_SHAPE` (dim).
#[no_mangle]
pub extern "C" fn enkai_tensor_slice(x: i64, dim: i64, start: i64, end: i64, step: i64) -> i64 {
    guard(|| ops::slice(x, dim, start, end, step))
}

/// `torch._masked_softmax(x, mask != 0, dim, mask_type)`: `mask` of any dtype,
/// non-zero = masked out; a fully masked row gives zeros. `mask_type` 0: `[L,L]`
/// mask for a `[B,H,L,L]` input, 1: `[B,L]` key-padding mask, 2: mask of x's shape.
/// Errors: `E_INVALID_ARG` (mask_type), `E_SHAPE`, `E_DTYPE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_masked_softmax(x: i64, mask: i64, dim: i64, mask_type: i64) -> i64 {
    guard(|| ops::masked_softmax(x, mask, dim, mask_type))
}

/// Gradient of `masked_softmax` w.r.t. its input, from its output `out`
/// (mask of x's shape). Errors: `E_SHAPE`, `E_DTYPE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_masked_softmax_backward(grad_out: i64, out: i64, mask: i64, dim: i64) -> i64 {
    guard(|| ops::masked_softmax_backward(grad_out, out, mask, dim))
}

/// `torch.nn.functional.dropout(x, p, training=train != 0)`; identity when
/// `train` is 0 or `p` is 0. Errors: `E_INVALID_ARG` (p outside [0,1]), `E_DTYPE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_dropout(x: i64, p: f64, train: c_int) -> i64 {
    guard(|| ops::dropout(x, p, train != 0))
}

/// `torch.nn.functional.layer_norm` over `w`'s trailing shape; `b` may be 0
/// for no bias. Errors: `E_SHAPE`, `E_DTYPE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_layernorm(x: i64, w: i64, b: i64, eps: f64) -> i64 {
    guard(|| ops::layernorm(x, w, b, eps))
}

/// Gradients of `layernorm(x, w, b, eps)` for `grad_out`, as JSON bytes
/// `[dx,dw,db]` of new handles owned by the caller (`db` is 0 when `b` is 0);
/// release the slice with `enkai_free`. `{NULL,0}` on error (`E_SHAPE`, …).
#[no_mangle]
pub extern "C" fn enkai_tensor_layernorm_backward(x: i64, w: i64, b: i64, eps: f64, grad_out: i64) -> EnkaiSlice {
    guard(|| EnkaiSlice::from_bytes(json::write_int_list(&ops::layernorm_backward(x, w, b, eps, grad_out)?).as_bytes()))
}

/// `torch.nn.functional.embedding(ids, w)`: rows of `w` `[vocab, dim]` picked
/// by int64/int32 `ids`. Errors: `E_DTYPE` (ids), `E_SHAPE` (ids out of range).
#[no_mangle]
pub extern "C" fn enkai_tensor_embedding(w: i64, ids: i64) -> i64 {
    guard(|| ops::embedding(w, ids))
}

/// `x @ w + b` with `w` laid out `[in, out]` (`F.linear(x, w.T, b)`; an
/// autocast op); `b` may be 0 for none. `w` may be a qint8 tensor with its
/// scales along dim 1: an int8 product with an fp32 result (README
/// "Quantized tensors"). Errors: `E_SHAPE`, `E_DTYPE`, `E_UNSUPPORTED` (a
/// quantized `w` of another layout), `E_DEVICE` (a quantized `w` with a CUDA `x`).
#[no_mangle]
pub extern "C" fn enkai_tensor_linear(x: i64, w: i64, b: i64) -> i64 {
    guard(|| ops::linear(x, w, b))
}

/// `torch.nn.functional.cross_entropy(logits, targets)`, mean over rows;
/// `targets` are int64 class ids (or probabilities of the logits' shape).
/// Errors: `E_SHAPE`, `E_DTYPE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_cross_entropy(logits: i64, targets: i64) -> i64 {
    guard(|| ops::cross_entropy(logits, targets))
}

/// A copy of `x` on the device `dev` (differentiable). Errors: `E_DEVICE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_to_device(x: i64, dev: i64) -> i64 {
    guard(|| ops::to_device(x, dev))
}

/// `x` converted to `dtype` (differentiable for floating dtypes).
/// Errors: `E_NULL_POINTER`, `E_INVALID_ARG` (unknown dtype).
///
/// # Safety
/// `dtype` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_to_dtype(x: i64, dtype: *const c_char) -> i64 {
    guard(|| ops::to_dtype(x, unsafe { dtype_arg(dtype, "dtype")? }))
}

