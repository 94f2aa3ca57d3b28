//! The device side on the PJRT CPU plugin against a float64 reference written from the
//! formulas alone (dense gather + combine per sample; per-row gradient sums; the optimizers'
//! update rules), and invariance of the numbers under layout choices.
//!
//! One configuration holds a table for every optimizer variant (so each device count compiles
//! all programs once); lookups and 10 steps run on 1, 2, 4 and 8 devices.

use tessera_embedding::device::{no_gradient_warning, DeviceEmbedding};

use tessera_embedding::shard::{Checkpoint, Matrix};
use tessera_embedding::{EmbeddingConfig, FeatureBatch, Layout, Optimizer};
use tessera_runtime::Client;

// ---------------------------------------------------------------- random numbers

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f32 {
        (self.next() % 1_000_000) as f32 / 1_000_000.0
    }
    fn signed(&mut self) -> f32 {
        self.unit() * 2.0 - 1.0
    }
}

// ---------------------------------------------------------------- the float64 reference

/// Per-sample gain of each id of a row, as the combiner defines it.
fn row_gains(combiner: &str, weights: &[f64]) -> Vec<f64> {
    match combiner {
        "sum" => weights.to_vec(),
        "mean" => {
            let s: f64 = weights.iter().sum();
            weights.iter().map(|w| w / s).collect()
        }
        _ => {
            let s: f64 = weights.iter().map(|w| w * w).sum::<f64>().sqrt();
            weights.iter().map(|w| w / s).collect()
        }
    }
}

struct RefModel {
    tables: Vec<Vec<f64>>,
    slots: Vec<Vec<Vec<f64>>>,
    dims: Vec<usize>,
}

fn quantized(v: f64, q: Option<(f64, f64, u32)>) -> f64 {
    match q {
        None => v,
        Some((lo, hi, n)) => {
            let c = v.clamp(lo, hi);
            let step = (hi - lo) / (n - 1) as f64;
            lo + ((c - lo) / step).round() * step
        }
    }
}

/// (feature's table, sample, id, gain) of every id in a batch.
fn entries(config: &EmbeddingConfig, batches: &[FeatureBatch]) -> Vec<Vec<(usize, usize, f64)>> {
    config
        .features
        .iter()
        .zip(batches)
        .map(|(f, b)| {
            let comb = config.tables[f.table].combiner.name();
            let mut out = Vec::new();
            for r in 0..b.rows() {
                let (s, e) = (b.row_splits[r], b.row_splits[r + 1]);
                let w: Vec<f64> = (s..e)
                    .map(|i| b.weights.as_ref().map_or(1.0, |w| w[i] as f64))
                    .collect();
                for (k, g) in row_gains(comb, &w).into_iter().enumerate() {
                    out.push((r, b.values[s + k] as usize, g));
                }
            }
            out
        })
        .collect()
}

impl RefModel {
    fn new(ckpt: &Checkpoint) -> RefModel {
        let f = |m: &Matrix| m.data.iter().map(|&x| x as f64).collect::<Vec<_>>();
        RefModel {
            tables: ckpt.tables.iter().map(f).collect(),
            slots: ckpt
                .slots
                .iter()
                .map(|s| s.iter().map(f).collect())
                .collect(),
            dims: ckpt.tables.iter().map(|m| m.cols).collect(),
        }
    }

    fn lookup(&self, config: &EmbeddingConfig, batches: &[FeatureBatch]) -> Vec<Vec<f64>> {
        let ents = entries(config, batches);
        config
            .features
            .iter()
            .zip(&ents)
            .map(|(f, es)| {
                let d = self.dims[f.table];
                let q = config.tables[f.table]
                    .quantization
                    .map(|q| (q.min_value as f64, q.max_value as f64, q.num_buckets));
                let mut out = vec![0.0; f.sample_count() as usize * d];
                for &(s, id, g) in es {
                    for c in 0..d {
                        out[s * d + c] += g * quantized(self.tables[f.table][id * d + c], q);
                    }
                }
                out
            })
            .collect()
    }

