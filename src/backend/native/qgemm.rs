//! Int8 GEMM kernels for quantized linear layers: `C = A · Bᵀ` with `A` the
//! activations `[m, k]` and `B` the weight rows `[n, k]`, both `i8`, row-major.
//!
//! Two products are offered:
//! * [`gemm_i8_packed_with`]: exact `i32` results (wrapping, like the
//!   hardware, so exact whenever the true sum fits in an `i32`).
//! * [`gemm_q8_0_packed_with`]: ggml's `q8_0` layout, both operands
//!   quantized per block of 32 along `k` with one `f32` scale per block; the
//!   per-block `i32` dot products are scaled and accumulated in `f32` like
//!   ggml's `vec_dot_q8_0_q8_0`.
//!
//! # Why hand-written
//! No maintained Rust crate offers AVX-512 VNNI int8 GEMM (the `gemm` crate is
//! floating point only), and the point of quantized weights is to run at int8
//! throughput (`vpdpbusd`: 64 multiply-adds per instruction, 4× an fp32 FMA).
//!
//! # How it maps onto `vpdpbusd`
//! `vpdpbusd acc, x, y` adds to each `i32` lane the sum of 4 products of an
//! *unsigned* byte of `x` with a *signed* byte of `y`. Both our operands are
//! signed, so the weights are stored offset by 128 (`b + 128 = b ^ 0x80`, a
//! `u8`) when they are packed, and the activations stay signed. Then
//! `Σ a·b = Σ a·(b + 128) − 128·Σ a`; the correction `−128·Σ a` depends only on
//! the activation row, is computed while `A` is packed (`O(m·k)`, once per call)
//! and is folded in for free by starting the accumulators at it. Offsetting
//! `B` rather than `A` keeps the packed weights free of any side table, which
//! matters for `m = 1`, where the product is a pure stream over the weights.
//! All arithmetic wraps, so the result is exact modulo 2³².
//!
//! # Layouts
//! * Packed B ([`PackedI8`]): panels of [`NR`] = 48 columns (the last one
//!   rounded up to a multiple of 16 and zero-filled). A panel of width `w` is
//!   `[k4][w][4]` bytes, `k4 = ceil(k / 4)`: for each group of 4 consecutive k,
//!   16 columns × 4 bytes make one 64-byte vector, exactly the `y` operand.
//!   Panels are stored one after another, so `m = 1` streams the weights once,
//!   front to back. Padding bytes are 0 (as `u8`), so they add nothing.
//! * Packed A (per call): row panels of `MR` rows, `[k4][MR][4]` signed bytes;
//!   each 4-byte group is broadcast to all lanes as the `x` operand.
//! * [`PackedQ8_0`] adds the B scales as `[panel][k/32][w]` `f32`.
//!
//! The micro-kernel holds `R × V` accumulators (`R ≤ MR` rows, `V ≤ 3` vectors
//! of 16 columns); per step of 4 k it loads `V` vectors of B and broadcasts `R`
//! words of A. Cache blocking: a B micro-panel of `NR × KC` bytes (24 KiB)
//! stays in L1 while all row panels of an `MC × KC` block of A (L2) go by.
//!
//! # Threads
//! Work is split over the columns (B panels). The parallel loop is a callback
//! `par(tasks, body)` ([`Par`]), the native pool's `par::for_each`.
//!
//! # AVX2 path (no VNNI)
//! On CPUs with AVX2 but no AVX-512 VNNI (AMD Zen 2/3, Intel before Ice Lake)
//! the same packed B runs on `vpmaddwd` (i16 × i16 → i32, pairs summed):
//! 16 bytes of a B vector (4 columns × 4 k) are zero-extended to 16 `i16`,
//! so each `i32` lane of the product holds one column's sum over a pair of k
//! and two lanes make a column; they are added (`vphaddd`) when C is written.
//! A is packed widened to `i16` so that a row's 4 k are one 64-bit broadcast.
//! `vpmaddubsw`, the usual AVX2 int8 product, is not used: it saturates its
//! `i16` pair sums (255 · 128 · 2 > 2¹⁵), so it is not exact for these
//! operands; `(b + 128) · a` pair sums (≤ 65280) fit `vpmaddwd`'s `i32`. Its
//! rate is 16 multiply-adds per instruction, 2× an AVX2 fp32 FMA, which
//! bounds int8 at about twice the fp32 GEMM on such CPUs.
//!
//! # Portable path
//! Without either (or with `simd = false`) a scalar micro-kernel runs on
//! the same packed data and the same blocking, in the same order of floating
//! point operations, so its results are bit-identical to the SIMD paths.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

/// A parallel loop: `par(tasks, body)` runs `body(0) .. body(tasks - 1)` and
/// returns when all have run, in any order, on any threads.
pub type Par<'a> = dyn Fn(usize, &(dyn Fn(usize) + Sync)) + Sync + 'a;

/// Whether the AVX-512 VNNI kernels can run on this CPU.
pub fn vnni_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX2 kernels can run on this CPU.
pub fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The micro-kernel family a call runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Isa {
    Vnni,
    Avx2,
    Portable,
}

fn isa(simd: bool) -> Isa {
    if simd && vnni_available() {
        Isa::Vnni
    } else if simd && avx2_available() {
        Isa::Avx2
    } else {
        Isa::Portable
    }
}

