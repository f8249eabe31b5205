//! Recovery after a restart: agree on an epoch, roll back what was not agreed, rebuild lost
//! ranks from the survivors' data and the parity, protect the group again.

use crate::error::{GroupError, Result};
use crate::group::internals::{agree_all, bitmap, journal, parity, user_region, DECODE_TAG};
use crate::group::Engine;
use crate::group::{Group, RecoveryReport};
use crate::plan::{decide, look_at, Decision, Look};
use kioku_ckpt::MovableSelfSpace;
use std::time::Instant;

pub(crate) fn recover(g: &mut Group) -> Result<RecoveryReport> {
    let t0 = Instant::now();
    let rank = g.rank();
    let mine = look_at(&g.config().pool_path(rank), g.config().medium, true);
    let text = serde_json::to_vec(&mine).expect("look serialises");
    let looks: Vec<Look> = {
        g.comm_mut()
            .allgather_var(&text)?
            .iter()
            .map(|b| serde_json::from_slice(b).expect("looks of the same library"))
            .collect()
    };
    let Decision {
        epoch: e,
        state,
        rollback,
        lost,
        groups,
        rebuild,
    } = decide(&looks, g.config())?;
    if let Some(groups) = groups {
        g.set_groups(groups)?;
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
        let (mut engine, _) =
            Engine::recover_in_with(pool, MovableSelfSpace::default(), rollback[rank])?;
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
        decode: Default::default(),
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

    let (t, level) = rebuild.expect("decided with the losses");
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
            g.recreate_user_region(r.id, r.bytes)?;
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
    let td = Instant::now();
    report.bytes_received = decode(g, level, q, &lost)?;
    report.decode = td.elapsed();

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
