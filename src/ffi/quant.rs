//! Weight-only int8 quantization (see `crate::quant`).

use super::guard;
use crate::quant;

/// Symmetric per-channel int8 of the floating tensor `x` (any device, any
/// dtype, read as fp32): zero point 0, `scale = max|slice| / 127` for each
/// index of `axis` (negative counts from the end; 0 for an all-zero slice),
/// `q = nearbyint(x * (1/scale))`, as `torch.quantize_per_channel(x, scales,
/// zeros, axis, torch.qint8)`. The result's dtype is `qint8`, its values
/// host memory. Returns a new quantized tensor handle owned by the caller
/// (free it with `enkai_tensor_free`), or 0 with `E_DTYPE` (not floating),
/// `E_SHAPE` (axis out of range, 0-dim), `E_INVALID_ARG` (a non-finite
/// value), `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_quantize_per_channel(x: i64, axis: i64) -> i64 {
    guard(|| quant::quantize_per_channel(x, axis))
}

/// ggml's `block_q8_0` along the last dim of the floating tensor `x`: per
/// block of 32 values, `d = max|block| / 127` kept as fp16 and `q =
/// roundf(x * (1/d))` (`quantize_row_q8_0_ref`). The result's dtype is
/// `q8_0`; `enkai_tensor_copy_to` gives ggml's bytes (per block: `d`
/// little-endian fp16, then 32 int8). Returns a new quantized tensor handle
/// owned by the caller, or 0 with `E_DTYPE`, `E_SHAPE` (the last dim not a
/// multiple of 32, 0-dim), `E_INVALID_ARG` (a non-finite value, or a block
/// whose scale overflows fp16), `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_quantize_q8_0(x: i64) -> i64 {
    guard(|| quant::quantize_q8_0(x))
}

/// The float32 values `q * scale` of the quantized tensor `q`, in its
/// logical shape, on the CPU of the backend that quantized it. Returns a new
/// tensor handle owned by the caller, or 0 with `E_HANDLE_*` (`E_HANDLE_KIND`
/// for a plain tensor).
#[no_mangle]
pub extern "C" fn enkai_dequantize(q: i64) -> i64 {
    guard(|| quant::dequantize(q))
}

/// The scales of the quantized tensor `q` as float32: `[shape[axis]]` for
/// qint8, the shape with its last dim divided by 32 for q8_0 (each an fp16
/// value). Returns a new tensor handle owned by the caller, or 0 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_quantized_scales(q: i64) -> i64 {
    guard(|| quant::scales(q))
}
