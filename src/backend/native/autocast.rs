//! CPU autocast for native tensors: PyTorch's `torch.autocast("cpu")` rules
//! for the ops of this backend. The state is per thread, as libtorch's is;
//! `crate::amp` opens and closes the regions for both backends.
//!
//! `matmul` and `linear` are on autocast's lower-precision list (their
//! floating inputs, fp64 aside, run in the autocast dtype); `cross_entropy`
//! is on its fp32 list. Every other op runs in its inputs' dtypes, as
//! under PyTorch's CPU autocast (softmax, layer norm, gelu... of an fp32
//! input stay fp32).

use std::cell::Cell;

use super::ops;
use super::tensor::Raw;
use crate::dtype::DType;
use crate::error::Result;

thread_local! {
    static CPU: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The autocast dtype of this thread, `None` outside autocast.
pub fn get() -> Option<DType> {
    CPU.with(Cell::get)
}

pub fn set(dt: Option<DType>) {
    CPU.with(|c| c.set(dt));
}

/// `x` as `dt` when autocast may cast it (floating, not fp64: PyTorch's
/// `is_eligible`), through `to_dtype` so gradients flow back to `x`.
fn cast(x: &Raw, dt: DType) -> Result<Raw> {
    if x.dtype().is_float() && x.dtype() != DType::F64 {
        ops::to_dtype(x, dt)
    } else {
        Ok(x.clone())
    }
}

/// Runs a lower-precision-list op on inputs cast to the autocast dtype.
pub fn lower<const N: usize>(xs: [&Raw; N], op: impl FnOnce([&Raw; N]) -> Result<Raw>) -> Result<Raw> {
    with(get(), xs, op)
}

/// Runs an fp32-list op on inputs cast to fp32 (inside autocast only).
pub fn fp32<const N: usize>(xs: [&Raw; N], op: impl FnOnce([&Raw; N]) -> Result<Raw>) -> Result<Raw> {
    with(get().map(|_| DType::F32), xs, op)
}

fn with<const N: usize>(dt: Option<DType>, xs: [&Raw; N], op: impl FnOnce([&Raw; N]) -> Result<Raw>) -> Result<Raw> {
    let Some(dt) = dt else { return op(xs) };
    let cast: Vec<Raw> = xs.iter().map(|x| cast(x, dt)).collect::<Result<_>>()?;
    op(std::array::from_fn(|i| &cast[i]))
}
