//! Native convolutions and pools, with their backward.
//!
//! A convolution is im2col plus one GEMM per (image, group), as PyTorch's
//! `slow_conv2d` is: the "image" side (a convolution's input, a transposed
//! convolution's output) is unrolled into columns `[ic·kh·kw, oh·ow]`, the
//! "flat" side (a convolution's output) is `[fc, oh·ow]`, and the weight of
//! a group is the matrix `[fc, ic·kh·kw]`. The three products (forward,
//! gradient of the image side, gradient of the weight) serve both the
//! convolution and the transposed one, whose roles of image and flat are
//! swapped. 1-D convolutions are 2-D ones of height 1. fp32 runs on the
//! library's AVX2 GEMM (`sgemm`) where that is the CPU's widest level, else,
//! as fp64, on the `gemm` crate; bf16 and fp16 compute in fp32 and round
//! once (what PyTorch's CPU kernels give); integers wrap, as PyTorch's.

use super::super::autograd::{needs_grad, record, record_saving};
use super::super::elem::{with_elem, Arith, Elem};
use super::super::kernels::Ptr;
use super::super::ops::convert;
use super::super::par;
use super::super::tensor::Raw;
use super::{input, Kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::vocab::conv::{adaptive_shape, conv_shape, pool_shape, ConvShape};
use crate::vocab::sample::{fold_blocks, unfold_blocks, Blocks};
use crate::vocab::Call;

/// One convolution's sizes, as products between an image and a flat side.
#[derive(Clone, Copy, Debug)]
struct Geo {
    n: usize,
    groups: usize,
    /// Channels per group on the flat and the image side.
    fc: usize,
    ic: usize,
    /// Image height and width; flat (output positions) height and width.
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
}

impl Geo {
    /// Rows of the unrolled columns (the weight matrix's width).
    fn k(&self) -> usize {
        self.ic * self.kh * self.kw
    }
    fn l(&self) -> usize {
        self.oh * self.ow
    }
    fn flat(&self) -> usize {
        self.groups * self.fc * self.l()
    }
    /// A 1x1 kernel of stride 1 and no padding: the image is its own columns.
    fn pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.s == [1, 1] && self.p == [0, 0] && self.oh == self.ih && self.ow == self.iw
    }
    /// The range of output columns `ox` whose input column `ox·s - p + j·d` is inside `[0, size)`.
    fn span(out: usize, size: usize, s: usize, off: isize) -> (usize, usize) {
        // ix = ox·s + off
        let lo = if off >= 0 { 0 } else { ((-off) as usize).div_ceil(s) };
        let last = size as isize - 1 - off;
        let hi = if last < 0 { 0 } else { (last as usize / s + 1).min(out) };
        (lo.min(hi), hi)
    }
}

/// Unrolls output rows `y0..y1` of one group of one image (`[ic, ih, iw]`)
/// into `cols` `[k, (y1 - y0)·ow]`.
fn im2col<T: Copy + Default>(x: &[T], g: &Geo, cols: &mut [T], y0: usize, y1: usize) {
    let (lb, zero) = ((y1 - y0) * g.ow, T::default());
    for c in 0..g.ic {
        let img = &x[c * g.ih * g.iw..(c + 1) * g.ih * g.iw];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &mut cols[((c * g.kh + i) * g.kw + j) * lb..][..lb];
                let offx = (j * g.d[1]) as isize - g.p[1] as isize;
                let (lo, hi) = Geo::span(g.ow, g.iw, g.s[1], offx);
                for oy in y0..y1 {
                    let out = &mut row[(oy - y0) * g.ow..(oy - y0 + 1) * g.ow];
                    let iy = (oy * g.s[0] + i * g.d[0]) as isize - g.p[0] as isize;
                    if iy < 0 || iy >= g.ih as isize || lo >= hi {
                        out.fill(zero);
                        continue;
                    }
                    let src = &img[iy as usize * g.iw..][..g.iw];
                    out[..lo].fill(zero);
                    out[hi..].fill(zero);
                    let start = ((lo * g.s[1]) as isize + offx) as usize;
                    if g.s[1] == 1 {
                        out[lo..hi].copy_from_slice(&src[start..start + (hi - lo)]);
                    } else {
                        for (k, o) in out[lo..hi].iter_mut().enumerate() {
                            *o = src[start + k * g.s[1]];
                        }
                    }
                }
            }
        }
    }
}

/// Adds the columns `cols` `[k, (y1 - y0)·ow]` of output rows `y0..y1` back
/// into one group of one image (`[ic, ih, iw]`).
fn col2im<T: Arith>(cols: &[T], g: &Geo, x: &mut [T], y0: usize, y1: usize, round: impl Fn(T) -> T) {
    let lb = (y1 - y0) * g.ow;
    for c in 0..g.ic {
        let img = &mut x[c * g.ih * g.iw..(c + 1) * g.ih * g.iw];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = &cols[((c * g.kh + i) * g.kw + j) * lb..][..lb];
                let offx = (j * g.d[1]) as isize - g.p[1] as isize;
                let (lo, hi) = Geo::span(g.ow, g.iw, g.s[1], offx);
                if lo >= hi {
                    continue;
                }
                for oy in y0..y1 {
                    let iy = (oy * g.s[0] + i * g.d[0]) as isize - g.p[0] as isize;
                    if iy < 0 || iy >= g.ih as isize {
                        continue;
                    }
                    let dst = &mut img[iy as usize * g.iw..][..g.iw];
                    let src = &row[(oy - y0) * g.ow..(oy - y0 + 1) * g.ow];
                    let start = ((lo * g.s[1]) as isize + offx) as usize;
                    if g.s[1] == 1 {
                        for (d, &v) in dst[start..start + (hi - lo)].iter_mut().zip(&src[lo..hi]) {
                            *d = round(d.add(v));
                        }
                    } else {
                        for k in lo..hi {
                            let at = start + (k - lo) * g.s[1];
                            dst[at] = round(dst[at].add(src[k]));
                        }
                    }
                }
            }
        }
    }
}

