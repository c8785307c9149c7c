//! The op table's complex-number section: the ops only complex tensors have
//! (complex64, complex128). Arithmetic, math, reductions, products and shape
//! ops that also take complex tensors are marked `.complex()` in their own
//! sections. Their oracle is `python/tests/test_complex.py`.

use super::Accept::*;
use super::Domain;
use super::Out::*;
use super::{other, Row};

const fn own(r: Row) -> Row {
    Row { domain: Domain::Own, ..r }.complex()
}

// Cases on real inputs (the generic suites' dtypes): shapes, result dtypes and refusals against PyTorch.
const A: &str = r#"{"inputs": [[3, 4]]}"#;
const SCALAR: &str = r#"{"inputs": [[]]}"#;
const PAIRS: &str = r#"{"inputs": [[3, 2]]}"#;
const PAIRS3: &str = r#"{"inputs": [[2, 3, 2]]}"#;
const TWO: &str = r#"{"inputs": [[3, 4], [3, 4]]}"#;
const BROADCAST: &str = r#"{"inputs": [[2, 1], [3]]}"#;

pub static ROWS: &[Row] = &[
    own(other("real", &["real(Tensor(a) self) -> Tensor(a)"], All, Kernel, true, &[A, SCALAR])),
    own(other("imag", &["imag(Tensor(a) self) -> Tensor(a)"], All, Kernel, true, &[A])),
    own(other("view_as_real", &["view_as_real(Tensor(a) self) -> Tensor(a)"], All, Kernel, true, &[A])),
    own(other("view_as_complex", &["view_as_complex(Tensor(a) self) -> Tensor(a)"], Float, Kernel, true, &[PAIRS, PAIRS3, A])),
    // Materialized, as the README says: libtorch's `conj` is a lazy view, `conj_physical` its value.
    own(other("conj", &["conj_physical(Tensor self) -> Tensor"], All, Kernel, true, &[A, SCALAR])),
    own(other("angle", &["angle(Tensor self) -> Tensor"], All, Kernel, true, &[A, SCALAR])),
    own(other("polar", &["polar(Tensor abs, Tensor angle) -> Tensor"], Float, Kernel, true, &[TWO, BROADCAST])),
    own(other("complex", &["complex(Tensor real, Tensor imag) -> Tensor"], Float, Kernel, true, &[TWO, BROADCAST])),
];
