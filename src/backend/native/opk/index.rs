//! Native kernels of the op table's index section: gathers and scatters
//! along a dim, index_select/index_add/index_copy, advanced indexing
//! (index_put), masks and `where`. Index tensors are read where they lie
//! (any strides); every index value is bounds-checked before it addresses
//! memory. Writes that may collide (scatter, index_put, index_add) run in the
//! index's row-major order on one thread, so duplicates resolve as on
//! PyTorch's CPU (the last write wins, sums in index order) whatever the
//! thread count.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
use std::sync::Arc;

use super::super::autograd::{needs_grad, record, record_saving};
use super::super::elem::{cast, match_elem, with_elem, Arith, Elem, B8};
use super::super::kernels::{cast_to, copy_into, expand_strides, prefetch, Ptr, Walk, AHEAD};
use super::super::ops::{convert, plain, sum_mask};
use super::super::par;
use super::super::tensor::{contiguous_strides, numel, Dims, Raw};
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;
use crate::vocab::kinds::Binary;
use crate::vocab::{broadcast, promote, promote_scalar, Call, Scalar, Value};

/// Runs `$body` with `$I` bound to the index element type: int64, or int32 where `$i32`.
macro_rules! with_index {
    ($op:expr, $t:expr, $i32:expr, $I:ident => $body:expr) => {{
        let t: &Raw = $t;
        if t.dtype() == DType::I32 && !$i32 {
            crate::bail!(E_DTYPE, "{}: expected an int64 index, got int32", $op);
        }
        match_elem!(t.dtype(), $I => $body, [I64: i64, I32: i32], _ => crate::bail!(E_DTYPE, "{}: expected an int64 or int32 index, got {}", $op, t.dtype().name()))
    }};
}

/// The named tensor input.
fn arg<'a>(call: &Call, ins: &[Option<&'a Raw>], name: &str) -> &'a Raw {
    input(ins, call.tensor(name).expect("core bound the op's tensor parameters"))
}

fn dim(call: &Call) -> usize {
    call.int("dim").unwrap_or(0) as usize
}

/// Sizes and strides with a 0-dim tensor seen as one element of one dim, as PyTorch's `ensure_nonempty` does.
fn ne(t: &Raw) -> (Dims, Dims) {
    if t.dim() == 0 {
        (Dims::from_slice(&[1]), Dims::from_slice(&[0]))
    } else {
        (Dims::from_slice(t.shape()), Dims::from_slice(t.strides()))
    }
}

/// A 0-dim tensor of `dt` holding `s` converted as c10 converts it.
pub(super) fn scalar_raw(s: Scalar, dt: DType) -> Result<Raw> {
    with_elem!(dt, T => Raw::from_vec::<T>(&[], &[match s {
        Scalar::Int(v) => cast::<i64, T>(v),
        Scalar::Float(v) => cast::<f64, T>(v),
        Scalar::Bool(b) => cast::<B8, T>(B8(u8::from(b))),
    }]))
}

/// `s` as a fill value of `dt`, refused where c10's checked `Scalar::to` overflows.
fn fill_value(op: &str, s: Scalar, dt: DType) -> Result<Raw> {
    let v = s.to_f64();
    if dt == DType::Bool {
        return scalar_raw(s, dt);
    }
    let (lo, hi) = match (dt, s) {
        (DType::Bool | DType::F64 | DType::C128, _) | (_, Scalar::Bool(_)) => (f64::NEG_INFINITY, f64::INFINITY),
        (DType::F32 | DType::BF16 | DType::C64, _) => (-(f32::MAX as f64), f32::MAX as f64),
        (DType::F16, _) => (-65504.0, 65504.0),
        (DType::I64, _) => (-9.223_372_036_854_776e18, 9.223_372_036_854_776e18),
        (DType::I32, _) => (-2147483648.0, 2147483647.0),
        (DType::I16, _) => (-32768.0, 32767.0),
        (DType::I8, _) => (-128.0, 127.0),
        // An integer wraps into uint8 two's-complement style, as c10 allows.
        (DType::U8, Scalar::Int(_)) => (-255.0, 255.0),
        (DType::U8, _) => (0.0, 255.0),
    };
    // A float type takes inf and nan; an integer type neither.
    let fits = (lo..=hi).contains(&v) || (dt.is_float() && !v.is_finite());
    if !fits {
        crate::bail!(E_INVALID_ARG, "{op}: value {v} cannot be converted to type {} without overflow", dt.name());
    }
    scalar_raw(s, dt)
}

/// A contiguous copy (always a fresh buffer: kernels write into it).
fn fresh(t: &Raw) -> Result<Raw> {
    with_elem!(t.dtype(), T => cast_to::<T, T>(t))
}

/// How a write combines with what is there.
#[derive(Clone, Copy, PartialEq)]
enum Red {
    Set,
    Add,
    Mul,
}

#[inline(always)]
fn combine<T: Elem>(red: Red, d: T, s: T, alpha: T::Acc) -> T {
    match red {
        Red::Set => s,
        Red::Add => T::down(d.up().add(s.up().mul(alpha))),
        Red::Mul => T::down(d.up().mul(s.up())),
    }
}

/// Checked before shapes, as an empty index is not read.
fn index_dtype(op: &str, index: &Raw) -> Result<()> {
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        crate::bail!(E_DTYPE, "{op}: expected an int64 or int32 index, got {}", index.dtype().name());
    }
    Ok(())
}

fn out_of_bounds(op: &str, bad: &AtomicBool, v: &AtomicI64, dim: usize, size: i64) -> Result<()> {
    if bad.load(Relaxed) {
        crate::bail!(E_SHAPE, "{op}: index {} is out of bounds for dimension {dim} with size {size}", v.load(Relaxed));
    }
    Ok(())
}

// ------------------------------------------------------------- along a dim

