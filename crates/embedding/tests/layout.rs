//! Configuration checks and warnings (the seed's and jax-tpu-embedding's), stacking rules,
//! stack/shard round trips, checkpoints across device counts, and the agreement between the
//! sharded tables and the ids preprocessing sends to each shard.

use tessera_embedding::config::DEFAULT_ACTIVATION_MEM_BYTES_LIMIT;
use tessera_embedding::shard::{
    load_checkpoint, save_checkpoint, shard_checkpoint, stack_and_shard, unshard_and_unstack,
    unshard_checkpoint, Checkpoint, Matrix,
};
use tessera_embedding::{
    preprocess, Combiner, EmbeddingConfig, EmbeddingError, FeatureBatch, FeatureConfig, Layout,
    Optimizer, StackingMode, TableConfig,
};

fn feature(name: &str, table: usize, batch: u32, dim: u32) -> FeatureConfig {
    FeatureConfig {
        name: name.into(),
        table,
        input_shape: vec![batch],
        output_shape: vec![batch, dim],
        max_sequence_length: 0,
    }
}

/// Tables (vocab, dim) each used by one feature of batch `batch`.
fn config(tables: &[(u32, u32)], batch: u32, devices: u32, nsc: u32) -> EmbeddingConfig {
    let t: Vec<TableConfig> = tables
        .iter()
        .enumerate()
        .map(|(i, &(v, d))| TableConfig::new(&format!("t{i}"), v, d))
        .collect();
    let f = tables
        .iter()
        .enumerate()
        .map(|(i, &(_, d))| feature(&format!("f{i}"), i, batch, d))
        .collect();
    EmbeddingConfig::new(t, f, devices, nsc)
}

fn err(c: &mut EmbeddingConfig) -> String {
    match Layout::new(c) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("expected an error"),
    }
}

#[test]
fn seed_padding_warnings() {
    // 4 devices x 4 SparseCores: rows padded to multiples of 128, columns to 8.
    let mut c = config(&[(100, 8), (1000, 12), (256, 16)], 16, 4, 4);
    let l = Layout::new(&mut c).unwrap();
    assert_eq!(
        l.warnings[0],
        "!!! Adding 28 extra rows to a small table t0!!! Table had 100 rows before padding and 128 rows after padding."
    );
    assert_eq!(
        l.warnings[1],
        "Adding 24 extra rows to table t1 to get 1024 rows."
    );
    assert_eq!(
        l.warnings[2],
        "Adding 4 extra columns to table t1 to get 16 columns."
    );
    assert_eq!(l.warnings.len(), 3, "t2 needs no padding: {:?}", l.warnings);
    assert_eq!(l.tables[2].padded_vocab_size, 256);
}

#[test]
fn seed_default_sparsecores_warning() {
    let mut c = config(&[(64, 8)], 16, 4, 0);
    let l = Layout::new(&mut c).unwrap();
    assert_eq!(
        l.warnings[0],
        "No embedding devices per chip info is found. Using 4 as the default value for SparseCore."
    );
    assert_eq!(l.num_sc_per_device, 4);
}

#[test]
fn seed_stack_name_collision() {
    // "a" and "b" stack as "a_b", which a table of that name already took.
    let mut c = config(&[(8, 8), (8, 8), (8, 16)], 8, 1, 1);
    c.tables[0].name = "a_b".into();
    c.tables[1].name = "a".into();
    c.tables[2].name = "b".into();
    c.tables[2].embedding_dim = 8;
    c.features[2].output_shape = vec![8, 8];
    c.tables[1].optimizer = Optimizer::Sgd { learning_rate: 0.5 };
    c.tables[2].optimizer = Optimizer::Sgd { learning_rate: 0.5 };
    assert_eq!(err(&mut c), "stacking: a_b already exists!");
}

