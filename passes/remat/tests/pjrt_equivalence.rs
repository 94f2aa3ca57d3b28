//! Numbers, not only shapes: every module the rematerialization filetests rewrite
//! (testdata/remat/*.hlo whose RUN line runs `rematerialization`), the generated chain, ladder
//! and random-DAG families and the 2-layer transformer training step
//! (testdata/models/transformer2_1dev.hlo) run on the PJRT CPU plugin (1 device) before and
//! after rematerialization with the same random inputs; every output is compared element by
//! element (the runtime harness's per-type tolerances).
//!
//! `mutant_is_caught` shows the comparison can fail: a rematerialized instruction given a wrong
//! operand (the kind of bug a faulty rewrite makes) is reported as different.
//!
//! The plugin must be installed (scripts/install-pjrt.sh); a missing plugin fails the test.

use std::path::PathBuf;
use std::sync::OnceLock;

use tessera_hlo::{Module, Opcode};
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::Registry;
use tessera_remat::{gen, RematOptions, Rematerialization, SearchKind};
use tessera_runtime::harness::{compare_arrays, random_inputs, run_original};
use tessera_runtime::{Client, Tolerance};

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(1).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

fn testdata() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata"))
}

fn registry() -> Registry {
    let mut r = Registry::with_generic_passes();
    tessera_remat::register(&mut r);
    r
}

/// Rewrites what the plugin cannot take from these hand-written modules into ops with the same
/// values: a fusion becomes a call of the same computation (the CPU backend aborts the whole
/// process on their fusions, which lack the layouts its fusion emitter expects, see
/// docs/runtime.md); a bitcast becomes a reshape (the same values under default layouts; the
/// plugin refuses the layouts bitcasts carry here).
fn defuse(m: &Module) -> Module {
    let mut m = m.clone();
    let ids: Vec<_> = m
        .computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions().to_vec())
        .filter(|&i| matches!(m.instr(i).opcode, Opcode::Fusion | Opcode::Bitcast))
        .collect();
    for i in ids {
        let instr = m.instr_mut(i);
        if instr.opcode == Opcode::Bitcast {
            instr.opcode = Opcode::Reshape;
        } else {
            instr.opcode = Opcode::Call;
            instr.attrs.fusion_kind = None;
        }
    }
    m
}

/// Largest absolute error over all outputs, or the first harness error.
fn max_error(original: &Module, rewritten: &Module, seed: u64) -> Result<f64, String> {
    let (original, rewritten) = (&defuse(original), &defuse(rewritten));
    let inputs = random_inputs(original, seed).map_err(|e| e.to_string())?;
    let expected = run_original(client(), original, &inputs).map_err(|e| e.to_string())?;
    let actual = run_original(client(), rewritten, &inputs).map_err(|e| e.to_string())?;
    if expected.len() != actual.len() {
        return Err(format!(
            "{} outputs before, {} after",
            expected.len(),
            actual.len()
        ));
    }
    let mut worst = 0.0f64;
    for (k, (e, a)) in expected.iter().zip(&actual).enumerate() {
        let r = compare_arrays(k, e, a, Tolerance::for_type(e.ty)).map_err(|e| e.to_string())?;
        if !r.passed() {
            return Err(format!("{r}"));
        }
        worst = worst.max(r.max_abs_error);
    }
    Ok(worst)
}

fn remat(m: &Module, fraction: f64, search: SearchKind, block: usize) -> (Module, i64) {
    let mut out = m.clone();
    let mut probe = Rematerialization::new(RematOptions::default());
    let peak = probe.run_with_summary(&mut m.clone()).unwrap().peak_before;
    let mut pass = Rematerialization::new(RematOptions {
        memory_limit: Some((peak as f64 * fraction) as i64),
        search,
        block_size_limit: block,
        ..RematOptions::default()
    });
    let s = pass.run_with_summary(&mut out).unwrap();
    (out, s.instructions_rematerialized)
}

fn collective(m: &Module) -> Option<&'static str> {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions())
        .map(|&i| m.instr(i).opcode)
        .find(|op| {
            matches!(
                op,
                Opcode::AllGather
                    | Opcode::AllReduce
                    | Opcode::ReduceScatter
                    | Opcode::AllToAll
                    | Opcode::CollectivePermute
            )
        })
        .map(|op| op.name())
}

