//! Every corpus module that XLA's parser and verifier accept must pass Tessera's verifier.
//!
//! Modules are split and indexed as scripts/oracles/corpus_oracle.py does. testdata/corpus/
//! xla_rejects.txt lists the modules XLA's parser refuses; testdata/corpus/
//! xla_verify_rejects.txt (scripts/oracles/corpus_verify_oracle.py) those XLA's verifier refuses. A
//! module our parser cannot read is the text parser's business (tests/corpus_text.rs) and is
//! only counted here.

use tessera_corpus::{hlo_files, listed, relative, split_modules};

use tessera_hlo::verify::{findings, VerifyOptions};

/// Modules whose text gives an instruction a shape that XLA's parser replaces with the shape it
/// derives itself (it builds recv-done, send-done, get-tuple-element, ... from their operands and
/// ignores the written shape), so XLA verifies a different module than the text says. Tessera's
/// parser keeps the written shape and the verifier rightly refuses it.
const XLA_PARSER_REWRITES: &[&str] = &[
    // recv-done written as (f32[128,21], token[]) for a recv of f32[128,32].
    "xla/hlo/translate/hlo_to_mhlo/tests/import_async.hlo:14",
];

#[test]
fn corpus_modules_xla_accepts_verify() {
    let Some(root) = tessera_corpus::root_or_skip("corpus_modules_xla_accepts_verify") else {
        return;
    };
    let parse_rejects = listed("xla_rejects.txt");
    let verify_rejects = listed("xla_verify_rejects.txt");
    let files = hlo_files(&root);
    let (mut total, mut checked, mut unparsed, mut agreed) = (0, 0, 0, 0);
    let mut failures = Vec::new();
    let mut rejected_names = Vec::new();
    let opts = VerifyOptions::default();
    for f in &files {
        let rel = relative(&root, f);
        let text = std::fs::read_to_string(f).unwrap();
        for (i, m) in split_modules(&text).iter().enumerate() {
            total += 1;
            let name = format!("{rel}:{i}");
            if parse_rejects.contains(&name) {
                continue;
            }
            let Ok(module) = tessera_hlo::text::parse_module(m) else {
                unparsed += 1;
                continue;
            };
            let found = findings(&module, &opts);
            if !found.is_empty() {
                rejected_names.push(name.clone());
            }
            if XLA_PARSER_REWRITES.contains(&name.as_str()) {
                continue;
            }
            if verify_rejects.contains(&name) {
                if !found.is_empty() {
                    agreed += 1;
                }
                continue;
            }
            checked += 1;
            if !found.is_empty() {
                let list: Vec<String> = found.iter().take(3).map(|x| x.to_string()).collect();
                failures.push(format!("{name}:\n    {}", list.join("\n    ")));
            }
        }
    }
    // The candidates for scripts/oracles/corpus_verify_oracle.py: every module we reject.
    if let Ok(path) = std::env::var("TESSERA_VERIFY_CANDIDATES") {
        std::fs::write(path, rejected_names.join("\n") + "\n").unwrap();
    }
    eprintln!(
        "{total} modules, {checked} that XLA accepts verified, {unparsed} not parsed, \
         {agreed} of {} XLA verifier rejects also rejected",
        verify_rejects.len()
    );
    assert!(checked > 0 || unparsed == 0, "nothing was verified");
    assert!(
        failures.is_empty(),
        "{} module(s) XLA accepts fail verification:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
