//! `tessera opt`, `tessera stats`, `tessera passes` as a user runs them.

mod support;

use support::{command, output_with_stdin, testdata};

#[test]
fn opt_with_timing_and_dump_dir() {
    let dir = std::env::temp_dir().join(format!("tessera-cli-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = command()
        .arg("opt")
        .arg(testdata("passes/flatten-shared-while.hlo"))
        .args([
            "--passes",
            "dce,flatten-call-graph",
            "--timing",
            "--dump-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.contains("body=%body.clone"), "{stdout}");
    let rows: Vec<&str> = stderr.lines().collect();
    assert!(
        rows[0].starts_with("pass") && rows[0].contains("time (ms)"),
        "{stderr}"
    );
    assert!(rows.iter().any(|r| r.starts_with("dce ")), "{stderr}");
    assert!(
        rows.iter()
            .any(|r| r.starts_with("flatten-call-graph ") && r.contains("yes")),
        "{stderr}"
    );
    assert!(rows.last().unwrap().starts_with("total"), "{stderr}");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["0000.dce.hlo", "0001.flatten-call-graph.hlo"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("0001.flatten-call-graph.hlo")).unwrap(),
        stdout
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn opt_reads_stdin_and_writes_a_file_and_reports_errors() {
    let out_file = std::env::temp_dir().join(format!("tessera-cli-out-{}.hlo", std::process::id()));
    let input = std::fs::read_to_string(testdata("passes/tuple-simplify-gte-chain.hlo")).unwrap();
    let out = output_with_stdin(
        command()
            .args(["opt", "-", "--passes", "tuple-simplify", "-o"])
            .arg(&out_file),
        input.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    assert!(
        text.contains("ROOT %neg = f32[4]{0} negate(f32[4]{0} %p0)"),
        "{text}"
    );
    std::fs::remove_file(&out_file).unwrap();

    let out = command()
        .arg("opt")
        .arg(testdata("passes/dce-dead-chain.hlo"))
        .args(["--passes", "dce", "--pass-option", "dce.nope=1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("unknown option `nope`"), "{err}");
}

#[test]
fn stats_and_passes() {
    let out = command()
        .arg("stats")
        .arg(testdata("passes/flatten-shared-while.hlo"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("computations: 5"), "{s}");
    assert!(s.contains("entry parameters: 1 (16 B)"), "{s}");
    assert!(s.contains("  while                               2"), "{s}");
    let out = command().arg("passes").output().unwrap();
    let s = String::from_utf8(out.stdout).unwrap();
    for p in [
        "dce",
        "inline",
        "flatten-call-graph",
        "tuple-simplify",
        "print-points-to",
    ] {
        assert!(s.lines().any(|l| l.starts_with(p)), "{p} missing:\n{s}");
    }
}

#[test]
fn a_failing_pass_is_reported_once() {
    // A `Sharding` custom-call without a sharding: sharding-propagation refuses it.
    let input = "HloModule m\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT s = f32[4]{0} custom-call(p), custom_call_target=\"Sharding\"\n}\n";
    let out = output_with_stdin(
        command().args(["opt", "-", "--passes", "sharding-propagation"]),
        input.as_bytes(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    let message = "%s: a Sharding custom-call must carry a sharding";
    assert!(
        err.contains("pass `sharding-propagation` failed: "),
        "{err}"
    );
    assert_eq!(err.matches(message).count(), 1, "{err}");
}
