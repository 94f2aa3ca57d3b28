//! The escalation's last lever (`search=auto`): *recompute before the later use*. Where the
//! seed's greedy stops (it judges one candidate at the current point, and recomputing a
//! value whose operands died revives them), this level works at the module's peak point `p`
//! as a whole:
//!
//! - a candidate is a value live across `p` that `p` does not read, with a use after `p`;
//! - its recomputation is placed right before that first later use `q` and reads only what is
//!   live there anyway (parameters, outputs, buffers live at `q`): every operand that is not
//!   is recomputed too, recursively (at most [`MAX_CHAIN`] instructions, all
//!   rematerializable), so no buffer is held across `p` for it;
//! - every use of the value after `p` reads the recomputation; the original is freed after its
//!   last use before `p`.
//!
//! Candidates are taken cheapest first (recompute flops per byte freed at `p`) until the
//! bytes they free cover the excess; the module is measured again and, if the peak did not
//! fall, the batch is halved (one candidate that does not help is banned). Repeated at each new
//! peak point until the limit is met or nothing helps.

use std::collections::{HashMap, HashSet};

use tessera_hlo::{CompId, InstrId, Module, Opcode, Shape};

use super::remat_name;
use super::search::is_rematerializable;
use crate::cost::instruction_flops;
use crate::schedule_memory::{peak_memory, ComputationMemory};
use tessera_pass::util::SideEffects;

/// Most instructions recomputed for one candidate (itself and the operands it needs).
pub const MAX_CHAIN: usize = 64;

/// Most measurements (of the whole module) one run of this level makes.
pub const MAX_MEASURES: usize = 400;

struct Candidate {
    value: InstrId,
    /// The position of its first use after the peak.
    q: usize,
    /// What to recompute, operands before users (the value last).
    chain: Vec<InstrId>,
    freed: i64,
    flops: i64,
}

impl Candidate {
    /// Values the chain reads that it does not recompute.
    fn reads(&self, module: &Module) -> Vec<InstrId> {
        let mine: HashSet<InstrId> = self.chain.iter().copied().collect();
        self.chain
            .iter()
            .flat_map(|&x| module.instr(x).operands().iter().copied())
            .filter(|o| !mine.contains(o))
            .collect()
    }
}

/// Rewrites `module` (scheduled) towards a peak of at most `limit` bytes (outputs included).
/// Returns the number of instructions added. Errors leave the module as a valid program
/// (each batch is applied on a copy).
pub fn split_to_limit(
    module: &mut Module,
    limit: i64,
    size: &dyn Fn(&Shape) -> i64,
) -> Result<usize, String> {
    let entry = module.entry().ok_or("no entry computation")?;
    let mut banned: HashSet<InstrId> = HashSet::new();
    let mut added = 0usize;
    let mut measures = 0usize;
    let effects = SideEffects::new(module);
    let mut mem = measure(module, size)?;
    measures += 1;
    while mem.0 > limit && measures < MAX_MEASURES {
        let (peak, cm) = (&mem.0, &mem.1);
        let Some(p) = cm.peak_position else { break };
        let cands = candidates(module, entry, cm, p, &banned, &effects);
        if cands.is_empty() && tracing::enabled!(tracing::Level::DEBUG) {
            for b in cm.live_at(p) {
                tracing::debug!(
                    "recompute before use: stuck at {peak} bytes (limit {limit}) at %{}: %{} ({} bytes): {}",
                    module.instr(cm.sequence[p]).name(),
                    module.instr(b.defining).name(),
                    b.allocated,
                    reject_reason(module, &effects, cm, p, b.defining)
                );
            }
        }
        if cands.is_empty() {
            break;
        }
        let mut cands = cands;
        cands.sort_by(|a, b| {
            // flops per byte, cheapest first (cross-multiplied), then the earlier value.
            (a.flops as i128 * b.freed as i128)
                .cmp(&(b.flops as i128 * a.freed as i128))
                .then(b.freed.cmp(&a.freed))
                .then(a.value.index().cmp(&b.value.index()))
        });
        // A batch: cheapest first until the excess is covered, leaving out a candidate that
        // reads a value another one of the batch moves (it would revive it across the peak).
        let excess = peak - limit;
        let mut freed = 0;
        let mut batch: Vec<Candidate> = Vec::new();
        let mut moved: HashSet<InstrId> = HashSet::new();
        let mut read: HashSet<InstrId> = HashSet::new();
        for c in cands {
            if freed >= excess {
                break;
            }
            let reads = c.reads(module);
            if moved.contains(&c.value)
                || read.contains(&c.value)
                || reads.iter().any(|r| moved.contains(r))
            {
                continue;
            }
            moved.insert(c.value);
            read.extend(reads);
            freed += c.freed;
            batch.push(c);
        }
        let cands = batch;
        let mut take = cands.len();
        let mut progress = false;
        while take >= 1 && measures < MAX_MEASURES {
            let mut trial = module.clone();
            let n = apply(&mut trial, entry, cm, &cands[..take])?;
            let m = measure(&trial, size)?;
            measures += 1;
            if m.0 < *peak {
                *module = trial;
                added += n;
                mem = m;
                progress = true;
                break;
            }
            if take == 1 {
                banned.insert(cands[0].value);
                break;
            }
            take /= 2;
        }
        if !progress && banned.len() > 4 * MAX_MEASURES {
            break;
        }
    }
    tracing::debug!(
        "recompute before use: {measures} measurements, {added} instructions added, {} banned",
        banned.len()
    );
    Ok(added)
}