/// PyTorch's gather/scatter shape rule: index, self (and src) of one rank, and
/// the index no larger than self apart from `dim` (and than src everywhere).
fn along_check(op: &str, x: &Raw, d: usize, index: &Raw, src: Option<&Raw>) -> Result<()> {
    if index.numel() == 0 {
        return Ok(());
    }
    let (xs, is) = (ne(x).0, ne(index).0);
    let ss = src.map(|s| ne(s).0);
    if xs.len() != is.len() || ss.as_ref().is_some_and(|s| s.len() != is.len()) {
        crate::bail!(E_SHAPE, "{op}: index tensor must have the same number of dimensions as the input tensor");
    }
    for k in 0..is.len() {
        if (k != d && is[k] > xs[k]) || ss.as_ref().is_some_and(|s| is[k] > s[k]) {
            crate::bail!(E_SHAPE, "{op}: index {} must be no larger than self {} apart from dimension {d}{}", fmt(index.shape()), fmt(x.shape()), src.map(|s| format!(" and no larger than src {}", fmt(s.shape()))).unwrap_or_default());
        }
    }
    Ok(())
}

/// `out[p] = x[p with p[d] = index[p]]` over the positions `p` of `index`;
/// `wrap` takes indices modulo the size (take_along_dim).
fn gather_raw(op: &str, x: &Raw, d: usize, index: &Raw, wrap: bool) -> Result<Raw> {
    let out = Raw::empty(index.shape(), x.dtype())?;
    if index.numel() == 0 {
        return Ok(out);
    }
    let ((xsh, mut xst), (ish, ist), ost) = (ne(x), ne(index), ne(&out).1);
    let (size, step) = (xsh[d], xst[d] as isize);
    if size == 0 {
        crate::bail!(E_SHAPE, "{op}: cannot index dimension {d} of size 0");
    }
    xst[d] = 0;
    let (bad, badv) = (AtomicBool::new(false), AtomicI64::new(0));
    with_elem!(x.dtype(), T => with_index!(op, index, !wrap, I => {
        let w = Walk::new(&ish, [&ost, &ist, &xst]);
        let (po, pi, px) = (Ptr::<T>::of(&out), Ptr::<I>::of(index), Ptr::<T>::of(x));
        let (n, [so, si, sx]) = (w.inner as isize, w.inner_strides);
        let row = |[o, i, s]: [isize; 3]| {
            // SAFETY: offsets come from the views' shapes and strides.
            let r = unsafe { gather_row(po.at(o), so, pi.at(i), si, px.at(s), sx, n, step, size, wrap) };
            if let Err(v) = r {
                bad.store(true, Relaxed);
                badv.store(v, Relaxed);
            }
        };
        let row_bytes = size as usize * std::mem::size_of::<T>();
        match rows_ahead(row_bytes, n as usize, sx == 0 && step == 1) {
            // The row's first element `s` is inside x (size > 0); the prefetch reads nothing.
            Some(ahead) => w.par_rows_ahead([0, 0, 0], ahead, |[_, _, s]| prefetch(px.wrapping_at(s), row_bytes), row),
            None => w.par_rows([0, 0, 0], row),
        }
    }));
    out_of_bounds(op, &bad, &badv, d, size)?;
    Ok(out)
}

/// How many rows ahead a gather prefetches whole source rows, if it does.
/// A row of the output picks `n` elements at random from one contiguous
/// row of x (a gather along x's last dim: an embedding-style lookup, top-k
/// values by index); each pick that misses cache waits on memory for its
/// own line, the hardware prefetcher never learning the pattern nor
/// crossing into the next 4 KiB page. When the picks cover most of the
/// row's lines (no more lines than picks) and a row is small enough to
/// stay in L1 for a few rows (512 B to 16 KiB), reading whole rows ~16 KiB
/// ahead turns those misses into a stream. A `[4096, 1024]` fp32 gather of
/// `[4096, 64]` indices (benches/native_ops_compare.py) took 7-10% less on
/// a quiet machine, about half as long while other work loaded memory.
fn rows_ahead(row_bytes: usize, n: usize, contiguous: bool) -> Option<usize> {
    let lines = row_bytes.div_ceil(64);
    (contiguous && (512..=16 * 1024).contains(&row_bytes) && lines <= n).then(|| (16 * 1024 / row_bytes).min(AHEAD))
}

/// One row of a gather, with its pointers in locals so the loads of
/// consecutive elements overlap (a random gather waits on memory otherwise).
/// `Err(v)` on an index `v` outside `[0, size)`.
///
/// # Safety
/// The pointers and strides address `n` elements of live views, and
/// `x + k * sx + v * step` is inside `x`'s view for every `v` in `[0, size)`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gather_row<T: Elem, I: Elem>(o: *mut T, so: isize, i: *mut I, si: isize, x: *mut T, sx: isize, n: isize, step: isize, size: i64, wrap: bool) -> std::result::Result<(), i64> {
    if (so, si, sx, wrap) == (1, 1, 0, false) {
        let (dst, idx) = (std::slice::from_raw_parts_mut(o, n as usize), std::slice::from_raw_parts(i, n as usize));
        for (d, &v) in dst.iter_mut().zip(idx) {
            let v = cast::<I, i64>(v);
            // One unsigned compare also refuses negatives.
            if v as u64 >= size as u64 {
                return Err(v);
            }
            *d = *x.offset(v as isize * step);
        }
        return Ok(());
    }
    for k in 0..n {
        let v = cast::<I, i64>(*i.offset(k * si));
        let v = if wrap { v.rem_euclid(size) } else { v };
        if !(0..size).contains(&v) {
            return Err(v);
        }
        *o.offset(k * so) = *x.offset(k * sx + v as isize * step);
    }
    Ok(())
}

/// Runs `write(out, src)`, a reduction of `src` into `out`, in fp32 when
/// they are half and it adds or multiplies, rounding each element once
/// into `out`: PyTorch's CPU scatter and index_add kernels accumulate half
/// dtypes so (index_put's `accumulate` rounds every add, and keeps its own
/// loop). Rounding each add differs from them by many ulps where a sum
/// cancels.
fn in_fp32(out: &Raw, src: &Raw, red: Red, write: impl FnOnce(&Raw, &Raw) -> Result<()>) -> Result<()> {
    if red == Red::Set || !matches!(out.dtype(), DType::F16 | DType::BF16) {
        return write(out, src);
    }
    let (wide, wide_src) = with_elem!(out.dtype(), T => (cast_to::<T, f32>(out)?, cast_to::<T, f32>(src)?));
    write(&wide, &wide_src)?;
    with_elem!(out.dtype(), T => copy_into::<f32, T>(out, &wide));
    Ok(())
}

