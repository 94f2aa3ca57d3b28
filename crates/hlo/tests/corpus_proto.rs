//! The XLA corpus through the HloModuleProto conversion.
//!
//! For every corpus module our parser accepts (and XLA's does: testdata/corpus/xla_rejects.txt
//! lists the others), text -> module -> proto bytes -> module must be the same module
//! (`module_diff`) and print the same text as text -> module. This covers every attribute the
//! text format can hold, with real-world values, through both directions of the conversion.

use tessera_corpus::{first_difference, hlo_files, listed, relative, split_modules};

use prost::Message;
use tessera_hlo::proto::{from_proto_bytes, to_proto_bytes};
use tessera_hlo::text::{module_diff, parse_module, print_module, PrintOptions};

const LARGE_FILE: u64 = 300_000;

#[test]
fn corpus_round_trips_through_proto() {
    let Some(root) = tessera_corpus::root_or_skip("corpus_round_trips_through_proto") else {
        return;
    };
    let rejects = listed("xla_rejects.txt");
    let files = hlo_files(&root);
    let (mut checked, mut skipped, mut large_skipped) = (0, 0, 0);
    let mut failures: Vec<String> = Vec::new();
    for f in &files {
        let rel = relative(&root, f);
        // 18 files above 300 KB hold 92% of the corpus bytes. The IR crate is optimized in the
        // test profile, so the whole corpus takes seconds; TESSERA_CORPUS_SMALL=1 skips them
        // for a quicker local run.
        let large = std::fs::metadata(f).is_ok_and(|m| m.len() > LARGE_FILE);
        if large && std::env::var_os("TESSERA_CORPUS_SMALL").is_some() {
            large_skipped += 1;
            continue;
        }
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (i, m) in split_modules(&text).iter().enumerate() {
            let key = format!("{rel}:{i}");
            if rejects.contains(&key) {
                continue;
            }
            // Parser coverage is corpus_text's business; here only what it accepts.
            let Ok(module) = parse_module(m) else {
                skipped += 1;
                continue;
            };
            checked += 1;
            let bytes = to_proto_bytes(&module);
            // The hand-written outer levels of the encoder give prost's own bytes.
            if bytes != module.to_proto().encode_to_vec() {
                failures.push(format!(
                    "{key}: to_proto_bytes differs from prost's encoding"
                ));
                continue;
            }
            let back = match from_proto_bytes(&bytes) {
                Ok(b) => b,
                Err(e) => {
                    failures.push(format!("{key}: our own proto does not read back: {e}"));
                    continue;
                }
            };
            if let Some(d) = module_diff(&module, &back) {
                failures.push(format!("{key}: the proto changed the module: {d}"));
                continue;
            }
            let want = print_module(&module, &PrintOptions::default());
            let got = print_module(&back, &PrintOptions::default());
            if want != got {
                let (n, x, y) = first_difference(&want, &got);
                failures.push(format!(
                    "{key}: the text differs after the proto at line {n}:\n    {x}\n    {y}"
                ));
                continue;
            }
            // Deterministic bytes.
            if to_proto_bytes(&back) != bytes {
                failures.push(format!("{key}: re-encoding gives other bytes"));
            }
        }
    }
    eprintln!(
        "corpus_proto: {checked} modules through the proto, {} failed, {skipped} not parsed, \
         {large_skipped} large files left to release builds",
        failures.len()
    );
    assert!(checked > 0, "no corpus module was checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} modules failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
