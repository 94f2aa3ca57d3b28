//! Typed attributes of instructions.
//!
//! [`Attrs`] holds every attribute an opcode may carry, each with its own type; which ones an
//! opcode may carry is decided by the text parser (it refuses the others) and checked by the
//! verifier. The field set mirrors `xla.HloInstructionProto`, so the proto conversion is a plain
//! field-by-field mapping. Rarely used groups are boxed to keep [`Attrs`] small.

use std::ops::{Deref, DerefMut};

use crate::literal::Literal;
use crate::rare::{Empty, Rare};
use crate::shape::Shape;
use crate::sharding::{Mesh, Sharding};

/// `slice={[0:8:2], [1:4]}`: one entry per dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceDim {
    pub start: i64,
    pub limit: i64,
    pub stride: i64,
}

/// `padding=0_0x1_2_1`: low, high and interior padding per dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PaddingDim {
    pub low: i64,
    pub high: i64,
    pub interior: i64,
}

/// `window={size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=0x1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WindowDim {
    pub size: i64,
    pub stride: i64,
    pub padding_low: i64,
    pub padding_high: i64,
    pub window_dilation: i64,
    pub base_dilation: i64,
    pub window_reversal: bool,
}

impl Default for WindowDim {
    fn default() -> Self {
        WindowDim {
            size: 1,
            stride: 1,
            padding_low: 0,
            padding_high: 0,
            window_dilation: 1,
            base_dilation: 1,
            window_reversal: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Window {
    pub dims: Vec<WindowDim>,
}

/// `dim_labels=b01f_01io->b01f`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ConvDimensionNumbers {
    pub input_batch_dimension: i64,
    pub input_feature_dimension: i64,
    pub input_spatial_dimensions: Vec<i64>,
    pub kernel_input_feature_dimension: i64,
    pub kernel_output_feature_dimension: i64,
    pub kernel_spatial_dimensions: Vec<i64>,
    pub output_batch_dimension: i64,
    pub output_feature_dimension: i64,
    pub output_spatial_dimensions: Vec<i64>,
}

/// `lhs_batch_dims={0} lhs_contracting_dims={2} rhs_batch_dims={0} rhs_contracting_dims={1}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct DotDimensionNumbers {
    pub lhs_contracting_dimensions: Vec<i64>,
    pub rhs_contracting_dimensions: Vec<i64>,
    pub lhs_batch_dimensions: Vec<i64>,
    pub rhs_batch_dimensions: Vec<i64>,
}

/// Extra dimension numbers of `ragged-dot`: `lhs_ragged_dims={1}, rhs_group_dims={0}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct RaggedDotDimensionNumbers {
    pub lhs_ragged_dimensions: Vec<i64>,
    pub rhs_group_dimensions: Vec<i64>,
}

/// `sparsity=L.1@2:4`: structured sparsity of one dot operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SparsityDescriptor {
    /// 0 = lhs (`L`), 1 = rhs (`R`).
    pub index: i32,
    pub dimension: i64,
    pub n: i32,
    pub m: i32,
}

/// An attribute enum whose every value has one spelling, written once: the text format and
/// the proto's string fields both use it, and a value's position is its proto number.
/// `named_enum! { pub enum E { A = "a", B = "b" } }` gives `E::ALL`, `name`, `from_name`,
/// `number`, `from_number` and `expected` (the spellings as an error message lists them).
macro_rules! named_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in proto-number order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling in HLO text (and in the proto's string field, where there is one).
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The value spelled `text`, exactly.
            pub fn from_name(text: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.name() == text)
            }

            /// The proto's number of the value.
            pub const fn number(self) -> i32 {
                self as i32
            }

            /// The value numbered `n` in the proto.
            pub fn from_number(n: i32) -> Option<$name> {
                usize::try_from(n).ok().and_then(|k| $name::ALL.get(k).copied())
            }

            /// Every spelling, for an error message: `A, B or C`.
            pub fn expected() -> String {
                let names: Vec<&str> = $name::ALL.iter().map(|v| v.name()).collect();
                match names.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} or {last}", rest.join(", "))
                    }
                    _ => names.concat(),
                }
            }
        }
    };
}

