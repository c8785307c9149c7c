//! The backend of a build without the `torch` feature: no tensor can exist,
//! so every creating function reports `E_BACKEND_UNAVAILABLE` and every
//! function that takes a tensor is unreachable by construction.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};

pub const BUILT: bool = false;

/// Uninhabited: no value of it can be made.
pub enum Raw {}

pub fn unavailable() -> Error {
    crate::err!(E_BACKEND_UNAVAILABLE, "built without the torch feature")
}

pub fn cuda_device_count() -> i64 {
    0
}

pub fn manual_seed(_seed: i64) -> Result<()> {
    Err(unavailable())
}

pub fn fill(_shape: &[i64], _dtype: DType, _dev: Device, _init: super::Init) -> Result<Raw> {
    Err(unavailable())
}

pub fn from_bytes(_bytes: &[u8], _shape: &[i64], _dtype: DType, _dev: Device) -> Result<Raw> {
    Err(unavailable())
}

pub fn copy_to(t: &Raw, _dst: &mut [u8]) -> Result<()> {
    match *t {}
}

pub fn item(t: &Raw) -> Result<f64> {
    match *t {}
}

pub fn shape(t: &Raw) -> Vec<i64> {
    match *t {}
}

pub fn dtype(t: &Raw) -> Result<DType> {
    match *t {}
}

pub fn device(t: &Raw) -> Device {
    match *t {}
}

pub fn matmul(a: &Raw, _b: &Raw) -> Result<Raw> {
    match *a {}
}
