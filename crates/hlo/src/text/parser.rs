//! Module, computation and instruction structure of the text format, and per-opcode attributes.
//!
//! The attribute table follows XLA's parser (`xla/hlo/parser/hlo_parser.cc`): every opcode accepts
//! a fixed set of attribute names, an unknown one is an error naming it, and required ones must be
//! present.

use crate::fxhash::FxHashMap;

use smallvec::SmallVec;

use super::cursor::Cursor;
use super::ParseError;
use crate::attrs::*;
use crate::instruction::{CompId, InstrId, Instruction};
use crate::metadata::StackFrameIndex;
use crate::module::{
    AliasKind, BufferDonor, InputOutputAlias, Module, OriginalArray, ProgramShape, RecoveryEntry,
    Schedule,
};
use crate::opcode::Opcode;
use crate::shape::{Shape, MAX_MODULE_BUFFER_BYTES};
use crate::types::ElementType;

mod attr_parse;
use std::collections::BTreeMap;

pub(super) type PResult<T> = Result<T, ParseError>;

/// The opcodes whose result shape XLA's parser infers when the text leaves it out (the ones
/// `CanInferShape` in `xla/hlo/parser/hlo_parser.cc` answers true for).
fn xla_infers_shape(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Abs | Acos
            | Acosh
            | Asin
            | Asinh
            | Add
            | AddDependency
            | AfterAll
            | Atan2
            | Atanh
            | BatchNormGrad
            | BatchNormInference
            | BatchNormTraining
            | Broadcast
            | Call
            | Ceil
            | Cholesky
            | Clamp
            | Clz
            | Compare
            | Complex
            | Concatenate
            | Conditional
            | Convolution
            | Copy
            | Cos
            | Cosh
            | OptimizationBarrier
            | Divide
            | Domain
            | Dot
            | Erf
            | Exp
            | Expm1
            | Fft
            | Floor
            | Gather
            | GetDimensionSize
            | SetDimensionSize
            | GetTupleElement
            | Imag
            | IsFinite
            | Log
            | Log1p
            | Logistic
            | And
            | Not
            | Or
            | Xor
            | Map
            | Maximum
            | Minimum
            | Multiply
            | Negate
            | Pad
            | PartitionId
            | PopulationCount
            | Power
            | RaggedDot
            | Real
            | Reduce
            | Remainder
            | ReplicaId
            | Reverse
            | RoundNearestAfz
            | RoundNearestEven
            | Rsqrt
            | Scan
            | ScaledDot
            | Scatter
            | Select
            | ShiftLeft
            | ShiftRightArithmetic
            | ShiftRightLogical
            | Sign
            | Sin
            | Sinh
            | Sqrt
            | Cbrt
            | ReduceWindow
            | SelectAndScatter
            | Sort
            | Subtract
            | Tan
            | Tanh
            | Transpose
            | TriangularSolve
            | Tuple
            | While
            | TopK
    )
}

/// Number of `\n` bytes, eight at a time.
fn count_newlines(b: &[u8]) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const NL: u64 = 0x0a0a_0a0a_0a0a_0a0a;
    let mut chunks = b.chunks_exact(8);
    let mut n = 0;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        // Zero bytes where the input has '\n'; a byte's high bit in `y` is set iff it is
        // nonzero (no carries between bytes).
        let x = u64::from_le_bytes(w) ^ NL;
        let y = ((x & LOW7).wrapping_add(LOW7) | x) & !LOW7;
        n += (y ^ !LOW7).count_ones() as usize;
    }
    n + chunks.remainder().iter().filter(|&&c| c == b'\n').count()
}

/// The text names of the computations being parsed, and every text name seen so far.
///
/// One small table per open computation (an inline computation opens one inside an
/// instruction of its caller), recycled when the computation closes: a computation's lookups
/// then stay in the caches however many computations the module has. One table for the whole
/// module keyed by (computation, name) cost a cache miss per instruction once it outgrew
/// them, which made parsing grow faster than the text (docs/log/robustness-campaigns.md).
struct Scopes<'a> {
    /// The instructions of each open computation by text name, innermost last.
    open: Vec<Scope<'a>>,
    /// Closed tables kept for reuse.
    spare: Vec<Scope<'a>>,
    /// Every text name seen in any computation, once, while the module's own name table is
    /// unbuilt (for `has_name`); `None` once it is, and this one is no longer kept up.
    names: Option<hashbrown::HashTable<(u64, &'a str)>>,
}

/// (name's hash, name, instruction) of one computation.
type Scope<'a> = hashbrown::HashTable<(u64, &'a str, InstrId)>;

impl<'a> Scopes<'a> {
    fn new() -> Scopes<'a> {
        Scopes {
            open: Vec::new(),
            spare: Vec::new(),
            names: Some(hashbrown::HashTable::new()),
        }
    }

    fn open(&mut self) {
        let t = self.spare.pop().unwrap_or_default();
        self.open.push(t);
    }

    /// Closes the innermost computation. Its table is kept for the next one unless it is
    /// much larger than what it held: clearing costs its capacity, and a huge computation
    /// followed by many small ones would pay that once per small one.
    fn close(&mut self) {
        if let Some(mut t) = self.open.pop() {
            if t.capacity() <= 8 * t.len().max(64) {
                t.clear();
                self.spare.push(t);
            }
        }
    }

    /// The instruction with this text name in the innermost open computation.
    #[inline]
    fn get(&self, name: &str) -> Option<InstrId> {
        let h = crate::names::hash(name);
        self.open.last()?.find(h, |e| e.1 == name).map(|e| e.2)
    }

    /// Whether some computation has an instruction with this text name; `None` when that is
    /// no longer known here (ask the module).
    #[inline]
    fn has_name(&self, hash: u64, name: &str) -> Option<bool> {
        let names = self.names.as_ref()?;
        Some(names.find(hash, |e| e.1 == name).is_some())
    }

    /// Stops keeping every text name: the module's name table has them from now on (one probe
    /// of a module-wide table per instruction fewer).
    fn forget_names(&mut self) {
        self.names = None;
    }

    /// Adds `name` to the innermost computation; false if it has it already.
    fn insert(&mut self, hash: u64, name: &'a str, id: InstrId) -> bool {
        if let Some(names) = self.names.as_mut() {
            if names.find(hash, |e| e.1 == name).is_none() {
                names.insert_unique(hash, (hash, name), |e| e.0);
            }
        }
        let Some(scope) = self.open.last_mut() else {
            return false;
        };
        match scope.entry(hash, |e| e.1 == name, |e| e.0) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((hash, name, id));
                true
            }
        }
    }
}

/// Nesting limit for shapes, literals, shardings and inline computations, so that hostile input
/// cannot overflow the stack.
const MAX_DEPTH: u32 = 200;

