//! The call graph: which instruction calls which computation, and in what context.
//!
//! A call site is an instruction with called computations. Its [`CallContext`] follows XLA's
//! `GetInstructionCallContext`: `call`, `while`, `conditional` and the async ops transfer
//! control to the callee as a whole program (*control flow*); `fusion`, `reduce`, `map`, `sort`,
//! `scatter`, `all-reduce`, custom calls ... apply the callee element-wise or as a subroutine of
//! the operation (*embedded*). A computation's context is the union over the contexts it is
//! reached with from the entry: a computation reached through control flow from an embedded
//! computation is embedded too; one reached both ways is [`CallContext::Both`].
//!
//! The graph itself is a `petgraph` `DiGraph` (node = computation, edge = one call site and
//! callee) so graph algorithms (cycles, dominators, SCCs) are available through
//! [`CallGraph::graph`].

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::Direction;

use crate::instruction::{CompId, InstrId};
use crate::module::Module;
use crate::opcode::Opcode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallContext {
    /// Not reached from the entry (or an instruction that calls nothing).
    None,
    ControlFlow,
    Embedded,
    Both,
}

impl CallContext {
    pub fn union(self, other: CallContext) -> CallContext {
        use CallContext::*;
        match (self, other) {
            (None, x) | (x, None) => x,
            (a, b) if a == b => a,
            _ => Both,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CallContext::None => "none",
            CallContext::ControlFlow => "control-flow",
            CallContext::Embedded => "embedded",
            CallContext::Both => "both",
        }
    }
}

/// The context in which an instruction of this opcode calls its computations.
pub fn instruction_call_context(opcode: Opcode) -> CallContext {
    use Opcode::*;
    match opcode {
        Call | Conditional | While | AsyncStart | AsyncUpdate | AsyncDone => {
            CallContext::ControlFlow
        }
        AllReduce | AllReduceStart | ReduceScatter | Map | Reduce | ReduceWindow | Scatter
        | SelectAndScatter | Sort | TopK | Fusion | CustomCall | Scan | CollectiveReduce => {
            CallContext::Embedded
        }
        _ => CallContext::None,
    }
}

/// An instruction that calls computations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    pub instruction: InstrId,
    /// The computation holding the instruction.
    pub caller: CompId,
    pub callees: Vec<CompId>,
    pub context: CallContext,
}

/// Per-computation facts of the call graph.
#[derive(Clone, Debug, Default)]
struct Node {
    /// Call sites inside this computation (indices into `CallGraph::sites`).
    callsites: Vec<usize>,
    /// Call sites anywhere that call this computation (one entry per (site, callee) pair).
    caller_callsites: Vec<usize>,
    context: Option<CallContext>,
    /// Longest path from the entry.
    depth: usize,
}

pub struct CallGraph {
    graph: DiGraph<CompId, usize>,
    node_of: Vec<Option<NodeIndex>>,
    nodes: Vec<Node>,
    sites: Vec<CallSite>,
    entry: Option<CompId>,
}

impl CallGraph {
    pub fn new(module: &Module) -> CallGraph {
        let mut graph = DiGraph::new();
        let mut node_of = vec![None; module.comp_capacity()];
        let mut nodes = vec![Node::default(); module.comp_capacity()];
        for &c in module.computations() {
            node_of[c.index()] = Some(graph.add_node(c));
        }
        let mut sites = Vec::new();
        for &c in module.computations() {
            for &i in module.comp(c).instructions() {
                let called: Vec<CompId> = module
                    .called_computations(i)
                    .iter()
                    .copied()
                    .filter(|&x| module.try_comp(x).is_some())
                    .collect();
                if called.is_empty() {
                    continue;
                }
                let k = sites.len();
                for &callee in &called {
                    graph.add_edge(
                        node_of[c.index()].unwrap(),
                        node_of[callee.index()].unwrap(),
                        k,
                    );
                    nodes[callee.index()].caller_callsites.push(k);
                }
                nodes[c.index()].callsites.push(k);
                sites.push(CallSite {
                    instruction: i,
                    caller: c,
                    callees: called,
                    context: instruction_call_context(module.instr(i).opcode),
                });
            }
        }
        let mut cg = CallGraph {
            graph,
            node_of,
            nodes,
            sites,
            entry: module.entry(),
        };
        cg.propagate_contexts(module);
        cg
    }

