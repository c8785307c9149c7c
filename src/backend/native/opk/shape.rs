//! Native kernels of the op table's shape section. Views share the input's
//! storage (`Raw::view_as`) as PyTorch's do. A view's backward undoes it on
//! the gradient when it keeps every element (a permutation, a reshape), and
//! writes the gradient through the same view of zeros when it drops some
//! (narrow, select, split, diagonal); an expand's gradient is summed back
//! by the engine. The geometry of each view is one function, applied to the
//! input forward and to the zeros backward.

use super::super::autograd::record;
use super::super::elem::with_elem;
use super::super::kernels::{copy_into, expand_strides, map_into};
use super::super::ops;
use super::super::tensor::{contiguous_strides, Dims, Raw};
use super::{input, Kernel};
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::{promote_types, Call};

/// The most results one call returns (the Python binding's result capacity):
/// a split of a huge expanded dim must be an error, not an exhausted heap.
const MAX_PIECES: i64 = 1 << 16;

/// The element count of a result shape (dims already non-negative), or an
/// error when it does not fit an i64.
fn checked_numel(op: &str, shape: &[i64]) -> Result<i64> {
    if shape.contains(&0) {
        return Ok(0);
    }
    match shape.iter().try_fold(1i64, |n, &d| n.checked_mul(d)) {
        Some(n) => Ok(n),
        None => crate::bail!(E_RESOURCE, "{op}: a result of shape {} has too many elements", fmt(shape)),
    }
}

/// `src` (broadcast to `dst`'s shape) written into the view `dst`, converted
/// to its dtype (bit for bit when the dtypes agree).
fn write(dst: &Raw, src: &Raw) {
    if dst.numel() == 0 {
        return;
    }
    if dst.dtype() == src.dtype() {
        with_elem!(src.dtype(), T => map_into::<T, T>(dst, src, &expand_strides(src, dst.shape()), |v| v));
    } else {
        with_elem!(src.dtype(), S => with_elem!(dst.dtype(), D => copy_into::<S, D>(dst, src)));
    }
}

/// `out`, computed from `x` alone, recording `node` with `x`'s gradient `back(g)`.
fn grad1(out: Raw, node: &'static str, x: &Raw, back: impl FnOnce(&Raw) -> Result<Raw> + Send + Sync + 'static) -> Raw {
    record(out, node, &[x], move |g| Ok(vec![Some(back(g)?)]))
}

/// A view that drops elements: its gradient is `g` written through the same view of zeros.
fn dropping(x: &Raw, node: &'static str, view: impl Fn(&Raw) -> Raw + Send + Sync + 'static) -> Raw {
    let shape = x.shape().to_vec();
    grad1(view(x), node, x, move |g| {
        let z = Raw::zeros(&shape, g.dtype())?;
        write(&view(&z), g);
        Ok(z)
    })
}

/// A view with `x`'s elements in a new shape: its gradient is `g` reshaped back.
fn reshaped(x: &Raw, node: &'static str, shape: Dims, strides: Dims) -> Raw {
    let old = x.shape().to_vec();
    grad1(x.view_as(shape, strides, x.0.offset), node, x, move |g| ops::reshape(g, &old))
}

/// The tensor inputs of a TensorList op (all present: core refuses 0 handles in the list).
fn list<'a>(ins: &[Option<&'a Raw>]) -> Vec<&'a Raw> {
    ins.iter().flatten().copied().collect()
}

fn dim(call: &Call, name: &str) -> usize {
    call.int(name).unwrap_or(0) as usize
}

// -------------------------------------------------------------- geometry

fn permuted(x: &Raw, perm: &[usize]) -> Raw {
    let (s, st) = (x.shape(), x.strides());
    x.view_as(perm.iter().map(|&p| s[p]).collect::<Dims>(), perm.iter().map(|&p| st[p]).collect::<Dims>(), x.0.offset)
}

