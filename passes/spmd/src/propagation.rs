//! The `sharding-propagation` pass, after XLA's `ShardingPropagation` (SPMD mode).
//!
//! Shardings flow forward (operands -> user) and backward (users -> operand) until nothing
//! changes, at four aggressiveness levels in turn (0: only pass-through ops such as
//! element-wise ops, reshapes, transposes, tuples; 1: also dots, reduces, slices, ... and
//! partially replicated shardings merge; 2: backward through broadcasts; 3: forward through
//! broadcasts). A sharding only ever gets more specific (more tiles, or a merge of two partial
//! tilings), so the iteration ends. Annotated instructions keep their sharding, except that
//! the unspecified dimensions of a partial annotation (`unspecified_dims=[..]`) are refined.
//!
//! The state is a dense side table of shardings indexed by `InstrId`; per-level "already
//! inferred" bitsets (XLA's caches) make each sweep touch only instructions next to a change.
//! The module is written back once at the end. See docs/sharding-propagation.md.

use smallvec::SmallVec;
use tessera_hlo::attrs::Attrs;
use tessera_hlo::sharding::ShardingKind;
use tessera_hlo::sharding_util::{merge_if_compatible, merge_sharding};
use tessera_hlo::{analysis, CompId, InstrId, Instruction, Module, Opcode, Shape, Sharding};
use tessera_pass::options::{parse_bool, parse_bool_list, unknown_key, OptionDoc, PassOptions};
use tessera_pass::registry::RegisteredPass;
use tessera_pass::{Pass, PassError, Result};

use crate::dims::{conv_dims, dot_dims, DotDims};
use crate::gather_scatter::{self as gs, DimMap, GatherScatter};

mod manual;
mod memo;
mod setup;

use memo::{idx, Op, Sh};

/// Options of `sharding-propagation` (`--pass-option sharding-propagation.KEY=VALUE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PropagationOptions {
    /// SPMD mode (XLA's `is_spmd`, default true): partial tilings merge, and reductions or
    /// broadcasts over tiled dimensions become partially replicated. `false` is XLA's older mode.
    pub is_spmd: bool,
    /// Entry parameters that may take shardings, in addition to what the module's
    /// `allow_spmd_sharding_propagation_to_parameters` allows: one flag for all, or one per
    /// parameter (XLA's `allow_spmd_sharding_propagation_to_parameters`).
    pub propagate_to_parameters: Vec<bool>,
    /// The entry root may take a sharding: one flag, or one per element of a tuple root
    /// (XLA's `allow_spmd_sharding_propagation_to_output`); the module's flag allows it too.
    pub propagate_to_output: Vec<bool>,
    /// Keep the `metadata={...}` of shardings (XLA's `propagate_metadata`); by default it is
    /// removed, as XLA does.
    pub propagate_metadata: bool,
    /// Give every instruction left undecided a `{replicated}` sharding (what the partitioner
    /// would assume anyway) instead of leaving it without one.
    pub replicate_undecided: bool,
    /// XLA's `cse_prevention_only`: propagate, then keep only the new shardings of scalar
    /// broadcasts (marked so a later run removes them) and restore everything else.
    pub cse_prevention_only: bool,
}

impl Default for PropagationOptions {
    fn default() -> Self {
        PropagationOptions {
            is_spmd: true,
            propagate_to_parameters: vec![false],
            propagate_to_output: vec![false],
            propagate_metadata: false,
            replicate_undecided: false,
            cse_prevention_only: false,
        }
    }
}

impl PassOptions for PropagationOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "is_spmd",
            default: "true",
            doc: "SPMD mode: partial tilings merge (false: XLA's older non-SPMD rules)",
        },
        OptionDoc {
            key: "propagate_to_parameters",
            default: "false",
            doc: "entry parameters may take shardings: one flag or one per parameter (alias allow_spmd_sharding_propagation_to_parameters)",
        },
        OptionDoc {
            key: "propagate_to_output",
            default: "false",
            doc: "the entry root may take a sharding: one flag or one per tuple element (alias allow_spmd_sharding_propagation_to_output)",
        },
        OptionDoc {
            key: "propagate_metadata",
            default: "false",
            doc: "keep sharding metadata (XLA removes it by default)",
        },
        OptionDoc {
            key: "replicate_undecided",
            default: "false",
            doc: "give instructions that no sharding reaches {replicated}",
        },
        OptionDoc {
            key: "cse_prevention_only",
            default: "false",
            doc: "only shard scalar broadcasts (XLA's CSE-prevention run), restore the rest",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "is_spmd" => self.is_spmd = parse_bool(value)?,
            "propagate_to_parameters" | "allow_spmd_sharding_propagation_to_parameters" => {
                self.propagate_to_parameters = parse_bool_list(value)?
            }
            "propagate_to_output" | "allow_spmd_sharding_propagation_to_output" => {
                self.propagate_to_output = parse_bool_list(value)?
            }
            "propagate_metadata" => self.propagate_metadata = parse_bool(value)?,
            "replicate_undecided" => self.replicate_undecided = parse_bool(value)?,
            "cse_prevention_only" => self.cse_prevention_only = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// An instruction the pass could not give a sharding, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecided {
    pub instr: InstrId,
    pub name: String,
    pub reason: String,
}

/// What the last run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PropagationReport {
    /// Sweeps over the module, all levels together.
    pub iterations: usize,
    pub inferred_from_operands: usize,
    pub inferred_from_users: usize,
    /// Instructions of the entry and of while/conditional/call bodies left without a sharding
    /// (computations applied per element, such as reducers, are not listed).
    pub undecided: Vec<Undecided>,
}

#[derive(Clone, Debug, Default)]
pub struct ShardingPropagation {
    pub options: PropagationOptions,
    pub report: PropagationReport,
}

impl RegisteredPass for ShardingPropagation {
    type Options = PropagationOptions;
    const NAME: &'static str = "sharding-propagation";
    const DOC: &'static str =
        "XLA's sharding propagation: give every instruction a sharding from the annotated ones";
    fn with_options(options: PropagationOptions) -> Self {
        ShardingPropagation {
            options,
            report: PropagationReport::default(),
        }
    }
}

impl Pass for ShardingPropagation {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        let (changed, report) = propagate(module, &self.options)?;
        // A few undecided instructions are named one by one; many (a module with no
        // annotations at all) get one line, each of them at debug level.
        const NAMED: usize = 8;
        if report.undecided.len() <= NAMED {
            for u in &report.undecided {
                tracing::warn!(instruction = %u.name, "sharding-propagation: no sharding: {}", u.reason);
            }
        } else {
            let first: Vec<&str> = report.undecided[..NAMED]
                .iter()
                .map(|u| u.name.as_str())
                .collect();
            tracing::warn!(
                "sharding-propagation: {} instructions have no sharding (first: {}, ...; -vv lists each with its reason)",
                report.undecided.len(),
                first.join(", ")
            );
            for u in &report.undecided {
                tracing::debug!(instruction = %u.name, "sharding-propagation: no sharding: {}", u.reason);
            }
        }
        self.report = report;
        Ok(changed)
    }
}

/// A list of flags (more than one) must have one flag per entry parameter (or per element of
/// a single tuple parameter) and one per element of a tuple root.
fn check_flag_counts(module: &Module, entry: CompId, o: &PropagationOptions) -> Result<()> {
    let comp = module.comp(entry);
    let num_params = comp.num_parameters();
    let param_elems = match comp.parameter(0).map(|p| &module.instr(p).shape) {
        Some(Shape::Tuple(e)) if num_params == 1 => Some(e.len()),
        _ => None,
    };
    let root_elems = comp
        .root()
        .map(|r| match &module.instr(r).shape {
            Shape::Tuple(e) => e.len(),
            _ => 1,
        })
        .unwrap_or(1);
    let bad = |key: &str, list: &[bool], want: String| PassError::BadOption {
        option: format!("{}.{key}", ShardingPropagation::NAME),
        message: format!("{} flags given, but {want}", list.len()),
    };
    let p = &o.propagate_to_parameters;
    if p.len() > 1 && p.len() != num_params && Some(p.len()) != param_elems {
        let want = match param_elems {
            Some(e) => format!("the entry has 1 tuple parameter of {e} elements"),
            None => format!("the entry has {num_params} parameter(s)"),
        };
        return Err(bad("propagate_to_parameters", p, want));
    }
    let r = &o.propagate_to_output;
    if r.len() > 1 && r.len() != root_elems {
        return Err(bad(
            "propagate_to_output",
            r,
            format!("the entry root has {root_elems} element(s)"),
        ));
    }
    Ok(())
}

/// Runs sharding propagation on `module`; returns whether it changed and the report.
///
/// Named (mesh) shardings take part as their tiled equivalent, as XLA's queries on a named
/// `HloSharding` answer through `V3ToV2Sharding`; an instruction whose sharding the pass
/// leaves as it was keeps its named spelling, and shardings the pass makes are tiled, as XLA's
/// are.
pub fn propagate(
    module: &mut Module,
    options: &PropagationOptions,
) -> Result<(bool, PropagationReport)> {
    // jax's explicit-mode `unreduced` hints go first (see `crate::unreduced`).
    let lowered = crate::unreduced::lower_unreduced(module).map_err(PassError::Failed)?;
    let named = setup::named_to_tiled(module)?;
    let result = propagate_tiled(module, options);
    setup::restore_named(module, &named);
    result.map(|(changed, report)| (changed || lowered > 0, report))
}

fn propagate_tiled(
    module: &mut Module,
    options: &PropagationOptions,
) -> Result<(bool, PropagationReport)> {
    let Some(entry) = module.entry() else {
        return Ok((false, PropagationReport::default()));
    };
    check_flag_counts(module, entry, options)?;
    let mut changed = false;
    let cse = options.cse_prevention_only;
    // A CSE-prevention run restores everything but its own shardings at the end.
    let before_all: Vec<Option<Sharding>> = if cse {
        (0..module.instr_capacity())
            .map(|k| {
                module
                    .try_instr(InstrId::new(k))
                    .and_then(|i| i.sharding.clone())
            })
            .collect()
    } else {
        changed |= setup::remove_cse_prevention(module);
        Vec::new()
    };
    if options.propagate_metadata {
        changed |= setup::assign_sharding_metadata(module);
    }
    let mut unspecified: Vec<(InstrId, Vec<usize>)> = Vec::new();
    changed |= process_sharding_custom_calls(module, !cse, &mut unspecified)?;
    changed |= setup::check_while_devices(module)?;
    let flags = Flags::new(module, options);

    let m: &Module = module;
    let mut p = Propagator::new(m, entry, options, &flags);
    for (id, dims) in unspecified {
        p.unspecified[id.index()] = Some(dims);
    }
    p.run();
    p.restore_entry_interface(&flags);
    let mut report = PropagationReport {
        iterations: p.iterations,
        inferred_from_operands: p.from_operands,
        inferred_from_users: p.from_users,
        undecided: Vec::new(),
    };
    let undecided = if cse { Vec::new() } else { p.undecided() };
    let table: Vec<Option<Sh>> = std::mem::take(&mut p.sh);
    let original = std::mem::take(&mut p.original);
    drop(p);
    // `{replicated}` for undecided instructions, when asked for.
    let mut filled: Vec<(InstrId, Sharding)> = Vec::new();
    for (id, reason) in undecided {
        if options.replicate_undecided {
            filled.push((id, replicated_for(&module.instr(id).shape)));
        }
        report.undecided.push(Undecided {
            instr: id,
            name: module.instr(id).name().to_string(),
            reason,
        });
    }
    filled.sort_by_key(|(id, _)| id.index());
    let mut fill = filled.into_iter().peekable();
    for (k, slot) in table.iter().enumerate() {
        let id = InstrId::new(k);
        let Some(instr) = module.try_instr(id) else {
            continue;
        };
        let old = &original[k];
        let filled_here = fill.next_if(|(f, _)| *f == id).map(|(_, s)| s);
        let now: Option<&Sharding> = filled_here.as_ref().or(slot.as_deref());
        // The user's spelling is kept where only our tuple expansion differs.
        let same_as_old = match (now, old) {
            (None, None) => true,
            (Some(n), Some(o)) => {
                n == o || (instr.shape.is_tuple() && !o.is_tuple() && *n == expand(&instr.shape, o))
            }
            _ => false,
        };
        if !cse && same_as_old && (options.propagate_metadata || !has_metadata(old.as_ref())) {
            continue;
        }
        let mut new = if same_as_old {
            old.clone()
        } else {
            now.cloned()
        };
        if !options.propagate_metadata {
            if let Some(s) = new.as_mut() {
                strip_metadata(s);
            }
        }
        if cse {
            // Keep only the new shardings of CSE targets, marked; restore everything else.
            let before = before_all.get(k).cloned().flatten();
            new = if setup::is_cse_target(module, instr) && before.is_none() {
                new.map(|s| setup::mark_cse_prevention(&s))
            } else {
                before
            };
        }
        if new != *old {
            module.instr_mut(id).sharding = new;
            changed = true;
        }
    }
    changed |= setup::remove_shard_barriers(module)?;
    if cse {
        // What counts is the difference with the input (the annotations' operands were
        // touched on the way and are restored now).
        changed = (0..module.instr_capacity()).any(|k| {
            let now = module
                .try_instr(InstrId::new(k))
                .and_then(|i| i.sharding.clone());
            now != before_all.get(k).cloned().flatten()
        });
    }
    Ok((changed, report))
}

fn is_unknown(s: &Sharding) -> bool {
    matches!(s.kind, ShardingKind::Unknown)
}

fn has_unknown(s: &Sharding) -> bool {
    match &s.kind {
        ShardingKind::Tuple(e) => e.iter().any(has_unknown),
        k => matches!(k, ShardingKind::Unknown),
    }
}

fn replace_unknown(s: &mut Sharding) {
    match &mut s.kind {
        ShardingKind::Tuple(e) => e.iter_mut().for_each(replace_unknown),
        k @ ShardingKind::Unknown => *k = ShardingKind::Replicated,
        _ => {}
    }
}

/// The effective per-parameter and per-output flags: the pass options when they allow
/// anything, else the module's `allow_spmd_sharding_propagation_to_*`.
struct Flags {
    output: Vec<bool>,
    output_any: bool,
    params: Vec<bool>,
    params_any: bool,
}

