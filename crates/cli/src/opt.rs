//! `tessera opt`, `tessera stats` and `tessera passes`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{ArgAction, Args};
use tessera_pass::driver::{default_hooks, run_opt, OptSpec};
use tessera_pass::stats::ModuleStats;
use tessera_pass::Registry;

/// Every pass the binary knows (the registry the fuzz targets and mutant tests use too).
/// Crates with more passes register them in `tessera_compile::registry`.
pub fn registry() -> Registry {
    tessera_compile::registry()
}

#[derive(Args, Debug)]
pub struct OptArgs {
    /// HLO text file to read (`-` for stdin).
    pub file: String,
    /// Passes to run, in order: `a,b,fix(c,d)` (see `tessera passes`).
    #[arg(long)]
    pub passes: String,
    /// A pass option, `PASS.KEY=VALUE` (repeatable).
    #[arg(long = "pass-option", value_name = "PASS.KEY=VALUE")]
    pub pass_options: Vec<String>,
    /// Where to write the result (`-` for stdout).
    #[arg(short = 'o', long = "output", default_value = "-")]
    pub output: String,
    /// Write the module after every pass to DIR/NNNN.<pass>.hlo.
    #[arg(long, value_name = "DIR")]
    pub dump_dir: Option<PathBuf>,
    /// Print a table of pass times to stderr.
    #[arg(long)]
    pub timing: bool,
    /// Do not run the verifier on the input and after each pass.
    #[arg(long)]
    pub no_verify: bool,
    /// Log pass progress to stderr (-v: passes, -vv: details).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// HLO text file to read (`-` for stdin).
    pub file: String,
}

/// The input file (or stdin) as text; non-UTF-8 bytes are refused with their place.
fn read_input(file: &str) -> Result<String> {
    let shown = if file == "-" { "<stdin>" } else { file };
    crate::utf8_text(crate::read_input(file)?, shown)
}

fn write_output(file: &str, text: &str) -> Result<()> {
    if file == "-" {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).context("writing stdout")?;
        out.flush().context("writing stdout")
    } else {
        std::fs::write(file, text).with_context(|| format!("writing {file}"))
    }
}

/// Warnings (a memory limit that can't be met, a fixed point not reached) always reach
/// stderr; `-v` adds info, `-vv` debug, `-vvv` trace.
pub(crate) fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 => tracing::Level::WARN,
        1 => tracing::Level::INFO,
        2 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .try_init();
}

/// `tessera opt FILE --passes a,b [--pass-option p.k=v]... [-o OUT] [--dump-dir DIR] [--timing]`.
pub fn opt(args: &OptArgs) -> Result<()> {
    init_tracing(args.verbose);
    let input = read_input(&args.file)?;
    let spec = OptSpec {
        passes: args.passes.clone(),
        pass_options: args.pass_options.clone(),
        dump_dir: args.dump_dir.clone(),
        no_verify: args.no_verify,
    };
    let name = if args.file == "-" {
        "<stdin>"
    } else {
        &args.file
    };
    let out = run_opt(&input, &spec, &registry(), &default_hooks()).map_err(|e| match e {
        // `f.hlo:3:7: ...`, as the other commands print parse errors.
        tessera_pass::PassError::Parse(msg) => anyhow::anyhow!("{name}:{msg}"),
        e => anyhow::Error::new(e).context(name.to_string()),
    })?;
    write_output(&args.output, &out.text)?;
    if args.timing {
        eprint!("{}", out.report.timing_table());
    }
    Ok(())
}

/// `tessera stats FILE`.
pub fn stats(args: &StatsArgs) -> Result<()> {
    let input = read_input(&args.file)?;
    let module =
        (default_hooks().parse)(&input).map_err(|e| anyhow::anyhow!("{}:{e}", args.file))?;
    write_output("-", &ModuleStats::collect(&module).render())
}

/// `tessera passes`.
pub fn passes() -> Result<()> {
    write_output("-", &registry().describe())
}
