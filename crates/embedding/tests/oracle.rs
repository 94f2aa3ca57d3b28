//! Our CSR buffers, decoded, against jax-tpu-embedding 0.2.0's on the random configurations of
//! testdata/embedding/oracle.npz (made by scripts/oracles/embedding_oracle.py): the same multiset of
//! (device, core, partition, id, sample), gains within 1e-7 relative, identical statistics and
//! dropped counts, and the same number of minibatches (the last cases split their batch into
//! several); and the stacked, sharded table values equal those of jax-tpu-embedding's
//! `stack_and_shard_tables` (sha256 of the f32 bytes).

use sha2::{Digest, Sha256};
use tessera_embedding::npz::batch_from_arrays;
use tessera_embedding::shard::{stack_and_shard, Matrix};
use tessera_embedding::{preprocess, EmbeddingConfig, Layout};
use tessera_runtime::{npz, HostArray};

fn i32s(a: &HostArray) -> Vec<i32> {
    a.data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32s(a: &HostArray) -> Vec<f32> {
    a.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn csr_equals_jax_tpu_embedding() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/embedding/oracle.npz"
    );
    let arrays = npz::read(&std::fs::read(path).expect("fixture")).expect("npz");
    let cases = i32s(&arrays["cases"])[0];
    assert!(cases >= 50, "the fixture must hold at least 50 cases");
    let mut entries_checked = 0usize;
    let mut dropped_total = 0u64;
    let mut shards_checked = 0usize;
    let mut split_cases = 0usize;
    for c in 0..cases {
        let p = format!("c{c}");
        let json = String::from_utf8(arrays[&format!("{p}.config")].data.clone()).unwrap();
        let mut config =
            EmbeddingConfig::from_json(&json, &p).unwrap_or_else(|e| panic!("{p}: {e}"));
        let layout = Layout::new(&mut config).unwrap_or_else(|e| panic!("{p}: {e}"));
        let batches = batch_from_arrays(&config, &arrays, &format!("{p}.in."), &p)
            .unwrap_or_else(|e| panic!("{p}: {e}"));
        let out = preprocess(&config, &layout, &batches).unwrap_or_else(|e| panic!("{p}: {e}"));
        let minibatches = i32s(&arrays[&format!("{p}.num_minibatches")])[0];
        assert_eq!(out.num_minibatches as i32, minibatches, "{p}: minibatches");
        split_cases += usize::from(minibatches > 1);

        // Table t ("table<t>"), row i, column j holds (t * 5000 + i) * 131 + j.
        let values: Vec<Matrix> = config
            .tables
            .iter()
            .map(|tc| {
                let t: u64 = tc.name[5..].parse().unwrap();
                let (r, d) = (tc.vocabulary_size as usize, tc.embedding_dim as usize);
                let data = (0..r * d)
                    .map(|k| ((t * 5000 + (k / d) as u64) * 131 + (k % d) as u64) as f32)
                    .collect();
                Matrix {
                    rows: r,
                    cols: d,
                    data,
                }
            })
            .collect();
        let stacked = stack_and_shard(&config, &layout, &values, f32::NAN).unwrap();
        for (s, m) in layout.stacks.iter().zip(&stacked) {
            let bytes: Vec<u8> = m.data.iter().flat_map(|x| x.to_le_bytes()).collect();
            let want = &arrays[&format!("{p}.shard.{}.sha256", s.name)].data;
            assert_eq!(
                &Sha256::digest(&bytes)[..],
                &want[..],
                "{p}: sharded stack {}",
                s.name
            );
            shards_checked += 1;
        }
        let expected_stacks: Vec<&str> = arrays
            .keys()
            .filter_map(|k| k.strip_prefix(&format!("{p}.out.")))
            .filter_map(|k| k.strip_suffix(".entries"))
            .collect();
        let mut ours: Vec<&str> = out.stacks.iter().map(|s| s.name.as_str()).collect();
        let mut theirs = expected_stacks.clone();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "{p}: stack names");
        for s in &out.stacks {
            let q = format!("{p}.out.{}", s.name);
            let mut got = out.decode(s).unwrap_or_else(|e| panic!("{q}: {e}"));
            got.sort_by_key(|e| (e.device, e.core, e.partition, e.id, e.sample));
            let want = i32s(&arrays[&format!("{q}.entries")]);
            let want_gains = f32s(&arrays[&format!("{q}.gains")]);
            assert_eq!(got.len(), want_gains.len(), "{q}: entry count");
            for (k, e) in got.iter().enumerate() {
                let w = &want[5 * k..5 * k + 5];
                assert_eq!(
                    [
                        e.device as i32,
                        e.core as i32,
                        e.partition as i32,
                        e.id,
                        e.sample
                    ],
                    w,
                    "{q}: entry {k}"
                );
                let (a, b) = (e.gain as f64, want_gains[k] as f64);
                assert!(
                    (a - b).abs() <= 1e-7 * b.abs().max(a.abs()),
                    "{q}: entry {k} gain {a} vs {b}"
                );
            }
            assert_eq!(
                s.stats.max_ids_per_partition,
                i32s(&arrays[&format!("{q}.max_ids_per_partition")]),
                "{q}"
            );
            assert_eq!(
                s.stats.max_unique_ids_per_partition,
                i32s(&arrays[&format!("{q}.max_unique_ids_per_partition")]),
                "{q}"
            );
            assert_eq!(
                s.stats.required_buffer_sizes,
                i32s(&arrays[&format!("{q}.required_buffer_sizes")]),
                "{q}"
            );
            let d = &arrays[&format!("{q}.dropped_id_count")].data;
            let dropped = i64::from_le_bytes(d[..8].try_into().unwrap());
            assert_eq!(s.stats.dropped_id_count as i64, dropped, "{q}: dropped ids");
            entries_checked += got.len();
            dropped_total += s.stats.dropped_id_count;
        }
    }
    assert!(
        split_cases >= 10,
        "only {split_cases} cases split into minibatches"
    );
    eprintln!(
        "{cases} cases ({split_cases} split into minibatches), {entries_checked} entries, {dropped_total} dropped ids, {shards_checked} sharded stacks: all equal"
    );
}
