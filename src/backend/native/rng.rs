//! The native backend's random numbers: one process-wide generator seeded by
//! `manual_seed` (xoshiro256++ over SplitMix64 seeding). Draws are taken in
//! one short critical section per tensor, not per element; the numbers are
//! reproducible for a seed, but not torch's (which the ABI never promised).

use std::sync::Mutex;

use super::elem::{cast, with_elem};
use super::tensor::Raw;

pub struct Xoshiro([u64; 4]);

impl Xoshiro {
    fn seeded(seed: u64) -> Xoshiro {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Xoshiro([next(), next(), next(), next()])
    }

    fn next(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1) on a grid of `bits` bits, so that rounding to a
    /// type of that many significand bits never gives 1.
    pub fn unit(&mut self, bits: u32) -> f64 {
        (self.next() >> (64 - bits)) as f64 * (-f64::from(bits)).exp2()
    }

    /// Uniform in [0, n) (Lemire's multiply; `n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in (0, 1]: never 0, so `ln` is finite.
    pub fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64)
    }
}

static GEN: Mutex<Option<Xoshiro>> = Mutex::new(None);

pub fn manual_seed(seed: i64) {
    *GEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Xoshiro::seeded(seed as u64));
}

/// A generator split off the global one, so filling runs outside the lock.
pub fn split() -> Xoshiro {
    let mut g = GEN.lock().unwrap_or_else(|e| e.into_inner());
    let g = g.get_or_insert_with(|| Xoshiro::seeded(67280421310721));
    Xoshiro::seeded(g.next())
}

/// Standard normal values (Box–Muller) into a fresh contiguous tensor.
pub fn randn(t: &Raw) {
    fill_randn(&mut split(), t);
}

/// Standard normal values into each tensor in turn, from a generator of
/// this call's own seeded with `seed`: the process's generator is neither
/// read nor reseeded, so threads drawing at once each get their seed's values.
pub fn randn_seeded(ts: &[&Raw], seed: i64) {
    let mut r = Xoshiro::seeded(seed as u64);
    ts.iter().for_each(|t| fill_randn(&mut r, t));
}

fn fill_randn(r: &mut Xoshiro, t: &Raw) {
    with_elem!(t.dtype(), T => {
        let s = t.slice_mut::<T>();
        let mut pairs = s.chunks_mut(2);
        for c in &mut pairs {
            let (u, v) = (r.uniform(), r.uniform());
            let rad = (-2.0 * u.ln()).sqrt();
            let th = std::f64::consts::TAU * v;
            c[0] = cast::<f64, T>(rad * th.cos());
            if let Some(x) = c.get_mut(1) {
                *x = cast::<f64, T>(rad * th.sin());
            }
        }
    });
}

/// Uniform values in [0, 1) into a fresh contiguous floating tensor.
pub fn rand(t: &Raw) {
    let mut r = split();
    super::elem::with_float!(t.dtype(), T => {
        let bits = match t.dtype() {
            crate::dtype::DType::F64 => 53,
            crate::dtype::DType::F16 => 11,
            crate::dtype::DType::BF16 => 8,
            _ => 24,
        };
        t.slice_mut::<T>().iter_mut().for_each(|x| *x = cast::<f64, T>(r.unit(bits)));
    }, _ => {});
}

/// `scale` with probability `keep`, else 0, into a fresh contiguous tensor.
pub fn bernoulli_scaled(t: &Raw, keep: f64, scale: f64) {
    let mut r = split();
    with_elem!(t.dtype(), T => {
        let (on, off) = (cast::<f64, T>(scale), cast::<f64, T>(0.0));
        for x in t.slice_mut::<T>() {
            *x = if r.uniform() <= keep { on } else { off };
        }
    });
}

/// The generator's state: 32 bytes (seeded first if it never was).
pub fn state() -> [u8; 32] {
    let mut g = GEN.lock().unwrap_or_else(|e| e.into_inner());
    let g = g.get_or_insert_with(|| Xoshiro::seeded(67280421310721));
    let mut out = [0u8; 32];
    for (c, w) in out.chunks_mut(8).zip(g.0) {
        c.copy_from_slice(&w.to_le_bytes());
    }
    out
}

pub fn set_state(bytes: &[u8; 32]) {
    let w = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    *GEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Xoshiro([w(0), w(1), w(2), w(3)]));
}
