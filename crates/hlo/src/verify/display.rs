//! Short shape spellings for messages (`f32[128,64]`, `(f32[2], s32[])`, `s32[<=8]`).

use crate::shape::{Shape, UNBOUNDED_DIM};

/// The shape as XLA's text writes it, without layout.
pub fn shape_str(s: &Shape) -> String {
    let mut out = String::new();
    write_shape(s, &mut out);
    out
}

fn write_shape(s: &Shape, out: &mut String) {
    match s {
        Shape::Array(a) => {
            out.push_str(a.ty.name());
            out.push('[');
            for (i, &d) in a.dims.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if d == UNBOUNDED_DIM {
                    out.push('?');
                } else {
                    if a.is_dynamic_dim(i) {
                        out.push_str("<=");
                    }
                    out.push_str(&d.to_string());
                }
            }
            out.push(']');
        }
        Shape::Tuple(e) => {
            out.push('(');
            for (i, x) in e.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_shape(x, out);
            }
            out.push(')');
        }
        Shape::Token => out.push_str("token[]"),
        Shape::Opaque => out.push_str("opaque[]"),
        Shape::Buffer(b) => {
            out.push_str("b(");
            write_shape(b, out);
            out.push(')');
        }
    }
}
