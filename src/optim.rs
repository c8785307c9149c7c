//! Optimizers with parameter groups, as PyTorch's: AdamW (`torch.optim.AdamW`:
//! decoupled weight decay `lr * wd`, bias correction, eps added after the
//! square root), Adam (`torch.optim.Adam`: coupled L2 weight decay, amsgrad)
//! and SGD (`torch.optim.SGD`: momentum, dampening, nesterov, coupled weight
//! decay). State in the parameter's dtype and device, parameters without a
//! grad skipped. The step's scalars are computed once here (`AdamwStep`,
//! `AdamStep`, `SgdStep`); each backend applies them with its own kernels
//! (libtorch's through the shim, the native backend's in Rust), in PyTorch's
//! order of tensor ops.
//!
//! Sharded (ZeRO stage 1, as `torch.distributed.optim.ZeroRedundancyOptimizer`):
//! every parameter has an owner rank, each rank keeps state only for the
//! parameters it owns and updates only those, then every rank receives each
//! parameter from its owner, so all ranks end each step with the same values.

use std::sync::Mutex;

use crate::backend::imp::{self, Raw};
use crate::error::Result;
use crate::json;
use crate::registry::{OPTIMIZERS, TENSORS};
pub use crate::vocab::optim::{AdamHyper, AdamStep, AdamwStep, Hyper, SgdHyper, SgdStep};

/// A param group's hyperparameters, which also say the optimizer's kind
/// (every group of an optimizer has the same kind).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hypers {
    AdamW(Hyper),
    Adam(AdamHyper),
    Sgd(SgdHyper),
}

impl Hypers {
    /// The kind's name, as checkpoints record it.
    pub fn kind(&self) -> &'static str {
        match self {
            Hypers::AdamW(_) => "adamw",
            Hypers::Adam(_) => "adam",
            Hypers::Sgd(_) => "sgd",
        }
    }

    pub fn validate(self) -> Result<Hypers> {
        Ok(match self {
            Hypers::AdamW(h) => Hypers::AdamW(h.validate()?),
            Hypers::Adam(h) => Hypers::Adam(h.validate()?),
            Hypers::Sgd(h) => Hypers::Sgd(h.validate()?),
        })
    }

    fn with_lr(self, lr: f64) -> Hypers {
        match self {
            Hypers::AdamW(h) => Hypers::AdamW(Hyper { lr, ..h }),
            Hypers::Adam(h) => Hypers::Adam(AdamHyper { lr, ..h }),
            Hypers::Sgd(h) => Hypers::Sgd(SgdHyper { lr, ..h }),
        }
    }

    /// A group added with its own lr and weight decay, the rest inherited
    /// (`add_param_group` filling in the optimizer's defaults).
    fn with_lr_wd(self, lr: f64, weight_decay: f64) -> Hypers {
        match self {
            Hypers::AdamW(h) => Hypers::AdamW(Hyper { lr, weight_decay, ..h }),
            Hypers::Adam(h) => Hypers::Adam(AdamHyper { lr, weight_decay, ..h }),
            Hypers::Sgd(h) => Hypers::Sgd(SgdHyper { lr, weight_decay, ..h }),
        }
    }

    /// The names (PyTorch's state keys) of the tensors a stepped param of
    /// this group holds, in `State::tensors`' order. SGD without momentum has
    /// none (PyTorch's `momentum_buffer` stays `None`).
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            Hypers::AdamW(_) | Hypers::Adam(AdamHyper { amsgrad: false, .. }) => &["exp_avg", "exp_avg_sq"],
            Hypers::Adam(AdamHyper { amsgrad: true, .. }) => &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
            Hypers::Sgd(h) if h.momentum != 0.0 => &["momentum_buffer"],
            Hypers::Sgd(_) => &[],
        }
    }
}

/// A stepped param's state: its step count and the tensors its group's
/// `Hypers::state_names` lists, in that order.
struct State {
    tensors: Vec<Raw>,
    step: u64,
}

struct Param {
    /// A retained tensor handle, released when the optimizer is freed.
    handle: i64,
    /// Boxed, so that `None` is one initialised word: in an unboxed
    /// `Option<State>` only the Vec's niche is written, and the optimiser
    /// may read the rest of it speculatively (valgrind reports that read).
    state: Option<Box<State>>,
    /// The rank that updates it when the optimizer is sharded.
    owner: i64,
}

