//! The partitioner's driver and per-instruction handlers.
//!
//! Each computation is partitioned in place: its instructions are visited in post order, and
//! each handler appends the per-device instructions that compute its piece (XLA's
//! `PartitionedHlo`: a local instruction plus the sharding it holds, see [`Value`]) through one
//! [`Builder`]; parameters keep their instruction and take the local shape; at the end the
//! root is resharded to the computation's required sharding and the original instructions are
//! removed. Operands are resharded to what each handler needs through [`Engine::reshard`],
//! which plans with [`super::plan`] and caches the result per (value, target).
//!
//! Anything without a dedicated handler takes the default: operands replicated, the
//! instruction computed whole on every device, the result sliced to its sharding. Nothing is
//! ever left unpartitioned; `SpmdReport::defaulted` lists who took that path.

use std::collections::{HashMap, HashSet};

use tessera_hlo::analysis::post_order;
use tessera_hlo::attrs::{ComparisonDirection, PaddingDim};
use tessera_hlo::{
    Builder, CompId, ElementType, InstrId, Instruction, Literal, Module, Opcode, Shape, Sharding,
    ShardingKind,
};
use tessera_pass::{Pass, PassError, Result};

use super::plan::{self, Step};
use super::spec::{Spec, Tiling};
use super::{CollectiveNote, CollectiveOps, SpmdOptions, SpmdReport};

/// The sharding of a value of any shape: one spec per array leaf.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Tree {
    Leaf(Spec),
    Tuple(Vec<Tree>),
}

/// A partitioned value: the local instruction and how the global value lies on the devices.
#[derive(Clone, Debug)]
struct Value {
    local: InstrId,
    tree: Tree,
}

fn fail(msg: impl Into<String>) -> PassError {
    PassError::Failed(msg.into())
}

fn built<T>(r: std::result::Result<T, tessera_hlo::BuildError>) -> Result<T> {
    r.map_err(|e| fail(e.to_string()))
}

/// The tree of `sharding` for `shape` (`None`: replicated); a non-tuple sharding on a tuple
/// applies to every leaf.
fn tree_for(
    sharding: Option<&Sharding>,
    shape: &Shape,
    n: i64,
) -> std::result::Result<Tree, String> {
    match shape {
        Shape::Tuple(elems) => {
            let leaves: Option<Vec<Sharding>> = match sharding.map(|s| &s.kind) {
                Some(ShardingKind::Tuple(l)) => {
                    if l.len() != shape.leaf_count() {
                        return Err(format!(
                            "a tuple sharding of {} leaves for a tuple of {}",
                            l.len(),
                            shape.leaf_count()
                        ));
                    }
                    Some(l.clone())
                }
                _ => None,
            };
            let mut k = 0;
            tree_walk(elems, sharding, leaves.as_deref(), &mut k, n)
        }
        Shape::Array(a) => Ok(Tree::Leaf(match sharding {
            Some(s) => Spec::from_sharding(s, a.rank(), n)?,
            None => Spec::replicated(a.rank(), n),
        })),
        _ => Ok(Tree::Leaf(Spec::replicated(0, n))),
    }
}

fn tree_walk(
    elems: &[Shape],
    whole: Option<&Sharding>,
    leaves: Option<&[Sharding]>,
    k: &mut usize,
    n: i64,
) -> std::result::Result<Tree, String> {
    let mut out = Vec::with_capacity(elems.len());
    for e in elems {
        if let Shape::Tuple(inner) = e {
            out.push(tree_walk(inner, whole, leaves, k, n)?);
            continue;
        }
        let s = match leaves {
            Some(l) => {
                *k += 1;
                Some(&l[*k - 1])
            }
            None => whole,
        };
        out.push(tree_for(s, e, n)?);
    }
    Ok(Tree::Tuple(out))
}

fn replicated_tree(shape: &Shape, n: i64) -> Tree {
    tree_for(None, shape, n).expect("replicated fits every shape")
}

fn maximal_tree(shape: &Shape, device: i64) -> Tree {
    match shape {
        Shape::Tuple(e) => Tree::Tuple(e.iter().map(|s| maximal_tree(s, device)).collect()),
        _ => Tree::Leaf(Spec::Maximal(device)),
    }
}

fn tree_is_manual(t: &Tree) -> bool {
    match t {
        Tree::Leaf(s) => *s == Spec::Manual,
        Tree::Tuple(e) => !e.is_empty() && e.iter().all(tree_is_manual),
    }
}

/// The shape each device holds.
fn local_shape(global: &Shape, tree: &Tree) -> Shape {
    match (global, tree) {
        (Shape::Tuple(e), Tree::Tuple(t)) => {
            Shape::tuple(e.iter().zip(t).map(|(s, t)| local_shape(s, t)).collect())
        }
        (Shape::Array(a), Tree::Leaf(spec)) => {
            let mut out = a.clone();
            out.dims = spec.shard_dims(&a.dims).into_iter().collect();
            Shape::Array(out)
        }
        _ => global.clone(),
    }
}

fn tree_to_sharding(t: &Tree) -> Sharding {
    match t {
        Tree::Leaf(s) => s.to_sharding(),
        Tree::Tuple(e) => {
            let mut leaves = Vec::new();
            fn flat(t: &Tree, out: &mut Vec<Sharding>) {
                match t {
                    Tree::Leaf(s) => out.push(s.to_sharding()),
                    Tree::Tuple(e) => e.iter().for_each(|x| flat(x, out)),
                }
            }
            e.iter().for_each(|x| flat(x, &mut leaves));
            Sharding::tuple(leaves)
        }
    }
}

fn spec_text(s: &Spec) -> String {
    tessera_hlo::text::sharding_to_string(&s.to_sharding())
}

struct Engine<'c> {
    n: i64,
    creator: &'c mut dyn CollectiveOps,
    values: HashMap<InstrId, Value>,
    cache: HashMap<(InstrId, Tree), InstrId>,
    pid: HashMap<CompId, InstrId>,
    tables: HashMap<(CompId, Vec<i64>), InstrId>,
    done: HashSet<CompId>,
    /// The global shapes of the parameters partitioned so far (their instruction now holds
    /// the local shape).
    globals: HashMap<InstrId, Shape>,
    /// Copies of original instructions and the names they take back.
    renames: Vec<(InstrId, String)>,
    report: SpmdReport,
}

