//! Shape inference: the result shape of an instruction from its opcode, operand shapes,
//! attributes and the signatures of the computations it calls.
//!
//! The rules follow XLA's `ShapeInference` (xla/service/shape_inference.cc) and the per-opcode
//! checks of `ShapeVerifier` (xla/service/hlo_verifier.cc). Passes that build new instructions
//! call [`infer_shape`]; the verifier calls it for every instruction and compares the answer with
//! the declared shape (see [`crate::verify`]).
//!
//! Some results are not a function of operands and attributes alone: the element type of a
//! `convert`, the dimensions of a `reshape` or `broadcast`, the preferred element type of a `dot`,
//! the shape of a `parameter`, `iota`, `rng` or `custom-call`. For those the caller passes the
//! intended result as `target`; inference then checks it against the operands (a broadcast's
//! dimension mapping, a reshape's element count) and returns it. Without a target those opcodes
//! give [`ShapeError::NeedsTarget`].
//!
//! Floating-point types are mixed the way XLA mixes them: element-wise operations accept
//! operands that differ only in floating-point precision and give the higher precision.

use crate::attrs::{
    Attrs, ConvDimensionNumbers, DotDimensionNumbers, FftType, GatherDimensionNumbers,
    RandomDistribution, ScatterDimensionNumbers, Window,
};
use crate::module::ProgramShape;
use crate::opcode::Opcode;
use crate::shape::{ArrayShape, Shape, UNBOUNDED_DIM};
use crate::types::ElementType;

use super::display::shape_str;

/// Why a shape could not be inferred (the operands or attributes are inconsistent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The operands, attributes or called computations do not fit the opcode.
    #[error("{0}")]
    Invalid(String),
    /// The opcode's result depends on the intended result shape, and none was given.
    #[error("the result shape of {0} is not determined by its operands; pass the intended shape as `target`")]
    NeedsTarget(Opcode),
}

type Result<T> = std::result::Result<T, ShapeError>;

macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(ShapeError::Invalid(format!($($arg)*)))
    };
}

/// Everything shape inference looks at besides the opcode.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    pub operands: &'a [&'a Shape],
    pub attrs: &'a Attrs,
    /// Signatures of the called computations, in [`crate::Instruction::called`] order.
    pub called: &'a [ProgramShape],
    /// The intended result shape, for opcodes whose result the operands do not determine.
    pub target: Option<&'a Shape>,
    /// Replica and partition counts of the module (1 when unknown); used for the shard count
    /// of all-gather/reduce-scatter and the split count of all-to-all when replica groups are
    /// not explicit.
    pub replica_count: i64,
    pub num_partitions: i64,
}

/// Infers the result shape of `opcode` applied to `operands` (the shapes), `attrs` and the
/// signatures of the `called` computations. `target` is the intended result, needed by the
/// opcodes listed in the module docs and checked against the operands there.
pub fn infer_shape(
    opcode: Opcode,
    operands: &[&Shape],
    attrs: &Attrs,
    called: &[ProgramShape],
    target: Option<&Shape>,
) -> Result<Shape> {
    infer(
        opcode,
        &InferInput {
            operands,
            attrs,
            called,
            target,
            replica_count: 1,
            num_partitions: 1,
        },
    )
}

/// [`infer_shape`] with every input spelled out.
/// The operand count of an opcode with a fixed arity (plus `extra` trailing operands).
pub(crate) fn check_operand_count(opcode: Opcode, got: usize, extra: usize) -> Result<()> {
    if let Some(n) = opcode.arity() {
        if got != n + extra {
            bail!("{} expects {} operand(s), got {}", opcode, n + extra, got);
        }
    }
    Ok(())
}

pub fn infer(opcode: Opcode, inp: &InferInput<'_>) -> Result<Shape> {
    use Opcode::*;
    let ops = inp.operands;
    // Dot's sparsity metadata operands come after its two operands.
    let extra = if opcode == Dot {
        inp.attrs.sparsity.len()
    } else {
        0
    };
    check_operand_count(opcode, ops.len(), extra)?;
    match opcode {
        _ if opcode.is_elementwise_unary()
            && !matches!(opcode, Convert | BitcastConvert | ReducePrecision | Copy) =>
        {
            unary(opcode, ops[0])
        }
        Convert => convert(ops[0], target_type(opcode, inp)?),
        BitcastConvert => bitcast_convert(ops[0], target_type(opcode, inp)?),
        StochasticConvert => stochastic_convert(ops[0], ops[1], target_type(opcode, inp)?),
        ReducePrecision => {
            let a = array(opcode, ops[0], "operand")?;
            if !a.ty.is_float() {
                bail!(
                    "reduce-precision expects a floating-point operand, got {}",
                    shape_str(ops[0])
                );
            }
            if inp.attrs.exponent_bits < 1 {
                bail!(
                    "reduce-precision needs exponent_bits >= 1, got {}",
                    inp.attrs.exponent_bits
                );
            }
            if inp.attrs.mantissa_bits < 0 {
                bail!(
                    "reduce-precision needs mantissa_bits >= 0, got {}",
                    inp.attrs.mantissa_bits
                );
            }
            Ok(ops[0].clone())
        }
        Compare | Add | Subtract | Multiply | Divide | Remainder | Maximum | Minimum | Power
        | Atan2 | And | Or | Xor | ShiftLeft | ShiftRightArithmetic | ShiftRightLogical | Mulhi
        | Complex => binary(opcode, ops[0], ops[1]),
        Select => select(ops[0], ops[1], ops[2]),
        Clamp => clamp(ops[0], ops[1], ops[2]),
        Tuple => Ok(Shape::Tuple(ops.iter().map(|s| (*s).clone()).collect())),
        GetTupleElement => {
            let i = inp.attrs.tuple_index;
            match ops[0] {
                Shape::Tuple(e) => match usize::try_from(i).ok().and_then(|i| e.get(i)) {
                    Some(s) => Ok(s.clone()),
                    None => bail!(
                        "tuple index {} is out of range for {} ({} elements)",
                        i,
                        shape_str(ops[0]),
                        e.len()
                    ),
                },
                other => bail!(
                    "get-tuple-element expects a tuple operand, got {}",
                    shape_str(other)
                ),
            }
        }
        Broadcast => broadcast(ops[0], inp),
        Reshape => reshape(ops[0], inp),
        DynamicReshape => dynamic_reshape(ops, inp),
        Transpose => transpose(ops[0], dims_attr(opcode, inp.attrs)?),
        Reverse => reverse(ops[0], dims_attr(opcode, inp.attrs)?),
        Slice => slice(ops[0], inp.attrs),
        DynamicSlice => dynamic_slice(ops, inp.attrs),
        DynamicUpdateSlice => dynamic_update_slice(ops),
        Concatenate => concatenate(ops, inp.attrs),
        Pad => pad(ops[0], ops[1], inp.attrs),
        Iota => iota(inp),
        Reduce => reduce(ops, inp),
        ReduceWindow => reduce_window(ops, inp),
        SelectAndScatter => select_and_scatter(ops, inp),
        Dot => dot(ops, inp),
        RaggedDot => ragged_dot(ops, inp),
        ScaledDot => scaled_dot(ops, inp),
        Convolution => convolution(ops, inp),
        Gather => gather(ops[0], ops[1], inp.attrs),
        Scatter => scatter(ops, inp),
        Sort => sort(ops, inp),
        TopK => topk(ops[0], inp.attrs.k),
        Map => map(ops, inp),
        Call => call_like(opcode, ops, inp, true),
        Fusion => fusion(ops, inp),
        While => while_(ops, inp),
        Conditional => conditional(ops, inp),
        CustomCall => inp.target.cloned().ok_or(ShapeError::NeedsTarget(opcode)),
        AllReduce | CollectiveBroadcast | CollectiveReduce | AllReduceStart => {
            collective_same(opcode, ops)
        }
        AllReduceDone | AllGatherDone | CollectivePermuteDone => done_from_start(opcode, ops[0]),
        AllGather => all_gather(ops, inp, false),
        AllGatherStart => all_gather(ops, inp, true),
        ReduceScatter => reduce_scatter(ops, inp),
        AllToAll => all_to_all(ops, inp),
        CollectivePermute => collective_permute(ops, false, inp),
        CollectivePermuteStart => collective_permute(ops, true, inp),
        RaggedAllToAll => ragged_all_to_all(ops),
        AsyncStart => async_start(ops, inp),
        AsyncUpdate => Ok(ops[0].clone()),
        AsyncDone => async_done(ops[0], inp),
        CopyStart => Ok(Shape::Tuple(vec![
            ops[0].clone(),
            ops[0].clone(),
            Shape::scalar(ElementType::U32),
        ])),
        CopyDone => match ops[0] {
            Shape::Tuple(e) if e.len() >= 2 => {
                if !compatible(&e[0], &e[1], false) {
                    bail!(
                        "copy-done's source and destination buffers differ: {} vs {}",
                        shape_str(&e[0]),
                        shape_str(&e[1])
                    );
                }
                Ok(e[0].clone())
            }
            other => bail!(
                "copy-done expects the tuple of a copy-start, got {}",
                shape_str(other)
            ),
        },
        Send => {
            expect_token(opcode, ops[1], 1)?;
            Ok(Shape::Tuple(vec![
                ops[0].clone(),
                Shape::scalar(ElementType::U32),
                Shape::Token,
            ]))
        }
        SendDone => Ok(Shape::Token),
        Recv => {
            expect_token(opcode, ops[0], 0)?;
            let t = inp.target.ok_or(ShapeError::NeedsTarget(opcode))?;
            let data = match t {
                Shape::Tuple(e) if !e.is_empty() => e[0].clone(),
                other => bail!(
                    "recv's shape must be a tuple (data, u32[], token[]), got {}",
                    shape_str(other)
                ),
            };
            Ok(Shape::Tuple(vec![
                data,
                Shape::scalar(ElementType::U32),
                Shape::Token,
            ]))
        }
        RecvDone => match ops[0] {
            Shape::Tuple(e) if !e.is_empty() => Ok(Shape::Tuple(vec![e[0].clone(), Shape::Token])),
            other => bail!(
                "recv-done expects the tuple of a recv, got {}",
                shape_str(other)
            ),
        },
        Infeed => {
            expect_token(opcode, ops[0], 0)?;
            let t = inp.target.ok_or(ShapeError::NeedsTarget(opcode))?;
            match t {
                Shape::Tuple(e) if e.len() == 2 => {
                    Ok(Shape::Tuple(vec![e[0].clone(), Shape::Token]))
                }
                other => bail!(
                    "infeed's shape must be a tuple (data, token[]), got {}",
                    shape_str(other)
                ),
            }
        }
        Outfeed => {
            expect_token(opcode, ops[1], 1)?;
            if let Some(os) = inp.attrs.outfeed_shape.as_deref() {
                if !compatible(os, ops[0], false) {
                    bail!(
                        "outfeed_shape {} differs from the operand's shape {}",
                        shape_str(os),
                        shape_str(ops[0])
                    );
                }
            }
            Ok(Shape::Token)
        }
        AfterAll => Ok(Shape::Token),
        AddDependency => {
            expect_token(opcode, ops[1], 1)?;
            Ok(ops[0].clone())
        }
        PartitionId | ReplicaId => Ok(Shape::scalar(ElementType::U32)),
        Rng => rng(ops, inp),
        RngBitGenerator => {
            let t = inp.target.ok_or(ShapeError::NeedsTarget(opcode))?;
            if let Shape::Tuple(e) = t {
                if e.len() != 2 {
                    bail!(
                        "rng-bit-generator's shape must be a tuple (state, data), got {}",
                        shape_str(t)
                    );
                }
                if !compatible(ops[0], &e[0], false) {
                    bail!(
                        "rng-bit-generator's output state {} differs from its input state {}",
                        shape_str(&e[0]),
                        shape_str(ops[0])
                    );
                }
            }
            Ok(t.clone())
        }
        RngGetAndUpdateState => Ok(Shape::array(ElementType::U64, &[2])),
        BatchNormTraining => batch_norm(opcode, ops, inp.attrs.feature_index),
        BatchNormInference => batch_norm(opcode, ops, inp.attrs.feature_index),
        BatchNormGrad => batch_norm(opcode, ops, inp.attrs.feature_index),
        Fft => fft(ops[0], inp.attrs),
        TriangularSolve => triangular_solve(ops[0], ops[1], inp.attrs),
        Cholesky => {
            let a = array(opcode, ops[0], "operand")?;
            if !(a.ty.is_float() || a.ty.is_complex()) {
                bail!(
                    "cholesky expects a floating-point or complex operand, got {}",
                    shape_str(ops[0])
                );
            }
            let r = a.rank();
            if r < 2 || a.dims[r - 1] != a.dims[r - 2] {
                bail!(
                    "cholesky expects square matrices in the two minor dimensions, got {}",
                    shape_str(ops[0])
                );
            }
            Ok(ops[0].clone())
        }
        GetDimensionSize => {
            let d = single_dim(opcode, inp.attrs)?;
            let a = array(opcode, ops[0], "operand")?;
            check_dim(opcode, d, a.rank(), ops[0])?;
            Ok(Shape::scalar(ElementType::S32))
        }
        SetDimensionSize => {
            let d = single_dim(opcode, inp.attrs)?;
            let a = array(opcode, ops[0], "operand")?;
            check_dim(opcode, d, a.rank(), ops[0])?;
            if !matches!(ops[1], Shape::Array(s) if s.rank() == 0 && s.ty == ElementType::S32) {
                bail!(
                    "set-dimension-size expects an s32[] size operand, got {}",
                    shape_str(ops[1])
                );
            }
            let mut out = a.clone();
            if out.dynamic.len() < out.rank() {
                out.dynamic.resize(out.rank(), false);
            }
            out.dynamic[d as usize] = true;
            Ok(Shape::Array(out))
        }
        Domain | OptimizationBarrier | Copy => Ok(ops[0].clone()),
        Bitcast | Parameter | Constant | Scan | Shuffle => {
            inp.target.cloned().ok_or(ShapeError::NeedsTarget(opcode))
        }
        // Every elementwise unary opcode was handled by the first arm.
        _ => inp.target.cloned().ok_or(ShapeError::NeedsTarget(opcode)),
    }
}

