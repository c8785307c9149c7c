//! The backend contract as the rest of the crate sees it (`backend::imp`):
//! each function takes `Raw` values of either backend and runs the
//! backend that made them, through the contract's traits (`contract`), the
//! same method for both. Functions that create tensors take the `BackendId`
//! to create them with. Inputs of two backends never reach here
//! (`backend::same_backend` refuses them first), but a mix is still an
//! error, never a panic.

// Without libtorch, the torch arms and the arguments only they read are gone.
#![cfg_attr(not(feature = "torch"), allow(unused_variables))]

use super::contract::{Autograd, Backend, Contract, Create, Data, Lm, Ops, Runtime, Train};
use super::native::{self, Native};
#[cfg(feature = "torch")]
use super::torch::{self, Torch};
use super::{BackendId, Init};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::vocab::kinds::Binary;

// What only libtorch has (CUDA, its autocast state, c10d process groups),
// outside the contract; `none` stands in for it without the torch feature.
#[cfg(feature = "torch")]
pub use super::torch::{autocast_dtype_code, autocast_get, autocast_nesting, autocast_set, cuda_device_count, gloo_layout, AutocastState, Group};
#[cfg(not(feature = "torch"))]
pub use super::none::{autocast_dtype_code, autocast_get, autocast_nesting, autocast_set, cuda_device_count, gloo_layout, AutocastState, Group};
#[cfg(not(feature = "torch"))]
use super::none as torch;
/// The int8 products of quantized weights: host-memory kernels that both
/// backends' activations go through (core's `quant` copies them in and out).
pub use super::native::quant as qkernel;

/// A tensor of one backend.
pub enum Raw {
    #[cfg(feature = "torch")]
    Torch(torch::Raw),
    Native(native::Raw),
}

pub fn unavailable() -> Error {
    torch::unavailable()
}

fn mismatch() -> Error {
    crate::err!(E_BACKEND_MISMATCH, "inputs come from the torch and cpu backends")
}

/// A backend's place in `Raw`.
trait Arm: Contract {
    fn wrap(r: Self::Raw) -> Raw;
    /// `r`'s inner tensor; `E_BACKEND_MISMATCH` when another backend made it.
    fn of(r: &Raw) -> Result<&Self::Raw>;
}

#[cfg(feature = "torch")]
impl Arm for Torch {
    fn wrap(r: torch::Raw) -> Raw {
        Raw::Torch(r)
    }
    fn of(r: &Raw) -> Result<&torch::Raw> {
        match r {
            Raw::Torch(t) => Ok(t),
            _ => Err(mismatch()),
        }
    }
}

impl Arm for Native {
    fn wrap(r: native::Raw) -> Raw {
        Raw::Native(r)
    }
    fn of(r: &Raw) -> Result<&native::Raw> {
        match r {
            Raw::Native(t) => Ok(t),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch()),
        }
    }
}

/// Runs `$body` with the type `$B` set to the backend that made `$x` (a
/// `&Raw`) and `$t` bound to its inner tensor.
macro_rules! each {
    ($x:expr, $B:ident, $t:ident => $body:expr) => {
        match $x {
            #[cfg(feature = "torch")]
            Raw::Torch($t) => {
                type $B = Torch;
                $body
            }
            Raw::Native($t) => {
                type $B = Native;
                $body
            }
        }
    };
}

/// Runs `$body` with the type `$B` set to the backend `$b` names; a backend
/// not built in gives `$none` (by default `E_BACKEND_UNAVAILABLE`).
macro_rules! on_id {
    ($b:expr, $B:ident => $body:expr) => {
        on_id!($b, $B => $body, else Err(unavailable().into()))
    };
    ($b:expr, $B:ident => $body:expr, else $none:expr) => {
        match $b {
            #[cfg(feature = "torch")]
            BackendId::Torch => {
                type $B = Torch;
                $body
            }
            #[cfg(not(feature = "torch"))]
            BackendId::Torch => $none,
            BackendId::Cpu => {
                type $B = Native;
                $body
            }
        }
    };
}

