//! The `auto-sharding` pass: shardings for the entry computation's arrays, chosen by the
//! solver over an IOPDDL problem built from the module.
//!
//! Every array of the entry computation whose dimensions the pass can relate to its operands'
//! (parameters, constants, iotas, element-wise ops, broadcast, transpose, reshape, reduce,
//! dot, convolution, slice, pad, concatenate, reverse, dynamic-(update-)slice, the `Sharding`
//! custom-call) becomes a node. Its strategies are the ways to lay it on the mesh: every mesh
//! axis either splits one dimension (the split sizes dividing it) or replicates; a dot, a
//! convolution or a reduce may also split a contracted dimension over an axis its output does
//! not use, and pays an all-reduce of its output for it. A strategy costs the op's time per
//! device (FLOPs over a compute rate plus bytes touched over a memory rate, divided by the
//! devices that split the work) plus that all-reduce; it uses its array's bytes per device over
//! the array's live interval along the entry's post order (parameters use none: the peak the
//! project measures leaves them out). An edge from a producer to a consumer costs, for each
//! pair of their strategies, the resharding from what the producer has to what the consumer's
//! strategy needs of that operand (all-to-all where an axis moves, all-gather where it goes,
//! free where it comes: a slice). Shardings the module already has are constraints: their node
//! keeps only the strategies that write them (or is left out when none does).
//!
//! The solver's answer is written on the instructions; sharding propagation then fills in the
//! rest (tuples, loop bodies, ops the pass does not model) and the partitioner runs as usual.
//! See docs/auto-sharding.md.

use std::fmt::Write;
use std::time::{Duration, Instant};

use tessera_hlo::analysis::order::post_order;
use tessera_hlo::analysis::shape_size;
use tessera_hlo::sharding::{AxisRef, DimSharding, Mesh};
use tessera_hlo::text::sharding_to_string;
use tessera_hlo::tiling::reshape_groups;
use tessera_hlo::{InstrId, Module, NamedSharding, Opcode, Sharding};
use tessera_pass::options::{parse_int, unknown_key, OptionDoc, PassOptions};
use tessera_pass::registry::RegisteredPass;
use tessera_pass::{Pass, PassError, Registry};

use crate::iopddl::Problem;
use crate::mesh::{DeviceMesh, MeshError};
use crate::solver::{solve, SolveOptions};

/// Compute rate per device (FLOP/s) of the cost model.
pub const FLOP_RATE: f64 = 1e11;
/// Memory rate per device (bytes/s): an op touches its operands and its result.
pub const MEMORY_RATE: f64 = 5e10;
/// Link rate per device (bytes/s) a collective's received bytes travel at.
pub const LINK_RATE: f64 = 2e9;
/// Latency of one step of a collective (s); a collective over `g` devices takes
/// `ceil(log2 g)` steps.
pub const LINK_LATENCY: f64 = 1e-6;

/// Options of `auto-sharding`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoShardOptions {
    /// `NAME=SIZE,...`; `None`: a 1-D mesh of `num_partitions` devices.
    pub mesh: Option<String>,
    /// Peak bytes per device of the arrays the pass models (parameters not counted).
    pub memory_limit: Option<i64>,
    /// Without `memory_limit`, the budget is this many hundredths of the lowest peak any
    /// layout reaches (every array split as finely as the mesh allows), as XLA's former
    /// auto-sharding's `memory_budget_ratio`: the step time is then bought with at most
    /// that much memory.
    pub memory_budget_percent: i64,
    /// Wall-clock limit of the solver.
    pub time_limit: Duration,
    /// Solver rounds at most: the result does not depend on the clock when the solver ends
    /// by this bound first (it does on every model in testdata).
    pub max_iterations: usize,
}

impl Default for AutoShardOptions {
    fn default() -> Self {
        AutoShardOptions {
            mesh: None,
            memory_limit: None,
            memory_budget_percent: 110,
            time_limit: Duration::from_secs(20),
            max_iterations: 20,
        }
    }
}

