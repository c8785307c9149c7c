//! Every `extern "C"` function, grouped by concern. Each body is short:
//! `guard(|| { convert arguments → call the safe core → convert the result })`.
//! This module holds the two helpers they share: the panic boundary and the
//! checked conversion of caller pointers.

pub mod amp;
pub mod autograd;
pub mod backend;
pub mod checkpoint;
pub mod dist;
pub mod dlpack;
pub mod library;
pub mod lm;
pub mod onnx;
pub mod op;
pub mod ops;
pub mod quant;
pub mod optim;
pub mod safetensors;
pub mod tensor;
pub mod typed;

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::dtype::DType;
use crate::error::{self, Result};
use crate::json;

/// The value an entry point returns when it fails.
pub trait Sentinel {
    fn sentinel() -> Self;
}

/// Handles: 0 is never a handle.
impl Sentinel for i64 {
    fn sentinel() -> Self {
        0
    }
}

/// Status codes: 1 means failure.
impl Sentinel for c_int {
    fn sentinel() -> Self {
        1
    }
}

impl Sentinel for f64 {
    fn sentinel() -> Self {
        f64::NAN
    }
}

impl Sentinel for EnkaiSlice {
    fn sentinel() -> Self {
        EnkaiSlice { ptr: std::ptr::null_mut(), len: 0 }
    }
}

/// The panic boundary: clears the thread's last error, runs `f`, and turns an
/// `Err` or a caught panic into the return type's sentinel plus a last error.
pub fn guard<T: Sentinel>(f: impl FnOnce() -> Result<T>) -> T {
    guard_or(T::sentinel(), f)
}

/// `guard` with an explicit sentinel, for the few entries whose sentinel is
/// not their type's usual one (`enkai_tensor_numel` returns -1).
pub fn guard_or<T>(sentinel: T, f: impl FnOnce() -> Result<T>) -> T {
    error::clear();
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            crate::err!(E_INTERNAL, "panic caught at the C boundary: {what}")
        }
    };
    error::set(&e);
    sentinel
}

/// `guard` for entries that return a status: 0 on success, 1 on error.
pub fn status(f: impl FnOnce() -> Result<()>) -> c_int {
    guard(|| f().map(|()| 0))
}

/// A borrowed C string argument: non-NULL and valid UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
pub unsafe fn str_arg<'a>(p: *const c_char, name: &str) -> Result<&'a str> {
    if p.is_null() {
        crate::bail!(E_NULL_POINTER, "{name} is NULL");
    }
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|e| {
        crate::err!(E_INVALID_ARG, "{name} is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to())
    })
}

/// A shape argument under `rule` (JSON array of dims). The common short form
/// is parsed straight from the C string in one pass; anything else goes
/// through `str_arg` and the precise parser, which names the fault.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub unsafe fn dims_arg(p: *const c_char, name: &str, rule: json::DimsRule) -> Result<json::Dims> {
    if !p.is_null() {
        // SAFETY: the quick parser reads bytes in order and stops at the NUL.
        if let Some(d) = json::quick_dims(rule, |i| unsafe { *p.add(i) } as u8) {
            return Ok(d);
        }
    }
    json::precise_dims(rule, unsafe { str_arg(p, name)? })
}

/// A dtype name argument, matched straight from the C string; unknown or
/// malformed names go through `str_arg` and `DType::parse` for the message.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
pub unsafe fn dtype_arg(p: *const c_char, name: &str) -> Result<DType> {
    if !p.is_null() {
        let mut b = [0u8; DType::MAX_NAME + 1];
        let mut n = 0;
        // SAFETY: reads stop at the NUL, and at most MAX_NAME + 1 bytes are read.
        while n < b.len() {
            b[n] = unsafe { *p.add(n) } as u8;
            if b[n] == 0 {
                break;
            }
            n += 1;
        }
        if let Some(d) = DType::from_name(&b[..n]) {
            return Ok(d);
        }
    }
    DType::parse(unsafe { str_arg(p, name)? })
}

/// A borrowed byte buffer argument; NULL is allowed only when `len` is 0.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for the call.
pub unsafe fn bytes_arg<'a, T>(p: *const T, len: usize, name: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        crate::bail!(E_NULL_POINTER, "{name} is NULL but its length is {len}");
    }
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A writable byte buffer argument; NULL is allowed only when `len` is 0.
///
/// # Safety
/// `p` is NULL or valid for writes of `len` bytes for the call.
pub unsafe fn bytes_out<'a>(p: *mut u8, len: usize, name: &str) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        crate::bail!(E_NULL_POINTER, "{name} is NULL but its length is {len}");
    }
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A required out-pointer, checked before any work so that a failing call writes nothing.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub unsafe fn out_arg<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T> {
    unsafe { p.as_mut() }.ok_or_else(|| crate::err!(E_NULL_POINTER, "{name} is NULL"))
}

/// The `(char** out, size_t* out_len)` pair of an entry that returns a string.
pub struct OutStr<'a> {
    out: &'a mut *mut c_char,
    len: &'a mut usize,
}

impl<'a> OutStr<'a> {
    /// # Safety
    /// Each pointer is NULL or valid for one write.
    pub unsafe fn new(out: *mut *mut c_char, len: *mut usize) -> Result<Self> {
        Ok(OutStr { out: unsafe { out_arg(out, "out")? }, len: unsafe { out_arg(len, "out_len")? } })
    }

    /// Hands `s` to the caller as a `malloc`ed NUL-terminated copy.
    pub fn write(self, s: &str) -> Result<()> {
        *self.out = malloc_copy(s.as_bytes())?.cast();
        *self.len = s.len();
        Ok(())
    }
}

/// A `malloc`ed copy of `bytes` followed by a NUL, so C's `free` releases it.
pub fn malloc_copy(bytes: &[u8]) -> Result<*mut u8> {
    // SAFETY: malloc of len+1 bytes; the copy and the NUL stay inside it.
    unsafe {
        let p = libc::malloc(bytes.len() + 1).cast::<u8>();
        if p.is_null() {
            crate::bail!(E_RESOURCE, "out of memory allocating {} bytes", bytes.len() + 1);
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        *p.add(bytes.len()) = 0;
        Ok(p)
    }
}

/// Bytes returned by value: `ptr` is `malloc`ed (and NUL-terminated for
/// convenience, the NUL not counted in `len`); release with `enkai_free(ptr, len)`.
/// `{NULL, 0}` signals an error.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnkaiSlice {
    pub ptr: *mut u8,
    pub len: usize,
}

impl EnkaiSlice {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Ok(EnkaiSlice { ptr: malloc_copy(bytes)?, len: bytes.len() })
    }
}

