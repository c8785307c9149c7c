//! The native backend's random numbers: PyTorch's CPU generator, so that
//! after `manual_seed(s)` each op gives the values that `torch.manual_seed(s)`
//! and the same torch call give on the CPU, call after call.
//!
//! The engine is ATen's mt19937 (`aten/src/ATen/core/MT19937RNGEngine.h`)
//! with `CPUGeneratorImpl`'s 32- and 64-bit draws and its cached second
//! Box–Muller value (`aten/src/ATen/CPUGeneratorImpl.cpp`); the
//! distributions are those of `aten/src/ATen/core/DistributionsHelper.h` and
//! `TransformationHelper.h`, filled in the order of the kernels of
//! `aten/src/ATen/native/cpu/DistributionTemplates.h`. A tensor's draws are
//! all taken under one lock, as PyTorch holds the generator's mutex per kernel.

use std::sync::{Mutex, OnceLock};

use super::elem::{cast, with_elem, Elem};
use super::tensor::Raw;
use crate::dtype::DType;

const N: usize = 624;
const M: usize = 397;
/// `c10::detail::default_rng_seed_val`: the seed of a generator never seeded.
const DEFAULT_SEED: u64 = 67280421310721;
/// `sizeof(CPUGeneratorImplState)` on x86-64: `torch.get_rng_state()`'s length.
pub const STATE_BYTES: usize = 5056;

