//! Library identity, errors, memory release and live-handle counters.

use std::ffi::{c_char, c_int};

use super::guard;
use crate::error;
use crate::registry::{DEVICES, OPTIMIZERS, SAFETENSORS, SCALERS, TENSORS};

/// The ABI version as `major << 32 | minor << 16 | patch` (the SONAME is
/// `libenkai_tensor.so.<major>`). Never fails; like every entry, it clears
/// this thread's last error.
#[no_mangle]
pub extern "C" fn enkai_abi_version() -> u64 {
    crate::error::clear();
    const MAJOR: u64 = decimal(env!("ENKAI_ABI_MAJOR"));
    const MINOR: u64 = decimal(env!("ENKAI_ABI_MINOR"));
    const PATCH: u64 = decimal(env!("ENKAI_ABI_PATCH"));
    (MAJOR << 32) | (MINOR << 16) | PATCH
}

/// The version parts come from build.rs (which also sets the SONAME) as text.
const fn decimal(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "an ABI version part is not a number");
        v = v * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    v
}

/// The last error on this thread as `"E_CODE: detail"`, or NULL when the last
/// call succeeded. Owned by the library; valid until the next call on this
/// thread. Does not clear the error.
#[no_mangle]
pub extern "C" fn enkai_tensor_last_error() -> *const c_char {
    error::last_ptr()
}

/// The last error on this thread as an `EnkaiErrorCode` value (0 = none).
/// Does not clear the error.
#[no_mangle]
pub extern "C" fn enkai_tensor_last_error_code() -> c_int {
    error::last_code() as c_int
}

/// Releases a buffer returned by this library (`EnkaiSlice.ptr` or an output
/// string). `len` is ignored: the buffer came from `malloc`. NULL is a no-op.
/// Does not touch the last error.
///
/// # Safety
/// `ptr` is NULL or a buffer this library returned and that was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn enkai_free(ptr: *mut u8, len: usize) {
    let _ = len;
    // SAFETY: per the contract, ptr came from malloc (see ffi::malloc_copy).
    unsafe { libc::free(ptr.cast()) }
}

/// Releases an output string of this library; same as `free(p)`. NULL is a
/// no-op. Does not touch the last error.
///
/// # Safety
/// `p` is NULL or a string this library returned and that was not freed yet.
#[no_mangle]
pub unsafe extern "C" fn enkai_tensor_string_free(p: *mut c_char) {
    // SAFETY: per the contract, p came from malloc (see ffi::malloc_copy).
    unsafe { libc::free(p.cast()) }
}

/// Number of live tensor handles, quantized ones included (not the sum of
/// their reference counts), plus DLPack exports whose deleter has not run yet. Never fails.
#[no_mangle]
pub extern "C" fn enkai_tensor_live_tensors() -> i64 {
    guard(|| Ok(TENSORS.live() + crate::registry::QUANTIZED.live() + crate::dlpack::live_exports()))
}

/// Number of live device handles. Never fails.
#[no_mangle]
pub extern "C" fn enkai_tensor_live_devices() -> i64 {
    guard(|| Ok(DEVICES.live()))
}

/// Number of live optimizer handles. Never fails.
#[no_mangle]
pub extern "C" fn enkai_tensor_live_opts() -> i64 {
    guard(|| Ok(OPTIMIZERS.live()))
}

/// Number of live GradScaler handles. Never fails.
#[no_mangle]
pub extern "C" fn enkai_tensor_live_scalers() -> i64 {
    guard(|| Ok(SCALERS.live()))
}

/// Number of live safetensors handles (open files). Never fails.
#[no_mangle]
pub extern "C" fn enkai_tensor_live_safetensors() -> i64 {
    guard(|| Ok(SAFETENSORS.live()))
}
