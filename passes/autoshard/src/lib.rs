//! Automatic sharding.
//!
//! [`iopddl`] reads and writes the problem format of the ASPLOS/EuroSys 2025 contest on
//! intra-operator parallelism (google/iopddl) and evaluates a solution by the contest's rules;
//! [`solver`] finds a low-cost feasible solution and a lower bound on the optimum.

pub mod iopddl;
pub mod solver;

pub use iopddl::{evaluate, Evaluation, IopddlError, Problem};
pub use solver::{solve, SolveOptions, SolveResult};
