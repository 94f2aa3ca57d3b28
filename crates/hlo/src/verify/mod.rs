//! The HLO verifier: checks a [`Module`] the way XLA's `HloVerifier` does and reports every
//! finding, not only the first.
//!
//! What is checked (see docs/verifier.md for the differences from XLA):
//! - structure: an entry computation, a root in every computation, parameters numbered
//!   `0..n`, operands that are live instructions of the same computation, unique names;
//! - every instruction's shape against [`shape_inference`] (operand counts and types, called
//!   computations' signatures, attributes), with XLA's comparison rules: layouts ignored and, by
//!   default, floating-point precision ignored except for the opcodes that pass data through
//!   unchanged (`tuple`, `get-tuple-element`, `call`, `while`, `parameter`, ...);
//! - opcode-specific rules of XLA's `InstructionVerifier` (comparison types, replica groups,
//!   source-target pairs, async and send/recv pairing, fusion bodies, execution threads);
//! - layouts (minor_to_major a permutation of the dimensions), shardings (tile assignment rank,
//!   device ids, tuple leaf counts), the entry computation layout, input/output aliases;
//! - the schedule, when there is one: every instruction exactly once, operands and control
//!   predecessors before their users;
//! - optionally, computations that nothing calls ([`VerifyOptions::allow_dangling_computations`]).

pub mod display;
mod module_checks;
pub mod shape_inference;

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::attrs::{ComparisonType, ReplicaGroups};
use crate::instruction::{CompId, InstrId, Instruction};
use crate::module::{Module, ProgramShape};
use crate::opcode::Opcode;
use crate::shape::{Shape, UNBOUNDED_DIM};
use crate::sharding::{Sharding, ShardingKind};
use crate::types::ElementType;

pub use display::shape_str;
use shape_inference::{compatible, InferInput, ShapeError};

/// Options of [`verify`]. The defaults are those of the verifier XLA runs on modules it is given
/// (`CreateModuleFromProto` and `HloTestBase`): layout-insensitive, mixed precision allowed.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// Compare layouts too when comparing declared and inferred shapes.
    pub layout_sensitive: bool,
    /// Accept results and operands that differ from the inferred shape only in floating-point
    /// precision (f32 vs bf16), as XLA does for instructions that define new values.
    pub allow_mixed_precision: bool,
    /// Accept computations that no instruction calls (XLA's verifier does not look for them).
    pub allow_dangling_computations: bool,
    /// Accept unbounded dynamic dimensions (`?`); XLA's verifier refuses them by default.
    pub allow_unbounded_dynamism: bool,
    /// Bound for device ids in shardings. `None`: `num_partitions` when the module uses SPMD
    /// partitioning with more than one partition (XLA's rule), otherwise no bound.
    pub num_devices: Option<i64>,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            layout_sensitive: false,
            allow_mixed_precision: true,
            allow_dangling_computations: true,
            allow_unbounded_dynamism: false,
            num_devices: None,
        }
    }
}

/// One problem found in a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The computation the problem is in (empty for module-level findings).
    pub computation: String,
    /// The instruction, when the problem belongs to one.
    pub instruction: Option<String>,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.instruction, self.computation.is_empty()) {
            (Some(i), false) => write!(f, "{}: %{}: {}", self.computation, i, self.message),
            (Some(i), true) => write!(f, "%{}: {}", i, self.message),
            (None, false) => write!(f, "computation {}: {}", self.computation, self.message),
            (None, true) => write!(f, "module: {}", self.message),
        }
    }
}

/// Every finding of one [`verify`] run, in a deterministic order (computations in stored order,
/// instructions in stored order, module-level checks last).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct VerifyErrors {
    pub findings: Vec<Finding>,
}

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} verifier finding(s):", self.findings.len())?;
        for x in &self.findings {
            write!(f, "\n  {x}")?;
        }
        Ok(())
    }
}

/// Verifies `module`; `Err` holds every finding.
pub fn verify(module: &Module, options: &VerifyOptions) -> Result<(), VerifyErrors> {
    let findings = findings(module, options);
    if findings.is_empty() {
        Ok(())
    } else {
        Err(VerifyErrors { findings })
    }
}

/// Every finding for `module` (empty when it verifies).
pub fn findings(module: &Module, options: &VerifyOptions) -> Vec<Finding> {
    let mut v = Verifier {
        m: module,
        opts: options,
        out: Vec::new(),
        fusion_comps: HashSet::new(),
        async_comps: HashSet::new(),
    };
    v.run();
    v.out
}

struct Verifier<'a> {
    m: &'a Module,
    opts: &'a VerifyOptions,
    out: Vec<Finding>,
    /// Computations called by fusion instructions.
    fusion_comps: HashSet<CompId>,
    /// Computations wrapped by async-start/update/done.
    async_comps: HashSet<CompId>,
}

/// How a collective forms its groups (XLA's `CollectiveOpGroupMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupMode {
    CrossReplica,
    CrossPartition,
    CrossReplicaAndPartition,
    FlattenedId,
}

impl GroupMode {
    fn name(self) -> &'static str {
        match self {
            GroupMode::CrossReplica => "cross_replica",
            GroupMode::CrossPartition => "cross_partition",
            GroupMode::CrossReplicaAndPartition => "cross_replica_and_partition",
            GroupMode::FlattenedId => "flattened_id",
        }
    }
}

impl<'a> Verifier<'a> {
    fn comp_name(&self, c: CompId) -> String {
        self.m
            .try_comp(c)
            .map_or_else(|| format!("<removed {c}>"), |c| c.name.clone())
    }

    fn err_instr(&mut self, id: InstrId, msg: impl Into<String>) {
        let i = self.m.instr(id);
        self.out.push(Finding {
            computation: self.comp_name(i.parent),
            instruction: Some(i.name.clone()),
            message: msg.into(),
        });
    }

    fn err_comp(&mut self, c: CompId, msg: impl Into<String>) {
        self.out.push(Finding {
            computation: self.comp_name(c),
            instruction: None,
            message: msg.into(),
        });
    }

    fn err_module(&mut self, msg: impl Into<String>) {
        self.out.push(Finding {
            computation: String::new(),
            instruction: None,
            message: msg.into(),
        });
    }