/// `out[p with p[d] = index[p]] (red)= src[p]` over the positions of `index`,
/// in row-major order on this thread; `out` is a fresh tensor.
fn scatter_raw(op: &str, out: &Raw, d: usize, index: &Raw, src: &Raw, red: Red, wrap: bool) -> Result<()> {
    in_fp32(out, src, red, |out, src| scatter_rows(op, out, d, index, src, red, wrap))
}

fn scatter_rows(op: &str, out: &Raw, d: usize, index: &Raw, src: &Raw, red: Red, wrap: bool) -> Result<()> {
    if index.numel() == 0 {
        return Ok(());
    }
    let ((osh, mut ost), (ish, ist)) = (ne(out), ne(index));
    let sst: Dims = if src.dim() == 0 { Dims::from_elem(0, ish.len()) } else { Dims::from_slice(src.strides()) };
    let (size, step) = (osh[d], ost[d] as isize);
    if size == 0 {
        crate::bail!(E_SHAPE, "{op}: cannot index dimension {d} of size 0");
    }
    ost[d] = 0;
    let (bad, badv) = (AtomicBool::new(false), AtomicI64::new(0));
    with_elem!(out.dtype(), T => with_index!(op, index, !wrap, I => {
        let w = Walk::new(&ish, [&ist, &ost, &sst]);
        let (pi, po, ps) = (Ptr::<I>::of(index), Ptr::<T>::of(out), Ptr::<T>::of(src));
        let (n, [si, so, ss]) = (w.inner as isize, w.inner_strides);
        w.for_rows([0, 0, 0], 0, w.rows(), |[i, o, s]| {
            for k in 0..n {
                // SAFETY: as in gather_raw.
                unsafe {
                    let v = cast::<I, i64>(*pi.at(i + k * si));
                    let v = if wrap { v.rem_euclid(size) } else { v };
                    if !(0..size).contains(&v) {
                        bad.store(true, Relaxed);
                        badv.store(v, Relaxed);
                        return;
                    }
                    let q = po.at(o + k * so + v as isize * step);
                    *q = combine(red, *q, *ps.at(s + k * ss), <<T as Elem>::Acc as Arith>::ONE);
                }
            }
        });
    }));
    out_of_bounds(op, &bad, &badv, d, size)
}

/// `g` (no larger than `shape` anywhere) placed at the start of zeros of `shape`.
fn pad_to(g: &Raw, shape: &[i64]) -> Result<Raw> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let out = Raw::zeros(shape, g.dtype())?;
    let view = out.view_as(Dims::from_slice(g.shape()), contiguous_strides(shape), 0);
    with_elem!(g.dtype(), T => copy_into::<T, T>(&view, g));
    Ok(out)
}

fn gather(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, index, d) = (arg(call, ins, "self"), arg(call, ins, "index"), dim(call));
    index_dtype("gather", index)?;
    along_check("gather", x, d, index, None)?;
    let out = gather_raw("gather", x, d, index, false)?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let (shape, index) = (x.shape().to_vec(), index.detached());
    // sparse_grad asks PyTorch for a sparse gradient of the same values: ours is dense.
    Ok(vec![record_saving(out, "GatherBackward0", &[x], &[&index.clone()], false, move |g| {
        let gx = Raw::zeros(&shape, g.dtype())?;
        scatter_raw("gather", &gx, d, &index, g, Red::Add, false)?;
        Ok(vec![Some(gx)])
    })])
}

/// scatter (every overload) and scatter_add.
fn scatter_any(call: &Call, ins: &[Option<&Raw>], op: &'static str, red: Red) -> Result<Vec<Raw>> {
    let (x, index, d) = (arg(call, ins, "self"), arg(call, ins, "index"), dim(call));
    let red = match call.str("reduce") {
        None => red,
        Some("add") => Red::Add,
        Some("multiply") => Red::Mul,
        Some(r) => crate::bail!(E_INVALID_ARG, "{op}: reduce argument must be either add or multiply, got {r:?}"),
    };
    let src_t = call.tensor("src").map(|i| input(ins, i));
    let src = match (src_t, call.scalar("value")) {
        (Some(s), _) => {
            if s.dtype() != x.dtype() {
                crate::bail!(E_DTYPE, "{op}: expected self.dtype to be equal to src.dtype ({} and {})", x.dtype().name(), s.dtype().name());
            }
            s.clone()
        }
        (None, Some(v)) => fill_value(op, v, x.dtype())?,
        (None, None) => unreachable!("every scatter overload takes src or value"),
    };
    index_dtype(op, index)?;
    along_check(op, x, d, index, src_t)?;
    let out = fresh(x)?;
    scatter_raw(op, &out, d, index, &src, red, false)?;
    let inputs: Vec<&Raw> = std::iter::once(x).chain(src_t).collect();
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let node = if op == "scatter_add" { "ScatterAddBackward0" } else { "ScatterBackward0" };
    let reduced = call.str("reduce").is_some();
    let (index, src_shape) = (index.detached(), src_t.map(|s| s.shape().to_vec()));
    Ok(vec![record_saving(out, node, &inputs, &[&index.clone()], false, move |g| {
        if reduced {
            crate::bail!(E_AUTOGRAD, "the derivative for scatter with reduce is not implemented (as in PyTorch)");
        }
        let gx = if red == Red::Add {
            g.clone()
        } else {
            let gx = fresh(g)?;
            scatter_raw(op, &gx, d, &index, &Raw::zeros(&[], g.dtype())?, Red::Set, false)?;
            gx
        };
        let gs = match &src_shape {
            Some(s) => Some(pad_to(&gather_raw(op, g, d, &index, false)?, s)?),
            None => None,
        };
        Ok(vec![Some(gx), gs])
    })])
}

fn scatter(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    scatter_any(call, ins, "scatter", Red::Set)
}

fn scatter_add(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    scatter_any(call, ins, "scatter_add", Red::Add)
}

