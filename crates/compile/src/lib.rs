//! `tessera compile` as a library call: a frontend's sharded module in, the program every
//! device runs out, with a report of what each pass did.
//!
//! The pipeline is the one a frontend needs and nothing else:
//!
//! ```text
//! verify -> [shardy-import] -> [flatten-call-graph] -> [auto-sharding] -> sharding-propagation
//!        -> [variable-dedup]
//!        -> spmd-partitioning -> [all-reduce-reassociate] -> schedule -> [rematerialization]
//!        -> verify
//! ```
//!
//! [`compile`] runs it; [`verify_on_devices`] runs the original and the result on PJRT devices
//! and compares their outputs; [`parse_input`] reads a module as users have it (jax's
//! `lower().as_text()`, XLA's dump files with `%x#N`, TensorFlow's HLO text, or a serialized
//! `xla.HloModuleProto`). Every pass's options stay reachable through
//! [`CompileOptions::pass_options`] (`PASS.KEY=VALUE`, as `tessera opt --pass-option`).
//!
//! A frontend builds its module with [`tessera_hlo::Builder`] (or parses one), then:
//!
//! ```
//! use tessera_compile::{compile, verify_on_devices, CompileOptions, VerifyOptions};
//! use tessera_hlo::attrs::DotDimensionNumbers;
//! use tessera_hlo::{Attrs, Builder, ElementType, Module, Opcode, Shape, Sharding};
//!
//! // y = relu(x @ w), the batch of x split over 4 devices.
//! let mut m = Module::new("frontend");
//! let entry = m.add_computation("main").unwrap();
//! m.set_entry(entry);
//! m.config.num_partitions = 4;
//! let mut b = Builder::new(&mut m, entry);
//! let x = b.parameter(0, Shape::array(ElementType::F32, &[16, 8]), "x").unwrap();
//! let w = b.parameter(1, Shape::array(ElementType::F32, &[8, 4]), "w").unwrap();
//! let dot = Attrs {
//!     dot_dims: Some(Box::new(DotDimensionNumbers {
//!         lhs_contracting_dimensions: vec![1],
//!         rhs_contracting_dimensions: vec![0],
//!         ..Default::default()
//!     })),
//!     ..Default::default()
//! };
//! let xw = b.op(Opcode::Dot, &[x, w], dot, &[], None).unwrap();
//! let zero = b.scalar(ElementType::F32, 0.0).unwrap();
//! let zeros = b.broadcast(zero, &[16, 4], &[]).unwrap();
//! let y = b.binary(Opcode::Maximum, xw, zeros).unwrap();
//! m.set_root(entry, y);
//! m.instr_mut(x).sharding = Some(Sharding::iota_tiled(&[4, 1]));
//!
//! let compiled = compile(m.clone(), &CompileOptions::new(4)).unwrap();
//! print!("{}", compiled.report.render());
//! let client = tessera_runtime::Client::cpu(4).unwrap();
//! let check = verify_on_devices(&client, &m, &compiled, &VerifyOptions::default()).unwrap();
//! assert!(check.passed(), "{check}");
//! ```
//!
//! See docs/compile.md.

mod shardy;
mod verify;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use tessera_autoshard::{AutoShardOptions, AutoShardReport};
use tessera_dedup::{DedupOptions, DedupReport};
use tessera_hlo::analysis::shape_size;
use tessera_hlo::{Module, Opcode, Shape};
use tessera_pass::options::PassOptions;
use tessera_pass::{PassError, Registry};
use tessera_remat::schedule::ScheduleOptions;
use tessera_remat::schedule_memory::{module_memory, MemoryOptions};
use tessera_remat::{RematOptions, RematSummary, Rematerialization, SchedulePass};
use tessera_spmd::{PropagationOptions, SpmdOptions, SpmdPartitioning, SpmdReport};

pub use shardy::{has_shardy_shape_calls, import_shardy, runnable_form};
pub use verify::{verify_on_devices, Verification, VerifyOptions};

/// The passes of the pipeline, in order (their registry names; `shardy-import` runs before
/// them when the module has Shardy's shape custom-calls, see [`import_shardy`]).
pub const PIPELINE: [&str; 6] = [
    "auto-sharding",
    "sharding-propagation",
    "variable-dedup",
    "spmd-partitioning",
    "schedule",
    "rematerialization",
];

