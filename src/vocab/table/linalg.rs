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
use super::{c_binary, other, Domain, Row};

/// A `torch.linalg` row: its inputs must be well-conditioned (or positive-definite),
/// which random oracle values are not, so `python/tests/test_linalg.py` is its suite.
const fn own(r: Row) -> Row {
    Row { domain: Domain::Own, ..r }
}

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
    ]).complex(),
    own(other("linalg.cholesky", &["linalg_cholesky(Tensor self, *, bool upper=False) -> Tensor"], Float, Kernel, true, &[
        r#"{"inputs": [[3, 3]]}"#,
        r#"{"inputs": [[2, 3, 3]], "kwargs": {"upper": true}}"#,
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[0, 0]]}"#,
    ])),
    own(other("linalg.solve_triangular", &["linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor"], Float, Kernel, true, &[
        r#"{"inputs": [[3, 3], [3, 2]], "kwargs": {"upper": true}}"#,
        r#"{"inputs": [[2, 3, 3], [3, 4]], "kwargs": {"upper": false, "left": true, "unitriangular": true}}"#,
        r#"{"inputs": [[3, 3], [2, 3]], "kwargs": {"upper": false, "left": false}}"#,
    ])),
    own(other("linalg.solve", &["linalg_solve(Tensor A, Tensor B, *, bool left=True) -> Tensor"], Float, Kernel, true, &[
        r#"{"inputs": [[3, 3], [3, 2]]}"#,
        r#"{"inputs": [[2, 3, 3], [3]]}"#,
        r#"{"inputs": [[2, 3, 3], [2, 3]]}"#,
        r#"{"inputs": [[3, 3], [4, 3]], "kwargs": {"left": false}}"#,
    ])),
    own(other("linalg.inv", &["linalg_inv(Tensor A) -> Tensor"], Float, Kernel, true, &[r#"{"inputs": [[3, 3]]}"#, r#"{"inputs": [[2, 4, 4]]}"#, r#"{"inputs": [[0, 0]]}"#])),
    own(other("linalg.det", &["linalg_det(Tensor A) -> Tensor"], Float, Kernel, true, &[r#"{"inputs": [[3, 3]]}"#, r#"{"inputs": [[2, 4, 4]]}"#])),
    own(other("linalg.slogdet", &["linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)"], Float, Kernel, true, &[r#"{"inputs": [[3, 3]]}"#, r#"{"inputs": [[2, 4, 4]]}"#])),
    own(other("linalg.eigh", &["linalg_eigh(Tensor self, str UPLO=\"L\") -> (Tensor eigenvalues, Tensor eigenvectors)"], Float, Kernel, true, &[
        r#"{"inputs": [[3, 3]]}"#,
        r#"{"inputs": [[2, 4, 4]], "kwargs": {"UPLO": "U"}}"#,
    ])),
    own(other("linalg.eigvalsh", &["linalg_eigvalsh(Tensor self, str UPLO=\"L\") -> Tensor"], Float, Kernel, true, &[r#"{"inputs": [[3, 3]]}"#, r#"{"inputs": [[2, 4, 4]], "kwargs": {"UPLO": "U"}}"#])),
    own(other("linalg.svd", &["linalg_svd(Tensor A, bool full_matrices=True) -> (Tensor U, Tensor S, Tensor Vh)"], Float, Kernel, true, &[
        r#"{"inputs": [[4, 3]]}"#,
        r#"{"inputs": [[2, 3, 5]], "kwargs": {"full_matrices": false}}"#,
        r#"{"inputs": [[0, 3]], "kwargs": {"full_matrices": true}}"#,
    ])),
    own(other("linalg.svdvals", &["linalg_svdvals(Tensor A) -> Tensor"], Float, Kernel, true, &[r#"{"inputs": [[4, 3]]}"#, r#"{"inputs": [[2, 3, 5]]}"#])),
    own(other("linalg.qr", &["linalg_qr(Tensor A, str mode=\"reduced\") -> (Tensor Q, Tensor R)"], Float, Kernel, true, &[
        r#"{"inputs": [[4, 3]]}"#,
        r#"{"inputs": [[2, 3, 5]], "kwargs": {"mode": "complete"}}"#,
        r#"{"inputs": [[4, 3]], "kwargs": {"mode": "r"}}"#,
        r#"{"inputs": [[4, 3]], "kwargs": {"mode": "full"}}"#,
    ])),
    own(other("linalg.pinv", &["linalg_pinv.atol_rtol_float(Tensor self, *, float? atol=None, float? rtol=None, bool hermitian=False) -> Tensor"], Float, Kernel, true, &[
        r#"{"inputs": [[4, 3]]}"#,
        r#"{"inputs": [[2, 3, 5]], "kwargs": {"rtol": 0.1}}"#,
        r#"{"inputs": [[3, 3]], "kwargs": {"atol": 0.5, "hermitian": true}}"#,
    ])),
    own(other("linalg.lstsq", &["linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (Tensor solution, Tensor residuals, Tensor rank, Tensor singular_values)"], Float, Kernel, true, &[
        r#"{"inputs": [[5, 3], [5, 2]]}"#,
        r#"{"inputs": [[2, 3, 4], [2, 3, 1]], "kwargs": {"driver": "gelsd"}}"#,
        r#"{"inputs": [[5, 3], [5, 2]], "kwargs": {"driver": "gelss"}}"#,
        r#"{"inputs": [[5, 3], [5, 2]], "kwargs": {"driver": "gels"}}"#,
        r#"{"inputs": [[5, 3], [4, 2]]}"#,
    ])),
    own(other("linalg.matrix_norm", &[
        "linalg_matrix_norm.str_ord(Tensor self, str ord=\"fro\", int[] dim=[-2,-1], bool keepdim=False) -> Tensor",
        "linalg_matrix_norm(Tensor self, Scalar ord, int[] dim=[-2,-1], bool keepdim=False) -> Tensor",
    ], Float, Kernel, true, &[
        r#"{"inputs": [[4, 3]]}"#,
        r#"{"inputs": [[2, 3, 5]], "kwargs": {"ord": "nuc", "keepdim": true}}"#,
        r#"{"inputs": [[3, 2, 4]], "kwargs": {"ord": 1, "dim": [0, 2]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"ord": -2}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"ord": 3}}"#,
    ])),
    // Real inputs (complex ones are refused on both backends); complex eigenvalues and unit-norm eigenvectors.
    own(other("linalg.eig", &["linalg_eig(Tensor self) -> (Tensor eigenvalues, Tensor eigenvectors)"], Float, Kernel, true, &[r#"{"inputs": [[3, 3]]}"#, r#"{"inputs": [[2, 4, 4]]}"#])),
    own(other("linalg.matrix_exp", &["linalg_matrix_exp(Tensor self) -> Tensor"], Float, Kernel, true, &[r#"{"inputs": [[3, 3]]}"#, r#"{"inputs": [[2, 4, 4]]}"#, r#"{"inputs": [[0, 0]]}"#])),
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
    )]).complex(),
    other("mm", &["mm(Tensor self, Tensor mat2) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4], [4, 5]]}"#,
        r#"{"inputs": [[0, 4], [4, 2]]}"#,
        r#"{"inputs": [[3], [3, 2]]}"#,
    ]).complex(),
    other("bmm", &["bmm(Tensor self, Tensor mat2) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[2, 3, 4], [2, 4, 5]]}"#,
        r#"{"inputs": [[2, 3, 4], [3, 4, 5]]}"#,
        r#"{"inputs": [[0, 3, 4], [0, 4, 1]]}"#,
    ]).complex(),
];
