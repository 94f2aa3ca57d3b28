//! Tuple simplification, after XLA's `TupleSimplifier`.
//!
//! - `get-tuple-element(tuple(a0, ..., an), i)` becomes `ai`;
//! - `tuple(get-tuple-element(x, 0), ..., get-tuple-element(x, n-1))` becomes `x` when `x` has
//!   exactly those n elements (shapes compared without layouts).
//!
//! Instructions are visited operands first, so chains of `get-tuple-element` through nested
//! tuples fold in one run. Replaced instructions, and operands that become unused, are removed
//! (side-effect-free ones, as DCE would). With `exclude_entry_computation`, the entry is left
//! alone (its root tuple is often part of the program's interface).

use tessera_hlo::analysis::order::PostOrders;
use tessera_hlo::{InstrId, Module, Opcode};

use crate::options::{parse_bool, unknown_key, OptionDoc, PassOptions};
use crate::registry::RegisteredPass;
use crate::util::{remove_dead, SideEffects};
use crate::{Pass, Result};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TupleSimplifyOptions {
    /// Leave the entry computation alone (default false).
    pub exclude_entry_computation: bool,
}

impl PassOptions for TupleSimplifyOptions {
    const DOCS: &'static [OptionDoc] = &[OptionDoc {
        key: "exclude_entry_computation",
        default: "false",
        doc: "do not simplify the entry computation",
    }];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "exclude_entry_computation" => self.exclude_entry_computation = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct TupleSimplifier {
    pub options: TupleSimplifyOptions,
    pub replaced: usize,
}

impl RegisteredPass for TupleSimplifier {
    type Options = TupleSimplifyOptions;
    const NAME: &'static str = "tuple-simplify";
    const DOC: &'static str =
        "fold get-tuple-element(tuple(...)) and tuple(get-tuple-element(x, 0..n)) into x";
    fn with_options(options: TupleSimplifyOptions) -> TupleSimplifier {
        TupleSimplifier {
            options,
            replaced: 0,
        }
    }
}

/// The value `id` can be replaced by, if any.
fn replacement(module: &Module, id: InstrId) -> Option<InstrId> {
    let i = module.instr(id);
    match i.opcode() {
        Opcode::GetTupleElement => {
            let t = *i.operands().first()?;
            let tuple = module.instr(t);
            if tuple.opcode() != Opcode::Tuple {
                return None;
            }
            let k = usize::try_from(i.attrs.tuple_index).ok()?;
            let e = *tuple.operands().get(k)?;
            module.instr(e).shape.compatible(&i.shape).then_some(e)
        }
        Opcode::Tuple => {
            let mut src = None;
            for (k, &op) in i.operands().iter().enumerate() {
                let g = module.instr(op);
                if g.opcode() != Opcode::GetTupleElement || g.attrs.tuple_index != k as i64 {
                    return None;
                }
                let x = *g.operands().first()?;
                if *src.get_or_insert(x) != x {
                    return None;
                }
            }
            let x = src?;
            module.instr(x).shape.compatible(&i.shape).then_some(x)
        }
        _ => None,
    }
}

/// By computation index: true where an instruction may be replaced, so that the walk of
/// the others would change nothing.
///
/// A get-tuple-element folds only when its operand is a tuple when it is visited: the operand
/// it has now, or what that operand is replaced by, and only tuples and get-tuple-elements are
/// replaced. A tuple folds only when its first operand is a get-tuple-element when visited:
/// the same argument. So only computations holding a tuple or a get-tuple-element whose
/// (first) operand is one of the two are walked. They are found from the module's dense
/// opcode table, reading the records of tuples and get-tuple-elements only, where the walks
/// read every instruction's.
fn computations_to_walk(module: &Module) -> Vec<bool> {
    const KINDS: [Opcode; 2] = [Opcode::Tuple, Opcode::GetTupleElement];
    let mut walk = vec![false; module.comp_capacity()];
    for i in module.instructions_with_opcode(&KINDS) {
        let seed = module
            .operands(i)
            .first()
            .is_some_and(|&op| KINDS.contains(&module.opcode(op)));
        if seed {
            walk[module.instr(i).parent().index()] = true;
        }
    }
    walk
}