/// Bytes of unrolled columns per block: a block's columns stay in the
/// caches between im2col and the product that reads them (unrolling a whole
/// image first, 7 MB for a 3x3 kernel over 64 channels of 56x56, would
/// stream it through memory twice), and each product packs the weight's
/// group once per block, so a block of one output row (256 KiB there) paid
/// that packing per 56 columns. conv2d forward + backward of
/// [32, 64, 56, 56] by [64, 64, 3, 3], best of 6 alternating steps in one
/// process: 1 MiB 342-350 ms at 1 thread and 173 at 2, against 355-363 and
/// 181 for 256 KiB; 2 and 4 MiB were no faster.
const BLOCK_BYTES: usize = 1 << 20;

/// Output rows per block, and the blocks `(y0, y1)` of one image.
fn blocks<T>(g: &Geo) -> impl Iterator<Item = (usize, usize)> {
    let per_row = (g.k() * g.ow * std::mem::size_of::<T>()).max(1);
    let rows = if g.pointwise() { g.oh.max(1) } else { (BLOCK_BYTES / per_row).clamp(1, g.oh.max(1)) };
    let oh = g.oh;
    (0..oh).step_by(rows).map(move |y0| (y0, (y0 + rows).min(oh)))
}

/// Scratch for one block's columns.
fn scratch<T: Default + Clone>(g: &Geo) -> Vec<T> {
    if g.pointwise() {
        return Vec::new();
    }
    let rows = blocks::<T>(g).next().map_or(0, |(a, b)| b - a);
    vec![T::default(); g.k() * rows * g.ow]
}

/// The element types the products run in: fp32 (`sgemm` or the `gemm` crate), fp64 (the `gemm` crate) and the integers (a wrapping loop).
trait Num: Elem<Acc = Self> + Arith {}
impl<T: Elem<Acc = T> + Arith> Num for T {}

/// `dst (+)= a · b` for row-major operands given by (row, column) strides,
/// split across the pool when `threads`.
///
/// # Safety
/// The pointers and strides describe valid, non-overlapping views of these sizes.
#[allow(clippy::too_many_arguments)]
unsafe fn mm<T: Num>(m: usize, n: usize, k: usize, dst: *mut T, ld: usize, acc: bool, a: *const T, a_rs: isize, a_cs: isize, b: *const T, b_rs: isize, b_cs: isize, threads: bool) {
    use std::any::TypeId;
    if m == 0 || n == 0 {
        return;
    }
    let real = TypeId::of::<T>() == TypeId::of::<f32>() || TypeId::of::<T>() == TypeId::of::<f64>();
    if !real {
        for i in 0..m {
            for j in 0..n {
                let mut s = if acc { *dst.add(i * ld + j) } else { T::ZERO };
                for p in 0..k {
                    s = s.add((*a.offset(i as isize * a_rs + p as isize * a_cs)).mul(*b.offset(p as isize * b_rs + j as isize * b_cs)));
                }
                *dst.add(i * ld + j) = s;
            }
        }
        return;
    }
    // Split by output columns, each part one single-threaded product (as `matmul`).
    let parts = if threads && par::parallel(m * n * k) { par::threads().min(n.div_ceil(16)) } else { 1 };
    let step = n.div_ceil(parts).next_multiple_of(16).max(1);
    let parts = n.div_ceil(step);
    let (d, a, b) = (Ptr(dst), Ptr(a as *mut T), Ptr(b as *mut T));
    par::for_each(parts, &|i| {
        let (d, a, b) = (d, a, b);
        let (lo, hi) = (i * step, n.min((i + 1) * step));
        // SAFETY: forwarded; the parts write disjoint columns of `dst`.
        unsafe {
            if TypeId::of::<T>() == TypeId::of::<f32>() {
                super::super::matmul::leaf::<f32>(m, hi - lo, k, d.0.add(lo).cast(), ld, acc, a.0.cast(), a_rs, a_cs, b.0.offset(lo as isize * b_cs).cast(), b_rs, b_cs);
            } else {
                super::super::matmul::leaf::<f64>(m, hi - lo, k, d.0.add(lo).cast(), ld, acc, a.0.cast(), a_rs, a_cs, b.0.offset(lo as isize * b_cs).cast(), b_rs, b_cs);
            }
        }
    });
}

/// Runs `f(first, last, threads_inside)` over `0..n` tasks: across the pool
/// when there are enough tasks, else in one part whose products split themselves.
fn tasks(n: usize, work: usize, f: impl Fn(usize, usize, bool) + Sync) {
    let threads = par::threads();
    if n >= threads && par::parallel(work) {
        let parts = threads.min(n);
        par::for_each(parts, &|c| f(n * c / parts, n * (c + 1) / parts, false));
    } else {
        f(0, n, true);
    }
}

