//! The `rematerialization` pass: under a memory limit, walk each computation's schedule,
//! tracking live bytes, and wherever the limit is exceeded, recompute (or compress) earlier
//! values later instead of keeping them live. After XLA's `HloRematerialization` (seed 003);
//! see docs/rematerialization.md.

pub mod escalate;
pub mod list;
pub mod search;
pub mod split;
pub mod tracker;

use std::collections::HashSet;
use std::fmt::Write;

use tessera_hlo::analysis::call_graph::instruction_call_context;
use tessera_hlo::analysis::{
    computation_post_order, post_order, shape_size, CallContext, CallGraph, TuplePointsTo,
};
use tessera_hlo::{Attrs, Builder, CompId, InstrId, Instruction, Module, Opcode, Shape};
use tessera_pass::options::{parse_bool, parse_int, unknown_key};
use tessera_pass::passes::Dce;
use tessera_pass::registry::RegisteredPass;
use tessera_pass::util::{sort_computations_callees_first, SideEffects};
use tessera_pass::{OptionDoc, Pass, PassError, PassOptions};

pub use escalate::RematTry;
use list::{EarliestUsers, InstructionList, ItemId, NIL};
use search::{
    pick_faithful, remat_cost, CompressIndex, FastQueue, Pick, RematerializableCache, Strategy,
};
use tracker::{is_supported_indirect_user, Tracker};

/// Errors of the pass; each names the computation or instruction at fault.
#[derive(Debug, thiserror::Error)]
pub enum RematError {
    #[error("malformed module: {0}")]
    Malformed(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Mutation(#[from] tessera_hlo::MutationError),
    #[error(transparent)]
    Build(#[from] tessera_hlo::BuildError),
}

impl From<RematError> for PassError {
    fn from(e: RematError) -> PassError {
        match e {
            RematError::Mutation(m) => PassError::Mutation(m),
            RematError::Build(b) => PassError::Build(b),
            other => PassError::Failed(other.to_string()),
        }
    }
}

/// What a rematerialization may do to a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RematMode {
    /// Recompute the value later.
    Recompute,
    /// Copy it to a compact layout and back before its next use.
    Compress,
    /// Both; the cheaper one wins.
    RecomputeAndCompress,
}

/// The default [`RematOptions::faithful_effort_limit`]: 20 million candidates, a few seconds
/// of scanning (release build) before the fast search takes over.
pub const DEFAULT_FAITHFUL_EFFORT_LIMIT: i64 = 20_000_000;

/// How candidates are found, and whether the pass escalates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchKind {
    /// The fast search, escalating (larger blocks, other schedules, reschedule rounds) until
    /// the limit is met; among the results of the first level that meets it, the fewest
    /// recompute flops (see escalate.rs).
    Auto,
    /// A priority queue of single-item candidates (same choices as the scan, see search.rs);
    /// blocks of several items and compression fall back to the scan.
    Fast,
    /// The seed's scan over the express lane at every step.
    Faithful,
}

/// Buffer size functions selectable by name (programs can pass any function with
/// [`Rematerialization::with_size_function`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeFunction {
    /// XLA's `ByteSizeOf` with 8-byte pointers ([`shape_size`]).
    Default,
    /// XLA's compression tests: the most minor dimension padded to 64 elements, tuples 4 bytes.
    PadMinorTo64,
}

/// Compact-shape functions selectable by name (programs can pass any function with
/// [`Rematerialization::with_compact_shape_function`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactShape {
    /// The shape itself (nothing to gain by compressing).
    Identity,
    /// XLA's compression tests: for rank-2 arrays, swap the two most minor layout dimensions
    /// when the most minor one is the smaller.
    SwapMinor,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RematOptions {
    /// Bytes the module may use at its peak, outputs included; `None`: no limit, no change.
    pub memory_limit: Option<i64>,
    /// Only items allocating at least this many bytes start candidate blocks.
    pub min_remat_size: i64,
    /// Largest block of consecutive instructions rematerialized together.
    pub block_size_limit: usize,
    /// The effort spent on blocks of two or more is at most this times the effort spent on
    /// single instructions at the same program point.
    pub block_rematerialization_factor: i64,
    pub mode: RematMode,
    pub search: SearchKind,
    /// With `search: Faithful`, the candidates the scan may evaluate in one run (summed over
    /// every computation); past it, the walk goes on with the fast search (which makes the
    /// scan's choices at a cost that does not grow with the express lane), so a module can
    /// no longer make the quadratic scan run unbounded. `None`: no cap.
    pub faithful_effort_limit: Option<i64>,
    pub size_function: SizeFunction,
    pub compact_shape: CompactShape,
    /// Report the summary as remarks (printed after the module by `tessera opt`).
    pub print_summary: bool,
    /// Check the tracker's and the list's invariants after every change (slow).
    pub check_invariants: bool,
    /// Keep the originals whose every use moved to a clone, and skip the DCE after the pass,
    /// so the schedule is the pass's walk (every program point it measured). For evaluation.
    pub keep_dead_originals: bool,
    /// Never raise the peak: in the compressing modes, refuse a compression whose compact copy
    /// (placed right after the original, as XLA places it) would bring a program point already
    /// walked up to the bytes it relieves at the current one; and when the result's measured
    /// peak is still above the input's, return the input unchanged (`reverted` in the summary;
    /// not with `keep_dead_originals`). `false` is XLA's behaviour.
    pub peak_guard: bool,
}

impl Default for RematOptions {
    fn default() -> Self {
        RematOptions {
            memory_limit: None,
            min_remat_size: 0,
            block_size_limit: 1,
            block_rematerialization_factor: 1,
            mode: RematMode::Recompute,
            search: SearchKind::Auto,
            faithful_effort_limit: Some(DEFAULT_FAITHFUL_EFFORT_LIMIT),
            size_function: SizeFunction::Default,
            compact_shape: CompactShape::Identity,
            print_summary: false,
            check_invariants: false,
            keep_dead_originals: false,
            peak_guard: true,
        }
    }
}

