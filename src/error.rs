//! Error codes, the crate's `Error` type, and the thread-local last error that
//! `enkai_tensor_last_error()` exposes.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CString};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Stable error codes returned by `enkai_tensor_last_error_code()`.
///
/// The numbers never change meaning; new codes are only appended.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnkaiErrorCode {
    /// The last call on this thread succeeded.
    E_OK = 0,
    /// An argument is malformed: bad JSON, invalid UTF-8, a bad dtype or device name, a negative size.
    E_INVALID_ARG = 1,
    /// A required pointer argument (input string or output pointer) is NULL.
    E_NULL_POINTER = 2,
    /// The number was never issued as a handle (or is 0, negative, or >= 2^53).
    E_HANDLE_INVALID = 3,
    /// The handle was issued but has been freed.
    E_HANDLE_STALE = 4,
    /// The handle is live but of another kind (for example a device passed as a tensor).
    E_HANDLE_KIND = 5,
    /// Shapes do not fit (element counts, broadcasting, buffer sizes).
    E_SHAPE = 6,
    /// The dtype is not supported by this operation.
    E_DTYPE = 7,
    /// The device does not exist or does not fit the operation.
    E_DEVICE = 8,
    /// `enkai_backend_set` got a name that is not a backend.
    E_BACKEND_UNKNOWN = 9,
    /// The backend exists but this build does not contain it.
    E_BACKEND_UNAVAILABLE = 10,
    /// The inputs of one call belong to different backends.
    E_BACKEND_MISMATCH = 11,
    /// libtorch raised an error; the detail is its message.
    E_TORCH = 12,
    /// An internal error (a caught panic). Please report it.
    E_INTERNAL = 13,
    /// A resource limit was reached (handle slots, reference counts, memory).
    E_RESOURCE = 14,
    /// Autograd misuse: no graph, non-scalar loss, graph already freed.
    E_AUTOGRAD = 15,
    /// A tensor holds NaN or infinity where finite values are required.
    E_NOT_FINITE = 16,
    /// GradScaler: the initial scale is not finite and positive.
    E_AMP_INVALID_SCALE = 17,
    /// GradScaler: the growth factor is not finite and > 1.
    E_AMP_INVALID_GROWTH_FACTOR = 18,
    /// GradScaler: the backoff factor is not in (0, 1).
    E_AMP_INVALID_BACKOFF_FACTOR = 19,
    /// GradScaler: the growth interval is not >= 1.
    E_AMP_INVALID_GROWTH_INTERVAL = 20,
    /// GradScaler or autocast used out of order (unscale twice, exit without enter).
    E_AMP_STATE = 21,
    /// Checkpoint: a required file or rank is missing.
    E_CKPT_MISSING = 22,
    /// Checkpoint: a file's SHA-256 differs from integrity.json.
    E_CKPT_HASH_MISMATCH = 23,
    /// Checkpoint: a file is malformed.
    E_CKPT_FORMAT = 24,
    /// Checkpoint: reading or writing failed.
    E_CKPT_IO = 25,
    /// Distributed: no longer returned (multi-rank worlds used to need ENKAI_ENABLE_DIST=1).
    E_DIST_ENV_GATE = 26,
    /// Distributed: the process group is not initialised, is already initialised, or failed
    /// in a way no more specific E_DIST_* code describes.
    E_DIST = 27,
    /// Distributed: a peer rank died or closed its connection (the group is now broken).
    E_DIST_PEER_LOST = 28,
    /// Distributed: a peer did not answer within the timeout (the group is now broken).
    E_DIST_TIMEOUT = 29,
    /// Distributed: the arguments disagree with the launcher's RANK / WORLD_SIZE environment.
    E_DIST_ENV_MISMATCH = 30,
    /// Distributed: the ranks called one collective with different tensors or settings, or
    /// another rank rejected its arguments; nothing was exchanged and the group stays usable.
    E_DIST_MISMATCH = 31,
    /// Checkpoint: a ranked save's round did not complete (a rank did not save in time, or
    /// failed); nothing was committed and the previous `latest` stays.
    E_CKPT_INCOMPLETE = 32,
    /// The operation exists but the inputs' backend cannot run it (the op table's schema says
    /// which backends run each op), or it is not supported in this form.
    E_UNSUPPORTED = 33,
    /// Linear algebra: a singular matrix to `linalg.solve`/`linalg.inv`, a matrix that is not
    /// positive-definite to `linalg.cholesky`, or a decomposition that did not converge; the
    /// message names the op and, for a batch, the element (`(Batch element i)`), as PyTorch does.
    E_LINALG = 34,
}

pub use EnkaiErrorCode as Code;

