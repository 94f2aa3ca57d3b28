//! Unit tests of shape inference and the verifier, built with the Module API.

use super::shape_inference::{infer_shape, ShapeError};
use super::*;
use crate::attrs::{
    Attrs, Comparison, ComparisonDirection, ComparisonType, ConvDimensionNumbers,
    DotDimensionNumbers, GatherDimensionNumbers, PaddingDim, RandomDistribution,
    ScatterDimensionNumbers, SliceDim, Window, WindowDim,
};
use crate::instruction::Instruction;
use crate::module::{Module, ProgramShape, Schedule};
use crate::shape::Shape;
use crate::sharding::Sharding;
use crate::types::ElementType::{self, *};

fn a(ty: ElementType, dims: &[i64]) -> Shape {
    Shape::array(ty, dims)
}

fn attrs() -> Attrs {
    let at = Attrs::default();
    assert_eq!((at.feature_group_count, at.batch_group_count), (1, 1));
    at
}

fn infer(op: Opcode, ops: &[Shape], at: &Attrs) -> Result<Shape, ShapeError> {
    let refs: Vec<&Shape> = ops.iter().collect();
    infer_shape(op, &refs, at, &[], None)
}

fn infer_t(op: Opcode, ops: &[Shape], at: &Attrs, target: &Shape) -> Result<Shape, ShapeError> {
    let refs: Vec<&Shape> = ops.iter().collect();
    infer_shape(op, &refs, at, &[], Some(target))
}

fn err(r: Result<Shape, ShapeError>) -> String {
    match r {
        Ok(s) => panic!("expected an error, got {}", shape_str(&s)),
        Err(e) => e.to_string(),
    }
}

fn scalar_add_sig(ty: ElementType) -> ProgramShape {
    ProgramShape {
        parameters: vec![Shape::scalar(ty), Shape::scalar(ty)],
        result: Shape::scalar(ty),
    }
}

// ----- element-wise -----

#[test]
fn elementwise_types_and_mixed_precision() {
    let at = attrs();
    assert_eq!(
        infer(Opcode::Add, &[a(F32, &[2, 3]), a(F32, &[2, 3])], &at).unwrap(),
        a(F32, &[2, 3])
    );
    // bf16 + f32 is allowed by inference and gives the wider type.
    assert_eq!(
        infer(Opcode::Multiply, &[a(BF16, &[4]), a(F32, &[4])], &at).unwrap(),
        a(F32, &[4])
    );
    assert!(err(infer(Opcode::Add, &[a(F32, &[4]), a(S32, &[4])], &at))
        .contains("different element types"));
    assert!(
        err(infer(Opcode::Add, &[a(F32, &[4]), a(F32, &[5])], &at)).contains("implicit broadcast")
    );
    assert!(
        err(infer(Opcode::And, &[a(F32, &[4]), a(F32, &[4])], &at)).contains("pred or integral")
    );
    assert_eq!(
        infer(Opcode::Xor, &[a(Pred, &[4]), a(Pred, &[4])], &at).unwrap(),
        a(Pred, &[4])
    );
    assert!(err(infer(Opcode::ShiftLeft, &[a(F32, &[1]), a(F32, &[1])], &at)).contains("integral"));
    assert_eq!(
        infer(Opcode::Complex, &[a(F64, &[3]), a(F64, &[3])], &at).unwrap(),
        a(C128, &[3])
    );
}

#[test]
fn unary_type_rules() {
    let at = attrs();
    assert_eq!(
        infer(Opcode::Abs, &[a(C64, &[2])], &at).unwrap(),
        a(F32, &[2])
    );
    assert_eq!(
        infer(Opcode::Real, &[a(C128, &[])], &at).unwrap(),
        a(F64, &[])
    );
    assert_eq!(
        infer(Opcode::IsFinite, &[a(BF16, &[7])], &at).unwrap(),
        a(Pred, &[7])
    );
    assert!(err(infer(Opcode::Exp, &[a(S32, &[2])], &at)).contains("floating-point or complex"));
    assert!(err(infer(Opcode::Floor, &[a(C64, &[2])], &at)).contains("floating-point"));
    assert!(err(infer(Opcode::Not, &[a(F32, &[2])], &at)).contains("pred or integral"));
    assert!(err(infer(Opcode::Abs, &[a(U8, &[2])], &at)).contains("signed"));
    let tuple = Shape::tuple(vec![a(F32, &[1]), Shape::Token]);
    assert_eq!(
        infer(Opcode::Copy, std::slice::from_ref(&tuple), &at).unwrap(),
        tuple
    );
}

#[test]
fn compare_gives_pred_and_select_clamp() {
    let mut at = attrs();
    at.comparison = Some(Comparison {
        direction: ComparisonDirection::Lt,
        ty: None,
    });
    assert_eq!(
        infer(Opcode::Compare, &[a(F32, &[8]), a(F32, &[8])], &at).unwrap(),
        a(Pred, &[8])
    );
    assert_eq!(
        infer(
            Opcode::Select,
            &[a(Pred, &[8]), a(S32, &[8]), a(S32, &[8])],
            &at
        )
        .unwrap(),
        a(S32, &[8])
    );
    assert!(err(infer(
        Opcode::Select,
        &[a(S32, &[8]), a(S32, &[8]), a(S32, &[8])],
        &at
    ))
    .contains("pred"));
    assert!(err(infer(
        Opcode::Select,
        &[a(Pred, &[]), a(S32, &[8]), a(S32, &[8])],
        &at
    ))
    .contains("dimensions"));
    // Clamp accepts scalar bounds.
    assert_eq!(
        infer(
            Opcode::Clamp,
            &[a(F32, &[]), a(F32, &[3, 3]), a(F32, &[])],
            &at
        )
        .unwrap(),
        a(F32, &[3, 3])
    );
}

