//! Filetests of the schedulers, the memory accounting and rematerialization (testdata/remat),
//! run in-process through `tessera opt`'s driver by tessera-filetest.
//! `FILETEST=substring cargo test -p tessera-remat --test filetests` runs only matching files.

use tessera_filetest::assert_dirs;
use tessera_pass::Registry;

#[test]
fn filetests() {
    let mut r = Registry::with_generic_passes();
    tessera_remat::register(&mut r);
    assert_dirs(&["remat"], &r);
}

/// Every `remat-*.hlo` file that prints its summary: the "peak before" and "peak after" it
/// reports (and checks with CHECK lines) are the peaks `peak_memory` measures, independently of
/// the pass's tracker, on the input's schedule and on the output module, with the size function
/// the RUN line names.
#[test]
fn summary_peaks_are_independent_peak_memory_measures() {
    use tessera_hlo::analysis::shape_size;
    use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
    use tessera_remat::peak_memory;
    use tessera_remat::remat::size_pad_minor_to_64;

    let mut r = Registry::with_generic_passes();
    tessera_remat::register(&mut r);
    let hooks = default_hooks();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/remat");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "hlo")
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("remat-")
        })
        .collect();
    files.sort();
    let number = |text: &str, key: &str| -> i64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no `{key}` line"));
        line[key.len()..]
            .trim()
            .trim_end_matches(" bytes")
            .parse()
            .unwrap()
    };
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let run = text.lines().next().unwrap();
        if !run.contains("remat.print_summary=true")
            || !run.contains("passes schedule,rematerialization ")
        {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let size: &dyn Fn(&tessera_hlo::Shape) -> i64 = if run.contains("pad-minor-64") {
            &size_pad_minor_to_64
        } else {
            &shape_size
        };
        let spec = OptSpec::from_run_line(run).unwrap();
        let out = run_opt(&text, &spec, &r, &hooks).unwrap();
        // Before: the input on the schedule the pipeline's `schedule` pass gives it.
        let mut sched = spec.clone();
        sched.passes = "schedule".into();
        sched.pass_options.retain(|o| o.starts_with("schedule."));
        let input = run_opt(&text, &sched, &r, &hooks).unwrap().module;
        let before = peak_memory(&input, input.schedule.as_ref().unwrap(), size).unwrap();
        let after = peak_memory(&out.module, out.module.schedule.as_ref().unwrap(), size).unwrap();
        assert_eq!(
            number(&out.text, "// peak before:"),
            before.peak_bytes,
            "{name}: peak before"
        );
        assert_eq!(
            number(&out.text, "// peak after:"),
            after.peak_bytes,
            "{name}: peak after"
        );
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} files print their summary");
}
