//! THE op table: every op of the generic entry (`enkai_op`), one row each,
//! in one file per family (`pointwise.rs`, ...).
//! A row gives the PyTorch name, its overloads as PyTorch's schema lines
//! (tried in order, as PyTorch's argument parser tries them), the dtype
//! rule, whether it is differentiable, whether the native backend runs it,
//! and the oracle test's input domain. Everything else is derived from here:
//! the argument parsing and checks (`crate::opcall`), the schema JSON
//! (`enkai_op_schema`), the Python methods, the fuzzer's list, and the
//! generated oracle suite (`python/tests/test_op_table.py`). libtorch runs
//! each overload by its schema name; the native backend looks its kernel up
//! by the same name (`backend::native::opk`).
//!
//! Adding an op: a row here, a kernel (with its backward) in
//! `backend/native/opk/`, and nothing else (README, "Adding an op").

/// Which input dtypes an op accepts (checked in core, before any backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// Every dtype.
    All,
    /// Numbers: every dtype but bool.
    Num,
    /// Floating dtypes only.
    Float,
    /// Signed integers and floats (not bool, not uint8).
    Signed,
}

/// The result dtype, from the inputs' promoted dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// The promoted dtype.
    Same,
    /// The promoted dtype, a complex one as its component dtype (`abs`).
    Real,
    /// Integers and bool compute in fp32 (`torch.get_default_dtype()`).
    ToFloat,
    /// bool (comparisons, predicates).
    Bool,
    /// int64 (indices, counts).
    I64,
    /// Decided by the kernel (shape ops, indexing, creation).
    Kernel,
}

/// What core checks generically beyond arguments and dtypes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Elementwise over broadcast inputs: core checks that they broadcast.
    Pointwise,
    /// Everything else: the kernel checks its own shapes (with core's dims already normalised).
    Other,
}

/// The oracle suite's input values for an op (`python/tests/test_op_table.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Normal values.
    Any,
    /// Positive values (log, sqrt).
    Pos,
    /// Values in (-1, 1) (asin, acos).
    Unit,
    /// No oracle values: random or data-dependent results, tested by their own suite.
    Own,
}

#[derive(Clone, Copy)]
pub struct Row {
    pub name: &'static str,
    /// The oracle suite's cases for ops that are not elementwise (elementwise
    /// ops get generated shapes): JSON objects `{"inputs": [spec, ...],
    /// "kwargs": {...}}`, where a spec is a shape (`[3, 4]`: values of the
    /// dtype under test) or `{"shape": [3], "dtype": "int64", "range": [0, 3]}`
    /// (fixed-dtype inputs: indices, masks), or a list of specs (a TensorList).
    pub cases: &'static [&'static str],
    pub sigs: &'static [&'static str],
    pub accept: Accept,
    pub out: Out,
    pub kind: Kind,
    /// Differentiable in its floating tensor inputs.
    pub grad: bool,
    /// The native backend runs it (libtorch runs every row).
    pub native: bool,
    pub domain: Domain,
    /// The typed C functions that run this op (`enkai_tensor_add`): generated
    /// into `src/ffi/typed.rs` by `make header` (`tests/header.rs`).
    pub c: &'static [CFn],
    /// The Python module whose function a functional signature (`=>`) is:
    /// `torch.nn.functional`, or `torch` for `torch.lstm`-like rows.
    pub python: &'static str,
    /// libtorch runs the row as the ATen operator its signature names (or
    /// lowers to). False for a Python function that picks among operators
    /// by its arguments (`F.interpolate`): the torch backend has its own
    /// kernel for it, and the schema names the Python function alone.
    pub aten: bool,
    /// Takes complex tensors (complex64, complex128) besides what `accept` says.
    pub complex: bool,
}

/// A typed C function of an op: one overload, with C parameters that map
/// onto its parameters. The generated function runs the overload as
/// `enkai_op` would (`crate::opcall::Typed`), so the two agree by construction.
#[derive(Debug, Clone, Copy)]
pub struct CFn {
    pub name: &'static str,
    /// `name.overload` as in the row's schema lines (`sum.dim_IntList`).
    pub overload: &'static str,
    /// The C parameters in order: (C name, kind). The tensors go to the
    /// overload's Tensor parameters in order; the others name their parameter.
    pub params: &'static [(&'static str, CArg)],
    /// The header's doc comment (lines joined by `\n`), before the generated `# Safety`.
    pub doc: &'static str,
}

