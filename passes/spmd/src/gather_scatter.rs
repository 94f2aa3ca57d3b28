//! Gather and scatter: which dimensions of the operand, the indices and the gathered output
//! (for a scatter: the updates) correspond, and how a sharding moves along those
//! correspondences. The sharding propagation pass uses it in both directions; the SPMD
//! partitioner will use the same mappings to split gathers and scatters.
//!
//! The terms, for a gather (a scatter reads the same with `inserted_window_dims` for
//! `collapsed_slice_dims`, `update_window_dims` for `offset_dims` and the updates for the
//! output):
//!
//! - **index pass-through**: every dimension of the indices except the index vector dimension
//!   is a batch dimension of the output, in order (the output dimensions that are not offset
//!   dimensions). Indices split there split the output there, and back.
//! - **operand pass-through**: an operand dimension that is neither collapsed nor a batching
//!   dimension and whose slice is the whole dimension is copied to its offset dimension of the
//!   output unchanged.
//! - **parallel** dimensions: operand dimension `o` and indices dimension `i` walk together, so
//!   a split of both along the same devices needs no communication. Explicit ones are
//!   `operand_batching_dims` / `start_indices_batching_dims`; implicit ones are found where
//!   index component `k` (mapped to operand dimension `o = start_index_map[k]`, sliced to one
//!   element) is an iota along indices dimension `i` of the same size as `o` (XLA's
//!   `GetGatherScatterBatchParallelDims`; [`index_component_iotas`] looks for the iotas).
//!
//! The sharding functions follow XLA's `hlo_sharding_util` (`GatherOutputShardingFromIndex`,
//! `GatherOperandShardingFromOutput`, `ScatterUpdateShardingFromOutput`, ...): a sharding keeps
//! its tiles on the mapped dimensions and is replicated on all the others
//! ([`propagate_along_dims`]).

use tessera_hlo::attrs::{GatherDimensionNumbers, ScatterDimensionNumbers};
use tessera_hlo::sharding_util::merge_sharding;
use tessera_hlo::types::ElementType;
use tessera_hlo::{CompId, InstrId, Module, Opcode, Sharding};

/// Dimensions that correspond across a gather's (or scatter's) operand, indices and output (or
/// updates): entry `k` of each list names the same logical dimension. A list may be empty when
/// the mapping does not involve that value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DimMap {
    pub operand: Vec<usize>,
    pub indices: Vec<usize>,
    pub output: Vec<usize>,
}

impl DimMap {
    fn append(&mut self, other: &DimMap) {
        self.operand.extend_from_slice(&other.operand);
        self.indices.extend_from_slice(&other.indices);
        self.output.extend_from_slice(&other.output);
    }
}

/// A gather or scatter in common terms, checked for consistency when built (so that the
/// mappings below never index out of range).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherScatter {
    /// Dimensions of the operand (a scatter's first operand).
    pub operand: Vec<i64>,
    /// Dimensions of the start indices.
    pub indices: Vec<i64>,
    /// Rank of the gather's output (a scatter's updates).
    pub output_rank: usize,
    /// `collapsed_slice_dims` (scatter: `inserted_window_dims`).
    pub collapsed: Vec<usize>,
    /// `operand_batching_dims` (scatter: `input_batching_dims`).
    pub operand_batching: Vec<usize>,
    /// `start_indices_batching_dims` (scatter: `scatter_indices_batching_dims`).
    pub indices_batching: Vec<usize>,
    /// `start_index_map` (scatter: `scatter_dims_to_operand_dims`).
    pub index_map: Vec<usize>,
    /// `offset_dims` (scatter: `update_window_dims`), increasing.
    pub offset: Vec<usize>,
    /// `index_vector_dim`; equal to the indices' rank when the index vector is implicit.
    pub index_vector_dim: usize,
    /// Size of the slice taken from each operand dimension (scatter: the window's size, 1 on
    /// inserted and batching dimensions).
    pub slice_sizes: Vec<i64>,
}

fn dims_of(v: &[i64], bound: usize, what: &str) -> Result<Vec<usize>, String> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d < bound)
                .ok_or_else(|| format!("{what} {d} is out of range (rank {bound})"))
        })
        .collect()
}

impl GatherScatter {
    /// A gather of an operand of dimensions `operand` with indices of dimensions `indices`
    /// giving an output of rank `output_rank`.
    pub fn gather(
        dn: &GatherDimensionNumbers,
        slice_sizes: &[i64],
        operand: &[i64],
        indices: &[i64],
        output_rank: usize,
    ) -> Result<GatherScatter, String> {
        let orank = operand.len();
        let g = GatherScatter {
            operand: operand.to_vec(),
            indices: indices.to_vec(),
            output_rank,
            collapsed: dims_of(&dn.collapsed_slice_dims, orank, "collapsed_slice_dims")?,
            operand_batching: dims_of(&dn.operand_batching_dims, orank, "operand_batching_dims")?,
            indices_batching: dims_of(
                &dn.start_indices_batching_dims,
                indices.len(),
                "start_indices_batching_dims",
            )?,
            index_map: dims_of(&dn.start_index_map, orank, "start_index_map")?,
            offset: dims_of(&dn.offset_dims, output_rank, "offset_dims")?,
            index_vector_dim: usize::try_from(dn.index_vector_dim)
                .ok()
                .filter(|&d| d <= indices.len())
                .ok_or_else(|| {
                    format!("index_vector_dim {} is out of range", dn.index_vector_dim)
                })?,
            slice_sizes: slice_sizes.to_vec(),
        };
        g.check()?;
        Ok(g)
    }

