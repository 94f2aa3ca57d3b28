//! Windowed einsum (the seed's `WindowedDotGeneralLoop`): a dot whose simple strategy would
//! all-gather a large operand, or all-reduce a large partial result, becomes a loop over
//! collective-permutes in which each trip computes one window of the dot while the next
//! piece travels around a ring of devices. See docs/spmd-windowed-einsum.md.
//!
//! Two shapes of loop:
//! - **gather-like** (XLA's "LHS windowed" and "RHS windowed" non-contracting cases): the
//!   result is split like one operand (`mine`); the other operand is split along one of its
//!   non-contracting dimensions `d` over a ring of `R` devices and would have to be
//!   all-gathered along `d`. Instead each device keeps its piece of `mine`, multiplies it with
//!   the piece of the other operand it holds, writes the product into window
//!   `(r + k) mod R` of the result along `d`'s result dimension, and passes the piece on to
//!   its ring neighbour. `R - 1` permutes of one piece each: the bytes of the all-gather,
//!   never the whole gathered operand in memory.
//! - **reduce-scatter-like** (the contracting case): both operands are split along one
//!   contracting dimension over a ring of `R` devices and the result is split over the same
//!   ring along a non-contracting dimension `o`. Each device computes the partial sum of one
//!   result window from its contracting piece, adds it to the accumulator it received and
//!   passes it on; after `R` steps each device holds the complete sum of its own window.
//!   `R - 1` permutes of one result piece: the bytes of a reduce-scatter, half those of the
//!   all-reduce the simple strategy emits.
//!
//! Code motion: an accumulating loop's sliced operand that is a broadcast of something
//! smaller enters the loop as that operand; each window broadcasts only its slice.
//!
//! Variants (pass options): `unroll_windowed_einsum` does two steps per trip;
//! `bidirectional_windowed_einsum` (rings of 3 or more) sends pieces, or partial sums, both
//! ways around the ring: two windows per trip and half the trips. In every trip the permute
//! reads the same piece the dot reads, so the two are independent and may overlap.

use super::dot::candidates::Windowed as Plan;
use super::dot::{DimsMapping, Side};
use super::*;

impl<'c> Engine<'c> {
    /// A while loop of `trips` trips over the state `init` (built in the current computation)
    /// with a trip counter in front; `step` builds one trip's new state from the counter and
    /// the state (in the body). Returns the final state, counter dropped.
    fn windowed_while(
        &mut self,
        b: &mut Builder,
        init: &[InstrId],
        trips: i64,
        step: &mut Trip<'c, '_>,
    ) -> Result<Vec<InstrId>> {
        let outer = b.computation();
        let zero = b.scalar(ElementType::S32, 0.0)?;
        let mut elems = vec![zero];
        elems.extend_from_slice(init);
        let state0 = b.tuple(&elems)?;
        let shape = b.module().instr(state0).shape.clone();
        let name = self.origin_name(b);
        // Condition: counter < trips.
        let cond = self.new_computation(b, &format!("windowed_dot_cond.{name}"))?;
        b.set_computation(cond);
        let p = b.parameter(0, shape.clone(), "windowed_state")?;
        let k = b.get_tuple_element(p, 0)?;
        let lim = b.scalar(ElementType::S32, trips as f64)?;
        let lt = b.compare(k, lim, ComparisonDirection::Lt)?;
        b.module_mut().set_root(cond, lt);
        // Body: one trip.
        let body = self.new_computation(b, &format!("windowed_dot_body.{name}"))?;
        b.set_computation(body);
        let p = b.parameter(0, shape, "windowed_state")?;
        let mut state = Vec::with_capacity(init.len());
        for e in 0..init.len() {
            state.push(b.get_tuple_element(p, e as i64 + 1)?);
        }
        let k = b.get_tuple_element(p, 0)?;
        let next = step(self, b, k, &state)?;
        let one = b.scalar(ElementType::S32, 1.0)?;
        let k1 = b.binary(Opcode::Add, k, one)?;
        let mut out = vec![k1];
        out.extend(next);
        let root = b.tuple(&out)?;
        b.module_mut().set_root(body, root);
        b.set_computation(outer);
        let w = b.op(
            Opcode::While,
            &[state0],
            tessera_hlo::Attrs::default(),
            &[cond, body],
            None,
        )?;
        let mut res = Vec::with_capacity(init.len());
        for e in 0..init.len() {
            res.push(b.get_tuple_element(w, e as i64 + 1)?);
        }
        Ok(res)
    }
}

