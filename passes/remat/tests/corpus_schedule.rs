//! The schedulers over the real modules of the shared XLA corpus: every module that parses and
//! verifies gets a schedule from the default scheduler (which runs list, DFS and post-order on
//! every computation and checks each sequence), the module still verifies with it, and the
//! reported peak is the peak of the schedule measured again. Files over 64 KiB are skipped to
//! keep the debug test fast (the largest module is timed by benches/schedule.rs).

use tessera_hlo::analysis::shape_size;
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_remat::{peak_memory, schedule_module, SchedulerKind};

#[test]
fn default_scheduler_gives_valid_schedules_on_the_corpus() {
    let Some(root) =
        tessera_corpus::root_or_skip("default_scheduler_gives_valid_schedules_on_the_corpus")
    else {
        return;
    };
    let files = tessera_corpus::hlo_files(&root);
    let opts = VerifyOptions::default();
    let mut ran = 0;
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
            if m.entry().is_none() || verify(&m, &opts).is_err() {
                continue;
            }
            let name = format!("{}:{k}", f.strip_prefix(&root).unwrap().display());
            ran += 1;
            let report = match schedule_module(&mut m, SchedulerKind::Default, &shape_size) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{name}: {e}"));
                    continue;
                }
            };
            if let Err(e) = verify(&m, &opts) {
                failures.push(format!("{name}: invalid after scheduling: {e}"));
                continue;
            }
            let again = peak_memory(&m, m.schedule.as_ref().unwrap(), &shape_size).unwrap();
            if again.peak_bytes != report.peak_bytes() || again.peak_bytes < again.output_bytes {
                failures.push(format!(
                    "{name}: peak {} reported, {} measured",
                    report.peak_bytes(),
                    again.peak_bytes
                ));
            }
        }
    }
    assert!(ran > 300, "only {ran} corpus modules scheduled");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
