//! `--verify`: the original and the compiled program run on PJRT devices with the same random
//! inputs, every output compared.

use std::fmt;

use tessera_hlo::text::shape_to_string;
use tessera_hlo::{ElementType, Literal, LiteralData, Module, Opcode, Shape};
use tessera_runtime::harness::{self, compare_arrays, Tolerance};
use tessera_runtime::{Client, EquivalenceReport, HostArray, HostValue};

use crate::{CompileError, Compiled, Result};

/// What the compiled program's outputs were compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyReference {
    /// The original as one program on one device.
    SingleDevice,
    /// The original partitioned by XLA's own SPMD partitioner (in the plugin) on the same
    /// devices: the reference for an original with manual regions (shard_map), which has no
    /// one-device meaning.
    XlaPartitioned,
}

/// In which precision [`verify_on_devices`] runs the two programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyPrecision {
    /// As given: each output compared with its element type's tolerance.
    #[default]
    Native,
    /// First as given, then again with every `f32` of both programs promoted to `f64` (the
    /// same inputs, widened), and the verdict is the `f64` comparison's at `f64`'s tolerance.
    /// A partitioned program sums in another order; over a long reduction (gradients summed
    /// over a batch through many layers) that rounding exceeds `f32`'s tolerance while the
    /// program is right. In `f64` the same reordering shrinks by 2^29, a wrong program does
    /// not. The `f32` comparison's errors are reported beside it.
    F64,
}

/// How [`verify_on_devices`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VerifyOptions {
    /// Seed of the random inputs.
    pub seed: u64,
    /// Replaces the per-type default tolerance of floating-point outputs (a partitioned
    /// program sums in another order; a recurrence can amplify that beyond the default).
    pub float_tolerance: Option<Tolerance>,
    pub precision: VerifyPrecision,
}

/// The outcome of [`verify_on_devices`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verification {
    pub reference: VerifyReference,
    /// Why XLA's partitioning is the reference, when it is.
    pub why: Option<String>,
    /// The verdict's comparison (in `f64` with [`VerifyPrecision::F64`]).
    pub report: EquivalenceReport,
    /// With [`VerifyPrecision::F64`]: the comparison of the programs as given (`f32`), for
    /// its errors; it does not decide.
    pub native: Option<EquivalenceReport>,
}

impl Verification {
    pub fn passed(&self) -> bool {
        self.report.passed()
    }
}

impl fmt::Display for Verification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reference {
            VerifyReference::SingleDevice => writeln!(
                f,
                "reference: the original on 1 device; compiled program on {} devices",
                self.report.num_devices
            )?,
            VerifyReference::XlaPartitioned => writeln!(
                f,
                "reference: XLA's own partitioning of the original ({}); compiled program on \
                 {} devices",
                self.why.as_deref().unwrap_or("manual region"),
                self.report.num_devices
            )?,
        }
        let Some(native) = &self.native else {
            return write!(f, "{}", self.report);
        };
        let differ: Vec<_> = native.outputs.iter().filter(|o| !o.passed()).collect();
        let worst = |key: fn(&harness::OutputReport) -> f64| {
            native
                .outputs
                .iter()
                .max_by(|a, b| key(a).total_cmp(&key(b)))
                .map(|o| (o.index, key(o)))
        };
        writeln!(
            f,
            "as given: {} of {} outputs within their element type's tolerance",
            native.outputs.len() - differ.len(),
            native.outputs.len()
        )?;
        if let (Some((ka, a)), Some((kr, r))) =
            (worst(|o| o.max_abs_error), worst(|o| o.max_rel_error))
        {
            writeln!(
                f,
                "  largest abs error {a:.3e} (output {ka}), largest rel error {r:.3e} (output {kr})"
            )?;
        }
        for o in &differ {
            writeln!(f, "  {o}")?;
        }
        writeln!(
            f,
            "every f32 promoted to f64 in both programs, the same inputs:"
        )?;
        write!(f, "{}", self.report)
    }
}

