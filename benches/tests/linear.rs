//! Cost regressions that are cheap enough for CI (debug build), and numbers for the passes
//! that the linear-cost work rewrote (`inline`, `tuple-simplify`, `dce`).
//!
//! - Work, not wall time: inlining a 5,000-deep call chain must create each instruction of
//!   the result about once. The module's instruction arena never reuses a slot, so its
//!   capacity counts every instruction ever made; inlining callees first (the old order)
//!   copied each level into every level above it, 12.5 M instructions for a 15 k result.
//! - Numbers: the three generated families before and after
//!   `inline,fix(tuple-simplify,dce)` run on the PJRT CPU plugin (1 device) with the same
//!   random inputs and give the same outputs; `mutant_is_caught` shows that the comparison
//!   can fail. The plugin must be installed (scripts/install-pjrt.sh).
//!
//! - Depth: every registered pass on a 10,000-deep call chain, in a test thread (2 MiB of
//!   stack, debug build): no walk may recurse once per nesting level.
//!
//! Times are in the `scaling` bench (docs/BENCHMARKS.md).

use std::sync::OnceLock;

use tessera_benches::{call_chain, flat_calls, registry, remat_chain, wide};
use tessera_hlo::verify::{verify, VerifyOptions};
use tessera_hlo::{Module, Opcode};
use tessera_runtime::harness::{compare_arrays, random_inputs, run_original};
use tessera_runtime::{Client, HostArray, Tolerance};

fn parse(text: &str) -> Module {
    tessera_hlo::text::parse_module(text).expect("generated modules parse")
}

fn run_passes(m: &mut Module, passes: &str) {
    let mut p = registry().build_pipeline(passes, &[]).unwrap();
    p.add_checker("verifier", |m| {
        verify(m, &VerifyOptions::default()).map_err(|e| e.to_string())
    });
    p.run_with_report(m).unwrap();
}

#[test]
fn inlining_a_5000_deep_chain_makes_each_instruction_once() {
    let depth = 5000;
    let mut m = parse(&call_chain(depth));
    let before = m.instr_capacity();
    run_passes(&mut m, "inline");
    assert_eq!(
        m.computations().len(),
        1,
        "every callee inlined and removed"
    );
    // The result: the parameter, one negate and `depth - 1` adds.
    assert_eq!(m.instruction_count(), depth + 1);
    // Each level's negate/add copied once, its call copied once (then removed).
    let made = m.instr_capacity() - before;
    assert!(
        made <= 3 * depth,
        "inlining made {made} instructions for a {depth}-deep chain (quadratic copying?)"
    );
}

#[test]
fn inlining_keeps_dead_callees_only_when_asked() {
    let mut m = parse(&call_chain(50));
    let mut p = registry()
        .build_pipeline("inline", &["inline.remove_dead_callees=false".to_string()])
        .unwrap();
    p.run_with_report(&mut m).unwrap();
    verify(&m, &VerifyOptions::default()).unwrap();
    let entry = m.entry().unwrap();
    let calls_in_entry = m
        .comp(entry)
        .instructions()
        .iter()
        .filter(|&&i| m.instr(i).opcode() == Opcode::Call)
        .count();
    assert_eq!(calls_in_entry, 0);
    assert_eq!(m.computations().len(), 51, "dead callees kept");
}

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::cpu(1).unwrap_or_else(|e| panic!("cannot create the PJRT CPU client: {e}"))
    })
}

fn outputs(m: &Module, seed: u64) -> Vec<HostArray> {
    let inputs = random_inputs(m, seed).unwrap();
    run_original(client(), m, &inputs).unwrap()
}

/// Largest difference between the outputs of `a` and `b` on the same random inputs, or the
/// comparison's report if they differ beyond the tolerance.
fn compare(a: &Module, b: &Module) -> Result<f64, String> {
    let (x, y) = (outputs(a, 7), outputs(b, 7));
    assert_eq!(x.len(), y.len());
    let mut worst = 0f64;
    for (k, (e, g)) in x.iter().zip(&y).enumerate() {
        let r = compare_arrays(k, e, g, Tolerance::for_type(e.ty)).map_err(|e| e.to_string())?;
        if !r.passed() {
            return Err(format!("{r}"));
        }
        worst = worst.max(r.max_abs_error);
    }
    Ok(worst)
}

