//! The placement policy: what to do with each 2 MiB range, from its pages' heat.
//!
//! HPS's rule, per huge-page-sized range: when at least a quarter of it is hot, make it a huge
//! page; otherwise hand its hot pages to the application, which moves its hot objects together
//! onto huge pages. kioku adds one condition to promotion: the collapse must not allocate more
//! than `max_fill` of the range anew (a collapse fills unpopulated pages with zeroes — the bloat
//! that makes THP `always` cost memory). A hot but sparse range is compacted instead.
//!
//! The decision is a pure function of [`RangeFacts`]; an application can call
//! [`Policy::decide`] itself, or replace it by driving the manager's primitives.

use std::time::Duration;

use kioku_track::PageRange;

use crate::HugeError;

/// The knobs of the placement policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// A range is promoted when at least this fraction of its observed pages was accessed
    /// (HPS: 1/4 of the range hot).
    pub promote_fraction: f64,
    /// ... and a collapse would allocate at most this fraction of it anew (unpopulated pages).
    pub max_fill: f64,
    /// Observed pages a range needs before it is decided (two sampled runs of 64 pages), or all
    /// its populated pages when it has fewer.
    pub min_observed: usize,
    /// Huge pages this manager may use (promotions, plus huge memory filled by compaction, in
    /// huge-page units); `None` for no limit.
    pub budget: Option<usize>,
    /// Promoted ranges are observed again after this long (which splits their huge mapping
    /// until they are collapsed again); `None` never revisits them.
    pub revisit: Option<Duration>,
    /// A revisited range whose hot fraction fell below this is demoted: no longer advised for
    /// huge pages, and its budget given back.
    pub demote_fraction: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            promote_fraction: 0.25,
            max_fill: 0.25,
            min_observed: 128,
            budget: None,
            revisit: None,
            demote_fraction: 1.0 / 16.0,
        }
    }
}

/// What is known about one huge-page-sized range when it is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeFacts {
    /// The range (huge-page aligned).
    pub range: PageRange,
    /// Its pages (512 for 2 MiB of 4 KiB pages).
    pub pages: usize,
    /// Pages observed at least once.
    pub observed: usize,
    /// Pages found accessed at their last observation: `warm / observed` estimates the share of
    /// the range in use, from one observation per page.
    pub warm: usize,
    /// Pages whose count reached the hot threshold (accessed in several observations in a row):
    /// the pages worth moving.
    pub hot: usize,
    /// Populated pages (present or swapped).
    pub populated: usize,
    /// It is promoted (by this manager) and being revisited.
    pub promoted: bool,
    /// The application has a compaction callback.
    pub compactor: bool,
    /// Huge pages left in the budget (`usize::MAX` without one).
    pub budget_left: usize,
}

/// What to do with a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Collapse it into a huge page.
    Promote,
    /// Hand its hot pages to the compaction callback.
    Compact,
    /// It was promoted and turned cold: stop advising it for huge pages.
    Demote,
    /// Nothing now.
    Leave(Why),
}

/// Why a range is left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Not observed enough yet.
    TooFewObservations,
    /// No hot page.
    Cold,
    /// Hot enough, but a collapse would allocate too much of it anew, and no compaction
    /// callback is set.
    Sparse,
    /// Some hot pages, and no compaction callback is set.
    NoCompactor,
    /// The budget of huge pages is used up.
    Budget,
    /// Promoted and still hot.
    StillHot,
}