/// flat = W · im2col(image), per (image, group). `w` is `[groups·fc, k]`.
fn forward<T: Num>(image: &[T], w: &[T], g: &Geo, flat: &mut [T]) {
    let (k, l, size) = (g.k(), g.l(), g.ic * g.ih * g.iw);
    let po = Ptr(flat.as_mut_ptr());
    tasks(g.n * g.groups, g.n * g.flat() * k, |lo, hi, inside| {
        let po = po;
        let mut cols = scratch::<T>(g);
        for t in lo..hi {
            let (n, gr) = (t / g.groups, t % g.groups);
            let x = &image[(n * g.groups + gr) * size..][..size];
            for (y0, y1) in blocks::<T>(g) {
                let lb = (y1 - y0) * g.ow;
                let (b, b_rs) = if g.pointwise() {
                    (&x[y0 * g.ow..], l)
                } else {
                    im2col(x, g, &mut cols, y0, y1);
                    (&cols[..], lb)
                };
                // SAFETY: task `t` writes its own `[fc, l]` block of `flat`, these columns of it.
                unsafe {
                    let dst = po.0.add((n * g.groups + gr) * g.fc * l + y0 * g.ow);
                    mm(g.fc, lb, k, dst, l, false, w.as_ptr().add(gr * g.fc * k), k as isize, 1, b.as_ptr(), b_rs as isize, 1, inside);
                }
            }
        }
    });
}

/// The image side's gradient: col2im(Wᵀ · flat), per (image, group), into a zeroed `image`.
fn backward_image<T: Num>(flat: &[T], w: &[T], g: &Geo, image: &mut [T]) {
    backward_image_rounded(flat, w, g, image, None)
}

/// `backward_image`, with the columns and every sum of col2im rounded by `round` when given.
fn backward_image_rounded<T: Num>(flat: &[T], w: &[T], g: &Geo, image: &mut [T], round: Option<fn(T) -> T>) {
    let (k, l, size) = (g.k(), g.l(), g.ic * g.ih * g.iw);
    let po = Ptr(image.as_mut_ptr());
    tasks(g.n * g.groups, g.n * g.flat() * k, |lo, hi, inside| {
        let po = po;
        let mut cols = scratch::<T>(g);
        for t in lo..hi {
            let (n, gr) = (t / g.groups, t % g.groups);
            // SAFETY: task `t` writes its own group of its own image.
            let x = unsafe { std::slice::from_raw_parts_mut(po.0.add((n * g.groups + gr) * size), size) };
            for (y0, y1) in blocks::<T>(g) {
                let lb = (y1 - y0) * g.ow;
                let (dst, ld) = if g.pointwise() { (x.as_mut_ptr(), l) } else { (cols.as_mut_ptr(), lb) };
                // SAFETY: `dst` holds `[k, lb]`; the weight's group `[fc, k]` is read transposed.
                unsafe {
                    let f = flat.as_ptr().add((n * g.groups + gr) * g.fc * l + y0 * g.ow);
                    mm(k, lb, g.fc, dst, ld, false, w.as_ptr().add(gr * g.fc * k), 1, k as isize, f, l as isize, 1, inside);
                }
                match (g.pointwise(), round) {
                    (true, None) => {}
                    (true, Some(r)) => x.iter_mut().for_each(|v| *v = r(*v)),
                    (false, None) => col2im(&cols, g, x, y0, y1, |v| v),
                    (false, Some(r)) => {
                        cols[..k * lb].iter_mut().for_each(|v| *v = r(*v));
                        col2im(&cols, g, x, y0, y1, r);
                    }
                }
            }
        }
    });
}

/// The weight's gradient: the sum over images of flat · im2col(image)ᵀ, per group.
fn backward_weight<T: Num>(flat: &[T], image: &[T], g: &Geo) -> Vec<T> {
    let (k, l, size) = (g.k(), g.l(), g.ic * g.ih * g.iw);
    let wsize = g.groups * g.fc * k;
    // Each part of the batch sums into its own copy, added up at the end.
    let threads = par::threads();
    let parts = if g.n >= threads && par::parallel(g.n * g.flat() * k) { threads.min(g.n) } else { 1 };
    let mut partial = vec![T::default(); parts * wsize];
    let pp = Ptr(partial.as_mut_ptr());
    par::for_each(parts, &|c| {
        let pp = pp;
        let (lo, hi) = (g.n * c / parts, g.n * (c + 1) / parts);
        // SAFETY: part `c` writes its own copy.
        let dw = unsafe { std::slice::from_raw_parts_mut(pp.0.add(c * wsize), wsize) };
        let mut cols = scratch::<T>(g);
        for n in lo..hi {
            for gr in 0..g.groups {
                let x = &image[(n * g.groups + gr) * size..][..size];
                for (y0, y1) in blocks::<T>(g) {
                    let lb = (y1 - y0) * g.ow;
                    let (b, b_cs) = if g.pointwise() {
                        (&x[y0 * g.ow..], l)
                    } else {
                        im2col(x, g, &mut cols, y0, y1);
                        (&cols[..], lb)
                    };
                    // SAFETY: `[fc, lb] · [lb, k]` (the columns read transposed) into the group's `[fc, k]`.
                    unsafe {
                        let f = flat.as_ptr().add((n * g.groups + gr) * g.fc * l + y0 * g.ow);
                        let first = n == lo && y0 == 0;
                        mm(g.fc, k, lb, dw.as_mut_ptr().add(gr * g.fc * k), k, !first, f, l as isize, 1, b.as_ptr(), 1, b_cs as isize, parts == 1);
                    }
                }
            }
        }
    });
    let (first, rest) = partial.split_at_mut(wsize);
    for r in rest.chunks(wsize) {
        first.iter_mut().zip(r).for_each(|(a, &b)| *a = a.add(b));
    }
    partial.truncate(wsize);
    partial
}

