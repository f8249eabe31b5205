//! `kioku`: the command-line front of kioku.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod ec;
mod pool_cmd;

/// kioku makes in-memory state survive crashes, power loss and node failures.
#[derive(Parser)]
#[command(name = "kioku", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create and examine pool files.
    Pool(pool_cmd::PoolArgs),
    /// Erasure-code files into shards and rebuild them (Reed–Solomon).
    Ec(ec::EcArgs),
}

fn main() {
    // Logs go to stderr; KIOKU_LOG (tracing filter syntax) overrides the default, which shows
    // the one-time choices (medium, tracker backend) and every warning.
    let filter = tracing_subscriber::EnvFilter::try_from_env("KIOKU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kioku_pool=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .init();
    if let Err(e) = run(Cli::parse()) {
        eprintln!("kioku: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Pool(a) => pool_cmd::run(a),
        Command::Ec(a) => ec::run(a),
    }
}
