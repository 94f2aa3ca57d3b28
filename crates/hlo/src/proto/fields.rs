//! Which opcode may carry which field of `HloInstructionProto`.
//!
//! A proto can set any field on any instruction; the text format has a place for an attribute
//! only on the opcodes that take it (the parser refuses `slice_sizes=` on a `maximum`). The
//! reader copies every field it understands into [`Attrs`](crate::attrs::Attrs), so without
//! this table a misplaced field either printed as an attribute the parser refuses (text that
//! does not read back) or was silently dropped. [`misplaced_field`] checks an imported
//! instruction against the table and names the first field its opcode cannot carry.
//!
//! The opcode sets are the parser's (`text/parser.rs`, `parse_attr`); a field whose value is
//! its default (0, false, empty, absent) is never misplaced, since a proto cannot tell it from
//! an unset one. `crates/hlo/tests/corpus_proto.rs` reads back every corpus module written by
//! the exporter, and the `proto` fuzz target checks that what the reader and the verifier
//! accept prints as text that parses.

use crate::instruction::Instruction;
use crate::opcode::Opcode;

/// One row of the table: the proto field (as hlo.proto, or Tessera's extension, names it),
/// whether an instruction has it set, and the opcodes that may carry it.
struct Carried {
    field: &'static str,
    set: fn(&Instruction) -> bool,
    on: fn(Opcode) -> bool,
}

/// The collectives that take `replica_groups` (and `channel_id`).
fn grouped(op: Opcode) -> bool {
    op.takes_replica_groups()
}

fn dot_like(op: Opcode) -> bool {
    use Opcode::*;
    matches!(op, Dot | RaggedDot | ScaledDot)
}

