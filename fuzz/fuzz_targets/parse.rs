//! Any bytes: the parser returns a module or an error, and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tessera_hlo::text::parse_module(text);
    }
});
