//! The floor of rematerialization: bytes below which no rematerialization of a module can bring
//! its peak, whatever it picks.
//!
//! Two facts hold for every result of the `rematerialization` pass (docs/rematerialization.md,
//! *The floor*):
//!
//! - **Local.** Every instruction that stays live runs somewhere (the original or a clone),
//!   and while it runs its operands and its results are live together (the accounting's rule),
//!   with the peaks of the computations it calls added. A clone reads buffers of the same
//!   sizes. So the largest instruction's operands + results (+ callee floors) are a floor
//!   whatever the schedule: [`RematFloor::any_schedule`].
//! - **Pinned.** A value whose instruction cannot be recomputed (a custom-call, a `while`, a
//!   collective with a layout constraint, ... see [`crate::remat::split::recomputable`], the
//!   widest rule any level of the pass uses) is never cloned, and its users are only
//!   ever cloned later, never earlier: it stays live at least from its definition to its last
//!   use in the input's schedule. The pass never reorders the input's instructions, so at a
//!   pinned instruction every pinned value live across it in the input is live there too,
//!   beside its operands and results; and all pinned values live across one program point are
//!   live together right after the latest of their definitions. Together with *local*, that is
//!   [`RematFloor::bytes`], the floor along the given schedule.
//!
//! The module's outputs count in full (the caller owns them, as in the accounting), its
//! parameters not at all. Instructions no root or side effect needs are left out (the pass's
//! final DCE removes them).
//! - **Last operand** (recompute mode): of the instructions an instruction reads from, one runs
//!   last, and while it runs the other operands are already held; two levels of this are
//!   counted (see `last_operand_bytes`).
//!
//! In the compressing modes a value can be held compact between its uses, so there only
//! *local* holds: [`RematFloor::any_schedule_local`].

use std::collections::HashMap;

use tessera_hlo::analysis::call_graph::instruction_call_context;
use tessera_hlo::analysis::CallContext;
use tessera_hlo::{CompId, InstrId, Module};
use tessera_pass::util::SideEffects;

use crate::remat::split::recomputable;
use crate::schedule_memory::{ComputationMemory, ModuleMemory};

/// What a module's peak cannot go below by rematerialization (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RematFloor {
    /// Along the module's schedule: outputs + the most bytes that must be live at one entry
    /// program point (local and pinned values, callee floors).
    pub bytes: i64,
    /// For any schedule (and any mode): outputs + the largest instruction's operands and
    /// results (callee floors included).
    pub any_schedule: i64,
    /// For any schedule, by *local* alone (the floor in the compressing modes, where a value
    /// held between its uses may be compact).
    pub any_schedule_local: i64,
    /// Bytes of the entry's outputs (part of both floors).
    pub output_bytes: i64,
    /// The entry instruction where `bytes` is reached (`None` for an empty entry).
    pub at: Option<InstrId>,
    /// At `at`: bytes of its operands and results (or, with `last_operand`, the bytes the
    /// *last operand* count found there).
    pub local_bytes: i64,
    /// Whether `local_bytes` is the *last operand* count rather than *local*.
    pub last_operand: bool,
    /// At `at`: bytes of values that cannot be rematerialized, live across it, that are not
    /// already among its operands and results.
    pub pinned_bytes: i64,
    /// At `at`: the floors of the computations it calls.
    pub callee_bytes: i64,
}

impl RematFloor {
    /// One line: the floor, where, and what makes it up.
    pub fn describe(&self, module: &Module) -> String {
        let at = self
            .at
            .map(|i| format!("%{}", module.instr(i).name()))
            .unwrap_or_else(|| "the empty entry".into());
        let what = if self.last_operand {
            "operands held while the last of them is computed"
        } else {
            "operands and results"
        };
        let mut s = format!(
            "{} bytes at {at} = outputs {} + {what} {}",
            self.bytes, self.output_bytes, self.local_bytes
        );
        if self.pinned_bytes > 0 {
            s += &format!(
                " + values that cannot be recomputed live there {}",
                self.pinned_bytes
            );
        }
        if self.callee_bytes > 0 {
            s += &format!(" + called computations {}", self.callee_bytes);
        }
        s += &format!("; for any schedule {}", self.any_schedule);
        s
    }
}

