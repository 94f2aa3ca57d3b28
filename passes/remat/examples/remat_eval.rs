//! Measurements of the rematerialization pass (figures in docs/BENCHMARKS.md):
//!
//! ```text
//! cargo run --release -p tessera-remat --example remat_eval -- transformer [--reps N] [--block B] [--pcts 90,70,50] [--searches fast,faithful]
//! cargo run --release -p tessera-remat --example remat_eval -- scaling [--reps N] [--sizes 1000,3000,...]
//! cargo run --release -p tessera-remat --example remat_eval -- optimum [--dags N] [--pcts 90,80,...] [--blocks 1,4]
//! cargo run --release -p tessera-remat --example remat_eval -- once FILE PCT SEARCH [BLOCK]
//! ```
//!
//! - `transformer`: the 48-layer jax training step (testdata/models/transformer48_1dev.hlo),
//!   scheduled once with the default scheduler, then the pass alone (no parse, schedule,
//!   verify or print) at each limit and search: peak reached, instructions rematerialized and
//!   net added, and the pass time (median of `--reps`, each on a fresh copy).
//! - `scaling`: the fast search on the generated chain and ladder families from ~1k to ~100k
//!   instructions, with the least-squares growth exponent of time against size.
//! - `optimum`: the pass against the exhaustive optimum ([`optimal`]) on random DAGs of 12 to
//!   30 instructions at several limits: how often it is optimal, its excess recomputations,
//!   feasible limits it misses.
//! - `once`: one run of the pass on FILE (scheduled first if it is not; `chain:N` and
//!   `ladder:N` name generated modules) at PCT% of its peak;
//!   meant for profilers (`valgrind --tool=callgrind --toggle-collect=...run_inner...`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_remat::{
    gen, optimal, peak_memory, schedule_module, RematOptions, RematSummary, Rematerialization,
    SchedulerKind, SearchKind,
};

fn testdata() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata"))
}

fn load_scheduled(path: &std::path::Path) -> Module {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut m = tessera_hlo::text::parse_module(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if m.schedule.is_none() {
        schedule_module(&mut m, SchedulerKind::Default, &shape_size).expect("schedules");
    }
    m
}

/// The module peak along its schedule (the pass's `peak_before`).
fn peak_of(m: &Module) -> i64 {
    let s = m.schedule.as_ref().expect("scheduled");
    peak_memory(m, s, &shape_size).expect("measures").peak_bytes
}

fn search_name(s: SearchKind) -> &'static str {
    match s {
        SearchKind::Auto => "auto",
        SearchKind::Fast => "fast",
        SearchKind::Faithful => "faithful",
    }
}

fn parse_search(s: &str) -> SearchKind {
    match s {
        "auto" => SearchKind::Auto,
        "fast" => SearchKind::Fast,
        "faithful" => SearchKind::Faithful,
        other => panic!("unknown search `{other}`"),
    }
}

/// Runs the pass `reps` times on fresh copies; returns the summary and the median pass time.
fn time_pass(m: &Module, opts: &RematOptions, reps: usize) -> (RematSummary, Duration) {
    let mut times = Vec::with_capacity(reps);
    let mut summary = None;
    for _ in 0..reps.max(1) {
        let mut copy = m.clone();
        let mut pass = Rematerialization::new(opts.clone());
        let t = Instant::now();
        let s = pass.run_with_summary(&mut copy).expect("the pass runs");
        times.push(t.elapsed());
        drop(copy);
        if let Some(prev) = &summary {
            assert_eq!(prev, &s, "runs differ");
        }
        summary = Some(s);
    }
    times.sort();
    (summary.unwrap(), times[times.len() / 2])
}

struct Args(Vec<String>);

