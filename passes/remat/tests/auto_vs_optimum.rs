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
use tessera_remat::{gen, peak_memory, RematOptions, RematSummary, Rematerialization, SearchKind};

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

use support::{Graph, Milp, Plan};

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

/// Runs the pass at `limit`; the result and its summary.
fn run_pass(m: &Module, limit: i64, search: SearchKind, keep: bool) -> (Module, RematSummary) {
    let mut out = m.clone();
    let s = Rematerialization::new(RematOptions {
        memory_limit: Some(limit),
        search,
        keep_dead_originals: keep,
        ..RematOptions::default()
    })
    .run_with_summary(&mut out)
    .unwrap();
    (out, s)
}

/// The pass with default options against the MILP at `pct`% of the scheduled peak, counted
/// only where HiGHS proves it: the pass is within 10% when its recompute flops are at most
/// 1.1 times HiGHS's proven lower bound, far when HiGHS found a solution more than 10%
/// cheaper, and it missed a limit when it went over and HiGHS found a solution under it.
/// Anything else is undecided.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    /// The pass met the limit without recomputing (the optimum cannot be lower).
    free: usize,
    /// The pass met the limit, proven within 10% of the optimum.
    within: usize,
    /// ... and below the fixed-schedule optimum's bound (by rescheduling or moves).
    beat: usize,
    /// The pass met a limit the fixed schedule cannot meet (by rescheduling).
    beyond: usize,
    /// The pass missed the limit and it is infeasible: proven by HiGHS, or below the floor.
    infeasible: usize,
    /// ... of which below the floor along the input's schedule (no MILP needed).
    below_floor: usize,
    /// The plans given to HiGHS as a start that fit the model.
    started: usize,
    far: Vec<String>,
    missed: Vec<String>,
    undecided: Vec<String>,
    milp_secs: f64,
}

impl Tally {
    fn add(&mut self, name: &str, m: &Module, pct: i64, time: Duration) {
        let g = Graph::from_module(m, &shape_size).expect("a MILP graph");
        let peak = module_peak(m);
        let limit = peak * pct / 100;
        self.cases += 1;
        let (out, s) = run_pass(m, limit, SearchKind::Auto, false);
        tessera_hlo::verify::verify(&out, &Default::default()).unwrap();
        let reached = module_peak(&out);
        assert_eq!(reached, s.peak_after, "{name} at {pct}%");
        let cost = s.recompute_flops;
        let met = reached <= limit;
        if met && cost == 0 {
            self.free += 1;
            return;
        }
        // Below the floor along the input's schedule (a lower bound on every solution of the
        // fixed-schedule model too), no solution exists.
        if !met && s.floor.is_some_and(|f| limit < f) {
            self.infeasible += 1;
            self.below_floor += 1;
            return;
        }
        // Starts: the pass's own walks over the input schedule, recomputing everything, and
        // the model's greedy; HiGHS gets the cheapest that fits.
        let mut plans: Vec<Plan> = [SearchKind::Auto, SearchKind::Fast]
            .into_iter()
            .filter_map(|k| g.recomputations(&run_pass(m, limit, k, true).0))
            .map(|r| Plan::new(&g, r))
            .collect();
        plans.push(Plan::recompute_all(&g));
        plans.extend(Plan::greedy(&g, limit - g.output_bytes));
        plans.sort_by_key(|p| p.flops(&g));
        // Stop as soon as the bound proves the pass within 10%; a missed limit needs only a
        // feasible solution.
        let gap = if met {
            (cost as f64 / 11.0 - 0.01).max(0.5)
        } else {
            1e15
        };
        let t0 = Instant::now();
        let solved = support::solve_from(&g, limit, time, &plans, gap);
        let milp_s = t0.elapsed().as_secs_f64();
        self.milp_secs += milp_s;
        self.started += usize::from(solved.started);
        let opt = &solved.milp;
        let what = format!(
            "{name} ({} instructions) at {pct}%: pass {cost} flops, reached {reached} of limit {limit}, \
             MILP {opt:?} in {milp_s:.1} s ({} columns, {} rows, memory rows in {} of {} stages, start {})",
            g.len(),
            solved.size.columns,
            solved.size.rows,
            solved.size.stages_with_memory,
            solved.size.stages,
            if solved.started { "given" } else { "none" },
        );
        match (met, opt) {
            (true, Milp::Infeasible) => self.beyond += 1,
            (true, _) if opt.lower_bound().is_some_and(|lb| cost * 10 <= lb * 11) => {
                self.within += 1;
                if opt.lower_bound().is_some_and(|lb| cost < lb) {
                    self.beat += 1;
                }
            }
            (true, _) if opt.best().is_some_and(|b| cost * 10 > b * 11) => self.far.push(what),
            (false, Milp::Infeasible) => self.infeasible += 1,
            (false, _) if opt.best().is_some() => self.missed.push(what),
            _ => self.undecided.push(what),
        }
    }

