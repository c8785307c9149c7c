//! Tracing mode: while it is on, this thread records each op it runs (its
//! name, the resolved arguments, and the values in and out) so that
//! `onnx::export` can write the graph that produced a result. The ONNX
//! export follows this record rather than the autograd graph: a forward run
//! in no-grad mode, or with frozen weights, has no autograd graph at all,
//! and the backward nodes of the two backends name their ops differently.
//!
//! Values are numbered in the order they appear (static single assignment):
//! a handle maps to the value it holds now, so an in-place op gives its
//! `self` handle a new value. A tensor that no recorded op produced (data
//! from the caller, a weight) is an *external* value; the trace keeps a
//! reference to it, so it can be written as a constant even after the caller
//! frees its handle. Recording costs one thread-local read per op when off.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use smallvec::SmallVec;

use crate::backend::{imp, Tensor};
use crate::dtype::DType;
use crate::error::Result;
use crate::registry::TENSORS;
use crate::vocab::{self, OpDef};

/// A value's shape and dtype when it was recorded.
#[derive(Clone, Debug)]
pub struct Meta {
    pub dims: SmallVec<[i64; 8]>,
    pub dtype: DType,
}

pub enum Origin {
    /// A tensor no recorded op produced: its handle, and the tensor itself.
    External(i64, Tensor),
    /// Output `.1` of node `.0`.
    Node(usize, usize),
}

pub struct Val {
    pub origin: Origin,
    pub meta: Meta,
}

/// What a recorded op was: an op of the table with its resolved overload
/// and arguments, or one of the seed's functions outside the table, named.
pub enum Kind {
    Table { op: &'static OpDef, sig: usize, args: Vec<vocab::Value> },
    /// `enkai_tensor_linear` (weight `[in, out]`), `layernorm`, `masked_softmax`,
    /// ... (`ops.rs`): the name, and its non-tensor arguments in order.
    Seed { name: &'static str, args: Vec<f64>, ints: Vec<i64> },
    /// A producer with no lowering (a fused LM step, a quantized product):
    /// recorded so that the export refuses it by name instead of writing its
    /// result as a constant.
    Opaque(&'static str),
    /// Recording failed here (why): an export of this trace fails with it.
    Lost(String),
}

pub struct Node {
    pub kind: Kind,
    /// Value ids of the inputs, in the op's input order (`None`: an optional left out).
    pub inputs: Vec<Option<usize>>,
    pub outputs: Vec<usize>,
}

impl Node {
    pub fn name(&self) -> &'static str {
        match &self.kind {
            Kind::Table { op, .. } => op.name(),
            Kind::Seed { name, .. } | Kind::Opaque(name) => name,
            Kind::Lost(_) => "(lost)",
        }
    }
}

#[derive(Default)]
pub struct Trace {
    pub values: Vec<Val>,
    pub nodes: Vec<Node>,
    /// The value each handle holds now.
    pub current: HashMap<i64, usize>,
    /// The value each handle held when the trace first saw it: a graph
    /// input is that one, even if an in-place op wrote into it later.
    pub first: HashMap<i64, usize>,
}

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static TRACE: RefCell<Option<Trace>> = const { RefCell::new(None) };
}

/// Whether this thread records (one thread-local read: the ops' hot path).
#[inline]
pub fn on() -> bool {
    ON.with(Cell::get)
}

/// Starts recording on this thread, discarding any earlier trace.
pub fn begin() {
    TRACE.with(|t| *t.borrow_mut() = Some(Trace::default()));
    ON.with(|o| o.set(true));
}

/// Stops recording; the trace stays for `with` until the next `begin` or `clear`.
pub fn end() {
    ON.with(|o| o.set(false));
}

/// Stops recording and drops the trace and the tensors it keeps.
pub fn clear() {
    ON.with(|o| o.set(false));
    TRACE.with(|t| t.borrow_mut().take());
}

/// Runs `f` on this thread's trace.
pub fn with<R>(f: impl FnOnce(&Trace) -> Result<R>) -> Result<R> {
    TRACE.with(|t| match t.borrow().as_ref() {
        Some(tr) => f(tr),
        None => crate::bail!(E_INVALID_ARG, "no trace on this thread: call enkai_onnx_trace_begin, run the forward pass, then export"),
    })
}

fn meta(t: &Tensor) -> Result<Meta> {
    Ok(Meta { dims: imp::dims(&t.raw), dtype: imp::dtype(&t.raw)? })
}

impl Trace {
    /// The value `h` holds, made external (with a reference kept) on first sight.
    fn value_of(&mut self, h: i64) -> Result<usize> {
        if let Some(&v) = self.current.get(&h) {
            return Ok(v);
        }
        let (m, t) = TENSORS.read(h, |t| Ok::<_, crate::Error>((meta(t)?, Tensor { backend: t.backend, raw: imp::shallow(&t.raw) })))??;
        self.values.push(Val { origin: Origin::External(h, t), meta: m });
        let v = self.values.len() - 1;
        self.current.insert(h, v);
        self.first.entry(h).or_insert(v);
        Ok(v)
    }

