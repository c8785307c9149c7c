//! The CPU kernels of weight-only int8 quantization: a float activation
//! times an int8 weight, the activation quantized on the fly. Core's `quant`
//! keeps the quantized tensors; both backends run their products here, since
//! the weights are host memory either way.
//!
//! Activations are quantized symmetrically: per row for a per-channel weight
//! (`sx = max|x_row| / 127`), per block of 32 for a `q8_0` weight, as ggml's
//! `vec_dot_q8_0_q8_0` pairs them, except that the activation's block scale
//! stays fp32 (ggml rounds it to fp16; fp32 is at least as accurate and costs
//! nothing here). The integer dot products are exact; the error against the
//! float product of the dequantized weight is the activation's rounding
//! alone: `|y - x·Wd| <= (sx/2)·Σ_k |Wd[k]|` per output, plus fp32 rounding.

use super::par;
use super::qgemm;

/// A weight packed for the products: `n` output rows of `k` inputs.
pub struct Packed {
    n: usize,
    k: usize,
    kind: Kind,
}

enum Kind {
    /// Per output row scale (`scales[n]`).
    PerChannel { w: qgemm::PackedI8, scales: Vec<f32> },
    /// One scale per block of 32 along `k` (`[n, k/32]`).
    Q8_0 { w: qgemm::PackedQ8_0 },
}

impl Packed {
    /// Packs a per-channel weight whose int8 values `q` are `[n, k]`
    /// (`transposed`: `[k, n]`), with one scale per output row.
    pub fn per_channel(q: &[i8], n: usize, k: usize, transposed: bool, scales: &[f32]) -> Packed {
        let rows: std::borrow::Cow<[i8]> = if transposed { transpose(q, k, n).into() } else { q.into() };
        Packed { n, k, kind: Kind::PerChannel { w: qgemm::PackedI8::pack(&rows, n, k), scales: scales.to_vec() } }
    }

    /// Packs a `q8_0` weight `[n, k]` (`k` a multiple of 32) with its block scales `[n, k/32]`.
    pub fn q8_0(q: &[i8], scales: &[f32], n: usize, k: usize) -> Packed {
        Packed { n, k, kind: Kind::Q8_0 { w: qgemm::PackedQ8_0::pack(q, scales, n, k) } }
    }
}

fn transpose(q: &[i8], rows: usize, cols: usize) -> Vec<i8> {
    let mut t = vec![0i8; q.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = q[r * cols + c];
        }
    }
    t
}

/// Adding and then subtracting 1.5·2^23 rounds an f32 below 2^22 to an
/// integer, ties to even, as the FPU rounds the sum. It vectorizes, where
/// `round_ties_even` is a libm call on baseline x86-64 (21% of a 1024^3
/// product's time, measured).
const ROUND: f32 = 12_582_912.0;

/// Symmetric int8 of each `len`-long piece of `x` with scale `max|piece| /
/// 127` (0 for an all-zero piece): the values into `q`, the scales into `s`.
/// A non-finite value makes its piece's scale NaN, so that its products are NaN.
fn quantize_pieces(x: &[f32], q: &mut [i8], s: &mut [f32], len: usize) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { quantize_pieces_avx512(x, q, s, len) };
    }
    quantize_pieces_wide(x, q, s, len)
}

// The portable body compiled for AVX2 as well, for CPUs without AVX-512.
super::simd::multiversion!(fn quantize_pieces_wide<>(x: &[f32], q: &mut [i8], s: &mut [f32], len: usize) => quantize_pieces_body);

/// `quantize_pieces` in AVX-512: `vcvtps2dq` rounds to nearest even (the
/// MXCSR default) and `vpmovsdb` narrows with saturation. The autovectorized
/// body ran at 1.3 ns per element (45% of the int8 GEMM's time at 1024^3).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantize_pieces_avx512(x: &[f32], q: &mut [i8], s: &mut [f32], len: usize) {
    use std::arch::x86_64::*;
    let body = len / 16 * 16;
    for ((xp, qp), sp) in x.chunks_exact(len).zip(q.chunks_exact_mut(len)).zip(s.iter_mut()) {
        let (mut amax, mut bad) = (_mm512_setzero_ps(), 0u16);
        for c in xp[..body].chunks_exact(16) {
            // SAFETY: `c` holds 16 floats.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
            amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
            // v - v is NaN exactly for a NaN or an infinity.
            bad |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(_mm512_sub_ps(v, v), _mm512_setzero_ps());
        }
        let mut m = _mm512_reduce_max_ps(amax);
        let mut p = 0f32;
        for v in &xp[body..] {
            m = if v.abs() > m { v.abs() } else { m };
            p += v * 0.0;
        }
        if bad != 0 || p.is_nan() {
            qp.fill(0);
            *sp = f32::NAN;
            continue;
        }
        let d = m / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let vid = _mm512_set1_ps(id);
        for (c, o) in xp[..body].chunks_exact(16).zip(qp[..body].chunks_exact_mut(16)) {
            // SAFETY: `c` holds 16 floats and `o` 16 bytes.
            unsafe {
                let r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(c.as_ptr()), vid));
                _mm_storeu_si128(o.as_mut_ptr().cast(), _mm512_cvtsepi32_epi8(r));
            }
        }
        for (o, v) in qp[body..].iter_mut().zip(&xp[body..]) {
            *o = ((v * id + ROUND) - ROUND) as i8;
        }
        *sp = d;
    }
}