impl Raw {
    pub fn backend(&self) -> BackendId {
        each!(self, B, _t => B::ID)
    }
}

/// The backend of a list's first tensor (the active one for an empty list).
fn first(ts: &[&Raw]) -> BackendId {
    ts.first().map_or(super::active(), |t| t.backend())
}

/// The inner tensors of a list that backend `B` made.
fn all<'a, B: Arm>(ts: &[&'a Raw]) -> Result<Vec<&'a B::Raw>> {
    ts.iter().map(|t| B::of(t)).collect()
}

fn wrap_all<B: Arm>(v: Vec<B::Raw>) -> Vec<Raw> {
    v.into_iter().map(B::wrap).collect()
}

// ------------------------------------------------------------- process-wide

// These set every built backend, so the two stay in step.

pub fn set_num_threads(n: i64) {
    #[cfg(feature = "torch")]
    Torch::set_num_threads(n);
    Native::set_num_threads(n);
}

/// libtorch's count when built in: it runs the ops of both.
pub fn get_num_threads() -> Option<i64> {
    #[cfg(feature = "torch")]
    return Torch::get_num_threads();
    #[cfg(not(feature = "torch"))]
    return Native::get_num_threads();
}

/// This thread's grad mode, as `torch.set_grad_enabled`; returns the previous mode.
pub fn set_grad_enabled(on: bool) -> bool {
    #[cfg(feature = "torch")]
    Torch::set_grad_enabled(on);
    Native::set_grad_enabled(on)
}

/// Each backend's grad mode on this thread. They part only inside a
/// backward pass, which turns off its own backend's mode alone.
#[derive(Clone, Copy)]
pub struct GradModes {
    #[cfg(feature = "torch")]
    torch: bool,
    native: bool,
}

/// Sets both backends' grad modes to `on`, returning what each was.
pub fn swap_grad_modes(on: bool) -> GradModes {
    GradModes {
        #[cfg(feature = "torch")]
        torch: Torch::set_grad_enabled(on),
        native: Native::set_grad_enabled(on),
    }
}

pub fn restore_grad_modes(m: GradModes) {
    #[cfg(feature = "torch")]
    Torch::set_grad_enabled(m.torch);
    Native::set_grad_enabled(m.native);
}

/// The native backend keeps the mode both follow (see `set_grad_enabled`).
pub fn is_grad_enabled() -> bool {
    native::is_grad_enabled()
}

/// Seeds every backend's generator (the ABI promises the active one's).
pub fn manual_seed(seed: i64) -> Result<()> {
    #[cfg(feature = "torch")]
    Torch::manual_seed(seed)?;
    Native::manual_seed(seed)
}

// ----------------------------------------------------------------- creation

pub fn fill(b: BackendId, shape: &[i64], dtype: DType, dev: Device, init: Init) -> Result<Raw> {
    on_id!(b, B => B::fill(shape, dtype, dev, init).map(B::wrap))
}

pub fn from_bytes(b: BackendId, bytes: &[u8], shape: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
    on_id!(b, B => B::from_bytes(bytes, shape, dtype, dev).map(B::wrap))
}

pub fn filled_cpu<E: From<Error>>(
    b: BackendId,
    shape: &[i64],
    dtype: DType,
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<Raw, E> {
    on_id!(b, B => B::filled_cpu(shape, dtype, fill).map(B::wrap))
}

/// # Safety
/// As `Create::wrap_foreign`: `release(ctx)` runs exactly once.
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
    // SAFETY: forwarded; the caller checked the device fits the backend.
    on_id!(b, B => unsafe { B::wrap_foreign(data, shape, strides, dtype, dev, release, ctx) }.map(B::wrap), else {
        // SAFETY: the caller hands `ctx` over for exactly one release.
        unsafe { release(ctx) };
        Err(unavailable())
    })
}