struct Group {
    hyper: Hypers,
    params: Vec<Param>,
}

/// How a sharded optimizer's parameters are spread over the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Shard {
    pub world: i64,
    pub rank: i64,
    /// Bytes of parameters each rank owns so far (the partition's running totals).
    totals: Vec<usize>,
}

struct Inner {
    groups: Vec<Group>,
    shard: Option<Shard>,
}

/// An optimizer handle's value.
pub struct Optimizer {
    inner: Mutex<Inner>,
}

impl Drop for Optimizer {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        for p in inner.groups.iter().flat_map(|g| &g.params) {
            let _ = TENSORS.release(p.handle);
        }
    }
}

/// `ZeroRedundancyOptimizer._partition_parameters`: within a group, the
/// parameters by size, largest first (ties in list order), each to the rank
/// with the smallest total so far (the lowest such rank); `totals` carries
/// over from group to group. Sizes are bytes. Returns each parameter's owner.
pub fn partition(sizes: &[usize], totals: &mut [usize]) -> Vec<i64> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]));
    let mut owners = vec![0; sizes.len()];
    for i in order {
        let (rank, _) = totals.iter().enumerate().min_by_key(|&(r, t)| (*t, r)).expect("world >= 1");
        owners[i] = rank as i64;
        totals[rank] += sizes[i];
    }
    owners
}

fn param_bytes(h: i64) -> Result<usize> {
    let t = TENSORS.get(h)?;
    Ok(crate::tensor::numel_of(&imp::shape(&t.raw))? * imp::dtype(&t.raw)?.size())
}

/// Gives `params` owners, continuing the partition in `shard`.
fn assign(params: &mut [Param], shard: &mut Shard) -> Result<()> {
    let sizes = params.iter().map(|p| param_bytes(p.handle)).collect::<Result<Vec<_>>>()?;
    for (p, owner) in params.iter_mut().zip(partition(&sizes, &mut shard.totals)) {
        p.owner = owner;
        if owner != shard.rank {
            p.state = None;
        }
    }
    Ok(())
}

/// Retains every listed param (all checked first); duplicates are refused as PyTorch does.
fn retain_params(list: &str, existing: &[Group]) -> Result<Vec<Param>> {
    let hs = json::handle_list(list)?;
    TENSORS.get_many(&hs)?;
    let mut seen: Vec<i64> = existing.iter().flat_map(|g| g.params.iter().map(|p| p.handle)).collect();
    for &h in &hs {
        if seen.contains(&h) {
            crate::bail!(E_INVALID_ARG, "some parameters appear in more than one parameter group (handle {h})");
        }
        seen.push(h);
    }
    for (i, &h) in hs.iter().enumerate() {
        if let Err(e) = TENSORS.retain(h) {
            hs[..i].iter().for_each(|h| drop(TENSORS.release(*h)));
            return Err(e);
        }
    }
    Ok(hs.into_iter().map(|handle| Param { handle, state: None, owner: 0 }).collect())
}

pub fn create(params: &str, hyper: Hypers) -> Result<i64> {
    let hyper = hyper.validate()?;
    let params = retain_params(params, &[])?;
    // If registering fails, dropping the optimizer releases the params again.
    OPTIMIZERS.insert(Optimizer { inner: Mutex::new(Inner { groups: vec![Group { hyper, params }], shard: None }) })
}

fn with_inner<R>(opt: i64, f: impl FnOnce(&mut Inner) -> Result<R>) -> Result<R> {
    let o = OPTIMIZERS.get(opt)?;
    let mut inner = o.inner.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut inner)
}

fn with_groups<R>(opt: i64, f: impl FnOnce(&mut Vec<Group>) -> Result<R>) -> Result<R> {
    with_inner(opt, |inner| f(&mut inner.groups))
}

fn group_index(groups: &[Group], i: i64) -> Result<usize> {
    let n = groups.len();
    usize::try_from(i).ok().filter(|&i| i < n).ok_or_else(|| crate::err!(E_INVALID_ARG, "param group {i} does not exist ({n} groups)"))
}

fn group_mut(groups: &mut [Group], i: i64) -> Result<&mut Group> {
    let i = group_index(groups, i)?;
    Ok(&mut groups[i])
}

