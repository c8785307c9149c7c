//! Native kernels of the op table's matrix products: `torch.matmul` is the
//! backend's GEMM path (`native::matmul`, with its backward and CPU
//! autocast); `mm` and `bmm` are matmul after their stricter rank checks.
//! `einsum` runs core's plan (`vocab::einsum`) as pairwise contractions,
//! each one GEMM (or a broadcast product where nothing is summed), built
//! from views, sums and matmul that record their own backward: its
//! gradients are theirs, as ATen's einsum's are.

use super::super::tensor::Raw;
use super::super::autograd::record;
use super::super::ops;
use super::{input, Kernel};
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::kinds::Binary;
use crate::vocab::{einsum as plan, Call};

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

/// An operand or partial result with the label of each of its dims.
struct Term {
    t: Raw,
    labels: Vec<usize>,
}

impl Term {
    fn size(&self, l: usize) -> i64 {
        self.labels.iter().position(|&m| m == l).map_or(1, |d| self.t.shape()[d])
    }

    /// The dims in the order of `labels` (a view; none when already so).
    fn permuted(&self, labels: &[usize]) -> Raw {
        let perm: Vec<usize> = labels.iter().map(|l| self.labels.iter().position(|m| m == l).expect("a label of the term")).collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return self.t.clone();
        }
        super::shape::permute_view(&self.t, perm)
    }

    /// The term without the dims whose labels `drop` flags: summed, or
    /// squeezed when `squeeze` (a size-1 dim another term broadcasts).
    fn without(self, drop: impl Fn(usize) -> bool, squeeze: bool) -> Result<Term> {
        let mask: Vec<bool> = self.labels.iter().map(|&l| drop(l)).collect();
        if !mask.contains(&true) {
            return Ok(self);
        }
        let labels: Vec<usize> = self.labels.iter().zip(&mask).filter(|(_, &m)| !m).map(|(&l, _)| l).collect();
        let t = if squeeze {
            let shape: Vec<i64> = self.t.shape().iter().zip(&mask).filter(|(_, &m)| !m).map(|(&d, _)| d).collect();
            ops::reshape(&self.t, &shape)?
        } else {
            let out = ops::sum_mask(&self.t, &mask, false, false)?;
            let shape = self.t.shape().to_vec();
            record(out, "SumBackward1", &[&self.t], move |g| Ok(vec![Some(ops::expand_back(g, &shape, &mask, 1.0)?)]))
        };
        Ok(Term { t, labels })
    }
}

/// The sizes of `labels` in `a`, else in `b` (a label both have has one
/// size once the broadcast dims are gone), with their product checked.
fn sizes_of(labels: &[usize], a: &Term, b: &Term) -> Result<(Vec<i64>, i64)> {
    let s: Vec<i64> = labels.iter().map(|&l| if a.labels.contains(&l) { a.size(l) } else { b.size(l) }).collect();
    let n = s.iter().try_fold(1i64, |n, &d| n.checked_mul(d));
    match n {
        Some(n) => Ok((s, n)),
        None => crate::bail!(E_SHAPE, "einsum(): a contraction's result of shape {} has more elements than fit an int64", fmt(&s)),
    }
}