/// One trip of a windowed loop: from the trip counter and the state, the next state.
type Trip<'e, 'c> =
    dyn FnMut(&mut Engine<'e>, &mut Builder, InstrId, &[InstrId]) -> Result<Vec<InstrId>> + 'c;

/// The ring a windowed loop turns: per device its position, and the permute pairs that move
/// every piece one step (device at position `r` receives from position `r + 1`).
struct Ring {
    pos: Vec<i64>,
    pairs: Vec<(i64, i64)>,
}

impl Ring {
    /// The ring along data dimension `d` of `t` (one ring per group of devices that differ
    /// only in their tile along `d`).
    fn along(t: &Tiling, d: usize) -> Ring {
        let mut pos = vec![0; t.num_devices() as usize];
        for (dev, idx) in t.tile_indices().into_iter().enumerate() {
            pos[dev] = idx[d];
        }
        let mut pairs = Vec::new();
        for g in t.groups(&[d], false).iter() {
            for r in 0..g.len() {
                pairs.push((g[(r + 1) % g.len()], g[r]));
            }
        }
        pairs.sort_unstable_by_key(|&(_, t)| t);
        Ring { pos, pairs }
    }

    /// The pairs that move every piece one step the other way.
    fn reversed(&self) -> Vec<(i64, i64)> {
        let mut p: Vec<(i64, i64)> = self.pairs.iter().map(|&(s, t)| (t, s)).collect();
        p.sort_unstable_by_key(|&(_, t)| t);
        p
    }
}

impl Engine<'_> {
    /// Builds windowed loop `plan` for dot `id` whose result is wanted as `t`; the returned
    /// local value holds `t`.
    pub(super) fn windowed_dot(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        t: &Tiling,
        plan: &Plan,
    ) -> Result<InstrId> {
        match plan {
            Plan::Gather { .. } => self.gather_loop(b, id, t, plan),
            Plan::Accumulate { .. } => self.accumulate_loop(b, id, t, plan),
        }
    }

    /// Whether any windowed loop may be considered for dot-like `id`: the options allow
    /// windowing, it is a dot (no spatial dimensions) and some operand or the result reaches
    /// the threshold whole. When not, no plan can pass it, and the per-device tables the
    /// plans need (which grow with the device count) are not built.
    pub(super) fn windowing_possible(&self, b: &Builder, id: InstrId, dims: &DimsMapping) -> bool {
        if !dims.spatial.is_empty() || self.windowed.max_iterations < 2 {
            return false;
        }
        let m = b.module();
        let i = m.instr(id);
        let threshold = self.windowed.threshold_mib.saturating_mul(1 << 20);
        let whole = |s: &Shape| s.as_array().map_or(0, |a| a.byte_size());
        i.operands()
            .iter()
            .map(|&o| whole(&self.global(m, o)))
            .chain([whole(&i.shape)])
            .any(|x| x >= threshold)
    }

    /// Every windowed loop that fits dot `id` whose result is wanted as `t` and that the
    /// options allow: the dot's cost model weighs them against its other candidates
    /// (accumulating loops first, then gathering ones, in operand and dimension order).
    /// XLA's threshold rule: the operand being windowed (the result, for an accumulating
    /// loop) is at least `threshold_for_windowed_einsum_mib` whole.
    pub(super) fn windowed_plans(
        &self,
        b: &Builder,
        id: InstrId,
        t: &Tiling,
        dims: &DimsMapping,
    ) -> Result<Vec<Plan>> {
        let mut plans = Vec::new();
        if !self.windowing_possible(b, id, dims) {
            return Ok(plans);
        }
        let m = b.module();
        let i = m.instr(id);
        let ops = [i.operands()[0], i.operands()[1]];
        let out_rank = i.shape.rank();
        let threshold = self.windowed.threshold_mib.saturating_mul(1 << 20);
        let max_ring = self.windowed.max_iterations;
        let whole = |s: &Shape| s.as_array().map_or(0, |a| a.byte_size());
        // Reduce-scatter-like: one contracting dimension split over a ring that also splits
        // the result along one non-contracting dimension.
        for side in [Side::Lhs, Side::Rhs] {
            let v = self.value(m, ops[side.index()])?;
            let Tree::Leaf(Spec::Tiled(s)) = &v.tree else {
                continue;
            };
            let split: Vec<&super::dot::DimTriple> = dims
                .contracting
                .iter()
                .filter(|tr| tr.on(side).is_some_and(|d| s.tiles[d] > 1))
                .collect();
            if split.len() != 1 {
                continue;
            }
            let (c_mine, c_other) = (
                split[0].on(side).expect("filtered"),
                split[0]
                    .on(side.other())
                    .expect("a contracting dim is on both sides"),
            );
            let ring = s.tiles[c_mine];
            let partial = s
                .replicate_dims(&[c_mine])
                .project(&dims.out_from_operand(side, out_rank));
            for (holder, tr) in dims
                .lhs_non_contracting
                .iter()
                .map(|tr| (Side::Lhs, tr))
                .chain(dims.rhs_non_contracting.iter().map(|tr| (Side::Rhs, tr)))
            {
                let (Some(o), Some(hd)) = (tr.out, tr.on(holder)) else {
                    continue;
                };
                if t.tiles[o] != ring || t.replicate_dims(&[o]) != partial {
                    continue;
                }
                let (pt, ps) = (t.tile_indices(), s.tile_indices());
                if pt.iter().zip(&ps).any(|(a, b)| a[o] != b[c_mine]) {
                    continue;
                }
                if whole(&i.shape) < threshold || ring > max_ring || ring < 2 {
                    continue;
                }
                let orank = m.instr(ops[side.other().index()]).shape.rank();
                let other_t = s.project(&dims.operand_from_operand(side.other(), orank));
                plans.push(Plan::Accumulate {
                    mine: side,
                    mine_t: s.clone(),
                    other_t,
                    c: match side {
                        Side::Lhs => (c_mine, c_other),
                        Side::Rhs => (c_other, c_mine),
                    },
                    holder,
                    hd,
                    o,
                    ring,
                });
            }
        }
        // Gather-like: the result keeps `mine`'s split; the other operand is split along a
        // non-contracting dimension whose result dimension is whole.
        for mine in [Side::Lhs, Side::Rhs] {
            let other = mine.other();
            let (mid, oid) = (ops[mine.index()], ops[other.index()]);
            let (mrank, orank) = (m.instr(mid).shape.rank(), m.instr(oid).shape.rank());
            let want = t.project(&dims.operand_from_out(other, orank));
            if want.repl < 2 {
                continue;
            }
            let v = self.value(m, oid)?;
            let Tree::Leaf(Spec::Tiled(cur)) = &v.tree else {
                continue;
            };
            let nc = match other {
                Side::Lhs => &dims.lhs_non_contracting,
                Side::Rhs => &dims.rhs_non_contracting,
            };
            // Nothing to gather when the operand already lies as the dot needs it.
            if cur.is_replicated() || *cur == want {
                continue;
            }
            let global = self.global(m, oid);
            // The operand's own split dimension first; else any free dimension, the operand
            // resharded onto the ring first.
            let mut order: Vec<&super::dot::DimTriple> = nc.iter().collect();
            order.sort_by_key(|tr| tr.on(other).map_or(1, |d| (cur.tiles[d] < 2) as u8));
            for tr in order {
                let (Some(d), Some(o)) = (tr.on(other), tr.out) else {
                    continue;
                };
                if want.tiles[d] != 1 {
                    continue;
                }
                // The operand's own split when it is the ring (no reshard), else the ring
                // the result's replication groups make.
                let other_t = if cur.replicate_dims(&[d]) == want {
                    cur.clone()
                } else {
                    let idx: Vec<Vec<i64>> = {
                        let mut idx = vec![Vec::new(); want.num_devices() as usize];
                        for (p, &dev) in want.devices.iter().enumerate() {
                            let mut ti = want.tile_index_at(p);
                            ti[d] = p as i64 % want.repl;
                            idx[dev as usize] = ti;
                        }
                        idx
                    };
                    let mut tiles = want.tiles.clone();
                    tiles[d] = want.repl;
                    Tiling::from_tile_indices(tiles, 1, &idx)
                };
                let ring = other_t.tiles[d];
                if global.dims()[d] < ring || ring > max_ring {
                    continue;
                }
                if whole(&global) < threshold {
                    continue;
                }
                // Not for an operand that several dots read: one gather serves them all, a
                // loop per dot would move it again for each (the per-dot cost does not see
                // the sharing).
                let dots = m
                    .users(oid)
                    .iter()
                    .filter(|&&u| m.instr(u).opcode() == Opcode::Dot)
                    .count();
                if dots > 1 {
                    continue;
                }
                // Code motion sends what the piece is made of when that is smaller (the
                // local value is the piece only when no reshard comes first).
                let sent = (other_t == *cur)
                    .then(|| Motion::plan(m, v.local, None))
                    .flatten()
                    .map(|mo| mo.leaf_bytes(m))
                    .filter(|&x| {
                        x < m
                            .instr(v.local)
                            .shape
                            .as_array()
                            .map_or(0, |a| a.byte_size())
                    });
                plans.push(Plan::Gather {
                    mine,
                    mine_t: t.project(&dims.operand_from_out(mine, mrank)),
                    other_t,
                    d,
                    o,
                    ring,
                    sent,
                });
            }
        }
        Ok(plans)
    }

    /// `((pos + k) mod ring) * size` as an s32 scalar on each device, `k` an s32 scalar.
    fn window_start(
        &mut self,
        b: &mut Builder,
        pos: &[i64],
        k: InstrId,
        ring: i64,
        size: i64,
    ) -> Result<InstrId> {
        let r = self.table(b, pos)?;
        let s = b.binary(Opcode::Add, r, k)?;
        let n = b.scalar(ElementType::S32, ring as f64)?;
        let w = b.binary(Opcode::Remainder, s, n)?;
        let z = b.scalar(ElementType::S32, size as f64)?;
        Ok(b.binary(Opcode::Multiply, w, z)?)
    }

    /// Step index `k` as an s32 scalar: `trip * per + j` in a loop body, `j` outside.
    fn step_index(b: &mut Builder, trip: Option<InstrId>, per: i64, j: i64) -> Result<InstrId> {
        let jc = b.scalar(ElementType::S32, j as f64)?;
        let Some(trip) = trip else {
            return Ok(jc);
        };
        if per == 1 {
            return match j {
                0 => Ok(trip),
                _ => Ok(b.binary(Opcode::Add, trip, jc)?),
            };
        }
        let pc = b.scalar(ElementType::S32, per as f64)?;
        let base = b.binary(Opcode::Multiply, trip, pc)?;
        Ok(b.binary(Opcode::Add, base, jc)?)
    }

    /// `x` sent one step around the ring (`pairs`): a tuple element by element.
    fn send(&mut self, b: &mut Builder, x: InstrId, pairs: &[(i64, i64)]) -> Result<InstrId> {
        let Shape::Tuple(parts) = &b.module().instr(x).shape else {
            return self.collective_permute(b, x, pairs);
        };
        let mut out = Vec::with_capacity(parts.len());
        for k in 0..parts.len() {
            let e = b.get_tuple_element(x, k as i64)?;
            out.push(self.collective_permute(b, e, pairs)?);
        }
        Ok(b.tuple(&out)?)
    }

    fn permute_note(&mut self, b: &Builder, piece: InstrId, count: i64, what: &str) {
        let bytes = b
            .module()
            .instr(piece)
            .shape
            .as_array()
            .map_or(0, |a| a.byte_size());
        self.report.collectives.push(CollectiveNote {
            original: self.origin_name(b),
            collective: "collective-permute",
            reason: format!("windowed einsum ({what}), {count} steps around the ring"),
            bytes: bytes * count,
        });
    }

    /// The gather-like loop; see the module docs.
    fn gather_loop(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        t: &Tiling,
        plan: &Plan,
    ) -> Result<InstrId> {
        let Plan::Gather {
            mine,
            mine_t,
            other_t,
            d,
            o,
            ring,
            ..
        } = plan
        else {
            unreachable!("gather_loop takes a gather plan")
        };
        let (mine, d, o, ring) = (*mine, *d, *o, *ring);
        let i = b.module().instr(id).clone();
        let ml = self.operand(
            b,
            id,
            mine.index(),
            &Tree::Leaf(Spec::Tiled(mine_t.clone())),
        )?;
        let ol = self.operand(
            b,
            id,
            mine.other().index(),
            &Tree::Leaf(Spec::Tiled(other_t.clone())),
        )?;
        let ring_of = Ring::along(other_t, d);
        let piece = b.module().instr(ol).shape.dims()[d];
        // Code motion: a piece made from something smaller (a broadcast, a widening convert)
        // travels as that and is rebuilt each trip.
        let piece_bytes = b
            .module()
            .instr(ol)
            .shape
            .as_array()
            .map_or(0, |a| a.byte_size());
        let motion =
            Motion::plan(b.module(), ol, None).filter(|mo| mo.leaf_bytes(b.module()) < piece_bytes);
        let sent_bytes = motion
            .as_ref()
            .map_or(piece_bytes, |mo| mo.leaf_bytes(b.module()));
        let ol = match &motion {
            Some(mo) => mo.enter(b, 0)?,
            None => ol,
        };
        let own_shape = local_shape(&i.shape, &Tree::Leaf(Spec::Tiled(t.clone())));
        let mut frag_shape = own_shape.clone();
        set_dim(&mut frag_shape, o, piece);
        let mut acc_shape = own_shape.clone();
        set_dim(&mut acc_shape, o, piece * ring);
        let out_ty = i.shape.element_type();
        let zero = b.scalar(out_ty, 0.0)?;
        let acc0 = broadcast_scalar(b, zero, acc_shape.dims())?;
        let lhs_t = match mine {
            Side::Lhs => mine_t.clone(),
            Side::Rhs => other_t.clone(),
        };
        let bidirectional = self.windowed.bidirectional && ring >= 3;
        let per = if self.windowed.unroll { 2 } else { 1 };
        let rank = own_shape.rank();
        let pairs = ring_of.pairs.clone();
        let back = ring_of.reversed();
        // One window: the product of `mine` with the piece at ring offset `k` from the
        // device's own, written into the accumulator.
        let window = |this: &mut Self,
                      b: &mut Builder,
                      acc: InstrId,
                      m: InstrId,
                      p: InstrId,
                      k: InstrId|
         -> Result<InstrId> {
            let p = match &motion {
                Some(mo) => mo.rebuild(b, p, None, 0)?,
                None => p,
            };
            let (l, r) = match mine {
                Side::Lhs => (m, p),
                Side::Rhs => (p, m),
            };
            let f = this.local_dot_like(b, &i, l, r, &lhs_t, frag_shape.clone())?;
            let start = this.window_start(b, &ring_of.pos, k, ring, piece)?;
            let z = b.scalar(ElementType::S32, 0.0)?;
            let starts: Vec<InstrId> = (0..rank).map(|x| if x == o { start } else { z }).collect();
            Ok(b.dynamic_update_slice(acc, f, &starts)?)
        };
        let acc = if bidirectional {
            // Trip j (1-based) multiplies the pieces j steps ahead and j steps behind, while
            // both move one step further.
            let h = (ring - 1) / 2;
            let k0 = Self::step_index(b, None, 1, 0)?;
            let mut acc = window(self, b, acc0, ml, ol, k0)?;
            let fwd = self.send(b, ol, &pairs)?;
            let bwd = self.send(b, ol, &back)?;
            let mut state = vec![ml, fwd, bwd, acc];
            if h > 1 {
                state = self.windowed_while(b, &state, h - 1, &mut |this, b, trip, s| {
                    let (m, f, bw, a) = (s[0], s[1], s[2], s[3]);
                    let f2 = this.send(b, f, &pairs)?;
                    let b2 = this.send(b, bw, &back)?;
                    let one = b.scalar(ElementType::S32, 1.0)?;
                    let j = b.binary(Opcode::Add, trip, one)?;
                    let a = window(this, b, a, m, f, j)?;
                    let rj = b.scalar(ElementType::S32, ring as f64)?;
                    let back_j = b.binary(Opcode::Subtract, rj, j)?;
                    let a = window(this, b, a, m, bw, back_j)?;
                    Ok(vec![m, f2, b2, a])
                })?;
            }
            let (f, bw) = (state[1], state[2]);
            acc = state[3];
            let kh = Self::step_index(b, None, 1, h)?;
            acc = window(self, b, acc, ml, f, kh)?;
            let kb = Self::step_index(b, None, 1, ring - h)?;
            acc = window(self, b, acc, ml, bw, kb)?;
            if ring % 2 == 0 {
                let f2 = self.send(b, f, &pairs)?;
                let kl = Self::step_index(b, None, 1, h + 1)?;
                acc = window(self, b, acc, ml, f2, kl)?;
            }
            acc
        } else {
            // Step k multiplies the piece k steps ahead while passing it on; the last step
            // (after the loop) only multiplies.
            let trips = (ring - 1) / per;
            let mut state = vec![ml, ol, acc0];
            if trips > 0 {
                state = self.windowed_while(b, &state, trips, &mut |this, b, trip, s| {
                    let (m, mut p, mut a) = (s[0], s[1], s[2]);
                    for j in 0..per {
                        let next = this.send(b, p, &pairs)?;
                        let k = Self::step_index(b, Some(trip), per, j)?;
                        a = window(this, b, a, m, p, k)?;
                        p = next;
                    }
                    Ok(vec![m, p, a])
                })?;
            }
            let (mut p, mut a) = (state[1], state[2]);
            for k in trips * per..ring {
                let next = if k < ring - 1 {
                    Some(self.send(b, p, &pairs)?)
                } else {
                    None
                };
                let kc = Self::step_index(b, None, 1, k)?;
                a = window(self, b, a, ml, p, kc)?;
                if let Some(n) = next {
                    p = n;
                }
            }
            a
        };
        self.report.collectives.push(CollectiveNote {
            original: self.origin_name(b),
            collective: "collective-permute",
            reason: format!(
                "windowed einsum (operand pieces{}), {} steps around the ring",
                if motion.is_some() {
                    ", sent as what makes them"
                } else {
                    ""
                },
                ring - 1
            ),
            bytes: sent_bytes * (ring - 1),
        });
        // The accumulator holds `ring` whole pieces: cut the padding of the last one.
        let ext = own_shape.dims()[o];
        if piece * ring == ext {
            return Ok(acc);
        }
        let mut limits = acc_shape.dims().to_vec();
        limits[o] = ext;
        Ok(b.slice(acc, &vec![0; rank], &limits, &vec![1; rank])?)
    }

    /// The reduce-scatter-like loop; see the module docs.
    fn accumulate_loop(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        t: &Tiling,
        plan: &Plan,
    ) -> Result<InstrId> {
        let Plan::Accumulate {
            mine,
            mine_t,
            other_t,
            c,
            holder,
            hd,
            o,
            ring,
        } = plan
        else {
            unreachable!("accumulate_loop takes an accumulate plan")
        };
        let (mine, holder, hd, o, ring) = (*mine, *holder, *hd, *o, *ring);
        let i = b.module().instr(id).clone();
        let other = mine.other();
        let (mid, oid) = (i.operands()[mine.index()], i.operands()[other.index()]);
        let mv = self.value(b.module(), mid)?;
        let ol = self.operand(
            b,
            id,
            other.index(),
            &Tree::Leaf(Spec::Tiled(other_t.clone())),
        )?;
        // Contracting padding may hold anything: zero it on both sides.
        let (mdims, odims) = (
            self.global(b.module(), mid).dims().to_vec(),
            self.global(b.module(), oid).dims().to_vec(),
        );
        let (cm, co) = match mine {
            Side::Lhs => (c.0, c.1),
            Side::Rhs => (c.1, c.0),
        };
        let mty = b.module().instr(mid).shape.element_type();
        let oty = b.module().instr(oid).shape.element_type();
        let mz = b.scalar(mty, 0.0)?;
        let ml = self.mask_padding(b, mv.local, &mdims, mine_t, &[cm], mz)?;
        let oz = b.scalar(oty, 0.0)?;
        let ol = self.mask_padding(b, ol, &odims, other_t, &[co], oz)?;
        // The holder's split dimension, padded to whole windows.
        let own_shape = local_shape(&i.shape, &Tree::Leaf(Spec::Tiled(t.clone())));
        let win = own_shape.dims()[o];
        let (mut hl, fixed) = match holder == mine {
            true => (ml, ol),
            false => (ol, ml),
        };
        let hdims = b.module().instr(hl).shape.dims().to_vec();
        // Code motion: the computation that only makes the holder moves into the loop, each
        // window rebuilt from its leaves' slices; the whole holder is never built.
        let motion = Motion::plan(b.module(), hl, Some(hd));
        if let Some(mo) = &motion {
            hl = mo.enter(b, win * ring)?;
        } else if hdims[hd] < win * ring {
            let hty = b.module().instr(hl).shape.element_type();
            let z = b.scalar(hty, 0.0)?;
            let pads: Vec<PaddingDim> = (0..hdims.len())
                .map(|x| PaddingDim {
                    low: 0,
                    high: if x == hd { win * ring - hdims[x] } else { 0 },
                    interior: 0,
                })
                .collect();
            hl = b.pad(hl, z, &pads)?;
        }
        let mut hsizes = hdims.clone();
        hsizes[hd] = win;
        let ring_of = Ring::along(mine_t, cm);
        let pairs = ring_of.pairs.clone();
        let lhs_t = match mine {
            Side::Lhs => mine_t.clone(),
            Side::Rhs => other_t.clone(),
        };
        let hrank = hdims.len();
        // The partial sum of window `(pos + k + 1) mod ring` from this device's piece.
        let partial = |this: &mut Self,
                       b: &mut Builder,
                       h: InstrId,
                       f: InstrId,
                       k: InstrId|
         -> Result<InstrId> {
            let one = b.scalar(ElementType::S32, 1.0)?;
            let k1 = b.binary(Opcode::Add, k, one)?;
            let start = this.window_start(b, &ring_of.pos, k1, ring, win)?;
            let z = b.scalar(ElementType::S32, 0.0)?;
            let hw = match &motion {
                None => {
                    let starts: Vec<InstrId> = (0..hrank)
                        .map(|x| if x == hd { start } else { z })
                        .collect();
                    b.dynamic_slice(h, &starts, &hsizes)?
                }
                Some(mo) => mo.rebuild(b, h, Some(start), win)?,
            };
            let (l, r) = match holder {
                Side::Lhs => (hw, f),
                Side::Rhs => (f, hw),
            };
            this.local_dot_like(b, &i, l, r, &lhs_t, own_shape.clone())
        };
        if self.windowed.bidirectional && ring >= 3 {
            // Two accumulators: the forward one visits devices w+h .. w+1 of window w's
            // ring, the backward one w-h2 .. w-1; both end on w, which adds its own piece.
            // Step s: forward window (pos - h + s), backward (pos + h2 - s); `partial`
            // takes the window's offset minus one.
            let h = (ring - 1) / 2;
            let h2 = ring - 1 - h;
            let back = ring_of.reversed();
            let at = |b: &mut Builder, v: i64| Self::step_index(b, None, 1, v);
            let k = at(b, ring - h - 1)?;
            let fa0 = partial(self, b, hl, fixed, k)?;
            let k = at(b, h2 - 1)?;
            let ba0 = partial(self, b, hl, fixed, k)?;
            let mut state = vec![hl, fixed, fa0, ba0];
            if h > 1 {
                state = self.windowed_while(b, &state, h - 1, &mut |this, b, trip, st| {
                    let (hh, f, fa, ba) = (st[0], st[1], st[2], st[3]);
                    let fm = this.collective_permute(b, fa, &pairs)?;
                    let bm = this.collective_permute(b, ba, &back)?;
                    let c = b.scalar(ElementType::S32, (ring - h) as f64)?;
                    let kf = b.binary(Opcode::Add, trip, c)?;
                    let pf = partial(this, b, hh, f, kf)?;
                    let c = b.scalar(ElementType::S32, (h2 - 2) as f64)?;
                    let kb = b.binary(Opcode::Subtract, c, trip)?;
                    let pb = partial(this, b, hh, f, kb)?;
                    let fa = b.binary(Opcode::Add, fm, pf)?;
                    let ba = b.binary(Opcode::Add, bm, pb)?;
                    Ok(vec![hh, f, fa, ba])
                })?;
            }
            let (mut fa, mut ba) = (state[2], state[3]);
            // The backward chain's extra step on an even ring.
            for st in h.max(1)..h2 {
                let bm = self.collective_permute(b, ba, &back)?;
                let k = at(b, h2 - 1 - st)?;
                let pb = partial(self, b, hl, fixed, k)?;
                ba = b.binary(Opcode::Add, bm, pb)?;
            }
            fa = self.collective_permute(b, fa, &pairs)?;
            ba = self.collective_permute(b, ba, &back)?;
            let k = at(b, -1)?;
            let own = partial(self, b, hl, fixed, k)?;
            let sum = b.binary(Opcode::Add, fa, ba)?;
            let acc = b.binary(Opcode::Add, sum, own)?;
            self.permute_note(b, own, ring - 1, "partial sums, both ways");
            return Ok(acc);
        }
        let per = if self.windowed.unroll { 2 } else { 1 };
        let k0 = Self::step_index(b, None, 1, 0)?;
        let acc0 = partial(self, b, hl, fixed, k0)?;
        let trips = (ring - 1) / per;
        let mut state = vec![hl, fixed, acc0];
        if trips > 0 {
            state = self.windowed_while(b, &state, trips, &mut |this, b, trip, s| {
                let (h, f, mut a) = (s[0], s[1], s[2]);
                for j in 0..per {
                    let moved = this.collective_permute(b, a, &pairs)?;
                    let k = Self::step_index(b, Some(trip), per, j)?;
                    let one = b.scalar(ElementType::S32, 1.0)?;
                    let k = b.binary(Opcode::Add, k, one)?;
                    let p = partial(this, b, h, f, k)?;
                    a = b.binary(Opcode::Add, moved, p)?;
                }
                Ok(vec![h, f, a])
            })?;
        }
        let mut acc = state[2];
        for k in trips * per + 1..ring {
            let moved = self.collective_permute(b, acc, &pairs)?;
            let kc = Self::step_index(b, None, 1, k)?;
            let p = partial(self, b, hl, fixed, kc)?;
            acc = b.binary(Opcode::Add, moved, p)?;
        }
        self.permute_note(b, acc0, ring - 1, "partial sums");
        Ok(acc)
    }
}