/// One update of `param` with `grad`, creating its state on first use (Adam's
/// moments as zeros, SGD's momentum buffer as the kernel's clone of the
/// first step's direction). The grad must match the param in shape and
/// dtype, as PyTorch requires of `param.grad`; checked here so that every
/// backend refuses alike.
fn update(param: &Raw, grad: &Raw, state: &mut Option<Box<State>>, h: Hypers) -> Result<()> {
    let kind = h.kind();
    let (ps, gs) = (imp::shape(param), imp::shape(grad));
    if ps != gs {
        crate::bail!(E_SHAPE, "{kind}: grad of shape {} for a param of shape {}", json::write_int_list(&gs), json::write_int_list(&ps));
    }
    let (pd, gd) = (imp::dtype(param)?, imp::dtype(grad)?);
    if pd != gd {
        crate::bail!(E_DTYPE, "{kind}: grad of dtype {} for a param of dtype {}", gd.name(), pd.name());
    }
    if !pd.is_float() {
        crate::bail!(E_DTYPE, "{kind}: params must be floating, got {}", pd.name());
    }
    if let Hypers::Sgd(h) = h {
        let buf = state.as_ref().and_then(|s| s.tensors.first());
        let made = imp::sgd_step(param, grad, buf, &SgdStep::new(h))?;
        match state {
            Some(s) => s.step += 1,
            None => *state = Some(Box::new(State { tensors: made.into_iter().collect(), step: 1 })),
        }
        return Ok(());
    }
    let s = match state {
        Some(s) => s,
        None => {
            let tensors = h.state_names().iter().map(|_| imp::zeros_like(param)).collect::<Result<Vec<_>>>()?;
            state.insert(Box::new(State { tensors, step: 0 }))
        }
    };
    s.step += 1;
    let t = &s.tensors;
    match h {
        Hypers::AdamW(h) => imp::adamw_step(param, grad, &t[0], &t[1], &AdamwStep::new(h, s.step as f64)),
        Hypers::Adam(h) => imp::adam_step(param, grad, &t[0], &t[1], t.get(2), &AdamStep::new(h, s.step as f64)),
        Hypers::Sgd(_) => unreachable!("stepped above"),
    }
}

/// Steps every param of `group` that has a `.grad` (of a sharded optimizer,
/// only those `me` owns).
fn step_group(group: &mut Group, me: Option<i64>) -> Result<()> {
    let hyper = group.hyper;
    for p in group.params.iter_mut().filter(|p| me.is_none_or(|r| p.owner == r)) {
        let t = TENSORS.get(p.handle)?;
        if let Some(g) = imp::grad(&t.raw)? {
            update(&t.raw, &g, &mut p.state, hyper)?;
        }
    }
    Ok(())
}

/// Steps the groups `which` selects; a sharded optimizer then hands every
/// rank each of those parameters from its owner.
fn step_groups(inner: &mut Inner, which: impl Fn(usize) -> bool) -> Result<()> {
    let me = inner.shard.as_ref().map(|s| s.rank);
    for (i, g) in inner.groups.iter_mut().enumerate() {
        if which(i) {
            step_group(g, me)?;
        }
    }
    if inner.shard.is_some() {
        let ps: Vec<&Param> = inner.groups.iter().enumerate().filter(|(i, _)| which(*i)).flat_map(|(_, g)| &g.params).collect();
        let handles: Vec<i64> = ps.iter().map(|p| p.handle).collect();
        let owners: Vec<i64> = ps.iter().map(|p| p.owner).collect();
        let ts = TENSORS.get_many(&handles)?;
        let raws: Vec<&Raw> = ts.iter().map(|t| &t.raw).collect();
        crate::dist::broadcast_owned("sharded optimizer step", &raws, &owners)?;
    }
    Ok(())
}

pub fn step(opt: i64) -> Result<()> {
    with_inner(opt, |inner| step_groups(inner, |_| true))
}

pub fn group_step(opt: i64, group: i64) -> Result<()> {
    with_inner(opt, |inner| {
        let which = group_index(&inner.groups, group)?;
        step_groups(inner, |i| i == which)
    })
}

pub fn add_group(opt: i64, params: &str, lr: f64, weight_decay: f64) -> Result<()> {
    with_inner(opt, |inner| {
        let base = inner.groups.first().map(|g| g.hyper).expect("an optimizer has a group");
        let hyper = base.with_lr_wd(lr, weight_decay).validate()?;
        let mut params = retain_params(params, &inner.groups)?;
        if let Some(shard) = &mut inner.shard {
            if let Err(e) = assign(&mut params, shard) {
                params.iter().for_each(|p| drop(TENSORS.release(p.handle)));
                return Err(e);
            }
        }
        inner.groups.push(Group { hyper, params });
        Ok(())
    })
}

