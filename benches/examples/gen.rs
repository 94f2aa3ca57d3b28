//! Prints one generated module, for measuring the CLI on it (docs/BENCHMARKS.md):
//!
//! ```text
//! cargo run --release -p tessera-benches --example gen -- chain|flat|wide|remat N > FILE.hlo
//! cargo run --release -p tessera-benches --example gen -- devices IN.hlo FACTOR > OUT.hlo
//! ```
//!
//! `devices`: IN's module on FACTOR times as many devices ([`tessera_benches::on_more_devices`]),
//! the input XLA's partitioner gets in the device-count comparison.

use tessera_benches::{call_chain, flat_calls, remat_chain, wide};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("devices") {
        let (Some(path), Some(factor)) = (args.get(1), args.get(2).and_then(|f| f.parse().ok()))
        else {
            eprintln!("usage: gen devices IN.hlo FACTOR");
            std::process::exit(2);
        };
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(1)
        });
        let mut m = tessera_hlo::text::parse_module(&text).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(1)
        });
        if let Err(e) = tessera_benches::on_more_devices(&mut m, factor) {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
        print!(
            "{}",
            tessera_hlo::text::print_module(&m, &tessera_hlo::text::PrintOptions::default())
        );
        return;
    }
    let n = args.get(1).and_then(|n| n.parse().ok());
    let text = match (args.first().map(String::as_str), n) {
        (Some("chain"), Some(n)) => call_chain(n),
        (Some("flat"), Some(n)) => flat_calls(n),
        (Some("wide"), Some(n)) => wide(n),
        (Some("remat"), Some(n)) => remat_chain(n),
        _ => {
            eprintln!("usage: gen chain|flat|wide|remat N | devices IN.hlo FACTOR");
            std::process::exit(2);
        }
    };
    print!("{text}");
}
