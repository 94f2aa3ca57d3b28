//! Host arrays of any HLO element type, and reading their elements as numbers.
//!
//! A [`HostArray`] is the host-side counterpart of a device buffer: an element type of
//! `tessera_hlo` (every type XLA has, sub-byte and fp8 types included), dimensions, and dense
//! row-major little-endian bytes, one [`HloElementType::byte_size`] per element (sub-byte types
//! take one byte each, as XLA's literals do). A [`HostValue`] is an array or a tuple of values.
//!
//! [`HostArray::get`] decodes one element into a [`Scalar`] so that arrays of any type can be
//! compared and printed; the fp8/fp4 families are decoded from their bit layouts.

use std::fmt;

use tessera_hlo::{ElementType as HloElementType, Literal, LiteralData, Shape};

use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::shape::ArrayShape;

/// A dense row-major array in host memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostArray {
    pub ty: HloElementType,
    pub dims: Vec<i64>,
    /// `element_count * ty.byte_size()` little-endian bytes.
    pub data: Vec<u8>,
}

/// An array or a (possibly nested) tuple of values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostValue {
    Array(HostArray),
    Tuple(Vec<HostValue>),
}

/// One decoded element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Pred(bool),
    /// Any integer type (s1..s64, u1..u64), exactly.
    Int(i128),
    /// Any real floating-point type, widened to f64 (exact for every type up to f64).
    Float(f64),
    Complex(f64, f64),
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Pred(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write_float(f, *x),
            Scalar::Complex(re, im) => {
                f.write_str("(")?;
                write_float(f, *re)?;
                f.write_str(", ")?;
                write_float(f, *im)?;
                f.write_str(")")
            }
        }
    }
}

/// The shortest spelling that reads back to the value: as an f32 when the value is one (every
/// type narrower than f64 widens exactly), else as an f64.
fn write_float(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    let narrow = x as f32;
    if f64::from(narrow) == x || x.is_nan() {
        write!(f, "{narrow:?}")
    } else {
        write!(f, "{x:?}")
    }
}

impl Scalar {
    /// The value as f64 (real part of a complex).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Pred(b) => f64::from(u8::from(b)),
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
            Scalar::Complex(re, _) => re,
        }
    }
}

fn element_count(dims: &[i64]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

/// Row-major strides of `dims`, in elements.
pub(crate) fn strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(0) as usize;
    }
    s
}

/// The multi-index of row-major position `linear` in `dims`.
pub(crate) fn unravel(mut linear: usize, dims: &[i64]) -> Vec<i64> {
    let mut idx = vec![0i64; dims.len()];
    for i in (0..dims.len()).rev() {
        let d = dims[i].max(1) as usize;
        idx[i] = (linear % d) as i64;
        linear /= d;
    }
    idx
}

impl HostArray {
    /// Checks that `data` holds exactly the elements of `ty[dims]`.
    pub fn new(ty: HloElementType, dims: Vec<i64>, data: Vec<u8>) -> Result<HostArray> {
        if !ty.is_array_type() {
            return Err(Error::InvalidArgument(format!(
                "{ty} is not an array element type"
            )));
        }
        let n = element_count(&dims).ok_or_else(|| {
            Error::InvalidArgument(format!("invalid dimensions {dims:?} for a host array"))
        })?;
        if data.len() != n * ty.byte_size() {
            return Err(Error::ShapeMismatch(format!(
                "{ty}{dims:?} needs {} bytes, got {}",
                n * ty.byte_size(),
                data.len()
            )));
        }
        Ok(HostArray { ty, dims, data })
    }

    /// An array of zeros (the zero of every type is all-zero bytes).
    pub fn zeros(ty: HloElementType, dims: &[i64]) -> HostArray {
        let n = element_count(dims).unwrap_or(0);
        HostArray {
            ty,
            dims: dims.to_vec(),
            data: vec![0; n * ty.byte_size()],
        }
    }

