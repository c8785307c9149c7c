//! The op table's batch and group norms, with `torch.nn.functional`'s
//! signatures. `batch_norm` lowers onto `aten::batch_norm` (whose tensor
//! order differs); when `training` it normalises with the batch's biased
//! variance and, as PyTorch does, updates the given `running_mean` and
//! `running_var` IN PLACE with `momentum` and the unbiased variance; in
//! eval it uses them (both required). `momentum` is a number: nn.BatchNorm's
//! `momentum=None` (a cumulative average) is the caller's
//! `1 / num_batches_tracked`, which it passes as `momentum`, as PyTorch's
//! module does. `group_norm` normalises each of `num_groups` groups of
//! channels per batch entry. Core checks the shapes, the running stats and
//! the one-value-per-channel rule of training on both backends alike
//! (`crate::opcall`), since `F.batch_norm` checks the last in Python.
//!
//! In the cases, running stats are `{"shape": [3], ...}` specs: a variance
//! must be positive, and both sides mutate their own copies when training.
//! No empty batch_norm case: `F.batch_norm` returns an empty input as it is
//! without a dtype check (integers too), which the table's dtype rule refuses
//! (test_norms.py covers empty float batches). No group of two values: its
//! input gradient is zero but for eps, so both sides return rounding noise.

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
    other(
        "batch_norm",
        &["batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, Tensor? weight=None, Tensor? bias=None, bool training=False, float momentum=0.1, float eps=1e-05) -> Tensor \
           => batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled=True) -> Tensor"],
        Float,
        Same,
        true,
        &[
            // eval
            r#"{"inputs": [[4, 3], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, [3], [3]]}"#,
            r#"{"inputs": [[2, 3, 5], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, null, null]}"#,
            r#"{"inputs": [[2, 3, 4, 5], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, [3], [3]], "kwargs": {"eps": 0.1}}"#,
            // training, with running stats (updated) and without
            r#"{"inputs": [[4, 3], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, [3], [3]], "kwargs": {"training": true, "momentum": 0.2}}"#,
            r#"{"inputs": [[2, 3, 4, 5], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, [3], null], "kwargs": {"training": true, "eps": 0.001}}"#,
            r#"{"inputs": [[2, 3, 4, 5], null, null, [3], [3]], "kwargs": {"training": true}}"#,
            r#"{"inputs": [[4, 3], null, null, null, null], "kwargs": {"training": true}}"#,
            r#"{"inputs": [[2, 3, 5], null, null, null, [3]], "kwargs": {"training": true, "eps": 0.1}}"#,
            // refused: no running stats in eval, one value per channel, wrong sizes, 1-D input
            r#"{"inputs": [[4, 3], null, null, null, null]}"#,
            r#"{"inputs": [[4, 3], {"shape": [3], "range": [-0.5, 0.5]}, null, null, null]}"#,
            r#"{"inputs": [[1, 3], null, null, null, null], "kwargs": {"training": true}}"#,
            r#"{"inputs": [[1, 3, 1], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, null, null], "kwargs": {"training": true}}"#,
            r#"{"inputs": [[4, 3], {"shape": [4], "range": [-0.5, 0.5]}, {"shape": [4], "range": [0.5, 2]}, null, null]}"#,
            r#"{"inputs": [[4, 3], null, null, [4], [3]], "kwargs": {"training": true}}"#,
            r#"{"inputs": [[3], {"shape": [3], "range": [-0.5, 0.5]}, {"shape": [3], "range": [0.5, 2]}, null, null]}"#,
        ],
    ),
    other(
        "group_norm",
        &["group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor \
           => group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enabled=True) -> Tensor"],
        Float,
        Same,
        true,
        &[
            r#"{"inputs": [[2, 6, 5], [6], [6]], "kwargs": {"num_groups": 3}}"#,
            r#"{"inputs": [[3, 6], [6], [6]], "kwargs": {"num_groups": 2}}"#,
            r#"{"inputs": [[2, 6, 3, 4], null, null], "kwargs": {"num_groups": 2}}"#,
            r#"{"inputs": [[2, 6, 3, 4], [6], null], "kwargs": {"num_groups": 6, "eps": 0.001}}"#,
            r#"{"inputs": [[1, 4, 3], null, [4]], "kwargs": {"num_groups": 1}}"#,
            r#"{"inputs": [[0, 4, 3], [4], [4]], "kwargs": {"num_groups": 2}}"#,
            // refused: channels not divisible, wrong affine size, 1-D input, a negative group count
            r#"{"inputs": [[2, 6, 3], null, null], "kwargs": {"num_groups": 4}}"#,
            r#"{"inputs": [[2, 6, 3], [5], null], "kwargs": {"num_groups": 3}}"#,
            r#"{"inputs": [[6], null, null], "kwargs": {"num_groups": 3}}"#,
            r#"{"inputs": [[2, 6, 3], null, null], "kwargs": {"num_groups": -2}}"#,
        ],
    ),
];
