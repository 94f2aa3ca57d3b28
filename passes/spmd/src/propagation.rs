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
use tessera_pass::options::{parse_bool, unknown_key, OptionDoc, PassOptions};
use tessera_pass::registry::RegisteredPass;
use tessera_pass::{Pass, PassError, Result};

use crate::dims::{conv_dims, dot_dims, DotDims};
use crate::gather_scatter::{self as gs, DimMap, GatherScatter};

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

fn parse_bools(value: &str) -> Result<Vec<bool>, String> {
    let v = value.trim_matches(|c| c == '{' || c == '}');
    v.split(',').map(|x| parse_bool(x.trim())).collect()
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
                self.propagate_to_parameters = parse_bools(value)?
            }
            "propagate_to_output" | "allow_spmd_sharding_propagation_to_output" => {
                self.propagate_to_output = parse_bools(value)?
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
        for u in &report.undecided {
            tracing::warn!(instruction = %u.name, "sharding-propagation: no sharding: {}", u.reason);
        }
        self.report = report;
        Ok(changed)
    }
}

/// Runs sharding propagation on `module`; returns whether it changed and the report.
pub fn propagate(
    module: &mut Module,
    options: &PropagationOptions,
) -> Result<(bool, PropagationReport)> {
    let Some(entry) = module.entry() else {
        return Ok((false, PropagationReport::default()));
    };
    let mut changed = false;
    let mut unspecified: Vec<(InstrId, Vec<usize>)> = Vec::new();
    changed |= process_sharding_custom_calls(module, &mut unspecified)?;

    let m: &Module = module;
    let mut p = Propagator::new(m, entry, options);
    for (id, dims) in unspecified {
        p.unspecified[id.index()] = Some(dims);
    }
    p.run();
    let mut report = PropagationReport {
        iterations: p.iterations,
        inferred_from_operands: p.from_operands,
        inferred_from_users: p.from_users,
        undecided: Vec::new(),
    };
    let undecided = p.undecided();
    let mut table = std::mem::take(&mut p.sh);
    let original = std::mem::take(&mut p.original);
    drop(p);
    for (id, reason) in undecided {
        if options.replicate_undecided {
            table[id.index()] = Some(replicated_for(&module.instr(id).shape));
        }
        report.undecided.push(Undecided {
            instr: id,
            name: module.instr(id).name.clone(),
            reason,
        });
    }
    // Per-element output flags: elements that may not change keep what they had.
    let flags: Option<Vec<bool>> = if options.propagate_to_output.len() > 1 {
        Some(options.propagate_to_output.clone())
    } else {
        module
            .config
            .allow_spmd_sharding_propagation_to_output
            .clone()
            .filter(|v| v.len() > 1)
    };
    if let (Some(flags), Some(root)) = (flags, module.comp(entry).root()) {
        let shape = &module.instr(root).shape;
        if let Some(ShardingKind::Tuple(leaves)) = table[root.index()].as_mut().map(|s| &mut s.kind)
        {
            let before = original[root.index()].as_ref().map(|s| expand(shape, s));
            for (e, &allowed) in flags.iter().enumerate().take(shape.tuple_elements().len()) {
                if allowed {
                    continue;
                }
                let (start, len) = leaf_range(shape, e);
                for k in start..start + len {
                    let old = match before.as_ref().map(|s| &s.kind) {
                        Some(ShardingKind::Tuple(b)) => b.get(k).cloned(),
                        _ => None,
                    };
                    if let Some(slot) = leaves.get_mut(k) {
                        *slot = old.unwrap_or_else(Sharding::replicated);
                    }
                }
            }
        }
    }
    for (k, slot) in table.iter_mut().enumerate() {
        let id = InstrId::new(k);
        let Some(instr) = module.try_instr(id) else {
            continue;
        };
        let old = &original[k];
        let mut new = slot.take();
        // Keep the user's spelling where only our tuple expansion differs.
        if new.is_some() && new == old.as_ref().map(|s| expand(&instr.shape, s)) {
            new = old.clone();
        }
        if !options.propagate_metadata {
            if let Some(s) = new.as_mut() {
                strip_metadata(s);
            }
        }
        if new != *old {
            module.instr_mut(id).sharding = new;
            changed = true;
        }
    }
    Ok((changed, report))
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
    i.opcode == Opcode::CustomCall
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
/// its name and sharding (as XLA's pass does, so later passes need no special case). A fully
/// specified annotation also goes onto its operand when that has none.
fn process_sharding_custom_calls(
    module: &mut Module,
    unspecified: &mut Vec<(InstrId, Vec<usize>)>,
) -> Result<bool> {
    let mut changed = false;
    let comps: Vec<CompId> = module.computations().to_vec();
    for comp in comps {
        let mut order = analysis::post_order(module, comp);
        order.reverse();
        for id in order {
            let i = module.instr(id);
            if !is_custom_call(i, "Sharding") {
                continue;
            }
            let Some(sharding) = i.sharding.clone() else {
                return Err(PassError::Failed(format!(
                    "%{}: a Sharding custom-call must carry a sharding",
                    i.name
                )));
            };
            let dims = parse_unspecified_dims(i)
                .map_err(|e| PassError::Failed(format!("%{}: backend_config: {e}", i.name)))?;
            let Some(&operand) = i.operands().first() else {
                return Err(PassError::Failed(format!(
                    "%{}: a Sharding custom-call needs one operand",
                    i.name
                )));
            };
            let name = i.name.clone();
            let mut copy = Instruction::new(name.clone(), Opcode::Copy, i.shape.clone())
                .with_operands(&[operand]);
            copy.sharding = Some(sharding.clone());
            copy.metadata = i.metadata.clone();
            copy.frontend_attributes = i.frontend_attributes.clone();
            let preds = i.control_predecessors().to_vec();
            let succs = i.control_successors().to_vec();
            let tmp = module.unique_name(&format!("{name}.annotation"));
            module.rename_instruction(id, tmp)?;
            let new = module.add_instruction(comp, copy)?;
            // The copy takes the annotation's place in the stored order and the schedule.
            let mut instrs: Vec<InstrId> = module.comp(comp).instructions().to_vec();
            instrs.pop();
            if let Some(pos) = instrs.iter().position(|&x| x == id) {
                instrs.insert(pos, new);
            } else {
                instrs.push(new);
            }
            module.set_instruction_order(comp, instrs);
            if let Some(s) = module.schedule.as_mut() {
                if let Some(seq) = s.sequences.get_mut(&comp) {
                    for x in seq.iter_mut() {
                        if *x == id {
                            *x = new;
                        }
                    }
                }
            }
            for p in preds {
                module.add_control_dependency(p, new);
            }
            for s in succs {
                module.add_control_dependency(new, s);
            }
            module.replace_all_uses_with(id, new)?;
            if let Some(s) = module.schedule.as_mut() {
                if let Some(seq) = s.sequences.get_mut(&comp) {
                    seq.retain(|&x| x != id);
                }
            }
            let users_left = module.users(id).to_vec();
            debug_assert!(users_left.is_empty());
            remove_with_edges(module, id)?;
            changed = true;
            if !dims.is_empty() {
                unspecified.push((new, dims));
            } else if module.instr(operand).sharding.is_none() {
                module.instr_mut(operand).sharding = Some(sharding);
            }
        }
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
        && !(i.opcode.is_elementwise() || is_custom_call(i, "Sharding"))
        && !matches!(
            i.opcode,
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
    !(level < 2 && i.opcode == Broadcast)
}

fn is_passthrough_custom_call(i: &Instruction, m: &Module) -> bool {
    let Some(cc) = i.attrs.custom_call.as_ref() else {
        return false;
    };
    if cc.target == "Sharding" || cc.target == "X64Combine" {
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
    )
}

/// Leaf range `(start, len)` of tuple element `index` in the flattened leaves of `shape`.
fn leaf_range(shape: &Shape, index: usize) -> (usize, usize) {
    let e = shape.tuple_elements();
    let start = e[..index].iter().map(Shape::leaf_count).sum();
    (start, e.get(index).map_or(0, Shape::leaf_count))
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

struct Propagator<'m> {
    m: &'m Module,
    entry: CompId,
    entry_root: Option<InstrId>,
    allow_output: bool,
    spmd: bool,
    /// Per entry parameter number: may it take a sharding?
    allow_params: Vec<bool>,
    sh: Vec<Option<Sharding>>,
    original: Vec<Option<Sharding>>,
    provided: Vec<bool>,
    unspecified: Vec<Option<Vec<usize>>>,
    /// The while/conditional/call instruction that calls a computation (XLA's computation map).
    caller: Vec<Option<InstrId>>,
    /// Post orders of the computations the pass walks, in module order.
    orders: Vec<(CompId, Vec<InstrId>)>,
    done_fwd: Vec<bool>,
    done_bwd: Vec<bool>,
    iterations: usize,
    from_operands: usize,
    from_users: usize,
}

impl<'m> Propagator<'m> {
    fn new(m: &'m Module, entry: CompId, o: &PropagationOptions) -> Propagator<'m> {
        let cap = m.instr_capacity();
        let mut sh: Vec<Option<Sharding>> = vec![None; cap];
        for &c in m.computations() {
            for &id in m.comp(c).instructions() {
                let i = m.instr(id);
                sh[id.index()] = i.sharding.as_ref().map(|s| expand(&i.shape, s));
            }
        }
        let original: Vec<Option<Sharding>> = (0..cap)
            .map(|k| {
                m.try_instr(InstrId::new(k))
                    .and_then(|i| i.sharding.clone())
            })
            .collect();
        let cfg = &m.config;
        let pick = |v: &[bool], k: usize| -> bool {
            if v.len() == 1 {
                v[0]
            } else {
                v.get(k).copied().unwrap_or(false)
            }
        };
        let allow_output = o.propagate_to_output.iter().any(|&b| b)
            || cfg
                .allow_spmd_sharding_propagation_to_output
                .as_ref()
                .is_some_and(|v| v.iter().any(|&b| b));
        let n_params = m.comp(entry).num_parameters();
        let allow_params: Vec<bool> = (0..n_params)
            .map(|k| {
                pick(&o.propagate_to_parameters, k)
                    || cfg
                        .allow_spmd_sharding_propagation_to_parameters
                        .as_ref()
                        .is_some_and(|v| pick(v, k))
            })
            .collect();
        let mut p = Propagator {
            m,
            entry,
            entry_root: m.comp(entry).root(),
            allow_output,
            spmd: o.is_spmd,
            allow_params,
            sh,
            original,
            provided: vec![false; cap],
            unspecified: vec![None; cap],
            caller: vec![None; m.comp_capacity()],
            orders: Vec::new(),
            done_fwd: vec![false; cap],
            done_bwd: vec![false; cap],
            iterations: 0,
            from_operands: 0,
            from_users: 0,
        };
        p.build_computation_map();
        for (k, s) in p.sh.iter().enumerate() {
            p.provided[k] = s.is_some();
        }
        if !p.allow_output {
            if let Some(r) = p.entry_root {
                p.provided[r.index()] = true;
            }
        }
        for &c in m.computations() {
            p.orders.push((c, analysis::post_order(m, c)));
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
                match i.opcode {
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
                        self.sh[r.index()] = Some(s.clone());
                    }
                }
                match i.opcode {
                    Opcode::While => {
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
        match i.opcode {
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
        match i.opcode {
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
        self.sh[id.index()].as_ref()
    }

    fn sp(&self, id: InstrId) -> bool {
        self.cur(id).is_some_and(Sharding::is_spatially_partitioned)
    }

    fn shape(&self, id: InstrId) -> &'m Shape {
        &self.m.instr(id).shape
    }

    fn is_root(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        self.m.comp(i.parent).root() == Some(id)
    }

    fn non_root_users_is_one(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        let root = self.m.comp(i.parent).root();
        i.users().iter().filter(|&&u| Some(u) != root).count() == 1
    }

    // ----- the driver -----

    fn run(&mut self) {
        for level in 0..4u8 {
            self.run_level(level);
        }
    }

    fn clear_cache(&mut self, id: InstrId, for_users: Option<InstrId>) {
        let m = self.m;
        for &op in m.instr(id).operands() {
            self.done_bwd[op.index()] = false;
        }
        for &u in m.instr(for_users.unwrap_or(id)).users() {
            self.done_fwd[u.index()] = false;
        }
    }

    fn run_level(&mut self, level: u8) {
        self.done_fwd.iter_mut().for_each(|x| *x = false);
        self.done_bwd.iter_mut().for_each(|x| *x = false);
        let may_merge = self.spmd && level > 0;
        let orders = std::mem::take(&mut self.orders);
        let mut changed_last = true;
        while changed_last {
            changed_last = false;
            self.iterations += 1;
            for (_, order) in &orders {
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
                                self.clear_cache(id, None);
                                self.done_fwd[id.index()] = true;
                                changed_last = true;
                            }
                        }
                        continue;
                    }
                    self.done_fwd[id.index()] = true;
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
                                self.clear_cache(id, None);
                                self.done_bwd[id.index()] = true;
                                changed_last = true;
                            }
                        }
                        continue;
                    }
                    self.done_bwd[id.index()] = true;
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

    /// After `id` changed: when it is a while/conditional/call, or a parameter or root of a
    /// computation one of those calls, every related instruction takes its sharding.
    fn computation_propagation(&mut self, id: InstrId) -> Vec<InstrId> {
        let mut changed = Vec::new();
        let mut work = vec![id];
        while let Some(x) = work.pop() {
            let i = self.m.instr(x);
            let mut searches: SmallVec<[InstrId; 2]> = SmallVec::new();
            if self.is_mapped_caller(x) {
                searches.push(x);
            }
            if i.opcode == Opcode::Parameter || self.is_root(x) {
                if let Some(c) = self.caller[i.parent.index()] {
                    searches.push(c);
                }
            }
            let Some(s) = self.sh[x.index()].clone() else {
                continue;
            };
            for search in searches {
                let related = self.related(search);
                if !related.contains(&x) {
                    continue;
                }
                for r in related {
                    if self.provided[r.index()] && self.sh[r.index()].is_some() {
                        continue;
                    }
                    if self.sh[r.index()].as_ref() != Some(&s) {
                        self.sh[r.index()] = Some(s.clone());
                        changed.push(r);
                        work.push(r);
                    }
                }
            }
        }
        changed
    }

    /// XLA's `MaybeImproveInstructionSharding`.
    fn improve(&mut self, id: InstrId, new: Sharding, may_combine: bool, aggressive: bool) -> bool {
        let shape = self.shape(id);
        let mut new = new;
        if !new.is_spatially_partitioned() || !fits(&new, shape) {
            return false;
        }
        let Some(old) = self.sh[id.index()].as_ref() else {
            self.sh[id.index()] = Some(new);
            return true;
        };
        let tiles = new.num_tiles();
        if !merge_sharding(old, &mut new, may_combine) {
            return false;
        }
        if !aggressive && shape.is_array() && !old.is_tile_maximal() && new.num_tiles() == tiles {
            let (Some(ot), Some(nt)) = (old.as_tiled(), new.as_tiled()) else {
                return false;
            };
            let mut diff = Vec::new();
            for d in 0..shape.rank() {
                let (a, b) = (ot.tile_assignment.dims()[d], nt.tile_assignment.dims()[d]);
                if a == b {
                    continue;
                }
                if a != 1 {
                    return false;
                }
                diff.push(d);
            }
            if !new.replicate_on_dims(&diff).same_as(old) {
                return false;
            }
        }
        if &new == old {
            return false;
        }
        self.sh[id.index()] = Some(new);
        true
    }

    // ----- which instructions may be sharded -----

    fn param_allowed(&self, id: InstrId) -> bool {
        let i = self.m.instr(id);
        if self.caller[i.parent.index()].is_some() {
            return true;
        }
        i.parent == self.entry
            && self
                .allow_params
                .get(i.attrs.parameter_number as usize)
                .copied()
                .unwrap_or(false)
    }

    /// XLA's `SupportSpatialPartitioning`.
    fn supports_partitioning(&self, id: InstrId, allow_output: bool) -> bool {
        use Opcode::*;
        let i = self.m.instr(id);
        if self.is_root(id)
            && self.caller[i.parent.index()].is_none()
            && !(Some(id) == self.entry_root && allow_output)
        {
            return false;
        }
        if i.opcode.is_elementwise() || i.opcode == Map || (i.opcode == Rng && self.spmd) {
            return true;
        }
        match i.opcode {
            Broadcast | Concatenate | Conditional | Constant | Convolution
            | OptimizationBarrier | Dot | DynamicSlice | DynamicUpdateSlice | Gather
            | GetTupleElement | Infeed | Iota | Pad | ReduceWindow | Reshape | Scatter
            | SelectAndScatter | Slice | Sort | Transpose | Tuple | While | Reduce
            | RngBitGenerator | Call => true,
            Reverse => self.spmd,
            AllReduce | ReduceScatter => i.attrs.channel_id.is_none(),
            Parameter => self.param_allowed(id),
            CustomCall => self.spmd && is_passthrough_custom_call(i, self.m),
            _ => false,
        }
    }

    // ----- forward -----

    /// The operand with the most specific sharding (XLA's `PickRepresentativeOperand`).
    fn representative(&self, id: InstrId) -> Option<InstrId> {
        use Opcode::*;
        let i = self.m.instr(id);
        match i.opcode {
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
        if self.cur(id).is_some_and(Sharding::is_manual) {
            return false;
        }
        // Manual shardings flow into everything computed from a manual value.
        if self.cur(id).is_none()
            && (i.shape.is_array() || matches!(i.opcode, Reduce | Sort | ReduceWindow))
        {
            for &op in i.operands() {
                if !self.cur(op).is_some_and(Sharding::is_manual) {
                    continue;
                }
                if level == 0 && matches!(i.opcode, Concatenate | DynamicSlice) {
                    return false;
                }
                self.sh[id.index()] = Some(spread(&i.shape, Sharding::manual()));
                return true;
            }
        }
        let mc = self.spmd && level > 0;
        if !self.supports_partitioning(id, self.allow_output) {
            // An unpartitionable array op next to a replicated operand is replicated too.
            if i.shape.is_tuple()
                || i.operands().is_empty()
                || self.is_root(id)
                || i.has_side_effect()
            {
                return false;
            }
            for &op in i.operands() {
                if let Some(s) = self.cur(op) {
                    if s.is_tile_maximal() && !matches!(s.kind, ShardingKind::Maximal(_)) {
                        let s = s.clone();
                        return self.improve(id, s, mc, false);
                    }
                }
            }
            return false;
        }
        let aggressive = self.non_root_users_is_one(id);
        match i.opcode {
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
                if s.is_manual() {
                    let changed = self.cur(id) != Some(&s);
                    self.sh[id.index()] = Some(s);
                    return changed;
                }
                self.improve(id, s, mc, aggressive)
            }
            Tuple => self.forward_tuple(id),
            Reduce => self.forward_reduce(id, mc, aggressive),
            Broadcast => {
                if level < 3 {
                    return false;
                }
                let op = i.operand(0);
                let Some(s) = self
                    .cur(op)
                    .filter(|s| s.is_spatially_partitioned() && !s.is_replicated())
                else {
                    return false;
                };
                let map: Vec<usize> = dims_attr(&i.attrs).iter().map(|&d| d as usize).collect();
                let Some(new) = s.insert_dims(i.shape.rank(), &map) else {
                    return false;
                };
                self.improve(id, new, mc, aggressive)
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
                let s = self.cur(op).unwrap().clone();
                self.improve(id, s, mc, aggressive)
            }
            Convolution => self.forward_convolution(id, mc),
            Dot => {
                let (l, r) = (i.operand(0), i.operand(1));
                let Some(dn) = i.attrs.dot_dims.as_deref() else {
                    return false;
                };
                let dd = dot_dims(dn, self.shape(l).rank(), self.shape(r).rank());
                self.forward_dot(id, &dd, mc)
            }
            Transpose => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let perm: Vec<usize> = dims_attr(&i.attrs).iter().map(|&d| d as usize).collect();
                let Some(s) = self.cur(op).unwrap().transpose(&perm) else {
                    return false;
                };
                self.improve(id, s.normalized(), mc, aggressive)
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
                let s = self.cur(op).unwrap().clone();
                self.improve(id, s, mc, aggressive)
            }
            Reshape => {
                let op = i.operand(0);
                if !self.sp(op) {
                    return false;
                }
                let s = self.cur(op).unwrap();
                match s.reshape_through(self.shape(op).dims(), i.shape.dims()) {
                    Some(new) => self.improve(id, new, mc, aggressive),
                    None => {
                        if self.cur(id).is_none() {
                            let r = s.replicate_all_data_dims(Some(i.shape.rank()));
                            self.sh[id.index()] = Some(r);
                            return true;
                        }
                        false
                    }
                }
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
                let Some(c) = self.caller[i.parent.index()] else {
                    return false;
                };
                let ci = m.instr(c);
                let op = match ci.opcode {
                    Conditional => {
                        let Some(b) = ci.called.iter().position(|&x| x == i.parent) else {
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
                let Some(s) = op.and_then(|o| self.cur(o)).cloned() else {
                    return false;
                };
                self.improve(id, s, mc, false)
            }
            Sort => {
                let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
                    return false;
                };
                let s = self.cur(op).unwrap().clone();
                let sort_dim = dims_attr(&i.attrs).first().copied().unwrap_or(0) as usize;
                if s.as_tiled().is_some_and(|t| {
                    t.tile_assignment
                        .dims()
                        .get(sort_dim)
                        .is_some_and(|&d| d != 1)
                }) {
                    return false;
                }
                self.improve(id, spread(&i.shape, s), mc, aggressive)
            }
            DynamicSlice | DynamicUpdateSlice => self.forward_dynamic_slice(id, level, mc),
            Gather => self.forward_gather(id, mc),
            Scatter => self.forward_scatter(id, mc),
            While => {
                let Some(mut s) = self.cur(i.operand(0)).cloned() else {
                    return false;
                };
                if let Some(old) = self.cur(id) {
                    merge_sharding(old, &mut s, mc);
                }
                self.improve(id, s, mc, false)
            }
            CustomCall => {
                if is_custom_call(i, "X64Combine") {
                    return false;
                }
                let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
                    return false;
                };
                let s = self.cur(op).unwrap().clone();
                self.improve(id, s, mc, aggressive)
            }
            Conditional | Call => false,
            _ => {
                if (i.opcode.is_elementwise() || i.opcode == Rng) && mc {
                    let mut changed = false;
                    let single = i.operands().len() == 1;
                    for &op in i.operands() {
                        if !self.sp(op) {
                            continue;
                        }
                        let s = self.cur(op).unwrap().clone();
                        if i.opcode == Rng {
                            let s = s.replicate_all_data_dims(Some(i.shape.rank()));
                            changed |= self.improve(id, s, mc, aggressive);
                            continue;
                        }
                        changed |= self.improve(id, s, mc, single && aggressive);
                    }
                    return changed;
                }
                let Some(op) = self.representative(id).filter(|&o| self.sp(o)) else {
                    return false;
                };
                let s = self.cur(op).unwrap().clone();
                self.improve(id, s, mc, aggressive)
            }
        }
    }

    /// XLA's `AggressiveConcatOperandShardingCanPassThrough`.
    fn concat_operand_passes(&self, o: InstrId) -> bool {
        let i = self.m.instr(o);
        self.sp(o)
            && self.cur(o).is_some_and(|s| s.num_tiles() > 1)
            && i.opcode == Opcode::Reshape
            && matches!(
                self.m.instr(i.operand(0)).opcode,
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
        let new = Sharding::tuple(leaves);
        if self.cur(id) != Some(&new) {
            self.sh[id.index()] = Some(new);
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
            let s = self.cur(op).unwrap().clone();
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
            let after = s.replicate_on_dims(&rdims);
            if after.is_replicated() {
                changed |= self.improve(id, spread(&i.shape, after), mc, aggressive);
                continue;
            }
            let Some(new) = after.remove_dims(&rdims) else {
                continue;
            };
            changed |= self.improve(id, spread(&i.shape, new), mc, aggressive);
        }
        changed
    }

    /// XLA's `InferDotShardingFromOperands`: each operand's sharding with its contracting
    /// dimensions replicated, moved to the output dimensions; the larger operand first.
    fn forward_dot(&mut self, id: InstrId, dd: &DotDims, mc: bool) -> bool {
        let i = self.m.instr(id);
        let (l, r) = (i.operand(0), i.operand(1));
        let larger = if self.shape(l).byte_size(8) >= self.shape(r).byte_size(8) {
            0
        } else {
            1
        };
        let mut changed = false;
        for k in [larger, 1 - larger] {
            let op = i.operand(k);
            if !self.sp(op) {
                continue;
            }
            if let Some(s) = self.dot_from_operand(id, dd, k) {
                changed |= self.improve(id, s, mc, false);
            }
        }
        changed
    }

    fn dot_from_operand(&self, id: InstrId, dd: &DotDims, k: usize) -> Option<Sharding> {
        let i = self.m.instr(id);
        let op = i.operand(k);
        let s = self.cur(op)?;
        if s.is_tile_maximal() {
            return Some(s.clone());
        }
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
        let mut out_to_op = vec![-1i64; i.shape.rank()];
        let mut op_to_out = vec![-1i64; self.shape(op).rank()];
        for d in dd.batch.iter().chain(dd.non_contracting(k)) {
            let (o, x) = (d.out, d.operand(k));
            if o >= 0 && x >= 0 {
                out_to_op[o as usize] = x;
                op_to_out[x as usize] = o;
            }
        }
        rep.transpose_collapsed(&op_to_out, &out_to_op)
    }

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
            return self.forward_dot(id, &dd, mc);
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
        let s = ls.replicate_all_data_dims(Some(i.shape.rank()));
        self.improve(id, s, mc, false)
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

    fn forward_dynamic_slice(&mut self, id: InstrId, level: u8, mc: bool) -> bool {
        let i = self.m.instr(id);
        let op = if i.opcode == Opcode::DynamicSlice {
            i.operand(0)
        } else {
            i.operand(1)
        };
        let slice_dim_sharded = || -> bool {
            let Some(s) = self.cur(op).filter(|s| s.is_spatially_partitioned()) else {
                return false;
            };
            let Some(t) = s.as_tiled() else {
                return false;
            };
            if s.num_tiles() == 1 {
                return false;
            }
            let (od, id_) = (self.shape(op).dims(), i.shape.dims());
            (0..id_.len()).any(|d| t.tile_assignment.dims()[d] > 1 && id_[d] != od[d])
        };
        let sliced = slice_dim_sharded();
        if level == 0 && sliced {
            return false;
        }
        let aggressive = self.non_root_users_is_one(id);
        let mut changed = false;
        if self.sp(op) && (self.cur(op).unwrap().num_tiles() == 1 || !sliced) {
            let s = self.cur(op).unwrap().clone();
            changed |= self.improve(id, s, mc, aggressive);
        }
        if i.opcode == Opcode::DynamicUpdateSlice && self.sp(i.operand(0)) {
            let s = self.cur(i.operand(0)).unwrap().clone();
            changed |= self.improve(id, s, mc, false);
        }
        changed
    }

    // ----- backward -----

    fn infer_from_users(&mut self, id: InstrId, level: u8) -> bool {
        let m = self.m;
        let i = m.instr(id);
        if level < 2 && i.opcode == Opcode::Broadcast {
            return false;
        }
        if self.cur(id).is_some_and(Sharding::is_manual) {
            return false;
        }
        if self.cur(id).is_none() {
            for &u in i.users() {
                if !self.cur(u).is_some_and(Sharding::is_manual)
                    || is_custom_call(m.instr(u), "SPMDFullToShardShape")
                {
                    continue;
                }
                if i.shape.is_array() {
                    self.sh[id.index()] = Some(Sharding::manual());
                } else if let Some(s) = self.sharding_from_user(id, u, level) {
                    self.sh[id.index()] = Some(s);
                }
                return true;
            }
        }
        if !self.supports_partitioning(id, false) {
            return false;
        }
        let mc = self.spmd && level > 0;
        let mut improved = false;
        for &u in i.users() {
            if let Some(s) = self.sharding_from_user(id, u, level) {
                improved |= self.improve(id, s, mc, false);
            }
        }
        improved
    }

    /// XLA's `GetShardingFromUser`: the sharding `id` should have for `user` as it is sharded.
    fn sharding_from_user(&self, id: InstrId, user: InstrId, level: u8) -> Option<Sharding> {
        use Opcode::*;
        let m = self.m;
        let u = m.instr(user);
        if !can_propagate_at(u, level) {
            return None;
        }
        let us = self.cur(user).filter(|s| s.is_spatially_partitioned())?;
        let i = m.instr(id);
        let index = u.operands().iter().position(|&o| o == id)?;
        match u.opcode {
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
                us.replicate_on_dims(&rep).remove_dims(&rep)
            }
            Concatenate => {
                if level == 0 {
                    return None;
                }
                self.concat_operand_from_user(id, user, index)
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
                self.dot_operand_sharding(user, &dd, index, self.spmd && level > 0)
            }
            DynamicSlice | DynamicUpdateSlice => {
                if level == 0 {
                    return None;
                }
                if us.is_replicated() {
                    return Some(us.clone());
                }
                if u.opcode == DynamicUpdateSlice && index == 0 {
                    return Some(us.clone());
                }
                let operand = if u.opcode == DynamicSlice {
                    u.operand(0)
                } else {
                    u.operand(1)
                };
                if operand != id {
                    return None;
                }
                if !self.spmd {
                    let t = us.as_tiled()?;
                    let (ud, od) = (u.shape.dims(), i.shape.dims());
                    for d in 0..ud.len() {
                        if t.tile_assignment.dims()[d] > 1 && ud.get(d) != od.get(d) {
                            return None;
                        }
                    }
                }
                Some(us.clone())
            }
            ReduceWindow => {
                let n = u.operands().len() / 2;
                if index >= n {
                    return None;
                }
                if u.shape.is_tuple() {
                    return Some(sub_sharding(us, &u.shape, index));
                }
                Some(us.clone())
            }
            Reshape => Some(
                us.reshape_through(u.shape.dims(), i.shape.dims())
                    .unwrap_or_else(|| us.replicate_all_data_dims(Some(i.shape.rank()))),
            ),
            Pad => (index == 0).then(|| us.clone()),
            Slice => Some(us.clone()),
            Transpose => {
                let d = dims_attr(&u.attrs);
                let mut inv = vec![0usize; d.len()];
                for (k, &x) in d.iter().enumerate() {
                    *inv.get_mut(x as usize)? = k;
                }
                us.transpose(&inv).map(|s| s.normalized())
            }
            Tuple => Some(sub_sharding(us, &u.shape, index)),
            GetTupleElement => {
                let (start, len) = leaf_range(&i.shape, u.attrs.tuple_index as usize);
                let ulv: Vec<Sharding> = match &us.kind {
                    ShardingKind::Tuple(e) => e.clone(),
                    _ => vec![us.clone(); len],
                };
                let fill = ulv.first()?.replicate_all_data_dims(None);
                let mut leaves: Vec<Sharding> = match self.cur(id).map(|s| &s.kind) {
                    Some(ShardingKind::Tuple(e)) => e.clone(),
                    _ => vec![fill; i.shape.leaf_count()],
                };
                for (k, s) in ulv.into_iter().enumerate().take(len) {
                    *leaves.get_mut(start + k)? = s;
                }
                Some(Sharding::tuple(leaves))
            }
            Dot => {
                let dn = u.attrs.dot_dims.as_deref()?;
                let dd = dot_dims(
                    dn,
                    self.shape(u.operand(0)).rank(),
                    self.shape(u.operand(1)).rank(),
                );
                self.dot_operand_sharding(user, &dd, index, self.spmd && level > 0)
            }
            Reduce => {
                if i.shape.rank() == 0 {
                    return None;
                }
                let s = if u.shape.is_tuple() {
                    sub_sharding(us, &u.shape, index)
                } else {
                    us.clone()
                };
                if s.is_tile_maximal() {
                    return Some(s);
                }
                let rd = dims_attr(&u.attrs);
                let map: Vec<usize> = (0..i.shape.rank())
                    .filter(|d| !rd.contains(&(*d as i64)))
                    .collect();
                s.insert_dims(i.shape.rank(), &map)
            }
            Sort => {
                if us.is_tuple() {
                    return Some(sub_sharding(us, &u.shape, index));
                }
                Some(us.clone())
            }
            Reverse => {
                let dims: Vec<usize> = dims_attr(&u.attrs).iter().map(|&d| d as usize).collect();
                Some(us.reverse_dims(&dims))
            }
            Gather => self.gather_operand_from_output(id, user, index),
            Scatter => self.scatter_operand_from_output(id, user, index),
            Call => {
                let callee = *u.called.first()?;
                if self.caller[callee.index()] != Some(user) {
                    return None;
                }
                let p = m.comp(callee).parameter(index)?;
                self.cur(p).cloned()
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
                self.cur(p).cloned()
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
        let mut dims: SmallVec<[i64; 4]> = tdims.iter().copied().collect();
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
    fn dot_operand_sharding(
        &self,
        user: InstrId,
        dd: &DotDims,
        k: usize,
        mc: bool,
    ) -> Option<Sharding> {
        let u = self.m.instr(user);
        let us = self.cur(user)?;
        let op = u.operand(k);
        let other = u.operand(1 - k);
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
        let op_rank = self.shape(op).rank();
        let mut out_to_op = vec![-1i64; u.shape.rank()];
        let mut op_to_out = vec![-1i64; op_rank];
        for d in dd.batch.iter().chain(dd.non_contracting(k)) {
            if d.out >= 0 && d.operand(k) >= 0 {
                out_to_op[d.out as usize] = d.operand(k);
                op_to_out[d.operand(k) as usize] = d.out;
            }
        }
        let mut s = out_r.transpose_collapsed(&out_to_op, &op_to_out)?;
        if self.sp(other) {
            let os = self.cur(other).unwrap().replicate_on_dims(&other_rep);
            let mut other_to_op = vec![-1i64; self.shape(other).rank()];
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
                self.sh[id.index()] = Some(Sharding::tuple(leaves));
                return true;
            }
        };
        let Some(better) = improved_array_sharding(&leaves[start], new, elem.rank(), mc) else {
            return false;
        };
        leaves[start] = better;
        self.sh[id.index()] = Some(Sharding::tuple(leaves));
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

    fn refine_unspecified_from_operand(&mut self, _id: InstrId, _dims: &[usize]) -> bool {
        false
    }

    fn refine_unspecified_from_users(&mut self, _id: InstrId, _dims: &[usize], _level: u8) -> bool {
        false
    }

    // ----- the report -----

    /// Instructions of computations the pass shards (the entry and called bodies) left
    /// without a sharding, with the reason.
    fn undecided(&self) -> Vec<(InstrId, String)> {
        let m = self.m;
        let mut out = Vec::new();
        for &c in m.computations() {
            if c != self.entry && self.caller[c.index()].is_none() {
                continue;
            }
            for &id in m.comp(c).instructions() {
                if self.sh[id.index()].is_some() {
                    continue;
                }
                let i = m.instr(id);
                let reason = if Some(id) == self.entry_root && !self.allow_output {
                    "the entry output may not take a sharding (allow_spmd_sharding_propagation_to_output is off)".to_string()
                } else if i.opcode == Opcode::Parameter
                    && c == self.entry
                    && !self.param_allowed(id)
                {
                    format!(
                        "entry parameter {} may not take a sharding (allow_spmd_sharding_propagation_to_parameters is off)",
                        i.attrs.parameter_number
                    )
                } else if !self.supports_partitioning(id, self.allow_output) {
                    format!(
                        "`{}` cannot be partitioned here and no operand is replicated",
                        i.opcode
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
