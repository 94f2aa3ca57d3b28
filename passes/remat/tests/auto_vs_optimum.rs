//! The pass with default options (`search=auto`) against the exact optimum
//! (`tessera_remat::optimal`, A* over the fixed schedule: the fewest recomputations) on
//! generated training-like graphs: chains (forward then backward), shared-operand chains,
//! ladders (residual skips) and random DAGs, 12 to 30 instructions, at 90%, 70% and 50% of the
//! scheduled peak. Every value is an `f32[16]` from a one-flop-per-element op, so recompute
//! flops are 16 per recomputation and the pass's cost is its net instructions added (a move
//! costs nothing, as in the optimum's model).
//!
//! Checked: the pass never misses a limit the optimum meets; its cost is within 10% of the
//! optimum's (rounded up to a whole recomputation) on at least 90% of the feasible cases. The
//! counts are printed (`--nocapture`) and recorded in docs/rematerialization.md. The pass may
//! reschedule (levels 2-4), so it can beat the fixed-schedule optimum; that is allowed.

use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_remat::optimal::{Optimum, Problem};
use tessera_remat::{gen, peak_memory, RematOptions, Rematerialization};

fn module_peak(m: &Module) -> i64 {
    peak_memory(m, m.schedule.as_ref().unwrap(), &shape_size)
        .unwrap()
        .peak_bytes
}

fn cases() -> Vec<(String, Module)> {
    let mut v = Vec::new();
    for n in [13, 19, 25, 31] {
        v.push((format!("chain({n})"), gen::chain(n, 16)));
        v.push((
            format!("shared_operand_chain({n})"),
            gen::shared_operand_chain(n, 16),
        ));
    }
    for (n, skip, rung) in [(16, 2, 1), (20, 3, 1), (24, 2, 2), (28, 4, 1), (30, 3, 2)] {
        v.push((
            format!("ladder({n},{skip},{rung})"),
            gen::ladder(n, 16, skip, rung),
        ));
    }
    for seed in 0..60u64 {
        let ops = 12 + (seed % 19) as usize;
        v.push((
            format!("random_dag({ops}, seed {seed})"),
            gen::random_dag(ops, 1 + (seed % 3) as usize, 16, seed),
        ));
    }
    v
}

#[test]
fn auto_is_near_the_optimum_and_meets_every_feasible_limit() {
    let (mut feasible, mut within, mut infeasible, mut gave_up, mut beat) = (0, 0, 0, 0, 0);
    let mut misses = Vec::new();
    let mut far = Vec::new();
    for (name, m) in cases() {
        let Ok(p) = Problem::from_module(&m, &shape_size) else {
            continue;
        };
        let peak = p.schedule_peak();
        assert_eq!(peak, module_peak(&m), "{name}");
        for pct in [90, 70, 50] {
            let limit = peak * pct / 100;
            let opt = p.solve(limit, 1 << 20);
            let mut out = m.clone();
            let s = Rematerialization::new(RematOptions {
                memory_limit: Some(limit),
                ..RematOptions::default()
            })
            .run_with_summary(&mut out)
            .unwrap();
            tessera_hlo::verify::verify(&out, &Default::default()).unwrap();
            let reached = module_peak(&out);
            assert_eq!(reached, s.peak_after, "{name} at {pct}%");
            let cost = out.instruction_count() as i64 - m.instruction_count() as i64;
            assert_eq!(
                s.recompute_flops,
                16 * cost.max(0),
                "{name} at {pct}%: flops"
            );
            match opt {
                Optimum::Found { recomputations, .. } => {
                    feasible += 1;
                    let best = recomputations as i64;
                    if reached > limit {
                        misses.push(format!(
                            "{name} at {pct}%: reached {reached}, limit {limit}, optimum {best}"
                        ));
                    } else if cost <= best + (best + 9) / 10 {
                        within += 1;
                        if cost < best {
                            beat += 1;
                        }
                    } else {
                        far.push(format!("{name} at {pct}%: {cost} against {best}"));
                    }
                }
                Optimum::Infeasible => infeasible += 1,
                Optimum::GaveUp { .. } => gave_up += 1,
            }
        }
    }
    println!(
        "feasible {feasible}: met within 10% of the optimum {within} (below it, by rescheduling: {beat}), \
         met further from it {}, missed {}; infeasible {infeasible}; optimum not found {gave_up}",
        far.len(),
        misses.len()
    );
    for f in &far {
        println!("  far: {f}");
    }
    for f in &misses {
        println!("  missed: {f}");
    }
    assert!(misses.is_empty(), "missed feasible limits: {misses:#?}");
    assert!(
        within * 10 >= feasible * 9,
        "only {within} of {feasible} within 10% of the optimum"
    );
}

