//! Solves one IOPDDL problem and prints a line of results (the benchmark in scripts/).
//! Usage: iopddl_solve PROBLEM.json[.gz] [TIME_LIMIT_S]

use std::path::Path;
use std::time::{Duration, Instant};

use tessera_autoshard::{solve, Problem, SolveOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: iopddl_solve PROBLEM.json[.gz] [TIME_LIMIT_S]")?;
    let limit: f64 = args.get(2).map_or(Ok(60.0), |s| s.parse())?;
    let start = Instant::now();
    let problem = Problem::read(Path::new(path))?;
    let read = start.elapsed();
    let options = SolveOptions {
        time_limit: Duration::from_secs_f64(limit).saturating_sub(read),
        max_iterations: usize::MAX,
        ..SolveOptions::default()
    };
    let r = solve(&problem, &options);
    let cost = r.cost.map_or("none".to_string(), |c| c.to_string());
    let gap = match r.cost {
        Some(c) if c > 0 => format!(
            "{:.3}%",
            100.0 * (c - r.lower_bound.min(c)) as f64 / c as f64
        ),
        _ => "-".into(),
    };
    println!(
        "{} nodes {} edges {} cost {} lower {} gap {} optimal {} exact_relaxation {} iterations {} read {:.1}s total {:.1}s",
        path,
        problem.num_nodes(),
        problem.edges.len(),
        cost,
        r.lower_bound,
        gap,
        r.optimal,
        r.exact_relaxation,
        r.iterations,
        read.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
