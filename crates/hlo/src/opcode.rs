//! Every opcode XLA's text format can hold (the 136 entries of `xla/hlo/ir/hlo_opcode.h` as of 2026).

use std::fmt;

macro_rules! opcodes {
    ($( $variant:ident => $name:literal, $arity:literal; )*) => {
        /// An HLO opcode.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opcode {
            $( $variant, )*
        }

        impl Opcode {
            /// Every opcode, in XLA's (alphabetical by enum name) order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$variant, )* ];

            /// The name the text format uses (`add`, `get-tuple-element`, ...).
            pub fn name(self) -> &'static str {
                match self { $( Opcode::$variant => $name, )* }
            }

            /// Looks an opcode up by its text name.
            pub fn from_name(name: &str) -> Option<Opcode> {
                match name { $( $name => Some(Opcode::$variant), )* _ => None }
            }

            /// Number of operands, or `None` for variadic opcodes.
            pub fn arity(self) -> Option<usize> {
                let a: i32 = match self { $( Opcode::$variant => $arity, )* };
                if a < 0 { None } else { Some(a as usize) }
            }
        }
    };
}

opcodes! {
    Abs => "abs", 1;
    Acos => "acos", 1;
    Acosh => "acosh", 1;
    Add => "add", 2;
    AddDependency => "add-dependency", 2;
    AfterAll => "after-all", -1;
    AllGather => "all-gather", -1;
    AllGatherDone => "all-gather-done", 1;
    AllGatherStart => "all-gather-start", -1;
    AllReduce => "all-reduce", -1;
    AllReduceDone => "all-reduce-done", 1;
    AllReduceStart => "all-reduce-start", -1;
    AllToAll => "all-to-all", -1;
    And => "and", 2;
    Asin => "asin", 1;
    Asinh => "asinh", 1;
    AsyncDone => "async-done", 1;
    AsyncStart => "async-start", -1;
    AsyncUpdate => "async-update", -1;
    Atan => "atan", 1;
    Atan2 => "atan2", 2;
    Atanh => "atanh", 1;
    BatchNormGrad => "batch-norm-grad", 5;
    BatchNormInference => "batch-norm-inference", 5;
    BatchNormTraining => "batch-norm-training", 3;
    Bitcast => "bitcast", 1;
    BitcastConvert => "bitcast-convert", 1;
    Broadcast => "broadcast", 1;
    Call => "call", -1;
    Cbrt => "cbrt", 1;
    Ceil => "ceil", 1;
    Cholesky => "cholesky", 1;
    Clamp => "clamp", 3;
    Clz => "count-leading-zeros", 1;
    CollectiveBroadcast => "collective-broadcast", -1;
    CollectivePermute => "collective-permute", -1;
    CollectivePermuteDone => "collective-permute-done", 1;
    CollectivePermuteStart => "collective-permute-start", -1;
    CollectiveReduce => "collective-reduce", -1;
    Compare => "compare", 2;
    Complex => "complex", 2;
    Concatenate => "concatenate", -1;
    Conditional => "conditional", -1;
    Constant => "constant", 0;
    Convert => "convert", 1;
    Convolution => "convolution", -1;
    Copy => "copy", 1;
    CopyDone => "copy-done", 1;
    CopyStart => "copy-start", 1;
    Cos => "cosine", 1;
    Cosh => "cosh", 1;
    CustomCall => "custom-call", -1;
    Divide => "divide", 2;
    Domain => "domain", 1;
    Dot => "dot", 2;
    DynamicReshape => "dynamic-reshape", -1;
    DynamicSlice => "dynamic-slice", -1;
    DynamicUpdateSlice => "dynamic-update-slice", -1;
    Erf => "erf", 1;
    Exp => "exponential", 1;
    Expm1 => "exponential-minus-one", 1;
    Fft => "fft", 1;
    Floor => "floor", 1;
    Fusion => "fusion", -1;
    Gather => "gather", 2;
    GetDimensionSize => "get-dimension-size", 1;
    GetTupleElement => "get-tuple-element", 1;
    Imag => "imag", 1;
    Infeed => "infeed", 1;
    Iota => "iota", 0;
    IsFinite => "is-finite", 1;
    Log => "log", 1;
    Log1p => "log-plus-one", 1;
    Logistic => "logistic", 1;
    Map => "map", -1;
    Maximum => "maximum", 2;
    Minimum => "minimum", 2;
    Mulhi => "mulhi", 2;
    Multiply => "multiply", 2;
    Negate => "negate", 1;
    Not => "not", 1;
    OptimizationBarrier => "opt-barrier", 1;
    Or => "or", 2;
    Outfeed => "outfeed", 2;
    Pad => "pad", 2;
    Parameter => "parameter", 0;
    PartitionId => "partition-id", 0;
    PopulationCount => "popcnt", 1;
    Power => "power", 2;
    RaggedAllToAll => "ragged-all-to-all", 6;
    RaggedDot => "ragged-dot", 3;
    Real => "real", 1;
    Recv => "recv", 1;
    RecvDone => "recv-done", 1;
    Reduce => "reduce", -1;
    ReducePrecision => "reduce-precision", 1;
    ReduceScatter => "reduce-scatter", -1;
    ReduceWindow => "reduce-window", -1;
    Remainder => "remainder", 2;
    ReplicaId => "replica-id", 0;
    Reshape => "reshape", 1;
    Reverse => "reverse", 1;
    Rng => "rng", -1;
    RngBitGenerator => "rng-bit-generator", 1;
    RngGetAndUpdateState => "rng-get-and-update-state", 0;
    RoundNearestAfz => "round-nearest-afz", 1;
    RoundNearestEven => "round-nearest-even", 1;
    Rsqrt => "rsqrt", 1;
    ScaledDot => "scaled-dot", 4;
    Scan => "scan", -1;
    Scatter => "scatter", -1;
    Select => "select", 3;
    SelectAndScatter => "select-and-scatter", 3;
    Send => "send", 2;
    SendDone => "send-done", 1;
    SetDimensionSize => "set-dimension-size", 2;
    ShiftLeft => "shift-left", 2;
    ShiftRightArithmetic => "shift-right-arithmetic", 2;
    ShiftRightLogical => "shift-right-logical", 2;
    Shuffle => "shuffle", 1;
    Sign => "sign", 1;
    Sin => "sine", 1;
    Sinh => "sinh", 1;
    Slice => "slice", 1;
    Sort => "sort", -1;
    Sqrt => "sqrt", 1;
    StochasticConvert => "stochastic-convert", 2;
    Subtract => "subtract", 2;
    Tan => "tan", 1;
    Tanh => "tanh", 1;
    TopK => "topk", 1;
    Transpose => "transpose", 1;
    TriangularSolve => "triangular-solve", 2;
    Tuple => "tuple", -1;
    While => "while", 1;
    Xor => "xor", 2;
}

