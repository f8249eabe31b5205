//! Who protects whom: ranks into groups, and within a group the stripes of a code.
//!
//! Groups are formed so that their members sit on different nodes when the job spans nodes
//! (ranks are ordered by their index on their node, then by node, and cut into groups), so a
//! node failure costs a group one member. Within a group of `g` ranks a scheme `(k, m)` has
//! `g` stripes, SCR-style rotated: stripe `j` has parity holders at positions `j, j+1, …,
//! j+m-1` and data contributors at the `k` positions after them (mod `g`). Every member holds
//! parity of `m` stripes and contributes to `k`; data page `p` of a member is chunk
//! `c = p mod k`, at stripe-local page `q = p / k` of the stripe where it is contributor `c`.
//! With `k = g - m` (the `rs` level) every member belongs to every stripe, so any `m` lost
//! members are at most `m` lost shards of each stripe; with `k = m = 1` (the `partner` level)
//! each member's data is copied to the member before it.

use crate::error::{GroupError, Result};

/// The groups of a job: `groups[i]` lists world ranks, in position order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Groups {
    pub groups: Vec<Vec<usize>>,
}

impl Groups {
    /// Cuts `node_of.len()` ranks (`node_of[r]`: a name of rank r's node) into groups of about
    /// `size` (at least `min` each), members on distinct nodes where possible.
    pub fn new(node_of: &[usize], size: usize, min: usize) -> Result<Groups> {
        let n = node_of.len();
        if n < min {
            return Err(GroupError::Config(format!(
                "{n} ranks cannot form a group of at least {min} (parity + 1); run more ranks or lower KIOKU_PARITY"
            )));
        }
        let size = size.max(min);
        let mut order: Vec<(usize, usize, usize)> = Vec::with_capacity(n);
        let mut seen = std::collections::HashMap::new();
        for (r, &node) in node_of.iter().enumerate() {
            let local = seen.entry(node).or_insert(0usize);
            order.push((*local, node, r));
            *local += 1;
        }
        order.sort_unstable();
        let count = (n / size).max(1);
        let (base, extra) = (n / count, n % count);
        let mut groups = Vec::with_capacity(count);
        let mut it = order.into_iter().map(|(_, _, r)| r);
        for g in 0..count {
            let len = base + usize::from(g < extra);
            groups.push(it.by_ref().take(len).collect());
        }
        Ok(Groups { groups })
    }

    /// (group index, position) of world rank `rank`.
    pub fn place(&self, rank: usize) -> (usize, usize) {
        for (gi, g) in self.groups.iter().enumerate() {
            if let Some(pos) = g.iter().position(|&r| r == rank) {
                return (gi, pos);
            }
        }
        panic!("rank {rank} is in no group");
    }
}

/// A code over one group of `g` members: `k` data shards and `m` parity shards per stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    pub k: usize,
    pub m: usize,
    pub g: usize,
}

impl Scheme {
    pub fn new(k: usize, m: usize, g: usize) -> Scheme {
        assert!(k >= 1 && m >= 1 && k + m <= g, "scheme {k}+{m} over {g}");
        Scheme { k, m, g }
    }

    /// Positions holding parity `0..m` of stripe `j`.
    pub fn holders(&self, j: usize) -> Vec<usize> {
        (0..self.m).map(|t| (j + t) % self.g).collect()
    }

    /// Positions contributing data shards `0..k` of stripe `j`.
    pub fn contributors(&self, j: usize) -> Vec<usize> {
        (0..self.k).map(|i| (j + self.m + i) % self.g).collect()
    }

    /// The stripe in which position `pos` is contributor `c` (its chunk `c`).
    pub fn stripe_of_chunk(&self, pos: usize, c: usize) -> usize {
        (pos + 2 * self.g - self.m - c) % self.g
    }

    /// `(stripe, parity index)` pairs position `pos` holds.
    pub fn held(&self, pos: usize) -> Vec<(usize, usize)> {
        (0..self.m)
            .map(|t| ((pos + self.g - t) % self.g, t))
            .collect()
    }

    /// Pages of each stripe for members with at most `max_pages` data pages.
    pub fn stripe_pages(&self, max_pages: u64) -> u64 {
        max_pages.div_ceil(self.k as u64)
    }

    /// Whether losing `lost` positions leaves every stripe decodable.
    pub fn tolerates(&self, lost: &[usize]) -> bool {
        (0..self.g).all(|j| {
            let shards = self.holders(j).into_iter().chain(self.contributors(j));
            shards.filter(|p| lost.contains(p)).count() <= self.m
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_member_contributes_each_chunk_once_and_holds_m_parities() {
        for (k, m, g) in [
            (4, 2, 6),
            (8, 2, 10),
            (1, 1, 4),
            (3, 1, 5),
            (1, 1, 2),
            (5, 3, 9),
        ] {
            let s = Scheme::new(k, m, g);
            for pos in 0..g {
                // Chunk c of pos is in stripe_of_chunk as contributor c.
                for c in 0..k {
                    let j = s.stripe_of_chunk(pos, c);
                    assert_eq!(s.contributors(j)[c], pos, "{k}+{m}/{g} pos {pos} chunk {c}");
                }
                let held = s.held(pos);
                assert_eq!(held.len(), m);
                for (j, t) in held {
                    assert_eq!(s.holders(j)[t], pos);
                }
            }
            for j in 0..g {
                let mut all: Vec<usize> = s.holders(j);
                all.extend(s.contributors(j));
                all.sort_unstable();
                all.dedup();
                assert_eq!(all.len(), k + m, "no member twice in stripe {j}");
            }
        }
    }

    #[test]
    fn rs_tolerates_any_m_losses_not_more() {
        let s = Scheme::new(4, 2, 6);
        for a in 0..6 {
            for b in 0..6 {
                assert!(s.tolerates(&[a, b]));
            }
        }
        assert!(!s.tolerates(&[0, 1, 2]));
        let p = Scheme::new(1, 1, 4);
        assert!(
            p.tolerates(&[0, 2]),
            "partners 0 and 2 are not each other's"
        );
        assert!(!p.tolerates(&[0, 1]), "0's copy is on 3, 1's on 0");
    }

    #[test]
    fn groups_span_nodes_and_balance() {
        // Two nodes of four ranks: groups of four take two from each node.
        let g = Groups::new(&[0, 0, 0, 0, 4, 4, 4, 4], 4, 3).unwrap();
        assert_eq!(g.groups, vec![vec![0, 4, 1, 5], vec![2, 6, 3, 7]]);
        // Ten ranks in groups of about four: 5 + 5.
        let g = Groups::new(&[0; 10], 4, 3).unwrap();
        assert_eq!(
            g.groups.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![5, 5]
        );
        assert_eq!(g.place(7), (1, 2));
        assert!(Groups::new(&[0; 2], 6, 3).is_err());
        // Fewer ranks than the group size: one group of all.
        assert_eq!(Groups::new(&[0; 5], 8, 3).unwrap().groups.len(), 1);
    }
}
