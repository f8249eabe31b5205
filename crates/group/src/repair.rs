//! Rebuilding lost shards — every shard of a lost rank, or single pages that failed their
//! checksums — from `k` surviving shards of each stripe page, and the scrub that looks for
//! damaged pages while the job runs (`kioku_group_verify`).
//!
//! A level's stripe page has `k` data shards (page `q·k + i` of contributor `i`) and `m`
//! parity shards (page `q` of the stripe at holder `t`), all as of the level's epoch. For each
//! run of stripe pages with the same lost shards, the first `k` surviving shards are sent, in
//! segments, to the owner of each lost one, who decodes and writes it. Every rank walks the
//! same list in the same order, so the blocking sends and receives always meet.

use crate::error::{GroupError, Result};
use crate::flight::{Mode, Sink, Source};
use crate::group::{agree, user_region_name, Group, ScrubReport, TAG_DECODE};
use crate::pages::DataView;
use crate::plan::{decide, DamagedPage, Decode, Deep, Look};
use crate::store::{Journal, Parity};
use std::collections::BTreeMap;

/// Where survivors' data shards are, and where rebuilt ones go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum At {
    /// The program's memory holds the data at the level's epoch (after going back to it):
    /// rebuilt pages are written there and taken by the next checkpoint.
    Live,
    /// The valid checkpoint holds the data, and the level's journal the values of pages
    /// changed since the level's epoch: rebuilt pages are written there (both contexts).
    Committed,
}

/// What a decode did on this rank.
#[derive(Clone, Debug, Default)]
pub(crate) struct Repaired {
    pub received: u64,
    pub healed: u64,
}

/// Runs of stripe pages `(lo, hi, lost positions)` of stripe `j`.
fn runs(
    whole: &[usize],
    pages: &BTreeMap<(usize, u64), Vec<usize>>,
    j: usize,
    q_total: u64,
) -> Vec<(u64, u64, Vec<usize>)> {
    let mut out: Vec<(u64, u64, Vec<usize>)> = Vec::new();
    let mut push = |lo: u64, hi: u64, set: Vec<usize>| {
        if set.is_empty() || lo >= hi {
            return;
        }
        match out.last_mut() {
            Some(last) if last.1 == lo && last.2 == set => last.1 = hi,
            _ => out.push((lo, hi, set)),
        }
    };
    let extra: Vec<(u64, &Vec<usize>)> = pages
        .range((j, 0)..(j + 1, 0))
        .map(|((_, q), v)| (*q, v))
        .filter(|(q, _)| *q < q_total)
        .collect();
    let mut at = 0u64;
    for (q, v) in extra {
        if !whole.is_empty() {
            push(at, q, whole.to_vec());
        }
        let mut set: Vec<usize> = whole.iter().chain(v).copied().collect();
        set.sort_unstable();
        set.dedup();
        push(q, q + 1, set);
        at = q + 1;
    }
    if !whole.is_empty() {
        push(at, q_total, whole.to_vec());
    }
    out
}

