//! `search=auto` (the default): the pass escalates until the limit is met or it has tried
//! everything it knows. See docs/rematerialization.md, *Meeting the limit*.
//!
//! Levels, cheapest first; the first level with a result under the limit wins, and among its
//! results the one with the fewest recompute flops ([`crate::cost`]):
//!
//! 1. the input's schedule with each block setting of [`BLOCKS`] (the configured one first);
//! 2. each scheduler of [`SchedulerKind::ALL`] (a fresh schedule of the input) with each
//!    block setting, skipped where that schedule's floor is above the limit;
//! 3. rounds: the lowest miss of each schedule of levels 1-2, scheduled again by its
//!    scheduler (the clones the walk left right after the point they relieved move to just
//!    before their uses) and rematerialized again, while its peak falls, up to [`ROUNDS`].
//!
//! A limit below the floor of every schedule ([`crate::RematFloor::any_schedule`]) stops after
//! level 1's first try: nothing can meet it.

use tessera_hlo::Module;

use super::{RematError, RematOptions, RematSummary, Rematerialization, SearchKind};
use crate::cost::module_flops;
use crate::floor::remat_floor;
use crate::schedule::{schedule_module, SchedulerKind};
use crate::schedule_memory::{module_memory, MemoryOptions};
use crate::RematMode;

/// Block settings (`block_size_limit`, `block_rematerialization_factor`) tried after the
/// configured one: chains of up to 4 and of up to 16 instructions recomputed together.
pub const BLOCKS: [(usize, i64); 2] = [(4, 2), (16, 8)];

/// States the exact optimum (level 5, computations of at most 32 values) may explore.
pub const EXACT_STATES: usize = 1 << 18;

/// Reschedule-and-rematerialize rounds per schedule (round 1 is the plain try).
pub const ROUNDS: usize = 4;

/// One try of the escalation: where it started and what it gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RematTry {
    /// 1 for a try from a fresh schedule; k > 1 for the (k-1)-th reschedule round.
    pub round: usize,
    /// `None`: the input's own schedule.
    pub scheduler: Option<SchedulerKind>,
    /// 0 (with the factor 0): the recompute-before-use level (split.rs); `usize::MAX`: the
    /// exact optimum (optimal.rs).
    pub block_size_limit: usize,
    pub block_rematerialization_factor: i64,
    /// Peak along the schedule before rematerialization.
    pub scheduled: i64,
    /// The floor along that schedule (in the recompute mode; `any_schedule` otherwise).
    pub floor: i64,
    /// Peak after (`None`: not run, the floor is above the limit).
    pub peak: Option<i64>,
    /// Recompute flops of the result against the input.
    pub recompute_flops: Option<i64>,
}

impl RematTry {
    pub fn describe(&self) -> String {
        let sched = match self.scheduler {
            None => "the input's schedule".to_string(),
            Some(k) => format!("schedule {}", k.name()),
        };
        let round = if self.round > 1 {
            format!("round {}, ", self.round)
        } else {
            String::new()
        };
        let result = match (self.peak, self.recompute_flops) {
            (Some(p), Some(f)) => format!("reached {p} ({f} recompute flops)"),
            (Some(p), None) => format!("reached {p}"),
            _ => "not run (its floor is above the limit)".into(),
        };
        if self.block_size_limit == usize::MAX {
            return format!("the exact optimum (optimal.rs): {result}");
        }
        if self.block_size_limit == 0 {
            return format!(
                "{round}recompute before the later use (split.rs): from {}, floor {}, {result}",
                self.scheduled, self.floor
            );
        }
        format!(
            "{round}{sched}, blocks {}x{}: scheduled {}, floor {}, {result}",
            self.block_size_limit, self.block_rematerialization_factor, self.scheduled, self.floor
        )
    }
}

/// A result of one try.
#[derive(Clone)]
struct Outcome {
    module: Module,
    summary: RematSummary,
    peak: i64,
    flops: i64,
}

