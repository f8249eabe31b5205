//! What a restart of a group job would recover, decided from what each rank finds in its
//! pool — the same decision for `kioku_group_recover` (every rank computes it from the
//! gathered looks) and for `kioku group inspect` (from the pool files, without MPI). Deciding
//! changes nothing: a recovery that cannot finish is refused before any pool is touched.
//!
//! A deep look also checks every page checksum: data pages of the checkpoint (after the
//! engine's repair from its other context), parity pages, journaled values, redo logs. A page
//! that fails is a lost shard of its stripe, rebuilt from the group's parity like a lost rank.

use crate::config::Config;
use crate::error::{GroupError, Result};
use crate::layout::{Groups, Scheme};
use crate::meta::GroupMeta;
use crate::store::{Journal, Log, Parity, Record};
use crate::{PARTNER, RS};
use kioku_ckpt::CkptError;
use kioku_pool::MediumChoice;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// More damaged pages than this in one pool: the rank counts as lost (rebuilt whole).
pub const DAMAGE_CAP: usize = 4096;

/// A data page of the checkpoint that fails its checksum in both contexts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamagedPage {
    /// Page of the rank's data space.
    pub p: u64,
    pub region: String,
    pub page: u64,
    /// Levels whose journal holds this page (it changed since their last commit).
    pub journaled_in: Vec<u8>,
}

/// What a deep look found in one checkpoint of a pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deep {
    /// Data pages damaged in both contexts.
    pub data: Vec<DamagedPage>,
    /// Data pages damaged in the valid context only (recovery repairs them from the other).
    pub repairable: u64,
    /// Parity pages `(level, held stripe, page)` that fail their checksum.
    pub parity: Vec<(u8, usize, u64)>,
    /// Journaled values `(level, data page)` that fail their checksum.
    pub journal: Vec<(u8, u64)>,
    /// Levels whose journal index is damaged (which pages it holds is unknown).
    pub journal_unusable: Vec<u8>,
    /// Levels whose flight's redo log is damaged (it cannot be applied).
    pub log_unusable: Vec<u8>,
    /// Redo log entries `(level, held stripe, page)` whose new value fails its checksum.
    pub log_damaged: Vec<(u8, usize, u64)>,
    /// For levels with a flight whose log is usable: the parity pages that would fail their
    /// checksum once the log is applied.
    pub parity_applied: Vec<(u8, usize, u64)>,
    /// More damage than [`DAMAGE_CAP`]: the rank counts as lost.
    pub too_much: bool,
}

impl Deep {
    fn count(&self) -> usize {
        self.data.len() + self.parity.len() + self.journal.len() + self.log_damaged.len()
    }

    /// Whether anything is damaged.
    pub fn any(&self) -> bool {
        self.count() > 0
            || self.too_much
            || !self.journal_unusable.is_empty()
            || !self.log_unusable.is_empty()
    }
}

/// What one rank found in its pool.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Look {
    /// The pool exists and opens (it may hold no checkpoint yet).
    pub present: bool,
    /// The pool is damaged beyond use (its header, commit, metadata or record): the rank
    /// counts as lost, and recovery sets the file aside once it has decided to rebuild it.
    pub damaged: Option<String>,
    /// The pool cannot be used and must not be rebuilt over (held by another process, of
    /// another program, …): recovery stops with this.
    pub fatal: Option<String>,
    /// The last checkpoint (possibly only prepared) and, if prepared, the one before.
    pub meta: Option<GroupMeta>,
    pub prepared: bool,
    pub previous: Option<GroupMeta>,
    /// What each kept level's parity encodes.
    pub record: Option<Record>,
    /// Page checksums of the last checkpoint and, if prepared, of the one before (deep looks).
    pub deep: Option<Deep>,
    pub deep_previous: Option<Deep>,
}

/// Whether an error opening a pool means its contents are damaged (the rank is lost and
/// rebuilt) rather than that it is someone else's or unusable here (a clear error).
pub fn is_damage(e: &CkptError) -> bool {
    use kioku_pool::PoolError as P;
    match e {
        CkptError::MetaDamaged { .. } | CkptError::ContextDamaged { .. } => true,
        CkptError::Pool(p) => matches!(
            p,
            P::NotAPool { .. }
                | P::Truncated { .. }
                | P::HeaderChecksum { .. }
                | P::HeaderInvalid { .. }
                | P::CommitDamaged { .. }
                | P::LiveSlotDamaged { .. }
        ),
        _ => false,
    }
}

/// The scheme of level `id` over a group of `g` members with `parity` parity shards.
pub fn scheme_of(id: u8, g: usize, parity: usize) -> Scheme {
    if id == PARTNER {
        Scheme::new(1, 1, g)
    } else {
        Scheme::new(g - parity, parity, g)
    }
}

