//! The op table's shape section (see `super`): views (sharing the input's
//! storage, as PyTorch's), and the ops that rearrange elements into a copy.

use super::Accept::*;
use super::Out::*;
use super::{c_unary, other, CArg, CFn, Row};

pub static ROWS: &[Row] = &[
    // ------------------------------------------------------------------ views
    other("permute", &["permute(Tensor(a) self, int[] dims) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"dims": [2, 0, 1]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dims": [-1, 0]}}"#,
        r#"{"inputs": [[]], "kwargs": {"dims": []}}"#,
        r#"{"inputs": [[0, 3, 1]], "kwargs": {"dims": [1, 2, 0]}}"#,
    ]).complex(),
    other("squeeze", &[
        "squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)",
        "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
        "squeeze(Tensor(a) self) -> Tensor(a)",
    ], All, Kernel, true, &[
        r#"{"inputs": [[1, 3, 1, 4]]}"#,
        r#"{"inputs": [[1, 3, 1, 4]], "kwargs": {"dim": -2}}"#,
        r#"{"inputs": [[1, 3, 1, 0]], "kwargs": {"dim": [0, 1, -1]}}"#,
        r#"{"inputs": [[]], "kwargs": {"dim": 0}}"#,
    ]).complex(),
    other("unsqueeze", &["unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[]], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[0, 2]], "kwargs": {"dim": 0}}"#,
    ]).complex(),
    other("expand", &["expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 1]], "kwargs": {"size": [2, 3, 4]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"size": [-1, 4], "implicit": true}}"#,
        r#"{"inputs": [[]], "kwargs": {"size": [2, 0]}}"#,
        r#"{"inputs": [[1, 4]], "kwargs": {"size": [3, 5, 4]}}"#,
    ]).complex(),
    other("broadcast_to", &["broadcast_to(Tensor(a) self, SymInt[] size) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 1]], "kwargs": {"size": [2, -1, 5]}}"#,
        r#"{"inputs": [[]], "kwargs": {"size": [3]}}"#,
    ]).complex(),
    other("flatten", &["flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[2, 3, 4]]}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"start_dim": 1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"start_dim": -2, "end_dim": 0}}"#,
        r#"{"inputs": [[]]}"#,
    ]).complex(),
    other("unflatten", &["unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 1, "sizes": [2, -1]}}"#,
        r#"{"inputs": [[6, 2]], "kwargs": {"dim": -2, "sizes": [3, 1, 2]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 0, "sizes": [-1]}}"#,
        r#"{"inputs": [[0, 4]], "kwargs": {"dim": 0, "sizes": [0, 5]}}"#,
    ]).complex(),
    other("narrow", &["narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 1, "start": 1, "length": 2}}"#,
        r#"{"inputs": [[5, 2]], "kwargs": {"dim": -2, "start": -2, "length": 2}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 0, "start": 3, "length": 0}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 0, "start": -3, "length": 3}}"#,
    ]).complex(),
    other("select", &["select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 1, "index": -1}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"dim": 1, "index": 2}}"#,
        r#"{"inputs": [[4]], "kwargs": {"dim": 0, "index": 3}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dim": 0, "index": -3}}"#,
    ]).complex(),
    other("split", &[
        "split.Tensor(Tensor(a -> *) self, SymInt split_size_or_sections, int dim=0) -> Tensor(a)[]",
        "split.sizes(Tensor(a -> *) self, SymInt[] split_size_or_sections, int dim=0) -> Tensor(a)[]",
    ], All, Kernel, true, &[
        r#"{"inputs": [[5, 4]], "kwargs": {"split_size_or_sections": 2}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"split_size_or_sections": [1, 0, 3], "dim": -1}}"#,
        r#"{"inputs": [[3, 0]], "kwargs": {"split_size_or_sections": 0, "dim": 1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"split_size_or_sections": 9, "dim": 1}}"#,
    ]).complex(),
    other("chunk", &["chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]"], All, Kernel, true, &[
        r#"{"inputs": [[5, 4]], "kwargs": {"chunks": 2}}"#,
        r#"{"inputs": [[3, 6]], "kwargs": {"chunks": 4, "dim": -1}}"#,
        r#"{"inputs": [[3, 0]], "kwargs": {"chunks": 3, "dim": 1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"chunks": 5}}"#,
    ]).complex(),
    other("diagonal", &["diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"offset": -1, "dim1": 1, "dim2": 0}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"offset": 2, "dim1": -1, "dim2": 1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"offset": 7}}"#,
    ]).complex(),
    other("movedim", &[
        "movedim.int(Tensor(a) self, int source, int destination) -> Tensor(a)",
        "movedim.intlist(Tensor(a) self, int[] source, int[] destination) -> Tensor(a)",
    ], All, Kernel, true, &[
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"source": 0, "destination": -1}}"#,
        r#"{"inputs": [[2, 3, 4, 5]], "kwargs": {"source": [3, 0], "destination": [1, 3]}}"#,
        r#"{"inputs": [[]], "kwargs": {"source": 0, "destination": -1}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"source": [], "destination": []}}"#,
    ]).complex(),
    other("transpose", &["transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"dim0": 0, "dim1": 2}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dim0": -1, "dim1": 0}}"#,
        r#"{"inputs": [[]], "kwargs": {"dim0": 0, "dim1": -1}}"#,
        r#"{"inputs": [[0, 3]], "kwargs": {"dim0": 1, "dim1": 1}}"#,
    ])
    .with_c(&[CFn {
        name: "enkai_tensor_transpose",
        overload: "transpose.int",
        params: &[("x", CArg::Tensor), ("d0", CArg::Int("dim0")), ("d1", CArg::Int("dim1"))],
        doc: "`x.transpose(d0, d1)`, a view; negative dims count from the end.\nErrors: `E_SHAPE` (dim out of range).",
    }]).complex(),
    other("t", &["t(Tensor(a) self) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[3]]}"#,
        r#"{"inputs": [[]]}"#,
        r#"{"inputs": [[2, 3, 4]]}"#,
    ]).complex(),
    other("reshape", &["reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"shape": [2, -1]}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"shape": [24]}}"#,
        r#"{"inputs": [[]], "kwargs": {"shape": [1, 1]}}"#,
        r#"{"inputs": [[0, 4]], "kwargs": {"shape": [4, 0, -1]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"shape": [5, -1]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"shape": [-1, -1]}}"#,
    ])
    .with_c(&[CFn {
        name: "enkai_tensor_reshape",
        overload: "reshape",
        params: &[("x", CArg::Tensor), ("shape", CArg::Target("shape"))],
        doc: "`x.reshape(shape)`: a view when the strides allow one, else a copy;\n`shape` is a JSON array that may hold one `-1`.\nErrors: `E_NULL_POINTER`, `E_INVALID_ARG`, `E_SHAPE` (element count differs).",
    }]).complex(),
    other("view", &["view(Tensor(a) self, SymInt[] size) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"size": [4, 3]}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"size": [-1, 4]}}"#,
        r#"{"inputs": [[]], "kwargs": {"size": [1]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"size": [12]}}"#,
    ]).complex(),
    other("detach", &["detach(Tensor(a) self) -> Tensor(a)"], All, Kernel, false, &[r#"{"inputs": [[3, 4]]}"#, r#"{"inputs": [[]]}"#])
        .with_c(&[c_unary("enkai_tensor_detach", "detach", "`x.detach()`: shares storage, records no gradient.\nErrors: `E_HANDLE_*` only.")]).complex(),
    // ------------------------------------------------------------ copies
    other("stack", &["stack(Tensor[] tensors, int dim=0) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[[3, 4], [3, 4], [3, 4]]], "kwargs": {"dim": 1}}"#,
        r#"{"inputs": [[[3, 4], [3, 4]]], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[[], []]]}"#,
        r#"{"inputs": [[[3, 4]]], "kwargs": {"dim": 2}}"#,
    ]).complex(),
    other("cat", &["cat(Tensor[] tensors, int dim=0) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[[3, 4], [2, 4], [0, 4]]]}"#,
        r#"{"inputs": [[[3, 4], [3, 1], [3, 2]]], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[[0], [3, 4], [3, 4]]], "kwargs": {"dim": -1}}"#,
        r#"{"inputs": [[[3, 4], {"shape": [3, 2], "dtype": "int64", "range": [-5, 5]}, {"shape": [3, 1], "dtype": "bool"}]], "kwargs": {"dim": 1}}"#,
    ]).complex(),
    other("repeat", &["repeat(Tensor self, SymInt[] repeats) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"repeats": [2, 3]}}"#,
        r#"{"inputs": [[3, 1]], "kwargs": {"repeats": [2, 1, 0]}}"#,
        r#"{"inputs": [[]], "kwargs": {"repeats": [3, 2]}}"#,
        r#"{"inputs": [[0, 4]], "kwargs": {"repeats": [1, 1]}}"#,
    ]).complex(),
    other("tile", &["tile(Tensor self, SymInt[] dims) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"dims": [2]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dims": [2, 1, 3]}}"#,
        r#"{"inputs": [[]], "kwargs": {"dims": []}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"dims": [0, 2]}}"#,
    ]).complex(),
    other("flip", &["flip(Tensor self, int[] dims) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"dims": [0, -1]}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"dims": [1]}}"#,
        r#"{"inputs": [[]], "kwargs": {"dims": [0]}}"#,
        r#"{"inputs": [[0, 3]], "kwargs": {"dims": [1, 0]}}"#,
    ]).complex(),
    other("roll", &["roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]], "kwargs": {"shifts": [5]}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"shifts": [-1, 6], "dims": [1, 0]}}"#,
        r#"{"inputs": [[2, 3, 4]], "kwargs": {"shifts": [1, 2], "dims": [-1, -1]}}"#,
        r#"{"inputs": [[0, 3]], "kwargs": {"shifts": [2], "dims": [0]}}"#,
    ]).complex(),
    other("contiguous", &["contiguous(Tensor(a) self, *, MemoryFormat memory_format=0) -> Tensor(a)"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[]]}"#,
    ]).complex(),
    other("clone", &["clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[]]}"#,
        r#"{"inputs": [[2, 0, 3]]}"#,
    ]).complex(),
    other("tril", &["tril(Tensor self, SymInt diagonal=0) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[2, 4, 3]], "kwargs": {"diagonal": -1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"diagonal": 2}}"#,
        r#"{"inputs": [[0, 1, 2]], "kwargs": {"diagonal": 1}}"#,
    ]),
    other("triu", &["triu(Tensor self, SymInt diagonal=0) -> Tensor"], All, Kernel, true, &[
        r#"{"inputs": [[3, 4]]}"#,
        r#"{"inputs": [[2, 4, 3]], "kwargs": {"diagonal": 1}}"#,
        r#"{"inputs": [[3, 4]], "kwargs": {"diagonal": -5}}"#,
        r#"{"inputs": [[0, 3]]}"#,
    ]),
];
