//! The op table's losses, with `torch.nn.functional`'s signatures (`reduction`
//! a string; `cross_entropy` takes class indices or class probabilities,
//! `ignore_index`, class `weight` and `label_smoothing`), each lowered onto
//! the ATen operator that PyTorch's function calls (`=>`: `cross_entropy`
//! runs `aten::cross_entropy_loss`, `nll_loss` `aten::nll_loss_nd`). The
//! deprecated `size_average` and `reduce` arguments are not taken, nor the
//! Python-only `weight` of `mse_loss`/`l1_loss`. `kl_div` also takes
//! `reduction="batchmean"` (the sum over the batch size), which core runs
//! as its sum divided by the input's first dim, as PyTorch's function does.

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

const PAIR: &[&str] = &[
    r#"{"inputs": [[3, 4], [3, 4]]}"#,
    r#"{"inputs": [[3, 1], [4]]}"#,
    r#"{"inputs": [[], []]}"#,
    r#"{"inputs": [[0, 3], [0, 3]]}"#,
    r#"{"inputs": [[3, 4], [5]]}"#,
];

/// Class targets of 5 classes for inputs `[4, 5]`, `[2, 5, 3]` and `[5]`, weights, and probability targets.
macro_rules! class_cases {
    ($($extra:expr),*) => {
        &[
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [0, 5]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [0, 5]}, {"shape": [5], "range": [0.5, 2]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [0, 3]}], "kwargs": {"ignore_index": 1}}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [0, 3]}, {"shape": [5], "range": [0.5, 2]}], "kwargs": {"ignore_index": 2}}"#,
            r#"{"inputs": [[2, 5, 3], {"shape": [2, 3], "dtype": "int64", "range": [0, 5]}]}"#,
            r#"{"inputs": [[5], {"shape": [], "dtype": "int64", "range": [0, 5]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "uint8", "range": [0, 5]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [5, 8]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [3], "dtype": "int64", "range": [0, 5]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [0, 5]}, {"shape": [4], "range": [0.5, 2]}]}"#,
            r#"{"inputs": [[0, 5], {"shape": [0], "dtype": "int64", "range": [0, 5]}]}"#,
            $($extra),*
        ]
    };
}

pub static ROWS: &[Row] = &[
    other("mse_loss", &[r#"mse_loss(Tensor input, Tensor target, str reduction="mean") -> Tensor => mse_loss(Tensor self, Tensor target, int reduction=1) -> Tensor"#], Float, Same, true, PAIR),
    other("l1_loss", &[r#"l1_loss(Tensor input, Tensor target, str reduction="mean") -> Tensor => l1_loss(Tensor self, Tensor target, int reduction=1) -> Tensor"#], Float, Same, true, PAIR),
    other(
        "smooth_l1_loss",
        &[r#"smooth_l1_loss(Tensor input, Tensor target, str reduction="mean", float beta=1.0) -> Tensor => smooth_l1_loss(Tensor self, Tensor target, int reduction=1, float beta=1.0) -> Tensor"#],
        Float,
        Same,
        true,
        &[r#"{"inputs": [[3, 4], [3, 4]]}"#, r#"{"inputs": [[3, 4], [3, 4]], "kwargs": {"beta": 0.0}}"#, r#"{"inputs": [[3, 1], [4]], "kwargs": {"beta": 2.0}}"#, r#"{"inputs": [[3, 4], [5]]}"#],
    ),
    other(
        "huber_loss",
        &[r#"huber_loss(Tensor input, Tensor target, str reduction="mean", float delta=1.0) -> Tensor => huber_loss(Tensor self, Tensor target, int reduction=1, float delta=1.0) -> Tensor"#],
        Float,
        Same,
        true,
        &[r#"{"inputs": [[3, 4], [3, 4]]}"#, r#"{"inputs": [[3, 1], [4]], "kwargs": {"delta": 2.0}}"#, r#"{"inputs": [[3, 4], [5]]}"#],
    ),
    other(
        "kl_div",
        &[r#"kl_div(Tensor input, Tensor target, str reduction="mean", bool log_target=False) -> Tensor => kl_div(Tensor self, Tensor target, int reduction=1, *, bool log_target=False) -> Tensor"#],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [0.05, 1]}]}"#,
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [0.05, 1]}], "kwargs": {"reduction": "batchmean"}}"#,
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [-2, 0]}], "kwargs": {"log_target": true, "reduction": "batchmean"}}"#,
            r#"{"inputs": [[3, 4], {"shape": [4], "range": [0, 1]}]}"#,
            r#"{"inputs": [[3, 4], [5]]}"#,
        ],
    ),
    other(
        "binary_cross_entropy_with_logits",
        &[r#"binary_cross_entropy_with_logits(Tensor input, Tensor target, Tensor? weight=None, str reduction="mean", Tensor? pos_weight=None) -> Tensor => binary_cross_entropy_with_logits(Tensor self, Tensor target, Tensor? weight=None, Tensor? pos_weight=None, int reduction=1) -> Tensor"#],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [0, 1]}]}"#,
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [0, 1]}, [4]]}"#,
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [0, 1]}, [3, 1], {"shape": [4], "range": [0.5, 3]}]}"#,
            r#"{"inputs": [[3, 4], {"shape": [3, 4], "range": [0, 1]}, null, {"shape": [4], "range": [0.5, 3]}]}"#,
            r#"{"inputs": [[3, 4], [5]]}"#,
        ],
    ),
    other(
        "nll_loss",
        &[r#"nll_loss(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, str reduction="mean") -> Tensor => nll_loss_nd(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100) -> Tensor"#],
        Float,
        Same,
        true,
        class_cases!(),
    ),
    other(
        "cross_entropy",
        &[r#"cross_entropy(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, str reduction="mean", float label_smoothing=0.0) -> Tensor => cross_entropy_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=1, SymInt ignore_index=-100, float label_smoothing=0.0) -> Tensor"#],
        Float,
        Same,
        true,
        class_cases!(
            r#"{"inputs": [[4, 5], {"shape": [4, 5], "range": [0, 1]}]}"#,
            r#"{"inputs": [[4, 5], {"shape": [4, 5], "range": [0, 1]}, {"shape": [5], "range": [0.5, 2]}]}"#,
            r#"{"inputs": [[2, 5, 3], {"shape": [2, 5, 3], "range": [0, 1]}], "kwargs": {"label_smoothing": 0.2}}"#,
            r#"{"inputs": [[4, 5], {"shape": [4], "dtype": "int64", "range": [0, 3]}, {"shape": [5], "range": [0.5, 2]}], "kwargs": {"ignore_index": 2, "label_smoothing": 0.3}}"#,
            r#"{"inputs": [[4, 5], {"shape": [4, 5], "range": [0, 1]}], "kwargs": {"ignore_index": 1}}"#
        ),
    ),
];