// ----- small helpers -----

/// Equality ignoring layouts and dynamic-dimension flags (XLA's `ShapeUtil::Compatible`), and
/// floating-point precision too when `ignore_fp` (`CompatibleIgnoringFpPrecision`).
pub fn compatible(a: &Shape, b: &Shape, ignore_fp: bool) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => x.dims == y.dims && same_type(x.ty, y.ty, ignore_fp),
        (Shape::Tuple(x), Shape::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| compatible(p, q, ignore_fp))
        }
        (Shape::Token, Shape::Token) | (Shape::Opaque, Shape::Opaque) => true,
        (Shape::Buffer(x), Shape::Buffer(y)) => compatible(x, y, ignore_fp),
        _ => false,
    }
}

/// Same element type, or (with `ignore_fp`) both floating point.
pub fn same_type(a: ElementType, b: ElementType, ignore_fp: bool) -> bool {
    a == b || (ignore_fp && a.is_float() && b.is_float())
}

/// The more precise of two types that are equal up to floating-point precision.
fn higher_precision(a: ElementType, b: ElementType) -> ElementType {
    if a.is_float() && b.is_float() && b.bit_width() > a.bit_width() {
        b
    } else {
        a
    }
}

fn array<'s>(opcode: Opcode, s: &'s Shape, what: &str) -> Result<&'s ArrayShape> {
    match s {
        Shape::Array(a) => Ok(a),
        other => bail!(
            "{} expects an array {}, got {}",
            opcode,
            what,
            shape_str(other)
        ),
    }
}

fn expect_token(opcode: Opcode, s: &Shape, index: usize) -> Result<()> {
    if !s.is_token() {
        bail!(
            "{} expects operand {} to be a token, got {}",
            opcode,
            index,
            shape_str(s)
        );
    }
    Ok(())
}

fn target_type(opcode: Opcode, inp: &InferInput<'_>) -> Result<ElementType> {
    match inp.target {
        Some(t) => Ok(t.element_type()),
        None => Err(ShapeError::NeedsTarget(opcode)),
    }
}

fn dims_attr(opcode: Opcode, attrs: &Attrs) -> Result<&[i64]> {
    match &attrs.dimensions {
        Some(d) => Ok(d),
        None => bail!("{} needs dimensions={{...}}", opcode),
    }
}

fn single_dim(opcode: Opcode, attrs: &Attrs) -> Result<i64> {
    match attrs.dimensions.as_deref() {
        Some([d]) => Ok(*d),
        _ => bail!(
            "{} needs exactly one dimension in dimensions={{...}}",
            opcode
        ),
    }
}

fn check_dim(opcode: Opcode, d: i64, rank: usize, s: &Shape) -> Result<()> {
    if d < 0 || d as usize >= rank {
        bail!(
            "{} dimension {} is out of range for {} (rank {})",
            opcode,
            d,
            shape_str(s),
            rank
        );
    }
    Ok(())
}

fn with_type(a: &ArrayShape, ty: ElementType) -> Shape {
    Shape::Array(ArrayShape {
        ty,
        dims: a.dims.clone(),
        dynamic: a.dynamic.clone(),
        layout: None,
    })
}

fn make(ty: ElementType, dims: Vec<i64>) -> Shape {
    Shape::Array(ArrayShape::new(ty, &dims))
}

fn is_permutation(p: &[i64], n: usize) -> bool {
    if p.len() != n {
        return false;
    }
    let mut seen = vec![false; n];
    for &x in p {
        if x < 0 || x as usize >= n || seen[x as usize] {
            return false;
        }
        seen[x as usize] = true;
    }
    true
}

fn fmt_dims(d: &[i64]) -> String {
    let v: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("{{{}}}", v.join(","))
}

// ----- element-wise -----

fn unary(opcode: Opcode, s: &Shape) -> Result<Shape> {
    use Opcode::*;
    let a = array(opcode, s, "operand")?;
    let t = a.ty;
    let float_or_complex = t.is_float() || t.is_complex();
    match opcode {
        Floor | Ceil | RoundNearestAfz | RoundNearestEven => {
            if !t.is_float() {
                bail!(
                    "{} expects a floating-point operand, got {}",
                    opcode,
                    shape_str(s)
                );
            }
            Ok(s.clone())
        }
        IsFinite => {
            if !t.is_float() {
                bail!(
                    "is-finite expects a floating-point operand, got {}",
                    shape_str(s)
                );
            }
            Ok(with_type(a, ElementType::Pred))
        }
        Cos | Sin | Tan | Exp | Expm1 | Log | Log1p | Logistic | Rsqrt | Sqrt | Cbrt | Tanh
        | Erf | Acos | Acosh | Asin | Asinh | Atan | Atanh | Cosh | Sinh => {
            if !float_or_complex {
                bail!(
                    "{} expects a floating-point or complex operand, got {}",
                    opcode,
                    shape_str(s)
                );
            }
            Ok(s.clone())
        }
        Real | Imag => {
            if !float_or_complex {
                bail!(
                    "{} expects a floating-point or complex operand, got {}",
                    opcode,
                    shape_str(s)
                );
            }
            Ok(with_type(a, t.complex_component().unwrap_or(t)))
        }
        Abs => {
            if let Some(c) = t.complex_component() {
                Ok(with_type(a, c))
            } else if t.is_signed_int() || t.is_float() {
                Ok(s.clone())
            } else {
                bail!(
                    "abs expects a signed, floating-point or complex operand, got {}",
                    shape_str(s)
                )
            }
        }
        Sign => {
            if t.is_signed_int() || float_or_complex {
                Ok(s.clone())
            } else {
                bail!(
                    "sign expects a signed, floating-point or complex operand, got {}",
                    shape_str(s)
                )
            }
        }
        Negate => {
            if t.is_integral() || float_or_complex {
                Ok(s.clone())
            } else {
                bail!(
                    "negate expects an integral, floating-point or complex operand, got {}",
                    shape_str(s)
                )
            }
        }
        Clz | PopulationCount => {
            if !t.is_integral() {
                bail!(
                    "{} expects an integral operand, got {}",
                    opcode,
                    shape_str(s)
                );
            }
            Ok(s.clone())
        }
        Not => {
            if !(t.is_integral() || t == ElementType::Pred) {
                bail!(
                    "not expects a pred or integral operand, got {}",
                    shape_str(s)
                );
            }
            Ok(s.clone())
        }
        _ => Ok(s.clone()),
    }
}

fn convert(s: &Shape, to: ElementType) -> Result<Shape> {
    let a = array(Opcode::Convert, s, "operand")?;
    if !to.is_array_type() {
        bail!("convert cannot produce a {} value", to);
    }
    if a.ty.is_complex() && !to.is_complex() {
        bail!(
            "conversion from complex to real type {} => {} is not supported",
            a.ty,
            to
        );
    }
    Ok(with_type(a, to))
}

fn bitcast_convert(s: &Shape, to: ElementType) -> Result<Shape> {
    let a = array(Opcode::BitcastConvert, s, "operand")?;
    if !to.is_array_type() {
        bail!("bitcast-convert cannot produce a {} value", to);
    }
    if a.ty.is_complex() != to.is_complex() {
        bail!(
            "bitcast-convert between complex and real types {} => {}",
            a.ty,
            to
        );
    }
    let (from_bits, to_bits) = (a.ty.bit_width() as i64, to.bit_width() as i64);
    if from_bits == to_bits {
        return Ok(with_type(a, to));
    }
    let mut dims: Vec<i64> = a.dims.to_vec();
    if from_bits > to_bits {
        dims.push(from_bits / to_bits);
    } else {
        let ratio = to_bits / from_bits;
        match dims.last() {
            Some(&last) if last == ratio => {
                dims.pop();
            }
            _ => bail!(
                "bitcast-convert from {} to {} needs a minor dimension of size {}, got {}",
                a.ty,
                to,
                ratio,
                shape_str(s)
            ),
        }
    }
    Ok(make(to, dims))
}

fn stochastic_convert(s: &Shape, random: &Shape, to: ElementType) -> Result<Shape> {
    let a = array(Opcode::StochasticConvert, s, "operand")?;
    let r = array(Opcode::StochasticConvert, random, "random operand")?;
    if !a.ty.is_float() {
        bail!(
            "stochastic-convert expects a floating-point operand, got {}",
            shape_str(s)
        );
    }
    if !r.ty.is_unsigned_int() || r.ty.bit_width() != a.ty.bit_width() {
        bail!(
            "stochastic-convert's random operand must be unsigned with the operand's bit width, got {}",
            shape_str(random)
        );
    }
    if a.dims != r.dims {
        bail!(
            "stochastic-convert's random operand {} must have the operand's dimensions {}",
            shape_str(random),
            shape_str(s)
        );
    }
    Ok(with_type(a, to))
}

fn merge_dynamic(a: &ArrayShape, b: &ArrayShape) -> smallvec::SmallVec<[bool; 4]> {
    if a.dynamic.is_empty() && b.dynamic.is_empty() {
        return smallvec::SmallVec::new();
    }
    (0..a.rank())
        .map(|d| a.is_dynamic_dim(d) || b.is_dynamic_dim(d))
        .collect()
}

