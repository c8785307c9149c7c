//! Strided elementwise and reduction kernels. Every operand is a view
//! (shape, strides, offset) over storage; the walk merges the dims that all
//! operands traverse linearly, so a contiguous op is one flat loop that LLVM
//! vectorises, and a transposed or broadcast one pays only for its inner
//! strides.

use smallvec::SmallVec;

use super::elem::{cast, Arith, Elem};
use super::par;
use super::simd::multiversion;
use super::tensor::{Dims, Raw};
use crate::error::Result;

/// The outer dims of a walk (outermost first) and the inner loop.
pub struct Walk<const N: usize> {
    outer: SmallVec<[(usize, [isize; N]); 4]>,
    pub inner: usize,
    pub inner_strides: [isize; N],
}

impl<const N: usize> Walk<N> {
    /// Merges dims `i`, `i+1` when, for every operand, stride[i] == stride[i+1] * size[i+1].
    pub fn new(shape: &[i64], strides: [&[i64]; N]) -> Walk<N> {
        let mut dims: SmallVec<[(usize, [isize; N]); 4]> = SmallVec::new();
        for (i, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let st: [isize; N] = std::array::from_fn(|k| strides[k][i] as isize);
            if let Some(last) = dims.last_mut() {
                if (0..N).all(|k| last.1[k] == st[k] * d as isize) {
                    last.0 *= d as usize;
                    last.1 = st;
                    continue;
                }
            }
            dims.push((d as usize, st));
        }
        let (inner, inner_strides) = dims.pop().unwrap_or((1, [0; N]));
        Walk { outer: dims, inner, inner_strides }
    }

    pub fn rows(&self) -> usize {
        self.outer.iter().map(|d| d.0).product()
    }

    /// Calls `f` with each row's starting offsets (elements), rows `start..end`.
    pub fn for_rows(&self, base: [isize; N], start: usize, end: usize, mut f: impl FnMut([isize; N])) {
        if start >= end {
            return;
        }
        let k = self.outer.len();
        let mut idx: SmallVec<[usize; 4]> = smallvec::smallvec![0; k];
        let mut rem = start;
        for j in (0..k).rev() {
            idx[j] = rem % self.outer[j].0;
            rem /= self.outer[j].0;
        }
        let mut off = base;
        for (i, d) in idx.iter().zip(&self.outer) {
            for (o, s) in off.iter_mut().zip(d.1) {
                *o += *i as isize * s;
            }
        }
        for _ in start..end {
            f(off);
            for j in (0..k).rev() {
                idx[j] += 1;
                let (d, st) = self.outer[j];
                for (o, s) in off.iter_mut().zip(st) {
                    *o += s;
                }
                if idx[j] < d {
                    break;
                }
                idx[j] = 0;
                for (o, s) in off.iter_mut().zip(st) {
                    *o -= s * d as isize;
                }
            }
        }
    }

    /// `for_rows` over every row, split across the pool when the walk is large.
    pub fn par_rows(&self, base: [isize; N], f: impl Fn([isize; N]) + Sync) {
        let rows = self.rows();
        let work = rows * self.inner;
        if !par::parallel(work) || rows < 2 {
            return self.for_rows(base, 0, rows, f);
        }
        let chunks = (par::threads() * 4).min(rows);
        par::for_each(chunks, &|c| self.for_rows(base, rows * c / chunks, rows * (c + 1) / chunks, &f));
    }

    /// `par_rows` with a look-ahead: `pre(row r + ahead)` runs before
    /// `f(row r)` (each chunk of rows in order, `ahead` at most `AHEAD`),
    /// so `pre` can prefetch what a later row will read.
    pub fn par_rows_ahead(&self, base: [isize; N], ahead: usize, pre: impl Fn([isize; N]) + Sync, f: impl Fn([isize; N]) + Sync) {
        let ahead = ahead.clamp(1, AHEAD);
        let rows = self.rows();
        let chunks = if par::parallel(rows * self.inner) && rows >= 2 { (par::threads() * 4).min(rows) } else { 1 };
        par::for_each(chunks, &|c| {
            let mut ring = [[0isize; N]; AHEAD];
            let mut k = 0;
            self.for_rows(base, rows * c / chunks, rows * (c + 1) / chunks, |off| {
                pre(off);
                if k >= ahead {
                    f(ring[k % ahead]);
                }
                ring[k % ahead] = off;
                k += 1;
            });
            for j in k.saturating_sub(ahead)..k {
                f(ring[j % ahead]);
            }
        });
    }
}

