//! Text the parser accepts prints to text that parses again and prints the same:
//! print(parse(print(parse(x)))) == print(parse(x)).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_hlo::text::{parse_module, print_module, PrintOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = parse_module(text) else {
        return;
    };
    let opts = PrintOptions::default();
    let printed = print_module(&m, &opts);
    let again = match parse_module(&printed) {
        Ok(m2) => m2,
        Err(e) => panic!("printed module does not parse: {e}\n--- printed ---\n{printed}"),
    };
    let printed2 = print_module(&again, &opts);
    assert!(
        printed == printed2,
        "print(parse(print(m))) differs from print(m)\n--- first ---\n{printed}\n--- second ---\n{printed2}"
    );
});
