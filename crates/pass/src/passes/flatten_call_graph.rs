//! Call-graph flattening, after XLA's `FlattenCallGraph`.
//!
//! Afterwards every computation reached through control flow (`while`, `conditional`, `call`)
//! has exactly one call site, and no computation is reached both through control flow and as an
//! embedded computation (`to_apply` of reduce/map/sort/..., fusion bodies), so passes may edit a
//! loop body or a branch without affecting other callers. Walking from the entry, the first
//! control-flow call site of a computation keeps it; every other one (including a second
//! branch of the same conditional, and any call site of a computation that is also used
//! embedded) gets a clone named `<name>.clone` whose instructions are named `<name>.clone`
//! too. Clones call the same computations as the original, and are themselves walked, so
//! nested control flow is cloned as deep as needed. Embedded computations stay shared, as in
//! XLA; async computations are left alone. If anything was cloned, computations are re-sorted
//! callees first.

use std::collections::VecDeque;

use tessera_hlo::analysis::{CallContext, CallGraph};
use tessera_hlo::{InstrId, Module};

use crate::options::NoOptions;
use crate::registry::RegisteredPass;
use crate::util::sort_computations_callees_first;
use crate::{Pass, Result};

#[derive(Clone, Debug, Default)]
pub struct FlattenCallGraph {
    /// Computations cloned by the last run.
    pub cloned: usize,
}

impl RegisteredPass for FlattenCallGraph {
    type Options = NoOptions;
    const NAME: &'static str = "flatten-call-graph";
    const DOC: &'static str =
        "clone computations so each control-flow computation has exactly one call site";
    fn with_options(_: NoOptions) -> FlattenCallGraph {
        FlattenCallGraph::default()
    }
}

