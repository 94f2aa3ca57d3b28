//! Call inlining, after XLA's `CallInliner`.
//!
//! Replaces each `call` by a copy of its callee's body: callee parameters become the call's
//! operands, the copy of the callee root replaces the call. Computations are visited callees
//! first, so nested calls are already flat when their caller is inlined. Copied instructions
//! keep their names when those are free in the module and get `.N` suffixes otherwise; they are
//! placed just before the call's position (and in the call's place in a schedule). The call's
//! control predecessors become predecessors of the copied instructions that have no operand
//! inside the callee, its control successors successors of the copied root.
//!
//! Not inlined: composite calls (`is_composite=true`, kept as a unit on purpose), calls into
//! another execution thread, and, with `single_call_site`, callees called from more than one
//! place. Callees that no call reaches any more are removed (`remove_dead_callees`), which XLA
//! leaves to a later DCE.

use std::collections::HashMap;

use tessera_hlo::analysis::{computation_post_order, post_order, CallGraph};
use tessera_hlo::{CompId, InstrId, Module, Opcode};

use crate::options::{parse_bool, unknown_key, OptionDoc, PassOptions};
use crate::registry::RegisteredPass;
use crate::{Pass, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineOptions {
    /// Only inline callees that have exactly one call site (default false).
    pub single_call_site: bool,
    /// Remove computations that are no longer called after inlining (default true).
    pub remove_dead_callees: bool,
}

impl Default for InlineOptions {
    fn default() -> Self {
        InlineOptions {
            single_call_site: false,
            remove_dead_callees: true,
        }
    }
}

impl PassOptions for InlineOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "single_call_site",
            default: "false",
            doc: "only inline computations called from one place",
        },
        OptionDoc {
            key: "remove_dead_callees",
            default: "true",
            doc: "remove callees no call reaches after inlining",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "single_call_site" => self.single_call_site = parse_bool(value)?,
            "remove_dead_callees" => self.remove_dead_callees = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct CallInliner {
    pub options: InlineOptions,
    pub inlined: usize,
}

impl RegisteredPass for CallInliner {
    type Options = InlineOptions;
    const NAME: &'static str = "inline";
    const DOC: &'static str = "inline every `call` (not composite ones) into its caller";
    fn with_options(options: InlineOptions) -> CallInliner {
        CallInliner {
            options,
            inlined: 0,
        }
    }
}

impl Pass for CallInliner {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        self.inlined = 0;
        let cg = CallGraph::new(module);
        let site_count = |c: CompId| cg.caller_callsites(c).count();
        let mut callees = Vec::new();
        for comp in computation_post_order(module, true) {
            let calls: Vec<InstrId> = module
                .comp(comp)
                .instructions()
                .iter()
                .copied()
                .filter(|&i| module.instr(i).opcode == Opcode::Call)
                .collect();
            for call in calls {
                let i = module.instr(call);
                let Some(callee) = i.to_apply() else { continue };
                if i.attrs.is_composite
                    || module.comp(callee).execution_thread != module.comp(comp).execution_thread
                    || module.comp(callee).root().is_none()
                    || (self.options.single_call_site && site_count(callee) != 1)
                {
                    continue;
                }
                inline_call(module, call)?;
                self.inlined += 1;
                if !callees.contains(&callee) {
                    callees.push(callee);
                }
            }
        }
        if self.options.remove_dead_callees && !callees.is_empty() {
            let cg = CallGraph::new(module);
            for c in callees {
                if cg.caller_callsites(c).count() == 0 && module.entry() != Some(c) {
                    module.remove_computation(c);
                }
            }
        }
        Ok(self.inlined > 0)
    }
}