fn measure(
    module: &Module,
    size: &dyn Fn(&Shape) -> i64,
) -> Result<(i64, ComputationMemory), String> {
    let s = module.schedule.as_ref().ok_or("not scheduled")?;
    let mm = peak_memory(module, s, size).map_err(|e| e.to_string())?;
    let e = mm.entry;
    let cm = mm
        .computations
        .into_iter()
        .find(|c| c.comp == e)
        .ok_or("the entry was not measured")?;
    Ok((mm.peak_bytes, cm))
}

/// Whether this level may recompute `x`: what the greedy may ([`is_rematerializable`]), and
/// also a `call` of a computation without side effects (the greedy never clones calls: a
/// callee's peak is accounted per call site), a constant, a copy (the greedy keeps copies
/// that keep the layout, which copy insertion adds; here the clone is a fresh buffer read
/// only after the peak, and the partitioner turns jax's sharding constraints into such
/// copies), and a `Sharding` custom-call (an identity). The floor (`crate::floor`) pins only
/// values this refuses.
pub fn recomputable(module: &Module, effects: &SideEffects, x: InstrId) -> bool {
    let ins = module.instr(x);
    is_rematerializable(module, x)
        || (ins.opcode() == Opcode::Call && !effects.instr_has(module, x))
        || ins.opcode() == Opcode::Constant
        || ins.opcode() == Opcode::Copy
        || ins
            .attrs
            .custom_call
            .as_ref()
            .is_some_and(|c| c.target == "Sharding")
}

/// Values that can be recomputed right before their first use after `p`.
fn candidates(
    module: &Module,
    entry: CompId,
    cm: &ComputationMemory,
    p: usize,
    banned: &HashSet<InstrId>,
    effects: &SideEffects,
) -> Vec<Candidate> {
    let recomputable = |x: InstrId| recomputable(module, effects, x);
    let pos = cm.positions();
    // Buffers by defining instruction.
    let mut defined: HashMap<InstrId, Vec<usize>> = HashMap::new();
    for (k, b) in cm.buffers.iter().enumerate() {
        defined.entry(b.defining).or_default().push(k);
    }
    let root = module.comp(entry).root();
    let at_p = cm.sequence[p];
    let mut out = Vec::new();
    for b in &cm.buffers {
        if b.allocated == 0 || b.start > p || b.end <= p || banned.contains(&b.defining) {
            continue;
        }
        let d = b.defining;
        let ins = module.instr(d);
        if Some(d) == root
            || d == at_p
            || ins.shape.as_array().is_none()
            || defined.get(&d).is_none_or(|v| v.len() != 1)
            || !ins.control_predecessors().is_empty()
            || !ins.control_successors().is_empty()
            || !recomputable(d)
            || ins.opcode() == Opcode::Fusion
        {
            continue;
        }
        let users = module.users(d);
        if users.contains(&at_p) || users.iter().any(|u| !pos.contains_key(u)) {
            continue;
        }
        let Some(q) = users.iter().map(|u| pos[u]).filter(|&k| k > p).min() else {
            continue;
        };
        // What must be recomputed for d at q.
        let held = |o: InstrId| -> bool {
            let ins = module.instr(o);
            if ins.opcode() == Opcode::Parameter {
                return true;
            }
            match defined.get(&o) {
                Some(v) => v.iter().all(|&k| {
                    let ob = &cm.buffers[k];
                    ob.allocated == 0 || (ob.start <= q && ob.end >= q)
                }),
                None => false,
            }
        };
        let mut chain: Vec<InstrId> = Vec::new();
        let mut seen: HashSet<InstrId> = HashSet::new();
        let mut ok = true;
        // Iterative post-order from d.
        let mut stack: Vec<(InstrId, bool)> = vec![(d, false)];
        while let Some((x, expanded)) = stack.pop() {
            if expanded {
                chain.push(x);
                continue;
            }
            if !seen.insert(x) {
                continue;
            }
            if chain.len() + stack.len() > MAX_CHAIN {
                ok = false;
                break;
            }
            let xi = module.instr(x);
            if x != d
                && (!recomputable(x)
                    || !xi.control_predecessors().is_empty()
                    || !xi.control_successors().is_empty()
                    || xi.opcode() == Opcode::Fusion
                    || !pos.contains_key(&x))
            {
                tracing::debug!(
                    "recompute before use: %{} needs %{} ({}), which cannot be recomputed",
                    module.instr(d).name(),
                    xi.name(),
                    xi.opcode()
                );
                ok = false;
                break;
            }
            stack.push((x, true));
            for &o in xi.operands() {
                if !seen.contains(&o) && !held(o) {
                    stack.push((o, false));
                }
            }
        }
        if !ok || chain.len() > MAX_CHAIN {
            continue;
        }
        let flops: i64 = chain
            .iter()
            .map(|&x| instruction_flops(module, x).max(1))
            .sum();
        out.push(Candidate {
            value: d,
            q,
            chain,
            freed: b.allocated,
            flops,
        });
    }
    out
}