#[derive(Clone)]
pub struct Gen {
    seed: u64,
    left: u32,
    next: u32,
    s: [u32; N],
    /// `next_double_normal_sample_`: the sine half of the last serial Box–Muller pair.
    normal: Option<f64>,
    /// `next_float_normal_sample_`: never set by a CPU kernel, kept for the state's round trip.
    normal_f32: Option<f32>,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        let mut s = [0u32; N];
        s[0] = seed as u32;
        for j in 1..N {
            s[j] = 1_812_433_253u32.wrapping_mul(s[j - 1] ^ (s[j - 1] >> 30)).wrapping_add(j as u32);
        }
        Gen { seed, left: 1, next: 0, s, normal: None, normal_f32: None }
    }

    fn twist(&mut self) {
        let s = &mut self.s;
        let mix = |u: u32, v: u32| (((u & 0x8000_0000) | (v & 0x7fff_ffff)) >> 1) ^ if v & 1 != 0 { 0x9908_b0df } else { 0 };
        for j in 0..N - M {
            s[j] = s[j + M] ^ mix(s[j], s[j + 1]);
        }
        for j in N - M..N - 1 {
            s[j] = s[j + M - N] ^ mix(s[j], s[j + 1]);
        }
        s[N - 1] = s[M - 1] ^ mix(s[N - 1], s[0]);
        (self.left, self.next) = (N as u32, 0);
    }

    /// `CPUGeneratorImpl::random()`.
    #[inline]
    pub fn random(&mut self) -> u32 {
        self.left -= 1;
        if self.left == 0 {
            self.twist();
        }
        // A state loaded from bytes may pair `left` and `next` inconsistently: wrap, never index out.
        let mut y = self.s[self.next as usize % N];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `CPUGeneratorImpl::random64()`: the first draw is the high half.
    #[inline]
    pub fn random64(&mut self) -> u64 {
        let hi = self.random();
        (u64::from(hi) << 32) | u64::from(self.random())
    }

    /// `uniform_real_distribution<float>(0, 1)`: 24 bits of a 32-bit draw.
    #[inline]
    pub fn unit_f32(&mut self) -> f32 {
        (self.random() & 0xff_ffff) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// `uniform_real_distribution<double>(0, 1)`: 53 bits of a 64-bit draw.
    #[inline]
    pub fn unit_f64(&mut self) -> f64 {
        (self.random64() & ((1 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `normal_distribution<double>(0, 1)`: Box–Muller, the sine kept for the next call.
    pub fn normal(&mut self) -> f64 {
        if let Some(v) = self.normal.take() {
            return v * 1.0 + 0.0;
        }
        let (u1, u2) = (self.unit_f64(), self.unit_f64());
        let r = (-2.0 * (-u2).ln_1p()).sqrt();
        let th = 2.0 * std::f64::consts::PI * u1;
        self.normal = Some(r * th.sin());
        // `transformation::normal(v, 0, 1)` is `v * 1 + 0`: a -0 comes out +0.
        r * th.cos() * 1.0 + 0.0
    }

    /// `exponential_distribution<double>(1)`: `-log1p(-u)` (TransformationHelper.h, CPU branch).
    pub fn exponential(&mut self) -> f64 {
        -(-self.unit_f64()).ln_1p()
    }
}

static GEN: Mutex<Option<Gen>> = Mutex::new(None);

pub fn manual_seed(seed: i64) {
    *GEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Gen::new(seed as u64));
}

/// Runs `f` on the process's generator, holding its lock throughout: one
/// tensor's draws come out in one run, in PyTorch's order.
pub fn with_gen<R>(f: impl FnOnce(&mut Gen) -> R) -> R {
    let mut g = GEN.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(|| Gen::new(DEFAULT_SEED)))
}

/// `torch.randn` into a fresh contiguous tensor.
pub fn randn(t: &Raw) {
    with_gen(|g| fill_randn(g, t));
}

/// Standard normal values into each tensor in turn, from a generator of
/// this call's own seeded with `seed` (as `torch.Generator().manual_seed(seed)`):
/// the process's generator is neither read nor reseeded, so threads drawing
/// at once each get their seed's values.
pub fn randn_seeded(ts: &[&Raw], seed: i64) {
    let mut g = Gen::new(seed as u64);
    ts.iter().for_each(|t| fill_randn(&mut g, t));
}

/// `normal_kernel` (DistributionTemplates.h): 16 or more contiguous values go
/// through `normal_fill` (uniforms first, Box–Muller over blocks of 16, the
/// last 16 redrawn when the size is not a multiple of 16); fewer are drawn
/// one by one from `normal_distribution<double>`, which caches its sine.
fn fill_randn(g: &mut Gen, t: &Raw) {
    let n = t.numel();
    match t.dtype() {
        DType::F32 if n >= 16 => normal_fill(t.slice_mut::<f32>(), || g.unit_f32(), fill16_f32),
        DType::F64 if n >= 16 => normal_fill(t.slice_mut::<f64>(), || g.unit_f64(), fill16_f64),
        DType::F16 if n >= 16 => normal_fill_reduced(t.slice_mut::<half::f16>(), g),
        DType::BF16 if n >= 16 => normal_fill_reduced(t.slice_mut::<half::bf16>(), g),
        dt => with_elem!(dt, T => t.slice_mut::<T>().iter_mut().for_each(|x| *x = cast::<f64, T>(g.normal()))),
    }
}

fn normal_fill<T: Copy>(d: &mut [T], mut unit: impl FnMut() -> T, fill16: fn(&mut [T])) {
    let n = d.len();
    d.iter_mut().for_each(|x| *x = unit());
    d.chunks_exact_mut(16).for_each(fill16);
    if n % 16 != 0 {
        let tail = &mut d[n - 16..];
        tail.iter_mut().for_each(|x| *x = unit());
        fill16(tail);
    }
}

/// bf16 and fp16 compute in f32 through a 16-value buffer, drawing only the
/// blocks they fill (so fewer draws than the f32 path for a ragged size).
fn normal_fill_reduced<T: Elem<Acc = f32>>(d: &mut [T], g: &mut Gen) {
    let n = d.len();
    let mut block = |at: usize, d: &mut [T]| {
        let mut buf = [0f32; 16];
        buf.iter_mut().for_each(|x| *x = g.unit_f32());
        fill16_f32(&mut buf);
        d[at..at + 16].iter_mut().zip(buf).for_each(|(x, v)| *x = T::down(v));
    };
    (0..n / 16).for_each(|i| block(i * 16, d));
    if n % 16 != 0 {
        block(n - 16, d);
    }
}

/// `NormalFill16<double>`: libm's log, cos and sin, as `std::` calls them.
fn fill16_f64(d: &mut [f64]) {
    for j in 0..8 {
        let radius = (-2.0 * (1.0 - d[j]).ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * d[j + 8];
        // `std::fma(v, std = 1, mean = 0)`.
        (d[j], d[j + 8]) = (radius * theta.cos() + 0.0, radius * theta.sin() + 0.0);
    }
}

/// Which `NormalFill16<float>` PyTorch runs here: its AVX2 kernel wherever the
/// CPU has AVX2 and FMA (`normal_stub` is never dispatched to AVX512, see
/// DistributionKernels.cpp), unless `ATEN_CPU_CAPABILITY=default` asks for
/// the scalar one.
fn avx2() -> bool {
    static AVX2: OnceLock<bool> = OnceLock::new();
    *AVX2.get_or_init(|| {
        let asked = std::env::var("ATEN_CPU_CAPABILITY").map(|v| v.eq_ignore_ascii_case("default")).unwrap_or(false);
        #[cfg(target_arch = "x86_64")]
        return !asked && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        #[cfg(not(target_arch = "x86_64"))]
        return !asked && false;
    })
}

fn fill16_f32(d: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2 and FMA (checked by `avx2`).
        return unsafe { fill16_avx2(d) };
    }
    for j in 0..8 {
        let radius = (-2.0 * (1.0 - d[j]).ln()).sqrt();
        let theta = (2.0 * std::f64::consts::PI * f64::from(d[j + 8])) as f32;
        (d[j], d[j + 8]) = (radius * theta.cos() + 0.0, radius * theta.sin() + 0.0);
    }
}

/// `NormalFill16<float>` for AVX2 (`normal_fill_16_AVX2`): Cephes' log and
/// sincos of `avx_mathfun.h` over 8 lanes, with the FMAs GCC contracts their
/// multiply-adds into (each product whose only use is an addition, first
/// product first), so every lane rounds as ATen's does.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fill16_avx2(d: &mut [f32]) {
    use std::arch::x86_64::*;
    debug_assert!(d.len() >= 16);
    let p = d.as_mut_ptr();
    // SAFETY: 16 floats at `p` (the callers pass blocks of 16); unaligned loads and stores.
    let (u1, u2) = unsafe { (_mm256_sub_ps(_mm256_set1_ps(1.0), _mm256_loadu_ps(p)), _mm256_loadu_ps(p.add(8))) };
    let radius = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0), log256_ps(u1)));
    let (sin, cos) = sincos256_ps(_mm256_mul_ps(_mm256_set1_ps((2.0 * std::f64::consts::PI) as f32), u2));
    // `fmadd(n, std = 1, mean = 0)`: n + 0 (a -0 becomes +0).
    let zero = _mm256_setzero_ps();
    // SAFETY: as the loads.
    unsafe {
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_mul_ps(radius, cos), zero));
        _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_mul_ps(radius, sin), zero));
    }
}

