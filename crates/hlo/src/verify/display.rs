//! Short shape spellings for messages (`f32[128,64]`, `(f32[2], s32[])`, `s32[<=8]`).

use crate::shape::Shape;

/// The shape as XLA's text writes it, without layout.
pub fn shape_str(s: &Shape) -> String {
    crate::text::shape_to_string_without_layout(s)
}
