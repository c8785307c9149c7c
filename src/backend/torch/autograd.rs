//! Autograd and in-place gradient utilities.

use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::{shim_result, torch_err, Raw, Torch};
use crate::backend::contract::{Autograd, CustomBackward};
use crate::error::{Code, Result};

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

    fn detach(x: &Raw) -> Result<Raw> {
        x.0.f_detach().map(Raw).map_err(torch_err)
    }

    fn graph_leaves(outs: &[&Raw]) -> Result<Vec<Raw>> {
        let mut ptrs = c_tensors(outs);
        let (mut arr, mut n) = (std::ptr::null_mut(), 0usize);
        // SAFETY: `ptrs` holds live at::Tensor*; on success the shim hands
        // back a malloc'ed array of `n` new at::Tensor* that we now own.
        shim_result(unsafe { enkai_shim_graph_leaves(ptrs.as_mut_ptr(), ptrs.len(), &mut arr, &mut n) }, Code::E_TORCH)?;
        let leaves = (0..n).map(|i| Raw(unsafe { tch::Tensor::from_ptr(*arr.add(i)) })).collect();
        unsafe { libc::free(arr.cast()) };
        Ok(leaves)
    }

    fn backward_with(outs: &[&Raw], grads: &[&Raw]) -> Result<()> {
        let (mut o, mut g) = (c_tensors(outs), c_tensors(grads));
        // SAFETY: equal-length arrays of live at::Tensor*, read only.
        shim_result(unsafe { enkai_shim_backward_with(o.as_mut_ptr(), g.as_mut_ptr(), o.len().min(g.len())) }, Code::E_TORCH)
    }

    fn custom_node(name: &'static str, inputs: &[&Raw], outs: Vec<Raw>, backward: CustomBackward<Raw>) -> Result<Vec<Raw>> {
        if !inputs.iter().any(|t| t.0.requires_grad()) {
            return Ok(outs);
        }
        // Fresh impls, so the history is set on these outputs alone.
        let outs = outs.iter().map(|o| o.0.f_detach().map(Raw)).collect::<std::result::Result<Vec<_>, _>>().map_err(torch_err)?;
        let (mut ins, mut os) = (c_tensors(inputs), c_tensors(&outs.iter().collect::<Vec<_>>()));
        let label = CString::new(name).unwrap_or_default();
        let state = Box::into_raw(Box::new(backward)).cast::<c_void>();
        // SAFETY: live at::Tensor* arrays; the node owns `state` from here
        // on and runs `run_custom` or `drop_custom` on it exactly once.
        shim_result(
            unsafe { enkai_shim_custom_node(ins.as_mut_ptr(), ins.len(), os.as_mut_ptr(), os.len(), label.as_ptr(), state, run_custom, drop_custom) },
            Code::E_TORCH,
        )?;
        Ok(outs)
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

fn c_tensors(ts: &[&Raw]) -> Vec<*mut torch_sys::C_tensor> {
    ts.iter().map(|t| t.0.as_ptr().cast_mut()).collect()
}

/// A malloc'ed copy of `s` for a shim to throw (NUL bytes dropped).
fn c_message(s: &str) -> *mut c_char {
    let s = CString::new(s.replace('\0', "")).unwrap_or_default();
    let b = s.as_bytes_with_nul();
    // SAFETY: a fresh allocation of b.len() bytes, filled before it is returned.
    unsafe {
        let p = libc::malloc(b.len()).cast::<c_char>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), p, b.len());
        }
        p
    }
}

/// The RustNode's apply: runs the boxed backward once (see autograd_shim.cpp).
unsafe extern "C" fn run_custom(
    state: *mut c_void,
    grads: *mut *mut torch_sys::C_tensor,
    n_grads: usize,
    out: *mut *mut torch_sys::C_tensor,
    n_out: usize,
) -> *mut c_char {
    // SAFETY: `state` is the Box made in `custom_node`, handed over once;
    // each non-NULL grad is a new at::Tensor* we now own.
    let f = unsafe { Box::from_raw(state.cast::<CustomBackward<Raw>>()) };
    let gs = (0..n_grads)
        .map(|i| {
            let p = unsafe { *grads.add(i) };
            (!p.is_null()).then(|| Raw(unsafe { tch::Tensor::from_ptr(p) }))
        })
        .collect();
    let r = match catch_unwind(AssertUnwindSafe(move || f(gs))) {
        Ok(r) => r,
        Err(_) => return c_message("E_INTERNAL: a custom autograd node's backward panicked"),
    };
    match r {
        Ok(back) if back.len() == n_out => {
            for (i, g) in back.into_iter().enumerate() {
                if let Some(mut g) = g {
                    // SAFETY: `out` has `n_out` slots; the C++ side takes the at::Tensor*.
                    unsafe { *out.add(i) = g.0.as_mut_ptr() };
                    std::mem::forget(g);
                }
            }
            std::ptr::null_mut()
        }
        Ok(back) => c_message(&format!("E_INTERNAL: a custom autograd node's backward gave {} gradients for {n_out} inputs", back.len())),
        Err(e) => c_message(&format!("{}: {}", e.code.name(), e.detail)),
    }
}

unsafe extern "C" fn drop_custom(state: *mut c_void) {
    // SAFETY: as in `run_custom`; a backward that never ran is dropped here once.
    let f = unsafe { Box::from_raw(state.cast::<CustomBackward<Raw>>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || drop(f)));
}

extern "C" {
    fn enkai_shim_custom_node(
        inputs: *mut *mut torch_sys::C_tensor,
        n_in: usize,
        outs: *mut *mut torch_sys::C_tensor,
        n_out: usize,
        name: *const c_char,
        state: *mut c_void,
        run: unsafe extern "C" fn(*mut c_void, *mut *mut torch_sys::C_tensor, usize, *mut *mut torch_sys::C_tensor, usize) -> *mut c_char,
        drop: unsafe extern "C" fn(*mut c_void),
    ) -> *mut c_char;
    fn enkai_shim_backward_with(outs: *mut *mut torch_sys::C_tensor, grads: *mut *mut torch_sys::C_tensor, n: usize) -> *mut c_char;
    fn enkai_shim_graph_leaves(
        outs: *mut *mut torch_sys::C_tensor,
        n: usize,
        leaves: *mut *mut *mut torch_sys::C_tensor,
        n_leaves: *mut usize,
    ) -> *mut c_char;
}
