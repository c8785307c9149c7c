//! The vocabulary both backends share, below them: the op table and its
//! parsed schemas, the argument values a call carries, and the shape and
//! dtype rules (broadcasting, dims, type promotion). Core checks a call
//! against these once; the backends receive arguments already checked.

pub mod conv;
pub mod dist;
pub mod einsum;
pub mod fft;
pub mod gpt;
pub mod kinds;
pub mod norm;
pub mod optim;
pub mod rnn;
pub mod sample;
pub mod schema;
pub mod table;

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
pub use schema::{Param, Ret, Scalar, Sig, Ty, Value};
pub use table::{Accept, Domain, Kind, Out, Row};

/// An input's shape and dtype as a core shape rule reads it (None: an
/// optional input left out).
pub type In<'a> = Option<(&'a [i64], DType)>;

/// A rule core checks a call against before either backend runs, for ops
/// whose libtorch kernels do not check their inputs or word the refusal as
/// their own (`E_TORCH`): the recurrent layers (`rnn`), the norms (`norm`)
/// and the resampling layers (`sample`).
pub type ShapeRule = fn(&Call, &[In]) -> Result<()>;

/// The core shape rule of op `name`, if it has one.
pub fn shape_rule(name: &str) -> Option<ShapeRule> {
    match name {
        "lstm" | "gru" | "lstm_cell" | "gru_cell" => Some(rnn::check),
        "batch_norm" | "group_norm" => Some(norm::check),
        "interpolate" | "unfold" | "fold" => Some(sample::check),
        _ if name.starts_with("linalg.") => Some(linalg_check),
        _ if name.starts_with("fft.") => Some(fft::check),
        "view_as_complex" | "complex" | "polar" => Some(complex_parts),
        _ => None,
    }
}

/// `torch.linalg`'s input checks, worded as PyTorch's and with one code on
/// both backends: matrices (at least 2 dims, square where the op needs it)
/// of fp32 or fp64, and a right-hand side that fits.
fn linalg_check(call: &Call, ins: &[In]) -> Result<()> {
    let op = call.op.name();
    let Some(Some((a, dt))) = ins.first() else { return Ok(()) };
    linalg_args(call)?;
    // matrix_exp and matrix_norm's elementwise norms also take half dtypes, as
    // PyTorch's CPU kernels do; the SVD-based norms do not.
    let spectral_norm = op == "linalg.matrix_norm" && (call.str("ord") == Some("nuc") || call.float("ord").is_some_and(|o| o.abs() == 2.0));
    let half_ok = matches!(op, "linalg.matrix_norm" | "linalg.matrix_exp") && !spectral_norm && matches!(dt, DType::F16 | DType::BF16);
    if !matches!(dt, DType::F32 | DType::F64) && !half_ok {
        crate::bail!(E_DTYPE, "{op}: {} is not supported (it takes fp32 and fp64)", dt.name());
    }
    if a.len() < 2 {
        crate::bail!(E_SHAPE, "{op}: The input tensor A must have at least 2 dimensions (got {}).", fmt(a));
    }
    let (m, n) = (a[a.len() - 2], a[a.len() - 1]);
    let square = match op {
        "linalg.svd" | "linalg.svdvals" | "linalg.qr" | "linalg.lstsq" | "linalg.matrix_norm" => false,
        "linalg.pinv" => call.bool("hermitian").unwrap_or(false),
        _ => true,
    };
    if square && m != n {
        crate::bail!(E_SHAPE, "{op}: A must be batches of square matrices, but they are {m} by {n} matrices");
    }
    if let Some(Some((b, bdt))) = ins.get(1) {
        if bdt != dt {
            crate::bail!(E_DTYPE, "{op}: A is {} and B is {} (they must share one dtype)", dt.name(), bdt.name());
        }
        let left = call.bool("left").unwrap_or(true);
        // B's rows meet A's columns in a solve, A's rows in a least-squares fit.
        let rows = if op == "linalg.lstsq" { m } else { n };
        // A batch of vectors: 1-D, or A's batch shape plus one dim (PyTorch's rule).
        let vector = matches!(op, "linalg.solve" | "linalg.lstsq") && left && (b.len() == 1 || (b.len() + 1 == a.len() && b[..] == a[..a.len() - 1]));
        let fits = if vector {
            b[b.len() - 1] == rows
        } else {
            b.len() >= 2 && if left { b[b.len() - 2] == rows } else { b[b.len() - 1] == rows }
        };
        if !fits || broadcast(&a[..a.len() - 2], &b[..b.len().saturating_sub(if vector { 1 } else { 2 })]).is_none() {
            crate::bail!(E_SHAPE, "{op}: Incompatible shapes of A and B for the equation {} ({} and {})", if op == "linalg.lstsq" { "AX ≈ B" } else if left { "AX = B" } else { "XA = B" }, fmt(a), fmt(b));
        }
    }
    Ok(())
}

