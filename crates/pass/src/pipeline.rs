//! Pipelines: passes in order, invariant checkers between them, fixed points, timing, dumps.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tessera_hlo::Module;

use crate::{Pass, PassError, Result};

/// An invariant checker (usually the verifier): `Err(message)` when the module is broken.
pub type Checker = Box<dyn Fn(&Module) -> std::result::Result<(), String>>;

/// Prints a module for dumps.
pub type Printer = Box<dyn Fn(&Module) -> String>;

/// Repeats its passes, in order, until a whole round changes nothing, at most
/// `max_iterations` rounds. Reaching the limit is not an error unless `error_on_limit` is set
/// (XLA's `HloPassFix` logs and stops too).
pub struct FixedPoint {
    name: String,
    passes: Vec<Box<dyn Pass>>,
    pub max_iterations: usize,
    pub error_on_limit: bool,
    /// Rounds the last run took.
    pub last_iterations: usize,
}

impl FixedPoint {
    pub const DEFAULT_MAX_ITERATIONS: usize = 25;

    pub fn new(name: impl Into<String>) -> FixedPoint {
        FixedPoint {
            name: name.into(),
            passes: Vec::new(),
            max_iterations: Self::DEFAULT_MAX_ITERATIONS,
            error_on_limit: false,
            last_iterations: 0,
        }
    }

    pub fn with(mut self, pass: impl Pass + 'static) -> FixedPoint {
        self.passes.push(Box::new(pass));
        self
    }

    pub fn add_boxed(&mut self, pass: Box<dyn Pass>) {
        self.passes.push(pass);
    }

    pub fn with_max_iterations(mut self, n: usize) -> FixedPoint {
        self.max_iterations = n;
        self
    }
}

impl Pass for FixedPoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        // Stand-alone use (without a pipeline's checkers, dumps and per-pass timing).
        let mut any = false;
        self.last_iterations = 0;
        loop {
            if self.last_iterations == self.max_iterations {
                if self.error_on_limit {
                    return Err(PassError::NoFixedPoint {
                        name: self.name.clone(),
                        limit: self.max_iterations,
                    });
                }
                tracing::warn!(
                    "{}: no fixed point after {} iterations",
                    self.name,
                    self.max_iterations
                );
                return Ok(any);
            }
            self.last_iterations += 1;
            let mut changed = false;
            for p in &mut self.passes {
                changed |= run_named(p.as_mut(), module)?;
            }
            any |= changed;
            if !changed {
                return Ok(any);
            }
        }
    }
}

fn run_named(p: &mut dyn Pass, module: &mut Module) -> Result<bool> {
    p.run(module).map_err(|e| match e {
        e @ PassError::InPass { .. } => e,
        e => PassError::InPass {
            pass: p.name().to_string(),
            error: Box::new(e),
        },
    })
}

enum Stage {
    Pass(Box<dyn Pass>),
    Fixed(FixedPoint),
}

/// Statistics of one stage of a pipeline, summed over every time it ran (a pass inside a fixed
/// point runs once per round).
#[derive(Clone, Debug, PartialEq)]
pub struct PassStats {
    pub name: String,
    /// 0 for top-level stages, 1 inside a fixed point.
    pub depth: usize,
    pub runs: usize,
    /// Runs that changed the module.
    pub changed_runs: usize,
    pub time: Duration,
    /// Rounds, for fixed points.
    pub iterations: Option<usize>,
}

/// What a pipeline run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunReport {
    /// One entry per stage, fixed points followed by their passes, in pipeline order.
    pub stages: Vec<PassStats>,
    /// Time in invariant checkers.
    pub checker_time: Duration,
    pub checker_runs: usize,
    pub total: Duration,
    pub changed: bool,
    /// Files written by the dumper.
    pub dumped: Vec<PathBuf>,
    /// `(pass, text)` from [`Pass::remarks`], in run order.
    pub remarks: Vec<(String, String)>,
}

