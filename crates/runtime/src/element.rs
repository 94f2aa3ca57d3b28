//! Array element types the CPU plugin can hold, and the Rust types that map
//! onto them for host<->device copies.

use std::fmt;

/// An element type of a device array (`PJRT_Buffer_Type`, the subset with a
/// byte-addressable host representation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    Pred,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
    Bf16,
    C64,
    C128,
}

impl ElementType {
    pub const ALL: [ElementType; 15] = [
        Self::Pred,
        Self::S8,
        Self::S16,
        Self::S32,
        Self::S64,
        Self::U8,
        Self::U16,
        Self::U32,
        Self::U64,
        Self::F16,
        Self::F32,
        Self::F64,
        Self::Bf16,
        Self::C64,
        Self::C128,
    ];

    /// The `PJRT_Buffer_Type` value.
    pub fn to_raw(self) -> i32 {
        match self {
            Self::Pred => 1,
            Self::S8 => 2,
            Self::S16 => 3,
            Self::S32 => 4,
            Self::S64 => 5,
            Self::U8 => 6,
            Self::U16 => 7,
            Self::U32 => 8,
            Self::U64 => 9,
            Self::F16 => 10,
            Self::F32 => 11,
            Self::F64 => 12,
            Self::Bf16 => 13,
            Self::C64 => 14,
            Self::C128 => 15,
        }
    }

    /// Maps a `PJRT_Buffer_Type`; `None` for types without a host mapping here
    /// (sub-byte ints, fp8, tokens, invalid).
    pub fn from_raw(raw: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.to_raw() == raw)
    }

    /// Bytes per element in the dense host layout.
    pub fn byte_size(self) -> usize {
        match self {
            Self::Pred | Self::S8 | Self::U8 => 1,
            Self::S16 | Self::U16 | Self::F16 | Self::Bf16 => 2,
            Self::S32 | Self::U32 | Self::F32 => 4,
            Self::S64 | Self::U64 | Self::F64 | Self::C64 => 8,
            Self::C128 => 16,
        }
    }

    /// HLO's spelling: `f32`, `pred`, `c64`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::Pred => "pred",
            Self::S8 => "s8",
            Self::S16 => "s16",
            Self::S32 => "s32",
            Self::S64 => "s64",
            Self::U8 => "u8",
            Self::U16 => "u16",
            Self::U32 => "u32",
            Self::U64 => "u64",
            Self::F16 => "f16",
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::Bf16 => "bf16",
            Self::C64 => "c64",
            Self::C128 => "c128",
        }
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A complex number as the device stores it: real part, then imaginary part.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

impl<T> Complex<T> {
    pub fn new(re: T, im: T) -> Self {
        Self { re, im }
    }
}

/// IEEE half precision, stored as its bit pattern.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

/// bfloat16, stored as its bit pattern (the upper half of an f32).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Rounds to nearest even; NaN stays NaN.
    pub fn from_f32(x: f32) -> Self {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x40);
        }
        let round = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(round) >> 16) as u16)
    }
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

impl F16 {
    /// Exact for every value representable in f16; others round toward zero in
    /// the mantissa (enough for test data and debugging output).
    pub fn from_f32(x: f32) -> Self {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32;
        let mant = bits & 0x7f_ffff;
        if exp == 0xff {
            let nan = if mant != 0 { 0x200 } else { 0 };
            return F16(sign | 0x7c00 | nan);
        }
        let e = exp - 127 + 15;
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e <= 0 {
            if e < -10 {
                return F16(sign);
            }
            let m = (mant | 0x80_0000) >> (14 - e);
            return F16(sign | m as u16);
        }
        F16(sign | ((e as u16) << 10) | (mant >> 13) as u16)
    }
    pub fn to_f32(self) -> f32 {
        let sign = ((self.0 & 0x8000) as u32) << 16;
        let exp = ((self.0 >> 10) & 0x1f) as u32;
        let mant = (self.0 & 0x3ff) as u32;
        let bits = match (exp, mant) {
            (0, 0) => sign,
            (0, m) => {
                // Subnormal: magnitude m * 2^-24.
                let v = m as f32 * 2f32.powi(-24);
                return if sign != 0 { -v } else { v };
            }
            (0x1f, 0) => sign | 0x7f80_0000,
            (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
            (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
        };
        f32::from_bits(bits)
    }
}

/// A Rust type whose values are laid out exactly like one device element.
///
/// # Safety
/// Implementors must be plain data of exactly `TYPE.byte_size()` bytes with
/// no padding, valid for every bit pattern the device can produce (for `bool`,
/// the device only produces 0 and 1).
pub unsafe trait NativeType: Copy + 'static {
    const TYPE: ElementType;
}

macro_rules! native {
    ($($t:ty => $e:ident),* $(,)?) => {
        $(unsafe impl NativeType for $t { const TYPE: ElementType = ElementType::$e; })*
    };
}

native!(
    bool => Pred,
    i8 => S8,
    i16 => S16,
    i32 => S32,
    i64 => S64,
    u8 => U8,
    u16 => U16,
    u32 => U32,
    u64 => U64,
    F16 => F16,
    f32 => F32,
    f64 => F64,
    Bf16 => Bf16,
    Complex<f32> => C64,
    Complex<f64> => C128,
);
