//! The manager: a thread that samples the registered arenas every period, tells the application
//! when pages turn hot, and (unless told otherwise) places them: promotes hot ranges, hands the
//! hot pages of the others to the compaction callback, demotes revisited ranges that went cold,
//! and stops tracking once nothing changes any more.
//!
//! Locking: one mutex holds the state; the callbacks (notification and compaction) are called
//! with it released, so they may call the manager back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kioku_track::{
    AccessOptions, AccessScan, AccessTracker, BackendChoice, BackendKind, PageCount, PageRange,
    PageTracker,
};

use crate::compact::{CompactRequest, Compactor};
use crate::notify::{Notice, Notifier};
use crate::pace::{Pace, Rules};
use crate::policy::{Decision, Policy, RangeFacts, Why};
use crate::promote::{self, huge_page_size, CollapseFailure};
use crate::HugeError;

/// Collapses one placement pass makes at most (the rest wait for the next period).
const MAX_COLLAPSES_PER_PASS: usize = 32;

/// An application's name for one of its arenas (handed back to the compaction callback).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ArenaId(pub u64);

/// A hot page and its counts.
pub type HotPage = PageCount;

/// What one placement pass did (and, summed, what the manager did so far).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PlaceReport {
    /// Ranges decided.
    pub decided: usize,
    /// Ranges collapsed into huge pages.
    pub promoted: usize,
    /// Time spent in `MADV_COLLAPSE` for them.
    pub collapse_time: Duration,
    /// Collapses that found no free huge page (retried later).
    pub no_huge_page: usize,
    /// Collapses the kernel refused for good (range not eligible).
    pub not_eligible: usize,
    /// Promoted ranges demoted after going cold.
    pub demoted: usize,
    /// Pages the compaction callback vacated.
    pub compacted_pages: usize,
    /// Hot pages offered to the compaction callback.
    pub offered_pages: usize,
    /// Calls of the compaction callback that failed.
    pub compaction_errors: usize,
    /// Ranges that would have used a huge page beyond the budget.
    pub over_budget: usize,
}

impl PlaceReport {
    /// Whether anything changed.
    pub fn acted(&self) -> bool {
        self.promoted + self.demoted + self.compacted_pages > 0
    }

    fn add(&mut self, o: &PlaceReport) {
        self.decided += o.decided;
        self.promoted += o.promoted;
        self.collapse_time += o.collapse_time;
        self.no_huge_page += o.no_huge_page;
        self.not_eligible += o.not_eligible;
        self.demoted += o.demoted;
        self.compacted_pages += o.compacted_pages;
        self.offered_pages += o.offered_pages;
        self.compaction_errors += o.compaction_errors;
        self.over_budget += o.over_budget;
    }
}

/// A snapshot of the manager's state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// Tracking is enabled.
    pub enabled: bool,
    /// Placement settled and tracking stopped.
    pub settled: bool,
    /// Pages hot now.
    pub hot_pages: usize,
    /// Ranges promoted (huge pages in use by promotion).
    pub promoted_ranges: usize,
    /// Huge pages charged to the budget (promotions and compacted memory).
    pub huge_pages_used: usize,
    /// Everything placement did so far.
    pub totals: PlaceReport,
    /// The last scan of the tracker.
    pub last_scan: AccessScan,
    /// The accessed-page backend (once chosen).
    pub backend: Option<BackendKind>,
    /// The error that stopped tracking, if one did.
    pub error: Option<String>,
}

/// Builds a [`Manager`].
#[derive(Debug, Clone)]
pub struct ManagerBuilder {
    period: Duration,
    threshold: u8,
    access: AccessOptions,
    choice: BackendChoice,
    policy: Policy,
    auto_place: bool,
    settle_rotations: u32,
}

impl Default for ManagerBuilder {
    fn default() -> Self {
        ManagerBuilder {
            period: Duration::from_millis(100),
            threshold: 2,
            access: AccessOptions::default(),
            choice: BackendChoice::Auto,
            policy: Policy::default(),
            auto_place: true,
            settle_rotations: 2,
        }
    }
}

