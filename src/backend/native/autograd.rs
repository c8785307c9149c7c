//! Reverse-mode autograd for native tensors: every op on inputs that
//! require grad records a `Node` holding its backward closure and edges to
//! its inputs; `backward` runs the nodes in reverse topological order and
//! accumulates into leaves, as PyTorch's engine does (grads are summed to
//! each input's shape and cast to its dtype on the way, and a graph is
//! freed by the backward that runs it).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use super::elem::with_elem;
use super::kernels::copy_into;
use super::ops;
use super::storage::Storage;
use super::tensor::{Dims, Inner, Raw};
use crate::dtype::DType;
use crate::error::Result;

/// Gradients of one node's inputs from the gradient of its output.
pub type Backward = Box<dyn FnOnce(&Raw) -> Result<Vec<Option<Raw>>> + Send + Sync>;

pub enum Target {
    Node(Arc<Node>),
    Leaf(Arc<Inner>),
}

/// Where an input's gradient goes, with the input's shape and dtype.
pub struct Edge {
    target: Target,
    shape: Vec<i64>,
    dtype: DType,
    /// The input was a view whose base an in-place op had rewritten: its
    /// history no longer describes its values, so a gradient through it
    /// would be wrong (PyTorch regenerates such a view's grad_fn; native
    /// refuses at backward time instead).
    stale: bool,
}

/// A tensor a backward closure reads, as its version counter stood when the
/// op ran: overwriting it in place makes that backward an error, never a
/// silently wrong gradient (PyTorch's SavedVariable check).
struct Saved {
    storage: Arc<Storage>,
    version: u32,
    dtype: DType,
    shape: Dims,
}

impl Saved {
    fn of(t: &Raw) -> Saved {
        Saved { storage: t.0.storage.clone(), version: t.0.storage.version(), dtype: t.dtype(), shape: Dims::from_slice(t.shape()) }
    }

    fn check(&self, node: &str) -> Result<()> {
        let now = self.storage.version();
        if now != self.version {
            crate::bail!(
                E_AUTOGRAD,
                "one of the variables needed for gradient computation has been modified by an inplace operation: the {} tensor of shape {} saved by {node} is at version {now}; expected version {} instead",
                self.dtype.name(),
                crate::json::write_int_list(&self.shape),
                self.version
            );
        }
        Ok(())
    }
}

pub struct Node {
    pub name: &'static str,
    edges: Vec<Option<Edge>>,
    saved: SmallVec<[Saved; 2]>,
    /// Taken by the backward that runs it: a graph is used once, as in PyTorch without retain_graph.
    backward: Mutex<Option<Backward>>,
}

// A long chain of nodes (a loss computed through 10^5 ops) would drop
// recursively and overflow the stack: unlink it iteratively instead.
impl Drop for Node {
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Node>> = Vec::new();
        let unlink = |edges: &mut Vec<Option<Edge>>, stack: &mut Vec<Arc<Node>>| {
            for e in edges.drain(..).flatten() {
                if let Target::Node(n) = e.target {
                    stack.push(n);
                }
            }
        };
        unlink(&mut self.edges, &mut stack);
        while let Some(n) = stack.pop() {
            if let Ok(mut last) = Arc::try_unwrap(n) {
                unlink(&mut last.edges, &mut stack);
            }
        }
    }
}

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Sets this thread's grad mode, returning the previous one.
pub fn set_grad_enabled(on: bool) -> bool {
    GRAD_ENABLED.with(|g| g.replace(on))
}

pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Disables recording on this thread until dropped (restores on unwind too).
pub struct NoGrad(bool);

impl NoGrad {
    pub fn new() -> NoGrad {
        NoGrad(GRAD_ENABLED.with(|g| g.replace(false)))
    }
}

impl Drop for NoGrad {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.0));
    }
}

fn edge(t: &Raw) -> Option<Edge> {
    let (target, stale) = match t.0.grad_fn() {
        Some(n) => (Target::Node(n), t.0.stale()),
        None if t.0.requires_grad.load(Ordering::Relaxed) => (Target::Leaf(t.0.clone()), false),
        None => return None,
    };
    Some(Edge { target, shape: t.shape().to_vec(), dtype: t.dtype(), stale })
}