impl Code {
    pub fn name(self) -> &'static str {
        match self {
            Code::E_OK => "E_OK",
            Code::E_INVALID_ARG => "E_INVALID_ARG",
            Code::E_NULL_POINTER => "E_NULL_POINTER",
            Code::E_HANDLE_INVALID => "E_HANDLE_INVALID",
            Code::E_HANDLE_STALE => "E_HANDLE_STALE",
            Code::E_HANDLE_KIND => "E_HANDLE_KIND",
            Code::E_SHAPE => "E_SHAPE",
            Code::E_DTYPE => "E_DTYPE",
            Code::E_DEVICE => "E_DEVICE",
            Code::E_BACKEND_UNKNOWN => "E_BACKEND_UNKNOWN",
            Code::E_BACKEND_UNAVAILABLE => "E_BACKEND_UNAVAILABLE",
            Code::E_BACKEND_MISMATCH => "E_BACKEND_MISMATCH",
            Code::E_TORCH => "E_TORCH",
            Code::E_INTERNAL => "E_INTERNAL",
            Code::E_RESOURCE => "E_RESOURCE",
            Code::E_AUTOGRAD => "E_AUTOGRAD",
            Code::E_NOT_FINITE => "E_NOT_FINITE",
            Code::E_AMP_INVALID_SCALE => "E_AMP_INVALID_SCALE",
            Code::E_AMP_INVALID_GROWTH_FACTOR => "E_AMP_INVALID_GROWTH_FACTOR",
            Code::E_AMP_INVALID_BACKOFF_FACTOR => "E_AMP_INVALID_BACKOFF_FACTOR",
            Code::E_AMP_INVALID_GROWTH_INTERVAL => "E_AMP_INVALID_GROWTH_INTERVAL",
            Code::E_AMP_STATE => "E_AMP_STATE",
            Code::E_CKPT_MISSING => "E_CKPT_MISSING",
            Code::E_CKPT_HASH_MISMATCH => "E_CKPT_HASH_MISMATCH",
            Code::E_CKPT_FORMAT => "E_CKPT_FORMAT",
            Code::E_CKPT_IO => "E_CKPT_IO",
            Code::E_DIST_ENV_GATE => "E_DIST_ENV_GATE",
            Code::E_DIST => "E_DIST",
            Code::E_DIST_PEER_LOST => "E_DIST_PEER_LOST",
            Code::E_DIST_TIMEOUT => "E_DIST_TIMEOUT",
            Code::E_DIST_ENV_MISMATCH => "E_DIST_ENV_MISMATCH",
            Code::E_DIST_MISMATCH => "E_DIST_MISMATCH",
            Code::E_CKPT_INCOMPLETE => "E_CKPT_INCOMPLETE",
            Code::E_UNSUPPORTED => "E_UNSUPPORTED",
            Code::E_LINALG => "E_LINALG",
        }
    }
}

impl Code {
    /// Every code, in number order.
    pub const ALL: [Code; 35] = [
        Code::E_OK, Code::E_INVALID_ARG, Code::E_NULL_POINTER, Code::E_HANDLE_INVALID, Code::E_HANDLE_STALE,
        Code::E_HANDLE_KIND, Code::E_SHAPE, Code::E_DTYPE, Code::E_DEVICE, Code::E_BACKEND_UNKNOWN,
        Code::E_BACKEND_UNAVAILABLE, Code::E_BACKEND_MISMATCH, Code::E_TORCH, Code::E_INTERNAL, Code::E_RESOURCE,
        Code::E_AUTOGRAD, Code::E_NOT_FINITE, Code::E_AMP_INVALID_SCALE, Code::E_AMP_INVALID_GROWTH_FACTOR,
        Code::E_AMP_INVALID_BACKOFF_FACTOR, Code::E_AMP_INVALID_GROWTH_INTERVAL, Code::E_AMP_STATE,
        Code::E_CKPT_MISSING, Code::E_CKPT_HASH_MISMATCH, Code::E_CKPT_FORMAT, Code::E_CKPT_IO,
        Code::E_DIST_ENV_GATE, Code::E_DIST, Code::E_DIST_PEER_LOST, Code::E_DIST_TIMEOUT, Code::E_DIST_ENV_MISMATCH,
        Code::E_DIST_MISMATCH, Code::E_CKPT_INCOMPLETE, Code::E_UNSUPPORTED, Code::E_LINALG,
    ];
}

impl Error {
    /// Parses the `E_CODE: detail` text of an error (as another rank reported it).
    pub fn parse(text: &str) -> Option<Error> {
        let (name, detail) = text.split_once(": ")?;
        let code = Code::ALL.into_iter().find(|c| c.name() == name && *c != Code::E_OK)?;
        Some(Error::new(code, detail))
    }
}