/// Elements `[start, start + len)` of dim `d` (in range).
fn narrowed(x: &Raw, d: usize, start: i64, len: i64) -> Raw {
    let mut s = Dims::from_slice(x.shape());
    s[d] = len;
    let at = if len > 0 { start * x.strides()[d] } else { 0 };
    x.view_as(s, x.strides(), (x.0.offset as i64 + at) as usize)
}

/// Index `i` (in range) of dim `d`, which goes.
fn selected(x: &Raw, d: usize, i: i64) -> Raw {
    let (mut s, mut st) = (Dims::from_slice(x.shape()), Dims::from_slice(x.strides()));
    let at = i * st[d];
    s.remove(d);
    st.remove(d);
    x.view_as(s, st, (x.0.offset as i64 + at) as usize)
}

/// The diagonal `offset` of dims `d1`, `d2`, as the last dim.
fn diagonal_of(x: &Raw, offset: i64, d1: usize, d2: usize) -> Raw {
    let (s, st) = (x.shape(), x.strides());
    let len = if offset >= 0 { s[d1].min(s[d2] - offset) } else { (s[d1] + offset).min(s[d2]) }.max(0);
    // Only a non-empty diagonal moves the start (an empty one may lie past the end).
    let at = match (len > 0, offset >= 0) {
        (false, _) => 0,
        (true, true) => offset * st[d2],
        (true, false) => -offset * st[d1],
    };
    let keep = |v: &[i64], last: i64| -> Dims { v.iter().enumerate().filter(|&(i, _)| i != d1 && i != d2).map(|(_, &e)| e).chain([last]).collect() };
    x.view_as(keep(s, len), keep(st, st[d1] + st[d2]), (x.0.offset as i64 + at) as usize)
}

/// `x` with `dims` reversed: a view with negative strides, only ever read by a copy.
fn reversed(x: &Raw, dims: &[usize]) -> Raw {
    let mut st = Dims::from_slice(x.strides());
    let mut at = x.0.offset as i64;
    for &d in dims.iter().filter(|&&d| d < x.dim() && x.shape()[d] > 1) {
        at += (x.shape()[d] - 1) * st[d];
        st[d] = -st[d];
    }
    x.view_as(x.shape(), st, at as usize)
}

// ----------------------------------------------------------------- views

pub(super) fn permute_view(x: &Raw, perm: Vec<usize>) -> Raw {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    grad1(permuted(x, &perm), "PermuteBackward0", x, move |g| Ok(permuted(g, &inv)))
}

fn permute(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let dims = call.ints("dims").unwrap_or(&[]);
    if dims.len() != x.dim() {
        crate::bail!(E_SHAPE, "permute: the tensor has {} dims but dims lists {}", x.dim(), dims.len());
    }
    Ok(vec![permute_view(x, dims.iter().map(|&d| d as usize).collect())])
}

fn movedim(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (src, dst) = match (call.ints("source"), call.ints("destination")) {
        (Some(s), Some(d)) => (s.to_vec(), d.to_vec()),
        _ => (vec![call.int("source").unwrap_or(0)], vec![call.int("destination").unwrap_or(0)]),
    };
    if src.len() != dst.len() {
        crate::bail!(E_SHAPE, "movedim: source {} and destination {} must name as many dims", fmt(&src), fmt(&dst));
    }
    let n = x.dim();
    if n == 0 {
        return Ok(vec![permute_view(x, vec![])]);
    }
    // The named dims go where they are sent; the others keep their order in the places left.
    let mut perm = vec![usize::MAX; n];
    for (&s, &d) in src.iter().zip(&dst) {
        perm[d as usize] = s as usize;
    }
    let mut rest = (0..n).filter(|i| !src.contains(&(*i as i64)));
    for p in perm.iter_mut().filter(|p| **p == usize::MAX) {
        *p = rest.next().expect("as many free places as unnamed dims");
    }
    Ok(vec![permute_view(x, perm)])
}

