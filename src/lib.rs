//! enkai_tensor: libtorch behind a C ABI of plain integers and strings.
//!
//! Layers: `ffi` (every `extern "C"` function) → core (`handles`, `error`,
//! `json`, `tensor`, …) → `backend` (only `backend::torch` names `tch`).

// Without a backend no tensor value can exist (`backend::none::Raw` is
// uninhabited), so code after producing one is unreachable by design.
#![cfg_attr(not(feature = "torch"), allow(unreachable_code, unused_mut))]

pub mod amp;
pub mod autograd;
pub mod backend;
pub mod checkpoint;
pub mod device;
pub mod dist;
pub mod dlpack;
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
pub mod threads;
pub mod vocab;
pub mod opcall;

pub use error::{Code, Error, Result};