    fn step(&mut self, config: &EmbeddingConfig, batches: &[FeatureBatch], grads: &[Vec<f64>]) {
        let ents = entries(config, batches);
        for (t, tc) in config.tables.iter().enumerate() {
            let d = self.dims[t];
            let v = tc.vocabulary_size as usize;
            let mut g = vec![0.0; v * d];
            let mut touched = vec![false; v];
            for (fi, f) in config.features.iter().enumerate() {
                if f.table != t {
                    continue;
                }
                for &(s, id, gain) in &ents[fi] {
                    touched[id] = true;
                    for c in 0..d {
                        g[id * d + c] += gain * grads[fi][s * d + c];
                    }
                }
            }
            let lazy = !matches!(
                tc.optimizer,
                Optimizer::Adam {
                    lazy_adam: false,
                    ..
                }
            );
            for (id, &hit) in touched.iter().enumerate() {
                if lazy && !hit {
                    continue;
                }
                for c in 0..d {
                    let i = id * d + c;
                    let mut sl: Vec<f64> = self.slots[t].iter().map(|s| s[i]).collect();
                    self.tables[t][i] = optimize(&tc.optimizer, g[i], self.tables[t][i], &mut sl);
                    for (k, x) in sl.into_iter().enumerate() {
                        self.slots[t][k][i] = x;
                    }
                }
            }
        }
    }
}

/// One element's optimizer step in float64: returns the new weight, updates the slots.
fn optimize(o: &Optimizer, g: f64, w: f64, s: &mut [f64]) -> f64 {
    match *o {
        Optimizer::Sgd { learning_rate } => w - learning_rate as f64 * g,
        Optimizer::Adagrad { learning_rate, .. } => {
            s[0] += g * g;
            w - learning_rate as f64 * g / s[0].sqrt()
        }
        Optimizer::AdagradMomentum {
            learning_rate,
            momentum,
            use_nesterov,
            exponent,
            beta2,
            epsilon,
        } => {
            let (b2, k) = (beta2 as f64, momentum as f64);
            s[0] = if beta2 == 1.0 {
                s[0] + g * g
            } else {
                b2 * s[0] + (1.0 - b2) * g * g
            };
            let scaled = (s[0] + epsilon as f64).powf(-1.0 / exponent as f64) * g;
            s[1] = k * s[1] + scaled;
            let upd = if use_nesterov {
                k * s[1] + scaled
            } else {
                s[1]
            };
            w - learning_rate as f64 * upd
        }
        Optimizer::Adam {
            learning_rate,
            beta_1,
            beta_2,
            epsilon,
            sum_inside_sqrt,
            ..
        } => {
            let (b1, b2, eps) = (beta_1 as f64, beta_2 as f64, epsilon as f64);
            s[0] = b1 * s[0] + (1.0 - b1) * g;
            s[1] = b2 * s[1] + (1.0 - b2) * g * g;
            let denom = if sum_inside_sqrt {
                (s[1] + eps * eps).sqrt()
            } else {
                s[1].sqrt() + eps
            };
            w - learning_rate as f64 * s[0] / denom
        }
        Optimizer::Ftrl {
            learning_rate,
            learning_rate_power,
            l1_regularization_strength,
            l2_regularization_strength,
            beta,
            multiply_linear_by_learning_rate: mlr,
            ..
        } => {
            let (lr, p, l1, l2, beta) = (
                learning_rate as f64,
                learning_rate_power as f64,
                l1_regularization_strength as f64,
                l2_regularization_strength as f64,
                beta as f64,
            );
            let acc_new = s[0] + g * g;
            let dp = acc_new.powf(-p) - s[0].powf(-p);
            s[1] = if mlr {
                s[1] + lr * g - dp * w
            } else {
                s[1] + g - dp / lr * w
            };
            s[0] = acc_new;
            let lin = s[1];
            let l1s = if mlr { l1 * lr } else { l1 };
            let num = if l1 == 0.0 {
                -lin
            } else {
                lin.clamp(-l1s, l1s) - lin
            };
            let den = if mlr {
                acc_new.powf(-p) + 2.0 * lr * l2 + beta
            } else {
                (acc_new.powf(-p) + beta) / lr + 2.0 * l2
            };
            num / den
        }
    }
}

