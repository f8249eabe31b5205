//! Per-page access counts of the tracked spans: how often each page was observed and how often
//! it had been accessed when it was.
//!
//! A page's `count` is a short-memory score: an observation that finds the page accessed adds
//! one (up to 255), one that finds it idle halves it. A page observed accessed `t` times in a
//! row therefore reaches `t`, and a page that turns cold loses its heat within a few
//! observations. `hits` and `seen` are the totals since the page was first tracked.

use crate::PageRange;

/// The counts of one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageCount {
    /// Page address.
    pub addr: usize,
    /// Recent heat: +1 per observation that found the page accessed, halved by one that did
    /// not. Compare it with a threshold.
    pub count: u8,
    /// Observations that found the page accessed.
    pub hits: u32,
    /// Observations of the page.
    pub seen: u32,
}

/// The counts of one tracked span (a contiguous range of pages).
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) range: PageRange,
    count: Vec<u8>,
    hits: Vec<u32>,
    seen: Vec<u32>,
}

impl Span {
    fn new(range: PageRange, ps: usize) -> Span {
        let n = range.len() / ps;
        Span {
            range,
            count: vec![0; n],
            hits: vec![0; n],
            seen: vec![0; n],
        }
    }

    /// The part `[from, to)` (page indices) as a span of its own.
    fn slice(&self, from: usize, to: usize, ps: usize) -> Span {
        Span {
            range: PageRange::new(self.range.start + from * ps, self.range.start + to * ps),
            count: self.count[from..to].to_vec(),
            hits: self.hits[from..to].to_vec(),
            seen: self.seen[from..to].to_vec(),
        }
    }

    fn get(&self, i: usize, ps: usize) -> PageCount {
        PageCount {
            addr: self.range.start + i * ps,
            count: self.count[i],
            hits: self.hits[i],
            seen: self.seen[i],
        }
    }
}

/// Counts of every tracked page, in spans sorted by address.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    spans: Vec<Span>,
    ps: usize,
}

impl Counts {
    pub(crate) fn new(ps: usize) -> Counts {
        Counts {
            spans: Vec::new(),
            ps,
        }
    }

    #[cfg(test)]
    pub(crate) fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Adds `r` (not overlapping any span) with zero counts.
    pub(crate) fn add(&mut self, r: PageRange) {
        let at = self.spans.partition_point(|s| s.range.start < r.start);
        self.spans.insert(at, Span::new(r, self.ps));
    }

    /// Forgets the pages of `r` (spans are cut where `r` ends inside them).
    pub(crate) fn remove(&mut self, r: PageRange) {
        let ps = self.ps;
        let mut out = Vec::with_capacity(self.spans.len() + 1);
        for s in self.spans.drain(..) {
            if s.range.end <= r.start || s.range.start >= r.end {
                out.push(s);
                continue;
            }
            let n = s.range.len() / ps;
            if s.range.start < r.start {
                out.push(s.slice(0, (r.start - s.range.start) / ps, ps));
            }
            if s.range.end > r.end {
                out.push(s.slice((r.end - s.range.start) / ps, n, ps));
            }
        }
        self.spans = out;
    }

    /// Resets the counts of the pages of `r` to zero (they keep being tracked).
    pub(crate) fn reset(&mut self, r: PageRange) {
        let ps = self.ps;
        for s in &mut self.spans {
            let (a, b) = (s.range.start.max(r.start), s.range.end.min(r.end));
            if a >= b {
                continue;
            }
            let (i, j) = ((a - s.range.start) / ps, (b - s.range.start) / ps);
            s.count[i..j].fill(0);
            s.hits[i..j].fill(0);
            s.seen[i..j].fill(0);
        }
    }

    fn locate(&self, addr: usize) -> Option<(usize, usize)> {
        let at = self.spans.partition_point(|s| s.range.end <= addr);
        let s = self.spans.get(at)?;
        s.range
            .contains(addr)
            .then(|| (at, (addr - s.range.start) / self.ps))
    }

