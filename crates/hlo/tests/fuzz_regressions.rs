//! Inputs the fuzzers (fuzz/: `parse`, `roundtrip`) found, minimized by hand. Each test states
//! the property the fuzz target checks: the parser never panics, and for accepted text
//! print(parse(print(parse(x)))) == print(parse(x)).

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

/// The `roundtrip` target's property.
fn roundtrip(text: &str) -> Result<(), String> {
    let m = parse_module(text).map_err(|e| format!("input does not parse: {e}"))?;
    let opts = PrintOptions::default();
    let printed = print_module(&m, &opts);
    let again = parse_module(&printed)
        .map_err(|e| format!("printed module does not parse: {e}\n{printed}"))?;
    let printed2 = print_module(&again, &opts);
    if printed != printed2 {
        return Err(format!("second print differs:\n{printed}\n---\n{printed2}"));
    }
    Ok(())
}

/// A module whose root is a custom-call with `backend_config=CONFIG`, CONFIG as the text
/// writes it.
fn custom_call_with_backend_config(config: &str) -> String {
    format!(
        "HloModule m\n\nENTRY %main (a: f32[]) -> f32[] {{\n  %a = f32[] parameter(0)\n  \
         ROOT %c = f32[] custom-call(f32[] %a), custom_call_target=\"x\", backend_config={config}\n}}\n"
    )
}

/// roundtrip crash-effc021e (fuzz run of 2026-11-22): a quoted backend_config that starts with
/// `{` and ends with `}` but whose braces do not balance (there: a string with newlines and a
/// JSON fragment cut in the middle) was printed raw, `backend_config={{}`, which the parser then
/// read as an unclosed block. The printer now quotes such strings.
#[test]
fn backend_config_with_unbalanced_braces_round_trips() {
    roundtrip(&custom_call_with_backend_config(r#""{{}""#)).unwrap();
}

/// The balanced case next to it keeps working (printed raw, read back raw).
#[test]
fn backend_config_with_balanced_braces_round_trips() {
    roundtrip(&custom_call_with_backend_config(r#""{\"k\": \"}\"}""#)).unwrap();
}
