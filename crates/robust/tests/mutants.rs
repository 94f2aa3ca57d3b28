//! A few hundred structured mutants of real modules through the parser, the printer, the
//! verifier and every `opt` pipeline; mutated protos through the proto reader; mutated pass
//! lists and options through the registry. Runs on the stable toolchain in CI, in seconds.
//! A broken contract (an output that does not verify or parse again) fails with the seed that
//! reproduces it; a panic fails the test by itself (the seed is printed first).

use std::path::PathBuf;

use tessera_robust::mutate::{mutant, mutate_once, mutate_options, Kind, Rng};
use tessera_robust::{check_opt, check_options, check_proto, check_text, PIPELINES};

/// Real modules (jax-exported models and pass tests) and the crate's small module.
fn seeds() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let mut out = vec![(
        "small".to_string(),
        tessera_robust::SMALL_MODULE.to_string(),
    )];
    for f in [
        "examples/mlp_train_step.hlo",
        "models/mlp.before-propagation.hlo",
        "models/embedding.before-propagation.hlo",
        "passes/fix-inline-simplify-dce.hlo",
        "passes/flatten-conditional-same-branch.hlo",
        "passes/flatten-shared-while.hlo",
    ] {
        let text = std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        out.push((f.to_string(), text));
    }
    out
}

#[test]
fn text_mutants_are_refused_or_handled() {
    let seeds = seeds();
    // `TESSERA_MUTANTS=N` runs N mutants per seed module (a longer campaign, best with
    // `--release`); CI runs the default.
    let per_seed: usize = std::env::var("TESSERA_MUTANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let (mut parsed, mut ran) = (0, 0);
    for (name, text) in &seeds {
        for s in 0..per_seed {
            let seed = s as u64 * 7919 + name.len() as u64;
            let bytes = mutant(text, seed);
            let Ok(mutant) = String::from_utf8(bytes) else {
                continue;
            };
            if per_seed > 1000 && s % 1000 == 0 {
                eprintln!("{name}: {s} mutants");
            }
            // Printed before the checks, so a panic names the mutant that caused it.
            let here = format!("{name}, seed {seed}");
            if std::env::var_os("TESSERA_MUTANTS_TRACE").is_some() {
                eprintln!("{here}");
            }
            match check_text(&mutant) {
                Err(e) => panic!("{here}: {e}"),
                Ok(None) => continue,
                Ok(Some(_)) => parsed += 1,
            }
            let k = s % PIPELINES.len();
            if let Err(e) = check_opt(&mutant, k) {
                panic!("{here}, pipeline {:?}: {e}", PIPELINES[k]);
            }
            ran += 1;
        }
    }
    let total = seeds.len() * per_seed;
    eprintln!("{total} mutants: {parsed} parsed, {ran} went through a pipeline");
    // The mutator keeps most modules readable; if it stopped doing so, this test would test
    // only the parser's refusals.
    assert!(
        parsed * 3 >= total,
        "only {parsed} of {total} mutants parsed"
    );
}

#[test]
fn proto_mutants_are_refused_or_read_back() {
    let mut read = 0;
    let mut total = 0;
    for (name, text) in seeds() {
        let m = tessera_hlo::text::parse_module(&text).unwrap();
        let bytes = tessera_hlo::proto::to_proto_bytes(&m);
        check_proto(&bytes).unwrap_or_else(|e| panic!("{name} unmutated: {e}"));
        for s in 0..60u64 {
            let mut rng = Rng::new(s);
            let mut b = bytes.clone();
            for _ in 0..1 + rng.below(3) {
                b = mutate_once(&b, Kind::Bytes, &mut rng);
            }
            total += 1;
            if tessera_hlo::proto::from_proto_bytes(&b).is_ok() {
                read += 1;
            }
            check_proto(&b).unwrap_or_else(|e| panic!("{name}, proto seed {s}: {e}"));
        }
    }
    eprintln!("{total} proto mutants, {read} read");
    assert!(
        read > 0,
        "no mutated proto was read: the test checks nothing past decoding"
    );
}

#[test]
fn option_mutants_are_refused_or_run() {
    let mut built = 0;
    for s in 0..200u64 {
        let mut rng = Rng::new(s);
        let (p, o) = *rng.pick(PIPELINES);
        let o: Vec<String> = o.iter().map(|x| x.to_string()).collect();
        let (passes, options) = mutate_options(p, &o, &mut rng);
        if tessera_robust::registry()
            .build_pipeline(&passes, &options)
            .is_ok()
        {
            built += 1;
        }
        check_options(&passes, &options)
            .unwrap_or_else(|e| panic!("options seed {s} ({passes:?} {options:?}): {e}"));
    }
    eprintln!("200 option mutants, {built} built a pipeline");
    assert!(built > 0);
}
