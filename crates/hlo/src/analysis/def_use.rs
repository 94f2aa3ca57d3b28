//! Def-use chains with operand positions.
//!
//! [`crate::Module::users`] already lists the distinct users of an instruction. [`DefUse`] adds
//! what passes often need on top: every *use* (user and operand index, so `add(x, x)` is two
//! uses), whether a value is used at all (a root counts as a use), and the transitive users.

use crate::instruction::{CompId, InstrId};
use crate::module::Module;

/// One use of a value: operand `operand_index` of `user`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Use {
    pub user: InstrId,
    pub operand_index: usize,
}

/// Uses of every instruction of a module, in a dense table.
#[derive(Clone, Debug)]
pub struct DefUse {
    uses: Vec<Vec<Use>>,
    is_root: Vec<bool>,
}

impl DefUse {
    pub fn new(module: &Module) -> DefUse {
        let n = module.instr_capacity();
        let mut uses = vec![Vec::new(); n];
        let mut is_root = vec![false; n];
        for &c in module.computations() {
            let comp = module.comp(c);
            if let Some(r) = comp.root() {
                is_root[r.index()] = true;
            }
            for &id in comp.instructions() {
                for (k, &op) in module.operands(id).iter().enumerate() {
                    uses[op.index()].push(Use {
                        user: id,
                        operand_index: k,
                    });
                }
            }
        }
        DefUse { uses, is_root }
    }

    /// Every use of `id`, by user in computation order then operand index.
    pub fn uses(&self, id: InstrId) -> &[Use] {
        &self.uses[id.index()]
    }

    /// Number of uses (`add(x, x)` counts twice).
    pub fn use_count(&self, id: InstrId) -> usize {
        self.uses[id.index()].len()
    }

    pub fn is_root(&self, id: InstrId) -> bool {
        self.is_root[id.index()]
    }

    /// True if nothing uses the value and it is not its computation's root.
    pub fn is_unused(&self, id: InstrId) -> bool {
        self.uses[id.index()].is_empty() && !self.is_root[id.index()]
    }

    /// Instructions of `comp` whose value is unused (in stored order).
    pub fn unused_in(&self, module: &Module, comp: CompId) -> Vec<InstrId> {
        module
            .comp(comp)
            .instructions()
            .iter()
            .copied()
            .filter(|&i| self.is_unused(i))
            .collect()
    }

    /// Every instruction that depends on `id` through operands, in breadth-first order.
    pub fn transitive_users(&self, id: InstrId) -> Vec<InstrId> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut queue = std::collections::VecDeque::from([id]);
        while let Some(x) = queue.pop_front() {
            for u in &self.uses[x.index()] {
                if seen.insert(u.user) {
                    out.push(u.user);
                    queue.push_back(u.user);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testutil::*;
    use crate::opcode::Opcode;

    #[test]
    fn uses_count_each_operand_position() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let add = b.op(c, "add", Opcode::Add, f32v(4), &[p, p]);
        let neg = b.op(c, "neg", Opcode::Negate, f32v(4), &[add]);
        let dead = b.op(c, "dead", Opcode::Exp, f32v(4), &[p]);
        b.m.set_root(c, neg);
        let du = DefUse::new(&b.m);
        assert_eq!(
            du.uses(p),
            &[
                Use {
                    user: add,
                    operand_index: 0
                },
                Use {
                    user: add,
                    operand_index: 1
                },
                Use {
                    user: dead,
                    operand_index: 0
                }
            ]
        );
        assert_eq!(b.m.users(p), &[add, dead]);
        assert_eq!(du.use_count(p), 3);
        assert!(!du.is_unused(neg), "a root is used");
        assert!(du.is_unused(dead));
        assert_eq!(du.unused_in(&b.m, c), vec![dead]);
        assert_eq!(du.transitive_users(p), vec![add, dead, neg]);
    }
}
