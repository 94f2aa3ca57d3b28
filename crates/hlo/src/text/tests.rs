//! Unit tests of the text format: the tricky spellings, round trips and error positions.

use super::*;
use crate::attrs::ReplicaGroups;
use crate::opcode::Opcode;
use crate::sharding::{Mesh, ShardingKind};

fn roundtrip(text: &str) -> (Module, String) {
    let m = parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let printed = m.to_text();
    let again = parse_module(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(module_diff(&m, &again), None, "{printed}");
    assert_eq!(again.to_text(), printed);
    (m, printed)
}

/// The printed line of the instruction named `name`.
fn line_of<'a>(printed: &'a str, name: &str) -> &'a str {
    let key = format!("%{name} = ");
    printed
        .lines()
        .find(|l| l.trim_start().trim_start_matches("ROOT ").starts_with(&key))
        .unwrap_or_else(|| panic!("no %{name} in\n{printed}"))
        .trim()
}

fn err(text: &str) -> ParseError {
    match parse_module(text) {
        Ok(_) => panic!("expected an error for\n{text}"),
        Err(e) => e,
    }
}

/// `testdata/text/xla_printed/NAME` from its `HloModule` line on: jaxlib 0.12's printing, below
/// our comment lines.
fn xla_printed(name: &str) -> String {
    let path = format!(
        "{}/../../testdata/text/xla_printed/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    file[file.find("HloModule").unwrap()..].to_string()
}

/// `(instruction name, shape index)` of each key of a module table keyed by original arrays.
fn original_array_keys<V>(
    t: &std::collections::BTreeMap<crate::module::OriginalArray, V>,
) -> Vec<(&str, &[i64])> {
    t.keys()
        .map(|k| (k.instruction_name.as_str(), k.shape_index.as_slice()))
        .collect()
}

fn constant_line(shape: &str, value: &str) -> String {
    let text = format!("HloModule m\nENTRY e {{\n  ROOT c = {shape} constant({value})\n}}\n");
    let (_, printed) = roundtrip(&text);
    let l = line_of(&printed, "c");
    let start = l.find("constant(").unwrap() + "constant(".len();
    l[start..l.len() - 1].to_string()
}

/// Each `(shape, value, printed)`: a constant of `shape` written `value` prints as `printed`.
fn check_constants(cases: &[(&str, &str, &str)]) {
    for &(shape, value, printed) in cases {
        assert_eq!(
            constant_line(shape, value),
            printed,
            "{shape} constant({value})"
        );
    }
}

#[test]
fn float_literals_round_like_xla() {
    check_constants(&[
        (
            "f32[4]",
            "{0.1, 1e-45, -inf, nan}",
            "{0.1, 1.4013e-45, -inf, nan}",
        ),
        ("f32[2]", "{nan(0x1), -nan}", "{nan(0x1), -nan}"),
        ("f64[2]", "{0.1, 1e300}", "{0.1, 1e+300}"),
        ("bf16[3]", "{1.00390625, 3.3e38, -0}", "{1, 3.296e+38, 0}"),
        (
            "bf16[3]",
            "{nan(0x3), -nan, -0.0}",
            "{nan(0x3), -nan, -0.0}",
        ),
        ("f16[2]", "{nan, -nan}", "{nan, -nan}"),
        (
            "f16[3]",
            "{65504, 0.1, 6e-8}",
            "{65504, 0.099976, 5.9605e-08}",
        ),
        ("f8e4m3fn[3]", "{448, -100, 0.1}", "{448, -96, 0.102}"),
        ("f8e5m2[2]", "{57344, 0.1}", "{5.7e+04, 0.094}"),
        ("f8e4m3[2]", "{240, inf}", "{240, inf}"),
        ("f8e3m4[2]", "{15.5, 0.3}", "{15.5, 0.297}"),
        ("f8e4m3fnuz[2]", "{240, nan}", "{240, -nan}"),
        ("f8e5m2fnuz[1]", "{-3}", "{-3}"),
        ("f8e4m3b11fnuz[1]", "{30}", "{30}"),
        ("f4e2m1fn[4]", "{6, -0.5, 0.1, 2.5}", "{6, -0.5, 0, 2}"),
        ("f8e8m0fnu[3]", "{1, 0.5, 4}", "{1, 0.5, 4}"),
        (
            "c64[2]",
            "{(1, 2), (0.5, -1e10)}",
            "{(1, 2), (0.5, -1e+10)}",
        ),
        ("c128[]", "(1, -0.1)", "(1, -0.1)"),
    ]);
    // Out of range values are errors, as in XLA.
    let e = err("HloModule m\nENTRY e {\n  ROOT c = f8e4m3fn[1] constant({1000})\n}\n");
    assert!(e.message.contains("out of range"), "{e}");
    let e = err("HloModule m\nENTRY e {\n  ROOT c = f32[] constant(4e38)\n}\n");
    assert!(e.message.contains("out of range"), "{e}");
}

#[test]
fn integer_pred_and_tuple_literals() {
    check_constants(&[
        ("s4[2]", "{-8, 7}", "{-8, 7}"),
        ("u64[1]", "{18446744073709551615}", "{18446744073709551615}"),
        ("s64[]", "-9223372036854775808", "-9223372036854775808"),
        ("pred[2]", "{true, false}", "{1, 0}"),
        ("pred[]", "true", "true"),
        ("s32[2,2]", "{{1, 2}, {3, 4}}", "{ { 1, 2 }, { 3, 4 } }"),
        ("s32[2,0]", "{{}, {}}", "{ {}, {} }"),
        ("(f32[], s32[2])", "(1, {2, 3})", "(1, {2, 3})"),
    ]);
    // One value sets the first element (as in XLA); `{...}` (elided) reads as zeros, also
    // spaced out and per tuple element (XLA accepts these and leaves the values unset).
    check_constants(&[
        ("s8[3]", "7", "{7, 0, 0}"),
        ("f32[2]", "{...}", "{0, 0}"),
        ("s32[2,2]", "{ ... }", "{ { 0, 0 }, { 0, 0 } }"),
        ("s32[0]", "{...}", "{}"),
        ("(f32[2], s32[1])", "({...}, {\n...\n})", "({0, 0}, {0})"),
    ]);
    // What XLA's parser refuses: an elided tuple or scalar, `...` nested below the top level.
    for bad in [
        "s4[1] constant({8})",
        "u8[1] constant({-1})",
        "s32[2] constant({1})",
        "(f32[], s32[2]) constant({...})",
        "f32[] constant({...})",
        "s32[2,2] constant({ {...}, {1, 2} })",
        "s32[2] constant({. ..})",
    ] {
        let e = err(&format!("HloModule m\nENTRY e {{\n  ROOT c = {bad}\n}}\n"));
        assert_eq!(e.line, 3, "{e}");
    }
}

#[test]
fn shapes_and_layouts() {
    for s in [
        "f32[2,3]{1,0}",
        "f32[<=4,?]{1,0}",
        "(f32[], (s32[2]{0}, token[]), opaque[])",
        "()",
        "b(f32[8]{0})",
        "bf16[128,256]{1,0:T(8,128)(2,1)}",
        "s4[8]{0:T(8,*)E(4)}",
        "f32[2,3]{0,1:D(D,C+~)T(8,128)L(4)#(u32)*(u16)E(16)S(2)SC(0:1,2)P(f32[6]{0})M(8)}",
        "f32[]{:S(1)}",
        "f8e4m3fn[2]{0}",
    ] {
        let shape = parse_shape(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(shape_to_string(&shape), s);
    }
    assert_eq!(
        parse_shape("f32[]{}").unwrap(),
        parse_shape("f32[]").unwrap()
    );
    let e = parse_shape("f32[2,3]{1,0:T(8,128)Q(1)}").unwrap_err();
    assert_eq!((e.line, e.column), (1, 22), "{e}");
    assert!(e.message.contains("expected a layout item"), "{e}");
}

#[test]
fn shardings_in_every_form() {
    for s in [
        "{replicated}",
        "{manual}",
        "{unknown}",
        "{unreduced}",
        "{maximal device=3}",
        "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
        "{devices=[2,2]<=[4]}",
        "{devices=[2,2,2]<=[2,4]T(1,0) last_tile_dims={manual}}",
        "{devices=[4,1]<=[4] shard_as 2}",
        "{replicated shard_like 1}",
        "{devices=[2]0,1 metadata={op_name=\"a\"}}",
        "{{replicated}, {maximal device=0}, {devices=[2]<=[2]}}",
        "{}",
    ] {
        let sh = parse_sharding(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(sharding_to_string(&sh), s);
    }
    let sh = parse_sharding("{devices=[2,2]<=[2,2]T(1,0)}").unwrap();
    match sh.kind {
        ShardingKind::Tiled(t) => assert_eq!(t.tile_assignment.num_devices(), 4),
        k => panic!("{k:?}"),
    }
    let e = parse_sharding("{devices=[2,2,}").unwrap_err();
    assert_eq!(e.to_string(), "1:15: expected a dimension, found '}'");
    let e = parse_sharding("{devices=[2,2]0,1,2}").unwrap_err();
    assert!(e.message.contains("need 4 devices but 3"), "{e}");
    let e = parse_sharding("{devices=[2,2]<=[2,2]}").unwrap_err();
    assert!(e.message.contains("'T('"), "{e}");
}

#[test]
fn replica_groups_in_three_spellings() {
    let g = parse_replica_groups("{{0,1},{2,3}}").unwrap();
    assert_eq!(g, ReplicaGroups::Explicit(vec![vec![0, 1], vec![2, 3]]));
    let g = parse_replica_groups("[2,4]<=[4,2]T(1,0)").unwrap();
    assert_eq!(
        g,
        ReplicaGroups::Iota {
            num_groups: 2,
            group_size: 4,
            reshape_dims: vec![4, 2],
            transpose_perm: vec![1, 0]
        }
    );
    let g = parse_replica_groups("mesh['axis_0'=4,'axis_1'=2] {'axis_0'}").unwrap();
    match &g {
        ReplicaGroups::Mesh(m) => {
            assert_eq!(m.mesh, Mesh::iota(&[("axis_0", 4), ("axis_1", 2)]));
            assert_eq!(m.group_axes, vec!["'axis_0'".to_string()]);
        }
        g => panic!("{g:?}"),
    }
    let text = "HloModule m\n\n%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n  ROOT %a = f32[] add(f32[] %x, f32[] %y)\n}\n\nENTRY %e (p: f32[8]) -> (f32[8], f32[8], f32[8]) {\n  %p = f32[8]{0} parameter(0)\n  %r1 = f32[8]{0} all-reduce(f32[8]{0} %p), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add\n  %r2 = f32[8]{0} all-reduce(f32[8]{0} %p), channel_id=2, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true, to_apply=%add\n  %r3 = f32[8]{0} all-reduce(f32[8]{0} %p), channel_id=3, replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, use_global_device_ids=true, to_apply=%add\n  ROOT %t = (f32[8]{0}, f32[8]{0}, f32[8]{0}) tuple(f32[8]{0} %r1, f32[8]{0} %r2, f32[8]{0} %r3)\n}\n\n";
    let (_, printed) = roundtrip(text);
    assert_eq!(printed, text);
}

/// XLA of mid-2026 (jaxlib 0.10.2) writes the partitioner's collectives as mesh replica groups
/// whose mesh has an iota device order; the groups follow that order.
#[test]
fn mesh_replica_groups_with_an_iota_device_order() {
    let written = "mesh['axis_0'=2,'axis_1'=4,'axis_2'=1,'axis_3'=1], device_ids=([2,2,2]T(0,2,1)) {'axis_1':(2)2}";
    let g = parse_replica_groups(written).unwrap();
    let ReplicaGroups::Mesh(m) = &g else {
        panic!("{g:?}")
    };
    // Devices in mesh order 0,2,1,3,4,6,5,7; each group the minor half of axis_1.
    assert_eq!(m.mesh.device_list(), vec![0, 2, 1, 3, 4, 6, 5, 7]);
    assert_eq!(
        g.groups().unwrap(),
        vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]]
    );
    let text = format!(
        "HloModule m, num_partitions=8\n\nENTRY %e (p: f32[2]) -> f32[2] {{\n  %p = f32[2]{{0}} parameter(0)\n  ROOT %a = f32[2]{{0}} all-to-all(f32[2]{{0}} %p), channel_id=1, replica_groups={written}, dimensions={{0}}\n}}\n\n"
    );
    let (_, printed) = roundtrip(&text);
    assert_eq!(printed, text);
    // Explicit ids of the wrong count are refused where they are written.
    let e = parse_replica_groups("mesh['x'=2,'y'=2], device_ids=(0,1,2) {'x'}").unwrap_err();
    assert!(e.message.contains("expected 4 device_ids"), "{e}");
}

#[test]
fn canonical_print_of_a_long_form_module() {
    let text = r#"HloModule m, is_scheduled=true, entry_computation_layout={(f32[4]{0}, s32[])->f32[4]{0}}, input_output_alias={ {}: (0, {}, may-alias) }, buffer_donor={ (1, {}) }, replica_count=2, num_partitions=4, frontend_attributes={a="b"}

%body (p: (f32[4], s32[])) -> (f32[4], s32[]) {
  %p = (f32[4]{0}, s32[]) parameter(0)
  %x = f32[4]{0} get-tuple-element((f32[4]{0}, s32[]) %p), index=0
  %i = s32[] get-tuple-element((f32[4]{0}, s32[]) %p), index=1
  %one = s32[] constant(1)
  %j = s32[] add(s32[] %i, s32[] %one)
  %y = f32[4]{0} multiply(f32[4]{0} %x, f32[4]{0} %x), metadata={op_type="Mul" op_name="jit(f)/mul" source_file="f.py" source_line=3}
  ROOT %t = (f32[4]{0}, s32[]) tuple(f32[4]{0} %y, s32[] %j)
}

%cond (p.1: (f32[4], s32[])) -> pred[] {
  %p.1 = (f32[4]{0}, s32[]) parameter(0)
  %i.1 = s32[] get-tuple-element((f32[4]{0}, s32[]) %p.1), index=1
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(s32[] %i.1, s32[] %n), direction=LT
}

ENTRY %main (a: f32[4], b: s32[]) -> f32[4] {
  %a = f32[4]{0} parameter(0), sharding={devices=[4]<=[4]}
  %b = s32[] parameter(1), sharding={replicated}
  %init = (f32[4]{0}, s32[]) tuple(f32[4]{0} %a, s32[] %b)
  %w = (f32[4]{0}, s32[]) while((f32[4]{0}, s32[]) %init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"10"}}
  ROOT %r = f32[4]{0} get-tuple-element((f32[4]{0}, s32[]) %w), index=0, control-predecessors={%init}
}

"#;
    let (m, printed) = roundtrip(text);
    assert_eq!(printed, text);
    let s = m
        .schedule
        .as_ref()
        .expect("is_scheduled=true gives a schedule");
    assert_eq!(s.sequences.len(), 3);
    assert_eq!(m.config.replica_count, 2);
    assert_eq!(m.config.input_output_alias.len(), 1);
    // The short form parses to the same module.
    let short = print_module(&m, &PrintOptions::short());
    assert!(
        short.contains("ROOT r = f32[4]{0} get-tuple-element(w), index=0"),
        "{short}"
    );
    assert_eq!(module_diff(&m, &parse_module(&short).unwrap()), None);
}

