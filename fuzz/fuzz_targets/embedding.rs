//! The embedding commands' host side: the bytes before the first NUL are the configuration
//! (JSON), the rest the batch (`.npz`). Layout, reading, preprocessing and the exchange
//! packing refuse or succeed (`tessera_robust::check_embedding`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("embedding", data) {
        panic!("{e}");
    }
});
