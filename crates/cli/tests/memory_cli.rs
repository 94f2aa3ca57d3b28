//! `tessera memory` as a user runs it: the peak, where, the live buffers, the SVG.

use std::process::Command;

mod support;

use support::{command, scratch, testdata};

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn reports_peak_place_and_live_buffers() {
    let out = run_ok(
        command()
            .arg("memory")
            .arg(testdata("remat/schedule-while-callees.hlo")),
    );
    // Unscheduled input: the default scheduler runs. The peak is at the while: %bcast and
    // %slice_1 in the entry plus the body's 16384 bytes, plus the 4-byte output.
    let expected = "\
module rematerialize_around_while: scheduled by the default scheduler (cond list, body list, entry list)
peak: 20488 bytes (20.0 KiB) = entry computation 20484 + output 4; parameters 4 bytes not counted
at: entry position 4 of 7 (%while), including 16384 bytes of called computations (cond 0, body 16384)
live at the peak: 2 buffers:
  buffer    shape             bytes
  %bcast    f32[1024]          4096
  %slice_1  f32[1]                4
computations (peak, where):
  cond: 0 bytes at %t
  body: 16384 bytes at %concat_1.b
  entry: 20484 bytes at %while
";
    assert_eq!(out, expected);
}

#[test]
fn top_limits_the_list_and_scheduled_input_keeps_its_schedule() {
    let dir = scratch("memory");
    let scheduled = dir.join("scheduled.hlo");
    let text = run_ok(
        command()
            .arg("opt")
            .arg(testdata("remat/schedule-list-aliasing.hlo"))
            .args([
                "--passes",
                "schedule",
                "--pass-option",
                "schedule.scheduler=post-order",
            ]),
    );
    std::fs::write(&scheduled, text).unwrap();
    let out = run_ok(command().arg("memory").arg(&scheduled).args(["--top", "1"]));
    assert!(
        out.starts_with("module test_aliasing_module: the schedule of the input\n"),
        "{out}"
    );
    assert!(out.contains("peak: 24024 bytes"), "{out}");
    assert!(
        out.contains("live at the peak: 3 buffers, the 1 largest:"),
        "{out}"
    );
    assert_eq!(out.matches("s32[1000]").count(), 1, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn svg_overlays_before_and_after_deterministically() {
    let dir = scratch("memory-svg");
    let svg = |name: &str| {
        let path = dir.join(name);
        let out = run_ok(
            command()
                .arg("memory")
                .arg(testdata("remat/schedule-list-counterexample.hlo"))
                .args(["--scheduler", "list", "--passes", "schedule"])
                .args(["--pass-option", "schedule.scheduler=post-order", "--svg"])
                .arg(&path),
        );
        (out, std::fs::read_to_string(path).unwrap())
    };
    let (out, a) = svg("a.svg");
    let (_, b) = svg("b.svg");
    assert_eq!(a, b, "the SVG must be byte-identical across runs");
    assert!(out.contains("\nafter schedule:\n"), "{out}");
    assert!(
        out.contains("change: +0 bytes (8.0 KiB -> 8.0 KiB)"),
        "{out}"
    );
    assert!(
        a.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{a}"
    );
    assert_eq!(
        a.matches("stroke-width=\"1.5\"").count(),
        2,
        "two lines: {a}"
    );
    assert!(a.contains(">before (peak 8.0 KiB)</text>"), "{a}");
    assert!(a.contains(">after schedule (peak 8.0 KiB)</text>"), "{a}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_scheduler_is_an_error() {
    let out = command()
        .arg("memory")
        .arg(testdata("remat/schedule-list-aliasing.hlo"))
        .args(["--scheduler", "greedy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown scheduler `greedy`; expected post-order, dfs, list or default"),
        "{err}"
    );
}