#[test]
fn short_form_nested_and_inline() {
    let text = "HloModule m\nENTRY e {\n  a = f32[] exponential(f32[] parameter(0))\n  b = f32[2] parameter(1)\n  r = f32[] reduce(b, a), dimensions={0}, to_apply={\n    x = f32[] parameter(0)\n    y = f32[] parameter(1)\n    ROOT s = add(x, y)\n  }\n  ROOT t = tuple(a, r)\n}\n";
    let (m, printed) = roundtrip(text);
    let e = m.comp(m.entry().unwrap());
    assert_eq!(e.num_parameters(), 2);
    // The nested parameter got a name; the inline computation comes before its caller.
    assert!(
        printed.contains("%parameter.anon = f32[] parameter(0)"),
        "{printed}"
    );
    let first = m.computations()[0];
    assert_eq!(m.comp(first).name, "anonymous_computation");
    assert!(line_of(&printed, "t").starts_with("ROOT %t = (f32[], f32[]) tuple("));
}

#[test]
fn inline_computation_names_are_its_own() {
    // The inline computation reuses the caller's names `a` and `b`; after it closes, `a` is
    // the caller's again, and its `s` is not visible outside. Names already used get XLA's
    // `.N` suffix module-wide.
    let text = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[] constant(0)\n  r = f32[] reduce(a, b), dimensions={0}, to_apply={\n    a = f32[] parameter(0)\n    b = f32[] parameter(1)\n    ROOT s = f32[] add(a, b)\n  }\n  ROOT t = (f32[2], f32[]) tuple(a, r)\n}\n";
    let (m, printed) = roundtrip(text);
    let t = m.find_instruction("t").unwrap();
    let a = m.find_instruction("a").unwrap();
    assert_eq!(m.operands(t)[0], a);
    assert_eq!(m.instr(a).opcode, Opcode::Parameter);
    assert_eq!(m.instr(a).parent(), m.entry().unwrap());
    assert!(printed.contains("%a.1 = f32[] parameter(0)"), "{printed}");
    assert!(
        printed.contains("ROOT %s = f32[] add(f32[] %a.1, f32[] %b.1)"),
        "{printed}"
    );
    let leak = text.replace("tuple(a, r)", "tuple(s, r)");
    let e = parse_module(&leak).unwrap_err().to_string();
    assert!(e.contains("instruction 's' is not defined"), "{e}");
}

