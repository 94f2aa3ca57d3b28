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

mod contraction;
mod program;
use contraction::*;
use program::*;

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
        ReducePrecision => reduce_precision(opcode, ops, inp),
        Compare | Add | Subtract | Multiply | Divide | Remainder | Maximum | Minimum | Power
        | Atan2 | And | Or | Xor | ShiftLeft | ShiftRightArithmetic | ShiftRightLogical | Mulhi
        | Complex => binary(opcode, ops[0], ops[1]),
        Select => select(ops[0], ops[1], ops[2]),
        Clamp => clamp(ops[0], ops[1], ops[2]),
        Tuple => Ok(Shape::Tuple(ops.iter().map(|s| (*s).clone()).collect())),
        GetTupleElement => get_tuple_element(ops, inp),
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
        CopyDone => copy_done(ops),
        Send => {
            expect_token(opcode, ops[1], 1)?;
            Ok(Shape::Tuple(vec![
                ops[0].clone(),
                Shape::scalar(ElementType::U32),
                Shape::Token,
            ]))
        }
        SendDone => Ok(Shape::Token),
        Recv => recv(opcode, ops, inp),
        RecvDone => match ops[0] {
            Shape::Tuple(e) if !e.is_empty() => Ok(Shape::Tuple(vec![e[0].clone(), Shape::Token])),
            other => bail!(
                "recv-done expects the tuple of a recv, got {}",
                shape_str(other)
            ),
        },
        Infeed => infeed(opcode, ops, inp),
        Outfeed => outfeed(opcode, ops, inp),
        AfterAll => Ok(Shape::Token),
        AddDependency => {
            expect_token(opcode, ops[1], 1)?;
            Ok(ops[0].clone())
        }
        PartitionId | ReplicaId => Ok(Shape::scalar(ElementType::U32)),
        Rng => rng(ops, inp),
        RngBitGenerator => rng_bit_generator(opcode, ops, inp),
        RngGetAndUpdateState => Ok(Shape::array(ElementType::U64, &[2])),
        BatchNormTraining => batch_norm(opcode, ops, inp.attrs.feature_index),
        BatchNormInference => batch_norm(opcode, ops, inp.attrs.feature_index),
        BatchNormGrad => batch_norm(opcode, ops, inp.attrs.feature_index),
        Fft => fft(ops[0], inp.attrs),
        TriangularSolve => triangular_solve(ops[0], ops[1], inp.attrs),
        Cholesky => cholesky(opcode, ops),
        GetDimensionSize => get_dimension_size(opcode, ops, inp),
        SetDimensionSize => set_dimension_size(opcode, ops, inp),
        Domain | OptimizationBarrier | Copy => Ok(ops[0].clone()),
        Bitcast | Parameter | Constant | Scan | Shuffle => {
            inp.target.cloned().ok_or(ShapeError::NeedsTarget(opcode))
        }
        // Every elementwise unary opcode was handled by the first arm.
        _ => inp.target.cloned().ok_or(ShapeError::NeedsTarget(opcode)),
    }
}

// ----- arms of `infer` too long to inline -----

fn reduce_precision(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

fn get_tuple_element(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

fn copy_done(ops: &[&Shape]) -> Result<Shape> {
    match ops[0] {
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
    }
}

fn recv(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

fn infeed(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    expect_token(opcode, ops[0], 0)?;
    let t = inp.target.ok_or(ShapeError::NeedsTarget(opcode))?;
    match t {
        Shape::Tuple(e) if e.len() == 2 => Ok(Shape::Tuple(vec![e[0].clone(), Shape::Token])),
        other => bail!(
            "infeed's shape must be a tuple (data, token[]), got {}",
            shape_str(other)
        ),
    }
}

fn outfeed(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

fn rng_bit_generator(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

fn cholesky(opcode: Opcode, ops: &[&Shape]) -> Result<Shape> {
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

fn get_dimension_size(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let d = single_dim(opcode, inp.attrs)?;
    let a = array(opcode, ops[0], "operand")?;
    check_dim(opcode, d, a.rank(), ops[0])?;
    Ok(Shape::scalar(ElementType::S32))
}

fn set_dimension_size(opcode: Opcode, ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

/// The operands of reduce and reduce-window are N inputs of one set of dimensions, then N
/// scalar init values: checks that there are an even number of them, at least two.
fn check_inputs_then_inits(op: Opcode, ops: &[&Shape]) -> Result<()> {
    if ops.len() < 2 || !ops.len().is_multiple_of(2) {
        bail!(
            "{op} expects an even number (>= 2) of operands, got {}",
            ops.len()
        );
    }
    Ok(())
}

/// The element types of the inputs and of the init values of reduce or reduce-window (whose
/// operand count [`check_inputs_then_inits`] has passed), checking that the inputs are arrays
/// of the first one's dimensions and the init values scalars.
fn input_and_init_types(
    op: Opcode,
    ops: &[&Shape],
) -> Result<(Vec<ElementType>, Vec<ElementType>)> {
    let n = ops.len() / 2;
    let first = array(op, ops[0], "input")?;
    let mut input_types = Vec::with_capacity(n);
    let mut init_types = Vec::with_capacity(n);
    for i in 0..n {
        let a = array(op, ops[i], "input")?;
        if a.dims != first.dims {
            bail!(
                "{op} inputs must have the same dimensions, got {} and {}",
                shape_str(ops[0]),
                shape_str(ops[i])
            );
        }
        input_types.push(a.ty);
        let init = array(op, ops[n + i], "init value")?;
        if init.rank() != 0 {
            bail!(
                "{op}'s init value {} must be a scalar",
                shape_str(ops[n + i])
            );
        }
        init_types.push(init.ty);
    }
    Ok((input_types, init_types))
}

fn reduce(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
    let op = Opcode::Reduce;
    check_inputs_then_inits(op, ops)?;
    let first = array(op, ops[0], "input")?;
    let (input_types, init_types) = input_and_init_types(op, ops)?;
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
    check_inputs_then_inits(op, ops)?;
    let first = array(op, ops[0], "input")?;
    let Some(window) = inp.attrs.window.as_deref() else {
        bail!("reduce-window needs window={{...}}");
    };
    let (input_types, init_types) = input_and_init_types(op, ops)?;
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
