//! fp32 GEMM for CPUs whose widest vectors are AVX2 + FMA (AMD Zen 2/3,
//! Intel before AVX-512): `dst (+)= a · b` on one thread.
//!
//! Written by hand because the `gemm` crate's AVX2 path ran 512^3 at 61-75%
//! of the measured FMA peak on a 2-vCPU Zen 3 (peak and product alternating
//! in one process), where this one runs at 80-87% (the tile alone, its
//! operands in L1, at 87-94%). It is the blocking of BLIS (Goto's
//! algorithm): a `KC x NC` block of `b` packed into 16-column panels, an
//! `MC x KC` block of `a` in 6-row panels that stay in L2 (read in place
//! when `a` is row-major, else packed), and a 6 x 16 register tile (12 ymm
//! accumulators, enough to cover two FMA pipes of latency 4) that runs
//! `KC` steps of two loads, six broadcasts and twelve FMAs.
//!
//! On AVX-512 CPUs the `gemm` crate's 16-lane kernels are used instead
//! (`sgemm` returns false); this kernel's 8 lanes would halve their rate.
//!
//! Each output is summed in one fixed order (`p` ascending within each `KC`
//! block, the blocks in order), whatever the thread split of the caller.

use std::cell::RefCell;

const MR: usize = 6;
const NR: usize = 16;
/// `KC x NR` of `b` (32 KiB) is the tile's operand that stays in L1; `a`
/// streams from L2. 512 against 256 (with `MC` 144): 2-5 points of the peak
/// at 512^3, and `c` read and written once instead of twice.
const KC: usize = 512;
/// `MC x KC` of `a` (144 KiB) stays in a 512 KiB L2 beside `b`'s panels.
const MC: usize = 72;
/// `KC x NC` of `b` (6 MiB) stays in L3.
const NC: usize = 3072;

thread_local! {
    /// The packed blocks of `a` and `b`, kept per thread between calls.
    static PACKED: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `dst[i·ld + j] (+)= Σ_p a[i·a_rs + p·a_cs] · b[p·b_rs + j·b_cs]` for
/// `i < m`, `j < n`, `p < k`, adding to `dst` when `acc`, on this thread.
/// Returns false, having written nothing, where the CPU's widest level is
/// not AVX2: the caller then runs the `gemm` crate.
///
/// # Safety
/// The pointers and strides describe valid views of these sizes; `dst`
/// overlaps neither input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    m: usize, n: usize, k: usize,
    dst: *mut f32, ld: usize, acc: bool,
    a: *const f32, a_rs: isize, a_cs: isize,
    b: *const f32, b_rs: isize, b_cs: isize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use super::simd::{level, Level};
        if level() != Level::Avx2 {
            return false;
        }
        if m == 0 || n == 0 {
            return true;
        }
        if k == 0 {
            if !acc {
                for i in 0..m {
                    std::slice::from_raw_parts_mut(dst.add(i * ld), n).fill(0.0);
                }
            }
            return true;
        }
        PACKED.with(|cell| {
            // A reentrant call (none today) would find the buffers borrowed: it gets its own.
            let mut own = (Vec::new(), Vec::new());
            let mut held = cell.try_borrow_mut();
            let (pa, pb) = match held.as_deref_mut() {
                Ok(bufs) => bufs,
                Err(_) => &mut own,
            };
            blocked(m, n, k, dst, ld, acc, a, a_rs, a_cs, b, b_rs, b_cs, pa, pb);
        });
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, n, k, dst, ld, acc, a, a_rs, a_cs, b, b_rs, b_cs);
        false
    }
}