/// # Safety
/// As `Create::copy_foreign`.
pub unsafe fn copy_foreign(b: BackendId, data: *mut std::ffi::c_void, shape: &[i64], strides: &[i64], dtype: DType, dev: Device) -> Result<Raw> {
    // SAFETY: forwarded.
    on_id!(b, B => unsafe { B::copy_foreign(data, shape, strides, dtype, dev) }.map(B::wrap))
}

pub fn zeros_like(t: &Raw) -> Result<Raw> {
    each!(t, B, t => B::zeros_like(t).map(B::wrap))
}

pub fn shallow(t: &Raw) -> Raw {
    each!(t, B, t => B::wrap(B::shallow(t)))
}

// --------------------------------------------------------------------- data

pub fn shape(t: &Raw) -> Vec<i64> {
    each!(t, B, t => B::shape(t))
}

/// `shape`, kept off the heap for up to 8 dims.
pub fn dims(t: &Raw) -> smallvec::SmallVec<[i64; 8]> {
    each!(t, B, t => B::dims(t))
}

/// Strides and storage offset, in elements.
pub fn layout(t: &Raw) -> (smallvec::SmallVec<[i64; 8]>, i64) {
    each!(t, B, t => B::layout(t))
}

pub fn dtype(t: &Raw) -> Result<DType> {
    each!(t, B, t => B::dtype(t))
}

pub fn device(t: &Raw) -> Device {
    each!(t, B, t => B::device(t))
}

pub fn item(t: &Raw) -> Result<f64> {
    each!(t, B, t => B::item(t))
}

pub fn scalar_value(t: &Raw) -> Result<f64> {
    each!(t, B, t => B::scalar_value(t))
}

pub fn copy_to(t: &Raw, dst: &mut [u8]) -> Result<()> {
    each!(t, B, t => B::copy_to(t, dst))
}

pub fn with_bytes<R>(t: &Raw, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    each!(t, B, t => B::with_bytes(t, f))
}

/// A contiguous CPU copy of `t` made by backend `b` (no autograd history).
pub fn copy_to_backend(t: &Raw, b: BackendId) -> Result<Raw> {
    let (shape, dtype) = (self::shape(t), self::dtype(t)?);
    with_bytes(t, |bytes| from_bytes(b, bytes, &shape, dtype, Device::Cpu))
}

pub fn export_view(t: &Raw) -> Result<super::ExportView<Raw>> {
    each!(t, B, t => B::export_view(t).map(|v| super::ExportView {
        data: v.data,
        shape: v.shape,
        strides: v.strides,
        device: v.device,
        keep: B::wrap(v.keep),
    }))
}

// ---------------------------------------------------------------------- ops

pub fn binary(op: Binary, a: &Raw, b: &Raw) -> Result<Raw> {
    each!(a, B, a => B::binary(op, a, B::of(b)?).map(B::wrap))
}

pub fn view(x: &Raw, s: &[i64]) -> Result<Raw> {
    each!(x, B, x => B::view(x, s).map(B::wrap))
}

pub fn slice(x: &Raw, d: i64, a: i64, b: i64, c: i64) -> Result<Raw> {
    each!(x, B, x => B::slice(x, d, a, b, c).map(B::wrap))
}

pub fn dropout(x: &Raw, p: f64, t: bool) -> Result<Raw> {
    each!(x, B, x => B::dropout(x, p, t).map(B::wrap))
}

pub fn to_device(x: &Raw, d: Device) -> Result<Raw> {
    each!(x, B, x => B::to_device(x, d).map(B::wrap))
}

pub fn to_dtype(x: &Raw, d: DType) -> Result<Raw> {
    each!(x, B, x => B::to_dtype(x, d).map(B::wrap))
}

pub fn min_max(x: &Raw) -> Result<(f64, f64)> {
    each!(x, B, x => B::min_max(x))
}