fn take_along_dim(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    const OP: &str = "take_along_dim";
    let (x, ix) = (arg(call, ins, "self"), arg(call, ins, "indices"));
    if ix.dtype() != DType::I64 {
        crate::bail!(E_DTYPE, "{OP}: dtype of indices should be int64, got {}", ix.dtype().name());
    }
    // PyTorch gathers from the flattened input, or from input and indices broadcast
    // to each other apart from `dim`; indices are taken modulo the size.
    let (xv, iv, d) = match call.int("dim") {
        None => {
            // PyTorch flattens with `view(-1)`, which refuses a non-contiguous tensor.
            let flat = |t: &Raw| -> Result<Raw> {
                if !t.is_contiguous() {
                    crate::bail!(E_SHAPE, "{OP}: view size is not compatible with the input's size and stride; without dim, input and indices must be contiguous");
                }
                Ok(t.view_as(Dims::from_slice(&[t.numel() as i64]), Dims::from_slice(&[1]), t.0.offset))
            };
            (flat(x)?, flat(ix)?, 0)
        }
        Some(d) => {
            let d = d as usize;
            if x.dim() != ix.dim() {
                crate::bail!(E_SHAPE, "{OP}: input and indices should have the same number of dimensions, got {} and {}", x.dim(), ix.dim());
            }
            let mut xs = x.shape().to_vec();
            if !xs.is_empty() {
                xs[d] = ix.shape()[d];
            }
            let Some(bi) = broadcast(&xs, ix.shape()) else {
                crate::bail!(E_SHAPE, "{OP}: shapes {} and {} do not broadcast apart from dimension {d}", fmt(x.shape()), fmt(ix.shape()));
            };
            let mut bx = bi.clone();
            if !bx.is_empty() {
                bx[d] = x.shape()[d];
            }
            let view = |t: &Raw, s: &[i64]| t.view_as(Dims::from_slice(s), expand_strides(t, s), t.0.offset);
            (view(x, &bx), view(ix, &bi), d)
        }
    };
    let out = gather_raw(OP, &xv, d, &iv, true)?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let (xshape, vshape, iv, flat) = (x.shape().to_vec(), xv.shape().to_vec(), iv.detached(), call.int("dim").is_none());
    Ok(vec![record_saving(out, "TakeAlongDimBackward0", &[x], &[&iv.clone()], false, move |g| {
        let gx = Raw::zeros(&vshape, g.dtype())?;
        scatter_raw(OP, &gx, d, &iv, g, Red::Add, true)?;
        // The flattened form goes back to the input's shape; a broadcast one is summed by the engine.
        Ok(vec![Some(if flat { gx.view_as(Dims::from_slice(&xshape), contiguous_strides(&xshape), 0) } else { gx })])
    })])
}

// ------------------------------------------------------- index_select & co

/// Index values of a vector index (int64, or int32 where `i32`), checked against `size`.
fn index_list(op: &str, index: &Raw, d: usize, size: i64, i32: bool) -> Result<Vec<i64>> {
    if index.dim() > 1 {
        crate::bail!(E_SHAPE, "{op}: index is supposed to be a vector, got shape {}", fmt(index.shape()));
    }
    let v = with_index!(op, index, i32, I => cast_to::<I, i64>(index))?;
    let v = v.slice::<i64>().to_vec();
    if let Some(b) = v.iter().find(|&&i| !(0..size).contains(&i)) {
        crate::bail!(E_SHAPE, "{op}: index {b} is out of bounds for dimension {d} with size {size}");
    }
    Ok(v)
}

/// The size of dim `d`, a 0-dim tensor counting as one element.
fn size_at(t: &Raw, d: usize) -> i64 {
    ne(t).0[d]
}

/// `x` with dim `d` replaced by rows `idx` of it (any input layout; the result is contiguous).
fn index_select_raw(x: &Raw, d: usize, idx: &[i64]) -> Result<Raw> {
    let x = x.contiguous()?;
    let mut shape = x.shape().to_vec();
    if !shape.is_empty() {
        shape[d] = idx.len() as i64;
    }
    let out = Raw::empty(&shape, x.dtype())?;
    let xs = ne(&x).0;
    let (size, inner) = (xs[d] as usize, numel(&xs[d + 1..]));
    let (k, rows) = (idx.len(), numel(&xs[..d]) * idx.len());
    with_elem!(x.dtype(), T => {
        let (src, dst) = (x.slice::<T>(), Ptr(out.slice_mut::<T>().as_mut_ptr()));
        let tasks = if par::parallel(rows * inner) { (par::threads() * 4).min(rows) } else { 1 };
        // Rows picked at random start where no prefetcher looks: the first
        // page of each (rows of 512 B or more) is fetched while the row
        // before it is copied, about 10% off copying 4 KiB rows.
        let row_bytes = inner * std::mem::size_of::<T>();
        let ahead = if row_bytes >= 512 { row_bytes.min(4096) } else { 0 };
        par::for_each(tasks, &|t| {
            let (lo, hi) = (rows * t / tasks, rows * (t + 1) / tasks);
            for r in lo..hi {
                let (o, j) = (r / k, r % k);
                if ahead > 0 && r + 1 < hi {
                    // The next row's start, which the hardware prefetcher cannot guess.
                    let (o, j) = ((r + 1) / k, (r + 1) % k);
                    prefetch(src[(o * size + idx[j] as usize) * inner..].as_ptr().cast(), ahead);
                }
                let s = &src[(o * size + idx[j] as usize) * inner..][..inner];
                // SAFETY: each row `r` of the output is written by one task only.
                unsafe { std::slice::from_raw_parts_mut(dst.at((r * inner) as isize), inner) }.copy_from_slice(s);
            }
        });
    });
    Ok(out)
}

/// Slice `i` of `t` along `d` (a 0-dim tensor is its own slice).
fn select(t: &Raw, d: usize, i: i64) -> Raw {
    if t.dim() == 0 {
        return t.clone();
    }
    let mut shape = Dims::from_slice(t.shape());
    let mut strides = Dims::from_slice(t.strides());
    let off = (t.0.offset as i64 + i * strides[d]) as usize;
    shape.remove(d);
    strides.remove(d);
    t.view_as(shape, strides, off)
}

/// `out.select(d, idx[j]) (red)= alpha * src.select(d, j)` for each j in order; `out` is fresh.
fn index_apply(out: &Raw, d: usize, idx: &[i64], src: &Raw, red: Red, alpha: Scalar) -> Result<()> {
    in_fp32(out, src, red, |out, src| {
        index_rows(out, d, idx, src, red, alpha);
        Ok(())
    })
}

