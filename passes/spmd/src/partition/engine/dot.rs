//! Dot and every op that is a dot in disguise (convolution without split spatial dimensions):
//! [`DimsMapping`] says which dimensions of the two operands and the result correspond, and
//! [`Engine::dot_like`] partitions by the cheapest of every candidate tiling of the dot's
//! iteration space ([`candidates`]: batch, contracting and free dimensions split from either
//! operand or the result, partial sums all-reduced or reduce-scattered), by the bytes each
//! device receives, then peak bytes.

use super::*;
use tessera_hlo::attrs::{ConvDimensionNumbers, DotDimensionNumbers, PaddingDim};

pub(super) mod candidates;

use candidates::{Combine, Shapes};

/// One dimension of a dot-like op seen from each side: the operand dimensions it is on and the
/// result dimension it becomes (`None` where it does not occur: a contracting dimension has no
/// result dimension, a non-contracting one is on one operand only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct DimTriple {
    pub lhs: Option<usize>,
    pub rhs: Option<usize>,
    pub out: Option<usize>,
}

/// The dimension classes of a dot-like op (XLA's `DotConvolutionDimsInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct DimsMapping {
    /// On both operands and the result.
    pub batch: Vec<DimTriple>,
    /// On both operands, summed away.
    pub contracting: Vec<DimTriple>,
    /// On the lhs and the result.
    pub lhs_non_contracting: Vec<DimTriple>,
    /// On the rhs and the result.
    pub rhs_non_contracting: Vec<DimTriple>,
    /// A convolution's spatial dimensions (input, kernel, output): windowed, never a plain
    /// correspondence; empty for a dot.
    pub spatial: Vec<DimTriple>,
}

/// Which operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Side {
    Lhs,
    Rhs,
}

impl DimTriple {
    fn new(lhs: Option<usize>, rhs: Option<usize>, out: Option<usize>) -> Self {
        DimTriple { lhs, rhs, out }
    }

    pub fn on(&self, side: Side) -> Option<usize> {
        match side {
            Side::Lhs => self.lhs,
            Side::Rhs => self.rhs,
        }
    }
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Lhs => Side::Rhs,
            Side::Rhs => Side::Lhs,
        }
    }

    /// The operand index of this side.
    pub fn index(self) -> usize {
        match self {
            Side::Lhs => 0,
            Side::Rhs => 1,
        }
    }
}

impl DimsMapping {
    /// The mapping of a dot: batch, then lhs free, then rhs free dimensions make the result.
    pub fn of_dot(dn: &DotDimensionNumbers, lrank: usize, rrank: usize) -> Self {
        let u = |v: &[i64]| v.iter().map(|&d| d as usize).collect::<Vec<_>>();
        let (lb, rb) = (u(&dn.lhs_batch_dimensions), u(&dn.rhs_batch_dimensions));
        let (lc, rc) = (
            u(&dn.lhs_contracting_dimensions),
            u(&dn.rhs_contracting_dimensions),
        );
        let mut m = DimsMapping::default();
        for (k, (&l, &r)) in lb.iter().zip(&rb).enumerate() {
            m.batch.push(DimTriple::new(Some(l), Some(r), Some(k)));
        }
        for (&l, &r) in lc.iter().zip(&rc) {
            m.contracting.push(DimTriple::new(Some(l), Some(r), None));
        }
        let mut out = lb.len();
        for l in (0..lrank).filter(|d| !lb.contains(d) && !lc.contains(d)) {
            m.lhs_non_contracting
                .push(DimTriple::new(Some(l), None, Some(out)));
            out += 1;
        }
        for r in (0..rrank).filter(|d| !rb.contains(d) && !rc.contains(d)) {
            m.rhs_non_contracting
                .push(DimTriple::new(None, Some(r), Some(out)));
            out += 1;
        }
        m
    }

