//! Device specifications: `cpu`, `cuda`, `cuda:N`, `auto`.

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(u32),
}

/// A parsed but not yet resolved device name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    Exact(Device),
    /// `cuda:0` when CUDA is usable, else `cpu`.
    Auto,
}

impl DeviceSpec {
    pub fn parse(spec: &str) -> Result<DeviceSpec> {
        let bad = || crate::err!(E_INVALID_ARG, "unknown device {spec:?} (expected cpu, cuda, cuda:N or auto)");
        Ok(match spec {
            "cpu" => DeviceSpec::Exact(Device::Cpu),
            "cuda" => DeviceSpec::Exact(Device::Cuda(0)),
            "auto" => DeviceSpec::Auto,
            _ => {
                let n = spec.strip_prefix("cuda:").ok_or_else(bad)?;
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
                    return Err(bad());
                }
                DeviceSpec::Exact(Device::Cuda(n.parse().map_err(|_| bad())?))
            }
        })
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}