    fn propagate_contexts(&mut self, module: &Module) {
        let Some(entry) = self.entry else { return };
        // Contexts only grow (None < ControlFlow/Embedded < Both), so a worklist terminates.
        self.nodes[entry.index()].context = Some(CallContext::ControlFlow);
        let mut work = vec![entry];
        while let Some(c) = work.pop() {
            let ctx = self.nodes[c.index()].context.unwrap_or(CallContext::None);
            let depth = self.nodes[c.index()].depth;
            for k in self.nodes[c.index()].callsites.clone() {
                let site_ctx = match self.sites[k].context {
                    CallContext::Embedded => CallContext::Embedded,
                    // Control flow inherits the caller's context; an instruction that calls
                    // without a known context is treated like control flow.
                    _ => ctx,
                };
                for callee in self.sites[k].callees.clone() {
                    let n = &mut self.nodes[callee.index()];
                    let new = n.context.unwrap_or(CallContext::None).union(site_ctx);
                    let deeper = depth + 1 > n.depth && depth < module.comp_capacity();
                    if n.context != Some(new) || deeper {
                        n.context = Some(new);
                        n.depth = n.depth.max(depth + 1);
                        work.push(callee);
                    }
                }
            }
        }
    }

    /// The petgraph graph: node weights are computations, edge weights index
    /// [`CallGraph::callsite`].
    pub fn graph(&self) -> &DiGraph<CompId, usize> {
        &self.graph
    }

    pub fn node(&self, comp: CompId) -> NodeIndex {
        self.node_of[comp.index()].expect("computation not in the call graph")
    }

    pub fn callsite(&self, k: usize) -> &CallSite {
        &self.sites[k]
    }

    /// Every call site of the module.
    pub fn callsites_all(&self) -> &[CallSite] {
        &self.sites
    }

