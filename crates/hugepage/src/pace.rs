//! How fast the manager samples: a higher CPU budget while placement converges, the steady
//! budget afterwards (see [`Pace`]).

use std::time::Instant;

use kioku_track::{AccessScan, AccessTracker};

/// While placement converges the tracker samples at this multiple of the steady CPU budget
/// (`AccessOptions::cpu_budget`): a hot set is found in a few rotations, and a rotation at the
/// steady budget takes about a minute per 100,000 pages.
const CONVERGE_BUDGET_FACTOR: f64 = 10.0;

/// The converging budget never exceeds this share of one CPU.
const CONVERGE_BUDGET_MAX: f64 = 0.25;

/// New hot pages (and pages placement acted on) within one rotation at the steady budget that
/// show the hot set moving, and start converging again.
const REARM_PAGES: usize = 64;

/// How fast the tracker samples.
///
/// A hot set is found only after `threshold` observations of each page, and placement settles
/// only after `settle_rotations` quiet rotations more, so the time to converge is a few
/// rotations; at the steady budget (1 % of a CPU by default) a rotation over a large hot set
/// takes a minute. So the manager *converges* at `CONVERGE_BUDGET_FACTOR` times the steady
/// budget and drops back to the steady budget when
///
/// * placement settled (tracking pauses: no sampling at all), or
/// * `settle_rotations` (at least one) whole rotations passed without a page turning hot or
///   placement changing anything (without automatic placement, or without settling), or
/// * the rotations convergence needs (`threshold + settle_rotations + 2`) passed: the hot set
///   keeps moving, and chasing it faster is not worth the cost.
///
/// Converging starts at `enable()` and at `register()`, and again when at the steady budget
/// `REARM_PAGES` pages turn hot (or are placed) within one rotation — the hot set moved. A
/// re-arm of its own waits until the steady stretch since the last convergence is
/// `factor - 1` times as long as that convergence: averaged over a convergence and the steady
/// stretch after it, sampling costs at most twice the steady budget.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// The steady CPU budget (`AccessOptions::cpu_budget`; 0: a fixed sample, never converging
    /// faster).
    steady_budget: f64,
    /// Converging since, and the tracker's rotation count then.
    converging: Option<(Instant, u64)>,
    /// The earliest time converging may start again on its own.
    rearm_at: Option<Instant>,
    /// New hot pages and placed pages in the current rotation at the steady budget.
    news: usize,
    /// Rotation fractions in a row without a page turning hot or placement acting.
    pub(crate) quiet: f64,
    /// Scans in a row without a page turning hot or placement acting.
    pub(crate) quiet_scans: u32,
}

impl Pace {
    /// Steady at `steady_budget` (`AccessOptions::cpu_budget`).
    pub(crate) fn new(steady_budget: f64) -> Pace {
        Pace {
            steady_budget: steady_budget.max(0.0),
            ..Pace::default()
        }
    }

    /// Whether the higher budget is in effect.
    #[cfg(test)]
    pub(crate) fn converging(&self) -> bool {
        self.converging.is_some()
    }

    /// Whole quiet rotations: those counted, less the two scans a rotation's last
    /// observations take to arrive.
    pub(crate) fn quiet_rotations(&self, scan: &AccessScan) -> f64 {
        if self.quiet_scans < 2 {
            return 0.0;
        }
        self.quiet - 2.0 / scan.rotation_scans.max(1) as f64
    }

    fn budget(&self) -> f64 {
        (self.steady_budget * CONVERGE_BUDGET_FACTOR)
            .min(CONVERGE_BUDGET_MAX)
            .max(self.steady_budget)
    }

    /// Starts converging (if the steady budget is adaptive).
    pub(crate) fn converge(&mut self, tracker: &mut AccessTracker) {
        self.quiet = 0.0;
        self.quiet_scans = 0;
        self.news = 0;
        if self.steady_budget <= 0.0 || self.converging.is_some() {
            return;
        }
        self.converging = Some((Instant::now(), tracker.last_scan().rotations));
        tracker.set_cpu_budget(self.budget());
        tracing::debug!(
            budget = self.budget(),
            "kioku-hugepage: converging at the higher sampling budget"
        );
    }

    /// Drops back to the steady budget.
    pub(crate) fn steady(&mut self, tracker: &mut AccessTracker) {
        let Some((since, _)) = self.converging.take() else {
            return;
        };
        let took = since.elapsed();
        let factor = self.budget() / self.steady_budget;
        self.rearm_at = Some(Instant::now() + took.mul_f64((factor - 1.0).max(0.0)));
        self.news = 0;
        tracker.set_cpu_budget(self.steady_budget);
        tracing::debug!(?took, "kioku-hugepage: back at the steady sampling budget");
    }