/// Whether an op on `inputs` must record a node.
pub fn needs_grad(inputs: &[&Raw]) -> bool {
    GRAD_ENABLED.with(Cell::get) && inputs.iter().any(|t| t.requires_grad())
}

/// Attaches `backward` to `out` when any input requires grad (and grad mode
/// is on); `out` must be freshly made (not shared yet). `backward` returns
/// one gradient per input, in any shape that broadcasts to it. For a
/// backward that reads no tensor's values (add, a view, a sum); one that
/// does uses `record_saving`.
pub fn record(out: Raw, name: &'static str, inputs: &[&Raw], backward: impl FnOnce(&Raw) -> Result<Vec<Option<Raw>>> + Send + Sync + 'static) -> Raw {
    record_saving(out, name, inputs, &[], false, backward)
}

/// `record` for a backward that reads the values of `saved` (and of `out`
/// when `saves_out`): their version counters are checked before it runs.
pub fn record_saving(
    out: Raw,
    name: &'static str,
    inputs: &[&Raw],
    saved: &[&Raw],
    saves_out: bool,
    backward: impl FnOnce(&Raw) -> Result<Vec<Option<Raw>>> + Send + Sync + 'static,
) -> Raw {
    if !needs_grad(inputs) {
        return out;
    }
    let mut keep: SmallVec<[Saved; 2]> = saved.iter().map(|t| Saved::of(t)).collect();
    if saves_out {
        keep.push(Saved::of(&out));
    }
    let node = Arc::new(Node { name, edges: inputs.iter().map(|t| edge(t)).collect(), saved: keep, backward: Mutex::new(Some(Box::new(backward))) });
    // Shared already (an op returned an input): record on a new alias, never on the input.
    let out = if Arc::strong_count(&out.0) == 1 { out } else { out.detached() };
    out.0.set_grad_fn(Some(node));
    out
}

/// Gives `t` (written in place by an in-place op) the history `from` (the
/// result of the out-of-place op that computed its new values), as PyTorch
/// rebases an in-place op's self. Views of its bytes made before now become
/// stale.
pub fn rebase(t: &Raw, from: &Raw) {
    if let Some(n) = from.0.grad_fn() {
        t.0.storage.bump_history();
        t.0.set_grad_fn(Some(n));
    }
}

/// Gives the existing tensor `t` a new history: a node over `inputs` (their
/// histories as they stand now) running `backward`.
fn rehistory(t: &Raw, name: &'static str, inputs: &[&Raw], backward: impl FnOnce(&Raw) -> Result<Vec<Option<Raw>>> + Send + Sync + 'static) {
    let node = Node { name, edges: inputs.iter().map(|x| edge(x)).collect(), saved: SmallVec::new(), backward: Mutex::new(Some(Box::new(backward))) };
    t.0.storage.bump_history();
    t.0.set_grad_fn(Some(Arc::new(node)));
}

/// After an in-place op wrote `r` into the view `v` of the contiguous base
/// `b`: `b`'s history becomes PyTorch's CopySlices (the gradient of the
/// written region goes to `r`, the rest to `b`'s old history), and `v`'s a
/// strided view of the new `b`. Other views of `b` become stale.
pub fn rebase_view(v: &Raw, b: &Raw, r: &Raw) {
    debug_assert!(b.is_contiguous() && v.0.offset >= b.0.offset);
    let (shape, strides, off) = (v.shape().to_vec(), v.strides().to_vec(), v.0.offset - b.0.offset);
    let (region_shape, region_strides, base_shape) = (shape.clone(), strides.clone(), b.shape().to_vec());
    rehistory(b, "CopySlices", &[b, r], move |g| {
        let gb = ops::clone_contiguous(g)?;
        let region = gb.view_as(region_shape, region_strides, off);
        let gr = ops::clone_contiguous(&region)?;
        let zero = Raw::zeros(&[], g.dtype())?;
        with_elem!(g.dtype(), T => copy_into::<T, T>(&region, &zero));
        Ok(vec![Some(gb), Some(gr)])
    });
    rehistory(v, "AsStridedBackward0", &[b], move |g| {
        let z = Raw::zeros(&base_shape, g.dtype())?;
        let region = z.view_as(shape, strides, off);
        with_elem!(g.dtype(), T => copy_into::<T, T>(&region, g));
        Ok(vec![Some(z)])
    });
}

