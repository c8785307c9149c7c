//! bf16 × bf16 → f32 GEMM on AMX-BF16 tiles (`tdpbf16ps`) or AVX-512 BF16
//! (`vdpbf16ps`): `C = A · B` with `A` `[m, k]` and `B` `[k, n]` of any
//! strides, `C` `[m, n]` row-major `f32`.
//!
//! # Why hand-written
//! No maintained Rust crate has an AVX512-BF16 or AMX kernel: the `gemm`
//! crate converts bf16 to f32 and runs its f32 kernel, so bf16 buys memory but
//! no speed.
//!
//! # Which kernel
//! On Sapphire/Emerald Rapids `vdpbf16ps` zmm issues only every 2 cycles
//! (measured: half the fp32 FMA peak), so for compute-bound shapes it is
//! *slower* than an f32 GEMM; what pays there is AMX (`tdpbf16ps`, 16×16×32
//! multiply-adds per instruction). [`Kernel::Best`] therefore uses AMX for
//! `m >= AMX_MIN_M` when the CPU has it and Linux grants the tile state, and
//! `vdpbf16ps` otherwise: small `m` is memory-bound, where streaming half the
//! bytes of f32 is what counts (and on CPUs where `vdpbf16ps` is full rate,
//! e.g. Zen 4, it is the compute kernel too). AMX needs inline assembly (its
//! intrinsics are not stable) and `arch_prctl(ARCH_REQ_XCOMP_PERM)`.
//!
//! # How it maps onto `vdpbf16ps`
//! `vdpbf16ps acc, x, y` adds to each `f32` lane `j` the two products
//! `x[2j+1]·y[2j+1]` and `x[2j]·y[2j]` of bf16 pairs. So both operands are
//! packed with pairs of consecutive k side by side:
//! * B ([`PackedBf16`]): panels of [`NR`] = 48 columns (the last rounded up to
//!   a multiple of 16, zero-filled), each `[k2][w][2]` bf16, `k2 = ceil(k/2)`:
//!   16 columns × one k pair make one 64-byte vector. Panels follow each
//!   other, so `m = 1` streams the weights once.
//! * A (per call): row panels of `MR` rows, `[k2][MR][2]`; each 4-byte pair is
//!   broadcast to all lanes.
//!
//! Odd k is padded with +0.0 on both sides, which adds nothing.
//!
//! The AMX kernel reads B straight from the same packed panels (16 pairs ×
//! 16 columns is one tile, at the panel's row stride; `k2` is padded to 16
//! pairs for it) and packs A into whole 16 × 32 tiles; a 2 × 2 block of C
//! tiles uses all 8 tile registers. AMX sums in its own order, so its results
//! differ from the other two kernels' in rounding (same error bound).
//!
//! Blocking as in `qgemm.rs`: a 48 × 256 bf16 micro-panel of B (24 KiB)
//! stays in L1 while the row panels of an `MC × KC` block of A (L2) go by;
//! C is stored by the first k block and accumulated by the later ones.
//!
//! # Numerics and the portable path
//! A product of two bf16 is exact in f32 (8 + 8 significant bits ≤ 24), so
//! the hardware's fused multiply-adds are plain f32 additions of exact
//! products: per pair, `acc += x_odd·y_odd; acc += x_even·y_even`. The
//! portable kernel (no AVX512-BF16, or [`Kernel::Portable`]) does just that, on the
//! same packed data and blocking, so the two paths agree bit for bit on
//! normal numbers. They can differ only where `vdpbf16ps` flushes: it treats
//! denormal inputs as zero and flushes denormal results (DAZ/FTZ), and rounds
//! to nearest-even whatever MXCSR says.
//! Error bound versus exact arithmetic: `|err| ≤ k·2⁻²⁴·Σ|a||b|` (k f32
//! additions with relative error 2⁻²⁴ each, to first order).
//!
//! # Threads
//! As in `qgemm.rs`: split over column panels through a `par(tasks, body)`
//! callback ([`Par`]), the native pool's `par::for_each`.

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;

use half::bf16;

/// A parallel loop: `par(tasks, body)` runs `body(0) .. body(tasks - 1)` and
/// returns when all have run.
pub type Par<'a> = dyn Fn(usize, &(dyn Fn(usize) + Sync)) + Sync + 'a;