/// Rebuilds the lost shards `d` lists of this rank's group.
pub(crate) fn decode(g: &mut Group, d: &Decode, at: At) -> Result<Repaired> {
    let (gi, pos, glen) = g.group();
    let members = g.members.clone();
    let level = g.level(d.level);
    let (scheme, codec) = (level.scheme, level.codec.clone());
    let (k, m) = (scheme.k, scheme.m);
    let page = g.page;
    let seg = g.cfg.segment_pages as u64;
    let q_total = d.stripe_pages;
    let my_pages = g.table.pages();
    let journal = g
        .journal(d.level)
        .filter(|j| j.base == d.epoch && at == At::Committed)
        .cloned();
    let table = g.table.clone();
    let held = scheme.held(pos);
    let whole = &d.erasures.whole[gi];
    let pages = &d.erasures.pages[gi];
    let mut out = Repaired::default();
    let mut inbox = Vec::new();
    let mut piece = Vec::new();
    let mut decoded = vec![0u8; seg as usize * page];
    let _ = glen;
    for (j, whole_j) in whole.iter().enumerate().take(scheme.g) {
        let shard_pos: Vec<usize> = scheme
            .contributors(j)
            .into_iter()
            .chain(scheme.holders(j))
            .collect();
        let h_of_j = held.iter().position(|&(hj, _)| hj == j);
        for (lo, hi, lost) in runs(whole_j, pages, j, q_total) {
            let survivors: Vec<usize> = (0..k + m)
                .filter(|&s| !lost.contains(&shard_pos[s]))
                .take(k)
                .collect();
            if survivors.len() < k {
                return Err(GroupError::State(format!(
                    "stripe {j} of level {} lost more shards than its parity rebuilds (a bug: recovery decided otherwise)",
                    d.level
                )));
            }
            for (ix, &x) in shard_pos.iter().enumerate() {
                if !lost.contains(&x) {
                    continue;
                }
                let mut lo_s = lo;
                while lo_s < hi {
                    let hi_s = (lo_s + seg).min(hi);
                    let len = (hi_s - lo_s) as usize * page;
                    if let Some(&s) = survivors.iter().find(|&&s| shard_pos[s] == pos) {
                        piece.clear();
                        piece.resize(len, 0);
                        g.with(|i| {
                            let view = DataView::of(&i.engine, &table, page);
                            let pool = i.engine.pool();
                            for q in lo_s..hi_s {
                                let dst = &mut piece[(q - lo_s) as usize * page..][..page];
                                let src: Option<&[u8]> = if s < k {
                                    let p = q * k as u64 + s as u64;
                                    if p >= my_pages {
                                        None
                                    } else if at == At::Live {
                                        view.live(p)
                                    } else if let Some(b) = journal
                                        .as_ref()
                                        .filter(|j| j.contains(p))
                                        .and_then(|j| j.intact(pool, page, p))
                                    {
                                        Some(b)
                                    } else {
                                        view.committed(p).map(|x| x.0)
                                    }
                                } else {
                                    h_of_j.and_then(|h| {
                                        Parity::page(pool, page, d.level, h, q).map(|x| x.0)
                                    })
                                };
                                if let Some(src) = src {
                                    dst.copy_from_slice(src);
                                }
                            }
                        });
                        g.comm.send(members[x], TAG_DECODE, &piece)?;
                    } else if x == pos {
                        let mut got: Vec<(usize, Vec<u8>)> = Vec::with_capacity(k);
                        for &s in &survivors {
                            let from = members[shard_pos[s]];
                            g.comm.recv_into(from, TAG_DECODE, &mut inbox)?;
                            if inbox.len() != len {
                                return Err(GroupError::Remote {
                                    rank: from,
                                    detail: format!(
                                        "decode piece of {} bytes, expected {len}",
                                        inbox.len()
                                    ),
                                });
                            }
                            out.received += len as u64;
                            got.push((s, std::mem::take(&mut inbox)));
                        }
                        let have: Vec<(usize, &[u8])> =
                            got.iter().map(|(s, b)| (*s, b.as_slice())).collect();
                        codec.decode(&have, &mut [(ix, &mut decoded[..len])])?;
                        out.healed += write(
                            g,
                            d,
                            at,
                            &journal,
                            ix,
                            h_of_j,
                            (lo_s, hi_s),
                            &decoded[..len],
                        )?;
                    }
                    lo_s = hi_s;
                }
            }
        }
    }
    Ok(out)
}