impl PassOptions for AutoShardOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "mesh",
            default: "a 1-D mesh of num_partitions",
            doc: "the device mesh, NAME=SIZE,... (sizes multiply to num_partitions)",
        },
        OptionDoc {
            key: "memory_limit",
            default: "none",
            doc: "peak bytes per device of the modeled arrays (K, M, G suffixes)",
        },
        OptionDoc {
            key: "memory_budget_percent",
            default: "110",
            doc: "without memory_limit: the budget in percent of the least-memory layout's peak",
        },
        OptionDoc {
            key: "time_limit",
            default: "20",
            doc: "seconds the solver may take",
        },
        OptionDoc {
            key: "max_iterations",
            default: "20",
            doc: "solver rounds at most (the bound that keeps the output deterministic)",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let positive = |v: &str| {
            let n = parse_int(v)?;
            if n < 1 {
                return Err(format!("expected a positive integer, found `{v}`"));
            }
            Ok(n)
        };
        match key {
            "mesh" => self.mesh = Some(value.to_string()),
            "memory_limit" => self.memory_limit = Some(positive(value)?),
            "memory_budget_percent" => self.memory_budget_percent = positive(value)?,
            "time_limit" => self.time_limit = Duration::from_secs(positive(value)? as u64),
            "max_iterations" => self.max_iterations = positive(value)? as usize,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// Why the pass failed.
#[derive(Debug, thiserror::Error)]
pub enum AutoShardError {
    #[error(transparent)]
    Mesh(#[from] MeshError),
    #[error("the module has no entry computation")]
    NoEntry,
    #[error(
        "no sharding fits --memory-limit {limit}: the lowest per-device peak of the modeled \
         arrays the solver found is {best_peak} bytes (parameters not counted); raise the \
         limit or use more devices"
    )]
    Infeasible { limit: i64, best_peak: i64 },
}

/// One op the pass decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub instruction: String,
    /// The strategy chosen: the sharding written, and the axes a contraction is split over.
    pub chosen: String,
    /// Its cost (µs): the op's own and the resharding of its operands, the neighbours fixed.
    pub cost_us: f64,
    /// The cheapest other strategy, the neighbours fixed, and its cost (µs).
    pub runner_up: Option<(String, f64)>,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutoShardReport {
    pub mesh: String,
    /// Nodes, strategies and edges of the problem solved.
    pub nodes: usize,
    pub strategies: usize,
    pub edges: usize,
    /// Instructions that kept the sharding the module gave them.
    pub constrained: usize,
    /// The solution's estimated step time (µs) and the solver's lower bound.
    pub cost_us: f64,
    pub lower_bound_us: f64,
    pub optimal: bool,
    /// Estimated per-device peak of the modeled arrays.
    pub peak: i64,
    /// The limit solved under: --memory-limit, else the budget (`memory_budget_percent`).
    pub limit: Option<i64>,
    pub solve_time: Duration,
    pub decisions: Vec<Decision>,
}

impl AutoShardReport {
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "mesh {}: {} nodes, {} strategies, {} edges; {} constrained by the module",
            self.mesh, self.nodes, self.strategies, self.edges, self.constrained
        );
        let _ = writeln!(
            o,
            "estimated step {:.1} us (lower bound {:.1} us{}), modeled peak {} bytes per device{}, \
             solved in {:.1} ms",
            self.cost_us,
            self.lower_bound_us,
            if self.optimal { ", optimal" } else { "" },
            self.peak,
            self.limit
                .map(|l| format!(" (limit {l})"))
                .unwrap_or_default(),
            self.solve_time.as_secs_f64() * 1e3
        );
        for d in &self.decisions {
            let _ = write!(o, "  %{}: {} {:.2} us", d.instruction, d.chosen, d.cost_us);
            match &d.runner_up {
                Some((s, c)) => {
                    let _ = writeln!(o, "; runner-up {s} {c:.2} us");
                }
                None => {
                    let _ = writeln!(o);
                }
            }
        }
        o
    }
}

/// Per working mesh axis: the array dimension it splits, if any.
type AxisMap = Vec<Option<usize>>;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Strategy {
    out: AxisMap,
    /// Per axis: the contracted dimension (index into [`OpModel::contract`]) it splits.
    contract: AxisMap,
}

/// How an op's dimensions relate to its operands', and its work.
struct OpModel {
    /// Per operand: for each output dimension the operand dimension it corresponds to; `None`
    /// for an operand without an edge (a scalar, a tuple).
    maps: Vec<Option<Vec<Option<usize>>>>,
    /// Contracted dimensions: per operand the dimension (if that operand has it), and its size.
    contract: Vec<(Vec<Option<usize>>, i64)>,
    flops: f64,
    /// Bytes read and written (global).
    bytes: f64,
    /// Splitting the output splits the work (false: the operands are needed whole).
    splits_work: bool,
}

struct Node {
    id: InstrId,
    model: OpModel,
    strategies: Vec<Strategy>,
    bytes: i64,
    dims: Vec<i64>,
    parameter: bool,
}

fn elements(m: &Module, id: InstrId) -> f64 {
    m.instr(id)
        .shape
        .as_array()
        .map_or(0.0, |a| a.element_count() as f64)
}