/// Shards the optimizer over the process group's ranks (ZeRO stage 1): each
/// parameter gets an owner by the partition of `ZeroRedundancyOptimizer`, and
/// this rank drops the state of the parameters it does not own.
pub fn shard(opt: i64) -> Result<Shard> {
    let (rank, world) = crate::dist::rank_and_world()?;
    with_inner(opt, |inner| {
        if let Some(s) = &inner.shard {
            crate::bail!(E_INVALID_ARG, "optimizer {opt} is already sharded over {} ranks", s.world);
        }
        let mut shard = Shard { world, rank, totals: vec![0; world as usize] };
        for g in &mut inner.groups {
            assign(&mut g.params, &mut shard)?;
        }
        inner.shard = Some(shard.clone());
        Ok(shard)
    })
}

/// The bytes of optimizer state (moments, momentum buffers) this rank holds, counted from the tensors that exist.
pub fn state_bytes(opt: i64) -> Result<i64> {
    with_groups(opt, |groups| {
        let mut total = 0usize;
        for s in groups.iter().flat_map(|g| &g.params).filter_map(|p| p.state.as_ref()) {
            for t in &s.tensors {
                total += crate::tensor::numel_of(&imp::shape(t))? * imp::dtype(t)?.size();
            }
        }
        Ok(total as i64)
    })
}

pub fn set_lr(opt: i64, group: i64, lr: f64) -> Result<()> {
    with_groups(opt, |groups| {
        let g = group_mut(groups, group)?;
        g.hyper = g.hyper.with_lr(lr).validate()?;
        Ok(())
    })
}

/// The functional form: steps `params[i]` with `grads[i]` (0 grads skipped)
/// using the hyperparameters of this call. `state == 0` creates the state,
/// bound to these params; the same handle comes back.
pub fn step_multi(params: &str, grads: &str, state: i64, hyper: Hyper) -> Result<i64> {
    let hyper = Hypers::AdamW(hyper.validate()?);
    let (ps, gs) = (json::handle_list(params)?, json::handle_list(grads)?);
    if ps.len() != gs.len() {
        crate::bail!(E_INVALID_ARG, "adamw_step: {} params but {} grads", ps.len(), gs.len());
    }
    let grads: Vec<i64> = gs.iter().copied().filter(|g| *g != 0).collect();
    TENSORS.get_many(&grads)?;
    let (state, created) = match state {
        0 => (create(params, hyper)?, true),
        s => (s, false),
    };
    let result = with_groups(state, |groups| {
        let group = &mut groups[0];
        if !matches!(group.hyper, Hypers::AdamW(_)) {
            crate::bail!(E_INVALID_ARG, "adamw_step: handle {state} is an optimizer of kind {}, not an AdamW state", group.hyper.kind());
        }
        let bound: Vec<i64> = group.params.iter().map(|p| p.handle).collect();
        if bound != ps {
            crate::bail!(E_INVALID_ARG, "adamw_step: state {state} was created for params {} , not {}", json::write_int_list(&bound), json::write_int_list(&ps));
        }
        for (p, &g) in group.params.iter_mut().zip(&gs) {
            if g == 0 {
                continue;
            }
            let (t, gt) = (TENSORS.get(p.handle)?, TENSORS.get(g)?);
            update(&t.raw, &gt.raw, &mut p.state, hyper)?;
        }
        Ok(state)
    });
    if result.is_err() && created {
        let _ = OPTIMIZERS.release(state);
    }
    result
}