    /// Records one observation of the page at `addr` (ignored when it is not tracked). Returns
    /// the count before and after.
    pub(crate) fn observe(&mut self, addr: usize, accessed: bool) -> Option<(u8, u8)> {
        let (s, i) = self.locate(addr)?;
        let s = &mut self.spans[s];
        let before = s.count[i];
        s.seen[i] = s.seen[i].saturating_add(1);
        if accessed {
            s.hits[i] = s.hits[i].saturating_add(1);
            s.count[i] = before.saturating_add(1);
        } else {
            s.count[i] = before / 2;
        }
        Some((before, s.count[i]))
    }

    /// The counts of the page at `addr`, if tracked.
    pub(crate) fn get(&self, addr: usize) -> Option<PageCount> {
        self.locate(addr)
            .map(|(s, i)| self.spans[s].get(i, self.ps))
    }

    /// Appends the pages of `r` for which `keep` holds, in address order.
    pub(crate) fn collect(
        &self,
        r: PageRange,
        out: &mut Vec<PageCount>,
        keep: impl Fn(&PageCount) -> bool,
    ) {
        let ps = self.ps;
        let first = self.spans.partition_point(|s| s.range.end <= r.start);
        for s in &self.spans[first..] {
            if s.range.start >= r.end {
                break;
            }
            let (a, b) = (s.range.start.max(r.start), s.range.end.min(r.end));
            for i in (a - s.range.start) / ps..(b - s.range.start) / ps {
                let c = s.get(i, ps);
                if keep(&c) {
                    out.push(c);
                }
            }
        }
    }

    /// Pages tracked in total.
    pub(crate) fn pages(&self) -> usize {
        self.spans.iter().map(|s| s.range.len() / self.ps).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: usize = 4096;

    fn r(a: usize, b: usize) -> PageRange {
        PageRange::new(a * PS, b * PS)
    }

    #[test]
    fn observations_build_and_decay_the_count() {
        let mut c = Counts::new(PS);
        c.add(r(10, 20));
        for _ in 0..5 {
            c.observe(12 * PS, true);
        }
        assert_eq!(c.get(12 * PS).unwrap().count, 5);
        c.observe(12 * PS, false);
        c.observe(12 * PS, false);
        let p = c.get(12 * PS).unwrap();
        assert_eq!((p.count, p.hits, p.seen), (1, 5, 7));
        // Untracked addresses are ignored.
        c.observe(5 * PS, true);
        assert!(c.get(5 * PS).is_none());
        assert_eq!(c.get(19 * PS).unwrap().seen, 0);
    }

    #[test]
    fn removing_the_middle_keeps_both_ends_with_their_counts() {
        let mut c = Counts::new(PS);
        c.add(r(30, 40));
        c.add(r(0, 10));
        c.observe(2 * PS, true);
        c.observe(8 * PS, true);
        c.observe(33 * PS, true);
        c.remove(r(5, 32));
        assert_eq!(c.spans().len(), 2);
        assert_eq!(c.spans()[0].range, r(0, 5));
        assert_eq!(c.spans()[1].range, r(32, 40));
        assert_eq!(c.get(2 * PS).unwrap().hits, 1);
        assert!(c.get(8 * PS).is_none());
        assert_eq!(c.get(33 * PS).unwrap().hits, 1);
        assert_eq!(c.pages(), 13);
        let mut out = Vec::new();
        c.collect(r(0, 100), &mut out, |p| p.hits > 0);
        let addrs: Vec<usize> = out.iter().map(|p| p.addr / PS).collect();
        assert_eq!(addrs, vec![2, 33]);
        c.reset(r(0, 3));
        assert_eq!(
            c.get(2 * PS).unwrap(),
            PageCount {
                addr: 2 * PS,
                ..Default::default()
            }
        );
    }
}
