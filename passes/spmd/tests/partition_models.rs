//! Real jax models: XLA's module right before `spmd-partitioning` (testdata/models/
//! *.after-propagation.hlo, and the `before` modules of testdata/spmd_pairs, which carry
//! their shardings on the parameters and output only... after our own propagation) is
//! partitioned by Tessera and executed on 8 PJRT CPU devices against the original on one.
//! Prints our collective count and bytes beside XLA's own partitioned module where the pair
//! has one. `MODELS=substring` runs only matching files; transformer48 (17k instructions) is
//! left to `--ignored`.

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

fn data(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata")).join(rel)
}

fn check(file: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(data(file)).map_err(|e| e.to_string())?;
    let original = parse_module(&text).map_err(|e| e.to_string())?;
    let n = original.config.num_partitions as usize;
    let mut part = original.clone();
    let mut pass = SpmdPartitioning::default();
    pass.run(&mut part)
        .map_err(|e| format!("partitioning: {e}"))?;
    verify(&part, &VerifyOptions::default()).map_err(|e| format!("verify: {e}"))?;
    let inputs = harness::random_inputs(&original, 3).map_err(|e| e.to_string())?;
    let r = check_equivalence(
        client(),
        &original,
        &part,
        n,
        &inputs,
        CompareOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    if !r.passed() {
        return Err(format!("{r}"));
    }
    let bytes: i64 = pass.report.collectives.iter().map(|c| c.bytes).sum();
    Ok(format!(
        "{} collectives, {bytes} bytes/device, {} last resorts, {} defaulted",
        pass.report.collectives.len(),
        pass.report.last_resorts.len(),
        pass.report.defaulted.len()
    ))
}

fn run(files: &[&str]) {
    let filter = std::env::var("MODELS").ok();
    let mut failures = Vec::new();
    for f in files {
        if filter.as_deref().is_some_and(|x| !f.contains(x)) {
            continue;
        }
        match check(f) {
            Ok(s) => eprintln!("{f}: equal on 8 devices; {s}"),
            Err(e) => failures.push(format!("{f}: {e}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

#[test]
fn models_partition_and_run_equal() {
    run(&[
        "models/mlp.after-propagation.hlo",
        "models/embedding.after-propagation.hlo",
        "models/convnet.after-propagation.hlo",
        "models/transformer_block.after-propagation.hlo",
    ]);
}

#[test]
#[ignore = "17k instructions: minutes in a debug build"]
fn transformer48_partitions_and_runs_equal() {
    run(&["models/transformer48.after-propagation.hlo"]);
}

/// Collectives of a partitioned module and the bytes each device receives (ORACLE.md's
/// formulas; empty replica groups mean all `n` devices).
fn collectives_of(m: &tessera_hlo::Module, n: i64) -> (usize, i64) {
    use tessera_hlo::Opcode::*;
    let (mut count, mut bytes) = (0, 0);
    for &c in m.computations() {
        for &id in m.comp(c).instructions() {
            let i = m.instr(id);
            let out: i64 = match &i.shape {
                tessera_hlo::Shape::Tuple(e) => e.iter().map(|s| s.byte_size(8)).sum(),
                s => s.byte_size(8),
            };
            let g = i
                .attrs
                .replica_groups
                .as_ref()
                .and_then(|r| r.group_size())
                .filter(|&g| g > 0)
                .unwrap_or(n);
            let b = match i.opcode {
                AllGather | AllGatherStart | AllToAll => out * (g - 1) / g,
                AllReduce | AllReduceStart => 2 * out * (g - 1) / g,
                ReduceScatter => out * (g - 1),
                CollectivePermute | CollectivePermuteStart => out,
                _ => continue,
            };
            count += 1;
            bytes += b;
        }
    }
    (count, bytes)
}

/// testdata/spmd_pairs: XLA's input (`before`, shardings on parameters and outputs) goes
/// through our sharding propagation and partitioner; the result runs equal on the devices,
/// and its collectives are set beside XLA's own partitioned module (`after`).
#[test]
fn spmd_pairs_partition_and_run_equal_beside_xla() {
    use tessera_spmd::ShardingPropagation;
    let mut names: Vec<String> = std::fs::read_dir(data("spmd_pairs"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.strip_suffix(".before.hlo").map(str::to_string)
        })
        .collect();
    names.sort();
    let mut failures = Vec::new();
    for name in names {
        let read = |s: &str| {
            let t = std::fs::read_to_string(data(&format!("spmd_pairs/{name}.{s}.hlo"))).unwrap();
            parse_module(&t).unwrap()
        };
        let (before, after) = (read("before"), read("after"));
        let n = before.config.num_partitions;
        let mut part = before.clone();
        let mut prop = ShardingPropagation::default();
        let mut pass = SpmdPartitioning::default();
        let r = prop
            .run(&mut part)
            .and_then(|_| pass.run(&mut part))
            .map_err(|e| e.to_string())
            .and_then(|_| {
                let inputs = harness::random_inputs(&before, 5).map_err(|e| e.to_string())?;
                check_equivalence(
                    client(),
                    &before,
                    &part,
                    n as usize,
                    &inputs,
                    Default::default(),
                )
                .map_err(|e| e.to_string())
            });
        match r {
            Ok(rep) if rep.passed() => {
                let ours = collectives_of(&part, n);
                let xla = collectives_of(&after, n);
                eprintln!(
                    "| {name} | {n} | {} | {} | {} | {} |",
                    ours.0, ours.1, xla.0, xla.1
                );
            }
            Ok(rep) => failures.push(format!("{name}:\n{rep}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}
