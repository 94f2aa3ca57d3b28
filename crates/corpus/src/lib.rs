//! Test and bench support: the one place that knows where the XLA HLO corpus is.
//!
//! The corpus (424 real HLO files from XLA's tree) is not part of the repository. It is found
//! at `$TESSERA_CORPUS` when that is set, else at `../shared/corpus/xla-hlo` beside the
//! repository. Where neither exists, [`root_or_skip`] says on one line what is skipped and how
//! to point at a corpus, and the caller passes without it; a `TESSERA_CORPUS` that names no
//! directory is a mistake and panics. Every corpus test and bench of the workspace goes
//! through here (no crate of ours depends on this one except as a dev-dependency).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The environment variable that names the corpus directory.
pub const ENV: &str = "TESSERA_CORPUS";

/// The corpus directory, or `None` when there is none.
///
/// # Panics
/// When `TESSERA_CORPUS` is set to something that is not a directory.
pub fn root() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.is_dir(),
            "{ENV}={} is not a directory; point it at the xla-hlo corpus or unset it",
            dir.display()
        );
        return Some(dir);
    }
    let beside = beside_repository();
    beside.is_dir().then_some(beside)
}

/// `../shared/corpus/xla-hlo` relative to the repository root.
pub fn beside_repository() -> PathBuf {
    // This crate is `<repository>/crates/corpus`.
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/corpus sits two levels below the repository root");
    repository
        .parent()
        .unwrap_or(repository)
        .join("shared/corpus/xla-hlo")
}

/// The corpus directory; without one, prints `skipped: <what>: ...` (one line, saying how to
/// point at a corpus; not captured by the test harness) and returns `None`, and the caller
/// returns without failing.
pub fn root_or_skip(what: &str) -> Option<PathBuf> {
    let root = root();
    if root.is_none() {
        // Straight to the process's stderr, not `eprintln!`: the test harness captures that
        // for passing tests, and this line must be seen.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {what}: no XLA HLO corpus (set {ENV}=/path/to/xla-hlo, or put it at {})",
            beside_repository().display()
        );
    }
    root
}

/// A file of the corpus by its path inside it (for benches), or `None` after the one-line
/// skip note when there is no corpus.
///
/// # Panics
/// When the corpus exists but lacks the file.
pub fn file_or_skip(rel: &str, what: &str) -> Option<PathBuf> {
    let p = root_or_skip(what)?.join(rel);
    assert!(p.is_file(), "corpus file {} is missing", p.display());
    Some(p)
}

/// Every `.hlo` file under `dir`, in sorted path order.
pub fn hlo_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(dir, &mut out);
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "hlo") {
            out.push(p);
        }
    }
}

/// A module's key is `REL:INDEX`: `REL` is the path of its file inside the corpus `root`, with
/// `/` between folders, and `INDEX` its place among [`split_modules`] of the file.
///
/// # Panics
/// When `file` is not under `root`.
pub fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

/// The module keys listed in the repository's `testdata/corpus/NAME` (`xla_rejects.txt`,
/// `xla_verify_rejects.txt`): the first tab-separated field of each line that is neither blank
/// nor a `#` comment. Empty when there is no such file.
pub fn listed(name: &str) -> HashSet<String> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/corpus")
        .join(name);
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').next().unwrap_or("").trim().to_string())
        .collect()
}

/// The first line (numbered from 1) where two printed modules differ, and the line of each;
/// `(1, "", "")` when one text is the other's beginning.
pub fn first_difference<'a>(a: &'a str, b: &'a str) -> (usize, &'a str, &'a str) {
    a.lines()
        .zip(b.lines())
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .map_or((1, "", ""), |(n, (x, y))| (n + 1, x, y))
}

/// Splits a file into modules on lines that are exactly `// -----` (trailing blanks allowed),
/// as XLA's tests do, and keeps the chunks with at least one line that is neither blank nor a
/// `//` comment (the same rule as scripts/oracles/corpus_oracle.py).
pub fn split_modules(text: &str) -> Vec<String> {
    let mut chunks = vec![String::new()];
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.trim_end_matches([' ', '\t']) == "// -----" {
            chunks.push(String::new());
        } else {
            chunks.last_mut().unwrap().push_str(line);
        }
    }
    chunks
        .into_iter()
        .filter(|c| {
            c.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_separator_lines_and_drops_comment_only_chunks() {
        let text = "// only a comment\n// -----  \nHloModule a\n// -----\n\nHloModule b\n";
        assert_eq!(split_modules(text), ["HloModule a\n", "\nHloModule b\n"]);
    }
}
