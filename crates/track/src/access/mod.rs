//! Which pages are *accessed* (read or written), by sampling: the accessed-page tracker.
//!
//! Linux 6.18 as configured here offers no idle-page tracking, no soft-dirty, no DAMON for
//! virtual addresses, and its DAMON for physical addresses can only be used when no other user
//! runs a kdamond (its sysfs cannot add one while one runs). So the tracker observes a sample
//! of pages per scan with page faults, which cost per *sampled* page instead of per page of the
//! address space:
//!
//! * [`BackendKind::Refault`] (`refault` module): drop the sampled pages' mappings in a shared
//!   mapping and read `/proc/PID/pagemap` for those mapped again. Calling process, or another
//!   process's shmem as root.
//! * [`BackendKind::ProtNone`] (`protnone` module): `mprotect(PROT_NONE)` and a SIGSEGV
//!   handler. Any memory; calling process only.
//!
//! Each scan collects what the pages armed by the previous scan saw (one *observation* per
//! page), updates the per-page counts, and arms the next sample, chosen by the rotation of the
//! `schedule` module. With [`AccessOptions::cpu_budget`] the sample size follows what the
//! sampling costs, including the faults the program takes on sampled pages.

mod counts;
pub(crate) mod protnone;
mod refault;
mod schedule;

use std::time::{Duration, Instant};

pub use counts::PageCount;
pub use protnone::MAX_SAMPLED_RANGES;

use crate::query::{open_pagemap, walk, INITIAL_REGIONS};
use crate::rangeset::RangeSet;
use crate::{push_coalesced, sys, BackendKind, Event, PageRange, PageTracker, ScanStats};
use crate::{BackendChoice, TrackError};
use counts::Counts;
use protnone::ProtNoneProbe;
use refault::RefaultProbe;
use schedule::{Cut, Rotation};

/// Estimated cost of a fault on a sampled page, charged to the program: a minor fault the kernel
/// resolves (refault), or a SIGSEGV plus `mprotect` (protection). Measured on the 2-core
/// development VM (docs/perf.md, section hugepage).
const REFAULT_TOUCH: Duration = Duration::from_nanos(3_000);
const PROTNONE_TOUCH: Duration = Duration::from_nanos(10_000);
/// Of a protection fault, the signal's delivery and return (the handler's own time, measured,
/// is added; `PROTNONE_TOUCH` stays the floor).
const PROTNONE_SIGNAL: Duration = Duration::from_nanos(3_000);

/// How the sampling is sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccessOptions {
    /// Pages observed per scan (the starting point when `cpu_budget` adapts it).
    pub sample_pages: usize,
    /// Consecutive pages armed together (one system call, and one TLB shootdown, each);
    /// observations stay per page.
    pub run_pages: usize,
    /// Fraction of one CPU the sampling may cost, counting the faults the program takes on
    /// sampled pages; the sample size is adapted to it after every scan. 0 keeps
    /// `sample_pages` fixed.
    pub cpu_budget: f64,
    /// Lower bound of the adapted sample size.
    pub min_sample_pages: usize,
    /// Upper bound of the adapted sample size.
    pub max_sample_pages: usize,
    /// The count at which a page is *hot*: scans report pages crossing it in either direction
    /// ([`AccessScan::became_hot`], [`AccessTracker::drain_changed`]).
    pub hot_threshold: u8,
}

impl Default for AccessOptions {
    fn default() -> Self {
        AccessOptions {
            sample_pages: 1024,
            run_pages: 64,
            cpu_budget: 0.01,
            min_sample_pages: 64,
            max_sample_pages: 1 << 16,
            hot_threshold: 2,
        }
    }
}

