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

/// A small valid module that exercises calls, tuples, a while loop, shardings and a reduce.
pub const SMALL_MODULE: &str = r#"HloModule small, num_partitions=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  t = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  t = (s32[], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[4,8] get-tuple-element(t), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[4,8] multiply(x, x)
  ROOT r = (s32[], f32[4,8]) tuple(j, y)
}

helper {
  p = f32[4,8] parameter(0)
  ROOT n = f32[4,8] negate(p)
}

ENTRY main {
  x = f32[4,8] parameter(0), sharding={devices=[2,1]0,1}
  c = f32[4,8] call(x), to_apply=helper
  zero = s32[] constant(0)
  t = (s32[], f32[4,8]) tuple(zero, c)
  w = (s32[], f32[4,8]) while(t), condition=cond, body=body
  y = f32[4,8] get-tuple-element(w), index=1
  init = f32[] constant(0)
  r = f32[4] reduce(y, init), dimensions={1}, to_apply=add
  ROOT out = (f32[4], f32[4,8]) tuple(r, y)
}
"#;
