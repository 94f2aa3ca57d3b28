//! `tessera compare` as a user runs it: exit 0 with per-output errors when XLA's partitioned
//! module matches its original, exit 1 when one collective of it is replaced by a copy.

mod support;

use support::{scratch, tessera, testdata};

fn pair(name: &str, side: &str) -> String {
    testdata(&format!("spmd_pairs/{name}.{side}.hlo"))
}

#[test]
fn compare_exit_codes() {
    let before = pair("reduce_sum_sharded", "before");
    let after = pair("reduce_sum_sharded", "after");
    let ok = tessera(&["compare", &before, &after, "--devices", "4"]);
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        text.contains("output 0 f32[8]: ok in f64: max abs error"),
        "{text}"
    );
    assert!(text.contains("equivalent on 4 devices"), "{text}");

    // The same module with its all-reduce turned into a copy of the partial sums.
    let original = std::fs::read_to_string(&after).unwrap();
    let start = original
        .find("all-reduce(%reduce)")
        .expect("the all-reduce");
    let end = start + original[start..].find('\n').unwrap();
    let broken = format!("{}copy(%reduce){}", &original[..start], &original[end..]);
    let dir = scratch("compare");
    let file = dir.join("broken.hlo");
    std::fs::write(&file, broken).unwrap();
    let bad = tessera(&["compare", &before, file.to_str().unwrap(), "--devices", "4"]);
    let text = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{text}");
    assert!(text.contains("output 0 f32[8]: DIFFERS"), "{text}");
    assert!(text.contains("replica disagreements"), "{text}");
    assert!(text.contains("NOT equivalent on 4 devices"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// An output that depends on a stateful rng and differs is not comparable, and says why; the
/// others are compared; the verdict is *not comparable*, exit 3. A
/// custom-call the plugin cannot run on the host makes the whole comparison not comparable,
/// naming the instruction, not a raw PJRT error.
#[test]
fn not_comparable_is_its_own_verdict() {
    let rng = testdata("verify/stateful_rng.hlo");
    // The module against itself, on one device: it carries shardings, so it runs as one
    // global program. Its f32 rng comes out different from one executable to the next.
    let out = tessera(&["compare", &rng, &rng, "--devices", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains(
            "output 0 f32[4]: not comparable: it differs, and depends on %r, a stateful random"
        ),
        "{text}"
    );
    assert!(text.contains("output 1 f32[4]: ok"), "{text}");
    assert!(text.contains("one global program on 1 device"), "{text}");
    assert!(text.contains("not comparable on 1 device"), "{text}");

    let seed = testdata("verify/host_custom_call.hlo");
    let out = tessera(&["compare", &seed, &seed, "--devices", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{text}\n{err}");
    assert!(
        text.contains("not comparable: %c is a custom-call to GetRngSeed"),
        "{text}\n{err}"
    );
}

/// What the plugin would abort on is refused first, with the place and the reason (issue 39,
/// C4 and C6): a 32 GiB parameter (before any host buffer), a transpose inside a fusion (an
/// XLA dump after its optimizations), a maximal operand inside a partially manual region
/// (XLA's partitioning of it, the reference, CHECK-fails).
#[test]
fn what_the_plugin_would_abort_on_is_refused_first() {
    let huge = testdata("verify/huge_param.hlo");
    let fused = testdata("examples/mlp_train_step.after_spmd.hlo");
    let maximal = testdata("spmd-partitioning/partial-manual-maximal-operand.hlo");
    let cases: [(&[&str], &str); 6] = [
        (
            &["compile", &huge, "--verify", "-o", "/dev/null"],
            "GiB of host memory",
        ),
        (&["run", &huge, "--devices", "2"], "GiB of host memory"),
        (
            &["compare", &huge, &huge, "--devices", "2"],
            "GiB of host memory",
        ),
        (
            &["compile", &fused, "--verify", "-o", "/dev/null"],
            "%transpose.13 is a transpose inside fusion %copy_subtract_fusion.1",
        ),
        (
            &["run", &testdata("verify/fusion_transpose.hlo")],
            "transpose inside fusion",
        ),
        (
            &["compile", &maximal, "--verify", "-o", "/dev/null"],
            "%q ({maximal device=3}) feeds %y inside a partially manual region",
        ),
    ];
    for (args, want) in cases {
        let out = tessera(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: missing `{want}` in {err}");
        // Said once (issue 39, M2).
        assert_eq!(err.matches(want).count(), 1, "{args:?}: {err}");
    }
}

/// A shard_map as jax lowers it in Shardy mode (Shardy's shape custom-calls, which XLA reads
/// only in jax's pipeline) is compared as `compile` reads it: Tessera's per-device program of
/// it is equivalent.
#[test]
fn a_shardy_shard_map_original_is_compared_as_compile_reads_it() {
    let original = testdata("compile/shard_map2.shardy.hlo");
    let out = std::env::temp_dir().join(format!("shard_map2-{}.hlo", std::process::id()));
    let out = out.to_string_lossy().into_owned();
    let c = tessera(&["compile", &original, "-o", &out]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let r = tessera(&["compare", &original, &out, "--devices", "8"]);
    let _ = std::fs::remove_file(&out);
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(text.contains("equivalent on 8 devices"), "{text}");
}