/// Reads the pool at `path` without changing it; `deep` also checks every page checksum.
pub fn look_at(path: &Path, medium: MediumChoice, deep: bool) -> Look {
    let mut out = Look::default();
    if !path.exists() {
        return out;
    }
    let o = kioku_pool::OpenOptions {
        medium,
        kind: Some(kioku_ckpt::POOL_KIND.into()),
        ..Default::default()
    };
    let pool = match kioku_pool::Pool::open(path, &o).map_err(CkptError::from) {
        Ok(p) => p,
        Err(e) if is_damage(&e) => {
            out.damaged = Some(e.to_string());
            return out;
        }
        Err(e) => {
            out.fatal = Some(e.to_string());
            return out;
        }
    };
    let st = match kioku_ckpt::commit_state_of(&pool) {
        Ok(st) => st,
        Err(e) if is_damage(&e) => {
            out.damaged = Some(e.to_string());
            return out;
        }
        Err(e) => {
            out.fatal = Some(e.to_string());
            return out;
        }
    };
    out.present = true;
    out.record = Record::read(&pool);
    if out.record.is_none() {
        out.damaged = Some(format!(
            "{}: the group record is damaged (both copies fail their checksums)",
            path.display()
        ));
        return out;
    }
    if st.epoch == 0 {
        return out; // Created, never checkpointed.
    }
    match GroupMeta::decode(&st.metadata) {
        Some(m) => out.meta = Some(m),
        None => {
            out.fatal = Some(match GroupMeta::other_version(&st.metadata) {
                Some(v) => format!(
                    "{}: a group pool of format {v}, written by another version of kioku; finish that job with it, or remove the pools to start afresh",
                    path.display()
                ),
                None => format!(
                    "{}: a checkpoint pool, but not of a kioku group job; use another KIOKU_DIR or KIOKU_NAME",
                    path.display()
                ),
            });
            return out;
        }
    }
    out.prepared = st.prepared;
    out.previous = st.previous_metadata.as_deref().and_then(GroupMeta::decode);
    if deep {
        let rec = out.record.clone().expect("read above");
        out.deep = Some(deep_look(
            &pool,
            out.meta.as_ref().expect("set"),
            &rec,
            false,
        ));
        if out.prepared {
            if let Some(prev) = &out.previous {
                out.deep_previous = Some(deep_look(&pool, prev, &rec, true));
            }
        }
    }
    out
}

/// Checks every page checksum of the checkpoint `meta` describes (the previous one of a
/// prepared pool with `previous`).
fn deep_look(pool: &kioku_pool::Pool, meta: &GroupMeta, rec: &Record, previous: bool) -> Deep {
    let page = pool.header().page_size as usize;
    let mut d = Deep::default();
    let pos = meta
        .members
        .iter()
        .position(|&r| r == meta.rank)
        .unwrap_or(0);
    let table = meta.tables.get(pos).cloned().unwrap_or_default();
    let journals: Vec<Option<Journal>> = meta
        .journals
        .iter()
        .map(|m| {
            let at = rec.epoch(m.level);
            if m.base != at {
                return None; // Not this level's base any more: not needed.
            }
            match Journal::load(pool, page, m) {
                Ok(j) => Some(j),
                Err(_) => {
                    d.journal_unusable.push(m.level);
                    None
                }
            }
        })
        .collect();
    match kioku_ckpt::scan_pages(pool, previous, DAMAGE_CAP) {
        Ok(scan) => {
            d.repairable = scan.repairable;
            d.too_much |= scan.truncated;
            for (region, pg) in scan.damaged {
                let p = region
                    .strip_prefix('u')
                    .and_then(|s| s.parse::<u32>().ok())
                    .and_then(|id| table.get(id))
                    .map(|e| e.offset + pg);
                let Some(p) = p else { continue };
                let journaled_in = journals
                    .iter()
                    .flatten()
                    .filter(|j| j.contains(p))
                    .map(|j| j.level)
                    .collect();
                d.data.push(DamagedPage {
                    p,
                    region,
                    page: pg,
                    journaled_in,
                });
            }
        }
        Err(_) => d.too_much = true,
    }
    for j in journals.iter().flatten() {
        for p in j.damaged(pool, page) {
            d.journal.push((j.level, p));
        }
    }
    for l in &rec.levels {
        if l.epoch == 0 && l.flight.is_none() {
            continue;
        }
        let g = meta.members.len();
        let held = scheme_of(l.id, g, meta.parity).m;
        let now = Parity::damaged(pool, page, l.id, held, l.stripe_pages);
        d.parity.extend(now.iter().map(|&(h, q)| (l.id, h, q)));
        if let Some(f) = &l.flight {
            match Log::load(pool, l.id, f) {
                Ok(entries) => {
                    let rewritten: BTreeSet<(usize, u64)> =
                        entries.iter().map(|e| (e.h as usize, e.q as u64)).collect();
                    let after: BTreeSet<(usize, u64)> =
                        Parity::damaged(pool, page, l.id, held, f.stripe_pages)
                            .into_iter()
                            .filter(|x| !rewritten.contains(x))
                            .collect();
                    d.parity_applied
                        .extend(after.iter().map(|&(h, q)| (l.id, h, q)));
                    for e in entries {
                        if crc32c::crc32c(Log::page(pool, page, l.id, &e)) != e.crc {
                            d.log_damaged.push((l.id, e.h as usize, e.q as u64));
                            d.parity_applied.push((l.id, e.h as usize, e.q as u64));
                        }
                    }
                }
                Err(_) => d.log_unusable.push(l.id),
            }
        }
    }
    if d.count() > DAMAGE_CAP {
        d.too_much = true;
    }
    d
}

