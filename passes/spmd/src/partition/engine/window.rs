//! Windowed inputs (XLA's `ReshardAsWindowedInput`): each device fetches the part of a split
//! dimension its piece of the output reads, from its own shard and its neighbours' (halo
//! exchange with collective-permutes, several hops when a halo is wider than a shard; an
//! all-gather of the dimension when the halos would move more), with the positions outside the
//! array set to a fill value. The handlers built on it: reduce-window, pad, slice (the general
//! case), concatenate, reverse. Dynamic-slice and dynamic-update-slice, which need no halo but
//! share the per-device offset arithmetic, are in `dynamic_slice.rs`.
//!
//! The geometry is pure ([`Windowed::plan`], unit-tested by simulation below); the emission
//! ([`Engine::windowed_piece`]) follows the plan's pieces one for one.

use tessera_hlo::attrs::WindowDim;

use super::super::spec::ceil_div;

use super::*;

/// One dimension of a windowed input, in global coordinates along it. The tile with index `k`
/// holds `[k*shard + shift, (k+1)*shard + shift)` (`shift <= 0`; positions outside
/// `[0, size)` hold garbage), and its output piece `[k*out_shard, (k+1)*out_shard)` (only
/// positions below `out_size` are real) reads `[lo[k], ..)`: `stride` apart per output
/// position, `span` wide for each. With `whole`, every device holds the whole dimension
/// (`shard == size`, `shift == 0`) and nothing moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Windowed {
    pub whole: bool,
    pub size: i64,
    pub tiles: i64,
    pub shard: i64,
    pub shift: i64,
    pub lo: Vec<i64>,
    pub out_shard: i64,
    pub out_size: i64,
    pub stride: i64,
    pub span: i64,
}

/// One part of the extended array, in concatenation order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The device's own shard.
    Own,
    /// `[start, end)` of the shard of the tile `hops` to the left (`hops < 0`: to the right),
    /// sent only to the tiles whose windows read it (`to`, tile indices); the others hold zeros
    /// there. A part nobody reads is zeros and moves nothing.
    From {
        hops: i64,
        start: i64,
        end: i64,
        to: Vec<i64>,
    },
}

/// How one dimension's windows are fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HaloPlan {
    /// The dimension is all-gathered (halos would move at least as much); `parts` is empty.
    pub gather: bool,
    /// Halo widths fetched from the left and right neighbours.
    pub left: i64,
    pub right: i64,
    pub parts: Vec<Part>,
    /// Padding added to the extended array so that every tile's window is in bounds.
    pub pad_low: i64,
    pub pad_high: i64,
    /// Per tile index: where its window starts in the padded extended array.
    pub offsets: Vec<i64>,
    /// The window width (`(out_shard - 1) * stride + span`).
    pub width: i64,
    /// Does some window reach outside `[0, size)` (positions a fill value must replace)?
    pub reaches_out: bool,
    /// Elements along the dimension that the halo parts (or the all-gather) move, summed
    /// over the collectives, and how many collectives that takes.
    pub moved: i64,
    pub collectives: i64,
}

/// One move of a direct fetch: `count` elements of tile `src`'s shard, from `src_off` in it,
/// land at `dst_pos` in tile `dst`'s window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub src: i64,
    pub dst: i64,
    pub src_off: i64,
    pub dst_pos: i64,
    pub count: i64,
}

/// Moves done together: every tile sends at most once and receives at most once, `len`
/// elements (the longest move; shorter ones are masked at the receiver). A `local` round is
/// each tile's part of its own shard and moves nothing; the others are one
/// collective-permute each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Round {
    pub local: bool,
    pub len: i64,
    pub moves: Vec<Move>,
}

/// A direct fetch (XLA's way with a small window far from the device's own piece, e.g. its
/// `SliceTo2`): each tile's window is put together from exactly the elements it reads, each
/// sent straight from the tile that holds it, where a halo would carry everything between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Direct {
    pub rounds: Vec<Round>,
    /// Elements along the dimension the collective-permutes move (summed).
    pub moved: i64,
}

impl Windowed {
    pub fn width(&self) -> i64 {
        (self.out_shard - 1) * self.stride + self.span
    }

    fn lo(&self, k: i64) -> i64 {
        self.lo[k as usize]
    }

    fn start(&self, k: i64) -> i64 {
        if self.whole {
            0
        } else {
            k * self.shard + self.shift
        }
    }

    /// The real positions tile `k`'s real outputs read, `[a, b)`, if any.
    fn need(&self, k: i64) -> Option<(i64, i64)> {
        let outs = (self.out_size - k * self.out_shard).min(self.out_shard);
        if outs <= 0 {
            return None;
        }
        let lo = self.lo(k);
        let hi = lo + (outs - 1) * self.stride + self.span;
        let (a, b) = (lo.max(0), hi.min(self.size));
        (a < b).then_some((a, b))
    }

    /// The halo exchange for this dimension.
    pub fn plan(&self) -> HaloPlan {
        let t = self.tiles;
        let (mut left, mut right) = (0i64, 0i64);
        for k in 0..t {
            if let Some((a, b)) = self.need(k) {
                left = left.max(self.start(k) - a);
                right = right.max(b - self.start(k) - self.shard);
            }
        }
        if self.whole {
            left = 0;
            right = 0;
        }
        // The halo parts, and who reads each: tile k reads part [start, end) of tile k - hops
        // when that global range meets its need.
        let mut parts = Vec::new();
        let hops_left = ceil_div_pos(left, self.shard);
        for h in (1..=hops_left).rev() {
            parts.push(self.part(h, (h * self.shard - left).max(0), self.shard));
        }
        parts.push(Part::Own);
        let hops_right = ceil_div_pos(right, self.shard);
        for h in 1..=hops_right {
            parts.push(self.part(-h, 0, (right - (h - 1) * self.shard).min(self.shard)));
        }
        let moved: i64 = parts
            .iter()
            .map(|p| match p {
                Part::From { start, end, to, .. } if !to.is_empty() => end - start,
                _ => 0,
            })
            .sum();
        // An all-gather moves (t-1) shards to every device; halos move what they hold.
        let gather = !self.whole && t > 1 && moved > (t - 1) * self.shard;
        let (ext_len, ext_start): (i64, Box<dyn Fn(i64) -> i64>) = if self.whole {
            parts = vec![Part::Own];
            (self.size, Box::new(|_| 0))
        } else if gather {
            left = 0;
            right = 0;
            parts.clear();
            let shift = self.shift;
            (t * self.shard, Box::new(move |_| shift))
        } else {
            let (s, l) = (self.shard, left);
            let shift = self.shift;
            (l + s + right, Box::new(move |k| k * s + shift - l))
        };
        let width = self.width();
        let mut raw: Vec<Option<i64>> = Vec::with_capacity(t as usize);
        let (mut pad_low, mut pad_high) = (0i64, 0i64);
        let mut reaches_out = false;
        for k in 0..t {
            if self.lo(k) < 0 || self.lo(k) + width > self.size {
                reaches_out = true;
            }
            if self.need(k).is_some() {
                let off = self.lo(k) - ext_start(k);
                pad_low = pad_low.max(-off);
                pad_high = pad_high.max(off + width - ext_len);
                raw.push(Some(off));
            } else {
                raw.push(None);
            }
        }
        pad_high = pad_high.max(width - ext_len - pad_low);
        let offsets = raw.iter().map(|o| o.map_or(0, |o| o + pad_low)).collect();
        let (moved, collectives) = if gather {
            ((t - 1) * self.shard, 1)
        } else {
            (
                moved,
                parts
                    .iter()
                    .filter(|p| matches!(p, Part::From { to, .. } if !to.is_empty()))
                    .count() as i64,
            )
        };
        HaloPlan {
            moved,
            collectives,
            gather,
            left,
            right,
            parts,
            pad_low,
            pad_high,
            offsets,
            width,
            reaches_out,
        }
    }
}

