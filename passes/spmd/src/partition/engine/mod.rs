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

use tessera_hlo::fxhash::FxHashMap as FxMap;

use tessera_hlo::analysis::post_order;
use tessera_hlo::attrs::{ComparisonDirection, PaddingDim};
use tessera_hlo::{
    Builder, CompId, ElementType, InstrId, Instruction, Literal, Module, Opcode, Shape, Sharding,
    ShardingKind,
};
use tessera_pass::passes::FlattenCallGraph;
use tessera_pass::{Pass, PassError, Result};

use super::plan::{self, Step};
use super::spec::{Spec, Tiling};
use super::{CollectiveNote, CollectiveOps, SpmdOptions, SpmdReport};

mod control;
mod conv;
mod custom_call;
mod dot;
mod dynamic_slice;
mod feeds;
mod indexed;
mod partial_manual;
mod random;
mod reduce;
mod shape_ops;
mod sort;
mod window;
mod windowed_dot;

/// Stack left before a nested computation walk grows a new segment: one level (instruction,
/// handler, reshard) stays well inside it even in debug builds.
const STACK_RED_ZONE: usize = 256 * 1024;
/// The size of each new stack segment (about a hundred levels of nesting).
const STACK_SEGMENT: usize = 16 * 1024 * 1024;

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
    values: FxMap<InstrId, Value>,
    /// How many of `values` each local instruction stands for (written only by `set`): asked
    /// once per windowed op, where a scan of `values` made those ops quadratic.
    locals: FxMap<InstrId, u32>,
    /// Reshards made so far: per local value, each target and the instruction holding it.
    cache: FxMap<InstrId, Vec<(Tree, InstrId)>>,
    pid: FxMap<CompId, InstrId>,
    tables: FxMap<(CompId, Vec<i64>), InstrId>,
    done: HashSet<CompId>,
    /// The global shapes of the parameters partitioned so far (their instruction now holds
    /// the local shape).
    globals: FxMap<InstrId, Shape>,
    /// Copies of original instructions and the names they take back, by the computation the
    /// copy is in (named when that computation's walk ends). One list for the whole module
    /// was scanned at the end of every computation's walk: quadratic in the number of
    /// computations, since the entry's copies wait there while all its callees are walked.
    renames: FxMap<CompId, Vec<(InstrId, String)>>,
    report: SpmdReport,
    /// Inside a partially manual region: the real devices of each manual group, by local
    /// device id (`n` is then the group size); see `partial_manual`.
    view: Option<partial_manual::Groups>,
    /// Computations whose root is partially manual (an entry result with such a sharding):
    /// the root is resharded in the view of these subgroups.
    root_view: FxMap<CompId, partial_manual::Groups>,
    /// When and how dots become windowed loops (`windowed_dot`).
    windowed: Windowed,
    /// XLA's `conv_halo_exchange_always_on_lhs`: when false, convolutions also cost halos on
    /// the kernel (`conv`).
    conv_halo_on_lhs_only: bool,
}