mod support;

use std::time::{Duration, Instant};

use support::{Graph, Milp};

/// `layers` attention blocks on `x: f32[seq,dim]` with shared weights, forward then a
/// backward-style pass that reads the forward values again. Forward, per layer:
/// `q, k, v = h·wq, h·wk, h·wv`; scores `s = q·kᵀ`; softmax-like `p = exp(tanh(s))`; weighted
/// sum `o = p·v`; output projection `y = o·wo`; residual `h' = h + y`. Then `g = tanh(h_L)`
/// and, per layer in reverse: `dO = g·woᵀ`, `dP = dO·vᵀ`, `dV = pᵀ·dO`, `dS = dP * p`,
/// `dQ = dS·k`, `dK = dSᵀ·q`, `g' = g + dQ·wqᵀ + dK·wkᵀ + dV·wvᵀ`: `21 layers + 1`
/// instructions, dots costing `2·seq·dim·dim` or `2·seq·seq·dim` flops against `seq·dim`
/// or `seq·seq` for the element-wise ones.
fn attention(layers: usize, seq: i64, dim: i64) -> Module {
    let (sd, ss, dd) = (
        format!("f32[{seq},{dim}]{{1,0}}"),
        format!("f32[{seq},{seq}]{{1,0}}"),
        format!("f32[{dim},{dim}]{{1,0}}"),
    );
    let mut t = format!("HloModule attention_{layers}, is_scheduled=true\n\nENTRY %main {{\n");
    t += &format!("  %h0 = {sd} parameter(0)\n");
    for (k, w) in ["wq", "wk", "wv", "wo"].iter().enumerate() {
        t += &format!("  %{w} = {dd} parameter({})\n", k + 1);
    }
    let dot = |t: &mut String, name: String, shape: &str, a: &str, b: &str, lc: u8, rc: u8| {
        *t += &format!(
            "  %{name} = {shape} dot(%{a}, %{b}), lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{{rc}}}\n"
        );
    };
    for l in 0..layers {
        let h = format!("h{l}");
        dot(&mut t, format!("q{l}"), &sd, &h, "wq", 1, 0);
        dot(&mut t, format!("k{l}"), &sd, &h, "wk", 1, 0);
        dot(&mut t, format!("v{l}"), &sd, &h, "wv", 1, 0);
        dot(
            &mut t,
            format!("s{l}"),
            &ss,
            &format!("q{l}"),
            &format!("k{l}"),
            1,
            1,
        );
        t += &format!("  %t{l} = {ss} tanh(%s{l})\n");
        t += &format!("  %p{l} = {ss} exponential(%t{l})\n");
        dot(
            &mut t,
            format!("o{l}"),
            &sd,
            &format!("p{l}"),
            &format!("v{l}"),
            1,
            0,
        );
        dot(&mut t, format!("y{l}"), &sd, &format!("o{l}"), "wo", 1, 0);
        t += &format!("  %h{} = {sd} add(%h{l}, %y{l})\n", l + 1);
    }
    t += &format!("  %g{layers} = {sd} tanh(%h{layers})\n");
    for l in (0..layers).rev() {
        let g = format!("g{}", l + 1);
        dot(&mut t, format!("dO{l}"), &sd, &g, "wo", 1, 1);
        dot(
            &mut t,
            format!("dP{l}"),
            &ss,
            &format!("dO{l}"),
            &format!("v{l}"),
            1,
            1,
        );
        dot(
            &mut t,
            format!("dV{l}"),
            &sd,
            &format!("p{l}"),
            &format!("dO{l}"),
            0,
            0,
        );
        t += &format!("  %dS{l} = {ss} multiply(%dP{l}, %p{l})\n");
        dot(
            &mut t,
            format!("dQ{l}"),
            &sd,
            &format!("dS{l}"),
            &format!("k{l}"),
            1,
            0,
        );
        dot(
            &mut t,
            format!("dK{l}"),
            &sd,
            &format!("dS{l}"),
            &format!("q{l}"),
            0,
            0,
        );
        dot(&mut t, format!("gq{l}"), &sd, &format!("dQ{l}"), "wq", 1, 1);
        dot(&mut t, format!("gk{l}"), &sd, &format!("dK{l}"), "wk", 1, 1);
        dot(&mut t, format!("gv{l}"), &sd, &format!("dV{l}"), "wv", 1, 1);
        t += &format!("  %a{l} = {sd} add(%gq{l}, %gk{l})\n");
        t += &format!("  %b{l} = {sd} add(%a{l}, %gv{l})\n");
        let root = if l == 0 { "ROOT " } else { "" };
        t += &format!("  {root}%g{l} = {sd} add(%{g}, %b{l})\n");
    }
    t += "}\n";
    tessera_hlo::text::parse_module(&t).unwrap_or_else(|e| panic!("{e}\n{t}"))
}

