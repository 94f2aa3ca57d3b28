//! The robustness contract, end to end: the `tessera` binary on every hostile input of
//! `testdata/robustness` (and of `../shared/robustness` when it is beside the repository), on
//! generated protos and bytes, and with hostile command lines. Each run must exit 0 (correct
//! input) or 1 with a message that names a place (a `line:col`, an instruction, a
//! computation, the module or the flag), within 2 s and under a 1 GB address-space limit.
//! A pass output must verify again.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use prost::Message;
use tessera_hlo::proto::{module_to_proto, HloModuleProto};

mod support;

use support::{output_with_stdin, repo, scratch};

const TIME_LIMIT: Duration = Duration::from_secs(2);
/// `ulimit -v` in KiB: 1 GiB of address space.
const MEMORY_LIMIT_KIB: u64 = 1 << 20;

/// Runs `tessera ARGS` under the memory limit, with `stdin` if given.
fn tessera(args: &[&str], stdin: Option<&[u8]>) -> (Output, Duration) {
    let start = Instant::now();
    let out = output_with_stdin(
        Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {MEMORY_LIMIT_KIB}; exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_tessera"))
            .args(args),
        stdin.unwrap_or_default(),
    );
    (out, start.elapsed())
}

/// A place in a message: `line:col`, a byte offset, a proto field path, an instruction
/// (`%x`), or a named computation, module or flag.
fn names_a_place(stderr: &str) -> bool {
    let line_col = stderr.split(':').collect::<Vec<_>>().windows(2).any(|w| {
        !w[0].is_empty()
            && w[0].bytes().rev().take_while(u8::is_ascii_digit).count() > 0
            && w[1].bytes().take_while(u8::is_ascii_digit).count() > 0
    });
    // `byte 52` (a byte offset), `HloModuleProto.computations` (a proto field path).
    let byte = stderr
        .match_indices("byte ")
        .any(|(i, m)| stderr[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()));
    line_col
        || byte
        || stderr.contains("Proto.")
        || stderr.contains('%')
        || [
            "computation `",
            "module `",
            "--devices",
            "--num-partitions",
            "--pass-option",
            "--passes",
            "instruction",
        ]
        .iter()
        .any(|p| stderr.contains(p))
}

/// Checks the contract for one run; `want` is the expected exit code. Returns stdout.
fn check(args: &[&str], stdin: Option<&[u8]>, want: i32) -> String {
    let (out, took) = tessera(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert_eq!(
        code,
        Some(want),
        "tessera {args:?}: exit {code:?}, stderr:\n{stderr}"
    );
    assert!(took < TIME_LIMIT, "tessera {args:?} took {took:?}");
    if want == 1 {
        assert!(
            stderr.starts_with("error: ") && names_a_place(&stderr),
            "tessera {args:?}: the message names no place:\n{stderr}"
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every text command on `file`; each exits `want`.
fn check_text_commands(file: &str, want: i32) {
    let tmp = std::env::temp_dir().join(format!("tessera-robust-{}.pb", std::process::id()));
    let tmp = tmp.to_str().unwrap();
    for args in [
        vec!["verify", file],
        vec!["fmt", file],
        vec!["stats", file],
        vec!["summary", file],
        vec!["memory", file],
        vec!["to-proto", file, "-o", tmp],
        vec!["opt", file, "--passes", "dce"],
        vec!["opt", file, "--passes", "sharding-propagation"],
    ] {
        let out = check(&args, None, want);
        // A pass output verifies again.
        if want == 0 && args[0] == "opt" {
            check(&["verify", "-"], Some(out.as_bytes()), 0);
        }
    }
    let _ = std::fs::remove_file(tmp);
}

/// `from-proto` and `run` on proto bytes; both exit `want`.
fn check_proto_commands(name: &str, bytes: &[u8], want: i32) {
    let path = scratch("robust-pb").join(format!("{name}.pb"));
    std::fs::write(&path, bytes).unwrap();
    let p = path.to_str().unwrap();
    check(&["from-proto", p], None, want);
    if want == 1 {
        // Refused before any PJRT client is created, so within the limits too.
        check(&["run", p], None, want);
    }
    std::fs::remove_file(&path).unwrap();
}

fn expected_exit(file: &Path) -> i32 {
    // The only correct inputs among them: the propagation case (its output must verify).
    let name = file.file_name().unwrap().to_string_lossy();
    if name.contains("propagation-scalar") || name.contains("sp_rank0_tile") {
        0
    } else {
        1
    }
}

#[test]
fn every_stored_reproducer_is_handled_or_refused_with_a_place() {
    let mut dirs = vec![repo().join("testdata/robustness")];
    let shared = repo().join("../shared/robustness");
    if shared.is_dir() {
        dirs.push(shared);
    }
    let mut n = 0;
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            // Probe 3's reproducers (`r3_*`) are mostly valid modules that break one command
            // with one flag; each is checked with its own command and expectation by
            // tests/probe3.rs (copies in testdata/probe3) and tests/compare_cli.rs (the
            // `r3_verify_*` ones), not by this every-command refusal.
            if f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("r3_"))
            {
                continue;
            }
            let s = f.to_str().unwrap();
            match f.extension().and_then(|e| e.to_str()) {
                Some("hlo") => check_text_commands(s, expected_exit(&f)),
                Some("pb") => {
                    // proto_bogus/neg/param_huge were always refused; all are refused now.
                    check_proto_commands(
                        f.file_stem().unwrap().to_str().unwrap(),
                        &std::fs::read(&f).unwrap(),
                        1,
                    );
                }
                _ => continue,
            }
            n += 1;
        }
    }
    assert!(n >= 10, "only {n} reproducers found");
}

#[test]
fn non_utf8_text_is_refused_with_its_line_column_and_byte() {
    let bytes = b"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\xfe\n}\n";
    for cmd in ["verify", "fmt", "stats", "summary", "memory", "to-proto"] {
        let mut args = vec![cmd, "-"];
        if cmd == "to-proto" {
            args.extend(["-o", "/dev/null"]);
        }
        let (out, _) = tessera(&args, Some(bytes));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(
            err.contains("<stdin>:3:31: byte 52 (0xfe) is not UTF-8"),
            "{cmd}: {err}"
        );
    }
    let (out, _) = tessera(&["opt", "-", "--passes", "dce"], Some(bytes));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("<stdin>:3:31: byte 52"), "opt: {err}");
}

