//! Every input the fuzz targets found a crash with, replayed through the same check:
//! `testdata/fuzz/<target>/<what-it-does>` (target as in fuzz/fuzz_targets). Files are the
//! fuzzer's bytes, renamed after what they exercise.

use std::path::PathBuf;

fn replay(target: &str, check: impl Fn(&[u8]) -> Result<(), String>) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/fuzz")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        if let Err(e) = check(&data) {
            panic!("{}: {e}", f.display());
        }
    }
    files.len()
}

#[test]
fn fuzz_findings_stay_fixed() {
    let text = |d: &[u8]| String::from_utf8_lossy(d).into_owned();
    let mut n = 0;
    n += replay("roundtrip", |d| {
        tessera_robust::check_text(&text(d)).map(|_| ())
    });
    n += replay("opt", |d| match d.split_first() {
        Some((&k, rest)) => tessera_robust::check_opt(&text(rest), k as usize),
        None => Ok(()),
    });
    n += replay("proto", tessera_robust::check_proto);
    n += replay("options", |d| {
        let t = text(d);
        let mut lines = t.lines();
        let passes = lines.next().unwrap_or("").to_string();
        tessera_robust::check_options(&passes, &lines.map(str::to_string).collect::<Vec<_>>())
    });
    assert!(n >= 1, "no fuzz findings found under testdata/fuzz");
}
