//! The tidy test: the tree agrees with docs/ARCHITECTURE.md. Each test names what drifted and
//! where, so that the fix is to change either the code or the page, on purpose.

use std::collections::BTreeSet;

use tessera_xtask::{
    files_below, layer_table, manifest, named_paths, path_exists, read, workspace_members,
};

const ARCHITECTURE: &str = "docs/ARCHITECTURE.md";

/// The one file that builds the registry of every pass.
const REGISTRY: &str = "crates/compile/src/lib.rs";

fn fail_on(problems: Vec<String>, what: &str) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let layers = layer_table(&read(ARCHITECTURE).unwrap()).unwrap();
    let top = layers.values().copied().max().unwrap_or(0);
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for member in workspace_members(&read("Cargo.toml").unwrap()) {
        let m = manifest(&read(&format!("{member}/Cargo.toml")).unwrap());
        seen.insert(m.name.clone());
        let Some(&own) = layers.get(&m.name) else {
            problems.push(format!(
                "{} ({member}) is in no layer of {ARCHITECTURE}",
                m.name
            ));
            continue;
        };
        for dep in &m.deps {
            match layers.get(dep) {
                Some(&l) if l < own => {}
                Some(&l) => problems.push(format!(
                    "{} (layer {own}) depends on {dep} (layer {l}): only lower layers",
                    m.name
                )),
                None => problems.push(format!("{}: {dep} is in no layer", m.name)),
            }
        }
        for dep in &m.dev_deps {
            if layers.get(dep) == Some(&top) {
                problems.push(format!(
                    "{}'s tests use {dep}, of the top layer: nothing depends on it",
                    m.name
                ));
            }
        }
    }
    for name in layers.keys().filter(|n| !seen.contains(*n)) {
        problems.push(format!(
            "{ARCHITECTURE} names {name}, not a workspace crate"
        ));
    }
    fail_on(problems, "the layering rule");
}

#[test]
fn paths_named_in_architecture_exist() {
    let files = files_below("");
    let mut tops: Vec<&str> = files
        .iter()
        .filter_map(|f| f.split_once('/'))
        .map(|p| p.0)
        .collect();
    tops.dedup();
    let problems: Vec<String> = named_paths(&read(ARCHITECTURE).unwrap(), &tops)
        .into_iter()
        .filter(|p| !path_exists(p, &files))
        .map(|p| format!("`{p}` is named in {ARCHITECTURE} but is not in the tree"))
        .collect();
    fail_on(problems, "paths");
}

#[test]
fn architecture_is_a_ten_minute_read() {
    let words = read(ARCHITECTURE).unwrap().split_whitespace().count();
    assert!(
        words <= 1300,
        "{ARCHITECTURE} has {words} words, over 1,300: move detail to the crate's page in docs/"
    );
}

/// Source files that are not tests: each member's `src/`, `examples/` and `benches/`, and the
/// fuzz targets. Files named `tests.rs` are unit-test modules.
fn source_files() -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs: Vec<String> = workspace_members(&read("Cargo.toml").unwrap())
        .into_iter()
        .flat_map(|m| ["src", "examples", "benches"].map(|d| format!("{m}/{d}")))
        .collect();
    dirs.push("fuzz/fuzz_targets".into());
    for dir in dirs {
        out.extend(
            files_below(&dir)
                .into_iter()
                .filter(|f| f.ends_with(".rs") && !f.ends_with("/tests.rs")),
        );
    }
    out
}

#[test]
fn every_source_file_opens_with_its_module_doc() {
    let problems: Vec<String> = source_files()
        .into_iter()
        .filter(|f| {
            let text = read(f).unwrap_or_default();
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            !first.is_some_and(|l| l.starts_with("//!"))
        })
        .map(|f| format!("{f}: no `//!` paragraph saying what the file is for"))
        .collect();
    fail_on(problems, "module docs");
}

/// The pass crates whose `register` a source file calls: `tessera_spmd::register(` -> `spmd`.
fn registered_crates(text: &str) -> Vec<&str> {
    text.match_indices("::register(&mut")
        .filter_map(|(at, _)| {
            let before = &text[..at];
            let start = before.rfind("tessera_")? + "tessera_".len();
            let name = &before[start..];
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then_some(name)
        })
        .collect()
}

#[test]
fn one_registry_names_every_pass() {
    // Only the one registry lists the passes of every crate; a pass crate's own examples may
    // register its own passes. A second list is how the benches' copy lost `variable-dedup`.
    let mut problems = Vec::new();
    for f in source_files().into_iter().filter(|f| f != REGISTRY) {
        let text = read(&f).unwrap_or_default();
        for name in registered_crates(&text) {
            if !f.starts_with(&format!("passes/{name}/")) {
                problems.push(format!(
                    "{f} registers tessera_{name}'s passes: use `registry()` of {REGISTRY}"
                ));
            }
        }
    }
    fail_on(problems, "registries");
    let text = read(REGISTRY).unwrap();
    assert!(
        text.contains("pub fn registry() -> Registry"),
        "{REGISTRY} no longer has `registry()`: update this test"
    );
    assert!(
        !registered_crates(&text).is_empty(),
        "{REGISTRY} registers no pass crate: update this test"
    );
}
