//! Tessera's runtime: our own bindings to the PJRT C API and an execution
//! layer on top of them. See `docs/runtime.md`.
//!
//! * [`pjrt`]: safe wrappers (plugin, client, devices, compile, buffers,
//!   execute) over the hand-written declarations in [`ffi`].
//! * [`options`]: `xla.CompileOptionsProto` and a checked builder.

pub mod element;
pub mod error;
pub mod ffi;
pub mod options;
pub mod pjrt;
pub mod runtime;
pub mod shape;
pub mod signature;

pub use element::{Bf16, Complex, ElementType, NativeType, F16};
pub use error::{Error, ErrorCode, Result};
pub use options::{CompileOptions, DeviceAssignment};
pub use pjrt::{Buffer, Client, Device, ExecuteOptions, LoadedExecutable, Plugin, Program};
pub use runtime::{
    BufferHandle, CompileRequest, ExecutableHandle, ExecutableInfo, ExecuteConfig, MemoryStats,
    Plan, PlanInput, PlanStep, Runtime,
};
pub use shape::ArrayShape;
pub use signature::Alias;