impl Outcome {
    /// Better for the final answer: under the limit beats over; under it, fewer flops (then
    /// lower peak); over it, lower peak (then fewer flops).
    fn better_than(&self, other: &Outcome, limit: i64) -> bool {
        let (a, b) = (self.peak <= limit, other.peak <= limit);
        if a != b {
            return a;
        }
        if a {
            (self.flops, self.peak) < (other.flops, other.peak)
        } else {
            (self.peak, self.flops) < (other.peak, other.flops)
        }
    }
}

impl Rematerialization {
    /// One plain run of the pass on `module` with `block` settings and the fast search, quiet.
    fn try_once(
        &mut self,
        module: &Module,
        block: (usize, i64),
        flops_before: i64,
    ) -> Result<Outcome, RematError> {
        let t0 = std::time::Instant::now();
        let mut m = module.clone();
        let mut o: RematOptions = self.options.clone();
        o.search = SearchKind::Fast;
        o.block_size_limit = block.0;
        o.block_rematerialization_factor = block.1;
        o.print_summary = false;
        let saved = std::mem::replace(&mut self.options, o);
        let quiet = std::mem::replace(&mut self.quiet, true);
        let r = self.run_inner(&mut m);
        self.options = saved;
        self.quiet = quiet;
        let (_, summary) = r?;
        let flops = (module_flops(&m) - flops_before).max(0);
        tracing::debug!(
            "remat try, blocks {}x{}: {} bytes in {:.2?}",
            block.0,
            block.1,
            summary.peak_after,
            t0.elapsed()
        );
        Ok(Outcome {
            peak: summary.peak_after,
            module: m,
            summary,
            flops,
        })
    }

    /// The floor along `m`'s schedule as this mode counts it, and the floor of any schedule.
    pub(super) fn floors(&self, m: &Module) -> Result<(i64, i64, String), RematError> {
        let mem = module_memory(m, None, &*self.size_fn, MemoryOptions::default())
            .map_err(|e| RematError::Internal(format!("memory accounting: {e}")))?;
        let f = remat_floor(m, &mem);
        Ok(match self.options.mode {
            RematMode::Recompute => (f.bytes, f.any_schedule, f.describe(m)),
            // The same floor as the recompute mode's: described the same way.
            _ if f.bytes == f.any_schedule_local => (f.bytes, f.bytes, f.describe(m)),
            _ => (
                f.any_schedule_local,
                f.any_schedule_local,
                format!(
                    "{} bytes for any schedule (operands and results of one instruction, \
                     outputs included)",
                    f.any_schedule_local
                ),
            ),
        })
    }

    /// The recompute-before-use level (split.rs) on `start`.
    fn split_outcome(
        &mut self,
        start: Outcome,
        limit: i64,
        flops_before: i64,
        floor: i64,
        tries: &mut Vec<RematTry>,
    ) -> Result<Outcome, RematError> {
        let t0 = std::time::Instant::now();
        let mut m = start.module;
        let added = super::split::split_to_limit(&mut m, limit, &*self.size_fn)
            .map_err(|e| RematError::Internal(format!("recompute before use: {e}")))?;
        let peak = measure_peak(&m, &*self.size_fn);
        let flops = (module_flops(&m) - flops_before).max(0);
        tracing::debug!(
            "remat recompute before use: {} -> {peak} bytes in {:.2?}",
            start.peak,
            t0.elapsed()
        );
        let mut summary = start.summary;
        summary.instructions_rematerialized += added as i64;
        summary.net_instructions_added += added as i64;
        summary.peak_after = peak;
        summary.instructions_after = m.instruction_count();
        tries.push(RematTry {
            round: 1,
            scheduler: None,
            block_size_limit: 0,
            block_rematerialization_factor: 0,
            scheduled: start.peak,
            floor,
            peak: Some(peak),
            recompute_flops: Some(flops),
        });
        Ok(Outcome {
            module: m,
            summary,
            peak,
            flops,
        })
    }