/// Columns per B panel: 3 vectors of 16 `i32` lanes.
pub const NR: usize = 48;
const LANES: usize = 16;
/// Rows per A panel for the int8 product: 8 × 3 = 24 accumulators, which
/// with 3 B vectors and a broadcast fit in the 32 zmm registers.
const MR: usize = 8;
/// Rows per A panel for q8_0, which needs `f32` accumulators beside the `i32`
/// block accumulators: 2 × 4 × 3 = 24 registers.
const MRQ: usize = 4;
/// k per cache block, in elements: a B micro-panel of 48 × 512 bytes (24 KiB)
/// stays in the 48 KiB L1. A multiple of 32 so q8_0 blocks are never split.
const KC: usize = 512;
/// Rows of A per cache block: MC × KC = 128 KiB of packed A stays in L2.
const MC: usize = 256;
/// q8_0 block length along k.
pub const QK: usize = 32;
/// How far ahead of its reads the AVX2 kernels prefetch B, in bytes. At
/// batch 1 the product is a stream over the weights, and on AMD Zen 3 the
/// hardware prefetcher alone kept it at 8–13 GB/s; prefetching 4 KiB ahead
/// gave 16–26 GB/s in the same runs (2 KiB: 14–19; measured on a copy of
/// the kernel's loop over a 16 MiB weight).
const PREFETCH: usize = 4096;

/// Raw pointer that may be shared between the tasks of one call: every task
/// writes a disjoint set of columns of C.
#[derive(Clone, Copy)]
struct SyncPtr<T>(*mut T);
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

/// Int8 weights `[n, k]` packed for the micro-kernel (see the module doc),
/// offset to `u8`. Pack once, multiply many times.
pub struct PackedI8 {
    n: usize,
    k: usize,
    k4: usize,
    data: Vec<u8>,
}

/// Width (columns incl. zero padding) of panel `p` of an `n`-column matrix.
fn panel_width(n: usize, p: usize) -> usize {
    let cols = (n - p * NR).min(NR);
    cols.div_ceil(LANES) * LANES
}

fn n_panels(n: usize) -> usize {
    n.div_ceil(NR)
}

impl PackedI8 {
    /// Packs `b`, `[n, k]` row-major.
    pub fn pack(b: &[i8], n: usize, k: usize) -> PackedI8 {
        assert!(b.len() >= n * k, "b is smaller than n * k");
        let k4 = k.div_ceil(4);
        let total: usize = (0..n_panels(n)).map(|p| panel_width(n, p)).sum::<usize>() * k4 * 4;
        let mut data = vec![0u8; total];
        let mut off = 0;
        for p in 0..n_panels(n) {
            let w = panel_width(n, p);
            let panel = &mut data[off..off + w * k4 * 4];
            for j in 0..(n - p * NR).min(NR) {
                let row = &b[(p * NR + j) * k..(p * NR + j + 1) * k];
                // Whole groups of 4 k move as one word; the last may be short.
                let mut groups = row.chunks_exact(4);
                for (g, src) in (&mut groups).enumerate() {
                    let x = u32::from_ne_bytes([src[0] as u8, src[1] as u8, src[2] as u8, src[3] as u8]) ^ 0x8080_8080;
                    panel[g * w * 4 + j * 4..g * w * 4 + j * 4 + 4].copy_from_slice(&x.to_ne_bytes());
                }
                for (q, &x) in groups.remainder().iter().enumerate() {
                    panel[(k / 4) * w * 4 + j * 4 + q] = (x as u8) ^ 0x80;
                }
            }
            off += w * k4 * 4;
        }
        PackedI8 { n, k, k4, data }
    }



    /// Byte offset of panel `p` (all panels before it are full width).
    fn panel_offset(&self, p: usize) -> usize {
        p * NR * self.k4 * 4
    }
}

/// q8_0 weights: the int8 values packed as [`PackedI8`] plus one `f32` scale
/// per block of 32 along k, stored `[panel][k/32][w]` so a micro-kernel reads
/// one vector of scales per 16 columns per block.
pub struct PackedQ8_0 {
    q: PackedI8,
    nb: usize,
    scales: Vec<f32>,
}

impl PackedQ8_0 {
    /// Packs `b` `[n, k]` with scales `b_scales` `[n, k/32]`; `k % 32 == 0`.
    pub fn pack(b: &[i8], b_scales: &[f32], n: usize, k: usize) -> PackedQ8_0 {
        assert!(k.is_multiple_of(QK), "q8_0 needs k to be a multiple of 32");
        let nb = k / QK;
        assert!(b_scales.len() >= n * nb, "b_scales is smaller than n * k / 32");
        let q = PackedI8::pack(b, n, k);
        let total: usize = (0..n_panels(n)).map(|p| panel_width(n, p)).sum::<usize>() * nb;
        let mut scales = vec![0f32; total];
        for p in 0..n_panels(n) {
            let w = panel_width(n, p);
            let base = p * NR * nb;
            for j in 0..(n - p * NR).min(NR) {
                for blk in 0..nb {
                    scales[base + blk * w + j] = b_scales[(p * NR + j) * nb + blk];
                }
            }
        }
        PackedQ8_0 { q, nb, scales }
    }


}