#[inline(always)]
fn quantize_pieces_body(x: &[f32], q: &mut [i8], s: &mut [f32], len: usize) {
    for ((xp, qp), sp) in x.chunks_exact(len).zip(q.chunks_exact_mut(len)).zip(s.iter_mut()) {
        // Lane-wise maxima, and a sum of `v * 0` that is NaN for a NaN or an infinity.
        let (mut amax, mut poison) = ([0f32; 16], [0f32; 16]);
        let mut chunks = xp.chunks_exact(16);
        for c in &mut chunks {
            for i in 0..16 {
                let a = c[i].abs();
                amax[i] = if a > amax[i] { a } else { amax[i] };
                poison[i] += c[i] * 0.0;
            }
        }
        let (mut m, mut p) = (0f32, 0f32);
        for v in chunks.remainder() {
            m = if v.abs() > m { v.abs() } else { m };
            p += v * 0.0;
        }
        for i in 0..16 {
            m = if amax[i] > m { amax[i] } else { m };
            p += poison[i];
        }
        if p.is_nan() {
            qp.fill(0);
            *sp = f32::NAN;
            continue;
        }
        let d = m / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        // |v * id| <= 127 up to an ulp, so the saturating cast never clips.
        for (o, v) in qp.iter_mut().zip(xp) {
            *o = ((v * id + ROUND) - ROUND) as i8;
        }
        *sp = d;
    }
}

/// `y[m, n] = x[m, k] · Wᵀ` for the packed weight; `x` holds finite values.
pub fn linear(x: &[f32], m: usize, w: &Packed, y: &mut [f32]) {
    let (n, k) = (w.n, w.k);
    debug_assert!(x.len() == m * k && y.len() == m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        y.fill(0.0);
        return;
    }
    let threads = if par::parallel(m * n * k / 4) { par::threads() } else { 1 };
    let pool = |tasks: usize, body: &(dyn Fn(usize) + Sync)| par::for_each(tasks, body);
    match &w.kind {
        Kind::PerChannel { w: pw, scales } => {
            let (mut qx, mut sx) = (vec![0i8; m * k], vec![0f32; m]);
            quantize_pieces(x, &mut qx, &mut sx, k);
            let mut acc = vec![0i32; m * n];
            qgemm::gemm_i8_packed_with(m, &qx, k, pw, &mut acc, threads, &pool, true);
            for ((yr, ar), s) in y.chunks_exact_mut(n).zip(acc.chunks_exact(n)).zip(&sx) {
                for ((o, &a), &sw) in yr.iter_mut().zip(ar).zip(scales) {
                    *o = a as f32 * (s * sw);
                }
            }
        }
        Kind::Q8_0 { w: pw } => {
            let nb = k / 32;
            let (mut qx, mut sx) = (vec![0i8; m * k], vec![0f32; m * nb]);
            quantize_pieces(x, &mut qx, &mut sx, 32);
            qgemm::gemm_q8_0_packed_with(m, &qx, &sx, pw, y, threads, &pool, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 quantizer and the portable one give the same values and
    /// scales: ties (x * id exactly k + 0.5), saturation, tails, NaN and inf.
    #[test]
    fn both_quantizers_agree() {
        let mut x: Vec<f32> = (0..4 * 96).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0).collect();
        // Piece 1: max 127, so id = 1 and the halves are ties.
        for (i, v) in x[96..192].iter_mut().enumerate() {
            *v = (i as f32 - 48.0) + 0.5;
        }
        x[96] = 127.0;
        x[2 * 96 + 95] = f32::NAN; // a NaN in the tail of piece 2
        x[3 * 96 + 3] = f32::INFINITY;
        for len in [96, 32] {
            let (mut qa, mut sa) = (vec![0i8; x.len()], vec![0f32; x.len() / len]);
            let (mut qb, mut sb) = (qa.clone(), sa.clone());
            quantize_pieces(&x, &mut qa, &mut sa, len);
            quantize_pieces_body(&x, &mut qb, &mut sb, len);
            assert_eq!(qa, qb);
            assert!(sa.iter().zip(&sb).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        let (mut q, mut s) = (vec![0i8; 96], vec![0f32; 1]);
        quantize_pieces(&x[96..192], &mut q, &mut s, 96);
        assert_eq!(s[0], 1.0);
        assert_eq!(&q[1..5], &[-46, -46, -44, -44]); // -46.5, -45.5, -44.5, -43.5: to even
    }
}