/// The longest look-ahead of `Walk::par_rows_ahead`.
pub const AHEAD: usize = 16;

/// Asks the CPU to bring the `bytes` bytes at `p` into cache, a line at a
/// time: a hint, which reads nothing and never faults, whatever the address.
#[inline(always)]
pub fn prefetch(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        for k in (0..bytes).step_by(64) {
            // SAFETY: a prefetch accesses no memory (SSE, in the x86-64 baseline).
            #[allow(unused_unsafe)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(k).cast())
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// A raw pointer that may cross to pool threads: each row writes disjoint elements.
#[derive(Clone, Copy)]
pub struct Ptr<T>(pub *mut T);
unsafe impl<T> Send for Ptr<T> {}
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    pub fn of(t: &Raw) -> Ptr<T> {
        Ptr(t.data_ptr().cast())
    }
    /// # Safety
    /// `i` is inside the view this pointer came from.
    #[inline(always)]
    pub unsafe fn at(self, i: isize) -> *mut T {
        self.0.offset(i)
    }
    /// `i` elements on, possibly outside the view: an address for `prefetch` only.
    #[inline(always)]
    pub fn wrapping_at(self, i: isize) -> *const u8 {
        self.0.wrapping_offset(i).cast()
    }
}

/// The strides that view `t` as `shape` (numpy broadcasting; 0 on expanded dims).
pub fn expand_strides(t: &Raw, shape: &[i64]) -> Dims {
    let n = shape.len();
    let k = t.dim();
    (0..n)
        .map(|i| {
            if i + k < n {
                return 0;
            }
            let j = i + k - n;
            if t.shape()[j] == 1 && shape[i] != 1 {
                0
            } else {
                t.strides()[j]
            }
        })
        .collect()
}

/// `out[i] = f(x[i])` over `x` seen with `x_strides` in `out`'s shape (any
/// layouts that do not overlap).
pub fn map_into<S: Elem, D: Elem>(out: &Raw, x: &Raw, x_strides: &[i64], f: impl Fn(S) -> D + Sync) {
    let w = Walk::new(out.shape(), [out.strides(), x_strides]);
    let (po, px) = (Ptr::<D>::of(out), Ptr::<S>::of(x));
    let (n, [so, sx]) = (w.inner, w.inner_strides);
    w.par_rows([0, 0], |[o, i]| unsafe {
        // SAFETY: offsets come from the views' own shapes and strides.
        let (po, px) = (po.at(o), px.at(i));
        match (so, sx) {
            (1, 1) => map_run(std::slice::from_raw_parts_mut(po, n), std::slice::from_raw_parts(px, n), &f),
            // A row of one broadcast value.
            (1, 0) => std::slice::from_raw_parts_mut(po, n).fill(f(*px)),
            _ => {
                for j in 0..n as isize {
                    *po.offset(j * so) = f(*px.offset(j * sx));
                }
            }
        }
    });
}

/// `out[i] = f(a[i], b[i])` with `a`, `b` broadcast to `out`'s (contiguous) shape.
pub fn zip_into<A: Elem, B: Elem, D: Elem>(out: &Raw, a: &Raw, b: &Raw, f: impl Fn(A, B) -> D + Sync) {
    // The common case, small or not: three contiguous tensors of one shape, one flat loop.
    if a.shape() == out.shape() && b.shape() == out.shape() && a.is_contiguous() && b.is_contiguous() && !par::parallel(out.numel()) {
        zip_run(out.slice_mut::<D>(), a.slice::<A>(), b.slice::<B>(), &f);
        return;
    }
    let (sa, sb) = (expand_strides(a, out.shape()), expand_strides(b, out.shape()));
    let w = Walk::new(out.shape(), [out.strides(), &sa, &sb]);
    let (po, pa, pb) = (Ptr::<D>::of(out), Ptr::<A>::of(a), Ptr::<B>::of(b));
    let (n, [so, sa, sb]) = (w.inner, w.inner_strides);
    w.par_rows([0, 0, 0], |[o, i, j]| unsafe {
        // SAFETY: offsets come from the views' own shapes and strides.
        let (po, pa, pb) = (po.at(o), pa.at(i), pb.at(j));
        let dst = std::slice::from_raw_parts_mut(po, n);
        match (so, sa, sb) {
            (1, 1, 1) => zip_run(dst, std::slice::from_raw_parts(pa, n), std::slice::from_raw_parts(pb, n), &f),
            (1, 1, 0) => {
                let y = *pb;
                map_run(dst, std::slice::from_raw_parts(pa, n), &|x| f(x, y));
            }
            (1, 0, 1) => {
                let x = *pa;
                map_run(dst, std::slice::from_raw_parts(pb, n), &|y| f(x, y));
            }
            _ => {
                for k in 0..n as isize {
                    *po.offset(k * so) = f(*pa.offset(k * sa), *pb.offset(k * sb));
                }
            }
        }
    });
}

// The contiguous rows of map_into and zip_into, compiled for each SIMD level
// (elementwise arithmetic rounds the same at every width).
multiversion!(fn map_run<S: Elem, D: Elem, F: Fn(S) -> D>(d: &mut [D], x: &[S], f: &F) => map_loop);

#[inline(always)]
fn map_loop<S: Elem, D: Elem, F: Fn(S) -> D>(d: &mut [D], x: &[S], f: &F) {
    for (d, &x) in d.iter_mut().zip(x) {
        *d = f(x);
    }
}

multiversion!(fn zip_run<A: Elem, B: Elem, D: Elem, F: Fn(A, B) -> D>(d: &mut [D], x: &[A], y: &[B], f: &F) => zip_loop);

#[inline(always)]
fn zip_loop<A: Elem, B: Elem, D: Elem, F: Fn(A, B) -> D>(d: &mut [D], x: &[A], y: &[B], f: &F) {
    for (d, (&x, &y)) in d.iter_mut().zip(x.iter().zip(y)) {
        *d = f(x, y);
    }
}

/// `acc[i] += x[i]`, rounded to `T` (as `acc + x` rounds), across the pool
/// when large. The two slices do not overlap.
pub fn add_assign<T: Elem>(acc: &mut [T], x: &[T]) {
    let n = acc.len().min(x.len());
    let step = n.div_ceil(if par::parallel(n) { par::threads() } else { 1 }).max(1);
    let (pa, px) = (Ptr(acc.as_mut_ptr()), Ptr(x.as_ptr().cast_mut()));
    par::for_each(n.div_ceil(step), &|i| {
        let (lo, hi) = (i * step, n.min((i + 1) * step));
        // SAFETY: each task takes its own range of both slices, inside their length.
        let (a, b) = unsafe { (std::slice::from_raw_parts_mut(pa.at(lo as isize), hi - lo), std::slice::from_raw_parts(px.at(lo as isize), hi - lo)) };
        add_assign_run(a, b);
    });
}

multiversion!(fn add_assign_run<T: Elem>(acc: &mut [T], x: &[T]) => add_assign_loop);

#[inline(always)]
fn add_assign_loop<T: Elem>(acc: &mut [T], x: &[T]) {
    for (a, &b) in acc.iter_mut().zip(x) {
        *a = T::down(a.up().add(b.up()));
    }
}

/// A contiguous copy of `x` converted to `D` (c10's static_cast semantics).
pub fn cast_to<S: Elem, D: Elem>(x: &Raw) -> Result<Raw> {
    let out = Raw::empty(x.shape(), D::DT)?;
    map_into::<S, D>(&out, x, x.strides(), cast::<S, D>);
    Ok(out)
}

/// Writes `src` (broadcast to `dst`'s shape) into the view `dst`, converting.
/// `dst` and `src` never overlap (callers write into fresh tensors or from fresh results).
pub fn copy_into<S: Elem, D: Elem>(dst: &Raw, src: &Raw) {
    map_into::<S, D>(dst, src, &expand_strides(src, dst.shape()), cast::<S, D>);
}

/// Sums of `x` over the dims where `out_strides` is 0, accumulated in `A`
/// (f64 for floats, i64 for integers), into the contiguous `acc` of
/// `out`'s numel.
pub fn sum_into<S: Elem, A: Arith>(acc: &mut [A], x: &Raw, acc_strides: &[i64], up: impl Fn(S) -> A + Sync + Copy) {
    let w = Walk::new(x.shape(), [acc_strides, x.strides()]);
    let (pa, px) = (Ptr(acc.as_mut_ptr()), Ptr::<S>::of(x));
    let (n, [sa, sx]) = (w.inner, w.inner_strides);
    // Rows may share accumulators (a reduced outer dim): stay on one thread.
    w.for_rows([0, 0], 0, w.rows(), |[a, i]| unsafe {
        // SAFETY: offsets come from the views' own shapes and strides.
        let (pa, px) = (pa.at(a), px.at(i));
        match (sa, sx) {
            (0, 1) => *pa = (*pa).add(sum_row(std::slice::from_raw_parts(px, n), up)),
            (0, _) => {
                let mut s = A::ZERO;
                for k in 0..n as isize {
                    s = s.add(up(*px.offset(k * sx)));
                }
                *pa = (*pa).add(s);
            }
            // A row added onto a row of accumulators (a bias gradient's shape).
            (1, 1) => add_row(std::slice::from_raw_parts_mut(pa, n), std::slice::from_raw_parts(px, n), up),
            _ => {
                for k in 0..n as isize {
                    let d = pa.offset(k * sa);
                    *d = (*d).add(up(*px.offset(k * sx)));
                }
            }
        }
    });
}

multiversion!(fn sum_row<S: Elem, A: Arith, F: Fn(S) -> A>(src: &[S], up: F) -> A => sum_row_loop);

/// The sum of a contiguous row in 8 interleaved lanes (fixed order, so
/// results do not depend on which copy runs).
#[inline(always)]
fn sum_row_loop<S: Elem, A: Arith, F: Fn(S) -> A>(src: &[S], up: F) -> A {
    let mut lanes = [A::ZERO; 8];
    let mut chunks = src.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            lanes[l] = lanes[l].add(up(c[l]));
        }
    }
    for (l, v) in chunks.remainder().iter().enumerate() {
        lanes[l] = lanes[l].add(up(*v));
    }
    let mut s = A::ZERO;
    for v in lanes {
        s = s.add(v);
    }
    s
}

multiversion!(fn add_row<S: Elem, A: Arith, F: Fn(S) -> A>(acc: &mut [A], src: &[S], up: F) => add_row_loop);

#[inline(always)]
fn add_row_loop<S: Elem, A: Arith, F: Fn(S) -> A>(acc: &mut [A], src: &[S], up: F) {
    for (d, s) in acc.iter_mut().zip(src) {
        *d = (*d).add(up(*s));
    }
}

/// `x[i] = f(x[i])` in place over any view.
pub fn update<T: Elem>(x: &Raw, f: impl Fn(T) -> T + Sync) {
    let w = Walk::new(x.shape(), [x.strides()]);
    let p = Ptr::<T>::of(x);
    let (n, [s]) = (w.inner, w.inner_strides);
    w.par_rows([0], |[o]| {
        for k in 0..n as isize {
            // SAFETY: offsets come from the view's own shape and strides; rows are disjoint.
            unsafe {
                let q = p.at(o + k * s);
                *q = f(*q);
            }
        }
    });
}