fn squeeze_where(x: &Raw, drop: impl Fn(usize) -> bool) -> Raw {
    let keep = |i: &usize| !(drop(*i) && x.shape()[*i] == 1);
    let shape = (0..x.dim()).filter(keep).map(|i| x.shape()[i]).collect();
    let strides = (0..x.dim()).filter(keep).map(|i| x.strides()[i]).collect();
    reshaped(x, "SqueezeBackward0", shape, strides)
}

fn squeeze(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![squeeze_where(input(ins, 0), |_| true)])
}

fn squeeze_dim(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let d = dim(call, "dim");
    Ok(vec![squeeze_where(input(ins, 0), |i| i == d)])
}

fn squeeze_dims(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let dims = call.ints("dim").unwrap_or(&[]);
    Ok(vec![squeeze_where(input(ins, 0), |i| dims.contains(&(i as i64)))])
}

fn unsqueeze(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d) = (input(ins, 0), dim(call, "dim"));
    let (mut s, mut st) = (Dims::from_slice(x.shape()), Dims::from_slice(x.strides()));
    // PyTorch's stride for the new dim: that of the dim it precedes, times its size.
    st.insert(d, if d < x.dim() { s[d] * st[d] } else { 1 });
    s.insert(d, 1);
    Ok(vec![reshaped(x, "UnsqueezeBackward0", s, st)])
}

/// `expand` and `broadcast_to`: a size-1 dim repeats by stride 0; -1 keeps a dim.
fn expand(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, name) = (input(ins, 0), call.op.name());
    let size = call.ints("size").unwrap_or(&[]);
    let (n, k) = (size.len(), x.dim());
    if n < k {
        crate::bail!(E_SHAPE, "{name}: {} sizes for a tensor of {k} dims (at least as many are needed)", fmt(size));
    }
    let (mut shape, mut strides) = (Dims::new(), Dims::new());
    for (i, &t) in size.iter().enumerate() {
        let (s, st) = if i < n - k { (None, 0) } else { (Some(x.shape()[i + k - n]), x.strides()[i + k - n]) };
        let (d, dst) = match s {
            None if t >= 0 => (t, 0),
            None => crate::bail!(E_SHAPE, "{name}: size {t} is not allowed in the new leading dim {i}"),
            Some(s) if t == -1 || t == s => (s, st),
            Some(1) if t >= 0 => (t, 0),
            Some(s) => {
                let (want, have) = (fmt(size), fmt(x.shape()));
                crate::bail!(E_SHAPE, "{name}: size {t} must match the existing size {s} at non-singleton dim {i} (target {want}, tensor {have})")
            }
        };
        shape.push(d);
        strides.push(dst);
    }
    checked_numel(name, &shape)?;
    let out = x.view_as(shape, strides, x.0.offset);
    Ok(vec![grad1(out, "ExpandBackward0", x, |g| Ok(g.clone()))])
}

fn flatten(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if x.dim() == 0 {
        return Ok(vec![ops::reshape(x, &[1])?]);
    }
    let (s, e) = (dim(call, "start_dim"), dim(call, "end_dim"));
    if s > e {
        crate::bail!(E_INVALID_ARG, "flatten: start_dim {s} comes after end_dim {e}");
    }
    if s == e {
        return Ok(vec![x.clone()]);
    }
    let sh = x.shape();
    let shape: Vec<i64> = sh[..s].iter().copied().chain([sh[s..=e].iter().product()]).chain(sh[e + 1..].iter().copied()).collect();
    Ok(vec![ops::reshape(x, &shape)?])
}

