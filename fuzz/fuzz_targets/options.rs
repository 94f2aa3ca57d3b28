//! Fuzzed `--passes` and `--pass-option` values: the first line is the pass list, every
//! further line one option. Building the pipeline refuses or succeeds, and a pipeline that
//! builds runs on a small valid module; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("options", data) {
        panic!("{e}");
    }
});
