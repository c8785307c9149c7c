//! Tensor lifetime and data in/out.

use std::ffi::{c_char, c_int, c_void};

use super::{bytes_arg, bytes_out, dims_arg, dtype_arg, guard, guard_or, status, EnkaiSlice, OutStr};
use crate::backend::Init;
use crate::error::Result;
use crate::json::DimsRule;
use crate::{json, tensor};

/// Adds a reference to a tensor handle. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_retain(t: i64) -> c_int {
    status(|| crate::quant::retain(t))
}

/// Drops a reference to a tensor handle (a quantized one too); the last one frees the tensor.
/// Returns 0, or 1 with `E_HANDLE_*` (a double free is `E_HANDLE_STALE`).
#[no_mangle]
pub extern "C" fn enkai_tensor_free(t: i64) -> c_int {
    status(|| crate::quant::release(t))
}

/// Shared body of the shape/dtype/device constructors.
unsafe fn create(shape: *const c_char, dtype: *const c_char, dev: i64, init: Init) -> Result<i64> {
    let shape = unsafe { dims_arg(shape, "shape", DimsRule::Shape)? };
    let dtype = unsafe { dtype_arg(dtype, "dtype")? };
    tensor::create(&shape, dtype, dev, init)
}

/// A new tensor of standard-normal samples from the active backend's RNG.
/// `shape` is a JSON array (`"[2,3]"`, `"[]"` for a scalar); `dtype` must be
/// floating. Returns a handle owned by the caller, or 0 with `E_NULL_POINTER`,
/// `E_INVALID_ARG`, `E_DTYPE`, `E_SHAPE`, `E_DEVICE`, `E_HANDLE_*`, `E_TORCH`.
///
/// # Safety
/// `shape` and `dtype` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_randn(shape: *const c_char, dtype: *const c_char, dev: i64) -> i64 {
    guard(|| unsafe { create(shape, dtype, dev, Init::Randn) })
}

/// A new tensor of zeros; arguments, ownership and errors as `enkai_tensor_randn`
/// (any dtype).
///
/// # Safety
/// `shape` and `dtype` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_zeros(shape: *const c_char, dtype: *const c_char, dev: i64) -> i64 {
    guard(|| unsafe { create(shape, dtype, dev, Init::Zeros) })
}

/// A new tensor of ones; arguments, ownership and errors as `enkai_tensor_randn`
/// (any dtype).
///
/// # Safety
/// `shape` and `dtype` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_ones(shape: *const c_char, dtype: *const c_char, dev: i64) -> i64 {
    guard(|| unsafe { create(shape, dtype, dev, Init::Ones) })
}

/// A new tensor filled with `value` (converted to `dtype` as `torch.full` does);
/// ownership and errors as `enkai_tensor_randn`, plus `E_INVALID_ARG` for a
/// value the dtype cannot hold (PyTorch's overflow rule: 1e308 for fp32, 256
/// for uint8, NaN for an integer type).
///
/// # Safety
/// `shape` and `dtype` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_full(shape: *const c_char, value: f64, dtype: *const c_char, dev: i64) -> i64 {
    guard(|| unsafe { create(shape, dtype, dev, Init::Full(value)) })
}

/// A new tensor holding a copy of `nbytes` bytes at `data`, laid out
/// contiguously in `dtype` (native byte order; bool bytes must be 0 or 1).
/// `nbytes` must equal numel × itemsize; `data` may be NULL only when it is 0.
/// The caller keeps ownership of `data`. Returns a handle owned by the caller,
/// or 0 with `E_SHAPE` (size mismatch), `E_NULL_POINTER`, `E_INVALID_ARG`,
/// `E_DEVICE`, `E_HANDLE_*`, `E_TORCH`.
///
/// # Safety
/// `data` is NULL or readable for `nbytes` bytes; `shape` and `dtype` are NULL
/// or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_from_data(
    data: *const c_void,
    nbytes: usize,
    shape: *const c_char,
    dtype: *const c_char,
    dev: i64,
) -> i64 {
    guard(|| {
        let bytes = unsafe { bytes_arg(data.cast::<u8>(), nbytes, "data")? };
        let shape = unsafe { dims_arg(shape, "shape", DimsRule::Shape)? };
        let dtype = unsafe { dtype_arg(dtype, "dtype")? };
        tensor::from_data(bytes, &shape, dtype, dev)
    })
}