// ---------------------------------------------------------------- configurations

/// (optimizer JSON, quantization JSON or "") for each table of the main case.
const VARIANTS: &[(&str, &str)] = &[
    (r#"{"type":"sgd","learning_rate":0.5}"#, ""),
    (
        r#"{"type":"adagrad","learning_rate":0.3,"initial_accumulator_value":0.1}"#,
        "",
    ),
    (
        r#"{"type":"adagrad_momentum","learning_rate":0.1,"momentum":0.9,"use_nesterov":false,"exponent":2,"beta2":1,"epsilon":1e-6}"#,
        "",
    ),
    (
        r#"{"type":"adagrad_momentum","learning_rate":0.1,"momentum":0.5,"use_nesterov":true,"exponent":3,"beta2":0.9,"epsilon":1e-5}"#,
        "",
    ),
    (
        r#"{"type":"adam","learning_rate":0.05,"beta_1":0.9,"beta_2":0.999,"epsilon":1e-3,"lazy_adam":true,"sum_inside_sqrt":true}"#,
        "",
    ),
    (
        r#"{"type":"adam","learning_rate":0.05,"beta_1":0.8,"beta_2":0.99,"epsilon":1e-3,"lazy_adam":false,"sum_inside_sqrt":false}"#,
        "",
    ),
    (
        r#"{"type":"ftrl","learning_rate":0.2,"learning_rate_power":-0.5,"l1_regularization_strength":0,"l2_regularization_strength":0,"beta":0,"initial_accumulator_value":0.1,"multiply_linear_by_learning_rate":false}"#,
        "",
    ),
    (
        r#"{"type":"ftrl","learning_rate":0.2,"learning_rate_power":-0.7,"l1_regularization_strength":0.01,"l2_regularization_strength":0.02,"beta":0.1,"initial_accumulator_value":0.2,"initial_linear_value":0.05,"multiply_linear_by_learning_rate":true}"#,
        "",
    ),
    (
        r#"{"type":"sgd","learning_rate":0.25}"#,
        r#","quantization":{"min_value":-0.5,"max_value":0.5,"num_buckets":9}"#,
    ),
];

const COMBINERS: &[&str] = &["sum", "mean", "sqrtn"];

/// Layout knobs of one run.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    devices: u32,
    nsc: u32,
    /// "tf" stacking, or jax stacking with a 1-byte activation limit (every table alone).
    stacked: bool,
    minibatching: bool,
}

fn config_json(
    dims: &[u32],
    vocabs: &[u32],
    batch: u32,
    knobs: Knobs,
    variants: &[usize],
) -> String {
    let limit = if knobs.minibatching { 6 } else { 4096 };
    let tables: Vec<String> = variants
        .iter()
        .enumerate()
        .map(|(t, &v)| {
            format!(
                r#"{{"name":"t{t}","vocabulary_size":{},"embedding_dim":{},"combiner":"{}","optimizer":{}{},"max_ids_per_partition":{limit},"max_unique_ids_per_partition":{limit}}}"#,
                vocabs[t],
                dims[t],
                COMBINERS[t % 3],
                VARIANTS[v].0,
                VARIANTS[v].1
            )
        })
        .collect();
    // One feature per table, and a second one on table 0 (two features in one stack).
    let mut features: Vec<String> = (0..variants.len())
        .map(|t| {
            format!(
                r#"{{"name":"f{t}","table":"t{t}","input_shape":[{batch},3],"output_shape":[{batch},{}]}}"#,
                dims[t]
            )
        })
        .collect();
    features.push(format!(
        r#"{{"name":"g0","table":"t0","input_shape":[{batch},2],"output_shape":[{batch},{}]}}"#,
        dims[0]
    ));
    let stacking = if knobs.stacked {
        r#""stacking":"tf""#.to_string()
    } else {
        r#""stacking":"jax","activation_mem_bytes_limit":1"#.to_string()
    };
    format!(
        r#"{{"tables":[{}],"features":[{}],"global_device_count":{},"num_sc_per_device":{},{stacking},"enable_minibatching":{}}}"#,
        tables.join(","),
        features.join(","),
        knobs.devices,
        knobs.nsc,
        knobs.minibatching
    )
}