/// Packed A: `i8` for the VNNI and portable kernels, widened to `i16` for
/// the AVX2 one. `at(e)` is the address of element `e`, for a tile.
enum APack {
    I8(Vec<i8>),
    I16(Vec<i16>),
}

impl APack {
    fn new(a: &[i8], m: usize, k: usize, mr: usize, blk: usize, isa: Isa) -> (APack, Vec<i32>) {
        if isa == Isa::Avx2 {
            let (d, c) = pack_a::<i16>(a, m, k, mr, blk);
            (APack::I16(d), c)
        } else {
            let (d, c) = pack_a::<i8>(a, m, k, mr, blk);
            (APack::I8(d), c)
        }
    }

    fn at(&self, e: usize) -> *const u8 {
        match self {
            APack::I8(d) => d[e..].as_ptr().cast(),
            APack::I16(d) => d[e..].as_ptr().cast(),
        }
    }
}

/// Packs `a` `[m, k]` into row panels of `mr` rows, `[k4][mr][4]` each (rows
/// and k zero-padded), and returns with it, per row and per `blk` elements of
/// k, the correction `−128 · Σ a` that undoes the weights' offset.
fn pack_a<T: From<i8> + Copy + Default>(a: &[i8], m: usize, k: usize, mr: usize, blk: usize) -> (Vec<T>, Vec<i32>) {
    let k4 = k.div_ceil(4);
    let mp = m.div_ceil(mr);
    let nblk = k.div_ceil(blk);
    let mut data = vec![T::default(); mp * k4 * mr * 4];
    // corr: [mp][nblk][mr]
    let mut corr = vec![0i32; mp * nblk * mr];
    for i in 0..m {
        let (ip, r) = (i / mr, i % mr);
        let panel = &mut data[ip * k4 * mr * 4..(ip + 1) * k4 * mr * 4];
        let row = &a[i * k..(i + 1) * k];
        // Whole groups of 4 k move as one word; the last group may be short.
        let mut groups = row.chunks_exact(4);
        for (g, src) in (&mut groups).enumerate() {
            for (d, &x) in panel[g * mr * 4 + r * 4..g * mr * 4 + r * 4 + 4].iter_mut().zip(src) {
                *d = T::from(x);
            }
        }
        for (q, &x) in groups.remainder().iter().enumerate() {
            panel[(k / 4) * mr * 4 + r * 4 + q] = T::from(x);
        }
        for (b, chunk) in row.chunks(blk).enumerate() {
            let s: i32 = chunk.iter().map(|&x| x as i32).sum();
            corr[(ip * nblk + b) * mr + r] = s.wrapping_mul(-128);
        }
    }
    (data, corr)
}

/// Splits `np` panels into at most `threads` contiguous ranges and runs
/// `body(p0, p1)` for each through `par`.
fn split_panels(np: usize, threads: usize, par: &Par, body: &(dyn Fn(usize, usize) + Sync)) {
    let tasks = threads.clamp(1, np.max(1));
    let per = np / tasks;
    let extra = np % tasks;
    let range = |t: usize| {
        let p0 = t * per + t.min(extra);
        (p0, p0 + per + usize::from(t < extra))
    };
    if tasks == 1 {
        body(0, np);
    } else {
        par(tasks, &|t| {
            let (p0, p1) = range(t);
            body(p0, p1)
        });
    }
}

// ---------------------------------------------------------------------------
// int8 → int32
// ---------------------------------------------------------------------------

/// The full entry point: `threads` tasks run through `par`; `simd = false`
/// forces the portable kernel (results are identical either way).
#[allow(clippy::too_many_arguments)]
pub fn gemm_i8_packed_with(
    m: usize,
    a: &[i8],
    k: usize,
    pb: &PackedI8,
    c: &mut [i32],
    threads: usize,
    par: &Par,
    simd: bool,
) {
    gemm_i8(m, a, k, pb, c, threads, par, isa(simd))
}

#[allow(clippy::too_many_arguments)]
fn gemm_i8(m: usize, a: &[i8], k: usize, pb: &PackedI8, c: &mut [i32], threads: usize, par: &Par, isa: Isa) {
    let n = pb.n;
    assert_eq!(k, pb.k, "k does not match the packed weights");
    assert!(a.len() >= m * k && c.len() >= m * n, "a or c too small");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0);
        return;
    }
    // One correction per row over the whole k: it is applied once, by the
    // first k block.
    let (ap, corr) = APack::new(a, m, k, MR, k, isa);
    let k4 = pb.k4;
    let mp = m.div_ceil(MR);
    // A single row panel gains nothing from k blocking (each B byte is used
    // once): stream B panels whole and write C once.
    let kc4 = if mp == 1 { k4 } else { KC / 4 };
    let cp = SyncPtr(c.as_mut_ptr());
    split_panels(n_panels(n), threads, par, &|p0, p1| {
        // Capture the whole Sync wrapper, not its raw-pointer field (edition
        // 2021 closures capture disjoint fields).
        #[allow(clippy::redundant_locals)]
        let cp = cp;
        for pc4 in (0..k4).step_by(kc4) {
            let kl4 = kc4.min(k4 - pc4);
            let first = pc4 == 0;
            for ic in (0..mp).step_by(MC / MR) {
                for p in p0..p1 {
                    let w = panel_width(n, p);
                    let bp = unsafe { pb.data.as_ptr().add(pb.panel_offset(p) + pc4 * w * 4) };
                    let ncols = (n - p * NR).min(NR);
                    for ip in ic..(ic + MC / MR).min(mp) {
                        let rows = (m - ip * MR).min(MR);
                        let t = TileI8 {
                            kl4,
                            a: ap.at((ip * k4 + pc4) * MR * 4),
                            b: bp,
                            bstride: w * 4,
                            corr: if first { unsafe { corr.as_ptr().add(ip * MR) } } else { core::ptr::null() },
                            c: unsafe { cp.0.add(ip * MR * n + p * NR) },
                            ldc: n,
                            ncols,
                        };
                        unsafe { tile_i8(&t, rows, w / LANES, isa) };
                    }
                }
            }
        }
    });
}