impl Flags {
    fn new(m: &Module, o: &PropagationOptions) -> Flags {
        let pick = |opt: &[bool], cfg: &Option<Vec<bool>>| -> Vec<bool> {
            if opt.iter().any(|&b| b) {
                opt.to_vec()
            } else if let Some(c) = cfg.as_ref().filter(|c| c.iter().any(|&b| b)) {
                c.clone()
            } else {
                vec![false]
            }
        };
        let output = pick(
            &o.propagate_to_output,
            &m.config.allow_spmd_sharding_propagation_to_output,
        );
        let params = pick(
            &o.propagate_to_parameters,
            &m.config.allow_spmd_sharding_propagation_to_parameters,
        );
        Flags {
            output_any: output.iter().any(|&b| b),
            params_any: params.iter().any(|&b| b),
            output,
            params,
        }
    }
}

/// True if `s` or one of its leaves carries metadata.
fn has_metadata(s: Option<&Sharding>) -> bool {
    s.is_some_and(|s| {
        !s.metadata.is_empty()
            || matches!(&s.kind, ShardingKind::Tuple(e) if e.iter().any(|x| has_metadata(Some(x))))
    })
}

fn strip_metadata(s: &mut Sharding) {
    s.metadata.clear();
    if let ShardingKind::Tuple(e) = &mut s.kind {
        e.iter_mut().for_each(strip_metadata);
    }
}

fn replicated_for(shape: &Shape) -> Sharding {
    if shape.is_tuple() {
        Sharding::tuple(vec![Sharding::replicated(); shape.leaf_count_nonempty()])
    } else {
        Sharding::replicated()
    }
}

trait LeafCount {
    fn leaf_count_nonempty(&self) -> usize;
}

impl LeafCount for Shape {
    /// Leaves of a tuple shape (an empty tuple has none).
    fn leaf_count_nonempty(&self) -> usize {
        match self {
            Shape::Tuple(e) => e.iter().map(|s| s.leaf_count()).sum(),
            _ => 1,
        }
    }
}

fn is_custom_call(i: &Instruction, target: &str) -> bool {
    i.opcode() == Opcode::CustomCall
        && i.attrs
            .custom_call
            .as_ref()
            .is_some_and(|c| c.target == target)
}

/// `unspecified_dims=[0,1]` in a Sharding custom-call's backend_config.
fn parse_unspecified_dims(i: &Instruction) -> std::result::Result<Vec<usize>, String> {
    let Some(cfg) = i.backend_config.as_deref() else {
        return Ok(Vec::new());
    };
    let cfg = cfg.trim();
    let Some(rest) = cfg.strip_prefix("unspecified_dims=") else {
        return Ok(Vec::new());
    };
    let inner = rest
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("expected `unspecified_dims=[d,...]`, found `{cfg}`"))?;
    let mut dims = Vec::new();
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        dims.push(
            part.parse::<usize>()
                .map_err(|_| format!("expected a dimension number, found `{part}`"))?,
        );
    }
    dims.sort_unstable();
    Ok(dims)
}

/// Replaces every `custom-call(...), custom_call_target="Sharding"` with a `copy` that keeps
/// its name and sharding (as XLA's pass does, so later passes need no special case), unless
/// `replace_with_copy` is off (a CSE-prevention run) or the annotation is `{unknown}` on an
/// operand that is not a parameter. A fully specified annotation also goes onto its operand
/// when that has none and no other user; a partial one (`unspecified_dims=[..]`) records its
/// free dimensions.
fn process_sharding_custom_calls(
    module: &mut Module,
    replace_with_copy: bool,
    unspecified: &mut Vec<(InstrId, Vec<usize>)>,
) -> Result<bool> {
    let mut changed = false;
    let comps: Vec<CompId> = module.computations().to_vec();
    let mut orders = analysis::PostOrders::new(module);
    for comp in comps {
        let has_annotation = module
            .comp(comp)
            .instructions()
            .iter()
            .any(|&id| is_custom_call(module.instr(id), "Sharding"));
        if !has_annotation {
            continue;
        }
        let mut order = orders.post_order(module, comp);
        order.reverse();
        // Annotations replaced by copies so far, each with its copy. They lose their last
        // edges now and leave the computation together at the end (one pass over its
        // instruction list instead of one per annotation); until then they do not count as
        // users.
        let mut replaced: Vec<(InstrId, InstrId)> = Vec::new();
        let sole_user = |module: &Module, op: InstrId, replaced: &[(InstrId, InstrId)]| {
            module
                .users(op)
                .iter()
                .filter(|u| !replaced.iter().any(|(a, _)| a == *u))
                .count()
                == 1
        };
        for id in order {
            let i = module.instr(id);
            if !is_custom_call(i, "Sharding") {
                continue;
            }
            let Some(sharding) = i.sharding.clone() else {
                return Err(PassError::Failed(format!(
                    "%{}: a Sharding custom-call must carry a sharding",
                    i.name()
                )));
            };
            let dims = parse_unspecified_dims(i)
                .map_err(|e| PassError::Failed(format!("%{}: backend_config: {e}", i.name())))?;
            let Some(&operand) = i.operands().first() else {
                return Err(PassError::Failed(format!(
                    "%{}: a Sharding custom-call needs one operand",
                    i.name()
                )));
            };
            let keep = !replace_with_copy
                || (is_unknown(&sharding) && module.instr(operand).opcode() != Opcode::Parameter);
            if keep {
                if !dims.is_empty() {
                    unspecified.push((id, dims));
                } else if module.instr(operand).sharding.is_none()
                    && sole_user(module, operand, &replaced)
                {
                    module.instr_mut(operand).sharding = Some(sharding);
                }
                continue;
            }
            // The copy takes the annotation's name, metadata, attributes and control edges.
            let name = module.instr(id).name().to_string();
            let tmp = module.unique_name(&format!("{name}.annotation"));
            module.rename_instruction(id, tmp)?;
            let mut b = tessera_hlo::Builder::new(module, comp);
            b.set_origin(Some(id));
            let new = b.op_named(&name, Opcode::Copy, &[operand], Attrs::default(), &[], None)?;
            module.instr_mut(new).sharding = Some(sharding.clone());
            module.move_control_edges(id, new);
            module.replace_all_uses_with(id, new)?;
            debug_assert!(module.users(id).is_empty());
            replaced.push((id, new));
            changed = true;
            if !dims.is_empty() {
                unspecified.push((new, dims));
            } else if module.instr(operand).sharding.is_none()
                && sole_user(module, operand, &replaced)
            {
                // Only a sole user decides its operand's sharding outright; with others, the
                // operand's sharding comes out of propagation (XLA does the same).
                module.instr_mut(operand).sharding = Some(sharding);
            }
        }
        if replaced.is_empty() {
            continue;
        }
        // Each copy takes its annotation's place in the stored order and the schedule.
        let mut copy_of: Vec<Option<InstrId>> = vec![None; module.instr_capacity()];
        let mut is_copy = vec![false; module.instr_capacity()];
        for &(a, c) in &replaced {
            copy_of[a.index()] = Some(c);
            is_copy[c.index()] = true;
        }
        let copy_of = |x: InstrId| copy_of[x.index()];
        let mut instrs: Vec<InstrId> = Vec::with_capacity(module.comp(comp).instructions().len());
        for &x in module.comp(comp).instructions() {
            if is_copy[x.index()] {
                continue;
            }
            if let Some(c) = copy_of(x) {
                instrs.push(c);
            }
            instrs.push(x);
        }
        module.set_instruction_order(comp, instrs);
        if let Some(s) = module.schedule.as_mut() {
            if let Some(seq) = s.sequences.get_mut(&comp) {
                for x in seq.iter_mut() {
                    if let Some(c) = copy_of(*x) {
                        *x = c;
                    }
                }
            }
        }
        let gone: Vec<InstrId> = replaced.iter().map(|&(a, _)| a).collect();
        module.remove_instructions(&gone)?;
    }
    Ok(changed)
}

fn remove_with_edges(module: &mut Module, id: InstrId) -> Result<()> {
    let preds = module.instr(id).control_predecessors().to_vec();
    let succs = module.instr(id).control_successors().to_vec();
    for p in preds {
        module.remove_control_dependency(p, id);
    }
    for s in succs {
        module.remove_control_dependency(id, s);
    }
    module.remove_instruction(id)?;
    Ok(())
}

/// Ops whose shardings propagate at aggressiveness 0 (XLA's
/// `CanPropagateThroughAtAggressiveLevel`); broadcast needs level 2.
fn can_propagate_at(i: &Instruction, level: u8) -> bool {
    use Opcode::*;
    if level < 1
        && !(i.opcode().is_elementwise() || is_custom_call(i, "Sharding"))
        && !matches!(
            i.opcode(),
            Transpose
                | Reshape
                | Tuple
                | GetTupleElement
                | While
                | DynamicSlice
                | DynamicUpdateSlice
                | OptimizationBarrier
                | Concatenate
                | Call
                | Copy
        )
    {
        return false;
    }
    !(level < 2 && i.opcode() == Broadcast)
}

/// XLA's `IsPassthroughCustomOps`: custom-calls whose output is laid out like their first
/// operand.
fn is_passthrough_custom_call(i: &Instruction, m: &Module) -> bool {
    let Some(cc) = i.attrs.custom_call.as_ref() else {
        return false;
    };
    if matches!(
        cc.target.as_str(),
        "Sharding" | "X64Combine" | "LayoutConstraint"
    ) {
        return true;
    }
    if i.operands().len() != 1
        || !i.shape.is_array()
        || !m.instr(i.operand(0)).shape.is_array()
        || m.instr(i.operand(0)).shape.rank() != i.shape.rank()
    {
        return false;
    }
    matches!(
        cc.target.as_str(),
        "ResizeNearest"
            | "ResizeBilinear"
            | "ResizeNearestGrad"
            | "ResizeBilinearGrad"
            | "Cholesky"
            | "MoveToHost"
            | "MoveToDevice"
            | "PinToDevice"
            | "PinToDeviceSram"
    )
}

/// Custom-calls that may be partitioned (XLA: passthrough ops and those with a registered
/// custom-call partitioner; of those, the shard barriers).
fn custom_call_is_shardable(i: &Instruction, m: &Module) -> bool {
    is_passthrough_custom_call(i, m) || is_shard_barrier(i).is_some()
}

/// `ShardBarrierFrom` (`Some(true)`: nothing flows forward through it) or `ShardBarrierTo`
/// (`Some(false)`: nothing flows backward through it).
fn is_shard_barrier(i: &Instruction) -> Option<bool> {
    if is_custom_call(i, "ShardBarrierFrom") {
        Some(true)
    } else if is_custom_call(i, "ShardBarrierTo") {
        Some(false)
    } else {
        None
    }
}

/// Leaf range `(start, len)` of tuple element `index` in the flattened leaves of `shape`.
fn leaf_range(shape: &Shape, index: usize) -> (usize, usize) {
    let e = shape.tuple_elements();
    let count = |s: &Shape| if s.is_tuple() { s.leaf_count() } else { 1 };
    let start = e[..index.min(e.len())].iter().map(count).sum();
    (start, e.get(index).map_or(0, count))
}

/// The sharding of tuple element `index` of a value of `shape` sharded by `s`.
fn sub_sharding(s: &Sharding, shape: &Shape, index: usize) -> Sharding {
    let elem = shape.tuple_elements().get(index);
    match &s.kind {
        ShardingKind::Tuple(leaves) => {
            let (start, len) = leaf_range(shape, index);
            match elem {
                Some(Shape::Tuple(_)) => {
                    Sharding::tuple(leaves.get(start..start + len).unwrap_or(&[]).to_vec())
                }
                _ => leaves
                    .get(start)
                    .cloned()
                    .unwrap_or_else(Sharding::replicated),
            }
        }
        _ => match elem {
            Some(t @ Shape::Tuple(_)) => Sharding::tuple(vec![s.clone(); t.leaf_count()]),
            _ => s.clone(),
        },
    }
}

/// [`sub_sharding`] in terms of leaves: element leaves `start..start + len` of a value
/// sharded `s`; `kind` 0: no such element, 1: an array element, 2: a tuple element.
fn element_sharding(s: &Sharding, start: usize, len: usize, kind: u8) -> Sharding {
    match &s.kind {
        ShardingKind::Tuple(leaves) => {
            if kind == 2 {
                Sharding::tuple(leaves.get(start..start + len).unwrap_or(&[]).to_vec())
            } else {
                leaves
                    .get(start)
                    .cloned()
                    .unwrap_or_else(Sharding::replicated)
            }
        }
        _ => {
            if kind == 2 {
                Sharding::tuple(vec![s.clone(); len])
            } else {
                s.clone()
            }
        }
    }
}

/// A tuple sharding for `shape` from a single sharding for every leaf (or `s` for an array).
fn spread(shape: &Shape, s: Sharding) -> Sharding {
    if shape.is_tuple() {
        Sharding::tuple(vec![s; shape.leaf_count()])
    } else {
        s
    }
}

/// The stored sharding in the form the pass uses: tuple-shaped values hold one leaf sharding
/// per leaf.
fn expand(shape: &Shape, s: &Sharding) -> Sharding {
    if shape.is_tuple() && !s.is_tuple() {
        spread(shape, s.clone())
    } else {
        s.clone()
    }
}

/// Shapes equal up to element types and layouts (XLA's `CompatibleIgnoringElementType`).
fn compatible_ignoring_type(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => x.dims == y.dims,
        (Shape::Tuple(x), Shape::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| compatible_ignoring_type(p, q))
        }
        (Shape::Token, Shape::Token) => true,
        _ => false,
    }
}

/// `Propagator::facts` bits.
const IS_ROOT: u8 = 1;
const ONE_NON_ROOT_USER: u8 = 2;
const PARTITIONABLE_FWD: u8 = 4;
const PARTITIONABLE_BWD: u8 = 8;
/// A tuple shape whose elements are all arrays (or tokens): element k is leaf k.
const FLAT_TUPLE: u8 = 16;
/// Inferring from operands reads only the operands' and the instruction's own shardings.
const LOCAL_FWD: u8 = 32;
/// Inferring from users reads only the instruction's, its users' and their operands'
/// shardings.
const LOCAL_BWD: u8 = 64;
/// A broadcast, or an operand of one (their backward rules start at level 2).
const BROADCAST_NEAR: u8 = 128;

/// Users with more operands than this have an operand index (`Propagator::wide`).
const WIDE: usize = 16;

