//! Numbers, not only shapes: every module the rematerialization filetests rewrite
//! (testdata/remat/*.hlo whose RUN line runs `rematerialization`), the generated chain, ladder,
//! shared-operand chain and random-DAG families and the 2-layer transformer training step
//! (testdata/models/transformer2_1dev.hlo) run on the PJRT CPU plugin (1 device) before and
//! after rematerialization with the same random inputs; every output is compared element by
//! element (the runtime harness's per-type tolerances).
//!
//! A module with collectives runs as a per-device (SPMD) program on as many CPU devices as its
//! replica groups name, each device with its own random inputs, and every device's outputs are
//! compared. A custom call with one called computation (the XLA tests' `SomeCall`, which has
//! no implementation) is given a meaning, "apply the called computation", in both modules
//! alike.
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
use tessera_runtime::harness::{
    compare_arrays, per_device_options, prepare_partitioned, random_inputs, run_module,
    run_original,
};
use tessera_runtime::{Client, HostArray, Tolerance};

/// Devices of the CPU client: enough for the collectives of the filetests.
const DEVICES: usize = 4;

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(DEVICES).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
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
        .filter(|&i| matches!(m.instr(i).opcode(), Opcode::Fusion | Opcode::Bitcast))
        .collect();
    for i in ids {
        if m.instr(i).opcode() == Opcode::Bitcast {
            m.set_opcode(i, Opcode::Reshape);
        } else {
            m.set_opcode(i, Opcode::Call);
            m.instr_mut(i).attrs.fusion_kind = None;
        }
    }
    m
}

/// Gives every custom call with exactly one called computation the meaning "call that
/// computation" (a `call` of it), so a module whose custom-call target has no implementation
/// can run; both modules of a comparison get the same meaning. `None` if another custom call
/// is left.
fn give_custom_calls_a_meaning(m: &Module) -> Option<Module> {
    let mut m = m.clone();
    let ids: Vec<_> = m
        .computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions().to_vec())
        .filter(|&i| m.instr(i).opcode() == Opcode::CustomCall)
        .collect();
    for i in ids {
        let called = m.instr(i).called.to_vec();
        if called.len() != 1 || m.comp(called[0]).num_parameters() != m.operands(i).len() {
            return None;
        }
        m.set_opcode(i, Opcode::Call);
        m.instr_mut(i).attrs.custom_call = None;
    }
    Some(m)
}

/// Devices the module's collectives span (the largest device id in their replica groups,
/// plus one); 1 without collectives, `None` for groups the harness cannot make explicit or
/// more devices than the client has.
fn devices_needed(m: &Module) -> Option<usize> {
    let mut n = 1;
    for &c in m.computations() {
        for &i in m.comp(c).instructions() {
            let ins = m.instr(i);
            if collective(ins.opcode()).is_none() {
                continue;
            }
            let groups = ins.attrs.replica_groups.as_deref()?;
            for g in groups.groups().ok()? {
                for d in g {
                    n = n.max(d as usize + 1);
                }
            }
        }
    }
    (n <= DEVICES).then_some(n)
}

