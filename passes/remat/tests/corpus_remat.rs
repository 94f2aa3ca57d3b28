//! Rematerialization over the real modules of the shared XLA corpus: every module that parses,
//! verifies and can be scheduled is rematerialized with limits of 90%, 50% and 0% of its
//! scheduled peak with single instructions, and 50% and 0% with blocks of up to four, with the
//! tracker's invariants (and the fast search's run lengths) checked after every change. The pass must
//! not fail, the module must still verify (schedule included), and the fast and faithful
//! searches must agree. The peak must not grow: where the greedy's result peaks above the input
//! (14 of the 2375 runs: a move past a small constant defined after the original, or a clone
//! reviving a scalar operand over earlier points; see docs/rematerialization.md, "Never above
//! the input"), `peak_guard` returns the input unchanged, and the summary says so. Files over
//! 16 KiB are skipped to keep the
//! debug test fast.

use tessera_hlo::analysis::shape_size;
use tessera_hlo::text::{print_module, PrintOptions};
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_remat::{
    peak_memory, schedule_module, RematOptions, Rematerialization, SchedulerKind, SearchKind,
};

#[test]
fn rematerialization_keeps_corpus_modules_valid() {
    let Some(root) = tessera_corpus::root_or_skip("rematerialization_keeps_corpus_modules_valid")
    else {
        return;
    };
    let files = tessera_corpus::hlo_files(&root);
    let opts = VerifyOptions::default();
    let mut ran = 0;
    let mut changed = 0;
    let mut failures = Vec::new();
    let mut grew = Vec::new();
    let mut reverted = Vec::new();
    for f in files {
        if std::fs::metadata(&f).map_or(true, |m| m.len() > 16 * 1024) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (k, part) in tessera_corpus::split_modules(&text).iter().enumerate() {
            let Ok(mut m) = tessera_hlo::text::parse_module(part) else {
                continue;
            };
            if m.entry().is_none() || verify(&m, &opts).is_err() {
                continue;
            }
            if schedule_module(&mut m, SchedulerKind::PostOrder, &shape_size).is_err()
                || verify(&m, &opts).is_err()
            {
                continue;
            }
            let name = format!("{}:{k}", f.strip_prefix(&root).unwrap().display());
            let peak = {
                let mut p = Rematerialization::new(RematOptions::default());
                match p.run_with_summary(&mut m.clone()) {
                    Ok(s) => s.peak_before,
                    Err(e) => {
                        failures.push(format!("{name}: measuring: {e}"));
                        continue;
                    }
                }
            };
            ran += 1;
            // Single instructions at three limits; blocks of up to four at two.
            for (pct, block) in [(90, 1), (50, 1), (0, 1), (50, 4), (0, 4)] {
                let mut outs = Vec::new();
                for search in [SearchKind::Fast, SearchKind::Faithful] {
                    let mut mm = m.clone();
                    let mut p = Rematerialization::new(RematOptions {
                        memory_limit: Some(peak * pct / 100),
                        search,
                        block_size_limit: block,
                        check_invariants: true,
                        ..RematOptions::default()
                    });
                    match p.run_with_summary(&mut mm) {
                        Ok(s) => {
                            if let Err(e) = verify(&mm, &opts) {
                                failures.push(format!(
                                    "{name} at {pct}%, blocks {block}: invalid after: {e}"
                                ));
                            }
                            // The summary reports the result's peak, measured along its
                            // final schedule.
                            match peak_memory(&mm, mm.schedule.as_ref().unwrap(), &shape_size) {
                                Ok(mem) if mem.peak_bytes == s.peak_after => {}
                                Ok(mem) => failures.push(format!(
                                    "{name} at {pct}%, blocks {block} ({search:?}): summary peak {} but measured {}",
                                    s.peak_after, mem.peak_bytes
                                )),
                                Err(e) => failures.push(format!(
                                    "{name} at {pct}%, blocks {block}: measuring after: {e}"
                                )),
                            }
                            if let (Some(r), SearchKind::Fast) = (s.reverted, search) {
                                reverted.push(format!(
                                    "{name} at {pct}%, blocks {block}: {} -> {r}",
                                    s.peak_before
                                ));
                                if s.instructions_rematerialized != 0
                                    || print_module(&mm, &PrintOptions::default())
                                        != print_module(&m, &PrintOptions::default())
                                {
                                    failures.push(format!(
                                        "{name} at {pct}%, blocks {block}: reverted but changed"
                                    ));
                                }
                            }
                            if s.peak_after > s.peak_before && search == SearchKind::Fast {
                                grew.push(format!(
                                    "{name} at {pct}%, blocks {block}: {} -> {}",
                                    s.peak_before, s.peak_after
                                ));
                            }
                            if s.instructions_rematerialized > 0 && search == SearchKind::Fast {
                                changed += 1;
                            }
                            outs.push(print_module(&mm, &PrintOptions::default()));
                        }
                        Err(e) => failures.push(format!(
                            "{name} at {pct}%, blocks {block} ({search:?}): {e}"
                        )),
                    }
                }
                if outs.len() == 2 && outs[0] != outs[1] {
                    failures.push(format!(
                        "{name} at {pct}%, blocks {block}: fast and faithful differ"
                    ));
                }
            }
        }
    }
    eprintln!(
        "{ran} corpus modules rematerialized at 5 settings, {changed} runs changed something; reverted (the result peaked above the input) in {}:\n{}",
        reverted.len(),
        reverted.join("\n")
    );
    assert!(
        grew.is_empty(),
        "the peak grew in {} runs:\n{}",
        grew.len(),
        grew.join("\n")
    );
    // Reverting is the exception, not the rule (14 of 2375 runs when this was written).
    assert!(
        reverted.len() * 100 <= ran * 5,
        "reverted in {} runs",
        reverted.len()
    );
    assert!(ran > 300, "only {ran} modules ran");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
