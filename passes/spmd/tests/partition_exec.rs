//! Every filetest of testdata/spmd-partitioning, executed: the pass's output on
//! `num_partitions` PJRT CPU devices must compute what the original computes on one device
//! (random inputs; exact for integers, the dtype's tolerance otherwise; replicated outputs
//! must agree across devices). A file with a manual region is compared with its `.reference`
//! sibling instead. The RUN line's `--pass-option spmd-partitioning.KEY=VALUE` options are
//! applied. A file with a `// NOEXEC: reason` line (infeed and outfeed: the PJRT C API has
//! no host-transfer calls to feed them) is partitioned and verified but not run.
//! A module with `replica_count=R` runs as R replicas: the original on R devices, the
//! partitioned module on R*N devices (replica-major), each replica with its own random inputs.
//! `FILETEST=substring` runs only matching files.

use std::path::PathBuf;
use std::sync::OnceLock;

use tessera_hlo::text::parse_module;
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_pass::options::PassOptions;
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
    let mut not_run = 0;
    for path in &names {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let original = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let n = original.config.num_partitions as usize;
        let mut part = original.clone();
        let mut pass = SpmdPartitioning::default();
        for (key, value) in run_line_options(&text) {
            pass.options
                .set(&key, &value)
                .unwrap_or_else(|e| panic!("{name}: option {key}={value}: {e}"));
        }
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
        if let Some(reason) = text.lines().find_map(|l| l.strip_prefix("// NOEXEC:")) {
            eprintln!("{name}: partitioned and verified, not run:{reason}");
            not_run += 1;
            continue;
        }
        let replicas = original.config.replica_count.max(1) as usize;
        if replicas > 1 {
            match check_with_replicas(client(), &original, &part, replicas, n) {
                Ok(()) => executed += 1,
                Err(e) => failures.push(format!("{name}: {e}")),
            }
            continue;
        }
        // A manual region is an N-device program that cannot run on one device: such a file
        // has a sibling `.reference`, the same computation written for one device. Its
        // parameters are the global arrays (for a partially manual entry parameter, every
        // manual subgroup's value side by side), so the inputs are drawn for it.
        let reference = path.with_extension("reference");
        let mut original = if reference.exists() {
            let t = std::fs::read_to_string(&reference).unwrap();
            parse_module(&t).unwrap_or_else(|e| panic!("{}: {e}", reference.display()))
        } else {
            original
        };
        // With the signature kept, every device takes and returns whole arrays: the harness
        // must feed and read the partitioned module as replicated.
        if !pass.options.allow_module_signature_change {
            replicate_entry_boundary(&mut original);
        }
        let inputs = harness::random_inputs(&original, 1).unwrap();
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
        "testdata/spmd-partitioning: {executed} of {} executed and equal, {not_run} not run \
         (NOEXEC)",
        names.len()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// The `spmd-partitioning.KEY=VALUE` pass options of a file's RUN lines.
fn run_line_options(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("// RUN:")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(2) {
            if w[0] != "--pass-option" {
                continue;
            }
            if let Some((k, v)) = w[1]
                .strip_prefix("spmd-partitioning.")
                .and_then(|kv| kv.split_once('='))
            {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
    out
}

/// Drops the shardings of `m`'s entry parameters and root, so that the harness feeds and
/// assembles them as replicated (whole arrays on every device).
fn replicate_entry_boundary(m: &mut tessera_hlo::Module) {
    let entry = m.entry().expect("an entry computation");
    let comp = m.comp(entry);
    let mut ids: Vec<_> = comp.parameters().collect();
    ids.extend(comp.root());
    for id in ids {
        m.instr_mut(id).sharding = None;
    }
}

/// `original` as `replicas` replicas on one device each, `part` as `replicas` copies of its
/// `partitions`-device program; replica k gets inputs of seed k+1; each replica's assembled
/// array output must equal the original's replica k.
fn check_with_replicas(
    client: &Client,
    original: &tessera_hlo::Module,
    part: &tessera_hlo::Module,
    replicas: usize,
    partitions: usize,
) -> Result<(), String> {
    use tessera_runtime::{CompileOptions, HostArray, Tolerance};
    let e = |x: tessera_runtime::Error| x.to_string();
    let inputs: Vec<Vec<tessera_runtime::HostValue>> = (0..replicas)
        .map(|k| harness::random_inputs(original, 1 + k as u64).map_err(e))
        .collect::<Result<_, _>>()?;
    let arrays = |v: &[tessera_runtime::HostValue]| -> Result<Vec<HostArray>, String> {
        v.iter()
            .map(|x| {
                x.as_array()
                    .cloned()
                    .ok_or("tuple parameters are not supported".into())
            })
            .collect()
    };
    let mut orig = harness::prepare_original(original).map_err(e)?;
    orig.config.replica_count = replicas as i64;
    let args: Vec<Vec<HostArray>> = inputs.iter().map(|v| arrays(v)).collect::<Result<_, _>>()?;
    let expected = harness::run_module(client, &orig, &CompileOptions::replicated(replicas), &args)
        .map_err(e)?;
    let mut prep = harness::prepare_partitioned(part, partitions).map_err(e)?;
    prep.config.replica_count = replicas as i64;
    let shapes = harness::entry_parameter_shapes(original).map_err(e)?;
    let shardings = harness::entry_parameter_shardings(original).map_err(e)?;
    let mut dev_args: Vec<Vec<HostArray>> = vec![Vec::new(); replicas * partitions];
    for (r, values) in inputs.iter().enumerate() {
        for (k, v) in values.iter().enumerate() {
            let pieces = tessera_runtime::split(v, &shapes[k], &shardings[k], partitions)
                .map_err(|x| x.to_string())?;
            for (d, piece) in pieces.into_iter().enumerate() {
                dev_args[r * partitions + d].extend(arrays(&[piece])?);
            }
        }
    }
    let mut options = harness::per_device_options(partitions);
    options.num_replicas = replicas;
    let outs = harness::run_module(client, &prep, &options, &dev_args).map_err(e)?;
    let (root_shape, root_sharding) = harness::root_shape_and_sharding(original).map_err(e)?;
    if root_shape.is_tuple() {
        return Err("a tuple root is not supported with several replicas".into());
    }
    for r in 0..replicas {
        let pieces: Vec<tessera_runtime::HostValue> = outs[r * partitions..(r + 1) * partitions]
            .iter()
            .map(|o| tessera_runtime::HostValue::Array(o[0].clone()))
            .collect();
        let a = tessera_runtime::assemble(&pieces, &root_shape, &root_sharding)
            .map_err(|x| x.to_string())?;
        if let Some(m) = a.mismatches.first() {
            return Err(format!("replica {r}: partitions disagree: {m}"));
        }
        let got = a.value.as_array().ok_or("an array output")?;
        let want = &expected[r][0];
        let report =
            harness::compare_arrays(0, want, got, Tolerance::for_type(want.ty)).map_err(e)?;
        if !report.passed() {
            return Err(format!("replica {r}: {report}"));
        }
    }
    Ok(())
}