/// Runs `m` on `n` devices as a per-device program, device `k` with the random inputs of
/// seed `seed + k`; the outputs of every device, in device order, flattened.
fn run_on_devices(m: &Module, n: usize, seed: u64) -> Result<Vec<HostArray>, String> {
    let args = (0..n as u64)
        .map(|k| {
            random_inputs(m, seed + k)
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|v| v.as_array().cloned().ok_or("a tuple parameter".to_string()))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let prepared = prepare_partitioned(m, n).map_err(|e| e.to_string())?;
    let outs = run_module(client(), &prepared, &per_device_options(n), &args)
        .map_err(|e| e.to_string())?;
    Ok(outs.into_iter().flatten().collect())
}

/// Largest absolute error over all outputs (of every device), or the first harness error.
fn max_error(original: &Module, rewritten: &Module, seed: u64) -> Result<f64, String> {
    let (original, rewritten) = (&defuse(original), &defuse(rewritten));
    let n = devices_needed(original).ok_or("collectives the harness cannot place")?;
    let (expected, actual) = if n == 1 {
        let inputs = random_inputs(original, seed).map_err(|e| e.to_string())?;
        (
            run_original(client(), original, &inputs).map_err(|e| e.to_string())?,
            run_original(client(), rewritten, &inputs).map_err(|e| e.to_string())?,
        )
    } else {
        (
            run_on_devices(original, n, seed)?,
            run_on_devices(rewritten, n, seed)?,
        )
    };
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

fn collective(op: Opcode) -> Option<&'static str> {
    matches!(
        op,
        Opcode::AllGather
            | Opcode::AllReduce
            | Opcode::ReduceScatter
            | Opcode::AllToAll
            | Opcode::CollectivePermute
    )
    .then(|| op.name())
}

fn remat_count(m: &Module) -> usize {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions())
        .filter(|&&i| m.instr(i).name().contains(".remat"))
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
        let (Some(original), Some(rewritten)) = (
            give_custom_calls_a_meaning(&original),
            give_custom_calls_a_meaning(&out.module),
        ) else {
            skipped.push(format!(
                "{name}: a custom call without a single called computation"
            ));
            continue;
        };
        let Some(devices) = devices_needed(&original) else {
            skipped.push(format!(
                "{name}: collectives over groups the harness cannot place"
            ));
            continue;
        };
        match max_error(&original, &rewritten, 7) {
            Ok(err) => checked.push(format!(
                "{name}: {changed} remat, {devices} device(s), max abs error {err:e}"
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    eprintln!("{}\nnot run:\n{}", checked.join("\n"), skipped.join("\n"));
    assert!(skipped.is_empty(), "{}", skipped.join("\n"));
    // The two modules earlier versions skipped: an all-gather (4 devices) and a custom call.
    for name in [
        "remat-all-gather-channel-id.hlo: 2 remat, 4 device(s)",
        "remat-fusion-update-schedule.hlo",
    ] {
        assert!(
            checked.iter().any(|c| c.starts_with(name)),
            "{name} not checked"
        );
    }
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
        (
            "shared_operand_chain_301".into(),
            gen::shared_operand_chain(301, 16),
        ),
    ];
    for seed in 0..3 {
        cases.push((format!("dag_30_{seed}"), gen::random_dag(30, 2, 16, seed)));
    }
    // Small ones that `search=auto` solves exactly (its last level), and chains it meets by
    // recomputing before the later use.
    for seed in 3..9 {
        cases.push((format!("dag_20_{seed}"), gen::random_dag(20, 2, 16, seed)));
    }
    for (name, m) in &cases {
        for search in [SearchKind::Fast, SearchKind::Faithful, SearchKind::Auto] {
            let (out, n) = remat(m, 0.6, search, 4);
            if !name.starts_with("dag") {
                assert!(n > 0, "{name} {search:?}: nothing rematerialized");
            }
            if n > 0 {
                let err = max_error(m, &out, 11).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(err, 0.0, "{name} {search:?}");
            }
        }
    }
    // The settings of the remat unit test `clones_of_a_widely_shared_operand`, whose outputs
    // that test checks only for structure: here they run.
    let shared = gen::shared_operand_chain(600, 16);
    for (search, block) in [
        (SearchKind::Fast, 1),
        (SearchKind::Faithful, 1),
        (SearchKind::Fast, 4),
    ] {
        let (out, n) = remat(&shared, 0.8, search, block);
        assert!(n > 100, "shared_operand_chain_600 {search:?} {block}: {n}");
        let err = max_error(&shared, &out, 13)
            .unwrap_or_else(|e| panic!("shared_operand_chain_600 {search:?} {block}: {e}"));
        assert_eq!(err, 0.0, "shared_operand_chain_600 {search:?} {block}");
    }
    // The faithful scan capped after 50 candidates: the fast search takes over mid-walk
    // (`faithful_effort_limit`); the result computes the same.
    let (name, m) = &cases[0];
    let mut probe = Rematerialization::new(RematOptions::default());
    let peak = probe.run_with_summary(&mut m.clone()).unwrap().peak_before;
    let mut out = m.clone();
    let s = Rematerialization::new(RematOptions {
        memory_limit: Some(peak * 6 / 10),
        search: SearchKind::Faithful,
        faithful_effort_limit: Some(50),
        ..RematOptions::default()
    })
    .run_with_summary(&mut out)
    .unwrap();
    assert!(
        s.search_degraded && s.instructions_rematerialized > 10,
        "{s:?}"
    );
    let err = max_error(m, &out, 12).unwrap_or_else(|e| panic!("{name} capped: {e}"));
    assert_eq!(err, 0.0, "{name} capped");
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
    // Single instructions, and blocks of up to four (the fast block search); the original
    // runs once.
    let original = defuse(&original);
    let inputs = random_inputs(&original, 3).unwrap();
    let expected = run_original(client(), &original, &inputs).unwrap();
    for block in [1, 4] {
        let (out, n) = remat(&scheduled, 0.7, SearchKind::Fast, block);
        assert!(n > 10, "blocks of {block}: only {n} rematerialized");
        let actual = run_original(client(), &defuse(&out), &inputs).unwrap();
        assert_eq!(expected.len(), actual.len());
        for (k, (e, a)) in expected.iter().zip(&actual).enumerate() {
            let r = compare_arrays(k, e, a, Tolerance::for_type(e.ty)).unwrap();
            assert!(r.passed(), "blocks of {block}: {r}");
            assert!(r.max_abs_error < 1e-3, "blocks of {block}: {r}");
        }
    }
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
            out.instr(i).name().contains(".remat")
                && out.instr(i).opcode() != Opcode::Parameter
                && out.operands(i)[0] != p
        })
        .expect("a rematerialized instruction");
    out.replace_operand(victim, 0, p).unwrap();
    let e = max_error(&m, &out, 5).expect_err("the mutant must differ");
    assert!(e.contains("DIFFERS"), "{e}");
}

/// The multi-device comparison can fail too: in the rematerialized all-gather module, the
/// clone's replica group is reordered so that it gathers device 1's value first; the devices'
/// inputs differ, so the result differs.
#[test]
fn multi_device_mutant_is_caught() {
    let path = testdata().join("remat/remat-all-gather-channel-id.hlo");
    let text = std::fs::read_to_string(&path).unwrap();
    let spec = OptSpec::from_run_line(text.lines().next().unwrap()).unwrap();
    let out = run_opt(&text, &spec, &registry(), &default_hooks()).unwrap();
    let original = tessera_hlo::text::parse_module(&text).unwrap();
    assert_eq!(max_error(&original, &out.module, 7).unwrap(), 0.0);
    let mut mutant = out.module.clone();
    let c = mutant.entry().unwrap();
    let ag = mutant
        .comp(c)
        .instructions()
        .iter()
        .copied()
        .find(|&i| mutant.instr(i).name() == "ag.remat")
        .expect("the clone of the all-gather");
    mutant.instr_mut(ag).attrs.replica_groups =
        Some(Box::new(tessera_hlo::attrs::ReplicaGroups::Explicit(vec![
            vec![1, 0, 2, 3],
        ])));
    let e = max_error(&original, &mutant, 7).expect_err("the mutant must differ");
    assert!(e.contains("DIFFERS"), "{e}");
}