impl RunReport {
    /// A fixed-width table of pass times, as `tessera opt --timing` prints it.
    pub fn timing_table(&self) -> String {
        let mut rows: Vec<[String; 4]> = vec![[
            "pass".into(),
            "time (ms)".into(),
            "runs".into(),
            "changed".into(),
        ]];
        for s in &self.stages {
            let mut name = "  ".repeat(s.depth);
            name.push_str(&s.name);
            if let Some(n) = s.iterations {
                name.push_str(&format!(" [{n} rounds]"));
            }
            rows.push([
                name,
                format!("{:.3}", s.time.as_secs_f64() * 1e3),
                s.runs.to_string(),
                if s.changed_runs > 0 {
                    format!("yes ({}/{})", s.changed_runs, s.runs)
                } else {
                    "no".into()
                },
            ]);
        }
        if self.checker_runs > 0 {
            rows.push([
                "(invariant checkers)".into(),
                format!("{:.3}", self.checker_time.as_secs_f64() * 1e3),
                self.checker_runs.to_string(),
                String::new(),
            ]);
        }
        rows.push([
            "total".into(),
            format!("{:.3}", self.total.as_secs_f64() * 1e3),
            String::new(),
            if self.changed { "yes" } else { "no" }.into(),
        ]);
        let w: Vec<usize> = (0..4)
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (k, r) in rows.iter().enumerate() {
            let line = format!(
                "{:<w0$}  {:>w1$}  {:>w2$}  {:<w3$}",
                r[0],
                r[1],
                r[2],
                r[3],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3]
            );
            out.push_str(line.trim_end());
            out.push('\n');
            if k == 0 || k + 2 == rows.len() {
                out.push_str(&"-".repeat(w.iter().sum::<usize>() + 6));
                out.push('\n');
            }
        }
        out
    }
}

struct Dumper {
    dir: PathBuf,
    printer: Printer,
}

/// Passes in order, with invariant checkers, timing and optional dumps.
#[derive(Default)]
pub struct Pipeline {
    name: String,
    stages: Vec<Stage>,
    checkers: Vec<(String, Checker)>,
    dumper: Option<Dumper>,
}

struct RunState {
    report: RunReport,
    dump_counter: usize,
}

impl Pipeline {
    pub fn new(name: impl Into<String>) -> Pipeline {
        Pipeline {
            name: name.into(),
            ..Pipeline::default()
        }
    }

    pub fn add_pass(&mut self, pass: impl Pass + 'static) -> &mut Pipeline {
        self.stages.push(Stage::Pass(Box::new(pass)));
        self
    }

    pub fn add_boxed(&mut self, pass: Box<dyn Pass>) -> &mut Pipeline {
        self.stages.push(Stage::Pass(pass));
        self
    }

    /// Adds a fixed point; its passes get the pipeline's checkers, timing and dumps.
    pub fn add_fixed_point(&mut self, fp: FixedPoint) -> &mut Pipeline {
        self.stages.push(Stage::Fixed(fp));
        self
    }

    /// Adds an invariant checker run on the input and after every pass that changed the module.
    pub fn add_checker(
        &mut self,
        name: impl Into<String>,
        checker: impl Fn(&Module) -> std::result::Result<(), String> + 'static,
    ) -> &mut Pipeline {
        self.checkers.push((name.into(), Box::new(checker)));
        self
    }

    /// Writes the module after every pass run to `dir/NNNN.<pass>.hlo` (NNNN counts pass runs
    /// from 0000), printed by `printer`. The folder is created if needed.
    pub fn dump_to(
        &mut self,
        dir: impl Into<PathBuf>,
        printer: impl Fn(&Module) -> String + 'static,
    ) -> &mut Pipeline {
        self.dumper = Some(Dumper {
            dir: dir.into(),
            printer: Box::new(printer),
        });
        self
    }

    pub fn pass_names(&self) -> Vec<String> {
        self.stages
            .iter()
            .map(|s| match s {
                Stage::Pass(p) => p.name().to_string(),
                Stage::Fixed(f) => f.name.clone(),
            })
            .collect()
    }

    /// Runs every stage in order and reports times and changes.
    pub fn run_with_report(&mut self, module: &mut Module) -> Result<RunReport> {
        let start = Instant::now();
        let mut st = RunState {
            report: RunReport::default(),
            dump_counter: 0,
        };
        if let Some(d) = &self.dumper {
            std::fs::create_dir_all(&d.dir).map_err(|source| PassError::Io {
                path: d.dir.display().to_string(),
                source,
            })?;
        }
        let _span = tracing::info_span!("pipeline", name = %self.name).entered();
        self.check(module, "on the input", &mut st)?;
        let mut stages = std::mem::take(&mut self.stages);
        let res = self.run_stages(&mut stages, module, &mut st);
        self.stages = stages;
        res?;
        st.report.total = start.elapsed();
        Ok(st.report)
    }

