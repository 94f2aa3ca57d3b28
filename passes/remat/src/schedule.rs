//! Memory schedulers: they give every computation of a module a sequence (the module's
//! [`Schedule`], printed as `is_scheduled=true`), after XLA's `hlo_memory_scheduler.cc`.
//!
//! - [`SchedulerKind::PostOrder`]: XLA's `MakeInstructionPostOrder` (no heuristic).
//! - [`SchedulerKind::Dfs`]: a post-order that visits the operands with more transitive fan-out
//!   first, then those with larger transitive sizes (`DFSMemoryScheduler`).
//! - [`SchedulerKind::List`]: greedy; among the ready instructions it takes the one that frees
//!   the most bytes net of what it allocates (`ListScheduler`, with its priorities, tie breaks
//!   and stale-priority refresh rule).
//! - [`SchedulerKind::Default`]: runs the three and keeps, per computation, the sequence with the
//!   lowest peak (`DefaultMemoryScheduler`), measured by [`crate::schedule_memory`].
//!
//! Computations are scheduled callees first, so a caller's scheduler knows the peak memory of
//! what it calls. Fusion computations get no sequence (as in XLA). See docs/schedulers.md.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use tessera_hlo::analysis::call_graph::instruction_call_context;
use tessera_hlo::analysis::{computation_post_order, BufferId, CallContext, TuplePointsTo};
use tessera_hlo::{CompId, InstrId, Module, Opcode, Schedule, Shape};
use tessera_pass::options::{parse_bool, unknown_key};
use tessera_pass::registry::RegisteredPass;
use tessera_pass::{OptionDoc, Pass, PassError, PassOptions};

use crate::schedule_memory::{
    computation_memory, module_memory, CalleeAccounting, MemoryOptions, ModuleMemory,
};

/// Bytes of one buffer of a (sub-)shape; [`tessera_hlo::analysis::shape_size`] is the default.
pub type SizeFn<'a> = tessera_hlo::analysis::BufferSizeFn<'a>;

/// Errors of the schedulers and the memory accounting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("the module has no entry computation")]
    NoEntry,
    #[error("computation {computation}: invalid sequence: {message}")]
    BadSequence {
        computation: String,
        message: String,
    },
    #[error("computation {computation}: cannot schedule {missing} instruction(s) (a cycle through operands or control edges at %{example})")]
    Cycle {
        computation: String,
        missing: usize,
        example: String,
    },
    #[error("unknown scheduler `{0}`; expected post-order, dfs, list or default")]
    UnknownScheduler(String),
}

/// The order `Default` tries the schedulers in; on equal peaks the earlier one wins (XLA's).
pub const DEFAULT_ORDER: [SchedulerKind; 3] = [
    SchedulerKind::List,
    SchedulerKind::Dfs,
    SchedulerKind::PostOrder,
];

/// Which scheduler to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchedulerKind {
    PostOrder,
    Dfs,
    List,
    /// The best of list, DFS and post-order by peak memory, per computation.
    #[default]
    Default,
}

impl SchedulerKind {
    pub const ALL: [SchedulerKind; 4] = [
        SchedulerKind::PostOrder,
        SchedulerKind::Dfs,
        SchedulerKind::List,
        SchedulerKind::Default,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::PostOrder => "post-order",
            SchedulerKind::Dfs => "dfs",
            SchedulerKind::List => "list",
            SchedulerKind::Default => "default",
        }
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SchedulerKind {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<SchedulerKind, ScheduleError> {
        SchedulerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| ScheduleError::UnknownScheduler(s.to_string()))
    }
}

/// What one computation got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputationSchedule {
    pub comp: CompId,
    pub name: String,
    /// The scheduler whose sequence was kept.
    pub chosen: SchedulerKind,
    /// Peak of the kept sequence by the rematerialization accounting
    /// ([`MemoryOptions::default`]; computations called in embedded context are measured the
    /// same way, although their peaks count nowhere).
    pub peak_bytes: i64,
    /// Every scheduler tried (only the chosen one unless `Default`), in the order XLA tries them
    /// (list, DFS, post-order), with the peak of its sequence by the measure candidates are
    /// compared by ([`MemoryOptions::heap_simulator`]).
    pub candidates: Vec<(SchedulerKind, i64)>,
}

/// The result of [`schedule_module`].
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleReport {
    pub scheduler: SchedulerKind,
    /// Scheduled computations, callees first.
    pub computations: Vec<ComputationSchedule>,
    /// Memory of the module along the new schedule.
    pub memory: ModuleMemory,
}

impl ScheduleReport {
    /// The module's peak along the new schedule.
    pub fn peak_bytes(&self) -> i64 {
        self.memory.peak_bytes
    }
}

