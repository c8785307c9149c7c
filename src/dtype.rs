//! Element types as the ABI names them (backend-agnostic).

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    Bool,
    U8,
    I8,
    I16,
    /// complex64: (re, im) fp32 pairs, interleaved as PyTorch stores them.
    C64,
    /// complex128: (re, im) fp64 pairs.
    C128,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::C64,
        DType::C128,
    ];

    /// Parses a dtype name; both the canonical and the short alias are accepted, case-sensitively.
    pub fn parse(name: &str) -> Result<DType> {
        match Self::from_name(name.as_bytes()) {
            Some(d) => Ok(d),
            None => crate::bail!(
                E_INVALID_ARG,
                "unknown dtype {name:?} (expected fp32, fp16, bf16, fp64, int64, int32, int16, int8, bool, uint8, complex64 or complex128)"
            ),
        }
    }

    /// The dtype a name (without its NUL) denotes, if any.
    pub fn from_name(name: &[u8]) -> Option<DType> {
        Some(match name {
            b"fp32" | b"f32" => DType::F32,
            b"fp16" | b"f16" => DType::F16,
            b"bf16" => DType::BF16,
            b"fp64" | b"f64" => DType::F64,
            b"int64" | b"i64" => DType::I64,
            b"int32" | b"i32" => DType::I32,
            b"bool" => DType::Bool,
            b"uint8" | b"u8" => DType::U8,
            b"int8" | b"i8" => DType::I8,
            b"int16" | b"i16" => DType::I16,
            b"complex64" | b"c64" => DType::C64,
            b"complex128" | b"c128" => DType::C128,
            _ => return None,
        })
    }

    /// Longest name `from_name` knows.
    pub const MAX_NAME: usize = 10;

    /// Whether `v` converts to this dtype without overflow, by c10's rule
    /// (`c10::overflows`): floating types take NaN and ±inf and any finite
    /// value up to their largest; integers take neither NaN nor inf nor
    /// anything outside their range; bool takes everything.
    pub fn holds(self, v: f64) -> bool {
        let within = |lo: f64, hi: f64| v >= lo && v <= hi;
        match self {
            DType::F64 | DType::C128 | DType::Bool => true,
            DType::F32 | DType::C64 => !v.is_finite() || within(-(f32::MAX as f64), f32::MAX as f64),
            DType::F16 => !v.is_finite() || within(-65504.0, 65504.0),
            DType::BF16 => !v.is_finite() || within(-3.3895313892515355e38, 3.3895313892515355e38),
            // i64::MAX as a double is 2^63, and c10 compares against that.
            DType::I64 => within(i64::MIN as f64, i64::MAX as f64),
            DType::I32 => within(i32::MIN as f64, i32::MAX as f64),
            DType::U8 => within(0.0, 255.0),
            DType::I8 => within(-128.0, 127.0),
            DType::I16 => within(-32768.0, 32767.0),
        }
    }

    /// The canonical name, as `enkai_tensor_dtype` reports it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "fp32",
            DType::F16 => "fp16",
            DType::BF16 => "bf16",
            DType::F64 => "fp64",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    pub fn size(self) -> usize {
        match self {
            DType::C128 => 16,
            DType::F64 | DType::I64 | DType::C64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::Bool | DType::U8 | DType::I8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// Floating or complex: the dtypes that carry gradients.
    pub fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// A complex dtype's component dtype (`real`, `abs`); other dtypes are their own.
    pub fn to_real(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// The complex dtype with this floating dtype's precision (fp64 → complex128, else complex64).
    pub fn to_complex(self) -> DType {
        match self {
            DType::F64 | DType::C128 => DType::C128,
            _ => DType::C64,
        }
    }
}
