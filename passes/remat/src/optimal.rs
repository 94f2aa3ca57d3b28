//! The fewest recomputations that keep a small computation under a memory limit, found
//! exhaustively: the yardstick for the rematerialization pass on small graphs (see
//! docs/rematerialization.md, "How far from the best").
//!
//! # The problem
//!
//! A [`Problem`] is one computation: its non-parameter instructions ("values") in schedule
//! order, each with its size in bytes, its operands among earlier values (parameters are owned
//! by the caller and always available), and whether it may be recomputed. A *solution* is a
//! sequence of computations of values such that
//!
//! - the values' first computations are the original schedule, in order (each value is
//!   computed at its place in the schedule exactly once as an "original");
//! - any number of recomputations of a value that was already computed once may be inserted
//!   anywhere after that (only for recomputable values);
//! - a computation reads, for each operand, a copy computed earlier and still held; after any
//!   computation any held copies may be dropped.
//!
//! Memory is counted as the pass counts it: at each computation, the bytes of every held copy
//! (its operands among them) plus the bytes of its result; a live-out value (the root) counts
//! zero, and the module's figure adds the output bytes. The peak of a solution is the largest
//! such figure. The **optimum** for a limit is the least number of recomputations of a
//! solution whose peak is at most the limit; none may exist (the limit is infeasible).
//!
//! The pass's own walk is such a solution: the originals stay in the schedule in order (an
//! original all of whose uses moved to its clone is computed and dropped at once) and every
//! clone is one recomputation. So, measured on the pass's schedule before its dead originals
//! are removed, the pass can never need fewer recomputations than the optimum, nor meet a limit
//! the optimum calls infeasible. (After the dead originals are removed, its net count of added
//! instructions can be lower than its recomputations: a "move" computes a value once, later.)
//!
//! # The search
//!
//! A* over states (values computed as originals so far, set of held values), the cost being
//! recomputations. Two reductions keep it exact:
//!
//! - Copies are dropped lazily: nothing is dropped until a computation would go over the limit,
//!   and then only inclusion-minimal sets of held values that bring it under (any solution's
//!   held sets are contained in the held sets of a lazy solution with the same computations).
//! - A value is never held twice, and a value nobody reads is not held after its computation.
//!
//! The heuristic counts held-set misses that force recomputations: every value computed
//! already, not held, and read by an original still to come must be recomputed at least once.
//! It is admissible (not consistent: dropping raises it), so states are reopened when reached
//! more cheaply; the first goal taken from the queue is optimal.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use tessera_hlo::{InstrId, Module, Opcode, Schedule};

use crate::remat::search::is_rematerializable;

/// One computation as the exhaustive search sees it (at most 32 values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Instruction names, in schedule order.
    pub names: Vec<String>,
    /// The instructions of the module the problem was made from.
    pub instructions: Vec<InstrId>,
    /// Bytes of each value inside the computation (0 for the live-out root).
    pub sizes: Vec<i64>,
    /// Operands of each value among the earlier values, as a bit set.
    pub operands: Vec<u32>,
    /// Whether each value may be recomputed.
    pub recomputable: Vec<bool>,
    /// Bytes of the module's output, added to every module-level figure.
    pub output_bytes: i64,
}

/// What the search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Optimum {
    /// The least number of recomputations, and a solution: the values computed, in order.
    Found {
        recomputations: usize,
        schedule: Vec<usize>,
    },
    /// No solution keeps the peak within the limit.
    Infeasible,
    /// The search stopped after this many states without an answer.
    GaveUp { states: usize },
}

/// Why a module cannot be made a [`Problem`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProblemError {
    #[error("the module has no entry computation, root or schedule")]
    NotScheduled,
    #[error("the entry computation calls other computations (%{0})")]
    Calls(String),
    #[error("%{0}: tuple-shaped values are not handled")]
    Tuple(String),
    #[error("%{0}: control edges are not handled")]
    Control(String),
    #[error("more than 32 values")]
    TooLarge,
    #[error("the root %{0} is not the last instruction of the schedule")]
    RootNotLast(String),
}

