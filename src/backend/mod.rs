//! The compute backends behind the ABI: libtorch (`torch/`, the only code
//! naming `tch`, absent without the `torch` feature) and the native Rust CPU
//! backend (`native/`, always built). Both implement the traits of
//! `contract`; everything else talks to them through `imp` (`dispatch.rs`),
//! whose `Raw` is a tensor of either.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::device::Device;
use crate::error::Result;

pub mod contract;
pub mod dispatch;
pub mod native;
#[cfg(not(feature = "torch"))]
mod none;
#[cfg(feature = "torch")]
pub mod torch;

pub use self::dispatch as imp;

/// Which backend created a tensor: libtorch, or the native CPU backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum BackendId {
    Torch = 0,
    Cpu = 1,
}

impl BackendId {
    pub fn name(self) -> &'static str {
        match self {
            BackendId::Torch => "torch",
            BackendId::Cpu => "cpu",
        }
    }

    pub fn parse(name: &str) -> Result<BackendId> {
        match name {
            "torch" => Ok(BackendId::Torch),
            "cpu" => Ok(BackendId::Cpu),
            _ => crate::bail!(E_BACKEND_UNKNOWN, "unknown backend {name:?} (known: torch, cpu)"),
        }
    }

    /// Whether this build contains the backend.
    pub fn is_built(self) -> bool {
        match self {
            BackendId::Torch => cfg!(feature = "torch"),
            BackendId::Cpu => true,
        }
    }

    /// Fails with `E_BACKEND_UNAVAILABLE` unless this build contains the backend.
    pub fn require_built(self) -> Result<()> {
        if !self.is_built() {
            crate::bail!(E_BACKEND_UNAVAILABLE, "backend {:?} is not built in (built without the torch feature)", self.name());
        }
        Ok(())
    }

    /// Fails unless `dev` is a device this backend computes on.
    pub fn check_device(self, dev: Device) -> Result<()> {
        match (self, dev) {
            (BackendId::Cpu, Device::Cuda(_)) => {
                crate::bail!(E_DEVICE, "the cpu backend has no {dev} device (switch to the torch backend)")
            }
            _ => Ok(()),
        }
    }
}

/// `UNSET` until the first question, which reads `ENKAI_BACKEND`.
const UNSET: u8 = u8::MAX;
static ACTIVE: AtomicU8 = AtomicU8::new(UNSET);

/// `ENKAI_BACKEND`, read once: `None` when unset, `Err(text)` when it names no backend.
fn env_backend() -> &'static Option<std::result::Result<BackendId, String>> {
    static ENV: std::sync::OnceLock<Option<std::result::Result<BackendId, String>>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let v = std::env::var("ENKAI_BACKEND").ok()?;
        Some(BackendId::parse(v.trim()).map_err(|_| v))
    })
}

/// The default: `ENKAI_BACKEND` when it names a backend, else torch when built in, else cpu.
fn default_backend() -> BackendId {
    match env_backend() {
        Some(Ok(b)) => *b,
        _ if BackendId::Torch.is_built() => BackendId::Torch,
        _ => BackendId::Cpu,
    }
}

pub fn active() -> BackendId {
    let v = match ACTIVE.load(Ordering::Relaxed) {
        UNSET => {
            let d = default_backend() as u8;
            // A concurrent `set_active` wins over the environment.
            match ACTIVE.compare_exchange(UNSET, d, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => d,
                Err(now) => now,
            }
        }
        v => v,
    };
    if v == BackendId::Cpu as u8 {
        BackendId::Cpu
    } else {
        BackendId::Torch
    }
}

/// Makes `id` the backend that creates new tensors (process-wide).
pub fn set_active(id: BackendId) -> Result<()> {
    id.require_built()?;
    ACTIVE.store(id as u8, Ordering::Relaxed);
    EXPLICIT.store(true, Ordering::Relaxed);
    Ok(())
}

/// A bad `ENKAI_BACKEND` is an error at the first call that needs a backend,
/// naming the variable, rather than a silent fallback.
fn check_env() -> Result<()> {
    match env_backend() {
        Some(Err(v)) if !EXPLICIT.load(Ordering::Relaxed) => {
            crate::bail!(E_BACKEND_UNKNOWN, "ENKAI_BACKEND={v:?} names no backend (known: torch, cpu)")
        }
        _ => Ok(()),
    }
}

/// Whether `enkai_backend_set` was called (it overrides a bad environment).
static EXPLICIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Names of the backends this build contains.
pub fn built() -> Vec<&'static str> {
    [BackendId::Torch, BackendId::Cpu].into_iter().filter(|b| b.is_built()).map(BackendId::name).collect()
}

/// The active backend, failing when the environment named one not built in
/// (or none at all).
pub fn active_built() -> Result<BackendId> {
    check_env()?;
    let id = active();
    if !id.is_built() {
        crate::bail!(E_BACKEND_UNAVAILABLE, "ENKAI_BACKEND={:?}: that backend is not built in (built without the torch feature)", id.name());
    }
    Ok(id)
}

/// A tensor owned by a handle: the backend's value and which backend made it.
pub struct Tensor {
    pub backend: BackendId,
    pub raw: imp::Raw,
}

/// Fails with `E_BACKEND_MISMATCH` unless all tensors come from one backend.
pub fn same_backend(op: &str, ts: &[&Tensor]) -> Result<BackendId> {
    let first = ts.first().map_or(active(), |t| t.backend);
    if let Some(t) = ts.iter().find(|t| t.backend != first) {
        crate::bail!(E_BACKEND_MISMATCH, "{op}: inputs come from the {} and {} backends", first.name(), t.backend.name());
    }
    Ok(first)
}

/// How a new tensor's elements are initialised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Randn,
    Zeros,
    Ones,
    Full(f64),
}

/// A backend tensor's storage as DLPack exports it: `data` already includes
/// the storage offset; `keep` holds the storage alive.
pub struct ExportView<R> {
    pub data: *mut std::ffi::c_void,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
    pub device: Device,
    pub keep: R,
}
