//! numpy's `.npy` format: a reader and a writer of our own.
//!
//! A file is the magic `\x93NUMPY`, a version (1.0: 2-byte header length; 2.0 and 3.0: 4-byte),
//! a Python dict literal `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }` padded
//! with spaces and a newline to a multiple of 64 bytes, then the data.
//!
//! Element types and their `descr`:
//!
//! | HLO type | written as | also read from |
//! |---|---|---|
//! | pred | `\|b1` | |
//! | s8, s16, s32, s64 / u8..u64 | `\|i1` `<i2` `<i4` `<i8` / `\|u1` `<u2` `<u4` `<u8` | big-endian `>` and native `=` forms |
//! | f16, f32, f64 | `<f2` `<f4` `<f8` | `>` and `=` forms |
//! | c64, c128 | `<c8` `<c16` | `>` and `=` forms |
//! | bf16 | `<u2`: the bit patterns (numpy has no bfloat16; `a.view(ml_dtypes.bfloat16)` reads them) | `<V2` (what numpy writes for an ml_dtypes array) |
//! | f8 types, f4e2m1fn, f8e8m0fnu | `\|u1`: the bit patterns (one byte per element) | `\|V1` |
//! | s1, s2, s4 / u1, u2, u4 | `\|i1` / `\|u1`: the values, one byte each | range-checked |
//!
//! Reading needs the expected element type for the rows marked "bit patterns" (the file does
//! not say which 16-bit or 8-bit float it holds): [`read`] takes it as an optional hint and
//! otherwise maps every descr to the one type numpy means by it. A descr that does not fit the
//! expected type is an error, never a silent conversion. Fortran-order files are transposed to
//! row-major on reading; big-endian files are byte-swapped.

use tessera_hlo::ElementType;

use crate::host::{HostArray, Scalar};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NpyError {
    #[error("not an .npy file: {0}")]
    Format(String),
    #[error("header: {0}")]
    Header(String),
    #[error("descr '{descr}' cannot hold {expected} elements")]
    TypeMismatch {
        descr: String,
        expected: ElementType,
    },
    #[error("unsupported descr '{0}'")]
    Unsupported(String),
    #[error("data: expected {expected} bytes, found {found}")]
    Size { expected: usize, found: usize },
    #[error("element {index}: {value} does not fit in {ty}")]
    Range {
        index: usize,
        value: i128,
        ty: ElementType,
    },
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// The descr this module writes for `ty`.
pub fn descr_for(ty: ElementType) -> &'static str {
    use ElementType::*;
    match ty {
        Pred => "|b1",
        S1 | S2 | S4 | S8 => "|i1",
        S16 => "<i2",
        S32 => "<i4",
        S64 => "<i8",
        U1 | U2 | U4 | U8 => "|u1",
        U16 | BF16 => "<u2",
        U32 => "<u4",
        U64 => "<u8",
        F16 => "<f2",
        F32 => "<f4",
        F64 => "<f8",
        C64 => "<c8",
        C128 => "<c16",
        _ => "|u1",
    }
}

/// Serializes an array as `.npy` (version 1.0, or 2.0 when the header needs it).
pub fn write(a: &HostArray) -> Vec<u8> {
    let shape = match a.dims.len() {
        0 => "()".to_string(),
        1 => format!("({},)", a.dims[0]),
        _ => {
            let d: Vec<String> = a.dims.iter().map(i64::to_string).collect();
            format!("({})", d.join(", "))
        }
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        descr_for(a.ty),
        shape
    );
    let v1 = header.len() + 1 + 10 <= u16::MAX as usize;
    let prefix = if v1 { 10 } else { 12 };
    let total = (prefix + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + a.data.len());
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    if a.ty.bit_width() < 8 && a.ty.is_integral() {
        // One value per byte, sign-extended for signed types so numpy reads the values.
        out.extend(a.data.iter().enumerate().map(|(k, _)| match a.get(k) {
            Scalar::Int(v) => v as i8 as u8,
            _ => 0,
        }));
    } else {
        out.extend_from_slice(&a.data);
    }
    out
}

/// A parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<i64>,
    /// Offset of the data in the file.
    pub data_offset: usize,
}

/// Parses the magic, version and header dict.
pub fn read_header(bytes: &[u8]) -> Result<Header, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(NpyError::Format("missing the \\x93NUMPY magic".into()));
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err(NpyError::Format("truncated header length".into()));
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => {
            return Err(NpyError::Format(format!(
                "unknown version {v}.{}",
                bytes[7]
            )))
        }
    };
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| NpyError::Format(format!("header of {len} bytes runs past the end")))?;
    let text = std::str::from_utf8(&bytes[start..end])
        .map_err(|_| NpyError::Header("not UTF-8".into()))?;
    let mut p = DictParser {
        s: text.as_bytes(),
        i: 0,
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        match key.as_str() {
            "descr" => descr = Some(p.string()?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => return Err(NpyError::Header(format!("unexpected key '{other}'"))),
        }
        p.skip_ws();
        if !p.eat(b',') {
            p.expect(b'}')?;
            break;
        }
    }
    Ok(Header {
        descr: descr.ok_or_else(|| NpyError::Header("no 'descr'".into()))?,
        fortran_order: fortran.ok_or_else(|| NpyError::Header("no 'fortran_order'".into()))?,
        shape: shape.ok_or_else(|| NpyError::Header("no 'shape'".into()))?,
        data_offset: end,
    })
}

