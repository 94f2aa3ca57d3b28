//! The generic passes over the real modules of the shared XLA corpus: every module that parses
//! and verifies must still verify after `inline,fix(tuple-simplify,dce),flatten-call-graph`, and
//! its call graph must be flat afterwards. Files over 64 KiB are skipped to keep the debug test
//! fast (the big ones are exercised by `tessera opt`, see docs/passes.md).

use tessera_hlo::analysis::CallGraph;
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_pass::Registry;

#[test]
fn generic_passes_keep_corpus_modules_valid() {
    let Some(root) = tessera_corpus::root_or_skip("generic_passes_keep_corpus_modules_valid")
    else {
        return;
    };
    let files = tessera_corpus::hlo_files(&root);
    let registry = Registry::with_generic_passes();
    let opts = VerifyOptions::default();
    let (mut ran, mut changed) = (0, 0);
    let mut failures = Vec::new();
    for f in files {
        if std::fs::metadata(&f).map_or(true, |m| m.len() > 64 * 1024) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (k, part) in tessera_corpus::split_modules(&text).iter().enumerate() {
            let Ok(mut m) = tessera_hlo::text::parse_module(part) else {
                continue;
            };
            if verify(&m, &opts).is_err() {
                continue;
            }
            let mut p = registry
                .build_pipeline("inline,fix(tuple-simplify,dce),flatten-call-graph", &[])
                .unwrap();
            p.add_checker("verifier", move |m| {
                verify(m, &VerifyOptions::default()).map_err(|e| e.to_string())
            });
            let name = format!("{}:{k}", f.strip_prefix(&root).unwrap().display());
            match p.run_with_report(&mut m) {
                Ok(r) => {
                    ran += 1;
                    changed += usize::from(r.changed);
                    if !CallGraph::new(&m).is_flattened(&m) {
                        failures.push(format!("{name}: not flat after flatten-call-graph"));
                    }
                }
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    eprintln!("corpus: {ran} modules through the generic passes, {changed} changed");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran > 300, "only {ran} corpus modules ran");
}
