//! Entry signatures of programs, and declaring input/output aliases in them.
//!
//! The execution layer checks argument shapes before launching, so it needs
//! the entry parameter shapes of every program. PJRT's C API does not report
//! them; they are read from the program itself: the `@main` signature of
//! StableHLO text, or `host_program_shape` of an `HloModuleProto` (decoded
//! with the few prost messages below; field numbers from `xla/service/hlo.proto`
//! and `xla/xla_data.proto`).
//!
//! Aliases (output index, parameter number) are written into the program the
//! way XLA expects them: a `tf.aliasing_output` argument attribute in
//! StableHLO, an `input_output_alias` entry in an HLO module (appended as an
//! extra serialized field, which protobuf merges into the existing message).

use prost::Message;

use crate::element::ElementType;
use crate::error::{Error, Result};
use crate::pjrt::Program;
use crate::shape::ArrayShape;

/// One output of a program aliasing (reusing the buffer of) one parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Alias {
    /// Index of the output among the program's (flattened) outputs.
    pub output: usize,
    /// Entry parameter number.
    pub parameter: usize,
}

#[derive(Clone, PartialEq, Message)]
struct ShapeProto {
    #[prost(int32, tag = "2")]
    element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    dimensions: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    tuple_shapes: Vec<ShapeProto>,
}

#[derive(Clone, PartialEq, Message)]
struct ProgramShapeProto {
    #[prost(message, repeated, tag = "1")]
    parameters: Vec<ShapeProto>,
    #[prost(message, optional, tag = "2")]
    result: Option<ShapeProto>,
}

/// The part of `xla.HloModuleProto` this module reads or appends.
#[derive(Clone, PartialEq, Message)]
struct HloModuleView {
    #[prost(message, optional, tag = "4")]
    host_program_shape: Option<ProgramShapeProto>,
    #[prost(message, optional, tag = "8")]
    input_output_alias: Option<InputOutputAliasProto>,
}

#[derive(Clone, PartialEq, Message)]
struct InputOutputAliasProto {
    #[prost(message, repeated, tag = "1")]
    entries: Vec<AliasEntryProto>,
}

#[derive(Clone, PartialEq, Message)]
struct AliasEntryProto {
    #[prost(int64, repeated, tag = "1")]
    output_shape_index: Vec<i64>,
    #[prost(int64, tag = "2")]
    parameter_number: i64,
    #[prost(int64, repeated, tag = "3")]
    parameter_shape_index: Vec<i64>,
    /// `xla.Kind`: 1 = MAY_ALIAS.
    #[prost(int32, tag = "4")]
    kind: i32,
}

const PRIMITIVE_TUPLE: i32 = 13;

fn element_from_primitive(p: i32) -> Option<ElementType> {
    use ElementType::*;
    Some(match p {
        1 => Pred,
        2 => S8,
        3 => S16,
        4 => S32,
        5 => S64,
        6 => U8,
        7 => U16,
        8 => U32,
        9 => U64,
        10 => F16,
        11 => F32,
        12 => F64,
        16 => Bf16,
        15 => C64,
        18 => C128,
        _ => return None,
    })
}

fn array_from_proto(what: &str, s: &ShapeProto) -> Result<ArrayShape> {
    let ty = element_from_primitive(s.element_type).ok_or_else(|| {
        Error::UnsupportedType(format!(
            "{what}: primitive type {} (only arrays of byte-sized types are supported)",
            s.element_type
        ))
    })?;
    Ok(ArrayShape::new(ty, s.dimensions.clone()))
}

/// Entry parameter shapes of a program.
pub fn parameter_shapes(program: &Program) -> Result<Vec<ArrayShape>> {
    match program {
        Program::HloProto(bytes) => {
            let m = HloModuleView::decode(bytes.as_slice()).map_err(|e| {
                Error::InvalidArgument(format!("not a serialized HloModuleProto: {e}"))
            })?;
            let ps = m.host_program_shape.ok_or_else(|| {
                Error::InvalidArgument("HloModuleProto has no host_program_shape".into())
            })?;
            ps.parameters
                .iter()
                .enumerate()
                .map(|(i, s)| array_from_proto(&format!("parameter {i}"), s))
                .collect()
        }
        Program::Mlir(bytes) => {
            let text = std::str::from_utf8(bytes).map_err(|_| {
                Error::InvalidArgument(
                    "StableHLO bytecode has no readable signature: pass parameter shapes explicitly"
                        .into(),
                )
            })?;
            main_arguments(text)?
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    parse_tensor_type(&text[a.ty.clone()])
                        .map_err(|e| Error::InvalidArgument(format!("@main argument {i}: {e}")))
                })
                .collect()
        }
    }
}

