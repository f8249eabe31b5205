//! `kioku group inspect`: the pools of an MPI job using group checkpoints, and what a restart
//! would recover from them — decided exactly as `kioku_group_recover` decides, without MPI
//! and without changing any pool. `--deep` also checks every page checksum (data, parity,
//! journals, logs), as recovery does.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use kioku_group::plan::{decide, look_at, Deep, Look};
use kioku_group::{Config, PARTNER, RS};
use kioku_pool::MediumChoice;
use std::path::PathBuf;

#[derive(Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    cmd: GroupCommand,
}

#[derive(Subcommand)]
enum GroupCommand {
    /// Show each rank's pool (epoch, prepared or committed, what each level's parity encodes,
    /// lost or damaged) and what a restart would recover. Never changes a pool.
    Inspect {
        /// The job's pool directory (KIOKU_DIR).
        #[arg(long, default_value = ".kioku/group")]
        dir: PathBuf,
        /// The job's pool name (KIOKU_NAME).
        #[arg(long, default_value = "job")]
        name: String,
        /// Check every page checksum too (reads every pool whole).
        #[arg(long)]
        deep: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

fn level_name(id: u8) -> &'static str {
    if id == PARTNER {
        "partner"
    } else {
        "rs"
    }
}

/// What the deep look found, in words.
fn damage_lines(d: &Deep) -> Vec<String> {
    let mut v: Vec<String> = d
        .data
        .iter()
        .map(|x| {
            format!(
                "region '{}' page {} damaged in both contexts",
                x.region, x.page
            )
        })
        .collect();
    if d.repairable > 0 {
        v.push(format!(
            "{} page(s) damaged in the valid context only (repaired from the other)",
            d.repairable
        ));
    }
    v.extend(d.parity.iter().map(|(l, h, q)| {
        format!(
            "{} parity: held stripe {h} page {q} damaged",
            level_name(*l)
        )
    }));
    v.extend(d.journal.iter().map(|(l, p)| {
        format!(
            "{} journal: data page {p}'s saved value damaged",
            level_name(*l)
        )
    }));
    v.extend(
        d.journal_unusable
            .iter()
            .map(|l| format!("{} journal: index damaged", level_name(*l))),
    );
    v.extend(
        d.log_unusable
            .iter()
            .map(|l| format!("{} redo log: damaged", level_name(*l))),
    );
    v.extend(d.log_damaged.iter().map(|(l, h, q)| {
        format!(
            "{} redo log: new parity of held stripe {h} page {q} damaged",
            level_name(*l)
        )
    }));
    if d.too_much {
        v.push("more damage than listed: the rank is rebuilt whole".into());
    }
    v
}

pub fn run(args: GroupArgs) -> Result<i32> {
    let GroupCommand::Inspect {
        dir,
        name,
        deep,
        json,
    } = args.cmd;
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
        .map(|r| look_at(&cfg.pool_path(r), MediumChoice::Auto, deep))
        .collect();
    let recorded = probe.iter().find_map(|l| l.meta.clone());
    let ranks = recorded.as_ref().map_or(highest + 1, |m| m.ranks);
    let looks: Vec<Look> = (0..ranks)
        .map(|r| {
            probe
                .get(r)
                .cloned()
                .unwrap_or_else(|| look_at(&cfg.pool_path(r), MediumChoice::Auto, deep))
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
            "deep": deep,
            "pools": looks,
            "restart": match &decision {
                Ok(d) => serde_json::json!({"recovers": true, "decision": d}),
                Err(e) => serde_json::json!({"recovers": false, "error": e.to_string()}),
            },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if decision.is_ok() { 0 } else { 2 });
    }
    let kept: Vec<u8> = recorded
        .as_ref()
        .map(|m| {
            [(m.partner, PARTNER), (m.rs, RS)]
                .into_iter()
                .filter(|x| x.0)
                .map(|x| x.1)
                .collect()
        })
        .unwrap_or_default();
    match &recorded {
        Some(m) => {
            let mut groups: Vec<Vec<usize>> = looks
                .iter()
                .filter_map(|l| l.meta.as_ref().map(|m| m.members.clone()))
                .collect();
            groups.sort();
            groups.dedup();
            let shown: Vec<String> = groups.iter().map(|g| format!("{g:?}")).collect();
            let g = groups.first().map_or(m.group_size, Vec::len);
            let rs = if m.rs {
                format!(", rs = RS({}, {}) per group", g - m.parity, m.parity)
            } else {
                String::new()
            };
            println!(
                "job {name} under {}: {ranks} ranks in {} group(s) {}; levels kept: local{}{rs}",
                dir.display(),
                groups.len(),
                shown.join(" "),
                if m.partner { ", partner" } else { "" },
            )
        }
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
                Some(m) => {
                    let levels: Vec<String> = kept
                        .iter()
                        .map(|&id| {
                            let s = l.record.as_ref().and_then(|rec| rec.level(id));
                            let at = s.map_or(0, |s| s.epoch);
                            let mut t = if at == 0 {
                                format!("{} not encoded yet", level_name(id))
                            } else {
                                format!("{} encodes epoch {at}", level_name(id))
                            };
                            if let Some(f) = s.and_then(|s| s.flight.as_ref()) {
                                t.push_str(&format!(
                                    ", encoding of epoch {} {}",
                                    f.epoch,
                                    if f.committed { "committed" } else { "logged" }
                                ));
                            }
                            t
                        })
                        .collect();
                    let mut state = format!(
                        "{} (level {}",
                        if l.prepared {
                            "prepared, not agreed"
                        } else {
                            "committed"
                        },
                        m.level
                    );
                    for t in levels {
                        state.push_str("; ");
                        state.push_str(&t);
                    }
                    state.push(')');
                    ("present", m.epoch.to_string(), state)
                }
            }
        };
        println!("{r:<5} {pool:<9} {epoch:<6} {state}");
        for d in l.deep.iter().flat_map(damage_lines) {
            println!("                   {d}");
        }
    }
    if deep {
        let damaged = looks
            .iter()
            .filter(|l| l.deep.as_ref().is_some_and(|d| d.any() || d.repairable > 0))
            .count();
        if damaged == 0 {
            println!("every page checksum verified");
        }
    }
    match &decision {
        Ok(d) => {
            let back = d.rollback.iter().filter(|&&b| b).count();
            let rolled = if back > 0 {
                format!("; {back} rank(s) roll a prepared checkpoint back")
            } else {
                String::new()
            };
            for l in &d.levels {
                if let Some(f) = l.forward {
                    let n = l.apply.iter().filter(|&&a| a).count();
                    if n > 0 {
                        println!(
                            "a restart finishes the {} encoding of epoch {f} on {n} rank(s)",
                            level_name(l.id)
                        );
                    }
                }
            }
            match d.rebuild {
                None => println!("a restart recovers epoch {} on every rank{rolled}", d.epoch),
                Some((t, level)) if d.lost.is_empty() => println!(
                    "a restart rebuilds the damaged pages from the {} level and resumes every rank at epoch {t}{rolled}",
                    level_name(level)
                ),
                Some((t, level)) => println!(
                    "a restart rebuilds ranks {:?} from the {} level and resumes every rank at epoch {t}{rolled}",
                    d.lost,
                    level_name(level)
                ),
            }
            if d.rebuild.is_none() && !d.decode.is_empty() {
                println!("it rebuilds the damaged parity and journal pages from the parity");
            }
            for id in &d.refresh {
                println!("it encodes the {} level afresh", level_name(*id));
            }
            Ok(0)
        }
        Err(e) => {
            println!("a restart cannot recover: {e}");
            Ok(2)
        }
    }
}