impl ManagerBuilder {
    /// Sampling period (default 100 ms).
    pub fn period(mut self, period: Duration) -> Self {
        self.period = period;
        self
    }

    /// The count at which a page is hot (default 2: accessed in two observations in a row).
    pub fn threshold(mut self, threshold: u8) -> Self {
        self.threshold = threshold;
        self
    }

    /// Sampling options of the tracker (sample size, CPU budget).
    pub fn access_options(mut self, o: AccessOptions) -> Self {
        self.access = o;
        self
    }

    /// Forces the accessed-page backend (default: `KIOKU_HOT_TRACKER`, else by the first arena).
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.choice = BackendChoice::Force(kind);
        self
    }

    /// The placement policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Whether the manager places pages itself after each scan (default) or only notifies and
    /// leaves [`Manager::place`] to the application.
    pub fn auto_place(mut self, on: bool) -> Self {
        self.auto_place = on;
        self
    }

    /// Rotations without any change after which placement counts as settled and tracking stops
    /// (0: never).
    pub fn settle_rotations(mut self, n: u32) -> Self {
        self.settle_rotations = n;
        self
    }

    /// Creates the manager and its thread (tracking starts with [`Manager::enable`]).
    pub fn build(self) -> Result<Manager, HugeError> {
        self.policy.check()?;
        if self.threshold == 0 {
            return Err(HugeError::InvalidSetting(
                "threshold 0 would make every page hot; use 1 or more".into(),
            ));
        }
        if self.period.is_zero() {
            return Err(HugeError::InvalidSetting("a period of 0".into()));
        }
        let mut access = self.access;
        access.hot_threshold = self.threshold;
        let tracker = AccessTracker::builder()
            .choice(self.choice)
            .options(access)
            .build()?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                tracker,
                arenas: Vec::new(),
                enabled: false,
                settled: false,
                period: self.period,
                threshold: self.threshold,
                policy: self.policy,
                auto_place: self.auto_place,
                settle_rotations: self.settle_rotations,
                compactor: None,
                on_notice: None,
                hot_pages: 0,
                dirty: BTreeSet::new(),
                promoted: BTreeMap::new(),
                collapsing: BTreeSet::new(),
                backoff: BTreeMap::new(),
                compacted_pages: 0,
                totals: PlaceReport::default(),
                pace: Pace::new(access.cpu_budget),
                last_rotation: 0,
                error: None,
                changed: Vec::new(),
            }),
            wake: Condvar::new(),
            notifier: Notifier::new()?,
            stop: AtomicBool::new(false),
        });
        let thread = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("kioku-hugepage".into())
                .spawn(move || run(&inner))
                .map_err(|source| HugeError::Sys {
                    what: "spawning the manager thread",
                    source,
                })?
        };
        Ok(Manager {
            inner,
            thread: Some(thread),
        })
    }
}

struct Promoted {
    at: Instant,
    /// Tracked again to see whether it is still hot.
    revisiting: bool,
}

type NoticeFn = Box<dyn FnMut(&Notice) + Send>;

struct State {
    tracker: AccessTracker,
    arenas: Vec<(ArenaId, PageRange)>,
    enabled: bool,
    settled: bool,
    period: Duration,
    threshold: u8,
    policy: Policy,
    auto_place: bool,
    settle_rotations: u32,
    compactor: Option<Box<dyn Compactor>>,
    on_notice: Option<NoticeFn>,
    hot_pages: usize,
    /// Huge ranges (by start) to decide at the next placement.
    dirty: BTreeSet<usize>,
    promoted: BTreeMap<usize, Promoted>,
    /// Huge ranges being collapsed (with the state unlocked).
    collapsing: BTreeSet<usize>,
    /// Huge ranges whose collapse failed, and when to try again.
    backoff: BTreeMap<usize, Instant>,
    compacted_pages: usize,
    totals: PlaceReport,
    /// The sampling budget: converging or steady, and how quiet placement has been.
    pace: Pace,
    last_rotation: u64,
    error: Option<String>,
    changed: Vec<usize>,
}

impl State {
    fn huge_used(&self) -> usize {
        let h = huge_page_size() / kioku_track::page_size();
        self.promoted.len() + self.collapsing.len() + self.compacted_pages.div_ceil(h)
    }

