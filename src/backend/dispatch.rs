//! The backend contract as the rest of the crate sees it (`backend::imp`):
//! each function takes `Raw` values of either backend and runs the
//! backend that made them. Functions that create tensors take the
//! `BackendId` to create them with. Inputs of two backends never reach
//! here (`backend::same_backend` refuses them first), but a mix is still an
//! error, never a panic.

// Without libtorch, the torch arms and the arguments only they read are gone.
#![cfg_attr(not(feature = "torch"), allow(unused_variables))]

#[cfg(feature = "torch")]
use super::torch;
use super::{native, BackendId, Init};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::vocab::kinds::{Binary, Reduce, Unary};

#[cfg(feature = "torch")]
pub use super::torch::{autocast_dtype_code, autocast_get, autocast_nesting, autocast_set, cuda_device_count, gloo_layout, AutocastState, Group};
#[cfg(not(feature = "torch"))]
pub use super::none::{autocast_dtype_code, autocast_get, autocast_nesting, autocast_set, cuda_device_count, gloo_layout, AutocastState, Group};
#[cfg(not(feature = "torch"))]
use super::none as torch;

/// A tensor of one backend.
pub enum Raw {
    #[cfg(feature = "torch")]
    Torch(torch::Raw),
    Native(native::Raw),
}

impl Raw {
    pub fn backend(&self) -> BackendId {
        match self {
            #[cfg(feature = "torch")]
            Raw::Torch(_) => BackendId::Torch,
            Raw::Native(_) => BackendId::Cpu,
        }
    }
}

pub fn unavailable() -> Error {
    torch::unavailable()
}

fn mismatch() -> Error {
    crate::err!(E_BACKEND_MISMATCH, "inputs come from the torch and cpu backends")
}

/// `match` over one tensor's backend: `$t` is bound to its inner value.
macro_rules! on {
    ($x:expr, $t:ident => torch: $tb:expr, native: $nb:expr) => {
        match $x {
            #[cfg(feature = "torch")]
            Raw::Torch($t) => $tb,
            Raw::Native($t) => $nb,
        }
    };
}

/// An op of one tensor whose result is a tensor of the same backend.
macro_rules! unary_op {
    ($x:expr, $t:ident => $f:ident($($a:expr),*)) => {
        on!($x, $t => torch: torch::$f($($a),*).map(Raw::Torch), native: native::$f($($a),*).map(Raw::Native))
    };
}

/// Splits tensors into one backend's values (`None` for a mix).
enum Many<'a> {
    #[cfg(feature = "torch")]
    Torch(Vec<&'a torch::Raw>),
    Native(Vec<&'a native::Raw>),
}

fn many<'a>(ts: &[&'a Raw]) -> Result<Many<'a>> {
    let first = ts.first().map_or(super::active(), |t| t.backend());
    match first {
        #[cfg(feature = "torch")]
        BackendId::Torch => ts
            .iter()
            .map(|t| match t {
                Raw::Torch(r) => Ok(r),
                _ => Err(mismatch()),
            })
            .collect::<Result<_>>()
            .map(Many::Torch),
        #[cfg(not(feature = "torch"))]
        BackendId::Torch => Err(unavailable()),
        BackendId::Cpu => ts
            .iter()
            .map(|t| match t {
                Raw::Native(r) => Ok(r),
                #[allow(unreachable_patterns)]
                _ => Err(mismatch()),
            })
            .collect::<Result<_>>()
            .map(Many::Native),
    }
}

fn opt_many<'a>(x: &'a Raw, o: Option<&'a Raw>) -> Result<Many<'a>> {
    let mut v = vec![x];
    v.extend(o);
    many(&v)
}

// ------------------------------------------------------------- process-wide

pub fn set_num_threads(n: i64) {
    #[cfg(feature = "torch")]
    torch::set_num_threads(n);
    native::set_num_threads(n);
}

pub fn get_num_threads() -> Option<i64> {
    #[cfg(feature = "torch")]
    return torch::get_num_threads();
    #[cfg(not(feature = "torch"))]
    return Some(native::get_num_threads());
}

/// This thread's grad mode, as `torch.set_grad_enabled`: every built
/// backend follows it; returns the previous mode.
pub fn set_grad_enabled(on: bool) -> bool {
    #[cfg(feature = "torch")]
    torch::set_grad_enabled(on);
    native::set_grad_enabled(on)
}

