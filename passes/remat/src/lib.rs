//! Memory schedulers and rematerialization under a memory limit.
//!
//! - [`schedule`]: the post-order, DFS, list and best-of-all schedulers, the `schedule` and
//!   `print-memory` passes.
//! - [`schedule_memory`]: peak memory along a schedule, as XLA's rematerialization counts it.
//! - [`schedule_svg`]: an SVG of memory over schedule positions.
//! - [`cost`]: recompute flops of instructions and modules.
//! - [`floor`]: the bytes no rematerialization can bring a module's peak below.
//! - [`gen`]: generated module families (chains, ladders, random DAGs) for evaluation.
//! - [`optimal`]: the fewest recomputations under a limit, found exhaustively (small graphs).
//! - [`remat::Rematerialization`] (`rematerialization`, options prefix `remat.`): see
//!   docs/rematerialization.md.

pub mod cost;
pub mod floor;
pub mod gen;
pub mod optimal;
pub mod remat;
pub mod schedule;
pub mod schedule_memory;
pub mod schedule_svg;

pub use floor::{remat_floor, RematFloor};
pub use remat::{
    OverLimit, RematMode, RematOptions, RematSummary, RematTry, Rematerialization, SearchKind,
};
pub use schedule::{
    compute_schedule, schedule_computation, schedule_module, ComputationSchedule, PrintMemory,
    ScheduleError, SchedulePass, ScheduleReport, SchedulerKind, SizeFn,
};
pub use schedule_memory::{
    computation_memory, module_memory, peak_memory, CalleeAccounting, ComputationMemory,
    MemoryOptions, ModuleMemory, TrackedBuffer,
};

use tessera_pass::registry::RegisteredPass;
use tessera_pass::Registry;

/// Registers this crate's passes (`rematerialization` is also reachable as `remat`).
pub fn register(r: &mut Registry) {
    r.add::<SchedulePass>()
        .add::<PrintMemory>()
        .add::<Rematerialization>();
    r.add_alias("remat", <Rematerialization as RegisteredPass>::NAME);
}