    fn report(&self) {
        println!(
            "cases {}: pass met the limit with no recomputation {}, proven within 10% of the \
             optimum {} (below its bound, by rescheduling or moves: {}; where the fixed schedule \
             cannot: {}), proven further than 10% {}; pass missed, proven infeasible {} (below \
             the floor: {}); pass missed, proven feasible (a miss) {}; undecided {}. HiGHS {:.1} s \
             in all, started from a plan {} times",
            self.cases,
            self.free,
            self.within,
            self.beat,
            self.beyond,
            self.far.len(),
            self.infeasible,
            self.below_floor,
            self.missed.len(),
            self.undecided.len(),
            self.milp_secs,
            self.started,
        );
        for f in &self.far {
            println!("  far: {f}");
        }
        for f in &self.missed {
            println!("  missed: {f}");
        }
        for f in &self.undecided {
            println!("  undecided: {f}");
        }
    }

    /// Proven within 10% (or met without recomputing) over the cases the MILP decided.
    fn within_share_ok(&self) -> bool {
        let ok = self.free + self.within + self.beyond;
        let decided = ok + self.far.len();
        ok * 10 >= decided * 9
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

/// No proven miss.
fn check_no_miss(t: &Tally) {
    assert!(
        t.missed.is_empty(),
        "missed feasible limits: {:#?}",
        t.missed
    );
}

/// No proven miss, and the pass proven within 10% on at least 90% of the cases decided.
fn check(t: &Tally) {
    check_no_miss(t);
    assert!(
        t.within_share_ok(),
        "proven further than 10% from the optimum: {:#?}",
        t.far
    );
}

/// Small training-like graphs for the default run (a few seconds): a chain, a shared-operand
/// chain, a ladder (residual skips) and one attention block, half a second a MILP.
#[test]
fn auto_against_the_milp_on_small_graphs() {
    let t = sweep(
        vec![
            ("chain(19)".into(), gen::chain(19, 16)),
            (
                "shared_operand_chain(19)".into(),
                gen::shared_operand_chain(19, 16),
            ),
            ("ladder(20,3,1)".into(), gen::ladder(20, 16, 3, 1)),
            ("attention(1)".into(), attention(1, 4, 8)),
        ],
        // HiGHS stops as soon as a case is decided; the room is for a loaded machine.
        Duration::from_secs(2),
    );
    check(&t);
    // Not vacuous: most cases are decided.
    assert!(
        t.undecided.len() * 2 <= t.cases,
        "{} of {} undecided",
        t.undecided.len(),
        t.cases
    );
}

/// The pass against the MILP on a handful of medium graphs (about 40 instructions, 2 s a
/// MILP): `cargo test -p tessera-remat --test auto_vs_optimum -- --ignored --nocapture medium`.
/// Checks only that no miss is proven: at this size most cases are still undecided, and one
/// (`random_dag(40, seed 7)` at 70%) is proven further than 10% (see the counts printed).
#[test]
#[ignore]
fn auto_against_the_milp_on_medium_graphs() {
    check_no_miss(&sweep(medium(), Duration::from_secs(2)));
}

/// The full sweep up to 200 instructions, at 90/70/50% of the scheduled peak, each MILP
/// limited to 8 s (under 10 minutes in all): `cargo test -p tessera-remat --test
/// auto_vs_optimum -- --ignored --nocapture auto_against_the_milp_up_to_200`. Counts recorded
/// in docs/rematerialization.md, "MILP yardstick". Checks only that no miss is proven (most
/// cases are undecided at this size, so the 90% share is not shown either way).
#[test]
#[ignore]
fn auto_against_the_milp_up_to_200_instructions() {
    check_no_miss(&sweep(large(), Duration::from_secs(8)));
}
