//! Fused row kernels over contiguous row-major `rows × n` slices, forward and
//! backward: softmax, log-softmax, masked softmax, layer norm, cross-entropy
//! and exact GELU, in f32 or f64, with PyTorch's CPU semantics (its NaNs
//! included).
//!
//! Work is split across the backend's pool only when it is large. A row's
//! arithmetic never depends on the split, and sums across rows go through
//! blocks of a size fixed by the shape, reduced in a fixed order, so results
//! are bitwise the same for any thread count.
//!
//! Slice lengths are expected to agree (`debug_assert`ed); if they do not,
//! the kernels work on the rows that every slice holds rather than panic.

use super::par;
use super::simd::multiversion;

/// The computing types: f32 (also for bf16 and f16 storage) and f64.
pub trait Real: num_traits::Float + num_traits::FromPrimitive + Copy + Send + Sync + Default + std::fmt::Debug + 'static {
    fn erf(self) -> Self;
    /// `exp`; for f32 branch-free and inlined, so that the loops calling it
    /// vectorise (std's `expf` is an opaque call per element).
    fn vexp(self) -> Self;
    /// `1 + tanh(self)`, the sum GELU's tanh form takes; for f32 as
    /// `2 / (1 + exp(-2·self))`, branch-free on `vexp` so that the loop
    /// vectorises (a libm `tanhf` per element was 3% of a GPT-2 step), and
    /// without the cancellation of adding 1 to a tanh near -1.
    fn one_plus_tanh(self) -> Self;
    /// `self`, or +0 where `masked`, by masking bits: with an `if`, LLVM
    /// moves the loads feeding `self` under the branch and then cannot
    /// vectorise the loop.
    fn unless(self, masked: bool) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn erf(self) -> f32 {
        erf_f32(self)
    }
    #[inline(always)]
    fn vexp(self) -> f32 {
        exp_f32(self)
    }
    #[inline(always)]
    fn one_plus_tanh(self) -> f32 {
        2.0 / (1.0 + exp_f32(-2.0 * self))
    }
    #[inline(always)]
    fn unless(self, masked: bool) -> f32 {
        f32::from_bits(self.to_bits() & (masked as u32).wrapping_sub(1))
    }
}

impl Real for f64 {
    #[inline]
    fn erf(self) -> f64 {
        erf_f64(self)
    }
    #[inline(always)]
    fn vexp(self) -> f64 {
        self.exp()
    }
    #[inline(always)]
    fn one_plus_tanh(self) -> f64 {
        1.0 + self.tanh()
    }
    #[inline(always)]
    fn unless(self, masked: bool) -> f64 {
        f64::from_bits(self.to_bits() & (masked as u64).wrapping_sub(1))
    }
}

/// An f64 constant in `T` (exact for f64, rounded once for f32).
#[inline(always)]
fn cst<T: Real>(v: f64) -> T {
    T::from_f64(v).unwrap_or_else(T::nan)
}

#[inline(always)]
fn horner(x: f32, c: &[f32]) -> f32 {
    match c.split_last() {
        Some((&last, rest)) => rest.iter().rev().fold(last, |acc, &k| acc * x + k),
        None => 0.0,
    }
}

/// `exp(x)` for f32 without branches or calls (Cephes' `expf`, within about
/// 1 ulp): `x = n ln2 + r` with `|r| <= ln2/2`, a degree-6 polynomial for
/// `e^r`, then `2^n` from exponent bits.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // Past these bounds the result is 0 or inf anyway; clamping keeps both
    // halves of 2^n below representable. NaN fails both tests and stays NaN.
    let x = if x < -104.0 { -104.0 } else { x };
    let x = if x > 88.8 { 88.8 } else { x };
    // Adding 1.5 * 2^23 pushes the fraction bits out, leaving round(x/ln2)
    // as an integer in the low bits: a rounding, and a conversion, that
    // vectorise (`round` is a libm call under SSE2, and `as i32` saturates
    // lane by lane).
    const ROUND: f32 = 12_582_912.0;
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    // Cody–Waite: n * 0.6933594 (9 significant bits) is exact, so `r`
    // carries no cancellation error.
    let r = (x - n * 0.693_359_4) + n * 0.000_212_194_44;
    let p = horner(r, &[0.5, 0.166_666_66, 0.041_665_796, 0.008_333_452, 0.001_398_199_9, 0.000_198_756_91]);
    let y = p * (r * r) + r + 1.0;
    // 2^n in two factors, each a normal number for n in [-150, 128], so that
    // results in the subnormal range are rounded once, by the last multiply.
    // Wrapping: for NaN the bits are meaningless, and the result NaN anyway.
    let n = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let h = n >> 1;
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    y * pow2(h) * pow2(n.wrapping_sub(h))
}

/// `erf(x)` for f32 without branches or calls, within 1.3 ulp (see the
/// tests). Both halves are computed and one is selected, which is what a
/// vector unit does anyway. (PyTorch 2.13's CPU GELU measures further from
/// the exact value than GELU through this erf, so the two differ by
/// PyTorch's error: about 3 ulp of the output at most.)
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    // |x| < 59/64: erf(x) = x + x p(x²), p a degree-5 minimax fit of
    // erf(x)/x - 1 (error 1.5e-8), the small correction added last.
    const SMALL: [f32; 6] = [0.128_379_15, -0.376_125_07, 0.112_819_27, -0.026_770_229, 0.004_997_996_6, -0.000_601_337_5];
    // Beyond: erf(x) = 1 - exp(q(|x|)), q a degree-7 fit of ln erfc
    // weighted by erfc (error 4e-11 in erf). Past 4, erfc < 2^-25 and
    // 1 - erfc rounds to 1; clamping there also sends ±inf to ±1.
    const LARGE: [f32; 8] =
        [0.000_176_377_93, -1.129_523_3, -0.633_329_75, -0.108_299_31, 0.025_132_088, -0.004_175_957_8, 0.000_435_490_13, -2.118_537_1e-5];
    let a = x.abs();
    let small = x + x * horner(x * x, &SMALL);
    let t = if a > 4.0 { 4.0 } else { a };
    let large = (1.0 - exp_f32(horner(t, &LARGE))).copysign(x);
    // NaN fails the test and takes the `large` side, which is NaN too.
    if a < 0.921_875 {
        small
    } else {
        large
    }
}

// fdlibm's erf (FreeBSD msun s_erf.c, as in musl), under 1 ulp:
//
// Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
// Developed at SunPro, a Sun Microsystems, Inc. business.
// Permission to use, copy, modify, and distribute this software is freely
// granted, provided that this notice is preserved.
const ERX: f64 = 0.8450629115104675;
const EFX8: f64 = 1.0270333367641007;
const PP: [f64; 5] = [0.12837916709551256, -0.3250421072470015, -0.02848174957559851, -0.005770270296489442, -2.3763016656650163e-05];
const QQ: [f64; 6] = [1.0, 0.39791722395915535, 0.0650222499887673, 0.005081306281875766, 0.00013249473800432164, -3.960228278775368e-06];
const PA: [f64; 7] = [
    -0.0023621185607526594,
    0.41485611868374833,
    -0.3722078760357013,
    0.31834661990116175,
    -0.11089469428239668,
    0.035478304325618236,
    -0.002166375594868791,
];
const QA: [f64; 7] =
    [1.0, 0.10642088040084423, 0.540397917702171, 0.07182865441419627, 0.12617121980876164, 0.01363708391202905, 0.011984499846799107];
const RA: [f64; 8] = [
    -0.009864944034847148,
    -0.6938585727071818,
    -10.558626225323291,
    -62.375332450326006,
    -162.39666946257347,
    -184.60509290671104,
    -81.2874355063066,
    -9.814329344169145,
];
const SA: [f64; 9] = [
    1.0,
    19.651271667439257,
    137.65775414351904,
    434.56587747522923,
    645.3872717332679,
    429.00814002756783,
    108.63500554177944,
    6.570249770319282,
    -0.0604244152148581,
];
const RB: [f64; 7] =
    [-0.0098649429247001, -0.799283237680523, -17.757954917754752, -160.63638485582192, -637.5664433683896, -1025.0951316110772, -483.5191916086514];
const SB: [f64; 8] =
    [1.0, 30.33806074348246, 325.7925129965739, 1536.729586084437, 3199.8582195085955, 2553.0504064331644, 474.52854120695537, -22.44095244658582];

fn poly(x: f64, c: &[f64]) -> f64 {
    c.iter().rev().fold(0.0, |acc, &k| acc * x + k)
}

/// `erf(x)` for f64: fdlibm's piecewise rational approximations.
pub fn erf_f64(x: f64) -> f64 {
    let hi = (x.to_bits() >> 32) as u32;
    let ix = hi & 0x7fff_ffff;
    if ix >= 0x7ff0_0000 {
        // NaN stays NaN; ±inf gives ±1.
        return if x.is_nan() { x } else { 1.0f64.copysign(x) };
    }
    if ix < 0x3feb_0000 {
        // |x| < 0.84375
        if ix < 0x3e30_0000 {
            // |x| < 2^-28: scaled so that subnormal x does not underflow early.
            return 0.125 * (8.0 * x + EFX8 * x);
        }
        let z = x * x;
        return x + x * (poly(z, &PP) / poly(z, &QQ));
    }
    let a = x.abs();
    let y = if ix < 0x3ff4_0000 {
        // |x| < 1.25: erf(1 + s) - erx by a rational in s = |x| - 1.
        let s = a - 1.0;
        ERX + poly(s, &PA) / poly(s, &QA)
    } else if ix < 0x4018_0000 {
        // |x| < 6: erfc(x) = exp(-x² - 0.5625 + R(1/x²)/S(1/x²)) / x, with -x²
        // split as -z² + (z - x)(z + x) for z = x cut to 32 bits, so that
        // the large square enters exp exactly.
        let s = 1.0 / (a * a);
        let (r, q) = if ix < 0x4006_db6d { (poly(s, &RA), poly(s, &SA)) } else { (poly(s, &RB), poly(s, &SB)) };
        let z = f64::from_bits(a.to_bits() & 0xffff_ffff_0000_0000);
        1.0 - (-z * z - 0.5625).exp() * ((z - a) * (z + a) + r / q).exp() / a
    } else {
        1.0 - f64::MIN_POSITIVE
    };
    y.copysign(x)
}

