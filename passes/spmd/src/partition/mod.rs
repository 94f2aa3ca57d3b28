//! The SPMD partitioner: the `spmd-partitioning` pass (XLA's `SpmdPartitioner`, seed 001).
//!
//! A module whose instructions carry shardings goes in; one per-device program with the
//! collectives that move data between shardings comes out. See docs/spmd-partitioning.md.
//!
//! - [`spec`]: a sharding read once per array into the working form (tiles, replication,
//!   explicit device order).
//! - [`plan`]: resharding plans, pure functions from a source and target spec to steps.
//! - `engine`: the pass itself: per-instruction handlers that build the per-device program
//!   with [`tessera_hlo::Builder`], resharding operands as each op needs them.

mod engine;
pub mod plan;
pub mod spec;

use tessera_hlo::{Builder, CompId, InstrId, Module, Opcode};
use tessera_pass::options::{parse_bool, parse_int, unknown_key, OptionDoc, PassOptions};
use tessera_pass::registry::RegisteredPass;
use tessera_pass::{Pass, PassError, Result};

pub use engine::partition;

/// Options of `spmd-partitioning` (`--pass-option spmd-partitioning.KEY=VALUE`): the seed's
/// `SpmdPartitionerOptions` fields that apply here, plus the device counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpmdOptions {
    /// Number of partitions; 0 (the default) takes the module header's `num_partitions`.
    pub num_partitions: i64,
    /// Number of replicas; 0 (the default) takes the module header's `replica_count`.
    pub num_replicas: i64,
    /// Convolution halos always on the lhs (XLA's option, default true). When false, a
    /// convolution with a split spatial dimension may also keep the lhs split and exchange
    /// halos of the kernel instead, each device summing its part of every output position;
    /// the handler takes whichever moves fewer bytes (docs/spmd-convolution.md).
    pub conv_halo_exchange_always_on_lhs: bool,
    /// How many of the largest instructions the memory report lists (XLA's
    /// `report_instruction_count`, default 5).
    pub report_instruction_count: i64,
    /// Windowed einsum threshold in MiB (XLA's option, default 256): a dot whose simple
    /// strategy would all-gather an operand (or all-reduce a partial result) larger than this
    /// per device becomes a loop over collective-permutes (docs/spmd-windowed-einsum.md).
    pub threshold_for_windowed_einsum_mib: i64,
    /// Windowed loops longer than this many steps are not built (XLA's
    /// `max_windowed_einsum_iteration`, default 32).
    pub max_windowed_einsum_iteration: i64,
    /// Two windows per trip of a windowed loop (XLA's `unroll_windowed_einsum`).
    pub unroll_windowed_einsum: bool,
    /// Windowed loops send pieces (or partial sums) both ways around the ring (XLA's
    /// `bidirectional_windowed_einsum`).
    pub bidirectional_windowed_einsum: bool,
    /// XLA's `windowed_einsum_use_multiple_streams`: a GPU scheduling hint; accepted and
    /// without effect here (the CPU plugin has one stream).
    pub windowed_einsum_use_multiple_streams: bool,
    /// May the entry's parameter and result shapes change (XLA's
    /// `allow_module_signature_change`)? When true (the default here, and what every XLA
    /// pipeline that partitions whole programs sets: the CPU and GPU compilers' partitioner,
    /// TPU, XLA's own tests), each entry parameter takes the local shape of its sharding and
    /// the root returns the piece of its sharding. When false, the signature is kept: every
    /// device takes each parameter whole, slices out what it needs, and returns the whole
    /// (replicated) result.
    pub allow_module_signature_change: bool,
    /// Print the explanation (`SpmdReport::explain`): memory before and after, every
    /// collective with the instruction and resharding that made it and its bytes.
    pub explain: bool,
}

impl Default for SpmdOptions {
    fn default() -> Self {
        SpmdOptions {
            num_partitions: 0,
            num_replicas: 0,
            conv_halo_exchange_always_on_lhs: true,
            report_instruction_count: 5,
            threshold_for_windowed_einsum_mib: 256,
            max_windowed_einsum_iteration: 32,
            unroll_windowed_einsum: false,
            bidirectional_windowed_einsum: false,
            windowed_einsum_use_multiple_streams: false,
            allow_module_signature_change: true,
            explain: false,
        }
    }
}

