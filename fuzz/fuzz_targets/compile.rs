//! `tessera compile` and `tessera explain` on fuzzed options and modules: the first line holds
//! the command-line options (`--num-partitions`, `--num-replicas`, `--memory-limit`, `--dedup`,
//! `--pass-option`), the rest is the module. The pipeline refuses or gives a program that
//! verifies and prints again; never a panic or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("compile", data) {
        panic!("{e}");
    }
});
