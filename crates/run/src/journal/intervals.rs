//! A set of byte ranges of a file whose checkpoint contents are already in the journal (one per
//! file per epoch), so each range is saved once.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-touching half-open ranges, by start.
#[derive(Clone, Debug, Default)]
pub struct Intervals {
    /// start -> end
    map: BTreeMap<u64, u64>,
}

impl Intervals {
    /// The parts of `r` not in the set, in order.
    pub fn missing(&self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        if r.start >= r.end {
            return out;
        }
        let mut at = r.start;
        // The range that starts at or before `at` may cover it.
        if let Some((_, &e)) = self.map.range(..=at).next_back() {
            at = at.max(e);
        }
        for (&s, &e) in self.map.range(r.start..r.end) {
            if at >= r.end {
                break;
            }
            if s > at {
                out.push(at..s.min(r.end));
            }
            at = at.max(e);
        }
        if at < r.end {
            out.push(at..r.end);
        }
        out
    }

    /// Adds `r`, merging with what it overlaps or touches.
    pub fn insert(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        let (mut s, mut e) = (r.start, r.end);
        if let Some((&ps, &pe)) = self.map.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
            }
        }
        let covered: Vec<u64> = self.map.range(s..=e).map(|(&k, _)| k).collect();
        for k in covered {
            let ke = self.map.remove(&k).expect("present");
            e = e.max(ke);
        }
        self.map.insert(s, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn agrees_with_a_bitmap() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..200 {
            let mut set = Intervals::default();
            let mut bits = vec![false; 300];
            for _ in 0..30 {
                let a = rng.gen_range(0..300u64);
                let b = rng.gen_range(a..=300u64);
                if rng.gen_bool(0.5) {
                    set.insert(a..b);
                    for x in a..b {
                        bits[x as usize] = true;
                    }
                } else {
                    let miss = set.missing(a..b);
                    let mut want = Vec::new();
                    let mut x = a;
                    while x < b {
                        if !bits[x as usize] {
                            let s = x;
                            while x < b && !bits[x as usize] {
                                x += 1;
                            }
                            want.push(s..x);
                        } else {
                            x += 1;
                        }
                    }
                    assert_eq!(miss, want);
                }
            }
        }
    }
}
