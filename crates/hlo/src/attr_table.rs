//! The attribute table: every attribute an instruction carries, described once.
//!
//! Each row of [`ATTR_TABLE`] says, for one attribute: its key in HLO text, its field in
//! `xla.HloInstructionProto`, its field in [`Attrs`], the kind of its value, the opcodes that
//! may carry it, whether the text must give it, and its default. The text parser, the printer,
//! the proto reader and writer, and the check that a proto sets no field its opcode cannot
//! carry all read the table, so adding a plain attribute is adding a row (and a test).
//!
//! Most rows are [`Codec::Plain`]: a number, a flag, a list of integers or a string, read,
//! printed and converted by code that knows only the kind (`text/parser.rs`, `parse_plain`;
//! `text/printer.rs`, `write_plain_attrs`; `proto/import.rs` and `proto/export.rs`). The
//! others are [`Codec::Special`]: attributes whose text spans several keys, prints in an odd
//! place or form, or maps onto proto fields unevenly (dot dimension numbers, a compare's
//! direction and type, custom-call's options). Their rows still give the opcodes and the
//! presence test, and name where their hand-written code lives; they are the exceptions, named
//! here rather than scattered.
//!
//! The printer writes the plain rows together, in table order, after the opcode-specific
//! special attributes and before `async_execution_thread`'s successors; an opcode carries few
//! attributes, so the table order only has to keep each opcode's own attributes in XLA's order.
//! `tests` checks that every [`Attrs`] field has exactly one row and that every plain row reads
//! back from text, through the proto, to the same text.
//!
//! The dimension numbers of dot, ragged-dot, gather and scatter are families: one [`Attrs`]
//! field and one proto message, spelled in text as several keys. Each family is a table of
//! [`DimsField`] rows ([`DOT_DIMS`], [`RAGGED_DOT_DIMS`], [`GATHER_DIMS`], [`SCATTER_DIMS`]),
//! one row per key, in the order XLA prints them; the parser, the printer, the
//! required-attribute check and the proto conversions read those rows.

use crate::attrs::{
    Attrs, DotDimensionNumbers, GatherDimensionNumbers, RaggedDotDimensionNumbers,
    ScatterDimensionNumbers,
};
use crate::instruction::Instruction;
use crate::opcode::Opcode;
use crate::proto::messages as pb;

/// A plain attribute's value, as the text, the IR and the proto exchange it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// Not given (an empty optional).
    Absent,
    Int(i64),
    F32(f32),
    Bool(bool),
    Ints(Vec<i64>),
    Str(String),
    /// A proto `bytes` field; read as UTF-8 text.
    Bytes(Vec<u8>),
}

/// How a plain attribute's value is spelled in HLO text; the string says what the parser
/// expects, for its error message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// `index=3`.
    Int(&'static str),
    /// `exponent_bits=5`: an integer that fits 32 bits.
    Int32(&'static str),
    /// `is_host_transfer=true`.
    Bool,
    /// `fft_length={8,8}`.
    Ints,
    /// `epsilon=0.001`, printed as XLA prints an f32.
    F32,
    /// `infeed_config="..."`: a quoted string.
    Str(&'static str),
}

/// When the printer writes a plain attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Print {
    /// On every instruction of its opcodes (XLA prints it even at its default).
    Always,
    /// When it differs from its default.
    IfSet,
}

/// How a row's value is read and written.
#[derive(Clone, Copy)]
pub(crate) enum Codec {
    /// Read and written by the per-kind code from the accessors.
    Plain {
        text: TextKind,
        print: Print,
        /// The name under which the proto reader asks whether the attribute is given
        /// (`proto/import.rs`, `OPTIONAL_FIELDS`), for optional values whose default proto
        /// value could also be a given one.
        presence: Option<&'static str>,
        get: fn(&Attrs) -> Value,
        set: fn(&mut Attrs, Value) -> Result<(), String>,
        get_proto: fn(&pb::HloInstructionProto) -> Value,
        set_proto: fn(&mut pb::HloInstructionProto, Value) -> Result<(), String>,
    },
    /// Hand-written: the string says why the attribute is not plain (read by people and the
    /// tests, not by code).
    Special(#[allow(dead_code)] &'static str),
}

/// One attribute (see the module docs).
#[derive(Clone, Copy)]
pub(crate) struct AttrRow {
    /// The key in HLO text (for a special row spanning several keys, the first).
    pub key: &'static str,
    /// The field of `xla.HloInstructionProto` (`tessera.x` for Tessera's extension message).
    pub proto: &'static str,
    /// The field of [`Attrs`] (or [`crate::RareAttrs`], reached through it); the tests check
    /// that every field has exactly one row.
    #[allow(dead_code)]
    pub field: &'static str,
    /// Whether an opcode may carry it.
    pub on: fn(Opcode) -> bool,
    /// Whether the text must give it on the opcodes that carry it.
    pub required: bool,
    /// Its default, as Rust writes it (what "not given" reads as); documentation, and what
    /// `is_set` compares against for the plain rows.
    #[allow(dead_code)]
    pub default: &'static str,
    /// Whether an instruction has it set (differs from the default).
    pub is_set: fn(&Instruction) -> bool,
    pub codec: Codec,
}

/// Converts between a field (of [`Attrs`] or of the proto) and a [`Value`].
pub(crate) trait Slot {
    fn to_value(&self) -> Value;
    fn set_value(&mut self, v: Value) -> Result<(), String>;
}

fn mismatch(v: &Value, want: &str) -> String {
    format!("expected {want}, found {v:?}")
}

impl Slot for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::Int(x) => *self = x,
            Value::Absent => *self = 0,
            v => return Err(mismatch(&v, "an integer")),
        }
        Ok(())
    }
}