impl PassOptions for RematOptions {
    const DOCS: &'static [OptionDoc] = &[
        OptionDoc {
            key: "memory_limit",
            default: "none",
            doc: "peak bytes allowed, outputs included (K/M/G suffixes)",
        },
        OptionDoc {
            key: "min_remat_size",
            default: "0",
            doc: "smallest allocation (bytes) that starts a candidate",
        },
        OptionDoc {
            key: "block_size_limit",
            default: "1",
            doc: "largest block of consecutive instructions rematerialized together",
        },
        OptionDoc {
            key: "block_rematerialization_factor",
            default: "1",
            doc: "effort on blocks at most this times the effort on single instructions",
        },
        OptionDoc {
            key: "mode",
            default: "recompute",
            doc: "recompute | compress | recompute-and-compress",
        },
        OptionDoc {
            key: "search",
            default: "auto",
            doc: "auto (fast, escalating until the limit is met) | fast (one run, priority queue) | faithful (one run, the seed's scan: XLA)",
        },
        OptionDoc {
            key: "faithful_effort_limit",
            default: "20000000",
            doc: "candidates the faithful scan may evaluate before the fast search takes over (none: no cap)",
        },
        OptionDoc {
            key: "size_function",
            default: "default",
            doc: "default (ByteSizeOf) | pad-minor-64 (XLA's compression tests)",
        },
        OptionDoc {
            key: "compact_shape",
            default: "identity",
            doc: "identity | swap-minor (XLA's compression tests)",
        },
        OptionDoc {
            key: "print_summary",
            default: "false",
            doc: "report peaks and counts after the module",
        },
        OptionDoc {
            key: "check_invariants",
            default: "false",
            doc: "check the tracker after every change (slow)",
        },
        OptionDoc {
            key: "keep_dead_originals",
            default: "false",
            doc: "keep originals left without uses and skip DCE (the schedule is the pass's walk)",
        },
        OptionDoc {
            key: "peak_guard",
            default: "true",
            doc: "never raise the peak: refuse such compressions, return the input if the result peaks higher (false: XLA)",
        },
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let nonneg = |v: &str| {
            parse_int(v).and_then(|n| {
                if n < 0 {
                    Err(format!("expected a non-negative integer, found `{v}`"))
                } else {
                    Ok(n)
                }
            })
        };
        match key {
            "memory_limit" => {
                self.memory_limit = match value {
                    "none" => None,
                    v => Some(nonneg(v)?),
                }
            }
            "min_remat_size" => self.min_remat_size = nonneg(value)?,
            "block_size_limit" => {
                let n = nonneg(value)?;
                if n == 0 {
                    return Err("expected a positive integer, found `0`".into());
                }
                self.block_size_limit = n as usize;
            }
            "block_rematerialization_factor" => {
                self.block_rematerialization_factor = nonneg(value)?
            }
            "mode" => {
                self.mode = match value {
                    "recompute" => RematMode::Recompute,
                    "compress" => RematMode::Compress,
                    "recompute-and-compress" => RematMode::RecomputeAndCompress,
                    _ => {
                        return Err(format!(
                        "expected recompute, compress or recompute-and-compress, found `{value}`"
                    ))
                    }
                }
            }
            "search" => {
                self.search = match value {
                    "auto" => SearchKind::Auto,
                    "fast" => SearchKind::Fast,
                    "faithful" => SearchKind::Faithful,
                    _ => return Err(format!("expected auto, fast or faithful, found `{value}`")),
                }
            }
            "faithful_effort_limit" => {
                self.faithful_effort_limit = match value {
                    "none" => None,
                    v => Some(nonneg(v)?),
                }
            }
            "size_function" => {
                self.size_function = match value {
                    "default" => SizeFunction::Default,
                    "pad-minor-64" => SizeFunction::PadMinorTo64,
                    _ => return Err(format!("expected default or pad-minor-64, found `{value}`")),
                }
            }
            "compact_shape" => {
                self.compact_shape = match value {
                    "identity" => CompactShape::Identity,
                    "swap-minor" => CompactShape::SwapMinor,
                    _ => return Err(format!("expected identity or swap-minor, found `{value}`")),
                }
            }
            "print_summary" => self.print_summary = parse_bool(value)?,
            "check_invariants" => self.check_invariants = parse_bool(value)?,
            "keep_dead_originals" => self.keep_dead_originals = parse_bool(value)?,
            "peak_guard" => self.peak_guard = parse_bool(value)?,
            _ => return Err(unknown_key(key, Self::DOCS)),
        }
        Ok(())
    }
}

/// A place where memory use stays over the limit after rematerialization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverLimit {
    pub computation: String,
    /// The program point with the most bytes in use.
    pub instruction: String,
    /// Bytes in use there (callees' peaks included), against the computation's own limit.
    pub bytes: i64,
    pub limit: i64,
}

/// What the last run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RematSummary {
    /// The limit asked for (`None`: unlimited).
    pub memory_limit: Option<i64>,
    /// Peak bytes of the module along its schedule before and after (outputs included).
    pub peak_before: i64,
    pub peak_after: i64,
    /// Clones made (recomputations and compressions count one each).
    pub instructions_rematerialized: i64,
    /// Instructions added minus originals left dead (before DCE removes them).
    pub net_instructions_added: i64,
    /// Instructions in the module before and after (after DCE).
    pub instructions_before: usize,
    pub instructions_after: usize,
    pub limit_met: bool,
    /// Where the limit could not be met.
    pub over_limit: Vec<OverLimit>,
    /// Computations the pass worked on.
    pub computations: Vec<String>,
    /// Candidates the seed's scan evaluates (the fast search reports what the scan would have
    /// evaluated, so the block phase's budget is the same).
    pub effort: i64,
    /// Entries the fast search popped from its queue.
    pub queue_pops: i64,
    /// Candidates the faithful scan itself evaluated (0 with the fast search).
    pub scan_effort: i64,
    /// True if the faithful scan reached `faithful_effort_limit` and the fast search made
    /// the remaining choices.
    pub search_degraded: bool,
    /// The largest block rematerialized at once.
    pub max_block_size: usize,
    /// True if the module had no schedule and the pass used post-order.
    pub scheduled_post_order: bool,
    /// `peak_guard`: the peak the rewritten module measured, when it was above the input's and
    /// the input was returned unchanged instead (the other fields then describe the input).
    pub reverted: Option<i64>,
    /// Flops the result computes beyond the input's (`crate::cost`; 0 when nothing was
    /// recomputed; a move costs nothing).
    pub recompute_flops: i64,
    /// With a limit: the floor along the input's schedule (`RematFloor::bytes`; in the
    /// compressing modes `any_schedule`).
    pub floor: Option<i64>,
    /// With a limit: the floor of any schedule (`RematFloor::any_schedule`).
    pub floor_any_schedule: Option<i64>,
    /// With a limit: the lowest floor along the schedules the escalation tried.
    pub floor_lowest: Option<i64>,
    /// The input schedule's floor: where and what makes it.
    pub floor_described: Option<String>,
    /// `search=auto`: every try, in order.
    pub tries: Vec<RematTry>,
}

impl RematSummary {
    /// When the limit is missed: why, by the floors. `None` when it is met (or unknown).
    pub fn verdict(&self) -> Option<String> {
        let limit = self.memory_limit?;
        if self.limit_met {
            return None;
        }
        let any = self.floor_any_schedule?;
        let along = self.floor_lowest.or(self.floor)?;
        Some(if limit < any {
            format!(
                "below the floor: no rematerialization of any schedule can reach {limit} bytes; \
                 the floor is {any} bytes, {} above the limit",
                any - limit
            )
        } else if limit < along {
            format!(
                "below the floor of every schedule tried: the lowest is {along} bytes, {} above \
                 the limit (the floor of any schedule, {any} bytes, is not above it)",
                along - limit
            )
        } else {
            format!(
                "BUG: the limit {limit} is at or above the floor ({along} bytes along the schedule, \
                 {any} for any), yet the pass stopped at {} bytes; please report it with the module",
                self.peak_after
            )
        })
    }