    /// An f32 array (for tests and examples).
    pub fn f32(dims: &[i64], values: &[f32]) -> Result<HostArray> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        HostArray::new(HloElementType::F32, dims.to_vec(), data)
    }

    /// An s32 array.
    pub fn s32(dims: &[i64], values: &[i32]) -> Result<HostArray> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        HostArray::new(HloElementType::S32, dims.to_vec(), data)
    }

    pub fn element_count(&self) -> usize {
        element_count(&self.dims).unwrap_or(0)
    }

    /// `f32[4,8]`.
    pub fn shape_string(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(i64::to_string).collect();
        format!("{}[{}]", self.ty, dims.join(","))
    }

    pub fn shape(&self) -> Shape {
        Shape::array(self.ty, &self.dims)
    }

    /// The runtime's view of the shape, for uploading; `None` for types the PJRT bindings do
    /// not carry (sub-byte integers, fp8/fp4).
    pub fn runtime_shape(&self) -> Option<ArrayShape> {
        Some(ArrayShape::new(runtime_type(self.ty)?, self.dims.clone()))
    }

    /// Decodes element `linear` (row-major position).
    pub fn get(&self, linear: usize) -> Scalar {
        let w = self.ty.byte_size();
        decode(self.ty, &self.data[linear * w..(linear + 1) * w])
    }

    /// Decodes the element at a multi-index.
    pub fn get_at(&self, index: &[i64]) -> Scalar {
        let linear: usize = index
            .iter()
            .zip(strides(&self.dims))
            .map(|(&i, s)| i as usize * s)
            .sum();
        self.get(linear)
    }

    /// The f32 values of an f32 array.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.ty == HloElementType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    pub fn from_literal(l: &Literal) -> Result<HostArray> {
        match (&l.shape, &l.data) {
            (Shape::Array(a), LiteralData::Array(b)) => {
                HostArray::new(a.ty, a.dims.to_vec(), b.clone())
            }
            _ => Err(Error::InvalidArgument(
                "literal is not an array literal".into(),
            )),
        }
    }

    pub fn to_literal(&self) -> Literal {
        Literal {
            shape: self.shape(),
            data: LiteralData::Array(self.data.clone()),
        }
    }
}

