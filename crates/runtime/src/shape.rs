//! Array shapes as the runtime sees them: an element type and dimensions.

use std::fmt;

use crate::element::ElementType;

/// The shape of one device array, printed HLO-style: `f32[4,8]`, `pred[]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub element_type: ElementType,
    pub dims: Vec<i64>,
}

impl ArrayShape {
    pub fn new(element_type: ElementType, dims: impl Into<Vec<i64>>) -> Self {
        Self {
            element_type,
            dims: dims.into(),
        }
    }

    /// Number of elements; `None` on a negative dimension or overflow.
    pub fn element_count(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |acc, &d| {
            u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        })
    }

    /// Bytes of the dense host representation.
    pub fn byte_size(&self) -> Option<u64> {
        self.element_count()?
            .checked_mul(self.element_type.byte_size() as u64)
    }
}

impl fmt::Display for ArrayShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.element_type)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
