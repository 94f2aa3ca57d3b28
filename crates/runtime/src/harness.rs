//! The equivalence harness: does a partitioned module compute what the original computes?
//!
//! The original module runs on one device with its shardings ignored; the partitioned
//! (per-device) module runs on `N` devices. Both get the same global inputs: the original takes
//! them whole, the partitioned module takes the pieces [`crate::sharded::split`] cuts by the
//! original's entry parameter shardings (a parameter without one is replicated). The per-device
//! outputs are put back together by the original's root sharding
//! ([`crate::sharded::assemble`], which also reports replicas that disagree) and compared with
//! the original's outputs, element by element, with a tolerance by element type.
//!
//! Both modules are converted to `xla.HloModuleProto` on a prepared clone:
//! * original: every sharding removed, the entry's parameter and root layouts cleared (so the
//!   plugin returns row-major data), compiled for 1 replica and 1 partition;
//! * partitioned: every sharding removed, then MANUAL on each entry parameter and on the root (a
//!   tuple of MANUALs for a tuple root), layouts cleared as above, compiled with
//!   `num_partitions = N` and SPMD partitioning on, so XLA runs it as is (see ORACLE.md).
//!
//! Limits: entry parameters must be arrays (no tuple parameters); a tuple root may not nest.

use std::fmt;

use tessera_hlo::attrs::ReplicaGroups;
use tessera_hlo::{
    BuildError, Builder, ElementType as HloElementType, InstrId, Layout, Module, Opcode, Shape,
    Sharding, ShardingKind,
};

use crate::element::{Bf16 as Bf16Bits, F16 as F16Bits};
use crate::error::{Error, Result};
use crate::host::{decode, hlo_type, runtime_type, shape_string, HostArray, HostValue, Scalar};
use crate::options::CompileOptions;
use crate::pjrt::{Buffer, Client, ExecuteOptions, Program};
use crate::sharded::{self, ReplicaMismatch};
use crate::verdict::{Bound, Outcome};

mod inputs;

pub use inputs::{feed_through_map, random_array, random_inputs, share_resource_inputs, Rng};

/// `|actual - expected| <= abs + rel * |expected|` (numpy's `allclose` rule).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rel: f64,
    pub abs: f64,
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance { rel: 0.0, abs: 0.0 };

    /// The default for an element type: exact for integers and pred; for floats a few units of
    /// the type's precision, since a partitioned program may sum in another order.
    pub fn for_type(ty: HloElementType) -> Tolerance {
        use HloElementType::*;
        let t = |rel, abs| Tolerance { rel, abs };
        match ty {
            F64 | C128 => t(1e-9, 1e-12),
            F32 | C64 => t(1e-5, 1e-6),
            F16 => t(5e-3, 1e-3),
            BF16 => t(2e-2, 1e-2),
            F8E4M3 | F8E4M3FN | F8E4M3FNUZ | F8E4M3B11FNUZ | F8E3M4 => t(0.25, 1e-2),
            F8E5M2 | F8E5M2FNUZ => t(0.5, 1e-2),
            F4E2M1FN | F8E8M0FNU => t(1.0, 0.5),
            _ => Tolerance::EXACT,
        }
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Tolerance::EXACT {
            f.write_str("exact")
        } else {
            write!(f, "rel {:e} + abs {:e}", self.rel, self.abs)
        }
    }
}

/// One element that differs beyond the tolerance.
#[derive(Clone, Debug, PartialEq)]
pub struct ElementMismatch {
    pub index: Vec<i64>,
    pub expected: Scalar,
    pub actual: Scalar,
}

/// How one output of the partitioned module compares with the original's.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputReport {
    /// Index among the flattened outputs (tuple leaves in pre-order).
    pub index: usize,
    /// The global shape, `f32[8,32]`.
    pub shape: String,
    pub tolerance: Tolerance,
    /// Largest `|actual - expected|` (infinite when one side is NaN or infinite and the other
    /// is not).
    pub max_abs_error: f64,
    /// Largest `|actual - expected| / |expected|` over elements with a non-zero expected value
    /// (infinite when an expected zero came out non-zero).
    pub max_rel_error: f64,
    /// Elements outside the tolerance.
    pub mismatched: u64,
    pub first_mismatch: Option<ElementMismatch>,
    /// Devices that should hold equal replicas of this output but do not.
    pub replica_mismatches: Vec<ReplicaMismatch>,
    pub replica_mismatch_count: u64,
    /// When the verdict was decided in the wide run: the bound and what it was measured from
    /// (the errors above are then the wide run's).
    pub bound: Option<Bound>,
    /// When the verdict was decided in the wide run: the comparison of the programs as given.
    pub native: Option<NativeErrors>,
    /// Why this output is not compared (it depends on a stateful random number generator).
    pub not_comparable: Option<String>,
}

/// The errors of one output in the programs as given, when the wide run decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NativeErrors {
    pub max_abs_error: f64,
    pub max_rel_error: f64,
    /// Elements outside `tolerance`, the element type's own ([`Tolerance::for_type`]).
    pub outside_type_tolerance: u64,
    pub tolerance: Tolerance,
}

impl OutputReport {
    pub fn passed(&self) -> bool {
        self.outcome() == Outcome::Equivalent
    }

    pub fn outcome(&self) -> Outcome {
        if self.mismatched > 0 || self.replica_mismatch_count > 0 {
            Outcome::NotEquivalent
        } else if self.not_comparable.is_some() {
            Outcome::NotComparable
        } else {
            Outcome::Equivalent
        }
    }
}

impl fmt::Display for OutputReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.not_comparable {
            return write!(
                f,
                "output {} {}: not comparable: {why}",
                self.index, self.shape
            );
        }
        let verdict = if self.passed() { "ok" } else { "DIFFERS" };
        match &self.bound {
            Some(b) => write!(
                f,
                "output {} {}: {verdict} in f64: max abs error {:.3e} (bound {:.3e}: own rounding \
                 {:.3e}, largest magnitude {:.3e})",
                self.index, self.shape, self.max_abs_error, b.abs, b.own, b.scale
            )?,
            None => write!(
                f,
                "output {} {}: {verdict} max abs error {:.3e}, max rel error {:.3e} ({})",
                self.index, self.shape, self.max_abs_error, self.max_rel_error, self.tolerance
            )?,
        }
        if let Some(n) = &self.native {
            write!(
                f,
                "; as given: max abs error {:.3e}, max rel error {:.3e}",
                n.max_abs_error, n.max_rel_error
            )?;
            if n.outside_type_tolerance > 0 {
                write!(
                    f,
                    ", {} elements outside {}",
                    n.outside_type_tolerance, n.tolerance
                )?;
            }
        }
        if self.mismatched > 0 {
            let what = if self.bound.is_some() {
                "the bound"
            } else {
                "the tolerance"
            };
            write!(f, "; {} elements outside {what}", self.mismatched)?;
            if let Some(m) = &self.first_mismatch {
                write!(
                    f,
                    ", first at {:?}: expected {}, got {}",
                    m.index, m.expected, m.actual
                )?;
            }
        }
        if self.replica_mismatch_count > 0 {
            write!(f, "; {} replica disagreements", self.replica_mismatch_count)?;
            for m in self.replica_mismatches.iter().take(4) {
                write!(f, "\n    {m}")?;
            }
            if self.replica_mismatch_count > 4 {
                write!(f, "\n    ...")?;
            }
        }
        Ok(())
    }
}

/// The comparison of every output, and how it was made.
#[derive(Clone, Debug, PartialEq)]
pub struct EquivalenceReport {
    pub num_devices: usize,
    pub outputs: Vec<OutputReport>,
    /// What the outputs were compared with, and why.
    pub reference: ReferenceChoice,
    /// How the candidate ran (`our per-device program on 8 devices`).
    pub candidate: String,
    /// `None` when decided in the wide (f64) run; else why the programs' own precision decides.
    pub native_because: Option<String>,
    /// Why nothing could be compared (an unrunnable custom-call), when so.
    pub not_comparable: Option<String>,
    /// Wall time of each stage (`reference`, `candidate in f64`...); not printed (the
    /// report is deterministic).
    pub timings: Vec<(String, std::time::Duration)>,
}

/// The reference [`Reference::Auto`] resolved to, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceChoice {
    pub used: Reference,
    pub why: String,
}

impl EquivalenceReport {
    pub fn passed(&self) -> bool {
        self.outcome() == Outcome::Equivalent
    }

