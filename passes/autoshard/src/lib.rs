//! Automatic sharding.
//!
//! [`iopddl`] reads and writes the problem format of the ASPLOS/EuroSys 2025 contest on
//! intra-operator parallelism (google/iopddl) and evaluates a solution by the contest's rules;
//! [`solver`] finds a low-cost feasible solution and a lower bound on the optimum; [`pass`] is
//! the `auto-sharding` pass, which builds such a problem from a module's entry computation
//! over a device [`mesh`], solves it and writes the shardings chosen.

pub mod iopddl;
pub mod mesh;
pub mod pass;
pub mod solver;

pub use iopddl::{evaluate, Evaluation, IopddlError, Problem};
pub use mesh::{DeviceMesh, MeshError};
pub use pass::{
    auto_shard, register, AutoShardError, AutoShardOptions, AutoShardReport, AutoSharding, Decision,
};
pub use solver::{solve, SolveOptions, SolveResult};