impl fmt::Display for ScheduleReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scheduler: {}", self.scheduler)?;
        for c in &self.computations {
            write!(
                f,
                "computation {}: {} peak={}",
                c.name, c.chosen, c.peak_bytes
            )?;
            if c.candidates.len() > 1 {
                let all: Vec<String> = c
                    .candidates
                    .iter()
                    .map(|(k, b)| format!("{k}={b}"))
                    .collect();
                write!(f, " ({})", all.join(" "))?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "module peak={} (entry {} + output {}; parameters {} not counted)",
            self.memory.peak_bytes,
            self.memory.peak_bytes - self.memory.output_bytes,
            self.memory.output_bytes,
            self.memory.parameter_bytes
        )
    }
}

/// Computations that get a sequence: every computation but fusion bodies, callees first
/// (unreachable ones too, as the text parser's `is_scheduled=true` gives them one).
pub fn schedulable_computations(module: &Module) -> Vec<CompId> {
    let mut fused = vec![false; module.comp_capacity()];
    for &c in module.computations() {
        for &i in module.comp(c).instructions() {
            let ins = module.instr(i);
            if ins.opcode() == Opcode::Fusion {
                for &f in &ins.called {
                    fused[f.index()] = true;
                }
            }
        }
    }
    computation_post_order(module, true)
        .into_iter()
        .filter(|c| !fused[c.index()])
        .collect()
}

/// Schedules every computation of `module` with `kind` and sets `module.schedule`. Replaces a
/// schedule the module had.
pub fn schedule_module(
    module: &mut Module,
    kind: SchedulerKind,
    size: SizeFn,
) -> Result<ScheduleReport, ScheduleError> {
    let (schedule, computations) = compute_schedule(module, kind, size)?;
    module.schedule = Some(schedule);
    let memory = module_memory(module, None, size, MemoryOptions::default())?;
    Ok(ScheduleReport {
        scheduler: kind,
        computations,
        memory,
    })
}

/// The schedule [`schedule_module`] would set, without touching the module.
pub fn compute_schedule(
    module: &Module,
    kind: SchedulerKind,
    size: SizeFn,
) -> Result<(Schedule, Vec<ComputationSchedule>), ScheduleError> {
    if module.entry().is_none() {
        return Err(ScheduleError::NoEntry);
    }
    let points_to = TuplePointsTo::new(module);
    // Peaks by the measure the candidates are compared by, and by the rematerialization
    // accounting that is reported.
    let mut heap_peaks: Vec<Option<i64>> = vec![None; module.comp_capacity()];
    let mut peaks: Vec<Option<i64>> = vec![None; module.comp_capacity()];
    let mut schedule = Schedule::default();
    let mut report = Vec::new();
    for c in schedulable_computations(module) {
        let tried: Vec<SchedulerKind> = match kind {
            SchedulerKind::Default => DEFAULT_ORDER.to_vec(),
            k => vec![k],
        };
        let mut best: Option<(SchedulerKind, i64, Vec<InstrId>)> = None;
        let mut candidates = Vec::new();
        for k in tried {
            let seq = schedule_computation(module, &points_to, c, k, size, &heap_peaks)?;
            let heap = computation_memory(
                module,
                &points_to,
                c,
                &seq,
                size,
                &heap_peaks,
                MemoryOptions::heap_simulator(),
            )
            .peak_bytes;
            candidates.push((k, heap));
            if best.as_ref().is_none_or(|b| heap < b.1) {
                best = Some((k, heap, seq));
            }
        }
        let (chosen, heap, seq) = best.expect("at least one scheduler ran");
        let peak = computation_memory(
            module,
            &points_to,
            c,
            &seq,
            size,
            &peaks,
            MemoryOptions::default(),
        )
        .peak_bytes;
        heap_peaks[c.index()] = Some(heap);
        peaks[c.index()] = Some(peak);
        schedule.sequences.insert(c, seq);
        report.push(ComputationSchedule {
            comp: c,
            name: module.comp(c).name().to_string(),
            chosen,
            peak_bytes: peak,
            candidates,
        });
    }
    Ok((schedule, report))
}

/// A sequence for one computation by one scheduler (`Default` is the best of the three by
/// peak by [`MemoryOptions::heap_simulator`]). `peaks` holds the peaks of already scheduled
/// computations (dense by computation id); the list scheduler counts them at control-flow call
/// sites.
pub fn schedule_computation(
    module: &Module,
    points_to: &TuplePointsTo,
    comp: CompId,
    kind: SchedulerKind,
    size: SizeFn,
    peaks: &[Option<i64>],
) -> Result<Vec<InstrId>, ScheduleError> {
    let seq = match kind {
        SchedulerKind::PostOrder => xla_post_order(module, comp),
        SchedulerKind::Dfs => dfs_schedule(module, points_to, comp, size),
        SchedulerKind::List => list_schedule(module, points_to, comp, size, peaks),
        SchedulerKind::Default => {
            let mut best: Option<(i64, Vec<InstrId>)> = None;
            for k in DEFAULT_ORDER {
                let s = schedule_computation(module, points_to, comp, k, size, peaks)?;
                let m = computation_memory(
                    module,
                    points_to,
                    comp,
                    &s,
                    size,
                    peaks,
                    MemoryOptions::heap_simulator(),
                );
                if best.as_ref().is_none_or(|b| m.peak_bytes < b.0) {
                    best = Some((m.peak_bytes, s));
                }
            }
            best.expect("three schedulers ran").1
        }
    };
    let expected = module.comp(comp).instructions().len();
    if seq.len() != expected {
        let placed: std::collections::HashSet<InstrId> = seq.iter().copied().collect();
        let example = module
            .comp(comp)
            .instructions()
            .iter()
            .find(|i| !placed.contains(i))
            .map(|&i| module.instr(i).name().to_string())
            .unwrap_or_default();
        return Err(ScheduleError::Cycle {
            computation: module.comp(comp).name().to_string(),
            missing: expected.saturating_sub(seq.len()),
            example,
        });
    }
    // A cycle the post-order broke leaves every instruction placed but one before its operand.
    crate::schedule_memory::check_sequence(module, comp, &seq)?;
    Ok(seq)
}