#[test]
fn invalid_configs_name_the_place() {
    let mut c = config(&[(0, 8)], 8, 1, 1);
    assert!(
        err(&mut c).contains("tables[0] ('t0'): vocabulary_size must be >= 1"),
        "{}",
        err(&mut c)
    );
    let mut c = config(&[(8, 8)], 8, 3, 2);
    assert_eq!(
        err(&mut c),
        "num_sc_per_device: Total number of SparseCores (6) must be a power of 2."
    );
    let mut c = config(&[(8, 8)], 12, 2, 4);
    assert!(
        err(&mut c).contains("batch size 12 must be a positive multiple of"),
        "{}",
        err(&mut c)
    );
    let mut c = config(&[(8, 8)], 8, 1, 1);
    c.tables[0].optimizer = Optimizer::Adam {
        learning_rate: 0.1,
        beta_1: 1.5,
        beta_2: 0.9,
        epsilon: 1e-7,
        lazy_adam: true,
        sum_inside_sqrt: true,
    };
    assert!(
        err(&mut c).contains("beta1 must be in the range [0, 1), but received 1.5"),
        "{}",
        err(&mut c)
    );
    let mut c = config(&[(8, 8)], 8, 1, 1);
    c.features[0].output_shape = vec![8, 4];
    assert!(
        err(&mut c).contains("must be the table's embedding_dim 8"),
        "{}",
        err(&mut c)
    );
    let mut c = config(&[(8, 8), (8, 8)], 8, 1, 1);
    c.features[1].table = 0;
    assert!(err(&mut c).contains("tables[1] ('t1'): no feature uses this table"));
}

#[test]
fn json_errors_name_the_path() {
    let bad = [
        (r#"{"tables": [}"#, "invalid JSON"),
        (
            r#"{"tables": [], "features": [], "global_device_count": 1, "colour": 1}"#,
            "$.colour: unknown field",
        ),
        (
            r#"{"tables": [{"name": "t", "vocabulary_size": 8, "embedding_dim": 8, "optimizer": {"type": "rmsprop"}}], "features": [], "global_device_count": 1}"#,
            "tables[0].optimizer.type: unknown optimizer 'rmsprop'",
        ),
        (
            r#"{"tables": [{"name": "t", "vocabulary_size": 8, "embedding_dim": 8, "combiner": "max"}], "features": [], "global_device_count": 1}"#,
            "tables[0].combiner: combiner must be one of sum, mean or sqrtn",
        ),
        (
            r#"{"tables": [{"name": "t", "vocabulary_size": -3, "embedding_dim": 8}], "features": [], "global_device_count": 1}"#,
            "tables[0].vocabulary_size",
        ),
        (
            r#"{"tables": [{"name": "t", "vocabulary_size": 8, "embedding_dim": 8}], "features": [{"name": "f", "table": "u", "input_shape": [8], "output_shape": [8, 8]}], "global_device_count": 1}"#,
            "features[0].table: no table named 'u'",
        ),
        (
            r#"{"tables": [{"name": "t", "vocabulary_size": 8, "embedding_dim": 8}], "features": [], "global_device_count": 1, "stacking": "torch"}"#,
            "$.stacking: expected \"tf\" or \"jax\"",
        ),
    ];
    for (text, want) in bad {
        let e = EmbeddingConfig::from_json(text, "c.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{text}\n  gave: {e}\n  want: {want}");
    }
}

#[test]
fn json_reads_every_optimizer_and_its_slots() {
    let text = r#"{
      "tables": [
        {"name": "a", "vocabulary_size": 10, "embedding_dim": 4, "combiner": "mean",
         "optimizer": {"type": "ftrl", "learning_rate": 0.5, "learning_rate_power": -0.25,
                       "l1_regularization_strength": 0.1, "initial_linear_value": 0.5,
                       "multiply_linear_by_learning_rate": true}},
        {"name": "b", "vocabulary_size": 10, "embedding_dim": 4,
         "optimizer": {"type": "adagrad_momentum", "momentum": 0.9, "use_nesterov": true}},
        {"name": "c", "vocabulary_size": 10, "embedding_dim": 4, "optimizer": {"type": "adam"}},
        {"name": "d", "vocabulary_size": 10, "embedding_dim": 4, "optimizer": {"type": "adagrad"},
         "max_ids_per_partition": 7, "max_unique_ids_per_partition": 5},
        {"name": "e", "vocabulary_size": 10, "embedding_dim": 4, "optimizer": {"type": "sgd"}}
      ],
      "features": [{"name": "x", "table": "a", "input_shape": [8, 2], "output_shape": [8, 4]}],
      "global_device_count": 2, "num_sc_per_device": 4, "stacking": "jax"
    }"#;
    let c = EmbeddingConfig::from_json(text, "c.json").unwrap();
    assert_eq!(c.stacking, StackingMode::Jax);
    assert_eq!(c.tables[0].combiner, Combiner::Mean);
    assert_eq!(
        c.tables[0].optimizer,
        Optimizer::Ftrl {
            learning_rate: 0.5,
            learning_rate_power: -0.25,
            l1_regularization_strength: 0.1,
            l2_regularization_strength: 0.0,
            beta: 0.0,
            initial_accumulator_value: 0.1,
            initial_linear_value: 0.5,
            multiply_linear_by_learning_rate: true,
        }
    );
    let slots: Vec<Vec<&str>> = c
        .tables
        .iter()
        .map(|t| t.optimizer.slots().iter().map(|s| s.0).collect())
        .collect();
    assert_eq!(
        slots,
        vec![
            vec!["accumulators", "linears"],
            vec!["accumulators", "momenta"],
            vec!["momenta", "velocities"],
            vec!["accumulators"],
            vec![],
        ]
    );
    assert_eq!(c.tables[3].max_ids_per_partition, 7);
    assert_eq!(c.tables[3].max_unique_ids_per_partition, 5);
}