fn binary(opcode: Opcode, l: &Shape, r: &Shape) -> Result<Shape> {
    use Opcode::*;
    let a = array(opcode, l, "lhs")?;
    let b = array(opcode, r, "rhs")?;
    if !same_type(a.ty, b.ty, true) {
        bail!(
            "{} has operands of different element types: {} and {}",
            opcode,
            shape_str(l),
            shape_str(r)
        );
    }
    if a.dims != b.dims {
        bail!(
            "{} has operands of different dimensions (implicit broadcast is not allowed in HLO): {} and {}",
            opcode,
            shape_str(l),
            shape_str(r)
        );
    }
    let t = a.ty;
    match opcode {
        And | Or | Xor if !(t.is_integral() || t == ElementType::Pred) => {
            bail!(
                "{} expects pred or integral operands, got {}",
                opcode,
                shape_str(l)
            )
        }
        ShiftLeft | ShiftRightArithmetic | ShiftRightLogical | Mulhi if !t.is_integral() => {
            bail!("{} expects integral operands, got {}", opcode, shape_str(l))
        }
        Atan2 if !(t.is_float() || t.is_complex()) => {
            bail!(
                "atan2 expects floating-point or complex operands, got {}",
                shape_str(l)
            )
        }
        _ => {}
    }
    let ty = match opcode {
        Compare => ElementType::Pred,
        Complex => match t {
            ElementType::F32 if b.ty == ElementType::F32 => ElementType::C64,
            ElementType::F64 if b.ty == ElementType::F64 => ElementType::C128,
            _ => bail!(
                "complex expects two f32 or two f64 operands, got {} and {}",
                shape_str(l),
                shape_str(r)
            ),
        },
        _ => higher_precision(a.ty, b.ty),
    };
    Ok(Shape::Array(ArrayShape {
        ty,
        dims: a.dims.clone(),
        dynamic: merge_dynamic(a, b),
        layout: None,
    }))
}

fn select(p: &Shape, t: &Shape, f: &Shape) -> Result<Shape> {
    let pa = array(Opcode::Select, p, "predicate")?;
    if pa.ty != ElementType::Pred {
        bail!(
            "select's predicate must have element type pred, got {}",
            shape_str(p)
        );
    }
    if !compatible(t, f, true) {
        bail!(
            "select's operands must have the same shape, got {} and {}",
            shape_str(t),
            shape_str(f)
        );
    }
    let ta = array(Opcode::Select, t, "on_true operand")?;
    let fa = array(Opcode::Select, f, "on_false operand")?;
    if pa.dims != ta.dims {
        bail!(
            "select's predicate {} must have the dimensions of its operands {}",
            shape_str(p),
            shape_str(t)
        );
    }
    Ok(Shape::Array(ArrayShape {
        ty: higher_precision(ta.ty, fa.ty),
        dims: ta.dims.clone(),
        dynamic: merge_dynamic(ta, fa),
        layout: None,
    }))
}

fn clamp(min: &Shape, x: &Shape, max: &Shape) -> Result<Shape> {
    let xa = array(Opcode::Clamp, x, "operand")?;
    for (what, s) in [("min", min), ("max", max)] {
        let sa = array(Opcode::Clamp, s, what)?;
        if !same_type(sa.ty, xa.ty, true) {
            bail!(
                "clamp's {} {} has a different element type than the operand {}",
                what,
                shape_str(s),
                shape_str(x)
            );
        }
        if sa.rank() != 0 && sa.dims != xa.dims {
            bail!(
                "clamp's {} {} must be a scalar or have the operand's dimensions {}",
                what,
                shape_str(s),
                shape_str(x)
            );
        }
    }
    Ok(x.clone())
}

// ----- data movement -----

fn broadcast(s: &Shape, inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Broadcast;
    let a = array(op, s, "operand")?;
    // A scalar broadcast may leave out `dimensions={}`.
    let dims = inp.attrs.dimensions.as_deref().unwrap_or(&[]);
    let t = inp.target.ok_or(ShapeError::NeedsTarget(op))?;
    let ta = array(op, t, "result")?;
    if dims.len() != a.rank() {
        bail!(
            "broadcast has {} dimension(s) in dimensions={} but its operand {} has rank {}",
            dims.len(),
            fmt_dims(dims),
            shape_str(s),
            a.rank()
        );
    }
    for (i, &d) in dims.iter().enumerate() {
        if d < 0 || d as usize >= ta.rank() {
            bail!(
                "broadcast dimension {} is out of range for the result {} (rank {})",
                d,
                shape_str(t),
                ta.rank()
            );
        }
        if ta.dims[d as usize] != a.dims[i] {
            bail!(
                "broadcast maps operand dimension {} (size {}) to result dimension {} (size {})",
                i,
                a.dims[i],
                d,
                ta.dims[d as usize]
            );
        }
    }
    Ok(with_type(ta, a.ty))
}

fn reshape(s: &Shape, inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Reshape;
    let a = array(op, s, "operand")?;
    let t = inp.target.ok_or(ShapeError::NeedsTarget(op))?;
    let ta = array(op, t, "result")?;
    if a.element_count() != ta.element_count() {
        bail!(
            "reshape changes the element count: {} ({} elements) to {} ({} elements)",
            shape_str(s),
            a.element_count(),
            shape_str(t),
            ta.element_count()
        );
    }
    Ok(with_type(ta, a.ty))
}

fn dynamic_reshape(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::DynamicReshape;
    if ops.is_empty() {
        bail!("dynamic-reshape needs an operand");
    }
    let a = array(op, ops[0], "operand")?;
    let t = inp.target.ok_or(ShapeError::NeedsTarget(op))?;
    let ta = array(op, t, "result")?;
    if ops.len() != ta.rank() + 1 {
        bail!(
            "dynamic-reshape to rank {} needs {} size operands, got {}",
            ta.rank(),
            ta.rank(),
            ops.len() - 1
        );
    }
    for (i, s) in ops.iter().enumerate().skip(1) {
        if s.element_type() != ElementType::S32 {
            bail!(
                "dynamic-reshape's size operand {} must be s32, got {}",
                i,
                shape_str(s)
            );
        }
    }
    if a.element_count() != ta.element_count() {
        bail!(
            "dynamic-reshape changes the element count: {} to {}",
            shape_str(ops[0]),
            shape_str(t)
        );
    }
    Ok(with_type(ta, a.ty))
}

fn transpose(s: &Shape, perm: &[i64]) -> Result<Shape> {
    let a = array(Opcode::Transpose, s, "operand")?;
    if !is_permutation(perm, a.rank()) {
        bail!(
            "transpose dimensions {} are not a permutation of the dimensions of {}",
            fmt_dims(perm),
            shape_str(s)
        );
    }
    let dims: Vec<i64> = perm.iter().map(|&p| a.dims[p as usize]).collect();
    let dynamic = if a.dynamic.is_empty() {
        smallvec::SmallVec::new()
    } else {
        perm.iter().map(|&p| a.is_dynamic_dim(p as usize)).collect()
    };
    Ok(Shape::Array(ArrayShape {
        ty: a.ty,
        dims: dims.into(),
        dynamic,
        layout: None,
    }))
}

fn reverse(s: &Shape, dims: &[i64]) -> Result<Shape> {
    let a = array(Opcode::Reverse, s, "operand")?;
    let mut seen = vec![false; a.rank()];
    for &d in dims {
        check_dim(Opcode::Reverse, d, a.rank(), s)?;
        if std::mem::replace(&mut seen[d as usize], true) {
            bail!("reverse dimensions {} must be unique", fmt_dims(dims));
        }
    }
    Ok(s.clone())
}

fn slice(s: &Shape, attrs: &Attrs) -> Result<Shape> {
    let a = array(Opcode::Slice, s, "operand")?;
    let Some(sl) = &attrs.slice else {
        bail!("slice needs slice={{...}}");
    };
    if sl.len() != a.rank() {
        bail!(
            "slice has {} dimension(s) but its operand {} has rank {}",
            sl.len(),
            shape_str(s),
            a.rank()
        );
    }
    let mut dims = Vec::with_capacity(sl.len());
    for (d, x) in sl.iter().enumerate() {
        if x.start < 0 {
            bail!("slice start {} in dimension {} is negative", x.start, d);
        }
        if x.stride <= 0 {
            bail!(
                "slice stride {} in dimension {} must be positive",
                x.stride,
                d
            );
        }
        if x.limit < x.start {
            bail!(
                "slice limit {} is less than the start {} in dimension {}",
                x.limit,
                x.start,
                d
            );
        }
        if a.dims[d] != UNBOUNDED_DIM && x.limit > a.dims[d] {
            bail!(
                "slice limit {} exceeds the size {} of dimension {} of {}",
                x.limit,
                a.dims[d],
                d,
                shape_str(s)
            );
        }
        dims.push((x.limit - x.start + x.stride - 1) / x.stride);
    }
    Ok(make(a.ty, dims))
}

fn index_operands(op: Opcode, a: &ArrayShape, idx: &[&Shape]) -> Result<()> {
    // The old form passes one rank-1 index vector; the current form one scalar per dimension.
    if idx.len() == 1 && a.rank() != 1 {
        if let Shape::Array(i) = idx[0] {
            if i.rank() == 1 && i.ty.is_integral() && i.dims[0] == a.rank() as i64 {
                return Ok(());
            }
        }
    }
    if idx.len() != a.rank() {
        bail!(
            "{} needs {} start indices for a rank-{} operand, got {}",
            op,
            a.rank(),
            a.rank(),
            idx.len()
        );
    }
    let mut first: Option<ElementType> = None;
    for (i, s) in idx.iter().enumerate() {
        match s {
            Shape::Array(x) if x.rank() == 0 && x.ty.is_integral() => {
                if let Some(f) = first {
                    if f != x.ty {
                        bail!(
                            "{} start indices must all have the same type, got {} and {}",
                            op,
                            f,
                            x.ty
                        );
                    }
                }
                first = Some(x.ty);
            }
            other => bail!(
                "{} start index {} must be an integral scalar, got {}",
                op,
                i,
                shape_str(other)
            ),
        }
    }
    Ok(())
}

fn dynamic_slice(ops: &[&Shape], attrs: &Attrs) -> Result<Shape> {
    let op = Opcode::DynamicSlice;
    if ops.is_empty() {
        bail!("dynamic-slice needs an operand");
    }
    let a = array(op, ops[0], "operand")?;
    index_operands(op, a, &ops[1..])?;
    let Some(sizes) = &attrs.dynamic_slice_sizes else {
        bail!("dynamic-slice needs dynamic_slice_sizes={{...}}");
    };
    if sizes.len() != a.rank() {
        bail!(
            "dynamic-slice has {} slice sizes but its operand {} has rank {}",
            sizes.len(),
            shape_str(ops[0]),
            a.rank()
        );
    }
    for (d, &sz) in sizes.iter().enumerate() {
        if sz < 0 || (a.dims[d] != UNBOUNDED_DIM && sz > a.dims[d]) {
            bail!(
                "dynamic-slice size {} in dimension {} is out of range for {}",
                sz,
                d,
                shape_str(ops[0])
            );
        }
    }
    Ok(make(a.ty, sizes.clone()))
}

fn dynamic_update_slice(ops: &[&Shape]) -> Result<Shape> {
    let op = Opcode::DynamicUpdateSlice;
    if ops.len() < 2 {
        bail!("dynamic-update-slice needs an operand and an update");
    }
    let a = array(op, ops[0], "operand")?;
    let u = array(op, ops[1], "update")?;
    if u.rank() != a.rank() {
        bail!(
            "dynamic-update-slice's update {} must have the operand's rank ({})",
            shape_str(ops[1]),
            shape_str(ops[0])
        );
    }
    if !same_type(a.ty, u.ty, true) {
        bail!(
            "dynamic-update-slice's update {} has a different element type than the operand {}",
            shape_str(ops[1]),
            shape_str(ops[0])
        );
    }
    for d in 0..a.rank() {
        if u.dims[d] < 0 || (a.dims[d] != UNBOUNDED_DIM && u.dims[d] > a.dims[d]) {
            bail!(
                "dynamic-update-slice's update {} does not fit in the operand {} in dimension {}",
                shape_str(ops[1]),
                shape_str(ops[0]),
                d
            );
        }
    }
    index_operands(op, a, &ops[2..])?;
    Ok(ops[0].clone())
}

