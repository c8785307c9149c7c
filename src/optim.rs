//! AdamW with parameter groups, `torch.optim.AdamW` semantics: decoupled
//! weight decay `lr * wd`, bias correction, eps added after the square root,
//! moments in the parameter's dtype and device, parameters without a grad
//! skipped. The arithmetic runs in libtorch (see backend `adamw_step`).

use std::sync::Mutex;

use crate::backend::imp::{self, Raw};
use crate::error::Result;
use crate::json;
use crate::registry::{OPTIMIZERS, TENSORS};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Hyper {
    /// The checks `torch.optim.AdamW.__init__` makes.
    pub fn validate(self) -> Result<Hyper> {
        let Hyper { lr, beta1, beta2, eps, weight_decay } = self;
        if lr.is_nan() || lr < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid learning rate: {lr}");
        }
        if eps.is_nan() || eps < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid epsilon value: {eps}");
        }
        if !(0.0..1.0).contains(&beta1) {
            crate::bail!(E_INVALID_ARG, "Invalid beta parameter at index 0: {beta1}");
        }
        if !(0.0..1.0).contains(&beta2) {
            crate::bail!(E_INVALID_ARG, "Invalid beta parameter at index 1: {beta2}");
        }
        if weight_decay.is_nan() || weight_decay < 0.0 {
            crate::bail!(E_INVALID_ARG, "Invalid weight_decay value: {weight_decay}");
        }
        Ok(self)
    }
}

struct Moments {
    exp_avg: Raw,
    exp_avg_sq: Raw,
    step: u64,
}

struct Param {
    /// A retained tensor handle, released when the optimizer is freed.
    handle: i64,
    state: Option<Moments>,
}

struct Group {
    hyper: Hyper,
    params: Vec<Param>,
}

/// An optimizer handle's value.
pub struct Optimizer {
    groups: Mutex<Vec<Group>>,
}

impl Drop for Optimizer {
    fn drop(&mut self) {
        let groups = self.groups.get_mut().unwrap_or_else(|p| p.into_inner());
        for p in groups.iter().flat_map(|g| &g.params) {
            let _ = TENSORS.release(p.handle);
        }
    }
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
    Ok(hs.into_iter().map(|handle| Param { handle, state: None }).collect())
}

pub fn create(params: &str, hyper: Hyper) -> Result<i64> {
    let hyper = hyper.validate()?;
    let params = retain_params(params, &[])?;
    // If registering fails, dropping the optimizer releases the params again.
    OPTIMIZERS.insert(Optimizer { groups: Mutex::new(vec![Group { hyper, params }]) })
}

fn with_groups<R>(opt: i64, f: impl FnOnce(&mut Vec<Group>) -> Result<R>) -> Result<R> {
    let o = OPTIMIZERS.get(opt)?;
    let mut g = o.groups.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut g)
}

fn group_mut(groups: &mut [Group], i: i64) -> Result<&mut Group> {
    let n = groups.len();
    usize::try_from(i)
        .ok()
        .and_then(|i| groups.get_mut(i))
        .ok_or_else(|| crate::err!(E_INVALID_ARG, "param group {i} does not exist ({n} groups)"))
}

/// One AdamW update of `param` with `grad`, creating its moments on first use.
fn update(param: &Raw, grad: &Raw, state: &mut Option<Moments>, h: Hyper) -> Result<()> {
    let m = match state {
        Some(m) => m,
        None => state.insert(Moments { exp_avg: imp::zeros_like(param)?, exp_avg_sq: imp::zeros_like(param)?, step: 0 }),
    };
    m.step += 1;
    imp::adamw_step(param, grad, &m.exp_avg, &m.exp_avg_sq, m.step as f64, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay)
}

/// Steps every param of `group` that has a `.grad`.
fn step_group(group: &mut Group) -> Result<()> {
    let hyper = group.hyper;
    for p in &mut group.params {
        let t = TENSORS.get(p.handle)?;
        if let Some(g) = imp::grad(&t.raw)? {
            update(&t.raw, &g, &mut p.state, hyper)?;
        }
    }
    Ok(())
}

pub fn step(opt: i64) -> Result<()> {
    with_groups(opt, |groups| groups.iter_mut().try_for_each(step_group))
}

pub fn group_step(opt: i64, group: i64) -> Result<()> {
    with_groups(opt, |groups| step_group(group_mut(groups, group)?))
}

pub fn add_group(opt: i64, params: &str, lr: f64, weight_decay: f64) -> Result<()> {
    with_groups(opt, |groups| {
        let base = groups.first().map(|g| g.hyper).expect("an optimizer has a group");
        let hyper = Hyper { lr, weight_decay, ..base }.validate()?;
        let params = retain_params(params, groups)?;
        groups.push(Group { hyper, params });
        Ok(())
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
}

pub fn export(opt: i64, saved: &[i64]) -> Result<Export> {
    with_groups(opt, |groups| {
        let mut out = Export { groups: Vec::new(), states: Vec::new() };
        for g in groups.iter() {
            let mut idx = Vec::with_capacity(g.params.len());
            for p in &g.params {
                let i = saved.iter().position(|h| *h == p.handle).ok_or_else(|| {
                    crate::err!(E_INVALID_ARG, "optimizer param {} is not among the params being saved", p.handle)
                })?;
                idx.push(i);
                if let Some(m) = &p.state {
                    out.states.push((i, m.step, imp::shallow(&m.exp_avg), imp::shallow(&m.exp_avg_sq)));
                }
            }
            out.groups.push((g.hyper, idx));
        }
        Ok(out)
    })
}

/// Rebuilds an optimizer over `handles` (retained) from a checkpoint's state.
pub fn import(groups: Vec<(Hyper, Vec<i64>)>, mut states: Vec<(i64, u64, Raw, Raw)>) -> Result<i64> {
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
    OPTIMIZERS.insert(Optimizer { groups: Mutex::new(built) })
}