#[test]
fn many_small_computations_after_a_large_one() {
    // Each computation's names are looked up in its own table, recycled from the one before:
    // a large computation first, then many small ones that reuse its names.
    let mut text =
        String::from("HloModule m\n\n%big (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n");
    for k in 0..500 {
        let prev = if k == 0 {
            "p".to_string()
        } else {
            format!("n{}", k - 1)
        };
        text.push_str(&format!("  %n{k} = f32[] negate(%{prev})\n"));
    }
    text.push_str("  ROOT %r = f32[] copy(%n499)\n}\n\n");
    for k in 0..50 {
        text.push_str(&format!(
            "%small{k} (p: f32[]) -> f32[] {{\n  %p = f32[] parameter(0)\n  %n0 = f32[] negate(%p)\n  ROOT %r = f32[] copy(%n0)\n}}\n\n"
        ));
    }
    text.push_str("ENTRY %e (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n  ROOT %c = f32[] call(%p), to_apply=%small49\n}\n");
    let (m, _) = roundtrip(&text);
    let small = m.find_computation("small49").unwrap();
    let root = m.comp(small).root().unwrap();
    let n0 = m.operands(root)[0];
    assert_eq!(m.operands(n0), &[m.comp(small).parameter(0).unwrap()]);
    assert_eq!(m.instr(n0).name(), "n0.50");
}

#[test]
fn nested_instruction_before_another_operand() {
    // The comma after a nested instruction separates operands unless `name=` follows it; XLA
    // reads this module the same way.
    let text = "HloModule m\nENTRY e {\n  %p = f32[2]{0} parameter(0)\n  ROOT %a = f32[2]{0} add(f32[2]{0} negate(f32[2]{0} %p), f32[2]{0} %p)\n}\n";
    let (_, printed) = roundtrip(text);
    assert_eq!(
        line_of(&printed, "a"),
        "ROOT %a = f32[2]{0} add(f32[2]{0} %negate.anon, f32[2]{0} %p)"
    );
    // After a nested instruction, `, name=` is still read as its attribute.
    let e = err("HloModule m\nENTRY e {\n  %p = f32[2]{0} parameter(0)\n  ROOT %a = f32[2]{0} negate(f32[2]{0} negate(f32[2]{0} %p), nope=1)\n}\n");
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn duplicate_names_across_computations_are_renamed() {
    let text = "HloModule m\nadd {\n  x = f32[] parameter(0)\n  ROOT add = f32[] add(x, x)\n}\nENTRY add.1 {\n  x = f32[] parameter(0)\n  ROOT add = f32[] call(x), to_apply=add\n}\n";
    let (m, _) = roundtrip(text);
    let names: Vec<&str> = m
        .computations()
        .iter()
        .flat_map(|&c| {
            m.comp(c)
                .instructions()
                .iter()
                .map(|&i| m.instr(i).name.as_str())
        })
        .collect();
    assert_eq!(names, ["x", "add", "x.1", "add.1"]);
    let root = m.comp(m.entry().unwrap()).root().unwrap();
    assert_eq!(m.instr(root).opcode, Opcode::Call);
}

#[test]
fn errors_name_the_place_and_what_was_expected() {
    let e = err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[2] add(p, p), frobnicate=3\n}\n");
    assert_eq!((e.line, e.column), (4, 30), "{e}");
    assert_eq!(
        e.message,
        "unexpected attribute 'frobnicate' for opcode add"
    );
    let e = err("HloModule m\nENTRY e {\n  ROOT a = f32[2] add(p, p)\n}\n");
    assert_eq!(e.to_string(), "3:23: instruction 'p' is not defined");
    let e = err(
        "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT b = f32[2] broadcast(p)\n}\n",
    );
    assert!(e.message.contains("'dimensions' is expected"), "{e}");
    let e =
        err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT b = f32[2] frob(p)\n}\n");
    assert_eq!(e.to_string(), "4:19: unknown opcode 'frob'");
    let e = err("HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}\n");
    assert_eq!(
        e.to_string(),
        "3:13: expected ',' or ']' in the dimensions, found 'parameter'"
    );
    let e = err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0), sharding={devices=[2,2}\n}\n");
    assert_eq!(e.line, 3);
    assert!(
        e.message
            .starts_with("expected ',' or ']' to close the tile assignment dimensions, found '}'"),
        "{e}"
    );
    let e = err("HloModule m\nENTRY e {\n  p = f32[2] parameter(0) /* unterminated\n}\n");
    assert_eq!(e.to_string(), "3:27: unterminated /* comment");
    let e = err("");
    assert!(e.message.contains("expected a computation"), "{e}");
}

#[test]
fn comments_are_skipped() {
    let text = "// leading\nHloModule m /* c */, replica_count=1\n\nENTRY %e () -> (f32[], f32[]) {\n  %a = f32[] constant(1) // trailing\n  ROOT %t = (f32[], /*index=1*/f32[]) tuple(f32[] %a, /*index=1*/f32[] %a)\n}\n";
    let (m, _) = roundtrip(text);
    assert_eq!(m.instruction_count(), 2);
}

/// `count` copies of `text`, each with one byte replaced by one of `noise` (the place and the
/// byte drawn by a linear congruential generator from `seed`), less those that are no longer
/// UTF-8: a cheap stand-in for the fuzzer.
fn corrupted(text: &str, noise: &[u8], seed: u32, count: usize) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut state = seed;
    let mut out = Vec::new();
    for _ in 0..count {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let pos = (state >> 8) as usize % bytes.len();
        let b = noise[(state >> 20) as usize % noise.len()];
        let mut v = bytes.to_vec();
        v[pos] = b;
        if let Ok(s) = String::from_utf8(v) {
            out.push(s);
        }
    }
    out
}

/// Cut and corrupted inputs give errors, never panics (a cheap stand-in for the fuzzer).
#[test]
fn never_panics_on_damaged_input() {
    let text = r#"HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(f32[] %x, f32[] %y)
}
ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0:T(4)} parameter(0), sharding={devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}
  %c = bf16[2,2] constant({{1, nan}, {-inf, 2.5}})
  %r = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups=[1,4]<=[4], to_apply=%add, metadata={op_name="x\"y"}
  ROOT %s = f32[4]{0} slice(f32[4]{0} %r), slice={[0:4:1]}
}
"#;
    parse_module(text).unwrap();
    let bytes = text.as_bytes();
    let mut checked = 0;
    for cut in (0..bytes.len()).step_by(3) {
        let _ = parse_module(&text[..cut]);
        checked += 1;
    }
    let noise = [
        b'{', b'}', b'(', b')', b',', b'=', b'"', b'%', b'[', b']', b'-', b'9', b'/', b'*',
    ];
    for s in corrupted(text, &noise, 12345, 600) {
        let _ = parse_module(&s);
        checked += 1;
    }
    // Deep nesting is refused, not a stack overflow.
    let deep = format!(
        "HloModule m\nENTRY e {{\n  ROOT p = {}f32[]{} parameter(0)\n}}\n",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    assert!(parse_module(&deep).is_err());
    assert!(checked > 500);
}

#[test]
fn async_shorthand_wraps_the_instruction() {
    let text = r#"HloModule m

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %a = f32[] add(%x, %y)
}

ENTRY %e (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  %s = ((f32[8]{0}), f32[8]{0}, s32[]) custom-call-start(%p), async_execution_thread="thread", custom_call_target="foo", metadata={op_name="x"}
  %u = ((f32[8]{0}), f32[8]{0}, s32[]) custom-call-update(%s)
  %d = f32[8]{0} custom-call-done(%u)
  %rs = ((f32[8]{0}), f32[4]{0}) reduce-scatter-start(%d), channel_id=1, replica_groups={{0,1}}, dimensions={0}, to_apply=%add
  %rd = f32[4]{0} reduce-scatter-done(%rs)
  ROOT %b = f32[8]{0} broadcast(%rd), dimensions={}
}
"#;
    let (m, printed) = roundtrip(text);
    assert_eq!(m.computations().len(), 4);
    assert!(
        printed.contains("%async_wrapped (async_param: f32[8]) -> f32[8] {"),
        "{printed}"
    );
    assert!(
        printed.contains("}, execution_thread=\"thread\""),
        "{printed}"
    );
    assert!(
        line_of(&printed, "async_op").contains("custom-call(f32[8]{0} %async_param), custom_call_target=\"foo\", metadata={op_name=\"x\"}"),
        "{printed}"
    );
    assert!(line_of(&printed, "d")
        .contains("async-done(((f32[8]{0}), f32[8]{0}, s32[]) %u), calls=%async_wrapped"));
    assert!(line_of(&printed, "rs").contains("async-start(f32[8]{0} %d), calls=%async_wrapped.1"));
    let e = err(
        "HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n  d = f32[8] custom-call-done(p)\n}\n",
    );
    assert!(
        e.message.contains("async-start or async-update operand"),
        "{e}"
    );
}

