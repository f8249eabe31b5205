//! Recovery after a node failure (SCASH-FT): which checkpoint every node rolls back to, and who
//! takes over the lost DSM ids.
//!
//! The survivors report to a leader (the lowest live DSM id) the checkpoints they hold: their
//! own images and the images they hold for the node before them (they are its buddy). A DSM id
//! can be restored at checkpoint `e` when its owner survived and holds its own image of `e`, or
//! its buddy survived and holds a copy of it. The job rolls back to the newest `e` every DSM id
//! can be restored at. A lost DSM id goes to an idle standby, which gets the image from the
//! buddy. This module is the leader's decision, without any communication, so that it can be
//! tested on its own.

use std::collections::{BTreeMap, BTreeSet};

/// What one survivor reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Its generation (the number of recoveries it has been through).
    pub gen: u64,
    /// Its barrier epoch.
    pub epoch: u64,
    /// The owner table it works with.
    pub owners: Vec<u32>,
    /// The epochs of its own complete images.
    pub own: Vec<u64>,
    /// The epochs of the complete images it holds for the DSM id before it.
    pub held: Vec<u64>,
}

/// The leader's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The new generation.
    pub gen: u64,
    /// The checkpoint every node rolls back to.
    pub checkpoint: u64,
    /// The barrier epoch the job goes on from.
    pub epoch: u64,
    /// The new owner table (DSM id → MCAPI node).
    pub owners: Vec<u32>,
    /// The DSM ids whose (new) owner gets the image from the buddy.
    pub handover: Vec<u32>,
}

/// The newest owner table among the reports (a node that went through a recovery the others
/// have not finished knows who took over).
pub fn newest_owners(reports: &BTreeMap<u32, Report>, fallback: &[u32]) -> Vec<u32> {
    reports
        .values()
        .max_by_key(|r| r.gen)
        .map(|r| r.owners.clone())
        .unwrap_or_else(|| fallback.to_vec())
}

/// The DSM ids whose owner is not lost.
pub fn survivors(owners: &[u32], lost: &BTreeSet<u32>) -> Vec<u32> {
    (0..owners.len() as u32)
        .filter(|&d| !lost.contains(&owners[d as usize]))
        .collect()
}

