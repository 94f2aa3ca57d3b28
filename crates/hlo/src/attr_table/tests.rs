//! The table against the code it describes: every field of `Attrs` has its row, and every
//! plain row reads from text, goes through the proto and prints back unchanged.

use super::*;
use crate::module::Module;
use crate::text::{parse_module, print_module, PrintOptions};

/// The `pub` fields of the struct `name` in attrs.rs, read from its source.
fn struct_fields(src: &str, name: &str) -> Vec<String> {
    let head = format!("pub struct {name} {{");
    let Some(start) = src.find(&head) else {
        return Vec::new();
    };
    let body = &src[start + head.len()..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split_once(':'))
        .map(|(f, _)| f.trim().to_string())
        .collect()
}

#[test]
fn every_attrs_field_has_exactly_one_row() {
    let src = include_str!("../attrs.rs");
    let mut fields = struct_fields(src, "Attrs");
    fields.extend(struct_fields(src, "RareAttrs"));
    // `rare` is the box that holds the RareAttrs fields, not an attribute.
    fields.retain(|f| f != "rare");
    assert!(
        fields.len() > 60,
        "read {} fields from attrs.rs",
        fields.len()
    );
    for f in &fields {
        let rows = ATTR_TABLE.iter().filter(|r| r.field == f).count();
        assert_eq!(
            rows, 1,
            "Attrs field `{f}` has {rows} rows in the attribute table"
        );
    }
    // A row may also name a part of a field (`precision.algorithm`), once.
    let mut parts = Vec::new();
    for r in ATTR_TABLE {
        let top = r.field.split('.').next().unwrap_or(r.field);
        assert!(
            fields.iter().any(|f| f == top),
            "row `{}` names `{}`, which is no field of Attrs",
            r.key,
            r.field
        );
        if r.field != top {
            assert!(!parts.contains(&r.field), "two rows name `{}`", r.field);
            parts.push(r.field);
        }
    }
}

#[test]
fn plain_keys_are_unique_per_opcode() {
    for op in crate::opcode::Opcode::ALL.iter().copied() {
        let mut keys: Vec<&str> = plain_rows().filter(|r| (r.on)(op)).map(|r| r.key).collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "two plain rows share a key on {op}");
    }
}

/// A value of `kind` other than the default, as text.
fn sample(kind: TextKind) -> &'static str {
    match kind {
        TextKind::Int(_) | TextKind::Int32(_) => "1",
        TextKind::Bool => "true",
        TextKind::Ints => "{2,1}",
        TextKind::F32 => "0.25",
        TextKind::Str(_) => "\"cfg\"",
    }
}

/// An instruction of `op` that the parser accepts without the attribute under test, or
/// `None` when the test has no template for the opcode.
fn template(op: Opcode) -> Option<&'static str> {
    use Opcode::*;
    Some(match op {
        GetTupleElement => "t = (f32[2], f32[3]) parameter(0)\n  ROOT r = f32[3] get-tuple-element(t)",
        Send => "p = f32[2] parameter(0)\n  tok = token[] after-all()\n  ROOT r = (f32[2], u32[], token[]) send(p, tok), channel_id=1",
        DynamicSlice => "p = f32[4,4] parameter(0)\n  i = s32[] parameter(1)\n  ROOT r = f32[2,1] dynamic-slice(p, i, i)",
        Gather => "p = f32[4,4] parameter(0)\n  i = s32[2,1] parameter(1)\n  ROOT r = f32[2,2,1] gather(p, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,1}",
        Scatter => return None,
        BatchNormInference => "x = f32[2,3] parameter(0)\n  s = f32[3] parameter(1)\n  ROOT r = f32[2,3] batch-norm-inference(x, s, s, s, s), epsilon=0.5, feature_index=1",
        ReducePrecision => "p = f32[2] parameter(0)\n  ROOT r = f32[2] reduce-precision(p), exponent_bits=5, mantissa_bits=3",
        RngGetAndUpdateState => "ROOT r = u64[2] rng-get-and-update-state(), delta=4",
        Fft => "p = c64[2,1] parameter(0)\n  ROOT r = c64[2,1] fft(p), fft_type=FFT",
        Infeed => "tok = token[] after-all()\n  ROOT r = (f32[2], token[]) infeed(tok)",
        Outfeed => "p = f32[2] parameter(0)\n  tok = token[] after-all()\n  ROOT r = token[] outfeed(p, tok)",
        CopyStart => "p = f32[2] parameter(0)\n  ROOT r = (f32[2], f32[2], u32[]) copy-start(p)",
        _ => return None,
    })
}

/// Replaces the value of `key=` in `line` (or appends `key=value`).
fn with_attr(line: &str, key: &str, value: &str) -> String {
    let probe = format!(", {key}=");
    match line.find(&probe) {
        Some(at) => {
            let rest = &line[at + probe.len()..];
            let end = rest.find(", ").unwrap_or(rest.len());
            format!("{}{probe}{value}{}", &line[..at], &rest[end..])
        }
        None => format!("{line}{probe}{value}"),
    }
}

fn through_proto(m: &Module) -> Module {
    let bytes = crate::proto::module_to_proto(m);
    crate::proto::module_from_proto(&bytes).expect("the proto reads back")
}