/// Checked against jaxlib 0.12's parser: one value without braces fills the first element of
/// an array and leaves the rest zero; an empty array takes no value.
#[test]
fn one_unbraced_value_sets_the_first_element_as_in_xla() {
    check_constants(&[
        ("f32[3]", "1", "{1, 0, 0}"),
        ("s32[4]", "7", "{7, 0, 0, 0}"),
        ("f32[2,2]", "2.5", "{ { 2.5, 0 }, { 0, 0 } }"),
        ("pred[3]", "true", "{1, 0, 0}"),
    ]);
    let e = err("HloModule m\nENTRY e {\n  ROOT c = f32[0] constant(1)\n}\n");
    assert!(e.message.contains("without elements"), "{e}");
}

/// XLA's lexer reads `-0` as the integer zero, so a float constant written `-0` is +0; `-0.0`
/// keeps its sign (and prints as `-0.0`, which both parsers read back as negative zero).
#[test]
fn minus_zero_integer_token_is_positive_zero() {
    for ty in ["f32", "f64", "bf16", "f16"] {
        assert_eq!(constant_line(&format!("{ty}[]"), "-0"), "0", "{ty}");
        assert_eq!(constant_line(&format!("{ty}[]"), "-0.0"), "-0.0", "{ty}");
    }
    check_constants(&[("c64[]", "(-0, -0.0)", "(0, -0.0)")]);
}

/// XLA prints `largest=` and `is_stable=` on every topk and reads a missing one as true.
#[test]
fn topk_defaults_are_largest_and_stable() {
    let text = "HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n  a = (f32[2], s32[2]) topk(p), k=2\n  ROOT b = (f32[2], s32[2]) topk(p), k=2, largest=false, is_stable=false\n}\n";
    let (m, printed) = roundtrip(text);
    assert!(
        line_of(&printed, "a").ends_with("%p), k=2, largest=true, is_stable=true"),
        "{printed}"
    );
    assert!(
        line_of(&printed, "b").ends_with("k=2, largest=false, is_stable=false"),
        "{printed}"
    );
    let a = m.find_instruction("a").unwrap();
    assert!(m.instr(a).attrs.is_stable && m.instr(a).attrs.largest);
}

/// The short form may leave out the shape of every opcode XLA's parser infers; the shapes
/// below are the ones jaxlib 0.12 infers for the same text.
#[test]
fn short_form_infers_shapes_like_xla() {
    let text = r#"HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = add(x, y)
}

ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,4] parameter(1)
  v = f32[3] parameter(2)
  z = f32[] constant(0)
  dot = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  tr = transpose(a), dimensions={1,0}
  bc = broadcast(v), dimensions={1}
  red = reduce(a, z), dimensions={1}, to_apply=add
  cat = concatenate(a, a), dimensions={0}
  cmp = compare(a, a), direction=LT
  sel = select(cmp, a, a)
  re = real(a)
  call = call(z, z), to_apply=add
  ROOT t = tuple(dot, tr, bc, red, cat, sel, re, call)
}
"#;
    let (m, _) = roundtrip(text);
    let shape = |n: &str| shape_to_string(&m.instr(m.find_instruction(n).unwrap()).shape);
    assert_eq!(shape("s"), "f32[]");
    assert_eq!(shape("dot"), "f32[2,4]");
    assert_eq!(shape("tr"), "f32[3,2]");
    assert_eq!(shape("bc"), "f32[1,3]");
    assert_eq!(shape("red"), "f32[2]");
    assert_eq!(shape("cat"), "f32[4,3]");
    assert_eq!(shape("cmp"), "pred[2,3]");
    assert_eq!(shape("sel"), "f32[2,3]");
    assert_eq!(shape("re"), "f32[2,3]");
    assert_eq!(shape("call"), "f32[]");
    // XLA needs these written: slice, reshape, convert (and the rest of its "false" list).
    for body in ["slice(a), slice={[0:1], [0:2]}", "reshape(a)", "convert(a)"] {
        let e = err(&format!(
            "HloModule m\nENTRY e {{\n  a = f32[2,3] parameter(0)\n  ROOT r = {body}\n}}\n"
        ));
        assert!(e.message.contains("cannot infer the shape"), "{body}: {e}");
    }
    // An inference error says why.
    let e = err("HloModule m\nENTRY e {\n  a = f32[2,3] parameter(0)\n  ROOT r = dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
    assert!(e.message.contains("cannot infer the shape of dot:"), "{e}");
}

/// The parser leaves the module's name table unbuilt; the first mutation that needs it builds
/// it from the parsed instructions, so uniqueness holds as if it had been kept all along.
#[test]
fn parsed_module_names_stay_unique() {
    let text = "HloModule m\nc1 {\n  a = f32[] parameter(0)\n  ROOT add = f32[] negate(a)\n}\nENTRY e {\n  a = f32[] parameter(0)\n  add = f32[] call(a), to_apply=c1\n  ROOT add.1 = f32[] negate(add)\n}\n";
    let (mut m, printed) = roundtrip(text);
    // The entry's `a` and `add` are renamed (c1 has them), and so is its `add.1`, taken by
    // then by the renamed `add`.
    assert!(printed.contains("%a.1 = f32[] parameter(0)"), "{printed}");
    assert!(
        printed.contains("%add.1 = f32[] call(f32[] %a.1)"),
        "{printed}"
    );
    assert!(
        printed.contains("ROOT %add.2 = f32[] negate(f32[] %add.1)"),
        "{printed}"
    );
    assert!(m.is_name_used("add.2") && !m.is_name_used("add.3"));
    let entry = m.entry().unwrap();
    let dup = crate::Instruction::new("a", Opcode::Parameter, Shape::Tuple(vec![]));
    assert!(m.add_instruction(entry, dup).is_err());
    assert_eq!(m.unique_name("add"), "add.3");
}

#[test]
fn integers_print_like_display() {
    for x in [
        0,
        1,
        -1,
        9,
        10,
        -10,
        4096,
        i64::MAX,
        i64::MIN,
        1_000_000_007,
    ] {
        let mut s = String::new();
        printer::write_i64(&mut s, x);
        assert_eq!(s, x.to_string());
    }
}