    /// The mapping of a convolution (lhs = input, rhs = kernel). Grouped convolutions pair the
    /// grouped dimension as a batch dimension: with `feature_group_count > 1` the input feature,
    /// kernel output feature and output feature; with `batch_group_count > 1` the input batch,
    /// kernel output feature and output feature.
    pub fn of_conv(dn: &ConvDimensionNumbers, feature_groups: i64, batch_groups: i64) -> Self {
        let u = |d: i64| Some(d as usize);
        let mut m = DimsMapping::default();
        let (ib, if_) = (u(dn.input_batch_dimension), u(dn.input_feature_dimension));
        let (ki, ko) = (
            u(dn.kernel_input_feature_dimension),
            u(dn.kernel_output_feature_dimension),
        );
        let (ob, of) = (u(dn.output_batch_dimension), u(dn.output_feature_dimension));
        if feature_groups > 1 {
            m.batch.push(DimTriple::new(if_, ko, of));
            m.lhs_non_contracting.push(DimTriple::new(ib, None, ob));
            // The kernel's input feature holds one group's features: not split.
        } else if batch_groups > 1 {
            m.batch.push(DimTriple::new(ib, ko, of));
            m.contracting.push(DimTriple::new(if_, ki, None));
        } else {
            m.lhs_non_contracting.push(DimTriple::new(ib, None, ob));
            m.contracting.push(DimTriple::new(if_, ki, None));
            m.rhs_non_contracting.push(DimTriple::new(None, ko, of));
        }
        for ((&l, &r), &o) in dn
            .input_spatial_dimensions
            .iter()
            .zip(&dn.kernel_spatial_dimensions)
            .zip(&dn.output_spatial_dimensions)
        {
            m.spatial.push(DimTriple::new(u(l), u(r), u(o)));
        }
        m
    }

    /// Operand `side`'s dimension `i` -> the result dimension it becomes (batch and
    /// non-contracting; spatial and contracting dimensions map to nothing), for
    /// [`Tiling::project`] from the result to the operand.
    pub fn operand_from_out(&self, side: Side, rank: usize) -> Vec<Option<usize>> {
        let mut map = vec![None; rank];
        for t in self
            .batch
            .iter()
            .chain(&self.lhs_non_contracting)
            .chain(&self.rhs_non_contracting)
        {
            if let (Some(d), Some(o)) = (t.on(side), t.out) {
                map[d] = Some(o);
            }
        }
        map
    }

    /// The result's dimension `i` -> operand `side`'s dimension (batch and the side's own
    /// non-contracting dimensions), for [`Tiling::project`] from the operand to the result.
    pub fn out_from_operand(&self, side: Side, out_rank: usize) -> Vec<Option<usize>> {
        let mut map = vec![None; out_rank];
        for t in self
            .batch
            .iter()
            .chain(&self.lhs_non_contracting)
            .chain(&self.rhs_non_contracting)
        {
            if let (Some(d), Some(o)) = (t.on(side), t.out) {
                map[o] = Some(d);
            }
        }
        map
    }

    /// Operand `to`'s dimension `i` -> the other operand's dimension (batch and contracting),
    /// for [`Tiling::project`] from one operand to the other.
    pub fn operand_from_operand(&self, to: Side, rank: usize) -> Vec<Option<usize>> {
        let mut map = vec![None; rank];
        for t in self.batch.iter().chain(&self.contracting) {
            if let (Some(d), Some(s)) = (t.on(to), t.on(to.other())) {
                map[d] = Some(s);
            }
        }
        map
    }
}

