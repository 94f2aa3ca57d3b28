//! `xla.HloModuleProto` -> Module.

use std::collections::HashMap;

use super::messages as pb;
use super::values::*;
use super::ProtoError;
use crate::attr_table::{self, Codec};
use crate::attrs::*;
use crate::instruction::{CompId, InstrId, Instruction};
use crate::metadata::{FileLocation, StackFrame, StackFrameIndex};
use crate::module::{AliasKind, BufferDonor, InputOutputAlias, Module, ProgramShape, Schedule};
use crate::opcode::Opcode;
use crate::shape::{Shape, MAX_MODULE_BUFFER_BYTES};
use crate::types::ElementType;

fn err(place: impl Into<String>, message: impl Into<String>) -> ProtoError {
    ProtoError::Invalid {
        place: place.into(),
        message: message.into(),
    }
}

fn at_instr(p: &pb::HloInstructionProto) -> String {
    format!("instruction %{} (id {})", p.name, p.id)
}

/// Opcodes whose text always carries `dimensions={...}`, so an empty list is still "given".
fn always_has_dimensions(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Broadcast
            | Transpose
            | Reverse
            | Reduce
            | Concatenate
            | Sort
            | Map
            | AllGather
            | AllGatherStart
            | ReduceScatter
            | GetDimensionSize
            | SetDimensionSize
    )
}

/// The optional attributes whose presence XLA's fields alone may not tell (an empty list, a
/// zero, an empty string all read as "not given"); [`default_present`] is the reading of XLA's
/// fields, and Tessera's extension field lists the exceptions.
pub(crate) const OPTIONAL_FIELDS: &[&str] = &[
    "dimensions",
    "slice",
    "dynamic_slice_sizes",
    "gather_slice_sizes",
    "source_target_pairs",
    "fft_length",
    "fft_type",
    "rng_algorithm",
    "metadata",
    "backend_config",
    "infeed_config",
    "outfeed_config",
    "async_execution_thread",
    "channel_id",
    "domain",
    "custom_call",
    "scan",
    "outfeed_shape",
];

/// [`OPTIONAL_FIELDS`] as values, for matching without comparing strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OptField {
    Dimensions,
    Slice,
    DynamicSliceSizes,
    GatherSliceSizes,
    SourceTargetPairs,
    FftLength,
    FftType,
    RngAlgorithm,
    Metadata,
    BackendConfig,
    InfeedConfig,
    OutfeedConfig,
    AsyncExecutionThread,
    ChannelId,
    Domain,
    CustomCall,
    Scan,
    OutfeedShape,
}

/// Every [`OptField`], in the order of [`OPTIONAL_FIELDS`].
pub(crate) const OPT_FIELDS: [OptField; 18] = [
    OptField::Dimensions,
    OptField::Slice,
    OptField::DynamicSliceSizes,
    OptField::GatherSliceSizes,
    OptField::SourceTargetPairs,
    OptField::FftLength,
    OptField::FftType,
    OptField::RngAlgorithm,
    OptField::Metadata,
    OptField::BackendConfig,
    OptField::InfeedConfig,
    OptField::OutfeedConfig,
    OptField::AsyncExecutionThread,
    OptField::ChannelId,
    OptField::Domain,
    OptField::CustomCall,
    OptField::Scan,
    OptField::OutfeedShape,
];

impl OptField {
    /// The field's name in [`OPTIONAL_FIELDS`] and in Tessera's extension field.
    pub(crate) fn name(self) -> &'static str {
        OPTIONAL_FIELDS[self as usize]
    }

    fn from_name(field: &str) -> Option<OptField> {
        OPTIONAL_FIELDS
            .iter()
            .position(|f| *f == field)
            .map(|k| OPT_FIELDS[k])
    }
}

/// Whether an optional attribute is given, as XLA's fields of `p` say.
pub(crate) fn default_present(field: &str, op: Opcode, p: &pb::HloInstructionProto) -> bool {
    OptField::from_name(field).is_some_and(|f| default_present_of(f, op, p))
}

/// [`default_present`] of a field given as an [`OptField`].
pub(crate) fn default_present_of(field: OptField, op: Opcode, p: &pb::HloInstructionProto) -> bool {
    use Opcode::*;
    match field {
        OptField::Dimensions => {
            !matches!(op, Iota | Scan) && (always_has_dimensions(op) || !p.dimensions.is_empty())
        }
        OptField::Slice => op == Slice || !p.slice_dimensions.is_empty(),
        OptField::DynamicSliceSizes => op == DynamicSlice || !p.dynamic_slice_sizes.is_empty(),
        OptField::GatherSliceSizes => op == Gather || !p.gather_slice_sizes.is_empty(),
        OptField::SourceTargetPairs => {
            matches!(op, CollectivePermute | CollectivePermuteStart)
                || !p.source_target_pairs.is_empty()
        }
        OptField::FftLength => op == Fft || !p.fft_length.is_empty(),
        OptField::FftType => op == Fft,
        OptField::RngAlgorithm => op == RngBitGenerator || p.rng_algorithm != 0,
        OptField::Metadata => p
            .metadata
            .as_ref()
            .is_some_and(|m| *m != pb::OpMetadata::default()),
        OptField::BackendConfig => !p.backend_config.is_empty(),
        OptField::InfeedConfig => !p.infeed_config.is_empty(),
        OptField::OutfeedConfig => !p.outfeed_config.is_empty(),
        OptField::AsyncExecutionThread => !p.async_execution_thread.is_empty(),
        OptField::ChannelId => p.channel_id != 0,
        OptField::Domain => op == Domain,
        OptField::CustomCall => op == CustomCall,
        OptField::Scan => op == Scan,
        OptField::OutfeedShape => p.outfeed_shape.is_some(),
    }
}