fn index_rows(out: &Raw, d: usize, idx: &[i64], src: &Raw, red: Red, alpha: Scalar) {
    with_elem!(out.dtype(), T => {
        let a = scalar_raw(alpha, T::DT).map(|a| a.slice::<T>()[0].up()).unwrap_or(<<T as Elem>::Acc as Arith>::ONE);
        for (j, &i) in idx.iter().enumerate() {
            let (dst, s) = (select(out, d, i), if src.dim() == 0 { src.clone() } else { select(src, d, j as i64) });
            let ss = expand_strides(&s, dst.shape());
            let w = Walk::new(dst.shape(), [dst.strides(), &ss]);
            let (pd, ps) = (Ptr::<T>::of(&dst), Ptr::<T>::of(&s));
            let (n, [sd, sx]) = (w.inner as isize, w.inner_strides);
            w.par_rows([0, 0], |[o, i]| {
                for k in 0..n {
                    // SAFETY: offsets come from the views' shapes and strides; one slice's rows are disjoint.
                    unsafe {
                        let q = pd.at(o + k * sd);
                        *q = combine(red, *q, *ps.at(i + k * sx), a);
                    }
                }
            });
        }
    });
}

fn index_select(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let (x, index, d) = (arg(call, ins, "self"), arg(call, ins, "index"), dim(call));
    let size = size_at(x, d);
    let idx = index_list("index_select", index, d, size, true)?;
    if x.dim() == 0 && idx.len() != 1 {
        crate::bail!(E_SHAPE, "index_select: index to a scalar can have only 1 value, got {}", idx.len());
    }
    let out = index_select_raw(x, d, &idx)?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let shape = x.shape().to_vec();
    Ok(vec![record(out, "IndexSelectBackward0", &[x], move |g| {
        let gx = Raw::zeros(&shape, g.dtype())?;
        index_apply(&gx, d, &idx, g, Red::Add, Scalar::Int(1))?;
        Ok(vec![Some(gx)])
    })])
}

/// index_add and index_copy: PyTorch's shape rules, then the writes in index order.
fn index_write(call: &Call, ins: &[Option<&Raw>], op: &'static str, red: Red) -> Result<Vec<Raw>> {
    let (x, index, src, d) = (arg(call, ins, "self"), arg(call, ins, "index"), arg(call, ins, "source"), dim(call));
    if src.dtype() != x.dtype() {
        crate::bail!(E_DTYPE, "{op}: self ({}) and source ({}) must have the same dtype", x.dtype().name(), src.dtype().name());
    }
    let idx = index_list(op, index, d, size_at(x, d), red == Red::Add)?;
    let slice = |t: &Raw| -> Vec<i64> { t.shape().iter().enumerate().filter(|&(k, _)| k != d).map(|(_, &s)| s).collect() };
    let scalar_src = red == Red::Set && src.dim() == 0;
    let fits = if scalar_src { idx.len() == 1 && x.dim() <= 1 } else { src.dim() == x.dim() && slice(src) == slice(x) && idx.len() as i64 == size_at(src, d) };
    if !fits {
        crate::bail!(E_SHAPE, "{op}: source {} does not fit self {} with {} indices along dimension {d}", fmt(src.shape()), fmt(x.shape()), idx.len());
    }
    let alpha = call.scalar("alpha").unwrap_or(Scalar::Int(1));
    let out = fresh(x)?;
    index_apply(&out, d, &idx, src, red, alpha)?;
    if !needs_grad(&[x, src]) {
        return Ok(vec![out]);
    }
    let node = if red == Red::Add { "IndexAddBackward0" } else { "IndexCopyBackward0" };
    Ok(vec![record(out, node, &[x, src], move |g| {
        let gx = if red == Red::Add {
            g.clone()
        } else {
            let gx = fresh(g)?;
            index_apply(&gx, d, &idx, &Raw::zeros(&[], g.dtype())?, Red::Set, alpha)?;
            gx
        };
        let mut gs = index_select_raw(g, d, &idx)?;
        if red == Red::Add && alpha.to_f64() != 1.0 {
            gs = plain(Binary::Mul, &gs, &scalar_raw(alpha, g.dtype())?)?;
        }
        Ok(vec![Some(gx), Some(gs)])
    })])
}

fn index_add(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    index_write(call, ins, "index_add", Red::Add)
}

fn index_copy(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    index_write(call, ins, "index_copy", Red::Set)
}

// -------------------------------------------------------- advanced indexing

/// `self[indices]` resolved: the indexed dims with their (broadcast,
/// wrapped, checked) index values, and where their broadcast shape sits
/// among the other dims in the result, as PyTorch places it.
struct Adv {
    idx: Vec<(usize, Vec<i64>)>,
    b: Vec<i64>,
    at: usize,
    rest: Vec<usize>,
    result: Vec<i64>,
}

