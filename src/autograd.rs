//! Autograd over handles: marking leaves, backward, reading and editing grads.

use crate::backend::imp;
use crate::error::{Code, Result};
use crate::handles::Ref;
use crate::json;
use crate::registry::TENSORS;
use crate::tensor::{get, numel_of, register, register_all, Made};

fn autograd_err(op: &str, e: crate::Error) -> crate::Error {
    if e.code == Code::E_TORCH {
        crate::err!(E_AUTOGRAD, "{op}: {}", e.detail)
    } else {
        e
    }
}

/// Marks `t` as a leaf that records gradients; returns `t` itself (no new reference).
pub fn require_grad(h: i64) -> Result<i64> {
    let t = get(h)?;
    let dt = imp::dtype(&t.raw)?;
    if !dt.is_inexact() {
        crate::bail!(E_DTYPE, "require_grad: only floating and complex tensors can require gradients, got {}", dt.name());
    }
    imp::set_requires_grad(&t.raw, true).map_err(|e| autograd_err("require_grad", e))?;
    Ok(h)
}

/// `t.requires_grad_(flag)`: setting it is `require_grad`; clearing it
/// freezes a leaf (ops record nothing for it; its grad stays as it was).
pub fn set_requires_grad(h: i64, flag: bool) -> Result<()> {
    if flag {
        return require_grad(h).map(drop);
    }
    let t = get(h)?;
    imp::set_requires_grad(&t.raw, false).map_err(|e| autograd_err("requires_grad_", e))
}

/// Whether `t` records gradients: a leaf that requires them, or a result of recorded ops.
pub fn requires_grad(h: i64) -> Result<bool> {
    Ok(imp::requires_grad(&get(h)?.raw))
}

pub fn backward(loss: i64) -> Result<()> {
    let t = get(loss)?;
    let s = imp::shape(&t.raw);
    if numel_of(&s)? != 1 {
        crate::bail!(E_AUTOGRAD, "backward: the loss must have one element, got shape {}", json::write_int_list(&s));
    }
    if imp::dtype(&t.raw)?.is_complex() {
        crate::bail!(E_AUTOGRAD, "backward: grad can be implicitly created only for real scalar outputs (the loss is complex; take its real part or abs)");
    }
    imp::backward(&t.raw).map_err(|e| autograd_err("backward", e))
}

/// A new handle on `t.grad` (sharing its storage), or 0 when there is none.
pub fn grad(h: i64) -> Result<i64> {
    grad_of(&*get(h)?)
}

fn grad_of(t: &crate::backend::Tensor) -> Result<i64> {
    match imp::grad(&t.raw)? {
        Some(g) => register(t.backend, g),
        None => Ok(0),
    }
}