    /// The report `print_summary` shows.
    pub fn report(&self) -> String {
        let mut s = String::new();
        match self.memory_limit {
            Some(l) => {
                let _ = writeln!(s, "memory limit: {l} bytes");
            }
            None => {
                let _ = writeln!(s, "memory limit: none");
            }
        }
        let _ = writeln!(s, "peak before: {} bytes", self.peak_before);
        let _ = writeln!(s, "peak after: {} bytes", self.peak_after);
        let _ = writeln!(
            s,
            "rematerialized: {} instructions, net added: {}",
            self.instructions_rematerialized, self.net_instructions_added
        );
        let _ = writeln!(
            s,
            "instructions: {} before, {} after",
            self.instructions_before, self.instructions_after
        );
        let _ = writeln!(
            s,
            "limit met: {}",
            if self.limit_met { "yes" } else { "no" }
        );
        if self.search_degraded {
            let _ = writeln!(
                s,
                "search: the faithful scan reached its effort limit after {} candidates; the fast search made the remaining choices",
                self.scan_effort
            );
        }
        if let Some(p) = self.reverted {
            let _ = writeln!(
                s,
                "reverted: the rewritten module peaked at {p} bytes, above the input's"
            );
        }
        for o in &self.over_limit {
            let _ = writeln!(
                s,
                "over the limit in {} at %{}: {} bytes (limit {})",
                o.computation, o.instruction, o.bytes, o.limit
            );
        }
        if self.memory_limit.is_some() {
            let _ = writeln!(s, "recompute flops: {}", self.recompute_flops);
        }
        if let Some(d) = &self.floor_described {
            let _ = writeln!(s, "floor: {d}");
        }
        if let Some(v) = self.verdict() {
            let _ = writeln!(s, "{v}");
        }
        for t in &self.tries {
            let _ = writeln!(s, "try: {}", t.describe());
        }
        s
    }
}

/// The pass. Options in [`RematOptions`]; the last run's [`RematSummary`] in `summary`.
pub struct Rematerialization {
    pub options: RematOptions,
    pub summary: Option<RematSummary>,
    /// Set while the escalation runs its tries (no warning per try).
    quiet: bool,
    size_fn: Box<dyn Fn(&Shape) -> i64>,
    compact_fn: Box<dyn Fn(&Shape) -> Shape>,
}

impl std::fmt::Debug for Rematerialization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rematerialization")
            .field("options", &self.options)
            .field("summary", &self.summary)
            .finish()
    }
}

/// XLA's compression-test size function: most minor dimension padded to 64, tuples 4 bytes.
pub fn size_pad_minor_to_64(shape: &Shape) -> i64 {
    match shape {
        Shape::Tuple(_) => 4,
        Shape::Array(a) => {
            let bytes = (a.ty.bit_width() as i64 + 7) / 8;
            let minor = a
                .layout
                .as_ref()
                .and_then(|l| l.minor_to_major.first().copied())
                .unwrap_or(a.dims.len() as i64 - 1);
            let mut size = bytes;
            for (d, &n) in a.dims.iter().enumerate() {
                let n = if d as i64 == minor {
                    (n + 63) / 64 * 64
                } else {
                    n
                };
                size *= n;
            }
            size
        }
        other => shape_size(other),
    }
}

/// XLA's compression-test compact shape: for rank 2, put the larger dimension most minor.
pub fn compact_swap_minor(shape: &Shape) -> Shape {
    let mut out = shape.clone();
    if let Some(a) = out.as_array_mut() {
        if a.dims.len() == 2 {
            let layout = a
                .layout
                .get_or_insert_with(|| tessera_hlo::Layout::descending(2));
            let (m0, m1) = (layout.minor_to_major[0], layout.minor_to_major[1]);
            if a.dims[m0 as usize] < a.dims[m1 as usize] {
                layout.minor_to_major[0] = m1;
                layout.minor_to_major[1] = m0;
            }
        }
    }
    out
}

impl Rematerialization {
    pub fn new(options: RematOptions) -> Rematerialization {
        let size_fn: Box<dyn Fn(&Shape) -> i64> = match options.size_function {
            SizeFunction::Default => Box::new(shape_size),
            SizeFunction::PadMinorTo64 => Box::new(size_pad_minor_to_64),
        };
        let compact_fn: Box<dyn Fn(&Shape) -> Shape> = match options.compact_shape {
            CompactShape::Identity => Box::new(|s: &Shape| s.clone()),
            CompactShape::SwapMinor => Box::new(compact_swap_minor),
        };
        Rematerialization {
            options,
            summary: None,
            quiet: false,
            size_fn,
            compact_fn,
        }
    }

    /// Uses `f` for buffer sizes instead of the named function.
    pub fn with_size_function(mut self, f: impl Fn(&Shape) -> i64 + 'static) -> Self {
        self.size_fn = Box::new(f);
        self
    }

    /// Uses `f` as the compact-shape function of the compressing modes.
    pub fn with_compact_shape_function(mut self, f: impl Fn(&Shape) -> Shape + 'static) -> Self {
        self.compact_fn = Box::new(f);
        self
    }

    /// Runs the pass and returns what it did.
    pub fn run_with_summary(&mut self, module: &mut Module) -> Result<RematSummary, PassError> {
        self.run(module)?;
        Ok(self.summary.clone().unwrap_or_default())
    }

    fn run_inner(&mut self, module: &mut Module) -> Result<(bool, RematSummary), RematError> {
        let mut summary = RematSummary {
            memory_limit: self.options.memory_limit,
            instructions_before: module.instruction_count(),
            ..RematSummary::default()
        };
        let entry = module
            .entry()
            .ok_or_else(|| RematError::Malformed("the module has no entry computation".into()))?;
        if module.schedule.is_none() {
            module.schedule = Some(post_order_schedule(module));
            summary.scheduled_post_order = true;
        }
        let points_to = TuplePointsTo::new(module);
        let call_graph = CallGraph::new(module);
        let next_channel_id = module.next_channel_id();
        let root = module
            .comp(entry)
            .root()
            .ok_or_else(|| RematError::Malformed("the entry computation has no root".into()))?;
        let mut output_size = 0;
        module
            .instr(root)
            .shape
            .for_each_subshape(|_, s| output_size += (self.size_fn)(s));
        let mut st = State {
            opts: &self.options,
            size_fn: &*self.size_fn,
            compact_fn: &*self.compact_fn,
            points_to: &points_to,
            peak: vec![None; module.comp_capacity()],
            done: HashSet::new(),
            next_channel_id,
            remat_count: 0,
            net_added: 0,
            effort: 0,
            scan_effort: 0,
            degraded: false,
            queue_pops: 0,
            max_block: 0,
            over_limit: Vec::new(),
            computations: Vec::new(),
            cloned_fusions: false,
            trackers: Vec::new(),
            finished: Vec::new(),
        };
        for c in computation_post_order(module, false) {
            if matches!(
                call_graph.context(c),
                CallContext::ControlFlow | CallContext::Both
            ) {
                let p = st.compute_peak_memory(module, c)?;
                st.peak[c.index()] = Some(p);
            }
        }
        let before = st.peak[entry.index()].unwrap_or(0) + output_size;
        summary.peak_before = before;
        let mut changed = false;
        // peak_guard: the input, returned if the result peaks higher (which needs a limit
        // below the peak: otherwise nothing is rematerialized).
        let original = (self.options.peak_guard
            && self.options.memory_limit.is_some_and(|l| l < before)
            && !self.options.keep_dead_originals)
            .then(|| module.clone());
        if let Some(limit) = self.options.memory_limit {
            changed = st.rematerialize_computation(module, entry, limit - output_size)?;
            if st.cloned_fusions {
                // Cloned fusion computations go before their callers, as XLA prints them.
                sort_computations_callees_first(module);
            }
            // Rematerialization leaves originals whose uses all moved to clones dead: sweep them
            // in one pass per computation, then let DCE do the rest (dead computations).
            if !self.options.keep_dead_originals {
                let done: Vec<CompId> = st.done.iter().copied().collect();
                changed |= sweep_dead(module, &done)?;
                let mut dce = Dce::with_options(Default::default());
                changed |= dce.run(module).map_err(|e| {
                    RematError::Internal(format!("dce after rematerialization: {e}"))
                })?;
            }
        }
        // The walk's running maximum misses buffers that clones revived at the points before
        // the clone; measure the result (the walk, or the module without its dead originals).
        st.measure_results(module);
        let mut after = st.peak[entry.index()].unwrap_or(0) + output_size;
        if let Some(original) = original.filter(|_| after > before) {
            // A greedy step judged at one point can cost more at others (a clone's operand
            // revived over earlier points, a moved value live beside ones defined after its
            // original): keep the input rather than a module that needs more memory.
            *module = original;
            summary.reverted = Some(after);
            after = before;
            changed = false;
            st.remat_count = 0;
            st.net_added = 0;
            st.over_limit = entry_over_limit(
                module,
                entry,
                &*self.size_fn,
                self.options.memory_limit,
                output_size,
            );
        }
        summary.peak_after = after;
        summary.instructions_rematerialized = st.remat_count;
        summary.net_instructions_added = st.net_added;
        summary.effort = st.effort;
        summary.queue_pops = st.queue_pops;
        summary.scan_effort = st.scan_effort;
        summary.search_degraded = st.degraded;
        summary.max_block_size = st.max_block;
        summary.computations = st.computations.clone();
        summary.limit_met = self.options.memory_limit.is_none_or(|l| after <= l);
        summary.over_limit = if summary.limit_met {
            Vec::new()
        } else {
            st.over_limit.clone()
        };
        summary.instructions_after = module.instruction_count();
        Ok((changed || summary.scheduled_post_order, summary))
    }
}

