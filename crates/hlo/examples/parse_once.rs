//! Parses one HLO text file once and prints its instruction count (with `--print`, also prints
//! the module once, long form, and its length in bytes; with `--proto`, encodes it once as an
//! `HloModuleProto` and prints the byte count): a small target for instruction-count profiles
//! of the parser, the printer and the proto encoder, which are repeatable on a loaded machine.
//!
//! `cargo build --release -p tessera-hlo --example parse_once`, then
//! `valgrind --tool=callgrind target/release/examples/parse_once FILE [--print|--proto]`
//! (docs/BENCHMARKS.md; `--toggle-collect='tessera_hlo::proto::to_proto_bytes*'` counts the
//! encoder alone).

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: parse_once FILE [--print]");
        std::process::exit(2);
    };
    let print = std::env::args().nth(2).is_some_and(|a| a == "--print");
    let proto = std::env::args().nth(2).is_some_and(|a| a == "--proto");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
    };
    match tessera_hlo::text::parse_module(&text) {
        Ok(m) => {
            println!("{}", m.instruction_count());
            if print {
                let printed = tessera_hlo::text::print_module(
                    &m,
                    &tessera_hlo::text::PrintOptions::default(),
                );
                println!("{} bytes printed", printed.len());
            }
            if proto {
                let bytes = tessera_hlo::proto::to_proto_bytes(&m);
                println!("{} proto bytes", bytes.len());
            }
        }
        Err(e) => {
            eprintln!("{path}:{e}");
            std::process::exit(1);
        }
    }
}
