//! The op table's convolutions and pools (see `super`), as
//! `torch.nn.functional` runs them on CPU: every dtype but bool for
//! convolution (int64 only among the integers when dilated or transposed)
//! and max pooling, integers wrapping as PyTorch's; floats and int64 for
//! `avg_pool2d`, floats for `adaptive_avg_pool2d`. PyTorch returns an
//! empty result before it looks at the dtype: so do the kernels, which
//! refuse the rest themselves (the rows accept every dtype).
//! A case's inputs are (input, weight, bias), `null` for no bias.

use super::Accept::*;
use super::Domain::Unit;
use super::Out::*;
use super::{other, Row};

/// A convolution's row: its oracle values in (-1, 1), so that an fp32
/// result that cancels to near zero from tens of products stays within
/// the suite's fp32 atol whatever order the sums take (PyTorch's and
/// ours differ).
const fn conv(row: Row) -> Row {
    Row { domain: Unit, ..row }
}

pub static ROWS: &[Row] = &[
    conv(other(
        "conv1d",
        &[
            "conv1d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] stride=[1], SymInt[1] padding=[0], SymInt[1] dilation=[1], SymInt groups=1) -> Tensor",
            "conv1d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] stride=[1], str padding=\"valid\", SymInt[1] dilation=[1], SymInt groups=1) -> Tensor",
        ],
        All,
        Kernel,
        true,
        &[
            r#"{"inputs": [[2, 3, 7], [4, 3, 3], [4]]}"#,
            r#"{"inputs": [[2, 4, 9], [6, 2, 3], null], "kwargs": {"stride": [2], "padding": [2], "dilation": [2], "groups": 2}}"#,
            r#"{"inputs": [[3, 8], [2, 3, 4], [2]], "kwargs": {"padding": "same", "dilation": [1]}}"#,
            r#"{"inputs": [[1, 2, 6], [3, 2, 2], [3]], "kwargs": {"padding": "valid"}}"#,
            r#"{"inputs": [[0, 3, 7], [4, 3, 3], [4]]}"#,
            r#"{"inputs": [[2, 3, 2], [4, 3, 3], null]}"#,
        ],
    )),
    conv(other(
        "conv2d",
        &[
            "conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor",
            "conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], str padding=\"valid\", SymInt[2] dilation=[1, 1], SymInt groups=1) -> Tensor",
        ],
        All,
        Kernel,
        true,
        &[
            r#"{"inputs": [[2, 3, 6, 5], [4, 3, 3, 3], [4]]}"#,
            r#"{"inputs": [[2, 3, 6, 5], [4, 3, 3, 2], null], "kwargs": {"stride": [2, 1], "padding": [1, 2]}}"#,
            r#"{"inputs": [[1, 4, 7, 7], [6, 2, 3, 3], [6]], "kwargs": {"stride": [2, 2], "padding": [1, 1], "dilation": [2, 1], "groups": 2}}"#,
            r#"{"inputs": [[2, 3, 5, 6], [4, 3, 2, 3], [4]], "kwargs": {"padding": "same", "dilation": [1, 2]}}"#,
            r#"{"inputs": [[2, 3, 5, 6], [4, 3, 3, 3], null], "kwargs": {"padding": "valid"}}"#,
            r#"{"inputs": [[3, 5, 5], [2, 3, 3, 3], [2]], "kwargs": {"padding": [1]}}"#,
            r#"{"inputs": [[2, 4, 5, 5], [6, 4, 1, 1], [6]]}"#,
            r#"{"inputs": [[0, 3, 5, 5], [4, 3, 3, 3], [4]]}"#,
            r#"{"inputs": [[1, 2, 2, 2], [3, 2, 3, 3], null]}"#,
            r#"{"inputs": [[1, 2, 5, 5], [3, 3, 3, 3], null]}"#,
            r#"{"inputs": [[1, 2, 5, 5], [3, 2, 3, 3], null], "kwargs": {"stride": [2, 2], "padding": "same"}}"#,
        ],
    )),
    conv(other(
        "conv_transpose2d",
        &["conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] output_padding=[0, 0], SymInt groups=1, SymInt[2] dilation=[1, 1]) -> Tensor"],
        All,
        Kernel,
        true,
        &[
            r#"{"inputs": [[2, 3, 4, 5], [3, 2, 3, 3], [2]]}"#,
            r#"{"inputs": [[2, 4, 4, 3], [4, 3, 3, 2], null], "kwargs": {"stride": [2, 3], "padding": [1, 1], "output_padding": [1, 2], "groups": 2}}"#,
            r#"{"inputs": [[1, 2, 3, 3], [2, 2, 2, 3], [2]], "kwargs": {"stride": [2, 2], "dilation": [2, 1], "output_padding": [1, 1]}}"#,
            r#"{"inputs": [[2, 3, 3], [2, 3, 3, 3], [3]], "kwargs": {"padding": [1, 0]}}"#,
            r#"{"inputs": [[0, 3, 4, 5], [3, 2, 3, 3], [2]]}"#,
            r#"{"inputs": [[1, 2, 4, 4], [3, 2, 3, 3], null]}"#,
        ],
    )),
    other(
        "max_pool2d",
        &["max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor"],
        Num,
        Kernel,
        true,
        &POOL_CASES,
    ),
    other(
        "max_pool2d_with_indices",
        &["max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)"],
        Num,
        Kernel,
        true,
        &POOL_CASES,
    ),
    other(
        "avg_pool2d",
        &["avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor"],
        Num,
        Kernel,
        true,
        &[
            r#"{"inputs": [[2, 3, 6, 5]], "kwargs": {"kernel_size": 2}}"#,
            r#"{"inputs": [[2, 3, 7, 6]], "kwargs": {"kernel_size": [3, 2], "stride": [2, 1], "padding": [1, 1]}}"#,
            r#"{"inputs": [[2, 3, 7, 6]], "kwargs": {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": false}}"#,
            r#"{"inputs": [[1, 2, 7, 8]], "kwargs": {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": true}}"#,
            r#"{"inputs": [[1, 2, 7, 8]], "kwargs": {"kernel_size": 3, "stride": 2, "ceil_mode": true, "count_include_pad": false}}"#,
            r#"{"inputs": [[2, 6, 6]], "kwargs": {"kernel_size": 2, "divisor_override": 3}}"#,
            r#"{"inputs": [[0, 2, 6, 6]], "kwargs": {"kernel_size": 2}}"#,
            r#"{"inputs": [[1, 2, 5, 5]], "kwargs": {"kernel_size": 3, "padding": 2}}"#,
            r#"{"inputs": [[1, 2, 5, 5]], "kwargs": {"kernel_size": 2, "divisor_override": 0}}"#,
        ],
    ),
    other(
        "adaptive_avg_pool2d",
        &["adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"],
        All,
        Kernel,
        true,
        &[
            r#"{"inputs": [[2, 3, 6, 5]], "kwargs": {"output_size": [2, 3]}}"#,
            r#"{"inputs": [[2, 3, 7, 5]], "kwargs": {"output_size": [3, 4]}}"#,
            r#"{"inputs": [[2, 3, 7, 5]], "kwargs": {"output_size": [3]}}"#,
            r#"{"inputs": [[3, 5, 4]], "kwargs": {"output_size": [5, 6]}}"#,
            r#"{"inputs": [[2, 3, 6, 5]], "kwargs": {"output_size": [1, 1]}}"#,
            r#"{"inputs": [[0, 3, 6, 5]], "kwargs": {"output_size": [2, 2]}}"#,
        ],
    ),
];

const POOL_CASES: [&str; 9] = [
    r#"{"inputs": [[2, 3, 6, 5]], "kwargs": {"kernel_size": 2}}"#,
    r#"{"inputs": [[2, 3, 7, 6]], "kwargs": {"kernel_size": [3, 2], "stride": [2, 1], "padding": [1, 1]}}"#,
    r#"{"inputs": [[1, 2, 9, 8]], "kwargs": {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}}"#,
    r#"{"inputs": [[1, 2, 7, 8]], "kwargs": {"kernel_size": 3, "stride": 2, "ceil_mode": true}}"#,
    r#"{"inputs": [[3, 6, 6]], "kwargs": {"kernel_size": 2, "stride": 1}}"#,
    r#"{"inputs": [[0, 2, 6, 6]], "kwargs": {"kernel_size": 2}}"#,
    r#"{"inputs": [[1, 2, 5, 5]], "kwargs": {"kernel_size": 3, "padding": 2}}"#,
    r#"{"inputs": [[1, 2, 1, 1]], "kwargs": {"kernel_size": 2}}"#,
    r#"{"inputs": [[1, 2, 5, 5]], "kwargs": {"kernel_size": 2, "stride": 0}}"#,
];