pub fn concat(ts: &[&Raw], d: i64) -> Result<Raw> {
    on_id!(first(ts), B => B::concat(&all::<B>(ts)?, d).map(B::wrap))
}

pub fn masked_softmax(x: &Raw, m: &Raw, d: i64, t: Option<i64>) -> Result<Raw> {
    each!(x, B, x => B::masked_softmax(x, B::of(m)?, d, t).map(B::wrap))
}

pub fn masked_softmax_backward(g: &Raw, o: &Raw, m: &Raw, d: i64) -> Result<Raw> {
    each!(g, B, g => B::masked_softmax_backward(g, B::of(o)?, B::of(m)?, d).map(B::wrap))
}

pub fn layernorm(x: &Raw, w: &Raw, b: Option<&Raw>, e: f64) -> Result<Raw> {
    each!(x, B, x => B::layernorm(x, B::of(w)?, b.map(B::of).transpose()?, e).map(B::wrap))
}

pub fn layernorm_backward(x: &Raw, w: &Raw, b: Option<&Raw>, e: f64, g: &Raw) -> Result<Vec<Raw>> {
    each!(x, B, x => B::layernorm_backward(x, B::of(w)?, b.map(B::of).transpose()?, e, B::of(g)?).map(wrap_all::<B>))
}

pub fn embedding(w: &Raw, i: &Raw) -> Result<Raw> {
    each!(w, B, w => B::embedding(w, B::of(i)?).map(B::wrap))
}

pub fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    each!(x, B, x => B::linear(x, B::of(w)?, b.map(B::of).transpose()?).map(B::wrap))
}

pub fn cross_entropy(l: &Raw, t: &Raw) -> Result<Raw> {
    each!(l, B, l => B::cross_entropy(l, B::of(t)?).map(B::wrap))
}

// ----------------------------------------------------------------- autograd

pub fn set_requires_grad(x: &Raw, flag: bool) -> Result<()> {
    each!(x, B, x => B::set_requires_grad(x, flag))
}

pub fn requires_grad(t: &Raw) -> bool {
    each!(t, B, t => B::requires_grad(t))
}

pub fn backward(x: &Raw) -> Result<()> {
    each!(x, B, x => B::backward(x))
}

pub fn detach(x: &Raw) -> Result<Raw> {
    each!(x, B, x => B::detach(x).map(B::wrap))
}

pub fn graph_leaves(outs: &[&Raw]) -> Result<Vec<Raw>> {
    on_id!(first(outs), B => B::graph_leaves(&all::<B>(outs)?).map(wrap_all::<B>))
}

pub fn backward_with(outs: &[&Raw], grads: &[&Raw]) -> Result<()> {
    on_id!(first(outs), B => B::backward_with(&all::<B>(outs)?, &all::<B>(grads)?))
}

/// `Autograd::custom_node` over either backend; `backward` sees and returns
/// tensors of the backend that made `outs`.
pub fn custom_node(name: &'static str, inputs: &[&Raw], outs: Vec<Raw>, backward: super::contract::CustomBackward<Raw>) -> Result<Vec<Raw>> {
    let b = outs.first().map_or_else(|| first(inputs), Raw::backend);
    on_id!(b, B => {
        let outs = outs.iter().map(|o| B::of(o).map(B::shallow)).collect::<Result<Vec<_>>>()?;
        let adapted: super::contract::CustomBackward<<B as Backend>::Raw> = Box::new(move |gs| {
            let back = backward(gs.into_iter().map(|g| g.map(B::wrap)).collect())?;
            back.into_iter().map(|g| g.map(|g| B::of(&g).map(B::shallow)).transpose()).collect()
        });
        B::custom_node(name, &all::<B>(inputs)?, outs, adapted).map(wrap_all::<B>)
    })
}

pub fn grad(x: &Raw) -> Result<Option<Raw>> {
    each!(x, B, x => Ok(B::grad(x)?.map(B::wrap)))
}

pub fn zero_grad(x: &Raw) -> Result<()> {
    each!(x, B, x => B::zero_grad(x))
}

