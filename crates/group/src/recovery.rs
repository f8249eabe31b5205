//! Recovery after a restart, in order:
//!
//! 1. every rank looks at its pool without changing it, checking every page checksum;
//! 2. every rank decides the same from all the looks ([`crate::plan::decide`]) — a refusal
//!    (more lost or damaged shards than the parity rebuilds, pools of another run) is returned
//!    here, every pool byte for byte as it was;
//! 3. pools damaged beyond use are set aside (`<pool>.damaged`), lost ranks get new pools;
//! 4. survivors recover their checkpoints (rolling back one that was prepared but not agreed)
//!    and finish or forget each level's last flight;
//! 5. when the job must go back to a level's epoch, survivors copy that level's journal into
//!    their memory;
//! 6. lost shards — whole lost ranks, damaged pages — are decoded from the survivors';
//! 7. the group is protected again before the program goes on: after going back or losing
//!    ranks, a checkpoint encodes every other level afresh; otherwise levels whose own damage
//!    was beyond their parity are encoded afresh.
//!
//! A crash during 3–7 leaves pools that a new recovery takes up again.

use crate::error::Result;
use crate::group::{agree, make_levels, user_region_name, Engine, Group, Inner, RecoveryReport};
use crate::layout::Groups;
use crate::plan::{decide, look_at, Decision, Look};
use crate::repair::{decode, refresh, At};
use crate::store::{Journal, Parity, Record};
use kioku_ckpt::{CkptError, EngineOptions, MovableSelfSpace};
use std::time::Instant;

pub(crate) fn recover(g: &mut Group) -> Result<RecoveryReport> {
    let t0 = Instant::now();
    let rank = g.rank();
    let path = g.cfg.pool_path(rank);
    // (1) and (2).
    let mine = look_at(&path, g.cfg.medium, true);
    let text = serde_json::to_vec(&mine).expect("look serialises");
    let looks: Vec<Look> = g
        .comm
        .allgather_var(&text)?
        .iter()
        .map(|b| serde_json::from_slice(b).expect("looks of the same library"))
        .collect();
    let d = decide(&looks, &g.cfg)?;
    if let Some(groups) = d.groups.clone() {
        set_groups(g, groups)?;
    }
    let lost_me = d.lost.contains(&rank);

    // (3) and (4).
    let opened = (|| -> Result<()> {
        if lost_me {
            if path.exists() {
                set_aside(&path, &looks[rank])?;
            }
            return Ok(());
        }
        open_survivor(g, &d)
    })();
    agree(&g.comm, opened)?;
    let rolled_back = d.rollback.iter().filter(|&&b| b).count();
    let mut report = RecoveryReport {
        epoch: d.epoch,
        lost: d.lost.clone(),
        rolled_back,
        ..Default::default()
    };
    if d.epoch == 0 {
        // No checkpoint was ever taken: lost ranks start with empty pools.
        let made = if lost_me { g.create_pool() } else { Ok(()) };
        agree(&g.comm, made)?;
        report.total = t0.elapsed();
        return Ok(report);
    }
    let made = if lost_me { replace_lost(g, &d) } else { Ok(()) };
    agree(&g.comm, made)?;

    let Some((resume, level)) = d.rebuild else {
        // Data whole: each level rebuilds its own damaged pages, or is encoded afresh.
        let td = Instant::now();
        for dec in &d.decode {
            let r = decode(g, dec, At::Committed)?;
            report.bytes_received += r.received;
            report.healed_pages += r.healed;
        }
        for &id in &d.refresh {
            refresh(g, id)?;
        }
        report.decode = td.elapsed();
        report.healed = d.healed_on(rank).iter().take(8).cloned().collect();
        if !d.decode.is_empty() || !d.refresh.is_empty() {
            tracing::warn!(healed = ?report.healed, "damaged pages rebuilt");
        }
        report.total = t0.elapsed();
        return Ok(report);
    };
    report.level = level;
    report.epoch = resume;
    let back = resume < d.epoch || !d.lost.is_empty();
    tracing::info!(lost = ?d.lost, level, epoch = resume, "rebuilding from the group");

    // (5) Back to the level's epoch: the journal holds the pages' values as of then.
    if !lost_me && resume < d.epoch {
        let page = g.page;
        let table = g.table.clone();
        let j = g
            .journal(level)
            .cloned()
            .expect("decided with a usable journal");
        g.with(|i| {
            let view = crate::pages::DataView::of(&i.engine, &table, page);
            for p in j.pages() {
                if let (Some(b), Some(dst)) = (j.intact(i.engine.pool(), page, p), view.live_mut(p))
                {
                    dst.copy_from_slice(b);
                }
            }
        });
    }

    // (6) Lost shards.
    let td = Instant::now();
    for dec in &d.decode {
        let at = if dec.level == level && back {
            At::Live
        } else {
            At::Committed
        };
        let r = decode(g, dec, at)?;
        report.bytes_received += r.received;
        report.healed_pages += r.healed;
    }
    report.decode = td.elapsed();
    report.healed = d.healed_on(rank).iter().take(8).cloned().collect();

    // (7) Protected again before the program goes on.
    if back {
        let top = g.levels.iter().map(|l| l.id).max().unwrap_or(crate::LOCAL);
        g.checkpoint_inner(top, Some(level))?;
    } else {
        for &id in &d.refresh {
            refresh(g, id)?;
        }
    }
    report.total = t0.elapsed();
    Ok(report)
}