#[test]
fn convert_and_bitcast_convert() {
    let at = attrs();
    assert_eq!(
        infer_t(Opcode::Convert, &[a(F32, &[2, 2])], &at, &a(S8, &[])).unwrap(),
        a(S8, &[2, 2])
    );
    assert!(err(infer_t(
        Opcode::Convert,
        &[a(C64, &[2])],
        &at,
        &a(F32, &[2])
    ))
    .contains("complex to real"));
    // Narrowing adds a minor dimension, widening removes it.
    assert_eq!(
        infer_t(Opcode::BitcastConvert, &[a(F32, &[5])], &at, &a(U8, &[])).unwrap(),
        a(U8, &[5, 4])
    );
    assert_eq!(
        infer_t(
            Opcode::BitcastConvert,
            &[a(U16, &[5, 2])],
            &at,
            &a(F32, &[])
        )
        .unwrap(),
        a(F32, &[5])
    );
    assert!(err(infer_t(
        Opcode::BitcastConvert,
        &[a(U16, &[5, 3])],
        &at,
        &a(F32, &[])
    ))
    .contains("minor dimension of size 2"));
    assert!(matches!(
        infer(Opcode::Convert, &[a(F32, &[2])], &at),
        Err(ShapeError::NeedsTarget(Opcode::Convert))
    ));
}

// ----- data movement -----

#[test]
fn broadcast_reshape_transpose_reverse() {
    let mut at = attrs();
    at.dimensions = Some(vec![1]);
    assert_eq!(
        infer_t(Opcode::Broadcast, &[a(F32, &[3])], &at, &a(F32, &[2, 3])).unwrap(),
        a(F32, &[2, 3])
    );
    assert!(err(infer_t(
        Opcode::Broadcast,
        &[a(F32, &[3])],
        &at,
        &a(F32, &[3, 2])
    ))
    .contains("operand dimension 0 (size 3) to result dimension 1 (size 2)"));
    assert_eq!(
        infer_t(
            Opcode::Reshape,
            &[a(S32, &[2, 6])],
            &attrs(),
            &a(S32, &[3, 4])
        )
        .unwrap(),
        a(S32, &[3, 4])
    );
    assert!(err(infer_t(
        Opcode::Reshape,
        &[a(S32, &[2, 6])],
        &attrs(),
        &a(S32, &[3, 5])
    ))
    .contains("element count"));
    at.dimensions = Some(vec![2, 0, 1]);
    assert_eq!(
        infer(Opcode::Transpose, &[a(F32, &[2, 3, 4])], &at).unwrap(),
        a(F32, &[4, 2, 3])
    );
    at.dimensions = Some(vec![0, 0, 1]);
    assert!(err(infer(Opcode::Transpose, &[a(F32, &[2, 3, 4])], &at)).contains("permutation"));
    at.dimensions = Some(vec![3]);
    assert!(err(infer(Opcode::Reverse, &[a(F32, &[2, 3, 4])], &at)).contains("out of range"));
}

#[test]
fn slices_and_dynamic_slices() {
    let mut at = attrs();
    at.slice = Some(vec![
        SliceDim {
            start: 0,
            limit: 8,
            stride: 3,
        },
        SliceDim {
            start: 1,
            limit: 4,
            stride: 1,
        },
    ]);
    assert_eq!(
        infer(Opcode::Slice, &[a(F32, &[8, 4])], &at).unwrap(),
        a(F32, &[3, 3])
    );
    at.slice.as_mut().unwrap()[1].limit = 5;
    assert!(err(infer(Opcode::Slice, &[a(F32, &[8, 4])], &at)).contains("exceeds the size 4"));

    let mut ds = attrs();
    ds.dynamic_slice_sizes = Some(vec![2, 4]);
    let idx = a(S32, &[]);
    assert_eq!(
        infer(
            Opcode::DynamicSlice,
            &[a(F32, &[8, 4]), idx.clone(), idx.clone()],
            &ds
        )
        .unwrap(),
        a(F32, &[2, 4])
    );
    assert!(err(infer(
        Opcode::DynamicSlice,
        &[a(F32, &[8, 4]), idx.clone()],
        &ds
    ))
    .contains("needs 2 start indices"));
    assert_eq!(
        infer(
            Opcode::DynamicUpdateSlice,
            &[a(F32, &[8, 4]), a(F32, &[2, 4]), idx.clone(), idx.clone()],
            &attrs()
        )
        .unwrap(),
        a(F32, &[8, 4])
    );
    assert!(err(infer(
        Opcode::DynamicUpdateSlice,
        &[a(F32, &[8, 4]), a(F32, &[2, 5]), idx.clone(), idx],
        &attrs()
    ))
    .contains("does not fit"));
}

