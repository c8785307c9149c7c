//! The op table's create section (see `super`): factories (no tensor
//! input: core runs them on the active backend) and random sampling. The
//! random rows have no oracle values (`Own`): `python/tests/test_op_random.py`
//! tests their distributions, dtypes, errors and reproducibility.

#[allow(unused_imports)]
use super::Accept::*;
#[allow(unused_imports)]
use super::Out::*;
use super::{other, Domain, Row};

/// A row whose results are random (or unspecified, as `empty`'s).
const fn own(r: Row) -> Row {
    Row { domain: Domain::Own, ..r }
}

pub static ROWS: &[Row] = &[
    other(
        "arange",
        &[
            "arange(Scalar end, *, ScalarType? dtype=None) -> Tensor",
            "arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None) -> Tensor",
            "arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None) -> Tensor",
        ],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [], "kwargs": {"end": 5}}"#,
            r#"{"inputs": [], "kwargs": {"end": 5.5}}"#,
            r#"{"inputs": [], "kwargs": {"end": 0}}"#,
            r#"{"inputs": [], "kwargs": {"end": -3}}"#,
            r#"{"inputs": [], "kwargs": {"end": 5, "dtype": "bool"}}"#,
            r#"{"inputs": [], "kwargs": {"end": 10, "dtype": "fp16"}}"#,
            r#"{"inputs": [], "kwargs": {"start": -2, "end": 3}}"#,
            r#"{"inputs": [], "kwargs": {"start": -3, "end": 2, "dtype": "uint8"}}"#,
            r#"{"inputs": [], "kwargs": {"start": -3, "end": 4, "step": 2}}"#,
            r#"{"inputs": [], "kwargs": {"start": 1, "end": 2.5, "step": 0.25}}"#,
            r#"{"inputs": [], "kwargs": {"start": 5, "end": -3, "step": -1.5, "dtype": "fp64"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0.1, "end": 1.3, "step": 0.1, "dtype": "bf16"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0.5, "end": 3.7, "step": 0.5, "dtype": "int32"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 2.5, "step": 0.5, "dtype": "int64"}}"#,
            r#"{"inputs": [], "kwargs": {"start": -1.5, "end": 7, "step": 2.5, "dtype": "int64"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 5, "step": 0}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 5, "step": -1}}"#,
        ],
    ),
    other(
        "linspace",
        &["linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 10, "steps": 4}}"#,
            r#"{"inputs": [], "kwargs": {"start": -1.5, "end": 2.25, "steps": 7}}"#,
            r#"{"inputs": [], "kwargs": {"start": 3, "end": -7.5, "steps": 50, "dtype": "fp64"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0.3, "end": 9.1, "steps": 33, "dtype": "fp16"}}"#,
            r#"{"inputs": [], "kwargs": {"start": -2, "end": 13, "steps": 17, "dtype": "bf16"}}"#,
            r#"{"inputs": [], "kwargs": {"start": -7, "end": 10, "steps": 6, "dtype": "int64"}}"#,
            r#"{"inputs": [], "kwargs": {"start": -3, "end": 10, "steps": 4, "dtype": "uint8"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 2.5, "end": 10, "steps": 1, "dtype": "int32"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 2.5, "end": 10, "steps": 0}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 1, "steps": -1}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 1, "steps": 3, "dtype": "bool"}}"#,
            r#"{"inputs": [], "kwargs": {"start": 0, "end": 1e6, "steps": 3, "dtype": "fp16"}}"#,
        ],
    ),
    other(
        "eye",
        &["eye(SymInt n, *, ScalarType? dtype=None) -> Tensor", "eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [], "kwargs": {"n": 3}}"#,
            r#"{"inputs": [], "kwargs": {"n": 0, "dtype": "int64"}}"#,
            r#"{"inputs": [], "kwargs": {"n": -1}}"#,
            r#"{"inputs": [], "kwargs": {"n": 2, "m": 4, "dtype": "bool"}}"#,
            r#"{"inputs": [], "kwargs": {"n": 4, "m": 2, "dtype": "fp16"}}"#,
            r#"{"inputs": [], "kwargs": {"n": 3, "m": 0}}"#,
            r#"{"inputs": [], "kwargs": {"n": 3, "m": -2}}"#,
        ],
    ),
    other(
        "full_like",
        &["full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [[3, 4]], "kwargs": {"fill_value": 2.75}}"#,
            r#"{"inputs": [[]], "kwargs": {"fill_value": -1}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"fill_value": true}}"#,
            r#"{"inputs": [[2, 3]], "kwargs": {"fill_value": -7, "dtype": "fp64"}}"#,
            r#"{"inputs": [[2]], "kwargs": {"fill_value": 300}}"#,
            r#"{"inputs": [[2]], "kwargs": {"fill_value": 1e6}}"#,
            r#"{"inputs": [[2]], "kwargs": {"fill_value": 9007199254740993, "dtype": "int64"}}"#,
        ],
    ),
    other(
        "zeros_like",
        &["zeros_like(Tensor self, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [[3, 4]]}"#, r#"{"inputs": [[]]}"#, r#"{"inputs": [[0, 2]], "kwargs": {"dtype": "bf16"}}"#, r#"{"inputs": [[2, 3]], "kwargs": {"dtype": "bool"}}"#],
    ),
    other(
        "ones_like",
        &["ones_like(Tensor self, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [[3, 4]]}"#, r#"{"inputs": [[]]}"#, r#"{"inputs": [[0, 2]], "kwargs": {"dtype": "int32"}}"#, r#"{"inputs": [[2, 3]], "kwargs": {"dtype": "fp16"}}"#],
    ),
    other(
        "zeros",
        &["zeros(SymInt[] size, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [], "kwargs": {"size": [2, 3]}}"#, r#"{"inputs": [], "kwargs": {"size": [], "dtype": "int32"}}"#, r#"{"inputs": [], "kwargs": {"size": [0, 4], "dtype": "bf16"}}"#, r#"{"inputs": [], "kwargs": {"size": [2, -1]}}"#],
    ),
    other(
        "ones",
        &["ones(SymInt[] size, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [], "kwargs": {"size": [2, 3]}}"#, r#"{"inputs": [], "kwargs": {"size": [3], "dtype": "bool"}}"#, r#"{"inputs": [], "kwargs": {"size": [1, 2], "dtype": "fp64"}}"#],
    ),
    other(
        "full",
        &["full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [], "kwargs": {"size": [2, 3], "fill_value": 1.5}}"#,
            r#"{"inputs": [], "kwargs": {"size": [2], "fill_value": 7}}"#,
            r#"{"inputs": [], "kwargs": {"size": [2], "fill_value": true}}"#,
            r#"{"inputs": [], "kwargs": {"size": [3], "fill_value": 2.5, "dtype": "int32"}}"#,
            r#"{"inputs": [], "kwargs": {"size": [3], "fill_value": 300, "dtype": "uint8"}}"#,
        ],
    ),
    own(other(
        "empty",
        &["empty.memory_format(SymInt[] size, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [], "kwargs": {"size": [2, 3]}}"#, r#"{"inputs": [], "kwargs": {"size": []}}"#, r#"{"inputs": [], "kwargs": {"size": [0, 4], "dtype": "int32"}}"#, r#"{"inputs": [], "kwargs": {"size": [2, -1]}}"#],
    )),
    own(other(
        "rand",
        &["rand(SymInt[] size, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [], "kwargs": {"size": [2, 3]}}"#, r#"{"inputs": [], "kwargs": {"size": [], "dtype": "fp64"}}"#, r#"{"inputs": [], "kwargs": {"size": [0, 3], "dtype": "bf16"}}"#, r#"{"inputs": [], "kwargs": {"size": [2], "dtype": "int64"}}"#, r#"{"inputs": [], "kwargs": {"size": [-2]}}"#],
    )),
    own(other(
        "randint",
        &[
            "randint(SymInt high, SymInt[] size, *, ScalarType? dtype=4) -> Tensor",
            "randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=4) -> Tensor",
        ],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [], "kwargs": {"high": 10, "size": [2, 3]}}"#,
            r#"{"inputs": [], "kwargs": {"low": -5, "high": 5, "size": [4], "dtype": "int32"}}"#,
            r#"{"inputs": [], "kwargs": {"high": 2, "size": [], "dtype": "bool"}}"#,
            r#"{"inputs": [], "kwargs": {"high": 3, "size": [2], "dtype": "bool"}}"#,
            r#"{"inputs": [], "kwargs": {"low": -1, "high": 5, "size": [2], "dtype": "uint8"}}"#,
            r#"{"inputs": [], "kwargs": {"low": 5, "high": 5, "size": [2]}}"#,
            r#"{"inputs": [], "kwargs": {"high": 100, "size": [3], "dtype": "fp16"}}"#,
        ],
    )),
    own(other(
        "randn_like",
        &["randn_like(Tensor self, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        false,
        &[r#"{"inputs": [[3, 4]]}"#, r#"{"inputs": [[]], "kwargs": {"dtype": "fp64"}}"#, r#"{"inputs": [[0, 2]]}"#],
    )),
    own(other(
        "bernoulli",
        &["bernoulli(Tensor self) -> Tensor", "bernoulli.p(Tensor self, float p) -> Tensor"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [{"shape": [3, 4], "range": [0, 1]}]}"#,
            r#"{"inputs": [{"shape": [], "range": [0, 1]}], "kwargs": {"p": 0.25}}"#,
            r#"{"inputs": [[2, 3]], "kwargs": {"p": 1.5}}"#,
        ],
    )),
    own(other(
        "multinomial",
        &["multinomial(Tensor self, SymInt num_samples, bool replacement=False) -> Tensor"],
        Float,
        Kernel,
        false,
        &[
            r#"{"inputs": [{"shape": [5], "range": [0, 1]}], "kwargs": {"num_samples": 3}}"#,
            r#"{"inputs": [{"shape": [2, 4], "range": [0, 1]}], "kwargs": {"num_samples": 6, "replacement": true}}"#,
        ],
    )),
];