fn unflatten(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d) = (input(ins, 0), dim(call, "dim"));
    let sizes = call.ints("sizes").unwrap_or(&[]);
    let bad = |why: &str| crate::err!(E_SHAPE, "unflatten: sizes {} for dim {d} of shape {}: {why}", fmt(sizes), fmt(x.shape()));
    if x.dim() == 0 {
        return Err(bad("a 0-dim tensor has no dim to unflatten"));
    }
    if sizes.is_empty() || sizes.iter().any(|&s| s < -1) || sizes.iter().filter(|&&s| s == -1).count() > 1 {
        return Err(bad("sizes must be non-empty, non-negative, with at most one -1"));
    }
    let known = sizes.iter().filter(|&&s| s != -1).try_fold(1i64, |n, &s| n.checked_mul(s)).ok_or_else(|| bad("too many elements"))?;
    let size = x.shape()[d];
    let infer = sizes.contains(&-1);
    if (infer && (known == 0 || size % known != 0)) || (!infer && known != size) {
        return Err(bad("they do not multiply up to the dim's size"));
    }
    let filled = sizes.iter().map(|&s| if s == -1 { size / known } else { s });
    let sh = x.shape();
    let shape: Vec<i64> = sh[..d].iter().copied().chain(filled).chain(sh[d + 1..].iter().copied()).collect();
    Ok(vec![ops::reshape(x, &shape)?])
}

fn narrow(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d) = (input(ins, 0), dim(call, "dim"));
    if x.dim() == 0 {
        crate::bail!(E_SHAPE, "narrow: cannot be applied to a 0-dim tensor");
    }
    let (size, start, len) = (x.shape()[d], call.int("start").unwrap_or(0), call.int("length").unwrap_or(0));
    if start < -size || start > size {
        crate::bail!(E_SHAPE, "narrow: start {start} is out of range [{}, {size}]", -size);
    }
    let start = if start < 0 { start + size } else { start };
    if len < 0 || len > size - start {
        crate::bail!(E_SHAPE, "narrow: length {len} from start {start} does not fit dim {d} of size {size}");
    }
    Ok(vec![dropping(x, "SliceBackward0", move |t| narrowed(t, d, start, len))])
}

fn select(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d) = (input(ins, 0), dim(call, "dim"));
    if x.dim() == 0 {
        crate::bail!(E_SHAPE, "select: cannot be applied to a 0-dim tensor");
    }
    let (size, i) = (x.shape()[d], call.int("index").unwrap_or(0));
    if i < -size || i >= size {
        crate::bail!(E_SHAPE, "select: index {i} is out of range for dim {d} of shape {}", fmt(x.shape()));
    }
    let i = if i < 0 { i + size } else { i };
    Ok(vec![dropping(x, "SelectBackward0", move |t| selected(t, d, i))])
}

/// The main diagonal of dims `d1`, `d2` as the last dim, recording its backward (einsum's repeated labels).
pub(super) fn diagonal_view(x: &Raw, d1: usize, d2: usize) -> Raw {
    dropping(x, "DiagonalBackward0", move |t| diagonal_of(t, 0, d1, d2))
}

fn diagonal(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (d1, d2, offset) = (dim(call, "dim1"), dim(call, "dim2"), call.int("offset").unwrap_or(0));
    if d1 == d2 {
        crate::bail!(E_SHAPE, "diagonal: dim1 and dim2 are both {d1}");
    }
    Ok(vec![dropping(x, "DiagonalBackward0", move |t| diagonal_of(t, offset, d1, d2))])
}

/// Consecutive views of `sizes` elements along `d` (which they exactly fill).
fn pieces(x: &Raw, d: usize, sizes: Vec<i64>) -> Vec<Raw> {
    let mut at = 0;
    sizes
        .into_iter()
        .map(|n| {
            let start = at;
            at += n;
            dropping(x, "SplitBackward0", move |t| narrowed(t, d, start, n))
        })
        .collect()
}

fn split_input<'a>(call: &Call, ins: &[Option<&'a Raw>]) -> Result<(&'a Raw, usize, i64)> {
    let (x, d) = (input(ins, 0), dim(call, "dim"));
    if x.dim() == 0 {
        crate::bail!(E_SHAPE, "{}: expects at least a 1-dimensional tensor", call.op.name());
    }
    Ok((x, d, x.shape()[d]))
}

