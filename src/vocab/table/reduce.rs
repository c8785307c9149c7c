//! The op table's reduce section (see `super`).

use super::Accept::*;
use super::Out::*;
use super::{other, CArg, CFn, Row};

/// The seed's typed reductions: `dim < 0` reduces every dim (not the last, as in PyTorch).
const fn c_reduce(name: &'static str, overload: &'static str, doc: &'static str) -> CFn {
    CFn { name, overload, params: &[("x", CArg::Tensor), ("dim", CArg::DimOrAll("dim")), ("keepdim", CArg::Flag("keepdim"))], doc }
}

const DIM1: &str = r#"{"inputs": [[3, 4]], "kwargs": {"dim": [1]}}"#;
const DIMS_KEEP: &str = r#"{"inputs": [[3, 4]], "kwargs": {"dim": [-1, 0], "keepdim": true}}"#;
const EMPTY: &str = r#"{"inputs": [[0, 3]], "kwargs": {"dim": [0]}}"#;
const EMPTY_KEPT: &str = r#"{"inputs": [[0, 3]], "kwargs": {"dim": [-1], "keepdim": true}}"#;
const SCALAR: &str = r#"{"inputs": [[]], "kwargs": {"dim": [0]}}"#;
const WHOLE: &str = r#"{"inputs": [[3, 4]]}"#;
const WHOLE0: &str = r#"{"inputs": [[]]}"#;
const WHOLE_EMPTY: &str = r#"{"inputs": [[0, 3]]}"#;
const DIMS3: &str = r#"{"inputs": [[2, 3, 4]], "kwargs": {"dim": [0, 2]}}"#;
const ONE: &str = r#"{"inputs": [[3, 4]], "kwargs": {"dim": 1}}"#;
const ONE_KEEP: &str = r#"{"inputs": [[3, 4]], "kwargs": {"dim": -2, "keepdim": true}}"#;
const ONE_EMPTY: &str = r#"{"inputs": [[0, 3]], "kwargs": {"dim": 1}}"#;
const ONE0: &str = r#"{"inputs": [[]], "kwargs": {"dim": 0}}"#;

