//! Per-computation liveness of logical buffers along a sequence, and the memory it implies.
//!
//! Positions are indices into the sequence (a schedule, or any order that puts definitions
//! before uses). A buffer defined in the computation is live from the position of its defining
//! instruction to the last position that uses it through any alias (see
//! [`TuplePointsTo::buffer_uses`]), both inclusive, as XLA's rematerialization counts memory at
//! an instruction: its operands and its result are live at once. Buffers reachable from the root
//! are live out (to the last position); the computation's parameters are live throughout (the
//! caller owns them). A buffer nobody uses is live only where it is defined.

use crate::analysis::buffer_size::BufferSizeFn;
use crate::analysis::order::post_order;
use crate::analysis::points_to::{BufferId, TuplePointsTo};
use crate::instruction::{CompId, InstrId};
use crate::module::Module;
use crate::opcode::Opcode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveRange {
    pub buffer: BufferId,
    /// First and last live positions, inclusive.
    pub start: usize,
    pub end: usize,
    pub size: i64,
}

#[derive(Clone, Debug)]
pub struct Liveness {
    pub comp: CompId,
    pub sequence: Vec<InstrId>,
    ranges: Vec<LiveRange>,
    memory: Vec<i64>,
}

impl Liveness {
    /// Liveness of the buffers defined in `comp` along `sequence`. Instructions of `comp` not in
    /// `sequence` are ignored (their buffers are not counted), except parameters.
    pub fn new(
        module: &Module,
        points_to: &TuplePointsTo,
        comp: CompId,
        sequence: &[InstrId],
        size: BufferSizeFn,
    ) -> Liveness {
        let pos_of: std::collections::HashMap<InstrId, usize> = sequence
            .iter()
            .enumerate()
            .map(|(k, &id)| (id, k))
            .collect();
        let pos = |id: InstrId| pos_of.get(&id).copied().unwrap_or(usize::MAX);
        let last = sequence.len().saturating_sub(1);
        let root = module.comp(comp).root();
        let mut ranges = Vec::new();
        for &id in module.comp(comp).instructions() {
            let is_param = module.instr(id).opcode == Opcode::Parameter;
            if pos(id) == usize::MAX && !is_param {
                continue;
            }
            for &b in points_to.defined_buffers(id) {
                let (start, mut end) = if is_param {
                    (0, last)
                } else {
                    (pos(id), pos(id))
                };
                for (user, _) in points_to.buffer_uses(module, b) {
                    let p = pos(user);
                    if p != usize::MAX {
                        end = end.max(p);
                    }
                }
                if points_to
                    .aliases(b)
                    .iter()
                    .any(|a| Some(a.instruction) == root)
                {
                    end = last;
                }
                ranges.push(LiveRange {
                    buffer: b,
                    start,
                    end,
                    size: size(&points_to.buffer(b).shape),
                });
            }
        }
        let mut delta = vec![0i64; sequence.len() + 1];
        for r in &ranges {
            if r.start < sequence.len() {
                delta[r.start] += r.size;
                delta[r.end + 1] -= r.size;
            }
        }
        let mut memory = Vec::with_capacity(sequence.len());
        let mut cur = 0;
        for d in delta.iter().take(sequence.len()) {
            cur += d;
            memory.push(cur);
        }
        Liveness {
            comp,
            sequence: sequence.to_vec(),
            ranges,
            memory,
        }
    }

    /// Liveness along the module's schedule for `comp`, or along [`post_order`] when the module
    /// has no schedule for it.
    pub fn for_schedule(
        module: &Module,
        points_to: &TuplePointsTo,
        comp: CompId,
        size: BufferSizeFn,
    ) -> Liveness {
        let seq = module
            .schedule
            .as_ref()
            .and_then(|s| s.sequences.get(&comp).cloned())
            .unwrap_or_else(|| post_order(module, comp));
        Liveness::new(module, points_to, comp, &seq, size)
    }

    pub fn ranges(&self) -> &[LiveRange] {
        &self.ranges
    }

    pub fn range(&self, b: BufferId) -> Option<&LiveRange> {
        self.ranges.iter().find(|r| r.buffer == b)
    }

