//! `torch.matmul` on the `gemm` crate (fp32 on AVX2-only CPUs on `sgemm`,
//! one output row or column on `gemv`): 1-D operands are promoted, batch
//! dims broadcast, any strides are read in place (no copies for transposed
//! views). bf16/fp16 compute in f32 and round once, as PyTorch's CPU
//! kernels do; integers use a plain wrapping loop.

use super::autograd::{needs_grad, record_saving};
use super::elem::{with_elem, Arith, Elem};
use super::kernels::expand_strides;
use super::kernels::Ptr;
use super::ops::sum_to;
use super::par;
use super::tensor::{numel, Raw};
use crate::dtype::DType;
use crate::error::Result;
use crate::json::write_int_list as fmt;

/// `a` `[..., m, k]` times `b` `[..., k, n]` (both at least 2-D, same dtype), batch dims broadcast.
fn bmm(a: &Raw, b: &Raw) -> Result<Raw> {
    let (ra, rb) = (a.dim(), b.dim());
    let (m, k, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 1]);
    if b.shape()[rb - 2] != k {
        crate::bail!(E_SHAPE, "matmul {} x {}", fmt(a.shape()), fmt(b.shape()));
    }
    let batch = crate::vocab::broadcast(&a.shape()[..ra - 2], &b.shape()[..rb - 2])
        .ok_or_else(|| crate::err!(E_SHAPE, "matmul {} x {}", fmt(a.shape()), fmt(b.shape())))?;
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let dt = a.dtype();
    let out = Raw::empty(&shape, dt)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    // Per-batch offsets of each operand, from its strides broadcast over the batch.
    let bshape_a: Vec<i64> = batch.iter().copied().chain([m, k]).collect();
    let bshape_b: Vec<i64> = batch.iter().copied().chain([k, n]).collect();
    let (sa, sb) = (expand_strides(a, &bshape_a), expand_strides(b, &bshape_b));
    let nb = numel(&batch);
    let offsets = |st: &[i64], i: usize| -> isize {
        let mut rest = i as i64;
        let mut off = 0i64;
        for (d, &size) in batch.iter().enumerate().rev() {
            off += (rest % size) * st[d];
            rest /= size;
        }
        off as isize
    };
    let (a_rs, a_cs, b_rs, b_cs) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 2], sb[sb.len() - 1]);
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let work = nb * m * n * k.max(1);
    // A batch of small products (attention's heads) runs one product per
    // task, each single-threaded: splitting every small product across the
    // pool would cost more in wake-ups than it saves.
    let across = nb > 1 && par::parallel(work);
    with_elem!(dt, T => {
        let (pa, pb, po) = (Ptr(a.data_ptr() as *mut T), Ptr(b.data_ptr() as *mut T), Ptr(out.data_ptr() as *mut T));
        let one = |i: usize, work: usize| {
            // The whole `Ptr`s, not their fields (a closure would capture the bare pointers).
            let (pa, pb, po) = (pa, pb, po);
            let (oa, ob) = (offsets(&sa, i), offsets(&sb, i));
            // SAFETY: every offset and stride comes from the operands' own views;
            // `out` is fresh and each product writes its own block of it.
            unsafe {
                gemm_one::<T>(
                    m, n, k,
                    po.0.add(i * m * n), n as isize,
                    pa.0.offset(oa), a_rs as isize, a_cs as isize,
                    pb.0.offset(ob), b_rs as isize, b_cs as isize,
                    work,
                )
            }
        };
        if across {
            par::for_each(nb, &|i| one(i, 0));
        } else {
            (0..nb).for_each(|i| one(i, work));
        }
    });
    Ok(out)
}

