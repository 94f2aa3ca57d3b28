//! How parse and every registered pass scale with the input: call chains and flat
//! computations of 1k to 50k computations (six sizes), and one computation of 20k to 200k
//! instructions, each timed at every size with the least-squares growth exponent of time
//! against size (1 is linear). Figures and the reading of them: docs/BENCHMARKS.md.
//!
//! Made robust to a shared, loaded machine: every size is timed in every round (the rounds
//! go over all stages and sizes in turn, so a change of load hits every size alike), each
//! point is the median of the rounds, and the fit is over all sizes. Run it under
//! `nice -n 10`.
//!
//! ```text
//! nice -n 10 cargo bench -p tessera-benches --bench scaling [-- --reps N] [--family chain,flat,wide,remat] [--sizes 1000,10000] [--passes inline,dce] [--cold]
//! ```
//!
//! By default a pass starts on a copy of the module made just before it, which leaves a small
//! module in the L2 cache and a large one not. `--cold` writes a buffer of [`EVICT_BYTES`]
//! between the copy and the timing, so that every size starts from the same cold L2 (the
//! difference is in docs/log/robustness-campaigns.md).
//!
//! The `clone` and `read` rows are yardsticks, not passes. `Module::clone` copies every
//! instruction once, with no lookups and no walks. `read` reads every instruction's record once
//! in stored order (its name, operand and user counts) and does nothing else: its exponent is
//! what the memory of the module alone costs a pass that looks at each instruction once, as
//! the records outgrow the caches between the smallest and the largest size
//! (docs/log/robustness-campaigns.md).
//!
//! Times are the thread's CPU time (see `Clock`), else wall-clock.
//! Every pass runs alone on a fresh copy of the parsed module (no verifier, no printing);
//! `rematerialization` on the module scheduled first, with a limit of 90% of its peak;
//! `tuple-simplify` and `dce` once more on the module after `inline` (where the flat family's
//! get-tuple-element(tuple) pairs and dead halves are). A pass that takes longer than 30 s at
//! one size is not run at the larger ones. The `remat` family ([`remat_chain`], scheduled)
//! has something to rematerialize at every level of its call chain.

use std::time::Duration;

use tessera_benches::{call_chain, flat_calls, registry, remat_chain, wide};
use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_remat::gen::growth_exponent;
use tessera_remat::{peak_memory, schedule_module, SchedulerKind};

const TOO_SLOW: Duration = Duration::from_secs(30);

/// What `--cold` writes before each timing: eight times this machine's 4 MiB L2.
const EVICT_BYTES: usize = 32 << 20;

/// Pushes the module out of the L2 cache (for `--cold`) by writing a buffer larger than it.
fn evict_l2(cold: bool) {
    if cold {
        let mut buf = vec![0u8; EVICT_BYTES];
        for b in buf.iter_mut().step_by(64) {
            *b = b.wrapping_add(1);
        }
        std::hint::black_box(&buf);
    }
}

/// A clock of this thread's time on a CPU (`CLOCK_THREAD_CPUTIME_ID`, user and system),
/// falling back to wall-clock time where it is not available. On the shared machine a run
/// longer than a scheduler slice waits behind other processes, so wall-clock time grows with
/// the load as much as with the input; CPU time does not.
struct Clock(Option<Duration>, std::time::Instant);