/// `split_size` elements each, the last one what is left.
fn split_even(op: &str, x: &Raw, d: usize, size: i64, split: i64) -> Result<Vec<Raw>> {
    if split < 0 || (split == 0 && size != 0) {
        crate::bail!(E_INVALID_ARG, "{op}: split size {split} for a dim of size {size} (it must be positive, or 0 for an empty dim)");
    }
    let count = if split == 0 { 1 } else { (size as u64).div_ceil(split as u64).max(1) as i64 };
    if count > MAX_PIECES {
        crate::bail!(E_RESOURCE, "{op}: {count} pieces (at most {MAX_PIECES})");
    }
    let sizes = (0..count).map(|i| if i + 1 < count { split } else { size - split * (count - 1) }).collect();
    Ok(pieces(x, d, sizes))
}

fn split_tensor(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d, size) = split_input(call, ins)?;
    split_even("split", x, d, size, call.int("split_size_or_sections").unwrap_or(0))
}

fn split_sizes(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d, size) = split_input(call, ins)?;
    let sizes = call.ints("split_size_or_sections").unwrap_or(&[]);
    let total = sizes.iter().try_fold(0i64, |n, &s| if s < 0 { None } else { n.checked_add(s) });
    if total != Some(size) {
        crate::bail!(E_INVALID_ARG, "split: sizes {} must be non-negative and sum to {size} (the size of dim {d})", fmt(sizes));
    }
    if sizes.len() as i64 > MAX_PIECES {
        crate::bail!(E_RESOURCE, "split: {} pieces (at most {MAX_PIECES})", sizes.len());
    }
    Ok(pieces(x, d, sizes.to_vec()))
}

fn chunk(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, d, size) = split_input(call, ins)?;
    let chunks = call.int("chunks").unwrap_or(0);
    if chunks <= 0 {
        crate::bail!(E_INVALID_ARG, "chunk: chunks must be positive, got {chunks}");
    }
    let split = (size as u64).div_ceil(chunks as u64) as i64;
    // An empty dim still gives `chunks` (empty) pieces, as PyTorch's.
    if size == 0 {
        if chunks > MAX_PIECES {
            crate::bail!(E_RESOURCE, "chunk: {chunks} pieces (at most {MAX_PIECES})");
        }
        return Ok(pieces(x, d, vec![0; chunks as usize]));
    }
    split_even("chunk", x, d, size, split)
}

// ---------------------------------------------------------------- copies

fn stack(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let ts = list(ins);
    let Some(first) = ts.first() else { crate::bail!(E_INVALID_ARG, "stack: expects a non-empty list of tensors") };
    if let Some((i, t)) = ts.iter().enumerate().find(|(_, t)| t.shape() != first.shape()) {
        crate::bail!(E_SHAPE, "stack: expects tensors of one size, got {} at entry 0 and {} at entry {i}", fmt(first.shape()), fmt(t.shape()));
    }
    let d = dim(call, "dim");
    let dt = ts.iter().fold(first.dtype(), |a, t| promote_types(a, t.dtype()));
    let mut shape = first.shape().to_vec();
    shape.insert(d, ts.len() as i64);
    checked_numel("stack", &shape)?;
    let out = Raw::empty(&shape, dt)?;
    for (i, t) in ts.iter().enumerate() {
        write(&selected(&out, d, i as i64), t);
    }
    let n = ts.len() as i64;
    Ok(vec![record(out, "StackBackward0", &ts, move |g| Ok((0..n).map(|i| Some(selected(g, d, i))).collect()))])
}