/// A kept level at recovery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LevelPlan {
    pub id: u8,
    /// The epoch whose data its parity encodes once flights are settled (0: none).
    pub epoch: u64,
    pub stripe_pages: u64,
    /// A flight of this epoch is finished (its logs applied) on the ranks marked in `apply`;
    /// other ranks' unfinished flights are forgotten.
    pub forward: Option<u64>,
    pub apply: Vec<bool>,
    /// Ranks whose parity of this level is unusable (an unappliable log).
    pub parity_lost: Vec<usize>,
}

/// Shards of one level's stripes to rebuild: whole positions (per stripe) and single pages.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Erasures {
    /// Per group: per stripe, the positions all of whose shards in it are lost.
    pub whole: Vec<Vec<Vec<usize>>>,
    /// Per group: (stripe, stripe page) → positions whose shard there is lost.
    pub pages: Vec<BTreeMap<(usize, u64), Vec<usize>>>,
}

/// How one level rebuilds shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decode {
    pub level: u8,
    /// The epoch of the shards (the level's parity epoch).
    pub epoch: u64,
    pub stripe_pages: u64,
    pub erasures: Erasures,
}

/// What a recovery does.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// The epoch of the last local checkpoint every survivor holds.
    pub epoch: u64,
    /// Each rank's checkpoint metadata at that epoch (`None`: lost, or no checkpoint).
    pub state: Vec<Option<GroupMeta>>,
    /// Ranks whose prepared, unagreed checkpoint is rolled back.
    pub rollback: Vec<bool>,
    /// Ranks to rebuild whole (pools missing or damaged beyond use).
    pub lost: Vec<usize>,
    /// The groups the checkpoint recorded (when one exists).
    pub groups: Option<Groups>,
    pub levels: Vec<LevelPlan>,
    /// When data must be rebuilt (lost ranks, damaged pages): the epoch the job resumes at
    /// and the level that rebuilds it. Survivors go back to that epoch through the level's
    /// journal when it is older than `epoch`.
    pub rebuild: Option<(u64, u8)>,
    /// Shards each level rebuilds (the rebuilding level's, and levels whose own parity or
    /// journal pages are damaged).
    pub decode: Vec<Decode>,
    /// Levels encoded afresh from the data once it is whole (their damage is beyond their
    /// parity, or the job went back to another level's epoch).
    pub refresh: Vec<u8>,
    /// Damaged pages, per rank, named (for the report).
    pub damaged: Vec<Vec<String>>,
}

impl Decision {
    /// Pages this decision rebuilds on `rank` besides lost ranks.
    pub fn healed_on(&self, rank: usize) -> &[String] {
        self.damaged.get(rank).map_or(&[], |v| v.as_slice())
    }
}

