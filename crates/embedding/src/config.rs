//! Tables, features, optimizers and the whole embedding configuration, as seed 004's
//! `TableConfig`/`FeatureConfig` and jax-tpu-embedding's `TableSpec`/`FeatureSpec` describe them,
//! with validation and a JSON reader (schema in docs/embedding.md).

use serde_json::{Map, Value};

use crate::error::{config_err, EmbeddingError, Result};

/// How the embeddings of one sample's ids are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    Sum,
    Mean,
    Sqrtn,
}

impl Combiner {
    pub fn name(self) -> &'static str {
        match self {
            Combiner::Sum => "sum",
            Combiner::Mean => "mean",
            Combiner::Sqrtn => "sqrtn",
        }
    }
    pub fn parse(s: &str) -> Option<Combiner> {
        match s {
            "sum" => Some(Combiner::Sum),
            "mean" => Some(Combiner::Mean),
            "sqrtn" => Some(Combiner::Sqrtn),
            _ => None,
        }
    }
}

/// Table values are quantized to `num_buckets` levels between `min_value` and `max_value`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantizationConfig {
    pub min_value: f32,
    pub max_value: f32,
    pub num_buckets: u32,
}

/// How new table values are initialized.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Initializer {
    Zeros,
    Constant(f32),
    /// Truncated normal (TF's default for embedding tables: mean 0, stddev 1/sqrt(dim)).
    TruncatedNormal {
        mean: f32,
        stddev: f32,
    },
}

/// The optimizers of seed 004 with every hyper-parameter under the seed's (TF's) names.
/// Defaults are TF's (`tpu_embedding_v2_utils`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    Sgd {
        learning_rate: f32,
    },
    Adagrad {
        learning_rate: f32,
        initial_accumulator_value: f32,
    },
    AdagradMomentum {
        learning_rate: f32,
        momentum: f32,
        use_nesterov: bool,
        exponent: f32,
        beta2: f32,
        epsilon: f32,
    },
    Adam {
        learning_rate: f32,
        beta_1: f32,
        beta_2: f32,
        epsilon: f32,
        lazy_adam: bool,
        sum_inside_sqrt: bool,
    },
    Ftrl {
        learning_rate: f32,
        learning_rate_power: f32,
        l1_regularization_strength: f32,
        l2_regularization_strength: f32,
        beta: f32,
        initial_accumulator_value: f32,
        initial_linear_value: f32,
        multiply_linear_by_learning_rate: bool,
    },
}

