//! docs/compile.md's table: Tessera's pipeline on testdata/models/<name>.before-propagation.hlo
//! beside XLA's own compile of the same module (written by scripts/bench/compile_vs_xla.py into
//! DIR: `<name>.xla-after-spmd.hlo`, `<name>.xla-times.txt`).
//!
//! ```text
//! cargo run --release -p tessera-compile --example compile_table -- DIR NAME... [--runs N]
//! ```
//!
//! Prints per model: our time by pass (median of N runs), collective count and bytes per
//! device ours vs XLA's (one formula for both), per-device peak ours vs XLA's (our accounting
//! on both partitioned modules, each scheduled by our default scheduler), and our whole
//! pipeline against XLA's sharding-propagation + spmd-partitioning (medians of its log).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tessera_compile::{collective_traffic, compile, parse_input, per_device_peak, CompileOptions};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|k| args.get(k + 1))
        .map_or(3, |r| r.parse().expect("--runs N"));
    let positional: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(k, a)| !a.starts_with("--") && (*k == 0 || args[k - 1] != "--runs"))
        .map(|(_, a)| a)
        .collect();
    let (dir, names) = positional.split_first().expect("DIR NAME...");
    let dir = PathBuf::from(dir);
    let root = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/models"
    ));
    println!(
        "| model | instructions | our passes, ms (median of {runs}) | ours total | XLA prop + part | collectives ours (count, bytes) | XLA's | peak/device ours | XLA's |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for name in names {
        let file = root.join(format!("{name}.before-propagation.hlo"));
        let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let module = parse_input(&bytes, &file.display().to_string()).unwrap();
        let options = CompileOptions::for_module(&module);
        let mut per_pass: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        let mut totals = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let c = compile(module.clone(), &options).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut seen: BTreeMap<String, Duration> = BTreeMap::new();
            for s in &c.report.stages {
                if !order.contains(&s.name) {
                    order.push(s.name.clone());
                }
                *seen.entry(s.name.clone()).or_default() += s.time;
            }
            for (k, t) in seen {
                per_pass.entry(k).or_default().push(t.as_secs_f64() * 1e3);
            }
            totals.push(c.report.total.as_secs_f64() * 1e3);
            last = Some(c);
        }
        let c = last.expect("at least one run");
        let passes: Vec<String> = order
            .iter()
            .map(|p| format!("{p} {:.1}", median(per_pass[p].clone())))
            .collect();
        let n = c.report.num_partitions;
        let ours: (usize, i64) = c
            .report
            .collectives
            .values()
            .fold((0, 0), |a, t| (a.0 + t.count, a.1 + t.bytes));
        let xla_file = dir.join(format!("{name}.xla-after-spmd.hlo"));
        let xla_text = std::fs::read(&xla_file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run scripts/bench/compile_vs_xla.py)",
                xla_file.display()
            )
        });
        let xla = parse_input(&xla_text, &xla_file.display().to_string()).unwrap();
        let xt = collective_traffic(&xla, n);
        let theirs: (usize, i64) = xt
            .values()
            .fold((0, 0), |a, t| (a.0 + t.count, a.1 + t.bytes));
        let xla_peak = per_device_peak(&xla).unwrap();
        let times =
            std::fs::read_to_string(dir.join(format!("{name}.xla-times.txt"))).unwrap_or_default();
        let sums: Vec<f64> = times
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace().map(|x| x.parse::<f64>().ok());
                Some(w.next()?? + w.next()??)
            })
            .collect();
        let xla_time = if sums.is_empty() {
            "n/a".to_string()
        } else {
            format!("{:.1} ms", median(sums))
        };
        println!(
            "| {name} | {} | {} | {:.1} ms | {xla_time} | {}, {} | {}, {} | {} | {} |",
            module.instruction_count(),
            passes.join("; "),
            median(totals),
            ours.0,
            ours.1,
            theirs.0,
            theirs.1,
            c.report.peak.after_remat,
            xla_peak
        );
    }
}