fn set_dim(shape: &mut Shape, d: usize, v: i64) {
    if let Shape::Array(a) = shape {
        a.dims[d] = v;
    }
}

/// Code motion into a windowed loop (XLA's `DoCodeMotionForWindowedDotGeneralLoops`): the
/// operand-only computation that makes a loop operand (broadcasts, converts and other
/// element-wise chains over operands of its shape, reshapes that keep the windowed dimension
/// whole) is rebuilt inside the loop from its leaves, so the operand itself is never built
/// whole. An accumulating loop rebuilds just each window (the leaves sliced); a gathering loop
/// sends the leaves around the ring instead of the piece, when they are smaller, and rebuilds
/// the piece each trip.
struct Motion {
    /// The moved instructions, operands first, each with the dimension that is windowed in it
    /// (`None`: used whole).
    nodes: Vec<(InstrId, Option<usize>)>,
    /// What enters the loop, with its windowed dimension.
    leaves: Vec<(InstrId, Option<usize>)>,
    root: InstrId,
}

/// At most this many instructions are moved into a loop.
const MAX_MOVED: usize = 16;

impl Motion {
    /// The motion for local value `root` windowed along `dim` (`None`: rebuilt whole), if any
    /// instruction can move.
    fn plan(m: &Module, root: InstrId, dim: Option<usize>) -> Option<Motion> {
        let mut modes: Vec<(InstrId, Option<usize>)> = Vec::new();
        let mut leaves: Vec<(InstrId, Option<usize>)> = Vec::new();
        let mut nodes: Vec<(InstrId, Option<usize>)> = Vec::new();
        // Depth-first, operands before users; a value reached in two modes stops the motion.
        let mut stack = vec![(root, dim, false)];
        while let Some((h, md, expanded)) = stack.pop() {
            if let Some(&(_, seen)) = modes.iter().find(|(x, _)| *x == h) {
                if seen != md {
                    return None;
                }
                if !expanded {
                    continue;
                }
            }
            if expanded {
                nodes.push((h, md));
                continue;
            }
            modes.push((h, md));
            let Some(ops) = Self::movable(m, h, md) else {
                leaves.push((h, md));
                continue;
            };
            if nodes.len() + stack.len() >= MAX_MOVED {
                return None;
            }
            stack.push((h, md, true));
            for (o, omd) in ops.into_iter().rev() {
                stack.push((o, omd, false));
            }
        }
        let mo = Motion {
            nodes,
            leaves,
            root,
        };
        // Only when what enters the loop is no larger than the value it replaces (scalars
        // aside: a chain's constants and parameters).
        let root_bytes = m.instr(root).shape.as_array().map_or(0, |a| a.byte_size());
        let arrays: i64 = mo
            .leaves
            .iter()
            .filter(|&&(l, _)| m.instr(l).shape.rank() > 0)
            .map(|&(l, _)| m.instr(l).shape.as_array().map_or(0, |a| a.byte_size()))
            .sum();
        if mo.nodes.is_empty() || arrays > root_bytes {
            return None;
        }
        Some(mo)
    }