impl PassOptions for SpmdOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "num_partitions",
            default: "0",
            doc: "number of partitions (0: the module header's num_partitions)",
        },
        OptionDoc {
            key: "num_replicas",
            default: "0",
            doc: "number of replicas (0: the module header's replica_count)",
        },
        OptionDoc {
            key: "conv_halo_exchange_always_on_lhs",
            default: "true",
            doc: "false: a convolution may also exchange halos on the kernel (rhs), chosen by bytes",
        },
        OptionDoc {
            key: "report_instruction_count",
            default: "5",
            doc: "how many of the largest instructions the report lists",
        },
        OptionDoc {
            key: "threshold_for_windowed_einsum_mib",
            default: "256",
            doc: "a dot that would gather (or all-reduce) more MiB than this per device becomes a windowed loop",
        },
        OptionDoc {
            key: "max_windowed_einsum_iteration",
            default: "32",
            doc: "windowed loops of more steps than this are not built",
        },
        OptionDoc {
            key: "unroll_windowed_einsum",
            default: "false",
            doc: "two windows per trip of a windowed loop",
        },
        OptionDoc {
            key: "bidirectional_windowed_einsum",
            default: "false",
            doc: "windowed loops send pieces (or partial sums) both ways around the ring",
        },
        OptionDoc {
            key: "windowed_einsum_use_multiple_streams",
            default: "false",
            doc: "XLA's GPU stream hint; accepted, no effect on CPU",
        },
        OptionDoc {
            key: "allow_module_signature_change",
            default: "true",
            doc: "entry parameters and result take per-device shapes (false: each device takes and returns whole arrays)",
        },
        OptionDoc {
            key: "explain",
            default: "false",
            doc: "print memory before/after and every collective with its reason and bytes",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        let count = |v: &str| -> std::result::Result<i64, String> {
            let n = parse_int(v)?;
            if n < 0 {
                return Err(format!("expected a count >= 0, found `{v}`"));
            }
            Ok(n)
        };
        match key {
            "num_partitions" => self.num_partitions = count(value)?,
            "num_replicas" => self.num_replicas = count(value)?,
            "conv_halo_exchange_always_on_lhs" => {
                self.conv_halo_exchange_always_on_lhs = parse_bool(value)?
            }
            "report_instruction_count" => self.report_instruction_count = count(value)?,
            "threshold_for_windowed_einsum_mib" => {
                self.threshold_for_windowed_einsum_mib = count(value)?
            }
            "max_windowed_einsum_iteration" => self.max_windowed_einsum_iteration = count(value)?,
            "unroll_windowed_einsum" => self.unroll_windowed_einsum = parse_bool(value)?,
            "bidirectional_windowed_einsum" => {
                self.bidirectional_windowed_einsum = parse_bool(value)?
            }
            "windowed_einsum_use_multiple_streams" => {
                self.windowed_einsum_use_multiple_streams = parse_bool(value)?
            }
            "allow_module_signature_change" => {
                self.allow_module_signature_change = parse_bool(value)?
            }
            "explain" => self.explain = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// Builds the collectives the partitioner emits (the seed's `SPMDCollectiveOpsCreator`): a
/// library user may replace it (e.g. to emit a backend's own collectives). Groups hold
/// partition ids; every method appends to the builder's current computation.
pub trait CollectiveOps {
    /// Told once, before anything is built: the module runs `num_replicas` copies of the
    /// `num_partitions`-device program (XLA's flattened device id of partition `p` in replica
    /// `r` is `r * num_partitions + p`). Groups passed to the other methods hold partition
    /// ids and mean "within each replica".
    fn set_device_counts(&mut self, num_partitions: i64, num_replicas: i64) {
        let _ = (num_partitions, num_replicas);
    }
    fn partition_id(&mut self, b: &mut Builder) -> Result<InstrId>;
    /// All-reduce within each group with the scalar reduction computation `reducer`.
    fn all_reduce(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        reducer: CompId,
        groups: &[Vec<i64>],
    ) -> Result<InstrId>;
    /// All-gather along `dimension`, pieces concatenated in group order.
    fn all_gather(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        groups: &[Vec<i64>],
    ) -> Result<InstrId>;
    /// Array all-to-all: split along `dimension`, piece k to the k-th member, concatenated
    /// along `dimension` in group order.
    fn all_to_all(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        groups: &[Vec<i64>],
    ) -> Result<InstrId>;
    /// Collective-permute with `(source, target)` pairs.
    fn collective_permute(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        pairs: &[(i64, i64)],
    ) -> Result<InstrId>;
    /// Reduce-scatter along `dimension` within each group, combining with the binary `op`
    /// (`add`, `or`, ...): the k-th member keeps the k-th piece of the combined value.
    fn reduce_scatter(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        op: Opcode,
        groups: &[Vec<i64>],
    ) -> Result<InstrId>;
}

/// The default collectives: the builder's helpers, channel ids from the builder's one counter
/// (the module's next free id, then one more each), global device ids: with several replicas
/// each group of partition ids is repeated for every replica (XLA does the same for
/// num_replicas > 1); all-to-all and collective-permute name partition ids (cross-partition
/// mode), which already means "within each replica".
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultCollectives {
    num_partitions: i64,
    num_replicas: i64,
}

impl DefaultCollectives {
    /// `groups` of partition ids as groups of flattened device ids, one copy per replica.
    fn global(&self, groups: &[Vec<i64>]) -> Vec<Vec<i64>> {
        if self.num_replicas <= 1 {
            return groups.to_vec();
        }
        (0..self.num_replicas)
            .flat_map(|r| {
                groups
                    .iter()
                    .map(move |g| g.iter().map(|&d| r * self.num_partitions + d).collect())
            })
            .collect()
    }
}

impl CollectiveOps for DefaultCollectives {
    fn set_device_counts(&mut self, num_partitions: i64, num_replicas: i64) {
        self.num_partitions = num_partitions;
        self.num_replicas = num_replicas;
    }

    fn partition_id(&mut self, b: &mut Builder) -> Result<InstrId> {
        Ok(b.partition_id()?)
    }

    fn all_reduce(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        reducer: CompId,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        let a = tessera_hlo::Attrs {
            channel_id: Some(b.next_channel_id()),
            replica_groups: Some(Box::new(tessera_hlo::attrs::ReplicaGroups::explicit(
                self.global(groups),
            ))),
            use_global_device_ids: true,
            ..Default::default()
        };
        Ok(b.op(Opcode::AllReduce, &[x], a, &[reducer], None)?)
    }

    fn all_gather(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        Ok(b.all_gather(
            x,
            dimension,
            tessera_hlo::attrs::ReplicaGroups::explicit(self.global(groups)),
        )?)
    }

    fn all_to_all(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        Ok(b.all_to_all(
            x,
            dimension,
            tessera_hlo::attrs::ReplicaGroups::explicit(groups.to_vec()),
        )?)
    }

    fn collective_permute(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        pairs: &[(i64, i64)],
    ) -> Result<InstrId> {
        Ok(b.collective_permute(x, pairs)?)
    }

    fn reduce_scatter(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dimension: i64,
        op: Opcode,
        groups: &[Vec<i64>],
    ) -> Result<InstrId> {
        Ok(b.reduce_scatter(
            x,
            dimension,
            op,
            tessera_hlo::attrs::ReplicaGroups::explicit(self.global(groups)),
        )?)
    }
}

/// One collective the partitioner emitted: for which original instruction, why, and the
/// bytes each device receives (ORACLE.md's formulas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectiveNote {
    pub original: String,
    pub collective: &'static str,
    pub reason: String,
    pub bytes: i64,
}

/// Drops every `input_output_alias` whose parameter and output are arrays of different sizes
/// per device (an input sharded one way aliased to an output sharded another: XLA refuses to
/// compile that, "Expected aliased input ... same size"), and describes each.
fn drop_resized_aliases(m: &mut Module) -> Vec<String> {
    use tessera_hlo::Shape;
    let Some(entry) = m.entry() else {
        return Vec::new();
    };
    let c = m.comp(entry);
    let params: Vec<Shape> = c.parameters().map(|p| m.instr(p).shape.clone()).collect();
    let Some(result) = c.root().map(|r| m.instr(r).shape.clone()) else {
        return Vec::new();
    };
    let index =
        |v: &[i64]| -> Option<Vec<usize>> { v.iter().map(|&x| usize::try_from(x).ok()).collect() };
    let mut dropped = Vec::new();
    m.config.input_output_alias.retain(|a| {
        let out = index(&a.output_index).and_then(|ix| result.subshape(&ix).cloned());
        let input = usize::try_from(a.parameter_number)
            .ok()
            .and_then(|p| params.get(p))
            .zip(index(&a.parameter_index))
            .and_then(|(ps, ix)| ps.subshape(&ix).cloned());
        match (out, input) {
            (Some(Shape::Array(o)), Some(Shape::Array(i))) if o.byte_size() != i.byte_size() => {
                dropped.push(format!(
                    "input_output_alias of output {:?} and parameter {} dropped: partitioned, \
                     they are {} and {} per device (their shardings differ), and an alias needs \
                     one buffer of one size",
                    a.output_index,
                    a.parameter_number,
                    tessera_hlo::text::shape_to_string(&Shape::Array(o)),
                    tessera_hlo::text::shape_to_string(&Shape::Array(i))
                ));
                false
            }
            _ => true,
        }
    });
    dropped
}

/// What the last run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpmdReport {
    pub num_partitions: i64,
    /// Every collective emitted, in order.
    pub collectives: Vec<CollectiveNote>,
    /// Reshards that gathered the whole array although the target was not replicated
    /// (XLA's "involuntary full rematerialization"): the original instruction and the specs.
    pub last_resorts: Vec<String>,
    /// Instructions partitioned by the default handler (operands replicated, computed on
    /// every device, result resliced).
    pub defaulted: Vec<String>,
    /// The entry's largest instructions (name, bytes) before partitioning and after (per
    /// device), `report_instruction_count` of each (the seed's `SpmdLogger` memory report).
    pub largest_before: Vec<(String, i64)>,
    pub largest_after: Vec<(String, i64)>,
    /// The strategy the cost model chose for each dot-like instruction and why (its bytes and
    /// peak against the runner-up).
    pub choices: Vec<String>,
    /// `input_output_alias` entries dropped because partitioning gave the parameter and the
    /// output different per-device sizes (their shardings differ), each described.
    pub dropped_aliases: Vec<String>,
}