/// The windowed-einsum options, as the engine reads them.
struct Windowed {
    threshold_mib: i64,
    max_iterations: i64,
    unroll: bool,
    bidirectional: bool,
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
    let replicas = replicas.max(1);
    // Each call site of a while body or condition, conditional branch or call body is
    // partitioned with its own operand and result shardings, as XLA partitions call sites
    // whose shardings differ: a computation with several call sites gets a copy per site
    // (`<name>.clone`, shardings kept). A module already flat is left as it is.
    FlattenCallGraph::default().run(module)?;
    creator.set_device_counts(n, replicas);
    let entry = module
        .entry()
        .ok_or_else(|| fail("spmd-partitioning: the module has no entry computation"))?;
    module.config.num_partitions = n;
    module.config.replica_count = replicas;
    module.schedule = None;
    // With the signature kept, every device takes the whole of each entry parameter and
    // returns the whole result: the entry's boundary is replicated, whatever its shardings
    // say (they are still read, so a bad one is still an error).
    let keep_signature = !options.allow_module_signature_change;
    let comp = module.comp(entry);
    let mut param_trees = Vec::new();
    for p in 0..comp.num_parameters() {
        let id = comp
            .parameter(p)
            .ok_or_else(|| fail(format!("entry parameter {p} is missing")))?;
        // A partially manual parameter holds each device's piece of its manual subgroup's
        // value (XLA's SubgroupManualReduce): read in the view of its subgroups.
        let own = match partial_manual::tree(module, id, n)? {
            Some((t, _)) => t,
            None => tree_of(module, id, n)?,
        };
        param_trees.push(if keep_signature {
            replicated_tree(&module.instr(id).shape, n)
        } else {
            own
        });
    }
    let root = comp
        .root()
        .ok_or_else(|| fail("spmd-partitioning: the entry computation has no root"))?;
    let root_view = partial_manual::tree(module, root, n)?;
    let own_root = match &root_view {
        Some((t, _)) => t.clone(),
        None => tree_of(module, root, n)?,
    };
    let (root_tree, root_sharding) = if keep_signature {
        let t = replicated_tree(&module.instr(root).shape, n);
        let s = tree_to_sharding(&t);
        (t, Some(s))
    } else {
        (own_root, module.instr(root).sharding.clone())
    };
    let k = options.report_instruction_count as usize;
    let largest_before = largest(module, entry, k);
    let mut engine = Engine {
        n,
        creator,
        values: FxMap::default(),
        locals: FxMap::default(),
        cache: FxMap::default(),
        pid: FxMap::default(),
        tables: FxMap::default(),
        done: HashSet::new(),
        globals: FxMap::default(),
        renames: FxMap::default(),
        view: None,
        root_view: FxMap::default(),
        windowed: Windowed {
            threshold_mib: options.threshold_for_windowed_einsum_mib,
            max_iterations: options.max_windowed_einsum_iteration,
            unroll: options.unroll_windowed_einsum,
            bidirectional: options.bidirectional_windowed_einsum,
        },
        conv_halo_on_lhs_only: options.conv_halo_exchange_always_on_lhs,
        report: SpmdReport {
            num_partitions: n,
            ..Default::default()
        },
    };
    if let (Some((_, groups)), false) = (root_view, keep_signature) {
        engine.root_view.insert(entry, groups);
    }
    {
        let mut b = Builder::new(module, entry);
        engine.computation(&mut b, entry, &param_trees, &root_tree)?;
    }
    if keep_signature {
        // Every device now takes each parameter whole.
        let params: Vec<InstrId> = module.comp(entry).parameters().collect();
        for p in params {
            module.instr_mut(p).sharding = Some(Sharding::replicated());
        }
    }
    let new_root = module.comp(entry).root().expect("set above");
    if module.instr(new_root).opcode() != Opcode::Parameter {
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

/// The `k` largest instructions of `comp` by the bytes of their shape, largest first (ties
/// by name).
fn largest(m: &Module, comp: CompId, k: usize) -> Vec<(String, i64)> {
    let mut all: Vec<(i64, &str)> = m
        .comp(comp)
        .instructions()
        .iter()
        .map(|&i| {
            let i = m.instr(i);
            (i.shape.byte_size(8), i.name())
        })
        .collect();
    let order = |a: &(i64, &str), b: &(i64, &str)| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1));
    if k == 0 {
        return Vec::new();
    }
    if all.len() > k {
        all.select_nth_unstable_by(k - 1, order);
        all.truncate(k);
    }
    all.sort_unstable_by(order);
    all.into_iter().map(|(b, n)| (n.to_string(), b)).collect()
}

