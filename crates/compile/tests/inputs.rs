//! Inputs as users have them, beyond testdata's model dumps: jax's `lower().as_text()` in
//! Shardy mode (jax's default: shard_map as `xla.sdy.*` custom-calls with the shardings in
//! frontend attributes, the result sharding as `xla.sdy.FuncResultSharding`), checked
//! against the same function lowered in GSPMD mode; and HLO that TensorFlow's tf2xla produced
//! (the corpus's `tfcompile` module, and a fixture made with TensorFlow).

mod common;

use common::{client, data, load_path as load};
use tessera_compile::{compile, verify_on_devices, CompileOptions, VerifyOptions};

/// Compiles `name`'s Shardy-mode lowering for 8 devices and runs it against two references:
/// XLA's partitioning of the same input (after our import of the Shardy calls) and, not
/// depending on that import at all, the GSPMD-mode lowering of the same function (XLA's
/// partitioning where it has a shard_map, else one device).
fn shardy_against_gspmd(name: &str) {
    let shardy = load(&data(&format!("compile/{name}.shardy.hlo")));
    let gspmd = load(&data(&format!("compile/{name}.gspmd.hlo")));
    let compiled =
        compile(shardy.clone(), &CompileOptions::new(8)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        compiled
            .report
            .stages
            .iter()
            .any(|s| s.name == "shardy-import"),
        "{:?}",
        compiled.report.stages
    );
    let text = tessera_hlo::text::print_module(&compiled.module, &Default::default());
    assert!(
        !text
            .replace("xla.sdy.manual_computation_body", "")
            .contains("xla.sdy"),
        "{text}"
    );
    for reference in [&shardy, &gspmd] {
        let v = verify_on_devices(client(), reference, &compiled, &VerifyOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(v.passed(), "{name} against {}: {v}", reference.name);
    }
}

#[test]
fn shard_map_in_shardy_mode_as_jax_lowers_it() {
    shardy_against_gspmd("shard_map2");
}

#[test]
fn result_sharding_in_shardy_mode_as_jax_lowers_it() {
    shardy_against_gspmd("constraint");
}

/// A module tf2xla (tfcompile) produced, from XLA's tree: `XLA_Args`/`XLA_Retvals`
/// metadata, TensorFlow op types, a conditional with tuple arguments. No shardings: compiled
/// for 2 devices, everything replicated, and equal.
#[test]
fn tensorflow_module_from_the_corpus() {
    let Some(root) = tessera_corpus::root_or_skip("the tf2xla module of the corpus") else {
        return;
    };
    let path = root.join("xla/hlo/translate/hlo_to_mhlo/tests/if_conditional.hlo");
    let m = load(&path);
    assert_eq!(m.name, "tfcompile.0");
    let compiled = compile(m.clone(), &CompileOptions::new(2)).unwrap_or_else(|e| panic!("{e}"));
    let v = verify_on_devices(client(), &m, &compiled, &VerifyOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(v.passed(), "{v}");
}

/// A TensorFlow training step as tf2xla produced it (scripts/fixtures/make_tf_input.py), sharded for 8
/// devices by TensorFlow's own `xla_sharding` annotations: compiled, equal to the original on
/// one device.
#[test]
fn tensorflow_training_step_sharded_by_tensorflow() {
    let m = load(&data("compile/tf_mlp_step.hlo"));
    let compiled = compile(m.clone(), &CompileOptions::new(8)).unwrap_or_else(|e| panic!("{e}"));
    assert!(compiled.report.collective_bytes() > 0);
    let v = verify_on_devices(client(), &m, &compiled, &VerifyOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(v.passed(), "{v}");
}