#[test]
fn concatenate_pad_iota() {
    let mut at = attrs();
    at.dimensions = Some(vec![1]);
    assert_eq!(
        infer(
            Opcode::Concatenate,
            &[a(F32, &[2, 3]), a(F32, &[2, 5]), a(F32, &[2, 1])],
            &at
        )
        .unwrap(),
        a(F32, &[2, 9])
    );
    assert!(err(infer(
        Opcode::Concatenate,
        &[a(F32, &[2, 3]), a(F32, &[3, 5])],
        &at
    ))
    .contains("dimension 0"));
    // An unbounded size (`?`) concatenated gives `?`; beside a known size it takes that size.
    // (A fuzzed module once overflowed here adding the two `?` markers.)
    let q = crate::shape::UNBOUNDED_DIM;
    let mut d0 = attrs();
    d0.dimensions = Some(vec![0]);
    assert_eq!(
        infer(
            Opcode::Concatenate,
            &[a(F32, &[q, 4]), a(F32, &[q, 4])],
            &d0
        )
        .unwrap(),
        a(F32, &[q, 4])
    );
    assert_eq!(
        infer(
            Opcode::Concatenate,
            &[a(F32, &[3, q]), a(F32, &[2, 4])],
            &d0
        )
        .unwrap(),
        a(F32, &[5, 4])
    );
    assert!(err(infer(
        Opcode::Concatenate,
        &[a(F32, &[i64::MAX, 4]), a(F32, &[1, 4])],
        &d0
    ))
    .contains("than an i64 can count"));
    let mut p = attrs();
    p.padding = Some(vec![
        PaddingDim {
            low: 1,
            high: 2,
            interior: 1,
        },
        PaddingDim {
            low: -1,
            high: 0,
            interior: 0,
        },
    ]);
    // 1 + 2 + 4 + 3*1 = 10; 5 - 1 = 4.
    assert_eq!(
        infer(Opcode::Pad, &[a(F32, &[4, 5]), a(F32, &[])], &p).unwrap(),
        a(F32, &[10, 4])
    );
    let mut io = attrs();
    io.iota_dimension = 2;
    assert!(err(infer_t(Opcode::Iota, &[], &io, &a(S32, &[4, 4]))).contains("out of range"));
    assert!(err(infer_t(Opcode::Iota, &[], &attrs(), &a(S32, &[]))).contains("scalars"));
}

// ----- reductions -----