/// An optimizer's state for a checkpoint: groups as indices into the saved
/// params list, and per-param state with its step: each tensor (a shallow
/// copy) by its name in `Hypers::state_names`.
pub struct Export {
    pub groups: Vec<(Hypers, Vec<usize>)>,
    pub states: Vec<(usize, u64, Vec<(&'static str, Raw)>)>,
    /// For a sharded optimizer: the world and each saved param's owner (−1: not in the optimizer).
    pub shard: Option<(i64, Vec<i64>)>,
}

pub fn export(opt: i64, saved: &[i64]) -> Result<Export> {
    with_inner(opt, |inner| {
        let shard = inner.shard.as_ref().map(|s| (s.world, vec![-1; saved.len()]));
        let mut out = Export { groups: Vec::new(), states: Vec::new(), shard };
        for g in inner.groups.iter() {
            let mut idx = Vec::with_capacity(g.params.len());
            for p in &g.params {
                let i = saved.iter().position(|h| *h == p.handle).ok_or_else(|| {
                    crate::err!(E_INVALID_ARG, "optimizer param {} is not among the params being saved", p.handle)
                })?;
                idx.push(i);
                if let Some((_, owners)) = &mut out.shard {
                    owners[i] = p.owner;
                }
                if let Some(s) = &p.state {
                    let named = g.hyper.state_names().iter().zip(&s.tensors).map(|(n, t)| (*n, imp::shallow(t))).collect();
                    out.states.push((i, s.step, named));
                }
            }
            out.groups.push((g.hyper, idx));
        }
        Ok(out)
    })
}

/// How an imported optimizer is sharded.
pub enum ImportShard {
    None,
    /// As saved: this rank of `world`, each param's owner by handle.
    Saved { world: i64, rank: i64, owners: Vec<(i64, i64)> },
    /// Partitioned afresh over a world of another size (its states must all be present).
    Fresh { world: i64, rank: i64 },
}

/// Rebuilds an optimizer over `handles` (retained) from a checkpoint's
/// state: per param, its step and the tensors its group's
/// `Hypers::state_names` lists, in that order.
pub fn import(groups: Vec<(Hypers, Vec<i64>)>, mut states: Vec<(i64, u64, Vec<Raw>)>, sharding: ImportShard) -> Result<i64> {
    // Dropping `opt` (on any error below) releases every param retained so far.
    let mut opt = Optimizer { inner: Mutex::new(Inner { groups: Vec::with_capacity(groups.len()), shard: None }) };
    let inner = opt.inner.get_mut().unwrap_or_else(|p| p.into_inner());
    for (hyper, hs) in groups {
        let params = retain_params(&json::write_int_list(&hs), &inner.groups)?;
        inner.groups.push(Group { hyper, params });
        let hyper = hyper.validate()?;
        let names = hyper.state_names();
        for p in &mut inner.groups.last_mut().expect("just pushed").params {
            if let Some(k) = states.iter().position(|s| s.0 == p.handle) {
                let (_, step, tensors) = states.swap_remove(k);
                if tensors.len() != names.len() {
                    crate::bail!(E_CKPT_FORMAT, "param {} has {} state tensors, a {} group needs {names:?}", p.handle, tensors.len(), hyper.kind());
                }
                p.state = Some(Box::new(State { tensors, step }));
            }
        }
    }
    match sharding {
        ImportShard::None => {}
        ImportShard::Saved { world, rank, owners } => {
            let mut shard = Shard { world, rank, totals: vec![0; world as usize] };
            for p in inner.groups.iter_mut().flat_map(|g| &mut g.params) {
                let owner = owners.iter().find(|(h, _)| *h == p.handle).map(|(_, o)| *o);
                p.owner = owner.filter(|o| (0..world).contains(o)).ok_or_else(|| {
                    crate::err!(E_CKPT_FORMAT, "the saved partition gives param {} no owner in a world of {world}", p.handle)
                })?;
                shard.totals[p.owner as usize] += param_bytes(p.handle)?;
            }
            inner.shard = Some(shard);
        }
        ImportShard::Fresh { world, rank } => {
            let mut shard = Shard { world, rank, totals: vec![0; world as usize] };
            for g in &mut inner.groups {
                assign(&mut g.params, &mut shard)?;
            }
            inner.shard = Some(shard);
        }
    }
    OPTIMIZERS.insert(opt)
}

#[cfg(test)]
mod tests {
    use super::partition;

    #[test]
    fn partition_is_zero_redundancy_optimizers_greedy() {
        // largest first, each to the currently smallest rank (lowest index on ties)
        let mut totals = vec![0; 2];
        assert_eq!(partition(&[4, 16, 8, 8, 2], &mut totals), vec![0, 0, 1, 1, 1]);
        assert_eq!(totals, vec![20, 18]);
        // a second group continues from the totals
        assert_eq!(partition(&[4, 4], &mut totals), vec![1, 0]);
        let mut totals = vec![0; 4];
        assert_eq!(partition(&[1, 1, 1, 1, 1], &mut totals), vec![0, 1, 2, 3, 0]);
    }
}