/// XLA's `MakeInstructionPostOrder`: from every instruction without users (in stored order), a
/// depth-first post-order that visits control predecessors first (the last one first), then
/// operands left to right. An instruction on a cycle is left out (the caller reports it).
pub fn xla_post_order(module: &Module, comp: CompId) -> Vec<InstrId> {
    let c = module.comp(comp);
    // 0 new, 1 visiting, 2 done.
    let mut state: HashMap<InstrId, u8> = HashMap::with_capacity(c.instructions().len());
    let mut out = Vec::with_capacity(c.instructions().len());
    let mut stack: Vec<InstrId> = Vec::new();
    for &start in c.instructions() {
        if !module.users(start).is_empty() {
            continue;
        }
        stack.push(start);
        while let Some(&cur) = stack.last() {
            match state.get(&cur).copied().unwrap_or(0) {
                0 => {
                    state.insert(cur, 1);
                    let ins = module.instr(cur);
                    for &op in ins.operands().iter().rev() {
                        if state.get(&op).copied().unwrap_or(0) == 0 {
                            stack.push(op);
                        }
                    }
                    for &p in ins.control_predecessors() {
                        if state.get(&p).copied().unwrap_or(0) == 0 {
                            stack.push(p);
                        }
                    }
                }
                1 => {
                    stack.pop();
                    state.insert(cur, 2);
                    out.push(cur);
                }
                _ => {
                    stack.pop();
                }
            }
        }
    }
    out
}

fn ignored(opcode: Opcode) -> bool {
    matches!(opcode, Opcode::Parameter | Opcode::Constant)
}

fn defined_bytes(points_to: &TuplePointsTo, id: InstrId, size: SizeFn) -> i64 {
    points_to
        .defined_buffers(id)
        .iter()
        .map(|&b| size(&points_to.buffer(b).shape))
        .sum()
}

/// XLA's `DFSMemoryScheduler`: a post-order from the unreachable roots (stored order) and then
/// the root, visiting operands and control predecessors by decreasing transitive extra users,
/// then decreasing transitive size, then name.
pub fn dfs_schedule(
    module: &Module,
    points_to: &TuplePointsTo,
    comp: CompId,
    size: SizeFn,
) -> Vec<InstrId> {
    let c = module.comp(comp);
    let total_hlos = c.instructions().len() as i64;
    let mut cumulative: i64 = 0;
    // (extra_users, total_sizes) per instruction.
    let mut stats: HashMap<InstrId, (i64, i64)> = HashMap::with_capacity(c.instructions().len());
    for id in xla_post_order(module, comp) {
        let ins = module.instr(id);
        if ignored(ins.opcode()) {
            stats.insert(id, (0, 0));
            continue;
        }
        let mut extra = (ins.users().len() as i64 - 1).max(0);
        let own = defined_bytes(points_to, id, size);
        let mut total = own;
        cumulative = cumulative.saturating_add(own);
        let mut seen: Vec<InstrId> = Vec::with_capacity(ins.operands().len());
        for &op in ins.operands() {
            if seen.contains(&op) {
                continue;
            }
            seen.push(op);
            let (e, t) = stats.get(&op).copied().unwrap_or((0, 0));
            extra = extra.saturating_add(e);
            total = total.saturating_add(t);
        }
        stats.insert(id, (extra.min(total_hlos), total.min(cumulative)));
    }
    let key = |id: InstrId| stats.get(&id).copied().unwrap_or((0, 0));
    let order = |a: &InstrId, b: &InstrId| {
        let (ea, ta) = key(*a);
        let (eb, tb) = key(*b);
        eb.cmp(&ea)
            .then(tb.cmp(&ta))
            .then_with(|| module.instr(*a).name().cmp(module.instr(*b).name()))
    };
    let mut starts: Vec<InstrId> = c
        .instructions()
        .iter()
        .copied()
        .filter(|&i| {
            Some(i) != c.root()
                && module.users(i).is_empty()
                && module.instr(i).control_successors().is_empty()
        })
        .collect();
    starts.extend(c.root());
    let mut state: HashMap<InstrId, u8> = HashMap::with_capacity(c.instructions().len());
    let mut out = Vec::with_capacity(c.instructions().len());
    let mut stack: Vec<InstrId> = Vec::new();
    for start in starts {
        stack.push(start);
        while let Some(&cur) = stack.last() {
            match state.get(&cur).copied().unwrap_or(0) {
                0 => {
                    state.insert(cur, 1);
                    let ins = module.instr(cur);
                    let mut children: Vec<InstrId> = ins
                        .operands()
                        .iter()
                        .chain(ins.control_predecessors())
                        .copied()
                        .filter(|x| state.get(x).copied().unwrap_or(0) == 0)
                        .collect();
                    children.sort_by(order);
                    stack.extend(children.into_iter().rev());
                }
                1 => {
                    stack.pop();
                    state.insert(cur, 2);
                    out.push(cur);
                }
                _ => {
                    stack.pop();
                }
            }
        }
    }
    out
}