/// avx_mathfun.h's constants are double literals stored as floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn splat(x: f64) -> std::arch::x86_64::__m256 {
    std::arch::x86_64::_mm256_set1_ps(x as f32)
}

/// `log256_ps` (arguments in (0, 1] here; <= 0 gives NaN as there).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn log256_ps(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    const P: [f64; 9] = [
        7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1,
        -2.4999993993E-1, 3.3333331174E-1,
    ];
    let one = _mm256_set1_ps(1.0);
    let invalid = _mm256_cmp_ps::<_CMP_LE_OS>(x, _mm256_setzero_ps());
    let x = _mm256_max_ps(x, _mm256_set1_ps(f32::MIN_POSITIVE));
    let bits = _mm256_castps_si256(x);
    let e = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32::<23>(bits), _mm256_set1_epi32(0x7f))), one);
    let mant = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(!0x7f80_0000)), _mm256_castps_si256(_mm256_set1_ps(0.5)));
    let x = _mm256_castsi256_ps(mant);
    let small = _mm256_cmp_ps::<_CMP_LT_OS>(x, splat(0.707106781186547524));
    let e = _mm256_sub_ps(e, _mm256_and_ps(one, small));
    let x = _mm256_add_ps(_mm256_sub_ps(x, one), _mm256_and_ps(x, small));
    let z = _mm256_mul_ps(x, x);
    let mut y = splat(P[0]);
    for &c in &P[1..] {
        y = _mm256_fmadd_ps(y, x, splat(c));
    }
    let y = _mm256_mul_ps(y, x);
    let y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, splat(-2.12194440e-4)));
    let y = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.5), y);
    let r = _mm256_fmadd_ps(e, splat(0.693359375), _mm256_add_ps(x, y));
    _mm256_or_ps(r, invalid)
}