    /// Not equivalent when any output differs; else not comparable when any output (or the
    /// whole run) could not be compared; else equivalent.
    pub fn outcome(&self) -> Outcome {
        let worst = self
            .outputs
            .iter()
            .map(OutputReport::outcome)
            .max_by_key(|o| *o as u8)
            .unwrap_or(Outcome::Equivalent);
        if worst == Outcome::Equivalent && self.not_comparable.is_some() {
            Outcome::NotComparable
        } else {
            worst
        }
    }
}

impl fmt::Display for EquivalenceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reference = match self.reference.used {
            Reference::XlaPartitioned => format!(
                "XLA's own SPMD partitioning of the original on {} devices",
                self.num_devices
            ),
            _ => "the original on 1 device".to_string(),
        };
        writeln!(f, "reference: {reference} ({})", self.reference.why)?;
        writeln!(f, "compared: {}", self.candidate)?;
        match &self.native_because {
            None => writeln!(
                f,
                "decided in f64: both programs rerun with every narrower float promoted, the same \
                 inputs; per output, the bound is {} times the reference's own rounding, scaled \
                 to f64 (docs/runtime.md)",
                crate::verdict::MARGIN
            )?,
            Some(why) => writeln!(
                f,
                "decided at the programs' own precision, element by element ({why})"
            )?,
        }
        if let Some(why) = &self.not_comparable {
            writeln!(f, "not comparable: {why}")?;
        }
        for o in &self.outputs {
            writeln!(f, "{o}")?;
        }
        write!(f, "{} on {}", self.outcome(), devices(self.num_devices))
    }
}

/// Bytes in GiB: `32.0 GiB`.
fn gib(bytes: u128) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// `1 device`, `8 devices`.
fn devices(n: usize) -> String {
    if n == 1 {
        "1 device".into()
    } else {
        format!("{n} devices")
    }
}

fn module_error(m: &Module, message: impl Into<String>) -> Error {
    Error::Module {
        module: m.name.clone(),
        message: message.into(),
    }
}

/// The number of devices `m`'s shardings are written for: the largest of `num_partitions`,
/// the tile assignments, the meshes and the maximal devices (+1); 1 when it has none.
pub fn sharding_device_count(m: &Module) -> i64 {
    fn count(s: &Sharding) -> i64 {
        match &s.kind {
            ShardingKind::Tiled(t) => t.tile_assignment.num_devices(),
            ShardingKind::Named(n) => n.num_devices(),
            ShardingKind::Maximal(d) => d.saturating_add(1),
            ShardingKind::Tuple(e) => e.iter().map(count).max().unwrap_or(1),
            _ => 1,
        }
    }
    ids_of(m)
        .into_iter()
        .filter_map(|id| m.instr(id).sharding.as_ref().map(count))
        .fold(m.config.num_partitions.max(1), i64::max)
}

/// The first transfer to or from the host in `m`, described (`%x (infeed)`): an infeed, an
/// outfeed, or a send/recv with `is_host_transfer`. The plugin blocks an execution on such a
/// transfer until the host serves it, which this harness never does; callers refuse the module.
pub fn host_transfer(m: &Module) -> Option<String> {
    ids_of(m).into_iter().find_map(|id| {
        let i = m.instr(id);
        let host = match i.opcode() {
            Opcode::Infeed | Opcode::Outfeed => true,
            Opcode::Send | Opcode::Recv => i.attrs.is_host_transfer,
            _ => false,
        };
        host.then(|| format!("%{} ({})", i.name(), i.opcode()))
    })
}

/// The first instruction of a manual region (jax's shard_map), described, when `m` has one:
/// an `SPMDFullToShardShape` / `SPMDShardToFullShape` custom-call or a manual sharding. The
/// code inside such a region is written per device (its shapes are shard shapes, its
/// collectives name devices), so the module has no meaning as one program on one device.
pub fn manual_region(m: &Module) -> Option<String> {
    fn manual(s: &Sharding) -> bool {
        match &s.kind {
            ShardingKind::Manual => true,
            ShardingKind::Named(n) => n.is_manual(),
            ShardingKind::Tuple(e) => e.iter().any(manual),
            _ => s.is_manual_subgroup(),
        }
    }
    ids_of(m).into_iter().find_map(|id| {
        let i = m.instr(id);
        let target = i.attrs.custom_call.as_ref().map(|c| c.target.as_str());
        if let Some(t @ ("SPMDFullToShardShape" | "SPMDShardToFullShape")) = target {
            Some(format!("%{} is a custom-call to {t}", i.name()))
        } else if i.sharding.as_ref().is_some_and(manual) {
            Some(format!("%{} has a manual sharding", i.name()))
        } else {
            None
        }
    })
}

/// Refuses a module that holds Shardy's own custom-calls (`xla.sdy.*`: jax's Shardy-mode
/// modules before XLA's `shardy-xla` pass): only that pass understands them, and XLA's SPMD
/// partitioner in the plugin stops on them (a RET_CHECK). The dump taken after it (before
/// `spmd-partitioning`) holds the same program in ordinary shardings.
fn refuse_shardy_custom_calls(m: &Module) -> Result<()> {
    let found = ids_of(m).into_iter().find_map(|id| {
        let i = m.instr(id);
        let c = i.attrs.custom_call.as_ref()?;
        c.target
            .starts_with("xla.sdy.")
            .then(|| format!("%{} is a custom-call to {}", i.name(), c.target))
    });
    match found {
        None => Ok(()),
        Some(what) => Err(module_error(
            m,
            format!(
                "{what}, one of Shardy's own custom-calls, which only jax's Shardy pipeline \
                 (XLA's shardy-xla pass) reads; run the module XLA dumps after that pass (the \
                 one before spmd-partitioning) instead"
            ),
        )),
    }
}