impl Slot for i32 {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::Int(x) => {
                *self = i32::try_from(x).map_err(|_| format!("{x} does not fit 32 bits"))?
            }
            Value::Absent => *self = 0,
            v => return Err(mismatch(&v, "an integer")),
        }
        Ok(())
    }
}

impl Slot for f32 {
    fn to_value(&self) -> Value {
        Value::F32(*self)
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::F32(x) => *self = x,
            Value::Absent => *self = 0.0,
            v => return Err(mismatch(&v, "a number")),
        }
        Ok(())
    }
}

impl Slot for bool {
    fn to_value(&self) -> Value {
        Value::Bool(*self)
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::Bool(x) => *self = x,
            Value::Absent => *self = false,
            v => return Err(mismatch(&v, "true or false")),
        }
        Ok(())
    }
}

impl Slot for Vec<i64> {
    fn to_value(&self) -> Value {
        Value::Ints(self.clone())
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::Ints(x) => *self = x,
            Value::Absent => self.clear(),
            v => return Err(mismatch(&v, "a list of integers")),
        }
        Ok(())
    }
}

impl Slot for String {
    fn to_value(&self) -> Value {
        Value::Str(self.clone())
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::Str(x) => *self = x,
            Value::Bytes(b) => *self = String::from_utf8(b).map_err(|_| "is not UTF-8")?,
            Value::Absent => self.clear(),
            v => return Err(mismatch(&v, "a string")),
        }
        Ok(())
    }
}

/// A proto `bytes` field holding text.
impl Slot for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Bytes(self.clone())
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        match v {
            Value::Bytes(x) => *self = x,
            Value::Str(s) => *self = s.into_bytes(),
            Value::Absent => self.clear(),
            v => return Err(mismatch(&v, "a string")),
        }
        Ok(())
    }
}

impl<T: Slot + Default> Slot for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Absent, Slot::to_value)
    }
    fn set_value(&mut self, v: Value) -> Result<(), String> {
        if v == Value::Absent {
            *self = None;
        } else {
            let mut x = T::default();
            x.set_value(v)?;
            *self = Some(x);
        }
        Ok(())
    }
}

