//! Native kernels of the op table's sort section: sort, argsort, topk,
//! kthvalue, unique and searchsorted.
//!
//! Elements are ordered by a `u64` key, monotone in the value, with every
//! NaN largest and -0 equal to +0 (PyTorch's comparator), ties broken by
//! index: sort is stable (PyTorch's stable sort; its default `std::sort`
//! agrees on lanes of up to 16 elements, where it is an insertion sort), and
//! topk prefers the lower index among equal values (PyTorch leaves that
//! order unspecified). kthvalue runs PyTorch's own quickselect, so it picks
//! the same index among equal values. Lanes (the elements along `dim`) are
//! independent, so results do not depend on the thread count.

use super::super::autograd::{needs_grad, record_saving};
use super::super::elem::{with_elem, with_float, with_ordered, Elem, B8};
use super::super::kernels::Ptr;
use super::super::ops::convert;
use super::super::simd::multiversion;
use super::super::tensor::Raw;
use super::index::scalar_raw;
use super::reduce::split;
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::{promote, promote_scalar, Call};

/// An element's place in PyTorch's sort order, as an unsigned key.
trait Key: Elem {
    fn key(self) -> u64;
    fn nan(self) -> bool {
        false
    }
}

#[inline(always)]
fn key64(v: f64) -> u64 {
    if v.is_nan() {
        return u64::MAX;
    }
    let b = (v + 0.0).to_bits(); // -0 + 0 is +0
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

#[inline(always)]
fn key32(v: f32) -> u64 {
    // Branch-free (a select), so that topk's block filter vectorises.
    let b = (v + 0.0).to_bits();
    let k = if b >> 31 == 1 { !b } else { b | 1 << 31 };
    if v.is_nan() {
        u64::MAX
    } else {
        u64::from(k)
    }
}

impl Key for f64 {
    fn key(self) -> u64 {
        key64(self)
    }
    fn nan(self) -> bool {
        self.is_nan()
    }
}

macro_rules! key_f32 {
    ($($t:ty),*) => {$(
        impl Key for $t {
            #[inline(always)]
            fn key(self) -> u64 {
                key32(self.up())
            }
            fn nan(self) -> bool {
                self.up().is_nan()
            }
        }
    )*};
}
key_f32!(f32, half::bf16, half::f16);

macro_rules! key_int {
    ($($t:ty),*) => {$(
        impl Key for $t {
            #[inline(always)]
            fn key(self) -> u64 {
                (self as i64 as u64) ^ (1 << 63)
            }
        }
    )*};
}
key_int!(i64, i32, i16, i8, u8);

impl Key for B8 {
    fn key(self) -> u64 {
        u64::from(self.0 != 0)
    }
}

/// `x` with `dim` swapped with the last dim, so that its lanes are rows (a
/// 0-dim tensor as one lane of one element). Its own inverse (`unswap`).
fn swap(x: &Raw, dim: usize) -> Raw {
    let (mut s, mut st) = (x.shape().to_vec(), x.strides().to_vec());
    if s.is_empty() {
        return x.view_as(vec![1], vec![1], x.0.offset);
    }
    let last = s.len() - 1;
    s.swap(dim, last);
    st.swap(dim, last);
    x.view_as(s, st, x.0.offset)
}

/// A result laid out as `swap(x)`'s lanes back in `x`'s dim order (`rank` = x's).
fn unswap(t: &Raw, dim: usize, rank: usize) -> Raw {
    if rank == 0 {
        return t.view_as(vec![], vec![], t.0.offset);
    }
    swap(t, dim)
}

/// `t` without its size-1 dim `dim` (a reduction's keepdim=False).
fn squeeze(t: &Raw, dim: usize) -> Raw {
    let (mut s, mut st) = (t.shape().to_vec(), t.strides().to_vec());
    if !s.is_empty() {
        s.remove(dim);
        st.remove(dim);
    }
    t.view_as(s, st, t.0.offset)
}

/// Runs `f(lane, values, indices)` over every lane of `x` along `dim`, `k`
/// results each; returns them as contiguous rows of `k` in the lane layout
/// (`swap(x)` with its last dim `k`).
fn per_lane<T: Elem>(x: &Raw, dim: usize, k: usize, f: impl Fn(&[T], &mut [T], &mut [i64]) + Sync) -> Result<(Raw, Raw)> {
    let xs = swap(x, dim).contiguous()?;
    let r = *xs.shape().last().expect("swap gives a dim") as usize;
    let mut shape = xs.shape().to_vec();
    *shape.last_mut().expect("as above") = k as i64;
    let (vals, idx) = (Raw::empty(&shape, T::DT)?, Raw::empty(&shape, DType::I64)?);
    let n = shape[..shape.len() - 1].iter().product::<i64>() as usize;
    let src = xs.slice::<T>();
    let (pv, pi) = (Ptr(vals.slice_mut::<T>().as_mut_ptr()), Ptr(idx.slice_mut::<i64>().as_mut_ptr()));
    split(n, r.max(1) * (usize::BITS - r.leading_zeros()) as usize, |lo, hi| {
        for i in lo..hi {
            // SAFETY: row `i` of both results, written by this range only.
            let (v, ix) = unsafe { (std::slice::from_raw_parts_mut(pv.at((i * k) as isize), k), std::slice::from_raw_parts_mut(pi.at((i * k) as isize), k)) };
            f(&src[i * r..(i + 1) * r], v, ix);
        }
    });
    Ok((vals, idx))
}

/// Records the backward of values picked from `x` along `dim` (`idx`: their
/// indices in `per_lane`'s layout): the gradient goes back to where each
/// value came from, zero elsewhere (PyTorch's `value_selecting_reduction_backward`).
fn picked_backward(out: Raw, x: &Raw, dim: usize, keepdim: bool, idx: Raw, node: &'static str) -> Raw {
    if !out.dtype().is_float() || !needs_grad(&[x]) {
        return out;
    }
    let (rank, lane_shape) = (x.dim(), swap(x, dim).shape().to_vec());
    // The indices may be a result the caller holds (topk's, sort's): saved.
    record_saving(out, node, &[x], &[&idx.clone()], false, move |g| {
        let g = if keepdim || rank == 0 {
            g.clone()
        } else {
            let (mut s, mut st) = (g.shape().to_vec(), g.strides().to_vec());
            s.insert(dim, 1);
            st.insert(dim, 0);
            g.view_as(s, st, g.0.offset)
        };
        let gs = swap(&g, dim).contiguous()?;
        let dx = Raw::zeros(&lane_shape, g.dtype())?;
        let (k, r) = (*idx.shape().last().unwrap_or(&1) as usize, *lane_shape.last().unwrap_or(&1) as usize);
        with_float!(g.dtype(), T => {
            let (d, gv, iv) = (dx.slice_mut::<T>(), gs.slice::<T>(), idx.slice::<i64>());
            for (row, (gr, ir)) in gv.chunks(k.max(1)).zip(iv.chunks(k.max(1))).enumerate() {
                for (&gj, &ij) in gr.iter().zip(ir) {
                    d[row * r + ij as usize] = gj;
                }
            }
        }, _ => crate::bail!(E_DTYPE, "{node}: a gradient must be floating, got {}", g.dtype().name()));
        Ok(vec![Some(unswap(&dx, dim, rank).contiguous()?)])
    })
}

fn dim(call: &Call) -> usize {
    call.int("dim").unwrap_or(0) as usize
}

/// The lane length along `dim` (1 for a 0-dim tensor).
fn lane_len(x: &Raw, dim: usize) -> i64 {
    if x.dim() == 0 {
        1
    } else {
        x.shape()[dim]
    }
}

// ------------------------------------------------------------ sort, argsort

fn sort_lane<T: Key>(l: &[T], desc: bool, v: &mut [T], ix: &mut [i64]) {
    let flip = if desc { u64::MAX } else { 0 };
    let mut p: Vec<(u64, usize)> = l.iter().enumerate().map(|(i, &x)| (x.key() ^ flip, i)).collect();
    p.sort_unstable();
    for ((v, ix), &(_, i)) in v.iter_mut().zip(ix.iter_mut()).zip(&p) {
        (*v, *ix) = (l[i], i as i64);
    }
}

/// Complex numbers have no order: core refuses them for these ops, and so do the kernels.
fn unordered(op: &str, x: &Raw) -> crate::error::Error {
    crate::err!(E_DTYPE, "{op}: {} is not supported (complex numbers are not ordered)", x.dtype().name())
}

fn sorted(call: &Call, x: &Raw) -> Result<(Raw, Raw)> {
    let (d, desc) = (dim(call), call.bool("descending").unwrap_or(false));
    let r = lane_len(x, d) as usize;
    let (v, i) = with_ordered!(x.dtype(), T => per_lane::<T>(x, d, r, |l, v, ix| sort_lane(l, desc, v, ix)), _ => Err(unordered("sort", x)))?;
    Ok((v, i))
}

fn sort(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (v, i) = sorted(call, x)?;
    let d = dim(call);
    let vals = picked_backward(unswap(&v, d, x.dim()), x, d, true, i.clone(), "SortBackward0");
    Ok(vec![vals, unswap(&i, d, x.dim())])
}

fn argsort(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (_, i) = sorted(call, x)?;
    Ok(vec![unswap(&i, dim(call), x.dim())])
}

// ---------------------------------------------------------------------- topk

multiversion!(fn topk_lane<T: Key>(l: &[T], k: usize, largest: bool, v: &mut [T], ix: &mut [i64]) => topk_lane_imp);

/// The `k` best of a lane, best first. A buffer of candidates is cut to the
/// best `k` whenever it fills, and from then on an element enters only if
/// it beats the k-th best so far, so a long lane costs one key and one
/// compare per element (rather than a sort).
#[inline(always)]
fn topk_lane_imp<T: Key>(l: &[T], k: usize, largest: bool, v: &mut [T], ix: &mut [i64]) {
    if k == 0 {
        return;
    }
    // Ascending (!score, index) is best first, the lower index winning ties.
    let flip = if largest { u64::MAX } else { 0 };
    let cap = (4 * k).max(64);
    let mut buf: Vec<(u64, usize)> = Vec::with_capacity(cap.min(l.len()));
    let (mut worst, mut cut) = (0u64, false);
    const B: usize = 32;
    for (c, chunk) in l.chunks(B).enumerate() {
        // Most blocks hold no candidate once the buffer is cut: one branch-free pass rejects them.
        if cut && chunk.iter().fold(u64::MAX, |m, &x| m.min(x.key() ^ flip)) >= worst {
            continue;
        }
        for (j, &x) in chunk.iter().enumerate() {
            let s = x.key() ^ flip;
            // A later equal value loses to the k-th (lower index).
            if cut && s >= worst {
                continue;
            }
            buf.push((s, c * B + j));
            if buf.len() == cap {
                buf.select_nth_unstable(k - 1);
                buf.truncate(k);
                (worst, cut) = (buf[k - 1].0, true);
            }
        }
    }
    if buf.len() > k {
        buf.select_nth_unstable(k - 1);
        buf.truncate(k);
    }
    buf.sort_unstable();
    for ((v, ix), &(_, i)) in v.iter_mut().zip(ix.iter_mut()).zip(&buf) {
        (*v, *ix) = (l[i], i as i64);
    }
}

fn topk(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (d, k, largest) = (dim(call), call.int("k").unwrap_or(0), call.bool("largest").unwrap_or(true));
    if k < 0 || k > lane_len(x, d) {
        crate::bail!(E_SHAPE, "topk: selected index k out of range (k={k}, dim size {})", lane_len(x, d));
    }
    // A 0-dim input gives a 0-dim result whatever k (0 or 1), as in PyTorch.
    let k = if x.dim() == 0 { 1 } else { k as usize };
    let (v, i) = with_ordered!(x.dtype(), T => per_lane::<T>(x, d, k, |l, v, ix| topk_lane(l, k, largest, v, ix)), _ => Err(unordered("topk", x)))?;
    let vals = picked_backward(unswap(&v, d, x.dim()), x, d, true, i.clone(), "TopkBackward0");
    Ok(vec![vals, unswap(&i, d, x.dim())])
}

// ------------------------------------------------------------------ kthvalue

/// PyTorch's `quick_select_template` (aten/src/ATen/native/SortingUtils.h):
/// puts the (k+1)-th smallest of `a` at `k` (NaN largest), swapping `ix` along.
fn quick_select<T: Elem>(a: &mut [T], ix: &mut [i64], k: usize) {
    let gt = |x: T, y: T| {
        let (x, y) = (x.up(), y.up());
        (x.partial_cmp(&x).is_none() && y.partial_cmp(&y).is_some()) || x > y
    };
    let swap = |a: &mut [T], ix: &mut [i64], i: usize, j: usize| {
        a.swap(i, j);
        ix.swap(i, j);
    };
    let (mut lo, mut hi) = (0usize, a.len() - 1);
    loop {
        if hi <= lo {
            return;
        }
        if hi == lo + 1 {
            if gt(a[lo], a[hi]) {
                swap(a, ix, lo, hi);
            }
            return;
        }
        // Median of three as the pivot.
        let p = lo + (hi - lo) / 2;
        swap(a, ix, p, lo + 1);
        if gt(a[lo + 1], a[hi]) {
            swap(a, ix, lo + 1, hi);
        }
        if gt(a[lo], a[hi]) {
            swap(a, ix, lo, hi);
        }
        if gt(a[lo + 1], a[lo]) {
            swap(a, ix, lo + 1, lo);
        }
        let (mut i, mut j, piv) = (lo + 1, hi, a[lo]);
        loop {
            i += 1;
            while gt(piv, a[i]) {
                i += 1;
            }
            j -= 1;
            while gt(a[j], piv) {
                j -= 1;
            }
            if j < i {
                break;
            }
            swap(a, ix, i, j);
        }
        swap(a, ix, lo, j);
        if j <= k {
            lo = i;
        }
        if j >= k {
            hi = j - 1;
        }
    }
}

fn kthvalue(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (d, k, keep) = (dim(call), call.int("k").unwrap_or(0), call.bool("keepdim").unwrap_or(false));
    let size = lane_len(x, d);
    if size == 0 {
        crate::bail!(E_SHAPE, "kthvalue: expected reduction dim {d} to have non-zero size");
    }
    if k < 1 || k > size {
        crate::bail!(E_SHAPE, "kthvalue: selected number k out of range for dimension {d} (k={k}, size {size})");
    }
    // PyTorch copies a 0-dim input before its dtype dispatch, which lacks bool.
    if x.dtype() == DType::Bool && x.dim() > 0 {
        crate::bail!(E_DTYPE, "kthvalue: bool is not supported (it takes numeric dtypes)");
    }
    let kk = (k - 1) as usize;
    let (v, i) = with_elem!(x.dtype(), T => per_lane::<T>(x, d, 1, |l, v, ix| {
        let (mut a, mut p): (Vec<T>, Vec<i64>) = (l.to_vec(), (0..l.len() as i64).collect());
        quick_select(&mut a, &mut p, kk);
        (v[0], ix[0]) = (a[kk], p[kk]);
    }))?;
    let shaped = |t: &Raw| {
        let t = unswap(t, d, x.dim());
        if keep || x.dim() == 0 {
            t
        } else {
            squeeze(&t, d)
        }
    };
    let vals = picked_backward(shaped(&v), x, d, keep, i.clone(), "KthvalueBackward0");
    Ok(vec![vals, shaped(&i)])
}

// -------------------------------------------------------------------- unique

fn unique(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0).contiguous()?;
    let (inverse, counts) = (call.bool("return_inverse").unwrap_or(false), call.bool("return_counts").unwrap_or(false));
    // CPU PyTorch returns sorted values whatever `sorted` says; NaNs stay apart (NaN != NaN).
    with_ordered!(x.dtype(), T => {
        let v = x.slice::<T>();
        let mut p: Vec<(u64, usize)> = v.iter().enumerate().map(|(i, &e)| (e.key(), i)).collect();
        p.sort_unstable();
        let (mut vals, mut inv, mut cnt) = (Vec::<T>::new(), vec![0i64; if inverse { v.len() } else { 0 }], Vec::<i64>::new());
        for (j, &(key, i)) in p.iter().enumerate() {
            if j == 0 || key != p[j - 1].0 || v[i].nan() {
                vals.push(v[i]);
                cnt.push(0);
            }
            *cnt.last_mut().expect("pushed above") += 1;
            if inverse {
                inv[i] = vals.len() as i64 - 1;
            }
        }
        let u = vals.len() as i64;
        Ok(vec![
            Raw::from_vec::<T>(&[u], &vals)?,
            if inverse { Raw::from_vec::<i64>(x.shape(), &inv)? } else { Raw::empty(&[0], DType::I64)? },
            if counts { Raw::from_vec::<i64>(&[u], &cnt)? } else { Raw::empty(&[0], DType::I64)? },
        ])
    }, _ => Err(unordered("unique", &x)))
}

