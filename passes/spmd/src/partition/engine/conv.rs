//! Convolution (XLA's `convolution_handler.cc`, behaviour only). Four ways, chosen by the
//! bytes each device would receive:
//!
//! - **dot-like**: no spatial dimension is split anywhere (operands or result) and the
//!   grouped dimension's split keeps whole groups: the convolution is a dot in disguise
//!   ([`DimsMapping::of_conv`]) and goes through [`Engine::dot_like`];
//! - **windowed output** (XLA's `ReshardAsWindowedInput` on the lhs): the result keeps a
//!   tiling (its own, or the lhs's carried to the result); the lhs takes that tiling on its
//!   batch and spatial dimensions and, along each split spatial dimension, each device fetches
//!   the input window its output piece reads by halo exchange ([`Windowed::plan`],
//!   `windowed_piece`, `dilated_piece` for base dilation); the kernel is replicated along its
//!   spatial dimensions; the local convolution runs without padding or base dilation;
//! - **tiled lhs and rhs** (`HandleConvolutionTiledLhsAndRhs`: a kernel split along a spatial
//!   dimension, as in a backprop-filter convolution whose "kernel" is the output gradient):
//!   each device holds a piece of the kernel's window positions and fetches, again by halo,
//!   the input those positions meet for every output position; the local convolutions are
//!   partial sums, all-reduced over the devices that split the kernel (its spatial and input
//!   feature dimensions);
//! - **halo on the rhs** (XLA's `conv_halo_exchange_always_on_lhs=false`, only when that
//!   option is false): the lhs keeps its spatial split, each device computes every output
//!   position from its own input piece and fetches, by halo exchange of the *kernel*, the
//!   kernel positions that meet that piece; partial sums all-reduced over the devices that
//!   split the lhs's spatial (and input feature) dimensions. Cheaper than the lhs halo when
//!   the kernel is the small side of the halo (a backprop-filter convolution whose "kernel"
//!   is the output gradient, split like the input).
//!
//! Positions outside the input (padding, negative padding, uneven shards) read zero; kernel
//! padding of an uneven split is zeroed before it multiplies anything.

use tessera_hlo::attrs::{ConvDimensionNumbers, Window, WindowDim};

use super::super::spec::ceil_div;
use super::dot::{DimTriple, DimsMapping, Side};
use super::window::{linear, Part, Windowed};
use super::*;

/// What one strategy would cost and how to run it.
#[derive(Clone, Debug)]
enum Plan {
    /// Through [`Engine::dot_like`] (no spatial dimension of the result is split).
    DotLike,
    /// The result computed with this tiling (lhs windowed along split spatial dimensions).
    Windowed(Tiling),
    /// The kernel kept split as this tiling (spatial dimensions included); partial sums.
    TiledRhs(Tiling),
    /// The lhs kept split as this tiling (spatial dimensions included), the kernel's halo
    /// fetched per lhs piece; partial sums.
    HaloRhs(Tiling),
}

/// Partial sums of a strategy that keeps operand `side` split as `split`: summed over its
/// dimensions `summed`, noted with `reason`.
struct Partial<'a> {
    split: &'a Tiling,
    side: Side,
    summed: &'a [usize],
    reason: &'static str,
}

/// The facts of one convolution every strategy reads.
struct Conv {
    dn: ConvDimensionNumbers,
    win: Vec<WindowDim>,
    fg: i64,
    bg: i64,
    dims: DimsMapping,
    lhs: Vec<i64>,
    rhs: Vec<i64>,
    out: Vec<i64>,
    ty: ElementType,
}

impl Conv {
    /// `t` (a tiling of the result) with the dimensions a local convolution cannot keep split
    /// made whole: a grouped dimension split into pieces that cut groups, and the output batch
    /// of a batch-grouped convolution (every output batch row reads every group).
    fn sanitize_out(&self, t: &Tiling) -> Tiling {
        let of = self.dn.output_feature_dimension as usize;
        let ob = self.dn.output_batch_dimension as usize;
        let mut drop = Vec::new();
        if self.fg > 1 && self.fg % t.tiles[of] != 0 {
            drop.push(of);
        }
        if self.bg > 1 {
            if self.bg % t.tiles[of] != 0 {
                drop.push(of);
            }
            if t.tiles[ob] > 1 {
                drop.push(ob);
            }
        }
        if drop.is_empty() {
            t.clone()
        } else {
            t.replicate_dims(&drop)
        }
    }

    /// The grouped dimension of the lhs (input feature with feature groups, input batch with
    /// batch groups), with its group count.
    fn lhs_grouped(&self) -> Option<(usize, i64)> {
        if self.fg > 1 {
            Some((self.dn.input_feature_dimension as usize, self.fg))
        } else if self.bg > 1 {
            Some((self.dn.input_batch_dimension as usize, self.bg))
        } else {
            None
        }
    }

    /// `t` (a tiling of the kernel) with a grouped output feature split that cuts groups made
    /// whole, and with the kernel's input feature whole under feature groups (it holds one
    /// group's features).
    fn sanitize_rhs(&self, t: &Tiling) -> Tiling {
        let ko = self.dn.kernel_output_feature_dimension as usize;
        let ki = self.dn.kernel_input_feature_dimension as usize;
        let groups = self.fg.max(self.bg);
        let mut drop = Vec::new();
        if groups > 1 && groups % t.tiles[ko] != 0 {
            drop.push(ko);
        }
        if self.fg > 1 && t.tiles[ki] > 1 {
            drop.push(ki);
        }
        if drop.is_empty() {
            t.clone()
        } else {
            t.replicate_dims(&drop)
        }
    }

    /// Does `t` (of operand `side`, or of the result when `side` is `None`) split a spatial
    /// dimension?
    fn spatial_split(&self, t: &Tiling, side: Option<Side>) -> bool {
        self.dims.spatial.iter().any(|s| {
            let d = match side {
                Some(side) => s.on(side),
                None => s.out,
            };
            d.is_some_and(|d| t.tiles[d] > 1)
        })
    }