/// `sincos256_ps`: (sin, cos).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sincos256_ps(x: std::arch::x86_64::__m256) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
    use std::arch::x86_64::*;
    let sign_bit = _mm256_set1_epi32(i32::MIN);
    let bits = _mm256_castps_si256(x);
    let sign = _mm256_and_si256(bits, sign_bit);
    let x = _mm256_castsi256_ps(_mm256_andnot_si256(sign_bit, bits));
    // cvttps2dq: out of range (or NaN) gives i32::MIN.
    let j = _mm256_cvttps_epi32(_mm256_mul_ps(x, splat(1.27323954473516)));
    let j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(!1));
    let y = _mm256_cvtepi32_ps(j);
    let x = _mm256_fmadd_ps(y, splat(-0.78515625), x);
    let x = _mm256_fmadd_ps(y, splat(-2.4187564849853515625e-4), x);
    let x = _mm256_fmadd_ps(y, splat(-3.77489497744594108e-8), x);
    let four = _mm256_set1_epi32(4);
    let sign_sin = _mm256_xor_si256(sign, _mm256_slli_epi32::<29>(_mm256_and_si256(j, four)));
    let sign_cos = _mm256_slli_epi32::<29>(_mm256_andnot_si256(_mm256_sub_epi32(j, _mm256_set1_epi32(2)), four));
    let z = _mm256_mul_ps(x, x);
    let cp = _mm256_fmadd_ps(_mm256_fmadd_ps(splat(2.443315711809948E-005), z, splat(-1.388731625493765E-003)), z, splat(4.166664568298827E-002));
    let cp = _mm256_mul_ps(cp, z);
    let cp = _mm256_add_ps(_mm256_fmadd_ps(cp, z, _mm256_xor_ps(_mm256_mul_ps(z, _mm256_set1_ps(0.5)), _mm256_set1_ps(-0.0))), _mm256_set1_ps(1.0));
    let sp = _mm256_fmadd_ps(_mm256_fmadd_ps(splat(-1.9515295891E-4), z, splat(8.3321608736E-3)), z, splat(-1.6666654611E-1));
    let sp = _mm256_fmadd_ps(_mm256_mul_ps(sp, z), x, x);
    // Lanes whose (j & 2) is 0 take the sine polynomial for sin.
    let poly = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), _mm256_setzero_si256()));
    let (ysin1, ysin2) = (_mm256_andnot_ps(poly, cp), _mm256_and_ps(poly, sp));
    let sin = _mm256_add_ps(ysin1, ysin2);
    let cos = _mm256_add_ps(_mm256_sub_ps(cp, ysin1), _mm256_sub_ps(sp, ysin2));
    (
        _mm256_xor_ps(sin, _mm256_castsi256_ps(sign_sin)),
        _mm256_xor_ps(cos, _mm256_castsi256_ps(sign_cos)),
    )
}

