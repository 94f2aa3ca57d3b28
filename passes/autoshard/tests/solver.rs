//! The IOPDDL evaluator against hand-computed cases, and the solver against brute force on small
//! random problems and on the contest's example and instances B and G.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tessera_autoshard::iopddl::{parse_solution, solution_json, FORBIDDEN};
use tessera_autoshard::{evaluate, solve, Problem, SolveOptions};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name)
}

fn options(seconds: f64) -> SolveOptions {
    SolveOptions {
        time_limit: Duration::from_secs_f64(seconds),
        ..SolveOptions::default()
    }
}

/// Every assignment, in order; the cheapest feasible one and its cost.
fn brute_force(p: &Problem) -> Option<(u128, Vec<usize>)> {
    let n = p.num_nodes();
    let mut x = vec![0usize; n];
    let mut best: Option<(u128, Vec<usize>)> = None;
    loop {
        let e = evaluate(p, &x).unwrap();
        if e.feasible() && best.as_ref().is_none_or(|(c, _)| e.cost < *c) {
            best = Some((e.cost, x.clone()));
        }
        let mut i = 0;
        loop {
            if i == n {
                return best;
            }
            x[i] += 1;
            if x[i] < p.node_costs[i].len() {
                break;
            }
            x[i] = 0;
            i += 1;
        }
    }
}

#[test]
fn example_is_solved_to_its_optimum() {
    let p = Problem::read(&testdata("example.json")).unwrap();
    let (opt, _) = brute_force(&p).unwrap();
    let r = solve(&p, &options(5.0));
    let x = r.solution.unwrap();
    let e = evaluate(&p, &x).unwrap();
    assert!(e.feasible(), "{:?}", e.infeasible);
    assert_eq!(Some(e.cost), r.cost);
    assert_eq!(e.cost, opt);
    assert!(r.optimal);
    assert_eq!(r.lower_bound, opt);
    // The solution round-trips through its JSON.
    assert_eq!(parse_solution(solution_json(&x).as_bytes()).unwrap(), x);
}

#[test]
fn evaluator_follows_the_contest_rules() {
    // Two nodes: [0, 10) and [10, 20) never overlap (half-open); [5, 15) overlaps both.
    let mut p = Problem {
        name: "rules".into(),
        intervals: vec![(0, 10), (10, 20), (5, 15)],
        node_costs: vec![vec![1, 2], vec![3, FORBIDDEN], vec![5]],
        node_usages: vec![vec![6, 4], vec![6, 1], vec![4]],
        edges: vec![(0, 1), (1, 2)],
        edge_costs: vec![vec![10, 20, 30, 40], vec![7, FORBIDDEN]],
        usage_limit: Some(10),
    };
    let e = evaluate(&p, &[0, 0, 0]).unwrap();
    assert_eq!(e.cost, 1 + 3 + 5 + 10 + 7);
    assert_eq!(e.peak_usage, 10);
    assert!(e.feasible());
    // A forbidden node strategy and a forbidden edge pair.
    assert!(!evaluate(&p, &[0, 1, 0]).unwrap().feasible());
    p.node_costs[1][1] = 0;
    let e = evaluate(&p, &[0, 1, 0]).unwrap();
    assert!(e.infeasible.unwrap().contains("edge 1"));
    // Over the limit by one.
    p.usage_limit = Some(9);
    let e = evaluate(&p, &[0, 0, 0]).unwrap();
    assert!(e.infeasible.unwrap().contains("above the limit 9"));
    // Node 0 at 4 bytes: 4 + 4 in [5, 10), 6 + 4 in [10, 15).
    assert_eq!(evaluate(&p, &[1, 0, 0]).unwrap().peak_usage, 10);
    // Malformed solutions are errors, not panics.
    assert!(evaluate(&p, &[0, 0]).is_err());
    assert!(evaluate(&p, &[0, 0, 3]).is_err());
    // The problem's JSON round-trips.
    assert_eq!(Problem::from_json(p.to_json().as_bytes()).unwrap(), p);
}

