//! Development aid: runs each file's RUN line and prints the output (`-v`), and checks its CHECK
//! lines. `cargo run -p tessera-spmd --example run_file -- [-v] FILE...`
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::Registry;

fn main() {
    let mut r = Registry::with_generic_passes();
    tessera_spmd::register(&mut r);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "-v");
    let (mut pass, mut fail) = (0, 0);
    for path in args.iter().filter(|a| *a != "-v") {
        let text = std::fs::read_to_string(path).expect("read");
        if verbose {
            for run in text
                .lines()
                .filter(|l| l.trim_start().starts_with("// RUN:"))
            {
                let spec = OptSpec::from_run_line(run).expect("run line");
                match run_opt(&text, &spec, &r, &default_hooks()) {
                    Ok(out) => println!("=== {path}\n{}", out.text),
                    Err(e) => println!("=== {path}\nERROR {e}"),
                }
            }
        }
        let t = std::time::Instant::now();
        match tessera_filetest::run_file(std::path::Path::new(path), &r) {
            Ok(_) => {
                pass += 1;
                println!("PASS {path} ({:.2}s)", t.elapsed().as_secs_f64());
            }
            Err(e) => {
                fail += 1;
                println!("FAIL {path} ({:.2}s)", t.elapsed().as_secs_f64());
                if verbose {
                    println!("{e}");
                }
            }
        }
    }
    println!("{pass} passed, {fail} failed");
}
