//! `kioku group inspect`: the pools of an MPI job using group checkpoints, and what a restart
//! would recover from them — decided exactly as `kioku_group_recover` decides, without MPI
//! and without changing any pool.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use kioku_group::plan::{decide, look_at, Look};
use kioku_group::Config;
use kioku_pool::MediumChoice;
use std::path::PathBuf;

#[derive(Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    cmd: GroupCommand,
}

#[derive(Subcommand)]
enum GroupCommand {
    /// Show each rank's pool (epoch, prepared or committed, lost or damaged) and what a
    /// restart would recover. Never changes a pool.
    Inspect {
        /// The job's pool directory (KIOKU_DIR).
        #[arg(long, default_value = ".kioku/group")]
        dir: PathBuf,
        /// The job's pool name (KIOKU_NAME).
        #[arg(long, default_value = "job")]
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: GroupArgs) -> Result<i32> {
    let GroupCommand::Inspect { dir, name, json } = args.cmd;
    let cfg = Config {
        dir: dir.clone(),
        name: name.clone(),
        ..Config::default()
    };
    // The job's size: what its checkpoints say, else the pool files there.
    let prefix = format!("{name}.");
    let mut files: Vec<usize> = std::fs::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            n.strip_prefix(&prefix)?.strip_suffix(".pool")?.parse().ok()
        })
        .collect();
    files.sort_unstable();
    let Some(&highest) = files.last() else {
        bail!("no pool named {name}.<rank>.pool under {}", dir.display());
    };
    let probe: Vec<Look> = (0..=highest)
        .map(|r| look_at(&cfg.pool_path(r), MediumChoice::Auto, false))
        .collect();
    let recorded = probe.iter().find_map(|l| l.meta.clone());
    let ranks = recorded.as_ref().map_or(highest + 1, |m| m.ranks);
    let looks: Vec<Look> = (0..ranks)
        .map(|r| {
            probe
                .get(r)
                .cloned()
                .unwrap_or_else(|| look_at(&cfg.pool_path(r), MediumChoice::Auto, false))
        })
        .collect();
    // Decide with the settings the pools were written with.
    let mut with = cfg.clone();
    if let Some(m) = &recorded {
        with.group_size = m.group_size;
        with.parity = m.parity;
        with.partner = m.partner;
        with.rs = m.rs;
    }
    let decision = decide(&looks, &with);
    if json {
        let v = serde_json::json!({
            "dir": dir,
            "name": name,
            "ranks": ranks,
            "pools": looks,
            "restart": match &decision {
                Ok(d) => serde_json::json!({"recovers": true, "decision": d}),
                Err(e) => serde_json::json!({"recovers": false, "error": e.to_string()}),
            },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if decision.is_ok() { 0 } else { 2 });
    }
    match &recorded {
        Some(m) => println!(
            "job {name} under {}: {ranks} ranks, groups of about {}, parity {}, levels kept: local{}{}",
            dir.display(),
            m.group_size,
            m.parity,
            if m.partner { ", partner" } else { "" },
            if m.rs { ", rs" } else { "" }
        ),
        None => println!(
            "job {name} under {}: {ranks} ranks, no checkpoint taken yet",
            dir.display()
        ),
    }
    println!("rank  pool      epoch  state");
    for (r, l) in looks.iter().enumerate() {
        let (pool, epoch, state) = if let Some(f) = &l.fatal {
            ("unusable", "-".to_string(), f.clone())
        } else if let Some(d) = &l.damaged {
            ("damaged", "-".to_string(), d.clone())
        } else if !l.present {
            ("missing", "-".to_string(), String::new())
        } else {
            match &l.meta {
                None => ("present", "0".to_string(), "no checkpoint".to_string()),
                Some(m) => (
                    "present",
                    m.epoch.to_string(),
                    format!(
                        "{} (level {}; partner at {}, rs at {})",
                        if l.prepared {
                            "prepared, not agreed"
                        } else {
                            "committed"
                        },
                        m.level,
                        m.last_partner,
                        m.last_rs
                    ),
                ),
            }
        };
        println!("{r:<5} {pool:<9} {epoch:<6} {state}");
    }
    match &decision {
        Ok(d) => {
            let back = d.rollback.iter().filter(|&&b| b).count();
            let rolled = if back > 0 {
                format!("; {back} rank(s) roll a prepared checkpoint back")
            } else {
                String::new()
            };
            match d.rebuild {
                None => println!("a restart recovers epoch {} on every rank{rolled}", d.epoch),
                Some((t, level)) => println!(
                    "a restart rebuilds ranks {:?} from the {} level and resumes every rank at epoch {t}{rolled}",
                    d.lost,
                    if level == kioku_group::PARTNER { "partner" } else { "rs" }
                ),
            }
            Ok(0)
        }
        Err(e) => {
            println!("a restart cannot recover: {e}");
            Ok(2)
        }
    }
}
