//! Text the parser accepts prints to text that parses again and prints the same
//! (print(parse(print(parse(x)))) == print(parse(x))), and that verifies when the module does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("roundtrip", data) {
        panic!("{e}");
    }
});