/// The model of `id`, or `None` for an op the pass leaves to propagation.
fn op_model(m: &Module, id: InstrId) -> Option<OpModel> {
    use Opcode::*;
    let i = m.instr(id);
    let out = i.shape.dims();
    let rank = out.len();
    let opnd = |k: usize| m.instr(i.operand(k));
    let array_bytes: f64 = i
        .operands()
        .iter()
        .map(|&o| {
            let s = &m.instr(o).shape;
            if s.is_array() {
                shape_size(s) as f64
            } else {
                0.0
            }
        })
        .sum::<f64>()
        + shape_size(&i.shape) as f64;
    let n_out = elements(m, id);
    // Operands of the output's dimensions map one to one; others (scalars) have no edge.
    let same_rank = |equal_size_only: bool, skip: &[i64]| -> Vec<Option<Vec<Option<usize>>>> {
        (0..i.operands().len())
            .map(|k| {
                let s = &opnd(k).shape;
                if !s.is_array() || s.rank() != rank || rank == 0 {
                    return None;
                }
                Some(
                    (0..rank)
                        .map(|d| {
                            let ok = (!equal_size_only || s.dims()[d] == out[d])
                                && !skip.contains(&(d as i64));
                            ok.then_some(d)
                        })
                        .collect(),
                )
            })
            .collect()
    };
    let simple = |maps, flops| OpModel {
        maps,
        contract: Vec::new(),
        flops,
        bytes: array_bytes,
        splits_work: true,
    };
    let opcode = i.opcode();
    let is_sharding_call = opcode == CustomCall
        && i.attrs
            .custom_call
            .as_ref()
            .is_some_and(|c| c.target == "Sharding");
    Some(match opcode {
        Parameter => OpModel {
            maps: Vec::new(),
            contract: Vec::new(),
            flops: 0.0,
            bytes: 0.0,
            splits_work: true,
        },
        Constant | Iota => simple(Vec::new(), 0.0),
        _ if opcode.is_elementwise() || is_sharding_call => {
            let maps = same_rank(false, &[]);
            // bitcast-convert between widths changes the rank; the same rank keeps the dims.
            if maps.iter().flatten().count() == 0 && !i.operands().is_empty() {
                return None;
            }
            if i.operands().iter().any(|&o| {
                let s = &m.instr(o).shape;
                s.is_array() && s.rank() == rank && s.dims() != out
            }) {
                return None;
            }
            simple(maps, n_out)
        }
        Broadcast => {
            let dims = i.attrs.dimensions.as_ref()?;
            let mut map = vec![None; rank];
            for (k, &d) in dims.iter().enumerate() {
                *map.get_mut(d as usize)? = Some(k);
            }
            simple(vec![Some(map)], 0.0)
        }
        Transpose => {
            let perm = i.attrs.dimensions.as_ref()?;
            let map = perm.iter().map(|&p| Some(p as usize)).collect();
            simple(vec![Some(map)], 0.0)
        }
        Reshape => {
            let from = opnd(0).shape.dims();
            let mut map = vec![None; rank];
            for (f, t) in reshape_groups(from, out)? {
                if let (Some(&f0), Some(&t0)) = (f.first(), t.first()) {
                    map[t0] = Some(f0);
                }
            }
            simple(vec![Some(map)], 0.0)
        }
        Reduce if i.operands().len() == 2 => {
            let reduced = i.attrs.dimensions.as_ref()?;
            let in_dims = opnd(0).shape.dims();
            let kept: Vec<usize> = (0..in_dims.len())
                .filter(|d| !reduced.contains(&(*d as i64)))
                .collect();
            if kept.len() != rank {
                return None;
            }
            let contract = reduced
                .iter()
                .map(|&d| Some((vec![Some(d as usize), None], *in_dims.get(d as usize)?)))
                .collect::<Option<_>>()?;
            OpModel {
                maps: vec![Some(kept.into_iter().map(Some).collect()), None],
                contract,
                flops: elements(m, i.operand(0)),
                bytes: array_bytes,
                splits_work: true,
            }
        }
        Dot => {
            let dn = i.attrs.dot_dims.as_ref()?;
            let (l, r) = (opnd(0).shape.dims(), opnd(1).shape.dims());
            let free = |n: usize, batch: &[i64], contracting: &[i64]| -> Vec<usize> {
                (0..n)
                    .filter(|d| {
                        !batch.contains(&(*d as i64)) && !contracting.contains(&(*d as i64))
                    })
                    .collect()
            };
            let lf = free(
                l.len(),
                &dn.lhs_batch_dimensions,
                &dn.lhs_contracting_dimensions,
            );
            let rf = free(
                r.len(),
                &dn.rhs_batch_dimensions,
                &dn.rhs_contracting_dimensions,
            );
            let nb = dn.lhs_batch_dimensions.len();
            if nb + lf.len() + rf.len() != rank || dn.rhs_batch_dimensions.len() != nb {
                return None;
            }
            let mut lm = vec![None; rank];
            let mut rm = vec![None; rank];
            for b in 0..nb {
                lm[b] = Some(dn.lhs_batch_dimensions[b] as usize);
                rm[b] = Some(dn.rhs_batch_dimensions[b] as usize);
            }
            for (k, &d) in lf.iter().enumerate() {
                lm[nb + k] = Some(d);
            }
            for (k, &d) in rf.iter().enumerate() {
                rm[nb + lf.len() + k] = Some(d);
            }
            let contract: Vec<(Vec<Option<usize>>, i64)> = dn
                .lhs_contracting_dimensions
                .iter()
                .zip(&dn.rhs_contracting_dimensions)
                .map(|(&a, &b)| {
                    Some((
                        vec![Some(a as usize), Some(b as usize)],
                        *l.get(a as usize)?,
                    ))
                })
                .collect::<Option<_>>()?;
            let k: i64 = contract.iter().map(|c| c.1).product();
            OpModel {
                maps: vec![Some(lm), Some(rm)],
                contract,
                flops: 2.0 * n_out * k as f64,
                bytes: array_bytes,
                splits_work: true,
            }
        }
        Convolution => {
            let cd = i.attrs.conv_dims.as_ref()?;
            let kernel = opnd(1).shape.dims();
            let per_out = kernel.iter().product::<i64>() as f64
                / (*kernel.get(cd.kernel_output_feature_dimension as usize)?).max(1) as f64;
            let flops = 2.0 * n_out * per_out;
            if i.attrs.feature_group_count != 1 || i.attrs.batch_group_count != 1 {
                return Some(OpModel {
                    maps: vec![Some(vec![None; rank]), Some(vec![None; rank])],
                    contract: Vec::new(),
                    flops,
                    bytes: array_bytes,
                    splits_work: false,
                });
            }
            let mut lm = vec![None; rank];
            let mut rm = vec![None; rank];
            *lm.get_mut(cd.output_batch_dimension as usize)? =
                Some(cd.input_batch_dimension as usize);
            *rm.get_mut(cd.output_feature_dimension as usize)? =
                Some(cd.kernel_output_feature_dimension as usize);
            let f = cd.input_feature_dimension as usize;
            let contract = vec![(
                vec![Some(f), Some(cd.kernel_input_feature_dimension as usize)],
                *opnd(0).shape.dims().get(f)?,
            )];
            OpModel {
                maps: vec![Some(lm), Some(rm)],
                contract,
                flops,
                bytes: array_bytes,
                splits_work: true,
            }
        }
        Slice | Pad | Concatenate | DynamicSlice | DynamicUpdateSlice => {
            simple(same_rank(true, &[]), 0.0)
        }
        ReduceWindow if i.operands().len() == 2 => {
            // Dimensions the window leaves alone (size 1, stride 1, no padding or dilation)
            // split like the operand's.
            let window = i.attrs.window.as_ref()?;
            let windowed: Vec<i64> = (0..rank)
                .filter(|&d| {
                    window.dims.get(d).is_none_or(|w| {
                        w.size != 1
                            || w.stride != 1
                            || w.padding_low != 0
                            || w.padding_high != 0
                            || w.base_dilation != 1
                            || w.window_dilation != 1
                    })
                })
                .map(|d| d as i64)
                .collect();
            let per_out: i64 = window.dims.iter().map(|w| w.size).product();
            simple(same_rank(true, &windowed), n_out * per_out as f64)
        }
        Reverse => {
            let dims = i.attrs.dimensions.clone().unwrap_or_default();
            simple(same_rank(true, &dims), 0.0)
        }
        _ => return None,
    })
}