pub fn all_finite(x: &Raw) -> Result<bool> {
    each!(x, B, x => B::all_finite(x))
}

pub fn scale_(x: &Raw, s: f64) -> Result<()> {
    each!(x, B, x => B::scale_(x, s))
}

pub fn clip_grad_norm(gs: &[&Raw], m: f64, n: f64) -> Result<f64> {
    on_id!(first(gs), B => B::clip_grad_norm(&all::<B>(gs)?, m, n))
}

// ----------------------------------------------------------- training state

/// The native backend's CPU autocast dtype on this thread (`None`: off).
/// Autocast is backend-specific (libtorch's is `autocast_get`/`autocast_set`).
pub fn native_autocast() -> Option<DType> {
    native::autocast::get()
}

pub fn set_native_autocast(dt: Option<DType>) {
    native::autocast::set(dt)
}

pub fn adamw_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, c: &crate::vocab::optim::AdamwStep) -> Result<()> {
    each!(p, B, p => B::adamw_step(p, B::of(g)?, B::of(m)?, B::of(v)?, c))
}

pub fn adam_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, vmax: Option<&Raw>, c: &crate::vocab::optim::AdamStep) -> Result<()> {
    each!(p, B, p => B::adam_step(p, B::of(g)?, B::of(m)?, B::of(v)?, vmax.map(B::of).transpose()?, c))
}

pub fn sgd_step(p: &Raw, g: &Raw, buf: Option<&Raw>, c: &crate::vocab::optim::SgdStep) -> Result<Option<Raw>> {
    each!(p, B, p => Ok(B::sgd_step(p, B::of(g)?, buf.map(B::of).transpose()?, c)?.map(B::wrap)))
}

/// A backend's GradScaler state on `d`: the float32 scale `s` and the int32 growth tracker `t`, both 0-dim.
pub fn scaler_state(b: BackendId, s: f64, t: i64, d: Device) -> Result<(Raw, Raw)> {
    on_id!(b, B => B::scaler_state(s, t, d).map(|(s, t)| (B::wrap(s), B::wrap(t))))
}

pub fn scale_by(l: &Raw, s: &Raw) -> Result<Raw> {
    each!(l, B, l => B::scale_by(l, B::of(s)?).map(B::wrap))
}

pub fn unscale(gs: &[&Raw], s: &Raw) -> Result<bool> {
    each!(gs.first().copied().unwrap_or(s), B, _t => B::unscale(&all::<B>(gs)?, B::of(s)?))
}

pub fn update_scale(s: &Raw, t: &Raw, f: bool, g: f64, b: f64, i: i64) -> Result<()> {
    each!(s, B, s => B::update_scale(s, B::of(t)?, f, g, b, i))
}

pub fn lm_init(b: BackendId, l: &[(Vec<i64>, crate::vocab::gpt::Init)], d: Device, s: i64) -> Result<Vec<Raw>> {
    on_id!(b, B => B::lm_init(l, d, s).map(wrap_all::<B>))
}

pub fn lm_forward(p: &[&Raw], s: &crate::vocab::gpt::LmSpec, i: &Raw, t: &Raw, tr: bool) -> Result<Raw> {
    each!(i, B, i => B::lm_forward(&all::<B>(p)?, s, i, B::of(t)?, tr).map(B::wrap))
}

pub fn lm_logits(p: &[&Raw], s: &crate::vocab::gpt::LmSpec, i: &Raw) -> Result<Raw> {
    each!(i, B, i => B::lm_logits(&all::<B>(p)?, s, i).map(B::wrap))
}

/// The generator state of backend `b` as a uint8 tensor.
pub fn rng_state(b: BackendId) -> Result<Raw> {
    on_id!(b, B => B::rng_state().map(B::wrap))
}

pub fn set_rng_state(s: &Raw) -> Result<()> {
    each!(s, B, s => B::set_rng_state(s))
}