/// What one scan did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AccessScan {
    /// Pages observed (armed by the previous scan).
    pub observed: usize,
    /// Of those, pages found accessed.
    pub accessed: usize,
    /// Pages armed for the next scan.
    pub armed: usize,
    /// System calls made.
    pub syscalls: usize,
    /// Time this scan took (collect, count, choose, arm).
    pub work: Duration,
    /// Estimated time the program spent in faults on the pages observed.
    pub faults: Duration,
    /// Sample size of the next scan.
    pub sample_pages: usize,
    /// Scans a rotation (every candidate page observed once) takes at that size.
    pub rotation_scans: usize,
    /// Completed rotations.
    pub rotations: u64,
    /// Pages tracked.
    pub tracked_pages: usize,
    /// Observed pages whose count reached the hot threshold in this scan.
    pub became_hot: usize,
    /// Observed pages whose count fell below the hot threshold in this scan.
    pub became_cold: usize,
}

/// Heat of a range, from its pages' counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeHeat {
    /// Tracked pages in the range.
    pub pages: usize,
    /// Pages observed at least once.
    pub observed: usize,
    /// Pages whose last observation found them accessed (count > 0).
    pub warm: usize,
    /// Pages whose count reached the threshold asked for.
    pub hot: usize,
}

#[derive(Debug)]
enum Probe {
    Refault(RefaultProbe),
    ProtNone(ProtNoneProbe),
}

/// Builds an [`AccessTracker`].
#[derive(Debug, Default)]
pub struct AccessTrackerBuilder {
    choice: BackendChoice,
    pid: Option<i32>,
    options: AccessOptions,
}

impl AccessTrackerBuilder {
    /// Forces a backend ([`BackendKind::Refault`] or [`BackendKind::ProtNone`]).
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.choice = BackendChoice::Force(kind);
        self
    }

    /// Sets the backend choice (default: `KIOKU_HOT_TRACKER`, else by the first range).
    pub fn choice(mut self, choice: BackendChoice) -> Self {
        self.choice = choice;
        self
    }

    /// Tracks process `pid` from outside (refault backend, shmem ranges, root).
    pub fn process(mut self, pid: i32) -> Self {
        self.pid = Some(pid);
        self
    }

    /// Sampling options.
    pub fn options(mut self, options: AccessOptions) -> Self {
        self.options = options;
        self
    }

    /// Creates the tracker. With the automatic choice for the calling process the backend is
    /// picked at the first `track`: refault for a shared mapping, protection otherwise.
    pub fn build(self) -> Result<AccessTracker, TrackError> {
        let me = std::process::id() as i32;
        let pid = self.pid.unwrap_or(me);
        let remote = pid != me;
        let choice = match self.choice {
            BackendChoice::Auto => match std::env::var("KIOKU_HOT_TRACKER") {
                Ok(v) => parse_access_backend_env(&v)?,
                Err(_) => BackendChoice::Auto,
            },
            forced => forced,
        };
        let probe = match (choice, remote) {
            (BackendChoice::Force(BackendKind::ProtNone), true) => {
                return Err(TrackError::RemoteUnsupported {
                    backend: BackendKind::ProtNone,
                    pid,
                })
            }
            (BackendChoice::Force(BackendKind::Refault), _) | (BackendChoice::Auto, true) => {
                Some(Probe::Refault(RefaultProbe::new(pid)?))
            }
            (BackendChoice::Force(BackendKind::ProtNone), false) => {
                Some(Probe::ProtNone(ProtNoneProbe::new()?))
            }
            (BackendChoice::Force(other), _) => {
                return Err(TrackError::WrongEvent {
                    backend: other,
                    event: Event::Accessed,
                })
            }
            (BackendChoice::Auto, false) => None,
        };
        let pagemap = open_pagemap(pid)?;
        let ps = crate::page_size();
        let budget = self.options.sample_pages.max(1);
        Ok(AccessTracker {
            probe,
            pid,
            pagemap,
            tracked: RangeSet::default(),
            counts: Counts::new(ps),
            rotation: Rotation::default(),
            armed: Vec::new(),
            accessed: Vec::new(),
            runs: Vec::new(),
            options: self.options,
            budget,
            last_scan_at: None,
            last: AccessScan::default(),
            buf: vec![sys::PageRegion::default(); INITIAL_REGIONS],
            changed: Vec::new(),
            observed: Vec::new(),
            handler_ns: protnone::handler_ns(),
        })
    }
}