/// A valid module with a call and a reduce, as a proto to corrupt field by field.
fn proto_base() -> HloModuleProto {
    let text = "HloModule base\n\
        add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\
        f {\n  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)\n}\n\
        ENTRY main {\n  p = f32[4] parameter(0)\n  c = f32[4] call(p), to_apply=f\n  \
        z = f32[] constant(0)\n  ROOT r = f32[] reduce(c, z), dimensions={0}, to_apply=add\n}\n";
    module_to_proto(&tessera_hlo::text::parse_module(text).unwrap())
}

fn instr<'a>(
    p: &'a mut HloModuleProto,
    comp: &str,
    name: &str,
) -> &'a mut tessera_hlo::proto::messages::HloInstructionProto {
    p.computations
        .iter_mut()
        .find(|c| c.name == comp)
        .unwrap()
        .instructions
        .iter_mut()
        .find(|i| i.name == name)
        .unwrap()
}

#[test]
fn corrupt_protos_are_refused_by_from_proto_and_run() {
    let base = proto_base();
    check_proto_commands("base", &base.encode_to_vec(), 0);
    let id_of =
        |p: &HloModuleProto, name: &str| p.computations.iter().find(|c| c.name == name).unwrap().id;
    let mut cases: Vec<(&str, HloModuleProto)> = Vec::new();
    cases.push(("empty", HloModuleProto::default()));
    cases.push((
        "module-name-nul",
        HloModuleProto {
            name: "has\0nul".into(),
            ..Default::default()
        },
    ));
    let mut p = base.clone();
    instr(&mut p, "main", "c").name = "c\0d".into();
    cases.push(("instruction-name-nul", p));
    // f calls itself; or f calls main, which calls f: a cycle through the entry.
    for (case, callee) in [("self-call", "f"), ("mutual-call", "main")] {
        let mut p = base.clone();
        let callee = id_of(&p, callee);
        let n = instr(&mut p, "f", "n");
        n.opcode = "call".into();
        n.called_computation_ids = vec![callee];
        cases.push((case, p));
    }
    let mut p = base.clone();
    instr(&mut p, "main", "c").called_computation_ids.clear();
    cases.push(("call-without-callee", p));
    let mut p = base.clone();
    let add = id_of(&p, "add");
    instr(&mut p, "main", "c").called_computation_ids.push(add);
    cases.push(("call-with-two-callees", p));
    // The reduce's init value made an array (what one flipped byte did to a real model).
    let mut p = base.clone();
    let c_id = instr(&mut p, "main", "c").id;
    instr(&mut p, "main", "r").operand_ids[1] = c_id;
    cases.push(("reduce-array-init", p));
    let mut p = base.clone();
    instr(&mut p, "main", "p").parameter_number = 1 << 40;
    cases.push(("parameter-number-huge", p));
    let mut p = base.clone();
    instr(&mut p, "main", "c").called_computation_ids = vec![-7];
    cases.push(("callee-negative", p));
    for (name, p) in cases {
        check_proto_commands(name, &p.encode_to_vec(), 1);
    }
    // Not a proto at all.
    check_proto_commands("garbage", b"\xff\xff\xff\xff\x0f", 1);
}

