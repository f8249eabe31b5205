//! `kioku pool …`: create a pool, inspect one.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use kioku_pool::inspect::inspect;
use kioku_pool::media::{MediumChoice, MediumKind};
use kioku_pool::{CreateOptions, Pool};
use std::path::PathBuf;

#[derive(Args)]
pub struct PoolArgs {
    #[command(subcommand)]
    cmd: PoolCommand,
}

#[derive(Subcommand)]
enum PoolCommand {
    /// Create an empty pool file (refuses to overwrite anything).
    Create {
        path: PathBuf,
        /// What the pool will hold (a tag other programs check).
        #[arg(long, default_value = "kioku.user")]
        kind: String,
        /// dax, file or shm; default: dax where MAP_SYNC works, shm on tmpfs, else file.
        #[arg(long)]
        medium: Option<MediumKind>,
        /// Bytes to reserve for data now (the pool grows on demand).
        #[arg(long, default_value_t = 0)]
        size: u64,
    },
    /// Show a pool's header, sections and commit state, and any damage. Never changes it.
    Inspect {
        path: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: PoolArgs) -> Result<()> {
    match args.cmd {
        PoolCommand::Create {
            path,
            kind,
            medium,
            size,
        } => {
            let mut o = CreateOptions::new(&kind);
            o.medium = medium.map_or(MediumChoice::Auto, MediumChoice::Exactly);
            o.data_len = size;
            let pool = Pool::create(&path, &o)?;
            println!(
                "created {} on {} ({})",
                path.display(),
                pool.medium().kind(),
                pool.medium().kind().durability()
            );
            Ok(())
        }
        PoolCommand::Inspect { path, json } => {
            let report = inspect(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            // A checkpoint pool also shows its two contexts.
            let ckpt = kioku_ckpt::inspect::inspect(&path, &report)?;
            if json {
                let mut v = serde_json::to_value(&report)?;
                v["checkpoint"] = serde_json::to_value(&ckpt)?;
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{report}");
                if let Some(c) = &ckpt {
                    print!("{c}");
                }
            }
            if report.summary != "healthy" {
                // Exit status tells scripts the pool is not usable as it is.
                bail!("{}: {}", path.display(), report.summary);
            }
            Ok(())
        }
    }
}