/// `torch.rand`: `uniform_kernel`'s draws, in f32 for every dtype but f64; a
/// value that rounds up to 1 in a narrower dtype becomes 0, as there.
pub fn rand(t: &Raw) {
    fn narrow<T: Elem<Acc = f32>>(d: &mut [T], g: &mut Gen) {
        d.iter_mut().for_each(|x| *x = Some(T::down(g.unit_f32())).filter(|v| v.up() != 1.0).unwrap_or(T::down(0.0)));
    }
    with_gen(|g| match t.dtype() {
        DType::F64 => t.slice_mut::<f64>().iter_mut().for_each(|x| *x = g.unit_f64()),
        DType::F32 => narrow(t.slice_mut::<f32>(), g),
        DType::F16 => narrow(t.slice_mut::<half::f16>(), g),
        DType::BF16 => narrow(t.slice_mut::<half::bf16>(), g),
        _ => {}
    });
}

/// `scale` with probability `keep`, else 0, into a fresh contiguous tensor:
/// `bernoulli_(keep)` through `bernoulli_distribution<double>`, the kernel
/// PyTorch runs unless it has MKL on an Intel CPU (see `bernoulli_p`'s note).
pub fn bernoulli_scaled(t: &Raw, keep: f64, scale: f64) {
    with_gen(|g| {
        with_elem!(t.dtype(), T => {
            let (on, off) = (cast::<f64, T>(scale), cast::<f64, T>(0.0));
            t.slice_mut::<T>().iter_mut().for_each(|x| *x = if g.unit_f64() < keep { on } else { off });
        })
    });
}

/// The generator's state in `torch.get_rng_state()`'s layout
/// (`CPUGeneratorImplState`, x86-64, little-endian), so either backend's
/// saved state loads into the other.
pub fn state() -> Vec<u8> {
    with_gen(|g| {
        let mut b = vec![0u8; STATE_BYTES];
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(0, &g.seed.to_le_bytes());
        put(8, &g.left.to_le_bytes());
        put(12, &1u32.to_le_bytes());
        put(16, &u64::from(g.next).to_le_bytes());
        for (i, w) in g.s.iter().enumerate() {
            put(24 + 8 * i, &u64::from(*w).to_le_bytes());
        }
        if let Some(v) = g.normal {
            put(5024, &v.to_le_bytes());
            put(5040, &1u32.to_le_bytes());
        }
        if let Some(v) = g.normal_f32 {
            put(5048, &v.to_le_bytes());
            put(5052, &[1]);
        }
        b
    })
}

/// Loads a state from `state()` or `torch.get_rng_state()`, checked as
/// `CPUGeneratorImpl::set_state` checks it. The 32 bytes that earlier
/// versions saved (a xoshiro256++ state) cannot continue their stream: they
/// seed the generator with the xor of their four little-endian words, so an
/// old checkpoint still loads and draws reproducibly.
pub fn set_state(b: &[u8]) -> std::result::Result<(), String> {
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
    let g = match b.len() {
        32 => Gen::new((0..4).fold(0, |a, i| a ^ u64_at(8 * i))),
        STATE_BYTES => {
            let (left, next) = (u32_at(8) as i32, u64_at(16) as u32);
            if u32_at(12) == 0 || !(1..=N as i32).contains(&left) || next > N as u32 {
                return Err("invalid mt19937 state".into());
            }
            let mut g = Gen::new(u64_at(0));
            g.s.iter_mut().enumerate().for_each(|(i, w)| *w = u64_at(24 + 8 * i) as u32);
            (g.left, g.next) = (left as u32, next);
            g.normal = (u32_at(5040) != 0).then(|| f64::from_bits(u64_at(5024)));
            g.normal_f32 = (b[5052] != 0).then(|| f32::from_bits(u32_at(5048)));
            g
        }
        n => return Err(format!("a cpu-backend RNG state is {STATE_BYTES} bytes (or 32 from an older version), got {n}")),
    };
    *GEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(g);
    Ok(())
}
