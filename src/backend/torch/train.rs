//! Optimizer, GradScaler and autocast kernels: libtorch's own, reached through
//! `tch` where it has them and through the C++ shim (shim.cpp) where not.

use std::ffi::{c_char, c_int, c_void};

use super::{torch_err, Raw, Torch};
use crate::backend::contract::Train;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Code, Result};

/// An `at::Tensor*`: what tch's C tensor pointer (`Tensor::as_ptr`) is.
type AtTensor = *mut c_void;

extern "C" {
    fn enkai_shim_adamw_step(
        param: AtTensor,
        grad: AtTensor,
        exp_avg: AtTensor,
        exp_avg_sq: AtTensor,
        decay: f64,
        lerp: f64,
        beta2: f64,
        sq_weight: f64,
        bc2_sqrt: f64,
        eps: f64,
        step_size: f64,
    ) -> *mut c_char;
    fn enkai_shim_adam_step(
        param: AtTensor,
        grad: AtTensor,
        exp_avg: AtTensor,
        exp_avg_sq: AtTensor,
        max_exp_avg_sq: AtTensor,
        weight_decay: f64,
        lerp: f64,
        beta2: f64,
        sq_weight: f64,
        bc2_sqrt: f64,
        eps: f64,
        step_size: f64,
    ) -> *mut c_char;
    fn enkai_shim_sgd_step(
        param: AtTensor,
        grad: AtTensor,
        buf: AtTensor,
        made: *mut *mut torch_sys::C_tensor,
        weight_decay: f64,
        momentum: f64,
        damp_weight: f64,
        nesterov: c_int,
        lr: f64,
    ) -> *mut c_char;
    fn enkai_shim_unscale(grads: *const AtTensor, n: usize, found_inf: AtTensor, inv_scale: AtTensor) -> *mut c_char;
    fn enkai_shim_autocast_get(device: c_int, enabled: *mut c_int, dtype: *mut c_int);
    fn enkai_shim_autocast_set(device: c_int, enabled: c_int, dtype: c_int) -> *mut c_char;
    fn enkai_shim_autocast_increment_nesting();
    fn enkai_shim_rng_get_state(out: *mut *mut torch_sys::C_tensor) -> *mut c_char;
    fn enkai_shim_rng_set_state(state: AtTensor) -> *mut c_char;
    fn enkai_shim_autocast_decrement_nesting();
    fn enkai_shim_generator_new(seed: u64) -> *mut c_void;
    fn enkai_shim_generator_free(gen: *mut c_void);
    fn enkai_shim_randn_with(gen: *mut c_void, shape: *const i64, ndim: usize, out: *mut *mut torch_sys::C_tensor) -> *mut c_char;
}

/// A CPU random generator owned by its user (`torch.Generator().manual_seed(seed)`).
pub struct SeededGenerator(*mut c_void);

impl SeededGenerator {
    pub fn new(seed: i64) -> Result<Self> {
        // SAFETY: plain value argument; NULL means the shim caught a failure.
        let g = unsafe { enkai_shim_generator_new(seed as u64) };
        if g.is_null() {
            return Err(crate::err!(E_TORCH, "could not create a CPU generator"));
        }
        Ok(SeededGenerator(g))
    }

    /// `torch.randn(shape, generator=self)`, fp32 on the CPU.
    pub fn randn(&self, shape: &[i64]) -> Result<tch::Tensor> {
        // SAFETY: a live generator, `shape` valid for its length, a valid out-pointer.
        super::shim_tensor(Code::E_TORCH, |out| unsafe { enkai_shim_randn_with(self.0, shape.as_ptr(), shape.len(), out) })
    }
}

impl Drop for SeededGenerator {
    fn drop(&mut self) {
        // SAFETY: created by enkai_shim_generator_new, freed once.
        unsafe { enkai_shim_generator_free(self.0) }
    }
}

fn shim(msg: *mut c_char) -> Result<()> {
    super::shim_result(msg, crate::error::Code::E_TORCH)
}

// The in-place ops the shim runs change the tensor's storage, never the
// `at::Tensor` object itself, so a shared `&Raw` is enough.
fn ptr(t: &tch::Tensor) -> AtTensor {
    t.as_ptr() as AtTensor
}