/// Returns `program` with `aliases` declared in it.
pub fn with_aliases(program: &Program, aliases: &[Alias]) -> Result<Program> {
    if aliases.is_empty() {
        return Ok(program.clone());
    }
    match program {
        Program::HloProto(bytes) => {
            let m = HloModuleView::decode(bytes.as_slice()).map_err(|e| {
                Error::InvalidArgument(format!("not a serialized HloModuleProto: {e}"))
            })?;
            let tuple_root = m
                .host_program_shape
                .and_then(|p| p.result)
                .is_some_and(|r| r.element_type == PRIMITIVE_TUPLE);
            let extra = HloModuleView {
                host_program_shape: None,
                input_output_alias: Some(InputOutputAliasProto {
                    entries: aliases
                        .iter()
                        .map(|a| AliasEntryProto {
                            output_shape_index: if tuple_root {
                                vec![a.output as i64]
                            } else {
                                Vec::new()
                            },
                            parameter_number: a.parameter as i64,
                            parameter_shape_index: Vec::new(),
                            kind: 1,
                        })
                        .collect(),
                }),
            };
            let mut out = bytes.clone();
            extra
                .encode(&mut out)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
            Ok(Program::HloProto(out))
        }
        Program::Mlir(bytes) => {
            let text = std::str::from_utf8(bytes).map_err(|_| {
                Error::InvalidArgument("cannot declare aliases in StableHLO bytecode".into())
            })?;
            let args = main_arguments(text)?;
            // Insert from the back so earlier offsets stay valid.
            let mut edits: Vec<(usize, String)> = Vec::new();
            for a in aliases {
                let arg = args.get(a.parameter).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "alias names parameter {} but @main has {}",
                        a.parameter,
                        args.len()
                    ))
                })?;
                let attr = format!("tf.aliasing_output = {} : i32", a.output);
                match arg.attr_open {
                    Some(pos) => edits.push((pos + 1, format!("{attr}, "))),
                    None => edits.push((arg.ty.end, format!(" {{{attr}}}"))),
                }
            }
            edits.sort_by_key(|e| std::cmp::Reverse(e.0));
            let mut s = text.to_string();
            for (pos, ins) in edits {
                s.insert_str(pos, &ins);
            }
            Ok(Program::Mlir(s.into_bytes()))
        }
    }
}

/// Where one `@main` argument's type and attribute dictionary are.
struct ArgSpan {
    ty: std::ops::Range<usize>,
    attr_open: Option<usize>,
}

/// Splits the argument list of `@main` at top-level commas.
fn main_arguments(text: &str) -> Result<Vec<ArgSpan>> {
    let start = text
        .find("@main(")
        .ok_or_else(|| Error::InvalidArgument("StableHLO program has no @main(".into()))?
        + "@main(".len();
    let bytes = text.as_bytes();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut pieces = Vec::new();
    let mut piece_start = start;
    let mut i = start;
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(Error::InvalidArgument(
                "unterminated @main signature".into(),
            ));
        };
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'(' | b'<' | b'{' | b'[' => depth += 1,
                b')' if depth == 0 => {
                    pieces.push(piece_start..i);
                    break;
                }
                b')' | b'>' | b'}' | b']' => depth -= 1,
                b',' if depth == 0 => {
                    pieces.push(piece_start..i);
                    piece_start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    let mut out = Vec::new();
    for p in pieces {
        let s = &text[p.clone()];
        if s.trim().is_empty() {
            continue;
        }
        let colon = s.find(':').ok_or_else(|| {
            Error::InvalidArgument(format!("cannot read @main argument `{}`", s.trim()))
        })?;
        let ty_start =
            p.start + colon + 1 + (s[colon + 1..].len() - s[colon + 1..].trim_start().len());
        // The type ends at the first top-level space or `{`.
        let mut depth = 0;
        let mut ty_end = p.end;
        for (j, c) in text[ty_start..p.end].char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => depth -= 1,
                ' ' | '{' | '\n' | '\t' if depth == 0 => {
                    ty_end = ty_start + j;
                    break;
                }
                _ => {}
            }
        }
        let attr_open = text[ty_end..p.end].find('{').map(|o| ty_end + o);
        out.push(ArgSpan {
            ty: ty_start..ty_end,
            attr_open,
        });
    }
    Ok(out)
}

