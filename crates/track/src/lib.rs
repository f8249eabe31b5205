//! kioku's page tracker: which pages of a virtual range were written since the previous scan.
//!
//! Two backends sit behind one trait, [`PageTracker`]:
//!
//! * [`BackendKind::UffdPagemapScan`] — userfaultfd write-protect in async mode
//!   (`UFFD_FEATURE_WP_ASYNC` + `UFFD_FEATURE_WP_UNPOPULATED`) plus the `PAGEMAP_SCAN` ioctl,
//!   which returns the written pages and write-protects them again in one call (Linux ≥ 6.7).
//!   Works for the calling process and, given a userfaultfd created in it, for another process.
//! * [`BackendKind::Mprotect`] — `mprotect(PROT_READ)` plus a SIGSEGV handler that records the
//!   page in a lock-free bitmap; calling process only.
//!
//! *Accessed* pages (read or written) are sampled by an [`AccessTracker`], which keeps
//! per-page access counts over time; see the `access` module:
//!
//! * [`BackendKind::Refault`] — drop sampled pages' mappings in a shared mapping and see which
//!   come back (pagemap); calling process, or another process's shmem as root.
//! * [`BackendKind::ProtNone`] — `mprotect(PROT_NONE)` and the SIGSEGV handler; any memory of
//!   the calling process.
//!
//! ```no_run
//! use kioku_track::{PageRange, PageTracker, Tracker};
//! let mut tracker = Tracker::new()?;
//! # let (ptr, len) = (std::ptr::null::<u8>(), 0usize);
//! tracker.track(PageRange::from_ptr(ptr, len))?;
//! // ... the program writes ...
//! let mut dirty = Vec::new();
//! tracker.scan_into(&mut dirty)?; // sorted, coalesced, re-armed
//! # Ok::<(), kioku_track::TrackError>(())
//! ```
//!
//! See `docs/track.md` for the guarantees and failure modes.

#![warn(missing_docs)]

mod access;
mod error;
mod maps;
mod mprotect;
mod query;
mod rangeset;
mod segv;
pub mod sys;
pub mod uffd;
mod uffd_backend;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

pub use access::{
    parse_access_backend_env, AccessOptions, AccessScan, AccessTracker, AccessTrackerBuilder,
    PageCount, RangeHeat, MAX_SAMPLED_RANGES,
};
pub use error::TrackError;
pub use mprotect::{MprotectTracker, MAX_MPROTECT_RANGES};
pub use query::{PagemapQuery, Query};
pub use uffd::{take_uffd_from, UffdSupport};
pub use uffd_backend::UffdTracker;

/// A page-aligned address range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageRange {
    /// First byte (page aligned).
    pub start: usize,
    /// One past the last byte (page aligned).
    pub end: usize,
}

impl PageRange {
    /// `[start, end)`; both ends should be page aligned (checked by `track`).
    pub const fn new(start: usize, end: usize) -> PageRange {
        PageRange { start, end }
    }

    /// The range covering `len` bytes from `ptr`.
    pub fn from_ptr(ptr: *const u8, len: usize) -> PageRange {
        let start = ptr as usize;
        PageRange {
            start,
            end: start + len,
        }
    }

    /// The smallest page-aligned range holding the `len` bytes at `ptr` (rounded outwards).
    pub fn covering(ptr: *const u8, len: usize) -> PageRange {
        let ps = page_size();
        let start = ptr as usize & !(ps - 1);
        let end = (ptr as usize + len + ps - 1) & !(ps - 1);
        PageRange { start, end }
    }

    /// Length in bytes.
    pub const fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the range holds no byte.
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Number of pages (of [`page_size`]).
    pub fn len_pages(&self) -> usize {
        self.len() / page_size()
    }

    /// Whether `addr` lies inside.
    pub const fn contains(&self, addr: usize) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Iterates over the page addresses of the range.
    pub fn pages(&self) -> impl Iterator<Item = usize> {
        (self.start..self.end).step_by(page_size())
    }

    pub(crate) fn check(&self) -> Result<(), TrackError> {
        let ps = page_size();
        let bad = |reason| TrackError::BadRange {
            start: self.start,
            end: self.end,
            reason,
        };
        if self.end <= self.start {
            return Err(bad("empty or reversed"));
        }
        if !self.start.is_multiple_of(ps) || !self.end.is_multiple_of(ps) {
            return Err(bad("not page aligned"));
        }
        Ok(())
    }
}

