//! Compile options: the few fields of `xla.CompileOptionsProto` this crate
//! sets, as prost messages written by hand (field numbers from
//! `xla/pjrt/proto/compile_options.proto` and `xla/xla_data.proto`), plus a
//! small builder, [`CompileOptions`], that checks its own consistency before
//! anything reaches the plugin.

use prost::Message;

use crate::error::{Error, Result};

/// `xla.DeviceAssignmentProto.ComputationDevice`: the device of every replica
/// for one computation (partition).
#[derive(Clone, PartialEq, Message)]
pub struct ComputationDeviceProto {
    #[prost(int64, repeated, tag = "1")]
    pub replica_device_ids: Vec<i64>,
}

/// `xla.DeviceAssignmentProto`.
#[derive(Clone, PartialEq, Message)]
pub struct DeviceAssignmentProto {
    #[prost(int32, tag = "1")]
    pub replica_count: i32,
    #[prost(int32, tag = "2")]
    pub computation_count: i32,
    #[prost(message, repeated, tag = "3")]
    pub computation_devices: Vec<ComputationDeviceProto>,
}

/// `xla.ExecutableBuildOptionsProto` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct ExecutableBuildOptionsProto {
    #[prost(int64, tag = "1")]
    pub device_ordinal: i64,
    #[prost(int64, tag = "4")]
    pub num_replicas: i64,
    #[prost(int64, tag = "5")]
    pub num_partitions: i64,
    #[prost(bool, tag = "6")]
    pub use_spmd_partitioning: bool,
    #[prost(bool, tag = "7")]
    pub use_auto_spmd_partitioning: bool,
    #[prost(bool, tag = "8")]
    pub deduplicate_hlo: bool,
    #[prost(message, optional, tag = "9")]
    pub device_assignment: Option<DeviceAssignmentProto>,
    #[prost(bool, tag = "10")]
    pub alias_passthrough_params: bool,
    #[prost(bool, tag = "19")]
    pub use_shardy_partitioner: bool,
}

/// `xla.OptionOverrideProto` (the string case of its `value` oneof).
#[derive(Clone, PartialEq, Message)]
pub struct OptionOverrideProto {
    #[prost(string, optional, tag = "1")]
    pub string_field: Option<String>,
}

/// `xla.CompileOptionsProto` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct CompileOptionsProto {
    #[prost(bool, tag = "2")]
    pub parameter_is_tupled_arguments: bool,
    #[prost(message, optional, tag = "3")]
    pub executable_build_options: Option<ExecutableBuildOptionsProto>,
    #[prost(bool, tag = "4")]
    pub compile_portable_executable: bool,
    /// `env_option_overrides`: `xla.DebugOptions` fields by name (what jax's
    /// `compiler_options` become). A `BTreeMap` so that the bytes are deterministic.
    #[prost(btree_map = "string, message", tag = "7")]
    pub env_option_overrides: std::collections::BTreeMap<String, OptionOverrideProto>,
}

/// Which device runs each (replica, partition) pair: `devices[replica][partition]`
/// holds a global device id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceAssignment {
    devices: Vec<Vec<i64>>,
}

