//! A sorted set of disjoint, coalesced page ranges.

use crate::PageRange;

#[derive(Debug, Default, Clone)]
pub(crate) struct RangeSet {
    ranges: Vec<PageRange>,
}

impl RangeSet {
    pub(crate) fn as_slice(&self) -> &[PageRange] {
        &self.ranges
    }

    /// The parts of `r` not yet in the set.
    pub(crate) fn missing(&self, r: PageRange) -> Vec<PageRange> {
        let mut out = Vec::new();
        let mut cur = r.start;
        for t in &self.ranges {
            if t.end <= cur {
                continue;
            }
            if t.start >= r.end {
                break;
            }
            if t.start > cur {
                out.push(PageRange::new(cur, t.start));
            }
            cur = cur.max(t.end);
            if cur >= r.end {
                break;
            }
        }
        if cur < r.end {
            out.push(PageRange::new(cur, r.end));
        }
        out
    }

    /// The parts of `r` that are in the set.
    pub(crate) fn present(&self, r: PageRange) -> Vec<PageRange> {
        self.ranges
            .iter()
            .filter(|t| t.start < r.end && r.start < t.end)
            .map(|t| PageRange::new(t.start.max(r.start), t.end.min(r.end)))
            .collect()
    }

    pub(crate) fn insert(&mut self, r: PageRange) {
        let mut merged = r;
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        let mut placed = false;
        for t in self.ranges.drain(..) {
            if t.end < merged.start {
                out.push(t);
            } else if t.start > merged.end {
                if !placed {
                    out.push(merged);
                    placed = true;
                }
                out.push(t);
            } else {
                merged.start = merged.start.min(t.start);
                merged.end = merged.end.max(t.end);
            }
        }
        if !placed {
            out.push(merged);
        }
        self.ranges = out;
    }

    pub(crate) fn remove(&mut self, r: PageRange) {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for t in self.ranges.drain(..) {
            if t.end <= r.start || t.start >= r.end {
                out.push(t);
                continue;
            }
            if t.start < r.start {
                out.push(PageRange::new(t.start, r.start));
            }
            if t.end > r.end {
                out.push(PageRange::new(r.end, t.end));
            }
        }
        self.ranges = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(a: usize, b: usize) -> PageRange {
        PageRange::new(a, b)
    }

    #[test]
    fn insert_remove_missing() {
        let mut s = RangeSet::default();
        s.insert(r(10, 20));
        s.insert(r(30, 40));
        assert_eq!(s.missing(r(0, 50)), vec![r(0, 10), r(20, 30), r(40, 50)]);
        assert_eq!(s.present(r(15, 35)), vec![r(15, 20), r(30, 35)]);
        s.insert(r(20, 30));
        assert_eq!(s.as_slice(), &[r(10, 40)]);
        s.remove(r(15, 25));
        assert_eq!(s.as_slice(), &[r(10, 15), r(25, 40)]);
        assert!(s.missing(r(26, 30)).is_empty());
        s.insert(r(0, 5));
        assert_eq!(s.as_slice(), &[r(0, 5), r(10, 15), r(25, 40)]);
        s.remove(r(0, 100));
        assert!(s.as_slice().is_empty());
    }
}

#[cfg(test)]
mod prop {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn pages(ranges: &[PageRange]) -> BTreeSet<usize> {
        ranges.iter().flat_map(|r| r.start..r.end).collect()
    }

    proptest! {
        /// The set behaves like a set of unit cells and stays sorted, disjoint and coalesced.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((any::<bool>(), 0usize..64, 1usize..16), 0..40)) {
            let mut s = RangeSet::default();
            let mut model = BTreeSet::new();
            for (insert, start, len) in ops {
                let r = PageRange::new(start, start + len);
                let want_missing: BTreeSet<usize> = (r.start..r.end).filter(|p| !model.contains(p)).collect();
                prop_assert_eq!(pages(&s.missing(r)), want_missing);
                let want_present: BTreeSet<usize> = (r.start..r.end).filter(|p| model.contains(p)).collect();
                prop_assert_eq!(pages(&s.present(r)), want_present);
                if insert {
                    s.insert(r);
                    model.extend(r.start..r.end);
                } else {
                    s.remove(r);
                    for p in r.start..r.end {
                        model.remove(&p);
                    }
                }
                prop_assert_eq!(pages(s.as_slice()), model.clone());
                for w in s.as_slice().windows(2) {
                    prop_assert!(w[0].end < w[1].start);
                }
                prop_assert!(s.as_slice().iter().all(|r| r.start < r.end));
            }
        }
    }
}