/// Accumulators per reduction: one running value would make every step wait
/// on the one before; sixteen independent ones fill an AVX-512 register (or
/// two AVX2, four SSE ones), in one fixed order whichever copy runs.
const LANES: usize = 16;

/// Rows longer than this are summed as a pairwise tree of blocks, so that
/// rounding grows with log(n) rather than with n.
const SUM_BLOCK: usize = 256;

/// Work (elements) under which a parallel task is not split further.
const LEAF: usize = 8 * 1024;

/// `f` folded over `a` and `b` side by side into `LANES` interleaved accumulators.
#[inline(always)]
fn fold_lanes<A: Copy, B: Copy, T: Copy>(a: &[A], b: &[B], init: T, f: impl Fn(T, A, B) -> T) -> [T; LANES] {
    let mut acc = [init; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (a, b) in ca.zip(cb) {
        for ((s, &a), &b) in acc.iter_mut().zip(a).zip(b) {
            *s = f(*s, a, b);
        }
    }
    for ((s, &a), &b) in acc.iter_mut().zip(ra).zip(rb) {
        *s = f(*s, a, b);
    }
    acc
}

#[inline(always)]
fn combine<T: Copy>(v: [T; LANES], f: impl Fn(T, T) -> T) -> T {
    let h: [T; 8] = std::array::from_fn(|i| f(v[i], v[i + 8]));
    f(f(f(h[0], h[4]), f(h[1], h[5])), f(f(h[2], h[6]), f(h[3], h[7])))
}

#[inline(always)]
fn sum_leaf<T: Real>(a: &[T], f: &impl Fn(T) -> T) -> T {
    combine(fold_lanes(a, a, T::zero(), |s, v, _| s + f(v)), |x, y| x + y)
}

fn sum_tree<T: Real>(a: &[T], f: &impl Fn(T) -> T) -> T {
    if a.len() <= SUM_BLOCK {
        return sum_leaf(a, f);
    }
    // A multiple of the block, and short of the end whenever len > SUM_BLOCK.
    let (l, r) = a.split_at((a.len() / 2).next_multiple_of(SUM_BLOCK));
    sum_tree(l, f) + sum_tree(r, f)
}

/// `sum(f(a[i]))`.
#[inline(always)]
fn sum_map<T: Real>(a: &[T], f: impl Fn(T) -> T) -> T {
    if a.len() <= SUM_BLOCK {
        sum_leaf(a, &f)
    } else {
        sum_tree(a, &f)
    }
}

#[inline(always)]
pub(super) fn sum<T: Real>(a: &[T]) -> T {
    sum_map(a, |v| v)
}

/// `max` that vectorises. It may drop a NaN, which is harmless here: a NaN
/// in a row reaches every output through the row's sum of exponentials.
#[inline(always)]
pub(super) fn bigger<T: Real>(m: T, v: T) -> T {
    if v > m {
        v
    } else {
        m
    }
}

#[inline(always)]
pub(super) fn max<T: Real>(x: &[T]) -> T {
    combine(fold_lanes(x, x, T::neg_infinity(), |m, v, _| bigger(m, v)), bigger)
}

#[inline(always)]
fn scale<T: Real>(y: &mut [T], s: T) {
    for v in y.iter_mut() {
        *v = *v * s;
    }
}

/// `s[i..]`, empty past the end.
fn tail<T>(s: &[T], i: usize) -> &[T] {
    s.get(i..).unwrap_or(&[])
}

/// The rows of `s` from row `r`.
fn rows_from<T>(s: &[T], r: usize, n: usize) -> std::slice::ChunksExact<'_, T> {
    tail(s, r.saturating_mul(n)).chunks_exact(n)
}

/// The row count every slice allows, from lengths in elements (`n` per row)
/// and in rows; `None` when `n` is 0.
fn row_count(n: usize, elems: &[usize], rows: &[usize]) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let all = elems.iter().map(|&l| l / n).chain(rows.iter().copied());
    let first = all.clone().next();
    debug_assert!(elems.iter().all(|&l| l % n == 0), "lengths {elems:?} are not multiples of {n}");
    debug_assert!(all.clone().all(|r| Some(r) == first), "row counts of {elems:?} / {n} and {rows:?} differ");
    Some(all.min().unwrap_or(0))
}

/// Outputs cut by row, so that disjoint row ranges can be written from several threads.
trait Rows: Send + Sized {
    fn split(self, rows: usize) -> (Self, Self);
}

/// An output slice with `.1` entries per row.
struct Per<'a, T>(&'a mut [T], usize);

impl<T: Send> Rows for Per<'_, T> {
    fn split(self, rows: usize) -> (Self, Self) {
        let Per(s, k) = self;
        let (a, b) = s.split_at_mut(rows.saturating_mul(k).min(s.len()));
        (Per(a, k), Per(b, k))
    }
}

impl<A: Rows, B: Rows> Rows for (A, B) {
    fn split(self, rows: usize) -> (Self, Self) {
        let ((a0, a1), (b0, b1)) = (self.0.split(rows), self.1.split(rows));
        ((a0, b0), (a1, b1))
    }
}

impl<A: Rows, B: Rows, C: Rows> Rows for (A, B, C) {
    fn split(self, rows: usize) -> (Self, Self) {
        let ((a0, a1), (b0, b1), (c0, c1)) = (self.0.split(rows), self.1.split(rows), self.2.split(rows));
        ((a0, b0, c0), (a1, b1, c1))
    }
}

/// Calls `f(first_row, outs)` on consecutive row ranges covering `0..rows`
/// (`cost` elements of work each, on average): once, on this thread, unless
/// the work is worth the pool.
fn for_rows<O: Rows>(rows: usize, cost: usize, outs: O, f: impl Fn(usize, O) + Sync) {
    let work = rows.saturating_mul(cost);
    if !par::parallel(work) || rows < 2 {
        return f(0, outs);
    }
    // A few parts per thread (so a slow one is made up by the others), none under LEAF.
    let parts = (par::threads() * 4).min(rows).min((work / LEAF).max(2));
    let mut pieces = Vec::with_capacity(parts);
    let (mut first, mut rest) = (0, outs);
    for i in 1..parts {
        let end = rows * i / parts;
        let (a, b) = rest.split(end - first);
        pieces.push((first, a));
        (first, rest) = (end, b);
    }
    pieces.push((first, rest));
    par::for_each_owned(pieces, |_, (first, outs)| f(first, outs));
}

/// Rows of `x` of `n`: `y = softmax(x)`.
pub fn softmax_fwd<T: Real>(x: &[T], n: usize, y: &mut [T]) {
    let Some(rows) = row_count(n, &[x.len(), y.len()], &[]) else { return };
    for_rows(rows, n, Per(&mut y[..rows * n], n), |r0, Per(y, _)| softmax_fwd_block(tail(x, r0 * n), n, y));
}

multiversion!(fn softmax_fwd_block<T: Real>(x: &[T], n: usize, y: &mut [T]) => softmax_fwd_rows);

#[inline(always)]
fn softmax_fwd_rows<T: Real>(x: &[T], n: usize, y: &mut [T]) {
    for (x, y) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        // Shifted by the max so that no term overflows; a row of -inf
        // (or with +inf, or NaN) gives NaN everywhere, as PyTorch.
        let m = max(x);
        for (y, &x) in y.iter_mut().zip(x) {
            *y = (x - m).vexp();
        }
        scale(y, T::one() / sum(y));
    }
}

/// `y = log_softmax(x)` per row, as `(x - max) - ln(sum(exp(x - max)))`,
/// PyTorch's order, which keeps `x - max` exact.
pub fn log_softmax_fwd<T: Real>(x: &[T], n: usize, y: &mut [T]) {
    let Some(rows) = row_count(n, &[x.len(), y.len()], &[]) else { return };
    for_rows(rows, n, Per(&mut y[..rows * n], n), |r0, Per(y, _)| {
        for (x, y) in rows_from(x, r0, n).zip(y.chunks_exact_mut(n)) {
            let m = max(x);
            let ls = sum_map(x, |v| (v - m).vexp()).ln();
            for (y, &x) in y.iter_mut().zip(x) {
                *y = (x - m) - ls;
            }
        }
    });
}

/// `dx = y * (g - sum(g * y))` per row.
pub fn softmax_bwd<T: Real>(g: &[T], y: &[T], n: usize, dx: &mut [T]) {
    let Some(rows) = row_count(n, &[g.len(), y.len(), dx.len()], &[]) else { return };
    for_rows(rows, n, Per(&mut dx[..rows * n], n), |r0, Per(dx, _)| softmax_bwd_block(tail(g, r0 * n), tail(y, r0 * n), n, dx));
}