/// Parses a `KIOKU_HOT_TRACKER` value: `refault`, `protnone`, `auto` or empty.
pub fn parse_access_backend_env(value: &str) -> Result<BackendChoice, TrackError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(BackendChoice::Auto),
        "refault" => Ok(BackendChoice::Force(BackendKind::Refault)),
        "protnone" | "prot-none" | "mprotect" => Ok(BackendChoice::Force(BackendKind::ProtNone)),
        _ => Err(TrackError::InvalidEnv {
            var: "KIOKU_HOT_TRACKER",
            value: value.to_string(),
            expected: "`refault`, `protnone` or `auto`",
        }),
    }
}

/// Samples which pages of its ranges are accessed and keeps per-page counts.
///
/// Each [`PageTracker::scan_into`] ends one sampling period: it reports the sampled pages that
/// were accessed during it, counts every observation, and arms the next sample. A page is
/// observed about once per rotation; [`AccessScan::rotation_scans`] says how many scans that
/// takes.
#[derive(Debug)]
pub struct AccessTracker {
    probe: Option<Probe>,
    pid: i32,
    pagemap: std::fs::File,
    tracked: RangeSet,
    counts: Counts,
    rotation: Rotation,
    /// Runs armed by the last scan.
    armed: Vec<PageRange>,
    accessed: Vec<usize>,
    runs: Vec<PageRange>,
    options: AccessOptions,
    /// Sample size of the next scan.
    budget: usize,
    last_scan_at: Option<Instant>,
    last: AccessScan,
    buf: Vec<sys::PageRegion>,
    /// Pages that crossed the hot threshold since the last `drain_changed`.
    changed: Vec<usize>,
    /// The runs the last scan observed.
    observed: Vec<PageRange>,
    /// The protection handler's time at the last scan (`protnone::handler_ns`).
    handler_ns: u64,
}

impl AccessTracker {
    /// A builder (calling process, automatic backend, default options).
    pub fn builder() -> AccessTrackerBuilder {
        AccessTrackerBuilder::default()
    }

    /// The backend, once chosen (the automatic choice waits for the first range).
    pub fn backend_kind(&self) -> Option<BackendKind> {
        match self.probe {
            Some(Probe::Refault(_)) => Some(BackendKind::Refault),
            Some(Probe::ProtNone(_)) => Some(BackendKind::ProtNone),
            None => None,
        }
    }

    /// The sampling options.
    pub fn options(&self) -> &AccessOptions {
        &self.options
    }

    /// Changes the options (a new sample size takes effect at the next scan).
    pub fn set_options(&mut self, options: AccessOptions) {
        self.budget = options.sample_pages.max(1);
        self.options = options;
    }

    /// Changes the CPU budget and scales the adapted sample size with it (the cost of a scan
    /// grows with its sample), so the new budget holds from the next scan instead of after
    /// several damped adaptations. 0 switches to the fixed `sample_pages`.
    pub fn set_cpu_budget(&mut self, cpu_budget: f64) {
        let o = self.options;
        self.budget = if o.cpu_budget > 0.0 && cpu_budget > 0.0 {
            ((self.budget as f64 * cpu_budget / o.cpu_budget) as usize)
                .clamp(o.min_sample_pages.max(1), o.max_sample_pages.max(1))
        } else {
            o.sample_pages.max(1)
        };
        self.options.cpu_budget = cpu_budget.max(0.0);
    }

    /// What the last scan did.
    pub fn last_scan(&self) -> AccessScan {
        self.last
    }

    /// Appends the counts of the pages of `r` observed at least once, in address order.
    pub fn counts(&self, r: PageRange, out: &mut Vec<PageCount>) {
        self.counts.collect(r, out, |p| p.seen > 0);
    }

    /// Appends the pages of `r` whose count is at least `threshold`, in address order.
    pub fn hot(&self, r: PageRange, threshold: u8, out: &mut Vec<PageCount>) {
        let t = threshold.max(1);
        self.counts.collect(r, out, |p| p.count >= t);
    }