struct Propagator<'m> {
    m: &'m Module,
    entry: CompId,
    entry_root: Option<InstrId>,
    /// The entry root may take a sharding (some output flag is set).
    allow_output: bool,
    spmd: bool,
    /// Some entry parameter may take a sharding: XLA then lets every entry parameter take one
    /// from its users and restores the ones whose flag is off at the end.
    params_any: bool,
    /// Per entry parameter (or per element of a single tuple parameter): may it take one?
    param_flags: Vec<bool>,
    /// The current sharding of every instruction (interned: see `memo.rs`).
    sh: Vec<Option<Sh>>,
    original: Vec<Option<Sharding>>,
    provided: Vec<bool>,
    unspecified: Vec<Option<Vec<usize>>>,
    /// The while/conditional/call instruction that calls a computation (XLA's computation map).
    caller: Vec<Option<InstrId>>,
    /// Post orders of the computations the pass walks, in module order.
    orders: Vec<(CompId, Vec<InstrId>)>,
    /// Position of each computation in `orders` (`usize::MAX`: not walked).
    order_of: Vec<usize>,
    /// Positions in `orders` of the computations with an instruction whose `done_fwd` or
    /// `done_bwd` was cleared since the computation was last walked: the others would be
    /// walked for nothing (every instruction skipped). Walking only these keeps a fixed point
    /// that moves one computation per round (a call chain) linear instead of rounds times
    /// computations.
    pending: std::collections::BTreeSet<usize>,
    done_fwd: Vec<bool>,
    done_bwd: Vec<bool>,
    /// Per instruction, facts that do not change during the pass: `IS_ROOT`,
    /// `ONE_NON_ROOT_USER`, `PARTITIONABLE_FWD` (XLA's `SupportSpatialPartitioning` as asked
    /// when inferring from operands) and `PARTITIONABLE_BWD` (as asked from users).
    facts: Vec<u8>,
    /// When each sharding last changed (a value of `clock`; 0: never), and when (with the level
    /// class, see `fwd_class`/`bwd_class`) each instruction was last inferred from its
    /// operands and from its users. A visit whose inputs have not changed since the last one
    /// at an equivalent level would compute the same thing again and is skipped (see
    /// `may_skip_fwd`).
    changed_at: Vec<u64>,
    fwd_seen: Vec<(u64, u8)>,
    bwd_seen: Vec<(u64, u8)>,
    clock: u64,
    /// For users with more than `WIDE` operands: (operand, first position, appears again),
    /// sorted by operand.
    wide: tessera_hlo::fxhash::FxHashMap<InstrId, Vec<(InstrId, u32, bool)>>,
    /// Answers of the sharding algebra, asked again and again (see `memo.rs`).
    memo: memo::Memo,
    iterations: usize,
    from_operands: usize,
    from_users: usize,
}

