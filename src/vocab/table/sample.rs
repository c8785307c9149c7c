//! The op table's resampling layers, with `torch.nn.functional`'s
//! signatures: `interpolate` (modes nearest, nearest-exact, linear,
//! bilinear, trilinear; `size` as a list, or one value for every spatial
//! dim; `scale_factor` one number for every spatial dim), `unfold` (im2col:
//! `[N, C, H, W]` into `[N, C·kh·kw, L]`) and `fold` (col2im, its adjoint:
//! overlapping blocks sum). Core checks every call (`vocab::sample`) with
//! PyTorch's words; the native backend runs them in Rust, libtorch as
//! `upsample_*` (chosen by mode and rank, as `F.interpolate` does),
//! `im2col` and `col2im`. Dtypes as PyTorch's CPU kernels: `interpolate`
//! floating and uint8 (uint8 with a linear mode is libtorch's fixed-point
//! kernel, whose rounding the native backend does not reproduce:
//! `E_UNSUPPORTED` there), `unfold`/`fold` floating and bool (`fold` of
//! bools is their OR, as col2im's `+=` in bool).

use super::Accept::*;
use super::Out::*;
use super::{other, Row};

pub static ROWS: &[Row] = &[
    other(
        "interpolate",
        &[r#"interpolate(Tensor input, SymInt[]? size=None, float? scale_factor=None, str mode="nearest", bool? align_corners=None, bool? recompute_scale_factor=None, bool antialias=False) -> Tensor"#],
        Num,
        Same,
        true,
        &[
            r#"{"inputs": [[1, 2, 4]], "kwargs": {"size": [7]}}"#,
            r#"{"inputs": [[2, 3, 4, 5]], "kwargs": {"scale_factor": 2.0}}"#,
            r#"{"inputs": [[1, 2, 3, 4]], "kwargs": {"size": [5, 7]}}"#,
            r#"{"inputs": [[1, 2, 5, 4]], "kwargs": {"scale_factor": 1.5, "mode": "nearest-exact"}}"#,
            r#"{"inputs": [[1, 2, 6, 4]], "kwargs": {"size": [4, 3], "mode": "nearest"}}"#,
            r#"{"inputs": [[1, 2, 2, 3, 4]], "kwargs": {"size": [3, 5, 6]}}"#,
            r#"{"inputs": [[2, 3, 4]], "kwargs": {"size": [9], "mode": "linear"}}"#,
            r#"{"inputs": [[1, 2, 4, 5]], "kwargs": {"size": [7, 3], "mode": "bilinear"}}"#,
            r#"{"inputs": [[1, 2, 4, 5]], "kwargs": {"scale_factor": 2.5, "mode": "bilinear", "align_corners": true}}"#,
            r#"{"inputs": [[1, 2, 6, 8]], "kwargs": {"scale_factor": 0.5, "mode": "bilinear"}}"#,
            r#"{"inputs": [[1, 2, 3, 4]], "kwargs": {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": true}}"#,
            r#"{"inputs": [[1, 1, 2, 3, 4]], "kwargs": {"size": [3, 4, 5], "mode": "trilinear"}}"#,
            r#"{"inputs": [[0, 2, 3, 4]], "kwargs": {"size": [5, 6], "mode": "bilinear"}}"#,
            // refused: both or neither of size and scale_factor, align_corners with nearest, a mode of another rank, wrong size lengths, an empty result
            r#"{"inputs": [[1, 2, 3, 4]], "kwargs": {"size": [5, 6], "scale_factor": 2.0}}"#,
            r#"{"inputs": [[1, 2, 3, 4]]}"#,
            r#"{"inputs": [[1, 2, 3, 4]], "kwargs": {"size": [5, 6], "align_corners": true}}"#,
            r#"{"inputs": [[1, 2, 3]], "kwargs": {"size": [5], "mode": "bilinear"}}"#,
            r#"{"inputs": [[1, 2, 3, 4]], "kwargs": {"size": [5, 6, 7]}}"#,
            r#"{"inputs": [[1, 2, 3, 4]], "kwargs": {"size": [0, 6]}}"#,
        ],
    )
    .python_only(),
    other(
        "unfold",
        &["unfold(Tensor input, int[2] kernel_size, int[2] dilation=1, int[2] padding=0, int[2] stride=1) -> Tensor \
           => im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"],
        All,
        Same,
        true,
        &[
            r#"{"inputs": [[2, 3, 5, 6]], "kwargs": {"kernel_size": [2, 3]}}"#,
            r#"{"inputs": [[1, 2, 6, 7]], "kwargs": {"kernel_size": [3, 3], "dilation": [2, 1], "padding": [1, 1], "stride": [2, 2]}}"#,
            r#"{"inputs": [[3, 5, 5]], "kwargs": {"kernel_size": [2, 2], "stride": [2, 2]}}"#,
            r#"{"inputs": [[0, 2, 4, 4]], "kwargs": {"kernel_size": [2, 2]}}"#,
            // refused: no room for a block, a zero kernel, a 2-D input
            r#"{"inputs": [[1, 2, 3, 3]], "kwargs": {"kernel_size": [4, 4]}}"#,
            r#"{"inputs": [[1, 2, 3, 3]], "kwargs": {"kernel_size": [0, 2]}}"#,
            r#"{"inputs": [[2, 3]], "kwargs": {"kernel_size": [1, 1]}}"#,
        ],
    ),
    other(
        "fold",
        &["fold(Tensor input, SymInt[2] output_size, int[2] kernel_size, int[2] dilation=1, int[2] padding=0, int[2] stride=1) -> Tensor \
           => col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor"],
        All,
        Same,
        true,
        &[
            r#"{"inputs": [[2, 12, 16]], "kwargs": {"output_size": [5, 6], "kernel_size": [2, 3]}}"#,
            r#"{"inputs": [[1, 8, 4]], "kwargs": {"output_size": [4, 4], "kernel_size": [2, 2], "stride": [2, 2], "padding": [1, 1], "dilation": [2, 2]}}"#,
            r#"{"inputs": [[12, 16]], "kwargs": {"output_size": [5, 6], "kernel_size": [2, 3]}}"#,
            r#"{"inputs": [[0, 4, 9]], "kwargs": {"output_size": [4, 4], "kernel_size": [2, 2]}}"#,
            // refused: planes not a multiple of the kernel, the wrong block count, a 1-D input
            r#"{"inputs": [[1, 5, 9]], "kwargs": {"output_size": [4, 4], "kernel_size": [2, 2]}}"#,
            r#"{"inputs": [[1, 4, 8]], "kwargs": {"output_size": [4, 4], "kernel_size": [2, 2]}}"#,
            r#"{"inputs": [[4]], "kwargs": {"output_size": [4, 4], "kernel_size": [2, 2]}}"#,
        ],
    ),
];