/// Named shardings: (input, jaxlib 0.12's printing of it, jaxlib 0.12's `v3_to_v2_sharding` of
/// it, rank of the array). Generated with `HloModule.to_string()` and
/// `HloSharding.from_string(s).v3_to_v2_sharding()` of jaxlib 0.12.0.1.
const NAMED_FROM_XLA: &[(&str, &str, &str, usize)] = &[
    (
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}]}"#,
        r#"{devices=[2,4]<=[8]}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'y'}, {}], replicated={'x'}}"#,
        r#"{mesh['x'=2,'y'=4], [{'y'}, {}], replicated={'x'}}"#,
        r#"{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'y'}, {}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'y'}, {}]}"#,
        r#"{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced={'y'}}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced={'y'}}"#,
        r#"{devices=[2,1,4]<=[8] last_tile_dims={unreduced}}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'x'}, {}], manual={'y'}}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {}], manual={'y'}}"#,
        r#"{devices=[2,1,4]<=[8] last_tile_dims={manual}}"#,
        2,
    ),
    (
        r#"{mesh['x'=4,'y'=2], [{'x':(2)2,'y'}, {'x':(1)2}]}"#,
        r#"{mesh['x'=4,'y'=2], [{'x':(2)2, 'y'}, {'x':(1)2}]}"#,
        r#"{devices=[4,2]<=[2,4]T(1,0)}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], device_ids=(1,0,3,2,5,4,7,6), [{'x'}, {'y'}]}"#,
        r#"{mesh['x'=2,'y'=4], device_ids=(1,0,3,2,5,4,7,6), [{'x'}, {'y'}]}"#,
        r#"{devices=[2,4]1,0,3,2,5,4,7,6}"#,
        2,
    ),
    (
        r#"{single_device[device_id=3]}"#,
        r#"{single_device[device_id=3]}"#,
        r#"{maximal device=3}"#,
        2,
    ),
    (
        r#"{maximal_mesh[device_id=3], metadata={op_name="a"}}"#,
        r#"{single_device[device_id=3], metadata={{op_name="a"}}}"#,
        r#"{maximal device=3}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], unreduced}"#,
        r#"{mesh['x'=2,'y'=4], unreduced}"#,
        r#"{unreduced}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], manual}"#,
        r#"{mesh['x'=2,'y'=4], manual}"#,
        r#"{manual}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], replicated}"#,
        r#"{mesh['x'=2,'y'=4], replicated}"#,
        r#"{replicated}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{}, {}]}"#,
        r#"{mesh['x'=2,'y'=4], [{}, {}]}"#,
        r#"{replicated}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'x', ?}, {?}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'x', ?}, {?}]}"#,
        r#"{devices=[2,1,4]<=[8] last_tile_dim_replicate}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{}, {}], manual={'y'}, unreduced={'x'}}"#,
        r#"{mesh['x'=2,'y'=4], [{}, {}], unreduced={'x'}, manual={'y'}}"#,
        r#"{devices=[1,1,4,2]<=[2,4]T(1,0) last_tile_dims={manual, unreduced}}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'y'}, {}], manual={'x'}}"#,
        r#"{mesh['x'=2,'y'=4], [{'y'}, {}], manual={'x'}}"#,
        r#"{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dims={manual}}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4,'z'=2], [{'z'}, {}], unreduced={'y'}, manual={'x'}}"#,
        r#"{mesh['x'=2,'y'=4,'z'=2], [{'z'}, {}], unreduced={'y'}, manual={'x'}}"#,
        r#"{devices=[2,1,2,4]<=[8,2]T(1,0) last_tile_dims={manual, unreduced}}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4,'z'=2], [{'z'}, {}], replicated={'y'}, manual={'x'}}"#,
        r#"{mesh['x'=2,'y'=4,'z'=2], [{'z'}, {}], replicated={'y'}, manual={'x'}}"#,
        r#"{devices=[2,1,2,4]<=[8,2]T(1,0) last_tile_dims={manual, replicated}}"#,
        2,
    ),
    (
        r#"{mesh['x'=1], [{'x'}]}"#,
        r#"{mesh['x'=1], [{'x'}]}"#,
        r#"{replicated}"#,
        1,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'y'}, {'x'}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'y'}, {'x'}]}"#,
        r#"{devices=[4,2]<=[2,4]T(1,0)}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], device_ids=([2,2,2]T(1,0,2)), [{'y'}, {'x'}]}"#,
        r#"{mesh['x'=2,'y'=4], device_ids=([2,2,2]T(1,0,2)), [{'y'}, {'x'}]}"#,
        r#"{devices=[4,2]<=[2,2,2]T(0,2,1)}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], device_ids=(7,6,5,4,3,2,1,0), [{'y'}, {}]}"#,
        r#"{mesh['x'=2,'y'=4], device_ids=(7,6,5,4,3,2,1,0), [{'y'}, {}]}"#,
        r#"{devices=[4,1,2]3,7,2,6,1,5,0,4 last_tile_dim_replicate}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [], unreduced=max{'x','y'}}"#,
        r#"{mesh['x'=2,'y'=4], unreduced=max}"#,
        r#"{unreduced}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{}, {}], unreduced=min{'x', 'y'}}"#,
        r#"{mesh['x'=2,'y'=4], [{}, {}], unreduced=min{'x', 'y'}}"#,
        r#"{unreduced}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced=max{'y'}}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced=max{'y'}}"#,
        r#"{devices=[2,1,4]<=[8] last_tile_dims={unreduced}}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=1], [], unreduced={'x'}}"#,
        r#"{mesh['x'=2,'y'=1], unreduced{'x'}}"#,
        r#"{unreduced}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=1], unreduced=max{'x'}}"#,
        r#"{mesh['x'=2,'y'=1], unreduced=max{'x'}}"#,
        r#"{unreduced}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [], replicated={'x', 'y'}}"#,
        r#"{mesh['x'=2,'y'=4], [], replicated={'x', 'y'}}"#,
        r#"{replicated}"#,
        2,
    ),
    (
        r#"{mesh['x'=4], [{'x':(2)2}], replicated={'x':(1)2}}"#,
        r#"{mesh['x'=4], [{'x':(2)2}], replicated={'x':(1)2}}"#,
        r#"{devices=[2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"#,
        1,
    ),
    (
        r#"{mesh['x'=8,'y'=2], [{'x':(4)2}, {'y', 'x':(1)2}], unreduced={'x':(2)2}}"#,
        r#"{mesh['x'=8,'y'=2], [{'x':(4)2}, {'y', 'x':(1)2}], unreduced={'x':(2)2}}"#,
        r#"{devices=[2,4,2]<=[4,4]T(1,0) last_tile_dims={unreduced}}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], device_ids=([2,4]T(0,1)), [{'x'}, {'y'}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}]}"#,
        r#"{devices=[2,4]<=[8]}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], device_ids=([2,2,2]T(1,2,0)), [{'x'}, {'y'}]}"#,
        r#"{mesh['x'=2,'y'=4], device_ids=([2,4]T(1,0)), [{'x'}, {'y'}]}"#,
        r#"{devices=[2,4]<=[2,4]T(1,0)}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], device_ids=([8]), [{'x'}, {'y'}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}]}"#,
        r#"{devices=[2,4]<=[8]}"#,
        2,
    ),
    (
        r#"{mesh['a'=2,'b'=2,'c'=2], device_ids=(0,4,2,6,1,5,3,7), [{'c'}, {'a'}], replicated={'b'}}"#,
        r#"{mesh['a'=2,'b'=2,'c'=2], device_ids=(0,4,2,6,1,5,3,7), [{'c'}, {'a'}], replicated={'b'}}"#,
        r#"{devices=[2,2,2]0,2,1,3,4,6,5,7 last_tile_dim_replicate}"#,
        2,
    ),
    (
        r#"{mesh[], replicated}"#,
        r#"{mesh[], replicated}"#,
        r#"{replicated}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}], metadata={{op_name="a"},{op_name="b"}}}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}], metadata={{op_name="a"}, {op_name="b"}}}"#,
        r#"{devices=[2,4]<=[8]}"#,
        2,
    ),
    (
        r#"{mesh["x"=2,"y"=4], [{"x"}, {"y"}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'x'}, {'y'}]}"#,
        r#"{devices=[2,4]<=[8]}"#,
        2,
    ),
    (
        r#"{mesh['x'=2,'y'=4], [{'y':(2)2}, {'x', 'y':(1)2}]}"#,
        r#"{mesh['x'=2,'y'=4], [{'y':(2)2}, {'x', 'y':(1)2}]}"#,
        r#"{devices=[2,4]<=[4,2]T(1,0)}"#,
        2,
    ),
];