    fn budget_left(&self) -> usize {
        match self.policy.budget {
            Some(b) => b.saturating_sub(self.huge_used()),
            None => usize::MAX,
        }
    }

    fn arena_of(&self, r: PageRange) -> Option<(ArenaId, PageRange)> {
        self.arenas
            .iter()
            .copied()
            .find(|(_, a)| a.start < r.end && r.start < a.end)
    }

    fn mark_all_dirty(&mut self) {
        let h = huge_page_size();
        for (_, a) in &self.arenas {
            let mut s = a.start / h * h;
            while s < a.end {
                self.dirty.insert(s);
                s += h;
            }
        }
    }

    fn status(&self) -> Status {
        Status {
            enabled: self.enabled,
            settled: self.settled,
            hot_pages: self.hot_pages,
            promoted_ranges: self.promoted.len(),
            huge_pages_used: self.huge_used(),
            totals: self.totals,
            last_scan: self.tracker.last_scan(),
            backend: self.tracker.backend_kind(),
            error: self.error.clone(),
        }
    }
}

struct Inner {
    state: Mutex<State>,
    wake: Condvar,
    notifier: Notifier,
    stop: AtomicBool,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Posts `n` and calls the notification callback (with the state unlocked).
    fn notify<'a>(&'a self, mut st: MutexGuard<'a, State>, n: Notice) -> MutexGuard<'a, State> {
        let n = self.notifier.post(n);
        if let Some(mut f) = st.on_notice.take() {
            drop(st);
            f(&n);
            st = self.lock();
            if st.on_notice.is_none() {
                st.on_notice = Some(f);
            }
        }
        st
    }
}

/// Huge pages that follow the application: see the crate documentation.
pub struct Manager {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("status", &self.status())
            .finish()
    }
}

impl Manager {
    /// A builder with the defaults (100 ms period, threshold 2, automatic placement).
    pub fn builder() -> ManagerBuilder {
        ManagerBuilder::default()
    }

    /// Registers `len` bytes at `addr` (rounded out to pages) as arena `id`: its pages are
    /// tracked while tracking is enabled.
    pub fn register(&self, addr: *const u8, len: usize, id: ArenaId) -> Result<(), HugeError> {
        let r = PageRange::covering(addr, len);
        if len == 0 || r.is_empty() {
            return Err(HugeError::BadRange {
                start: r.start,
                end: r.end,
                reason: "empty",
            });
        }
        let mut st = self.inner.lock();
        if st.arena_of(r).is_some() {
            return Err(HugeError::Overlap {
                start: r.start,
                end: r.end,
            });
        }
        st.tracker.track(r)?;
        st.arenas.push((id, r));
        st.arenas.sort_by_key(|(_, a)| a.start);
        st.settled = false;
        if st.enabled {
            // New memory to place: converge at the higher budget.
            let s = &mut *st;
            s.pace.converge(&mut s.tracker);
        }
        drop(st);
        self.inner.wake.notify_all();
        Ok(())
    }

    /// Unregisters the arena holding `addr`: its pages are no longer tracked or placed (huge
    /// pages already made stay, and are no longer counted against the budget).
    pub fn unregister(&self, addr: *const u8) -> Result<(), HugeError> {
        let a = addr as usize;
        let mut st = self.inner.lock();
        let Some(i) = st.arenas.iter().position(|(_, r)| r.contains(a)) else {
            return Err(HugeError::NotRegistered {
                start: a,
                end: a + 1,
            });
        };
        let (_, r) = st.arenas.remove(i);
        let hot = st.tracker.heat(r, st.threshold).hot;
        st.hot_pages = st.hot_pages.saturating_sub(hot);
        st.tracker.untrack(r)?;
        let h = huge_page_size();
        st.promoted.retain(|&s, _| s + h <= r.start || s >= r.end);
        st.dirty.retain(|&s| s + h <= r.start || s >= r.end);
        Ok(())
    }

