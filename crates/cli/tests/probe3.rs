//! The third hostile probe's reproducers (issue 39; testdata/probe3/README.md): each command
//! answers within its contract, exit 0 or a located refusal with exit 1, never a panic or an
//! abort, and says what was wrong where.

mod support;

use support::{scratch, stderr, tessera, testdata, text};

fn probe(name: &str) -> String {
    testdata(&format!("probe3/{name}"))
}

/// Runs `args`, expects exit `code` and every `wants` in stderr (once each).
fn check(args: &[&str], code: i32, wants: &[&str]) -> String {
    let o = tessera(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    for w in wants {
        assert_eq!(err.matches(w).count(), 1, "{args:?}: `{w}` once in {err}");
    }
    err
}

#[test]
fn huge_device_ids_and_mesh_axes_are_refused_where_they_are_written() {
    let maximal = probe("maximal_huge_device.hlo");
    let mesh = probe("mesh_axis_huge.hlo");
    for cmd in ["compile", "explain", "verify"] {
        check(
            &[cmd, &maximal],
            1,
            &["maximal_huge_device.hlo:5:58: device id 99999999999: expected 0 to 1048575"],
        );
        check(&[cmd, &mesh], 1, &["mesh axis 'x' of size 2147483647"]);
    }
}

#[test]
fn an_operand_from_outside_a_partially_manual_region_is_refused_not_a_panic() {
    let f = probe("partial_manual_reduce_panic.hlo");
    for cmd in ["compile", "explain"] {
        check(
            &[cmd, &f],
            1,
            &["%reduce: a collective inside a partially manual region"],
        );
    }
}

#[test]
fn aliases_keep_one_size() {
    let dir = scratch("probe3");
    let out = dir.join("a.hlo");
    let out = out.to_str().unwrap();
    let err = check(
        &["compile", &probe("alias_sharding_mismatch.hlo"), "-o", out],
        0,
        &["input_output_alias of output [0] and parameter 0 dropped"],
    );
    assert!(err.contains("f32[4,8] and f32[1,8]"), "{err}");
    check(&["verify", out], 0, &[]);
    check(
        &["verify", &probe("verify_alias_shape.hlo")],
        1,
        &["pairs output [0] (f32[8]) with parameter 0 index [] (f32[4,8])"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn embedding_inputs_are_checked_before_they_size_anything() {
    check(
        &[
            "embedding",
            "preprocess",
            "--config",
            &probe("emb_example_config.json"),
            "--input",
            &probe("emb_sparse_dense_shape_huge.npz"),
        ],
        1,
        &["emb_sparse_dense_shape_huge.npz: dense_shape [2147483647, 1] has 2147483647 rows"],
    );
    check(
        &[
            "embedding",
            "layout",
            "--config",
            &probe("emb_dim_wrap.json"),
        ],
        1,
        &["emb_dim_wrap.json: tables[0] ('a').embedding_dim: 4294967295 pads to 4294967296"],
    );
}

/// Every error about a batch names the file it came from (issue 39, M1): here an id past the
/// table's vocabulary, found while preprocessing.
#[test]
fn batch_errors_name_the_file() {
    use tessera_runtime::HostArray;
    let dir = scratch("probe3-m1");
    let fa = HostArray::new(
        tessera_hlo::ElementType::S32,
        vec![4, 2],
        [0i32, 3, 1, 1, 4, 2, 3, 99]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    )
    .unwrap();
    let fb = HostArray::new(
        tessera_hlo::ElementType::S32,
        vec![4, 1],
        [2i32, 0, 1, 2]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    )
    .unwrap();
    let path = dir.join("batch.npz");
    std::fs::write(
        &path,
        tessera_runtime::npz::write([("fa", &fa), ("fb", &fb)]),
    )
    .unwrap();
    let shown = path.to_str().unwrap();
    let err = check(
        &[
            "embedding",
            "preprocess",
            "--config",
            &probe("emb_example_config.json"),
            "--input",
            shown,
        ],
        1,
        &[shown],
    );
    assert!(err.contains("99"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn memory_refuses_a_pass_option_no_pass_reads() {
    let f = testdata("examples/mlp_train_step.hlo");
    check(
        &["memory", &f, "--pass-option", "x.y=z"],
        1,
        &["--pass-option x.y=z: options configure the passes of --passes"],
    );
}

/// `tessera compile PROBE --verify` succeeds, and the output computes what the input does.
fn compiles_and_verifies_on_2_devices(name: &str) {
    let o = tessera(&["compile", &probe(name), "--verify", "-o", "/dev/null"]);
    let text = text(&o);
    assert!(o.status.success(), "{name}: {text}");
    assert!(text.contains("equivalent on 2 devices"), "{name}: {text}");
}

/// XLA's TiledDot and DotInputsAreIdentical tests write a dot as a convolution without
/// spatial dimensions and without `window=`: read, partitioned and verified equal.
#[test]
fn a_convolution_without_a_window_is_a_dot() {
    compiles_and_verifies_on_2_devices("conv_without_window.hlo");
}

/// A computation called from two places: `compile` flattens the call graph itself (M3), and
/// the result verifies equal.
#[test]
fn compile_flattens_a_computation_called_twice() {
    compiles_and_verifies_on_2_devices("called_twice.hlo");
}