/// Clones each candidate's chain right before its `q`, and points the uses after the peak at
/// the clone. Returns the instructions added.
fn apply(
    module: &mut Module,
    entry: CompId,
    cm: &ComputationMemory,
    cands: &[Candidate],
) -> Result<usize, String> {
    let p = cm.peak_position.unwrap_or(0);
    let pos = cm.positions();
    let mut before: HashMap<usize, Vec<InstrId>> = HashMap::new();
    let mut added = 0;
    for c in cands {
        let mut map: HashMap<InstrId, InstrId> = HashMap::new();
        for &x in &c.chain {
            let ops: Vec<InstrId> = module
                .instr(x)
                .operands()
                .iter()
                .map(|o| *map.get(o).unwrap_or(o))
                .collect();
            let base = module.instr(x).name().to_string();
            let name = remat_name(module, &base);
            let clone = module.instr(x).clone().with_name(name).with_operands(&ops);
            let id = module
                .add_instruction(entry, clone)
                .map_err(|e| e.to_string())?;
            map.insert(x, id);
            before.entry(c.q).or_default().push(id);
            added += 1;
        }
        let new = map[&c.value];
        let mut edits = Vec::new();
        for &u in module.users(c.value) {
            if pos.get(&u).is_some_and(|&k| k > p) {
                for (k, &o) in module.instr(u).operands().iter().enumerate() {
                    if o == c.value {
                        edits.push((u, k, new));
                    }
                }
            }
        }
        edits.sort_by_key(|e| (e.0.index(), e.1));
        edits.dedup();
        module.replace_operands(&edits).map_err(|e| e.to_string())?;
    }
    let mut seq = Vec::with_capacity(cm.sequence.len() + added);
    for (k, &i) in cm.sequence.iter().enumerate() {
        if let Some(v) = before.get(&k) {
            seq.extend_from_slice(v);
        }
        seq.push(i);
    }
    let s = module.schedule.as_mut().ok_or("not scheduled")?;
    s.sequences.insert(entry, seq);
    Ok(added)
}

/// Why the value `d`, live at `p`, is no candidate (for the debug log).
fn reject_reason(
    module: &Module,
    effects: &SideEffects,
    cm: &ComputationMemory,
    p: usize,
    d: InstrId,
) -> String {
    let at_p = cm.sequence[p];
    let ins = module.instr(d);
    if d == at_p {
        return "defined at the peak".into();
    }
    if module.users(d).contains(&at_p) {
        return "read at the peak".into();
    }
    if !recomputable(module, effects, d) {
        return format!("{} cannot be recomputed", ins.opcode());
    }
    "its recomputation needs a value that cannot be, or more than MAX_CHAIN instructions".into()
}
