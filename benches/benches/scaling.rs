//! How parse and every registered pass scale with the input: call chains and flat
//! computations of 1k, 10k and 50k computations, and one computation of up to 200k
//! instructions, each timed at every size with the least-squares growth exponent of time
//! against size (1 is linear). Figures and the reading of them: docs/BENCHMARKS.md.
//!
//! ```text
//! nice -n 10 cargo bench -p tessera-benches --bench scaling [-- --reps N] [--family chain,flat,wide] [--sizes 1000,10000] [--passes inline,dce]
//! ```
//!
//! Times are the thread's CPU time (see `Clock`), else wall-clock.
//! Every pass runs alone on a fresh copy of the parsed module (no verifier, no printing);
//! `rematerialization` on the module scheduled first, with a limit of 90% of its peak;
//! `tuple-simplify` and `dce` once more on the module after `inline` (where the flat family's
//! get-tuple-element(tuple) pairs and dead halves are). A pass that takes longer than 30 s at
//! one size is not run at the larger ones; `rematerialization` is not run on call chains (it
//! recurses once per nesting level and overflows the stack at 10k).

use std::time::Duration;

use tessera_benches::{call_chain, flat_calls, registry, wide};
use tessera_hlo::analysis::shape_size;
use tessera_hlo::Module;
use tessera_remat::gen::growth_exponent;
use tessera_remat::{peak_memory, schedule_module, SchedulerKind};

const TOO_SLOW: Duration = Duration::from_secs(30);

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

fn median(mut f: impl FnMut() -> Duration, reps: usize) -> Duration {
    let mut t: Vec<Duration> = (0..reps.max(1)).map(|_| f()).collect();
    t.sort();
    t[t.len() / 2]
}

fn parse(text: &str) -> Module {
    tessera_hlo::text::parse_module(text).expect("generated modules parse")
}

/// Runs `passes` (a `--passes` list) on a copy of `m`; returns the pass time.
fn run(m: &Module, passes: &str, options: &[String]) -> Duration {
    let mut copy = m.clone();
    let mut p = registry()
        .build_pipeline(passes, options)
        .expect("a registered pass");
    let t = Clock::start();
    p.run_with_report(&mut copy).expect("the pass runs");
    t.elapsed()
}

fn main() {
    let args = Args(std::env::args().skip(1).collect());
    let reps: usize = args
        .value("--reps")
        .map_or(3, |v| v.parse().expect("--reps N"));
    let families = args
        .list("--family")
        .unwrap_or_else(|| vec!["chain".into(), "flat".into(), "wide".into()]);
    let reg = registry();
    let mut stages: Vec<String> = vec!["parse".into()];
    stages.extend(reg.iter().map(|p| p.name.to_string()));
    stages.push("inline,tuple-simplify".into());
    stages.push("inline,dce".into());
    if let Some(only) = args.list("--passes") {
        stages.retain(|s| s == "parse" || only.contains(s));
    }
    let clock = if Clock::cpu().is_some() {
        "CPU time of the thread"
    } else {
        "wall-clock time"
    };
    println!("median of {reps}; {clock} in ms; exponent = least-squares slope of log time against log size");
    for family in &families {
        let sizes: Vec<usize> = match args.list("--sizes") {
            Some(v) => v.iter().map(|s| s.parse().expect("--sizes")).collect(),
            None if family == "wide" => vec![20_000, 100_000, 200_000],
            None => vec![1_000, 10_000, 50_000],
        };
        let gen = |n: usize| match family.as_str() {
            "chain" => call_chain(n),
            "flat" => flat_calls(n),
            "wide" => wide(n),
            other => panic!("unknown family `{other}` (chain, flat, wide)"),
        };
        let mut rows: Vec<(String, Vec<Option<Duration>>)> =
            stages.iter().map(|s| (s.clone(), Vec::new())).collect();
        let mut instrs = Vec::new();
        for &n in &sizes {
            let text = gen(n);
            let m = parse(&text);
            instrs.push(m.instruction_count());
            let mut scheduled = m.clone();
            schedule_module(&mut scheduled, SchedulerKind::Default, &shape_size)
                .expect("schedules");
            let peak = peak_memory(
                &scheduled,
                scheduled.schedule.as_ref().unwrap(),
                &shape_size,
            )
            .expect("measures")
            .peak_bytes;
            let inlined = {
                let mut i = m.clone();
                registry()
                    .build_pipeline("inline", &[])
                    .unwrap()
                    .run_with_report(&mut i)
                    .unwrap();
                i
            };
            for (stage, times) in rows.iter_mut() {
                // Rematerializing into the callees of a deep chain recurses once per level
                // and overflows the stack (see docs/BENCHMARKS.md): not run there.
                if family == "chain" && stage == "rematerialization" {
                    times.push(None);
                    continue;
                }
                if times
                    .last()
                    .is_some_and(|t: &Option<Duration>| t.is_none_or(|t| t > TOO_SLOW))
                {
                    times.push(None);
                    continue;
                }
                let t = match stage.as_str() {
                    "parse" => median(
                        || {
                            let t = Clock::start();
                            drop(parse(&text));
                            t.elapsed()
                        },
                        reps,
                    ),
                    "rematerialization" => {
                        let limit = format!("rematerialization.memory_limit={}", peak * 9 / 10);
                        median(
                            || run(&scheduled, stage, std::slice::from_ref(&limit)),
                            reps,
                        )
                    }
                    s if s.starts_with("inline,") => {
                        median(|| run(&inlined, &s["inline,".len()..], &[]), reps)
                    }
                    s => median(|| run(&m, s, &[]), reps),
                };
                times.push(Some(t));
            }
        }
        println!();
        print!("| {family} | ");
        for (n, i) in sizes.iter().zip(&instrs) {
            print!("{n} ({i} instr) | ");
        }
        println!("exponent |");
        println!("|---|{}---|", "---|".repeat(sizes.len()));
        for (stage, times) in &rows {
            print!("| {stage} | ");
            let mut points = Vec::new();
            for (t, &i) in times.iter().zip(&instrs) {
                match t {
                    Some(t) => {
                        print!("{:.1} | ", t.as_secs_f64() * 1e3);
                        points.push((i as f64, t.as_secs_f64().max(1e-6)));
                    }
                    None => print!("skipped | "),
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
