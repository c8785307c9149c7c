//! Tensor operations, one libtorch call each (argument checks live in `crate::ops`).

use std::ffi::{c_char, c_int};

use torch_sys::C_tensor;

use super::{kind, tdevice, torch_err, Raw, Torch};
use crate::backend::contract::Ops;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Code, Result};
use crate::vocab::kinds::Binary;

fn wrap(r: std::result::Result<tch::Tensor, tch::TchError>) -> Result<Raw> {
    r.map(Raw).map_err(torch_err)
}

extern "C" {
    fn enkai_shim_binary(op: c_int, a: *const C_tensor, b: *const C_tensor, out: *mut *mut C_tensor) -> *mut c_char;
}

impl Ops for Torch {
    // The shim skips the autograd layer when no input requires grad (see shim.cpp).
    fn binary(op: Binary, a: &Raw, b: &Raw) -> Result<Raw> {
        let op = match op {
            Binary::Add => 0,
            Binary::Sub => 1,
            Binary::Mul => 2,
            Binary::Div => 3,
        };
        // SAFETY: live tensors for the call, a valid out-pointer.
        super::shim_tensor(Code::E_TORCH, |out| unsafe { enkai_shim_binary(op, a.0.as_ptr(), b.0.as_ptr(), out) }).map(Raw)
    }

    fn view(x: &Raw, shape: &[i64]) -> Result<Raw> {
        x.0.f_view_(shape).or_else(|_| x.0.f_reshape(shape)).map(Raw).map_err(torch_err)
    }

    fn concat(ts: &[&Raw], dim: i64) -> Result<Raw> {
        let v: Vec<&tch::Tensor> = ts.iter().map(|t| &t.0).collect();
        wrap(tch::Tensor::f_cat(&v, dim))
    }

    fn slice(x: &Raw, dim: i64, start: i64, end: i64, step: i64) -> Result<Raw> {
        wrap(x.0.f_slice(dim, start, end, step))
    }

    // libtorch's masked-softmax kernels divide by the softmax dimension's length
    // and die with SIGFPE on an empty input (PyTorch's own torch._masked_softmax
    // does too); an empty input gets what plain softmax gives it instead.
    fn masked_softmax(x: &Raw, mask: &Raw, dim: i64, mask_type: Option<i64>) -> Result<Raw> {
        if x.0.numel() == 0 {
            return wrap(x.0.f_softmax(dim, None::<tch::Kind>));
        }
        let m = mask.0.f_ne(0).map_err(torch_err)?;
        // The CPU kernel reads a permuted input as if it were contiguous.
        let x = x.0.f_contiguous().map_err(torch_err)?;
        wrap(x.f_internal_masked_softmax(&m, dim, mask_type))
    }

    fn masked_softmax_backward(grad: &Raw, out: &Raw, mask: &Raw, dim: i64) -> Result<Raw> {
        if grad.0.numel() == 0 || out.0.numel() == 0 {
            return wrap(tch::Tensor::f_internal_softmax_backward_data(&grad.0, &out.0, dim, out.0.kind()));
        }
        let m = mask.0.f_ne(0).map_err(torch_err)?;
        let (g, o) = (grad.0.f_contiguous().map_err(torch_err)?, out.0.f_contiguous().map_err(torch_err)?);
        wrap(tch::Tensor::f_internal_masked_softmax_backward(&g, &o, &m, dim))
    }

    fn dropout(x: &Raw, p: f64, train: bool) -> Result<Raw> {
        wrap(x.0.f_dropout(p, train))
    }

    fn layernorm(x: &Raw, w: &Raw, b: Option<&Raw>, eps: f64) -> Result<Raw> {
        let shape = w.0.size();
        wrap(x.0.f_layer_norm(&shape, Some(&w.0), b.map(|b| &b.0), eps, true))
    }

    /// `[dx, dw, db]` for `grad_out` through layer_norm: the vector-Jacobian
    /// product taken by autograd on detached copies, which runs libtorch's own
    /// `native_layer_norm_backward` (tch exposes no direct binding of it).
    fn layernorm_backward(x: &Raw, w: &Raw, b: Option<&Raw>, eps: f64, grad: &Raw) -> Result<Vec<Raw>> {
        let leaf = |t: &tch::Tensor| t.f_detach()?.f_set_requires_grad(true);
        let run = || -> std::result::Result<Vec<tch::Tensor>, tch::TchError> {
            let (x, w) = (leaf(&x.0)?, leaf(&w.0)?);
            let b = b.map(|b| leaf(&b.0)).transpose()?;
            let out = x.f_layer_norm(w.size(), Some(&w), b.as_ref(), eps, true)?;
            let loss = out.f_mul(&grad.0)?.f_sum(None::<tch::Kind>)?;
            let mut inputs = vec![&x, &w];
            inputs.extend(b.as_ref());
            tch::Tensor::f_run_backward(&[loss], &inputs, false, false)
        };
        tch::with_grad(run).map(|v| v.into_iter().map(Raw).collect()).map_err(torch_err)
    }

    fn embedding(w: &Raw, ids: &Raw) -> Result<Raw> {
        wrap(tch::Tensor::f_embedding(&w.0, &ids.0, -1, false, false))
    }

    /// Computed as `torch.nn.functional.linear(x, w.T, b)` so autocast treats
    /// it as PyTorch treats a linear layer.
    fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
        let wt = w.0.f_tr().map_err(torch_err)?;
        wrap(x.0.f_linear(&wt, b.map(|b| &b.0)))
    }

    fn cross_entropy(logits: &Raw, targets: &Raw) -> Result<Raw> {
        wrap(logits.0.f_cross_entropy_loss(&targets.0, None::<tch::Tensor>, tch::Reduction::Mean, -100, 0.0))
    }

    fn to_device(x: &Raw, dev: Device) -> Result<Raw> {
        wrap(x.0.f_to_device(tdevice(dev)))
    }

    fn to_dtype(x: &Raw, dtype: DType) -> Result<Raw> {
        wrap(x.0.f_to_kind(kind(dtype)))
    }

    fn min_max(x: &Raw) -> Result<(f64, f64)> {
        let lo = x.0.f_min().and_then(|t| t.f_double_value(&[])).map_err(torch_err)?;
        let hi = x.0.f_max().and_then(|t| t.f_double_value(&[])).map_err(torch_err)?;
        Ok((lo, hi))
    }

    fn stack_one(t: &Raw) -> Result<Raw> {
        wrap(tch::Tensor::f_stack(&[&t.0], 0))
    }

    fn op<O>(call: &crate::vocab::Call, inputs: &[Option<&Raw>], wrap: impl Fn(Raw) -> O) -> Result<smallvec::SmallVec<[O; 2]>> {
        // `F.interpolate` is Python choosing among ATen's upsample operators, not one of them.
        if !call.op.row.aten && call.op.name() == "interpolate" {
            return Ok(smallvec::smallvec![wrap(super::sample::interpolate(call, inputs)?)]);
        }
        super::opcall::run(call, inputs, wrap)
    }
}