/// `v[n][c][..]` += `bias[c]` over `n` images of `c` channels of `inner` elements.
fn add_bias<T: Num>(v: &mut [T], bias: &[T], inner: usize) {
    if inner == 0 {
        return;
    }
    for (i, chunk) in v.chunks_mut(inner).enumerate() {
        let b = bias[i % bias.len()];
        chunk.iter_mut().for_each(|x| *x = x.add(b));
    }
}

/// The bias's gradient: the sum of `g` `[n, c, inner]` over `n` and `inner`.
fn bias_grad<T: Num>(g: &[T], c: usize, inner: usize) -> Vec<T> {
    let mut out = vec![T::default(); c];
    if inner > 0 {
        for (i, chunk) in g.chunks(inner).enumerate() {
            out[i % c] = chunk.iter().fold(out[i % c], |s, &v| s.add(v));
        }
    }
    out
}

// ------------------------------------------------------------ arguments

/// The dtype the products run in.
fn compute(d: DType) -> DType {
    if matches!(d, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        d
    }
}

/// A tensor as a contiguous tensor of the compute type `T` (itself when it is one).
fn data<T: Elem>(t: &Raw) -> Result<Raw> {
    convert(t, T::DT)?.contiguous()
}

/// A convolution's products (see the module doc): a convolution's image is
/// its input, a transposed one's its output.
fn geo(cs: &ConvShape, transposed: bool) -> Geo {
    let u = |v: [i64; 2]| [v[0] as usize, v[1] as usize];
    let g = cs.groups as usize;
    let (img, flat, image_c, flat_c) = if transposed { (cs.out, cs.size, cs.c_out, cs.c_in) } else { (cs.size, cs.out, cs.c_in, cs.c_out) };
    let (img, flat) = (u(img), u(flat));
    Geo {
        n: cs.n as usize,
        groups: g,
        fc: flat_c as usize / g,
        ic: image_c as usize / g,
        ih: img[0],
        iw: img[1],
        oh: flat[0],
        ow: flat[1],
        kh: cs.kernel[0] as usize,
        kw: cs.kernel[1] as usize,
        s: u(cs.stride),
        p: u(cs.padding),
        d: u(cs.dilation),
    }
}

/// A convolution's geometry and its result's shape.
struct Conv {
    transposed: bool,
    geo: Geo,
    out_shape: Vec<i64>,
}

fn conv_any(call: &Call, ins: &[Option<&Raw>], dims: usize, transposed: bool) -> Result<Vec<Raw>> {
    let (x, w, b) = (input(ins, 0), input(ins, 1), ins.get(2).copied().flatten());
    let cs = conv_shape(call, (x.shape(), x.dtype()), (w.shape(), w.dtype()), b.map(|b| (b.shape(), b.dtype())), dims, transposed)?;
    let cv = Conv { transposed, geo: geo(&cs, transposed), out_shape: cs.shape };
    let op = call.op.name();
    let dt = x.dtype();
    // PyTorch's CPU kernels: int64 is the only integer of the dilated and
    // transposed ones, and none takes bool; an empty input gives an empty
    // (or zero) result before any kernel looks at the dtype.
    let dilated = cs.dilation != [1, 1];
    let refused = match dt {
        DType::Bool => Some("slow_conv2d_cpu"),
        d if d.is_float() || d == DType::I64 => None,
        _ if transposed => Some("slow_conv_transpose2d_out_cpu"),
        _ if dilated => Some("slow_conv_dilated<>"),
        _ => None,
    };
    if let Some(kernel) = refused {
        if x.numel() == 0 && cv.out_shape.iter().product::<i64>() == 0 {
            return Ok(vec![Raw::zeros(&cv.out_shape, dt)?]);
        }
        crate::bail!(E_DTYPE, "{op}: \"{kernel}\" not implemented for {}", dt.name());
    }
    let g = cv.geo;
    let out = match compute(dt) {
        DType::F32 if transposed && dt == DType::F16 => run_half_transposed(&cv, x, w, b)?,
        DType::F32 => run::<f32>(&cv, x, w, b)?,
        DType::F64 => run::<f64>(&cv, x, w, b)?,
        DType::I64 => run::<i64>(&cv, x, w, b)?,
        DType::I32 => run::<i32>(&cv, x, w, b)?,
        DType::I16 => run::<i16>(&cv, x, w, b)?,
        DType::I8 => run::<i8>(&cv, x, w, b)?,
        DType::U8 => run::<u8>(&cv, x, w, b)?,
        d => crate::bail!(E_DTYPE, "{op}: \"slow_conv2d_cpu\" not implemented for {}", d.name()),
    };
    let out = convert(&out, dt)?;
    let inputs: Vec<&Raw> = [Some(x), Some(w), b].into_iter().flatten().collect();
    if !dt.is_float() || !needs_grad(&inputs) {
        return Ok(vec![out]);
    }
    let (xs, ws) = (x.detached(), w.detached());
    let (gx, gw, gb) = (x.requires_grad(), w.requires_grad(), b.is_some_and(|b| b.requires_grad()));
    let has_bias = b.is_some();
    Ok(vec![record_saving(out, "ConvolutionBackward0", &inputs, &[x, w], false, move |grad| {
        let (dx, dw, db) = match compute(grad.dtype()) {
            DType::F64 => grads::<f64>(&g, transposed, grad, &xs, &ws, [gx, gw, gb && has_bias])?,
            _ => grads::<f32>(&g, transposed, grad, &xs, &ws, [gx, gw, gb && has_bias])?,
        };
        let mut v = vec![dx, dw];
        if has_bias {
            v.push(db);
        }
        Ok(v)
    })])
}