multiversion!(fn softmax_bwd_block<T: Real>(g: &[T], y: &[T], n: usize, dx: &mut [T]) => softmax_bwd_rows);

#[inline(always)]
fn softmax_bwd_rows<T: Real>(g: &[T], y: &[T], n: usize, dx: &mut [T]) {
    for ((g, y), d) in g.chunks_exact(n).zip(y.chunks_exact(n)).zip(dx.chunks_exact_mut(n)) {
        // The products go through `d` so that the sum reads one slice.
        for (d, (&g, &y)) in d.iter_mut().zip(g.iter().zip(y)) {
            *d = g * y;
        }
        let s = sum(d);
        for (d, (&g, &y)) in d.iter_mut().zip(g.iter().zip(y)) {
            *d = y * (g - s);
        }
    }
}

/// Softmax over the entries whose `mask` is false, as `torch._masked_softmax`
/// on CPU: masked entries are 0 (whatever `x` holds there), and a row with
/// every entry masked is NaN throughout (0/0).
pub fn masked_softmax_fwd<T: Real>(x: &[T], mask: &[bool], n: usize, y: &mut [T]) {
    let Some(rows) = row_count(n, &[x.len(), mask.len(), y.len()], &[]) else { return };
    for_rows(rows, n, Per(&mut y[..rows * n], n), |r0, Per(y, _)| masked_fwd_block(tail(x, r0 * n), tail(mask, r0 * n), n, y));
}

multiversion!(fn masked_fwd_block<T: Real>(x: &[T], mask: &[bool], n: usize, y: &mut [T]) => masked_fwd_rows);

#[inline(always)]
fn masked_fwd_rows<T: Real>(x: &[T], mask: &[bool], n: usize, y: &mut [T]) {
    for ((x, k), y) in x.chunks_exact(n).zip(mask.chunks_exact(n)).zip(y.chunks_exact_mut(n)) {
        let m = combine(fold_lanes(x, k, T::neg_infinity(), |m, v, k| if k { m } else { bigger(m, v) }), bigger);
        // Masked out by bits, not by a product, so that inf/NaN there stay out.
        for (y, (&x, &k)) in y.iter_mut().zip(x.iter().zip(k)) {
            *y = (x - m).vexp().unless(k);
        }
        scale(y, T::one() / sum(y));
    }
}

/// `torch._masked_softmax_backward` on CPU: `dx = y * (g - s)` with `s` the
/// sum of `g * y` over unmasked entries; masked entries get 0, so a fully
/// masked row (whose `y` is NaN) gets 0 throughout.
pub fn masked_softmax_bwd<T: Real>(g: &[T], y: &[T], mask: &[bool], n: usize, dx: &mut [T]) {
    let Some(rows) = row_count(n, &[g.len(), y.len(), mask.len(), dx.len()], &[]) else { return };
    for_rows(rows, n, Per(&mut dx[..rows * n], n), |r0, Per(dx, _)| {
        masked_bwd_block(tail(g, r0 * n), tail(y, r0 * n), tail(mask, r0 * n), n, dx)
    });
}

multiversion!(fn masked_bwd_block<T: Real>(g: &[T], y: &[T], mask: &[bool], n: usize, dx: &mut [T]) => masked_bwd_rows);

#[inline(always)]
fn masked_bwd_rows<T: Real>(g: &[T], y: &[T], mask: &[bool], n: usize, dx: &mut [T]) {
    let ins = g.chunks_exact(n).zip(y.chunks_exact(n)).zip(mask.chunks_exact(n));
    for (((g, y), k), d) in ins.zip(dx.chunks_exact_mut(n)) {
        unmasked(d, g, y, k, |g, y| g * y);
        let s = sum(d);
        unmasked(d, g, y, k, |g, y| y * (g - s));
    }
}

/// `d = f(g, y)` where `k` is false, 0 where it is true (by bits, not a
/// product, so that NaN in `g` or `y` at masked entries stays out).
#[inline(always)]
fn unmasked<T: Real>(d: &mut [T], g: &[T], y: &[T], k: &[bool], f: impl Fn(T, T) -> T) {
    for (d, ((&g, &y), &k)) in d.iter_mut().zip(g.iter().zip(y).zip(k)) {
        *d = f(g, y).unless(k);
    }
}

/// Layer norm of each row over its `n` entries with biased variance, as
/// `torch.nn.functional.layer_norm`: `y = (x - mean) * rstd * w + b`,
/// `rstd = 1 / sqrt(var + eps)`, saving `mean` and `rstd` per row.
///
/// The statistics are two-pass in `T` (mean, then the mean square of
/// `x - mean`) with pairwise lane sums, for f32 too: they come within about
/// 1.5e-7 of f64 (PyTorch's Welford cascade: 2e-7), and accumulating in f64
/// would halve the vector width. `x` is centred before scaling, where
/// PyTorch computes `x * rstd - mean * rstd`: the same value in exact
/// arithmetic, with less cancellation when |mean| >> std.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_fwd<T: Real>(x: &[T], w: &[T], b: Option<&[T]>, n: usize, eps: f64, y: &mut [T], mean: &mut [T], rstd: &mut [T]) {
    let Some(rows) = row_count(n, &[x.len(), y.len()], &[mean.len(), rstd.len()]) else { return };
    let Some(w) = w.get(..n) else { return };
    let b = match b.map(|b| b.get(..n)) {
        Some(None) => return,
        b => b.flatten(),
    };
    let eps = cst::<T>(eps);
    let outs = (Per(&mut y[..rows * n], n), Per(&mut mean[..rows], 1), Per(&mut rstd[..rows], 1));
    for_rows(rows, n, outs, |r0, (Per(y, _), Per(mean, _), Per(rstd, _))| ln_fwd_block(tail(x, r0 * n), w, b, n, eps, y, mean, rstd));
}

multiversion!(fn ln_fwd_block<T: Real>(x: &[T], w: &[T], b: Option<&[T]>, n: usize, eps: T, y: &mut [T], mean: &mut [T], rstd: &mut [T]) => ln_fwd_rows);

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn ln_fwd_rows<T: Real>(x: &[T], w: &[T], b: Option<&[T]>, n: usize, eps: T, y: &mut [T], mean: &mut [T], rstd: &mut [T]) {
    let nn = cst::<T>(n as f64);
    for (((x, y), mean), rstd) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)).zip(mean).zip(rstd) {
        let m = sum(x) / nn;
        // The squares go through `y` so that the sum reads one slice.
        for (y, &x) in y.iter_mut().zip(x) {
            *y = (x - m) * (x - m);
        }
        let r = T::one() / (sum(y) / nn + eps).sqrt();
        (*mean, *rstd) = (m, r);
        let xw = |x: T, w: T| (x - m) * r * w;
        match b {
            Some(b) => {
                for (y, ((&x, &w), &b)) in y.iter_mut().zip(x.iter().zip(w).zip(b)) {
                    *y = xw(x, w) + b;
                }
            }
            None => {
                for (y, (&x, &w)) in y.iter_mut().zip(x.iter().zip(w)) {
                    *y = xw(x, w);
                }
            }
        }
    }
}

/// Adds `parts` (rows of `n`) in a fixed pairwise tree and writes the total
/// to `out`: rounding grows with log(rows), and the order is the shape's.
fn tree_sum<T: Real>(parts: &mut [T], n: usize, out: &mut [T]) {
    let k = parts.len() / n;
    let mut step = 1;
    while step < k {
        for i in (0..k - step).step_by(2 * step) {
            let (lo, hi) = parts.split_at_mut((i + step) * n);
            for (a, &b) in lo[i * n..].iter_mut().zip(&hi[..n]) {
                *a = *a + b;
            }
        }
        step *= 2;
    }
    for (o, &p) in out.iter_mut().zip(&*parts) {
        *o = p;
    }
}