    fn run(&mut self) {
        let m = self.m;
        if m.name.is_empty() {
            self.err_module("the module has no name");
        }
        match m.entry() {
            None => self.err_module("the module has no entry computation"),
            Some(e) if m.try_comp(e).is_none() => {
                self.err_module("the entry computation was removed")
            }
            _ => {}
        }
        for &c in m.computations() {
            for &i in m.comp(c).instructions() {
                let ins = m.instr(i);
                match ins.opcode {
                    Opcode::Fusion => self.fusion_comps.extend(ins.called.iter().copied()),
                    Opcode::AsyncStart | Opcode::AsyncUpdate | Opcode::AsyncDone => {
                        self.async_comps.extend(ins.called.iter().copied())
                    }
                    _ => {}
                }
            }
        }
        if let Some(e) = m.entry() {
            if self.fusion_comps.contains(&e) {
                self.err_module("the entry computation cannot be a fusion computation");
            }
        }
        self.check_names();
        for &c in m.computations() {
            self.check_computation(c);
        }
        self.check_reachability();
        self.check_entry_layout();
        self.check_aliases();
        self.check_schedule();
        self.check_channels();
        self.check_layout_constrained_all_reduce();
    }

    // ----- names and structure -----

    fn check_names(&mut self) {
        let m = self.m;
        let mut seen: HashMap<&str, String> = HashMap::new();
        for &c in m.computations() {
            let comp = m.comp(c);
            if let Some(prev) = seen.insert(&comp.name, "a computation".into()) {
                self.err_comp(
                    c,
                    format!("the name `{}` is also used by {}", comp.name, prev),
                );
            }
        }
        // The computation as the value (its name is looked up only for an error), and the
        // table sized once: a String per instruction and the rehashing while the table grew
        // were most of this check's cost on modules of many computations.
        let mut seen_i: HashMap<&str, CompId> = HashMap::with_capacity(m.instruction_count());
        for &c in m.computations() {
            for &i in m.comp(c).instructions() {
                let ins = m.instr(i);
                if let Some(prev) = seen_i.insert(&ins.name, c) {
                    self.err_instr(
                        i,
                        format!(
                            "the instruction name is not unique in the module (also used in computation {})",
                            m.comp(prev).name
                        ),
                    );
                }
            }
        }
    }

    fn check_computation(&mut self, c: CompId) {
        let m = self.m;
        let comp = m.comp(c);
        match comp.root() {
            None => self.err_comp(c, "the computation has no root instruction"),
            Some(r) if m.try_instr(r).is_none_or(|i| i.parent != c) => {
                self.err_comp(c, "the root is not an instruction of this computation")
            }
            _ => {}
        }
        for n in 0..comp.num_parameters() {
            if comp.parameter(n).is_none() {
                self.err_comp(
                    c,
                    format!(
                        "parameter numbers must be 0..{}, but parameter {} is missing",
                        comp.num_parameters(),
                        n
                    ),
                );
            }
        }
        for &i in comp.instructions() {
            self.check_instruction(c, i);
        }
        if self.fusion_comps.contains(&c) {
            self.check_fusion_body(c);
        }
        if self.async_comps.contains(&c) {
            self.check_async_body(c);
        }
    }

    fn check_fusion_body(&mut self, c: CompId) {
        let m = self.m;
        let comp = m.comp(c);
        let root = comp.root();
        for &i in comp.instructions() {
            if Some(i) == root {
                if !m.users(i).is_empty() {
                    self.err_instr(i, "the root of a fused computation may not have users");
                }
            } else if m.users(i).is_empty() {
                self.err_instr(
                    i,
                    "a non-root instruction of a fused computation must have users",
                );
            }
        }
    }

    fn check_async_body(&mut self, c: CompId) {
        let m = self.m;
        let comp = m.comp(c);
        let others: Vec<InstrId> = comp
            .instructions()
            .iter()
            .copied()
            .filter(|&i| m.instr(i).opcode != Opcode::Parameter && Some(i) != comp.root())
            .collect();
        let only_send_recv = comp.instructions().iter().all(|&i| {
            matches!(
                m.instr(i).opcode,
                Opcode::Parameter
                    | Opcode::Send
                    | Opcode::Recv
                    | Opcode::SendDone
                    | Opcode::RecvDone
                    | Opcode::Tuple
                    | Opcode::GetTupleElement
            )
        });
        if !others.is_empty() && !only_send_recv {
            self.err_comp(
                c,
                "an asynchronous computation may contain only its root and parameters",
            );
        }
    }

    // ----- one instruction -----

    fn check_instruction(&mut self, c: CompId, id: InstrId) {
        let m = self.m;
        let ins = m.instr(id);
        if ins.parent != c {
            self.err_instr(id, "the instruction's parent is not its computation");
        }
        let mut operands_ok = true;
        for (k, &op) in ins.operands().iter().enumerate() {
            match m.try_instr(op) {
                None => {
                    self.err_instr(id, format!("operand {k} is a removed instruction"));
                    operands_ok = false;
                }
                Some(o) if o.parent != ins.parent => {
                    self.err_instr(
                        id,
                        format!(
                            "operand {k} (%{}) is in computation {}, not {}",
                            o.name,
                            self.comp_name(o.parent),
                            self.comp_name(ins.parent)
                        ),
                    );
                    operands_ok = false;
                }
                _ => {}
            }
        }
        let mut called_ok = true;
        for &cc in ins.called.iter() {
            if m.try_comp(cc).is_none() {
                self.err_instr(id, format!("calls a removed computation ({cc})"));
                called_ok = false;
            }
        }
        self.check_layouts(id, &ins.shape);
        if !self.opts.allow_unbounded_dynamism && has_unbounded(&ins.shape) {
            self.err_instr(
                id,
                format!(
                    "unbounded dynamic dimensions are not allowed: {}",
                    shape_str(&ins.shape)
                ),
            );
        }
        if let Some(s) = &ins.sharding {
            self.check_sharding(id, s, &ins.shape);
        }
        if !operands_ok || !called_ok {
            return;
        }
        self.check_called_count(id);
        self.check_threads(id);
        self.check_shape(id);
        self.check_opcode_rules(id);
    }

    fn check_called_count(&mut self, id: InstrId) {
        use Opcode::*;
        let ins = self.m.instr(id);
        let n = ins.called.len();
        let want: Option<(usize, usize)> = match ins.opcode {
            While | SelectAndScatter => Some((2, 2)),
            Call | Fusion | Map | Reduce | ReduceWindow | Scatter | Sort | Scan | AllReduce
            | AllReduceStart | ReduceScatter | AsyncStart => Some((1, 1)),
            // XLA's protos name the wrapped computation on async-start only.
            AsyncUpdate | AsyncDone => Some((0, 1)),
            Conditional => Some((1, usize::MAX)),
            CustomCall | CollectiveReduce => None,
            _ => Some((0, 0)),
        };
        if let Some((lo, hi)) = want {
            if n < lo || n > hi {
                let msg = if hi == 0 {
                    format!("{} does not call computations, but calls {}", ins.opcode, n)
                } else if lo == hi {
                    format!(
                        "{} must call {} computation(s), calls {}",
                        ins.opcode, lo, n
                    )
                } else {
                    format!(
                        "{} must call at least {} computation(s), calls {}",
                        ins.opcode, lo, n
                    )
                };
                self.err_instr(id, msg);
            }
        }
    }