    /// A scatter into operands of dimensions `operand` with indices of dimensions `indices` and
    /// updates of dimensions `updates` (the first of each group for a variadic scatter).
    pub fn scatter(
        dn: &ScatterDimensionNumbers,
        operand: &[i64],
        indices: &[i64],
        updates: &[i64],
    ) -> Result<GatherScatter, String> {
        let orank = operand.len();
        let collapsed = dims_of(&dn.inserted_window_dims, orank, "inserted_window_dims")?;
        let operand_batching = dims_of(&dn.input_batching_dims, orank, "input_batching_dims")?;
        let offset = dims_of(&dn.update_window_dims, updates.len(), "update_window_dims")?;
        // The window's size: update window dimensions in order on the operand dimensions that
        // are neither inserted nor batching.
        let mut slice_sizes = vec![1i64; orank];
        let mut k = 0;
        for (d, size) in slice_sizes.iter_mut().enumerate() {
            if collapsed.contains(&d) || operand_batching.contains(&d) {
                continue;
            }
            let w = *offset
                .get(k)
                .ok_or("fewer update_window_dims than window dimensions of the operand")?;
            *size = updates[w];
            k += 1;
        }
        if k != offset.len() {
            return Err("more update_window_dims than window dimensions of the operand".into());
        }
        let g = GatherScatter {
            operand: operand.to_vec(),
            indices: indices.to_vec(),
            output_rank: updates.len(),
            collapsed,
            operand_batching,
            indices_batching: dims_of(
                &dn.scatter_indices_batching_dims,
                indices.len(),
                "scatter_indices_batching_dims",
            )?,
            index_map: dims_of(
                &dn.scatter_dims_to_operand_dims,
                orank,
                "scatter_dims_to_operand_dims",
            )?,
            offset,
            index_vector_dim: usize::try_from(dn.index_vector_dim)
                .ok()
                .filter(|&d| d <= indices.len())
                .ok_or_else(|| {
                    format!("index_vector_dim {} is out of range", dn.index_vector_dim)
                })?,
            slice_sizes,
        };
        g.check()?;
        Ok(g)
    }

    /// The invariants the mappings rely on (the verifier checks more).
    fn check(&self) -> Result<(), String> {
        if self.slice_sizes.len() != self.operand.len() {
            return Err(format!(
                "{} slice sizes for an operand of rank {}",
                self.slice_sizes.len(),
                self.operand.len()
            ));
        }
        if self.offset.windows(2).any(|w| w[0] >= w[1]) {
            return Err("offset (update window) dimensions must increase".into());
        }
        if self.operand_batching.len() != self.indices_batching.len() {
            return Err("operand and indices batching dimensions differ in number".into());
        }
        if self.indices_batching.contains(&self.index_vector_dim) {
            return Err("the index vector dimension cannot be a batching dimension".into());
        }
        let batch = self.indices_batch_rank();
        if self.output_rank != batch + self.offset.len() {
            return Err(format!(
                "output rank {} is not {} batch + {} offset dimensions",
                self.output_rank,
                batch,
                self.offset.len()
            ));
        }
        let windows = (0..self.operand.len())
            .filter(|d| !self.collapsed.contains(d) && !self.operand_batching.contains(d))
            .count();
        if windows != self.offset.len() {
            return Err(format!(
                "{} window dimensions of the operand for {} offset dimensions",
                windows,
                self.offset.len()
            ));
        }
        Ok(())
    }

    /// Number of indices dimensions that are not the index vector dimension.
    fn indices_batch_rank(&self) -> usize {
        if self.index_vector_dim < self.indices.len() {
            self.indices.len() - 1
        } else {
            self.indices.len()
        }
    }

    /// The output dimension of indices dimension `d` (`None` for the index vector dimension):
    /// the indices' batch dimensions fill the output's non-offset dimensions in order.
    pub fn output_dim_of_indices_dim(&self, d: usize) -> Option<usize> {
        if d == self.index_vector_dim || d >= self.indices.len() {
            return None;
        }
        let position = if d < self.index_vector_dim { d } else { d - 1 };
        (0..self.output_rank)
            .filter(|o| !self.offset.contains(o))
            .nth(position)
    }

    /// Index pass-through: every indices dimension but the index vector dimension, with its
    /// output dimension (XLA's `GetGatherConnectedDimsAcrossIndicesAndOutput`).
    pub fn indices_output(&self) -> DimMap {
        let mut m = DimMap::default();
        for d in 0..self.indices.len() {
            if let Some(o) = self.output_dim_of_indices_dim(d) {
                m.indices.push(d);
                m.output.push(o);
            }
        }
        m
    }

    /// Operand pass-through: operand dimensions, neither collapsed nor batching, sliced whole,
    /// with their offset dimension in the output (XLA's
    /// `GetGatherScatterOperandPassthroughDims`).
    pub fn operand_passthrough(&self) -> DimMap {
        let mut m = DimMap::default();
        let mut window = 0;
        for d in 0..self.operand.len() {
            if self.collapsed.contains(&d) || self.operand_batching.contains(&d) {
                continue;
            }
            if self.slice_sizes[d] == self.operand[d] {
                m.operand.push(d);
                m.output.push(self.offset[window]);
            }
            window += 1;
        }
        m
    }