/// The survivors' checkpoints: the epoch all hold, each one's metadata there, who rolls back.
#[allow(clippy::type_complexity)]
fn settle_epoch(
    looks: &[Look],
    alive: &[bool],
    cfg: &Config,
) -> Result<(u64, Vec<Option<GroupMeta>>, Vec<bool>)> {
    let n = looks.len();
    let dir = cfg.dir.display().to_string();
    // The epoch: the lowest any survivor holds; a survivor one ahead holds it as a prepared
    // checkpoint's predecessor (nobody finished the next one, since that needs everyone).
    let epoch_of = |l: &Look| l.meta.as_ref().map_or(0, |m| m.epoch);
    let e = (0..n)
        .filter(|&r| alive[r])
        .map(|r| epoch_of(&looks[r]))
        .min()
        .unwrap_or(0);
    let mut state: Vec<Option<GroupMeta>> = vec![None; n];
    let mut rollback = vec![false; n];
    for r in (0..n).filter(|&r| alive[r]) {
        let l = &looks[r];
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
            let c = cfg;
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
    Ok((e, state, rollback))
}

/// Settles each kept level's flights: applied where every survivor logged them and the data
/// stayed at their epoch, forgotten otherwise.
fn settle_levels(
    looks: &[Look],
    alive: &[bool],
    deep: &[Option<&Deep>],
    epoch: u64,
    cfg: &Config,
) -> Result<Vec<LevelPlan>> {
    let n = looks.len();
    let kept: Vec<u8> = [(cfg.partner, PARTNER), (cfg.rs, RS)]
        .into_iter()
        .filter(|x| x.0)
        .map(|x| x.1)
        .collect();
    let mut plans = Vec::new();
    for id in kept {
        let states: Vec<(usize, crate::store::LevelState)> = (0..n)
            .filter(|&r| alive[r])
            .filter_map(|r| {
                let rec = looks[r].record.as_ref()?;
                rec.level(id).map(|s| (r, s.clone()))
            })
            .collect();
        let e_old = states.iter().map(|(_, s)| s.epoch).min().unwrap_or(0);
        let e_new = states.iter().map(|(_, s)| s.epoch).max().unwrap_or(0);
        let flight = states
            .iter()
            .filter_map(|(_, s)| s.flight.as_ref())
            .map(|f| f.epoch)
            .max()
            .unwrap_or(0)
            .max(if e_new > e_old { e_new } else { 0 });
        let committed_somewhere = e_new > e_old
            || states.iter().any(|(_, s)| {
                s.flight
                    .as_ref()
                    .is_some_and(|f| f.committed && f.epoch == flight)
            });
        let reached = |s: &crate::store::LevelState| {
            s.epoch == flight || s.flight.as_ref().is_some_and(|f| f.epoch == flight)
        };
        let usable_log = |r: usize| deep[r].is_none_or(|d| !d.log_unusable.contains(&id));
        let all_logged = flight > 0 && states.iter().all(|(_, s)| reached(s));
        let all_usable = states
            .iter()
            .all(|(r, s)| s.epoch == flight || usable_log(*r));
        let forward = all_logged && epoch >= flight && (all_usable || committed_somewhere);
        if committed_somewhere && !forward {
            return Err(GroupError::State(format!(
                "level {id}'s parity was committed at epoch {flight} on some ranks but the others cannot reach it; the pools are not of one run (or were changed by hand): restore them, or remove them to start afresh"
            )));
        }
        let mut apply = vec![false; n];
        let mut parity_lost = Vec::new();
        let mut q = 0;
        if forward {
            for (r, s) in &states {
                if s.epoch != flight {
                    if usable_log(*r) {
                        apply[*r] = true;
                    } else {
                        parity_lost.push(*r);
                    }
                    q = q.max(s.flight.as_ref().map_or(0, |f| f.stripe_pages));
                } else {
                    q = q.max(s.stripe_pages);
                }
            }
        } else {
            q = states
                .iter()
                .filter(|(_, s)| s.epoch == e_old)
                .map(|(_, s)| s.stripe_pages)
                .max()
                .unwrap_or(0);
        }
        plans.push(LevelPlan {
            id,
            epoch: if forward { flight } else { e_old },
            stripe_pages: q,
            forward: forward.then_some(flight),
            apply,
            parity_lost,
        });
    }
    Ok(plans)
}

/// Decides the recovery of a job of `looks.len()` ranks configured as `cfg`; an error is the
/// one every rank reports. Changes nothing.
pub fn decide(looks: &[Look], cfg: &Config) -> Result<Decision> {
    let n = looks.len();
    if let Some((r, l)) = looks.iter().enumerate().find(|(_, l)| l.fatal.is_some()) {
        return Err(GroupError::Remote {
            rank: r,
            detail: l.fatal.clone().unwrap_or_default(),
        });
    }
    let dir = cfg.dir.display().to_string();
    let has_ckpt = looks.iter().any(|l| l.meta.is_some());
    // Lost whole: missing, damaged beyond use, too damaged, or a pool that never got a
    // checkpoint while others did (a replacement made by a recovery that did not finish).
    let mut alive: Vec<bool> = looks
        .iter()
        .map(|l| l.present && l.damaged.is_none() && !(has_ckpt && l.meta.is_none()))
        .collect();
    if !alive.iter().any(|&a| a) {
        return Err(GroupError::State(format!(
            "no rank has a usable pool under {dir}: nothing to recover; remove the directory to start afresh"
        )));
    }
    let (mut e, mut state, mut rollback) = settle_epoch(looks, &alive, cfg)?;
    let deep_of = |r: usize, rollback: &[bool]| -> Option<&Deep> {
        if rollback[r] {
            looks[r].deep_previous.as_ref()
        } else {
            looks[r].deep.as_ref()
        }
    };
    let mut changed = false;
    for (r, a) in alive.iter_mut().enumerate() {
        if *a && deep_of(r, &rollback).is_some_and(|d| d.too_much) {
            *a = false;
            changed = true;
        }
    }
    if changed {
        (e, state, rollback) = settle_epoch(looks, &alive, cfg)?;
    }
    let lost: Vec<usize> = (0..n).filter(|&r| !alive[r]).collect();
    let deep: Vec<Option<&Deep>> = (0..n)
        .map(|r| {
            if alive[r] {
                deep_of(r, &rollback)
            } else {
                None
            }
        })
        .collect();

    // The groups as the checkpoint recorded them (a restart may place ranks on other nodes).
    let mut groups = None;
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
        groups = Some(Groups { groups: recorded });
    }
    let levels = settle_levels(looks, &alive, &deep, e, cfg)?;
    let damaged: Vec<Vec<String>> = (0..n)
        .map(|r| deep[r].map(describe).unwrap_or_default())
        .collect();
    let mut out = Decision {
        epoch: e,
        state,
        rollback,
        lost: lost.clone(),
        groups: groups.clone(),
        levels,
        rebuild: None,
        decode: vec![],
        refresh: vec![],
        damaged,
    };
    if e == 0 {
        return Ok(out); // No checkpoint: lost ranks start with empty pools.
    }
    let groups = groups.expect("recorded at e > 0");
    let data_damaged = deep.iter().flatten().any(|d| !d.data.is_empty());
    let other_damage = deep.iter().flatten().any(|d| d.any())
        || out.levels.iter().any(|l| !l.parity_lost.is_empty());
    let ctx = Ctx {
        deep: &deep,
        groups: &groups,
        lost: &lost,
        state: &out.state,
        epoch: e,
        parity: cfg.parity,
    };

    if lost.is_empty() && !data_damaged {
        // Data whole: each level rebuilds its own damaged pages, or is encoded afresh.
        if other_damage {
            for l in &out.levels {
                if l.epoch == 0 {
                    continue;
                }
                let er = ctx.erasures(l, false);
                if er.is_empty() {
                    continue;
                }
                if ctx.fits(l.id, &er) {
                    out.decode.push(Decode {
                        level: l.id,
                        epoch: l.epoch,
                        stripe_pages: l.stripe_pages,
                        erasures: er,
                    });
                } else {
                    out.refresh.push(l.id);
                }
            }
        }
        return Ok(out);
    }

    // Data must be rebuilt: the newest level that can, staying at `e` if it can.
    let mut candidates: Vec<&LevelPlan> = out.levels.iter().filter(|l| l.epoch > 0).collect();
    candidates.sort_unstable_by_key(|l| std::cmp::Reverse((l.epoch, l.id)));
    if candidates.is_empty() {
        if !lost.is_empty() {
            return Err(GroupError::NoRedundancy { ranks: lost });
        }
        return Err(ctx.unrecoverable(None));
    }
    // (a) Without going back: only damaged pages, unchanged since the level's epoch.
    if lost.is_empty() {
        for l in &candidates {
            let unchanged = deep.iter().flatten().all(|d| {
                d.data
                    .iter()
                    .all(|x| l.epoch == e || !x.journaled_in.contains(&l.id))
            });
            if !unchanged {
                continue;
            }
            let er = ctx.erasures(l, false);
            if ctx.fits(l.id, &er) {
                out.rebuild = Some((e, l.id));
                out.decode.push(Decode {
                    level: l.id,
                    epoch: l.epoch,
                    stripe_pages: l.stripe_pages,
                    erasures: er,
                });
                out.refresh = out
                    .levels
                    .iter()
                    .filter(|x| x.id != l.id && x.epoch > 0)
                    .filter(|x| !ctx.erasures(x, false).is_empty())
                    .map(|x| x.id)
                    .collect();
                return Ok(out);
            }
        }
    }
    // (b) Back to a level's epoch, through the survivors' journals.
    for l in &candidates {
        let er = ctx.erasures(l, true);
        if ctx.fits(l.id, &er) {
            out.rebuild = Some((l.epoch, l.id));
            out.decode.push(Decode {
                level: l.id,
                epoch: l.epoch,
                stripe_pages: l.stripe_pages,
                erasures: er,
            });
            out.refresh = out
                .levels
                .iter()
                .filter(|x| x.id != l.id)
                .map(|x| x.id)
                .collect();
            return Ok(out);
        }
    }
    // Nothing rebuilds it.
    // Named after the level that tolerates the most.
    let l = candidates
        .iter()
        .max_by_key(|l| scheme_of(l.id, groups.groups[0].len(), cfg.parity).m)
        .expect("nonempty");
    for (gi, grp) in groups.groups.iter().enumerate() {
        let lost_in: Vec<usize> = grp.iter().copied().filter(|r| lost.contains(r)).collect();
        let m = scheme_of(l.id, grp.len(), cfg.parity).m;
        if lost_in.len() > m {
            return Err(GroupError::TooManyLost {
                group: gi,
                lost: lost_in.len(),
                ranks: lost_in.clone(),
                m,
                need: lost_in.len() - m,
            });
        }
    }
    Err(ctx.unrecoverable(Some(l.id)))
}