fn concatenate(ops: &[&Shape], attrs: &Attrs) -> Result<Shape> {
    let op = Opcode::Concatenate;
    if ops.is_empty() {
        bail!("concatenate needs at least one operand");
    }
    let d = single_dim(op, attrs)?;
    let first = array(op, ops[0], "operand")?;
    check_dim(op, d, first.rank(), ops[0])?;
    let d = d as usize;
    let mut dims = first.dims.to_vec();
    let mut ty = first.ty;
    for (i, s) in ops.iter().enumerate().skip(1) {
        let a = array(op, s, "operand")?;
        if a.rank() != first.rank() {
            bail!(
                "concatenate operand {} {} has a different rank than operand 0 {}",
                i,
                shape_str(s),
                shape_str(ops[0])
            );
        }
        if !same_type(a.ty, first.ty, true) {
            bail!(
                "concatenate operand {} {} has a different element type than operand 0 {}",
                i,
                shape_str(s),
                shape_str(ops[0])
            );
        }
        for (k, (have, &size)) in dims.iter_mut().zip(&a.dims).enumerate() {
            if k == d {
                continue;
            }
            if !dims_match(size, *have) {
                bail!(
                    "concatenate operand {} {} differs from operand 0 {} in dimension {} (only dimension {} may differ)",
                    i,
                    shape_str(s),
                    shape_str(ops[0]),
                    k,
                    d
                );
            }
            // An unbounded size (`?`) matches any other; the result keeps the known one.
            if *have == UNBOUNDED_DIM {
                *have = size;
            }
        }
        // Concatenating an unbounded size gives an unbounded one (XLA's InferConcatOpShape).
        dims[d] = if dims[d] == UNBOUNDED_DIM || a.dims[d] == UNBOUNDED_DIM {
            UNBOUNDED_DIM
        } else {
            match dims[d].checked_add(a.dims[d]) {
                Some(n) => n,
                None => bail!(
                    "concatenate operands 0 to {} ({} the last) are longer in dimension {} than an i64 can count",
                    i,
                    shape_str(s),
                    d
                ),
            }
        };
        ty = higher_precision(ty, a.ty);
    }
    Ok(make(ty, dims))
}

fn pad(s: &Shape, value: &Shape, attrs: &Attrs) -> Result<Shape> {
    let op = Opcode::Pad;
    let a = array(op, s, "operand")?;
    let v = array(op, value, "padding value")?;
    if v.rank() != 0 {
        bail!(
            "pad's padding value must be a scalar, got {}",
            shape_str(value)
        );
    }
    if !same_type(a.ty, v.ty, true) {
        bail!(
            "pad's padding value {} has a different element type than the operand {}",
            shape_str(value),
            shape_str(s)
        );
    }
    let Some(p) = &attrs.padding else {
        bail!("pad needs padding=...");
    };
    if p.len() != a.rank() {
        bail!(
            "pad has {} padding dimension(s) but its operand {} has rank {}",
            p.len(),
            shape_str(s),
            a.rank()
        );
    }
    let mut dims = Vec::with_capacity(p.len());
    for (d, x) in p.iter().enumerate() {
        if x.interior < 0 {
            bail!(
                "pad's interior padding {} in dimension {} is negative",
                x.interior,
                d
            );
        }
        let n = a.dims[d];
        let out = x.low + x.high + n + (n - 1).max(0) * x.interior;
        if out < 0 {
            bail!(
                "pad makes dimension {} of {} negative ({})",
                d,
                shape_str(s),
                out
            );
        }
        dims.push(out);
    }
    Ok(make(higher_precision(a.ty, v.ty), dims))
}

fn iota(inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Iota;
    let t = inp.target.ok_or(ShapeError::NeedsTarget(op))?;
    let a = array(op, t, "result")?;
    if a.rank() == 0 {
        bail!("iota does not support scalars");
    }
    let d = inp.attrs.iota_dimension;
    if d < 0 || d as usize >= a.rank() {
        bail!(
            "iota_dimension {} is out of range for {} (rank {})",
            d,
            shape_str(t),
            a.rank()
        );
    }
    if !(a.ty.is_integral() || a.ty.is_float() || a.ty.is_complex()) {
        bail!(
            "iota supports integral, floating-point and complex types, got {}",
            a.ty
        );
    }
    Ok(t.clone())
}

// ----- reductions -----

fn called(opcode: Opcode, inp: &InferInput<'_>, i: usize, what: &str) -> Result<ProgramShape> {
    match inp.called.get(i) {
        Some(p) => Ok(p.clone()),
        None => bail!("{} needs a {} computation", opcode, what),
    }
}

/// Checks a reducer `(acc..., x...) -> acc...` for `n` inputs of the given types and inits.
fn verify_reducer(
    opcode: Opcode,
    reducer: &ProgramShape,
    init_types: &[ElementType],
    input_types: &[ElementType],
) -> Result<()> {
    let n = init_types.len();
    if reducer.parameters.len() != 2 * n {
        bail!(
            "{}'s reduction computation must take {} parameters, but takes {}",
            opcode,
            2 * n,
            reducer.parameters.len()
        );
    }
    let accs: Vec<&Shape> = if n == 1 {
        vec![&reducer.result]
    } else {
        match &reducer.result {
            Shape::Tuple(e) if e.len() == n => e.iter().collect(),
            other => bail!(
                "{}'s reduction computation must return a tuple of {} scalars, but returns {}",
                opcode,
                n,
                shape_str(other)
            ),
        }
    };
    for i in 0..n {
        let acc = match accs[i] {
            Shape::Array(a) if a.rank() == 0 => a.ty,
            other => bail!(
                "{}'s reduction computation must return scalars, but returns {}",
                opcode,
                shape_str(other)
            ),
        };
        if !same_type(acc, init_types[i], true) {
            bail!(
                "{}'s reduction computation returns {} at index {} but the init value is {}",
                opcode,
                acc,
                i,
                init_types[i]
            );
        }
        for (pi, want, what) in [
            (i, acc, "the accumulator"),
            (n + i, input_types[i], "the input element type"),
        ] {
            match &reducer.parameters[pi] {
                Shape::Array(p) if p.rank() == 0 && same_type(p.ty, want, true) => {}
                other => bail!(
                    "{}'s reduction computation parameter {} is {} but {} is {}[]",
                    opcode,
                    pi,
                    shape_str(other),
                    what,
                    want
                ),
            }
        }
    }
    Ok(())
}

fn reduce(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Reduce;
    if ops.len() < 2 || !ops.len().is_multiple_of(2) {
        bail!(
            "reduce expects an even number (>= 2) of operands, got {}",
            ops.len()
        );
    }
    let n = ops.len() / 2;
    let first = array(op, ops[0], "input")?;
    let mut input_types = Vec::with_capacity(n);
    let mut init_types = Vec::with_capacity(n);
    for i in 0..n {
        let a = array(op, ops[i], "input")?;
        if a.dims != first.dims {
            bail!(
                "reduce inputs must have the same dimensions, got {} and {}",
                shape_str(ops[0]),
                shape_str(ops[i])
            );
        }
        input_types.push(a.ty);
        let init = array(op, ops[n + i], "init value")?;
        if init.rank() != 0 {
            bail!(
                "reduce's init value {} must be a scalar",
                shape_str(ops[n + i])
            );
        }
        init_types.push(init.ty);
    }
    let dims = dims_attr(op, inp.attrs)?;
    let mut seen = vec![false; first.rank()];
    for &d in dims {
        check_dim(op, d, first.rank(), ops[0])?;
        if std::mem::replace(&mut seen[d as usize], true) {
            bail!("reduce dimensions {} must be unique", fmt_dims(dims));
        }
    }
    let reducer = called(op, inp, 0, "to_apply")?;
    verify_reducer(op, &reducer, &init_types, &input_types)?;
    let kept: Vec<i64> = (0..first.rank())
        .filter(|&d| !seen[d])
        .map(|d| first.dims[d])
        .collect();
    let results: Vec<Shape> = init_types.iter().map(|&t| make(t, kept.clone())).collect();
    Ok(one_or_tuple(results))
}

fn one_or_tuple(mut v: Vec<Shape>) -> Shape {
    if v.len() == 1 {
        v.pop().unwrap()
    } else {
        Shape::Tuple(v)
    }
}

/// The output size of one window dimension, or an error for a malformed window.
fn window_out(d: usize, n: i64, w: &crate::attrs::WindowDim) -> Result<i64> {
    if w.size <= 0 {
        bail!("window size {} in dimension {} must be positive", w.size, d);
    }
    if w.stride <= 0 {
        bail!(
            "window stride {} in dimension {} must be positive",
            w.stride,
            d
        );
    }
    if w.base_dilation < 1 || w.window_dilation < 1 {
        bail!("window dilations in dimension {} must be >= 1", d);
    }
    if n == UNBOUNDED_DIM {
        // `?` in, `?` out, as XLA infers an unbounded dimension's window.
        return Ok(n);
    }
    // In i128: sizes, dilations and paddings come from the user and may be near i64's range.
    let (n, size, stride) = (n as i128, w.size as i128, w.stride as i128);
    let dilated = if n == 0 {
        0
    } else {
        (n - 1) * w.base_dilation as i128 + 1
    };
    let padded = dilated + w.padding_low as i128 + w.padding_high as i128;
    let eff = (size - 1) * w.window_dilation as i128 + 1;
    let out = if padded < eff {
        0
    } else {
        (padded - eff) / stride + 1
    };
    i64::try_from(out).map_err(|_| {
        ShapeError::Invalid(format!(
            "the window of dimension {d} gives {out} elements, more than a dimension holds"
        ))
    })
}

fn window_shape(op: Opcode, a: &ArrayShape, s: &Shape, window: &Window) -> Result<Vec<i64>> {
    if window.dims.len() != a.rank() {
        bail!(
            "{}'s window has {} dimension(s) but its input {} has rank {}",
            op,
            window.dims.len(),
            shape_str(s),
            a.rank()
        );
    }
    (0..a.rank())
        .map(|d| window_out(d, a.dims[d], &window.dims[d]))
        .collect()
}

fn reduce_window(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::ReduceWindow;
    if ops.len() < 2 || !ops.len().is_multiple_of(2) {
        bail!(
            "reduce-window expects an even number (>= 2) of operands, got {}",
            ops.len()
        );
    }
    let n = ops.len() / 2;
    let first = array(op, ops[0], "input")?;
    let Some(window) = inp.attrs.window.as_deref() else {
        bail!("reduce-window needs window={{...}}");
    };
    let mut input_types = Vec::new();
    let mut init_types = Vec::new();
    for i in 0..n {
        let a = array(op, ops[i], "input")?;
        if a.dims != first.dims {
            bail!(
                "reduce-window inputs must have the same dimensions, got {} and {}",
                shape_str(ops[0]),
                shape_str(ops[i])
            );
        }
        input_types.push(a.ty);
        let init = array(op, ops[n + i], "init value")?;
        if init.rank() != 0 {
            bail!(
                "reduce-window's init value {} must be a scalar",
                shape_str(ops[n + i])
            );
        }
        init_types.push(init.ty);
    }
    let reducer = called(op, inp, 0, "to_apply")?;
    verify_reducer(op, &reducer, &init_types, &input_types)?;
    let dims = window_shape(op, first, ops[0], window)?;
    Ok(one_or_tuple(
        init_types.iter().map(|&t| make(t, dims.clone())).collect(),
    ))
}