impl Args {
    fn value(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == key)
            .and_then(|k| self.0.get(k + 1))
            .map(|s| s.as_str())
    }
    fn list<T>(&self, key: &str, default: &[T]) -> Vec<T>
    where
        T: std::str::FromStr + Clone,
        T::Err: std::fmt::Debug,
    {
        match self.value(key) {
            Some(v) => v.split(',').map(|x| x.parse().unwrap()).collect(),
            None => default.to_vec(),
        }
    }
    fn num(&self, key: &str, default: usize) -> usize {
        self.value(key).map_or(default, |v| v.parse().unwrap())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn transformer(args: &Args) {
    let m = load_scheduled(&testdata().join("models/transformer48_1dev.hlo"));
    let reps = args.num("--reps", 3);
    let block = args.num("--block", 1);
    let pcts: Vec<i64> = args.list("--pcts", &[90, 70, 50]);
    let searches: Vec<String> = args.list("--searches", &["fast".into(), "faithful".into()]);
    let peak = peak_of(&m);
    println!(
        "transformer48_1dev: {} instructions, scheduled peak {peak} bytes, block_size_limit {block}, median of {reps}",
        m.instruction_count()
    );
    println!("| limit | search | peak after | rematerialized | net added | pass time (ms) |");
    println!("|---|---|---|---|---|---|");
    for pct in pcts {
        let mut times = Vec::new();
        for s in &searches {
            let search = parse_search(s);
            let opts = RematOptions {
                memory_limit: Some(peak * pct / 100),
                search,
                block_size_limit: block,
                ..RematOptions::default()
            };
            let (sum, t) = time_pass(&m, &opts, reps);
            assert_eq!(sum.peak_before, peak, "the pass measures another peak");
            println!(
                "| {pct}% ({}) | {} | {} | {} | {} | {:.1} |",
                peak * pct / 100,
                search_name(search),
                sum.peak_after,
                sum.instructions_rematerialized,
                sum.net_instructions_added,
                ms(t)
            );
            times.push(t);
        }
        if times.len() == 2 {
            println!(
                "|   | ratio | | | | {:.1}x |",
                times[1].as_secs_f64() / times[0].as_secs_f64()
            );
        }
    }
}

fn scaling(args: &Args) {
    let reps = args.num("--reps", 3);
    let sizes: Vec<usize> = args.list("--sizes", &[1000, 3000, 10000, 30000, 100000]);
    let pct = args.num("--pct", 50) as i64;
    // skip, rung, block_size_limit: recomputing a ladder value needs its add too (a block of
    // two); single instructions save nothing there.
    let ladder: Vec<usize> = args.list("--ladder", &[4, 1, 2]);
    println!(
        "fast search, limit {pct}% of the peak, chain(n, 64) with single instructions, ladder(n, 64, skip {}, rung {}) with blocks of up to {}, median of {reps}",
        ladder[0], ladder[1], ladder[2]
    );
    println!("| family | instructions | peak before | peak after | rematerialized | pass time (ms) | us / instruction |");
    println!("|---|---|---|---|---|---|---|");
    for family in ["chain", "ladder"] {
        let mut points = Vec::new();
        for &n in &sizes {
            let m = match family {
                "chain" => gen::chain(n, 64),
                _ => gen::ladder(n, 64, ladder[0], ladder[1]),
            };
            let count = gen::entry_size(&m);
            let peak = peak_of(&m);
            let opts = RematOptions {
                memory_limit: Some(peak * pct / 100),
                block_size_limit: if family == "chain" { 1 } else { ladder[2] },
                ..RematOptions::default()
            };
            let (sum, t) = time_pass(&m, &opts, reps);
            println!(
                "| {family} | {count} | {peak} | {} | {} | {:.1} | {:.2} |",
                sum.peak_after,
                sum.instructions_rematerialized,
                ms(t),
                t.as_secs_f64() * 1e6 / count as f64
            );
            points.push((count as f64, t.as_secs_f64()));
        }
        println!(
            "{family}: growth exponent {:.3}",
            gen::growth_exponent(&points)
        );
    }
}

/// One pass run for the comparison with the optimum.
struct PassRun {
    /// Recomputations (clones) the pass made.
    remat: usize,
    /// Net instructions added after the dead originals are removed.
    net: i64,
    reported_met: bool,
    /// The peak of the pass's walk (dead originals kept) recounted by the model.
    walk_peak: i64,
    /// The peak of the final module (dead originals removed), measured along its schedule.
    final_peak: i64,
    /// The summaries' `peak_after` of the walk run and of the final run.
    walk_reported_peak: i64,
    final_reported_peak: i64,
    final_reported_met: bool,
    /// The walk's peak measured by `peak_memory` along its schedule.
    walk_measured_peak: i64,
}

fn run_for_optimum(m: &Module, p: &optimal::Problem, opts: &RematOptions) -> PassRun {
    let mut walk = m.clone();
    let s = Rematerialization::new(RematOptions {
        keep_dead_originals: true,
        ..opts.clone()
    })
    .run_with_summary(&mut walk)
    .expect("the pass runs");
    let seq = p
        .sequence_of(&walk)
        .expect("clones are named after their originals");
    let walk_peak = p.peak_of(&seq).expect("the walk is a solution");
    // The summary counts every item of a chosen block (as XLA does), also those that had no
    // use left to clone for; the walk has the clones actually made.
    let clones = seq.len() - p.len();
    assert!(clones as i64 <= s.instructions_rematerialized);
    let mut fin = m.clone();
    let f = Rematerialization::new(opts.clone())
        .run_with_summary(&mut fin)
        .expect("the pass runs");
    PassRun {
        remat: clones,
        net: f.net_instructions_added,
        reported_met: s.limit_met,
        walk_peak,
        final_peak: peak_of(&fin),
        walk_reported_peak: s.peak_after,
        final_reported_peak: f.peak_after,
        final_reported_met: f.limit_met,
        walk_measured_peak: peak_of(&walk),
    }
}

#[derive(Default)]
struct Tally {
    cases: usize,
    feasible: usize,
    infeasible: usize,
    gave_up: usize,
    /// Feasible limits the pass met (by the model's count of its walk), and among them how
    /// far its recomputations are from the optimum.
    met: usize,
    equal: usize,
    excess: Vec<usize>,
    /// Feasible limits the pass did not meet.
    missed: usize,
    /// Among those, the final module (dead originals removed) is within the limit.
    missed_walk_final_met: usize,
    /// The pass's summary said "met" but its walk's recounted peak is over the limit, and
    /// the same for the final module.
    reported_met_but_over: usize,
    reported_met_but_final_over: usize,
    /// Runs whose summary's `peak_after` is not the peak measured along the result's
    /// schedule (the walk with dead originals kept; the final module).
    walk_summary_wrong: usize,
    final_summary_wrong: usize,
    /// Net instructions added below the optimum (moves).
    net_below_optimum: usize,
    states: Vec<usize>,
}

fn optimum(args: &Args) {
    let dags = args.num("--dags", 300);
    let pcts: Vec<i64> = args.list("--pcts", &[90, 80, 70, 60, 50]);
    let blocks: Vec<usize> = args.list("--blocks", &[1, 4]);
    let max_states = args.num("--max-states", 2_000_000);
    let show_misses = args.num("--show-misses", 0);
    let mut shown = 0;
    // Print the first N cases whose summary's peak differs from the measured peak.
    let show_lies = args.num("--show-lies", 0);
    let mut lies_shown = 0;
    let mut rng = tessera_hlo::rng::Rng::new(0x0b7);
    let mut tallies: Vec<((usize, i64), Tally)> = Vec::new();
    for &b in &blocks {
        for &pct in &pcts {
            tallies.push(((b, pct), Tally::default()));
        }
    }
    let t0 = Instant::now();
    for d in 0..dags {
        let ops = 12 + rng.below(19); // 12..=30
        let params = 1 + rng.below(3);
        let m = gen::random_dag(ops, params, 16, d as u64);
        let p = optimal::Problem::from_module(&m, &shape_size).expect("a plain DAG");
        let peak = p.schedule_peak();
        assert_eq!(
            peak,
            peak_of(&m),
            "the model and the pass count differently"
        );
        let mut solved: Vec<(i64, optimal::Optimum)> = Vec::new();
        for ((b, pct), tally) in tallies.iter_mut() {
            let limit = peak * *pct / 100;
            let opt = match solved.iter().find(|(l, _)| *l == limit) {
                Some((_, o)) => o.clone(),
                None => {
                    let t = Instant::now();
                    let o = p.solve(limit, max_states);
                    if args.0.iter().any(|a| a == "--verbose") {
                        println!(
                            "dag {d} ({} values) at {limit} ({pct}%): {o:?} in {:.2} s",
                            p.len(),
                            t.elapsed().as_secs_f64()
                        );
                    }
                    solved.push((limit, o.clone()));
                    o
                }
            };
            let opts = RematOptions {
                memory_limit: Some(limit),
                block_size_limit: *b,
                ..RematOptions::default()
            };
            let run = run_for_optimum(&m, &p, &opts);
            tally.cases += 1;
            // The summaries must report what the modules use: the walk's (dead originals
            // kept) and the final module's peaks measured independently along their schedules.
            let walk_wrong = run.walk_reported_peak != run.walk_measured_peak;
            let final_wrong = run.final_reported_peak != run.final_peak
                || run.final_reported_met != (run.final_peak <= limit);
            if walk_wrong {
                tally.walk_summary_wrong += 1;
            }
            if final_wrong {
                tally.final_summary_wrong += 1;
            }
            if (walk_wrong || final_wrong) && lies_shown < show_lies {
                lies_shown += 1;
                println!(
                    "summary differs: dag {d} (ops {ops}, params {params}) at {limit} ({pct}%, blocks {b}): walk summary {} measured {} (model {}), final summary {} (met {}) measured {}\n{}",
                    run.walk_reported_peak,
                    run.walk_measured_peak,
                    run.walk_peak,
                    run.final_reported_peak,
                    run.final_reported_met,
                    run.final_peak,
                    tessera_hlo::text::print_module(&m, &Default::default())
                );
            }
            if run.reported_met && run.walk_peak > limit {
                tally.reported_met_but_over += 1;
            }
            if run.reported_met && run.final_peak > limit {
                tally.reported_met_but_final_over += 1;
            }
            match opt {
                optimal::Optimum::Found {
                    recomputations,
                    schedule,
                } => {
                    // The optimum's schedule, rewritten as a module, verifies and measures
                    // its claimed peak by the project's own accounting.
                    let sol = p.materialize(&m, &schedule).expect("a solution");
                    tessera_hlo::verify::verify(&sol, &Default::default()).expect("verifies");
                    let measured = peak_of(&sol);
                    assert_eq!(Some(measured), p.peak_of(&schedule), "dag {d}");
                    assert!(measured <= limit, "dag {d}: the optimum is over the limit");
                    tally.feasible += 1;
                    if run.walk_peak <= limit {
                        tally.met += 1;
                        assert!(
                            run.remat >= recomputations,
                            "dag {d}: the pass beat the optimum ({} < {recomputations})",
                            run.remat
                        );
                        tally.excess.push(run.remat - recomputations);
                        if run.remat == recomputations {
                            tally.equal += 1;
                        }
                        if run.net < recomputations as i64 {
                            tally.net_below_optimum += 1;
                        }
                    } else {
                        if shown < show_misses && *b == 1 {
                            shown += 1;
                            let names: Vec<&str> =
                                schedule.iter().map(|&v| p.names[v].as_str()).collect();
                            println!(
                                "missed: dag {d} at {limit} ({pct}%, blocks {b}): walk peak {}, optimum {recomputations}: {}\n{}",
                                run.walk_peak,
                                names.join(" "),
                                tessera_hlo::text::print_module(&m, &Default::default())
                            );
                        }
                        tally.missed += 1;
                        if run.final_peak <= limit {
                            tally.missed_walk_final_met += 1;
                        }
                    }
                }
                optimal::Optimum::Infeasible => {
                    tally.infeasible += 1;
                    assert!(
                        run.walk_peak > limit && run.final_peak > limit,
                        "dag {d}: the pass met a limit the search calls infeasible"
                    );
                }
                optimal::Optimum::GaveUp { states } => {
                    tally.gave_up += 1;
                    tally.states.push(states);
                }
            }
        }
    }
    println!(
        "{dags} random DAGs (gen::random_dag, 12-30 ops, 1-3 parameters, f32[16]), fast search; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    println!("| blocks | limit | cases | feasible | pass met | = optimum | mean excess | max excess | excess histogram (0,1,2,3+) | missed feasible (final module met) | infeasible | gave up | summary met, walk (final) over |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for ((b, pct), t) in &tallies {
        let mean = if t.excess.is_empty() {
            0.0
        } else {
            t.excess.iter().sum::<usize>() as f64 / t.excess.len() as f64
        };
        let hist = [0, 1, 2]
            .iter()
            .map(|&k| t.excess.iter().filter(|&&e| e == k).count())
            .chain(std::iter::once(
                t.excess.iter().filter(|&&e| e >= 3).count(),
            ))
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "| {b} | {pct}% | {} | {} | {} | {} | {mean:.2} | {} | {hist} | {} ({}) | {} | {} | {} ({}) |",
            t.cases,
            t.feasible,
            t.met,
            t.equal,
            t.excess.iter().max().copied().unwrap_or(0),
            t.missed,
            t.missed_walk_final_met,
            t.infeasible,
            t.gave_up,
            t.reported_met_but_over,
            t.reported_met_but_final_over
        );
    }
    for ((b, pct), t) in &tallies {
        if t.net_below_optimum > 0 {
            println!(
                "blocks {b}, {pct}%: net instructions added below the optimum in {} cases (moves)",
                t.net_below_optimum
            );
        }
    }
    let (walk_wrong, final_wrong) = tallies.iter().fold((0, 0), |(w, f), (_, t)| {
        (w + t.walk_summary_wrong, f + t.final_summary_wrong)
    });
    let runs: usize = tallies.iter().map(|(_, t)| t.cases).sum();
    println!(
        "summary peak_after differs from the measured peak: walk {walk_wrong}, final module {final_wrong} of {runs} runs"
    );
}

fn once(args: &Args) {
    let file = args.0.get(1).expect("once FILE PCT SEARCH [BLOCK]");
    let pct: i64 = args.0.get(2).map_or(90, |v| v.parse().unwrap());
    let search = parse_search(args.0.get(3).map_or("fast", |s| s.as_str()));
    let block: usize = args.0.get(4).map_or(1, |v| v.parse().unwrap());
    // FILE may also name a generated module: chain:N or ladder:N (skip 4, rung 1).
    let m = match file.split_once(':') {
        Some(("chain", n)) => gen::chain(n.parse().unwrap(), 64),
        Some(("ladder", n)) => gen::ladder(n.parse().unwrap(), 64, 4, 1),
        _ => load_scheduled(std::path::Path::new(file)),
    };
    let peak = peak_of(&m);
    let opts = RematOptions {
        memory_limit: Some(peak * pct / 100),
        search,
        block_size_limit: block,
        ..RematOptions::default()
    };
    let (sum, t) = time_pass(&m, &opts, 1);
    println!(
        "{file} {pct}% {}: peak {} -> {}, {} rematerialized, {} net added, effort {}, pops {}, {:.1} ms",
        search_name(search),
        sum.peak_before,
        sum.peak_after,
        sum.instructions_rematerialized,
        sum.net_instructions_added,
        sum.effort,
        sum.queue_pops,
        ms(t)
    );
}

fn main() {
    let args = Args(std::env::args().skip(1).collect());
    match args.0.first().map(|s| s.as_str()) {
        Some("transformer") => transformer(&args),
        Some("scaling") => scaling(&args),
        Some("once") => once(&args),
        Some("optimum") => optimum(&args),
        _ => {
            eprintln!("usage: remat_eval transformer|scaling|once ... (see the source)");
            std::process::exit(2);
        }
    }
}
