//! Literals: constant values of any shape.
//!
//! Array data is kept as little-endian bytes in row-major (logical) order, one element after the
//! other, each taking [`ElementType::byte_size`] bytes (sub-byte types such as `s4` or `f4e2m1fn`
//! take one byte each, as XLA's literals do). Conversions between text, numbers and these bytes
//! live with the code that needs them (the text format, the proto, the runtime).

use crate::shape::Shape;
use crate::types::ElementType;

#[derive(Clone, Debug, PartialEq)]
pub enum LiteralData {
    /// Row-major element bytes of an array shape.
    Array(Vec<u8>),
    /// One literal per tuple element.
    Tuple(Vec<Literal>),
    /// Tokens and opaque values carry no data.
    None,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Literal {
    pub shape: Shape,
    pub data: LiteralData,
}

impl Literal {
    /// An array literal of zero bytes (zero of every numeric type).
    pub fn zeros(shape: Shape) -> Literal {
        let data = match &shape {
            Shape::Array(a) => {
                LiteralData::Array(vec![0; a.element_count() as usize * a.ty.byte_size()])
            }
            Shape::Tuple(e) => LiteralData::Tuple(e.iter().cloned().map(Literal::zeros).collect()),
            _ => LiteralData::None,
        };
        Literal { shape, data }
    }

    /// A scalar f32.
    pub fn f32(v: f32) -> Literal {
        Literal {
            shape: Shape::scalar(ElementType::F32),
            data: LiteralData::Array(v.to_le_bytes().to_vec()),
        }
    }

    /// A scalar s32.
    pub fn s32(v: i32) -> Literal {
        Literal {
            shape: Shape::scalar(ElementType::S32),
            data: LiteralData::Array(v.to_le_bytes().to_vec()),
        }
    }

    /// A scalar pred.
    pub fn pred(v: bool) -> Literal {
        Literal {
            shape: Shape::scalar(ElementType::Pred),
            data: LiteralData::Array(vec![v as u8]),
        }
    }

    /// An array literal from raw little-endian element bytes; `None` when the byte count does not
    /// match the shape.
    pub fn from_bytes(shape: Shape, bytes: Vec<u8>) -> Option<Literal> {
        let a = shape.as_array()?;
        if bytes.len() != a.element_count() as usize * a.ty.byte_size() {
            return None;
        }
        Some(Literal {
            shape,
            data: LiteralData::Array(bytes),
        })
    }

    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.data {
            LiteralData::Array(b) => Some(b),
            _ => None,
        }
    }

    pub fn tuple_elements(&self) -> &[Literal] {
        match &self.data {
            LiteralData::Tuple(t) => t,
            _ => &[],
        }
    }
}
