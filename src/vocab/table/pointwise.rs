//! Elementwise ops of one tensor (and its numeric arguments).

use super::Accept::*;
use super::Domain::*;
use super::Out::*;
use super::{c_unary, unary, Row};

pub static ROWS: &[Row] = &[
    // ------------------------------------------------------ elementwise math
    unary("exp", &["exp(Tensor self) -> Tensor"], All, ToFloat, true, Any).complex(),
    unary("exp2", &["exp2(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("expm1", &["expm1(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("log", &["log(Tensor self) -> Tensor"], All, ToFloat, true, Pos).complex(),
    unary("log2", &["log2(Tensor self) -> Tensor"], All, ToFloat, true, Pos),
    unary("log10", &["log10(Tensor self) -> Tensor"], All, ToFloat, true, Pos),
    unary("log1p", &["log1p(Tensor self) -> Tensor"], All, ToFloat, true, Pos),
    unary("sqrt", &["sqrt(Tensor self) -> Tensor"], All, ToFloat, true, Pos).complex(),
    unary("rsqrt", &["rsqrt(Tensor self) -> Tensor"], All, ToFloat, true, Pos),
    unary("reciprocal", &["reciprocal(Tensor self) -> Tensor"], All, ToFloat, true, Pos),
    unary("sin", &["sin(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("cos", &["cos(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("tan", &["tan(Tensor self) -> Tensor"], All, ToFloat, true, Unit),
    unary("asin", &["asin(Tensor self) -> Tensor"], All, ToFloat, true, Unit),
    unary("acos", &["acos(Tensor self) -> Tensor"], All, ToFloat, true, Unit),
    unary("atan", &["atan(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("sinh", &["sinh(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("cosh", &["cosh(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("erf", &["erf(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("erfc", &["erfc(Tensor self) -> Tensor"], All, ToFloat, true, Any),
    unary("sigmoid", &["sigmoid(Tensor self) -> Tensor"], All, ToFloat, true, Any)
        .with_c(&[c_unary("enkai_tensor_sigmoid", "sigmoid", "`torch.sigmoid(x)`; integer and bool inputs give fp32, as in PyTorch.")]),
    unary("tanh", &["tanh(Tensor self) -> Tensor"], All, ToFloat, true, Any)
        .with_c(&[c_unary("enkai_tensor_tanh", "tanh", "`torch.tanh(x)`; integer and bool inputs give fp32, as in PyTorch.")]),
    unary("abs", &["abs(Tensor self) -> Tensor"], Num, Real, true, Any).complex(),
    unary("neg", &["neg(Tensor self) -> Tensor"], Num, Same, true, Any).complex(),
    unary("sign", &["sign(Tensor self) -> Tensor"], All, Same, true, Any),
    unary("square", &["square(Tensor self) -> Tensor"], All, Same, true, Any),
    unary("floor", &["floor(Tensor self) -> Tensor"], Num, Same, true, Any),
    unary("ceil", &["ceil(Tensor self) -> Tensor"], Num, Same, true, Any),
    unary("round", &["round(Tensor self) -> Tensor", "round.decimals(Tensor self, *, int decimals) -> Tensor"], Num, Same, true, Any),
    unary("trunc", &["trunc(Tensor self) -> Tensor"], Num, Same, true, Any),
    unary("frac", &["frac(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("relu", &["relu(Tensor self) -> Tensor"], Num, Same, true, Any)
        .with_c(&[c_unary("enkai_tensor_relu", "relu", "`torch.relu(x)`, in `x`'s dtype.\nErrors: `E_DTYPE` (bool, as in PyTorch).")]),
    unary("silu", &["silu(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("mish", &["mish(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("log_sigmoid", &["log_sigmoid(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("softplus", &["softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor"], Float, Same, true, Any),
    unary("hardtanh", &["hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor"], Num, Same, true, Any),
    unary("leaky_relu", &["leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor"], Float, Same, true, Any),
    unary("elu", &["elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor"], Float, Same, true, Any),
    unary("gelu", &["gelu(Tensor self, *, str approximate=\"none\") -> Tensor"], Float, Same, true, Any)
        .with_c(&[c_unary("enkai_tensor_gelu", "gelu", "`torch.nn.functional.gelu(x)` with the exact erf form.\nErrors: `E_DTYPE` (not floating).")]),
    unary("hardsigmoid", &["hardsigmoid(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("hardswish", &["hardswish(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("selu", &["selu(Tensor self) -> Tensor"], Float, Same, true, Any),
    unary("celu", &["celu(Tensor self, Scalar alpha=1.0) -> Tensor"], Float, Same, true, Any),
    unary("isnan", &["isnan(Tensor self) -> Tensor"], All, Bool, false, Any),
    unary("isinf", &["isinf(Tensor self) -> Tensor"], All, Bool, false, Any),
    unary("isfinite", &["isfinite(Tensor self) -> Tensor"], All, Bool, false, Any),
    unary("logical_not", &["logical_not(Tensor self) -> Tensor"], All, Bool, false, Any),
];
