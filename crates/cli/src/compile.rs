//! `tessera compile` and `tessera explain`: the whole pipeline of `tessera_compile` from the
//! command line.
//!
//! * `tessera compile IN.hlo|IN.pb [--num-partitions N] [--num-replicas R]
//!   [--memory-limit BYTES] [--dedup] [--auto-shard [--mesh NAME=SIZE,...]] [-o OUT.hlo|OUT.pb]
//!   [--verify] [--report] [--pass-option PASS.KEY=VALUE]...` compiles a frontend's module into the program every
//!   device runs. The module goes to `-o` (a `.pb` name writes a serialized HloModuleProto),
//!   or to stdout without `-o`; the report and the verification then go to stderr, else to
//!   stdout. On a terminal, stderr shows one progress line per pass.
//! * `tessera explain IN [--num-partitions N] [--auto-shard [--mesh ...]] [--memory-limit B]
//!   [--pass-option ...]` compiles the same way and
//!   prints why each collective exists: the instruction and resharding that made it and the
//!   bytes each device receives.

use std::io::{IsTerminal, Write};

use anyhow::{Context, Result};
use clap::Args;
use tessera_compile::{
    compile_with_progress, parse_input, verify_on_devices, CompileOptions, Compiled, Progress,
    VerifyOptions,
};
use tessera_hlo::Module;
use tessera_pass::options::parse_int;

#[derive(Args, Debug)]
pub struct CompileArgs {
    /// The module: HLO text (jax's `lower().as_text()`, an XLA dump file, TensorFlow's HLO),
    /// or a serialized xla.HloModuleProto; `-` reads stdin.
    pub file: String,
    /// Devices to partition over (default: the module header's `num_partitions`, or the
    /// devices its shardings name).
    #[arg(long)]
    pub num_partitions: Option<i64>,
    /// Replicas (only 1 is supported by the partitioner yet).
    #[arg(long, default_value_t = 1)]
    pub num_replicas: i64,
    /// Peak bytes per device, outputs included (K, M, G suffixes): rematerialize to fit.
    #[arg(long, value_name = "BYTES")]
    pub memory_limit: Option<String>,
    /// Merge entry parameters of one `tessera.resource` (variable deduplication).
    #[arg(long)]
    pub dedup: bool,
    #[command(flatten)]
    pub auto: AutoShardArgs,
    /// Where to write the per-device program (`.pb`: a serialized HloModuleProto; `-` or
    /// absent: HLO text on stdout).
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
    /// Run the original and the result on PJRT CPU devices and compare every output.
    #[arg(long)]
    pub verify: bool,
    /// Seed of the random inputs of --verify.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// --verify: how the verdict is decided (the flags of `tessera compare`).
    #[command(flatten)]
    pub verdict: crate::run::VerdictArgs,
    /// Print per-pass times, per-device peak memory, collectives and why each exists, warnings.
    #[arg(long)]
    pub report: bool,
    /// An option of a pipeline pass, `PASS.KEY=VALUE` (repeatable; see `tessera passes`).
    #[arg(long = "pass-option", value_name = "PASS.KEY=VALUE")]
    pub pass_options: Vec<String>,
    /// Run the verifier after every pass, not only on the input and the result.
    #[arg(long)]
    pub verify_each_pass: bool,
}

/// `--auto-shard` and `--mesh`, shared by `compile` and `explain`.
#[derive(Args, Debug)]
pub struct AutoShardArgs {
    /// Choose a sharding for every array the module leaves unsharded (the `auto-sharding`
    /// pass): the cheapest estimated step whose per-device peak fits --memory-limit.
    #[arg(long)]
    pub auto_shard: bool,
    /// The device mesh for --auto-shard, `NAME=SIZE,...` (e.g. `data=2,model=4`; sizes
    /// multiply to the partitions). Default: a 1-D mesh of all partitions.
    #[arg(long, value_name = "NAME=SIZE,...")]
    pub mesh: Option<String>,
}

impl AutoShardArgs {
    fn apply(&self, o: &mut CompileOptions) -> Result<()> {
        if self.mesh.is_some() && !self.auto_shard {
            anyhow::bail!(
                "--mesh says how --auto-shard shards: add --auto-shard, or leave --mesh out"
            );
        }
        if self.auto_shard {
            o.auto_shard = Some(tessera_autoshard::AutoShardOptions {
                mesh: self.mesh.clone(),
                ..Default::default()
            });
        }
        Ok(())
    }
}

