//! The robustness contract as code, shared by the cargo-fuzz targets in `fuzz/` and the
//! mutant test that CI runs without nightly (`tests/mutants.rs`).
//!
//! The contract: any input is either handled or refused with a typed error; never a panic, a
//! hang or unbounded memory; a pass never leaves a module that fails the verifier, and every
//! module Tessera prints parses again. Each `check_*` function runs one side of it and returns
//! `Err` with a description when the contract is broken (a panic simply propagates: the fuzzer
//! and the test both report it). A refusal of the input is `Ok`.
//!
//! [`mutate`] is a structured mutator over HLO text: it changes the things that broke Tessera
//! before (numbers, shapes, shardings, replica groups, operands, call targets, raw bytes), so
//! that a few hundred mutants of real modules reach far past the parser.

use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_hlo::Module;
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};

pub mod mutate;

/// Every pass the `tessera` binary knows: the one registry, kept in `tessera-compile`.
pub use tessera_compile::registry;

/// The pipelines the checks run: `(passes, options)`. Every pass of the registry is in one.
pub const PIPELINES: &[(&str, &[&str])] = &[
    ("dce", &[]),
    ("inline", &[]),
    ("flatten-call-graph", &[]),
    ("fix(tuple-simplify,dce)", &[]),
    ("sharding-propagation", &[]),
    (
        "sharding-propagation",
        &[
            "sharding-propagation.propagate_to_parameters=true",
            "sharding-propagation.propagate_to_output=true",
            "sharding-propagation.replicate_undecided=true",
        ],
    ),
    ("variable-dedup", &[]),
    ("auto-sharding", &["auto-sharding.max_iterations=5"]),
    ("sharding-propagation,spmd-partitioning", &[]),
    ("schedule", &[]),
    ("schedule,remat", &["remat.memory_limit=1K"]),
    (
        "schedule,print-liveness,print-memory,print-points-to,print-call-graph",
        &[],
    ),
];

/// Parses text and prints it again: what Tessera prints must parse and print the same.
/// Returns the module when the text parses.
pub fn check_text(text: &str) -> Result<Option<Module>, String> {
    let Ok(m) = parse_module(text) else {
        return Ok(None);
    };
    reprint(&m, "the parsed module")?;
    Ok(Some(m))
}

/// `print(m)` parses, prints the same again, and verifies whenever `m` does.
fn reprint(m: &Module, what: &str) -> Result<(), String> {
    let opts = PrintOptions::default();
    let printed = print_module(m, &opts);
    let again = parse_module(&printed)
        .map_err(|e| format!("{what} prints text that does not parse: {e}\n{printed}"))?;
    let printed2 = print_module(&again, &opts);
    if printed2 != printed {
        return Err(format!(
            "{what}: print(parse(print(m))) differs from print(m)\n--- first ---\n{printed}\n--- second ---\n{printed2}"
        ));
    }
    let options = VerifyOptions::default();
    if verify(m, &options).is_ok() {
        if let Err(e) = verify(&again, &options) {
            return Err(format!(
                "{what} verifies, its printed text does not: {e}\n{printed}"
            ));
        }
    }
    Ok(())
}

/// Runs pipeline `k` of [`PIPELINES`] (modulo their number) on text, as `tessera opt` does
/// (the verifier on the input and after every pass). A refused input or a pass that refuses
/// is fine; an output that does not verify or does not parse again breaks the contract.
pub fn check_opt(text: &str, k: usize) -> Result<(), String> {
    let (passes, options) = PIPELINES[k % PIPELINES.len()];
    let spec = OptSpec {
        passes: passes.to_string(),
        pass_options: options.iter().map(|s| s.to_string()).collect(),
        dump_dir: None,
        no_verify: false,
    };
    let Ok(out) = run_opt(text, &spec, &registry(), &default_hooks()) else {
        return Ok(());
    };
    let what = format!("the output of `--passes {passes}`");
    if let Err(e) = verify(&out.module, &VerifyOptions::default()) {
        return Err(format!("{what} does not verify: {e}\n{}", out.text));
    }
    reprint(&out.module, &what)
}