fn cat(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let ts = list(ins);
    if ts.is_empty() {
        crate::bail!(E_INVALID_ARG, "cat: expects a non-empty list of tensors");
    }
    if let Some(i) = ts.iter().position(|t| t.dim() == 0) {
        crate::bail!(E_SHAPE, "cat: zero-dimensional tensor (at position {i}) cannot be concatenated");
    }
    let dt = ts.iter().fold(ts[0].dtype(), |a, t| promote_types(a, t.dtype()));
    // As PyTorch's (a legacy rule): 1-D empty tensors take no part, whatever the others' shape.
    let skipped: Vec<bool> = ts.iter().map(|t| t.shape() == [0]).collect();
    let Some(first) = ts.iter().zip(&skipped).find(|(_, s)| !**s).map(|(t, _)| *t) else {
        return Ok(vec![Raw::empty(&[0], dt)?]);
    };
    let d = dim(call, "dim");
    let mut shape = first.shape().to_vec();
    shape[d] = 0;
    for (i, t) in ts.iter().enumerate().filter(|(i, _)| !skipped[*i]) {
        let s = t.shape();
        if s.len() != shape.len() {
            crate::bail!(E_SHAPE, "cat: tensors must have the same number of dims: got {} and {} (tensor {i})", first.dim(), t.dim());
        }
        if let Some(j) = (0..s.len()).find(|&j| j != d && s[j] != first.shape()[j]) {
            crate::bail!(E_SHAPE, "cat: sizes must match except in dim {d}: expected {} but got {} in dim {j} for tensor {i}", first.shape()[j], s[j]);
        }
        shape[d] = shape[d].checked_add(s[d]).ok_or_else(|| crate::err!(E_RESOURCE, "cat: the result has too many elements"))?;
    }
    checked_numel("cat", &shape)?;
    let out = Raw::empty(&shape, dt)?;
    let mut spans = Vec::with_capacity(ts.len());
    let mut at = 0;
    for (t, &skip) in ts.iter().zip(&skipped) {
        let n = if skip { 0 } else { t.shape()[d] };
        write(&narrowed(&out, d, at, n), t);
        spans.push((!skip).then_some((at, n)));
        at += n;
    }
    Ok(vec![record(out, "CatBackward0", &ts, move |g| spans.iter().map(|s| Ok(Some(match *s {
        Some((at, n)) => narrowed(g, d, at, n),
        None => Raw::zeros(&[0], g.dtype())?,
    }))).collect())])
}

/// `x` tiled `reps` times per dim (as many as `x`'s dims or more: new ones lead).
fn repeat_tiles(op: &str, x: &Raw, reps: &[i64]) -> Result<Raw> {
    if reps.len() < x.dim() {
        crate::bail!(E_SHAPE, "{op}: {} repeats for a tensor of {} dims (at least as many are needed)", fmt(reps), x.dim());
    }
    if reps.iter().any(|&r| r < 0) {
        crate::bail!(E_SHAPE, "{op}: repeats {} must be non-negative", fmt(reps));
    }
    let lead = reps.len() - x.dim();
    let xs: Vec<i64> = std::iter::repeat_n(1, lead).chain(x.shape().iter().copied()).collect();
    let xst: Vec<i64> = std::iter::repeat_n(0, lead).chain(x.strides().iter().copied()).collect();
    let shape = xs.iter().zip(reps).map(|(&s, &r)| s.checked_mul(r)).collect::<Option<Vec<i64>>>();
    let shape = shape.ok_or_else(|| crate::err!(E_RESOURCE, "{op}: repeats {} of shape {} overflow", fmt(reps), fmt(x.shape())))?;
    checked_numel(op, &shape)?;
    let out = Raw::empty(&shape, x.dtype())?;
    // The result seen as [r0, s0, r1, s1, ...]: `x` broadcast over each r, one pass.
    let cs = contiguous_strides(&shape);
    let split: Vec<i64> = reps.iter().zip(&xs).flat_map(|(&r, &s)| [r, s]).collect();
    let dst: Dims = cs.iter().zip(&xs).flat_map(|(&c, &s)| [c * s, c]).collect();
    let src: Dims = xst.iter().flat_map(|&st| [0, st]).collect();
    write(&out.view_as(split.clone(), dst, 0), &x.view_as(split.clone(), src, x.0.offset));
    let mask: Vec<bool> = (0..split.len()).map(|i| i % 2 == 0).collect();
    Ok(grad1(out, "RepeatBackward0", x, move |g| ops::sum_mask(&ops::reshape(g, &split)?, &mask, false, false)))
}