fn select_and_scatter(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::SelectAndScatter;
    let a = array(op, ops[0], "operand")?;
    let src = array(op, ops[1], "source")?;
    let init = array(op, ops[2], "init value")?;
    if init.rank() != 0 {
        bail!(
            "select-and-scatter's init value {} must be a scalar",
            shape_str(ops[2])
        );
    }
    let select = called(op, inp, 0, "select")?;
    if select.parameters.len() != 2 {
        bail!(
            "select-and-scatter's select computation must take 2 parameters, takes {}",
            select.parameters.len()
        );
    }
    if !compatible(&select.result, &Shape::scalar(ElementType::Pred), false) {
        bail!(
            "select-and-scatter's select computation must return pred[], returns {}",
            shape_str(&select.result)
        );
    }
    for (i, p) in select.parameters.iter().enumerate() {
        if !compatible(p, &Shape::scalar(a.ty), true) {
            bail!(
                "select-and-scatter's select parameter {} is {} but the operand is {}",
                i,
                shape_str(p),
                shape_str(ops[0])
            );
        }
    }
    let scatter = called(op, inp, 1, "scatter")?;
    verify_reducer(op, &scatter, &[init.ty], &[src.ty])?;
    let Some(window) = inp.attrs.window.as_deref() else {
        bail!("select-and-scatter needs window={{...}}");
    };
    let out = window_shape(op, a, ops[0], window)?;
    if out.as_slice() != src.dims.as_slice() {
        bail!(
            "select-and-scatter's source {} must have the windowed operand's dimensions {}",
            shape_str(ops[1]),
            fmt_dims(&out)
        );
    }
    Ok(ops[0].clone())
}

// ----- dot and convolution -----

fn check_dot_dims(
    side: &str,
    a: &ArrayShape,
    s: &Shape,
    batch: &[i64],
    contracting: &[i64],
) -> Result<()> {
    let mut seen = vec![false; a.rank()];
    for (kind, list) in [("batch", batch), ("contracting", contracting)] {
        for &d in list {
            if d < 0 || d as usize >= a.rank() {
                bail!(
                    "{} {} dimension {} is out of range for {} (rank {})",
                    side,
                    kind,
                    d,
                    shape_str(s),
                    a.rank()
                );
            }
            if std::mem::replace(&mut seen[d as usize], true) {
                bail!(
                    "{} dimension {} is used more than once among the batch and contracting dimensions",
                    side,
                    d
                );
            }
        }
    }
    Ok(())
}

fn dims_match(a: i64, b: i64) -> bool {
    a == b || a == UNBOUNDED_DIM || b == UNBOUNDED_DIM
}

/// Result element type of a dot/convolution: the preferred type when one is given, checked the
/// way XLA's `MaybeUpcast` checks it.
fn preferred_type(
    op: Opcode,
    l: ElementType,
    r: ElementType,
    preferred: Option<ElementType>,
) -> Result<ElementType> {
    let from = higher_precision(l, r);
    match preferred {
        None => Ok(from),
        Some(p) if p == from => Ok(p),
        Some(p) => {
            if !from.is_float() && !from.is_complex() && p.bit_width() < from.bit_width() {
                bail!(
                    "{}'s result type {} must not be narrower than the operand type {}",
                    op,
                    p,
                    from
                );
            }
            Ok(p)
        }
    }
}

fn dot_core(
    op: Opcode,
    l: &Shape,
    r: &Shape,
    dn: &DotDimensionNumbers,
    preferred: Option<ElementType>,
    rhs_skip: &[i64],
) -> Result<Shape> {
    let a = array(op, l, "lhs")?;
    let b = array(op, r, "rhs")?;
    if dn.lhs_contracting_dimensions.len() != dn.rhs_contracting_dimensions.len() {
        bail!(
            "{} must have as many lhs contracting dimensions ({}) as rhs contracting dimensions ({})",
            op,
            dn.lhs_contracting_dimensions.len(),
            dn.rhs_contracting_dimensions.len()
        );
    }
    if dn.lhs_batch_dimensions.len() != dn.rhs_batch_dimensions.len() {
        bail!(
            "{} must have as many lhs batch dimensions ({}) as rhs batch dimensions ({})",
            op,
            dn.lhs_batch_dimensions.len(),
            dn.rhs_batch_dimensions.len()
        );
    }
    check_dot_dims(
        "lhs",
        a,
        l,
        &dn.lhs_batch_dimensions,
        &dn.lhs_contracting_dimensions,
    )?;
    check_dot_dims(
        "rhs",
        b,
        r,
        &dn.rhs_batch_dimensions,
        &dn.rhs_contracting_dimensions,
    )?;
    for (&x, &y) in dn
        .lhs_contracting_dimensions
        .iter()
        .zip(&dn.rhs_contracting_dimensions)
    {
        if !dims_match(a.dims[x as usize], b.dims[y as usize]) {
            bail!(
                "contracting dimension sizes differ: lhs dimension {} of {} is {}, rhs dimension {} of {} is {}",
                x,
                shape_str(l),
                a.dims[x as usize],
                y,
                shape_str(r),
                b.dims[y as usize]
            );
        }
    }
    for (&x, &y) in dn.lhs_batch_dimensions.iter().zip(&dn.rhs_batch_dimensions) {
        if !dims_match(a.dims[x as usize], b.dims[y as usize]) {
            bail!(
                "batch dimension sizes differ: lhs dimension {} of {} is {}, rhs dimension {} of {} is {}",
                x,
                shape_str(l),
                a.dims[x as usize],
                y,
                shape_str(r),
                b.dims[y as usize]
            );
        }
    }
    let mut dims: Vec<i64> = dn
        .lhs_batch_dimensions
        .iter()
        .map(|&d| a.dims[d as usize])
        .collect();
    for d in 0..a.rank() as i64 {
        if !dn.lhs_batch_dimensions.contains(&d) && !dn.lhs_contracting_dimensions.contains(&d) {
            dims.push(a.dims[d as usize]);
        }
    }
    for d in 0..b.rank() as i64 {
        if !dn.rhs_batch_dimensions.contains(&d)
            && !dn.rhs_contracting_dimensions.contains(&d)
            && !rhs_skip.contains(&d)
        {
            dims.push(b.dims[d as usize]);
        }
    }
    Ok(make(preferred_type(op, a.ty, b.ty, preferred)?, dims))
}

fn dot(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Dot;
    let default = DotDimensionNumbers::default();
    let dn = inp.attrs.dot_dims.as_deref().unwrap_or(&default);
    let pref = inp.target.map(Shape::element_type);
    if inp.attrs.sparsity.is_empty() {
        return dot_core(op, ops[0], ops[1], dn, pref, &[]);
    }
    // Structured sparsity: the sparse operand holds n of every m elements along the sparse
    // dimension, so its logical size there is stored * m / n.
    let mut shapes = [ops[0].clone(), ops[1].clone()];
    for sd in &inp.attrs.sparsity {
        let i = sd.index as usize;
        if i > 1 || sd.n <= 0 || sd.m <= 0 {
            bail!("dot has an invalid sparsity descriptor");
        }
        let Some(a) = shapes[i].as_array_mut() else {
            bail!("dot's sparse operand must be an array");
        };
        let d = sd.dimension;
        if d < 0 || d as usize >= a.rank() {
            bail!("dot's sparsity dimension {} is out of range", d);
        }
        a.dims[d as usize] = a.dims[d as usize] * sd.m as i64 / sd.n as i64;
    }
    dot_core(op, &shapes[0], &shapes[1], dn, pref, &[])
}

fn ragged_dot(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::RaggedDot;
    let default = DotDimensionNumbers::default();
    let dn = inp.attrs.dot_dims.as_deref().unwrap_or(&default);
    let Some(rd) = inp.attrs.ragged_dot_dims.as_deref() else {
        bail!("ragged-dot needs lhs_ragged_dims and rhs_group_dims");
    };
    let a = array(op, ops[0], "lhs")?;
    let b = array(op, ops[1], "rhs")?;
    let g = array(op, ops[2], "group_sizes")?;
    if !g.ty.is_integral() {
        bail!(
            "ragged-dot's group_sizes must be integral, got {}",
            shape_str(ops[2])
        );
    }
    if rd.lhs_ragged_dimensions.len() != 1 {
        bail!("ragged-dot needs exactly one lhs ragged dimension");
    }
    let ragged = rd.lhs_ragged_dimensions[0];
    if ragged < 0 || ragged as usize >= a.rank() {
        bail!(
            "ragged-dot's lhs ragged dimension {} is out of range for {}",
            ragged,
            shape_str(ops[0])
        );
    }
    for &gd in &rd.rhs_group_dimensions {
        if gd < 0 || gd as usize >= b.rank() {
            bail!(
                "ragged-dot's rhs group dimension {} is out of range for {}",
                gd,
                shape_str(ops[1])
            );
        }
    }
    let pref = inp.target.map(Shape::element_type);
    let core = dot_core(op, ops[0], ops[1], dn, pref, &rd.rhs_group_dimensions)?;
    // Ragged in a contracting dimension: the result gains a leading group dimension.
    if dn.lhs_contracting_dimensions.contains(&ragged) {
        let groups = g.dims.last().copied().unwrap_or(1);
        let mut dims = vec![groups];
        dims.extend_from_slice(core.dims());
        return Ok(make(core.element_type(), dims));
    }
    Ok(core)
}

fn scaled_dot(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::ScaledDot;
    let default = DotDimensionNumbers::default();
    let dn = inp.attrs.dot_dims.as_deref().unwrap_or(&default);
    // Operands: lhs, rhs, lhs_scale, rhs_scale; each scale has its operand's rank (or is a
    // scalar).
    for (v, s) in [(0, 2), (1, 3)] {
        let x = array(op, ops[v], "operand")?;
        let sc = array(op, ops[s], "scale")?;
        if sc.rank() != x.rank() && sc.rank() != 0 {
            bail!(
                "scaled-dot's scale {} must have the rank of its operand {}",
                shape_str(ops[s]),
                shape_str(ops[v])
            );
        }
    }
    let pref = inp.target.map(Shape::element_type);
    dot_core(op, ops[0], ops[1], dn, pref, &[])
}

fn distinct(v: &[i64], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    v.iter()
        .all(|&d| d >= 0 && (d as usize) < rank && !std::mem::replace(&mut seen[d as usize], true))
}