/// Takes the groups a checkpoint recorded (a restart may place ranks differently).
fn set_groups(g: &mut Group, groups: Groups) -> Result<()> {
    let (gi, pos) = groups.place(g.rank());
    g.members = groups.groups[gi].clone();
    g.levels = make_levels(&g.cfg, g.members.len())?;
    g.groups = groups;
    g.gi = gi;
    g.pos = pos;
    Ok(())
}

/// Moves a pool that cannot be used aside; one that never held a checkpoint (the replacement
/// a recovery that did not finish made) is removed.
fn set_aside(path: &std::path::Path, look: &Look) -> Result<()> {
    let fail = |e: std::io::Error| crate::error::GroupError::Pool {
        path: path.display().to_string(),
        detail: format!("damaged, and cannot be moved aside: {e}"),
    };
    if look.present && look.meta.is_none() && look.damaged.is_none() {
        return std::fs::remove_file(path).map_err(fail);
    }
    let aside = path.with_extension("pool.damaged");
    tracing::warn!(path = %path.display(), aside = %aside.display(), "damaged pool: rebuilding this rank from the group");
    std::fs::rename(path, &aside).map_err(fail)
}

/// A survivor opens its pool at the decided epoch and settles each level's flight.
fn open_survivor(g: &mut Group, d: &Decision) -> Result<()> {
    let rank = g.rank();
    let o = kioku_pool::OpenOptions {
        medium: g.cfg.medium,
        kind: Some(kioku_ckpt::POOL_KIND.into()),
        ..Default::default()
    };
    let pool = kioku_pool::Pool::open(&g.cfg.pool_path(rank), &o).map_err(CkptError::from)?;
    let opts = EngineOptions {
        rollback_prepared: d.rollback[rank],
        keep_damaged_pages: true,
        ..Default::default()
    };
    let (mut engine, rec) = Engine::recover_in_opts(pool, MovableSelfSpace::default(), &opts)?;
    // Exact written pages, never whole regions: a page reported written costs a delta
    // computation and a zero check here, more than its write-protect fault.
    engine.set_adaptive(false)?;
    if !rec.damaged.is_empty() {
        tracing::warn!(pages = ?rec.damaged, "checkpoint pages damaged in both contexts; rebuilding them from the group");
    }
    let mut record = Record::read(engine.pool()).expect("looked at before");
    let page = g.page;
    for l in &d.levels {
        let Some(state) = record.level_mut(l.id) else {
            continue;
        };
        if l.apply[rank] {
            let mark = state.flight.clone().expect("a logged flight");
            crate::flight::apply(engine.pool_mut(), page, l.id, &mark, rank)?;
            let state = record.level_mut(l.id).expect("kept level");
            state.epoch = mark.epoch;
            state.stripe_pages = mark.stripe_pages;
            state.flight = None;
        } else {
            state.flight = None;
        }
    }
    record.write(engine.pool_mut())?;
    // No level has a flight now: whatever logs were left take no more space.
    for l in &d.levels {
        crate::store::Log::discard(engine.pool_mut(), l.id)?;
    }
    let meta = d.state[rank].clone();
    let pos = g.pos;
    g.table = meta
        .as_ref()
        .map(|m| m.tables[pos].clone())
        .unwrap_or_default();
    g.journals = meta
        .as_ref()
        .map(|m| {
            m.journals
                .iter()
                .filter(|mk| mk.base == record.epoch(mk.level) && mk.base > 0)
                .filter_map(|mk| Journal::load(engine.pool(), page, mk).ok())
                .collect()
        })
        .unwrap_or_default();
    g.meta = meta;
    *g.shared.lock() = Some(Inner { engine, record });
    Ok(())
}

/// A lost rank's new pool: its regions as the group recorded them, each level's record as
/// the survivors settled it, room for the parity it holds.
fn replace_lost(g: &mut Group, d: &Decision) -> Result<()> {
    let rank = g.rank();
    let pos = g.pos;
    let rec = d
        .state
        .iter()
        .flatten()
        .find(|m| m.members.contains(&rank))
        .expect("a survivor of this group")
        .clone();
    let table = rec.tables[pos].clone();
    g.create_pool()?;
    for r in &table.regions {
        g.create_user_region(r.id, r.bytes as usize)?;
    }
    let mut meta = rec;
    meta.rank = rank;
    meta.journals.clear();
    g.table = table;
    g.meta = Some(meta);
    let page = g.page;
    let held: Vec<(u8, usize)> = g.levels.iter().map(|l| (l.id, l.scheme.m)).collect();
    g.with(|i| -> Result<()> {
        for l in &d.levels {
            if let Some(s) = i.record.level_mut(l.id) {
                s.epoch = l.epoch;
                s.stripe_pages = l.stripe_pages;
                s.flight = None;
            }
            let m = held.iter().find(|x| x.0 == l.id).map_or(0, |x| x.1);
            Parity::ensure(i.engine.pool_mut(), page, l.id, m, l.stripe_pages)?;
        }
        i.record.write(i.engine.pool_mut())
    })?;
    let _ = user_region_name;
    Ok(())
}
