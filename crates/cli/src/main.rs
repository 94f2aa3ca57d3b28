//! `tessera`: the pass-driver binary.
//!
//! Every subcommand reads HLO text (a file or `-` for stdin) or an `xla.HloModuleProto`, and
//! reports any error on stderr with exit code 1. `compare` and `compile --verify` exit 1 on a
//! verdict of NOT equivalent and 3 on *not comparable* (docs/runtime.md). A panic (exit 101)
//! is a bug.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tessera_hlo::text::{parse_module, print_module, PrintOptions};
use tessera_hlo::Module;

mod autoshard;
mod compile;
mod embedding;
mod memory;
mod opt;
mod run;
mod summary;

#[derive(Parser)]
#[command(name = "tessera", version, about = "An XLA-style HLO pass pipeline")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a module in canonical HLO text.
    Fmt {
        /// HLO text file, or `-` for stdin.
        file: String,
        /// Print the short form (no `%`, operands without shapes).
        #[arg(long)]
        short: bool,
        /// Write to this file instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Parse and verify a module; exit 0 when it is valid.
    Verify {
        /// HLO text file, or `-` for stdin.
        file: String,
    },
    /// Convert HLO text to a serialized xla.HloModuleProto.
    ToProto {
        /// HLO text file, or `-` for stdin.
        file: String,
        /// The .pb file to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Print a serialized xla.HloModuleProto as HLO text.
    FromProto {
        /// The .pb file to read, or `-` for stdin.
        file: String,
        #[arg(long)]
        short: bool,
        /// Print the module even when the verifier refuses it (the structural checks that
        /// make the text parse again still apply).
        #[arg(long)]
        no_verify: bool,
    },
    /// Print a short summary of a module: computations, instructions, parameters, shardings.
    Summary {
        /// HLO text file, or `-` for stdin.
        file: String,
    },
    /// Compile a frontend's sharded module into the program every device runs: propagation,
    /// dedup, SPMD partitioning, scheduling, rematerialization; optionally verified on PJRT.
    Compile(compile::CompileArgs),
    /// Why each collective of the partitioned program exists, and its bytes.
    Explain(compile::ExplainArgs),
    /// Run passes over an HLO module and print the result.
    Opt(opt::OptArgs),
    /// Count what an HLO module holds: opcodes, shardings, collectives, parameters.
    Stats(opt::StatsArgs),
    /// List the passes `opt` knows, with their options.
    Passes,
    /// Peak memory along the schedule, where it occurs and the largest buffers live there;
    /// optionally after a pipeline, and an SVG of memory over the schedule.
    Memory(memory::MemoryArgs),
    /// Run a module on N PJRT CPU devices with .npy or random inputs.
    Run(run::RunArgs),
    /// Run an original module on 1 device and its partitioned form on N; compare the outputs.
    Compare(run::CompareArgs),
    /// TPU embeddings: table layout, input preprocessing into SparseCore CSR buffers, lookups and
    /// optimizer steps on PJRT CPU devices.
    #[command(subcommand)]
    Embedding(embedding::EmbeddingCommand),
    /// Automatic sharding: solve an IOPDDL problem.
    #[command(subcommand)]
    AutoShard(autoshard::AutoShardCommand),
}

pub(crate) fn read_input(file: &str) -> Result<Vec<u8>> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading stdin")?;
        Ok(buf)
    } else {
        fs::read(file).with_context(|| format!("reading {file}"))
    }
}

/// The input as text; bytes that are not UTF-8 are refused with their line, column and
/// byte offset (`f.hlo:3:31: byte 52 (0xff) is not UTF-8 text`).
pub(crate) fn utf8_text(bytes: Vec<u8>, shown: &str) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let b = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let before = &b[..at];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |p| p + 1);
        // Columns count characters, as the parser's do; the line up to `at` is valid UTF-8.
        let col = String::from_utf8_lossy(&b[line_start..at]).chars().count() + 1;
        anyhow::anyhow!(
            "{shown}:{line}:{col}: byte {at} (0x{:02x}) is not UTF-8 text",
            b[at]
        )
    })
}