/// Gradients of [`layernorm_fwd`] from its saved `mean` and `rstd`:
/// `dx = rstd * (g w - mean(g w) - x̂ mean(g w x̂))` per row with
/// `x̂ = (x - mean) * rstd` (PyTorch's formula, `x` centred first), and
/// `dw = sum(g x̂)`, `db = sum(g)` over rows, overwritten.
///
/// Rows go in blocks of a size fixed by `n`; each block sums `dw`/`db` in
/// row order, and the blocks' sums are added in a pairwise tree.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_bwd<T: Real>(g: &[T], x: &[T], w: &[T], mean: &[T], rstd: &[T], n: usize, dx: &mut [T], dw: &mut [T], mut db: Option<&mut [T]>) {
    dw.fill(T::zero());
    if let Some(db) = db.as_deref_mut() {
        db.fill(T::zero());
    }
    let Some(rows) = row_count(n, &[g.len(), x.len(), dx.len()], &[mean.len(), rstd.len()]) else { return };
    let (Some(w), Some(dw)) = (w.get(..n), dw.get_mut(..n)) else { return };
    let mut db = match db.map(|d| d.get_mut(..n)) {
        Some(None) => return,
        d => d.flatten(),
    };
    // About GRAIN elements a block, so that a small input is one block summed
    // straight into dw/db, and a large one has tasks worth a thread.
    let block = (par::GRAIN / n).clamp(8, 128);
    let blocks = rows.div_ceil(block);
    let nn = cst::<T>(n as f64);
    let has_db = db.is_some();
    let mut spill = if blocks > 1 { vec![T::zero(); blocks * n * if has_db { 2 } else { 1 }] } else { Vec::new() };
    let (pw, pb): (&mut [T], &mut [T]) = if blocks > 1 { spill.split_at_mut(blocks * n) } else { (&mut *dw, db.as_deref_mut().unwrap_or(&mut [])) };
    let outs = (Per(&mut dx[..rows * n], block * n), Per(pw, n), Per(pb, n));
    for_rows(blocks, rows * n / blocks.max(1), outs, |b0, (Per(dx, _), Per(pw, _), Per(pb, _))| {
        for (j, (dx, pw)) in dx.chunks_mut(block * n).zip(pw.chunks_exact_mut(n)).enumerate() {
            let r0 = (b0 + j) * block;
            let mut pb = pb.get_mut(j * n..(j + 1) * n);
            let ins = rows_from(g, r0, n).zip(rows_from(x, r0, n)).zip(tail(mean, r0).iter().zip(tail(rstd, r0)));
            for (((g, x), (&m, &rs)), d) in ins.zip(dx.chunks_exact_mut(n)) {
                let xh = |x: T| (x - m) * rs;
                // The products go through `d` so that the sums read one slice.
                for (d, (&g, &w)) in d.iter_mut().zip(g.iter().zip(w)) {
                    *d = g * w;
                }
                let s1 = sum(d);
                for (d, &x) in d.iter_mut().zip(x) {
                    *d = *d * xh(x);
                }
                let (a, c) = (s1 / nn, sum(d) / nn);
                for (d, ((&g, &w), &x)) in d.iter_mut().zip(g.iter().zip(w).zip(x)) {
                    *d = rs * (g * w - a - xh(x) * c);
                }
                for (p, (&g, &x)) in pw.iter_mut().zip(g.iter().zip(x)) {
                    *p = *p + g * xh(x);
                }
                if let Some(pb) = pb.as_deref_mut() {
                    for (p, &g) in pb.iter_mut().zip(g) {
                        *p = *p + g;
                    }
                }
            }
        }
    });
    if blocks > 1 {
        let (pw, pb) = spill.split_at_mut(blocks * n);
        tree_sum(pw, n, dw);
        if let Some(db) = db {
            tree_sum(pb, n, db);
        }
    }
}

/// Mean over the rows whose target is not `ignore_index` of
/// `logsumexp(row) - row[target]`, i.e. `F.cross_entropy(logits, targets)`;
/// `lse` gets every row's logsumexp. With every row ignored (or none) the
/// mean is 0/0 = NaN, as PyTorch. A target outside `0..n` that is not
/// `ignore_index` makes the loss NaN.
///
/// The row's loss is `ln(sum) - (x[t] - max)`, as PyTorch's log-softmax
/// forms it; losses are summed in f64 over blocks of rows of a size fixed by
/// `n`, the blocks' sums then added in order.
pub fn cross_entropy_fwd<T: Real>(logits: &[T], targets: &[i64], n: usize, ignore_index: i64, lse: &mut [T]) -> T {
    let Some(rows) = row_count(n, &[logits.len()], &[targets.len(), lse.len()]) else { return T::nan() };
    let block = (par::GRAIN / n).max(1);
    let blocks = rows.div_ceil(block);
    let mut one = [(0.0f64, 0usize)];
    let mut many = Vec::new();
    let parts: &mut [(f64, usize)] = if blocks > 1 {
        many.resize(blocks, (0.0, 0));
        &mut many
    } else {
        &mut one
    };
    for_rows(blocks, rows * n / blocks.max(1), (Per(&mut lse[..rows], block), Per(&mut *parts, 1)), |b0, (Per(lse, _), Per(parts, _))| {
        for (j, (lse, part)) in lse.chunks_mut(block).zip(parts).enumerate() {
            let r0 = (b0 + j) * block;
            *part = ce_fwd_block(tail(logits, r0 * n), tail(targets, r0), n, ignore_index, lse);
        }
    });
    let (total, count) = parts.iter().fold((0.0, 0), |(s, c), &(ps, pc)| (s + ps, c + pc));
    cst(total / count as f64)
}

multiversion!(fn ce_fwd_block<T: Real>(logits: &[T], targets: &[i64], n: usize, ignore_index: i64, lse: &mut [T]) -> (f64, usize) => ce_fwd_rows);

/// The summed loss and the count of the rows not ignored, of the rows `lse` has room for.
#[inline(always)]
fn ce_fwd_rows<T: Real>(logits: &[T], targets: &[i64], n: usize, ignore_index: i64, lse: &mut [T]) -> (f64, usize) {
    let mut part = (0.0f64, 0usize);
    for ((x, &t), lse) in logits.chunks_exact(n).zip(targets).zip(lse) {
        let m = max(x);
        let ls = sum_map(x, |v| (v - m).vexp()).ln();
        *lse = m + ls;
        if t != ignore_index {
            let xt = usize::try_from(t).ok().and_then(|t| x.get(t)).map_or(T::nan(), |&v| v);
            part.0 += (ls - (xt - m)).to_f64().unwrap_or(f64::NAN);
            part.1 += 1;
        }
    }
    part
}

/// `dx = grad / count * (softmax(row) - onehot(target))` with `count` the
/// rows not ignored; ignored rows get 0.
///
/// The softmax is `exp(x - lse) / sum(exp(x - lse))` with the forward's
/// `lse`. `exp(x - lse)` alone would carry the rounding of `lse`, up to
/// ulp(lse)/2 relative (1.5e-5 for f32 logits near 300); that error is one
/// factor common to the row, which dividing by the row's sum removes.
pub fn cross_entropy_bwd<T: Real>(logits: &[T], targets: &[i64], n: usize, ignore_index: i64, lse: &[T], grad: T, dx: &mut [T]) {
    let Some(rows) = row_count(n, &[logits.len(), dx.len()], &[targets.len(), lse.len()]) else { return };
    let count = targets[..rows].iter().filter(|&&t| t != ignore_index).count();
    let k = grad / cst(count as f64);
    for_rows(rows, n, Per(&mut dx[..rows * n], n), |r0, Per(dx, _)| {
        ce_bwd_block(tail(logits, r0 * n), tail(targets, r0), tail(lse, r0), n, ignore_index, k, dx)
    });
}

multiversion!(fn ce_bwd_block<T: Real>(logits: &[T], targets: &[i64], lse: &[T], n: usize, ignore_index: i64, k: T, dx: &mut [T]) => ce_bwd_rows);

#[inline(always)]
fn ce_bwd_rows<T: Real>(logits: &[T], targets: &[i64], lse: &[T], n: usize, ignore_index: i64, k: T, dx: &mut [T]) {
    for (((x, &t), &l), d) in logits.chunks_exact(n).zip(targets).zip(lse).zip(dx.chunks_exact_mut(n)) {
        if t == ignore_index {
            d.fill(T::zero());
            continue;
        }
        for (d, &x) in d.iter_mut().zip(x) {
            *d = (x - l).vexp();
        }
        scale(d, k / sum(d));
        if let Some(d) = usize::try_from(t).ok().and_then(|t| d.get_mut(t)) {
            *d = *d - k;
        }
    }
}

/// Exact GELU, `x/2 * (1 + erf(x/√2))`, elementwise.
pub fn gelu_fwd<T: Real>(x: &[T], y: &mut [T]) {
    let len = x.len().min(y.len());
    debug_assert_eq!(x.len(), y.len());
    for_rows(len, 1, Per(&mut y[..len], 1), |i0, Per(y, _)| gelu_fwd_run(tail(x, i0), y));
}

multiversion!(fn gelu_fwd_run<T: Real>(x: &[T], y: &mut [T]) => gelu_fwd_loop);

#[inline(always)]
fn gelu_fwd_loop<T: Real>(x: &[T], y: &mut [T]) {
    let (h, r) = (cst::<T>(0.5), cst::<T>(std::f64::consts::FRAC_1_SQRT_2));
    // A `for` loop, not `for_each`: the iterator's `fold` would be a
    // separate function, compiled without the caller's AVX2.
    for (y, &x) in y.iter_mut().zip(x) {
        *y = x * h * (T::one() + (x * r).erf());
    }
}

/// [`gelu_fwd`] that also keeps `cdf = Φ(x)` for [`gelu_bwd_cdf`], so the
/// backward pass does not evaluate erf again (the same values as recomputing it).
pub fn gelu_fwd_cdf<T: Real>(x: &[T], y: &mut [T], cdf: &mut [T]) {
    let len = x.len().min(y.len()).min(cdf.len());
    debug_assert!(x.len() == len && y.len() == len && cdf.len() == len);
    let outs = (Per(&mut y[..len], 1), Per(&mut cdf[..len], 1));
    for_rows(len, 1, outs, |i0, (Per(y, _), Per(c, _))| gelu_fwd_cdf_run(tail(x, i0), y, c));
}

multiversion!(fn gelu_fwd_cdf_run<T: Real>(x: &[T], y: &mut [T], cdf: &mut [T]) => gelu_fwd_cdf_loop);

#[inline(always)]
fn gelu_fwd_cdf_loop<T: Real>(x: &[T], y: &mut [T], cdf: &mut [T]) {
    let (h, r) = (cst::<T>(0.5), cst::<T>(std::f64::consts::FRAC_1_SQRT_2));
    for (&x, (y, c)) in x.iter().zip(y.iter_mut().zip(cdf.iter_mut())) {
        let e = T::one() + (x * r).erf();
        *y = x * h * e;
        *c = h * e;
    }
}

