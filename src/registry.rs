//! The process-wide handle registries, one per kind.

use std::convert::Infallible;

use crate::backend::Tensor;
use crate::device::Device;
use crate::handles::{HandleKind, Registry};

pub static TENSORS: Registry<Tensor> = Registry::new(HandleKind::Tensor);
pub static DEVICES: Registry<Device> = Registry::new(HandleKind::Device);
// Optimizers and scalers get their state types with the training issue; until
// then no function creates one, so these registries stay empty.
pub static OPTIMIZERS: Registry<Infallible> = Registry::new(HandleKind::Optimizer);
pub static SCALERS: Registry<Infallible> = Registry::new(HandleKind::Scaler);