#[test]
fn named_shardings_print_as_jaxlib_and_convert_as_xla() {
    for &(input, printed, v2, rank) in NAMED_FROM_XLA {
        let s = parse_sharding(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(sharding_to_string(&s), printed, "printing {input}");
        let again = parse_sharding(printed).unwrap_or_else(|e| panic!("{printed}: {e}"));
        assert_eq!(again, s, "{printed} reads back as another sharding");
        let tiled = s.as_named().expect("named").to_tiled(Some(rank)).unwrap();
        let want = parse_sharding(v2).unwrap();
        assert!(
            tiled.same_as(&want),
            "{input}: tiled equivalent {} but XLA says {v2}",
            sharding_to_string(&tiled)
        );
    }
}

#[test]
fn named_sharding_spellings_xla_also_reads() {
    // The older spelling of XLA's sources: bare axis names, `maximal_mesh`.
    for (input, printed) in [
        (
            "{mesh[x=2,y=4], [{x}, {y:(1)2}], replicated={y:(2)2}}",
            "{mesh['x'=2,'y'=4], [{'x'}, {'y':(1)2}], replicated={'y':(2)2}}",
        ),
        (
            "{maximal_mesh[device_id=1]}",
            "{single_device[device_id=1]}",
        ),
        // An axis named by its index, as XLA's parser also allows.
        ("{mesh['x'=2], [{'0'}]}", "{mesh['x'=2], [{'x'}]}"),
        // `unreduced=sum` is the default reduction; nothing unreduced leaves none to do.
        (
            "{mesh['x'=2,'y'=4], unreduced=sum}",
            "{mesh['x'=2,'y'=4], unreduced}",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced=max{}}",
            "{mesh['x'=2,'y'=4], [{'x'}, {}]}",
        ),
        // A tuple of a named and a tiled sharding.
        (
            "{{mesh['x'=2], [{'x'}]}, {replicated}}",
            "{{mesh['x'=2], [{'x'}]}, {replicated}}",
        ),
        // Names that need escapes are written with them (XLA writes them raw, unreadably).
        (
            "{mesh[\"a'b\"=2], [{\"a'b\"}]}",
            "{mesh['a\\'b'=2], [{'a\\'b'}]}",
        ),
    ] {
        let s = parse_sharding(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(sharding_to_string(&s), printed, "printing {input}");
        assert_eq!(parse_sharding(printed).unwrap(), s, "{printed}");
    }
    // XLA prints `manual` here too, which reads back as manual over 'y' as well; we print the
    // list so that the text reads back as the same sharding (jaxlib 0.12 reads both).
    let s = parse_sharding("{mesh['x'=2,'y'=1], [], manual={'x'}}").unwrap();
    assert_eq!(
        sharding_to_string(&s),
        "{mesh['x'=2,'y'=1], [], manual={'x'}}"
    );
    assert!(s.as_named().unwrap().is_manual());
}

#[test]
fn malformed_named_shardings_are_errors() {
    for (input, want) in [
        (
            "{mesh['x'=2,'y'=4], [{'x'}, {'y'}], shard_as 1}",
            "expected '='",
        ),
        ("{mesh['x'=2,'y'=4], [{'x'}, {'x'}]}", "overlap"),
        (
            "{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced={'x'}}",
            "overlap",
        ),
        ("{mesh['x'=8], [{'x':(1)2}, {'x':(1)4}]}", "overlap"),
        (
            "{mesh['x'=2,'y'=4], [], replicated={'y', 'x'}}",
            "must be sorted",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'y':(1)2, 'y':(2)2}, {}]}",
            "written as one",
        ),
        (
            "{mesh['x'=2,'y'=4], [], unreduced={'y':(1)2, 'y':(2)2}}",
            "written as one",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'z'}, {}]}",
            "'z' is not an axis of the mesh",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'y':(1)3}, {}]}",
            "must divide the axis size",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'y':(1)4}, {}]}",
            "smaller than its axis",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'y':(0)2}, {}]}",
            "pre-size of at least 1",
        ),
        (
            "{mesh['x'=2,'y'=4], device_ids=(0,1,2,3,4,5,6,7), [{'x'}, {'y'}]}",
            "plain order",
        ),
        (
            "{mesh['x'=2,'y'=4], device_ids=(0,1,2,3,4,5,6,9), [{'x'}, {'y'}]}",
            "permutation",
        ),
        (
            "{mesh['x'=2,'y'=4], device_ids=(0,1,2), [{'x'}, {'y'}]}",
            "expected 8 device_ids",
        ),
        (
            "{mesh['x'=2,'y'=4], device_ids=([4]), [{'x'}, {'y'}]}",
            "does not hold",
        ),
        (
            "{mesh['x'=2,'y'=4], device_ids=([4,2]), [{'x'}, {'y'}]}",
            "'T('",
        ),
        ("{mesh['x'=2,'x'=4], [{'x'}]}", "two axes named 'x'"),
        ("{mesh['x'=0], [{'x'}]}", "must be positive"),
        (
            "{mesh['x'=2,'y'=4], unreduced={'x'}}",
            "expected sum, max or min",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'x'}, {}], unreduced=avg{'y'}}",
            "expected sum, max or min",
        ),
        (
            "{mesh['x'=2,'y'=4], [{'x'}], replicated={'y'}, replicated={'y'}}",
            "repeated",
        ),
        ("{mesh['x'=2], [{?, 'x'}]}", "after '?'"),
        ("{mesh['x'=2], [{'x'}], frob={'x'}}", "unexpected 'frob='"),
        ("{replicated mesh['x'=2]}", "must come first"),
        ("{single_device[device=2]}", "expected 'device_id='"),
        ("{single_device[device_id=2], [{}]}", "an attribute name"),
        ("{mesh['x'=2], [{'x'}]", "or '}' after the dimensions"),
    ] {
        match parse_sharding(input) {
            Ok(s) => panic!("{input} parsed as {}", sharding_to_string(&s)),
            Err(e) => assert!(
                e.to_string().contains(want),
                "{input}: {e} (wanted '{want}')"
            ),
        }
    }
}

#[test]
fn origin_recovery_table_prints_as_xla() {
    // No instruction of jaxlib 0.12's printing has operands, so XLA's printing and ours
    // (operand shapes) coincide byte for byte.
    let xla = xla_printed("origin_recovery_table.hlo");
    let (m, printed) = roundtrip(&xla);
    assert_eq!(printed, xla);
    let t = &m.config.origin_recovery_table;
    assert_eq!(t.len(), 4);
    assert_eq!(
        original_array_keys(t),
        [("", &[][..]), ("c2", &[]), ("q", &[]), ("r", &[1])]
    );
    let q = t.values().nth(2).unwrap();
    assert_eq!(q.replacing.shape_index, vec![0, 1]);
    let rec2 = q.module.as_ref().unwrap();
    assert_eq!(rec2.name, "rec2");
    let rec3 = rec2.config.origin_recovery_table.values().next().unwrap();
    let rec3 = rec3.module.as_ref().unwrap();
    let p = rec3.comp(rec3.entry().unwrap()).root().unwrap();
    assert_eq!(
        rec3.instr(p).metadata.as_ref().unwrap().op_name,
        "x\\y \"q\""
    );
    assert!(t.values().nth(3).unwrap().module.is_none());
}

