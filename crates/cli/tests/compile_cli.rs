//! `tessera compile` and `tessera explain` as users run them: jax's `lower().as_text()`, an
//! XLA dump file (`%x#N`), a proto in and out, dedup, the report, the verification on PJRT
//! devices, and every refusal of settings that cannot go together.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("spawn tessera")
}

fn data(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn scratch(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("tessera-compile-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name).to_string_lossy().into_owned()
}

/// The README's main job: the bundled jax training step, verified and reported.
#[test]
fn compiles_the_bundled_example_with_report_and_verify() {
    let out = scratch("transformer.hlo");
    let o = tessera(&[
        "compile",
        &data("examples/transformer_train_step.hlo"),
        "--num-partitions",
        "8",
        "--verify",
        "--report",
        "-o",
        &out,
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "compile jit_step for 8 partitions",
        "  sharding-propagation ",
        "  spmd-partitioning ",
        "  schedule ",
        "before partitioning (1 device):",
        "after partitioning:",
        "collectives in the output:",
        "all-reduce for %",
        "warnings:",
        "reference: the original on 1 device",
        "equivalent on 8 devices",
    ] {
        assert!(stdout.contains(want), "missing `{want}` in\n{stdout}");
    }
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("is_scheduled=true"), "{written}");
    assert!(written.contains("all-reduce("), "{written}");
}

/// An XLA dump file (with the `%x#N` shorthand), given as a proto and written as a proto.
#[test]
fn dump_files_and_protos_in_and_out() {
    let pb = scratch("scan.pb");
    let o = tessera(&[
        "to-proto",
        &data("dumps/scan_loop.gspmd.before-propagation.txt"),
        "-o",
        &pb,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = scratch("scan.out.pb");
    // The recurrence amplifies the split dot's other summation order beyond f32's tolerance:
    // the default verdict is decided in f64, the f32 errors beside it.
    let o = tessera(&["compile", &pb, "--verify", "-o", &out]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for want in [
        "as given: ",
        "decided in f64",
        ": ok in f64",
        "equivalent on 8 devices",
    ] {
        assert!(stdout.contains(want), "missing `{want}` in {}", text(&o));
    }
    let o = tessera(&["from-proto", &out]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("while("));
}

/// Variable deduplication in the pipeline: the merged program takes the original's arguments
/// through its map and computes the same on 4 devices.
#[test]
fn dedup_then_partition_verifies() {
    let out = scratch("dedup.hlo");
    let o = tessera(&[
        "compile",
        &data("dedup/modules/train_step_sharded.hlo"),
        "--dedup",
        "--verify",
        "--report",
        "-o",
        &out,
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("variable-dedup:") && t.contains("equivalent on 4 devices"),
        "{t}"
    );
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("tessera.argument_map"), "{written}");
}

#[test]
fn explain_says_why_each_collective_exists() {
    let o = tessera(&[
        "explain",
        &data("models/transformer_block.before-propagation.hlo"),
    ]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert!(t.contains("spmd-partitioning on 8 partitions"), "{t}");
    assert!(
        t.contains("all-reduce for %dot_general") && t.contains("partial sums"),
        "{t}"
    );
    assert!(t.contains("in the output module (after cleanup):"), "{t}");
}

/// Settings that cannot go together are refused (exit 1) with a message naming them.
#[test]
fn incompatible_settings_are_refused_by_name() {
    let model = data("models/mlp.before-propagation.hlo");
    let dedup = data("dedup/modules/train_step_sharded.hlo");
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--num-replicas", "2"],
            &["--num-replicas 2", "one replica"],
        ),
        (
            &["--num-partitions", "4"],
            &["--num-partitions 4", "num_partitions=8"],
        ),
        (&["--num-partitions", "0"], &["--num-partitions 0"]),
        (
            &[
                "--memory-limit",
                "1M",
                "--pass-option",
                "remat.memory_limit=2M",
            ],
            &["--memory-limit 1048576", "rematerialization.memory_limit"],
        ),
        (&["--memory-limit", "lots"], &["--memory-limit", "`lots`"]),
        (
            &["--pass-option", "variable-dedup.num_cores_per_replica=2"],
            &["variable-dedup.num_cores_per_replica=2", "without --dedup"],
        ),
        (
            &["--pass-option", "dce.remove_dead_computations=false"],
            &["`dce` is not a pass of the compile pipeline"],
        ),
        (
            &["--pass-option", "spmd-partitioning.num_partitions=4"],
            &["spmd-partitioning.num_partitions=4", "--num-partitions 8"],
        ),
        (
            &["--pass-option", "spmd-partitioning.bogus=1"],
            &["unknown option `bogus`"],
        ),
    ];
    for (flags, wants) in cases {
        let mut args = vec!["compile", model.as_str(), "-o", "-"];
        args.extend_from_slice(flags);
        let o = tessera(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {}", text(&o));
        for w in *wants {
            assert!(err.contains(w), "{flags:?}: missing `{w}` in {err}");
        }
    }
    // --f64 is a way of verifying: without --verify, or with a tolerance of its own, refused.
    for flags in [
        &["--f64"][..],
        &["--verify", "--f64", "--rtol", "1", "--atol", "1"],
    ] {
        let mut args = vec!["compile", model.as_str(), "-o", "-"];
        args.extend_from_slice(flags);
        let o = tessera(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("--f64"),
            "{flags:?}: {err}"
        );
    }
    // The seed's own refusal: deduplication with automatic input sharding.
    let o = tessera(&[
        "compile",
        &dedup,
        "--dedup",
        "--pass-option",
        "dedup.auto_input_sharding=true",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("enable_auto_xla_input_sharding and enable_variable_deduplication"),
        "{}",
        text(&o)
    );
    // A malformed input names its line and column.
    let bad = scratch("bad.hlo");
    std::fs::write(
        &bad,
        "HloModule m\n\nENTRY e {\n  ROOT x = f32[2] bogus()\n}\n",
    )
    .unwrap();
    let o = tessera(&["compile", &bad, "--num-partitions", "2"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.hlo:4:"), "{err}");
}

/// The 48-layer transformer step (17k instructions) through the command as users run it, on
/// 8 devices: compiled, reported and verified against the original on one device. Long
/// (PJRT compiling the two 17k-instruction programs, twice: 723 s of CPU, 8.6 GB;
/// docs/compile.md has the run): `cargo test --release -p tessera-cli --test compile_cli --
/// --ignored`. At the default f32 tolerance 144 of its 433 outputs differ from one device (at
/// most 2.1e-4: gradients summed over the batch in another order through 48 layers), so it is
/// verified in f64 (`--f64`), where all agree to 3.6e-12.
#[test]
#[ignore = "long: PJRT compiles two 17k-instruction programs"]
fn transformer48_compiles_and_verifies_on_8_devices() {
    let o = tessera(&[
        "compile",
        &data("models/transformer48.before-propagation.hlo"),
        "--num-partitions",
        "8",
        "--verify",
        "--f64",
        "--report",
        "-o",
        &scratch("transformer48.hlo"),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("equivalent on 8 devices"), "{t}");
}
