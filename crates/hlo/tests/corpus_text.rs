//! The XLA corpus through the text parser and printer.
//!
//! Every module of `../shared/corpus/xla-hlo` that XLA's own parser accepts must parse; printing
//! it and parsing the print must give a structurally equal module, and printing that again must
//! give the same bytes. The modules XLA rejects (testdata/corpus/xla_rejects.txt) must give an
//! error, never a panic. Files split into modules on lines `// -----`, as XLA's tests do;
//! chunks holding only comments are skipped (the same rule as scripts/oracles/corpus_oracle.py).

use tessera_corpus::{first_difference, hlo_files, listed, relative, split_modules};

use std::path::Path;

use tessera_hlo::text::{module_diff, parse_module, print_module, PrintOptions};

#[test]
fn corpus_round_trips() {
    let Some(root) = tessera_corpus::root_or_skip("corpus_round_trips") else {
        return;
    };
    let rejects = listed("xla_rejects.txt");
    let files = hlo_files(&root);
    let (mut accepted, mut rejected) = (0, 0);
    let mut failures: Vec<String> = Vec::new();
    for f in &files {
        let rel = relative(&root, f);
        let Ok(text) = std::fs::read_to_string(f) else {
            failures.push(format!("{rel}: not UTF-8"));
            continue;
        };
        for (i, m) in split_modules(&text).iter().enumerate() {
            let key = format!("{rel}:{i}");
            let result = std::panic::catch_unwind(|| parse_module(m));
            let Ok(result) = result else {
                failures.push(format!("{key}: the parser panicked"));
                continue;
            };
            if rejects.contains(&key) {
                match result {
                    Err(_) => rejected += 1,
                    Ok(_) => failures.push(format!("{key}: XLA rejects it but we accept it")),
                }
                continue;
            }
            let module = match result {
                Ok(module) => module,
                Err(e) => {
                    failures.push(format!("{key}: {e}"));
                    continue;
                }
            };
            let printed = print_module(&module, &PrintOptions::default());
            let again = match parse_module(&printed) {
                Ok(m) => m,
                Err(e) => {
                    let line = printed.lines().nth(e.line.saturating_sub(1)).unwrap_or("");
                    failures.push(format!(
                        "{key}: the printed module does not parse: {e}\n    {line}"
                    ));
                    continue;
                }
            };
            if let Some(d) = module_diff(&module, &again) {
                failures.push(format!("{key}: print/parse changed the module: {d}"));
                continue;
            }
            let reprinted = print_module(&again, &PrintOptions::default());
            if reprinted != printed {
                let (n, x, y) = first_difference(&printed, &reprinted);
                failures.push(format!(
                    "{key}: printing again differs at line {n}:\n    {x}\n    {y}"
                ));
                continue;
            }
            // The short form parses to the same module too (checked on the smaller modules only,
            // to keep this debug-built test quick; the big ones add nothing new).
            if m.len() > 256 * 1024 {
                accepted += 1;
                continue;
            }
            let short = print_module(&module, &PrintOptions::short());
            match parse_module(&short) {
                Ok(s) => {
                    if let Some(d) = module_diff(&module, &s) {
                        failures.push(format!("{key}: the short form differs: {d}"));
                        continue;
                    }
                }
                Err(e) => {
                    failures.push(format!("{key}: the short form does not parse: {e}"));
                    continue;
                }
            }
            accepted += 1;
        }
    }
    eprintln!(
        "corpus: {} files, {accepted} modules accepted and round-tripped, {rejected} rejected as expected, {} failures",
        files.len(),
        failures.len()
    );
    if !failures.is_empty() {
        panic!(
            "{} corpus failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

/// Modules as XLA's own printer writes them (async shorthand, `order=`, `/*index=N*/` comments,
/// `has_dynamic_root`, layouts everywhere) parse and round-trip too.
#[test]
fn xla_printed_modules_round_trip() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/text/xla_printed");
    let files = hlo_files(&dir);
    assert!(files.len() >= 4, "fixtures missing in {}", dir.display());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let m = parse_module(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let printed = print_module(&m, &PrintOptions::default());
        let again = parse_module(&printed).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(module_diff(&m, &again), None, "{}", f.display());
        assert_eq!(print_module(&again, &PrintOptions::default()), printed);
    }
}