/// Runs `original` (the module given to [`crate::compile`]) and `compiled.module` on
/// `client`'s devices with the same random inputs and compares every output with the
/// element type's tolerance (or `options.float_tolerance`). The reference is the original on one device, or XLA's own
/// partitioning of it where it has manual regions. Parameters of one `tessera.resource` get
/// one value, as one variable feeds them.
pub fn verify_on_devices(
    client: &Client,
    original: &Module,
    compiled: &Compiled,
    options: &VerifyOptions,
) -> Result<Verification> {
    let n = compiled.report.num_partitions as usize;
    if client.devices().len() < n {
        return Err(CompileError::Settings(format!(
            "--verify needs {n} devices, the PJRT client has {}",
            client.devices().len()
        )));
    }
    if let Some(what) = harness::host_transfer(original) {
        return Err(CompileError::Settings(format!(
            "--verify cannot run this module: {what} transfers to or from the host, which the \
             verification does not serve (the execution would wait for it forever)"
        )));
    }
    // The plugin's XLA reads Shardy's shape custom-calls only in its Shardy pipeline: give
    // it what compile partitioned.
    let imported;
    let original = if crate::has_shardy_shape_calls(original) {
        let mut m = original.clone();
        crate::import_shardy(&mut m)?;
        imported = m;
        &imported
    } else {
        original
    };
    let mut inputs = harness::random_inputs(original, options.seed)?;
    harness::share_resource_inputs(original, &mut inputs)?;
    let manual = harness::manual_region(original);
    let programs = Programs {
        original,
        sharded: &compiled.sharded,
        module: &compiled.module,
    };
    let first = run_and_compare(client, &programs, n, &inputs, manual.is_some(), options)?;
    let (report, native) = match options.precision {
        VerifyPrecision::Native => (first, None),
        VerifyPrecision::F64 => {
            let (o, s, m) = (
                promote_f32_to_f64(original)?,
                promote_f32_to_f64(&compiled.sharded)?,
                promote_f32_to_f64(&compiled.module)?,
            );
            let wide = Programs {
                original: &o,
                sharded: &s,
                module: &m,
            };
            let inputs: Vec<HostValue> = inputs.iter().map(widen).collect();
            let options = VerifyOptions {
                float_tolerance: None,
                ..*options
            };
            let second = run_and_compare(client, &wide, n, &inputs, manual.is_some(), &options)?;
            (second, Some(first))
        }
    };
    Ok(Verification {
        reference: if manual.is_some() {
            VerifyReference::XlaPartitioned
        } else {
            VerifyReference::SingleDevice
        },
        why: manual,
        report,
        native,
    })
}

/// The three modules one verification runs: the original, the global module with every
/// sharding decided (how inputs split and outputs assemble), the per-device program.
struct Programs<'a> {
    original: &'a Module,
    sharded: &'a Module,
    module: &'a Module,
}

fn run_and_compare(
    client: &Client,
    p: &Programs,
    n: usize,
    inputs: &[HostValue],
    manual: bool,
    options: &VerifyOptions,
) -> Result<EquivalenceReport> {
    let expected: Vec<HostArray> = if !manual {
        harness::run_original(client, p.original, inputs)?
    } else {
        let mut outs = Vec::new();
        for (k, a) in harness::run_xla_partitioned(client, p.original, n, inputs)?
            .into_iter()
            .enumerate()
        {
            if let Some(mm) = a.mismatches.first() {
                return Err(CompileError::Runtime(
                    tessera_runtime::Error::InvalidArgument(format!(
                        "XLA's partitioning of the original gives disagreeing replicas of \
                         output {k}: {mm}"
                    )),
                ));
            }
            outs.push(array(a.value, k)?);
        }
        outs
    };
    let actual = harness::run_partitioned(client, p.sharded, p.module, n, inputs)?;
    if actual.len() != expected.len() {
        return Err(CompileError::Runtime(
            tessera_runtime::Error::InvalidArgument(format!(
                "the compiled program gives {} outputs, the original {}",
                actual.len(),
                expected.len()
            )),
        ));
    }
    let mut outputs = Vec::with_capacity(expected.len());
    for (k, (e, a)) in expected.iter().zip(actual).enumerate() {
        let got = array(a.value, k)?;
        let tolerance = match options.float_tolerance {
            Some(t) if e.ty.is_float() || e.ty.is_complex() => t,
            _ => Tolerance::for_type(e.ty),
        };
        let mut r = compare_arrays(k, e, &got, tolerance)?;
        r.replica_mismatches = a.mismatches;
        r.replica_mismatch_count = a.mismatch_count;
        outputs.push(r);
    }
    Ok(EquivalenceReport {
        num_devices: n,
        outputs,
    })
}

