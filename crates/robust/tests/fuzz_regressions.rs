//! Every input the fuzz targets found a crash with, replayed through the same check:
//! `testdata/fuzz/<target>/<what-it-does>` (target as in fuzz/fuzz_targets). Files are the
//! fuzzer's bytes, renamed after what they exercise.

use std::path::PathBuf;

fn replay(target: &str) -> usize {
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
        if let Some(Err(e)) = tessera_robust::check_target(target, &data) {
            panic!("{}: {e}", f.display());
        }
    }
    files.len()
}

#[test]
fn fuzz_findings_stay_fixed() {
    let n: usize = tessera_robust::TARGETS.iter().map(|t| replay(t)).sum();
    assert!(n >= 1, "no fuzz findings found under testdata/fuzz");
}

/// The fixed module of the `sharding` target compiles with valid shardings, so the fuzzer's
/// inputs reach the partitioner rather than stopping at the parser; and `compile`'s options
/// reach the pipeline.
#[test]
fn the_sharding_target_reaches_the_partitioner() {
    let data = "4\n\n{devices=[2,2]<=[4]}\n{devices=[2,1,2]<=[4] last_tile_dim_replicate}\n\
                {devices=[4,1]<=[4]}\n{replicated}\n{devices=[1,4]<=[4]}\n{maximal device=3}\n";
    let (text, args) = tessera_robust::sharding_case(data);
    assert!(args.is_empty());
    let module = tessera_hlo::text::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let compiled = tessera_compile::compile(module, &tessera_compile::CompileOptions::new(4))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(compiled.report.num_partitions, 4);
    tessera_robust::check_sharding(data).unwrap();
}