/// The forward in the compute type `T`, in the result's shape.
fn run<T: Num>(cv: &Conv, x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    let g = &cv.geo;
    let (xr, wr) = (data::<T>(x)?, data::<T>(w)?);
    let (xv, wv) = (xr.slice::<T>(), wr.slice::<T>());
    let out = if cv.transposed {
        let out = Raw::zeros(&cv.out_shape, T::DT)?;
        backward_image(xv, wv, g, out.slice_mut::<T>());
        out
    } else {
        let out = Raw::empty(&cv.out_shape, T::DT)?;
        forward(xv, wv, g, out.slice_mut::<T>());
        out
    };
    if let Some(b) = b {
        let inner = if cv.transposed { g.ih * g.iw } else { g.l() };
        add_bias(out.slice_mut::<T>(), data::<T>(b)?.slice::<T>(), inner);
    }
    Ok(out)
}

/// conv_transpose2d in fp16, as PyTorch's CPU kernel computes it: the
/// product in fp32 rounded to fp16 once, then col2im's sums each rounded
/// to fp16 (it accumulates in the storage type), then the bias. (Its bf16
/// kernel accumulates in fp32 and rounds once, as the others.)
fn run_half_transposed(cv: &Conv, x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    let g = &cv.geo;
    let (xr, wr) = (data::<f32>(x)?, data::<f32>(w)?);
    let out = Raw::zeros(&cv.out_shape, DType::F32)?;
    let round: fn(f32) -> f32 = |v| half::f16::from_f32(v).to_f32();
    backward_image_rounded(xr.slice::<f32>(), wr.slice::<f32>(), g, out.slice_mut::<f32>(), Some(round));
    if let Some(b) = b {
        add_bias(out.slice_mut::<f32>(), data::<f32>(b)?.slice::<f32>(), g.ih * g.iw);
    }
    Ok(out)
}

/// The gradients (input, weight, bias) of a convolution from the result's gradient.
fn grads<T: Num>(g: &Geo, transposed: bool, grad: &Raw, x: &Raw, w: &Raw, want: [bool; 3]) -> Result<(Option<Raw>, Option<Raw>, Option<Raw>)> {
    let (gr, xr, wr) = (data::<T>(grad)?, data::<T>(x)?, data::<T>(w)?);
    let (gv, xv, wv) = (gr.slice::<T>(), xr.slice::<T>(), wr.slice::<T>());
    // Convolution: image = x, flat = y. Transposed: image = y, flat = x.
    let dx = if !want[0] {
        None
    } else if transposed {
        let dx = Raw::empty(x.shape(), T::DT)?;
        forward(gv, wv, g, dx.slice_mut::<T>());
        Some(dx)
    } else {
        let dx = Raw::zeros(x.shape(), T::DT)?;
        backward_image(gv, wv, g, dx.slice_mut::<T>());
        Some(dx)
    };
    let dw = if !want[1] {
        None
    } else if transposed {
        Some(Raw::from_vec(w.shape(), &backward_weight(xv, gv, g))?)
    } else {
        Some(Raw::from_vec(w.shape(), &backward_weight(gv, xv, g))?)
    };
    let db = if !want[2] {
        None
    } else {
        let (c, inner) = if transposed { (g.groups * g.ic, g.ih * g.iw) } else { (g.groups * g.fc, g.l()) };
        Some(Raw::from_vec(&[c as i64], &bias_grad(gv, c, inner))?)
    };
    Ok((dx, dw, db))
}

fn conv1d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    conv_any(call, ins, 1, false)
}

fn conv2d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    conv_any(call, ins, 2, false)
}

fn conv_transpose2d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    conv_any(call, ins, 2, true)
}

// ---------------------------------------------------------------- pools

/// A 2-D pool's sizes: `planes` images of `ih × iw` pooled into `oh × ow`.
#[derive(Clone, Copy)]
struct Pool {
    planes: usize,
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
}

/// The checked geometry of max_pool2d (`dilated`) or avg_pool2d, and the result's shape.
fn pool_geometry(call: &Call, x: &Raw, dilated: bool) -> Result<(Pool, Vec<i64>)> {
    let (ps, shape) = pool_shape(call, x.shape(), dilated)?;
    let u = |v: [i64; 2]| [v[0] as usize, v[1] as usize];
    let pool = Pool {
        planes: ps.planes as usize,
        ih: ps.size[0] as usize,
        iw: ps.size[1] as usize,
        oh: ps.out[0] as usize,
        ow: ps.out[1] as usize,
        k: u(ps.kernel),
        s: u(ps.stride),
        p: u(ps.padding),
        d: u(ps.dilation),
    };
    Ok((pool, shape))
}