#[test]
fn tf_and_jax_stacking_rules() {
    // Same padded dim (5 and 8 -> 8) and optimizer; different combiners.
    let mut c = config(&[(30, 5), (50, 8), (20, 16)], 16, 2, 2);
    c.tables[1].combiner = Combiner::Mean;
    let tf = Layout::new(&mut c.clone()).unwrap();
    let names: Vec<&str> = tf.stacks.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["t0_t1", "t2"], "tf ignores the combiner");
    // t0 has 32 rows (8 per shard of 4), t1 64: t1 starts at row 8, rotated by nsc = 2.
    assert_eq!(
        (
            tf.tables[1].row_offset_in_shard,
            tf.tables[1].shard_rotation
        ),
        (8, 2)
    );
    assert_eq!(
        (
            tf.features[1].row_offset,
            tf.features[1].col_offset,
            tf.features[1].col_shift
        ),
        (16, 32, 2)
    );
    c.stacking = StackingMode::Jax;
    let jax = Layout::new(&mut c.clone()).unwrap();
    let names: Vec<&str> = jax.stacks.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["t0", "t1", "t2"], "jax keys on the combiner too");
    // The activation limit splits a group: 3 tables of 16 cols x 1024 samples per core x 4 B.
    let mut c = config(&[(64, 16), (64, 16), (64, 16)], 4096, 2, 2);
    c.stacking = StackingMode::Jax;
    c.activation_mem_bytes_limit = 2 * 16 * 1024 * 4;
    let l = Layout::new(&mut c.clone()).unwrap();
    let names: Vec<&str> = l.stacks.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["t0_t1", "t2"]);
    assert!(l
        .warnings
        .iter()
        .any(|w| w.starts_with("Stacking multiple tables together")));
    assert_eq!(
        l.stacks[0].max_ids_per_partition, 256,
        "jax's default limit for stacks of several tables"
    );
    c.activation_mem_bytes_limit = DEFAULT_ACTIVATION_MEM_BYTES_LIMIT;
    assert_eq!(Layout::new(&mut c).unwrap().stacks.len(), 1);
}