    /// Call sites inside `comp`.
    pub fn callsites(&self, comp: CompId) -> impl Iterator<Item = &CallSite> + '_ {
        self.nodes[comp.index()]
            .callsites
            .iter()
            .map(|&k| &self.sites[k])
    }

    /// Call sites that call `comp` (a site calling it twice, e.g. both branches of a
    /// conditional, appears twice).
    pub fn caller_callsites(&self, comp: CompId) -> impl Iterator<Item = &CallSite> + '_ {
        self.nodes[comp.index()]
            .caller_callsites
            .iter()
            .map(|&k| &self.sites[k])
    }

    /// Distinct computations that call `comp`, in call-site order.
    pub fn callers(&self, comp: CompId) -> Vec<CompId> {
        let mut v = Vec::new();
        for s in self.caller_callsites(comp) {
            if !v.contains(&s.caller) {
                v.push(s.caller);
            }
        }
        v
    }

    /// Distinct computations that `comp` calls.
    pub fn callees(&self, comp: CompId) -> Vec<CompId> {
        let mut v = Vec::new();
        for s in self.callsites(comp) {
            for &c in &s.callees {
                if !v.contains(&c) {
                    v.push(c);
                }
            }
        }
        v
    }

    /// The context of a computation; [`CallContext::None`] when unreachable from the entry.
    pub fn context(&self, comp: CompId) -> CallContext {
        self.nodes[comp.index()]
            .context
            .unwrap_or(CallContext::None)
    }

    /// Length of the longest call chain from the entry to `comp` (0 for the entry).
    pub fn depth(&self, comp: CompId) -> usize {
        self.nodes[comp.index()].depth
    }

    pub fn is_reachable(&self, comp: CompId) -> bool {
        self.nodes[comp.index()].context.is_some()
    }

    /// True when `a` calls `b` directly or through other computations.
    pub fn dominates_call(&self, a: CompId, b: CompId) -> bool {
        petgraph::algo::has_path_connecting(&self.graph, self.node(a), self.node(b), None)
    }

    /// True if some computation calls itself, directly or not (malformed HLO).
    pub fn has_cycle(&self) -> bool {
        petgraph::algo::is_cyclic_directed(&self.graph)
    }

    /// XLA's `IsFlattened`: no computation is called in both contexts, and every control-flow
    /// computation has exactly one call site (async computations excepted).
    pub fn is_flattened(&self, module: &Module) -> bool {
        module
            .computations()
            .iter()
            .all(|&c| match self.context(c) {
                CallContext::Both => false,
                CallContext::ControlFlow => {
                    self.nodes[c.index()].caller_callsites.len() <= 1
                        || self
                            .caller_callsites(c)
                            .all(|s| module.instr(s.instruction).opcode.is_async())
                }
                _ => true,
            })
    }

    /// Computations that call `comp`, through petgraph (same as [`CallGraph::callers`] but
    /// without call-site order).
    pub fn predecessors(&self, comp: CompId) -> impl Iterator<Item = CompId> + '_ {
        self.graph
            .neighbors_directed(self.node(comp), Direction::Incoming)
            .map(|n| self.graph[n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testutil::*;

    /// main: while(cond, body) and call(body_helper) and reduce(to_apply=add);
    /// body: calls `add` through a map and `helper` through a call.
    fn module() -> (Builder, [CompId; 6]) {
        let mut b = Builder::new("m");
        let add = b.scalar_add("add");
        let helper = b.comp("helper");
        let hp = b.param(helper, 0, f32v(4));
        let hn = b.op(helper, "h.neg", Opcode::Negate, f32v(4), &[hp]);
        b.m.set_root(helper, hn);
        let cond = b.comp("cond");
        let cp = b.param(cond, 0, f32v(4));
        let _ = b.op(
            cond,
            "c.pred",
            Opcode::Constant,
            Shape::scalar(ElementType::Pred),
            &[],
        );
        let _ = cp;
        let body = b.comp("body");
        let bp = b.param(body, 0, f32v(4));
        let map = b.op(body, "b.map", Opcode::Map, f32v(4), &[bp, bp]);
        b.m.instr_mut(map).called.push(add);
        let call = b.op(body, "b.call", Opcode::Call, f32v(4), &[map]);
        b.m.instr_mut(call).called.push(helper);
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let w = b.op(main, "while", Opcode::While, f32v(4), &[p]);
        b.m.instr_mut(w).called.extend([cond, body]);
        let c2 = b.op(main, "call2", Opcode::Call, f32v(4), &[w]);
        b.m.instr_mut(c2).called.push(helper);
        let zero = b.op(main, "zero", Opcode::Constant, f32s(), &[]);
        let red = b.op(main, "red", Opcode::Reduce, f32s(), &[c2, zero]);
        b.m.instr_mut(red).called.push(add);
        b.m.set_entry(main);
        (b, [add, helper, cond, body, main, CompId::new(99)])
    }

    use crate::opcode::Opcode;
    use crate::shape::Shape;
    use crate::types::ElementType;

    #[test]
    fn contexts_callers_and_flatness() {
        let (b, [add, helper, cond, body, main, _]) = module();
        let cg = CallGraph::new(&b.m);
        assert_eq!(cg.context(main), CallContext::ControlFlow);
        assert_eq!(cg.context(cond), CallContext::ControlFlow);
        assert_eq!(cg.context(body), CallContext::ControlFlow);
        assert_eq!(cg.context(helper), CallContext::ControlFlow);
        assert_eq!(cg.context(add), CallContext::Embedded);
        assert_eq!(cg.callers(helper), vec![body, main]);
        assert_eq!(cg.callers(add), vec![body, main]);
        assert_eq!(cg.callees(main), vec![cond, body, helper, add]);
        assert_eq!(cg.depth(main), 0);
        assert_eq!(cg.depth(helper), 2);
        assert_eq!(cg.depth(add), 2);
        assert_eq!(cg.callsites(main).count(), 3);
        assert_eq!(cg.caller_callsites(helper).count(), 2);
        assert!(cg.dominates_call(main, add));
        assert!(!cg.dominates_call(helper, add));
        assert!(!cg.has_cycle());
        // helper has two control-flow call sites: not flat. add is shared but embedded: fine.
        assert!(!cg.is_flattened(&b.m));
        let mut preds: Vec<CompId> = cg.predecessors(add).collect();
        preds.sort();
        assert_eq!(preds, vec![body, main]);
    }

    #[test]
    fn control_flow_under_embedded_is_embedded_and_mixed_is_both() {
        let mut b = Builder::new("m");
        let inner = b.scalar_add("inner");
        // `outer` is applied by a reduce (embedded) and calls `inner` through a call.
        let outer = b.comp("outer");
        let x = b.param(outer, 0, f32s());
        let y = b.param(outer, 1, f32s());
        let call = b.op(outer, "o.call", Opcode::Call, f32s(), &[x, y]);
        b.m.instr_mut(call).called.push(inner);
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let z = b.op(main, "z", Opcode::Constant, f32s(), &[]);
        let red = b.op(main, "red", Opcode::Reduce, f32s(), &[p, z]);
        b.m.instr_mut(red).called.push(outer);
        // ... and `inner` is also called directly from main.
        let c = b.op(main, "c", Opcode::Call, f32s(), &[red, z]);
        b.m.instr_mut(c).called.push(inner);
        b.m.set_entry(main);
        let cg = CallGraph::new(&b.m);
        assert_eq!(cg.context(outer), CallContext::Embedded);
        assert_eq!(cg.context(inner), CallContext::Both);
        assert!(!cg.is_flattened(&b.m));
        let unreachable = b.comp("unreachable");
        let cg = CallGraph::new(&b.m);
        assert!(!cg.is_reachable(unreachable));
        assert_eq!(cg.context(unreachable), CallContext::None);
    }
}
