//! enkai_tensor: libtorch behind a C ABI of plain integers and strings.
//!
//! Layers: `ffi` (every `extern "C"` function) → core (`handles`, `tensor`,
//! `opcall`, `autograd`, `optim`, …) → the backend contract (`backend::imp`)
//! → the backends (only `backend::torch` names `tch`). Below them all is
//! what they share: `vocab` (the op table, shape and dtype rules, the op
//! kinds, AdamW's and the scaler's rules, the GPT and rendezvous types),
//! `dtype`, `device`, `error` and `json`. No backend names a module above it
//! (`python/tests/test_layers.py` checks).

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
pub mod quant;
pub mod registry;
pub mod safetensors;
mod spinlock;
pub mod tensor;
pub mod trace;
pub mod onnx;
pub mod threads;
pub mod vocab;
pub mod opcall;

pub use error::{Code, Error, Result};
