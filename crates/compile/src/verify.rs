//! `--verify`: the original and the compiled program run on PJRT devices with the same random
//! inputs, every output compared.

use std::fmt;

use tessera_hlo::Module;
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

/// How [`verify_on_devices`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VerifyOptions {
    /// Seed of the random inputs.
    pub seed: u64,
    /// Replaces the per-type default tolerance of floating-point outputs (a partitioned
    /// program sums in another order; a recurrence can amplify that beyond the default).
    pub float_tolerance: Option<Tolerance>,
}

/// The outcome of [`verify_on_devices`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verification {
    pub reference: VerifyReference,
    /// Why XLA's partitioning is the reference, when it is.
    pub why: Option<String>,
    pub report: EquivalenceReport,
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
    let expected: Vec<HostArray> = match &manual {
        None => harness::run_original(client, original, &inputs)?,
        Some(_) => {
            let mut outs = Vec::new();
            for (k, a) in harness::run_xla_partitioned(client, original, n, &inputs)?
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
        }
    };
    let actual = harness::run_partitioned(client, &compiled.sharded, &compiled.module, n, &inputs)?;
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
    Ok(Verification {
        reference: if manual.is_some() {
            VerifyReference::XlaPartitioned
        } else {
            VerifyReference::SingleDevice
        },
        why: manual,
        report: EquivalenceReport {
            num_devices: n,
            outputs,
        },
    })
}

fn array(v: HostValue, k: usize) -> Result<HostArray> {
    match v {
        HostValue::Array(a) => Ok(a),
        HostValue::Tuple(_) => Err(CompileError::Runtime(
            tessera_runtime::Error::InvalidArgument(format!("output {k} assembled into a tuple")),
        )),
    }
}
