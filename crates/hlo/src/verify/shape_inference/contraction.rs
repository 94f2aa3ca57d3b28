//! Shape inference for the contractions and the indexed reads and writes: dot, ragged and
//! scaled dot, convolution, gather and scatter (the opcodes with dimension numbers).

use super::*;

pub(super) fn check_dot_dims(
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

pub(super) fn dims_match(a: i64, b: i64) -> bool {
    a == b || a == UNBOUNDED_DIM || b == UNBOUNDED_DIM
}

/// Result element type of a dot/convolution: the preferred type when one is given, checked the
/// way XLA's `MaybeUpcast` checks it.
pub(super) fn preferred_type(
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

pub(super) fn dot_core(
    op: Opcode,
    l: &Shape,
    r: &Shape,
    dn: &DotDimensionNumbers,
    preferred: Option<ElementType>,
    rhs_skip: &[i64],
) -> Result<Shape> {
    let a = array(op, l, "lhs")?;
    let b = array(op, r, "rhs")?;
    let contracting = (
        "contracting",
        &dn.lhs_contracting_dimensions[..],
        &dn.rhs_contracting_dimensions[..],
    );
    let batch = (
        "batch",
        &dn.lhs_batch_dimensions[..],
        &dn.rhs_batch_dimensions[..],
    );
    for (kind, x, y) in [contracting, batch] {
        if x.len() != y.len() {
            bail!(
                "{op} must have as many lhs {kind} dimensions ({}) as rhs {kind} dimensions ({})",
                x.len(),
                y.len()
            );
        }
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
    for (kind, xs, ys) in [contracting, batch] {
        for (&x, &y) in xs.iter().zip(ys) {
            if !dims_match(a.dims[x as usize], b.dims[y as usize]) {
                bail!(
                    "{kind} dimension sizes differ: lhs dimension {} of {} is {}, rhs dimension {} of {} is {}",
                    x,
                    shape_str(l),
                    a.dims[x as usize],
                    y,
                    shape_str(r),
                    b.dims[y as usize]
                );
            }
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

pub(super) fn dot(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn ragged_dot(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn scaled_dot(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn distinct(v: &[i64], rank: usize) -> bool {
    let mut seen = vec![false; rank];
    v.iter()
        .all(|&d| d >= 0 && (d as usize) < rank && !std::mem::replace(&mut seen[d as usize], true))
}

pub(super) fn convolution(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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

pub(super) fn sorted_unique_in(v: &[i64], bound: usize, what: &str, op: Opcode) -> Result<()> {
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

pub(super) fn unique_in(v: &[i64], bound: usize, what: &str, op: Opcode) -> Result<()> {
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

/// The batch dimensions of gather's or scatter's indices: all but `index_vector_dim` (when it
/// is a real dimension). Checks that `index_vector_dim` is in range for the indices (named
/// `what`, of shape `shape`, the array `ix`) and that the index map (`start_index_map`,
/// `scatter_dims_to_operand_dims`) has one entry per element of the index vector.
fn index_batch_dims(
    op: Opcode,
    ivd: i64,
    (what, shape, ix): (&str, &Shape, &ArrayShape),
    (map_name, map_len): (&str, usize),
) -> Result<Vec<i64>> {
    if ivd < 0 || ivd as usize > ix.rank() {
        bail!(
            "{op}'s index_vector_dim {} is out of range for {what} {}",
            ivd,
            shape_str(shape)
        );
    }
    let mut idx_dims: Vec<i64> = ix.dims.to_vec();
    let index_vector_size = if (ivd as usize) < ix.rank() {
        idx_dims.remove(ivd as usize)
    } else {
        1
    };
    if map_len as i64 != index_vector_size {
        bail!(
            "{op}'s {map_name} has {} entries but the index vector has size {}",
            map_len,
            index_vector_size
        );
    }
    Ok(idx_dims)
}

pub(super) fn gather(operand: &Shape, indices: &Shape, attrs: &Attrs) -> Result<Shape> {
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
    let idx_dims = index_batch_dims(
        op,
        ivd,
        ("start indices", indices, ix),
        ("start_index_map", dn.start_index_map.len()),
    )?;
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

pub(super) fn scatter(ops: &[&Shape], inp: &InferInput<'_>) -> Result<Shape> {
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
    let idx_dims = index_batch_dims(
        op,
        dn.index_vector_dim,
        ("indices", ops[n], ix),
        (
            "scatter_dims_to_operand_dims",
            dn.scatter_dims_to_operand_dims.len(),
        ),
    )?;
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
