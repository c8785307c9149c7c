//! Native kernels of the op table's matrix products: `torch.matmul` is the
//! backend's GEMM path (`native::matmul`, with its backward and CPU
//! autocast); `mm` and `bmm` are matmul after their stricter rank checks.

use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::Call;

fn matmul(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![super::super::matmul(input(ins, 0), input(ins, 1))?])
}

/// matmul of operands of exactly `rank` dims, with equal batch sizes (no broadcasting).
fn ranked(op: &str, rank: usize, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (a, b) = (input(ins, 0), input(ins, 1));
    if a.dim() != rank || b.dim() != rank {
        crate::bail!(E_SHAPE, "{op}: both arguments must be {rank}-D, got {} and {}", fmt(a.shape()), fmt(b.shape()));
    }
    if rank == 3 && a.shape()[0] != b.shape()[0] {
        crate::bail!(E_SHAPE, "{op}: batch sizes differ: {} and {}", fmt(a.shape()), fmt(b.shape()));
    }
    Ok(vec![super::super::matmul(a, b)?])
}

pub const KERNELS: &[(&str, Kernel)] = &[("matmul", matmul), ("mm", |_, ins| ranked("mm", 2, ins)), ("bmm", |_, ins| ranked("bmm", 3, ins))];
