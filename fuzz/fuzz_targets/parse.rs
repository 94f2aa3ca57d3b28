//! Any bytes: the parser returns a module or an error, and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("parse", data) {
        panic!("{e}");
    }
});