impl Optimizer {
    /// The JSON `type` and the short name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Adagrad { .. } => "adagrad",
            Optimizer::AdagradMomentum { .. } => "adagrad_momentum",
            Optimizer::Adam { .. } => "adam",
            Optimizer::Ftrl { .. } => "ftrl",
        }
    }

    /// Slot variables (the seed's names) and the value each starts from.
    pub fn slots(&self) -> Vec<(&'static str, f32)> {
        match *self {
            Optimizer::Sgd { .. } => vec![],
            Optimizer::Adagrad {
                initial_accumulator_value,
                ..
            } => vec![("accumulators", initial_accumulator_value)],
            Optimizer::AdagradMomentum { .. } => vec![("accumulators", 0.0), ("momenta", 0.0)],
            Optimizer::Adam { .. } => vec![("momenta", 0.0), ("velocities", 0.0)],
            Optimizer::Ftrl {
                initial_accumulator_value,
                initial_linear_value,
                ..
            } => vec![
                ("accumulators", initial_accumulator_value),
                ("linears", initial_linear_value),
            ],
        }
    }

    /// Bit-exact identity, the key tables are stacked by (two optimizers with equal
    /// hyper-parameters are the same optimizer, as in jax-tpu-embedding's `OptimizerSpec.__eq__`).
    pub fn key(&self) -> Vec<u32> {
        let mut k = vec![
            self.type_name().len() as u32,
            self.type_name().as_bytes()[0] as u32,
        ];
        let f = |x: f32| x.to_bits();
        match *self {
            Optimizer::Sgd { learning_rate } => k.push(f(learning_rate)),
            Optimizer::Adagrad {
                learning_rate,
                initial_accumulator_value,
            } => k.extend([f(learning_rate), f(initial_accumulator_value)]),
            Optimizer::AdagradMomentum {
                learning_rate,
                momentum,
                use_nesterov,
                exponent,
                beta2,
                epsilon,
            } => k.extend([
                f(learning_rate),
                f(momentum),
                use_nesterov as u32,
                f(exponent),
                f(beta2),
                f(epsilon),
            ]),
            Optimizer::Adam {
                learning_rate,
                beta_1,
                beta_2,
                epsilon,
                lazy_adam,
                sum_inside_sqrt,
            } => k.extend([
                f(learning_rate),
                f(beta_1),
                f(beta_2),
                f(epsilon),
                lazy_adam as u32,
                sum_inside_sqrt as u32,
            ]),
            Optimizer::Ftrl {
                learning_rate,
                learning_rate_power,
                l1_regularization_strength,
                l2_regularization_strength,
                beta,
                initial_accumulator_value,
                initial_linear_value,
                multiply_linear_by_learning_rate,
            } => k.extend([
                f(learning_rate),
                f(learning_rate_power),
                f(l1_regularization_strength),
                f(l2_regularization_strength),
                f(beta),
                f(initial_accumulator_value),
                f(initial_linear_value),
                multiply_linear_by_learning_rate as u32,
            ]),
        }
        k
    }

    /// TF's range checks of the hyper-parameters.
    pub fn validate(&self, at: &str) -> Result<()> {
        let bad = |m: String| Err(config_err(at, m));
        let lr = match *self {
            Optimizer::Sgd { learning_rate }
            | Optimizer::Adagrad { learning_rate, .. }
            | Optimizer::AdagradMomentum { learning_rate, .. }
            | Optimizer::Adam { learning_rate, .. }
            | Optimizer::Ftrl { learning_rate, .. } => learning_rate,
        };
        if !lr.is_finite() {
            return bad(format!("learning_rate must be finite; received {lr}"));
        }
        match *self {
            Optimizer::Sgd { .. } => {}
            Optimizer::Adagrad {
                initial_accumulator_value,
                ..
            } => {
                if initial_accumulator_value <= 0.0 {
                    return bad(format!(
                        "Adagrad initial_accumulator_value must be greater than zero; received {initial_accumulator_value}"
                    ));
                }
            }
            Optimizer::AdagradMomentum {
                exponent,
                beta2,
                epsilon,
                ..
            } => {
                if exponent <= 0.0 {
                    return bad(format!("exponent must be positive; received {exponent}"));
                }
                if !(0.0..=1.0).contains(&beta2) {
                    return bad(format!(
                        "beta2 must be in the range [0, 1]; received {beta2}"
                    ));
                }
                if epsilon <= 0.0 {
                    return bad(format!("epsilon must be positive; received {epsilon}"));
                }
            }
            Optimizer::Adam {
                beta_1,
                beta_2,
                epsilon,
                ..
            } => {
                if !(0.0..1.0).contains(&beta_1) {
                    return bad(format!(
                        "beta1 must be in the range [0, 1), but received {beta_1}"
                    ));
                }
                if !(0.0..1.0).contains(&beta_2) {
                    return bad(format!(
                        "beta2 must be in the range [0, 1), but received {beta_2}"
                    ));
                }
                if epsilon <= 0.0 {
                    return bad(format!("epsilon must be positive; received {epsilon}"));
                }
            }
            Optimizer::Ftrl {
                learning_rate_power,
                l1_regularization_strength,
                l2_regularization_strength,
                initial_accumulator_value,
                ..
            } => {
                if learning_rate_power > 0.0 {
                    return bad(format!(
                        "learning_rate_power must be less than or equal to 0. Got {learning_rate_power}"
                    ));
                }
                if l1_regularization_strength < 0.0 {
                    return bad(format!(
                        "l1_regularization_strength must be greater than or equal to 0. Got {l1_regularization_strength}"
                    ));
                }
                if l2_regularization_strength < 0.0 {
                    return bad(format!(
                        "l2_regularization_strength must be greater than or equal to 0. Got {l2_regularization_strength}"
                    ));
                }
                if initial_accumulator_value <= 0.0 {
                    return bad(format!(
                        "initial_accumulator_value must be positive. Got {initial_accumulator_value}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// One embedding table (seed: `TableConfig`; jax-tpu-embedding: `TableSpec`).
#[derive(Clone, Debug, PartialEq)]
pub struct TableConfig {
    pub name: String,
    pub vocabulary_size: u32,
    pub embedding_dim: u32,
    pub initializer: Initializer,
    pub optimizer: Optimizer,
    pub combiner: Combiner,
    pub quantization: Option<QuantizationConfig>,
    pub max_ids_per_partition: u32,
    pub max_unique_ids_per_partition: u32,
}

impl TableConfig {
    /// A table with jax-tpu-embedding's defaults: SGD, sum, limits 256, zeros.
    pub fn new(name: &str, vocabulary_size: u32, embedding_dim: u32) -> TableConfig {
        TableConfig {
            name: name.to_string(),
            vocabulary_size,
            embedding_dim,
            initializer: Initializer::Zeros,
            optimizer: Optimizer::Sgd {
                learning_rate: 0.01,
            },
            combiner: Combiner::Sum,
            quantization: None,
            max_ids_per_partition: 256,
            max_unique_ids_per_partition: 256,
        }
    }
}

/// One input feature looked up in a table (seed: `FeatureConfig`; jax: `FeatureSpec`).
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureConfig {
    pub name: String,
    /// Index into [`EmbeddingConfig::tables`].
    pub table: usize,
    /// `[batch]` or `[batch, ids per sample]` (the second may be omitted for ragged input).
    pub input_shape: Vec<u32>,
    /// `[batch..., embedding_dim]`: the activation's shape.
    pub output_shape: Vec<u32>,
    /// The seed's `max_sequence_length` (0: not a sequence feature).
    pub max_sequence_length: u32,
}

impl FeatureConfig {
    /// Samples this feature contributes to its stack: the product of the output shape without
    /// its last (embedding) dimension.
    pub fn sample_count(&self) -> u64 {
        let n = self.output_shape.len().saturating_sub(1);
        self.output_shape[..n].iter().map(|&d| d as u64).product()
    }
}

/// Which stacking rules to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackingMode {
    /// Seed 004 (TF): tables with the same (padded dim, optimizer, quantization) are stacked,
    /// named `"_".join(names)`, rotated by `num_sc_per_chip * index`.
    Tf,
    /// jax-tpu-embedding's `auto_stack_tables`: the combiner joins the key, stacks are split to
    /// respect the activation memory limit, long names are shortened with a sha256 suffix.
    Jax,
}

/// Everything: tables, features, devices, SparseCores, stacking and preprocessing options.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbeddingConfig {
    pub tables: Vec<TableConfig>,
    pub features: Vec<FeatureConfig>,
    pub global_device_count: u32,
    /// SparseCores per chip. 0 means "unknown": the seed then warns and uses 4.
    pub num_sc_per_device: u32,
    pub stacking: StackingMode,
    /// jax mode: limits of stacks of more than one table (jax's `get_default_limits`: 256).
    pub default_max_ids_per_partition: u32,
    pub default_max_unique_ids_per_partition: u32,
    /// jax mode: the activation memory limit per stack in bytes (jax: 2 MiB).
    pub activation_mem_bytes_limit: u64,
    /// jax mode: shard rotation per table in a stack (jax: `num_sc_per_device`).
    pub rotation: Option<u32>,
    /// jax mode: shorten stack names longer than 50 characters with a sha256 suffix.
    pub use_short_stack_names: bool,
    /// Preprocessing: drop ids over the limits instead of failing.
    pub allow_id_dropping: bool,
    /// Preprocessing: lay out buffers for minibatching.
    pub enable_minibatching: bool,
}

pub const DEFAULT_ACTIVATION_MEM_BYTES_LIMIT: u64 = 2048 * 1024;

impl EmbeddingConfig {
    pub fn new(
        tables: Vec<TableConfig>,
        features: Vec<FeatureConfig>,
        devices: u32,
        num_sc: u32,
    ) -> Self {
        EmbeddingConfig {
            tables,
            features,
            global_device_count: devices,
            num_sc_per_device: num_sc,
            stacking: StackingMode::Tf,
            default_max_ids_per_partition: 256,
            default_max_unique_ids_per_partition: 256,
            activation_mem_bytes_limit: DEFAULT_ACTIVATION_MEM_BYTES_LIMIT,
            rotation: None,
            use_short_stack_names: true,
            allow_id_dropping: false,
            enable_minibatching: false,
        }
    }

    /// Checks what the seed and jax-tpu-embedding check; returns the warnings to report.
    pub fn validate(&mut self) -> Result<Vec<String>> {
        let mut warnings = Vec::new();
        if self.global_device_count == 0 {
            return Err(config_err(
                "global_device_count",
                "global_device_count must be greater than 0, but got 0",
            ));
        }
        if self.num_sc_per_device == 0 {
            warnings.push(
                "No embedding devices per chip info is found. Using 4 as the default value for SparseCore."
                    .to_string(),
            );
            self.num_sc_per_device = 4;
        }
        let num_scs = self.global_device_count as u64 * self.num_sc_per_device as u64;
        if !num_scs.is_power_of_two() {
            return Err(config_err(
                "num_sc_per_device",
                format!("Total number of SparseCores ({num_scs}) must be a power of 2."),
            ));
        }
        if self.tables.is_empty() {
            return Err(config_err("tables", "at least one table is required"));
        }
        let mut names = std::collections::HashSet::new();
        for (i, t) in self.tables.iter().enumerate() {
            let at = format!("tables[{i}] ('{}')", t.name);
            if t.name.is_empty() {
                return Err(config_err(at, "name must not be empty"));
            }
            if !names.insert(t.name.as_str()) {
                return Err(config_err(
                    at,
                    format!("table name '{}' is used twice", t.name),
                ));
            }
            if t.vocabulary_size < 1 {
                return Err(config_err(at, "vocabulary_size must be >= 1. Received: 0."));
            }
            if t.embedding_dim < 1 {
                return Err(config_err(at, "dim must be >= 1. Received: 0."));
            }
            // Rows are padded to a multiple of 8 columns, in 32 bits.
            if u64::from(t.embedding_dim).next_multiple_of(8) > u64::from(u32::MAX) {
                return Err(config_err(
                    format!("{at}.embedding_dim"),
                    format!(
                        "{} pads to {} columns (a multiple of 8), which does not fit in 32 bits; \
                         expected at most {}",
                        t.embedding_dim,
                        u64::from(t.embedding_dim).next_multiple_of(8),
                        u32::MAX - 7
                    ),
                ));
            }
            if t.max_ids_per_partition < 1 {
                return Err(config_err(
                    at,
                    "max_ids_per_partition must be positive, got 0.",
                ));
            }
            if t.max_unique_ids_per_partition < 1 {
                return Err(config_err(
                    at,
                    "max_unique_ids_per_partition must be positive, got 0.",
                ));
            }
            if let Some(q) = t.quantization {
                if q.num_buckets < 2 {
                    return Err(config_err(at, "num_buckets must be ≥ 2."));
                }
                if q.min_value >= q.max_value
                    || !q.min_value.is_finite()
                    || !q.max_value.is_finite()
                {
                    return Err(config_err(at, "min_value must be < max_value."));
                }
            }
            t.optimizer.validate(&format!("{at}.optimizer"))?;
        }
        if self.features.is_empty() {
            return Err(config_err("features", "at least one feature is required"));
        }
        let mut fnames = std::collections::HashSet::new();
        let mut used = vec![false; self.tables.len()];
        for (i, f) in self.features.iter().enumerate() {
            let at = format!("features[{i}] ('{}')", f.name);
            if !fnames.insert(f.name.as_str()) {
                return Err(config_err(
                    at,
                    format!("feature name '{}' is used twice", f.name),
                ));
            }
            let Some(t) = self.tables.get(f.table) else {
                return Err(config_err(
                    at,
                    format!("table index {} is out of range", f.table),
                ));
            };
            used[f.table] = true;
            if f.input_shape.is_empty() || f.input_shape.len() > 2 {
                return Err(config_err(
                    at,
                    format!(
                        "input_shape must be [batch] or [batch, k], got {:?}",
                        f.input_shape
                    ),
                ));
            }
            if f.output_shape.len() < 2 {
                return Err(config_err(
                    at,
                    format!(
                        "output_shape must be [batch..., embedding_dim], got {:?}",
                        f.output_shape
                    ),
                ));
            }
            if *f.output_shape.last().unwrap_or(&0) != t.embedding_dim {
                return Err(config_err(
                    at,
                    format!(
                        "the last dimension of output_shape {:?} must be the table's embedding_dim {}",
                        f.output_shape, t.embedding_dim
                    ),
                ));
            }
            if f.sample_count() != f.input_shape[0] as u64 {
                return Err(config_err(
                    at,
                    format!(
                        "output_shape {:?} holds {} samples but input_shape {:?} has batch {}",
                        f.output_shape,
                        f.sample_count(),
                        f.input_shape,
                        f.input_shape[0]
                    ),
                ));
            }
            if !(f.input_shape[0] as u64).is_multiple_of(num_scs) || f.input_shape[0] == 0 {
                return Err(config_err(
                    at,
                    format!(
                        "batch size {} must be a positive multiple of global_device_count * num_sc_per_device = {num_scs}",
                        f.input_shape[0]
                    ),
                ));
            }
        }
        for (i, u) in used.iter().enumerate() {
            if !u {
                return Err(config_err(
                    format!("tables[{i}] ('{}')", self.tables[i].name),
                    "no feature uses this table",
                ));
            }
        }
        Ok(warnings)
    }

    /// Reads the JSON schema of docs/embedding.md. `path` names the source in errors.
    pub fn from_json(text: &str, path: &str) -> Result<EmbeddingConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| EmbeddingError::Json {
            path: path.to_string(),
            message: e.to_string(),
        })?;
        let root = obj(&v, "$")?;
        check_keys(
            root,
            "$",
            &[
                "tables",
                "features",
                "global_device_count",
                "num_sc_per_device",
                "stacking",
                "default_max_ids_per_partition",
                "default_max_unique_ids_per_partition",
                "activation_mem_bytes_limit",
                "rotation",
                "use_short_stack_names",
                "allow_id_dropping",
                "enable_minibatching",
            ],
        )?;
        let tables_v = root
            .get("tables")
            .and_then(Value::as_array)
            .ok_or_else(|| config_err("$.tables", "expected an array of tables"))?;
        let mut tables = Vec::new();
        for (i, t) in tables_v.iter().enumerate() {
            tables.push(table_from_json(t, &format!("tables[{i}]"))?);
        }
        let features_v = root
            .get("features")
            .and_then(Value::as_array)
            .ok_or_else(|| config_err("$.features", "expected an array of features"))?;
        let mut features = Vec::new();
        for (i, f) in features_v.iter().enumerate() {
            let at = format!("features[{i}]");
            let o = obj(f, &at)?;
            check_keys(
                o,
                &at,
                &[
                    "name",
                    "table",
                    "input_shape",
                    "output_shape",
                    "max_sequence_length",
                ],
            )?;
            let name = req_str(o, &at, "name")?;
            let table_name = req_str(o, &at, "table")?;
            let table = tables
                .iter()
                .position(|t| t.name == table_name)
                .ok_or_else(|| {
                    config_err(
                        format!("{at}.table"),
                        format!("no table named '{table_name}'"),
                    )
                })?;
            features.push(FeatureConfig {
                name,
                table,
                input_shape: shape(o, &at, "input_shape")?,
                output_shape: shape(o, &at, "output_shape")?,
                max_sequence_length: opt_u32(o, &at, "max_sequence_length")?.unwrap_or(0),
            });
        }
        let devices = opt_u32(root, "$", "global_device_count")?
            .ok_or_else(|| config_err("$.global_device_count", "required"))?;
        let num_sc = opt_u32(root, "$", "num_sc_per_device")?.unwrap_or(0);
        let mut c = EmbeddingConfig::new(tables, features, devices, num_sc);
        if let Some(s) = root.get("stacking") {
            c.stacking = match s.as_str() {
                Some("tf") => StackingMode::Tf,
                Some("jax") => StackingMode::Jax,
                _ => {
                    return Err(config_err(
                        "$.stacking",
                        format!("expected \"tf\" or \"jax\", found {s}"),
                    ))
                }
            };
        }
        if let Some(x) = opt_u32(root, "$", "default_max_ids_per_partition")? {
            c.default_max_ids_per_partition = x;
        }
        if let Some(x) = opt_u32(root, "$", "default_max_unique_ids_per_partition")? {
            c.default_max_unique_ids_per_partition = x;
        }
        if let Some(x) = root.get("activation_mem_bytes_limit") {
            c.activation_mem_bytes_limit = x.as_u64().ok_or_else(|| {
                config_err(
                    "$.activation_mem_bytes_limit",
                    "expected a non-negative integer",
                )
            })?;
        }
        c.rotation = opt_u32(root, "$", "rotation")?;
        c.use_short_stack_names = opt_bool(root, "$", "use_short_stack_names")?.unwrap_or(true);
        c.allow_id_dropping = opt_bool(root, "$", "allow_id_dropping")?.unwrap_or(false);
        c.enable_minibatching = opt_bool(root, "$", "enable_minibatching")?.unwrap_or(false);
        Ok(c)
    }
}

fn obj<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| config_err(at, format!("expected an object, found {v}")))
}