fn adv_index(op: &str, xs: &[i64], items: &[Option<&Raw>]) -> Result<Adv> {
    if items.len() > xs.len() {
        crate::bail!(E_SHAPE, "{op}: too many indices for tensor of dimension {} (got {})", xs.len(), items.len());
    }
    let mut ts: Vec<(usize, Raw)> = Vec::new();
    let mut d = 0;
    for it in items {
        let Some(t) = it else {
            d += 1;
            continue;
        };
        match t.dtype() {
            DType::Bool | DType::U8 => {
                // A mask stands for the index tensors of its true positions (nonzero).
                let k = t.dim();
                if k == 0 || d + k > xs.len() || t.shape() != &xs[d..d + k] {
                    crate::bail!(E_SHAPE, "{op}: the shape of the mask {} at index {d} does not match the shape of the indexed tensor {}", fmt(t.shape()), fmt(xs));
                }
                let nz = nonzero_raw(t)?;
                let n = nz.shape()[0];
                let v = nz.slice::<i64>();
                for j in 0..k {
                    let col: Vec<i64> = (0..n as usize).map(|r| v[r * k + j]).collect();
                    ts.push((d + j, Raw::from_vec::<i64>(&[n], &col)?));
                }
                d += k;
            }
            DType::I64 | DType::I32 => {
                if d >= xs.len() {
                    crate::bail!(E_SHAPE, "{op}: too many indices for tensor of dimension {}", xs.len());
                }
                ts.push((d, (*t).clone()));
                d += 1;
            }
            other => crate::bail!(E_DTYPE, "{op}: tensors used as indices must be int64, int32, uint8 or bool, got {}", other.name()),
        }
    }
    if ts.is_empty() {
        crate::bail!(E_INVALID_ARG, "{op}: at least one index tensor is needed");
    }
    let mut b: Vec<i64> = Vec::new();
    for (_, t) in &ts {
        b = broadcast(&b, t.shape()).ok_or_else(|| crate::err!(E_SHAPE, "{op}: shape mismatch: indices of shapes {} and {} cannot be broadcast together", fmt(&b), fmt(t.shape())))?;
    }
    let mut idx = Vec::with_capacity(ts.len());
    for (d, t) in &ts {
        let view = t.view_as(Dims::from_slice(&b), expand_strides(t, &b), t.0.offset);
        let v = with_index!(op, t, true, I => cast_to::<I, i64>(&view))?;
        let size = xs[*d];
        let vals: Vec<i64> = v.slice::<i64>().iter().map(|&i| if i < 0 { i + size } else { i }).collect();
        if let Some(p) = vals.iter().position(|i| !(0..size).contains(i)) {
            let orig = v.slice::<i64>()[p];
            crate::bail!(E_SHAPE, "{op}: index {orig} is out of bounds for dimension {d} with size {size}");
        }
        idx.push((*d, vals));
    }
    let dims: Vec<usize> = idx.iter().map(|p| p.0).collect();
    let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..xs.len()).filter(|k| !dims.contains(k)).collect();
    let at = if adjacent { dims[0] } else { 0 };
    let rs: Vec<i64> = rest.iter().map(|&k| xs[k]).collect();
    let result = [&rs[..at], &b[..], &rs[at..]].concat();
    Ok(Adv { idx, b, at, rest, result })
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Put,
    Acc,
    /// Reads `x[indices]` into `v` (a fresh tensor of the result shape).
    Get,
}

/// Writes `v` (broadcast to the result shape) into `x[indices]`, or reads it out.
fn adv_apply(a: &Adv, x: &Raw, v: &Raw, mode: Mode) {
    let vs = expand_strides(v, &a.result);
    let nb = a.b.len();
    let vb = &vs[a.at..a.at + nb];
    let vrest: Vec<i64> = vs[..a.at].iter().chain(&vs[a.at + nb..]).copied().collect();
    let xrest: Vec<i64> = a.rest.iter().map(|&k| x.shape()[k]).collect();
    let xrest_st: Vec<i64> = a.rest.iter().map(|&k| x.strides()[k]).collect();
    let w = Walk::new(&xrest, [&xrest_st, &vrest]);
    let (n, [sx, sv]) = (w.inner as isize, w.inner_strides);
    let mut coords = vec![0i64; nb];
    with_elem!(x.dtype(), T => {
        let (px, pv) = (Ptr::<T>::of(x), Ptr::<T>::of(v));
        for bi in 0..numel(&a.b) {
            let xo: i64 = a.idx.iter().map(|(d, vals)| vals[bi] * x.strides()[*d]).sum();
            let vo: i64 = coords.iter().zip(vb).map(|(c, s)| c * s).sum();
            w.for_rows([xo as isize, vo as isize], 0, w.rows(), |[o, i]| {
                for k in 0..n {
                    // SAFETY: offsets come from the views' shapes and strides, index values were checked.
                    unsafe {
                        let (q, s) = (px.at(o + k * sx), pv.at(i + k * sv));
                        match mode {
                            Mode::Put => *q = *s,
                            Mode::Acc => *q = T::down((*q).up().add((*s).up())),
                            Mode::Get => *s = *q,
                        }
                    }
                }
            });
            for j in (0..nb).rev() {
                coords[j] += 1;
                if coords[j] < a.b[j] {
                    break;
                }
                coords[j] = 0;
            }
        }
    });
}

fn index_put(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    const OP: &str = "index_put";
    let (x, v) = (arg(call, ins, "self"), arg(call, ins, "values"));
    let items: Vec<Option<&Raw>> = match call.sig().param("indices").map(|i| &call.args[i]) {
        Some(Value::Tensors(items)) => items.iter().map(|i| i.and_then(|i| ins[i])).collect(),
        _ => Vec::new(),
    };
    if v.dtype() != x.dtype() {
        crate::bail!(E_DTYPE, "{OP}: index put requires the source and destination dtypes match, got {} for the destination and {} for the source", x.dtype().name(), v.dtype().name());
    }
    let a = Arc::new(adv_index(OP, x.shape(), &items)?);
    if broadcast(v.shape(), &a.result).as_deref() != Some(&a.result[..]) {
        crate::bail!(E_SHAPE, "{OP}: shape mismatch: value tensor of shape {} cannot be broadcast to indexing result of shape {}", fmt(v.shape()), fmt(&a.result));
    }
    let acc = call.bool("accumulate").unwrap_or(false);
    let out = fresh(x)?;
    adv_apply(&a, &out, v, if acc { Mode::Acc } else { Mode::Put });
    if !needs_grad(&[x, v]) {
        return Ok(vec![out]);
    }
    Ok(vec![record(out, "IndexPutBackward0", &[x, v], move |g| {
        let gx = if acc {
            g.clone()
        } else {
            let gx = fresh(g)?;
            adv_apply(&a, &gx, &Raw::zeros(&[], g.dtype())?, Mode::Put);
            gx
        };
        let gv = Raw::empty(&a.result, g.dtype())?;
        adv_apply(&a, g, &gv, Mode::Get);
        Ok(vec![Some(gx), Some(gv)])
    })])
}

// ------------------------------------------------------------------ masks

/// The `[n, rank]` int64 coordinates of the non-zero elements, in row-major order.
fn nonzero_raw(x: &Raw) -> Result<Raw> {
    let c = x.contiguous()?;
    let shape = x.shape();
    let hit: Vec<usize> = with_elem!(x.dtype(), T => c.slice::<T>().iter().enumerate().filter(|(_, v)| cast::<T, B8>(**v).0 != 0).map(|(i, _)| i).collect());
    let r = shape.len();
    let mut out = Vec::with_capacity(hit.len() * r);
    for &i in &hit {
        let mut rem = i as i64;
        let at = out.len();
        out.resize(at + r, 0);
        for k in (0..r).rev() {
            out[at + k] = rem % shape[k];
            rem /= shape[k];
        }
    }
    Raw::from_vec::<i64>(&[hit.len() as i64, r as i64], &out)
}

