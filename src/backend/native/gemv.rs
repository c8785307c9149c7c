//! fp32 products with one output row or column (`[1, k] x [k, n]` and
//! `[m, k] x [k, 1]`). A decoder step at batch 1 is made of them: every
//! linear layer and the head. Each weight element is read once for 2 flops,
//! so the memory's read rate bounds them.
//!
//! The `gemm` crate's path for these shapes read GPT-2-small's weights at
//! 9.1-13.4 GB/s, where a plain AVX2 sum over the same bytes read 11-14 GB/s
//! and these loops 10.5-14.7 (2-vCPU Zen 3, one thread, side by side in one
//! run). So they are written by hand. Each reads whole weight rows front to
//! back, the access the hardware prefetchers follow: the dot form four rows
//! at a time from four parts of the weight, the axpy form four adjacent
//! rows. (A software prefetch 1-4 KiB ahead made them slower there.)
//!
//! Each output is summed in one fixed order, whatever the thread split.

use super::kernels::Ptr;
use super::par;

/// `y[j·ys] = Σ_p x[p·xs] · w[p·ks + j·ns]` for `j < n`, `p < k`, on the
/// calling thread and the pool when `work` is worth splitting.
/// Returns false, having written nothing, where the CPU lacks AVX2 and FMA
/// or `w` is contiguous along neither dim: the caller then runs its GEMM.
///
/// # Safety
/// The pointers and strides describe valid views of these sizes; `y` does
/// not overlap `x` or `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemv(n: usize, k: usize, y: *mut f32, ys: isize, x: *const f32, xs: isize, w: *const f32, ks: isize, ns: isize, work: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use super::simd::{level, Level};
        if level() < Level::Avx2 || (ks != 1 && ns != 1) || n == 0 || k == 0 {
            return false;
        }
        // The loops read `x` contiguous: a strided one is gathered first.
        let gathered: Vec<f32> = if xs == 1 { Vec::new() } else { (0..k).map(|p| *x.offset(p as isize * xs)).collect() };
        let x = if xs == 1 { x } else { gathered.as_ptr() };
        let mut staged = Vec::new();
        let out = if ys == 1 {
            y
        } else {
            staged.resize(n, 0f32);
            staged.as_mut_ptr()
        };
        let threads = if par::parallel(work) { par::threads() } else { 1 };
        // Parts of whole rows, or of whole 64-column blocks (a row's read
        // stays a few cache lines long).
        let align = if ks == 1 { 1 } else { 64 };
        let step = n.div_ceil(threads).next_multiple_of(align);
        let (o, xp, wp) = (Ptr(out), Ptr(x as *mut f32), Ptr(w as *mut f32));
        par::for_each(n.div_ceil(step), &|i| {
            let (o, xp, wp) = (o, xp, wp);
            let (lo, hi) = (i * step, n.min((i + 1) * step));
            // SAFETY: forwarded from the caller; parts write disjoint ranges of `out`.
            unsafe {
                if ks == 1 {
                    avx2::dots(k, hi - lo, o.0.add(lo), xp.0, wp.0.offset(lo as isize * ns), ns);
                } else {
                    avx2::axpys(k, hi - lo, o.0.add(lo), xp.0, wp.0.add(lo), ks);
                }
            }
        });
        if ys != 1 {
            for (j, v) in staged.iter().enumerate() {
                *y.offset(j as isize * ys) = *v;
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (n, k, y, ys, x, xs, w, ks, ns, work);
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Weight rows per pass of the axpy form.
    const ROWS: usize = 4;
    /// Columns of `y` kept in L1 while the axpy form runs down the rows.
    const CHUNK: usize = 4096;

    /// Rows of the dot form read at once, each from its own part of the
    /// weight (`n / STREAMS` rows apart).
    const STREAMS: usize = 4;

    /// `y[j] = dot(x, w[j·ns ..][..k])` for `j < n`: the weight's rows are
    /// the outputs (`nn.Linear`'s `[out, in]`, a head tied to the embedding).
    /// Four rows at a time, each from a different quarter of the rows, so
    /// that the weight is read as four sequential streams far apart: one
    /// core read GPT-2's tied head (50257 x 768) at 12.7-16.7 GB/s so,
    /// against 10.3-12.7 one row at a time and 11.9-13.6 two at a time (four
    /// runs of a C copy of these loops, the forms alternating in each;
    /// 2-vCPU Zen 3, 2 MiB pages). Four adjacent rows (one stream) were
    /// slower than one. Each row's sum is the one-row sum: the same bits
    /// whatever the grouping.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dots(k: usize, n: usize, y: *mut f32, x: *const f32, w: *const f32, ns: isize) {
        let q = n / STREAMS;
        for j in 0..q {
            let rows: [usize; STREAMS] = std::array::from_fn(|s| j + s * q);
            let sums = dot_rows(k, x, rows.map(|r| w.offset(r as isize * ns)));
            for (r, v) in rows.into_iter().zip(sums) {
                *y.add(r) = v;
            }
        }
        for j in q * STREAMS..n {
            *y.add(j) = dot_rows(k, x, [w.offset(j as isize * ns)])[0];
        }
    }

    /// The dot products of `x` with each of `R` rows, each summed as a
    /// lone row would be: two accumulators over 16-wide steps, one 8-wide
    /// step, the horizontal sum, then the scalar tail.
    #[inline(always)]
    unsafe fn dot_rows<const R: usize>(k: usize, x: *const f32, row: [*const f32; R]) -> [f32; R] {
        let mut lo = [_mm256_setzero_ps(); R];
        let mut hi = [_mm256_setzero_ps(); R];
        let mut p = 0;
        while p + 16 <= k {
            let (x0, x1) = (_mm256_loadu_ps(x.add(p)), _mm256_loadu_ps(x.add(p + 8)));
            for i in 0..R {
                lo[i] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(row[i].add(p)), lo[i]);
                hi[i] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(row[i].add(p + 8)), hi[i]);
            }
            p += 16;
        }
        if p + 8 <= k {
            let x0 = _mm256_loadu_ps(x.add(p));
            for i in 0..R {
                lo[i] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(row[i].add(p)), lo[i]);
            }
            p += 8;
        }
        // Plain loops, not closures: a closure would not inherit the
        // caller's target features, and the intrinsics would not inline.
        let mut out = [0f32; R];
        for i in 0..R {
            let mut s = hsum(_mm256_add_ps(lo[i], hi[i]));
            for q in p..k {
                s = (*x.add(q)).mul_add(*row[i].add(q), s);
            }
            out[i] = s;
        }
        out
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }

    /// `y[..n] = Σ_p x[p] · w[p·ks ..][..n]`: the weight's rows are the
    /// inputs (GPT-2's Conv1D `[in, out]`, `x @ w`). `y` is summed in place,
    /// four rows at a time, each column in the order of `p`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpys(k: usize, n: usize, y: *mut f32, x: *const f32, w: *const f32, ks: isize) {
        let mut c0 = 0;
        while c0 < n {
            let cl = CHUNK.min(n - c0);
            let (y, w) = (y.add(c0), w.add(c0));
            std::ptr::write_bytes(y, 0, cl);
            let mut p = 0;
            while p + ROWS <= k {
                add_rows::<ROWS>(cl, y, x.add(p), w.offset(p as isize * ks), ks);
                p += ROWS;
            }
            while p < k {
                add_rows::<1>(cl, y, x.add(p), w.offset(p as isize * ks), ks);
                p += 1;
            }
            c0 += cl;
        }
    }

    /// `y[..n] += Σ_{i<R} x[i] · w[i·ks ..][..n]`, each column's terms added
    /// one after the other: the same bits as `R` passes of one row.
    #[inline(always)]
    unsafe fn add_rows<const R: usize>(n: usize, y: *mut f32, x: *const f32, w: *const f32, ks: isize) {
        let row: [*const f32; R] = std::array::from_fn(|i| w.offset(i as isize * ks));
        let xs: [f32; R] = std::array::from_fn(|i| *x.add(i));
        let xb: [__m256; R] = std::array::from_fn(|i| _mm256_set1_ps(xs[i]));
        let mut j = 0;
        while j + 8 <= n {
            let mut acc = _mm256_loadu_ps(y.add(j));
            for i in 0..R {
                acc = _mm256_fmadd_ps(xb[i], _mm256_loadu_ps(row[i].add(j)), acc);
            }
            _mm256_storeu_ps(y.add(j), acc);
            j += 8;
        }
        for j in j..n {
            let mut s = *y.add(j);
            for i in 0..R {
                s = xs[i].mul_add(*row[i].add(j), s);
            }
            *y.add(j) = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sums in f64: every form and split is within fp32 rounding of it.
    fn reference(n: usize, k: usize, x: &[f32], w: &[f32], ks: usize, ns: usize) -> Vec<f64> {
        (0..n).map(|j| (0..k).map(|p| x[p] as f64 * w[p * ks + j * ns] as f64).sum()).collect()
    }

    #[test]
    fn both_forms_match_the_sums_at_odd_sizes_and_strides() {
        let mut seed = 7u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for &(n, k) in &[(1, 1), (3, 5), (4, 16), (7, 17), (13, 31), (64, 9), (130, 77), (2100, 40), (5, 300)] {
            let x: Vec<f32> = (0..2 * k).map(|_| rnd()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            for (ks, ns) in [(n, 1), (1, k)] {
                let want = reference(n, k, &x.iter().step_by(2).copied().collect::<Vec<_>>(), &w, ks, ns);
                for work in [0, usize::MAX] {
                    let mut y = vec![f32::NAN; 3 * n];
                    // SAFETY: the views cover the buffers.
                    let done = unsafe { gemv(n, k, y.as_mut_ptr(), 3, x.as_ptr(), 2, w.as_ptr(), ks as isize, ns as isize, work) };
                    if !done {
                        assert!(super::super::simd::level() < super::super::simd::Level::Avx2);
                        return;
                    }
                    for j in 0..n {
                        let (got, want) = (y[3 * j] as f64, want[j]);
                        assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()) * (k as f64).sqrt(), "n {n} k {k} ks {ks} j {j}: {got} vs {want}");
                        assert!(y[3 * j + 1].is_nan() && y[3 * j + 2].is_nan(), "wrote between the outputs");
                    }
                }
            }
        }
    }

    #[test]
    fn a_split_across_threads_gives_the_same_bits() {
        let (n, k) = (1000, 300);
        let x: Vec<f32> = (0..k).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.011).cos()).collect();
        for (ks, ns) in [(n as isize, 1), (1, k as isize)] {
            let (mut one, mut many) = (vec![0f32; n], vec![0f32; n]);
            // SAFETY: the views cover the buffers.
            unsafe {
                if !gemv(n, k, one.as_mut_ptr(), 1, x.as_ptr(), 1, w.as_ptr(), ks, ns, 0) {
                    return;
                }
                gemv(n, k, many.as_mut_ptr(), 1, x.as_ptr(), 1, w.as_ptr(), ks, ns, usize::MAX);
            }
            assert_eq!(one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), many.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            // Each output alone (the dot form's rows grouped differently): the same bits again.
            for j in 0..n {
                let mut alone = 0f32;
                // SAFETY: one output of the same view.
                unsafe { gemv(1, k, &mut alone, 1, x.as_ptr(), 1, w.as_ptr().offset(j as isize * ns), ks, ns, 0) };
                assert_eq!(alone.to_bits(), one[j].to_bits(), "output {j}");
            }
        }
    }
}