/// One `[m,k] x [k,n]` product into a contiguous `dst` with row stride `ld`.
///
/// # Safety
/// The pointers and strides describe valid views of these sizes.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_one<T: Elem>(
    m: usize, n: usize, k: usize,
    dst: *mut T, ld: isize,
    a: *const T, a_rs: isize, a_cs: isize,
    b: *const T, b_rs: isize, b_cs: isize,
    work: usize,
) {
    use std::any::TypeId;
    let t = TypeId::of::<T>();
    if t == TypeId::of::<f32>() {
        return f32_gemm(m, n, k, dst.cast(), ld, a.cast(), a_rs, a_cs, b.cast(), b_rs, b_cs, work);
    }
    if t == TypeId::of::<f64>() {
        return real_gemm::<f64>(m, n, k, dst.cast(), ld, a.cast(), a_rs, a_cs, b.cast(), b_rs, b_cs, work);
    }
    // Complex elements are (re, im) pairs laid out as gemm's num-complex types.
    if t == TypeId::of::<super::elem::C32>() {
        return real_gemm::<gemm::c32>(m, n, k, dst.cast(), ld, a.cast(), a_rs, a_cs, b.cast(), b_rs, b_cs, work);
    }
    if t == TypeId::of::<super::elem::C64>() {
        return real_gemm::<gemm::c64>(m, n, k, dst.cast(), ld, a.cast(), a_rs, a_cs, b.cast(), b_rs, b_cs, work);
    }
    if t == TypeId::of::<half::bf16>() && m >= super::bf16gemm::AMX_MIN_M && a_rs >= 0 && a_cs >= 0 && b_rs >= 0 && b_cs >= 0 && super::bf16gemm::amx_available() {
        return bf16_gemm(m, n, k, dst.cast(), ld, a.cast(), a_rs as usize, a_cs as usize, b.cast(), b_rs as usize, b_cs as usize, work);
    }
    if T::DT.is_float() {
        // bf16 / fp16: widen both operands to f32, multiply, round once.
        let widen = |p: *const T, rs: isize, cs: isize, r: usize, c: usize| -> Vec<f32> {
            let mut v = Vec::with_capacity(r * c);
            for i in 0..r {
                for j in 0..c {
                    v.push(super::elem::cast::<T, f32>(*p.offset(i as isize * rs + j as isize * cs)));
                }
            }
            v
        };
        let (wa, wb) = (widen(a, a_rs, a_cs, m, k), widen(b, b_rs, b_cs, k, n));
        let mut wd = vec![0f32; m * n];
        f32_gemm(m, n, k, wd.as_mut_ptr(), n as isize, wa.as_ptr(), k as isize, 1, wb.as_ptr(), n as isize, 1, work);
        for i in 0..m {
            for j in 0..n {
                *dst.offset(i as isize * ld + j as isize) = super::elem::cast::<f32, T>(wd[i * n + j]);
            }
        }
        return;
    }
    for i in 0..m {
        for j in 0..n {
            let mut s = <T as Elem>::Acc::ZERO;
            for p in 0..k {
                let x = (*a.offset(i as isize * a_rs + p as isize * a_cs)).up();
                let y = (*b.offset(p as isize * b_rs + j as isize * b_cs)).up();
                s = s.add(x.mul(y));
            }
            *dst.offset(i as isize * ld + j as isize) = T::down(s);
        }
    }
}

/// bf16 on AMX tiles (`bf16gemm`): bf16 products summed in fp32, rounded
/// once, as the widening path below computes them, at 1.8x the fp32 GEMM's
/// rate at 1024^3 on one core (`make bench`). Only where AMX runs: this
/// CPU's `vdpbf16ps` issues at half the FMA rate, which loses to widening.
///
/// # Safety
/// As `gemm_one`, with non-negative strides.
#[allow(clippy::too_many_arguments)]
unsafe fn bf16_gemm(
    m: usize, n: usize, k: usize,
    dst: *mut half::bf16, ld: isize,
    a: *const half::bf16, a_rs: usize, a_cs: usize,
    b: *const half::bf16, b_rs: usize, b_cs: usize,
    work: usize,
) {
    use super::bf16gemm::{gemm_bf16_packed_with, Kernel, PackedBf16};
    let extent = |r: usize, c: usize, rs: usize, cs: usize| if r == 0 || c == 0 { 0 } else { (r - 1) * rs + (c - 1) * cs + 1 };
    // SAFETY: the caller's views cover these extents.
    let (sa, sb) = unsafe {
        (std::slice::from_raw_parts(a, extent(m, k, a_rs, a_cs)), std::slice::from_raw_parts(b, extent(k, n, b_rs, b_cs)))
    };
    let pb = PackedBf16::pack(sb, b_rs, b_cs, k, n);
    let mut c = vec![0f32; m * n];
    let threads = if par::parallel(work) { par::threads() } else { 1 };
    gemm_bf16_packed_with(m, sa, a_rs, a_cs, &pb, &mut c, threads, &|t, f| par::for_each(t, f), Kernel::Best);
    for i in 0..m {
        for j in 0..n {
            *dst.offset(i as isize * ld + j as isize) = super::elem::bf16_from_f32(c[i * n + j]);
        }
    }
}