/// The five loops around the register tile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn blocked(
    m: usize, n: usize, k: usize,
    dst: *mut f32, ld: usize, acc: bool,
    a: *const f32, a_rs: isize, a_cs: isize,
    b: *const f32, b_rs: isize, b_cs: isize,
    pa: &mut Vec<f32>, pb: &mut Vec<f32>,
) {
    // A row-major `a` is read in place, six rows side by side (what BLIS calls
    // its unpacked "sup" path): packing it cost more than the tile's reads
    // of it from L2 (alternating the two in one process, 512^3: 2-5 points
    // of the FMA peak).
    let in_place = a_cs == 1 && a_rs > 0;
    // `k` in equal blocks of at most `KC` (576 as 288 + 288, not 512 + 64:
    // a short last block pays the tile's fixed costs for few steps; 3 points
    // of the peak on a convolution's [64, 576] x [576, 448]).
    let kb = k.div_ceil(k.div_ceil(KC)).next_multiple_of(8).min(KC);
    let nc_max = n.min(NC).next_multiple_of(NR);
    let kc_max = k.min(kb);
    let mc_max = m.min(MC).next_multiple_of(MR);
    let pb = aligned(pb, kc_max * nc_max);
    let pa = aligned(pa, kc_max * mc_max);
    let mut tile = [0f32; MR * NR];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(kb) {
            let kc = kb.min(k - pc);
            // The first block of `p` writes `dst` (unless the caller adds), the rest add.
            let add = acc || pc > 0;
            pack_b(pb, b.offset(pc as isize * b_rs + jc as isize * b_cs), b_rs, b_cs, kc, nc);
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                let src = a.offset(ic as isize * a_rs + pc as isize * a_cs);
                if in_place {
                    // Only a last, short panel is packed (its missing rows as zeros).
                    let full = mc / MR * MR;
                    if full < mc {
                        pack_a(&mut pa[full * kc..], src.offset(full as isize * a_rs), a_rs, a_cs, mc - full, kc);
                    }
                } else {
                    pack_a(pa, src, a_rs, a_cs, mc, kc);
                }
                for jr in (0..nc).step_by(NR) {
                    let nr = NR.min(nc - jr);
                    let bp = pb.as_ptr().add(jr * kc);
                    for ir in (0..mc).step_by(MR) {
                        let mr = MR.min(mc - ir);
                        let ap = pa.as_ptr().add(ir * kc);
                        let c = dst.add((ic + ir) * ld + jc + jr);
                        if in_place && mr == MR {
                            let ar = src.offset(ir as isize * a_rs);
                            if nr == NR {
                                kernel_rows(kc, ar, a_rs as usize, bp, c, ld, add);
                            } else {
                                kernel_rows(kc, ar, a_rs as usize, bp, tile.as_mut_ptr(), NR, false);
                                spill(&tile, c, ld, mr, nr, add);
                            }
                        } else if mr == MR && nr == NR {
                            kernel(kc, ap, bp, c, ld, add);
                        } else {
                            kernel(kc, ap, bp, tile.as_mut_ptr(), NR, false);
                            spill(&tile, c, ld, mr, nr, add);
                        }
                    }
                }
            }
        }
    }
}

/// An edge tile, computed whole into `tile`: its valid `mr x nr` corner
/// written to (or, when `add`, added to) `c`.
///
/// # Safety
/// `c` holds `mr` rows of `nr` floats, `ld` apart.
#[cfg(target_arch = "x86_64")]
unsafe fn spill(tile: &[f32; MR * NR], c: *mut f32, ld: usize, mr: usize, nr: usize, add: bool) {
    for (r, src) in tile.chunks_exact(NR).take(mr).enumerate() {
        let row = std::slice::from_raw_parts_mut(c.add(r * ld), nr);
        for (d, &v) in row.iter_mut().zip(src) {
            *d = if add { *d + v } else { v };
        }
    }
}

/// `len` floats of `v` starting on a 64-byte boundary: a 16-float row of a
/// `b` panel is then one cache line, where malloc's 16-byte alignment split
/// one of its two loads across two lines on every step of the tile.
fn aligned(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len + 15 {
        v.resize(len + 15, 0.0);
    }
    let skip = v.as_ptr().align_offset(64).min(15);
    &mut v[skip..skip + len]
}