/// The gradient as its input needs it: summed over broadcast dims, in its dtype.
fn fit(g: Raw, shape: &[i64], dtype: DType) -> Result<Raw> {
    let g = if g.shape() != shape { ops::sum_to(&g, shape)? } else { g };
    if g.dtype() != dtype {
        return ops::convert(&g, dtype);
    }
    Ok(g)
}

/// A contiguous tensor whose buffer nothing else holds (no other edge, view or handle).
fn unshared(g: &Raw) -> bool {
    Arc::strong_count(&g.0) == 1 && Arc::strong_count(&g.0.storage) == 1 && g.is_contiguous()
}

fn accumulate(leaf: &Inner, g: Raw) -> Result<()> {
    let mut slot = leaf.grad.lock().unwrap_or_else(|e| e.into_inner());
    match slot.as_ref() {
        // In place, so a handle on the grad sees the sum (as AccumulateGrad does).
        Some(old) => ops::add_in_place(old, &g),
        None => {
            // Keep a private copy when `g` may be shared; an unshared gradient
            // is taken as it is, as AccumulateGrad steals one.
            *slot = Some(if unshared(&g) { g } else { ops::clone_contiguous(&g)? });
            Ok(())
        }
    }
}

/// The sum of two gradients reaching one node (a tensor used twice): into
/// `prev` when nothing else holds it, saving a buffer and a pass; the same
/// values either way (`prev + g`, rounded once).
fn sum_grads(prev: Raw, g: &Raw) -> Result<Raw> {
    if unshared(&prev) && prev.dtype() == g.dtype() && prev.shape() == g.shape() {
        ops::add_in_place(&prev, g)?;
        return Ok(prev);
    }
    ops::add_plain(&prev, g)
}

/// `loss.backward()` with a gradient of ones.
pub fn backward(loss: &Raw) -> Result<()> {
    let _no_grad = NoGrad::new();
    let ones = ops::full_like(loss, 1.0)?;
    if loss.0.grad_fn().is_none() && !loss.0.requires_grad.load(Ordering::Relaxed) {
        crate::bail!(E_AUTOGRAD, "element 0 of tensors does not require grad and does not have a grad_fn");
    }
    run(vec![(loss.clone(), ones)])
}

/// `torch.autograd.backward(roots, grads)`: every root back-propagates its
/// gradient (of its shape) through one traversal of their joint graph.
pub fn backward_with(roots: &[&Raw], grads: &[&Raw]) -> Result<()> {
    let _no_grad = NoGrad::new();
    for (i, r) in roots.iter().enumerate() {
        if !r.requires_grad() {
            crate::bail!(E_AUTOGRAD, "element {i} of tensors does not require grad and does not have a grad_fn");
        }
    }
    run(roots.iter().zip(grads).map(|(r, g)| ((*r).clone(), (*g).clone())).collect())
}