/// `attr_table! { plain "key" => field: Kind, proto field [given "presence"], on [Opcodes],
/// Print, required, default value; ... special "key" => field, proto "name", on (predicate), set (test),
/// "where its code lives"; ... }`. The opcodes are a list or, in parentheses, a predicate.
macro_rules! attr_table {
    (@on [$($op:ident)|+]) => {
        |op: Opcode| matches!(op, $(Opcode::$op)|+)
    };
    (@on ($pred:expr)) => {
        $pred
    };
    (@presence) => { None };
    (@presence $p:literal) => { Some($p) };
    (@required required) => { true };
    (@required optional) => { false };
    ($(
        $codec:ident $key:literal => $field:ident $(. $sub:ident)?
        $(: $kind:expr, proto $proto:ident $(given $presence:literal)?, on $plain_on:tt, $print:ident,
           $req:ident, default $default:expr)?
        $(, proto $sproto:literal, on $special_on:tt, set $set:expr, $why:literal)?
        ;
    )*) => {
        /// Every attribute, in the order the printer writes the plain ones.
        pub(crate) static ATTR_TABLE: &[AttrRow] = &[$(
            attr_table!(@row $codec $key => $field $(. $sub)?
                $(: $kind, proto $proto $(given $presence)?, on $plain_on, $print, $req,
                   default $default)?
                $(, proto $sproto, on $special_on, set $set, $why)?)
        ),*];
    };
    (@row plain $key:literal => $field:ident: $kind:expr, proto $proto:ident
        $(given $presence:literal)?, on $on:tt, $print:ident, $req:ident, default $default:expr) => {
        AttrRow {
            key: $key,
            proto: stringify!($proto),
            field: stringify!($field),
            on: attr_table!(@on $on),
            required: attr_table!(@required $req),
            default: stringify!($default),
            is_set: |i: &Instruction| differs(&i.attrs.$field, &$default),
            codec: Codec::Plain {
                text: $kind,
                print: Print::$print,
                presence: attr_table!(@presence $($presence)?),
                get: |a: &Attrs| a.$field.to_value(),
                set: |a: &mut Attrs, v: Value| a.$field.set_value(v),
                get_proto: |p: &pb::HloInstructionProto| p.$proto.to_value(),
                set_proto: |p: &mut pb::HloInstructionProto, v: Value| p.$proto.set_value(v),
            },
        }
    };
    (@row special $key:literal => $field:ident $(. $sub:ident)?, proto $proto:literal,
        on $on:tt, set $set:expr, $why:literal) => {
        AttrRow {
            key: $key,
            proto: $proto,
            field: concat!(stringify!($field) $(, ".", stringify!($sub))?),
            on: attr_table!(@on $on),
            required: false,
            default: "",
            is_set: $set,
            codec: Codec::Special($why),
        }
    };
}

/// Whether a value is not the default (a helper, so that the table may compare any type).
fn differs<T: PartialEq>(value: &T, default: &T) -> bool {
    value != default
}

/// The collectives that take `replica_groups` (and `channel_id`).
fn grouped(op: Opcode) -> bool {
    op.takes_replica_groups()
}

fn dot_like(op: Opcode) -> bool {
    matches!(op, Opcode::Dot | Opcode::RaggedDot | Opcode::ScaledDot)
}

fn takes_called_computations(op: Opcode) -> bool {
    use Opcode::*;
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
}

fn takes_channel_id(op: Opcode) -> bool {
    use Opcode::*;
    grouped(op)
        || matches!(
            op,
            CollectivePermute | CollectivePermuteStart | Send | SendDone | Recv | RecvDone
        )
}