    /// Starts (or restarts, after settling or `disable`) tracking — HPS's `hps_enable_track`.
    pub fn enable(&self) -> Result<(), HugeError> {
        let mut st = self.inner.lock();
        if let Some(e) = &st.error {
            return Err(HugeError::ThreadGone(e.clone()));
        }
        st.enabled = true;
        st.settled = false;
        st.mark_all_dirty();
        let s = &mut *st;
        s.pace.converge(&mut s.tracker);
        drop(st);
        self.inner.wake.notify_all();
        Ok(())
    }

    /// Stops tracking — HPS's `hps_disable_track`. Armed pages are disarmed; counts are kept.
    pub fn disable(&self) -> Result<(), HugeError> {
        let mut st = self.inner.lock();
        st.enabled = false;
        st.tracker.pause()?;
        let s = &mut *st;
        s.pace.steady(&mut s.tracker);
        Ok(())
    }

    /// Sets the compaction callback — HPS's `hps_set_functions`.
    pub fn set_compactor(&self, c: Box<dyn Compactor>) {
        self.inner.lock().compactor = Some(c);
    }

    /// Removes the compaction callback.
    pub fn clear_compactor(&self) {
        self.inner.lock().compactor = None;
    }

    /// Calls `f` on the manager's thread for every notice (the "callback thread" way).
    pub fn on_notice(&self, f: impl FnMut(&Notice) + Send + 'static) {
        self.inner.lock().on_notice = Some(Box::new(f));
    }

    /// Waits for the next notice — HPS's `hps_wait_signal`. `None` after `timeout`.
    pub fn wait(&self, timeout: Option<Duration>) -> Option<Notice> {
        self.inner.notifier.wait(timeout)
    }

    /// An eventfd that becomes readable with each notice (read 8 bytes to reset it); owned by
    /// the manager.
    pub fn notify_fd(&self) -> std::os::fd::RawFd {
        self.inner.notifier.fd()
    }

    /// Appends the hot pages of every arena (count at the threshold or above), in address
    /// order.
    pub fn hot_pages(&self, out: &mut Vec<HotPage>) {
        let st = self.inner.lock();
        for (_, r) in &st.arenas {
            st.tracker.hot(*r, st.threshold, out);
        }
    }

    /// Appends the counts of every observed page of the arena holding `addr`.
    pub fn counts(&self, addr: *const u8, out: &mut Vec<PageCount>) {
        let st = self.inner.lock();
        if let Some((_, r)) = st.arenas.iter().find(|(_, r)| r.contains(addr as usize)) {
            st.tracker.counts(*r, out);
        }
    }

    /// Changes the hot threshold.
    pub fn set_threshold(&self, threshold: u8) -> Result<(), HugeError> {
        if threshold == 0 {
            return Err(HugeError::InvalidSetting("threshold 0".into()));
        }
        let mut st = self.inner.lock();
        st.threshold = threshold;
        let mut o = *st.tracker.options();
        o.hot_threshold = threshold;
        st.tracker.set_options(o);
        Ok(())
    }

    /// Changes the sampling period.
    pub fn set_period(&self, period: Duration) -> Result<(), HugeError> {
        if period.is_zero() {
            return Err(HugeError::InvalidSetting("a period of 0".into()));
        }
        self.inner.lock().period = period;
        self.inner.wake.notify_all();
        Ok(())
    }

    /// Changes the policy.
    pub fn set_policy(&self, policy: Policy) -> Result<(), HugeError> {
        policy.check()?;
        let mut st = self.inner.lock();
        st.policy = policy;
        st.mark_all_dirty();
        Ok(())
    }

    /// Runs one placement pass now, over every range of every arena, on the calling thread.
    pub fn place(&self) -> Result<PlaceReport, HugeError> {
        let mut st = self.inner.lock();
        st.mark_all_dirty();
        let (st, report) = place(&self.inner, st);
        drop(st);
        Ok(report)
    }