    /// The explicit batching dimensions (`operand_batching_dims` with
    /// `start_indices_batching_dims`) and their output dimensions.
    pub fn explicit_batch(&self) -> DimMap {
        let mut m = DimMap {
            operand: self.operand_batching.clone(),
            indices: self.indices_batching.clone(),
            output: Vec::new(),
        };
        m.output = m
            .indices
            .iter()
            .filter_map(|&d| self.output_dim_of_indices_dim(d))
            .collect();
        m
    }

    /// The implicit parallel dimensions, given for each index component (entry of the index
    /// vector) the indices dimension along which it is an iota, if any (see
    /// [`index_component_iotas`]). A component counts when its operand dimension is sliced to
    /// size 1, its iota dimension is not an explicit batching dimension, and the two dimensions
    /// have the same size; two components along the same iota dimension, or one of a different
    /// size, mean none is parallel.
    pub fn implicit_parallel(&self, iotas: &[Option<usize>]) -> Option<DimMap> {
        let mut m = DimMap::default();
        for (k, iota) in iotas.iter().enumerate() {
            let Some(i) = *iota else { continue };
            let o = *self.index_map.get(k)?;
            if m.indices.contains(&i) {
                return None;
            }
            if self.slice_sizes[o] == 1 && !self.indices_batching.contains(&i) {
                if self.indices.get(i) != Some(&self.operand[o]) {
                    return None;
                }
                m.indices.push(i);
                m.operand.push(o);
            }
        }
        if m.indices.is_empty() {
            return None;
        }
        m.output = m
            .indices
            .iter()
            .map(|&d| self.output_dim_of_indices_dim(d))
            .collect::<Option<Vec<_>>>()?;
        Some(m)
    }

    /// All parallel dimensions: the explicit batching dimensions, then the implicit ones.
    pub fn parallel(&self, iotas: &[Option<usize>]) -> DimMap {
        let mut m = if self.operand_batching.is_empty() {
            DimMap::default()
        } else {
            self.explicit_batch()
        };
        if let Some(implicit) = self.implicit_parallel(iotas) {
            m.append(&implicit);
        }
        m
    }
}

// ----- shardings along the mappings -----

/// XLA's `PropagateShardingAlongDimsAndReplicateOthers`: the tiles of `s` on `src_dims` move
/// to `tgt_dims` of a value of rank `tgt_rank`; every other data dimension of `s` becomes
/// replication; subgroups are kept. Tile-maximal and manual shardings come back unchanged.
pub fn propagate_along_dims(
    s: &Sharding,
    src_dims: &[usize],
    tgt_dims: &[usize],
    tgt_rank: usize,
) -> Option<Sharding> {
    if src_dims.len() != tgt_dims.len() {
        return None;
    }
    let Some(t) = s.as_tiled() else {
        return Some(s.clone());
    };
    let src_rank = t.data_rank();
    if src_dims.iter().any(|&d| d >= src_rank) || tgt_dims.iter().any(|&d| d >= tgt_rank) {
        return None;
    }
    let kept = s.replicate_all_except(src_dims);
    if kept.is_tile_maximal() {
        return Some(kept);
    }
    let mut src_to_tgt = vec![-1i64; src_rank];
    let mut tgt_to_src = vec![-1i64; tgt_rank];
    for (&a, &b) in src_dims.iter().zip(tgt_dims) {
        if src_to_tgt[a] >= 0 || tgt_to_src[b] >= 0 {
            return None;
        }
        src_to_tgt[a] = b as i64;
        tgt_to_src[b] = a as i64;
    }
    kept.transpose_collapsed(&src_to_tgt, &tgt_to_src)
}

/// Index pass-through forward: the gather's output (a scatter's updates) from the indices'
/// sharding (XLA's `GatherOutputShardingFromIndex`, `ScatterUpdateShardingFromIndex`).
pub fn output_from_indices(g: &GatherScatter, indices: &Sharding) -> Option<Sharding> {
    let m = g.indices_output();
    propagate_along_dims(indices, &m.indices, &m.output, g.output_rank)
}

/// Index pass-through backward: the indices from the gather's output (a scatter's updates)
/// (XLA's `GatherIndexShardingFromOutput`, `ScatterIndexShardingFromUpdate`).
pub fn indices_from_output(g: &GatherScatter, output: &Sharding) -> Option<Sharding> {
    let m = g.indices_output();
    propagate_along_dims(output, &m.output, &m.indices, g.indices.len())
}

/// Operand pass-through from the operand side: the gather's output (a scatter's updates) from
/// an operand-shaped sharding (a gather's operand, a scatter's output); `None` when nothing
/// tiled survives (XLA's `PassthroughOperandToGatherOutputOrScatterUpdate`).
pub fn output_from_operand_passthrough(g: &GatherScatter, operand: &Sharding) -> Option<Sharding> {
    if operand.is_tile_maximal() {
        return None;
    }
    let m = g.operand_passthrough();
    propagate_along_dims(operand, &m.operand, &m.output, g.output_rank)
        .filter(|s| !s.is_tile_maximal())
}