/// Runs `f(plane)` for every plane, across the pool when large.
fn planes(n: usize, cost: usize, f: impl Fn(usize) + Sync) {
    super::reduce::split(n, cost, |lo, hi| (lo..hi).for_each(&f));
}

/// Max pooling in `T` (compared as its computing type): values and flat indices within each plane.
fn max_pool<T: Elem>(x: &Raw, pg: &Pool) -> Result<(Vec<T>, Vec<i64>)> {
    let xs = x.contiguous()?;
    let xv = xs.slice::<T>();
    let per = pg.oh * pg.ow;
    let mut vals = vec![T::default(); pg.planes * per];
    let mut idx = vec![0i64; pg.planes * per];
    let (pv, pi) = (Ptr(vals.as_mut_ptr()), Ptr(idx.as_mut_ptr()));
    planes(pg.planes, pg.ih * pg.iw, |c| {
        let img = &xv[c * pg.ih * pg.iw..][..pg.ih * pg.iw];
        for oy in 0..pg.oh {
            for ox in 0..pg.ow {
                // As PyTorch: the first largest value in window order, a NaN wins (the last one).
                let mut y0 = (oy * pg.s[0]) as isize - pg.p[0] as isize;
                let mut x0 = (ox * pg.s[1]) as isize - pg.p[1] as isize;
                let y1 = (y0 + ((pg.k[0] - 1) * pg.d[0]) as isize + 1).min(pg.ih as isize);
                let x1 = (x0 + ((pg.k[1] - 1) * pg.d[1]) as isize + 1).min(pg.iw as isize);
                while y0 < 0 {
                    y0 += pg.d[0] as isize;
                }
                while x0 < 0 {
                    x0 += pg.d[1] as isize;
                }
                let mut best: Option<T::Acc> = None;
                let mut at = y0 * pg.iw as isize + x0;
                let mut y = y0;
                while y < y1 {
                    let mut xx = x0;
                    while xx < x1 {
                        let i = y * pg.iw as isize + xx;
                        let v = img[i as usize].up();
                        #[allow(clippy::eq_op)]
                        let nan = v != v;
                        if nan || best.is_none_or(|b| v > b) {
                            best = Some(v);
                            at = i;
                        }
                        xx += pg.d[1] as isize;
                    }
                    y += pg.d[0] as isize;
                }
                let o = c * per + oy * pg.ow + ox;
                // SAFETY: plane `c` writes its own outputs.
                unsafe {
                    *pv.at(o as isize) = T::down(best.unwrap_or(<T::Acc as Arith>::ZERO));
                    *pi.at(o as isize) = at as i64;
                }
            }
        }
    });
    Ok((vals, idx))
}

fn max_pool_any(call: &Call, ins: &[Option<&Raw>], with_indices: bool) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (pg, shape) = pool_geometry(call, x, true)?;
    let dt = x.dtype();
    let (out, idx) = with_elem!(dt, T => {
        let (v, i) = max_pool::<T>(x, &pg)?;
        (Raw::from_vec(&shape, &v)?, Raw::from_vec(&shape, &i)?)
    });
    let out = if dt.is_float() && needs_grad(&[x]) {
        let (xshape, per_in, per_out) = (x.shape().to_vec(), pg.ih * pg.iw, pg.oh * pg.ow);
        // The indices are returned too: an in-place change of them makes this backward an error.
        let saved = idx.detached();
        record_saving(out, "MaxPool2DWithIndicesBackward0", &[x], &[&idx], false, move |g| {
            let gr = data::<f64>(g)?;
            let gv = gr.slice::<f64>();
            let iv = saved.slice::<i64>();
            let mut dx = vec![0f64; xshape.iter().product::<i64>() as usize];
            for c in 0..pg.planes {
                for o in 0..per_out {
                    dx[c * per_in + iv[c * per_out + o] as usize] += gv[c * per_out + o];
                }
            }
            Ok(vec![Some(Raw::from_vec(&xshape, &dx)?)])
        })
    } else {
        out
    };
    Ok(if with_indices { vec![out, idx] } else { vec![out] })
}

fn max_pool2d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    max_pool_any(call, ins, false)
}

fn max_pool2d_with_indices(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    max_pool_any(call, ins, true)
}

/// One output's window of an average pool: rows, columns, and the divisor.
fn avg_window(pg: &Pool, oy: usize, ox: usize, include_pad: bool, over: Option<i64>) -> ([usize; 2], [usize; 2], i64) {
    let (ih, iw) = (pg.ih as isize, pg.iw as isize);
    let y0 = (oy * pg.s[0]) as isize - pg.p[0] as isize;
    let x0 = (ox * pg.s[1]) as isize - pg.p[1] as isize;
    let y1 = (y0 + pg.k[0] as isize).min(ih + pg.p[0] as isize);
    let x1 = (x0 + pg.k[1] as isize).min(iw + pg.p[1] as isize);
    let pool = (y1 - y0) * (x1 - x0);
    let (y0, x0, y1, x1) = (y0.max(0), x0.max(0), y1.min(ih), x1.min(iw));
    let div = match over {
        Some(d) => d,
        None if include_pad => pool as i64,
        None => ((y1 - y0) * (x1 - x0)) as i64,
    };
    ([y0 as usize, y1.max(y0) as usize], [x0 as usize, x1.max(x0) as usize], div)
}

