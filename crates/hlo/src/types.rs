//! Element (primitive) types of XLA arrays.
//!
//! The names are the ones XLA's text format uses (`f32`, `bf16`, `f8e4m3fn`, ...); the numeric
//! values of [`ElementType::proto_value`] are those of `xla.PrimitiveType`.

use std::fmt;

macro_rules! element_types {
    ($( $variant:ident => $name:literal, $proto:literal, $bits:literal; )*) => {
        /// The type of one element of an array shape, or the kind of a non-array shape.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ElementType {
            $( $variant, )*
        }

        impl ElementType {
            /// Every element type, in declaration order.
            pub const ALL: &'static [ElementType] = &[ $( ElementType::$variant, )* ];

            /// The lower-case name XLA's text format uses.
            pub fn name(self) -> &'static str {
                match self { $( ElementType::$variant => $name, )* }
            }

            /// Looks a type up by its text-format name.
            pub fn from_name(name: &str) -> Option<ElementType> {
                match name { $( $name => Some(ElementType::$variant), )* _ => None }
            }

            /// The value of this type in `xla.PrimitiveType`.
            pub fn proto_value(self) -> i32 {
                match self { $( ElementType::$variant => $proto, )* }
            }

            /// The type with the given `xla.PrimitiveType` value.
            pub fn from_proto_value(v: i32) -> Option<ElementType> {
                match v { $( $proto => Some(ElementType::$variant), )* _ => None }
            }

            /// Width of one element in bits (0 for token, opaque and tuple).
            pub fn bit_width(self) -> u32 {
                match self { $( ElementType::$variant => $bits, )* }
            }
        }
    };
}

element_types! {
    Pred => "pred", 1, 8;
    S1 => "s1", 30, 1;
    S2 => "s2", 26, 2;
    S4 => "s4", 21, 4;
    S8 => "s8", 2, 8;
    S16 => "s16", 3, 16;
    S32 => "s32", 4, 32;
    S64 => "s64", 5, 64;
    U1 => "u1", 31, 1;
    U2 => "u2", 27, 2;
    U4 => "u4", 22, 4;
    U8 => "u8", 6, 8;
    U16 => "u16", 7, 16;
    U32 => "u32", 8, 32;
    U64 => "u64", 9, 64;
    F16 => "f16", 10, 16;
    F32 => "f32", 11, 32;
    BF16 => "bf16", 16, 16;
    F64 => "f64", 12, 64;
    F8E5M2 => "f8e5m2", 19, 8;
    F8E4M3 => "f8e4m3", 28, 8;
    F8E4M3FN => "f8e4m3fn", 20, 8;
    F8E4M3B11FNUZ => "f8e4m3b11fnuz", 23, 8;
    F8E3M4 => "f8e3m4", 29, 8;
    F8E5M2FNUZ => "f8e5m2fnuz", 24, 8;
    F8E4M3FNUZ => "f8e4m3fnuz", 25, 8;
    F4E2M1FN => "f4e2m1fn", 32, 4;
    F8E8M0FNU => "f8e8m0fnu", 33, 8;
    C64 => "c64", 15, 64;
    C128 => "c128", 18, 128;
    Token => "token", 17, 0;
    Opaque => "opaque", 14, 0;
    Tuple => "tuple", 13, 0;
    Buffer => "buffer", 34, 0;
}

impl ElementType {
    /// True for the types an array shape may have (not token, opaque, tuple, buffer).
    pub fn is_array_type(self) -> bool {
        !matches!(
            self,
            ElementType::Token | ElementType::Opaque | ElementType::Tuple | ElementType::Buffer
        )
    }

    pub fn is_signed_int(self) -> bool {
        use ElementType::*;
        matches!(self, S1 | S2 | S4 | S8 | S16 | S32 | S64)
    }

    pub fn is_unsigned_int(self) -> bool {
        use ElementType::*;
        matches!(self, U1 | U2 | U4 | U8 | U16 | U32 | U64)
    }

    pub fn is_integral(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// Real floating point types, the f8/f4 families included.
    pub fn is_float(self) -> bool {
        use ElementType::*;
        matches!(
            self,
            F16 | F32
                | BF16
                | F64
                | F8E5M2
                | F8E4M3
                | F8E4M3FN
                | F8E4M3B11FNUZ
                | F8E3M4
                | F8E5M2FNUZ
                | F8E4M3FNUZ
                | F4E2M1FN
                | F8E8M0FNU
        )
    }

    pub fn is_complex(self) -> bool {
        matches!(self, ElementType::C64 | ElementType::C128)
    }

    /// Bytes one element occupies in an unpacked buffer (sub-byte types take a whole byte).
    pub fn byte_size(self) -> usize {
        let bits = self.bit_width() as usize;
        if bits == 0 {
            0
        } else {
            bits.div_ceil(8)
        }
    }

    /// The component type of a complex type (f32 for c64, f64 for c128).
    pub fn complex_component(self) -> Option<ElementType> {
        match self {
            ElementType::C64 => Some(ElementType::F32),
            ElementType::C128 => Some(ElementType::F64),
            _ => None,
        }
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
