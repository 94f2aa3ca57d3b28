//! Computations and modules, and the mutation API that keeps def-use edges consistent.
//!
//! A [`Module`] owns two arenas: every instruction of every computation (indexed by
//! [`InstrId`]) and every computation (indexed by [`CompId`]). Removed entries leave a hole, so
//! ids stay valid for side tables; [`Module::instr_capacity`] is the length a dense side table
//! needs. Invariants kept by every method here:
//! - an operand of an instruction is a live instruction of the same computation;
//! - `users` of X lists each instruction that has X as an operand exactly once, and nothing else;
//! - control edges are mirrored (`a` in `b.control_predecessors` iff `b` in `a.control_successors`);
//! - instruction and computation names are unique in the module.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use smallvec::SmallVec;

use crate::instruction::{CompId, InstrId, Instruction};
use crate::metadata::{FrontendAttributes, StackFrameIndex};
use crate::names::NameTable;
use crate::opcode::Opcode;
use crate::shape::Shape;
use crate::sharding::Sharding;
use std::sync::OnceLock;

/// A computation: an ordered list of instructions with parameters and a root.
#[derive(Clone, Debug)]
pub struct Computation {
    /// Unique among the module's computations: renamed only through the module.
    pub(crate) name: String,
    /// Instructions in their stored order (the text order after parsing).
    pub(crate) instrs: Vec<InstrId>,
    /// Parameters by parameter number (`None` for a number not yet added).
    pub(crate) params: Vec<Option<InstrId>>,
    pub(crate) root: Option<InstrId>,
    /// `execution_thread="..."` when not the main thread.
    pub execution_thread: Option<String>,
    /// True for the entry computation (kept by [`Module::set_entry`]; read it with
    /// [`Computation::is_entry`]).
    pub(crate) is_entry: bool,
}

impl Computation {
    /// The computation's name, unique among the module's computations.
    #[inline]
    pub fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    pub fn instructions(&self) -> &[InstrId] {
        &self.instrs
    }

    /// Parameter instructions by parameter number.
    pub fn parameters(&self) -> impl Iterator<Item = InstrId> + '_ {
        self.params.iter().flatten().copied()
    }

    #[inline]
    pub fn parameter(&self, number: usize) -> Option<InstrId> {
        self.params.get(number).copied().flatten()
    }

    pub fn num_parameters(&self) -> usize {
        self.params.len()
    }

    #[inline]
    pub fn root(&self) -> Option<InstrId> {
        self.root
    }

    /// True for the module's entry computation (`ENTRY` in the text).
    #[inline]
    pub fn is_entry(&self) -> bool {
        self.is_entry
    }
}

/// How an output aliases an input (`input_output_alias={ {0}: (0, {}, may-alias) }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AliasKind {
    MayAlias,
    MustAlias,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InputOutputAlias {
    pub output_index: Vec<i64>,
    pub parameter_number: i64,
    pub parameter_index: Vec<i64>,
    pub kind: AliasKind,
}

/// `buffer_donor={ (0, {}), (1, {0}) }`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferDonor {
    pub parameter_number: i64,
    pub parameter_index: Vec<i64>,
}

/// `entry_computation_layout={(f32[2]{0}, s32[])->f32[2]{0}}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProgramShape {
    pub parameters: Vec<Shape>,
    pub result: Shape,
}

/// Everything in the `HloModule` header line besides the name.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ModuleConfig {
    pub entry_computation_layout: Option<ProgramShape>,
    pub input_output_alias: Vec<InputOutputAlias>,
    pub buffer_donor: Vec<BufferDonor>,
    /// 1 when not given.
    pub replica_count: i64,
    /// 1 when not given.
    pub num_partitions: i64,
    pub allow_spmd_sharding_propagation_to_parameters: Option<Vec<bool>>,
    pub allow_spmd_sharding_propagation_to_output: Option<Vec<bool>>,
    pub alias_passthrough_params: bool,
    pub use_spmd_partitioning: bool,
    pub spmd_output_sharding: Option<Sharding>,
    pub spmd_parameters_shardings: Option<Vec<Sharding>>,
    pub frontend_attributes: FrontendAttributes,
    /// `origin_recovery_table={...}`: for original values that passes replaced, the value
    /// that replaced each one and the module that computes the original from it (XLA's
    /// `OriginalValueRecoveryTable`). Ordered by the replaced value, as XLA prints it.
    pub origin_recovery_table: BTreeMap<OriginalArray, RecoveryEntry>,
    /// `debug_attributes={...}`: per original value, the debug callbacks attached to it
    /// (XLA's debug attribute table, `HloModuleProto.debug_attributes`). Ordered by the
    /// value, as XLA prints it; a value never has an empty list (XLA drops such entries).
    pub debug_attributes: BTreeMap<OriginalArray, Vec<DebugAttributes>>,
}

/// One debug callback of an original value: `{log_mode=default,callback_id=5,op_id=7}`
/// (XLA's `DebugAttributes`). Zero, `false` and [`DebugLogMode::None`] are "not given".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct DebugAttributes {
    pub log_mode: DebugLogMode,
    pub callback_id: i64,
    pub op_id: i64,
    pub partitioned: bool,
}

/// How a debug callback logs (`log_mode=`). XLA's module keeps these three; the proto's
/// `NO_FUSION` and `GUARANTEED` read as `None`, as XLA reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DebugLogMode {
    #[default]
    None,
    Default,
    FusionDebugger,
}

/// One value of the original program: `{"name" {1,0}}` (an instruction name and a tuple
/// index into its value; XLA's `OriginalArray`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct OriginalArray {
    pub instruction_name: String,
    pub shape_index: Vec<i64>,
}

/// What replaced an original value, and the module recovering the original from it
/// (none when the replacing value is the original itself, renamed).
#[derive(Clone)]
pub struct RecoveryEntry {
    pub replacing: OriginalArray,
    pub module: Option<Box<Module>>,
}

impl std::fmt::Debug for RecoveryEntry {
    /// The recovery module as its text (its arenas and name tables are not part of what it
    /// is).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveryEntry")
            .field("replacing", &self.replacing)
            .field("module", &self.module.as_ref().map(|m| m.to_text()))
            .finish()
    }
}

impl PartialEq for RecoveryEntry {
    /// Modules compare structurally ([`crate::module_diff`]).
    fn eq(&self, other: &RecoveryEntry) -> bool {
        self.replacing == other.replacing
            && match (&self.module, &other.module) {
                (None, None) => true,
                (Some(a), Some(b)) => crate::module_diff::module_diff(a, b).is_none(),
                _ => false,
            }
    }
}

/// The order instructions execute in, per computation (`is_scheduled=true`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    pub sequences: IndexMap<CompId, Vec<InstrId>>,
}

/// Errors of the mutation API: they point at a caller's mistake, named by instruction.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum MutationError {
    #[error("%{0}: cannot remove an instruction that still has users ({1})")]
    HasUsers(String, String),
    #[error("%{0}: operand %{1} belongs to another computation")]
    CrossComputation(String, String),
    #[error("%{name}: operand index {index} out of range (it has {count} operands)")]
    OperandIndex {
        name: String,
        index: usize,
        count: usize,
    },
    #[error("name `{0}` is already used in the module")]
    DuplicateName(String),
    #[error("%{0}: parameter number {1} is already taken in computation {2}")]
    DuplicateParameter(String, i64, String),
    #[error("%{0}: cannot remove the root of computation {1}; set another root first")]
    RemovesRoot(String, String),
    #[error("%{0}: a parameter with control edges cannot be replaced by an argument")]
    ControlEdgeOnParameter(String),
}

