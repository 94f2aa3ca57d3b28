//! Module -> `xla.HloModuleProto`.

use super::import::{
    default_present_of, predicated_by_type, statistics_from_proto, OptField, OPT_FIELDS,
};
use super::messages as pb;
use super::values::*;
use crate::analysis::order::PostOrders;
use crate::attr_table::{self, Codec, Value};
use crate::attrs::*;
use crate::instruction::{CompId, InstrId, Instruction};
use crate::module::{AliasKind, Module, ProgramShape};
use crate::opcode::Opcode;

/// Proto ids of the exported computations and instructions: dense tables indexed by the IR ids
/// (-1 for an id that is not exported).
struct Ids {
    comp: Vec<i64>,
    instr: Vec<i64>,
}

impl Ids {
    fn comp(&self, c: CompId) -> Option<i64> {
        self.comp.get(c.index()).copied().filter(|&v| v >= 0)
    }

    fn instr(&self, i: InstrId) -> Option<i64> {
        self.instr.get(i.index()).copied().filter(|&v| v >= 0)
    }
}

/// Computations in an order where every callee comes before its callers: a depth-first post-order
/// over the call graph, starting from the module's stored order, so a stored order that already
/// has callees first is kept as it is.
pub(crate) fn callee_first_order(m: &Module) -> Vec<CompId> {
    // Visited (on the stack or done), by computation index.
    let mut seen = vec![false; m.comp_capacity()];
    // Scratch for `callees`: which computations the current list already holds.
    let mut listed = vec![false; m.comp_capacity()];
    let mut out = Vec::with_capacity(m.computations().len());
    for &root in m.computations() {
        if seen[root.index()] {
            continue;
        }
        // Iterative DFS: (computation, callees still to visit).
        let mut stack: Vec<(CompId, Vec<CompId>)> = vec![(root, callees(m, root, &mut listed))];
        seen[root.index()] = true;
        while let Some((c, todo)) = stack.last_mut() {
            if let Some(next) = todo.pop() {
                if m.try_comp(next).is_some() && !seen[next.index()] {
                    seen[next.index()] = true;
                    let cs = callees(m, next, &mut listed);
                    stack.push((next, cs));
                }
            } else {
                out.push(*c);
                stack.pop();
            }
        }
    }
    out
}

/// Called computations of a computation's instructions, reversed so that popping from the end
/// visits them in instruction order.
/// `listed` is all false on entry and on return (indexed by computation).
fn callees(m: &Module, c: CompId, listed: &mut [bool]) -> Vec<CompId> {
    let mut v: Vec<CompId> = Vec::new();
    for &i in m.comp(c).instructions() {
        for &k in &m.instr(i).called {
            // A dangling callee (no such computation) may lie outside the table.
            match listed.get_mut(k.index()) {
                Some(l) if !*l => {
                    *l = true;
                    v.push(k);
                }
                Some(_) => {}
                None if !v.contains(&k) => v.push(k),
                None => {}
            }
        }
    }
    for k in &v {
        if let Some(l) = listed.get_mut(k.index()) {
            *l = false;
        }
    }
    v.reverse();
    v
}

pub(crate) fn program_shape_to_proto(
    ps: &ProgramShape,
    names: Vec<String>,
) -> pb::ProgramShapeProto {
    pb::ProgramShapeProto {
        parameters: ps.parameters.iter().map(shape_to_proto).collect(),
        result: Some(shape_to_proto(&ps.result)),
        parameter_names: names,
    }
}

fn parameter_names(m: &Module, c: CompId) -> Vec<String> {
    let comp = m.comp(c);
    (0..comp.num_parameters())
        .map(|n| {
            comp.parameter(n)
                .map_or(String::new(), |p| m.instr(p).name.clone())
        })
        .collect()
}

pub(crate) fn module_to_proto(m: &Module) -> pb::HloModuleProto {
    let (mut p, ids, instr_orders) = module_to_proto_parts(m);
    for (c, io) in p.computations.iter_mut().zip(&instr_orders) {
        c.instructions = io.iter().map(|&i| instr_to_proto(m, i, &ids)).collect();
    }
    p
}

