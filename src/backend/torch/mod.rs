//! libtorch through `tch`. Only fallible `f_*` methods are used, so libtorch's
//! C++ exceptions arrive here as `TchError` values and leave as `E_TORCH`.

mod autograd;
mod create;
mod data;
mod dist;
mod lm;
mod ops;
pub mod opcall;
mod sample;
mod train;

pub use create::*;
pub use dist::*;
pub use train::*;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::Error;

pub const BUILT: bool = true;

/// The backend, as the contract's traits see it (`backend::contract`).
pub struct Torch;

impl crate::backend::contract::Backend for Torch {
    type Raw = Raw;
    const ID: crate::backend::BackendId = crate::backend::BackendId::Torch;
}

/// A libtorch tensor shared between threads through the handle registry.
pub struct Raw(pub tch::Tensor);

// SAFETY: `at::Tensor` is an intrusive, atomically ref-counted pointer and
// libtorch ops may read one tensor from several threads at once (PyTorch
// itself shares tensors between Python threads). `tch::Tensor` is already
// `Send`; we only add shared access, which the ABI documents as the caller's
// responsibility to order when it mutates in place.
unsafe impl Sync for Raw {}

pub fn unavailable() -> Error {
    crate::err!(E_BACKEND_UNAVAILABLE, "the torch backend is not available")
}

/// A C++ shim's result (NULL, or a malloc'ed message we now own) as a `Result`
/// whose error has `code`.
#[inline]
pub(crate) fn shim_result(msg: *mut std::ffi::c_char, code: crate::error::Code) -> crate::error::Result<()> {
    if msg.is_null() {
        return Ok(());
    }
    Err(shim_error(msg, code))
}

#[cold]
fn shim_error(msg: *mut std::ffi::c_char, code: crate::error::Code) -> Error {
    // SAFETY: the shims return NUL-terminated malloc'ed strings, freed once here.
    let text = unsafe { std::ffi::CStr::from_ptr(msg) }.to_string_lossy().into_owned();
    unsafe { libc::free(msg.cast()) };
    // A c10::LinAlgError, marked by shim_guard.h.
    if let Some(rest) = text.strip_prefix('\u{1}') {
        return Error::new(crate::error::Code::E_LINALG, rest.to_string());
    }
    Error::new(if code == crate::error::Code::E_TORCH { autograd_code(&text) } else { code }, text)
}

/// libtorch's autograd refusals (an in-place op on a leaf that requires
/// grad, a backward through a tensor that an in-place op overwrote) are
/// `E_AUTOGRAD`, as the native backend reports them.
fn autograd_code(text: &str) -> crate::error::Code {
    const AUTOGRAD: [&str; 3] = ["modified by an inplace operation", "is being used in an in-place operation", "a view of a leaf Variable"];
    if AUTOGRAD.iter().any(|w| text.contains(w)) {
        crate::error::Code::E_AUTOGRAD
    } else {
        crate::error::Code::E_TORCH
    }
}

/// A shim call that hands back a new `at::Tensor*` through its out-pointer,
/// which tch owns from then on; the shim's message becomes an error with `code`.
pub(crate) fn shim_tensor(
    code: crate::error::Code,
    call: impl FnOnce(*mut *mut torch_sys::C_tensor) -> *mut std::ffi::c_char,
) -> crate::error::Result<tch::Tensor> {
    let mut out = std::ptr::null_mut();
    shim_result(call(&mut out), code)?;
    if out.is_null() {
        crate::bail!(E_INTERNAL, "a libtorch shim succeeded without a tensor");
    }
    // SAFETY: on success the shims store a new at::Tensor* nobody else owns.
    Ok(unsafe { tch::Tensor::from_ptr(out) })
}

