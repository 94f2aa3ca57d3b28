//! `--verify`: the original and the compiled program run on PJRT devices with the same random
//! inputs, every output judged by the runtime's one comparison ([`harness::verify`]: the
//! reference chosen automatically, the verdict decided in f64, docs/runtime.md).

use tessera_hlo::Module;
use tessera_runtime::harness::{self, Candidate, CompareOptions};
use tessera_runtime::{Client, EquivalenceReport};

use crate::{CompileError, Compiled, Result};

/// How [`verify_on_devices`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VerifyOptions {
    /// Seed of the random inputs.
    pub seed: u64,
    /// Reference, precision and tolerance: as `tessera compare` takes them.
    pub compare: CompareOptions,
}

/// The outcome of [`verify_on_devices`]: the runtime's report, which says what was compared
/// with what and why.
pub type Verification = EquivalenceReport;

/// Runs `original` (the module given to [`crate::compile`]) and `compiled.module` on
/// `client`'s devices with the same random inputs and judges every output
/// ([`harness::verify`]). Parameters of one `tessera.resource` get one value, as one variable
/// feeds them.
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
    let original = crate::runnable_form(original)?;
    let original = original.as_ref();
    harness::check_host_memory(original, n, true)?;
    let mut inputs = harness::random_inputs(original, options.seed)?;
    harness::share_resource_inputs(original, &mut inputs)?;
    let candidate = Candidate::PerDevice {
        layout: &compiled.sharded,
        program: &compiled.module,
    };
    Ok(harness::verify(
        client,
        original,
        candidate,
        n,
        &inputs,
        options.compare,
    )?)
}