/// fp32: a product with one output row or column is a matrix-vector
/// product (`gemv`), anything else a GEMM.
///
/// # Safety
/// As `gemm_one`.
#[allow(clippy::too_many_arguments)]
unsafe fn f32_gemm(
    m: usize, n: usize, k: usize,
    dst: *mut f32, ld: isize,
    a: *const f32, a_rs: isize, a_cs: isize,
    b: *const f32, b_rs: isize, b_cs: isize,
    work: usize,
) {
    use super::gemv::gemv;
    // One row: y = a[0, :] · b. One column: yᵀ = b[:, 0]ᵀ · aᵀ, the output's column down `ld`.
    let done = k > 0
        && ((m == 1 && gemv(n, k, dst, 1, a, a_cs, b, b_rs, b_cs, work))
            || (n == 1 && gemv(m, k, dst, ld, b, b_rs, a, a_cs, a_rs, work)));
    if !done {
        real_gemm::<f32>(m, n, k, dst, ld, a, a_rs, a_cs, b, b_rs, b_cs, work);
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn real_gemm<T: 'static + Copy + Default + Send + Sync + num_traits::Zero + num_traits::One>(
    m: usize, n: usize, k: usize,
    dst: *mut T, ld: isize,
    a: *const T, a_rs: isize, a_cs: isize,
    b: *const T, b_rs: isize, b_cs: isize,
    work: usize,
) {
    let threads = if par::parallel(work) { par::threads() } else { 1 };
    // Split across the pool by output columns (each part packs only its own
    // columns of `b`), or by rows when the product is tall and narrow; each
    // part is one single-threaded product.
    let by_cols = n >= m || n >= 64 * threads;
    let (len, align) = if by_cols { (n, 16) } else { (m, 8) };
    let step = len.div_ceil(threads).next_multiple_of(align);
    let parts = len.div_ceil(step);
    let (d, a, b) = (Ptr(dst), Ptr(a as *mut T), Ptr(b as *mut T));
    let part = |i: usize| {
        let (d, a, b) = (d, a, b);
        let (lo, hi) = (i * step, len.min((i + 1) * step));
        let (d, a, b, m, n) = if by_cols {
            (d.0.add(lo), a.0, b.0.offset(lo as isize * b_cs), m, hi - lo)
        } else {
            (d.0.offset(lo as isize * ld), a.0.offset(lo as isize * a_rs), b.0, hi - lo, n)
        };
        // SAFETY: forwarded from the caller; parts write disjoint blocks of `dst`.
        unsafe { leaf(m, n, k, d, ld as usize, false, a, a_rs, a_cs, b, b_rs, b_cs) }
    };
    par::for_each(parts, &part);
}

/// `dst (+)= a · b` on this thread, fp32 on `sgemm` where it runs, else on
/// the `gemm` crate; `dst` row-major with row stride `ld`, added to when
/// `acc`. The one product under `matmul`'s parts and the convolutions'.
///
/// # Safety
/// The pointers and strides describe valid views of these sizes; `dst`
/// overlaps neither input.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn leaf<T: 'static + Copy + Default + Send + Sync + num_traits::Zero + num_traits::One>(
    m: usize, n: usize, k: usize, dst: *mut T, ld: usize, acc: bool, a: *const T, a_rs: isize, a_cs: isize, b: *const T, b_rs: isize, b_cs: isize,
) {
    if k == 0 {
        if !acc {
            for i in 0..m {
                std::slice::from_raw_parts_mut(dst.add(i * ld), n).fill(T::zero());
            }
        }
        return;
    }
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && super::sgemm::sgemm(m, n, k, dst.cast(), ld, acc, a.cast(), a_rs, a_cs, b.cast(), b_rs, b_cs)
    {
        return;
    }
    // gemm: dst = alpha·dst + beta·a·b, dst read only when `acc`.
    gemm::gemm(m, n, k, dst, 1, ld as isize, acc, a, a_cs, a_rs, b, b_cs, b_rs, T::one(), T::one(), false, false, false, gemm::Parallelism::None)
}

/// `torch.matmul` without recording.
pub fn matmul_plain(a: &Raw, b: &Raw) -> Result<Raw> {
    if a.dim() == 0 || b.dim() == 0 {
        crate::bail!(E_SHAPE, "matmul: both arguments need at least 1 dim, got {} x {}", fmt(a.shape()), fmt(b.shape()));
    }
    // Shapes before dtypes, as PyTorch checks them.
    if !crate::vocab::matmul_fits(a.shape(), b.shape()) {
        crate::bail!(E_SHAPE, "matmul {} x {}", fmt(a.shape()), fmt(b.shape()));
    }
    if a.dtype() != b.dtype() {
        crate::bail!(E_DTYPE, "matmul: inputs are {} and {}", a.dtype().name(), b.dtype().name());
    }
    if a.dtype() == DType::Bool {
        // PyTorch's CPU products return an empty or k = 0 result (all false)
        // before dispatching on the dtype, and refuse bool otherwise.
        if a.numel() > 0 && b.numel() > 0 {
            crate::bail!(E_DTYPE, "matmul is not implemented for bool");
        }
        let u8 = |t: &Raw| super::ops::convert(t, DType::U8);
        return super::ops::convert(&matmul_plain(&u8(a)?, &u8(b)?)?, DType::Bool);
    }
    let a2 = if a.dim() == 1 { unsqueeze(a, 0) } else { a.detached() };
    let b2 = if b.dim() == 1 { unsqueeze(b, 1) } else { b.detached() };
    let out = bmm_folded(&a2, &b2)?;
    let mut shape = out.shape().to_vec();
    if b.dim() == 1 {
        shape.pop();
    }
    if a.dim() == 1 {
        shape.remove(shape.len() - if b.dim() == 1 { 1 } else { 2 });
    }
    Ok(out.view_as(shape.clone(), super::tensor::contiguous_strides(&shape), 0))
}

