//! The process-wide handle registries, one per kind.

use crate::amp::Scaler;
use crate::backend::Tensor;
use crate::device::Device;
use crate::handles::{HandleKind, Registry};
use crate::optim::Optimizer;
use crate::quant::QTensor;
use crate::safetensors::file::SafeFile;

pub static TENSORS: Registry<Tensor> = Registry::new(HandleKind::Tensor);
pub static DEVICES: Registry<Device> = Registry::new(HandleKind::Device);
pub static OPTIMIZERS: Registry<Optimizer> = Registry::new(HandleKind::Optimizer);
pub static SCALERS: Registry<Scaler> = Registry::new(HandleKind::Scaler);
pub static SAFETENSORS: Registry<SafeFile> = Registry::new(HandleKind::Safetensors);
pub static QUANTIZED: Registry<QTensor> = Registry::new(HandleKind::Quantized);
