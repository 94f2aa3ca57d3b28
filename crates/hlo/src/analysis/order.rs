//! Instruction and computation orders.
//!
//! [`post_order`] puts every instruction after its operands and its control predecessors (as
//! XLA's `MakeInstructionPostOrder`), and is deterministic: roots are visited in stored order,
//! operands left to right. Instructions unreachable from the root (dead code, side effects)
//! appear too, after the operands they use.

use std::collections::{HashMap, HashSet};

use crate::instruction::{CompId, InstrId};
use crate::module::Module;

/// Instructions of `comp`, each after its operands and control predecessors.
pub fn post_order(module: &Module, comp: CompId) -> Vec<InstrId> {
    // Visit state per instruction of this computation: 0 new, 1 on the stack, 2 done. A map, not
    // a module-sized vector, so that walking every computation stays linear in the module.
    let mut state: HashMap<InstrId, u8> =
        HashMap::with_capacity(module.comp(comp).instructions().len());
    let mut out = Vec::with_capacity(module.comp(comp).instructions().len());
    post_order_by(module, comp, true, &mut state, &mut Vec::new(), &mut out);
    out
}

/// [`post_order`] for many computations in a row, with one module-sized visit table reused by
/// every walk (hashing each visit costs more than the walk itself on large modules).
pub struct PostOrders {
    state: Vec<u8>,
    stack: Vec<(InstrId, usize)>,
}

impl PostOrders {
    pub fn new(module: &Module) -> PostOrders {
        PostOrders {
            state: vec![0; module.instr_capacity()],
            stack: Vec::new(),
        }
    }

    /// The same order as [`post_order`].
    pub fn post_order(&mut self, module: &Module, comp: CompId) -> Vec<InstrId> {
        let mut out = Vec::with_capacity(module.comp(comp).instructions().len());
        self.post_order_into(module, comp, &mut out);
        out
    }

    /// [`PostOrders::post_order`] into `out` (cleared first): a caller walking many small
    /// computations reuses one vector instead of allocating one per walk.
    pub fn post_order_into(&mut self, module: &Module, comp: CompId, out: &mut Vec<InstrId>) {
        self.walk(module, comp, true, out);
    }

    /// The order text and protos are written in, into `out` (cleared first): the stored order
    /// where it already puts every operand and control predecessor before its user, else a
    /// post order started from each instruction in stored order, which moves only what has to
    /// move. A reader takes a name or an id only once it is defined, and the stored order may
    /// be anything (`Module::set_instruction_order`, a proto read as given).
    pub fn def_before_use_into(&mut self, module: &Module, comp: CompId, out: &mut Vec<InstrId>) {
        self.walk(module, comp, false, out);
    }

    fn walk(&mut self, module: &Module, comp: CompId, root_first: bool, out: &mut Vec<InstrId>) {
        if self.state.len() < module.instr_capacity() {
            self.state.resize(module.instr_capacity(), 0);
        }
        out.clear();
        post_order_by(
            module,
            comp,
            root_first,
            &mut self.state,
            &mut self.stack,
            out,
        );
        // Every instruction the walk marked is in `out`: unmark them for the next walk.
        for id in out.iter() {
            self.state[id.index()] = 0;
        }
    }
}

/// [`post_order`] of every computation in `comps`, in that order, through one [`PostOrders`].
pub fn post_orders(module: &Module, comps: &[CompId]) -> Vec<Vec<InstrId>> {
    let mut walker = PostOrders::new(module);
    comps
        .iter()
        .map(|&c| walker.post_order(module, c))
        .collect()
}

/// Visit states of [`post_order_by`].
trait Visits {
    fn get(&self, id: InstrId) -> u8;
    fn set(&mut self, id: InstrId, v: u8);
}

impl Visits for HashMap<InstrId, u8> {
    fn get(&self, id: InstrId) -> u8 {
        HashMap::get(self, &id).copied().unwrap_or(0)
    }
    fn set(&mut self, id: InstrId, v: u8) {
        self.insert(id, v);
    }
}

impl Visits for Vec<u8> {
    fn get(&self, id: InstrId) -> u8 {
        self[id.index()]
    }
    fn set(&mut self, id: InstrId, v: u8) {
        self[id.index()] = v;
    }
}

