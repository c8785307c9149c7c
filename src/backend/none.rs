//! What stands in for libtorch's process-wide services in a build without
//! the `torch` feature: no CUDA, no autocast state, no c10d process groups.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

pub fn unavailable() -> Error {
    crate::err!(E_BACKEND_UNAVAILABLE, "the torch backend is not built in (built without the torch feature)")
}

pub fn cuda_device_count() -> i64 {
    0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutocastState {
    pub enabled: bool,
    pub dtype: i32,
}

pub fn autocast_get(_dev: Device) -> AutocastState {
    AutocastState { enabled: false, dtype: 0 }
}

/// Autocast regions open and close, but no op consults them in this build yet.
pub fn autocast_set(_dev: Device, _s: AutocastState) -> Result<()> {
    Ok(())
}

pub fn autocast_dtype_code(_d: DType) -> i32 {
    0
}

pub fn autocast_nesting(_enter: bool) {}

/// No process group can exist without c10d; multi-rank worlds fail at creation.
pub enum Group {}

pub fn dist_group(_p: &crate::vocab::dist::Plan) -> Result<Group> {
    Err(crate::err!(E_DIST, "multi-rank process groups need libtorch's c10d (built without the torch feature); only a world of one rank is available"))
}

pub fn dist_barrier(g: &Group) -> Result<()> {
    match *g {}
}

pub fn gloo_layout() -> Result<[usize; 4]> {
    Err(unavailable())
}
