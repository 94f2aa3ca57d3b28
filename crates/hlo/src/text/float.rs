//! Narrow floating-point formats (f16, bf16, the f8 family, f4e2m1fn, f8e8m0fnu) and XLA's way of
//! printing floating-point values.
//!
//! Conversions round to nearest, ties to even, as XLA's (Eigen's and ml_dtypes') casts do. Like
//! XLA's parser, decimal text is first read as an `f64`; `bf16` and `f16` then go through `f32`
//! (Eigen converts from `float`), the 8- and 4-bit types convert from the `f64` directly.

use crate::types::ElementType;

/// How a format spends its special encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Specials {
    /// IEEE 754: all-ones exponent is infinity (mantissa 0) or NaN.
    Ieee,
    /// `fn`: no infinity; only all-ones exponent and mantissa is NaN.
    Fn,
    /// `fnuz`: no infinity, no negative zero; the negative-zero pattern is the only NaN.
    Fnuz,
    /// No infinity and no NaN (f4e2m1fn).
    None,
    /// f8e8m0fnu: no sign, no mantissa, no zero; 0xff is NaN.
    E8M0,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct FloatFormat {
    pub exp_bits: u32,
    pub man_bits: u32,
    pub bias: i32,
    pub specials: Specials,
}

impl FloatFormat {
    /// The format of a narrow float type (not f32/f64).
    pub fn of(ty: ElementType) -> Option<FloatFormat> {
        use ElementType::*;
        let (exp_bits, man_bits, bias, specials) = match ty {
            F16 => (5, 10, 15, Specials::Ieee),
            BF16 => (8, 7, 127, Specials::Ieee),
            F8E5M2 => (5, 2, 15, Specials::Ieee),
            F8E4M3 => (4, 3, 7, Specials::Ieee),
            F8E4M3FN => (4, 3, 7, Specials::Fn),
            F8E4M3B11FNUZ => (4, 3, 11, Specials::Fnuz),
            F8E3M4 => (3, 4, 3, Specials::Ieee),
            F8E5M2FNUZ => (5, 2, 16, Specials::Fnuz),
            F8E4M3FNUZ => (4, 3, 8, Specials::Fnuz),
            F4E2M1FN => (2, 1, 1, Specials::None),
            F8E8M0FNU => (8, 0, 127, Specials::E8M0),
            _ => return None,
        };
        Some(FloatFormat {
            exp_bits,
            man_bits,
            bias,
            specials,
        })
    }

    fn sign_bit(&self) -> u32 {
        if self.specials == Specials::E8M0 {
            0
        } else {
            1 << (self.exp_bits + self.man_bits)
        }
    }