/// One micro-kernel call: `rows × ncols` of C over `kl4` groups of 4 k.
struct TileI8 {
    kl4: usize,
    /// Packed A panel at the block's first k group; stride `MR * 4` elements
    /// per group (`i8`, or `i16` for the AVX2 kernel).
    a: *const u8,
    /// Packed B panel at the block's first k group; stride `bstride` per group.
    b: *const u8,
    bstride: usize,
    /// Row corrections for the first k block (C is stored), or null for the
    /// later blocks (C is accumulated).
    corr: *const i32,
    c: *mut i32,
    ldc: usize,
    ncols: usize,
}

unsafe fn tile_i8(t: &TileI8, rows: usize, nv: usize, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // 16 ymm registers: one row takes all the vectors at once (4 per
        // 16 columns), more rows go 16 columns at a time, 2 rows at a time
        // (8 accumulators; 3 rows' 12 spilled to the stack in the inner
        // loop, seen in `perf annotate`).
        if rows == 1 {
            match nv {
                1 => return unsafe { kern_i8_avx2::<1, 1>(t, 0, 0) },
                2 => return unsafe { kern_i8_avx2::<1, 2>(t, 0, 0) },
                3 => return unsafe { kern_i8_avx2::<1, 3>(t, 0, 0) },
                _ => unreachable!(),
            }
        }
        for v in 0..nv {
            for i in (0..rows).step_by(2) {
                if rows - i >= 2 {
                    unsafe { kern_i8_avx2::<2, 1>(t, i, v) };
                } else {
                    unsafe { kern_i8_avx2::<1, 1>(t, i, v) };
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        // Monomorphize over the tile shape so the accumulators live in
        // registers.
        macro_rules! dispatch {
            ($($r:literal),*) => {
                match (rows, nv) {
                    $(($r, 1) => return kern_i8::<$r, 1>(t),
                      ($r, 2) => return kern_i8::<$r, 2>(t),
                      ($r, 3) => return kern_i8::<$r, 3>(t),)*
                    _ => unreachable!(),
                }
            };
        }
        unsafe { dispatch!(1, 2, 3, 4, 5, 6, 7, 8) }
    }
    let _ = (isa, nv);
    unsafe { kern_i8_scalar(t, rows) }
}

/// Portable micro-kernel with the VNNI kernel's exact semantics (wrapping
/// i32 sums). The column loop is innermost so the compiler can vectorize it.
unsafe fn kern_i8_scalar(t: &TileI8, rows: usize) {
    let nc = t.ncols;
    for i in 0..rows {
        let init = if t.corr.is_null() { 0 } else { unsafe { *t.corr.add(i) } };
        let mut acc = [init; NR];
        for g in 0..t.kl4 {
            let brow = unsafe { core::slice::from_raw_parts(t.b.add(g * t.bstride), nc * 4) };
            for q in 0..4 {
                let x = unsafe { *(t.a as *const i8).add(g * MR * 4 + i * 4 + q) } as i32;
                for (j, s) in acc[..nc].iter_mut().enumerate() {
                    *s = s.wrapping_add(x * brow[j * 4 + q] as i32);
                }
            }
        }
        let crow = unsafe { core::slice::from_raw_parts_mut(t.c.add(i * t.ldc), nc) };
        for (d, &s) in crow.iter_mut().zip(&acc[..nc]) {
            *d = if t.corr.is_null() { d.wrapping_add(s) } else { s };
        }
    }
}

/// Mask of the first `min(cols, 16)` lanes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lane_mask(cols: usize) -> u16 {
    if cols >= LANES { 0xffff } else { (1u16 << cols) - 1 }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // accumulators are indexed [row][vector]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kern_i8<const R: usize, const V: usize>(t: &TileI8) {
    let mut acc = [[_mm512_setzero_si512(); V]; R];
    if !t.corr.is_null() {
        for i in 0..R {
            let x = _mm512_set1_epi32(unsafe { *t.corr.add(i) });
            for v in 0..V {
                acc[i][v] = x;
            }
        }
    }
    let (mut a, mut b) = (t.a as *const i8, t.b);
    let mut bv = [_mm512_setzero_si512(); V];
    for _ in 0..t.kl4 {
        for v in 0..V {
            bv[v] = unsafe { _mm512_loadu_si512(b.add(v * 64) as *const _) };
        }
        for i in 0..R {
            let x = _mm512_set1_epi32(unsafe { (a.add(i * 4) as *const i32).read_unaligned() });
            for v in 0..V {
                // B (offset to u8) is the unsigned operand, A the signed one.
                acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], bv[v], x);
            }
        }
        a = unsafe { a.add(MR * 4) };
        b = unsafe { b.add(t.bstride) };
    }
    for i in 0..R {
        for v in 0..V {
            let col = v * LANES;
            if col >= t.ncols {
                break;
            }
            let mask = lane_mask(t.ncols - col);
            let p = unsafe { t.c.add(i * t.ldc + col) };
            let mut x = acc[i][v];
            if t.corr.is_null() {
                x = _mm512_add_epi32(x, unsafe { _mm512_maskz_loadu_epi32(mask, p) });
            }
            unsafe { _mm512_mask_storeu_epi32(p, mask, x) };
        }
    }
}