impl DeviceAssignment {
    /// `devices[replica][partition]`; every row must have the same length and
    /// no device may appear twice.
    pub fn new(devices: Vec<Vec<i64>>) -> Result<Self> {
        let partitions = devices.first().map_or(0, Vec::len);
        if devices.is_empty() || partitions == 0 {
            return Err(Error::InvalidArgument(
                "device assignment needs at least one replica and one partition".into(),
            ));
        }
        if let Some((r, row)) = devices
            .iter()
            .enumerate()
            .find(|(_, row)| row.len() != partitions)
        {
            return Err(Error::InvalidArgument(format!(
                "device assignment replica {r} has {} partitions, replica 0 has {partitions}",
                row.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for &d in devices.iter().flatten() {
            if !seen.insert(d) {
                return Err(Error::InvalidArgument(format!(
                    "device {d} appears twice in the device assignment"
                )));
            }
        }
        Ok(Self { devices })
    }

    /// Replica r, partition p on device `first + r * partitions + p`.
    pub fn linear(replicas: usize, partitions: usize) -> Self {
        let devices = (0..replicas)
            .map(|r| {
                (0..partitions)
                    .map(|p| (r * partitions + p) as i64)
                    .collect()
            })
            .collect();
        Self { devices }
    }

    pub fn replicas(&self) -> usize {
        self.devices.len()
    }
    pub fn partitions(&self) -> usize {
        self.devices[0].len()
    }
    pub fn device(&self, replica: usize, partition: usize) -> i64 {
        self.devices[replica][partition]
    }

    pub fn to_proto(&self) -> DeviceAssignmentProto {
        DeviceAssignmentProto {
            replica_count: self.replicas() as i32,
            computation_count: self.partitions() as i32,
            computation_devices: (0..self.partitions())
                .map(|p| ComputationDeviceProto {
                    replica_device_ids: (0..self.replicas()).map(|r| self.device(r, p)).collect(),
                })
                .collect(),
        }
    }
}

/// What to compile for: replica and partition counts, SPMD or not, and an
/// optional fixed device assignment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub num_replicas: usize,
    pub num_partitions: usize,
    pub use_spmd_partitioning: bool,
    pub device_assignment: Option<DeviceAssignment>,
    /// `xla.DebugOptions` overrides by field name, as strings (e.g.
    /// `xla_disable_hlo_passes = "spmd-partitioning"`).
    pub debug_overrides: Vec<(String, String)>,
}

impl Default for CompileOptions {
    fn default() -> Self {
        Self {
            num_replicas: 1,
            num_partitions: 1,
            use_spmd_partitioning: false,
            device_assignment: None,
            debug_overrides: Vec::new(),
        }
    }
}

impl CompileOptions {
    /// One program per device, already partitioned by the caller (entry
    /// parameters and root carry MANUAL shardings): `num_partitions = n`, SPMD
    /// on, the only combination the plugin accepts for this (see ORACLE.md).
    pub fn partitioned(n: usize) -> Self {
        Self {
            num_replicas: 1,
            num_partitions: n,
            use_spmd_partitioning: n > 1,
            ..Self::default()
        }
    }

    /// `n` replicas of the same program, one partition each.
    pub fn replicated(n: usize) -> Self {
        Self {
            num_replicas: n,
            ..Self::default()
        }
    }

    /// Adds an `xla.DebugOptions` override (field name, value as text).
    pub fn with_debug_override(mut self, field: &str, value: &str) -> Self {
        self.debug_overrides
            .push((field.to_string(), value.to_string()));
        self
    }

    pub fn with_device_assignment(mut self, assignment: DeviceAssignment) -> Self {
        self.device_assignment = Some(assignment);
        self
    }

    /// Number of devices one execution runs on.
    pub fn num_devices(&self) -> usize {
        self.num_replicas * self.num_partitions
    }

    pub fn validate(&self) -> Result<()> {
        if self.num_replicas == 0 || self.num_partitions == 0 {
            return Err(Error::InvalidArgument(format!(
                "num_replicas ({}) and num_partitions ({}) must be at least 1",
                self.num_replicas, self.num_partitions
            )));
        }
        if let Some(da) = &self.device_assignment {
            if da.replicas() != self.num_replicas || da.partitions() != self.num_partitions {
                return Err(Error::InvalidArgument(format!(
                    "device assignment is {}x{} (replicas x partitions), options say {}x{}",
                    da.replicas(),
                    da.partitions(),
                    self.num_replicas,
                    self.num_partitions
                )));
            }
        }
        Ok(())
    }

    pub fn to_proto(&self) -> CompileOptionsProto {
        CompileOptionsProto {
            parameter_is_tupled_arguments: false,
            executable_build_options: Some(ExecutableBuildOptionsProto {
                device_ordinal: -1,
                num_replicas: self.num_replicas as i64,
                num_partitions: self.num_partitions as i64,
                use_spmd_partitioning: self.use_spmd_partitioning,
                device_assignment: self
                    .device_assignment
                    .as_ref()
                    .map(DeviceAssignment::to_proto),
                ..Default::default()
            }),
            compile_portable_executable: false,
            env_option_overrides: self
                .debug_overrides
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        OptionOverrideProto {
                            string_field: Some(v.clone()),
                        },
                    )
                })
                .collect(),
        }
    }

    /// The serialized `xla.CompileOptionsProto` handed to `PJRT_Client_Compile`.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        Ok(self.to_proto().encode_to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_overrides_go_to_env_option_overrides() {
        let o = CompileOptions::partitioned(4)
            .with_debug_override("xla_disable_hlo_passes", "spmd-partitioning");
        let p = CompileOptionsProto::decode(o.encode().unwrap().as_slice()).unwrap();
        let v = &p.env_option_overrides["xla_disable_hlo_passes"];
        assert_eq!(v.string_field.as_deref(), Some("spmd-partitioning"));
        let b = p.executable_build_options.unwrap();
        assert_eq!((b.num_partitions, b.use_spmd_partitioning), (4, true));
        // No overrides, no field.
        let plain = CompileOptions::partitioned(4).to_proto();
        assert!(plain.env_option_overrides.is_empty());
    }
}