/// Appends the post order of `comp` to `out`; `stack` is scratch space (left empty). With
/// `root_first` the walk starts from the root, so that its cone comes out in a natural order,
/// then from any instruction not reached from it (in stored order); without, from every
/// instruction in stored order.
fn post_order_by(
    module: &Module,
    comp: CompId,
    root_first: bool,
    state: &mut impl Visits,
    stack: &mut Vec<(InstrId, usize)>,
    out: &mut Vec<InstrId>,
) {
    let c = module.comp(comp);
    let root = if root_first { c.root() } else { None };
    let starts = root.into_iter().chain(c.instructions().iter().copied());
    for start in starts {
        if state.get(start) != 0 {
            continue;
        }
        stack.push((start, 0));
        state.set(start, 1);
        while let Some(&mut (id, ref mut next)) = stack.last_mut() {
            let i = module.instr(id);
            let n_ops = i.operands().len();
            let preds = i.control_predecessors();
            let k = *next;
            if k < n_ops + preds.len() {
                *next += 1;
                let dep = if k < n_ops {
                    i.operands()[k]
                } else {
                    preds[k - n_ops]
                };
                // A cycle (state 1) would be a malformed module; skip the back edge.
                if state.get(dep) == 0 {
                    state.set(dep, 1);
                    stack.push((dep, 0));
                }
            } else {
                state.set(id, 2);
                out.push(id);
                stack.pop();
            }
        }
    }
}

/// The reverse of [`post_order`]: every instruction before its users.
pub fn reverse_post_order(module: &Module, comp: CompId) -> Vec<InstrId> {
    let mut v = post_order(module, comp);
    v.reverse();
    v
}

/// Computations reachable from the entry (or all computations when there is no entry), each
/// after every computation it calls: callees first, the entry last. Computations not reachable
/// from the entry are not listed unless `include_unreachable`; then they come last, callees
/// before callers among themselves.
pub fn computation_post_order(module: &Module, include_unreachable: bool) -> Vec<CompId> {
    /// A computation on the walk's stack; its callees are `pending[start..end]`.
    struct Frame {
        comp: CompId,
        start: usize,
        next: usize,
        end: usize,
    }
    let mut state = vec![0u8; module.comp_capacity()];
    let mut out = Vec::new();
    // The callee lists of the stacked computations, one after another in one vector (a
    // vector per computation was an allocation each on modules of 50,000 computations).
    let mut pending: Vec<CompId> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut visit = |root: CompId, out: &mut Vec<CompId>| {
        if state[root.index()] != 0 {
            return;
        }
        let open = |comp: CompId, state: &mut [u8], pending: &mut Vec<CompId>| {
            state[comp.index()] = 1;
            let start = pending.len();
            callees_into(module, comp, pending);
            Frame {
                comp,
                start,
                next: start,
                end: pending.len(),
            }
        };
        stack.push(open(root, &mut state, &mut pending));
        while let Some(top) = stack.last_mut() {
            if top.next < top.end {
                let next = pending[top.next];
                top.next += 1;
                if state[next.index()] == 0 {
                    let frame = open(next, &mut state, &mut pending);
                    stack.push(frame);
                }
            } else {
                let (comp, start) = (top.comp, top.start);
                state[comp.index()] = 2;
                out.push(comp);
                pending.truncate(start);
                stack.pop();
            }
        }
    };
    match module.entry() {
        Some(e) => {
            visit(e, &mut out);
            if include_unreachable {
                for &c in module.computations() {
                    visit(c, &mut out);
                }
            }
        }
        None => {
            for &c in module.computations() {
                visit(c, &mut out);
            }
        }
    }
    out
}