attr_table! {
    // The rows the proto check reads first keep the order of the old per-field table, so
    // that a proto with several misplaced fields names the same one.
    special "parameter_number" => parameter_number, proto "parameter_number",
        on [Parameter], set |i| i.attrs.parameter_number != 0,
        "written as the parameter's operand: parameter(3)";
    special "literal" => literal, proto "literal",
        on [Constant | CustomCall], set |i| i.attrs.literal.is_some(),
        "a constant's operand, or custom-call's literal=shape value";
    special "to_apply" => custom_call_uses_to_apply, proto "called_computation_ids",
        on (takes_called_computations), set |i| !i.called.is_empty(),
        "called computations: to_apply, calls, condition/body, branches; custom-call's \
         spelling flag rides in the Tessera extension";
    special "channel_id" => channel_id, proto "channel_id",
        on (takes_channel_id), set |i| i.attrs.channel_id.is_some(),
        "printed first, before every other attribute";
    special "replica_groups" => replica_groups, proto "replica_groups",
        on (grouped), set |i| i.attrs.replica_groups.is_some(),
        "three spellings and three proto forms (explicit, iota, mesh)";
    special "constrain_layout" => constrain_layout, proto "constrain_layout",
        on [AllGather | AllGatherStart | AllReduce | AllReduceStart | ReduceScatter | AllToAll],
        set |i| i.attrs.constrain_layout,
        "on custom-call the proto field means operand_layout_constraints";
    special "use_global_device_ids" => use_global_device_ids, proto "use_global_device_ids",
        on [AllGather | AllGatherStart | AllReduce | AllReduceStart | ReduceScatter],
        set |i| i.attrs.use_global_device_ids,
        "reduce-scatter prints it before dimensions, the others after";
    special "dimensions" => dimensions, proto "dimensions",
        on [AllGather | AllGatherStart | ReduceScatter | AllToAll | RaggedAllToAll | Sort
            | Broadcast | Concatenate | Map | Scan | Reduce | Reverse | Transpose
            | GetDimensionSize | SetDimensionSize],
        set |i| i.attrs.dimensions.is_some(),
        "shares the proto field with iota's and scan's dimension; a broadcast prints {} when absent";
    special "mode" => collective_mode, proto "tessera.collective_mode",
        on [AllReduce | AllReduceStart | ReduceScatter], set |i| i.attrs.collective_mode.is_some(),
        "a bare word kept in the Tessera extension";
    special "source_target_pairs" => source_target_pairs, proto "source_target_pairs",
        on [CollectivePermute | CollectivePermuteStart],
        set |i| i.attrs.source_target_pairs.is_some(), "a list of pairs";
    special "slice_sizes" => permute_slice_sizes, proto "tessera.permute_slice_sizes",
        on [CollectivePermute | CollectivePermuteStart],
        set |i| i.attrs.permute_slice_sizes.is_some(), "a list of lists, flattened in the proto";
    special "slice" => slice, proto "slice_dimensions",
        on [Slice], set |i| i.attrs.slice.is_some(), "slice={[0:8:2], [1:4]}";
    special "padding" => padding, proto "padding_config",
        on [Pad], set |i| i.attrs.padding.is_some(), "padding=0_0x1_2_1";
    special "custom_call_target" => custom_call, proto "custom_call_target",
        on [CustomCall], set |i| i.attrs.custom_call.is_some(),
        "custom-call's options: target, api_version, schedule, side effect, layouts, aliasing";
    special "window" => window, proto "window",
        on [ReduceWindow | Convolution | SelectAndScatter | CustomCall],
        set |i| i.attrs.window.is_some(), "window={size=3x3 ...}";
    special "dim_labels" => conv_dims, proto "convolution_dimension_numbers",
        on [Convolution | CustomCall], set |i| i.attrs.conv_dims.is_some(), "dim_labels=b01f_01io->b01f";
    special "feature_group_count" => feature_group_count, proto "feature_group_count",
        on [Convolution | CustomCall], set |i| i.attrs.feature_group_count != 1,
        "default 1 (the proto's 0 reads as 1); printed before conv_kind and operand_precision";
    special "batch_group_count" => batch_group_count, proto "batch_group_count",
        on [Convolution | CustomCall], set |i| i.attrs.batch_group_count != 1,
        "as feature_group_count";
    special "conv_kind" => conv_kind, proto "tessera.conv_kind",
        on [Convolution], set |i| i.attrs.conv_kind.is_some(), "a bare word in the Tessera extension";
    special "lhs_contracting_dims" => dot_dims, proto "dot_dimension_numbers",
        on (dot_like), set |i| i.attrs.dot_dims.is_some(),
        "the DOT_DIMS family; nested in the ragged numbers for ragged-dot";
    special "lhs_ragged_dims" => ragged_dot_dims, proto "ragged_dot_dimension_numbers",
        on [RaggedDot], set |i| i.attrs.ragged_dot_dims.is_some(), "the RAGGED_DOT_DIMS family";
    special "operand_precision" => precision, proto "precision_config.operand_precision",
        on (|op| dot_like(op) || matches!(op, Opcode::Convolution | Opcode::CustomCall)),
        set |i| i.attrs.precision.as_ref().is_some_and(|p| !p.operand_precision.is_empty()),
        "operand_precision and dot's algorithm= share one proto message";
    special "algorithm" => precision.algorithm, proto "precision_config.algorithm",
        on [Dot | ScaledDot], set |i| i.attrs.precision.as_ref().is_some_and(|p| p.algorithm != 0),
        "a dot algorithm's name, in the precision message";
    special "offset_dims" => gather_dims, proto "gather_dimension_numbers",
        on [Gather], set |i| i.attrs.gather_dims.is_some(), "the GATHER_DIMS family";
    special "update_window_dims" => scatter_dims, proto "scatter_dimension_numbers",
        on [Scatter], set |i| i.attrs.scatter_dims.is_some(), "the SCATTER_DIMS family";
    special "direction" => comparison, proto "comparison_direction",
        on [Compare], set |i| i.attrs.comparison.is_some(),
        "direction=, type= (or order=), and three proto strings";
    special "is_stable" => is_stable, proto "is_stable",
        on [Sort | TopK], set |i| i.attrs.is_stable,
        "top-k always prints k, largest and is_stable together; sort only when true";
    special "largest" => largest, proto "largest",
        on [TopK], set |i| i.attrs.largest, "printed with k and is_stable";
    special "k" => k, proto "k", on [TopK], set |i| i.attrs.k != 0, "printed with largest and is_stable";
    special "distribution" => distribution, proto "distribution",
        on [Rng], set |i| i.attrs.distribution.is_some(), "rng_uniform or rng_normal";
    special "algorithm" => rng_algorithm, proto "rng_algorithm",
        on [RngBitGenerator], set |i| i.attrs.rng_algorithm.is_some(),
        "shares its key with dot's algorithm";
    special "left_side" => triangular_solve, proto "triangular_solve_options",
        on [TriangularSolve], set |i| i.attrs.triangular_solve.is_some(), "four keys, one message";
    special "lower" => lower, proto "cholesky_options",
        on [Cholesky], set |i| i.attrs.lower, "shares its key with triangular-solve's lower";
    special "fft_type" => fft_type, proto "fft_type",
        on [Fft], set |i| i.attrs.fft_type.is_some(), "FFT, IFFT, RFFT or IRFFT";
    special "outfeed_shape" => outfeed_shape, proto "outfeed_shape",
        on [Outfeed], set |i| i.attrs.outfeed_shape.is_some(),
        "absent, it is the operand's shape (printed so)";
    special "kind" => fusion_kind, proto "fusion_kind",
        on [Fusion], set |i| i.attrs.fusion_kind.is_some(), "kLoop, kInput, kOutput or kCustom";
    special "domain" => domain, proto "domain_entry_sharding",
        on [Domain], set |i| i.attrs.domain.is_some(), "a braced kind and two shardings";
    special "num_carries" => scan, proto "is_reverse",
        on [Scan], set |i| i.attrs.scan.is_some(), "three keys; the dimension rides in dimensions";
    special "is_composite" => is_composite, proto "is_composite",
        on [Call], set |i| i.attrs.is_composite, "printed after the called computation";
    special "inferred_dimension" => inferred_dimension, proto "tessera.inferred_dimension",
        on [Reshape], set |i| i.attrs.inferred_dimension.is_some(), "kept in the Tessera extension";
    special "output_to_operand_aliasing" => output_to_operand_aliasing,
        proto "output_operand_aliasing",
        on [AsyncStart | Fusion], set |i| !i.attrs.output_to_operand_aliasing.is_empty(),
        "custom-call keeps its own in its options";
    special "result_accuracy" => result_accuracy, proto "result_accuracy",
        on (Opcode::takes_result_accuracy), set |i| i.attrs.result_accuracy.is_some(),
        "{mode=...} or {tolerance={...}}";
    special "iota_dimension" => iota_dimension, proto "dimensions",
        on [Iota], set |i| i.attrs.iota_dimension != 0, "kept in the proto's dimensions list";
    special "has_dynamic_root" => has_dynamic_root, proto "",
        on [CollectiveBroadcast], set |_| false, "text only: the proto has no field for it";
    special "parameter_replication" => parameter_replication, proto "parameter_replication",
        on (|_| true), set |_| false, "any instruction; a list of flags or one flag";
    special "sparsity" => sparsity, proto "dot_sparsity",
        on [Dot], set |_| false, "proto only: the text has no spelling for it yet";
    special "statistics" => statistics_viz, proto "statistics_viz",
        on (|_| true), set |_| false, "kept as written";
    special "origin" => original_value, proto "original_value",
        on (|_| true), set |_| false, "kept as written";

    // The plain rows, in the order the printer writes them.
    plain "index" => tuple_index: TextKind::Int("a tuple index"), proto tuple_index,
        on [GetTupleElement], Always, required, default 0;
    plain "is_host_transfer" => is_host_transfer: TextKind::Bool, proto is_host_transfer,
        on [Send | SendDone | Recv | RecvDone], IfSet, optional, default false;
    plain "dynamic_slice_sizes" => dynamic_slice_sizes: TextKind::Ints,
        proto dynamic_slice_sizes given "dynamic_slice_sizes",
        on [DynamicSlice], IfSet, required, default None;
    plain "slice_sizes" => gather_slice_sizes: TextKind::Ints,
        proto gather_slice_sizes given "gather_slice_sizes",
        on [Gather], IfSet, required, default None;
    plain "indices_are_sorted" => indices_are_sorted: TextKind::Bool, proto indices_are_sorted,
        on [Gather | Scatter], IfSet, optional, default false;
    plain "unique_indices" => unique_indices: TextKind::Bool, proto unique_indices,
        on [Scatter], IfSet, optional, default false;
    plain "epsilon" => epsilon: TextKind::F32, proto epsilon,
        on [BatchNormTraining | BatchNormInference | BatchNormGrad], Always, required, default 0.0;
    plain "feature_index" => feature_index: TextKind::Int("a feature index"), proto feature_index,
        on [BatchNormTraining | BatchNormInference | BatchNormGrad], Always, required, default 0;
    plain "exponent_bits" => exponent_bits: TextKind::Int32("a bit count"), proto exponent_bits,
        on [ReducePrecision], Always, required, default 0;
    plain "mantissa_bits" => mantissa_bits: TextKind::Int32("a bit count"), proto mantissa_bits,
        on [ReducePrecision], Always, required, default 0;
    plain "delta" => delta: TextKind::Int("a delta"), proto delta,
        on [RngGetAndUpdateState], Always, required, default 0;
    plain "fft_length" => fft_length: TextKind::Ints, proto fft_length given "fft_length",
        on [Fft], IfSet, required, default None;
    plain "infeed_config" => infeed_config: TextKind::Str("a string"),
        proto infeed_config given "infeed_config",
        on [Infeed], IfSet, optional, default None;
    plain "outfeed_config" => outfeed_config: TextKind::Str("a string"),
        proto outfeed_config given "outfeed_config",
        on [Outfeed], IfSet, optional, default None;
    plain "cross_program_prefetch_index" => cross_program_prefetch_index:
        TextKind::Int32("an index"), proto cross_program_prefetch_index,
        on [CopyStart], IfSet, optional, default None;
    plain "all_reduce_id" => all_reduce_id: TextKind::Int("an all-reduce id"),
        proto all_reduce_id, on [AllReduce | AllReduceStart], IfSet, optional, default None;
    plain "async_execution_thread" => async_execution_thread: TextKind::Str("a thread name"),
        proto async_execution_thread given "async_execution_thread",
        on [AsyncStart | AsyncUpdate | AsyncDone], IfSet, optional, default None;
}

