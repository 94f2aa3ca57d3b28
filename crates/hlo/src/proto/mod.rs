//! `xla.HloModuleProto`: the binary form XLA and PJRT plugins take, both ways.
//!
//! [`module_to_proto`] / [`Module::to_proto`] write a module as XLA does: computations with
//! callees before callers, instructions with operands before users, ids
//! `(computation id << 32) | local index`, a `host_program_shape` with `parameter_names`.
//! [`module_from_proto`] reads any valid module proto (XLA's own included) and refuses malformed
//! ones with a [`ProtoError`] that names the instruction or place. The message types are in
//! [`messages`], written by hand with prost derives.
//!
//! `HloModuleProto` has no room for the settings of the text header that live in XLA's
//! `HloModuleConfig` (replica_count, num_partitions, use_spmd_partitioning, the
//! allow_spmd_sharding_propagation_* lists, alias_passthrough_params); the
//! [`module_to_proto_with_config`] form (`xla.HloModuleProtoWithConfig`) carries them too and
//! round-trips a module exactly. See docs/proto.md.

pub mod messages;

mod export;
mod import;
mod values;

use prost::Message;

use crate::module::Module;
pub use messages::{HloModuleProto, HloModuleProtoWithConfig};

/// Why a proto could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtoError {
    #[error("cannot decode the protobuf bytes: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("{place}: {message}")]
    Invalid { place: String, message: String },
}

/// Converts a module to `xla.HloModuleProto`.
pub fn module_to_proto(m: &Module) -> HloModuleProto {
    export::module_to_proto(m)
}

/// Reads a module from `xla.HloModuleProto`.
pub fn module_from_proto(p: &HloModuleProto) -> Result<Module, ProtoError> {
    import::module_from_proto(p)
}

/// The serialized `xla.HloModuleProto` of a module (what PJRT's `"hlo"` format takes).
pub fn to_proto_bytes(m: &Module) -> Vec<u8> {
    export::module_to_bytes(m)
}

/// Reads a module from serialized `xla.HloModuleProto` bytes.
pub fn from_proto_bytes(bytes: &[u8]) -> Result<Module, ProtoError> {
    module_from_proto(&HloModuleProto::decode(bytes)?)
}

/// Converts a module to `xla.HloModuleProtoWithConfig`, which also carries the header settings
/// `HloModuleProto` has no field for.
pub fn module_to_proto_with_config(m: &Module) -> HloModuleProtoWithConfig {
    let c = &m.config;
    HloModuleProtoWithConfig {
        hlo_module: Some(module_to_proto(m)),
        config: Some(messages::HloModuleConfigProto {
            entry_computation_layout: c
                .entry_computation_layout
                .as_ref()
                .map(|ps| export::program_shape_to_proto(ps, Vec::new())),
            replica_count: c.replica_count,
            num_partitions: c.num_partitions,
            use_spmd_partitioning: c.use_spmd_partitioning,
            alias_passthrough_params: c.alias_passthrough_params,
            allow_spmd_sharding_propagation_to_parameters: c
                .allow_spmd_sharding_propagation_to_parameters
                .clone()
                .unwrap_or_default(),
            allow_spmd_sharding_propagation_to_output: c
                .allow_spmd_sharding_propagation_to_output
                .clone()
                .unwrap_or_default(),
        }),
    }
}

/// Reads a module from `xla.HloModuleProtoWithConfig`.
pub fn module_from_proto_with_config(p: &HloModuleProtoWithConfig) -> Result<Module, ProtoError> {
    let mp = p.hlo_module.as_ref().ok_or_else(|| ProtoError::Invalid {
        place: "HloModuleProtoWithConfig".into(),
        message: "no hlo_module".into(),
    })?;
    let mut m = module_from_proto(mp)?;
    if let Some(c) = &p.config {
        let cfg = &mut m.config;
        cfg.entry_computation_layout = c
            .entry_computation_layout
            .as_ref()
            .map(import::program_shape_from_proto)
            .transpose()
            .map_err(|message| ProtoError::Invalid {
                place: "config.entry_computation_layout".into(),
                message,
            })?;
        cfg.replica_count = if c.replica_count == 0 {
            1
        } else {
            c.replica_count
        };
        cfg.num_partitions = if c.num_partitions == 0 {
            1
        } else {
            c.num_partitions
        };
        cfg.use_spmd_partitioning = c.use_spmd_partitioning;
        cfg.alias_passthrough_params = c.alias_passthrough_params;
        let opt = |v: &Vec<bool>| (!v.is_empty()).then(|| v.clone());
        cfg.allow_spmd_sharding_propagation_to_parameters =
            opt(&c.allow_spmd_sharding_propagation_to_parameters);
        cfg.allow_spmd_sharding_propagation_to_output =
            opt(&c.allow_spmd_sharding_propagation_to_output);
    }
    Ok(m)
}

/// Serialized `xla.HloModuleProtoWithConfig`.
pub fn to_proto_with_config_bytes(m: &Module) -> Vec<u8> {
    module_to_proto_with_config(m).encode_to_vec()
}

/// Reads serialized `xla.HloModuleProtoWithConfig` bytes.
pub fn from_proto_with_config_bytes(bytes: &[u8]) -> Result<Module, ProtoError> {
    module_from_proto_with_config(&HloModuleProtoWithConfig::decode(bytes)?)
}

impl Module {
    /// `xla.HloModuleProto` of this module; see [`module_to_proto`].
    pub fn to_proto(&self) -> HloModuleProto {
        module_to_proto(self)
    }

    /// Serialized `xla.HloModuleProto` of this module.
    pub fn to_proto_bytes(&self) -> Vec<u8> {
        to_proto_bytes(self)
    }
}

#[cfg(test)]
mod tests;