/// Partitions `module` for `options`' device counts; the collectives come from `creator`.
pub fn partition(
    module: &mut Module,
    options: &SpmdOptions,
    creator: &mut dyn CollectiveOps,
) -> Result<SpmdReport> {
    let n = if options.num_partitions > 0 {
        options.num_partitions
    } else {
        module.config.num_partitions
    };
    let replicas = if options.num_replicas > 0 {
        options.num_replicas
    } else {
        module.config.replica_count
    };
    if n < 1 {
        return Err(fail(format!(
            "spmd-partitioning: num_partitions must be at least 1, found {n}"
        )));
    }
    if replicas > 1 {
        return Err(fail(format!(
            "spmd-partitioning: {replicas} replicas: only num_replicas = 1 is supported yet"
        )));
    }
    let entry = module
        .entry()
        .ok_or_else(|| fail("spmd-partitioning: the module has no entry computation"))?;
    module.config.num_partitions = n;
    module.schedule = None;
    let comp = module.comp(entry);
    let mut param_trees = Vec::new();
    for p in 0..comp.num_parameters() {
        let id = comp
            .parameter(p)
            .ok_or_else(|| fail(format!("entry parameter {p} is missing")))?;
        param_trees.push(tree_of(module, id, n)?);
    }
    let root = comp
        .root()
        .ok_or_else(|| fail("spmd-partitioning: the entry computation has no root"))?;
    let root_tree = tree_of(module, root, n)?;
    let root_sharding = module.instr(root).sharding.clone();
    let k = options.report_instruction_count as usize;
    let largest_before = largest(module, entry, k);
    let mut engine = Engine {
        n,
        creator,
        values: HashMap::new(),
        cache: HashMap::new(),
        pid: HashMap::new(),
        tables: HashMap::new(),
        done: HashSet::new(),
        globals: HashMap::new(),
        renames: Vec::new(),
        report: SpmdReport {
            num_partitions: n,
            ..Default::default()
        },
    };
    {
        let mut b = Builder::new(module, entry);
        engine.computation(&mut b, entry, &param_trees, &root_tree)?;
    }
    let new_root = module.comp(entry).root().expect("set above");
    if module.instr(new_root).opcode != Opcode::Parameter {
        module.instr_mut(new_root).sharding =
            Some(root_sharding.unwrap_or_else(|| tree_to_sharding(&root_tree)));
    }
    // Cleanup as XLA runs it after partitioning.
    tessera_pass::passes::dce::Dce::default().run(module)?;
    tessera_pass::passes::tuple_simplify::TupleSimplifier::default().run(module)?;
    tessera_pass::passes::dce::Dce::default().run(module)?;
    // The entry's layout describes the per-device program now (layouts kept).
    if let Some(old) = module.config.entry_computation_layout.take() {
        let mut new = module.program_shape(entry);
        for (n, o) in new.parameters.iter_mut().zip(&old.parameters) {
            keep_layouts(n, o);
        }
        keep_layouts(&mut new.result, &old.result);
        module.config.entry_computation_layout = Some(new);
    }
    engine.report.largest_before = largest_before;
    engine.report.largest_after = largest(module, entry, k);
    Ok(engine.report)
}

/// Copies `old`'s layouts onto `new` where the two have the same structure and ranks.
fn keep_layouts(new: &mut Shape, old: &Shape) {
    match (new, old) {
        (Shape::Array(n), Shape::Array(o)) if n.rank() == o.rank() => n.layout = o.layout.clone(),
        (Shape::Tuple(n), Shape::Tuple(o)) if n.len() == o.len() => {
            for (a, b) in n.iter_mut().zip(o) {
                keep_layouts(a, b);
            }
        }
        _ => {}
    }
}