/// `m` with every `f32` (shapes of all instructions of all computations, constants, the entry
/// layout) made `f64`. Values are unchanged (f64 holds every f32 exactly); what the program
/// computes differs only in rounding. Refused where the bits of an `f32` are the meaning: a
/// `bitcast-convert` from or to one.
pub fn promote_f32_to_f64(m: &Module) -> Result<Module> {
    let mut out = m.clone();
    let ids: Vec<_> = out
        .computations()
        .iter()
        .flat_map(|&c| out.comp(c).instructions().to_vec())
        .collect();
    for id in ids {
        // Read the unpromoted module: an operand may have been promoted already.
        let i = m.instr(id);
        if i.opcode() == Opcode::BitcastConvert {
            let operand = m.instr(m.operands(id)[0]);
            if has_f32(&i.shape) || has_f32(&operand.shape) {
                return Err(CompileError::Settings(format!(
                    "--verify in f64: `{}` reinterprets the bits of an f32 ({} from {}); it \
                     has no f64 counterpart",
                    i.name(),
                    shape_to_string(&i.shape),
                    shape_to_string(&operand.shape)
                )));
            }
        }
        let i = out.instr_mut(id);
        promote_shape(&mut i.shape);
        if let Some(l) = i.attrs.literal.as_deref_mut() {
            promote_literal(l);
        }
    }
    if let Some(p) = out.config.entry_computation_layout.as_mut() {
        p.parameters.iter_mut().for_each(promote_shape);
        promote_shape(&mut p.result);
    }
    Ok(out)
}

fn has_f32(s: &Shape) -> bool {
    match s {
        Shape::Array(a) => a.ty == ElementType::F32,
        Shape::Tuple(e) => e.iter().any(has_f32),
        Shape::Buffer(b) => has_f32(b),
        Shape::Token | Shape::Opaque => false,
    }
}

fn promote_shape(s: &mut Shape) {
    match s {
        Shape::Array(a) if a.ty == ElementType::F32 => a.ty = ElementType::F64,
        Shape::Tuple(e) => e.iter_mut().for_each(promote_shape),
        Shape::Buffer(b) => promote_shape(b),
        _ => {}
    }
}

fn promote_literal(l: &mut Literal) {
    match &mut l.data {
        LiteralData::Array(bytes) if l.shape.as_array().map(|a| a.ty) == Some(ElementType::F32) => {
            *bytes = widen_bytes(bytes);
        }
        LiteralData::Tuple(e) => e.iter_mut().for_each(promote_literal),
        _ => {}
    }
    promote_shape(&mut l.shape);
}

fn widen_bytes(f32s: &[u8]) -> Vec<u8> {
    f32s.chunks_exact(4)
        .flat_map(|b| (f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).to_le_bytes())
        .collect()
}

/// An input of the promoted programs: every f32 array as the f64 of the same values.
fn widen(v: &HostValue) -> HostValue {
    match v {
        HostValue::Array(a) if a.ty == ElementType::F32 => HostValue::Array(HostArray {
            ty: ElementType::F64,
            dims: a.dims.clone(),
            data: widen_bytes(&a.data),
        }),
        HostValue::Array(a) => HostValue::Array(a.clone()),
        HostValue::Tuple(e) => HostValue::Tuple(e.iter().map(widen).collect()),
    }
}

fn array(v: HostValue, k: usize) -> Result<HostArray> {
    match v {
        HostValue::Array(a) => Ok(a),
        HostValue::Tuple(_) => Err(CompileError::Runtime(
            tessera_runtime::Error::InvalidArgument(format!("output {k} assembled into a tuple")),
        )),
    }
}