impl Clock {
    fn cpu() -> Option<Duration> {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec for the call's duration.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        (rc == 0).then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    }
    fn start() -> Clock {
        Clock(Self::cpu(), std::time::Instant::now())
    }
    fn elapsed(&self) -> Duration {
        match (self.0, Self::cpu()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => self.1.elapsed(),
        }
    }
}

struct Args(Vec<String>);

impl Args {
    fn value(&self, key: &str) -> Option<&str> {
        let k = self.0.iter().position(|a| a == key)?;
        self.0.get(k + 1).map(String::as_str)
    }
    fn list(&self, key: &str) -> Option<Vec<String>> {
        self.value(key)
            .map(|v| v.split(',').map(str::to_string).collect())
    }
}

fn median(t: &[Duration]) -> Duration {
    let mut t = t.to_vec();
    t.sort();
    t[t.len() / 2]
}

fn parse(text: &str) -> Module {
    tessera_hlo::text::parse_module(text).expect("generated modules parse")
}

/// Runs `passes` (a `--passes` list) on a copy of `m`; returns the pass time.
fn run(m: &Module, passes: &str, options: &[String], cold: bool) -> Duration {
    let mut copy = m.clone();
    let mut p = registry()
        .build_pipeline(passes, options)
        .expect("a registered pass");
    evict_l2(cold);
    let t = Clock::start();
    p.run_with_report(&mut copy).expect("the pass runs");
    t.elapsed()
}

/// One family at one size, with what the stages start from.
struct Input {
    text: String,
    module: Module,
    scheduled: Module,
    inlined: Module,
    peak: i64,
}

fn prepare(text: String) -> Input {
    let module = parse(&text);
    let mut scheduled = module.clone();
    if scheduled.schedule.is_none() {
        schedule_module(&mut scheduled, SchedulerKind::Default, &shape_size).expect("schedules");
    }
    let peak = peak_memory(
        &scheduled,
        scheduled.schedule.as_ref().unwrap(),
        &shape_size,
    )
    .expect("measures")
    .peak_bytes;
    let mut inlined = module.clone();
    registry()
        .build_pipeline("inline", &[])
        .unwrap()
        .run_with_report(&mut inlined)
        .unwrap();
    Input {
        text,
        module,
        scheduled,
        inlined,
        peak,
    }
}

/// One timing of `stage` on `input`, from a cold L2 with `cold`.
fn time_stage(stage: &str, input: &Input, cold: bool) -> Duration {
    match stage {
        "parse" => {
            evict_l2(cold);
            let t = Clock::start();
            drop(parse(&input.text));
            t.elapsed()
        }
        "clone" => {
            evict_l2(cold);
            let t = Clock::start();
            let copy = input.module.clone();
            let e = t.elapsed();
            drop(copy);
            e
        }
        "read" => {
            let m = &input.module;
            evict_l2(cold);
            let t = Clock::start();
            let mut sum = 0usize;
            for &c in m.computations() {
                for &i in m.comp(c).instructions() {
                    sum += m.instr(i).name().len() + m.operands(i).len() + m.users(i).len();
                }
            }
            std::hint::black_box(sum);
            t.elapsed()
        }
        "rematerialization" => {
            let limit = format!("rematerialization.memory_limit={}", input.peak * 9 / 10);
            run(&input.scheduled, stage, std::slice::from_ref(&limit), cold)
        }
        s if s.starts_with("inline,") => run(&input.inlined, &s["inline,".len()..], &[], cold),
        s => run(&input.module, s, &[], cold),
    }
}

fn main() {
    let args = Args(std::env::args().skip(1).collect());
    let reps: usize = args
        .value("--reps")
        .map_or(5, |v| v.parse().expect("--reps N"));
    let families = args
        .list("--family")
        .unwrap_or_else(|| vec!["chain".into(), "flat".into(), "wide".into()]);
    let cold = args.0.iter().any(|a| a == "--cold");
    let reg = registry();
    let yardsticks = ["clone", "read"];
    let mut stages: Vec<String> = std::iter::once("parse")
        .chain(yardsticks)
        .map(String::from)
        .collect();
    stages.extend(reg.iter().map(|p| p.name.to_string()));
    stages.push("inline,tuple-simplify".into());
    stages.push("inline,dce".into());
    if let Some(only) = args.list("--passes") {
        stages.retain(|s| s == "parse" || yardsticks.contains(&s.as_str()) || only.contains(s));
    }
    let clock = if Clock::cpu().is_some() {
        "CPU time of the thread"
    } else {
        "wall-clock time"
    };
    let start = if cold {
        "each timing from a cold L2 (--cold)"
    } else {
        "each pass on a fresh copy"
    };
    println!("{start}; median of {reps} rounds; {clock} in ms; exponent = least-squares slope of log time against log size over all sizes");
    for family in &families {
        let sizes: Vec<usize> = match args.list("--sizes") {
            Some(v) => v.iter().map(|s| s.parse().expect("--sizes")).collect(),
            None if family == "wide" => vec![20_000, 50_000, 100_000, 200_000],
            None => vec![1_000, 2_000, 5_000, 10_000, 20_000, 50_000],
        };
        let gen = |n: usize| match family.as_str() {
            "chain" => call_chain(n),
            "flat" => flat_calls(n),
            "wide" => wide(n),
            "remat" => remat_chain(n),
            other => panic!("unknown family `{other}` (chain, flat, wide, remat)"),
        };
        let inputs: Vec<Input> = sizes.iter().map(|&n| prepare(gen(n))).collect();
        let instrs: Vec<usize> = inputs
            .iter()
            .map(|i| i.module.instruction_count())
            .collect();
        // times[stage][size]: one entry per round; None once a smaller size was too slow.
        let mut times: Vec<Vec<Option<Vec<Duration>>>> =
            vec![vec![Some(Vec::new()); sizes.len()]; stages.len()];
        for _round in 0..reps.max(1) {
            for (k, stage) in stages.iter().enumerate() {
                for (j, input) in inputs.iter().enumerate() {
                    let too_slow = j > 0
                        && times[k][j - 1]
                            .as_ref()
                            .is_none_or(|t| t.iter().any(|&d| d > TOO_SLOW));
                    if too_slow {
                        times[k][j] = None;
                        continue;
                    }
                    if j == 0 {
                        // Untimed: the stage before ended on the largest size, whose memory
                        // went back to the system when it was dropped; the first timing after
                        // it paid for growing the heap again (the smallest size came out
                        // slower than twice its size, which flattered every exponent).
                        time_stage(stage, input, cold);
                    }
                    let t = time_stage(stage, input, cold);
                    if let Some(v) = times[k][j].as_mut() {
                        v.push(t);
                    }
                }
            }
        }
        println!();
        print!("| {family} | ");
        for (n, i) in sizes.iter().zip(&instrs) {
            print!("{n} ({i} instr) | ");
        }
        println!("exponent |");
        println!("|---|{}---|", "---|".repeat(sizes.len()));
        for (k, stage) in stages.iter().enumerate() {
            print!("| {stage} | ");
            let mut points = Vec::new();
            for (t, &i) in times[k].iter().zip(&instrs) {
                match t {
                    Some(t) if !t.is_empty() => {
                        let m = median(t);
                        print!("{:.1} | ", m.as_secs_f64() * 1e3);
                        points.push((i as f64, m.as_secs_f64().max(1e-6)));
                    }
                    _ => print!("skipped | "),
                }
            }
            if points.len() >= 2 {
                println!("{:.2} |", growth_exponent(&points));
            } else {
                println!("- |");
            }
        }
    }
}
