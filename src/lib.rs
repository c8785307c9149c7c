//! enkai_tensor: libtorch behind a C ABI of plain integers and strings.
//!
//! Layers: `ffi` (every `extern "C"` function) → core (`handles`, `error`,
//! `json`, `tensor`, …) → `backend` (only `backend::torch` names `tch`).

pub mod amp;
pub mod autograd;
pub mod backend;
pub mod device;
pub mod dtype;
pub mod error;
pub mod ffi;
pub mod handles;
pub mod json;
pub mod lm;
pub mod ops;
pub mod optim;
pub mod registry;
mod spinlock;
pub mod tensor;

pub use error::{Code, Error, Result};