/// [`gelu_bwd`] from the `Φ(x)` that [`gelu_fwd_cdf`] kept.
pub fn gelu_bwd_cdf<T: Real>(g: &[T], x: &[T], cdf: &[T], dx: &mut [T]) {
    let len = g.len().min(x.len()).min(cdf.len()).min(dx.len());
    debug_assert!(g.len() == len && x.len() == len && cdf.len() == len && dx.len() == len);
    for_rows(len, 1, Per(&mut dx[..len], 1), |i0, Per(dx, _)| gelu_bwd_cdf_run(tail(g, i0), tail(x, i0), tail(cdf, i0), dx));
}

multiversion!(fn gelu_bwd_cdf_run<T: Real>(g: &[T], x: &[T], cdf: &[T], dx: &mut [T]) => gelu_bwd_cdf_loop);

#[inline(always)]
fn gelu_bwd_cdf_loop<T: Real>(g: &[T], x: &[T], cdf: &[T], dx: &mut [T]) {
    for (d, ((&g, &x), &c)) in dx.iter_mut().zip(g.iter().zip(x).zip(cdf)) {
        *d = gelu_dx(g, x, c);
    }
}

/// `g * (Φ(x) + x φ(x))` given `cdf = Φ(x)`: the one expression both GELU
/// backward kernels round through, so they agree bit for bit.
#[inline(always)]
fn gelu_dx<T: Real>(g: T, x: T, cdf: T) -> T {
    // 1/√(2π), formed as PyTorch forms it.
    let k = cst::<T>(std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2 * 0.5);
    let pdf = k * (x * x * -cst::<T>(0.5)).vexp();
    g * (cdf + x * pdf)
}

/// `dx = g * (Φ(x) + x φ(x))`, the derivative of [`gelu_fwd`].
pub fn gelu_bwd<T: Real>(g: &[T], x: &[T], dx: &mut [T]) {
    let len = g.len().min(x.len()).min(dx.len());
    debug_assert!(g.len() == len && x.len() == len && dx.len() == len);
    for_rows(len, 1, Per(&mut dx[..len], 1), |i0, Per(dx, _)| gelu_bwd_run(tail(g, i0), tail(x, i0), dx));
}

multiversion!(fn gelu_bwd_run<T: Real>(g: &[T], x: &[T], dx: &mut [T]) => gelu_bwd_loop);