/// Writes rebuilt shard `ix` (data when `< k`, parity after) for stripe pages `lo..hi`.
#[allow(clippy::too_many_arguments)]
fn write(
    g: &mut Group,
    d: &Decode,
    at: At,
    journal: &Option<Journal>,
    ix: usize,
    h: Option<usize>,
    (lo, hi): (u64, u64),
    bytes: &[u8],
) -> Result<u64> {
    let page = g.page;
    let k = g.level(d.level).scheme.k;
    let my_pages = g.table.pages();
    let table = g.table.clone();
    g.with(|i| -> Result<u64> {
        let mut n = 0;
        for q in lo..hi {
            let b = &bytes[(q - lo) as usize * page..][..page];
            if ix >= k {
                let h = h.expect("the owner of a parity shard holds its stripe");
                Parity::write(i.engine.pool_mut(), page, d.level, h, q, b, crc32c::crc32c(b))?;
                n += 1;
                continue;
            }
            let p = q * k as u64 + ix as u64;
            if p >= my_pages {
                break;
            }
            let (entry, pg) = table.locate(p).expect("page in table");
            let name = user_region_name(entry.id);
            let view = DataView::of(&i.engine, &table, page);
            if at == At::Live {
                view.live_mut(p).expect("page").copy_from_slice(b);
                i.engine.mark_written(&name, pg as usize, 1)?;
                n += 1;
                continue;
            }
            if let Some(j) = journal.as_ref().filter(|j| j.contains(p)) {
                if j.intact(i.engine.pool(), page, p) != Some(b) {
                    j.rewrite(i.engine.pool_mut(), page, p, b)?;
                    n += 1;
                }
                continue;
            }
            if view.committed_intact(p).is_err() {
                // The valid checkpoint's page; the program's too unless it wrote the page since
                // (then the next checkpoint takes the program's).
                let live_differs = view.live(p).is_some_and(|l| l != b);
                let written = i.engine.written()?.iter().any(|(nm, f, c)| {
                    nm == &name && (*f as u64..(*f + *c) as u64).contains(&pg)
                });
                if !i.engine.repair_committed(&name, pg as usize, b)? {
                    return Err(GroupError::State(format!(
                        "region '{name}' page {pg} rebuilt from parity does not match its checksum (a bug, or more damage than the checksums revealed)"
                    )));
                }
                if live_differs && !written {
                    view.live_mut(p).expect("page").copy_from_slice(b);
                }
                n += 1;
            }
        }
        Ok(n)
    })
}

/// Re-encodes level `id` afresh from the valid checkpoint's data (its parity and journal
/// were beyond repair, or belong to an epoch the job left).
pub(crate) fn refresh(g: &mut Group, id: u8) -> Result<()> {
    let tables = g.group_tables()?;
    let max_pages = tables
        .iter()
        .map(crate::meta::Table::pages)
        .max()
        .unwrap_or(0);
    let my_pages = g.table.pages();
    let epoch = g.epoch();
    let level = g.level(id);
    let q = level.scheme.stripe_pages(max_pages);
    let m = level.scheme.m;
    let page = g.page;
    agree(
        &g.comm,
        g.with(|i| Parity::ensure(i.engine.pool_mut(), page, id, m, q)),
    )?;
    let f = g.flight_for(
        id,
        epoch,
        q,
        Mode::Fresh,
        Source::Committed,
        Sink::Log,
        (0..my_pages).collect(),
    );
    let mut bg = g.bg.take().expect("no flight runs");
    let r = (|| -> Result<()> {
        let ex = f.exchange(&g.shared, &mut bg)?;
        let mut failure = ex.failure.clone();
        if failure.is_none() {
            if let Err(e) = f.mark_logged(&g.shared, ex.log) {
                failure = Some(e.to_string());
            }
        }
        match crate::flight::agree(&bg, failure)? {
            Ok(()) => f.commit_and_apply(&g.shared),
            Err(why) => {
                f.discard(&g.shared)?;
                Err(GroupError::FlightFailed { level: id, why })
            }
        }
    })();
    g.bg = Some(bg);
    r?;
    g.new_journal(id, epoch);
    Ok(())
}

