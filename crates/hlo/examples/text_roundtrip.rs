//! Times the text parser and printer on HLO files, and optionally writes what the printer prints.
//!
//! `cargo run --release -p tessera-hlo --example text_roundtrip -- [--out DIR] FILE...`
//! prints, per file, its size, instruction count and the median of 5 parse and print times
//! (parse also as MB/s and microseconds per instruction, to show that time is linear in size).

use std::time::{Duration, Instant};

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

/// Median time of `n` runs (as scripts/bench/xla_text_times.py reports XLA's), and the last result.
fn best_of<T>(n: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(n);
    let mut last = None;
    for _ in 0..n {
        let t = Instant::now();
        let v = f();
        times.push(t.elapsed());
        last = Some(v);
    }
    times.sort();
    (times[n / 2], last.expect("n > 0"))
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut out_dir = None;
    if args.first().is_some_and(|a| a == "--out") && args.len() >= 2 {
        out_dir = Some(args[1].clone());
        args.drain(..2);
    }
    for path in &args {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let rounds = if std::env::var_os("PARSE_ONLY").is_some() {
            20
        } else {
            5
        };
        let (tp, parsed) = best_of(rounds, || parse_module(&text));
        if std::env::var_os("PARSE_ONLY").is_some() {
            println!("{path}: parse {:.1} ms", tp.as_secs_f64() * 1e3);
            continue;
        }
        let m = match parsed {
            Ok(m) => m,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        let (tq, printed) = best_of(5, || print_module(&m, &PrintOptions::default()));
        println!(
            "{path}: {:.2} MB, {} instructions: parse {:.1} ms ({:.0} MB/s, {:.2} us/instruction), print {:.1} ms",
            text.len() as f64 / 1e6,
            m.instruction_count(),
            tp.as_secs_f64() * 1e3,
            text.len() as f64 / 1e6 / tp.as_secs_f64(),
            tp.as_secs_f64() * 1e6 / m.instruction_count().max(1) as f64,
            tq.as_secs_f64() * 1e3
        );
        if let Some(dir) = &out_dir {
            let name = path.replace('/', "__");
            let _ = std::fs::write(format!("{dir}/{name}"), printed);
        }
    }
}
