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

use std::ops::Range;

use tessera_hlo::analysis::order::PostOrders;
use tessera_hlo::analysis::{computation_post_order, CallGraph};
use tessera_hlo::fxhash::FxHashMap;
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
        // The call graph only counts call sites for `single_call_site`.
        let cg = self
            .options
            .single_call_site
            .then(|| CallGraph::new(module));
        let site_count = |c: CompId| cg.as_ref().map_or(0, |g| g.caller_callsites(c).count());
        // References to each computation from live instructions. A computation whose count
        // drops to zero through inlining is dead: its body is not inlined into (that would copy
        // what no one runs, and is what made a call chain quadratic) and, with
        // `remove_dead_callees`, it is removed.
        let mut refs = vec![0usize; module.comp_capacity()];
        for &c in module.computations() {
            for &i in module.comp(c).instructions() {
                for &k in module.called_computations(i) {
                    refs[k.index()] += 1;
                }
            }
        }
        let was_called: Vec<bool> = refs.iter().map(|&n| n > 0).collect();
        let mut dead = Vec::new();
        let mut scratch = Scratch::new(module);
        // The names of moved instructions, taken until the dead callees are removed.
        let mut held = Vec::new();
        // Callers first: every callee is still its original body when it is copied, and the
        // calls the copy brings along are inlined in the same sweep of the caller.
        let mut order = computation_post_order(module, true);
        order.reverse();
        for comp in order {
            if self.options.remove_dead_callees
                && was_called[comp.index()]
                && refs[comp.index()] == 0
                && module.entry() != Some(comp)
            {
                for &i in module.comp(comp).instructions() {
                    for &k in module.called_computations(i) {
                        refs[k.index()] -= 1;
                    }
                }
                dead.push(comp);
                continue;
            }
            let inlinable = |module: &Module, call: InstrId| {
                let i = module.instr(call);
                if i.opcode() != Opcode::Call {
                    return None;
                }
                let callee = i.to_apply()?;
                let skip = i.attrs.is_composite
                    || module.comp(callee).execution_thread != module.comp(comp).execution_thread
                    || module.comp(callee).root().is_none()
                    || (self.options.single_call_site && site_count(callee) != 1);
                (!skip).then_some(callee)
            };
            let base: Vec<InstrId> = module.comp(comp).instructions().to_vec();
            let mut work: Vec<InstrId> = base
                .iter()
                .rev()
                .copied()
                .filter(|&i| inlinable(module, i).is_some())
                .collect();
            if work.is_empty() {
                continue;
            }
            let caller_root = module.comp(comp).root();
            // Each inlined call's copies, as a range of `copied`.
            let mut expansion: FxHashMap<InstrId, Range<usize>> = FxHashMap::default();
            let mut copied: Vec<InstrId> = Vec::new();
            let mut calls = Vec::new();
            while let Some(call) = work.pop() {
                let Some(callee) = inlinable(module, call) else {
                    continue;
                };
                // The only reference to a callee that will be removed: move its body.
                let movable = self.options.remove_dead_callees
                    && refs[callee.index()] == 1
                    && module.entry() != Some(callee);
                let start = copied.len();
                inline_body(module, &mut scratch, call, movable, &mut held, &mut copied)?;
                refs[callee.index()] -= 1;
                self.inlined += 1;
                // Moved calls were counted where they were.
                if !movable {
                    for &c in &copied[start..] {
                        for &k in module.called_computations(c) {
                            refs[k.index()] += 1;
                        }
                    }
                }
                // Inline the copied calls next, in order.
                work.extend(
                    copied[start..]
                        .iter()
                        .rev()
                        .filter(|&&c| inlinable(module, c).is_some()),
                );
                expansion.insert(call, start..copied.len());
                calls.push(call);
            }
            let seq = module
                .schedule
                .as_ref()
                .and_then(|s| s.sequences.get(&comp))
                .map(|seq| expand(seq, &expansion, &copied));
            module.remove_instructions(&calls)?;
            module.set_instruction_order(comp, expand(&base, &expansion, &copied));
            if let (Some(seq), Some(s)) = (seq, module.schedule.as_mut()) {
                s.sequences.insert(comp, seq);
            }
            if let Some(r) = caller_root.filter(|&r| module.try_instr(r).is_some()) {
                module.set_root(comp, r);
            }
        }
        // Every computation that inlining left unreferenced was found dead in the sweep: its
        // callers all came before it.
        module.release_names(held.iter().map(String::as_str));
        module.remove_computations(&dead);
        Ok(self.inlined > 0)
    }
}

/// `base` with every inlined call replaced by its copies, recursively (the copies of a callee
/// may hold calls inlined in turn).
fn expand(
    base: &[InstrId],
    expansion: &FxHashMap<InstrId, Range<usize>>,
    copied: &[InstrId],
) -> Vec<InstrId> {
    let mut out = Vec::with_capacity(base.len());
    let mut stack = vec![base.iter()];
    while let Some(it) = stack.last_mut() {
        match it.next() {
            None => {
                stack.pop();
            }
            Some(i) => match expansion.get(i) {
                Some(copies) => stack.push(copied[copies.clone()].iter()),
                None => out.push(*i),
            },
        }
    }
    out
}

