//! Shardings with any device ids, mesh axes and device counts on a fixed module, compiled as
//! `tessera compile` does: line 1 is the module's `num_partitions`, line 2 the
//! `--num-partitions` value (or empty), each further line one instruction's sharding
//! (`tessera_robust::check_sharding`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(Err(e)) = tessera_robust::check_target("sharding", data) {
        panic!("{e}");
    }
});
