//! Every filetest of testdata/spmd-partitioning, executed: the pass's output on
//! `num_partitions` PJRT CPU devices must compute what the original computes on one device
//! (random inputs; exact for integers, the dtype's tolerance otherwise; replicated outputs
//! must agree across devices). A file with a manual region is compared with its `.reference`
//! sibling instead. `FILETEST=substring` runs only matching files.

use std::path::PathBuf;
use std::sync::OnceLock;

use tessera_hlo::text::parse_module;
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_pass::Pass;
use tessera_runtime::harness::{self, check_equivalence, CompareOptions};
use tessera_runtime::Client;
use tessera_spmd::SpmdPartitioning;

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(8).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

fn dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/spmd-partitioning"
    ))
}

#[test]
fn every_filetest_runs_equal_on_devices() {
    let filter = std::env::var("FILETEST").ok();
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "hlo"))
        .filter(|p| {
            filter
                .as_deref()
                .is_none_or(|f| p.to_string_lossy().contains(f))
        })
        .collect();
    names.sort();
    let mut failures = Vec::new();
    let mut executed = 0;
    for path in &names {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let original = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let n = original.config.num_partitions as usize;
        let mut part = original.clone();
        let mut pass = SpmdPartitioning::default();
        if let Err(e) = pass.run(&mut part) {
            let dump = if std::env::var("SPMD_DUMP").is_ok() {
                tessera_hlo::text::print_module(&part, &Default::default())
            } else {
                String::new()
            };
            failures.push(format!("{name}: partitioning failed: {e}\n{dump}"));
            continue;
        }
        if let Err(e) = verify(&part, &VerifyOptions::default()) {
            let dump = if std::env::var("SPMD_DUMP").is_ok() {
                tessera_hlo::text::print_module(&part, &Default::default())
            } else {
                String::new()
            };
            failures.push(format!("{name}: the output does not verify: {e}\n{dump}"));
            continue;
        }
        let inputs = harness::random_inputs(&original, 1).unwrap();
        // A manual region is an N-device program that cannot run on one device: such a file
        // has a sibling `.reference`, the same computation written for one device.
        let reference = path.with_extension("reference");
        let original = if reference.exists() {
            let t = std::fs::read_to_string(&reference).unwrap();
            parse_module(&t).unwrap_or_else(|e| panic!("{}: {e}", reference.display()))
        } else {
            original
        };
        match check_equivalence(
            client(),
            &original,
            &part,
            n,
            &inputs,
            CompareOptions::default(),
        ) {
            Ok(r) if r.passed() => executed += 1,
            Ok(r) => failures.push(format!("{name}:\n{r}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!(
        "testdata/spmd-partitioning: {executed} of {} executed and equal",
        names.len()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