#[derive(Clone, Debug)]
pub struct Module {
    pub name: String,
    instrs: Vec<Option<Instruction>>,
    /// The opcode of every instruction, by id (kept for removed ones): a walk that only asks
    /// what each instruction is reads a byte each instead of a line of a 360-byte record,
    /// which stays in the caches on modules of hundreds of thousands of instructions.
    /// Written where `instrs` is: when an instruction is added and by [`Module::set_opcode`].
    opcodes: Vec<Opcode>,
    comps: Vec<Option<Computation>>,
    /// Computations in stored order (callees before callers after parsing XLA text).
    comp_order: Vec<CompId>,
    entry: Option<CompId>,
    pub config: ModuleConfig,
    pub schedule: Option<Schedule>,
    pub stack_frames: StackFrameIndex,
    /// Every instruction name in use, for uniqueness. Built from the instructions on first
    /// need: the text parser checks names with its own table and leaves it unbuilt, so a module
    /// that is parsed and printed never pays for it.
    names: OnceLock<NameTable>,
    /// Every computation name in use (a separate namespace, as in XLA: a computation and an
    /// instruction may both be called `add`).
    comp_names: NameTable,
    /// Scalar reduction computations made by [`crate::builder::Builder::reducer`], one per
    /// element type and operation (checked to be still there before reuse).
    reducers: Vec<(crate::types::ElementType, Opcode, CompId)>,
}

/// A set of instruction ids for one mutation: a flag per arena slot when the set is a fair
/// part of the arena, else a hash set. Removing a few instructions from a large module then
/// costs what it removes, not a cleared table of the whole arena (a walk that removes each
/// computation's leftovers in turn paid the arena once per computation: quadratic).
enum IdSet {
    Dense(Vec<bool>),
    Sparse(std::collections::HashSet<InstrId, crate::fxhash::FxBuildHasher>),
}

impl IdSet {
    /// A set for about `expected` ids of an arena of `arena` slots.
    fn for_arena(arena: usize, expected: usize) -> IdSet {
        if expected.saturating_mul(32) >= arena {
            IdSet::Dense(vec![false; arena])
        } else {
            IdSet::Sparse(std::collections::HashSet::with_capacity_and_hasher(
                expected,
                Default::default(),
            ))
        }
    }

    /// Adds `id`; false if it was there.
    fn insert(&mut self, id: InstrId) -> bool {
        match self {
            IdSet::Dense(v) => !std::mem::replace(&mut v[id.index()], true),
            IdSet::Sparse(s) => s.insert(id),
        }
    }

    fn contains(&self, id: InstrId) -> bool {
        match self {
            IdSet::Dense(v) => v[id.index()],
            IdSet::Sparse(s) => s.contains(&id),
        }
    }
}

impl Module {
    pub fn new(name: impl Into<String>) -> Module {
        Module {
            name: name.into(),
            instrs: Vec::new(),
            opcodes: Vec::new(),
            comps: Vec::new(),
            comp_order: Vec::new(),
            entry: None,
            config: ModuleConfig {
                replica_count: 1,
                num_partitions: 1,
                ..ModuleConfig::default()
            },
            schedule: None,
            stack_frames: StackFrameIndex::default(),
            names: OnceLock::new(),
            comp_names: NameTable::default(),
            reducers: Vec::new(),
        }
    }

    /// The cached reduction computation for `(ty, op)`, if it is still in the module.
    pub(crate) fn cached_reducer(
        &self,
        ty: crate::types::ElementType,
        op: Opcode,
    ) -> Option<CompId> {
        self.reducers
            .iter()
            .find(|r| r.0 == ty && r.1 == op)
            .map(|r| r.2)
            .filter(|&c| self.try_comp(c).is_some())
    }

    pub(crate) fn cache_reducer(&mut self, ty: crate::types::ElementType, op: Opcode, c: CompId) {
        self.reducers.retain(|r| !(r.0 == ty && r.1 == op));
        self.reducers.push((ty, op, c));
    }

    // ----- lookup -----

    #[inline]
    pub fn instr(&self, id: InstrId) -> &Instruction {
        self.instrs[id.index()]
            .as_ref()
            .expect("use of a removed instruction")
    }

    /// The opcode of an instruction: the same as `instr(id).opcode()`, from a dense table
    /// (see the field `opcodes`). `id` must be an instruction of the module (a removed one
    /// gives the opcode it had).
    #[inline]
    pub fn opcode(&self, id: InstrId) -> Opcode {
        self.opcodes[id.index()]
    }

