//! Runs one fuzz target's check on files, without the fuzzer (and without nightly): reproduces
//! a crash artifact or replays a corpus.
//!
//!     cargo run -p tessera-robust --example check -- TARGET FILE...
//!
//! TARGET is one of `tessera_robust::TARGETS`, as in fuzz/fuzz_targets.
//! `check mutant FILE SEED` prints mutant SEED of FILE as `tests/mutants.rs` makes it.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((target, files)) = args.split_first() else {
        eprintln!("usage: check TARGET FILE...");
        std::process::exit(2);
    };
    if target == "mutant" {
        // `check mutant FILE SEED`: print the mutant test's mutant SEED of FILE.
        let text = std::fs::read_to_string(&files[0]).expect("FILE");
        let seed: u64 = files[1].parse().expect("SEED");
        use std::io::Write;
        std::io::stdout()
            .write_all(&tessera_robust::mutate::mutant(&text, seed))
            .unwrap();
        return;
    }
    let mut failed = 0;
    for f in files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        if !tessera_robust::TARGETS.contains(&target.as_str()) {
            eprintln!("unknown target {target}");
            std::process::exit(2);
        }
        // A panic is reported like a broken contract, and the replay goes on.
        let result = std::panic::catch_unwind(|| {
            tessera_robust::check_target(target, &data).unwrap_or(Ok(()))
        })
        .unwrap_or_else(|_| Err("panicked (message above)".into()));
        if let Err(e) = result {
            failed += 1;
            eprintln!("{f}: {e}");
        }
    }
    std::process::exit(i32::from(failed > 0));
}
