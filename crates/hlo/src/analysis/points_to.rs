//! Tuple points-to analysis and logical buffers, after XLA's `TuplePointsToAnalysis`.
//!
//! Every array or tuple value lives in *logical buffers*: one per (defining instruction, shape
//! index). A tuple's top-level buffer holds pointers to its elements' buffers, so a `tuple` only
//! defines its index table at `{}` and forwards its operands' buffers below it; a
//! `get-tuple-element` defines nothing and forwards the element's buffers; `bitcast`, `domain`,
//! `add-dependency` and `opt-barrier` forward their operand; `copy` defines a new top level and
//! shares the rest (a shallow copy). Everything else (parameters, `while`, `conditional`,
//! `call`, arithmetic ...) defines a fresh buffer at every index; custom calls reuse the operand
//! buffers their `output_to_operand_aliasing` names.
//!
//! For each instruction and index, the *points-to set* lists the buffers the value at that index
//! may be (more than one only for ambiguous values, which XLA's HLO no longer produces since
//! `select` on tuples is gone), plus the *tuple sources*: the instructions that built the tuple
//! at that index. The *aliases* of a buffer are every (instruction, index) whose points-to set
//! contains it: rematerialization and liveness use them to find every use of a buffer.

use std::collections::BTreeMap;
use std::fmt::Write;

use smallvec::SmallVec;

use crate::analysis::order::{computation_post_order, post_order, post_orders};
use crate::instruction::InstrId;
use crate::module::Module;
use crate::opcode::Opcode;
use crate::shape::Shape;

/// A path into a tuple shape; `[]` is the value itself.
pub type ShapeIndex = Vec<usize>;

/// A logical buffer, dense from 0 in the order the analysis met them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(u32);

impl BufferId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for BufferId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "buf{}", self.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogicalBuffer {
    pub id: BufferId,
    /// The instruction that defines (writes) the buffer.
    pub instruction: InstrId,
    pub index: ShapeIndex,
    /// The sub-shape at `index` of the instruction's shape.
    pub shape: Shape,
}

/// A place a buffer can be read from: the value of `instruction` at `index`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferAlias {
    pub instruction: InstrId,
    pub index: ShapeIndex,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointsToElement {
    pub buffers: SmallVec<[BufferId; 1]>,
    pub tuple_sources: SmallVec<[InstrId; 1]>,
}

/// The points-to sets of one instruction, one element per shape index (pre-order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointsToSet {
    elements: BTreeMap<ShapeIndex, PointsToElement>,
}

impl PointsToSet {
    fn empty(shape: &Shape) -> PointsToSet {
        let mut elements = BTreeMap::new();
        shape.for_each_subshape(|idx, _| {
            elements.insert(idx.to_vec(), PointsToElement::default());
        });
        PointsToSet { elements }
    }

    pub fn element(&self, index: &[usize]) -> Option<&PointsToElement> {
        self.elements.get(index)
    }

    /// Buffers the value at `index` may be (empty if the index is not in the shape).
    pub fn buffers(&self, index: &[usize]) -> &[BufferId] {
        self.elements.get(index).map_or(&[], |e| &e.buffers)
    }

    pub fn tuple_sources(&self, index: &[usize]) -> &[InstrId] {
        self.elements.get(index).map_or(&[], |e| &e.tuple_sources)
    }

    /// Every (index, element) in pre-order.
    pub fn iter(&self) -> impl Iterator<Item = (&ShapeIndex, &PointsToElement)> {
        self.elements.iter()
    }

    /// True if some index may be more than one buffer.
    pub fn is_ambiguous(&self) -> bool {
        self.elements.values().any(|e| e.buffers.len() > 1)
    }

    /// True if no buffer appears at two indices.
    pub fn is_distinct(&self) -> bool {
        let all: Vec<BufferId> = self
            .elements
            .values()
            .flat_map(|e| e.buffers.clone())
            .collect();
        let mut s = all.clone();
        s.sort();
        s.dedup();
        s.len() == all.len()
    }

    /// Every buffer in the set, sorted, without repeats.
    pub fn flattened(&self) -> Vec<BufferId> {
        let mut s: Vec<BufferId> = self
            .elements
            .values()
            .flat_map(|e| e.buffers.clone())
            .collect();
        s.sort();
        s.dedup();
        s
    }

