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
    /// The bytes are not a protobuf message of the expected type; `at` is the byte offset of
    /// the first malformed top-level field when one is found, else prost's field path.
    #[error("cannot decode the protobuf bytes: {at}: {message}")]
    Decode { at: String, message: String },
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
    module_from_proto(&HloModuleProto::decode(bytes).map_err(|e| decode_error(bytes, e))?)
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
    module_from_proto_with_config(
        &HloModuleProtoWithConfig::decode(bytes).map_err(|e| decode_error(bytes, e))?,
    )
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

/// A [`ProtoError::Decode`] that says where: the first malformed top-level field of `bytes`
/// (prost does not report offsets), or prost's path to the field it failed in.
fn decode_error(bytes: &[u8], e: prost::DecodeError) -> ProtoError {
    match first_wire_error(bytes) {
        Some((offset, what)) => ProtoError::Decode {
            at: format!("byte {offset}"),
            message: what,
        },
        None => ProtoError::Decode {
            at: "in a nested message".into(),
            message: e.to_string(),
        },
    }
}

/// Walks the top-level fields of protobuf wire data; the offset of the first field that is
/// malformed (bad key, wire type, or a length past the end) and what is wrong with it.
fn first_wire_error(b: &[u8]) -> Option<(usize, String)> {
    fn varint(b: &[u8], p: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*p)?;
            *p += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    let mut p = 0;
    while p < b.len() {
        let start = p;
        let Some(key) = varint(b, &mut p) else {
            return Some((start, "a field key that is not a valid varint".into()));
        };
        if key >> 3 == 0 {
            return Some((start, "field number 0".into()));
        }
        let skip = match key & 7 {
            0 => varint(b, &mut p).map(|_| 0),
            1 => Some(8),
            2 => varint(b, &mut p),
            5 => Some(4),
            // Groups (3, 4): let prost judge them.
            3 | 4 => return None,
            w => return Some((start, format!("invalid wire type {w} (field {})", key >> 3))),
        };
        match skip
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| p.checked_add(n))
        {
            Some(end) if end <= b.len() => p = end,
            _ => {
                return Some((
                    start,
                    format!("field {} runs past the end of the data", key >> 3),
                ))
            }
        }
    }
    None
}