    /// After a scan: counts quiet rotations and moves between the converging and the steady
    /// budget. `news` is the pages that turned hot or were placed in this scan, `rotated`
    /// whether a rotation ended.
    pub(crate) fn after_scan(
        &mut self,
        tracker: &mut AccessTracker,
        scan: &AccessScan,
        rotated: bool,
        news: usize,
        rules: Rules,
    ) {
        if news > 0 {
            self.quiet = 0.0;
            self.quiet_scans = 0;
        } else {
            self.quiet += 1.0 / scan.rotation_scans.max(1) as f64;
            self.quiet_scans += 1;
        }
        match self.converging {
            Some((_, first)) => {
                let rotations = scan.rotations.saturating_sub(first);
                let needed = rules.threshold as u64 + rules.settle_rotations as u64 + 2;
                // With automatic placement and settling, settling ends converging (and
                // sampling) by itself.
                let settles = rules.auto_place && rules.settle_rotations > 0;
                let quiet_enough =
                    self.quiet_rotations(scan) >= rules.settle_rotations.max(1) as f64;
                if (quiet_enough && !settles) || rotations >= needed {
                    self.steady(tracker);
                }
            }
            None => {
                if rotated {
                    self.news = 0;
                }
                self.news += news;
                let may = self.rearm_at.is_none_or(|t| Instant::now() >= t);
                if self.news >= REARM_PAGES && may && rules.enabled {
                    tracing::debug!(
                        news = self.news,
                        "kioku-hugepage: the hot set moved; converging again"
                    );
                    let quiet = (self.quiet, self.quiet_scans);
                    self.converge(tracker);
                    (self.quiet, self.quiet_scans) = quiet;
                }
            }
        }
    }
}

/// The manager's settings that decide when converging ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) threshold: u8,
    pub(crate) settle_rotations: u32,
    pub(crate) auto_place: bool,
    pub(crate) enabled: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn tracker(budget: f64) -> AccessTracker {
        AccessTracker::builder()
            .options(kioku_track::AccessOptions {
                cpu_budget: budget,
                ..Default::default()
            })
            .build()
            .unwrap()
    }

    fn scan(rotations: u64, rotation_scans: usize) -> AccessScan {
        AccessScan {
            rotations,
            rotation_scans,
            ..Default::default()
        }
    }

    const PLACING: Rules = Rules {
        threshold: 2,
        settle_rotations: 2,
        auto_place: true,
        enabled: true,
    };
    const SAMPLING_ONLY: Rules = Rules {
        auto_place: false,
        ..PLACING
    };

    #[test]
    fn converging_runs_at_ten_times_the_budget_capped() {
        let mut t = tracker(0.01);
        let mut p = Pace::new(0.01);
        p.converge(&mut t);
        assert!(p.converging());
        assert_eq!(t.options().cpu_budget, 0.1);
        p.steady(&mut t);
        assert_eq!(t.options().cpu_budget, 0.01);
        let mut t = tracker(0.05);
        let mut p = Pace::new(0.05);
        p.converge(&mut t);
        assert_eq!(t.options().cpu_budget, CONVERGE_BUDGET_MAX);
        // A fixed sample never converges faster.
        let mut t = tracker(0.0);
        let mut p = Pace::new(0.0);
        p.converge(&mut t);
        assert!(!p.converging());
        assert_eq!(t.options().cpu_budget, 0.0);
    }

    #[test]
    fn quiet_rotations_end_converging_when_placement_will_not_settle() {
        let mut t = tracker(0.01);
        let mut p = Pace::new(0.01);
        p.converge(&mut t);
        // News keeps it converging.
        for _ in 0..100 {
            p.after_scan(&mut t, &scan(0, 10), false, 5, SAMPLING_ONLY);
        }
        assert!(p.converging());
        // Two quiet rotations of 10 scans (plus the two scans the last observations take).
        for i in 0..21 {
            p.after_scan(&mut t, &scan(1, 10), false, 0, SAMPLING_ONLY);
            assert!(p.converging(), "ended after {i} quiet scans");
        }
        p.after_scan(&mut t, &scan(1, 10), false, 0, SAMPLING_ONLY);
        assert!(!p.converging());
        assert_eq!(t.options().cpu_budget, 0.01);
    }

    #[test]
    fn with_placement_settling_ends_converging_unless_the_rotations_run_out() {
        let mut t = tracker(0.01);
        let mut p = Pace::new(0.01);
        p.converge(&mut t);
        for _ in 0..50 {
            p.after_scan(&mut t, &scan(0, 10), false, 0, PLACING);
        }
        assert!(p.converging(), "the manager settles (and pauses) instead");
        // A hot set that keeps moving: given up after threshold + settle_rotations + 2.
        p.after_scan(&mut t, &scan(5, 10), true, 3, PLACING);
        assert!(p.converging());
        p.after_scan(&mut t, &scan(6, 10), true, 3, PLACING);
        assert!(!p.converging());
    }

    #[test]
    fn a_moving_hot_set_rearms_but_at_most_twice_the_steady_budget_on_average() {
        let mut t = tracker(0.01);
        let mut p = Pace::new(0.01);
        p.converge(&mut t);
        std::thread::sleep(Duration::from_millis(20));
        p.steady(&mut t);
        // Converging lasted >= 20 ms at 10x: no re-arm for 9x as long.
        let wait = p.rearm_at.unwrap().duration_since(Instant::now());
        assert!(wait >= Duration::from_millis(170), "{wait:?}");
        p.after_scan(&mut t, &scan(1, 10), false, REARM_PAGES, SAMPLING_ONLY);
        assert!(!p.converging(), "re-armed before its time");
        p.rearm_at = Some(Instant::now());
        // A trickle spread over rotations does not re-arm ...
        for r in 0..10 {
            p.after_scan(
                &mut t,
                &scan(2 + r, 10),
                true,
                REARM_PAGES / 2,
                SAMPLING_ONLY,
            );
        }
        assert!(!p.converging());
        // ... the pages of one rotation do.
        p.after_scan(&mut t, &scan(12, 10), false, REARM_PAGES / 2, SAMPLING_ONLY);
        assert!(p.converging());
        assert_eq!(t.options().cpu_budget, 0.1);
    }
}