/// True for an array whose dimensions are all 1 (XLA's `IsEffectiveScalar`).
fn is_effective_scalar(shape: &Shape) -> bool {
    shape
        .as_array()
        .is_some_and(|a| a.dims.iter().all(|&d| d == 1))
}

type Priority = (i64, i64);

/// XLA's `ListScheduler`.
struct ListScheduler<'a> {
    module: &'a Module,
    points_to: &'a TuplePointsTo,
    size: SizeFn<'a>,
    peaks: &'a [Option<i64>],
    /// Buffers each instruction reads (every buffer in its operands' points-to sets).
    uses: HashMap<InstrId, Vec<BufferId>>,
    unscheduled_uses: HashMap<BufferId, i64>,
    bytes_defined: HashMap<InstrId, i64>,
}

impl ListScheduler<'_> {
    fn is_ignored_buffer(&self, b: BufferId) -> bool {
        ignored(
            self.module
                .instr(self.points_to.buffer(b).instruction)
                .opcode(),
        )
    }

    fn bytes_freed(&self, id: InstrId) -> i64 {
        let ins = self.module.instr(id);
        if ins.opcode() == Opcode::Outfeed
            && ins
                .attrs
                .outfeed_config
                .as_deref()
                .is_some_and(|c| !c.is_empty())
        {
            return i32::MAX as i64;
        }
        if ins.opcode() == Opcode::Infeed
            && ins
                .attrs
                .infeed_config
                .as_deref()
                .is_some_and(|c| !c.is_empty())
        {
            return i32::MIN as i64;
        }
        let mut freed = 0;
        for &b in &self.uses[&id] {
            if !self.is_ignored_buffer(b) && self.unscheduled_uses[&b] == 1 {
                freed += (self.size)(&self.points_to.buffer(b).shape);
            }
        }
        let max_sub = if instruction_call_context(ins.opcode()) == CallContext::ControlFlow {
            ins.called
                .iter()
                .map(|c| self.peaks.get(c.index()).copied().flatten().unwrap_or(0))
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let own = self.bytes_defined[&id];
        let defined = if max_sub > 0
            && matches!(
                ins.opcode(),
                Opcode::While | Opcode::Call | Opcode::Conditional
            ) {
            // The result aliases the callee's root: do not count it twice.
            max_sub
        } else {
            own + max_sub
        };
        freed - defined
    }

    fn priority(&self, id: InstrId) -> Priority {
        let ins = self.module.instr(id);
        if is_effective_scalar(&ins.shape) {
            return (i64::MAX, i64::MAX);
        }
        (self.bytes_freed(id), ins.users().len() as i64)
    }
}