fn nonzero(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    Ok(vec![nonzero_raw(arg(call, ins, "self"))?])
}

fn bool_mask(op: &str, m: &Raw, what: &str) -> Result<()> {
    if m.dtype() != DType::Bool {
        crate::bail!(E_DTYPE, "{op}: expected a bool tensor for {what}, got {}", m.dtype().name());
    }
    Ok(())
}

fn shape3(op: &str, a: &[i64], b: &[i64], c: &[i64]) -> Result<Vec<i64>> {
    broadcast(a, b)
        .and_then(|s| broadcast(&s, c))
        .ok_or_else(|| crate::err!(E_SHAPE, "{op}: shapes {}, {} and {} do not broadcast", fmt(a), fmt(b), fmt(c)))
}

/// `cond ? a : b` over the broadcast shape; `a` and `b` share a dtype, `cond` is bool or uint8 (both one byte, non-zero is true).
fn select_raw(op: &str, cond: &Raw, a: &Raw, b: &Raw) -> Result<Raw> {
    let shape = shape3(op, cond.shape(), a.shape(), b.shape())?;
    let out = Raw::empty(&shape, a.dtype())?;
    let (sc, sa, sb) = (expand_strides(cond, &shape), expand_strides(a, &shape), expand_strides(b, &shape));
    let w = Walk::new(&shape, [out.strides(), &sc, &sa, &sb]);
    with_elem!(a.dtype(), T => {
        let (po, pc, pa, pb) = (Ptr::<T>::of(&out), Ptr::<u8>::of(cond), Ptr::<T>::of(a), Ptr::<T>::of(b));
        let (n, [so, s1, s2, s3]) = (w.inner as isize, w.inner_strides);
        w.par_rows([0, 0, 0, 0], |[o, c, i, j]| {
            for k in 0..n {
                // SAFETY: offsets come from the views' shapes and strides.
                unsafe { *po.at(o + k * so) = if *pc.at(c + k * s1) != 0 { *pa.at(i + k * s2) } else { *pb.at(j + k * s3) } };
            }
        });
    });
    Ok(out)
}

fn masked_select(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    const OP: &str = "masked_select";
    let (x, m) = (arg(call, ins, "self"), arg(call, ins, "mask"));
    bool_mask(OP, m, "mask")?;
    let shape = broadcast(x.shape(), m.shape()).ok_or_else(|| crate::err!(E_SHAPE, "{OP}: shapes {} and {} do not broadcast", fmt(x.shape()), fmt(m.shape())))?;
    let (sx, sm) = (expand_strides(x, &shape), expand_strides(m, &shape));
    let w = Walk::new(&shape, [&sx, &sm]);
    let (n, [ix, im]) = (w.inner as isize, w.inner_strides);
    let pm = Ptr::<u8>::of(m);
    let out = with_elem!(x.dtype(), T => {
        let px = Ptr::<T>::of(x);
        let mut vals: Vec<T> = Vec::new();
        w.for_rows([0, 0], 0, w.rows(), |[o, q]| {
            for k in 0..n {
                // SAFETY: offsets come from the views' shapes and strides.
                unsafe {
                    if *pm.at(q + k * im) != 0 {
                        vals.push(*px.at(o + k * ix));
                    }
                }
            }
        });
        Raw::from_vec::<T>(&[vals.len() as i64], &vals)
    })?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let m = m.detached();
    Ok(vec![record_saving(out, "MaskedSelectBackward0", &[x], &[&m.clone()], false, move |g| {
        // masked_scatter of g into zeros of the broadcast shape; the engine sums it to the input's.
        let gx = Raw::zeros(&shape, g.dtype())?;
        let g = g.contiguous()?;
        let sm = expand_strides(&m, &shape);
        let w = Walk::new(&shape, [gx.strides(), &sm]);
        let (n, [so, sq]) = (w.inner as isize, w.inner_strides);
        let pm = Ptr::<u8>::of(&m);
        with_elem!(g.dtype(), T => {
            let (po, src) = (Ptr::<T>::of(&gx), g.slice::<T>());
            let mut next = 0;
            w.for_rows([0, 0], 0, w.rows(), |[o, q]| {
                for k in 0..n {
                    // SAFETY: as above; `src` has one value per true mask element.
                    unsafe {
                        if *pm.at(q + k * sq) != 0 {
                            *po.at(o + k * so) = src[next];
                            next += 1;
                        }
                    }
                }
            });
        });
        Ok(vec![Some(gx)])
    })])
}

fn masked_fill(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    const OP: &str = "masked_fill";
    let (x, m) = (arg(call, ins, "self"), arg(call, ins, "mask"));
    bool_mask(OP, m, "mask")?;
    let vt = call.tensor("value").map(|i| input(ins, i));
    let v = match (vt, call.scalar("value")) {
        (Some(t), _) if t.dim() != 0 => crate::bail!(E_SHAPE, "{OP}: only supports a 0-dimensional value tensor, got {} dimension(s)", t.dim()),
        (Some(t), _) => convert(t, x.dtype())?,
        (None, Some(s)) => fill_value(OP, s, x.dtype())?,
        (None, None) => unreachable!("every masked_fill overload takes a value"),
    };
    let out = select_raw(OP, m, &v, x)?;
    let inputs: Vec<&Raw> = std::iter::once(x).chain(vt).collect();
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let (m, with_value) = (m.detached(), vt.is_some());
    Ok(vec![record_saving(out, "MaskedFillBackward0", &inputs, &[&m.clone()], false, move |g| {
        let zero = Raw::zeros(&[], g.dtype())?;
        let mut gs = vec![Some(select_raw(OP, &m, &zero, g)?)];
        if with_value {
            // The value's gradient: the sum of `g` where masked.
            let picked = select_raw(OP, &m, g, &zero)?;
            gs.push(Some(sum_mask(&picked, &vec![true; picked.dim()], false, false)?));
        }
        Ok(gs)
    })])
}