    /// The manager's state.
    pub fn status(&self) -> Status {
        self.inner.lock().status()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.inner.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The manager's thread.
fn run(inner: &Inner) {
    let mut st = inner.lock();
    let mut buf = Vec::new();
    loop {
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        if !st.enabled || st.settled || st.error.is_some() {
            st = due_revisits(st, inner);
            let wait = if st.promoted.is_empty() {
                Duration::from_secs(3600)
            } else {
                st.period
            };
            st = inner
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        let period = st.period;
        st = inner
            .wake
            .wait_timeout(st, period)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        if inner.stop.load(Ordering::SeqCst) {
            return;
        }
        if !st.enabled || st.settled {
            continue;
        }
        st = tick(inner, st, &mut buf);
    }
}

/// One period: scan, notify, place, settle.
fn tick<'a>(
    inner: &'a Inner,
    mut st: MutexGuard<'a, State>,
    buf: &mut Vec<PageRange>,
) -> MutexGuard<'a, State> {
    st = due_revisits(st, inner);
    if let Err(e) = st.tracker.scan_into(buf) {
        tracing::warn!("kioku-hugepage: tracking stopped: {e}");
        st.error = Some(e.to_string());
        st.enabled = false;
        return st;
    }
    let scan = st.tracker.last_scan();
    st.hot_pages = (st.hot_pages + scan.became_hot).saturating_sub(scan.became_cold);
    let mut changed = std::mem::take(&mut st.changed);
    st.tracker.drain_changed(&mut changed);
    let h = huge_page_size();
    for &p in &changed {
        st.dirty.insert(p / h * h);
    }
    st.changed = changed;
    // Ranges that got observations may now have enough of them to be decided.
    let observed: Vec<usize> = st
        .tracker
        .observed()
        .iter()
        .map(|r| r.start / h * h)
        .collect();
    st.dirty.extend(observed);
    let rotated = scan.rotations > st.last_rotation;
    if rotated {
        st.last_rotation = scan.rotations;
        // Ranges may have gathered enough observations without a page crossing the threshold.
        st.mark_all_dirty();
    }
    if scan.became_hot > 0 {
        let n = Notice {
            hot_pages: st.hot_pages,
            new_hot: scan.became_hot,
            ..Notice::default()
        };
        st = inner.notify(st, n);
    }
    let mut acted = 0usize;
    if st.auto_place && !st.dirty.is_empty() {
        let (s, r) = place(inner, st);
        st = s;
        if r.acted() {
            let h_pages = huge_page_size() / kioku_track::page_size();
            acted = (r.promoted + r.demoted) * h_pages + r.compacted_pages;
            let n = Notice {
                hot_pages: st.hot_pages,
                promoted: r.promoted,
                compacted: r.compacted_pages,
                ..Notice::default()
            };
            st = inner.notify(st, n);
        }
    }
    {
        let s = &mut *st;
        let rules = Rules {
            threshold: s.threshold,
            settle_rotations: s.settle_rotations,
            auto_place: s.auto_place,
            enabled: s.enabled,
        };
        s.pace.after_scan(
            &mut s.tracker,
            &scan,
            rotated,
            scan.became_hot + acted,
            rules,
        );
    }
    // Settled: no page turned hot and placement changed nothing for `settle_rotations` whole
    // rotations (counted in fractions of a rotation at the sample size of each scan, since the
    // sample grows and shrinks with the budget; plus two scans, since a rotation's last
    // observations arrive one scan after it ends).
    let done = st.pace.quiet_rotations(&scan) >= st.settle_rotations as f64;
    if st.settle_rotations > 0 && done && st.auto_place {
        if let Err(e) = st.tracker.pause() {
            tracing::warn!("kioku-hugepage: pausing the tracker failed: {e}");
        }
        let s = &mut *st;
        s.pace.steady(&mut s.tracker);
        st.settled = true;
        tracing::info!("kioku-hugepage: placement settled; tracking stopped");
        let n = Notice {
            hot_pages: st.hot_pages,
            settled: true,
            ..Notice::default()
        };
        st = inner.notify(st, n);
    }
    st
}

/// Starts revisiting promoted ranges whose time has come (re-tracks them).
fn due_revisits<'a>(mut st: MutexGuard<'a, State>, _inner: &Inner) -> MutexGuard<'a, State> {
    let Some(after) = st.policy.revisit else {
        return st;
    };
    let now = Instant::now();
    let h = huge_page_size();
    let due: Vec<usize> = st
        .promoted
        .iter()
        .filter(|(_, p)| !p.revisiting && now.duration_since(p.at) >= after)
        .map(|(&s, _)| s)
        .collect();
    if due.is_empty() {
        return st;
    }
    for s in due {
        let r = PageRange::new(s, s + h);
        if st.tracker.track(r).is_ok() {
            st.tracker.reset(r);
            if let Some(p) = st.promoted.get_mut(&s) {
                p.revisiting = true;
            }
        }
    }
    // Revisits need tracking: leave the settled state.
    if st.enabled {
        st.settled = false;
        st.pace.quiet = 0.0;
        st.pace.quiet_scans = 0;
    }
    st
}