/// The `k` largest instructions of `comp` by the bytes of their shape, largest first.
fn largest(m: &Module, comp: CompId, k: usize) -> Vec<(String, i64)> {
    let mut all: Vec<(String, i64)> = m
        .comp(comp)
        .instructions()
        .iter()
        .map(|&i| {
            let i = m.instr(i);
            (i.name.clone(), i.shape.byte_size(8))
        })
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

fn tree_of(m: &Module, id: InstrId, n: i64) -> Result<Tree> {
    let i = m.instr(id);
    tree_for(i.sharding.as_ref(), &i.shape, n).map_err(|e| fail(format!("%{}: {e}", i.name)))
}

impl Engine<'_> {
    /// Partitions `comp` in place: parameters take `params`' local shapes, the root is
    /// resharded to `root`.
    fn computation(
        &mut self,
        b: &mut Builder,
        comp: CompId,
        params: &[Tree],
        root: &Tree,
    ) -> Result<()> {
        if !self.done.insert(comp) {
            return Err(fail(format!(
                "computation {} is called from more than one place; run flatten-call-graph first",
                b.module().comp(comp).name
            )));
        }
        let saved = b.computation();
        b.set_computation(comp);
        let old: Vec<InstrId> = b.module().comp(comp).instructions().to_vec();
        let order = post_order(b.module(), comp);
        for &id in &order {
            b.set_origin(Some(id));
            self.instruction(b, id, params)?;
        }
        let old_root = b
            .module()
            .comp(comp)
            .root()
            .expect("a computation has a root");
        let v = self.values[&old_root].clone();
        let base = self.global(b.module(), old_root);
        let new_root = self.reshard(b, &v, &base, root)?;
        b.set_origin(None);
        b.module_mut().set_root(comp, new_root);
        let dead: Vec<InstrId> = old
            .into_iter()
            .filter(|&i| b.module().instr(i).opcode != Opcode::Parameter)
            .collect();
        b.module_mut().remove_instructions(&dead)?;
        let m = b.module_mut();
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.renames)
            .into_iter()
            .partition(|(id, _)| m.try_instr(*id).is_some_and(|i| i.parent() == comp));
        self.renames = rest;
        for (id, name) in mine {
            if !m.is_name_used(&name) {
                m.rename_instruction(id, name)?;
            }
        }
        b.set_computation(saved);
        Ok(())
    }

    /// [`clone_of`], remembered so that the copy takes the original's name once the original
    /// is gone.
    fn clone_with(
        &mut self,
        b: &mut Builder,
        i: &Instruction,
        operands: &[InstrId],
        shape: Shape,
    ) -> Result<InstrId> {
        let c = clone_of(b, i, operands, shape)?;
        self.renames.push((c, i.name.clone()));
        Ok(c)
    }

    /// The global shape of original instruction `id`.
    fn global(&self, m: &Module, id: InstrId) -> Shape {
        match self.globals.get(&id) {
            Some(s) => s.clone(),
            None => m.instr(id).shape.clone(),
        }
    }

    fn set(&mut self, id: InstrId, local: InstrId, tree: Tree) {
        self.values.insert(id, Value { local, tree });
    }

    fn value(&self, m: &Module, id: InstrId) -> Result<Value> {
        self.values.get(&id).cloned().ok_or_else(|| {
            fail(format!(
                "%{} was used before it was partitioned",
                m.instr(id).name
            ))
        })
    }

    /// The value of operand `k` of `id`, resharded to `target`.
    fn operand(
        &mut self,
        b: &mut Builder,
        id: InstrId,
        k: usize,
        target: &Tree,
    ) -> Result<InstrId> {
        let op = b.module().instr(id).operands()[k];
        let v = self.value(b.module(), op)?;
        let base = self.global(b.module(), op);
        self.reshard(b, &v, &base, target)
    }

    fn instruction(&mut self, b: &mut Builder, id: InstrId, params: &[Tree]) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id);
        let opcode = i.opcode;
        let own = tree_of(b.module(), id, n)?;
        if opcode == Opcode::Parameter {
            let k = i.attrs.parameter_number as usize;
            let tree = params.get(k).cloned().unwrap_or_else(|| own.clone());
            let local = local_shape(&i.shape, &tree);
            let global = std::mem::replace(&mut b.module_mut().instr_mut(id).shape, local);
            self.globals.insert(id, global);
            self.set(id, id, tree);
            return Ok(());
        }
        if tree_is_manual(&own) && !is_manual_boundary(b.module().instr(id)) {
            return self.manual(b, id, own);
        }
        match opcode {
            _ if opcode.is_elementwise() => self.elementwise(b, id, own),
            Opcode::Broadcast => self.broadcast(b, id, own),
            Opcode::Transpose => self.transpose(b, id, own),
            Opcode::Reshape => self.reshape(b, id, own),
            Opcode::Reduce => self.reduce(b, id, own),
            Opcode::Dot => self.dot(b, id, own),
            Opcode::Tuple => self.tuple(b, id, own),
            Opcode::GetTupleElement => self.get_tuple_element(b, id, own),
            Opcode::OptimizationBarrier => self.barrier(b, id),
            Opcode::While => self.while_loop(b, id, own),
            Opcode::Conditional => self.conditional(b, id, own),
            Opcode::Call => self.call(b, id, own),
            Opcode::CustomCall => self.custom_call(b, id, own),
            Opcode::Iota => self.iota(b, id, own),
            Opcode::Slice => self.slice(b, id, own),
            Opcode::PartitionId => Err(fail(format!(
                "%{}: partition-id outside a manual region has no single meaning once \
                 partitioned (XLA refuses it too); use it inside a manual region",
                b.module().instr(id).name
            ))),
            _ => self.default(b, id, own),
        }
    }

    // ----- resharding -----

    /// `v` (a value of global shape `base`) as `target`.
    fn reshard(
        &mut self,
        b: &mut Builder,
        v: &Value,
        base: &Shape,
        target: &Tree,
    ) -> Result<InstrId> {
        if v.tree == *target {
            return Ok(v.local);
        }
        let key = (v.local, target.clone());
        if let Some(&x) = self.cache.get(&key) {
            return Ok(x);
        }
        let out = match (&v.tree, target, base) {
            (Tree::Tuple(src), Tree::Tuple(dst), Shape::Tuple(shapes))
                if src.len() == dst.len() && dst.len() == shapes.len() =>
            {
                let mut parts = Vec::with_capacity(dst.len());
                for k in 0..dst.len() {
                    let g = built(b.get_tuple_element(v.local, k as i64))?;
                    let ev = Value {
                        local: g,
                        tree: src[k].clone(),
                    };
                    parts.push(self.reshard(b, &ev, &shapes[k], &dst[k])?);
                }
                built(b.tuple(&parts))?
            }
            (Tree::Leaf(s), Tree::Leaf(t), Shape::Array(a)) => {
                self.reshard_array(b, v.local, s, t, &a.dims, a.ty)?
            }
            (Tree::Leaf(_), Tree::Leaf(_), _) => v.local,
            _ => {
                return Err(fail(format!(
                    "%{}: cannot reshard {:?} to {:?}",
                    b.module().instr(v.local).name,
                    v.tree,
                    target
                )))
            }
        };
        self.cache.insert(key, out);
        Ok(out)
    }

    fn origin_name(&self, b: &Builder) -> String {
        b.origin()
            .and_then(|o| b.module().try_instr(o))
            .map_or_else(|| "?".to_string(), |i| i.name.clone())
    }

    fn reshard_array(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        src: &Spec,
        dst: &Spec,
        dims: &[i64],
        ty: ElementType,
    ) -> Result<InstrId> {
        // A replicated value is every device's own value of a manual region (and back, for a
        // value every device computed alike).
        if let (Spec::Tiled(t), Spec::Manual) = (src, dst) {
            if t.is_replicated() {
                return Ok(x);
            }
        }
        let p = plan::plan(src, dst, dims, self.n).map_err(|e| {
            fail(format!(
                "%{}: resharding {} to {}: {e}",
                self.origin_name(b),
                spec_text(src),
                spec_text(dst)
            ))
        })?;
        if p.last_resort {
            self.report.last_resorts.push(format!(
                "%{}: {} -> {} on {:?}",
                self.origin_name(b),
                spec_text(src),
                spec_text(dst),
                dims
            ));
        }
        let elem = ty.byte_size() as i64;
        let mut cur = x;
        for step in &p.steps {
            if !matches!(step, Step::Slice { .. }) {
                self.report.collectives.push(CollectiveNote {
                    original: self.origin_name(b),
                    collective: step.name(),
                    reason: format!("{} -> {}", spec_text(src), spec_text(dst)),
                    bytes: step.bytes(dims, elem),
                });
            }
            cur = self.emit_step(b, cur, step, dims, ty)?;
        }
        Ok(cur)
    }

    fn partition_id(&mut self, b: &mut Builder) -> Result<InstrId> {
        let comp = b.computation();
        if let Some(&p) = self.pid.get(&comp) {
            return Ok(p);
        }
        let p = self.creator.partition_id(b)?;
        self.pid.insert(comp, p);
        Ok(p)
    }

    /// A scalar s32 that is `values[partition id]` on each device.
    fn table(&mut self, b: &mut Builder, values: &[i64]) -> Result<InstrId> {
        let uniform = values.iter().all(|&v| v == values[0]);
        let key = (
            b.computation(),
            if uniform {
                vec![values[0]]
            } else {
                values.to_vec()
            },
        );
        if let Some(&t) = self.tables.get(&key) {
            return Ok(t);
        }
        let s = if uniform {
            built(b.scalar(ElementType::S32, values[0] as f64))?
        } else {
            let bytes: Vec<u8> = values
                .iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect();
            let lit = Literal::from_bytes(
                Shape::array(ElementType::S32, &[values.len() as i64]),
                bytes,
            )
            .expect("one s32 per device");
            let c = built(b.constant(lit))?;
            let pid = self.partition_id(b)?;
            let one = built(b.dynamic_slice(c, &[pid], &[1]))?;
            built(b.reshape(one, &[]))?
        };
        self.tables.insert(key, s);
        Ok(s)
    }

    fn emit_step(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        step: &Step,
        dims: &[i64],
        ty: ElementType,
    ) -> Result<InstrId> {
        let rank = dims.len();
        match step {
            Step::Slice {
                sizes,
                offsets,
                pad_high,
                ..
            } => {
                let mut x = x;
                if pad_high.iter().any(|&p| p > 0) {
                    let zero = built(b.scalar(ty, 0.0))?;
                    let pads: Vec<PaddingDim> = pad_high
                        .iter()
                        .map(|&h| PaddingDim {
                            low: 0,
                            high: h,
                            interior: 0,
                        })
                        .collect();
                    x = built(b.pad(x, zero, &pads))?;
                }
                let local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
                let same = (0..rank).all(|i| offsets.iter().all(|o| o[i] == offsets[0][i]));
                if same {
                    if local == *sizes && offsets[0].iter().all(|&o| o == 0) {
                        return Ok(x);
                    }
                    let limits: Vec<i64> = (0..rank).map(|i| offsets[0][i] + sizes[i]).collect();
                    return built(b.slice(x, &offsets[0], &limits, &vec![1; rank]));
                }
                let mut starts = Vec::with_capacity(rank);
                for i in 0..rank {
                    let per: Vec<i64> = offsets.iter().map(|o| o[i]).collect();
                    starts.push(self.table(b, &per)?);
                }
                built(b.dynamic_slice(x, &starts, sizes))
            }
            Step::AllGather {
                dims: along,
                tiles,
                groups,
                ..
            } => {
                let local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
                let gathered = if along.len() == 1 {
                    self.creator.all_gather(b, x, along[0] as i64, groups)?
                } else {
                    // One collective for several dimensions: gather along a new leading
                    // dimension, then move each gathered tile axis next to its dimension.
                    let mut lead = vec![1];
                    lead.extend_from_slice(&local);
                    let r = built(b.reshape(x, &lead))?;
                    let g = self.creator.all_gather(b, r, 0, groups)?;
                    let mut split: Vec<i64> = tiles.clone();
                    split.extend_from_slice(&local);
                    let g = built(b.reshape(g, &split))?;
                    let k = along.len();
                    let mut perm = Vec::new();
                    let mut merged = Vec::new();
                    for (d, &l) in local.iter().enumerate() {
                        if let Some(j) = along.iter().position(|&a| a == d) {
                            perm.push(j as i64);
                            merged.push(tiles[j] * l);
                        } else {
                            merged.push(l);
                        }
                        perm.push((k + d) as i64);
                    }
                    let t = built(b.transpose(g, &perm))?;
                    built(b.reshape(t, &merged))?
                };
                self.trim(b, gathered, dims, along)
            }
            Step::AllToAll {
                split,
                concat,
                groups,
                ..
            } => {
                let (split, concat) = (*split, *concat);
                let k = groups[0].len() as i64;
                let mut local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
                let c = super::spec::ceil_div(local[split], k);
                let mut x = x;
                if c * k != local[split] {
                    let zero = built(b.scalar(ty, 0.0))?;
                    let mut pads = vec![PaddingDim::default(); rank];
                    pads[split].high = c * k - local[split];
                    x = built(b.pad(x, zero, &pads))?;
                    local[split] = c * k;
                }
                // [.., k*c (split), ..] -> [.., k, c, ..] -> k to the front.
                let mut expanded = Vec::with_capacity(rank + 1);
                for (d, &l) in local.iter().enumerate() {
                    if d == split {
                        expanded.push(k);
                        expanded.push(c);
                    } else {
                        expanded.push(l);
                    }
                }
                let r = built(b.reshape(x, &expanded))?;
                let mut to_front = vec![split as i64];
                to_front.extend((0..=rank as i64).filter(|&d| d != split as i64));
                let t = built(b.transpose(r, &to_front))?;
                let a = self.creator.all_to_all(b, t, 0, groups)?;
                // Axis 0 now says which member sent the piece: put it before `concat`.
                // The dimensions after the front axis.
                let rest: Vec<i64> = local
                    .iter()
                    .enumerate()
                    .map(|(d, &l)| if d == split { c } else { l })
                    .collect();
                let mut perm = Vec::with_capacity(rank + 1);
                let mut merged = Vec::with_capacity(rank);
                for (d, &l) in rest.iter().enumerate() {
                    if d == concat {
                        perm.push(0);
                        merged.push(k * l);
                    } else {
                        merged.push(l);
                    }
                    perm.push(d as i64 + 1);
                }
                let t = built(b.transpose(a, &perm))?;
                let m = built(b.reshape(t, &merged))?;
                self.trim(b, m, dims, &[concat])
            }
            Step::Permute { pairs, .. } => self.creator.collective_permute(b, x, pairs),
            Step::FromMaximal { device, n, .. } => {
                let pid = self.partition_id(b)?;
                let d = built(b.scalar(ElementType::U32, *device as f64))?;
                let is = built(b.compare(pid, d, ComparisonDirection::Eq))?;
                let shape = b.module().instr(x).shape.clone();
                let pred = broadcast_scalar(b, is, shape.dims())?;
                let zero = built(b.scalar(ty, 0.0))?;
                let zeros = broadcast_scalar(b, zero, shape.dims())?;
                let masked = built(b.select(pred, x, zeros))?;
                let op = if ty == ElementType::Pred {
                    Opcode::Or
                } else {
                    Opcode::Add
                };
                let reducer = built(b.reducer(ty, op))?;
                let all: Vec<i64> = (0..*n).collect();
                self.creator.all_reduce(b, masked, reducer, &[all])
            }
        }
    }

    /// Slices the gathered dimensions `along` of `x` back to the array's extent (gathered
    /// pieces are padded to equal size).
    fn trim(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dims: &[i64],
        along: &[usize],
    ) -> Result<InstrId> {
        let local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
        let mut limits = local.clone();
        for &d in along {
            limits[d] = dims[d].min(local[d]);
        }
        if limits == local {
            return Ok(x);
        }
        let rank = dims.len();
        built(b.slice(x, &vec![0; rank], &limits, &vec![1; rank]))
    }

    /// `x` (the local piece of an array of `dims` tiled by `t`) with the padding of the
    /// dimensions `mask_dims` replaced by the scalar `fill`.
    fn mask_padding(
        &mut self,
        b: &mut Builder,
        x: InstrId,
        dims: &[i64],
        t: &Tiling,
        mask_dims: &[usize],
        fill: InstrId,
    ) -> Result<InstrId> {
        let shard = t.shard_dims(dims);
        let padded: Vec<usize> = mask_dims
            .iter()
            .copied()
            .filter(|&d| t.tiles[d] > 1 && shard[d] * t.tiles[d] > dims[d])
            .collect();
        if padded.is_empty() {
            return Ok(x);
        }
        let starts = t.starts(dims);
        let mut mask: Option<InstrId> = None;
        for &d in &padded {
            let valid: Vec<i64> = starts
                .iter()
                .map(|s| (dims[d] - s[d]).clamp(0, shard[d]))
                .collect();
            let v = self.table(b, &valid)?;
            let iota = built(b.iota(Shape::array(ElementType::S32, &shard), d as i64))?;
            let vb = broadcast_scalar(b, v, &shard)?;
            let m = built(b.compare(iota, vb, ComparisonDirection::Lt))?;
            mask = Some(match mask {
                None => m,
                Some(prev) => built(b.binary(Opcode::And, prev, m))?,
            });
        }
        let fills = broadcast_scalar(b, fill, &shard)?;
        built(b.select(mask.expect("a padded dimension"), x, fills))
    }

    // ----- handlers -----

    /// Operands replicated, the instruction computed whole everywhere, the result resliced.
    fn default(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            let shape = self.global(b.module(), i.operands()[k]);
            ops.push(self.operand(b, id, k, &replicated_tree(&shape, n))?);
        }
        let out = self.clone_with(b, &i, &ops, i.shape.clone())?;
        // A random value is drawn once (on device 0) and sent to everyone.
        let tree = if matches!(i.opcode, Opcode::Rng | Opcode::RngBitGenerator) {
            maximal_tree(&i.shape, 0)
        } else {
            replicated_tree(&i.shape, n)
        };
        let v = Value { local: out, tree };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.report.defaulted.push(i.name.clone());
        self.set(id, local, own);
        Ok(())
    }

    /// Inside a manual region: every device runs the instruction on its own values.
    fn manual(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            let shape = self.global(b.module(), i.operands()[k]);
            let target = manual_tree(&shape);
            ops.push(self.operand(b, id, k, &target)?);
        }
        let out = self.clone_with(b, &i, &ops, i.shape.clone())?;
        self.set(id, out, own);
        Ok(())
    }

    fn elementwise(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let Tree::Leaf(spec) = &own else {
            return self.default(b, id, own);
        };
        let mut ops = Vec::with_capacity(i.operands().len());
        for k in 0..i.operands().len() {
            let shape = self.global(b.module(), i.operands()[k]);
            let target = if shape.rank() == i.shape.rank() {
                own.clone()
            } else {
                Tree::Leaf(Spec::replicated(shape.rank(), n))
            };
            ops.push(self.operand(b, id, k, &target)?);
        }
        let _ = spec;
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    fn broadcast(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let map: Vec<Option<usize>> = i
            .attrs
            .dimensions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|&d| Some(d as usize))
            .collect();
        let target = Tree::Leaf(Spec::Tiled(t.project(&map)));
        let x = self.operand(b, id, 0, &target)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    fn transpose(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let perm = i.attrs.dimensions.clone().unwrap_or_default();
        // Operand dimension perm[k] is output dimension k.
        let mut map = vec![None; perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            map[p as usize] = Some(k);
        }
        let target = Tree::Leaf(Spec::Tiled(t.project(&map)));
        let x = self.operand(b, id, 0, &target)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// A reshape is local when, in each group of dimensions it merges or splits, only the
    /// most major dimension is split, evenly on both sides; otherwise the default.
    fn reshape(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let op_shape = self.global(b.module(), i.operands()[0]);
        let (from, to) = (op_shape.dims().to_vec(), i.shape.dims().to_vec());
        let Some(op_tiles) = reshape_operand_tiles(&from, &to, &t.tiles) else {
            return self.default(b, id, own);
        };
        let target = Tree::Leaf(Spec::Tiled(Tiling::new(
            op_tiles,
            t.repl,
            t.devices.clone(),
        )));
        let x = self.operand(b, id, 0, &target)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// Local reduce of the piece (padding set to the init value), then an all-reduce over the
    /// devices that split a reduced dimension.
    fn reduce(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        if i.operands().len() != 2 || !i.shape.is_array() {
            return self.default(b, id, own);
        }
        let op = i.operands()[0];
        let op_shape = self.global(b.module(), op);
        let v = self.value(b.module(), op)?;
        let Tree::Leaf(Spec::Tiled(s)) = &v.tree else {
            return self.default(b, id, own);
        };
        let s = s.clone();
        let reducer = i
            .to_apply()
            .ok_or_else(|| fail(format!("%{}: no to_apply", i.name)))?;
        let reduced: Vec<usize> = i
            .attrs
            .dimensions
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|&d| d as usize)
            .collect();
        let init = self.operand(b, id, 1, &Tree::Leaf(Spec::replicated(0, n)))?;
        let dims = op_shape.dims().to_vec();
        let x = self.mask_padding(b, v.local, &dims, &s, &reduced, init)?;
        let local_shape_out = {
            let keep: Vec<i64> = s
                .shard_dims(&dims)
                .iter()
                .enumerate()
                .filter(|(d, _)| !reduced.contains(d))
                .map(|(_, &x)| x)
                .collect();
            let mut sh = i.shape.clone();
            if let Some(a) = sh.as_array_mut() {
                a.dims = keep.into_iter().collect();
            }
            sh
        };
        let mut r = self.clone_with(b, &i, &[x, init], local_shape_out)?;
        let split: Vec<usize> = reduced
            .iter()
            .copied()
            .filter(|&d| s.tiles[d] > 1)
            .collect();
        if !split.is_empty() {
            let groups = s.groups(&split, false);
            let before = self.report.collectives.len();
            r = self.creator.all_reduce(b, r, reducer, &groups)?;
            let out_bytes = b
                .module()
                .instr(r)
                .shape
                .as_array()
                .map_or(0, |a| a.byte_size());
            let g = groups[0].len() as i64;
            self.report.collectives.insert(
                before,
                CollectiveNote {
                    original: i.name.clone(),
                    collective: "all-reduce",
                    reason: "partial results of a reduce over split dimensions".to_string(),
                    bytes: 2 * out_bytes * (g - 1) / g,
                },
            );
        }
        let kept: Vec<Option<usize>> = (0..dims.len())
            .filter(|d| !reduced.contains(d))
            .map(Some)
            .collect();
        let partial = Tree::Leaf(Spec::Tiled(s.replicate_dims(&split).project(&kept)));
        let v = Value {
            local: r,
            tree: partial,
        };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    fn dot(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Some(dn) = i.attrs.dot_dims.clone() else {
            return self.default(b, id, own);
        };
        if i.operands().len() != 2 || !i.attrs.sparsity.is_empty() {
            return self.default(b, id, own);
        }
        let (lhs, rhs) = (i.operands()[0], i.operands()[1]);
        let lrank = b.module().instr(lhs).shape.rank();
        let rrank = b.module().instr(rhs).shape.rank();
        let lb: Vec<usize> = dn
            .lhs_batch_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let rb: Vec<usize> = dn
            .rhs_batch_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let lc: Vec<usize> = dn
            .lhs_contracting_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let rc: Vec<usize> = dn
            .rhs_contracting_dimensions
            .iter()
            .map(|&d| d as usize)
            .collect();
        let lfree: Vec<usize> = (0..lrank)
            .filter(|d| !lb.contains(d) && !lc.contains(d))
            .collect();
        let rfree: Vec<usize> = (0..rrank)
            .filter(|d| !rb.contains(d) && !rc.contains(d))
            .collect();
        let nb = lb.len();
        let mut lmap = vec![None; lrank];
        let mut rmap = vec![None; rrank];
        for (k, (&l, &r)) in lb.iter().zip(&rb).enumerate() {
            lmap[l] = Some(k);
            rmap[r] = Some(k);
        }
        for (m, &l) in lfree.iter().enumerate() {
            lmap[l] = Some(nb + m);
        }
        for (m, &r) in rfree.iter().enumerate() {
            rmap[r] = Some(nb + lfree.len() + m);
        }
        // An operand split on contracting dimensions keeps its split; the other is brought to
        // the same contracting (and batch) split; local dot, then a sum over the devices that
        // hold different contracting pieces. The result keeps the first operand's batch and
        // free-dimension split.
        let lv = self.value(b.module(), lhs)?;
        let rv = self.value(b.module(), rhs)?;
        for (mine, other, mc, oc, mb, ob, first_is_lhs) in [
            (&lv, rhs, &lc, &rc, &lb, &rb, true),
            (&rv, lhs, &rc, &lc, &rb, &lb, false),
        ] {
            let Tree::Leaf(Spec::Tiled(s)) = &mine.tree else {
                continue;
            };
            let split: Vec<usize> = mc.iter().copied().filter(|&d| s.tiles[d] > 1).collect();
            if split.is_empty() {
                continue;
            }
            let orank = b.module().instr(other).shape.rank();
            let mut omap = vec![None; orank];
            for (k, &d) in oc.iter().enumerate() {
                omap[d] = Some(mc[k]);
            }
            for (k, &d) in ob.iter().enumerate() {
                omap[d] = Some(mb[k]);
            }
            let s = s.clone();
            let o_t = s.project(&omap);
            // Output dimension -> this operand's dimension (batch, then lhs free, rhs free).
            let mut out_map: Vec<Option<usize>> = mb.iter().map(|&d| Some(d)).collect();
            out_map.extend(lfree.iter().map(|&d| first_is_lhs.then_some(d)));
            out_map.extend(rfree.iter().map(|&d| (!first_is_lhs).then_some(d)));
            let out_spec = Tree::Leaf(Spec::Tiled(s.replicate_dims(&split).project(&out_map)));
            let (mine_id, other_k) = if first_is_lhs { (lhs, 1) } else { (rhs, 0) };
            let mine_dims = self.global(b.module(), mine_id).dims().to_vec();
            let other_dims = self.global(b.module(), other).dims().to_vec();
            let ty = b.module().instr(mine_id).shape.element_type();
            let oty = b.module().instr(other).shape.element_type();
            let o_local = self.operand(b, id, other_k, &Tree::Leaf(Spec::Tiled(o_t.clone())))?;
            // Padding may hold anything (NaN too): zero it on both sides.
            let z = built(b.scalar(ty, 0.0))?;
            let m_local = self.mask_padding(b, mine.local, &mine_dims, &s, &split, z)?;
            let oz = built(b.scalar(oty, 0.0))?;
            let o_local = self.mask_padding(b, o_local, &other_dims, &o_t, oc, oz)?;
            let (l, r) = if first_is_lhs {
                (m_local, o_local)
            } else {
                (o_local, m_local)
            };
            let partial_shape = local_shape(&i.shape, &out_spec);
            let d = self.clone_with(b, &i, &[l, r], partial_shape)?;
            let groups = s.groups(&split, false);
            let out_ty = i.shape.element_type();
            let reducer = built(b.reducer(out_ty, Opcode::Add))?;
            let sum = self.creator.all_reduce(b, d, reducer, &groups)?;
            let g = groups[0].len() as i64;
            let out_bytes = b
                .module()
                .instr(sum)
                .shape
                .as_array()
                .map_or(0, |a| a.byte_size());
            self.report.collectives.push(CollectiveNote {
                original: i.name.clone(),
                collective: "all-reduce",
                reason: "partial sums of a dot over split contracting dimensions".to_string(),
                bytes: 2 * out_bytes * (g - 1) / g,
            });
            let v = Value {
                local: sum,
                tree: out_spec,
            };
            let out = self.reshard(b, &v, &i.shape, &own)?;
            self.set(id, out, own);
            return Ok(());
        }
        // Otherwise each operand is resharded to match the output's split.
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let lt = Tree::Leaf(Spec::Tiled(t.project(&lmap)));
        let rt = Tree::Leaf(Spec::Tiled(t.project(&rmap)));
        let l = self.operand(b, id, 0, &lt)?;
        let r = self.operand(b, id, 1, &rt)?;
        let out = self.clone_with(b, &i, &[l, r], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// A slice is local when every split dimension keeps its start at 0, stride 1 and the
    /// same piece size (only the padded end is cut); unsplit dimensions slice locally.
    fn slice(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let Some(sl) = i.attrs.slice.clone() else {
            return self.default(b, id, own);
        };
        let in_dims = self.global(b.module(), i.operands()[0]).dims().to_vec();
        let out_dims = i.shape.dims().to_vec();
        let out_shard = t.shard_dims(&out_dims);
        let in_shard = t.shard_dims(&in_dims);
        let local = (0..out_dims.len()).all(|d| {
            t.tiles[d] == 1
                || (sl[d].start == 0 && sl[d].stride == 1 && in_shard[d] == out_shard[d])
        });
        if !local {
            return self.default(b, id, own);
        }
        let x = self.operand(b, id, 0, &own)?;
        let starts: Vec<i64> = (0..out_dims.len())
            .map(|d| if t.tiles[d] == 1 { sl[d].start } else { 0 })
            .collect();
        let limits: Vec<i64> = (0..out_dims.len())
            .map(|d| {
                if t.tiles[d] == 1 {
                    sl[d].limit
                } else {
                    out_shard[d]
                }
            })
            .collect();
        let strides: Vec<i64> = (0..out_dims.len())
            .map(|d| if t.tiles[d] == 1 { sl[d].stride } else { 1 })
            .collect();
        let out = if (0..out_dims.len())
            .all(|d| starts[d] == 0 && strides[d] == 1 && limits[d] == in_shard[d])
        {
            x
        } else {
            let c = built(b.slice(x, &starts, &limits, &strides))?;
            self.renames.push((c, i.name.clone()));
            c
        };
        self.set(id, out, own);
        Ok(())
    }

    /// A local iota plus the offset of the device's piece along the iota dimension.
    fn iota(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let Tree::Leaf(Spec::Tiled(t)) = &own else {
            return self.default(b, id, own);
        };
        let d = i.attrs.iota_dimension as usize;
        let ty = i.shape.element_type();
        if !(ty.is_float() || (ty.is_integral() && ty != ElementType::Pred)) || d >= t.rank() {
            return self.default(b, id, own);
        }
        let local = local_shape(&i.shape, &own);
        let out = self.clone_with(b, &i, &[], local.clone())?;
        let out = if t.tiles[d] > 1 {
            let starts: Vec<i64> = t.starts(i.shape.dims()).iter().map(|s| s[d]).collect();
            let off = self.table(b, &starts)?;
            let off = if ty == ElementType::S32 {
                off
            } else {
                built(b.convert(off, ty))?
            };
            let offs = broadcast_scalar(b, off, local.dims())?;
            built(b.binary(Opcode::Add, out, offs))?
        } else {
            out
        };
        self.set(id, out, own);
        Ok(())
    }

    fn tuple(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let mut locals = Vec::new();
        let mut trees = Vec::new();
        for &op in i.operands() {
            let v = self.value(b.module(), op)?;
            locals.push(v.local);
            trees.push(v.tree);
        }
        let t = built(b.tuple(&locals))?;
        self.renames.push((t, i.name.clone()));
        let v = Value {
            local: t,
            tree: Tree::Tuple(trees),
        };
        let out = self.reshard(b, &v, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    fn get_tuple_element(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let v = self.value(b.module(), i.operands()[0])?;
        let k = i.attrs.tuple_index as usize;
        let Tree::Tuple(elems) = &v.tree else {
            return Err(fail(format!("%{}: operand is not a tuple", i.name)));
        };
        let sub = elems
            .get(k)
            .cloned()
            .ok_or_else(|| fail(format!("%{}: tuple index {k} out of range", i.name)))?;
        let g = built(b.get_tuple_element(v.local, k as i64))?;
        self.renames.push((g, i.name.clone()));
        let ev = Value {
            local: g,
            tree: sub,
        };
        let out = self.reshard(b, &ev, &i.shape, &own)?;
        self.set(id, out, own);
        Ok(())
    }

    fn barrier(&mut self, b: &mut Builder, id: InstrId) -> Result<()> {
        let i = b.module().instr(id).clone();
        let v = self.value(b.module(), i.operands()[0])?;
        let shape = local_shape(&i.shape, &v.tree);
        let out = self.clone_with(b, &i, &[v.local], shape)?;
        self.set(id, out, v.tree);
        Ok(())
    }

    fn while_loop(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let (cond, body) = match (i.while_condition(), i.while_body()) {
            (Some(c), Some(bd)) => (c, bd),
            _ => {
                return Err(fail(format!(
                    "%{}: a while without condition or body",
                    i.name
                )))
            }
        };
        let x = self.operand(b, id, 0, &own)?;
        let pred = Tree::Leaf(Spec::replicated(0, n));
        self.computation(b, cond, std::slice::from_ref(&own), &pred)?;
        self.computation(b, body, std::slice::from_ref(&own), &own)?;
        let out = self.clone_with(b, &i, &[x], local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    /// The parameter trees of a called computation: its own annotations, else its operands'.
    fn callee_params(
        &mut self,
        b: &Builder,
        comp: CompId,
        operands: &[InstrId],
    ) -> Result<Vec<Tree>> {
        let n = self.n;
        let mut out = Vec::new();
        for (k, &op) in operands.iter().enumerate() {
            let p = b.module().comp(comp).parameter(k);
            let t = match p {
                Some(p) if b.module().instr(p).sharding.is_some() => tree_of(b.module(), p, n)?,
                _ => self.value(b.module(), op)?.tree,
            };
            out.push(t);
        }
        Ok(out)
    }

    fn conditional(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let sel = self.operand(b, id, 0, &Tree::Leaf(Spec::replicated(0, n)))?;
        let mut ops = vec![sel];
        for (k, &branch) in i.called.iter().enumerate() {
            let operand = i.operands()[k + 1];
            let params = self.callee_params(b, branch, &[operand])?;
            ops.push(self.operand(b, id, k + 1, &params[0])?);
            self.computation(b, branch, &params, &own)?;
        }
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    fn call(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        let callee = i.called[0];
        let params = self.callee_params(b, callee, i.operands())?;
        let mut ops = Vec::new();
        for (k, p) in params.iter().enumerate() {
            ops.push(self.operand(b, id, k, p)?);
        }
        self.computation(b, callee, &params, &own)?;
        let out = self.clone_with(b, &i, &ops, local_shape(&i.shape, &own))?;
        self.set(id, out, own);
        Ok(())
    }

    fn custom_call(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id).clone();
        let target = i
            .attrs
            .custom_call
            .as_ref()
            .map(|c| c.target.clone())
            .unwrap_or_default();
        match target.as_str() {
            "Sharding" if i.operands().len() == 1 => {
                let x = self.operand(b, id, 0, &own)?;
                self.set(id, x, own);
                Ok(())
            }
            "SPMDFullToShardShape" => {
                let op = i.operands()[0];
                let op_tree = tree_of(b.module(), op, n)?;
                let x = self.operand(b, id, 0, &op_tree)?;
                let have = b.module().instr(x).shape.clone();
                if !have.same_dimensions(&i.shape) {
                    return Err(fail(format!(
                        "%{}: the manual shape {} is not the piece {} of the operand's sharding",
                        i.name,
                        tessera_hlo::text::shape_to_string(&i.shape),
                        tessera_hlo::text::shape_to_string(&have)
                    )));
                }
                let manual = manual_tree(&i.shape);
                self.set(id, x, manual);
                Ok(())
            }
            "SPMDShardToFullShape" => {
                let x = self.operand(
                    b,
                    id,
                    0,
                    &manual_tree(&self.global(b.module(), i.operands()[0])),
                )?;
                let want = local_shape(&i.shape, &own);
                let have = b.module().instr(x).shape.clone();
                if !have.same_dimensions(&want) {
                    return Err(fail(format!(
                        "%{}: the manual piece {} is not the piece {} of the result's sharding",
                        i.name,
                        tessera_hlo::text::shape_to_string(&have),
                        tessera_hlo::text::shape_to_string(&want)
                    )));
                }
                self.set(id, x, own);
                Ok(())
            }
            _ => self.default(b, id, own),
        }
    }
}

fn manual_tree(shape: &Shape) -> Tree {
    match shape {
        Shape::Tuple(e) => Tree::Tuple(e.iter().map(manual_tree).collect()),
        _ => Tree::Leaf(Spec::Manual),
    }
}

/// The boundary custom-calls of a manual region carry `{manual}` but convert shapes.
fn is_manual_boundary(i: &Instruction) -> bool {
    i.opcode == Opcode::CustomCall
        && i.attrs.custom_call.as_ref().is_some_and(|c| {
            c.target == "SPMDFullToShardShape" || c.target == "SPMDShardToFullShape"
        })
}

/// A copy of `i` with new operands and shape (attributes, called computations, metadata kept;
/// sharding dropped).
fn clone_of(
    b: &mut Builder,
    i: &Instruction,
    operands: &[InstrId],
    shape: Shape,
) -> Result<InstrId> {
    let mut c = Instruction::new(i.name.clone(), i.opcode, shape)
        .with_operands(operands)
        .with_called(&i.called);
    c.attrs = i.attrs.clone();
    c.predicated_conditional = i.predicated_conditional;
    if let Some(md) = i.metadata.as_ref() {
        c.metadata = Some(md.clone());
    }
    if !i.frontend_attributes.is_empty() {
        c.frontend_attributes = i.frontend_attributes.clone();
    }
    if let Some(bc) = i.backend_config.as_ref() {
        c.backend_config = Some(bc.clone());
    }
    built(b.add(c))
}

fn broadcast_scalar(b: &mut Builder, x: InstrId, dims: &[i64]) -> Result<InstrId> {
    built(b.broadcast(x, dims, &[]))
}

/// The operand tiles for a reshape from `from` to `to` whose output is tiled by `tiles`, when
/// the reshape stays local (see [`Engine::reshape`]).
fn reshape_operand_tiles(from: &[i64], to: &[i64], tiles: &[i64]) -> Option<Vec<i64>> {
    if tiles.iter().all(|&t| t == 1) {
        return Some(vec![1; from.len()]);
    }
    let groups = tessera_hlo::tiling::reshape_groups(from, to)?;
    let mut out = vec![1; from.len()];
    let mut covered = vec![false; to.len()];
    for (ins, outs) in &groups {
        for &o in outs {
            covered[o] = true;
        }
        // The first non-trivial dimension on each side is the major one.
        let Some(&o0) = outs.iter().find(|&&o| to[o] > 1) else {
            if outs.iter().any(|&o| tiles[o] > 1) {
                return None;
            }
            continue;
        };
        if outs.iter().any(|&o| o != o0 && tiles[o] > 1) {
            return None;
        }
        let t = tiles[o0];
        if t == 1 {
            continue;
        }
        let i0 = *ins.iter().find(|&&i| from[i] > 1)?;
        if to[o0] % t != 0 || from[i0] % t != 0 {
            return None;
        }
        out[i0] = t;
    }
    if (0..to.len()).any(|o| !covered[o] && tiles[o] > 1) {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_tiles_follow_the_major_dimension() {
        assert_eq!(
            reshape_operand_tiles(&[8, 6], &[48], &[4]),
            Some(vec![4, 1])
        );
        assert_eq!(
            reshape_operand_tiles(&[48], &[8, 6], &[4, 1]),
            Some(vec![4])
        );
        assert_eq!(reshape_operand_tiles(&[48], &[8, 6], &[1, 2]), None);
        assert_eq!(reshape_operand_tiles(&[6, 4], &[6, 2, 2], &[2, 1, 2]), None);
        assert_eq!(
            reshape_operand_tiles(&[6, 4], &[6, 2, 2], &[2, 2, 1]),
            Some(vec![2, 2])
        );
        assert_eq!(
            reshape_operand_tiles(&[10], &[2, 5], &[2, 1]),
            Some(vec![2])
        );
        assert_eq!(reshape_operand_tiles(&[10], &[5, 2], &[2, 1]), None);
    }
}