fn convolution(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Convolution;
    if ops.len() != 2 {
        bail!("convolution expects 2 operands, got {}", ops.len());
    }
    let l = array(op, ops[0], "lhs")?;
    let r = array(op, ops[1], "rhs")?;
    let Some(dn) = inp.attrs.conv_dims.as_deref() else {
        bail!("convolution needs dim_labels=...");
    };
    let fgc = inp.attrs.feature_group_count;
    let bgc = inp.attrs.batch_group_count;
    if fgc <= 0 || bgc <= 0 {
        bail!(
            "feature_group_count ({}) and batch_group_count ({}) must be positive",
            fgc,
            bgc
        );
    }
    if fgc > 1 && bgc > 1 {
        bail!(
            "feature_group_count ({}) and batch_group_count ({}) cannot both exceed 1",
            fgc,
            bgc
        );
    }
    let rank = l.rank();
    if r.rank() != rank {
        bail!(
            "convolution operands must have the same rank, got {} and {}",
            shape_str(ops[0]),
            shape_str(ops[1])
        );
    }
    if rank < 2 {
        bail!(
            "convolution operands must have rank >= 2, got {}",
            shape_str(ops[0])
        );
    }
    let ns = rank - 2;
    let ConvDimensionNumbers {
        input_batch_dimension: ib,
        input_feature_dimension: ifd,
        input_spatial_dimensions: isd,
        kernel_input_feature_dimension: kif,
        kernel_output_feature_dimension: kof,
        kernel_spatial_dimensions: ksd,
        output_batch_dimension: ob,
        output_feature_dimension: of,
        output_spatial_dimensions: osd,
    } = dn;
    if isd.len() != ns || ksd.len() != ns || osd.len() != ns {
        bail!(
            "dim_labels must name {} spatial dimension(s) for rank-{} operands",
            ns,
            rank
        );
    }
    let mut in_all = vec![*ib, *ifd];
    in_all.extend_from_slice(isd);
    let mut k_all = vec![*kif, *kof];
    k_all.extend_from_slice(ksd);
    let mut o_all = vec![*ob, *of];
    o_all.extend_from_slice(osd);
    if !distinct(&in_all, rank) || !distinct(&k_all, rank) || !distinct(&o_all, rank) {
        bail!("dim_labels must name each dimension of the input, kernel and output exactly once");
    }
    // No `window=` is an empty window, which is right only without spatial dimensions (a dot
    // written as a convolution; XLA prints no window then).
    let empty = crate::attrs::Window::default();
    let window = match inp.attrs.window.as_deref() {
        Some(w) => w,
        None if ns == 0 => &empty,
        None => bail!("convolution needs window={{...}} for its spatial dimensions"),
    };
    if window.dims.len() != ns {
        bail!(
            "convolution's window has {} dimension(s) but there are {} spatial dimension(s)",
            window.dims.len(),
            ns
        );
    }
    let batch = l.dims[*ib as usize];
    let in_features = l.dims[*ifd as usize];
    let k_in = r.dims[*kif as usize];
    let k_out = r.dims[*kof as usize];
    if in_features % fgc != 0 {
        bail!(
            "the lhs feature dimension ({}) must be a multiple of feature_group_count ({})",
            in_features,
            fgc
        );
    }
    if in_features / fgc != k_in {
        bail!(
            "the lhs feature dimension ({}) must equal the rhs input feature dimension ({}) * feature_group_count ({})",
            in_features,
            k_in,
            fgc
        );
    }
    if k_out % fgc != 0 {
        bail!(
            "the rhs output feature dimension ({}) must be a multiple of feature_group_count ({})",
            k_out,
            fgc
        );
    }
    if batch % bgc != 0 {
        bail!(
            "the lhs batch dimension ({}) must be a multiple of batch_group_count ({})",
            batch,
            bgc
        );
    }
    if k_out % bgc != 0 {
        bail!(
            "the rhs output feature dimension ({}) must be a multiple of batch_group_count ({})",
            k_out,
            bgc
        );
    }
    let mut out = vec![0i64; rank];
    out[*ob as usize] = batch / bgc;
    out[*of as usize] = k_out;
    for i in 0..ns {
        let w = &window.dims[i];
        let ksz = r.dims[ksd[i] as usize];
        if w.size != ksz {
            bail!(
                "window dimension {} has size {}, but the kernel's spatial dimension {} has size {}",
                i,
                w.size,
                ksd[i],
                ksz
            );
        }
        out[osd[i] as usize] = window_out(i, l.dims[isd[i] as usize], w)?;
    }
    let pref = inp.target.map(Shape::element_type);
    Ok(make(preferred_type(op, l.ty, r.ty, pref)?, out))
}

// ----- gather / scatter -----

fn sorted_unique_in(v: &[i64], bound: usize, what: &str, op: Opcode) -> Result<()> {
    for w in v.windows(2) {
        if w[0] >= w[1] {
            bail!(
                "{}'s {} {} must be sorted and unique",
                op,
                what,
                fmt_dims(v)
            );
        }
    }
    for &d in v {
        if d < 0 || d as usize >= bound {
            bail!(
                "{}'s {} {} has {} out of range [0, {})",
                op,
                what,
                fmt_dims(v),
                d,
                bound
            );
        }
    }
    Ok(())
}

fn unique_in(v: &[i64], bound: usize, what: &str, op: Opcode) -> Result<()> {
    if !distinct(v, bound) {
        bail!(
            "{}'s {} {} must be unique and in range [0, {})",
            op,
            what,
            fmt_dims(v),
            bound
        );
    }
    Ok(())
}

fn gather(operand: &Shape, indices: &Shape, attrs: &Attrs) -> Result<Shape> {
    let op = Opcode::Gather;
    let a = array(op, operand, "operand")?;
    let ix = array(op, indices, "start indices")?;
    if !ix.ty.is_integral() {
        bail!(
            "gather's start indices must be integral, got {}",
            shape_str(indices)
        );
    }
    let default = GatherDimensionNumbers::default();
    let dn = attrs.gather_dims.as_deref().unwrap_or(&default);
    let Some(sizes) = attrs.gather_slice_sizes.as_deref() else {
        bail!("gather needs slice_sizes={{...}}");
    };
    let ivd = dn.index_vector_dim;
    if ivd < 0 || ivd as usize > ix.rank() {
        bail!(
            "gather's index_vector_dim {} is out of range for start indices {}",
            ivd,
            shape_str(indices)
        );
    }
    // Batch dims of the indices: all but index_vector_dim (when it is a real dimension).
    let mut idx_dims: Vec<i64> = ix.dims.to_vec();
    let index_vector_size = if (ivd as usize) < ix.rank() {
        idx_dims.remove(ivd as usize)
    } else {
        1
    };
    if dn.start_index_map.len() as i64 != index_vector_size {
        bail!(
            "gather's start_index_map has {} entries but the index vector has size {}",
            dn.start_index_map.len(),
            index_vector_size
        );
    }
    let orank = a.rank();
    let out_rank = dn.offset_dims.len() + idx_dims.len();
    sorted_unique_in(&dn.offset_dims, out_rank, "offset_dims", op)?;
    sorted_unique_in(&dn.collapsed_slice_dims, orank, "collapsed_slice_dims", op)?;
    sorted_unique_in(
        &dn.operand_batching_dims,
        orank,
        "operand_batching_dims",
        op,
    )?;
    unique_in(&dn.start_index_map, orank, "start_index_map", op)?;
    unique_in(
        &dn.start_indices_batching_dims,
        ix.rank(),
        "start_indices_batching_dims",
        op,
    )?;
    if dn.start_indices_batching_dims.contains(&ivd) {
        bail!("gather's start_indices_batching_dims must not contain index_vector_dim");
    }
    if dn.operand_batching_dims.len() != dn.start_indices_batching_dims.len() {
        bail!("gather's operand_batching_dims and start_indices_batching_dims differ in length");
    }
    for &d in &dn.collapsed_slice_dims {
        if dn.operand_batching_dims.contains(&d) {
            bail!(
                "gather's collapsed_slice_dims and operand_batching_dims overlap at {}",
                d
            );
        }
    }
    if sizes.len() != orank {
        bail!(
            "gather's slice_sizes has {} entries but the operand {} has rank {}",
            sizes.len(),
            shape_str(operand),
            orank
        );
    }
    if dn.offset_dims.len() + dn.collapsed_slice_dims.len() + dn.operand_batching_dims.len()
        != orank
    {
        bail!(
            "gather: offset_dims ({}) + collapsed_slice_dims ({}) + operand_batching_dims ({}) must equal the operand rank ({})",
            dn.offset_dims.len(),
            dn.collapsed_slice_dims.len(),
            dn.operand_batching_dims.len(),
            orank
        );
    }
    for (d, &sz) in sizes.iter().enumerate() {
        if sz < 0 || (a.dims[d] != UNBOUNDED_DIM && sz > a.dims[d]) {
            bail!(
                "gather's slice size {} is out of range for dimension {} of {}",
                sz,
                d,
                shape_str(operand)
            );
        }
    }
    for &d in dn
        .collapsed_slice_dims
        .iter()
        .chain(&dn.operand_batching_dims)
    {
        if sizes[d as usize] > 1 {
            bail!(
                "gather's slice size in collapsed or batching dimension {} must be 0 or 1, got {}",
                d,
                sizes[d as usize]
            );
        }
    }
    let offset_sizes: Vec<i64> = (0..orank as i64)
        .filter(|d| !dn.collapsed_slice_dims.contains(d) && !dn.operand_batching_dims.contains(d))
        .map(|d| sizes[d as usize])
        .collect();
    let mut out = Vec::with_capacity(out_rank);
    let (mut oi, mut bi) = (0, 0);
    for d in 0..out_rank as i64 {
        if dn.offset_dims.contains(&d) {
            out.push(offset_sizes[oi]);
            oi += 1;
        } else {
            out.push(idx_dims[bi]);
            bi += 1;
        }
    }
    Ok(make(a.ty, out))
}

fn scatter(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Scatter;
    if ops.len() < 3 || ops.len().is_multiple_of(2) {
        bail!(
            "scatter expects N operands, the indices and N updates (an odd count >= 3), got {}",
            ops.len()
        );
    }
    let n = (ops.len() - 1) / 2;
    let default = ScatterDimensionNumbers::default();
    let dn = inp.attrs.scatter_dims.as_deref().unwrap_or(&default);
    let first = array(op, ops[0], "operand")?;
    let ix = array(op, ops[n], "scatter indices")?;
    if !ix.ty.is_integral() {
        bail!(
            "scatter's indices must be integral, got {}",
            shape_str(ops[n])
        );
    }
    let ivd = dn.index_vector_dim;
    if ivd < 0 || ivd as usize > ix.rank() {
        bail!(
            "scatter's index_vector_dim {} is out of range for indices {}",
            ivd,
            shape_str(ops[n])
        );
    }
    let mut idx_dims: Vec<i64> = ix.dims.to_vec();
    let ivs = if (ivd as usize) < ix.rank() {
        idx_dims.remove(ivd as usize)
    } else {
        1
    };
    if dn.scatter_dims_to_operand_dims.len() as i64 != ivs {
        bail!(
            "scatter's scatter_dims_to_operand_dims has {} entries but the index vector has size {}",
            dn.scatter_dims_to_operand_dims.len(),
            ivs
        );
    }
    let orank = first.rank();
    sorted_unique_in(&dn.inserted_window_dims, orank, "inserted_window_dims", op)?;
    sorted_unique_in(&dn.input_batching_dims, orank, "input_batching_dims", op)?;
    unique_in(
        &dn.scatter_dims_to_operand_dims,
        orank,
        "scatter_dims_to_operand_dims",
        op,
    )?;
    if dn.update_window_dims.len() + dn.inserted_window_dims.len() + dn.input_batching_dims.len()
        != orank
    {
        bail!(
            "scatter: update_window_dims ({}) + inserted_window_dims ({}) + input_batching_dims ({}) must equal the operand rank ({})",
            dn.update_window_dims.len(),
            dn.inserted_window_dims.len(),
            dn.input_batching_dims.len(),
            orank
        );
    }
    let window_operand_dims: Vec<usize> = (0..orank)
        .filter(|&d| {
            !dn.inserted_window_dims.contains(&(d as i64))
                && !dn.input_batching_dims.contains(&(d as i64))
        })
        .collect();
    let mut input_types = Vec::new();
    for i in 0..n {
        let a = array(op, ops[i], "operand")?;
        if a.dims != first.dims {
            bail!(
                "scatter operands must have the same dimensions, got {} and {}",
                shape_str(ops[0]),
                shape_str(ops[i])
            );
        }
        let u = array(op, ops[n + 1 + i], "updates")?;
        if !same_type(u.ty, a.ty, true) {
            bail!(
                "scatter updates {} have a different element type than the operand {}",
                shape_str(ops[n + 1 + i]),
                shape_str(ops[i])
            );
        }
        let expected_rank = dn.update_window_dims.len() + idx_dims.len();
        if u.rank() != expected_rank {
            bail!(
                "scatter updates {} must have rank {} (update_window_dims + scatter dimensions of the indices)",
                shape_str(ops[n + 1 + i]),
                expected_rank
            );
        }
        sorted_unique_in(&dn.update_window_dims, u.rank(), "update_window_dims", op)?;
        let (mut wi, mut si) = (0, 0);
        for d in 0..u.rank() as i64 {
            if dn.update_window_dims.contains(&d) {
                let od = window_operand_dims[wi];
                if u.dims[d as usize] > a.dims[od] {
                    bail!(
                        "scatter update window dimension {} (size {}) exceeds operand dimension {} (size {})",
                        d,
                        u.dims[d as usize],
                        od,
                        a.dims[od]
                    );
                }
                wi += 1;
            } else {
                if !dims_match(u.dims[d as usize], idx_dims[si]) {
                    bail!(
                        "scatter update dimension {} (size {}) must match scatter dimension {} of the indices (size {})",
                        d,
                        u.dims[d as usize],
                        si,
                        idx_dims[si]
                    );
                }
                si += 1;
            }
        }
        input_types.push(a.ty);
    }
    let reducer = called(op, inp, 0, "to_apply")?;
    verify_reducer(op, &reducer, &input_types, &input_types)?;
    Ok(one_or_tuple(
        ops[..n].iter().map(|s| (*s).clone()).collect(),
    ))
}