#[test]
fn every_plain_row_round_trips_text_proto_text() {
    let mut checked = 0;
    for row in plain_rows() {
        let Codec::Plain { text, .. } = row.codec else {
            continue;
        };
        let Some(op) = Opcode::ALL.iter().copied().find(|&op| (row.on)(op)) else {
            panic!("row `{}` applies to no opcode", row.key);
        };
        let Some(body) = template(op) else {
            // No instruction template for the opcode: check the value codecs alone.
            let Codec::Plain {
                get,
                set,
                get_proto,
                set_proto,
                ..
            } = row.codec
            else {
                continue;
            };
            let mut a = Attrs::default();
            let v = match text {
                TextKind::Bool => Value::Bool(true),
                TextKind::Ints => Value::Ints(vec![2, 1]),
                TextKind::F32 => Value::F32(0.25),
                TextKind::Str(_) => Value::Str("cfg".into()),
                TextKind::Int(_) | TextKind::Int32(_) => Value::Int(1),
            };
            set(&mut a, v.clone()).unwrap();
            let mut p = pb::HloInstructionProto::default();
            set_proto(&mut p, get(&a)).unwrap();
            let mut back = Attrs::default();
            set(&mut back, get_proto(&p)).unwrap();
            assert_eq!(get(&back), v, "row `{}` through the proto", row.key);
            checked += 1;
            continue;
        };
        let (head, last) = body.rsplit_once('\n').unwrap_or(("", body));
        let last = with_attr(last.trim_start(), row.key, sample(text));
        let src = format!("HloModule m\n\nENTRY e {{\n  {head}\n  {last}\n}}\n")
            .replace("{\n  \n", "{\n");
        let m = parse_module(&src).unwrap_or_else(|e| panic!("row `{}`: {e}\n{src}", row.key));
        let printed = print_module(&m, &PrintOptions::short());
        let want = format!("{}={}", row.key, sample(text_kind(row)));
        assert!(
            printed.contains(&want),
            "row `{}` prints {want}:\n{printed}",
            row.key
        );
        let back = print_module(&through_proto(&m), &PrintOptions::short());
        assert_eq!(back, printed, "row `{}`: text -> proto -> text", row.key);
        checked += 1;
    }
    assert_eq!(checked, plain_rows().count());
}

fn text_kind(row: &AttrRow) -> TextKind {
    match row.codec {
        Codec::Plain { text, .. } => text,
        Codec::Special(_) => TextKind::Bool,
    }
}

#[test]
fn all_reduce_id_reads_prints_and_goes_through_the_proto() {
    let src = "HloModule m\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  \
               ROOT s = f32[] add(x, y)\n}\n\nENTRY e {\n  p = f32[4] parameter(0)\n  \
               ROOT r = f32[4] all-reduce(p), replica_groups={}, all_reduce_id=7, to_apply=add\n}\n";
    let m = parse_module(src).unwrap();
    let printed = print_module(&m, &PrintOptions::short());
    assert!(
        printed.contains("replica_groups={}, all_reduce_id=7, to_apply=add"),
        "{printed}"
    );
    assert_eq!(
        print_module(&through_proto(&m), &PrintOptions::short()),
        printed
    );
    // Only all-reduce carries it.
    let on_add = src.replace(
        "all-reduce(p), replica_groups={}, all_reduce_id=7, to_apply=add",
        "add(p, p), all_reduce_id=7",
    );
    let e = parse_module(&on_add).unwrap_err().to_string();
    assert!(
        e.contains("unexpected attribute 'all_reduce_id' for opcode add"),
        "{e}"
    );
}

/// A family has one row per field of its IR struct, distinct keys, and every field survives the
/// trip through the proto message.
fn check_family<T: Default + PartialEq + std::fmt::Debug, P: Default>(
    name: &str,
    family: &[DimsField<T, P>],
) {
    let fields = struct_fields(include_str!("../attrs.rs"), name);
    assert_eq!(family.len(), fields.len(), "{name}: rows against fields");
    for (k, f) in family.iter().enumerate() {
        assert!(
            family[..k].iter().all(|g| g.key != f.key),
            "{name}: key {} twice",
            f.key
        );
    }
    let mut d = T::default();
    for (k, f) in family.iter().enumerate() {
        let k = k as i64;
        let v = match f.text {
            TextKind::Ints => Value::Ints(vec![k, 10 + k]),
            _ => Value::Int(k + 1),
        };
        (f.set)(&mut d, v.clone()).unwrap();
        assert_eq!((f.get)(&d), v, "{name}.{}", f.key);
    }
    let back: T = dims_from_proto(family, &dims_to_proto(family, &d));
    assert_eq!(back, d, "{name} through the proto");
}

#[test]
fn dimension_number_families_cover_their_structs_and_round_trip() {
    check_family("DotDimensionNumbers", DOT_DIMS);
    check_family("RaggedDotDimensionNumbers", RAGGED_DOT_DIMS);
    check_family("GatherDimensionNumbers", GATHER_DIMS);
    check_family("ScatterDimensionNumbers", SCATTER_DIMS);
}
