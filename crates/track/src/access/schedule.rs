//! Which pages to observe in each scan: a rotation over the candidate pages in short runs.
//!
//! At the start of a rotation the tracker lists its *candidates* — tracked pages that are
//! populated and not mapped by a huge page (sampling a page of a PMD-mapped huge page would
//! split the mapping). The candidates are cut into runs of `run` pages and grouped in *phases*:
//! phase `k` holds the runs whose index is `≡ k (mod phases)`, so the runs of a phase are spread
//! over the whole address space. Phases are queued in bit-reversal order, and each scan takes the
//! next runs from the queue up to its sample size (which may change from one scan to the next);
//! every candidate is observed once per rotation.
//!
//! Without userfaultfd the refault backend suffers from the kernel's fault-around: a read fault
//! maps every cached page of its 64 KiB window, so a sampled page would look accessed when a
//! neighbour was read. In that mode runs are single pages, at most one per window per scan, and
//! only in windows whose every page is a candidate (present, so never faulted around).

use crate::PageRange;

/// Pages of one fault-around window (64 KiB of 4 KiB pages; the kernel default).
pub(crate) const WINDOW_PAGES: usize = 16;

/// How runs are cut from the candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// Runs of up to this many consecutive candidate pages.
    Runs(usize),
    /// One page per fully-candidate fault-around window.
    OnePerWindow,
}

/// One rotation's runs and where the schedule stands in it.
#[derive(Debug, Default)]
pub(crate) struct Rotation {
    /// Runs of candidate pages, in address order.
    runs: Vec<PageRange>,
    /// The phases in the order they are visited.
    order: Vec<usize>,
    /// Phases queued so far in this rotation.
    done: usize,
    /// Runs of the current phase not taken yet.
    pending: std::collections::VecDeque<PageRange>,
    cut: Option<Cut>,
    /// This rotation was counted in `number`.
    counted: bool,
    /// Completed rotations.
    pub(crate) number: u64,
}

impl Rotation {
    /// Starts a rotation over `candidates` (sorted, disjoint) cut by `cut`; `budget` (pages per
    /// scan) sets how many phases spread the runs.
    pub(crate) fn start(&mut self, candidates: &[PageRange], cut: Cut, budget: usize, ps: usize) {
        self.runs.clear();
        self.pending.clear();
        self.cut = Some(cut);
        match cut {
            Cut::Runs(n) => {
                let n = n.max(1);
                for c in candidates {
                    let mut a = c.start;
                    while a < c.end {
                        let b = (a + n * ps).min(c.end);
                        self.runs.push(PageRange::new(a, b));
                        a = b;
                    }
                }
            }
            Cut::OnePerWindow => {
                // Every page of each whole window as a run of its own, window by window: with a
                // phase count that is a multiple of the window size, two pages of one window
                // never share a phase.
                let w = WINDOW_PAGES * ps;
                for c in candidates {
                    let mut a = c.start.div_ceil(w) * w;
                    while a + w <= c.end {
                        self.runs.extend(
                            (0..WINDOW_PAGES).map(|i| PageRange::new(a + i * ps, a + (i + 1) * ps)),
                        );
                        a += w;
                    }
                }
            }
        }
        let pages: usize = self.runs.iter().map(|r| r.len() / ps).sum();
        let mut phases = pages
            .div_ceil(budget.max(1))
            .clamp(1, self.runs.len().max(1));
        if cut == Cut::OnePerWindow && !self.runs.is_empty() {
            phases = phases.div_ceil(WINDOW_PAGES) * WINDOW_PAGES;
        }
        self.order = spread_order(phases);
        self.done = 0;
        self.counted = false;
    }

    /// Whether every run of this rotation has been handed out.
    pub(crate) fn finished(&self) -> bool {
        self.runs.is_empty() || (self.done >= self.order.len() && self.pending.is_empty())
    }

    /// Appends to `out` the next runs, up to `budget` pages (at least one run), and advances.
    /// In one-per-window mode a scan never takes runs of two phases (two pages of one window
    /// could meet).
    pub(crate) fn next_runs(&mut self, budget: usize, ps: usize, out: &mut Vec<PageRange>) {
        let mut taken = 0usize;
        let one_phase = self.cut == Some(Cut::OnePerWindow);
        let mut phases_used = 0;
        while !self.finished() && (taken < budget.max(1)) {
            if self.pending.is_empty() {
                if one_phase && phases_used == 1 {
                    break;
                }
                let phases = self.order.len();
                let phase = self.order[self.done];
                self.pending
                    .extend(self.runs.iter().skip(phase).step_by(phases).copied());
                self.done += 1;
                phases_used += 1;
                continue;
            }
            let r = self.pending.pop_front().expect("not empty");
            taken += r.len() / ps;
            out.push(r);
        }
        if self.finished() && !self.counted && !self.runs.is_empty() {
            self.number += 1;
            self.counted = true;
        }
        out.sort_unstable();
    }