#[test]
fn malformed_problems_are_refused_with_the_place() {
    let cases = [
        (r#"{"nodes": {}}"#, "no top-level"),
        (
            r#"{"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[1]], "usages": [[1, 2]]}}}"#,
            "node 0",
        ),
        (
            r#"{"problem": {"nodes": {"intervals": [[2, 1]], "costs": [[1]], "usages": [[1]]}}}"#,
            "ends before",
        ),
        (
            r#"{"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[1]], "usages": [[1]]},
                "edges": {"nodes": [[0, 5]], "costs": [[1]]}}}"#,
            "out of range",
        ),
        (
            r#"{"problem": {"nodes": {"intervals": [[0, 1], [0, 1]], "costs": [[1], [1, 2]], "usages": [[1], [1, 2]]},
                "edges": {"nodes": [[0, 1]], "costs": [[1]]}}}"#,
            "expected 2",
        ),
    ];
    for (text, want) in cases {
        let err = Problem::from_json(text.as_bytes()).unwrap_err().to_string();
        assert!(err.contains(want), "{err} (wanted {want})");
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn random_problem(rng: &mut Rng) -> Problem {
    let n = 2 + rng.next(6) as usize;
    let mut p = Problem {
        name: "random".into(),
        ..Problem::default()
    };
    for _ in 0..n {
        let a = rng.next(10);
        p.intervals.push((a, a + rng.next(8)));
        let k = 1 + rng.next(3) as usize;
        p.node_costs.push(
            (0..k)
                .map(|_| {
                    if rng.next(8) == 0 {
                        FORBIDDEN
                    } else {
                        rng.next(50)
                    }
                })
                .collect(),
        );
        p.node_usages.push((0..k).map(|_| rng.next(20)).collect());
    }
    for _ in 0..rng.next(2 * n as u64) {
        let (a, b) = (rng.next(n as u64) as usize, rng.next(n as u64) as usize);
        let k = p.node_costs[a].len() * p.node_costs[b].len();
        p.edges.push((a, b));
        p.edge_costs.push(
            (0..k)
                .map(|_| {
                    if rng.next(6) == 0 {
                        FORBIDDEN
                    } else {
                        rng.next(40)
                    }
                })
                .collect(),
        );
    }
    p.usage_limit = Some(10 + rng.next(40));
    p
}

#[test]
fn random_problems_agree_with_brute_force() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut solved, mut optimal, mut proven) = (0, 0, 0);
    for case in 0..300 {
        let p = random_problem(&mut rng);
        let truth = brute_force(&p);
        let r = solve(&p, &options(2.0));
        match (&truth, &r.solution) {
            (Some((opt, _)), Some(x)) => {
                let e = evaluate(&p, x).unwrap();
                assert!(e.feasible(), "case {case}: {:?}", e.infeasible);
                assert_eq!(Some(e.cost), r.cost, "case {case}");
                assert!(
                    e.cost >= *opt && r.lower_bound <= *opt,
                    "case {case}: {r:?} vs {opt}"
                );
                if r.optimal {
                    assert_eq!(e.cost, *opt, "case {case}: claimed optimal");
                }
                solved += 1;
                optimal += usize::from(e.cost == *opt);
                proven += usize::from(r.optimal);
            }
            (None, Some(x)) => {
                panic!("case {case}: {x:?} for a problem without a feasible solution")
            }
            (Some(_), None) => {
                assert!(
                    !r.infeasible,
                    "case {case}: called infeasible but has a solution"
                );
            }
            (None, None) => {}
        }
    }
    // Problems this small go to the exact solve: every optimum is found and proven.
    assert!(solved > 100, "{solved} solved");
    assert_eq!(optimal, solved, "{optimal} of {solved} optimal");
    assert_eq!(proven, solved, "{proven} of {solved} proven optimal");
}

/// B and G, the contest instances small enough for the exact solve: proven optimal (the optima
/// HiGHS gives as a plain MIP, ../shared/ORACLE.md: 532,843 and 217,039) well within the
/// contest's limits (60 s and 120 s; about 5 s each here, debug build).
#[test]
fn instances_b_and_g_are_proven_optimal() {
    for (name, optimum, limit) in [
        ("asplos-2025-iopddl-B.json.gz", 532_843u128, 60.0),
        ("asplos-2025-iopddl-G.json.gz", 217_039, 120.0),
    ] {
        let p = Problem::read(&testdata(name)).unwrap();
        assert_eq!(p.num_nodes(), 816);
        let r = solve(&p, &options(limit));
        let x = r
            .solution
            .clone()
            .unwrap_or_else(|| panic!("{name}: no solution"));
        let e = evaluate(&p, &x).unwrap();
        assert!(e.feasible(), "{name}: {:?}", e.infeasible);
        assert_eq!(Some(e.cost), r.cost);
        assert_eq!(e.cost, optimum, "{name}: not the optimum");
        assert!(r.optimal, "{name}: optimum not proven ({r:?})");
        assert_eq!(r.lower_bound, optimum, "{name}");
    }
}