    fn exp_max(&self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    fn man_mask(&self) -> u32 {
        (1 << self.man_bits) - 1
    }

    /// The bit pattern of a NaN with the given sign and mantissa payload (IEEE-like formats;
    /// the others have a single NaN).
    pub fn nan_with_payload(&self, negative: bool, payload: u64) -> u32 {
        if self.specials != Specials::Ieee {
            return self.nan(negative);
        }
        let sign = if negative { self.sign_bit() } else { 0 };
        let p = (payload as u32) & self.man_mask();
        let p = if p == 0 { 1 << (self.man_bits - 1) } else { p };
        sign | (self.exp_max() << self.man_bits) | p
    }

    /// The bit pattern of a quiet NaN with the given sign.
    pub fn nan(&self, negative: bool) -> u32 {
        let sign = if negative { self.sign_bit() } else { 0 };
        match self.specials {
            Specials::Ieee => sign | (self.exp_max() << self.man_bits) | (1 << (self.man_bits - 1)),
            Specials::Fn => sign | (self.exp_max() << self.man_bits) | self.man_mask(),
            Specials::Fnuz => self.sign_bit(),
            Specials::None => sign,
            Specials::E8M0 => 0xff,
        }
    }

    /// Largest finite value.
    pub fn max_finite(&self) -> f64 {
        let bits = match self.specials {
            Specials::Ieee => ((self.exp_max() - 1) << self.man_bits) | self.man_mask(),
            Specials::Fn => (self.exp_max() << self.man_bits) | (self.man_mask() - 1),
            Specials::Fnuz | Specials::None => (self.exp_max() << self.man_bits) | self.man_mask(),
            Specials::E8M0 => 0xfe,
        };
        self.decode(bits)
    }

    pub fn is_nan(&self, bits: u32) -> bool {
        match self.specials {
            Specials::Ieee => {
                (bits >> self.man_bits) & self.exp_max() == self.exp_max()
                    && bits & self.man_mask() != 0
            }
            Specials::Fn => {
                bits & !self.sign_bit() == (self.exp_max() << self.man_bits) | self.man_mask()
            }
            Specials::Fnuz => bits == self.sign_bit(),
            Specials::None => false,
            Specials::E8M0 => bits == 0xff,
        }
    }

    /// The value of a bit pattern.
    pub fn decode(&self, bits: u32) -> f64 {
        if self.is_nan(bits) {
            // The fnuz NaN is the negative-zero pattern: XLA prints it as `-nan`.
            return if bits & self.sign_bit() != 0 {
                -f64::NAN
            } else {
                f64::NAN
            };
        }
        if self.specials == Specials::E8M0 {
            return (2f64).powi(bits as i32 - self.bias);
        }
        let negative = bits & self.sign_bit() != 0;
        let e = (bits >> self.man_bits) & self.exp_max();
        let m = bits & self.man_mask();
        let magnitude = if self.specials == Specials::Ieee && e == self.exp_max() {
            f64::INFINITY
        } else if e == 0 {
            m as f64 * (2f64).powi(1 - self.bias - self.man_bits as i32)
        } else {
            ((1u64 << self.man_bits) + m as u64) as f64
                * (2f64).powi(e as i32 - self.bias - self.man_bits as i32)
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The nearest value (ties to even) of this format; overflow gives infinity where the format
    /// has one and NaN otherwise (f4e2m1fn, which has neither, saturates).
    pub fn encode(&self, v: f64) -> u32 {
        if v.is_nan() {
            return self.nan(v.is_sign_negative());
        }
        let negative = v.is_sign_negative();
        let sign = if negative { self.sign_bit() } else { 0 };
        if self.specials == Specials::E8M0 && (negative && v != 0.0) {
            return 0xff;
        }
        let overflow = || match self.specials {
            Specials::Ieee => sign | (self.exp_max() << self.man_bits),
            Specials::Fn | Specials::Fnuz | Specials::E8M0 => self.nan(negative),
            Specials::None => sign | (self.exp_max() << self.man_bits) | self.man_mask(),
        };
        if v.is_infinite() {
            return overflow();
        }
        let a = v.abs();
        if a == 0.0 {
            return match self.specials {
                Specials::Fnuz => 0,
                Specials::E8M0 => 0,
                _ => sign,
            };
        }
        let bits = a.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1u64 << 52) - 1);
        let (m, e2) = if exp == 0 {
            (frac, -1074)
        } else {
            (frac | (1u64 << 52), exp - 1075)
        };
        let lg = 63 - m.leading_zeros() as i32 + e2;
        let emin = if self.specials == Specials::E8M0 {
            -self.bias
        } else {
            1 - self.bias
        };
        let mut qexp = lg.max(emin) - self.man_bits as i32;
        let shift = qexp - e2;
        let mut n: u64 = if shift <= 0 {
            // Not reachable for formats narrower than f64, kept for safety.
            m.checked_shl((-shift) as u32).unwrap_or(u64::MAX)
        } else if shift >= 64 {
            0
        } else {
            let q = m >> shift;
            let r = m & ((1u64 << shift) - 1);
            let half = 1u64 << (shift - 1);
            if r > half || (r == half && q & 1 == 1) {
                q + 1
            } else {
                q
            }
        };
        if n == 1u64 << (self.man_bits + 1) {
            n >>= 1;
            qexp += 1;
        }
        if self.specials == Specials::E8M0 {
            if n == 0 {
                return 0;
            }
            let e = qexp + self.bias;
            return if e >= 0xff { 0xff } else { e as u32 };
        }
        if n < 1u64 << self.man_bits {
            // Subnormal (or zero after rounding).
            return sign | n as u32;
        }
        let e = qexp + self.man_bits as i32 + self.bias;
        let mant = (n - (1u64 << self.man_bits)) as u32;
        let too_big = match self.specials {
            Specials::Ieee => e >= self.exp_max() as i32,
            Specials::Fn => {
                e > self.exp_max() as i32 || (e == self.exp_max() as i32 && mant == self.man_mask())
            }
            _ => e > self.exp_max() as i32,
        };
        if too_big {
            return overflow();
        }
        if self.specials == Specials::Fnuz && e == 0 && mant == 0 {
            return 0;
        }
        sign | ((e as u32) << self.man_bits) | mant
    }
}

/// Converts an `f64` read from text to the bits of `ty` the way XLA's parser does; `None` for
/// types that are not floating point.
pub(crate) fn f64_to_bits(ty: ElementType, v: f64) -> Option<u64> {
    match ty {
        ElementType::F64 => Some(v.to_bits()),
        ElementType::F32 => Some((v as f32).to_bits() as u64),
        ElementType::F16 | ElementType::BF16 => {
            let f = FloatFormat::of(ty)?;
            Some(f.encode(v as f32 as f64) as u64)
        }
        _ => Some(FloatFormat::of(ty)?.encode(v) as u64),
    }
}

/// The value of float bits of type `ty`.
pub(crate) fn bits_to_f64(ty: ElementType, bits: u64) -> f64 {
    match ty {
        ElementType::F64 => f64::from_bits(bits),
        ElementType::F32 => f32::from_bits(bits as u32) as f64,
        _ => FloatFormat::of(ty).map_or(0.0, |f| f.decode(bits as u32)),
    }
}

/// Formats like C's `%.{precision}g`.
pub(crate) fn format_g(v: f64, precision: usize, out: &mut String) {
    use std::fmt::Write;
    if v.is_nan() {
        out.push_str(if v.is_sign_negative() { "-nan" } else { "nan" });
        return;
    }
    if v.is_infinite() {
        out.push_str(if v < 0.0 { "-inf" } else { "inf" });
        return;
    }
    let p = precision.max(1);
    if v == 0.0 {
        // XLA prints `-0`, which its lexer reads back as the integer 0 (losing the sign);
        // `-0.0` keeps it.
        out.push_str(if v.is_sign_negative() { "-0.0" } else { "0" });
        return;
    }
    let sci = format!("{:.*e}", p - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    if x < -4 || x >= p as i32 {
        let m = strip_zeros(mantissa);
        let _ = write!(
            out,
            "{}e{}{:02}",
            m,
            if x < 0 { '-' } else { '+' },
            x.unsigned_abs()
        );
    } else {
        let decimals = (p as i32 - 1 - x).max(0) as usize;
        let fixed = format!("{:.*}", decimals, v);
        out.push_str(strip_zeros(&fixed));
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Appends `v` as XLA prints an element of type `ty`: the shortest of `%.{digits10}g` and
/// `%.{max_digits10}g` that reads back exactly for f32/f64, `%.{max_digits10}g` for narrower
/// types; NaNs as `nan`, `-nan` or `nan(0x<payload>)`.
pub(crate) fn format_float(ty: ElementType, bits: u64, out: &mut String) {
    use std::fmt::Write;
    match ty {
        ElementType::F32 => {
            let f = f32::from_bits(bits as u32);
            if f.is_nan() {
                nan_text(f.is_sign_negative(), bits & 0x7f_ffff, 0x40_0000, out);
                return;
            }
            let start = out.len();
            format_g(f as f64, 6, out);
            if out[start..].parse::<f32>().ok() != Some(f) {
                out.truncate(start);
                format_g(f as f64, 9, out);
            }
        }
        ElementType::F64 => {
            let f = f64::from_bits(bits);
            if f.is_nan() {
                nan_text(
                    f.is_sign_negative(),
                    bits & ((1u64 << 52) - 1),
                    1u64 << 51,
                    out,
                );
                return;
            }
            let start = out.len();
            format_g(f, 15, out);
            if out[start..].parse::<f64>().ok() != Some(f) {
                out.truncate(start);
                format_g(f, 17, out);
            }
        }
        _ => {
            let Some(fmt) = FloatFormat::of(ty) else {
                let _ = write!(out, "{bits}");
                return;
            };
            let v = fmt.decode(bits as u32);
            if v.is_nan() && fmt.specials == Specials::Ieee {
                let payload = bits & fmt.man_mask() as u64;
                nan_text(v.is_sign_negative(), payload, 1 << (fmt.man_bits - 1), out);
                return;
            }
            // ml_dtypes' max_digits10: 2 + floor(digits * log10(2)), digits = mantissa + 1.
            let digits = fmt.man_bits as u64 + 1;
            let p = 2 + (digits * 30103 / 100000) as usize;
            format_g(v, p, out);
        }
    }
}

fn nan_text(negative: bool, payload: u64, quiet: u64, out: &mut String) {
    use std::fmt::Write;
    if negative {
        out.push('-');
    }
    if payload == quiet {
        out.push_str("nan");
    } else {
        let _ = write!(out, "nan(0x{payload:x})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElementType::*;

    fn show(ty: ElementType, v: f64) -> String {
        let mut s = String::new();
        format_float(ty, f64_to_bits(ty, v).unwrap(), &mut s);
        s
    }

    #[test]
    fn g_format_matches_printf() {
        let cases: &[(f64, usize, &str)] = &[
            (0.1, 6, "0.1"),
            (1e300, 15, "1e+300"),
            (1.401298464324817e-45, 6, "1.4013e-45"),
            (123456.0, 6, "123456"),
            (1234567.0, 6, "1.23457e+06"),
            (0.0001, 6, "0.0001"),
            (0.00001, 6, "1e-05"),
            (-2.5, 3, "-2.5"),
            (100.0, 2, "1e+02"),
        ];
        for &(v, p, want) in cases {
            let mut s = String::new();
            format_g(v, p, &mut s);
            assert_eq!(s, want, "{v} with %.{p}g");
        }
    }

    #[test]
    fn xla_float_spellings() {
        assert_eq!(show(F32, 0.1), "0.1");
        assert_eq!(show(F32, 1e-45), "1.4013e-45");
        assert_eq!(show(F32, 16777217.0), "16777216");
        let mut s = String::new();
        format_float(F32, (0.3f32.to_bits() + 1) as u64, &mut s);
        assert_eq!(s, "0.300000042");
        assert_eq!(show(F64, 0.1), "0.1");
        assert_eq!(show(F64, 1.0 / 3.0), "0.33333333333333331");
        assert_eq!(show(BF16, 3.3e38), "3.296e+38");
        assert_eq!(show(BF16, 1.00390625), "1");
        assert_eq!(show(F8E4M3FN, 0.1), "0.102");
        assert_eq!(show(F8E4M3FN, -100.0), "-96");
        assert_eq!(show(F4E2M1FN, 0.1), "0");
        assert_eq!(show(F4E2M1FN, 6.0), "6");
        assert_eq!(show(F8E8M0FNU, 0.5), "0.5");
        assert_eq!(show(F32, f64::NEG_INFINITY), "-inf");
        assert_eq!(show(F16, f64::NAN), "nan");
        s.clear();
        format_float(F32, 0x7f80_0001, &mut s);
        assert_eq!(s, "nan(0x1)");
        s.clear();
        format_float(F32, 0xffc0_0000, &mut s);
        assert_eq!(s, "-nan");
    }

    #[test]
    fn narrow_rounding_ties_to_even() {
        let bf = FloatFormat::of(BF16).unwrap();
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to the even mantissa (1).
        assert_eq!(bf.encode(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: rounds up to even.
        assert_eq!(bf.encode(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bf.encode(f64::INFINITY), 0x7f80);
        assert_eq!(bf.encode(-0.0), 0x8000);
        let h = FloatFormat::of(F16).unwrap();
        assert_eq!(h.encode(65504.0), 0x7bff);
        assert_eq!(h.encode(65520.0), 0x7c00); // rounds to infinity
        assert_eq!(h.encode(5.960464477539063e-8), 0x0001); // smallest subnormal
        assert_eq!(h.encode(2.9802322387695312e-8), 0x0000); // half of it ties to zero
        let e4 = FloatFormat::of(F8E4M3FN).unwrap();
        assert_eq!(e4.encode(448.0), 0x7e);
        assert_eq!(e4.encode(464.0), 0x7e); // halfway to 480 (which is NaN): ties to even 448
        assert_eq!(e4.encode(1000.0), 0x7f); // NaN
        assert_eq!(e4.max_finite(), 448.0);
        let e5 = FloatFormat::of(F8E5M2).unwrap();
        assert_eq!(e5.max_finite(), 57344.0);
        assert_eq!(e5.encode(1e6), 0x7c);
        let fnuz = FloatFormat::of(F8E4M3FNUZ).unwrap();
        assert_eq!(fnuz.encode(-0.0), 0);
        assert_eq!(fnuz.encode(f64::NAN), 0x80);
        assert_eq!(fnuz.max_finite(), 240.0);
        let b11 = FloatFormat::of(F8E4M3B11FNUZ).unwrap();
        assert_eq!(b11.max_finite(), 30.0);
        let e3m4 = FloatFormat::of(F8E3M4).unwrap();
        assert_eq!(e3m4.max_finite(), 15.5);
        let e5fnuz = FloatFormat::of(F8E5M2FNUZ).unwrap();
        assert_eq!(e5fnuz.max_finite(), 57344.0);
        let f4 = FloatFormat::of(F4E2M1FN).unwrap();
        assert_eq!(f4.max_finite(), 6.0);
        assert_eq!(f4.encode(0.25), 0x0); // tie between 0 and 0.5 goes to even (0)
        assert_eq!(f4.encode(0.75), 0x2); // tie between 0.5 and 1 goes to even (1.0)
        let e8 = FloatFormat::of(F8E8M0FNU).unwrap();
        assert_eq!(e8.encode(1.0), 127);
        assert_eq!(e8.encode(0.5), 126);
        assert_eq!(e8.decode(0), 2f64.powi(-127));
        assert!(e8.is_nan(0xff));
        // Every pattern of every 8-bit format decodes and encodes back to itself.
        for ty in [
            F8E5M2,
            F8E4M3,
            F8E4M3FN,
            F8E4M3B11FNUZ,
            F8E3M4,
            F8E5M2FNUZ,
            F8E4M3FNUZ,
        ] {
            let f = FloatFormat::of(ty).unwrap();
            for bits in 0..256u32 {
                if f.is_nan(bits) {
                    continue;
                }
                assert_eq!(f.encode(f.decode(bits)), bits, "{ty} {bits:#x}");
            }
        }
    }
}