    /// The instructions whose opcode is one of `wanted`, in id order, found in the dense
    /// opcode table: a pass looking for a few kinds of instruction reads a byte per
    /// instruction and the records of those only.
    pub fn instructions_with_opcode<'a>(
        &'a self,
        wanted: &'a [Opcode],
    ) -> impl Iterator<Item = InstrId> + 'a {
        self.opcodes
            .iter()
            .enumerate()
            .filter(|(_, op)| wanted.contains(op))
            .map(|(k, _)| InstrId::new(k))
            .filter(|id| self.instrs[id.index()].is_some())
    }

    /// Changes what an instruction is, keeping everything else (tests that give an
    /// instruction another meaning before running a module).
    pub fn set_opcode(&mut self, id: InstrId, opcode: Opcode) {
        self.instr_mut(id).opcode = opcode;
        self.opcodes[id.index()] = opcode;
    }

    /// Mutable access to an instruction's own fields. Operands, users and control edges are not
    /// reachable through it; use the mutation methods for those.
    pub fn instr_mut(&mut self, id: InstrId) -> &mut Instruction {
        self.instrs[id.index()]
            .as_mut()
            .expect("use of a removed instruction")
    }

    #[inline]
    pub fn try_instr(&self, id: InstrId) -> Option<&Instruction> {
        self.instrs.get(id.index()).and_then(Option::as_ref)
    }

    #[inline]
    pub fn comp(&self, id: CompId) -> &Computation {
        self.comps[id.index()]
            .as_ref()
            .expect("use of a removed computation")
    }

    pub fn comp_mut(&mut self, id: CompId) -> &mut Computation {
        self.comps[id.index()]
            .as_mut()
            .expect("use of a removed computation")
    }

    pub fn try_comp(&self, id: CompId) -> Option<&Computation> {
        self.comps.get(id.index()).and_then(Option::as_ref)
    }

    /// Length a dense side table over instruction ids needs.
    pub fn instr_capacity(&self) -> usize {
        self.instrs.len()
    }

    /// Length a dense side table over computation ids needs.
    pub fn comp_capacity(&self) -> usize {
        self.comps.len()
    }

    /// Number of live instructions in the module.
    pub fn instruction_count(&self) -> usize {
        self.instrs.iter().filter(|i| i.is_some()).count()
    }

    /// Computations in stored order.
    pub fn computations(&self) -> &[CompId] {
        &self.comp_order
    }

    pub fn entry(&self) -> Option<CompId> {
        self.entry
    }

    pub fn set_entry(&mut self, comp: CompId) {
        if let Some(old) = self.entry {
            if let Some(c) = self.comps[old.index()].as_mut() {
                c.is_entry = false;
            }
        }
        self.comp_mut(comp).is_entry = true;
        self.entry = Some(comp);
    }

    #[inline]
    pub fn operands(&self, id: InstrId) -> &[InstrId] {
        &self.instr(id).operands
    }

    #[inline]
    pub fn users(&self, id: InstrId) -> &[InstrId] {
        &self.instr(id).users
    }

    pub fn find_computation(&self, name: &str) -> Option<CompId> {
        self.comp_order
            .iter()
            .copied()
            .find(|&c| self.comp(c).name == name)
    }

    pub fn find_instruction(&self, name: &str) -> Option<InstrId> {
        self.instrs
            .iter()
            .enumerate()
            .find(|(_, i)| i.as_ref().is_some_and(|i| i.name == name))
            .map(|(k, _)| InstrId::new(k))
    }

    pub fn is_name_used(&self, name: &str) -> bool {
        self.names().contains(name)
    }

    /// The instruction name table, built now if it was not yet.
    fn names(&self) -> &NameTable {
        self.names.get_or_init(|| self.build_names())
    }

    fn names_mut(&mut self) -> &mut NameTable {
        if self.names.get().is_none() {
            self.names = OnceLock::from(self.build_names());
        }
        self.names.get_mut().expect("the name table was just built")
    }

    fn build_names(&self) -> NameTable {
        let mut t = NameTable::default();
        let (count, bytes) = self
            .instrs
            .iter()
            .flatten()
            .fold((0, 0), |(n, b), i| (n + 1, b + i.name.len()));
        t.reserve(count, bytes);
        for i in self.instrs.iter().flatten() {
            t.insert_new(&i.name, 0);
        }
        t
    }

    /// True once the instruction name table exists (see [`Module::add_parsed_instruction`]).
    pub(crate) fn name_table_built(&self) -> bool {
        self.names.get().is_some()
    }

    /// Forgets a removed instruction's name (nothing to do while the table is unbuilt).
    fn forget_name(&mut self, name: &str) {
        if let Some(t) = self.names.get_mut() {
            t.remove(name);
        }
    }

    /// True if a computation of the module has this name.
    pub fn is_computation_name_used(&self, name: &str) -> bool {
        self.comp_names.contains(name)
    }

    /// A computation name not yet used in the module: `base`, else `base.1`, `base.2`, ...
    /// The module's one allocator of computation names; it remembers, per `base`, where to
    /// continue, so making k names from one base costs O(k), not O(k^2).
    pub fn unique_computation_name(&mut self, base: &str) -> String {
        let Some(next) = self.comp_names.get(base) else {
            return base.to_string();
        };
        let mut n = next.max(1);
        loop {
            let candidate = format!("{base}.{n}");
            if !self.comp_names.contains(&candidate) {
                self.comp_names.set(base, n + 1);
                return candidate;
            }
            n += 1;
        }
    }

    /// A name for a copy of an instruction named `base` that is still in the module: the same
    /// as [`Module::unique_name`] without the lookup of `base` itself, which is known to be
    /// taken (one random probe of the name table fewer per copy when inlining a large module).
    pub fn unique_copy_name(&mut self, base: &str) -> String {
        debug_assert!(self.is_name_used(base), "{base} is not in the module");
        self.next_free_name(base)
    }

    /// The computation an async-update or async-done wraps when it does not name one: its
    /// operand's, if that operand is an async-start or async-update (the text parser and the
    /// proto reader both fill it in this way).
    pub(crate) fn async_computation_of_operand(&self, operands: &[InstrId]) -> Option<CompId> {
        let o = self.instr(*operands.first()?);
        (o.opcode.is_async() && o.opcode != Opcode::AsyncDone)
            .then(|| o.called.first().copied())
            .flatten()
    }

    /// The shape of a recv-done of these operands: its recv's data and a token, whatever shape
    /// was declared, as XLA builds it (the text parser and the proto reader both use it).
    /// `None` when the operand is not a recv with a data element.
    pub(crate) fn recv_done_shape(&self, operands: &[InstrId]) -> Option<Shape> {
        let r = self.instr(*operands.first()?);
        let data = (r.opcode == Opcode::Recv).then(|| r.shape.tuple_elements().first())??;
        Some(Shape::Tuple(vec![data.clone(), Shape::Token]))
    }

    /// A name not yet used in the module, made from `base` with XLA's `.N` suffixes.
    pub fn unique_name(&mut self, base: &str) -> String {
        if !self.names_mut().contains(base) {
            return base.to_string();
        }
        self.next_free_name(base)
    }

    /// `stem.N` for the first free `N` from where the last one of the same stem was found.
    fn next_free_name(&mut self, base: &str) -> String {
        let stem = crate::names::split_suffix(base).map_or(base, |(stem, _)| stem);
        let names = self.names_mut();
        let mut n = names.get(stem).unwrap_or(0).max(1);
        // One buffer for every candidate: `stem.` once, then only the number is rewritten.
        let mut candidate = String::with_capacity(stem.len() + 8);
        candidate.push_str(stem);
        candidate.push('.');
        let keep = candidate.len();
        loop {
            candidate.truncate(keep);
            push_decimal(&mut candidate, n);
            if !names.contains(&candidate) {
                names.set(stem, n + 1);
                return candidate;
            }
            n += 1;
        }
    }

    fn claim_name(&mut self, name: &str) -> Result<(), MutationError> {
        if !self.names_mut().insert_new(name, 0) {
            return Err(MutationError::DuplicateName(name.to_string()));
        }
        Ok(())
    }

    // ----- building -----

    /// Reserves room for `instructions` more instructions and `computations` more computations
    /// (the text parser calls it with an estimate, to avoid regrowing the arenas).
    pub fn reserve(&mut self, instructions: usize, computations: usize) {
        self.instrs.reserve(instructions);
        self.opcodes.reserve(instructions);
        // Names average well under 24 bytes.
        if let Some(names) = self.names.get_mut() {
            names.reserve(instructions, instructions * 24);
        }
        self.comps.reserve(computations);
        self.comp_order.reserve(computations);
        self.comp_names.reserve(computations, computations * 24);
    }

    /// Adds an empty computation with a name that must be unused.
    pub fn add_computation(&mut self, name: impl Into<String>) -> Result<CompId, MutationError> {
        let name = name.into();
        if !self.comp_names.insert_new(&name, 0) {
            return Err(MutationError::DuplicateName(name));
        }
        let id = CompId::new(self.comps.len());
        self.comps.push(Some(Computation {
            name,
            instrs: Vec::new(),
            params: Vec::new(),
            root: None,
            execution_thread: None,
            is_entry: false,
        }));
        self.comp_order.push(id);
        Ok(id)
    }

    /// Appends `instr` to computation `comp`, registering it as a user of its operands. A
    /// parameter takes its place by `attrs.parameter_number`. The first instruction added to an
    /// empty computation becomes its root until [`Module::set_root`] says otherwise; adding
    /// more never moves the root.
    pub fn add_instruction(
        &mut self,
        comp: CompId,
        instr: Instruction,
    ) -> Result<InstrId, MutationError> {
        self.add_instruction_impl(comp, instr, true)
    }

    /// [`Module::add_instruction`] for the text parser, which has made sure that the name is
    /// unused (with its own table while the module's is unbuilt, with
    /// [`Module::is_name_used`] once it is): the name is recorded only if the table exists.
    pub(crate) fn add_parsed_instruction(
        &mut self,
        comp: CompId,
        instr: Instruction,
    ) -> Result<InstrId, MutationError> {
        self.add_instruction_impl(comp, instr, false)
    }

    fn add_instruction_impl(
        &mut self,
        comp: CompId,
        mut instr: Instruction,
        always_claim: bool,
    ) -> Result<InstrId, MutationError> {
        for &op in &instr.operands {
            let o = self.instr(op);
            if o.parent != comp {
                return Err(MutationError::CrossComputation(
                    instr.name.clone(),
                    o.name.clone(),
                ));
            }
        }
        let id = InstrId::new(self.instrs.len());
        if instr.opcode == Opcode::Parameter {
            let n = instr.attrs.parameter_number;
            let c = self.comp(comp);
            let slot = usize::try_from(n).ok();
            if slot.is_none() || slot.is_some_and(|s| c.params.get(s).copied().flatten().is_some())
            {
                return Err(MutationError::DuplicateParameter(
                    instr.name.clone(),
                    n,
                    c.name.clone(),
                ));
            }
        }
        if always_claim || self.name_table_built() {
            self.claim_name(&instr.name)?;
        }
        instr.parent = comp;
        instr.users.clear();
        // Only touch the rare fields when set: writing would allocate them.
        if !instr.control_predecessors.is_empty() {
            instr.control_predecessors.clear();
        }
        if !instr.control_successors.is_empty() {
            instr.control_successors.clear();
        }
        let mut seen: smallvec::SmallVec<[InstrId; 4]> = smallvec::SmallVec::new();
        for &op in &instr.operands {
            if !seen.contains(&op) {
                seen.push(op);
            }
        }
        for op in seen {
            self.instrs[op.index()].as_mut().unwrap().users.push(id);
        }
        let is_param = instr.opcode == Opcode::Parameter;
        let pnum = instr.attrs.parameter_number as usize;
        self.opcodes.push(instr.opcode);
        self.instrs.push(Some(instr));
        let c = self.comp_mut(comp);
        c.instrs.push(id);
        if is_param {
            if c.params.len() <= pnum {
                c.params.resize(pnum + 1, None);
            }
            c.params[pnum] = Some(id);
        }
        if c.root.is_none() {
            c.root = Some(id);
        }
        Ok(id)
    }

    pub fn set_root(&mut self, comp: CompId, root: InstrId) {
        self.comp_mut(comp).root = Some(root);
    }

    // ----- def-use edits -----

    /// Makes operand `index` of `user` be `new`.
    pub fn replace_operand(
        &mut self,
        user: InstrId,
        index: usize,
        new: InstrId,
    ) -> Result<(), MutationError> {
        self.check_operand_edit(user, index, new)?;
        let old = self.instr(user).operands[index];
        if old == new {
            return Ok(());
        }
        self.instr_mut(user).operands[index] = new;
        if !self.instr(user).operands.contains(&old) {
            self.instr_mut(old).users.retain(|x| *x != user);
        }
        if !self.instr(new).users.contains(&user) {
            self.instr_mut(new).users.push(user);
        }
        Ok(())
    }

    /// Whether operand `index` of `user` may become `new`: the index exists and `new` lives in
    /// the same computation.
    fn check_operand_edit(
        &self,
        user: InstrId,
        index: usize,
        new: InstrId,
    ) -> Result<(), MutationError> {
        let u = self.instr(user);
        if index >= u.operands.len() {
            return Err(MutationError::OperandIndex {
                name: u.name.clone(),
                index,
                count: u.operands.len(),
            });
        }
        if self.instr(new).parent != u.parent {
            return Err(MutationError::CrossComputation(
                u.name.clone(),
                self.instr(new).name.clone(),
            ));
        }
        Ok(())
    }

    /// Applies many [`Module::replace_operand`] edits `(user, operand index, new value)` at
    /// once, with the operands and users that applying them one by one in order gives, but
    /// scanning each affected users list once: a value with n users that loses or gains k of
    /// them costs O(n log n + k^2) at worst, not O(n k). A user keeps its place in a users
    /// list it does not leave; users new to a list are appended in edit order (so the lists equal the
    /// one-by-one result unless an edit takes a value away that a later edit puts back). Every
    /// edit is checked before anything changes; on an error the module is untouched.
    pub fn replace_operands(
        &mut self,
        edits: &[(InstrId, usize, InstrId)],
    ) -> Result<(), MutationError> {
        for &(user, index, new) in edits {
            self.check_operand_edit(user, index, new)?;
        }
        // Write the operands; remember (old value, user, new value) of every real change.
        let mut changed: SmallVec<[(InstrId, InstrId, InstrId); 8]> = SmallVec::new();
        for &(user, index, new) in edits {
            let old = self.instr(user).operands[index];
            if old != new {
                self.instr_mut(user).operands[index] = new;
                changed.push((old, user, new));
            }
        }
        // Each value that lost a use keeps the users that still read it: one pass over its
        // list (operand lists are short).
        for k in 0..changed.len() {
            let old = changed[k].0;
            if changed[..k].iter().any(|c| c.0 == old) {
                continue;
            }
            let mut users = std::mem::take(&mut self.instr_mut(old).users);
            users.retain(|u| self.instr(*u).operands.contains(&old));
            self.instr_mut(old).users = users;
        }
        // Each value that gained a use appends, in edit order, the users that read it now and
        // are not listed yet. Long lists are looked up sorted, short ones scanned.
        for k in 0..changed.len() {
            let new = changed[k].2;
            if changed[..k].iter().any(|c| c.2 == new) {
                continue;
            }
            let mut users = std::mem::take(&mut self.instr_mut(new).users);
            let gained = changed[k..].iter().filter(|c| c.2 == new).map(|c| c.1);
            if users.len() <= 16 {
                for u in gained {
                    if !users.contains(&u) && self.instr(u).operands.contains(&new) {
                        users.push(u);
                    }
                }
            } else {
                let mut listed: Vec<InstrId> = users.to_vec();
                listed.sort_unstable();
                let mut added: SmallVec<[InstrId; 8]> = SmallVec::new();
                for u in gained {
                    if listed.binary_search(&u).is_err()
                        && !added.contains(&u)
                        && self.instr(u).operands.contains(&new)
                    {
                        users.push(u);
                        added.push(u);
                    }
                }
            }
            self.instr_mut(new).users = users;
        }
        Ok(())
    }

    /// Replaces every operand use of `old` by `new` (and the root, if `old` is a root).
    pub fn replace_all_uses_with(
        &mut self,
        old: InstrId,
        new: InstrId,
    ) -> Result<(), MutationError> {
        if old == new {
            return Ok(());
        }
        if self.instr(new).parent != self.instr(old).parent {
            return Err(MutationError::CrossComputation(
                self.instr(old).name.clone(),
                self.instr(new).name.clone(),
            ));
        }
        let users = std::mem::take(&mut self.instr_mut(old).users);
        for &u in &users {
            if u == new {
                // `new` uses `old` (e.g. new = copy(old)): keep that edge.
                continue;
            }
            for op in self.instr_mut(u).operands.iter_mut() {
                if *op == old {
                    *op = new;
                }
            }
            if !self.instr(new).users.contains(&u) {
                self.instr_mut(new).users.push(u);
            }
        }
        if users.contains(&new) {
            self.instr_mut(old).users.push(new);
        }
        let parent = self.instr(old).parent;
        if self.comp(parent).root == Some(old) {
            self.comp_mut(parent).root = Some(new);
        }
        Ok(())
    }

    /// Removes an instruction that has no users and is not its computation's root; its operands
    /// lose it as a user and its control edges are dropped (predecessors are not rewired; see
    /// XLA's `RemoveInstruction`).
    pub fn remove_instruction(&mut self, id: InstrId) -> Result<(), MutationError> {
        self.check_not_root(id)?;
        let i = self.instr(id);
        if !i.users.is_empty() {
            let names: Vec<String> = i
                .users
                .iter()
                .map(|&u| format!("%{}", self.instr(u).name))
                .collect();
            return Err(MutationError::HasUsers(i.name.clone(), names.join(", ")));
        }
        let instr = self.instrs[id.index()].take().unwrap();
        for &op in &instr.operands {
            if let Some(o) = self.instrs[op.index()].as_mut() {
                o.users.retain(|x| *x != id);
            }
        }
        for &p in &instr.control_predecessors {
            self.instr_mut(p).control_successors.retain(|&x| x != id);
        }
        for &s in &instr.control_successors {
            self.instr_mut(s).control_predecessors.retain(|&x| x != id);
        }
        self.forget_name(&instr.name);
        let c = self.comp_mut(instr.parent);
        c.instrs.retain(|&x| x != id);
        if instr.opcode == Opcode::Parameter {
            for p in c.params.iter_mut() {
                if *p == Some(id) {
                    *p = None;
                }
            }
        }
        if let Some(s) = self.schedule.as_mut() {
            if let Some(seq) = s.sequences.get_mut(&instr.parent) {
                seq.retain(|&x| x != id);
            }
        }
        Ok(())
    }

    /// A root stays until another instruction is made the root: removing it is refused.
    fn check_not_root(&self, id: InstrId) -> Result<(), MutationError> {
        let i = self.instr(id);
        let c = self.comp(i.parent);
        if c.root == Some(id) {
            return Err(MutationError::RemovesRoot(i.name.clone(), c.name.clone()));
        }
        Ok(())
    }

    /// Removes many unused instructions at once: every user of one of them must be in `ids`
    /// too, and none may be a root. Same effect as [`Module::remove_instruction`] on each in turn (users before their
    /// operands), but each computation's instruction list and schedule sequence is filtered
    /// only once, so removing k of n instructions is O(n + k) rather than O(n k).
    pub fn remove_instructions(&mut self, ids: &[InstrId]) -> Result<(), MutationError> {
        let mut gone = IdSet::for_arena(self.instrs.len(), ids.len());
        for &id in ids {
            gone.insert(id);
        }
        for &id in ids {
            self.check_not_root(id)?;
            let i = self.instr(id);
            if i.users.iter().any(|u| !gone.contains(*u)) {
                let names: Vec<String> = i
                    .users
                    .iter()
                    .filter(|u| !gone.contains(**u))
                    .map(|&u| format!("%{}", self.instr(u).name))
                    .collect();
                return Err(MutationError::HasUsers(i.name.clone(), names.join(", ")));
            }
        }
        let keep_names = self.keep_names_for(ids.len());
        // Forgotten together, in the name table's bucket order (see `NameTable::remove_many`).
        let mut names: Vec<String> = Vec::new();
        let mut comps: Vec<CompId> = Vec::new();
        // Survivors that lose users or control edges, each filtered once at the end (an
        // operand shared by many removed users would otherwise be filtered once per user).
        let mut touched: Vec<InstrId> = Vec::new();
        let mut seen = IdSet::for_arena(self.instrs.len(), 2 * ids.len());
        for &id in ids {
            let Some(instr) = self.instrs[id.index()].take() else {
                continue;
            };
            let neighbours = instr
                .operands
                .iter()
                .chain(&instr.control_predecessors)
                .chain(&instr.control_successors);
            for &n in neighbours {
                if !gone.contains(n) && seen.insert(n) {
                    touched.push(n);
                }
            }
            if keep_names {
                names.push(instr.name);
            }
            if instr.opcode == Opcode::Parameter {
                for p in self.comp_mut(instr.parent).params.iter_mut() {
                    if *p == Some(id) {
                        *p = None;
                    }
                }
            }
            comps.push(instr.parent);
        }
        if let Some(t) = self.names.get_mut().filter(|_| !names.is_empty()) {
            t.remove_many(names.iter().map(String::as_str));
        }
        for n in touched {
            if let Some(o) = self.instrs[n.index()].as_mut() {
                o.users.retain(|x| !gone.contains(*x));
                if !o.control_successors.is_empty() {
                    o.control_successors.retain(|x| !gone.contains(*x));
                }
                if !o.control_predecessors.is_empty() {
                    o.control_predecessors.retain(|x| !gone.contains(*x));
                }
            }
        }
        comps.sort_unstable();
        comps.dedup();
        for c in comps {
            let comp = self.comp_mut(c);
            comp.instrs.retain(|x| !gone.contains(*x));
            if let Some(s) = self.schedule.as_mut() {
                if let Some(seq) = s.sequences.get_mut(&c) {
                    seq.retain(|x| !gone.contains(*x));
                }
            }
        }
        Ok(())
    }

    /// Closes the gaps that removed parameters left in `comp`: the remaining parameters keep
    /// their order and are numbered 0, 1, ... again. Returns, for each old parameter number, its
    /// new number (`None` for a removed one). Module-level tables that name parameters
    /// (entry_computation_layout, input_output_alias, buffer_donor, ...) are the caller's to
    /// update with the returned map.
    pub fn renumber_parameters(&mut self, comp: CompId) -> Vec<Option<usize>> {
        let old = std::mem::take(&mut self.comp_mut(comp).params);
        let mut map = Vec::with_capacity(old.len());
        let mut kept = Vec::with_capacity(old.len());
        for p in old {
            match p {
                Some(id) => {
                    map.push(Some(kept.len()));
                    self.instr_mut(id).attrs.parameter_number = kept.len() as i64;
                    kept.push(Some(id));
                }
                None => map.push(None),
            }
        }
        self.comp_mut(comp).params = kept;
        map
    }

    /// Removes a computation and all its instructions. Callers must no longer call it.
    pub fn remove_computation(&mut self, comp: CompId) {
        self.remove_computations(&[comp]);
    }

    /// Removes computations and all their instructions, with one pass over the stored order
    /// (removing them one by one costs a pass each). Callers must no longer call them.
    pub fn remove_computations(&mut self, comps: &[CompId]) {
        let mut gone = vec![false; self.comps.len()];
        let mut removed: Vec<Computation> = Vec::new();
        for &comp in comps {
            let Some(c) = self.comps.get_mut(comp.index()).and_then(Option::take) else {
                continue;
            };
            gone[comp.index()] = true;
            if self.entry == Some(comp) {
                self.entry = None;
            }
            removed.push(c);
        }
        self.comp_names
            .remove_many(removed.iter().map(|c| c.name.as_str()));
        // The names are forgotten together (in the name table's bucket order) while the
        // instructions are still in the arena; then each is dropped where it is. (Moving them
        // out into a vector first copied every removed instruction once more into memory
        // that had to be faulted in: a fifth of `inline`'s time on a 50,000-deep chain.)
        let count = removed.iter().map(|c| c.instrs.len()).sum();
        if self.keep_names_for(count) {
            let instrs = &self.instrs;
            let t = self.names.get_mut().expect("kept only when built");
            t.remove_many(
                removed
                    .iter()
                    .flat_map(|c| &c.instrs)
                    .filter_map(|id| instrs[id.index()].as_ref())
                    .map(|i| i.name.as_str()),
            );
        }
        for c in &removed {
            for id in &c.instrs {
                self.instrs[id.index()] = None;
            }
        }
        self.comp_order.retain(|&x| !gone[x.index()]);
        if let Some(s) = self.schedule.as_mut() {
            s.sequences.retain(|c, _| !gone[c.index()]);
        }
    }

    /// Moves the stored order of computations (e.g. to put callees first).
    pub fn set_computation_order(&mut self, order: Vec<CompId>) {
        debug_assert_eq!(order.len(), self.comp_order.len());
        self.comp_order = order;
    }

    /// Replaces the stored order of a computation's instructions (must be a permutation).
    pub fn set_instruction_order(&mut self, comp: CompId, order: Vec<InstrId>) {
        debug_assert_eq!(order.len(), self.comp(comp).instrs.len());
        self.comp_mut(comp).instrs = order;
    }

    pub fn add_control_dependency(&mut self, pred: InstrId, succ: InstrId) {
        if !self.instr(pred).control_successors.contains(&succ) {
            self.instr_mut(pred).control_successors.push(succ);
            self.instr_mut(succ).control_predecessors.push(pred);
        }
    }

    pub fn remove_control_dependency(&mut self, pred: InstrId, succ: InstrId) {
        self.instr_mut(pred)
            .control_successors
            .retain(|&x| x != succ);
        self.instr_mut(succ)
            .control_predecessors
            .retain(|&x| x != pred);
    }

    /// Renames an instruction; the new name must be unused.
    pub fn rename_instruction(&mut self, id: InstrId, name: String) -> Result<(), MutationError> {
        if self.instr(id).name == name {
            return Ok(());
        }
        self.claim_name(&name)?;
        let old = std::mem::replace(&mut self.instr_mut(id).name, name);
        self.forget_name(&old);
        Ok(())
    }

    /// Renames an instruction like [`Module::rename_instruction`], except that the old name
    /// stays taken (by no instruction) until it is given to [`Module::release_names`]: a pass
    /// that moves instructions where another would copy them renames them as the copies would
    /// be named, with the names of the originals still taken, and releases those when the
    /// originals would have been removed. Returns the old name.
    pub fn rename_instruction_holding_old(
        &mut self,
        id: InstrId,
        name: String,
    ) -> Result<String, MutationError> {
        self.claim_name(&name)?;
        Ok(std::mem::replace(&mut self.instr_mut(id).name, name))
    }

    /// Forgets names held by [`Module::rename_instruction_holding_old`] (names no instruction
    /// has), in one sweep of the name table.
    pub fn release_names<'a>(&mut self, names: impl ExactSizeIterator<Item = &'a str>) {
        if self.keep_names_for(names.len()) {
            self.names
                .get_mut()
                .expect("kept only when built")
                .remove_many(names);
        }
    }

    /// Before forgetting `count` names at once: true if the name table is built and worth
    /// updating. When the names are at least an eighth of the table, it is dropped instead
    /// (and false returned), to be rebuilt from the instructions if a name is needed again:
    /// one pass over the survivors then, instead of a random probe of a table larger than the
    /// caches per forgotten name now (inlining a call chain forgets every name of every
    /// callee). A rebuild is paid for by the removals that dropped the table, so a sequence
    /// of them stays linear.
    fn keep_names_for(&mut self, count: usize) -> bool {
        match self.names.get() {
            None => false,
            Some(t) if 8 * count >= t.len() && count > 0 => {
                self.names = OnceLock::new();
                false
            }
            Some(_) => true,
        }
    }

    /// Moves instructions of computation `from` into computation `to`, for inlining a
    /// computation that nothing else calls without copying it: `body` is every instruction of
    /// `from` but its parameters, in the order they are appended to `to`, and a use of
    /// parameter `n` of `from` becomes a use of `args[n]` (an instruction of `to`). The users
    /// lists of the moved instructions and of `args`, and the control predecessor lists of the
    /// moved instructions, come out as if each moved instruction had been added anew in `body`
    /// order with its control edges (what copying them would give). `from` is left with its
    /// parameters and no root, to be removed. Refused, with nothing changed, when a parameter
    /// of `from` has control edges or `args` lacks one it uses; `body` must be what it says
    /// (checked in debug builds).
    pub fn move_instructions(
        &mut self,
        from: CompId,
        to: CompId,
        body: &[InstrId],
        args: &[InstrId],
    ) -> Result<(), MutationError> {
        let params: Vec<InstrId> = self.comp(from).parameters().collect();
        debug_assert_eq!(body.len() + params.len(), self.comp(from).instrs.len());
        for &p in &params {
            let i = self.instr(p);
            if !i.control_predecessors.is_empty() || !i.control_successors.is_empty() {
                return Err(MutationError::ControlEdgeOnParameter(i.name.clone()));
            }
        }
        for &a in args {
            let i = self.instr(a);
            if i.parent != to {
                return Err(MutationError::CrossComputation(
                    self.comp(from).name.clone(),
                    i.name.clone(),
                ));
            }
        }
        // Parameter -> argument, by the parameter's number.
        let mut arg_of: crate::fxhash::FxHashMap<InstrId, InstrId> = Default::default();
        for &p in &params {
            let n = self.instr(p).attrs.parameter_number as usize;
            if let Some(&a) = args.get(n) {
                arg_of.insert(p, a);
            } else if !self.instr(p).users.is_empty() {
                return Err(MutationError::OperandIndex {
                    name: self.instr(p).name.clone(),
                    index: n,
                    count: args.len(),
                });
            }
        }
        for &p in &params {
            self.instr_mut(p).users.clear();
        }
        for &m in body {
            debug_assert!(
                self.instr(m).parent == from && self.instr(m).opcode != Opcode::Parameter
            );
            let i = self.instr_mut(m);
            i.users.clear();
            if !i.control_predecessors.is_empty() {
                i.control_predecessors.clear();
            }
        }
        for &m in body {
            let i = self.instrs[m.index()].as_mut().expect("a live instruction");
            i.parent = to;
            for op in i.operands.iter_mut() {
                if let Some(&a) = arg_of.get(op) {
                    *op = a;
                }
            }
            let mut seen: smallvec::SmallVec<[InstrId; 4]> = smallvec::SmallVec::new();
            for &op in &i.operands {
                if !seen.contains(&op) {
                    seen.push(op);
                }
            }
            let succs = if i.control_successors.is_empty() {
                Vec::new()
            } else {
                i.control_successors.clone()
            };
            for op in seen {
                self.instrs[op.index()].as_mut().unwrap().users.push(m);
            }
            for s in succs {
                self.instr_mut(s).control_predecessors.push(m);
            }
        }
        let instrs = &self.instrs;
        let is_param =
            |x: &InstrId| instrs[x.index()].as_ref().unwrap().opcode == Opcode::Parameter;
        let c = self.comps[from.index()]
            .as_mut()
            .expect("a live computation");
        c.instrs.retain(is_param);
        c.root = None;
        if let Some(seq) = self
            .schedule
            .as_mut()
            .and_then(|s| s.sequences.get_mut(&from))
        {
            seq.retain(is_param);
        }
        self.comp_mut(to).instrs.extend_from_slice(body);
        Ok(())
    }

    /// Computations that instruction `id` calls.
    pub fn called_computations(&self, id: InstrId) -> &[CompId] {
        &self.instr(id).called
    }

    // ----- whole-computation helpers -----

    /// The element-wise opcode of a scalar combiner `(a, b) -> op(a, b)` (either operand
    /// order), for add, multiply, maximum, minimum, or and and: what a reduce, all-reduce or
    /// scatter computes when its `to_apply` is one of these. `None` for any other computation.
    pub fn combiner_opcode(&self, comp: CompId) -> Option<Opcode> {
        let c = self.comp(comp);
        let root = self.instr(c.root()?);
        let (p0, p1) = (c.parameter(0)?, c.parameter(1)?);
        let ops = root.operands();
        let plain = c.num_parameters() == 2
            && ops.len() == 2
            && ((ops[0] == p0 && ops[1] == p1) || (ops[0] == p1 && ops[1] == p0));
        let combines = matches!(
            root.opcode(),
            Opcode::Add
                | Opcode::Multiply
                | Opcode::Maximum
                | Opcode::Minimum
                | Opcode::Or
                | Opcode::And
        );
        (plain && combines).then(|| root.opcode())
    }

    /// The signature of computation `c` as its instructions give it: parameter shapes by
    /// number (an empty tuple for a number not added) and the root's shape (an empty tuple
    /// when there is no root yet).
    pub fn program_shape(&self, c: CompId) -> ProgramShape {
        let comp = self.comp(c);
        ProgramShape {
            parameters: comp
                .params
                .iter()
                .map(|p| p.map_or(Shape::Tuple(Vec::new()), |p| self.instr(p).shape.clone()))
                .collect(),
            result: comp
                .root
                .and_then(|r| self.try_instr(r))
                .map_or(Shape::Tuple(Vec::new()), |r| r.shape.clone()),
        }
    }

    /// A channel id no instruction of the module uses: one more than the largest in use (1
    /// for a module without channels), as XLA's `NextChannelId`.
    pub fn next_channel_id(&self) -> i64 {
        self.instrs
            .iter()
            .flatten()
            .filter_map(|i| i.attrs.channel_id)
            .max()
            .map_or(1, |c| c.max(0) + 1)
    }

    /// Replaces `old` by `new` and removes `old`: every use and the root move to `new`, and so
    /// do `old`'s control edges (its predecessors come before `new`, its successors after).
    /// `new` keeps its own metadata and sharding; it takes `old`'s when it has none (XLA's
    /// `ReplaceInstruction`). `new` must not depend on `old` (e.g. `new = copy(old)`): `old`
    /// would keep a user and cannot be removed.
    pub fn replace_instruction(&mut self, old: InstrId, new: InstrId) -> Result<(), MutationError> {
        if old == new {
            return Ok(());
        }
        if self.instr(new).operands.contains(&old) {
            return Err(MutationError::HasUsers(
                self.instr(old).name.clone(),
                format!("%{}", self.instr(new).name),
            ));
        }
        self.replace_all_uses_with(old, new)?;
        self.move_control_edges(old, new);
        let (metadata, sharding) = {
            let o = self.instr(old);
            (o.metadata.clone(), o.sharding.clone())
        };
        let n = self.instr(new);
        let (needs_metadata, needs_sharding) = (n.metadata.is_none(), n.sharding.is_none());
        if needs_metadata && metadata.is_some() {
            self.instr_mut(new).metadata = metadata;
        }
        if needs_sharding && sharding.is_some() {
            self.instr_mut(new).sharding = sharding;
        }
        self.remove_instruction(old)
    }

    /// Gives `to` the control edges of `from` (its predecessors come before `to`, its
    /// successors after) and takes them from `from`. An edge between the two is dropped.
    pub fn move_control_edges(&mut self, from: InstrId, to: InstrId) {
        if from == to {
            return;
        }
        let preds = self.instr(from).control_predecessors.clone();
        let succs = self.instr(from).control_successors.clone();
        for p in preds {
            self.remove_control_dependency(p, from);
            if p != to {
                self.add_control_dependency(p, to);
            }
        }
        for s in succs {
            self.remove_control_dependency(from, s);
            if s != to {
                self.add_control_dependency(to, s);
            }
        }
    }

    /// A copy of computation `c` named `<name>.<suffix>` (made unique), its instructions named
    /// `<name>.<suffix>` too, with the same parameters, root, control edges and schedule
    /// sequence. Called computations are shared, not copied. Returns the copy and the map from
    /// each instruction of `c` to its copy, in `c`'s instruction order.
    pub fn clone_computation(
        &mut self,
        c: CompId,
        suffix: &str,
    ) -> Result<(CompId, IndexMap<InstrId, InstrId>), MutationError> {
        let name = self.unique_computation_name(&format!("{}.{suffix}", self.comp(c).name));
        let (instrs, root, thread) = {
            let comp = self.comp(c);
            (
                comp.instrs.clone(),
                comp.root,
                comp.execution_thread.clone(),
            )
        };
        let copy = self.add_computation(name)?;
        self.comp_mut(copy).execution_thread = thread;
        let mut map: IndexMap<InstrId, InstrId> = IndexMap::with_capacity(instrs.len());
        // Stored order is not always def-before-use (a parsed module keeps the text order).
        let order = crate::analysis::post_order(self, c);
        for id in order {
            let old = self.instr(id);
            let mut i = old.clone();
            i.operands = old.operands.iter().map(|o| map[o]).collect();
            let base = format!("{}.{suffix}", old.name);
            i.name = self.unique_name(&base);
            let new = self.add_instruction(copy, i)?;
            map.insert(id, new);
        }
        let mut ordered: IndexMap<InstrId, InstrId> = IndexMap::with_capacity(map.len());
        for id in &instrs {
            ordered.insert(*id, map[id]);
        }
        for (&old, &new) in &ordered {
            let succs = self.instr(old).control_successors.clone();
            for s in succs {
                if let Some(&t) = ordered.get(&s) {
                    self.add_control_dependency(new, t);
                }
            }
        }
        self.comp_mut(copy).instrs = ordered.values().copied().collect();
        if let Some(r) = root {
            self.set_root(copy, ordered[&r]);
        }
        if let Some(s) = self.schedule.as_mut() {
            if let Some(seq) = s.sequences.get(&c) {
                let seq = seq.iter().filter_map(|i| ordered.get(i).copied()).collect();
                s.sequences.insert(copy, seq);
            }
        }
        Ok((copy, ordered))
    }
}

