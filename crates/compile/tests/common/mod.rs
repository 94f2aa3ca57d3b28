//! What the integration tests of tessera-compile share: one PJRT client of 8 CPU devices per
//! test binary, and testdata paths.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tessera_runtime::Client;

pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(8).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

/// `testdata/<rel>`.
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata")).join(rel)
}

/// A module read as `tessera compile` reads it (text or proto).
pub fn load_path(path: &Path) -> tessera_hlo::Module {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tessera_compile::parse_input(&bytes, &path.display().to_string())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `testdata/<rel>`, read.
pub fn load(rel: &str) -> tessera_hlo::Module {
    load_path(&data(rel))
}