/// Why a compile (or its verification) failed. Each message names the place: the input's
/// `line:col`, the setting, the pass, or the instruction.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The input text does not parse: `file:line:col: ...`.
    #[error("{0}")]
    Parse(String),
    /// The input is neither HLO text nor a valid `xla.HloModuleProto`.
    #[error("{0}")]
    Proto(String),
    /// The input parses but the verifier refuses it (every finding listed).
    #[error("the input module is invalid:\n{0}")]
    InvalidInput(String),
    /// Settings that cannot go together, or a setting the module contradicts.
    #[error("{0}")]
    Settings(String),
    /// A pass failed; the message names the pass.
    #[error("{0}")]
    Pass(String),
    /// The result does not verify: a bug in a pass, never the user's fault.
    #[error("the compiled module is invalid after `{after}` (a bug in Tessera):\n{message}")]
    InvalidOutput { after: String, message: String },
    /// Running on PJRT failed. Transparent: its text is the runtime error's, said once (a
    /// `{0}` message with the error also as its source printed it twice in `{:#}`).
    #[error(transparent)]
    Runtime(#[from] tessera_runtime::Error),
}

pub type Result<T, E = CompileError> = std::result::Result<T, E>;

impl From<PassError> for CompileError {
    fn from(e: PassError) -> Self {
        match e {
            PassError::BadOption { .. } | PassError::UnknownPass { .. } => {
                CompileError::Settings(e.to_string())
            }
            e => CompileError::Pass(e.to_string()),
        }
    }
}

/// What to compile for, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Devices the program is partitioned over (`--num-partitions`).
    pub num_partitions: i64,
    /// Replicas of the whole program (`--num-replicas`); only 1 is supported by the
    /// partitioner today, and anything else is refused with that reason.
    pub num_replicas: i64,
    /// Peak bytes per device, outputs included (`--memory-limit`); `None`: no
    /// rematerialization.
    pub memory_limit: Option<i64>,
    /// Merge entry parameters of one `tessera.resource` (`--dedup`).
    pub dedup: bool,
    /// `PASS.KEY=VALUE` options of the pipeline's passes (`--pass-option`).
    pub pass_options: Vec<String>,
    /// Run the verifier after every pass, not only on the input and the result.
    pub verify_each_pass: bool,
    /// Also schedule the module before partitioning to report its one-device peak
    /// ([`PeakMemory::unpartitioned`]); costs about a third of the pipeline's time.
    pub measure_unpartitioned: bool,
    /// Under a memory limit, let the rematerialization pass escalate (its default,
    /// `rematerialization.search=auto`: larger blocks, other schedules, reschedule rounds;
    /// docs/rematerialization.md). `false` runs it once (`search=fast`) unless `pass_options`
    /// names a search.
    pub search_remat_settings: bool,
    /// Choose the shardings the module does not give (`--auto-shard`): the `auto-sharding`
    /// pass runs before propagation with these options (its memory limit, when `None`, is
    /// `memory_limit`). `None`: the pass does not run.
    pub auto_shard: Option<AutoShardOptions>,
}

impl CompileOptions {
    /// Defaults for `num_partitions` devices: one replica, no memory limit, no dedup.
    pub fn new(num_partitions: i64) -> CompileOptions {
        CompileOptions {
            num_partitions,
            num_replicas: 1,
            memory_limit: None,
            dedup: false,
            pass_options: Vec::new(),
            verify_each_pass: false,
            measure_unpartitioned: false,
            search_remat_settings: true,
            auto_shard: None,
        }
    }

    /// Defaults for the devices `module` was written for: its header's `num_partitions`, or
    /// the devices its shardings name when the header says 1 (jax's `lower().as_text()` leaves
    /// `num_partitions` out).
    pub fn for_module(module: &Module) -> CompileOptions {
        CompileOptions::new(
            module
                .config
                .num_partitions
                .max(tessera_runtime::harness::sharding_device_count(module)),
        )
    }
}

/// Progress of a run, for a caller that shows it (the CLI prints one line per pass on a
/// terminal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress<'a> {
    /// `pass` (the `index`-th of `total` stages that run) starts.
    Start {
        pass: &'a str,
        index: usize,
        total: usize,
    },
    /// `pass` finished after `time`.
    Done { pass: &'a str, time: Duration },
}

/// One stage of the run and its time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageTime {
    pub name: String,
    pub time: Duration,
    pub changed: bool,
}

/// Per-device peak memory (XLA's rematerialization accounting: live buffers along the
/// schedule, outputs included, parameters not). Every device runs the same program, so one
/// number holds for each of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeakMemory {
    /// The module before partitioning, as one program on one device (with
    /// `measure_unpartitioned`).
    pub unpartitioned: Option<i64>,
    /// The per-device program after partitioning and scheduling.
    pub partitioned: i64,
    /// After rematerialization (equal to `partitioned` without a memory limit).
    pub after_remat: i64,
    /// Parameter bytes per device (not part of the peaks).
    pub parameters: i64,
    pub limit: Option<i64>,
    /// With a limit: the bytes no rematerialization can go below along the best schedule
    /// tried (`tessera_remat::floor`; outputs included).
    pub floor: Option<i64>,
    /// With a limit: the floor that holds for any schedule.
    pub floor_any_schedule: Option<i64>,
}

/// One try of the rematerialization pass's escalation (see `tessera_remat::RematTry`).
pub use tessera_remat::RematTry;

