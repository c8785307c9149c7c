//! Backend selection, devices and the RNG seed.

use std::ffi::{c_char, c_int};

use super::{guard, status, str_arg, OutStr};
use crate::backend::{self, BackendId};
use crate::registry::DEVICES;
use crate::tensor;

/// Writes the JSON array of backends this build contains (e.g. `["torch","cpu"]`)
/// to `*out` (malloc'ed, NUL-terminated; free with `enkai_tensor_string_free`)
/// and its length to `*out_len`. Returns 0, or 1 with `E_NULL_POINTER`.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_backend_list(out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| {
        let out = unsafe { OutStr::new(out, out_len)? };
        let names: Vec<String> = backend::built().iter().map(|n| format!("\"{n}\"")).collect();
        out.write(&format!("[{}]", names.join(",")))
    })
}

/// Selects the backend that creates new tensors, process-wide: `torch`
/// (libtorch) or `cpu` (the native Rust backend). Overrides `ENKAI_BACKEND`,
/// which otherwise picks the default (torch when built in, else cpu).
/// Returns 0, or 1 with `E_NULL_POINTER`, `E_INVALID_ARG`,
/// `E_BACKEND_UNKNOWN` or `E_BACKEND_UNAVAILABLE`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_backend_set(name: *const c_char) -> c_int {
    status(|| backend::set_active(BackendId::parse(unsafe { str_arg(name, "name")? })?))
}

/// Writes the active backend's bare name (e.g. `torch`) like `enkai_backend_list`.
/// Returns 0, or 1 with `E_NULL_POINTER`.
///
/// # Safety
/// `out` and `out_len` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn enkai_backend_current(out: *mut *mut c_char, out_len: *mut usize) -> c_int {
    status(|| unsafe { OutStr::new(out, out_len)? }.write(backend::active().name()))
}

/// Copies tensor `t` to backend `name` (`torch` or `cpu`): a new handle owned
/// by the caller, same shape, dtype and values, contiguous, on the CPU, with
/// no autograd history. On its own backend, a new handle on `t` itself (as
/// `Tensor.to` on the same device). Returns 0 on error: `E_NULL_POINTER`,
/// `E_INVALID_ARG`, `E_HANDLE_*`, `E_BACKEND_UNKNOWN`,
/// `E_BACKEND_UNAVAILABLE`, `E_RESOURCE`, `E_TORCH`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_to_backend(t: i64, name: *const c_char) -> i64 {
    guard(|| tensor::to_backend(t, BackendId::parse(unsafe { str_arg(name, "name")? })?))
}

/// A new device handle for `cpu`, `cuda`, `cuda:N` or `auto` (cuda:0 when CUDA
/// is usable, else cpu); owned by the caller, release with
/// `enkai_tensor_device_free`. Returns 0 on error: `E_NULL_POINTER`,
/// `E_INVALID_ARG` (unknown name), `E_DEVICE` (that CUDA device does not exist).
///
/// # Safety
/// `spec` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_device(spec: *const c_char) -> i64 {
    guard(|| tensor::device_create(unsafe { str_arg(spec, "device")? }))
}

/// Adds a reference to a device handle. Returns 0, or 1 with `E_HANDLE_*`.
#[no_mangle]
pub extern "C" fn enkai_tensor_device_retain(dev: i64) -> c_int {
    status(|| DEVICES.retain(dev))
}

/// Drops a reference to a device handle; the last one frees it. Returns 0,
/// or 1 with `E_HANDLE_*` (a double free is `E_HANDLE_STALE`).
#[no_mangle]
pub extern "C" fn enkai_tensor_device_free(dev: i64) -> c_int {
    status(|| DEVICES.release(dev))
}

/// Seeds the active backend's random generators (CPU and every CUDA device),
/// so the same seed gives the same `randn`. Returns 0, or 1 with `E_BACKEND_UNAVAILABLE`.
#[no_mangle]
pub extern "C" fn enkai_tensor_manual_seed(seed: i64) -> c_int {
    status(|| tensor::manual_seed(seed))
}

/// Sets the number of threads compute kernels use, process-wide, as
/// `torch.set_num_threads(n)` (libtorch's intra-op pool). `n` is 1..=1024.
/// `ENKAI_NUM_THREADS` sets it before the first device is made, unless this
/// was called first. Returns 0, or 1 with `E_INVALID_ARG`.
#[no_mangle]
pub extern "C" fn enkai_set_num_threads(n: i64) -> c_int {
    status(|| crate::threads::set(n))
}

/// The number of threads compute kernels use (`torch.get_num_threads()`).
/// Never fails.
#[no_mangle]
pub extern "C" fn enkai_get_num_threads() -> i64 {
    guard(|| Ok(crate::threads::get()))
}