/// Whether the AVX512-BF16 kernels can run on this CPU.
pub fn bf16_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Columns per B panel: 3 vectors of 16 f32 lanes.
pub const NR: usize = 48;
const LANES: usize = 16;
/// Rows per A panel: 8 × 3 = 24 accumulators + 3 B vectors + a broadcast.
const MR: usize = 8;
/// k per cache block: 48 × 256 bf16 = 24 KiB of B in the 48 KiB L1.
const KC: usize = 256;
/// Rows per cache block: 256 × 256 bf16 = 128 KiB of packed A in L2.
const MC: usize = 256;

#[derive(Clone, Copy)]
struct SyncPtr<T>(*mut T);
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}

fn panel_width(n: usize, p: usize) -> usize {
    (n - p * NR).min(NR).div_ceil(LANES) * LANES
}

/// `B` `[k, n]` packed into pair-interleaved column panels (module doc).
pub struct PackedBf16 {
    n: usize,
    k: usize,
    k2: usize,
    /// `k2` rounded up to 16 pairs: the AMX kernel reads B in tiles of 16
    /// pairs, and the zero padding adds nothing.
    k2p: usize,
    data: Vec<u16>,
}

impl PackedBf16 {
    /// Packs `B[kk, j] = b[kk * rsb + j * csb]`, `k × n`. For weights stored
    /// `[n, k]` (a linear layer's `x · Wᵀ`), pass `rsb = 1, csb = k`.
    pub fn pack(b: &[bf16], rsb: usize, csb: usize, k: usize, n: usize) -> PackedBf16 {
        if k > 0 && n > 0 {
            assert!(b.len() > (k - 1) * rsb + (n - 1) * csb, "b too small for its strides");
        }
        let k2 = k.div_ceil(2);
        let k2p = k2.div_ceil(16) * 16;
        let np = n.div_ceil(NR);
        let total: usize = (0..np).map(|p| panel_width(n, p)).sum::<usize>() * k2p * 2;
        let mut data = vec![0u16; total];
        let mut pk = PackedBf16 { n, k, k2, k2p, data: Vec::new() };
        if csb == 1 {
            // Row-major B: walk it row pair by row pair, front to back (going
            // panel by panel would touch a new page for every 96 bytes); each
            // pair interleaves into one contiguous run of every panel.
            for g in 0..k2 {
                let r0 = &b[2 * g * rsb..][..n];
                let r1 = (2 * g + 1 < k).then(|| &b[(2 * g + 1) * rsb..][..n]);
                for p in 0..np {
                    let (w, cols) = (panel_width(n, p), (n - p * NR).min(NR));
                    let dst = &mut data[pk.panel_offset(p) + g * w * 2..][..cols * 2];
                    let x0 = &r0[p * NR..p * NR + cols];
                    match r1 {
                        Some(r1) => {
                            for ((d, x0), x1) in dst.chunks_exact_mut(2).zip(x0).zip(&r1[p * NR..p * NR + cols]) {
                                d[0] = x0.to_bits();
                                d[1] = x1.to_bits();
                            }
                        }
                        None => {
                            for (d, x0) in dst.chunks_exact_mut(2).zip(x0) {
                                d[0] = x0.to_bits();
                            }
                        }
                    }
                }
            }
        } else {
            for p in 0..np {
                let w = panel_width(n, p);
                let panel = &mut data[pk.panel_offset(p)..][..w * k2p * 2];
                let cols = (n - p * NR).min(NR);
                if csb <= rsb {
                    for kk in 0..k {
                        let dst = &mut panel[(kk / 2) * w * 2 + kk % 2..];
                        for j in 0..cols {
                            dst[j * 2] = b[kk * rsb + (p * NR + j) * csb].to_bits();
                        }
                    }
                } else {
                    // Columns contiguous (e.g. weights stored [n, k]): walk them.
                    for j in 0..cols {
                        for kk in 0..k {
                            panel[(kk / 2) * w * 2 + j * 2 + kk % 2] = b[kk * rsb + (p * NR + j) * csb].to_bits();
                        }
                    }
                }
            }
        }
        pk.data = data;
        pk
    }



    fn panel_offset(&self, p: usize) -> usize {
        p * NR * self.k2p * 2
    }
}