impl Windowed {
    /// The direct fetch of this dimension's windows, when it moves fewer elements than the
    /// halo plan `halo` (and takes at most four collectives or no more than the halo's):
    /// every tile's needed range is cut into the pieces each shard holds, and the pieces are
    /// put into rounds greedily, longest first, so that each round's length is its first
    /// piece's.
    pub fn direct(&self, halo: &HaloPlan) -> Option<Direct> {
        if self.whole || self.tiles <= 1 || halo.moved == 0 {
            return None;
        }
        let mut local = Vec::new();
        let mut remote = Vec::new();
        for k in 0..self.tiles {
            let Some((a, b)) = self.need(k) else {
                continue;
            };
            let first = (a - self.shift).div_euclid(self.shard).max(0);
            let last = (b - 1 - self.shift)
                .div_euclid(self.shard)
                .min(self.tiles - 1);
            for s in first..=last {
                let (x, y) = (a.max(self.start(s)), b.min(self.start(s) + self.shard));
                if x >= y {
                    continue;
                }
                let m = Move {
                    src: s,
                    dst: k,
                    src_off: x - self.start(s),
                    dst_pos: x - self.lo(k),
                    count: y - x,
                };
                if s == k {
                    local.push(m);
                } else {
                    remote.push(m);
                }
            }
        }
        remote.sort_by_key(|m| (-m.count, m.dst, m.src));
        let mut rounds: Vec<Round> = Vec::new();
        let limit = halo.collectives.max(4) as usize;
        for m in remote {
            let free = rounds
                .iter()
                .position(|r| r.moves.iter().all(|o| o.src != m.src && o.dst != m.dst));
            match free {
                Some(r) => rounds[r].moves.push(m),
                None if rounds.len() == limit => return None,
                None => rounds.push(Round {
                    local: false,
                    len: m.count,
                    moves: vec![m],
                }),
            }
        }
        let moved: i64 = rounds.iter().map(|r| r.len).sum();
        if moved >= halo.moved {
            return None;
        }
        if !local.is_empty() {
            let len = local.iter().map(|m| m.count).max().unwrap_or(0);
            rounds.insert(
                0,
                Round {
                    local: true,
                    len,
                    moves: local,
                },
            );
        }
        Some(Direct { rounds, moved })
    }

    /// Part `[start, end)` of the tile `hops` away, with the tiles that read it.
    fn part(&self, hops: i64, start: i64, end: i64) -> Part {
        let to = (0..self.tiles)
            .filter(|&k| {
                let src = k - hops;
                if !(0..self.tiles).contains(&src) {
                    return false;
                }
                let (a, b) = (self.start(src) + start, self.start(src) + end);
                self.need(k).is_some_and(|(x, y)| x < b && a < y)
            })
            .collect();
        Part::From {
            hops,
            start,
            end,
            to,
        }
    }
}

/// `lo0 + k*step` for each of `tiles` tiles.
pub(crate) fn linear(tiles: i64, lo0: i64, step: i64) -> Vec<i64> {
    (0..tiles).map(|k| lo0 + k * step).collect()
}

fn ceil_div_pos(a: i64, b: i64) -> i64 {
    if a <= 0 {
        0
    } else {
        (a + b - 1) / b
    }
}

/// A window dimension that reads exactly one element per output position.
fn trivial(w: &WindowDim) -> bool {
    w.size == 1
        && w.stride == 1
        && w.padding_low == 0
        && w.padding_high == 0
        && w.base_dilation == 1
        && w.window_dilation == 1
}

/// Is `init` of `i` (a reduce-window) a constant identity of its reducer? Only then may the
/// padding of a halo hold it (XLA's evaluator skips padding; an identity gives the same).
fn init_is_identity(m: &Module, i: &Instruction) -> bool {
    let Some(comp) = i.to_apply() else {
        return false;
    };
    let c = m.comp(comp);
    let Some(root) = c.root() else {
        return false;
    };
    let r = m.instr(root);
    let params: Vec<InstrId> = (0..c.num_parameters())
        .filter_map(|p| c.parameter(p))
        .collect();
    if params.len() != 2
        || r.operands().len() != 2
        || !r.operands().iter().all(|o| params.contains(o))
        || r.operands()[0] == r.operands()[1]
    {
        return false;
    }
    let init = m.instr(i.operands()[1]);
    let Some(lit) = init.attrs.literal.as_ref() else {
        return false;
    };
    let ty = init.shape.element_type();
    let Some(bytes) = lit.bytes() else {
        return false;
    };
    let want: Option<Vec<u8>> = match r.opcode() {
        Opcode::Add | Opcode::Or | Opcode::Xor => Some(vec![0; ty.byte_size()]),
        Opcode::Multiply | Opcode::And => number_bytes(ty, Extreme::One),
        Opcode::Maximum => number_bytes(ty, Extreme::Lowest),
        Opcode::Minimum => number_bytes(ty, Extreme::Highest),
        _ => None,
    };
    want.is_some_and(|w| w == bytes)
}

