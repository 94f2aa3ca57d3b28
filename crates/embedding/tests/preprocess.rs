//! Preprocessing: docs/embedding.md's worked example buffer by buffer (jax-tpu-embedding 0.2.0
//! gives the same bytes), limits with and without dropping, minibatching that would need a
//! split, and malformed batches.

use tessera_embedding::preprocess::PADDING_ID;
use tessera_embedding::{preprocess, EmbeddingConfig, FeatureBatch, Layout};

const EXAMPLE: &str = r#"{
  "tables": [
    {"name": "a", "vocabulary_size": 5, "embedding_dim": 4, "combiner": "sum",
     "optimizer": {"type": "adagrad", "learning_rate": 0.1},
     "max_ids_per_partition": 8, "max_unique_ids_per_partition": 8},
    {"name": "b", "vocabulary_size": 3, "embedding_dim": 3, "combiner": "sum",
     "optimizer": {"type": "adagrad", "learning_rate": 0.1},
     "max_ids_per_partition": 8, "max_unique_ids_per_partition": 8}
  ],
  "features": [
    {"name": "fa", "table": "a", "input_shape": [4, 2], "output_shape": [4, 4]},
    {"name": "fb", "table": "b", "input_shape": [4], "output_shape": [4, 3]}
  ],
  "global_device_count": 2,
  "num_sc_per_device": 1,
  "stacking": "tf"
}"#;

fn example() -> (EmbeddingConfig, Layout, Vec<FeatureBatch>) {
    let mut c = EmbeddingConfig::from_json(EXAMPLE, "example").unwrap();
    let l = Layout::new(&mut c).unwrap();
    let fa = FeatureBatch::dense(4, 2, vec![0, 3, 1, 1, 4, 2, 3, 3], None);
    let fb = FeatureBatch::ragged(vec![2, 0, 1, 2, 1], vec![0, 1, 1, 4, 5], None);
    (c, l, vec![fa, fb])
}

#[test]
fn worked_example_buffers() {
    let (c, l, b) = example();
    let out = preprocess(&c, &l, &b).unwrap();
    assert_eq!(out.stacks.len(), 1);
    let s = &out.stacks[0];
    assert_eq!(s.name, "a_b");
    const P: i32 = PADDING_ID;
    assert_eq!(
        s.row_pointers,
        [1, 11, 16, 16, 16, 16, 16, 16, 4, 11, 16, 16, 16, 16, 16, 16]
    );
    assert_eq!(
        s.embedding_ids,
        [
            0, P, P, P, P, P, P, P, 0, 1, 9, P, P, P, P, P, //
            1, 2, 8, 8, P, P, P, P, 1, 8, 9, P, P, P, P, P
        ]
    );
    assert_eq!(
        s.sample_ids,
        [
            0, P, P, P, P, P, P, P, 1, 0, 2, P, P, P, P, P, //
            0, 0, 2, 3, P, P, P, P, 1, 2, 2, P, P, P, P, P
        ]
    );
    let gains: Vec<String> = s.gains.iter().map(|g| format!("{g}")).collect();
    assert_eq!(
        gains[..11],
        ["1", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN", "NaN", "2", "1", "1"]
    );
    assert_eq!(s.stats.max_ids_per_partition, [1, 3, 4, 3]);
    assert_eq!(s.stats.max_unique_ids_per_partition, [1, 3, 3, 3]);
    assert_eq!(s.stats.required_buffer_sizes, [16, 16]);
    assert_eq!(s.stats.dropped_id_count, 0);
}

#[test]
fn limits_fail_or_drop() {
    let (mut c, _, b) = example();
    for t in &mut c.tables {
        t.max_ids_per_partition = 3;
    }
    let l = Layout::new(&mut c).unwrap();
    let e = preprocess(&c, &l, &b).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Observed max ids per partition: 4 for table: a_b is greater than the set max ids per partition: 3. Use `allow_id_dropping` or increase the `max_ids_per_partition`. You could also try to reduce the batch size."
    );
    c.allow_id_dropping = true;
    let out = preprocess(&c, &l, &b).unwrap();
    assert_eq!(out.stacks[0].stats.dropped_id_count, 1);
    assert!(out.warnings[0]
        .starts_with("Allowing ID dropping for table: a_b observed max ids per partition: 4"));
    // The dropped entry is the last of device 1's partition 0 (id 8, sample 3).
    let entries = out.decode(&out.stacks[0]).unwrap();
    assert_eq!(entries.len(), 10);
    assert!(!entries
        .iter()
        .any(|e| e.device == 1 && e.partition == 0 && e.sample == 3));

    for t in &mut c.tables {
        t.max_ids_per_partition = 8;
        t.max_unique_ids_per_partition = 2;
    }
    c.allow_id_dropping = false;
    let l = Layout::new(&mut c).unwrap();
    let e = preprocess(&c, &l, &b).unwrap_err().to_string();
    assert!(
        e.starts_with("Observed max unique ids per partition: 3 for table: a_b"),
        "{e}"
    );
    c.allow_id_dropping = true;
    let out = preprocess(&c, &l, &b).unwrap();
    // Each partition keeps its first two unique ids with all their samples: the third unique
    // id goes in three partitions, twice (two samples) in one of them.
    assert_eq!(out.stacks[0].stats.dropped_id_count, 4);
    assert_eq!(
        out.stacks[0].stats.max_unique_ids_per_partition,
        [1, 3, 3, 3],
        "counted before dropping"
    );
}

