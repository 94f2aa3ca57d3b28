//! Broken modules in testdata/verifier/*.hlo: each file's module must parse, every
//! `// EXPECT-ERROR: <substring>` line must match at least one verifier finding (as printed:
//! `computation: %instruction: message`), and no finding may go unexpected.
//! `// VERIFY-OPTIONS: name=value ...` sets [`VerifyOptions`] fields
//! (`allow_dangling_computations`, `allow_mixed_precision`, `layout_sensitive`,
//! `allow_unbounded_dynamism`, `num_devices`). `// SCHEDULE: comp: a, b, c` replaces the
//! schedule of computation `comp` with the named instructions (the text itself can only hold
//! valid orders, since operands must be defined before use).

use std::path::Path;

use tessera_hlo::verify::{findings, VerifyOptions};
use tessera_hlo::Module;

fn apply_schedule_lines(text: &str, m: &mut Module) -> Result<(), String> {
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("// SCHEDULE:") else {
            continue;
        };
        let (comp, list) = rest.split_once(':').ok_or("SCHEDULE needs `comp: a, b`")?;
        let c = m
            .find_computation(comp.trim())
            .ok_or(format!("no computation `{}`", comp.trim()))?;
        let mut seq = Vec::new();
        for n in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            seq.push(
                m.find_instruction(n)
                    .ok_or(format!("no instruction `{n}`"))?,
            );
        }
        m.schedule
            .get_or_insert_with(Default::default)
            .sequences
            .insert(c, seq);
    }
    Ok(())
}

fn options(text: &str) -> Result<VerifyOptions, String> {
    let mut o = VerifyOptions::default();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("// VERIFY-OPTIONS:") else {
            continue;
        };
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=').ok_or(format!("bad option `{kv}`"))?;
            let b = || v.parse::<bool>().map_err(|e| format!("{k}: {e}"));
            match k {
                "allow_dangling_computations" => o.allow_dangling_computations = b()?,
                "allow_mixed_precision" => o.allow_mixed_precision = b()?,
                "layout_sensitive" => o.layout_sensitive = b()?,
                "allow_unbounded_dynamism" => o.allow_unbounded_dynamism = b()?,
                "num_devices" => o.num_devices = Some(v.parse().map_err(|e| format!("{k}: {e}"))?),
                _ => return Err(format!("unknown option `{k}`")),
            }
        }
    }
    Ok(o)
}

#[test]
fn verifier_filetests() {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/verifier"
    ));
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("testdata/verifier")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "hlo"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 15,
        "expected at least 15 cases, found {}",
        paths.len()
    );
    let mut problems = Vec::new();
    for p in &paths {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(p).unwrap();
        let expects: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("// EXPECT-ERROR:"))
            .map(str::trim)
            .collect();
        if expects.is_empty() {
            problems.push(format!("{name}: no EXPECT-ERROR lines"));
            continue;
        }
        let opts = match options(&text) {
            Ok(o) => o,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        let mut module = match tessera_hlo::text::parse_module(&text) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{name}: does not parse: {e}"));
                continue;
            }
        };
        if let Err(e) = apply_schedule_lines(&text, &mut module) {
            problems.push(format!("{name}: {e}"));
            continue;
        }
        let found: Vec<String> = findings(&module, &opts)
            .iter()
            .map(|f| f.to_string())
            .collect();
        for e in &expects {
            if !found.iter().any(|f| f.contains(e)) {
                problems.push(format!(
                    "{name}: no finding contains `{e}`; findings:\n      {}",
                    found.join("\n      ")
                ));
            }
        }
        // Every finding is one the file expects: the rest of the module is valid.
        for f in &found {
            if !expects.iter().any(|e| f.contains(e)) {
                problems.push(format!("{name}: unexpected finding: {f}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