#[test]
fn rewritten_families_compute_the_same_values() {
    for (name, text) in [
        ("call_chain(300)", call_chain(300)),
        ("flat_calls(300)", flat_calls(300)),
        ("wide(3000)", wide(3000)),
    ] {
        let original = parse(&text);
        let mut out = original.clone();
        run_passes(&mut out, "inline,fix(tuple-simplify,dce)");
        let entry = out.entry().unwrap();
        assert!(
            out.comp(entry).instructions().iter().all(|&i| !matches!(
                out.instr(i).opcode(),
                Opcode::Call | Opcode::GetTupleElement | Opcode::Tuple | Opcode::Exp
            )),
            "{name}: calls, tuple pairs or dead values left"
        );
        let worst = compare(&original, &out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(worst < 1e-3, "{name}: {worst}");
    }
}

#[test]
fn mutant_is_caught() {
    let original = parse(&flat_calls(20));
    let mut out = original.clone();
    run_passes(&mut out, "inline,fix(tuple-simplify,dce)");
    // A wrong rewrite: one add reads the parameter twice instead of its chain operand.
    let entry = out.entry().unwrap();
    let p = out.comp(entry).parameter(0).unwrap();
    let add = out
        .comp(entry)
        .instructions()
        .iter()
        .copied()
        .filter(|&i| out.instr(i).opcode() == Opcode::Add)
        .nth(10)
        .unwrap();
    out.replace_operand(add, 0, p).unwrap();
    assert!(
        compare(&original, &out).is_err(),
        "the comparison missed a wrong operand"
    );
}

/// Options that make `pass` do real work on [`remat_chain`]: rematerialization under a limit
/// that no level meets, so it walks into every callee.
fn deep_options(pass: &str) -> Vec<String> {
    match pass {
        "rematerialization" => vec!["rematerialization.memory_limit=64".to_string()],
        _ => Vec::new(),
    }
}

/// Runs `pass` on the scheduled chain with the verifier after it; returns the module and the
/// report.
fn run_scheduled(m: &Module, pass: &str) -> (Module, String) {
    let mut out = m.clone();
    let mut p = registry()
        .build_pipeline(pass, &deep_options(pass))
        .unwrap();
    p.add_checker("verifier", |m| {
        verify(m, &VerifyOptions::default()).map_err(|e| e.to_string())
    });
    let report = p
        .run_with_report(&mut out)
        .unwrap_or_else(|e| panic!("{pass}: {e}"));
    (out, format!("{report:?}"))
}

/// The instructions rematerialization made (named `X.remat...`), in every computation.
fn remat_clones(m: &Module) -> usize {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions().iter())
        .filter(|&&i| m.instr(i).name().contains(".remat"))
        .count()
}

#[test]
fn every_pass_walks_a_10000_deep_chain_in_a_test_thread() {
    // Rematerialization walked into callees by recursion and overflowed the stack here.
    let depth = 10_000;
    let m = parse(&remat_chain(depth));
    for info in registry().iter() {
        let (out, _) = run_scheduled(&m, info.name);
        if info.name == "rematerialization" {
            // Every level's `%n` is recomputed after its call: one clone per level.
            assert_eq!(
                remat_clones(&out),
                depth - 1,
                "one recomputed negate per level"
            );
        }
    }
}

#[test]
fn rematerialized_chain_computes_the_same_values() {
    // The same walk as above on a chain that XLA compiles quickly (its compile time grows
    // faster than linearly with the depth), executed against the original.
    let depth = 300;
    let m = parse(&remat_chain(depth));
    let (out, _) = run_scheduled(&m, "rematerialization");
    assert_eq!(remat_clones(&out), depth - 1);
    let worst = compare(&m, &out).unwrap();
    assert!(worst < 1e-3, "{worst}");
}