pub(super) struct Parser<'a> {
    pub c: Cursor<'a>,
    pub m: Module,
    /// Computations by their name in the text, hashed as the name tables hash names: the bare
    /// Fx hash of a `FxHashMap` leaves the bucket bits of `c123456` depending on its first bytes
    /// only, and 200,000 such names shared a few probe chains.
    comps: hashbrown::HashTable<(u64, &'a str, CompId)>,
    /// Instructions by name in the text, per open computation.
    scope: Scopes<'a>,
    /// The computation being parsed (for placing inline computations before it).
    current: Option<CompId>,
    /// Computations to print right before another one (inline computations and async
    /// wrappers before their caller), applied once at the end.
    placed_before: Vec<(CompId, CompId)>,
    /// The get-tuple-elements made for dumps' `%x#N` shorthand, by (tuple, index): every use
    /// of the same element shares one, as in XLA.
    tuple_elements: FxHashMap<(InstrId, i64), InstrId>,
    depth: u32,
    /// The buffer bytes of the instructions parsed so far (kept under
    /// [`MAX_MODULE_BUFFER_BYTES`]).
    buffer_bytes: i64,
}

/// Called computations gathered from the attributes of one instruction.
#[derive(Default)]
struct Calls {
    to_apply: Option<CompId>,
    calls: Option<CompId>,
    condition: Option<CompId>,
    body: Option<CompId>,
    true_computation: Option<CompId>,
    false_computation: Option<CompId>,
    branches: Option<Vec<CompId>>,
    select: Option<CompId>,
    scatter: Option<CompId>,
    called_computations: Option<Vec<CompId>>,
}

