//! Mixed precision: GradScaler handles with `torch.amp.GradScaler` rules, and
//! per-thread autocast regions.

use std::cell::RefCell;
use std::sync::Mutex;

use crate::backend::imp::{self, AutocastState, Raw};
use crate::backend::{self, BackendId};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::registry::{SCALERS, TENSORS};
use crate::{autograd, json, optim, tensor};
pub use crate::vocab::optim::next_scale;

struct ScaleState {
    /// float32 scale and int32 growth tracker, created on the first device used.
    tensors: Option<(Raw, Raw)>,
    /// `unscale_grads` ran since the last `update`, and what it found.
    unscaled: Option<bool>,
}

/// A GradScaler handle's value.
pub struct Scaler {
    init_scale: f64,
    growth: f64,
    backoff: f64,
    interval: i64,
    state: Mutex<ScaleState>,
}

/// Whether the scale `v` stays finite and positive in float32, where PyTorch keeps it.
fn positive_f32(v: f64) -> bool {
    let f = v as f32;
    f.is_finite() && f > 0.0
}

/// A scaler with checked settings (`torch.amp.GradScaler.__init__`'s checks,
/// plus a scale that float32, where PyTorch keeps it, can hold).
fn validated(init_scale: f64, growth: f64, backoff: f64, interval: i64) -> Result<Scaler> {
    if !(init_scale.is_finite() && init_scale > 0.0) {
        crate::bail!(E_AMP_INVALID_SCALE, "init_scale must be finite and > 0, got {init_scale}");
    }
    if !positive_f32(init_scale) {
        crate::bail!(E_AMP_INVALID_SCALE, "init_scale {init_scale} is not a finite, non-zero float32 (the scale is kept in float32, as PyTorch keeps it)");
    }
    if !(growth.is_finite() && growth > 1.0) {
        crate::bail!(E_AMP_INVALID_GROWTH_FACTOR, "growth_factor must be finite and > 1.0, got {growth}");
    }
    if !(backoff > 0.0 && backoff < 1.0) {
        crate::bail!(E_AMP_INVALID_BACKOFF_FACTOR, "backoff_factor must be in (0, 1), got {backoff}");
    }
    if interval < 1 {
        crate::bail!(E_AMP_INVALID_GROWTH_INTERVAL, "growth_interval must be >= 1, got {interval}");
    }
    Ok(Scaler { init_scale, growth, backoff, interval, state: Mutex::new(ScaleState { tensors: None, unscaled: None }) })
}

pub fn scaler_create(init_scale: f64, growth: f64, backoff: f64, interval: i64) -> Result<i64> {
    SCALERS.insert(validated(init_scale, growth, backoff, interval)?)
}

fn with_state<R>(scaler: i64, f: impl FnOnce(&Scaler, &mut ScaleState) -> Result<R>) -> Result<R> {
    let s = SCALERS.get(scaler)?;
    let mut st = s.state.lock().unwrap_or_else(|p| p.into_inner());
    f(&s, &mut st)
}

/// The scale tensors, created on backend `b` and device `dev` when first
/// needed (PyTorch's lazy init, on the device of the first tensors it sees).
fn tensors<'a>(s: &Scaler, st: &'a mut ScaleState, b: BackendId, dev: Device) -> Result<&'a (Raw, Raw)> {
    if st.tensors.is_none() {
        st.tensors = Some(imp::scaler_state(b, s.init_scale, 0, dev)?);
    }
    Ok(st.tensors.as_ref().expect("just set"))
}

pub fn scale_loss(loss: i64, scaler: i64) -> Result<i64> {
    let l = tensor::get(loss)?;
    with_state(scaler, |s, st| {
        let (scale, _) = tensors(s, st, l.backend, imp::device(&l.raw))?;
        tensor::register(l.backend, imp::scale_by(&l.raw, scale)?)
    })
}

/// Unscales the listed grads in place; returns whether any was non-finite.
/// Finding an inf is a result, not an error.
pub fn unscale_grads(grads: &str, scaler: i64) -> Result<bool> {
    let hs: Vec<i64> = json::handle_list(grads)?.into_iter().filter(|h| *h != 0).collect();
    let ts = TENSORS.get_many(&hs)?;
    with_state(scaler, |s, st| {
        if st.unscaled.is_some() {
            crate::bail!(E_AMP_STATE, "unscale_grads() has already been called since the last update()");
        }
        let raws: Vec<&Raw> = ts.iter().map(|t| &t.raw).collect();
        let (b, dev) = raws.first().map_or((backend::active(), Device::Cpu), |r| (r.backend(), imp::device(r)));
        let (scale, _) = tensors(s, st, b, dev)?;
        let found = imp::unscale(&raws, scale)?;
        st.unscaled = Some(found);
        Ok(found)
    })
}

/// Backoff on inf (tracker reset), growth after `interval` clean steps.
pub fn update(scaler: i64, found_inf: bool) -> Result<()> {
    with_state(scaler, |s, st| {
        let found = found_inf || st.unscaled.unwrap_or(false);
        let (scale, tracker) = tensors(s, st, backend::active(), Device::Cpu)?;
        imp::update_scale(scale, tracker, found, s.growth, s.backoff, s.interval)?;
        st.unscaled = None;
        Ok(())
    })
}

pub fn get_scale(scaler: i64) -> Result<f64> {
    with_state(scaler, |s, st| match &st.tensors {
        Some((scale, _)) => imp::scalar_value(scale),
        None => Ok(s.init_scale),
    })
}