impl Pass for TupleSimplifier {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        self.replaced = 0;
        let mut replaced = Vec::new();
        let mut walker = PostOrders::new(module);
        let walk = computations_to_walk(module);
        for c in module.computations().to_vec() {
            if !walk[c.index()]
                || (self.options.exclude_entry_computation && module.entry() == Some(c))
            {
                continue;
            }
            // Operands come before users, so removing dead ones at the end changes nothing
            // that the walk looks at.
            for id in walker.post_order(module, c) {
                let Some(new) = replacement(module, id) else {
                    continue;
                };
                module.replace_all_uses_with(id, new)?;
                self.replaced += 1;
                replaced.push(id);
            }
        }
        if !replaced.is_empty() {
            // Replacing uses changes no opcode and no called computation, so the side effects
            // are the same as before the walk: the analysis is made only when there is
            // something to remove.
            let effects = SideEffects::new(module);
            remove_dead(module, &replaced, &effects)?;
        }
        Ok(self.replaced > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testutil::*;

    #[test]
    fn folds_gte_chains_through_nested_tuples() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p0 = b.param(c, 0, f32v(4));
        let p1 = b.param(c, 1, f32s());
        let inner = b.tuple(c, "inner", &[p0, p1]);
        let outer = b.tuple(c, "outer", &[inner, p1]);
        let g0 = b.gte(c, "g0", outer, 0);
        let g00 = b.gte(c, "g00", g0, 0);
        let r = b.op(c, "r", Opcode::Negate, f32v(4), &[g00]);
        b.m.set_root(c, r);
        let mut pass = TupleSimplifier::default();
        assert!(pass.run(&mut b.m).unwrap());
        assert_eq!(b.m.operands(r), &[p0]);
        assert_eq!(names(&b.m, c), ["main.p0", "main.p1", "r"]);
        assert!(!pass.run(&mut b.m).unwrap());
    }

    #[test]
    fn computations_without_a_seed_are_not_walked() {
        let mut b = Builder::new("m");
        let st = tuple(&[f32v(4), f32s()]);
        let c = b.comp("main");
        let p = b.param(c, 0, st.clone());
        let g = b.gte(c, "g", p, 0);
        let n = b.op(c, "n", Opcode::Negate, f32v(4), &[g]);
        let s = b.gte(c, "s", p, 1);
        let root = b.tuple(c, "root", &[n, s]);
        b.m.set_root(c, root);
        // The get-tuple-elements read a parameter, the tuple starts with a negate.
        assert!(!computations_to_walk(&b.m)[c.index()]);
        assert!(!TupleSimplifier::default().run(&mut b.m).unwrap());
        // Rebuilding the parameter from its elements is a seed.
        let again = b.tuple(c, "again", &[g, s]);
        let root = b.tuple(c, "root2", &[root, again]);
        b.m.set_root(c, root);
        assert!(computations_to_walk(&b.m)[c.index()]);
        assert!(TupleSimplifier::default().run(&mut b.m).unwrap());
        assert_eq!(b.m.operands(root)[1], p);
    }

    #[test]
    fn rebuilt_tuple_becomes_its_source_unless_reordered() {
        let mut b = Builder::new("m");
        let st = tuple(&[f32v(4), f32s()]);
        let c = b.comp("main");
        let p = b.param(c, 0, st.clone());
        let a = b.gte(c, "a", p, 0);
        let n = b.gte(c, "n", p, 1);
        let same = b.tuple(c, "same", &[a, n]);
        let swapped_src = b.param(c, 1, tuple(&[f32s(), f32s()]));
        let x = b.gte(c, "x", swapped_src, 1);
        let y = b.gte(c, "y", swapped_src, 0);
        let swapped = b.tuple(c, "swapped", &[x, y]);
        let root = b.tuple(c, "root", &[same, swapped]);
        b.m.set_root(c, root);
        b.m.set_entry(c);
        let mut excl = TupleSimplifier::with_options(TupleSimplifyOptions {
            exclude_entry_computation: true,
        });
        assert!(!excl.run(&mut b.m).unwrap());
        let mut pass = TupleSimplifier::default();
        assert!(pass.run(&mut b.m).unwrap());
        assert_eq!(b.m.operands(root), &[p, swapped]);
        assert_eq!(b.m.operands(swapped), &[x, y]);
        assert!(b.m.try_instr(a).is_none() && b.m.try_instr(n).is_none());
    }
}
