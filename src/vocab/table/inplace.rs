//! In-place forms (`add_`, `copy_`, ...), as PyTorch's Tensor methods: the
//! result is written into `self` (through its views) and returned as a new
//! handle on it. Core checks what PyTorch's in-place rule adds to the
//! out-of-place op's: the result keeps `self`'s shape (an input may not
//! broadcast it larger) and casts to `self`'s dtype under `torch.can_cast`.
//! Autograd rebases `self`'s history, and a tensor that a recorded backward
//! saved and an in-place op then overwrote makes that backward `E_AUTOGRAD`.
//! The forms with an out-of-place twin (`add_` of `add`) are derived from
//! it: its overloads, dtype rule, kind and cases; the rows below are the
//! forms without one.

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
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

/// The in-place forms of out-of-place rows, as PyTorch declares them: each
/// with the cases it adds to its twin's (where only the in-place rule differs).
pub static FORMS: &[(&str, &[&str])] = &[
    ("add_", &[]),
    ("sub_", &[]),
    ("mul_", &[]),
    ("div_", &[]),
    ("clamp_", &[]),
    ("masked_fill_", &[r#"{"inputs": [[3, 4], {"shape": [4], "dtype": "bool"}], "kwargs": {"value": 2}}"#]),
    ("index_put_", &[]),
    ("index_copy_", &[]),
];

/// The row of the in-place form `name` of `twin`: every overload of the twin
/// with `self` and the result `Tensor(a!)` (`add_.Tensor(Tensor(a!) self, ...)
/// -> Tensor(a!)`), the twin's cases and then `extra`.
pub fn derive(name: &'static str, extra: &'static [&'static str], twin: &Row) -> Row {
    let sigs: Vec<&'static str> = twin
        .sigs
        .iter()
        .map(|s| {
            let body = s.strip_prefix(twin.name).and_then(|b| b.strip_suffix(" -> Tensor")).unwrap_or_else(|| panic!("{s}: not one tensor's op"));
            &*String::leak(format!("{name}{} -> Tensor(a!)", body.replacen("(Tensor self", "(Tensor(a!) self", 1)))
        })
        .collect();
    let cases: Vec<&'static str> = twin.cases.iter().chain(extra).copied().collect();
    Row { name, sigs: Vec::leak(sigs), cases: Vec::leak(cases), c: &[], ..*twin }
}
