//! Element types: one Rust type per ABI dtype, the type each computes in
//! (bf16 and fp16 in f32, as PyTorch's CPU kernels do), and conversions
//! with the semantics of c10's `static_cast` between them.

use half::{bf16, f16};

use crate::dtype::DType;

/// A bool element: one byte, 0 or 1 once written by a kernel (bytes the
/// caller copied in may hold other values; every reader treats non-zero as true).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[repr(transparent)]
pub struct B8(pub u8);

/// A value in transit between element types: exact for every source.
#[derive(Clone, Copy)]
pub enum Sc {
    F(f64),
    I(i64),
    B(bool),
}

/// What kernels compute in: wrapping integer arithmetic, IEEE floats, and
/// bool as logical or/and.
pub trait Arith: Copy + Send + Sync + PartialOrd + Default + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! arith_float {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)] fn add(self, o: Self) -> Self { self + o }
            #[inline(always)] fn sub(self, o: Self) -> Self { self - o }
            #[inline(always)] fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)] fn div(self, o: Self) -> Self { self / o }
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
arith_float!(f32, f64);

macro_rules! arith_int {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            // Integer division never runs: `div` promotes integers to fp32 first.
            #[inline(always)] fn div(self, o: Self) -> Self { self.checked_div(o).unwrap_or(0) }
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { v as i64 as $t }
        }
    )*};
}
arith_int!(i64, i32, i16, i8, u8);

impl PartialOrd for B8 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        (self.0 != 0).partial_cmp(&(o.0 != 0))
    }
}

impl Arith for B8 {
    const ZERO: Self = B8(0);
    const ONE: Self = B8(1);
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        B8(u8::from(self.0 != 0 || o.0 != 0))
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        B8(u8::from((self.0 != 0) != (o.0 != 0)))
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        B8(u8::from(self.0 != 0 && o.0 != 0))
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        self.mul(o)
    }
    fn to_f64(self) -> f64 {
        f64::from(u8::from(self.0 != 0))
    }
    fn from_f64(v: f64) -> Self {
        B8(u8::from(v != 0.0))
    }
}

/// A storable element of one ABI dtype.
pub trait Elem: Copy + Send + Sync + Default + 'static {
    const DT: DType;
    type Acc: Arith;
    fn up(self) -> Self::Acc;
    fn down(a: Self::Acc) -> Self;
    fn to_sc(self) -> Sc;
    fn from_sc(s: Sc) -> Self;
    /// (re, im) of a complex element; others are never asked (`cast` asks complex types only).
    #[inline(always)]
    fn parts(self) -> (f64, f64) {
        (0.0, 0.0)
    }
    #[inline(always)]
    fn from_parts(re: f64, _im: f64) -> Self {
        Self::from_sc(Sc::F(re))
    }
}

/// `static_cast<D>(s)` as c10 does it: complex to real keeps the real part,
/// real to complex has a zero imaginary part.
#[inline(always)]
pub fn cast<S: Elem, D: Elem>(s: S) -> D {
    if S::DT.is_complex() && D::DT.is_complex() {
        // Sc carries one number; between complex types both parts go through f64 (exact).
        let (re, im) = s.parts();
        D::from_parts(re, im)
    } else {
        D::from_sc(s.to_sc())
    }
}

macro_rules! elem_same {
    ($t:ty, $dt:ident, $sc:ident, $from:expr) => {
        impl Elem for $t {
            const DT: DType = DType::$dt;
            type Acc = $t;
            #[inline(always)]
            fn up(self) -> $t {
                self
            }
            #[inline(always)]
            fn down(a: $t) -> $t {
                a
            }
            #[inline(always)]
            fn to_sc(self) -> Sc {
                Sc::$sc(self.into())
            }
            #[inline(always)]
            fn from_sc(s: Sc) -> $t {
                let f: fn(Sc) -> $t = $from;
                f(s)
            }
        }
    };
}

elem_same!(f32, F32, F, |s| match s {
    Sc::F(v) => v as f32,
    Sc::I(v) => v as f32,
    Sc::B(b) => f32::from(u8::from(b)),
});
elem_same!(f64, F64, F, |s| match s {
    Sc::F(v) => v,
    Sc::I(v) => v as f64,
    Sc::B(b) => f64::from(u8::from(b)),
});
// Out-of-range float-to-int casts are undefined in C++; PyTorch on x86 gives
// what cvttsd2si gives, the "integer indefinite" value MIN, and so do these.
fn f_to_i64(v: f64) -> i64 {
    if v.is_nan() || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&v) {
        i64::MIN
    } else {
        v as i64
    }
}

fn f_to_i32(v: f64) -> i32 {
    if v.is_nan() || !(-2147483648.0..2147483648.0).contains(&v) {
        i32::MIN
    } else {
        v as i32
    }
}