impl Problem {
    /// The entry computation of a scheduled module of array-shaped instructions without
    /// control edges or called computations, with `size` giving buffer bytes.
    pub fn from_module(
        m: &Module,
        size: &dyn Fn(&tessera_hlo::Shape) -> i64,
    ) -> Result<Problem, ProblemError> {
        let entry = m.entry().ok_or(ProblemError::NotScheduled)?;
        let root = m.comp(entry).root().ok_or(ProblemError::NotScheduled)?;
        let seq = m
            .schedule
            .as_ref()
            .and_then(|s| s.sequences.get(&entry))
            .ok_or(ProblemError::NotScheduled)?;
        let mut index: HashMap<InstrId, usize> = HashMap::new();
        let mut p = Problem {
            names: Vec::new(),
            instructions: Vec::new(),
            sizes: Vec::new(),
            operands: Vec::new(),
            recomputable: Vec::new(),
            output_bytes: 0,
        };
        for &i in seq {
            let ins = m.instr(i);
            if ins.opcode() == Opcode::Parameter {
                continue;
            }
            if !ins.called.is_empty() {
                return Err(ProblemError::Calls(ins.name().to_string()));
            }
            if !ins.shape.is_array() {
                return Err(ProblemError::Tuple(ins.name().to_string()));
            }
            if !ins.control_predecessors().is_empty() || !ins.control_successors().is_empty() {
                return Err(ProblemError::Control(ins.name().to_string()));
            }
            if p.names.len() == 32 {
                return Err(ProblemError::TooLarge);
            }
            let mut ops = 0u32;
            for &o in m.operands(i) {
                if let Some(&k) = index.get(&o) {
                    ops |= 1u32 << k;
                }
            }
            index.insert(i, p.names.len());
            p.names.push(ins.name().to_string());
            p.instructions.push(i);
            p.sizes.push(if i == root { 0 } else { size(&ins.shape) });
            p.operands.push(ops);
            p.recomputable.push(is_rematerializable(m, i));
        }
        if seq.last() != Some(&root) {
            return Err(ProblemError::RootNotLast(m.instr(root).name().to_string()));
        }
        p.output_bytes = size(&m.instr(root).shape);
        Ok(p)
    }

    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    fn bytes(&self, set: u32) -> i64 {
        bits(set).map(|v| self.sizes[v]).sum()
    }

    /// Values read by some value (bit set).
    fn has_users(&self) -> u32 {
        self.operands.iter().fold(0, |a, &o| a | o)
    }

    /// The module peak of computing `schedule` (value indices; the first occurrence of each
    /// value is its original), each copy held until its last read before the value's next
    /// computation; `None` if the sequence is not a solution (an operand not computed yet, a
    /// recomputation before the original or of a value that may not be recomputed, or
    /// originals out of order or missing).
    pub fn peak_of(&self, schedule: &[usize]) -> Option<i64> {
        let n = self.len();
        // For each step, the step of the last read of the copy it computes.
        let mut last_read = vec![None; schedule.len()];
        let mut current: Vec<Option<usize>> = vec![None; n];
        let mut originals = 0;
        for (t, &x) in schedule.iter().enumerate() {
            if x >= n {
                return None;
            }
            for o in bits(self.operands[x]) {
                let src = current[o]?;
                last_read[src] = Some(t);
            }
            if current[x].is_none() {
                if x != originals {
                    return None;
                }
                originals += 1;
            } else if !self.recomputable[x] {
                return None;
            }
            current[x] = Some(t);
        }
        if originals != n {
            return None;
        }
        let mut peak = 0;
        for (t, &x) in schedule.iter().enumerate() {
            let held: i64 = (0..t)
                .filter(|&s| last_read[s].is_some_and(|r| r >= t))
                .map(|s| self.sizes[schedule[s]])
                .sum();
            peak = peak.max(held + self.sizes[x]);
        }
        Some(peak + self.output_bytes)
    }

    /// The entry schedule of `m`, a rewrite of the module this problem was made from, as value
    /// indices: each instruction stands for the value whose name it has, up to a `.remat`
    /// suffix (the pass's clones). `None` if an instruction names no value.
    pub fn sequence_of(&self, m: &Module) -> Option<Vec<usize>> {
        let entry = m.entry()?;
        let seq = m.schedule.as_ref()?.sequences.get(&entry)?;
        let index: HashMap<&str, usize> = self
            .names
            .iter()
            .enumerate()
            .map(|(k, n)| (n.as_str(), k))
            .collect();
        let mut out = Vec::with_capacity(seq.len());
        for &i in seq {
            let ins = m.instr(i);
            if ins.opcode() == Opcode::Parameter {
                continue;
            }
            let name = ins.name();
            let base = name.find(".remat").map_or(name, |k| &name[..k]);
            out.push(*index.get(base)?);
        }
        Some(out)
    }

