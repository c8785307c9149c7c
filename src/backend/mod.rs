//! The compute backends behind the ABI. Only `backend/torch/` names `tch`;
//! everything else talks to the backend through the functions re-exported here
//! as `imp`, which are the torch ones or, in a build without the `torch`
//! feature, ones that report `E_BACKEND_UNAVAILABLE`.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::device::Device;
use crate::error::Result;

#[cfg(feature = "torch")]
pub mod torch;
#[cfg(feature = "torch")]
pub use self::torch as imp;

#[cfg(not(feature = "torch"))]
pub mod none;
#[cfg(not(feature = "torch"))]
pub use self::none as imp;

/// Which backend created a tensor. `Cpu` is libtorch restricted to the CPU
/// until the native CPU backend lands.
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
        imp::BUILT
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

static ACTIVE: AtomicU8 = AtomicU8::new(BackendId::Torch as u8);

pub fn active() -> BackendId {
    match ACTIVE.load(Ordering::Relaxed) {
        1 => BackendId::Cpu,
        _ => BackendId::Torch,
    }
}

/// Makes `id` the backend that creates new tensors (process-wide).
pub fn set_active(id: BackendId) -> Result<()> {
    if !id.is_built() {
        crate::bail!(E_BACKEND_UNAVAILABLE, "backend {:?} is not built in (built without the torch feature)", id.name());
    }
    ACTIVE.store(id as u8, Ordering::Relaxed);
    Ok(())
}

/// Names of the backends this build contains.
pub fn built() -> Vec<&'static str> {
    [BackendId::Torch, BackendId::Cpu].into_iter().filter(|b| b.is_built()).map(BackendId::name).collect()
}

/// The active backend, failing in a build that has none.
pub fn active_built() -> Result<BackendId> {
    let id = active();
    if !id.is_built() {
        return Err(imp::unavailable());
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