    /// `map` (a [`Tiling::project`] map between two arrays of the op) with the spatial
    /// triples added: entry `at(triple)` names `from(triple)`.
    fn with_spatial(
        &self,
        mut map: Vec<Option<usize>>,
        at: fn(&DimTriple) -> Option<usize>,
        from: fn(&DimTriple) -> Option<usize>,
    ) -> Vec<Option<usize>> {
        for s in &self.dims.spatial {
            if let Some(d) = at(s) {
                map[d] = from(s);
            }
        }
        map
    }

    /// The lhs's dimension `i` -> the result's (batch, lhs non-contracting and spatial), for
    /// [`Tiling::project`] from the result to the lhs.
    fn lhs_from_out(&self) -> Vec<Option<usize>> {
        let map = self.dims.operand_from_out(Side::Lhs, self.lhs.len());
        self.with_spatial(map, |t| t.lhs, |t| t.out)
    }

    /// The result's dimension `i` -> the lhs's (the inverse of [`Conv::lhs_from_out`]).
    fn out_from_lhs(&self) -> Vec<Option<usize>> {
        let map = self.dims.out_from_operand(Side::Lhs, self.out.len());
        self.with_spatial(map, |t| t.out, |t| t.lhs)
    }

    /// The lhs's dimension `i` -> the kernel's (batch, contracting and spatial).
    fn lhs_from_rhs(&self) -> Vec<Option<usize>> {
        let map = self.dims.operand_from_operand(Side::Lhs, self.lhs.len());
        self.with_spatial(map, |t| t.lhs, |t| t.rhs)
    }

    /// The kernel's dimension `i` -> the lhs's (batch, contracting and spatial).
    fn rhs_from_lhs(&self) -> Vec<Option<usize>> {
        let map = self.dims.operand_from_operand(Side::Rhs, self.rhs.len());
        self.with_spatial(map, |t| t.rhs, |t| t.lhs)
    }

    /// `l` (a tiling of the lhs) as the halo-on-rhs strategy can keep it: spatial splits the
    /// kernel window cannot follow ([`kernel_windowed`]) made whole. `None` when no spatial
    /// split is left or a split would cut groups.
    fn halo_rhs_lhs(&self, l: &Tiling) -> Option<Tiling> {
        let drop: Vec<usize> = (0..self.dims.spatial.len())
            .filter_map(|k| {
                let d = self.dims.spatial[k].lhs?;
                let split = l.tiles[d] > 1;
                (split && kernel_windowed(self, k, l.tiles[d], false).is_none()).then_some(d)
            })
            .collect();
        let l = if drop.is_empty() {
            l.clone()
        } else {
            l.replicate_dims(&drop)
        };
        if !self.spatial_split(&l, Some(Side::Lhs))
            || self.lhs_grouped().is_some_and(|(d, g)| g % l.tiles[d] != 0)
        {
            return None;
        }
        let r = l.project(&self.rhs_from_lhs());
        (self.sanitize_rhs(&r) == r).then_some(l)
    }

    /// The result tiling of partial sums computed from operand `side` split as `t`, the
    /// dimensions in `summed` (that operand's) summed over: `t` without them, carried to the
    /// result through the batch and non-contracting dimensions.
    fn summed_out(&self, t: &Tiling, side: Side, summed: &[usize]) -> Tiling {
        t.replicate_dims(summed)
            .project(&self.dims.out_from_operand(side, self.out.len()))
    }

    /// The dimensions of operand `side` split as `t` whose pieces are partial sums: split
    /// spatial and contracting ones.
    fn summed(&self, t: &Tiling, side: Side) -> Vec<usize> {
        self.dims
            .spatial
            .iter()
            .chain(&self.dims.contracting)
            .filter_map(|x| x.on(side))
            .filter(|&d| t.tiles[d] > 1)
            .collect()
    }

    /// The lhs tiling that goes with kernel tiling `r` in the tiled-rhs strategy: `r`'s split
    /// carried over, mirrored along the reversed spatial dimensions (the device holding the
    /// kernel's tile `j` reads the input around the window offsets of tile `tiles - 1 - j`).
    fn tiled_rhs_lhs(&self, r: &Tiling) -> Tiling {
        let l = r.project(&self.lhs_from_rhs());
        let reversed: Vec<usize> = (0..self.win.len())
            .filter(|&k| self.win[k].window_reversal)
            .filter_map(|k| self.dims.spatial[k].lhs)
            .filter(|&d| l.tiles[d] > 1)
            .collect();
        if reversed.is_empty() {
            l
        } else {
            mirrored(&l, &reversed)
        }
    }

    /// Can the tiled-rhs strategy run along spatial dimension `k` (no base dilation: a
    /// kernel piece's window positions are then a plain range, mirrored under reversal)?
    fn rhs_splittable(&self, k: usize) -> bool {
        self.win[k].base_dilation == 1
    }
}

/// Per-dimension halo of the lhs for the windowed-output strategy: the [`Windowed`] of lhs
/// dimension `d` (output split `tiles` ways along spatial `k`), or `None` when the window
/// has base dilation (fetched through `dilated_piece`).
fn out_windowed(c: &Conv, k: usize, tiles: i64, whole: bool) -> Windowed {
    let wd = &c.win[k];
    let s = &c.dims.spatial[k];
    let (d, o) = (s.lhs.expect("spatial"), s.out.expect("spatial"));
    let size = c.lhs[d];
    let out_shard = ceil_div(c.out[o], tiles);
    let span = (wd.size - 1) * wd.window_dilation + 1;
    Windowed {
        whole,
        size,
        tiles,
        shard: if whole { size } else { ceil_div(size, tiles) },
        shift: 0,
        lo: linear(tiles, -wd.padding_low, out_shard * wd.stride),
        out_shard,
        out_size: c.out[o],
        stride: wd.stride,
        span,
    }
}