impl Rematerialization {
    /// The run as `Pass::run` does it: escalating with `search=auto`, else once; with a
    /// limit, the floors and the recompute flops in the summary, and a warning on a miss.
    fn run_reporting(&mut self, module: &mut Module) -> Result<(bool, RematSummary), RematError> {
        let Some(limit) = self.options.memory_limit else {
            return self.run_inner(module);
        };
        let post_order = module.schedule.is_none();
        if post_order {
            module.schedule = Some(post_order_schedule(module));
        }
        let (changed, mut summary) =
            if self.options.search == SearchKind::Auto && !self.options.keep_dead_originals {
                self.run_escalating(module, limit)?
            } else {
                let flops_before = crate::cost::module_flops(module);
                let (floor, any, described) = self.floors(module)?;
                let (changed, mut summary) = self.run_inner(module)?;
                summary.recompute_flops = (crate::cost::module_flops(module) - flops_before).max(0);
                summary.floor = Some(floor);
                summary.floor_any_schedule = Some(any);
                summary.floor_described = Some(described);
                (changed, summary)
            };
        summary.scheduled_post_order |= post_order;
        if !summary.limit_met && !self.quiet {
            let after = summary.peak_after;
            // The first few places, then a count: a deep call chain can have thousands.
            const SHOWN: usize = 8;
            let mut places: Vec<String> = summary
                .over_limit
                .iter()
                .take(SHOWN)
                .map(|o| {
                    format!(
                        "{} at %{} ({} bytes)",
                        o.computation, o.instruction, o.bytes
                    )
                })
                .collect();
            if summary.over_limit.len() > SHOWN {
                places.push(format!("{} more", summary.over_limit.len() - SHOWN));
            }
            tracing::warn!(
                "can't reduce memory use below {limit} bytes by rematerialization; only reduced to {after} bytes (over the limit in {}); {}",
                places.join(", "),
                summary.verdict().unwrap_or_default()
            );
        }
        Ok((changed || post_order, summary))
    }
}

impl RegisteredPass for Rematerialization {
    type Options = RematOptions;
    const NAME: &'static str = "rematerialization";
    const DOC: &'static str =
        "recompute or compress values to keep peak memory under remat.memory_limit (needs a schedule)";
    fn with_options(options: RematOptions) -> Rematerialization {
        Rematerialization::new(options)
    }
}

impl Pass for Rematerialization {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn run(&mut self, module: &mut Module) -> tessera_pass::Result<bool> {
        let (changed, summary) = self.run_reporting(module)?;
        self.summary = Some(summary);
        Ok(changed)
    }

    fn remarks(&mut self) -> Option<String> {
        if self.options.print_summary {
            self.summary.as_ref().map(|s| s.report())
        } else {
            None
        }
    }
}

/// The entry's program point with the most bytes, when over its limit (`limit` minus the
/// output bytes), measured by `peak_memory` along the module's schedule.
fn entry_over_limit(
    module: &Module,
    entry: CompId,
    size: &dyn Fn(&Shape) -> i64,
    limit: Option<i64>,
    output_size: i64,
) -> Vec<OverLimit> {
    let (Some(limit), Some(schedule)) = (limit, module.schedule.as_ref()) else {
        return Vec::new();
    };
    let Ok(mem) = crate::peak_memory(module, schedule, size) else {
        return Vec::new();
    };
    let e = mem.entry_memory();
    let limit = limit - output_size;
    match e.peak_position {
        Some(p) if e.peak_bytes > limit => vec![OverLimit {
            computation: module.comp(entry).name().to_string(),
            instruction: module.instr(e.sequence[p]).name().to_string(),
            bytes: e.peak_bytes,
            limit,
        }],
        _ => Vec::new(),
    }
}

/// Post-order sequences for every computation that needs one (not fusion bodies).
fn post_order_schedule(module: &Module) -> tessera_hlo::Schedule {
    let mut fused = vec![false; module.comp_capacity()];
    for &c in module.computations() {
        for &i in module.comp(c).instructions() {
            if module.instr(i).opcode() == Opcode::Fusion {
                for &f in module.called_computations(i) {
                    fused[f.index()] = true;
                }
            }
        }
    }
    let mut s = tessera_hlo::Schedule::default();
    for &c in module.computations() {
        if !fused[c.index()] {
            s.sequences.insert(c, post_order(module, c));
        }
    }
    s
}

/// The name of a clone: `x` -> `x.remat`, `x.remat` -> `x.remat2`, `x.remat2` -> `x.remat3`.
fn remat_name(module: &mut Module, name: &str) -> String {
    let base = match name.rfind(".remat") {
        Some(p) => {
            let tail = &name[p + 6..];
            if tail.is_empty() {
                format!("{}.remat2", &name[..p])
            } else if let Ok(n) = tail.parse::<u64>() {
                format!("{}.remat{}", &name[..p], n + 1)
            } else {
                format!("{name}.remat")
            }
        }
        None => format!("{name}.remat"),
    };
    module.unique_name(&base)
}

