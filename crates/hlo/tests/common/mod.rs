//! Shared by the corpus tests: where the corpus is, its .hlo files, and how a file splits into
//! modules (the same rule as scripts/corpus_oracle.py).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// `../shared/corpus/xla-hlo` next to the repository (also found from a worktree under
/// `/work/wt/<name>`).
pub fn corpus_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for up in [
        "../../../shared/corpus/xla-hlo",
        "../../../../shared/corpus/xla-hlo",
    ] {
        let p = manifest.join(up);
        if p.is_dir() {
            return p;
        }
    }
    manifest.join("../../../shared/corpus/xla-hlo")
}

pub fn hlo_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            hlo_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "hlo") {
            out.push(p);
        }
    }
}

/// Splits on lines that are exactly `// -----` (trailing blanks allowed) and keeps the chunks
/// with at least one line that is neither blank nor a `//` comment.
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