#[test]
fn reduce_single_and_variadic() {
    let mut at = attrs();
    at.dimensions = Some(vec![1]);
    let called = [scalar_add_sig(F32)];
    let ops = [a(F32, &[4, 8, 2]), a(F32, &[])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert_eq!(
        infer_shape(Opcode::Reduce, &refs, &at, &called, None).unwrap(),
        a(F32, &[4, 2])
    );
    // Variadic argmax-style reduce: (f32, s32) x 2.
    let sig = ProgramShape {
        parameters: vec![
            Shape::scalar(F32),
            Shape::scalar(S32),
            Shape::scalar(F32),
            Shape::scalar(S32),
        ],
        result: Shape::tuple(vec![Shape::scalar(F32), Shape::scalar(S32)]),
    };
    let ops = [a(F32, &[4, 8]), a(S32, &[4, 8]), a(F32, &[]), a(S32, &[])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert_eq!(
        infer_shape(Opcode::Reduce, &refs, &at, std::slice::from_ref(&sig), None).unwrap(),
        Shape::tuple(vec![a(F32, &[4]), a(S32, &[4])])
    );
    // A reducer with the wrong parameter count.
    let bad = ProgramShape {
        parameters: vec![Shape::scalar(F32)],
        result: Shape::scalar(F32),
    };
    let ops = [a(F32, &[4, 8]), a(F32, &[])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert!(infer_shape(Opcode::Reduce, &refs, &at, &[bad], None)
        .unwrap_err()
        .to_string()
        .contains("must take 2 parameters"));
}

fn window(sizes: &[i64], strides: &[i64], pads: &[(i64, i64)]) -> Window {
    Window {
        dims: sizes
            .iter()
            .zip(strides)
            .zip(pads)
            .map(|((&size, &stride), &(lo, hi))| WindowDim {
                size,
                stride,
                padding_low: lo,
                padding_high: hi,
                ..WindowDim::default()
            })
            .collect(),
    }
}

#[test]
fn reduce_window_and_select_and_scatter() {
    let mut at = attrs();
    at.window = Some(Box::new(window(
        &[1, 3, 3, 1],
        &[1, 2, 2, 1],
        &[(0, 0), (0, 1), (0, 1), (0, 0)],
    )));
    let ops = [a(F32, &[2, 9, 9, 4]), a(F32, &[])];
    let refs: Vec<&Shape> = ops.iter().collect();
    let out = infer_shape(
        Opcode::ReduceWindow,
        &refs,
        &at,
        &[scalar_add_sig(F32)],
        None,
    )
    .unwrap();
    // (9 + 1 - 3) / 2 + 1 = 4.
    assert_eq!(out, a(F32, &[2, 4, 4, 4]));
    let select = ProgramShape {
        parameters: vec![Shape::scalar(F32), Shape::scalar(F32)],
        result: Shape::scalar(Pred),
    };
    let ops = [a(F32, &[2, 9, 9, 4]), a(F32, &[2, 4, 4, 4]), a(F32, &[])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert_eq!(
        infer_shape(
            Opcode::SelectAndScatter,
            &refs,
            &at,
            &[select.clone(), scalar_add_sig(F32)],
            None
        )
        .unwrap(),
        a(F32, &[2, 9, 9, 4])
    );
    let ops = [a(F32, &[2, 9, 9, 4]), a(F32, &[2, 5, 4, 4]), a(F32, &[])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert!(infer_shape(
        Opcode::SelectAndScatter,
        &refs,
        &at,
        &[select, scalar_add_sig(F32)],
        None
    )
    .unwrap_err()
    .to_string()
    .contains("source"));
}

// ----- dot and convolution -----

fn dot_attrs(lb: &[i64], lc: &[i64], rb: &[i64], rc: &[i64]) -> Attrs {
    let mut at = attrs();
    at.dot_dims = Some(Box::new(DotDimensionNumbers {
        lhs_batch_dimensions: lb.to_vec(),
        lhs_contracting_dimensions: lc.to_vec(),
        rhs_batch_dimensions: rb.to_vec(),
        rhs_contracting_dimensions: rc.to_vec(),
    }));
    at
}

#[test]
fn dot_batch_and_contracting() {
    let at = dot_attrs(&[0], &[2], &[0], &[1]);
    assert_eq!(
        infer(
            Opcode::Dot,
            &[a(BF16, &[8, 16, 32]), a(BF16, &[8, 32, 64])],
            &at
        )
        .unwrap(),
        a(BF16, &[8, 16, 64])
    );
    // Preferred element type from the target.
    assert_eq!(
        infer_t(
            Opcode::Dot,
            &[a(BF16, &[8, 16, 32]), a(BF16, &[8, 32, 64])],
            &at,
            &a(F32, &[8, 16, 64])
        )
        .unwrap(),
        a(F32, &[8, 16, 64])
    );
    assert_eq!(
        err(infer(
            Opcode::Dot,
            &[a(F32, &[128, 64]), a(F32, &[128, 64])],
            &dot_attrs(&[], &[1], &[], &[2])
        )),
        "rhs contracting dimension 2 is out of range for f32[128,64] (rank 2)"
    );
    assert!(err(infer(
        Opcode::Dot,
        &[a(F32, &[4, 8]), a(F32, &[9, 3])],
        &dot_attrs(&[], &[1], &[], &[0])
    ))
    .contains("contracting dimension sizes differ"));
    assert!(err(infer_t(
        Opcode::Dot,
        &[a(S32, &[4, 8]), a(S32, &[8, 3])],
        &dot_attrs(&[], &[1], &[], &[0]),
        &a(S8, &[4, 3])
    ))
    .contains("narrower"));
}

#[test]
fn ragged_dot_modes() {
    let mut at = dot_attrs(&[], &[1], &[], &[1]);
    at.ragged_dot_dims = Some(Box::new(crate::attrs::RaggedDotDimensionNumbers {
        lhs_ragged_dimensions: vec![0],
        rhs_group_dimensions: vec![0],
    }));
    // lhs [m,k] ragged in m, rhs [g,k,n] -> [m,n].
    assert_eq!(
        infer(
            Opcode::RaggedDot,
            &[a(F32, &[11, 5]), a(F32, &[3, 5, 7]), a(S32, &[3])],
            &at
        )
        .unwrap(),
        a(F32, &[11, 7])
    );
}

fn conv_attrs(fgc: i64, bgc: i64, win: Window) -> Attrs {
    // b01f_01io->b01f
    let mut at = attrs();
    at.conv_dims = Some(Box::new(ConvDimensionNumbers {
        input_batch_dimension: 0,
        input_feature_dimension: 3,
        input_spatial_dimensions: vec![1, 2],
        kernel_input_feature_dimension: 2,
        kernel_output_feature_dimension: 3,
        kernel_spatial_dimensions: vec![0, 1],
        output_batch_dimension: 0,
        output_feature_dimension: 3,
        output_spatial_dimensions: vec![1, 2],
    }));
    at.feature_group_count = fgc;
    at.batch_group_count = bgc;
    at.window = Some(Box::new(win));
    at
}

#[test]
fn convolution_groups_and_windows() {
    let win = window(&[3, 3], &[1, 1], &[(1, 1), (1, 1)]);
    let at = conv_attrs(1, 1, win.clone());
    assert_eq!(
        infer(
            Opcode::Convolution,
            &[a(F32, &[2, 8, 8, 16]), a(F32, &[3, 3, 16, 32])],
            &at
        )
        .unwrap(),
        a(F32, &[2, 8, 8, 32])
    );
    // Depthwise: 16 input features in 16 groups, kernel input feature 1.
    let dw = conv_attrs(16, 1, win.clone());
    assert_eq!(
        infer(
            Opcode::Convolution,
            &[a(F32, &[2, 8, 8, 16]), a(F32, &[3, 3, 1, 16])],
            &dw
        )
        .unwrap(),
        a(F32, &[2, 8, 8, 16])
    );
    assert!(err(infer(
        Opcode::Convolution,
        &[a(F32, &[2, 8, 8, 16]), a(F32, &[3, 3, 2, 16])],
        &dw
    ))
    .contains("feature_group_count"));
    // Batch groups: batch 4 in 2 groups.
    let bg = conv_attrs(1, 2, win.clone());
    assert_eq!(
        infer(
            Opcode::Convolution,
            &[a(F32, &[4, 8, 8, 16]), a(F32, &[3, 3, 16, 2])],
            &bg
        )
        .unwrap(),
        a(F32, &[2, 8, 8, 2])
    );
    let strided = conv_attrs(1, 1, window(&[3, 3], &[2, 2], &[(0, 0), (0, 0)]));
    assert_eq!(
        infer(
            Opcode::Convolution,
            &[a(F32, &[1, 9, 9, 1]), a(F32, &[3, 3, 1, 1])],
            &strided
        )
        .unwrap(),
        a(F32, &[1, 4, 4, 1])
    );
    let wrong_window = conv_attrs(1, 1, window(&[2, 3], &[1, 1], &[(0, 0), (0, 0)]));
    assert!(err(infer(
        Opcode::Convolution,
        &[a(F32, &[1, 9, 9, 1]), a(F32, &[3, 3, 1, 1])],
        &wrong_window
    ))
    .contains("window dimension 0 has size 2"));
}

// ----- gather / scatter -----

#[test]
fn gather_classic_and_batched() {
    // XLA's canonical example: operand [3,3], indices [2] (index_vector_dim 1 of [2,1]).
    let mut at = attrs();
    at.gather_dims = Some(Box::new(GatherDimensionNumbers {
        offset_dims: vec![1],
        collapsed_slice_dims: vec![0],
        start_index_map: vec![0],
        index_vector_dim: 1,
        ..Default::default()
    }));
    at.gather_slice_sizes = Some(vec![1, 3]);
    assert_eq!(
        infer(Opcode::Gather, &[a(F32, &[3, 3]), a(S32, &[2, 1])], &at).unwrap(),
        a(F32, &[2, 3])
    );
    // Batching dims: operand [B=4, 10, 8], indices [4, 5, 1].
    let mut bt = attrs();
    bt.gather_dims = Some(Box::new(GatherDimensionNumbers {
        offset_dims: vec![2],
        collapsed_slice_dims: vec![1],
        start_index_map: vec![1],
        index_vector_dim: 2,
        operand_batching_dims: vec![0],
        start_indices_batching_dims: vec![0],
    }));
    bt.gather_slice_sizes = Some(vec![1, 1, 8]);
    assert_eq!(
        infer(
            Opcode::Gather,
            &[a(F32, &[4, 10, 8]), a(S32, &[4, 5, 1])],
            &bt
        )
        .unwrap(),
        a(F32, &[4, 5, 8])
    );
    at.gather_slice_sizes = Some(vec![2, 3]);
    assert!(err(infer(
        Opcode::Gather,
        &[a(F32, &[3, 3]), a(S32, &[2, 1])],
        &at
    ))
    .contains("must be 0 or 1"));
}

#[test]
fn scatter_shapes() {
    let mut at = attrs();
    at.scatter_dims = Some(Box::new(ScatterDimensionNumbers {
        update_window_dims: vec![1],
        inserted_window_dims: vec![0],
        scatter_dims_to_operand_dims: vec![0],
        index_vector_dim: 1,
        ..Default::default()
    }));
    let ops = [a(F32, &[3, 3]), a(S32, &[2, 1]), a(F32, &[2, 3])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert_eq!(
        infer_shape(Opcode::Scatter, &refs, &at, &[scalar_add_sig(F32)], None).unwrap(),
        a(F32, &[3, 3])
    );
    let ops = [a(F32, &[3, 3]), a(S32, &[2, 1]), a(F32, &[5, 3])];
    let refs: Vec<&Shape> = ops.iter().collect();
    assert!(
        infer_shape(Opcode::Scatter, &refs, &at, &[scalar_add_sig(F32)], None)
            .unwrap_err()
            .to_string()
            .contains("scatter dimension 0 of the indices")
    );
}

// ----- collectives -----

#[test]
fn collectives() {
    let mut at = attrs();
    at.dimensions = Some(vec![0]);
    at.replica_groups = Some(Box::new(ReplicaGroups::Explicit(vec![vec![0, 1, 2, 3]])));
    assert_eq!(
        infer(Opcode::AllGather, &[a(F32, &[2, 5])], &at).unwrap(),
        a(F32, &[8, 5])
    );
    assert_eq!(
        infer(Opcode::ReduceScatter, &[a(F32, &[8, 5])], &at).unwrap(),
        a(F32, &[2, 5])
    );
    assert!(err(infer(Opcode::ReduceScatter, &[a(F32, &[6, 5])], &at)).contains("divisible"));
    assert_eq!(
        infer(Opcode::AllGatherStart, &[a(F32, &[2, 5])], &at).unwrap(),
        Shape::tuple(vec![a(F32, &[2, 5]), a(F32, &[8, 5])])
    );
    assert_eq!(
        infer(Opcode::AllReduce, &[a(F32, &[2]), a(S32, &[3])], &attrs()).unwrap(),
        Shape::tuple(vec![a(F32, &[2]), a(S32, &[3])])
    );
    let start = Shape::tuple(vec![a(F32, &[4]), a(F32, &[4]), a(U32, &[]), a(U32, &[])]);
    assert_eq!(
        infer_t(
            Opcode::CollectivePermuteStart,
            &[a(F32, &[4])],
            &attrs(),
            &start
        )
        .unwrap(),
        start
    );
    assert_eq!(
        infer(Opcode::CollectivePermuteDone, &[start], &attrs()).unwrap(),
        a(F32, &[4])
    );
    let s32 = a(S32, &[4]);
    assert_eq!(
        infer(
            Opcode::RaggedAllToAll,
            &[
                a(F32, &[16]),
                a(F32, &[32]),
                s32.clone(),
                s32.clone(),
                s32.clone(),
                s32
            ],
            &attrs()
        )
        .unwrap(),
        a(F32, &[32])
    );
}

#[test]
fn misc_ops() {
    let at = attrs();
    let mut tk = attrs();
    tk.k = 3;
    assert_eq!(
        infer(Opcode::TopK, &[a(F32, &[5, 10])], &tk).unwrap(),
        Shape::tuple(vec![a(F32, &[5, 3]), a(S32, &[5, 3])])
    );
    let mut bn = attrs();
    bn.feature_index = 1;
    assert_eq!(
        infer(
            Opcode::BatchNormTraining,
            &[a(F32, &[2, 6, 4]), a(F32, &[6]), a(F32, &[6])],
            &bn
        )
        .unwrap(),
        Shape::tuple(vec![a(F32, &[2, 6, 4]), a(F32, &[6]), a(F32, &[6])])
    );
    let mut fft = attrs();
    fft.fft_type = Some(crate::attrs::FftType::Rfft);
    fft.fft_length = Some(vec![8]);
    assert_eq!(
        infer(Opcode::Fft, &[a(F32, &[3, 8])], &fft).unwrap(),
        a(C64, &[3, 5])
    );
    fft.fft_type = Some(crate::attrs::FftType::Irfft);
    assert_eq!(
        infer(Opcode::Fft, &[a(C64, &[3, 5])], &fft).unwrap(),
        a(F32, &[3, 8])
    );
    assert_eq!(
        infer(Opcode::Cholesky, &[a(F32, &[2, 4, 4])], &at).unwrap(),
        a(F32, &[2, 4, 4])
    );
    let mut ts = attrs();
    ts.triangular_solve = Some(crate::attrs::TriangularSolveOptions {
        left_side: true,
        lower: true,
        unit_diagonal: false,
        transpose_a: crate::attrs::TransposeKind::NoTranspose,
    });
    assert_eq!(
        infer(
            Opcode::TriangularSolve,
            &[a(F32, &[4, 4]), a(F32, &[4, 7])],
            &ts
        )
        .unwrap(),
        a(F32, &[4, 7])
    );
    let mut gd = attrs();
    gd.dimensions = Some(vec![1]);
    assert_eq!(
        infer(Opcode::GetDimensionSize, &[a(F32, &[2, 3])], &gd).unwrap(),
        a(S32, &[])
    );
    let mut rng = attrs();
    rng.distribution = Some(RandomDistribution::Normal);
    assert!(err(infer_t(
        Opcode::Rng,
        &[a(S32, &[]), a(S32, &[])],
        &rng,
        &a(S32, &[4])
    ))
    .contains("floating-point"));
    assert_eq!(
        infer(Opcode::CopyStart, &[a(F32, &[2])], &at).unwrap(),
        Shape::tuple(vec![a(F32, &[2]), a(F32, &[2]), a(U32, &[])])
    );
}

// ----- the verifier on whole modules -----

struct B {
    m: Module,
    c: CompId,
}

impl B {
    fn new() -> B {
        let mut m = Module::new("test");
        let c = m.add_computation("main").unwrap();
        m.set_entry(c);
        B { m, c }
    }
    fn param(&mut self, n: i64, s: Shape) -> InstrId {
        let mut i = Instruction::new(format!("p{n}"), Opcode::Parameter, s);
        i.attrs.parameter_number = n;
        self.m.add_instruction(self.c, i).unwrap()
    }
    fn add(&mut self, name: &str, op: Opcode, s: Shape, ops: &[InstrId]) -> InstrId {
        self.m
            .add_instruction(self.c, Instruction::new(name, op, s).with_operands(ops))
            .unwrap()
    }
}

fn messages(m: &Module, o: &VerifyOptions) -> Vec<String> {
    findings(m, o).iter().map(|f| f.to_string()).collect()
}

#[test]
fn verifier_reports_every_finding_with_names() {
    let mut b = B::new();
    let p0 = b.param(0, a(F32, &[128, 64]));
    let p1 = b.param(1, a(F32, &[128, 64]));
    let d = b.add("dot.3", Opcode::Dot, a(F32, &[128, 128]), &[p0, p1]);
    b.m.instr_mut(d).attrs.dot_dims = Some(Box::new(DotDimensionNumbers {
        lhs_contracting_dimensions: vec![1],
        rhs_contracting_dimensions: vec![2],
        ..Default::default()
    }));
    let n = b.add("neg.1", Opcode::Negate, a(F32, &[128, 65]), &[p0]);
    let t = b.add(
        "t",
        Opcode::Tuple,
        Shape::tuple(vec![a(F32, &[128, 128]), a(F32, &[128, 65])]),
        &[d, n],
    );
    b.m.set_root(b.c, t);
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 2, "{msgs:#?}");
    assert_eq!(
        msgs[0],
        "main: %dot.3: rhs contracting dimension 2 is out of range for f32[128,64] (rank 2)"
    );
    assert!(
        msgs[1].starts_with("main: %neg.1: the shape is f32[128,65] but negate infers f32[128,64]")
    );
    let e = verify(&b.m, &VerifyOptions::default()).unwrap_err();
    assert_eq!(e.findings.len(), 2);
}

#[test]
fn verifier_accepts_a_valid_module_and_mixed_precision_by_default() {
    let mut b = B::new();
    let p0 = b.param(0, a(BF16, &[4]));
    let p1 = b.param(1, a(BF16, &[4]));
    // bf16 + bf16 declared f32: accepted with mixed precision, refused without.
    let s = b.add("sum", Opcode::Add, a(F32, &[4]), &[p0, p1]);
    b.m.set_root(b.c, s);
    assert!(verify(&b.m, &VerifyOptions::default()).is_ok());
    let strict = VerifyOptions {
        allow_mixed_precision: false,
        ..VerifyOptions::default()
    };
    assert_eq!(findings(&b.m, &strict).len(), 1);
    // A tuple may not change precision even with mixed precision allowed.
    let t = b.add("t", Opcode::Tuple, Shape::tuple(vec![a(F32, &[4])]), &[p0]);
    b.m.set_root(b.c, t);
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("%t: the shape is (f32[4]) but tuple infers (bf16[4])"));
}

#[test]
fn called_computation_signatures() {
    let mut b = B::new();
    let add = b.m.add_computation("add").unwrap();
    for n in 0..2 {
        let mut i = Instruction::new(format!("x{n}"), Opcode::Parameter, a(F32, &[]));
        i.attrs.parameter_number = n;
        b.m.add_instruction(add, i).unwrap();
    }
    let x0 = b.m.comp(add).parameter(0).unwrap();
    let x1 = b.m.comp(add).parameter(1).unwrap();
    b.m.add_instruction(
        add,
        Instruction::new("s", Opcode::Add, a(F32, &[])).with_operands(&[x0, x1]),
    )
    .unwrap();
    let p0 = b.param(0, a(S32, &[4, 5]));
    let z = b.add("zero", Opcode::Constant, a(S32, &[]), &[]);
    b.m.instr_mut(z).attrs.literal = Some(Box::new(crate::literal::Literal::s32(0)));
    let r = b.add("r", Opcode::Reduce, a(S32, &[4]), &[p0, z]);
    b.m.instr_mut(r).attrs.dimensions = Some(vec![1]);
    b.m.instr_mut(r).called = smallvec::smallvec![add];
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains(
        "%r: reduce's reduction computation returns f32 at index 0 but the init value is s32"
    ));
}

#[test]
fn dangling_computations_are_optional() {
    let mut b = B::new();
    let p = b.param(0, a(F32, &[]));
    let _ = p;
    let extra = b.m.add_computation("unused").unwrap();
    let mut i = Instruction::new("q", Opcode::Parameter, a(F32, &[]));
    i.attrs.parameter_number = 0;
    b.m.add_instruction(extra, i).unwrap();
    assert!(verify(&b.m, &VerifyOptions::default()).is_ok());
    let strict = VerifyOptions {
        allow_dangling_computations: false,
        ..VerifyOptions::default()
    };
    let msgs = messages(&b.m, &strict);
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].starts_with("computation unused:") && msgs[0].contains("dangling"));
}

#[test]
fn sharding_and_layout_checks() {
    let mut b = B::new();
    let p = b.param(0, a(F32, &[8, 8]));
    b.m.instr_mut(p).sharding = Some(Sharding::iota_tiled(&[2, 2, 2]));
    let n = b.add("n", Opcode::Negate, a(F32, &[8, 8]), &[p]);
    if let Shape::Array(s) = &mut b.m.instr_mut(n).shape {
        s.layout = Some(crate::shape::Layout {
            minor_to_major: smallvec::smallvec![1, 1],
            ..Default::default()
        });
    }
    let t = b.add(
        "t",
        Opcode::Tuple,
        Shape::tuple(vec![a(F32, &[8, 8]), a(F32, &[8, 8])]),
        &[n, n],
    );
    b.m.instr_mut(t).sharding = Some(Sharding::tuple(vec![Sharding::replicated()]));
    b.m.config.use_spmd_partitioning = true;
    b.m.config.num_partitions = 4;
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 3, "{msgs:#?}");
    assert!(msgs[0].contains("%p0: invalid sharding: the tile assignment has 3 dimension(s)"));
    assert!(msgs[1].contains("%n: the layout {1,1} of f32[8,8] is not a permutation"));
    assert!(
        msgs[2].contains("%t: invalid sharding: the tuple sharding has 1 elements but the shape")
    );
}