struct State<'a> {
    opts: &'a RematOptions,
    size_fn: &'a dyn Fn(&Shape) -> i64,
    compact_fn: &'a dyn Fn(&Shape) -> Shape,
    points_to: &'a TuplePointsTo,
    /// Peak bytes of each control-flow computation along its (current) schedule.
    peak: Vec<Option<i64>>,
    done: HashSet<CompId>,
    next_channel_id: i64,
    remat_count: i64,
    net_added: i64,
    effort: i64,
    /// Candidates the faithful scan evaluated, against `faithful_effort_limit`.
    scan_effort: i64,
    /// Set once the scan reached `faithful_effort_limit`: every walk uses the fast search.
    degraded: bool,
    queue_pops: i64,
    max_block: usize,
    over_limit: Vec<OverLimit>,
    computations: Vec<String>,
    /// Set once a fusion computation was cloned.
    /// True once a fusion computation was cloned (computations then need reordering).
    cloned_fusions: bool,
    /// The trackers `compute_peak_memory` built, reset, by computation; after
    /// `rematerialize_computation`, its final tracker.
    trackers: Vec<Option<Tracker<'a>>>,
    /// Rematerialized computations with their limits, in the order they were finished
    /// (callees before their callers).
    finished: Vec<(CompId, i64)>,
}

/// One computation being rematerialized: its walk's state between the steps of
/// `State::rematerialize_computation`, which keeps the open computations (a caller, then the
/// callee its current instruction is waiting for) on a stack.
struct Frame<'a> {
    c: CompId,
    memory_limit: i64,
    t: Tracker<'a>,
    changed: bool,
    remat_moves: HashSet<InstrId>,
    earliest: EarliestUsers,
    cache: RematerializableCache,
    /// The walk's running maximum.
    peak: i64,
    remat_count: i64,
    net_added: i64,
    peak_before: i64,
    use_fast: bool,
    queue: FastQueue,
    /// The compression candidates (fast search in a compressing mode).
    compress: Option<CompressIndex>,
    /// The item being placed, or the next one (`NIL` at the end).
    item: ItemId,
    /// Set while `item` waits for its callees: those not yet visited, last first.
    callees: Option<Vec<CompId>>,
}

fn sequence(module: &Module, c: CompId) -> Result<Vec<InstrId>, RematError> {
    module
        .schedule
        .as_ref()
        .and_then(|s| s.sequences.get(&c))
        .cloned()
        .ok_or_else(|| {
            RematError::Malformed(format!(
                "computation {} has no sequence in the schedule",
                module.comp(c).name()
            ))
        })
}

impl<'a> State<'a> {
    /// Bytes the computations `instr` calls in control-flow context need at their peak.
    fn callee_usage(&self, module: &Module, instr: InstrId) -> i64 {
        let i = module.instr(instr);
        if i.called.is_empty() || instruction_call_context(i.opcode()) != CallContext::ControlFlow {
            return 0;
        }
        i.called
            .iter()
            .map(|c| self.peak.get(c.index()).copied().flatten().unwrap_or(0))
            .sum()
    }

    /// The peak of `c` along its sequence. The tracker built for it is kept (reset) for
    /// `rematerialize_computation`, which would otherwise build the same one again.
    fn compute_peak_memory(&mut self, module: &Module, c: CompId) -> Result<i64, RematError> {
        let mut t = self.new_tracker(module, c)?;
        let mut peak = t.memory_usage();
        let mut item = t.list.first();
        while item != NIL {
            t.begin_instruction(item)?;
            let callee = self.callee_usage(module, t.list.item(item).instr);
            peak = peak.max(t.memory_usage() + callee);
            t.end_instruction()?;
            item = t.list.next(item);
        }
        t.reset();
        if self.trackers.len() <= c.index() {
            self.trackers.resize_with(c.index() + 1, || None);
        }
        self.trackers[c.index()] = Some(t);
        Ok(peak)
    }

    /// Replaces the peak of every rematerialized computation (callees first) by the peak of
    /// its final sequence measured from scratch, leaving out the instructions removed since
    /// (dead originals), and lists the computations still over their limits.
    fn measure_results(&mut self, module: &Module) {
        self.over_limit.clear();
        for k in 0..self.finished.len() {
            let (c, limit) = self.finished[k];
            let Some(t) = self.trackers.get(c.index()).and_then(Option::as_ref) else {
                continue;
            };
            let Some(comp) = module.try_comp(c) else {
                continue;
            };
            let (peak, at) = t.measure(
                |i| module.try_instr(i).is_none(),
                |i| self.callee_usage(module, i),
            );
            if peak > limit {
                if let Some(at) = at {
                    self.over_limit.push(OverLimit {
                        computation: comp.name().to_string(),
                        instruction: module.instr(at).name().to_string(),
                        bytes: peak,
                        limit,
                    });
                }
            }
            self.peak[c.index()] = Some(peak);
        }
    }

