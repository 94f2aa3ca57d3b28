//! Fuzzed `xla.HloModuleProto` bytes: decoding refuses or gives a module whose printed text
//! parses again (and verifies when the module does); never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("proto", data) {
        panic!("{e}");
    }
});
