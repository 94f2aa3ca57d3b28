//! `tessera compare` as a user runs it: exit 0 with per-output errors when XLA's partitioned
//! module matches its original, exit 1 when one collective of it is replaced by a copy.

use std::path::PathBuf;
use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .output()
        .expect("spawn tessera")
}

fn pair(name: &str, side: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../testdata/spmd_pairs/{name}.{side}.hlo"))
        .to_string_lossy()
        .into_owned()
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
    assert!(text.contains("output 0 f32[8]: ok max abs error"), "{text}");
    assert!(text.contains("equivalent on 4 devices"), "{text}");

    // The same module with its all-reduce turned into a copy of the partial sums.
    let original = std::fs::read_to_string(&after).unwrap();
    let start = original
        .find("all-reduce(%reduce)")
        .expect("the all-reduce");
    let end = start + original[start..].find('\n').unwrap();
    let broken = format!("{}copy(%reduce){}", &original[..start], &original[end..]);
    let dir = std::env::temp_dir().join(format!("tessera-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