pub static ROWS: &[Row] = &[
    other(
        "sum",
        &["sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor", "sum(Tensor self, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        true,
        &[DIM1, DIMS_KEEP, DIMS3, EMPTY, SCALAR, WHOLE, WHOLE_EMPTY],
    )
    .with_c(&[c_reduce(
        "enkai_tensor_sum",
        "sum.dim_IntList",
        "Sum over `dim`, or over every dim when `dim < 0`; `keepdim` non-zero keeps\nreduced dims as 1. Integer and bool inputs sum in int64, as `torch.sum`.\nErrors: `E_SHAPE` (dim out of range).",
    )]).complex(),
    other(
        "mean",
        &["mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor", "mean(Tensor self, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        true,
        &[DIM1, DIMS_KEEP, DIMS3, EMPTY, SCALAR, WHOLE, WHOLE0],
    )
    .with_c(&[c_reduce(
        "enkai_tensor_mean",
        "mean.dim",
        "Mean over `dim`, or over every dim when `dim < 0`; `keepdim` as `enkai_tensor_sum`.\nErrors: `E_SHAPE` (dim out of range), `E_DTYPE` (integer or bool input).",
    )]).complex(),
    other(
        "prod",
        &["prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor", "prod(Tensor self, *, ScalarType? dtype=None) -> Tensor"],
        All,
        Kernel,
        true,
        &[ONE, ONE_KEEP, ONE_EMPTY, ONE0, WHOLE, WHOLE_EMPTY],
    ),
    other("amax", &["amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"], All, Same, true, &[DIM1, DIMS_KEEP, DIMS3, EMPTY, EMPTY_KEPT, SCALAR, WHOLE]),
    other("amin", &["amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"], All, Same, true, &[DIM1, DIMS_KEEP, DIMS3, EMPTY, EMPTY_KEPT, SCALAR, WHOLE]),
    other("argmax", &["argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"], Num, I64, false, &[ONE, ONE_KEEP, ONE_EMPTY, ONE0, WHOLE, WHOLE_EMPTY]),
    other("argmin", &["argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"], Num, I64, false, &[ONE, ONE_KEEP, ONE_EMPTY, ONE0, WHOLE, WHOLE_EMPTY]),
    other(
        "max",
        &["max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)", "max(Tensor self) -> Tensor"],
        All,
        Kernel,
        true,
        &[ONE, ONE_KEEP, ONE_EMPTY, ONE0, WHOLE, WHOLE0, WHOLE_EMPTY],
    ),
    other(
        "min",
        &["min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)", "min(Tensor self) -> Tensor"],
        All,
        Kernel,
        true,
        &[ONE, ONE_KEEP, ONE_EMPTY, ONE0, WHOLE, WHOLE0, WHOLE_EMPTY],
    ),
    other(
        "var",
        &[
            "var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
            "var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor",
        ],
        Float,
        Same,
        true,
        &[
            DIM1,
            DIMS_KEEP,
            DIMS3,
            WHOLE,
            EMPTY,
            r#"{"inputs": [[3, 4]], "kwargs": {"dim": [0], "correction": 0}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"dim": [1], "unbiased": false, "keepdim": true}}"#,
        ],
    ),
    other(
        "std",
        &[
            "std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
            "std.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor",
        ],
        Float,
        Same,
        true,
        &[
            DIM1,
            DIMS_KEEP,
            DIMS3,
            WHOLE,
            EMPTY,
            r#"{"inputs": [[3, 4]], "kwargs": {"dim": [0], "correction": 2}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"dim": [1], "unbiased": false, "keepdim": true}}"#,
        ],
    ),
    other("logsumexp", &["logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"], All, ToFloat, true, &[DIM1, DIMS_KEEP, DIMS3, EMPTY, SCALAR]),
    other(
        "norm",
        &["norm.ScalarOpt_dim(Tensor self, Scalar? p, int[1] dim, bool keepdim=False) -> Tensor", "norm.Scalar(Tensor self, Scalar p=2) -> Tensor"],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[3, 4]], "kwargs": {"p": 2, "dim": [1]}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"p": 1, "dim": [-1, 0], "keepdim": true}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"p": 3.5, "dim": [0]}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"p": null, "dim": [0]}}"#,
            WHOLE,
            r#"{"inputs": [[]], "kwargs": {"p": 0.5}}"#,
        ],
    ),
    other(
        "linalg_vector_norm",
        &["linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"],
        Float,
        Same,
        true,
        &[
            DIM1,
            r#"{"inputs": [[3, 4]], "kwargs": {"ord": 0, "dim": [-1, 0], "keepdim": true}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"ord": 1, "dim": [0]}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"ord": 3}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"ord": -1.5, "dim": [1]}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"ord": 3, "dim": [1]}}"#,
        ],
    ),
    other(
        "all",
        &["all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor", "all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor", "all(Tensor self) -> Tensor"],
        All,
        Bool,
        false,
        &[DIM1, DIMS_KEEP, EMPTY, ONE, ONE0, WHOLE, WHOLE_EMPTY, r#"{"inputs": [[3, 4]], "kwargs": {"dim": []}}"#],
    ),
    other(
        "any",
        &["any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor", "any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor", "any(Tensor self) -> Tensor"],
        All,
        Bool,
        false,
        &[DIM1, DIMS_KEEP, EMPTY, ONE, ONE0, WHOLE, WHOLE_EMPTY, r#"{"inputs": [[3, 4]], "kwargs": {"dim": []}}"#],
    ),
    other(
        "count_nonzero",
        &["count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor", "count_nonzero(Tensor self, int? dim=None) -> Tensor"],
        All,
        I64,
        false,
        &[DIM1, r#"{"inputs": [[3, 4]], "kwargs": {"dim": [-1, 0]}}"#, EMPTY, ONE, ONE0, WHOLE, WHOLE_EMPTY],
    ),
    other("cumsum", &["cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"], All, Kernel, true, &[ONE, r#"{"inputs": [[3, 4]], "kwargs": {"dim": -2}}"#, ONE_EMPTY, ONE0]),
    other("cumprod", &["cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"], All, Kernel, true, &[ONE, r#"{"inputs": [[3, 4]], "kwargs": {"dim": -2}}"#, ONE_EMPTY, ONE0]),
    other("softmax", &["softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"], All, Same, true, &[ONE, r#"{"inputs": [[3, 4]], "kwargs": {"dim": -2}}"#, ONE_EMPTY, ONE0, r#"{"inputs": [[2, 3, 4]], "kwargs": {"dim": 1}}"#])
    .with_c(&[CFn {
        name: "enkai_tensor_softmax",
        overload: "softmax.int",
        params: &[("x", CArg::Tensor), ("dim", CArg::Int("dim"))],
        doc: "`torch.softmax(x, dim)`; negative dims count from the end.\nErrors: `E_SHAPE` (dim out of range), `E_DTYPE` (not floating).",
    }]),
    other("log_softmax", &["log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor"], All, Same, true, &[ONE, r#"{"inputs": [[3, 4]], "kwargs": {"dim": -2}}"#, ONE_EMPTY, ONE0, r#"{"inputs": [[2, 3, 4]], "kwargs": {"dim": 1}}"#]),
];
