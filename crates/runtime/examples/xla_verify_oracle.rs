//! Oracle helper for scripts/oracles/corpus_verify_oracle.py: compiles serialized `xla.HloModuleProto`
//! files with the PJRT CPU plugin and prints, per file, whether XLA accepted the module.
//!
//! XLA runs its HloVerifier on every module it is given (`CreateModuleFromProto`) and again at
//! the start of the compiler pipeline; verifier errors carry `during context [`. Usage:
//! `cargo run -p tessera-runtime --example xla_verify_oracle -- FILE.pb...`; output lines are
//! `FILE<TAB>ok`, `FILE<TAB>verifier<TAB>message` or `FILE<TAB>other<TAB>message`.

use tessera_runtime::{CompileOptions, Plugin, Program};

fn main() {
    let plugin = match Plugin::load_default() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cannot load the PJRT plugin: {e}");
            std::process::exit(2);
        }
    };
    let client = match plugin.client(1) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot create a client: {e}");
            std::process::exit(2);
        }
    };
    for path in std::env::args().skip(1) {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                println!("{path}\tother\tread failed: {e}");
                continue;
            }
        };
        match client.compile(&Program::HloProto(bytes), &CompileOptions::default()) {
            Ok(_) => println!("{path}\tok"),
            Err(e) => {
                let msg = e.to_string().replace(['\n', '\t'], " ");
                let kind = if msg.contains("during context [") {
                    "verifier"
                } else {
                    "other"
                };
                println!("{path}\t{kind}\t{msg}");
            }
        }
    }
}
