//! Fuzzed `--passes` and `--pass-option` values: the first line is the pass list, every
//! further line one option. Building the pipeline refuses or succeeds, and a pipeline that
//! builds runs on a small valid module; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.lines();
    let passes = lines.next().unwrap_or("");
    let options: Vec<String> = lines.map(str::to_string).collect();
    if let Err(e) = tessera_robust::check_options(passes, &options) {
        panic!("{e}");
    }
});