pub fn is_grad_enabled() -> bool {
    native::is_grad_enabled()
}

/// Seeds every backend's generator (the ABI promises the active one's).
pub fn manual_seed(seed: i64) -> Result<()> {
    #[cfg(feature = "torch")]
    torch::manual_seed(seed)?;
    native::manual_seed(seed);
    Ok(())
}

// ----------------------------------------------------------------- creation

pub fn fill(b: BackendId, shape: &[i64], dtype: DType, dev: Device, init: Init) -> Result<Raw> {
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => torch::fill(shape, dtype, dev, init).map(Raw::Torch),
        BackendId::Cpu => native::fill(shape, dtype, init).map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}

pub fn from_bytes(b: BackendId, bytes: &[u8], shape: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => torch::from_bytes(bytes, shape, dtype, dev).map(Raw::Torch),
        BackendId::Cpu => native::from_bytes(bytes, shape, dtype).map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}

pub fn filled_cpu<E: From<Error>>(
    b: BackendId,
    shape: &[i64],
    dtype: DType,
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<Raw, E> {
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => torch::filled_cpu(shape, dtype, fill).map(Raw::Torch),
        BackendId::Cpu => native::filled_cpu(shape, dtype, fill).map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable().into()),
    }
}

/// # Safety
/// As the backends' `wrap_foreign`: `release(ctx)` runs exactly once.
#[allow(clippy::too_many_arguments)]
pub unsafe fn wrap_foreign(
    b: BackendId,
    data: *mut std::ffi::c_void,
    shape: &[i64],
    strides: &[i64],
    dtype: DType,
    dev: Device,
    release: unsafe extern "C" fn(*mut std::ffi::c_void),
    ctx: *mut std::ffi::c_void,
) -> Result<Raw> {
    match b {
        // SAFETY: forwarded.
        #[cfg(feature = "torch")]
        BackendId::Torch => unsafe { torch::wrap_foreign(data, shape, strides, dtype, dev, release, ctx) }.map(Raw::Torch),
        // SAFETY: forwarded; the caller checked the device fits the backend.
        BackendId::Cpu => Ok(Raw::Native(unsafe { native::wrap_foreign(data, shape, strides, dtype, release, ctx) })),
        #[allow(unreachable_patterns)]
        _ => {
            // SAFETY: the caller hands `ctx` over for exactly one release.
            unsafe { release(ctx) };
            Err(unavailable())
        }
    }
}

