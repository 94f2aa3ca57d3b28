//! `tessera embedding`: the worked example of docs/embedding.md through the binary, with
//! numpy-written batches (stored and deflated) and a CSR.npz read back.

use tessera_runtime::npz;

mod support;

use support::{scratch, stderr, stdout, testdata};

fn example(file: &str) -> String {
    testdata(&format!("embedding/example/{file}"))
}

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = support::tessera(args);
    (out.status.success(), stdout(&out), stderr(&out))
}

/// Runs `tessera embedding preprocess --config CONFIG --input INPUT`, expects it to fail, and
/// returns its standard error.
fn preprocess_refuses(config: &str, input: &str) -> String {
    let (ok, _, stderr) = tessera(&[
        "embedding",
        "preprocess",
        "--config",
        config,
        "--input",
        input,
    ]);
    assert!(
        !ok,
        "preprocess --config {config} --input {input} succeeded"
    );
    stderr
}

#[test]
fn preprocess_writes_the_csr_of_the_worked_example() {
    let dir = scratch("embedding-cli");
    for batch in ["batch.npz", "batch_compressed.npz"] {
        let out = dir.join(format!("{batch}.csr.npz"));
        let (ok, stdout, stderr) = tessera(&[
            "embedding",
            "preprocess",
            "--config",
            &example("config.json"),
            "--input",
            &example(batch),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{stderr}");
        assert!(
            stdout.contains("a_b: max ids per partition 4, max unique ids per partition 3"),
            "{stdout}"
        );
        assert!(
            stdout.contains("warning: Adding 4 extra columns to table a to get 8 columns."),
            "{stdout}"
        );
        let arrays = npz::read(&std::fs::read(&out).unwrap()).unwrap();
        let i32s = |k: &str| -> Vec<i32> {
            arrays[k]
                .data
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        assert_eq!(
            i32s("a_b.row_pointers"),
            [1, 11, 16, 16, 16, 16, 16, 16, 4, 11, 16, 16, 16, 16, 16, 16]
        );
        assert_eq!(i32s("a_b.embedding_ids")[8..11], [0, 1, 9]);
        assert_eq!(i32s("a_b.sample_ids")[16..20], [0, 0, 2, 3]);
        assert_eq!(i32s("a_b.required_buffer_sizes"), [16, 16]);
        assert_eq!(arrays["a_b.gains"].dims, [32]);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn layout_and_errors() {
    let (ok, stdout, _) = tessera(&["embedding", "layout", "--config", &example("config.json")]);
    assert!(ok);
    assert!(
        stdout.contains("table b: 3 -> 16 rows, dim 3 -> 8, rows 8.. of each shard, rotation 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("feature fb: samples from 4, col_offset 16, col_shift 1"),
        "{stdout}"
    );

    let stderr = preprocess_refuses(&example("batch.npz"), &example("batch.npz"));
    assert!(
        stderr.contains("not valid UTF-8") || stderr.contains("valid UTF-8"),
        "{stderr}"
    );
    let stderr = preprocess_refuses(&example("config.json"), &example("config.json"));
    assert!(stderr.contains("not an .npz"), "{stderr}");

    // An array no feature owns, and a feature without input.
    let dir = scratch("embedding-cli-bad");
    let ids = tessera_runtime::HostArray::s32(&[4, 2], &[0, 3, 1, 1, 4, 2, 3, 3]).unwrap();
    let fb = tessera_runtime::HostArray::s32(&[4, 1], &[2, 0, 1, 1]).unwrap();
    for (name, want) in [
        ("fc", "array 'fc' belongs to no feature"),
        ("fa", "feature 'fb': "),
    ] {
        let bad = dir.join(format!("{name}.npz"));
        let arrays: Vec<(&str, &tessera_runtime::HostArray)> = if name == "fc" {
            vec![("fa", &ids), ("fb", &fb), ("fc", &ids)]
        } else {
            vec![("fa", &ids)]
        };
        std::fs::write(&bad, npz::write(arrays)).unwrap();
        let stderr = preprocess_refuses(&example("config.json"), bad.to_str().unwrap());
        assert!(stderr.contains(want), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn write_f32(path: &std::path::Path, dims: &[i64], data: &[f32]) {
    let a = tessera_runtime::HostArray::f32(dims, data).unwrap();
    std::fs::write(path, tessera_runtime::npy::write(&a)).unwrap();
}

fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let a = tessera_runtime::npy::read(&std::fs::read(path).unwrap(), None).unwrap();
    a.to_f32().expect("an f32 array")
}

/// `lookup` and `step` on the worked example: activations summed by hand, and two Adagrad
/// steps of a gradient given for `fa` only (`fb` gets the seed's warning and a zero gradient;
/// the accumulator files do not exist before and start at 0.1).
#[test]
fn lookup_and_step_on_the_worked_example() {
    let dir = scratch("embedding-dev");
    let a: Vec<f32> = (0..20).map(|i| i as f32 * 0.25 - 1.0).collect();
    let b: Vec<f32> = (0..9).map(|i| 1.0 + i as f32).collect();
    write_f32(&dir.join("a.npy"), &[5, 4], &a);
    write_f32(&dir.join("b.npy"), &[3, 3], &b);
    let tables = dir.to_string_lossy().into_owned();
    let act = dir.join("act.npz");
    let (ok, stdout, stderr) = tessera(&[
        "embedding",
        "lookup",
        "--config",
        &example("config.json"),
        "--input",
        &example("batch.npz"),
        "--tables",
        &tables,
        "--devices",
        "2",
        "-o",
        &act.to_string_lossy(),
    ]);
    assert!(ok, "{stdout}{stderr}");
    let arrays = npz::read(&std::fs::read(&act).unwrap()).unwrap();
    let got = |name: &str| -> Vec<f32> { arrays[name].to_f32().expect("an f32 array") };
    let row = |t: &[f32], d: usize, i: usize| t[i * d..(i + 1) * d].to_vec();
    let add = |x: Vec<f32>, y: Vec<f32>| x.iter().zip(&y).map(|(p, q)| p + q).collect::<Vec<_>>();
    // fa = [[0, 3], [1, 1], [4, 2], [3, 3]], fb = [[2], [], [0, 1, 2], [1]].
    let want_fa = [
        add(row(&a, 4, 0), row(&a, 4, 3)),
        add(row(&a, 4, 1), row(&a, 4, 1)),
        add(row(&a, 4, 4), row(&a, 4, 2)),
        add(row(&a, 4, 3), row(&a, 4, 3)),
    ]
    .concat();
    let want_fb = [
        row(&b, 3, 2),
        vec![0.0; 3],
        add(add(row(&b, 3, 0), row(&b, 3, 1)), row(&b, 3, 2)),
        row(&b, 3, 1),
    ]
    .concat();
    assert_eq!(arrays["fa"].dims, vec![4, 4]);
    assert_eq!(got("fa"), want_fa);
    assert_eq!(got("fb"), want_fb);

    let ones = tessera_runtime::HostArray::f32(&[4, 4], &[1f32; 16]).unwrap();
    let grads = dir.join("grad.npz");
    std::fs::write(&grads, npz::write([("fa", &ones)])).unwrap();
    let (ok, stdout, stderr) = tessera(&[
        "embedding",
        "step",
        "--config",
        &example("config.json"),
        "--input",
        &example("batch.npz"),
        "--gradients",
        &grads.to_string_lossy(),
        "--tables",
        &tables,
        "--devices",
        "2",
        "--steps",
        "2",
    ]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("warning: No gradient passed for feature fb, sending zero gradient."),
        "{stdout}"
    );
    // Per-row gradient sums of table a: id 0: 1, id 1: 2, id 2: 1, id 3: 3, id 4: 1.
    let g = [1.0f64, 2.0, 1.0, 3.0, 1.0];
    let new_a = read_f32(&dir.join("a.npy"));
    let acc_a = read_f32(&dir.join("a.accumulators.npy"));
    for i in 0..5 {
        let acc1 = 0.1 + g[i] * g[i];
        let acc2 = acc1 + g[i] * g[i];
        for c in 0..4 {
            let w = a[i * 4 + c] as f64 - 0.1 * g[i] / acc1.sqrt() - 0.1 * g[i] / acc2.sqrt();
            assert!((new_a[i * 4 + c] as f64 - w).abs() < 1e-6, "a[{i},{c}]");
            assert!(
                (acc_a[i * 4 + c] as f64 - acc2).abs() < 1e-5,
                "acc a[{i},{c}]"
            );
        }
    }
    assert_eq!(read_f32(&dir.join("b.npy")), b);
    assert_eq!(read_f32(&dir.join("b.accumulators.npy")), vec![0.1f32; 9]);
    std::fs::remove_dir_all(&dir).ok();
}