/// What a tracker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// Every page written since the previous scan.
    Written,
    /// Pages read or written since the previous scan, among a sample of pages observed
    /// ([`AccessTracker`]).
    Accessed,
}

/// Which mechanism a tracker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// userfaultfd async write-protect + `PAGEMAP_SCAN` (Linux ≥ 6.7).
    UffdPagemapScan,
    /// `mprotect` + SIGSEGV handler (any Linux; calling process only).
    Mprotect,
    /// Accessed pages: sampled pages unmapped in a shared mapping, found mapped again in
    /// pagemap (calling process; another process's shmem as root).
    Refault,
    /// Accessed pages: sampled pages made `PROT_NONE`, caught by the SIGSEGV handler (calling
    /// process, any memory).
    ProtNone,
}

/// Counters of one scan (for benchmarks and logs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Coalesced ranges returned.
    pub ranges: usize,
    /// Pages returned.
    pub pages: usize,
    /// System calls made (ioctl or mprotect).
    pub syscalls: usize,
}

/// A source of "which pages had event E since the previous scan" for a set of ranges.
///
/// Ranges can be added and removed at any time. A newly tracked range starts clean: writes made
/// before `track` are not reported.
pub trait PageTracker {
    /// The mechanism in use.
    fn backend(&self) -> BackendKind;
    /// What is reported.
    fn event(&self) -> Event;
    /// The tracked process (the caller's own pid for the calling process).
    fn pid(&self) -> i32;
    /// Starts tracking `range` (parts already tracked keep their state).
    fn track(&mut self, range: PageRange) -> Result<(), TrackError>;
    /// Stops tracking `range` (parts not tracked are ignored).
    fn untrack(&mut self, range: PageRange) -> Result<(), TrackError>;
    /// The tracked ranges, sorted and coalesced.
    fn tracked(&self) -> &[PageRange];
    /// Replaces `out` with the pages that had the event since the previous scan, sorted and
    /// coalesced, and re-arms tracking for them.
    fn scan_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError>;
    /// Like [`PageTracker::scan_into`] but leaves the state as it is (the next scan reports
    /// these pages again).
    fn peek_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError>;

    /// [`PageTracker::scan_into`] into a new vector.
    fn scan(&mut self) -> Result<Vec<PageRange>, TrackError> {
        let mut out = Vec::new();
        self.scan_into(&mut out)?;
        Ok(out)
    }

    /// [`PageTracker::peek_into`] into a new vector.
    fn peek(&mut self) -> Result<Vec<PageRange>, TrackError> {
        let mut out = Vec::new();
        self.peek_into(&mut out)?;
        Ok(out)
    }
}

/// The system page size.
pub fn page_size() -> usize {
    static PS: OnceLock<usize> = OnceLock::new();
    *PS.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as usize
        } else {
            4096
        }
    })
}

/// Which backend a builder asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Honour `KIOKU_TRACKER`, else the best that works.
    #[default]
    Auto,
    /// Exactly this one (ignores `KIOKU_TRACKER`); fails if it cannot work.
    Force(BackendKind),
}

/// Parses a `KIOKU_TRACKER` value: `uffd`, `mprotect`, `auto` or empty.
pub fn parse_backend_env(value: &str) -> Result<BackendChoice, TrackError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "auto" => Ok(BackendChoice::Auto),
        "uffd" | "userfaultfd" | "pagemap" | "uffd-pagemap-scan" => {
            Ok(BackendChoice::Force(BackendKind::UffdPagemapScan))
        }
        "mprotect" => Ok(BackendChoice::Force(BackendKind::Mprotect)),
        _ => Err(TrackError::InvalidEnv {
            var: "KIOKU_TRACKER",
            value: value.to_string(),
            expected: "`uffd`, `mprotect` or `auto`",
        }),
    }
}

/// What the kernel offers, as probed at run time.
#[derive(Debug)]
pub struct Probe {
    /// `Ok` when userfaultfd async write-protect and `PAGEMAP_SCAN` both work here.
    pub uffd: Result<UffdSupport, TrackError>,
}

/// Probes the kernel for the userfaultfd backend (creates and closes a userfaultfd).
pub fn probe() -> Probe {
    Probe {
        uffd: uffd::probe_support(),
    }
}

/// Builds a [`Tracker`].
#[derive(Debug)]
pub struct TrackerBuilder {
    event: Event,
    choice: BackendChoice,
    process: Option<(i32, OwnedFd)>,
    remote: Option<i32>,
}