/// One handle per entry of the JSON list, 0 where there is no grad (or the entry is 0). All
/// handles are checked first, so a bad entry creates nothing.
pub fn grad_multi(params: &str) -> Result<Vec<i64>> {
    let hs = json::handle_list(params)?;
    let live = live_entries(&hs)?;
    let mut live = live.iter();
    let mut out = Vec::with_capacity(hs.len());
    for h in hs {
        let g = match h {
            0 => Ok(0),
            _ => grad_of(&live.next().expect("one live entry per non-zero handle").1),
        };
        match g {
            Ok(g) => out.push(g),
            Err(e) => {
                out.iter().filter(|g| **g != 0).for_each(|g| drop(TENSORS.release(*g)));
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// The tensors behind a handle list, 0 entries skipped; every handle checked first.
fn live_entries(hs: &[i64]) -> Result<Vec<(i64, Ref<'static, crate::backend::Tensor>)>> {
    let hs: Vec<i64> = hs.iter().copied().filter(|h| *h != 0).collect();
    Ok(hs.iter().copied().zip(TENSORS.get_many(&hs)?).collect())
}

/// The tensors of a JSON handle list with their handles, 0 entries skipped; every handle checked first.
pub(crate) fn live_list(list: &str) -> Result<Vec<(i64, Ref<'static, crate::backend::Tensor>)>> {
    live_entries(&json::handle_list(list)?)
}

pub fn zero_grad(h: i64) -> Result<()> {
    imp::zero_grad(&get(h)?.raw)
}

pub fn zero_grad_multi(params: &str) -> Result<()> {
    live_list(params)?.iter().try_for_each(|(_, t)| imp::zero_grad(&t.raw))
}

/// Fails with `E_NOT_FINITE` naming the first handle holding NaN or infinity.
pub fn check_finite_multi(handles: &str) -> Result<()> {
    for (i, (h, t)) in live_list(handles)?.iter().enumerate() {
        if !imp::all_finite(&t.raw)? {
            crate::bail!(E_NOT_FINITE, "tensor {h} (entry {i}) has non-finite values");
        }
    }
    Ok(())
}

/// Fails with `E_DTYPE` naming the first non-floating entry, before anything
/// changes (PyTorch refuses these: `mul_` by a float into an integer tensor,
/// `linalg.vector_norm` of one).
fn all_floating(op: &str, entries: &[(i64, Ref<'static, crate::backend::Tensor>)]) -> Result<()> {
    for (i, (h, t)) in entries.iter().enumerate() {
        let dt = imp::dtype(&t.raw)?;
        if !dt.is_float() {
            crate::bail!(E_DTYPE, "{op}: tensor {h} (entry {i}) is {}, not a floating dtype", dt.name());
        }
    }
    Ok(())
}

pub fn scale_grads_multi(grads: &str, scale: f64) -> Result<()> {
    let entries = live_list(grads)?;
    all_floating("scale_grads", &entries)?;
    entries.iter().try_for_each(|(_, t)| imp::scale_(&t.raw, scale))
}

/// `torch.nn.utils.clip_grad_norm_` over the listed grads; returns the pre-clip total norm.
pub fn clip_grad_norm_multi(grads: &str, max_norm: f64, norm_type: f64) -> Result<f64> {
    if norm_type.is_nan() || norm_type <= 0.0 {
        crate::bail!(E_INVALID_ARG, "clip_grad_norm: norm_type must be > 0 or inf, got {norm_type}");
    }
    if max_norm.is_nan() {
        crate::bail!(E_INVALID_ARG, "clip_grad_norm: max_norm is NaN");
    }
    let entries = live_list(grads)?;
    all_floating("clip_grad_norm", &entries)?;
    let raws: Vec<&imp::Raw> = entries.iter().map(|(_, t)| &t.raw).collect();
    imp::clip_grad_norm(&raws, max_norm, norm_type)
}

/// Sets this thread's grad mode (`enabled` 0 or 1, as C passes a bool);
/// returns the previous one.
pub fn set_grad_enabled(enabled: i32) -> Result<bool> {
    let on = match enabled {
        0 => false,
        1 => true,
        _ => crate::bail!(E_INVALID_ARG, "set_grad_enabled: enabled must be 0 or 1, got {enabled}"),
    };
    Ok(imp::set_grad_enabled(on))
}

pub fn is_grad_enabled() -> bool {
    imp::is_grad_enabled()
}

// ------------------------------------------------------ gradient checkpointing

/// The caller's function for a checkpointed span: borrowed input handles
/// in, new output handles (now the library's) out.
pub type SpanFn = std::sync::Arc<dyn Fn(&[i64]) -> Result<Vec<i64>> + Send + Sync>;

/// Restores the grad mode, the generator state and the autocast settings
/// the recomputation changed, on every exit path.
struct Recompute {
    grad: imp::GradModes,
    rng: Option<imp::Raw>,
    autocast: crate::amp::AutocastSnapshot,
}

impl Drop for Recompute {
    fn drop(&mut self) {
        imp::restore_grad_modes(self.grad);
        if let Some(r) = self.rng.take() {
            let _ = imp::set_rng_state(&r);
        }
        let _ = self.autocast.apply();
    }
}

/// Runs `f` and takes its outputs: live tensor handles of one backend.
fn run_span(f: &SpanFn, inputs: &[i64], when: &str) -> Result<(Made, Vec<imp::Raw>)> {
    let outs = Made(f(inputs)?);
    let live = TENSORS.get_many(&outs.0).map_err(|e| crate::err!(E_INVALID_ARG, "checkpoint: {when}, the function returned a bad handle: {}: {}", e.code.name(), e.detail))?;
    let raws = live.iter().map(|t| imp::shallow(&t.raw)).collect();
    Ok((outs, raws))
}

/// `torch.utils.checkpoint.checkpoint(f, *inputs)`: runs `f` and returns
/// its outputs (new handles) without keeping the activations inside it;
/// the backward pass runs `f` again, with the generator state and autocast
/// settings of the first run, and back-propagates through that.
///
/// Unlike PyTorch's reentrant variant, the leaves `f` uses without receiving
/// them (a layer's weights) get their gradients even when no input requires
/// grad, as with `use_reentrant=False`: the first run records a graph only
/// to find those leaves, and frees it (with the activations) before
/// returning. Outside grad mode `f` just runs.
pub fn checkpoint(f: SpanFn, inputs: &[i64]) -> Result<Vec<i64>> {
    let ins = TENSORS.get_many(inputs)?;
    let b = crate::backend::same_backend("checkpoint", &ins.iter().map(|t| &**t).collect::<Vec<_>>())?;
    let in_raws: Vec<imp::Raw> = ins.iter().map(|t| imp::shallow(&t.raw)).collect();
    drop(ins);
    if !imp::is_grad_enabled() {
        return Ok(run_span(&f, inputs, "running")?.0.keep());
    }
    let rng = imp::rng_state(b)?;
    let autocast = crate::amp::AutocastSnapshot::now();
    let (detached, leaves, n_out) = {
        let (_outs, raws) = run_span(&f, inputs, "running")?;
        let leaves = imp::graph_leaves(&raws.iter().collect::<Vec<_>>())?;
        let detached = raws.iter().map(imp::detach).collect::<Result<Vec<_>>>()?;
        (detached, leaves, raws.len())
        // The first run's graph, and the activations it saved, go here.
    };
    let mut node_inputs: Vec<&imp::Raw> = in_raws.iter().collect();
    node_inputs.extend(leaves.iter());
    let n_leaves = leaves.len();
    let saved = in_raws.iter().map(imp::shallow).collect::<Vec<_>>();
    let backward: crate::backend::contract::CustomBackward<imp::Raw> = Box::new(move |grads| {
        recompute(&f, &saved, rng, autocast, grads, n_out, b).map(|mut g| {
            g.extend((0..n_leaves).map(|_| None));
            g
        })
    });
    register_all(b, imp::custom_node("CheckpointFunctionBackward", &node_inputs, detached, backward)?)
}

/// The backward of a checkpointed span: `f` again on detached copies of the
/// inputs, then a backward pass from its outputs with `grads`. Leaves used
/// inside accumulate their gradients there; the inputs' are returned.
fn recompute(
    f: &SpanFn,
    inputs: &[imp::Raw],
    rng: imp::Raw,
    autocast: crate::amp::AutocastSnapshot,
    grads: Vec<Option<imp::Raw>>,
    n_out: usize,
    b: crate::backend::BackendId,
) -> Result<Vec<Option<imp::Raw>>> {
    let fail = |e: crate::Error| crate::err!(E_AUTOGRAD, "checkpoint: recomputing the span failed: {}: {}", e.code.name(), e.detail);
    let mut restore = Recompute { grad: imp::swap_grad_modes(true), rng: None, autocast: autocast.apply().map_err(fail)? };
    restore.rng = Some(imp::rng_state(b).map_err(fail)?);
    imp::set_rng_state(&rng).map_err(fail)?;
    let mut copies = Vec::with_capacity(inputs.len());
    let mut handles = Made(Vec::with_capacity(inputs.len()));
    for x in inputs {
        let d = imp::detach(x).map_err(fail)?;
        if imp::requires_grad(x) {
            imp::set_requires_grad(&d, true).map_err(fail)?;
        }
        handles.0.push(register(b, imp::shallow(&d)).map_err(fail)?);
        copies.push(d);
    }
    let (_outs, raws) = run_span(f, &handles.0, "recomputing").map_err(fail)?;
    drop(restore);
    if raws.len() != n_out {
        crate::bail!(E_AUTOGRAD, "checkpoint: the span gave {} outputs when recomputed, {n_out} in the forward pass", raws.len());
    }
    let mut roots = Vec::new();
    let mut seeds = Vec::new();
    for (i, (o, g)) in raws.iter().zip(&grads).enumerate() {
        let Some(g) = g else { continue };
        if !imp::requires_grad(o) {
            continue;
        }
        let (so, sg) = (imp::shape(o), imp::shape(g));
        if so != sg {
            crate::bail!(
                E_AUTOGRAD,
                "checkpoint: output {i} has shape {} when recomputed, {} in the forward pass",
                json::write_int_list(&so),
                json::write_int_list(&sg)
            );
        }
        roots.push(o);
        seeds.push(g);
    }
    if !roots.is_empty() {
        imp::backward_with(&roots, &seeds)?;
    }
    copies.iter().map(|c| if imp::requires_grad(c) { imp::grad(c) } else { Ok(None) }).collect()
}