/// Row `i`'s 8 columns from two accumulators of 4 columns × 2 k-pair lanes
/// (`lo`: columns 0–3, `hi`: 4–7): `vphaddd` sums each column's pair, in the
/// order `[0 1 4 5 | 2 3 6 7]`, which `vpermq` puts straight.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn columns8(lo: __m256i, hi: __m256i) -> __m256i {
    unsafe { _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(lo, hi)) }
}

/// Stores the first `cols` (≤ 8) lanes of `x` at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store8<T: Copy>(p: *mut T, x: [T; 8], cols: usize) {
    unsafe { core::ptr::copy_nonoverlapping(x.as_ptr(), p, cols.min(8)) };
}

/// One group of 4 k of the AVX2 kernels: for each 4-column quarter `q` of
/// the vectors `0 .. V` at `b`, its 16 bytes zero-extended to `i16` (B is
/// offset to `u8`) times each row's 4 k at `a` (`i16`, one 64-bit
/// broadcast), added into `acc[row][q]`; and B prefetched ahead.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // accumulators are indexed [row][quarter]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn madd_k4<const R: usize, const V: usize, const N: usize>(acc: &mut [[__m256i; N]; R], a: *const i16, b: *const u8) {
    for v in 0..V {
        _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH + v * 64) as *const i8);
    }
    for q in 0..4 * V {
        let bw = unsafe { _mm256_cvtepu8_epi16(_mm_loadu_si128(b.add(q * 16) as *const __m128i)) };
        for i in 0..R {
            let x = _mm256_set1_epi64x(unsafe { (a.add(i * 4) as *const i64).read_unaligned() });
            acc[i][q] = _mm256_add_epi32(acc[i][q], _mm256_madd_epi16(bw, x));
        }
    }
}

/// The AVX2 int8 micro-kernel (module doc) on rows `i0 .. i0 + R` and the
/// 16-column vectors `v0 .. v0 + V` of the tile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // accumulators are indexed [row][quarter]
#[target_feature(enable = "avx2,fma")]
unsafe fn kern_i8_avx2<const R: usize, const V: usize>(t: &TileI8, i0: usize, v0: usize) {
    // acc[i][q]: columns 4q .. 4q + 4 of the vectors, two lanes per column.
    let mut acc = [[_mm256_setzero_si256(); 12]; R];
    let mut a = unsafe { (t.a as *const i16).add(i0 * 4) };
    let mut b = unsafe { t.b.add(v0 * 64) };
    for _ in 0..t.kl4 {
        unsafe { madd_k4::<R, V, 12>(&mut acc, a, b) };
        a = unsafe { a.add(MR * 4) };
        b = unsafe { b.add(t.bstride) };
    }
    for i in 0..R {
        let row = i0 + i;
        for h in 0..2 * V {
            let col = v0 * LANES + h * 8;
            if col >= t.ncols {
                break;
            }
            let mut x = unsafe { columns8(acc[i][2 * h], acc[i][2 * h + 1]) };
            if !t.corr.is_null() {
                x = _mm256_add_epi32(x, _mm256_set1_epi32(unsafe { *t.corr.add(row) }));
            }
            let p = unsafe { t.c.add(row * t.ldc + col) };
            let mut out = [0i32; 8];
            unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, x) };
            if t.corr.is_null() {
                for (o, j) in out.iter_mut().zip(0..(t.ncols - col).min(8)) {
                    *o = o.wrapping_add(unsafe { *p.add(j) });
                }
            }
            unsafe { store8(p, out, t.ncols - col) };
        }
    }
}

// ---------------------------------------------------------------------------
// q8_0: int8 blocks of 32 with f32 scales → f32
// ---------------------------------------------------------------------------

/// The full q8_0 entry point (see [`gemm_i8_packed_with`]).
#[allow(clippy::too_many_arguments)]
pub fn gemm_q8_0_packed_with(
    m: usize,
    a: &[i8],
    a_scales: &[f32],
    pb: &PackedQ8_0,
    c: &mut [f32],
    threads: usize,
    par: &Par,
    simd: bool,
) {
    gemm_q8_0(m, a, a_scales, pb, c, threads, par, isa(simd))
}