/// The real parts a complex tensor is made of: fp32 or fp64 (PyTorch's
/// complex32 from half inputs is no dtype here), and for `view_as_complex`
/// a last dim of 2 (the layout's conditions are checked with the strides).
fn complex_parts(call: &Call, ins: &[In]) -> Result<()> {
    let op = call.op.name();
    for (_, dt) in ins.iter().flatten() {
        if !matches!(dt, DType::F32 | DType::F64) {
            crate::bail!(E_DTYPE, "{op}: expected float or double inputs, got {}", dt.name());
        }
    }
    if let (Some(Some((s, _))), "view_as_complex") = (ins.first(), op) {
        if s.last() != Some(&2) {
            crate::bail!(E_SHAPE, "view_as_complex: the tensor must have a last dimension of size 2, got {}", fmt(s));
        }
    }
    Ok(())
}

/// The string and order arguments of `torch.linalg`, checked once for both
/// backends (libtorch's own refusals of them are generic errors).
fn linalg_args(call: &Call) -> Result<()> {
    let op = call.op.name();
    match op {
        "linalg.qr" => {
            let mode = call.str("mode").unwrap_or("reduced");
            if !matches!(mode, "reduced" | "complete" | "r") {
                crate::bail!(E_INVALID_ARG, "{op}: qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', or 'complete'");
            }
        }
        "linalg.lstsq" => {
            if let Some(d) = call.str("driver") {
                if !matches!(d, "gels" | "gelsy" | "gelsd" | "gelss") {
                    crate::bail!(E_INVALID_ARG, "{op}: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), got '{d}'");
                }
            }
        }
        "linalg.matrix_norm" => match (call.str("ord"), call.float("ord")) {
            (Some("fro" | "nuc"), _) | (None, None) => {}
            (None, Some(o)) if [1.0, 2.0, f64::INFINITY].contains(&o.abs()) => {}
            (Some(s), _) => crate::bail!(E_INVALID_ARG, "{op}: Order {s} not supported."),
            (None, Some(o)) => crate::bail!(E_INVALID_ARG, "{op}: Order {o} not supported."),
        },
        _ => {}
    }
    Ok(())
}

/// A rule that completes a call's arguments from its inputs' shapes and
/// dtypes, run by core before either backend (einsum's planned `path`).
pub type ArgRule = fn(&Sig, &mut [Value], &[In]) -> Result<()>;

/// The argument rule of op `name`, if it has one.
pub fn arg_rule(name: &str) -> Option<ArgRule> {
    match name {
        "einsum" => Some(einsum::fill),
        _ => None,
    }
}

/// A table row with its parsed overloads.
pub struct OpDef {
    pub index: usize,
    pub row: &'static Row,
    pub sigs: Vec<Sig>,
    /// For an in-place form derived from an out-of-place op: that op's index
    /// (its overloads are the twin's, in the same order).
    pub twin: Option<usize>,
}

impl OpDef {
    pub fn name(&self) -> &'static str {
        self.row.name
    }

    /// An in-place form (`add_`): PyTorch's names of those, and only those, end in `_`.
    pub fn inplace(&self) -> bool {
        self.row.name.ends_with('_')
    }
}

/// FNV-1a: lookups by op name and kwargs text hash short strings, where
/// SipHash's setup dominates (the generic entry's per-call budget is tens
/// of nanoseconds; the keys are not attacker-chosen in a way that matters:
/// the tables are bounded).
#[derive(Default, Clone, Copy)]
pub struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 { 0xcbf2_9ce4_8422_2325 } else { self.0 };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        self.0 = h;
    }
}

pub type FnvBuild = std::hash::BuildHasherDefault<Fnv>;

struct Table {
    ops: Vec<OpDef>,
    by_name: HashMap<&'static str, usize, FnvBuild>,
}

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        let ops: Vec<OpDef> = table::rows()
            .into_iter()
            .enumerate()
            .map(|(index, (row, twin))| OpDef {
                index,
                row,
                twin,
                // The rows are constants checked by the unit tests below: a bad one is a build defect.
                sigs: row.sigs.iter().map(|s| schema::parse(s).unwrap_or_else(|e| panic!("{}", e.detail))).collect(),
            })
            .collect();
        let by_name = ops.iter().map(|o| (o.row.name, o.index)).collect();
        Table { ops, by_name }
    })
}