/// One field of a dimension-numbers family: its key in text, how its value is spelled, whether
/// the text must give it, when it is printed, and how it moves between the IR struct `T` and
/// the proto message `P` (which name the field alike).
pub(crate) struct DimsField<T: 'static, P: 'static> {
    pub key: &'static str,
    pub text: TextKind,
    pub required: bool,
    /// `IfSet`: printed only when not empty.
    pub print: Print,
    pub get: fn(&T) -> Value,
    pub set: fn(&mut T, Value) -> Result<(), String>,
    pub to_proto: fn(&T, &mut P),
    pub from_proto: fn(&P, &mut T),
}

/// `dims_family! { NAME: IrStruct => ProtoMessage { "key" => field: TextKind, Print, required; ... } }`.
macro_rules! dims_family {
    ($(#[$doc:meta])* $name:ident: $ir:ty => $pb:ty {
        $($key:literal => $field:ident: $text:expr, $print:ident, $req:ident;)*
    }) => {
        $(#[$doc])*
        pub(crate) static $name: &[DimsField<$ir, $pb>] = &[$(
            DimsField {
                key: $key,
                text: $text,
                required: attr_table!(@required $req),
                print: Print::$print,
                get: |d: &$ir| d.$field.to_value(),
                set: |d: &mut $ir, v: Value| d.$field.set_value(v),
                to_proto: |d: &$ir, p: &mut $pb| p.$field = d.$field.clone(),
                from_proto: |p: &$pb, d: &mut $ir| d.$field = p.$field.clone(),
            }
        ),*];
    };
}

dims_family! {
    /// `lhs_batch_dims={0}, lhs_contracting_dims={2}, ...` on dot, ragged-dot and scaled-dot.
    DOT_DIMS: DotDimensionNumbers => pb::DotDimensionNumbers {
        "lhs_batch_dims" => lhs_batch_dimensions: TextKind::Ints, IfSet, optional;
        "lhs_contracting_dims" => lhs_contracting_dimensions: TextKind::Ints, Always, optional;
        "rhs_batch_dims" => rhs_batch_dimensions: TextKind::Ints, IfSet, optional;
        "rhs_contracting_dims" => rhs_contracting_dimensions: TextKind::Ints, Always, optional;
    }
}

dims_family! {
    /// ragged-dot's own numbers (XLA's proto nests the dot numbers in the same message).
    RAGGED_DOT_DIMS: RaggedDotDimensionNumbers => pb::RaggedDotDimensionNumbers {
        "lhs_ragged_dims" => lhs_ragged_dimensions: TextKind::Ints, IfSet, optional;
        "rhs_group_dims" => rhs_group_dimensions: TextKind::Ints, IfSet, optional;
    }
}

dims_family! {
    /// gather's dimension numbers.
    GATHER_DIMS: GatherDimensionNumbers => pb::GatherDimensionNumbers {
        "offset_dims" => offset_dims: TextKind::Ints, Always, required;
        "collapsed_slice_dims" => collapsed_slice_dims: TextKind::Ints, Always, required;
        "start_index_map" => start_index_map: TextKind::Ints, Always, required;
        "operand_batching_dims" => operand_batching_dims: TextKind::Ints, IfSet, optional;
        "start_indices_batching_dims" => start_indices_batching_dims: TextKind::Ints, IfSet,
            optional;
        "index_vector_dim" => index_vector_dim: TextKind::Int("a dimension"), Always, required;
    }
}

dims_family! {
    /// scatter's dimension numbers.
    SCATTER_DIMS: ScatterDimensionNumbers => pb::ScatterDimensionNumbers {
        "update_window_dims" => update_window_dims: TextKind::Ints, Always, required;
        "inserted_window_dims" => inserted_window_dims: TextKind::Ints, Always, required;
        "scatter_dims_to_operand_dims" => scatter_dims_to_operand_dims: TextKind::Ints, Always,
            required;
        "input_batching_dims" => input_batching_dims: TextKind::Ints, IfSet, optional;
        "scatter_indices_batching_dims" => scatter_indices_batching_dims: TextKind::Ints, IfSet,
            optional;
        "index_vector_dim" => index_vector_dim: TextKind::Int("a dimension"), Always, required;
    }
}

/// The family field for `key`, if the family has one.
pub(crate) fn dims_field<T, P>(
    family: &'static [DimsField<T, P>],
    key: &str,
) -> Option<&'static DimsField<T, P>> {
    family.iter().find(|f| f.key == key)
}