#[test]
fn minibatching_layout_and_split() {
    let (mut c, _, b) = example();
    c.enable_minibatching = true;
    let l = Layout::new(&mut c).unwrap();
    let out = preprocess(&c, &l, &b).unwrap();
    let s = &out.stacks[0];
    assert_eq!(s.row_pointers_size_per_device, 8 * 64);
    assert_eq!(s.coo_buffer_size_per_device, 16 * 64);
    // Pointers are device-global; the same entries as without minibatching.
    assert_eq!(out.num_minibatches, 1);
    assert_eq!(s.row_pointers[..8], [1, 11, 16, 16, 16, 16, 16, 16]);
    let whole = out.decode(s).unwrap();
    assert_eq!(whole.len(), 11);
    // Over the limit: the batch is split into minibatches of hash buckets, nothing is lost and
    // the statistics stay those of the whole batch.
    for t in &mut c.tables {
        t.max_ids_per_partition = 3;
    }
    let l = Layout::new(&mut c).unwrap();
    let split = preprocess(&c, &l, &b).unwrap();
    let t = &split.stacks[0];
    assert!(split.num_minibatches > 1, "{}", split.num_minibatches);
    assert_eq!(t.stats, s.stats);
    let key = |e: &tessera_embedding::preprocess::CsrEntry| {
        (e.device, e.core, e.partition, e.id, e.sample)
    };
    let mut got = split.decode(t).unwrap();
    let mut want = whole.clone();
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);
    // Per (minibatch, partition) at most 3 ids: every partition's run between two pointers.
    let per_bucket = 8;
    let rows = (split.num_minibatches as usize) * per_bucket;
    let rp = &t.row_pointers[..rows];
    let mut end = 0;
    for (k, &e) in rp.iter().enumerate() {
        if k % per_bucket < 2 {
            let start = (end as usize).div_ceil(8) * 8;
            assert!(e as usize <= start + 3, "pointer {k}: {e} after {end}");
            end = e;
        }
    }
    assert_eq!(split.decode(t).unwrap().len(), 11);
}

#[test]
fn combiners_and_weights() {
    let (mut c, _, _) = example();
    c.tables[0].combiner = tessera_embedding::Combiner::Mean;
    c.tables[1].combiner = tessera_embedding::Combiner::Mean;
    let l = Layout::new(&mut c).unwrap();
    let fa = FeatureBatch::dense(
        4,
        2,
        vec![0, 3, 1, 1, 4, 2, 3, 3],
        Some(vec![1.0, 3.0, 0.5, 0.5, 2.0, 2.0, 1.0, 1.0]),
    );
    let fb = FeatureBatch::ragged(vec![2, 0, 1, 2, 1], vec![0, 1, 1, 4, 5], Some(vec![1.0; 5]));
    let out = preprocess(&c, &l, &[fa, fb]).unwrap();
    let e = out.decode(&out.stacks[0]).unwrap();
    // Sample 0 of fa: ids 0 (w 1) and 3 (w 3): gains 1/4 and 3/4.
    let g = |d: u32, id: i32, sample: i32| {
        e.iter()
            .find(|x| x.device == d && x.id == id && x.sample == sample)
            .unwrap()
            .gain
    };
    assert_eq!(g(0, 0, 0), 0.25);
    assert_eq!(g(0, 1, 0), 0.75);
    // Sample 1: id 1 twice, weights 0.5 + 0.5 over a sum of 1: merged gain 1.
    assert_eq!(g(0, 0, 1), 1.0);
    c.tables[0].combiner = tessera_embedding::Combiner::Sqrtn;
    c.tables[1].combiner = tessera_embedding::Combiner::Sqrtn;
    let l = Layout::new(&mut c).unwrap();
    let (_, _, b) = example();
    let out = preprocess(&c, &l, &b).unwrap();
    let e = out.decode(&out.stacks[0]).unwrap();
    assert!(e.iter().all(|x| x.gain == 1.0 / 2f32.sqrt()
        || x.gain == 2.0 / 2f32.sqrt()
        || x.gain == 1.0 / 3f32.sqrt()
        || x.gain == 1.0));
}

