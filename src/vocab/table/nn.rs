//! The op table's layers, with `torch.nn.functional`'s signatures (each is
//! also the ATen operator of that name): `linear` (`weight` `[out, in]`),
//! `layer_norm`, `rms_norm` and `scaled_dot_product_attention`, whose
//! bool `attn_mask` is True where a query *attends* (PyTorch's polarity,
//! the opposite of `masked_softmax`'s) and whose causal mask is top-left
//! aligned. The native backend runs attention as one fused, tiled kernel
//! (`backend/native/attention.rs`): no `[L, S]` score matrix in memory.

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
];