named_enum! {
    /// `xla.PrecisionConfig.Precision`.
    pub enum Precision {
        Default = "default",
        High = "high",
        Highest = "highest",
        PackedNibble = "packed_nibble",
    }
}

/// `operand_precision={high,default}` and `algorithm=dot_bf16_bf16_f32`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct PrecisionConfig {
    pub operand_precision: Vec<Precision>,
    /// `xla.PrecisionConfig.Algorithm` value (0 = unset), one of [`DOT_ALGORITHMS`].
    pub algorithm: i32,
}

/// The `xla.PrecisionConfig.Algorithm` values and their text names (`algorithm=` without the
/// `alg_` prefix XLA's enum has).
pub const DOT_ALGORITHMS: &[(&str, i32)] = &[
    ("unset", 0),
    ("dot_any_f8_any_f8_f32", 1),
    ("dot_any_f8_any_f8_f32_fast_accum", 2),
    ("dot_f16_f16_f16", 3),
    ("dot_f16_f16_f32", 4),
    ("dot_bf16_bf16_bf16", 5),
    ("dot_bf16_bf16_f32", 6),
    ("dot_bf16_bf16_f32_x3", 7),
    ("dot_bf16_bf16_f32_x6", 8),
    ("dot_tf32_tf32_f32", 9),
    ("dot_tf32_tf32_f32_x3", 10),
    ("dot_f32_f32_f32", 11),
    ("dot_f64_f64_f64", 12),
    ("dot_bf16_bf16_f32_x9", 13),
];

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct GatherDimensionNumbers {
    pub offset_dims: Vec<i64>,
    pub collapsed_slice_dims: Vec<i64>,
    pub start_index_map: Vec<i64>,
    pub index_vector_dim: i64,
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScatterDimensionNumbers {
    pub update_window_dims: Vec<i64>,
    pub inserted_window_dims: Vec<i64>,
    pub scatter_dims_to_operand_dims: Vec<i64>,
    pub index_vector_dim: i64,
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
}

named_enum! {
    /// `direction=GE` on compare.
    pub enum ComparisonDirection {
        Eq = "EQ",
        Ne = "NE",
        Ge = "GE",
        Gt = "GT",
        Le = "LE",
        Lt = "LT",
    }
}

named_enum! {
    /// `type=TOTALORDER` on compare.
    pub enum ComparisonType {
        Float = "FLOAT",
        TotalOrder = "TOTALORDER",
        Signed = "SIGNED",
        Unsigned = "UNSIGNED",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Comparison {
    pub direction: ComparisonDirection,
    /// `None` when the text gave no `type=` (the default for the element type applies).
    pub ty: Option<ComparisonType>,
}

/// Replica groups of a collective, in the three spellings XLA prints.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReplicaGroups {
    /// `replica_groups={{0,1},{2,3}}`.
    Explicit(Vec<Vec<i64>>),
    /// `replica_groups=[2,4]<=[4,2]T(1,0)`: `num_groups` groups of `group_size`, from an iota
    /// over `reshape_dims` transposed by `transpose_perm` (empty = identity).
    Iota {
        num_groups: i64,
        group_size: i64,
        reshape_dims: Vec<i64>,
        transpose_perm: Vec<i64>,
    },
    /// `replica_groups=mesh['x'=4,'y'=2] {'x'}`: the groups span the named axes of a mesh.
    Mesh(MeshReplicaGroups),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MeshReplicaGroups {
    /// The mesh: axis names and sizes, major to minor, and its device order (plain,
    /// `device_ids=([2,2,2]T(0,2,1))` or `device_ids=(...)`), as a named sharding's mesh.
    pub mesh: Mesh,
    /// The axes a group spans, as written (`'x'`, or a sub-axis such as `'x':(1)2`).
    pub group_axes: Vec<String>,
}

named_enum! {
    /// `kind=kLoop` on fusion.
    pub enum FusionKind {
        Loop = "kLoop",
        Input = "kInput",
        Output = "kOutput",
        Custom = "kCustom",
    }
}

/// `api_version=API_VERSION_TYPED_FFI` etc. (`xla.CustomCallApiVersion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CustomCallApiVersion {
    Unspecified,
    Original,
    StatusReturning,
    StatusReturningUnified,
    TypedFfi,
}

named_enum! {
    /// `schedule=SCHEDULE_LATEST` (`xla.CustomCallSchedule`).
    pub enum CustomCallSchedule {
        None = "SCHEDULE_NONE",
        Latest = "SCHEDULE_LATEST",
        Earliest = "SCHEDULE_EARLIEST",
    }
}

/// `output_to_operand_aliasing={{0}: (1, {})}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OutputOperandAlias {
    pub output_index: Vec<i64>,
    pub operand: i64,
    pub operand_index: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CustomCallAttrs {
    pub target: String,
    pub api_version: CustomCallApiVersion,
    pub has_side_effect: bool,
    /// `operand_layout_constraints={f32[2]{0}, ...}`.
    pub operand_layout_constraints: Option<Vec<Shape>>,
    pub output_to_operand_aliasing: Vec<OutputOperandAlias>,
    pub schedule: CustomCallSchedule,
    /// `padding_type=PADDING_SAME` for convolution-like custom calls (`xla.PaddingType` value).
    pub padding_type: i32,
}

impl Default for CustomCallAttrs {
    fn default() -> Self {
        CustomCallAttrs {
            target: String::new(),
            api_version: CustomCallApiVersion::Original,
            has_side_effect: false,
            operand_layout_constraints: None,
            output_to_operand_aliasing: Vec::new(),
            schedule: CustomCallSchedule::None,
            padding_type: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RandomDistribution {
    Uniform,
    Normal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RandomAlgorithm {
    Default,
    ThreeFry,
    Philox,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FftType {
    Fft,
    Ifft,
    Rfft,
    Irfft,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransposeKind {
    NoTranspose,
    Transpose,
    Adjoint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TriangularSolveOptions {
    pub left_side: bool,
    pub lower: bool,
    pub unit_diagonal: bool,
    pub transpose_a: TransposeKind,
}

/// `domain={kind="sharding", entry={...}, exit={...}}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DomainAttrs {
    pub kind: String,
    pub entry: Option<Sharding>,
    pub exit: Option<Sharding>,
}

/// `result_accuracy={mode=highest}` or `result_accuracy={tolerance={atol=0 rtol=0 ulps=1}}`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResultAccuracy {
    /// `xla.ResultAccuracy.Mode` value.
    Mode(i32),
    Tolerance {
        atol: f64,
        rtol: f64,
        ulps: i64,
    },
}

/// Every attribute an instruction may carry. `Default` is "none given".
///
/// The attributes most instructions use are fields of `Attrs`; the others live in
/// [`RareAttrs`], which is only allocated when one of them is set. `Attrs` dereferences to
/// `RareAttrs`, so all of them read and write as fields: `attrs.dimensions`, `attrs.window`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Attrs {
    pub parameter_number: i64,
    pub literal: Option<Box<Literal>>,
    pub tuple_index: i64,
    /// `dimensions={...}` of broadcast, transpose, reverse, reduce, concatenate, sort, map,
    /// all-gather, all-to-all, reduce-scatter, get/set-dimension-size, ...
    pub dimensions: Option<Vec<i64>>,
    pub comparison: Option<Comparison>,
    pub dot_dims: Option<Box<DotDimensionNumbers>>,
    pub precision: Option<Box<PrecisionConfig>>,
    pub indices_are_sorted: bool,
    pub unique_indices: bool,
    pub channel_id: Option<i64>,
    pub replica_groups: Option<Box<ReplicaGroups>>,
    pub use_global_device_ids: bool,
    pub constrain_layout: bool,
    pub is_host_transfer: bool,
    pub custom_call: Option<Box<CustomCallAttrs>>,
    pub fusion_kind: Option<FusionKind>,
    pub is_stable: bool,
    pub largest: bool,
    /// cholesky's `lower=`.
    pub lower: bool,
    /// call's `is_composite=true`.
    pub is_composite: bool,
    /// collective-broadcast's `has_dynamic_root=true` (newer XLA prints it, `false` by default).
    pub has_dynamic_root: bool,
    /// custom-call: true when the one called computation was written `to_apply=` rather than
    /// `called_computations={...}`.
    pub custom_call_uses_to_apply: bool,
    /// The rarely set attributes; reached through `Deref` (`attrs.window`).
    pub rare: Rare<RareAttrs>,
}

/// The attributes few instructions carry (see [`Attrs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RareAttrs {
    /// `parameter_replication={true,false}`.
    pub parameter_replication: Option<Vec<bool>>,
    pub iota_dimension: i64,
    pub slice: Option<Vec<SliceDim>>,
    pub dynamic_slice_sizes: Option<Vec<i64>>,
    pub padding: Option<Vec<PaddingDim>>,
    pub window: Option<Box<Window>>,
    pub conv_dims: Option<Box<ConvDimensionNumbers>>,
    /// 1 when not given.
    pub feature_group_count: i64,
    /// 1 when not given.
    pub batch_group_count: i64,
    pub ragged_dot_dims: Option<Box<RaggedDotDimensionNumbers>>,
    pub sparsity: Vec<SparsityDescriptor>,
    pub gather_dims: Option<Box<GatherDimensionNumbers>>,
    pub gather_slice_sizes: Option<Vec<i64>>,
    pub scatter_dims: Option<Box<ScatterDimensionNumbers>>,
    pub exponent_bits: i32,
    pub mantissa_bits: i32,
    pub epsilon: f32,
    pub feature_index: i64,
    pub source_target_pairs: Option<Vec<(i64, i64)>>,
    pub infeed_config: Option<String>,
    pub outfeed_config: Option<String>,
    pub outfeed_shape: Option<Box<Shape>>,
    pub distribution: Option<RandomDistribution>,
    pub rng_algorithm: Option<RandomAlgorithm>,
    /// rng-get-and-update-state's `delta=`.
    pub delta: i64,
    pub k: i64,
    pub triangular_solve: Option<TriangularSolveOptions>,
    pub fft_type: Option<FftType>,
    pub fft_length: Option<Vec<i64>>,
    pub domain: Option<Box<DomainAttrs>>,
    pub async_execution_thread: Option<String>,
    pub cross_program_prefetch_index: Option<i64>,
    pub result_accuracy: Option<ResultAccuracy>,
    /// Metadata of the op that an `original_value` or similar free-form attribute names; kept as
    /// written (XLA treats it as an opaque string too).
    pub original_value: Option<String>,
    /// `statistics={visualizing_index=1,stat-0=0.5}` kept as written.
    pub statistics_viz: Option<String>,
    /// scan: `is_reverse`, `num_carries`, `is_associative`.
    pub scan: Option<Box<ScanAttrs>>,
    /// reshape's `inferred_dimension=N`.
    pub inferred_dimension: Option<i64>,
    /// collective-permute's `slice_sizes={{...},...}` (combined form with four operands).
    pub permute_slice_sizes: Option<Vec<Vec<i64>>>,
    /// all-reduce's legacy `mode=...` (accepted by XLA and otherwise ignored), as written.
    pub collective_mode: Option<String>,
    /// `output_to_operand_aliasing={...}` of fusion and async-start (custom-call keeps its own
    /// in [`CustomCallAttrs`]).
    pub output_to_operand_aliasing: Vec<OutputOperandAlias>,
    /// convolution's `conv_kind=...`, as written.
    pub conv_kind: Option<String>,
    /// all-reduce's `all_reduce_id=N` (XLA's id for all-reduces that run together).
    pub all_reduce_id: Option<i64>,
}

static EMPTY_RARE_ATTRS: RareAttrs = RareAttrs {
    parameter_replication: None,
    iota_dimension: 0,
    slice: None,
    dynamic_slice_sizes: None,
    padding: None,
    window: None,
    conv_dims: None,
    feature_group_count: 1,
    batch_group_count: 1,
    ragged_dot_dims: None,
    sparsity: Vec::new(),
    gather_dims: None,
    gather_slice_sizes: None,
    scatter_dims: None,
    exponent_bits: 0,
    mantissa_bits: 0,
    epsilon: 0.0,
    feature_index: 0,
    source_target_pairs: None,
    infeed_config: None,
    outfeed_config: None,
    outfeed_shape: None,
    distribution: None,
    rng_algorithm: None,
    delta: 0,
    k: 0,
    triangular_solve: None,
    fft_type: None,
    fft_length: None,
    domain: None,
    async_execution_thread: None,
    cross_program_prefetch_index: None,
    result_accuracy: None,
    original_value: None,
    statistics_viz: None,
    scan: None,
    inferred_dimension: None,
    permute_slice_sizes: None,
    collective_mode: None,
    output_to_operand_aliasing: Vec::new(),
    conv_kind: None,
    all_reduce_id: None,
};

impl Empty for RareAttrs {
    fn empty() -> &'static RareAttrs {
        &EMPTY_RARE_ATTRS
    }
}

impl Default for RareAttrs {
    fn default() -> Self {
        EMPTY_RARE_ATTRS.clone()
    }
}

impl Deref for Attrs {
    type Target = RareAttrs;

    fn deref(&self) -> &RareAttrs {
        &self.rare
    }
}

impl DerefMut for Attrs {
    fn deref_mut(&mut self) -> &mut RareAttrs {
        &mut self.rare
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ScanAttrs {
    pub dimension: i64,
    pub is_reverse: bool,
    pub num_carries: i64,
    pub is_associative: Option<bool>,
}

#[cfg(test)]
mod named_enum_tests {
    use super::*;

    fn round_trips<E: Copy + PartialEq + std::fmt::Debug>(
        all: &[E],
        name: fn(E) -> &'static str,
        from_name: fn(&str) -> Option<E>,
        number: fn(E) -> i32,
        from_number: fn(i32) -> Option<E>,
    ) {
        for (k, &v) in all.iter().enumerate() {
            assert_eq!(from_name(name(v)), Some(v));
            assert_eq!(number(v), k as i32);
            assert_eq!(from_number(number(v)), Some(v));
        }
        assert_eq!(from_number(-1), None);
        assert_eq!(from_number(all.len() as i32), None);
    }

    #[test]
    fn names_and_numbers_round_trip() {
        use ComparisonDirection as D;
        round_trips(D::ALL, D::name, D::from_name, D::number, D::from_number);
        use ComparisonType as T;
        round_trips(T::ALL, T::name, T::from_name, T::number, T::from_number);
        use FusionKind as F;
        round_trips(F::ALL, F::name, F::from_name, F::number, F::from_number);
        use CustomCallSchedule as S;
        round_trips(S::ALL, S::name, S::from_name, S::number, S::from_number);
        use Precision as P;
        round_trips(P::ALL, P::name, P::from_name, P::number, P::from_number);
    }

    #[test]
    fn error_lists_read_as_the_hand_written_ones_did() {
        assert_eq!(ComparisonDirection::expected(), "EQ, NE, GE, GT, LE or LT");
        assert_eq!(
            ComparisonType::expected(),
            "FLOAT, TOTALORDER, SIGNED or UNSIGNED"
        );
        assert_eq!(FusionKind::expected(), "kLoop, kInput, kOutput or kCustom");
        assert_eq!(
            CustomCallSchedule::expected(),
            "SCHEDULE_NONE, SCHEDULE_LATEST or SCHEDULE_EARLIEST"
        );
        assert_eq!(
            Precision::expected(),
            "default, high, highest or packed_nibble"
        );
    }
}
