//! Every `opt` pipeline of `tessera_robust::PIPELINES` on fuzzed text: the first byte picks
//! the pipeline, the rest is the module. A pass output that fails the verifier or does not
//! parse again is a crash, as is any panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&k, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if let Err(e) = tessera_robust::check_opt(text, k as usize) {
        panic!("{e}");
    }
});