impl Engine<'_> {
    pub(super) fn dot(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id);
        let Some(dn) = i.attrs.dot_dims.as_deref() else {
            return self.default(b, id, own);
        };
        if i.operands().len() != 2 || !i.attrs.sparsity.is_empty() {
            return self.default(b, id, own);
        }
        let lrank = b.module().instr(i.operands()[0]).shape.rank();
        let rrank = b.module().instr(i.operands()[1]).shape.rank();
        let dims = DimsMapping::of_dot(dn, lrank, rrank);
        self.dot_like(b, id, own, &dims)
    }

    /// Partitions dot-like instruction `id` (two operands, dimensions as `dims` says; a
    /// convolution only when none of its spatial dimensions is split) without a halo: the
    /// cheapest candidate of [`candidates::choose`] is built, and its choice recorded in the
    /// report.
    pub(super) fn dot_like(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
        dims: &DimsMapping,
    ) -> Result<()> {
        let i = b.module().instr(id).clone();
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let lv = self.value(b.module(), lhs)?;
        let rv = self.value(b.module(), rhs)?;
        let (Tree::Leaf(ls), Tree::Leaf(rs), Tree::Leaf(os)) = (&lv.tree, &rv.tree, &own) else {
            return self.default(b, id, own);
        };
        if matches!(ls, Spec::Manual) || matches!(rs, Spec::Manual) || matches!(os, Spec::Manual) {
            return self.default(b, id, own);
        }
        let lg = self.global(b.module(), lhs);
        let rg = self.global(b.module(), rhs);
        let (Shape::Array(la), Shape::Array(ra), Shape::Array(oa)) = (&lg, &rg, &i.shape) else {
            return self.default(b, id, own);
        };
        let shapes = Shapes {
            lhs: la.dims.to_vec(),
            rhs: ra.dims.to_vec(),
            out: oa.dims.to_vec(),
            elem: [la.ty, ra.ty, oa.ty].map(|t| t.byte_size() as i64),
        };
        let Some(choice) = candidates::choose(dims, &shapes, ls, rs, os, self.n) else {
            return self.default(b, id, own);
        };
        // The windowed loops the options allow, costed beside the tilings: loops that leave
        // the result as its own sharding, or split like either operand (then resharded).
        let mut results: Vec<Tiling> = Vec::new();
        if self.windowing_possible(b, id, dims) {
            let orank = shapes.out.len();
            let own_t = match os {
                Spec::Tiled(t) => Some(t.clone()),
                _ => None,
            };
            let like = |side: Side, spec: &Spec| match spec {
                Spec::Tiled(x) => Some(x.project(&dims.out_from_operand(side, orank))),
                _ => None,
            };
            for r in [own_t, like(Side::Lhs, ls), like(Side::Rhs, rs)]
                .into_iter()
                .flatten()
            {
                if r.num_devices() == self.n && !r.is_replicated() && !results.contains(&r) {
                    results.push(r);
                }
            }
        }
        let mut extra = Vec::new();
        for r in &results {
            for w in self.windowed_plans(b, id, r, dims)? {
                extra.push(candidates::windowed(w, &shapes, ls, rs, r, os, self.n));
            }
        }
        let choice = candidates::with_extra(&choice, extra);
        let c = &choice.best;
        self.report.choices.push(format!(
            "%{}: {} ({} bytes received per device, peak {} bytes; {} candidates{})",
            i.name(),
            c.what,
            c.bytes,
            c.peak,
            choice.considered,
            choice
                .runner_up
                .as_ref()
                .map_or(String::new(), |(bytes, peak, what)| format!(
                    "; next: {what}, {bytes} bytes, peak {peak}"
                ))
        ));
        if let Combine::Windowed(w) = &c.combine {
            let v = Value {
                local: self.windowed_dot(b, id, &c.result, w)?,
                tree: Tree::Leaf(Spec::Tiled(c.result.clone())),
            };
            let local = self.reshard(b, &v, &i.shape, &own)?;
            self.set(id, local, own);
            return Ok(());
        }
        let mut l = self.operand(b, id, 0, &Tree::Leaf(Spec::Tiled(c.lhs.clone())))?;
        let mut r = self.operand(b, id, 1, &Tree::Leaf(Spec::Tiled(c.rhs.clone())))?;
        if !c.contracting.is_empty() {
            // Padding may hold anything (NaN too): zeroed on both sides of a split sum.
            let lsplit: Vec<usize> = dims.contracting.iter().filter_map(|t| t.lhs).collect();
            let rsplit: Vec<usize> = dims.contracting.iter().filter_map(|t| t.rhs).collect();
            let z = b.scalar(la.ty, 0.0)?;
            l = self.mask_padding(b, l, &shapes.lhs, &c.lhs, &lsplit, z)?;
            let z = b.scalar(ra.ty, 0.0)?;
            r = self.mask_padding(b, r, &shapes.rhs, &c.rhs, &rsplit, z)?;
        }
        let partial_shape = local_shape(&i.shape, &Tree::Leaf(Spec::Tiled(c.partial.clone())));
        let mut out = self.local_dot_like(b, &i, l, r, &c.lhs, partial_shape)?;
        let op = if oa.ty == ElementType::Pred {
            Opcode::Or
        } else {
            Opcode::Add
        };
        let groups = c.iter.groups(&c.contracting, false);
        let g = groups.first().map_or(1, |g| g.len() as i64);
        let elem = shapes.elem[2];
        match c.combine {
            Combine::Nothing | Combine::Windowed(_) => {}
            Combine::AllReduce => {
                let bytes = c.partial.shard_dims(&shapes.out).iter().product::<i64>() * elem;
                let reducer = b.reducer(oa.ty, op)?;
                out = self.all_reduce(b, out, reducer, &groups)?;
                self.report.collectives.push(CollectiveNote {
                    original: i.name().to_string(),
                    collective: "all-reduce",
                    reason: format!("partial sums of a dot: {}", c.what),
                    bytes: 2 * bytes * (g - 1) / g,
                });
            }
            Combine::ReduceScatter { dim, padded } => {
                let have = b.module().instr(out).shape.dims()[dim];
                if padded > have {
                    let z = b.scalar(oa.ty, 0.0)?;
                    let pads = PaddingDim {
                        high: padded - have,
                        ..PaddingDim::default()
                    };
                    out = b.pad_dim(out, z, dim, pads)?;
                }
                out = self.reduce_scatter(b, out, dim as i64, op, &groups)?;
                let bytes = c.result.shard_dims(&shapes.out).iter().product::<i64>() * elem;
                self.report.collectives.push(CollectiveNote {
                    original: i.name().to_string(),
                    collective: "reduce-scatter",
                    reason: format!("partial sums of a dot: {}", c.what),
                    bytes: bytes * (g - 1),
                });
            }
        }
        let v = Value {
            local: out,
            tree: Tree::Leaf(Spec::Tiled(c.result.clone())),
        };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, local, own);
        Ok(())
    }

    /// The per-device op of dot-like `i` on local operands `l` and `r`, the lhs split as
    /// `lhs_tiling`, giving `shape`. Every strategy builds its local op here: a convolution's
    /// group counts follow the split of its grouped dimension.
    pub(super) fn local_dot_like(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        l: InstrId,
        r: InstrId,
        lhs_tiling: &Tiling,
        shape: Shape,
    ) -> Result<InstrId> {
        let dn = match i.attrs.conv_dims.as_deref() {
            Some(dn) if i.opcode() == Opcode::Convolution => dn,
            _ => return self.clone_with(b, i, &[l, r], shape),
        };
        let mut c = i.clone();
        // A grouped convolution's local op holds 1/k of the groups when its grouped lhs
        // dimension (input feature for feature groups, input batch for batch groups; groups
        // are contiguous runs along it) is split k ways; a split that cuts a group cannot run
        // locally and is the caller's error.
        let grouped = if i.attrs.feature_group_count > 1 {
            Some((dn.input_feature_dimension, i.attrs.feature_group_count))
        } else if i.attrs.batch_group_count > 1 {
            Some((dn.input_batch_dimension, i.attrs.batch_group_count))
        } else {
            None
        };
        if let Some((d, groups)) = grouped {
            let k = lhs_tiling.tiles.get(d as usize).copied().unwrap_or(1);
            if groups % k != 0 {
                return Err(fail(format!(
                    "%{}: {groups} groups cannot be split {k} ways along lhs dimension {d}",
                    i.name()
                )));
            }
            if i.attrs.feature_group_count > 1 {
                c.attrs.feature_group_count = groups / k;
            } else {
                c.attrs.batch_group_count = groups / k;
            }
        }
        // Negative padding becomes an explicit pad of the lhs (with the base dilation as
        // interior padding): the PJRT CPU plugin's convolution with negative padding reads out
        // of bounds (docs/spmd-convolution.md), its pad does not.
        let mut l = l;
        if let Some(win) = c.attrs.window.as_deref() {
            if win
                .dims
                .iter()
                .any(|w| w.padding_low < 0 || w.padding_high < 0)
            {
                let rank = b.module().instr(l).shape.rank();
                let mut pads = vec![PaddingDim::default(); rank];
                let mut local = win.clone();
                for (k, w) in win.dims.iter().enumerate() {
                    if w.padding_low >= 0 && w.padding_high >= 0 {
                        continue;
                    }
                    let d = dn.input_spatial_dimensions[k] as usize;
                    pads[d] = PaddingDim {
                        low: w.padding_low,
                        high: w.padding_high,
                        interior: w.base_dilation - 1,
                    };
                    local.dims[k].padding_low = 0;
                    local.dims[k].padding_high = 0;
                    local.dims[k].base_dilation = 1;
                }
                let ty = b.module().instr(l).shape.element_type();
                let zero = b.scalar(ty, 0.0)?;
                l = b.pad(l, zero, &pads)?;
                c.attrs.window = Some(Box::new(local));
            }
        }
        self.clone_with(b, &c, &[l, r], shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(lhs: Option<usize>, rhs: Option<usize>, out: Option<usize>) -> DimTriple {
        DimTriple { lhs, rhs, out }
    }

    #[test]
    fn dot_mapping_orders_result_as_batch_lhs_rhs() {
        // [b, m, k] x [b, k, n] -> [b, m, n]
        let dn = DotDimensionNumbers {
            lhs_batch_dimensions: vec![0],
            rhs_batch_dimensions: vec![0],
            lhs_contracting_dimensions: vec![2],
            rhs_contracting_dimensions: vec![1],
        };
        let m = DimsMapping::of_dot(&dn, 3, 3);
        assert_eq!(m.batch, vec![t(Some(0), Some(0), Some(0))]);
        assert_eq!(m.contracting, vec![t(Some(2), Some(1), None)]);
        assert_eq!(m.lhs_non_contracting, vec![t(Some(1), None, Some(1))]);
        assert_eq!(m.rhs_non_contracting, vec![t(None, Some(2), Some(2))]);
        assert_eq!(
            m.operand_from_out(Side::Rhs, 3),
            vec![Some(0), None, Some(2)]
        );
        assert_eq!(
            m.out_from_operand(Side::Lhs, 3),
            vec![Some(0), Some(1), None]
        );
        assert_eq!(
            m.operand_from_operand(Side::Rhs, 3),
            vec![Some(0), Some(2), None]
        );
    }

    #[test]
    fn conv_mapping_pairs_grouped_features_as_batch() {
        // b01f_01io->b01f with 4 feature groups (depthwise-like).
        let dn = ConvDimensionNumbers {
            input_batch_dimension: 0,
            input_feature_dimension: 3,
            input_spatial_dimensions: vec![1, 2],
            kernel_input_feature_dimension: 2,
            kernel_output_feature_dimension: 3,
            kernel_spatial_dimensions: vec![0, 1],
            output_batch_dimension: 0,
            output_feature_dimension: 3,
            output_spatial_dimensions: vec![1, 2],
        };
        let plain = DimsMapping::of_conv(&dn, 1, 1);
        assert_eq!(plain.contracting, vec![t(Some(3), Some(2), None)]);
        assert_eq!(plain.rhs_non_contracting, vec![t(None, Some(3), Some(3))]);
        let classes = [
            &plain.batch,
            &plain.contracting,
            &plain.lhs_non_contracting,
            &plain.rhs_non_contracting,
            &plain.spatial,
        ];
        assert_eq!(classes.iter().map(|c| c.len()).sum::<usize>(), 5);
        let grouped = DimsMapping::of_conv(&dn, 4, 1);
        assert_eq!(grouped.batch, vec![t(Some(3), Some(3), Some(3))]);
        assert!(grouped.contracting.is_empty());
    }
}
