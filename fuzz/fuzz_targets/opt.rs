//! Every `opt` pipeline of `tessera_robust::PIPELINES` on fuzzed text: the first byte picks
//! the pipeline, the rest is the module. A pass output that fails the verifier or does not
//! parse again is a crash, as is any panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("opt", data) {
        panic!("{e}");
    }
});