/// What one run reuses for every call it inlines: a deep call chain inlines tens of
/// thousands of small bodies, and a handful of allocations for each, freed into a heap far
/// larger than the caches, cost more than the copying.
struct Scratch {
    walker: PostOrders,
    /// What stands for each callee instruction in the caller (the copy, the moved
    /// instruction, or the call's operand for a parameter), by id; `None` outside the body
    /// being inlined.
    map: Vec<Option<InstrId>>,
    /// The callee's post order.
    order: Vec<InstrId>,
    /// The callee's instructions but its parameters, in `order`.
    added: Vec<InstrId>,
    /// The call's operands.
    operands: Vec<InstrId>,
}

impl Scratch {
    fn new(module: &Module) -> Scratch {
        Scratch {
            walker: PostOrders::new(module),
            map: Vec::new(),
            order: Vec::new(),
            added: Vec::new(),
            operands: Vec::new(),
        }
    }

    fn mapped(&self, id: InstrId) -> InstrId {
        self.map[id.index()].expect("every callee instruction is mapped")
    }
}

/// Copies the callee's body into the caller for one `call` and makes the call's users use the
/// copy of the callee root. The call itself stays, unused, for the caller to remove and to
/// replace in its order by the copies, which are appended to `copies` (in the callee's post
/// order).
///
/// With `movable` (no other instruction calls the callee, and it will be removed as dead),
/// the body is moved instead of copied: the same instructions come out, named as the copies
/// would be (the originals' names stay taken until `held` is released, where the dead callees
/// are removed), with the same users and control edges, without allocating, filling and then
/// dropping a second copy of every instruction of a call chain.
fn inline_body(
    module: &mut Module,
    scratch: &mut Scratch,
    call: InstrId,
    movable: bool,
    held: &mut Vec<String>,
    copies: &mut Vec<InstrId>,
) -> Result<()> {
    let caller = module.instr(call).parent();
    let callee = module.instr(call).to_apply().expect("a call has a callee");
    scratch.operands.clear();
    scratch.operands.extend_from_slice(module.operands(call));
    let mut order = std::mem::take(&mut scratch.order);
    scratch.walker.post_order_into(module, callee, &mut order);
    if scratch.map.len() < module.instr_capacity() {
        scratch.map.resize(module.instr_capacity(), None);
    }
    let result = copy_or_move(
        module, scratch, &order, call, callee, caller, movable, held, copies,
    );
    // Unmap the body for the next call, whatever happened.
    for id in &order {
        scratch.map[id.index()] = None;
    }
    scratch.order = order;
    result
}