fn check_keys(o: &Map<String, Value>, at: &str, known: &[&str]) -> Result<()> {
    for k in o.keys() {
        if !known.contains(&k.as_str()) {
            return Err(config_err(
                format!("{at}.{k}"),
                format!("unknown field (expected one of {})", known.join(", ")),
            ));
        }
    }
    Ok(())
}

fn req_str(o: &Map<String, Value>, at: &str, key: &str) -> Result<String> {
    o.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| config_err(format!("{at}.{key}"), "expected a string"))
}

fn opt_u32(o: &Map<String, Value>, at: &str, key: &str) -> Result<Option<u32>> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| {
                config_err(
                    format!("{at}.{key}"),
                    format!("expected an integer in [0, 2^32), found {v}"),
                )
            }),
    }
}

fn opt_f32(o: &Map<String, Value>, at: &str, key: &str) -> Result<Option<f32>> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v.as_f64().map(|x| Some(x as f32)).ok_or_else(|| {
            config_err(
                format!("{at}.{key}"),
                format!("expected a number, found {v}"),
            )
        }),
    }
}

fn opt_bool(o: &Map<String, Value>, at: &str, key: &str) -> Result<Option<bool>> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v.as_bool().map(Some).ok_or_else(|| {
            config_err(
                format!("{at}.{key}"),
                format!("expected true or false, found {v}"),
            )
        }),
    }
}