#[test]
fn origin_recovery_table_errors() {
    for (table, want) in [
        (r#"{ {"a"} : {"b"} {"a"} : {"c"} }"#, "listed twice"),
        (r#"{ {"a"} {"b"} }"#, "expected ':'"),
        (
            r#"{ {"a"} : {"b"}, "ENTRY %e { ROOT %p = f32[2] frob(0) }" }"#,
            "in the recovery module, 1:",
        ),
        (r#"{ {"a" {x}} : {"b"} }"#, "expected an integer"),
        (r#"{ {"a"} : {"b"}, 3 }"#, "the recovery module's HLO text"),
    ] {
        let text = format!(
            "HloModule m, origin_recovery_table={table}\nENTRY e {{\n  ROOT p = f32[] parameter(0)\n}}\n"
        );
        let e = err(&text);
        assert!(
            e.to_string().contains(want),
            "{table}: {e} (wanted '{want}')"
        );
    }
    // An empty table is no table.
    let (m, printed) = roundtrip(
        "HloModule m, origin_recovery_table={}\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n",
    );
    assert!(m.config.origin_recovery_table.is_empty());
    assert!(!printed.contains("origin_recovery_table"));
}

/// Errors in a named sharding or in the origin recovery table of a module name the line and
/// column of the bad token.
#[test]
fn named_sharding_and_recovery_table_errors_have_positions() {
    let text = "HloModule m, num_partitions=8\n\nENTRY e {\n  \
        p0 = f32[8,4] parameter(0), sharding={mesh['x'=2,'y'=4], [{'x'}, {'z'}]}\n  \
        ROOT n = f32[8,4] negate(p0)\n}\n";
    let e = err(text);
    assert_eq!((e.line, e.column), (4, 69), "{e}");
    assert!(
        e.to_string().contains("'z' is not an axis of the mesh"),
        "{e}"
    );
    let text = "HloModule m, num_partitions=8\n\nENTRY e {\n  \
        p0 = f32[8,4] parameter(0), sharding={mesh['x'=2,'y'=4], [{'x'}, {'y'}], bogus}\n  \
        ROOT n = f32[8,4] negate(p0)\n}\n";
    let e = err(text);
    assert_eq!(e.line, 4, "{e}");
    let text =
        "HloModule m, origin_recovery_table={\n  {\"a\"} : {\"b\"}\n  {\"a\"} : {\"c\"}\n}\n\
        ENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n";
    let e = err(text);
    assert_eq!(e.line, 3, "{e}");
    assert!(e.to_string().contains("listed twice"), "{e}");
}

/// Cut and corrupted copies of the named-sharding and recovery-table fixtures give errors (or
/// parse), never panics.
#[test]
fn never_panics_on_damaged_named_shardings_or_recovery_tables() {
    for name in [
        "named_shardings.hlo",
        "origin_recovery_table.hlo",
        "debug_attributes.hlo",
    ] {
        let text = &xla_printed(name);
        parse_module(text).unwrap();
        let bytes = text.as_bytes();
        for cut in (0..bytes.len()).step_by(7) {
            if text.is_char_boundary(cut) {
                let _ = parse_module(&text[..cut]);
            }
        }
        let noise = [
            b'{', b'}', b'[', b']', b',', b'=', b'\'', b'"', b':', b'?', b'(', b')', b'0', b'9',
        ];
        for s in corrupted(text, &noise, 777, 800) {
            if let Ok(m) = parse_module(&s) {
                // Whatever parses also prints and reads back.
                let printed = m.to_text();
                let again = parse_module(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
                assert_eq!(again.to_text(), printed);
            }
        }
    }
}

#[test]
fn strings_print_with_c_escapes() {
    let mut out = String::new();
    printer::write_string(&mut out, "plain");
    printer::write_string(&mut out, "a\"b'c\\d\ne\rf\tg\u{7f}h\u{1}é€");
    printer::write_string(&mut out, "é");
    printer::write_string(&mut out, "");
    assert_eq!(
        out,
        r#""plain""a\"b\'c\\d\ne\rf\tg\177h\001\303\251\342\202\254""\303\251""""#
    );
}

#[test]
fn debug_attributes_print_as_xla() {
    use crate::module::{DebugAttributes, DebugLogMode, OriginalArray};
    let xla = xla_printed("debug_attributes.hlo");
    let (m, printed) = roundtrip(&xla);
    assert_eq!(printed, xla);
    let t = &m.config.debug_attributes;
    assert_eq!(
        original_array_keys(t),
        [("", &[][..]), ("p", &[]), ("p", &[1]), ("zeta", &[0, 2])]
    );
    let p = OriginalArray {
        instruction_name: "p".into(),
        shape_index: vec![],
    };
    assert_eq!(
        t[&p],
        [
            DebugAttributes {
                log_mode: DebugLogMode::Default,
                callback_id: 5,
                op_id: 7,
                partitioned: true
            },
            DebugAttributes {
                log_mode: DebugLogMode::FusionDebugger,
                callback_id: -3,
                op_id: 0,
                partitioned: false
            }
        ]
    );
    let rec = m.config.origin_recovery_table.values().next().unwrap();
    let inner = &rec.module.as_ref().unwrap().config.debug_attributes;
    assert_eq!(inner.values().next().unwrap()[0].callback_id, 9);
}

#[test]
fn debug_attributes_spellings_xla_reads() {
    // Any order of the attributes, one set without parentheses, `{"a" {}}` for `{"a"}`, an
    // empty list (the entry is dropped, as XLA drops it), an empty table (no table).
    let text = "HloModule m, debug_attributes={{\"a\" {}}:{op_id=1,callback_id=2}, \
                {\"b\"}:(), {\"c\" {0}}:({partitioned=false},{log_mode=default})}\n\
                ENTRY e {\n  ROOT p = (f32[], f32[]) parameter(0)\n}\n";
    let (m, printed) = roundtrip(text);
    assert_eq!(m.config.debug_attributes.len(), 2);
    assert!(
        printed.contains(
            ",\ndebug_attributes={\n  {\"a\"}:({callback_id=2,op_id=1}),\n  \
             {\"c\" {0}}:({},{log_mode=default})\n}\n\n"
        ),
        "{printed}"
    );
    let (m, printed) = roundtrip(
        "HloModule m, debug_attributes={ }\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n",
    );
    assert!(m.config.debug_attributes.is_empty());
    assert!(!printed.contains("debug_attributes"), "{printed}");
}

#[test]
fn malformed_debug_attributes_are_errors_with_places() {
    let cases = [
        // (attribute value, line, column, part of the message)
        (
            "{{\"a\"}:({log_mode=none})}",
            1,
            49,
            "default or fusion_debugger",
        ),
        (
            "{{\"a\"}:({log_mode=no_fusion})}",
            1,
            49,
            "default or fusion_debugger",
        ),
        (
            "{{\"a\"}:({operands_sharding=\"x\"})}",
            1,
            40,
            "unknown debug attribute",
        ),
        ("{{\"a\"}:({callback_id=1.5})}", 1, 53, "expected"),
        (
            "{{\"a\"}:({callback_id=1,callback_id=2})}",
            1,
            54,
            "given twice",
        ),
        ("{{\"a\"}:({partitioned=1})}", 1, 52, "true or false"),
        ("{{\"a\"}:({callback_id=1}),}", 1, 56, "original value"),
        (
            "{{\"a\"}:({op_id=1}), {\"a\"}:({op_id=2})}",
            1,
            51,
            "listed twice",
        ),
        ("{{\"a\"}({op_id=1})}", 1, 37, "':'"),
        ("{{\"a\"}:({op_id=1}}", 1, 48, "')'"),
        ("{{\"a\"}:({op_id=1})", 2, 1, "'}'"),
    ];
    for (value, line, col, want) in cases {
        let text = format!(
            "HloModule m, debug_attributes={value}\nENTRY e {{\n  ROOT p = f32[] parameter(0)\n}}\n"
        );
        let e = err(&text);
        assert_eq!((e.line, e.column), (line, col), "{value}: {e}");
        assert!(
            e.to_string().contains(want),
            "{value}: {e} (wanted '{want}')"
        );
    }
}

/// The instruction names of a printed computation, in order (ROOT and `%` dropped).
fn names_of(printed: &str, computation: &str) -> Vec<String> {
    let start = printed
        .lines()
        .position(|l| l.contains(&format!("%{computation} (")))
        .unwrap_or_else(|| panic!("no computation {computation} in\n{printed}"));
    printed
        .lines()
        .skip(start + 1)
        .take_while(|l| *l != "}")
        .map(|l| {
            let l = l.trim().trim_start_matches("ROOT ").trim_start_matches('%');
            l[..l.find(" = ").unwrap()].to_string()
        })
        .collect()
}

/// Dumps' `%x#N` shorthand, read as jaxlib 0.12's `hlo_module_from_text` reads it (each case
/// and its expected names and order were checked against jaxlib with
/// scripts/oracles/check_dump_shorthand.py): one get-tuple-element per (tuple, index), named
/// `<text name>_<N>`, made right before its first user, no sharding or metadata; a text name
/// the new instruction took is renamed with `.N`.
#[test]
fn tuple_element_shorthand_reads_as_xla() {
    let head = "HloModule m\n\nENTRY %e (p: (f32[2], (f32[3], s32[]))) -> f32[2] {\n  \
                %p = (f32[2]{0}, (f32[3]{0}, s32[])) parameter(0), \
                sharding={{maximal device=0}, {maximal device=0}, {maximal device=1}}, \
                metadata={op_name=\"p\"}\n";
    let case = |body: &str| roundtrip(&format!("{head}{body}}}\n")).1;

    // Shared by every use, placed before the first one; shapes may be written; `%p #0`, `p#0`
    // and `%p#00` are the same element.
    let printed =
        case("  %a = f32[2]{0} add(%p#0, f32[2]{0} %p #00)\n  ROOT %b = f32[2]{0} negate(p#0)\n");
    assert_eq!(names_of(&printed, "e"), ["p", "p_0", "a", "b"]);
    assert_eq!(
        line_of(&printed, "p_0"),
        "%p_0 = f32[2]{0} get-tuple-element((f32[2]{0}, (f32[3]{0}, s32[])) %p), index=0"
    );

    // Nested: `%p#1#0` is element 0 of a get-tuple-element `p_1`, named `p_1_0`.
    let printed = case(
        "  %a = f32[3]{0} negate(%p#1#0)\n  %t = (f32[3]{0}, s32[]) tuple(%a, %p#1#1)\n  \
         ROOT %b = f32[2]{0} negate(%p#0)\n",
    );
    assert_eq!(
        names_of(&printed, "e"),
        ["p", "p_1", "p_1_0", "a", "p_1_1", "t", "p_0", "b"]
    );

    // A text instruction named like the new one, before or after it, is renamed; the text
    // keeps referring to it by its text name.
    let printed = case("  %p_0 = f32[2]{0} negate(%p#0)\n  ROOT %b = f32[2]{0} add(%p#0, %p_0)\n");
    assert_eq!(names_of(&printed, "e"), ["p", "p_0", "p_0.1", "b"]);
    assert!(line_of(&printed, "b").contains("add(f32[2]{0} %p_0, f32[2]{0} %p_0.1)"));
    let printed = case(
        "  %a = f32[2]{0} negate(%p#0)\n  %p_0 = f32[2]{0} negate(%a)\n  \
         ROOT %b = f32[2]{0} add(%p_0, %a)\n",
    );
    assert_eq!(names_of(&printed, "e"), ["p", "p_0", "a", "p_0.1", "b"]);

    // The name comes from the text name of the operand, then is made unique in the module.
    let (_, printed) = roundtrip(
        "HloModule m\n\n%f (p: (f32[2], f32[3])) -> f32[2] {\n  %p = (f32[2]{0}, f32[3]{0}) parameter(0)\n  \
         ROOT %a = f32[2]{0} negate(%p#0)\n}\n\nENTRY %e (p: (f32[2], f32[3])) -> f32[2] {\n  \
         %p = (f32[2]{0}, f32[3]{0}) parameter(0)\n  %p_0 = f32[2]{0} negate(%p#0)\n  \
         %c = f32[2]{0} call(%p), to_apply=%f\n  ROOT %b = f32[2]{0} add(%p_0, %c)\n}\n",
    );
    assert_eq!(names_of(&printed, "f"), ["p", "p_0", "a"]);
    assert_eq!(names_of(&printed, "e"), ["p.1", "p_0.1", "p_0.2", "c", "b"]);

    // The tuple's sharding and metadata stay on the tuple.
    let m = parse_module(&format!("{head}  ROOT %b = f32[2]{{0}} negate(%p#0)\n}}\n")).unwrap();
    let root = m.comp(m.entry().unwrap()).root().unwrap();
    let gte = m.instr(m.instr(root).operands[0]);
    assert_eq!(gte.opcode, Opcode::GetTupleElement);
    assert!(gte.sharding.is_none() && gte.metadata.is_none());
}

#[test]
fn tuple_element_shorthand_errors() {
    let head = "HloModule m\n\nENTRY %e (p: (f32[2], f32[3])) -> f32[2] {\n  \
                %p = (f32[2]{0}, f32[3]{0}) parameter(0)\n";
    let e = |body: &str| err(&format!("{head}{body}}}\n")).to_string();
    assert_eq!(
        e("  ROOT %b = f32[2]{0} negate(%p#2)\n"),
        "5:33: tuple index 2 is out of range for 'p', a tuple of 2 elements"
    );
    assert_eq!(
        e("  ROOT %b = f32[2]{0} negate(%p#-1)\n"),
        "5:33: tuple index -1 is out of range for 'p', a tuple of 2 elements"
    );
    assert_eq!(
        e("  %a = f32[2]{0} negate(%p#0)\n  ROOT %b = f32[2]{0} negate(%a#0)\n"),
        "6:30: 'a#0' takes an element of a tuple, but 'a' has shape f32[2]{0}"
    );
    assert!(e("  ROOT %b = f32[2]{0} negate(f32[3]{0} %p#0)\n")
        .contains("declared operand shape f32[3]{0} is not compatible with the shape f32[2]{0}"));
    assert!(e("  ROOT %b = f32[2]{0} negate(%p#)\n").contains("a tuple index after '#'"));
    // The new instruction is not a text name (as in XLA).
    assert!(
        e("  %a = f32[2]{0} negate(%p#0)\n  ROOT %b = f32[2]{0} add(%p_0, %a)\n")
            .contains("instruction 'p_0' is not defined")
    );
}

/// A module from a proto or the builder may leave out what XLA always prints: a collective's
/// replica groups, a broadcast's dimensions, an outfeed's shape. The printer writes the value the
/// parser would give, so printing what it parses back changes nothing.
#[test]
fn absent_always_printed_attributes_print_their_parsed_defaults() {
    use crate::instruction::Instruction;
    use crate::shape::Shape;
    use crate::types::ElementType::F32;
    let mut m = Module::new("absent");
    let add = m.add_computation("add").unwrap();
    let mut x = Instruction::new("x", Opcode::Parameter, Shape::scalar(F32));
    x.attrs.parameter_number = 0;
    let x = m.add_instruction(add, x).unwrap();
    let mut y = Instruction::new("y", Opcode::Parameter, Shape::scalar(F32));
    y.attrs.parameter_number = 1;
    let y = m.add_instruction(add, y).unwrap();
    let sum = Instruction::new("sum", Opcode::Add, Shape::scalar(F32)).with_operands(&[x, y]);
    m.add_instruction(add, sum).unwrap();
    let e = m.add_computation("main").unwrap();
    let mut p = Instruction::new("p", Opcode::Parameter, Shape::scalar(F32));
    p.attrs.parameter_number = 0;
    let p = m.add_instruction(e, p).unwrap();
    let ar = Instruction::new("ar", Opcode::AllReduce, Shape::scalar(F32))
        .with_operands(&[p])
        .with_called(&[add]);
    let ar = m.add_instruction(e, ar).unwrap();
    let b = Instruction::new("b", Opcode::Broadcast, Shape::array(F32, &[3])).with_operands(&[ar]);
    let b = m.add_instruction(e, b).unwrap();
    let tok = m
        .add_instruction(e, Instruction::new("tok", Opcode::AfterAll, Shape::Token))
        .unwrap();
    let of = Instruction::new("of", Opcode::Outfeed, Shape::Token).with_operands(&[b, tok]);
    let of = m.add_instruction(e, of).unwrap();
    let root = Instruction::new(
        "root",
        Opcode::Tuple,
        Shape::Tuple(vec![Shape::array(F32, &[3]), Shape::Token]),
    )
    .with_operands(&[b, of]);
    let root = m.add_instruction(e, root).unwrap();
    m.set_root(e, root);
    m.set_entry(e);

    let printed = m.to_text();
    assert!(
        line_of(&printed, "ar").ends_with("replica_groups={}, to_apply=%add"),
        "{printed}"
    );
    assert!(
        line_of(&printed, "b").ends_with("dimensions={}"),
        "{printed}"
    );
    assert!(
        line_of(&printed, "of").contains("outfeed_shape=f32[3]"),
        "{printed}"
    );
    let (_, again) = roundtrip(&printed);
    assert_eq!(again, printed);
}

/// The stored order may put a user before its operand (a proto read as given,
/// `set_instruction_order`); the text still defines every name before its use, moving only
/// what has to move (proto fuzz finding `operand-after-its-user`).
#[test]
fn text_defines_every_operand_before_its_user_whatever_the_stored_order() {
    let text = "HloModule m\n\nENTRY %e (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n  %c = f32[] constant(1)\n  %n = f32[] negate(f32[] %p)\n  ROOT %a = f32[] add(f32[] %n, f32[] %c)\n}\n\n";
    let mut m = parse_module(text).unwrap();
    assert_eq!(m.to_text(), text);
    let e = m.entry().unwrap();
    let id = |m: &Module, n: &str| m.find_instruction(n).unwrap();
    let (p, c, n, a) = (id(&m, "p"), id(&m, "c"), id(&m, "n"), id(&m, "a"));
    m.set_instruction_order(e, vec![a, c, n, p]);
    let printed = m.to_text();
    let names: Vec<&str> = printed
        .lines()
        .filter_map(|l| l.trim().trim_start_matches("ROOT ").strip_prefix('%'))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(names, vec!["p", "n", "c", "a"], "{printed}");
    let (_, again) = roundtrip(&printed);
    assert_eq!(again, printed);
}

/// An iota of devices is spelled in its normal form: XLA's parser refuses `<=[2,4]`, prints
/// `<=[2,4]T(0,1)` and `<=[1,8]T(1,0)` as `<=[8]` and keeps `<=[2,2,2]T(0,2,1)` (jaxlib 0.12);
/// so do we, whether the value came from text, a proto or the builder (proto fuzz findings
/// `sharding-iota-without-a-transpose`, `replica-groups-iota-without-a-transpose`).
#[test]
fn an_iota_without_a_transpose_prints_its_device_count() {
    for spelled in ["[4,2]<=[2,4]T(0,1)", "[4,2]<=[1,8]T(1,0)"] {
        assert_eq!(
            parse_replica_groups(spelled).unwrap(),
            ReplicaGroups::iota(4, 2)
        );
    }
    let kept = parse_replica_groups("[4,2]<=[2,2,2]T(0,2,1)").unwrap();
    assert_eq!(
        kept,
        ReplicaGroups::iota_transposed(4, 2, &[2, 2, 2], &[0, 2, 1])
    );
    for (reshape, want) in [(vec![2, 4], "[4,2]<=[8]"), (vec![], "[4,2]<=[8]")] {
        let built = ReplicaGroups::Iota {
            num_groups: 4,
            group_size: 2,
            reshape_dims: reshape,
            transpose_perm: vec![],
        };
        let mut out = String::new();
        super::printer::write_replica_groups(&mut out, &built);
        assert_eq!(out, want);
        assert_eq!(parse_replica_groups(&out).unwrap().groups(), built.groups());
    }
    let e = parse_replica_groups("[4,2]<=[2,4]")
        .unwrap_err()
        .to_string();
    assert!(e.contains("'T('"), "{e}");
    let text = "HloModule m\n\nENTRY %e (p: f32[64]) -> f32[64] {\n  ROOT %p = f32[64]{0} parameter(0), sharding={devices=[4,2]<=[2,4]T(0,1) last_tile_dim_replicate}\n}\n\n";
    let (m, printed) = roundtrip(text);
    assert!(
        printed.contains("sharding={devices=[4,2]<=[8] last_tile_dim_replicate}"),
        "{printed}"
    );
    let p = m.find_instruction("p").unwrap();
    let mut sharding = m.instr(p).sharding.clone().unwrap();
    if let ShardingKind::Tiled(t) = &mut sharding.kind {
        t.tile_assignment = crate::sharding::TileAssignment::Iota {
            dims: [4, 2].into_iter().collect(),
            reshape_dims: [2, 4].into_iter().collect(),
            transpose_perm: Default::default(),
        };
    }
    let mut out = String::new();
    super::printer::write_sharding(&mut out, &sharding);
    assert_eq!(out, "{devices=[4,2]<=[8] last_tile_dim_replicate}");
}