/// The module's proto without the computations' instructions, the ids, and each computation's
/// instructions in proto order.
fn module_to_proto_parts(m: &Module) -> (pb::HloModuleProto, Ids, Vec<Vec<InstrId>>) {
    let order = callee_first_order(m);
    let mut ids = Ids {
        comp: vec![-1; m.comp_capacity()],
        instr: vec![-1; m.instr_capacity()],
    };
    let mut walker = PostOrders::new(m);
    let mut instr_orders = Vec::with_capacity(order.len());
    for (ci, &c) in order.iter().enumerate() {
        ids.comp[c.index()] = ci as i64;
        let mut io = Vec::new();
        walker.def_before_use_into(m, c, &mut io);
        for (k, &i) in io.iter().enumerate() {
            ids.instr[i.index()] = ((ci as i64) << 32) | k as i64;
        }
        instr_orders.push(io);
    }
    let mut fusion_called = vec![false; m.comp_capacity()];
    for &c in &order {
        for &i in m.comp(c).instructions() {
            let instr = m.instr(i);
            if instr.opcode == Opcode::Fusion {
                for k in &instr.called {
                    if let Some(f) = fusion_called.get_mut(k.index()) {
                        *f = true;
                    }
                }
            }
        }
    }

    let computations = order
        .iter()
        .zip(&instr_orders)
        .map(|(&c, io)| {
            let comp = m.comp(c);
            pb::HloComputationProto {
                name: comp.name.clone(),
                instructions: Vec::with_capacity(io.len()),
                program_shape: Some(program_shape_to_proto(
                    &m.program_shape(c),
                    parameter_names(m, c),
                )),
                id: ids.comp(c).unwrap_or(-1),
                root_id: comp.root().and_then(|r| ids.instr(r)).unwrap_or(-1),
                is_fusion_computation: fusion_called[c.index()],
                execution_thread: comp.execution_thread.clone().unwrap_or_default(),
            }
        })
        .collect();

    let mut p = pb::HloModuleProto {
        name: m.name.clone(),
        computations,
        ..Default::default()
    };
    if let Some(e) = m.entry() {
        p.entry_computation_name = m.comp(e).name.clone();
        p.entry_computation_id = ids.comp(e).unwrap_or(-1);
        let ps = m
            .config
            .entry_computation_layout
            .clone()
            .unwrap_or_else(|| m.program_shape(e));
        p.host_program_shape = Some(program_shape_to_proto(&ps, parameter_names(m, e)));
    }
    let cfg = &m.config;
    p.tessera = Some(pb::TesseraModuleExt {
        no_entry_computation_layout: cfg.entry_computation_layout.is_none(),
        replica_count: cfg.replica_count,
        num_partitions: cfg.num_partitions,
        use_spmd_partitioning: cfg.use_spmd_partitioning,
        alias_passthrough_params: cfg.alias_passthrough_params,
        allow_spmd_sharding_propagation_to_parameters: cfg
            .allow_spmd_sharding_propagation_to_parameters
            .clone()
            .unwrap_or_default(),
        has_allow_spmd_sharding_propagation_to_parameters: cfg
            .allow_spmd_sharding_propagation_to_parameters
            .is_some(),
        allow_spmd_sharding_propagation_to_output: cfg
            .allow_spmd_sharding_propagation_to_output
            .clone()
            .unwrap_or_default(),
        has_allow_spmd_sharding_propagation_to_output: cfg
            .allow_spmd_sharding_propagation_to_output
            .is_some(),
        has_spmd_parameters_shardings: cfg.spmd_parameters_shardings.is_some(),
    });
    if !cfg.input_output_alias.is_empty() {
        p.input_output_alias = Some(pb::HloInputOutputAliasProto {
            entries: cfg
                .input_output_alias
                .iter()
                .map(|a| pb::AliasEntryProto {
                    output_shape_index: a.output_index.clone(),
                    parameter_number: a.parameter_number,
                    parameter_shape_index: a.parameter_index.clone(),
                    kind: match a.kind {
                        AliasKind::MayAlias => 1,
                        AliasKind::MustAlias => 2,
                    },
                })
                .collect(),
        });
    }
    if !cfg.buffer_donor.is_empty() {
        p.buffer_donor = Some(pb::HloBufferDonorProto {
            entries: cfg
                .buffer_donor
                .iter()
                .map(|d| pb::BufferDonorEntryProto {
                    parameter_number: d.parameter_number,
                    parameter_shape_index: d.parameter_index.clone(),
                })
                .collect(),
        });
    }
    p.spmd_output_sharding = cfg.spmd_output_sharding.as_ref().map(sharding_to_proto);
    p.spmd_parameters_shardings = cfg
        .spmd_parameters_shardings
        .iter()
        .flatten()
        .map(sharding_to_proto)
        .collect();
    if !cfg.frontend_attributes.is_empty() {
        p.frontend_attributes = Some(frontend_attributes_to_proto(&cfg.frontend_attributes));
    }
    if !cfg.origin_recovery_table.is_empty() {
        let array = |a: &crate::module::OriginalArray| pb::OriginalArrayProto {
            instruction_name: a.instruction_name.clone(),
            shape_index: a.shape_index.clone(),
        };
        p.original_value_recovery_table = Some(pb::OriginalValueRecoveryTableProto {
            entries: cfg
                .origin_recovery_table
                .iter()
                .map(|(old, e)| pb::RecoveryTableEntryProto {
                    old_original_array: Some(array(old)),
                    new_original_array: Some(array(&e.replacing)),
                    recovery_module: e.module.as_ref().map(|rm| Box::new(module_to_proto(rm))),
                })
                .collect(),
        });
    }
    p.debug_attributes = cfg
        .debug_attributes
        .iter()
        .map(|(a, list)| pb::DebugAttributeTableEntryProto {
            original_array: Some(pb::OriginalArrayProto {
                instruction_name: a.instruction_name.clone(),
                shape_index: a.shape_index.clone(),
            }),
            debug_attributes: list
                .iter()
                .map(|d| pb::DebugAttributesProto {
                    log_mode: match d.log_mode {
                        crate::module::DebugLogMode::None => 0,
                        crate::module::DebugLogMode::Default => 1,
                        crate::module::DebugLogMode::FusionDebugger => 2,
                    },
                    callback_id: d.callback_id,
                    op_id: d.op_id,
                    partitioned: d.partitioned,
                    ..Default::default()
                })
                .collect(),
        })
        .collect();
    if let Some(s) = &m.schedule {
        p.schedule = Some(pb::HloScheduleProto {
            sequences: s
                .sequences
                .iter()
                .filter_map(|(c, seq)| {
                    let cid = ids.comp(*c)?;
                    Some((
                        cid,
                        pb::InstructionSequence {
                            instruction_ids: seq.iter().filter_map(|&i| ids.instr(i)).collect(),
                        },
                    ))
                })
                .collect(),
        });
    }
    if !m.stack_frames.is_empty() {
        let s = &m.stack_frames;
        p.stack_frame_index = Some(pb::StackFrameIndexProto {
            file_names: s.file_names.clone(),
            function_names: s.function_names.clone(),
            file_locations: s
                .file_locations
                .iter()
                .map(|l| pb::FileLocationProto {
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
                .map(|f| pb::StackFrameProto {
                    file_location_id: f.file_location_id,
                    // The text's parent_frame_id is the proto's plus one (1 = no parent),
                    // measured with XLA's parser.
                    parent_frame_id: (f.parent_frame_id - 1).max(0),
                })
                .collect(),
        });
    }
    (p, ids, instr_orders)
}

fn dot_dims_to_proto(d: &DotDimensionNumbers) -> pb::DotDimensionNumbers {
    attr_table::dims_to_proto(attr_table::DOT_DIMS, d)
}

fn instr_to_proto(m: &Module, id: InstrId, ids: &Ids) -> pb::HloInstructionProto {
    let i = m.instr(id);
    let a = &i.attrs;
    let mut p = pb::HloInstructionProto {
        name: i.name.clone(),
        opcode: i.opcode.name().to_string(),
        shape: Some(shape_to_proto(&i.shape)),
        id: ids.instr(id).unwrap_or(-1),
        // Operands and control predecessors are instructions of the same computation, all of
        // which have ids.
        operand_ids: i
            .operands()
            .iter()
            .map(|&o| ids.instr(o).unwrap_or(-1))
            .collect(),
        control_predecessor_ids: i
            .control_predecessors()
            .iter()
            .map(|&o| ids.instr(o).unwrap_or(-1))
            .collect(),
        called_computation_ids: proto_call_order(i.opcode, &i.called)
            .iter()
            .map(|&c| ids.comp(c).unwrap_or(-1))
            .collect(),
        metadata: i.metadata.as_ref().map(metadata_to_proto),
        sharding: i.sharding.as_ref().map(|s| Box::new(sharding_to_proto(s))),
        backend_config: i.backend_config.clone().unwrap_or_default().into_bytes(),
        parameter_number: a.parameter_number,
        feature_group_count: a.feature_group_count,
        batch_group_count: a.batch_group_count,
        channel_id: a.channel_id.unwrap_or(0),
        use_global_device_ids: a.use_global_device_ids,
        constrain_layout: a.constrain_layout,
        is_stable: a.is_stable,
        k: a.k,
        largest: a.largest,
        is_composite: a.is_composite,
        ..Default::default()
    };
    if !i.frontend_attributes.is_empty() {
        p.frontend_attributes = Some(frontend_attributes_to_proto(&i.frontend_attributes));
    }
    if let Some(r) = &a.parameter_replication {
        p.parameter_replication = Some(pb::ParameterReplication {
            replicated_at_leaf_buffers: r.clone(),
        });
    }
    p.literal = a.literal.as_deref().map(|l| Box::new(literal_to_proto(l)));
    match (i.opcode, &a.dimensions) {
        (_, Some(d)) => p.dimensions = d.clone(),
        (Opcode::Iota, None) => p.dimensions = vec![a.iota_dimension],
        (Opcode::Scan, None) => {
            if let Some(s) = &a.scan {
                p.dimensions = vec![s.dimension];
            }
        }
        _ => {}
    }
    if let Some(s) = &a.slice {
        p.slice_dimensions = s
            .iter()
            .map(|d| pb::SliceDimensions {
                start: d.start,
                limit: d.limit,
                stride: d.stride,
            })
            .collect();
    }
    // The table's dynamic_slice_sizes (below) takes the proto field when both are set.
    if let Some(ss) = &a.permute_slice_sizes {
        p.dynamic_slice_sizes = ss.iter().flatten().copied().collect();
    }
    plain_attrs_to_proto(a, &mut p);
    if let Some(pad) = &a.padding {
        p.padding_config = Some(pb::PaddingConfig {
            dimensions: pad
                .iter()
                .map(|d| pb::PaddingConfigDimension {
                    edge_padding_low: d.low,
                    edge_padding_high: d.high,
                    interior_padding: d.interior,
                })
                .collect(),
        });
    }
    if let Some(c) = &a.comparison {
        p.comparison_direction = c.direction.name().to_string();
        if let Some(t) = c.ty {
            p.comparison_type = t.name().to_string();
            p.comparison_order = match t {
                ComparisonType::Float => "PARTIAL",
                ComparisonType::TotalOrder | ComparisonType::Signed | ComparisonType::Unsigned => {
                    "TOTAL"
                }
            }
            .to_string();
        }
    }
    window_and_dims_to_proto(i, &mut p);
    if let Some(g) = &a.replica_groups {
        replica_groups_to_proto(g, &mut p);
    }
    if let Some(st) = &a.source_target_pairs {
        p.source_target_pairs = st
            .iter()
            .map(|&(source, target)| pb::SourceTarget { source, target })
            .collect();
    }
    if let Some(cc) = &a.custom_call {
        p.custom_call_target = cc.target.clone();
        p.custom_call_api_version = match cc.api_version {
            CustomCallApiVersion::Unspecified => 0,
            CustomCallApiVersion::Original => 1,
            CustomCallApiVersion::StatusReturning => 2,
            CustomCallApiVersion::StatusReturningUnified => 3,
            CustomCallApiVersion::TypedFfi => 4,
        };
        p.custom_call_has_side_effect = cc.has_side_effect;
        // A custom-call's constrain_layout means "operand layouts given" in XLA.
        p.constrain_layout = cc.operand_layout_constraints.is_some();
        if let Some(shapes) = &cc.operand_layout_constraints {
            p.operand_shapes_with_layout = shapes.iter().map(shape_to_proto).collect();
        }
        p.output_operand_aliasing = cc
            .output_to_operand_aliasing
            .iter()
            .map(|o| pb::OutputOperandAliasing {
                output_shape_index: o.output_index.clone(),
                operand_index: o.operand,
                operand_shape_index: o.operand_index.clone(),
            })
            .collect();
        p.custom_call_schedule = cc.schedule.number();
        p.padding_type = cc.padding_type;
    }
    if !a.output_to_operand_aliasing.is_empty() {
        p.output_operand_aliasing = a
            .output_to_operand_aliasing
            .iter()
            .map(|o| pb::OutputOperandAliasing {
                output_shape_index: o.output_index.clone(),
                operand_index: o.operand,
                operand_shape_index: o.operand_index.clone(),
            })
            .collect();
    }
    if let Some(k) = a.fusion_kind {
        p.fusion_kind = k.name().to_string();
    }
    // XLA reads an outfeed's shape from this field only; the text may leave it to the operand.
    p.outfeed_shape = match (&a.outfeed_shape, i.opcode) {
        (Some(s), _) => Some(Box::new(shape_to_proto(s))),
        (None, Opcode::Outfeed) => i
            .operands()
            .first()
            .map(|&o| Box::new(shape_to_proto(&m.instr(o).shape))),
        (None, _) => None,
    };
    if let Some(d) = a.distribution {
        p.distribution = match d {
            RandomDistribution::Uniform => 1,
            RandomDistribution::Normal => 2,
        };
    }
    if let Some(r) = a.rng_algorithm {
        p.rng_algorithm = match r {
            RandomAlgorithm::Default => 0,
            RandomAlgorithm::ThreeFry => 1,
            RandomAlgorithm::Philox => 2,
        };
    }
    if let Some(t) = &a.triangular_solve {
        p.triangular_solve_options = Some(pb::TriangularSolveOptions {
            left_side: t.left_side,
            lower: t.lower,
            unit_diagonal: t.unit_diagonal,
            transpose_a: match t.transpose_a {
                TransposeKind::NoTranspose => 1,
                TransposeKind::Transpose => 2,
                TransposeKind::Adjoint => 3,
            },
        });
    }
    if i.opcode == Opcode::Cholesky || a.lower {
        p.cholesky_options = Some(pb::CholeskyOptions { lower: a.lower });
    }
    if let Some(f) = a.fft_type {
        p.fft_type = match f {
            FftType::Fft => 0,
            FftType::Ifft => 1,
            FftType::Rfft => 2,
            FftType::Irfft => 3,
        };
    }
    if let Some(d) = &a.domain {
        // XLA's text `entry=` is the user side, which its proto calls the exit (measured).
        p.domain_exit_sharding = d.entry.as_ref().map(|s| Box::new(sharding_to_proto(s)));
        p.domain_entry_sharding = d.exit.as_ref().map(|s| Box::new(sharding_to_proto(s)));
    }
    if let Some(r) = &a.result_accuracy {
        p.result_accuracy = Some(match *r {
            ResultAccuracy::Mode(mode) => pb::ResultAccuracy {
                mode: Some(mode),
                tolerance: None,
            },
            ResultAccuracy::Tolerance { atol, rtol, ulps } => pb::ResultAccuracy {
                mode: None,
                tolerance: Some(pb::ResultAccuracyTolerance { atol, rtol, ulps }),
            },
        });
    }
    if let Some(s) = &a.statistics_viz {
        p.statistics_viz = Some(statistics_to_proto(s));
    }
    p.original_value = a
        .original_value
        .as_deref()
        .and_then(original_value_to_proto);
    if let Some(ext) = tessera_ext(m, i, &p) {
        p.tessera = Some(Box::new(ext));
    }
    if let Some(s) = &a.scan {
        p.is_reverse = s.is_reverse;
        p.num_carries = s.num_carries;
        p.is_associative = match s.is_associative {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        };
    }
    p
}

/// `instr_to_proto`: the window, the convolution, dot, gather and scatter dimension numbers,
/// and the precision.
fn window_and_dims_to_proto(i: &Instruction, p: &mut pb::HloInstructionProto) {
    let a = &i.attrs;
    if let Some(w) = &a.window {
        p.window = Some(pb::Window {
            dimensions: w
                .dims
                .iter()
                .map(|d| pb::WindowDimension {
                    size: d.size,
                    stride: d.stride,
                    padding_low: d.padding_low,
                    padding_high: d.padding_high,
                    window_dilation: d.window_dilation,
                    base_dilation: d.base_dilation,
                    window_reversal: d.window_reversal,
                })
                .collect(),
        });
    }
    // XLA's proto reader requires a convolution's window; without spatial dimensions it is
    // the empty one, which its printer (and ours) leaves out of the text.
    if p.window.is_none() && i.opcode() == Opcode::Convolution {
        p.window = Some(pb::Window::default());
    }
    if let Some(c) = &a.conv_dims {
        p.convolution_dimension_numbers = Some(Box::new(pb::ConvolutionDimensionNumbers {
            input_batch_dimension: c.input_batch_dimension,
            input_feature_dimension: c.input_feature_dimension,
            input_spatial_dimensions: c.input_spatial_dimensions.clone(),
            kernel_input_feature_dimension: c.kernel_input_feature_dimension,
            kernel_output_feature_dimension: c.kernel_output_feature_dimension,
            kernel_spatial_dimensions: c.kernel_spatial_dimensions.clone(),
            output_batch_dimension: c.output_batch_dimension,
            output_feature_dimension: c.output_feature_dimension,
            output_spatial_dimensions: c.output_spatial_dimensions.clone(),
        }));
    }
    match &a.ragged_dot_dims {
        // XLA keeps a ragged dot's dimension numbers inside the ragged ones.
        Some(r) => {
            let mut ragged: pb::RaggedDotDimensionNumbers =
                attr_table::dims_to_proto(attr_table::RAGGED_DOT_DIMS, r);
            ragged.dot_dimension_numbers = a.dot_dims.as_deref().map(dot_dims_to_proto);
            p.ragged_dot_dimension_numbers = Some(Box::new(ragged))
        }
        None => p.dot_dimension_numbers = a.dot_dims.as_deref().map(dot_dims_to_proto),
    }
    p.dot_sparsity = a
        .sparsity
        .iter()
        .map(|s| pb::SparsityDescriptor {
            r#type: 1,
            index: s.index,
            dimension: s.dimension as i32,
            n: s.n,
            m: s.m,
        })
        .collect();
    if let Some(pc) = &a.precision {
        p.precision_config = Some(pb::PrecisionConfig {
            operand_precision: pc.operand_precision.iter().map(|&x| x.number()).collect(),
            algorithm: pc.algorithm,
        });
    }
    p.gather_dimension_numbers = a
        .gather_dims
        .as_deref()
        .map(|g| Box::new(attr_table::dims_to_proto(attr_table::GATHER_DIMS, g)));
    p.scatter_dimension_numbers = a
        .scatter_dims
        .as_deref()
        .map(|s| Box::new(attr_table::dims_to_proto(attr_table::SCATTER_DIMS, s)));
}

/// Writes the plain attributes of the table (`attr_table`) that are given.
fn plain_attrs_to_proto(a: &Attrs, p: &mut pb::HloInstructionProto) {
    for row in attr_table::plain_rows() {
        let Codec::Plain { get, set_proto, .. } = row.codec else {
            continue;
        };
        let v = get(a);
        if v != Value::Absent {
            // Every plain attribute's type converts to its proto field's without loss (the
            // table's tests check each), so this cannot fail.
            let _ = set_proto(p, v);
        }
    }
}

/// Whether the IR instruction has an optional attribute (see `OPTIONAL_FIELDS`).
fn ir_present(field: OptField, i: &Instruction) -> bool {
    let a = &i.attrs;
    match field {
        OptField::Dimensions => a.dimensions.is_some(),
        OptField::Slice => a.slice.is_some(),
        OptField::DynamicSliceSizes => a.dynamic_slice_sizes.is_some(),
        OptField::GatherSliceSizes => a.gather_slice_sizes.is_some(),
        OptField::SourceTargetPairs => a.source_target_pairs.is_some(),
        OptField::FftLength => a.fft_length.is_some(),
        OptField::FftType => a.fft_type.is_some(),
        OptField::RngAlgorithm => a.rng_algorithm.is_some(),
        OptField::Metadata => i.metadata.is_some(),
        OptField::BackendConfig => i.backend_config.is_some(),
        OptField::InfeedConfig => a.infeed_config.is_some(),
        OptField::OutfeedConfig => a.outfeed_config.is_some(),
        OptField::AsyncExecutionThread => a.async_execution_thread.is_some(),
        OptField::ChannelId => a.channel_id.is_some(),
        OptField::Domain => a.domain.is_some(),
        OptField::CustomCall => a.custom_call.is_some(),
        OptField::Scan => a.scan.is_some(),
        OptField::OutfeedShape => a.outfeed_shape.is_some(),
    }
}

/// What the IR holds beyond what XLA's fields of `p` say, if anything.
fn tessera_ext(
    m: &Module,
    i: &Instruction,
    p: &pb::HloInstructionProto,
) -> Option<pb::TesseraInstructionExt> {
    let mut ext = pb::TesseraInstructionExt::default();
    for f in OPT_FIELDS {
        match (ir_present(f, i), default_present_of(f, i.opcode, p)) {
            (true, false) => ext.present.push(f.name().to_string()),
            (false, true) => ext.absent.push(f.name().to_string()),
            _ => {}
        }
    }
    let a = &i.attrs;
    if let Some(d) = a.domain.as_ref().filter(|d| d.kind != "sharding") {
        ext.domain_kind = Some(d.kind.clone());
    }
    if let Some(text) = &a.statistics_viz {
        if statistics_from_proto(&statistics_to_proto(text)) != *text {
            ext.statistics_viz = Some(text.clone());
        }
    }
    if let Some(text) = &a.original_value {
        if p.original_value
            .as_ref()
            .map(|o| original_value_from_proto(o, &i.shape))
            != Some(text.clone())
        {
            ext.original_value = Some(text.clone());
        }
    }
    ext.custom_call_constrain_layout = i.opcode == Opcode::CustomCall && a.constrain_layout;
    ext.custom_call_uses_to_apply = a.custom_call_uses_to_apply;
    ext.inferred_dimension = a.inferred_dimension;
    if let Some(ss) = &a.permute_slice_sizes {
        ext.has_permute_slice_sizes = true;
        ext.permute_slice_sizes = ss
            .iter()
            .map(|v| pb::Int64List { values: v.clone() })
            .collect();
    }
    ext.collective_mode = a.collective_mode.clone();
    ext.conv_kind = a.conv_kind.clone();
    if i.predicated_conditional != predicated_by_type(m, i.opcode, i.operands()) {
        ext.predicated_conditional = Some(i.predicated_conditional);
    }
    (ext != pb::TesseraInstructionExt::default()).then_some(ext)
}

/// `visualizing_index=1,stat-0=0.5` (the text form the IR keeps) -> `xla.StatisticsViz`.
/// Pieces that do not read as `name=number` keep their text as the name with value 0, so
/// nothing is silently dropped; import prints the same text back.
fn statistics_to_proto(s: &str) -> pb::StatisticsViz {
    let mut out = pb::StatisticsViz::default();
    let body = s.trim().trim_start_matches('{').trim_end_matches('}');
    for piece in body.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match piece.split_once('=') {
            Some(("visualizing_index", v)) if v.trim().parse::<i64>().is_ok() => {
                out.stat_index_to_visualize = v.trim().parse().unwrap();
            }
            Some((k, v)) if v.trim().parse::<f64>().is_ok() => out.statistics.push(pb::Statistic {
                stat_name: k.trim().to_string(),
                stat_val: v.trim().parse().unwrap(),
            }),
            _ => out.statistics.push(pb::Statistic {
                stat_name: piece.to_string(),
                stat_val: 0.0,
            }),
        }
    }
    out
}

/// Called computations in XLA's order: a while lists `[body, condition]` in the proto, where the
/// IR keeps `[condition, body]` (see `Instruction::called`).
fn proto_call_order(op: Opcode, called: &[CompId]) -> Vec<CompId> {
    let mut order = called.to_vec();
    if op == Opcode::While && order.len() == 2 {
        order.swap(0, 1);
    }
    order
}

/// Serializes a module: the same bytes as `module_to_proto(m).encode_to_vec()`, with less work.
/// prost writes a length prefix for every nested message by computing that message's whole
/// encoded length, so `encode_to_vec` walks an instruction's subtree once for the module's
/// length, once for its computation's and once for its own before writing it. Here the module
/// and computation levels are written by hand (fields in tag order, as prost writes them), each
/// instruction's length is computed once, and each instruction's proto is built, written and
/// dropped in turn, so the whole tree of instruction messages never exists at once.
pub(crate) fn module_to_bytes(m: &Module) -> Vec<u8> {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
    use prost::Message;

    let delimited = |tag: u32, len: usize| key_len(tag) + encoded_len_varint(len as u64) + len;
    let (mut p, ids, instr_orders) = module_to_proto_parts(m);
    // Each computation's bytes: field 1, the instructions (field 2), fields 4 and up.
    let comps: Vec<Vec<u8>> = std::mem::take(&mut p.computations)
        .into_iter()
        .zip(&instr_orders)
        .map(|(mut c, io)| {
            let head = pb::HloComputationProto {
                name: std::mem::take(&mut c.name),
                ..Default::default()
            };
            let mut buf = Vec::new();
            head.encode_raw(&mut buf);
            for &i in io {
                let ip = instr_to_proto(m, i, &ids);
                let l = ip.encoded_len();
                buf.reserve(delimited(2, l));
                encode_key(2, WireType::LengthDelimited, &mut buf);
                encode_varint(l as u64, &mut buf);
                ip.encode_raw(&mut buf);
            }
            c.encode_raw(&mut buf);
            buf
        })
        .collect();
    // Fields 1 and 2 come before the computations (3); the rest after.
    let head = pb::HloModuleProto {
        name: std::mem::take(&mut p.name),
        entry_computation_name: std::mem::take(&mut p.entry_computation_name),
        ..Default::default()
    };
    let total = head.encoded_len()
        + comps.iter().map(|c| delimited(3, c.len())).sum::<usize>()
        + p.encoded_len();
    let mut out = Vec::with_capacity(total);
    head.encode_raw(&mut out);
    for c in &comps {
        encode_key(3, WireType::LengthDelimited, &mut out);
        encode_varint(c.len() as u64, &mut out);
        out.extend_from_slice(c);
    }
    p.encode_raw(&mut out);
    debug_assert_eq!(out.len(), total);
    out
}
