//! Parses one HLO text file once and prints its instruction count: a small target for
//! instruction-count profiles of the parser, which are repeatable on a loaded machine.
//!
//! `cargo build --release -p tessera-hlo --example parse_once`, then
//! `valgrind --tool=callgrind target/release/examples/parse_once FILE` (docs/BENCHMARKS.md).

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: parse_once FILE");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    match tessera_hlo::text::parse_module(&text) {
        Ok(m) => println!("{}", m.instruction_count()),
        Err(e) => {
            eprintln!("{path}:{e}");
            std::process::exit(1);
        }
    }
}