    fn check_threads(&mut self, id: InstrId) {
        let m = self.m;
        let ins = m.instr(id);
        let here = m.comp(ins.parent).execution_thread.clone();
        if ins.opcode.is_async() {
            let want = ins.attrs.async_execution_thread.clone();
            if let Some(cc) = self.wrapped(id) {
                let t = m.comp(cc).execution_thread.clone();
                let want_name = want.as_deref().unwrap_or("main");
                if t.as_deref().unwrap_or("main") != want_name {
                    self.err_instr(
                        id,
                        format!(
                            "expects its async thread `{}` to be the wrapped computation {}'s thread `{}`",
                            want_name,
                            m.comp(cc).name,
                            t.as_deref().unwrap_or("main")
                        ),
                    );
                }
            }
            return;
        }
        if matches!(
            ins.opcode,
            Opcode::While | Opcode::Call | Opcode::Conditional | Opcode::CustomCall
        ) {
            return;
        }
        for &cc in ins.called.iter() {
            let t = &m.comp(cc).execution_thread;
            if t.as_deref().unwrap_or("main") != here.as_deref().unwrap_or("main") {
                self.err_instr(
                    id,
                    format!(
                        "calls computation {} on thread `{}` from thread `{}`",
                        m.comp(cc).name,
                        t.as_deref().unwrap_or("main"),
                        here.as_deref().unwrap_or("main")
                    ),
                );
            }
        }
    }

    /// The computation an async-start/update/done wraps: its own called computation, else the
    /// one of the async-start its operand chain leads to.
    fn wrapped(&self, id: InstrId) -> Option<CompId> {
        let mut cur = id;
        for _ in 0..64 {
            let ins = self.m.instr(cur);
            if let Some(&c) = ins.called.first() {
                return Some(c);
            }
            if !matches!(ins.opcode, Opcode::AsyncUpdate | Opcode::AsyncDone) {
                return None;
            }
            cur = *ins.operands().first()?;
        }
        None
    }

    fn signature(&self, c: CompId) -> ProgramShape {
        self.m.program_shape(c)
    }

    /// Infers the shape and compares it with the declared one, by XLA's `CheckShape` rules.
    fn check_shape(&mut self, id: InstrId) {
        use Opcode::*;
        let m = self.m;
        let ins = m.instr(id);
        if !ins.shape.sizes_fit() {
            self.err_instr(
                id,
                format!(
                    "shape {} has more elements or bytes than an i64 can count",
                    shape_str(&ins.shape)
                ),
            );
            return;
        }
        if matches!(
            ins.opcode,
            Parameter | CustomCall | Bitcast | Scan | Shuffle
        ) {
            // No shape to infer, but a fixed operand count still holds (a proto can give a
            // bitcast none, which the text form cannot print).
            if let Err(e) =
                shape_inference::check_operand_count(ins.opcode, ins.operands().len(), 0)
            {
                self.err_instr(id, e.to_string());
            }
            return;
        }
        if ins.opcode == Constant {
            match ins.attrs.literal.as_deref() {
                None => self.err_instr(id, "a constant must have a literal"),
                Some(l) => {
                    if !compatible(&l.shape, &ins.shape, false) {
                        self.err_instr(
                            id,
                            format!(
                                "the literal's shape {} differs from the constant's shape {}",
                                shape_str(&l.shape),
                                shape_str(&ins.shape)
                            ),
                        );
                    }
                }
            }
            return;
        }
        let shapes: Vec<&Shape> = ins.operands().iter().map(|&o| &m.instr(o).shape).collect();
        let called: Vec<ProgramShape> = if ins.opcode.is_async() {
            self.wrapped(id)
                .map(|c| self.signature(c))
                .into_iter()
                .collect()
        } else {
            ins.called.iter().map(|&c| self.signature(c)).collect()
        };
        let inp = InferInput {
            operands: &shapes,
            attrs: &ins.attrs,
            called: &called,
            target: Some(&ins.shape),
            replica_count: m.config.replica_count,
            num_partitions: m.config.num_partitions,
        };
        let inferred = match shape_inference::infer(ins.opcode, &inp) {
            Ok(s) => s,
            Err(ShapeError::Invalid(msg)) => {
                self.err_instr(id, msg);
                return;
            }
            Err(e @ ShapeError::NeedsTarget(_)) => {
                self.err_instr(id, e.to_string());
                return;
            }
        };
        // Opcodes that pass data through unchanged may not change precision (XLA's list).
        let exact = matches!(
            ins.opcode,
            Bitcast
                | Call
                | Conditional
                | Constant
                | CopyDone
                | CopyStart
                | CustomCall
                | GetTupleElement
                | Infeed
                | Outfeed
                | OptimizationBarrier
                | Parameter
                | Recv
                | RecvDone
                | Send
                | SendDone
                | Tuple
                | While
                | DynamicUpdateSlice
        );
        let ignore_fp = !exact && self.opts.allow_mixed_precision;
        let mut same = compatible(&ins.shape, &inferred, ignore_fp);
        if same && self.opts.layout_sensitive && !layouts_equal(&ins.shape, &inferred) {
            same = false;
        }
        if !same {
            self.err_instr(
                id,
                format!(
                    "the shape is {} but {} infers {}",
                    shape_str(&ins.shape),
                    ins.opcode,
                    shape_str(&inferred)
                ),
            );
        }
        if !self.opts.allow_mixed_precision {
            self.check_mixed_precision(id);
        }
    }