/// The pass with default options against the MILP at `pct`% of the scheduled peak.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    feasible: usize,
    infeasible: usize,
    timed_out: Vec<String>,
    within: usize,
    beat: usize,
    far: Vec<String>,
    missed: Vec<String>,
}

impl Tally {
    fn add(&mut self, name: &str, m: &Module, pct: i64, time: Duration) {
        let g = Graph::from_module(m, &shape_size).expect("a MILP graph");
        let peak = module_peak(m);
        let limit = peak * pct / 100;
        self.cases += 1;
        let t0 = Instant::now();
        let opt = support::solve(&g, limit, time);
        let milp_s = t0.elapsed().as_secs_f64();
        let mut out = m.clone();
        let s = Rematerialization::new(RematOptions {
            memory_limit: Some(limit),
            ..RematOptions::default()
        })
        .run_with_summary(&mut out)
        .unwrap();
        tessera_hlo::verify::verify(&out, &Default::default()).unwrap();
        let reached = module_peak(&out);
        assert_eq!(reached, s.peak_after, "{name} at {pct}%");
        let cost = s.recompute_flops;
        let what = format!(
            "{name} ({} instructions) at {pct}%: pass {cost} flops, reached {reached} of limit {limit}, MILP {opt:?} in {milp_s:.1} s",
            g.len()
        );
        match opt {
            Milp::Optimal { flops: best } => {
                self.feasible += 1;
                if reached > limit {
                    self.missed.push(what);
                } else if cost * 10 <= best * 11 {
                    self.within += 1;
                    if cost < best {
                        self.beat += 1;
                    }
                } else {
                    self.far.push(what);
                }
            }
            Milp::Infeasible => self.infeasible += 1,
            Milp::TimedOut { .. } => self.timed_out.push(what),
        }
    }

    fn report(&self) {
        println!(
            "cases {}: MILP optimal (feasible) {}, infeasible {}, timed out {}; of the feasible, \
             pass within 10% of the optimum's recompute flops {} (below it, by rescheduling: {}), \
             met further from it {}, missed the limit {}",
            self.cases,
            self.feasible,
            self.infeasible,
            self.timed_out.len(),
            self.within,
            self.beat,
            self.far.len(),
            self.missed.len()
        );
        for f in &self.far {
            println!("  far: {f}");
        }
        for f in &self.missed {
            println!("  missed: {f}");
        }
        for f in &self.timed_out {
            println!("  timed out: {f}");
        }
    }
}

/// The MILP agrees with the exhaustive optimum (`optimal::Problem::solve`) on the small
/// generated graphs (every `step`-th of them, an attention block of one layer among them, 22
/// values), within 1 flop; a MILP that times out is counted apart, its bound and best
/// solution checked against the exhaustive optimum.
fn milp_against_exhaustive(step: usize, time: Duration) {
    let mut small = cases();
    small.push(("attention(1)".into(), attention(1, 4, 8)));
    let (mut compared, mut feasible, mut timed_out) = (0, 0, 0);
    for (name, m) in small.into_iter().step_by(step) {
        let p = Problem::from_module(&m, &shape_size).unwrap();
        let g = Graph::from_module(&m, &shape_size).unwrap();
        let peak = p.schedule_peak();
        for pct in [90, 70, 50] {
            let limit = peak * pct / 100;
            let milp = support::solve(&g, limit, time);
            let exact = match p.solve(limit, 1 << 20) {
                Optimum::Found { schedule, .. } => {
                    // Flops of the recomputations (every value after its first computation).
                    let mut seen = vec![false; p.len()];
                    let mut flops = 0;
                    for x in schedule {
                        if seen[x] {
                            flops += g.flops[x];
                        }
                        seen[x] = true;
                    }
                    Some(flops)
                }
                Optimum::Infeasible => None,
                Optimum::GaveUp { .. } => continue,
            };
            match (&milp, exact) {
                (Milp::Optimal { flops: a }, Some(b)) => {
                    assert!(
                        (a - b).abs() <= 1,
                        "{name} at {pct}%: MILP {a}, exhaustive {b}"
                    );
                    compared += 1;
                    feasible += 1;
                }
                (Milp::Infeasible, None) => compared += 1,
                (Milp::TimedOut { best, bound }, Some(b)) => {
                    assert!(
                        *bound <= b as f64 + 1.0,
                        "{name} at {pct}%: bound {bound} > {b}"
                    );
                    assert!(best.is_none_or(|x| x + 1 >= b), "{name} at {pct}%");
                    timed_out += 1;
                }
                (Milp::TimedOut { best: None, .. }, None) => timed_out += 1,
                _ => panic!("{name} at {pct}%: MILP {milp:?}, exhaustive {exact:?}"),
            }
        }
    }
    println!(
        "MILP = exhaustive optimum on {compared} limits ({feasible} feasible); MILP timed out on {timed_out}"
    );
    assert!(compared > 0);
}