    fn run_stages(
        &self,
        stages: &mut [Stage],
        module: &mut Module,
        st: &mut RunState,
    ) -> Result<()> {
        for stage in stages.iter_mut() {
            match stage {
                Stage::Pass(p) => {
                    let slot = st.report.stages.len();
                    st.report.stages.push(stats(p.name(), 0));
                    self.run_one(p.as_mut(), module, st, slot)?;
                }
                Stage::Fixed(fp) => {
                    let head = st.report.stages.len();
                    st.report.stages.push(stats(&fp.name, 0));
                    let slots: Vec<usize> = fp
                        .passes
                        .iter()
                        .map(|p| {
                            st.report.stages.push(stats(p.name(), 1));
                            st.report.stages.len() - 1
                        })
                        .collect();
                    let t0 = Instant::now();
                    let mut rounds = 0;
                    let mut any = false;
                    loop {
                        if rounds == fp.max_iterations {
                            if fp.error_on_limit {
                                return Err(PassError::NoFixedPoint {
                                    name: fp.name.clone(),
                                    limit: fp.max_iterations,
                                });
                            }
                            tracing::warn!(
                                "{}: no fixed point after {} rounds",
                                fp.name,
                                fp.max_iterations
                            );
                            break;
                        }
                        rounds += 1;
                        let mut changed = false;
                        for (p, &slot) in fp.passes.iter_mut().zip(&slots) {
                            changed |= self.run_one(p.as_mut(), module, st, slot)?;
                        }
                        any |= changed;
                        if !changed {
                            break;
                        }
                    }
                    fp.last_iterations = rounds;
                    let h = &mut st.report.stages[head];
                    h.runs = 1;
                    h.changed_runs = usize::from(any);
                    h.time = t0.elapsed();
                    h.iterations = Some(rounds);
                }
            }
        }
        Ok(())
    }

    fn run_one(
        &self,
        p: &mut dyn Pass,
        module: &mut Module,
        st: &mut RunState,
        slot: usize,
    ) -> Result<bool> {
        let name = p.name().to_string();
        let _span = tracing::info_span!("pass", name = %name).entered();
        let t0 = Instant::now();
        let changed = run_named(p, module)?;
        let dt = t0.elapsed();
        if let Some(text) = p.remarks() {
            st.report.remarks.push((name.clone(), text));
        }
        tracing::info!(
            "{} in {:.3} ms",
            if changed { "changed" } else { "unchanged" },
            dt.as_secs_f64() * 1e3
        );
        let s = &mut st.report.stages[slot];
        s.runs += 1;
        s.changed_runs += usize::from(changed);
        s.time += dt;
        st.report.changed |= changed;
        if changed {
            self.check(module, &format!("after pass `{name}`"), st)?;
        }
        if let Some(d) = &self.dumper {
            let path = d.dir.join(format!("{:04}.{}.hlo", st.dump_counter, name));
            st.dump_counter += 1;
            std::fs::write(&path, (d.printer)(module)).map_err(|source| PassError::Io {
                path: path.display().to_string(),
                source,
            })?;
            st.report.dumped.push(path);
        }
        Ok(changed)
    }

    fn check(&self, module: &Module, when: &str, st: &mut RunState) -> Result<()> {
        for (name, c) in &self.checkers {
            let t0 = Instant::now();
            let r = c(module);
            st.report.checker_time += t0.elapsed();
            st.report.checker_runs += 1;
            if let Err(message) = r {
                return Err(PassError::Invariant {
                    checker: name.clone(),
                    when: when.to_string(),
                    message,
                });
            }
        }
        Ok(())
    }
}

fn stats(name: &str, depth: usize) -> PassStats {
    PassStats {
        name: name.to_string(),
        depth,
        runs: 0,
        changed_runs: 0,
        time: Duration::ZERO,
        iterations: None,
    }
}