const TABLE: &[Carried] = {
    use Opcode::*;
    &[
        Carried {
            field: "parameter_number",
            set: |i| i.attrs.parameter_number != 0,
            on: |op| op == Parameter,
        },
        Carried {
            field: "literal",
            set: |i| i.attrs.literal.is_some(),
            on: |op| matches!(op, Constant | CustomCall),
        },
        Carried {
            field: "tuple_index",
            set: |i| i.attrs.tuple_index != 0,
            on: |op| op == GetTupleElement,
        },
        Carried {
            field: "called_computation_ids",
            set: |i| !i.called.is_empty(),
            on: |op| {
                op.is_async()
                    || matches!(
                        op,
                        Call | Map
                            | Reduce
                            | ReduceWindow
                            | Sort
                            | Scatter
                            | Scan
                            | AllReduce
                            | AllReduceStart
                            | ReduceScatter
                            | CustomCall
                            | While
                            | Conditional
                            | SelectAndScatter
                            | Fusion
                    )
            },
        },
        Carried {
            field: "channel_id",
            set: |i| i.attrs.channel_id.is_some(),
            on: |op| {
                grouped(op)
                    || matches!(
                        op,
                        CollectivePermute
                            | CollectivePermuteStart
                            | Send
                            | SendDone
                            | Recv
                            | RecvDone
                    )
            },
        },
        Carried {
            field: "replica_groups",
            set: |i| i.attrs.replica_groups.is_some(),
            on: grouped,
        },
        Carried {
            field: "constrain_layout",
            set: |i| i.attrs.constrain_layout,
            on: |op| {
                matches!(
                    op,
                    AllGather
                        | AllGatherStart
                        | AllReduce
                        | AllReduceStart
                        | ReduceScatter
                        | AllToAll
                )
            },
        },
        Carried {
            field: "use_global_device_ids",
            set: |i| i.attrs.use_global_device_ids,
            on: |op| {
                matches!(
                    op,
                    AllGather | AllGatherStart | AllReduce | AllReduceStart | ReduceScatter
                )
            },
        },
        Carried {
            field: "dimensions",
            set: |i| i.attrs.dimensions.is_some(),
            on: |op| {
                matches!(
                    op,
                    AllGather
                        | AllGatherStart
                        | ReduceScatter
                        | AllToAll
                        | RaggedAllToAll
                        | Sort
                        | Broadcast
                        | Concatenate
                        | Map
                        | Scan
                        | Reduce
                        | Reverse
                        | Transpose
                        | GetDimensionSize
                        | SetDimensionSize
                )
            },
        },
        Carried {
            field: "tessera.collective_mode",
            set: |i| i.attrs.collective_mode.is_some(),
            on: |op| matches!(op, AllReduce | AllReduceStart | ReduceScatter),
        },
        Carried {
            field: "source_target_pairs",
            set: |i| i.attrs.source_target_pairs.is_some(),
            on: |op| matches!(op, CollectivePermute | CollectivePermuteStart),
        },
        Carried {
            field: "tessera.permute_slice_sizes",
            set: |i| i.attrs.permute_slice_sizes.is_some(),
            on: |op| matches!(op, CollectivePermute | CollectivePermuteStart),
        },
        Carried {
            field: "is_host_transfer",
            set: |i| i.attrs.is_host_transfer,
            on: |op| matches!(op, Send | SendDone | Recv | RecvDone),
        },
        Carried {
            field: "slice_dimensions",
            set: |i| i.attrs.slice.is_some(),
            on: |op| op == Slice,
        },
        Carried {
            field: "dynamic_slice_sizes",
            set: |i| i.attrs.dynamic_slice_sizes.is_some(),
            on: |op| op == DynamicSlice,
        },
        Carried {
            field: "padding_config",
            set: |i| i.attrs.padding.is_some(),
            on: |op| op == Pad,
        },
        Carried {
            field: "custom_call_target",
            set: |i| i.attrs.custom_call.is_some(),
            on: |op| op == CustomCall,
        },
        Carried {
            field: "tessera.custom_call_uses_to_apply",
            set: |i| i.attrs.custom_call_uses_to_apply,
            on: |op| op == CustomCall,
        },
        Carried {
            field: "window",
            set: |i| i.attrs.window.is_some(),
            on: |op| {
                matches!(
                    op,
                    ReduceWindow | Convolution | SelectAndScatter | CustomCall
                )
            },
        },
        Carried {
            field: "convolution_dimension_numbers",
            set: |i| i.attrs.conv_dims.is_some(),
            on: |op| matches!(op, Convolution | CustomCall),
        },
        Carried {
            field: "feature_group_count",
            set: |i| i.attrs.feature_group_count != 1,
            on: |op| matches!(op, Convolution | CustomCall),
        },
        Carried {
            field: "batch_group_count",
            set: |i| i.attrs.batch_group_count != 1,
            on: |op| matches!(op, Convolution | CustomCall),
        },
        Carried {
            field: "tessera.conv_kind",
            set: |i| i.attrs.conv_kind.is_some(),
            on: |op| op == Convolution,
        },
        Carried {
            field: "dot_dimension_numbers",
            set: |i| i.attrs.dot_dims.is_some(),
            on: dot_like,
        },
        Carried {
            field: "ragged_dot_dimension_numbers",
            set: |i| i.attrs.ragged_dot_dims.is_some(),
            on: |op| op == RaggedDot,
        },
        Carried {
            field: "precision_config.operand_precision",
            set: |i| {
                i.attrs
                    .precision
                    .as_ref()
                    .is_some_and(|p| !p.operand_precision.is_empty())
            },
            on: |op| dot_like(op) || matches!(op, Convolution | CustomCall),
        },
        Carried {
            field: "precision_config.algorithm",
            set: |i| i.attrs.precision.as_ref().is_some_and(|p| p.algorithm != 0),
            on: |op| matches!(op, Dot | ScaledDot),
        },
        Carried {
            field: "gather_dimension_numbers",
            set: |i| i.attrs.gather_dims.is_some(),
            on: |op| op == Gather,
        },
        Carried {
            field: "gather_slice_sizes",
            set: |i| i.attrs.gather_slice_sizes.is_some(),
            on: |op| op == Gather,
        },
        Carried {
            field: "scatter_dimension_numbers",
            set: |i| i.attrs.scatter_dims.is_some(),
            on: |op| op == Scatter,
        },
        Carried {
            field: "indices_are_sorted",
            set: |i| i.attrs.indices_are_sorted,
            on: |op| matches!(op, Gather | Scatter),
        },
        Carried {
            field: "unique_indices",
            set: |i| i.attrs.unique_indices,
            on: |op| op == Scatter,
        },
        Carried {
            field: "comparison_direction",
            set: |i| i.attrs.comparison.is_some(),
            on: |op| op == Compare,
        },
        Carried {
            field: "is_stable",
            set: |i| i.attrs.is_stable,
            on: |op| matches!(op, Sort | TopK),
        },
        Carried {
            field: "largest",
            set: |i| i.attrs.largest,
            on: |op| op == TopK,
        },
        Carried {
            field: "k",
            set: |i| i.attrs.k != 0,
            on: |op| op == TopK,
        },
        Carried {
            field: "epsilon",
            set: |i| i.attrs.epsilon != 0.0,
            on: |op| matches!(op, BatchNormTraining | BatchNormInference | BatchNormGrad),
        },
        Carried {
            field: "feature_index",
            set: |i| i.attrs.feature_index != 0,
            on: |op| matches!(op, BatchNormTraining | BatchNormInference | BatchNormGrad),
        },
        Carried {
            field: "exponent_bits",
            set: |i| i.attrs.exponent_bits != 0,
            on: |op| op == ReducePrecision,
        },
        Carried {
            field: "mantissa_bits",
            set: |i| i.attrs.mantissa_bits != 0,
            on: |op| op == ReducePrecision,
        },
        Carried {
            field: "distribution",
            set: |i| i.attrs.distribution.is_some(),
            on: |op| op == Rng,
        },
        Carried {
            field: "rng_algorithm",
            set: |i| i.attrs.rng_algorithm.is_some(),
            on: |op| op == RngBitGenerator,
        },
        Carried {
            field: "delta",
            set: |i| i.attrs.delta != 0,
            on: |op| op == RngGetAndUpdateState,
        },
        Carried {
            field: "triangular_solve_options",
            set: |i| i.attrs.triangular_solve.is_some(),
            on: |op| op == TriangularSolve,
        },
        Carried {
            field: "cholesky_options",
            set: |i| i.attrs.lower,
            on: |op| op == Cholesky,
        },
        Carried {
            field: "fft_type",
            set: |i| i.attrs.fft_type.is_some(),
            on: |op| op == Fft,
        },
        Carried {
            field: "fft_length",
            set: |i| i.attrs.fft_length.is_some(),
            on: |op| op == Fft,
        },
        Carried {
            field: "infeed_config",
            set: |i| i.attrs.infeed_config.is_some(),
            on: |op| op == Infeed,
        },
        Carried {
            field: "outfeed_config",
            set: |i| i.attrs.outfeed_config.is_some(),
            on: |op| op == Outfeed,
        },
        Carried {
            field: "outfeed_shape",
            set: |i| i.attrs.outfeed_shape.is_some(),
            on: |op| op == Outfeed,
        },
        Carried {
            field: "cross_program_prefetch_index",
            set: |i| i.attrs.cross_program_prefetch_index.is_some(),
            on: |op| op == CopyStart,
        },
        Carried {
            field: "fusion_kind",
            set: |i| i.attrs.fusion_kind.is_some(),
            on: |op| op == Fusion,
        },
        Carried {
            field: "domain_entry_sharding",
            set: |i| i.attrs.domain.is_some(),
            on: |op| op == Domain,
        },
        Carried {
            field: "is_reverse",
            set: |i| i.attrs.scan.is_some(),
            on: |op| op == Scan,
        },
        Carried {
            field: "is_composite",
            set: |i| i.attrs.is_composite,
            on: |op| op == Call,
        },
        Carried {
            field: "tessera.inferred_dimension",
            set: |i| i.attrs.inferred_dimension.is_some(),
            on: |op| op == Reshape,
        },
        Carried {
            field: "async_execution_thread",
            set: |i| i.attrs.async_execution_thread.is_some(),
            on: Opcode::is_async,
        },
        Carried {
            field: "output_operand_aliasing",
            set: |i| !i.attrs.output_to_operand_aliasing.is_empty(),
            on: |op| matches!(op, AsyncStart | Fusion),
        },
        Carried {
            field: "result_accuracy",
            set: |i| i.attrs.result_accuracy.is_some(),
            on: Opcode::takes_result_accuracy,
        },
    ]
};

/// The first proto field set on `i` that its opcode cannot carry (see the module docs).
pub(crate) fn misplaced_field(i: &Instruction) -> Option<&'static str> {
    TABLE
        .iter()
        .find(|row| (row.set)(i) && !(row.on)(i.opcode))
        .map(|row| row.field)
}

/// Every field of the table, for tests.
#[cfg(test)]
pub(crate) fn fields() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|row| row.field)
}