/// A TF-mode stack of a `mean` table and a `sum` table (stacked together: TF keys stacks on
/// the padded dim and optimizer only) keeps each table's combiner: the `sum` feature's gains
/// stay 1, the `mean` feature's are 1/k (issue 39: a `sum` table was averaged).
#[test]
fn a_stack_keeps_each_tables_combiner() {
    let (mut c, _, b) = example();
    c.tables[0].combiner = tessera_embedding::Combiner::Mean;
    let l = Layout::new(&mut c).unwrap();
    assert_eq!(l.stacks.len(), 1, "one stack of both tables");
    assert!(
        l.warnings.iter().all(|w| !w.contains("combiner")),
        "{:?}",
        l.warnings
    );
    let out = preprocess(&c, &l, &b).unwrap();
    let e = out.decode(&out.stacks[0]).unwrap();
    // fa (mean, 2 ids per sample) occupies samples 0..4 of the stack, fb (sum) 4..8.
    for x in &e {
        if x.sample >= 4 {
            assert!(x.gain == 1.0 || x.gain == 2.0, "sum feature: {x:?}");
        } else {
            assert!(x.gain == 0.5 || x.gain == 1.0, "mean feature: {x:?}");
        }
    }
    assert!(e.iter().any(|x| x.sample < 4 && x.gain == 0.5));
}

#[test]
fn sparse_coo_equals_ragged() {
    let (c, l, b) = example();
    let coo = FeatureBatch::sparse_coo(
        4,
        &[(2, 0), (0, 0), (2, 1), (3, 0), (2, 2)],
        &[0, 2, 1, 1, 2],
        None,
    )
    .unwrap();
    assert_eq!(coo, b[1]);
    let out = preprocess(&c, &l, &[b[0].clone(), coo]).unwrap();
    // Debug text, so that NaN padding compares equal.
    assert_eq!(
        format!("{out:?}"),
        format!("{:?}", preprocess(&c, &l, &b).unwrap())
    );
    assert!(FeatureBatch::sparse_coo(4, &[(4, 0)], &[0], None)
        .unwrap_err()
        .contains("row 4 is outside"));
}

#[test]
fn malformed_batches_are_errors() {
    let (c, l, b) = example();
    let cases: Vec<(Vec<FeatureBatch>, &str)> = vec![
        (
            vec![
                FeatureBatch::dense(4, 2, vec![0, 3, 1, 1, 5, 2, 3, 3], None),
                b[1].clone(),
            ],
            "feature 'fa': id 5 (sample 2) is outside table 'a' of 5 rows",
        ),
        (
            vec![
                FeatureBatch::dense(4, 2, vec![0, 3, 1, 1, -1, 2, 3, 3], None),
                b[1].clone(),
            ],
            "id -1 (sample 2)",
        ),
        (
            vec![
                b[0].clone(),
                FeatureBatch::ragged(vec![2, 0, 1, 2, 1], vec![0, 1, 3, 2, 5], None),
            ],
            "feature 'fb': row splits decrease at row 2",
        ),
        (
            vec![
                b[0].clone(),
                FeatureBatch::ragged(vec![2, 0, 1, 2, 1], vec![0, 1, 1, 4, 6], None),
            ],
            "row splits end at 6 but there are 5 ids",
        ),
        (
            vec![
                b[0].clone(),
                FeatureBatch::ragged(vec![2, 0, 1, 2, 1], vec![0, 1, 1, 4, 5], Some(vec![1.0; 4])),
            ],
            "4 weights for 5 ids",
        ),
        (
            vec![
                b[0].clone(),
                FeatureBatch::ragged(
                    vec![2, 0, 1, 2, 1],
                    vec![0, 1, 1, 4, 5],
                    Some(vec![1.0, f32::NAN, 1.0, 1.0, 1.0]),
                ),
            ],
            "weight 1 is NaN",
        ),
        (
            vec![
                FeatureBatch::dense(2, 2, vec![0, 3, 1, 1], None),
                b[1].clone(),
            ],
            "batch has 2 samples, input_shape says 4",
        ),
        (vec![b[0].clone()], "1 batches for 2 features"),
    ];
    for (batches, want) in cases {
        let e = preprocess(&c, &l, &batches).unwrap_err().to_string();
        assert!(e.contains(want), "got: {e}\nwant: {want}");
    }
}