    fn check_mixed_precision(&mut self, id: InstrId) {
        use Opcode::*;
        let m = self.m;
        let ins = m.instr(id);
        if matches!(
            ins.opcode,
            Call | Conditional
                | Constant
                | Convolution
                | Dot
                | AllReduce
                | AllReduceStart
                | AllReduceDone
                | AllGather
                | AllGatherStart
                | AllGatherDone
                | AsyncDone
                | AsyncUpdate
                | AsyncStart
                | CopyDone
                | CopyStart
                | CustomCall
                | Domain
                | Fusion
                | GetTupleElement
                | OptimizationBarrier
                | Infeed
                | Outfeed
                | Parameter
                | Recv
                | RecvDone
                | ReducePrecision
                | ReduceWindow
                | Send
                | SendDone
                | Sort
                | Tuple
                | While
        ) {
            return;
        }
        let mut fp: Option<ElementType> = None;
        for &o in ins.operands() {
            let mut bad = false;
            m.instr(o).shape.for_each_subshape(|_, s| {
                if let Shape::Array(a) = s {
                    if a.ty.is_float() {
                        match fp {
                            None => fp = Some(a.ty),
                            Some(t) if t != a.ty => bad = true,
                            _ => {}
                        }
                    }
                }
            });
            if bad {
                self.err_instr(
                    id,
                    "operands have floating-point types of different precisions, but mixed precision is disallowed",
                );
                return;
            }
        }
    }

    // ----- opcode-specific rules -----

    fn check_opcode_rules(&mut self, id: InstrId) {
        use Opcode::*;
        let m = self.m;
        let ins = m.instr(id);
        match ins.opcode {
            Compare => self.check_compare(id),
            AllReduce | AllReduceStart => {
                if let Some(ch) = ins.attrs.channel_id {
                    if ch <= 0 {
                        self.err_instr(id, "an all-reduce's channel id must be greater than 0");
                    }
                }
                if let Some(mode) = self.group_mode(id, Some(ins.attrs.use_global_device_ids)) {
                    self.check_replica_groups(id, mode, false);
                }
            }
            AllGather | AllGatherStart | ReduceScatter => {
                if let Some(mode) = self.group_mode(id, Some(ins.attrs.use_global_device_ids)) {
                    self.check_replica_groups(id, mode, true);
                    self.check_shard_count(id, mode);
                }
            }
            AllToAll | RaggedAllToAll => {
                if let Some(mode) = self.group_mode(id, None) {
                    self.check_replica_groups(id, mode, true);
                    if ins.opcode == AllToAll
                        && ins.attrs.dimensions.as_deref().is_none_or(|d| d.is_empty())
                    {
                        let k = self.subgroup_size(id, mode);
                        if k != ins.operands().len() as i64 {
                            self.err_instr(
                                id,
                                format!(
                                    "a tuple all-to-all needs one operand per participant ({}), has {}",
                                    k,
                                    ins.operands().len()
                                ),
                            );
                        }
                    }
                }
            }
            CollectiveBroadcast => {
                if let Some(mode) = self.group_mode(id, None) {
                    self.check_replica_groups(id, mode, true);
                }
            }
            CollectivePermute | CollectivePermuteStart => {
                if let Some(mode) = self.group_mode(id, None) {
                    self.check_source_target_pairs(id, mode);
                }
                if ins.opcode == CollectivePermuteStart {
                    self.check_single_user(id, &[CollectivePermuteDone]);
                }
            }
            Conditional => {
                let cond_shardings: Vec<InstrId> = std::iter::once(id)
                    .chain(ins.called.iter().filter_map(|&b| m.comp(b).root()))
                    .collect();
                self.check_consistent_sharding(id, &cond_shardings);
            }
            While => {
                let mut v = vec![id];
                if let (Some(cond), Some(body)) = (ins.while_condition(), ins.while_body()) {
                    v.extend(m.comp(body).root());
                    v.extend(m.comp(body).parameter(0));
                    v.extend(m.comp(cond).parameter(0));
                }
                self.check_consistent_sharding(id, &v);
            }
            Call if ins.attrs.is_composite => self.check_composite(id),
            CustomCall => self.check_custom_call(id),
            Fusion => self.check_fusion(id),
            AsyncStart => {
                self.check_single_user(id, &[AsyncUpdate, AsyncDone]);
                self.check_async_tuple(id, &ins.shape);
            }
            AsyncUpdate => {
                self.check_single_operand(id, &[AsyncStart, AsyncUpdate]);
                self.check_single_user(id, &[AsyncUpdate, AsyncDone]);
                self.check_async_tuple(id, &ins.shape);
                self.check_same_wrapped(id);
            }
            AsyncDone => {
                self.check_single_operand(id, &[AsyncStart, AsyncUpdate]);
                // Without an operand the finding above is the whole story.
                if let Some(&start) = ins.operands().first() {
                    let s = m.instr(start).shape.clone();
                    self.check_async_tuple(id, &s);
                    self.check_same_wrapped(id);
                }
            }
            AllReduceDone => self.check_single_operand(id, &[AllReduceStart]),
            CopyStart => self.check_single_user(id, &[CopyDone]),
            CopyDone => self.check_single_operand(id, &[CopyStart]),
            CollectivePermuteDone => self.check_single_operand(id, &[CollectivePermuteStart]),
            Send | Recv => {
                let parent = m.comp(ins.parent);
                let async_root =
                    parent.root() == Some(id) && self.async_comps.contains(&ins.parent);
                if !async_root {
                    let done = if ins.opcode == Send {
                        SendDone
                    } else {
                        RecvDone
                    };
                    self.check_single_user(id, &[done, Tuple]);
                }
            }
            SendDone => self.check_single_operand(id, &[Send, GetTupleElement]),
            RecvDone => self.check_single_operand(id, &[Recv, GetTupleElement]),
            _ => {}
        }
        if ins.attrs.result_accuracy.is_some() && !ins.opcode.is_elementwise_unary() {
            self.err_instr(
                id,
                format!("result_accuracy is not supported for {}", ins.opcode),
            );
        }
    }

    fn check_compare(&mut self, id: InstrId) {
        let m = self.m;
        let ins = m.instr(id);
        let Some(cmp) = ins.attrs.comparison else {
            self.err_instr(id, "compare needs direction=...");
            return;
        };
        let Some(ty) = cmp.ty else { return };
        // A wrong operand count is reported by shape inference.
        let Some(&rhs) = ins.operands().get(1) else {
            return;
        };
        let et = m.instr(rhs).shape.element_type();
        let ok = if et.is_float() {
            matches!(ty, ComparisonType::Float | ComparisonType::TotalOrder)
        } else if et.is_complex() {
            // XLA's default for complex is the float comparison; total order is also allowed.
            matches!(ty, ComparisonType::Float | ComparisonType::TotalOrder)
        } else if et.is_signed_int() {
            ty == ComparisonType::Signed
        } else {
            ty == ComparisonType::Unsigned
        };
        if !ok {
            self.err_instr(
                id,
                format!("comparison type {ty:?} does not fit operands of type {et}"),
            );
        }
    }