/// This rank's damaged pages, found while the job runs: data pages of the valid checkpoint
/// (repaired at once from the program's memory where it still holds them), parity pages,
/// journaled values.
fn local_damage(g: &mut Group) -> Result<(Deep, u64, u64)> {
    let page = g.page;
    let table = g.table.clone();
    let journals = g.journals.clone();
    let levels: Vec<(u8, usize)> = g.levels.iter().map(|l| (l.id, l.scheme.m)).collect();
    g.with(|i| -> Result<(Deep, u64, u64)> {
        let mut d = Deep::default();
        let mut found = 0u64;
        let mut healed = 0u64;
        let written = i.engine.written()?;
        for e in &table.regions {
            let name = user_region_name(e.id);
            let bad: Vec<u64> = {
                let view = DataView::of(&i.engine, &table, page);
                (e.offset..e.offset + e.pages)
                    .filter(|&p| view.committed_intact(p).is_err())
                    .collect()
            };
            for p in bad {
                found += 1;
                let pg = p - e.offset;
                let live = {
                    let view = DataView::of(&i.engine, &table, page);
                    view.live(p).map(<[u8]>::to_vec)
                };
                if let Some(live) = live {
                    if i.engine.repair_committed(&name, pg as usize, &live)? {
                        healed += 1;
                        continue;
                    }
                }
                let dirty = written
                    .iter()
                    .any(|(nm, f, c)| nm == &name && (*f as u64..(*f + *c) as u64).contains(&pg));
                if dirty {
                    // The program rewrote it: the next checkpoint takes its new value.
                    continue;
                }
                let journaled_in = journals
                    .iter()
                    .filter(|j| j.contains(p))
                    .map(|j| j.level)
                    .collect();
                d.data.push(DamagedPage {
                    p,
                    region: name.clone(),
                    page: pg,
                    journaled_in,
                });
            }
        }
        for (id, held) in levels {
            let q = i.record.level(id).map_or(0, |l| l.stripe_pages);
            for (h, pq) in Parity::damaged(i.engine.pool(), page, id, held, q) {
                found += 1;
                d.parity.push((id, h, pq));
            }
        }
        for j in &journals {
            for p in j.damaged(i.engine.pool(), page) {
                found += 1;
                d.journal.push((j.level, p));
            }
        }
        Ok((d, found, healed))
    })
}

/// The scrub: finds every damaged page of every rank and rebuilds it — from the other
/// context, or from the group's parity as the recovery would — without going back in time;
/// levels whose own damage is beyond their parity are encoded afresh.
pub(crate) fn scrub(g: &mut Group) -> Result<ScrubReport> {
    let local = local_damage(g);
    let (deep, found, healed_here) = match local {
        Ok(x) => x,
        Err(e) => {
            agree(&g.comm, Err(e))?;
            unreachable!("agree returns this rank's error");
        }
    };
    agree(&g.comm, Ok(()))?;
    let mine = Look {
        present: true,
        meta: g.meta.clone(),
        record: g.with(|i| Some(i.record.clone())),
        deep: Some(deep),
        ..Look::default()
    };
    let text = serde_json::to_vec(&mine).expect("look serialises");
    let looks: Vec<Look> = g
        .comm
        .allgather_var(&text)?
        .iter()
        .map(|b| serde_json::from_slice(b).expect("looks of the same library"))
        .collect();
    let mut counts = [found, healed_here];
    g.comm.allreduce(&mut counts, crate::mpi::Op::Sum)?;
    let mut report = ScrubReport {
        damaged: counts[0],
        healed: counts[1],
        mismatched: vec![],
    };
    if looks
        .iter()
        .all(|l| l.deep.as_ref().is_none_or(|d| !d.any()))
    {
        return Ok(report);
    }
    let cfg = g.cfg.clone();
    let decision = decide(&looks, &cfg)?;
    if let Some((epoch, _)) = decision.rebuild {
        if epoch != g.epoch() {
            let pages: Vec<(usize, String)> = decision
                .damaged
                .iter()
                .enumerate()
                .flat_map(|(r, v)| v.iter().map(move |w| (r, w.clone())))
                .collect();
            return Err(GroupError::Unrecoverable {
                pages,
                detail: format!(
                    "the checkpoint and the program both lost it; a restart rebuilds it by going back to epoch {epoch}"
                ),
            });
        }
    }
    let mut healed = 0;
    for d in &decision.decode {
        healed += decode(g, d, At::Committed)?.healed;
    }
    for &id in &decision.refresh {
        refresh(g, id)?;
        healed += looks
            .iter()
            .filter_map(|l| l.deep.as_ref())
            .map(|d| {
                (d.parity.iter().filter(|x| x.0 == id).count()
                    + d.journal.iter().filter(|x| x.0 == id).count()) as u64
            })
            .sum::<u64>()
            / g.size() as u64;
    }
    let mut sum = [healed];
    g.comm.allreduce(&mut sum, crate::mpi::Op::Sum)?;
    report.healed += sum[0];
    Ok(report)
}
