//! Filetests: every `testdata/**/*.hlo` with a `// RUN: tessera opt ...` line is run through the
//! same driver function as `tessera opt` (in-process), and the output is matched against the
//! file's `// CHECK:` lines with FileCheck semantics (CHECK, CHECK-NEXT, CHECK-SAME, CHECK-NOT,
//! CHECK-DAG, CHECK-LABEL, `[[X:regex]]` captures and `[[X]]` uses), by litcheck-filecheck.
//!
//! `FILETEST=substring cargo test -p tessera-pass --test filetests` runs only matching files.
//! A failure shows the file, the RUN line, FileCheck's explanation and the numbered output.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use litcheck_filecheck::litcheck::diagnostics::{miette, FileName, SourceLanguage, SourceManager};
use litcheck_filecheck::{Config, Test};
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::Registry;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "hlo") {
            out.push(p);
        }
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

/// Runs one file; `Err` is the failure report.
fn run_file(path: &Path, registry: &Registry) -> Result<usize, String> {
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
        let config = Config::default();
        let sm: &dyn SourceManager = &*config.source_manager;
        let check_file = sm.load(
            SourceLanguage::Unknown,
            FileName::from(path.display().to_string()),
            text.clone(),
        );
        let output = sm.load(
            SourceLanguage::Unknown,
            FileName::from("<tessera opt output>".to_string()),
            out.text.clone(),
        );
        let mut test = Test::new(Arc::clone(&check_file), &config);
        if let Err(report) = test.verify(output) {
            return Err(format!(
                "{run}\n--- FileCheck ---\n{}\n--- output ---\n{}",
                render(&report),
                numbered(&out.text)
            ));
        }
    }
    Ok(runs.len())
}

#[test]
fn filetests() {
    let mut files = Vec::new();
    collect(&testdata(), &mut files);
    let filter = std::env::var("FILETEST").unwrap_or_default();
    let registry = tessera_pass::Registry::with_generic_passes();
    let mut failures = Vec::new();
    let mut ran = 0;
    for f in files {
        let rel = f
            .strip_prefix(testdata())
            .unwrap_or(&f)
            .display()
            .to_string();
        if !rel.contains(&filter) {
            continue;
        }
        // Data files (corpus copies, fixtures) have no RUN line and are skipped.
        match run_file(&f, &registry) {
            Ok(0) => {}
            Ok(_) => ran += 1,
            Err(e) => failures.push(format!("=== testdata/{rel}\n{e}")),
        }
    }
    eprintln!("filetests: {ran} files passed, {} failed", failures.len());
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
    assert!(ran > 0 || !filter.is_empty(), "no filetest ran");
}

/// Runs FileCheck of `checks` over `output`; `Err` is the report.
fn filecheck(checks: &str, output: &str) -> Result<(), String> {
    let config = Config::default();
    let sm: &dyn SourceManager = &*config.source_manager;
    let c = sm.load(
        SourceLanguage::Unknown,
        FileName::from("checks".to_string()),
        checks.to_string(),
    );
    let o = sm.load(
        SourceLanguage::Unknown,
        FileName::from("output".to_string()),
        output.to_string(),
    );
    Test::new(c, &config)
        .verify(o)
        .map(|_| ())
        .map_err(|r| render(&r))
}

#[test]
fn filecheck_directives_behave_like_llvm() {
    let out = "%a = f32[4]{0} parameter(0)\n%b = f32[4]{0} negate(f32[4]{0} %a)\nROOT %c = f32[4]{0} add(f32[4]{0} %a, f32[4]{0} %b)\n";
    let ok = [
        "// CHECK: parameter(0)\n// CHECK-NEXT: negate\n",
        "// CHECK: %[[P:[a-z]+]] = f32[4]{0} parameter\n// CHECK: negate(f32[4]{0} %[[P]])\n",
        "// CHECK: ROOT\n// CHECK-SAME: add(\n",
        "// CHECK: parameter\n// CHECK-NOT: exponential\n// CHECK: add\n",
        "// CHECK-DAG: negate\n// CHECK-DAG: parameter\n",
    ];
    for c in ok {
        filecheck(c, out).unwrap_or_else(|e| panic!("{c}\n{e}"));
    }
    let bad = [
        "// CHECK: parameter(0)\n// CHECK-NEXT: add\n",
        "// CHECK: %[[P:[a-z]+]] = f32[4]{0} negate\n// CHECK: parameter(f32[4]{0} %[[P]])\n",
        "// CHECK: ROOT\n// CHECK-SAME: negate\n",
        "// CHECK: parameter\n// CHECK-NOT: negate\n// CHECK: add\n",
        "// CHECK: subtract\n",
    ];
    for c in bad {
        assert!(filecheck(c, out).is_err(), "accepted:\n{c}");
    }
}