/// XLA's `ListScheduler`: greedy by (bytes freed minus bytes defined, user count); among equal
/// priorities the most recently readied instruction goes first; after an instruction is placed,
/// only the ready users of its operands get fresh priorities, and only of the operands holding
/// a buffer that dropped to a single unscheduled use (XLA looks at the users of every operand
/// then; the others' priorities cannot have changed).
pub fn list_schedule(
    module: &Module,
    points_to: &TuplePointsTo,
    comp: CompId,
    size: SizeFn,
    peaks: &[Option<i64>],
) -> Vec<InstrId> {
    let c = module.comp(comp);
    let instrs = c.instructions();
    let mut uses: HashMap<InstrId, Vec<BufferId>> = HashMap::with_capacity(instrs.len());
    let mut unscheduled_uses: HashMap<BufferId, i64> = HashMap::new();
    let mut bytes_defined: HashMap<InstrId, i64> = HashMap::with_capacity(instrs.len());
    for &id in instrs {
        let mut u: Vec<BufferId> = Vec::new();
        for &op in module.operands(id) {
            for (_, e) in points_to.points_to(op).iter() {
                u.extend(e.buffers.iter().copied());
            }
        }
        u.sort();
        u.dedup();
        for &b in &u {
            *unscheduled_uses.entry(b).or_insert(0) += 1;
        }
        uses.insert(id, u);
        let own = if ignored(module.instr(id).opcode()) {
            0
        } else {
            defined_bytes(points_to, id, size)
        };
        bytes_defined.insert(id, own);
    }
    if let Some(r) = c.root() {
        for b in points_to.points_to(r).flattened() {
            *unscheduled_uses.entry(b).or_insert(0) += 1;
        }
    }
    let mut s = ListScheduler {
        module,
        points_to,
        size,
        peaks,
        uses,
        unscheduled_uses,
        bytes_defined,
    };

    let mut preds: HashMap<InstrId, usize> = HashMap::with_capacity(instrs.len());
    for &id in instrs {
        let ins = module.instr(id);
        for &u in ins.users().iter().chain(ins.control_successors()) {
            *preds.entry(u).or_insert(0) += 1;
        }
    }
    // Ready instructions by (priority, insertion number); the largest key goes first.
    let mut ready: BTreeMap<(Priority, u64), InstrId> = BTreeMap::new();
    let mut ready_key: HashMap<InstrId, (Priority, u64)> = HashMap::new();
    let mut counter: u64 = 0;
    let mut make_ready = |s: &ListScheduler,
                          ready: &mut BTreeMap<(Priority, u64), InstrId>,
                          ready_key: &mut HashMap<InstrId, (Priority, u64)>,
                          id: InstrId| {
        let key = (s.priority(id), counter);
        counter += 1;
        ready.insert(key, id);
        ready_key.insert(id, key);
    };
    for &id in instrs {
        let ins = module.instr(id);
        if ins.operands().is_empty() && ins.control_predecessors().is_empty() {
            make_ready(&s, &mut ready, &mut ready_key, id);
        }
    }
    let mut out = Vec::with_capacity(instrs.len());
    while let Some((_, best)) = ready.pop_last() {
        ready_key.remove(&best);
        out.push(best);
        // The buffers now down to one unscheduled use: only their last users' priorities
        // change.
        let mut single: Vec<BufferId> = Vec::new();
        for &b in &s.uses[&best] {
            let n = s.unscheduled_uses.get_mut(&b).expect("counted above");
            *n -= 1;
            if *n == 1 {
                single.push(b);
            }
        }
        let ins = module.instr(best);
        for &u in ins.users().iter().chain(ins.control_successors()) {
            let n = preds.get_mut(&u).expect("counted above");
            *n -= 1;
            if *n == 0 {
                make_ready(&s, &mut ready, &mut ready_key, u);
            }
        }
        if single.is_empty() {
            continue;
        }
        // Only the users of operands holding such a buffer: an operand read by every block of
        // a large computation (a parameter) would otherwise have all its users looked at each
        // time some other buffer ran down, which made the scheduler quadratic.
        for &op in ins.operands() {
            let holds = points_to
                .points_to(op)
                .iter()
                .any(|(_, e)| e.buffers.iter().any(|b| single.contains(b)));
            if !holds {
                continue;
            }
            for &u in module.users(op) {
                let Some(&old) = ready_key.get(&u) else {
                    continue;
                };
                let fresh = s.priority(u);
                if fresh == old.0 {
                    continue;
                }
                ready.remove(&old);
                make_ready(&s, &mut ready, &mut ready_key, u);
            }
        }
    }
    out
}

// ----- the passes -----

/// Options of the `schedule` pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleOptions {
    pub scheduler: SchedulerKind,
    /// Leave a module that already has a schedule as it is (default false: reschedule).
    pub keep_existing: bool,
}

impl PassOptions for ScheduleOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "scheduler",
            default: "default",
            doc: "post-order, dfs, list, or default (the lowest peak of the three per computation)",
        },
        OptionDoc {
            key: "keep_existing",
            default: "false",
            doc: "leave a module that already has a schedule as it is",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "scheduler" => {
                self.scheduler = value.parse().map_err(|e: ScheduleError| e.to_string())?
            }
            "keep_existing" => self.keep_existing = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// `schedule`: gives the module a memory-minimizing schedule; its remarks report the scheduler
/// chosen per computation and the peaks.
#[derive(Clone, Debug, Default)]
pub struct SchedulePass {
    pub options: ScheduleOptions,
    report: Option<String>,
}

impl RegisteredPass for SchedulePass {
    type Options = ScheduleOptions;
    const NAME: &'static str = "schedule";
    const DOC: &'static str =
        "give every computation a memory-minimizing sequence (is_scheduled=true)";
    fn with_options(options: ScheduleOptions) -> SchedulePass {
        SchedulePass {
            options,
            report: None,
        }
    }
}

impl Pass for SchedulePass {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> tessera_pass::Result<bool> {
        if self.options.keep_existing && module.schedule.is_some() {
            self.report = Some("kept the existing schedule".into());
            return Ok(false);
        }
        let before = module.schedule.clone();
        let report = schedule_module(
            module,
            self.options.scheduler,
            &tessera_hlo::analysis::shape_size,
        )
        .map_err(|e| PassError::Failed(e.to_string()))?;
        self.report = Some(report.to_string());
        Ok(module.schedule != before)
    }

    fn remarks(&mut self) -> Option<String> {
        self.report.take()
    }
}

/// Options of `print-memory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrintMemoryOptions {
    /// Buffers listed at each computation's peak.
    pub top: usize,
    /// Also print the bytes at every position.
    pub profile: bool,
    pub callees: CalleeAccounting,
}