/// Operand pass-through from the output side: an operand-shaped sharding (a gather's operand,
/// a scatter's output) from the gather's output (a scatter's updates); a tile-maximal input
/// comes back as it is, `None` when nothing tiled survives (XLA's
/// `PassthroughGatherOutputOrScatterUpdateToOperand`).
pub fn operand_from_output_passthrough(g: &GatherScatter, output: &Sharding) -> Option<Sharding> {
    if output.is_tile_maximal() {
        return Some(output.clone());
    }
    let m = g.operand_passthrough();
    propagate_along_dims(output, &m.output, &m.operand, g.operand.len())
        .filter(|s| !s.is_tile_maximal())
}

/// The preferred of a parallel and a pass-through candidate: their merge when one refines the
/// other, else the parallel one (the partitioner tries parallel dimensions first), as XLA's
/// `GatherOperandShardingFromOutput` and `ScatterUpdateShardingFromOutput` choose.
fn prefer_parallel(parallel: Option<Sharding>, passthrough: Option<Sharding>) -> Option<Sharding> {
    let Some(mut passthrough) = passthrough else {
        return parallel;
    };
    let Some(mut parallel) = parallel else {
        return Some(passthrough);
    };
    if merge_sharding(&parallel, &mut passthrough, true) {
        return Some(passthrough);
    }
    merge_sharding(&passthrough, &mut parallel, true);
    Some(parallel)
}

/// The parallel-dimension candidate of [`gather_operand_from_output`] and
/// [`scatter_update_from_output`]: `s` mapped from dimensions `from` to `to` of a rank-`rank`
/// result; a tile-maximal `s` comes back as it is, and without parallel dimensions there is no
/// candidate.
fn along_parallel(s: &Sharding, from: &[usize], to: &[usize], rank: usize) -> Option<Sharding> {
    if s.is_tile_maximal() {
        Some(s.clone())
    } else if from.is_empty() {
        None
    } else {
        propagate_along_dims(s, from, to, rank)
    }
}

/// A gather's operand from its output: the parallel dimensions and the operand pass-through
/// dimensions, merged (XLA's `GatherOperandShardingFromOutput`). `parallel` holds the explicit
/// and implicit parallel dimensions ([`GatherScatter::parallel`]).
pub fn gather_operand_from_output(
    g: &GatherScatter,
    output: &Sharding,
    parallel: &DimMap,
) -> Option<Sharding> {
    let from_parallel =
        along_parallel(output, &parallel.output, &parallel.operand, g.operand.len());
    prefer_parallel(from_parallel, operand_from_output_passthrough(g, output))
}

/// A scatter's updates from its output (operand-shaped): the parallel dimensions and the
/// operand pass-through dimensions, merged (XLA's `ScatterUpdateShardingFromOutput`).
pub fn scatter_update_from_output(
    g: &GatherScatter,
    output: &Sharding,
    parallel: &DimMap,
) -> Option<Sharding> {
    let from_parallel = along_parallel(output, &parallel.operand, &parallel.output, g.output_rank);
    prefer_parallel(from_parallel, output_from_operand_passthrough(g, output))
}

// ----- finding the iotas of implicit parallel dimensions -----

/// XLA's `GetDimensionForIota`: the dimension along which `id` counts 0, 1, 2, ...: an `iota`,
/// an s32 constant holding such values (the first such dimension of size > 1), a broadcast of
/// one, or a loop-invariant tuple element of a while body (or conditional branch parameter)
/// whose value in the caller is one. `caller` gives the single while/conditional that calls a
/// computation.
pub fn iota_dimension(
    m: &Module,
    id: InstrId,
    caller: &dyn Fn(CompId) -> Option<InstrId>,
) -> Option<usize> {
    iota_dimension_at(m, id, caller, 0)
}

