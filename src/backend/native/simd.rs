//! Runtime SIMD dispatch. The library is built for the x86-64 baseline
//! (SSE2: 4 f32 lanes); `multiversion!` compiles a hot loop twice more, for
//! AVX2 (8 lanes) and AVX-512 (16), and runs the widest copy the CPU has,
//! found once per process. Every copy runs the same operations in the same
//! order (LLVM does not contract `a * b + c` into an FMA on its own), so
//! results are bit-identical whichever runs. `ENKAI_SIMD=baseline` (or
//! `avx2`) caps the choice, to compare the copies or to rule them out.

/// The widest copy this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Baseline = 0,
    Avx2 = 1,
    Avx512 = 2,
}

/// The level in use (detected once; `Baseline` off x86-64).
#[inline]
pub fn level() -> Level {
    use std::sync::atomic::{AtomicU8, Ordering};
    static LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);
    match LEVEL.load(Ordering::Relaxed) {
        0 => Level::Baseline,
        1 => Level::Avx2,
        2 => Level::Avx512,
        _ => {
            let l = detect();
            LEVEL.store(l as u8, Ordering::Relaxed);
            l
        }
    }
}

fn detect() -> Level {
    let cap = match std::env::var("ENKAI_SIMD").as_deref() {
        Ok("baseline") => Level::Baseline,
        Ok("avx2") => Level::Avx2,
        _ => Level::Avx512,
    };
    #[cfg(target_arch = "x86_64")]
    {
        use std::is_x86_feature_detected as has;
        let found = if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq") && has!("avx2") && has!("fma") {
            Level::Avx512
        } else if has!("avx2") && has!("fma") {
            Level::Avx2
        } else {
            Level::Baseline
        };
        found.min(cap)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = cap;
        Level::Baseline
    }
}

/// `fn $name<..>(args)`: runs the `#[inline(always)]` function `$imp` on
/// the same arguments, compiled for the widest level `level()` allows.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$($g:ident: $b:path),*>($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? => $imp:path) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$($g: $b),*>($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::backend::native::simd::{level, Level};
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn wide<$($g: $b),*>($($a: $t),*) $(-> $r)? {
                    $imp($($a),*)
                }
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn wider<$($g: $b),*>($($a: $t),*) $(-> $r)? {
                    $imp($($a),*)
                }
                match level() {
                    // SAFETY: the CPU has the features each copy was compiled for.
                    Level::Avx512 => return unsafe { wider($($a),*) },
                    Level::Avx2 => return unsafe { wide($($a),*) },
                    Level::Baseline => {}
                }
            }
            $imp($($a),*)
        }
    };
}
pub(crate) use multiversion;