/// Every way to lay `dims` on axes of `sizes`: each axis splits one dimension (the split
/// sizes dividing it) or none. `tiles` starts at one per entry of `dims`.
fn enumerate_maps(dims: &[i64], sizes: &[i64], allowed: &[bool]) -> Vec<AxisMap> {
    fn go(
        a: usize,
        dims: &[i64],
        sizes: &[i64],
        allowed: &[bool],
        tiles: &mut Vec<i64>,
        cur: &mut AxisMap,
        out: &mut Vec<AxisMap>,
    ) {
        if a == sizes.len() {
            out.push(cur.clone());
            return;
        }
        cur[a] = None;
        go(a + 1, dims, sizes, allowed, tiles, cur, out);
        if !allowed[a] {
            return;
        }
        for d in 0..dims.len() {
            let t = tiles[d] * sizes[a];
            if dims[d] % t == 0 {
                tiles[d] = t;
                cur[a] = Some(d);
                go(a + 1, dims, sizes, allowed, tiles, cur, out);
                tiles[d] /= sizes[a];
            }
        }
        cur[a] = None;
    }
    let mut out = Vec::new();
    go(
        0,
        dims,
        sizes,
        allowed,
        &mut vec![1; dims.len()],
        &mut vec![None; sizes.len()],
        &mut out,
    );
    out
}