/// # Safety
/// As the backends' `copy_foreign`.
pub unsafe fn copy_foreign(b: BackendId, data: *mut std::ffi::c_void, shape: &[i64], strides: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
    match b {
        // SAFETY: forwarded.
        #[cfg(feature = "torch")]
        BackendId::Torch => unsafe { torch::copy_foreign(data, shape, strides, dtype, dev) }.map(Raw::Torch),
        // SAFETY: forwarded.
        BackendId::Cpu => unsafe { native::copy_foreign(data, shape, strides, dtype) }.map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}

pub fn zeros_like(t: &Raw) -> Result<Raw> {
    unary_op!(t, t => zeros_like(t))
}

pub fn shallow(t: &Raw) -> Raw {
    on!(t, t => torch: Raw::Torch(torch::shallow(t)), native: Raw::Native(native::shallow(t)))
}

// --------------------------------------------------------------------- data

pub fn shape(t: &Raw) -> Vec<i64> {
    on!(t, t => torch: torch::shape(t), native: native::shape(t))
}

/// `shape`, kept off the heap for up to 8 dims (the native backend's shape is not copied to a `Vec`).
pub fn dims(t: &Raw) -> smallvec::SmallVec<[i64; 8]> {
    on!(t, t => torch: torch::shape(t).into(), native: t.shape().into())
}

pub fn dtype(t: &Raw) -> Result<DType> {
    on!(t, t => torch: torch::dtype(t), native: Ok(native::dtype(t)))
}

pub fn device(t: &Raw) -> Device {
    on!(t, t => torch: torch::device(t), native: native::device(t))
}

pub fn item(t: &Raw) -> Result<f64> {
    on!(t, t => torch: torch::item(t), native: Ok(native::item(t)))
}

pub fn scalar_value(t: &Raw) -> Result<f64> {
    on!(t, t => torch: torch::scalar_value(t), native: Ok(native::item(t)))
}

pub fn copy_to(t: &Raw, dst: &mut [u8]) -> Result<()> {
    on!(t, t => torch: torch::copy_to(t, dst), native: native::copy_to(t, dst))
}

pub fn with_bytes<R>(t: &Raw, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    on!(t, t => torch: torch::with_bytes(t, f), native: native::with_bytes(t, f))
}

/// A contiguous CPU copy of `t` made by backend `b` (no autograd history).
pub fn copy_to_backend(t: &Raw, b: BackendId) -> Result<Raw> {
    let (shape, dtype) = (self::shape(t), self::dtype(t)?);
    with_bytes(t, |bytes| from_bytes(b, bytes, &shape, dtype, Device::Cpu))
}

pub fn export_view(t: &Raw) -> Result<super::ExportView<Raw>> {
    fn wrap<R>(v: super::ExportView<R>, keep: Raw) -> super::ExportView<Raw> {
        super::ExportView { data: v.data, shape: v.shape, strides: v.strides, device: v.device, keep }
    }
    on!(t, t => torch: torch::export_view(t).map(|v| { let k = Raw::Torch(torch::shallow(&v.keep)); wrap(v, k) }),
                native: native::export_view(t).map(|v| { let k = Raw::Native(v.keep.clone()); wrap(v, k) }))
}

// ---------------------------------------------------------------------- ops

pub fn matmul(a: &Raw, b: &Raw) -> Result<Raw> {
    match (a, b) {
        #[cfg(feature = "torch")]
        (Raw::Torch(a), Raw::Torch(b)) => torch::matmul(a, b).map(Raw::Torch),
        (Raw::Native(a), Raw::Native(b)) => native::matmul(a, b).map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(mismatch()),
    }
}

pub fn binary(op: Binary, a: &Raw, b: &Raw) -> Result<Raw> {
    match (a, b) {
        #[cfg(feature = "torch")]
        (Raw::Torch(a), Raw::Torch(b)) => torch::binary(op, a, b).map(Raw::Torch),
        (Raw::Native(a), Raw::Native(b)) => native::binary(op, a, b).map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(mismatch()),
    }
}

pub fn unary(op: Unary, x: &Raw) -> Result<Raw> {
    unary_op!(x, x => unary(op, x))
}

pub fn reshape(x: &Raw, s: &[i64]) -> Result<Raw> {
    unary_op!(x, x => reshape(x, s))
}

pub fn view(x: &Raw, s: &[i64]) -> Result<Raw> {
    unary_op!(x, x => view(x, s))
}

pub fn transpose(x: &Raw, a: i64, b: i64) -> Result<Raw> {
    unary_op!(x, x => transpose(x, a, b))
}

pub fn slice(x: &Raw, d: i64, a: i64, b: i64, c: i64) -> Result<Raw> {
    unary_op!(x, x => slice(x, d, a, b, c))
}

pub fn reduce(op: Reduce, x: &Raw, d: Option<i64>, k: bool) -> Result<Raw> {
    unary_op!(x, x => reduce(op, x, d, k))
}

pub fn softmax(x: &Raw, d: i64) -> Result<Raw> {
    unary_op!(x, x => softmax(x, d))
}

pub fn dropout(x: &Raw, p: f64, t: bool) -> Result<Raw> {
    unary_op!(x, x => dropout(x, p, t))
}

pub fn to_device(x: &Raw, d: Device) -> Result<Raw> {
    unary_op!(x, x => to_device(x, d))
}

pub fn to_dtype(x: &Raw, d: DType) -> Result<Raw> {
    unary_op!(x, x => to_dtype(x, d))
}

pub fn min_max(x: &Raw) -> Result<(f64, f64)> {
    on!(x, x => torch: torch::min_max(x), native: native::min_max(x))
}

pub fn concat(ts: &[&Raw], d: i64) -> Result<Raw> {
    match many(ts)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::concat(&v, d).map(Raw::Torch),
        Many::Native(v) => native::concat(&v, d).map(Raw::Native),
    }
}

pub fn masked_softmax(x: &Raw, m: &Raw, d: i64, t: Option<i64>) -> Result<Raw> {
    match many(&[x, m])? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::masked_softmax(v[0], v[1], d, t).map(Raw::Torch),
        Many::Native(v) => native::masked_softmax(v[0], v[1], d, t).map(Raw::Native),
    }
}

