//! The driver as a user runs it: exit codes, messages, and the text it prints.

use std::process::Output;

mod support;

use support::{command, output_with_stdin, scratch, stderr, stdout, testdata};

/// Runs `tessera ARGS` with `stdin` (if any) on its standard input.
fn tessera(args: &[&str], stdin: Option<&str>) -> Output {
    output_with_stdin(command().args(args), stdin.unwrap_or_default().as_bytes())
}

fn example() -> String {
    testdata("examples/mlp_train_step.hlo")
}

#[test]
fn fmt_is_a_fixed_point_and_short_form_parses() {
    let first = tessera(&["fmt", &example()], None);
    assert!(first.status.success(), "{}", stderr(&first));
    let text = stdout(&first);
    assert!(text.starts_with("HloModule jit_train_step"));
    let again = tessera(&["fmt", "-"], Some(&text));
    assert_eq!(
        stdout(&again),
        text,
        "fmt of fmt's output must be identical"
    );
    let short = tessera(&["fmt", "--short", &example()], None);
    assert!(!stdout(&short).contains('%'), "short form has no % sigils");
    let from_short = tessera(&["fmt", "-"], Some(&stdout(&short)));
    assert_eq!(
        stdout(&from_short),
        text,
        "short form parses back to the same module"
    );
}

#[test]
fn verify_accepts_the_example_and_names_the_bad_instruction() {
    let ok = tessera(&["verify", &example()], None);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let bad = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[3] add(p, p)\n}\n";
    let out = tessera(&["verify", "-"], Some(bad));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("%a") && err.contains("f32[3]") && err.contains("f32[2]"),
        "{err}"
    );
}

#[test]
fn malformed_text_is_an_error_with_a_position_not_a_panic() {
    for text in [
        "HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}\n",
        "",
        "}{",
        "HloModule",
    ] {
        let out = tessera(&["fmt", "-"], Some(text));
        assert_eq!(
            out.status.code(),
            Some(1),
            "input {text:?}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).starts_with("error: <stdin>:"),
            "{}",
            stderr(&out)
        );
    }
    let out = tessera(
        &["fmt", "-"],
        Some("HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}\n"),
    );
    assert!(
        stderr(&out).contains("<stdin>:3:"),
        "the error names line 3: {}",
        stderr(&out)
    );
}

#[test]
fn proto_round_trip_through_the_driver() {
    let dir = scratch("cli");
    let pb = dir.join("m.pb");
    let to = tessera(&["to-proto", &example(), "-o", pb.to_str().unwrap()], None);
    assert!(to.status.success(), "{}", stderr(&to));
    let back = tessera(&["from-proto", pb.to_str().unwrap()], None);
    assert!(back.status.success(), "{}", stderr(&back));
    let direct = tessera(&["fmt", &example()], None);
    assert_eq!(stdout(&back), stdout(&direct));
    let garbage = dir.join("bad.pb");
    std::fs::write(&garbage, b"\xff\xff\xff not a proto").unwrap();
    let out = tessera(&["from-proto", garbage.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn summary_counts_the_example() {
    let out = tessera(&["summary", &example()], None);
    assert!(out.status.success());
    let s = stdout(&out);
    assert!(
        s.contains("module jit_train_step: 7 computations, 82 instructions"),
        "{s}"
    );
    assert!(s.contains("entry main.7 with 6 parameters"), "{s}");
}

/// A minimal .npy (v1.0) of one little-endian int32 scalar.
fn npy_scalar_i32(v: i32) -> Vec<u8> {
    let mut header = "{'descr': '<i4', 'fortran_order': False, 'shape': (), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&v.to_le_bytes());
    out
}

/// A while loop runs on the PJRT CPU plugin with the right condition and body (the proto lists
/// them as `[body, condition]`, the IR as `[condition, body]`).
#[test]
fn run_executes_a_while_loop_on_pjrt() {
    let dir = scratch("cli-while");
    let inputs = dir.join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    let module = "HloModule w\n\ncond {\n  p = s32[] parameter(0)\n  c = s32[] constant(10)\n  ROOT lt = pred[] compare(p, c), direction=LT\n}\n\nbody {\n  p = s32[] parameter(0)\n  three = s32[] constant(3)\n  ROOT n = s32[] add(p, three)\n}\n\nENTRY e {\n  i = s32[] parameter(0)\n  ROOT w = s32[] while(i), condition=cond, body=body\n}\n";
    let file = dir.join("w.hlo");
    std::fs::write(&file, module).unwrap();
    std::fs::write(inputs.join("arg0.npy"), npy_scalar_i32(1)).unwrap();
    let out = tessera(
        &[
            "run",
            file.to_str().unwrap(),
            "--inputs",
            inputs.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // 1 -> 4 -> 7 -> 10 stops: the loop ran its body three times.
    assert!(
        stdout(&out).contains("out0: s32[] [10]"),
        "{}",
        stdout(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn remat_warns_on_stderr_when_the_limit_cannot_be_met() {
    let path = example();
    let out = tessera(
        &[
            "opt",
            &path,
            "--passes",
            "schedule,rematerialization",
            "--pass-option",
            "remat.memory_limit=1K",
            "-o",
            "/dev/null",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("can't reduce memory use below 1024 bytes") && err.contains("main."),
        "expected a warning naming the computation, got: {err}"
    );
}