/// Appends `n` in decimal (what `format!("{n}")` writes, without the formatting machinery:
/// [`Module::unique_name`] writes one per candidate name).
fn push_decimal(out: &mut String, n: u32) {
    let mut digits = [0u8; 10];
    let mut k = digits.len();
    let mut v = n;
    loop {
        k -= 1;
        digits[k] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend(digits[k..].iter().map(|&d| d as char));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ElementType::F32;

    fn param(n: i64, name: &str) -> Instruction {
        let mut i = Instruction::new(name, Opcode::Parameter, Shape::array(F32, &[4]));
        i.attrs.parameter_number = n;
        i
    }

    #[test]
    fn users_follow_edits() {
        let mut m = Module::new("m");
        let c = m.add_computation("main").unwrap();
        let p0 = m.add_instruction(c, param(0, "p0")).unwrap();
        let p1 = m.add_instruction(c, param(1, "p1")).unwrap();
        let add = m
            .add_instruction(
                c,
                Instruction::new("add", Opcode::Add, Shape::array(F32, &[4]))
                    .with_operands(&[p0, p0]),
            )
            .unwrap();
        // The first instruction is the root until told otherwise; adding never moves it.
        assert_eq!(m.comp(c).root(), Some(p0));
        m.set_root(c, add);
        assert_eq!(m.users(p0), &[add]);
        m.replace_operand(add, 1, p1).unwrap();
        assert_eq!(m.users(p0), &[add]);
        assert_eq!(m.users(p1), &[add]);
        m.replace_all_uses_with(p0, p1).unwrap();
        assert!(m.users(p0).is_empty());
        assert_eq!(m.operands(add), &[p1, p1]);
        assert_eq!(m.comp(c).root(), Some(add));
        assert!(m.remove_instruction(p1).is_err());
        m.remove_instruction(p0).unwrap();
        assert_eq!(m.comp(c).parameter(0), None);
        assert_eq!(m.unique_name("add"), "add.1");
        assert_eq!(m.unique_name("add"), "add.2");
        assert_eq!(m.unique_name("fresh"), "fresh");
    }

    #[test]
    fn the_dense_opcode_table_follows_the_instructions() {
        let mut m = Module::new("m");
        let c = m.add_computation("main").unwrap();
        let p = m.add_instruction(c, param(0, "p")).unwrap();
        let neg = m
            .add_instruction(
                c,
                Instruction::new("neg", Opcode::Negate, Shape::array(F32, &[4]))
                    .with_operands(&[p]),
            )
            .unwrap();
        assert_eq!(
            (m.opcode(p), m.opcode(neg)),
            (Opcode::Parameter, Opcode::Negate)
        );
        m.set_opcode(neg, Opcode::Exp);
        assert_eq!(m.opcode(neg), Opcode::Exp);
        assert_eq!(m.instr(neg).opcode(), Opcode::Exp);
        let copy = m.clone();
        assert_eq!(copy.opcode(neg), Opcode::Exp);
    }

    /// Removing many instructions at once drops the name table instead of probing it once
    /// per name; it is rebuilt from the survivors on the next need, and names stay unique.
    #[test]
    fn bulk_removals_drop_the_name_table() {
        let mut m = Module::new("m");
        let c = m.add_computation("main").unwrap();
        let p = m.add_instruction(c, param(0, "p")).unwrap();
        let negs: Vec<InstrId> = (0..10)
            .map(|k| {
                let i =
                    Instruction::new(format!("neg.{k}"), Opcode::Negate, Shape::array(F32, &[4]))
                        .with_operands(&[p]);
                m.add_instruction(c, i).unwrap()
            })
            .collect();
        assert!(m.name_table_built());
        // One of eleven names is not worth a rebuild: the table is kept.
        m.remove_instructions(&negs[9..]).unwrap();
        assert!(m.name_table_built());
        assert!(!m.is_name_used("neg.9"));
        m.remove_instructions(&negs[2..9]).unwrap();
        assert!(!m.name_table_built());
        assert!(m.is_name_used("neg.1") && !m.is_name_used("neg.5"));
        assert_eq!(m.unique_name("neg.1"), "neg.2");
        assert_eq!(m.unique_name("p"), "p.1");
        assert_eq!(m.unique_name("neg.4"), "neg.4");
    }

    /// `replace_operands` gives the operands and users lists of `replace_operand` one by one,
    /// on a value with many users losing some of them, repeated users and operands, and edits
    /// that undo earlier ones; bad edits change nothing.
    #[test]
    fn replaces_many_operands_at_once() {
        let build = || {
            let mut m = Module::new("m");
            let c = m.add_computation("main").unwrap();
            let p0 = m.add_instruction(c, param(0, "p0")).unwrap();
            let p1 = m.add_instruction(c, param(1, "p1")).unwrap();
            let mut adds = Vec::new();
            // p0 has 24 users and p1 16: long lists, looked up sorted when they gain users.
            for k in 0..24 {
                let ops = if k % 3 == 0 { [p0, p0] } else { [p0, p1] };
                let a = Instruction::new(format!("add{k}"), Opcode::Add, Shape::array(F32, &[4]))
                    .with_operands(&ops);
                adds.push(m.add_instruction(c, a).unwrap());
            }
            let n = Instruction::new("neg", Opcode::Negate, Shape::array(F32, &[4]))
                .with_operands(&[p1]);
            let neg = m.add_instruction(c, n).unwrap();
            (m, p0, p1, adds, neg)
        };
        let (m0, p0, p1, adds, neg) = build();
        let edits = vec![
            (adds[0], 0, neg), // add0 still reads p0 at 1
            (adds[0], 1, neg), // now it does not
            (adds[2], 0, neg),
            (adds[3], 1, p1),
            (adds[4], 0, p0), // no change
            (adds[5], 0, neg),
            (adds[5], 0, p1), // replaced again: neg does not gain add5
            (adds[7], 0, p1),
            (adds[7], 0, neg),
            (adds[11], 1, neg),
            (neg, 0, p0), // p0 (a long list) gains neg
            (adds[12], 0, p1),
            (adds[12], 1, p1), // p1 (a long list) already lists adds[12]
            (adds[13], 0, neg),
            (adds[13], 0, p0), // put back: adds[13] stays where it was in p0's list
        ];
        let mut one = m0.clone();
        for &(u, k, n) in &edits {
            one.replace_operand(u, k, n).unwrap();
        }
        let mut batch = m0.clone();
        batch.replace_operands(&edits).unwrap();
        for &i in m0
            .comp(m0.entry().unwrap_or(m0.instr(p0).parent))
            .instructions()
        {
            assert_eq!(batch.operands(i), one.operands(i), "%{}", m0.instr(i).name);
            // The same users; the order too, except where a use was taken and put back.
            let sorted = |v: &[InstrId]| {
                let mut v = v.to_vec();
                v.sort();
                v
            };
            assert_eq!(
                sorted(batch.users(i)),
                sorted(one.users(i)),
                "%{}",
                m0.instr(i).name
            );
            if i != p0 {
                assert_eq!(batch.users(i), one.users(i), "%{}", m0.instr(i).name);
            }
        }
        // adds[13] lost p0 and got it back: one by one it moves to the end of p0's list, the
        // batch leaves it where it was.
        let at = |m: &Module, u| m.users(p0).iter().position(|&x| x == u);
        assert_eq!(at(&one, adds[13]), Some(one.users(p0).len() - 1));
        assert!(at(&batch, adds[13]) < at(&batch, adds[14]));
        assert_eq!(batch.users(neg), &[adds[0], adds[2], adds[7], adds[11]]);
        assert!(!batch.users(p0).contains(&adds[0]));
        assert!(batch.users(p0).contains(&adds[3]));
        assert_eq!(batch.users(p0).last(), Some(&neg));
        assert!(batch
            .users(neg)
            .iter()
            .all(|&u| batch.operands(u).contains(&neg)));
        // Bad edits: nothing changes, even for the good edits before them.
        let mut bad = m0.clone();
        let err = bad.replace_operands(&[(adds[1], 0, neg), (adds[1], 2, neg)]);
        assert!(matches!(
            err,
            Err(MutationError::OperandIndex { index: 2, .. })
        ));
        let other = bad.add_computation("other").unwrap();
        let q = bad.add_instruction(other, param(0, "q")).unwrap();
        assert!(matches!(
            bad.replace_operands(&[(adds[1], 0, neg), (adds[1], 0, q)]),
            Err(MutationError::CrossComputation(..))
        ));
        assert_eq!(bad.operands(adds[1]), m0.operands(adds[1]));
        assert_eq!(bad.users(neg), m0.users(neg));
    }

    #[test]
    fn replace_instruction_moves_uses_root_and_control_edges() {
        let mut m = Module::new("m");
        let c = m.add_computation("main").unwrap();
        let p0 = m.add_instruction(c, param(0, "p0")).unwrap();
        let neg = |name: &str, op| {
            Instruction::new(name, Opcode::Negate, Shape::array(F32, &[4])).with_operands(&[op])
        };
        let before = m.add_instruction(c, neg("before", p0)).unwrap();
        let mut o = neg("old", p0);
        o.sharding = Some(Sharding::replicated());
        let old = m.add_instruction(c, o).unwrap();
        let user = m.add_instruction(c, neg("user", old)).unwrap();
        let after = m.add_instruction(c, neg("after", p0)).unwrap();
        let new = m.add_instruction(c, neg("new", p0)).unwrap();
        m.set_root(c, old);
        m.add_control_dependency(before, old);
        m.add_control_dependency(old, after);
        m.add_control_dependency(old, new);
        m.replace_instruction(old, new).unwrap();
        assert!(m.try_instr(old).is_none());
        assert!(!m.is_name_used("old"));
        assert_eq!(m.operands(user), &[new]);
        assert_eq!(m.comp(c).root(), Some(new));
        assert_eq!(m.instr(new).control_predecessors(), &[before]);
        assert_eq!(m.instr(new).control_successors(), &[after]);
        assert_eq!(m.instr(before).control_successors(), &[new]);
        assert_eq!(m.instr(after).control_predecessors(), &[new]);
        assert_eq!(m.instr(new).sharding, Some(Sharding::replicated()));
        // A replacement that reads the old value cannot replace it.
        let copy = m.add_instruction(c, neg("copy", new)).unwrap();
        assert!(matches!(
            m.replace_instruction(new, copy),
            Err(MutationError::HasUsers(..))
        ));
        assert_eq!(m.comp(c).root(), Some(new));
    }

    #[test]
    fn clone_computation_maps_every_instruction() {
        let mut m = Module::new("m");
        let c = m.add_computation("body").unwrap();
        let p0 = m.add_instruction(c, param(0, "p0")).unwrap();
        // Stored out of def-use order on purpose: `b` (user of `a`) comes first.
        let a_shape = Shape::array(F32, &[4]);
        let a = m
            .add_instruction(
                c,
                Instruction::new("a", Opcode::Negate, a_shape.clone()).with_operands(&[p0]),
            )
            .unwrap();
        let b = m
            .add_instruction(
                c,
                Instruction::new("b", Opcode::Add, a_shape).with_operands(&[a, p0]),
            )
            .unwrap();
        m.set_instruction_order(c, vec![b, p0, a]);
        m.set_root(c, b);
        m.add_control_dependency(p0, a);
        m.schedule = Some(Schedule::default());
        m.schedule
            .as_mut()
            .unwrap()
            .sequences
            .insert(c, vec![p0, a, b]);
        let (copy, map) = m.clone_computation(c, "clone").unwrap();
        assert_eq!(m.comp(copy).name, "body.clone");
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), vec![b, p0, a]);
        assert_eq!(m.instr(map[&b]).name, "b.clone");
        assert_eq!(m.operands(map[&b]), &[map[&a], map[&p0]]);
        assert_eq!(m.comp(copy).root(), Some(map[&b]));
        assert_eq!(m.comp(copy).parameter(0), Some(map[&p0]));
        assert_eq!(m.instr(map[&a]).control_predecessors(), &[map[&p0]]);
        assert_eq!(
            m.schedule.as_ref().unwrap().sequences[&copy],
            vec![map[&p0], map[&a], map[&b]]
        );
        assert_eq!(m.program_shape(copy), m.program_shape(c));
        // The original is untouched, and a second clone gets fresh names.
        assert_eq!(m.users(a), &[b]);
        let (copy2, map2) = m.clone_computation(c, "clone").unwrap();
        assert_eq!(m.comp(copy2).name, "body.clone.1");
        assert_eq!(m.instr(map2[&b]).name, "b.clone.1");
    }

    #[test]
    fn removing_a_root_is_refused() {
        let mut m = Module::new("m");
        let c = m.add_computation("main").unwrap();
        let p0 = m.add_instruction(c, param(0, "p0")).unwrap();
        let neg = Instruction::new("neg", Opcode::Negate, Shape::array(F32, &[4]));
        let n = m.add_instruction(c, neg.with_operands(&[p0])).unwrap();
        m.set_root(c, n);
        let err = m.remove_instruction(n).unwrap_err();
        assert_eq!(
            err.to_string(),
            "%neg: cannot remove the root of computation main; set another root first"
        );
        assert!(matches!(
            m.remove_instructions(&[n]),
            Err(MutationError::RemovesRoot(..))
        ));
        assert_eq!(m.comp(c).root(), Some(n));
        m.set_root(c, p0);
        m.remove_instruction(n).unwrap();
        assert_eq!(m.comp(c).instructions(), &[p0]);
    }

    #[test]
    fn removes_many_at_once() {
        let mut m = Module::new("m");
        let c = m.add_computation("main").unwrap();
        let p0 = m.add_instruction(c, param(0, "p0")).unwrap();
        let neg = |name: &str, op| {
            Instruction::new(name, Opcode::Negate, Shape::array(F32, &[4])).with_operands(&[op])
        };
        let a = m.add_instruction(c, neg("a", p0)).unwrap();
        let b = m.add_instruction(c, neg("b", a)).unwrap();
        let d = m.add_instruction(c, neg("d", p0)).unwrap();
        m.set_root(c, d);
        m.schedule = Some(Schedule::default());
        m.schedule
            .as_mut()
            .unwrap()
            .sequences
            .insert(c, vec![p0, a, b, d]);
        // `a` is still used by `b`, which is not removed.
        assert!(m.remove_instructions(&[a]).is_err());
        m.remove_instructions(&[a, b]).unwrap();
        assert_eq!(m.comp(c).instructions(), &[p0, d]);
        assert_eq!(m.users(p0), &[d]);
        assert_eq!(m.schedule.as_ref().unwrap().sequences[&c], vec![p0, d]);
        assert!(!m.is_name_used("a"));
    }
}
