//! The op table's sort section (see `super`).
//!
//! The oracle's integer and bool values repeat, so cases that return
//! indices keep the selected dim short where PyTorch's order among equal
//! values comes from `std::sort`/`std::nth_element` (an insertion sort, so
//! index order, up to 16 elements for sort and 3 for topk).

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
    other(
        "sort",
        &[
            "sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
            "sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
        ],
        All,
        Kernel,
        true,
        &[
            r#"{"inputs": [[3, 4]]}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"dim": 0, "descending": true}}"#,
            r#"{"inputs": [[2, 3, 4]], "kwargs": {"dim": -2, "descending": true}}"#,
            r#"{"inputs": [[]], "kwargs": {"dim": -1}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"dim": 0}}"#,
            r#"{"inputs": [[4, 20]], "kwargs": {"stable": true, "descending": true}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"stable": null, "dim": 0}}"#,
        ],
    ),
    other(
        "argsort",
        &["argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor", "argsort.stable(Tensor self, *, bool stable, int dim=-1, bool descending=False) -> Tensor"],
        All,
        I64,
        false,
        &[
            r#"{"inputs": [[3, 4]]}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"dim": -2, "descending": true}}"#,
            r#"{"inputs": [[]]}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"dim": 1}}"#,
            r#"{"inputs": [[3, 40]], "kwargs": {"stable": true}}"#,
            r#"{"inputs": [[3, 40]], "kwargs": {"stable": true, "descending": true}}"#,
        ],
    ),
    other(
        "topk",
        &["topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)"],
        Num,
        Kernel,
        true,
        &[
            r#"{"inputs": [[4, 3]], "kwargs": {"k": 2}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"k": 3, "dim": 0, "largest": false}}"#,
            r#"{"inputs": [[2, 3, 2]], "kwargs": {"k": 1, "dim": -2}}"#,
            r#"{"inputs": [[]], "kwargs": {"k": 1}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"k": 0, "dim": 0}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"k": 5}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"k": -1}}"#,
        ],
    ),
    other(
        "kthvalue",
        &["kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)"],
        All,
        Kernel,
        true,
        &[
            r#"{"inputs": [[3, 4]], "kwargs": {"k": 2}}"#,
            r#"{"inputs": [[3, 5]], "kwargs": {"k": 3, "dim": 0, "keepdim": true}}"#,
            r#"{"inputs": [[2, 3, 4]], "kwargs": {"k": 1, "dim": -2}}"#,
            r#"{"inputs": [[]], "kwargs": {"k": 1}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"k": 1, "dim": 1}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"k": 1, "dim": 0}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"k": 5}}"#,
        ],
    ),
    other(
        "unique",
        &["_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [[3, 4]]}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"return_inverse": true, "return_counts": true}}"#,
            r#"{"inputs": [[]], "kwargs": {"return_inverse": true, "return_counts": true, "sorted": false}}"#,
            r#"{"inputs": [[0, 3]], "kwargs": {"return_inverse": true, "return_counts": true}}"#,
        ],
    ),
    other(
        "searchsorted",
        &[
            "searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor",
            "searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor",
        ],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [[5], [3, 4], null]}"#,
            r#"{"inputs": [[5], [3, 4], null], "kwargs": {"right": true, "out_int32": true}}"#,
            r#"{"inputs": [[3, 5], [3, 4], null], "kwargs": {"side": "right"}}"#,
            r#"{"inputs": [[3, 5], [4, 4], null]}"#,
            r#"{"inputs": [[5], [], null], "kwargs": {"side": "left"}}"#,
            r#"{"inputs": [[], [3], null]}"#,
            r#"{"inputs": [[3, 0], [3, 4], null]}"#,
            r#"{"inputs": [[5], [3, 4], null], "kwargs": {"side": "left", "right": true}}"#,
            r#"{"inputs": [[5], [3, 4], {"shape": [5], "dtype": "int64", "range": [0, 5]}]}"#,
            r#"{"inputs": [[5], [3, 4], {"shape": [5], "dtype": "int64", "range": [1, 6]}]}"#,
            r#"{"inputs": [[3, 5], [3, 4], {"shape": [3, 5], "dtype": "int64", "range": [0, 5]}], "kwargs": {"right": true}}"#,
            r#"{"inputs": [[5], [3, 4], {"shape": [4], "dtype": "int64", "range": [0, 4]}]}"#,
            r#"{"inputs": [[5], [3, 4], {"shape": [5], "dtype": "int32", "range": [0, 5]}]}"#,
            r#"{"inputs": [[5], [3, 4], null], "kwargs": {"side": "middle"}}"#,
            r#"{"inputs": [[5], null], "kwargs": {"self": 0.5}}"#,
            r#"{"inputs": [[3, 5], null], "kwargs": {"self": -1, "right": true}}"#,
            r#"{"inputs": [[5], null], "kwargs": {"self": true}}"#,
        ],
    ),
];