    /// XLA's `GetCollectiveOpGroupMode`; `None` after reporting an invalid combination.
    fn group_mode(&mut self, id: InstrId, use_global: Option<bool>) -> Option<GroupMode> {
        let ins = self.m.instr(id);
        let has_channel = ins.attrs.channel_id.is_some();
        match (has_channel, use_global) {
            (false, None) | (false, Some(false)) => Some(GroupMode::CrossReplica),
            (false, Some(true)) => {
                self.err_instr(id, "use_global_device_ids=true needs a channel_id");
                None
            }
            (true, None) => Some(GroupMode::CrossPartition),
            (true, Some(false)) => Some(GroupMode::CrossReplicaAndPartition),
            (true, Some(true)) => Some(GroupMode::FlattenedId),
        }
    }

    /// The groups as lists; `None` for an iota or mesh that does not describe groups (which
    /// [`Self::check_replica_groups`] reports).
    fn explicit_groups(&self, id: InstrId) -> Option<std::borrow::Cow<'a, [Vec<i64>]>> {
        match self.m.instr(id).attrs.replica_groups.as_deref() {
            None => Some(std::borrow::Cow::Borrowed(&[])),
            // Explicit lists are read in place (a partitioned module holds hundreds of them).
            Some(ReplicaGroups::Explicit(g)) => Some(std::borrow::Cow::Borrowed(g.as_slice())),
            Some(g) => g.groups().ok().map(std::borrow::Cow::Owned),
        }
    }

    fn subgroup_size(&self, id: InstrId, mode: GroupMode) -> i64 {
        let cfg = &self.m.config;
        let groups = self.explicit_groups(id).unwrap_or_default();
        let first = groups.first().map(|g| g.len() as i64);
        match mode {
            GroupMode::CrossReplica => first.unwrap_or(cfg.replica_count),
            GroupMode::CrossReplicaAndPartition => {
                first.unwrap_or(cfg.replica_count) * cfg.num_partitions
            }
            GroupMode::FlattenedId => first.unwrap_or(1),
            GroupMode::CrossPartition => first.unwrap_or(cfg.num_partitions),
        }
    }

    /// XLA's `CheckReplicaGroups`.
    fn check_replica_groups(&mut self, id: InstrId, mode: GroupMode, uniform: bool) {
        let Some(groups) = self.explicit_groups(id) else {
            if let Some(Err(e)) = self
                .m
                .instr(id)
                .attrs
                .replica_groups
                .as_deref()
                .map(|g| g.groups())
            {
                self.err_instr(id, format!("replica groups that describe no groups: {e}"));
            }
            return;
        };
        if groups.is_empty() {
            if mode == GroupMode::FlattenedId {
                self.err_instr(id, "replica groups must be given in flattened-id mode");
            }
            return;
        }
        if groups.iter().any(Vec::is_empty) {
            self.err_instr(id, "a replica group is empty");
            return;
        }
        // Valid groups name 0..n once each (n ids in all). The common case, every id in that
        // range, is checked with a dense table: a partitioned module on 512 devices has
        // hundreds of collectives naming every device, and hashing each id cost more than the
        // partitioner itself.
        let total: usize = groups.iter().map(Vec::len).sum();
        let in_range = groups
            .iter()
            .flatten()
            .all(|&r| r >= 0 && (r as usize) < total);
        let n = if in_range {
            let mut seen = vec![false; total];
            for &r in groups.iter().flatten() {
                if std::mem::replace(&mut seen[r as usize], true) {
                    self.err_instr(
                        id,
                        format!("replica {r} appears more than once in the replica groups"),
                    );
                    return;
                }
            }
            total as i64
        } else {
            let mut seen = HashSet::new();
            for &r in groups.iter().flatten() {
                if !seen.insert(r) {
                    self.err_instr(
                        id,
                        format!("replica {r} appears more than once in the replica groups"),
                    );
                    return;
                }
            }
            let n = seen.len() as i64;
            for r in 0..n {
                if !seen.contains(&r) {
                    self.err_instr(
                        id,
                        format!("replica {r} is not named in the replica groups"),
                    );
                    return;
                }
            }
            n
        };
        let cfg = &self.m.config;
        let (limit, what) = match mode {
            GroupMode::CrossReplica | GroupMode::CrossReplicaAndPartition => {
                (cfg.replica_count, "replicas")
            }
            GroupMode::CrossPartition => (cfg.num_partitions, "partitions"),
            GroupMode::FlattenedId => (cfg.replica_count * cfg.num_partitions, "flattened ids"),
        };
        if limit != 1 && n != limit {
            self.err_instr(
                id,
                format!(
                    "in {} mode the replica groups should contain {} {}, but contain {}",
                    mode.name(),
                    limit,
                    what,
                    n
                ),
            );
        }
        if uniform && groups.iter().any(|g| g.len() != groups[0].len()) {
            self.err_instr(id, "replica groups must all have the same size");
        }
    }

    fn check_shard_count(&mut self, id: InstrId, mode: GroupMode) {
        let m = self.m;
        let ins = m.instr(id);
        let Some(&[d]) = ins.attrs.dimensions.as_deref() else {
            return;
        };
        if d < 0 || ins.operands().is_empty() {
            return;
        }
        let op0 = &m.instr(ins.operand(0)).shape;
        let out0 = match (ins.opcode, ins.operands().len()) {
            (Opcode::AllGatherStart, 1) => ins.shape.tuple_elements().get(1).cloned(),
            (Opcode::AllGatherStart, _) => ins
                .shape
                .tuple_elements()
                .get(1)
                .and_then(|t| t.tuple_elements().first().cloned()),
            (_, 1) => Some(ins.shape.clone()),
            _ => ins.shape.tuple_elements().first().cloned(),
        };
        let Some(out0) = out0 else { return };
        let (Some(&a), Some(&b)) = (op0.dims().get(d as usize), out0.dims().get(d as usize)) else {
            return;
        };
        let (num, den) = if ins.opcode == Opcode::ReduceScatter {
            (a, b)
        } else {
            (b, a)
        };
        if den <= 0 {
            return;
        }
        let shard = (num + den - 1) / den;
        let k = self.subgroup_size(id, mode);
        if k != 1 && shard != k {
            self.err_instr(
                id,
                format!("the shard count is {shard} but the replica group size is {k}"),
            );
        }
    }

    fn check_source_target_pairs(&mut self, id: InstrId, mode: GroupMode) {
        let ins = self.m.instr(id);
        let cfg = &self.m.config;
        let limit = if mode == GroupMode::CrossReplica {
            cfg.replica_count
        } else {
            cfg.num_partitions
        };
        let Some(pairs) = ins.attrs.source_target_pairs.clone() else {
            return;
        };
        // The in-place combined form may name a source/target once per offset.
        let allowed = if ins.operands().len() == 4 {
            let s2 = &self.m.instr(ins.operand(2)).shape;
            match s2 {
                Shape::Tuple(e) if e.first().is_some_and(Shape::is_tuple) => {
                    e[0].tuple_elements().len().max(1)
                }
                Shape::Tuple(e) => e.len().max(1),
                _ => 1,
            }
        } else {
            1
        };
        let mut src: HashMap<i64, usize> = HashMap::new();
        let mut tgt: HashMap<i64, usize> = HashMap::new();
        for (s, t) in pairs {
            for (v, role, map) in [(s, "source", &mut src), (t, "target", &mut tgt)] {
                if v < 0 {
                    self.err_instr(id, format!("{role} {v} in source_target_pairs is negative"));
                    return;
                }
                if limit != 1 && v >= limit {
                    self.err_instr(
                        id,
                        format!("{role} {v} in source_target_pairs must be < {limit}"),
                    );
                    return;
                }
                let c = map.entry(v).or_insert(0);
                *c += 1;
                if *c > allowed {
                    self.err_instr(
                        id,
                        format!("{role} {v} appears more than once in source_target_pairs"),
                    );
                    return;
                }
            }
        }
    }

    fn check_consistent_sharding(&mut self, id: InstrId, instrs: &[InstrId]) {
        let m = self.m;
        let mut first: Option<(&Sharding, InstrId)> = None;
        for &i in instrs {
            let Some(s) = m.instr(i).sharding.as_ref() else {
                continue;
            };
            match first {
                None => first = Some((s, i)),
                Some((f, fi)) => {
                    if !same_sharding(f, s) {
                        self.err_instr(
                            id,
                            format!(
                                "inconsistent {} sharding between %{} and %{}",
                                m.instr(id).opcode,
                                m.instr(fi).name,
                                m.instr(i).name
                            ),
                        );
                        return;
                    }
                }
            }
        }
    }

    fn check_composite(&mut self, id: InstrId) {
        let fa = &self.m.instr(id).frontend_attributes;
        match fa.get("composite.name") {
            Some(n) if !n.is_empty() => {}
            _ => self.err_instr(
                id,
                "a composite call must have a non-empty frontend attribute composite.name",
            ),
        }
        if fa.get("composite.attributes").is_some_and(|a| a.is_empty()) {
            self.err_instr(
                id,
                "a composite call's composite.attributes must be {} or non-empty",
            );
        }
        if let Some(v) = fa.get("composite.version") {
            if v.parse::<i64>().map_or(true, |v| v < 0) {
                self.err_instr(
                    id,
                    format!("a composite call's composite.version must be a non-negative integer, got `{v}`"),
                );
            }
        }
    }

    fn check_custom_call(&mut self, id: InstrId) {
        let m = self.m;
        let ins = m.instr(id);
        let Some(cc) = ins.attrs.custom_call.as_deref() else {
            return;
        };
        if let Some(cons) = &cc.operand_layout_constraints {
            if cc.target != "LayoutConstraint" {
                if cons.len() != ins.operands().len() {
                    self.err_instr(
                        id,
                        format!(
                            "operand_layout_constraints has {} shapes for {} operands",
                            cons.len(),
                            ins.operands().len()
                        ),
                    );
                } else {
                    for (k, (c, &o)) in cons.iter().zip(ins.operands()).enumerate() {
                        if !compatible(c, &m.instr(o).shape, false) {
                            self.err_instr(
                                id,
                                format!(
                                    "operand {} is {} but its layout constraint is {}",
                                    k,
                                    shape_str(&m.instr(o).shape),
                                    shape_str(c)
                                ),
                            );
                        }
                    }
                }
            }
        }
        for a in &cc.output_to_operand_aliasing {
            self.check_output_operand_alias(id, a);
        }
    }

    fn check_output_operand_alias(&mut self, id: InstrId, a: &crate::attrs::OutputOperandAlias) {
        let m = self.m;
        let ins = m.instr(id);
        let Some(&op) = usize::try_from(a.operand)
            .ok()
            .and_then(|k| ins.operands().get(k))
        else {
            self.err_instr(
                id,
                format!(
                    "output_to_operand_aliasing names operand {}, which does not exist",
                    a.operand
                ),
            );
            return;
        };
        let oi: Option<Vec<usize>> = a
            .operand_index
            .iter()
            .map(|&x| usize::try_from(x).ok())
            .collect();
        let ri: Option<Vec<usize>> = a
            .output_index
            .iter()
            .map(|&x| usize::try_from(x).ok())
            .collect();
        let os = oi.as_deref().and_then(|ix| m.instr(op).shape.subshape(ix));
        let rs = ri.as_deref().and_then(|ix| ins.shape.subshape(ix));
        match (os, rs) {
            (Some(os), Some(rs)) => {
                if !compatible(unbuffer(os), unbuffer(rs), false) {
                    self.err_instr(
                        id,
                        format!(
                            "aliased output {} and operand {} have different shapes",
                            shape_str(rs),
                            shape_str(os)
                        ),
                    );
                }
            }
            (None, _) => self.err_instr(
                id,
                format!(
                    "output_to_operand_aliasing has an invalid operand shape index {:?}",
                    a.operand_index
                ),
            ),
            (_, None) => self.err_instr(
                id,
                format!(
                    "output_to_operand_aliasing has an invalid output shape index {:?}",
                    a.output_index
                ),
            ),
        }
    }

    fn check_fusion(&mut self, id: InstrId) {
        let m = self.m;
        let ins = m.instr(id);
        let Some(&f) = ins.called.first() else { return };
        let comp = m.comp(f);
        // Other fusions must not call the same computation.
        let callers = m
            .computations()
            .iter()
            .flat_map(|&c| m.comp(c).instructions().iter().copied())
            .filter(|&i| {
                let x = m.instr(i);
                x.opcode == Opcode::Fusion && x.called.contains(&f)
            })
            .count();
        if callers > 1 {
            self.err_instr(
                id,
                format!(
                    "the fused computation {} is called by {} fusions",
                    comp.name, callers
                ),
            );
        }
        if let Some(cc) = ins.attrs.custom_call.as_deref() {
            for a in &cc.output_to_operand_aliasing {
                self.check_output_operand_alias(id, a);
            }
        }
    }

    fn check_single_user(&mut self, id: InstrId, allowed: &[Opcode]) {
        let m = self.m;
        let ins = m.instr(id);
        let users = ins.users();
        if users.len() != 1 {
            self.err_instr(
                id,
                format!(
                    "{} requires exactly one user, found {}",
                    ins.opcode,
                    users.len()
                ),
            );
            return;
        }
        let u = m.instr(users[0]).opcode;
        if !allowed.contains(&u) {
            self.err_instr(
                id,
                format!(
                    "the user of {} must be {}, found {}",
                    ins.opcode,
                    names(allowed),
                    u
                ),
            );
        }
    }

    fn check_single_operand(&mut self, id: InstrId, allowed: &[Opcode]) {
        let m = self.m;
        let ins = m.instr(id);
        if ins.operands().len() != 1 {
            self.err_instr(id, format!("{} requires exactly one operand", ins.opcode));
            return;
        }
        let o = m.instr(ins.operand(0)).opcode;
        if !allowed.contains(&o) {
            self.err_instr(
                id,
                format!(
                    "the operand of {} must be {}, found {}",
                    ins.opcode,
                    names(allowed),
                    o
                ),
            );
        }
    }

    /// The async tuple of start/update/done: `{0}` the wrapped computation's parameters,
    /// `{1}` its result.
    fn check_async_tuple(&mut self, id: InstrId, s: &Shape) {
        let Some(f) = self.wrapped(id) else { return };
        let sig = self.signature(f);
        match s {
            Shape::Tuple(e) if e.len() >= 2 => {
                let params = Shape::Tuple(sig.parameters.clone());
                if !compatible(&e[0], &params, false) {
                    self.err_instr(
                        id,
                        format!(
                            "the async shape at index {{0}} is {} but the wrapped computation takes {}",
                            shape_str(&e[0]),
                            shape_str(&params)
                        ),
                    );
                }
                if !compatible(&e[1], &sig.result, false) {
                    self.err_instr(
                        id,
                        format!(
                            "the async shape at index {{1}} is {} but the wrapped computation returns {}",
                            shape_str(&e[1]),
                            shape_str(&sig.result)
                        ),
                    );
                }
            }
            other => self.err_instr(
                id,
                format!(
                    "the async shape must be a tuple of at least two elements, found {}",
                    shape_str(other)
                ),
            ),
        }
    }

    fn check_same_wrapped(&mut self, id: InstrId) {
        let m = self.m;
        let Some(&op) = m.instr(id).operands().first() else {
            return;
        };
        if self.wrapped(op) != self.wrapped(id) {
            self.err_instr(
                id,
                format!(
                    "wraps a different computation than its operand %{}",
                    m.instr(op).name
                ),
            );
        }
    }

    // ----- layouts and shardings -----

    fn check_layouts(&mut self, id: InstrId, shape: &Shape) {
        let mut problems = Vec::new();
        shape.for_each_subshape(|_, s| {
            if let Shape::Array(a) = s {
                if let Some(l) = &a.layout {
                    let m2m = &l.minor_to_major;
                    if m2m.len() != a.rank() {
                        problems.push(format!(
                            "the layout of {} has {} minor_to_major entries for rank {}",
                            shape_str(s),
                            m2m.len(),
                            a.rank()
                        ));
                    } else if !is_perm(m2m) {
                        problems.push(format!(
                            "the layout {{{}}} of {} is not a permutation of its dimensions",
                            m2m.iter()
                                .map(|x| x.to_string())
                                .collect::<Vec<_>>()
                                .join(","),
                            shape_str(s)
                        ));
                    }
                    if !l.dim_levels.is_empty() && l.dim_levels.len() != a.rank() {
                        problems.push(format!(
                            "the layout of {} has {} dimension level types for rank {}",
                            shape_str(s),
                            l.dim_levels.len(),
                            a.rank()
                        ));
                    }
                }
            }
        });
        for p in problems {
            self.err_instr(id, p);
        }
    }

    fn num_devices(&self) -> Option<i64> {
        if self.opts.num_devices.is_some() {
            return self.opts.num_devices;
        }
        let c = &self.m.config;
        (c.use_spmd_partitioning && c.num_partitions > 1).then_some(c.num_partitions)
    }

    fn check_sharding(&mut self, id: InstrId, s: &Sharding, shape: &Shape) {
        if shape.is_token() {
            return;
        }
        let nd = self.num_devices();
        let mut problems = Vec::new();
        match (&s.kind, shape) {
            (ShardingKind::Tuple(elems), _) => {
                let leaves: Vec<&Shape> = leaf_shapes(shape);
                if !shape.is_tuple() {
                    problems.push(format!(
                        "a tuple sharding on the non-tuple shape {}",
                        shape_str(shape)
                    ));
                } else if elems.len() != leaves.len() && !(leaves.is_empty() && elems.is_empty()) {
                    problems.push(format!(
                        "the tuple sharding has {} elements but the shape {} has {} leaves",
                        elems.len(),
                        shape_str(shape),
                        leaves.len()
                    ));
                } else {
                    for (k, (e, l)) in elems.iter().zip(leaves).enumerate() {
                        if let Err(p) = validate_leaf(e, l, nd) {
                            problems.push(format!("tuple sharding element {k}: {p}"));
                        }
                    }
                }
            }
            // XLA's parser spreads a non-tuple sharding over every leaf of a tuple shape.
            (_, Shape::Tuple(_)) => {
                for l in leaf_shapes(shape) {
                    if let Err(p) = validate_leaf(s, l, nd) {
                        problems.push(p);
                        break;
                    }
                }
            }
            _ => {
                if let Err(p) = validate_leaf(s, shape, nd) {
                    problems.push(p);
                }
            }
        }
        for p in problems {
            self.err_instr(id, format!("invalid sharding: {p}"));
        }
    }
}

