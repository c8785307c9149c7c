//! Native `interpolate`: separable resampling, one spatial axis at a time
//! (nearest reads one input position, linear modes blend two), with the
//! positions and weights PyTorch's CPU kernels compute (`vocab::sample`).
//! Values are blended in f64 and rounded once to the input's dtype; the
//! backward is each axis's adjoint (every result position adds its weighted
//! gradient into the positions it read). `unfold`/`fold` live with the
//! convolutions (`conv.rs`), whose im2col they are.

use super::super::autograd::{needs_grad, record};
use super::super::ops::convert;
use super::super::tensor::Raw;
use super::{input, real, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::sample::{interp_plan, Mode};
use crate::vocab::Call;

pub static KERNELS: &[(&str, Kernel)] = &[("interpolate", interpolate)];

/// Per result position along one axis: the two input positions read and their weights.
type Axis = Vec<(usize, usize, f64, f64)>;

/// Resamples `data`, `[outer, n_in, inner]`, along its middle axis to `[outer, n_out, inner]` (`ax.len()` = `n_out`).
fn along(data: &[f64], outer: usize, n_in: usize, n_out: usize, inner: usize, ax: &Axis) -> Vec<f64> {
    let mut out = vec![0.0; outer * n_out * inner];
    if inner == 0 {
        return out;
    }
    for (src, dst) in data.chunks_exact(n_in * inner).zip(out.chunks_exact_mut(n_out * inner)) {
        for (d, &(i0, i1, w0, w1)) in dst.chunks_exact_mut(inner).zip(ax) {
            let (a, b) = (&src[i0 * inner..][..inner], &src[i1 * inner..][..inner]);
            if w1 == 0.0 {
                d.iter_mut().zip(a).for_each(|(d, &a)| *d = w0 * a);
            } else {
                d.iter_mut().zip(a.iter().zip(b)).for_each(|(d, (&a, &b))| *d = w0 * a + w1 * b);
            }
        }
    }
    out
}

/// The adjoint of `along`: `grad` `[outer, n_out, inner]` summed back into `[outer, n_in, inner]`.
fn along_t(grad: &[f64], outer: usize, n_out: usize, n_in: usize, inner: usize, ax: &Axis) -> Vec<f64> {
    let mut out = vec![0.0; outer * n_in * inner];
    if inner == 0 {
        return out;
    }
    for (g, dst) in grad.chunks_exact(n_out * inner).zip(out.chunks_exact_mut(n_in * inner)) {
        for (gj, &(i0, i1, w0, w1)) in g.chunks_exact(inner).zip(ax) {
            dst[i0 * inner..][..inner].iter_mut().zip(gj).for_each(|(d, &v)| *d += w0 * v);
            if w1 != 0.0 {
                dst[i1 * inner..][..inner].iter_mut().zip(gj).for_each(|(d, &v)| *d += w1 * v);
            }
        }
    }
    out
}

/// Runs `f(data, outer, size now, size after, inner, axis)` over the spatial
/// axes in turn, the sizes moving from `from` to `to` one axis at a time.
type Pass = fn(&[f64], usize, usize, usize, usize, &Axis) -> Vec<f64>;
fn each_axis(mut data: Vec<f64>, lead: usize, from: &[usize], to: &[usize], axes: &[Axis], f: Pass) -> Vec<f64> {
    let mut cur = from.to_vec();
    for d in 0..cur.len() {
        let outer = lead * cur[..d].iter().product::<usize>();
        let inner = cur[d + 1..].iter().product::<usize>();
        data = f(&data, outer, cur[d], to[d], inner, &axes[d]);
        cur[d] = to[d];
    }
    data
}

/// `F.interpolate(input, size, scale_factor, mode, align_corners, recompute_scale_factor)`.
fn interpolate(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let plan = interp_plan(call, x.shape())?;
    let dt = x.dtype();
    if dt == DType::U8 && plan.mode == Mode::Linear {
        crate::bail!(E_UNSUPPORTED, "interpolate: uint8 with a linear mode is not supported on the cpu backend (libtorch's uint8 kernel is fixed-point; nearest modes take uint8)");
    }
    let axes: Vec<Axis> = (0..plan.output.len()).map(|d| plan.axis(d, dt == DType::F64)).collect();
    let usz = |v: &[i64]| v.iter().map(|&n| n as usize).collect::<Vec<_>>();
    let (sin, sout) = (usz(&plan.input), usz(&plan.output));
    let lead = (x.shape()[0] * x.shape()[1]) as usize;
    let mut shape = x.shape()[..2].to_vec();
    shape.extend_from_slice(&plan.output);
    let xv = real::<f64>(x)?;
    let y = each_axis(xv.slice::<f64>().to_vec(), lead, &sin, &sout, &axes, along);
    let out = convert(&Raw::from_vec::<f64>(&shape, &y)?, dt)?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let xs = x.shape().to_vec();
    Ok(vec![record(out, "UpsampleBackward0", &[x], move |g| {
        let gv = real::<f64>(g)?;
        let dx = each_axis(gv.slice::<f64>().to_vec(), lead, &sout, &sin, &axes, along_t);
        Ok(vec![Some(convert(&Raw::from_vec::<f64>(&xs, &dx)?, g.dtype())?)])
    })])
}
