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
        /// Also check every page of a checkpoint pool against its checksum (reads it whole).
        #[arg(long)]
        deep: bool,
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
        PoolCommand::Inspect { path, deep, json } => {
            let report = inspect(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            // A checkpoint pool also shows its two contexts.
            let ckpt = kioku_ckpt::inspect::inspect(&path, &report)?;
            // And with --deep, the pages that fail their checksums.
            let scan = match (&ckpt, deep) {
                (Some(_), true) => {
                    let pool = Pool::open(&path, &kioku_pool::OpenOptions::default())?;
                    Some(kioku_ckpt::scan_pages(&pool, false, 64)?)
                }
                _ => None,
            };
            if json {
                let mut v = serde_json::to_value(&report)?;
                v["checkpoint"] = serde_json::to_value(&ckpt)?;
                if let Some(s) = &scan {
                    v["pages"] = serde_json::json!({
                        "repairable": s.repairable,
                        "damaged": s.damaged,
                        "more_damaged": s.truncated,
                    });
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{report}");
                if let Some(c) = &ckpt {
                    print!("{c}");
                }
                if let Some(s) = &scan {
                    if s.damaged.is_empty() && s.repairable == 0 {
                        println!("pages     every page of epoch {} verifies", s.epoch);
                    }
                    if s.repairable > 0 {
                        println!(
                            "pages     {} page(s) fail in the valid context, intact in the other (recovery repairs them)",
                            s.repairable
                        );
                    }
                    for (region, page) in &s.damaged {
                        println!("pages     region '{region}' page {page} fails its checksum in both contexts");
                    }
                }
            }
            if report.summary != "healthy" {
                // Exit status tells scripts the pool is not usable as it is.
                bail!("{}: {}", path.display(), report.summary);
            }
            if let Some(s) = scan.filter(|s| !s.damaged.is_empty()) {
                bail!(
                    "{}: {} page(s) of the checkpoint fail their checksums in both contexts",
                    path.display(),
                    s.damaged.len() + usize::from(s.truncated)
                );
            }
            Ok(())
        }
    }
}