impl<'m> Propagator<'m> {
    fn new(m: &'m Module, entry: CompId, o: &PropagationOptions, flags: &Flags) -> Propagator<'m> {
        let cap = m.instr_capacity();
        let memo = memo::Memo::default();
        let mut sh: Vec<Option<Sh>> = vec![None; cap];
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                sh[id.index()] = memo.intern_opt(i.sharding.as_ref().map(|s| expand(&i.shape, s)));
            }
        }
        let original: Vec<Option<Sharding>> = (0..cap)
            .map(|k| {
                m.try_instr(InstrId::new(k))
                    .and_then(|i| i.sharding.clone())
            })
            .collect();
        let mut p = Propagator {
            m,
            entry,
            entry_root: m.comp(entry).root(),
            allow_output: flags.output_any,
            spmd: o.is_spmd,
            params_any: flags.params_any,
            param_flags: flags.params.clone(),
            sh,
            original,
            provided: vec![false; cap],
            unspecified: vec![None; cap],
            caller: vec![None; m.comp_capacity()],
            orders: Vec::new(),
            order_of: vec![usize::MAX; m.comp_capacity()],
            pending: std::collections::BTreeSet::new(),
            done_fwd: vec![false; cap],
            done_bwd: vec![false; cap],
            facts: vec![0; cap],
            changed_at: vec![0; cap],
            fwd_seen: vec![(0, 0); cap],
            bwd_seen: vec![(0, 0); cap],
            clock: 1,
            wide: Default::default(),
            memo,
            iterations: 0,
            from_operands: 0,
            from_users: 0,
        };
        p.build_computation_map();
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                p.facts[id.index()] = p.compute_facts(id);
            }
        }
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let mut f = p.facts[id.index()];
                if p.supports_partitioning_uncached(id, p.allow_output, false) {
                    f |= PARTITIONABLE_FWD;
                }
                if p.supports_partitioning_uncached(id, false, p.params_any) {
                    f |= PARTITIONABLE_BWD;
                }
                p.facts[id.index()] = f;
                let ops = m.instr(id).operands();
                if ops.len() > WIDE {
                    let mut index: Vec<(InstrId, u32, bool)> = Vec::with_capacity(ops.len());
                    for (k, &o) in ops.iter().enumerate() {
                        index.push((o, k as u32, false));
                    }
                    index.sort();
                    // Keep the first position of each operand, noting repeats.
                    let mut dedup: Vec<(InstrId, u32, bool)> = Vec::with_capacity(index.len());
                    for e in index {
                        match dedup.last_mut() {
                            Some(last) if last.0 == e.0 => last.2 = true,
                            _ => dedup.push(e),
                        }
                    }
                    p.wide.insert(id, dedup);
                }
            }
        }
        // Annotations the pass may not change (XLA's `provided_shardings`): every sharding but
        // those of parameters and the entry root, and `{unknown}` ones; the entry root when the
        // output may not take a sharding; entry parameters when none may.
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                let Some(s) = p.sh[id.index()].as_ref() else {
                    continue;
                };
                if Some(id) != p.entry_root && i.opcode() != Opcode::Parameter && !has_unknown(s) {
                    p.provided[id.index()] = true;
                }
            }
        }
        if let Some(r) = p.entry_root {
            if !p.allow_output && !p.cur(r).is_some_and(has_unknown) {
                p.provided[r.index()] = true;
            }
        }
        if !p.params_any {
            for k in 0..m.comp(entry).num_parameters() {
                if let Some(id) = m.comp(entry).parameter(k) {
                    if p.sh[id.index()].as_ref().is_some_and(|s| !has_unknown(s)) {
                        p.provided[id.index()] = true;
                    }
                }
            }
        }
        // `{unknown}` takes part as `{replicated}`.
        for k in 0..cap {
            if let Some(s) = p.sh[k].as_ref().filter(|s| has_unknown(s)) {
                let mut s = s.to_sharding();
                replace_unknown(&mut s);
                p.put(InstrId::new(k), Some(p.memo.intern(s)));
            }
        }
        let mut orders = analysis::PostOrders::new(m);
        for &c in m.computations() {
            p.order_of[c.index()] = p.orders.len();
            p.orders.push((c, orders.post_order(m, c)));
        }
        p
    }

    fn build_computation_map(&mut self) {
        let m = self.m;
        let mut calls: Vec<usize> = vec![0; m.comp_capacity()];
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                for &callee in &m.instr(id).called {
                    calls[callee.index()] += 1;
                }
            }
        }
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                match i.opcode() {
                    Opcode::While | Opcode::Conditional | Opcode::Call => {}
                    _ => continue,
                }
                // A computation called from several places gets no caller: its shardings
                // could not follow one call site.
                if i.called.iter().any(|c| calls[c.index()] != 1) {
                    continue;
                }
                // Related instructions share one sharding: copy the first one found.
                let related = self.related(id);
                if let Some(s) = related.iter().find_map(|&r| self.sh[r.index()].clone()) {
                    for &r in &related {
                        self.put(r, Some(s.clone()));
                    }
                }
                match i.opcode() {
                    Opcode::While => {
                        // Only the body (XLA's computation map): the condition's parameter
                        // follows the loop through `related`, the rest of the condition
                        // propagates as a computation of its own.
                        if let Some(b) = i.while_body() {
                            self.caller[b.index()] = Some(id);
                        }
                    }
                    _ => {
                        for &callee in &i.called {
                            self.caller[callee.index()] = Some(id);
                        }
                    }
                }
            }
        }
    }

    /// Instructions that must share one sharding with a while, conditional or call.
    fn related(&self, id: InstrId) -> SmallVec<[InstrId; 4]> {
        let m = self.m;
        let i = m.instr(id);
        let mut v: SmallVec<[InstrId; 4]> = SmallVec::new();
        v.push(id);
        match i.opcode() {
            Opcode::While => {
                if let Some(b) = i.while_body() {
                    v.extend(m.comp(b).root());
                    v.extend(m.comp(b).parameter(0));
                }
                if let Some(c) = i.while_condition() {
                    v.extend(m.comp(c).parameter(0));
                }
            }
            Opcode::Conditional | Opcode::Call => {
                for &c in &i.called {
                    v.extend(m.comp(c).root());
                }
            }
            _ => {}
        }
        v
    }

    /// True for a while/conditional/call whose bodies the computation map ties to it.
    fn is_mapped_caller(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        match i.opcode() {
            Opcode::While => i
                .while_body()
                .is_some_and(|b| self.caller[b.index()] == Some(id)),
            Opcode::Conditional | Opcode::Call => {
                !i.called.is_empty() && i.called.iter().all(|c| self.caller[c.index()] == Some(id))
            }
            _ => false,
        }
    }

    fn cur(&self, id: InstrId) -> Option<&Sharding> {
        self.sh[id.index()].as_deref()
    }

    /// The current sharding's handle.
    fn cur_sh(&self, id: InstrId) -> Option<&Sh> {
        self.sh[id.index()].as_ref()
    }

    /// Sets `id`'s sharding.
    fn set(&mut self, id: InstrId, s: Sharding) {
        let s = self.memo.intern(s);
        self.put(id, Some(s));
    }

    /// Sets (or clears) `id`'s sharding, noting when it changed (see `changed_at`).
    fn put(&mut self, id: InstrId, v: Option<Sh>) {
        if self.sh[id.index()] != v {
            self.changed_at[id.index()] = self.clock;
            self.clock += 1;
            self.sh[id.index()] = v;
        }
    }

    fn sp(&self, id: InstrId) -> bool {
        self.cur(id).is_some_and(Sharding::is_spatially_partitioned)
    }

    fn shape(&self, id: InstrId) -> &'m Shape {
        &self.m.instr(id).shape
    }

    fn is_root(&self, id: InstrId) -> bool {
        self.facts[id.index()] & IS_ROOT != 0
    }

    fn non_root_users_is_one(&self, id: InstrId) -> bool {
        self.facts[id.index()] & ONE_NON_ROOT_USER != 0
    }

    /// The facts about instruction `id` that do not change during the pass (see `facts`).
    fn compute_facts(&self, id: InstrId) -> u8 {
        let m = self.m;
        let i = m.instr(id);
        let root = m.comp(i.parent()).root();
        let mut f = 0;
        if root == Some(id) {
            f |= IS_ROOT;
        }
        if i.users().iter().filter(|&&u| Some(u) != root).count() == 1 {
            f |= ONE_NON_ROOT_USER;
        }
        if i.shape.is_tuple() && i.shape.tuple_elements().iter().all(|e| !e.is_tuple()) {
            f |= FLAT_TUPLE;
        }
        use Opcode::*;
        let non_local = |op: Opcode| {
            matches!(
                op,
                Dot | Convolution | Gather | Scatter | Parameter | CustomCall | Call | Conditional
            )
        };
        if !non_local(i.opcode()) {
            f |= LOCAL_FWD;
        }
        let user_ops: SmallVec<[Opcode; 4]> =
            i.users().iter().map(|&u| m.instr(u).opcode()).collect();
        if i.opcode() != CustomCall
            && !user_ops
                .iter()
                .any(|&op| matches!(op, Gather | Scatter | CustomCall | Call | Conditional))
        {
            f |= LOCAL_BWD;
        }
        if i.opcode() == Broadcast || user_ops.contains(&Broadcast) {
            f |= BROADCAST_NEAR;
        }
        f
    }

    /// `sub_sharding(s, shape of user, index)`: the sharding of element `index` of `user`'s
    /// value sharded `s`.
    fn element_of(&self, s: &Sh, user: InstrId, index: usize) -> Sh {
        let shape = self.shape(user);
        let elem = shape.tuple_elements().get(index);
        if !s.is_tuple() && !elem.is_some_and(Shape::is_tuple) {
            return s.clone();
        }
        let (start, len) = if self.facts[user.index()] & FLAT_TUPLE != 0 {
            (index, usize::from(index < shape.tuple_elements().len()))
        } else {
            leaf_range(shape, index)
        };
        let kind = match elem {
            None => 0,
            Some(e) if e.is_tuple() => 2,
            Some(_) => 1,
        };
        self.memo
            .algebra(s, Op::Element { start, len, kind }, |s, _| {
                Some(element_sharding(s, start, len, kind))
            })
            .expect("an element always has a sharding")
    }

    /// Where `id` first stands among `user`'s operands, and whether it stands there more than
    /// once (wide users, like a model's output tuple, are looked up in a sorted index).
    fn operand_position(&self, id: InstrId, user: InstrId) -> Option<(usize, bool)> {
        let ops = self.m.instr(user).operands();
        if ops.len() <= WIDE {
            let first = ops.iter().position(|&o| o == id)?;
            return Some((first, ops[first + 1..].contains(&id)));
        }
        let index = self.wide.get(&user)?;
        let k = index.partition_point(|&(o, _, _)| o < id);
        let &(o, first, more) = index.get(k)?;
        (o == id).then_some((first as usize, more))
    }

    // ----- the driver -----

    fn run(&mut self) {
        for level in 0..4u8 {
            self.run_level(level);
        }
        // XLA runs the last level once more, with fresh caches, after its shard-group
        // alignment (which this pass does not have); it can still change a few shardings.
        self.run_level(3);
    }

    fn clear_cache(&mut self, id: InstrId, for_users: Option<InstrId>) {
        let m = self.m;
        self.mark_pending(m.instr(id).parent());
        for &op in m.instr(id).operands() {
            self.done_bwd[op.index()] = false;
        }
        let source = for_users.unwrap_or(id);
        self.mark_pending(m.instr(source).parent());
        for &u in m.instr(source).users() {
            self.done_fwd[u.index()] = false;
            // The parameters of what the user calls see the new sharding too.
            for &c in &m.instr(u).called {
                self.mark_pending(c);
                for k in 0..m.comp(c).num_parameters() {
                    if let Some(p) = m.comp(c).parameter(k) {
                        self.done_fwd[p.index()] = false;
                    }
                }
            }
        }
    }

    fn mark_pending(&mut self, c: CompId) {
        if let Some(&k) = self.order_of.get(c.index()).filter(|&&k| k != usize::MAX) {
            self.pending.insert(k);
        }
    }

    fn run_level(&mut self, level: u8) {
        self.done_fwd.iter_mut().for_each(|x| *x = false);
        self.done_bwd.iter_mut().for_each(|x| *x = false);
        let may_merge = self.spmd && level > 0;
        let orders = std::mem::take(&mut self.orders);
        // Computations walked every round: a partial annotation is refined on every visit,
        // and a manual conversion re-opens the annotation before it.
        let always: Vec<usize> = orders
            .iter()
            .enumerate()
            .filter(|(_, (_, order))| {
                order.iter().any(|&id| {
                    let i = self.m.instr(id);
                    (self.provided[id.index()] && self.unspecified[id.index()].is_some())
                        || is_custom_call(i, "SPMDFullToShardShape")
                        || is_custom_call(i, "SPMDShardToFullShape")
                })
            })
            .map(|(k, _)| k)
            .collect();
        self.pending = (0..orders.len()).collect();
        let mut changed_last = true;
        while changed_last {
            changed_last = false;
            self.iterations += 1;
            self.pending.extend(always.iter().copied());
            // In `orders` order, as a walk of all of them would go; a computation marked
            // again after its walk waits for the next round.
            let mut from = 0;
            while let Some(&k) = self.pending.range(from..).next() {
                self.pending.remove(&k);
                from = k + 1;
                let order = &orders[k].1;
                for &id in order {
                    if self.done_fwd[id.index()] {
                        continue;
                    }
                    if self.provided[id.index()] {
                        if !may_merge {
                            continue;
                        }
                        if let Some(dims) = self.unspecified[id.index()].clone() {
                            if self.refine_unspecified_from_operand(id, &dims) {
                                self.from_operands += 1;
                                self.done_fwd[id.index()] = true;
                                changed_last = true;
                            }
                        }
                        continue;
                    }
                    self.done_fwd[id.index()] = true;
                    if self.may_skip_fwd(id, level) {
                        if cfg!(debug_assertions) {
                            let before = self.sh[id.index()].clone();
                            let changed = self.infer_from_operands(id, level);
                            assert!(
                                !changed && self.sh[id.index()] == before,
                                "sharding-propagation: skipped forward visit of %{} would change it",
                                self.m.instr(id).name()
                            );
                        }
                        continue;
                    }
                    self.fwd_seen[id.index()] = (self.clock, self.fwd_class(id, level));
                    if self.infer_from_operands(id, level) {
                        self.from_operands += 1;
                        let changed = self.computation_propagation(id);
                        self.clear_cache(id, None);
                        for c in changed {
                            self.clear_cache(c, None);
                        }
                        changed_last = true;
                    }
                }
                for &id in order.iter().rev() {
                    // A manual conversion is refined together with the annotation before it:
                    // when the conversion is to be revisited, so is the annotation.
                    let i = self.m.instr(id);
                    if !self.done_bwd[id.index()]
                        && (is_custom_call(i, "SPMDFullToShardShape")
                            || is_custom_call(i, "SPMDShardToFullShape"))
                    {
                        if let Some(&op) = i.operands().first() {
                            self.done_bwd[op.index()] = false;
                        }
                    }
                    if self.done_bwd[id.index()] {
                        continue;
                    }
                    if self.provided[id.index()] {
                        if !may_merge {
                            continue;
                        }
                        if let Some(dims) = self.unspecified[id.index()].clone() {
                            if self.refine_unspecified_from_users(id, &dims, level) {
                                self.from_users += 1;
                                changed_last = true;
                            }
                        }
                        continue;
                    }
                    self.done_bwd[id.index()] = true;
                    if self.may_skip_bwd(id, level) {
                        if cfg!(debug_assertions) {
                            let before = self.sh[id.index()].clone();
                            let changed = self.infer_from_users(id, level);
                            assert!(
                                !changed && self.sh[id.index()] == before,
                                "sharding-propagation: skipped backward visit of %{} would change it",
                                self.m.instr(id).name()
                            );
                        }
                        continue;
                    }
                    self.bwd_seen[id.index()] = (self.clock, self.bwd_class(id, level));
                    if self.infer_from_users(id, level) {
                        self.from_users += 1;
                        let changed = self.computation_propagation(id);
                        self.clear_cache(id, None);
                        for c in changed {
                            self.clear_cache(c, None);
                        }
                        changed_last = true;
                    }
                }
            }
        }
        self.orders = orders;
    }

    /// Levels at which inferring `id` from its operands follows the same rules: 0; and 1-3,
    /// except for a broadcast, whose every level is its own class: at level 1 it is not
    /// inferred at all (`can_propagate_at`), at 2 it takes only a manual sharding, at 3 its
    /// operand's too.
    fn fwd_class(&self, id: InstrId, level: u8) -> u8 {
        match level {
            0 => 0,
            _ if self.m.instr(id).opcode() == Opcode::Broadcast => level,
            _ => 1,
        }
    }

    /// Levels at which inferring `id` from its users follows the same rules: 0; 1-3, except
    /// that broadcasts (`id` or a user) take part only from level 2.
    fn bwd_class(&self, id: InstrId, level: u8) -> u8 {
        match level {
            0 => 0,
            1 if self.facts[id.index()] & BROADCAST_NEAR != 0 => 1,
            _ => 2,
        }
    }

    /// True when inferring `id` from its operands now would repeat its last such visit
    /// exactly: the rules are those of the same level class, and neither `id`'s sharding nor
    /// an operand's changed since. Only for ops whose rule reads nothing else (dots look ahead
    /// at users, gathers and scatters at iotas, parameters at their caller; custom calls are
    /// left alone).
    fn may_skip_fwd(&self, id: InstrId, level: u8) -> bool {
        let (seen, class) = self.fwd_seen[id.index()];
        if seen == 0
            || self.facts[id.index()] & LOCAL_FWD == 0
            || class != self.fwd_class(id, level)
            || self.changed_at[id.index()] >= seen
        {
            return false;
        }
        let ops = self.m.instr(id).operands();
        ops.iter().all(|o| self.changed_at[o.index()] < seen)
    }

    /// [`Self::may_skip_fwd`] for inferring from users: neither `id`, nor a user, nor another
    /// operand of a user (dots, reduces) changed since the last visit; no user reads anything
    /// else (calls and conditionals read their callees, gathers and scatters iotas).
    fn may_skip_bwd(&self, id: InstrId, level: u8) -> bool {
        let (seen, class) = self.bwd_seen[id.index()];
        if seen == 0
            || self.facts[id.index()] & LOCAL_BWD == 0
            || class != self.bwd_class(id, level)
            || self.changed_at[id.index()] >= seen
        {
            return false;
        }
        let m = self.m;
        m.instr(id).users().iter().all(|&u| {
            let ui = m.instr(u);
            self.changed_at[u.index()] < seen
                && (ui.opcode() == Opcode::Tuple
                    || ui
                        .operands()
                        .iter()
                        .all(|o| self.changed_at[o.index()] < seen))
        })
    }

    /// After `id` changed: when it is a while/conditional/call, or a parameter or root of a
    /// computation one of those calls, every related instruction takes its sharding (XLA's
    /// `maybe_computation_propagation`, which overrides provided shardings too); a parameter
    /// of a conditional branch also passes its sharding to the conditional's operand for it.
    fn computation_propagation(&mut self, id: InstrId) -> Vec<InstrId> {
        let i = self.m.instr(id);
        let called_edge = (i.opcode() == Opcode::Parameter || self.is_root(id))
            && self.caller[i.parent().index()].is_some();
        if !called_edge && !self.is_mapped_caller(id) {
            // Nothing is tied to `id`.
            return Vec::new();
        }
        let mut changed = Vec::new();
        let mut work = vec![id];
        while let Some(x) = work.pop() {
            let i = self.m.instr(x);
            let mut groups: SmallVec<[SmallVec<[InstrId; 4]>; 2]> = SmallVec::new();
            if self.is_mapped_caller(x) {
                groups.push(self.related(x));
            }
            if i.opcode() == Opcode::Parameter || self.is_root(x) {
                if let Some(c) = self.caller[i.parent().index()] {
                    groups.push(self.related(c));
                    let ci = self.m.instr(c);
                    if i.opcode() == Opcode::Parameter && ci.opcode() == Opcode::Conditional {
                        if let Some(b) = ci.called.iter().position(|&k| k == i.parent()) {
                            if let Some(&op) = ci.operands().get(b + 1) {
                                groups.push(SmallVec::from_slice(&[x, op]));
                            }
                        }
                    }
                }
            }
            let Some(s) = self.sh[x.index()].clone() else {
                continue;
            };
            for related in groups {
                if !related.contains(&x) {
                    continue;
                }
                for r in related {
                    if self.sh[r.index()].as_ref() != Some(&s) {
                        self.put(r, Some(s.clone()));
                        changed.push(r);
                        work.push(r);
                    }
                }
            }
        }
        changed
    }

    /// XLA's `MaybeImproveInstructionSharding` (`ReturnImprovedShardingImpl`): a manual
    /// sharding replaces a tile-maximal one; else a spatially partitioned candidate is taken
    /// when there is no sharding yet, or when it merges with the current one into something
    /// more specific (with as many tiles as the candidate only if each device's new piece lies
    /// inside its old one, unless `aggressive`).
    fn improve(&mut self, id: InstrId, new: Sharding, may_combine: bool, aggressive: bool) -> bool {
        let new = self.memo.intern(new);
        self.improve_sh(id, new, may_combine, aggressive)
    }

    /// [`Self::improve`] with an interned candidate.
    fn improve_sh(&mut self, id: InstrId, new: Sh, may_combine: bool, aggressive: bool) -> bool {
        match self.improved(id, new, may_combine, aggressive) {
            Some(s) => {
                self.put(id, Some(s));
                true
            }
            None => false,
        }
    }

    /// What [`Self::improve`] would set, without setting it (XLA's `ReturnImprovedSharding`).
    fn improved(&self, id: InstrId, new: Sh, may_combine: bool, aggressive: bool) -> Option<Sh> {
        let old = self.cur_sh(id);
        // The same sharding again is no improvement (every rule below says so too; interned
        // handles are equal iff their values are).
        if old == Some(&new) {
            return None;
        }
        let shape = self.shape(id);
        if !fits(&new, shape) {
            return None;
        }
        if let Some(old) = old {
            if new.strictly_better_than(old) {
                return Some(new);
            }
        }
        if !new.is_spatially_partitioned() {
            // An empty tuple has one sharding, `{}`; XLA's output shows it set from a tuple
            // user though it is not spatially partitioned.
            let empty = matches!(&new.kind, ShardingKind::Tuple(e) if e.is_empty());
            if empty && shape.leaf_count() == 0 && old.is_none() {
                return Some(new);
            }
            return None;
        }
        let Some(old) = old else {
            return Some(new);
        };
        if new.is_manual() {
            return None;
        }
        let tiles = new.num_tiles();
        let (merged, new) = self.memo.merge_sharding(old, &new, may_combine);
        if !merged {
            return None;
        }
        if !aggressive
            && shape.is_array()
            && !old.is_tile_maximal()
            && new.num_tiles() == tiles
            && !self.memo.is_sub_tiling(shape, &new, old)
        {
            return None;
        }
        (new != *old).then_some(new)
    }

    // ----- which instructions may be sharded -----

    /// The flag of entry parameter `k` (one flag for all, one per parameter, or, for a single
    /// tuple parameter, one per element: then any).
    fn param_flag(&self, k: usize) -> bool {
        let f = &self.param_flags;
        if f.len() == 1 {
            return f[0];
        }
        let n = self.m.comp(self.entry).num_parameters();
        if n == 1 && f.len() > 1 {
            return f.iter().any(|&b| b);
        }
        f.get(k).copied().unwrap_or(false)
    }

    /// May this parameter keep a sharding the pass gives it?
    fn param_allowed(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        if self.caller[i.parent().index()].is_some() {
            return true;
        }
        i.parent() == self.entry && self.param_flag(i.attrs.parameter_number as usize)
    }

    /// XLA's `SupportSpatialPartitioning`: `allow_output` lets the entry root take a sharding,
    /// `allow_params` entry parameters (XLA allows both only when inferring from users).
    fn supports_partitioning(&self, id: InstrId, allow_output: bool, allow_params: bool) -> bool {
        if (allow_output, allow_params) == (self.allow_output, false) {
            return self.facts[id.index()] & PARTITIONABLE_FWD != 0;
        }
        if (allow_output, allow_params) == (false, self.params_any) {
            return self.facts[id.index()] & PARTITIONABLE_BWD != 0;
        }
        self.supports_partitioning_uncached(id, allow_output, allow_params)
    }

    fn supports_partitioning_uncached(
        &self,
        id: InstrId,
        allow_output: bool,
        allow_params: bool,
    ) -> bool {
        use Opcode::*;
        let i = self.m.instr(id);
        if self.is_root(id)
            && self.caller[i.parent().index()].is_none()
            && !(Some(id) == self.entry_root && allow_output)
        {
            return false;
        }
        if i.opcode().is_elementwise() || i.opcode() == Map {
            return i.opcode() != Rng || self.spmd;
        }
        match i.opcode() {
            Broadcast | Concatenate | Conditional | Constant | Convolution
            | OptimizationBarrier | Dot | DynamicSlice | DynamicUpdateSlice | Gather
            | GetTupleElement | Infeed | Iota | Pad | ReduceWindow | Reshape | Scatter
            | SelectAndScatter | Slice | Sort | Transpose | Tuple | While | Reduce
            | RngBitGenerator | Call | AllReduce | ReduceScatter => true,
            Reverse => self.spmd,
            Parameter => {
                self.caller[i.parent().index()].is_some()
                    || (i.parent() == self.entry && allow_params)
            }
            CustomCall => self.spmd && custom_call_is_shardable(i, self.m),
            _ => false,
        }
    }

    // ----- forward -----

    /// The operand with the most specific sharding (XLA's `PickRepresentativeOperand`).
    fn representative(&self, id: InstrId) -> Option<InstrId> {
        use Opcode::*;
        let i = self.m.instr(id);
        match i.opcode() {
            Map | Pad | Power | OptimizationBarrier | Reverse | Slice | ShiftLeft
            | ShiftRightArithmetic | ShiftRightLogical => {
                let op = *i.operands().first()?;
                self.cur(op).is_some().then_some(op)
            }
            CustomCall => {
                if is_passthrough_custom_call(i, self.m) {
                    i.operands().first().copied()
                } else {
                    None
                }
            }
            op if op.is_elementwise()
                || matches!(
                    op,
                    Concatenate
                        | Sort
                        | While
                        | AllGather
                        | AllReduce
                        | ReduceScatter
                        | AllToAll
                        | CollectivePermute
                ) =>
            {
                let mut best: Option<InstrId> = None;
                for &o in i.operands() {
                    let Some(s) = self.cur(o) else { continue };
                    if best.is_none_or(|b| s.more_specific_than(self.cur(b).unwrap())) {
                        best = Some(o);
                    }
                }
                best
            }
            _ => None,
        }
    }

    fn infer_from_operands(&mut self, id: InstrId, level: u8) -> bool {
        use Opcode::*;
        let m = self.m;
        let i = m.instr(id);
        if !can_propagate_at(i, level) {
            return false;
        }
        // Manual shardings flow into everything computed from a manual value.
        if let Some(changed) = self.forward_manual(id, level) {
            return changed;
        }
        let mc = self.spmd && level > 0;
        if !self.supports_partitioning(id, self.allow_output, false) {
            // An unpartitionable array op next to a replicated operand is replicated too.
            if i.shape.is_tuple()
                || i.operands().is_empty()
                || self.is_root(id)
                || i.has_side_effect()
            {
                return false;
            }
            for &op in i.operands() {
                if let Some(s) = self.cur_sh(op) {
                    if s.is_tile_maximal() && !matches!(s.kind, ShardingKind::Maximal(_)) {
                        let s = s.clone();
                        return self.improve_sh(id, s, mc, false);
                    }
                }
            }
            return false;
        }
        let aggressive = self.non_root_users_is_one(id);
        match i.opcode() {
            GetTupleElement => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let s = sub_sharding(
                    self.cur(op).unwrap(),
                    self.shape(op),
                    i.attrs.tuple_index as usize,
                );
                let s = self.memo.intern(s);
                if s.is_manual() {
                    let changed = self.cur_sh(id) != Some(&s);
                    self.put(id, Some(s));
                    return changed;
                }
                self.improve_sh(id, s, mc, aggressive)
            }
            Tuple => self.forward_tuple(id),
            Reduce => self.forward_reduce(id, mc, aggressive),
            Broadcast => {
                if level < 3 {
                    return false;
                }
                let op = i.operand(0);
                let Some(s) = self
                    .cur_sh(op)
                    .filter(|s| s.is_spatially_partitioned() && !s.is_replicated())
                else {
                    return false;
                };
                let map = idx(dims_attr(&i.attrs).iter().map(|&d| d as usize));
                let Some(new) = self.inserted_dims(s, i.shape.rank(), map) else {
                    return false;
                };
                self.improve_sh(id, new, mc, aggressive)
            }
            Concatenate => {
                let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
                    return false;
                };
                if level == 0 {
                    let cdim = dims_attr(&i.attrs).first().copied().unwrap_or(0) as usize;
                    for &o in i.operands() {
                        if !self.concat_operand_passes(o) {
                            return false;
                        }
                        let t = self.cur(o).and_then(Sharding::as_tiled);
                        if t.is_some_and(|t| {
                            t.tile_assignment.dims().get(cdim).is_some_and(|&d| d > 1)
                        }) {
                            return false;
                        }
                    }
                }
                let s = self.cur_sh(op).unwrap().clone();
                self.improve_sh(id, s, mc, aggressive)
            }
            Convolution => self.forward_convolution(id, mc),
            Dot => {
                let Some(dims) = self.dims_of(id) else {
                    return false;
                };
                self.forward_dot(id, dims, mc)
            }
            Transpose => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let perm = idx(dims_attr(&i.attrs).iter().map(|&d| d as usize));
                let Some(s) = self.transposed(self.cur_sh(op).unwrap(), perm) else {
                    return false;
                };
                self.improve_sh(id, s, mc, aggressive)
            }
            ReduceWindow => {
                if let Some(w) = i.attrs.window.as_deref() {
                    if w.dims
                        .iter()
                        .any(|d| d.base_dilation > 1 || d.window_dilation > 1)
                    {
                        return false;
                    }
                }
                let n = i.operands().len() / 2;
                let mut changed = false;
                for k in 0..n {
                    let op = i.operand(k);
                    if !self.sp(op) {
                        continue;
                    }
                    let s = spread(&i.shape, self.cur(op).unwrap().clone());
                    changed |= self.improve(id, s, mc, aggressive);
                }
                changed
            }
            SelectAndScatter => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                if let Some(w) = i.attrs.window.as_deref() {
                    if w.dims.iter().any(|d| d.base_dilation > 1) {
                        return false;
                    }
                }
                let s = self.cur_sh(op).unwrap().clone();
                self.improve_sh(id, s, mc, aggressive)
            }
            Reshape => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let new = self.through_reshape(self.cur_sh(op).unwrap(), id, 0);
                self.improve_sh(id, new, mc, aggressive)
            }
            Reverse => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let dims: Vec<usize> = dims_attr(&i.attrs).iter().map(|&d| d as usize).collect();
                let s = self.cur(op).unwrap().reverse_dims(&dims);
                self.improve(id, s, mc, aggressive)
            }
            Parameter => {
                let Some(c) = self.caller[i.parent().index()] else {
                    return false;
                };
                let ci = m.instr(c);
                let op = match ci.opcode() {
                    Conditional => {
                        let Some(b) = ci.called.iter().position(|&x| x == i.parent()) else {
                            return false;
                        };
                        ci.operands().get(b + 1).copied()
                    }
                    Call => ci
                        .operands()
                        .get(i.attrs.parameter_number as usize)
                        .copied(),
                    _ => None,
                };
                let Some(s) = op.and_then(|o| self.cur_sh(o)).cloned() else {
                    return false;
                };
                self.improve_sh(id, s, mc, false)
            }
            Sort => {
                let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
                    return false;
                };
                let s = self.cur(op).unwrap().clone();
                let sort_dim = dims_attr(&i.attrs).first().copied().unwrap_or(0) as usize;
                // Sharded along the sort dimension: only when the partitioner can move those
                // tiles to another dimension (XLA's GetFirstTargetDimToMoveShardingTiles).
                if s.as_tiled().is_some_and(|t| {
                    t.tile_assignment
                        .dims()
                        .get(sort_dim)
                        .is_some_and(|&d| d != 1)
                }) && first_target_dim_to_move_tiles(self.shape(op), &s, sort_dim).is_none()
                {
                    return false;
                }
                self.improve(id, spread(&i.shape, s), mc, aggressive)
            }
            DynamicSlice | DynamicUpdateSlice => self.forward_dynamic_slice(id, level, mc),
            Gather => self.forward_gather(id, mc),
            Scatter => self.forward_scatter(id, mc),
            While => {
                let Some(mut s) = self.cur_sh(i.operand(0)).cloned() else {
                    return false;
                };
                if let Some(old) = self.cur_sh(id) {
                    // What the merge leaves in the candidate counts, merged or not.
                    s = self.memo.merge_sharding(old, &s, mc).1;
                }
                self.improve_sh(id, s, mc, false)
            }
            CustomCall => {
                // Nothing flows forward through a ShardBarrierFrom; a ShardBarrierTo takes its
                // operand's sharding (as the barrier partitioners say).
                if is_shard_barrier(i) == Some(true) {
                    return false;
                }
                let op = if is_shard_barrier(i) == Some(false) {
                    Some(i.operand(0))
                } else {
                    self.representative(id)
                };
                let Some(op) = op.filter(|&o| self.sp(o)) else {
                    return false;
                };
                let s = self.cur_sh(op).unwrap().clone();
                self.improve_sh(id, s, mc, aggressive)
            }
            Conditional | Call => false,
            _ => {
                if (i.opcode().is_elementwise() || i.opcode() == Rng) && mc {
                    let mut changed = false;
                    let single = i.operands().len() == 1;
                    for &op in i.operands() {
                        if !self.sp(op) {
                            continue;
                        }
                        let s = self.cur_sh(op).unwrap().clone();
                        if i.opcode() == Rng {
                            let s = s.replicate_all_data_dims(Some(i.shape.rank()));
                            changed |= self.improve(id, s, mc, aggressive);
                            continue;
                        }
                        changed |= self.improve_sh(id, s, mc, single && aggressive);
                    }
                    return changed;
                }
                let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
                    return false;
                };
                let s = self.cur_sh(op).unwrap().clone();
                self.improve_sh(id, s, mc, aggressive)
            }
        }
    }

    /// XLA's `AggressiveConcatOperandShardingCanPassThrough`.
    fn concat_operand_passes(&self, o: InstrId) -> bool {
        let i = self.m.instr(o);
        self.sp(o)
            && self.cur(o).is_some_and(|s| s.num_tiles() > 1)
            && i.opcode() == Opcode::Reshape
            && matches!(
                self.m.instr(i.operand(0)).opcode(),
                Opcode::Parameter | Opcode::GetTupleElement
            )
    }

    fn forward_tuple(&mut self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        if !i.operands().iter().any(|&o| self.sp(o)) {
            return false;
        }
        let had = self.cur(id).is_some();
        let mut leaves: Vec<Sharding> = match self.cur(id).map(|s| &s.kind) {
            Some(ShardingKind::Tuple(e)) => e.clone(),
            _ => vec![Sharding::replicated(); i.shape.leaf_count()],
        };
        let mut k = 0;
        for &o in i.operands() {
            let oshape = self.shape(o);
            let n = oshape.leaf_count();
            if let Some(s) = self.cur(o) {
                let olv: Vec<Sharding> = match &s.kind {
                    // An outfeed's value is its token: the last leaf of its sharding.
                    ShardingKind::Tuple(e) if self.m.instr(o).opcode() == Opcode::Outfeed => {
                        e.last().cloned().into_iter().collect()
                    }
                    ShardingKind::Tuple(e) => e.clone(),
                    _ => vec![s.clone(); n],
                };
                for (j, os) in olv.into_iter().enumerate().take(n) {
                    if let Some(slot) = leaves.get_mut(k + j) {
                        if !had || os.more_specific_than(slot) {
                            *slot = os;
                        }
                    }
                }
            }
            k += n;
        }
        let new = self.memo.intern(Sharding::tuple(leaves));
        if self.cur_sh(id) != Some(&new) {
            self.put(id, Some(new));
            return true;
        }
        false
    }

    fn forward_reduce(&mut self, id: InstrId, mc: bool, aggressive: bool) -> bool {
        let i = self.m.instr(id);
        let n = i.operands().len() / 2;
        let rdims: Vec<usize> = dims_attr(&i.attrs).iter().map(|&d| d as usize).collect();
        let mut changed = false;
        for k in 0..n {
            let op = i.operand(k);
            if !self.sp(op) {
                continue;
            }
            let s = self.cur_sh(op).unwrap().clone();
            let tiles_reduced = s.as_tiled().is_some_and(|t| {
                rdims
                    .iter()
                    .any(|&d| t.tile_assignment.dims().get(d).is_some_and(|&x| x > 1))
            });
            if s.is_replicated() || (!self.spmd && tiles_reduced) {
                changed |= self.improve(
                    id,
                    spread(&i.shape, s.replicate_all_data_dims(None)),
                    mc,
                    aggressive,
                );
                continue;
            }
            // Replicated after replicating the reduced dimensions: stays replicated (removing
            // dimensions of a replicated sharding keeps it).
            let Some(new) = self.replicated_and_removed(&s, &rdims) else {
                continue;
            };
            let new = self.spread_sh(&i.shape, new);
            changed |= self.improve_sh(id, new, mc, aggressive);
        }
        changed
    }

    /// XLA's `InferDotShardingFromOperands`: each operand's sharding with its contracting
    /// dimensions replicated, moved to the output dimensions. When both improve the output, the
    /// one whose tiling the next sharded user (through a chain of single users) refines goes
    /// first, else the larger operand; the other then merges in.
    fn forward_dot(&mut self, id: InstrId, dims: u32, mc: bool) -> bool {
        let i = self.m.instr(id);
        let (l, r) = (i.operand(0), i.operand(1));
        let from = |p: &Self, k: usize, op: InstrId| -> Option<Sh> {
            if !p.sp(op) {
                return None;
            }
            let s = p.dot_from_operand(id, dims, k)?;
            p.improved(id, s, mc, false)
        };
        let (a, b) = (from(self, 0, l), from(self, 1, r));
        let (first, second) = match (a, b) {
            (None, None) => return false,
            (Some(s), None) | (None, Some(s)) => {
                self.put(id, Some(s));
                return true;
            }
            (Some(a), Some(b)) => {
                let shape = self.shape(id);
                let by_lookahead = self.lookahead_user_sharding(id).and_then(|la| {
                    match (is_sub_tiling(shape, &la, &a), is_sub_tiling(shape, &la, &b)) {
                        (true, false) => Some(false),
                        (false, true) => Some(true),
                        _ => None,
                    }
                });
                let swap = by_lookahead
                    .unwrap_or_else(|| self.shape(l).byte_size(8) < self.shape(r).byte_size(8));
                if swap {
                    (b, a)
                } else {
                    (a, b)
                }
            }
        };
        self.put(id, Some(first));
        self.improve_sh(id, second, mc, false);
        true
    }

    /// XLA's `LookaheadUserSharding`: following `id`'s single user, and its single user, and
    /// so on up to the first one with a sharding, the sharding that user asks of `id`.
    fn lookahead_user_sharding(&mut self, id: InstrId) -> Option<Sh> {
        let m = self.m;
        if m.instr(id).users().len() != 1 {
            return None;
        }
        let mut chain = vec![id, m.instr(id).users()[0]];
        while self.cur(*chain.last().unwrap()).is_none() {
            let users = m.instr(*chain.last().unwrap()).users();
            if users.len() != 1 {
                return None;
            }
            chain.push(users[0]);
        }
        let mut result = None;
        for k in (1..chain.len()).rev() {
            result = self.sharding_from_user(chain[k - 1], chain[k], 3);
            match &result {
                Some(s) if k != 1 => self.put(chain[k - 1], Some(s.clone())),
                _ => break,
            }
        }
        // The chain's middle had no sharding: it gets none back.
        for &c in &chain[1..chain.len() - 1] {
            self.put(c, None);
        }
        result
    }

    fn dot_from_operand(&self, id: InstrId, dims: u32, k: usize) -> Option<Sh> {
        let i = self.m.instr(id);
        let op = i.operand(k);
        let s = self.cur_sh(op)?;
        if s.is_tile_maximal() {
            return Some(s.clone());
        }
        let key = Op::DotFromOperand {
            dims,
            k,
            out_rank: i.shape.rank(),
            op_rank: self.shape(op).rank(),
        };
        self.memo.algebra(s, key, |s, op| {
            let Op::DotFromOperand {
                dims,
                k,
                out_rank,
                op_rank,
            } = op
            else {
                unreachable!()
            };
            let dd = self.memo.dot_dims(*dims);
            dot_from_operand_sharding(s, &dd, *k, *out_rank, *op_rank)
        })
    }
}