/// Collectives of one kind in the output module, with the bytes each device receives
/// (ORACLE.md's formulas: all-gather out*(g-1)/g, all-reduce 2*out*(g-1)/g, reduce-scatter
/// out*(g-1), all-to-all out*(g-1)/g, collective-permute out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectiveTraffic {
    pub count: usize,
    pub bytes: i64,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct CompileReport {
    pub module: String,
    pub num_partitions: i64,
    /// Every stage in order (verifier runs included), with its time.
    pub stages: Vec<StageTime>,
    pub total: Duration,
    pub peak: PeakMemory,
    /// Collectives of the output module by opcode name.
    pub collectives: BTreeMap<String, CollectiveTraffic>,
    /// The partitioner's own report: every collective with the instruction and resharding
    /// that made it (`SpmdReport::explain`).
    pub spmd: SpmdReport,
    pub dedup: Option<DedupReport>,
    /// With `auto_shard`: the problem solved and every op the pass decided.
    pub auto_shard: Option<AutoShardReport>,
    pub remat: Option<RematSummary>,
    /// With a limit: every scheduler and block setting tried, in order; the last one that ran
    /// rematerialization with the lowest peak is the result.
    pub remat_tries: Vec<RematTry>,
    /// With a limit: the floor of the schedule the result has, described (where, what).
    pub floor: Option<String>,
    /// Instructions sharding propagation left without a sharding.
    pub undecided: Vec<String>,
    /// Everything a pass warned about, one line each.
    pub warnings: Vec<String>,
}

impl CompileReport {
    /// Total collective bytes per device.
    pub fn collective_bytes(&self) -> i64 {
        self.collectives.values().map(|c| c.bytes).sum()
    }

    /// Why each collective exists (the partitioner's explanation), then the collectives of
    /// the output module with their bytes: what `tessera explain` prints.
    pub fn explain(&self) -> String {
        let mut out = self.spmd.explain();
        let _ = writeln!(
            out,
            "in the output module (after cleanup): {} bytes received per device",
            self.collective_bytes()
        );
        for (k, c) in &self.collectives {
            let _ = writeln!(out, "  {k:<20} {:>6}  {:>14} bytes", c.count, c.bytes);
        }
        out
    }

    /// The report `tessera compile --report` prints.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "compile {} for {} partitions in {:.1} ms",
            self.module,
            self.num_partitions,
            ms(self.total)
        );
        let _ = writeln!(o, "\npasses:");
        let w = self.stages.iter().map(|s| s.name.len()).max().unwrap_or(0);
        for s in &self.stages {
            let _ = writeln!(
                o,
                "  {:<w$}  {:>10.3} ms{}",
                s.name,
                ms(s.time),
                if s.changed { "" } else { "  (unchanged)" }
            );
        }
        let p = &self.peak;
        let _ = writeln!(
            o,
            "\npeak memory per device (every device runs the same program; parameters not counted):"
        );
        if let Some(u) = p.unpartitioned {
            let _ = writeln!(o, "  before partitioning (1 device): {u:>14}");
        }
        let _ = writeln!(o, "  after partitioning:             {:>14}", p.partitioned);
        let _ = write!(o, "  after rematerialization:        {:>14}", p.after_remat);
        match p.limit {
            Some(l) => {
                let _ = writeln!(
                    o,
                    "  (limit {l}: {})",
                    if p.after_remat <= l { "met" } else { "NOT met" }
                );
            }
            None => {
                let _ = writeln!(o, "  (no limit)");
            }
        }
        if let (Some(f), Some(a)) = (p.floor, p.floor_any_schedule) {
            let _ = writeln!(
                o,
                "  floor of rematerialization:     {f:>14}  (any schedule: {a})"
            );
        }
        let _ = writeln!(o, "  parameters per device:          {:>14}", p.parameters);
        let count: usize = self.collectives.values().map(|c| c.count).sum();
        let _ = writeln!(
            o,
            "\ncollectives in the output: {count}, {} bytes received per device",
            self.collective_bytes()
        );
        for (k, c) in &self.collectives {
            let _ = writeln!(o, "  {k:<20} {:>6}  {:>14} bytes", c.count, c.bytes);
        }
        if let Some(a) = &self.auto_shard {
            let _ = writeln!(o, "\nauto-sharding:");
            for line in a.render().lines() {
                let _ = writeln!(o, "  {line}");
            }
        }
        if let Some(d) = &self.dedup {
            let _ = writeln!(o, "\nvariable-dedup:");
            for line in d.render().lines() {
                let _ = writeln!(o, "  {line}");
            }
        }
        if let Some(r) = &self.remat {
            let _ = writeln!(o, "\nrematerialization:");
            for line in r.report().lines() {
                let _ = writeln!(o, "  {line}");
            }
        }
        let _ = writeln!(o, "\nwhy each collective exists (spmd-partitioning):");
        for line in self.spmd.explain().lines() {
            let _ = writeln!(o, "  {line}");
        }
        let _ = writeln!(o, "\nwarnings: {}", self.warnings.len());
        for wr in &self.warnings {
            let _ = writeln!(o, "  {wr}");
        }
        o
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The result of [`compile`].
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The per-device program (scheduled; MANUAL-free: PJRT runs it with `num_partitions`
    /// devices, as `tessera run` and [`verify_on_devices`] do).
    pub module: Module,
    /// The global module with every sharding decided (after propagation, before dedup and
    /// partitioning): how to split the inputs and assemble the outputs.
    pub sharded: Module,
    /// With `dedup`, for every original argument the parameter of `module` that takes it.
    pub argument_map: Option<Vec<usize>>,
    pub report: CompileReport,
}