/// Which kernel [`gemm_bf16_packed_with`] runs. Anything the CPU lacks falls
/// back to the next one down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AMX tiles when available and `m >= AMX_MIN_M`, else `vdpbf16ps`,
    /// else portable.
    Best,
    /// `vdpbf16ps`, else portable (the tests force it; the library runs `Best`).
    #[cfg_attr(not(test), allow(dead_code))]
    Avx512Bf16,
    /// The portable scalar kernel.
    Portable,
}

/// Below this many rows the AMX tiles (16 rows) would mostly multiply
/// padding; the product is memory-bound there and `vdpbf16ps` streams B.
pub const AMX_MIN_M: usize = 16;

/// Whether the AMX-BF16 path can run (CPU support and the kernel's leave).
pub fn amx_available() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        amx::available()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        false
    }
}

/// The full entry point: `threads` tasks through `par`; `kernel` picks the
/// implementation (tests use it to force the portable one).
#[allow(clippy::too_many_arguments)]
pub fn gemm_bf16_packed_with(
    m: usize,
    a: &[bf16],
    rsa: usize,
    csa: usize,
    pb: &PackedBf16,
    c: &mut [f32],
    threads: usize,
    par: &Par,
    kernel: Kernel,
) {
    let (n, k, k2) = (pb.n, pb.k, pb.k2);
    assert!(c.len() >= m * n, "c too small");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    assert!(a.len() > (m - 1) * rsa + (k - 1) * csa, "a too small for its strides");
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if kernel == Kernel::Best && m >= AMX_MIN_M && amx_available() {
        return gemm_amx(m, a, rsa, csa, pb, c, threads, par);
    }
    let simd = kernel != Kernel::Portable && bf16_available();
    let mp = m.div_ceil(MR);
    // Pack A: [mp][k2][MR][2], zero-padded.
    let mut ap = vec![0u16; mp * k2 * MR * 2];
    for i in 0..m {
        let panel = &mut ap[(i / MR) * k2 * MR * 2..];
        let r = (i % MR) * 2;
        if csa == 1 {
            // Contiguous rows: each pair of k moves as one word.
            let row = &a[i * rsa..][..k];
            let mut pairs = row.chunks_exact(2);
            for (g, src) in (&mut pairs).enumerate() {
                panel[g * MR * 2 + r] = src[0].to_bits();
                panel[g * MR * 2 + r + 1] = src[1].to_bits();
            }
            if let [x] = pairs.remainder() {
                panel[(k / 2) * MR * 2 + r] = x.to_bits();
            }
        } else {
            for kk in 0..k {
                panel[(kk / 2) * MR * 2 + r + kk % 2] = a[i * rsa + kk * csa].to_bits();
            }
        }
    }
    // A single row panel reuses nothing across k blocks: stream B whole.
    let kc2 = if mp == 1 { k2 } else { KC / 2 };
    let np = n.div_ceil(NR);
    let tasks = threads.clamp(1, np);
    let cp = SyncPtr(c.as_mut_ptr());
    let body = |t: usize| {
        // Capture the whole Sync wrapper, not its raw-pointer field (edition
        // 2021 closures capture disjoint fields).
        #[allow(clippy::redundant_locals)]
        let cp = cp;
        let (p0, p1) = (t * np / tasks, (t + 1) * np / tasks);
        for pc2 in (0..k2).step_by(kc2) {
            let kl2 = kc2.min(k2 - pc2);
            for ic in (0..mp).step_by(MC / MR) {
                for p in p0..p1 {
                    let w = panel_width(n, p);
                    let bp = unsafe { pb.data.as_ptr().add(pb.panel_offset(p) + pc2 * w * 2) };
                    for ip in ic..(ic + MC / MR).min(mp) {
                        let t = Tile {
                            kl2,
                            a: unsafe { ap.as_ptr().add((ip * k2 + pc2) * MR * 2) },
                            b: bp,
                            bstride: w * 2,
                            c: unsafe { cp.0.add(ip * MR * n + p * NR) },
                            ldc: n,
                            ncols: (n - p * NR).min(NR),
                            first: pc2 == 0,
                        };
                        unsafe { tile(&t, (m - ip * MR).min(MR), w / LANES, simd) };
                    }
                }
            }
        }
    };
    if tasks == 1 { body(0) } else { par(tasks, &body) }
}