    /// `m` (the module this problem was made from) rewritten to compute `schedule`: the
    /// first computation of each value is its instruction, every later one a clone named
    /// `NAME.remat...`, each reading the latest copy of its operands; the entry's schedule
    /// is the parameters, then `schedule`. Lets the module-level accounting
    /// ([`crate::peak_memory`]) and the verifier check a solution independently.
    pub fn materialize(&self, m: &Module, schedule: &[usize]) -> Result<Module, String> {
        self.peak_of(schedule)
            .ok_or_else(|| "the sequence is not a solution".to_string())?;
        let mut out = m.clone();
        let entry = out.entry().ok_or("no entry")?;
        let seq = out
            .schedule
            .as_ref()
            .and_then(|s| s.sequences.get(&entry))
            .ok_or("no schedule")?
            .clone();
        let mut order: Vec<InstrId> = seq
            .iter()
            .copied()
            .filter(|&i| out.instr(i).opcode() == Opcode::Parameter)
            .collect();
        let value_of: HashMap<InstrId, usize> = self
            .instructions
            .iter()
            .enumerate()
            .map(|(k, &i)| (i, k))
            .collect();
        let mut latest: Vec<Option<InstrId>> = vec![None; self.len()];
        for &x in schedule {
            let original = self.instructions[x];
            // Operands as `m` has them (`out`'s originals may read copies by now).
            let operands: Vec<InstrId> = m
                .operands(original)
                .iter()
                .map(|o| match value_of.get(o) {
                    Some(&v) => latest[v].ok_or("an operand is read before it is computed"),
                    None => Ok(*o),
                })
                .collect::<Result<_, _>>()?;
            let id = match latest[x] {
                None => {
                    for (k, &o) in operands.iter().enumerate() {
                        if out.operands(original)[k] != o {
                            out.replace_operand(original, k, o)
                                .map_err(|e| e.to_string())?;
                        }
                    }
                    original
                }
                Some(_) => {
                    let name = out.unique_name(&format!("{}.remat", self.names[x]));
                    let clone = out
                        .instr(original)
                        .clone()
                        .with_name(name)
                        .with_operands(&operands);
                    out.add_instruction(entry, clone)
                        .map_err(|e| e.to_string())?
                }
            };
            latest[x] = Some(id);
            order.push(id);
        }
        let mut s = Schedule::default();
        for (c, sq) in &out.schedule.as_ref().ok_or("no schedule")?.sequences {
            s.sequences.insert(
                *c,
                if *c == entry {
                    order.clone()
                } else {
                    sq.clone()
                },
            );
        }
        out.schedule = Some(s);
        Ok(out)
    }

    /// The module peak along the original schedule (no recomputation): the pass's
    /// `peak_before`.
    pub fn schedule_peak(&self) -> i64 {
        let order: Vec<usize> = (0..self.len()).collect();
        self.peak_of(&order).expect("the schedule is a solution")
    }

    /// The optimum for a module-level `limit` (outputs included), exploring at most
    /// `max_states` states.
    pub fn solve(&self, limit: i64, max_states: usize) -> Optimum {
        Search::new(self, limit - self.output_bytes).run(max_states)
    }
}

fn bits(mut set: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if set == 0 {
            None
        } else {
            let b = set.trailing_zeros() as usize;
            set &= set - 1;
            Some(b)
        }
    })
}

/// (originals computed, held set).
type State = (u8, u32);

struct Search<'p> {
    p: &'p Problem,
    limit: i64,
    /// Per number of originals computed `i`: values before `i` read by an original at or
    /// after `i`.
    needed: Vec<u32>,
    has_users: u32,
    recomputable: u32,
    /// Best cost and how each state was reached: (cost, previous state, value computed).
    seen: HashMap<State, (usize, State, u8)>,
}