/// For a select-and-scatter: the value its select never prefers (the lowest for a `GE`/`GT`
/// select of the first parameter over the second, the highest for `LE`/`LT`), when the select
/// is such a compare and the scatter adds; `None` otherwise.
fn select_loser(m: &Module, i: &Instruction) -> Option<Extreme> {
    let (select, scatter) = (*i.called.first()?, *i.called.get(1)?);
    let two = |comp: CompId| -> Option<(InstrId, InstrId, InstrId)> {
        let c = m.comp(comp);
        let (p0, p1) = (c.parameter(0)?, c.parameter(1)?);
        (c.num_parameters() == 2).then_some((c.root()?, p0, p1))
    };
    let (root, p0, p1) = two(scatter)?;
    let r = m.instr(root);
    if r.opcode() != Opcode::Add
        || r.operands().len() != 2
        || !r.operands().contains(&p0)
        || !r.operands().contains(&p1)
    {
        return None;
    }
    let (root, p0, p1) = two(select)?;
    let r = m.instr(root);
    if r.opcode() != Opcode::Compare || r.operands() != [p0, p1] {
        return None;
    }
    match r.attrs.comparison.as_ref()?.direction {
        ComparisonDirection::Ge | ComparisonDirection::Gt => Some(Extreme::Lowest),
        ComparisonDirection::Le | ComparisonDirection::Lt => Some(Extreme::Highest),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Extreme {
    One,
    Lowest,
    Highest,
}

/// The little-endian bytes of 1, the lowest or the highest value of `ty` (infinities for
/// floats), for the types whose encoding is simple.
fn number_bytes(ty: ElementType, e: Extreme) -> Option<Vec<u8>> {
    use ElementType::*;
    let n = ty.byte_size();
    let int = |x: i128| x.to_le_bytes()[..n].to_vec();
    let bits = (n * 8) as u32;
    Some(match (ty, e) {
        (Pred, Extreme::One) | (Pred, Extreme::Highest) => vec![1],
        (Pred, Extreme::Lowest) => vec![0],
        (S8 | S16 | S32 | S64, Extreme::One) => int(1),
        (S8 | S16 | S32 | S64, Extreme::Lowest) => int(-(1i128 << (bits - 1))),
        (S8 | S16 | S32 | S64, Extreme::Highest) => int((1i128 << (bits - 1)) - 1),
        (U8 | U16 | U32 | U64, Extreme::One) => int(1),
        (U8 | U16 | U32 | U64, Extreme::Lowest) => int(0),
        (U8 | U16 | U32 | U64, Extreme::Highest) => int((1i128 << bits) - 1),
        (F32, e) => match e {
            Extreme::One => 1f32,
            Extreme::Lowest => f32::NEG_INFINITY,
            Extreme::Highest => f32::INFINITY,
        }
        .to_le_bytes()
        .to_vec(),
        (F64, e) => match e {
            Extreme::One => 1f64,
            Extreme::Lowest => f64::NEG_INFINITY,
            Extreme::Highest => f64::INFINITY,
        }
        .to_le_bytes()
        .to_vec(),
        (BF16, e) => {
            let f = match e {
                Extreme::One => 1f32,
                Extreme::Lowest => f32::NEG_INFINITY,
                Extreme::Highest => f32::INFINITY,
            };
            ((f.to_bits() >> 16) as u16).to_le_bytes().to_vec()
        }
        (F16, e) => match e {
            Extreme::One => 0x3C00u16,
            Extreme::Lowest => 0xFC00,
            Extreme::Highest => 0x7C00,
        }
        .to_le_bytes()
        .to_vec(),
        _ => return None,
    })
}

impl Engine<'_> {
    /// `x` is the local array whose dimension `d` is the tile described by `w` (the devices'
    /// tile indices from `t`). Returns the local array whose dimension `d` is the device's
    /// window (`w.plan().width` long, starting at global `lo[k]` for tile index k), positions outside
    /// `[0, size)` replaced by the scalar `fill` when one is given.
    pub(super) fn windowed_piece(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        t: &Tiling,
        d: usize,
        w: &Windowed,
        fill: Option<InstrId>,
    ) -> Result<InstrId> {
        let plan = w.plan();
        let tiles = t.tiles[d];
        let index: Vec<i64> = t.tile_indices().iter().map(|ix| ix[d]).collect();
        let mut piece = match w.direct(&plan) {
            Some(direct) => self.direct_piece(b, x, t, d, plan.width, &direct)?,
            None => self.halo_piece(b, x, t, d, &plan)?,
        };
        if let (Some(fill), true) = (fill, plan.reaches_out || w.size % tiles.max(1) != 0) {
            let los: Vec<i64> = index.iter().map(|&k| w.lo[k as usize]).collect();
            let valid = self.in_range(b, piece, d, &los, &[0], &[w.size])?;
            let dims: Vec<i64> = b.module().instr(piece).shape.dims().to_vec();
            let fills = broadcast_scalar(b, fill, &dims)?;
            piece = b.select(valid, piece, fills)?;
        }
        Ok(piece)
    }

    /// The windows of [`Engine::windowed_piece`] by the halo plan `plan`: the parts of the
    /// neighbours' shards around the own one (or the all-gathered dimension), padded, and
    /// each device's window cut out.
    fn halo_piece(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        t: &Tiling,
        d: usize,
        plan: &HaloPlan,
    ) -> Result<InstrId> {
        let ty = b.module().instr(x).shape.element_type();
        let groups = t.groups(&[d], false);
        let tiles = t.tiles[d];
        let index: Vec<i64> = t.tile_indices().iter().map(|ix| ix[d]).collect();
        let origin = self.origin_name(b);
        let note = |this: &mut Self, collective: &'static str, bytes: i64| {
            this.report.collectives.push(CollectiveNote {
                original: origin.clone(),
                collective,
                reason: format!("halo exchange along dimension {d}"),
                bytes,
            });
        };
        let mut ext = if plan.gather {
            let g = self.all_gather(b, x, d as i64, &groups)?;
            let out = b.module().instr(g).shape.byte_size(8);
            note(self, "all-gather", out * (tiles - 1) / tiles);
            g
        } else {
            let mut pieces = Vec::with_capacity(plan.parts.len());
            for part in &plan.parts {
                match part {
                    Part::Own => pieces.push(x),
                    Part::From {
                        hops,
                        start,
                        end,
                        to,
                    } => {
                        let s = slice_dim(b, x, d, *start, *end)?;
                        if to.is_empty() {
                            let zero = b.scalar(ty, 0.0)?;
                            let dims: Vec<i64> = b.module().instr(s).shape.dims().to_vec();
                            pieces.push(broadcast_scalar(b, zero, &dims)?);
                            continue;
                        }
                        let mut pairs = Vec::new();
                        for g in groups.iter() {
                            for &k in to {
                                pairs.push((g[(k - hops) as usize], g[k as usize]));
                            }
                        }
                        let p = self.collective_permute(b, s, &pairs)?;
                        let bytes = b.module().instr(p).shape.byte_size(8);
                        note(self, "collective-permute", bytes);
                        pieces.push(p);
                    }
                }
            }
            if pieces.len() == 1 {
                pieces[0]
            } else {
                b.concatenate(&pieces, d as i64)?
            }
        };
        if plan.pad_low > 0 || plan.pad_high > 0 {
            let zero = b.scalar(ty, 0.0)?;
            let pads = PaddingDim {
                low: plan.pad_low,
                high: plan.pad_high,
                interior: 0,
            };
            ext = b.pad_dim(ext, zero, d, pads)?;
        }
        let offsets: Vec<i64> = index.iter().map(|&k| plan.offsets[k as usize]).collect();
        self.cut(b, ext, d, &offsets, plan.width)
    }

    /// `x[offsets[device] .. + width]` along dimension `d`: a slice when every device cuts at
    /// the same place (nothing when that is all of `x`), else a dynamic-slice at the device's
    /// offset.
    fn cut(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        d: usize,
        offsets: &[i64],
        width: i64,
    ) -> Result<InstrId> {
        if offsets.iter().all(|&o| o == offsets[0]) {
            return slice_dim(b, x, d, offsets[0], offsets[0] + width);
        }
        let dims: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
        let mut starts = Vec::with_capacity(dims.len());
        let mut sizes = dims.clone();
        for k in 0..dims.len() {
            starts.push(if k == d {
                self.table(b, offsets)?
            } else {
                self.table(b, &[0])?
            });
        }
        sizes[d] = width;
        Ok(b.dynamic_slice(x, &starts, &sizes)?)
    }

    /// The windows of [`Engine::windowed_piece`] by the direct fetch `direct`: per round, each
    /// sending device cuts its piece out of its shard, one collective-permute carries it (none
    /// for the local round), and the receiver shifts it to its place in the window and keeps
    /// the positions the move covers.
    fn direct_piece(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        t: &Tiling,
        d: usize,
        width: i64,
        direct: &Direct,
    ) -> Result<InstrId> {
        let ty = b.module().instr(x).shape.element_type();
        let groups = t.groups(&[d], false);
        let tiles = t.tiles[d] as usize;
        let shard = b.module().instr(x).shape.dims()[d];
        let index: Vec<usize> = t.tile_indices().iter().map(|ix| ix[d] as usize).collect();
        let origin = self.origin_name(b);
        let zero = b.scalar(ty, 0.0)?;
        let mut acc: Option<InstrId> = None;
        for round in &direct.rounds {
            let len = round.len;
            // Per source tile: where it cuts (moved left when the round's length would run
            // past its shard); per target tile: where the cut piece starts in its window and
            // which of its positions the move fills.
            let mut cut_at = vec![0i64; tiles];
            let mut place = vec![round.moves[0].dst_pos; tiles];
            let mut keep = vec![(0i64, 0i64); tiles];
            for m in &round.moves {
                let at = m.src_off.min(shard - len);
                cut_at[m.src as usize] = at;
                place[m.dst as usize] = m.dst_pos - (m.src_off - at);
                keep[m.dst as usize] = (m.dst_pos, m.dst_pos + m.count);
            }
            let per_device = |v: &[i64]| -> Vec<i64> { index.iter().map(|&k| v[k]).collect() };
            let mut piece = self.cut(b, x, d, &per_device(&cut_at), len)?;
            if !round.local {
                let mut pairs = Vec::new();
                for g in groups.iter() {
                    for m in &round.moves {
                        pairs.push((g[m.src as usize], g[m.dst as usize]));
                    }
                }
                piece = self.collective_permute(b, piece, &pairs)?;
                let bytes = b.module().instr(piece).shape.byte_size(8);
                self.report.collectives.push(CollectiveNote {
                    original: origin.clone(),
                    collective: "collective-permute",
                    reason: format!("halo by direct fetch along dimension {d}"),
                    bytes,
                });
            }
            // Shift the piece to its place: pad it so that every target's window lies inside,
            // then cut the window.
            let (qmin, qmax) = (
                place.iter().copied().min().unwrap_or(0),
                place.iter().copied().max().unwrap_or(0),
            );
            let (low, high) = (qmax.max(0), (width - len - qmin).max(0));
            if low > 0 || high > 0 {
                let pads = PaddingDim {
                    low,
                    high,
                    interior: 0,
                };
                piece = b.pad_dim(piece, zero, d, pads)?;
            }
            let starts: Vec<i64> = place.iter().map(|&q| low - q).collect();
            let placed = self.cut(b, piece, d, &per_device(&starts), width)?;
            acc = Some(match acc {
                // Positions no move fills are never read: the first round needs no mask.
                None => placed,
                Some(prev) => {
                    let lo: Vec<i64> = index.iter().map(|&k| keep[k].0).collect();
                    let hi: Vec<i64> = index.iter().map(|&k| keep[k].1).collect();
                    let mine = self.in_range(b, placed, d, &[0], &lo, &hi)?;
                    b.select(mine, placed, prev)?
                }
            });
        }
        acc.ok_or_else(|| fail("a direct fetch without moves"))
    }

    /// [`Engine::windowed_piece`] for a dimension read in base-dilated coordinates (element
    /// `e` at position `e*bd`, the holes between and everything outside the array holding
    /// `fill`): each device fetches the elements its window `[lo[k], lo[k] + width)` covers
    /// (halo exchange of real elements only), dilates them locally and slices its window out.
    /// `x`'s dimension `d` holds `shard` elements per tile of an array of `size` (or all of it,
    /// `whole`); the output has `out_size` positions, `out_shard` per tile.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dilated_piece(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        t: &Tiling,
        d: usize,
        elements: (i64, i64, bool),
        bd: i64,
        lo: &[i64],
        width: i64,
        out: (i64, i64),
        fill: InstrId,
    ) -> Result<InstrId> {
        let (size, shard, whole) = elements;
        let (out_shard, out_size) = out;
        let tiles = t.tiles[d];
        // The first element at or after each window's start, and the holes before it.
        let first: Vec<i64> = lo.iter().map(|&l| -((-l).div_euclid(bd))).collect();
        let lead: Vec<i64> = lo.iter().zip(&first).map(|(&l, &a)| a * bd - l).collect();
        let count = lead
            .iter()
            .map(|&r| ceil_div((width - r).max(1), bd))
            .max()
            .unwrap_or(1);
        let w = Windowed {
            whole,
            size,
            tiles,
            shard,
            shift: 0,
            lo: first,
            out_shard: 1,
            out_size: ceil_div(out_size, out_shard).min(tiles),
            stride: 1,
            span: count,
        };
        let piece = self.windowed_piece(b, x, t, d, &w, Some(fill))?;
        let pads = PaddingDim {
            low: bd - 1,
            high: bd - 1,
            interior: bd - 1,
        };
        let dilated = b.pad_dim(piece, fill, d, pads)?;
        let index: Vec<i64> = t.tile_indices().iter().map(|ix| ix[d]).collect();
        let offsets: Vec<i64> = index.iter().map(|&k| bd - 1 - lead[k as usize]).collect();
        self.cut(b, dilated, d, &offsets, width)
    }

    /// A pred array of `x`'s local shape: is `base[device] + position along d` in
    /// `[lo[device], hi[device])`? (A one-element `base`, `lo` or `hi` is every device's;
    /// a base of zeros adds nothing.)
    fn in_range(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        d: usize,
        base: &[i64],
        lo: &[i64],
        hi: &[i64],
    ) -> Result<InstrId> {
        let dims: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
        let mut g = b.iota(Shape::array(ElementType::S32, &dims), d as i64)?;
        if base.iter().any(|&v| v != 0) {
            let off = self.table(b, base)?;
            let offs = broadcast_scalar(b, off, &dims)?;
            g = b.binary(Opcode::Add, g, offs)?;
        }
        let lo_s = self.table(b, lo)?;
        let hi_s = self.table(b, hi)?;
        let lo_b = broadcast_scalar(b, lo_s, &dims)?;
        let hi_b = broadcast_scalar(b, hi_s, &dims)?;
        let ge = b.compare(g, lo_b, ComparisonDirection::Ge)?;
        let lt = b.compare(g, hi_b, ComparisonDirection::Lt)?;
        Ok(b.binary(Opcode::And, ge, lt)?)
    }

    /// The operand `k` of `id` as a replicated scalar.
    pub(super) fn scalar_operand(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        k: usize,
    ) -> Result<InstrId> {
        let n = self.n;
        self.operand(b, id, k, &Tree::Leaf(Spec::replicated(0, n)))
    }

    /// `out` takes `name` once the original is gone, when it is a new instruction of its own
    /// (not a parameter or another value passed through).
    pub(super) fn name_result(&mut self, b: &Builder, out: InstrId, name: &str) {
        let reused =
            b.module().instr(out).opcode() == Opcode::Parameter || self.is_local_of_a_value(out);
        if !reused {
            self.name_later(b.module(), out, name.to_string());
        }
    }

    /// Operand `k` of `id`, a windowed op whose output is tiled by `t`: the dimensions of
    /// `windowed` that the operand already holds whole (not split) stay whole, as every device
    /// can take its windows from them without moving anything; the rest takes `t`'s tiling.
    /// Returns the local operand and which dimensions it holds whole.
    fn windowed_operand(
        &mut self,
        b: &mut Builder,
        op: InstrId,
        t: &Tiling,
        windowed: &[usize],
    ) -> Result<(InstrId, Vec<bool>)> {
        let v = self.value(b.module(), op)?;
        let whole: Vec<usize> = match &v.tree {
            Tree::Leaf(Spec::Tiled(s)) if s.rank() == t.rank() => windowed
                .iter()
                .copied()
                .filter(|&d| t.tiles[d] > 1 && s.tiles[d] == 1)
                .collect(),
            _ => Vec::new(),
        };
        let target = if whole.is_empty() {
            t.clone()
        } else {
            t.replicate_dims(&whole)
        };
        let base = self.global(b.module(), op);
        let x = self.reshard(b, &v, &base, &Tree::Leaf(Spec::Tiled(target)))?;
        let mut flags = vec![false; t.rank()];
        for d in whole {
            flags[d] = true;
        }
        Ok((x, flags))
    }

    // ----- handlers -----

    /// Reduce-window: the operand takes the output's tiling; along each split dimension with
    /// a real window, each device fetches the windows of its outputs (padding and base
    /// dilation's holes hold the init value) and reduces them locally without padding.
    pub(super) fn reduce_window(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let Some(win) = i.attrs.window.clone() else {
            return self.default(b, id, own);
        };
        if i.operands().len() != 2 || !i.shape.is_array() || win.dims.len() != t.rank() {
            return self.default(b, id, own);
        }
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let out_dims = i.shape.dims().to_vec();
        if in_dims.contains(&0) || out_dims.contains(&0) {
            return self.default(b, id, own);
        }
        let split: Vec<usize> = (0..t.rank())
            .filter(|&d| t.tiles[d] > 1 && !trivial(&win.dims[d]))
            .collect();
        if !split.is_empty() && !init_is_identity(b.module(), &i) {
            return self.default(b, id, own);
        }
        let (mut x, whole) = self.windowed_operand(b, i.operands()[0], &t, &split)?;
        let init = self.scalar_operand(b, id, 1)?;
        let mut local_win = (*win).clone();
        for &d in &split {
            let wd = win.dims[d];
            let tiles = t.tiles[d];
            let size = in_dims[d];
            let shard = if whole[d] {
                size
            } else {
                ceil_div(size, tiles)
            };
            let out_shard = ceil_div(out_dims[d], tiles);
            let span = (wd.size - 1) * wd.window_dilation + 1;
            let lo = linear(tiles, -wd.padding_low, out_shard * wd.stride);
            x = if wd.base_dilation > 1 {
                let width = (out_shard - 1) * wd.stride + span;
                let (elements, out) = ((size, shard, whole[d]), (out_shard, out_dims[d]));
                let bd = wd.base_dilation;
                self.dilated_piece(b, x, &t, d, elements, bd, &lo, width, out, init)?
            } else {
                let w = Windowed {
                    whole: whole[d],
                    size,
                    tiles,
                    shard,
                    shift: 0,
                    lo,
                    out_shard,
                    out_size: out_dims[d],
                    stride: wd.stride,
                    span,
                };
                self.windowed_piece(b, x, &t, d, &w, Some(init))?
            };
            local_win.dims[d] = WindowDim {
                padding_low: 0,
                padding_high: 0,
                base_dilation: 1,
                ..wd
            };
        }
        let mut c = i.clone();
        c.attrs.window = Some(Box::new(local_win));
        let out = self.clone_with(b, &c, &[x, init], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// Select-and-scatter: the output (the operand's shape) keeps its tiling. Along each split
    /// dimension with a real window, each device takes the windows that touch its output piece:
    /// their source values (zero for windows outside the source) and the operand they read
    /// (positions outside the array hold a value the select never prefers), runs them locally
    /// without padding, and keeps its own piece of the result (init elsewhere). Windows that
    /// straddle two pieces run on both devices; each keeps only what lands in its own piece.
    /// A window wholly in the padding selects a filled position outside the array, so its
    /// source lands nowhere, as in XLA. Window dilation widens the windows' span. Only for a
    /// compare select and an add scatter, without base dilation; otherwise the default. Ties
    /// (equal operand values in a window) are resolved as XLA:CPU resolves them without
    /// padding, which is not always how it resolves them with padding: see
    /// docs/spmd-windowed.md.
    pub(super) fn select_and_scatter(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        own: Tree,
    ) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let Some(win) = i.attrs.window.clone() else {
            return self.default(b, id, own);
        };
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let src_dims = self.global(b.module(), i.operands()[1]).dims().to_vec();
        let rank = t.rank();
        if i.operands().len() != 3
            || !i.shape.is_array()
            || win.dims.len() != rank
            || in_dims.len() != rank
            || src_dims.len() != rank
            || in_dims.contains(&0)
            || src_dims.contains(&0)
        {
            return self.default(b, id, own);
        }
        let split: Vec<usize> = (0..rank)
            .filter(|&d| t.tiles[d] > 1 && !trivial(&win.dims[d]))
            .collect();
        let loser = select_loser(b.module(), &i);
        // Window dilation only changes how far a window reaches (its span); base dilation
        // (holes in the operand that a select must skip) takes the default.
        let base_dilated = split.iter().any(|&d| win.dims[d].base_dilation != 1);
        // Equal values in a window: XLA:CPU picks among them in an order that depends on the
        // op's padding (measured, docs/spmd-windowed.md), and the local op has none along the
        // split dimensions. Integers tie often, so a padded integer select-and-scatter stays
        // whole; floats tie in part rarely (all-equal windows agree in any order).
        let padded = win
            .dims
            .iter()
            .any(|wd| wd.padding_low != 0 || wd.padding_high != 0);
        let tie_prone = padded && !i.shape.element_type().is_float();
        if !split.is_empty() && (loser.is_none() || base_dilated || tie_prone) {
            return self.default(b, id, own);
        }
        let ty = i.shape.element_type();
        let loser_value = match loser {
            Some(e) => match number_bytes(ty, e) {
                Some(bytes) => {
                    let lit = Literal::from_bytes(Shape::scalar(ty), bytes).expect("one element");
                    Some(b.constant(lit)?)
                }
                None => return self.default(b, id, own),
            },
            None => None,
        };
        let mut x = self.operand(b, id, 0, &own)?;
        let mut src = self.operand(b, id, 1, &own)?;
        let init = self.operand(b, id, 2, &Tree::Leaf(Spec::replicated(0, n)))?;
        let zero = b.scalar(ty, 0.0)?;
        let mut local_win = (*win).clone();
        // Per split dimension: where each tile's operand piece starts, and its width.
        let mut cut: Vec<(usize, Vec<i64>, i64, i64, i64)> = Vec::new();
        for &d in &split {
            let wd = win.dims[d];
            let tiles = t.tiles[d];
            let (size, shard) = (in_dims[d], ceil_div(in_dims[d], tiles));
            let (w, st, pl) = (
                (wd.size - 1) * wd.window_dilation + 1,
                wd.stride,
                wd.padding_low,
            );
            // Windows j touching [k*shard, (k+1)*shard): j*st - pl < (k+1)*shard and
            // j*st - pl + w > k*shard (w: the window's span).
            let first: Vec<i64> = (0..tiles)
                .map(|k| (k * shard + pl - w).div_euclid(st) + 1)
                .collect();
            let last: Vec<i64> = (0..tiles)
                .map(|k| -((-((k + 1) * shard + pl)).div_euclid(st)) - 1)
                .collect();
            let count = first
                .iter()
                .zip(&last)
                .map(|(f, l)| l - f + 1)
                .max()
                .unwrap_or(1)
                .max(1);
            let real = ceil_div(size, shard).min(tiles);
            let ws = Windowed {
                whole: false,
                size: src_dims[d],
                tiles,
                shard: ceil_div(src_dims[d], tiles),
                shift: 0,
                lo: first.clone(),
                out_shard: 1,
                out_size: real,
                stride: 1,
                span: count,
            };
            src = self.windowed_piece(b, src, &t, d, &ws, Some(zero))?;
            let lo: Vec<i64> = first.iter().map(|&j| j * st - pl).collect();
            let width = (count - 1) * st + w;
            let wx = Windowed {
                whole: false,
                size,
                tiles,
                shard,
                shift: 0,
                lo: lo.clone(),
                out_shard: 1,
                out_size: real,
                stride: 1,
                span: width,
            };
            x = self.windowed_piece(b, x, &t, d, &wx, loser_value)?;
            local_win.dims[d] = WindowDim {
                padding_low: 0,
                padding_high: 0,
                ..wd
            };
            // Padding (init) around the local result so that every tile's piece
            // [k*shard, (k+1)*shard) lies inside it.
            let low = (0..tiles)
                .map(|k| lo[k as usize] - k * shard)
                .max()
                .unwrap_or(0)
                .max(0);
            let high = (0..tiles)
                .map(|k| (k + 1) * shard - lo[k as usize] - width)
                .max()
                .unwrap_or(0)
                .max(0);
            cut.push((d, lo, shard, low, high));
        }
        let mut c = i.clone();
        c.attrs.window = Some(Box::new(local_win));
        let shape = b.module().instr(x).shape.clone();
        let mut out = self.clone_with(b, &c, &[x, src, init], shape)?;
        if !cut.is_empty() {
            let mut pads = vec![PaddingDim::default(); rank];
            for (d, _, _, low, high) in &cut {
                pads[*d] = PaddingDim {
                    low: *low,
                    high: *high,
                    interior: 0,
                };
            }
            let padded = b.pad(out, init, &pads)?;
            let index = t.tile_indices();
            let mut starts = Vec::with_capacity(rank);
            let mut sizes: Vec<i64> = b.module().instr(padded).shape.dims().to_vec();
            for d in 0..rank {
                match cut.iter().find(|c| c.0 == d) {
                    Some((_, lo, shard, low, _)) => {
                        let offs: Vec<i64> = index
                            .iter()
                            .map(|ix| ix[d] * shard - lo[ix[d] as usize] + low)
                            .collect();
                        starts.push(self.table(b, &offs)?);
                        sizes[d] = *shard;
                    }
                    None => starts.push(self.table(b, &[0])?),
                }
            }
            out = b.dynamic_slice(padded, &starts, &sizes)?;
        }
        self.set(id, out, own);
        Ok(())
    }

    /// Pad: along each split dimension with padding, each device takes its output piece from
    /// the (locally interior-padded) operand, the padding value outside it; the other
    /// dimensions are padded locally.
    pub(super) fn pad(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let Some(padding) = i.attrs.padding.clone() else {
            return self.default(b, id, own);
        };
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let out_dims = i.shape.dims().to_vec();
        if padding.len() != t.rank() || in_dims.contains(&0) || out_dims.contains(&0) {
            return self.default(b, id, own);
        }
        let out = self.padded(b, i.operands()[0], i.operands()[1], &padding, &out_dims, &t)?;
        self.name_result(b, out, i.name());
        self.set(id, out, own);
        Ok(())
    }

    /// The local piece of `pad(x, v)` with `padding` (output `out_dims`, tiled by `t`).
    fn padded(
        &mut self,
        b: &mut Builder,
        x_op: InstrId,
        v_op: InstrId,
        padding: &[PaddingDim],
        out_dims: &[i64],
        t: &Tiling,
    ) -> Result<InstrId> {
        let n = self.n;
        let in_dims = self.global(b.module(), x_op).dims().to_vec();
        let split: Vec<usize> = (0..t.rank())
            .filter(|&d| t.tiles[d] > 1 && padding[d] != PaddingDim::default())
            .collect();
        let (mut x, whole) = self.windowed_operand(b, x_op, t, &split)?;
        let vv = self.value(b.module(), v_op)?;
        let v = self.reshard(
            b,
            &vv,
            &Shape::scalar(b.module().instr(x).shape.element_type()),
            &Tree::Leaf(Spec::replicated(0, n)),
        )?;
        let mut local = padding.to_vec();
        for &d in &split {
            let p = padding[d];
            local[d] = PaddingDim::default();
            let tiles = t.tiles[d];
            let size = in_dims[d];
            let shard = if whole[d] {
                size
            } else {
                ceil_div(size, tiles)
            };
            let out_shard = ceil_div(out_dims[d], tiles);
            let lo = linear(tiles, -p.low, out_shard);
            x = if p.interior > 0 {
                let (elements, out) = ((size, shard, whole[d]), (out_shard, out_dims[d]));
                let bd = p.interior + 1;
                self.dilated_piece(b, x, t, d, elements, bd, &lo, out_shard, out, v)?
            } else {
                let w = Windowed {
                    whole: whole[d],
                    size,
                    tiles,
                    shard,
                    shift: 0,
                    lo,
                    out_shard,
                    out_size: out_dims[d],
                    stride: 1,
                    span: 1,
                };
                self.windowed_piece(b, x, t, d, &w, Some(v))?
            };
        }
        if local.iter().any(|p| *p != PaddingDim::default()) {
            x = b.pad(x, v, &local)?;
        }
        Ok(x)
    }

    /// XLA's pad-then-slice shift: a unit-stride slice of a pad (through copies that keep the
    /// slice's tiling) is one pad of the pad's operand with the combined padding, so the data
    /// moves once. `None` when `slice` does not have that form.
    fn slice_of_pad(
        &self,
        m: &Module,
        slice: &Instruction,
        own: &Tree,
    ) -> Option<(InstrId, InstrId, Vec<PaddingDim>)> {
        let sl = slice.attrs.slice.as_ref()?;
        if sl.iter().any(|s| s.stride != 1) {
            return None;
        }
        let mut cur = slice.operands()[0];
        loop {
            let c = m.instr(cur);
            if tree_of(m, cur, self.n).ok().as_ref() != Some(own) {
                return None;
            }
            match c.opcode() {
                Opcode::Copy => cur = c.operands()[0],
                Opcode::Pad => break,
                _ => return None,
            }
        }
        let pad = m.instr(cur);
        let padding = pad.attrs.padding.as_ref()?;
        let padded = pad.shape.dims();
        if padding.len() != sl.len()
            || padded.len() != sl.len()
            || padding.iter().any(|p| p.interior != 0)
        {
            return None;
        }
        let combined = padding
            .iter()
            .zip(sl)
            .zip(padded)
            .map(|((p, s), &full)| PaddingDim {
                low: p.low - s.start,
                high: p.high - (full - s.limit),
                interior: 0,
            })
            .collect();
        Some((pad.operands()[0], pad.operands()[1], combined))
    }

    /// A slice that is not local (see `Engine::slice`): along each split dimension each device
    /// fetches the input its outputs read, then slices locally.
    pub(super) fn windowed_slice(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let Some(sl) = i.attrs.slice.clone() else {
            return self.default(b, id, own);
        };
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let out_dims = i.shape.dims().to_vec();
        if sl.len() != t.rank() || in_dims.contains(&0) || out_dims.contains(&0) {
            return self.default(b, id, own);
        }
        if let Some((x_op, v_op, padding)) = self.slice_of_pad(b.module(), &i, &own) {
            if !self.global(b.module(), x_op).dims().contains(&0) {
                let out = self.padded(b, x_op, v_op, &padding, &out_dims, &t)?;
                self.name_result(b, out, i.name());
                self.set(id, out, own);
                return Ok(());
            }
        }
        let rank = t.rank();
        let split: Vec<usize> = (0..rank).filter(|&d| t.tiles[d] > 1).collect();
        let (mut x, whole) = self.windowed_operand(b, i.operands()[0], &t, &split)?;
        let (mut starts, mut limits, mut strides) = (vec![0; rank], vec![0; rank], vec![1; rank]);
        for d in 0..rank {
            strides[d] = sl[d].stride;
            if t.tiles[d] == 1 {
                starts[d] = sl[d].start;
                limits[d] = sl[d].limit;
                continue;
            }
            let tiles = t.tiles[d];
            let out_shard = ceil_div(out_dims[d], tiles);
            let w = Windowed {
                whole: whole[d],
                size: in_dims[d],
                tiles,
                shard: if whole[d] {
                    in_dims[d]
                } else {
                    ceil_div(in_dims[d], tiles)
                },
                shift: 0,
                lo: linear(tiles, sl[d].start, out_shard * sl[d].stride),
                out_shard,
                out_size: out_dims[d],
                stride: sl[d].stride,
                span: 1,
            };
            x = self.windowed_piece(b, x, &t, d, &w, None)?;
            limits[d] = w.width();
        }
        let dims: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
        let out = if (0..rank).all(|d| starts[d] == 0 && strides[d] == 1 && limits[d] == dims[d]) {
            x
        } else {
            let c = b.slice(x, &starts, &limits, &strides)?;
            self.name_later(b.module(), c, i.name().to_string());
            c
        };
        self.set(id, out, own);
        Ok(())
    }

    /// Concatenate: along an unsplit dimension, local; along a split one, each operand's part
    /// of the device's output piece is fetched like a window and the parts are selected by
    /// output position.
    /// `concatenate(slice(x, [a:n]), slice(x, [0:a]))` along an evenly split dimension of
    /// `x`'s size is `x` rotated by `a` (XLA's `MergedSliceThenConcatRotate*`): each device's
    /// output piece is the tail of one piece of `x` followed by the head of the next, so each
    /// part is one collective-permute (none when it is the device's own piece). `false`
    /// (nothing emitted) when the pattern does not hold.
    fn rotate(&mut self, b: &mut Builder, id: InstrId, t: &Tiling, dim: usize) -> Result<bool> {
        let m = b.module();
        let i = m.instr(id).clone();
        let [s0, s1] = i.operands() else {
            return Ok(false);
        };
        let (i0, i1) = (m.instr(*s0), m.instr(*s1));
        if i0.opcode() != Opcode::Slice || i1.opcode() != Opcode::Slice {
            return Ok(false);
        }
        let (Some(&x), Some(&x1)) = (i0.operands().first(), i1.operands().first()) else {
            return Ok(false);
        };
        let (Some(d0), Some(d1)) = (i0.attrs.slice.as_deref(), i1.attrs.slice.as_deref()) else {
            return Ok(false);
        };
        let xs = self.global(m, x);
        let n = xs.dims().get(dim).copied().unwrap_or(0);
        let tiles = t.tiles[dim];
        let whole_except_dim = |ds: &[tessera_hlo::attrs::SliceDim]| {
            ds.iter().enumerate().all(|(e, sd)| {
                sd.stride == 1 && (e == dim || (sd.start == 0 && sd.limit == xs.dims()[e]))
            })
        };
        let a = d1[dim].limit;
        let fits = x == x1
            && xs.dims() == i.shape.dims()
            && whole_except_dim(d0)
            && whole_except_dim(d1)
            && d0[dim].start == a
            && d0[dim].limit == n
            && d1[dim].start == 0
            && a > 0
            && a < n
            && n % tiles == 0;
        if !fits {
            return Ok(false);
        }
        let v = self.value(b.module(), x)?;
        let own = Tree::Leaf(Spec::Tiled(t.clone()));
        let xl = self.reshard(b, &v, &xs, &own)?;
        let shard = n / tiles;
        let (q, r) = (a / shard, a % shard);
        let mut local = t.shard_dims(xs.dims());
        let zeros = vec![0i64; local.len()];
        let ones = vec![1i64; local.len()];
        let groups = t.groups(&[dim], false);
        let mut parts = Vec::with_capacity(2);
        // (first position in the source piece, length, how many pieces further the source is)
        for (from, len, ahead) in [(r, shard - r, q), (0, r, q + 1)] {
            if len == 0 {
                continue;
            }
            let mut start = zeros.clone();
            start[dim] = from;
            local[dim] = from + len;
            let part = b.slice(xl, &start, &local, &ones)?;
            let ahead = ahead % tiles;
            let part = if ahead == 0 {
                part
            } else {
                let tl = tiles as usize;
                let pairs: Vec<(i64, i64)> = groups
                    .iter()
                    .flat_map(|g| (0..tl).map(move |j| (g[(j + ahead as usize) % tl], g[j])))
                    .collect();
                let moved = self.collective_permute(b, part, &pairs)?;
                let bytes = b.module().instr(moved).shape.byte_size(8);
                self.report.collectives.push(CollectiveNote {
                    original: i.name().to_string(),
                    collective: "collective-permute",
                    reason: format!("rotation by {a} along dimension {dim}"),
                    bytes,
                });
                moved
            };
            parts.push(part);
        }
        let out = if parts.len() == 1 {
            parts[0]
        } else {
            b.concatenate(&parts, dim as i64)?
        };
        self.set(id, out, own);
        Ok(true)
    }

    pub(super) fn concatenate(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let Some(&[dim]) = i.attrs.dimensions.as_deref() else {
            return self.default(b, id, own);
        };
        let dim = dim as usize;
        if dim >= t.rank() {
            return self.default(b, id, own);
        }
        if self.rotate(b, id, &t, dim)? {
            return Ok(());
        }
        let mut ops = Vec::with_capacity(i.operands().len());
        let mut wholes = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            let (x, whole) = self.windowed_operand(b, i.operands()[k], &t, &[dim])?;
            ops.push(x);
            wholes.push(whole[dim]);
        }
        if t.tiles[dim] == 1 {
            let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
            self.set(id, out, own);
            return Ok(());
        }
        let tiles = t.tiles[dim];
        let out_size = i.shape.dims()[dim];
        let out_shard = ceil_div(out_size, tiles);
        let index: Vec<i64> = t.tile_indices().iter().map(|ix| ix[dim]).collect();
        let base: Vec<i64> = index.iter().map(|&k| k * out_shard).collect();
        let mut acc: Option<InstrId> = None;
        let mut offset = 0;
        for (k, &x) in ops.iter().enumerate() {
            let size = self.global(b.module(), i.operands()[k]).dims()[dim];
            if size == 0 {
                continue;
            }
            let w = Windowed {
                whole: wholes[k],
                size,
                tiles,
                shard: if wholes[k] {
                    size
                } else {
                    ceil_div(size, tiles)
                },
                shift: 0,
                lo: linear(tiles, -offset, out_shard),
                out_shard,
                out_size,
                stride: 1,
                span: 1,
            };
            let piece = self.windowed_piece(b, x, &t, dim, &w, None)?;
            acc = Some(match acc {
                None => piece,
                Some(prev) => {
                    let mine =
                        self.in_range(b, piece, dim, &base, &[offset], &[i64::from(i32::MAX)])?;
                    b.select(mine, piece, prev)?
                }
            });
            offset += size;
        }
        let Some(out) = acc else {
            return self.default(b, id, own);
        };
        self.name_result(b, out, i.name());
        self.set(id, out, own);
        Ok(())
    }

    /// Reverse: reversed locally; along a split dimension the tiles then swap ends
    /// (collective-permute) and, when the dimension is uneven, shift by its padding (a halo).
    pub(super) fn reverse(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let t = t.clone();
        let rdims: Vec<usize> = i
            .attrs
            .dimensions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|&d| d as usize)
            .collect();
        let dims = i.shape.dims().to_vec();
        if rdims.iter().any(|&d| d >= t.rank()) || dims.contains(&0) {
            return self.default(b, id, own);
        }
        // Evenly split reversed dimensions: the operand is taken with those tiles in mirrored
        // order, so that each device's local reverse is its own piece of the result (no
        // exchange when the operand already is in that order, e.g. a reversed device order).
        let split: Vec<usize> = rdims.iter().copied().filter(|&d| t.tiles[d] > 1).collect();
        if !split.is_empty() && split.iter().all(|&d| dims[d] % t.tiles[d] == 0) {
            let idx: Vec<Vec<i64>> = t
                .tile_indices()
                .into_iter()
                .map(|mut ix| {
                    for &d in &split {
                        ix[d] = t.tiles[d] - 1 - ix[d];
                    }
                    ix
                })
                .collect();
            let mirrored = Tiling::from_tile_indices(t.tiles.clone(), t.repl, &idx);
            let x = self.operand(b, id, 0, &Tree::Leaf(Spec::Tiled(mirrored)))?;
            let r = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
            self.set(id, r, own);
            return Ok(());
        }
        if let [d] = split[..] {
            if let Some(r) = self.reverse_by_window(b, &i, &t, d)? {
                self.set(id, r, own);
                return Ok(());
            }
        }
        let x = self.operand(b, id, 0, &own)?;
        let mut r = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        for &d in &rdims {
            let tiles = t.tiles[d];
            if tiles == 1 {
                continue;
            }
            let groups = t.groups(&[d], false);
            let mut pairs = Vec::new();
            for g in groups.iter() {
                for j in 0..tiles as usize {
                    pairs.push((g[j], g[tiles as usize - 1 - j]));
                }
            }
            r = self.collective_permute(b, r, &pairs)?;
            let bytes = b.module().instr(r).shape.byte_size(8);
            self.report.collectives.push(CollectiveNote {
                original: i.name().to_string(),
                collective: "collective-permute",
                reason: format!("reversed tiles swap ends along dimension {d}"),
                bytes,
            });
            let shard = ceil_div(dims[d], tiles);
            let shift = dims[d] - tiles * shard;
            if shift != 0 {
                let w = Windowed {
                    whole: false,
                    size: dims[d],
                    tiles,
                    shard,
                    shift,
                    lo: linear(tiles, 0, shard),
                    out_shard: shard,
                    out_size: dims[d],
                    stride: 1,
                    span: 1,
                };
                r = self.windowed_piece(b, r, &t, d, &w, None)?;
            }
        }
        self.set(id, r, own);
        Ok(())
    }

    /// A reverse along the unevenly split dimension `d` whose operand is tiled like the
    /// output `t` but for the order of the tiles along `d` (XLA's
    /// `TiledReverseHaloExchange`): each device fetches, from the operand as it lies, the
    /// window its output piece mirrors (`[n - (k+1)*shard, n - k*shard)` for output tile
    /// `k`) and reverses it locally, instead of resharding the operand first. `None` when
    /// the operand is not so.
    fn reverse_by_window(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        t: &Tiling,
        d: usize,
    ) -> Result<Option<InstrId>> {
        let op = i.operands()[0];
        let v = self.value(b.module(), op)?;
        let Tree::Leaf(Spec::Tiled(s)) = &v.tree else {
            return Ok(None);
        };
        if s == t || s.tiles != t.tiles || s.repl != t.repl || self.view.is_some() {
            return Ok(None);
        }
        // Output tile along d of the device holding operand tile j along d.
        let tiles = t.tiles[d];
        let mut mirror = vec![-1i64; tiles as usize];
        for (si, ti) in s.tile_indices().iter().zip(t.tile_indices()) {
            let same_elsewhere = (0..si.len()).all(|e| e == d || si[e] == ti[e]);
            let j = si[d] as usize;
            if !same_elsewhere || (mirror[j] != -1 && mirror[j] != ti[d]) {
                return Ok(None);
            }
            mirror[j] = ti[d];
        }
        let n = i.shape.dims()[d];
        let shard = ceil_div(n, tiles);
        let w = Windowed {
            whole: false,
            size: n,
            tiles,
            shard,
            shift: 0,
            lo: mirror.iter().map(|&k| n - (k + 1) * shard).collect(),
            out_shard: shard,
            out_size: tiles * shard,
            stride: 1,
            span: 1,
        };
        let s = s.clone();
        let piece = self.windowed_piece(b, v.local, &s, d, &w, None)?;
        let own = Tree::Leaf(Spec::Tiled(t.clone()));
        Ok(Some(self.clone_with(
            b,
            i,
            &[piece],
            local_shape(&i.shape, &own),
        )?))
    }
}

