//! Elementwise ops of several operands: arithmetic, powers, comparisons,
//! logic, clamps and interpolation. Numbers may stand for tensors where
//! PyTorch has a Scalar overload; they take part in type promotion.

use super::Accept::*;
use super::Out::*;
use super::{c_binary, pointwise, Row};

pub static ROWS: &[Row] = &[
    pointwise("add", &["add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"], All, Same, true)
        .with_c(&[c_binary("enkai_tensor_add", "add.Tensor", "`a + b` with broadcasting and PyTorch's type promotion (`torch.add`).\nErrors: `E_SHAPE` (the shapes do not broadcast).")]).complex(),
    pointwise("sub", &["sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", "sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor"], All, Same, true)
        .with_c(&[c_binary("enkai_tensor_sub", "sub.Tensor", "`a - b` with broadcasting and type promotion (`torch.sub`).\nErrors: `E_SHAPE`, `E_DTYPE` (a bool operand, as in PyTorch).")]).complex(),
    pointwise("mul", &["mul.Tensor(Tensor self, Tensor other) -> Tensor", "mul.Scalar(Tensor self, Scalar other) -> Tensor"], All, Same, true)
        .with_c(&[c_binary("enkai_tensor_mul", "mul.Tensor", "`a * b` (elementwise) with broadcasting and type promotion (`torch.mul`).\nErrors: `E_SHAPE`.")]).complex(),
    pointwise("div", &[
        "div.Tensor(Tensor self, Tensor other) -> Tensor",
        "div.Scalar(Tensor self, Scalar other) -> Tensor",
        "div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
        "div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> Tensor",
    ], All, ToFloat, true)
        .with_c(&[c_binary("enkai_tensor_div", "div.Tensor", "`a / b` (true division: integers divide as fp32) with broadcasting (`torch.div`).\nErrors: `E_SHAPE`.")]).complex(),
    pointwise("pow", &[
        "pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor",
        "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
        "pow.Scalar(Scalar self, Tensor exponent) -> Tensor",
    ], Num, Same, true),
    pointwise("atan2", &["atan2(Tensor self, Tensor other) -> Tensor"], All, ToFloat, true),
    pointwise("maximum", &["maximum(Tensor self, Tensor other) -> Tensor"], All, Same, true),
    pointwise("minimum", &["minimum(Tensor self, Tensor other) -> Tensor"], All, Same, true),
    pointwise("fmod", &["fmod.Tensor(Tensor self, Tensor other) -> Tensor", "fmod.Scalar(Tensor self, Scalar other) -> Tensor"], Num, Same, true),
    pointwise("remainder", &[
        "remainder.Tensor(Tensor self, Tensor other) -> Tensor",
        "remainder.Scalar(Tensor self, Scalar other) -> Tensor",
        "remainder.Scalar_Tensor(Scalar self, Tensor other) -> Tensor",
    ], Num, Same, true),
    pointwise("lerp", &["lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor", "lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor"], Float, Same, true),
    pointwise("addcmul", &["addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"], Num, Same, true),
    pointwise("addcdiv", &["addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor"], Num, Same, true),
    pointwise("clamp", &[
        "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
        "clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor",
    ], Num, Same, true),
    pointwise("eq", &["eq.Tensor(Tensor self, Tensor other) -> Tensor", "eq.Scalar(Tensor self, Scalar other) -> Tensor"], All, Bool, false),
    pointwise("ne", &["ne.Tensor(Tensor self, Tensor other) -> Tensor", "ne.Scalar(Tensor self, Scalar other) -> Tensor"], All, Bool, false),
    pointwise("lt", &["lt.Tensor(Tensor self, Tensor other) -> Tensor", "lt.Scalar(Tensor self, Scalar other) -> Tensor"], All, Bool, false),
    pointwise("le", &["le.Tensor(Tensor self, Tensor other) -> Tensor", "le.Scalar(Tensor self, Scalar other) -> Tensor"], All, Bool, false),
    pointwise("gt", &["gt.Tensor(Tensor self, Tensor other) -> Tensor", "gt.Scalar(Tensor self, Scalar other) -> Tensor"], All, Bool, false),
    pointwise("ge", &["ge.Tensor(Tensor self, Tensor other) -> Tensor", "ge.Scalar(Tensor self, Scalar other) -> Tensor"], All, Bool, false),
    pointwise("logical_and", &["logical_and(Tensor self, Tensor other) -> Tensor"], All, Bool, false),
    pointwise("logical_or", &["logical_or(Tensor self, Tensor other) -> Tensor"], All, Bool, false),
    pointwise("logical_xor", &["logical_xor(Tensor self, Tensor other) -> Tensor"], All, Bool, false),
];