impl<'p> Search<'p> {
    fn new(p: &'p Problem, limit: i64) -> Search<'p> {
        let n = p.len();
        let mut needed = vec![0u32; n + 1];
        for (i, slot) in needed.iter_mut().enumerate() {
            let before = if i == 32 { u32::MAX } else { (1u32 << i) - 1 };
            let later = p.operands[i..].iter().fold(0, |a, &o| a | o);
            *slot = later & before;
        }
        Search {
            p,
            limit,
            needed,
            has_users: p.has_users(),
            recomputable: (0..n)
                .filter(|&v| p.recomputable[v])
                .fold(0, |a, v| a | 1 << v),
            seen: HashMap::new(),
        }
    }

    /// A lower bound on the recomputations still needed from a state: every computed value
    /// that an original still to come reads and that is not held must be recomputed, and so
    /// must each of its operands that is not held either, and theirs. `None` when one of them
    /// may not be recomputed (no solution from here).
    fn h(&self, (i, held): State) -> Option<usize> {
        let mut need = self.needed[i as usize] & !held;
        let mut frontier = need;
        while frontier != 0 {
            let mut ops = 0;
            for v in bits(frontier) {
                ops |= self.p.operands[v];
            }
            frontier = ops & !held & !need;
            need |= frontier;
        }
        if need & !self.recomputable != 0 {
            return None;
        }
        Some(need.count_ones() as usize)
    }

    /// Inclusion-minimal subsets of `free` of at least `excess` bytes.
    fn minimal_drops(&self, free: u32, excess: i64, out: &mut Vec<u32>) {
        let items: Vec<usize> = bits(free).filter(|&v| self.p.sizes[v] > 0).collect();
        fn go(
            p: &Problem,
            items: &[usize],
            from: usize,
            chosen: u32,
            bytes: i64,
            excess: i64,
            out: &mut Vec<u32>,
        ) {
            if bytes >= excess {
                // Minimal: dropping any chosen value less would not be enough.
                if bits(chosen).all(|v| bytes - p.sizes[v] < excess) {
                    out.push(chosen);
                }
                return;
            }
            for k in from..items.len() {
                let v = items[k];
                go(
                    p,
                    items,
                    k + 1,
                    chosen | 1 << v,
                    bytes + p.sizes[v],
                    excess,
                    out,
                );
            }
        }
        go(self.p, &items, 0, 0, 0, excess, out);
    }

    fn run(mut self, max_states: usize) -> Optimum {
        let n = self.p.len();
        let start: State = (0, 0);
        // (cost + heuristic, deeper first, cost, held set).
        type Open = (usize, Reverse<u8>, usize, u32);
        let mut open: BinaryHeap<Reverse<Open>> = BinaryHeap::new();
        self.seen.insert(start, (0, start, u8::MAX));
        open.push(Reverse((0, Reverse(0), 0, 0)));
        let mut drops = Vec::new();
        let mut expanded = 0usize;
        while let Some(Reverse((_, Reverse(i), g, held))) = open.pop() {
            let state = (i, held);
            if self.seen.get(&state).is_some_and(|&(best, _, _)| best < g) {
                continue; // reached more cheaply since
            }
            if i as usize == n {
                return Optimum::Found {
                    recomputations: g,
                    schedule: self.path(state),
                };
            }
            expanded += 1;
            if expanded > max_states {
                return Optimum::GaveUp { states: expanded };
            }
            let done = if i == 32 { u32::MAX } else { (1u32 << i) - 1 };
            // The next original (cost 0), then every recomputation (cost 1).
            let candidates = std::iter::once(i as usize)
                .chain(bits(done & !held).filter(|&v| self.p.recomputable[v]));
            for x in candidates {
                let ops = self.p.operands[x];
                if ops & !held != 0 {
                    continue;
                }
                let size = self.p.sizes[x];
                if self.p.bytes(ops) + size > self.limit {
                    continue;
                }
                let excess = self.p.bytes(held) + size - self.limit;
                drops.clear();
                if excess <= 0 {
                    drops.push(0);
                } else {
                    self.minimal_drops(held & !ops, excess, &mut drops);
                }
                let (ni, cost) = if x == i as usize {
                    (i + 1, g)
                } else {
                    (i, g + 1)
                };
                let keep = if self.has_users & (1 << x) != 0 {
                    1u32 << x
                } else {
                    0
                };
                for &d in &drops {
                    let next: State = (ni, (held & !d) | keep);
                    if self.seen.get(&next).is_none_or(|&(best, _, _)| cost < best) {
                        let Some(h) = self.h(next) else {
                            continue;
                        };
                        self.seen.insert(next, (cost, state, x as u8));
                        open.push(Reverse((cost + h, Reverse(ni), cost, next.1)));
                    }
                }
            }
        }
        Optimum::Infeasible
    }

    fn path(&self, mut state: State) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(&(_, prev, x)) = self.seen.get(&state) {
            if x == u8::MAX {
                break;
            }
            out.push(x as usize);
            state = prev;
        }
        out.reverse();
        out
    }
}

