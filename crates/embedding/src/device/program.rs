//! The device programs of one stack, emitted as HLO through [`tessera_hlo::Builder`].
//!
//! Both programs are per-device (SPMD) programs: every device runs the same module on its own
//! shard of the stack (`[rows, dim]`: its SparseCores' shards one after the other) and its own
//! exchange buffers ([`super::exchange`]). The devices talk through all-to-all only.
//!
//! Lookup: send the row ids of each destination to it (all-to-all), gather those rows from the
//! local shard (simulated quantization if asked), scale them by the gains, send them back
//! (all-to-all), add them up per sample (scatter-add, the combiner is in the gains) and cut the
//! samples into one output per feature.
//!
//! Update: stack the features' activation gradients, gather each entry's sample gradient and
//! scale it by its gain, send it to the row's owner (all-to-all), add the gradients up per row
//! (scatter-add), and apply the optimizer to the rows that were touched (all live rows for
//! non-lazy Adam). Rows and columns that are padding, and rows nobody touched, keep their bits.

use tessera_hlo::attrs::{
    ComparisonDirection, GatherDimensionNumbers, PaddingDim, ReplicaGroups, ScatterDimensionNumbers,
};
use tessera_hlo::{Attrs, BuildError, Builder, ElementType, InstrId, Module, Opcode, Shape};

use crate::config::{Optimizer, QuantizationConfig};

const F32: ElementType = ElementType::F32;
const S32: ElementType = ElementType::S32;

/// A feature's samples in the stack: core-local samples `[start, start + count)` of every core,
/// `dim` real columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FeatureSlot {
    pub start: i64,
    pub count: i64,
    pub dim: i64,
}

/// Everything the shape of a stack's programs depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct StackShape {
    /// Devices taking part (`global_device_count`).
    pub devices: i64,
    /// SparseCores per device.
    pub nsc: i64,
    /// Rows of the device's part of the stack (`nsc * rows_per_shard`).
    pub rows: i64,
    /// Padded dim of the stack.
    pub dim: i64,
    /// Samples per SparseCore.
    pub samples_per_core: i64,
    /// Exchange slots per (source, destination) device pair.
    pub capacity: i64,
    /// The stack's features in sample order.
    pub features: Vec<FeatureSlot>,
}

impl StackShape {
    fn samples(&self) -> i64 {
        self.nsc * self.samples_per_core
    }
    fn slots(&self) -> i64 {
        self.devices * self.capacity
    }
}

type R<T> = std::result::Result<T, BuildError>;

fn f32s(dims: &[i64]) -> Shape {
    Shape::array(F32, dims)
}

/// Attributes with the fields `set` sets, the rest default.
fn attrs(set: impl FnOnce(&mut Attrs)) -> Attrs {
    let mut a = Attrs::default();
    set(&mut a);
    a
}

/// A scatter of rows (indices `[n]`, one per update row) with these update window dims.
fn scatter_attrs(update_window_dims: Vec<i64>) -> Attrs {
    attrs(|a| {
        a.scatter_dims = Some(Box::new(ScatterDimensionNumbers {
            update_window_dims,
            inserted_window_dims: vec![0],
            scatter_dims_to_operand_dims: vec![0],
            index_vector_dim: 1,
            input_batching_dims: vec![],
            scatter_indices_batching_dims: vec![],
        }))
    })
}

/// Small helpers over the builder for the shapes these programs use.
struct Emit<'m> {
    b: Builder<'m>,
    devices: i64,
}