/// Reads presence: XLA's fields, corrected by Tessera's extension when there is one.
struct Presence<'a> {
    op: Opcode,
    p: &'a pb::HloInstructionProto,
}

impl Presence<'_> {
    fn has(&self, field: &str) -> bool {
        let ext = self.p.tessera.as_ref();
        if ext.is_some_and(|e| e.absent.iter().any(|f| f == field)) {
            false
        } else if ext.is_some_and(|e| e.present.iter().any(|f| f == field)) {
            true
        } else {
            default_present(field, self.op, self.p)
        }
    }
}

pub(crate) fn module_from_proto(p: &pb::HloModuleProto) -> Result<Module, ProtoError> {
    let mut m = Module::new(p.name.clone());
    let module_place = format!("module `{}`", p.name);

    // Computations first (names and ids), so calls can be resolved in any order.
    let mut comp_of: HashMap<i64, CompId> = HashMap::new();
    for c in &p.computations {
        let place = format!("computation `{}` (id {})", c.name, c.id);
        let id = m
            .add_computation(c.name.clone())
            .map_err(|e| err(&place, e.to_string()))?;
        if comp_of.insert(c.id, id).is_some() {
            return Err(err(place, "computation id used twice"));
        }
        if !c.execution_thread.is_empty() {
            m.comp_mut(id).execution_thread = Some(c.execution_thread.clone());
        }
    }

    let mut instr_of: HashMap<i64, InstrId> = HashMap::new();
    let mut buffer_bytes = 0i64;
    for c in &p.computations {
        import_computation(&mut m, c, &comp_of, &mut instr_of, &mut buffer_bytes)?;
    }

    // Entry: by id, else by name, else (old protos) the last computation.
    let entry = comp_of
        .get(&p.entry_computation_id)
        .copied()
        .filter(|&e| {
            p.entry_computation_name.is_empty() || m.comp(e).name == p.entry_computation_name
        })
        .or_else(|| m.find_computation(&p.entry_computation_name))
        .or_else(|| {
            (p.entry_computation_name.is_empty() && p.entry_computation_id == 0)
                .then(|| m.computations().last().copied())
                .flatten()
        });
    match entry {
        Some(e) => m.set_entry(e),
        None if p.computations.is_empty() => {}
        None => {
            return Err(err(
                module_place,
                format!(
                    "entry computation (id {}, name `{}`) is not among the computations",
                    p.entry_computation_id, p.entry_computation_name
                ),
            ))
        }
    }

    if let (Some(hps), Some(e)) = (&p.host_program_shape, m.entry()) {
        let ps = program_shape_from_proto(hps).map_err(|e| err("host_program_shape", e))?;
        let keep = match &p.tessera {
            Some(ext) => !ext.no_entry_computation_layout,
            // An XLA proto: keep the layout only when it says more than the instructions do.
            None => ps != m.program_shape(e),
        };
        if keep {
            m.config.entry_computation_layout = Some(ps);
        }
    }
    if let Some(ext) = &p.tessera {
        let cfg = &mut m.config;
        cfg.replica_count = ext.replica_count.max(1);
        cfg.num_partitions = ext.num_partitions.max(1);
        cfg.use_spmd_partitioning = ext.use_spmd_partitioning;
        cfg.alias_passthrough_params = ext.alias_passthrough_params;
        cfg.allow_spmd_sharding_propagation_to_parameters = ext
            .has_allow_spmd_sharding_propagation_to_parameters
            .then(|| ext.allow_spmd_sharding_propagation_to_parameters.clone());
        cfg.allow_spmd_sharding_propagation_to_output = ext
            .has_allow_spmd_sharding_propagation_to_output
            .then(|| ext.allow_spmd_sharding_propagation_to_output.clone());
    }
    if let Some(io) = &p.input_output_alias {
        for a in &io.entries {
            m.config.input_output_alias.push(InputOutputAlias {
                output_index: a.output_shape_index.clone(),
                parameter_number: a.parameter_number,
                parameter_index: a.parameter_shape_index.clone(),
                kind: match a.kind {
                    0 | 1 => AliasKind::MayAlias,
                    2 => AliasKind::MustAlias,
                    k => return Err(err("input_output_alias", format!("unknown alias kind {k}"))),
                },
            });
        }
    }
    if let Some(d) = &p.buffer_donor {
        m.config.buffer_donor = d
            .entries
            .iter()
            .map(|d| BufferDonor {
                parameter_number: d.parameter_number,
                parameter_index: d.parameter_shape_index.clone(),
            })
            .collect();
    }
    m.config.spmd_output_sharding = p
        .spmd_output_sharding
        .as_ref()
        .map(sharding_from_proto)
        .transpose()
        .map_err(|e| err("spmd_output_sharding", e))?;
    let has_param_shardings = match &p.tessera {
        Some(ext) => ext.has_spmd_parameters_shardings,
        None => !p.spmd_parameters_shardings.is_empty(),
    };
    if has_param_shardings {
        m.config.spmd_parameters_shardings = Some(
            p.spmd_parameters_shardings
                .iter()
                .map(sharding_from_proto)
                .collect::<Result<_, _>>()
                .map_err(|e| err("spmd_parameters_shardings", e))?,
        );
    }
    if let Some(f) = &p.frontend_attributes {
        m.config.frontend_attributes = frontend_attributes_from_proto(f);
    }
    if let Some(t) = &p.original_value_recovery_table {
        recovery_table_from_proto(&mut m, t)?;
    }
    for (k, e) in p.debug_attributes.iter().enumerate() {
        let place = || format!("debug_attributes entry {k}");
        let array = e
            .original_array
            .as_ref()
            .map(|a| crate::module::OriginalArray {
                instruction_name: a.instruction_name.clone(),
                shape_index: a.shape_index.clone(),
            })
            .unwrap_or_default();
        let mut list = Vec::with_capacity(e.debug_attributes.len());
        for d in &e.debug_attributes {
            use crate::module::DebugLogMode;
            // NO_FUSION (3) and GUARANTEED (4) have no place in XLA's module either: they
            // read as no log mode, as XLA reads them.
            let log_mode = match d.log_mode {
                0 | 3 | 4 => DebugLogMode::None,
                1 => DebugLogMode::Default,
                2 => DebugLogMode::FusionDebugger,
                v => return Err(err(place(), format!("unknown debug log mode {v}"))),
            };
            list.push(crate::module::DebugAttributes {
                log_mode,
                callback_id: d.callback_id,
                op_id: d.op_id,
                partitioned: d.partitioned,
            });
        }
        if m.config.debug_attributes.contains_key(&array) {
            return Err(err(place(), format!("{array:?} is listed twice")));
        }
        // An entry without attributes is dropped, as XLA drops it.
        if !list.is_empty() {
            m.config.debug_attributes.insert(array, list);
        }
    }
    if let Some(s) = &p.schedule {
        let mut sched = Schedule::default();
        // In the module's computation order, which is how the text lists them.
        for c in &p.computations {
            let Some(seq) = s.sequences.get(&c.id) else {
                continue;
            };
            let ids = seq
                .instruction_ids
                .iter()
                .map(|i| {
                    instr_of.get(i).copied().ok_or_else(|| {
                        err(
                            format!("schedule of computation `{}`", c.name),
                            format!("instruction id {i} does not exist"),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            sched.sequences.insert(comp_of[&c.id], ids);
        }
        if let Some(k) = s.sequences.keys().find(|k| !comp_of.contains_key(k)) {
            return Err(err(
                "schedule",
                format!("computation id {k} does not exist"),
            ));
        }
        m.schedule = Some(sched);
    }
    if let Some(s) = &p.stack_frame_index {
        m.stack_frames = StackFrameIndex {
            file_names: s.file_names.clone(),
            function_names: s.function_names.clone(),
            file_locations: s
                .file_locations
                .iter()
                .map(|l| FileLocation {
                    file_name_id: l.file_name_id,
                    function_name_id: l.function_name_id,
                    line: l.line,
                    end_line: l.end_line,
                    column: l.column,
                    end_column: l.end_column,
                })
                .collect(),
            stack_frames: s
                .stack_frames
                .iter()
                .map(|f| StackFrame {
                    file_location_id: f.file_location_id,
                    parent_frame_id: f.parent_frame_id + 1,
                })
                .collect(),
        };
    }
    check_text_expressible(&m)?;
    Ok(m)
}

/// `module_from_proto`: the origin recovery table of the module config.
fn recovery_table_from_proto(
    m: &mut Module,
    t: &pb::OriginalValueRecoveryTableProto,
) -> Result<(), ProtoError> {
    let array = |a: &Option<pb::OriginalArrayProto>| {
        a.as_ref()
            .map(|a| crate::module::OriginalArray {
                instruction_name: a.instruction_name.clone(),
                shape_index: a.shape_index.clone(),
            })
            .unwrap_or_default()
    };
    for (k, e) in t.entries.iter().enumerate() {
        let old = array(&e.old_original_array);
        let module = match &e.recovery_module {
            Some(rm) => Some(Box::new(module_from_proto(rm).map_err(|x| {
                err(
                    format!("original_value_recovery_table entry {k}"),
                    format!("recovery module: {x}"),
                )
            })?)),
            None => None,
        };
        if m.config.origin_recovery_table.contains_key(&old) {
            return Err(err(
                format!("original_value_recovery_table entry {k}"),
                format!("{old:?} is listed twice"),
            ));
        }
        m.config.origin_recovery_table.insert(
            old,
            crate::module::RecoveryEntry {
                replacing: array(&e.new_original_array),
                module,
            },
        );
    }
    Ok(())
}

/// What the text parser guarantees by construction and a proto can break: at least one
/// computation, names the text can hold, and a call graph without cycles. A module that
/// passes prints to text that parses again.
fn check_text_expressible(m: &Module) -> Result<(), ProtoError> {
    const BAD_NAME: &str =
        "not a valid name (the text allows one or more letters, digits, '_', '.' or '-')";
    let module_place = format!("module `{}`", m.name.escape_debug());
    if !crate::text::is_valid_name(&m.name) {
        return Err(err(module_place, format!("the module name is {BAD_NAME}")));
    }
    if m.computations().is_empty() {
        return Err(err(module_place, "the module has no computations"));
    }
    for &c in m.computations() {
        let comp = m.comp(c);
        let place = format!("computation `{}`", comp.name.escape_debug());
        if !crate::text::is_valid_name(&comp.name) {
            return Err(err(place, format!("the computation name is {BAD_NAME}")));
        }
        for &i in comp.instructions() {
            let name = &m.instr(i).name;
            if !crate::text::is_valid_name(name) {
                return Err(err(
                    format!("{place}: instruction %{}", name.escape_debug()),
                    format!("the instruction name is {BAD_NAME}"),
                ));
            }
        }
    }
    // Call cycles, depth first without recursion (chains can be thousands deep).
    let mut state = vec![0u8; m.comp_capacity()]; // 0 new, 1 on the path, 2 done
    for &root in m.computations() {
        if state[root.index()] != 0 {
            continue;
        }
        // (computation, its callees not yet visited)
        let mut stack: Vec<(CompId, Vec<(InstrId, CompId)>)> = vec![(root, callees(m, root))];
        state[root.index()] = 1;
        while let Some((c, pending)) = stack.last_mut() {
            let c = *c;
            match pending.pop() {
                Some((by, callee)) => match state[callee.index()] {
                    0 => {
                        state[callee.index()] = 1;
                        stack.push((callee, callees(m, callee)));
                    }
                    1 => {
                        return Err(err(
                            format!("instruction %{}", m.instr(by).name),
                            format!(
                                "calls computation `{}`, which is already being called on this \
                                 path: the call graph has a cycle",
                                m.comp(callee).name
                            ),
                        ))
                    }
                    _ => {}
                },
                None => {
                    state[c.index()] = 2;
                    stack.pop();
                }
            }
        }
    }
    Ok(())
}

/// Every (caller instruction, callee) of a computation, last first.
fn callees(m: &Module, c: CompId) -> Vec<(InstrId, CompId)> {
    let mut out: Vec<(InstrId, CompId)> = m
        .comp(c)
        .instructions()
        .iter()
        .flat_map(|&i| m.instr(i).called.iter().map(move |&cc| (i, cc)))
        .collect();
    out.reverse();
    out
}

pub(crate) fn program_shape_from_proto(p: &pb::ProgramShapeProto) -> Result<ProgramShape, String> {
    Ok(ProgramShape {
        parameters: p
            .parameters
            .iter()
            .map(shape_from_proto)
            .collect::<Result<_, _>>()?,
        result: shape_from_proto(
            p.result
                .as_ref()
                .ok_or_else(|| "program shape without a result".to_string())?,
        )?,
    })
}

fn import_computation(
    m: &mut Module,
    c: &pb::HloComputationProto,
    comp_of: &HashMap<i64, CompId>,
    instr_of: &mut HashMap<i64, InstrId>,
    buffer_bytes: &mut i64,
) -> Result<(), ProtoError> {
    let cid = comp_of[&c.id];
    let cplace = format!("computation `{}` (id {})", c.name, c.id);
    // Proto index of each instruction id of this computation.
    let mut local: HashMap<i64, usize> = HashMap::new();
    for (k, ip) in c.instructions.iter().enumerate() {
        if local.insert(ip.id, k).is_some() || instr_of.contains_key(&ip.id) {
            return Err(err(at_instr(ip), "instruction id used twice"));
        }
    }
    // Add in an operands-first order (protos from XLA already are), then restore the proto's.
    let n = c.instructions.len();
    let mut state = vec![0u8; n]; // 0 new, 1 on stack, 2 added
    let mut added: Vec<InstrId> = vec![InstrId::new(0); n];
    for start in 0..n {
        if state[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = 1;
        while let Some(&mut (k, ref mut next)) = stack.last_mut() {
            let ip = &c.instructions[k];
            if *next < ip.operand_ids.len() {
                let oid = ip.operand_ids[*next];
                *next += 1;
                let Some(&o) = local.get(&oid) else {
                    let other = if instr_of.contains_key(&oid) {
                        "belongs to another computation"
                    } else {
                        "does not exist"
                    };
                    return Err(err(at_instr(ip), format!("operand id {oid} {other}")));
                };
                match state[o] {
                    0 => {
                        state[o] = 1;
                        stack.push((o, 0));
                    }
                    1 => {
                        return Err(err(
                            at_instr(ip),
                            format!("operand %{} forms a cycle", c.instructions[o].name),
                        ))
                    }
                    _ => {}
                }
            } else {
                let instr =
                    instruction_from_proto(m, ip, &local, &added, comp_of, c.instructions.len())?;
                *buffer_bytes = instr
                    .shape
                    .checked_total_bytes()
                    .and_then(|b| b.checked_add(*buffer_bytes))
                    .filter(|&t| t <= MAX_MODULE_BUFFER_BYTES)
                    .ok_or_else(|| {
                        err(
                            at_instr(ip),
                            format!(
                                "the buffers of the module's instructions up to this one take \
                                 more than {MAX_MODULE_BUFFER_BYTES} bytes (the limit)"
                            ),
                        )
                    })?;
                let id = m
                    .add_instruction(cid, instr)
                    .map_err(|e| err(at_instr(ip), e.to_string()))?;
                added[k] = id;
                instr_of.insert(ip.id, id);
                state[k] = 2;
                stack.pop();
            }
        }
    }
    m.set_instruction_order(cid, added.clone());
    // Users in the proto's order, as if the instructions had been added in it.
    for &id in &added {
        m.instr_mut(id).users.clear();
    }
    for &id in &added {
        let ops: Vec<InstrId> = m.instr(id).operands().to_vec();
        for (k, &o) in ops.iter().enumerate() {
            if !ops[..k].contains(&o) {
                m.instr_mut(o).users.push(id);
            }
        }
    }
    for (k, ip) in c.instructions.iter().enumerate() {
        for pid in &ip.control_predecessor_ids {
            let &pk = local.get(pid).ok_or_else(|| {
                err(
                    at_instr(ip),
                    format!("control predecessor id {pid} is not in the computation"),
                )
            })?;
            m.add_control_dependency(added[pk], added[k]);
        }
    }
    if n > 0 {
        let &rk = local.get(&c.root_id).ok_or_else(|| {
            err(
                &cplace,
                format!(
                    "root id {} is not an instruction of the computation",
                    c.root_id
                ),
            )
        })?;
        m.set_root(cid, added[rk]);
    }
    Ok(())
}

fn instruction_from_proto(
    m: &Module,
    p: &pb::HloInstructionProto,
    local: &HashMap<i64, usize>,
    added: &[InstrId],
    comp_of: &HashMap<i64, CompId>,
    comp_size: usize,
) -> Result<Instruction, ProtoError> {
    let place = at_instr(p);
    let e = |msg: String| err(&place, msg);
    let opcode =
        Opcode::from_name(&p.opcode).ok_or_else(|| e(format!("unknown opcode `{}`", p.opcode)))?;
    let shape =
        shape_from_proto(p.shape.as_ref().ok_or_else(|| e("no shape".into()))?).map_err(&e)?;
    let operands: Vec<InstrId> = p.operand_ids.iter().map(|o| added[local[o]]).collect();
    // recv-done's shape is its recv's, whatever the proto says, as XLA reads it.
    let shape = match opcode {
        Opcode::RecvDone => m.recv_done_shape(&operands).unwrap_or(shape),
        _ => shape,
    };
    let mut called_ids = p.called_computation_ids.clone();
    if opcode == Opcode::While && called_ids.len() == 2 {
        // XLA's proto lists a while's `[body, condition]`; the IR keeps `[condition, body]`.
        called_ids.swap(0, 1);
    }
    let called = called_ids
        .iter()
        .map(|c| {
            comp_of
                .get(c)
                .copied()
                .ok_or_else(|| e(format!("called computation id {c} does not exist")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // An async-update or async-done given no computation takes its operand's, as the text
    // parser does (the printer leaves `calls=` out, so a re-parse would add it).
    let called = if called.is_empty() && matches!(opcode, Opcode::AsyncUpdate | Opcode::AsyncDone) {
        m.async_computation_of_operand(&operands)
            .into_iter()
            .collect()
    } else {
        called
    };
    let mut i = Instruction::new(p.name.clone(), opcode, shape)
        .with_operands(&operands)
        .with_called(&called);
    let presence = Presence { op: opcode, p };
    i.metadata = presence.has("metadata").then(|| {
        p.metadata
            .as_ref()
            .map(metadata_from_proto)
            .unwrap_or_default()
    });
    i.sharding = p
        .sharding
        .as_deref()
        .map(sharding_from_proto)
        .transpose()
        .map_err(|s| e(format!("sharding: {s}")))?;
    if let Some(f) = &p.frontend_attributes {
        i.frontend_attributes = frontend_attributes_from_proto(f);
    }
    if presence.has("backend_config") {
        i.backend_config = Some(
            String::from_utf8(p.backend_config.clone())
                .map_err(|_| e("backend_config is not UTF-8".into()))?,
        );
    }
    i.predicated_conditional = predicated_by_type(m, opcode, &operands);
    if let Some(ext) = &p.tessera {
        if let Some(f) = ext
            .present
            .iter()
            .chain(&ext.absent)
            .find(|f| !OPTIONAL_FIELDS.contains(&f.as_str()))
        {
            return Err(e(format!(
                "unknown Tessera attribute `{f}` in the extension field"
            )));
        }
        if let Some(flag) = ext.predicated_conditional {
            i.predicated_conditional = flag;
        }
    }
    let operand_type = operands.first().map(|&o| m.instr(o).shape.element_type());
    let shape = i.shape.clone();
    attrs_from_proto(&mut i.attrs, opcode, &shape, operand_type, p, comp_size).map_err(e)?;
    // As the text parser does: an outfeed without its shape sends its operand's.
    if opcode == Opcode::Outfeed && i.attrs.outfeed_shape.is_none() {
        if let Some(&o) = operands.first() {
            i.attrs.outfeed_shape = Some(Box::new(m.instr(o).shape.clone()));
        }
    }
    if let Some(field) = attr_table::misplaced_field(&i) {
        return Err(e(format!(
            "the field `{field}` is set, but a {opcode} cannot carry it"
        )));
    }
    // The import writes every field; keep the rare groups unallocated when they stayed empty.
    i.attrs.rare.shrink();
    i.rare.shrink();
    Ok(i)
}

/// A conditional is written with true/false computations when its predicate is a `pred`.
pub(crate) fn predicated_by_type(m: &Module, op: Opcode, operands: &[InstrId]) -> bool {
    op == Opcode::Conditional
        && operands
            .first()
            .is_some_and(|&o| m.instr(o).shape.element_type() == ElementType::Pred)
}

fn attrs_from_proto(
    a: &mut Attrs,
    op: Opcode,
    shape: &Shape,
    operand_type: Option<ElementType>,
    p: &pb::HloInstructionProto,
    comp_size: usize,
) -> Result<(), String> {
    let presence = Presence { op, p };
    let has = |f: &str| presence.has(f);
    let ext = p.tessera.as_ref();
    if op == Opcode::Parameter && !(0..comp_size as i64).contains(&p.parameter_number) {
        return Err(format!(
            "parameter number {} is out of range for a computation of {comp_size} instructions",
            p.parameter_number
        ));
    }
    a.parameter_number = p.parameter_number;
    a.parameter_replication = p
        .parameter_replication
        .as_ref()
        .map(|r| r.replicated_at_leaf_buffers.clone());
    if let Some(l) = &p.literal {
        let lit = literal_from_proto(l).map_err(|s| format!("literal: {s}"))?;
        a.literal = Some(Box::new(lit));
    } else if op == Opcode::Constant {
        return Err("constant without a literal".into());
    }
    match op {
        Opcode::Iota => {
            a.iota_dimension = *p
                .dimensions
                .first()
                .ok_or_else(|| "iota without an iota dimension".to_string())?;
        }
        _ if has("dimensions") => a.dimensions = Some(p.dimensions.clone()),
        _ => {}
    }
    if has("slice") {
        a.slice = Some(
            p.slice_dimensions
                .iter()
                .map(|s| SliceDim {
                    start: s.start,
                    limit: s.limit,
                    stride: s.stride,
                })
                .collect(),
        );
    }
    a.padding = p.padding_config.as_ref().map(|pc| {
        pc.dimensions
            .iter()
            .map(|d| PaddingDim {
                low: d.edge_padding_low,
                high: d.edge_padding_high,
                interior: d.interior_padding,
            })
            .collect()
    });
    if !p.comparison_direction.is_empty() {
        let direction = ComparisonDirection::from_name(&p.comparison_direction)
            .ok_or_else(|| format!("unknown comparison direction `{}`", p.comparison_direction))?;
        let float_operands = operand_type.is_some_and(|t| t.is_float() || t.is_complex());
        let ty = if p.comparison_type.is_empty() {
            // Recent XLA writes only the order; only a total order on floats is not the default.
            match p.comparison_order.as_str() {
                "" | "PARTIAL" => None,
                "TOTAL" if float_operands => Some(ComparisonType::TotalOrder),
                "TOTAL" => None,
                other => return Err(format!("unknown comparison order `{other}`")),
            }
        } else {
            Some(
                ComparisonType::from_name(&p.comparison_type)
                    .ok_or_else(|| format!("unknown comparison type `{}`", p.comparison_type))?,
            )
        };
        a.comparison = Some(Comparison { direction, ty });
    } else if op == Opcode::Compare {
        return Err("compare without a comparison direction".into());
    }
    window_and_dims_from_proto(a, op, p)?;
    a.channel_id = has("channel_id").then_some(p.channel_id);
    a.replica_groups = replica_groups_from_proto(p)?.map(Box::new);
    a.use_global_device_ids = p.use_global_device_ids;
    // On a custom-call, XLA's constrain_layout means "operand layouts given" (below).
    a.constrain_layout = p.constrain_layout && op != Opcode::CustomCall;
    if has("source_target_pairs") {
        a.source_target_pairs = Some(
            p.source_target_pairs
                .iter()
                .map(|s| (s.source, s.target))
                .collect(),
        );
    }
    if has("custom_call") {
        a.custom_call = Some(Box::new(CustomCallAttrs {
            target: p.custom_call_target.clone(),
            api_version: match p.custom_call_api_version {
                0 => CustomCallApiVersion::Unspecified,
                1 => CustomCallApiVersion::Original,
                2 => CustomCallApiVersion::StatusReturning,
                3 => CustomCallApiVersion::StatusReturningUnified,
                4 => CustomCallApiVersion::TypedFfi,
                v => return Err(format!("unknown custom-call api version {v}")),
            },
            has_side_effect: p.custom_call_has_side_effect,
            operand_layout_constraints: if p.constrain_layout {
                Some(
                    p.operand_shapes_with_layout
                        .iter()
                        .map(shape_from_proto)
                        .collect::<Result<_, _>>()?,
                )
            } else {
                None
            },
            output_to_operand_aliasing: p
                .output_operand_aliasing
                .iter()
                .map(|o| OutputOperandAlias {
                    output_index: o.output_shape_index.clone(),
                    operand: o.operand_index,
                    operand_index: o.operand_shape_index.clone(),
                })
                .collect(),
            schedule: CustomCallSchedule::from_number(p.custom_call_schedule).ok_or_else(|| {
                format!("unknown custom-call schedule {}", p.custom_call_schedule)
            })?,
            padding_type: p.padding_type,
        }));
    }
    if !p.fusion_kind.is_empty() {
        a.fusion_kind = Some(
            FusionKind::from_name(&p.fusion_kind)
                .ok_or_else(|| format!("unknown fusion kind `{}`", p.fusion_kind))?,
        );
    } else if op == Opcode::Fusion {
        return Err("fusion without a fusion kind".into());
    }
    if has("outfeed_shape") {
        a.outfeed_shape = p
            .outfeed_shape
            .as_deref()
            .map(shape_from_proto)
            .transpose()?
            .map(Box::new);
    }
    op_options_from_proto(a, &presence, p)?;
    if has("domain") {
        a.domain = Some(Box::new(DomainAttrs {
            kind: ext
                .and_then(|e| e.domain_kind.clone())
                .unwrap_or_else(|| "sharding".to_string()),
            entry: p
                .domain_exit_sharding
                .as_deref()
                .map(sharding_from_proto)
                .transpose()?,
            exit: p
                .domain_entry_sharding
                .as_deref()
                .map(sharding_from_proto)
                .transpose()?,
        }));
    }
    a.is_composite = p.is_composite;
    a.result_accuracy = match &p.result_accuracy {
        None => None,
        Some(pb::ResultAccuracy {
            tolerance: Some(t), ..
        }) => Some(ResultAccuracy::Tolerance {
            atol: t.atol,
            rtol: t.rtol,
            ulps: t.ulps,
        }),
        Some(r) => Some(ResultAccuracy::Mode(r.mode.unwrap_or(0))),
    };
    if let Some(text) = ext.and_then(|e| e.statistics_viz.clone()) {
        a.statistics_viz = Some(text);
    } else if let Some(s) = &p.statistics_viz {
        if s.stat_index_to_visualize != 0 || !s.statistics.is_empty() {
            a.statistics_viz = Some(statistics_from_proto(s));
        }
    }
    a.original_value = ext.and_then(|e| e.original_value.clone()).or_else(|| {
        p.original_value
            .as_ref()
            .filter(|o| !o.elements.is_empty())
            .map(|o| original_value_from_proto(o, shape))
    });
    if let Some(e) = ext {
        a.custom_call_uses_to_apply = e.custom_call_uses_to_apply;
        a.inferred_dimension = e.inferred_dimension;
        a.permute_slice_sizes = e.has_permute_slice_sizes.then(|| {
            e.permute_slice_sizes
                .iter()
                .map(|l| l.values.clone())
                .collect()
        });
        a.collective_mode = e.collective_mode.clone();
        a.conv_kind = e.conv_kind.clone();
    }
    if op != Opcode::CustomCall {
        a.output_to_operand_aliasing = p
            .output_operand_aliasing
            .iter()
            .map(|o| OutputOperandAlias {
                output_index: o.output_shape_index.clone(),
                operand: o.operand_index,
                operand_index: o.operand_shape_index.clone(),
            })
            .collect();
    }
    if ext.is_some_and(|e| e.custom_call_constrain_layout) {
        a.constrain_layout = true;
    }
    if has("scan") {
        a.scan = Some(Box::new(ScanAttrs {
            dimension: p.dimensions.first().copied().unwrap_or(0),
            is_reverse: p.is_reverse,
            num_carries: p.num_carries,
            is_associative: match p.is_associative {
                0 => None,
                1 => Some(true),
                2 => Some(false),
                v => return Err(format!("unknown is_associative value {v}")),
            },
        }));
    }
    plain_attrs_from_proto(a, &presence, p)
}

/// `attrs_from_proto`: the window, the convolution, dot, gather and scatter dimension numbers,
/// and the precision.
fn window_and_dims_from_proto(
    a: &mut Attrs,
    op: Opcode,
    p: &pb::HloInstructionProto,
) -> Result<(), String> {
    // A convolution's empty window is how the proto says "none" (see the export).
    let empty_conv_window =
        op == Opcode::Convolution && p.window.as_ref().is_some_and(|w| w.dimensions.is_empty());
    a.window = p.window.as_ref().filter(|_| !empty_conv_window).map(|w| {
        Box::new(Window {
            dims: w
                .dimensions
                .iter()
                .map(|d| WindowDim {
                    size: d.size,
                    stride: d.stride,
                    padding_low: d.padding_low,
                    padding_high: d.padding_high,
                    window_dilation: d.window_dilation,
                    base_dilation: d.base_dilation,
                    window_reversal: d.window_reversal,
                })
                .collect(),
        })
    });
    a.conv_dims = p.convolution_dimension_numbers.as_ref().map(|c| {
        Box::new(ConvDimensionNumbers {
            input_batch_dimension: c.input_batch_dimension,
            input_feature_dimension: c.input_feature_dimension,
            input_spatial_dimensions: c.input_spatial_dimensions.clone(),
            kernel_input_feature_dimension: c.kernel_input_feature_dimension,
            kernel_output_feature_dimension: c.kernel_output_feature_dimension,
            kernel_spatial_dimensions: c.kernel_spatial_dimensions.clone(),
            output_batch_dimension: c.output_batch_dimension,
            output_feature_dimension: c.output_feature_dimension,
            output_spatial_dimensions: c.output_spatial_dimensions.clone(),
        })
    });
    // Absent means 1 (proto3 default 0).
    a.feature_group_count = if p.feature_group_count == 0 {
        1
    } else {
        p.feature_group_count
    };
    a.batch_group_count = if p.batch_group_count == 0 {
        1
    } else {
        p.batch_group_count
    };
    let dot = |d: &pb::DotDimensionNumbers| {
        Box::new(attr_table::dims_from_proto(attr_table::DOT_DIMS, d))
    };
    a.dot_dims = p.dot_dimension_numbers.as_ref().map(dot);
    if let Some(r) = &p.ragged_dot_dimension_numbers {
        if a.dot_dims.is_none() {
            a.dot_dims = r.dot_dimension_numbers.as_ref().map(dot);
        }
        a.ragged_dot_dims = Some(Box::new(attr_table::dims_from_proto(
            attr_table::RAGGED_DOT_DIMS,
            r,
        )));
    }
    a.sparsity = p
        .dot_sparsity
        .iter()
        .map(|s| SparsityDescriptor {
            index: s.index,
            dimension: s.dimension as i64,
            n: s.n,
            m: s.m,
        })
        .collect();
    if let Some(pc) = &p.precision_config {
        a.precision = Some(Box::new(PrecisionConfig {
            operand_precision: pc
                .operand_precision
                .iter()
                .map(|&v| {
                    Precision::from_number(v)
                        .ok_or_else(|| format!("unknown operand precision {v}"))
                })
                .collect::<Result<_, _>>()?,
            algorithm: DOT_ALGORITHMS
                .iter()
                .any(|&(_, v)| v == pc.algorithm)
                .then_some(pc.algorithm)
                .ok_or_else(|| format!("unknown dot algorithm {}", pc.algorithm))?,
        }));
    }
    a.gather_dims = p
        .gather_dimension_numbers
        .as_deref()
        .map(|g| Box::new(attr_table::dims_from_proto(attr_table::GATHER_DIMS, g)));
    a.scatter_dims = p
        .scatter_dimension_numbers
        .as_deref()
        .map(|s| Box::new(attr_table::dims_from_proto(attr_table::SCATTER_DIMS, s)));
    Ok(())
}

/// `attrs_from_proto`: rng, sort, top-k, triangular-solve, cholesky and fft options.
fn op_options_from_proto(
    a: &mut Attrs,
    presence: &Presence,
    p: &pb::HloInstructionProto,
) -> Result<(), String> {
    let has = |f: &str| presence.has(f);
    a.distribution = match p.distribution {
        0 => None,
        1 => Some(RandomDistribution::Uniform),
        2 => Some(RandomDistribution::Normal),
        v => return Err(format!("unknown random distribution {v}")),
    };
    if has("rng_algorithm") {
        a.rng_algorithm = Some(match p.rng_algorithm {
            0 => RandomAlgorithm::Default,
            1 => RandomAlgorithm::ThreeFry,
            2 => RandomAlgorithm::Philox,
            v => return Err(format!("unknown rng algorithm {v}")),
        });
    }
    a.is_stable = p.is_stable;
    a.k = p.k;
    a.largest = p.largest;
    if let Some(t) = &p.triangular_solve_options {
        a.triangular_solve = Some(TriangularSolveOptions {
            left_side: t.left_side,
            lower: t.lower,
            unit_diagonal: t.unit_diagonal,
            transpose_a: match t.transpose_a {
                1 => TransposeKind::NoTranspose,
                2 => TransposeKind::Transpose,
                3 => TransposeKind::Adjoint,
                v => return Err(format!("unknown triangular-solve transpose {v}")),
            },
        });
    }
    a.lower = p.cholesky_options.as_ref().is_some_and(|c| c.lower);
    if has("fft_type") {
        a.fft_type = Some(match p.fft_type {
            0 => FftType::Fft,
            1 => FftType::Ifft,
            2 => FftType::Rfft,
            3 => FftType::Irfft,
            v => return Err(format!("unknown fft type {v}")),
        });
    }
    Ok(())
}

/// Reads the plain attributes of the table (`attr_table`); an optional one only when given.
fn plain_attrs_from_proto(
    a: &mut Attrs,
    presence: &Presence,
    p: &pb::HloInstructionProto,
) -> Result<(), String> {
    for row in attr_table::plain_rows() {
        let Codec::Plain {
            presence: given,
            set,
            get_proto,
            ..
        } = row.codec
        else {
            continue;
        };
        if given.is_some_and(|f| !presence.has(f)) {
            continue;
        }
        set(a, get_proto(p)).map_err(|e| format!("{} {e}", row.proto))?;
    }
    Ok(())
}

pub(crate) fn statistics_from_proto(s: &pb::StatisticsViz) -> String {
    let mut out = format!("{{visualizing_index={}", s.stat_index_to_visualize);
    for st in &s.statistics {
        out.push(',');
        out.push_str(&st.stat_name);
        if !(st.stat_val == 0.0 && st.stat_name.contains('=')) {
            out.push('=');
            out.push_str(&st.stat_val.to_string());
        }
    }
    out.push('}');
    out
}