/// Reads a module as users have it: HLO text (jax's `lower().as_text()`, XLA's dump files
/// with `%x#N`, TensorFlow's HLO) or a serialized `xla.HloModuleProto`. `shown` names the
/// input in errors (`model.hlo:12:7: ...`).
pub fn parse_input(bytes: &[u8], shown: &str) -> Result<Module> {
    if looks_like_text(bytes) {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            CompileError::Parse(format!(
                "{shown}: byte {} is not UTF-8 text",
                e.valid_up_to()
            ))
        })?;
        tessera_hlo::text::parse_module(text)
            .map_err(|e| CompileError::Parse(format!("{shown}:{e}")))
    } else {
        let m = tessera_hlo::proto::from_proto_bytes(bytes).map_err(|e| {
            CompileError::Proto(format!(
                "{shown}: neither HLO text (no `HloModule` header) nor an xla.HloModuleProto: {e}"
            ))
        })?;
        Ok(m)
    }
}

/// HLO text starts (after blank lines and `//` comments) with `HloModule`; a proto never does
/// (its first byte is a field tag).
fn looks_like_text(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    loop {
        let t = rest.trim_ascii_start();
        if let Some(r) = t.strip_prefix(b"//") {
            rest = match r.iter().position(|&c| c == b'\n') {
                Some(p) => &r[p + 1..],
                None => &[],
            };
            continue;
        }
        return t.starts_with(b"HloModule") || t.is_empty();
    }
}

/// Gives the per-device program's root, where partitioning left it without one, the sharding
/// the global module's root was partitioned to: the program then says how its result lies on
/// the devices (the Python bridge and `tessera compare` read it). A root rebuilt by the
/// partitioner (jax's `get-tuple-element` of a one-element tuple, folded away) loses it.
fn declare_root_sharding(module: &mut Module, sharded: &Module) {
    let root = |m: &Module| m.entry().and_then(|e| m.comp(e).root());
    let (Some(r), Some(g)) = (root(module), root(sharded)) else {
        return;
    };
    let Some(s) = sharded.instr(g).sharding.clone() else {
        return;
    };
    let same_structure = module.instr(r).shape.leaf_count() == sharded.instr(g).shape.leaf_count();
    if module.instr(r).sharding.is_none() && same_structure {
        module.instr_mut(r).sharding = Some(s);
    }
}

/// Every pass Tessera has, by name: the generic passes of `tessera-pass` and each pass crate's.
/// The one registry: the pipeline resolves its pass names and aliases (`remat`, `dedup`) in it,
/// `tessera opt`/`passes`/`memory` run it, and the robustness checks and benches go through
/// every pass in it. A crate with more passes registers them here.
pub fn registry() -> Registry {
    let mut r = Registry::with_generic_passes();
    tessera_spmd::register(&mut r);
    tessera_remat::register(&mut r);
    tessera_dedup::register(&mut r);
    tessera_autoshard::register(&mut r);
    r
}

/// Pass options by pass, checked against the pipeline and the top-level settings.
struct PassSettings {
    auto_shard: Option<AutoShardOptions>,
    propagation: PropagationOptions,
    dedup: DedupOptions,
    spmd: SpmdOptions,
    schedule: ScheduleOptions,
    remat: RematOptions,
}