/// Reads and parses HLO text; parse errors are prefixed with the file name (`f.hlo:12:7: ...`).
fn load_text(file: &str) -> Result<Module> {
    let shown = if file == "-" { "<stdin>" } else { file };
    let text = utf8_text(read_input(file)?, shown)?;
    parse_module(&text).map_err(|e| anyhow::anyhow!("{shown}:{e}"))
}

/// Runs the verifier on a module read from `shown`; the error lists every finding.
pub(crate) fn check_verifies(module: &Module, shown: &str) -> Result<()> {
    tessera_hlo::verify::verify(module, &tessera_hlo::verify::VerifyOptions::default())
        .map_err(|errors| anyhow::anyhow!("{shown}: invalid module\n{errors}"))
}

fn write_output(output: Option<&Path>, text: &str) -> Result<()> {
    match output {
        Some(p) if p != Path::new("-") => {
            fs::write(p, text).with_context(|| format!("writing {}", p.display()))
        }
        _ => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()) {
                // A closed pipe (`tessera fmt x | head`) is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("writing stdout"),
            }
        }
    }
}

fn print_options(short: bool) -> PrintOptions {
    if short {
        PrintOptions::short()
    } else {
        PrintOptions::default()
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Fmt {
            file,
            short,
            output,
        } => {
            let module = load_text(&file)?;
            write_output(
                output.as_deref(),
                &print_module(&module, &print_options(short)),
            )
        }
        Command::Verify { file } => {
            let module = load_text(&file)?;
            check_verifies(&module, &file)?;
            eprintln!("{file}: ok ({} instructions)", module.instruction_count());
            Ok(())
        }
        Command::ToProto { file, output } => {
            let module = load_text(&file)?;
            let bytes = tessera_hlo::proto::to_proto_bytes(&module);
            fs::write(&output, bytes).with_context(|| format!("writing {}", output.display()))
        }
        Command::FromProto {
            file,
            short,
            no_verify,
        } => {
            let bytes = read_input(&file)?;
            let module = tessera_hlo::proto::from_proto_bytes(&bytes)
                .with_context(|| format!("{file}: bad HloModuleProto"))?;
            if no_verify {
                // The one path that prints a module the verifier has not accepted (a wrong
                // operand or callee count prints as text the parser refuses): it must still
                // print as text that reads back.
                tessera_hlo::text::check_reparses(&module)
                    .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
            } else {
                check_verifies(&module, &file)?;
            }
            write_output(None, &print_module(&module, &print_options(short)))
        }
        Command::Summary { file } => {
            let module = load_text(&file)?;
            write_output(None, &summary::summarize(&module))
        }
        Command::Compile(args) => compile::compile(&args),
        Command::Explain(args) => write_output(None, &compile::explain(&args)?),
        Command::Opt(args) => opt::opt(&args),
        Command::Stats(args) => opt::stats(&args),
        Command::Passes => opt::passes(),
        Command::Memory(args) => write_output(None, &memory::memory(&args)?),
        Command::Run(args) => write_output(None, &run::run(&args, run::parse_text)?),
        Command::Embedding(cmd) => write_output(None, &embedding::embedding(&cmd)?),
        Command::AutoShard(cmd) => write_output(None, &autoshard::auto_shard(&cmd)?),
        Command::Compare(args) => {
            let (report, outcome) = run::compare(&args, run::parse_text)?;
            write_output(None, &report)?;
            if outcome != tessera_runtime::Outcome::Equivalent {
                return Err(run::VerdictError(outcome).into());
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    // Usage errors exit 1 like every other error; --help and --version exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            match e.downcast_ref::<run::VerdictError>() {
                Some(v) => ExitCode::from(v.0.exit_code()),
                None => ExitCode::FAILURE,
            }
        }
    }
}
