//! Checks of the repository itself, run by `cargo test` (rust-analyzer's `xtask/src/tidy.rs`
//! habit): the test `tests/tidy.rs` fails when the tree drifts from what docs/ARCHITECTURE.md
//! says of it.
//!
//! The layer table is written once, in docs/ARCHITECTURE.md (its `layer N` lines): each
//! workspace crate has a layer, and a crate's `[dependencies]` name only crates of lower
//! layers. This crate reads the table from there and the dependencies from each `Cargo.toml`,
//! with a line reader that knows just the TOML the workspace writes (no TOML crate, so that
//! the check builds in seconds).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The repository's root (this crate sits one folder below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits inside the repository")
        .to_path_buf()
}

/// Reads `path` below the root; a missing file is a check failure, reported by the caller.
pub fn read(path: &str) -> Result<String, String> {
    fs::read_to_string(repo_root().join(path)).map_err(|e| format!("{path}: {e}"))
}

/// The layer table of docs/ARCHITECTURE.md: every line `layer N  crate crate ...`, from crate
/// name to `N`.
pub fn layer_table(architecture: &str) -> Result<BTreeMap<String, u32>, String> {
    let mut layers = BTreeMap::new();
    for line in architecture.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("layer") {
            continue;
        }
        let Some(Ok(n)) = words.next().map(str::parse::<u32>) else {
            continue;
        };
        for name in words {
            if layers.insert(name.to_string(), n).is_some() {
                return Err(format!("`{name}` is in two layers of the layer table"));
            }
        }
    }
    if layers.is_empty() {
        return Err("docs/ARCHITECTURE.md has no `layer N  crate ...` lines".into());
    }
    Ok(layers)
}

/// The folders of the workspace's members, from the root `Cargo.toml`'s `members = [...]`.
pub fn workspace_members(root_manifest: &str) -> Vec<String> {
    let Some(start) = root_manifest.find("members") else {
        return Vec::new();
    };
    let rest = &root_manifest[start..];
    let list = &rest[rest.find('[').map_or(0, |i| i + 1)..rest.find(']').unwrap_or(rest.len())];
    list.split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A member's manifest, as far as the checks need it.
#[derive(Debug, Default)]
pub struct Manifest {
    pub name: String,
    /// Workspace crates (`tessera-*`) under `[dependencies]` and `[build-dependencies]`.
    pub deps: Vec<String>,
    /// Workspace crates under `[dev-dependencies]`.
    pub dev_deps: Vec<String>,
}

/// Reads the package name and the `tessera-*` dependencies of one `Cargo.toml`.
pub fn manifest(text: &str) -> Manifest {
    let mut m = Manifest::default();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            m.name = value.trim().trim_matches('"').to_string();
            continue;
        }
        let dep = key.split('.').next().unwrap_or(key).trim_matches('"');
        if !dep.starts_with("tessera-") {
            continue;
        }
        if section.ends_with("dev-dependencies") {
            m.dev_deps.push(dep.to_string());
        } else if section.ends_with("dependencies") {
            m.deps.push(dep.to_string());
        }
    }
    m
}

/// Every file git would see below `dir` (relative to the root), skipping build output and
/// dependency folders, sorted.
pub fn files_below(dir: &str) -> Vec<String> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) {
        let Ok(entries) = fs::read_dir(root.join(rel)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let path = rel.join(&name);
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(root, &path, out),
                Ok(t) if t.is_file() => out.push(path.to_string_lossy().replace('\\', "/")),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_root(), Path::new(dir), &mut out);
    out.sort();
    out
}

/// The paths a page mentions in backticks: a word that starts with one of the repository's
/// top folders (`crates/hlo`), ends in `/`, or ends in one of its file endings (`rare.rs`).
/// Patterns (`*`, `<area>`) and Rust paths (`a::b`) are not paths.
pub fn named_paths(page: &str, top_folders: &[&str]) -> Vec<String> {
    const ENDINGS: &[&str] = &[".rs", ".md", ".sh", ".py", ".toml", ".hlo", ".json"];
    let mut out = Vec::new();
    for (i, span) in page.split('`').enumerate() {
        if i % 2 == 0 || span.contains(['*', '<', ' ', ':', '$', '(']) {
            continue;
        }
        let in_top = span
            .split_once('/')
            .is_some_and(|(top, _)| top_folders.contains(&top));
        if in_top || span.ends_with('/') || ENDINGS.iter().any(|e| span.ends_with(e)) {
            out.push(span.to_string());
        }
    }
    out
}

/// Whether a named path exists: a name with a `/` is a path from the root or the tail of
/// one (`src/remat/list.rs`), a bare name is some file's or folder's name.
pub fn path_exists(name: &str, files: &[String]) -> bool {
    let name = name.trim_end_matches('/');
    let tail = format!("/{name}");
    files.iter().any(|f| {
        // A folder exists when some file lies below it.
        let as_dir = |p: &str| f.starts_with(&format!("{p}/")) || f.contains(&format!("/{p}/"));
        f == name || f.ends_with(&tail) || as_dir(name)
    })
}
