//! Helpers shared by the integration tests: calling the C entry points from Rust.
#![allow(dead_code)]

use std::ffi::{c_char, CStr, CString};
use std::sync::{Mutex, MutexGuard};

use enkai_tensor::error::Code;

/// Every test takes this lock: the live counters, the chosen backend and the
/// random generator are process-wide, and cargo runs tests on parallel threads.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// The last error code and text on this thread.
pub fn last() -> (Code, Option<String>) {
    let p = enkai_tensor::ffi::library::enkai_tensor_last_error();
    let text = (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
    (enkai_tensor::error::last_code(), text)
}

/// Asserts the last call failed with `code` and a message starting `CODE: `.
pub fn assert_err(code: Code) -> String {
    let (got, text) = last();
    let text = text.expect("an error message");
    assert_eq!(got, code, "{text}");
    assert!(text.starts_with(&format!("{}: ", code.name())), "{text}");
    text
}

pub fn assert_ok() {
    assert_eq!(last(), (Code::E_OK, None));
}

/// Calls an `(char** out, size_t* len)` entry and returns the string, freeing it.
pub fn out_string(f: impl FnOnce(*mut *mut c_char, *mut usize) -> i32) -> Option<String> {
    let mut p: *mut c_char = std::ptr::null_mut();
    let mut n = 0usize;
    if f(&mut p, &mut n) != 0 {
        return None;
    }
    let s = unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string();
    assert_eq!(s.len(), n);
    unsafe { enkai_tensor::ffi::library::enkai_tensor_string_free(p) };
    Some(s)
}
