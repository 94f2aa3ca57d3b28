//! `--auto-shard` on the jax models of testdata (issue 37): every sharding removed
//! (num_partitions 8 kept), the `auto-sharding` pass chooses them; the result is executed on 8
//! PJRT CPU devices against the original, and its per-device peak and collective bytes are
//! compared with the hand-annotated module's. Then again under a memory limit of half the
//! hand-annotated peak. transformer48 is left to `--ignored` (a measured benchmark,
//! docs/BENCHMARKS.md).

mod common;

use std::time::{Duration, Instant};

use common::{client, load};
use tessera_autoshard::AutoShardOptions;
use tessera_compile::{compile, verify_on_devices, CompileOptions, Compiled, VerifyOptions};
use tessera_hlo::Module;

/// `module` with every sharding removed.
fn unsharded(module: &Module) -> Module {
    let mut m = module.clone();
    for c in m.computations().to_vec() {
        for id in m.comp(c).instructions().to_vec() {
            m.instr_mut(id).sharding = None;
        }
    }
    m
}

fn auto(module: &Module, limit: Option<i64>) -> Result<Compiled, String> {
    let mut o = CompileOptions::new(8);
    o.memory_limit = limit;
    // The exact solve stops once it proves the optimum (9.5 s for transformer4 on an idle
    // machine); the default 20 s was too little on a machine running other builds, and the
    // test asserts the proof.
    o.auto_shard = Some(AutoShardOptions {
        time_limit: Duration::from_secs(120),
        ..AutoShardOptions::default()
    });
    compile(module.clone(), &o).map_err(|e| e.to_string())
}

fn verify(original: &Module, compiled: &Compiled) -> Result<(), String> {
    let v = verify_on_devices(
        client(),
        original,
        compiled,
        &VerifyOptions {
            seed: 3,
            ..VerifyOptions::default()
        },
    )
    .map_err(|e| e.to_string())?;
    if v.passed() {
        Ok(())
    } else {
        Err(v.to_string())
    }
}

/// One jax model, shardings removed and chosen by the pass: executed equal to the original,
/// its per-device peak and collective bytes at most the hand-annotated module's; then under a
/// limit of half the hand-annotated peak, met (or rematerialization says why not), or refused
/// with the best peak found. Prints `model: hand peak / bytes -> auto peak / bytes`.
fn check_model(rel: &str) {
    let hand_module = load(rel);
    let hand = compile(hand_module.clone(), &CompileOptions::new(8))
        .unwrap_or_else(|e| panic!("{rel} (hand-annotated): {e}"));
    let original = unsharded(&hand_module);
    let t0 = Instant::now();
    let a = auto(&original, None).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let seconds = t0.elapsed().as_secs_f64();
    verify(&original, &a).unwrap_or_else(|e| panic!("{rel}: --auto-shard: {e}"));
    assert!(
        a.report
            .auto_shard
            .as_ref()
            .is_some_and(|r| !r.decisions.is_empty()),
        "{rel}: the pass decided nothing"
    );
    let (hp, hb) = (hand.report.peak.partitioned, hand.report.collective_bytes());
    let (ap, ab) = (a.report.peak.partitioned, a.report.collective_bytes());
    let solved = a.report.auto_shard.as_ref().expect("the pass ran");
    eprintln!(
        "{rel}: {hp} / {hb} -> {ap} / {ab}, auto compile {seconds:.1} s (solve {:.1} s, {} nodes{})",
        solved.solve_time.as_secs_f64(),
        solved.nodes,
        if solved.optimal { ", proven optimal" } else { "" }
    );
    // Every model's problem is small enough for the solver's exact solve.
    assert!(solved.optimal, "{rel}: the solve is not proven optimal");
    assert!(
        ap <= hp,
        "{rel}: per-device peak {ap} above the hand-annotated {hp}"
    );
    // The issue asks for 5 of 6; all six hold today, and each is kept.
    assert!(
        ab <= hb,
        "{rel}: collective bytes {ab} above the hand-annotated {hb}"
    );

    let limit = hp / 2;
    match auto(&original, Some(limit)) {
        Ok(c) => {
            verify(&original, &c).unwrap_or_else(|e| panic!("{rel} at {limit}: {e}"));
            let p = c.report.peak.after_remat;
            let warned = c
                .report
                .warnings
                .iter()
                .any(|w| w.starts_with("rematerialization:"));
            assert!(p <= limit || warned, "{rel}: peak {p} over {limit} unsaid");
            eprintln!("{rel}: limit {limit}: peak {p}");
        }
        Err(e) => {
            assert!(
                e.contains("no sharding fits --memory-limit") && e.contains("lowest"),
                "{rel} at {limit}: {e}"
            );
            eprintln!("{rel}: limit {limit}: {e}");
        }
    }
}

// The six jax models: the five of testdata/models that fit a test (transformer48 aside) and
// the README's training step. One test each, so that they run side by side.
#[test]
fn mlp() {
    check_model("models/mlp.before-propagation.hlo");
}

#[test]
fn convnet() {
    check_model("models/convnet.before-propagation.hlo");
}

#[test]
fn embedding() {
    check_model("models/embedding.before-propagation.hlo");
}

#[test]
fn transformer_block() {
    check_model("models/transformer_block.before-propagation.hlo");
}

#[test]
fn transformer4() {
    check_model("models/transformer4.before-propagation.hlo");
}

#[test]
fn mlp_train_step() {
    check_model("examples/mlp_train_step.hlo");
}

/// Deterministic output: the same module, the same shardings.
#[test]
fn auto_shard_is_deterministic() {
    let m = unsharded(&load("models/transformer_block.before-propagation.hlo"));
    let run = || {
        let mut x = m.clone();
        x.config.num_partitions = 8;
        tessera_autoshard::auto_shard(&mut x, &AutoShardOptions::default()).unwrap();
        tessera_hlo::text::print_module(&x, &Default::default())
    };
    assert_eq!(run(), run());
}

/// A mesh that does not multiply to the partitions is a settings error that names it.
#[test]
fn bad_mesh_is_refused() {
    let m = unsharded(&load("models/mlp.before-propagation.hlo"));
    let mut o = CompileOptions::new(8);
    o.auto_shard = Some(AutoShardOptions {
        mesh: Some("data=2,model=2".into()),
        ..Default::default()
    });
    let e = compile(m, &o).unwrap_err().to_string();
    assert!(
        e.contains("--mesh `data=2,model=2`") && e.contains("multiply to 4"),
        "{e}"
    );
}

/// The 48-layer transformer (15.9k instructions) in at most 30 s, verified equal. Run in
/// release: `cargo test --release -p tessera-compile --test auto_shard -- --ignored`.
#[test]
#[ignore]
fn transformer48_auto_shard() {
    let hand_module = load("models/transformer48.before-propagation.hlo");
    let original = unsharded(&hand_module);
    let t0 = Instant::now();
    let a = auto(&original, None).unwrap();
    let seconds = t0.elapsed().as_secs_f64();
    let hand = compile(hand_module, &CompileOptions::new(8)).unwrap();
    eprintln!(
        "transformer48: hand {} / {} -> auto {} / {}, compile {seconds:.1} s (auto-sharding {:.1} \
         s)",
        hand.report.peak.partitioned,
        hand.report.collective_bytes(),
        a.report.peak.partitioned,
        a.report.collective_bytes(),
        a.report
            .stages
            .iter()
            .find(|s| s.name == "auto-sharding")
            .map_or(0.0, |s| s.time.as_secs_f64())
    );
    verify(&original, &a).unwrap();
    assert!(seconds <= 30.0, "{seconds:.1} s");
}