#[test]
fn schedule_order_and_coverage() {
    let mut b = B::new();
    let p = b.param(0, a(F32, &[2]));
    let n = b.add("n", Opcode::Negate, a(F32, &[2]), &[p]);
    let e = b.add("e", Opcode::Exp, a(F32, &[2]), &[n]);
    let mut s = Schedule::default();
    s.sequences.insert(b.c, vec![p, e, n]);
    b.m.schedule = Some(s);
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs, vec!["main: %e: is scheduled before its operand %n"]);
    b.m.schedule
        .as_mut()
        .unwrap()
        .sequences
        .insert(b.c, vec![p, n]);
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs, vec!["main: %e: is missing from the schedule"]);
}

#[test]
fn compare_type_must_fit_operands() {
    let mut b = B::new();
    let p = b.param(0, a(S32, &[2]));
    let c = b.add("c", Opcode::Compare, a(Pred, &[2]), &[p, p]);
    b.m.instr_mut(c).attrs.comparison = Some(Comparison {
        direction: ComparisonDirection::Lt,
        ty: Some(ComparisonType::Float),
    });
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].contains("comparison type Float does not fit operands of type s32"));
}

#[test]
fn replica_groups_and_iota_groups() {
    assert_eq!(
        ReplicaGroups::iota_transposed(2, 4, &[4, 2], &[1, 0])
            .groups()
            .unwrap(),
        vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]
    );
    let mut b = B::new();
    b.m.config.replica_count = 4;
    let p = b.param(0, a(F32, &[4]));
    let ar = b.add("ar", Opcode::AllReduce, a(F32, &[4]), &[p]);
    let add = b.m.add_computation("add").unwrap();
    for n in 0..2 {
        let mut i = Instruction::new(format!("x{n}"), Opcode::Parameter, a(F32, &[]));
        i.attrs.parameter_number = n;
        b.m.add_instruction(add, i).unwrap();
    }
    b.m.instr_mut(ar).called = smallvec::smallvec![add];
    b.m.instr_mut(ar).attrs.replica_groups = Some(Box::new(ReplicaGroups::Explicit(vec![
        vec![0, 1],
        vec![1, 2],
    ])));
    let msgs = messages(&b.m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("replica 1 appears more than once"));
    // Iota and mesh descriptions that expand to no groups are refused, not skipped.
    for (groups, why) in [
        (
            ReplicaGroups::iota_transposed(2, 3, &[5], &[]),
            "do not fit reshape dimensions [5]",
        ),
        (
            ReplicaGroups::mesh(&[("x", 2), ("y", 2)], &["z"]),
            "group axis 'z' is not a mesh axis",
        ),
    ] {
        b.m.instr_mut(ar).attrs.replica_groups = Some(Box::new(groups));
        let msgs = messages(&b.m, &VerifyOptions::default());
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(
            msgs[0].contains("%ar: replica groups that describe no groups"),
            "{msgs:?}"
        );
        assert!(msgs[0].contains(why), "{msgs:?}");
    }
    // A valid mesh description is checked like the lists it stands for.
    b.m.instr_mut(ar).attrs.replica_groups =
        Some(Box::new(ReplicaGroups::mesh(&[("x", 2), ("y", 2)], &["y"])));
    assert!(messages(&b.m, &VerifyOptions::default()).is_empty());
}