struct DictParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl DictParser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), NpyError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(NpyError::Header(format!(
                "expected '{}' at byte {}",
                c as char, self.i
            )))
        }
    }
    fn string(&mut self) -> Result<String, NpyError> {
        self.skip_ws();
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(NpyError::Header(format!(
                    "expected a string at byte {}",
                    self.i
                )))
            }
        };
        let start = self.i + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == q)
            .ok_or_else(|| NpyError::Header("unterminated string".into()))?;
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }
    fn boolean(&mut self) -> Result<bool, NpyError> {
        self.skip_ws();
        for (word, v) in [("True", true), ("False", false)] {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                return Ok(v);
            }
        }
        Err(NpyError::Header(format!(
            "expected True or False at byte {}",
            self.i
        )))
    }
    fn tuple(&mut self) -> Result<Vec<i64>, NpyError> {
        self.expect(b'(')?;
        let mut out = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(out);
            }
            self.skip_ws();
            let start = self.i;
            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            let n = std::str::from_utf8(&self.s[start..self.i])
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .ok_or_else(|| NpyError::Header(format!("expected a dimension at byte {start}")))?;
            out.push(n);
            if !self.eat(b',') {
                self.expect(b')')?;
                return Ok(out);
            }
        }
    }
}

/// What a descr's data is: the element type, and whether the bytes are big-endian.
fn descr_type(descr: &str, expected: Option<ElementType>) -> Result<(ElementType, bool), NpyError> {
    use ElementType::*;
    let (order, code) = match descr.as_bytes().first() {
        Some(b'<' | b'|' | b'=') => (false, &descr[1..]),
        Some(b'>') => (true, &descr[1..]),
        _ => (false, descr),
    };
    let natural = match code {
        "b1" | "?" => Pred,
        "i1" => S8,
        "i2" => S16,
        "i4" => S32,
        "i8" => S64,
        "u1" => U8,
        "u2" => U16,
        "u4" => U32,
        "u8" => U64,
        "f2" => F16,
        "f4" => F32,
        "f8" => F64,
        "c8" => C64,
        "c16" => C128,
        "V1" => U8,
        "V2" => U16,
        _ => return Err(NpyError::Unsupported(descr.to_string())),
    };
    let Some(want) = expected else {
        return Ok((natural, order));
    };
    if want == natural {
        return Ok((want, order));
    }
    // Bit patterns of types numpy does not know, and sub-byte integers stored one per byte.
    let fits = match want {
        BF16 => natural == U16,
        t if t.is_float() && t.bit_width() <= 8 => natural == U8,
        S1 | S2 | S4 => natural == S8,
        U1 | U2 | U4 => natural == U8,
        _ => false,
    };
    if fits {
        Ok((want, order))
    } else {
        Err(NpyError::TypeMismatch {
            descr: descr.to_string(),
            expected: want,
        })
    }
}

/// Reads an `.npy` file. `expected` is the element type the caller needs (required to read
/// bf16 and the fp8/fp4 types, which numpy stores as raw bits).
pub fn read(bytes: &[u8], expected: Option<ElementType>) -> Result<HostArray, NpyError> {
    let h = read_header(bytes)?;
    let (ty, big_endian) = descr_type(&h.descr, expected)?;
    let n: usize = h
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
        .ok_or_else(|| NpyError::Header(format!("shape {:?} is too large", h.shape)))?;
    let w = ty.byte_size();
    let data = &bytes[h.data_offset..];
    if data.len() != n * w {
        return Err(NpyError::Size {
            expected: n * w,
            found: data.len(),
        });
    }
    let mut out = data.to_vec();
    if big_endian {
        // Complex numbers swap each component.
        let part = if ty.is_complex() { w / 2 } else { w };
        out.chunks_exact_mut(part).for_each(<[u8]>::reverse);
    }
    if h.fortran_order && h.shape.len() > 1 {
        out = fortran_to_c(&out, &h.shape, w);
    }
    let a = HostArray {
        ty,
        dims: h.shape.clone(),
        data: out,
    };
    if ty.is_integral() && ty.bit_width() < 8 {
        let signed = ty.is_signed_int();
        let bits = ty.bit_width();
        for (k, &b) in a.data.iter().enumerate() {
            let v = if signed { b as i8 as i128 } else { b as i128 };
            let (lo, hi) = if signed {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            } else {
                (0, (1i128 << bits) - 1)
            };
            if v < lo || v > hi {
                return Err(NpyError::Range {
                    index: k,
                    value: v,
                    ty,
                });
            }
        }
    }
    Ok(a)
}