/// Copies the tensor's elements, contiguous and in its own dtype, into `dst`
/// (from any device). `nbytes` is the buffer's size and must be at least
/// numel × itemsize; exactly that many bytes are written. A quantized
/// tensor gives its int8 values (qint8, numel bytes) or ggml's `block_q8_0`
/// bytes (q8_0, 34 per 32 elements). Returns 0, or 1 with
/// `E_SHAPE` (buffer too small; nothing written), `E_NULL_POINTER`, `E_HANDLE_*`, `E_TORCH`.
///
/// # Safety
/// `dst` is NULL or writable for `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_copy_to(t: i64, dst: *mut c_void, nbytes: usize) -> c_int {
    status(|| {
        let dst = unsafe { bytes_out(dst.cast::<u8>(), nbytes, "dst")? };
        tensor::copy_to(t, dst).map(drop)
    })
}

/// A new int64 tensor `[batch, seq]` of the `n` token ids at `ids`
/// (`n` must equal batch × seq). Returns a handle owned by the caller, or 0 with
/// `E_SHAPE`, `E_NULL_POINTER`, `E_DEVICE`, `E_HANDLE_*`, `E_TORCH`.
///
/// # Safety
/// `ids` is NULL or readable for `n` values.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_ids_u32(ids: *const u32, n: usize, batch: i64, seq: i64, dev: i64) -> i64 {
    guard(|| tensor::ids_u32(unsafe { bytes_arg(ids, n, "ids")? }, batch, seq, dev))
}

/// The single element of a one-element tensor (any shape) as a double.
/// Returns NaN with `E_SHAPE` (not exactly one element), `E_HANDLE_*` or
/// `E_TORCH`; check `enkai_tensor_last_error_code()` to tell an error from a NaN value.
#[no_mangle]
pub extern "C" fn enkai_tensor_item(t: i64) -> f64 {
    guard(|| tensor::item(t))
}

/// The tensor's shape as JSON bytes (`[2,3]`, `[]` for a scalar), not counted
/// NUL-terminated; release with `enkai_free(ptr, len)`. Returns `{NULL, 0}`
/// with `E_HANDLE_*` on error.
#[no_mangle]
pub extern "C" fn enkai_tensor_shape(t: i64) -> EnkaiSlice {
    guard(|| EnkaiSlice::from_bytes(json::write_int_list(&tensor::shape(t)?).as_bytes()))
}

/// Writes the tensor's canonical dtype name (`fp32`, `bf16`, `int64`, …;
/// `qint8` or `q8_0` for a quantized tensor) to
/// `*out` (malloc'ed; free with `enkai_tensor_string_free`) and its length to
/// `*out_len`. Returns 0, or 1 with `E_NULL_POINTER`, `E_HANDLE_*`, `E_DTYPE`.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_dtype(t: i64, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        out.write(tensor::dtype_name(t)?)
    })
}

/// Writes the device the tensor lives on (`cpu`, `cuda:N`) to `*out`
/// (malloc'ed; free with `enkai_tensor_string_free`) and its length to
/// `*out_len`. Returns 0, or 1 with `E_NULL_POINTER`, `E_HANDLE_*`.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_device_name(t: i64, out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        out.write(&tensor::device_of(t)?.to_string())
    })
}

/// The number of elements, or -1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_numel(t: i64) -> i64 {
    guard_or(-1, || tensor::numel(t))
}