    /// The counts of one page, if tracked.
    pub fn page(&self, addr: usize) -> Option<PageCount> {
        self.counts.get(addr & !(crate::page_size() - 1))
    }

    /// The heat of `r`, `hot` counting pages at `threshold` or above.
    pub fn heat(&self, r: PageRange, threshold: u8) -> RangeHeat {
        let mut h = RangeHeat::default();
        let mut v = Vec::new();
        self.counts.collect(r, &mut v, |_| true);
        h.pages = v.len();
        for p in v {
            h.observed += (p.seen > 0) as usize;
            h.warm += (p.count > 0) as usize;
            h.hot += (p.count >= threshold.max(1)) as usize;
        }
        h
    }

    /// Sets the counts of the pages of `r` back to zero (their contents moved away).
    pub fn reset(&mut self, r: PageRange) {
        self.counts.reset(r);
    }

    /// The pages the last scan observed (those it reports as accessed are among them).
    pub fn observed(&self) -> &[PageRange] {
        &self.observed
    }

    /// Moves into `out` the pages whose count crossed the hot threshold (either way) since the
    /// last call, in the order they did (a page may appear more than once).
    pub fn drain_changed(&mut self, out: &mut Vec<usize>) {
        out.clear();
        out.append(&mut self.changed);
    }

    /// Ends the current sampling period without arming a new one: what the armed pages saw is
    /// counted and they are disarmed. Nothing is observed until the next scan arms again, so a
    /// program whose placement has settled runs without sampling faults.
    pub fn pause(&mut self) -> Result<AccessScan, TrackError> {
        let mut out = Vec::new();
        self.scan_phase(&mut out, false)?;
        Ok(self.last)
    }

    fn choose_backend(&mut self, r: PageRange) -> Result<(), TrackError> {
        if self.probe.is_some() {
            return Ok(());
        }
        let shared =
            matches!(crate::maps::vmas(self.pid, r), Ok(Some(v)) if v.iter().all(|m| m.shared()));
        let (probe, why) = if shared {
            (
                Probe::Refault(RefaultProbe::new(self.pid)?),
                "the first range is a shared mapping",
            )
        } else {
            (
                Probe::ProtNone(ProtNoneProbe::new()?),
                "the first range is private memory",
            )
        };
        self.probe = Some(probe);
        tracing::info!(
            backend = ?self.backend_kind(),
            "kioku-track: accessed-page backend selected ({why})"
        );
        Ok(())
    }

    /// What the faults on `accessed` observed pages cost the program: for the protection
    /// probe the handler's measured time since the last call plus the signal's round trip, at
    /// least `PROTNONE_TOUCH` each; for the refault probe `REFAULT_TOUCH` each.
    fn fault_cost(&mut self, accessed: usize) -> Duration {
        let n = accessed as u32;
        match self.probe {
            Some(Probe::ProtNone(_)) => {
                let now = protnone::handler_ns();
                let handled = Duration::from_nanos(now.saturating_sub(self.handler_ns));
                self.handler_ns = now;
                (handled + PROTNONE_SIGNAL * n).max(PROTNONE_TOUCH * n)
            }
            _ => REFAULT_TOUCH * n,
        }
    }

    fn cut(&self) -> Cut {
        match &self.probe {
            Some(Probe::Refault(p)) if p.fault_around => Cut::OnePerWindow,
            _ => Cut::Runs(self.options.run_pages.max(1)),
        }
    }

    /// Populated pages not mapped by a huge page, in the tracked ranges.
    fn candidates(&mut self) -> Result<Vec<PageRange>, TrackError> {
        let mut out = Vec::new();
        let masks = sys::PmScanArg {
            category_inverted: sys::PAGE_IS_HUGE,
            category_mask: sys::PAGE_IS_HUGE,
            category_anyof_mask: sys::PAGE_IS_PRESENT | sys::PAGE_IS_SWAPPED,
            return_mask: sys::PAGE_IS_HUGE | sys::PAGE_IS_PRESENT | sys::PAGE_IS_SWAPPED,
            ..Default::default()
        };
        for &r in self.tracked.as_slice() {
            walk(&self.pagemap, &mut self.buf, r, masks, &mut out)
                .map_err(|e| crate::query::scan_error(e, self.pid, r))?;
        }
        Ok(out)
    }