    /// The operands of `h` and their windowed dimensions when `h` can move with its dimension
    /// `md` windowed; `None`: `h` is a leaf.
    fn movable(m: &Module, h: InstrId, md: Option<usize>) -> Option<Vec<(InstrId, Option<usize>)>> {
        let i = m.instr(h);
        let dims = i.shape.as_array()?.dims.clone();
        let ops = i.operands();
        match i.opcode() {
            Opcode::Broadcast if ops.len() == 1 => {
                let bd = i.attrs.dimensions.as_deref()?;
                let j = md.and_then(|k| bd.iter().position(|&x| x as usize == k));
                Some(vec![(ops[0], j)])
            }
            Opcode::Reshape if ops.len() == 1 => {
                let from = m.instr(ops[0]).shape.as_array()?.dims.clone();
                let j = match md {
                    None => None,
                    Some(k) => {
                        let before: i64 = dims[..k].iter().product();
                        let j = (0..from.len()).find(|&j| {
                            from[j] == dims[k] && from[..j].iter().product::<i64>() == before
                        })?;
                        Some(j)
                    }
                };
                Some(vec![(ops[0], j)])
            }
            op if (op.is_elementwise_unary()
                || op.is_elementwise_binary()
                || op == Opcode::Select)
                && !ops.is_empty()
                && ops
                    .iter()
                    .all(|&o| m.instr(o).shape.as_array().is_some_and(|a| a.dims == dims)) =>
            {
                Some(ops.iter().map(|&o| (o, md)).collect())
            }
            _ => None,
        }
    }