// ----- sort, topk, map -----

fn sort(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Sort;
    if ops.is_empty() {
        bail!("sort needs at least one operand");
    }
    let first = array(op, ops[0], "operand")?;
    for (i, s) in ops.iter().enumerate().skip(1) {
        let a = array(op, s, "operand")?;
        if a.dims != first.dims {
            bail!(
                "sort operands must have the same dimensions; operand 0 is {}, operand {} is {}",
                shape_str(ops[0]),
                i,
                shape_str(s)
            );
        }
    }
    let d = single_dim(op, inp.attrs)?;
    check_dim(op, d, first.rank(), ops[0])?;
    let cmp = called(op, inp, 0, "comparator")?;
    if !compatible(&cmp.result, &Shape::scalar(ElementType::Pred), false) {
        bail!(
            "sort's comparator must return pred[], returns {}",
            shape_str(&cmp.result)
        );
    }
    if cmp.parameters.len() != 2 * ops.len() {
        bail!(
            "sort's comparator must take {} parameters, takes {}",
            2 * ops.len(),
            cmp.parameters.len()
        );
    }
    for (i, p) in cmp.parameters.iter().enumerate() {
        let want = Shape::scalar(ops[i / 2].element_type());
        if !compatible(&want, p, true) {
            bail!(
                "sort's comparator parameter {} should be {}, got {}",
                i,
                shape_str(&want),
                shape_str(p)
            );
        }
    }
    Ok(one_or_tuple(ops.iter().map(|s| (*s).clone()).collect()))
}

fn topk(s: &Shape, k: i64) -> Result<Shape> {
    let op = Opcode::TopK;
    let a = array(op, s, "operand")?;
    if a.rank() == 0 {
        bail!("topk expects an operand of rank >= 1, got {}", shape_str(s));
    }
    let last = a.dims[a.rank() - 1];
    if k < 0 || (last != UNBOUNDED_DIM && k > last) {
        bail!(
            "topk's k ({}) must be in [0, {}] for {}",
            k,
            last,
            shape_str(s)
        );
    }
    let mut dims = a.dims.to_vec();
    *dims.last_mut().unwrap() = k;
    Ok(Shape::Tuple(vec![
        make(a.ty, dims.clone()),
        make(ElementType::S32, dims),
    ]))
}

fn map(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Map;
    if ops.is_empty() {
        bail!("map needs at least one operand");
    }
    let first = array(op, ops[0], "operand")?;
    for s in ops.iter().skip(1) {
        let a = array(op, s, "operand")?;
        if a.dims != first.dims {
            bail!(
                "map operands must have the same dimensions, got {} and {}",
                shape_str(ops[0]),
                shape_str(s)
            );
        }
    }
    let f = called(op, inp, 0, "to_apply")?;
    if f.parameters.len() != ops.len() {
        bail!(
            "map's computation takes {} parameters but map has {} operands",
            f.parameters.len(),
            ops.len()
        );
    }
    let rt = match &f.result {
        Shape::Array(r) if r.rank() == 0 => r.ty,
        other => bail!(
            "map's computation must return a scalar, returns {}",
            shape_str(other)
        ),
    };
    for (i, p) in f.parameters.iter().enumerate() {
        if !compatible(p, &Shape::scalar(ops[i].element_type()), true) {
            bail!(
                "map's computation parameter {} is {} but operand {} is {}",
                i,
                shape_str(p),
                i,
                shape_str(ops[i])
            );
        }
    }
    Ok(make(rt, first.dims.to_vec()))
}

// ----- control flow and calls -----

fn check_args(opcode: Opcode, what: &str, params: &[Shape], args: &[&Shape]) -> Result<()> {
    if params.len() != args.len() {
        bail!(
            "{} passes {} argument(s) to its {} computation, which has {} parameter(s)",
            opcode,
            args.len(),
            what,
            params.len()
        );
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        if !compatible(p, a, false) {
            bail!(
                "{} operand {} is {} but parameter {} of its {} computation is {}",
                opcode,
                i,
                shape_str(a),
                i,
                what,
                shape_str(p)
            );
        }
    }
    Ok(())
}

fn call_like(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>, exact: bool) -> Result<Shape> {
    if inp.called.len() != 1 {
        bail!(
            "{} must call exactly one computation, calls {}",
            opcode,
            inp.called.len()
        );
    }
    let f = &inp.called[0];
    if exact {
        check_args(opcode, "called", &f.parameters, ops)?;
    }
    Ok(f.result.clone())
}

fn fusion(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Fusion;
    if inp.called.len() != 1 {
        bail!(
            "fusion must call exactly one computation, calls {}",
            inp.called.len()
        );
    }
    let f = &inp.called[0];
    if f.parameters.len() > ops.len() {
        bail!(
            "the fused computation has {} parameters but the fusion has {} operands",
            f.parameters.len(),
            ops.len()
        );
    }
    check_args(op, "fused", &f.parameters, &ops[..f.parameters.len()])?;
    Ok(f.result.clone())
}

fn while_(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::While;
    if inp.called.len() != 2 {
        bail!(
            "while must call a condition and a body, calls {} computation(s)",
            inp.called.len()
        );
    }
    let (cond, body) = (&inp.called[0], &inp.called[1]);
    check_args(op, "condition", &cond.parameters, ops)?;
    check_args(op, "body", &body.parameters, ops)?;
    if !compatible(&cond.result, &Shape::scalar(ElementType::Pred), false) {
        bail!(
            "while's condition must return pred[], returns {}",
            shape_str(&cond.result)
        );
    }
    if !compatible(&body.result, ops[0], false) {
        bail!(
            "while's body returns {} but its parameter is {}",
            shape_str(&body.result),
            shape_str(ops[0])
        );
    }
    Ok(body.result.clone())
}

fn conditional(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Conditional;
    if ops.is_empty() {
        bail!("conditional needs a predicate or branch index operand");
    }
    let sel = match ops[0] {
        Shape::Array(a) if a.rank() == 0 => a.ty,
        other => bail!(
            "the first operand of conditional must be a scalar, got {}",
            shape_str(other)
        ),
    };
    let nb = inp.called.len();
    match sel {
        ElementType::Pred if nb != 2 => {
            bail!("a conditional on a pred needs 2 branches, has {}", nb)
        }
        ElementType::Pred => {}
        ElementType::S32 if nb >= 1 => {}
        ElementType::S32 => bail!("an indexed conditional needs at least one branch"),
        other => bail!(
            "the first operand of an indexed conditional must be s32[], got {}[]",
            other
        ),
    }
    if ops.len() != nb + 1 {
        bail!(
            "conditional with {} branches needs {} operands, has {}",
            nb,
            nb + 1,
            ops.len()
        );
    }
    let mut result: Option<&Shape> = None;
    for (j, b) in inp.called.iter().enumerate() {
        check_args(
            op,
            &format!("branch {j}"),
            &b.parameters,
            &ops[j + 1..j + 2],
        )?;
        if let Some(r) = result {
            if !compatible(r, &b.result, false) {
                bail!(
                    "conditional branch {} returns {} but branch 0 returns {}",
                    j,
                    shape_str(&b.result),
                    shape_str(r)
                );
            }
        } else {
            result = Some(&b.result);
        }
    }
    Ok(result.cloned().unwrap_or(Shape::Tuple(vec![])))
}

// ----- collectives -----

fn collective_same(opcode: Opcode, ops: &[&Shape]) -> Result<Shape> {
    if ops.is_empty() {
        bail!("{} needs at least one operand", opcode);
    }
    for s in ops {
        if !s.is_array() {
            bail!("{} expects array operands, got {}", opcode, shape_str(s));
        }
    }
    Ok(one_or_tuple(ops.iter().map(|s| (*s).clone()).collect()))
}

fn done_from_start(opcode: Opcode, s: &Shape) -> Result<Shape> {
    match (opcode, s) {
        (Opcode::AllReduceDone, Shape::Array(_)) => Ok(s.clone()),
        (Opcode::AllReduceDone, Shape::Tuple(_)) => Ok(s.clone()),
        (_, Shape::Tuple(e)) if e.len() >= 2 => Ok(e[1].clone()),
        _ => bail!(
            "{} expects the tuple of its -start operation, got {}",
            opcode,
            shape_str(s)
        ),
    }
}

/// Size of a replica group as the replica groups give it (`None` without groups: callers fall
/// back on the intended result).
fn group_size(inp: &InferInput<'_>) -> Option<i64> {
    inp.attrs.replica_groups.as_deref()?.group_size()
}

fn all_gather(ops: &[&Shape], inp: &InferInput<'_>, start: bool) -> Result<Shape> {
    let op = if start {
        Opcode::AllGatherStart
    } else {
        Opcode::AllGather
    };
    if ops.is_empty() {
        bail!("{} needs at least one operand", op);
    }
    let d = single_dim(op, inp.attrs)?;
    // The shard count: from the replica groups, else from the intended result.
    let target_first = inp.target.and_then(|t| {
        let t = if start { t.tuple_elements().get(1)? } else { t };
        if ops.len() == 1 {
            Some(t.clone())
        } else {
            t.tuple_elements().first().cloned()
        }
    });
    let mut outs = Vec::new();
    let mut shard: Option<i64> = group_size(inp);
    for s in ops {
        let a = array(op, s, "operand")?;
        check_dim(op, d, a.rank(), s)?;
        if shard.is_none() {
            let t = target_first.as_ref().ok_or(ShapeError::NeedsTarget(op))?;
            let td = t.dims().get(d as usize).copied().unwrap_or(0);
            let od = a.dims[d as usize];
            shard = Some(if od == 0 { 1 } else { (td + od - 1) / od });
        }
        let mut dims = a.dims.to_vec();
        dims[d as usize] *= shard.unwrap_or(1);
        outs.push(make(a.ty, dims));
    }
    let gathered = one_or_tuple(outs);
    if start {
        let input = one_or_tuple(ops.iter().map(|s| (*s).clone()).collect());
        Ok(Shape::Tuple(vec![input, gathered]))
    } else {
        Ok(gathered)
    }
}

fn reduce_scatter(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::ReduceScatter;
    if ops.is_empty() {
        bail!("reduce-scatter needs at least one operand");
    }
    let d = single_dim(op, inp.attrs)?;
    let target_first = inp.target.and_then(|t| {
        if ops.len() == 1 {
            Some(t.clone())
        } else {
            t.tuple_elements().first().cloned()
        }
    });
    let mut shard = group_size(inp);
    let mut outs = Vec::new();
    for s in ops {
        let a = array(op, s, "operand")?;
        check_dim(op, d, a.rank(), s)?;
        let od = a.dims[d as usize];
        if shard.is_none() {
            let t = target_first.as_ref().ok_or(ShapeError::NeedsTarget(op))?;
            let td = t.dims().get(d as usize).copied().unwrap_or(0);
            shard = Some(if td == 0 { 1 } else { (od + td - 1) / td });
        }
        let k = shard.unwrap_or(1).max(1);
        if od % k != 0 {
            bail!(
                "reduce-scatter's scatter dimension size {} must be divisible by the shard count {}",
                od,
                k
            );
        }
        let mut dims = a.dims.to_vec();
        dims[d as usize] = od / k;
        outs.push(make(a.ty, dims));
    }
    Ok(one_or_tuple(outs))
}

