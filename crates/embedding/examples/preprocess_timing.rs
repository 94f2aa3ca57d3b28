//! Times preprocessing of `.npz` batches (scripts/bench/embedding_bench.py runs this next to
//! jax-tpu-embedding on the same files):
//!
//!     cargo run --release -p tessera-embedding --example preprocess_timing -- \
//!         CONFIG.json REPEAT BATCH.npz [BATCH.npz ...]
//!
//! Prints, per batch, `name ids median_seconds` (preprocessing only, files already read).

use std::time::Instant;

use tessera_embedding::{npz, preprocess, EmbeddingConfig, Layout};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err("usage: preprocess_timing CONFIG.json REPEAT BATCH.npz...".into());
    }
    let mut config = EmbeddingConfig::from_json(&std::fs::read_to_string(&args[0])?, &args[0])?;
    let layout = Layout::new(&mut config)?;
    let repeat: usize = args[1].parse()?;
    for path in &args[2..] {
        let batches = npz::read_batch(&config, &std::fs::read(path)?, path)?;
        let ids: usize = batches.iter().map(|b| b.values.len()).sum();
        let mut times = Vec::new();
        for _ in 0..repeat.max(1) {
            let t = Instant::now();
            let out = preprocess(&config, &layout, &batches)?;
            times.push(t.elapsed().as_secs_f64());
            drop(out);
        }
        times.sort_by(f64::total_cmp);
        println!("{path} {ids} {:.6}", times[times.len() / 2]);
    }
    Ok(())
}
