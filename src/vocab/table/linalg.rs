//! The op table's matrix products (see `super`). `torch.matmul` promotes
//! 1-D operands and broadcasts batch dims; `mm` and `bmm` take exactly 2-D
//! and 3-D operands. None promotes dtypes: mixed dtypes are refused, as in PyTorch.

use super::Accept::*;
use super::Out::*;
use super::{c_binary, other, Row};

pub static ROWS: &[Row] = &[
    other("matmul", &["matmul(Tensor self, Tensor other) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [4, 5]]}"#,
        r#"{"inputs": [[2, 3, 4], [4]]}"#,
        r#"{"inputs": [[4], [2, 4, 3]]}"#,
        r#"{"inputs": [[2, 1, 3, 4], [5, 4, 2]]}"#,
        r#"{"inputs": [[4], [4]]}"#,
        r#"{"inputs": [[0, 3], [3, 2]]}"#,
        r#"{"inputs": [[3, 4], [5, 2]]}"#,
        r#"{"inputs": [[], [3]]}"#,
    ])
    .with_c(&[c_binary(
        "enkai_tensor_matmul",
        "matmul",
        "`torch.matmul(a, b)`: 1-D operands promoted, batch dims broadcast; an autocast op.\nErrors: `E_SHAPE` (`matmul [2,3] x [4,5]`), `E_DTYPE` (dtypes differ).",
    )]),
    other("mm", &["mm(Tensor self, Tensor mat2) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [4, 5]]}"#,
        r#"{"inputs": [[0, 4], [4, 2]]}"#,
        r#"{"inputs": [[3], [3, 2]]}"#,
    ]),
    other("bmm", &["bmm(Tensor self, Tensor mat2) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[2, 3, 4], [2, 4, 5]]}"#,
        r#"{"inputs": [[2, 3, 4], [3, 4, 5]]}"#,
        r#"{"inputs": [[0, 3, 4], [0, 4, 1]]}"#,
    ]),
];