    /// Bytes live at each position of the sequence.
    pub fn memory_profile(&self) -> &[i64] {
        &self.memory
    }

    /// Bytes live at position `p`.
    pub fn memory_at(&self, p: usize) -> i64 {
        self.memory.get(p).copied().unwrap_or(0)
    }

    /// The largest number of bytes live at once (0 for an empty sequence).
    pub fn peak_memory(&self) -> i64 {
        self.memory.iter().copied().max().unwrap_or(0)
    }

    /// First position where the peak is reached.
    pub fn peak_position(&self) -> Option<usize> {
        let peak = self.peak_memory();
        self.memory.iter().position(|&m| m == peak)
    }

    /// Buffers live at position `p`, by id.
    pub fn live_at(&self, p: usize) -> Vec<BufferId> {
        let mut v: Vec<BufferId> = self
            .ranges
            .iter()
            .filter(|r| r.start <= p && p <= r.end)
            .map(|r| r.buffer)
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::buffer_size::shape_size;
    use crate::analysis::testutil::*;

    #[test]
    fn peak_follows_the_schedule() {
        // p (16 B) -> a = neg(p) -> b = exp(p) -> c = add(a, b) -> d = neg(c) root.
        let mut bl = Builder::new("m");
        let c = bl.comp("main");
        let p = bl.param(c, 0, f32v(4));
        let a = bl.op(c, "a", Opcode::Negate, f32v(4), &[p]);
        let b = bl.op(c, "b", Opcode::Exp, f32v(4), &[p]);
        let s = bl.op(c, "s", Opcode::Add, f32v(4), &[a, b]);
        let d = bl.op(c, "d", Opcode::Negate, f32v(4), &[s]);
        bl.m.set_root(c, d);
        let pt = TuplePointsTo::new(&bl.m);
        let seq = [p, a, b, s, d];
        let lv = Liveness::new(&bl.m, &pt, c, &seq, &shape_size);
        // p throughout; a [1,3]; b [2,3]; s [3,4]; d [4,4] (live out).
        assert_eq!(lv.memory_profile(), &[16, 32, 48, 64, 48]);
        assert_eq!(lv.peak_memory(), 64);
        assert_eq!(lv.peak_position(), Some(3));
        let ra = lv.range(pt.buffer_defined_at(a, &[]).unwrap()).unwrap();
        assert_eq!((ra.start, ra.end, ra.size), (1, 3, 16));
        assert_eq!(lv.live_at(4).len(), 3);
        // A custom size function: count buffers instead of bytes.
        let one = |_: &crate::Shape| 1;
        let lv = Liveness::new(&bl.m, &pt, c, &seq, &one);
        assert_eq!(lv.peak_memory(), 4);
    }

    #[test]
    fn tuple_elements_stay_live_while_the_tuple_is_used() {
        let mut bl = Builder::new("m");
        let c = bl.comp("main");
        let p = bl.param(c, 0, f32v(4));
        let a = bl.op(c, "a", Opcode::Negate, f32v(4), &[p]);
        let t = bl.tuple(c, "t", &[a]);
        let b = bl.op(c, "b", Opcode::Exp, f32v(4), &[p]);
        let g = bl.gte(c, "g", t, 0);
        let r = bl.op(c, "r", Opcode::Add, f32v(4), &[g, b]);
        bl.m.set_root(c, r);
        let pt = TuplePointsTo::new(&bl.m);
        let seq = [p, a, t, b, g, r];
        let lv = Liveness::new(&bl.m, &pt, c, &seq, &shape_size);
        // `a` is read at r through the gte (the gte itself only reads t's table).
        let ra = lv.range(pt.buffer_defined_at(a, &[]).unwrap()).unwrap();
        assert_eq!((ra.start, ra.end), (1, 5));
        let rt = lv.range(pt.buffer_defined_at(t, &[]).unwrap()).unwrap();
        assert_eq!((rt.start, rt.end, rt.size), (2, 4, 8));
        // at r: p, a, b, r = 64
        assert_eq!(lv.memory_at(5), 64);
        // at g: p, a, t, b = 56
        assert_eq!(lv.memory_at(4), 56);
        assert_eq!(lv.peak_memory(), 64);
    }
}