#[test]
fn named_shardings_are_checked_against_shapes_and_devices() {
    let text = "HloModule m, num_partitions=8\n\nENTRY e {\n  \
        p0 = f32[8,4] parameter(0), sharding={mesh['x'=2,'y'=4], [{'x'}, {'y'}]}\n  \
        p1 = f32[8] parameter(1), sharding={mesh['x'=2,'y'=4], [{'x'}, {'y'}]}\n  \
        p2 = f32[8] parameter(2), sharding={mesh['x'=2,'y'=2], [{'x'}]}\n  \
        p3 = f32[8,4,2] parameter(3), sharding={mesh['x'=2,'y'=4], [{}, {}]}\n  \
        p4 = f32[8] parameter(4), sharding={single_device[device_id=9]}\n  \
        p5 = f32[8] parameter(5), sharding={mesh['x'=2,'y'=4], [], manual={'x'}}\n  \
        p6 = f32[8] parameter(6), sharding={mesh['x'=8], [{'x'}]}\n  \
        ROOT t = (f32[8,4], f32[8], f32[8], f32[8,4,2], f32[8], f32[8], f32[8]) \
        tuple(p0, p1, p2, p3, p4, p5, p6)\n}\n";
    let mut m = crate::text::parse_module(text).unwrap();
    m.config.use_spmd_partitioning = true;
    let g = m.comp(m.entry().unwrap()).parameter(6).unwrap();
    m.instr_mut(g).sharding.as_mut().unwrap().shard_group = Some(crate::sharding::ShardGroup {
        id: 1,
        shard_as: true,
    });
    let msgs = messages(&m, &VerifyOptions::default());
    assert_eq!(msgs.len(), 5, "{msgs:#?}");
    assert!(msgs[0].contains("%p1: invalid sharding: the named sharding has 2 dimension(s) but the shape f32[8] has rank 1"));
    assert!(msgs[1]
        .contains("%p2: invalid sharding: the sharding should have 8 devices but its mesh has 4"));
    assert!(msgs[2].contains("%p4: invalid sharding: device 9 >= num_devices (8)"));
    // `[], manual={'x'}` keeps 'y' replicated: a rank-0 list of dimensions on a rank-1 array.
    assert!(msgs[3].contains("%p5: invalid sharding: the named sharding has 0 dimension(s)"));
    assert!(msgs[4].contains("%p6: invalid sharding: a named sharding cannot be in a shard group"));
}

#[test]
fn wrong_operand_counts_are_findings_not_panics() {
    // What a proto can hold and text cannot: a bitcast and an async-done with no operand, a
    // typed compare with one.
    let mut b = B::new();
    let p0 = b.param(0, a(F32, &[4]));
    b.add("bc", Opcode::Bitcast, a(F32, &[4]), &[]);
    b.add("done", Opcode::AsyncDone, a(F32, &[4]), &[]);
    let c = b.add("cmp", Opcode::Compare, a(Pred, &[4]), &[p0]);
    b.m.instr_mut(c).attrs.comparison = Some(Comparison {
        direction: ComparisonDirection::Lt,
        ty: Some(ComparisonType::Float),
    });
    let msgs = messages(&b.m, &VerifyOptions::default()).join("\n");
    assert!(
        msgs.contains("%bc: bitcast expects 1 operand(s), got 0"),
        "{msgs}"
    );
    assert!(
        msgs.contains("%done: async-done requires exactly one operand"),
        "{msgs}"
    );
    assert!(
        msgs.contains("%cmp: compare expects 2 operand(s), got 1"),
        "{msgs}"
    );
}