/// The body of [`inline_body`], with the callee's post order in `order`.
#[allow(clippy::too_many_arguments)]
fn copy_or_move(
    module: &mut Module,
    scratch: &mut Scratch,
    order: &[InstrId],
    call: InstrId,
    callee: CompId,
    caller: CompId,
    movable: bool,
    held: &mut Vec<String>,
    copies: &mut Vec<InstrId>,
) -> Result<()> {
    let movable = movable
        && module.comp(callee).parameters().all(|p| {
            let p = module.instr(p);
            p.control_predecessors().is_empty() && p.control_successors().is_empty()
        });
    scratch.added.clear();
    for &id in order {
        let src = module.instr(id);
        if src.opcode() == Opcode::Parameter {
            let n = src.attrs.parameter_number as usize;
            let Some(&op) = scratch.operands.get(n) else {
                return Err(crate::PassError::Failed(format!(
                    "%{}: calls {} with {} operands, but it has parameter {n}",
                    module.instr(call).name(),
                    module.comp(callee).name(),
                    scratch.operands.len()
                )));
            };
            scratch.map[id.index()] = Some(op);
            continue;
        }
        if movable {
            scratch.map[id.index()] = Some(id);
        } else {
            let ops: Vec<InstrId> = src.operands().iter().map(|&o| scratch.mapped(o)).collect();
            let copy = src.clone().with_operands(&ops);
            let name = module.unique_copy_name(copy.name());
            let copy = copy.with_name(name);
            let nid = module.add_instruction(caller, copy)?;
            scratch.map[id.index()] = Some(nid);
        }
        scratch.added.push(id);
    }
    // The instructions that take the call's control predecessors (decided on the originals,
    // before a move gives them new operands).
    let starts: Vec<bool> = scratch
        .added
        .iter()
        .map(|&id| {
            let i = module.instr(id);
            i.operands()
                .iter()
                .all(|&o| module.opcode(o) == Opcode::Parameter)
                && i.control_predecessors().is_empty()
        })
        .collect();
    let new_root = scratch.mapped(module.comp(callee).root().unwrap());
    if movable {
        for &id in &scratch.added {
            let base = module.instr(id).name().to_string();
            let name = module.unique_copy_name(&base);
            held.push(module.rename_instruction_holding_old(id, name)?);
        }
        module.move_instructions(callee, caller, &scratch.added, &scratch.operands)?;
    } else {
        // Control edges inside the callee.
        for &id in &scratch.added {
            for s in module.instr(id).control_successors().to_vec() {
                if let (Some(a), Some(b)) = (scratch.map[id.index()], scratch.map[s.index()]) {
                    module.add_control_dependency(a, b);
                }
            }
        }
    }
    // The call's own control edges.
    let preds = module.instr(call).control_predecessors().to_vec();
    let succs = module.instr(call).control_successors().to_vec();
    for (&id, &start) in scratch.added.iter().zip(&starts) {
        if start {
            for &p in &preds {
                module.add_control_dependency(p, scratch.mapped(id));
            }
        }
    }
    if scratch.added.iter().any(|&a| scratch.mapped(a) == new_root) {
        for &s in &succs {
            module.add_control_dependency(new_root, s);
        }
    }
    module.replace_all_uses_with(call, new_root)?;
    copies.extend(scratch.added.iter().map(|&a| scratch.mapped(a)));
    Ok(())
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
        // Names: copies get a fresh `.N` while the original name is taken. Callers are inlined
        // into first, so `inner`'s body is copied once, straight into `main` (neg -> neg.1).
        assert_eq!(names(&b.m, main), ["main.p0", "neg.1", "add.1", "exp"]);
        let neg1 = b.m.find_instruction("neg.1").unwrap();
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

    /// The entry's instructions with their users and control edges, by name, in stored order.
    fn entry_listing(m: &Module) -> Vec<String> {
        let e = m.entry().unwrap();
        let n = |ids: &[InstrId]| {
            ids.iter()
                .map(|&i| m.instr(i).name().to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        m.comp(e)
            .instructions()
            .iter()
            .map(|&i| {
                let x = m.instr(i);
                format!(
                    "{} ops[{}] users[{}] preds[{}] succs[{}]",
                    x.name(),
                    n(m.operands(i)),
                    n(m.users(i)),
                    n(x.control_predecessors()),
                    n(x.control_successors())
                )
            })
            .collect()
    }

    #[test]
    fn moving_a_dead_callee_gives_what_copying_it_gives() {
        // Callees called once are moved when their removal follows (the default); with
        // `remove_dead_callees=false` they are copied. The entry must come out the same:
        // names (`.N` taken while the originals exist), operands, users in the order copying
        // adds them (post order, not text order), control edges inside the callee and the
        // call's own, an operand used twice, a dead instruction, a callee whose root is a
        // parameter, and a chain of calls.
        let text = r#"HloModule m

%inner (a: f32[4], b: f32[4]) -> f32[4] {
  %a = f32[4] parameter(0)
  %b = f32[4] parameter(1)
  %d = f32[4] negate(%a)
  %m = f32[4] multiply(%a, %a)
  %dead = f32[4] exponential(%b)
  ROOT %r = f32[4] add(%m, %d), control-predecessors={%d}
}

%ident (i: f32[4]) -> f32[4] {
  ROOT %i = f32[4] parameter(0)
}

%outer (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %c = f32[4] call(%x, %y), to_apply=%inner
  %j = f32[4] call(%c), to_apply=%ident
  ROOT %r.1 = f32[4] subtract(%j, %y)
}

ENTRY %main (p: f32[4], q: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  %q = f32[4] parameter(1)
  %before = f32[4] sine(%p)
  %call = f32[4] call(%p, %q), to_apply=%outer, control-predecessors={%before}
  %after = f32[4] cosine(%q), control-predecessors={%call}
  ROOT %t = f32[4] add(%call, %after)
}
"#;
        let run = |remove_dead_callees: bool| {
            let mut m = tessera_hlo::text::parse_module(text).unwrap();
            let mut pass = CallInliner::with_options(InlineOptions {
                remove_dead_callees,
                ..InlineOptions::default()
            });
            assert!(pass.run(&mut m).unwrap());
            tessera_hlo::verify::verify(&m, &Default::default()).unwrap();
            (m, pass.inlined)
        };
        // Kept callees are inlined into as well: 3 calls in the entry, 2 in `outer`.
        let ((moved, 3), (copied, 5)) = (run(true), run(false)) else {
            panic!("unexpected numbers of calls inlined");
        };
        assert_eq!(comp_names(&moved), ["main"]);
        assert_eq!(comp_names(&copied), ["inner", "ident", "outer", "main"]);
        assert_eq!(entry_listing(&moved), entry_listing(&copied));
        // The originals' names are free again once their computations are gone.
        let mut moved = moved;
        assert!(!moved.is_name_used("d") && !moved.is_name_used("x"));
        assert_eq!(moved.unique_name("d"), "d");
        let listing = entry_listing(&moved);
        // `%p` gains its users in post order (`%m` before `%d`), not in text order.
        assert_eq!(listing[0], "p ops[] users[before,m.1,d.1] preds[] succs[]");
        assert_eq!(listing[5], "r.3 ops[m.1,d.1] users[r.2] preds[d.1] succs[]");
    }
}
