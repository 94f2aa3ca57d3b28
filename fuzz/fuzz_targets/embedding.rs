//! The embedding commands' host side: the bytes before the first NUL are the configuration
//! (JSON), the rest the batch (`.npz`). Layout, reading, preprocessing and the exchange
//! packing refuse or succeed (`tessera_robust::check_embedding`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let Ok(config) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let npz = data.get(split + 1..).unwrap_or(&[]);
    if let Err(e) = tessera_robust::check_embedding(config, npz) {
        panic!("{e}");
    }
});