// ----- free helpers -----

/// The array inside a `b(...)` buffer shape (XLA compares pinned buffers with their arrays).
fn unbuffer(s: &Shape) -> &Shape {
    match s {
        Shape::Buffer(b) => b,
        _ => s,
    }
}

fn names(ops: &[Opcode]) -> String {
    ops.iter()
        .map(|o| o.name())
        .collect::<Vec<_>>()
        .join(" or ")
}

fn is_perm(v: &[i64]) -> bool {
    let n = v.len();
    let mut seen = vec![false; n];
    v.iter()
        .all(|&x| x >= 0 && (x as usize) < n && !std::mem::replace(&mut seen[x as usize], true))
}

fn has_unbounded(s: &Shape) -> bool {
    let mut found = false;
    s.for_each_subshape(|_, x| {
        if let Shape::Array(a) = x {
            if a.dims.contains(&UNBOUNDED_DIM) {
                found = true;
            }
        }
    });
    found
}

fn layouts_equal(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => match (&x.layout, &y.layout) {
            (Some(p), Some(q)) => p.minor_to_major == q.minor_to_major,
            _ => true,
        },
        (Shape::Tuple(x), Shape::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| layouts_equal(p, q))
        }
        _ => true,
    }
}

fn leaf_shapes(s: &Shape) -> Vec<&Shape> {
    fn walk<'s>(s: &'s Shape, out: &mut Vec<&'s Shape>) {
        match s {
            Shape::Tuple(e) => e.iter().for_each(|x| walk(x, out)),
            _ => out.push(s),
        }
    }
    let mut v = Vec::new();
    walk(s, &mut v);
    v
}