/// The lhs window of the tiled-rhs strategy along spatial `k`: tile `j` holds kernel
/// positions `[j*r, (j+1)*r)` and computes every output position. Under reversal the window
/// applies stored position `p` as `size-1-p`, so kernel tile `j` covers window offsets
/// `[size - (j+1)*r, size - j*r)`, and it sits with lhs tile `i = tiles-1-j`
/// ([`Conv::tiled_rhs_lhs`]): the start is again linear in the lhs tile, `(size - tiles*r +
/// i*r) * dilation - pad_low` (the local op keeps the reversal; offsets below 0 meet the
/// zeroed padding of an uneven kernel split).
fn rhs_windowed(c: &Conv, k: usize, tiles: i64, whole: bool) -> Windowed {
    let wd = &c.win[k];
    let s = &c.dims.spatial[k];
    let (d, o) = (s.lhs.expect("spatial"), s.out.expect("spatial"));
    let size = c.lhs[d];
    let r = ceil_div(wd.size, tiles);
    let dil = wd.window_dilation;
    let lo = if wd.window_reversal {
        linear(tiles, (wd.size - tiles * r) * dil - wd.padding_low, r * dil)
    } else {
        linear(tiles, -wd.padding_low, r * dil)
    };
    Windowed {
        whole,
        size,
        tiles,
        shard: if whole { size } else { ceil_div(size, tiles) },
        shift: 0,
        lo,
        out_shard: c.out[o],
        // Every tile computes every output position (with its own kernel piece).
        out_size: tiles * c.out[o],
        stride: wd.stride,
        span: (r - 1) * wd.window_dilation + 1,
    }
}

/// The kernel window of the halo-on-rhs strategy along spatial `k`.
#[derive(Clone, Debug)]
struct KernelWindow {
    /// The kernel positions each lhs tile fetches (its window, over the kernel's dimension).
    kernel: Windowed,
    /// The local window dimension that reads them.
    local: WindowDim,
    /// Per lhs tile: how far its input piece moves right inside the local lhs (the local
    /// padding differs per tile when the window dilation does not divide the piece; the
    /// piece is then padded by `max_shift` on both sides and sliced per device, as XLA does).
    shift: Vec<i64>,
    max_shift: i64,
}

/// The kernel window of the halo-on-rhs strategy along spatial `k`. Lhs tile `j` holds input
/// positions `[j*S, (j+1)*S)` and computes every output position with the kernel positions
/// `p` that meet them (`o*stride - pad_low + p*dilation` inside its piece): from
/// `ceil((j*S + pad_low - (out-1)*stride) / dilation)` to `floor((j*S + S-1 + pad_low) /
/// dilation)`. Each tile's local padding is `pad_low + j*S - first*dilation`; when that
/// differs between tiles (the dilation does not divide `S`), the input piece is shifted (see
/// [`KernelWindow::shift`]). `None` with base dilation or reversal (XLA refuses those too).
fn kernel_windowed(c: &Conv, k: usize, tiles: i64, whole: bool) -> Option<KernelWindow> {
    let wd = &c.win[k];
    let s = &c.dims.spatial[k];
    let (d, kd, o) = (s.lhs?, s.rhs?, s.out?);
    if wd.base_dilation != 1 || wd.window_reversal || tiles < 2 {
        return None;
    }
    let (dil, stride, pl) = (wd.window_dilation.max(1), wd.stride.max(1), wd.padding_low);
    let shard = ceil_div(c.lhs[d], tiles);
    let out = c.out[o];
    let first: Vec<i64> = (0..tiles)
        .map(|j| -((-(j * shard + pl - (out - 1) * stride)).div_euclid(dil)))
        .collect();
    let last = |j: i64| (j * shard + shard - 1 + pl).div_euclid(dil);
    let width = (0..tiles).map(|j| last(j) - first[j as usize] + 1).max()?;
    if width < 1 {
        return None;
    }
    let pads: Vec<i64> = (0..tiles)
        .map(|j| pl + j * shard - first[j as usize] * dil)
        .collect();
    let padding_low = *pads.iter().min()?;
    let shift: Vec<i64> = pads.iter().map(|p| p - padding_low).collect();
    let max_shift = *shift.iter().max()?;
    let ksize = c.rhs[kd];
    let kernel = Windowed {
        whole,
        size: ksize,
        tiles,
        shard: if whole { ksize } else { ceil_div(ksize, tiles) },
        shift: 0,
        lo: first,
        out_shard: 1,
        out_size: tiles,
        stride: 1,
        span: width,
    };
    let local = WindowDim {
        size: width,
        padding_low,
        padding_high: (out - 1) * stride + (width - 1) * dil + 1
            - (shard + max_shift)
            - padding_low,
        ..*wd
    };
    Some(KernelWindow {
        kernel,
        local,
        shift,
        max_shift,
    })
}

/// `t` with the tile order along each of `dims` mirrored (the device holding tile `i` holds
/// tile `tiles - 1 - i`).
fn mirrored(t: &Tiling, dims: &[usize]) -> Tiling {
    let mut idx = t.tile_indices();
    for ix in &mut idx {
        for &d in dims {
            ix[d] = t.tiles[d] - 1 - ix[d];
        }
    }
    Tiling::from_tile_indices(t.tiles.clone(), t.repl, &idx)
}

/// The elements of one position along dimension `d` of a piece of `dims`.
fn elements_except(dims: &[i64], d: usize) -> i64 {
    dims.iter()
        .enumerate()
        .filter(|&(j, _)| j != d)
        .map(|(_, &x)| x)
        .product()
}

/// The positions a halo exchange along `w` moves to a device (times the elements per
/// position, for bytes).
fn halo_positions(w: &Windowed) -> i64 {
    let p = w.plan();
    if w.whole {
        return 0;
    }
    if p.gather {
        return (w.tiles - 1) * w.shard;
    }
    p.parts
        .iter()
        .map(|part| match part {
            Part::From { start, end, to, .. } if !to.is_empty() => end - start,
            _ => 0,
        })
        .sum()
}

