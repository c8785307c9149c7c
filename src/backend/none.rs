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

/// Nothing computes in this build: the count is only recorded (threads.rs).
pub fn set_num_threads(_n: i64) {}

pub fn get_num_threads() -> Option<i64> {
    None
}

pub fn manual_seed(_seed: i64) -> Result<()> {
    Err(unavailable())
}

pub fn fill(_shape: &[i64], _dtype: DType, _dev: Device, _init: super::Init) -> Result<Raw> {
    Err(unavailable())
}

pub fn filled_cpu<E: From<Error>>(
    _shape: &[i64],
    _dtype: DType,
    _fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<Raw, E> {
    Err(unavailable().into())
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

/// Entry points that take tensors: unreachable without a backend, since no
/// tensor can be made; they still return the unavailable error, not a panic.
macro_rules! unavailable {
    ($(pub fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        $(
            // The signatures mirror the torch backend's, long ones included.
            #[allow(clippy::too_many_arguments)]
            pub fn $name($($arg: $ty),*) -> $ret { let _ = ($($arg),*); Err(unavailable()) }
        )*
    };
}

use crate::ops::{Binary, Reduce, Unary};

unavailable! {
    pub fn binary(op: Binary, a: &Raw, b: &Raw) -> Result<Raw>;
    pub fn unary(op: Unary, x: &Raw) -> Result<Raw>;
    pub fn reshape(x: &Raw, s: &[i64]) -> Result<Raw>;
    pub fn view(x: &Raw, s: &[i64]) -> Result<Raw>;
    pub fn transpose(x: &Raw, a: i64, b: i64) -> Result<Raw>;
    pub fn concat(ts: &[&Raw], d: i64) -> Result<Raw>;
    pub fn slice(x: &Raw, d: i64, a: i64, b: i64, c: i64) -> Result<Raw>;
    pub fn reduce(op: Reduce, x: &Raw, d: Option<i64>, k: bool) -> Result<Raw>;
    pub fn softmax(x: &Raw, d: i64) -> Result<Raw>;
    pub fn masked_softmax(x: &Raw, m: &Raw, d: i64, t: Option<i64>) -> Result<Raw>;
    pub fn masked_softmax_backward(g: &Raw, o: &Raw, m: &Raw, d: i64) -> Result<Raw>;
    pub fn dropout(x: &Raw, p: f64, t: bool) -> Result<Raw>;
    pub fn layernorm(x: &Raw, w: &Raw, b: Option<&Raw>, e: f64) -> Result<Raw>;
    pub fn layernorm_backward(x: &Raw, w: &Raw, b: Option<&Raw>, e: f64, g: &Raw) -> Result<Vec<Raw>>;
    pub fn embedding(w: &Raw, i: &Raw) -> Result<Raw>;
    pub fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw>;
    pub fn cross_entropy(l: &Raw, t: &Raw) -> Result<Raw>;
    pub fn to_device(x: &Raw, d: Device) -> Result<Raw>;
    pub fn to_dtype(x: &Raw, d: DType) -> Result<Raw>;
    pub fn min_max(x: &Raw) -> Result<(f64, f64)>;
    pub fn set_requires_grad(x: &Raw) -> Result<()>;
    pub fn backward(x: &Raw) -> Result<()>;
    pub fn grad(x: &Raw) -> Result<Option<Raw>>;
    pub fn zero_grad(x: &Raw) -> Result<()>;
    pub fn all_finite(x: &Raw) -> Result<bool>;
    pub fn scale_(x: &Raw, s: f64) -> Result<()>;
    pub fn clip_grad_norm(gs: &[&Raw], m: f64, n: f64) -> Result<f64>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutocastState {
    pub enabled: bool,
    pub dtype: i32,
}

pub fn autocast_get(_dev: Device) -> AutocastState {
    AutocastState { enabled: false, dtype: 0 }
}

pub fn autocast_dtype_code(_d: DType) -> i32 {
    0
}

pub fn autocast_nesting(_enter: bool) {}

unavailable! {
    pub fn zeros_like(t: &Raw) -> Result<Raw>;
    pub fn adamw_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, s: f64, lr: f64, b1: f64, b2: f64, e: f64, w: f64) -> Result<()>;
    pub fn scaler_state(s: f64, d: Device) -> Result<(Raw, Raw)>;
    pub fn scalar_value(t: &Raw) -> Result<f64>;
    pub fn scale_by(l: &Raw, s: &Raw) -> Result<Raw>;
    pub fn unscale(g: &[&Raw], s: &Raw) -> Result<bool>;
    pub fn update_scale(s: &Raw, t: &Raw, f: bool, g: f64, b: f64, i: i64) -> Result<()>;
    pub fn autocast_set(d: Device, s: AutocastState) -> Result<()>;
}

unavailable! {
    pub fn lm_init(l: &[(Vec<i64>, crate::lm::Init)], d: Device, s: i64) -> Result<Vec<Raw>>;
    pub fn lm_forward(p: &[&Raw], s: &crate::lm::LmSpec, i: &Raw, t: &Raw, tr: bool) -> Result<Raw>;
    pub fn lm_logits(p: &[&Raw], s: &crate::lm::LmSpec, i: &Raw) -> Result<Raw>;
}

pub fn shallow(t: &Raw) -> Raw {
    match *t {}
}

pub fn requires_grad(t: &Raw) -> bool {
    match *t {}
}

unavailable! {
    pub fn scaler_state_with(s: f64, t: i64, d: Device) -> Result<(Raw, Raw)>;
    pub fn set_rng_state(s: &Raw) -> Result<()>;
}

pub fn rng_state() -> Result<Raw> {
    Err(unavailable())
}

pub fn with_bytes<R>(t: &Raw, _f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    match *t {}
}

/// No process group can exist without a backend; multi-rank worlds fail at creation.
pub enum Group {}

pub fn dist_group(_p: &crate::dist::rendezvous::Plan) -> Result<Group> {
    Err(crate::err!(E_DIST, "multi-rank process groups need libtorch's c10d (built without the torch feature); only a world of one rank is available"))
}

pub fn dist_allreduce(g: &Group, _ts: &[&Raw], _op: i32, _prescale: f64) -> Result<()> {
    match *g {}
}

pub fn dist_broadcast(g: &Group, _ts: &[&Raw], _root: i64) -> Result<()> {
    match *g {}
}

pub fn dist_allgather(g: &Group, _t: &Raw, _world: i64) -> Result<Raw> {
    match *g {}
}

pub fn dist_barrier(g: &Group) -> Result<()> {
    match *g {}
}

pub fn dist_stack_one(t: &Raw) -> Result<Raw> {
    match *t {}
}

pub fn gloo_layout() -> Result<[usize; 4]> {
    Err(unavailable())
}

pub fn export_view(t: &Raw) -> Result<super::ExportView<Raw>> {
    match *t {}
}

/// # Safety
/// As the torch backend's: `release(ctx)` runs exactly once, here at once.
pub unsafe fn wrap_foreign(
    _data: *mut std::ffi::c_void,
    _shape: &[i64],
    _strides: &[i64],
    _dtype: DType,
    _dev: Device,
    release: unsafe extern "C" fn(*mut std::ffi::c_void),
    ctx: *mut std::ffi::c_void,
) -> Result<Raw> {
    // SAFETY: the caller hands `ctx` over for exactly one release.
    unsafe { release(ctx) };
    Err(unavailable())
}

/// # Safety
/// Nothing is read.
pub unsafe fn copy_foreign(
    _data: *mut std::ffi::c_void,
    _shape: &[i64],
    _strides: &[i64],
    _dtype: DType,
    _dev: Device,
) -> Result<Raw> {
    Err(unavailable())
}