/// Reorders column-major data to row-major.
fn fortran_to_c(data: &[u8], dims: &[i64], w: usize) -> Vec<u8> {
    let rev: Vec<i64> = dims.iter().rev().copied().collect();
    let n = data.len() / w;
    let mut out = vec![0u8; data.len()];
    let c_strides = crate::host::strides(dims);
    for k in 0..n {
        // Position k in Fortran order is row-major position k of the reversed dims.
        let idx = crate::host::unravel(k, &rev);
        let c: usize = idx
            .iter()
            .rev()
            .zip(&c_strides)
            .map(|(&i, s)| i as usize * s)
            .sum();
        out[c * w..(c + 1) * w].copy_from_slice(&data[k * w..(k + 1) * w]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_numpy_writes() {
        // np.save of np.arange(6, dtype=np.float32).reshape(2, 3): a 128-byte-aligned header...
        let a = HostArray::f32(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let b = write(&a);
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
        assert!(header.ends_with(" \n"));
        assert_eq!(read(&b, None).unwrap(), a);
        // Scalars and 1-d shapes use Python's tuple spelling.
        let s = write(&HostArray::s32(&[], &[7]).unwrap());
        assert!(std::str::from_utf8(&s[10..70])
            .unwrap()
            .contains("'shape': (), "));
        let v = write(&HostArray::s32(&[3], &[1, 2, 3]).unwrap());
        assert!(std::str::from_utf8(&v[10..70])
            .unwrap()
            .contains("'shape': (3,), "));
    }

    #[test]
    fn every_type_round_trips() {
        for &ty in ElementType::ALL.iter().filter(|t| t.is_array_type()) {
            let w = ty.byte_size();
            let mut data: Vec<u8> = (0..6 * w).map(|i| (i * 37 + 3) as u8).collect();
            if ty.is_integral() && ty.bit_width() < 8 {
                // Canonical one-value-per-byte form: sign-extended / zero-extended values.
                let bits = ty.bit_width();
                for (k, b) in data.iter_mut().enumerate() {
                    let v = (k as u8) & ((1 << bits) - 1);
                    *b = if ty.is_signed_int() && v >> (bits - 1) == 1 {
                        v | !((1u8 << bits) - 1)
                    } else {
                        v
                    };
                }
            }
            if ty == ElementType::Pred {
                data.iter_mut().for_each(|b| *b &= 1);
            }
            let a = HostArray::new(ty, vec![2, 3], data).unwrap();
            let bytes = write(&a);
            assert_eq!(read(&bytes, Some(ty)).unwrap(), a, "{ty}");
        }
    }

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut h = header.to_string();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(' ');
        }
        h.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn reads_fortran_order_and_big_endian() {
        // Column-major [[1, 2, 3], [4, 5, 6]] as big-endian int16.
        let data: Vec<u8> = [1i16, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let f = file(
            "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }",
            &data,
        );
        let a = read(&f, None).unwrap();
        assert_eq!(a.ty, ElementType::S16);
        let v: Vec<i128> = (0..6)
            .map(|k| match a.get(k) {
                Scalar::Int(i) => i,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(v, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn bf16_needs_the_expected_type_and_mismatches_are_errors() {
        let bits: Vec<u8> = [0x3f80u16, 0xc000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let f = file(
            "{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }",
            &bits,
        );
        let a = read(&f, Some(ElementType::BF16)).unwrap();
        assert_eq!(a.get(1), Scalar::Float(-2.0));
        assert_eq!(read(&f, None).unwrap().ty, ElementType::U16);
        let e = read(&f, Some(ElementType::F32)).unwrap_err();
        assert_eq!(e.to_string(), "descr '<V2' cannot hold f32 elements");
        // A sub-byte value out of range.
        let f = file(
            "{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }",
            &[100],
        );
        assert!(matches!(
            read(&f, Some(ElementType::S4)),
            Err(NpyError::Range { .. })
        ));
    }

    #[test]
    fn malformed_files_are_errors() {
        assert!(read(b"hello", None).is_err());
        let f = file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[0; 4],
        );
        assert_eq!(
            read(&f, None).unwrap_err(),
            NpyError::Size {
                expected: 8,
                found: 4
            }
        );
        let f = file(
            "{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }",
            &[0; 16],
        );
        assert!(matches!(read(&f, None), Err(NpyError::Unsupported(_))));
        let f = file("{'descr': '<f4', 'shape': (1,), }", &[0; 4]);
        assert!(read(&f, None)
            .unwrap_err()
            .to_string()
            .contains("fortran_order"));
        let f = file(
            "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }",
            &[0; 4],
        );
        assert!(read(&f, None).is_err());
        let mut f = file(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
            &[0; 4],
        );
        f[8] = 0xff; // header length past the end
        assert!(read(&f, None).is_err());
    }
}