pub fn ops() -> &'static [OpDef] {
    &table().ops
}

pub fn find(name: &str) -> Option<&'static OpDef> {
    let t = table();
    t.by_name.get(name).map(|&i| &t.ops[i])
}

/// One checked call: the op, the overload, and one value per parameter of
/// that overload (defaults filled in, dims normalised to `[0, rank)`), with
/// the result dtype core derived for elementwise ops. Tensor values index
/// the backend's input slice.
pub struct Call<'a> {
    pub op: &'static OpDef,
    pub sig: usize,
    pub args: &'a [Value],
    pub out_dtype: Option<DType>,
    /// For elementwise ops: the promoted dtype of the inputs (`torch.result_type`), which comparisons compute in.
    pub promoted: Option<DType>,
}

impl Call<'_> {
    pub fn sig(&self) -> &'static Sig {
        &self.op.sigs[self.sig]
    }

    /// `name.overload` of the overload being run (how backends key their kernels).
    pub fn overload(&self) -> &'static str {
        self.sig().text.split('(').next().unwrap_or("")
    }

    fn arg(&self, name: &str) -> &Value {
        match self.sig().param(name) {
            Some(i) => &self.args[i],
            None => &Value::None,
        }
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.arg(name) {
            Value::Int(v) => Some(*v),
            Value::Scalar(Scalar::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn ints(&self, name: &str) -> Option<&[i64]> {
        match self.arg(name) {
            Value::Ints(v) => Some(v),
            _ => None,
        }
    }

    pub fn float(&self, name: &str) -> Option<f64> {
        match self.arg(name) {
            Value::Float(v) => Some(*v),
            Value::Scalar(s) => Some(s.to_f64()),
            Value::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    pub fn scalar(&self, name: &str) -> Option<Scalar> {
        match self.arg(name) {
            Value::Scalar(s) => Some(*s),
            _ => None,
        }
    }

    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.arg(name) {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        match self.arg(name) {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn dtype(&self, name: &str) -> Option<DType> {
        match self.arg(name) {
            Value::DType(d) => Some(*d),
            _ => None,
        }
    }

    /// The input index of a Tensor parameter, when given.
    pub fn tensor(&self, name: &str) -> Option<usize> {
        match self.arg(name) {
            Value::Tensor(i) => Some(*i),
            _ => None,
        }
    }
}

/// ATen parameter names whose documented Python name differs, as
/// (ATen, Python): a row's schema line uses the Python name (so `enkai_op`'s
/// kwargs are Python's), and the schema JSON gives the ATen one as `aten`.
pub const RENAMES: &[(&str, &str)] = &[("split_size", "split_size_or_sections"), ("split_sizes", "split_size_or_sections")];

/// The ATen name of a parameter a row names `ours`.
pub fn aten_name(ours: &str) -> Option<&'static str> {
    RENAMES.iter().find(|r| r.1 == ours).map(|r| r.0)
}

// ------------------------------------------------------------- shape rules

/// A dim in `[-rank, rank)` (or `[-1, 0]` for a 0-dim tensor, as PyTorch allows), normalised.
pub fn norm_dim(op: &str, dim: i64, s: &[i64]) -> Result<i64> {
    let rank = (s.len() as i64).max(1);
    if dim < -rank || dim >= rank {
        crate::bail!(E_SHAPE, "{op}: dim {dim} is out of range for shape {}", fmt(s));
    }
    Ok(if dim < 0 { dim + rank } else { dim })
}

/// NumPy broadcasting of two shapes, or `None` when they do not fit.
pub fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    broadcast_dims(a, b).map(|d| d.to_vec())
}

/// `torch.matmul`'s shape rule: 1-D operands are promoted, batch dims broadcast.
pub fn matmul_fits(a: &[i64], b: &[i64]) -> bool {
    if a.is_empty() || b.is_empty() {
        return false;
    }
    let k_b = if b.len() == 1 { b[0] } else { b[b.len() - 2] };
    a[a.len() - 1] == k_b && broadcast(&a[..a.len().saturating_sub(2)], &b[..b.len().saturating_sub(2)]).is_some()
}

/// `broadcast`, kept off the heap for up to 8 dims.
pub fn broadcast_dims(a: &[i64], b: &[i64]) -> Option<smallvec::SmallVec<[i64; 8]>> {
    let n = a.len().max(b.len());
    let at = |s: &[i64], i: usize| if i + s.len() >= n { s[i + s.len() - n] } else { 1 };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

// ------------------------------------------------------------- dtype rules

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64 => 1,
        DType::C64 | DType::C128 => 3,
        _ => 2,
    }
}

/// `torch.result_type` of two tensors: a dimensioned operand's dtype wins
/// over a 0-dim one of the same category (bool < integer < floating < complex).
pub fn promote(a: DType, a_dim: bool, b: DType, b_dim: bool) -> DType {
    match (a_dim, b_dim) {
        (true, false) if category(a) >= category(b) => a,
        (false, true) if category(b) >= category(a) => b,
        // A 0-dim complex with a dimensioned float: the complex type of the float's precision (c10's combine_categories).
        (true, false) if a.is_float() && b.is_complex() => a.to_complex(),
        (false, true) if b.is_float() && a.is_complex() => b.to_complex(),
        _ => promote_types(a, b),
    }
}

/// `torch.result_type(tensor, number)`: a Python number never widens a
/// tensor of its category or above, and brings the default dtype of its
/// category (int64, fp32) otherwise.
pub fn promote_scalar(t: DType, s: Scalar) -> DType {
    let sd = match s {
        Scalar::Float(_) => DType::F32,
        Scalar::Int(_) => DType::I64,
        Scalar::Bool(_) => DType::Bool,
    };
    if category(t) >= category(sd) {
        t
    } else {
        sd
    }
}

/// `torch.can_cast(from, to)`: whether an in-place op may store a result of
/// dtype `from` into a tensor of dtype `to` (no complex into a real, no
/// float into an integer, no number into bool).
pub fn can_cast(from: DType, to: DType) -> bool {
    category(from) <= category(to) && !(from != DType::Bool && to == DType::Bool)
}

/// `torch.promote_types`.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a, b) {
        (Bool, x) | (x, Bool) => x,
        // Complex wins, with the precision of the wider operand (complex64 and fp64 meet at complex128).
        (C128, _) | (_, C128) | (C64, F64) | (F64, C64) => C128,
        (C64, _) | (_, C64) => C64,
        (F64, _) | (_, F64) => F64,
        (F32, _) | (_, F32) => F32,
        (BF16, F16) | (F16, BF16) => F32,
        (BF16, _) | (_, BF16) => BF16,
        (F16, _) | (_, F16) => F16,
        (I64, _) | (_, I64) => I64,
        (I32, _) | (_, I32) => I32,
        (I16, _) | (_, I16) => I16,
        // uint8 and int8: the smallest signed type holding both.
        _ => I16,
    }
}

impl Accept {
    /// Whether the rule takes `d`. Complex dtypes are the row's own opt-in
    /// (`Row::complex`), checked beside this.
    pub fn allows(self, d: DType) -> bool {
        if d.is_complex() {
            return true;
        }
        match self {
            Accept::All => true,
            Accept::Num => d != DType::Bool,
            Accept::Float => d.is_float(),
            Accept::Signed => d.is_float() || matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Accept::All => "any dtype",
            Accept::Num => "numeric dtypes (not bool)",
            Accept::Float => "floating dtypes",
            Accept::Signed => "floating and signed integer dtypes",
        }
    }
}

impl Out {
    /// The result dtype from the promoted input dtype (`None`: the kernel decides).
    pub fn result(self, promoted: DType) -> Option<DType> {
        match self {
            Out::Same => Some(promoted),
            Out::ToFloat => Some(if promoted.is_inexact() { promoted } else { DType::F32 }),
            Out::Real => Some(promoted.to_real()),
            Out::Bool => Some(DType::Bool),
            Out::I64 => Some(DType::I64),
            Out::Kernel => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_row_parses_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for r in super::ops().iter().map(|o| o.row) {
            assert!(seen.insert(r.name), "{} twice", r.name);
            for s in r.sigs {
                let sig = super::schema::parse(s).unwrap_or_else(|e| panic!("{}", e.detail));
                assert!(r.name.replace('.', "_").starts_with(sig.name.trim_end_matches('_')) || sig.name.trim_start_matches('_').starts_with(r.name), "{s}");
            }
            if r.native {
                let op = super::find(r.name).expect("listed");
                assert!((0..op.sigs.len()).any(|i| crate::backend::native::opk::has_kernel(op.index, i)), "{}: no native kernel", r.name);
            }
            for c in r.cases {
                let v: serde_json::Value = serde_json::from_str(c).unwrap_or_else(|e| panic!("{}: case {c}: {e}", r.name));
                assert!(v.get("inputs").is_some_and(|i| i.is_array()), "{}: case {c}", r.name);
            }
        }
    }
}
