//! Sizes of buffers computed from shapes, with a pluggable size function.
//!
//! The default, [`shape_size`], is XLA's `ShapeUtil::ByteSizeOf` with 8-byte pointers: the
//! dense array bytes (sub-byte element types packed only when the layout says so), one pointer
//! per element for a tuple's top-level buffer (the elements are buffers of their own), and 0 for
//! tokens. Backends with other rules (padding, tiling, memory spaces) pass their own function.

use crate::shape::Shape;

/// Size in bytes of one buffer of a given (sub-)shape.
pub type BufferSizeFn<'a> = &'a dyn Fn(&Shape) -> i64;

/// Pointer size used for tuple index tables by [`shape_size`].
pub const POINTER_SIZE: i64 = 8;

/// Bytes of the top-level buffer of `shape`.
pub fn shape_size(shape: &Shape) -> i64 {
    shape.byte_size(POINTER_SIZE)
}

/// Bytes of every buffer of `shape`: the top level and each nested element.
pub fn total_shape_size(shape: &Shape, size: BufferSizeFn) -> i64 {
    let mut total = 0;
    shape.for_each_subshape(|_, s| total += size(s));
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testutil::*;
    use crate::types::ElementType;

    #[test]
    fn sizes_of_arrays_tuples_and_tokens() {
        assert_eq!(shape_size(&f32v(4)), 16);
        assert_eq!(shape_size(&Shape::array(ElementType::BF16, &[3, 5])), 30);
        assert_eq!(shape_size(&Shape::array(ElementType::Pred, &[3])), 3);
        let t = tuple(&[f32v(4), tuple(&[f32s(), Shape::Token])]);
        assert_eq!(shape_size(&t), 16);
        // 16 (index table) + 16 + 16 (inner table) + 4 + 0 (token)
        assert_eq!(total_shape_size(&t, &shape_size), 52);
        let custom = |s: &Shape| if s.is_tuple() { 0 } else { 1 };
        assert_eq!(total_shape_size(&t, &custom), 3);
    }
}