    /// Scans a rotation takes at `budget` pages per scan.
    pub(crate) fn scans_at(&self, budget: usize, ps: usize) -> usize {
        let pages: usize = self.runs.iter().map(|r| r.len() / ps).sum();
        pages.div_ceil(budget.max(1)).max(1)
    }
}

/// `0..n` in bit-reversal order, so that consecutive phases are spread over the run indices
/// instead of being neighbours.
fn spread_order(n: usize) -> Vec<usize> {
    if n <= 1 {
        return vec![0];
    }
    let bits = usize::BITS - (n - 1).leading_zeros();
    (0..1usize << bits)
        .map(|k| k.reverse_bits() >> (usize::BITS - bits))
        .filter(|&v| v < n)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const PS: usize = 4096;

    #[test]
    fn a_rotation_observes_every_candidate_page_once_within_the_budget() {
        let cands = [
            PageRange::new(0, 100 * PS),
            PageRange::new(200 * PS, 203 * PS),
        ];
        let mut rot = Rotation::default();
        rot.start(&cands, Cut::Runs(8), 20, PS);
        let mut all = BTreeSet::new();
        let mut scans = 0;
        while !rot.finished() {
            let mut runs = Vec::new();
            rot.next_runs(20, PS, &mut runs);
            let pages: usize = runs.iter().map(|r| r.len() / PS).sum();
            assert!(pages <= 27, "{pages} pages in one scan");
            for r in runs {
                for p in r.pages() {
                    assert!(all.insert(p), "page {} twice", p / PS);
                }
            }
            scans += 1;
        }
        assert_eq!(all.len(), 103);
        assert!((5..=7).contains(&scans), "{scans} scans");
        assert_eq!(rot.number, 1);
    }

    #[test]
    fn the_sample_size_can_change_from_one_scan_to_the_next() {
        let cands = [PageRange::new(0, 1000 * PS)];
        let mut rot = Rotation::default();
        rot.start(&cands, Cut::Runs(10), 100, PS);
        let mut all = BTreeSet::new();
        let mut budget = 100;
        while !rot.finished() {
            let mut runs = Vec::new();
            rot.next_runs(budget, PS, &mut runs);
            let pages: usize = runs.iter().map(|r| r.len() / PS).sum();
            assert!(
                pages <= budget + 9,
                "{pages} pages for a budget of {budget}"
            );
            for r in runs {
                for p in r.pages() {
                    assert!(all.insert(p));
                }
            }
            budget = if budget == 100 { 30 } else { 100 };
        }
        assert_eq!(all.len(), 1000);
    }

    #[test]
    fn one_per_window_takes_whole_windows_one_page_per_scan() {
        // Candidates: pages 3..72 — windows 16..32, 32..48 and 48..64 are whole (0..16 misses
        // 0..3, 64..80 misses 72..80).
        let cands = [PageRange::new(3 * PS, 72 * PS)];
        let mut rot = Rotation::default();
        rot.start(&cands, Cut::OnePerWindow, 100, PS);
        let mut all = BTreeSet::new();
        while !rot.finished() {
            let mut runs = Vec::new();
            rot.next_runs(100, PS, &mut runs);
            let windows: BTreeSet<usize> = runs.iter().map(|r| r.start / (16 * PS)).collect();
            assert_eq!(
                windows.len(),
                runs.len(),
                "two pages of one window in one scan"
            );
            for r in runs {
                assert_eq!(r.len(), PS);
                assert!(all.insert(r.start / PS));
            }
        }
        assert_eq!(all, (16..64).collect());
    }

    #[test]
    fn spread_order_is_a_permutation() {
        for n in 1..40 {
            let o = spread_order(n);
            let v: BTreeSet<usize> = o.iter().copied().collect();
            assert_eq!((o.len(), v.len()), (n, n));
            assert!(v.iter().all(|&x| x < n));
        }
        assert_eq!(spread_order(8)[..3], [0, 4, 2]);
    }
}