#[inline(always)]
fn gelu_bwd_loop<T: Real>(g: &[T], x: &[T], dx: &mut [T]) {
    let (h, r) = (cst::<T>(0.5), cst::<T>(std::f64::consts::FRAC_1_SQRT_2));
    for (d, (&g, &x)) in dx.iter_mut().zip(g.iter().zip(x)) {
        *d = gelu_dx(g, x, h * (T::one() + (x * r).erf()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*, for inputs that are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        }
        fn normal(&mut self) -> f64 {
            let (u, v) = (1.0 - self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
        fn vec(&mut self, len: usize, scale: f64) -> Vec<f32> {
            (0..len).map(|_| (self.normal() * scale) as f32).collect()
        }
        fn mask(&mut self, len: usize, p: f64) -> Vec<bool> {
            (0..len).map(|_| self.uniform() < p).collect()
        }
    }

    fn wide(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&v| v as f64).collect()
    }

    /// The spacing of f32 values at `v`.
    fn ulp32(v: f64) -> f64 {
        let a = (v.abs() as f32).max(f32::MIN_POSITIVE);
        (f32::from_bits(a.to_bits() + 1) - a) as f64
    }

    fn ulp64(v: f64) -> f64 {
        let a = v.abs().max(f64::MIN_POSITIVE);
        f64::from_bits(a.to_bits() + 1) - a
    }

    /// Largest `|got - want| / scale(want)`; NaN must meet NaN.
    fn worst(got: &[f32], want: &[f64], scale: impl Fn(usize, f64) -> f64) -> f64 {
        assert_eq!(got.len(), want.len());
        let mut w = 0.0f64;
        for (i, (&g, &v)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.is_nan(), v.is_nan(), "entry {i}: {g} vs {v}");
            if !v.is_nan() {
                w = w.max((g as f64 - v).abs() / scale(i, v));
            }
        }
        w
    }

    fn rel(floor: f64) -> impl Fn(usize, f64) -> f64 {
        move |_, v| v.abs().max(floor)
    }

    // ---- f64 references, written the plain way ----

    fn ref_softmax(x: &[f64], mask: Option<&[bool]>, n: usize, log: bool) -> Vec<f64> {
        let mut out = Vec::new();
        for (r, x) in x.chunks(n).enumerate() {
            let keep = |i: usize| mask.is_none_or(|m| !m[r * n + i]);
            let m = (0..n).filter(|&i| keep(i)).map(|i| x[i]).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..n).filter(|&i| keep(i)).map(|i| (x[i] - m).exp()).sum();
            out.extend((0..n).map(|i| match (keep(i), log) {
                (_, true) => x[i] - m - s.ln(),
                (true, false) => (x[i] - m).exp() / s,
                (false, false) if s == 0.0 => f64::NAN,
                (false, false) => 0.0,
            }));
        }
        out
    }

    fn ref_softmax_bwd(g: &[f64], y: &[f64], mask: Option<&[bool]>, n: usize) -> Vec<f64> {
        let mut out = Vec::new();
        for (r, (g, y)) in g.chunks(n).zip(y.chunks(n)).enumerate() {
            let keep = |i: usize| mask.is_none_or(|m| !m[r * n + i]);
            let s: f64 = (0..n).filter(|&i| keep(i)).map(|i| g[i] * y[i]).sum();
            out.extend((0..n).map(|i| if keep(i) { y[i] * (g[i] - s) } else { 0.0 }));
        }
        out
    }

    fn ref_layernorm(x: &[f64], w: &[f64], b: Option<&[f64]>, n: usize, eps: f64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (mut y, mut mean, mut rstd) = (Vec::new(), Vec::new(), Vec::new());
        for x in x.chunks(n) {
            let m = x.iter().sum::<f64>() / n as f64;
            let v = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n as f64;
            let r = 1.0 / (v + eps).sqrt();
            y.extend((0..n).map(|i| (x[i] - m) * r * w[i] + b.map_or(0.0, |b| b[i])));
            mean.push(m);
            rstd.push(r);
        }
        (y, mean, rstd)
    }

    fn ref_layernorm_bwd(g: &[f64], x: &[f64], w: &[f64], mean: &[f64], rstd: &[f64], n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (mut dx, mut dw, mut db) = (Vec::new(), vec![0.0; n], vec![0.0; n]);
        for (r, (g, x)) in g.chunks(n).zip(x.chunks(n)).enumerate() {
            let xh: Vec<f64> = x.iter().map(|v| (v - mean[r]) * rstd[r]).collect();
            let a = (0..n).map(|i| g[i] * w[i]).sum::<f64>() / n as f64;
            let c = (0..n).map(|i| g[i] * w[i] * xh[i]).sum::<f64>() / n as f64;
            dx.extend((0..n).map(|i| rstd[r] * (g[i] * w[i] - a - xh[i] * c)));
            for i in 0..n {
                dw[i] += g[i] * xh[i];
                db[i] += g[i];
            }
        }
        (dx, dw, db)
    }

    fn ref_lse(x: &[f64]) -> f64 {
        let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
    }

    fn ref_cross_entropy(x: &[f64], t: &[i64], n: usize, ignore: i64) -> f64 {
        let kept: Vec<f64> = x.chunks(n).zip(t).filter(|(_, &t)| t != ignore).map(|(x, &t)| ref_lse(x) - x[t as usize]).collect();
        kept.iter().sum::<f64>() / kept.len() as f64
    }

    fn ref_erf(x: f64) -> f64 {
        erf_f64(x)
    }

    fn ref_gelu(x: f64) -> f64 {
        0.5 * x * (1.0 + ref_erf(x * std::f64::consts::FRAC_1_SQRT_2))
    }

    fn ref_gelu_grad(x: f64) -> f64 {
        0.5 * (1.0 + ref_erf(x * std::f64::consts::FRAC_1_SQRT_2)) + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
    }

    // ---- scalar functions ----

    /// erf at fixed points, correctly rounded (mpmath, 50 digits).
    const ERF_F64: [(f64, f64); 31] = [
        (1e-300, 1.1283791670955126e-300),
        (5e-324, 5e-324),
        (1e-20, 1.1283791670955125e-20),
        (3.7e-09, 4.1750029182533965e-09),
        (1e-05, 1.1283791670579e-05),
        (0.0625, 0.07043197772238707),
        (0.1, 0.1124629160182849),
        (0.25, 0.27632639016823696),
        (0.5, 0.5204998778130465),
        (0.6174, 0.6174107484113941),
        (0.84375, 0.7672256612323416),
        (0.9, 0.7969082124228322),
        (1.0, 0.8427007929497149),
        (1.2, 0.9103139782296353),
        (1.25, 0.9229001282564583),
        (1.5, 0.9661051464753108),
        (2.0, 0.9953222650189527),
        (2.5, 0.999593047982555),
        (2.857, 0.9999466417399131),
        (3.0, 0.9999779095030014),
        (3.5, 0.9999992569016276),
        (4.0, 0.9999999845827421),
        (4.5, 0.9999999998033839),
        (5.0, 0.9999999999984626),
        (5.5, 0.9999999999999927),
        (5.9, 0.9999999999999999),
        (6.0, 1.0),
        (0.3333333333333333, 0.36264811176606293),
        (0.7777777777777777, 0.7286434264284015),
        (1.1111111111111112, 0.8838982560194514),
        (2.2222222222222223, 0.9983260086313754),
    ];

    #[test]
    fn erf_f64_is_within_one_ulp() {
        for (x, want) in ERF_F64 {
            for (x, want) in [(x, want), (-x, -want)] {
                let got = erf_f64(x);
                assert!((got - want).abs() <= ulp64(want), "erf({x:e}) = {got:e}, want {want:e}");
            }
        }
        assert_eq!(erf_f64(0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(erf_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(erf_f64(f64::INFINITY), 1.0);
        assert_eq!(erf_f64(f64::NEG_INFINITY), -1.0);
        assert_eq!(erf_f64(1e300), 1.0);
        assert!(erf_f64(f64::NAN).is_nan());
    }

    /// Max error in ulps of `f` against `want` over f32 values from `lo` to
    /// `hi` (taking every `stride`-th bit pattern) and their negations.
    fn ulp_scan(lo: f32, hi: f32, stride: u32, f: impl Fn(f32) -> f32, want: impl Fn(f64) -> f64) -> (f64, f32) {
        let (mut worst, mut at) = (0.0f64, 0.0f32);
        let mut b = lo.to_bits();
        while b <= hi.to_bits() {
            for x in [f32::from_bits(b), -f32::from_bits(b)] {
                let w = want(x as f64);
                let e = (f(x) as f64 - w).abs() / ulp32(w);
                if e > worst || e.is_nan() {
                    (worst, at) = (e, x);
                }
            }
            b += stride;
        }
        (worst, at)
    }

    #[test]
    fn erf_f32_is_within_one_and_a_half_ulps() {
        // Every 61st f32 from 2^-30 to 6 (10 million points), both signs.
        let (worst, at) = ulp_scan(9.3e-10, 6.0, 61, erf_f32, ref_erf);
        eprintln!("erf_f32: max error {worst:.3} ulp at {at:e}");
        assert!(worst <= 1.5, "{worst} ulp at {at:e}");
        for x in [0.0f32, -0.0] {
            assert_eq!(erf_f32(x).to_bits(), x.to_bits(), "erf({x}) keeps its sign");
        }
        for x in [f32::from_bits(1), 1e-40, f32::MIN_POSITIVE, 1e-30, 1e-20, 3e-10] {
            for x in [x, -x] {
                let want = ref_erf(x as f64);
                assert!((erf_f32(x) as f64 - want).abs() <= ulp32(want), "erf({x:e}) = {:e}, want {want:e}", erf_f32(x));
            }
        }
        for (x, want) in [(4.0f32, 1.0f32), (10.0, 1.0), (1e30, 1.0), (f32::MAX, 1.0), (f32::INFINITY, 1.0)] {
            assert_eq!(erf_f32(x), want, "erf({x})");
            assert_eq!(erf_f32(-x), -want, "erf(-{x})");
        }
        assert!(erf_f32(f32::NAN).is_nan());
        assert!(erf_f32(-f32::NAN).is_nan());
    }

    #[test]
    fn exp_f32_is_within_one_ulp() {
        // Normal results here; subnormal ones are measured below in units of 2^-149.
        let (worst, at) = ulp_scan(1e-30, 88.72, 53, exp_f32, f64::exp);
        assert!(worst <= 1.0, "{worst} ulp at {at:e}");
        let (sub, at) = ulp_scan(87.4, 103.0, 7, |x| exp_f32(-x.abs()), |x| (-x.abs()).exp());
        eprintln!("exp_f32: max error {worst:.3} ulp, {sub:.3} ulp for subnormal results");
        assert!(sub <= 1.0, "subnormal results: {sub} ulp at {at:e}");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(88.72), (88.72f32 as f64).exp() as f32, "no early overflow");
        assert_eq!(exp_f32(88.73), f32::INFINITY);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn one_plus_tanh_f32_is_within_three_ulps() {
        // Up to |u| 43, where 1 + tanh(u) is still a normal f32 (exp(86) is finite).
        // The reference in the same form: 1 + tanh(u) in f64 cancels to 0 below u = -19.
        let (worst, at) = ulp_scan(1e-30, 43.0, 97, Real::one_plus_tanh, |u| 2.0 / (1.0 + (-2.0 * u).exp()));
        eprintln!("one_plus_tanh f32: max error {worst:.3} ulp at {at:e}");
        assert!(worst <= 3.0, "{worst} ulp at {at:e}");
        assert_eq!(Real::one_plus_tanh(f32::INFINITY), 2.0);
        assert_eq!(Real::one_plus_tanh(f32::NEG_INFINITY), 0.0);
        assert!(Real::one_plus_tanh(f32::NAN).is_nan());
    }

    // ---- f32 kernels against f64 references ----

    /// Shapes covering a remainder lane, a single column, and rows long
    /// enough for the pairwise sum.
    const SHAPES: [(usize, usize); 5] = [(7, 37), (3, 1), (32, 256), (4, 1000), (2, 8)];

    #[test]
    fn softmax_and_log_softmax_match_f64() {
        let mut rng = Rng(1);
        let (mut w_sm, mut w_ls, mut w_bw) = (0.0f64, 0.0f64, 0.0f64);
        for (rows, n) in SHAPES {
            let x = rng.vec(rows * n, 3.0);
            let mut y = vec![0.0f32; rows * n];
            softmax_fwd(&x, n, &mut y);
            w_sm = w_sm.max(worst(&y, &ref_softmax(&wide(&x), None, n, false), rel(1e-30)));
            let mut l = vec![0.0f32; rows * n];
            log_softmax_fwd(&x, n, &mut l);
            w_ls = w_ls.max(worst(&l, &ref_softmax(&wide(&x), None, n, true), rel(1.0)));
            let g = rng.vec(rows * n, 1.0);
            let mut dx = vec![0.0f32; rows * n];
            softmax_bwd(&g, &y, n, &mut dx);
            let want = ref_softmax_bwd(&wide(&g), &wide(&y), None, n);
            // Relative to the row's scale: y * (g - s) cancels where g ≈ s.
            w_bw = w_bw.max(worst(&dx, &want, |i, _| y[i].abs() as f64 * (g[i].abs() as f64 + 1.0) + 1e-30));
        }
        eprintln!("softmax rel {w_sm:.2e}, log_softmax {w_ls:.2e} (abs below 1), softmax_bwd {w_bw:.2e}");
        // exp(x - max) inherits the rounding of x - max, up to |x - max| 2^-24.
        assert!(w_sm < 2e-6 && w_ls < 5e-7 && w_bw < 5e-7, "{w_sm} {w_ls} {w_bw}");
    }

    #[test]
    fn softmax_of_infinite_and_nan_rows_is_nan_as_pytorch() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        let x = [-inf, -inf, -inf, -inf, 0.0, 1.0, inf, 0.0, 1.0, nan, 0.0, 1.0];
        let mut y = [0.0f32; 12];
        softmax_fwd(&x, 3, &mut y);
        assert!(y[..3].iter().chain(&y[6..]).all(|v| v.is_nan()), "{y:?}");
        assert_eq!(y[3], 0.0);
        assert!((y[5] - 0.731_058_6).abs() < 1e-7);
        log_softmax_fwd(&x, 3, &mut y);
        assert!(y[..3].iter().chain(&y[6..]).all(|v| v.is_nan()), "{y:?}");
        assert_eq!(y[3], -inf);
    }

    #[test]
    fn masked_softmax_matches_f64_and_pytorch_semantics() {
        let mut rng = Rng(2);
        let (mut w_f, mut w_b) = (0.0f64, 0.0f64);
        for (rows, n) in SHAPES {
            let mut x = rng.vec(rows * n, 3.0);
            let mut mask = rng.mask(rows * n, 0.4);
            // Row 0 fully masked; masked entries holding inf and NaN must stay out.
            mask[..n].iter_mut().for_each(|m| *m = true);
            for (i, x) in x.iter_mut().enumerate().filter(|(i, _)| mask[*i]) {
                *x = [f32::INFINITY, f32::NAN, 1e30][i % 3];
            }
            let mut y = vec![0.0f32; rows * n];
            masked_softmax_fwd(&x, &mask, n, &mut y);
            let want = ref_softmax(&wide(&x), Some(&mask), n, false);
            assert!(y[..n].iter().all(|v| v.is_nan()), "a fully masked row is NaN");
            for r in 1..rows {
                for i in r * n..(r + 1) * n {
                    assert!(!mask[i] || y[i] == 0.0, "masked entry {i} is {}", y[i]);
                }
            }
            w_f = w_f.max(worst(&y, &want, rel(1e-30)));
            let mut g = rng.vec(rows * n, 1.0);
            g[n] = f32::NAN * if mask[n] { 1.0 } else { 0.0 }; // NaN only where masked
            g.iter_mut().zip(&mask).for_each(|(g, &m)| *g = if m { f32::NAN } else { *g });
            let mut dx = vec![1.0f32; rows * n];
            masked_softmax_bwd(&g, &y, &mask, n, &mut dx);
            assert!(dx[..n].iter().all(|&v| v == 0.0), "a fully masked row's gradient is 0: {:?}", &dx[..n]);
            assert!(dx.iter().zip(&mask).all(|(&d, &m)| !m || d == 0.0), "masked entries get 0");
            let want = ref_softmax_bwd(&wide(&g), &wide(&y), Some(&mask), n);
            w_b = w_b.max(worst(&dx, &want, |i, _| y[i].abs() as f64 * (g[i].abs() as f64 + 1.0) + 1e-30));
        }
        eprintln!("masked softmax rel {w_f:.2e}, masked softmax_bwd {w_b:.2e}");
        assert!(w_f < 2e-6 && w_b < 5e-7, "{w_f} {w_b}");
    }

    #[test]
    fn layernorm_matches_f64() {
        let mut rng = Rng(3);
        let mut w = [0.0f64; 6];
        for (rows, n) in SHAPES {
            for (offset, bias) in [(0.0f32, true), (30.0, false)] {
                let x: Vec<f32> = rng.vec(rows * n, 2.0).iter().map(|v| v + offset).collect();
                let (wt, b) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
                let b = bias.then_some(&b[..]);
                let (mut y, mut mean, mut rstd) = (vec![0.0f32; rows * n], vec![0.0f32; rows], vec![0.0f32; rows]);
                layernorm_fwd(&x, &wt, b, n, 1e-5, &mut y, &mut mean, &mut rstd);
                let (wy, wm, wr) = ref_layernorm(&wide(&x), &wide(&wt), b.map(wide).as_deref(), n, 1e-5);
                // y sums x̂ w and b, and x̂ carries the f32 mean's rounding
                // (|mean| 2^-24, as in PyTorch): relative to all three.
                let scale = |i: usize, _| {
                    let (r, w) = (i / n, wt[i % n].abs() as f64);
                    let terms = (x[i] as f64 - wm[r]).abs() * wr[r] * w + b.map_or(0.0, |b| b[i % n].abs() as f64);
                    terms + wm[r].abs() * wr[r] * w + 1e-6
                };
                w[0] = w[0].max(worst(&y, &wy, scale));
                w[1] = w[1].max(worst(&mean, &wm, |_, _| 2.0 + offset as f64));
                w[2] = w[2].max(worst(&rstd, &wr, rel(0.0)));
                let g = rng.vec(rows * n, 1.0);
                let (mut dx, mut dw, mut db) = (vec![0.0f32; rows * n], vec![7.0f32; n], vec![7.0f32; n]);
                layernorm_bwd(&g, &x, &wt, &mean, &rstd, n, &mut dx, &mut dw, bias.then_some(&mut db[..]));
                let (wdx, wdw, wdb) = ref_layernorm_bwd(&wide(&g), &wide(&x), &wide(&wt), &wide(&mean), &wide(&rstd), n);
                // Sums with cancellation: relative to the sum of magnitudes.
                let sdx = |i: usize, _| {
                    let (r, gw) = (i / n, (g[i] * wt[i % n]).abs() as f64);
                    let xh = (x[i] - mean[r]).abs() as f64 * rstd[r] as f64;
                    let a: f64 = (0..n).map(|j| (g[r * n + j] * wt[j]).abs() as f64).sum::<f64>() / n as f64;
                    rstd[r] as f64 * (gw + a * (1.0 + xh * 4.0)) + 1e-6
                };
                let col = |f: &dyn Fn(usize) -> f64| (0..n).map(|j| (0..rows).map(|r| f(r * n + j).abs()).sum::<f64>() + 1e-6).collect::<Vec<_>>();
                let sdw = col(&|i| g[i] as f64 * (x[i] as f64 - mean[i / n] as f64) * rstd[i / n] as f64);
                let sdb = col(&|i| g[i] as f64);
                w[3] = w[3].max(worst(&dx, &wdx, sdx));
                w[4] = w[4].max(worst(&dw, &wdw, |j, _| sdw[j]));
                if bias {
                    w[5] = w[5].max(worst(&db, &wdb, |j, _| sdb[j]));
                } else {
                    assert!(db.iter().all(|&v| v == 7.0), "db untouched when absent");
                }
            }
        }
        eprintln!("layernorm y {:.2e} mean {:.2e} rstd {:.2e} dx {:.2e} dw {:.2e} db {:.2e}", w[0], w[1], w[2], w[3], w[4], w[5]);
        assert!(w[..3].iter().all(|&e| e < 1e-6), "{w:?}");
        assert!(w[3..].iter().all(|&e| e < 1e-6), "{w:?}");
    }

    #[test]
    fn cross_entropy_matches_f64_and_pytorch_semantics() {
        let mut rng = Rng(4);
        let (mut w_l, mut w_lse, mut w_d) = (0.0f64, 0.0f64, 0.0f64);
        for (rows, n) in SHAPES {
            for offset in [0.0f32, 500.0] {
                let x: Vec<f32> = rng.vec(rows * n, 3.0).iter().map(|v| v + offset).collect();
                let t: Vec<i64> = (0..rows).map(|r| if r % 3 == 1 { -100 } else { (rng.uniform() * n as f64) as i64 }).collect();
                let mut lse = vec![0.0f32; rows];
                let loss = cross_entropy_fwd(&x, &t, n, -100, &mut lse);
                let want = ref_cross_entropy(&wide(&x), &t, n, -100);
                w_l = w_l.max((loss as f64 - want).abs() / want.abs().max(1e-3));
                let wl: Vec<f64> = wide(&x).chunks(n).map(ref_lse).collect();
                w_lse = w_lse.max(worst(&lse, &wl, rel(1.0)));
                let mut dx = vec![1.0f32; rows * n];
                cross_entropy_bwd(&x, &t, n, -100, &lse, 0.75, &mut dx);
                let count = t.iter().filter(|&&t| t != -100).count() as f64;
                let want: Vec<f64> = (0..rows * n)
                    .map(|i| match t[i / n] {
                        -100 => 0.0,
                        tt => 0.75 / count * ((x[i] as f64 - wl[i / n]).exp() - if tt as usize == i % n { 1.0 } else { 0.0 }),
                    })
                    .collect();
                // Relative to the larger of the two terms, k p and k.
                w_d = w_d.max(worst(&dx, &want, |i, v| v.abs().max(if t[i / n] as usize == i % n { 0.75 / count } else { 0.0 })));
                assert!(dx.chunks(n).zip(&t).all(|(d, &t)| t != -100 || d.iter().all(|&v| v == 0.0)));
            }
        }
        eprintln!("cross_entropy loss rel {w_l:.2e}, lse {w_lse:.2e}, dx {w_d:.2e}");
        assert!(w_l < 1e-6 && w_lse < 2e-7 && w_d < 2e-6, "{w_l} {w_lse} {w_d}");

        // Every row ignored: 0/0 as PyTorch, and a zero gradient.
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut lse = [0.0f32; 2];
        assert!(cross_entropy_fwd(&x, &[-100, -100], 2, -100, &mut lse).is_nan());
        let mut dx = [1.0f32; 4];
        cross_entropy_bwd(&x, &[-100, -100], 2, -100, &lse, 1.0, &mut dx);
        assert_eq!(dx, [0.0; 4]);
        // A target outside the row gives NaN rather than a panic.
        assert!(cross_entropy_fwd(&x, &[5, 0], 2, -100, &mut lse).is_nan());
        cross_entropy_bwd(&x, &[5, -3], 2, -100, &lse, 1.0, &mut dx);
    }

    #[test]
    fn gelu_matches_f64() {
        let mut x: Vec<f32> = (-12_000..=12_000).map(|i| i as f32 * 1e-3).collect();
        x.extend([0.0, -0.0, 1e-30, -1e-30, 1e-40, 30.0, -30.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        let mut y = vec![0.0f32; x.len()];
        gelu_fwd(&x, &mut y);
        // 1 + erf cancels for negative x, costing up to |x| 2^-24 absolute.
        let scale = |i: usize, v: f64| ulp32(v) + (x[i].abs() as f64) * 2f64.powi(-24);
        let want: Vec<f64> = x.iter().map(|&v| if v == f32::NEG_INFINITY { f64::NAN } else { ref_gelu(v as f64) }).collect();
        let wf = worst(&y, &want, scale);
        let g: Vec<f32> = (0..x.len()).map(|i| 1.0 - (i % 7) as f32 * 0.25).collect();
        let mut dx = vec![0.0f32; x.len()];
        gelu_bwd(&g, &x, &mut dx);
        let want: Vec<f64> = x.iter().zip(&g).map(|(&v, &g)| if v.is_infinite() { f64::NAN } else { g as f64 * ref_gelu_grad(v as f64) }).collect();
        let wb = worst(&dx, &want, |i, v| ulp32(v) + (g[i].abs() as f64) * 2f64.powi(-24) * (1.0 + x[i].abs() as f64));
        eprintln!("gelu fwd {wf:.2} units, bwd {wb:.2} units (ulp + |x| 2^-24)");
        assert!(wf <= 3.0 && wb <= 4.0, "{wf} {wb}");
        assert_eq!(y[x.len() - 5], 30.0);
        assert_eq!(y[x.len() - 4].to_bits(), (-0.0f32).to_bits(), "gelu(-30) = -0, as PyTorch");
        assert_eq!(y[x.len() - 3], f32::INFINITY);
        assert!(y[x.len() - 2].is_nan(), "gelu(-inf) = -inf * 0, as PyTorch");
    }

    /// The kept-Φ kernels against the recomputing ones, bit for bit.
    fn kept_cdf_matches<T: Real>(x: &[T], g: &[T]) {
        let n = x.len();
        let z = || vec![T::zero(); n];
        let (mut y, mut y2, mut cdf, mut dx, mut dx2) = (z(), z(), z(), z(), z());
        gelu_fwd(x, &mut y);
        gelu_bwd(g, x, &mut dx);
        gelu_fwd_cdf(x, &mut y2, &mut cdf);
        gelu_bwd_cdf(g, x, &cdf, &mut dx2);
        // SAFETY: plain floats, read as the bytes they are.
        let bits = |v: &[T]| unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }.to_vec();
        assert_eq!(bits(&y), bits(&y2), "forward");
        assert_eq!(bits(&dx), bits(&dx2), "backward");
    }

    #[test]
    fn gelu_with_kept_cdf_is_bit_identical() {
        let mut x: Vec<f32> = (-9_000..=9_000).map(|i| i as f32 * 1.3e-3).collect();
        x.extend([0.0, -0.0, 1e-40, 30.0, -30.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
        let g: Vec<f32> = (0..x.len()).map(|i| 1.0 - (i % 5) as f32 * 0.5).collect();
        kept_cdf_matches(&x, &g);
        let up = |v: &[f32]| v.iter().map(|&v| v as f64).collect::<Vec<_>>();
        kept_cdf_matches(&up(&x), &up(&g));
    }

    // ---- gradients against central differences, in f64 ----

    /// `d/dx_i sum(gout * f(x))` by central differences.
    fn fd(x: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
        let mut x = x.to_vec();
        (0..x.len())
            .map(|i| {
                let (v, h) = (x[i], 1e-6 * x[i].abs().max(1.0));
                x[i] = v + h;
                let up = f(&x);
                x[i] = v - h;
                let down = f(&x);
                x[i] = v;
                (up - down) / (2.0 * h)
            })
            .collect()
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).filter(|(_, b)| !b.is_nan()).map(|(a, b)| a * b).sum()
    }

    /// The loss `sum(gout * f(x))`, NaN outputs left out.
    fn weighted<'a>(gout: &'a [f64], f: impl Fn(&[f64], &mut [f64]) + 'a) -> impl Fn(&[f64]) -> f64 + 'a {
        move |x| {
            let mut y = vec![0.0; x.len()];
            f(x, &mut y);
            dot(gout, &y)
        }
    }

    fn close(got: &[f64], want: &[f64], what: &str) {
        let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
        let e = got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((g - w).abs())) / scale;
        eprintln!("{what}: finite differences agree to {e:.1e}");
        assert!(e < 1e-7, "{what}: {e}");
    }

    fn rand64(rng: &mut Rng, len: usize, scale: f64) -> Vec<f64> {
        (0..len).map(|_| rng.normal() * scale).collect()
    }

    #[test]
    fn gradients_match_finite_differences() {
        let mut rng = Rng(5);
        let (rows, n) = (4, 9);
        let x = rand64(&mut rng, rows * n, 2.0);
        let gout = rand64(&mut rng, rows * n, 1.0);
        let mut y = vec![0.0; rows * n];
        let mut dx = vec![0.0; rows * n];

        softmax_fwd(&x, n, &mut y);
        softmax_bwd(&gout, &y, n, &mut dx);
        close(&dx, &fd(&x, weighted(&gout, |x, y| softmax_fwd(x, n, y))), "softmax");

        let mut mask = rng.mask(rows * n, 0.4);
        mask[n..2 * n].iter_mut().for_each(|m| *m = true);
        masked_softmax_fwd(&x, &mask, n, &mut y);
        masked_softmax_bwd(&gout, &y, &mask, n, &mut dx);
        // The fully masked row is NaN, left out of the loss: its gradient is 0.
        close(&dx, &fd(&x, weighted(&gout, |x, y| masked_softmax_fwd(x, &mask, n, y))), "masked softmax");

        let (w, b) = (rand64(&mut rng, n, 1.0), rand64(&mut rng, n, 1.0));
        let ln = |x: &[f64], w: &[f64], b: &[f64]| {
            let (mut y, mut m, mut r) = (vec![0.0; x.len()], vec![0.0; rows], vec![0.0; rows]);
            layernorm_fwd(x, w, Some(b), n, 1e-5, &mut y, &mut m, &mut r);
            (dot(&gout, &y), m, r)
        };
        let (_, mean, rstd) = ln(&x, &w, &b);
        let (mut dw, mut db) = (vec![0.0; n], vec![0.0; n]);
        layernorm_bwd(&gout, &x, &w, &mean, &rstd, n, &mut dx, &mut dw, Some(&mut db));
        close(&dx, &fd(&x, |x| ln(x, &w, &b).0), "layernorm dx");
        close(&dw, &fd(&w, |w| ln(&x, w, &b).0), "layernorm dw");
        close(&db, &fd(&b, |b| ln(&x, &w, b).0), "layernorm db");

        let t = [3i64, -100, 0, 8];
        let mut lse = vec![0.0; rows];
        cross_entropy_fwd(&x, &t, n, -100, &mut lse);
        cross_entropy_bwd(&x, &t, n, -100, &lse, 1.7, &mut dx);
        close(&dx, &fd(&x, |x| 1.7 * cross_entropy_fwd(x, &t, n, -100, &mut vec![0.0; rows])), "cross-entropy");

        gelu_bwd(&gout, &x, &mut dx);
        close(&dx, &fd(&x, weighted(&gout, gelu_fwd)), "gelu");
    }

    // ---- determinism, empty input ----

    /// Every kernel's outputs, as bits, on inputs large enough for the pool.
    fn all_outputs(threads: usize) -> Vec<Vec<u32>> {
        par::set_threads(threads);
        let mut rng = Rng(6);
        // 38k elements: past the pool's threshold, three layer-norm blocks, two cross-entropy blocks.
        let (rows, n) = (300, 129);
        let x = rng.vec(rows * n, 3.0);
        let g = rng.vec(rows * n, 1.0);
        let mask = rng.mask(rows * n, 0.3);
        let (w, b) = (rng.vec(n, 1.0), rng.vec(n, 1.0));
        let t: Vec<i64> = (0..rows).map(|r| if r % 5 == 0 { -100 } else { (r * 7 % n) as i64 }).collect();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let mut out = Vec::new();
        let mut y = vec![0.0f32; rows * n];
        let mut dx = vec![0.0f32; rows * n];
        softmax_fwd(&x, n, &mut y);
        softmax_bwd(&g, &y, n, &mut dx);
        out.extend([bits(&y), bits(&dx)]);
        log_softmax_fwd(&x, n, &mut y);
        out.push(bits(&y));
        masked_softmax_fwd(&x, &mask, n, &mut y);
        masked_softmax_bwd(&g, &y, &mask, n, &mut dx);
        out.extend([bits(&y), bits(&dx)]);
        let (mut mean, mut rstd) = (vec![0.0f32; rows], vec![0.0f32; rows]);
        layernorm_fwd(&x, &w, Some(&b), n, 1e-5, &mut y, &mut mean, &mut rstd);
        let (mut dw, mut db) = (vec![0.0f32; n], vec![0.0f32; n]);
        layernorm_bwd(&g, &x, &w, &mean, &rstd, n, &mut dx, &mut dw, Some(&mut db));
        out.extend([bits(&y), bits(&mean), bits(&rstd), bits(&dx), bits(&dw), bits(&db)]);
        let mut lse = vec![0.0f32; rows];
        let loss = cross_entropy_fwd(&x, &t, n, -100, &mut lse);
        cross_entropy_bwd(&x, &t, n, -100, &lse, 1.0, &mut dx);
        out.extend([vec![loss.to_bits()], bits(&lse), bits(&dx)]);
        gelu_fwd(&x, &mut y);
        gelu_bwd(&g, &x, &mut dx);
        out.extend([bits(&y), bits(&dx)]);
        out
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        // The only test that sets the pool size (others running meanwhile
        // see it change, which must not change their results either).
        let serial = all_outputs(1);
        for threads in [2, 3, 8] {
            assert!(all_outputs(threads) == serial, "{threads} threads differ from 1");
        }
        par::set_threads(std::thread::available_parallelism().map_or(1, |n| n.get()));
    }

    #[test]
    fn empty_inputs_do_nothing() {
        let mut y: [f32; 0] = [];
        let mut some = [5.0f32; 4];
        for n in [0, 3] {
            softmax_fwd(&[], n, &mut y);
            log_softmax_fwd(&[], n, &mut y);
            softmax_bwd(&[], &[], n, &mut y);
            masked_softmax_fwd(&[], &[], n, &mut y);
            masked_softmax_bwd(&[], &[], &[], n, &mut y);
            layernorm_fwd(&[], &[1.0; 3][..n], None, n, 1e-5, &mut y, &mut [], &mut []);
            let (mut dw, mut db) = ([9.0f32; 3], [9.0f32; 3]);
            layernorm_bwd(&[], &[], &[1.0; 3][..n], &[], &[], n, &mut y, &mut dw[..n], Some(&mut db[..n]));
            assert!(dw.iter().zip(&db).take(n).all(|(&a, &b)| a == 0.0 && b == 0.0), "dw, db of no rows are 0");
            assert!(cross_entropy_fwd::<f32>(&[], &[], n, -100, &mut []).is_nan());
            cross_entropy_bwd(&[], &[], n, -100, &[], 1.0, &mut y);
        }
        // n = 0 with rows of nothing: nothing to write.
        softmax_fwd(&[], 0, &mut some);
        assert!(cross_entropy_fwd::<f32>(&[], &[-100, -100], 0, -100, &mut [0.0; 2]).is_nan());
        gelu_fwd(&[], &mut y);
        gelu_bwd(&[], &[], &mut y);
        assert_eq!(some, [5.0; 4]);
    }
}