impl SpmdReport {
    /// The report as text: memory before and after, collectives grouped by the instruction
    /// that caused them, the last-resort reshards and the instructions that took the default.
    pub fn explain(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "spmd-partitioning on {} partitions",
            self.num_partitions
        );
        let _ = writeln!(out, "largest instructions before (global bytes):");
        for (n, b) in &self.largest_before {
            let _ = writeln!(out, "  %{n}: {b}");
        }
        let _ = writeln!(out, "largest instructions after (bytes per device):");
        for (n, b) in &self.largest_after {
            let _ = writeln!(out, "  %{n}: {b}");
        }
        for d in &self.dropped_aliases {
            let _ = writeln!(out, "{d}");
        }
        let total: i64 = self.collectives.iter().map(|c| c.bytes).sum();
        let _ = writeln!(
            out,
            "{} collectives, {total} bytes received per device:",
            self.collectives.len()
        );
        for c in &self.collectives {
            let _ = writeln!(
                out,
                "  {} for %{} ({}): {} bytes",
                c.collective, c.original, c.reason, c.bytes
            );
        }
        if !self.choices.is_empty() {
            let _ = writeln!(out, "{} strategies chosen by cost:", self.choices.len());
            for c in &self.choices {
                let _ = writeln!(out, "  {c}");
            }
        }
        let _ = writeln!(out, "{} last-resort reshards:", self.last_resorts.len());
        for l in &self.last_resorts {
            let _ = writeln!(out, "  {l}");
        }
        let _ = writeln!(
            out,
            "{} instructions took the default path{}{}",
            self.defaulted.len(),
            if self.defaulted.is_empty() { "" } else { ": " },
            self.defaulted.join(", ")
        );
        out
    }
}