elem_same!(i64, I64, I, |s| match s {
    Sc::F(v) => f_to_i64(v),
    Sc::I(v) => v,
    Sc::B(b) => i64::from(b),
});
elem_same!(i32, I32, I, |s| match s {
    Sc::F(v) => f_to_i32(v),
    Sc::I(v) => v as i32,
    Sc::B(b) => i32::from(b),
});
// Floats to int16/int8 as x86 converts them (through int32, then wrapped).
elem_same!(i16, I16, I, |s| match s {
    Sc::F(v) => f_to_i32(v) as i16,
    Sc::I(v) => v as i16,
    Sc::B(b) => i16::from(b),
});
elem_same!(i8, I8, I, |s| match s {
    Sc::F(v) => f_to_i32(v) as i8,
    Sc::I(v) => v as i8,
    Sc::B(b) => i8::from(b),
});
// c10 converts floats to uint8 through int64, so negatives wrap instead of being UB.
elem_same!(u8, U8, I, |s| match s {
    Sc::F(v) => f_to_i64(v) as u8,
    Sc::I(v) => v as u8,
    Sc::B(b) => u8::from(b),
});

impl Elem for B8 {
    const DT: DType = DType::Bool;
    type Acc = B8;
    #[inline(always)]
    fn up(self) -> B8 {
        self
    }
    #[inline(always)]
    fn down(a: B8) -> B8 {
        a
    }
    #[inline(always)]
    fn to_sc(self) -> Sc {
        Sc::B(self.0 != 0)
    }
    #[inline(always)]
    fn from_sc(s: Sc) -> B8 {
        B8(u8::from(match s {
            Sc::F(v) => v != 0.0,
            Sc::I(v) => v != 0,
            Sc::B(b) => b,
        }))
    }
}

/// fp32 → bf16 as PyTorch's CPU kernels convert (`cvtfp32_bf16`, which
/// `Tensor.to` and the ops' results go through): round to nearest even, and
/// every NaN becomes 0xFFFF (the `half` crate keeps the payload).
#[inline(always)]
pub fn bf16_from_f32(a: f32) -> bf16 {
    if a.is_nan() {
        bf16::from_bits(0xFFFF)
    } else {
        bf16::from_f32(a)
    }
}

// c10's Half and BFloat16 are built from a float: a double or an integer
// is first converted to float, then rounded to nearest even.
macro_rules! elem_half {
    ($t:ty, $dt:ident, $from_f32:path) => {
        impl Elem for $t {
            const DT: DType = DType::$dt;
            type Acc = f32;
            #[inline(always)]
            fn up(self) -> f32 {
                self.to_f32()
            }
            #[inline(always)]
            fn down(a: f32) -> $t {
                $from_f32(a)
            }
            #[inline(always)]
            fn to_sc(self) -> Sc {
                Sc::F(self.to_f64())
            }
            #[inline(always)]
            fn from_sc(s: Sc) -> $t {
                $from_f32(f32::from_sc(s))
            }
        }
    };
}
elem_half!(bf16, BF16, bf16_from_f32);
elem_half!(f16, F16, f16::from_f32);

/// A complex element, (re, im) adjacent as C++'s `std::complex` and PyTorch
/// store it. Arithmetic is complex arithmetic (division as c10::complex
/// divides, by Smith's scaling); the order is lexicographic only to satisfy
/// `Arith`'s bound: no op that compares runs on complex (core refuses them).
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
#[repr(C)]
pub struct Cx<R> {
    pub re: R,
    pub im: R,
}

/// complex64's element.
pub type C32 = Cx<f32>;
/// complex128's element.
pub type C64 = Cx<f64>;

impl<R: num_traits::Float> Cx<R> {
    #[inline(always)]
    pub fn new(re: R, im: R) -> Self {
        Cx { re, im }
    }
    #[inline(always)]
    pub fn conj(self) -> Self {
        Cx { re: self.re, im: -self.im }
    }
    #[inline(always)]
    pub fn cmul(self, o: Self) -> Self {
        Cx { re: self.re * o.re - self.im * o.im, im: self.re * o.im + self.im * o.re }
    }
    /// c10::complex's `operator/` (Smith's algorithm, as numpy's).
    #[inline(always)]
    pub fn cdiv(self, o: Self) -> Self {
        let (a, b, c, d) = (self.re, self.im, o.re, o.im);
        if c.abs() >= d.abs() {
            if c == R::zero() && d == R::zero() {
                return Cx { re: a / c.abs(), im: b / d.abs() };
            }
            let rat = d / c;
            let scl = R::one() / (c + d * rat);
            Cx { re: (a + b * rat) * scl, im: (b - a * rat) * scl }
        } else {
            let rat = c / d;
            let scl = R::one() / (d + c * rat);
            Cx { re: (a * rat + b) * scl, im: (b * rat - a) * scl }
        }
    }
    #[inline(always)]
    pub fn abs(self) -> R {
        self.re.hypot(self.im)
    }
    #[inline(always)]
    pub fn arg(self) -> R {
        self.im.atan2(self.re)
    }
    #[inline(always)]
    pub fn exp(self) -> Self {
        let m = self.re.exp();
        // exp(x + 0i) is exactly real, also where x overflows (inf * 0 would be NaN).
        if self.im == R::zero() {
            return Cx { re: m, im: self.im };
        }
        Cx { re: m * self.im.cos(), im: m * self.im.sin() }
    }
    #[inline(always)]
    pub fn ln(self) -> Self {
        Cx { re: self.abs().ln(), im: self.arg() }
    }
    /// The principal root, without the cancellation of sqrt((|z| - re) / 2).
    #[inline(always)]
    pub fn sqrt(self) -> Self {
        let (x, y) = (self.re, self.im);
        if x == R::zero() && y == R::zero() {
            return Cx { re: R::zero(), im: y };
        }
        if y.is_infinite() {
            return Cx { re: R::infinity(), im: y };
        }
        let two = R::one() + R::one();
        let t = ((x.abs() + self.abs()) / two).sqrt();
        if x >= R::zero() {
            Cx { re: t, im: y / (two * t) }
        } else {
            Cx { re: y.abs() / (two * t), im: t.copysign(y) }
        }
    }
}