/// Decides the recovery, or says in one line why the job cannot go on (naming the nodes).
/// `lost` and `idle` are MCAPI nodes; `idle` are the live standbys that own no DSM id, in the
/// order they are to be used. Every survivor must have reported.
pub fn decide(
    owners: &[u32],
    lost: &BTreeSet<u32>,
    reports: &BTreeMap<u32, Report>,
    idle: &[u32],
) -> Result<Decision, String> {
    let n = owners.len() as u32;
    let alive = |d: u32| !lost.contains(&owners[d as usize]);
    let buddy = |d: u32| (d + 1) % n;
    if reports
        .iter()
        .filter(|(&d, _)| alive(d))
        .all(|(_, r)| r.own.is_empty() && r.held.is_empty())
    {
        let gone: Vec<u32> = (0..n).filter(|&d| !alive(d)).collect();
        return Err(format!(
            "node(s) {gone:?} were lost before the first checkpoint: there is nothing to roll back to (take a checkpoint once the job is set up)"
        ));
    }
    let mut common: Option<BTreeSet<u64>> = None;
    for d in 0..n {
        let b = buddy(d);
        let mut can: BTreeSet<u64> = BTreeSet::new();
        if alive(d) {
            can.extend(&reports[&d].own);
        }
        if alive(b) && b != d {
            can.extend(&reports[&b].held);
        }
        if can.is_empty() {
            return Err(if !alive(b) || b == d {
                // (A live node without an image of its own is a standby whose takeover the
                // buddy's loss cut short: its state went with the buddy too.)
                format!("node {d} and its buddy node {b} were both lost: node {d}'s checkpoints went with them, the job cannot continue")
            } else if alive(d) {
                format!("node {d} holds no checkpoint and neither does its buddy node {b}: take a checkpoint before a failure can be recovered")
            } else {
                format!("node {d} was lost and its buddy node {b} holds no complete checkpoint of it (none completed since node {b} took over after an earlier failure, or node {d} was lost during the first checkpoint): the job cannot continue")
            });
        }
        common = Some(match common {
            None => can,
            Some(c) => c.intersection(&can).copied().collect(),
        });
    }
    let Some(&checkpoint) = common.as_ref().and_then(|c| c.last()) else {
        return Err(
            "the nodes hold no common checkpoint (a failure during the first checkpoint?): the job cannot continue"
                .into(),
        );
    };
    let mut new = owners.to_vec();
    let mut spare = idle.iter().copied();
    let mut handover = Vec::new();
    for d in 0..n {
        if !alive(d) {
            new[d as usize] = spare.next().ok_or_else(|| {
                format!("node {d} was lost and no standby is left to take over: start the job with more standbys (KIOKU_DSM_STANDBYS)")
            })?;
            handover.push(d);
        } else if !reports[&d].own.contains(&checkpoint) {
            handover.push(d);
        }
    }
    let gen = reports.values().map(|r| r.gen).max().unwrap_or(0) + 1;
    let epoch = reports.values().map(|r| r.epoch).max().unwrap_or(0) + 1;
    Ok(Decision {
        gen,
        checkpoint,
        epoch,
        owners: new,
        handover,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(own: &[u64], held: &[u64]) -> Report {
        Report {
            gen: 0,
            epoch: 10,
            owners: vec![0, 1, 2, 3],
            own: own.to_vec(),
            held: held.to_vec(),
        }
    }

    #[test]
    fn a_lost_node_is_taken_over_at_the_newest_checkpoint_its_buddy_holds() {
        let owners = [0, 1, 2, 3];
        let lost = BTreeSet::from([2]);
        // Node 2 died during checkpoint 7: node 3 (its buddy) has only 5 of it; node 0 had
        // already stored its own 7.
        let reports = BTreeMap::from([
            (0, rep(&[5, 7], &[5])),
            (1, rep(&[3, 5], &[3, 5])),
            (3, rep(&[3, 5], &[3, 5])),
        ]);
        let d = decide(&owners, &lost, &reports, &[4, 5]).unwrap();
        assert_eq!(
            (d.gen, d.checkpoint, d.epoch, d.owners, d.handover),
            (1, 5, 11, vec![0, 1, 4, 3], vec![2])
        );
    }

    #[test]
    fn a_node_and_its_buddy_lost_is_an_error_naming_both() {
        let owners = [0, 1, 2, 3];
        let lost = BTreeSet::from([1, 2]);
        let reports = BTreeMap::from([(0, rep(&[5], &[5])), (3, rep(&[5], &[5]))]);
        let e = decide(&owners, &lost, &reports, &[4, 5]).unwrap_err();
        assert!(
            e.contains("node 1 and its buddy node 2 were both lost"),
            "{e}"
        );
    }

    #[test]
    fn a_second_failure_before_the_next_checkpoint_names_both_nodes() {
        // Standby 4 took over DSM id 2 and holds nothing for id 1 yet; now id 1 is lost.
        let owners = [0, 1, 4, 3];
        let lost = BTreeSet::from([1]);
        let mut r2 = rep(&[5], &[]);
        r2.owners = owners.to_vec();
        r2.gen = 1;
        let reports = BTreeMap::from([(0, rep(&[5], &[5])), (2, r2), (3, rep(&[5], &[5]))]);
        let e = decide(&owners, &lost, &reports, &[5]).unwrap_err();
        assert!(
            e.contains("node 1 was lost and its buddy node 2 holds no complete checkpoint of it"),
            "{e}"
        );
    }

    #[test]
    fn no_standby_left_and_no_checkpoint_are_errors() {
        let owners = [0, 1, 2];
        let lost = BTreeSet::from([1]);
        let reports = BTreeMap::from([(0, rep(&[2], &[2])), (2, rep(&[2], &[2]))]);
        let e = decide(&owners, &lost, &reports, &[]).unwrap_err();
        assert!(e.contains("no standby is left"), "{e}");
        let reports = BTreeMap::from([(0, rep(&[], &[])), (2, rep(&[], &[]))]);
        let e = decide(&owners, &lost, &reports, &[3]).unwrap_err();
        assert!(e.contains("lost before the first checkpoint"), "{e}");
    }

    #[test]
    fn a_survivor_missing_the_chosen_image_gets_it_from_its_buddy() {
        // Node 1 died before storing its own 9 ... and node 0 too, but its buddy has 9.
        let owners = [0, 1, 2];
        let lost = BTreeSet::from([2]);
        let reports = BTreeMap::from([(0, rep(&[7], &[7, 9])), (1, rep(&[7, 9], &[7, 9]))]);
        // Node 2's copy at node 0 has 7 and 9; node 0's own has only 7 and its buddy (1) holds
        // 7 and 9: everyone can be restored at 9, node 0 from node 1's copy.
        let d = decide(&owners, &lost, &reports, &[3]).unwrap();
        assert_eq!((d.checkpoint, d.handover), (9, vec![0, 2]));
    }
}
