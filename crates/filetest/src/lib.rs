//! The filetest runner.
//!
//! A filetest is an `.hlo` file with a `// RUN: tessera opt %s --passes ... [--pass-option ...]`
//! line and `// CHECK:` lines. [`run_dirs`] runs every such file under the given folders of
//! `testdata/` through [`tessera_pass::driver::run_opt`] — the function `tessera opt` calls, with
//! the RUN line read by [`OptSpec::from_run_line`] — and matches the output with litcheck's
//! FileCheck: CHECK, CHECK-NEXT, CHECK-SAME, CHECK-NOT, CHECK-DAG, CHECK-LABEL, `{{regex}}`,
//! `[[X:regex]]` captures and `[[X]]` uses.
//!
//! Each crate with passes runs its own folders with a registry holding its passes:
//! ```ignore
//! let mut registry = tessera_pass::Registry::with_generic_passes();
//! registry.add::<MyPass>();
//! tessera_filetest::assert_dirs(&["spmd"], &registry);
//! ```
//! `FILETEST=substring` in the environment runs only files whose path contains it.

use std::path::{Path, PathBuf};

use litcheck_filecheck::litcheck::diagnostics::{miette, FileName, SourceLanguage, SourceManager};
use litcheck_filecheck::{Config, Test};
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::Registry;

/// The repository's `testdata/` folder.
pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// What a run found.
#[derive(Debug, Default)]
pub struct Summary {
    /// Files with a RUN line that passed.
    pub passed: Vec<String>,
    /// One report per failing file.
    pub failures: Vec<String>,
}

/// Runs FileCheck of the CHECK lines in `checks` over `output`; `Err` is FileCheck's annotated
/// explanation.
pub fn filecheck(check_name: &str, checks: &str, output: &str) -> Result<(), String> {
    let config = Config::default();
    let sm: &dyn SourceManager = &*config.source_manager;
    let c = sm.load(
        SourceLanguage::Unknown,
        FileName::from(check_name.to_string()),
        checks.to_string(),
    );
    let o = sm.load(
        SourceLanguage::Unknown,
        FileName::from("<tessera opt output>".to_string()),
        output.to_string(),
    );
    Test::new(c, &config)
        .verify(o)
        .map(|_| ())
        .map_err(|r| render(&r))
}

/// How long one file's FileCheck may take. litcheck compiles each group of consecutive
/// CHECK-DAG patterns that are regular expressions into one dense DFA; a group of several
/// `{{.*}}` patterns can make that DFA exponentially large (minutes and gigabytes). A test
/// that hits this fails with a message instead of hanging CI.
const FILECHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// [`filecheck`] on a worker thread, failing after [`FILECHECK_DEADLINE`]. The worker of a
/// timed-out check is left running; the test process ends with it.
fn filecheck_with_deadline(check_name: &str, checks: &str, output: &str) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (name, checks_owned, output_owned) = (
        check_name.to_string(),
        checks.to_string(),
        output.to_string(),
    );
    std::thread::spawn(move || {
        let _ = tx.send(filecheck(&name, &checks_owned, &output_owned));
    });
    match rx.recv_timeout(FILECHECK_DEADLINE) {
        Ok(result) => result,
        Err(_) => Err(format!(
            "FileCheck did not finish within {} s: a group of consecutive CHECK-DAG regex \
             patterns is compiled into one DFA that can grow exponentially; use ordered CHECK \
             lines (the printer keeps instruction order) or split the group",
            FILECHECK_DEADLINE.as_secs()
        )),
    }
}

/// FileCheck's report with source snippets of the check file and the output, without colours.
fn render(report: &miette::Report) -> String {
    let mut s = String::new();
    let handler =
        miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
            .with_width(120);
    if handler.render_report(&mut s, report.as_ref()).is_err() {
        s = format!("{report:?}");
    }
    s
}

fn numbered(text: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(k, l)| format!("{:>4} | {l}\n", k + 1))
        .collect()
}

/// Runs one file; `Ok(n)` is the number of RUN lines (0: not a filetest).
pub fn run_file(path: &Path, registry: &Registry) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let runs: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("// RUN:"))
        .collect();
    let hooks = default_hooks();
    for run in &runs {
        let spec = OptSpec::from_run_line(run).map_err(|e| e.to_string())?;
        let out = run_opt(&text, &spec, registry, &hooks)
            .map_err(|e| format!("{run}\n  tessera opt failed: {e}"))?;
        filecheck_with_deadline(&path.display().to_string(), &text, &out.text).map_err(|e| {
            format!(
                "{run}\n--- FileCheck ---\n{e}\n--- output ---\n{}",
                numbered(&out.text)
            )
        })?;
    }
    Ok(runs.len())
}

/// Runs every filetest under `testdata/<dir>` for each of `dirs`, honouring `FILETEST`.
pub fn run_dirs(dirs: &[&str], registry: &Registry) -> Summary {
    let filter = std::env::var("FILETEST").unwrap_or_default();
    let root = testdata();
    let mut files = Vec::new();
    for d in dirs {
        files.extend(tessera_corpus::hlo_files(&root.join(d)));
    }
    let mut s = Summary::default();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
        if !rel.contains(&filter) {
            continue;
        }
        match run_file(&f, registry) {
            Ok(0) => {}
            Ok(_) => s.passed.push(rel),
            Err(e) => s.failures.push(format!("=== testdata/{rel}\n{e}")),
        }
    }
    s
}

/// [`run_dirs`], panicking with every failure's report; also fails when no file ran (unless a
/// `FILETEST` filter is set), so a misplaced folder does not pass silently.
pub fn assert_dirs(dirs: &[&str], registry: &Registry) {
    let s = run_dirs(dirs, registry);
    eprintln!(
        "filetests in {dirs:?}: {} passed, {} failed",
        s.passed.len(),
        s.failures.len()
    );
    assert!(s.failures.is_empty(), "\n{}", s.failures.join("\n\n"));
    assert!(
        !s.passed.is_empty() || std::env::var("FILETEST").is_ok(),
        "no filetest found in testdata/{dirs:?}"
    );
}