    /// `search=auto`: see the module docs. `module` is scheduled.
    pub(super) fn run_escalating(
        &mut self,
        module: &mut Module,
        limit: i64,
    ) -> Result<(bool, RematSummary), RematError> {
        let input = module.clone();
        let flops_before = module_flops(&input);
        let (input_floor, any_floor, described) = self.floors(&input)?;
        let peak_before = measure_peak(&input, &*self.size_fn);
        let configured = (
            self.options.block_size_limit,
            self.options.block_rematerialization_factor,
        );
        let mut blocks = vec![configured];
        blocks.extend(BLOCKS.iter().filter(|&&b| b.0 > configured.0));
        let mut tries: Vec<RematTry> = Vec::new();
        let mut best: Option<Outcome> = None;
        let mut lowest_floor = input_floor;
        // Each schedule's lowest miss, where the rounds start.
        let mut misses: Vec<(Option<SchedulerKind>, Outcome)> = Vec::new();
        let keep = |best: &mut Option<Outcome>, o: Outcome| {
            if best.as_ref().is_none_or(|b| o.better_than(b, limit)) {
                *best = Some(o);
            }
        };

        // Levels 1 and 2.
        let mut schedules: Vec<Option<SchedulerKind>> = vec![None];
        schedules.extend(SchedulerKind::ALL.iter().rev().map(|&k| Some(k)));
        let mut hopeless = false;
        let mut tried: Vec<tessera_hlo::Schedule> = Vec::new();
        for (level, &sched) in schedules.iter().enumerate() {
            let base = match sched {
                None => input.clone(),
                Some(k) => {
                    let mut m = input.clone();
                    schedule_module(&mut m, k, &*self.size_fn).map_err(|e| {
                        RematError::Internal(format!("schedule ({}): {e}", k.name()))
                    })?;
                    m
                }
            };
            if tried
                .iter()
                .any(|t| same_order(&input, t, base.schedule.as_ref()))
            {
                // The same order as the input's or an earlier scheduler's: its tries would be
                // theirs.
                continue;
            }
            tried.extend(base.schedule.clone());
            let (floor, _, _) = if level == 0 {
                (input_floor, any_floor, String::new())
            } else {
                self.floors(&base)?
            };
            lowest_floor = lowest_floor.min(floor);
            let scheduled = measure_peak(&base, &*self.size_fn);
            let mut level_best: Option<Outcome> = None;
            let mut level_miss: Option<Outcome> = None;
            for (j, &block) in blocks.iter().enumerate() {
                let mut t = RematTry {
                    round: 1,
                    scheduler: sched,
                    block_size_limit: block.0,
                    block_rematerialization_factor: block.1,
                    scheduled,
                    floor,
                    peak: None,
                    recompute_flops: None,
                };
                let first = level == 0 && j == 0;
                if !first && floor > limit {
                    tries.push(t);
                    continue;
                }
                let o = self.try_once(&base, block, flops_before)?;
                t.peak = Some(o.peak);
                t.recompute_flops = Some(o.flops);
                tries.push(t);
                if o.peak <= limit {
                    if level_best.as_ref().is_none_or(|b| o.better_than(b, limit)) {
                        level_best = Some(o);
                    }
                } else if level_miss.as_ref().is_none_or(|b| o.better_than(b, limit)) {
                    level_miss = Some(o);
                }
                if first && limit < any_floor {
                    // No schedule can meet it: the first try is the answer.
                    hopeless = true;
                    break;
                }
            }
            if let Some(o) = level_best {
                keep(&mut best, o);
                break;
            }
            if hopeless {
                if let Some(o) = level_miss {
                    keep(&mut best, o);
                }
                break;
            }
            if let Some(o) = level_miss {
                misses.push((sched, o.clone()));
                keep(&mut best, o);
            }
        }

        // Level 3: recompute before the later use (split.rs), from the lowest miss (it
        // already holds the cheap recomputations). From the input only after the rounds: on
        // the 48-layer step it never met a limit the rounds missed, and costs seconds.
        if let Some(b) = best
            .as_ref()
            .filter(|b| b.peak > limit && limit >= any_floor)
        {
            let o = self.split_outcome(b.clone(), limit, flops_before, input_floor, &mut tries)?;
            misses.push((None, o.clone()));
            keep(&mut best, o);
        }

        // Level 4: rounds.
        if best.as_ref().is_some_and(|b| b.peak > limit) && limit >= any_floor {
            'rounds: for (sched, start) in misses {
                let kind = sched.unwrap_or_default();
                let mut current = start;
                for round in 2..=ROUNDS {
                    let mut base = current.module.clone();
                    schedule_module(&mut base, kind, &*self.size_fn).map_err(|e| {
                        RematError::Internal(format!("schedule ({}): {e}", kind.name()))
                    })?;
                    let (floor, _, _) = self.floors(&base)?;
                    lowest_floor = lowest_floor.min(floor);
                    let scheduled = measure_peak(&base, &*self.size_fn);
                    let mut round_best: Option<Outcome> = None;
                    for &block in &blocks {
                        let mut t = RematTry {
                            round,
                            scheduler: Some(kind),
                            block_size_limit: block.0,
                            block_rematerialization_factor: block.1,
                            scheduled,
                            floor,
                            peak: None,
                            recompute_flops: None,
                        };
                        if floor > limit {
                            tries.push(t);
                            continue;
                        }
                        let o = self.try_once(&base, block, flops_before)?;
                        t.peak = Some(o.peak);
                        t.recompute_flops = Some(o.flops);
                        tries.push(t);
                        if round_best.as_ref().is_none_or(|b| o.better_than(b, limit)) {
                            round_best = Some(o);
                        }
                    }
                    if let Some(o) = round_best.take() {
                        round_best = Some(if o.peak > limit {
                            let split = self.split_outcome(
                                o.clone(),
                                limit,
                                flops_before,
                                floor,
                                &mut tries,
                            )?;
                            if split.better_than(&o, limit) {
                                split
                            } else {
                                o
                            }
                        } else {
                            o
                        });
                    }
                    match round_best {
                        Some(o) if o.peak < current.peak || o.peak <= limit => {
                            let met = o.peak <= limit;
                            let merged = merge(&current.summary, o.summary.clone());
                            current = Outcome {
                                summary: merged,
                                ..o
                            };
                            if met {
                                keep(&mut best, current);
                                break 'rounds;
                            }
                            if best.as_ref().is_none_or(|b| current.better_than(b, limit)) {
                                best = Some(current.clone());
                            }
                        }
                        _ => continue 'rounds,
                    }
                }
            }
        }