fn iota_dimension_at(
    m: &Module,
    id: InstrId,
    caller: &dyn Fn(CompId) -> Option<InstrId>,
    depth: usize,
) -> Option<usize> {
    if depth > 64 {
        return None;
    }
    let i = m.instr(id);
    if i.opcode() == Opcode::Iota {
        return usize::try_from(i.attrs.iota_dimension).ok();
    }
    if i.shape.element_type() != ElementType::S32 {
        return None;
    }
    match i.opcode() {
        Opcode::Constant => constant_iota_dimension(i),
        Opcode::Broadcast => {
            let d = iota_dimension_at(m, *i.operands().first()?, caller, depth + 1)?;
            let dims = i.attrs.dimensions.as_deref()?;
            usize::try_from(*dims.get(d)?).ok()
        }
        Opcode::GetTupleElement => {
            let &tuple = i.operands().first()?;
            if m.instr(tuple).opcode() != Opcode::Parameter || Some(i.parent()) == m.entry() {
                return None;
            }
            let index = usize::try_from(i.attrs.tuple_index).ok()?;
            let c = caller(i.parent())?;
            let ci = m.instr(c);
            match ci.opcode() {
                Opcode::While => {
                    let init = *ci.operands().first()?;
                    let root = m.comp(i.parent()).root()?;
                    let ri = m.instr(root);
                    let invariant =
                        ri.opcode() == Opcode::Tuple && ri.operands().get(index) == Some(&id);
                    if !invariant || m.instr(init).opcode() != Opcode::Tuple {
                        return None;
                    }
                    let value = *m.instr(init).operands().get(index)?;
                    iota_dimension_at(m, value, caller, depth + 1)
                }
                Opcode::Conditional => {
                    let branch = ci.called.iter().position(|&b| b == i.parent())?;
                    let arg = *ci.operands().get(branch + 1)?;
                    if m.instr(arg).opcode() != Opcode::Tuple {
                        return None;
                    }
                    let value = *m.instr(arg).operands().get(index)?;
                    iota_dimension_at(m, value, caller, depth + 1)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The first dimension (of size > 1) along which every element of an s32 constant equals its
/// index.
fn constant_iota_dimension(i: &tessera_hlo::Instruction) -> Option<usize> {
    let literal = i.attrs.literal.as_deref()?;
    let bytes = literal.bytes()?;
    let dims = i.shape.dims();
    let count: i64 = dims.iter().product();
    if bytes.len() as i64 != count * 4 {
        return None;
    }
    let rank = dims.len();
    let mut is_iota = vec![true; rank];
    let mut index = vec![0i64; rank];
    for chunk in bytes.chunks_exact(4) {
        let v = i64::from(i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
        for d in 0..rank {
            if v != index[d] {
                is_iota[d] = false;
            }
        }
        // Row-major increment of the multi-index.
        for d in (0..rank).rev() {
            index[d] += 1;
            if index[d] < dims[d] {
                break;
            }
            index[d] = 0;
        }
    }
    (0..rank).find(|&d| is_iota[d] && dims[d] > 1)
}

/// For each of `components` entries of the index vector of `indices`, the indices dimension
/// along which it is an iota, if any: the indices themselves when they are one, or the pieces
/// of a concatenate along the index vector dimension (looking through copies).
pub fn index_component_iotas(
    m: &Module,
    indices: InstrId,
    index_vector_dim: usize,
    components: usize,
    caller: &dyn Fn(CompId) -> Option<InstrId>,
) -> Vec<Option<usize>> {
    let mut out = vec![None; components];
    let mut x = indices;
    while m.instr(x).opcode() == Opcode::Copy {
        let Some(&op) = m.instr(x).operands().first() else {
            break;
        };
        x = op;
    }
    let xi = m.instr(x);
    let concat_on_vector = xi.opcode() == Opcode::Concatenate
        && xi
            .attrs
            .dimensions
            .as_deref()
            .and_then(|d| d.first())
            .is_some_and(|&d| d == index_vector_dim as i64);
    let pieces = |id: InstrId| -> usize {
        let dims = m.instr(id).shape.dims();
        dims.get(index_vector_dim)
            .map_or(1, |&n| usize::try_from(n).unwrap_or(0))
    };
    if concat_on_vector {
        let mut k = 0;
        for &op in xi.operands() {
            let n = pieces(op);
            if let Some(d) = iota_dimension(m, op, caller).filter(|&d| d != index_vector_dim) {
                for slot in out.iter_mut().skip(k).take(n) {
                    *slot = Some(d);
                }
            }
            k += n;
        }
    } else if let Some(d) = iota_dimension(m, indices, caller).filter(|&d| d != index_vector_dim) {
        let n = pieces(indices).min(components);
        for slot in out.iter_mut().take(n) {
            *slot = Some(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_hlo::text::{parse_sharding, sharding_to_string};

    fn s(text: &str) -> Sharding {
        parse_sharding(text).unwrap()
    }

    fn show(x: &Option<Sharding>) -> String {
        x.as_ref().map_or("none".into(), sharding_to_string)
    }

    /// `f32[3,4,9] gather(f32[2,2,9], s32[2,3,4])`, offset_dims={2},
    /// collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0,
    /// slice_sizes={1,1,9}.
    fn gather_from_index() -> GatherScatter {
        let dn = GatherDimensionNumbers {
            offset_dims: vec![2],
            collapsed_slice_dims: vec![0, 1],
            start_index_map: vec![0, 1],
            index_vector_dim: 0,
            ..Default::default()
        };
        GatherScatter::gather(&dn, &[1, 1, 9], &[2, 2, 9], &[2, 3, 4], 3).unwrap()
    }

    /// `s32[8,4,2,2] gather(s32[8,4,2,2], s32[2,8,4])`, offset_dims={2,3},
    /// collapsed_slice_dims={0,1}, start_index_map={0,1}, index_vector_dim=0,
    /// slice_sizes={1,1,2,2}: XLA's parallel gather tests.
    fn parallel_gather() -> GatherScatter {
        let dn = GatherDimensionNumbers {
            offset_dims: vec![2, 3],
            collapsed_slice_dims: vec![0, 1],
            start_index_map: vec![0, 1],
            index_vector_dim: 0,
            ..Default::default()
        };
        GatherScatter::gather(&dn, &[1, 1, 2, 2], &[8, 4, 2, 2], &[2, 8, 4], 4).unwrap()
    }

    #[test]
    fn indices_map_to_the_non_offset_output_dims() {
        let g = gather_from_index();
        let m = g.indices_output();
        assert_eq!(m.indices, vec![1, 2]);
        assert_eq!(m.output, vec![0, 1]);
        assert_eq!(g.output_dim_of_indices_dim(0), None);
        // Index vector dimension last (implicit): every indices dimension is a batch one.
        let dn = GatherDimensionNumbers {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 1,
            ..Default::default()
        };
        let g = GatherScatter::gather(&dn, &[1, 9], &[2, 9], &[3], 2).unwrap();
        assert_eq!(g.indices_output().output, vec![0]);
    }

    #[test]
    fn operand_passthrough_needs_the_whole_dimension() {
        let g = gather_from_index();
        let m = g.operand_passthrough();
        assert_eq!((m.operand, m.output), (vec![2], vec![2]));
        let dn = GatherDimensionNumbers {
            offset_dims: vec![1, 2],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 1,
            ..Default::default()
        };
        // Dimension 1 is sliced 5 of 7: not pass-through; dimension 2 is whole.
        let g = GatherScatter::gather(&dn, &[1, 5, 9], &[4, 7, 9], &[3], 3).unwrap();
        let m = g.operand_passthrough();
        assert_eq!((m.operand, m.output), (vec![2], vec![2]));
    }

    #[test]
    fn implicit_parallel_dims_need_matching_sizes() {
        let g = parallel_gather();
        // Component 0 an iota along indices dim 1 (size 8 = operand dim 0), component 1 along
        // dim 2 (size 4 = operand dim 1).
        let p = g.implicit_parallel(&[Some(1), Some(2)]).unwrap();
        assert_eq!(p.operand, vec![0, 1]);
        assert_eq!(p.indices, vec![1, 2]);
        assert_eq!(p.output, vec![0, 1]);
        // Swapped: sizes differ (8 vs 4), nothing is parallel.
        assert_eq!(g.implicit_parallel(&[Some(2), Some(1)]), None);
        // Two components along one dimension: none.
        assert_eq!(g.implicit_parallel(&[Some(1), Some(1)]), None);
        assert_eq!(g.implicit_parallel(&[None, None]), None);
    }

    #[test]
    fn propagate_keeps_only_mapped_tiles() {
        // XLA's documented example: [2,3,5,7,11] along source (2,4,1) to target (2,1,3).
        let from = s("{devices=[2,3,5,7,11]<=[2310]}");
        let to = propagate_along_dims(&from, &[2, 4, 1], &[2, 1, 3], 5).unwrap();
        assert_eq!(
            sharding_to_string(&to),
            "{devices=[1,11,5,3,1,14]<=[2,3,5,7,11]T(4,2,1,0,3) last_tile_dim_replicate}"
        );
        assert!(to.same_as(&s(
            "{devices=[1,11,5,3,1,14]<=[2,3,5,7,11]T(4,2,1,0,3) last_tile_dim_replicate}"
        )));
        // Nothing mapped is tiled: replicated.
        let r = propagate_along_dims(&s("{devices=[1,4,1]<=[4]}"), &[0, 2], &[0, 1], 2);
        assert_eq!(show(&r), "{replicated}");
        // Tile-maximal and manual come back as they are.
        assert_eq!(
            show(&propagate_along_dims(&Sharding::manual(), &[0], &[0], 1)),
            "{manual}"
        );
        // Dimensions out of range are refused, not a panic.
        assert_eq!(
            propagate_along_dims(&s("{devices=[2]<=[2]}"), &[1], &[0], 1),
            None
        );
    }

    #[test]
    fn gather_forward_and_backward_on_xla_examples() {
        let g = gather_from_index();
        let out = output_from_indices(&g, &s("{devices=[1,2,1]0,1}"));
        assert_eq!(show(&out), "{devices=[2,1,1]<=[2]}");
        let back = indices_from_output(&g, &s("{devices=[2,1,1]0,1}"));
        assert_eq!(show(&back), "{devices=[1,2,1]<=[2]}");
        // The operand split on its pass-through dimension goes to the output's offset dim.
        let out = output_from_operand_passthrough(&g, &s("{devices=[1,1,2]0,1}"));
        assert_eq!(show(&out), "{devices=[1,1,2]<=[2]}");
        // ... but a split of a collapsed dimension does not.
        assert_eq!(
            output_from_operand_passthrough(&g, &s("{devices=[2,1,1]0,1}")),
            None
        );
    }

    #[test]
    fn parallel_and_passthrough_candidates_merge() {
        let g = parallel_gather();
        let p = g.parallel(&[Some(1), None]);
        assert_eq!(p.operand, vec![0]);
        // Output split on the parallel dim 0 and the pass-through dim 2: the operand gets both.
        let op = gather_operand_from_output(&g, &s("{devices=[2,1,2,1]0,1,4,5}"), &p);
        assert_eq!(show(&op), "{devices=[2,1,2,1]0,1,4,5}");
        // Only the parallel dim: the pass-through candidate is empty.
        let op = gather_operand_from_output(&g, &s("{devices=[2,2,1,1]0,1,4,5}"), &p);
        assert_eq!(
            show(&op),
            "{devices=[2,1,1,1,2]0,1,4,5 last_tile_dim_replicate}"
        );
        // No parallel dims, nothing passes through: no candidate.
        let none = DimMap::default();
        assert_eq!(
            gather_operand_from_output(&g, &s("{devices=[2,2,1,1]0,1,4,5}"), &none),
            None
        );
        // A replicated output is replicated operand.
        assert_eq!(
            show(&gather_operand_from_output(
                &g,
                &Sharding::replicated(),
                &none
            )),
            "{replicated}"
        );
    }

    #[test]
    fn scatter_slice_sizes_come_from_the_updates() {
        let dn = ScatterDimensionNumbers {
            update_window_dims: vec![1],
            inserted_window_dims: vec![0],
            scatter_dims_to_operand_dims: vec![0],
            index_vector_dim: 1,
            ..Default::default()
        };
        let g = GatherScatter::scatter(&dn, &[2, 9], &[3], &[3, 9]).unwrap();
        assert_eq!(g.slice_sizes, vec![1, 9]);
        let upd = scatter_update_from_output(&g, &s("{devices=[1,2]0,1}"), &DimMap::default());
        assert_eq!(show(&upd), "{devices=[1,2]<=[2]}");
        let idx = indices_from_output(&g, &s("{devices=[2,1]0,1}"));
        assert_eq!(show(&idx), "{devices=[2]<=[2]}");
        // Too few window dims for the operand is an error, not a panic.
        let bad = ScatterDimensionNumbers {
            update_window_dims: vec![],
            ..dn.clone()
        };
        assert!(GatherScatter::scatter(&bad, &[2, 9], &[3], &[3, 9]).is_err());
    }

    /// The while/conditional calling each computation, as the pass's computation map has it.
    fn callers(m: &Module) -> impl Fn(CompId) -> Option<InstrId> + '_ {
        move |c: CompId| {
            m.computations().iter().find_map(|&k| {
                m.comp(k).instructions().iter().copied().find(|&i| {
                    let x = m.instr(i);
                    match x.opcode() {
                        Opcode::While => x.while_body() == Some(c),
                        Opcode::Conditional => x.called.contains(&c),
                        _ => false,
                    }
                })
            })
        }
    }

    fn find(m: &Module, name: &str) -> InstrId {
        m.find_instruction(name).unwrap()
    }

    #[test]
    fn iotas_are_found_through_constants_broadcasts_concats_and_loops() {
        let text = r#"
HloModule m

body {
  p = (s32[], s32[4,3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  idx = s32[4,3] get-tuple-element(p), index=1
  ROOT t = (s32[], s32[4,3]) tuple(i, idx)
}

cond {
  p = (s32[], s32[4,3]) parameter(0)
  ROOT c = pred[] constant(true)
}

ENTRY e {
  k = s32[2,3] constant({{0,0,0},{1,1,1}})
  notiota = s32[2,3] constant({{0,1,2},{0,1,3}})
  cols = s32[2,3] constant({{0,1,2},{0,1,2}})
  f = f32[2,3] constant({{0,0,0},{1,1,1}})
  small = s32[3] iota(), iota_dimension=0
  b = s32[4,3] broadcast(small), dimensions={1}
  p0 = s32[4,3,1] parameter(0)
  io = s32[4,3,1] iota(), iota_dimension=0
  cat = s32[4,3,2] concatenate(p0, io), dimensions={2}
  cp = s32[4,3,2] copy(cat)
  z = s32[] constant(0)
  init = (s32[], s32[4,3]) tuple(z, b)
  w = (s32[], s32[4,3]) while(init), condition=cond, body=body
  ROOT r = s32[4,3] get-tuple-element(w), index=1
}
"#;
        let m = tessera_hlo::text::parse_module(text).unwrap();
        let c = callers(&m);
        let dim = |name: &str| iota_dimension(&m, find(&m, name), &c);
        assert_eq!(dim("k"), Some(0));
        assert_eq!(dim("cols"), Some(1));
        assert_eq!(dim("notiota"), None);
        // Only s32 values count.
        assert_eq!(dim("f"), None);
        assert_eq!(dim("b"), Some(1));
        // The loop-invariant tuple element of the body is the broadcast iota of the caller.
        let body = m.find_computation("body").unwrap();
        let idx = m
            .comp(body)
            .instructions()
            .iter()
            .copied()
            .find(|&i| m.instr(i).name().starts_with("idx"))
            .unwrap();
        assert_eq!(iota_dimension(&m, idx, &c), Some(1));
        // Index component 1 of the concatenate (through the copy) is an iota along dim 0.
        assert_eq!(
            index_component_iotas(&m, find(&m, "cp"), 2, 2, &c),
            vec![None, Some(0)]
        );
        // An iota along the index vector dimension itself does not count.
        assert_eq!(
            index_component_iotas(&m, find(&m, "io"), 0, 1, &c),
            vec![None]
        );
    }

    #[test]
    fn malformed_dimension_numbers_are_errors() {
        let dn = GatherDimensionNumbers {
            offset_dims: vec![5],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 1,
            ..Default::default()
        };
        assert!(GatherScatter::gather(&dn, &[1, 9], &[2, 9], &[3], 2).is_err());
        let dn = GatherDimensionNumbers {
            offset_dims: vec![1],
            collapsed_slice_dims: vec![0],
            start_index_map: vec![0],
            index_vector_dim: 7,
            ..Default::default()
        };
        assert!(GatherScatter::gather(&dn, &[1, 9], &[2, 9], &[3], 2).is_err());
        assert!(GatherScatter::gather(&dn, &[1], &[2, 9], &[3], 2).is_err());
    }

    // ----- properties -----

    use proptest::prelude::*;
    use tessera_hlo::sharding::TileAssignment;

    /// A tiled sharding of `tiles` (data dims) plus an optional replicated subgroup, with
    /// devices in the order `perm` of `0..n`.
    fn tiled(tiles: &[i64], replicate: i64, perm: &[i64]) -> Sharding {
        let mut dims: tessera_hlo::sharding::TileDims = tiles.iter().copied().collect();
        if replicate > 1 {
            dims.push(replicate);
        }
        let ta = TileAssignment::Explicit {
            dims,
            devices: perm.to_vec(),
        };
        let types: Vec<tessera_hlo::sharding::SubgroupType> = if replicate > 1 {
            vec![tessera_hlo::sharding::SubgroupType::Replicated]
        } else {
            Vec::new()
        };
        Sharding::subgroup(ta, &types)
    }

    /// For each device, its tile index along each data dimension (all zeros for a replicated
    /// sharding of that rank).
    fn tile_index(s: &Sharding, rank: usize, n: usize) -> Vec<Vec<i64>> {
        match s.as_tiled() {
            None => vec![vec![0; rank]; n],
            Some(t) => t
                .tile_assignment
                .index_of_devices(n)
                .into_iter()
                .map(|ix| ix.expect("every device has a tile")[..rank].to_vec())
                .collect(),
        }
    }

    fn case() -> impl Strategy<Value = (Vec<i64>, i64, Vec<i64>, Vec<usize>, Vec<usize>, usize)> {
        (1usize..4, 1usize..5).prop_flat_map(|(src_rank, tgt_rank)| {
            (
                proptest::collection::vec(1i64..4, src_rank),
                1i64..3,
                Just(src_rank),
                Just(tgt_rank),
            )
                .prop_flat_map(|(tiles, rep, src_rank, tgt_rank)| {
                    let n = (tiles.iter().product::<i64>() * rep) as usize;
                    let k = src_rank.min(tgt_rank);
                    (
                        Just(tiles),
                        Just(rep),
                        Just((0..n as i64).collect::<Vec<_>>()).prop_shuffle(),
                        Just((0..src_rank).collect::<Vec<_>>()).prop_shuffle(),
                        Just((0..tgt_rank).collect::<Vec<_>>()).prop_shuffle(),
                        0..=k,
                        Just(tgt_rank),
                    )
                        .prop_map(
                            |(tiles, rep, perm, src, tgt, k, tgt_rank)| {
                                (
                                    tiles,
                                    rep,
                                    perm,
                                    src[..k].to_vec(),
                                    {
                                        let mut t = tgt[..k].to_vec();
                                        t.push(tgt_rank);
                                        t
                                    },
                                    k,
                                )
                            },
                        )
                })
        })
    }

    proptest! {
        /// Every device keeps, on target dimension `tgt[k]`, the tile index it had on source
        /// dimension `src[k]`; every other target dimension has one tile; the devices that
        /// held the same mapped tiles form the replication groups.
        #[test]
        fn propagate_moves_tile_indices((tiles, rep, perm, src, tgt_and_rank, _k) in case()) {
            let tgt_rank = *tgt_and_rank.last().unwrap();
            let tgt = &tgt_and_rank[..tgt_and_rank.len() - 1];
            let s = tiled(&tiles, rep, &perm);
            let n = perm.len();
            let out = propagate_along_dims(&s, &src, tgt, tgt_rank).unwrap();
            let before = tile_index(&s, tiles.len(), n);
            let after = tile_index(&out, tgt_rank, n);
            for (b4, af) in before.iter().zip(&after) {
                for (&a, &b) in src.iter().zip(tgt) {
                    prop_assert_eq!(af[b], b4[a]);
                }
                for (t, &x) in af.iter().enumerate() {
                    if !tgt.contains(&t) {
                        prop_assert_eq!(x, 0);
                    }
                }
            }
            // Back again: the source with everything else replicated.
            let back = propagate_along_dims(&out, tgt, &src, tiles.len()).unwrap();
            prop_assert!(back.same_as(&s.replicate_all_except(&src)));
        }

        /// Index pass-through there and back keeps the indices' batch tiles and replicates
        /// the index vector dimension.
        #[test]
        fn index_passthrough_round_trips(
            tiles in proptest::collection::vec(1i64..4, 3),
            ivd in 0usize..4,
        ) {
            // Indices of rank 3 (ivd 3: the index vector is implicit) into an operand
            // [8,8,5]: the first `components` dimensions are collapsed, the rest sliced whole.
            let components = if ivd < 3 { 2usize } else { 1 };
            let mut indices = vec![6i64, 7, 8];
            if ivd < 3 {
                indices[ivd] = components as i64;
            }
            let batch = if ivd < 3 { 2usize } else { 3 };
            let rank = batch + 3 - components;
            let dn = GatherDimensionNumbers {
                offset_dims: (batch as i64..rank as i64).collect(),
                collapsed_slice_dims: (0..components as i64).collect(),
                start_index_map: (0..components as i64).collect(),
                index_vector_dim: ivd as i64,
                ..Default::default()
            };
            let operand = [8i64, 8, 5];
            let slice: Vec<i64> =
                (0..3).map(|d| if d < components { 1 } else { operand[d] }).collect();
            let g = GatherScatter::gather(&dn, &slice, &operand, &indices, rank).unwrap();
            let n = tiles.iter().product::<i64>() as usize;
            let s = tiled(&tiles, 1, &(0..n as i64).collect::<Vec<_>>());
            let out = output_from_indices(&g, &s).unwrap();
            let back = indices_from_output(&g, &out).unwrap();
            let expected = if ivd < 3 { s.replicate_on_dims(&[ivd]) } else { s.clone() };
            prop_assert!(back.same_as(&expected));
        }
    }
}