/// scale → backward → unscale → AdamW step unless inf → update.
/// Returns true when the step was skipped.
pub fn step(loss: i64, scaler: i64, params: &str, opt: i64) -> Result<bool> {
    crate::registry::OPTIMIZERS.get(opt)?;
    let scaled = scale_loss(loss, scaler)?;
    let backward = autograd::backward(scaled);
    let _ = TENSORS.release(scaled);
    backward?;
    let grads = autograd::grad_multi(params)?;
    let list = json::write_int_list(&grads);
    let found = unscale_grads(&list, scaler);
    grads.iter().filter(|g| **g != 0).for_each(|g| drop(TENSORS.release(*g)));
    let found = found?;
    if !found {
        optim::step(opt)?;
    }
    update(scaler, found)?;
    Ok(found)
}

thread_local! {
    /// Autocast states to restore, one entry per open region on this thread:
    /// libtorch's (CPU, CUDA) and the native backend's.
    static REGIONS: RefCell<Vec<([AutocastState; 2], Option<DType>)>> = const { RefCell::new(Vec::new()) };
}

const DEVICES: [Device; 2] = [Device::Cpu, Device::Cuda(0)];

fn enter_with(policy: &[(Device, DType)]) -> Result<()> {
    crate::backend::active_built()?;
    let saved = (DEVICES.map(imp::autocast_get), imp::native_autocast());
    for &(dev, dt) in policy {
        imp::autocast_set(dev, AutocastState { enabled: true, dtype: imp::autocast_dtype_code(dt) })?;
        if dev == Device::Cpu {
            imp::set_native_autocast(Some(dt));
        }
    }
    imp::autocast_nesting(true);
    REGIONS.with(|r| r.borrow_mut().push(saved));
    Ok(())
}

/// This thread's autocast settings on every device, as a region saves them.
#[derive(Clone, Copy)]
pub(crate) struct AutocastSnapshot([AutocastState; 2], Option<DType>);

impl AutocastSnapshot {
    pub(crate) fn now() -> AutocastSnapshot {
        AutocastSnapshot(DEVICES.map(imp::autocast_get), imp::native_autocast())
    }

    /// Puts these settings in force; returns the ones they replace.
    pub(crate) fn apply(self) -> Result<AutocastSnapshot> {
        let before = AutocastSnapshot::now();
        imp::set_native_autocast(self.1);
        for (dev, s) in DEVICES.into_iter().zip(self.0) {
            imp::autocast_set(dev, s)?;
        }
        Ok(before)
    }
}

/// bf16 autocast on the CPU and fp16 on CUDA, for this thread, until `exit`.
pub fn enter() -> Result<()> {
    enter_with(&[(Device::Cpu, DType::BF16), (Device::Cuda(0), DType::F16)])
}

/// Autocast for the device type of `dev` only, with `dtype` (fp16 or bf16).
pub fn enter_device(dev: i64, dtype: &str) -> Result<()> {
    let d = tensor::device(dev)?;
    let dt = DType::parse(dtype)?;
    if !matches!(dt, DType::F16 | DType::BF16) {
        crate::bail!(E_DTYPE, "autocast runs in fp16 or bf16, not {}", dt.name());
    }
    enter_with(&[(d, dt)])
}

pub fn exit() -> Result<()> {
    let saved = REGIONS.with(|r| r.borrow_mut().pop());
    let Some(saved) = saved else {
        crate::bail!(E_AMP_STATE, "autocast_exit without a matching autocast_enter on this thread");
    };
    imp::autocast_nesting(false);
    imp::set_native_autocast(saved.1);
    for (dev, s) in DEVICES.into_iter().zip(saved.0) {
        imp::autocast_set(dev, s)?;
    }
    Ok(())
}

/// A scaler's settings and state, as a checkpoint stores them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerExport {
    pub scale: f64,
    pub growth_tracker: i64,
    pub init_scale: f64,
    pub growth: f64,
    pub backoff: f64,
    pub interval: i64,
}

pub fn scaler_export(scaler: i64) -> Result<ScalerExport> {
    with_state(scaler, |s, st| {
        let (scale, growth_tracker) = match &st.tensors {
            Some((scale, tracker)) => (imp::scalar_value(scale)?, imp::scalar_value(tracker)? as i64),
            None => (s.init_scale, 0),
        };
        Ok(ScalerExport { scale, growth_tracker, init_scale: s.init_scale, growth: s.growth, backoff: s.backoff, interval: s.interval })
    })
}

pub fn scaler_import(x: ScalerExport) -> Result<i64> {
    let mut s = validated(x.init_scale, x.growth, x.backoff, x.interval)?;
    if !positive_f32(x.scale) {
        crate::bail!(E_CKPT_FORMAT, "scaler.json: scale {} is not a finite, positive float32", x.scale);
    }
    if i32::try_from(x.growth_tracker).map_or(true, |t| t < 0) {
        crate::bail!(E_CKPT_FORMAT, "scaler.json: growth_tracker {} is not a non-negative int32", x.growth_tracker);
    }
    // The state is built before the handle exists: a failing import creates nothing.
    s.state.get_mut().unwrap_or_else(|p| p.into_inner()).tensors = Some(imp::scaler_state(backend::active(), x.scale, x.growth_tracker, Device::Cpu)?);
    SCALERS.insert(s)
}