macro_rules! elem_complex {
    ($r:ty, $dt:ident) => {
        impl Arith for Cx<$r> {
            const ZERO: Self = Cx { re: 0.0, im: 0.0 };
            const ONE: Self = Cx { re: 1.0, im: 0.0 };
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                Cx { re: self.re + o.re, im: self.im + o.im }
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                Cx { re: self.re - o.re, im: self.im - o.im }
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.cmul(o)
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self.cdiv(o)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.re as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                Cx { re: v as $r, im: 0.0 }
            }
        }
        impl Elem for Cx<$r> {
            const DT: DType = DType::$dt;
            type Acc = Self;
            #[inline(always)]
            fn up(self) -> Self {
                self
            }
            #[inline(always)]
            fn down(a: Self) -> Self {
                a
            }
            /// To a real type: the real part, as c10's `static_cast` does.
            #[inline(always)]
            fn to_sc(self) -> Sc {
                Sc::F(self.re as f64)
            }
            #[inline(always)]
            fn from_sc(s: Sc) -> Self {
                Cx { re: <$r>::from_sc(s), im: 0.0 }
            }
            #[inline(always)]
            fn parts(self) -> (f64, f64) {
                (self.re as f64, self.im as f64)
            }
            #[inline(always)]
            fn from_parts(re: f64, im: f64) -> Self {
                Cx { re: re as $r, im: im as $r }
            }
        }
    };
}
elem_complex!(f32, C64);
elem_complex!(f64, C128);

/// A `match` on dtype `$dt` that runs `$body` with `$T` bound to each listed
/// variant's element type, and `$other` (when given) for the rest.
macro_rules! match_elem {
    ($dt:expr, $T:ident => $body:expr, [$($v:ident: $t:ty),*] $(, _ => $other:expr)?) => {{
        use $crate::dtype::DType;
        match $dt {
            $(DType::$v => {
                type $T = $t;
                $body
            })*
            $(_ => $other,)?
        }
    }};
}
pub(crate) use match_elem;

/// Runs `$body` with `$T` bound to the element type of `$dt`.
macro_rules! with_elem {
    ($dt:expr, $T:ident => $body:expr) => {
        $crate::backend::native::elem::match_elem!($dt, $T => $body, [
            F32: f32, F64: f64, BF16: half::bf16, F16: half::f16,
            I64: i64, I32: i32, Bool: $crate::backend::native::elem::B8, U8: u8, I8: i8, I16: i16,
            C64: $crate::backend::native::elem::C32, C128: $crate::backend::native::elem::C64
        ])
    };
}
pub(crate) use with_elem;

/// As `with_elem`, for floating dtypes only; `$other` otherwise.
/// As `with_elem`, for the ordered (real) dtypes only; `$other` for complex.
macro_rules! with_ordered {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::backend::native::elem::match_elem!($dt, $T => $body, [
            F32: f32, F64: f64, BF16: half::bf16, F16: half::f16,
            I64: i64, I32: i32, Bool: $crate::backend::native::elem::B8, U8: u8, I8: i8, I16: i16
        ], _ => $other)
    };
}
pub(crate) use with_ordered;

macro_rules! with_float {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::backend::native::elem::match_elem!($dt, $T => $body, [F32: f32, F64: f64, BF16: half::bf16, F16: half::f16], _ => $other)
    };
}
pub(crate) use with_float;

/// Floating element types whose computing type is a real (f32 or f64).
pub trait FloatElem: Elem<Acc = Self::Real> {
    type Real: super::fused::Real + Arith;
}
impl FloatElem for f32 {
    type Real = f32;
}
impl FloatElem for f64 {
    type Real = f64;
}
impl FloatElem for bf16 {
    type Real = f32;
}
impl FloatElem for f16 {
    type Real = f32;
}

pub use crate::vocab::{promote, promote_types};