/// The sharding that lays an array of rank `rank` on `mesh` (the working axes, in the order of
/// `map`) as `map` says, spelled as a tiled sharding by the named sharding's own conversion
/// (XLA's `V3ToV2Sharding`).
fn to_sharding(map: &AxisMap, rank: usize, mesh: &Mesh) -> Sharding {
    let dims = (0..rank)
        .map(|d| {
            DimSharding::closed(
                (0..map.len())
                    .filter(|&w| map[w] == Some(d))
                    .map(AxisRef::full)
                    .collect(),
            )
        })
        .collect();
    let named = NamedSharding {
        mesh: mesh.clone(),
        dims,
        replicated: Vec::new(),
        unreduced: Vec::new(),
        reduction: Default::default(),
        manual: Vec::new(),
    };
    // Every axis once, each a whole mesh axis: a valid named sharding.
    named
        .to_tiled(Some(rank))
        .unwrap_or_else(|_| Sharding::replicated())
}

fn split(map: &AxisMap, sizes: &[i64]) -> i64 {
    map.iter()
        .zip(sizes)
        .filter(|(m, _)| m.is_some())
        .map(|(_, s)| s)
        .product()
}

fn collective_time(received: f64, group: i64) -> f64 {
    let steps = (group.max(2) as f64).log2().ceil();
    LINK_LATENCY * steps + received / LINK_RATE
}

/// Time to reshard an array of `bytes` from `from` to `to`: an axis that moves between
/// dimensions costs an all-to-all, one that goes an all-gather; one that comes is a slice.
fn reshard_time(bytes: f64, from: &AxisMap, to: &AxisMap, sizes: &[i64]) -> f64 {
    let mut shard = bytes / split(from, sizes) as f64;
    let mut t = 0.0;
    for a in 0..sizes.len() {
        if let (Some(x), Some(y)) = (from[a], to[a]) {
            if x != y {
                let g = sizes[a] as f64;
                t += collective_time(shard * (g - 1.0) / g, sizes[a]);
            }
        }
    }
    for a in 0..sizes.len() {
        if from[a].is_some() && to[a].is_none() {
            t += collective_time(shard * (sizes[a] - 1) as f64, sizes[a]);
            shard *= sizes[a] as f64;
        }
    }
    t
}

/// What strategy `s` of `node` needs of operand `k` (of dimensions `dims`).
fn required(node: &Node, s: &Strategy, k: usize, dims: &[i64], sizes: &[i64]) -> AxisMap {
    let map = node.model.maps[k]
        .as_ref()
        .expect("an operand with an edge");
    let mut req: AxisMap = (0..sizes.len())
        .map(|a| match (s.contract[a], s.out[a]) {
            (Some(j), _) => node.model.contract[j].0[k],
            (None, Some(d)) => map[d],
            (None, None) => None,
        })
        .collect();
    // Keep only what divides the operand's dimensions (major axes first).
    let mut tiles = vec![1i64; dims.len()];
    for a in 0..sizes.len() {
        if let Some(d) = req[a] {
            let t = tiles[d] * sizes[a];
            if dims[d] % t == 0 {
                tiles[d] = t;
            } else {
                req[a] = None;
            }
        }
    }
    req
}

fn node_time(node: &Node, s: &Strategy, sizes: &[i64]) -> f64 {
    let work = node.model.flops / FLOP_RATE + node.model.bytes / MEMORY_RATE;
    let group = |f: &dyn Fn(usize) -> bool| -> i64 {
        (0..sizes.len())
            .filter(|&a| f(a))
            .map(|a| sizes[a])
            .product()
    };
    let par = if node.model.splits_work {
        group(&|a| s.out[a].is_some() || s.contract[a].is_some())
    } else {
        1
    };
    let mut t = work / par as f64;
    // Partial sums: reduce-scattered over the axes that also split the result, all-reduced
    // over the others.
    let shard = node.bytes as f64 / split(&s.out, sizes) as f64;
    let scatter = group(&|a| s.contract[a].is_some() && s.out[a].is_some());
    if scatter > 1 {
        t += collective_time(shard * (scatter - 1) as f64, scatter);
    }
    let reduce = group(&|a| s.contract[a].is_some() && s.out[a].is_none());
    if reduce > 1 {
        t += collective_time(2.0 * shard * (reduce - 1) as f64 / reduce as f64, reduce);
    }
    t
}

/// Picoseconds, the problem's integer cost unit.
fn ps(seconds: f64) -> u64 {
    (seconds * 1e12).round().max(0.0) as u64
}

