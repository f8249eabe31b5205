//! What a restart of a group job would recover, decided from what each rank finds in its
//! pool — the same decision for `kioku_group_recover` (every rank computes it from the
//! gathered looks) and for `kioku group inspect` (from the pool files, without MPI).

use crate::config::Config;
use crate::error::{GroupError, Result};
use crate::layout::{Groups, Scheme};
use crate::meta::GroupMeta;
use crate::{PARTNER, RS};
use kioku_ckpt::{commit_state, CkptError, EngineOptions};
use kioku_pool::MediumChoice;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What one rank found in its pool.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Look {
    /// The pool exists and opens (it may hold no checkpoint yet).
    pub present: bool,
    /// The pool was damaged (set aside when recovering); the rank counts as lost.
    pub damaged: Option<String>,
    /// The pool cannot be used and must not be rebuilt over (held by another process, of
    /// another program, …): recovery stops with this.
    pub fatal: Option<String>,
    /// The last checkpoint (possibly only prepared) and, if prepared, the one before.
    pub meta: Option<GroupMeta>,
    pub prepared: bool,
    pub previous: Option<GroupMeta>,
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

/// Reads the pool at `path` without changing it; with `set_aside_damaged`, a damaged pool is
/// renamed to `<pool>.damaged` (recovery rebuilds the rank; the file is kept).
pub fn look_at(path: &Path, medium: MediumChoice, set_aside_damaged: bool) -> Look {
    let mut out = Look::default();
    if !path.exists() {
        return out;
    }
    let opts = EngineOptions {
        medium,
        ..Default::default()
    };
    let st = match commit_state(path, &opts) {
        Ok(st) => st,
        Err(e) if is_damage(&e) => {
            out.damaged = Some(e.to_string());
            if set_aside_damaged {
                let aside = path.with_extension("pool.damaged");
                tracing::warn!(path = %path.display(), error = %e, aside = %aside.display(), "damaged pool: rebuilding this rank from the group");
                if let Err(e) = std::fs::rename(path, &aside) {
                    out.fatal = Some(format!(
                        "{}: damaged ({e}) and cannot be moved aside",
                        path.display()
                    ));
                }
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
    match GroupMeta::decode(&st.metadata) {
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
    out.previous = st.previous_metadata.as_deref().and_then(GroupMeta::decode);
    out
}

/// The scheme of level `id` over a group of `g` members with `parity` parity shards.
pub fn scheme_of(id: u8, g: usize, parity: usize) -> Scheme {
    if id == PARTNER {
        Scheme::new(1, 1, g)
    } else {
        Scheme::new(g - parity, parity, g)
    }
}

/// What a recovery does.
#[derive(Clone, Debug, Serialize)]
pub struct Decision {
    /// The epoch every survivor returns to.
    pub epoch: u64,
    /// Each rank's checkpoint metadata at that epoch (`None`: lost, or no checkpoint).
    pub state: Vec<Option<GroupMeta>>,
    /// Ranks whose prepared, unagreed checkpoint is rolled back.
    pub rollback: Vec<bool>,
    /// Ranks to rebuild.
    pub lost: Vec<usize>,
    /// The groups the checkpoint recorded (when one exists).
    pub groups: Option<Groups>,
    /// When ranks are lost: the epoch and level they are rebuilt from (the program resumes
    /// at that epoch).
    pub rebuild: Option<(u64, u8)>,
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
    let lost: Vec<usize> = (0..n).filter(|&r| !looks[r].present).collect();

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

    let mut rebuild: Option<(u64, u8)> = None;
    if !lost.is_empty() && e > 0 {
        // The newest level whose parity can rebuild every group's losses — decided before any
        // pool is touched, so that a refusal changes nothing.
        let any = state.iter().flatten().next().expect("a survivor").clone();
        let groups = groups.clone().expect("recorded groups");
        let levels = [(cfg.partner, PARTNER), (cfg.rs, RS)];
        let mut candidates: Vec<(u64, u8)> = levels
            .into_iter()
            .filter(|&(kept, _)| kept)
            .map(|(_, id)| id)
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
                .all(|grp| scheme_of(id, grp.len(), cfg.parity).tolerates(&lost_in(grp)))
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
            let m = cfg.parity;
            return Err(GroupError::TooManyLost {
                group: gi,
                lost: lost_in(grp).len(),
                ranks: grp.iter().copied().filter(|r| lost.contains(r)).collect(),
                m,
                need: lost_in(grp).len() - m,
            });
        };
        rebuild = Some((t, level));
    }
    Ok(Decision {
        epoch: e,
        state,
        rollback,
        lost,
        groups,
        rebuild,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{Table, MAGIC, VERSION};

    fn cfg(partner: bool) -> Config {
        Config {
            group_size: 6,
            parity: 2,
            partner,
            rs: true,
            ..Config::default()
        }
    }

    fn meta(rank: usize, epoch: u64, last_partner: u64, last_rs: u64, partner: bool) -> GroupMeta {
        GroupMeta {
            magic: MAGIC.into(),
            version: VERSION,
            ranks: 6,
            rank,
            epoch,
            level: 1,
            last_partner,
            last_rs,
            stripe_pages_partner: 1,
            stripe_pages_rs: 1,
            members: (0..6).collect(),
            tables: vec![Table::default(); 6],
            group_size: 6,
            parity: 2,
            partner,
            rs: true,
        }
    }

    fn looks(epoch: u64, lp: u64, lr: u64, partner: bool) -> Vec<Look> {
        (0..6)
            .map(|r| Look {
                present: true,
                meta: Some(meta(r, epoch, lp, lr, partner)),
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
        l[2].meta = Some(meta(2, 6, 0, 6, false));
        l[2].prepared = true;
        l[2].previous = Some(meta(2, 5, 0, 5, false));
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
}