fn where_k(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    const OP: &str = "where";
    let cond = arg(call, ins, "condition");
    if !matches!(cond.dtype(), DType::Bool | DType::U8) {
        crate::bail!(E_DTYPE, "{OP}: expected condition to be a bool tensor, got {}", cond.dtype().name());
    }
    let (ta, tb) = (call.tensor("self").map(|i| input(ins, i)), call.tensor("other").map(|i| input(ins, i)));
    let (sa, sb) = (call.scalar("self"), call.scalar("other"));
    let dt = match (ta, tb, sa, sb) {
        (Some(a), Some(b), _, _) => promote(a.dtype(), a.dim() > 0, b.dtype(), b.dim() > 0),
        (Some(a), None, _, Some(s)) | (None, Some(a), Some(s), _) => promote_scalar(a.dtype(), s),
        (None, None, Some(s), Some(t)) => promote_scalar(promote_scalar(DType::Bool, s), t),
        _ => unreachable!("every where overload takes self and other"),
    };
    let side = |t: Option<&Raw>, s: Option<Scalar>| match (t, s) {
        (Some(t), _) => convert(t, dt),
        (None, Some(s)) => scalar_raw(s, dt),
        (None, None) => unreachable!("checked above"),
    };
    let out = select_raw(OP, cond, &side(ta, sa)?, &side(tb, sb)?)?;
    let inputs: Vec<&Raw> = ta.into_iter().chain(tb).collect();
    if !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let (cond, has_a, has_b) = (cond.detached(), ta.is_some(), tb.is_some());
    Ok(vec![record_saving(out, "WhereBackward0", &inputs, &[&cond.clone()], false, move |g| {
        let zero = Raw::zeros(&[], g.dtype())?;
        let mut gs = Vec::new();
        if has_a {
            gs.push(Some(select_raw(OP, &cond, g, &zero)?));
        }
        if has_b {
            gs.push(Some(select_raw(OP, &cond, &zero, g)?));
        }
        Ok(gs)
    })])
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("gather", gather),
    ("scatter.src", scatter),
    ("scatter.value", scatter),
    ("scatter.reduce", scatter),
    ("scatter.value_reduce", scatter),
    ("scatter_add", scatter_add),
    ("index_select", index_select),
    ("index_add", index_add),
    ("index_copy", index_copy),
    ("index_put", index_put),
    ("take_along_dim", take_along_dim),
    ("masked_select", masked_select),
    ("nonzero", nonzero),
    ("masked_fill.Scalar", masked_fill),
    ("masked_fill.Tensor", masked_fill),
    ("where.self", where_k),
    ("where.ScalarSelf", where_k),
    ("where.ScalarOther", where_k),
    ("where.Scalar", where_k),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that are the same on every run, below `high`.
    fn lcg(n: usize, high: i64, seed: u64) -> Vec<i64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 33) % high as u64) as i64
            })
            .collect()
    }

    /// The gathers whose source rows are prefetched ahead (rows of 512 B
    /// to 16 KiB, no more lines than picks) give what the plain loop gives,
    /// split across the pool (600 rows) or not, with fewer rows than the
    /// look-ahead, a look-ahead of one, a strided index and a sliced input
    /// too; a bad index in the last row is found.
    #[test]
    fn gathers_with_rows_prefetched_ahead_match_the_plain_gather() {
        for (rows, size, n) in [(37, 1024, 64), (600, 1024, 64), (3, 128, 8), (5, 4096, 256), (40, 128, 8), (9, 300, 4)] {
            let x: Vec<f32> = (0..rows * size).map(|v| v as f32).collect();
            let xr = Raw::from_vec::<f32>(&[rows as i64, size as i64], &x).unwrap();
            let idx = lcg(rows * n, size as i64, rows as u64);
            let ir = Raw::from_vec::<i64>(&[rows as i64, n as i64], &idx).unwrap();
            let want: Vec<f32> = (0..rows * n).map(|p| x[(p / n) * size + idx[p] as usize]).collect();
            assert_eq!(gather_raw("gather", &xr, 1, &ir, false).unwrap().slice::<f32>(), &want[..], "{rows}x{size} by {n}");
            // Every other index row (a strided index) from every other input row (a sliced input).
            let half = rows.div_ceil(2) as i64;
            let iv = ir.view_as(Dims::from_slice(&[half, n as i64]), Dims::from_slice(&[2 * n as i64, 1]), 0);
            let xv = xr.view_as(Dims::from_slice(&[half, size as i64]), Dims::from_slice(&[2 * size as i64, 1]), 0);
            let want: Vec<f32> = (0..half as usize * n).map(|p| x[(p / n) * 2 * size + idx[(p / n) * 2 * n + p % n] as usize]).collect();
            assert_eq!(gather_raw("gather", &xv, 1, &iv, false).unwrap().slice::<f32>(), &want[..]);
            let mut bad = idx.clone();
            bad[rows * n - 1] = size as i64;
            let br = Raw::from_vec::<i64>(&[rows as i64, n as i64], &bad).unwrap();
            let e = gather_raw("gather", &xr, 1, &br, false).err().expect("an out-of-bounds index is refused");
            assert!(e.to_string().contains(&format!("index {size} is out of bounds")), "{e}");
        }
        assert_eq!(rows_ahead(4096, 64, true), Some(4));
        assert_eq!(rows_ahead(4096, 63, true), None);
        assert_eq!(rows_ahead(4096, 64, false), None);
        assert_eq!(rows_ahead(256, 64, true), None);
        assert_eq!(rows_ahead(512, 8, true), Some(AHEAD));
    }

    /// index_select of rows long enough to be prefetched, along dim 0 and 1.
    #[test]
    fn index_select_of_long_rows_matches_the_plain_copy() {
        let (a, b, c) = (6usize, 50usize, 256usize);
        let x: Vec<f32> = (0..a * b * c).map(|v| v as f32).collect();
        let xr = Raw::from_vec::<f32>(&[a as i64, b as i64, c as i64], &x).unwrap();
        let idx = lcg(70, b as i64, 3);
        let got = index_select_raw(&xr, 1, &idx).unwrap();
        let want: Vec<f32> = (0..a).flat_map(|o| idx.iter().flat_map(move |&j| (0..c).map(move |e| ((o * b + j as usize) * c + e) as f32))).collect();
        assert_eq!(got.slice::<f32>(), &want[..]);
        let idx = lcg(9, a as i64, 4);
        let got = index_select_raw(&xr, 0, &idx).unwrap();
        let want: Vec<f32> = idx.iter().flat_map(|&j| x[j as usize * b * c..][..b * c].to_vec()).collect();
        assert_eq!(got.slice::<f32>(), &want[..]);
    }
}