/// One micro-kernel call: `rows × ncols` of C over `kl2` pairs of k.
struct Tile {
    kl2: usize,
    /// Packed A at the block's first pair; stride `MR * 2` per pair.
    a: *const u16,
    /// Packed B at the block's first pair; stride `bstride` per pair.
    b: *const u16,
    bstride: usize,
    c: *mut f32,
    ldc: usize,
    ncols: usize,
    /// First k block: store C rather than add to it.
    first: bool,
}

unsafe fn tile(t: &Tile, rows: usize, nv: usize, simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        macro_rules! dispatch {
            ($($r:literal),*) => {
                match (rows, nv) {
                    $(($r, 1) => return kern::<$r, 1>(t),
                      ($r, 2) => return kern::<$r, 2>(t),
                      ($r, 3) => return kern::<$r, 3>(t),)*
                    _ => unreachable!(),
                }
            };
        }
        unsafe { dispatch!(1, 2, 3, 4, 5, 6, 7, 8) }
    }
    let _ = (simd, nv);
    unsafe { kern_scalar(t, rows) }
}

#[inline(always)]
fn f(x: u16) -> f32 {
    f32::from_bits((x as u32) << 16)
}

/// Portable micro-kernel in `vdpbf16ps`'s order: per pair, odd product then
/// even product, each added to the running f32 sum (products are exact).
/// The column loop is innermost so the compiler can vectorize it.
unsafe fn kern_scalar(t: &Tile, rows: usize) {
    let nc = t.ncols;
    for i in 0..rows {
        let mut acc = [0f32; NR];
        for g in 0..t.kl2 {
            let x0 = f(unsafe { *t.a.add(g * MR * 2 + i * 2) });
            let x1 = f(unsafe { *t.a.add(g * MR * 2 + i * 2 + 1) });
            let brow = unsafe { core::slice::from_raw_parts(t.b.add(g * t.bstride), nc * 2) };
            for (j, s) in acc[..nc].iter_mut().enumerate() {
                *s += x1 * f(brow[j * 2 + 1]);
                *s += x0 * f(brow[j * 2]);
            }
        }
        let crow = unsafe { core::slice::from_raw_parts_mut(t.c.add(i * t.ldc), nc) };
        for (d, s) in crow.iter_mut().zip(&acc[..nc]) {
            *d = if t.first { *s } else { *d + *s };
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // accumulators are indexed [row][vector]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn kern<const R: usize, const V: usize>(t: &Tile) {
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    // __m512i and __m512bh are both 64 plain bytes: the casts are free.
    let bh = |x: __m512i| unsafe { core::mem::transmute::<__m512i, __m512bh>(x) };
    let mut bv = [bh(_mm512_setzero_si512()); V];
    let (mut a, mut b) = (t.a, t.b);
    for _ in 0..t.kl2 {
        for v in 0..V {
            bv[v] = bh(unsafe { _mm512_loadu_si512(b.add(v * 32) as *const _) });
        }
        for i in 0..R {
            let x = bh(_mm512_set1_epi32(unsafe { (a.add(i * 2) as *const i32).read_unaligned() }));
            for v in 0..V {
                acc[i][v] = _mm512_dpbf16_ps(acc[i][v], bv[v], x);
            }
        }
        a = unsafe { a.add(MR * 2) };
        b = unsafe { b.add(t.bstride) };
    }
    for i in 0..R {
        for v in 0..V {
            let col = v * LANES;
            if col >= t.ncols {
                break;
            }
            let left = t.ncols - col;
            let mask: u16 = if left >= LANES { 0xffff } else { (1u16 << left) - 1 };
            let p = unsafe { t.c.add(i * t.ldc + col) };
            let mut x = acc[i][v];
            if !t.first {
                x = _mm512_add_ps(x, unsafe { _mm512_maskz_loadu_ps(mask, p) });
            }
            unsafe { _mm512_mask_storeu_ps(p, mask, x) };
        }
    }
}

// ---------------------------------------------------------------------------
// AMX-BF16 (tile) path
// ---------------------------------------------------------------------------

/// AMX tiles, through inline assembly: Rust's AMX intrinsics are not stable.
///
/// Tile use (all 16 rows × 64 bytes): tmm0..3 a 2 × 2 block of C tiles
/// (16 × 16 f32 each), tmm4/5 two A tiles (16 rows × 32 k), tmm6/7 two B
/// tiles (16 k pairs × 16 columns × 2), which are exactly 16 pairs of rows of
/// a [`PackedBf16`] panel read with the panel's row stride.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx {
    use core::arch::asm;
    use std::sync::OnceLock;

    /// Whether the CPU has AMX-BF16 and Linux lets this process use tile
    /// data (asked once, process-wide, with `arch_prctl(ARCH_REQ_XCOMP_PERM)`).
    pub fn available() -> bool {
        static OK: OnceLock<bool> = OnceLock::new();
        *OK.get_or_init(|| {
            // Every AMX CPU has AVX-512; requiring it also keeps AMX off under
            // emulators (valgrind) that hide AVX-512 but may pass leaf 7 through.
            if !is_x86_feature_detected!("avx512f") {
                return false;
            }
            // CPUID.(7,0).EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
            let l7 = core::arch::x86_64::__cpuid_count(7, 0);
            if l7.edx & (1 << 22) == 0 || l7.edx & (1 << 24) == 0 {
                return false;
            }
            const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
            const XFEATURE_XTILEDATA: libc::c_long = 18;
            // SAFETY: arch_prctl with these arguments only changes the process's XSAVE permissions.
            unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
        })
    }

    #[repr(C, align(64))]
    struct Cfg {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    static CFG: Cfg = Cfg {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
        rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
    };

    /// Tile configuration is per thread: each task configures and releases.
    pub unsafe fn config() {
        unsafe { asm!("ldtilecfg [{}]", in(reg) &CFG, options(nostack, readonly)) };
    }

    pub unsafe fn release() {
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    macro_rules! load {
        ($t:literal, $p:expr, $stride:expr) => {
            unsafe {
                asm!(concat!("tileloadd tmm", $t, ", [{p} + {s}*1]"),
                     p = in(reg) $p, s = in(reg) $stride, options(nostack, readonly))
            }
        };
    }
    macro_rules! store {
        ($t:literal, $p:expr, $stride:expr) => {
            unsafe {
                asm!(concat!("tilestored [{p} + {s}*1], tmm", $t),
                     p = in(reg) $p, s = in(reg) $stride, options(nostack))
            }
        };
    }
    macro_rules! dot {
        ($c:literal, $a:literal, $b:literal) => {
            unsafe { asm!(concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b), options(nostack, nomem)) }
        };
    }

    /// One block of up to 2 × 2 C tiles over `steps` steps of 32 k.
    pub struct Block {
        pub steps: usize,
        /// Per row tile: packed A, 1 KiB per step (16 rows × 32 bf16).
        pub a: [*const u16; 2],
        /// Per column tile: B at the first pair, its row stride in bytes
        /// (a step is 16 rows).
        pub b: [*const u16; 2],
        pub bstride: [usize; 2],
        /// Per C tile: where it lives and its row stride in bytes.
        pub c: [[*mut f32; 2]; 2],
        pub cstride: [[usize; 2]; 2],
        pub rt: usize,
        pub ct: usize,
        /// Start from C (later k blocks) rather than from zero.
        pub load_c: bool,
    }

    /// Runs a block. The tiles must be configured ([`config`]).
    pub unsafe fn block(t: &Block) {
        let (two_r, two_c) = (t.rt == 2, t.ct == 2);
        if t.load_c {
            load!(0, t.c[0][0], t.cstride[0][0]);
            if two_c { load!(1, t.c[0][1], t.cstride[0][1]); }
            if two_r { load!(2, t.c[1][0], t.cstride[1][0]); }
            if two_r && two_c { load!(3, t.c[1][1], t.cstride[1][1]); }
        } else {
            unsafe { asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem)) };
        }
        let (mut a0, mut a1) = (t.a[0] as *const u8, t.a[1] as *const u8);
        let (mut b0, mut b1) = (t.b[0] as *const u8, t.b[1] as *const u8);
        let (bs0, bs1) = (t.bstride[0], t.bstride[1]);
        for _ in 0..t.steps {
            load!(4, a0, 64usize);
            load!(6, b0, bs0);
            dot!(0, 4, 6);
            if two_c {
                load!(7, b1, bs1);
                dot!(1, 4, 7);
            }
            if two_r {
                load!(5, a1, 64usize);
                dot!(2, 5, 6);
                if two_c { dot!(3, 5, 7); }
            }
            unsafe {
                a0 = a0.add(1024);
                a1 = a1.wrapping_add(1024);
                b0 = b0.add(16 * bs0);
                b1 = b1.wrapping_add(16 * bs1);
            }
        }
        store!(0, t.c[0][0], t.cstride[0][0]);
        if two_c { store!(1, t.c[0][1], t.cstride[0][1]); }
        if two_r { store!(2, t.c[1][0], t.cstride[1][0]); }
        if two_r && two_c { store!(3, t.c[1][1], t.cstride[1][1]); }
    }
}

