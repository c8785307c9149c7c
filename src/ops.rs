//! Tensor operations over handles: argument checks with precise messages
//! (shapes, dtypes, devices, backends), then one backend call.

use crate::backend::{self, imp, Tensor};
use crate::error::Result;
use crate::json::write_int_list as fmt_shape;
use crate::tensor::{get, register};

/// The inputs of `op` must share backend, device and dtype.
fn same_kind(op: &str, ts: &[&Tensor]) -> Result<backend::BackendId> {
    let b = backend::same_backend(op, ts)?;
    let (first, rest) = ts.split_first().expect("ops have inputs");
    let (dev, dt) = (imp::device(&first.raw), imp::dtype(&first.raw)?);
    for t in rest {
        let (d2, t2) = (imp::device(&t.raw), imp::dtype(&t.raw)?);
        if d2 != dev {
            crate::bail!(E_DEVICE, "{op}: inputs are on {dev} and {d2}");
        }
        if t2 != dt {
            crate::bail!(E_DTYPE, "{op}: inputs are {} and {}", dt.name(), t2.name());
        }
    }
    Ok(b)
}

/// Broadcasts two batch shapes like NumPy, or `None` when they do not fit.
pub fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let y = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            match (x, y) {
                _ if x == y => Some(x),
                (1, _) => Some(y),
                (_, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// `torch.matmul` shape rules: 1-D operands are promoted, batch dims broadcast.
fn check_matmul(a: &[i64], b: &[i64]) -> bool {
    if a.is_empty() || b.is_empty() {
        return false;
    }
    let k_a = a[a.len() - 1];
    let k_b = if b.len() == 1 { b[0] } else { b[b.len() - 2] };
    if k_a != k_b {
        return false;
    }
    let batch_a = &a[..a.len().saturating_sub(2)];
    let batch_b = &b[..b.len().saturating_sub(2)];
    broadcast(batch_a, batch_b).is_some()
}

pub fn matmul(a: i64, b: i64) -> Result<i64> {
    let (ta, tb) = (get(a)?, get(b)?);
    let bk = same_kind("matmul", &[&ta, &tb])?;
    let (sa, sb) = (imp::shape(&ta.raw), imp::shape(&tb.raw));
    if !check_matmul(&sa, &sb) {
        crate::bail!(E_SHAPE, "matmul {} x {}", fmt_shape(&sa), fmt_shape(&sb));
    }
    register(bk, imp::matmul(&ta.raw, &tb.raw)?)
}