/// How a C parameter becomes an argument of the overload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CArg {
    /// `int64_t` handle: the next Tensor parameter.
    Tensor,
    /// `int64_t`: the int parameter of that name.
    Int(&'static str),
    /// `int`, non-zero = true: the bool parameter of that name.
    Flag(&'static str),
    /// `int64_t`: the `int[1]?` dim parameter of that name, every dim when
    /// negative (the seed's `sum`/`mean`, kept for the client).
    DimOrAll(&'static str),
    /// `const char *` JSON shape with at most one `-1` (`json::DimsRule::Target`).
    Target(&'static str),
}

/// A typed function of two tensors `a` and `b`.
pub const fn c_binary(name: &'static str, overload: &'static str, doc: &'static str) -> CFn {
    CFn { name, overload, params: &[("a", CArg::Tensor), ("b", CArg::Tensor)], doc }
}

/// A typed function of one tensor `x`.
pub const fn c_unary(name: &'static str, overload: &'static str, doc: &'static str) -> CFn {
    CFn { name, overload, params: &[("x", CArg::Tensor)], doc }
}

impl Row {
    /// The row with typed C functions.
    pub const fn with_c(self, c: &'static [CFn]) -> Row {
        Row { c, ..self }
    }

    /// The row's functional signature is `torch.<name>`'s, not `torch.nn.functional`'s.
    pub const fn in_torch(self) -> Row {
        Row { python: "torch", ..self }
    }

    /// The row takes complex tensors.
    pub const fn complex(self) -> Row {
        Row { complex: true, ..self }
    }

    /// The row is a Python function, not one ATen operator (see `aten`).
    pub const fn python_only(self) -> Row {
        Row { aten: false, ..self }
    }
}

mod binary;
mod complex;
mod conv;
mod create;
mod fft;
mod index;
mod inplace;
mod linalg;
mod loss;
mod nn;
mod norm;
mod pointwise;
mod reduce;
mod rnn;
mod sample;
mod shape;
mod sort;

use Domain::*;
use Kind::*;

/// The table, in sections by family; `crate::vocab::ops()` reads them in order,
/// then the in-place forms derived from their out-of-place twins (`inplace::FORMS`).
pub static SECTIONS: &[&[Row]] = &[pointwise::ROWS, binary::ROWS, complex::ROWS, fft::ROWS, reduce::ROWS, linalg::ROWS, nn::ROWS, norm::ROWS, loss::ROWS, rnn::ROWS, sample::ROWS, shape::ROWS, index::ROWS, sort::ROWS, conv::ROWS, create::ROWS, inplace::ROWS];

/// Every row, in the table's order, with the index of each derived in-place
/// form's twin. Called once, by `crate::vocab`'s table: the derived rows live
/// as long as the process, as the static ones do.
pub fn rows() -> Vec<(&'static Row, Option<usize>)> {
    let mut rows: Vec<(&'static Row, Option<usize>)> = SECTIONS.iter().flat_map(|s| s.iter()).map(|r| (r, None)).collect();
    for &(name, extra) in inplace::FORMS {
        let twin = rows.iter().position(|(r, _)| r.name == name.trim_end_matches('_')).unwrap_or_else(|| panic!("{name}: no twin in the table"));
        rows.push((Box::leak(Box::new(inplace::derive(name, extra, rows[twin].0))), Some(twin)));
    }
    rows
}

/// A one-tensor elementwise op.
pub const fn unary(name: &'static str, sigs: &'static [&'static str], accept: Accept, out: Out, grad: bool, domain: Domain) -> Row {
    Row { name, cases: &[], sigs, accept, out, kind: Pointwise, grad, native: true, domain, c: &[], python: "torch.nn.functional", aten: true, complex: false }
}

/// An elementwise op of several tensors (or a tensor and scalars).
pub const fn pointwise(name: &'static str, sigs: &'static [&'static str], accept: Accept, out: Out, grad: bool) -> Row {
    Row { name, cases: &[], sigs, accept, out, kind: Pointwise, grad, native: true, domain: Any, c: &[], python: "torch.nn.functional", aten: true, complex: false }
}

/// Any other op.
pub const fn other(name: &'static str, sigs: &'static [&'static str], accept: Accept, out: Out, grad: bool, cases: &'static [&'static str]) -> Row {
    Row { name, cases, sigs, accept, out, kind: Other, grad, native: true, domain: Any, c: &[], python: "torch.nn.functional", aten: true, complex: false }
}