impl<'m> Emit<'m> {
    fn new(m: &'m mut Module, devices: i64) -> R<Emit<'m>> {
        let e = m
            .add_computation("main")
            .map_err(|source| BuildError::Mutation {
                context: "the entry computation".into(),
                source,
            })?;
        m.set_entry(e);
        Ok(Emit {
            b: Builder::new(m, e),
            devices,
        })
    }

    fn splat(&mut self, ty: ElementType, v: f64, dims: &[i64]) -> R<InstrId> {
        let s = self.b.scalar(ty, v)?;
        self.b.broadcast(s, dims, &[])
    }

    fn bin(&mut self, op: Opcode, a: InstrId, b: InstrId) -> R<InstrId> {
        self.b.binary(op, a, b)
    }

    /// `x` (any rank, dim 0 of size `devices`) exchanged between the devices.
    fn exchange(&mut self, x: InstrId) -> R<InstrId> {
        if self.devices == 1 {
            return Ok(x);
        }
        let group = ReplicaGroups::explicit(vec![(0..self.devices).collect()]);
        self.b.all_to_all(x, 0, group)
    }

    /// `table[rows]` for a vector of row indices (out-of-range indices clamp, as XLA's gather
    /// does; callers mask them).
    fn gather_rows(&mut self, table: InstrId, rows: InstrId, dim: i64) -> R<InstrId> {
        let a = attrs(|a| {
            a.gather_dims = Some(Box::new(GatherDimensionNumbers {
                offset_dims: if dim == 0 { vec![] } else { vec![1] },
                collapsed_slice_dims: vec![0],
                start_index_map: vec![0],
                index_vector_dim: 1,
                operand_batching_dims: vec![],
                start_indices_batching_dims: vec![],
            }));
            a.gather_slice_sizes = Some(if dim == 0 { vec![1] } else { vec![1, dim] });
        });
        self.b.op(Opcode::Gather, &[table, rows], a, &[], None)
    }

    /// `zeros[out_rows, ...]` with `updates[i]` added at row `indices[i]`; indices out of range
    /// (the padding's -1) are skipped, as XLA's scatter skips them.
    fn scatter_add(&mut self, out_dims: &[i64], indices: InstrId, updates: InstrId) -> R<InstrId> {
        let zeros = self.splat(F32, 0.0, out_dims)?;
        let add = self.b.reducer(F32, Opcode::Add)?;
        let window: Vec<i64> = (1..out_dims.len() as i64).collect();
        let a = scatter_attrs(window);
        self.b
            .op(Opcode::Scatter, &[zeros, indices, updates], a, &[add], None)
    }

    /// `operand` with row `indices[i]` replaced by `updates[i]`; out-of-range indices (-1) are
    /// skipped. Rows named twice must get equal updates (the order is unspecified).
    fn scatter_rows(&mut self, operand: InstrId, indices: InstrId, updates: InstrId) -> R<InstrId> {
        let keep_new = self.keep_new()?;
        let a = scatter_attrs(vec![1]);
        self.b.op(
            Opcode::Scatter,
            &[operand, indices, updates],
            a,
            &[keep_new],
            None,
        )
    }

    /// The scatter combiner `(old, new) -> new`, made once per module.
    fn keep_new(&mut self) -> R<tessera_hlo::CompId> {
        let m = self.b.module_mut();
        if let Some(c) = m
            .computations()
            .iter()
            .copied()
            .find(|&c| m.comp(c).name() == "keep_new")
        {
            return Ok(c);
        }
        let wrap = |source| BuildError::Mutation {
            context: "the scatter combiner keep_new".into(),
            source,
        };
        let c = m.add_computation("keep_new").map_err(wrap)?;
        let scalar = Shape::scalar(F32);
        let mut params = Vec::new();
        for (n, side) in ["old", "new"].iter().enumerate() {
            let name = m.unique_name(&format!("keep_new.{side}"));
            let mut p = tessera_hlo::Instruction::new(name, Opcode::Parameter, scalar.clone());
            p.attrs.parameter_number = n as i64;
            params.push(m.add_instruction(c, p).map_err(wrap)?);
        }
        m.set_root(c, params[1]);
        // Callees come before their callers in the stored order (the plugin needs it).
        let mut order = m.computations().to_vec();
        order.retain(|&x| x != c);
        order.insert(0, c);
        m.set_computation_order(order);
        Ok(c)
    }

    /// `select(index >= 0, x, 0)` per row of a `[n, dim]` array.
    fn mask_rows(&mut self, index: InstrId, x: InstrId, n: i64, dim: i64) -> R<InstrId> {
        let zero_i = self.splat(S32, 0.0, &[n])?;
        let valid = self.b.compare(index, zero_i, ComparisonDirection::Ge)?;
        let valid = self.b.broadcast(valid, &[n, dim], &[0])?;
        let zeros = self.splat(F32, 0.0, &[n, dim])?;
        self.b.select(valid, x, zeros)
    }
}

/// Simulated quantization of looked-up values: clipped to `[min, max]` and rounded (half away
/// from zero) to the nearest of `num_buckets` evenly spaced levels from `min` to `max`.
fn quantize(e: &mut Emit<'_>, x: InstrId, q: &QuantizationConfig, dims: &[i64]) -> R<InstrId> {
    let lo = e.splat(F32, q.min_value as f64, dims)?;
    let hi = e.splat(F32, q.max_value as f64, dims)?;
    let clipped =
        e.b.op(Opcode::Clamp, &[lo, x, hi], Attrs::default(), &[], None)?;
    if q.num_buckets < 2 {
        return Ok(lo);
    }
    let step = (q.max_value - q.min_value) / (q.num_buckets - 1) as f32;
    let step = e.splat(F32, step as f64, dims)?;
    let shifted = e.bin(Opcode::Subtract, clipped, lo)?;
    let buckets = e.bin(Opcode::Divide, shifted, step)?;
    let rounded = e.b.unary(Opcode::RoundNearestAfz, buckets)?;
    let back = e.bin(Opcode::Multiply, rounded, step)?;
    e.bin(Opcode::Add, back, lo)
}

/// Emits one stack's lookup from parameter `p` on; returns its per-feature outputs.
fn lookup_stack(
    e: &mut Emit<'_>,
    s: &StackShape,
    quantization: Option<&QuantizationConfig>,
    p: i64,
) -> R<Vec<InstrId>> {
    let (n, k, d) = (s.devices, s.capacity, s.dim);
    let slots = s.slots();
    let table = e.b.parameter(p, f32s(&[s.rows, d]), "table")?;
    let rows =
        e.b.parameter(p + 1, Shape::array(S32, &[n, k]), "send_rows")?;
    let gains = e.b.parameter(p + 2, f32s(&[n, k]), "send_gains")?;
    let samples =
        e.b.parameter(p + 3, Shape::array(S32, &[n, k]), "send_samples")?;
    let recv_rows = e.exchange(rows)?;
    let recv_gains = e.exchange(gains)?;
    let flat_rows = e.b.reshape(recv_rows, &[slots])?;
    let flat_gains = e.b.reshape(recv_gains, &[slots])?;
    let mut looked = e.gather_rows(table, flat_rows, d)?;
    if let Some(q) = quantization {
        looked = quantize(e, looked, q, &[slots, d])?;
    }
    let g = e.b.broadcast(flat_gains, &[slots, d], &[0])?;
    let scaled = e.bin(Opcode::Multiply, looked, g)?;
    let scaled = e.mask_rows(flat_rows, scaled, slots, d)?;
    let scaled = e.b.reshape(scaled, &[n, k, d])?;
    let back = e.exchange(scaled)?;
    let back = e.b.reshape(back, &[slots, d])?;
    let flat_samples = e.b.reshape(samples, &[slots])?;
    let act = e.scatter_add(&[s.samples(), d], flat_samples, back)?;
    let act = e.b.reshape(act, &[s.nsc, s.samples_per_core, d])?;
    let mut outs = Vec::new();
    for f in &s.features {
        let part = e.b.slice(
            act,
            &[0, f.start, 0],
            &[s.nsc, f.start + f.count, f.dim],
            &[1, 1, 1],
        )?;
        outs.push(e.b.reshape(part, &[s.nsc * f.count, f.dim])?);
    }
    Ok(outs)
}

/// The lookup program of all stacks. Per stack, four parameters: the device's part of the
/// stack `f32[rows, dim]`, the row ids sent to each device `s32[devices, capacity]`, their gains
/// `f32[devices, capacity]` and their (device-local) samples `s32[devices, capacity]`. Result:
/// per stack, one `f32[nsc * count, dim_f]` per feature (the device's samples of it, core
/// after core).
pub fn lookup_module(stacks: &[(StackShape, Option<QuantizationConfig>)]) -> R<Module> {
    let mut m = Module::new("embedding_lookup");
    let devices = stacks.first().map_or(1, |s| s.0.devices);
    {
        let mut e = Emit::new(&mut m, devices)?;
        let mut outs = Vec::new();
        for (i, (s, q)) in stacks.iter().enumerate() {
            outs.extend(lookup_stack(&mut e, s, q.as_ref(), 4 * i as i64)?);
        }
        let root = e.b.tuple(&outs)?;
        let entry = e.b.computation();
        m.set_root(entry, root);
    }
    Ok(m)
}

/// Parameters one stack's update takes.
pub fn update_parameter_count(s: &StackShape, optimizer: &Optimizer) -> usize {
    1 + optimizer.slots().len() + 4 + s.features.len()
}

/// Emits one stack's update from parameter `p` on; returns the new (table, slots...).
fn update_stack(
    e: &mut Emit<'_>,
    s: &StackShape,
    optimizer: &Optimizer,
    p: i64,
) -> R<Vec<InstrId>> {
    let (n, k, d, r) = (s.devices, s.capacity, s.dim, s.rows);
    let slots = s.slots();
    let num_slots = optimizer.slots().len();
    let table = e.b.parameter(p, f32s(&[r, d]), "table")?;
    let mut slot_vals = Vec::new();
    for (i, (name, _)) in optimizer.slots().iter().enumerate() {
        slot_vals.push(e.b.parameter(p + 1 + i as i64, f32s(&[r, d]), name)?);
    }
    let p = p + 1 + num_slots as i64;
    let rows = e.b.parameter(p, Shape::array(S32, &[n, k]), "send_rows")?;
    let gains = e.b.parameter(p + 1, f32s(&[n, k]), "send_gains")?;
    let samples =
        e.b.parameter(p + 2, Shape::array(S32, &[n, k]), "send_samples")?;
    let row_dim = e.b.parameter(p + 3, Shape::array(S32, &[r]), "row_dim")?;
    // The stacked activation gradients [samples, dim].
    let mut parts = Vec::new();
    for (i, f) in s.features.iter().enumerate() {
        let g = e.b.parameter(
            p + 4 + i as i64,
            f32s(&[s.nsc * f.count, f.dim]),
            "activation_gradient",
        )?;
        let g = e.b.reshape(g, &[s.nsc, f.count, f.dim])?;
        let g = if f.dim < d {
            let zero = e.b.scalar(F32, 0.0)?;
            let pad = |high| PaddingDim {
                low: 0,
                high,
                interior: 0,
            };
            e.b.pad(g, zero, &[pad(0), pad(0), pad(d - f.dim)])?
        } else {
            g
        };
        parts.push(g);
    }
    let stacked = if parts.len() == 1 {
        parts[0]
    } else {
        e.b.concatenate(&parts, 1)?
    };
    let stacked = e.b.reshape(stacked, &[s.samples(), d])?;
    // Per entry: the sample's gradient times the gain, sent to the row's owner.
    let flat_samples = e.b.reshape(samples, &[slots])?;
    let flat_gains = e.b.reshape(gains, &[slots])?;
    let picked = e.gather_rows(stacked, flat_samples, d)?;
    let g = e.b.broadcast(flat_gains, &[slots, d], &[0])?;
    let scaled = e.bin(Opcode::Multiply, picked, g)?;
    let scaled = e.mask_rows(flat_samples, scaled, slots, d)?;
    let scaled = e.b.reshape(scaled, &[n, k, d])?;
    let recv = e.exchange(scaled)?;
    let recv = e.b.reshape(recv, &[slots, d])?;
    let recv_rows = e.exchange(rows)?;
    let flat_rows = e.b.reshape(recv_rows, &[slots])?;
    let grad = e.scatter_add(&[r, d], flat_rows, recv)?;
    let lazy = !matches!(
        optimizer,
        Optimizer::Adam {
            lazy_adam: false,
            ..
        }
    );
    if !lazy {
        // Non-lazy Adam moves every live row, touched or not: elementwise over the whole part.
        let col = e.b.iota(Shape::array(S32, &[r, d]), 1)?;
        let limit = e.b.broadcast(row_dim, &[r, d], &[0])?;
        let live = e.b.compare(col, limit, ComparisonDirection::Lt)?;
        let new = apply_optimizer(e, optimizer, grad, table, &slot_vals, &[r, d])?;
        let mut outs = Vec::new();
        for (new_v, old_v) in new.iter().zip(std::iter::once(&table).chain(&slot_vals)) {
            outs.push(e.b.select(live, *new_v, *old_v)?);
        }
        return Ok(outs);
    }
    // Lazy optimizers touch only the rows of the received entries: per entry, gather the row's
    // summed gradient, weights and slots, update them, and scatter the rows back (an entry of
    // a row that several entries name writes the same values). Columns past the row's table,
    // and the -1 slots, keep their old values.
    let g_e = e.gather_rows(grad, flat_rows, d)?;
    let w_e = e.gather_rows(table, flat_rows, d)?;
    let mut s_e = Vec::new();
    for &sv in &slot_vals {
        s_e.push(e.gather_rows(sv, flat_rows, d)?);
    }
    let dim_e = e.gather_rows(row_dim, flat_rows, 0)?;
    let col = e.b.iota(Shape::array(S32, &[slots, d]), 1)?;
    let limit = e.b.broadcast(dim_e, &[slots, d], &[0])?;
    let live = e.b.compare(col, limit, ComparisonDirection::Lt)?;
    let new = apply_optimizer(e, optimizer, g_e, w_e, &s_e, &[slots, d])?;
    let mut outs = Vec::new();
    for ((new_v, old_e), old) in new
        .iter()
        .zip(std::iter::once(&w_e).chain(&s_e))
        .zip(std::iter::once(&table).chain(&slot_vals))
    {
        let kept = e.b.select(live, *new_v, *old_e)?;
        outs.push(e.scatter_rows(*old, flat_rows, kept)?);
    }
    Ok(outs)
}

/// The update program of all stacks. Per stack ([`update_parameter_count`] parameters): the
/// device's part of the stack, its slots (the optimizer's order), the exchange buffers as in
/// [`lookup_module`] (rows, gains, samples), `s32[rows]` the real dim of each row (0 for
/// padding rows), and one activation gradient `f32[nsc * count, dim_f]` per feature. Result:
/// per stack (table, slots...), meant to alias the stack's first parameters.
pub fn update_module(stacks: &[(StackShape, Optimizer)]) -> R<Module> {
    let mut m = Module::new("embedding_update");
    let devices = stacks.first().map_or(1, |s| s.0.devices);
    {
        let mut e = Emit::new(&mut m, devices)?;
        let mut outs = Vec::new();
        let mut p = 0;
        for (s, o) in stacks {
            outs.extend(update_stack(&mut e, s, o, p)?);
            p += update_parameter_count(s, o) as i64;
        }
        let root = e.b.tuple(&outs)?;
        let entry = e.b.computation();
        m.set_root(entry, root);
    }
    Ok(m)
}

/// The optimizer's new (table, slots...) for every element, given the summed gradient `g`.
/// Formulas of TensorFlow's SparseCore kernels (sparse_core_ops_utils / jax-tpu-embedding's
/// optimizer computations); Adam without bias correction, as TF applies it.
fn apply_optimizer(
    e: &mut Emit<'_>,
    opt: &Optimizer,
    g: InstrId,
    w: InstrId,
    slots: &[InstrId],
    dims: &[i64],
) -> R<Vec<InstrId>> {
    use Opcode::*;
    let c = |e: &mut Emit<'_>, v: f32| e.splat(F32, v as f64, dims);
    Ok(match *opt {
        Optimizer::Sgd { learning_rate } => {
            let lr = c(e, learning_rate)?;
            let step = e.bin(Multiply, lr, g)?;
            vec![e.bin(Subtract, w, step)?]
        }
        Optimizer::Adagrad { learning_rate, .. } => {
            let lr = c(e, learning_rate)?;
            let g2 = e.bin(Multiply, g, g)?;
            let acc = e.bin(Add, slots[0], g2)?;
            let root = e.b.unary(Sqrt, acc)?;
            let lg = e.bin(Multiply, lr, g)?;
            let step = e.bin(Divide, lg, root)?;
            vec![e.bin(Subtract, w, step)?, acc]
        }
        Optimizer::AdagradMomentum {
            learning_rate,
            momentum,
            use_nesterov,
            exponent,
            beta2,
            epsilon,
        } => {
            let g2 = e.bin(Multiply, g, g)?;
            let acc = if beta2 == 1.0 {
                e.bin(Add, slots[0], g2)?
            } else {
                let b2 = c(e, beta2)?;
                let one_b2 = c(e, 1.0 - beta2)?;
                let a = e.bin(Multiply, b2, slots[0])?;
                let b = e.bin(Multiply, one_b2, g2)?;
                e.bin(Add, a, b)?
            };
            let eps = c(e, epsilon)?;
            let acc_eps = e.bin(Add, acc, eps)?;
            let power = c(e, -1.0 / exponent)?;
            let scale = e.bin(Power, acc_eps, power)?;
            let scaled = e.bin(Multiply, scale, g)?;
            let k = c(e, momentum)?;
            let km = e.bin(Multiply, k, slots[1])?;
            let m = e.bin(Add, km, scaled)?;
            let update = if use_nesterov {
                let km2 = e.bin(Multiply, k, m)?;
                e.bin(Add, km2, scaled)?
            } else {
                m
            };
            let lr = c(e, learning_rate)?;
            let step = e.bin(Multiply, lr, update)?;
            vec![e.bin(Subtract, w, step)?, acc, m]
        }
        Optimizer::Adam {
            learning_rate,
            beta_1,
            beta_2,
            epsilon,
            sum_inside_sqrt,
            ..
        } => {
            let b1 = c(e, beta_1)?;
            let one_b1 = c(e, 1.0 - beta_1)?;
            let b2 = c(e, beta_2)?;
            let one_b2 = c(e, 1.0 - beta_2)?;
            let a = e.bin(Multiply, b1, slots[0])?;
            let b = e.bin(Multiply, one_b1, g)?;
            let m = e.bin(Add, a, b)?;
            let g2 = e.bin(Multiply, g, g)?;
            let a = e.bin(Multiply, b2, slots[1])?;
            let b = e.bin(Multiply, one_b2, g2)?;
            let v = e.bin(Add, a, b)?;
            let denom = if sum_inside_sqrt {
                let eps2 = c(e, epsilon * epsilon)?;
                let s = e.bin(Add, v, eps2)?;
                e.b.unary(Sqrt, s)?
            } else {
                let eps = c(e, epsilon)?;
                let s = e.b.unary(Sqrt, v)?;
                e.bin(Add, s, eps)?
            };
            let lr = c(e, learning_rate)?;
            let lm = e.bin(Multiply, lr, m)?;
            let step = e.bin(Divide, lm, denom)?;
            vec![e.bin(Subtract, w, step)?, m, v]
        }
        Optimizer::Ftrl {
            learning_rate,
            learning_rate_power,
            l1_regularization_strength: l1,
            l2_regularization_strength: l2,
            beta,
            multiply_linear_by_learning_rate: mlr,
            ..
        } => {
            let (acc, lin) = (slots[0], slots[1]);
            let g2 = e.bin(Multiply, g, g)?;
            let acc_new = e.bin(Add, acc, g2)?;
            let neg_pow = c(e, -learning_rate_power)?;
            let p_old = e.bin(Power, acc, neg_pow)?;
            let p_new = e.bin(Power, acc_new, neg_pow)?;
            let dp = e.bin(Subtract, p_new, p_old)?;
            let lr = c(e, learning_rate)?;
            let lin_new = if mlr {
                let lg = e.bin(Multiply, lr, g)?;
                let a = e.bin(Add, lin, lg)?;
                let dw = e.bin(Multiply, dp, w)?;
                e.bin(Subtract, a, dw)?
            } else {
                let a = e.bin(Add, lin, g)?;
                let ratio = e.bin(Divide, dp, lr)?;
                let dw = e.bin(Multiply, ratio, w)?;
                e.bin(Subtract, a, dw)?
            };
            let numerator = if l1 == 0.0 {
                e.b.unary(Negate, lin_new)?
            } else {
                let l1s = c(e, if mlr { l1 * learning_rate } else { l1 })?;
                let neg = e.b.unary(Negate, l1s)?;
                let clamped =
                    e.b.op(Clamp, &[neg, lin_new, l1s], Attrs::default(), &[], None)?;
                e.bin(Subtract, clamped, lin_new)?
            };
            let denominator = if mlr {
                let l2s = c(e, 2.0 * learning_rate * l2)?;
                let bt = c(e, beta)?;
                let a = e.bin(Add, p_new, l2s)?;
                e.bin(Add, a, bt)?
            } else {
                let bt = c(e, beta)?;
                let a = e.bin(Add, p_new, bt)?;
                let a = e.bin(Divide, a, lr)?;
                let l2s = c(e, 2.0 * l2)?;
                e.bin(Add, a, l2s)?
            };
            vec![e.bin(Divide, numerator, denominator)?, acc_new, lin_new]
        }
    })
}