    fn new_tracker(&self, module: &Module, c: CompId) -> Result<Tracker<'a>, RematError> {
        let list = InstructionList::new(&sequence(module, c)?);
        Tracker::new(
            module,
            self.points_to,
            c,
            list,
            self.size_fn,
            self.opts.mode,
        )
    }

    fn check(&self, module: &Module, t: &Tracker) -> Result<(), RematError> {
        if self.opts.check_invariants {
            t.list.check().map_err(RematError::Internal)?;
            t.check(module)?;
        }
        Ok(())
    }

    /// Rematerializes `c` under `memory_limit`, and, where an instruction that calls
    /// control-flow computations is still over the limit, its callees within what is left.
    /// The walk into callees keeps an explicit stack of open computations (`Frame`s), not
    /// the Rust call stack, so a 10,000-deep call chain costs heap, not stack.
    fn rematerialize_computation(
        &mut self,
        module: &mut Module,
        c: CompId,
        memory_limit: i64,
    ) -> Result<bool, RematError> {
        let mut stack = vec![self.open_frame(module, c, memory_limit)?];
        let mut changed = false;
        while let Some(top) = stack.last_mut() {
            match self.advance(module, top)? {
                Some((callee, limit)) => {
                    let frame = self.open_frame(module, callee, limit)?;
                    stack.push(frame);
                }
                None => {
                    let frame = stack.pop().expect("the loop holds a frame");
                    let callee_changed = self.close_frame(module, frame)?;
                    match stack.last_mut() {
                        Some(caller) => caller.changed |= callee_changed,
                        None => changed = callee_changed,
                    }
                }
            }
        }
        Ok(changed)
    }

    /// Starts the walk of `c`: its tracker, with the items of at least `min_remat_size`
    /// promoted to the express lane.
    fn open_frame(
        &mut self,
        module: &Module,
        c: CompId,
        memory_limit: i64,
    ) -> Result<Frame<'a>, RematError> {
        if !self.done.insert(c) {
            return Err(RematError::Internal(format!(
                "computation {} rematerialized twice",
                module.comp(c).name()
            )));
        }
        self.computations.push(module.comp(c).name().to_string());
        let mut t = match self.trackers.get_mut(c.index()).and_then(Option::take) {
            Some(t) => t,
            None => self.new_tracker(module, c)?,
        };
        let min_remat_size = self.opts.min_remat_size;
        // Items allocating at least min_remat_size go on the express lane (in list order).
        let mut promote = Vec::with_capacity(t.list.len());
        let mut it = t.list.first();
        while it != NIL {
            promote.push(t.item_allocated_size(it) >= min_remat_size);
            it = t.list.next(it);
        }
        let mut k = 0;
        t.list.promote_nodes_to_skip(|_| {
            k += 1;
            promote[k - 1]
        });
        self.check(module, &t)?;
        let peak = t.memory_usage();
        let item = t.list.first();
        let use_fast = self.opts.search != SearchKind::Faithful || self.degraded;
        let peak_before = self.peak[c.index()].unwrap_or(0);
        let compress = (use_fast && self.opts.mode != RematMode::Recompute)
            .then(|| CompressIndex::new(memory_limit, peak_before));
        Ok(Frame {
            c,
            memory_limit,
            t,
            changed: false,
            remat_moves: HashSet::new(),
            earliest: EarliestUsers::default(),
            cache: RematerializableCache::default(),
            peak,
            remat_count: 0,
            net_added: 0,
            peak_before,
            use_fast,
            queue: FastQueue::new(memory_limit, self.opts.block_size_limit),
            compress,
            item,
            callees: None,
        })
    }

    /// Walks `f` on until it needs a callee rematerialized (returned with the callee's
    /// limit) or its walk ends (`None`).
    fn advance(
        &mut self,
        module: &mut Module,
        f: &mut Frame<'a>,
    ) -> Result<Option<(CompId, i64)>, RematError> {
        loop {
            if let Some(callees) = &mut f.callees {
                // Still over at `f.item`: its callees, each within what is left.
                while let Some(callee_comp) = callees.pop() {
                    if !self.done.contains(&callee_comp) && self.peak[callee_comp.index()].is_some()
                    {
                        let sub_limit = (f.memory_limit - f.t.memory_usage()).max(0);
                        return Ok(Some((callee_comp, sub_limit)));
                    }
                }
                f.callees = None;
                self.end_item(module, f)?;
                continue;
            }
            if f.item == NIL {
                return Ok(None);
            }
            self.begin_item(module, f)?;
        }
    }

    /// Places `f.item`, rematerializing earlier values while the walk is over the limit.
    /// Leaves `f.callees` set when the item calls control-flow computations and is still
    /// over; else ends the item.
    fn begin_item(&mut self, module: &mut Module, f: &mut Frame<'a>) -> Result<(), RematError> {
        let item = f.item;
        let memory_limit = f.memory_limit;
        let instr = f.t.list.item(item).instr;
        let callee = self.callee_usage(module, instr);
        f.t.begin_instruction(item)?;
        if f.use_fast {
            f.queue.on_begin(&mut f.t, module, item);
        }
        let mut min_block = 1usize;
        let mut max_block = 1usize;
        if f.t.item_allocated_size(item) + callee > 0 {
            let mut first_phase = true;
            let mut first_effort = 0i64;
            let mut second_effort = 0i64;
            while f.t.memory_usage() + callee > memory_limit {
                if !f.use_fast && self.over_effort_limit() {
                    self.degrade(module, f);
                }
                let pick = if f.use_fast {
                    if let Some(ci) = f.compress.as_mut() {
                        ci.absorb_revivals(&f.t);
                    }
                    let mut pick = if self.opts.mode == RematMode::Compress {
                        Pick {
                            items: Vec::new(),
                            strategy: Strategy::Recompute,
                            effort: 0,
                        }
                    } else {
                        f.queue
                            .pick(&mut f.t, module, &mut f.cache, min_block, max_block)
                    };
                    if let Some(ci) = f.compress.as_mut().filter(|_| min_block == 1) {
                        // The scan evaluates compressions of single items only, before the
                        // recompute blocks starting at the same item.
                        pick.effort += ci.candidates;
                        let tracker = &f.t;
                        let bound = pick.items.first().map(|&first| {
                            let reduced = tracker.memory_reduced_if_rematerialized(&pick.items);
                            let cost =
                                remat_cost(tracker, module, &pick.items, reduced, memory_limit);
                            (cost, tracker.list.item(first).position)
                        });
                        let bytes_after =
                            || tracker.bytes_after_walked_items(|i| self.callee_usage(module, i));
                        let guard = self.opts.peak_guard.then(|| {
                            (
                                &bytes_after as &dyn Fn() -> Vec<i64>,
                                tracker.memory_usage() + callee,
                            )
                        });
                        if let Some(item) = ci.pick(tracker, module, bound, guard) {
                            let shape = &module.instr(tracker.list.item(item).instr).shape;
                            pick.items = vec![item];
                            pick.strategy = Strategy::Compress(Box::new((self.compact_fn)(shape)));
                        }
                    }
                    pick
                } else {
                    let compact_fn = self.compact_fn;
                    let mut compact = |i: InstrId| compact_fn(&module.instr(i).shape);
                    let tracker = &f.t;
                    let bytes_after =
                        || tracker.bytes_after_walked_items(|i| self.callee_usage(module, i));
                    let guard = (self.opts.mode != RematMode::Recompute && self.opts.peak_guard)
                        .then(|| {
                            (
                                &bytes_after as &dyn Fn() -> Vec<i64>,
                                f.t.memory_usage() + callee,
                            )
                        });
                    pick_faithful(
                        &f.t,
                        module,
                        &mut f.cache,
                        &mut compact,
                        memory_limit,
                        min_block,
                        max_block,
                        f.peak_before,
                        guard,
                    )
                };
                if !f.use_fast {
                    self.scan_effort += pick.effort;
                }
                let (count, added) =
                    self.apply_pick(module, &mut f.t, &pick, &mut f.remat_moves, &mut f.earliest)?;
                if f.use_fast {
                    if let Some(ci) = f.compress.as_mut() {
                        ci.absorb_revivals(&f.t);
                    }
                    if matches!(pick.strategy, Strategy::Compress(_)) {
                        // The compact copy (denylisted) now sits in the walked part of the
                        // list and cuts the runs through the compressed item.
                        f.queue.rebuild(&mut f.t, module, &mut f.cache);
                    }
                    f.queue.absorb_revivals(&mut f.t, module, &mut f.cache);
                    if self.opts.check_invariants {
                        f.queue
                            .check(&f.t, module, &mut f.cache)
                            .map_err(RematError::Internal)?;
                    }
                }
                self.check(module, &f.t)?;
                f.net_added += added;
                f.remat_count += count;
                self.effort += pick.effort;
                if first_phase {
                    first_effort += pick.effort;
                } else {
                    second_effort += pick.effort;
                }
                if count == 0 {
                    // Nothing found: try larger blocks.
                    min_block = max_block + 1;
                    max_block *= 2;
                    first_phase = false;
                } else {
                    self.max_block = self.max_block.max(max_block);
                    f.changed = true;
                    min_block = 1;
                    max_block = 1;
                }
                if max_block > self.opts.block_size_limit
                    || second_effort > self.opts.block_rematerialization_factor * first_effort
                {
                    break;
                }
            }
        }
        let i = module.instr(instr);
        if !i.called.is_empty()
            && instruction_call_context(i.opcode()) == CallContext::ControlFlow
            && f.t.memory_usage() + callee > memory_limit
        {
            // Popped from the back: the callees in their order.
            f.callees = Some(i.called.iter().rev().copied().collect());
            return Ok(());
        }
        self.end_item(module, f)
    }

    /// True once the faithful scan has used up `faithful_effort_limit` (it latches
    /// `degraded`, so every later walk opens with the fast search).
    fn over_effort_limit(&mut self) -> bool {
        if self
            .opts
            .faithful_effort_limit
            .is_some_and(|l| self.scan_effort >= l)
        {
            self.degraded = true;
        }
        self.degraded
    }

    /// Switches a walk from the scan to the fast search at its current item: the queue (and,
    /// in a compressing mode, the compression index) built from the items finished so far,
    /// which is the state the fast search would have reached walking them.
    fn degrade(&mut self, module: &Module, f: &mut Frame<'a>) {
        f.use_fast = true;
        f.queue.rebuild(&mut f.t, module, &mut f.cache);
        if self.opts.mode != RematMode::Recompute {
            let mut ci = CompressIndex::new(f.memory_limit, f.peak_before);
            let (size_fn, compact_fn) = (self.size_fn, self.compact_fn);
            let mut compact_size = |i: InstrId| size_fn(&compact_fn(&module.instr(i).shape));
            let in_progress = f.t.in_progress();
            let mut it = f.t.list.first();
            while it != NIL {
                if f.t.list.item(it).placed && it != in_progress {
                    ci.on_finished(&f.t, module, &mut f.cache, it, &mut compact_size);
                }
                it = f.t.list.next(it);
            }
            f.compress = Some(ci);
        }
        tracing::debug!(
            "rematerialization of {}: the faithful scan reached its effort limit ({} candidates); \
             the fast search goes on",
            module.comp(f.c).name(),
            self.scan_effort
        );
    }

    /// Ends `f.item` (its callees rematerialized, if they were) and moves to the next.
    fn end_item(&mut self, module: &mut Module, f: &mut Frame<'a>) -> Result<(), RematError> {
        let item = f.item;
        let callee = self.callee_usage(module, f.t.list.item(item).instr);
        let now = f.t.memory_usage() + callee;
        f.peak = f.peak.max(now);
        f.t.end_instruction()?;
        if let Some(ci) = f.compress.as_mut() {
            let (size_fn, compact_fn) = (self.size_fn, self.compact_fn);
            let mut compact_size = |i: InstrId| size_fn(&compact_fn(&module.instr(i).shape));
            ci.on_finished(&f.t, module, &mut f.cache, item, &mut compact_size);
        }
        if f.use_fast {
            f.queue.on_end(&mut f.t, module, &mut f.cache, item);
            if self.opts.check_invariants {
                f.queue
                    .check(&f.t, module, &mut f.cache)
                    .map_err(RematError::Internal)?;
            }
        }
        f.item = f.t.list.next(item);
        Ok(())
    }

    /// Ends the walk of `f.c`: its new sequence, peak and tracker; returns whether it changed.
    fn close_frame(&mut self, module: &mut Module, f: Frame<'a>) -> Result<bool, RematError> {
        let Frame {
            c,
            memory_limit,
            t,
            changed,
            peak,
            remat_count,
            net_added,
            peak_before,
            queue,
            ..
        } = f;
        for &i in module.comp(c).instructions() {
            if !t.is_placed(i) {
                return Err(RematError::Internal(format!(
                    "%{} was never placed",
                    module.instr(i).name()
                )));
            }
        }
        // The running maximum decides the callers' choices (as in the seed); what the result
        // uses is measured again at the end of the run (`measure_results`).
        self.peak[c.index()] = Some(peak);
        let order = t.list.order();
        if let Some(s) = module.schedule.as_mut() {
            s.sequences.insert(c, order);
        }
        tracing::debug!(
            "rematerialization of {}: {} rematerialized, {} net added, peak {} (was {})",
            module.comp(c).name(),
            remat_count,
            net_added,
            peak,
            peak_before
        );
        self.remat_count += remat_count;
        self.net_added += net_added;
        self.queue_pops += queue.pops;
        if self.trackers.len() <= c.index() {
            self.trackers.resize_with(c.index() + 1, || None);
        }
        self.trackers[c.index()] = Some(t);
        self.finished.push((c, memory_limit));
        Ok(changed)
    }

    /// Carries out a pick; returns (instructions rematerialized, net instructions added).
    fn apply_pick(
        &mut self,
        module: &mut Module,
        t: &mut Tracker,
        pick: &Pick,
        remat_moves: &mut HashSet<InstrId>,
        earliest: &mut EarliestUsers,
    ) -> Result<(i64, i64), RematError> {
        if pick.items.is_empty() {
            return Ok((0, 0));
        }
        let added = match &pick.strategy {
            Strategy::Compress(shape) => {
                if pick.items.len() != 1 {
                    return Err(RematError::Internal(
                        "more than one instruction compressed at once".into(),
                    ));
                }
                compress_instruction(module, t, pick.items[0], shape)?
            }
            Strategy::Recompute => {
                self.rematerialize_instructions(module, t, &pick.items, remat_moves, earliest)?
            }
        };
        Ok((pick.items.len() as i64, added))
    }

    fn rematerialize_instructions(
        &mut self,
        module: &mut Module,
        t: &mut Tracker,
        items: &[ItemId],
        remat_moves: &mut HashSet<InstrId>,
        earliest: &mut EarliestUsers,
    ) -> Result<i64, RematError> {
        let mut net_added = 0;
        // In reverse, so a block's later items are cloned before the earlier ones they use.
        for &best_item in items.iter().rev() {
            if !t.has_unplaced_users(best_item) {
                continue;
            }
            let best = t.list.item(best_item).instr;
            let comp = module.instr(best).parent();
            let base = module.instr(best).name().to_string();
            let name = remat_name(module, &base);
            let mut clone: Instruction = module.instr(best).clone().with_name(name);
            if clone.attrs.channel_id.is_some() {
                clone.attrs.channel_id = Some(self.next_channel_id);
                self.next_channel_id += 1;
            }
            if clone.opcode() == Opcode::Fusion {
                // A fusion computation belongs to one fusion instruction: the clone gets its
                // own copy.
                self.cloned_fusions = true;
                for k in 0..clone.called.len() {
                    clone.called[k] = module.clone_computation(clone.called[k], "remat")?.0;
                }
            }
            let remat = module.add_instruction(comp, clone)?;
            for s in module.instr(best).control_successors().to_vec() {
                module.add_control_dependency(remat, s);
            }
            for p in module.instr(best).control_predecessors().to_vec() {
                module.add_control_dependency(p, remat);
            }
            let remat_item = t.list.create_item(remat);

            // Every unplaced use of `best` reads the clone instead (through a new
            // get-tuple-element and/or bitcast when the use was through one).
            // The rewiring is collected and applied in one batch (`replace_operands`): a value
            // with many users would otherwise have its users list scanned once per use.
            let mut indirect: Vec<ItemId> = Vec::new();
            let mut gte_cache: Vec<(usize, InstrId)> = Vec::new();
            let mut edits: Vec<(InstrId, usize, InstrId)> = Vec::new();
            for u in t.item_uses(best_item) {
                if t.list.item(u.user).placed {
                    continue;
                }
                let user = t.list.item(u.user).instr;
                let mut remat_use = remat;
                let k = u.operand_number as usize;
                // The operand as the edits so far leave it.
                let user_operand = match edits.iter().rev().find(|e| e.0 == user && e.1 == k) {
                    Some(e) => e.2,
                    None => *module.operands(user).get(k).ok_or_else(|| {
                        RematError::Internal(format!(
                            "%{}: no operand {}",
                            module.instr(user).name(),
                            u.operand_number
                        ))
                    })?,
                };
                if user_operand == remat_use {
                    continue;
                }
                if let Some(k) = u.index {
                    if module.instr(remat_use).shape != module.instr(user_operand).shape {
                        remat_use = match gte_cache.iter().find(|(x, _)| *x == k) {
                            Some(&(_, g)) => g,
                            None => {
                                let index = Attrs {
                                    tuple_index: k as i64,
                                    ..Attrs::default()
                                };
                                let g = Builder::new(module, comp).op_named(
                                    "get-tuple-element.remat",
                                    Opcode::GetTupleElement,
                                    &[remat_use],
                                    index,
                                    &[],
                                    None,
                                )?;
                                indirect.push(t.list.create_item(g));
                                gte_cache.push((k, g));
                                g
                            }
                        };
                    }
                }
                if module.instr(user_operand).shape != module.instr(remat_use).shape {
                    // A bitcast's shape is not a function of its operand: say it.
                    let shape = module.instr(user_operand).shape.clone();
                    let b = Builder::new(module, comp).op_named(
                        "bitcast.remat",
                        Opcode::Bitcast,
                        &[remat_use],
                        Attrs::default(),
                        &[],
                        Some(&shape),
                    )?;
                    indirect.push(t.list.create_item(b));
                    remat_use = b;
                }
                edits.push((user, k, remat_use));
            }
            module.replace_operands(&edits)?;
            t.add_rematerialized_instruction(module, best_item, remat_item, &indirect)?;

            // Place the clone before its earliest unplaced user, and before the earliest
            // unplaced use of any of its operands (so their live ranges do not grow).
            let indirect_instrs: Vec<InstrId> =
                indirect.iter().map(|&i| t.list.item(i).instr).collect();
            let mut before: Vec<ItemId> = Vec::new();
            for &u in module.users(remat) {
                if !indirect_instrs.contains(&u) {
                    before.push(t.list.get(u));
                }
            }
            for &iu in &indirect_instrs {
                for &u in module.users(iu) {
                    if !indirect_instrs.contains(&u) {
                        before.push(t.list.get(u));
                    }
                }
            }
            for &op in module.operands(remat) {
                if let Some(oi) = earliest.earliest_unplaced(&t.list, module, op, remat) {
                    before.push(oi);
                }
            }
            for &s in module.instr(remat).control_successors() {
                let si = t.list.get(s);
                if si == NIL {
                    continue;
                }
                if t.list.item(si).placed {
                    return Err(RematError::Internal(format!(
                        "%{}: control successor %{} already placed",
                        module.instr(remat).name(),
                        module.instr(s).name()
                    )));
                }
                before.push(si);
            }
            before.retain(|&b| b != NIL);
            if before.is_empty() {
                return Err(RematError::Internal(format!(
                    "%{}: nowhere to place the rematerialization",
                    module.instr(remat).name()
                )));
            }
            t.list.insert_before_instructions(remat_item, &before);
            for &iu in &indirect {
                t.list.insert_before_instructions(iu, &before);
            }
            for &op in module.operands(remat) {
                earliest.add_user(&t.list, op, remat_item);
            }
            if uses_empty(module, best) {
                // The clone took every use: a move. A move of a move is denylisted so the
                // same value is not moved forever.
                if remat_moves.contains(&best) {
                    t.list.denylist(remat);
                }
                remat_moves.insert(remat);
                net_added += indirect.len() as i64;
            } else {
                net_added += indirect.len() as i64 + 1;
            }
            for &iu in &indirect_instrs {
                t.list.denylist(iu);
            }
        }
        Ok(net_added)
    }
}