impl Train for Torch {
    /// One `torch.optim.AdamW` step for one parameter, with libtorch's own ops.
    fn adamw_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, c: &crate::vocab::optim::AdamwStep) -> Result<()> {
        // SAFETY: four live tensors; the shim catches every C++ exception.
        shim(unsafe { enkai_shim_adamw_step(ptr(&p.0), ptr(&g.0), ptr(&m.0), ptr(&v.0), c.decay, c.lerp, c.beta2, c.sq_weight, c.bc2_sqrt, c.eps, c.step_size) })
    }

    /// One `torch.optim.Adam` step for one parameter, with libtorch's own ops
    /// (through the shim: tch's `add` and `addcdiv_` lack `alpha` and `value`).
    fn adam_step(p: &Raw, g: &Raw, m: &Raw, v: &Raw, vmax: Option<&Raw>, c: &crate::vocab::optim::AdamStep) -> Result<()> {
        let x = vmax.map_or(std::ptr::null_mut(), |x| ptr(&x.0));
        // SAFETY: live tensors (or NULL for no amsgrad max); the shim catches every C++ exception.
        shim(unsafe {
            enkai_shim_adam_step(ptr(&p.0), ptr(&g.0), ptr(&m.0), ptr(&v.0), x, c.weight_decay, c.lerp, c.beta2, c.sq_weight, c.bc2_sqrt, c.eps, c.step_size)
        })
    }

    /// One `torch.optim.SGD` step for one parameter, with libtorch's own ops.
    fn sgd_step(p: &Raw, g: &Raw, buf: Option<&Raw>, c: &crate::vocab::optim::SgdStep) -> Result<Option<Raw>> {
        let b = buf.map_or(std::ptr::null_mut(), |b| ptr(&b.0));
        let mut made = std::ptr::null_mut();
        // SAFETY: live tensors (or NULL for no buffer yet), a valid out-pointer; the shim catches every C++ exception.
        shim(unsafe { enkai_shim_sgd_step(ptr(&p.0), ptr(&g.0), b, &mut made, c.weight_decay, c.momentum, c.damp_weight, c.nesterov as c_int, c.lr) })?;
        // SAFETY: when set, a new at::Tensor* nobody else owns.
        Ok((!made.is_null()).then(|| Raw(unsafe { tch::Tensor::from_ptr(made) })))
    }

    fn scaler_state(scale: f64, tracker: i64, dev: Device) -> Result<(Raw, Raw)> {
        let d = super::tdevice(dev);
        let scale = super::create::full(&[], scale, (tch::Kind::Float, d))?;
        let tracker = super::create::full(&[], tracker as f64, (tch::Kind::Int, d))?;
        Ok((Raw(scale), Raw(tracker)))
    }

    /// `outputs * scale.to(outputs.device)`.
    fn scale_by(loss: &Raw, scale: &Raw) -> Result<Raw> {
        let s = scale.0.f_to_device(loss.0.device()).map_err(torch_err)?;
        loss.0.f_mul(&s).map(Raw).map_err(torch_err)
    }

    /// GradScaler.unscale_: grads *= 1/scale (reciprocal taken in float64),
    /// grouped by device as PyTorch does; returns whether any grad was non-finite.
    fn unscale(grads: &[&Raw], scale: &Raw) -> Result<bool> {
        let run = || -> Result<bool> {
            let inv = scale.0.f_to_kind(tch::Kind::Double).and_then(|t| t.f_reciprocal()).and_then(|t| t.f_to_kind(tch::Kind::Float));
            let inv = inv.map_err(torch_err)?;
            let mut found = false;
            let mut devices: Vec<tch::Device> = Vec::new();
            for g in grads {
                if !devices.contains(&g.0.device()) {
                    devices.push(g.0.device());
                }
            }
            for dev in devices {
                let group: Vec<AtTensor> = grads.iter().filter(|g| g.0.device() == dev).map(|g| ptr(&g.0)).collect();
                let found_inf = super::create::full(&[], 0.0, (tch::Kind::Float, dev))?;
                let inv_d = inv.f_to_device(dev).map_err(torch_err)?;
                // SAFETY: live tensors; the shim catches every C++ exception.
                shim(unsafe { enkai_shim_unscale(group.as_ptr(), group.len(), ptr(&found_inf), ptr(&inv_d)) })?;
                found |= found_inf.f_double_value(&[]).map_err(torch_err)? != 0.0;
            }
            Ok(found)
        };
        // A guard, not tch::no_grad(f): its Drop restores grad mode even when `run` unwinds.
        let _no_grad = tch::no_grad_guard();
        run()
    }

    /// torch._amp_update_scale_ with PyTorch's growth/backoff rule.
    fn update_scale(scale: &Raw, tracker: &Raw, found_inf: bool, growth: f64, backoff: f64, interval: i64) -> Result<()> {
        let dev = scale.0.device();
        let found = super::create::full(&[], if found_inf { 1.0 } else { 0.0 }, (tch::Kind::Float, dev))?;
        let mut s = scale.0.shallow_clone();
        s.f_internal_amp_update_scale_(&tracker.0, &found, growth, backoff, interval).map(drop).map_err(torch_err)
    }

    /// The CPU generator's.
    fn rng_state() -> Result<Raw> {
        // SAFETY: a valid out-pointer.
        super::shim_tensor(Code::E_TORCH, |out| unsafe { enkai_shim_rng_get_state(out) }).map(Raw)
    }

    fn set_rng_state(state: &Raw) -> Result<()> {
        // SAFETY: a live tensor; the shim catches every C++ exception.
        shim(unsafe { enkai_shim_rng_set_state(ptr(&state.0)) })
    }
}

/// Autocast state of this thread for one device type: (enabled, dtype as libtorch's ScalarType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutocastState {
    pub enabled: bool,
    pub dtype: c_int,
}

fn device_code(dev: Device) -> c_int {
    matches!(dev, Device::Cuda(_)) as c_int
}

pub fn autocast_get(dev: Device) -> AutocastState {
    let (mut e, mut d) = (0, 0);
    // SAFETY: two valid out-pointers; reads thread-local flags.
    unsafe { enkai_shim_autocast_get(device_code(dev), &mut e, &mut d) };
    AutocastState { enabled: e != 0, dtype: d }
}

pub fn autocast_set(dev: Device, s: AutocastState) -> Result<()> {
    // SAFETY: sets thread-local flags; exceptions are caught in the shim.
    shim(unsafe { enkai_shim_autocast_set(device_code(dev), s.enabled as c_int, s.dtype) })
}

/// libtorch's ScalarType number of an autocast dtype (c10/core/ScalarType.h).
pub fn autocast_dtype_code(d: DType) -> c_int {
    match d {
        DType::F16 => 5,
        DType::BF16 => 15,
        DType::F32 => 6,
        DType::F64 => 7,
        _ => 6,
    }
}

pub fn autocast_nesting(enter: bool) {
    // SAFETY: plain thread-local counters in libtorch.
    unsafe {
        if enter {
            enkai_shim_autocast_increment_nesting()
        } else {
            enkai_shim_autocast_decrement_nesting()
        }
    }
}