fn repeat(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![repeat_tiles("repeat", input(ins, 0), call.ints("repeats").unwrap_or(&[]))?])
}

fn tile(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let dims = call.ints("dims").unwrap_or(&[]);
    // Fewer counts than dims: the leading dims are tiled once.
    let reps: Vec<i64> = std::iter::repeat_n(1, x.dim().saturating_sub(dims.len())).chain(dims.iter().copied()).collect();
    Ok(vec![repeat_tiles("tile", x, &reps)?])
}

fn flip(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let dims: Vec<usize> = call.ints("dims").unwrap_or(&[]).iter().map(|&d| d as usize).collect();
    let out = ops::clone_contiguous(&reversed(x, &dims))?;
    Ok(vec![grad1(out, "FlipBackward0", x, move |g| ops::clone_contiguous(&reversed(g, &dims)))])
}

/// `x` rolled by `ks[i]` (in `[0, size)`) along `dims[i]`, one copy per dim.
fn rolled(x: &Raw, ks: &[i64], dims: &[usize]) -> Result<Raw> {
    let mut y = x.detached();
    for (&k, &d) in ks.iter().zip(dims) {
        let (n, out) = (y.shape()[d], Raw::empty(y.shape(), y.dtype())?);
        write(&narrowed(&out, d, k, n - k), &narrowed(&y, d, 0, n - k));
        write(&narrowed(&out, d, 0, k), &narrowed(&y, d, n - k, k));
        y = out;
    }
    Ok(y)
}

fn roll(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (shifts, dims) = (call.ints("shifts").unwrap_or(&[]), call.ints("dims").unwrap_or(&[]));
    if shifts.is_empty() || (dims.is_empty() && shifts.len() != 1) || (!dims.is_empty() && shifts.len() != dims.len()) {
        crate::bail!(E_INVALID_ARG, "roll: shifts {} and dims {} must align (one shift without dims)", fmt(shifts), fmt(dims));
    }
    if x.dim() == 0 && !dims.is_empty() {
        crate::bail!(E_SHAPE, "roll: dims {} given for a 0-dim tensor", fmt(dims));
    }
    // Without dims the tensor rolls flattened.
    let flat = dims.is_empty();
    let src = if flat { ops::reshape(&x.detached(), &[x.numel() as i64])? } else { x.detached() };
    let dims: Vec<usize> = if flat { vec![0] } else { dims.iter().map(|&d| d as usize).collect() };
    let sizes: Vec<i64> = dims.iter().map(|&d| src.shape()[d]).collect();
    let ks: Vec<i64> = shifts.iter().zip(&sizes).map(|(&s, &n)| if n == 0 { 0 } else { s.rem_euclid(n) }).collect();
    let shape = x.shape().to_vec();
    let out = ops::reshape(&rolled(&src, &ks, &dims)?, &shape)?;
    let back: Vec<i64> = ks.iter().zip(&sizes).map(|(&k, &n)| if k == 0 { 0 } else { n - k }).collect();
    Ok(vec![grad1(out, "RollBackward0", x, move |g| {
        let g = if flat { ops::reshape(g, &[g.numel() as i64])? } else { g.detached() };
        ops::reshape(&rolled(&g, &back, &dims)?, &shape)
    })])
}

/// Whether `x`'s elements fill its storage span exactly once, in some dim order.
fn dense(x: &Raw) -> bool {
    let mut dims: Vec<(i64, i64)> = x.shape().iter().zip(x.strides()).filter(|(&s, _)| s != 1).map(|(&s, &st)| (st, s)).collect();
    dims.sort_unstable();
    let mut want = 1;
    dims.iter().all(|&(st, s)| {
        let ok = st == want;
        want *= s;
        ok
    })
}