#[allow(clippy::too_many_arguments)]
fn gemm_q8_0(m: usize, a: &[i8], a_scales: &[f32], pb: &PackedQ8_0, c: &mut [f32], threads: usize, par: &Par, isa: Isa) {
    let (n, k, nb) = (pb.q.n, pb.q.k, pb.nb);
    assert!(a.len() >= m * k && a_scales.len() >= m * nb && c.len() >= m * n, "a, a_scales or c too small");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    let (ap, corr) = APack::new(a, m, k, MRQ, QK, isa);
    // Scales of A beside the corrections, [mp][nb][MRQ].
    let mp = m.div_ceil(MRQ);
    let mut sa = vec![0f32; mp * nb * MRQ];
    for i in 0..m {
        for blk in 0..nb {
            sa[((i / MRQ) * nb + blk) * MRQ + i % MRQ] = a_scales[i * nb + blk];
        }
    }
    let k4 = pb.q.k4;
    let kcb = if mp == 1 { nb } else { KC / QK };
    let cp = SyncPtr(c.as_mut_ptr());
    split_panels(n_panels(n), threads, par, &|p0, p1| {
        // Capture the whole Sync wrapper, not its raw-pointer field (edition
        // 2021 closures capture disjoint fields).
        #[allow(clippy::redundant_locals)]
        let cp = cp;
        for pcb in (0..nb).step_by(kcb) {
            let nbl = kcb.min(nb - pcb);
            let pc4 = pcb * QK / 4;
            for ic in (0..mp).step_by(MC / MRQ) {
                for p in p0..p1 {
                    let w = panel_width(n, p);
                    let bp = unsafe { pb.q.data.as_ptr().add(pb.q.panel_offset(p) + pc4 * w * 4) };
                    let sb = unsafe { pb.scales.as_ptr().add(p * NR * nb + pcb * w) };
                    for ip in ic..(ic + MC / MRQ).min(mp) {
                        let rows = (m - ip * MRQ).min(MRQ);
                        let t = TileQ8 {
                            nbl,
                            a: ap.at((ip * k4 + pc4) * MRQ * 4),
                            corr: unsafe { corr.as_ptr().add((ip * nb + pcb) * MRQ) },
                            sa: unsafe { sa.as_ptr().add((ip * nb + pcb) * MRQ) },
                            b: bp,
                            sb,
                            w,
                            c: unsafe { cp.0.add(ip * MRQ * n + p * NR) },
                            ldc: n,
                            ncols: (n - p * NR).min(NR),
                            first: pcb == 0,
                        };
                        unsafe { tile_q8(&t, rows, isa) };
                    }
                }
            }
        }
    });
}

/// One q8_0 micro-kernel call over `nbl` blocks of 32 k.
struct TileQ8 {
    nbl: usize,
    /// Packed A, `[k4][MRQ][4]` (`i8`, or `i16` for the AVX2 kernel).
    a: *const u8,
    /// Row corrections and scales, `[block][MRQ]`.
    corr: *const i32,
    sa: *const f32,
    /// Packed B, `[k4][w][4]`, and its scales `[block][w]`.
    b: *const u8,
    sb: *const f32,
    w: usize,
    c: *mut f32,
    ldc: usize,
    ncols: usize,
    /// First k block: store C rather than add to it.
    first: bool,
}

