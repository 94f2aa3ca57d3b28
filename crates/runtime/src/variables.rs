//! Device variables for a module: binding its parameters by resource identity.
//!
//! The execution layer keeps variables by resource fingerprint and device
//! ([`Runtime::init_variable`], [`Runtime::execute_bound`], [`PlanInput::Variable`]); this
//! module, which knows the IR, reads a module's `tessera.resource` attributes and
//! `tessera.argument_map` ([`tessera_hlo::resource`]) to say which parameter is which variable.
//!
//! Two ways to key the variables, as seed 000 does:
//! * [`VariableKeys::ByResource`]: one device variable per resource (deduplication: the key is
//!   the resource's fingerprint, `Fingerprint64(container + name)`);
//! * [`VariableKeys::PerArgument`]: one device variable per argument slot, as the seed does
//!   without deduplication (its per-argument name adds the argument index:
//!   `Fingerprint64(container + name + index)`).
//!
//! [`PlanInput::Variable`]: crate::PlanInput::Variable

use tessera_hlo::resource::{self, fingerprint64};
use tessera_hlo::Module;

use crate::error::{Error, Result};
use crate::host::{runtime_type, HostArray};
use crate::options::CompileOptions;
use crate::pjrt::Program;
use crate::runtime::{CompileRequest, Runtime, VariableBinding};
use crate::shape::ArrayShape;

/// How device variables are keyed (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VariableKeys {
    ByResource,
    PerArgument,
}

fn module_error(m: &Module, message: impl Into<String>) -> Error {
    Error::Module {
        module: m.name.clone(),
        message: message.into(),
    }
}

/// The variable key of each caller argument of `m` (`None`: a plain argument), and the
/// argument -> parameter map.
pub fn argument_keys(m: &Module, keys: VariableKeys) -> Result<(Vec<Option<u64>>, Vec<usize>)> {
    let err = |e: resource::ResourceError| module_error(m, e.to_string());
    let map = resource::arguments_to_parameters(m).map_err(err)?;
    let resources = resource::entry_resources(m).map_err(err)?;
    let keys = map
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            resources[p].as_ref().map(|r| match keys {
                VariableKeys::ByResource => r.fingerprint(),
                VariableKeys::PerArgument => {
                    fingerprint64(format!("{}{}{k}", r.container, r.name).as_bytes())
                }
            })
        })
        .collect();
    Ok((keys, map))
}

/// Binds `m`'s parameters to variables (see [`VariableBinding::through_map`]).
pub fn module_binding(m: &Module, keys: VariableKeys) -> Result<VariableBinding> {
    let (keys, map) = argument_keys(m, keys)?;
    VariableBinding::through_map(&keys, &map)
}

/// Initialises on each of `devices` every variable `m` reads, from the caller's arguments
/// (`values[k]` for argument `k`, whole arrays on every device); a variable already on a
/// device is left as it is. Returns the number of uploads made.
pub fn init_module_variables(
    rt: &Runtime,
    m: &Module,
    keys: VariableKeys,
    values: &[HostArray],
    devices: &[usize],
) -> Result<u64> {
    let (keys, map) = argument_keys(m, keys)?;
    if values.len() != map.len() {
        return Err(module_error(
            m,
            format!("takes {} arguments, got {} values", map.len(), values.len()),
        ));
    }
    let mut uploads = 0;
    for (k, key) in keys.iter().enumerate() {
        let Some(key) = *key else { continue };
        let v = &values[k];
        let ty = runtime_type(v.ty).ok_or_else(|| {
            Error::UnsupportedType(format!("argument {k} is {}: cannot be uploaded", v.ty))
        })?;
        let shape = ArrayShape::new(ty, v.dims.clone());
        for &d in devices {
            uploads += u64::from(rt.init_variable(key, d, &shape, &v.data)?);
        }
    }
    Ok(uploads)
}

/// A compile request for `m` on one device: shardings removed and default layouts
/// ([`crate::harness::prepare_original`]), and the module's top-level input/output aliases
/// moved into the request so that the runtime knows them (and donates through them).
pub fn compile_request(m: &Module) -> Result<CompileRequest> {
    let mut p = crate::harness::prepare_original(m)?;
    let mut pairs = Vec::new();
    for a in &p.config.input_output_alias {
        if !a.parameter_index.is_empty() || a.output_index.len() > 1 {
            return Err(module_error(
                m,
                "an alias of a tuple element inside a parameter or output is not supported",
            ));
        }
        pairs.push((
            a.output_index.first().copied().unwrap_or(0) as usize,
            a.parameter_number as usize,
        ));
    }
    p.config.input_output_alias.clear();
    let program = Program::HloProto(tessera_hlo::proto::to_proto_bytes(&p));
    Ok(CompileRequest::new(program, CompileOptions::default()).with_aliases(&pairs))
}
