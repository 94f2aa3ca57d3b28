//! [`Builder`]: adding instructions the way a pass that rewrites a module needs it.
//!
//! Passes that add instructions (the SPMD partitioner adds thousands, rematerialization and
//! sharding propagation a few) all need the same chores done for every new instruction:
//! - its shape, from shape inference ([`crate::verify::shape_inference`]); an explicit shape
//!   only where XLA's result is not a function of the operands (parameter, constant, iota,
//!   reshape, broadcast, convert, custom-call);
//! - a name unique in the module, made from the opcode with XLA's `.N` suffixes by the module's
//!   one name allocator ([`Module::unique_name`]);
//! - the metadata and frontend attributes of the instruction being rewritten (the *origin*,
//!   XLA's `SetupDerivedInstruction`), and a record of which new instructions each origin
//!   produced (the seed's `SpmdBuilder::derived_instructions`);
//! - collectives in the form the PJRT CPU plugin runs: a fresh channel id from one counter,
//!   `use_global_device_ids=true`, replica groups of flattened device ids;
//! - all-reduce and reduce-scatter reduction computations, one per element type and operation
//!   in the module (cached across builders).
//!
//! A builder borrows the module mutably and appends to one computation; read the module
//! through [`Builder::module`]. Errors name the instruction being built and its origin.

use indexmap::IndexMap;

use crate::attrs::{Attrs, Comparison, ComparisonDirection, PaddingDim, ReplicaGroups, SliceDim};
use crate::instruction::{CompId, InstrId, Instruction};
use crate::literal::Literal;
use crate::module::{Module, MutationError, ProgramShape};
use crate::opcode::Opcode;
use crate::shape::Shape;
use crate::types::ElementType;
use crate::verify::shape_inference::{self, InferInput, ShapeError};

/// Why an instruction could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Shape inference refused the operands or attributes.
    #[error("{context}: {source}")]
    Shape {
        context: String,
        #[source]
        source: ShapeError,
    },
    /// The module refused the edit (an operand of another computation, a taken name, ...).
    #[error("{context}: {source}")]
    Mutation {
        context: String,
        #[source]
        source: MutationError,
    },
    /// A helper's own arguments do not fit (e.g. a reduction that is not a binary op).
    #[error("{context}: {message}")]
    Invalid { context: String, message: String },
}

type Result<T> = std::result::Result<T, BuildError>;

/// Adds instructions to one computation of a module; see the module docs.
pub struct Builder<'m> {
    module: &'m mut Module,
    comp: CompId,
    origin: Option<InstrId>,
    derived: IndexMap<InstrId, Vec<InstrId>>,
    next_channel: Option<i64>,
}