/// A plain uniform-cost search over every (originals computed, held set) state, dropping any
/// subset of the held values after each computation, without the heuristic or lazy drops:
/// slow, for checking [`Problem::solve`] on graphs of a dozen values.
pub fn solve_plainly(p: &Problem, limit: i64) -> Option<usize> {
    let n = p.len();
    let limit = limit - p.output_bytes;
    let mut best: HashMap<State, usize> = HashMap::new();
    let mut open = BinaryHeap::new();
    open.push(Reverse((0usize, 0u8, 0u32)));
    best.insert((0, 0), 0);
    while let Some(Reverse((g, i, held))) = open.pop() {
        if best.get(&(i, held)).is_some_and(|&b| b < g) {
            continue;
        }
        if i as usize == n {
            return Some(g);
        }
        let done = (1u32 << i) - 1;
        for x in 0..=i as usize {
            let original = x == i as usize;
            if !original && (held & (1 << x) != 0 || !p.recomputable[x]) {
                continue;
            }
            if p.operands[x] & !held != 0 || p.bytes(held) + p.sizes[x] > limit {
                continue;
            }
            let after = held | (1 << x);
            let (ni, cost) = if original { (i + 1, g) } else { (i, g + 1) };
            // Every subset of what is held may be kept.
            let mut sub = after;
            loop {
                let next = (ni, sub & (done | (1 << x)));
                if best.get(&next).is_none_or(|&b| cost < b) {
                    best.insert(next, cost);
                    open.push(Reverse((cost, next.0, next.1)));
                }
                if sub == 0 {
                    break;
                }
                sub = (sub - 1) & after;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::analysis::shape_size;
    use tessera_hlo::text::parse_module;

    fn problem(text: &str) -> Problem {
        Problem::from_module(&parse_module(text).unwrap(), &shape_size).unwrap()
    }

    /// `a` is read right away and again at the very end, across a chain of three values.
    const LATE_USE: &str = r#"HloModule late_use, is_scheduled=true

ENTRY %main (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  %a = f32[16]{0} negate(f32[16]{0} %p)
  %b = f32[16]{0} negate(f32[16]{0} %a)
  %c = f32[16]{0} negate(f32[16]{0} %b)
  %d = f32[16]{0} negate(f32[16]{0} %c)
  ROOT %e = f32[16]{0} add(f32[16]{0} %d, f32[16]{0} %a)
}
"#;

    #[test]
    fn late_use_needs_one_recomputation() {
        let p = problem(LATE_USE);
        assert_eq!(p.len(), 5);
        // At %c: a, b, c (3 x 64) + output 64.
        assert_eq!(p.schedule_peak(), 256);
        assert_eq!(
            p.solve(256, 1 << 20),
            Optimum::Found {
                recomputations: 0,
                schedule: vec![0, 1, 2, 3, 4]
            }
        );
        // Two values at a time: `a` must be dropped after `b` and recomputed before `e`.
        match p.solve(192, 1 << 20) {
            Optimum::Found {
                recomputations,
                schedule,
            } => {
                assert_eq!(recomputations, 1);
                assert_eq!(schedule, vec![0, 1, 2, 3, 0, 4]);
                assert_eq!(p.peak_of(&schedule), Some(192));
            }
            other => panic!("{other:?}"),
        }
        // The optimum as a module: valid, and the same peak by the module-level accounting.
        let m = parse_module(LATE_USE).unwrap();
        let sol = p.materialize(&m, &[0, 1, 2, 3, 0, 4]).unwrap();
        tessera_hlo::verify::verify(&sol, &Default::default()).unwrap();
        let measured = crate::peak_memory(&sol, sol.schedule.as_ref().unwrap(), &shape_size)
            .unwrap()
            .peak_bytes;
        assert_eq!(measured, 192);
        assert!(tessera_hlo::text::print_module(&sol, &Default::default())
            .contains("%e = f32[16]{0} add(f32[16]{0} %d, f32[16]{0} %a.remat)"));
        // %b needs %a and itself: 128 + 64 output.
        assert_eq!(p.solve(191, 1 << 20), Optimum::Infeasible);
        assert_eq!(solve_plainly(&p, 192), Some(1));
        assert_eq!(solve_plainly(&p, 191), None);
    }

    /// `r` is read at the very end; when it is an rng (not rematerializable) it must stay
    /// live all along, when it is an exponential it can be recomputed at the end.
    fn long_lived(op: &str) -> String {
        let r = if op == "rng" {
            "%c0 = f32[] constant(0)\n  %c1 = f32[] constant(1)\n  %r = f32[16]{0} rng(f32[] %c0, f32[] %c1), distribution=rng_uniform".to_string()
        } else {
            format!("%r = f32[16]{{0}} {op}(f32[16]{{0}} %p)")
        };
        format!(
            r#"HloModule long_lived, is_scheduled=true

ENTRY %main (p: f32[16]) -> f32[16] {{
  %p = f32[16]{{0}} parameter(0)
  {r}
  %a = f32[16]{{0}} negate(f32[16]{{0}} %p)
  %b = f32[16]{{0}} negate(f32[16]{{0}} %a)
  %c = f32[16]{{0}} negate(f32[16]{{0}} %b)
  ROOT %out = f32[16]{{0}} add(f32[16]{{0}} %c, f32[16]{{0}} %r)
}}
"#
        )
    }

    #[test]
    fn values_that_cannot_be_recomputed_stay_live() {
        let p = problem(&long_lived("rng"));
        assert_eq!(
            p.recomputable,
            [false, false, false, true, true, true, true]
        );
        // At %b: r, a, b (3 x 64), + 64 out.
        assert_eq!(p.schedule_peak(), 256);
        assert!(matches!(
            p.solve(256, 1 << 20),
            Optimum::Found {
                recomputations: 0,
                ..
            }
        ));
        // r cannot be given up, and a and b are live together at b.
        assert_eq!(p.solve(255, 1 << 20), Optimum::Infeasible);
        assert_eq!(solve_plainly(&p, 255), None);

        let p = problem(&long_lived("exponential"));
        assert_eq!(p.schedule_peak(), 256);
        // Recompute r right before the root: two values at a time everywhere.
        match p.solve(192, 1 << 20) {
            Optimum::Found {
                recomputations,
                schedule,
            } => {
                assert_eq!((recomputations, schedule), (1, vec![0, 1, 2, 3, 0, 4]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(solve_plainly(&p, 192), Some(1));
        assert_eq!(p.solve(191, 1 << 20), Optimum::Infeasible);
    }

    #[test]
    fn peak_of_rejects_sequences_that_are_not_solutions() {
        let p = problem(LATE_USE);
        assert_eq!(p.peak_of(&[0, 2, 1, 3, 4]), None); // c before its operand b
        assert_eq!(p.peak_of(&[1, 0, 2, 3, 4]), None); // originals out of order
        assert_eq!(p.peak_of(&[0, 1, 2, 3]), None); // e missing
        assert_eq!(p.peak_of(&[0, 1, 2, 3, 0, 4]), Some(192));
    }

    /// The A* search and the plain search agree on small random graphs at every limit from
    /// the infeasible to the schedule's peak.
    #[test]
    fn search_matches_the_plain_search_on_small_graphs() {
        let mut compared = 0;
        let mut with_remat = 0;
        for seed in 0..40 {
            let m = crate::gen::random_dag(10, 2, 4, seed);
            let p = Problem::from_module(&m, &shape_size).unwrap();
            let peak = p.schedule_peak();
            for k in 1..=(peak / 16) {
                let limit = k * 16;
                let fast = match p.solve(limit, 1 << 22) {
                    Optimum::Found {
                        recomputations,
                        schedule,
                    } => {
                        assert!(p.peak_of(&schedule).unwrap() <= limit);
                        assert_eq!(schedule.len(), p.len() + recomputations);
                        Some(recomputations)
                    }
                    Optimum::Infeasible => None,
                    Optimum::GaveUp { states } => panic!("gave up after {states}"),
                };
                assert_eq!(fast, solve_plainly(&p, limit), "seed {seed} limit {limit}");
                compared += 1;
                if fast.is_some_and(|r| r > 0) {
                    with_remat += 1;
                }
            }
        }
        assert!(compared > 200 && with_remat > 40, "{compared} {with_remat}");
    }
}