/// Appends to `out` the computations called by any instruction of `comp`, in instruction
/// order, without repeats.
fn callees_into(module: &Module, comp: CompId, out: &mut Vec<CompId>) {
    let start = out.len();
    // A computation may call thousands of distinct computations (a jax entry with one reduce
    // region per reduce): past a few, repeats are found in a set, not by scanning the list.
    let mut seen: Option<HashSet<CompId>> = None;
    for &i in module.comp(comp).instructions() {
        for &c in module.called_computations(i) {
            let new = match &mut seen {
                Some(s) => !s.contains(&c),
                None => !out[start..].contains(&c),
            };
            if new && module.try_comp(c).is_some() {
                out.push(c);
                match &mut seen {
                    Some(s) => {
                        s.insert(c);
                    }
                    None if out.len() - start > 32 => {
                        seen = Some(out[start..].iter().copied().collect())
                    }
                    None => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testutil::*;
    use crate::opcode::Opcode;

    #[test]
    fn post_order_puts_operands_and_control_predecessors_first() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let neg = b.op(c, "neg", Opcode::Negate, f32v(4), &[p]);
        let exp = b.op(c, "exp", Opcode::Exp, f32v(4), &[p]);
        let add = b.op(c, "add", Opcode::Add, f32v(4), &[neg, exp]);
        // exp must run before neg.
        b.m.add_control_dependency(exp, neg);
        b.m.set_root(c, add);
        let order = post_order(&b.m, c);
        assert_eq!(order, vec![p, exp, neg, add]);
        assert_eq!(reverse_post_order(&b.m, c), vec![add, neg, exp, p]);
    }

    #[test]
    fn post_order_includes_dead_instructions() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let dead = b.op(c, "dead", Opcode::Negate, f32v(4), &[p]);
        let root = b.op(c, "root", Opcode::Exp, f32v(4), &[p]);
        b.m.set_root(c, root);
        assert_eq!(post_order(&b.m, c), vec![p, root, dead]);
    }

    #[test]
    fn post_orders_struct_reuses_its_table_and_agree_with_post_order() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let dead = b.op(c, "dead", Opcode::Negate, f32v(4), &[p]);
        let exp = b.op(c, "exp", Opcode::Exp, f32v(4), &[p]);
        let root = b.op(c, "root", Opcode::Add, f32v(4), &[exp, p]);
        b.m.add_control_dependency(dead, exp);
        b.m.set_root(c, root);
        let d = b.comp("other");
        let q = b.param(d, 0, f32v(4));
        let neg = b.op(d, "neg", Opcode::Negate, f32v(4), &[q]);
        b.m.set_root(d, neg);
        let mut orders = PostOrders::new(&b.m);
        // Twice each, interleaved: a walk must leave the table clean for the next one.
        for _ in 0..2 {
            assert_eq!(orders.post_order(&b.m, c), post_order(&b.m, c));
            assert_eq!(orders.post_order(&b.m, c), vec![p, dead, exp, root]);
            assert_eq!(orders.post_order(&b.m, d), vec![q, neg]);
        }
    }

    #[test]
    fn computation_order_is_callees_first() {
        let mut b = Builder::new("m");
        let add = b.scalar_add("add");
        let body = b.comp("body");
        let bp = b.param(body, 0, f32v(4));
        let zero = b.op(body, "zero", Opcode::Constant, f32s(), &[]);
        let red = b.op(body, "red", Opcode::Reduce, f32s(), &[bp, zero]);
        b.m.instr_mut(red).called.push(add);
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let call = b.op(main, "call", Opcode::Call, f32s(), &[p]);
        b.m.instr_mut(call).called.push(body);
        b.m.set_entry(main);
        let unused = b.comp("unused");
        b.param(unused, 0, f32s());
        assert_eq!(computation_post_order(&b.m, false), vec![add, body, main]);
        assert_eq!(
            computation_post_order(&b.m, true),
            vec![add, body, main, unused]
        );
        // One shared visit table gives each computation's own post-order, also when a
        // computation is walked twice.
        let comps = [add, body, main, unused, body];
        let orders = post_orders(&b.m, &comps);
        for (k, &c) in comps.iter().enumerate() {
            assert_eq!(orders[k], post_order(&b.m, c));
        }
        assert_eq!(orders[1], vec![bp, zero, red]);
        assert_eq!(orders[2], vec![p, call]);
    }

    /// A computation calling many distinct computations lists each once, in first-call order.
    #[test]
    fn callees_of_many_call_sites() {
        let mut b = Builder::new("m");
        let adds: Vec<CompId> = (0..40).map(|k| b.scalar_add(&format!("add{k}"))).collect();
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let zero = b.op(main, "zero", Opcode::Constant, f32s(), &[]);
        for k in 0..80 {
            let r = b.op(main, &format!("r{k}"), Opcode::Reduce, f32s(), &[p, zero]);
            b.m.instr_mut(r).called.push(adds[(k * 7) % 40]);
        }
        let expect: Vec<CompId> = (0..40).map(|k| adds[(k * 7) % 40]).collect();
        let mut got = Vec::new();
        callees_into(&b.m, main, &mut got);
        assert_eq!(got, expect);
    }
}
