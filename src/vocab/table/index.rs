//! The op table's index section (see `super`).

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
    other("gather", &["gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [3, 2], "dtype": "int64", "range": [0, 4]}], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2, 4], "dtype": "int32", "range": [0, 3]}], "kwargs": {"dim": -2}}"#,
        r#"{"inputs": [[], {"shape": [2], "dtype": "int64", "range": [0, 1]}], "kwargs": {"dim": 0}}"#,
        r#"{"inputs": [[0, 3], {"shape": [0, 2], "dtype": "int64", "range": [0, 1]}], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 2], "dtype": "int64", "range": [0, 5]}], "kwargs": {"dim": 1}}"#,
    ]),
    other("scatter", &[
        "scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
        "scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
        "scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor",
        "scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce) -> Tensor",
    ], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [1, 4], "dtype": "int64", "range": [0, 3]}, [1, 4]], "kwargs": {"dim": 0}}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 1], "dtype": "int32", "range": [0, 4]}], "kwargs": {"dim": -1, "value": 2.5}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2, 4], "dtype": "int64", "range": [0, 3]}, [2, 4]], "kwargs": {"dim": 0, "reduce": "add"}}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 3], "dtype": "int64", "range": [0, 4]}, [3, 3]], "kwargs": {"dim": 1, "reduce": "multiply"}}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 2], "dtype": "int64", "range": [0, 4]}], "kwargs": {"dim": 1, "value": 3, "reduce": "multiply"}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2, 2], "dtype": "int64", "range": [0, 3]}, [2, 2]], "kwargs": {"dim": 0, "reduce": "sum"}}"#,
    ]),
    other("scatter_add", &["scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [2, 4], "dtype": "int64", "range": [0, 3]}, [2, 4]], "kwargs": {"dim": 0}}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 5], "dtype": "int64", "range": [0, 4]}, [3, 5]], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[], {"shape": [2], "dtype": "int64", "range": [0, 1]}, [2]], "kwargs": {"dim": 0}}"#,
    ]),
    other("index_select", &["index_select(Tensor self, int dim, Tensor index) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [5], "dtype": "int64", "range": [0, 4]}], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2], "dtype": "int32", "range": [0, 3]}], "kwargs": {"dim": -2}}"#,
        r#"{"inputs": [[], {"shape": [], "dtype": "int64", "range": [0, 1]}], "kwargs": {"dim": 0}}"#,
        r#"{"inputs": [[3, 4], {"shape": [0], "dtype": "int64", "range": [0, 1]}], "kwargs": {"dim": 0}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2, 2], "dtype": "int64", "range": [0, 3]}], "kwargs": {"dim": 0}}"#,
    ]),
    other("index_add", &["index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [5], "dtype": "int64", "range": [0, 4]}, [3, 5]], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2], "dtype": "int32", "range": [0, 3]}, [2, 4]], "kwargs": {"dim": -2, "alpha": 2}}"#,
        r#"{"inputs": [[], {"shape": [1], "dtype": "int64", "range": [0, 1]}, []], "kwargs": {"dim": 0}}"#,
        r#"{"inputs": [[3, 4], {"shape": [2], "dtype": "int64", "range": [0, 3]}, [2, 3]], "kwargs": {"dim": 0}}"#,
    ]),
    other("index_copy", &["index_copy(Tensor self, int dim, Tensor index, Tensor source) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [1], "dtype": "int64", "range": [0, 4]}, [3, 1]], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[4], {"shape": [1], "dtype": "int64", "range": [-4, 4]}, []], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[3, 4], {"shape": [1], "dtype": "int32", "range": [0, 3]}, [1, 4]], "kwargs": {"dim": 0}}"#,
    ]),
    other("index_put", &["index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [{"shape": [1], "dtype": "int64", "range": [-3, 3]}], [4]]}"#,
        r#"{"inputs": [[3, 4], [{"shape": [2], "dtype": "int64", "range": [0, 3]}, {"shape": [2], "dtype": "int32", "range": [-4, 4]}], []], "kwargs": {"accumulate": true}}"#,
        r#"{"inputs": [[2, 3, 4], [null, {"shape": [3, 1], "dtype": "int64", "range": [0, 3]}], [3, 1, 4]], "kwargs": {"accumulate": true}}"#,
        r#"{"inputs": [[2, 3, 4], [{"shape": [1], "dtype": "int64", "range": [0, 2]}, null, {"shape": [1], "dtype": "int64", "range": [0, 4]}], [3]]}"#,
        r#"{"inputs": [[3, 4], [{"shape": [3, 4], "dtype": "bool"}], []]}"#,
        r#"{"inputs": [[3, 4], [{"shape": [3], "dtype": "bool"}], [4]], "kwargs": {"accumulate": true}}"#,
        r#"{"inputs": [[3, 4], [{"shape": [2], "dtype": "int64", "range": [3, 5]}], [4]]}"#,
    ]),
    other("take_along_dim", &["take_along_dim(Tensor self, Tensor indices, int? dim=None) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [3, 2], "dtype": "int64", "range": [-4, 4]}], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[3, 1], {"shape": [2, 4], "dtype": "int64", "range": [0, 3]}], "kwargs": {"dim": -2}}"#,
        r#"{"inputs": [[3, 4], {"shape": [5], "dtype": "int64", "range": [0, 12]}]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 2], "dtype": "int32", "range": [0, 4]}], "kwargs": {"dim": 1}}"#,
    ]),
    other("masked_select", &["masked_select(Tensor self, Tensor mask) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "bool"}]}"#,
        r#"{"inputs": [[4], {"shape": [3, 4], "dtype": "bool"}]}"#,
        r#"{"inputs": [[], {"shape": [], "dtype": "bool"}]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "uint8", "range": [0, 2]}]}"#,
    ]),
    other("nonzero", &["nonzero(Tensor self) -> Tensor"], All, Kernel, false, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[]]}"#,
        r#"{"inputs": [[0, 3]]}"#,
        r#"{"inputs": [{"shape": [2, 3, 2], "dtype": "int64", "range": [0, 2]}]}"#,
    ]),
    other("masked_fill", &[
        "masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
        "masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor",
    ], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "bool"}], "kwargs": {"value": -1.5}}"#,
        r#"{"inputs": [[4], {"shape": [3, 4], "dtype": "bool"}], "kwargs": {"value": 2}}"#,
        r#"{"inputs": [[3, 4], {"shape": [4], "dtype": "bool"}, []]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "bool"}, [1]]}"#,
        r#"{"inputs": [[3, 4], {"shape": [3, 4], "dtype": "int64", "range": [0, 2]}], "kwargs": {"value": true}}"#,
    ]),
    other("where", &[
        "where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
        "where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor",
        "where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor",
        "where.Scalar(Tensor condition, Scalar self, Scalar other) -> Tensor",
    ], All, Kernel, true, &[
        r#"{"inputs": [{"shape": [3, 4], "dtype": "bool"}, [3, 4], [3, 4]]}"#,
        r#"{"inputs": [{"shape": [3, 1], "dtype": "bool"}, [4], []]}"#,
        r#"{"inputs": [{"shape": [3, 4], "dtype": "uint8", "range": [0, 2]}, [3, 4], {"shape": [3, 4], "dtype": "fp64", "range": [0, 1]}]}"#,
        r#"{"inputs": [{"shape": [3, 4], "dtype": "bool"}, [3, 4]], "kwargs": {"self": 1.5}}"#,
        r#"{"inputs": [{"shape": [3, 4], "dtype": "bool"}, [3, 4]], "kwargs": {"other": 2}}"#,
        r#"{"inputs": [{"shape": [4], "dtype": "bool"}], "kwargs": {"self": 1, "other": 2.5}}"#,
        r#"{"inputs": [{"shape": [4], "dtype": "int64", "range": [0, 2]}, [4], [4]]}"#,
    ]),
];