/// Refuses a transpose inside a fusion's computation: the plugin's CPU compiler stops the
/// process on one (a CHECK that the transpose's shapes have layouts, in its cost analysis of
/// fusions). Fusions come from XLA's own optimizations, so the module is a dump taken after
/// them; the dump taken before them (after `spmd-partitioning`) runs.
fn refuse_transposes_in_fusions(m: &Module) -> Result<()> {
    for id in ids_of(m) {
        let i = m.instr(id);
        if i.opcode() != Opcode::Fusion {
            continue;
        }
        for &c in &i.called {
            let found = m
                .comp(c)
                .instructions()
                .iter()
                .map(|&t| m.instr(t))
                .find(|t| t.opcode() == Opcode::Transpose);
            if let Some(t) = found {
                return Err(module_error(
                    m,
                    format!(
                        "%{} is a transpose inside fusion %{}: the PJRT CPU plugin's compiler \
                         stops the process on that (a layout CHECK); fusions come from XLA's \
                         own optimizations, so give the module XLA dumps before them (e.g. \
                         after spmd-partitioning)",
                        t.name(),
                        i.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Refuses what XLA's SPMD partitioner in the plugin stops the process on (a CHECK in its
/// visitor's `Preprocess`, not an error): an instruction of a partially manual region (its
/// sharding has a manual subgroup) that takes an operand sharded otherwise, maximal or tiled,
/// other than through `SPMDFullToShardShape`. Tessera partitions such a module; only XLA's
/// partitioning of it, the reference for a manual region, cannot be made.
fn refuse_non_manual_operands_in_partially_manual_regions(m: &Module) -> Result<()> {
    for id in ids_of(m) {
        let i = m.instr(id);
        if !i
            .sharding
            .as_ref()
            .is_some_and(Sharding::is_manual_subgroup)
        {
            continue;
        }
        let target = i.attrs.custom_call.as_ref().map(|c| c.target.as_str());
        if matches!(
            target,
            Some("SPMDFullToShardShape" | "SPMDShardToFullShape")
        ) {
            continue;
        }
        for &o in m.operands(id) {
            let op = m.instr(o);
            let Some(s) = op.sharding.as_ref() else {
                continue;
            };
            if s.is_manual_subgroup() || s.is_manual() || s.is_replicated() || s.is_tuple() {
                continue;
            }
            return Err(module_error(
                m,
                format!(
                    "%{} ({}) feeds %{} inside a partially manual region; XLA's SPMD \
                     partitioner in the PJRT plugin stops the process on that (a CHECK that \
                     every operand there is manual), so XLA's partitioning of this module, the \
                     reference for a manual region, cannot be made",
                    op.name(),
                    tessera_hlo::text::sharding_to_string(s),
                    i.name()
                ),
            ));
        }
    }
    Ok(())
}

/// The entry computation's parameter shapes, by parameter number.
pub fn entry_parameter_shapes(m: &Module) -> Result<Vec<Shape>> {
    let e = m
        .entry()
        .ok_or_else(|| module_error(m, "has no entry computation"))?;
    let c = m.comp(e);
    (0..c.num_parameters())
        .map(|i| {
            c.parameter(i)
                .map(|p| m.instr(p).shape.clone())
                .ok_or_else(|| module_error(m, format!("entry parameter {i} is missing")))
        })
        .collect()
}

/// The sharding of each entry parameter (replicated when it has none), named shardings as
/// their tiled equivalent.
pub fn entry_parameter_shardings(m: &Module) -> Result<Vec<Sharding>> {
    let e = m
        .entry()
        .ok_or_else(|| module_error(m, "has no entry computation"))?;
    let c = m.comp(e);
    c.parameters()
        .map(|p| {
            let i = m.instr(p);
            tiled(m, i.name(), &i.shape, i.sharding.as_ref())
        })
        .collect()
}

/// `s` (replicated when absent) with named shardings replaced by their tiled equivalent.
fn tiled(m: &Module, name: &str, shape: &Shape, s: Option<&Sharding>) -> Result<Sharding> {
    match s {
        None => Ok(Sharding::replicated()),
        Some(s) if s.has_named() => s
            .to_tiled_for(shape)
            .map_err(|e| module_error(m, format!("%{name}: {e}"))),
        Some(s) => Ok(s.clone()),
    }
}

/// The entry root's shape and sharding (replicated when it has none).
pub fn root_shape_and_sharding(m: &Module) -> Result<(Shape, Sharding)> {
    let e = m
        .entry()
        .ok_or_else(|| module_error(m, "has no entry computation"))?;
    let root = m
        .comp(e)
        .root()
        .ok_or_else(|| module_error(m, "the entry computation has no root"))?;
    let i = m.instr(root);
    Ok((
        i.shape.clone(),
        tiled(m, i.name(), &i.shape, i.sharding.as_ref())?,
    ))
}

fn strip(m: &Module) -> Result<Module> {
    let mut out = for_plugin(m)?;
    for id in ids_of(&out) {
        out.instr_mut(id).sharding = None;
    }
    out.config.spmd_output_sharding = None;
    out.config.spmd_parameters_shardings = None;
    out.config.use_spmd_partitioning = false;
    Ok(out)
}

/// A clone the 0.0.1 CPU plugin compiles, or a refusal of what it would stop the process on
/// ([`refuse_transposes_in_fusions`]): default layouts ([`normalize_layouts`]), explicit
/// replica groups (the plugin reads only explicit lists: an iota or mesh form written into the
/// newer proto fields reaches it as "no groups"; see [`ReplicaGroups::groups`]), single-operand
/// all-reduces ([`split_tuple_all_reduces`]) and tiled shardings ([`tiled_shardings`]). Each
/// rewrite keeps the module's meaning.
pub fn for_plugin(m: &Module) -> Result<Module> {
    refuse_transposes_in_fusions(m)?;
    let mut out = m.clone();
    explicit_collectives(&mut out)?;
    split_tuple_all_reduces(&mut out)?;
    tiled_shardings(&mut out)?;
    // Last: the all-reduces split above have shapes without layouts, which the plugin CHECKs.
    Ok(normalize_layouts(&out))
}

/// Replaces every named (mesh) sharding by its tiled equivalent. The plugin's XLA reads named
/// shardings from the proto but does not take a named `manual` for manual (its SPMD
/// partitioner stops the process on jax's Shardy-mode shard_map dumps); the tiled form is the
/// same sharding in the spelling it knows.
pub fn tiled_shardings(m: &mut Module) -> Result<()> {
    for id in ids_of(m) {
        let instr = m.instr(id);
        let Some(s) = instr.sharding.as_ref().filter(|s| s.has_named()) else {
            continue;
        };
        let tiled = s
            .to_tiled_for(&instr.shape)
            .map_err(|e| module_error(m, format!("%{}: {e}", instr.name())))?;
        m.instr_mut(id).sharding = Some(tiled);
    }
    Ok(())
}

/// Replaces every all-reduce of several operands (a tuple-shaped result) by one all-reduce per
/// operand, each with its own fresh channel id, and a tuple of them. The plugin cannot compile
/// the combined form, not even from XLA's own proto of it ("LogicalBuffer ... does not have a
/// layout"), and XLA's optimized modules are full of them (all-reduce combiner).
pub fn split_tuple_all_reduces(m: &mut Module) -> Result<()> {
    let ids = ids_of(m);
    let Some(&first) = m.computations().first() else {
        return Ok(());
    };
    // One builder for the whole module: one channel counter.
    let mut b = Builder::new(m, first);
    for id in ids {
        let i = b.module().instr(id);
        if i.opcode() != Opcode::AllReduce || i.operands().len() < 2 {
            continue;
        }
        let name = i.name().to_string();
        if !i.control_predecessors().is_empty() || !i.control_successors().is_empty() {
            return Err(module_error(
                b.module(),
                format!("{name}: a multi-operand all-reduce with control edges is not supported"),
            ));
        }
        let tuple = split_all_reduce(&mut b, id, &name)
            .map_err(|e| module_error(b.module(), e.to_string()))?;
        b.module_mut()
            .replace_instruction(id, tuple)
            .map_err(|e| module_error(b.module(), e.to_string()))?;
    }
    Ok(())
}

/// One all-reduce per operand of `id` (fresh channel ids), with the all-reduce's metadata and
/// attributes, and the tuple of them.
fn split_all_reduce(
    b: &mut Builder<'_>,
    id: InstrId,
    name: &str,
) -> std::result::Result<InstrId, BuildError> {
    let i = b.module().instr(id);
    let (attrs, called, operands) = (i.attrs.clone(), i.called.clone(), i.operands().to_vec());
    b.set_computation(i.parent());
    b.set_origin(Some(id));
    let mut parts = Vec::with_capacity(operands.len());
    for (k, &op) in operands.iter().enumerate() {
        let mut a = attrs.clone();
        if a.channel_id.is_some() {
            a.channel_id = Some(b.next_channel_id());
        }
        let part = format!("{name}.{k}");
        parts.push(b.op_named(&part, Opcode::AllReduce, &[op], a, &called, None)?);
    }
    let tuple = format!("{name}.tuple");
    b.op_named(&tuple, Opcode::Tuple, &parts, Default::default(), &[], None)
}

/// A clone whose entry parameters and root have the default layout (so the plugin takes and
/// returns row-major data) and whose every shape has a layout.
pub fn normalize_layouts(m: &Module) -> Module {
    let mut out = m.clone();
    // XLA schedules the module itself; a schedule from a dump need not match what the plugin's
    // verifier counts (it refused one listing fusion computations).
    out.schedule = None;
    out.config.entry_computation_layout = None;
    if let Some(e) = out.entry() {
        let c = out.comp(e);
        let mut ends: Vec<_> = c.parameters().collect();
        ends.extend(c.root());
        for id in ends {
            out.instr_mut(id).shape.clear_layouts();
        }
    }
    // XLA's parser gives every shape the default layout; the plugin refuses a literal without
    // one ("LiteralProto has no layout"), so fill in what the text left out.
    for id in ids_of(&out) {
        let i = out.instr_mut(id);
        default_layouts(&mut i.shape);
        if let Some(l) = i.attrs.literal.as_deref_mut() {
            literal_default_layouts(l);
        }
    }
    out
}

/// Rewrites every collective's replica groups into the explicit form.
fn explicit_collectives(m: &mut Module) -> Result<()> {
    for id in ids_of(m) {
        let i = m.instr(id);
        if let Some(g) = i.attrs.replica_groups.as_deref() {
            let groups = g
                .groups()
                .map_err(|e| module_error(m, format!("{}: replica groups: {e}", i.name())))?;
            m.instr_mut(id).attrs.replica_groups = Some(Box::new(ReplicaGroups::Explicit(groups)));
        }
    }
    Ok(())
}

fn ids_of(m: &Module) -> Vec<InstrId> {
    m.computations()
        .iter()
        .flat_map(|&c| m.comp(c).instructions().to_vec())
        .collect()
}

/// Gives every array without a layout the default (descending) one.
fn default_layouts(shape: &mut Shape) {
    match shape {
        Shape::Array(a) if a.layout.is_none() => a.layout = Some(Layout::descending(a.rank())),
        Shape::Tuple(e) => e.iter_mut().for_each(default_layouts),
        _ => {}
    }
}

fn literal_default_layouts(l: &mut tessera_hlo::Literal) {
    default_layouts(&mut l.shape);
    if let tessera_hlo::LiteralData::Tuple(e) = &mut l.data {
        e.iter_mut().for_each(literal_default_layouts);
    }
}

/// The original module as the harness runs it: no shardings, default entry layouts.
pub fn prepare_original(m: &Module) -> Result<Module> {
    let mut out = strip(m)?;
    out.config.num_partitions = 1;
    out.config.replica_count = 1;
    Ok(out)
}

/// The partitioned module as the harness runs it: MANUAL shardings on the entry parameters and
/// root (a tuple of MANUALs for a tuple root), none elsewhere, default entry layouts.
pub fn prepare_partitioned(m: &Module, num_devices: usize) -> Result<Module> {
    let mut out = strip(m)?;
    let e = out
        .entry()
        .ok_or_else(|| module_error(m, "has no entry computation"))?;
    let c = out.comp(e);
    let params: Vec<_> = c.parameters().collect();
    let root = c
        .root()
        .ok_or_else(|| module_error(m, "the entry computation has no root"))?;
    for p in params {
        out.instr_mut(p).sharding = Some(Sharding::manual());
    }
    let root_shape = out.instr(root).shape.clone();
    out.instr_mut(root).sharding = Some(if root_shape.is_tuple() {
        Sharding::tuple(vec![Sharding::manual(); root_shape.leaf_count()])
    } else {
        Sharding::manual()
    });
    out.config.num_partitions = num_devices as i64;
    out.config.replica_count = 1;
    out.config.use_spmd_partitioning = true;
    Ok(out)
}

/// Compile options for an already partitioned module on `n` devices: `num_partitions = n`,
/// SPMD on (the plugin refuses anything else), and XLA's sharding propagation and SPMD
/// partitioner switched off (`xla_disable_hlo_passes`) so that nothing re-partitions the
/// per-device program; its MANUAL shardings say the same thing to any pass that looks.
pub fn per_device_options(n: usize) -> CompileOptions {
    per_device_options_for(n, Fusion::On)
}

fn per_device_options_for(n: usize, fusion: Fusion) -> CompileOptions {
    fusion.disabling(
        CompileOptions::partitioned(n),
        &["sharding-propagation", "spmd-partitioning"],
    )
}

/// Whether XLA's CPU `fusion` pass runs when the harness compiles a program.
///
/// Off for a verification ([`verify`]): it runs programs to know their values, not to run them
/// fast, and on a deep model fusion is nearly all of XLA's compile time and memory (jax's
/// 48-layer transformer step: 190 s and 8.2 GB with it, 7 s and 0.5 GB without,
/// docs/BENCHMARKS.md). Fusion changes only rounding (the fused code may contract or reorder
/// floating-point operations), which the verdict's bound is measured on. On for the public
/// `run_*` functions, whose outputs equal, bit for bit, what the runtime's own executables give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fusion {
    On,
    Off,
}

impl Fusion {
    /// `base` with XLA's passes `disabled`, and `fusion` too when off.
    fn disabling(self, base: CompileOptions, disabled: &[&str]) -> CompileOptions {
        let mut passes = disabled.to_vec();
        if self == Fusion::Off {
            passes.push("fusion");
        }
        if passes.is_empty() {
            base
        } else {
            base.with_debug_override("xla_disable_hlo_passes", &passes.join(","))
        }
    }
}

/// Compiles `m` as is (no preparation) with `options` and runs it with one argument list per
/// device; returns the flattened outputs of every device.
pub fn run_module(
    client: &Client,
    m: &Module,
    options: &CompileOptions,
    args: &[Vec<HostArray>],
) -> Result<Vec<Vec<HostArray>>> {
    let program = Program::HloProto(tessera_hlo::proto::to_proto_bytes(m));
    let exe = client.compile(&program, options)?;
    let devices = exe.devices().to_vec();
    if devices.len() != args.len() {
        return Err(module_error(
            m,
            format!(
                "runs on {} devices, got {} argument lists",
                devices.len(),
                args.len()
            ),
        ));
    }
    let mut buffers: Vec<Vec<Buffer>> = Vec::with_capacity(args.len());
    for (list, dev) in args.iter().zip(&devices) {
        let mut bufs = Vec::with_capacity(list.len());
        for (i, a) in list.iter().enumerate() {
            let ty = runtime_type(a.ty).ok_or_else(|| {
                Error::UnsupportedType(format!(
                    "argument {i} is {}: the PJRT bindings carry no {} buffers",
                    a.shape_string(),
                    a.ty
                ))
            })?;
            bufs.push(client.buffer_from_host_bytes(ty, &a.data, &a.dims, dev)?);
        }
        buffers.push(bufs);
    }
    let refs: Vec<Vec<&Buffer>> = buffers.iter().map(|l| l.iter().collect()).collect();
    let outs = exe.execute(&refs, &ExecuteOptions::default())?;
    outs.into_iter()
        .map(|list| {
            list.into_iter()
                .map(|b| {
                    let ty = hlo_type(b.element_type()?);
                    let dims = b.dims()?;
                    HostArray::new(ty, dims, b.to_host_bytes()?)
                })
                .collect()
        })
        .collect()
}

fn leaf_shapes(shape: &Shape) -> Result<Vec<Shape>> {
    match shape {
        Shape::Tuple(e) => {
            if e.iter().any(Shape::is_tuple) {
                return Err(Error::InvalidArgument(
                    "a nested tuple root is not supported by the harness".into(),
                ));
            }
            Ok(e.clone())
        }
        s => Ok(vec![s.clone()]),
    }
}

/// Runs the original module on one device with `inputs` (one global value per entry
/// parameter) and returns its flattened outputs.
pub fn run_original(
    client: &Client,
    original: &Module,
    inputs: &[HostValue],
) -> Result<Vec<HostArray>> {
    run_original_with(client, original, inputs, Fusion::On)
}

fn run_original_with(
    client: &Client,
    original: &Module,
    inputs: &[HostValue],
    fusion: Fusion,
) -> Result<Vec<HostArray>> {
    refuse_shardy_custom_calls(original)?;
    if let Some(what) = manual_region(original) {
        let n = sharding_device_count(original);
        return Err(module_error(
            original,
            format!(
                "{what}: a manual region (shard_map) is written per device and has no meaning \
                 as one program on one device; run it on its {n} devices, where XLA's SPMD \
                 partitioner gives it its meaning (`tessera run --devices {n}`; in `tessera \
                 compare`, `--reference xla-spmd`)"
            ),
        ));
    }
    let prepared = prepare_original(original)?;
    let inputs = feed_through_map(original, inputs)?;
    let args = inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_array().cloned().ok_or_else(|| {
                module_error(
                    original,
                    format!("entry parameter {i} is a tuple: not supported"),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let options = fusion.disabling(CompileOptions::default(), &[]);
    let mut outs = run_module(client, &prepared, &options, &[args])?;
    Ok(outs.pop().unwrap_or_default())
}

/// Splits `inputs` by the parameter shardings, runs the partitioned module on `num_devices`
/// devices, and assembles its outputs by the root sharding: the partitioned module's own where
/// it carries them (the shardings it was partitioned to), else the original's.
pub fn run_partitioned(
    client: &Client,
    original: &Module,
    partitioned: &Module,
    num_devices: usize,
    inputs: &[HostValue],
) -> Result<Vec<sharded::Assembled>> {
    run_partitioned_with(
        client,
        original,
        partitioned,
        num_devices,
        inputs,
        Fusion::On,
    )
}

fn run_partitioned_with(
    client: &Client,
    original: &Module,
    partitioned: &Module,
    num_devices: usize,
    inputs: &[HostValue],
    fusion: Fusion,
) -> Result<Vec<sharded::Assembled>> {
    // A deduplicated partitioned module takes the original's arguments through its map.
    let (shapes, mut shardings) = merged_parameters(original, partitioned)?;
    let part_shapes = entry_parameter_shapes(partitioned)?;
    // A partitioned module keeps, on its parameters, the shardings they were partitioned to
    // (ours and XLA's both print them). Where the original gave a parameter none, propagation
    // chose one, and the pieces follow the partitioned module's.
    for (k, s, name) in declared_where_original_has_none(original, partitioned, Slot::Parameters) {
        if let Some(shape) = shapes.get(k) {
            shardings[k] = tiled(partitioned, &name, shape, Some(&s))?;
        }
    }
    if part_shapes.len() != shapes.len() {
        return Err(module_error(
            partitioned,
            format!(
                "takes {} parameters, the original takes {}",
                part_shapes.len(),
                shapes.len()
            ),
        ));
    }
    for (i, (shape, s)) in shapes.iter().zip(&shardings).enumerate() {
        let want = sharded::shard_shape(shape, s, num_devices)?;
        if !want.compatible(&part_shapes[i]) {
            return Err(module_error(
                partitioned,
                format!(
                    "entry parameter {i} is {}, but sharding the original's {} gives {} per device",
                    shape_string(&part_shapes[i]),
                    shape_string(shape),
                    shape_string(&want)
                ),
            ));
        }
    }
    let values = feed_through_map(partitioned, inputs)?;
    let args = split_values(partitioned, &shapes, &shardings, num_devices, &values)?;
    let prepared = prepare_partitioned(partitioned, num_devices)?;
    let options = per_device_options_for(num_devices, fusion);
    let outs = run_module(client, &prepared, &options, &args)?;
    assemble_outputs(original, partitioned, &outs)
}

/// Runs a module that carries shardings on `num_devices` devices and lets XLA's own SPMD
/// partitioner partition it: global `inputs` are split by the entry parameter shardings, the
/// outputs assembled by the root sharding (missing shardings mean replicated).
pub fn run_xla_partitioned(
    client: &Client,
    m: &Module,
    num_devices: usize,
    inputs: &[HostValue],
) -> Result<Vec<sharded::Assembled>> {
    run_xla_partitioned_with(client, m, num_devices, inputs, Fusion::On)
}

fn run_xla_partitioned_with(
    client: &Client,
    m: &Module,
    num_devices: usize,
    inputs: &[HostValue],
    fusion: Fusion,
) -> Result<Vec<sharded::Assembled>> {
    refuse_shardy_custom_calls(m)?;
    refuse_non_manual_operands_in_partially_manual_regions(m)?;
    let inputs = feed_through_map(m, inputs)?;
    let args = split_inputs(m, num_devices, &inputs)?;
    let mut prepared = for_plugin(m)?;
    prepared.config.num_partitions = num_devices as i64;
    prepared.config.use_spmd_partitioning = true;
    let outs = run_module(
        client,
        &prepared,
        &fusion.disabling(CompileOptions::partitioned(num_devices), &[]),
        &args,
    )?;
    assemble_outputs(m, m, &outs)
}

/// Cuts global inputs into per-device argument lists by `m`'s entry parameter shardings.
pub fn split_inputs(
    m: &Module,
    num_devices: usize,
    inputs: &[HostValue],
) -> Result<Vec<Vec<HostArray>>> {
    let shapes = entry_parameter_shapes(m)?;
    let shardings = entry_parameter_shardings(m)?;
    split_values(m, &shapes, &shardings, num_devices, inputs)
}

/// The original's parameter shapes and shardings for the parameters of `partitioned`: as they
/// are, or, when `partitioned` is deduplicated (has an argument map), per merged parameter the
/// shape of its first argument and the first explicit sharding among its arguments (the one
/// the dedup pass gave the merged parameter).
pub fn merged_parameters(
    original: &Module,
    partitioned: &Module,
) -> Result<(Vec<Shape>, Vec<Sharding>)> {
    let shapes = entry_parameter_shapes(original)?;
    let shardings = entry_parameter_shardings(original)?;
    let map = tessera_hlo::resource::argument_map(partitioned)
        .map_err(|e| module_error(partitioned, e.to_string()))?;
    let Some(map) = map else {
        return Ok((shapes, shardings));
    };
    if map.len() != shapes.len() {
        return Err(module_error(
            partitioned,
            format!(
                "its argument map takes {} arguments, the original has {} parameters",
                map.len(),
                shapes.len()
            ),
        ));
    }
    let e = original
        .entry()
        .ok_or_else(|| module_error(original, "has no entry computation"))?;
    let explicit = |k: usize| {
        original
            .comp(e)
            .parameter(k)
            .is_some_and(|p| original.instr(p).sharding.is_some())
    };
    let n = map.iter().max().map_or(0, |&p| p + 1);
    let mut first: Vec<Option<usize>> = vec![None; n];
    let mut sharded: Vec<Option<usize>> = vec![None; n];
    for (k, &p) in map.iter().enumerate() {
        first[p].get_or_insert(k);
        if explicit(k) {
            sharded[p].get_or_insert(k);
        }
    }
    let pick = |p: usize| first[p].expect("the map covers every parameter");
    Ok((
        (0..n).map(|p| shapes[pick(p)].clone()).collect(),
        (0..n)
            .map(|p| shardings[sharded[p].unwrap_or_else(|| pick(p))].clone())
            .collect(),
    ))
}

/// Which entry instructions [`declared_where_original_has_none`] looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Parameters,
    Root,
}

/// The shardings `ran` declares on its entry parameters (with their numbers) or root where the
/// same instruction of `original` has none: the ones propagation chose. Empty for a module
/// with an argument map (its parameters are not the original's). Where the original has a
/// sharding it stays the reference: a partitioned module may restate it in a form relative to
/// its own shapes (partially manual parameters do).
fn declared_where_original_has_none(
    original: &Module,
    ran: &Module,
    slot: Slot,
) -> Vec<(usize, Sharding, String)> {
    let (Some(oe), Some(re)) = (original.entry(), ran.entry()) else {
        return Vec::new();
    };
    let (oc, rc) = (original.comp(oe), ran.comp(re));
    let pairs: Vec<(usize, InstrId, InstrId)> = match slot {
        Slot::Root => oc
            .root()
            .zip(rc.root())
            .map(|(o, r)| (0, o, r))
            .into_iter()
            .collect(),
        Slot::Parameters => {
            if tessera_hlo::resource::argument_map(ran)
                .ok()
                .flatten()
                .is_some()
            {
                return Vec::new();
            }
            oc.parameters()
                .zip(rc.parameters())
                .enumerate()
                .map(|(k, (o, r))| (k, o, r))
                .collect()
        }
    };
    pairs
        .into_iter()
        .filter(|&(_, o, _)| original.instr(o).sharding.is_none())
        .filter_map(|(k, _, r)| {
            let i = ran.instr(r);
            i.sharding.clone().map(|s| (k, s, i.name().to_string()))
        })
        .collect()
}

fn split_values(
    m: &Module,
    shapes: &[Shape],
    shardings: &[Sharding],
    num_devices: usize,
    inputs: &[HostValue],
) -> Result<Vec<Vec<HostArray>>> {
    if inputs.len() != shapes.len() {
        return Err(module_error(
            m,
            format!(
                "takes {} parameters, got {} inputs",
                shapes.len(),
                inputs.len()
            ),
        ));
    }
    let mut args: Vec<Vec<HostArray>> = vec![Vec::new(); num_devices];
    for (i, ((v, shape), s)) in inputs.iter().zip(shapes).zip(shardings).enumerate() {
        for (d, piece) in sharded::split(v, shape, s, num_devices)?
            .into_iter()
            .enumerate()
        {
            match piece {
                HostValue::Array(a) => args[d].push(a),
                HostValue::Tuple(_) => {
                    return Err(module_error(
                        m,
                        format!("entry parameter {i} is a tuple: not supported"),
                    ))
                }
            }
        }
    }
    Ok(args)
}

/// Assembles per-device flattened outputs of `ran` by its root sharding, or by the original's
/// when `ran` carries none.
fn assemble_outputs(
    original: &Module,
    ran: &Module,
    outs: &[Vec<HostArray>],
) -> Result<Vec<sharded::Assembled>> {
    let (root_shape, mut root_sharding) = root_shape_and_sharding(original)?;
    // As for parameters: the sharding the ran module's root was partitioned to, where the
    // original's root has none.
    if let Some((_, s, name)) = declared_where_original_has_none(original, ran, Slot::Root).pop() {
        root_sharding = tiled(ran, &name, &root_shape, Some(&s))?;
    }
    let leaves = leaf_shapes(&root_shape)?;
    let leaf_shardings = sharded::leaf_shardings(&root_shape, &root_sharding)?;
    let mut result = Vec::with_capacity(leaves.len());
    for (k, (shape, s)) in leaves.iter().zip(&leaf_shardings).enumerate() {
        let pieces: Vec<HostValue> = outs
            .iter()
            .map(|list| {
                if list.len() != leaves.len() {
                    return Err(module_error(
                        ran,
                        format!(
                            "has {} outputs, the original has {}",
                            list.len(),
                            leaves.len()
                        ),
                    ));
                }
                Ok(HostValue::Array(list[k].clone()))
            })
            .collect::<Result<_>>()?;
        let mut a = sharded::assemble(&pieces, shape, s)?;
        // Report leaf indices in terms of the original's flattened outputs.
        if root_shape.is_tuple() {
            for m in &mut a.mismatches {
                m.leaf = vec![k];
            }
        }
        result.push(a);
    }
    Ok(result)
}

/// Compares one output with the original's.
pub fn compare_arrays(
    index: usize,
    expected: &HostArray,
    actual: &HostArray,
    tolerance: Tolerance,
) -> Result<OutputReport> {
    if expected.ty != actual.ty || expected.dims != actual.dims {
        return Err(Error::ShapeMismatch(format!(
            "output {index}: the original gives {}, the partitioned module {}",
            expected.shape_string(),
            actual.shape_string()
        )));
    }
    let mut r = OutputReport {
        index,
        shape: expected.shape_string(),
        tolerance,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        mismatched: 0,
        first_mismatch: None,
        replica_mismatches: Vec::new(),
        replica_mismatch_count: 0,
        bound: None,
        native: None,
        not_comparable: None,
    };
    let w = expected.ty.byte_size();
    for k in 0..expected.element_count() {
        let (eb, ab) = (
            &expected.data[k * w..(k + 1) * w],
            &actual.data[k * w..(k + 1) * w],
        );
        if eb == ab {
            continue;
        }
        let (e, a) = (decode(expected.ty, eb), decode(actual.ty, ab));
        let parts: Vec<(f64, f64)> = match (e, a) {
            (Scalar::Complex(er, ei), Scalar::Complex(ar, ai)) => vec![(er, ar), (ei, ai)],
            (e, a) => vec![(e.as_f64(), a.as_f64())],
        };
        let mut ok = true;
        for (x, y) in parts {
            let (abs, rel) = element_error(x, y);
            r.max_abs_error = r.max_abs_error.max(abs);
            r.max_rel_error = r.max_rel_error.max(rel);
            ok &= abs <= tolerance.abs + tolerance.rel * x.abs();
        }
        if let (Scalar::Int(x), Scalar::Int(y)) = (e, a) {
            ok = x == y;
        }
        if !ok {
            r.mismatched += 1;
            if r.first_mismatch.is_none() {
                r.first_mismatch = Some(ElementMismatch {
                    index: crate::host::unravel(k, &expected.dims),
                    expected: e,
                    actual: a,
                });
            }
        }
    }
    Ok(r)
}

/// Absolute and relative error of `actual` against `expected`; equal NaNs and equal infinities
/// are no error.
fn element_error(expected: f64, actual: f64) -> (f64, f64) {
    if expected == actual || (expected.is_nan() && actual.is_nan()) {
        return (0.0, 0.0);
    }
    let abs = (actual - expected).abs();
    let abs = if abs.is_nan() { f64::INFINITY } else { abs };
    let rel = if expected == 0.0 {
        f64::INFINITY
    } else {
        abs / expected.abs()
    };
    (abs, rel)
}

/// What to compare with, and how.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompareOptions {
    /// Decide at the programs' own precision, element by element, with this tolerance for
    /// every floating-point output (no wide run).
    pub float_tolerance: Option<Tolerance>,
    /// What the candidate's outputs are compared with.
    pub reference: Reference,
    pub precision: Precision,
    /// How the candidate runs.
    pub candidate: CandidateMode,
}

/// The reference outputs of [`check_equivalence`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reference {
    /// [`Reference::SingleDevice`] where the original has a single-device meaning, else
    /// [`Reference::XlaPartitioned`] ([`auto_reference`]).
    #[default]
    Auto,
    /// The original run as one global program on one device, its shardings ignored (they
    /// only annotate it).
    SingleDevice,
    /// The original partitioned by XLA's own SPMD partitioner (in the plugin) on the same
    /// devices, its outputs assembled by its root sharding: the reference for an original
    /// with manual regions or explicit cross-partition collectives, which has no single-device
    /// meaning.
    XlaPartitioned,
}

/// Where the verdict is decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// In a second run of both programs with every float narrower than `f64` promoted to
    /// `f64`, against a bound measured from the reference's own rounding
    /// ([`crate::verdict`]); the errors as given are reported beside. Falls back to
    /// [`Precision::Native`], saying why, where a program has no wide counterpart.
    #[default]
    Wide,
    /// At the programs' own precision, each element within its type's tolerance.
    Native,
}

/// How the candidate of [`check_equivalence`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CandidateMode {
    /// As a per-device program, unless it still carries the global shapes and shardings of a
    /// module before partitioning ([`carries_global_shardings`]); then as
    /// [`CandidateMode::XlaPartitioned`].
    #[default]
    Auto,
    /// As the per-device program on every device.
    PerDevice,
    /// As a global module with shardings: partitioned by the plugin's SPMD partitioner for the
    /// device count, or on 1 device run as one global program.
    XlaPartitioned,
}

/// The program compared with the reference.
#[derive(Clone, Copy, Debug)]
pub enum Candidate<'a> {
    /// A per-device program; `layout` is the global module whose shardings split the inputs
    /// and assemble the outputs (the original, or the compiler's module with every sharding
    /// decided).
    PerDevice {
        layout: &'a Module,
        program: &'a Module,
    },
    /// A global module with shardings ([`CandidateMode::XlaPartitioned`]).
    Sharded(&'a Module),
}

/// Runs the reference and `partitioned` with the same global `inputs` and compares every
/// output ([`verify`]); `partitioned` runs as `options.candidate` says.
pub fn check_equivalence(
    client: &Client,
    original: &Module,
    partitioned: &Module,
    num_devices: usize,
    inputs: &[HostValue],
    options: CompareOptions,
) -> Result<EquivalenceReport> {
    let sharded = match options.candidate {
        CandidateMode::PerDevice => false,
        CandidateMode::XlaPartitioned => true,
        CandidateMode::Auto => carries_global_shardings(original, partitioned, num_devices)?,
    };
    let candidate = if sharded {
        Candidate::Sharded(partitioned)
    } else {
        Candidate::PerDevice {
            layout: original,
            program: partitioned,
        }
    };
    verify(client, original, candidate, num_devices, inputs, options)
}

/// [`check_equivalence`] for a candidate that still carries shardings (a deduplicated or
/// otherwise rewritten original), whatever its shapes say.
pub fn check_equivalence_xla(
    client: &Client,
    original: &Module,
    candidate: &Module,
    num_devices: usize,
    inputs: &[HostValue],
    options: CompareOptions,
) -> Result<EquivalenceReport> {
    let options = CompareOptions {
        candidate: CandidateMode::XlaPartitioned,
        ..options
    };
    check_equivalence(client, original, candidate, num_devices, inputs, options)
}

/// Whether `candidate` is a global module with shardings rather than a per-device program:
/// on more than one device, its entry parameters (or root) have the original's global shapes
/// where the original's shardings cut them, or, nothing at its ends being cut, an instruction
/// inside it carries a sharding that cuts. On one device a candidate with such a sharding
/// anywhere is global.
pub fn carries_global_shardings(
    original: &Module,
    candidate: &Module,
    num_devices: usize,
) -> Result<bool> {
    // Whether `s` cuts `shape` into smaller pieces on `n` devices (manual shardings do not:
    // their shapes are per device already).
    let cuts = |shape: &Shape, s: &Sharding, n: usize| {
        let mut whole = shape.clone();
        whole.clear_layouts();
        !s.is_manual() && sharded::shard_shape(shape, s, n).is_ok_and(|p| p != whole)
    };
    // A sharding that cuts, on an instruction other than the entry's parameters and root
    // (where a per-device program restates the shardings it was partitioned to).
    let tiles = |with_ends: bool| {
        let n = sharding_device_count(candidate).max(num_devices as i64) as usize;
        let ends: Vec<InstrId> = candidate
            .entry()
            .filter(|_| !with_ends)
            .map(|e| {
                let c = candidate.comp(e);
                c.parameters().chain(c.root()).collect()
            })
            .unwrap_or_default();
        ids_of(candidate).into_iter().any(|id| {
            let i = candidate.instr(id);
            !ends.contains(&id) && i.sharding.as_ref().is_some_and(|s| cuts(&i.shape, s, n))
        })
    };
    if num_devices <= 1 {
        return Ok(tiles(true));
    }
    let plain = |s: &Shape| {
        let mut s = s.clone();
        s.clear_layouts();
        s
    };
    // Where the original's shardings cut an input or the output, the candidate's shapes
    // there tell: global shapes, a global module.
    let (shapes, shardings) = merged_parameters(original, candidate)?;
    if shapes
        .iter()
        .zip(&shardings)
        .any(|(sh, s)| cuts(sh, s, num_devices))
    {
        let own = entry_parameter_shapes(candidate)?;
        return Ok(own.iter().map(plain).eq(shapes.iter().map(plain)));
    }
    let (root, root_sharding) = root_shape_and_sharding(original)?;
    if cuts(&root, &root_sharding, num_devices) {
        let (own, _) = root_shape_and_sharding(candidate)?;
        return Ok(plain(&own) == plain(&root));
    }
    // Nothing at its ends is cut: a sharding inside that cuts says it is not partitioned yet.
    Ok(tiles(false))
}

/// The reference for `original` on `num_devices` devices: its own run on one device where it
/// has a single-device meaning; XLA's partitioning of it where it holds a manual region or a
/// collective or partition id (code written per device), with that instruction as the reason.
pub fn auto_reference(original: &Module, num_devices: usize) -> ReferenceChoice {
    if num_devices > 1 {
        if let Some(what) = manual_region(original) {
            return ReferenceChoice {
                used: Reference::XlaPartitioned,
                why: format!("{what}: a manual region has no single-device meaning"),
            };
        }
        if let Some(what) = per_device_instruction(original) {
            return ReferenceChoice {
                used: Reference::XlaPartitioned,
                why: format!("{what}: its meaning depends on the devices it runs on"),
            };
        }
    }
    ReferenceChoice {
        used: Reference::SingleDevice,
        why: "the original has a single-device meaning".into(),
    }
}

/// The first collective, partition id or replica id of `m`, described.
fn per_device_instruction(m: &Module) -> Option<String> {
    ids_of(m).into_iter().find_map(|id| {
        let i = m.instr(id);
        let op = i.opcode();
        (op.is_collective() || matches!(op, Opcode::PartitionId | Opcode::ReplicaId))
            .then(|| format!("%{} is a {op}", i.name()))
    })
}

/// Checks that one run or comparison of `original` on `num_devices` devices fits in host
/// memory (`wide`: a comparison, which also runs both programs in f64):
/// the global inputs and outputs, a piece of each per device, the reference's outputs kept
/// for the bound, three times over for the wide run. Refuses with both numbers when it does
/// not.
pub fn check_host_memory(original: &Module, num_devices: usize, wide: bool) -> Result<()> {
    let bytes = |s: &Shape| -> u128 {
        fn walk(s: &Shape) -> u128 {
            match s {
                Shape::Array(a) => a.dims.iter().fold(a.ty.byte_size() as u128, |acc, &d| {
                    acc.saturating_mul(d.max(0) as u128)
                }),
                Shape::Tuple(e) => e.iter().map(walk).fold(0u128, u128::saturating_add),
                _ => 0,
            }
        }
        walk(s)
    };
    let inputs: u128 = entry_parameter_shapes(original)?
        .iter()
        .map(bytes)
        .fold(0, u128::saturating_add);
    let outputs = root_shape_and_sharding(original)
        .map(|(s, _)| bytes(&s))
        .unwrap_or(0);
    let copies = num_devices as u128 + 3;
    let need = inputs
        .saturating_add(outputs)
        .saturating_mul(copies)
        .saturating_mul(if wide { 3 } else { 1 });
    if let Some(have) = crate::verdict::available_memory() {
        if need > u128::from(have) {
            return Err(module_error(
                original,
                format!(
                    "running it on {} needs about {} of host memory ({} of inputs and {} of \
                     outputs, held globally and per device{}), and {} are available",
                    devices(num_devices),
                    gib(need),
                    gib(inputs),
                    gib(outputs),
                    if wide { ", again in f64" } else { "" },
                    gib(u128::from(have))
                ),
            ));
        }
    }
    Ok(())
}

/// The comparison: the reference ([`CompareOptions::reference`], resolved by
/// [`auto_reference`]) and `candidate` run with the same global `inputs` at the programs' own
/// precision and, unless told otherwise, again wide ([`crate::verdict`]), and every output is
/// judged. Outputs that depend on a stateful random number generator are not compared; a
/// program the plugin cannot run on the host (an unregistered custom-call) makes the whole
/// comparison not comparable instead of an error.
pub fn verify(
    client: &Client,
    original: &Module,
    candidate: Candidate<'_>,
    num_devices: usize,
    inputs: &[HostValue],
    options: CompareOptions,
) -> Result<EquivalenceReport> {
    enough_devices(client, num_devices)?;
    let reference = match options.reference {
        Reference::Auto => auto_reference(original, num_devices),
        used => ReferenceChoice {
            used,
            why: "as asked".into(),
        },
    };
    let candidate_text = match candidate {
        Candidate::PerDevice { .. } => {
            format!("the per-device program on {}", devices(num_devices))
        }
        Candidate::Sharded(_) if num_devices == 1 => {
            "the candidate as one global program on 1 device, its shardings ignored".to_string()
        }
        Candidate::Sharded(_) => format!(
            "the candidate partitioned by XLA's SPMD partitioner on {num_devices} devices (it \
             carries global shapes and shardings)"
        ),
    };
    let modules: Vec<&Module> = match candidate {
        Candidate::PerDevice { layout, program } => vec![original, layout, program],
        Candidate::Sharded(m) => vec![original, m],
    };
    let narrow = modules.iter().any(|m| has_narrow_float(m));
    let native_because = if options.float_tolerance.is_some() {
        Some("a tolerance was given".to_string())
    } else if options.precision == Precision::Native {
        Some("as asked".to_string())
    } else if !narrow {
        Some("no float narrower than f64 to promote".to_string())
    } else {
        modules
            .iter()
            .find_map(|m| crate::verdict::not_widenable(m))
            .map(|why| format!("no wide run: {why}"))
    };
    check_host_memory(original, num_devices, native_because.is_none())?;
    let mut report = EquivalenceReport {
        num_devices,
        outputs: Vec::new(),
        reference,
        candidate: candidate_text,
        native_because,
        not_comparable: None,
        timings: Vec::new(),
    };
    let random = crate::verdict::stateful_random_outputs(original);
    let used = report.reference.used;
    let run = |original: &Module, candidate: Candidate<'_>, inputs: &[HostValue], what: &str| {
        let t = std::time::Instant::now();
        let expected = reference_outputs(client, original, num_devices, inputs, used)?;
        let t_ref = (format!("reference{what}"), t.elapsed());
        let t = std::time::Instant::now();
        let actual = run_candidate(client, original, candidate, num_devices, inputs)?;
        let t_cand = (format!("candidate{what}"), t.elapsed());
        Ok::<_, Error>((expected, actual, [t_ref, t_cand]))
    };
    let unrunnable = |e: &Error| {
        modules
            .iter()
            .find_map(|m| crate::verdict::unrunnable_custom_call(m, &e.to_string()))
    };
    let (expected, actual, times) = match run(original, candidate, inputs, "") {
        Ok(r) => r,
        Err(e) => match unrunnable(&e) {
            Some(why) => {
                report.not_comparable = Some(why);
                return Ok(report);
            }
            None => return Err(e),
        },
    };
    report.timings.extend(times);
    if expected.len() != actual.len() {
        return Err(module_error(
            modules[modules.len() - 1],
            format!(
                "gives {} outputs, the original {}",
                actual.len(),
                expected.len()
            ),
        ));
    }
    let native = native_reports(&expected, actual, options)?;
    if report.native_because.is_some() {
        report.outputs = native;
    } else {
        let wide_original = crate::verdict::widen_module(original);
        let wide_modules: Vec<Module> = modules[1..]
            .iter()
            .map(|m| crate::verdict::widen_module(m))
            .collect();
        let wide_candidate = match candidate {
            Candidate::PerDevice { .. } => Candidate::PerDevice {
                layout: &wide_modules[0],
                program: &wide_modules[1],
            },
            Candidate::Sharded(_) => Candidate::Sharded(&wide_modules[0]),
        };
        let wide_inputs: Vec<HostValue> = inputs.iter().map(crate::verdict::widen_value).collect();
        match run(&wide_original, wide_candidate, &wide_inputs, " in f64") {
            Ok((wide_expected, wide_actual, times)) => {
                report.timings.extend(times);
                report.outputs = wide_reports(&expected, &wide_expected, wide_actual, native)?;
            }
            // The program has no f64 form the plugin compiles (a custom-call typed for f32,
            // such as TopK): decided as given, saying why.
            Err(e) => {
                let first = e.to_string();
                let first = first.lines().next().unwrap_or_default().to_string();
                report.native_because =
                    Some(format!("the plugin refused the f64 programs: {first}"));
                report.outputs = native;
            }
        }
    }
    // An output that depends on a stateful generator is judged only when it came out equal
    // (the plugin seeds `rng` deterministically per program, and a partition that keeps the
    // generator replicated reproduces it); where it differs, the difference says nothing.
    for (k, why) in random {
        if let Some(o) = report.outputs.get_mut(k) {
            if o.outcome() == Outcome::Equivalent {
                continue;
            }
            *o = OutputReport {
                not_comparable: Some(format!(
                    "it differs, and depends on %{why}, a stateful random number generator"
                )),
                mismatched: 0,
                first_mismatch: None,
                replica_mismatches: Vec::new(),
                replica_mismatch_count: 0,
                ..o.clone()
            };
        }
    }
    Ok(report)
}

/// Whether `m` holds a float narrower than `f64` anywhere (a shape or a constant).
fn has_narrow_float(m: &Module) -> bool {
    fn narrow(s: &Shape) -> bool {
        match s {
            Shape::Array(a) => crate::verdict::wide_type(a.ty) != a.ty,
            Shape::Tuple(e) => e.iter().any(narrow),
            Shape::Buffer(b) => narrow(b),
            _ => false,
        }
    }
    ids_of(m).into_iter().any(|id| narrow(&m.instr(id).shape))
}

/// Runs the candidate: as a per-device program, or partitioned by XLA (as one global program
/// when on one device).
fn run_candidate(
    client: &Client,
    original: &Module,
    candidate: Candidate<'_>,
    num_devices: usize,
    inputs: &[HostValue],
) -> Result<Vec<sharded::Assembled>> {
    match candidate {
        Candidate::PerDevice { layout, program } => {
            let _ = original;
            run_partitioned_with(client, layout, program, num_devices, inputs, Fusion::Off)
        }
        Candidate::Sharded(m) if num_devices == 1 => {
            Ok(run_original_with(client, m, inputs, Fusion::Off)?
                .into_iter()
                .map(|a| sharded::Assembled {
                    value: HostValue::Array(a),
                    mismatches: Vec::new(),
                    mismatch_count: 0,
                })
                .collect())
        }
        Candidate::Sharded(m) => {
            run_xla_partitioned_with(client, m, num_devices, inputs, Fusion::Off)
        }
    }
}

fn enough_devices(client: &Client, num_devices: usize) -> Result<()> {
    if client.devices().len() < num_devices {
        return Err(Error::InvalidArgument(format!(
            "the client has {} devices, {num_devices} needed",
            client.devices().len()
        )));
    }
    Ok(())
}

/// The outputs `reference` says `original` must give: its own on one device, or those
/// of XLA's partitioning of it on `num_devices`.
fn reference_outputs(
    client: &Client,
    original: &Module,
    num_devices: usize,
    inputs: &[HostValue],
    reference: Reference,
) -> Result<Vec<HostArray>> {
    match reference {
        Reference::Auto | Reference::SingleDevice => {
            run_original_with(client, original, inputs, Fusion::Off)
        }
        Reference::XlaPartitioned => {
            let mut outs = Vec::new();
            for (k, a) in
                run_xla_partitioned_with(client, original, num_devices, inputs, Fusion::Off)?
                    .into_iter()
                    .enumerate()
            {
                if let Some(mm) = a.mismatches.first() {
                    return Err(module_error(
                        original,
                        format!("XLA's partitioning of it gives disagreeing replicas of output {k}: {mm}"),
                    ));
                }
                outs.push(a.value.as_array().cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!("reference output {k} assembled into a tuple"))
                })?);
            }
            Ok(outs)
        }
    }
}