/// Chooses shardings for the entry computation's arrays (see the module docs) and writes them.
pub fn auto_shard(
    module: &mut Module,
    options: &AutoShardOptions,
) -> Result<AutoShardReport, AutoShardError> {
    let entry = module.entry().ok_or(AutoShardError::NoEntry)?;
    let devices = module.config.num_partitions.max(1);
    let mesh = match &options.mesh {
        Some(text) => DeviceMesh::parse(text, devices)?,
        None => DeviceMesh::one_d(devices),
    };
    let full = mesh.sizes();
    let axes: Vec<usize> = (0..full.len()).filter(|&a| full[a] > 1).collect();
    // The mesh of the working axes: an axis of size 1 splits nothing and leaves the
    // row-major device numbering as it is.
    let names: Vec<(&str, i64)> = axes
        .iter()
        .map(|&a| (mesh.axes[a].0.as_str(), full[a]))
        .collect();
    let hmesh = Mesh::iota(&names);
    let sizes: Vec<i64> = axes.iter().map(|&a| full[a]).collect();
    let mut report = AutoShardReport {
        mesh: mesh.to_string(),
        limit: options.memory_limit,
        ..Default::default()
    };
    if sizes.is_empty() {
        return Ok(report);
    }

    let order = post_order(module, entry);
    let end = order.len() as u64;
    let mut pos = vec![u64::MAX; module.instr_capacity()];
    for (p, &id) in order.iter().enumerate() {
        pos[id.index()] = p as u64;
    }
    let root = module.comp(entry).root();

    // Nodes.
    let mut node_of = vec![usize::MAX; module.instr_capacity()];
    let mut nodes: Vec<Node> = Vec::new();
    for &id in &order {
        let i = module.instr(id);
        if !i.shape.is_array() || i.shape.rank() == 0 {
            continue;
        }
        let Some(model) = op_model(module, id) else {
            continue;
        };
        let dims = i.shape.dims().to_vec();
        let outs = enumerate_maps(&dims, &sizes, &vec![true; sizes.len()]);
        let mut strategies = Vec::new();
        for out in outs {
            let contracted = model.contract.len();
            if contracted == 0 {
                strategies.push(Strategy {
                    contract: vec![None; sizes.len()],
                    out,
                });
                continue;
            }
            let cdims: Vec<i64> = model.contract.iter().map(|c| c.1).collect();
            // An axis may split a contraction and the result both: reduce-scattered sums.
            for contract in enumerate_maps(&cdims, &sizes, &vec![true; sizes.len()]) {
                strategies.push(Strategy {
                    out: out.clone(),
                    contract,
                });
            }
        }
        if let Some(given) = &i.sharding {
            strategies.retain(|s| to_sharding(&s.out, dims.len(), &hmesh).same_as(given));
            if strategies.is_empty() {
                continue; // a sharding the mesh cannot spell: propagation's to use
            }
            report.constrained += 1;
        }
        node_of[id.index()] = nodes.len();
        nodes.push(Node {
            id,
            bytes: shape_size(&i.shape),
            parameter: i.opcode() == Opcode::Parameter,
            model,
            strategies,
            dims,
        });
    }

    // The problem.
    let mut p = Problem {
        name: module.name.clone(),
        usage_limit: options.memory_limit.map(|l| l as u64),
        ..Default::default()
    };
    for node in &nodes {
        let i = module.instr(node.id);
        let a = pos[node.id.index()];
        let last = i
            .users()
            .iter()
            .map(|u| pos[u.index()])
            .filter(|&q| q != u64::MAX)
            .max()
            .unwrap_or(a);
        let b = if Some(node.id) == root { end } else { last + 1 };
        p.intervals.push((a, b.max(a + 1)));
        p.node_costs.push(
            node.strategies
                .iter()
                .map(|s| ps(node_time(node, s, &sizes)))
                .collect(),
        );
        p.node_usages.push(
            node.strategies
                .iter()
                .map(|s| {
                    if node.parameter {
                        0
                    } else {
                        (node.bytes / split(&s.out, &sizes)) as u64
                    }
                })
                .collect(),
        );
    }
    for (c, node) in nodes.iter().enumerate() {
        let i = module.instr(node.id);
        for (k, &o) in i.operands().iter().enumerate() {
            let pn = node_of[o.index()];
            if pn == usize::MAX || node.model.maps.get(k).is_none_or(Option::is_none) {
                continue;
            }
            let producer = &nodes[pn];
            let mut costs = Vec::with_capacity(producer.strategies.len() * node.strategies.len());
            for ps_ in &producer.strategies {
                for s in &node.strategies {
                    let req = required(node, s, k, &producer.dims, &sizes);
                    costs.push(ps(reshard_time(
                        producer.bytes as f64,
                        &ps_.out,
                        &req,
                        &sizes,
                    )));
                }
            }
            p.edges.push((pn, c));
            p.edge_costs.push(costs);
        }
    }
    // Without a limit, a budget over the least-memory layout's peak.
    let least: Vec<usize> = p
        .node_usages
        .iter()
        .map(|u| (0..u.len()).min_by_key(|&s| (u[s], s)).unwrap_or(0))
        .collect();
    let least_peak = crate::iopddl::evaluate(&p, &least)
        .map(|e| e.peak_usage.min(i64::MAX as u128) as i64)
        .unwrap_or(0);
    if options.memory_limit.is_none() {
        let budget = least_peak.saturating_mul(options.memory_budget_percent) / 100;
        p.usage_limit = Some(budget as u64);
        report.limit = Some(budget);
    }
    report.nodes = nodes.len();
    report.strategies = nodes.iter().map(|n| n.strategies.len()).sum();
    report.edges = p.edges.len();

    let t0 = Instant::now();
    let result = solve(
        &p,
        &SolveOptions {
            time_limit: options.time_limit,
            max_iterations: options.max_iterations,
            ..SolveOptions::default()
        },
    );
    report.solve_time = t0.elapsed();
    let Some(x) = result.solution else {
        return Err(AutoShardError::Infeasible {
            limit: options.memory_limit.unwrap_or(i64::MAX),
            best_peak: result.min_peak.min(i64::MAX as u128) as i64,
        });
    };
    report.cost_us = result.cost.unwrap_or(0) as f64 / 1e6;
    report.lower_bound_us = result.lower_bound as f64 / 1e6;
    report.optimal = result.optimal;
    report.peak = crate::iopddl::evaluate(&p, &x)
        .map(|e| e.peak_usage.min(i64::MAX as u128) as i64)
        .unwrap_or(0);

    // Each node's local cost per strategy, its neighbours fixed: the report's runner-up.
    let mut local: Vec<Vec<u64>> = p.node_costs.clone();
    for (e, &(a, b)) in p.edges.iter().enumerate() {
        let kb = p.node_costs[b].len();
        for (s, l) in local[a].iter_mut().enumerate() {
            *l += p.edge_costs[e][s * kb + x[b]];
        }
        for (s, l) in local[b].iter_mut().enumerate() {
            *l += p.edge_costs[e][x[a] * kb + s];
        }
    }
    let describe = |node: &Node, s: &Strategy| {
        let mut text = sharding_to_string(&to_sharding(&s.out, node.dims.len(), &hmesh));
        let over: Vec<&str> = (0..sizes.len())
            .filter(|&a| s.contract[a].is_some())
            .map(|a| mesh.axes[axes[a]].0.as_str())
            .collect();
        if !over.is_empty() {
            let _ = write!(text, " contracted over {}", over.join(","));
        }
        text
    };
    for (n, node) in nodes.iter().enumerate() {
        let chosen = &node.strategies[x[n]];
        if module.instr(node.id).sharding.is_none() {
            module.instr_mut(node.id).sharding =
                Some(to_sharding(&chosen.out, node.dims.len(), &hmesh));
        }
        if node.strategies.len() < 2 {
            continue;
        }
        let runner_up = (0..node.strategies.len())
            .filter(|&s| s != x[n])
            .min_by_key(|&s| (local[n][s], s))
            .map(|s| {
                (
                    describe(node, &node.strategies[s]),
                    local[n][s] as f64 / 1e6,
                )
            });
        report.decisions.push(Decision {
            instruction: module.instr(node.id).name().to_string(),
            chosen: describe(node, chosen),
            cost_us: local[n][x[n]] as f64 / 1e6,
            runner_up,
        });
    }
    lay_out_outputs(module, root);
    Ok(report)
}

