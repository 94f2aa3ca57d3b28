//! `tessera`: the pass driver.

mod opt;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tessera", version, about = "An XLA-style HLO pass pipeline")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run passes over an HLO module and print the result.
    Opt(opt::OptArgs),
    /// Count what an HLO module holds: opcodes, shardings, collectives, parameters.
    Stats(opt::StatsArgs),
    /// List the passes `opt` knows, with their options.
    Passes,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match &cli.command {
        Command::Opt(a) => opt::opt(a),
        Command::Stats(a) => opt::stats(a),
        Command::Passes => opt::passes(),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
