//! The op table's layers, with `torch.nn.functional`'s signatures (each is
//! also the ATen operator of that name): `linear` (`weight` `[out, in]`),
//! `layer_norm`, `rms_norm` and `scaled_dot_product_attention`, whose
//! bool `attn_mask` is True where a query *attends* (PyTorch's polarity,
//! the opposite of `masked_softmax`'s) and whose causal mask is top-left
//! aligned. The native backend runs attention as one fused, tiled kernel
//! (`backend/native/attention.rs`): no `[L, S]` score matrix in memory.
//! `embedding(input, weight)` takes F's argument order (ATen's is
//! `(weight, indices)`), `padding_idx` None or counted from the end when
//! negative; `max_norm` and sparse gradients are not supported.

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
    other("linear", &["linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [5, 4], [5]]}"#,
        r#"{"inputs": [[2, 3, 4], [5, 4]]}"#,
        r#"{"inputs": [[4], [5, 4], [5]]}"#,
        r#"{"inputs": [[3, 4], [4]]}"#,
        r#"{"inputs": [[0, 4], [5, 4], [5]]}"#,
        r#"{"inputs": [[3, 4], [5, 3], [5]]}"#,
    ]),
    other("layer_norm", &["layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor"], Float, Same, true, &[
        r#"{"inputs": [[3, 4], [4], [4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[2, 3, 4], [3, 4], [3, 4]], "kwargs": {"normalized_shape": [3, 4], "eps": 0.1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[3, 4], [4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[2, 3, 4], null, [4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[0, 4], [4], [4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[3, 4], [3], [3]], "kwargs": {"normalized_shape": [3]}}"#,
        r#"{"inputs": [[3, 4], [5], [5]], "kwargs": {"normalized_shape": [4]}}"#,
    ]),
    other("rms_norm", &["rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor"], Float, Same, true, &[
        r#"{"inputs": [[3, 4], [4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[2, 3, 4], [3, 4]], "kwargs": {"normalized_shape": [3, 4], "eps": 0.01}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[0, 4], [4]], "kwargs": {"normalized_shape": [4]}}"#,
        r#"{"inputs": [[3, 4], [3]], "kwargs": {"normalized_shape": [3]}}"#,
        r#"{"inputs": [[3, 4], [5]], "kwargs": {"normalized_shape": [4]}}"#,
    ]),
    other(
        "scaled_dot_product_attention",
        &["scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[2, 3, 4], [2, 5, 4], [2, 5, 6]]}"#,
            r#"{"inputs": [[1, 2, 6, 4], [1, 2, 6, 4], [1, 2, 6, 4]], "kwargs": {"is_causal": true}}"#,
            r#"{"inputs": [[2, 3, 4], [2, 5, 4], [2, 5, 4]], "kwargs": {"is_causal": true, "scale": 0.3}}"#,
            r#"{"inputs": [[2, 3, 4], [2, 5, 4], [2, 5, 6], {"shape": [3, 5], "dtype": "bool"}]}"#,
            r#"{"inputs": [[2, 3, 4], [2, 5, 4], [2, 5, 6], {"shape": [2, 1, 5], "dtype": "bool"}], "kwargs": {"is_causal": true}}"#,
            r#"{"inputs": [[2, 3, 4], [2, 5, 4], [2, 5, 6], [3, 5]]}"#,
            r#"{"inputs": [[1, 4, 3, 4], [1, 2, 5, 4], [1, 2, 5, 4]], "kwargs": {"enable_gqa": true}}"#,
            r#"{"inputs": [[3, 4], [5, 4], [5, 2]]}"#,
            r#"{"inputs": [[2, 3, 4], [1, 5, 4], [5, 6]]}"#,
            r#"{"inputs": [[2, 0, 4], [2, 5, 4], [2, 5, 6]]}"#,
            r#"{"inputs": [[2, 3, 4], [2, 5, 3], [2, 5, 6]]}"#,
            r#"{"inputs": [[1, 3, 3, 4], [1, 2, 5, 4], [1, 2, 5, 4]], "kwargs": {"enable_gqa": true}}"#,
        ],
    ),
    Row { domain: super::Domain::Own, ..other("dropout", &["dropout(Tensor input, float p=0.5, bool training=True) -> Tensor => dropout(Tensor input, float p, bool train) -> Tensor"], All, Same, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"p": 0.2, "training": false}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"p": 1.5}}"#,
    ]) },
    Row { domain: super::Domain::Own, ..other("dropout2d", &["dropout2d(Tensor input, float p=0.5, bool training=True) -> Tensor => feature_dropout(Tensor input, float p, bool train) -> Tensor"], All, Same, true, &[
        r#"{"inputs": [[2, 3, 4, 5]]}"#,
        r#"{"inputs": [[2, 3, 4, 5]], "kwargs": {"p": 0.2, "training": false}}"#,
        r#"{"inputs": [[3, 4, 5]], "kwargs": {"p": 0.3}}"#,
        r#"{"inputs": [[2, 3, 4, 5]], "kwargs": {"p": -0.1}}"#,
    ]) },
    other(
        "embedding",
        &[r#"embedding(Tensor input, Tensor weight, int? padding_idx=None, bool scale_grad_by_freq=False) -> Tensor => embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor"#],
        All,
        Same,
        true,
        &[
            r#"{"inputs": [{"shape": [2, 3], "dtype": "int64", "range": [0, 5]}, [5, 4]]}"#,
            r#"{"inputs": [{"shape": [6], "dtype": "int64", "range": [0, 3]}, [5, 4]], "kwargs": {"padding_idx": 1}}"#,
            r#"{"inputs": [{"shape": [6], "dtype": "int64", "range": [2, 5]}, [5, 4]], "kwargs": {"padding_idx": -1}}"#,
            r#"{"inputs": [{"shape": [8], "dtype": "int64", "range": [0, 3]}, [5, 4]], "kwargs": {"scale_grad_by_freq": true}}"#,
            r#"{"inputs": [{"shape": [4], "dtype": "int32", "range": [0, 5]}, [5, 4]]}"#,
            r#"{"inputs": [{"shape": [], "dtype": "int64", "range": [0, 5]}, [5, 4]]}"#,
            r#"{"inputs": [{"shape": [3], "dtype": "int64", "range": [5, 9]}, [5, 4]]}"#,
        ],
    ),
    other(
        "one_hot",
        &["one_hot(Tensor self, int num_classes=-1) -> Tensor"],
        All,
        Kernel,
        false,
        &[
            r#"{"inputs": [{"shape": [3, 4], "dtype": "int64", "range": [0, 5]}], "kwargs": {"num_classes": 6}}"#,
            r#"{"inputs": [{"shape": [7], "dtype": "int64", "range": [0, 4]}]}"#,
            r#"{"inputs": [{"shape": [], "dtype": "int64", "range": [0, 4]}], "kwargs": {"num_classes": 4}}"#,
            r#"{"inputs": [{"shape": [3], "dtype": "int64", "range": [4, 6]}], "kwargs": {"num_classes": 3}}"#,
            r#"{"inputs": [{"shape": [3], "dtype": "int32", "range": [0, 3]}], "kwargs": {"num_classes": 3}}"#,
            r#"{"inputs": [{"shape": [0], "dtype": "int64", "range": [0, 3]}], "kwargs": {"num_classes": 3}}"#,
        ],
    ),
    other(
        "pad",
        &[r#"pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"#],
        All,
        Same,
        true,
        &[
            r#"{"inputs": [[3, 4]], "kwargs": {"pad": [1, 2]}}"#,
            r#"{"inputs": [[2, 3, 4]], "kwargs": {"pad": [1, 1, 2, 0], "value": 0.5}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"pad": [-1, 1, 1, -2]}}"#,
            r#"{"inputs": [[1, 3, 4]], "kwargs": {"pad": [2, 1], "mode": "reflect"}}"#,
            r#"{"inputs": [[1, 2, 4, 5]], "kwargs": {"pad": [1, 2, 3, 1], "mode": "reflect"}}"#,
            r#"{"inputs": [[1, 2, 4, 5]], "kwargs": {"pad": [1, 2, 0, 3], "mode": "replicate"}}"#,
            r#"{"inputs": [[2, 4, 5]], "kwargs": {"pad": [1, 1, 2, 2], "mode": "circular"}}"#,
            r#"{"inputs": [[1, 2, 2, 3, 4]], "kwargs": {"pad": [1, 1, 1, 0, 1, 1], "mode": "replicate"}}"#,
            r#"{"inputs": [[1, 3, 4]], "kwargs": {"pad": [4, 0], "mode": "reflect"}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"pad": [1, 2, 3]}}"#,
            r#"{"inputs": [[3, 4]], "kwargs": {"pad": [1, 1], "mode": "reflect", "value": 1.0}}"#,
        ],
    ),
];