/// Gives a flat tuple root without a sharding its elements' shardings: the outputs stay where
/// the pass put them (without it, a module that does not let propagation reach its outputs
/// gathers every output whole). Left alone when an element has none.
fn lay_out_outputs(module: &mut Module, root: Option<InstrId>) {
    let Some(root) = root else { return };
    let r = module.instr(root);
    if r.opcode() != Opcode::Tuple || r.sharding.is_some() {
        return;
    }
    let elements: Option<Vec<Sharding>> = r
        .operands()
        .iter()
        .map(|&o| {
            let i = module.instr(o);
            match &i.sharding {
                Some(s) if !s.is_tuple() && i.shape.is_array() => Some(s.clone()),
                None if i.shape.is_array() && i.shape.rank() == 0 => Some(Sharding::replicated()),
                _ => None,
            }
        })
        .collect();
    if let Some(e) = elements {
        module.instr_mut(root).sharding = Some(Sharding::tuple(e));
    }
}

/// `auto-sharding`: see the module docs.
#[derive(Clone, Debug, Default)]
pub struct AutoSharding {
    pub options: AutoShardOptions,
    pub report: Option<AutoShardReport>,
}

impl RegisteredPass for AutoSharding {
    type Options = AutoShardOptions;
    const NAME: &'static str = "auto-sharding";
    const DOC: &'static str =
        "chooses shardings for the entry's arrays: cheapest estimated step under a memory limit";
    fn with_options(options: AutoShardOptions) -> AutoSharding {
        AutoSharding {
            options,
            report: None,
        }
    }
}

