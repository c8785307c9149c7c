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

use super::ops;
use super::tensor::{Inner, Raw};
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
}

pub struct Node {
    pub name: &'static str,
    edges: Vec<Option<Edge>>,
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
    let target = match &t.0.grad_fn {
        Some(n) => Target::Node(n.clone()),
        None if t.0.requires_grad.load(Ordering::Relaxed) => Target::Leaf(t.0.clone()),
        None => return None,
    };
    Some(Edge { target, shape: t.shape().to_vec(), dtype: t.dtype() })
}

/// Whether an op on `inputs` must record a node.
pub fn needs_grad(inputs: &[&Raw]) -> bool {
    GRAD_ENABLED.with(Cell::get) && inputs.iter().any(|t| t.requires_grad())
}

/// Attaches `backward` to `out` when any input requires grad (and grad mode
/// is on); `out` must be freshly made (not shared yet). `backward` returns
/// one gradient per input, in any shape that broadcasts to it.
pub fn record(out: Raw, name: &'static str, inputs: &[&Raw], backward: impl FnOnce(&Raw) -> Result<Vec<Option<Raw>>> + Send + Sync + 'static) -> Raw {
    if !needs_grad(inputs) {
        return out;
    }
    let node = Node { name, edges: inputs.iter().map(|t| edge(t)).collect(), backward: Mutex::new(Some(Box::new(backward))) };
    match Arc::try_unwrap(out.0) {
        Ok(mut inner) => {
            inner.grad_fn = Some(Arc::new(node));
            Raw(Arc::new(inner))
        }
        // Shared already (an op returned an input): record on a new alias.
        Err(shared) => {
            let t = Raw(shared);
            let mut alias = Arc::try_unwrap(t.detached().0).ok().expect("a fresh alias is unshared");
            alias.grad_fn = Some(Arc::new(node));
            Raw(Arc::new(alias))
        }
    }
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
    let root = match &loss.0.grad_fn {
        Some(n) => n.clone(),
        None if loss.0.requires_grad.load(Ordering::Relaxed) => return accumulate(&loss.0, ones),
        None => crate::bail!(E_AUTOGRAD, "element 0 of tensors does not require grad and does not have a grad_fn"),
    };
    // Dependencies: how many edges from nodes of this graph reach each node.
    let key = |n: &Arc<Node>| Arc::as_ptr(n) as usize;
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let mut stack = vec![root.clone()];
    let mut seen = std::collections::HashSet::from([key(&root)]);
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
    let mut grads: HashMap<usize, Raw> = HashMap::from([(key(&root), ones)]);
    let mut ready = vec![root];
    while let Some(n) = ready.pop() {
        let g = grads.remove(&key(&n)).expect("a ready node has its gradient");
        let f = n.backward.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| {
            crate::err!(
                E_AUTOGRAD,
                "trying to backward through the graph a second time ({} was already freed); compute the loss again",
                n.name
            )
        })?;
        let gs = f(&g)?;
        for (e, gi) in n.edges.iter().zip(gs) {
            let (Some(e), Some(gi)) = (e, gi) else { continue };
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
                    let d = deps.get_mut(&k).expect("counted above");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(m.clone());
                    }
                }
            }
        }
    }
    Ok(())
}