/// Each output compared at its own precision: with `options.float_tolerance` for floats when
/// given, else its type's tolerance.
fn native_reports(
    expected: &[HostArray],
    actual: Vec<sharded::Assembled>,
    options: CompareOptions,
) -> Result<Vec<OutputReport>> {
    let mut outputs = Vec::with_capacity(expected.len());
    for (k, (e, a)) in expected.iter().zip(actual).enumerate() {
        let arr = a
            .value
            .as_array()
            .ok_or_else(|| Error::InvalidArgument(format!("output {k} assembled into a tuple")))?;
        let tolerance = match options.float_tolerance {
            Some(t) if e.ty.is_float() || e.ty.is_complex() => t,
            _ => Tolerance::for_type(e.ty),
        };
        let mut r = compare_arrays(k, e, arr, tolerance)?;
        r.replica_mismatches = a.mismatches;
        r.replica_mismatch_count = a.mismatch_count;
        outputs.push(r);
    }
    Ok(outputs)
}

/// Each output judged in the wide run: floats within their [`crate::verdict::wide_bound`],
/// the rest exactly; the native comparison kept beside.
fn wide_reports(
    native_expected: &[HostArray],
    expected: &[HostArray],
    actual: Vec<sharded::Assembled>,
    native: Vec<OutputReport>,
) -> Result<Vec<OutputReport>> {
    let mut outputs = Vec::with_capacity(expected.len());
    for (k, ((e, a), n)) in expected.iter().zip(actual).zip(native).enumerate() {
        let arr = a
            .value
            .as_array()
            .ok_or_else(|| Error::InvalidArgument(format!("output {k} assembled into a tuple")))?;
        let bound = native_expected
            .get(k)
            .filter(|_| e.ty.is_float() || e.ty.is_complex())
            .and_then(|ne| crate::verdict::wide_bound(ne, e));
        let tolerance = match bound {
            Some(b) => Tolerance {
                rel: 0.0,
                abs: b.abs,
            },
            None => Tolerance::EXACT,
        };
        let mut r = compare_arrays(k, e, arr, tolerance)?;
        // Report the output's shape as given, not widened.
        r.shape = n.shape.clone();
        r.replica_mismatches = a.mismatches;
        r.replica_mismatch_count = a.mismatch_count;
        r.bound = bound;
        r.native = Some(NativeErrors {
            max_abs_error: n.max_abs_error,
            max_rel_error: n.max_rel_error,
            outside_type_tolerance: n.mismatched,
            tolerance: n.tolerance,
        });
        outputs.push(r);
    }
    Ok(outputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_reports_errors_and_tolerance() {
        let e = HostArray::f32(&[4], &[1.0, 2.0, 0.0, f32::NAN]).unwrap();
        let a = HostArray::f32(&[4], &[1.000001, 2.5, 0.0, f32::NAN]).unwrap();
        let r = compare_arrays(0, &e, &a, Tolerance::for_type(HloElementType::F32)).unwrap();
        assert_eq!(r.mismatched, 1);
        assert!((r.max_abs_error - 0.5).abs() < 1e-9);
        assert!((r.max_rel_error - 0.25).abs() < 1e-9);
        let m = r.first_mismatch.unwrap();
        assert_eq!(m.index, vec![1]);
        assert_eq!(m.actual, Scalar::Float(2.5));
        // An expected zero that comes out non-zero has an infinite relative error.
        let a = HostArray::f32(&[4], &[1.0, 2.0, 1e-7, f32::NAN]).unwrap();
        let r = compare_arrays(0, &e, &a, Tolerance::for_type(HloElementType::F32)).unwrap();
        assert_eq!(r.mismatched, 0, "within abs 1e-6");
        assert_eq!(r.max_rel_error, f64::INFINITY);
        // NaN against a number is a mismatch.
        let a = HostArray::f32(&[4], &[f32::NAN, 2.0, 0.0, f32::NAN]).unwrap();
        let r = compare_arrays(0, &e, &a, Tolerance::for_type(HloElementType::F32)).unwrap();
        assert_eq!(r.mismatched, 1);
        // Integers are exact.
        let e = HostArray::s32(&[2], &[1, 2]).unwrap();
        let a = HostArray::s32(&[2], &[1, 3]).unwrap();
        let r = compare_arrays(3, &e, &a, Tolerance::for_type(HloElementType::S32)).unwrap();
        assert!(!r.passed());
        assert!(r
            .to_string()
            .starts_with("output 3 s32[2]: DIFFERS max abs error 1.000e0"));
        // Shapes must agree.
        assert!(compare_arrays(
            0,
            &e,
            &HostArray::s32(&[1], &[1]).unwrap(),
            Tolerance::EXACT
        )
        .is_err());
    }

    #[test]
    fn random_arrays_are_deterministic_and_in_range() {
        let a = random_array(HloElementType::F32, &[100], &mut Rng::new(7));
        let b = random_array(HloElementType::F32, &[100], &mut Rng::new(7));
        assert_eq!(a, b);
        assert!(a.to_f32().unwrap().iter().all(|v| (-1.0..1.0).contains(v)));
        let c = random_array(HloElementType::F32, &[100], &mut Rng::new(8));
        assert_ne!(a, c);
        for &ty in HloElementType::ALL.iter().filter(|t| t.is_array_type()) {
            let r = random_array(ty, &[64], &mut Rng::new(1));
            for k in 0..64 {
                match r.get(k) {
                    Scalar::Float(x) => assert!(x.is_finite() && x.abs() <= 4.0, "{ty}: {x}"),
                    Scalar::Int(i) => assert!((-16..16).contains(&i), "{ty}: {i}"),
                    _ => {}
                }
            }
        }
    }
}