    /// Bytes of the leaves.
    fn leaf_bytes(&self, m: &Module) -> i64 {
        self.leaves
            .iter()
            .map(|&(l, _)| m.instr(l).shape.as_array().map_or(0, |a| a.byte_size()))
            .sum()
    }

    /// The leaves, padded along their windowed dimension to `whole` (whole windows), as one
    /// value to carry in the loop state (a tuple when there are several).
    fn enter(&self, b: &mut Builder, whole: i64) -> Result<InstrId> {
        let mut xs = Vec::with_capacity(self.leaves.len());
        for &(l, md) in &self.leaves {
            let mut x = l;
            if let Some(k) = md {
                let dims = b.module().instr(l).shape.dims().to_vec();
                if dims[k] < whole {
                    let ty = b.module().instr(l).shape.element_type();
                    let z = b.scalar(ty, 0.0)?;
                    let pads = PaddingDim {
                        high: whole - dims[k],
                        ..PaddingDim::default()
                    };
                    x = b.pad_dim(x, z, k, pads)?;
                }
            }
            xs.push(x);
        }
        match xs[..] {
            [x] => Ok(x),
            _ => Ok(b.tuple(&xs)?),
        }
    }

    /// The moved value rebuilt from `leaves` (the tuple [`Motion::enter`] made, or its
    /// image in a loop body): the window of `size` starting at `start` along the windowed
    /// dimensions, or whole when `start` is `None`.
    fn rebuild(
        &self,
        b: &mut Builder,
        leaves: InstrId,
        start: Option<InstrId>,
        size: i64,
    ) -> Result<InstrId> {
        let mut at: HashMap<InstrId, InstrId> = HashMap::new();
        for (k, &(l, md)) in self.leaves.iter().enumerate() {
            let mut x = match self.leaves.len() {
                1 => leaves,
                _ => b.get_tuple_element(leaves, k as i64)?,
            };
            if let (Some(d), Some(s)) = (md, start) {
                let mut sizes = b.module().instr(x).shape.dims().to_vec();
                sizes[d] = size;
                let z = b.scalar(ElementType::S32, 0.0)?;
                let starts: Vec<InstrId> = (0..sizes.len())
                    .map(|x| if x == d { s } else { z })
                    .collect();
                x = b.dynamic_slice(x, &starts, &sizes)?;
            }
            at.insert(l, x);
        }
        for &(h, md) in &self.nodes {
            let i = b.module().instr(h).clone();
            let ops: Vec<InstrId> = i.operands().iter().map(|o| at[o]).collect();
            let mut shape = i.shape.clone();
            if let (Some(d), Some(_)) = (md, start) {
                set_dim(&mut shape, d, size);
            }
            at.insert(h, clone_of(b, &i, &ops, shape)?);
        }
        Ok(at[&self.root])
    }
}