impl Pass for FlattenCallGraph {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        self.cloned = 0;
        let Some(entry) = module.entry() else {
            return Ok(false);
        };
        let cg = CallGraph::new(module);
        if cg.has_cycle() {
            return Err(crate::PassError::Failed(
                "the call graph has a cycle (a computation calls itself)".into(),
            ));
        }
        // A computation used embedded anywhere is taken: control-flow sites must clone it.
        let mut claimed = vec![false; module.comp_capacity()];
        for &c in module.computations() {
            if matches!(cg.context(c), CallContext::Embedded | CallContext::Both) {
                claimed[c.index()] = true;
            }
        }
        claimed[entry.index()] = true;
        let mut queue = VecDeque::from([entry]);
        while let Some(comp) = queue.pop_front() {
            let sites: Vec<InstrId> = module
                .comp(comp)
                .instructions()
                .iter()
                .copied()
                .filter(|&i| {
                    let ins = module.instr(i);
                    !ins.called.is_empty()
                        && !ins.opcode().is_async()
                        && tessera_hlo::analysis::call_graph::instruction_call_context(ins.opcode())
                            == CallContext::ControlFlow
                })
                .collect();
            for site in sites {
                for k in 0..module.instr(site).called.len() {
                    let callee = module.instr(site).called[k];
                    if module.try_comp(callee).is_none() {
                        continue;
                    }
                    let target = if claimed[callee.index()] {
                        let (clone, _) = module.clone_computation(callee, "clone")?;
                        claimed.resize(module.comp_capacity(), false);
                        module.instr_mut(site).called[k] = clone;
                        self.cloned += 1;
                        clone
                    } else {
                        callee
                    };
                    claimed[target.index()] = true;
                    queue.push_back(target);
                }
            }
        }
        if self.cloned > 0 {
            sort_computations_callees_first(module);
        }
        Ok(self.cloned > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testutil::*;
    use tessera_hlo::{ElementType, Instruction, Opcode, Shape};

    #[test]
    fn clones_shared_bodies_deeply_and_leaves_embedded_shared() {
        let mut b = Builder::new("m");
        let add = b.scalar_add("add");
        // helper is called by body (control flow) and by main (control flow).
        let helper = b.comp("helper");
        let hp = b.param(helper, 0, f32v(4));
        let z = b.op(helper, "h.z", Opcode::Constant, f32s(), &[]);
        let red = b.op(helper, "h.red", Opcode::Reduce, f32s(), &[hp, z]);
        b.m.instr_mut(red).called.push(add);
        let hb = b.op(helper, "h.b", Opcode::Broadcast, f32v(4), &[red]);
        b.m.set_root(helper, hb);
        let body = b.comp("body");
        let bp = b.param(body, 0, f32v(4));
        let bc =
            b.m.add_instruction(
                body,
                Instruction::new("b.call", Opcode::Call, f32v(4))
                    .with_operands(&[bp])
                    .with_called(&[helper]),
            )
            .unwrap();
        b.m.set_root(body, bc);
        let cond = b.comp("cond");
        b.param(cond, 0, f32v(4));
        b.op(
            cond,
            "c.p",
            Opcode::Constant,
            Shape::scalar(ElementType::Pred),
            &[],
        );
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let w1 =
            b.m.add_instruction(
                main,
                Instruction::new("w1", Opcode::While, f32v(4))
                    .with_operands(&[p])
                    .with_called(&[cond, body]),
            )
            .unwrap();
        let w2 =
            b.m.add_instruction(
                main,
                Instruction::new("w2", Opcode::While, f32v(4))
                    .with_operands(&[w1])
                    .with_called(&[cond, body]),
            )
            .unwrap();
        let c3 =
            b.m.add_instruction(
                main,
                Instruction::new("c3", Opcode::Call, f32v(4))
                    .with_operands(&[w2])
                    .with_called(&[helper]),
            )
            .unwrap();
        b.m.set_root(main, c3);
        b.m.set_entry(main);
        assert!(!CallGraph::new(&b.m).is_flattened(&b.m));
        let mut pass = FlattenCallGraph::default();
        assert!(pass.run(&mut b.m).unwrap());
        // Breadth-first from main: w1 keeps cond and body, w2 gets cond.clone and body.clone,
        // c3 keeps helper; then body's call gets helper.clone and body.clone's helper.clone.1.
        assert_eq!(pass.cloned, 4);
        let cg = CallGraph::new(&b.m);
        assert!(cg.is_flattened(&b.m));
        let name = |c| b.m.comp(c).name().to_string();
        assert_eq!(
            b.m.instr(w1)
                .called
                .iter()
                .map(|&c| name(c))
                .collect::<Vec<_>>(),
            ["cond", "body"]
        );
        assert_eq!(
            b.m.instr(w2)
                .called
                .iter()
                .map(|&c| name(c))
                .collect::<Vec<_>>(),
            ["cond.clone", "body.clone"]
        );
        assert_eq!(name(b.m.instr(c3).called[0]), "helper");
        let bc0 = b.m.find_instruction("b.call").unwrap();
        assert_eq!(name(b.m.instr(bc0).called[0]), "helper.clone");
        let bcc = b.m.find_instruction("b.call.clone").unwrap();
        assert_eq!(name(b.m.instr(bcc).called[0]), "helper.clone.1");
        // The reducer stays shared by all three helpers.
        assert_eq!(cg.callers(add).len(), 3);
        // Callees before callers.
        let order = comp_names(&b.m);
        let pos = |n: &str| order.iter().position(|x| x == n).unwrap();
        assert!(pos("helper.clone") < pos("body"));
        assert!(pos("helper.clone.1") < pos("body.clone"));
        assert!(pos("body.clone") < pos("main"));
        assert_eq!(*order.last().unwrap(), "main");
        assert!(!pass.run(&mut b.m).unwrap());
    }

    #[test]
    fn conditional_with_the_same_branch_twice_and_mixed_context() {
        let mut b = Builder::new("m");
        let f = b.scalar_add("f");
        let main = b.comp("main");
        let pr = b.param(main, 0, Shape::scalar(ElementType::Pred));
        let x = b.param(main, 1, f32s());
        let cnd =
            b.m.add_instruction(
                main,
                Instruction::new("cnd", Opcode::Conditional, f32s())
                    .with_operands(&[pr, x, x])
                    .with_called(&[f, f]),
            )
            .unwrap();
        let v = b.param(main, 2, f32v(4));
        let red = b.op(main, "red", Opcode::Reduce, f32s(), &[v, cnd]);
        b.m.instr_mut(red).called.push(f);
        b.m.set_root(main, red);
        b.m.set_entry(main);
        assert_eq!(CallGraph::new(&b.m).context(f), CallContext::Both);
        let mut pass = FlattenCallGraph::default();
        assert!(pass.run(&mut b.m).unwrap());
        let name = |c| b.m.comp(c).name().to_string();
        // f is embedded (the reduce keeps it); both branches get clones.
        assert_eq!(
            b.m.instr(cnd)
                .called
                .iter()
                .map(|&c| name(c))
                .collect::<Vec<_>>(),
            ["f.clone", "f.clone.1"]
        );
        assert_eq!(name(b.m.instr(red).called[0]), "f");
        assert!(CallGraph::new(&b.m).is_flattened(&b.m));
    }
}
