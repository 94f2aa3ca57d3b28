//! Filetests of `variable-dedup` (testdata/dedup), run in-process through `tessera opt`'s
//! driver. Besides the CHECK files: `refuse-*.hlo` files hold a `// RUN-ERROR:` command and
//! `// ERROR:` lines that the pass's error must contain, and every `same-*.hlo` file (no duplicates) must come out
//! byte-identical to its input as printed.
//! `FILETEST=substring cargo test -p tessera-dedup --test filetests` runs only matching files.

use std::path::PathBuf;

use tessera_filetest::assert_dirs;
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::Registry;

fn registry() -> Registry {
    let mut r = Registry::with_generic_passes();
    tessera_dedup::register(&mut r);
    // Files that show what propagation makes of a merged parameter.
    tessera_spmd::register(&mut r);
    r
}

fn files(prefix: &str) -> Vec<PathBuf> {
    let dir = tessera_filetest::testdata().join("dedup");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "hlo")
                && p.file_name().unwrap().to_string_lossy().starts_with(prefix)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn filetests() {
    assert_dirs(&["dedup"], &registry());
}

/// Each refusal's message, from the `// ERROR:` line (and a second `// ERROR:` line, if any).
#[test]
fn refusals_name_both_parameters() {
    let r = registry();
    let hooks = default_hooks();
    let mut n = 0;
    for path in files("refuse-") {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let run = text
            .lines()
            .find(|l| l.starts_with("// RUN-ERROR:"))
            .unwrap();
        let spec = OptSpec::from_run_line(run).unwrap();
        let err = match run_opt(&text, &spec, &r, &hooks) {
            Ok(out) => panic!("{name}: not refused:\n{}", out.text),
            Err(e) => e.to_string(),
        };
        let wants: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("// ERROR: "))
            .collect();
        assert!(!wants.is_empty(), "{name}: no // ERROR: line");
        for want in wants {
            assert!(
                err.contains(want),
                "{name}: error\n  {err}\ndoes not contain\n  {want}"
            );
        }
        n += 1;
    }
    assert!(n >= 7, "only {n} refusal files");
}

/// A module without duplicates comes out exactly as it went in (printed).
#[test]
fn no_duplicates_is_byte_identical() {
    let r = registry();
    let hooks = default_hooks();
    let mut n = 0;
    for path in files("same-") {
        let text = std::fs::read_to_string(&path).unwrap();
        let spec = OptSpec::from_run_line(text.lines().next().unwrap()).unwrap();
        let out = run_opt(&text, &spec, &r, &hooks).unwrap();
        let input = (hooks.print)(&(hooks.parse)(&text).unwrap());
        assert_eq!(out.text, input, "{}", path.display());
        n += 1;
    }
    assert!(n >= 2, "only {n} same-*.hlo files");
}
