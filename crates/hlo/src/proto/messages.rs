//! Rust definitions of the `xla.*` protobuf messages an `HloModuleProto` is made of.
//!
//! Written by hand with prost derives (no protoc, no build script). Field numbers and wire types
//! are those of `xla/service/hlo.proto`, `xla/xla_data.proto` and `xla/xla.proto` of openxla/xla,
//! checked against the descriptors embedded in jaxlib 0.12 (`scripts/oracles/proto_descriptors.py`
//! prints them). Enum-typed fields are declared as `int32` (same varint encoding), so a value
//! this crate does not know survives decoding and is reported by the converter instead of being
//! dropped by prost. Only the messages and fields an HLO module uses are declared; prost skips
//! the others when decoding.

use std::collections::BTreeMap;

// ---------------------------------------------------------------- xla_data.proto: shapes

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TileProto {
    #[prost(int64, repeated, tag = "1")]
    pub dimensions: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SplitConfigProto {
    #[prost(int64, tag = "1")]
    pub dimension: i64,
    #[prost(int64, repeated, tag = "2")]
    pub split_indices: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LayoutProto {
    #[prost(int64, repeated, tag = "1")]
    pub minor_to_major: Vec<i64>,
    /// `xla.DimLevelType`.
    #[prost(int32, repeated, tag = "9")]
    pub dim_level_types: Vec<i32>,
    #[prost(bool, repeated, tag = "13")]
    pub dim_unique: Vec<bool>,
    #[prost(bool, repeated, tag = "14")]
    pub dim_ordered: Vec<bool>,
    #[prost(message, repeated, tag = "6")]
    pub tiles: Vec<TileProto>,
    #[prost(int64, tag = "16")]
    pub tail_padding_alignment_in_elements: i64,
    #[prost(int64, tag = "7")]
    pub element_size_in_bits: i64,
    #[prost(int64, tag = "8")]
    pub memory_space: i64,
    /// `xla.PrimitiveType`.
    #[prost(int32, tag = "11")]
    pub index_primitive_type: i32,
    #[prost(int32, tag = "12")]
    pub pointer_primitive_type: i32,
    #[prost(message, optional, boxed, tag = "10")]
    pub physical_shape: Option<Box<ShapeProto>>,
    #[prost(int64, tag = "15")]
    pub dynamic_shape_metadata_prefix_bytes: i64,
    #[prost(message, repeated, tag = "17")]
    pub split_configs: Vec<SplitConfigProto>,
    /// Tessera's own field, not XLA's: true when the IR shape had no layout and the default
    /// one was written because XLA requires one. XLA skips the unknown field; our reader drops
    /// such layouts again, so "no layout" survives a round trip.
    #[prost(bool, tag = "50001")]
    pub tessera_default_filled: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ShapeProto {
    /// `xla.PrimitiveType`.
    #[prost(int32, tag = "2")]
    pub element_type: i32,
    #[prost(int64, repeated, tag = "3")]
    pub dimensions: Vec<i64>,
    #[prost(bool, repeated, tag = "6")]
    pub is_dynamic_dimension: Vec<bool>,
    #[prost(message, repeated, tag = "4")]
    pub tuple_shapes: Vec<ShapeProto>,
    #[prost(message, optional, tag = "5")]
    pub layout: Option<LayoutProto>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ProgramShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub parameters: Vec<ShapeProto>,
    #[prost(message, optional, tag = "2")]
    pub result: Option<ShapeProto>,
    #[prost(string, repeated, tag = "3")]
    pub parameter_names: Vec<String>,
}

// ---------------------------------------------------------------- metadata, attributes

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OpMetadata {
    #[prost(string, tag = "1")]
    pub op_type: String,
    #[prost(string, tag = "2")]
    pub op_name: String,
    #[prost(string, tag = "3")]
    pub source_file: String,
    #[prost(int32, tag = "4")]
    pub source_line: i32,
    #[prost(int32, tag = "17")]
    pub source_end_line: i32,
    #[prost(int32, tag = "18")]
    pub source_column: i32,
    #[prost(int32, tag = "19")]
    pub source_end_column: i32,
    /// `xla.ProfileType` (deprecated in XLA, still read and written).
    #[prost(int32, repeated, tag = "5")]
    pub profile_type: Vec<i32>,
    #[prost(int64, tag = "8")]
    pub size_of_generated_code_in_bytes: i64,
    #[prost(int64, tag = "9")]
    pub size_of_memory_working_set_in_bytes: i64,
    #[prost(string, tag = "12")]
    pub deduplicated_name: String,
    /// Removed from recent XLA (field 13 there is reserved); kept for older readers.
    #[prost(bool, tag = "13")]
    pub preserve_layout: bool,
    #[prost(int32, tag = "15")]
    pub stack_frame_id: i32,
    #[prost(string, tag = "16")]
    pub scheduling_name: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct FrontendAttributesEntry {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `map<string, string> map = 1`, kept as its wire form (repeated entries) so that the written
/// order is deterministic (sorted by key).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct FrontendAttributes {
    #[prost(message, repeated, tag = "1")]
    pub map: Vec<FrontendAttributesEntry>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Statistic {
    #[prost(string, tag = "1")]
    pub stat_name: String,
    #[prost(double, tag = "2")]
    pub stat_val: f64,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StatisticsViz {
    #[prost(int64, tag = "1")]
    pub stat_index_to_visualize: i64,
    #[prost(message, repeated, tag = "2")]
    pub statistics: Vec<Statistic>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OriginalArrayProto {
    #[prost(string, tag = "1")]
    pub instruction_name: String,
    #[prost(int64, repeated, tag = "2")]
    pub shape_index: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OriginalValueElementProto {
    #[prost(int64, repeated, tag = "1")]
    pub shape_index: Vec<i64>,
    #[prost(message, optional, tag = "2")]
    pub original_array: Option<OriginalArrayProto>,
}

/// Where each leaf of a value came from, before passes renamed things (`origin={...}`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OriginalValueProto {
    #[prost(message, repeated, tag = "1")]
    pub elements: Vec<OriginalValueElementProto>,
}

// ---------------------------------------------------------------- literals

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LiteralProto {
    #[prost(message, optional, tag = "1")]
    pub shape: Option<ShapeProto>,
    #[prost(bool, repeated, tag = "2")]
    pub preds: Vec<bool>,
    #[prost(bytes = "vec", tag = "30")]
    pub s1s: Vec<u8>,
    #[prost(bytes = "vec", tag = "26")]
    pub s2s: Vec<u8>,
    #[prost(bytes = "vec", tag = "21")]
    pub s4s: Vec<u8>,
    #[prost(bytes = "vec", tag = "15")]
    pub s8s: Vec<u8>,
    #[prost(bytes = "vec", tag = "31")]
    pub u1s: Vec<u8>,
    #[prost(bytes = "vec", tag = "27")]
    pub u2s: Vec<u8>,
    #[prost(bytes = "vec", tag = "22")]
    pub u4s: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub u8s: Vec<u8>,
    #[prost(int32, repeated, tag = "4")]
    pub s32s: Vec<i32>,
    #[prost(int64, repeated, tag = "5")]
    pub s64s: Vec<i64>,
    #[prost(uint32, repeated, tag = "6")]
    pub u32s: Vec<u32>,
    #[prost(uint64, repeated, tag = "7")]
    pub u64s: Vec<u64>,
    #[prost(float, repeated, tag = "8")]
    pub f32s: Vec<f32>,
    #[prost(double, repeated, tag = "9")]
    pub f64s: Vec<f64>,
    /// Real and imaginary parts interleaved.
    #[prost(float, repeated, tag = "12")]
    pub c64s: Vec<f32>,
    #[prost(double, repeated, tag = "18")]
    pub c128s: Vec<f64>,
    #[prost(message, repeated, tag = "10")]
    pub tuple_literals: Vec<LiteralProto>,
    #[prost(bytes = "vec", tag = "11")]
    pub f16s: Vec<u8>,
    #[prost(bytes = "vec", tag = "13")]
    pub bf16s: Vec<u8>,
    #[prost(bytes = "vec", tag = "16")]
    pub u16s: Vec<u8>,
    #[prost(bytes = "vec", tag = "17")]
    pub s16s: Vec<u8>,
    #[prost(bytes = "vec", tag = "32")]
    pub f4e2m1fns: Vec<u8>,
    #[prost(bytes = "vec", tag = "29")]
    pub f8e3m4s: Vec<u8>,
    #[prost(bytes = "vec", tag = "23")]
    pub f8e4m3b11fnuzs: Vec<u8>,
    #[prost(bytes = "vec", tag = "20")]
    pub f8e4m3fns: Vec<u8>,
    #[prost(bytes = "vec", tag = "25")]
    pub f8e4m3fnuzs: Vec<u8>,
    #[prost(bytes = "vec", tag = "28")]
    pub f8e4m3s: Vec<u8>,
    #[prost(bytes = "vec", tag = "24")]
    pub f8e5m2fnuzs: Vec<u8>,
    #[prost(bytes = "vec", tag = "19")]
    pub f8e5m2s: Vec<u8>,
    #[prost(bytes = "vec", tag = "33")]
    pub f8e8m0fnus: Vec<u8>,
    #[prost(int32, repeated, tag = "34")]
    pub dynamic_sizes: Vec<i32>,
}

// ---------------------------------------------------------------- op attributes

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PaddingConfigDimension {
    #[prost(int64, tag = "1")]
    pub edge_padding_low: i64,
    #[prost(int64, tag = "2")]
    pub edge_padding_high: i64,
    #[prost(int64, tag = "3")]
    pub interior_padding: i64,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PaddingConfig {
    #[prost(message, repeated, tag = "1")]
    pub dimensions: Vec<PaddingConfigDimension>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct WindowDimension {
    #[prost(int64, tag = "1")]
    pub size: i64,
    #[prost(int64, tag = "2")]
    pub stride: i64,
    #[prost(int64, tag = "3")]
    pub padding_low: i64,
    #[prost(int64, tag = "4")]
    pub padding_high: i64,
    #[prost(int64, tag = "5")]
    pub window_dilation: i64,
    #[prost(int64, tag = "6")]
    pub base_dilation: i64,
    #[prost(bool, tag = "7")]
    pub window_reversal: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Window {
    #[prost(message, repeated, tag = "1")]
    pub dimensions: Vec<WindowDimension>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ConvolutionDimensionNumbers {
    #[prost(int64, tag = "7")]
    pub input_batch_dimension: i64,
    #[prost(int64, tag = "8")]
    pub input_feature_dimension: i64,
    #[prost(int64, repeated, tag = "11")]
    pub input_spatial_dimensions: Vec<i64>,
    #[prost(int64, tag = "3")]
    pub kernel_input_feature_dimension: i64,
    #[prost(int64, tag = "4")]
    pub kernel_output_feature_dimension: i64,
    #[prost(int64, repeated, tag = "6")]
    pub kernel_spatial_dimensions: Vec<i64>,
    #[prost(int64, tag = "9")]
    pub output_batch_dimension: i64,
    #[prost(int64, tag = "10")]
    pub output_feature_dimension: i64,
    #[prost(int64, repeated, tag = "12")]
    pub output_spatial_dimensions: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DotDimensionNumbers {
    #[prost(int64, repeated, tag = "1")]
    pub lhs_contracting_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub rhs_contracting_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub lhs_batch_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "4")]
    pub rhs_batch_dimensions: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RaggedDotDimensionNumbers {
    #[prost(message, optional, tag = "1")]
    pub dot_dimension_numbers: Option<DotDimensionNumbers>,
    #[prost(int64, repeated, tag = "2")]
    pub lhs_ragged_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub rhs_group_dimensions: Vec<i64>,
}

/// `xla.SparsityDescriptor` (field 86 of older HloInstructionProto versions; recent XLA ignores it).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SparsityDescriptor {
    /// `xla.SparsityType`: 1 = SPARSITY_STRUCTURED_N_M.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(int32, tag = "2")]
    pub index: i32,
    #[prost(int32, tag = "3")]
    pub dimension: i32,
    #[prost(int32, tag = "4")]
    pub n: i32,
    #[prost(int32, tag = "5")]
    pub m: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GatherDimensionNumbers {
    #[prost(int64, repeated, tag = "1")]
    pub offset_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub collapsed_slice_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub start_index_map: Vec<i64>,
    #[prost(int64, tag = "4")]
    pub index_vector_dim: i64,
    #[prost(int64, repeated, tag = "5")]
    pub operand_batching_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "6")]
    pub start_indices_batching_dims: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ScatterDimensionNumbers {
    #[prost(int64, repeated, tag = "1")]
    pub update_window_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub inserted_window_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "3")]
    pub scatter_dims_to_operand_dims: Vec<i64>,
    #[prost(int64, tag = "4")]
    pub index_vector_dim: i64,
    #[prost(int64, repeated, tag = "5")]
    pub input_batching_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "6")]
    pub scatter_indices_batching_dims: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PrecisionConfig {
    /// `xla.PrecisionConfig.Precision`.
    #[prost(int32, repeated, tag = "1")]
    pub operand_precision: Vec<i32>,
    /// `xla.PrecisionConfig.Algorithm`.
    #[prost(int32, tag = "2")]
    pub algorithm: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TriangularSolveOptions {
    #[prost(bool, tag = "1")]
    pub left_side: bool,
    #[prost(bool, tag = "2")]
    pub lower: bool,
    #[prost(bool, tag = "3")]
    pub unit_diagonal: bool,
    /// 1 NO_TRANSPOSE, 2 TRANSPOSE, 3 ADJOINT.
    #[prost(int32, tag = "4")]
    pub transpose_a: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CholeskyOptions {
    #[prost(bool, tag = "1")]
    pub lower: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ParameterReplication {
    #[prost(bool, repeated, tag = "1")]
    pub replicated_at_leaf_buffers: Vec<bool>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OutputOperandAliasing {
    #[prost(int64, repeated, tag = "1")]
    pub output_shape_index: Vec<i64>,
    #[prost(int64, tag = "2")]
    pub operand_index: i64,
    #[prost(int64, repeated, tag = "3")]
    pub operand_shape_index: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SourceTarget {
    #[prost(int64, tag = "1")]
    pub source: i64,
    #[prost(int64, tag = "2")]
    pub target: i64,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ResultAccuracyTolerance {
    #[prost(double, tag = "1")]
    pub atol: f64,
    #[prost(double, tag = "2")]
    pub rtol: f64,
    #[prost(int64, tag = "3")]
    pub ulps: i64,
}

/// `oneof specs { Mode mode = 1; Tolerance tolerance = 2; }`, as two optional fields (the same
/// wire form).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ResultAccuracy {
    #[prost(int32, optional, tag = "1")]
    pub mode: Option<i32>,
    #[prost(message, optional, tag = "2")]
    pub tolerance: Option<ResultAccuracyTolerance>,
}

// ---------------------------------------------------------------- shardings, device lists

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OpSharding {
    /// `xla.OpSharding.Type`: 0 REPLICATED, 1 MAXIMAL, 2 TUPLE, 3 OTHER, 4 MANUAL, 5 UNKNOWN,
    /// 6 UNREDUCED.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub tile_shape: Option<ShapeProto>,
    #[prost(int64, repeated, tag = "3")]
    pub tile_assignment_dimensions: Vec<i64>,
    #[prost(int64, repeated, tag = "4")]
    pub tile_assignment_devices: Vec<i64>,
    #[prost(message, repeated, tag = "5")]
    pub tuple_shardings: Vec<OpSharding>,
    #[prost(bool, tag = "6")]
    pub replicate_on_last_tile_dim: bool,
    #[prost(message, repeated, tag = "7")]
    pub metadata: Vec<OpMetadata>,
    #[prost(int32, repeated, tag = "8")]
    pub last_tile_dims: Vec<i32>,
    #[prost(int64, repeated, tag = "9")]
    pub iota_reshape_dims: Vec<i64>,
    #[prost(int32, repeated, tag = "10")]
    pub iota_transpose_perm: Vec<i32>,
    #[prost(bool, tag = "11")]
    pub is_shard_group: bool,
    #[prost(int64, tag = "12")]
    pub shard_group_id: i64,
    /// 0 AS, 1 LIKE.
    #[prost(int32, tag = "13")]
    pub shard_group_type: i32,
    /// A named (mesh) sharding; when set, XLA reads nothing else of the message.
    #[prost(message, optional, boxed, tag = "14")]
    pub named_sharding: Option<Box<NamedShardingProto>>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NamedShardingProto {
    #[prost(message, optional, tag = "2")]
    pub mesh: Option<MeshProto>,
    #[prost(message, repeated, tag = "3")]
    pub dim_shardings: Vec<DimensionShardingProto>,
    #[prost(message, repeated, tag = "4")]
    pub replicated_axes: Vec<AxisRefProto>,
    #[prost(message, repeated, tag = "5")]
    pub unreduced_axes: Vec<AxisRefProto>,
    #[prost(message, repeated, tag = "6")]
    pub metadata: Vec<OpMetadata>,
    #[prost(message, repeated, tag = "7")]
    pub manual_axes: Vec<AxisRefProto>,
    /// `ReductionOpProto`: 0 SUM, 1 MAX, 2 MIN.
    #[prost(int32, tag = "8")]
    pub reduction_op: i32,
}

/// `xla.NamedShardingProto.DimensionSharding`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DimensionShardingProto {
    #[prost(message, repeated, tag = "1")]
    pub axes: Vec<AxisRefProto>,
    #[prost(bool, tag = "2")]
    pub is_closed: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ReplicaGroup {
    #[prost(int64, repeated, tag = "1")]
    pub replica_ids: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct IotaReplicaGroupListProto {
    #[prost(int64, tag = "1")]
    pub num_replica_groups: i64,
    #[prost(int64, tag = "2")]
    pub num_devices_per_group: i64,
    #[prost(int64, repeated, tag = "3")]
    pub iota_reshape_dims: Vec<i64>,
    #[prost(int32, repeated, tag = "4")]
    pub iota_transpose_perm: Vec<i32>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CollectiveDeviceListProto {
    #[prost(message, repeated, tag = "1")]
    pub replica_groups: Vec<ReplicaGroup>,
    /// Older XLA kept the iota form here; recent XLA uses `iota_collective_device_list` (92) of
    /// the instruction. Read, never written.
    #[prost(message, optional, tag = "2")]
    pub iota_replica_group_list: Option<IotaReplicaGroupListProto>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct MeshAxis {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int64, tag = "2")]
    pub size: i64,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct MeshProto {
    #[prost(message, repeated, tag = "1")]
    pub axes: Vec<MeshAxis>,
    #[prost(int64, repeated, tag = "2")]
    pub device_ids: Vec<i64>,
    /// A transposed iota device order (a plain iota has neither this nor `device_ids`).
    #[prost(message, optional, tag = "3")]
    pub iota_transform: Option<IotaTransform>,
}

/// `xla.MeshProto.IotaTransform`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct IotaTransform {
    #[prost(int64, repeated, tag = "1")]
    pub reshape_dims: Vec<i64>,
    #[prost(int64, repeated, tag = "2")]
    pub transpose_perm: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SubAxis {
    #[prost(int64, tag = "1")]
    pub pre_size: i64,
    #[prost(int64, tag = "2")]
    pub size: i64,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AxisRefProto {
    #[prost(int64, tag = "1")]
    pub mesh_axis_index: i64,
    #[prost(message, optional, tag = "2")]
    pub sub_axis_info: Option<SubAxis>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct MeshAxesReplicaGroupListProto {
    #[prost(message, optional, tag = "1")]
    pub mesh: Option<MeshProto>,
    #[prost(message, repeated, tag = "2")]
    pub axes: Vec<AxisRefProto>,
}

// ---------------------------------------------------------------- hlo.proto

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SliceDimensions {
    #[prost(int64, tag = "1")]
    pub start: i64,
    #[prost(int64, tag = "2")]
    pub limit: i64,
    #[prost(int64, tag = "3")]
    pub stride: i64,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloInstructionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub opcode: String,
    #[prost(message, optional, tag = "3")]
    pub shape: Option<ShapeProto>,
    #[prost(message, optional, tag = "7")]
    pub metadata: Option<OpMetadata>,
    #[prost(message, optional, boxed, tag = "8")]
    pub literal: Option<Box<LiteralProto>>,
    #[prost(int64, tag = "9")]
    pub parameter_number: i64,
    #[prost(string, tag = "11")]
    pub fusion_kind: String,
    #[prost(int64, tag = "13")]
    pub tuple_index: i64,
    #[prost(int64, repeated, tag = "14")]
    pub dimensions: Vec<i64>,
    #[prost(message, optional, tag = "15")]
    pub window: Option<Window>,
    #[prost(message, optional, boxed, tag = "16")]
    pub convolution_dimension_numbers: Option<Box<ConvolutionDimensionNumbers>>,
    #[prost(int64, tag = "50")]
    pub feature_group_count: i64,
    #[prost(int64, tag = "58")]
    pub batch_group_count: i64,
    #[prost(message, repeated, tag = "17")]
    pub slice_dimensions: Vec<SliceDimensions>,
    #[prost(int32, tag = "18")]
    pub exponent_bits: i32,
    #[prost(int32, tag = "19")]
    pub mantissa_bits: i32,
    #[prost(int64, repeated, tag = "20")]
    pub dynamic_slice_sizes: Vec<i64>,
    #[prost(message, optional, tag = "21")]
    pub padding_config: Option<PaddingConfig>,
    #[prost(bytes = "vec", tag = "22")]
    pub outfeed_config: Vec<u8>,
    /// `xla.RandomDistribution`: 1 UNIFORM, 2 NORMAL.
    #[prost(int32, tag = "23")]
    pub distribution: i32,
    #[prost(float, tag = "24")]
    pub epsilon: f32,
    #[prost(int64, tag = "25")]
    pub feature_index: i64,
    #[prost(int64, tag = "26")]
    pub channel_id: i64,
    #[prost(int64, optional, tag = "45")]
    pub all_reduce_id: Option<i64>,
    #[prost(bytes = "vec", tag = "27")]
    pub infeed_config: Vec<u8>,
    #[prost(string, tag = "28")]
    pub custom_call_target: String,
    #[prost(message, optional, boxed, tag = "29")]
    pub outfeed_shape: Option<Box<ShapeProto>>,
    #[prost(message, optional, tag = "30")]
    pub dot_dimension_numbers: Option<DotDimensionNumbers>,
    #[prost(message, optional, boxed, tag = "90")]
    pub ragged_dot_dimension_numbers: Option<Box<RaggedDotDimensionNumbers>>,
    /// `xla.FftType`: 0 FFT, 1 IFFT, 2 RFFT, 3 IRFFT.
    #[prost(int32, tag = "31")]
    pub fft_type: i32,
    #[prost(int64, repeated, tag = "32")]
    pub fft_length: Vec<i64>,
    #[prost(string, tag = "63")]
    pub comparison_direction: String,
    #[prost(message, optional, boxed, tag = "33")]
    pub gather_dimension_numbers: Option<Box<GatherDimensionNumbers>>,
    #[prost(int64, repeated, tag = "34")]
    pub gather_slice_sizes: Vec<i64>,
    #[prost(int64, tag = "35")]
    pub id: i64,
    #[prost(int64, repeated, tag = "36")]
    pub operand_ids: Vec<i64>,
    #[prost(int64, repeated, tag = "37")]
    pub control_predecessor_ids: Vec<i64>,
    #[prost(int64, repeated, tag = "38")]
    pub called_computation_ids: Vec<i64>,
    #[prost(message, optional, boxed, tag = "40")]
    pub sharding: Option<Box<OpSharding>>,
    #[prost(bytes = "vec", tag = "43")]
    pub backend_config: Vec<u8>,
    /// Deprecated in XLA in favour of `collective_device_list`; read, never written.
    #[prost(message, repeated, tag = "49")]
    pub replica_groups: Vec<ReplicaGroup>,
    #[prost(bool, tag = "71")]
    pub use_global_device_ids: bool,
    #[prost(bool, tag = "47")]
    pub is_host_transfer: bool,
    #[prost(bool, tag = "60")]
    pub is_stable: bool,
    #[prost(message, optional, boxed, tag = "48")]
    pub scatter_dimension_numbers: Option<Box<ScatterDimensionNumbers>>,
    #[prost(message, optional, tag = "51")]
    pub precision_config: Option<PrecisionConfig>,
    #[prost(message, repeated, tag = "52")]
    pub source_target_pairs: Vec<SourceTarget>,
    #[prost(message, optional, boxed, tag = "54")]
    pub domain_entry_sharding: Option<Box<OpSharding>>,
    #[prost(message, optional, boxed, tag = "55")]
    pub domain_exit_sharding: Option<Box<OpSharding>>,
    #[prost(bool, tag = "56")]
    pub constrain_layout: bool,
    #[prost(message, repeated, tag = "57")]
    pub operand_shapes_with_layout: Vec<ShapeProto>,
    #[prost(message, optional, tag = "59")]
    pub triangular_solve_options: Option<TriangularSolveOptions>,
    #[prost(message, optional, tag = "62")]
    pub cholesky_options: Option<CholeskyOptions>,
    #[prost(message, optional, tag = "61")]
    pub parameter_replication: Option<ParameterReplication>,
    #[prost(bool, tag = "65")]
    pub custom_call_has_side_effect: bool,
    #[prost(message, repeated, tag = "74")]
    pub output_operand_aliasing: Vec<OutputOperandAliasing>,
    /// `xla.CustomCallSchedule`: 0 NONE, 1 LATEST, 2 EARLIEST.
    #[prost(int32, tag = "76")]
    pub custom_call_schedule: i32,
    #[prost(int64, tag = "66")]
    pub delta: i64,
    #[prost(bool, tag = "67")]
    pub indices_are_sorted: bool,
    #[prost(message, optional, tag = "68")]
    pub frontend_attributes: Option<FrontendAttributes>,
    #[prost(bool, tag = "69")]
    pub unique_indices: bool,
    /// `xla.RandomAlgorithm`: 0 DEFAULT, 1 THREE_FRY, 2 PHILOX.
    #[prost(int32, tag = "70")]
    pub rng_algorithm: i32,
    /// Deprecated in recent XLA in favour of `comparison_order`; still written for older readers.
    #[prost(string, tag = "72")]
    pub comparison_type: String,
    /// `TOTAL` or `PARTIAL` (recent XLA).
    #[prost(string, tag = "102")]
    pub comparison_order: String,
    #[prost(int32, optional, tag = "80")]
    pub cross_program_prefetch_index: Option<i32>,
    /// `xla.PaddingType`.
    #[prost(int32, tag = "75")]
    pub padding_type: i32,
    /// `xla.CustomCallApiVersion`.
    #[prost(int32, tag = "77")]
    pub custom_call_api_version: i32,
    #[prost(string, tag = "79")]
    pub async_execution_thread: String,
    #[prost(int64, tag = "81")]
    pub k: i64,
    #[prost(bool, tag = "85")]
    pub largest: bool,
    #[prost(message, optional, tag = "82")]
    pub statistics_viz: Option<StatisticsViz>,
    #[prost(message, repeated, tag = "86")]
    pub dot_sparsity: Vec<SparsityDescriptor>,
    #[prost(message, optional, tag = "87")]
    pub collective_device_list: Option<CollectiveDeviceListProto>,
    #[prost(message, optional, tag = "92")]
    pub iota_collective_device_list: Option<IotaReplicaGroupListProto>,
    #[prost(message, optional, boxed, tag = "93")]
    pub mesh_axes_replica_group_list: Option<Box<MeshAxesReplicaGroupListProto>>,
    #[prost(message, optional, tag = "88")]
    pub original_value: Option<OriginalValueProto>,
    #[prost(bool, tag = "89")]
    pub is_composite: bool,
    #[prost(message, optional, tag = "91")]
    pub result_accuracy: Option<ResultAccuracy>,
    #[prost(bool, tag = "94")]
    pub is_reverse: bool,
    #[prost(int64, tag = "95")]
    pub num_carries: i64,
    /// `xla.TriState`: 0 UNSPECIFIED, 1 TRUE, 2 FALSE.
    #[prost(int32, tag = "96")]
    pub is_associative: i32,
    /// Tessera's own field, not XLA's (XLA skips it): what the IR holds beyond XLA's fields.
    #[prost(message, optional, boxed, tag = "50001")]
    pub tessera: Option<Box<TesseraInstructionExt>>,
}

/// IR facts an `HloInstructionProto` has no field for, written only when there are any, so that
/// a module survives Tessera -> proto -> Tessera exactly. XLA ignores the field.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TesseraInstructionExt {
    /// Optional attributes the IR has (perhaps empty) where the XLA fields alone read as "none"
    /// (e.g. `metadata`, `dimensions`, `channel_id`).
    #[prost(string, repeated, tag = "1")]
    pub present: Vec<String>,
    /// Optional attributes the IR lacks where the XLA fields alone read as given.
    #[prost(string, repeated, tag = "2")]
    pub absent: Vec<String>,
    /// A domain's kind when not `sharding`.
    #[prost(string, optional, tag = "3")]
    pub domain_kind: Option<String>,
    /// `statistics={...}` exactly as the IR keeps it.
    #[prost(string, optional, tag = "4")]
    pub statistics_viz: Option<String>,
    /// `original_value={...}` as the IR keeps it (XLA's structured form is not written).
    #[prost(string, optional, tag = "5")]
    pub original_value: Option<String>,
    /// `constrain_layout` of a custom-call beyond its operand layout constraints.
    #[prost(bool, tag = "6")]
    pub custom_call_constrain_layout: bool,
    /// Set when the IR's flag differs from what the predicate's type says.
    #[prost(bool, optional, tag = "7")]
    pub predicated_conditional: Option<bool>,
    /// A custom-call's one computation was written `to_apply=`.
    #[prost(bool, tag = "8")]
    pub custom_call_uses_to_apply: bool,
    /// reshape's `inferred_dimension=`.
    #[prost(int64, optional, tag = "9")]
    pub inferred_dimension: Option<i64>,
    /// collective-permute's `slice_sizes={{...},...}` (also written flattened, as XLA does, in
    /// `dynamic_slice_sizes`).
    #[prost(message, repeated, tag = "10")]
    pub permute_slice_sizes: Vec<Int64List>,
    #[prost(bool, tag = "11")]
    pub has_permute_slice_sizes: bool,
    /// all-reduce's legacy `mode=` text.
    #[prost(string, optional, tag = "12")]
    pub collective_mode: Option<String>,
    /// convolution's `conv_kind=` text.
    #[prost(string, optional, tag = "13")]
    pub conv_kind: Option<String>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    pub values: Vec<i64>,
}

/// Module-level IR facts `HloModuleProto` has no field for (the text header's settings that XLA
/// keeps in its module config); XLA ignores the field.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TesseraModuleExt {
    /// The IR has no `entry_computation_layout` (the host program shape was derived).
    #[prost(bool, tag = "1")]
    pub no_entry_computation_layout: bool,
    #[prost(int64, tag = "2")]
    pub replica_count: i64,
    #[prost(int64, tag = "3")]
    pub num_partitions: i64,
    #[prost(bool, tag = "4")]
    pub use_spmd_partitioning: bool,
    #[prost(bool, tag = "5")]
    pub alias_passthrough_params: bool,
    #[prost(bool, repeated, packed = "false", tag = "6")]
    pub allow_spmd_sharding_propagation_to_parameters: Vec<bool>,
    #[prost(bool, tag = "7")]
    pub has_allow_spmd_sharding_propagation_to_parameters: bool,
    #[prost(bool, repeated, packed = "false", tag = "8")]
    pub allow_spmd_sharding_propagation_to_output: Vec<bool>,
    #[prost(bool, tag = "9")]
    pub has_allow_spmd_sharding_propagation_to_output: bool,
    #[prost(bool, tag = "10")]
    pub has_spmd_parameters_shardings: bool,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloComputationProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub instructions: Vec<HloInstructionProto>,
    #[prost(message, optional, tag = "4")]
    pub program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "5")]
    pub id: i64,
    #[prost(int64, tag = "6")]
    pub root_id: i64,
    #[prost(bool, tag = "7")]
    pub is_fusion_computation: bool,
    #[prost(string, tag = "8")]
    pub execution_thread: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct InstructionSequence {
    #[prost(int64, repeated, tag = "1")]
    pub instruction_ids: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloScheduleProto {
    /// Computation id to sequence (written in ascending id order).
    #[prost(btree_map = "int64, message", tag = "1")]
    pub sequences: BTreeMap<i64, InstructionSequence>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AliasEntryProto {
    #[prost(int64, repeated, tag = "1")]
    pub output_shape_index: Vec<i64>,
    #[prost(int64, tag = "2")]
    pub parameter_number: i64,
    #[prost(int64, repeated, tag = "3")]
    pub parameter_shape_index: Vec<i64>,
    /// `xla.Kind`: 1 MAY_ALIAS, 2 MUST_ALIAS.
    #[prost(int32, tag = "4")]
    pub kind: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloInputOutputAliasProto {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<AliasEntryProto>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct BufferDonorEntryProto {
    #[prost(int64, tag = "1")]
    pub parameter_number: i64,
    #[prost(int64, repeated, tag = "2")]
    pub parameter_shape_index: Vec<i64>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloBufferDonorProto {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<BufferDonorEntryProto>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct FileLocationProto {
    #[prost(int32, tag = "1")]
    pub file_name_id: i32,
    #[prost(int32, tag = "2")]
    pub function_name_id: i32,
    #[prost(int32, tag = "3")]
    pub line: i32,
    #[prost(int32, tag = "5")]
    pub end_line: i32,
    #[prost(int32, tag = "4")]
    pub column: i32,
    #[prost(int32, tag = "6")]
    pub end_column: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StackFrameProto {
    #[prost(int32, tag = "1")]
    pub file_location_id: i32,
    #[prost(int32, tag = "2")]
    pub parent_frame_id: i32,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StackFrameIndexProto {
    #[prost(string, repeated, tag = "1")]
    pub file_names: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub function_names: Vec<String>,
    #[prost(message, repeated, tag = "3")]
    pub file_locations: Vec<FileLocationProto>,
    #[prost(message, repeated, tag = "4")]
    pub stack_frames: Vec<StackFrameProto>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloModuleProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub entry_computation_name: String,
    #[prost(int64, tag = "6")]
    pub entry_computation_id: i64,
    /// Callees before their callers.
    #[prost(message, repeated, tag = "3")]
    pub computations: Vec<HloComputationProto>,
    #[prost(message, optional, tag = "4")]
    pub host_program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "5")]
    pub id: i64,
    #[prost(message, optional, tag = "7")]
    pub schedule: Option<HloScheduleProto>,
    #[prost(message, optional, tag = "8")]
    pub input_output_alias: Option<HloInputOutputAliasProto>,
    #[prost(message, optional, tag = "18")]
    pub buffer_donor: Option<HloBufferDonorProto>,
    #[prost(bool, tag = "11")]
    pub is_dynamic: bool,
    #[prost(message, optional, tag = "12")]
    pub spmd_output_sharding: Option<OpSharding>,
    #[prost(message, repeated, tag = "14")]
    pub spmd_parameters_shardings: Vec<OpSharding>,
    #[prost(bool, tag = "16")]
    pub use_auto_spmd_partitioning: bool,
    #[prost(message, optional, tag = "17")]
    pub stack_frame_index: Option<StackFrameIndexProto>,
    #[prost(message, optional, tag = "19")]
    pub frontend_attributes: Option<FrontendAttributes>,
    #[prost(message, optional, tag = "20")]
    pub original_value_recovery_table: Option<OriginalValueRecoveryTableProto>,
    #[prost(message, repeated, tag = "24")]
    pub debug_attributes: Vec<DebugAttributeTableEntryProto>,
    /// Tessera's own field, not XLA's (XLA skips it).
    #[prost(message, optional, tag = "50001")]
    pub tessera: Option<TesseraModuleExt>,
}

/// `xla.DebugAttributeTableEntryProto`: the debug callbacks of one original value.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DebugAttributeTableEntryProto {
    #[prost(message, optional, tag = "1")]
    pub original_array: Option<OriginalArrayProto>,
    #[prost(message, repeated, tag = "2")]
    pub debug_attributes: Vec<DebugAttributesProto>,
}

/// `xla.DebugAttributesProto`. `log_mode`: 0 NONE, 1 DEFAULT, 2 FUSION_DEBUGGER, 3 NO_FUSION,
/// 4 GUARANTEED.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DebugAttributesProto {
    #[prost(int32, tag = "1")]
    pub log_mode: i32,
    #[prost(int64, tag = "2")]
    pub callback_id: i64,
    #[prost(int64, tag = "3")]
    pub op_id: i64,
    #[prost(bool, tag = "4")]
    pub partitioned: bool,
    #[prost(string, tag = "5")]
    pub operands_sharding: String,
    #[prost(message, optional, tag = "6")]
    pub x64_config: Option<X64ConfigProto>,
}

/// `xla.X64ConfigProto` (read and dropped, as XLA's module does).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct X64ConfigProto {
    #[prost(string, tag = "1")]
    pub xprecision_64bit_fragment: String,
    #[prost(string, tag = "2")]
    pub original_log_instruction_name: String,
    #[prost(string, tag = "3")]
    pub xprecision_64bit_original_type: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OriginalValueRecoveryTableProto {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<RecoveryTableEntryProto>,
}

/// `xla.OriginalValueRecoveryTableProto.Entry`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RecoveryTableEntryProto {
    #[prost(message, optional, tag = "1")]
    pub old_original_array: Option<OriginalArrayProto>,
    #[prost(message, optional, tag = "2")]
    pub new_original_array: Option<OriginalArrayProto>,
    #[prost(message, optional, boxed, tag = "3")]
    pub recovery_module: Option<Box<HloModuleProto>>,
}

// ---------------------------------------------------------------- xla.proto

/// The part of `xla.HloModuleConfigProto` the `HloModule` text header can express.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloModuleConfigProto {
    #[prost(message, optional, tag = "1")]
    pub entry_computation_layout: Option<ProgramShapeProto>,
    #[prost(int64, tag = "4")]
    pub replica_count: i64,
    #[prost(int64, tag = "5")]
    pub num_partitions: i64,
    #[prost(bool, tag = "7")]
    pub use_spmd_partitioning: bool,
    #[prost(bool, tag = "17")]
    pub alias_passthrough_params: bool,
    #[prost(bool, repeated, tag = "33")]
    pub allow_spmd_sharding_propagation_to_parameters: Vec<bool>,
    #[prost(bool, repeated, tag = "27")]
    pub allow_spmd_sharding_propagation_to_output: Vec<bool>,
}

/// `xla.HloModuleProtoWithConfig`: a module with the configuration its text header carries.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct HloModuleProtoWithConfig {
    #[prost(message, optional, tag = "1")]
    pub hlo_module: Option<HloModuleProto>,
    #[prost(message, optional, tag = "2")]
    pub config: Option<HloModuleConfigProto>,
}