/// Values that say where they came from: table t, row i, column j -> t*1e6 + i*1e2 + j.
fn tables_of(c: &EmbeddingConfig, offset: f32) -> Vec<Matrix> {
    c.tables
        .iter()
        .enumerate()
        .map(|(t, tc)| {
            let (r, d) = (tc.vocabulary_size as usize, tc.embedding_dim as usize);
            Matrix {
                rows: r,
                cols: d,
                data: (0..r * d)
                    .map(|k| t as f32 * 1e6 + (k / d) as f32 * 1e2 + (k % d) as f32 + offset)
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn stack_shard_round_trip_is_bitwise_identity() {
    for (devices, nsc, mode) in [
        (1, 1, StackingMode::Tf),
        (2, 4, StackingMode::Jax),
        (8, 2, StackingMode::Tf),
    ] {
        let mut c = config(
            &[(37, 5), (300, 8), (5, 3), (1000, 20), (64, 16)],
            64,
            devices,
            nsc,
        );
        c.stacking = mode;
        let l = Layout::new(&mut c).unwrap();
        let tables = tables_of(&c, 0.5);
        let stacks = stack_and_shard(&c, &l, &tables, f32::NAN).unwrap();
        let back = unshard_and_unstack(&c, &l, &stacks).unwrap();
        for (a, b) in tables.iter().zip(&back) {
            assert!(a.bits_eq(b));
        }
        let again = stack_and_shard(&c, &l, &back, f32::NAN).unwrap();
        for (a, b) in stacks.iter().zip(&again) {
            assert!(a.bits_eq(b));
        }
    }
}

#[test]
fn checkpoint_written_for_8_devices_restores_on_2_and_back() {
    let mut c = config(&[(37, 5), (300, 8), (5, 3), (1000, 20)], 64, 8, 2);
    c.tables[0].optimizer = Optimizer::Adagrad {
        learning_rate: 0.1,
        initial_accumulator_value: 0.1,
    };
    c.tables[1].optimizer = c.tables[0].optimizer;
    c.tables[3].optimizer = Optimizer::Ftrl {
        learning_rate: 0.1,
        learning_rate_power: -0.5,
        l1_regularization_strength: 0.0,
        l2_regularization_strength: 0.0,
        beta: 0.0,
        initial_accumulator_value: 0.1,
        initial_linear_value: 0.0,
        multiply_linear_by_learning_rate: false,
    };
    let l8 = Layout::new(&mut c).unwrap();
    let slots: Vec<Vec<Matrix>> = c
        .tables
        .iter()
        .enumerate()
        .map(|(t, tc)| {
            (0..tc.optimizer.slots().len())
                .map(|k| tables_of(&c, 0.25 + k as f32)[t].clone())
                .collect()
        })
        .collect();
    let ckpt = Checkpoint {
        tables: tables_of(&c, 0.5),
        slots,
    };
    let (t8, s8) = shard_checkpoint(&c, &l8, &ckpt, f32::NAN).unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-embedding-ckpt-{}", std::process::id()));
    save_checkpoint(&c, &unshard_checkpoint(&c, &l8, &t8, &s8).unwrap(), &dir).unwrap();

    let mut c2 = c.clone();
    c2.global_device_count = 2;
    let l2 = Layout::new(&mut c2).unwrap();
    let restored = load_checkpoint(&c2, &dir).unwrap();
    let (t2, s2) = shard_checkpoint(&c2, &l2, &restored, f32::NAN).unwrap();
    assert_ne!(t2[0].rows, t8[0].rows, "2 devices pad differently from 8");
    let dir2 = dir.join("on2");
    save_checkpoint(&c2, &unshard_checkpoint(&c2, &l2, &t2, &s2).unwrap(), &dir2).unwrap();

    let back = load_checkpoint(&c, &dir2).unwrap();
    let (t8b, s8b) = shard_checkpoint(&c, &l8, &back, f32::NAN).unwrap();
    for (a, b) in t8.iter().zip(&t8b) {
        assert!(a.bits_eq(b));
    }
    for (sa, sb) in s8.iter().zip(&s8b) {
        for (a, b) in sa.iter().zip(sb) {
            assert!(a.bits_eq(b));
        }
    }
    for (a, b) in ckpt.tables.iter().zip(&back.tables) {
        assert!(a.bits_eq(b));
    }
    assert_eq!(ckpt.slots.len(), back.slots.len());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn checkpoint_shape_mismatch_is_an_error() {
    let mut c = config(&[(37, 5)], 8, 1, 1);
    Layout::new(&mut c).unwrap();
    let dir = std::env::temp_dir().join(format!("tessera-embedding-bad-{}", std::process::id()));
    save_checkpoint(
        &c,
        &Checkpoint {
            tables: tables_of(&c, 0.0),
            slots: vec![vec![]],
        },
        &dir,
    )
    .unwrap();
    let mut other = c.clone();
    other.tables[0].vocabulary_size = 38;
    let e = load_checkpoint(&other, &dir).unwrap_err();
    assert!(matches!(e, EmbeddingError::Shape { .. }), "{e}");
    assert!(e.to_string().contains("expected f32[38, 5]"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Every CSR entry points at the sharded row that holds its id's values: decoding an entry
/// through the sharded tables gives back (table, id) of an id in that sample.
#[test]
fn csr_entries_address_the_sharded_rows_of_their_ids() {
    for (devices, nsc, mode) in [
        (2, 2, StackingMode::Tf),
        (4, 4, StackingMode::Jax),
        (1, 1, StackingMode::Tf),
    ] {
        let mut c = config(&[(37, 8), (300, 8), (5, 8), (100, 16)], 32, devices, nsc);
        c.features.push(feature("f4", 1, 32, 8));
        c.stacking = mode;
        c.default_max_ids_per_partition = 4096;
        c.default_max_unique_ids_per_partition = 4096;
        for t in &mut c.tables {
            t.max_ids_per_partition = 4096;
            t.max_unique_ids_per_partition = 4096;
        }
        let l = Layout::new(&mut c).unwrap();
        let stacks = stack_and_shard(&c, &l, &tables_of(&c, 0.0), f32::NAN).unwrap();
        let mut state = 12345u64;
        let mut rnd = |n: u32| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % n as u64) as i32
        };
        let batches: Vec<FeatureBatch> = c
            .features
            .iter()
            .map(|f| {
                let v = c.tables[f.table].vocabulary_size;
                FeatureBatch::dense(32, 3, (0..96).map(|_| rnd(v)).collect(), None)
            })
            .collect();
        let out = preprocess(&c, &l, &batches).unwrap();
        let shards = devices * nsc;
        let mut seen = 0;
        for (si, s) in out.stacks.iter().enumerate() {
            let rps = l.rows_per_shard(si) as usize;
            let m = &stacks[si];
            for e in out.decode(s).unwrap() {
                let v = m.data[(e.partition as usize * rps + e.id as usize) * m.cols];
                let (t, id) = ((v / 1e6) as usize, ((v % 1e6) / 1e2) as i32);
                // The core's samples of each feature: rows (d*nsc + c)*n .. +n.
                let per_core = (l.stacks[si].total_sample_count / shards as u64) as i32;
                assert!(e.sample < per_core);
                let feat = l.stacks[si]
                    .features
                    .iter()
                    .copied()
                    .find(|&f| {
                        let off = (l.features[f].row_offset / shards) as i32;
                        (off..off + 32 / shards as i32).contains(&e.sample)
                    })
                    .unwrap();
                let off = (l.features[feat].row_offset / shards) as i32;
                let n = 32 / shards as usize;
                let row = (e.device * nsc + e.core) as usize * n + (e.sample - off) as usize;
                assert_eq!(c.features[feat].table, t, "entry {e:?}");
                assert!(
                    batches[feat].values[row * 3..row * 3 + 3].contains(&id),
                    "entry {e:?}"
                );
                seen += 1;
            }
        }
        // Every distinct (feature, row, id) appears exactly once.
        let distinct: usize = batches
            .iter()
            .map(|b| {
                (0..32)
                    .map(|r| {
                        let mut v = b.values[r * 3..r * 3 + 3].to_vec();
                        v.sort();
                        v.dedup();
                        v.len()
                    })
                    .sum::<usize>()
            })
            .sum();
        assert_eq!(seen, distinct);
    }
}

/// The seed refuses variables that do not split evenly over the devices; here a sharded stack
/// of the wrong shape is refused when unsharding.
#[test]
fn unsharding_a_wrong_shape_is_an_error() {
    let mut c = config(&[(37, 5), (300, 8)], 16, 2, 2);
    let l = Layout::new(&mut c).unwrap();
    let mut stacks = stack_and_shard(&c, &l, &tables_of(&c, 0.0), f32::NAN).unwrap();
    stacks[0].rows -= 8;
    let n = stacks[0].rows * stacks[0].cols;
    stacks[0].data.truncate(n);
    let e = unshard_and_unstack(&c, &l, &stacks)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("stack 't0_t1': expected [384, 8], got [376, 8]"),
        "{e}"
    );
    let e = stack_and_shard(&c, &l, &tables_of(&c, 0.0)[..1], f32::NAN)
        .unwrap_err()
        .to_string();
    assert_eq!(e, "tables: 1 arrays for 2 tables");
}

/// The seed's "Input of unknown type": a batch array set that is neither dense, ragged nor
/// sparse.
#[test]
fn unknown_input_kind_is_an_error() {
    use tessera_runtime::HostArray;
    let mut c = config(&[(8, 8)], 8, 1, 1);
    Layout::new(&mut c).unwrap();
    let values = HostArray::s32(&[3], &[1, 2, 3]).unwrap();
    let mut arrays = indexmap::IndexMap::new();
    arrays.insert("f0.values".to_string(), values);
    let e = tessera_embedding::npz::batch_from_arrays(&c, &arrays, "", "b.npz")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("feature 'f0': Input of unknown type"), "{e}");
}