fn avg_pool2d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (pg, shape) = pool_geometry(call, x, false)?;
    let over = call.int("divisor_override");
    let dt = x.dtype();
    if !dt.is_float() && dt != DType::I64 {
        crate::bail!(E_DTYPE, "avg_pool2d: \"avg_pool2d\" not implemented for {}", dt.name());
    }
    let inc = call.bool("count_include_pad").unwrap_or(true);
    let per = pg.oh * pg.ow;
    let out = if dt == DType::I64 {
        let xr = data::<i64>(x)?;
        let xv = xr.slice::<i64>();
        let mut v = vec![0i64; pg.planes * per];
        for c in 0..pg.planes {
            for oy in 0..pg.oh {
                for ox in 0..pg.ow {
                    let (ys, xs, div) = avg_window(&pg, oy, ox, inc, over);
                    let s: i64 = (ys[0]..ys[1]).flat_map(|y| (xs[0]..xs[1]).map(move |xx| (y, xx))).fold(0i64, |a, (y, xx)| a.wrapping_add(xv[c * pg.ih * pg.iw + y * pg.iw + xx]));
                    v[c * per + oy * pg.ow + ox] = if ys[0] >= ys[1] || xs[0] >= xs[1] { 0 } else { s.wrapping_div(div) };
                }
            }
        }
        Raw::from_vec(&shape, &v)?
    } else {
        // In f64: the result is within one rounding of PyTorch's fp32 sum for these window sizes.
        let xr = data::<f64>(x)?;
        let xv = xr.slice::<f64>();
        let mut v = vec![0f64; pg.planes * per];
        let pv = Ptr(v.as_mut_ptr());
        planes(pg.planes, pg.ih * pg.iw, |c| {
            for oy in 0..pg.oh {
                for ox in 0..pg.ow {
                    let (ys, xs, div) = avg_window(&pg, oy, ox, inc, over);
                    let mut s = 0f64;
                    for y in ys[0]..ys[1] {
                        for xx in xs[0]..xs[1] {
                            s += xv[c * pg.ih * pg.iw + y * pg.iw + xx];
                        }
                    }
                    let r = if ys[0] >= ys[1] || xs[0] >= xs[1] { 0.0 } else { s / div as f64 };
                    // SAFETY: plane `c` writes its own outputs.
                    unsafe { *pv.at((c * per + oy * pg.ow + ox) as isize) = r };
                }
            }
        });
        convert(&Raw::from_vec(&shape, &v)?, dt)?
    };
    if !dt.is_float() || !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let xshape = x.shape().to_vec();
    Ok(vec![record_saving(out, "AvgPool2DBackward0", &[x], &[], false, move |g| {
        let gr = data::<f64>(g)?;
            let gv = gr.slice::<f64>();
        let mut dx = vec![0f64; xshape.iter().product::<i64>() as usize];
        for c in 0..pg.planes {
            for oy in 0..pg.oh {
                for ox in 0..pg.ow {
                    let (ys, xs, div) = avg_window(&pg, oy, ox, inc, over);
                    let share = gv[c * per + oy * pg.ow + ox] / div as f64;
                    for y in ys[0]..ys[1] {
                        for xx in xs[0]..xs[1] {
                            dx[c * pg.ih * pg.iw + y * pg.iw + xx] += share;
                        }
                    }
                }
            }
        }
        Ok(vec![Some(Raw::from_vec(&xshape, &dx)?)])
    })])
}

/// Adaptive pooling's window `[floor(o·in/out), ceil((o+1)·in/out))`.
fn adaptive(o: usize, size: usize, out: usize) -> (usize, usize) {
    (o * size / out, ((o + 1) * size).div_ceil(out))
}

fn adaptive_avg_pool2d(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let (os, shape) = adaptive_shape(call, x.shape())?;
    let sh = x.shape();
    let r = sh.len();
    if !x.dtype().is_float() {
        if shape.iter().product::<i64>() == 0 {
            // As PyTorch: an empty result before the dtype is looked at.
            return Ok(vec![Raw::zeros(&shape, x.dtype())?]);
        }
        crate::bail!(E_DTYPE, "adaptive_avg_pool2d: \"adaptive_avg_pool2d\" not implemented for {}", x.dtype().name());
    }
    let (ih, iw, oh, ow) = (sh[r - 2] as usize, sh[r - 1] as usize, os[0] as usize, os[1] as usize);
    let nplanes = sh[..r - 2].iter().product::<i64>() as usize;
    let xr = data::<f64>(x)?;
        let xv = xr.slice::<f64>();
    let mut v = vec![0f64; nplanes * oh * ow];
    for c in 0..nplanes {
        for oy in 0..oh {
            let (y0, y1) = adaptive(oy, ih, oh);
            for ox in 0..ow {
                let (x0, x1) = adaptive(ox, iw, ow);
                let s: f64 = (y0..y1).map(|y| xv[c * ih * iw + y * iw + x0..c * ih * iw + y * iw + x1].iter().sum::<f64>()).sum();
                v[(c * oh + oy) * ow + ox] = s / ((y1 - y0) * (x1 - x0)) as f64;
            }
        }
    }
    let out = convert(&Raw::from_vec(&shape, &v)?, x.dtype())?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    let xshape = sh.to_vec();
    Ok(vec![record_saving(out, "AdaptiveAvgPool2DBackward0", &[x], &[], false, move |g| {
        let gr = data::<f64>(g)?;
            let gv = gr.slice::<f64>();
        let mut dx = vec![0f64; xshape.iter().product::<i64>() as usize];
        for c in 0..nplanes {
            for oy in 0..oh {
                let (y0, y1) = adaptive(oy, ih, oh);
                for ox in 0..ow {
                    let (x0, x1) = adaptive(ox, iw, ow);
                    let share = gv[(c * oh + oy) * ow + ox] / ((y1 - y0) * (x1 - x0)) as f64;
                    for y in y0..y1 {
                        dx[c * ih * iw + y * iw + x0..c * ih * iw + y * iw + x1].iter_mut().for_each(|d| *d += share);
                    }
                }
            }
        }
        Ok(vec![Some(Raw::from_vec(&xshape, &dx)?)])
    })])
}