    pub fn contains(&self, b: BufferId) -> bool {
        self.elements.values().any(|e| e.buffers.contains(&b))
    }

    /// Copies `src`'s element at `src_index` (and its sub-indices) to `dst_index` here.
    fn copy_subtree(&mut self, dst_index: &[usize], src: &PointsToSet, src_index: &[usize]) {
        for (idx, e) in src.elements.range(src_index.to_vec()..) {
            if !idx.starts_with(src_index) {
                break;
            }
            let mut target = dst_index.to_vec();
            target.extend_from_slice(&idx[src_index.len()..]);
            if let Some(d) = self.elements.get_mut(&target) {
                *d = e.clone();
            }
        }
    }
}

pub struct TuplePointsTo {
    buffers: Vec<LogicalBuffer>,
    sets: Vec<Option<PointsToSet>>,
    aliases: Vec<Vec<BufferAlias>>,
    defined: Vec<Vec<BufferId>>,
}

impl TuplePointsTo {
    pub fn new(module: &Module) -> TuplePointsTo {
        let mut a = TuplePointsTo {
            buffers: Vec::new(),
            sets: vec![None; module.instr_capacity()],
            aliases: Vec::new(),
            defined: vec![Vec::new(); module.instr_capacity()],
        };
        // Each computation's post-order once, for both walks.
        let orders = post_orders(module, &computation_post_order(module, true));
        for order in &orders {
            for &id in order {
                let set = a.compute(module, id);
                a.sets[id.index()] = Some(set);
            }
        }
        a.aliases = vec![Vec::new(); a.buffers.len()];
        for order in &orders {
            for &id in order {
                let set = a.sets[id.index()].as_ref().unwrap();
                for (idx, e) in set.iter() {
                    for &b in &e.buffers {
                        a.aliases[b.index()].push(BufferAlias {
                            instruction: id,
                            index: idx.clone(),
                        });
                    }
                    if let [b] = e.buffers[..] {
                        if a.buffers[b.index()].instruction == id {
                            a.defined[id.index()].push(b);
                        }
                    }
                }
            }
        }
        a
    }

    fn new_buffer(&mut self, module: &Module, id: InstrId, index: &[usize]) -> BufferId {
        let b = BufferId(self.buffers.len() as u32);
        let shape = module
            .instr(id)
            .shape
            .subshape(index)
            .cloned()
            .unwrap_or(Shape::Opaque);
        self.buffers.push(LogicalBuffer {
            id: b,
            instruction: id,
            index: index.to_vec(),
            shape,
        });
        b
    }

    /// Points-to set of operand `k`, or `None` for a malformed module (missing operand).
    fn operand_set(&self, module: &Module, id: InstrId, k: usize) -> Option<&PointsToSet> {
        let op = *module.operands(id).get(k)?;
        self.sets[op.index()].as_ref()
    }

    fn define_all(&mut self, module: &Module, id: InstrId, set: &mut PointsToSet) {
        let indices: Vec<ShapeIndex> = set.elements.keys().cloned().collect();
        for idx in indices {
            let b = self.new_buffer(module, id, &idx);
            set.elements.get_mut(&idx).unwrap().buffers = SmallVec::from_elem(b, 1);
        }
        if module.instr(id).shape.is_tuple() {
            set.elements
                .get_mut(&Vec::new())
                .unwrap()
                .tuple_sources
                .push(id);
        }
    }

