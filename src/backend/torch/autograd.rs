//! Autograd and in-place gradient utilities.

use super::{torch_err, Raw, Torch};
use crate::backend::contract::Autograd;
use crate::error::Result;

impl Autograd for Torch {
    fn requires_grad(t: &Raw) -> bool {
        t.0.requires_grad()
    }

    fn set_requires_grad(x: &Raw, flag: bool) -> Result<()> {
        // PyTorch checks this in its Python binding, not in libtorch.
        if !flag && !x.0.f_is_leaf().map_err(torch_err)? {
            crate::bail!(E_AUTOGRAD, "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
        }
        x.0.f_set_requires_grad(flag).map(drop).map_err(torch_err)
    }

    fn backward(loss: &Raw) -> Result<()> {
        loss.0.f_backward().map_err(torch_err)
    }

    fn grad(x: &Raw) -> Result<Option<Raw>> {
        // A non-leaf that does not retain its grad has none; asking libtorch
        // would also print its "non-leaf .grad" warning on stderr at every call.
        if !x.0.f_is_leaf().map_err(torch_err)? && !x.0.f_retains_grad().map_err(torch_err)? {
            return Ok(None);
        }
        let g = x.0.f_grad().map_err(torch_err)?;
        Ok(g.defined().then_some(Raw(g)))
    }

    fn zero_grad(x: &Raw) -> Result<()> {
        if let Some(Raw(mut g)) = Self::grad(x)? {
            g.f_detach_().and_then(|mut g| g.f_zero_()).map(drop).map_err(torch_err)?;
        }
        Ok(())
    }

    fn all_finite(x: &Raw) -> Result<bool> {
        let ok = x.0.f_isfinite().and_then(|t| t.f_all()).and_then(|t| t.f_int64_value(&[])).map_err(torch_err)?;
        Ok(ok != 0)
    }

    /// `x *= s` in place, as `torch.Tensor.mul_` with a Python float.
    fn scale_(x: &Raw, s: f64) -> Result<()> {
        // As PyTorch's grad utilities, under no_grad: a grad that itself
        // requires grad may be scaled in place.
        let _no_grad = tch::no_grad_guard();
        super::scalar_op(|| x.0.shallow_clone().f_mul_scalar_(s).map(drop))
    }

    /// `torch.nn.utils.clip_grad_norm_`: the norm of the per-grad norms, then every
    /// grad multiplied by `clamp(max_norm / (total + 1e-6), max=1)`, computed with
    /// tensor ops in the grads' dtype exactly as PyTorch does. Returns the pre-clip total.
    fn clip_grad_norm(grads: &[&Raw], max_norm: f64, norm_type: f64) -> Result<f64> {
        let run = || -> std::result::Result<f64, tch::TchError> {
            if grads.is_empty() {
                return Ok(0.0);
            }
            let norms = grads
                .iter()
                .map(|g| g.0.f_flatten(0, -1)?.f_linalg_norm(norm_type, None::<&[i64]>, false, None::<tch::Kind>))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let total = tch::Tensor::f_stack(&norms, 0)?.f_linalg_norm(norm_type, None::<&[i64]>, false, None::<tch::Kind>)?;
            let coef = total.f_add_scalar(1e-6)?.f_reciprocal()?.f_mul_scalar(max_norm)?.f_clamp_max(1.0)?;
            for g in grads {
                let coef = coef.f_to_device(g.0.device())?;
                g.0.shallow_clone().f_mul_(&coef).map(drop)?;
            }
            total.f_double_value(&[])
        };
        // A guard, not tch::no_grad(f): its Drop restores grad mode even when `run` unwinds.
        let _no_grad = tch::no_grad_guard();
        super::scalar_op(run)
    }
}