/// Removes the instructions of `comps` that nothing live uses (as DCE would), walking each
/// schedule backwards once and removing them in one batch.
fn sweep_dead(module: &mut Module, comps: &[CompId]) -> Result<bool, RematError> {
    let effects = SideEffects::new(module);
    let mut dead = vec![false; module.instr_capacity()];
    let mut all: Vec<InstrId> = Vec::new();
    for &c in comps {
        let seq = sequence(module, c)?;
        let root = module.comp(c).root();
        for &i in seq.iter().rev() {
            let ins = module.instr(i);
            if Some(i) != root
                && ins.opcode() != Opcode::Parameter
                && ins.control_predecessors().is_empty()
                && ins.control_successors().is_empty()
                && ins.users().iter().all(|u| dead[u.index()])
                && !effects.instr_has(module, i)
            {
                dead[i.index()] = true;
                all.push(i);
            }
        }
    }
    if all.is_empty() {
        return Ok(false);
    }
    module.remove_instructions(&all)?;
    Ok(true)
}

/// True if nothing but dead bitcasts / get-tuple-elements use `i`.
fn uses_empty(module: &Module, i: InstrId) -> bool {
    module
        .users(i)
        .iter()
        .all(|&u| is_supported_indirect_user(module.instr(u).opcode()) && uses_empty(module, u))
}