impl Engine<'_> {
    pub(super) fn convolution(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        // No window is the empty one (a convolution without spatial dimensions).
        let empty = tessera_hlo::attrs::Window::default();
        let win = i.attrs.window.as_deref().unwrap_or(&empty);
        let Some(dn) = i.attrs.conv_dims.as_deref() else {
            return self.default(b, id, own);
        };
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        if i.operands().len() != 2
            || !i.shape.is_array()
            || win.dims.len() != dn.input_spatial_dimensions.len()
        {
            return self.default(b, id, own);
        }
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let (fg, bg) = (
            i.attrs.feature_group_count.max(1),
            i.attrs.batch_group_count.max(1),
        );
        let c = Conv {
            dn: dn.clone(),
            win: win.dims.clone(),
            fg,
            bg,
            dims: DimsMapping::of_conv(dn, fg, bg),
            lhs: self.global(b.module(), lhs).dims().to_vec(),
            rhs: self.global(b.module(), rhs).dims().to_vec(),
            out: i.shape.dims().to_vec(),
            ty: i.shape.element_type(),
        };
        if c.lhs.contains(&0) || c.rhs.contains(&0) || c.out.contains(&0) {
            return self.default(b, id, own);
        }
        // Dimension numbers out of range (a module the verifier would refuse): nothing to
        // partition by, the default path handles it as written.
        let in_range =
            |dims: &[i64], rank: usize| dims.iter().all(|&d| d >= 0 && (d as usize) < rank);
        let (lr, rr, or) = (c.lhs.len(), c.rhs.len(), c.out.len());
        let ok = in_range(&dn.input_spatial_dimensions, lr)
            && in_range(&[dn.input_batch_dimension, dn.input_feature_dimension], lr)
            && in_range(&dn.kernel_spatial_dimensions, rr)
            && in_range(
                &[
                    dn.kernel_input_feature_dimension,
                    dn.kernel_output_feature_dimension,
                ],
                rr,
            )
            && in_range(&dn.output_spatial_dimensions, or)
            && in_range(
                &[dn.output_batch_dimension, dn.output_feature_dimension],
                or,
            )
            && dn.kernel_spatial_dimensions.len() == win.dims.len()
            && dn.output_spatial_dimensions.len() == win.dims.len();
        if !ok {
            return self.default(b, id, own);
        }
        let (lrank, rrank) = (c.lhs.len(), c.rhs.len());
        let lv = self.value(b.module(), lhs)?;
        let rv = self.value(b.module(), rhs)?;
        let lt = indexed::tiling_of(&lv.tree)
            .cloned()
            .unwrap_or_else(|| Tiling::replicated(lrank, self.n));
        let rt = indexed::tiling_of(&rv.tree)
            .cloned()
            .unwrap_or_else(|| Tiling::replicated(rrank, self.n));
        let t = t.clone();

        // A dot in disguise: nothing spatial is split and every grouped split keeps groups.
        let groups_kept = c.sanitize_out(&t) == t
            && c.sanitize_rhs(&rt) == rt
            && c.lhs_grouped().is_none_or(|(d, g)| g % lt.tiles[d] == 0);
        let dot_like = groups_kept && !c.spatial_split(&t, None);
        if dot_like
            && !c.spatial_split(&lt, Some(Side::Lhs))
            && !c.spatial_split(&rt, Some(Side::Rhs))
        {
            return self.dot_like(b, id, own, &c.dims);
        }

        // The candidates, each costed by the bytes a device receives.
        let mut plans = vec![Plan::Windowed(c.sanitize_out(&t))];
        if dot_like {
            plans.push(Plan::DotLike);
        }
        // The result computed as either operand is split (XLA aligns the result with the lhs
        // or the rhs and reshards it after: a grouped convolution whose result is split
        // spatially but whose operands are split on the groups).
        let from_rhs = rt.project(&c.dims.out_from_operand(Side::Rhs, c.out.len()));
        for w in [lt.project(&c.out_from_lhs()), from_rhs] {
            let w = c.sanitize_out(&w);
            if !plans
                .iter()
                .any(|p| matches!(p, Plan::Windowed(x) if *x == w))
            {
                plans.push(Plan::Windowed(w));
            }
        }
        // The kernel split along spatial dimensions: as it is, or (XLA's tiled lhs and rhs
        // with a reshard) as the lhs is.
        let keep: Vec<usize> = (0..c.dims.spatial.len())
            .filter(|&k| !c.rhs_splittable(k))
            .filter_map(|k| c.dims.spatial[k].rhs)
            .collect();
        let mut kernels = Vec::new();
        if c.spatial_split(&rt, Some(Side::Rhs)) {
            kernels.push(rt.clone());
        }
        if c.spatial_split(&lt, Some(Side::Lhs)) {
            let r = lt.project(&c.rhs_from_lhs());
            // Under reversal the lhs's first piece meets the kernel's last one (XLA's
            // reversed sharding): the kernel split in the mirrored device order.
            let reversed: Vec<usize> = (0..c.win.len())
                .filter(|&k| c.win[k].window_reversal)
                .filter_map(|k| c.dims.spatial[k].rhs)
                .filter(|&kd| r.tiles[kd] > 1)
                .collect();
            if !reversed.is_empty() {
                kernels.push(mirrored(&r, &reversed));
            }
            kernels.push(r);
        }
        for r in kernels {
            let r = c.sanitize_rhs(&r);
            let r = if keep.is_empty() {
                r
            } else {
                r.replicate_dims(&keep)
            };
            let seen = plans
                .iter()
                .any(|p| matches!(p, Plan::TiledRhs(x) if *x == r));
            if c.spatial_split(&r, Some(Side::Rhs)) && !seen {
                plans.push(Plan::TiledRhs(r));
            }
        }
        // Halo on the rhs (only when XLA's option allows it): the lhs keeps its spatial split,
        // as it is or (the kernel being the one split) as the kernel is.
        if !self.conv_halo_on_lhs_only {
            let mut lhs_tilings = Vec::new();
            if c.spatial_split(&lt, Some(Side::Lhs)) {
                lhs_tilings.push(lt.clone());
            }
            if c.spatial_split(&rt, Some(Side::Rhs)) {
                lhs_tilings.push(rt.project(&c.lhs_from_rhs()));
            }
            for l in lhs_tilings {
                if let Some(l) = c.halo_rhs_lhs(&l) {
                    if !plans
                        .iter()
                        .any(|p| matches!(p, Plan::HaloRhs(x) if *x == l))
                    {
                        plans.push(Plan::HaloRhs(l));
                    }
                }
            }
        }
        // The cheapest; a tie goes to the rhs halo (offered only when the option asks for it,
        // XLA's choice then).
        let mut best: Option<(i64, usize)> = None;
        for (k, p) in plans.iter().enumerate() {
            let cost = self.conv_cost(&c, p, &lt, &rt, &t);
            let rhs_halo = matches!(p, Plan::HaloRhs(_));
            if best.is_none_or(|(b, _)| cost < b || (cost == b && rhs_halo)) {
                best = Some((cost, k));
            }
        }
        let (_, k) = best.expect("one candidate at least");
        let (local, tree) = match plans.swap_remove(k) {
            Plan::DotLike => return self.dot_like(b, id, own, &c.dims),
            Plan::Windowed(w) => self.conv_windowed(b, &i, &c, &w)?,
            Plan::TiledRhs(r) => self.conv_tiled_rhs(b, &i, &c, &r)?,
            Plan::HaloRhs(l) => self.conv_halo_rhs(b, &i, &c, &l)?,
        };
        let v = Value { local, tree };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    /// Bytes a device receives under plan `p`: operand reshards, halos, the partial sums'
    /// all-reduce, and the result's reshard to `t`.
    fn conv_cost(&self, c: &Conv, p: &Plan, lt: &Tiling, rt: &Tiling, t: &Tiling) -> i64 {
        let e = c.ty.byte_size() as i64;
        let mv = |s: &Tiling, d: &Tiling, dims: &[i64]| self.move_bytes(s, d, dims, c.ty);
        match p {
            Plan::DotLike => {
                // dot_like's strategies: an operand split on contracting dimensions (and not
                // on spatial ones) keeps its split, the other follows, partial sums
                // all-reduced; otherwise both operands take the result's split.
                let mut best = self.conv_cost(c, &Plan::Windowed(t.clone()), lt, rt, t);
                for (side, mine) in [(Side::Lhs, lt), (Side::Rhs, rt)] {
                    let split: Vec<usize> = c
                        .dims
                        .contracting
                        .iter()
                        .filter_map(|d| d.on(side))
                        .filter(|&d| mine.tiles[d] > 1)
                        .collect();
                    if split.is_empty() || c.spatial_split(mine, Some(side)) {
                        continue;
                    }
                    let other = side.other();
                    let (odims, otile) = match other {
                        Side::Lhs => (&c.lhs, lt),
                        Side::Rhs => (&c.rhs, rt),
                    };
                    let o_t = mine.project(&c.dims.operand_from_operand(other, odims.len()));
                    let part = mine
                        .replicate_dims(&split)
                        .project(&c.dims.out_from_operand(side, c.out.len()));
                    let g: i64 = split.iter().map(|&d| mine.tiles[d]).product();
                    let part_bytes = part.shard_dims(&c.out).iter().product::<i64>() * e;
                    let cost = mv(otile, &o_t, odims)
                        + 2 * part_bytes * (g - 1) / g
                        + mv(&part, t, &c.out);
                    best = best.min(cost);
                }
                best
            }
            Plan::Windowed(w) => {
                let target = w.project(&c.lhs_from_out());
                let (l_t, whole) = self.conv_operand_target(c, Side::Lhs, lt, &target);
                let r_t = w.project(&c.dims.operand_from_out(Side::Rhs, c.rhs.len()));
                let per: Vec<i64> = l_t.shard_dims(&c.lhs);
                let mut halo = 0;
                for (k, s) in c.dims.spatial.iter().enumerate() {
                    let d = s.lhs.expect("spatial");
                    let tiles = w.tiles[s.out.expect("spatial")];
                    if tiles > 1 {
                        let wdw = out_windowed(c, k, tiles, whole[d]);
                        let others = elements_except(&per, d);
                        halo += halo_positions(&wdw) * others * e;
                    }
                }
                mv(lt, &l_t, &c.lhs) + mv(rt, &r_t, &c.rhs) + halo + mv(w, t, &c.out)
            }
            Plan::TiledRhs(r) => {
                let target = c.tiled_rhs_lhs(r);
                let (l_t, whole) = self.conv_operand_target(c, Side::Lhs, lt, &target);
                let per: Vec<i64> = l_t.shard_dims(&c.lhs);
                let mut halo = 0;
                for (k, s) in c.dims.spatial.iter().enumerate() {
                    let (d, kd) = (s.lhs.expect("spatial"), s.rhs.expect("spatial"));
                    if r.tiles[kd] > 1 {
                        let wdw = rhs_windowed(c, k, r.tiles[kd], whole[d]);
                        let others = elements_except(&per, d);
                        halo += halo_positions(&wdw) * others * e;
                    }
                }
                let sum = self.partial_sum_cost(c, r, Side::Rhs, t);
                mv(lt, &l_t, &c.lhs) + mv(rt, r, &c.rhs) + halo + sum
            }
            Plan::HaloRhs(l) => {
                let target = l.project(&c.rhs_from_lhs());
                let (r_t, whole) = self.conv_operand_target(c, Side::Rhs, rt, &target);
                let per: Vec<i64> = r_t.shard_dims(&c.rhs);
                let mut halo = 0;
                for (k, s) in c.dims.spatial.iter().enumerate() {
                    let (d, kd) = (s.lhs.expect("spatial"), s.rhs.expect("spatial"));
                    if l.tiles[d] > 1 {
                        if let Some(kw) = kernel_windowed(c, k, l.tiles[d], whole[kd]) {
                            halo += halo_positions(&kw.kernel) * elements_except(&per, kd) * e;
                        }
                    }
                }
                let sum = self.partial_sum_cost(c, l, Side::Lhs, t);
                mv(lt, l, &c.lhs) + mv(rt, &r_t, &c.rhs) + halo + sum
            }
        }
    }

    /// The bytes of the partial sums of a strategy that keeps operand `side` split as `s`
    /// (all-reduced over its split spatial and contracting dimensions) and of their reshard
    /// to the result's tiling `t`.
    fn partial_sum_cost(&self, c: &Conv, s: &Tiling, side: Side, t: &Tiling) -> i64 {
        let summed = c.summed(s, side);
        let part = c.summed_out(s, side, &summed);
        let g: i64 = summed.iter().map(|&d| s.tiles[d]).product();
        let part_bytes = part.shard_dims(&c.out).iter().product::<i64>() * c.ty.byte_size() as i64;
        2 * part_bytes * (g - 1) / g + self.move_bytes(&part, t, &c.out, c.ty)
    }

    /// The tiling of operand `side` (now `cur`) to reshard to for windowing along
    /// `target`'s split spatial dimensions: spatial dimensions the operand already holds
    /// whole stay whole (each device cuts its window from them). Returns the tiling and
    /// which dimensions are held whole.
    fn conv_operand_target(
        &self,
        c: &Conv,
        side: Side,
        cur: &Tiling,
        target: &Tiling,
    ) -> (Tiling, Vec<bool>) {
        let dims = match side {
            Side::Lhs => &c.lhs,
            Side::Rhs => &c.rhs,
        };
        let mut whole: Vec<usize> = c
            .dims
            .spatial
            .iter()
            .filter_map(|s| s.on(side))
            .filter(|&d| target.tiles[d] > 1 && cur.tiles[d] == 1)
            .collect();
        // Keeping them whole saves the halos but not always the reshard (a batch split that
        // must first be undone): taken only when the reshard moves no more.
        if !whole.is_empty() {
            let kept = target.replicate_dims(&whole);
            if self.move_bytes(cur, &kept, dims, c.ty) > self.move_bytes(cur, target, dims, c.ty) {
                whole.clear();
            }
        }
        let mut flags = vec![false; dims.len()];
        for &d in &whole {
            flags[d] = true;
        }
        if whole.is_empty() {
            (target.clone(), flags)
        } else {
            (target.replicate_dims(&whole), flags)
        }
    }

    /// Operand `side` (original `op`) resharded for windowing along `target`'s split
    /// spatial dimensions (see [`Engine::conv_operand_target`]), with the dimensions it holds
    /// whole.
    fn conv_operand(
        &mut self,
        b: &mut Builder,
        c: &Conv,
        side: Side,
        op: InstrId,
        target: &Tiling,
    ) -> Result<(InstrId, Vec<bool>)> {
        let rank = match side {
            Side::Lhs => c.lhs.len(),
            Side::Rhs => c.rhs.len(),
        };
        let v = self.value(b.module(), op)?;
        let cur = indexed::tiling_of(&v.tree)
            .cloned()
            .unwrap_or_else(|| Tiling::replicated(rank, self.n));
        let (t, whole) = self.conv_operand_target(c, side, &cur, target);
        Ok((self.operand_of(b, op, &t)?, whole))
    }

    /// The windowed-output strategy with result tiling `w`: returns the local result and its
    /// spec.
    fn conv_windowed(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        c: &Conv,
        w: &Tiling,
    ) -> Result<(InstrId, Tree)> {
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let target = w.project(&c.lhs_from_out());
        let (mut x, whole) = self.conv_operand(b, c, Side::Lhs, lhs, &target)?;
        let r_t = w.project(&c.dims.operand_from_out(Side::Rhs, c.rhs.len()));
        let r = self.operand_of(b, rhs, &r_t)?;
        let zero = b.scalar(b.module().instr(x).shape.element_type(), 0.0)?;
        let mut local_win = i.attrs.window.as_deref().cloned().unwrap_or_default();
        for (k, s) in c.dims.spatial.iter().enumerate() {
            let d = s.lhs.expect("spatial");
            if target.tiles[d] <= 1 {
                continue;
            }
            let wd = c.win[k];
            let tiles = target.tiles[d];
            let ww = out_windowed(c, k, tiles, whole[d]);
            x = if wd.base_dilation > 1 {
                let width = ww.width();
                let elements = (ww.size, ww.shard, ww.whole);
                let out = (ww.out_shard, ww.out_size);
                let bd = wd.base_dilation;
                self.dilated_piece(b, x, &target, d, elements, bd, &ww.lo, width, out, zero)?
            } else {
                self.windowed_piece(b, x, &target, d, &ww, Some(zero))?
            };
            local_win.dims[k] = WindowDim {
                padding_low: 0,
                padding_high: 0,
                base_dilation: 1,
                ..wd
            };
        }
        let mut local = i.clone();
        local.attrs.window = Some(Box::new(local_win));
        let tree = Tree::Leaf(Spec::Tiled(w.clone()));
        let shape = local_shape(&i.shape, &tree);
        // The lhs tiling the local op sees: `target` (held-whole dimensions are spatial, which
        // never carry groups).
        let out = self.local_dot_like(b, &local, x, r, &target, shape)?;
        Ok((out, tree))
    }

    /// The tiled-rhs strategy: the kernel kept as `r` (split along some spatial dimensions),
    /// the lhs fetched per kernel piece, partial sums all-reduced.
    fn conv_tiled_rhs(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        c: &Conv,
        r: &Tiling,
    ) -> Result<(InstrId, Tree)> {
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let target = c.tiled_rhs_lhs(r);
        let (mut x, whole) = self.conv_operand(b, c, Side::Lhs, lhs, &target)?;
        let mut k_local = self.operand_of(b, rhs, r)?;
        let lty = b.module().instr(x).shape.element_type();
        let rty = b.module().instr(k_local).shape.element_type();
        let lzero = b.scalar(lty, 0.0)?;
        let rzero = b.scalar(rty, 0.0)?;
        // Kernel padding of an uneven split and padding of split contracting dimensions
        // multiply nothing.
        let summed = c.summed(r, Side::Rhs);
        k_local = self.mask_padding(b, k_local, &c.rhs, r, &summed, rzero)?;
        let lhs_contracting: Vec<usize> = c.dims.contracting.iter().filter_map(|t| t.lhs).collect();
        // The lhs as held: the spatial dimensions kept whole are not split.
        let whole_dims: Vec<usize> = (0..whole.len()).filter(|&d| whole[d]).collect();
        let held = target.replicate_dims(&whole_dims);
        x = self.mask_padding(b, x, &c.lhs, &held, &lhs_contracting, lzero)?;
        let mut local_win = i.attrs.window.as_deref().cloned().unwrap_or_default();
        for (k, s) in c.dims.spatial.iter().enumerate() {
            let (d, kd) = (s.lhs.expect("spatial"), s.rhs.expect("spatial"));
            if r.tiles[kd] <= 1 {
                continue;
            }
            let ww = rhs_windowed(c, k, r.tiles[kd], whole[d]);
            x = self.windowed_piece(b, x, &target, d, &ww, Some(lzero))?;
            local_win.dims[k] = WindowDim {
                size: ceil_div(c.win[k].size, r.tiles[kd]),
                padding_low: 0,
                padding_high: 0,
                ..c.win[k]
            };
        }
        let partial = Partial {
            split: r,
            side: Side::Rhs,
            summed: &summed,
            reason: "partial sums of a convolution over a split kernel",
        };
        self.conv_partial_sums(b, i, c, (x, k_local, &target), local_win, &partial)
    }

    /// The halo-on-rhs strategy: the lhs kept as `l` (split along some spatial dimensions),
    /// each device fetching the kernel positions that meet its input piece
    /// ([`kernel_windowed`]), partial sums all-reduced.
    fn conv_halo_rhs(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        c: &Conv,
        l: &Tiling,
    ) -> Result<(InstrId, Tree)> {
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let mut x = self.operand_of(b, lhs, l)?;
        let target = l.project(&c.rhs_from_lhs());
        let (mut k_local, whole) = self.conv_operand(b, c, Side::Rhs, rhs, &target)?;
        let lty = b.module().instr(x).shape.element_type();
        let rty = b.module().instr(k_local).shape.element_type();
        let lzero = b.scalar(lty, 0.0)?;
        let rzero = b.scalar(rty, 0.0)?;
        // The padded ends of uneven input pieces (spatial and contracting) multiply nothing.
        let summed = c.summed(l, Side::Lhs);
        x = self.mask_padding(b, x, &c.lhs, l, &summed, lzero)?;
        let mut local_win = i.attrs.window.as_deref().cloned().unwrap_or_default();
        for (k, s) in c.dims.spatial.iter().enumerate() {
            let (d, kd) = (s.lhs.expect("spatial"), s.rhs.expect("spatial"));
            if l.tiles[d] <= 1 {
                continue;
            }
            let kw = kernel_windowed(c, k, l.tiles[d], whole[kd]).ok_or_else(|| {
                fail(format!(
                    "%{}: no kernel window for the lhs split along spatial dimension {k}",
                    i.name()
                ))
            })?;
            k_local = self.windowed_piece(b, k_local, &target, kd, &kw.kernel, Some(rzero))?;
            if kw.max_shift > 0 {
                x = self.shifted_piece(b, x, l, d, &kw, lzero)?;
            }
            local_win.dims[k] = kw.local;
        }
        let partial = Partial {
            split: l,
            side: Side::Lhs,
            summed: &summed,
            reason: "partial sums of a convolution over a split input (kernel halo)",
        };
        self.conv_partial_sums(b, i, c, (x, k_local, l), local_win, &partial)
    }

    /// `x` (the local lhs, tiled by `l`) with its piece along `d` moved right by the device's
    /// tile's `kw.shift` inside `S + max_shift` positions, zeros around: padded by `max_shift`
    /// on both sides, then sliced at `max_shift - shift` per device.
    fn shifted_piece(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        l: &Tiling,
        d: usize,
        kw: &KernelWindow,
        zero: InstrId,
    ) -> Result<InstrId> {
        let pads = PaddingDim {
            low: kw.max_shift,
            high: kw.max_shift,
            interior: 0,
        };
        let padded = b.pad_dim(x, zero, d, pads)?;
        let mut sizes: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
        let rank = sizes.len();
        sizes[d] += kw.max_shift;
        let offsets: Vec<i64> = l
            .tile_indices()
            .iter()
            .map(|ix| kw.max_shift - kw.shift[ix[d] as usize])
            .collect();
        let mut starts = Vec::with_capacity(rank);
        for k in 0..rank {
            starts.push(if k == d {
                self.table(b, &offsets)?
            } else {
                self.table(b, &[0])?
            });
        }
        Ok(b.dynamic_slice(padded, &starts, &sizes)?)
    }

    /// The local convolution of `i` on `(lhs, kernel, lhs tiling)` with window `win`, whose
    /// results are partial sums over `p`'s dimensions, all-reduced: the result and its spec.
    fn conv_partial_sums(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        c: &Conv,
        (x, k, lhs_tiling): (InstrId, InstrId, &Tiling),
        win: Window,
        p: &Partial,
    ) -> Result<(InstrId, Tree)> {
        let mut local = i.clone();
        local.attrs.window = Some(Box::new(win));
        let tree = Tree::Leaf(Spec::Tiled(c.summed_out(p.split, p.side, p.summed)));
        let shape = local_shape(&i.shape, &tree);
        let d = self.local_dot_like(b, &local, x, k, lhs_tiling, shape)?;
        let groups = p.split.groups(p.summed, false);
        let reducer = b.reducer(i.shape.element_type(), Opcode::Add)?;
        let sum = self.all_reduce(b, d, reducer, &groups)?;
        let g = groups[0].len() as i64;
        let out_bytes = b.module().instr(sum).shape.byte_size(8);
        self.report.collectives.push(CollectiveNote {
            original: i.name().to_string(),
            collective: "all-reduce",
            reason: p.reason.to_string(),
            bytes: 2 * out_bytes * (g - 1) / g,
        });
        Ok((sum, tree))
    }

    /// Original instruction `op`'s value resharded to tiling `t`.
    fn operand_of(&mut self, b: &mut Builder, op: InstrId, t: &Tiling) -> Result<InstrId> {
        let v = self.value(b.module(), op)?;
        let base = self.global(b.module(), op);
        self.reshard(b, &v, &base, &Tree::Leaf(Spec::Tiled(t.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-spatial-dimension convolution `[b, x, f] x [x, i, o]` with window `w`.
    fn conv1d(x: i64, k: i64, w: WindowDim) -> Conv {
        let dn = ConvDimensionNumbers {
            input_batch_dimension: 0,
            input_feature_dimension: 2,
            input_spatial_dimensions: vec![1],
            kernel_input_feature_dimension: 1,
            kernel_output_feature_dimension: 2,
            kernel_spatial_dimensions: vec![0],
            output_batch_dimension: 0,
            output_feature_dimension: 2,
            output_spatial_dimensions: vec![1],
        };
        let span = (k - 1) * w.window_dilation + 1;
        let out = (x + w.padding_low + w.padding_high - span).div_euclid(w.stride) + 1;
        Conv {
            dims: DimsMapping::of_conv(&dn, 1, 1),
            dn,
            win: vec![w],
            fg: 1,
            bg: 1,
            lhs: vec![1, x, 1],
            rhs: vec![k, 1, 1],
            out: vec![1, out, 1],
            ty: ElementType::F32,
        }
    }

    /// Every (output, kernel position) pair that reads a real input position of lhs tile `j`
    /// finds its kernel position inside tile `j`'s kernel window, at the local position the
    /// local window reads (the piece shifted by the tile's shift), and the local window
    /// yields exactly the global output count.
    #[test]
    fn kernel_windows_cover_every_product_once() {
        let mut checked = 0;
        for x in 1..=13 {
            for k in 1..=6 {
                for (stride, dil, pl, ph) in [
                    (1, 1, 0, 0),
                    (1, 1, 1, 1),
                    (1, 2, 3, 2),
                    (2, 1, 2, 0),
                    (1, 2, 0, -1),
                    (2, 2, -1, 3),
                    (1, 3, 2, 2),
                ] {
                    let w = WindowDim {
                        size: k,
                        stride,
                        padding_low: pl,
                        padding_high: ph,
                        window_dilation: dil,
                        ..WindowDim::default()
                    };
                    let c = conv1d(x, k, w);
                    let out = c.out[1];
                    if out < 1 {
                        continue;
                    }
                    for tiles in [2, 3, 4] {
                        let kw = kernel_windowed(&c, 0, tiles, false)
                            .unwrap_or_else(|| panic!("refused {x} {k} {w:?} tiles {tiles}"));
                        let (local, s) = (kw.local, ceil_div(x, tiles));
                        let local_span = (local.size - 1) * dil + 1;
                        let local_len = s + kw.max_shift;
                        let local_out = (local_len + local.padding_low + local.padding_high
                            - local_span)
                            / stride
                            + 1;
                        assert_eq!(local_out, out, "{x} {k} {w:?} tiles {tiles}");
                        for j in 0..tiles {
                            let lo = kw.kernel.lo[j as usize];
                            let shift = kw.shift[j as usize];
                            for o in 0..out {
                                for p in 0..k {
                                    let g = o * stride - pl + p * dil;
                                    if g < j * s || g >= (j + 1) * s || g >= x {
                                        continue;
                                    }
                                    assert!(
                                        (lo..lo + kw.kernel.span).contains(&p),
                                        "{x} {k} {w:?} tiles {tiles}: tile {j} misses p={p}"
                                    );
                                    let local_x = o * stride - local.padding_low + (p - lo) * dil;
                                    assert_eq!(local_x, g - j * s + shift);
                                    assert!((0..local_len).contains(&local_x));
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// The tiled-rhs window: kernel tile `j` (stored positions `[j*r, (j+1)*r)`) sits with
    /// lhs tile `j`, or `tiles-1-j` under reversal, and every product of a real kernel
    /// position with a real input position is read by the local (reversed) window at the
    /// right place of that lhs tile's window.
    #[test]
    fn split_kernel_windows_read_every_product() {
        let mut checked = 0;
        for x in 1..=12 {
            for k in 1..=7 {
                for (stride, dil, pl, ph) in
                    [(1, 1, 0, 0), (1, 2, 3, 2), (2, 1, 1, 1), (1, 1, 0, -1)]
                {
                    for reversal in [false, true] {
                        let w = WindowDim {
                            size: k,
                            stride,
                            padding_low: pl,
                            padding_high: ph,
                            window_dilation: dil,
                            window_reversal: reversal,
                            ..WindowDim::default()
                        };
                        let c = conv1d(x, k, w);
                        let out = c.out[1];
                        if out < 1 {
                            continue;
                        }
                        for tiles in [2, 3] {
                            let win = rhs_windowed(&c, 0, tiles, false);
                            let r = ceil_div(k, tiles);
                            for j in 0..tiles {
                                let i = if reversal { tiles - 1 - j } else { j };
                                let lo = win.lo[i as usize];
                                for p in (j * r)..((j + 1) * r).min(k) {
                                    let q = if reversal { k - 1 - p } else { p };
                                    let local_q = if reversal {
                                        r - 1 - (p - j * r)
                                    } else {
                                        p - j * r
                                    };
                                    for o in 0..out {
                                        let g = o * stride - pl + q * dil;
                                        if !(0..x).contains(&g) {
                                            continue;
                                        }
                                        assert_eq!(
                                            lo + o * stride + local_q * dil,
                                            g,
                                            "{x} {k} {w:?} tiles {tiles} j {j} p {p} o {o}"
                                        );
                                        assert!(o * stride + local_q * dil < win.width());
                                        checked += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }
}
