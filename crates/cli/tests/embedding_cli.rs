//! `tessera embedding`: the worked example of docs/embedding.md through the binary, with
//! numpy-written batches (stored and deflated) and a CSR.npz read back.

use std::path::PathBuf;
use std::process::Command;

use tessera_runtime::npz;

fn example(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/embedding/example")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

fn tessera(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("spawn tessera");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn preprocess_writes_the_csr_of_the_worked_example() {
    let dir = std::env::temp_dir().join(format!("tessera-embedding-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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

    let (ok, _, stderr) = tessera(&[
        "embedding",
        "preprocess",
        "--config",
        &example("batch.npz"),
        "--input",
        &example("batch.npz"),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("not valid UTF-8") || stderr.contains("valid UTF-8"),
        "{stderr}"
    );
    let (ok, _, stderr) = tessera(&[
        "embedding",
        "preprocess",
        "--config",
        &example("config.json"),
        "--input",
        &example("config.json"),
    ]);
    assert!(!ok);
    assert!(stderr.contains("not an .npz"), "{stderr}");

    // An array no feature owns, and a feature without input.
    let dir =
        std::env::temp_dir().join(format!("tessera-embedding-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
        let (ok, _, stderr) = tessera(&[
            "embedding",
            "preprocess",
            "--config",
            &example("config.json"),
            "--input",
            bad.to_str().unwrap(),
        ]);
        assert!(!ok);
        assert!(stderr.contains(want), "{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