impl Default for PrintMemoryOptions {
    fn default() -> Self {
        PrintMemoryOptions {
            top: 5,
            profile: false,
            callees: CalleeAccounting::Sum,
        }
    }
}

impl PassOptions for PrintMemoryOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "top",
            default: "5",
            doc: "how many of the largest buffers live at each peak to list",
        },
        OptionDoc {
            key: "profile",
            default: "false",
            doc: "print the bytes at every position of every sequence",
        },
        OptionDoc {
            key: "callees",
            default: "sum",
            doc: "sum (XLA's rematerialization) or max: how called computations' peaks combine at a call site",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "top" => {
                self.top = value
                    .parse()
                    .map_err(|_| format!("expected a count, found `{value}`"))?
            }
            "profile" => self.profile = parse_bool(value)?,
            "callees" => {
                self.callees = match value {
                    "sum" => CalleeAccounting::Sum,
                    "max" => CalleeAccounting::Max,
                    _ => return Err(format!("expected sum or max, found `{value}`")),
                }
            }
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// `print-memory`: reports the memory of the module along its schedule (post-order where it has
/// none); changes nothing.
#[derive(Clone, Debug, Default)]
pub struct PrintMemory {
    pub options: PrintMemoryOptions,
    report: Option<String>,
}

impl RegisteredPass for PrintMemory {
    type Options = PrintMemoryOptions;
    const NAME: &'static str = "print-memory";
    const DOC: &'static str =
        "report peak memory per computation along the schedule and the buffers live at each peak (changes nothing)";
    fn with_options(options: PrintMemoryOptions) -> PrintMemory {
        PrintMemory {
            options,
            report: None,
        }
    }
}

impl Pass for PrintMemory {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> tessera_pass::Result<bool> {
        let mem = module_memory(
            module,
            None,
            &tessera_hlo::analysis::shape_size,
            MemoryOptions {
                callees: self.options.callees,
                reuse_operand_buffers: false,
            },
        )
        .map_err(|e| PassError::Failed(e.to_string()))?;
        self.report = Some(memory_report(
            module,
            &mem,
            self.options.top,
            self.options.profile,
        ));
        Ok(false)
    }

    fn remarks(&mut self) -> Option<String> {
        self.report.take()
    }
}

/// The text `print-memory` prints: per computation its peak, where, and the largest buffers
/// live there; then the module's peak.
pub fn memory_report(module: &Module, mem: &ModuleMemory, top: usize, profile: bool) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    for cm in &mem.computations {
        let name = &module.comp(cm.comp).name();
        match cm.peak_instruction() {
            Some(at) => {
                let _ = write!(
                    o,
                    "computation {name}: peak={} at {} %{}",
                    cm.peak_bytes,
                    cm.peak_position.unwrap_or(0),
                    module.instr(at).name()
                );
                let p = cm.peak_position.unwrap_or(0);
                if cm.callee_bytes[p] > 0 {
                    let _ = write!(o, " (callees {})", cm.callee_bytes[p]);
                }
                let _ = writeln!(o);
            }
            None => {
                let _ = writeln!(o, "computation {name}: peak=0 (empty)");
            }
        }
        if profile {
            for (p, &id) in cm.sequence.iter().enumerate() {
                let _ = writeln!(o, "  {p} %{}: {}", module.instr(id).name(), cm.bytes[p]);
            }
        }
        for b in cm.live_at_peak().into_iter().take(top) {
            let _ = writeln!(o, "  live {}", buffer_label(module, b));
        }
    }
    let _ = write!(
        o,
        "module peak={} (entry {} + output {}; parameters {} not counted)",
        mem.peak_bytes,
        mem.peak_bytes - mem.output_bytes,
        mem.output_bytes,
        mem.parameter_bytes
    );
    o
}

