//! AdamW with parameter groups, `torch.optim.AdamW` semantics: decoupled
//! weight decay `lr * wd`, bias correction, eps added after the square root,
//! moments in the parameter's dtype and device, parameters without a grad
//! skipped. The step's scalars are computed once here (`AdamwStep`); each
//! backend applies them with its own kernels (libtorch's through the shim,
//! the native backend's in Rust), in PyTorch's order of tensor ops.
//!
//! Sharded (ZeRO stage 1, as `torch.distributed.optim.ZeroRedundancyOptimizer`):
//! every parameter has an owner rank, each rank keeps moments only for the
//! parameters it owns and updates only those, then every rank receives each
//! parameter from its owner, so all ranks end each step with the same values.

use std::sync::Mutex;

use crate::backend::imp::{self, Raw};
use crate::error::Result;
use crate::json;
use crate::registry::{OPTIMIZERS, TENSORS};
pub use crate::vocab::optim::{AdamwStep, Hyper};

struct Moments {
    exp_avg: Raw,
    exp_avg_sq: Raw,
    step: u64,
}

struct Param {
    /// A retained tensor handle, released when the optimizer is freed.
    handle: i64,
    state: Option<Moments>,
    /// The rank that updates it when the optimizer is sharded.
    owner: i64,
}

struct Group {
    hyper: Hyper,
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

pub fn create(params: &str, hyper: Hyper) -> Result<i64> {
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

/// One AdamW update of `param` with `grad`, creating its moments on first use.
/// The grad must match the param in shape and dtype, as PyTorch requires of
/// `param.grad`; checked here so that every backend refuses alike.
fn update(param: &Raw, grad: &Raw, state: &mut Option<Moments>, h: Hyper) -> Result<()> {
    let (ps, gs) = (imp::shape(param), imp::shape(grad));
    if ps != gs {
        crate::bail!(E_SHAPE, "adamw: grad of shape {} for a param of shape {}", json::write_int_list(&gs), json::write_int_list(&ps));
    }
    let (pd, gd) = (imp::dtype(param)?, imp::dtype(grad)?);
    if pd != gd {
        crate::bail!(E_DTYPE, "adamw: grad of dtype {} for a param of dtype {}", gd.name(), pd.name());
    }
    if !pd.is_float() {
        crate::bail!(E_DTYPE, "adamw: params must be floating, got {}", pd.name());
    }
    let m = match state {
        Some(m) => m,
        None => state.insert(Moments { exp_avg: imp::zeros_like(param)?, exp_avg_sq: imp::zeros_like(param)?, step: 0 }),
    };
    m.step += 1;
    imp::adamw_step(param, grad, &m.exp_avg, &m.exp_avg_sq, &AdamwStep::new(h, m.step as f64))
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
        let hyper = Hyper { lr, weight_decay, ..base }.validate()?;
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
/// this rank drops the moments of the parameters it does not own.
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

/// The bytes of optimizer state (moments) this rank holds, counted from the tensors that exist.
pub fn state_bytes(opt: i64) -> Result<i64> {
    with_groups(opt, |groups| {
        let mut total = 0usize;
        for m in groups.iter().flat_map(|g| &g.params).filter_map(|p| p.state.as_ref()) {
            for t in [&m.exp_avg, &m.exp_avg_sq] {
                total += crate::tensor::numel_of(&imp::shape(t))? * imp::dtype(t)?.size();
            }
        }
        Ok(total as i64)
    })
}

pub fn set_lr(opt: i64, group: i64, lr: f64) -> Result<()> {
    with_groups(opt, |groups| {
        let g = group_mut(groups, group)?;
        g.hyper = Hyper { lr, ..g.hyper }.validate()?;
        Ok(())
    })
}

/// The functional form: steps `params[i]` with `grads[i]` (0 grads skipped)
/// using the hyperparameters of this call. `state == 0` creates the state,
/// bound to these params; the same handle comes back.
pub fn step_multi(params: &str, grads: &str, state: i64, hyper: Hyper) -> Result<i64> {
    let hyper = hyper.validate()?;
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
/// params list, and per-param moments (shallow copies) with their step.
pub struct Export {
    pub groups: Vec<(Hyper, Vec<usize>)>,
    pub states: Vec<(usize, u64, Raw, Raw)>,
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
                if let Some(m) = &p.state {
                    out.states.push((i, m.step, imp::shallow(&m.exp_avg), imp::shallow(&m.exp_avg_sq)));
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

/// Rebuilds an optimizer over `handles` (retained) from a checkpoint's state.
pub fn import(groups: Vec<(Hyper, Vec<i64>)>, mut states: Vec<(i64, u64, Raw, Raw)>, sharding: ImportShard) -> Result<i64> {
    let mut built = Vec::with_capacity(groups.len());
    for (hyper, hs) in groups {
        let list = json::write_int_list(&hs);
        let mut params = retain_params(&list, &built)?;
        for p in &mut params {
            if let Some(k) = states.iter().position(|s| s.0 == p.handle) {
                let (_, step, exp_avg, exp_avg_sq) = states.swap_remove(k);
                p.state = Some(Moments { exp_avg, exp_avg_sq, step });
            }
        }
        built.push(Group { hyper: hyper.validate()?, params });
    }
    // From here on, dropping `opt` releases every retained param.
    let mut opt = Optimizer { inner: Mutex::new(Inner { groups: built, shard: None }) };
    let inner = opt.inner.get_mut().unwrap_or_else(|p| p.into_inner());
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