impl Pass for Pipeline {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&mut self, module: &mut Module) -> Result<bool> {
        Ok(self.run_with_report(module)?.changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// Renames the module `n` times (changes while the counter is positive).
    struct Countdown {
        left: usize,
    }

    impl Pass for Countdown {
        fn name(&self) -> &str {
            "countdown"
        }
        fn run(&mut self, m: &mut Module) -> Result<bool> {
            if self.left == 0 {
                return Ok(false);
            }
            self.left -= 1;
            m.name.push('x');
            Ok(true)
        }
    }

    struct Noop;
    impl Pass for Noop {
        fn name(&self) -> &str {
            "noop"
        }
        fn run(&mut self, _: &mut Module) -> Result<bool> {
            Ok(false)
        }
    }

    struct Fails;
    impl Pass for Fails {
        fn name(&self) -> &str {
            "fails"
        }
        fn run(&mut self, _: &mut Module) -> Result<bool> {
            Err(PassError::Failed("boom".into()))
        }
    }

    #[test]
    fn runs_in_order_and_reports() {
        let mut p = Pipeline::new("t");
        p.add_pass(Countdown { left: 1 }).add_pass(Noop);
        let mut m = Module::new("m");
        let r = p.run_with_report(&mut m).unwrap();
        assert_eq!(m.name, "mx");
        assert!(r.changed);
        assert_eq!(r.stages.len(), 2);
        assert_eq!((r.stages[0].runs, r.stages[0].changed_runs), (1, 1));
        assert_eq!((r.stages[1].runs, r.stages[1].changed_runs), (1, 0));
        let table = r.timing_table();
        assert!(table.starts_with("pass"), "{table}");
        assert!(table.contains("\ncountdown "), "{table}");
        assert!(table.contains("yes (1/1)"), "{table}");
        assert!(
            table.lines().last().unwrap().starts_with("total"),
            "{table}"
        );
    }

    #[test]
    fn fixed_point_repeats_until_unchanged_and_respects_the_limit() {
        let mut p = Pipeline::new("t");
        p.add_fixed_point(
            FixedPoint::new("fix")
                .with(Countdown { left: 3 })
                .with(Noop),
        );
        let mut m = Module::new("m");
        let r = p.run_with_report(&mut m).unwrap();
        assert_eq!(m.name, "mxxx");
        assert_eq!(r.stages[0].iterations, Some(4));
        assert_eq!(r.stages[1].name, "countdown");
        assert_eq!((r.stages[1].runs, r.stages[1].changed_runs), (4, 3));
        assert_eq!(r.stages[2].depth, 1);

        let mut fp = FixedPoint::new("fix")
            .with(Countdown { left: 10 })
            .with_max_iterations(2);
        let mut m = Module::new("m");
        assert!(fp.run(&mut m).unwrap());
        assert_eq!(m.name, "mxx");
        fp.error_on_limit = true;
        let err = fp.run(&mut m).unwrap_err().to_string();
        assert!(err.contains("did not converge within 2"), "{err}");
    }

    #[test]
    fn checkers_run_on_input_and_after_changing_passes() {
        let calls = Rc::new(Cell::new(0));
        let c2 = calls.clone();
        let mut p = Pipeline::new("t");
        p.add_pass(Countdown { left: 1 })
            .add_pass(Noop)
            .add_checker("no-xx", move |m: &Module| {
                c2.set(c2.get() + 1);
                if m.name.contains("xx") {
                    Err("two x".into())
                } else {
                    Ok(())
                }
            });
        let mut m = Module::new("m");
        let r = p.run_with_report(&mut m).unwrap();
        // input + after countdown; not after noop.
        assert_eq!(calls.get(), 2);
        assert_eq!(r.checker_runs, 2);
        let mut p2 = Pipeline::new("t");
        p2.add_pass(Countdown { left: 1 })
            .add_checker("no-xx", |m: &Module| {
                if m.name.contains("xx") {
                    Err("two x".into())
                } else {
                    Ok(())
                }
            });
        let err = p2.run_with_report(&mut m).unwrap_err().to_string();
        assert_eq!(
            err,
            "invariant checker `no-xx` failed after pass `countdown`: two x"
        );
    }

    #[test]
    fn errors_name_the_pass_and_dumps_write_one_file_per_pass_run() {
        let mut p = Pipeline::new("t");
        p.add_pass(Noop).add_pass(Fails);
        let err = p.run_with_report(&mut Module::new("m")).unwrap_err();
        assert_eq!(err.to_string(), "pass `fails` failed: boom");

        let dir = std::env::temp_dir().join(format!("tessera-dump-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut p = Pipeline::new("t");
        p.add_pass(Countdown { left: 1 })
            .add_fixed_point(FixedPoint::new("fix").with(Noop))
            .dump_to(&dir, |m: &Module| format!("HloModule {}\n", m.name));
        let r = p.run_with_report(&mut Module::new("m")).unwrap();
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["0000.countdown.hlo", "0001.noop.hlo"]);
        assert_eq!(r.dumped.len(), 2);
        assert_eq!(
            std::fs::read_to_string(dir.join("0000.countdown.hlo")).unwrap(),
            "HloModule mx\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
