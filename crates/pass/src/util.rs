//! Helpers shared by passes: removing dead code, ordering computations.

use std::collections::{HashMap, HashSet};

use tessera_hlo::analysis::computation_post_order;
use tessera_hlo::{CompId, InstrId, Module, Opcode};

use crate::Result;

/// True if the instruction has an effect beyond its result, looking into the computations it
/// calls (a `while` whose body does an outfeed has a side effect), as XLA's `HasSideEffect`.
pub struct SideEffects {
    comp_has: Vec<Option<bool>>,
}

impl SideEffects {
    pub fn new(module: &Module) -> SideEffects {
        let mut s = SideEffects {
            comp_has: vec![None; module.comp_capacity()],
        };
        // Callees first, so each computation looks only one level down.
        for c in computation_post_order(module, true) {
            let has = module
                .comp(c)
                .instructions()
                .iter()
                .any(|&i| s.instr_has(module, i));
            s.comp_has[c.index()] = Some(has);
        }
        s
    }

    pub fn instr_has(&self, module: &Module, id: InstrId) -> bool {
        let i = module.instr(id);
        i.has_side_effect()
            || i.called.iter().any(|c| {
                self.comp_has
                    .get(c.index())
                    .copied()
                    .flatten()
                    .unwrap_or(false)
            })
    }
}

/// Removes every removable instruction of `candidates` (see [`is_removable`]) and then every
/// operand that became unused, transitively, skipping parameters, roots, side-effecting
/// instructions and ones with control edges. All in one batch: removing instructions one at a
/// time costs a pass over their computation each. Returns how many were removed.
pub fn remove_dead(
    module: &mut Module,
    candidates: &[InstrId],
    effects: &SideEffects,
) -> Result<usize> {
    let mut gone: HashSet<InstrId> = HashSet::new();
    // Users not yet removed, for operands of removed instructions.
    let mut left: HashMap<InstrId, usize> = HashMap::new();
    let mut order = Vec::new();
    let mut work: Vec<InstrId> = candidates
        .iter()
        .rev()
        .copied()
        .filter(|&c| module.try_instr(c).is_some() && is_removable(module, c, effects))
        .collect();
    while let Some(x) = work.pop() {
        if !gone.insert(x) {
            continue;
        }
        order.push(x);
        let mut ops: Vec<InstrId> = module.operands(x).to_vec();
        ops.sort_unstable();
        ops.dedup();
        for op in ops {
            if gone.contains(&op) {
                continue;
            }
            let n = left.entry(op).or_insert_with(|| module.users(op).len());
            *n -= 1;
            if *n == 0 && removable_once_unused(module, op, effects) {
                work.push(op);
            }
        }
    }
    module.remove_instructions(&order)?;
    Ok(order.len())
}

/// True for an instruction that DCE may delete once nothing uses it.
fn removable_once_unused(module: &Module, id: InstrId, effects: &SideEffects) -> bool {
    let i = module.instr(id);
    module.comp(i.parent()).root() != Some(id)
        && i.opcode() != Opcode::Parameter
        && i.control_predecessors().is_empty()
        && i.control_successors().is_empty()
        && !effects.instr_has(module, id)
}

/// True for an unused instruction that DCE may delete.
pub fn is_removable(module: &Module, id: InstrId, effects: &SideEffects) -> bool {
    module.instr(id).users().is_empty() && removable_once_unused(module, id, effects)
}

/// Reorders the stored computations so that every callee comes before its callers (the order
/// XLA prints): a depth-first walk that starts from each computation in the current stored
/// order and emits callees first, so an already sorted module keeps its order and new
/// computations land just before their first caller.
pub fn sort_computations_callees_first(module: &mut Module) {
    let mut state = vec![0u8; module.comp_capacity()];
    let mut order = Vec::with_capacity(module.computations().len());
    for &root in module.computations() {
        if state[root.index()] != 0 {
            continue;
        }
        state[root.index()] = 1;
        let mut stack: Vec<(CompId, Vec<CompId>, usize)> = vec![(root, callees(module, root), 0)];
        while let Some((id, cs, k)) = stack.last_mut() {
            if *k < cs.len() {
                let next = cs[*k];
                *k += 1;
                if state[next.index()] == 0 {
                    state[next.index()] = 1;
                    stack.push((next, callees(module, next), 0));
                }
            } else {
                order.push(*id);
                stack.pop();
            }
        }
    }
    if order != module.computations() {
        module.set_computation_order(order);
    }
}

fn callees(module: &Module, comp: CompId) -> Vec<CompId> {
    let mut v: Vec<CompId> = Vec::new();
    for &i in module.comp(comp).instructions() {
        for &c in module.called_computations(i) {
            if !v.contains(&c) && module.try_comp(c).is_some() {
                v.push(c);
            }
        }
    }
    v
}

/// Removes computations not reachable from the entry. Returns how many were removed.
pub fn remove_unreachable_computations(module: &mut Module) -> usize {
    if module.entry().is_none() {
        return 0;
    }
    let mut reachable = vec![false; module.comp_capacity()];
    for c in computation_post_order(module, false) {
        reachable[c.index()] = true;
    }
    let dead: Vec<CompId> = module
        .computations()
        .iter()
        .copied()
        .filter(|c| !reachable[c.index()])
        .collect();
    module.remove_computations(&dead);
    dead.len()
}