impl Policy {
    /// Checks the knobs.
    pub fn check(&self) -> Result<(), HugeError> {
        let frac = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(HugeError::InvalidSetting(format!(
                    "{name} = {v}; it is a fraction between 0 and 1"
                )))
            }
        };
        frac("promote_fraction", self.promote_fraction)?;
        frac("max_fill", self.max_fill)?;
        frac("demote_fraction", self.demote_fraction)?;
        if self.promote_fraction == 0.0 {
            return Err(HugeError::InvalidSetting(
                "promote_fraction = 0 would promote cold ranges; use a positive fraction".into(),
            ));
        }
        Ok(())
    }

    /// Decides what to do with one range.
    pub fn decide(&self, f: &RangeFacts) -> Decision {
        // Only populated pages can be observed: a sparse range (a few hot objects left after a
        // compaction, say) is decided once all of them were seen.
        let needed = self.min_observed.min(f.pages).min(f.populated).max(1);
        let enough = f.observed >= needed;
        let frac = if f.observed == 0 {
            0.0
        } else {
            f.warm as f64 / f.observed as f64
        };
        if f.promoted {
            if !enough {
                return Decision::Leave(Why::TooFewObservations);
            }
            return if frac < self.demote_fraction {
                Decision::Demote
            } else {
                Decision::Leave(Why::StillHot)
            };
        }
        // Until enough of the range is observed, a promotion cannot be ruled out: compacting its
        // hot pages now would move what a collapse keeps in place.
        if !enough {
            return Decision::Leave(Why::TooFewObservations);
        }
        if f.hot == 0 && frac < self.promote_fraction {
            return Decision::Leave(Why::Cold);
        }
        if frac >= self.promote_fraction {
            let fill = f.pages.saturating_sub(f.populated) as f64 / f.pages.max(1) as f64;
            if fill <= self.max_fill {
                return if f.budget_left > 0 {
                    Decision::Promote
                } else {
                    Decision::Leave(Why::Budget)
                };
            }
            if !f.compactor {
                return Decision::Leave(Why::Sparse);
            }
        }
        if f.hot == 0 {
            // Warm but not hot yet: its pages' counts are still building up.
            return Decision::Leave(Why::TooFewObservations);
        }
        if !f.compactor {
            return Decision::Leave(Why::NoCompactor);
        }
        if f.budget_left == 0 {
            return Decision::Leave(Why::Budget);
        }
        Decision::Compact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(observed: usize, hot: usize, populated: usize) -> RangeFacts {
        RangeFacts {
            range: PageRange::new(0, 2 << 20),
            pages: 512,
            observed,
            warm: hot,
            hot,
            populated,
            promoted: false,
            compactor: true,
            budget_left: usize::MAX,
        }
    }

    #[test]
    fn a_quarter_hot_and_populated_is_promoted() {
        let p = Policy::default();
        assert_eq!(p.decide(&facts(512, 128, 512)), Decision::Promote);
        assert_eq!(p.decide(&facts(200, 50, 400)), Decision::Promote);
        // Below a quarter: compaction.
        assert_eq!(p.decide(&facts(512, 127, 512)), Decision::Compact);
        // One very hot page in a cold range (what Ingens never promotes) is compacted.
        assert_eq!(p.decide(&facts(512, 1, 512)), Decision::Compact);
    }

    #[test]
    fn sparse_hot_ranges_are_compacted_not_bloated() {
        let p = Policy::default();
        // A third of the range populated, all of it hot: a collapse would allocate 2/3 anew.
        assert_eq!(p.decide(&facts(170, 170, 170)), Decision::Compact);
        let no_compactor = RangeFacts {
            compactor: false,
            ..facts(170, 170, 170)
        };
        assert_eq!(p.decide(&no_compactor), Decision::Leave(Why::Sparse));
        // The seed's rule (no fill limit) promotes it.
        let seed = Policy {
            max_fill: 1.0,
            ..Policy::default()
        };
        assert_eq!(seed.decide(&facts(170, 170, 170)), Decision::Promote);
    }

    #[test]
    fn budget_observations_and_revisits() {
        let p = Policy::default();
        let spent = RangeFacts {
            budget_left: 0,
            ..facts(512, 512, 512)
        };
        assert_eq!(p.decide(&spent), Decision::Leave(Why::Budget));
        assert_eq!(
            p.decide(&facts(10, 10, 512)),
            Decision::Leave(Why::TooFewObservations),
            "a promotion cannot be ruled out yet"
        );
        assert_eq!(
            p.decide(&facts(10, 0, 512)),
            Decision::Leave(Why::TooFewObservations)
        );
        assert_eq!(p.decide(&facts(512, 0, 512)), Decision::Leave(Why::Cold));
        let revisit = |hot| RangeFacts {
            promoted: true,
            ..facts(512, hot, 512)
        };
        assert_eq!(p.decide(&revisit(10)), Decision::Demote);
        // Warm pages (accessed once so far) are enough to promote; compaction needs hot ones.
        let warm = RangeFacts {
            warm: 300,
            hot: 0,
            ..facts(512, 0, 512)
        };
        assert_eq!(p.decide(&warm), Decision::Promote);
        let sparse_warm = RangeFacts {
            warm: 170,
            hot: 0,
            ..facts(170, 0, 170)
        };
        assert_eq!(
            p.decide(&sparse_warm),
            Decision::Leave(Why::TooFewObservations)
        );
        assert_eq!(p.decide(&revisit(100)), Decision::Leave(Why::StillHot));
    }

    #[test]
    fn a_range_with_fewer_populated_pages_than_min_observed_is_decided_once_all_were_seen() {
        let p = Policy::default();
        // 60 populated pages (what a compaction left), all observed, 5 hot: compacted.
        assert_eq!(p.decide(&facts(60, 5, 60)), Decision::Compact);
        assert_eq!(p.decide(&facts(60, 0, 60)), Decision::Leave(Why::Cold));
        // Not all of them seen yet: wait.
        assert_eq!(
            p.decide(&facts(59, 5, 60)),
            Decision::Leave(Why::TooFewObservations)
        );
    }

    #[test]
    fn settings_are_checked() {
        assert!(Policy::default().check().is_ok());
        let bad = Policy {
            max_fill: 1.5,
            ..Policy::default()
        };
        assert!(bad.check().unwrap_err().to_string().contains("max_fill"));
        let zero = Policy {
            promote_fraction: 0.0,
            ..Policy::default()
        };
        assert!(zero.check().is_err());
    }
}