/// `b`'s `kc x nc` block as `NR`-column panels, each `kc` rows of `NR`
/// (the last panel padded with zeros). Row-major `b` is read a row of the
/// block at a time, front to back: one stream the prefetcher follows (panel
/// by panel, each 64-byte piece of a row came from a line of its own and the
/// packing took a fifth of a 512^3 product). Column-major `b` (a transposed
/// operand, as `linear`'s weight) is transposed 8 x 8 in registers: 86% of
/// the peak against 66% element by element on [64, 448] x [576, 448]ᵀ.
#[cfg(target_arch = "x86_64")]
unsafe fn pack_b(out: &mut [f32], b: *const f32, rs: isize, cs: isize, kc: usize, nc: usize) {
    let full = nc / NR;
    if cs == 1 {
        for p in 0..kc {
            let src = b.offset(p as isize * rs);
            for jp in 0..full {
                out[(jp * kc + p) * NR..][..NR].copy_from_slice(std::slice::from_raw_parts(src.add(jp * NR), NR));
            }
        }
    } else {
        for jp in 0..full {
            let (dst, src) = (&mut out[jp * kc * NR..][..kc * NR], b.offset((jp * NR) as isize * cs));
            if rs == 1 {
                pack_b_columns(dst, src, cs, kc);
            } else {
                pack_b_strided(dst, src, rs, cs, NR);
            }
        }
    }
    if nc > full * NR {
        pack_b_strided(&mut out[full * kc * NR..][..kc * NR], b.offset((full * NR) as isize * cs), rs, cs, nc - full * NR);
    }
}

/// One panel of `b` element by element: its first `w` columns from any
/// strides, the rest zeros.
#[cfg(target_arch = "x86_64")]
unsafe fn pack_b_strided(panel: &mut [f32], b: *const f32, rs: isize, cs: isize, w: usize) {
    for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
        let src = b.offset(p as isize * rs);
        for (j, v) in row.iter_mut().enumerate() {
            *v = if j < w { *src.offset(j as isize * cs) } else { 0.0 };
        }
    }
}

/// One full panel of a column-major `b` (`rs` = 1: each of its 16 columns
/// contiguous along `p`): 8 steps at a time, two 8 x 8 transposes in
/// registers (16 streams read, the panel written front to back).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b_columns(panel: &mut [f32], b: *const f32, cs: isize, kc: usize) {
    use std::arch::x86_64::*;
    let col = |j: usize| b.offset(j as isize * cs);
    let mut p = 0;
    while p + 8 <= kc {
        for half in 0..2 {
            let r: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(col(half * 8 + j).add(p)));
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let o = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (i, v) in o.into_iter().enumerate() {
                _mm256_storeu_ps(panel.as_mut_ptr().add((p + i) * NR + half * 8), v);
            }
        }
        p += 8;
    }
    for p in p..kc {
        for j in 0..NR {
            panel[p * NR + j] = *col(j).add(p);
        }
    }
}

/// `a`'s `mc x kc` block as `MR`-row panels, each `kc` columns of `MR`
/// (the last panel padded with zeros). A panel's `MR` rows are read side by
/// side, `MR` streams, and its output written front to back.
#[cfg(target_arch = "x86_64")]
unsafe fn pack_a(out: &mut [f32], a: *const f32, rs: isize, cs: isize, mc: usize, kc: usize) {
    for (ip, panel) in (0..mc).step_by(MR).zip(out.chunks_exact_mut(kc * MR)) {
        let h = MR.min(mc - ip);
        let a = a.offset(ip as isize * rs);
        if h == MR {
            let src: [*const f32; MR] = std::array::from_fn(|r| a.offset(r as isize * rs));
            for (p, col) in panel.chunks_exact_mut(MR).enumerate() {
                let at = p as isize * cs;
                for (v, s) in col.iter_mut().zip(&src) {
                    *v = *s.offset(at);
                }
            }
        } else {
            for (p, col) in panel.chunks_exact_mut(MR).enumerate() {
                for (r, v) in col.iter_mut().enumerate() {
                    *v = if r < h { *a.offset(r as isize * rs + p as isize * cs) } else { 0.0 };
                }
            }
        }
    }
}

