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

mod algebra;
mod backward;
mod fixed_point;
mod forward;
mod indexed;
mod manual;
mod memo;
mod setup;

use algebra::{
    common_sharding, dims_attr, first_target_dim_to_move_tiles, fits, improved_array_sharding,
    is_sub_tiling,
};
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