    /// Defines a fresh buffer at every index of `set` that is still empty.
    fn fill_empty(&mut self, module: &Module, id: InstrId, set: &mut PointsToSet) {
        let empty: Vec<ShapeIndex> = set
            .elements
            .iter()
            .filter(|(_, e)| e.buffers.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for idx in empty {
            let b = self.new_buffer(module, id, &idx);
            set.elements.get_mut(&idx).unwrap().buffers.push(b);
        }
    }

    fn compute(&mut self, module: &Module, id: InstrId) -> PointsToSet {
        let instr = module.instr(id);
        let mut set = PointsToSet::empty(&instr.shape);
        let forward = |a: &Self, set: &mut PointsToSet, k: usize, src: &[usize], dst: &[usize]| {
            if let Some(op) = a.operand_set(module, id, k) {
                set.copy_subtree(dst, op, src);
            }
        };
        match instr.opcode {
            Opcode::GetTupleElement => {
                let k = usize::try_from(instr.attrs.tuple_index).unwrap_or(usize::MAX);
                forward(self, &mut set, 0, &[k], &[]);
            }
            Opcode::Bitcast | Opcode::Domain | Opcode::AddDependency => {
                forward(self, &mut set, 0, &[], &[]);
            }
            Opcode::OptimizationBarrier => forward(self, &mut set, 0, &[], &[]),
            Opcode::Copy => {
                forward(self, &mut set, 0, &[], &[]);
                let top = set.elements.get_mut(&Vec::new()).unwrap();
                top.buffers.clear();
                top.tuple_sources.clear();
            }
            Opcode::Tuple => {
                for k in 0..module.operands(id).len() {
                    forward(self, &mut set, k, &[], &[k]);
                }
                set.elements
                    .get_mut(&Vec::new())
                    .unwrap()
                    .tuple_sources
                    .push(id);
                let top = self.new_buffer(module, id, &[]);
                set.elements.get_mut(&Vec::new()).unwrap().buffers = SmallVec::from_elem(top, 1);
            }
            Opcode::Send => {
                // (aliased operand, u32 context, token)
                forward(self, &mut set, 0, &[], &[0]);
                set.elements
                    .get_mut(&Vec::new())
                    .unwrap()
                    .tuple_sources
                    .push(id);
            }
            Opcode::RecvDone => {
                // {0} is the received data, which Recv's {0} already holds.
                forward(self, &mut set, 0, &[0], &[0]);
            }
            Opcode::CopyStart => {
                // (destination, source, context): {1} aliases the operand.
                forward(self, &mut set, 0, &[], &[1]);
            }
            Opcode::CopyDone => forward(self, &mut set, 0, &[0], &[]),
            Opcode::AsyncStart => {
                // {0, k, ...} aliases operand k.
                for k in 0..module.operands(id).len() {
                    forward(self, &mut set, k, &[], &[0, k]);
                }
            }
            Opcode::AsyncUpdate => forward(self, &mut set, 0, &[], &[]),
            Opcode::AsyncDone => forward(self, &mut set, 0, &[1], &[]),
            Opcode::CustomCall | Opcode::Fusion => {
                // Outputs aliased to operands (custom calls keep theirs in their own attributes,
                // fusions in the common one) forward the operand's buffers.
                let aliasing = match (&instr.attrs.custom_call, instr.opcode) {
                    (Some(cc), Opcode::CustomCall) => &cc.output_to_operand_aliasing,
                    _ => &instr.attrs.output_to_operand_aliasing,
                };
                for alias in aliasing {
                    let dst: Vec<usize> = alias.output_index.iter().map(|&x| x as usize).collect();
                    let src: Vec<usize> = alias.operand_index.iter().map(|&x| x as usize).collect();
                    forward(self, &mut set, alias.operand as usize, &src, &dst);
                }
                if instr.shape.is_tuple() {
                    set.elements
                        .get_mut(&Vec::new())
                        .unwrap()
                        .tuple_sources
                        .push(id);
                }
            }
            _ => {
                self.define_all(module, id, &mut set);
                return set;
            }
        }
        // Anything a malformed module left unfilled, and the indices the opcode defines itself.
        self.fill_empty(module, id, &mut set);
        set
    }

    pub fn points_to(&self, id: InstrId) -> &PointsToSet {
        self.sets[id.index()]
            .as_ref()
            .expect("instruction not analysed (added after the analysis ran?)")
    }

    pub fn buffers(&self) -> &[LogicalBuffer] {
        &self.buffers
    }

    pub fn buffer(&self, b: BufferId) -> &LogicalBuffer {
        &self.buffers[b.index()]
    }

    pub fn num_buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Every (instruction, index) whose value may be buffer `b`, the definition included.
    pub fn aliases(&self, b: BufferId) -> &[BufferAlias] {
        &self.aliases[b.index()]
    }

    /// Buffers `id` defines itself.
    pub fn defined_buffers(&self, id: InstrId) -> &[BufferId] {
        &self.defined[id.index()]
    }

    /// The buffer `id` defines at `index`, if it defines one there.
    pub fn buffer_defined_at(&self, id: InstrId, index: &[usize]) -> Option<BufferId> {
        match self.points_to(id).buffers(index) {
            [b] if self.buffers[b.index()].instruction == id => Some(*b),
            _ => None,
        }
    }

    /// XLA's `DoesNotUseOperandBuffer`: a `get-tuple-element` reads only the top-level index
    /// table of its operand, not the element buffers below it.
    pub fn does_not_use_operand_buffer(
        module: &Module,
        _operand: InstrId,
        index: &[usize],
        user: InstrId,
    ) -> bool {
        module.instr(user).opcode == Opcode::GetTupleElement && !index.is_empty()
    }

    /// Every (user, operand index) that reads buffer `b` through one of its aliases, sorted.
    pub fn buffer_uses(&self, module: &Module, b: BufferId) -> Vec<(InstrId, usize)> {
        let mut uses = Vec::new();
        for alias in self.aliases(b) {
            for &user in module.users(alias.instruction) {
                if Self::does_not_use_operand_buffer(module, alias.instruction, &alias.index, user)
                {
                    continue;
                }
                for (k, &op) in module.operands(user).iter().enumerate() {
                    if op == alias.instruction {
                        uses.push((user, k));
                    }
                }
            }
        }
        uses.sort();
        uses.dedup();
        uses
    }

    /// A readable dump, as XLA's `ToString`: per computation (callees first) and instruction
    /// (post-order), the buffers at every index; then every buffer with its aliases.
    pub fn dump(&self, module: &Module) -> String {
        let mut out = String::new();
        for c in computation_post_order(module, true) {
            let _ = writeln!(out, "computation {}:", module.comp(c).name);
            for id in post_order(module, c) {
                let _ = writeln!(out, "  %{}:", module.instr(id).name);
                for (idx, e) in self.points_to(id).iter() {
                    let bufs: Vec<String> = e
                        .buffers
                        .iter()
                        .map(|&b| self.buffer_name(module, b))
                        .collect();
                    let _ = writeln!(out, "    {{{}}}: {}", join(idx), bufs.join(", "));
                }
            }
        }
        let _ = writeln!(out, "buffers:");
        for b in &self.buffers {
            let aliases: Vec<String> = self.aliases[b.id.index()]
                .iter()
                .map(|a| {
                    format!(
                        "%{}{{{}}}",
                        module.instr(a.instruction).name,
                        join(&a.index)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  {}: aliases {}",
                self.buffer_name(module, b.id),
                aliases.join(", ")
            );
        }
        out
    }

    /// `%name[1,0]`: the defining instruction and index of a buffer.
    pub fn buffer_name(&self, module: &Module, b: BufferId) -> String {
        let lb = self.buffer(b);
        format!(
            "%{}[{}]",
            module.instr(lb.instruction).name,
            join(&lb.index)
        )
    }
}

fn join(idx: &[usize]) -> String {
    idx.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::testutil::*;

    fn names(a: &TuplePointsTo, m: &Module, id: InstrId, index: &[usize]) -> Vec<String> {
        a.points_to(id)
            .buffers(index)
            .iter()
            .map(|&b| a.buffer_name(m, b))
            .collect()
    }

    #[test]
    fn tuple_and_gte_chains_forward_buffers() {
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p0 = b.param(c, 0, f32v(4));
        let p1 = b.param(c, 1, f32s());
        let neg = b.op(c, "neg", Opcode::Negate, f32v(4), &[p0]);
        let inner = b.tuple(c, "inner", &[neg, p1]);
        let outer = b.tuple(c, "outer", &[inner, p0]);
        let g0 = b.gte(c, "g0", outer, 0);
        let g00 = b.gte(c, "g00", g0, 0);
        let copy = b.op(c, "copy", Opcode::Copy, b.m.instr(g0).shape.clone(), &[g0]);
        let bc = b.op(c, "bc", Opcode::Bitcast, f32v(4), &[g00]);
        let root = b.tuple(c, "root", &[copy, bc]);
        b.m.set_root(c, root);
        let a = TuplePointsTo::new(&b.m);
        let m = &b.m;
        assert_eq!(names(&a, m, outer, &[]), ["%outer[]"]);
        assert_eq!(names(&a, m, outer, &[0]), ["%inner[]"]);
        assert_eq!(names(&a, m, outer, &[0, 0]), ["%neg[]"]);
        assert_eq!(names(&a, m, outer, &[0, 1]), ["%main.p1[]"]);
        assert_eq!(names(&a, m, outer, &[1]), ["%main.p0[]"]);
        // gte chains define nothing and see through both tuples.
        assert_eq!(names(&a, m, g0, &[]), ["%inner[]"]);
        assert_eq!(names(&a, m, g0, &[1]), ["%main.p1[]"]);
        assert_eq!(names(&a, m, g00, &[]), ["%neg[]"]);
        assert!(a.defined_buffers(g0).is_empty());
        assert!(a.defined_buffers(g00).is_empty());
        // copy: new top level, shared elements; bitcast forwards.
        assert_eq!(names(&a, m, copy, &[]), ["%copy[]"]);
        assert_eq!(names(&a, m, copy, &[0]), ["%neg[]"]);
        assert_eq!(names(&a, m, bc, &[]), ["%neg[]"]);
        assert_eq!(a.defined_buffers(copy).len(), 1);
        // tuple sources
        assert_eq!(a.points_to(g0).tuple_sources(&[]), &[inner]);
        assert_eq!(a.points_to(outer).tuple_sources(&[]), &[outer]);
        // aliases of %neg, in instruction post-order.
        let negb = a.buffer_defined_at(neg, &[]).unwrap();
        let al: Vec<String> = a
            .aliases(negb)
            .iter()
            .map(|x| format!("{}{{{}}}", m.instr(x.instruction).name, join(&x.index)))
            .collect();
        assert_eq!(
            al,
            [
                "neg{}",
                "inner{0}",
                "outer{0,0}",
                "g0{0}",
                "copy{0}",
                "g00{}",
                "bc{}",
                "root{0,0}",
                "root{1}"
            ]
        );
        assert!(!a.points_to(root).is_distinct());
        assert!(!a.points_to(root).is_ambiguous());
        assert!(a.points_to(outer).is_distinct());
        // Uses of %neg: everything that holds or reads it through an alias. A get-tuple-element
        // whose operand holds the buffer below the top level reads only the index table, so
        // g0 (from outer{0,0}) and g00 (from g0{0}) are not uses.
        let uses: Vec<String> = a
            .buffer_uses(m, negb)
            .iter()
            .map(|(u, k)| format!("{}:{k}", m.instr(*u).name))
            .collect();
        assert_eq!(
            uses,
            ["inner:0", "outer:0", "copy:0", "bc:0", "root:0", "root:1"]
        );
        // Buffers: p0, p1, neg, inner, outer, copy, root (tuples define one each).
        assert_eq!(a.num_buffers(), 7);
    }

    #[test]
    fn while_defines_fresh_buffers_and_body_parameter_is_its_own() {
        let mut b = Builder::new("m");
        let st = tuple(&[f32v(4), f32s()]);
        let body = b.comp("body");
        let bp = b.param(body, 0, st.clone());
        let x = b.gte(body, "b.x", bp, 0);
        let n = b.gte(body, "b.n", bp, 1);
        let nx = b.op(body, "b.neg", Opcode::Negate, f32v(4), &[x]);
        let bt = b.tuple(body, "b.tuple", &[nx, n]);
        b.m.set_root(body, bt);
        let cond = b.comp("cond");
        b.param(cond, 0, st.clone());
        let pr = b.op(
            cond,
            "c.pred",
            Opcode::Constant,
            Shape::scalar(crate::ElementType::Pred),
            &[],
        );
        b.m.set_root(cond, pr);
        let main = b.comp("main");
        let p = b.param(main, 0, f32v(4));
        let z = b.op(main, "zero", Opcode::Constant, f32s(), &[]);
        let init = b.tuple(main, "init", &[p, z]);
        let w = b.op(main, "while", Opcode::While, st, &[init]);
        b.m.instr_mut(w).called.extend([cond, body]);
        let r = b.gte(main, "result", w, 0);
        b.m.set_root(main, r);
        b.m.set_entry(main);
        let a = TuplePointsTo::new(&b.m);
        let m = &b.m;
        assert_eq!(names(&a, m, w, &[]), ["%while[]"]);
        assert_eq!(names(&a, m, w, &[0]), ["%while[0]"]);
        assert_eq!(names(&a, m, w, &[1]), ["%while[1]"]);
        assert_eq!(a.defined_buffers(w).len(), 3);
        assert_eq!(names(&a, m, r, &[]), ["%while[0]"]);
        assert_eq!(names(&a, m, init, &[0]), ["%main.p0[]"]);
        assert_eq!(names(&a, m, x, &[]), ["%body.p0[0]"]);
        assert_eq!(names(&a, m, bt, &[1]), ["%body.p0[1]"]);
        assert_eq!(a.points_to(r).tuple_sources(&[]), &[] as &[InstrId]);
        assert_eq!(a.points_to(w).tuple_sources(&[]), &[w]);
        // The while reads the whole init tuple, elements included.
        let pb = a.buffer_defined_at(p, &[]).unwrap();
        let uses: Vec<&str> = a
            .buffer_uses(m, pb)
            .iter()
            .map(|(u, _)| m.instr(*u).name.as_str())
            .collect();
        assert_eq!(uses, ["init", "while"]);
        let dump = a.dump(m);
        assert!(
            dump.contains("  %while:\n    {}: %while[]\n    {0}: %while[0]\n    {1}: %while[1]\n"),
            "{dump}"
        );
        assert!(
            dump.contains("  %main.p0[]: aliases %main.p0{}, %init{0}\n"),
            "{dump}"
        );
    }

    #[test]
    fn custom_call_output_to_operand_aliasing() {
        use crate::attrs::{CustomCallAttrs, OutputOperandAlias};
        let mut b = Builder::new("m");
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let cc = b.op(c, "cc", Opcode::CustomCall, tuple(&[f32v(4), f32s()]), &[p]);
        b.m.instr_mut(cc).attrs.custom_call = Some(Box::new(CustomCallAttrs {
            target: "foo".into(),
            output_to_operand_aliasing: vec![OutputOperandAlias {
                output_index: vec![0],
                operand: 0,
                operand_index: vec![],
            }],
            ..CustomCallAttrs::default()
        }));
        let a = TuplePointsTo::new(&b.m);
        assert_eq!(names(&a, &b.m, cc, &[0]), ["%main.p0[]"]);
        assert_eq!(names(&a, &b.m, cc, &[1]), ["%cc[1]"]);
        assert_eq!(names(&a, &b.m, cc, &[]), ["%cc[]"]);
    }

    #[test]
    fn fusion_output_to_operand_aliasing() {
        use crate::attrs::OutputOperandAlias;
        let mut b = Builder::new("m");
        let body = b.comp("fused");
        let fp = b.param(body, 0, f32v(4));
        let fr = b.op(body, "f.neg", Opcode::Negate, f32v(4), &[fp]);
        b.m.set_root(body, fr);
        let c = b.comp("main");
        let p = b.param(c, 0, f32v(4));
        let f = b.op(c, "fusion", Opcode::Fusion, f32v(4), &[p]);
        b.m.instr_mut(f).called.push(body);
        b.m.instr_mut(f).attrs.output_to_operand_aliasing = vec![OutputOperandAlias {
            output_index: vec![],
            operand: 0,
            operand_index: vec![],
        }];
        let g = b.op(c, "plain", Opcode::Fusion, f32v(4), &[p]);
        b.m.instr_mut(g).called.push(body);
        let a = TuplePointsTo::new(&b.m);
        assert_eq!(names(&a, &b.m, f, &[]), ["%main.p0[]"]);
        assert!(a.defined_buffers(f).is_empty());
        assert_eq!(names(&a, &b.m, g, &[]), ["%plain[]"]);
        // The fused parameter defines its own buffer.
        assert_eq!(names(&a, &b.m, fp, &[]), ["%fused.p0[]"]);
    }
}