/// How a batch is handed over.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    Dense,
    Ragged,
    Sparse,
    /// The dense batch's ids, handed over as ragged rows (the same batch).
    SameRagged,
    /// The dense batch's ids, handed over as sparse COO (the same batch).
    SameSparse,
}

/// Batches for every feature: ids (with repeats), weights; rows of `Form::Dense` have a fixed
/// width, other forms drop some ids so rows are ragged (the same ids in every form of a seed).
fn batches(config: &EmbeddingConfig, seed: u64, form: Form) -> Vec<FeatureBatch> {
    let mut rng = Rng(seed);
    config
        .features
        .iter()
        .map(|f| {
            let rows = f.input_shape[0] as usize;
            let k = f.input_shape[1] as usize;
            let vocab = config.tables[f.table].vocabulary_size as u64;
            // A small hot set so that ids repeat within and across samples.
            let ids: Vec<i32> = (0..rows * k)
                .map(|_| {
                    if rng.below(3) == 0 {
                        rng.below(vocab.min(4)) as i32
                    } else {
                        rng.below(vocab) as i32
                    }
                })
                .collect();
            let weights: Vec<f32> = (0..rows * k).map(|_| 0.5 + rng.unit()).collect();
            let coo: Vec<(i64, i64)> = (0..rows * k)
                .map(|i| ((i / k) as i64, (i % k) as i64))
                .collect();
            match form {
                Form::Dense => FeatureBatch::dense(rows, k, ids, Some(weights)),
                Form::SameRagged => {
                    FeatureBatch::ragged(ids, (0..=rows).map(|r| r * k).collect(), Some(weights))
                }
                Form::SameSparse => {
                    FeatureBatch::sparse_coo(rows, &coo, &ids, Some(&weights)).unwrap()
                }
                Form::Ragged | Form::Sparse => {
                    // Keep ids with a deterministic pattern; every row keeps at least one.
                    let mut values = Vec::new();
                    let mut w = Vec::new();
                    let mut splits = vec![0];
                    let mut coo = Vec::new();
                    #[allow(clippy::needless_range_loop)]
                    for r in 0..rows {
                        for j in 0..k {
                            if j == 0 || (r + j) % 3 != 0 {
                                coo.push((r as i64, j as i64));
                                values.push(ids[r * k + j]);
                                w.push(weights[r * k + j]);
                            }
                        }
                        splits.push(values.len());
                    }
                    if form == Form::Ragged {
                        FeatureBatch::ragged(values, splits, Some(w))
                    } else {
                        FeatureBatch::sparse_coo(rows, &coo, &values, Some(&w)).unwrap()
                    }
                }
            }
        })
        .collect()
}

fn initial(config: &EmbeddingConfig, seed: u64) -> Checkpoint {
    let mut rng = Rng(seed);
    Checkpoint::filled(config, || rng.signed())
}

fn gradients(config: &EmbeddingConfig, seed: u64) -> Vec<Matrix> {
    let mut rng = Rng(seed);
    config
        .features
        .iter()
        .map(|f| {
            let d = config.tables[f.table].embedding_dim as usize;
            let mut m = Matrix::new(f.sample_count() as usize, d, 0.0);
            m.data.iter_mut().for_each(|x| *x = rng.signed());
            m
        })
        .collect()
}

