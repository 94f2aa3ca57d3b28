//! What the driver's integration tests share: running the binary, the repository's testdata,
//! a scratch folder per test, and the text a run printed.

// Each test file is its own crate and uses only part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The `tessera` binary of this build, with no arguments yet.
pub fn command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

/// Runs `tessera ARGS` and collects its exit status and what it printed.
pub fn tessera(args: &[&str]) -> Output {
    command().args(args).output().expect("spawn tessera")
}

/// Runs `cmd` with `stdin` written to its standard input (then closed) and collects what it
/// printed.
pub fn output_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tessera");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `testdata/REL` of the repository, as the argument a test passes to the binary.
pub fn testdata(rel: &str) -> String {
    repo()
        .join("testdata")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// The folder for one test's files, `tessera-TAG-PID` in the system's temporary folder, created if
/// missing.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tessera-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Standard output, lossily decoded.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output, then a line break, then standard error: for assertion messages and for
/// tests that look for a phrase wherever it is printed.
pub fn text(o: &Output) -> String {
    format!("{}\n{}", stdout(o), stderr(o))
}