    fn push(&mut self, kind: Kind, inputs: &[i64], outputs: &[i64], inplace: bool) -> Result<()> {
        let ins = inputs.iter().map(|&h| if h == 0 { Ok(None) } else { self.value_of(h).map(Some) }).collect::<Result<Vec<_>>>()?;
        let node = self.nodes.len();
        let mut outs = Vec::with_capacity(outputs.len());
        for (i, &h) in outputs.iter().enumerate() {
            let m = TENSORS.read(h, meta)??;
            self.values.push(Val { origin: Origin::Node(node, i), meta: m });
            let v = self.values.len() - 1;
            self.current.insert(h, v);
            self.first.entry(h).or_insert(v);
            outs.push(v);
        }
        if inplace {
            // The op wrote into `self` (its first input): that handle holds the result now.
            if let (Some(&h), Some(&v)) = (inputs.first(), outs.first()) {
                self.current.insert(h, v);
            }
        }
        self.nodes.push(Node { kind, inputs: ins, outputs: outs });
        Ok(())
    }
}

/// Records a node; a failure to record stops the trace (the export then
/// reports it) rather than failing the op, which has already run.
#[cold]
#[inline(never)]
fn record(kind: Kind, inputs: &[i64], outputs: &[i64], inplace: bool) {
    TRACE.with(|t| {
        let mut g = t.borrow_mut();
        let Some(tr) = g.as_mut() else { return };
        if let Err(e) = tr.push(kind, inputs, outputs, inplace) {
            tr.nodes.push(Node { kind: Kind::Lost(e.to_string()), inputs: vec![], outputs: vec![] });
            ON.with(|o| o.set(false));
        }
    })
}

/// An op of the table ran on `inputs` (0: an optional left out) and made `outputs`.
pub fn table(op: &'static OpDef, sig: usize, args: &[vocab::Value], inputs: &[i64], outputs: &[i64]) {
    record(Kind::Table { op, sig, args: args.to_vec() }, inputs, outputs, op.inplace());
}

/// One of the seed's functions outside the table ran.
pub fn seed(name: &'static str, args: &[f64], ints: &[i64], inputs: &[i64], outputs: &[i64]) {
    record(Kind::Seed { name, args: args.to_vec(), ints: ints.to_vec() }, inputs, outputs, false);
}

/// A producer the export cannot write ran (see `Kind::Opaque`).
pub fn opaque(name: &'static str, inputs: &[i64], outputs: &[i64]) {
    record(Kind::Opaque(name), inputs, outputs, false);
}

/// `r`, recorded as an opaque producer of `inputs` when this thread traces and it succeeded.
pub fn opaque_result(name: &'static str, inputs: &[i64], r: Result<i64>) -> Result<i64> {
    if let (Ok(h), true) = (&r, on()) {
        opaque(name, inputs, &[*h]);
    }
    r
}