unsafe fn tile_q8(t: &TileQ8, rows: usize, isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // Integer and f32 accumulators share 16 ymm registers: one row takes
        // a whole panel at once (its f32 sums in memory), two rows 16 columns.
        let nv = t.w / LANES;
        if rows == 1 {
            match nv {
                3 => unsafe { kern_q8_avx2::<1, 3>(t, 0, 0) },
                2 => unsafe { kern_q8_avx2::<1, 2>(t, 0, 0) },
                _ => unsafe { kern_q8_avx2::<1, 1>(t, 0, 0) },
            }
            return;
        }
        for v in 0..nv {
            for i in (0..rows).step_by(2) {
                if rows - i >= 2 {
                    unsafe { kern_q8_avx2::<2, 1>(t, i, v) };
                } else {
                    unsafe { kern_q8_avx2::<1, 1>(t, i, v) };
                }
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        let nv = t.w / LANES;
        macro_rules! dispatch {
            ($($r:literal),*) => {
                match (rows, nv) {
                    $(($r, 1) => return kern_q8::<$r, 1>(t),
                      ($r, 2) => return kern_q8::<$r, 2>(t),
                      ($r, 3) => return kern_q8::<$r, 3>(t),)*
                    _ => unreachable!(),
                }
            };
        }
        unsafe { dispatch!(1, 2, 3, 4) }
    }
    let _ = isa;
    unsafe { kern_q8_scalar(t, rows) }
}

/// Portable q8_0 micro-kernel, in the VNNI kernel's order of operations:
/// per block `t = f32(dot) · sb`, then `acc = fma(t, sa, acc)`.
unsafe fn kern_q8_scalar(t: &TileQ8, rows: usize) {
    for i in 0..rows {
        for j in 0..t.ncols {
            let mut acc = 0f32;
            for blk in 0..t.nbl {
                let mut s = unsafe { *t.corr.add(blk * MRQ + i) };
                for g in blk * QK / 4..(blk + 1) * QK / 4 {
                    for q in 0..4 {
                        let x = unsafe { *(t.a as *const i8).add(g * MRQ * 4 + i * 4 + q) } as i32;
                        let y = unsafe { *t.b.add(g * t.w * 4 + j * 4 + q) } as i32;
                        s = s.wrapping_add(x * y);
                    }
                }
                let d = s as f32 * unsafe { *t.sb.add(blk * t.w + j) };
                acc = d.mul_add(unsafe { *t.sa.add(blk * MRQ + i) }, acc);
            }
            let p = unsafe { t.c.add(i * t.ldc + j) };
            unsafe { *p = if t.first { acc } else { *p + acc } };
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // accumulators are indexed [row][vector]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kern_q8<const R: usize, const V: usize>(t: &TileQ8) {
    let mut facc = [[_mm512_setzero_ps(); V]; R];
    let mut iacc = [[_mm512_setzero_si512(); V]; R];
    let mut bv = [_mm512_setzero_si512(); V];
    let (mut a, mut b) = (t.a as *const i8, t.b);
    for blk in 0..t.nbl {
        // Start each block's i32 sums at the row correction −128·Σ a.
        for i in 0..R {
            let x = _mm512_set1_epi32(unsafe { *t.corr.add(blk * MRQ + i) });
            for v in 0..V {
                iacc[i][v] = x;
            }
        }
        for _ in 0..QK / 4 {
            for v in 0..V {
                bv[v] = unsafe { _mm512_loadu_si512(b.add(v * 64) as *const _) };
            }
            for i in 0..R {
                let x = _mm512_set1_epi32(unsafe { (a.add(i * 4) as *const i32).read_unaligned() });
                for v in 0..V {
                    iacc[i][v] = _mm512_dpbusd_epi32(iacc[i][v], bv[v], x);
                }
            }
            a = unsafe { a.add(MRQ * 4) };
            b = unsafe { b.add(t.w * 4) };
        }
        for v in 0..V {
            let sb = unsafe { _mm512_loadu_ps(t.sb.add(blk * t.w + v * LANES)) };
            for i in 0..R {
                let d = _mm512_mul_ps(_mm512_cvtepi32_ps(iacc[i][v]), sb);
                let sa = _mm512_set1_ps(unsafe { *t.sa.add(blk * MRQ + i) });
                facc[i][v] = _mm512_fmadd_ps(d, sa, facc[i][v]);
            }
        }
    }
    for i in 0..R {
        for v in 0..V {
            let col = v * LANES;
            if col >= t.ncols {
                break;
            }
            let mask = lane_mask(t.ncols - col);
            let p = unsafe { t.c.add(i * t.ldc + col) };
            let mut x = facc[i][v];
            if !t.first {
                x = _mm512_add_ps(x, unsafe { _mm512_maskz_loadu_ps(mask, p) });
            }
            unsafe { _mm512_mask_storeu_ps(p, mask, x) };
        }
    }
}


/// The AVX2 q8_0 micro-kernel on rows `i0 .. i0 + R` and vectors
/// `v0 .. v0 + V`, in the portable kernel's order of operations.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // accumulators are indexed [row][quarter]
#[target_feature(enable = "avx2,fma")]
unsafe fn kern_q8_avx2<const R: usize, const V: usize>(t: &TileQ8, i0: usize, v0: usize) {
    // f32 sums per 8 columns, and each block's i32 sums per 4 columns × 2 lanes.
    let mut facc = [[_mm256_setzero_ps(); 6]; R];
    let mut iacc = [[_mm256_setzero_si256(); 12]; R];
    // One row over a whole panel (V = 3): its 12 i32 sums, a B vector and
    // the A broadcast fill 14 of the 16 registers, so its 6 f32 sums live in
    // memory, read and written once a block (32 k), not in the k loop;
    // `black_box` hides where the pointer points, so the compiler keeps them
    // there rather than choosing what to spill.
    let spill = R == 1 && V == 3;
    let mut fmem = [0f32; 48];
    let fm = std::hint::black_box(fmem.as_mut_ptr());
    let mut a = unsafe { (t.a as *const i16).add(i0 * 4) };
    let mut b = unsafe { t.b.add(v0 * 64) };
    for blk in 0..t.nbl {
        for i in 0..R {
            for q in 0..4 * V {
                iacc[i][q] = _mm256_setzero_si256();
            }
        }
        for _ in 0..QK / 4 {
            unsafe { madd_k4::<R, V, 12>(&mut iacc, a, b) };
            a = unsafe { a.add(MRQ * 4) };
            b = unsafe { b.add(t.w * 4) };
        }
        for i in 0..R {
            // The block's dot product starts at the row correction −128·Σ a.
            let corr = _mm256_set1_epi32(unsafe { *t.corr.add(blk * MRQ + i0 + i) });
            let sa = _mm256_set1_ps(unsafe { *t.sa.add(blk * MRQ + i0 + i) });
            for h in 0..2 * V {
                let dot = _mm256_add_epi32(corr, unsafe { columns8(iacc[i][2 * h], iacc[i][2 * h + 1]) });
                let sb = unsafe { _mm256_loadu_ps(t.sb.add(blk * t.w + v0 * LANES + h * 8)) };
                let d = _mm256_mul_ps(_mm256_cvtepi32_ps(dot), sb);
                if spill {
                    let f = unsafe { fm.add(h * 8) };
                    unsafe { _mm256_storeu_ps(f, _mm256_fmadd_ps(d, sa, _mm256_loadu_ps(f))) };
                } else {
                    facc[i][h] = _mm256_fmadd_ps(d, sa, facc[i][h]);
                }
            }
        }
    }
    for i in 0..R {
        for h in 0..2 * V {
            let col = v0 * LANES + h * 8;
            if col >= t.ncols {
                break;
            }
            let p = unsafe { t.c.add((i0 + i) * t.ldc + col) };
            let mut out = [0f32; 8];
            let sum = if spill { unsafe { _mm256_loadu_ps(fm.add(h * 8)) } } else { facc[i][h] };
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
            if !t.first {
                for (o, j) in out.iter_mut().zip(0..(t.ncols - col).min(8)) {
                    *o += unsafe { *p.add(j) };
                }
            }
            unsafe { store8(p, out, t.ncols - col) };
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Against naive references, on the SIMD and the portable path, 1 to 3 threads.

    use super::*;

    pub(crate) struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        pub fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn i8s(&mut self, len: usize) -> Vec<i8> {
            (0..len).map(|_| self.next() as i8).collect()
        }
        pub fn f32(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        }
    }

    /// A [`Par`] on scoped threads (the library passes its pool).
    pub(crate) fn scoped(tasks: usize, body: &(dyn Fn(usize) + Sync)) {
        std::thread::scope(|s| {
            for t in 1..tasks {
                s.spawn(move || body(t));
            }
            if tasks > 0 {
                body(0);
            }
        });
    }

    /// (threads, kernel) for every kernel this CPU runs.
    fn paths() -> Vec<(usize, Isa)> {
        let mut v = vec![(1, Isa::Portable), (2, Isa::Portable)];
        if avx2_available() {
            v.extend([(1, Isa::Avx2), (3, Isa::Avx2)]);
        }
        if vnni_available() {
            v.extend([(1, Isa::Vnni), (3, Isa::Vnni)]);
        }
        v
    }

    fn check_i8(rng: &mut Rng, m: usize, n: usize, k: usize) {
        let (a, b) = (rng.i8s(m * k), rng.i8s(n * k));
        let mut want = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).map(|kk| a[i * k + kk] as i32 * b[j * k + kk] as i32).sum();
            }
        }
        let pb = PackedI8::pack(&b, n, k);
        for (threads, isa) in paths() {
            let mut c = vec![7i32; m * n];
            gemm_i8(m, &a, k, &pb, &mut c, threads, &scoped, isa);
            assert!(c == want, "gemm_i8 m={m} n={n} k={k} threads={threads} {isa:?}");
        }
    }

    #[test]
    fn i8_equals_the_exact_sums() {
        let mut rng = Rng(0x1234_5678);
        for _ in 0..60 {
            let (m, n, k) = (1 + rng.below(70), 1 + rng.below(70), 1 + rng.below(70));
            check_i8(&mut rng, m, n, k);
        }
        for (m, n, k) in [(130, 127, 129), (1, 700, 1031), (9, 100, 611)] {
            check_i8(&mut rng, m, n, k);
        }
        // All −128: the largest products, and the weight offset's worst case.
        let (m, n, k) = (17, 50, 4099);
        let pb = PackedI8::pack(&vec![-128i8; n * k], n, k);
        for (threads, isa) in paths() {
            let mut c = vec![0i32; m * n];
            gemm_i8(m, &vec![-128i8; m * k], k, &pb, &mut c, threads, &scoped, isa);
            assert!(c.iter().all(|&x| x == 16384 * k as i32));
        }
    }

    fn check_q8(rng: &mut Rng, m: usize, n: usize, k: usize) {
        let nb = k / 32;
        let (a, b) = (rng.i8s(m * k), rng.i8s(n * k));
        let sa: Vec<f32> = (0..m * nb).map(|_| rng.f32() * 0.01).collect();
        let sb: Vec<f32> = (0..n * nb).map(|_| rng.f32() * 0.01).collect();
        let pb = PackedQ8_0::pack(&b, &sb, n, k);
        let mut first: Option<Vec<f32>> = None;
        for (threads, isa) in paths() {
            let mut c = vec![f32::NAN; m * n];
            gemm_q8_0(m, &a, &sa, &pb, &mut c, threads, &scoped, isa);
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut mag) = (0f64, 0f64);
                    for blk in 0..nb {
                        let d: i32 = (blk * 32..blk * 32 + 32).map(|kk| a[i * k + kk] as i32 * b[j * k + kk] as i32).sum();
                        let t = sa[i * nb + blk] as f64 * sb[j * nb + blk] as f64 * d as f64;
                        want += t;
                        mag += t.abs();
                    }
                    // f32 accumulation of nb terms: 1e-5 of their magnitude.
                    let got = c[i * n + j] as f64;
                    assert!((got - want).abs() <= 1e-5 * mag, "q8_0 m={m} n={n} k={k} ({i},{j}): {got} vs {want}");
                }
            }
            match &first {
                None => first = Some(c),
                Some(f) => assert!(f.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()), "q8_0 paths differ m={m} n={n} k={k}"),
            }
        }
    }

    #[test]
    fn q8_0_within_f32_accumulation_and_the_same_bits_on_every_path() {
        let mut rng = Rng(7);
        for _ in 0..30 {
            let (m, n, k) = (1 + rng.below(70), 1 + rng.below(70), 32 * (1 + rng.below(6)));
            check_q8(&mut rng, m, n, k);
        }
        for (m, n, k) in [(1, 300, 1024), (70, 130, 512)] {
            check_q8(&mut rng, m, n, k);
        }
    }
}