fn run(roots: Vec<(Raw, Raw)>) -> Result<()> {
    let key = |n: &Arc<Node>| Arc::as_ptr(n) as usize;
    let mut grads: HashMap<usize, Raw> = HashMap::new();
    let mut starts: Vec<Arc<Node>> = Vec::new();
    for (r, g) in roots {
        let g = fit(g, r.shape(), r.dtype())?;
        match r.0.grad_fn() {
            Some(n) => {
                let k = key(&n);
                let sum = match grads.remove(&k) {
                    Some(prev) => sum_grads(prev, &g)?,
                    None => {
                        starts.push(n);
                        g
                    }
                };
                grads.insert(k, sum);
            }
            None => accumulate(&r.0, g)?,
        }
    }
    // Dependencies: how many edges from nodes of this graph reach each node.
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let mut stack = starts.clone();
    let mut seen: std::collections::HashSet<usize> = starts.iter().map(key).collect();
    while let Some(n) = stack.pop() {
        for e in n.edges.iter().flatten() {
            if let Target::Node(m) = &e.target {
                *deps.entry(key(m)).or_default() += 1;
                if seen.insert(key(m)) {
                    stack.push(m.clone());
                }
            }
        }
    }
    // A root that another root reaches waits for its gradient from there too.
    let mut ready: Vec<Arc<Node>> = starts.into_iter().filter(|n| !deps.contains_key(&key(n))).collect();
    while let Some(n) = ready.pop() {
        // A node that no gradient reached (every path to it gave none) does
        // not run; its inputs get none from it, and their counts still fall.
        let gs = match grads.remove(&key(&n)) {
            Some(g) => {
                let f = n.backward.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| {
                    crate::err!(
                        E_AUTOGRAD,
                        "trying to backward through the graph a second time ({} was already freed); compute the loss again",
                        n.name
                    )
                })?;
                for sv in &n.saved {
                    sv.check(n.name)?;
                }
                f(&g)?
            }
            None => Vec::new(),
        };
        for (e, gi) in n.edges.iter().zip(gs.into_iter().chain(std::iter::repeat_with(|| None))) {
            let Some(e) = e else { continue };
            if let Some(gi) = gi {
                if e.stale {
                    crate::bail!(
                        E_AUTOGRAD,
                        "a view used by {} was made before an in-place operation on its base rewrote the base's history, so its gradient would be wrong; on the cpu backend, make the view again after the in-place operation",
                        n.name
                    );
                }
                let gi = fit(gi, &e.shape, e.dtype)?;
                match &e.target {
                    Target::Leaf(leaf) => accumulate(leaf, gi)?,
                    Target::Node(m) => {
                        let k = key(m);
                        let sum = match grads.remove(&k) {
                            Some(prev) => sum_grads(prev, &gi)?,
                            None => gi,
                        };
                        grads.insert(k, sum);
                    }
                }
            }
            if let Target::Node(m) = &e.target {
                let d = deps.get_mut(&key(m)).expect("counted above");
                *d -= 1;
                if *d == 0 {
                    ready.push(m.clone());
                }
            }
        }
    }
    Ok(())
}

/// Gives the fresh `outs` one shared history over `inputs`, as a custom
/// `torch.autograd.Function` has: `backward` runs once, after every output
/// the backward pass reaches has its gradient (an output it does not reach
/// gets `None`). Outputs that are not floating get no history.
///
/// A node here has one output, so the outputs' nodes feed a hidden 0-d
/// "hub" whose node holds `backward`; the engine's dependency count runs
/// the hub after all of them.
pub fn custom_node(name: &'static str, inputs: &[&Raw], outs: Vec<Raw>, backward: crate::backend::contract::CustomBackward<Raw>) -> Result<Vec<Raw>> {
    if !needs_grad(inputs) {
        return Ok(outs);
    }
    let slots: Arc<Mutex<Vec<Option<Raw>>>> = Arc::new(Mutex::new(vec![None; outs.len()]));
    let taken = slots.clone();
    let hub = record(Raw::zeros(&[], DType::F32)?, name, inputs, move |_| {
        let grads = std::mem::take(&mut *taken.lock().unwrap_or_else(|e| e.into_inner()));
        backward(grads)
    });
    let mut linked = Vec::with_capacity(outs.len());
    for (i, o) in outs.into_iter().enumerate() {
        if !o.dtype().is_inexact() {
            linked.push(o);
            continue;
        }
        let slots = slots.clone();
        let zero = Raw::zeros(&[], DType::F32)?;
        linked.push(record(o.detached(), name, &[&hub], move |g| {
            slots.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(g.clone());
            Ok(vec![Some(zero)])
        }));
    }
    Ok(linked)
}

/// The leaves that require grad and that `outs`' histories reach (an output
/// that is such a leaf included), each once.
pub fn graph_leaves(outs: &[&Raw]) -> Vec<Raw> {
    let mut leaves = Vec::new();
    let mut seen_leaf = std::collections::HashSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Arc<Node>> = Vec::new();
    for o in outs {
        match o.0.grad_fn() {
            Some(n) => stack.push(n),
            None if o.0.requires_grad.load(Ordering::Relaxed) => {
                if seen_leaf.insert(Arc::as_ptr(&o.0) as usize) {
                    leaves.push((*o).clone());
                }
            }
            None => {}
        }
    }
    while let Some(n) = stack.pop() {
        if !seen.insert(Arc::as_ptr(&n) as usize) {
            continue;
        }
        for e in n.edges.iter().flatten() {
            match &e.target {
                Target::Node(m) => stack.push(m.clone()),
                Target::Leaf(l) => {
                    if seen_leaf.insert(Arc::as_ptr(l) as usize) {
                        leaves.push(Raw(l.clone()));
                    }
                }
            }
        }
    }
    leaves
}