/// One placement pass over the dirty ranges. The compaction callback runs with the state
/// unlocked.
fn place<'a>(
    inner: &'a Inner,
    mut st: MutexGuard<'a, State>,
) -> (MutexGuard<'a, State>, PlaceReport) {
    let mut report = PlaceReport::default();
    let h = huge_page_size();
    let ps = kioku_track::page_size();
    let now = Instant::now();
    let dirty: Vec<usize> = std::mem::take(&mut st.dirty).into_iter().collect();
    let mut compact: BTreeMap<ArenaId, Vec<PageCount>> = BTreeMap::new();
    let mut promote: Vec<PageRange> = Vec::new();
    let threshold = st.threshold;
    let policy = st.policy;
    let has_compactor = st.compactor.is_some();
    for s in dirty {
        let hr = PageRange::new(s, s + h);
        let Some((arena, ar)) = st.arena_of(hr) else {
            continue;
        };
        let whole = ar.start <= hr.start && hr.end <= ar.end;
        let promoted = st.promoted.get(&s).map(|p| p.revisiting);
        if promoted == Some(false) || st.collapsing.contains(&s) {
            continue;
        }
        if st.backoff.get(&s).is_some_and(|&t| t > now) {
            continue;
        }
        let part = PageRange::new(hr.start.max(ar.start), hr.end.min(ar.end));
        let heat = st.tracker.heat(part, threshold);
        let promote_candidate = whole
            && heat.observed > 0
            && heat.warm as f64 / heat.observed as f64 >= policy.promote_fraction;
        // Needed for the fill of a collapse, and to know when a sparse range (fewer populated
        // pages than `min_observed`) has been observed enough. One `mincore` of 2 MiB.
        let populated =
            if promote_candidate || promoted.is_some() || heat.observed < policy.min_observed {
                promote::resident_pages(part).unwrap_or_else(|e| {
                    tracing::debug!(range = ?part, "kioku-hugepage: {e}");
                    0
                })
            } else {
                // Not needed: the range is no promotion candidate (0 keeps it from looking like
                // one) and was observed enough.
                0
            };
        let facts = RangeFacts {
            range: part,
            pages: part.len_pages(),
            observed: heat.observed,
            warm: heat.warm,
            hot: heat.hot,
            populated,
            promoted: promoted.is_some(),
            compactor: has_compactor,
            // Promotions decided in this pass are charged before they are made.
            budget_left: st.budget_left().saturating_sub(promote.len()),
        };
        report.decided += 1;
        match policy.decide(&facts) {
            Decision::Promote => {
                if promote.len() < MAX_COLLAPSES_PER_PASS {
                    promote.push(hr);
                } else {
                    // Later: a pass must not hold the program's huge pages hostage.
                    st.dirty.insert(s);
                }
            }
            Decision::Demote => {
                promote::stop_advising(hr);
                st.promoted.remove(&s);
                st.tracker.reset(hr);
                report.demoted += 1;
                // A huge page came free: ranges waiting for budget get another look.
                st.mark_all_dirty();
                st.dirty.remove(&s);
            }
            Decision::Leave(Why::StillHot) => {
                // Revisited and still hot: collapse it again.
                st.promoted.remove(&s);
                promote.push(hr);
            }
            Decision::Compact => {
                let pages = compact.entry(arena).or_default();
                st.tracker.hot(part, threshold, pages);
            }
            Decision::Leave(Why::Budget) => report.over_budget += 1,
            Decision::Leave(_) => {}
        }
    }
    if !promote.is_empty() {
        st = promote_ranges(inner, st, &promote, &mut report);
    }
    for (arena, pages) in compact {
        if pages.is_empty() {
            continue;
        }
        let Some(mut c) = st.compactor.take() else {
            break;
        };
        let allowance = st.budget_left().saturating_mul(h / ps);
        drop(st);
        let mut moved = vec![false; pages.len()];
        let req = CompactRequest {
            arena,
            pages: &pages,
            allowance_pages: allowance,
        };
        let r = c.compact(&req, &mut moved);
        st = inner.lock();
        if st.compactor.is_none() {
            st.compactor = Some(c);
        }
        report.offered_pages += pages.len();
        if let Err(e) = r {
            tracing::warn!(?arena, "kioku-hugepage: compaction callback failed: {e}");
            report.compaction_errors += 1;
        }
        for (p, m) in pages.iter().zip(&moved) {
            // Offered pages start over: moved ones hold other objects now, the others are
            // offered again once they are hot again.
            st.tracker.reset(PageRange::new(p.addr, p.addr + ps));
            report.compacted_pages += *m as usize;
        }
        let moved_here = moved.iter().filter(|m| **m).count();
        st.hot_pages = st.hot_pages.saturating_sub(pages.len());
        st.compacted_pages += moved_here;
    }
    st.totals.add(&report);
    (st, report)
}

