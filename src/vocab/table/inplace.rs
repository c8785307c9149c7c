//! In-place forms (`add_`, `copy_`, ...), as PyTorch's Tensor methods: the
//! result is written into `self` (through its views) and returned as a new
//! handle on it. Core checks what PyTorch's in-place rule adds to the
//! out-of-place op's: the result keeps `self`'s shape (an input may not
//! broadcast it larger) and casts to `self`'s dtype under `torch.can_cast`.
//! Autograd rebases `self`'s history, and a tensor that a recorded backward
//! saved and an in-place op then overwrote makes that backward `E_AUTOGRAD`.
//! The cases are the out-of-place rows' where those apply.

use super::Accept::*;
use super::Out::*;
use super::{other, pointwise, Row};

pub static ROWS: &[Row] = &[
    pointwise("add_", &["add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", "add_.Scalar(Tensor(a!) self, Scalar other, Scalar alpha=1) -> Tensor(a!)"], All, Same, true),
    pointwise("sub_", &["sub_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)", "sub_.Scalar(Tensor(a!) self, Scalar other, Scalar alpha=1) -> Tensor(a!)"], All, Same, true),
    pointwise("mul_", &["mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)", "mul_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)"], All, Same, true),
    pointwise("div_", &[
        "div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
        "div_.Scalar(Tensor(a!) self, Scalar other) -> Tensor(a!)",
        "div_.Tensor_mode(Tensor(a!) self, Tensor other, *, str? rounding_mode) -> Tensor(a!)",
        "div_.Scalar_mode(Tensor(a!) self, Scalar other, *, str? rounding_mode) -> Tensor(a!)",
    ], All, ToFloat, true),
    pointwise("clamp_", &[
        "clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)",
        "clamp_.Tensor(Tensor(a!) self, Tensor? min=None, Tensor? max=None) -> Tensor(a!)",
    ], Num, Same, true),
    other("masked_fill_", &[
        "masked_fill_.Scalar(Tensor(a!) self, Tensor mask, Scalar value) -> Tensor(a!)",
        "masked_fill_.Tensor(Tensor(a!) self, Tensor mask, Tensor value) -> Tensor(a!)",
    ], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "bool"}], "kwargs": {"value": -1.5}}"#,
        r#"{"inputs": [[3, 4], {"shape": [4], "dtype": "bool"}], "kwargs": {"value": 2}}"#,
        r#"{"inputs": [[4], {"shape": [3, 4], "dtype": "bool"}], "kwargs": {"value": 2}}"#,
        r#"{"inputs": [[3, 4], {"shape": [4], "dtype": "bool"}, []]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "bool"}, [1]]}"#,
    ]),
    other("index_put_", &["index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [{"shape": [1], "dtype": "int64", "range": [-3, 3]}], [4]]}"#,
        r#"{"inputs": [[3, 4], [{"shape": [2], "dtype": "int64", "range": [0, 3]}, {"shape": [2], "dtype": "int32", "range": [-4, 4]}], []], "kwargs": {"accumulate": true}}"#,
        r#"{"inputs": [[2, 3, 4], [null, {"shape": [3, 1], "dtype": "int64", "range": [0, 3]}], [3, 1, 4]], "kwargs": {"accumulate": true}}"#,
        r#"{"inputs": [[3, 4], [{"shape": [3, 4], "dtype": "bool"}], []]}"#,
        r#"{"inputs": [[3, 4], [{"shape": [2], "dtype": "int64", "range": [3, 5]}], [4]]}"#,
    ]),
    other("fill_", &["fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)", "fill_.Tensor(Tensor(a!) self, Tensor value) -> Tensor(a!)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"value": -2.5}}"#,
        r#"{"inputs": [[]], "kwargs": {"value": 3}}"#,
        r#"{"inputs": [[0, 3]], "kwargs": {"value": true}}"#,
        r#"{"inputs": [[3, 4], []]}"#,
        r#"{"inputs": [[3, 4], [1]]}"#,
    ]),
    other("zero_", &["zero_(Tensor(a!) self) -> Tensor(a!)"], All, Kernel, true, &[r#"{"inputs": [[3, 4]]}"#, r#"{"inputs": [[]]}"#]),
    other("copy_", &["copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [3, 4]]}"#,
        r#"{"inputs": [[3, 4], [4]]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 1], "dtype": "int64", "range": [-5, 5]}]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "bool"}]}"#,
        r#"{"inputs": [[4], [3, 4]]}"#,
    ]),
];