/// Contracts `a` with `b`, keeping the labels in `needed` (the output's and
/// the other terms'), as ATen's `sumproduct_pair`.
fn contract(a: Term, b: Term, needed: &[bool]) -> Result<Term> {
    // A size-1 dim broadcasts against the other term's: it goes.
    let (a_sizes, b_sizes): (Vec<(usize, i64)>, Vec<(usize, i64)>) =
        (a.labels.iter().map(|&l| (l, a.size(l))).collect(), b.labels.iter().map(|&l| (l, b.size(l))).collect());
    let in_b = |l: usize| b_sizes.iter().find(|x| x.0 == l).map(|x| x.1);
    let in_a = |l: usize| a_sizes.iter().find(|x| x.0 == l).map(|x| x.1);
    let a = a.without(|l| in_a(l) == Some(1) && in_b(l).is_some_and(|s| s != 1), true)?;
    let b = b.without(|l| in_b(l) == Some(1) && a.labels.contains(&l), true)?;
    // Labels only one term has and nothing later needs are summed there.
    let a = a.without(|l| !needed[l] && !b.labels.contains(&l), false)?;
    let b = b.without(|l| !needed[l] && !a.labels.contains(&l), false)?;
    let batch: Vec<usize> = a.labels.iter().copied().filter(|&l| needed[l] && b.labels.contains(&l)).collect();
    let summed: Vec<usize> = a.labels.iter().copied().filter(|&l| !needed[l] && b.labels.contains(&l)).collect();
    let left: Vec<usize> = a.labels.iter().copied().filter(|l| !b.labels.contains(l)).collect();
    let right: Vec<usize> = b.labels.iter().copied().filter(|l| !a.labels.contains(l)).collect();
    let (bs, nb) = sizes_of(&batch, &a, &b)?;
    let (ls, m) = sizes_of(&left, &a, &b)?;
    let (rs, n) = sizes_of(&right, &a, &b)?;
    let (_, k) = sizes_of(&summed, &a, &b)?;
    nb.checked_mul(m).and_then(|x| x.checked_mul(n)).ok_or_else(|| crate::err!(E_SHAPE, "einsum(): a contraction's result has more elements than fit an int64"))?;
    let shape: Vec<i64> = bs.iter().chain(&ls).chain(&rs).copied().collect();
    let labels: Vec<usize> = batch.iter().chain(&left).chain(&right).copied().collect();
    let order = |first: &[usize], second: &[usize], third: &[usize]| -> Vec<usize> { first.iter().chain(second).chain(third).copied().collect() };
    let t = if summed.is_empty() {
        // Nothing summed: a broadcast product, as ATen's `mul` path.
        let ones = |c: usize| std::iter::repeat_n(1i64, c);
        let sa: Vec<i64> = bs.iter().chain(&ls).copied().chain(ones(rs.len())).collect();
        let sb: Vec<i64> = bs.iter().copied().chain(ones(ls.len())).chain(rs.iter().copied()).collect();
        let x = ops::reshape(&a.permuted(&order(&batch, &left, &[])), &sa)?;
        let y = ops::reshape(&b.permuted(&order(&batch, &right, &[])), &sb)?;
        ops::binary(Binary::Mul, &x, &y)?
    } else {
        let (sa, sb): (Vec<i64>, Vec<i64>) = if batch.is_empty() { (vec![m, k], vec![k, n]) } else { (vec![nb, m, k], vec![nb, k, n]) };
        let x = ops::reshape(&a.permuted(&order(&batch, &left, &summed)), &sa)?;
        let y = ops::reshape(&b.permuted(&order(&batch, &summed, &right)), &sb)?;
        ops::reshape(&super::super::matmul(&x, &y)?, &shape)?
    };
    Ok(Term { t, labels })
}

fn einsum(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let operands: Vec<&Raw> = ins.iter().flatten().copied().collect();
    let shapes: Vec<&[i64]> = operands.iter().map(|t| t.shape()).collect();
    let spec = plan::parse(call.str("equation").unwrap_or(""), &shapes)?;
    let mut terms = Vec::with_capacity(operands.len());
    for (t, labels) in operands.iter().zip(&spec.inputs) {
        let mut term = Term { t: (*t).clone(), labels: labels.clone() };
        // A repeated label is the diagonal of its dims (which becomes the last).
        while let Some((p, q)) = (0..term.labels.len()).find_map(|q| term.labels[..q].iter().position(|&l| l == term.labels[q]).map(|p| (p, q))) {
            let l = term.labels.remove(q);
            term.labels.remove(p);
            term.labels.push(l);
            term.t = super::shape::diagonal_view(&term.t, p, q);
        }
        terms.push(term);
    }
    let path: Vec<i64> = match call.ints("path") {
        Some(p) => p.to_vec(),
        None if terms.len() <= 2 => (0..terms.len() as i64).filter(|_| terms.len() == 2).collect(),
        None => spec.plan().0.into_iter().flatten().map(|i| i as i64).collect(),
    };
    let mut in_output = vec![false; spec.sizes.len()];
    for &l in &spec.output {
        in_output[l] = true;
    }
    for step in path.chunks(2) {
        let (i, j) = (step[0].min(step[1]) as usize, step[0].max(step[1]) as usize);
        let b = terms.remove(j);
        let a = terms.remove(i);
        let mut needed = in_output.clone();
        for t in &terms {
            for &l in &t.labels {
                needed[l] = true;
            }
        }
        terms.push(contract(a, b, &needed)?);
    }
    let last = terms.pop().expect("one term left");
    // What the output does not name is summed (a single operand's contraction).
    let last = last.without(|l| !in_output[l], false)?;
    let out = last.permuted(&spec.output);
    Ok(vec![out])
}

pub const KERNELS: &[(&str, Kernel)] = &[("einsum", einsum), ("matmul", matmul), ("mm", |_, ins| ranked("mm", 2, ins)), ("bmm", |_, ins| ranked("bmm", 3, ins))];