/// Reads serialized `xla.HloModuleProto` bytes as `tessera from-proto` does: the reader
/// refuses or gives a module, and the verifier refuses or accepts it; an accepted module must
/// print text that parses again, prints the same and verifies.
pub fn check_proto(bytes: &[u8]) -> Result<(), String> {
    let Ok(m) = tessera_hlo::proto::from_proto_bytes(bytes) else {
        return Ok(());
    };
    if verify(&m, &VerifyOptions::default()).is_err() {
        // `from-proto --no-verify` prints it if it reads back: neither may panic.
        let _ = tessera_hlo::text::check_reparses(&m);
        return Ok(());
    }
    reprint(&m, "the module read from the proto")
}

/// Builds a pipeline from a `--passes` value and `--pass-option` values. It must build or be
/// refused; a pipeline that builds must run on a small valid module without panicking.
pub fn check_options(passes: &str, options: &[String]) -> Result<(), String> {
    let r = registry();
    let Ok(mut pipeline) = r.build_pipeline(passes, options) else {
        return Ok(());
    };
    let mut m = parse_module(SMALL_MODULE).expect("the small module parses");
    // Keep runs short: fixed points are bounded, but a pipeline may name many passes.
    let _ = pipeline.run_with_report(&mut m);
    Ok(())
}