impl<'a> Parser<'a> {
    pub fn new(src: &'a str) -> Parser<'a> {
        Parser {
            c: Cursor::new(src),
            m: Module::new(""),
            comps: hashbrown::HashTable::new(),
            scope: Scopes::new(),
            current: None,
            placed_before: Vec::new(),
            tuple_elements: FxHashMap::default(),
            depth: 0,
            buffer_bytes: 0,
        }
    }

    pub fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self
                .c
                .error_at(self.c.pos, "nesting is too deep (more than 200 levels)"));
        }
        Ok(())
    }

    pub fn leave(&mut self) {
        self.depth -= 1;
    }

    /// The instruction of the current computation with this text name.
    #[inline]
    fn lookup(&self, name: &str) -> Option<InstrId> {
        self.scope.get(name)
    }

    /// Puts every inline computation and async wrapper right before the computation that
    /// uses it (its own inline computations before it, recursively), the rest in text order.
    /// One pass at the end: moving each one as it is parsed cost a pass over all computations
    /// per inline computation.
    fn place_computations(&mut self) {
        if self.placed_before.is_empty() {
            return;
        }
        let order = self.m.computations().to_vec();
        let mut before: FxHashMap<CompId, Vec<CompId>> = FxHashMap::default();
        let mut placed = vec![false; self.m.comp_capacity()];
        for &(inner, outer) in &self.placed_before {
            before.entry(outer).or_default().push(inner);
            placed[inner.index()] = true;
        }
        let mut out = Vec::with_capacity(order.len());
        // Iterative, as nesting may be deep: (computation, its inner ones emitted yet).
        let mut stack: Vec<(CompId, bool)> = Vec::new();
        for &top in order.iter().filter(|c| !placed[c.index()]) {
            stack.push((top, false));
            while let Some((c, expanded)) = stack.pop() {
                if expanded {
                    out.push(c);
                    continue;
                }
                stack.push((c, true));
                if let Some(inners) = before.get(&c) {
                    for &i in inners.iter().rev() {
                        stack.push((i, false));
                    }
                }
            }
        }
        self.m.set_computation_order(out);
    }

    // ----- module -----

    pub fn parse_module(mut self) -> PResult<Module> {
        let mut scheduled = false;
        // Roughly one instruction per line: reserve so the arenas never regrow.
        let lines = count_newlines(self.c.b);
        self.m.reserve(lines + 1, lines / 16 + 1);
        self.comps.reserve(lines / 16 + 1, |e| e.0);
        let has_header = self.c.eat_keyword("HloModule")?;
        if has_header {
            let name = self.c.name("a module name")?;
            // Old dumps write `HloModule name:`.
            if self.c.byte_at(0) == Some(b':') {
                self.c.pos += 1;
            }
            self.m.name = name.to_string();
            while self.c.eat(b',')? {
                let at = self.c.pos;
                let key = self.attr_name()?;
                self.parse_module_attr(key, at, &mut scheduled)?;
            }
        }
        self.parse_stack_frames()?;
        let mut entry: Option<CompId> = None;
        let mut last = None;
        loop {
            if self.c.at_end()? {
                break;
            }
            let at = self.c.pos;
            let is_entry = self.c.eat_keyword("ENTRY")?;
            let id = self.parse_computation()?;
            if is_entry {
                if entry.is_some() {
                    return Err(self.c.error_at(at, "expects only one ENTRY computation"));
                }
                entry = Some(id);
            }
            last = Some(id);
        }
        let Some(entry) = entry.or(last) else {
            return Err(self.c.expected("a computation"));
        };
        self.place_computations();
        self.m.set_entry(entry);
        if !has_header {
            self.m.name = format!("module_{}", self.m.comp(entry).name);
        }
        if scheduled {
            self.m.schedule = Some(schedule_from_order(&self.m));
        }
        Ok(self.m)
    }

    fn parse_module_attr(&mut self, key: &str, at: usize, scheduled: &mut bool) -> PResult<()> {
        match key {
            "is_scheduled" => *scheduled = self.bool_value()?,
            "replica_count" => self.m.config.replica_count = self.c.int("an integer")?,
            "num_partitions" => self.m.config.num_partitions = self.c.int("an integer")?,
            "alias_passthrough_params" => {
                self.m.config.alias_passthrough_params = self.bool_value()?
            }
            "entry_computation_layout" => {
                self.c
                    .expect(b'{', "to start the entry computation layout")?;
                self.c.expect(b'(', "before the parameter shapes")?;
                let mut parameters = Vec::new();
                if !self.c.eat(b')')? {
                    loop {
                        parameters.push(self.parse_shape()?);
                        if self.c.eat(b')')? {
                            break;
                        }
                        self.c.expect(b',', "between parameter shapes")?;
                    }
                }
                if !self.c.eat_str("->")? {
                    return Err(self.c.expected("'->' before the result shape"));
                }
                let result = self.parse_shape()?;
                self.c.expect(b'}', "to end the entry computation layout")?;
                self.m.config.entry_computation_layout = Some(ProgramShape { parameters, result });
            }
            "input_output_alias" => {
                self.c.expect(b'{', "to start input_output_alias")?;
                let mut list = Vec::new();
                while !self.c.eat(b'}')? {
                    let output_index = self.shape_index()?;
                    self.c.expect(b':', "after the output shape index")?;
                    self.c.expect(b'(', "before the parameter number")?;
                    let parameter_number = self.c.int("a parameter number")?;
                    self.c.expect(b',', "after the parameter number")?;
                    let parameter_index = self.shape_index()?;
                    let mut kind = AliasKind::MayAlias;
                    if self.c.eat(b',')? {
                        let k = self.c.name("may-alias or must-alias")?;
                        kind = match k {
                            "may-alias" => AliasKind::MayAlias,
                            "must-alias" => AliasKind::MustAlias,
                            _ => {
                                return Err(self.c.error_at(
                                    self.c.pos - k.len(),
                                    format!("expected may-alias or must-alias, found '{k}'"),
                                ))
                            }
                        };
                    }
                    self.c.expect(b')', "to end the alias")?;
                    list.push(InputOutputAlias {
                        output_index,
                        parameter_number,
                        parameter_index,
                        kind,
                    });
                    if !self.c.eat(b',')? {
                        self.c.expect(b'}', "to end input_output_alias")?;
                        break;
                    }
                }
                self.m.config.input_output_alias = list;
            }
            "buffer_donor" => {
                self.c.expect(b'{', "to start buffer_donor")?;
                let mut list = Vec::new();
                while !self.c.eat(b'}')? {
                    self.c.expect(b'(', "before the parameter number")?;
                    let parameter_number = self.c.int("a parameter number")?;
                    self.c.expect(b',', "after the parameter number")?;
                    let parameter_index = self.shape_index()?;
                    self.c.expect(b')', "to end the buffer donor")?;
                    list.push(BufferDonor {
                        parameter_number,
                        parameter_index,
                    });
                    if !self.c.eat(b',')? {
                        self.c.expect(b'}', "to end buffer_donor")?;
                        break;
                    }
                }
                self.m.config.buffer_donor = list;
            }
            "frontend_attributes" => {
                self.m.config.frontend_attributes = self.parse_frontend_attributes()?
            }
            "allow_spmd_sharding_propagation_to_parameters" => {
                self.m.config.allow_spmd_sharding_propagation_to_parameters =
                    Some(self.bool_list_or_bool()?)
            }
            "allow_spmd_sharding_propagation_to_output" => {
                self.m.config.allow_spmd_sharding_propagation_to_output =
                    Some(self.bool_list_or_bool()?)
            }
            "origin_recovery_table" => {
                self.m.config.origin_recovery_table = self.recovery_table()?;
            }
            "debug_attributes" => {
                self.m.config.debug_attributes = self.debug_attribute_table()?;
            }
            _ => {
                return Err(self
                    .c
                    .error_at(at, format!("unexpected attribute '{key}' of HloModule")))
            }
        }
        Ok(())
    }

    /// `{ {"a"} : {"b"}, "<HLO module text>" {"c" {0}} : {"d"} }`: replaced value, replacing
    /// value and, after a comma, the recovery module as a string (entries are not separated).
    fn recovery_table(&mut self) -> PResult<BTreeMap<OriginalArray, RecoveryEntry>> {
        self.c.expect(b'{', "to start origin_recovery_table")?;
        let mut table = BTreeMap::new();
        while !self.c.eat(b'}')? {
            self.c.skip_ws()?;
            let at = self.c.pos;
            let replaced = self.original_array()?;
            self.c.expect(
                b':',
                "after the replaced value (expected <original_array> : <original_array>)",
            )?;
            let replacing = self.original_array()?;
            let mut module = None;
            if self.c.eat(b',')? {
                self.c.skip_ws()?;
                let text_at = self.c.pos;
                let text = self.c.string("the recovery module's HLO text")?;
                let mut inner = Parser::new(&text);
                inner.depth = self.depth + 1;
                if inner.depth > MAX_DEPTH {
                    return Err(self
                        .c
                        .error_at(text_at, "nesting is too deep (more than 200 levels)"));
                }
                let m = inner.parse_module().map_err(|e| {
                    self.c
                        .error_at(text_at, format!("in the recovery module, {e}"))
                })?;
                module = Some(Box::new(m));
            }
            if table.contains_key(&replaced) {
                return Err(self.c.error_at(
                    at,
                    "this original value is listed twice in origin_recovery_table",
                ));
            }
            table.insert(replaced, RecoveryEntry { replacing, module });
        }
        Ok(table)
    }

    /// `{ {"a"}:({callback_id=1},{log_mode=default}), {"b" {0}}:{op_id=2} }`: per original
    /// value, one attribute set or a parenthesized list of them (entries separated by commas).
    /// An empty list drops its entry, as XLA does.
    fn debug_attribute_table(
        &mut self,
    ) -> PResult<BTreeMap<OriginalArray, Vec<crate::module::DebugAttributes>>> {
        self.c.expect(b'{', "to start debug_attributes")?;
        let mut table = BTreeMap::new();
        if self.c.eat(b'}')? {
            return Ok(table);
        }
        loop {
            self.c.skip_ws()?;
            let at = self.c.pos;
            let array = self.original_array()?;
            self.c.expect(
                b':',
                "after the original value (expected <original_array>:(<debug attributes>, ...))",
            )?;
            let mut list = Vec::new();
            if self.c.eat(b'(')? {
                if !self.c.eat(b')')? {
                    loop {
                        list.push(self.debug_attributes()?);
                        if !self.c.eat(b',')? {
                            self.c
                                .expect(b')', "or ',' in the list of debug attributes")?;
                            break;
                        }
                    }
                }
            } else {
                list.push(self.debug_attributes()?);
            }
            if table.contains_key(&array) {
                return Err(self.c.error_at(
                    at,
                    "this original value is listed twice in debug_attributes",
                ));
            }
            if !list.is_empty() {
                table.insert(array, list);
            }
            if !self.c.eat(b',')? {
                self.c.expect(b'}', "or ',' in debug_attributes")?;
                return Ok(table);
            }
        }
    }

    /// `{log_mode=default,callback_id=5,partitioned=true,op_id=7}`, any order, or `{}`.
    fn debug_attributes(&mut self) -> PResult<crate::module::DebugAttributes> {
        use crate::module::DebugLogMode;
        self.c.expect(b'{', "to start debug attributes")?;
        let mut a = crate::module::DebugAttributes::default();
        if self.c.eat(b'}')? {
            return Ok(a);
        }
        let mut seen = [false; 4];
        loop {
            self.c.skip_ws()?;
            let at = self.c.pos;
            let key = self.c.ident("a debug attribute name")?;
            self.c.expect(b'=', "after the debug attribute name")?;
            let slot = match key {
                "log_mode" => {
                    self.c.skip_ws()?;
                    let vat = self.c.pos;
                    let v = self.c.ident("default or fusion_debugger")?;
                    a.log_mode = match v {
                        "default" => DebugLogMode::Default,
                        "fusion_debugger" => DebugLogMode::FusionDebugger,
                        _ => {
                            return Err(self.c.error_at(
                                vat,
                                format!(
                                    "expected log mode default or fusion_debugger, found '{v}'"
                                ),
                            ))
                        }
                    };
                    0
                }
                "callback_id" => {
                    a.callback_id = self.c.int("an integer callback_id")?;
                    1
                }
                "op_id" => {
                    a.op_id = self.c.int("an integer op_id")?;
                    2
                }
                "partitioned" => {
                    a.partitioned = self.bool_value()?;
                    3
                }
                _ => {
                    return Err(self.c.error_at(
                        at,
                        format!(
                            "unknown debug attribute '{key}' (expected log_mode, callback_id, \
                             op_id or partitioned)"
                        ),
                    ))
                }
            };
            if std::mem::replace(&mut seen[slot], true) {
                return Err(self
                    .c
                    .error_at(at, format!("debug attribute '{key}' is given twice")));
            }
            if !self.c.eat(b',')? {
                self.c.expect(b'}', "or ',' in the debug attributes")?;
                return Ok(a);
            }
        }
    }

    /// `{"name"}`, `{"name" {1,0}}` or `{}` (no name).
    fn original_array(&mut self) -> PResult<OriginalArray> {
        self.c.expect(b'{', "to start an original value")?;
        let mut a = OriginalArray::default();
        if self.c.peek()? == Some(b'"') {
            a.instruction_name = self.c.string("an instruction name")?;
            if self.c.peek()? == Some(b'{') {
                a.shape_index = self.shape_index()?;
            }
        }
        self.c.expect(b'}', "to end the original value")?;
        Ok(a)
    }

    fn parse_stack_frames(&mut self) -> PResult<()> {
        if !self.c.eat_keyword("FileNames")? {
            return Ok(());
        }
        let mut index = StackFrameIndex::default();
        while self.c.peek()?.is_some_and(|b| b.is_ascii_digit()) {
            self.c.int("an index")?;
            index.file_names.push(self.c.string("a file name")?);
        }
        if !self.c.eat_keyword("FunctionNames")? {
            return Err(self.c.expected("'FunctionNames'"));
        }
        while self.c.peek()?.is_some_and(|b| b.is_ascii_digit()) {
            self.c.int("an index")?;
            index.function_names.push(self.c.string("a function name")?);
        }
        if !self.c.eat_keyword("FileLocations")? {
            return Err(self.c.expected("'FileLocations'"));
        }
        while self.c.peek()?.is_some_and(|b| b.is_ascii_digit()) {
            self.c.int("an index")?;
            let mut loc = crate::metadata::FileLocation::default();
            let mut seen = [false; 6];
            self.sub_attributes(|p, key, at| {
                let (slot, field) = match key {
                    "file_name_id" => (0, &mut loc.file_name_id),
                    "function_name_id" => (1, &mut loc.function_name_id),
                    "line" => (2, &mut loc.line),
                    "end_line" => (3, &mut loc.end_line),
                    "column" => (4, &mut loc.column),
                    "end_column" => (5, &mut loc.end_column),
                    _ => {
                        return Err(p
                            .c
                            .error_at(at, format!("unexpected file location field '{key}'")))
                    }
                };
                seen[slot] = true;
                *field = p.c.int32("an integer")?;
                Ok(())
            })?;
            if seen.iter().any(|s| !s) {
                return Err(self.c.error_at(
                    self.c.pos,
                    "a file location needs file_name_id, function_name_id, line, end_line, column and end_column",
                ));
            }
            index.file_locations.push(loc);
        }
        if !self.c.eat_keyword("StackFrames")? {
            return Err(self.c.expected("'StackFrames'"));
        }
        while self.c.peek()?.is_some_and(|b| b.is_ascii_digit()) {
            self.c.int("an index")?;
            let mut frame = crate::metadata::StackFrame::default();
            let mut seen = [false; 2];
            self.sub_attributes(|p, key, at| {
                let (slot, field) = match key {
                    "file_location_id" => (0, &mut frame.file_location_id),
                    "parent_frame_id" => (1, &mut frame.parent_frame_id),
                    _ => {
                        return Err(p
                            .c
                            .error_at(at, format!("unexpected stack frame field '{key}'")))
                    }
                };
                seen[slot] = true;
                *field = p.c.int32("an integer")?;
                Ok(())
            })?;
            if seen.iter().any(|s| !s) {
                return Err(self.c.error_at(
                    self.c.pos,
                    "a stack frame needs file_location_id and parent_frame_id",
                ));
            }
            index.stack_frames.push(frame);
        }
        self.m.stack_frames = index;
        Ok(())
    }

    /// `{key=value key=value ...}` (spaces or commas between entries).
    pub fn sub_attributes(
        &mut self,
        mut f: impl FnMut(&mut Self, &'a str, usize) -> PResult<()>,
    ) -> PResult<()> {
        self.c.expect(b'{', "to start the attribute list")?;
        loop {
            if self.c.eat(b'}')? {
                return Ok(());
            }
            self.c.skip_ws()?;
            let at = self.c.pos;
            let key = self.attr_name()?;
            f(self, key, at)?;
            self.c.eat(b',')?;
        }
    }

    /// `name=`: returns the name.
    pub fn attr_name(&mut self) -> PResult<&'a str> {
        let key = self.c.name("an attribute name")?;
        self.c
            .expect_parts(b'=', &["after attribute name '", key, "'"])?;
        Ok(key)
    }

    // ----- computations -----

    fn parse_computation(&mut self) -> PResult<CompId> {
        let name_at = self.c.pos;
        let name = self.c.name("a computation name")?;
        if self.c.peek()? == Some(b'(') {
            // The signature repeats the parameter shapes and the root shape; the instructions
            // are the truth, as in XLA.
            self.c.expect(b'(', "")?;
            if !self.c.eat(b')')? {
                loop {
                    self.c.name("a parameter name")?;
                    self.c.expect(b':', "after the parameter name")?;
                    self.parse_shape()?;
                    if self.c.eat(b')')? {
                        break;
                    }
                    self.c.expect(b',', "between parameters")?;
                }
            }
            if !self.c.eat_str("->")? {
                return Err(self.c.expected("'->' before the result shape"));
            }
            self.parse_shape()?;
        }
        let hash = crate::names::hash(name);
        if self.comps.find(hash, |e| e.1 == name).is_some() {
            return Err(self
                .c
                .error_at(name_at, format!("computation '{name}' is defined twice")));
        }
        let id = self.parse_body(name, name_at)?;
        self.comps.insert_unique(hash, (hash, name, id), |e| e.0);
        if self.c.eat(b',')? {
            self.c.skip_ws()?;
            let at = self.c.pos;
            let key = self.attr_name()?;
            if key != "execution_thread" {
                return Err(self.c.error_at(
                    at,
                    format!(
                        "unexpected attribute '{key}' of a computation (only execution_thread)"
                    ),
                ));
            }
            let t = self.c.string("a thread name")?;
            self.m.comp_mut(id).execution_thread = Some(t);
        }
        Ok(id)
    }

    /// `{ instruction+ }` as a new computation named `name`.
    fn parse_body(&mut self, name: &str, name_at: usize) -> PResult<CompId> {
        self.enter()?;
        self.c.expect(b'{', "to start the instruction list")?;
        let unique = self.m.unique_computation_name(name);
        let id = self
            .m
            .add_computation(unique)
            .map_err(|e| self.c.error_at(name_at, e.to_string()))?;
        let outer_current = self.current.replace(id);
        self.scope.open();
        let r = self.parse_instructions(id);
        self.scope.close();
        self.current = outer_current;
        self.leave();
        r.map(|()| id)
    }

    /// The instructions of computation `id` up to its closing `}`.
    fn parse_instructions(&mut self, id: CompId) -> PResult<()> {
        let mut root: Option<InstrId> = None;
        let mut last: Option<InstrId> = None;
        let mut count = 0usize;
        loop {
            if self.c.eat(b'}')? {
                break;
            }
            if self.c.at_end()? {
                return Err(self.c.expected("'}' at the end of the instruction list"));
            }
            let at = self.c.pos;
            let is_root = self.c.eat_keyword("ROOT")?;
            let instr = self.parse_instruction()?;
            last = Some(instr);
            count += 1;
            if is_root {
                if root.is_some() {
                    return Err(self.c.error_at(at, "a computation has only one ROOT"));
                }
                root = Some(instr);
            }
        }
        if count == 0 {
            return Err(self.c.error_at(
                self.c.pos - 1,
                "a computation needs at least one instruction",
            ));
        }
        // Without a `ROOT` marker the last instruction is the root, as in XLA.
        if let Some(r) = root.or(last) {
            self.m.set_root(id, r);
        }
        Ok(())
    }

    // ----- instructions -----

    fn parse_instruction(&mut self) -> PResult<InstrId> {
        self.c.skip_ws()?;
        let name_at = self.c.pos;
        let name = self.c.name("an instruction name")?;
        self.c.expect(b'=', "after the instruction name")?;
        self.parse_instruction_rhs(Some(name), name_at)
    }

    /// `[shape] opcode(operands), attributes`; `name` is `None` for a nested instruction.
    fn parse_instruction_rhs(&mut self, name: Option<&'a str>, name_at: usize) -> PResult<InstrId> {
        self.enter()?;
        let r = self.parse_instruction_rhs_inner(name, name_at);
        self.leave();
        r
    }

    fn parse_instruction_rhs_inner(
        &mut self,
        name: Option<&'a str>,
        name_at: usize,
    ) -> PResult<InstrId> {
        let shape = if self.can_be_shape()? {
            Some(self.parse_shape()?)
        } else {
            None
        };
        let op_at = {
            self.c.skip_ws()?;
            self.c.pos
        };
        let opname = self.c.ident("an opcode")?;
        let (opcode, wrapped_opcode) = self.resolve_opcode(opname, op_at)?;
        let text_name = name;
        let has_shape = shape.is_some();
        let name: String = match name {
            Some(n) => n.to_string(),
            None => format!("{}.anon", opcode.name()),
        };
        let mut instr = Instruction::new(name, opcode, shape.unwrap_or(Shape::Tuple(Vec::new())));
        self.c
            .expect_parts(b'(', &["to start the operands of ", opname])?;
        let operands = self.parse_operands(opcode, &mut instr, has_shape, op_at)?;
        self.check_operand_count(opcode, operands.len(), op_at)?;
        let mut calls = Calls::default();
        let mut preds: Vec<InstrId> = Vec::new();
        let mut seen: SmallVec<[&'a str; 8]> = SmallVec::new();
        if matches!(opcode, Opcode::Dot | Opcode::RaggedDot | Opcode::ScaledDot) {
            instr.attrs.dot_dims = Some(Box::default());
        }
        if matches!(opcode, Opcode::Gather) {
            instr.attrs.gather_dims = Some(Box::default());
        }
        if opcode == Opcode::Scatter {
            instr.attrs.scatter_dims = Some(Box::default());
        }
        if opcode == Opcode::CustomCall {
            instr.attrs.custom_call = Some(Box::default());
        }
        if opcode == Opcode::TopK {
            // XLA's defaults when `largest=` and `is_stable=` are not written.
            instr.attrs.largest = true;
            instr.attrs.is_stable = true;
        }
        // The instruction an async shorthand wraps (`custom-call-start` wraps a custom-call).
        let mut wrapped: Option<(Instruction, Calls)> = match wrapped_opcode {
            Some(base) if opcode == Opcode::AsyncStart => {
                let mut w = Instruction::new("async_op", base, Shape::Tuple(Vec::new()));
                match base {
                    Opcode::Dot | Opcode::RaggedDot | Opcode::ScaledDot => {
                        w.attrs.dot_dims = Some(Box::default())
                    }
                    Opcode::Gather => w.attrs.gather_dims = Some(Box::default()),
                    Opcode::Scatter => w.attrs.scatter_dims = Some(Box::default()),
                    Opcode::CustomCall => w.attrs.custom_call = Some(Box::default()),
                    Opcode::TopK => {
                        w.attrs.largest = true;
                        w.attrs.is_stable = true;
                    }
                    _ => {}
                }
                Some((w, Calls::default()))
            }
            _ => None,
        };
        // In a nested instruction a comma may instead separate the next operand of the
        // enclosing one (`add(f32[2] negate(f32[2] %p), f32[2] %p)`): only `, name=` starts
        // an attribute there, as in XLA, whose lexer reads `name=` as one token.
        while if text_name.is_none() {
            self.comma_then_attribute()?
        } else {
            self.c.eat(b',')?
        } {
            self.c.skip_ws()?;
            let at = self.c.pos;
            let key = self.attr_name()?;
            if seen.contains(&key) {
                return Err(self
                    .c
                    .error_at(at, format!("attribute '{key}' is given twice")));
            }
            seen.push(key);
            let on_start =
                wrapped.is_none() || is_common_attr(key) || key == "async_execution_thread";
            let known = match (&mut wrapped, on_start) {
                (Some((w, wcalls)), false) => {
                    let mut no_preds = Vec::new();
                    self.parse_attr(w, &operands, wcalls, &mut no_preds, key)?
                }
                _ => self.parse_attr(&mut instr, &operands, &mut calls, &mut preds, key)?,
            };
            if !known {
                return Err(self.c.error_at(
                    at,
                    format!("unexpected attribute '{key}' for opcode {opname}"),
                ));
            }
        }
        if let Some((mut w, wcalls)) = wrapped.take() {
            let comp = self.wrap_async(&mut instr, &mut w, wcalls, &operands, &seen, op_at)?;
            instr.called = [comp].into_iter().collect();
        } else {
            self.finish_attrs(&mut instr, &operands, calls, &seen, op_at)?;
        }
        if matches!(opcode, Opcode::AsyncUpdate | Opcode::AsyncDone) {
            self.inherit_async_computation(&mut instr, &operands, wrapped_opcode, op_at)?;
        }
        if !has_shape {
            instr.shape = self.infer_shape(opcode, &operands, &instr, op_at)?;
        } else if opcode == Opcode::Tuple && instr.shape.tuple_elements().len() != operands.len() {
            return Err(self.c.error_at(
                op_at,
                format!(
                    "tuple shape has {} elements but {} operands are given",
                    instr.shape.tuple_elements().len(),
                    operands.len()
                ),
            ));
        }
        instr.operands = operands;
        let comp = self
            .current
            .expect("instructions are parsed inside a computation");
        // A name already in use gets XLA's `.N` suffix. Until something makes the module build
        // its name table (a rename, an anonymous instruction, an async wrapper), the module's
        // names are exactly the text names seen so far, which the scope table knows.
        let hash = text_name.map(crate::names::hash);
        let known = match (text_name, hash) {
            (Some(n), Some(h)) if !self.m.name_table_built() => self.scope.has_name(h, n),
            _ => None,
        };
        let taken = known.unwrap_or_else(|| self.m.is_name_used(&instr.name));
        if self.m.name_table_built() {
            self.scope.forget_names();
        }
        if taken {
            instr.name = self.m.unique_name(&instr.name);
        }
        self.buffer_bytes = instr
            .shape
            .checked_total_bytes()
            .and_then(|b| b.checked_add(self.buffer_bytes))
            .filter(|&t| t <= MAX_MODULE_BUFFER_BYTES)
            .ok_or_else(|| {
                self.c.error_at(
                    name_at,
                    format!(
                        "the buffers of the module's instructions up to this one take more than \
                         {MAX_MODULE_BUFFER_BYTES} bytes (the limit)"
                    ),
                )
            })?;
        let id = self
            .m
            .add_parsed_instruction(comp, instr)
            .map_err(|e| self.c.error_at(name_at, e.to_string()))?;
        if let (Some(n), Some(h)) = (text_name, hash) {
            if !self.scope.insert(h, n, id) {
                return Err(self.c.error_at(
                    name_at,
                    format!("instruction '{n}' is defined twice in this computation"),
                ));
            }
        }
        for p in preds {
            self.m.add_control_dependency(p, id);
        }
        Ok(id)
    }

    /// The opcode named `opname`, and for XLA's async shorthand (`custom-call-start(...)`
    /// etc., an async op wrapping one instruction) the opcode it wraps.
    fn resolve_opcode(&self, opname: &str, op_at: usize) -> PResult<(Opcode, Option<Opcode>)> {
        match Opcode::from_name(opname) {
            Some(op) => Ok((op, None)),
            None => {
                let sugar = [
                    ("-start", Opcode::AsyncStart),
                    ("-update", Opcode::AsyncUpdate),
                    ("-done", Opcode::AsyncDone),
                ]
                .iter()
                .find_map(|&(suffix, async_op)| {
                    let base = Opcode::from_name(opname.strip_suffix(suffix)?)?;
                    (!base.is_async()).then_some((async_op, base))
                });
                match sugar {
                    Some((async_op, base)) => Ok((async_op, Some(base))),
                    None => Err(self.c.error_at(op_at, format!("unknown opcode '{opname}'"))),
                }
            }
        }
    }

    /// The operand list after the opening parenthesis, through the closing one: a parameter's
    /// number and a constant's literal go into `instr`'s attributes instead.
    fn parse_operands(
        &mut self,
        opcode: Opcode,
        instr: &mut Instruction,
        has_shape: bool,
        op_at: usize,
    ) -> PResult<SmallVec<[InstrId; 2]>> {
        let mut operands: SmallVec<[InstrId; 2]> = SmallVec::new();
        match opcode {
            Opcode::Parameter => {
                let at = self.c.pos;
                let n = self.c.int("a parameter number")?;
                if n < 0 {
                    return Err(self.c.error_at(at, "parameter number must be >= 0"));
                }
                // Parameter N needs N+1 parameter instructions in its computation, each longer
                // than a byte: a larger number cannot be valid, and would size the
                // computation's parameter table.
                if n as u64 >= self.c.b.len() as u64 {
                    return Err(self.c.error_at(
                        at,
                        format!(
                            "parameter number {n} is out of range: a text of {} bytes cannot \
                         hold the parameters below it",
                            self.c.b.len()
                        ),
                    ));
                }
                instr.attrs.parameter_number = n;
                self.c.expect(b')', "after the parameter number")?;
            }
            Opcode::Constant => {
                if !has_shape {
                    return Err(self.c.error_at(
                        op_at,
                        "a constant needs its shape written before 'constant'",
                    ));
                };
                let lit = self.parse_literal(&instr.shape)?;
                instr.attrs.literal = Some(Box::new(lit));
                self.c.expect(b')', "after the constant literal")?;
            }
            _ => {
                if !self.c.eat(b')')? {
                    loop {
                        operands.push(self.parse_operand()?);
                        if self.c.eat(b')')? {
                            break;
                        }
                        self.c.expect(b',', "or ')' in the operand list")?;
                    }
                }
            }
        }
        Ok(operands)
    }

    /// An async-update's or async-done's computation comes from its async-start operand (a
    /// written calls= must agree, and a shorthand's wrapped opcode must match its root).
    fn inherit_async_computation(
        &mut self,
        instr: &mut Instruction,
        operands: &[InstrId],
        wrapped_opcode: Option<Opcode>,
        op_at: usize,
    ) -> PResult<()> {
        // The computation comes from the async-start (a written calls= must agree).
        let inherited = self.m.async_computation_of_operand(operands);
        let Some(inherited) = inherited else {
            return Err(self.c.error_at(
                op_at,
                "async-update and async-done take one async-start or async-update operand",
            ));
        };
        if instr.called.first().is_some_and(|&c| c != inherited) {
            return Err(self.c.error_at(
                op_at,
                "calls= differs from the computation of the async-start",
            ));
        }
        if let Some(base) = wrapped_opcode {
            let root = self
                .m
                .comp(inherited)
                .root()
                .map(|r| self.m.instr(r).opcode);
            if root != Some(base) {
                return Err(self.c.error_at(
                    op_at,
                    format!("the async operand does not wrap a {}", base.name()),
                ));
            }
        }
        instr.called = [inherited].into_iter().collect();
        Ok(())
    }

    /// Builds the computation an async shorthand wraps: one parameter per operand and the
    /// wrapped instruction as root, placed before the current computation. Metadata, backend
    /// config, frontend attributes, statistics and origin are copied to the wrapped instruction,
    /// as XLA does.
    fn wrap_async(
        &mut self,
        start: &mut Instruction,
        w: &mut Instruction,
        calls: Calls,
        operands: &[InstrId],
        seen: &[&str],
        at: usize,
    ) -> PResult<CompId> {
        let result = match &start.shape {
            Shape::Tuple(e) if e.len() >= 2 && e[0].is_tuple() => e[1].clone(),
            _ => {
                return Err(self.c.error_at(
                    at,
                    "an async start's shape is ((operands), outputs, state...)",
                ))
            }
        };
        w.shape = result;
        self.finish_attrs(w, operands, calls, seen, at)?;
        w.metadata = start.metadata.clone();
        w.backend_config = start.backend_config.clone();
        w.frontend_attributes = start.frontend_attributes.clone();
        w.attrs.statistics_viz = start.attrs.statistics_viz.clone();
        w.attrs.original_value = start.attrs.original_value.clone();
        let name = self.m.unique_computation_name("async_wrapped");
        let comp = self
            .m
            .add_computation(name)
            .map_err(|e| self.c.error_at(at, e.to_string()))?;
        // XLA runs the wrapped computation on the async thread.
        self.m.comp_mut(comp).execution_thread = start.attrs.async_execution_thread.clone();
        let mut params: SmallVec<[InstrId; 2]> = SmallVec::new();
        for (k, &o) in operands.iter().enumerate() {
            let pname = self.m.unique_name("async_param");
            let mut p = Instruction::new(pname, Opcode::Parameter, self.m.instr(o).shape.clone());
            p.attrs.parameter_number = k as i64;
            let id = self
                .m
                .add_instruction(comp, p)
                .map_err(|e| self.c.error_at(at, e.to_string()))?;
            params.push(id);
        }
        let mut inner = std::mem::replace(w, Instruction::new("", Opcode::Tuple, Shape::Token));
        inner.name = self.m.unique_name("async_op");
        inner.operands = params;
        let root = self
            .m
            .add_instruction(comp, inner)
            .map_err(|e| self.c.error_at(at, e.to_string()))?;
        self.m.set_root(comp, root);
        if let Some(outer) = self.current {
            self.placed_before.push((comp, outer));
        }
        Ok(comp)
    }

    fn check_operand_count(&self, op: Opcode, n: usize, at: usize) -> PResult<()> {
        use Opcode::*;
        let bad = |want: &str| {
            Err(self.c.error_at(
                at,
                format!("{} expects {want} operands, but has {n}", op.name()),
            ))
        };
        match op {
            Parameter | Constant => Ok(()),
            Reduce | ReduceWindow if !n.is_multiple_of(2) || n == 0 => bad("an even number of"),
            Scatter if n.is_multiple_of(2) => bad("an odd number of"),
            DynamicSlice | DynamicUpdateSlice | Conditional | RngBitGenerator | DynamicReshape
                if n == 0 =>
            {
                bad("at least one")
            }
            _ => match op.arity() {
                Some(a) if a != n => bad(&a.to_string()),
                _ => Ok(()),
            },
        }
    }

    /// Consumes `,` when `name =` follows it, else nothing: the comma after a nested
    /// instruction starts its attributes only then.
    fn comma_then_attribute(&mut self) -> PResult<bool> {
        let start = self.c.pos;
        if !self.c.eat(b',')? {
            return Ok(false);
        }
        let after = self.c.pos;
        let word = self.c.peek_word()?;
        let is_attr = !word.is_empty() && {
            self.c.pos += word.len();
            self.c.peek()? == Some(b'=')
        };
        self.c.pos = if is_attr { after } else { start };
        Ok(is_attr)
    }

    fn parse_operand(&mut self) -> PResult<InstrId> {
        let shape_at = {
            self.c.skip_ws()?;
            self.c.pos
        };
        // `%name`: neither a shape nor a nested instruction can start with `%`.
        if self.c.byte_at(0) == Some(b'%') {
            let name = self.c.name("an operand name")?;
            let id = self.lookup(name).ok_or_else(|| {
                self.c
                    .error_at(shape_at, format!("instruction '{name}' is not defined"))
            })?;
            return self.tuple_element_shorthand(id, name, shape_at);
        }
        let declared = if self.can_be_shape()? {
            Some(self.parse_shape()?)
        } else {
            None
        };
        let at = {
            self.c.skip_ws()?;
            self.c.pos
        };
        // A nested instruction without a name: `exponential(f32[] parameter(0))`.
        let word = self.c.peek_word()?;
        if self.c.byte_at(word.len()) == Some(b'(') && Opcode::from_name(word).is_some() {
            self.c.pos = shape_at;
            return self.parse_instruction_rhs(None, shape_at);
        }
        let name = self.c.name("an operand name")?;
        let Some(id) = self.lookup(name) else {
            return Err(self
                .c
                .error_at(at, format!("instruction '{name}' is not defined")));
        };
        let id = self.tuple_element_shorthand(id, name, at)?;
        if let Some(s) = declared {
            if !s.compatible(&self.m.instr(id).shape) {
                return Err(self.c.error_at(
                    at,
                    format!(
                        "the declared operand shape {} is not compatible with the shape {} of '{name}'",
                        super::printer::shape_string(&s),
                        super::printer::shape_string(&self.m.instr(id).shape)
                    ),
                ));
            }
        }
        Ok(id)
    }

    /// Dumps' tuple-element shorthand after an operand name: `%x#1` is element 1 of the tuple
    /// `%x`, `%x#1#0` element 0 of that. Read as XLA's parser reads it: each step is a
    /// `get-tuple-element` named `<x>_<N>` (the operand's text name, or the name made for the
    /// step before), added right before the instruction being parsed, without sharding or
    /// metadata; later uses of the same element share it. Its name is not a text name (the
    /// text cannot refer to it), so a text instruction of that name defined later gets a `.N`
    /// suffix. Returns `id` itself when no `#` follows.
    fn tuple_element_shorthand(
        &mut self,
        mut id: InstrId,
        name: &str,
        at: usize,
    ) -> PResult<InstrId> {
        if self.c.peek()? != Some(b'#') {
            return Ok(id);
        }
        let mut base = name.to_string();
        while self.c.eat(b'#')? {
            let index_at = {
                self.c.skip_ws()?;
                self.c.pos
            };
            let index = self.c.int("a tuple index after '#'")?;
            base = format!("{base}_{index}");
            if let Some(&gte) = self.tuple_elements.get(&(id, index)) {
                id = gte;
                continue;
            }
            let tuple = self.m.instr(id);
            let elements = tuple.shape.tuple_elements();
            if !tuple.shape.is_tuple() {
                return Err(self.c.error_at(
                    at,
                    format!(
                        "'{}#{index}' takes an element of a tuple, but '{}' has shape {}",
                        tuple.name,
                        tuple.name,
                        super::printer::shape_string(&tuple.shape)
                    ),
                ));
            }
            let Some(element) = usize::try_from(index).ok().and_then(|i| elements.get(i)) else {
                return Err(self.c.error_at(
                    index_at,
                    format!(
                        "tuple index {index} is out of range for '{}', a tuple of {} elements",
                        tuple.name,
                        elements.len()
                    ),
                ));
            };
            let element = element.clone();
            let mut gte =
                Instruction::new(self.m.unique_name(&base), Opcode::GetTupleElement, element);
            gte.attrs.tuple_index = index;
            gte.operands = [id].into_iter().collect();
            let comp = self
                .current
                .expect("operands are parsed inside a computation");
            let gte_id = self
                .m
                .add_parsed_instruction(comp, gte)
                .map_err(|e| self.c.error_at(at, e.to_string()))?;
            self.tuple_elements.insert((id, index), gte_id);
            id = gte_id;
        }
        Ok(id)
    }

    /// True if the next tokens start a shape (`f32[`, `(`, `token[`, `b(`).
    pub fn can_be_shape(&mut self) -> PResult<bool> {
        match self.c.peek()? {
            Some(b'(') => Ok(true),
            Some(c) if c.is_ascii_alphabetic() => {
                let word = self.c.peek_word()?;
                let next = self.c.b.get(self.c.pos + word.len()).copied();
                if word == "b" {
                    return Ok(next == Some(b'('));
                }
                Ok(next == Some(b'[')
                    && ElementType::from_name(word)
                        .is_some_and(|t| !matches!(t, ElementType::Tuple | ElementType::Buffer)))
            }
            _ => Ok(false),
        }
    }

    fn infer_shape(
        &self,
        op: Opcode,
        operands: &[InstrId],
        instr: &Instruction,
        at: usize,
    ) -> PResult<Shape> {
        let shape_of = |i: usize| self.m.instr(operands[i]).shape.clone();
        let fail = || {
            Err(self.c.error_at(
                at,
                format!(
                    "cannot infer the shape of {}; write it before the opcode",
                    op.name()
                ),
            ))
        };
        match op {
            Opcode::GetTupleElement => {
                let s = &self.m.instr(operands[0]).shape;
                match s.tuple_elements().get(instr.attrs.tuple_index as usize) {
                    Some(e) if s.is_tuple() => Ok(e.clone()),
                    _ => Err(self.c.error_at(
                        at,
                        format!(
                            "tuple index {} is out of range for the operand shape {}",
                            instr.attrs.tuple_index,
                            super::printer::shape_string(s)
                        ),
                    )),
                }
            }
            Opcode::Tuple => Ok(Shape::Tuple((0..operands.len()).map(shape_of).collect())),
            Opcode::Compare => match shape_of(0) {
                Shape::Array(mut a) => {
                    a.ty = ElementType::Pred;
                    Ok(Shape::Array(a))
                }
                _ => fail(),
            },
            _ if (op.is_elementwise()
                && !matches!(
                    op,
                    Opcode::Convert
                        | Opcode::BitcastConvert
                        | Opcode::Real
                        | Opcode::Imag
                        | Opcode::Complex
                        | Opcode::IsFinite
                        | Opcode::StochasticConvert
                        | Opcode::ReducePrecision
                ))
                || matches!(op, Opcode::Copy | Opcode::OptimizationBarrier) =>
            {
                let idx = if op == Opcode::Select { 1 } else { 0 };
                if operands.len() <= idx {
                    return fail();
                }
                Ok(shape_of(idx))
            }
            // Without a written shape XLA's parser takes the broadcast's `dimensions` as sizes
            // put before the operand's dimensions (the old client-side broadcast), and keeps
            // the attribute as written.
            Opcode::Broadcast => match operands.first().map(|&o| &self.m.instr(o).shape) {
                Some(Shape::Array(a)) => {
                    let sizes = instr.attrs.dimensions.as_deref().unwrap_or(&[]);
                    if let Some(bad) = sizes.iter().find(|&&d| d < 0) {
                        return Err(self.c.error_at(
                            at,
                            format!("cannot infer the broadcast shape: negative size {bad}"),
                        ));
                    }
                    let mut dims: crate::shape::Dims = sizes.iter().copied().collect();
                    dims.extend(a.dims.iter().copied());
                    let dynamic = if a.dynamic.is_empty() {
                        SmallVec::new()
                    } else {
                        std::iter::repeat_n(false, sizes.len())
                            .chain(a.dynamic.iter().copied())
                            .collect()
                    };
                    Ok(Shape::Array(crate::shape::ArrayShape {
                        ty: a.ty,
                        dims,
                        dynamic,
                        layout: None,
                    }))
                }
                _ => fail(),
            },
            // The other opcodes XLA's parser infers (`CanInferShape` in hlo_parser.cc): the
            // verifier's shape inference, from the operands, attributes and callees.
            _ if xla_infers_shape(op) => {
                let shapes: Vec<&Shape> =
                    operands.iter().map(|&o| &self.m.instr(o).shape).collect();
                let called: Vec<crate::module::ProgramShape> = instr
                    .called
                    .iter()
                    .map(|&c| {
                        let comp = self.m.comp(c);
                        crate::module::ProgramShape {
                            parameters: (0..comp.num_parameters())
                                .map(|n| {
                                    comp.parameter(n).map_or(Shape::Tuple(Vec::new()), |p| {
                                        self.m.instr(p).shape.clone()
                                    })
                                })
                                .collect(),
                            result: comp.root().map_or(Shape::Tuple(Vec::new()), |r| {
                                self.m.instr(r).shape.clone()
                            }),
                        }
                    })
                    .collect();
                crate::verify::shape_inference::infer_shape(
                    op,
                    &shapes,
                    &instr.attrs,
                    &called,
                    None,
                )
                .map_err(|e| {
                    self.c.error_at(
                        at,
                        format!(
                            "cannot infer the shape of {}: {e}; write it before the opcode",
                            op.name()
                        ),
                    )
                })
            }
            _ => fail(),
        }
    }

    // ----- attributes -----

    fn comp_ref(&mut self) -> PResult<CompId> {
        if self.c.peek()? == Some(b'{') {
            // An inline (anonymous) computation.
            let at = self.c.pos;
            let outer = self.current;
            let id = self.parse_body("anonymous_computation", at)?;
            if let Some(outer) = outer {
                self.placed_before.push((id, outer));
            }
            return Ok(id);
        }
        let at = {
            self.c.skip_ws()?;
            self.c.pos
        };
        let name = self.c.name("a computation name")?;
        let hash = crate::names::hash(name);
        let found = self.comps.find(hash, |e| e.1 == name).map(|e| e.2);
        found.ok_or_else(|| {
            self.c.error_at(
                at,
                format!("computation '{name}' is not defined (callees come first)"),
            )
        })
    }

    fn comp_list(&mut self) -> PResult<Vec<CompId>> {
        self.c.expect(b'{', "to start the computation list")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            v.push(self.comp_ref()?);
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect(b',', "or '}' in the computation list")?;
        }
    }

    fn instr_list(&mut self) -> PResult<Vec<InstrId>> {
        self.c.expect(b'{', "to start the instruction list")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            let at = {
                self.c.skip_ws()?;
                self.c.pos
            };
            let name = self.c.name("an instruction name")?;
            let id = self.lookup(name).ok_or_else(|| {
                self.c
                    .error_at(at, format!("instruction '{name}' is not defined"))
            })?;
            v.push(id);
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect(b',', "or '}' in the instruction list")?;
        }
    }

    pub fn bool_value(&mut self) -> PResult<bool> {
        if self.c.eat_keyword("true")? {
            Ok(true)
        } else if self.c.eat_keyword("false")? {
            Ok(false)
        } else {
            Err(self.c.expected("true or false"))
        }
    }

    fn bool_list_or_bool(&mut self) -> PResult<Vec<bool>> {
        if self.c.peek()? != Some(b'{') {
            return Ok(vec![self.bool_value()?]);
        }
        self.c.expect(b'{', "")?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            v.push(self.bool_value()?);
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect(b',', "or '}' in the boolean list")?;
        }
    }

    /// `{1,2,3}`.
    pub fn int_list(&mut self, what: &str) -> PResult<Vec<i64>> {
        self.c.expect_parts(b'{', &["to start ", what])?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            v.push(self.c.int("an integer")?);
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect_parts(b',', &["or '}' in ", what])?;
        }
    }

    /// `{{0,1},{2,3}}`.
    pub fn int_list_list(&mut self, what: &str) -> PResult<Vec<Vec<i64>>> {
        self.c.expect_parts(b'{', &["to start ", what])?;
        let mut v = Vec::new();
        if self.c.eat(b'}')? {
            return Ok(v);
        }
        loop {
            v.push(self.int_list(what)?);
            if self.c.eat(b'}')? {
                return Ok(v);
            }
            self.c.expect_parts(b',', &["or '}' in ", what])?;
        }
    }

    fn shape_index(&mut self) -> PResult<Vec<i64>> {
        self.int_list("a shape index")
    }
}

/// Attributes every instruction may carry (kept on an async shorthand's start instruction).
fn is_common_attr(key: &str) -> bool {
    matches!(
        key,
        "sharding"
            | "frontend_attributes"
            | "statistics"
            | "parameter_replication"
            | "control-predecessors"
            | "origin"
            | "metadata"
            | "backend_config"
    )
}

/// XLA's `is_scheduled=true` schedule: every computation except fusion bodies, in text order.
fn schedule_from_order(m: &Module) -> Schedule {
    let mut fused = vec![false; m.comp_capacity()];
    for &c in m.computations() {
        for &i in m.comp(c).instructions() {
            let ins = m.instr(i);
            if ins.opcode == Opcode::Fusion {
                for &f in &ins.called {
                    fused[f.index()] = true;
                }
            }
        }
    }
    let mut s = Schedule::default();
    for &c in m.computations() {
        if !fused[c.index()] {
            s.sequences.insert(c, m.comp(c).instructions().to_vec());
        }
    }
    s
}