fn clone(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    // memory_format=preserve: a dense permuted layout keeps its strides.
    let out = if x.numel() > 0 && !x.is_contiguous() && dense(x) {
        let out = Raw::empty(&[x.numel() as i64], x.dtype())?.view_as(x.shape(), x.strides(), 0);
        write(&out, x);
        out
    } else {
        ops::clone_contiguous(x)?
    };
    Ok(vec![grad1(out, "CloneBackward0", x, |g| Ok(g.clone()))])
}

fn contiguous(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if x.is_contiguous() {
        return Ok(vec![x.clone()]);
    }
    Ok(vec![grad1(ops::clone_contiguous(x)?, "CloneBackward0", x, |g| Ok(g.clone()))])
}

/// A copy of `x` with the elements above (`lower`) or below diagonal `k` zeroed.
fn triangle(x: &Raw, k: i64, lower: bool) -> Result<Raw> {
    let out = ops::clone_contiguous(x)?;
    let n = x.dim();
    let (rows, cols) = (x.shape()[n - 2], x.shape()[n - 1]);
    if out.numel() == 0 {
        return Ok(out);
    }
    let k = k.clamp(-rows, cols);
    with_elem!(out.dtype(), T => {
        for (r, row) in out.slice_mut::<T>().chunks_mut(cols as usize).enumerate() {
            let i = r as i64 % rows;
            let (lo, hi) = if lower { ((i + k + 1).clamp(0, cols), cols) } else { (0, (i + k).clamp(0, cols)) };
            row[lo as usize..hi as usize].fill(T::default());
        }
    });
    Ok(out)
}

fn tri(call: &Call, ins: &[Option<&Raw>], lower: bool) -> Result<Vec<Raw>> {
    let (x, name) = (input(ins, 0), call.op.name());
    if x.dim() < 2 {
        crate::bail!(E_SHAPE, "{name}: input tensor must have at least 2 dimensions, got {}", x.dim());
    }
    let k = call.int("diagonal").unwrap_or(0);
    let node = if lower { "TrilBackward0" } else { "TriuBackward0" };
    Ok(vec![grad1(triangle(x, k, lower)?, node, x, move |g| triangle(g, k, lower))])
}

fn tril(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    tri(call, ins, true)
}

fn triu(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    tri(call, ins, false)
}

fn transpose(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![ops::transpose(input(ins, 0), dim(call, "dim0") as i64, dim(call, "dim1") as i64)?])
}

fn t(_: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    if x.dim() > 2 {
        crate::bail!(E_SHAPE, "t: expects a tensor with at most 2 dims, got {}", fmt(x.shape()));
    }
    Ok(vec![ops::transpose(x, 0, x.dim().saturating_sub(1) as i64)?])
}

fn reshape(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![ops::reshape(input(ins, 0), call.ints("shape").unwrap_or(&[]))?])
}

fn view(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![ops::view_strict(input(ins, 0), call.ints("size").unwrap_or(&[]))?])
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("transpose.int", transpose),
    ("t", t),
    ("reshape", reshape),
    ("view", view),
    ("detach", |_, ins| Ok(vec![input(ins, 0).detached()])),
    ("permute", permute),
    ("squeeze.dims", squeeze_dims),
    ("squeeze.dim", squeeze_dim),
    ("squeeze", squeeze),
    ("unsqueeze", unsqueeze),
    ("expand", expand),
    ("broadcast_to", expand),
    ("flatten.using_ints", flatten),
    ("unflatten.int", unflatten),
    ("narrow", narrow),
    ("select.int", select),
    ("split.Tensor", split_tensor),
    ("split.sizes", split_sizes),
    ("chunk", chunk),
    ("diagonal", diagonal),
    ("movedim.int", movedim),
    ("movedim.intlist", movedim),
    ("stack", stack),
    ("cat", cat),
    ("repeat", repeat),
    ("tile", tile),
    ("flip", flip),
    ("roll", roll),
    ("contiguous", contiguous),
    ("clone", clone),
    ("tril", tril),
    ("triu", triu),
];
