//! Tessera's runtime: our own bindings to the PJRT C API and an execution
//! layer on top of them. See `docs/runtime.md`.
//!
//! * [`pjrt`]: safe wrappers (plugin, client, devices, compile, buffers,
//!   execute) over the hand-written declarations in [`ffi`].
//! * [`options`]: `xla.CompileOptionsProto` and a checked builder.
//! * [`signature`]: entry parameter shapes read from programs, and aliases
//!   written into them.
//! * [`runtime`]: the execution layer — [`Runtime`] with a compilation
//!   cache, a handle-based buffer store, execution with aliasing, chained
//!   plans and a memory manager.
//!
//! The plugin is found through `$TESSERA_PJRT_PLUGIN`, else in the
//! workspace's `.deps/pjrt` (installed by `scripts/install-pjrt.sh`).
//!
//! ```
//! use tessera_runtime::{Client, CompileOptions, CompileRequest, ExecuteConfig, Program, Runtime};
//!
//! let rt = Runtime::new(Client::cpu(1)?);
//! let add = Program::mlir(
//!     "func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
//!        %0 = stablehlo.add %a, %b : tensor<2xf32>
//!        return %0 : tensor<2xf32>
//!      }",
//! );
//! // Output 0 reuses parameter 0's buffer when the caller releases it.
//! let exe = rt.compile(&CompileRequest::new(add, CompileOptions::default()).with_aliases(&[(0, 0)]))?;
//! let a = rt.upload(0, &[1f32, 2.0], &[2])?;
//! let b = rt.upload(0, &[10f32, 20.0], &[2])?;
//! let config = ExecuteConfig { release_inputs: true, explode_tuple: true, ..Default::default() };
//! let out = rt.execute(exe, &[vec![a, b]], config)?;
//! assert_eq!(rt.download::<f32>(out[0][0])?, vec![11.0, 22.0]);
//! assert!(!rt.is_live(a)); // donated
//! # Ok::<(), tessera_runtime::Error>(())
//! ```

pub mod element;
pub mod error;
pub mod ffi;
pub mod harness;
pub mod host;
pub mod npy;
pub mod npz;
pub mod options;
pub mod pjrt;
pub mod runtime;
pub mod shape;
pub mod sharded;
pub mod signature;
pub mod variables;
pub mod verdict;

pub use element::{Bf16, Complex, ElementType, NativeType, F16};
pub use error::{Error, ErrorCode, Result};
pub use harness::{
    check_equivalence, CompareOptions, EquivalenceReport, OutputReport, Precision, Reference,
    Tolerance,
};
pub use host::{HostArray, HostValue, Scalar};
pub use options::{CompileOptions, DeviceAssignment};
pub use pjrt::{
    Buffer, Client, ClientOption, Device, ExecuteOptions, LoadedExecutable, Plugin, Program,
};
pub use runtime::{
    BufferHandle, CompileRequest, ExecutableHandle, ExecutableInfo, ExecuteConfig, MemoryStats,
    ParamSource, Plan, PlanInput, PlanStep, Runtime, VariableBinding,
};
pub use shape::ArrayShape;
pub use sharded::{assemble, shard_shape, split, Assembled, ReplicaMismatch, ShardError};
pub use signature::Alias;
pub use verdict::Outcome;