fn shape(o: &Map<String, Value>, at: &str, key: &str) -> Result<Vec<u32>> {
    let a = o
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| config_err(format!("{at}.{key}"), "expected an array of dimensions"))?;
    a.iter()
        .map(|d| {
            d.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| {
                    config_err(
                        format!("{at}.{key}"),
                        format!("expected a non-negative integer, found {d}"),
                    )
                })
        })
        .collect()
}

fn table_from_json(v: &Value, at: &str) -> Result<TableConfig> {
    let o = obj(v, at)?;
    check_keys(
        o,
        at,
        &[
            "name",
            "vocabulary_size",
            "embedding_dim",
            "combiner",
            "optimizer",
            "initializer",
            "quantization",
            "max_ids_per_partition",
            "max_unique_ids_per_partition",
        ],
    )?;
    let name = req_str(o, at, "name")?;
    let mut t = TableConfig::new(
        &name,
        opt_u32(o, at, "vocabulary_size")?
            .ok_or_else(|| config_err(format!("{at}.vocabulary_size"), "required"))?,
        opt_u32(o, at, "embedding_dim")?
            .ok_or_else(|| config_err(format!("{at}.embedding_dim"), "required"))?,
    );
    if let Some(c) = o.get("combiner") {
        t.combiner = c.as_str().and_then(Combiner::parse).ok_or_else(|| {
            config_err(
                format!("{at}.combiner"),
                format!("combiner must be one of sum, mean or sqrtn, found {c}"),
            )
        })?;
    }
    if let Some(x) = opt_u32(o, at, "max_ids_per_partition")? {
        t.max_ids_per_partition = x;
    }
    if let Some(x) = opt_u32(o, at, "max_unique_ids_per_partition")? {
        t.max_unique_ids_per_partition = x;
    }
    if let Some(q) = o.get("quantization") {
        let qa = format!("{at}.quantization");
        let qo = obj(q, &qa)?;
        check_keys(qo, &qa, &["min_value", "max_value", "num_buckets"])?;
        t.quantization = Some(QuantizationConfig {
            min_value: opt_f32(qo, &qa, "min_value")?
                .ok_or_else(|| config_err(format!("{qa}.min_value"), "required"))?,
            max_value: opt_f32(qo, &qa, "max_value")?
                .ok_or_else(|| config_err(format!("{qa}.max_value"), "required"))?,
            num_buckets: opt_u32(qo, &qa, "num_buckets")?
                .ok_or_else(|| config_err(format!("{qa}.num_buckets"), "required"))?,
        });
    }
    if let Some(i) = o.get("initializer") {
        let ia = format!("{at}.initializer");
        let io = obj(i, &ia)?;
        check_keys(io, &ia, &["type", "value", "mean", "stddev"])?;
        t.initializer = match io.get("type").and_then(Value::as_str) {
            Some("zeros") => Initializer::Zeros,
            Some("constant") => Initializer::Constant(opt_f32(io, &ia, "value")?.unwrap_or(0.0)),
            Some("truncated_normal") => Initializer::TruncatedNormal {
                mean: opt_f32(io, &ia, "mean")?.unwrap_or(0.0),
                stddev: opt_f32(io, &ia, "stddev")?
                    .unwrap_or(1.0 / (t.embedding_dim as f32).sqrt()),
            },
            _ => {
                return Err(config_err(
                    format!("{ia}.type"),
                    "expected \"zeros\", \"constant\" or \"truncated_normal\"",
                ))
            }
        };
    }
    if let Some(op) = o.get("optimizer") {
        t.optimizer = optimizer_from_json(op, &format!("{at}.optimizer"))?;
    }
    Ok(t)
}