fn all_to_all(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::AllToAll;
    if ops.is_empty() {
        bail!("all-to-all needs at least one operand");
    }
    for s in ops {
        array(op, s, "operand")?;
    }
    match inp.attrs.dimensions.as_deref() {
        Some([d]) => {
            if ops.len() != 1 {
                bail!(
                    "an all-to-all with a split dimension takes one operand, got {}",
                    ops.len()
                );
            }
            let a = array(op, ops[0], "operand")?;
            check_dim(op, *d, a.rank(), ops[0])?;
            let split = group_size(inp).unwrap_or(1).max(1);
            if a.dims[*d as usize] % split != 0 {
                bail!(
                    "all-to-all's split dimension {} (size {}) must be divisible by the split count {}",
                    d,
                    a.dims[*d as usize],
                    split
                );
            }
            Ok(ops[0].clone())
        }
        Some(other) if !other.is_empty() => {
            bail!("all-to-all takes at most one split dimension")
        }
        _ => {
            if let Some(k) = group_size(inp) {
                if k != ops.len() as i64 {
                    bail!(
                        "a tuple all-to-all needs one operand per participant ({}), has {}",
                        k,
                        ops.len()
                    );
                }
            }
            Ok(Shape::Tuple(ops.iter().map(|s| (*s).clone()).collect()))
        }
    }
}

fn collective_permute(ops: &[&Shape], start: bool, inp: &InferInput<'_>) -> Result<Shape> {
    let op = if start {
        Opcode::CollectivePermuteStart
    } else {
        Opcode::CollectivePermute
    };
    if ops.is_empty() {
        bail!("{} needs at least one operand", op);
    }
    // The in-place form: input, output buffer, input offsets, output offsets.
    let inplace = ops.len() == 4 && !ops[2].is_array();
    let result = if inplace {
        ops[1].clone()
    } else {
        one_or_tuple(ops.iter().map(|s| (*s).clone()).collect())
    };
    if !start {
        return Ok(result);
    }
    let input = if inplace {
        ops[0].clone()
    } else {
        result.clone()
    };
    let mut elems = vec![input, result];
    // Context shapes (u32[] counters) come from the declared shape.
    if let Some(Shape::Tuple(t)) = inp.target {
        elems.extend(t.iter().skip(2).cloned());
    }
    Ok(Shape::Tuple(elems))
}

fn ragged_all_to_all(ops: &[&Shape]) -> Result<Shape> {
    let op = Opcode::RaggedAllToAll;
    let input = array(op, ops[0], "input")?;
    let output = array(op, ops[1], "output")?;
    if !same_type(input.ty, output.ty, false) {
        bail!(
            "ragged-all-to-all's input {} and output {} must have the same element type",
            shape_str(ops[0]),
            shape_str(ops[1])
        );
    }
    let first = array(op, ops[2], "offsets")?;
    for (i, s) in ops.iter().enumerate().skip(2) {
        let a = array(op, s, "offsets/sizes")?;
        if !a.ty.is_integral() || a.dims != first.dims || a.ty != first.ty {
            bail!(
                "ragged-all-to-all's offset/size operand {} is {}; all four must be integral arrays of one shape",
                i,
                shape_str(s)
            );
        }
    }
    Ok(ops[1].clone())
}

// ----- async -----

fn async_start(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::AsyncStart;
    let Some(f) = inp.called.first() else {
        bail!("async-start must call a computation");
    };
    check_args(op, "wrapped", &f.parameters, ops)?;
    let mut elems = vec![Shape::Tuple(f.parameters.clone()), f.result.clone()];
    if let Some(Shape::Tuple(t)) = inp.target {
        elems.extend(t.iter().skip(2).cloned());
    }
    Ok(Shape::Tuple(elems))
}

fn async_done(s: &Shape, inp: &InferInput<'_>) -> Result<Shape> {
    match s {
        Shape::Tuple(e) if e.len() >= 2 => {
            if let Some(f) = inp.called.first() {
                if !compatible(&e[1], &f.result, false) {
                    bail!(
                        "async-done's operand holds {} at index {{1}} but the wrapped computation returns {}",
                        shape_str(&e[1]),
                        shape_str(&f.result)
                    );
                }
            }
            Ok(e[1].clone())
        }
        other => bail!(
            "async-done expects the tuple of an async-start, got {}",
            shape_str(other)
        ),
    }
}

// ----- rng, batch norm, fft, triangular solve -----

fn rng(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Rng;
    if ops.len() != 2 {
        bail!("rng expects 2 operands, got {}", ops.len());
    }
    let a = array(op, ops[0], "operand")?;
    let b = array(op, ops[1], "operand")?;
    if a.rank() != 0 || b.rank() != 0 {
        bail!(
            "rng expects scalar operands, got {} and {}",
            shape_str(ops[0]),
            shape_str(ops[1])
        );
    }
    if a.ty != b.ty {
        bail!(
            "rng's operands must have the same element type, got {} and {}",
            a.ty,
            b.ty
        );
    }
    match inp.attrs.distribution {
        Some(RandomDistribution::Normal) if !a.ty.is_float() => {
            bail!(
                "rng with distribution=rng_normal needs floating-point operands, got {}",
                a.ty
            )
        }
        Some(RandomDistribution::Uniform)
            if !(a.ty.is_float() || a.ty.is_integral() || a.ty == ElementType::Pred) =>
        {
            bail!(
                "rng with distribution=rng_uniform needs floating-point, integral or pred operands, got {}",
                a.ty
            )
        }
        None => bail!("rng needs distribution=..."),
        _ => {}
    }
    let t = inp.target.ok_or(ShapeError::NeedsTarget(op))?;
    let ta = array(op, t, "result")?;
    if !same_type(ta.ty, a.ty, true) {
        bail!(
            "rng's result {} has a different element type than its operands ({})",
            shape_str(t),
            a.ty
        );
    }
    Ok(t.clone())
}

fn batch_norm(opcode: Opcode, ops: &[&Shape], feature_index: i64) -> Result<Shape> {
    let x = array(opcode, ops[0], "operand")?;
    if !x.ty.is_float() {
        bail!(
            "{} expects a floating-point operand, got {}",
            opcode,
            shape_str(ops[0])
        );
    }
    if feature_index < 0 || feature_index as usize >= x.rank() {
        bail!(
            "{}'s feature_index {} is out of range for {} (rank {})",
            opcode,
            feature_index,
            shape_str(ops[0]),
            x.rank()
        );
    }
    let f = x.dims[feature_index as usize];
    // The per-feature operands: scale, offset (training); scale, offset, mean, variance
    // (inference); scale, mean, variance (grad; its last operand is grad_output).
    let per_feature: &[usize] = match opcode {
        Opcode::BatchNormTraining => &[1, 2],
        Opcode::BatchNormInference => &[1, 2, 3, 4],
        _ => &[1, 2, 3],
    };
    for &i in per_feature {
        let a = array(opcode, ops[i], "per-feature operand")?;
        if a.rank() != 1 || a.dims[0] != f || !same_type(a.ty, x.ty, true) {
            bail!(
                "{} operand {} must be {}[{}] (one value per feature), got {}",
                opcode,
                i,
                x.ty,
                f,
                shape_str(ops[i])
            );
        }
    }
    let vec_shape = make(x.ty, vec![f]);
    match opcode {
        Opcode::BatchNormInference => Ok(ops[0].clone()),
        Opcode::BatchNormTraining => Ok(Shape::Tuple(vec![
            ops[0].clone(),
            vec_shape.clone(),
            vec_shape,
        ])),
        _ => {
            let g = array(opcode, ops[4], "grad_output")?;
            if g.dims != x.dims {
                bail!(
                    "batch-norm-grad's grad_output {} must have the operand's dimensions {}",
                    shape_str(ops[4]),
                    shape_str(ops[0])
                );
            }
            Ok(Shape::Tuple(vec![
                ops[0].clone(),
                vec_shape.clone(),
                vec_shape,
            ]))
        }
    }
}

fn fft(s: &Shape, attrs: &Attrs) -> Result<Shape> {
    let op = Opcode::Fft;
    let a = array(op, s, "operand")?;
    let Some(len) = attrs.fft_length.as_deref() else {
        bail!("fft needs fft_length={{...}}");
    };
    let n = len.len();
    if !(1..=3).contains(&n) || a.rank() < n {
        bail!(
            "fft_length {} must have 1 to 3 entries and at most the operand's rank ({})",
            fmt_dims(len),
            a.rank()
        );
    }
    let r = a.rank();
    let minor = &a.dims[r - n..];
    let ty = attrs.fft_type.unwrap_or(FftType::Fft);
    match ty {
        FftType::Fft | FftType::Ifft => {
            if !a.ty.is_complex() {
                bail!("fft expects a complex operand, got {}", shape_str(s));
            }
            if minor != len {
                bail!(
                    "fft_length {} must equal the minor dimensions of {}",
                    fmt_dims(len),
                    shape_str(s)
                );
            }
            Ok(s.clone())
        }
        FftType::Rfft => {
            let out = match a.ty {
                ElementType::F32 => ElementType::C64,
                ElementType::F64 => ElementType::C128,
                _ => bail!("rfft expects an f32 or f64 operand, got {}", shape_str(s)),
            };
            if minor != len {
                bail!(
                    "fft_length {} must equal the minor dimensions of {}",
                    fmt_dims(len),
                    shape_str(s)
                );
            }
            let mut dims = a.dims.to_vec();
            dims[r - 1] = len[n - 1] / 2 + 1;
            Ok(make(out, dims))
        }
        FftType::Irfft => {
            let out = match a.ty {
                ElementType::C64 => ElementType::F32,
                ElementType::C128 => ElementType::F64,
                _ => bail!("irfft expects a c64 or c128 operand, got {}", shape_str(s)),
            };
            for i in 0..n - 1 {
                if minor[i] != len[i] {
                    bail!(
                        "fft_length {} does not match the minor dimensions of {}",
                        fmt_dims(len),
                        shape_str(s)
                    );
                }
            }
            if minor[n - 1] != len[n - 1] / 2 + 1 {
                bail!(
                    "irfft's minor dimension must be fft_length/2+1 = {}, got {}",
                    len[n - 1] / 2 + 1,
                    minor[n - 1]
                );
            }
            let mut dims = a.dims.to_vec();
            dims[r - 1] = len[n - 1];
            Ok(make(out, dims))
        }
    }
}

fn triangular_solve(a_s: &Shape, b_s: &Shape, attrs: &Attrs) -> Result<Shape> {
    let op = Opcode::TriangularSolve;
    let a = array(op, a_s, "a")?;
    let b = array(op, b_s, "b")?;
    if !(a.ty.is_float() || a.ty.is_complex()) || a.ty != b.ty {
        bail!(
            "triangular-solve expects floating-point or complex operands of one type, got {} and {}",
            shape_str(a_s),
            shape_str(b_s)
        );
    }
    let r = a.rank();
    if r < 2 || b.rank() != r {
        bail!(
            "triangular-solve expects operands of the same rank >= 2, got {} and {}",
            shape_str(a_s),
            shape_str(b_s)
        );
    }
    if a.dims[r - 1] != a.dims[r - 2] {
        bail!(
            "triangular-solve's a must be square in its two minor dimensions, got {}",
            shape_str(a_s)
        );
    }
    if a.dims[..r - 2] != b.dims[..r - 2] {
        bail!(
            "triangular-solve's batch dimensions differ: {} and {}",
            shape_str(a_s),
            shape_str(b_s)
        );
    }
    let left = attrs.triangular_solve.map(|o| o.left_side).unwrap_or(false);
    let k = if left { b.dims[r - 2] } else { b.dims[r - 1] };
    if k != a.dims[r - 1] {
        bail!(
            "triangular-solve's b {} does not fit a {} (left_side={})",
            shape_str(b_s),
            shape_str(a_s),
            left
        );
    }
    Ok(b_s.clone())
}