/// k per AMX cache block, in steps of 32: a 2-tile column pair of B over 16
/// steps is 32 KiB and stays in L1 while the row tiles of A go by.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const AMX_KSTEPS: usize = 16;
/// Row tiles per AMX cache block: 16 × 16 rows × 512 k × 2 B = 256 KiB of A in L2.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
const AMX_MT: usize = 16;

/// The AMX product. C tiles that stick out of C (row or column tails) go
/// through a per-task scratch tile.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[allow(clippy::too_many_arguments)]
fn gemm_amx(m: usize, a: &[bf16], rsa: usize, csa: usize, pb: &PackedBf16, c: &mut [f32], threads: usize, par: &Par) {
    let (n, k) = (pb.n, pb.k);
    let ks = k.div_ceil(32);
    let mt = m.div_ceil(16);
    // Pack A into whole tiles: [mt][ks][16 rows][32 k], zero-padded.
    let mut ap = vec![0u16; mt * ks * 512];
    for i in 0..m {
        let (it, r) = (i / 16, i % 16);
        if csa == 1 {
            // Contiguous rows: 32 k at a time into one tile row.
            for (s, src) in a[i * rsa..][..k].chunks(32).enumerate() {
                let dst = &mut ap[((it * ks + s) * 16 + r) * 32..][..src.len()];
                for (d, x) in dst.iter_mut().zip(src) {
                    *d = x.to_bits();
                }
            }
        } else {
            for kk in 0..k {
                ap[((it * ks + kk / 32) * 16 + r) * 32 + kk % 32] = a[i * rsa + kk * csa].to_bits();
            }
        }
    }
    // Column tiles of 16, numbered across panels.
    let nt = n.div_ceil(16);
    let tile_of = |t: usize| -> (*const u16, usize) {
        let (p, v) = (t / 3, t % 3);
        let w = panel_width(n, p);
        (unsafe { pb.data.as_ptr().add(pb.panel_offset(p) + v * 32) }, w * 4)
    };
    // Tasks take ranges of column-tile pairs.
    let pairs = nt.div_ceil(2);
    let tasks = threads.clamp(1, pairs);
    let cp = SyncPtr(c.as_mut_ptr());
    let body = |task: usize| {
        // Capture the whole Sync wrapper, not its raw-pointer field (edition
        // 2021 closures capture disjoint fields).
        #[allow(clippy::redundant_locals)]
        let cp = cp;
        let (q0, q1) = (task * pairs / tasks, (task + 1) * pairs / tasks);
        // Scratch C tiles for the tails, one per position in the block.
        let mut scratch = [[[0f32; 256]; 2]; 2];
        unsafe { amx::config() };
        for k0 in (0..ks).step_by(AMX_KSTEPS) {
            let steps = AMX_KSTEPS.min(ks - k0);
            let load_c = k0 > 0;
            for ib in (0..mt).step_by(AMX_MT) {
                for q in q0..q1 {
                    let ct = (nt - 2 * q).min(2);
                    let (b0, bs0) = tile_of(2 * q);
                    let (b1, bs1) = if ct == 2 { tile_of(2 * q + 1) } else { (b0, bs0) };
                    for it in (ib..(ib + AMX_MT).min(mt)).step_by(2) {
                        let rt = (mt - it).min(2);
                        let mut blk = amx::Block {
                            steps,
                            a: [
                                unsafe { ap.as_ptr().add((it * ks + k0) * 512) },
                                unsafe { ap.as_ptr().add(((it + rt - 1) * ks + k0) * 512) },
                            ],
                            b: [unsafe { b0.add(k0 * 16 * bs0 / 2) }, unsafe { b1.add(k0 * 16 * bs1 / 2) }],
                            bstride: [bs0, bs1],
                            c: [[core::ptr::null_mut(); 2]; 2],
                            cstride: [[0; 2]; 2],
                            rt,
                            ct,
                            load_c,
                        };
                        // Where each C tile goes: straight into C when whole,
                        // else into scratch (filled from C first if needed).
                        let mut tails = [[None; 2]; 2];
                        for r in 0..rt {
                            for cc in 0..ct {
                                let (i0, j0) = ((it + r) * 16, (2 * q + cc) * 16);
                                let (rows, cols) = ((m - i0).min(16), (n - j0).min(16));
                                let cptr = unsafe { cp.0.add(i0 * n + j0) };
                                if rows == 16 && cols == 16 {
                                    blk.c[r][cc] = cptr;
                                    blk.cstride[r][cc] = n * 4;
                                } else {
                                    let s = &mut scratch[r][cc];
                                    if load_c {
                                        for y in 0..rows {
                                            let src = unsafe { core::slice::from_raw_parts(cptr.add(y * n), cols) };
                                            s[y * 16..y * 16 + cols].copy_from_slice(src);
                                        }
                                    }
                                    blk.c[r][cc] = s.as_mut_ptr();
                                    blk.cstride[r][cc] = 64;
                                    tails[r][cc] = Some((cptr, rows, cols));
                                }
                            }
                        }
                        unsafe { amx::block(&blk) };
                        for r in 0..rt {
                            for cc in 0..ct {
                                if let Some((cptr, rows, cols)) = tails[r][cc] {
                                    for y in 0..rows {
                                        let dst = unsafe { core::slice::from_raw_parts_mut(cptr.add(y * n), cols) };
                                        dst.copy_from_slice(&scratch[r][cc][y * 16..y * 16 + cols]);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        unsafe { amx::release() };
    };
    if tasks == 1 { body(0) } else { par(tasks, &body) }
}

#[cfg(test)]
mod tests {
    use super::super::qgemm::tests::{scoped, Rng};
    use super::*;

    fn check(rng: &mut Rng, m: usize, n: usize, k: usize, a_trans: bool, b_nk: bool) {
        let a: Vec<bf16> = (0..m * k).map(|_| bf16::from_f32(rng.f32())).collect();
        let b: Vec<bf16> = (0..k * n).map(|_| bf16::from_f32(rng.f32())).collect();
        let (rsa, csa) = if a_trans { (1, m) } else { (k, 1) };
        let (rsb, csb) = if b_nk { (1, k) } else { (n, 1) };
        let pb = PackedBf16::pack(&b, rsb, csb, k, n);
        let mut first: Option<Vec<f32>> = None;
        let kernels = [(1, Kernel::Avx512Bf16), (3, Kernel::Avx512Bf16), (1, Kernel::Portable), (2, Kernel::Portable), (1, Kernel::Best), (3, Kernel::Best)];
        for (threads, kernel) in kernels {
            let mut c = vec![f32::NAN; m * n];
            gemm_bf16_packed_with(m, &a, rsa, csa, &pb, &mut c, threads, &scoped, kernel);
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut mag) = (0f64, 0f64);
                    for kk in 0..k {
                        let p = a[i * rsa + kk * csa].to_f64() * b[kk * rsb + j * csb].to_f64();
                        want += p;
                        mag += p.abs();
                    }
                    // k f32 additions, each off by at most 2^-24 relative.
                    let (got, tol) = (c[i * n + j] as f64, k as f64 * 2f64.powi(-24) * mag);
                    assert!((got - want).abs() <= tol, "bf16 m={m} n={n} k={k} ({i},{j}): {got} vs {want}, tol {tol}");
                }
            }
            // vdpbf16ps and the portable kernel agree bit for bit; AMX sums in its own order.
            if kernel == Kernel::Best && amx_available() && m >= AMX_MIN_M {
                continue;
            }
            match &first {
                None => first = Some(c),
                Some(f) => assert!(f.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()), "bf16 paths differ m={m} n={n} k={k} {kernel:?}"),
            }
        }
    }

    #[test]
    fn bf16_within_f32_accumulation_for_any_strides() {
        let mut rng = Rng(99);
        for it in 0..60 {
            let (m, n, k) = (1 + rng.below(70), 1 + rng.below(70), 1 + rng.below(70));
            check(&mut rng, m, n, k, it % 2 == 1, it % 3 == 0);
        }
        for (m, n, k) in [(1, 1000, 513), (130, 100, 300), (17, 300, 200)] {
            check(&mut rng, m, n, k, false, m == 1);
        }
    }
}