/// The keys the text must give for a family.
pub(crate) fn required_dims<T, P>(family: &[DimsField<T, P>]) -> Vec<&'static str> {
    family
        .iter()
        .filter(|f| f.required)
        .map(|f| f.key)
        .collect()
}

/// A family's IR struct as its proto message.
pub(crate) fn dims_to_proto<T, P: Default>(family: &[DimsField<T, P>], d: &T) -> P {
    let mut p = P::default();
    for f in family {
        (f.to_proto)(d, &mut p);
    }
    p
}

/// A family's proto message as its IR struct.
pub(crate) fn dims_from_proto<T: Default, P>(family: &[DimsField<T, P>], p: &P) -> T {
    let mut d = T::default();
    for f in family {
        (f.from_proto)(p, &mut d);
    }
    d
}

/// The plain row for `key` on `op`, if the table has one.
pub(crate) fn plain_row(key: &str, op: Opcode) -> Option<&'static AttrRow> {
    ATTR_TABLE
        .iter()
        .find(|r| r.key == key && matches!(r.codec, Codec::Plain { .. }) && (r.on)(op))
}

/// The plain rows, in table order.
pub(crate) fn plain_rows() -> impl Iterator<Item = &'static AttrRow> {
    ATTR_TABLE
        .iter()
        .filter(|r| matches!(r.codec, Codec::Plain { .. }))
}

/// The first proto field set on `i` that its opcode cannot carry. A proto can set any field on
/// any instruction, while the text has a place for an attribute only on the opcodes that take
/// it; without this check a misplaced field printed as text that does not parse back, or was
/// silently dropped. A field at its default is never misplaced: a proto cannot tell it from an
/// unset one.
pub(crate) fn misplaced_field(i: &Instruction) -> Option<&'static str> {
    ATTR_TABLE
        .iter()
        .find(|row| !row.proto.is_empty() && (row.is_set)(i) && !(row.on)(i.opcode))
        .map(|row| row.proto)
}

#[cfg(test)]
mod tests;