fn same_sharding(a: &Sharding, b: &Sharding) -> bool {
    // Metadata does not take part in sharding equality (as in XLA's operator==).
    a.kind == b.kind && a.shard_group == b.shard_group
}

/// XLA's `HloSharding::ValidateNonTuple`.
fn validate_leaf(s: &Sharding, shape: &Shape, num_devices: Option<i64>) -> Result<(), String> {
    if shape.is_tuple() {
        return Err("the shape is a tuple but the sharding is not".into());
    }
    let in_range = |d: i64| -> Result<(), String> {
        if d < 0 {
            return Err(format!("device {d} is negative"));
        }
        if let Some(n) = num_devices {
            if d >= n {
                return Err(format!("device {d} >= num_devices ({n})"));
            }
        }
        Ok(())
    };
    match &s.kind {
        ShardingKind::Replicated
        | ShardingKind::Manual
        | ShardingKind::Unknown
        | ShardingKind::Unreduced => Ok(()),
        ShardingKind::Maximal(d) => in_range(*d),
        ShardingKind::Tuple(_) => Err("a nested tuple sharding on a non-tuple shape".into()),
        // XLA's `ValidateNonTuple` on a named leaf, after `VerifyNamedSharding`.
        ShardingKind::Named(n) => {
            n.validate()?;
            if s.shard_group.is_some() {
                return Err("a named sharding cannot be in a shard group".into());
            }
            if n.is_replicated() || n.is_manual() || n.is_unreduced() {
                return Ok(());
            }
            if let Some(d) = n.mesh.single_device_id() {
                return in_range(d);
            }
            let devices = n.num_devices();
            if devices <= 1 {
                return Err(format!(
                    "the mesh has {devices} device(s): a sharding over one device is written {{replicated}} or single_device[...]"
                ));
            }
            if n.dims.len() != shape.rank() {
                return Err(format!(
                    "the named sharding has {} dimension(s) but the shape {} has rank {}",
                    n.dims.len(),
                    shape_str(shape),
                    shape.rank()
                ));
            }
            if let Some(nd) = num_devices {
                if devices != nd {
                    return Err(format!(
                        "the sharding should have {nd} devices but its mesh has {devices}"
                    ));
                }
            }
            Ok(())
        }
        ShardingKind::Tiled(t) => {
            let ta = &t.tile_assignment;
            let dims = ta.dims();
            let subgroups = t.last_tile_dims.len() + usize::from(t.replicate_on_last_tile_dim);
            if dims.is_empty() {
                return Err(
                    "the tile assignment has no dimensions (`devices=[]`, which the text cannot \
                     hold; one tile is written {replicated})"
                        .into(),
                );
            }
            if dims.iter().product::<i64>() == 1 {
                // XLA turns a one-device tile assignment into a replicated sharding.
                return Ok(());
            }
            if dims.len() < subgroups || dims.len() - subgroups != shape.rank() {
                return Err(format!(
                    "the tile assignment has {} dimension(s) ({} of them subgroups) but the shape {} has rank {}",
                    dims.len(),
                    subgroups,
                    shape_str(shape),
                    shape.rank()
                ));
            }
            match ta {
                crate::sharding::TileAssignment::Iota {
                    dims,
                    reshape_dims,
                    transpose_perm,
                } => {
                    let n: i64 = dims.iter().product();
                    let r: i64 = reshape_dims.iter().product();
                    if n != r {
                        return Err(format!(
                            "the tile assignment has {n} tiles but its iota has {r} devices"
                        ));
                    }
                    if !transpose_perm.is_empty()
                        && (transpose_perm.len() != reshape_dims.len() || !is_perm(transpose_perm))
                    {
                        return Err(
                            "the iota transpose is not a permutation of its reshape dims".into(),
                        );
                    }
                    if let Some(nd) = num_devices {
                        if n != nd {
                            return Err(format!(
                                "the tile assignment should have {nd} devices but has {n}"
                            ));
                        }
                    }
                    Ok(())
                }
                crate::sharding::TileAssignment::Explicit { dims, devices } => {
                    let n: i64 = dims.iter().product();
                    if n != devices.len() as i64 {
                        return Err(format!(
                            "the tile assignment has {} tiles but lists {} devices",
                            n,
                            devices.len()
                        ));
                    }
                    let mut seen = HashSet::new();
                    for &d in devices {
                        in_range(d)?;
                        if !seen.insert(d) {
                            return Err(format!("device {d} is not unique in the tile assignment"));
                        }
                    }
                    if let Some(nd) = num_devices {
                        if seen.len() as i64 != nd {
                            return Err(format!(
                                "the tile assignment should have {nd} devices but has {}",
                                seen.len()
                            ));
                        }
                    }
                    Ok(())
                }
            }
        }
    }
}

impl Instruction {
    /// Infers this instruction's shape from `module` (its operands and called computations), with
    /// its own shape as the target. A convenience for passes and tests.
    pub fn infer_shape_in(&self, module: &Module) -> Result<Shape, ShapeError> {
        let shapes: Vec<&Shape> = self
            .operands()
            .iter()
            .map(|&o| &module.instr(o).shape)
            .collect();
        let called: Vec<ProgramShape> = self
            .called
            .iter()
            .map(|&c| module.program_shape(c))
            .collect();
        shape_inference::infer(
            self.opcode,
            &InferInput {
                operands: &shapes,
                attrs: &self.attrs,
                called: &called,
                target: Some(&self.shape),
                replica_count: module.config.replica_count,
                num_partitions: module.config.num_partitions,
            },
        )
    }
}

#[cfg(test)]
mod tests;