impl<'m> Builder<'m> {
    /// A builder appending to computation `comp` of `module`.
    pub fn new(module: &'m mut Module, comp: CompId) -> Builder<'m> {
        Builder {
            module,
            comp,
            origin: None,
            derived: IndexMap::new(),
            next_channel: None,
        }
    }

    pub fn module(&self) -> &Module {
        self.module
    }

    /// The module, for edits the builder does not make (set a root, move uses, ...). Add
    /// instructions through the builder, so they get names, metadata and a place in the record.
    pub fn module_mut(&mut self) -> &mut Module {
        self.module
    }

    /// The computation new instructions go to.
    pub fn computation(&self) -> CompId {
        self.comp
    }

    /// Sends the following instructions to computation `comp` (e.g. a new loop body).
    pub fn set_computation(&mut self, comp: CompId) {
        self.comp = comp;
    }

    /// The instruction being rewritten: the following instructions copy its metadata and
    /// frontend attributes and are recorded as derived from it. `None` stops both.
    pub fn set_origin(&mut self, origin: Option<InstrId>) {
        self.origin = origin;
    }

    pub fn origin(&self) -> Option<InstrId> {
        self.origin
    }

    /// The instructions built so far while `original` was the origin, in the order built.
    pub fn derived(&self, original: InstrId) -> &[InstrId] {
        self.derived.get(&original).map_or(&[], Vec::as_slice)
    }

    /// Every origin with the instructions built for it, origins in the order first seen.
    pub fn derived_map(&self) -> &IndexMap<InstrId, Vec<InstrId>> {
        &self.derived
    }

    /// Ends the builder, keeping its record of derived instructions.
    pub fn into_derived(self) -> IndexMap<InstrId, Vec<InstrId>> {
        self.derived
    }

    /// A channel id for a new collective: the module's next free id the first time, then one
    /// more each call. Every channel a builder hands out is distinct from every channel in the
    /// module when it was created.
    pub fn next_channel_id(&mut self) -> i64 {
        let id = match self.next_channel {
            Some(c) => c,
            None => self.module.next_channel_id(),
        };
        self.next_channel = Some(id + 1);
        id
    }

    /// Where an error happened: the opcode being built and the origin, if any.
    fn context(&self, what: &str) -> String {
        match self.origin.and_then(|o| self.module.try_instr(o)) {
            Some(o) => format!("building {what} for %{}", o.name),
            None => format!(
                "building {what} in computation {}",
                self.module
                    .try_comp(self.comp)
                    .map_or("<removed>", |c| c.name.as_str())
            ),
        }
    }

    // ----- the general entry points -----

    /// Adds `instr` as given (its shape is not checked). An empty name is made from the
    /// opcode, any other made unique with `.N`; the origin's metadata and frontend attributes
    /// are copied where `instr` has none; the instruction is recorded under the origin.
    pub fn add(&mut self, mut instr: Instruction) -> Result<InstrId> {
        let base = if instr.name.is_empty() {
            instr.opcode.name().to_string()
        } else {
            std::mem::take(&mut instr.name)
        };
        instr.name = self.module.unique_name(&base);
        if let Some(o) = self.origin.and_then(|o| self.module.try_instr(o)) {
            if instr.metadata.is_none() && o.metadata.is_some() {
                let md = o.metadata.clone();
                instr.metadata = md;
            }
            if instr.frontend_attributes.is_empty() && !o.frontend_attributes.is_empty() {
                let fa = o.frontend_attributes.clone();
                instr.frontend_attributes = fa;
            }
        }
        let opcode = instr.opcode;
        let id = self
            .module
            .add_instruction(self.comp, instr)
            .map_err(|source| BuildError::Mutation {
                context: self.context(opcode.name()),
                source,
            })?;
        if let Some(o) = self.origin {
            self.derived.entry(o).or_default().push(id);
        }
        Ok(id)
    }

    /// The shape `opcode` gives for these operands, attributes and called computations
    /// (`target` for the opcodes whose result the operands do not determine).
    pub fn infer(
        &self,
        opcode: Opcode,
        operands: &[InstrId],
        attrs: &Attrs,
        called: &[CompId],
        target: Option<&Shape>,
    ) -> Result<Shape> {
        let m = &*self.module;
        let shapes: Vec<&Shape> = operands.iter().map(|&o| &m.instr(o).shape).collect();
        let signatures: Vec<ProgramShape> = called.iter().map(|&c| m.program_shape(c)).collect();
        shape_inference::infer(
            opcode,
            &InferInput {
                operands: &shapes,
                attrs,
                called: &signatures,
                target,
                replica_count: m.config.replica_count,
                num_partitions: m.config.num_partitions,
            },
        )
        .map_err(|source| BuildError::Shape {
            context: self.context(opcode.name()),
            source,
        })
    }

    /// Adds `opcode(operands)` with `attrs` and `called`, its shape inferred (`target` only for
    /// the opcodes that need one).
    pub fn op(
        &mut self,
        opcode: Opcode,
        operands: &[InstrId],
        attrs: Attrs,
        called: &[CompId],
        target: Option<&Shape>,
    ) -> Result<InstrId> {
        self.op_named("", opcode, operands, attrs, called, target)
    }

    /// [`Builder::op`] with a name: `name` made unique with `.N` (the opcode's name when empty),
    /// for passes whose new instructions follow a naming scheme (`x.remat`, `x.annotation`).
    pub fn op_named(
        &mut self,
        name: &str,
        opcode: Opcode,
        operands: &[InstrId],
        attrs: Attrs,
        called: &[CompId],
        target: Option<&Shape>,
    ) -> Result<InstrId> {
        let shape = self.infer(opcode, operands, &attrs, called, target)?;
        let mut i = Instruction::new(name, opcode, shape)
            .with_operands(operands)
            .with_called(called);
        i.attrs = attrs;
        self.add(i)
    }

    // ----- typed helpers -----

    /// `parameter(number)` of `shape`, named `name` (made unique).
    pub fn parameter(&mut self, number: i64, shape: Shape, name: &str) -> Result<InstrId> {
        let mut i = Instruction::new(name, Opcode::Parameter, shape);
        i.attrs.parameter_number = number;
        self.add(i)
    }

    pub fn constant(&mut self, literal: Literal) -> Result<InstrId> {
        let mut i = Instruction::new("", Opcode::Constant, literal.shape.clone());
        i.attrs.literal = Some(Box::new(literal));
        self.add(i)
    }

    /// A scalar constant of type `ty` with value `v`: integers truncated and wrapped to the
    /// type's width, floats rounded to nearest, pred is `v != 0`.
    pub fn scalar(&mut self, ty: ElementType, v: f64) -> Result<InstrId> {
        let bytes = scalar_bytes(ty, v).ok_or_else(|| BuildError::Invalid {
            context: self.context("constant"),
            message: format!("no scalar constants of type {ty}"),
        })?;
        let lit = Literal::from_bytes(Shape::scalar(ty), bytes).expect("one element");
        self.constant(lit)
    }

    /// `iota` of `shape` counting along `dimension`.
    pub fn iota(&mut self, shape: Shape, dimension: i64) -> Result<InstrId> {
        let a = attrs(|a| a.iota_dimension = dimension);
        self.op(Opcode::Iota, &[], a, &[], Some(&shape))
    }

    /// An element-wise unary op (negate, abs, copy, not, ...).
    pub fn unary(&mut self, opcode: Opcode, x: InstrId) -> Result<InstrId> {
        self.op(opcode, &[x], Attrs::default(), &[], None)
    }

    /// An element-wise binary op (add, multiply, and, maximum, ...).
    pub fn binary(&mut self, opcode: Opcode, a: InstrId, b: InstrId) -> Result<InstrId> {
        self.op(opcode, &[a, b], Attrs::default(), &[], None)
    }

    pub fn convert(&mut self, x: InstrId, ty: ElementType) -> Result<InstrId> {
        let mut target = self.module.instr(x).shape.clone();
        match target.as_array_mut() {
            Some(a) => a.ty = ty,
            None => {
                return Err(BuildError::Invalid {
                    context: self.context("convert"),
                    message: format!("%{} is not an array", self.module.instr(x).name),
                })
            }
        }
        self.op(Opcode::Convert, &[x], Attrs::default(), &[], Some(&target))
    }

    /// `compare(a, b), direction=...` with the element type's default comparison type.
    pub fn compare(
        &mut self,
        a: InstrId,
        b: InstrId,
        direction: ComparisonDirection,
    ) -> Result<InstrId> {
        let at = attrs(|at| {
            at.comparison = Some(Comparison {
                direction,
                ty: None,
            })
        });
        self.op(Opcode::Compare, &[a, b], at, &[], None)
    }

    pub fn select(
        &mut self,
        pred: InstrId,
        on_true: InstrId,
        on_false: InstrId,
    ) -> Result<InstrId> {
        self.op(
            Opcode::Select,
            &[pred, on_true, on_false],
            Attrs::default(),
            &[],
            None,
        )
    }

    /// `slice={[start:limit:stride], ...}`, one entry per dimension.
    pub fn slice(
        &mut self,
        x: InstrId,
        starts: &[i64],
        limits: &[i64],
        strides: &[i64],
    ) -> Result<InstrId> {
        if starts.len() != limits.len() || starts.len() != strides.len() {
            return Err(BuildError::Invalid {
                context: self.context("slice"),
                message: format!(
                    "{} starts, {} limits and {} strides",
                    starts.len(),
                    limits.len(),
                    strides.len()
                ),
            });
        }
        let a = attrs(|a| {
            a.slice = Some(
                starts
                    .iter()
                    .zip(limits)
                    .zip(strides)
                    .map(|((&start, &limit), &stride)| SliceDim {
                        start,
                        limit,
                        stride,
                    })
                    .collect(),
            )
        });
        self.op(Opcode::Slice, &[x], a, &[], None)
    }

    /// `dynamic-slice(x, starts...), dynamic_slice_sizes={sizes}` (one scalar start per
    /// dimension).
    pub fn dynamic_slice(
        &mut self,
        x: InstrId,
        starts: &[InstrId],
        sizes: &[i64],
    ) -> Result<InstrId> {
        let a = attrs(|a| a.dynamic_slice_sizes = Some(sizes.to_vec()));
        let mut ops = vec![x];
        ops.extend_from_slice(starts);
        self.op(Opcode::DynamicSlice, &ops, a, &[], None)
    }

    pub fn dynamic_update_slice(
        &mut self,
        x: InstrId,
        update: InstrId,
        starts: &[InstrId],
    ) -> Result<InstrId> {
        let mut ops = vec![x, update];
        ops.extend_from_slice(starts);
        self.op(
            Opcode::DynamicUpdateSlice,
            &ops,
            Attrs::default(),
            &[],
            None,
        )
    }

    /// `pad(x, value), padding=...`, one entry per dimension.
    pub fn pad(&mut self, x: InstrId, value: InstrId, padding: &[PaddingDim]) -> Result<InstrId> {
        let a = attrs(|a| a.padding = Some(padding.to_vec()));
        self.op(Opcode::Pad, &[x, value], a, &[], None)
    }

    /// `x` padded with `value` along dimension `d` only. A `d` past `x`'s rank is refused by
    /// shape inference, like any padding of the wrong length.
    pub fn pad_dim(
        &mut self,
        x: InstrId,
        value: InstrId,
        d: usize,
        padding: PaddingDim,
    ) -> Result<InstrId> {
        let rank = self.module.instr(x).shape.rank();
        let mut pads = vec![PaddingDim::default(); rank.max(d + 1)];
        pads[d] = padding;
        self.pad(x, value, &pads)
    }

    pub fn concatenate(&mut self, xs: &[InstrId], dimension: i64) -> Result<InstrId> {
        let a = attrs(|a| a.dimensions = Some(vec![dimension]));
        self.op(Opcode::Concatenate, xs, a, &[], None)
    }

    /// `reshape` of `x` to `dims` (same element type).
    pub fn reshape(&mut self, x: InstrId, dims: &[i64]) -> Result<InstrId> {
        let ty = self.module.instr(x).shape.element_type();
        let target = Shape::array(ty, dims);
        self.op(Opcode::Reshape, &[x], Attrs::default(), &[], Some(&target))
    }

    /// `transpose(x), dimensions={perm}`: result dimension i is operand dimension `perm[i]`.
    pub fn transpose(&mut self, x: InstrId, perm: &[i64]) -> Result<InstrId> {
        let a = attrs(|a| a.dimensions = Some(perm.to_vec()));
        self.op(Opcode::Transpose, &[x], a, &[], None)
    }

    /// `broadcast(x), dimensions={dims}` to `out_dims` (same element type): operand dimension
    /// i becomes result dimension `dims[i]`.
    pub fn broadcast(&mut self, x: InstrId, out_dims: &[i64], dims: &[i64]) -> Result<InstrId> {
        let ty = self.module.instr(x).shape.element_type();
        let target = Shape::array(ty, out_dims);
        let a = attrs(|a| a.dimensions = Some(dims.to_vec()));
        self.op(Opcode::Broadcast, &[x], a, &[], Some(&target))
    }

    pub fn tuple(&mut self, xs: &[InstrId]) -> Result<InstrId> {
        self.op(Opcode::Tuple, xs, Attrs::default(), &[], None)
    }

    pub fn get_tuple_element(&mut self, t: InstrId, index: i64) -> Result<InstrId> {
        let a = attrs(|a| a.tuple_index = index);
        self.op(Opcode::GetTupleElement, &[t], a, &[], None)
    }

    pub fn partition_id(&mut self) -> Result<InstrId> {
        self.op(Opcode::PartitionId, &[], Attrs::default(), &[], None)
    }

    pub fn replica_id(&mut self) -> Result<InstrId> {
        self.op(Opcode::ReplicaId, &[], Attrs::default(), &[], None)
    }

    /// `reduce(x, init), dimensions={dims}, to_apply=reducer`.
    pub fn reduce(
        &mut self,
        x: InstrId,
        init: InstrId,
        dims: &[i64],
        reducer: CompId,
    ) -> Result<InstrId> {
        let a = attrs(|a| a.dimensions = Some(dims.to_vec()));
        self.op(Opcode::Reduce, &[x, init], a, &[reducer], None)
    }

    /// The computation `(x: ty[], y: ty[]) -> ty[] { op(x, y) }` for reductions and
    /// all-reduces, made once per element type and operation in the module and reused.
    /// `op` must be an element-wise binary operation.
    pub fn reducer(&mut self, ty: ElementType, op: Opcode) -> Result<CompId> {
        if let Some(c) = self.module.cached_reducer(ty, op) {
            return Ok(c);
        }
        if !op.is_elementwise_binary() || op == Opcode::Compare {
            return Err(BuildError::Invalid {
                context: self.context("a reduction computation"),
                message: format!("{op} is not an element-wise binary operation"),
            });
        }
        let name = self
            .module
            .unique_computation_name(&format!("{}_{}", op.name(), ty.name()));
        let m = &mut *self.module;
        let wrap = |source| BuildError::Mutation {
            context: format!("building the reduction computation {name}"),
            source,
        };
        let c = m.add_computation(name.clone()).map_err(wrap)?;
        let scalar = Shape::scalar(ty);
        let mut params = [InstrId::new(0); 2];
        for (n, side) in ["lhs", "rhs"].iter().enumerate() {
            let pname = m.unique_name(&format!("{name}.{side}"));
            let mut p = Instruction::new(pname, Opcode::Parameter, scalar.clone());
            p.attrs.parameter_number = n as i64;
            params[n] = m.add_instruction(c, p).map_err(wrap)?;
        }
        let rname = m.unique_name(&format!("{name}.{}", op.name()));
        let r = m
            .add_instruction(
                c,
                Instruction::new(rname, op, scalar).with_operands(&params),
            )
            .map_err(wrap)?;
        m.set_root(c, r);
        // Callees come before their callers in the stored order (the plugin needs it).
        let mut order = m.computations().to_vec();
        order.retain(|&x| x != c);
        order.insert(0, c);
        m.set_computation_order(order);
        m.cache_reducer(ty, op, c);
        Ok(c)
    }

    /// Sets a collective's channel and replica groups the way the plugin runs them.
    fn collective_attrs(&mut self, groups: ReplicaGroups, global_ids: bool) -> Attrs {
        let channel = self.next_channel_id();
        attrs(|a| {
            a.channel_id = Some(channel);
            a.replica_groups = Some(Box::new(groups));
            a.use_global_device_ids = global_ids;
        })
    }

    /// `all-reduce(x)` combining with `op` (add, maximum, ...) within each group of flattened
    /// device ids.
    pub fn all_reduce(&mut self, x: InstrId, op: Opcode, groups: ReplicaGroups) -> Result<InstrId> {
        let ty = self.module.instr(x).shape.element_type();
        let reducer = self.reducer(ty, op)?;
        let a = self.collective_attrs(groups, true);
        self.op(Opcode::AllReduce, &[x], a, &[reducer], None)
    }

    /// `all-gather(x), dimensions={dimension}` within each group of flattened device ids.
    pub fn all_gather(
        &mut self,
        x: InstrId,
        dimension: i64,
        groups: ReplicaGroups,
    ) -> Result<InstrId> {
        let mut a = self.collective_attrs(groups, true);
        a.dimensions = Some(vec![dimension]);
        self.op(Opcode::AllGather, &[x], a, &[], None)
    }

    /// `reduce-scatter(x), dimensions={dimension}` combining with `op` within each group of
    /// flattened device ids.
    pub fn reduce_scatter(
        &mut self,
        x: InstrId,
        dimension: i64,
        op: Opcode,
        groups: ReplicaGroups,
    ) -> Result<InstrId> {
        let ty = self.module.instr(x).shape.element_type();
        let reducer = self.reducer(ty, op)?;
        let mut a = self.collective_attrs(groups, true);
        a.dimensions = Some(vec![dimension]);
        self.op(Opcode::ReduceScatter, &[x], a, &[reducer], None)
    }

    /// The array form `all-to-all(x), dimensions={split}`: `x` is cut into group-size pieces
    /// along `split`, piece k goes to the k-th device of the group, and the received pieces
    /// are concatenated along `split` in group order. The groups hold partition ids (XLA's
    /// cross-partition mode: a channel id, no `use_global_device_ids`).
    pub fn all_to_all(&mut self, x: InstrId, split: i64, groups: ReplicaGroups) -> Result<InstrId> {
        let mut a = self.collective_attrs(groups, false);
        a.dimensions = Some(vec![split]);
        self.op(Opcode::AllToAll, &[x], a, &[], None)
    }

    /// `collective-permute(x), source_target_pairs={...}` over partition ids; a device that
    /// is no pair's target receives zeros.
    pub fn collective_permute(&mut self, x: InstrId, pairs: &[(i64, i64)]) -> Result<InstrId> {
        let channel = self.next_channel_id();
        let a = attrs(|a| {
            a.channel_id = Some(channel);
            a.source_target_pairs = Some(pairs.to_vec());
        });
        self.op(Opcode::CollectivePermute, &[x], a, &[], None)
    }
}

/// Attributes with the fields `set` sets, the rest default.
fn attrs(set: impl FnOnce(&mut Attrs)) -> Attrs {
    let mut a = Attrs::default();
    set(&mut a);
    a
}

/// Little-endian bytes of one element of `ty` holding `v`: integers truncated toward zero and
/// wrapped to the type's width, floats rounded by the text format's encoder; `None` for types
/// without a number value.
fn scalar_bytes(ty: ElementType, v: f64) -> Option<Vec<u8>> {
    use ElementType::*;
    let int = |x: i128, bytes: usize| x.to_le_bytes()[..bytes].to_vec();
    Some(match ty {
        Pred => vec![(v != 0.0) as u8],
        S8 | S16 | S32 | S64 => int(v as i64 as i128, ty.byte_size()),
        U8 | U16 | U32 | U64 => int(v as u64 as i128, ty.byte_size()),
        _ if ty.is_float() => {
            let bits = crate::text::float::f64_to_bits(ty, v)?;
            bits.to_le_bytes()[..ty.byte_size()].to_vec()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