impl HostValue {
    /// The arrays of this value in pre-order (a tuple's leaves, or the array itself).
    pub fn leaves(&self) -> Vec<&HostArray> {
        fn walk<'a>(v: &'a HostValue, out: &mut Vec<&'a HostArray>) {
            match v {
                HostValue::Array(a) => out.push(a),
                HostValue::Tuple(e) => e.iter().for_each(|c| walk(c, out)),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    pub fn as_array(&self) -> Option<&HostArray> {
        match self {
            HostValue::Array(a) => Some(a),
            HostValue::Tuple(_) => None,
        }
    }

    /// Rebuilds a value of `shape` from its leaves in pre-order.
    pub fn from_leaves(shape: &Shape, leaves: Vec<HostArray>) -> Result<HostValue> {
        fn build(shape: &Shape, it: &mut std::vec::IntoIter<HostArray>) -> Result<HostValue> {
            match shape {
                Shape::Tuple(e) => Ok(HostValue::Tuple(
                    e.iter().map(|s| build(s, it)).collect::<Result<_>>()?,
                )),
                _ => it
                    .next()
                    .map(HostValue::Array)
                    .ok_or_else(|| Error::ShapeMismatch("too few leaves for the shape".into())),
            }
        }
        let mut it = leaves.into_iter();
        let v = build(shape, &mut it)?;
        if it.next().is_some() {
            return Err(Error::ShapeMismatch("too many leaves for the shape".into()));
        }
        Ok(v)
    }
}

/// `f32[4,8]`, `(f32[2], s32[])`: a shape in HLO's text spelling, without layouts.
pub fn shape_string(shape: &Shape) -> String {
    match shape {
        Shape::Array(a) => {
            let d: Vec<String> = a.dims.iter().map(i64::to_string).collect();
            format!("{}[{}]", a.ty, d.join(","))
        }
        Shape::Tuple(e) => {
            let parts: Vec<String> = e.iter().map(shape_string).collect();
            format!("({})", parts.join(", "))
        }
        other => other.element_type().name().to_string(),
    }
}

/// The PJRT element type of an HLO element type, when the bindings carry it.
pub fn runtime_type(ty: HloElementType) -> Option<ElementType> {
    ElementType::ALL.into_iter().find(|t| t.name() == ty.name())
}

/// The HLO element type of a PJRT element type.
pub fn hlo_type(ty: ElementType) -> HloElementType {
    HloElementType::from_name(ty.name()).expect("every runtime type has an HLO name")
}

fn le_u64(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    u64::from_le_bytes(x)
}

/// Decodes one element from its little-endian bytes.
pub fn decode(ty: HloElementType, b: &[u8]) -> Scalar {
    use HloElementType::*;
    let bits = ty.bit_width();
    match ty {
        Pred => Scalar::Pred(b[0] != 0),
        S1 | S2 | S4 | S8 | S16 | S32 | S64 => {
            let raw = le_u64(b);
            let shift = 64 - bits;
            Scalar::Int((((raw << shift) as i64) >> shift) as i128)
        }
        U1 | U2 | U4 | U8 | U16 | U32 | U64 => {
            let raw = le_u64(b);
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            Scalar::Int((raw & mask) as i128)
        }
        F32 => Scalar::Float(f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
        F64 => Scalar::Float(f64::from_bits(le_u64(b))),
        F16 => Scalar::Float(crate::element::F16(u16::from_le_bytes([b[0], b[1]])).to_f32() as f64),
        BF16 => {
            Scalar::Float(crate::element::Bf16(u16::from_le_bytes([b[0], b[1]])).to_f32() as f64)
        }
        C64 => Scalar::Complex(
            f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            f32::from_le_bytes([b[4], b[5], b[6], b[7]]) as f64,
        ),
        C128 => Scalar::Complex(
            f64::from_bits(le_u64(&b[..8])),
            f64::from_bits(le_u64(&b[8..])),
        ),
        F8E5M2 | F8E4M3 | F8E4M3FN | F8E4M3B11FNUZ | F8E3M4 | F8E5M2FNUZ | F8E4M3FNUZ
        | F4E2M1FN | F8E8M0FNU => Scalar::Float(decode_minifloat(ty, b[0])),
        Token | Opaque | Tuple | Buffer => Scalar::Int(0),
    }
}

/// How a small float type spends its bits and its special values.
struct MiniFloat {
    exp_bits: u32,
    mant_bits: u32,
    bias: i32,
    signed: bool,
    /// IEEE-like: all-ones exponent is inf (mantissa 0) or NaN.
    ieee: bool,
    /// "fn": only all-ones exponent and mantissa is NaN; no infinities.
    nan_all_ones: bool,
    /// "fnuz": the negative-zero pattern is the only NaN; no infinities, no -0.
    nan_neg_zero: bool,
}

fn mini_format(ty: HloElementType) -> MiniFloat {
    use HloElementType::*;
    let m = |exp_bits, mant_bits, bias, ieee, nan_all_ones, nan_neg_zero| MiniFloat {
        exp_bits,
        mant_bits,
        bias,
        signed: true,
        ieee,
        nan_all_ones,
        nan_neg_zero,
    };
    match ty {
        F8E5M2 => m(5, 2, 15, true, false, false),
        F8E4M3 => m(4, 3, 7, true, false, false),
        F8E4M3FN => m(4, 3, 7, false, true, false),
        F8E4M3B11FNUZ => m(4, 3, 11, false, false, true),
        F8E3M4 => m(3, 4, 3, true, false, false),
        F8E5M2FNUZ => m(5, 2, 16, false, false, true),
        F8E4M3FNUZ => m(4, 3, 8, false, false, true),
        F4E2M1FN => m(2, 1, 1, false, false, false),
        // F8E8M0FNU: exponent only, unsigned, 0xff is NaN.
        _ => MiniFloat {
            exp_bits: 8,
            mant_bits: 0,
            bias: 127,
            signed: false,
            ieee: false,
            nan_all_ones: true,
            nan_neg_zero: false,
        },
    }
}

/// Decodes an fp8/fp4 bit pattern (in the low bits of `byte`).
pub fn decode_minifloat(ty: HloElementType, byte: u8) -> f64 {
    let f = mini_format(ty);
    let width = f.exp_bits + f.mant_bits + u32::from(f.signed);
    let bits = u32::from(byte) & ((1u32 << width) - 1);
    let sign_bit = if f.signed {
        (bits >> (width - 1)) & 1
    } else {
        0
    };
    let exp = (bits >> f.mant_bits) & ((1 << f.exp_bits) - 1);
    let mant = bits & ((1 << f.mant_bits) - 1);
    let exp_max = (1u32 << f.exp_bits) - 1;
    let sign = if sign_bit == 1 { -1.0 } else { 1.0 };
    if f.nan_neg_zero && sign_bit == 1 && exp == 0 && mant == 0 {
        return f64::NAN;
    }
    if f.ieee && exp == exp_max {
        return if mant == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if f.nan_all_ones && exp == exp_max && mant == (1 << f.mant_bits) - 1 {
        return f64::NAN;
    }
    let scale = 2f64.powi(f.mant_bits as i32);
    if exp == 0 && f.mant_bits > 0 {
        // Subnormal.
        return sign * (mant as f64 / scale) * 2f64.powi(1 - f.bias);
    }
    sign * (1.0 + mant as f64 / scale) * 2f64.powi(exp as i32 - f.bias)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_integers_of_every_width() {
        assert_eq!(decode(HloElementType::S4, &[0x0f]), Scalar::Int(-1));
        assert_eq!(decode(HloElementType::S4, &[0x07]), Scalar::Int(7));
        assert_eq!(decode(HloElementType::U4, &[0x0f]), Scalar::Int(15));
        assert_eq!(decode(HloElementType::S8, &[0x80]), Scalar::Int(-128));
        assert_eq!(
            decode(HloElementType::U64, &u64::MAX.to_le_bytes()),
            Scalar::Int(u64::MAX as i128)
        );
        assert_eq!(
            decode(HloElementType::S64, &i64::MIN.to_le_bytes()),
            Scalar::Int(i64::MIN as i128)
        );
    }

    #[test]
    fn decodes_small_floats() {
        // f8e4m3fn: 0x38 = 1.0, 0x7e = 448 (max), 0x7f = NaN, 0x01 = 2^-9.
        assert_eq!(decode_minifloat(HloElementType::F8E4M3FN, 0x38), 1.0);
        assert_eq!(decode_minifloat(HloElementType::F8E4M3FN, 0x7e), 448.0);
        assert!(decode_minifloat(HloElementType::F8E4M3FN, 0x7f).is_nan());
        assert_eq!(
            decode_minifloat(HloElementType::F8E4M3FN, 0x01),
            2f64.powi(-9)
        );
        // f8e5m2: 0x3c = 1.0, 0x7c = inf, 0xfc = -inf.
        assert_eq!(decode_minifloat(HloElementType::F8E5M2, 0x3c), 1.0);
        assert_eq!(
            decode_minifloat(HloElementType::F8E5M2, 0x7c),
            f64::INFINITY
        );
        assert_eq!(
            decode_minifloat(HloElementType::F8E5M2, 0xfc),
            f64::NEG_INFINITY
        );
        // fnuz: 0x80 is NaN, 0x40 = 1.0 for e4m3fnuz (bias 8).
        assert!(decode_minifloat(HloElementType::F8E4M3FNUZ, 0x80).is_nan());
        assert_eq!(decode_minifloat(HloElementType::F8E4M3FNUZ, 0x40), 1.0);
        // f4e2m1fn: 0b0111 = 6.0 (max), 0b0010 = 1.0, 0b1001 = -0.5.
        assert_eq!(decode_minifloat(HloElementType::F4E2M1FN, 0x7), 6.0);
        assert_eq!(decode_minifloat(HloElementType::F4E2M1FN, 0x2), 1.0);
        assert_eq!(decode_minifloat(HloElementType::F4E2M1FN, 0x9), -0.5);
        // f8e8m0fnu: 127 = 1.0, 128 = 2.0, 0xff = NaN.
        assert_eq!(decode_minifloat(HloElementType::F8E8M0FNU, 127), 1.0);
        assert_eq!(decode_minifloat(HloElementType::F8E8M0FNU, 128), 2.0);
        assert!(decode_minifloat(HloElementType::F8E8M0FNU, 0xff).is_nan());
    }

    #[test]
    fn host_array_checks_sizes() {
        assert!(HostArray::new(HloElementType::F32, vec![2, 3], vec![0; 24]).is_ok());
        assert!(HostArray::new(HloElementType::F32, vec![2, 3], vec![0; 23]).is_err());
        let a = HostArray::f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(a.get_at(&[1, 0]), Scalar::Float(3.0));
        assert_eq!(a.shape_string(), "f32[2,2]");
    }
}