/// `x[start:end]` along dimension `d`.
fn slice_dim(b: &mut Builder, x: InstrId, d: usize, start: i64, end: i64) -> Result<InstrId> {
    let dims: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
    if start == 0 && end == dims[d] {
        return Ok(x);
    }
    let mut starts = vec![0; dims.len()];
    let mut limits = dims.clone();
    starts[d] = start;
    limits[d] = end;
    Ok(b.slice(x, &starts, &limits, &vec![1; dims.len()])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates a plan on per-tile arrays of global indices (-1: garbage) exactly as the
    /// emission does, and checks every real output's window.
    fn check(w: &Windowed) {
        let p = w.plan();
        let t = w.tiles;
        let tiles: Vec<Vec<i64>> = (0..t)
            .map(|k| {
                (0..w.shard)
                    .map(|j| {
                        let g = w.start(k) + j;
                        if (0..w.size).contains(&g) {
                            g
                        } else {
                            -1
                        }
                    })
                    .collect()
            })
            .collect();
        for k in 0..t {
            let mut ext: Vec<i64> = Vec::new();
            if p.gather {
                for tile in &tiles {
                    ext.extend(tile);
                }
            } else {
                for part in &p.parts {
                    match *part {
                        Part::Own => ext.extend(&tiles[k as usize]),
                        Part::From {
                            hops,
                            start,
                            end,
                            ref to,
                        } => {
                            let src = k - hops;
                            if to.contains(&k) {
                                ext.extend(&tiles[src as usize][start as usize..end as usize]);
                            } else {
                                ext.extend(std::iter::repeat_n(-1, (end - start) as usize));
                            }
                        }
                    }
                }
            }
            let mut padded = vec![-1; p.pad_low as usize];
            padded.extend(ext);
            padded.extend(std::iter::repeat_n(-1, p.pad_high as usize));
            let off = p.offsets[k as usize];
            assert!(
                off >= 0 && off + p.width <= padded.len() as i64,
                "{w:?} {p:?} k={k}"
            );
            let piece = &padded[off as usize..(off + p.width) as usize];
            check_window(w, k, piece, &p);
        }
        if let Some(direct) = w.direct(&p) {
            check_direct(w, &p, &direct, &tiles);
        }
    }

    /// Tile `k`'s window `piece` (global indices) holds what every real output reads.
    fn check_window(w: &Windowed, k: i64, piece: &[i64], plan: &dyn std::fmt::Debug) {
        let outs = (w.out_size - k * w.out_shard).clamp(0, w.out_shard);
        for o in 0..outs {
            for s in 0..w.span {
                let pos = o * w.stride + s;
                let g = w.lo(k) + pos;
                if (0..w.size).contains(&g) {
                    assert_eq!(piece[pos as usize], g, "{w:?} {plan:?} tile {k} pos {pos}");
                }
            }
        }
    }

    /// Simulates a direct fetch as `direct_piece` emits it and checks every real output's
    /// window, that each round sends and receives at most once per tile, and that it moves
    /// less than the halo plan.
    fn check_direct(w: &Windowed, p: &HaloPlan, direct: &Direct, tiles: &[Vec<i64>]) {
        assert!(direct.moved < p.moved, "{w:?} {direct:?}");
        let mut windows: Vec<Vec<i64>> = vec![vec![-2; p.width as usize]; w.tiles as usize];
        for (r, round) in direct.rounds.iter().enumerate() {
            assert!(round.len <= w.shard && round.len > 0, "{w:?} {direct:?}");
            let mut srcs: Vec<i64> = round.moves.iter().map(|m| m.src).collect();
            let mut dsts: Vec<i64> = round.moves.iter().map(|m| m.dst).collect();
            srcs.sort();
            srcs.dedup();
            dsts.sort();
            dsts.dedup();
            assert_eq!(srcs.len(), round.moves.len(), "{direct:?}");
            assert_eq!(dsts.len(), round.moves.len(), "{direct:?}");
            for m in &round.moves {
                assert_eq!(round.local, m.src == m.dst, "{direct:?}");
                let at = m.src_off.min(w.shard - round.len);
                let sent = &tiles[m.src as usize][at as usize..(at + round.len) as usize];
                let q = m.dst_pos - (m.src_off - at);
                let win = &mut windows[m.dst as usize];
                for (i, &v) in sent.iter().enumerate() {
                    let pos = q + i as i64;
                    let kept = (m.dst_pos..m.dst_pos + m.count).contains(&pos);
                    if (r == 0 || kept) && (0..p.width).contains(&pos) {
                        win[pos as usize] = v;
                    }
                }
            }
        }
        for k in 0..w.tiles {
            check_window(w, k, &windows[k as usize], direct);
        }
    }

    #[test]
    fn halo_plans_fetch_every_window() {
        let mut g = crate::partition::plan::tests::Gen::new(15);
        let mut halo = 0;
        let mut gathers = 0;
        let mut direct = 0;
        for _ in 0..20_000 {
            let tiles = 1 + g.next(8) as i64;
            let size = 1 + g.next(40) as i64;
            let whole = g.next(6) == 0;
            let shard = if whole { size } else { ceil_div(size, tiles) };
            let win = 1 + g.next(5) as i64;
            let dil = 1 + g.next(3) as i64;
            let stride = 1 + g.next(4) as i64;
            let low = g.next(9) as i64 - 4;
            let high = g.next(9) as i64 - 4;
            let span = (win - 1) * dil + 1;
            let padded = size + low + high;
            if padded < span {
                continue;
            }
            let out_size = (padded - span) / stride + 1;
            let out_shard = ceil_div(out_size, tiles);
            let shift = if !whole && g.next(4) == 0 {
                size - tiles * shard
            } else {
                0
            };
            let w = Windowed {
                whole,
                size,
                tiles,
                shard,
                shift,
                lo: linear(tiles, -low, out_shard * stride),
                out_shard,
                out_size,
                stride,
                span,
            };
            check(&w);
            let p = w.plan();
            if w.direct(&p).is_some() {
                direct += 1;
            }
            if p.gather {
                gathers += 1;
            } else if p.left + p.right > 0 {
                halo += 1;
            }
        }
        assert!(
            halo > 1000 && gathers > 100 && direct > 100,
            "{halo} halos, {gathers} gathers, {direct} direct fetches"
        );
    }

    #[test]
    fn halo_widths_of_a_simple_window() {
        // 16 elements on 4 tiles, window 3, stride 1, padding 1 on both sides: one element
        // from each neighbour.
        let w = Windowed {
            whole: false,
            size: 16,
            tiles: 4,
            shard: 4,
            shift: 0,
            lo: linear(4, -1, 4),
            out_shard: 4,
            out_size: 16,
            stride: 1,
            span: 3,
        };
        let p = w.plan();
        assert!(!p.gather);
        assert_eq!((p.left, p.right), (1, 1));
        assert_eq!(p.width, 6);
        assert_eq!(p.offsets, vec![0, 0, 0, 0]);
        assert_eq!(
            p.parts,
            vec![
                Part::From {
                    hops: 1,
                    start: 3,
                    end: 4,
                    to: vec![1, 2, 3]
                },
                Part::Own,
                Part::From {
                    hops: -1,
                    start: 0,
                    end: 1,
                    to: vec![0, 1, 2]
                }
            ]
        );
        // A halo wider than a shard takes two hops: window 7 over 2-element shards.
        let w = Windowed {
            whole: false,
            size: 8,
            tiles: 4,
            shard: 2,
            shift: 0,
            lo: linear(4, -3, 2),
            out_shard: 2,
            out_size: 8,
            stride: 1,
            span: 7,
        };
        let p = w.plan();
        assert!(!p.gather, "{p:?}");
        assert_eq!((p.left, p.right, p.parts.len()), (3, 3, 5));
        // The last element of four one-element shards, wanted by the first tile only: one
        // part three hops away, sent to tile 0 alone; the nearer parts move nothing.
        let w = Windowed {
            whole: false,
            size: 4,
            tiles: 4,
            shard: 1,
            shift: 0,
            lo: linear(4, 3, 1),
            out_shard: 1,
            out_size: 1,
            stride: 1,
            span: 1,
        };
        let p = w.plan();
        assert!(!p.gather);
        let sent: Vec<(i64, Vec<i64>)> = p
            .parts
            .iter()
            .filter_map(|q| match q {
                Part::From { hops, to, .. } if !to.is_empty() => Some((*hops, to.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(sent, vec![(-3, vec![0])]);
    }
}
