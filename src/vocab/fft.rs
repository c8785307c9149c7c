//! `torch.fft`'s arguments, checked once for both backends: the dtype (no
//! half types: PyTorch's CPU FFTs have none; `rfft` takes real inputs
//! only), the signal length `n` and the `norm` mode, with PyTorch's words.

use super::{Call, In};
use crate::dtype::DType;
use crate::error::Result;

/// The scale of a transform of length `n` in direction `inverse` under
/// `norm` (None is "backward": the forward transform unscaled, the inverse
/// by 1/n).
pub fn scale(norm: Option<&str>, n: i64, inverse: bool) -> f64 {
    match (norm.unwrap_or("backward"), inverse) {
        ("ortho", _) => 1.0 / (n as f64).sqrt(),
        ("backward", true) | ("forward", false) => 1.0 / n as f64,
        _ => 1.0,
    }
}

/// The output length of a transform: `n`, or PyTorch's default (the input
/// length along `dim`, and 2·(m − 1) for `irfft`).
pub fn length(call: &Call, m: i64) -> i64 {
    match call.int("n") {
        Some(n) => n,
        None if call.op.name() == "fft.irfft" => 2 * (m - 1),
        None => m,
    }
}

pub fn check(call: &Call, ins: &[In]) -> Result<()> {
    let op = call.op.name();
    let Some(Some((shape, dt))) = ins.first() else { return Ok(()) };
    if matches!(dt, DType::F16 | DType::BF16) {
        crate::bail!(E_DTYPE, "{op}: Unsupported dtype {} (the CPU FFTs take fp32, fp64 and complex)", dt.name());
    }
    if op == "fft.rfft" && dt.is_complex() {
        crate::bail!(E_DTYPE, "{op}: rfft expects a real input tensor, but got {}", dt.name());
    }
    if shape.is_empty() {
        crate::bail!(E_SHAPE, "{op}: Dimension specified as -1 but tensor has no dimensions");
    }
    if let Some(norm) = call.str("norm") {
        if !matches!(norm, "backward" | "forward" | "ortho") {
            crate::bail!(E_INVALID_ARG, "{op}: Invalid normalization mode: \"{norm}\"");
        }
    }
    let d = super::norm_dim(op, call.int("dim").unwrap_or(-1), shape)?;
    let m = shape[d as usize];
    let n = length(call, m);
    if n < 1 {
        crate::bail!(E_INVALID_ARG, "{op}: Invalid number of data points ({n}) specified");
    }
    Ok(())
}