/// Runs tch calls that take a `Scalar` (`f_full`, `f_mul_scalar`, norms with
/// an order...) and returns their error. When such an op fails, tch panics
/// instead: the temporary Scalar's `Drop` reads the op's pending libtorch
/// error first and unwraps it. The panic carries that error; this turns it
/// back into `E_TORCH`, without the panic being printed.
pub fn scalar_op<T>(f: impl FnOnce() -> std::result::Result<T, tch::TchError>) -> crate::error::Result<T> {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    quiet_panics::install();
    let r = quiet_panics::QUIET.with(|q| {
        q.set(true);
        let r = catch_unwind(AssertUnwindSafe(f));
        q.set(false);
        r
    });
    match r {
        Ok(r) => r.map_err(torch_err),
        Err(payload) => {
            let text = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
            // "called `Result::unwrap()` on an `Err` value: Torch(\"...\")"
            let detail = text.and_then(|t| t.split_once("Torch(\"")).map(|(_, m)| m.trim_end_matches("\")"));
            let detail = detail.map(|m| m.replace("\\n", "\n"));
            match detail {
                Some(m) => Err(torch_err(tch::TchError::Torch(m))),
                None => std::panic::resume_unwind(payload),
            }
        }
    }
}

/// A panic hook that stays silent on threads inside `scalar_op` (whose
/// panics are expected errors) and defers to the previous hook elsewhere.
mod quiet_panics {
    use std::cell::Cell;
    use std::sync::Once;

    thread_local! {
        pub static QUIET: Cell<bool> = const { Cell::new(false) };
    }

    pub fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if !QUIET.with(Cell::get) {
                    previous(info);
                }
            }));
        });
    }
}

/// Converts a libtorch error into `E_TORCH`, keeping the message but not the C++ backtrace.
pub fn torch_err(e: tch::TchError) -> Error {
    let text = e.to_string();
    // Both shapes of c10 message end in a C++ backtrace: cut it.
    let short = text.split("\nException raised from").next().unwrap_or(&text);
    let short = short.split("\nframe #").next().unwrap_or(short);
    let short = short.trim_start_matches("Internal torch error: ").trim();
    Error::new(autograd_code(short), short.to_string())
}

pub(crate) fn kind(d: DType) -> tch::Kind {
    match d {
        DType::F32 => tch::Kind::Float,
        DType::F16 => tch::Kind::Half,
        DType::BF16 => tch::Kind::BFloat16,
        DType::F64 => tch::Kind::Double,
        DType::I64 => tch::Kind::Int64,
        DType::I32 => tch::Kind::Int,
        DType::Bool => tch::Kind::Bool,
        DType::U8 => tch::Kind::Uint8,
        DType::I8 => tch::Kind::Int8,
        DType::I16 => tch::Kind::Int16,
        DType::C64 => tch::Kind::ComplexFloat,
        DType::C128 => tch::Kind::ComplexDouble,
    }
}

pub(crate) fn dtype_of(k: tch::Kind) -> crate::error::Result<DType> {
    Ok(match k {
        tch::Kind::Float => DType::F32,
        tch::Kind::Half => DType::F16,
        tch::Kind::BFloat16 => DType::BF16,
        tch::Kind::Double => DType::F64,
        tch::Kind::Int64 => DType::I64,
        tch::Kind::Int => DType::I32,
        tch::Kind::Bool => DType::Bool,
        tch::Kind::Uint8 => DType::U8,
        tch::Kind::Int8 => DType::I8,
        tch::Kind::Int16 => DType::I16,
        tch::Kind::ComplexFloat => DType::C64,
        tch::Kind::ComplexDouble => DType::C128,
        other => crate::bail!(E_DTYPE, "libtorch dtype {other:?} has no ABI name"),
    })
}

pub(crate) fn tdevice(d: Device) -> tch::Device {
    match d {
        Device::Cpu => tch::Device::Cpu,
        Device::Cuda(n) => tch::Device::Cuda(n as usize),
    }
}

pub(crate) fn device_of(d: tch::Device) -> Device {
    match d {
        tch::Device::Cuda(n) => Device::Cuda(n as u32),
        _ => Device::Cpu,
    }
}