/// `bmm`, with the batch dims of `a` folded into its rows when `b` is a
/// matrix: one `[batch·m, k] x [k, n]` product instead of one per batch
/// entry (`torch.matmul` folds the same way), so `b` is packed once.
fn bmm_folded(a: &Raw, b: &Raw) -> Result<Raw> {
    let r = a.dim();
    if r <= 2 || b.dim() != 2 || a.numel() == 0 || b.shape()[0] != a.shape()[r - 1] {
        return bmm(a, b);
    }
    let out = bmm(&super::ops::reshape(a, &[-1, a.shape()[r - 1]])?, b)?;
    let mut shape = a.shape()[..r - 1].to_vec();
    shape.push(b.shape()[1]);
    Ok(out.view_as(shape.clone(), super::tensor::contiguous_strides(&shape), 0))
}

fn unsqueeze(t: &Raw, at: usize) -> Raw {
    let (mut s, mut st) = (t.shape().to_vec(), t.strides().to_vec());
    let stride = if at < s.len() { s[at] * st[at] } else { 1 };
    s.insert(at, 1);
    st.insert(at, stride);
    t.view_as(s, st, t.0.offset)
}

/// The last two dims swapped (a view).
fn mt(t: &Raw) -> Raw {
    let (mut s, mut st) = (t.shape().to_vec(), t.strides().to_vec());
    let r = s.len();
    s.swap(r - 2, r - 1);
    st.swap(r - 2, r - 1);
    t.view_as(s, st, t.0.offset)
}

pub fn matmul(a: &Raw, b: &Raw) -> Result<Raw> {
    let out = matmul_plain(a, b)?;
    if !needs_grad(&[a, b]) {
        return Ok(out);
    }
    let (sa, sb) = (a.detached(), b.detached());
    let (ga, gb) = (a.requires_grad(), b.requires_grad());
    Ok(record_saving(out, "MmBackward", &[a, b], &[a, b], false, move |g| {
        // In the promoted [.., m, k] x [.., k, n] form, then back to each input's shape.
        let a2 = if sa.dim() == 1 { unsqueeze(&sa, 0) } else { sa.clone() };
        let b2 = if sb.dim() == 1 { unsqueeze(&sb, 1) } else { sb.clone() };
        let mut g2 = g.detached();
        if sb.dim() == 1 {
            g2 = unsqueeze(&g2, g2.dim());
        }
        if sa.dim() == 1 {
            g2 = unsqueeze(&g2, g2.dim() - 1);
        }
        // Complex operands enter conjugated (g·Bᴴ, Aᴴ·g); real ones are their own conjugates.
        let (a2, b2) = (super::opk::conj_plain(&a2)?, super::opk::conj_plain(&b2)?);
        let da = if ga {
            let d = bmm_folded(&g2, &mt(&b2))?;
            let d = sum_to(&d, a2.shape())?;
            Some(super::ops::reshape(&d, sa.shape())?)
        } else {
            None
        };
        let db = if gb {
            let (r, k, n) = (a2.dim(), a2.shape()[a2.dim() - 1], g2.shape()[g2.dim() - 1]);
            let d = if b2.dim() == 2 && r > 2 && a2.numel() > 0 {
                // A matrix used by every batch entry: its gradient is one
                // product over all of their rows, `a2ᵀ g2` with the batch folded in.
                bmm(&mt(&super::ops::reshape(&a2, &[-1, k])?), &super::ops::reshape(&g2, &[-1, n])?)?
            } else {
                sum_to(&bmm(&mt(&a2), &g2)?, b2.shape())?
            };
            Some(super::ops::reshape(&d, sb.shape())?)
        } else {
            None
        };
        Ok(vec![da, db])
    }))
}

/// `x @ w + b` (`w` is `[in, out]`).
pub fn linear(x: &Raw, w: &Raw, b: Option<&Raw>) -> Result<Raw> {
    if let Some(b) = b.filter(|b| b.dtype() != x.dtype()) {
        crate::bail!(E_DTYPE, "linear: inputs are {} and {}", x.dtype().name(), b.dtype().name());
    }
    let y = matmul(x, w)?;
    match b {
        Some(b) => super::ops::binary(crate::vocab::kinds::Binary::Add, &y, b),
        None => Ok(y),
    }
}