        // Level 3 from the input, when the rounds missed too.
        if best.as_ref().is_some_and(|b| b.peak > limit) && limit >= any_floor {
            let start = Outcome {
                module: input.clone(),
                summary: RematSummary::default(),
                peak: peak_before,
                flops: 0,
            };
            let o = self.split_outcome(start, limit, flops_before, input_floor, &mut tries)?;
            keep(&mut best, o);
        }

        // Level 5: small computations get the exact optimum (optimal.rs) when it is cheaper
        // than what the levels above found, or meets a limit they missed.
        if limit >= any_floor && self.options.mode == RematMode::Recompute {
            let exact = self.exact_outcome(&input, limit, flops_before, input_floor, &mut tries);
            if let Some(o) = exact {
                keep(&mut best, o);
            }
        }

        let Some(best) = best else {
            return Err(RematError::Internal("no try ran".into()));
        };
        let best = best.or_unchanged(&input, limit, peak_before);
        let mut summary = best.summary;
        summary.peak_before = peak_before;
        summary.memory_limit = Some(limit);
        summary.instructions_before = input.instruction_count();
        summary.recompute_flops = best.flops;
        summary.floor = Some(input_floor);
        summary.floor_any_schedule = Some(any_floor);
        summary.floor_lowest = Some(lowest_floor);
        summary.floor_described = Some(described);
        summary.tries = tries;
        summary.limit_met = best.peak <= limit;
        if summary.limit_met {
            summary.over_limit.clear();
        }
        let changed =
            summary.instructions_rematerialized > 0 || best.module.schedule != input.schedule;
        *module = best.module;
        Ok((changed, summary))
    }

    /// Level 5: the exact optimum of `optimal.rs` for `input` under `limit`, where the
    /// computation is small enough for it; its try is recorded in `tries`.
    fn exact_outcome(
        &self,
        input: &Module,
        limit: i64,
        flops_before: i64,
        input_floor: i64,
        tries: &mut Vec<RematTry>,
    ) -> Option<Outcome> {
        let problem = crate::optimal::Problem::from_module(input, &*self.size_fn).ok()?;
        let crate::optimal::Optimum::Found { schedule, .. } = problem.solve(limit, EXACT_STATES)
        else {
            return None;
        };
        let m = problem.materialize(input, &schedule).ok()?;
        let peak = measure_peak(&m, &*self.size_fn);
        let flops = (module_flops(&m) - flops_before).max(0);
        tries.push(RematTry {
            round: 1,
            scheduler: None,
            block_size_limit: usize::MAX,
            block_rematerialization_factor: 0,
            scheduled: measure_peak(input, &*self.size_fn),
            floor: input_floor,
            peak: Some(peak),
            recompute_flops: Some(flops),
        });
        let summary = RematSummary {
            peak_after: peak,
            instructions_rematerialized: (schedule.len() - problem.len()) as i64,
            net_instructions_added: m.instruction_count() as i64 - input.instruction_count() as i64,
            instructions_after: m.instruction_count(),
            ..RematSummary::default()
        };
        Some(Outcome {
            module: m,
            summary,
            peak,
            flops,
        })
    }
}