/// A sample of the small cases (default run).
#[test]
fn milp_matches_the_exhaustive_optimum() {
    milp_against_exhaustive(8, Duration::from_secs(3));
}

/// All small cases: `cargo test -p tessera-remat --test auto_vs_optimum -- --ignored
/// --nocapture milp_matches_the_exhaustive_optimum_on_all`.
#[test]
#[ignore]
fn milp_matches_the_exhaustive_optimum_on_all() {
    milp_against_exhaustive(1, Duration::from_secs(10));
}

/// Medium cases, about 40 instructions, for the default run.
fn medium() -> Vec<(String, Module)> {
    vec![
        ("chain(40)".into(), gen::chain(40, 16)),
        ("ladder(40,3,1)".into(), gen::ladder(40, 16, 3, 1)),
        (
            "random_dag(40, seed 7)".into(),
            gen::random_dag(40, 2, 16, 7),
        ),
        ("attention(2)".into(), attention(2, 8, 16)),
    ]
}

/// Generated graphs of 40 to 200 instructions (54 cases): chains, shared-operand chains, ladders,
/// random DAGs and attention blocks.
fn large() -> Vec<(String, Module)> {
    let mut v = Vec::new();
    for n in [50, 100, 200] {
        v.push((format!("chain({n})"), gen::chain(n, 16)));
        v.push((
            format!("shared_operand_chain({n})"),
            gen::shared_operand_chain(n, 16),
        ));
    }
    for (n, skip, rung) in [(60, 3, 1), (120, 4, 2), (200, 5, 2)] {
        v.push((
            format!("ladder({n},{skip},{rung})"),
            gen::ladder(n, 16, skip, rung),
        ));
    }
    for seed in 0..6u64 {
        let ops = 40 + seed as usize * 32;
        v.push((
            format!("random_dag({ops}, seed {seed})"),
            gen::random_dag(ops, 1 + (seed % 3) as usize, 16, seed),
        ));
    }
    for layers in [2, 5, 9] {
        v.push((format!("attention({layers})"), attention(layers, 8, 16)));
    }
    v
}

fn sweep(cases: Vec<(String, Module)>, time: Duration) -> Tally {
    let mut t = Tally::default();
    for (name, m) in cases {
        for pct in [90, 70, 50] {
            t.add(&name, &m, pct, time);
        }
    }
    t.report();
    t
}

/// The pass against the MILP optimum on a handful of medium graphs. Ignored by default: the
/// MILP proves 2 of its 12 cases in its 2 s each (28 s in all, debug), too little for the CI
/// time it costs; `cargo test -p tessera-remat --test auto_vs_optimum -- --ignored medium`.
#[test]
#[ignore]
fn auto_against_the_milp_on_medium_graphs() {
    let t = sweep(medium(), Duration::from_secs(2));
    assert!(
        t.missed.is_empty(),
        "missed feasible limits: {:#?}",
        t.missed
    );
}

/// The full sweep up to 200 instructions, at 90/70/50% of the scheduled peak (minutes):
/// `cargo test -p tessera-remat --test auto_vs_optimum -- --ignored --nocapture
/// auto_against_the_milp_up_to_200` (each MILP limited to 10 s).
/// Counts recorded in docs/rematerialization.md, "Against the optimum".
#[test]
#[ignore]
fn auto_against_the_milp_up_to_200_instructions() {
    let t = sweep(large(), Duration::from_secs(10));
    assert!(
        t.missed.is_empty(),
        "missed feasible limits: {:#?}",
        t.missed
    );
}