#[test]
fn hostile_command_lines_are_refused_with_a_place() {
    let dir = repo().join("testdata/robustness");
    let ok = dir.join("propagation-scalar-one-device.hlo");
    let ok = ok.to_str().unwrap();
    // Device counts the plugin cannot create: refused before a client exists.
    for d in ["0", "100000", "4294967296"] {
        check(&["run", ok, "--devices", d], None, 1);
    }
    // Partition counts past the most devices a sharding may name (issue 39, C1): refused
    // before anything is sized by them, from the flag and from the module header alike.
    for np in ["0", "4294967296", "9223372036854775807"] {
        for cmd in ["compile", "explain"] {
            check(&[cmd, ok, "--num-partitions", np], None, 1);
        }
    }
    let huge =
        b"HloModule h, num_partitions=4294967296\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n";
    let tmp = std::env::temp_dir().join(format!("tessera-np-{}.hlo", std::process::id()));
    std::fs::write(&tmp, huge).unwrap();
    check(&["compile", tmp.to_str().unwrap()], None, 1);
    std::fs::remove_file(&tmp).unwrap();
    // Not a number at all: a usage error, exit 1 like every other error.
    let (out, _) = tessera(&["run", ok, "--devices", "many"], None);
    assert_eq!(out.status.code(), Some(1));
    let (out, _) = tessera(&["frobnicate"], None);
    assert_eq!(out.status.code(), Some(1));
    let (out, _) = tessera(&["--help"], None);
    assert_eq!(out.status.code(), Some(0));
    // A sharding over 8 devices run on 2: the instruction is named.
    let mlp = repo().join("testdata/models/mlp.before-propagation.hlo");
    let err = String::from_utf8_lossy(
        &tessera(&["run", mlp.to_str().unwrap(), "--devices", "2"], None)
            .0
            .stderr,
    )
    .into_owned();
    assert!(
        err.contains("%x.1: invalid sharding: the tile assignment should have 2 devices but has 8"),
        "{err}"
    );
    // A token output.
    let tok = b"HloModule t\nENTRY e {\n  ROOT t = token[] after-all()\n}\n";
    let tmp = std::env::temp_dir().join(format!("tessera-token-{}.hlo", std::process::id()));
    std::fs::write(&tmp, tok).unwrap();
    let out = check(&["run", tmp.to_str().unwrap()], None, 1);
    assert!(out.is_empty());
    let err = String::from_utf8_lossy(&tessera(&["run", tmp.to_str().unwrap()], None).0.stderr)
        .into_owned();
    assert!(err.contains("the entry root %t holds a token:"), "{err}");
    std::fs::remove_file(&tmp).unwrap();
    // Host transfers away from the root: the execution would wait for the host forever.
    let feed = b"HloModule f\nENTRY e (p: f32[4]) -> f32[4] {\n  p = f32[4] parameter(0)\n  tok = token[] after-all()\n  o = token[] outfeed(p, tok), outfeed_shape=f32[4]{0}\n  ROOT n = f32[4] negate(p)\n}\n";
    let tmp = std::env::temp_dir().join(format!("tessera-outfeed-{}.hlo", std::process::id()));
    std::fs::write(&tmp, feed).unwrap();
    let t = tmp.to_str().unwrap();
    for args in [vec!["run", t], vec!["compare", "--devices", "2", t, t]] {
        check(&args, None, 1);
        let err = String::from_utf8_lossy(&tessera(&args, None).0.stderr).into_owned();
        assert!(
            err.contains("%o (outfeed) transfers to or from the host"),
            "{err}"
        );
    }
    std::fs::remove_file(&tmp).unwrap();
    // Flag lists: unbalanced, nested, or of the wrong length; then one of the right length.
    for (key, value, want) in [
        ("propagate_to_parameters", "{true", 1),
        ("propagate_to_parameters", "true}", 1),
        ("propagate_to_parameters", "{{true}}", 1),
        ("propagate_to_parameters", "{}", 1),
        ("propagate_to_parameters", "{true,false}", 1),
        ("propagate_to_output", "{true}", 0),
    ] {
        let opt = format!("sharding-propagation.{key}={value}");
        let args = [
            "opt",
            ok,
            "--passes",
            "sharding-propagation",
            "--pass-option",
            &opt,
        ];
        check(&args, None, want);
    }
}