/// The sharding operand `k` (of rank `op_rank`, sharded `s`) gives the output (of rank
/// `out_rank`) of a dot with dimensions `dd`: contracting dimensions and the other operand's
/// non-contracting ones replicated, the rest moved to their output dimensions.
fn dot_from_operand_sharding(
    s: &Sharding,
    dd: &DotDims,
    k: usize,
    out_rank: usize,
    op_rank: usize,
) -> Option<Sharding> {
    let mut contracting: Vec<usize> = dd
        .contracting
        .iter()
        .map(|d| d.operand(k) as usize)
        .collect();
    for d in dd.non_contracting(1 - k) {
        if d.operand(k) >= 0 {
            contracting.push(d.operand(k) as usize);
        }
    }
    let rep = s.replicate_on_dims(&contracting);
    let mut out_to_op = vec![-1i64; out_rank];
    let mut op_to_out = vec![-1i64; op_rank];
    for d in dd.batch.iter().chain(dd.non_contracting(k)) {
        let (o, x) = (d.out, d.operand(k));
        if o >= 0 && x >= 0 {
            out_to_op[o as usize] = x;
            op_to_out[x as usize] = o;
        }
    }
    rep.transpose_collapsed(&op_to_out, &out_to_op)
}

/// XLA's `InferDotOperandSharding` on shardings: the output sharding `us` (rank `out_rank`) with
/// the other operand's non-contracting dimensions replicated, moved to operand `k`'s dimensions
/// (rank `op_rank`), merged with what the other operand's sharding `os` (rank `other_rank`, when
/// spatially partitioned) says about the batch and contracting dimensions.
#[allow(clippy::too_many_arguments)]
fn dot_operand_sharding(
    us: &Sharding,
    dd: &DotDims,
    k: usize,
    mc: bool,
    out_rank: usize,
    op_rank: usize,
    other_rank: usize,
    os: Option<&Sharding>,
) -> Option<Sharding> {
    let mut out_rep: Vec<usize> = Vec::new();
    let mut other_rep: Vec<usize> = Vec::new();
    for d in dd.non_contracting(1 - k) {
        if d.out >= 0 {
            out_rep.push(d.out as usize);
        }
        if d.operand(1 - k) >= 0 {
            other_rep.push(d.operand(1 - k) as usize);
        }
    }
    for d in &dd.contracting {
        if d.out >= 0 {
            out_rep.push(d.out as usize);
        }
    }
    for d in dd.non_contracting(k) {
        if d.operand(1 - k) >= 0 {
            other_rep.push(d.operand(1 - k) as usize);
        }
    }
    let out_r = us.replicate_on_dims(&out_rep);
    let mut out_to_op = vec![-1i64; out_rank];
    let mut op_to_out = vec![-1i64; op_rank];
    for d in dd.batch.iter().chain(dd.non_contracting(k)) {
        if d.out >= 0 && d.operand(k) >= 0 {
            out_to_op[d.out as usize] = d.operand(k);
            op_to_out[d.operand(k) as usize] = d.out;
        }
    }
    let mut s = out_r.transpose_collapsed(&out_to_op, &op_to_out)?;
    if let Some(os) = os {
        let os = os.replicate_on_dims(&other_rep);
        let mut other_to_op = vec![-1i64; other_rank];
        let mut op_to_other = vec![-1i64; op_rank];
        for d in dd.batch.iter().chain(&dd.contracting) {
            let (x, y) = (d.operand(1 - k), d.operand(k));
            if x >= 0 && y >= 0 {
                other_to_op[x as usize] = y;
                op_to_other[y as usize] = x;
            }
        }
        if let Some(mut from_other) = os.transpose_collapsed(&other_to_op, &op_to_other) {
            if merge_sharding(&s, &mut from_other, mc) {
                s = from_other;
            }
        }
    }
    Some(s)
}

