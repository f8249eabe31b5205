//! `kioku`: the command-line front of kioku.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod ec;
mod group_cmd;
mod hot_cmd;
mod pool_cmd;
mod run_cmd;

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
    /// Run a program under kioku: its memory is checkpointed into a pool every interval.
    Run(run_cmd::RunArgs),
    /// Rebuild a program from its last checkpoint and let it run on.
    Restore(run_cmd::RestoreArgs),
    /// Ask a running program's monitor for a checkpoint now; returns when it is durable.
    Checkpoint(run_cmd::CheckpointArgs),
    /// Show what a process checkpoint holds.
    Inspect(run_cmd::InspectArgs),
    /// Examine the pools of an MPI job's group checkpoints (what a restart would recover).
    Group(group_cmd::GroupArgs),
    /// Which pages a process accesses: per-page counts, and a heat map (HPS's page_acs).
    Hot(hot_cmd::HotArgs),
}

fn main() {
    // Logs go to stderr; KIOKU_LOG (tracing filter syntax) overrides the default, which shows
    // the one-time choices (medium, tracker backend) and every warning.
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_) | Command::Restore(_)) {
        // Data commands end quietly when their reader goes (`kioku inspect … | head`), as
        // other command-line tools do; a monitor must outlive its program's pipes.
        // SAFETY: setting a signal disposition of our own process before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    // A monitored program owns stderr: only warnings there unless asked.
    let default = match cli.command {
        Command::Run(_) | Command::Restore(_) | Command::Group(_) => "warn",
        _ => "warn,kioku_pool=info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KIOKU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .init();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("kioku: {e:#}");
            std::process::exit(1);
        }
    }
}

/// The exit status: the program's for run and restore.
fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Pool(a) => pool_cmd::run(a).map(|_| 0),
        Command::Ec(a) => ec::run(a).map(|_| 0),
        Command::Run(a) => run_cmd::run(a),
        Command::Restore(a) => run_cmd::restore(a),
        Command::Checkpoint(a) => run_cmd::checkpoint(a).map(|_| 0),
        Command::Inspect(a) => run_cmd::inspect(a).map(|_| 0),
        Command::Group(a) => group_cmd::run(a),
        Command::Hot(a) => hot_cmd::run(a),
    }
}