fn settings(options: &CompileOptions, module: &Module) -> Result<PassSettings> {
    let bad = |m: String| Err(CompileError::Settings(m));
    let n = options.num_partitions;
    if !(1..=tessera_hlo::text::MAX_DEVICES).contains(&n) {
        return bad(format!(
            "--num-partitions {n} (the flag, else the module header's num_partitions): \
             expected 1 to {} (the most devices a sharding may name)",
            tessera_hlo::text::MAX_DEVICES
        ));
    }
    if options.num_replicas != 1 {
        return bad(format!(
            "--num-replicas {}: the SPMD partitioner supports one replica only (yet); \
             partition over --num-partitions devices instead",
            options.num_replicas
        ));
    }
    if let Some(l) = options.memory_limit {
        if l <= 0 {
            return bad(format!(
                "--memory-limit {l}: expected a positive byte count"
            ));
        }
    }
    let header = module.config.num_partitions;
    if header > 1 && header != n {
        return bad(format!(
            "--num-partitions {n}, but the module was lowered for num_partitions={header} (its \
             header); its shardings name devices of that mesh: compile with \
             --num-partitions {header}"
        ));
    }
    let named = tessera_runtime::harness::sharding_device_count(module);
    if named > n {
        return bad(format!(
            "--num-partitions {n}, but the module's shardings name {named} devices"
        ));
    }
    if let Some(what) = shardy_custom_call(module) {
        return bad(format!(
            "{what}, one of Shardy's own custom-calls: only jax's Shardy pipeline (XLA's \
             shardy-xla pass) reads them. Give the module XLA dumps right before \
             spmd-partitioning (after shardy-xla), or lower with \
             jax_use_shardy_partitioner=False"
        ));
    }
    if module.config.replica_count > 1 {
        return bad(format!(
            "the module's header has replica_count={}: the SPMD partitioner supports one \
             replica only (yet)",
            module.config.replica_count
        ));
    }

    let registry = registry();
    let mut by_pass: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (pass, pairs) in tessera_pass::registry::parse_pass_options(&options.pass_options)? {
        let name = registry.resolve(&pass).to_string();
        if !PIPELINE.contains(&name.as_str()) {
            let (k, v) = &pairs[0];
            return bad(format!(
                "--pass-option {pass}.{k}={v}: `{pass}` is not a pass of the compile pipeline \
                 ({})",
                PIPELINE.join(", ")
            ));
        }
        by_pass.entry(name).or_default().extend(pairs);
    }
    let pairs = |p: &str| by_pass.get(p).map(Vec::as_slice).unwrap_or(&[]);
    if !options.dedup {
        if let Some((k, v)) = pairs("variable-dedup").first() {
            return bad(format!(
                "--pass-option variable-dedup.{k}={v} without --dedup: the pass does not run"
            ));
        }
    }
    let auto_shard = match &options.auto_shard {
        None => {
            if let Some((k, v)) = pairs("auto-sharding").first() {
                return bad(format!(
                    "--pass-option auto-sharding.{k}={v} without --auto-shard: the pass does \
                     not run"
                ));
            }
            None
        }
        Some(given) => {
            let mut a = given.clone();
            for (k, v) in pairs("auto-sharding") {
                tessera_pass::options::PassOptions::set(&mut a, k, v).map_err(|e| {
                    CompileError::Settings(format!("--pass-option auto-sharding.{k}={v}: {e}"))
                })?;
            }
            if a.memory_limit.is_none() {
                a.memory_limit = options.memory_limit;
            }
            if let Some(text) = &a.mesh {
                tessera_autoshard::DeviceMesh::parse(text, n)
                    .map_err(|e| CompileError::Settings(e.to_string()))?;
            }
            Some(a)
        }
    };
    let mut spmd = SpmdOptions::from_pairs("spmd-partitioning", pairs("spmd-partitioning"))?;
    for (key, value, flag) in [
        ("num_partitions", spmd.num_partitions, n),
        ("num_replicas", spmd.num_replicas, options.num_replicas),
    ] {
        if value != 0 && value != flag {
            let f = key.replace('_', "-");
            return bad(format!(
                "--pass-option spmd-partitioning.{key}={value} contradicts --{f} {flag}"
            ));
        }
    }
    spmd.num_partitions = n;
    spmd.num_replicas = options.num_replicas;
    let mut remat = RematOptions::from_pairs("rematerialization", pairs("rematerialization"))?;
    match (remat.memory_limit, options.memory_limit) {
        (Some(p), Some(l)) => {
            return bad(format!(
                "--memory-limit {l} and --pass-option rematerialization.memory_limit={p}: give \
                 the limit once"
            ))
        }
        (None, Some(l)) => remat.memory_limit = Some(l),
        _ => {}
    }
    let dedup = DedupOptions::from_pairs("variable-dedup", pairs("variable-dedup"))?;
    if !options.search_remat_settings
        && !pairs("rematerialization")
            .iter()
            .any(|(k, _)| k == "search")
    {
        remat.search = tessera_remat::SearchKind::Fast;
    }
    Ok(PassSettings {
        auto_shard,
        propagation: PropagationOptions::from_pairs(
            "sharding-propagation",
            pairs("sharding-propagation"),
        )?,
        dedup,
        spmd,
        schedule: ScheduleOptions::from_pairs("schedule", pairs("schedule"))?,
        remat,
    })
}