/// One line per damaged page of a deep look.
fn describe(d: &Deep) -> Vec<String> {
    let mut v: Vec<String> = d
        .data
        .iter()
        .map(|x| format!("region '{}' page {}", x.region, x.page))
        .collect();
    v.extend(
        d.parity
            .iter()
            .map(|(l, h, q)| format!("parity of level {l}, held stripe {h}, page {q}")),
    );
    v.extend(
        d.journal
            .iter()
            .map(|(l, p)| format!("journal of level {l}, data page {p}")),
    );
    v.extend(
        d.journal_unusable
            .iter()
            .map(|l| format!("journal index of level {l}")),
    );
    v.extend(
        d.log_unusable
            .iter()
            .map(|l| format!("parity log of level {l}")),
    );
    v.extend(
        d.log_damaged
            .iter()
            .map(|(l, h, q)| format!("parity log of level {l}, held stripe {h}, page {q}")),
    );
    v
}

/// What the erasure computation needs.
struct Ctx<'a> {
    deep: &'a [Option<&'a Deep>],
    groups: &'a Groups,
    lost: &'a [usize],
    state: &'a [Option<GroupMeta>],
    epoch: u64,
    parity: usize,
}

impl Erasures {
    pub fn is_empty(&self) -> bool {
        self.whole.iter().flatten().all(Vec::is_empty) && self.pages.iter().all(BTreeMap::is_empty)
    }
}