/// An error as the C caller sees it: a stable code and a human detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: Code,
    pub detail: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(code: Code, detail: impl Into<String>) -> Self {
        Error { code, detail: detail.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.detail)
    }
}

impl std::error::Error for Error {}

/// `err!(E_SHAPE, "matmul {:?} x {:?}", a, b)` builds an `Error`.
#[macro_export]
macro_rules! err {
    ($code:ident, $($fmt:tt)+) => {
        $crate::error::Error::new($crate::error::Code::$code, format!($($fmt)+))
    };
}

/// `bail!(E_SHAPE, ...)` returns the error from the enclosing function.
#[macro_export]
macro_rules! bail {
    ($code:ident, $($fmt:tt)+) => {
        return Err($crate::err!($code, $($fmt)+))
    };
}

struct LastError {
    /// Read on every entry, so kept apart from the text: clearing an
    /// already-clear error is one thread-local load.
    code: Cell<Code>,
    // Kept as a CString so the pointer handed to C stays valid until the next call.
    text: RefCell<Option<CString>>,
}

impl Drop for LastError {
    fn drop(&mut self) {
        // A thread that exits with an error set no longer keeps others on the slow path.
        if self.code.get() != Code::E_OK {
            PENDING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

thread_local! {
    static LAST: LastError = const { LastError { code: Cell::new(Code::E_OK), text: RefCell::new(None) } };
}

/// Threads whose last error is set. Every entry point clears the caller's
/// error; while no thread has one, that is this one relaxed load instead of a
/// thread-local access (a `__tls_get_addr` call in a shared library).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Clears this thread's last error (done at every entry point).
#[inline]
pub fn clear() {
    if PENDING.load(Ordering::Relaxed) != 0 {
        clear_slow();
    }
}

#[inline(never)]
fn clear_slow() {
    LAST.with(|l| {
        if l.code.get() != Code::E_OK {
            l.code.set(Code::E_OK);
            l.text.replace(None);
            PENDING.fetch_sub(1, Ordering::Relaxed);
        }
    });
}

pub fn set(e: &Error) {
    let text = e.to_string().replace('\0', "\\0");
    let text = CString::new(text).unwrap_or_default();
    LAST.with(|l| {
        if l.code.get() == Code::E_OK {
            // Counted before the code is set, so a thread that sees its own
            // error also sees PENDING > 0 (program order on this thread).
            PENDING.fetch_add(1, Ordering::Relaxed);
        }
        l.code.set(e.code);
        l.text.replace(Some(text));
    });
}

/// This thread's last error, if one is set.
pub fn last() -> Option<Error> {
    LAST.with(|l| {
        let text = l.text.borrow();
        let text = text.as_ref()?.to_string_lossy();
        Some(Error::new(l.code.get(), text.split_once(": ").map_or(&*text, |(_, d)| d)))
    })
    .filter(|e| e.code != Code::E_OK)
}

pub fn last_code() -> Code {
    LAST.with(|l| l.code.get())
}

/// Pointer into this thread's last-error buffer, or NULL when there is none.
pub fn last_ptr() -> *const c_char {
    LAST.with(|l| l.text.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_code_in_number_order_and_parse_reads_names_back() {
        for (i, c) in Code::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        let e = Error::parse("E_CKPT_INCOMPLETE: rank 1: x: y").unwrap();
        assert_eq!((e.code, e.detail.as_str()), (Code::E_CKPT_INCOMPLETE, "rank 1: x: y"));
        assert!(Error::parse("E_NOPE: x").is_none() && Error::parse("E_OK: x").is_none() && Error::parse("plain").is_none());
    }

    /// `clear` skips the thread-local while no thread has an error: errors
    /// set, cleared, and left behind by exiting threads must all keep it exact.
    #[test]
    fn clear_is_exact_whatever_other_threads_left_behind() {
        let e = Error::new(Code::E_SHAPE, "x");
        std::thread::spawn(move || set(&Error::new(Code::E_DTYPE, "left behind"))).join().unwrap();
        assert_eq!(last_code(), Code::E_OK);
        set(&e);
        set(&e);
        assert_eq!(last_code(), Code::E_SHAPE);
        clear();
        assert_eq!((last_code(), last_ptr().is_null()), (Code::E_OK, true));
        let other = std::thread::spawn(move || {
            set(&Error::new(Code::E_DTYPE, "held"));
            clear();
            last_code()
        });
        assert_eq!(other.join().unwrap(), Code::E_OK);
        set(&e);
        clear();
        assert_eq!(last_code(), Code::E_OK);
    }
}
