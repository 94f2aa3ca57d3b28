//! Writes every corpus module as our printer prints it, one file per module, so that XLA's own
//! parser can be asked to read them back (scripts/xla_parses_printed.py).
//!
//! `cargo run --release -p tessera-hlo --example corpus_print -- CORPUS_DIR OUT_DIR`

use std::path::Path;

use tessera_hlo::text::{parse_module, print_module, PrintOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(root), Some(out)) = (args.first(), args.get(1)) else {
        eprintln!("usage: corpus_print CORPUS_DIR OUT_DIR");
        std::process::exit(2);
    };
    let root = Path::new(root);
    let _ = std::fs::create_dir_all(out);
    let all = tessera_corpus::hlo_files(root);
    let mut index = String::new();
    let mut n = 0;
    for f in all {
        let rel = f
            .strip_prefix(root)
            .unwrap_or(&f)
            .to_string_lossy()
            .to_string();
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let kept = tessera_corpus::split_modules(&text);
        for (i, m) in kept.iter().enumerate() {
            if let Ok(module) = parse_module(m) {
                let name = format!("{n:04}.hlo");
                let _ = std::fs::write(
                    Path::new(out).join(&name),
                    print_module(&module, &PrintOptions::default()),
                );
                index.push_str(&format!("{name}\t{rel}:{i}\n"));
                n += 1;
            }
        }
    }
    let _ = std::fs::write(Path::new(out).join("index.tsv"), index);
    println!("{n} modules written to {out}");
}
