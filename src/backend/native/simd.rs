//! Runtime SIMD dispatch. The library is built for the x86-64 baseline
//! (SSE2: 4 f32 lanes); `multiversion!` compiles a hot loop a second time
//! for AVX2 (8 lanes) and picks that copy when the CPU has AVX2 and FMA,
//! checked once. Both copies run the same operations in the same order
//! (LLVM does not contract `a * b + c` into an FMA on its own), so results
//! are bit-identical whichever copy runs.

/// Whether this CPU runs the AVX2 copies (detected once; always false off x86-64).
#[inline]
pub fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::atomic::{AtomicU8, Ordering};
        static HAS: AtomicU8 = AtomicU8::new(2);
        match HAS.load(Ordering::Relaxed) {
            2 => {
                let has = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
                HAS.store(has as u8, Ordering::Relaxed);
                has
            }
            v => v == 1,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `fn $name<..>(args)`: runs the `#[inline(always)]` function `$imp` on
/// the same arguments, compiled for AVX2 when `avx2()` says so.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident<$($g:ident: $b:path),*>($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? => $imp:path) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$($g: $b),*>($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn wide<$($g: $b),*>($($a: $t),*) $(-> $r)? {
                    $imp($($a),*)
                }
                if $crate::backend::native::simd::avx2() {
                    // SAFETY: the CPU has the features `wide` was compiled for.
                    return unsafe { wide($($a),*) };
                }
            }
            $imp($($a),*)
        }
    };
}
pub(crate) use multiversion;