/// Copies `best` into `compact` form right after it and back right before its next use.
fn compress_instruction(
    module: &mut Module,
    t: &mut Tracker,
    best_item: ItemId,
    compact: &Shape,
) -> Result<i64, RematError> {
    let best = t.list.item(best_item).instr;
    let comp = module.instr(best).parent();
    let name = module.instr(best).name().to_string();
    let cname = module.unique_name(&format!("{name}.remat_compressed"));
    let compressed = module.add_instruction(
        comp,
        Instruction::new(cname, Opcode::Copy, compact.clone()).with_operands(&[best]),
    )?;
    let uname = module.unique_name(&format!("{name}.remat_uncompressed"));
    let shape = module.instr(best).shape.clone();
    let uncompressed = module.add_instruction(
        comp,
        Instruction::new(uname, Opcode::Copy, shape).with_operands(&[compressed]),
    )?;
    let ci = t.list.create_item(compressed);
    t.list.item_mut(ci).placed = true;
    let ui = t.list.create_item(uncompressed);
    for user in module.users(best).to_vec() {
        if !t.is_placed(user) {
            for k in 0..module.operands(user).len() {
                if module.operands(user)[k] == best {
                    module.replace_operand(user, k, uncompressed)?;
                }
            }
        }
    }
    t.add_compress_instructions(module, best_item, ci, ui)?;
    let before: Vec<ItemId> = module
        .users(uncompressed)
        .iter()
        .map(|&u| t.list.get(u))
        .collect();
    t.list.denylist(compressed);
    t.list.denylist(uncompressed);
    if before.is_empty() {
        return Err(RematError::Internal(format!(
            "%{name}: compressed value has no remaining users"
        )));
    }
    t.list.insert_before_instructions(ui, &before);
    if !t.list.insert_after_instructions(ci, &[best_item]) {
        return Err(RematError::Internal(format!(
            "%{name}: cannot compress the last instruction"
        )));
    }
    Ok(2)
}

#[cfg(test)]
mod tests;