/// The first `xla.sdy.*` custom-call of `module` that [`import_shardy`] does not rewrite,
/// described.
fn shardy_custom_call(module: &Module) -> Option<String> {
    module.computations().iter().find_map(|&c| {
        module.comp(c).instructions().iter().find_map(|&id| {
            let i = module.instr(id);
            let t = &i.attrs.custom_call.as_ref()?.target;
            (t.starts_with("xla.sdy.") && shardy::shape_call_target(module, id).is_none())
                .then(|| format!("%{} is a custom-call to {t}", i.name()))
        })
    })
}

fn check(module: &Module) -> std::result::Result<(), String> {
    tessera_hlo::verify::verify(module, &tessera_hlo::verify::VerifyOptions::default())
        .map_err(|e| e.to_string())
}

/// Collectives of `module` by opcode, with the bytes each device receives (replica groups of
/// any spelling; no groups means all `num_devices`). One formula for our output and XLA's.
pub fn collective_traffic(
    module: &Module,
    num_devices: i64,
) -> BTreeMap<String, CollectiveTraffic> {
    use Opcode::*;
    let mut out: BTreeMap<String, CollectiveTraffic> = BTreeMap::new();
    for &c in module.computations() {
        for &id in module.comp(c).instructions() {
            let i = module.instr(id);
            let bytes_out: i64 = match &i.shape {
                Shape::Tuple(e) => e.iter().map(|s| s.byte_size(8)).sum(),
                s => s.byte_size(8),
            };
            let g = i
                .attrs
                .replica_groups
                .as_ref()
                .and_then(|r| r.group_size())
                .filter(|&g| g > 0)
                .unwrap_or(num_devices)
                .max(1);
            let b = match i.opcode() {
                AllGather | AllGatherStart | AllToAll => bytes_out * (g - 1) / g,
                AllReduce | AllReduceStart => 2 * bytes_out * (g - 1) / g,
                ReduceScatter => bytes_out * (g - 1),
                CollectivePermute | CollectivePermuteStart => bytes_out,
                _ => continue,
            };
            let e = out.entry(i.opcode().name().to_string()).or_default();
            e.count += 1;
            e.bytes += b;
        }
    }
    out
}

/// The per-device peak of a partitioned module that has no schedule (XLA's own partitioned
/// module, for comparison): scheduled with the default scheduler, measured as
/// [`PeakMemory`] measures ours.
pub fn per_device_peak(module: &Module) -> Result<i64> {
    let mut m = module.clone();
    tessera_remat::schedule_module(&mut m, Default::default(), &shape_size)
        .map_err(|e| CompileError::Pass(format!("schedule: {e}")))?;
    Ok(peak_of(&m)?.0)
}

/// Peak bytes of `module` along its schedule (XLA's rematerialization accounting).
fn peak_of(module: &Module) -> Result<(i64, i64)> {
    let m = module_memory(module, None, &shape_size, MemoryOptions::default())
        .map_err(|e| CompileError::Pass(format!("memory accounting: {e}")))?;
    Ok((m.peak_bytes, m.parameter_bytes))
}

struct Runner<'a> {
    stages: Vec<StageTime>,
    progress: &'a mut dyn FnMut(Progress<'_>),
    index: usize,
    total: usize,
}

impl Runner<'_> {
    fn stage<T>(&mut self, name: &str, f: impl FnOnce() -> Result<(T, bool)>) -> Result<T> {
        self.index += 1;
        (self.progress)(Progress::Start {
            pass: name,
            index: self.index,
            total: self.total,
        });
        let t0 = Instant::now();
        let (value, changed) = f()?;
        let time = t0.elapsed();
        (self.progress)(Progress::Done { pass: name, time });
        self.stages.push(StageTime {
            name: name.to_string(),
            time,
            changed,
        });
        Ok(value)
    }

    /// Runs a cleanup pass (call-graph flattening, all-reduce reassociation) that shows in the
    /// report as a stage only when it changed the module, verified after it with `each`.
    fn cleanup(
        &mut self,
        module: &mut Module,
        pass: &mut dyn tessera_pass::Pass,
        each: bool,
    ) -> Result<()> {
        let t0 = Instant::now();
        if pass.run(module)? {
            let name = pass.name().to_string();
            self.stages.push(StageTime {
                name: name.clone(),
                time: t0.elapsed(),
                changed: true,
            });
            if each {
                self.verify(module, &name, false)?;
            }
        }
        Ok(())
    }

    fn verify(&mut self, module: &Module, after: &str, input: bool) -> Result<()> {
        self.stage("verify", || {
            check(module).map_err(|message| {
                if input {
                    CompileError::InvalidInput(message)
                } else {
                    CompileError::InvalidOutput {
                        after: after.to_string(),
                        message,
                    }
                }
            })?;
            Ok(((), false))
        })
    }
}

/// Compiles `module` for `options.num_partitions` devices: verify, sharding propagation,
/// variable deduplication (with `dedup`), SPMD partitioning, scheduling, rematerialization
/// (with a memory limit), verify.
pub fn compile(module: Module, options: &CompileOptions) -> Result<Compiled> {
    compile_with_progress(module, options, &mut |_| {})
}

