//! Recovery after a restart: agree on an epoch, roll back what was not agreed, rebuild lost
//! ranks from the survivors' data and the parity, protect the group again.

use crate::error::{GroupError, Result};
use crate::group::internals::{
    agree_all, bitmap, is_damage, journal, parity, user_region, DECODE_TAG,
};
use crate::group::Engine;
use crate::group::{Group, RecoveryReport};
use crate::layout::Groups;
use crate::meta::GroupMeta;
use kioku_ckpt::{commit_state, EngineOptions, MovableSelfSpace};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What one rank found in its pool.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Look {
    present: bool,
    fatal: Option<String>,
    /// The last checkpoint (possibly only prepared) and, if prepared, the one before.
    meta: Option<GroupMeta>,
    prepared: bool,
    previous: Option<GroupMeta>,
}

fn look(g: &Group) -> Look {
    let cfg = g.config();
    let path = cfg.pool_path(g.rank());
    let mut out = Look {
        present: false,
        fatal: None,
        meta: None,
        prepared: false,
        previous: None,
    };
    if !path.exists() {
        return out;
    }
    let opts = EngineOptions {
        medium: cfg.medium,
        ..Default::default()
    };
    let st = match commit_state(&path, &opts) {
        Ok(st) => st,
        Err(e) if is_damage(&e) => {
            // A damaged pool is a lost rank: set it aside (never overwrite it silently).
            let aside = path.with_extension("pool.damaged");
            tracing::warn!(path = %path.display(), error = %e, aside = %aside.display(), "damaged pool: rebuilding this rank from the group");
            if let Err(e) = std::fs::rename(&path, &aside) {
                out.fatal = Some(format!(
                    "{}: damaged ({e}) and cannot be moved aside",
                    path.display()
                ));
            }
            return out;
        }
        Err(e) => {
            out.fatal = Some(e.to_string());
            return out;
        }
    };
    out.present = true;
    if st.epoch == 0 {
        return out; // Created, never checkpointed.
    }
    let decode = |b: &[u8]| GroupMeta::decode(b);
    match decode(&st.metadata) {
        Some(m) => out.meta = Some(m),
        None => {
            out.fatal = Some(format!(
                "{}: a checkpoint pool, but not of a kioku group job; use another KIOKU_DIR or KIOKU_NAME",
                path.display()
            ));
            return out;
        }
    }
    out.prepared = st.prepared;
    out.previous = st.previous_metadata.as_deref().and_then(decode);
    out
}