fn setup(knobs: Knobs, variants: &[usize]) -> (EmbeddingConfig, Layout) {
    let dims: Vec<u32> = (0..variants.len())
        .map(|t| [3, 8, 5, 12, 1, 9][t % 6])
        .collect();
    let vocabs: Vec<u32> = (0..variants.len())
        .map(|t| [37, 64, 150, 11, 90][t % 5])
        .collect();
    let text = config_json(&dims, &vocabs, 32, knobs, variants);
    let mut config = EmbeddingConfig::from_json(&text, "case").unwrap();
    let layout = Layout::new(&mut config).unwrap();
    (config, layout)
}

/// Checks `got` against `want` element by element (abs 1e-6 or rel `rel`); returns the
/// largest error relative to `max(|reference|, 1)`.
fn check(what: &str, got: &[f32], want: &[f64], rel: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst: f64 = 0.0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        let ok = err <= 1e-6 || err <= rel * w.abs();
        assert!(ok, "{what}[{i}]: device {g}, reference {w}, error {err}");
        worst = worst.max(err / w.abs().max(1.0));
    }
    worst
}

fn client() -> Client {
    Client::cpu(8).expect("the PJRT CPU plugin (scripts/install-pjrt.sh)")
}

#[test]
fn lookups_and_ten_steps_equal_the_float64_reference_on_1_2_4_8_devices() {
    let client = client();
    let variants: Vec<usize> = (0..VARIANTS.len()).collect();
    for devices in [1u32, 2, 4, 8] {
        let knobs = Knobs {
            devices,
            nsc: 1,
            stacked: true,
            minibatching: false,
        };
        let (config, layout) = setup(knobs, &variants);
        let ckpt = initial(&config, 7);
        let mut reference = RefModel::new(&ckpt);
        let mut dev = DeviceEmbedding::new(client.clone(), config.clone(), layout, &ckpt).unwrap();
        let mut worst: f64 = 0.0;
        for step in 0..10u64 {
            let form = [Form::Dense, Form::Ragged, Form::Sparse][step as usize % 3];
            let b = batches(&config, 100 + step, form);
            let prepared = dev.prepare(&b).unwrap();
            let acts = dev.lookup(&prepared).unwrap();
            let want = reference.lookup(&config, &b);
            for (f, (a, w)) in acts.iter().zip(&want).enumerate() {
                worst = worst.max(check(
                    &format!("{devices} devices, step {step}, activation of feature {f}"),
                    &a.data,
                    w,
                    1e-5,
                ));
            }
            let grads = gradients(&config, 200 + step);
            let g64: Vec<Vec<f64>> = grads
                .iter()
                .map(|m| m.data.iter().map(|&x| x as f64).collect())
                .collect();
            let warnings = dev
                .apply_gradients(&prepared, &grads.into_iter().map(Some).collect::<Vec<_>>())
                .unwrap();
            assert!(warnings.is_empty());
            reference.step(&config, &b, &g64);
        }
        let got = dev.checkpoint().unwrap();
        for (t, tc) in config.tables.iter().enumerate() {
            worst = worst.max(check(
                &format!("{devices} devices, table {}", tc.name),
                &got.tables[t].data,
                &reference.tables[t],
                1e-5,
            ));
            for (k, (slot, _)) in tc.optimizer.slots().iter().enumerate() {
                worst = worst.max(check(
                    &format!("{devices} devices, table {} slot {slot}", tc.name),
                    &got.slots[t][k].data,
                    &reference.slots[t][k],
                    1e-5,
                ));
            }
            // Untouched entries keep their bits.
            let lazy = !matches!(
                tc.optimizer,
                Optimizer::Adam {
                    lazy_adam: false,
                    ..
                }
            );
            let before = &ckpt.tables[t].data;
            for (i, (&a, &b)) in got.tables[t].data.iter().zip(before).enumerate() {
                if reference.tables[t][i] == b as f64 && lazy {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "table {} element {i} changed",
                        tc.name
                    );
                }
            }
        }
        println!("{devices} devices: largest error relative to max(|reference|, 1): {worst:.2e}");
    }
}

