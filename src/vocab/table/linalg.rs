//! The op table's matrix products (see `super`). `torch.matmul` promotes
//! 1-D operands and broadcasts batch dims; `mm` and `bmm` take exactly 2-D
//! and 3-D operands. None promotes dtypes: mixed dtypes are refused, as in PyTorch.
//! `einsum` takes `torch.einsum`'s equation; core checks it against the
//! operands and hands both backends the contraction order it planned
//! (`vocab::einsum`), as `path` (a caller's own path is checked and run).
//! Its operands must share one dtype (PyTorch's einsum promotes on some
//! contractions and fails on others).

use super::Accept::*;
use super::Out::*;
use super::{c_binary, other, Row};

pub static ROWS: &[Row] = &[
    other("einsum", &["einsum(str equation, Tensor[] tensors, *, int[]? path=None) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[[3,4],[4,5]]], "kwargs": {"equation": "ij,jk->ik"}}"#,
        r#"{"inputs": [[[3,4],[4,5]]], "kwargs": {"equation": "ij,jk"}}"#,
        r#"{"inputs": [[[2,3,4],[2,4,5]]], "kwargs": {"equation": "bij,bjk->bik"}}"#,
        r#"{"inputs": [[[2,3,4],[2,5,4]]], "kwargs": {"equation": "bij,bkj->bik"}}"#,
        r#"{"inputs": [[[3],[4]]], "kwargs": {"equation": "i,j->ij"}}"#,
        r#"{"inputs": [[[4,4]]], "kwargs": {"equation": "ii->"}}"#,
        r#"{"inputs": [[[4,4]]], "kwargs": {"equation": "ii"}}"#,
        r#"{"inputs": [[[4,4]]], "kwargs": {"equation": "ii->i"}}"#,
        r#"{"inputs": [[[3,4]]], "kwargs": {"equation": "ij->ji"}}"#,
        r#"{"inputs": [[[3,4]]], "kwargs": {"equation": "ij->"}}"#,
        r#"{"inputs": [[[3,4]]], "kwargs": {"equation": "ij->j"}}"#,
        r#"{"inputs": [[[5],[5]]], "kwargs": {"equation": "i,i->"}}"#,
        r#"{"inputs": [[[5],[5]]], "kwargs": {"equation": "i,i->i"}}"#,
        r#"{"inputs": [[[3,4],[3,4]]], "kwargs": {"equation": "ij,ij->ij"}}"#,
        r#"{"inputs": [[[2,3],[4,3,5],[2,5]]], "kwargs": {"equation": "bn,anm,bm->ba"}}"#,
        r#"{"inputs": [[[2,3,4],[4,5]]], "kwargs": {"equation": "...ij,...jk->...ik"}}"#,
        r#"{"inputs": [[[2,1,3,4],[5,4,2]]], "kwargs": {"equation": "...ij,...jk"}}"#,
        r#"{"inputs": [[[3,4,5]]], "kwargs": {"equation": "i...->..."}}"#,
        r#"{"inputs": [[[2,3,3]]], "kwargs": {"equation": "...ii->...i"}}"#,
        r#"{"inputs": [[[3,4],[4,5],[5,2]]], "kwargs": {"equation": "ij,jk,kl->il"}}"#,
        r#"{"inputs": [[[4,5],[5,2],[2,6],[6,3]]], "kwargs": {"equation": "ij,jk,kl,lm->im"}}"#,
        r#"{"inputs": [[[2,6],[6,6],[6,6],[6,1]]], "kwargs": {"equation": "ab,bc,cd,de->ae"}}"#,
        r#"{"inputs": [[[2,3,4],[3,5],[4,5]]], "kwargs": {"equation": "ijk,jl,kl->il"}}"#,
        r#"{"inputs": [[[3,3],[4,4]]], "kwargs": {"equation": "ii,jj->ij"}}"#,
        r#"{"inputs": [[[3,3,4],[4,2]]], "kwargs": {"equation": "iij,jk->ik"}}"#,
        r#"{"inputs": [[[2,2,3,4],[2,2,5,4]]], "kwargs": {"equation": "bhqd,bhkd->bhqk"}}"#,
        r#"{"inputs": [[[2,2,3,5],[2,2,5,4]]], "kwargs": {"equation": "bhqk,bhkd->bhqd"}}"#,
        r#"{"inputs": [[[2],[3],[4]]], "kwargs": {"equation": "i,j,k->ijk"}}"#,
        r#"{"inputs": [[[3,4],[3,4],[3,4]]], "kwargs": {"equation": "ij,ij,ij->"}}"#,
        r#"{"inputs": [[[2,3,4],[4,5],[5,2]]], "kwargs": {"equation": "abc,cd,de->abe"}}"#,
        r#"{"inputs": [[[3,4],[4]]], "kwargs": {"equation": "ij,j->i"}}"#,
        r#"{"inputs": [[[4],[3,4]]], "kwargs": {"equation": "j,ij->i"}}"#,
        r#"{"inputs": [[[3,4],[5,4]]], "kwargs": {"equation": "ij,kj->ik"}}"#,
        r#"{"inputs": [[[3],[]]], "kwargs": {"equation": "i,->i"}}"#,
        r#"{"inputs": [[[0,4],[4,5]]], "kwargs": {"equation": "ij,jk->ik"}}"#,
        r#"{"inputs": [[[3,0],[0,5]]], "kwargs": {"equation": "ij,jk->ik"}}"#,
        r#"{"inputs": [[[3,4],[4,5]]], "kwargs": {"equation": "iJ,Jk->ki"}}"#,
        r#"{"inputs": [[[3,4],[4,5],[5,2],[2,3]]], "kwargs": {"equation": "ab,bc,cd,da->"}}"#,
        r#"{"inputs": [[[3,4],[4,5]]], "kwargs": {"equation": " a b , b c -> a c "}}"#,
        r#"{"inputs": [[[4],[4],[4],[4]]], "kwargs": {"equation": "i,i,i,i->i"}}"#,
        r#"{"inputs": [[[4,3],[4,3]]], "kwargs": {"equation": "bi,bi->b"}}"#,
        r#"{"inputs": [[[3,1],[4,5]]], "kwargs": {"equation": "ij,jk->ik"}}"#,
        r#"{"inputs": [[[2,3],[3]]], "kwargs": {"equation": "...,...->..."}}"#,
        r#"{"inputs": [[[2,3,4],[2,4,5],[2,5,3]]], "kwargs": {"equation": "ijk,ikl,ilm->ijm"}}"#,
    ]),
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
