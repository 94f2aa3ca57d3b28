//! Dead code elimination, after XLA's `HloDCE`.
//!
//! Removes every instruction whose value nobody uses, that is not its computation's root, not a
//! parameter, has no side effect (looking into called computations, so a `while` whose body
//! sends or outfeeds stays), and has no control edges (removing those would change ordering
//! constraints; XLA keeps them too unless asked). Then, unless disabled, removes computations
//! that the entry no longer reaches.

use tessera_hlo::Module;

use crate::options::{parse_bool, unknown_key, OptionDoc, PassOptions};
use crate::registry::RegisteredPass;
use crate::util::{remove_dead, remove_unreachable_computations, SideEffects};
use crate::{Pass, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DceOptions {
    /// Remove computations not reachable from the entry (default true).
    pub remove_dead_computations: bool,
}

impl Default for DceOptions {
    fn default() -> Self {
        DceOptions {
            remove_dead_computations: true,
        }
    }
}

impl PassOptions for DceOptions {
    const DOCS: &'static [OptionDoc] = &[OptionDoc {
        key: "remove_dead_computations",
        default: "true",
        doc: "also remove computations the entry no longer reaches",
    }];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "remove_dead_computations" => self.remove_dead_computations = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct Dce {
    pub options: DceOptions,
    /// Instructions and computations removed by the last run.
    pub removed_instructions: usize,
    pub removed_computations: usize,
}

impl RegisteredPass for Dce {
    type Options = DceOptions;
    const NAME: &'static str = "dce";
    const DOC: &'static str =
        "dead code elimination: unused side-effect-free instructions and unreachable computations";
    fn with_options(options: DceOptions) -> Dce {
        Dce {
            options,
            ..Dce::default()
        }
    }
}

impl Pass for Dce {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        self.removed_instructions = 0;
        self.removed_computations = 0;
        if self.options.remove_dead_computations {
            // First, so dead code in dead computations is not visited.
            self.removed_computations += remove_unreachable_computations(module);
        }
        let effects = SideEffects::new(module);
        // Users before operands, so most chains go in one sweep; remove_dead catches the rest.
        let ids: Vec<_> = module
            .computations()
            .iter()
            .flat_map(|&c| module.comp(c).instructions().iter().rev().copied())
            .collect();
        self.removed_instructions += remove_dead(module, &ids, &effects)?;
        if self.options.remove_dead_computations {
            // Removing a call or while may have orphaned its callees.
            self.removed_computations += remove_unreachable_computations(module);
        }
        tracing::debug!(
            "dce: removed {} instructions, {} computations",
            self.removed_instructions,
            self.removed_computations
        );
        Ok(self.removed_instructions + self.removed_computations > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testutil::*;
    use tessera_hlo::{Instruction, Opcode};

    #[test]
    fn removes_dead_chains_keeps_side_effects_and_control_edges() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let d1 = b.op(c, "d1", Opcode::Negate, f32v(4), &[p]);
        let _d2 = b.op(c, "d2", Opcode::Exp, f32v(4), &[d1]);
        let tok = b.op(c, "tok", Opcode::AfterAll, tessera_hlo::Shape::Token, &[]);
        let _out = b.op(
            c,
            "out",
            Opcode::Outfeed,
            tessera_hlo::Shape::Token,
            &[p, tok],
        );
        let ctl = b.op(c, "ctl", Opcode::Negate, f32v(4), &[p]);
        let root = b.op(c, "root", Opcode::Abs, f32v(4), &[p]);
        b.m.add_control_dependency(ctl, root);
        b.m.set_root(c, root);
        b.m.set_entry(c);
        let mut dce = Dce::default();
        assert!(dce.run(&mut b.m).unwrap());
        assert_eq!(names(&b.m, c), ["main.p0", "tok", "out", "ctl", "root"]);
        assert_eq!(dce.removed_instructions, 2);
        assert!(!dce.run(&mut b.m).unwrap(), "second run changes nothing");
    }

    #[test]
    fn removes_unreachable_computations_but_keeps_side_effecting_loops() {
        let mut b = Builder::new("m");
        // body outfeeds: the while is kept although its result is unused.
        let body = b.comp("body");
        let bp = b.param(body, 0, f32v(4));
        let tok = b.op(
            body,
            "b.tok",
            Opcode::AfterAll,
            tessera_hlo::Shape::Token,
            &[],
        );
        b.op(
            body,
            "b.out",
            Opcode::Outfeed,
            tessera_hlo::Shape::Token,
            &[bp, tok],
        );
        b.m.set_root(body, bp);
        let cond = b.comp("cond");
        b.param(cond, 0, f32v(4));
        let pure = b.comp("pure");
        let pp = b.param(pure, 0, f32v(4));
        let pn = b.op(pure, "pure.neg", Opcode::Negate, f32v(4), &[pp]);
        b.m.set_root(pure, pn);
        let orphan = b.comp("orphan");
        b.param(orphan, 0, f32v(4));
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let w = b.op(main, "w", Opcode::While, f32v(4), &[p]);
        b.m.instr_mut(w).called.extend([cond, body]);
        let call =
            b.m.add_instruction(
                main,
                Instruction::new("call", Opcode::Call, f32v(4))
                    .with_operands(&[p])
                    .with_called(&[pure]),
            )
            .unwrap();
        let _ = call;
        let r = b.op(main, "r", Opcode::Abs, f32v(4), &[p]);
        b.m.set_root(main, r);
        b.m.set_entry(main);
        let mut dce = Dce::default();
        assert!(dce.run(&mut b.m).unwrap());
        assert_eq!(comp_names(&b.m), ["body", "cond", "main"]);
        assert_eq!(names(&b.m, main), ["main.p0", "w", "r"]);
        let mut keep = Dce::with_options(DceOptions {
            remove_dead_computations: false,
        });
        let mut b2 = Builder::new("m2");
        let c2 = b2.comp("x");
        b2.param(c2, 0, f32v(4));
        let _unused = b2.comp("unused");
        b2.m.set_entry(c2);
        assert!(!keep.run(&mut b2.m).unwrap());
        assert_eq!(comp_names(&b2.m), ["x", "unused"]);
    }
}