pub fn masked_softmax_backward(g: &Raw, o: &Raw, m: &Raw, d: i64) -> Result<Raw> {
    match many(&[g, o, m])? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::masked_softmax_backward(v[0], v[1], v[2], d).map(Raw::Torch),
        Many::Native(v) => native::masked_softmax_backward(v[0], v[1], v[2], d).map(Raw::Native),
    }
}

pub fn layernorm(x: &Raw, w: &Raw, b: Option<&Raw>, e: f64) -> Result<Raw> {
    match opt_many(w, b)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::layernorm(as_torch(x)?, v[0], v.get(1).copied(), e).map(Raw::Torch),
        Many::Native(v) => native::layernorm(as_native(x)?, v[0], v.get(1).copied(), e).map(Raw::Native),
    }
}

pub fn layernorm_backward(x: &Raw, w: &Raw, b: Option<&Raw>, e: f64, g: &Raw) -> Result<Vec<Raw>> {
    match opt_many(w, b)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::layernorm_backward(as_torch(x)?, v[0], v.get(1).copied(), e, as_torch(g)?)
            .map(|v| v.into_iter().map(Raw::Torch).collect()),
        Many::Native(v) => native::layernorm_backward(as_native(x)?, v[0], v.get(1).copied(), e, as_native(g)?)
            .map(|v| v.into_iter().map(Raw::Native).collect()),
    }
}

pub fn embedding(w: &Raw, i: &Raw) -> Result<Raw> {
    match many(&[w, i])? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::embedding(v[0], v[1]).map(Raw::Torch),
        Many::Native(v) => native::embedding(v[0], v[1]).map(Raw::Native),
    }
}

pub fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    match opt_many(w, b)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::linear(as_torch(x)?, v[0], v.get(1).copied()).map(Raw::Torch),
        Many::Native(v) => native::linear(as_native(x)?, v[0], v.get(1).copied()).map(Raw::Native),
    }
}

pub fn cross_entropy(l: &Raw, t: &Raw) -> Result<Raw> {
    match many(&[l, t])? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::cross_entropy(v[0], v[1]).map(Raw::Torch),
        Many::Native(v) => native::cross_entropy(v[0], v[1]).map(Raw::Native),
    }
}

#[cfg(feature = "torch")]
fn as_torch(x: &Raw) -> Result<&torch::Raw> {
    match x {
        Raw::Torch(t) => Ok(t),
        _ => Err(mismatch()),
    }
}

fn as_native(x: &Raw) -> Result<&native::Raw> {
    match x {
        Raw::Native(t) => Ok(t),
        #[allow(unreachable_patterns)]
        _ => Err(mismatch()),
    }
}

// ----------------------------------------------------------------- autograd

pub fn set_requires_grad(x: &Raw) -> Result<()> {
    on!(x, x => torch: torch::set_requires_grad(x), native: native::set_requires_grad(x))
}

pub fn requires_grad(t: &Raw) -> bool {
    on!(t, t => torch: torch::requires_grad(t), native: native::requires_grad(t))
}

pub fn backward(x: &Raw) -> Result<()> {
    on!(x, x => torch: torch::backward(x), native: native::backward(x))
}

pub fn grad(x: &Raw) -> Result<Option<Raw>> {
    on!(x, x => torch: Ok(torch::grad(x)?.map(Raw::Torch)), native: Ok(native::grad(x).map(Raw::Native)))
}

pub fn zero_grad(x: &Raw) -> Result<()> {
    on!(x, x => torch: torch::zero_grad(x), native: { native::zero_grad(x); Ok(()) })
}

pub fn all_finite(x: &Raw) -> Result<bool> {
    on!(x, x => torch: torch::all_finite(x), native: native::all_finite(x))
}

pub fn scale_(x: &Raw, s: f64) -> Result<()> {
    on!(x, x => torch: torch::scale_(x, s), native: native::scale_(x, s))
}

pub fn clip_grad_norm(gs: &[&Raw], m: f64, n: f64) -> Result<f64> {
    match many(gs)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::clip_grad_norm(&v, m, n),
        Many::Native(v) => native::clip_grad_norm(&v, m, n),
    }
}

// ----------------------------------------------------------- training state

/// The native backend's CPU autocast dtype on this thread (`None`: off).
pub fn native_autocast() -> Option<DType> {
    native::autocast::get()
}