/// `tessera compile` and `tessera explain` on a module and command-line options, as the CLI
/// runs them without `--verify`: `args` holds `--num-partitions N`, `--num-replicas R`,
/// `--memory-limit BYTES`, `--dedup` and `--pass-option P.K=V` (anything else is ignored).
/// The pipeline refuses or gives a per-device program that verifies and prints text that
/// parses again; the report and the explanation render.
pub fn check_compile(text: &str, args: &str) -> Result<(), String> {
    let Ok(module) = parse_module(text) else {
        return Ok(());
    };
    let mut o = tessera_compile::CompileOptions::for_module(&module);
    let mut words = args.split_whitespace();
    while let Some(w) = words.next() {
        match w {
            "--dedup" => o.dedup = true,
            "--num-partitions" | "--num-replicas" | "--memory-limit" | "--pass-option" => {
                let Some(v) = words.next() else { break };
                match w {
                    "--pass-option" => o.pass_options.push(v.to_string()),
                    _ => {
                        let Ok(n) = tessera_pass::options::parse_int(v) else {
                            return Ok(()); // the CLI refuses it
                        };
                        match w {
                            "--num-partitions" => o.num_partitions = n,
                            "--num-replicas" => o.num_replicas = n,
                            _ => o.memory_limit = Some(n),
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // Partitioning as the CLI does, and the remat search once rather than escalating: the
    // contract is the same and a fuzzer's run stays short.
    o.search_remat_settings = false;
    let Ok(compiled) = tessera_compile::compile(module, &o) else {
        return Ok(());
    };
    let _ = compiled.report.render();
    let _ = compiled.report.explain();
    let what = "the per-device program of `tessera compile`";
    if let Err(e) = verify(&compiled.module, &VerifyOptions::default()) {
        let printed = print_module(&compiled.module, &PrintOptions::default());
        return Err(format!("{what} does not verify: {e}\n{printed}"));
    }
    reprint(&compiled.module, what)
}

/// The module [`check_sharding`] annotates: parameters, a dot, an element-wise op, a reduce,
/// a while loop and a tuple root, each taking one of the fuzzed shardings.
const SHARDING_TEMPLATE: &str = include_str!("../../../testdata/fuzz/sharding-template.hlo");

/// Shardings as users write them, with any device ids, mesh axes and counts: `data`'s first
/// line is the module's `num_partitions`, then `--num-partitions` for `compile` (empty: none),
/// and each further line the sharding of one instruction of a fixed module (`{replicated}`
/// where lines run out). The module is refused or compiled as [`check_compile`] checks.
pub fn check_sharding(data: &str) -> Result<(), String> {
    let (text, args) = sharding_case(data);
    // The text printer and the parser on what the shardings made of the module.
    check_text(&text)?;
    check_compile(&text, &args)
}

/// The module text and `compile` options [`check_sharding`] makes of `data`.
pub fn sharding_case(data: &str) -> (String, String) {
    let mut lines = data.lines();
    let header = lines.next().unwrap_or("1").trim();
    let count = lines.next().unwrap_or("").trim();
    let mut text = SHARDING_TEMPLATE.replace("@N", header);
    for k in 0..7 {
        let s = lines.next().map(str::trim).filter(|s| !s.is_empty());
        text = text.replace(&format!("@{k}"), s.unwrap_or("{replicated}"));
    }
    let args = if count.is_empty() {
        String::new()
    } else {
        format!("--num-partitions {count}")
    };
    (text, args)
}

/// The embedding commands' host side on a configuration (JSON) and a batch (`.npz` bytes),
/// as `tessera embedding layout` and `preprocess` read them, then the CSR buffers decoded and
/// packed for the device exchange as `lookup` and `step` do before they reach a device. Each
/// step refuses or succeeds.
pub fn check_embedding(config: &str, npz: &[u8]) -> Result<(), String> {
    use tessera_embedding::{device::exchange, npz::read_batch, preprocess, EmbeddingConfig};
    let Ok(mut config) = EmbeddingConfig::from_json(config, "config.json") else {
        return Ok(());
    };
    let Ok(layout) = tessera_embedding::Layout::new(&mut config) else {
        return Ok(());
    };
    let Ok(batches) = read_batch(&config, npz, "batch.npz") else {
        return Ok(());
    };
    let Ok(result) = preprocess(&config, &layout, &batches) else {
        return Ok(());
    };
    for (si, stack) in result.stacks.iter().enumerate() {
        let entries = result
            .decode(stack)
            .map_err(|e| format!("stack {si}: preprocess wrote buffers it cannot decode: {e}"))?;
        let _ = exchange::pack(&layout, si, &entries);
    }
    Ok(())
}

/// The fuzz targets of fuzz/fuzz_targets, by name.
pub const TARGETS: [&str; 8] = [
    "parse",
    "roundtrip",
    "opt",
    "proto",
    "options",
    "compile",
    "sharding",
    "embedding",
];

/// Fuzz target `target`'s check on its input bytes, read as that target reads them (text
/// targets skip bytes that are not UTF-8); `None` for an unknown target. The fuzz targets,
/// the regression replay and the `check` example all go through it.
pub fn check_target(target: &str, data: &[u8]) -> Option<Result<(), String>> {
    let text = |d: &[u8]| std::str::from_utf8(d).ok().map(str::to_string);
    let lines = |d: &[u8]| {
        let t = text(d).unwrap_or_default();
        let mut l = t.lines().map(str::to_string);
        (l.next().unwrap_or_default(), l.collect::<Vec<_>>())
    };
    Some(match target {
        "parse" => {
            if let Some(t) = text(data) {
                let _ = parse_module(&t);
            }
            Ok(())
        }
        "roundtrip" => text(data).map_or(Ok(()), |t| check_text(&t).map(|_| ())),
        "opt" => match data.split_first() {
            Some((&k, rest)) => text(rest).map_or(Ok(()), |t| check_opt(&t, k as usize)),
            None => Ok(()),
        },
        "proto" => check_proto(data),
        "options" => {
            let (passes, options) = lines(data);
            check_options(&passes, &options)
        }
        "compile" => text(data).map_or(Ok(()), |t| {
            let (args, module) = t.split_once('\n').unwrap_or((&t, ""));
            check_compile(module, args)
        }),
        "sharding" => text(data).map_or(Ok(()), |t| check_sharding(&t)),
        "embedding" => {
            let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            text(&data[..split]).map_or(Ok(()), |config| {
                check_embedding(&config, data.get(split + 1..).unwrap_or(&[]))
            })
        }
        _ => return None,
    })
}

/// A small valid module that exercises calls, tuples, a while loop, shardings and a reduce.
pub const SMALL_MODULE: &str = include_str!("../../../testdata/fuzz/small-module.hlo");