    /// Adapts the sample size to the CPU budget from what the scan just made cost: its own
    /// CPU time and the faults the program took on the pages it observed, against the budget's share
    /// of the time since the previous scan. Changes are damped (square root of the ratio, at most
    /// ×2 or ÷2 per scan).
    fn adapt(&mut self, cost: Duration, since_last: Option<Duration>) {
        let o = self.options;
        if o.cpu_budget <= 0.0 {
            self.budget = o.sample_pages.max(1);
            return;
        }
        let Some(wall) = since_last else {
            return;
        };
        let (wall, cost) = (wall.as_secs_f64(), cost.as_secs_f64());
        if wall <= 0.0 || cost <= 0.0 {
            return;
        }
        let ratio = (o.cpu_budget * wall / cost).sqrt().clamp(0.5, 2.0);
        self.budget = ((self.budget as f64 * ratio) as usize)
            .clamp(o.min_sample_pages.max(1), o.max_sample_pages.max(1));
    }

    fn scan_impl(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        self.scan_phase(out, true)
    }

    fn scan_phase(
        &mut self,
        out: &mut Vec<PageRange>,
        rearm: bool,
    ) -> Result<ScanStats, TrackError> {
        let t0 = Instant::now();
        let cpu0 = sys::thread_cpu_time();
        let ps = crate::page_size();
        out.clear();
        let mut stats = AccessScan::default();
        let Some(probe) = self.probe.as_mut() else {
            return Ok(ScanStats::default());
        };
        // (1) What the pages armed by the previous scan saw.
        self.accessed.clear();
        stats.syscalls += match probe {
            Probe::Refault(p) => p.collect(&self.armed, &mut self.accessed, true)?,
            Probe::ProtNone(p) => p.collect(&self.armed, &mut self.accessed, true),
        };
        // (2) Count every observation.
        let threshold = self.options.hot_threshold.max(1);
        let mut hit = self.accessed.iter().peekable();
        for r in &self.armed {
            for p in r.pages() {
                while hit.next_if(|&&a| a < p).is_some() {}
                let accessed = hit.next_if(|&&a| a == p).is_some();
                stats.observed += 1;
                stats.accessed += accessed as usize;
                if let Some((before, after)) = self.counts.observe(p, accessed) {
                    if before < threshold && after >= threshold {
                        stats.became_hot += 1;
                        self.changed.push(p);
                    } else if before >= threshold && after < threshold {
                        stats.became_cold += 1;
                        self.changed.push(p);
                    }
                }
            }
        }
        for &p in &self.accessed {
            push_coalesced(out, PageRange::new(p, p + ps));
        }
        std::mem::swap(&mut self.observed, &mut self.armed);
        self.armed.clear();
        if !rearm {
            stats.work = t0.elapsed();
            stats.faults = self.fault_cost(stats.accessed);
            stats.tracked_pages = self.counts.pages();
            self.last = stats;
            return Ok(ScanStats {
                ranges: out.len(),
                pages: stats.accessed,
                syscalls: stats.syscalls,
            });
        }
        // (3) Choose the next sample: a new rotation when this one is done.
        let faults = self.fault_cost(stats.accessed);
        let since = self.last_scan_at.map(|t| t0.duration_since(t));
        // The scan's own cost is its thread's CPU time (the budget is a share of a CPU).
        self.adapt(sys::thread_cpu_time().saturating_sub(cpu0) + faults, since);
        if self.rotation.finished() {
            let cands = self.candidates()?;
            let cut = self.cut();
            self.rotation.start(&cands, cut, self.budget, ps);
            stats.syscalls += self.tracked.as_slice().len();
        }
        self.runs.clear();
        self.rotation.next_runs(self.budget, ps, &mut self.runs);
        // The rotation was planned before ranges may have been untracked (a range promoted to a
        // huge page, say): arm only what is still tracked.
        if self.runs.iter().any(|r| self.tracked.present(*r) != [*r]) {
            let planned = std::mem::take(&mut self.runs);
            for r in planned {
                self.runs.extend(self.tracked.present(r));
            }
        }
        // (4) Arm it.
        let probe = self.probe.as_mut().expect("checked above");
        stats.syscalls += match probe {
            Probe::Refault(p) => p.arm(&self.runs, &mut self.armed)?,
            Probe::ProtNone(p) => p.arm(&self.runs, &mut self.armed),
        };
        stats.armed = self.armed.iter().map(|r| r.len() / ps).sum();
        stats.work = t0.elapsed();
        stats.faults = faults;
        stats.sample_pages = self.budget;
        stats.rotation_scans = self.rotation.scans_at(self.budget, ps);
        stats.rotations = self.rotation.number;
        stats.tracked_pages = self.counts.pages();
        self.last_scan_at = Some(t0);
        self.last = stats;
        Ok(ScanStats {
            ranges: out.len(),
            pages: stats.accessed,
            syscalls: stats.syscalls,
        })
    }
}

