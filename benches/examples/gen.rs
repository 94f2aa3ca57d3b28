//! Prints one generated module, for measuring the CLI on it (docs/BENCHMARKS.md):
//!
//! ```text
//! cargo run --release -p tessera-benches --example gen -- chain|flat|wide|remat N > FILE.hlo
//! ```

use tessera_benches::{call_chain, flat_calls, remat_chain, wide};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|n| n.parse().ok());
    let text = match (args.first().map(String::as_str), n) {
        (Some("chain"), Some(n)) => call_chain(n),
        (Some("flat"), Some(n)) => flat_calls(n),
        (Some("wide"), Some(n)) => wide(n),
        (Some("remat"), Some(n)) => remat_chain(n),
        _ => {
            eprintln!("usage: gen chain|flat|wide|remat N");
            std::process::exit(2);
        }
    };
    print!("{text}");
}