/// The 6 x 16 register tile: `c (+)= a_panel · b_panel` over `k` steps,
/// `a` packed (`PACKED`: step `p`'s six values at `a + p·MR`) or read in
/// place from six rows `lda` apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tile<const PACKED: bool>(k: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    let z = _mm256_setzero_ps();
    let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21) = (z, z, z, z, z, z);
    let (mut c30, mut c31, mut c40, mut c41, mut c50, mut c51) = (z, z, z, z, z, z);
    // The tile's lines of `c`, requested now so that they have arrived by the end.
    for r in 0..MR {
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc).cast());
        _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR - 1).cast());
    }
    let (sa, sr) = if PACKED { (MR, 1) } else { (1, lda) };
    let (mut a, mut b) = (a, b);
    // Row `r` of the tile: its `a` value broadcast, times both halves of `b`'s step.
    macro_rules! row {
        ($r:expr, $lo:ident, $hi:ident, $b0:ident, $b1:ident) => {
            let x = _mm256_broadcast_ss(&*a.add($r * sr));
            $lo = _mm256_fmadd_ps(x, $b0, $lo);
            $hi = _mm256_fmadd_ps(x, $b1, $hi);
        };
    }
    macro_rules! step {
        () => {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            row!(0, c00, c01, b0, b1);
            row!(1, c10, c11, b0, b1);
            row!(2, c20, c21, b0, b1);
            row!(3, c30, c31, b0, b1);
            row!(4, c40, c41, b0, b1);
            row!(5, c50, c51, b0, b1);
            a = a.add(sa);
            b = b.add(NR);
        };
    }
    // Four steps per pass: a quarter of the loop's own instructions.
    for _ in 0..k / 4 {
        step!();
        step!();
        step!();
        step!();
    }
    for _ in 0..k % 4 {
        step!();
    }
    let rows = [(c00, c01), (c10, c11), (c20, c21), (c30, c31), (c40, c41), (c50, c51)];
    for (r, (v0, v1)) in rows.into_iter().enumerate() {
        let p = c.add(r * ldc);
        if add {
            _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), v0));
            _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_loadu_ps(p.add(8)), v1));
        } else {
            _mm256_storeu_ps(p, v0);
            _mm256_storeu_ps(p.add(8), v1);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel(k: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    tile::<true>(k, a, 0, b, c, ldc, add)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_rows(k: usize, a: *const f32, lda: usize, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    tile::<false>(k, a, lda, b, c, ldc, add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain f64 triple loop, over shapes that cross every block
    /// edge (`MR`, `NR`, `KC`, `MC`) and operands given row- and column-major.
    #[test]
    fn matches_a_plain_product_across_block_edges_and_layouts() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for &(m, n, k) in &[(1, 1, 1), (5, 15, 3), (6, 16, 256), (7, 17, 257), (145, 33, 300), (150, 40, 513), (13, 3100, 20)] {
            let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            // Room for `b` at every other element (the third layout below).
            let b: Vec<f32> = (0..2 * k * n).map(|_| rnd()).collect();
            for &(ta, tb, acc) in &[(false, 0, false), (true, 0, true), (false, 1, false), (true, 1, true), (false, 2, true)] {
                // `ta`: `a` stored column-major (a_rs = 1); `tb`: `b` row-major,
                // column-major, or neither (every other element of a row-major `[k, 2n]`).
                let (a_rs, a_cs) = if ta { (1, m as isize) } else { (k as isize, 1) };
                let (b_rs, b_cs) = match tb {
                    0 => (n as isize, 1),
                    1 => (1, k as isize),
                    _ => (2 * n as isize, 2),
                };
                let ld = n + 3;
                let mut d = vec![0.25f32; m * ld];
                // SAFETY: the strides describe `a`, `b` and `d` as allocated.
                let ran = unsafe { sgemm(m, n, k, d.as_mut_ptr(), ld, acc, a.as_ptr(), a_rs, a_cs, b.as_ptr(), b_rs, b_cs) };
                if !ran {
                    return; // not an AVX2-only CPU: the gemm crate serves it
                }
                for i in 0..m {
                    for j in 0..n {
                        let mut s = if acc { 0.25f64 } else { 0.0 };
                        let mut mag = 0f64;
                        for p in 0..k {
                            let x = a[(i as isize * a_rs + p as isize * a_cs) as usize] as f64 * b[(p as isize * b_rs + j as isize * b_cs) as usize] as f64;
                            s += x;
                            mag += x.abs();
                        }
                        let got = d[i * ld + j] as f64;
                        // fp32 summation: k roundings of at most half an ulp of the running magnitude.
                        assert!((got - s).abs() <= 1e-6 * (k as f64 + 1.0) * (mag + 0.25), "m{m} n{n} k{k} ta{ta} tb{tb} acc{acc} [{i},{j}]: {got} vs {s}");
                    }
                    for j in n..ld {
                        assert_eq!(d[i * ld + j], 0.25, "wrote past n");
                    }
                }
            }
        }
    }
}