impl Pass for AutoSharding {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> tessera_pass::Result<bool> {
        let r = auto_shard(module, &self.options).map_err(|e| PassError::Failed(e.to_string()))?;
        let changed = !r.decisions.is_empty();
        self.report = Some(r);
        Ok(changed)
    }

    fn remarks(&mut self) -> Option<String> {
        self.report.as_ref().map(AutoShardReport::render)
    }
}

/// Registers `auto-sharding`.
pub fn register(r: &mut Registry) {
    r.add::<AutoSharding>();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(map: &[Option<usize>], rank: usize) -> String {
        let mesh = Mesh::iota(&[("data", 2), ("model", 4)]);
        sharding_to_string(&to_sharding(&map.to_vec(), rank, &mesh))
    }

    #[test]
    fn strategies_spell_iota_shardings() {
        // data=2 (axis 0), model=4 (axis 1).
        assert_eq!(text(&[None, None], 2), "{replicated}");
        assert_eq!(text(&[Some(0), Some(1)], 2), "{devices=[2,4]<=[8]}");
        assert_eq!(text(&[Some(1), Some(0)], 2), "{devices=[4,2]<=[2,4]T(1,0)}");
        assert_eq!(
            text(&[None, Some(0)], 2),
            "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"
        );
        assert_eq!(text(&[Some(0), Some(0)], 1), "{devices=[8]<=[8]}");
        // Each axis on one dimension at most, the sizes dividing it.
        let maps = enumerate_maps(&[4, 6], &[2, 4], &[true, true]);
        assert!(maps.contains(&vec![Some(1), Some(0)]) && !maps.contains(&vec![None, Some(1)]));
        assert_eq!(maps.len(), 5, "{maps:?}");
    }

    #[test]
    fn resharding_costs_by_collective() {
        let s = [8];
        let none = reshard_time(1e6, &vec![Some(0)], &vec![Some(0)], &s);
        let slice = reshard_time(1e6, &vec![None], &vec![Some(0)], &s);
        let gather = reshard_time(1e6, &vec![Some(0)], &vec![None], &s);
        let a2a = reshard_time(1e6, &vec![Some(0)], &vec![Some(1)], &s);
        assert_eq!((none, slice), (0.0, 0.0));
        assert!(gather > a2a && a2a > 0.0, "{gather} {a2a}");
    }

    const MLP: &str = r#"HloModule m, num_partitions=8

ENTRY main {
  x = f32[64,512]{1,0} parameter(0)
  w = f32[512,512]{1,0} parameter(1)
  d = f32[64,512]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  b = f32[64,512]{1,0} broadcast(z), dimensions={}
  ROOT r = f32[64,512]{1,0} maximum(d, b)
}
"#;

    #[test]
    fn shards_a_layer_and_keeps_what_the_module_gives() {
        let mut m = tessera_hlo::text::parse_module(MLP).unwrap();
        let r = auto_shard(&mut m, &AutoShardOptions::default()).unwrap();
        assert!(r.peak <= r.limit.unwrap(), "{}", r.render());
        let root = m.comp(m.entry().unwrap()).root().unwrap();
        let s = m.instr(root).sharding.clone().unwrap();
        assert!(!s.is_replicated(), "{}", r.render());
        assert!(r.render().contains("%d: "), "{}", r.render());

        // A given sharding stays.
        let mut m = tessera_hlo::text::parse_module(MLP).unwrap();
        let w = m.comp(m.entry().unwrap()).instructions()[1];
        m.instr_mut(w).sharding = Some(Sharding::iota_tiled(&[1, 8]));
        let r = auto_shard(&mut m, &AutoShardOptions::default()).unwrap();
        assert_eq!(r.constrained, 1);
        assert_eq!(
            sharding_to_string(m.instr(w).sharding.as_ref().unwrap()),
            "{devices=[1,8]<=[8]}"
        );
    }

    #[test]
    fn a_limit_nothing_meets_is_an_error_with_the_best_peak() {
        let mut m = tessera_hlo::text::parse_module(MLP).unwrap();
        let o = AutoShardOptions {
            memory_limit: Some(1000),
            ..Default::default()
        };
        let e = auto_shard(&mut m, &o).unwrap_err().to_string();
        assert!(
            e.contains("no sharding fits --memory-limit 1000") && e.contains("is 49152 bytes"),
            "{e}"
        );
        let o = AutoShardOptions {
            mesh: Some("a=3".into()),
            ..Default::default()
        };
        let e = auto_shard(&mut m, &o).unwrap_err().to_string();
        assert!(e.contains("multiply to 3 devices"), "{e}");
    }
}