fn custom_call_target(m: &Module) -> Option<String> {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions())
        .find(|&&i| m.instr(i).opcode == Opcode::CustomCall)
        .map(|&i| {
            let a = &m.instr(i).attrs.custom_call;
            a.as_ref().map(|c| c.target.clone()).unwrap_or_default()
        })
}

fn remat_count(m: &Module) -> usize {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions())
        .filter(|&&i| m.instr(i).name.contains(".remat"))
        .count()
}

#[test]
fn filetest_modules_compute_the_same_after_rematerialization() {
    let r = registry();
    let hooks = default_hooks();
    let mut dir: Vec<PathBuf> = std::fs::read_dir(testdata().join("remat"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    dir.sort();
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    for path in dir {
        let text = std::fs::read_to_string(&path).unwrap();
        let run = text.lines().next().unwrap_or("");
        if !run.contains("rematerialization") && !run.contains("remat,") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let spec = OptSpec::from_run_line(run).unwrap();
        let original = tessera_hlo::text::parse_module(&text).unwrap();
        let out = run_opt(&text, &spec, &r, &hooks).unwrap();
        let changed = remat_count(&out.module);
        if changed == 0 {
            continue;
        }
        if let Some(op) = collective(&original) {
            skipped.push(format!(
                "{name}: {op} over several devices (a 1-device test)"
            ));
            continue;
        }
        if let Some(target) = custom_call_target(&original) {
            skipped.push(format!(
                "{name}: custom-call `{target}` has no CPU implementation"
            ));
            continue;
        }
        match max_error(&original, &out.module, 7) {
            Ok(err) => checked.push(format!("{name}: {changed} remat, max abs error {err:e}")),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!("{}\nnot run:\n{}", checked.join("\n"), skipped.join("\n"));
    assert!(skipped.len() <= 2, "{}", skipped.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked.len() >= 5,
        "only {} rematerialized filetest modules",
        checked.len()
    );
}

#[test]
fn generated_modules_compute_the_same_after_rematerialization() {
    let mut cases: Vec<(String, Module)> = vec![
        ("chain_301".into(), gen::chain(301, 16)),
        ("ladder_400".into(), gen::ladder(400, 16, 12, 3)),
    ];
    for seed in 0..3 {
        cases.push((format!("dag_30_{seed}"), gen::random_dag(30, 2, 16, seed)));
    }
    for (name, m) in cases {
        for search in [SearchKind::Fast, SearchKind::Faithful] {
            let (out, n) = remat(&m, 0.6, search, 4);
            if name.starts_with("chain") || name.starts_with("ladder") {
                assert!(n > 0, "{name} {search:?}: nothing rematerialized");
            }
            if n > 0 {
                let err = max_error(&m, &out, 11).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(err, 0.0, "{name} {search:?}");
            }
        }
    }
}

#[test]
fn transformer_step_computes_the_same_after_rematerialization() {
    let path = testdata().join("models/transformer2_1dev.hlo");
    let text = std::fs::read_to_string(&path).unwrap();
    let original = tessera_hlo::text::parse_module(&text).unwrap();
    let mut scheduled = original.clone();
    let r = registry();
    let mut p = r.build_pipeline("schedule", &[]).unwrap();
    p.run_with_report(&mut scheduled).unwrap();
    let (out, n) = remat(&scheduled, 0.7, SearchKind::Fast, 1);
    assert!(n > 10, "only {n} rematerialized");
    let err = max_error(&original, &out, 3).unwrap();
    assert!(err < 1e-3, "{err}");
}

/// A wrong rewrite is caught: after rematerializing the chain, one recomputed instruction
/// reads the parameter instead of its operand.
#[test]
fn mutant_is_caught() {
    let m = gen::chain(61, 16);
    let (mut out, n) = remat(&m, 0.5, SearchKind::Fast, 1);
    assert!(n > 0);
    assert_eq!(max_error(&m, &out, 5).unwrap(), 0.0);
    let c = out.entry().unwrap();
    let p = out.comp(c).parameter(0).unwrap();
    let victim = out
        .comp(c)
        .instructions()
        .iter()
        .copied()
        .find(|&i| {
            out.instr(i).name.contains(".remat")
                && out.instr(i).opcode != Opcode::Parameter
                && out.operands(i)[0] != p
        })
        .expect("a rematerialized instruction");
    out.replace_operand(victim, 0, p).unwrap();
    let e = max_error(&m, &out, 5).expect_err("the mutant must differ");
    assert!(e.contains("DIFFERS"), "{e}");
}