/// Runs 3 steps (lookup, then update; step 1 without a gradient for feature f1) and returns the
/// activations of every step and the final checkpoint.
fn run(client: &Client, knobs: Knobs, form: Form) -> (Vec<Vec<Matrix>>, Checkpoint, u32) {
    let variants = [1, 4, 7, 3];
    let (config, layout) = setup(knobs, &variants);
    let ckpt = initial(&config, 11);
    let mut dev = DeviceEmbedding::new(client.clone(), config.clone(), layout, &ckpt).unwrap();
    let mut acts = Vec::new();
    let mut minibatches = 1;
    for step in 0..3u64 {
        let b = batches(&config, 300 + step, form);
        let prepared = dev.prepare(&b).unwrap();
        minibatches = minibatches.max(prepared.num_minibatches);
        acts.push(dev.lookup(&prepared).unwrap());
        let mut grads: Vec<Option<Matrix>> = gradients(&config, 400 + step)
            .into_iter()
            .map(Some)
            .collect();
        if step == 1 {
            grads[1] = None;
        }
        let warnings = dev.apply_gradients(&prepared, &grads).unwrap();
        if step == 1 {
            assert_eq!(warnings, vec![no_gradient_warning("f1")]);
        }
    }
    (acts, dev.checkpoint().unwrap(), minibatches)
}

fn same(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let err = (x as f64 - y as f64).abs();
        assert!(
            err <= 1e-6 || err <= 1e-6 * (y as f64).abs(),
            "{what}[{i}]: {x} against {y}"
        );
    }
}

#[test]
fn same_numbers_under_stacking_devices_cores_minibatching_and_input_forms() {
    let client = client();
    let base = Knobs {
        devices: 1,
        nsc: 1,
        stacked: true,
        minibatching: false,
    };
    let (want_acts, want, _) = run(&client, base, Form::Dense);
    let cases = [
        (
            Knobs {
                stacked: false,
                ..base
            },
            Form::Dense,
        ),
        (Knobs { devices: 2, ..base }, Form::Dense),
        (
            Knobs {
                devices: 4,
                stacked: false,
                ..base
            },
            Form::Dense,
        ),
        (Knobs { devices: 8, ..base }, Form::Dense),
        (
            Knobs {
                devices: 2,
                nsc: 2,
                ..base
            },
            Form::Dense,
        ),
        (
            Knobs {
                devices: 2,
                nsc: 4,
                ..base
            },
            Form::SameRagged,
        ),
        (
            Knobs {
                devices: 4,
                nsc: 2,
                minibatching: true,
                ..base
            },
            Form::Dense,
        ),
        (Knobs { devices: 2, ..base }, Form::SameRagged),
        (Knobs { devices: 4, ..base }, Form::SameSparse),
    ];
    for (knobs, form) in cases {
        let (acts, got, minibatches) = run(&client, knobs, form);
        let what = format!("{knobs:?} {form:?}");
        if knobs.minibatching {
            assert!(minibatches > 1, "{what}: minibatching was not forced");
        }
        for (s, (a, b)) in acts.iter().zip(&want_acts).enumerate() {
            for (f, (x, y)) in a.iter().zip(b).enumerate() {
                same(&format!("{what}: step {s} feature {f}"), &x.data, &y.data);
            }
        }
        for (t, (x, y)) in got.tables.iter().zip(&want.tables).enumerate() {
            same(&format!("{what}: table {t}"), &x.data, &y.data);
            for (k, (p, q)) in got.slots[t].iter().zip(&want.slots[t]).enumerate() {
                same(&format!("{what}: table {t} slot {k}"), &p.data, &q.data);
            }
        }
        println!("{what}: equal ({minibatches} minibatches)");
    }
}