impl Default for TrackerBuilder {
    fn default() -> Self {
        TrackerBuilder {
            event: Event::Written,
            choice: BackendChoice::Auto,
            process: None,
            remote: None,
        }
    }
}

impl TrackerBuilder {
    /// What to report (default [`Event::Written`]).
    pub fn event(mut self, event: Event) -> Self {
        self.event = event;
        self
    }

    /// Forces a backend (otherwise `KIOKU_TRACKER`, else the best available).
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.choice = BackendChoice::Force(kind);
        self
    }

    /// Sets the backend choice.
    pub fn choice(mut self, choice: BackendChoice) -> Self {
        self.choice = choice;
        self
    }

    /// Tracks process `pid` instead of the caller, through `uffd`, a userfaultfd created in
    /// that process (e.g. from [`take_uffd_from`]). It may be fresh (the tracker does the
    /// `UFFDIO_API` handshake) or already initialised with `WP_ASYNC|WP_UNPOPULATED`.
    pub fn process(mut self, pid: i32, uffd: OwnedFd) -> Self {
        self.process = Some((pid, uffd));
        self
    }

    /// Tracks process `pid` from outside without a userfaultfd of its own ([`Event::Accessed`]
    /// with the refault backend: shmem ranges, root).
    pub fn remote(mut self, pid: i32) -> Self {
        self.remote = Some(pid);
        self
    }

    /// Creates the tracker.
    pub fn build(self) -> Result<Tracker, TrackError> {
        if self.event == Event::Accessed {
            let mut b = AccessTracker::builder().choice(self.choice);
            if let Some(pid) = self.remote.or(self.process.as_ref().map(|p| p.0)) {
                b = b.process(pid);
            }
            return Ok(Tracker {
                inner: Inner::Access(Box::new(b.build()?)),
            });
        }
        if let Some(pid) = self.remote {
            return Err(TrackError::RemoteUnsupported {
                backend: BackendKind::Mprotect,
                pid,
            });
        }
        if let BackendChoice::Force(kind @ (BackendKind::Refault | BackendKind::ProtNone)) =
            self.choice
        {
            return Err(TrackError::WrongEvent {
                backend: kind,
                event: Event::Written,
            });
        }
        let choice = match self.choice {
            BackendChoice::Auto => match std::env::var("KIOKU_TRACKER") {
                Ok(v) => parse_backend_env(&v)?,
                Err(_) => BackendChoice::Auto,
            },
            forced => forced,
        };
        let inner = match (self.process, choice) {
            (Some((pid, _)), BackendChoice::Force(BackendKind::Mprotect)) => {
                return Err(TrackError::RemoteUnsupported {
                    backend: BackendKind::Mprotect,
                    pid,
                })
            }
            (Some((pid, fd)), BackendChoice::Force(BackendKind::UffdPagemapScan)) => {
                Inner::Uffd(UffdTracker::for_process(pid, fd)?)
            }
            (Some((pid, fd)), BackendChoice::Auto) => match UffdTracker::for_process(pid, fd) {
                Ok(t) => Inner::Uffd(t),
                Err(e @ (TrackError::MissingKernelFeature { .. } | TrackError::Sys { .. })) => {
                    return Err(TrackError::NoBackend {
                        pid,
                        reason: Box::new(e),
                    })
                }
                Err(e) => return Err(e),
            },
            (None, BackendChoice::Force(BackendKind::UffdPagemapScan)) => {
                Inner::Uffd(UffdTracker::new()?)
            }
            (None, BackendChoice::Force(BackendKind::Mprotect)) => {
                Inner::Mprotect(MprotectTracker::new()?)
            }
            (_, BackendChoice::Force(kind @ (BackendKind::Refault | BackendKind::ProtNone))) => {
                return Err(TrackError::WrongEvent {
                    backend: kind,
                    event: Event::Written,
                })
            }
            (None, BackendChoice::Auto) => match UffdTracker::new() {
                Ok(t) => Inner::Uffd(t),
                Err(e) => {
                    tracing::warn!(
                        "kioku-track: userfaultfd backend unavailable ({e}); falling back to mprotect"
                    );
                    Inner::Mprotect(MprotectTracker::new()?)
                }
            },
        };
        let tracker = Tracker { inner };
        static LOGGED: AtomicBool = AtomicBool::new(false);
        if !LOGGED.swap(true, Ordering::Relaxed) {
            tracing::info!(
                backend = ?tracker.backend(),
                pid = tracker.pid(),
                "kioku-track: page tracker backend selected"
            );
        }
        Ok(tracker)
    }
}