/// `%name{index} shape bytes`, e.g. `%concat f32[2048] 8192` or `%t{1} f32[4] 16`.
pub fn buffer_label(module: &Module, b: &crate::schedule_memory::TrackedBuffer) -> String {
    let mut s = format!("%{}", module.instr(b.defining).name());
    if !b.index.is_empty() {
        let idx: Vec<String> = b.index.iter().map(|i| i.to_string()).collect();
        s.push_str(&format!("{{{}}}", idx.join(",")));
    }
    format!(
        "{s} {} {}",
        tessera_pass::stats::short_shape(&b.shape),
        b.allocated
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule_memory::{check_sequence, peak_memory};
    use tessera_hlo::analysis::shape_size;
    use tessera_hlo::text::parse_module;

    fn names(m: &Module, seq: &[InstrId]) -> Vec<String> {
        seq.iter().map(|&i| m.instr(i).name().to_string()).collect()
    }

    fn entry_order(m: &Module) -> Vec<String> {
        let e = m.entry().unwrap();
        names(m, &m.schedule.as_ref().unwrap().sequences[&e])
    }

    const DIAMOND: &str = r#"
HloModule diamond

ENTRY main {
  p = f32[4] parameter(0)
  dead = f32[4] negate(p)
  a = f32[4] exponential(p)
  b = f32[16] broadcast(p), dimensions={0}
  c = f32[4] slice(b), slice={[0:4]}
  ROOT r = f32[4] add(a, c)
}
"#;

    #[test]
    fn post_order_follows_xla_make_instruction_post_order() {
        let mut m = parse_module(DIAMOND).unwrap();
        schedule_module(&mut m, SchedulerKind::PostOrder, &shape_size).unwrap();
        // Roots without users in stored order: `dead` first, then `r` with operands left to right.
        assert_eq!(entry_order(&m), ["p", "dead", "a", "b", "c", "r"]);
    }

    #[test]
    fn dfs_visits_the_heavier_operand_first_and_dead_code_before_the_root() {
        let mut m = parse_module(DIAMOND).unwrap();
        schedule_module(&mut m, SchedulerKind::Dfs, &shape_size).unwrap();
        // c's cone (b: 64 bytes + c: 16) outweighs a's (16), so it goes first.
        assert_eq!(entry_order(&m), ["p", "dead", "b", "c", "a", "r"]);
    }

    #[test]
    fn list_frees_before_it_allocates() {
        let mut m = parse_module(DIAMOND).unwrap();
        let r = schedule_module(&mut m, SchedulerKind::List, &shape_size).unwrap();
        let order = entry_order(&m);
        // c frees b (64) and allocates 16: it follows b at once.
        let pos = |n: &str| order.iter().position(|x| x == n).unwrap();
        assert_eq!(pos("c"), pos("b") + 1, "{order:?}");
        assert_eq!(r.computations.len(), 1);
        assert_eq!(r.computations[0].chosen, SchedulerKind::List);
        // At c: b (64) + c (16) + whatever of a/dead is live; r is the caller's.
        let mem = &r.memory;
        assert_eq!(mem.output_bytes, 16);
        assert_eq!(mem.parameter_bytes, 16);
        assert_eq!(mem.peak_bytes, mem.entry_memory().peak_bytes + 16);
    }

    #[test]
    fn default_keeps_the_lowest_and_prefers_list_on_ties() {
        let mut m = parse_module(DIAMOND).unwrap();
        let r = schedule_module(&mut m, SchedulerKind::Default, &shape_size).unwrap();
        let c = &r.computations[0];
        let best = c.candidates.iter().map(|x| x.1).min().unwrap();
        let first_best = c.candidates.iter().find(|x| x.1 == best).unwrap().0;
        assert_eq!(c.chosen, first_best);
        assert_eq!(
            c.candidates.iter().map(|x| x.0).collect::<Vec<_>>(),
            DEFAULT_ORDER
        );
    }

    #[test]
    fn peak_memory_names_the_live_buffers_and_their_definitions() {
        let m = parse_module(
            r#"
HloModule m, is_scheduled=true

ENTRY main {
  p = f32[] parameter(0)
  b = f32[1024] broadcast(p), dimensions={}
  n = f32[1024] negate(b)
  c = f32[2048] concatenate(n, n), dimensions={0}
  s = f32[1] slice(c), slice={[0:1]}
  c2 = f32[1025] concatenate(b, s), dimensions={0}
  ROOT r = f32[1] slice(c2), slice={[0:1]}
}
"#,
        )
        .unwrap();
        let mem = peak_memory(&m, m.schedule.as_ref().unwrap(), &shape_size).unwrap();
        let e = mem.entry_memory();
        assert_eq!(e.bytes, [0, 4096, 8192, 16384, 12292, 8200, 4100]);
        assert_eq!(e.peak_bytes, 16384);
        assert_eq!(e.peak_position, Some(3));
        let live: Vec<(String, i64)> = e
            .live_at_peak()
            .iter()
            .map(|b| (m.instr(b.defining).name().to_string(), b.allocated))
            .collect();
        assert_eq!(
            live,
            [
                ("c".to_string(), 8192),
                ("b".into(), 4096),
                ("n".into(), 4096)
            ]
        );
        assert_eq!(mem.peak_bytes, 16384 + 4);
        // The heap-simulator measure lets the slices and concatenates not share; negate of b
        // could take b's buffer, but b is still needed by c2, so nothing changes at the peak.
        let heap = module_memory(&m, None, &shape_size, MemoryOptions::heap_simulator()).unwrap();
        assert_eq!(heap.entry_memory().peak_bytes, 16384);
    }

    #[test]
    fn elementwise_reuse_and_callee_accounting_options() {
        let m = parse_module(
            r#"
HloModule m, is_scheduled=true

c1 {
  x = f32[256] parameter(0)
  y = f32[256] negate(x)
  ROOT z = f32[256] negate(y)
}

c2 {
  u = f32[256] parameter(0)
  v = f32[512] concatenate(u, u), dimensions={0}
  ROOT w = f32[256] slice(v), slice={[0:256]}
}

ENTRY main {
  p = pred[] parameter(0)
  q = f32[256] parameter(1)
  a = f32[256] exponential(q)
  b = f32[256] negate(a)
  k = f32[256] conditional(p, b, b), true_computation=c1, false_computation=c2
  ROOT r = f32[256] add(k, b)
}
"#,
        )
        .unwrap();
        let sum = module_memory(&m, None, &shape_size, MemoryOptions::default()).unwrap();
        let c1 = m.find_computation("c1").unwrap();
        let c2 = m.find_computation("c2").unwrap();
        // c1: y (1024) at y and at z; c2: v (2048) at v and at w.
        assert_eq!(sum.computation_peak(c1), 1024);
        assert_eq!(sum.computation_peak(c2), 2048);
        // At k: b and k (1024 each; r is the live-out one) + c1 + c2.
        assert_eq!(
            sum.entry_memory().bytes,
            [0, 0, 1024, 2048, 2048 + 3072, 2048]
        );
        let max = module_memory(
            &m,
            None,
            &shape_size,
            MemoryOptions {
                callees: CalleeAccounting::Max,
                reuse_operand_buffers: false,
            },
        )
        .unwrap();
        assert_eq!(max.entry_memory().bytes[4], 2048 + 2048);
        // With reuse, b = negate(a) writes into a's buffer (a dies there).
        let heap = module_memory(&m, None, &shape_size, MemoryOptions::heap_simulator()).unwrap();
        assert_eq!(heap.entry_memory().bytes[3], 1024);
        assert_eq!(heap.computation_peak(c1), 1024);
    }

    #[test]
    fn while_reuses_its_operand_buffers() {
        let m = parse_module(
            r#"
HloModule m, is_scheduled=true

cond {
  cp = (f32[8], s32[]) parameter(0)
  ROOT t = pred[] constant(true)
}

body {
  bp = (f32[8], s32[]) parameter(0)
  g0 = f32[8] get-tuple-element(bp), index=0
  g1 = s32[] get-tuple-element(bp), index=1
  x = f32[8] exponential(g0)
  n = f32[8] negate(x)
  ROOT bt = (f32[8], s32[]) tuple(n, g1)
}

ENTRY main {
  p = f32[8] parameter(0)
  e = f32[8] exponential(p)
  i = s32[] constant(0)
  init = (f32[8], s32[]) tuple(e, i)
  w = (f32[8], s32[]) while(init), condition=cond, body=body
  g = f32[8] get-tuple-element(w), index=0
  ROOT r = f32[8] negate(g)
}
"#,
        )
        .unwrap();
        let mem = module_memory(&m, None, &shape_size, MemoryOptions::default()).unwrap();
        let e = mem.entry_memory();
        // e (32), i (4) and init's table (16) are the while's buffers too: the while allocates
        // nothing but adds the body's peak (x, 32 bytes; n and the tuple are the body's live
        // out). Nobody reads element {1} after the while (a get-tuple-element reads only the
        // table), so i dies there; the table dies at g, e's buffer at r, which reads it via g.
        assert_eq!(e.bytes, [0, 32, 36, 52, 52 + 32, 48, 32]);
        let w = m.find_instruction("w").unwrap();
        assert!(e.buffers.iter().all(|b| b.defining != w));
        assert!(e.buffers.iter().any(|b| !b.merged.is_empty()));
    }

    #[test]
    fn bad_sequences_and_cycles_are_errors() {
        let mut m = parse_module(DIAMOND).unwrap();
        let e = m.entry().unwrap();
        let mut seq = xla_post_order(&m, e);
        seq.swap(0, 2);
        let err = check_sequence(&m, e, &seq).unwrap_err().to_string();
        assert!(err.contains("comes before its operand"), "{err}");
        seq.swap(0, 2);
        seq.pop();
        let err = check_sequence(&m, e, &seq).unwrap_err().to_string();
        assert!(err.contains("%r is missing"), "{err}");
        // A control edge from r to p closes a cycle.
        let p = m.find_instruction("p").unwrap();
        let r = m.find_instruction("r").unwrap();
        m.add_control_dependency(r, p);
        for k in SchedulerKind::ALL {
            let err = schedule_module(&mut m, k, &shape_size).unwrap_err();
            assert!(
                matches!(
                    err,
                    ScheduleError::Cycle { .. } | ScheduleError::BadSequence { .. }
                ),
                "{k}: {err}"
            );
        }
        assert!("greedy".parse::<SchedulerKind>().is_err());
    }
}