impl Ctx<'_> {
    /// The shards of level `l` lost at its epoch: lost ranks, damaged pages, unusable logs,
    /// and (going `back`) survivors whose journal cannot take them back.
    fn erasures(&self, l: &LevelPlan, back: bool) -> Erasures {
        let mut er = Erasures::default();
        for grp in &self.groups.groups {
            let g = grp.len();
            let s = scheme_of(l.id, g, self.parity);
            let mut whole: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); g];
            let mut pages: BTreeMap<(usize, u64), BTreeSet<usize>> = BTreeMap::new();
            for (pos, &r) in grp.iter().enumerate() {
                let all = |whole: &mut Vec<BTreeSet<usize>>| {
                    for w in whole.iter_mut() {
                        w.insert(pos);
                    }
                };
                if self.lost.contains(&r) {
                    all(&mut whole);
                    continue;
                }
                if l.parity_lost.contains(&r) {
                    for (j, _) in s.held(pos) {
                        whole[j].insert(pos);
                    }
                }
                let d = self.deep[r];
                // Going back needs the journal of this level, of this level's epoch.
                if back && self.epoch > l.epoch {
                    let mark = self.state[r].as_ref().and_then(|m| m.journal(l.id));
                    let ok = mark.is_some_and(|m| m.base == l.epoch)
                        && d.is_none_or(|d| !d.journal_unusable.contains(&l.id));
                    if !ok {
                        for (j, w) in whole.iter_mut().enumerate() {
                            if s.contributors(j).contains(&pos) {
                                w.insert(pos);
                            }
                        }
                    }
                }
                let Some(d) = d else { continue };
                let k = s.k as u64;
                let data_shard = |p: u64| {
                    let c = (p % k) as usize;
                    (s.stripe_of_chunk(pos, c), p / k)
                };
                let going_back = back && self.epoch > l.epoch;
                for x in &d.data {
                    // The shard at the level's epoch is the journal's when the page changed
                    // since; the data page's otherwise (lost only then).
                    if going_back && x.journaled_in.contains(&l.id) {
                        continue;
                    }
                    pages.entry(data_shard(x.p)).or_default().insert(pos);
                }
                for &(lv, p) in &d.journal {
                    if lv == l.id {
                        pages.entry(data_shard(p)).or_default().insert(pos);
                    }
                }
                let held = s.held(pos);
                let mut parity_at = |h: usize, q: u64| {
                    if let Some(&(j, _)) = held.get(h) {
                        pages.entry((j, q)).or_default().insert(pos);
                    }
                };
                // A rank that applies its log has the parity the log leaves.
                let parity = if l.apply[r] {
                    &d.parity_applied
                } else {
                    &d.parity
                };
                for &(lv, h, q) in parity {
                    if lv == l.id {
                        parity_at(h, q);
                    }
                }
            }
            er.whole
                .push(whole.into_iter().map(|s| s.into_iter().collect()).collect());
            er.pages.push(
                pages
                    .into_iter()
                    .map(|(key, s)| (key, s.into_iter().collect()))
                    .collect(),
            );
        }
        er
    }

    /// Whether every stripe page of level `id` keeps at least `k` shards.
    fn fits(&self, id: u8, er: &Erasures) -> bool {
        for (gi, grp) in self.groups.groups.iter().enumerate() {
            let m = scheme_of(id, grp.len(), self.parity).m;
            let whole = &er.whole[gi];
            if whole.iter().any(|w| w.len() > m) {
                return false;
            }
            for ((j, _), ps) in &er.pages[gi] {
                let extra = ps.iter().filter(|p| !whole[*j].contains(p)).count();
                if whole[*j].len() + extra > m {
                    return false;
                }
            }
        }
        true
    }

    /// The error when damage cannot be rebuilt: names the damaged pages.
    fn unrecoverable(&self, level: Option<u8>) -> GroupError {
        let pages: Vec<(usize, String)> = self
            .deep
            .iter()
            .enumerate()
            .flat_map(|(r, d)| {
                d.map(|d| {
                    describe(d)
                        .into_iter()
                        .map(move |s| (r, s))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
            })
            .collect();
        GroupError::Unrecoverable {
            pages,
            detail: match level {
                None => "no checkpoint of a remote level exists to rebuild it from".into(),
                Some(l) => format!(
                    "more shards of one stripe are lost or damaged than level {l}'s parity rebuilds"
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{Table, MAGIC, VERSION};
    use crate::store::{FlightMark, LevelState};

    fn cfg(partner: bool) -> Config {
        Config {
            group_size: 6,
            parity: 2,
            partner,
            rs: true,
            ..Config::default()
        }
    }

    fn meta(rank: usize, epoch: u64, partner: bool) -> GroupMeta {
        GroupMeta {
            magic: MAGIC.into(),
            version: VERSION,
            ranks: 6,
            rank,
            epoch,
            level: 1,
            members: (0..6).collect(),
            tables: vec![Table::default(); 6],
            group_size: 6,
            parity: 2,
            partner,
            rs: true,
            journals: vec![],
        }
    }

    fn record(lp: u64, lr: u64, partner: bool) -> Record {
        let mut levels = vec![];
        if partner {
            levels.push(LevelState {
                id: PARTNER,
                epoch: lp,
                stripe_pages: 1,
                flight: None,
            });
        }
        levels.push(LevelState {
            id: RS,
            epoch: lr,
            stripe_pages: 1,
            flight: None,
        });
        Record { seq: 1, levels }
    }

    fn looks(epoch: u64, lp: u64, lr: u64, partner: bool) -> Vec<Look> {
        (0..6)
            .map(|r| Look {
                present: true,
                meta: Some(meta(r, epoch, partner)),
                record: Some(record(lp, lr, partner)),
                ..Look::default()
            })
            .collect()
    }

    #[test]
    fn everyone_at_one_epoch_resumes_it() {
        let d = decide(&looks(5, 0, 4, false), &cfg(false)).unwrap();
        assert_eq!((d.epoch, d.lost.len(), d.rebuild), (5, 0, None));
        assert!(d.rollback.iter().all(|&b| !b));
    }

    #[test]
    fn a_rank_one_ahead_and_prepared_rolls_back_else_refused() {
        let mut l = looks(5, 0, 5, false);
        l[2].meta = Some(meta(2, 6, false));
        l[2].prepared = true;
        l[2].previous = Some(meta(2, 5, false));
        let d = decide(&l, &cfg(false)).unwrap();
        assert_eq!(d.epoch, 5);
        assert_eq!(d.rollback, vec![false, false, true, false, false, false]);
        l[2].prepared = false;
        assert!(matches!(decide(&l, &cfg(false)), Err(GroupError::State(_))));
    }

    #[test]
    fn losses_pick_the_newest_level_that_rebuilds_them() {
        // Partner at 9, rs at 7, local at 10.
        let mut l = looks(10, 9, 7, true);
        for x in &mut l {
            let m = x.meta.as_mut().unwrap();
            m.journals = vec![
                crate::store::JournalMark {
                    level: PARTNER,
                    base: 9,
                    count: 0,
                },
                crate::store::JournalMark {
                    level: RS,
                    base: 7,
                    count: 0,
                },
            ];
        }
        l[4] = Look::default();
        let d = decide(&l, &cfg(true)).unwrap();
        assert_eq!((d.epoch, d.rebuild), (10, Some((9, PARTNER))));
        // 3 and 4: 4's copy is on 3; rs rebuilds them.
        l[3] = Look::default();
        let d = decide(&l, &cfg(true)).unwrap();
        assert_eq!(d.rebuild, Some((7, RS)));
        assert_eq!(d.lost, vec![3, 4]);
        // A third: more than m.
        l[0] = Look::default();
        match decide(&l, &cfg(true)) {
            Err(GroupError::TooManyLost { lost, m, .. }) => assert_eq!((lost, m), (3, 2)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn losses_without_remote_checkpoints_or_with_another_job_size_are_refused() {
        let mut l = looks(3, 0, 0, false);
        l[1] = Look::default();
        assert!(matches!(
            decide(&l, &cfg(false)),
            Err(GroupError::NoRedundancy { .. })
        ));
        let l = looks(3, 0, 3, false);
        assert!(matches!(
            decide(&l[..4], &cfg(false)),
            Err(GroupError::SizeChanged { was: 6, now: 4, .. })
        ));
        let mut c = cfg(false);
        c.parity = 1;
        assert!(matches!(decide(&l, &c), Err(GroupError::Config(_))));
    }

    #[test]
    fn a_flight_is_finished_only_where_every_survivor_logged_it() {
        // rs committed at 4; flight 5 logged by ranks 0..4, rank 5 lost: forward to 5.
        let mut l = looks(5, 0, 4, false);
        let mark = FlightMark {
            epoch: 5,
            stripe_pages: 1,
            entries: 0,
            index_crc: 0,
            committed: false,
        };
        for x in l.iter_mut().take(5) {
            x.record.as_mut().unwrap().levels[0].flight = Some(mark.clone());
        }
        l[5] = Look::default();
        let d = decide(&l, &cfg(false)).unwrap();
        let rs = &d.levels[0];
        assert_eq!((rs.epoch, rs.forward), (5, Some(5)));
        assert_eq!(rs.apply, vec![true, true, true, true, true, false]);
        assert_eq!(d.rebuild, Some((5, RS)));
        // Rank 2 never logged it: forgotten, the job goes back to 4 through the journals.
        l[2].record.as_mut().unwrap().levels[0].flight = None;
        for x in l.iter_mut().take(5) {
            x.meta.as_mut().unwrap().journals = vec![crate::store::JournalMark {
                level: RS,
                base: 4,
                count: 0,
            }];
        }
        let d = decide(&l, &cfg(false)).unwrap();
        assert_eq!((d.levels[0].epoch, d.levels[0].forward), (4, None));
        assert_eq!(d.rebuild, Some((4, RS)));
        // Committed on rank 0 but not logged on rank 2: impossible, refused.
        l[0].record.as_mut().unwrap().levels[0].flight = Some(FlightMark {
            committed: true,
            ..mark
        });
        assert!(matches!(decide(&l, &cfg(false)), Err(GroupError::State(_))));
    }

    #[test]
    fn damaged_pages_are_lost_shards_rebuilt_in_place_or_refused_naming_the_page() {
        let mut l = looks(5, 0, 5, false);
        let page = |p: u64| DamagedPage {
            p,
            region: "u1".into(),
            page: p,
            journaled_in: vec![],
        };
        l[1].deep = Some(Deep {
            data: vec![page(7)],
            ..Deep::default()
        });
        let d = decide(&l, &cfg(false)).unwrap();
        assert_eq!(d.rebuild, Some((5, RS)));
        assert_eq!(d.decode[0].erasures.pages[0].len(), 1);
        assert!(d.healed_on(1)[0].contains("page 7"));
        // Three members damaged in the same stripe page (k = 4: page 7 is chunk 3 of page
        // 1 of a stripe at each): more than m = 2.
        // Different positions put a page in different stripes, so find a real collision.
        let s = scheme_of(RS, 6, 2);
        let j = s.stripe_of_chunk(1, 3);
        let mut ranks = vec![];
        for pos in 0..6 {
            if let Some(c) = s.contributors(j).iter().position(|&x| x == pos) {
                ranks.push((pos, 4 + c as u64)); // page 4 + c: q = 1, chunk c
            }
        }
        for (pos, p) in &ranks[..3] {
            l[*pos].deep = Some(Deep {
                data: vec![page(*p)],
                ..Deep::default()
            });
        }
        for (r, x) in l.iter_mut().enumerate() {
            if !ranks[..3].iter().any(|y| y.0 == r) {
                x.deep = None;
            }
        }
        match decide(&l, &cfg(false)) {
            Err(GroupError::Unrecoverable { pages, .. }) => {
                assert_eq!(pages.len(), 3);
                assert_eq!(pages[0].0, ranks[0].0);
                assert!(pages[0].1.contains("region 'u1' page"), "{pages:?}");
            }
            other => panic!("{other:?}"),
        }
    }
}