impl PageTracker for AccessTracker {
    fn backend(&self) -> BackendKind {
        // Before the first range the automatic choice is open; report what it would be for
        // private memory (the common case) until then.
        self.backend_kind().unwrap_or(BackendKind::ProtNone)
    }

    fn event(&self) -> Event {
        Event::Accessed
    }

    fn pid(&self) -> i32 {
        self.pid
    }

    fn track(&mut self, range: PageRange) -> Result<(), TrackError> {
        range.check()?;
        self.choose_backend(range)?;
        for part in self.tracked.missing(range) {
            match self.probe.as_mut().expect("chosen above") {
                Probe::Refault(p) => p.track(part)?,
                Probe::ProtNone(p) => p.track(part)?,
            }
            self.tracked.insert(part);
            self.counts.add(part);
        }
        Ok(())
    }

    fn untrack(&mut self, range: PageRange) -> Result<(), TrackError> {
        range.check()?;
        for part in self.tracked.present(range) {
            match self.probe.as_mut() {
                Some(Probe::Refault(p)) => p.untrack(part),
                Some(Probe::ProtNone(p)) => p.untrack(part),
                None => {}
            }
            self.tracked.remove(part);
            self.counts.remove(part);
        }
        // Armed runs inside the range are no longer observed.
        let mut kept = Vec::with_capacity(self.armed.len());
        for r in self.armed.drain(..) {
            for part in [
                PageRange::new(r.start, r.end.min(range.start)),
                PageRange::new(r.start.max(range.end), r.end),
            ] {
                if !part.is_empty() {
                    kept.push(part);
                }
            }
        }
        self.armed = kept;
        Ok(())
    }

    fn tracked(&self) -> &[PageRange] {
        self.tracked.as_slice()
    }

    fn scan_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        self.scan_impl(out)
    }

    fn peek_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        out.clear();
        self.accessed.clear();
        let syscalls = match self.probe.as_mut() {
            Some(Probe::Refault(p)) => p.collect(&self.armed, &mut self.accessed, false)?,
            Some(Probe::ProtNone(p)) => p.collect(&self.armed, &mut self.accessed, false),
            None => 0,
        };
        let ps = crate::page_size();
        for &p in &self.accessed {
            push_coalesced(out, PageRange::new(p, p + ps));
        }
        Ok(ScanStats {
            ranges: out.len(),
            pages: self.accessed.len(),
            syscalls,
        })
    }
}

impl Drop for AccessTracker {
    fn drop(&mut self) {
        // The probes restore what they armed when dropped; pages the refault probe unmapped
        // stay in the page cache and come back on their next access.
        self.armed.clear();
    }
}