pub fn set_native_autocast(dt: Option<DType>) {
    native::autocast::set(dt)
}

pub fn adamw_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, c: &crate::vocab::optim::AdamwStep) -> Result<()> {
    match many(&[p, g, m, v])? {
        #[cfg(feature = "torch")]
        Many::Torch(t) => torch::adamw_step(t[0], t[1], t[2], t[3], c),
        Many::Native(t) => native::adamw_step(t[0], t[1], t[2], t[3], c),
    }
}

/// A backend's GradScaler state on `d`: the float32 scale `s` and the int32 growth tracker `t`, both 0-dim.
pub fn scaler_state(b: BackendId, s: f64, t: i64, d: Device) -> Result<(Raw, Raw)> {
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => torch::scaler_state(s, t, d).map(|(a, b)| (Raw::Torch(a), Raw::Torch(b))),
        BackendId::Cpu => native::scaler_state(s, t).map(|(a, b)| (Raw::Native(a), Raw::Native(b))),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}

pub fn scale_by(l: &Raw, s: &Raw) -> Result<Raw> {
    match many(&[l, s])? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::scale_by(v[0], v[1]).map(Raw::Torch),
        Many::Native(v) => native::binary(Binary::Mul, v[0], v[1]).map(Raw::Native),
    }
}

pub fn unscale(gs: &[&Raw], s: &Raw) -> Result<bool> {
    let mut all = gs.to_vec();
    all.push(s);
    match many(&all)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::unscale(&v[..v.len() - 1], v[v.len() - 1]),
        Many::Native(v) => native::unscale(&v[..v.len() - 1], v[v.len() - 1]),
    }
}

pub fn update_scale(s: &Raw, t: &Raw, f: bool, g: f64, b: f64, i: i64) -> Result<()> {
    match many(&[s, t])? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::update_scale(v[0], v[1], f, g, b, i),
        Many::Native(v) => native::update_scale(v[0], v[1], f, g, b, i),
    }
}

pub fn lm_init(b: BackendId, l: &[(Vec<i64>, crate::vocab::gpt::Init)], d: Device, s: i64) -> Result<Vec<Raw>> {
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => Ok(torch::lm_init(l, d, s)?.into_iter().map(Raw::Torch).collect()),
        BackendId::Cpu => Ok(native::lm_init(l, s)?.into_iter().map(Raw::Native).collect()),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}

pub fn lm_forward(p: &[&Raw], s: &crate::vocab::gpt::LmSpec, i: &Raw, t: &Raw, tr: bool) -> Result<Raw> {
    let mut all = p.to_vec();
    all.extend([i, t]);
    match many(&all)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::lm_forward(&v[..p.len()], s, v[p.len()], v[p.len() + 1], tr).map(Raw::Torch),
        Many::Native(v) => native::lm_forward(&v[..p.len()], s, v[p.len()], v[p.len() + 1], tr).map(Raw::Native),
    }
}

pub fn lm_logits(p: &[&Raw], s: &crate::vocab::gpt::LmSpec, i: &Raw) -> Result<Raw> {
    let mut all = p.to_vec();
    all.push(i);
    match many(&all)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::lm_logits(&v[..p.len()], s, v[p.len()]).map(Raw::Torch),
        Many::Native(v) => native::lm_logits(&v[..p.len()], s, v[p.len()]).map(Raw::Native),
    }
}

/// The generator state of backend `b` as a uint8 tensor.
pub fn rng_state(b: BackendId) -> Result<Raw> {
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => torch::rng_state().map(Raw::Torch),
        BackendId::Cpu => native::rng_state().map(Raw::Native),
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}

pub fn set_rng_state(s: &Raw) -> Result<()> {
    on!(s, s => torch: torch::set_rng_state(s), native: native::set_rng_state(s))
}

// ----------------------------------------------------------- process groups

pub fn dist_group(p: &crate::vocab::dist::Plan) -> Result<Group> {
    torch::dist_group(p)
}

/// The backend whose tensors the process-group functions move.
pub fn dist_backend() -> BackendId {
    if cfg!(feature = "torch") {
        BackendId::Torch
    } else {
        BackendId::Cpu
    }
}

