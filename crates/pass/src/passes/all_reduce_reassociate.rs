//! All-reduce reassociation, after XLA's `AllReduceReassociate`.
//!
//! `op(all-reduce(x), all-reduce(y))` becomes `all-reduce(op(x, y))` when both all-reduces
//! combine with `op` (add, multiply, minimum or maximum as their scalar reducer), reduce the
//! same element type over the same replica groups, are both cross-module (a channel id) or
//! both not, agree on `use_global_device_ids`, and are used by `op` alone. The SPMD partitioner
//! emits one all-reduce per dot that contracts a split dimension, so a sum of two such dots
//! (jax's explicit mode keeps them `unreduced` until the sum) then crosses the network once
//! instead of twice.
//!
//! Min and max give the same values. A sum or product is reassociated: its terms meet in
//! another order, so floating-point results differ by rounding, as in XLA. A module with a
//! layout-constrained all-reduce is left alone (XLA's rule). Instructions are visited operands
//! first, so a chain `add(add(ar, ar), ar)` folds into one all-reduce in one run. The new
//! all-reduce takes a fresh channel id.

use tessera_hlo::analysis::order::PostOrders;
use tessera_hlo::{InstrId, Instruction, Module, Opcode};

use crate::options::NoOptions;
use crate::registry::RegisteredPass;
use crate::{Pass, Result};

#[derive(Clone, Debug, Default)]
pub struct AllReduceReassociate {
    /// Pairs of all-reduces folded into one by the last run.
    pub folded: usize,
}

impl RegisteredPass for AllReduceReassociate {
    type Options = NoOptions;
    const NAME: &'static str = "all-reduce-reassociate";
    const DOC: &'static str =
        "op(all-reduce(x), all-reduce(y)) -> all-reduce(op(x, y)) where both reduce with op";
    fn with_options(_: NoOptions) -> AllReduceReassociate {
        AllReduceReassociate::default()
    }
}

/// The opcodes whose all-reduces may be merged: XLA's four reduction kinds.
const KINDS: [Opcode; 4] = [
    Opcode::Add,
    Opcode::Multiply,
    Opcode::Minimum,
    Opcode::Maximum,
];

/// Whether `a` and `b` reduce the same way over the same devices (XLA's `AllReduceKey`).
fn compatible(m: &Module, a: &Instruction, b: &Instruction, op: Opcode) -> bool {
    let reducer = |i: &Instruction| i.to_apply().and_then(|c| m.combiner_opcode(c));
    let groups = |i: &Instruction| {
        i.attrs
            .replica_groups
            .as_ref()
            .map(|g| g.groups().map_err(|_| ()))
    };
    reducer(a) == Some(op)
        && reducer(b) == Some(op)
        && a.shape.element_type() == b.shape.element_type()
        && a.attrs.channel_id.is_some() == b.attrs.channel_id.is_some()
        && a.attrs.use_global_device_ids == b.attrs.use_global_device_ids
        && groups(a).is_none_or(|g| g.is_ok())
        && groups(a) == groups(b)
}

/// The two all-reduces `id` combines, when it can take their place.
fn foldable(m: &Module, id: InstrId) -> Option<(InstrId, InstrId)> {
    let i = m.instr(id);
    if !KINDS.contains(&i.opcode()) || !i.shape.is_array() || !i.control_predecessors().is_empty() {
        return None;
    }
    let (x, y) = (*i.operands().first()?, *i.operands().get(1)?);
    let (a, b) = (m.instr(x), m.instr(y));
    let single_use = |ar: &Instruction| {
        ar.opcode() == Opcode::AllReduce
            && ar.operands().len() == 1
            && ar.users() == [id]
            && ar.control_successors().is_empty()
            && ar.control_predecessors().is_empty()
    };
    (single_use(a) && single_use(b) && compatible(m, a, b, i.opcode())).then_some((x, y))
}

impl Pass for AllReduceReassociate {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        self.folded = 0;
        let constrained = module
            .instructions_with_opcode(&[Opcode::AllReduce])
            .any(|i| module.instr(i).attrs.constrain_layout);
        if constrained {
            return Ok(false);
        }
        let mut next_channel = module.next_channel_id();
        let mut walker = PostOrders::new(module);
        for c in module.computations().to_vec() {
            for id in walker.post_order(module, c) {
                let Some((x, y)) = foldable(module, id) else {
                    continue;
                };
                let (x_in, y_in) = (module.operands(x)[0], module.operands(y)[0]);
                let i = module.instr(id).clone();
                let name = module.unique_name(i.name());
                let shape = i.shape.clone();
                let mut combined = i.with_name(name).with_operands(&[x_in, y_in]);
                combined.sharding = None;
                let combined = module.add_instruction(c, combined)?;
                let ar = module.instr(x).clone();
                let name = module.unique_name(ar.name());
                let mut reduce = ar.with_name(name).with_operands(&[combined]);
                reduce.shape = shape;
                reduce.sharding = None;
                if reduce.attrs.channel_id.is_some() {
                    reduce.attrs.channel_id = Some(next_channel);
                    next_channel += 1;
                }
                let reduce = module.add_instruction(c, reduce)?;
                module.replace_instruction(id, reduce)?;
                module.remove_instruction(x)?;
                if y != x {
                    module.remove_instruction(y)?;
                }
                self.folded += 1;
            }
        }
        Ok(self.folded > 0)
    }
}