fn tree_of(m: &Module, id: InstrId, n: i64) -> Result<Tree> {
    let i = m.instr(id);
    tree_for(i.sharding.as_ref(), &i.shape, n).map_err(|e| fail(format!("%{}: {e}", i.name())))
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
        // Called computations are partitioned from their caller's handler (their parameters
        // take the caller's operand shardings), so a chain of calls N deep nests N walks. The
        // stack grows on the heap as the chain needs, instead of overflowing at a few thousand.
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            self.computation_walk(b, comp, params, root)
        })
    }

    fn computation_walk(
        &mut self,
        b: &mut Builder,
        comp: CompId,
        params: &[Tree],
        root: &Tree,
    ) -> Result<()> {
        // `partition` flattened the call graph first: a second walk would partition a
        // computation already holding local shapes.
        if !self.done.insert(comp) {
            return Err(fail(format!(
                "computation {} is reached twice after flatten-call-graph (a partitioner bug)",
                b.module().comp(comp).name()
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
        let new_root = match self.root_view.get(&comp).cloned() {
            Some(groups) => self.in_groups(groups, |e| e.reshard(b, &v, &base, root))?,
            None => self.reshard(b, &v, &base, root)?,
        };
        b.set_origin(None);
        b.module_mut().set_root(comp, new_root);
        let dead: Vec<InstrId> = old
            .into_iter()
            .filter(|&i| b.module().instr(i).opcode() != Opcode::Parameter)
            .collect();
        b.module_mut().remove_instructions(&dead)?;
        let m = b.module_mut();
        // Copies removed since (dead code of the walk) are skipped. Instructions never move
        // between computations here, so the list holds every copy in `comp`.
        for (id, name) in self.renames.remove(&comp).unwrap_or_default() {
            if m.try_instr(id).is_some() && !m.is_name_used(&name) {
                m.rename_instruction(id, name)?;
            }
        }
        b.set_computation(saved);
        Ok(())
    }

    /// Gives `copy` the name `name` when the walk of its computation ends (the original
    /// holding the name is removed then), if no other instruction has taken it by then.
    fn name_later(&mut self, m: &Module, copy: InstrId, name: String) {
        let comp = m.instr(copy).parent();
        self.renames.entry(comp).or_default().push((copy, name));
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
        self.name_later(b.module(), c, i.name().to_string());
        Ok(c)
    }

    /// A new computation, placed before every other (callees come before their callers).
    fn new_computation(&mut self, b: &mut Builder, name: &str) -> Result<CompId> {
        let origin = self.origin_name(b);
        let m = b.module_mut();
        let name = m.unique_computation_name(name);
        let c = m
            .add_computation(name)
            .map_err(|e| fail(format!("%{origin}: {e}")))?;
        let mut order = m.computations().to_vec();
        order.retain(|&x| x != c);
        order.insert(0, c);
        m.set_computation_order(order);
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
        if let Some(old) = self.values.insert(id, Value { local, tree }) {
            if let Some(n) = self.locals.get_mut(&old.local) {
                *n -= 1;
                if *n == 0 {
                    self.locals.remove(&old.local);
                }
            }
        }
        *self.locals.entry(local).or_insert(0) += 1;
    }

    /// True if `local` is the local instruction of some partitioned value.
    fn is_local_of_a_value(&self, local: InstrId) -> bool {
        self.locals.contains_key(&local)
    }

    fn value(&self, m: &Module, id: InstrId) -> Result<Value> {
        self.values.get(&id).cloned().ok_or_else(|| {
            fail(format!(
                "%{} was used before it was partitioned",
                m.instr(id).name()
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
        // Most operands already hold the target, or were resharded to it before: answered
        // without copying the value's tree or shape.
        if let Some(v) = self.values.get(&op) {
            if v.tree == *target {
                return Ok(v.local);
            }
            if let Some(x) = self.cached(v.local, target) {
                return Ok(x);
            }
        }
        if let Some(x) = self.rebroadcast(b, op, target)? {
            return Ok(x);
        }
        let v = self.value(b.module(), op)?;
        let base = self.global(b.module(), op);
        self.reshard(b, &v, &base, target)
    }

    /// Original broadcast `op` built again as `target` from its source, when the source
    /// reaches what that needs for fewer bytes than the broadcast's value moves (a
    /// replicated scalar: for nothing, where moving the broadcast would be an all-to-all or
    /// an all-gather). XLA's partitioned modules show the same: a broadcast of a constant
    /// is broadcast again at each user's sharding. Cached like a reshard.
    fn rebroadcast(
        &mut self,
        b: &mut Builder,
        op: InstrId,
        target: &Tree,
    ) -> Result<Option<InstrId>> {
        let i = b.module().instr(op);
        if i.opcode() != Opcode::Broadcast || i.operands().len() != 1 {
            return Ok(None);
        }
        let src = i.operands()[0];
        let (Tree::Leaf(Spec::Tiled(t)), Some(v), Some(sv)) =
            (target, self.values.get(&op), self.values.get(&src))
        else {
            return Ok(None);
        };
        let (Tree::Leaf(Spec::Tiled(cur)), Tree::Leaf(Spec::Tiled(scur))) = (&v.tree, &sv.tree)
        else {
            return Ok(None);
        };
        let (Shape::Array(ba), Shape::Array(sa)) =
            (self.global(b.module(), op), self.global(b.module(), src))
        else {
            return Ok(None);
        };
        let map: Vec<Option<usize>> = i
            .attrs
            .dimensions
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|&d| Some(d as usize))
            .collect();
        if map.len() != sa.dims.len() {
            return Ok(None);
        }
        let want = t.project(&map);
        if self.move_bytes(scur, &want, &sa.dims, sa.ty) >= self.move_bytes(cur, t, &ba.dims, ba.ty)
        {
            return Ok(None);
        }
        let (local, i) = (v.local, i.clone());
        let sv = sv.clone();
        let x = self.reshard(b, &sv, &Shape::Array(sa), &Tree::Leaf(Spec::Tiled(want)))?;
        let out = clone_of(b, &i, &[x], local_shape(&i.shape, target))?;
        self.cache
            .entry(local)
            .or_default()
            .push((target.clone(), out));
        Ok(Some(out))
    }

    fn instruction(&mut self, b: &mut Builder, id: InstrId, params: &[Tree]) -> Result<()> {
        let n = self.n;
        let i = b.module().instr(id);
        let real = self.real_device_count();
        if i.opcode() == Opcode::Parameter {
            // A partially manual parameter (an entry parameter, or a callee's inside a
            // region) takes the tree its caller or the entry read for it.
            if let Some((own, _)) = partial_manual::tree(b.module(), id, real)? {
                return self.dispatch(b, id, own, params);
            }
        } else {
            if let Some((own, groups)) = partial_manual::tree(b.module(), id, real)? {
                if is_manual_boundary(i) {
                    return self.enter_partial_manual(b, id, own, &groups);
                }
                return self.in_view(b, id, own, groups, params);
            }
        }
        let own = tree_of(b.module(), id, n)?;
        self.dispatch(b, id, own, params)
    }

    /// Partitions `id` whose sharding reads as `own` on `self.n` devices.
    fn dispatch(&mut self, b: &mut Builder, id: InstrId, own: Tree, params: &[Tree]) -> Result<()> {
        let i = b.module().instr(id);
        let opcode = i.opcode();
        if self.view.is_some() {
            match opcode {
                Opcode::AllReduce if i.attrs.channel_id.is_some() => {
                    return self.collective_in_view(b, id, own)
                }
                Opcode::AllGather
                | Opcode::AllToAll
                | Opcode::CollectivePermute
                | Opcode::ReduceScatter => return self.collective_in_view(b, id, own),
                // jax's axis_index: the real partition id, from which the program computes
                // its place along the manual axes (the same on every device of a subgroup).
                Opcode::PartitionId => {
                    let i = i.clone();
                    let out = self.clone_with(b, &i, &[], i.shape.clone())?;
                    self.set(id, out, own);
                    return Ok(());
                }
                _ => {}
            }
        }
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
            Opcode::Convolution => self.convolution(b, id, own),
            Opcode::Tuple => self.tuple(b, id, own),
            Opcode::GetTupleElement => self.get_tuple_element(b, id, own),
            Opcode::OptimizationBarrier => self.barrier(b, id),
            Opcode::While => self.while_loop(b, id, own),
            Opcode::Conditional => self.conditional(b, id, own),
            Opcode::Call => self.call(b, id, own),
            Opcode::CustomCall => self.custom_call(b, id, own),
            Opcode::Iota => self.iota(b, id, own),
            Opcode::Slice => self.slice(b, id, own),
            Opcode::ReduceWindow => self.reduce_window(b, id, own),
            Opcode::Pad => self.pad(b, id, own),
            Opcode::Concatenate => self.concatenate(b, id, own),
            Opcode::Reverse => self.reverse(b, id, own),
            Opcode::DynamicSlice => self.dynamic_slice(b, id, own),
            Opcode::DynamicUpdateSlice => self.dynamic_update_slice(b, id, own),
            Opcode::SelectAndScatter => self.select_and_scatter(b, id, own),
            Opcode::Rng => self.rng(b, id, own),
            Opcode::Infeed => self.infeed(b, id, own),
            Opcode::Outfeed => self.outfeed(b, id, own),
            Opcode::AllReduce => self.cross_replica_all_reduce(b, id, own),
            Opcode::Gather => self.gather(b, id, own),
            Opcode::Scatter => self.scatter(b, id, own),
            Opcode::Sort => self.sort(b, id, own),
            Opcode::TopK => self.top_k(b, id, own),
            Opcode::Fft | Opcode::Cholesky | Opcode::TriangularSolve => {
                self.batched_linear(b, id, own)
            }
            Opcode::PartitionId => Err(fail(format!(
                "%{}: partition-id outside a manual region has no single meaning once \
                 partitioned (XLA refuses it too); use it inside a manual region",
                b.module().instr(id).name()
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
        if let Some(x) = self.cached(v.local, target) {
            return Ok(x);
        }
        let out = match (&v.tree, target, base) {
            (Tree::Tuple(src), Tree::Tuple(dst), Shape::Tuple(shapes))
                if src.len() == dst.len() && dst.len() == shapes.len() =>
            {
                let mut parts = Vec::with_capacity(dst.len());
                for k in 0..dst.len() {
                    let g = b.get_tuple_element(v.local, k as i64)?;
                    let ev = Value {
                        local: g,
                        tree: src[k].clone(),
                    };
                    parts.push(self.reshard(b, &ev, &shapes[k], &dst[k])?);
                }
                b.tuple(&parts)?
            }
            (Tree::Leaf(s), Tree::Leaf(t), Shape::Array(a)) => {
                self.reshard_array(b, v.local, s, t, &a.dims, a.ty)?
            }
            (Tree::Leaf(_), Tree::Leaf(_), _) => v.local,
            _ => {
                return Err(fail(format!(
                    "%{}: cannot reshard {:?} to {:?}",
                    b.module().instr(v.local).name(),
                    v.tree,
                    target
                )))
            }
        };
        self.cache
            .entry(v.local)
            .or_default()
            .push((target.clone(), out));
        Ok(out)
    }

    /// The instruction that already holds local value `local` resharded to `target`.
    fn cached(&self, local: InstrId, target: &Tree) -> Option<InstrId> {
        self.cache
            .get(&local)?
            .iter()
            .find(|(t, _)| t == target)
            .map(|&(_, x)| x)
    }

    fn origin_name(&self, b: &Builder) -> String {
        b.origin()
            .and_then(|o| b.module().try_instr(o))
            .map_or_else(|| "?".to_string(), |i| i.name().to_string())
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
        // Inside a partially manual region, a value replicated on all devices is replicated
        // within each manual group too.
        let widened;
        let src = match src {
            Spec::Tiled(t) if t.is_replicated() && t.num_devices() != self.n => {
                widened = Spec::replicated(dims.len(), self.n);
                &widened
            }
            _ => src,
        };
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
        let values = &self.real_table(values)[..];
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
            b.scalar(ElementType::S32, values[0] as f64)?
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
            let c = b.constant(lit)?;
            let pid = self.partition_id(b)?;
            let one = b.dynamic_slice(c, &[pid], &[1])?;
            b.reshape(one, &[])?
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
                    let zero = b.scalar(ty, 0.0)?;
                    let pads: Vec<PaddingDim> = pad_high
                        .iter()
                        .map(|&h| PaddingDim {
                            low: 0,
                            high: h,
                            interior: 0,
                        })
                        .collect();
                    x = b.pad(x, zero, &pads)?;
                }
                let local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
                let same = (0..rank).all(|i| offsets.iter().all(|o| o[i] == offsets[0][i]));
                if same {
                    if local == *sizes && offsets[0].iter().all(|&o| o == 0) {
                        return Ok(x);
                    }
                    let limits: Vec<i64> = (0..rank).map(|i| offsets[0][i] + sizes[i]).collect();
                    return Ok(b.slice(x, &offsets[0], &limits, &vec![1; rank])?);
                }
                let mut starts = Vec::with_capacity(rank);
                for i in 0..rank {
                    let per: Vec<i64> = offsets.iter().map(|o| o[i]).collect();
                    starts.push(self.table(b, &per)?);
                }
                Ok(b.dynamic_slice(x, &starts, sizes)?)
            }
            Step::AllGather {
                dims: along,
                tiles,
                groups,
                ..
            } => {
                let local: Vec<i64> = b.module().instr(x).shape.dims().to_vec();
                let gathered = if along.len() == 1 {
                    self.all_gather(b, x, along[0] as i64, groups)?
                } else {
                    // One collective for several dimensions: gather along a new leading
                    // dimension, then move each gathered tile axis next to its dimension.
                    let mut lead = vec![1];
                    lead.extend_from_slice(&local);
                    let r = b.reshape(x, &lead)?;
                    let g = self.all_gather(b, r, 0, groups)?;
                    let mut split: Vec<i64> = tiles.clone();
                    split.extend_from_slice(&local);
                    let g = b.reshape(g, &split)?;
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
                    let t = b.transpose(g, &perm)?;
                    b.reshape(t, &merged)?
                };
                self.trim(b, gathered, dims, along)
            }
            Step::AllToAll {
                split,
                concat,
                groups,
                ..
            } => self.emit_all_to_all(b, x, split, concat, groups, dims, ty),
            Step::Permute { pairs, .. } => self.collective_permute(b, x, pairs),
            Step::FromMaximal { device, .. } => {
                let pid = self.partition_id(b)?;
                let d = b.scalar(ElementType::U32, *device as f64)?;
                let is = b.compare(pid, d, ComparisonDirection::Eq)?;
                let shape = b.module().instr(x).shape.clone();
                let pred = broadcast_scalar(b, is, shape.dims())?;
                let zero = b.scalar(ty, 0.0)?;
                let zeros = broadcast_scalar(b, zero, shape.dims())?;
                let masked = b.select(pred, x, zeros)?;
                let op = if ty == ElementType::Pred {
                    Opcode::Or
                } else {
                    Opcode::Add
                };
                let reducer = b.reducer(ty, op)?;
                // The device is a real one, also inside a partially manual region: its value
                // goes to every device, so every manual subgroup holds it whole.
                // The one collective built with real ids, past the door on purpose.
                let all: Vec<i64> = (0..self.real_device_count()).collect();
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
        Ok(b.slice(x, &vec![0; rank], &limits, &vec![1; rank])?)
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
            let iota = b.iota(Shape::array(ElementType::S32, &shard), d as i64)?;
            let vb = broadcast_scalar(b, v, &shard)?;
            let m = b.compare(iota, vb, ComparisonDirection::Lt)?;
            mask = Some(match mask {
                None => m,
                Some(prev) => b.binary(Opcode::And, prev, m)?,
            });
        }
        let fills = broadcast_scalar(b, fill, &shard)?;
        Ok(b.select(mask.expect("a padded dimension"), x, fills)?)
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
        // A stateful random value is drawn once (on device 0) and sent to everyone;
        // rng-bit-generator is a pure function of its state, computed alike everywhere.
        let tree = if i.opcode() == Opcode::Rng {
            maximal_tree(&i.shape, 0)
        } else {
            replicated_tree(&i.shape, n)
        };
        let v = Value { local: out, tree };
        let local = self.reshard(b, &v, &i.shape, &own)?;
        self.report.defaulted.push(i.name().to_string());
        self.set(id, local, own);
        Ok(())
    }

    /// Inside a manual region: every device runs the instruction on its own values. The
    /// bodies of manual control flow are per-device programs too: they are walked with
    /// manual parameters and root (so their shardings are consumed like everyone else's).
    fn manual(&mut self, b: &mut Builder, id: InstrId, own: Tree) -> Result<()> {
        let i = b.module().instr(id).clone();
        if matches!(
            i.opcode(),
            Opcode::While | Opcode::Conditional | Opcode::Call
        ) {
            for &c in &i.called {
                let comp = b.module().comp(c);
                let params: Vec<Tree> = comp
                    .parameters()
                    .map(|p| manual_tree(&b.module().instr(p).shape))
                    .collect();
                let root = comp.root().map_or(Tree::Tuple(Vec::new()), |r| {
                    manual_tree(&b.module().instr(r).shape)
                });
                self.computation(b, c, &params, &root)?;
            }
            b.set_origin(Some(id));
        }
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
}

fn manual_tree(shape: &Shape) -> Tree {
    match shape {
        Shape::Tuple(e) => Tree::Tuple(e.iter().map(manual_tree).collect()),
        _ => Tree::Leaf(Spec::Manual),
    }
}

/// The boundary custom-calls of a manual region carry `{manual}` but convert shapes.
fn is_manual_boundary(i: &Instruction) -> bool {
    i.opcode() == Opcode::CustomCall
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
    let mut c = Instruction::new(i.name().to_string(), i.opcode(), shape)
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
    Ok(b.add(c)?)
}

fn broadcast_scalar(b: &mut Builder, x: InstrId, dims: &[i64]) -> Result<InstrId> {
    Ok(b.broadcast(x, dims, &[])?)
}