impl Outcome {
    /// `self`, or `input` unchanged when `self` misses `limit` without lowering the peak
    /// (`peak_before`, the input's): then the input is the cheapest miss.
    fn or_unchanged(self, input: &Module, limit: i64, peak_before: i64) -> Outcome {
        if self.peak <= limit || self.peak < peak_before {
            return self;
        }
        let summary = RematSummary {
            peak_after: peak_before,
            instructions_after: input.instruction_count(),
            over_limit: self.summary.over_limit,
            computations: self.summary.computations,
            ..RematSummary::default()
        };
        Outcome {
            module: input.clone(),
            summary,
            peak: peak_before,
            flops: 0,
        }
    }
}

/// The peak of `m` along its schedule (`i64::MAX` if it cannot be measured).
fn measure_peak(m: &Module, size: &dyn Fn(&tessera_hlo::Shape) -> i64) -> i64 {
    match &m.schedule {
        Some(s) => crate::peak_memory(m, s, size)
            .map(|x| x.peak_bytes)
            .unwrap_or(i64::MAX),
        None => i64::MAX,
    }
}

/// Whether schedules `a` and `b` of `m` run their instructions in the same order,
/// parameters aside: schedulers differ in where they put the parameters of small callees
/// (a reduction's `to_apply`), which the accounting does not count (they are the caller's
/// operands) and the pass never rematerializes.
fn same_order(m: &Module, a: &tessera_hlo::Schedule, b: Option<&tessera_hlo::Schedule>) -> bool {
    let Some(b) = b else {
        return false;
    };
    let no_params = |seq: &[tessera_hlo::InstrId]| {
        seq.iter()
            .copied()
            .filter(|&i| m.instr(i).opcode() != tessera_hlo::Opcode::Parameter)
            .collect::<Vec<_>>()
    };
    a.sequences.len() == b.sequences.len()
        && a.sequences.iter().all(|(c, x)| {
            b.sequences
                .get(c)
                .is_some_and(|y| x == y || no_params(x) == no_params(y))
        })
}

/// Two rematerializations in a row as one: before from the first, after from the second,
/// counts summed.
fn merge(first: &RematSummary, second: RematSummary) -> RematSummary {
    RematSummary {
        peak_before: first.peak_before,
        instructions_before: first.instructions_before,
        instructions_rematerialized: first.instructions_rematerialized
            + second.instructions_rematerialized,
        net_instructions_added: first.net_instructions_added + second.net_instructions_added,
        effort: first.effort + second.effort,
        queue_pops: first.queue_pops + second.queue_pops,
        scan_effort: first.scan_effort + second.scan_effort,
        search_degraded: first.search_degraded || second.search_degraded,
        max_block_size: first.max_block_size.max(second.max_block_size),
        ..second
    }
}
