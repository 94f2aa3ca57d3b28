//! The rematerialization pass against the exhaustive optimum (`tessera_remat::optimal`) on
//! small random DAGs: the pass's walk (its schedule with the dead originals kept) is a
//! solution of the optimum's problem, so it can never use fewer recomputations than the
//! optimum at a limit it meets, nor meet a limit the optimum calls infeasible; either would
//! reveal a bug in one of them. The full sweep with its figures is
//! `cargo run --release -p tessera-remat --example remat_eval -- optimum`.

use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_remat::optimal::{Optimum, Problem};
use tessera_remat::{gen, peak_memory, RematOptions, Rematerialization};

fn module_peak(m: &Module) -> i64 {
    peak_memory(m, m.schedule.as_ref().unwrap(), &shape_size)
        .unwrap()
        .peak_bytes
}

#[test]
fn pass_is_never_better_than_the_optimum() {
    let mut met = 0;
    let mut optimal = 0;
    let mut infeasible = 0;
    for seed in 0..120u64 {
        let m = gen::random_dag(10 + (seed % 15) as usize, 1 + (seed % 3) as usize, 16, seed);
        let p = Problem::from_module(&m, &shape_size).unwrap();
        let peak = p.schedule_peak();
        assert_eq!(peak, module_peak(&m), "seed {seed}");
        for pct in [90, 75] {
            let limit = peak * pct / 100;
            let opt = p.solve(limit, 1 << 21);
            if let Optimum::Found { schedule, .. } = &opt {
                let sol = p.materialize(&m, schedule).unwrap();
                tessera_hlo::verify::verify(&sol, &Default::default()).unwrap();
                assert_eq!(Some(module_peak(&sol)), p.peak_of(schedule));
                assert!(module_peak(&sol) <= limit);
            }
            for block_size_limit in [1, 4] {
                let mut walk = m.clone();
                let s = Rematerialization::new(RematOptions {
                    memory_limit: Some(limit),
                    block_size_limit,
                    keep_dead_originals: true,
                    check_invariants: true,
                    ..RematOptions::default()
                })
                .run_with_summary(&mut walk)
                .unwrap();
                tessera_hlo::verify::verify(&walk, &Default::default()).unwrap();
                let seq = p
                    .sequence_of(&walk)
                    .expect("clones are named after originals");
                let walk_peak = p.peak_of(&seq).expect("the walk is a solution");
                assert_eq!(walk_peak, module_peak(&walk), "seed {seed}");
                let clones = seq.len() - p.len();
                assert!(clones as i64 <= s.instructions_rematerialized);
                match &opt {
                    Optimum::Found { recomputations, .. } => {
                        if walk_peak <= limit {
                            met += 1;
                            assert!(
                                clones >= *recomputations,
                                "seed {seed} at {pct}%, blocks {block_size_limit}: the pass \
                                 used {clones} recomputations, the optimum {recomputations}"
                            );
                            if clones == *recomputations {
                                optimal += 1;
                            }
                        }
                    }
                    Optimum::Infeasible => {
                        infeasible += 1;
                        assert!(
                            walk_peak > limit && !s.limit_met,
                            "seed {seed} at {pct}%: the pass met an infeasible limit"
                        );
                    }
                    Optimum::GaveUp { states } => panic!("seed {seed}: gave up after {states}"),
                }
            }
        }
    }
    eprintln!("{met} runs met a feasible limit, {optimal} optimally; {infeasible} infeasible");
    assert!(
        met > 150 && optimal > 60 && infeasible > 20,
        "{met} {optimal} {infeasible}"
    );
}

/// The floor (`tessera_remat::remat_floor`) is a true lower bound: a limit one byte below it
/// is infeasible for the exhaustive optimum, on every DAG. How often the floor itself is
/// feasible says how tight it is.
#[test]
fn nothing_goes_below_the_floor() {
    let (mut tight, mut runs) = (0, 0);
    for seed in 0..80u64 {
        let m = gen::random_dag(10 + (seed % 15) as usize, 1 + (seed % 3) as usize, 16, seed);
        let p = Problem::from_module(&m, &shape_size).unwrap();
        let mem = peak_memory(&m, m.schedule.as_ref().unwrap(), &shape_size).unwrap();
        let floor = tessera_remat::remat_floor(&m, &mem);
        assert!(floor.any_schedule <= floor.bytes && floor.bytes <= mem.peak_bytes);
        match p.solve(floor.bytes - 1, 1 << 21) {
            Optimum::Infeasible => {}
            other => panic!("seed {seed}: below the floor {}: {other:?}", floor.bytes),
        }
        runs += 1;
        if matches!(p.solve(floor.bytes, 1 << 21), Optimum::Found { .. }) {
            tight += 1;
        }
    }
    eprintln!("the floor was feasible (tight) on {tight} of {runs} DAGs");
    assert!(tight > 0);
}