// -------------------------------------------------------------- searchsorted

fn searchsorted(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let seq = input(ins, call.tensor("sorted_sequence").expect("core bound it"));
    let mut right = call.bool("right").unwrap_or(false);
    if let Some(side) = call.str("side") {
        if side != "left" && side != "right" {
            crate::bail!(E_INVALID_ARG, "searchsorted: side can only be 'left' or 'right' but got {side}");
        }
        if right && side != "right" {
            crate::bail!(E_INVALID_ARG, "searchsorted: side and right can't be set to opposites, got side of {side} while right was True");
        }
        right = side == "right";
    }
    let sorter = call.tensor("sorter").and_then(|i| ins[i]);
    if let Some(s) = sorter {
        if s.shape() != seq.shape() {
            crate::bail!(E_SHAPE, "searchsorted: boundary and sorter must have the same size, but got boundary tensor {} and sorter tensor {}", fmt(seq.shape()), fmt(s.shape()));
        }
        if s.dtype() != DType::I64 {
            crate::bail!(E_DTYPE, "searchsorted: sorter must be a tensor of long dtype but got {}", s.dtype().name());
        }
    }
    let sorter = sorter.map(|s| s.contiguous()).transpose()?;
    let last = seq.shape().last().copied().unwrap_or(0);
    if let Some(s) = &sorter {
        if s.slice::<i64>().iter().any(|&i| i < 0 || i >= last) {
            crate::bail!(E_INVALID_ARG, "searchsorted: sorter index out of range");
        }
    }
    // The Scalar overload searches a wrapped number, which does not widen the boundaries' category.
    let (vals, common) = match call.tensor("self") {
        Some(i) => {
            let v = input(ins, i);
            (v.clone(), promote(seq.dtype(), seq.dim() > 0, v.dtype(), v.dim() > 0))
        }
        None => {
            let s = call.scalar("self").expect("core bound it");
            let dt = promote_scalar(seq.dtype(), s);
            (scalar_raw(s, dt)?, dt)
        }
    };
    if vals.dim() == 0 && seq.dim() != 1 {
        crate::bail!(E_SHAPE, "searchsorted: input value can be a scalar only when boundaries tensor dimension is 1, but got boundaries tensor dim({})", seq.dim());
    }
    if seq.dim() == 0 {
        crate::bail!(E_SHAPE, "searchsorted: boundaries tensor should have positive dimension, but got 0 dimension");
    }
    let lead = |t: &Raw| t.shape()[..t.dim().saturating_sub(1)].to_vec();
    if seq.dim() != 1 && (seq.dim() != vals.dim() || lead(seq) != lead(&vals)) {
        crate::bail!(
            E_SHAPE,
            "searchsorted: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input value tensor must match, but got boundaries tensor {} and input value tensor {}",
            fmt(seq.shape()),
            fmt(vals.shape())
        );
    }
    if common == DType::Bool {
        crate::bail!(E_DTYPE, "searchsorted: bool is not supported (boundaries and values must not both be bool)");
    }
    let i32_out = call.bool("out_int32").unwrap_or(false);
    if i32_out && last >= i32::MAX as i64 {
        crate::bail!(E_INVALID_ARG, "searchsorted: the size of boundaries' last dimension should be less than {}, but got {last}", i32::MAX);
    }
    let (bd, xs) = (convert(seq, common)?.contiguous()?, convert(&vals, common)?.contiguous()?);
    let out_dt = if i32_out { DType::I32 } else { DType::I64 };
    let out = Raw::empty(vals.shape(), DType::I64)?;
    // Values per boundary row: all of them against a 1-D sequence, else one row of `vals` each.
    let (m, row) = (last.max(0) as usize, if seq.dim() == 1 { xs.numel() } else { *vals.shape().last().unwrap_or(&1) as usize });
    let srt = sorter.as_ref().map(|s| s.slice::<i64>());
    with_elem!(common, T => {
        let (b, v, po) = (bd.slice::<T>(), xs.slice::<T>(), Ptr(out.slice_mut::<i64>().as_mut_ptr()));
        split(v.len(), (usize::BITS - m.leading_zeros()) as usize + 1, |lo, hi| {
            for j in lo..hi {
                let r = if row == 0 { 0 } else { j / row };
                let (bs, ss) = (&b[r * m..(r + 1) * m], srt.map(|s| &s[r * m..(r + 1) * m]));
                // SAFETY: element `j` of `out`, written by this range only.
                unsafe { *po.at(j as isize) = bound(bs, ss, v[j], right) };
            }
        });
    });
    Ok(vec![if out_dt == DType::I64 { out } else { convert(&out, out_dt)? }])
}

/// PyTorch's `cus_lower_bound`/`cus_upper_bound`: the first position in
/// `bd` (through `sorter`) whose value is >= `v` (> `v` when `right`), by
/// the same comparisons in the computing type, so unsorted boundaries and
/// NaNs land where PyTorch's do.
fn bound<T: Elem>(bd: &[T], sorter: Option<&[i64]>, v: T, right: bool) -> i64 {
    let (mut lo, mut hi) = (0usize, bd.len());
    let v = v.up();
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let m = match sorter {
            Some(s) => bd[s[mid] as usize],
            None => bd[mid],
        }
        .up();
        if if right { m > v } else { m >= v } {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo as i64
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("sort", sort),
    ("sort.stable", sort),
    ("argsort", argsort),
    ("argsort.stable", argsort),
    ("topk", topk),
    ("kthvalue", kthvalue),
    ("_unique2", unique),
    ("searchsorted.Tensor", searchsorted),
    ("searchsorted.Scalar", searchsorted),
];
