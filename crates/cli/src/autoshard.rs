//! `tessera auto-shard`: the automatic-sharding solver on IOPDDL problems.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use tessera_autoshard::iopddl::solution_json;
use tessera_autoshard::{solve, Problem, SolveOptions};

#[derive(Subcommand)]
pub(crate) enum AutoShardCommand {
    /// Solve an IOPDDL problem (the ASPLOS/EuroSys 2025 contest format): write
    /// `{"solution": [...]}` and print `cost C` as the last line.
    Solve(SolveArgs),
}

#[derive(Args)]
pub(crate) struct SolveArgs {
    /// The problem, `.json` or gzip-compressed `.json.gz`.
    problem: PathBuf,
    /// Seconds the solver may run.
    #[arg(long, default_value_t = 60.0)]
    time_limit: f64,
    /// Write the solution here (default: stdout, before the summary lines).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub(crate) fn auto_shard(cmd: &AutoShardCommand) -> Result<String> {
    match cmd {
        AutoShardCommand::Solve(args) => solve_command(args),
    }
}

fn solve_command(args: &SolveArgs) -> Result<String> {
    if !(args.time_limit.is_finite() && args.time_limit > 0.0) {
        bail!(
            "--time-limit: expected a positive number of seconds, got {}",
            args.time_limit
        );
    }
    let problem = Problem::read(&args.problem)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.problem.display()))?;
    let options = SolveOptions {
        time_limit: Duration::from_secs_f64(args.time_limit),
        max_iterations: usize::MAX,
        ..SolveOptions::default()
    };
    let result = solve(&problem, &options);
    let (Some(solution), Some(cost)) = (&result.solution, result.cost) else {
        if result.infeasible {
            bail!(
                "{}: no feasible solution: the least-memory strategies peak at {} (limit {})",
                args.problem.display(),
                result.min_peak,
                problem.usage_limit.unwrap_or(0)
            );
        }
        bail!(
            "{}: no feasible solution found within {} s",
            args.problem.display(),
            args.time_limit
        );
    };
    let json = solution_json(solution);
    let mut out = String::new();
    match &args.output {
        Some(p) => super::write_output(Some(Path::new(p)), &format!("{json}\n"))?,
        None => {
            out.push_str(&json);
            out.push('\n');
        }
    }
    let gap = if cost > 0 {
        100.0 * (cost - result.lower_bound.min(cost)) as f64 / cost as f64
    } else {
        0.0
    };
    out.push_str(&format!(
        "lower bound {} (gap {gap:.3}%{})\n",
        result.lower_bound,
        if result.optimal { ", optimal" } else { "" }
    ));
    out.push_str(&format!("cost {cost}\n"));
    Ok(out)
}