impl Opcode {
    /// Element-wise unary operations (shape in = shape out, up to the element type).
    pub fn is_elementwise_unary(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Abs | Acos
                | Acosh
                | Asin
                | Asinh
                | Atan
                | Atanh
                | Cbrt
                | Ceil
                | Clz
                | Convert
                | BitcastConvert
                | Copy
                | Cos
                | Cosh
                | Erf
                | Exp
                | Expm1
                | Floor
                | Imag
                | IsFinite
                | Log
                | Log1p
                | Logistic
                | Negate
                | Not
                | PopulationCount
                | Real
                | ReducePrecision
                | RoundNearestAfz
                | RoundNearestEven
                | Rsqrt
                | Sign
                | Sin
                | Sinh
                | Sqrt
                | Tan
                | Tanh
        )
    }

    /// Element-wise binary operations.
    pub fn is_elementwise_binary(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Add | And
                | Atan2
                | Complex
                | Compare
                | Divide
                | Maximum
                | Minimum
                | Mulhi
                | Multiply
                | Or
                | Power
                | Remainder
                | ShiftLeft
                | ShiftRightArithmetic
                | ShiftRightLogical
                | StochasticConvert
                | Subtract
                | Xor
        )
    }

    /// Element-wise operations of any arity (unary, binary, select, clamp).
    pub fn is_elementwise(self) -> bool {
        self.is_elementwise_unary()
            || self.is_elementwise_binary()
            || matches!(self, Opcode::Select | Opcode::Clamp)
    }

    /// True if the order of the two operands does not matter.
    pub fn is_commutative(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Add | Multiply | Mulhi | Maximum | Minimum | And | Or | Xor
        )
    }

    pub fn is_async(self) -> bool {
        matches!(
            self,
            Opcode::AsyncStart | Opcode::AsyncUpdate | Opcode::AsyncDone
        )
    }

    /// The collectives that take `replica_groups=` (and `channel_id=`).
    pub fn takes_replica_groups(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            AllGather
                | AllGatherStart
                | AllReduce
                | AllReduceStart
                | ReduceScatter
                | AllToAll
                | RaggedAllToAll
                | CollectiveBroadcast
        )
    }

    /// The unary operations that take `result_accuracy=`.
    pub fn takes_result_accuracy(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            Acos | Acosh
                | Asin
                | Asinh
                | Atanh
                | Expm1
                | Log
                | Log1p
                | Logistic
                | Sqrt
                | Cbrt
                | Rsqrt
                | Tanh
                | Erf
                | Sin
                | Sinh
                | Cos
                | Cosh
                | Tan
                | Exp
        )
    }

    /// Collective communication operations (synchronous and the start of asynchronous ones).
    pub fn is_collective(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            AllGather
                | AllGatherStart
                | AllReduce
                | AllReduceStart
                | AllToAll
                | CollectiveBroadcast
                | CollectivePermute
                | CollectivePermuteStart
                | CollectiveReduce
                | RaggedAllToAll
                | ReduceScatter
        )
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_count() {
        assert_eq!(Opcode::ALL.len(), 136);
        for &op in Opcode::ALL {
            assert_eq!(Opcode::from_name(op.name()), Some(op));
        }
        assert_eq!(Opcode::from_name("cosine"), Some(Opcode::Cos));
        assert_eq!(Opcode::Add.arity(), Some(2));
        assert_eq!(Opcode::Tuple.arity(), None);
    }
}