fn memory_limit(v: Option<&str>) -> Result<Option<i64>> {
    v.map(|v| parse_int(v).map_err(|e| anyhow::anyhow!("--memory-limit: {e}")))
        .transpose()
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The module (as for `compile`).
    pub file: String,
    /// Devices to partition over (default: the module header's `num_partitions`, or the
    /// devices its shardings name).
    #[arg(long)]
    pub num_partitions: Option<i64>,
    #[command(flatten)]
    pub auto: AutoShardArgs,
    /// Peak bytes per device (K, M, G suffixes), as for `compile`.
    #[arg(long, value_name = "BYTES")]
    pub memory_limit: Option<String>,
    /// An option of a pipeline pass, `PASS.KEY=VALUE` (repeatable).
    #[arg(long = "pass-option", value_name = "PASS.KEY=VALUE")]
    pub pass_options: Vec<String>,
}

fn shown(file: &str) -> &str {
    if file == "-" {
        "<stdin>"
    } else {
        file
    }
}

fn load(file: &str) -> Result<Module> {
    let bytes = crate::read_input(file)?;
    Ok(parse_input(&bytes, shown(file))?)
}

fn options(
    module: &Module,
    num_partitions: Option<i64>,
    pass_options: &[String],
) -> CompileOptions {
    let mut o = CompileOptions::for_module(module);
    if let Some(n) = num_partitions {
        o.num_partitions = n;
    }
    o.pass_options = pass_options.to_vec();
    o
}

/// Runs the pipeline; on a terminal, one progress line per pass on stderr (rewritten in
/// place, cleared at the end).
fn run(file: &str, module: Module, o: &CompileOptions) -> Result<Compiled> {
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: Progress<'_>| {
        if let Progress::Start { pass, index, total } = p {
            eprint!("\r\x1b[K[{index}/{total}] {pass} ...");
            let _ = std::io::stderr().flush();
        }
    };
    let mut quiet = |_: Progress<'_>| {};
    let r = compile_with_progress(module, o, if tty { &mut progress } else { &mut quiet });
    if tty {
        eprint!("\r\x1b[K");
    }
    r.with_context(|| shown(file).to_string())
}

/// `tessera compile`.
pub fn compile(args: &CompileArgs) -> Result<()> {
    if !args.verify {
        if let Some(flag) = args.verdict.given() {
            anyhow::bail!("{flag} says how --verify decides: add --verify, or leave {flag} out");
        }
    }
    crate::opt::init_tracing(0);
    let original = load(&args.file)?;
    let mut o = options(&original, args.num_partitions, &args.pass_options);
    o.num_replicas = args.num_replicas;
    o.dedup = args.dedup;
    o.verify_each_pass = args.verify_each_pass;
    o.measure_unpartitioned = args.report;
    o.memory_limit = memory_limit(args.memory_limit.as_deref())?;
    args.auto.apply(&mut o)?;
    let compiled = run(&args.file, original.clone(), &o)?;

    let to_file = args.output.as_deref().filter(|p| *p != "-");
    match to_file {
        Some(p) if p.ends_with(".pb") => {
            std::fs::write(p, tessera_hlo::proto::to_proto_bytes(&compiled.module))
                .with_context(|| format!("writing {p}"))?
        }
        Some(p) => {
            std::fs::write(p, print(&compiled.module)).with_context(|| format!("writing {p}"))?
        }
        None => crate::write_output(None, &print(&compiled.module))?,
    }
    let mut text = String::new();
    if args.report {
        text.push_str(&compiled.report.render());
    }
    let mut outcome = tessera_runtime::Outcome::Equivalent;
    if args.verify {
        let n = compiled.report.num_partitions as usize;
        let client = tessera_runtime::Client::cpu(n.max(1))
            .context("--verify: cannot create the PJRT CPU client")?;
        let vo = VerifyOptions {
            seed: args.seed,
            compare: args.verdict.options(),
        };
        let v = verify_on_devices(&client, &original, &compiled, &vo)
            .with_context(|| format!("{}: --verify", shown(&args.file)))?;
        outcome = v.outcome();
        text.push_str(&format!("\nverify:\n{v}\n"));
    }
    if !compiled.report.warnings.is_empty() && !args.report {
        for w in &compiled.report.warnings {
            eprintln!("warning: {w}");
        }
    }
    if !text.is_empty() {
        if to_file.is_some() {
            crate::write_output(None, &text)?;
        } else {
            eprint!("{text}");
        }
    }
    if outcome != tessera_runtime::Outcome::Equivalent {
        return Err(crate::run::VerdictError(outcome).into());
    }
    Ok(())
}

fn print(m: &Module) -> String {
    tessera_hlo::text::print_module(m, &tessera_hlo::text::PrintOptions::default())
}

/// `tessera explain`: the partitioner's explanation and the collectives of the output.
pub fn explain(args: &ExplainArgs) -> Result<String> {
    crate::opt::init_tracing(0);
    let original = load(&args.file)?;
    let mut o = options(&original, args.num_partitions, &args.pass_options);
    o.memory_limit = memory_limit(args.memory_limit.as_deref())?;
    args.auto.apply(&mut o)?;
    let compiled = run(&args.file, original, &o)?;
    Ok(compiled.report.explain())
}