#[derive(Default)]
pub struct SpmdPartitioning {
    pub options: SpmdOptions,
    pub report: SpmdReport,
    /// The collectives creator; `None` uses [`DefaultCollectives`].
    pub collectives: Option<Box<dyn CollectiveOps>>,
}

impl std::fmt::Debug for SpmdPartitioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpmdPartitioning")
            .field("options", &self.options)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl RegisteredPass for SpmdPartitioning {
    type Options = SpmdOptions;
    const NAME: &'static str = "spmd-partitioning";
    const DOC: &'static str =
        "XLA's SPMD partitioner: one per-device program with collectives from a sharded module";
    fn with_options(options: SpmdOptions) -> Self {
        SpmdPartitioning {
            options,
            ..Default::default()
        }
    }
}

impl Pass for SpmdPartitioning {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        let mut default = DefaultCollectives::default();
        let creator: &mut dyn CollectiveOps = match self.collectives.as_mut() {
            Some(c) => c.as_mut(),
            None => &mut default,
        };
        crate::unreduced::lower_unreduced(module).map_err(PassError::Failed)?;
        let mut report = partition(module, &self.options, creator)?;
        report.dropped_aliases = drop_resized_aliases(module);
        if !report.last_resorts.is_empty() {
            tracing::warn!(
                "spmd-partitioning: {} reshards gathered the whole array (first: {})",
                report.last_resorts.len(),
                report.last_resorts[0]
            );
        }
        if self.options.explain {
            tracing::warn!("{}", report.explain());
        }
        self.report = report;
        Ok(true)
    }
}