/// The floor of each measured computation and its details at the floor's position.
#[derive(Default)]
struct CompFloor {
    bytes: i64,
    any_schedule: i64,
    any_local: i64,
    at: Option<InstrId>,
    local: i64,
    last_operand: bool,
    pinned: i64,
    callee: i64,
}

/// The floor of `module` along the schedule `mem` was measured on (see the module docs).
pub fn remat_floor(module: &Module, mem: &ModuleMemory) -> RematFloor {
    let effects = SideEffects::new(module);
    // Floors of the computations measured so far (callees come first in `mem`).
    let mut floors: HashMap<CompId, (i64, i64, i64)> = HashMap::new();
    let mut entry = None;
    for cm in &mem.computations {
        let f = computation_floor(module, cm, &effects, &floors);
        floors.insert(cm.comp, (f.bytes, f.any_schedule, f.any_local));
        if cm.comp == mem.entry {
            entry = Some(f);
        }
    }
    let f = entry.unwrap_or_default();
    RematFloor {
        bytes: f.bytes + mem.output_bytes,
        any_schedule: f.any_schedule + mem.output_bytes,
        any_schedule_local: f.any_local + mem.output_bytes,
        output_bytes: mem.output_bytes,
        at: f.at,
        local_bytes: f.local,
        last_operand: f.last_operand,
        pinned_bytes: f.pinned,
        callee_bytes: f.callee,
    }
}

/// Instructions of `cm`'s computation that its root or a side effect needs (through operands
/// and control predecessors).
fn needed(module: &Module, cm: &ComputationMemory, effects: &SideEffects) -> Vec<bool> {
    let pos = cm.positions();
    let mut need = vec![false; cm.sequence.len()];
    let mut work: Vec<usize> = Vec::new();
    let root = module.comp(cm.comp).root();
    for (k, &id) in cm.sequence.iter().enumerate() {
        if Some(id) == root || effects.instr_has(module, id) {
            need[k] = true;
            work.push(k);
        }
    }
    while let Some(k) = work.pop() {
        let ins = module.instr(cm.sequence[k]);
        for o in ins.operands().iter().chain(ins.control_predecessors()) {
            if let Some(&q) = pos.get(o) {
                if !need[q] {
                    need[q] = true;
                    work.push(q);
                }
            }
        }
    }
    need
}

fn computation_floor(
    module: &Module,
    cm: &ComputationMemory,
    effects: &SideEffects,
    floors: &HashMap<CompId, (i64, i64, i64)>,
) -> CompFloor {
    let n = cm.sequence.len();
    let pos = cm.positions();
    let need = needed(module, cm, effects);
    // Buffers each position reads or defines (indices into cm.buffers), counting bytes.
    let mut touched: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut pinned = vec![false; cm.buffers.len()];
    for (t, b) in cm.buffers.iter().enumerate() {
        if b.allocated == 0 {
            continue;
        }
        if let Some(&p) = pos.get(&b.defining) {
            touched[p].push(t);
            if need[p] && !recomputable(module, effects, b.defining) {
                pinned[t] = true;
            }
        }
        for u in &b.users {
            if let Some(&q) = pos.get(u) {
                if q < n && !touched[q].contains(&t) {
                    touched[q].push(t);
                }
            }
        }
    }
    // Pinned bytes live across each position: a difference array over [start, end].
    let mut delta = vec![0i64; n + 1];
    for (b, _) in cm.buffers.iter().zip(&pinned).filter(|(_, &p)| p) {
        delta[b.start] += b.allocated;
        delta[b.end + 1] -= b.allocated;
    }
    let mut best = CompFloor::default();
    let mut pinned_live = 0i64;
    for p in 0..n {
        pinned_live += delta[p];
        if !need[p] {
            continue;
        }
        let id = cm.sequence[p];
        let ins = module.instr(id);
        let (callee, callee_any, callee_local) =
            if instruction_call_context(ins.opcode()) == CallContext::ControlFlow {
                ins.called
                    .iter()
                    .filter_map(|c| floors.get(c))
                    .fold((0, 0, 0), |(a, b, c), &(x, y, z)| (a + x, b + y, c + z))
            } else {
                (0, 0, 0)
            };
        let local: i64 = touched[p].iter().map(|&t| cm.buffers[t].allocated).sum();
        let last = last_operand_bytes(cm, &pos, &touched, p);
        best.any_local = best.any_local.max(local + callee_local);
        best.any_schedule = best.any_schedule.max(local + callee_any).max(last);
        // Pinned values live across p that p itself does not read or define.
        let pinned_extra = if recomputable(module, effects, id) {
            // p may run elsewhere (a clone); the pinned values live across p are still live
            // together after the latest of their definitions.
            0
        } else {
            let mine: i64 = touched[p]
                .iter()
                .filter(|&&t| pinned[t])
                .map(|&t| cm.buffers[t].allocated)
                .sum();
            pinned_live - mine
        };
        let here = (local + pinned_extra + callee).max(pinned_live).max(last);
        if here > best.bytes || best.at.is_none() {
            let (l, pe, c, lo) = if local + pinned_extra + callee >= pinned_live.max(last) {
                (local, pinned_extra, callee, false)
            } else if last >= pinned_live {
                (last, 0, 0, true)
            } else {
                (0, pinned_live, 0, false)
            };
            best.last_operand = lo;
            best.bytes = here;
            best.at = Some(id);
            best.local = l;
            best.pinned = pe;
            best.callee = c;
        }
    }
    best.bytes = best.bytes.max(best.any_schedule);
    best
}