/// Inlines one `call` instruction; returns the instruction that replaced it.
pub fn inline_call(module: &mut Module, call: InstrId) -> Result<InstrId> {
    let caller = module.instr(call).parent();
    let callee = module.instr(call).to_apply().expect("a call has a callee");
    let caller_root = module.comp(caller).root();
    let operands = module.operands(call).to_vec();
    let mut map: HashMap<InstrId, InstrId> = HashMap::new();
    let mut added = Vec::new();
    for id in post_order(module, callee) {
        let src = module.instr(id);
        if src.opcode == Opcode::Parameter {
            let n = src.attrs.parameter_number as usize;
            let Some(&op) = operands.get(n) else {
                return Err(crate::PassError::Failed(format!(
                    "%{}: calls {} with {} operands, but it has parameter {n}",
                    module.instr(call).name,
                    module.comp(callee).name,
                    operands.len()
                )));
            };
            map.insert(id, op);
            continue;
        }
        let ops: Vec<InstrId> = src.operands().iter().map(|o| map[o]).collect();
        let mut copy = src.clone().with_operands(&ops);
        let base = src.name.clone();
        copy.name = module.unique_name(&base);
        let nid = module.add_instruction(caller, copy)?;
        map.insert(id, nid);
        added.push(id);
    }
    // Control edges inside the callee.
    for &id in &added {
        for s in module.instr(id).control_successors().to_vec() {
            if let (Some(&a), Some(&b)) = (map.get(&id), map.get(&s)) {
                module.add_control_dependency(a, b);
            }
        }
    }
    let new_root = map[&module.comp(callee).root().unwrap()];
    // The call's own control edges.
    let preds = module.instr(call).control_predecessors().to_vec();
    let succs = module.instr(call).control_successors().to_vec();
    for &id in &added {
        let starts = module
            .instr(id)
            .operands()
            .iter()
            .all(|&o| module.instr(o).opcode == Opcode::Parameter)
            && module.instr(id).control_predecessors().is_empty();
        if starts {
            for &p in &preds {
                module.add_control_dependency(p, map[&id]);
            }
        }
    }
    if added.iter().any(|a| map[a] == new_root) {
        for &s in &succs {
            module.add_control_dependency(new_root, s);
        }
    }
    // Put the copies where the call was.
    let new_ids: Vec<InstrId> = added.iter().map(|a| map[a]).collect();
    let mut order: Vec<InstrId> = Vec::with_capacity(module.comp(caller).instructions().len());
    for &i in module.comp(caller).instructions() {
        if i == call {
            order.extend(&new_ids);
        }
        if !new_ids.contains(&i) {
            order.push(i);
        }
    }
    module.set_instruction_order(caller, order);
    if let Some(s) = module.schedule.as_mut() {
        if let Some(seq) = s.sequences.get_mut(&caller) {
            if let Some(k) = seq.iter().position(|&x| x == call) {
                seq.splice(k..k, new_ids.iter().copied());
            }
        }
    }
    if let Some(r) = caller_root {
        module.set_root(caller, r);
    }
    module.replace_all_uses_with(call, new_root)?;
    module.remove_instruction(call)?;
    Ok(new_root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testutil::*;
    use tessera_hlo::Instruction;

    #[test]
    fn inlines_nested_calls_and_removes_dead_callees() {
        let mut b = Builder::new("m");
        let inner = b.comp("inner");
        let ip = b.param(inner, 0, f32v(4));
        let neg = b.op(inner, "neg", Opcode::Negate, f32v(4), &[ip]);
        b.m.set_root(inner, neg);
        let outer = b.comp("outer");
        let op0 = b.param(outer, 0, f32v(4));
        let op1 = b.param(outer, 1, f32v(4));
        let c1 =
            b.m.add_instruction(
                outer,
                Instruction::new("c1", Opcode::Call, f32v(4))
                    .with_operands(&[op0])
                    .with_called(&[inner]),
            )
            .unwrap();
        let add = b.op(outer, "add", Opcode::Add, f32v(4), &[c1, op1]);
        b.m.set_root(outer, add);
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let call =
            b.m.add_instruction(
                main,
                Instruction::new("call", Opcode::Call, f32v(4))
                    .with_operands(&[p, p])
                    .with_called(&[outer]),
            )
            .unwrap();
        let exp = b.op(main, "exp", Opcode::Exp, f32v(4), &[call]);
        b.m.set_root(main, exp);
        b.m.set_entry(main);
        let mut pass = CallInliner::default();
        assert!(pass.run(&mut b.m).unwrap());
        assert_eq!(pass.inlined, 2);
        assert_eq!(comp_names(&b.m), ["main"]);
        // Names: copies get a fresh `.N` while the original name is taken (neg -> neg.1 in
        // `outer`, then neg.1 -> neg.2 in `main`).
        assert_eq!(names(&b.m, main), ["main.p0", "neg.2", "add.1", "exp"]);
        let neg1 = b.m.find_instruction("neg.2").unwrap();
        let add1 = b.m.find_instruction("add.1").unwrap();
        assert_eq!(b.m.operands(neg1), &[p]);
        assert_eq!(b.m.operands(add1), &[neg1, p]);
        assert_eq!(b.m.operands(exp), &[add1]);
        assert_eq!(b.m.comp(main).root(), Some(exp));
        assert!(!pass.run(&mut b.m).unwrap());
    }

    #[test]
    fn call_as_root_and_single_call_site_option() {
        let mut b = Builder::new("m");
        let f = b.comp("f");
        let fp = b.param(f, 0, f32v(4));
        b.m.set_root(f, fp); // identity
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let c1 =
            b.m.add_instruction(
                main,
                Instruction::new("c1", Opcode::Call, f32v(4))
                    .with_operands(&[p])
                    .with_called(&[f]),
            )
            .unwrap();
        let c2 =
            b.m.add_instruction(
                main,
                Instruction::new("c2", Opcode::Call, f32v(4))
                    .with_operands(&[c1])
                    .with_called(&[f]),
            )
            .unwrap();
        b.m.set_root(main, c2);
        b.m.set_entry(main);
        let mut single = CallInliner::with_options(InlineOptions {
            single_call_site: true,
            ..InlineOptions::default()
        });
        assert!(!single.run(&mut b.m).unwrap());
        let mut all = CallInliner::default();
        assert!(all.run(&mut b.m).unwrap());
        // Identity callee: the parameter itself becomes the root.
        assert_eq!(b.m.comp(main).root(), Some(p));
        assert_eq!(names(&b.m, main), ["main.p0"]);
    }
}