/// `tensor<4x8xf32>` -> `f32[4,8]`.
fn parse_tensor_type(ty: &str) -> std::result::Result<ArrayShape, String> {
    let inner = ty
        .trim()
        .strip_prefix("tensor<")
        .and_then(|s| s.strip_suffix('>'))
        .ok_or_else(|| format!("expected a tensor type, found `{ty}`"))?;
    // Leading `<size>x` groups are dimensions; the rest is the element type
    // (which may itself contain an `x`, as in `complex<f32>`).
    let mut parts: Vec<&str> = Vec::new();
    let mut rest = inner;
    while let Some(pos) = rest.find('x') {
        let head = &rest[..pos];
        if head.is_empty() || !head.chars().all(|c| c.is_ascii_digit() || c == '?') {
            break;
        }
        parts.push(head);
        rest = &rest[pos + 1..];
    }
    let elem = rest;
    let element_type = match elem {
        "i1" => ElementType::Pred,
        "i8" | "si8" => ElementType::S8,
        "i16" | "si16" => ElementType::S16,
        "i32" | "si32" => ElementType::S32,
        "i64" | "si64" => ElementType::S64,
        "ui8" => ElementType::U8,
        "ui16" => ElementType::U16,
        "ui32" => ElementType::U32,
        "ui64" => ElementType::U64,
        "f16" => ElementType::F16,
        "bf16" => ElementType::Bf16,
        "f32" => ElementType::F32,
        "f64" => ElementType::F64,
        "complex<f32>" => ElementType::C64,
        "complex<f64>" => ElementType::C128,
        other => return Err(format!("unsupported element type `{other}` in `{ty}`")),
    };
    let dims = parts
        .iter()
        .map(|d| {
            d.parse::<i64>()
                .map_err(|_| format!("dimension `{d}` of `{ty}` is not a static size"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(ArrayShape::new(element_type, dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = "func.func public @main(%arg0: tensor<4x8xf32> {mhlo.sharding = \"{manual}\"}, %arg1: tensor<i32>, %b: tensor<2xcomplex<f64>>) -> (tensor<4x8xf32>) {";

    #[test]
    fn reads_mlir_signature() {
        let shapes = parameter_shapes(&Program::mlir(MAIN)).unwrap();
        let s: Vec<String> = shapes.iter().map(|s| s.to_string()).collect();
        assert_eq!(s, ["f32[4,8]", "s32[]", "c128[2]"]);
    }

    #[test]
    fn declares_mlir_aliases() {
        let p = with_aliases(
            &Program::mlir(MAIN),
            &[
                Alias {
                    output: 0,
                    parameter: 0,
                },
                Alias {
                    output: 1,
                    parameter: 1,
                },
            ],
        )
        .unwrap();
        let text = String::from_utf8(p.code().to_vec()).unwrap();
        assert!(text.contains(
            "%arg0: tensor<4x8xf32> {tf.aliasing_output = 0 : i32, mhlo.sharding = \"{manual}\"}"
        ));
        assert!(text.contains("%arg1: tensor<i32> {tf.aliasing_output = 1 : i32},"));
        // The signature still parses the same way.
        assert_eq!(parameter_shapes(&p).unwrap().len(), 3);
    }

    #[test]
    fn rejects_dynamic_and_unknown_types() {
        let e = parameter_shapes(&Program::mlir("func.func @main(%a: tensor<?xf32>)")).unwrap_err();
        assert!(e.to_string().contains("not a static size"), "{e}");
        let e = parameter_shapes(&Program::mlir("func.func @main(%a: tensor<2xf8E4M3FN>)"))
            .unwrap_err();
        assert!(e.to_string().contains("unsupported element type"), "{e}");
        assert!(parameter_shapes(&Program::mlir("no main here")).is_err());
    }

    #[test]
    fn reads_hlo_proto_signature_and_appends_aliases() {
        let module = HloModuleView {
            host_program_shape: Some(ProgramShapeProto {
                parameters: vec![ShapeProto {
                    element_type: 11,
                    dimensions: vec![4, 8],
                    tuple_shapes: vec![],
                }],
                result: Some(ShapeProto {
                    element_type: PRIMITIVE_TUPLE,
                    dimensions: vec![],
                    tuple_shapes: vec![],
                }),
            }),
            input_output_alias: None,
        };
        let p = Program::HloProto(module.encode_to_vec());
        assert_eq!(parameter_shapes(&p).unwrap()[0].to_string(), "f32[4,8]");
        let p = with_aliases(
            &p,
            &[Alias {
                output: 1,
                parameter: 0,
            }],
        )
        .unwrap();
        let back = HloModuleView::decode(p.code()).unwrap();
        let entries = back.input_output_alias.unwrap().entries;
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].output_shape_index, vec![1]);
        assert!(back.host_program_shape.is_some());
    }
}