/// *Last operand*, two levels deep. The buffers the instruction at `p` reads come from one or
/// more defining instructions; one of them, `D`, runs last (its last run before `p`, original
/// or clone), and while it runs the other buffers `p` reads (the set `S`) are already live:
/// they were computed before and are read at `p`. `D` reads buffers too; one of their
/// definers, `E`, runs last before `D`, at `t_E`. Either every buffer of `S` was computed
/// before `t_E`, and then `S`, the other buffers `D` reads and `E`'s own operands and results
/// are live together at `t_E`; or some buffer of `S` was computed after `t_E` (by its definer
/// `Q`), and then `D`'s operands (all computed by `t_E`, read at `D`) are live while `Q` runs.
/// Minimizing over the choices of `D`, `E` and the case, counting each buffer once, gives
/// bytes that must be live together at some point whatever the schedule and whatever is
/// recomputed. 0 when `p` reads nothing computed in this computation.
fn last_operand_bytes(
    cm: &ComputationMemory,
    pos: &HashMap<InstrId, usize>,
    touched: &[Vec<usize>],
    p: usize,
) -> i64 {
    // The buffers position `x` reads, with the positions of their definers, sorted.
    let reads = |x: usize| -> Vec<(usize, usize)> {
        let id = cm.sequence[x];
        let mut r: Vec<(usize, usize)> = touched[x]
            .iter()
            .filter(|&&t| cm.buffers[t].defining != id)
            .filter_map(|&t| pos.get(&cm.buffers[t].defining).map(|&q| (q, t)))
            .collect();
        r.sort_unstable();
        r
    };
    let definers = |r: &[(usize, usize)]| -> Vec<usize> {
        let mut d: Vec<usize> = r.iter().map(|&(q, _)| q).collect();
        d.dedup();
        d
    };
    let bytes = |mut v: Vec<usize>| -> i64 {
        v.sort_unstable();
        v.dedup();
        v.iter().map(|&t| cm.buffers[t].allocated).sum()
    };
    let others = |r: &[(usize, usize)], d: usize| -> Vec<usize> {
        r.iter()
            .filter(|&&(q, _)| q != d)
            .map(|&(_, t)| t)
            .collect()
    };
    let at_p = reads(p);
    definers(&at_p)
        .into_iter()
        .map(|d| {
            let s = others(&at_p, d);
            let two = bytes(s.iter().chain(&touched[d]).copied().collect());
            let at_d = reads(d);
            let d_reads: Vec<usize> = at_d.iter().map(|&(_, t)| t).collect();
            // Some buffer of S computed after E: D's operands live while its definer runs.
            let after = definers(&at_p)
                .into_iter()
                .filter(|&q| q != d)
                .map(|q| bytes(d_reads.iter().chain(&touched[q]).copied().collect()))
                .min();
            let three = definers(&at_d)
                .into_iter()
                .map(|e| {
                    let before = bytes(
                        s.iter()
                            .copied()
                            .chain(others(&at_d, e))
                            .chain(touched[e].iter().copied())
                            .collect(),
                    );
                    after.map_or(before, |a| a.min(before))
                })
                .min()
                .unwrap_or(0);
            two.max(three)
        })
        .min()
        .unwrap_or(0)
}