// ----------------------------------------------------------- process groups

// Process groups are libtorch's c10d alone: outside the contract. Native
// tensors take part through libtorch views of their memory.

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

/// Runs `f` on libtorch tensors for `ts`: themselves, or, for native ones,
/// views over their memory (no copy), so that c10d's Gloo process group
/// reduces and broadcasts them in place. The views release nothing: the
/// native tensors stay alive (borrowed) for the whole collective, which
/// completes before the shim returns.
#[cfg(feature = "torch")]
fn with_torch<R>(ts: &[&Raw], f: impl FnOnce(&[&torch::Raw]) -> Result<R>) -> Result<R> {
    unsafe extern "C" fn borrowed(_: *mut std::ffi::c_void) {}
    match first(ts) {
        BackendId::Torch => f(&all::<Torch>(ts)?),
        BackendId::Cpu => {
            let views = all::<Native>(ts)?
                .into_iter()
                .map(|t| {
                    let v = native::memory_view(t);
                    // SAFETY: the memory spans the view and outlives the collective (see above).
                    unsafe { Torch::wrap_foreign(v.data, &v.shape, &v.strides, t.dtype(), Device::Cpu, borrowed, std::ptr::null_mut()) }
                })
                .collect::<Result<Vec<_>>>()?;
            f(&views.iter().collect::<Vec<_>>())
        }
    }
}

#[cfg(feature = "torch")]
pub fn dist_allreduce(g: &Group, ts: &[&Raw], op: i32, prescale: f64) -> Result<()> {
    with_torch(ts, |v| torch::dist_allreduce(g, v, op, prescale))
}

#[cfg(feature = "torch")]
pub fn dist_broadcast(g: &Group, ts: &[&Raw], root: i64) -> Result<()> {
    with_torch(ts, |v| torch::dist_broadcast(g, v, root))
}

/// `[world, *shape]`, made by the backend of `t`.
#[cfg(feature = "torch")]
pub fn dist_allgather(g: &Group, t: &Raw, world: i64) -> Result<Raw> {
    let all = Raw::Torch(with_torch(&[t], |v| torch::dist_allgather(g, v[0], world))?);
    match t {
        Raw::Torch(_) => Ok(all),
        Raw::Native(_) => copy_to_backend(&all, BackendId::Cpu),
    }
}

// No group exists without libtorch (`Group` is uninhabited).
#[cfg(not(feature = "torch"))]
pub fn dist_allreduce(g: &Group, _: &[&Raw], _: i32, _: f64) -> Result<()> {
    match *g {}
}

#[cfg(not(feature = "torch"))]
pub fn dist_broadcast(g: &Group, _: &[&Raw], _: i64) -> Result<()> {
    match *g {}
}

#[cfg(not(feature = "torch"))]
pub fn dist_allgather(g: &Group, _: &Raw, _: i64) -> Result<Raw> {
    match *g {}
}

pub fn dist_barrier(g: &Group) -> Result<()> {
    torch::dist_barrier(g)
}

/// `t` with a leading dim of 1: an all-gather over a world of one.
pub fn dist_stack_one(t: &Raw) -> Result<Raw> {
    each!(t, B, t => B::stack_one(t).map(B::wrap))
}

// ------------------------------------------------------------ the op table

/// The results of one `op` call: most ops have one or two, kept off the heap.
pub type Outs = smallvec::SmallVec<[Raw; 2]>;

/// Runs a checked call of the op table (`crate::opcall`) on backend `b`.
pub fn op(b: BackendId, call: &crate::vocab::Call, inputs: &[Option<&Raw>]) -> Result<Outs> {
    type Ins<'a, T> = smallvec::SmallVec<[Option<&'a T>; 8]>;
    on_id!(b, B => {
        let ins = inputs.iter().map(|t| t.map(B::of).transpose()).collect::<Result<Ins<_>>>()?;
        B::op(call, &ins, B::wrap)
    })
}