impl Propagator<'_> {
    fn forward_convolution(&mut self, id: InstrId, mc: bool) -> bool {
        let i = self.m.instr(id);
        let (l, r) = (i.operand(0), i.operand(1));
        let Some(cd) = i.attrs.conv_dims.as_deref() else {
            return false;
        };
        let dd = conv_dims(
            cd,
            i.attrs.window.as_deref(),
            self.shape(l).dims(),
            self.shape(r).dims(),
            i.shape.dims(),
            i.attrs.feature_group_count,
            i.attrs.batch_group_count,
        );
        let parts = |op: InstrId, k: usize| -> i64 {
            match self.cur(op).and_then(Sharding::as_tiled) {
                Some(t) => dd
                    .conv_spatial
                    .iter()
                    .map(|d| t.tile_assignment.dims()[d.operand(k) as usize])
                    .product(),
                None => 1,
            }
        };
        if dd.conv_spatial.is_empty()
            || (parts(l, 0) == 1
                && parts(r, 1) == 1
                && i.attrs.batch_group_count == 1
                && i.attrs.feature_group_count == 1)
        {
            let Some(dims) = self.dims_of(id) else {
                return false;
            };
            return self.forward_dot(id, dims, mc);
        }
        if !self.sp(l) {
            return false;
        }
        let ls = self.cur(l).unwrap().clone();
        if ls.is_tile_maximal() {
            return self.improve(id, ls, mc, false);
        }
        if self.conv_kernel_small(id) {
            let t = ls.as_tiled().unwrap();
            if t.tile_assignment.dims()[cd.input_feature_dimension as usize] > 1 {
                return false;
            }
            // Output dimension j is lhs dimension perm[j].
            let mut perm = vec![0usize; i.shape.rank()];
            perm[cd.output_batch_dimension as usize] = cd.input_batch_dimension as usize;
            perm[cd.output_feature_dimension as usize] = cd.input_feature_dimension as usize;
            for (k, &o) in cd.output_spatial_dimensions.iter().enumerate() {
                perm[o as usize] = cd.input_spatial_dimensions[k] as usize;
            }
            let Some(s) = ls.transpose(&perm) else {
                return false;
            };
            return self.improve(id, s.normalized(), mc, false);
        }
        // A large kernel (a backward convolution, say): only the batch tiling is kept.
        let s = ls.replicate_all_except(&[cd.input_batch_dimension as usize]);
        let Some(s) = s.transpose_collapsed(&self.conv_lhs_to_out(id), &self.conv_out_to_lhs(id))
        else {
            return false;
        };
        self.improve(id, s, mc, false)
    }

    /// Output dimension of each lhs dimension of convolution `id` (batch, feature, spatial).
    fn conv_lhs_to_out(&self, id: InstrId) -> Vec<i64> {
        let i = self.m.instr(id);
        let cd = i.attrs.conv_dims.as_deref().unwrap();
        let mut v = vec![-1i64; self.shape(i.operand(0)).rank()];
        v[cd.input_batch_dimension as usize] = cd.output_batch_dimension;
        v[cd.input_feature_dimension as usize] = cd.output_feature_dimension;
        for (k, &d) in cd.input_spatial_dimensions.iter().enumerate() {
            v[d as usize] = cd.output_spatial_dimensions[k];
        }
        v
    }

    /// Lhs dimension of each output dimension of convolution `id`.
    fn conv_out_to_lhs(&self, id: InstrId) -> Vec<i64> {
        let l2o = self.conv_lhs_to_out(id);
        let mut v = vec![-1i64; self.shape(id).rank()];
        for (l, &o) in l2o.iter().enumerate() {
            if o >= 0 {
                v[o as usize] = l as i64;
            }
        }
        v
    }

    /// XLA's `IsConvolutionKernelSmall`.
    fn conv_kernel_small(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        let cd = i.attrs.conv_dims.as_deref().unwrap();
        let rhs = self.shape(i.operand(1)).dims();
        let out = i.shape.dims();
        let (mut kp, mut op) = (1i64, 1i64);
        for k in 0..cd.input_spatial_dimensions.len() {
            let kd = rhs[cd.kernel_spatial_dimensions[k] as usize];
            let od = out[cd.output_spatial_dimensions[k] as usize];
            kp *= kd;
            op *= od;
            if kd >= od && (k < 2 || kd > 3 || kp >= op) {
                return false;
            }
        }
        true
    }

    /// XLA's `InferDynamicUpdateSliceShardingFromOperand1/0`: a dynamic-slice (or the update
    /// of a dynamic-update-slice) passes its operand's sharding on with the sliced dimensions
    /// replicated; a dynamic-update-slice also takes its base operand's sharding.
    fn forward_dynamic_slice(&mut self, id: InstrId, _level: u8, mc: bool) -> bool {
        let i = self.m.instr(id);
        let op = if i.opcode() == Opcode::DynamicSlice {
            i.operand(0)
        } else {
            i.operand(1)
        };
        let aggressive = self.non_root_users_is_one(id);
        let mut changed = false;
        if self.sp(op) {
            let s = self.replicated_on(self.cur_sh(op).unwrap(), &self.sliced_dims(id, op));
            changed |= self.improve_sh(id, s, mc, aggressive);
        }
        if i.opcode() == Opcode::DynamicUpdateSlice && self.sp(i.operand(0)) {
            let s = self.cur_sh(i.operand(0)).unwrap().clone();
            changed |= self.improve_sh(id, s, mc, false);
        }
        changed
    }

    /// The dimensions where (dynamic-)slice `id` and `op` differ in size.
    fn sliced_dims(&self, id: InstrId, op: InstrId) -> Vec<usize> {
        let (a, b) = (self.shape(id).dims(), self.shape(op).dims());
        (0..a.len()).filter(|&d| b.get(d) != Some(&a[d])).collect()
    }

    // ----- backward -----

    fn infer_from_users(&mut self, id: InstrId, level: u8) -> bool {
        let m = self.m;
        let i = m.instr(id);
        if level < 2 && i.opcode() == Opcode::Broadcast {
            return false;
        }
        // Manual shardings flow back into everything a manual value is computed from.
        let mut asked = SmallVec::new();
        if let Some(changed) = self.backward_manual(id, level, &mut asked) {
            return changed;
        }
        if !self.supports_partitioning(id, false, self.params_any) {
            return false;
        }
        let mc = self.spmd && level > 0;
        let barrier = is_shard_barrier(i);
        let mut improved = false;
        for &u in i.users() {
            // A random bit generator needs its state replicated.
            if m.instr(u).opcode() == Opcode::RngBitGenerator {
                let r = self.memo.intern(replicated_for(&i.shape));
                let changed = self.cur_sh(id) != Some(&r);
                self.put(id, Some(r));
                return changed;
            }
            let from_user = match asked.iter_mut().find(|(x, _)| *x == u) {
                Some((_, s)) => s.take(),
                None => self.sharding_from_user(id, u, level),
            };
            if let Some(mut s) = from_user {
                if manual::all_manual(&s) && !self.may_become_manual(id) {
                    continue;
                }
                // A ShardBarrierTo lets no sharding through backward: it becomes replicated
                // (and so does what feeds it).
                if barrier == Some(false) {
                    s = self.memo.intern(replicated_for(&i.shape));
                }
                if self.improve_sh(id, s, mc, false) {
                    improved = true;
                    // What the other users ask may depend on `id`'s own sharding (a tuple's
                    // other leaves, a dot of `id` with itself): ask again from now on.
                    asked.clear();
                }
            }
        }
        improved
    }

    /// XLA's `GetShardingFromUser`: the sharding `id` should have for `user` as it is sharded.
    fn sharding_from_user(&self, id: InstrId, user: InstrId, level: u8) -> Option<Sh> {
        use Opcode::*;
        let m = self.m;
        let u = m.instr(user);
        if !can_propagate_at(u, level) {
            return None;
        }
        let us = self.cur_sh(user).filter(|s| s.is_spatially_partitioned())?;
        let intern = |s: Sharding| self.memo.intern(s);
        let i = m.instr(id);
        let (index, repeated) = self.operand_position(id, user)?;
        match u.opcode() {
            Broadcast => {
                if us.is_replicated() {
                    return Some(us.clone());
                }
                let bd = dims_attr(&u.attrs);
                let rep: Vec<usize> = (0..u.shape.rank())
                    .filter(|d| !bd.contains(&(*d as i64)))
                    .collect();
                let tiled = us.as_tiled().map(|t| t.tile_assignment.dims().to_vec());
                if !self.spmd
                    && tiled.is_some_and(|t| rep.iter().any(|&d| t.get(d).is_some_and(|&x| x > 1)))
                {
                    return None;
                }
                self.replicated_and_removed(us, &rep)
            }
            Concatenate => {
                if level == 0 {
                    return None;
                }
                self.concat_operand_from_user(id, user, index).map(intern)
            }
            Convolution => {
                let cd = u.attrs.conv_dims.as_deref()?;
                let dd = conv_dims(
                    cd,
                    u.attrs.window.as_deref(),
                    self.shape(u.operand(0)).dims(),
                    self.shape(u.operand(1)).dims(),
                    u.shape.dims(),
                    u.attrs.feature_group_count,
                    u.attrs.batch_group_count,
                );
                if !dd.conv_spatial.is_empty() {
                    return None;
                }
                let dims = self.dims_of(user)?;
                self.dot_operand_sharding(user, dims, index, self.spmd && level > 0)
            }
            DynamicSlice | DynamicUpdateSlice => {
                if level == 0 {
                    return None;
                }
                if us.is_replicated() {
                    return Some(us.clone());
                }
                if u.opcode() == DynamicUpdateSlice && index == 0 {
                    return Some(us.clone());
                }
                let operand = if u.opcode() == DynamicSlice {
                    u.operand(0)
                } else {
                    u.operand(1)
                };
                if operand != id {
                    return None;
                }
                Some(self.replicated_on(us, &self.sliced_dims(user, operand)))
            }
            ReduceWindow => {
                let n = u.operands().len() / 2;
                if index >= n {
                    return None;
                }
                if u.shape.is_tuple() {
                    return Some(intern(sub_sharding(us, &u.shape, index)));
                }
                Some(us.clone())
            }
            Reshape => Some(self.through_reshape(us, user, 1)),
            Pad => (index == 0).then(|| us.clone()),
            Slice => Some(us.clone()),
            Transpose => {
                let d = dims_attr(&u.attrs);
                let mut inv = vec![0usize; d.len()];
                for (k, &x) in d.iter().enumerate() {
                    *inv.get_mut(x as usize)? = k;
                }
                self.transposed(us, idx(inv))
            }
            Tuple => {
                if !repeated {
                    return Some(self.element_of(us, user, index));
                }
                // An operand used at several positions takes the most specific of them.
                let mut best = sub_sharding(us, &u.shape, index);
                for (k, &o) in u.operands().iter().enumerate().skip(index + 1) {
                    if o == id {
                        let alt = sub_sharding(us, &u.shape, k);
                        if alt.more_specific_than(&best) {
                            best = alt;
                        }
                    }
                }
                Some(intern(best))
            }
            GetTupleElement => {
                let (start, len) = leaf_range(&i.shape, u.attrs.tuple_index as usize);
                let ulv: Vec<Sharding> = match &us.kind {
                    ShardingKind::Tuple(e) => e.clone(),
                    _ => vec![us.to_sharding(); len],
                };
                // Without a sharding of its own, every other leaf is the user's sharding with
                // the data replicated (keeping manual subgroups), at that leaf's rank.
                let first = ulv.first()?;
                let mut leaves: Vec<Sharding> = match self.cur(id).map(|s| &s.kind) {
                    Some(ShardingKind::Tuple(e)) => e.clone(),
                    _ => {
                        let mut v = Vec::with_capacity(i.shape.leaf_count());
                        i.shape.for_each_subshape(|_, sub| {
                            if !sub.is_tuple() {
                                v.push(first.replicate_all_data_dims(Some(sub.rank())));
                            }
                        });
                        v
                    }
                };
                for (k, s) in ulv.into_iter().enumerate().take(len) {
                    *leaves.get_mut(start + k)? = s;
                }
                Some(intern(Sharding::tuple(leaves)))
            }
            Dot => {
                let dims = self.dims_of(user)?;
                self.dot_operand_sharding(user, dims, index, self.spmd && level > 0)
            }
            Reduce => {
                if i.shape.rank() == 0 {
                    return None;
                }
                let s = if u.shape.is_tuple() {
                    intern(sub_sharding(us, &u.shape, index))
                } else {
                    us.clone()
                };
                let mut s = if s.is_tile_maximal() {
                    s
                } else {
                    let rd = dims_attr(&u.attrs);
                    let rank = i.shape.rank();
                    let map = idx((0..rank).filter(|d| !rd.contains(&(*d as i64))));
                    self.inserted_dims(&s, rank, map)?
                };
                // What the reduce's other inputs are sharded as refines it when compatible.
                let n = u.operands().len() / 2;
                for &o in &u.operands()[..n] {
                    if o == id || s.is_manual() {
                        continue;
                    }
                    if let Some(os) = self.cur_sh(o).filter(|x| !x.is_manual() && !x.is_tuple()) {
                        let min = s.num_tiles() + 1;
                        s = self.memo.merge_if_compatible(os, min, &s).1;
                    }
                }
                Some(s)
            }
            Sort => {
                if us.is_tuple() {
                    return Some(intern(sub_sharding(us, &u.shape, index)));
                }
                Some(us.clone())
            }
            Reverse => {
                let dims: Vec<usize> = dims_attr(&u.attrs).iter().map(|&d| d as usize).collect();
                Some(intern(us.reverse_dims(&dims)))
            }
            Outfeed => {
                // The outfeed's sharding covers (its data, the token).
                if index != 0 {
                    return None;
                }
                match &us.kind {
                    ShardingKind::Tuple(e) => {
                        let data = &i.shape;
                        let n = data.leaf_count_nonempty();
                        if data.is_tuple() {
                            Some(intern(Sharding::tuple(e.get(..n)?.to_vec())))
                        } else {
                            e.first().cloned().map(intern)
                        }
                    }
                    _ => Some(self.spread_sh(&i.shape, us.clone())),
                }
            }
            Gather => self.gather_operand_from_output(id, user, index).map(intern),
            Scatter => self
                .scatter_operand_from_output(id, user, index)
                .map(intern),
            Call => {
                let callee = *u.called.first()?;
                if self.caller[callee.index()] != Some(user) {
                    return None;
                }
                let p = m.comp(callee).parameter(index)?;
                self.cur_sh(p).cloned()
            }
            Conditional => {
                if index == 0 {
                    return None;
                }
                let branch = *u.called.get(index - 1)?;
                if self.caller[branch.index()] != Some(user) {
                    return None;
                }
                let p = m.comp(branch).parameter(0)?;
                self.cur_sh(p).cloned()
            }
            _ => compatible_ignoring_type(&i.shape, &u.shape).then(|| us.clone()),
        }
    }

    /// The sharding a concatenate operand should have: the user's, or in non-SPMD mode with a
    /// tiled concatenate dimension, the slice of the tile assignment the operand's rows fall in.
    fn concat_operand_from_user(
        &self,
        id: InstrId,
        user: InstrId,
        index: usize,
    ) -> Option<Sharding> {
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        if us.is_replicated() || self.spmd {
            return Some(us.clone());
        }
        let t = us.as_tiled()?;
        let cdim = dims_attr(&u.attrs).first().copied()? as usize;
        let tdims = t.tile_assignment.dims();
        if tdims[cdim] == 1 {
            return Some(us.clone());
        }
        let start: i64 = u.operands()[..index]
            .iter()
            .map(|&o| self.shape(o).dims()[cdim])
            .sum();
        let tile = (u.shape.dims()[cdim] + tdims[cdim] - 1) / tdims[cdim];
        let first = start / tile;
        let last = (start + self.shape(id).dims()[cdim] + tile - 1) / tile;
        let mut dims: tessera_hlo::sharding::TileDims = tdims.iter().copied().collect();
        dims[cdim] = last - first;
        let n: i64 = dims.iter().product();
        let mut devices = Vec::with_capacity(n as usize);
        let mut idx: SmallVec<[i64; 4]> = SmallVec::from_elem(0, dims.len());
        for l in 0..n {
            let mut rest = l;
            for k in (0..dims.len()).rev() {
                idx[k] = rest % dims[k];
                rest /= dims[k];
            }
            idx[cdim] += first;
            devices.push(t.tile_assignment.device_at(&idx));
        }
        if n == 1 {
            return Some(Sharding::maximal(devices[0]));
        }
        let ta = tessera_hlo::TileAssignment::Explicit { dims, devices };
        Some(Sharding::subgroup(ta, &t.subgroup_types()))
    }

    /// XLA's `InferDotOperandSharding`: the output sharding with the other operand's
    /// non-contracting dimensions replicated, moved to operand `k`'s dimensions, merged with
    /// what the other operand's sharding says about the batch and contracting dimensions.
    fn dot_operand_sharding(&self, user: InstrId, dims: u32, k: usize, mc: bool) -> Option<Sh> {
        let u = self.m.instr(user);
        let us = self.cur_sh(user)?;
        let (op, other) = (u.operand(k), u.operand(1 - k));
        let key = Op::DotOperand {
            dims,
            k,
            mc,
            out_rank: u.shape.rank(),
            op_rank: self.shape(op).rank(),
            other_rank: self.shape(other).rank(),
            other: self.cur_sh(other).filter(|_| self.sp(other)).cloned(),
        };
        self.memo.algebra(us, key, |us, key| {
            let Op::DotOperand {
                dims,
                k,
                mc,
                out_rank,
                op_rank,
                other_rank,
                other,
            } = key
            else {
                unreachable!()
            };
            let dd = self.memo.dot_dims(*dims);
            dot_operand_sharding(
                us,
                &dd,
                *k,
                *mc,
                *out_rank,
                *op_rank,
                *other_rank,
                other.as_deref(),
            )
        })
    }

    // ----- gather / scatter -----
    //
    // XLA's Gather/Scatter cases of InferShardingFromOperands and GetShardingFromUser; the
    // dimension mappings and the sharding algebra are in `crate::gather_scatter`.

    /// The gather `id` in common terms (`None` when its dimension numbers do not fit its
    /// shapes; the verifier reports those).
    fn gather_of(&self, id: InstrId) -> Option<GatherScatter> {
        let i = self.m.instr(id);
        let dn = i.attrs.gather_dims.as_deref()?;
        let slice_sizes = i.attrs.gather_slice_sizes.as_deref()?;
        let (&op, &idx) = (i.operands().first()?, i.operands().get(1)?);
        GatherScatter::gather(
            dn,
            slice_sizes,
            self.shape(op).dims(),
            self.shape(idx).dims(),
            i.shape.rank(),
        )
        .ok()
    }

    /// The scatter `id` in common terms, with its number of operands (and of updates).
    fn scatter_of(&self, id: InstrId) -> Option<(GatherScatter, usize)> {
        let i = self.m.instr(id);
        let dn = i.attrs.scatter_dims.as_deref()?;
        let ops = i.operands();
        let n = ops.len().checked_sub(1)? / 2;
        if n == 0 || ops.len() != 2 * n + 1 {
            return None;
        }
        let g = GatherScatter::scatter(
            dn,
            self.shape(ops[0]).dims(),
            self.shape(ops[n]).dims(),
            self.shape(ops[n + 1]).dims(),
        )
        .ok()?;
        Some((g, n))
    }

    /// For each index component of `indices`, the indices dimension it is an iota along.
    fn gs_iotas(&self, g: &GatherScatter, indices: InstrId) -> Vec<Option<usize>> {
        let caller = |c: CompId| self.caller[c.index()];
        gs::index_component_iotas(
            self.m,
            indices,
            g.index_vector_dim,
            g.index_map.len(),
            &caller,
        )
    }

    /// XLA's gather case of `InferShardingFromOperands`: explicit batching dimensions, index
    /// pass-through, then (SPMD) the implicit parallel dimensions and operand pass-through of
    /// the operand's other dimensions.
    fn forward_gather(&mut self, id: InstrId, mc: bool) -> bool {
        let Some(g) = self.gather_of(id) else {
            return false;
        };
        let i = self.m.instr(id);
        let (op, idx) = (i.operand(0), i.operand(1));
        let mut changed = false;
        if !g.operand_batching.is_empty() {
            changed |= self.gather_parallel_forward(id, &g, &g.explicit_batch(), mc);
        }
        if self.sp(idx) {
            if let Some(s) = gs::output_from_indices(&g, self.cur(idx).unwrap()) {
                changed |= self.improve(id, s, mc, false);
            }
        }
        if self.spmd {
            let implicit = g.implicit_parallel(&self.gs_iotas(&g, idx));
            if let Some(p) = &implicit {
                changed |= self.gather_parallel_forward(id, &g, p, mc);
            }
            if self.sp(op) {
                let s = self.cur(op).unwrap();
                let filtered = match &implicit {
                    Some(p) => s.replicate_on_dims(&p.operand),
                    None => s.clone(),
                };
                if let Some(s) = gs::output_from_operand_passthrough(&g, &filtered) {
                    changed |= self.improve(id, s, mc, false);
                }
            }
        }
        changed
    }

    /// XLA's `InferGatherParallelShardingFromOperands`: the operand's and the indices' tiles on
    /// the parallel dimensions `p`, moved to the output.
    fn gather_parallel_forward(
        &mut self,
        id: InstrId,
        g: &GatherScatter,
        p: &DimMap,
        mc: bool,
    ) -> bool {
        let i = self.m.instr(id);
        let (op, idx) = (i.operand(0), i.operand(1));
        let mut changed = false;
        for (x, dims) in [(op, &p.operand), (idx, &p.indices)] {
            if !self.sp(x) {
                continue;
            }
            let s = self.cur(x).unwrap();
            if let Some(s) = gs::propagate_along_dims(s, dims, &p.output, g.output_rank) {
                changed |= self.improve(id, s, mc, false);
            }
        }
        changed
    }

    /// XLA's scatter case of `InferShardingFromOperands`: explicit batching dimensions, then
    /// (SPMD) each operand's sharding on its output, the implicit parallel dimensions, and each
    /// update's window dimensions passed through to its output. Outside SPMD mode a scatter is
    /// replicated.
    fn forward_scatter(&mut self, id: InstrId, mc: bool) -> bool {
        let Some((g, n)) = self.scatter_of(id) else {
            return false;
        };
        let ops: SmallVec<[InstrId; 3]> = self.m.instr(id).operands().iter().copied().collect();
        let idx = ops[n];
        let mut changed = false;
        if !g.operand_batching.is_empty() {
            changed |= self.scatter_parallel_forward(id, &g, &g.explicit_batch(), n, mc);
        }
        if !self.spmd {
            for k in 0..n {
                changed |= self.improve_leaf(id, k, Sharding::replicated(), mc);
            }
            return changed;
        }
        for (k, &op) in ops[..n].iter().enumerate() {
            if self.sp(op) {
                let s = self.cur(op).unwrap().clone();
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        if !self.sp(idx) && !ops[n + 1..].iter().any(|&u| self.sp(u)) {
            return changed;
        }
        if let Some(p) = g.implicit_parallel(&self.gs_iotas(&g, idx)) {
            changed |= self.scatter_parallel_forward(id, &g, &p, n, mc);
        }
        for (k, &upd) in ops[n + 1..].iter().enumerate() {
            if !self.sp(upd) {
                continue;
            }
            if let Some(s) = gs::operand_from_output_passthrough(&g, self.cur(upd).unwrap()) {
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        changed
    }

    /// XLA's `InferScatterParallelShardingFromOperands`: the tiles of the operands, the indices
    /// and the updates on the parallel dimensions `p`, moved to the output's operand dimensions.
    fn scatter_parallel_forward(
        &mut self,
        id: InstrId,
        g: &GatherScatter,
        p: &DimMap,
        n: usize,
        mc: bool,
    ) -> bool {
        let ops: SmallVec<[InstrId; 3]> = self.m.instr(id).operands().iter().copied().collect();
        let rank = g.operand.len();
        let mut changed = false;
        for (k, &op) in ops[..n].iter().enumerate() {
            if !self.sp(op) {
                continue;
            }
            let s = gs::propagate_along_dims(self.cur(op).unwrap(), &p.operand, &p.operand, rank);
            if let Some(s) = s {
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        if self.sp(ops[n]) {
            let s =
                gs::propagate_along_dims(self.cur(ops[n]).unwrap(), &p.indices, &p.operand, rank);
            if let Some(s) = s {
                for k in 0..n {
                    changed |= self.improve_leaf(id, k, s.clone(), mc);
                }
            }
        }
        for (k, &upd) in ops[n + 1..].iter().enumerate() {
            if !self.sp(upd) {
                continue;
            }
            let s = gs::propagate_along_dims(self.cur(upd).unwrap(), &p.output, &p.operand, rank);
            if let Some(s) = s {
                changed |= self.improve_leaf(id, k, s, mc);
            }
        }
        changed
    }

    /// XLA's `MaybeImproveInstructionSubSharding`: `improve` on element `k` of a tuple-shaped
    /// instruction (the whole instruction when it is an array); the other elements start
    /// replicated when the instruction had no sharding.
    fn improve_leaf(&mut self, id: InstrId, k: usize, new: Sharding, mc: bool) -> bool {
        let shape = self.shape(id);
        if !shape.is_tuple() {
            return self.improve(id, new, mc, false);
        }
        let Some(elem) = shape.tuple_elements().get(k) else {
            return false;
        };
        let (start, len) = leaf_range(shape, k);
        if len != 1 || !new.is_spatially_partitioned() || !fits(&new, elem) {
            return false;
        }
        let mut leaves = match self.cur(id).map(|s| &s.kind) {
            Some(ShardingKind::Tuple(e)) if e.len() == shape.leaf_count() => e.clone(),
            Some(_) => return false,
            None => {
                let mut leaves = vec![Sharding::replicated(); shape.leaf_count()];
                leaves[start] = new;
                self.set(id, Sharding::tuple(leaves));
                return true;
            }
        };
        let Some(better) = improved_array_sharding(&leaves[start], new, elem.rank(), mc) else {
            return false;
        };
        leaves[start] = better;
        self.set(id, Sharding::tuple(leaves));
        true
    }

    /// XLA's gather case of `GetShardingFromUser`: the indices from the output's batch
    /// dimensions; in SPMD mode the operand from the output's parallel and pass-through
    /// dimensions.
    fn gather_operand_from_output(
        &self,
        id: InstrId,
        user: InstrId,
        _index: usize,
    ) -> Option<Sharding> {
        let g = self.gather_of(user)?;
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        if u.operand(1) == id {
            return gs::indices_from_output(&g, us);
        }
        if !self.spmd {
            return None;
        }
        let p = g.parallel(&self.gs_iotas(&g, u.operand(1)));
        gs::gather_operand_from_output(&g, us, &p)
    }

    /// XLA's scatter case of `GetShardingFromUser`: an operand takes its output's sharding; the
    /// indices the common sharding of what the sharded updates say about them; an update what
    /// its output says (parallel and pass-through dimensions, SPMD only) merged with what the
    /// indices say, or only the latter.
    fn scatter_operand_from_output(
        &self,
        id: InstrId,
        user: InstrId,
        _index: usize,
    ) -> Option<Sharding> {
        let (g, n) = self.scatter_of(user)?;
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        let ops = u.operands();
        let element = |k: usize| -> Sharding {
            if u.shape.is_tuple() {
                sub_sharding(us, &u.shape, k)
            } else {
                us.clone()
            }
        };
        if let Some(k) = ops[..n].iter().position(|&o| o == id) {
            return Some(element(k));
        }
        let idx = ops[n];
        if idx == id {
            let from_updates: Vec<Sharding> = ops[n + 1..]
                .iter()
                .filter(|&&upd| self.sp(upd))
                .filter_map(|&upd| gs::indices_from_output(&g, self.cur(upd).unwrap()))
                .collect();
            return common_sharding(&from_updates);
        }
        let k = ops[n + 1..].iter().position(|&o| o == id)?;
        let from_indices = if self.sp(idx) {
            gs::output_from_indices(&g, self.cur(idx).unwrap())
        } else {
            Some(Sharding::replicated())
        };
        if self.spmd {
            let p = g.parallel(&self.gs_iotas(&g, idx));
            if let Some(mut from_output) = gs::scatter_update_from_output(&g, &element(k), &p) {
                if let Some(fi) = &from_indices {
                    let min = from_output.num_tiles() + 1;
                    merge_if_compatible(fi, min, &mut from_output);
                }
                if !from_output.is_tile_maximal() {
                    return Some(from_output);
                }
            }
        }
        from_indices.filter(|s| !s.is_tile_maximal())
    }

    // ----- partially specified annotations -----

    /// XLA's `InferUnspecifiedDimsFromOperand` for partial annotation `id` (see `manual.rs`);
    /// clears the caches around what changed.
    fn refine_unspecified_from_operand(&mut self, id: InstrId, dims: &[usize]) -> bool {
        let Some(conv) = self.unspecified_from_operand(id, dims) else {
            return false;
        };
        self.clear_cache(id, conv);
        true
    }

    /// XLA's `InferUnspecifiedDimsFromUsers` for partial annotation `id` (see `manual.rs`);
    /// clears the caches around what changed and marks the annotation (and its conversion op)
    /// done.
    fn refine_unspecified_from_users(&mut self, id: InstrId, dims: &[usize], level: u8) -> bool {
        let Some(conv) = self.unspecified_from_users(id, dims, level) else {
            return false;
        };
        self.clear_cache(id, conv);
        self.done_bwd[id.index()] = true;
        if let Some(c) = conv {
            self.done_bwd[c.index()] = true;
        }
        true
    }

    // ----- memoized algebra -----

    /// The number (see `Memo::dot_dims_id`) of the dimension maps of dot or convolution `id`,
    /// computed once per instruction; `None` without dimension numbers.
    fn dims_of(&self, id: InstrId) -> Option<u32> {
        self.memo.instr_dot_dims(id.index(), || {
            let i = self.m.instr(id);
            let (l, r) = (*i.operands().first()?, *i.operands().get(1)?);
            match i.opcode() {
                Opcode::Dot => Some(dot_dims(
                    i.attrs.dot_dims.as_deref()?,
                    self.shape(l).rank(),
                    self.shape(r).rank(),
                )),
                Opcode::Convolution => Some(conv_dims(
                    i.attrs.conv_dims.as_deref()?,
                    i.attrs.window.as_deref(),
                    self.shape(l).dims(),
                    self.shape(r).dims(),
                    i.shape.dims(),
                    i.attrs.feature_group_count,
                    i.attrs.batch_group_count,
                )),
                _ => None,
            }
        })
    }

    /// `s.transpose(perm)`, normalized.
    fn transposed(&self, s: &Sh, perm: SmallVec<[usize; 4]>) -> Option<Sh> {
        self.memo.algebra(s, Op::Transpose(perm), |s, op| {
            let Op::Transpose(perm) = op else {
                unreachable!()
            };
            s.transpose(perm).map(|t| t.normalized())
        })
    }

    /// `s.propagate_through_reshape(from, to)` across reshape `reshape`: from its operand to
    /// its result (`dir` 0) or back (1).
    fn through_reshape(&self, s: &Sh, reshape: InstrId, dir: usize) -> Sh {
        let (a, b) = (
            self.shape(self.m.instr(reshape).operand(0)),
            self.shape(reshape),
        );
        let (from, to) = if dir == 0 {
            (a.dims(), b.dims())
        } else {
            (b.dims(), a.dims())
        };
        let key = Op::ThroughReshape(self.memo.reshape_id(reshape.index(), dir, from, to));
        self.memo
            .algebra(s, key, |s, _| Some(s.propagate_through_reshape(from, to)))
            .expect("reshape propagation always answers")
    }

    /// `s.replicate_on_dims(dims)`.
    fn replicated_on(&self, s: &Sh, dims: &[usize]) -> Sh {
        let key = Op::ReplicateOnDims(idx(dims.iter().copied()));
        self.memo
            .algebra(s, key, |s, op| {
                let Op::ReplicateOnDims(dims) = op else {
                    unreachable!()
                };
                Some(s.replicate_on_dims(dims))
            })
            .expect("partial replication always answers")
    }

    /// `s.replicate_on_dims(dims).remove_dims(dims)`.
    fn replicated_and_removed(&self, s: &Sh, dims: &[usize]) -> Option<Sh> {
        let key = Op::ReplicateAndRemove(idx(dims.iter().copied()));
        self.memo.algebra(s, key, |s, op| {
            let Op::ReplicateAndRemove(dims) = op else {
                unreachable!()
            };
            s.replicate_on_dims(dims).remove_dims(dims)
        })
    }

    /// `s.insert_dims(rank, map)`.
    fn inserted_dims(&self, s: &Sh, rank: usize, map: SmallVec<[usize; 4]>) -> Option<Sh> {
        self.memo.algebra(s, Op::InsertDims(rank, map), |s, op| {
            let Op::InsertDims(rank, map) = op else {
                unreachable!()
            };
            s.insert_dims(*rank, map)
        })
    }

    /// [`spread`] on handles: `s` for every leaf of a tuple shape, `s` itself for an array.
    fn spread_sh(&self, shape: &Shape, s: Sh) -> Sh {
        if shape.is_tuple() {
            self.memo.intern(spread(shape, s.to_sharding()))
        } else {
            s
        }
    }

    // ----- the report -----

    /// Instructions of computations the pass shards (the entry and called bodies) left
    /// without a sharding, with the reason.
    fn undecided(&self) -> Vec<(InstrId, String)> {
        let m = self.m;
        let mut out = Vec::new();
        // Loop conditions are reported too, though not in the computation map.
        let mut conditions = vec![false; m.comp_capacity()];
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                if let Some(cond) = m.instr(id).while_condition() {
                    if self.is_mapped_caller(id) {
                        conditions[cond.index()] = true;
                    }
                }
            }
        }
        for &c in m.computations() {
            if c != self.entry && self.caller[c.index()].is_none() && !conditions[c.index()] {
                continue;
            }
            for &id in m.comp(c).instructions() {
                if self.sh[id.index()].is_some() {
                    continue;
                }
                let i = m.instr(id);
                let reason = if Some(id) == self.entry_root && !self.allow_output {
                    "the entry output may not take a sharding (allow_spmd_sharding_propagation_to_output is off)".to_string()
                } else if i.opcode() == Opcode::Parameter
                    && c == self.entry
                    && !self.param_allowed(id)
                {
                    format!(
                        "entry parameter {} may not take a sharding (allow_spmd_sharding_propagation_to_parameters is off)",
                        i.attrs.parameter_number
                    )
                } else if self.is_root(id) && c != self.entry && self.caller[c.index()].is_none() {
                    "the root of a loop condition takes no sharding (XLA leaves it to the partitioner)"
                        .to_string()
                } else if !self.supports_partitioning(id, self.allow_output, self.params_any) {
                    format!(
                        "`{}` cannot be partitioned here and no operand is replicated",
                        i.opcode()
                    )
                } else {
                    "no sharding reaches it from its operands or users".to_string()
                };
                out.push((id, reason));
            }
        }
        out
    }
}

/// XLA's `GetFirstTargetDimToMoveShardingTiles`: the first other dimension of `shape` whose
/// size the tiles of `source` times its own tiles divide (`source` must be tiled and not of
/// size 1).
fn first_target_dim_to_move_tiles(shape: &Shape, s: &Sharding, source: usize) -> Option<usize> {
    let t = s.as_tiled()?;
    let dims = shape.dims();
    let tiles = t.tile_assignment.dims();
    if dims.len() < 2 || dims.get(source) == Some(&1) || tiles.get(source).is_none_or(|&n| n == 1) {
        return None;
    }
    (0..dims.len()).find(|&d| d != source && dims[d] % (tiles[source] * tiles[d]) == 0)
}

/// XLA's `IsSubTilingOrEqualSharding(shape, sub, of)`: every device's piece of `shape` under
/// `sub` lies inside its piece under `of` (manual shardings never are).
fn is_sub_tiling(shape: &Shape, sub: &Sharding, of: &Sharding) -> bool {
    if sub.is_manual() || of.is_manual() {
        return false;
    }
    if of.is_tile_maximal() {
        return true;
    }
    if sub.is_tile_maximal() {
        return false;
    }
    let (Some(a), Some(b)) = (sub.as_tiled(), of.as_tiled()) else {
        return false;
    };
    if a.data_rank() != b.data_rank() || a.data_rank() != shape.rank() {
        return false;
    }
    let dims = shape.dims();
    a.tile_assignment.devices().into_iter().all(|d| {
        match (sub.device_bounds(dims, d), of.device_bounds(dims, d)) {
            (Some((s1, l1)), Some((s2, l2))) => {
                (0..dims.len()).all(|k| l1[k] <= s1[k] || (s1[k] >= s2[k] && l1[k] <= l2[k]))
            }
            _ => false,
        }
    })
}

fn dims_attr(a: &Attrs) -> &[i64] {
    a.dimensions.as_deref().unwrap_or(&[])
}

/// A sharding that can stand on `shape`: tiled data rank equals the array rank, a tuple has
/// one leaf per leaf.
fn fits(s: &Sharding, shape: &Shape) -> bool {
    match (&s.kind, shape) {
        (ShardingKind::Tuple(e), Shape::Tuple(_)) => e.len() == shape.leaf_count(),
        (ShardingKind::Tuple(_), _) => false,
        (_, Shape::Tuple(_)) => false,
        (ShardingKind::Tiled(t), _) => t.data_rank() == shape.rank(),
        _ => true,
    }
}

/// The sharding an array of rank `rank` sharded `old` takes when offered `new` (the array case
/// of `Propagator::improve` without aggressive resharding), or `None` when `new` is no
/// improvement.
fn improved_array_sharding(
    old: &Sharding,
    new: Sharding,
    rank: usize,
    mc: bool,
) -> Option<Sharding> {
    let tiles = new.num_tiles();
    let mut new = new;
    if !merge_sharding(old, &mut new, mc) {
        return None;
    }
    if !old.is_tile_maximal() && new.num_tiles() == tiles {
        let (ot, nt) = (old.as_tiled()?, new.as_tiled()?);
        let mut diff = Vec::new();
        for d in 0..rank {
            let (a, b) = (ot.tile_assignment.dims()[d], nt.tile_assignment.dims()[d]);
            if a == b {
                continue;
            }
            if a != 1 {
                return None;
            }
            diff.push(d);
        }
        if !new.replicate_on_dims(&diff).same_as(old) {
            return None;
        }
    }
    (&new != old).then_some(new)
}

/// XLA's `FindCommonSharding`: the merge of all `shardings` when each refines the merge so
/// far, else the first one; `None` for none.
fn common_sharding(shardings: &[Sharding]) -> Option<Sharding> {
    let first = shardings.first()?;
    let mut common = first.clone();
    for s in &shardings[1..] {
        let min = common.num_tiles();
        if !merge_if_compatible(s, min, &mut common) {
            return Some(first.clone());
        }
    }
    Some(common)
}