pub(crate) fn recover(g: &mut Group) -> Result<RecoveryReport> {
    let t0 = Instant::now();
    let (rank, n) = (g.rank(), g.size());
    let mine = look(g);
    let text = serde_json::to_vec(&mine).expect("look serialises");
    let looks: Vec<Look> = {
        g.comm_mut()
            .allgather_var(&text)?
            .iter()
            .map(|b| serde_json::from_slice(b).expect("looks of the same library"))
            .collect()
    };
    if let Some((r, l)) = looks.iter().enumerate().find(|(_, l)| l.fatal.is_some()) {
        return Err(GroupError::Remote {
            rank: r,
            detail: l.fatal.clone().unwrap_or_default(),
        });
    }
    let dir = g.config().dir.display().to_string();
    if looks.iter().all(|l| !l.present) {
        return Err(GroupError::State(format!(
            "no rank has a usable pool under {dir}: nothing to recover; remove the directory to start afresh"
        )));
    }

    // The epoch: the lowest any survivor holds; a survivor one ahead holds it as a prepared
    // checkpoint's predecessor (nobody finished the next one, since that needs everyone).
    let epoch_of = |l: &Look| l.meta.as_ref().map_or(0, |m| m.epoch);
    let e = looks
        .iter()
        .filter(|l| l.present)
        .map(epoch_of)
        .min()
        .unwrap_or(0);
    let mut state: Vec<Option<GroupMeta>> = vec![None; n];
    let mut rollback = vec![false; n];
    for (r, l) in looks.iter().enumerate().filter(|(_, l)| l.present) {
        let at = epoch_of(l);
        if at == e {
            state[r] = l.meta.clone();
        } else if at == e + 1 && l.prepared && l.previous.as_ref().map(|m| m.epoch) == Some(e) {
            state[r] = l.previous.clone();
            rollback[r] = true;
        } else if at == e + 1 && l.prepared && e == 0 {
            rollback[r] = true;
        } else {
            return Err(GroupError::State(format!(
                "rank {r}'s pool is at group epoch {at}, another's at {e}: the pools under {dir} are not of one run; remove them to start afresh"
            )));
        }
        if let Some(m) = &state[r] {
            if m.ranks != n {
                return Err(GroupError::SizeChanged {
                    dir,
                    was: m.ranks,
                    now: n,
                });
            }
            let c = g.config();
            if (m.group_size, m.parity, m.partner, m.rs)
                != (c.group_size, c.parity, c.partner, c.rs)
            {
                return Err(GroupError::Config(format!(
                    "the pools under {dir} were written with group_size={}, parity={}, levels={}{}; restart with the same settings",
                    m.group_size,
                    m.parity,
                    if m.partner { "partner," } else { "" },
                    if m.rs { "rs" } else { "" }
                )));
            }
        }
    }
    let lost: Vec<usize> = (0..n).filter(|&r| !looks[r].present).collect();

    // The groups as the checkpoint recorded them (a restart may place ranks on other nodes).
    if e > 0 {
        let mut recorded: Vec<Vec<usize>> =
            state.iter().flatten().map(|m| m.members.clone()).collect();
        recorded.sort();
        recorded.dedup();
        for r in 0..n {
            if !recorded.iter().any(|grp| grp.contains(&r)) {
                return Err(GroupError::State(format!(
                    "rank {r} and every other member of its group are lost (pools missing or damaged: {lost:?}); nothing can rebuild them — restore those pools, or remove all pools to start afresh"
                )));
            }
        }
        g.set_groups(Groups { groups: recorded })?;
    }

    let mut chosen_level: Option<(u64, u8)> = None;
    if !lost.is_empty() && e > 0 {
        // The newest level whose parity can rebuild every group's losses — decided before any
        // pool is touched, so that a refusal changes nothing.
        let any = state.iter().flatten().next().expect("a survivor").clone();
        let groups = g.groups().clone();
        let mut candidates: Vec<(u64, u8)> = g
            .level_ids()
            .into_iter()
            .map(|id| (any.last(id), id))
            .filter(|&(at, _)| at > 0)
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        let lost_in = |grp: &[usize]| -> Vec<usize> {
            grp.iter()
                .enumerate()
                .filter(|(_, r)| lost.contains(r))
                .map(|(p, _)| p)
                .collect()
        };
        let chosen = candidates.iter().find(|&&(_, id)| {
            groups
                .groups
                .iter()
                .all(|grp| g.scheme_for(id, grp.len()).tolerates(&lost_in(grp)))
        });
        let Some(&(t, level)) = chosen else {
            if candidates.is_empty() {
                return Err(GroupError::NoRedundancy { ranks: lost });
            }
            let (gi, grp) = groups
                .groups
                .iter()
                .enumerate()
                .max_by_key(|(_, grp)| lost_in(grp).len())
                .expect("a group");
            let m = g.config().parity;
            return Err(GroupError::TooManyLost {
                group: gi,
                lost: lost_in(grp).len(),
                ranks: grp.iter().copied().filter(|r| lost.contains(r)).collect(),
                m,
                need: lost_in(grp).len() - m,
            });
        };
        chosen_level = Some((t, level));
    }
    // Survivors reopen their pools at epoch `e`.
    let opened = (|| -> Result<()> {
        if !looks[rank].present {
            return Ok(());
        }
        let o = kioku_pool::OpenOptions {
            medium: g.config().medium,
            kind: Some(kioku_ckpt::POOL_KIND.into()),
            ..Default::default()
        };
        let pool = kioku_pool::Pool::open(&g.config().pool_path(rank), &o)
            .map_err(kioku_ckpt::CkptError::from)?;
        let (engine, _) =
            Engine::recover_in_with(pool, MovableSelfSpace::default(), rollback[rank])?;
        let mut engine = engine;
        // Exact written pages, never whole regions: a page reported written costs a delta
        // computation and a zero check here, more than its write-protect fault.
        engine.set_adaptive(false)?;
        let meta = state[rank].clone();
        let table = meta
            .as_ref()
            .map(|m| m.tables[g.group().1].clone())
            .unwrap_or_default();
        g.set_engine(engine, table, meta);
        Ok(())
    })();
    agree_all(g.comm_mut(), opened.map_err(|e| e.to_string()))?;
    let rolled_back = rollback.iter().filter(|&&b| b).count();

    let mut report = RecoveryReport {
        epoch: e,
        lost: lost.clone(),
        level: 0,
        rolled_back,
        bytes_received: 0,
        total: Default::default(),
    };
    if lost.is_empty() {
        report.total = t0.elapsed();
        return Ok(report);
    }
    if e == 0 {
        // No checkpoint was ever taken: the lost ranks start with empty pools.
        let made = if looks[rank].present {
            Ok(())
        } else {
            g.create_fresh_pool().map_err(|e| e.to_string())
        };
        agree_all(g.comm_mut(), made)?;
        report.total = t0.elapsed();
        return Ok(report);
    }

    let (t, level) = chosen_level.expect("chosen above");
    report.level = level;
    report.epoch = t;
    tracing::info!(?lost, level, epoch = t, "rebuilding lost ranks");

    // Survivors go back to epoch `t` where a later local checkpoint moved on: the journal of
    // `level` holds the pages' values as of `t`.
    if looks[rank].present && t < e {
        let j = g.memory(&journal(level)).expect("journal of a level kept");
        let b = g.memory(&bitmap(level)).expect("bitmap of a level kept");
        let pages = g.table().pages();
        for p in b.set_bits().into_iter().filter(|&p| p < pages) {
            let (entry, i) = g.table().locate(p).expect("page in table");
            let region = g.memory(&user_region(entry.id)).expect("region");
            let dst = region.page_mut(i).expect("page");
            dst.copy_from_slice(j.page(p).expect("journal page"));
        }
    }

    // Lost ranks: a new pool with their regions, as the group recorded them.
    let made = (|| -> Result<()> {
        if looks[rank].present {
            return Ok(());
        }
        let pos = g.group().1;
        let rec = state
            .iter()
            .flatten()
            .find(|m| m.members.contains(&rank))
            .expect("a survivor of this group")
            .clone();
        let table = rec.tables[pos].clone();
        g.create_fresh_pool()?;
        for r in &table.regions {
            g.create_user_region(r.id, r.bytes)?;
        }
        let q = rec.stripe_pages(level) as usize;
        let mut meta = rec;
        meta.rank = rank;
        g.set_table_meta(table, meta);
        // The parity it held at that level, to be decoded as well.
        let (scheme, _) = g.level_scheme(level);
        for (j, _) in scheme.held(pos) {
            g.ensure(&parity(level, j), q * g.page_size())?;
        }
        Ok(())
    })();
    agree_all(g.comm_mut(), made.map_err(|e| e.to_string()))?;

    let q = state
        .iter()
        .flatten()
        .next()
        .expect("a survivor")
        .stripe_pages(level);
    report.bytes_received = decode(g, level, q, &lost)?;

    // Protected again before the program goes on: the lost ranks' parity of `level` was
    // decoded with their data; every other level is encoded afresh; all of it committed.
    g.rebuild_checkpoint(level)?;
    report.total = t0.elapsed();
    Ok(report)
}

