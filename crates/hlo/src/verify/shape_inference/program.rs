//! Shape inference for the opcodes that call computations or talk to other devices and the
//! runtime: call, fusion, while, conditional, the collectives and async pairs, rng,
//! batch-norm, fft and triangular-solve.

use super::*;

pub(super) fn check_args(
    opcode: Opcode,
    what: &str,
    params: &[Shape],
    args: &[&Shape],
) -> Result<()> {
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

pub(super) fn call_like(
    opcode: Opcode,
    ops: &[&Shape],
    inp: &InferInput<'_>,
    exact: bool,
) -> Result<Shape> {
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

pub(super) fn fusion(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn while_(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn conditional(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn collective_same(opcode: Opcode, ops: &[&Shape]) -> Result<Shape> {
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

pub(super) fn done_from_start(opcode: Opcode, s: &Shape) -> Result<Shape> {
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
pub(super) fn group_size(inp: &InferInput<'_>) -> Option<i64> {
    inp.attrs.replica_groups.as_deref()?.group_size()
}

pub(super) fn all_gather(ops: &[&Shape], inp: &InferInput<'_>, start: bool) -> Result<Shape> {
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

pub(super) fn reduce_scatter(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn all_to_all(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn collective_permute(
    ops: &[&Shape],
    start: bool,
    inp: &InferInput<'_>,
) -> Result<Shape> {
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

pub(super) fn ragged_all_to_all(ops: &[&Shape]) -> Result<Shape> {
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

pub(super) fn async_start(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn async_done(s: &Shape, inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn rng(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn batch_norm(opcode: Opcode, ops: &[&Shape], feature_index: i64) -> Result<Shape> {
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

pub(super) fn fft(s: &Shape, attrs: &Attrs) -> Result<Shape> {
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

pub(super) fn triangular_solve(a_s: &Shape, b_s: &Shape, attrs: &Attrs) -> Result<Shape> {
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