#[derive(Debug)]
enum Inner {
    Uffd(UffdTracker),
    Mprotect(MprotectTracker),
    Access(Box<AccessTracker>),
}

/// A page tracker with a run-time selected backend.
#[derive(Debug)]
pub struct Tracker {
    inner: Inner,
}

impl Tracker {
    /// A written-page tracker for the calling process with the automatically selected backend.
    pub fn new() -> Result<Tracker, TrackError> {
        TrackerBuilder::default().build()
    }

    /// A builder for the other variants (forced backend, other process).
    pub fn builder() -> TrackerBuilder {
        TrackerBuilder::default()
    }

    /// The accessed-page tracker inside (its counts and sampling), for [`Event::Accessed`].
    pub fn access(&self) -> Option<&AccessTracker> {
        match &self.inner {
            Inner::Access(t) => Some(&**t),
            _ => None,
        }
    }

    /// The userfaultfd of the userfaultfd backend (`None` for the others).
    pub fn userfaultfd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.inner {
            Inner::Uffd(t) => Some(t.userfaultfd()),
            _ => None,
        }
    }

    /// The accessed-page tracker inside, mutably.
    pub fn access_mut(&mut self) -> Option<&mut AccessTracker> {
        match &mut self.inner {
            Inner::Access(t) => Some(&mut **t),
            _ => None,
        }
    }

    fn as_dyn(&self) -> &dyn PageTracker {
        match &self.inner {
            Inner::Uffd(t) => t,
            Inner::Mprotect(t) => t,
            Inner::Access(t) => &**t,
        }
    }

    fn as_dyn_mut(&mut self) -> &mut dyn PageTracker {
        match &mut self.inner {
            Inner::Uffd(t) => t,
            Inner::Mprotect(t) => t,
            Inner::Access(t) => &mut **t,
        }
    }
}

impl PageTracker for Tracker {
    fn backend(&self) -> BackendKind {
        self.as_dyn().backend()
    }
    fn event(&self) -> Event {
        self.as_dyn().event()
    }
    fn pid(&self) -> i32 {
        self.as_dyn().pid()
    }
    fn track(&mut self, range: PageRange) -> Result<(), TrackError> {
        self.as_dyn_mut().track(range)
    }
    fn untrack(&mut self, range: PageRange) -> Result<(), TrackError> {
        self.as_dyn_mut().untrack(range)
    }
    fn tracked(&self) -> &[PageRange] {
        self.as_dyn().tracked()
    }
    fn scan_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        self.as_dyn_mut().scan_into(out)
    }
    fn peek_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        self.as_dyn_mut().peek_into(out)
    }
}

/// Appends `r` to `out`, merging it with the last range when they touch.
pub(crate) fn push_coalesced(out: &mut Vec<PageRange>, r: PageRange) {
    if let Some(last) = out.last_mut() {
        if last.end == r.start {
            last.end = r.end;
            return;
        }
    }
    out.push(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_parse() {
        assert_eq!(
            parse_backend_env("mprotect").unwrap(),
            BackendChoice::Force(BackendKind::Mprotect)
        );
        assert_eq!(
            parse_backend_env("UFFD").unwrap(),
            BackendChoice::Force(BackendKind::UffdPagemapScan)
        );
        assert_eq!(parse_backend_env("").unwrap(), BackendChoice::Auto);
        assert!(matches!(
            parse_backend_env("soft-dirty"),
            Err(TrackError::InvalidEnv { .. })
        ));
    }

    #[test]
    fn range_checks() {
        let ps = page_size();
        assert!(PageRange::new(0, ps).check().is_ok());
        assert!(PageRange::new(ps, ps).check().is_err());
        assert!(PageRange::new(1, ps + 1).check().is_err());
        assert_eq!(PageRange::new(ps, 5 * ps).len_pages(), 4);
        let c = PageRange::covering((ps + 10) as *const u8, ps);
        assert_eq!(c, PageRange::new(ps, 3 * ps));
        assert_eq!(
            PageRange::covering(ps as *const u8, ps),
            PageRange::new(ps, 2 * ps)
        );
    }

    #[test]
    fn coalescing() {
        let mut v = Vec::new();
        push_coalesced(&mut v, PageRange::new(0, 4096));
        push_coalesced(&mut v, PageRange::new(4096, 8192));
        push_coalesced(&mut v, PageRange::new(12288, 16384));
        assert_eq!(
            v,
            vec![PageRange::new(0, 8192), PageRange::new(12288, 16384)]
        );
    }
}