/// Collapses `ranges`. Sampling must not hold their pages (a protection or a userfaultfd
/// registration makes a collapse fail, and sampling would split the huge mapping again), so
/// they are untracked first; the collapses run with the state unlocked (each takes up to
/// milliseconds while the program runs).
fn promote_ranges<'a>(
    inner: &'a Inner,
    mut st: MutexGuard<'a, State>,
    ranges: &[PageRange],
    report: &mut PlaceReport,
) -> MutexGuard<'a, State> {
    let mut hot = Vec::with_capacity(ranges.len());
    for &hr in ranges {
        hot.push(st.tracker.heat(hr, st.threshold).hot);
        if let Err(e) = st.tracker.untrack(hr) {
            tracing::debug!(range = ?hr, "kioku-hugepage: untrack before collapse failed: {e}");
        }
        // Being collapsed: no other pass decides it meanwhile.
        st.collapsing.insert(hr.start);
    }
    drop(st);
    let results: Vec<Result<Duration, CollapseFailure>> =
        ranges.iter().map(|&hr| promote::collapse(hr)).collect();
    let mut st = inner.lock();
    for ((&hr, result), hot_here) in ranges.iter().zip(results).zip(hot) {
        st.collapsing.remove(&hr.start);
        match result {
            Ok(took) => {
                st.promoted.insert(
                    hr.start,
                    Promoted {
                        at: Instant::now(),
                        revisiting: false,
                    },
                );
                st.backoff.remove(&hr.start);
                st.hot_pages = st.hot_pages.saturating_sub(hot_here);
                report.promoted += 1;
                report.collapse_time += took;
            }
            Err(f) => {
                let (retry, what) = match f {
                    CollapseFailure::NoHugePage => {
                        report.no_huge_page += 1;
                        (Duration::from_secs(10), "no huge page available")
                    }
                    CollapseFailure::NotMapped => {
                        report.no_huge_page += 1;
                        (
                            Duration::from_secs(2),
                            "not mapped by a huge page afterwards",
                        )
                    }
                    _ => {
                        report.not_eligible += 1;
                        (Duration::from_secs(600), "not eligible")
                    }
                };
                tracing::debug!(range = ?hr, ?f, "kioku-hugepage: collapse failed ({what})");
                st.backoff.insert(hr.start, Instant::now() + retry);
                // The arena may have been unregistered meanwhile.
                if st.arena_of(hr).is_some() {
                    if let Err(e) = st.tracker.track(hr) {
                        tracing::debug!(range = ?hr, "kioku-hugepage: re-tracking failed: {e}");
                    }
                }
            }
        }
    }
    st
}