/// [`compile`], telling `progress` when each stage starts and ends.
pub fn compile_with_progress(
    mut module: Module,
    options: &CompileOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Compiled> {
    let start = Instant::now();
    let s = settings(options, &module)?;
    let each = options.verify_each_pass;
    let passes = 3
        + usize::from(options.dedup)
        + usize::from(s.auto_shard.is_some())
        + usize::from(s.remat.memory_limit.is_some())
        + usize::from(has_shardy_shape_calls(&module));
    let mut run = Runner {
        stages: Vec::new(),
        progress,
        index: 0,
        // verify, passes, [memory accounting], verify (+ one verify per pass)
        total: 2 + usize::from(options.measure_unpartitioned) + passes * if each { 2 } else { 1 },
    };
    let mut report = CompileReport {
        module: module.name.clone(),
        num_partitions: options.num_partitions,
        ..Default::default()
    };
    run.verify(&module, "", true)?;
    module.config.num_partitions = options.num_partitions;
    if has_shardy_shape_calls(&module) {
        run.stage("shardy-import", || {
            Ok(((), import_shardy(&mut module)? > 0))
        })?;
        if each {
            run.verify(&module, "shardy-import", false)?;
        }
    }

    // jax outlines helpers (`jnp.tril`, ...) into computations that every layer `call`s; the
    // partitioner rewrites a called computation for its one call site. Shown as a stage only
    // when it cloned something.
    run.cleanup(
        &mut module,
        &mut tessera_pass::passes::FlattenCallGraph::default(),
        each,
    )?;

    if let Some(a) = &s.auto_shard {
        let r = run.stage("auto-sharding", || {
            let r = tessera_autoshard::auto_shard(&mut module, a)
                .map_err(|e| CompileError::Pass(format!("pass `auto-sharding` failed: {e}")))?;
            let changed = !r.decisions.is_empty();
            Ok((r, changed))
        })?;
        if each {
            run.verify(&module, "auto-sharding", false)?;
        }
        report.auto_shard = Some(r);
    }

    // What the frontend annotated (and the entry's parameters and root, whose shardings are
    // the program's signature) keeps its sharding when reshards are placed below.
    let mut keep: Vec<bool> = (0..module.instr_capacity())
        .map(|k| {
            module
                .try_instr(tessera_hlo::InstrId::new(k))
                .is_some_and(|i| i.sharding.is_some() || i.opcode() == Opcode::Parameter)
        })
        .collect();
    if let Some(root) = module.entry().and_then(|e| module.comp(e).root()) {
        keep[root.index()] = true;
    }
    let prop = run.stage("sharding-propagation", || {
        let (changed, r) = tessera_spmd::propagate(&mut module, &s.propagation)
            .map_err(|e| pass_error("sharding-propagation", e))?;
        // A reshard where a layout-only chain meets its user, moved back to the chain's
        // inputs where those move fewer bytes (tessera_spmd::placement).
        let n = options.num_partitions;
        let placed = tessera_spmd::place_reshards(
            &mut module,
            &|id| keep.get(id.index()).copied().unwrap_or(true),
            n,
        );
        Ok((r, changed || placed > 0))
    })?;
    if each {
        run.verify(&module, "sharding-propagation", false)?;
    }
    report.undecided = prop.undecided.iter().map(|u| u.name.clone()).collect();
    if !prop.undecided.is_empty() {
        let first: Vec<&str> = prop
            .undecided
            .iter()
            .take(5)
            .map(|u| u.name.as_str())
            .collect();
        report.warnings.push(format!(
            "sharding-propagation: {} instructions got no sharding and are replicated (first: \
             %{}; {})",
            prop.undecided.len(),
            first.join(", %"),
            prop.undecided[0].reason
        ));
    }
    let sharded = module.clone();

    let mut unpartitioned = None;
    if options.measure_unpartitioned {
        unpartitioned = Some(run.stage("memory accounting (unpartitioned)", || {
            let mut global = sharded.clone();
            tessera_remat::schedule_module(&mut global, s.schedule.scheduler, &shape_size)
                .map_err(|e| CompileError::Pass(format!("schedule (unpartitioned): {e}")))?;
            Ok((peak_of(&global)?.0, false))
        })?);
    }

    let mut argument_map = None;
    if options.dedup {
        let d = run.stage("variable-dedup", || {
            let r = tessera_dedup::deduplicate(&mut module, &s.dedup)
                .map_err(|e| CompileError::Pass(format!("pass `variable-dedup` failed: {e}")))?;
            let changed = r.changed();
            Ok((r, changed))
        })?;
        if each {
            run.verify(&module, "variable-dedup", false)?;
        }
        for (res, why) in &d.kept_apart {
            report.warnings.push(format!(
                "variable-dedup: duplicates of {res:?} kept apart: {why}"
            ));
        }
        argument_map = Some(d.argument_map.clone());
        report.dedup = Some(d);
    }

    let mut spmd = SpmdPartitioning {
        options: s.spmd.clone(),
        ..Default::default()
    };
    run.stage("spmd-partitioning", || {
        tessera_pass::Pass::run(&mut spmd, &mut module)
            .map_err(|e| pass_error("spmd-partitioning", e))?;
        Ok(((), true))
    })?;
    if each {
        run.verify(&module, "spmd-partitioning", false)?;
    }
    // A sum of partial sums (two dots contracting a split dimension, then added: what jax's
    // explicit mode keeps `unreduced`) is all-reduced once, as XLA's AllReduceReassociate
    // does after its partitioner. Shown as a stage only when it merged something.
    run.cleanup(
        &mut module,
        &mut tessera_pass::passes::AllReduceReassociate::default(),
        each,
    )?;
    declare_root_sharding(&mut module, &sharded);
    let spmd_report = std::mem::take(&mut spmd.report);
    report
        .warnings
        .extend(spmd_report.dropped_aliases.iter().cloned());
    if !spmd_report.last_resorts.is_empty() {
        report.warnings.push(format!(
            "spmd-partitioning: {} reshards gathered the whole array (first: {})",
            spmd_report.last_resorts.len(),
            spmd_report.last_resorts[0]
        ));
    }

    run.stage("schedule", || {
        let mut p =
            <SchedulePass as tessera_pass::registry::RegisteredPass>::with_options(s.schedule);
        let changed =
            tessera_pass::Pass::run(&mut p, &mut module).map_err(|e| pass_error("schedule", e))?;
        Ok(((), changed))
    })?;
    if each {
        run.verify(&module, "schedule", false)?;
    }
    let (partitioned, parameters) = peak_of(&module)?;
    let mut after_remat = partitioned;
    let mut floors = None;
    if let Some(limit) = s.remat.memory_limit {
        let summary = run.stage("rematerialization", || {
            let mut p = Rematerialization::new(s.remat.clone());
            // The pass warns when it misses the limit; the report says it once, below.
            let summary = tracing::subscriber::with_default(
                tracing::subscriber::NoSubscriber::default(),
                || p.run_with_summary(&mut module),
            )
            .map_err(|e| pass_error("rematerialization", e))?;
            let changed = summary.instructions_rematerialized > 0 || !summary.tries.is_empty();
            Ok((summary, changed))
        })?;
        if each {
            run.verify(&module, "rematerialization", false)?;
        }
        after_remat = peak_of(&module)?.0;
        if after_remat > limit {
            report.warnings.push(format!(
                "rematerialization: the per-device peak is {after_remat} bytes, above \
                 --memory-limit {limit}{}: {}",
                summary
                    .over_limit
                    .first()
                    .map(|o| format!(" (at %{} in {})", o.instruction, o.computation))
                    .unwrap_or_default(),
                summary.verdict().unwrap_or_default()
            ));
        }
        report.floor = summary.floor_described.clone();
        floors = summary
            .floor_lowest
            .or(summary.floor)
            .zip(summary.floor_any_schedule);
        report.remat_tries = summary.tries.clone();
        report.remat = Some(summary);
    }
    if !each {
        let last = if report.remat.is_some() {
            "rematerialization"
        } else {
            "schedule"
        };
        run.verify(&module, last, false)?;
    }

    report.peak = PeakMemory {
        unpartitioned,
        partitioned,
        after_remat,
        parameters,
        limit: options
            .memory_limit
            .or(report.remat.as_ref().and_then(|r| r.memory_limit)),
        floor: floors.map(|f| f.0),
        floor_any_schedule: floors.map(|f| f.1),
    };
    report.collectives = collective_traffic(&module, options.num_partitions);
    report.spmd = spmd_report;
    report.stages = run.stages;
    report.total = start.elapsed();
    Ok(Compiled {
        module,
        sharded,
        argument_map,
        report,
    })
}

fn pass_error(pass: &str, e: PassError) -> CompileError {
    match e {
        e @ PassError::InPass { .. } => CompileError::Pass(e.to_string()),
        e => CompileError::Pass(format!("pass `{pass}` failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_or_proto() {
        assert!(looks_like_text(b"HloModule m\n"));
        assert!(looks_like_text(b"// a comment\n\n  HloModule m"));
        assert!(!looks_like_text(&[0x0a, 0x03, b'a', b'b', b'c']));
        let e = parse_input(
            b"HloModule m\nENTRY e {\n  ROOT x = f32[] bogus()\n}\n",
            "f.hlo",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("f.hlo:3:"), "{e}");
        let e = parse_input(&[0xff, 0x01, 0x02], "f.pb")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.pb: neither HLO text"), "{e}");
    }
}