// ------------------------------------------------------------ unfold, fold

/// The products' geometry of `unfold`'s image and columns: one group, the
/// blocks as the flat side's positions.
fn blocks_geo(b: &Blocks) -> Geo {
    let u = |v: [i64; 2]| [v[0] as usize, v[1] as usize];
    Geo {
        n: b.n as usize,
        groups: 1,
        fc: 1,
        ic: b.c as usize,
        ih: b.size[0] as usize,
        iw: b.size[1] as usize,
        oh: b.blocks[0] as usize,
        ow: b.blocks[1] as usize,
        kh: b.kernel[0] as usize,
        kw: b.kernel[1] as usize,
        s: u(b.stride),
        p: u(b.padding),
        d: u(b.dilation),
    }
}

/// Each image's columns, `[N, C·kh·kw, L]` (the convolutions' im2col).
fn unfold_raw(x: &Raw, b: &Blocks) -> Result<Raw> {
    let g = blocks_geo(b);
    let xc = x.contiguous()?;
    let out = Raw::empty(&b.cols_shape(), x.dtype())?;
    let (isz, csz) = (g.ic * g.ih * g.iw, g.k() * g.l());
    if out.numel() > 0 {
        with_elem!(x.dtype(), T => {
            let (src, dst) = (xc.slice::<T>(), out.slice_mut::<T>());
            for (img, cols) in src.chunks_exact(isz).zip(dst.chunks_exact_mut(csz)) {
                im2col(img, &g, cols, 0, g.oh);
            }
        });
    }
    Ok(out)
}

/// The columns summed back into images, `[N, C, H, W]` (col2im). A bf16 or
/// fp16 sum rounds after every addition, as PyTorch's `col2im` adds in
/// the tensor's own dtype.
fn fold_raw(cols: &Raw, b: &Blocks) -> Result<Raw> {
    fn sum<T: Num>(cols: &Raw, g: &Geo, shape: &[i64], round: fn(T) -> T) -> Result<Raw> {
        let c = data::<T>(cols)?;
        let (isz, csz) = (g.ic * g.ih * g.iw, g.k() * g.l());
        let mut img = vec![T::default(); g.n * isz];
        if isz > 0 && csz > 0 {
            for (x, cs) in img.chunks_exact_mut(isz).zip(c.slice::<T>().chunks_exact(csz)) {
                col2im(cs, g, x, 0, g.oh, round);
            }
        }
        Raw::from_vec::<T>(shape, &img)
    }
    let (g, shape, dt) = (blocks_geo(b), b.image_shape(), cols.dtype());
    // (bool sums as f32 and converts back: nonzero is true, col2im's `+=` in bool.)
    let out = match dt {
        DType::F64 => sum::<f64>(cols, &g, &shape, |v| v)?,
        DType::BF16 => sum::<f32>(cols, &g, &shape, |v| half::bf16::from_f32(v).to_f32())?,
        DType::F16 => sum::<f32>(cols, &g, &shape, |v| half::f16::from_f32(v).to_f32())?,
        _ => sum::<f32>(cols, &g, &shape, |v| v)?,
    };
    convert(&out, dt)
}

/// `F.unfold(input, kernel_size, dilation, padding, stride)`; its gradient is `fold`.
fn unfold(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let b = unfold_blocks(call, x.shape())?;
    let out = unfold_raw(x, &b)?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    Ok(vec![record(out, "Im2ColBackward0", &[x], move |g| Ok(vec![Some(fold_raw(g, &b)?)]))])
}

/// `F.fold(input, output_size, kernel_size, dilation, padding, stride)`; its gradient is `unfold`.
fn fold(call: &Call, ins: &[Option<&Raw>]) -> Result<Vec<Raw>> {
    let x = input(ins, 0);
    let b = fold_blocks(call, x.shape())?;
    let out = fold_raw(x, &b)?;
    if !needs_grad(&[x]) {
        return Ok(vec![out]);
    }
    Ok(vec![record(out, "Col2ImBackward0", &[x], move |g| Ok(vec![Some(unfold_raw(g, &b)?)]))])
}

pub const KERNELS: &[(&str, Kernel)] = &[
    ("unfold", unfold),
    ("fold", fold),
    ("conv1d", conv1d),
    ("conv1d.padding", conv1d),
    ("conv2d", conv2d),
    ("conv2d.padding", conv2d),
    ("conv_transpose2d.input", conv_transpose2d),
    ("max_pool2d", max_pool2d),
    ("max_pool2d_with_indices", max_pool2d_with_indices),
    ("avg_pool2d", avg_pool2d),
    ("adaptive_avg_pool2d", adaptive_avg_pool2d),
];