/// libtorch tensors over native tensors' memory (no copy), so that c10d's
/// Gloo process group reduces and broadcasts them in place. The views
/// release nothing: the native tensors stay alive (borrowed) for the whole
/// collective, which completes before the shim returns.
#[cfg(feature = "torch")]
fn torch_views(ts: &[&native::Raw]) -> Result<Vec<torch::Raw>> {
    unsafe extern "C" fn borrowed(_: *mut std::ffi::c_void) {}
    ts.iter()
        .map(|t| {
            let v = native::memory_view(t);
            // SAFETY: the memory spans the view and outlives the collective (see above).
            unsafe { torch::wrap_foreign(v.data, &v.shape, &v.strides, native::dtype(t), Device::Cpu, borrowed, std::ptr::null_mut()) }
        })
        .collect()
}

pub fn dist_allreduce(g: &Group, ts: &[&Raw], op: i32, prescale: f64) -> Result<()> {
    match many(ts)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::dist_allreduce(g, &v, op, prescale),
        #[cfg(feature = "torch")]
        Many::Native(v) => torch::dist_allreduce(g, &torch_views(&v)?.iter().collect::<Vec<_>>(), op, prescale),
        #[cfg(not(feature = "torch"))]
        Many::Native(_) => match *g {},
    }
}

pub fn dist_broadcast(g: &Group, ts: &[&Raw], root: i64) -> Result<()> {
    match many(ts)? {
        #[cfg(feature = "torch")]
        Many::Torch(v) => torch::dist_broadcast(g, &v, root),
        #[cfg(feature = "torch")]
        Many::Native(v) => torch::dist_broadcast(g, &torch_views(&v)?.iter().collect::<Vec<_>>(), root),
        #[cfg(not(feature = "torch"))]
        Many::Native(_) => match *g {},
    }
}

/// `[world, *shape]`, made by the backend of `t`.
pub fn dist_allgather(g: &Group, t: &Raw, world: i64) -> Result<Raw> {
    match t {
        #[cfg(feature = "torch")]
        Raw::Torch(t) => torch::dist_allgather(g, t, world).map(Raw::Torch),
        #[cfg(feature = "torch")]
        Raw::Native(n) => {
            let all = Raw::Torch(torch::dist_allgather(g, &torch_views(&[n])?[0], world)?);
            copy_to_backend(&all, BackendId::Cpu)
        }
        #[cfg(not(feature = "torch"))]
        Raw::Native(_) => match *g {},
    }
}

pub fn dist_barrier(g: &Group) -> Result<()> {
    torch::dist_barrier(g)
}

/// `t` with a leading dim of 1: an all-gather over a world of one.
pub fn dist_stack_one(t: &Raw) -> Result<Raw> {
    on!(t, t => torch: torch::dist_stack_one(t).map(Raw::Torch), native: {
        let mut s = native::shape(t);
        s.insert(0, 1);
        native::reshape(t, &s).map(Raw::Native)
    })
}

// ------------------------------------------------------------ the op table

/// The results of one `op` call: most ops have one or two, kept off the heap.
pub type Outs = smallvec::SmallVec<[Raw; 2]>;

/// Runs a checked call of the op table (`crate::opcall`) on backend `b`.
pub fn op(b: BackendId, call: &crate::vocab::Call, inputs: &[Option<&Raw>]) -> Result<Outs> {
    type Ins<'a, T> = smallvec::SmallVec<[Option<&'a T>; 8]>;
    match b {
        #[cfg(feature = "torch")]
        BackendId::Torch => {
            if inputs.iter().flatten().any(|t| !matches!(t, Raw::Torch(_))) {
                return Err(mismatch());
            }
            let ins: Ins<_> = inputs.iter().map(|t| t.map(|t| match t { Raw::Torch(r) => r, _ => unreachable!("checked above") })).collect();
            torch::opcall::run(call, &ins, Raw::Torch)
        }
        BackendId::Cpu => {
            let ins = inputs
                .iter()
                .map(|t| {
                    t.map(|t| match t {
                        Raw::Native(r) => Ok(r),
                        #[allow(unreachable_patterns)]
                        _ => Err(mismatch()),
                    })
                    .transpose()
                })
                .collect::<Result<Ins<_>>>()?;
            native::opk::run(call, &ins).map(|v| v.into_iter().map(Raw::Native).collect())
        }
        #[allow(unreachable_patterns)]
        _ => Err(unavailable()),
    }
}