/// Rebuilds the data of lost members of each stripe from `k` surviving shards per stripe,
/// sent in segments to the lost member, decoded there. Returns the bytes this rank received.
fn decode(g: &mut Group, level: u8, q_total: u64, lost: &[usize]) -> Result<u64> {
    let members: Vec<usize> = g.group_members().to_vec();
    let (_, pos, glen) = g.group();
    let (scheme, codec) = g.level_scheme(level);
    let (k, m) = (scheme.k, scheme.m);
    let page = g.page_size();
    let seg = g.config().segment_pages as u64;
    let nseg = q_total.div_ceil(seg);
    let lost_pos: Vec<usize> = (0..glen).filter(|&p| lost.contains(&members[p])).collect();
    let my_pages = g.table().pages();
    let mut received = 0u64;
    let mut piece = vec![0u8; seg as usize * page];
    let mut inbox = Vec::new();
    let view = g.view();
    for j in 0..scheme.g {
        let contributors = scheme.contributors(j);
        let holders = scheme.holders(j);
        // Shards: data 0..k then parity k..k+m, by position.
        let shard_pos: Vec<usize> = contributors.iter().chain(&holders).copied().collect();
        let survivors: Vec<usize> = (0..k + m)
            .filter(|&s| !lost_pos.contains(&shard_pos[s]))
            .take(k)
            .collect();
        // Every lost shard of the stripe — data of a lost contributor, parity of a lost
        // holder — is decoded by the member that held it.
        for (ix, &x) in shard_pos.iter().enumerate() {
            if !lost_pos.contains(&x) {
                continue;
            }
            if let Some(&s) = survivors.iter().find(|&&s| shard_pos[s] == pos) {
                // Send this rank's shard of stripe j, segment by segment.
                for sg in 0..nseg {
                    let (lo, hi) = (sg * seg, ((sg + 1) * seg).min(q_total));
                    let len = (hi - lo) as usize * page;
                    piece[..len].fill(0);
                    let held = (s >= k).then(|| g.memory(&parity(level, j))).flatten();
                    for q in lo..hi {
                        let dst = &mut piece[(q - lo) as usize * page..][..page];
                        let src = if s < k {
                            view.live(q * k as u64 + s as u64)
                        } else {
                            held.as_ref().and_then(|m| m.page(q))
                        };
                        if let Some(src) = src {
                            dst.copy_from_slice(src);
                        }
                    }
                    let to = members[x];
                    g.comm_mut().send(to, DECODE_TAG, &piece[..len])?;
                }
            } else if x == pos {
                let mut out = vec![0u8; seg as usize * page];
                let held = (ix >= k).then(|| g.memory(&parity(level, j))).flatten();
                for sg in 0..nseg {
                    let (lo, hi) = (sg * seg, ((sg + 1) * seg).min(q_total));
                    let len = (hi - lo) as usize * page;
                    let mut got: Vec<(usize, Vec<u8>)> = Vec::with_capacity(k);
                    for &s in &survivors {
                        let from = members[shard_pos[s]];
                        g.comm_mut().recv_into(from, DECODE_TAG, &mut inbox)?;
                        if inbox.len() != len {
                            return Err(GroupError::Remote {
                                rank: from,
                                detail: format!(
                                    "decode piece of {} bytes, expected {len}",
                                    inbox.len()
                                ),
                            });
                        }
                        received += len as u64;
                        got.push((s, inbox.clone()));
                    }
                    let have: Vec<(usize, &[u8])> =
                        got.iter().map(|(s, b)| (*s, b.as_slice())).collect();
                    codec.decode(&have, &mut [(ix, &mut out[..len])])?;
                    for q in lo..hi {
                        let bytes = &out[(q - lo) as usize * page..][..page];
                        if ix < k {
                            let p = q * k as u64 + ix as u64;
                            if p >= my_pages {
                                break;
                            }
                            let (entry, i) = g.table().locate(p).expect("page in table");
                            let region = g.memory(&user_region(entry.id)).expect("region");
                            region.page_mut(i).expect("page").copy_from_slice(bytes);
                        } else if let Some(dst) = held.as_ref().and_then(|m| m.page_mut(q)) {
                            dst.copy_from_slice(bytes);
                        }
                    }
                }
            }
        }
    }
    Ok(received)
}