fn optimizer_from_json(v: &Value, at: &str) -> Result<Optimizer> {
    let o = obj(v, at)?;
    let ty = req_str(o, at, "type")?;
    let f = |k: &str, d: f32| -> Result<f32> { Ok(opt_f32(o, at, k)?.unwrap_or(d)) };
    let b = |k: &str, d: bool| -> Result<bool> { Ok(opt_bool(o, at, k)?.unwrap_or(d)) };
    let (keys, opt): (&[&str], Optimizer) = match ty.as_str() {
        "sgd" => (
            &["learning_rate"],
            Optimizer::Sgd {
                learning_rate: f("learning_rate", 0.01)?,
            },
        ),
        "adagrad" => (
            &["learning_rate", "initial_accumulator_value"],
            Optimizer::Adagrad {
                learning_rate: f("learning_rate", 0.001)?,
                initial_accumulator_value: f("initial_accumulator_value", 0.1)?,
            },
        ),
        "adagrad_momentum" => (
            &["learning_rate", "momentum", "use_nesterov", "exponent", "beta2", "epsilon"],
            Optimizer::AdagradMomentum {
                learning_rate: f("learning_rate", 0.001)?,
                momentum: f("momentum", 0.0)?,
                use_nesterov: b("use_nesterov", false)?,
                exponent: f("exponent", 2.0)?,
                beta2: f("beta2", 1.0)?,
                epsilon: f("epsilon", 1e-10)?,
            },
        ),
        "adam" => (
            &["learning_rate", "beta_1", "beta_2", "epsilon", "lazy_adam", "sum_inside_sqrt"],
            Optimizer::Adam {
                learning_rate: f("learning_rate", 0.001)?,
                beta_1: f("beta_1", 0.9)?,
                beta_2: f("beta_2", 0.999)?,
                epsilon: f("epsilon", 1e-7)?,
                lazy_adam: b("lazy_adam", true)?,
                sum_inside_sqrt: b("sum_inside_sqrt", true)?,
            },
        ),
        "ftrl" => (
            &[
                "learning_rate",
                "learning_rate_power",
                "l1_regularization_strength",
                "l2_regularization_strength",
                "beta",
                "initial_accumulator_value",
                "initial_linear_value",
                "multiply_linear_by_learning_rate",
            ],
            Optimizer::Ftrl {
                learning_rate: f("learning_rate", 0.001)?,
                learning_rate_power: f("learning_rate_power", -0.5)?,
                l1_regularization_strength: f("l1_regularization_strength", 0.0)?,
                l2_regularization_strength: f("l2_regularization_strength", 0.0)?,
                beta: f("beta", 0.0)?,
                initial_accumulator_value: f("initial_accumulator_value", 0.1)?,
                initial_linear_value: f("initial_linear_value", 0.0)?,
                multiply_linear_by_learning_rate: b("multiply_linear_by_learning_rate", false)?,
            },
        ),
        other => {
            return Err(config_err(
                format!("{at}.type"),
                format!("unknown optimizer '{other}' (expected sgd, adagrad, adagrad_momentum, adam or ftrl)"),
            ))
        }
    };
    let mut all = vec!["type"];
    all.extend_from_slice(keys);
    check_keys(o, at, &all)?;
    Ok(opt)
}
