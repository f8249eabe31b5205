//! The fallback backend: `mprotect(PROT_READ)` plus a SIGSEGV handler that records the faulting
//! page in a lock-free bitmap and makes the page writable again (libckpt's method).
//!
//! All trackers of the process share one table of [`MAX_MPROTECT_RANGES`] slots, read by the
//! signal handler with atomics only (slot life cycle and fault search: [`crate::segv`]).
//!
//! Ordering rules that make every write visible to some scan:
//! * handler: `mprotect(page, RW)` *then* set the bit;
//! * scan: swap the bitmap word to 0 *then* `mprotect(pages, R)`.
//!
//! A write between the swap and the re-protect lands on a page this scan reports; a fault after
//! the re-protect sets the bit for the next scan.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::rangeset::RangeSet;
use crate::segv::{self, now_ns, protect, SlotRange, ACTIVE, FREE, RESERVED, RETIRED};
use crate::{push_coalesced, BackendKind, Event, PageRange, PageTracker, ScanStats, TrackError};

/// Ranges the mprotect backend can track in one process (all trackers together).
pub const MAX_MPROTECT_RANGES: usize = 256;
/// A retired slot may be reused after this long when no free slot is left.
const TOMBSTONE_MIN_NS: u64 = 50_000_000;

struct Slot {
    range: SlotRange,
    bitmap: AtomicPtr<AtomicU64>,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            range: SlotRange::new(),
            bitmap: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

impl AsRef<SlotRange> for Slot {
    fn as_ref(&self) -> &SlotRange {
        &self.range
    }
}

static SLOTS: [Slot; MAX_MPROTECT_RANGES] = [const { Slot::new() }; MAX_MPROTECT_RANGES];
/// One past the highest slot ever used (the handler looks no further).
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
/// Handlers currently running (untrack waits for 0 before freeing a bitmap).
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGSEGV disposition found when our handler was installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// `KIOKU_SEGV_DEBUG` was set when the handler was installed: faults passed on are printed.
static SEGV_DEBUG: AtomicBool = AtomicBool::new(false);
/// Serialises track/untrack of all mprotect trackers (never taken in the handler).
static TABLE_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn write_stderr(msg: &[u8]) {
    // SAFETY: write(2) of a static buffer is async-signal-safe.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// The page size as seen by signal handlers (set when the handler is installed).
pub(crate) fn page_size_for_handler() -> usize {
    PAGE_SIZE.load(Ordering::Relaxed)
}

/// Whether `r` overlaps a range an mprotect write tracker of this process tracks.
pub(crate) fn overlaps_active(r: PageRange) -> bool {
    segv::overlaps_active(&SLOTS, r)
}

/// Sets every bit of a slot (used when a per-page mprotect fails: whole-range over-report).
fn set_all(bitmap: *mut AtomicU64, pages: usize) {
    for w in 0..pages.div_ceil(64) {
        // SAFETY: the bitmap holds pages.div_ceil(64) words and stays alive while
        // IN_HANDLER > 0 or the slot is ACTIVE.
        unsafe { (*bitmap.add(w)).fetch_or(u64::MAX, Ordering::AcqRel) };
    }
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno_slot = unsafe { libc::__errno_location() };
    // SAFETY: reading this thread's errno.
    let saved_errno = unsafe { *errno_slot };
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    let handled = handle_fault(info);
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
    // Faults outside the write tracker's ranges may be the access sampler's.
    let handled = handled || crate::access::protnone::handle_fault(info, ctx);
    // SAFETY: restoring this thread's errno.
    unsafe { *errno_slot = saved_errno };
    if !handled {
        if SEGV_DEBUG.load(Ordering::Relaxed) {
            // SAFETY: valid siginfo from the kernel.
            let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
            let mut buf = *b"kioku-track: unhandled SIGSEGV at 0x0000000000000000 code 0\n";
            for i in 0..16 {
                let nib = (addr >> (60 - 4 * i)) & 0xf;
                buf[36 + i] = b"0123456789abcdef"[nib];
            }
            buf[58] = b'0' + (code as u8 % 10);
            write_stderr(&buf);
        }
        chain(sig, info, ctx);
    }
}

/// Returns true when the fault was ours (recorded, or to be retried).
fn handle_fault(info: *mut libc::siginfo_t) -> bool {
    let Some(addr) = segv::fault_addr(info) else {
        return false;
    };
    let ps = PAGE_SIZE.load(Ordering::Relaxed);
    let high = HIGH_WATER.load(Ordering::SeqCst).min(MAX_MPROTECT_RANGES);
    segv::resolve(&SLOTS[..high], addr, |slot, start, end| {
        let bitmap = slot.bitmap.load(Ordering::Acquire);
        if bitmap.is_null() {
            return None;
        }
        let page = addr & !(ps - 1);
        let idx = (page - start) / ps;
        if protect(page, ps, libc::PROT_READ | libc::PROT_WRITE) {
            // SAFETY: idx < pages of the slot; the bitmap lives while IN_HANDLER > 0.
            unsafe { (*bitmap.add(idx / 64)).fetch_or(1u64 << (idx % 64), Ordering::AcqRel) };
            return Some(true);
        }
        // Per-page mprotect failed (typically ENOMEM: too many VMAs). Unprotect the whole range
        // and report all of it; the next scan re-protects it in one piece.
        if protect(start, end - start, libc::PROT_READ | libc::PROT_WRITE) {
            set_all(bitmap, (end - start) / ps);
            return Some(true);
        }
        write_stderr(
            b"kioku-track: cannot make a tracked page writable again (mprotect failed); aborting\n",
        );
        // SAFETY: abort is async-signal-safe.
        unsafe { libc::abort() };
    })
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = PREVIOUS.get() else {
        reset_default(sig);
        return;
    };
    let handler = prev.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Returning re-executes the faulting instruction, which now gets the default action.
        reset_default(sig);
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO and has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed without SA_SIGINFO: it takes the signal.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

fn reset_default(sig: libc::c_int) {
    // SAFETY: a zeroed sigaction with SIG_DFL is valid; sigaction is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Installs the process-wide SIGSEGV handler (once); it serves the write tracker and the
/// access sampler's protection probe.
pub(crate) fn install_handler() -> Result<(), TrackError> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let r = INSTALLED.get_or_init(|| {
        PAGE_SIZE.store(crate::page_size(), Ordering::Relaxed);
        SEGV_DEBUG.store(
            std::env::var_os("KIOKU_SEGV_DEBUG").is_some(),
            Ordering::Relaxed,
        );
        // SAFETY: a zeroed sigaction is a valid starting point; we fill handler and flags.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_segv as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        // SAFETY: sa_mask is a valid sigset_t inside `sa`.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: a zeroed sigaction to receive the old disposition.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid for the call.
        if unsafe { libc::sigaction(libc::SIGSEGV, &sa, &mut old) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        let _ = PREVIOUS.set(old);
        Ok(())
    });
    r.map_err(|e| TrackError::Sys {
        what: "installing the SIGSEGV handler",
        source: std::io::Error::from_raw_os_error(e),
    })
}

/// Tracks written pages of the calling process with `mprotect` and a SIGSEGV handler.
///
/// Limits: calling process only; a system call that writes into a protected page (e.g. `read(2)`
/// into a tracked buffer) fails with EFAULT instead of faulting; each written-then-reprotected
/// page can split a VMA (bounded by `vm.max_map_count`; when exceeded the range degrades to
/// "everything written").
#[derive(Debug)]
pub struct MprotectTracker {
    /// Slot indices owned by this tracker.
    slots: Vec<usize>,
    tracked: RangeSet,
    pid: i32,
    scratch: Vec<PageRange>,
}

impl MprotectTracker {
    /// A tracker for the calling process; installs the process-wide SIGSEGV handler once.
    pub fn new() -> Result<MprotectTracker, TrackError> {
        install_handler()?;
        Ok(MprotectTracker {
            slots: Vec::new(),
            tracked: RangeSet::default(),
            pid: std::process::id() as i32,
            scratch: Vec::new(),
        })
    }

    fn lock() -> std::sync::MutexGuard<'static, ()> {
        TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims a slot for `r` and publishes it ACTIVE with an empty bitmap (table lock held).
    /// Prefers free slots, then tombstones past their retry window, then the oldest tombstone
    /// older than `TOMBSTONE_MIN_NS`.
    fn claim(r: PageRange) -> Result<usize, TrackError> {
        let now = now_ns();
        let age = |i: usize| now.saturating_sub(SLOTS[i].range.retired_at.load(Ordering::Acquire));
        let pick = (0..MAX_MPROTECT_RANGES)
            .find(|&i| SLOTS[i].range.state.load(Ordering::SeqCst) == FREE)
            .or_else(|| {
                (0..MAX_MPROTECT_RANGES)
                    .filter(|&i| SLOTS[i].range.state.load(Ordering::SeqCst) == RETIRED)
                    .filter(|&i| age(i) >= TOMBSTONE_MIN_NS)
                    .max_by_key(|&i| age(i))
            });
        let Some(i) = pick else {
            return Err(TrackError::TooManyRanges {
                max: MAX_MPROTECT_RANGES,
            });
        };
        let slot = &SLOTS[i];
        // The table lock is held, so nobody else changes the state between the check and here.
        slot.range.state.store(RESERVED, Ordering::SeqCst);
        let words = r.len_pages().div_ceil(64);
        let bitmap: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        slot.range.start.store(r.start, Ordering::Release);
        slot.range.end.store(r.end, Ordering::Release);
        slot.bitmap
            .store(Box::into_raw(bitmap) as *mut AtomicU64, Ordering::Release);
        HIGH_WATER.fetch_max(i + 1, Ordering::SeqCst);
        slot.range.state.store(ACTIVE, Ordering::SeqCst);
        Ok(i)
    }

    /// Retires slot `i`, waits for running handlers and returns its bitmap (table lock held).
    fn retire(i: usize) -> Box<[AtomicU64]> {
        let slot = &SLOTS[i];
        let start = slot.range.start.load(Ordering::Acquire);
        let end = slot.range.end.load(Ordering::Acquire);
        slot.range.retired_at.store(now_ns(), Ordering::Release);
        slot.range.state.store(RETIRED, Ordering::SeqCst);
        while IN_HANDLER.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        let ptr = slot.bitmap.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let words = ((end - start) / crate::page_size()).div_ceil(64);
        // SAFETY: `ptr` came from Box::into_raw of a boxed slice of `words` words in `claim`; no
        // handler can reach it any more (slot RETIRED and no handler running).
        unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, words)) }
    }

    fn slot_range(i: usize) -> PageRange {
        PageRange::new(
            SLOTS[i].range.start.load(Ordering::Acquire),
            SLOTS[i].range.end.load(Ordering::Acquire),
        )
    }

    fn scan_impl(&mut self, out: &mut Vec<PageRange>, clear: bool) -> ScanStats {
        out.clear();
        let ps = crate::page_size();
        let mut syscalls = 0;
        // Slots sorted by start so the output is sorted.
        self.slots
            .sort_by_key(|&i| SLOTS[i].range.start.load(Ordering::Acquire));
        for &i in &self.slots {
            let slot = &SLOTS[i];
            let start = slot.range.start.load(Ordering::Acquire);
            let end = slot.range.end.load(Ordering::Acquire);
            let bitmap = slot.bitmap.load(Ordering::Acquire);
            let pages = (end - start) / ps;
            self.scratch.clear();
            for w in 0..pages.div_ceil(64) {
                // SAFETY: the slot is ACTIVE and owned by this tracker; its bitmap has
                // pages.div_ceil(64) words and is only freed by this tracker's untrack/drop.
                let word = unsafe { &*bitmap.add(w) };
                let mut bits = word.load(Ordering::Acquire);
                if bits == 0 {
                    continue;
                }
                if clear {
                    bits = word.swap(0, Ordering::AcqRel);
                }
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    // Length of the run of ones starting at b.
                    let run = (!(bits >> b)).trailing_zeros() as usize;
                    let run = run.min(64 - b);
                    let first = start + (w * 64 + b) * ps;
                    push_coalesced(&mut self.scratch, PageRange::new(first, first + run * ps));
                    bits = if b + run >= 64 {
                        0
                    } else {
                        bits & !(((1u64 << run) - 1) << b)
                    };
                }
            }
            if clear {
                for r in &self.scratch {
                    syscalls += 1;
                    if !protect(r.start, r.len(), libc::PROT_READ) {
                        // Leave the pages writable and report them again next time.
                        let err = std::io::Error::last_os_error();
                        tracing::warn!(
                            range = ?r,
                            "kioku-track: re-protecting written pages failed ({err}); they will \
                             be reported again (raise vm.max_map_count if this is ENOMEM)"
                        );
                        for p in r.pages() {
                            let idx = (p - start) / ps;
                            // SAFETY: as above; idx < pages.
                            unsafe {
                                (*bitmap.add(idx / 64))
                                    .fetch_or(1u64 << (idx % 64), Ordering::AcqRel)
                            };
                        }
                    }
                }
            }
            for r in &self.scratch {
                push_coalesced(out, *r);
            }
        }
        ScanStats {
            ranges: out.len(),
            pages: out.iter().map(|r| r.len() / ps).sum(),
            syscalls,
        }
    }
}

impl PageTracker for MprotectTracker {
    fn backend(&self) -> BackendKind {
        BackendKind::Mprotect
    }

    fn event(&self) -> Event {
        Event::Written
    }

    fn pid(&self) -> i32 {
        self.pid
    }

    fn track(&mut self, range: PageRange) -> Result<(), TrackError> {
        range.check()?;
        let _g = Self::lock();
        for part in self.tracked.missing(range) {
            // Refuse ranges another tracker of this process holds (a write tracker here, or
            // the access sampler's protection probe).
            if overlaps_active(part) || crate::access::protnone::overlaps_active(part) {
                return Err(TrackError::Overlap {
                    start: part.start,
                    end: part.end,
                });
            }
            match crate::maps::covered(self.pid, part, crate::maps::Need::ReadWrite) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(TrackError::NotMapped {
                        start: part.start,
                        end: part.end,
                        pid: self.pid,
                    })
                }
                Err(source) => {
                    return Err(TrackError::Sys {
                        what: "reading /proc/self/maps",
                        source,
                    })
                }
            }
            let i = Self::claim(part)?;
            if !protect(part.start, part.len(), libc::PROT_READ) {
                let err = std::io::Error::last_os_error();
                drop(Self::retire(i));
                SLOTS[i].range.state.store(FREE, Ordering::SeqCst);
                return Err(TrackError::Sys {
                    what: "mprotect(PROT_READ)",
                    source: err,
                });
            }
            self.slots.push(i);
            self.tracked.insert(part);
        }
        Ok(())
    }

    fn untrack(&mut self, range: PageRange) -> Result<(), TrackError> {
        range.check()?;
        let _g = Self::lock();
        let ps = crate::page_size();
        let affected: Vec<usize> = self
            .slots
            .iter()
            .copied()
            .filter(|&i| {
                let r = Self::slot_range(i);
                r.start < range.end && range.start < r.end
            })
            .collect();
        for i in affected {
            let old = Self::slot_range(i);
            // 1. New slots for the parts that stay tracked (handlers may record in old or new).
            let mut keep: Vec<(PageRange, usize)> = Vec::new();
            for part in [
                PageRange::new(old.start, range.start.max(old.start)),
                PageRange::new(range.end.min(old.end), old.end),
            ] {
                if part.is_empty() {
                    continue;
                }
                match Self::claim(part) {
                    Ok(j) => keep.push((part, j)),
                    Err(e) => {
                        // Undo: the old slot still tracks everything.
                        for (_, j) in keep {
                            drop(Self::retire(j));
                            SLOTS[j].range.state.store(FREE, Ordering::SeqCst);
                        }
                        return Err(e);
                    }
                }
            }
            // 2. The removed part becomes writable again.
            let gone = PageRange::new(old.start.max(range.start), old.end.min(range.end));
            if !protect(gone.start, gone.len(), libc::PROT_READ | libc::PROT_WRITE) {
                tracing::debug!(
                    ?gone,
                    "kioku-track: mprotect(RW) on untrack failed (unmapped?)"
                );
            }
            // 3. Retire the old slot, then 4. carry its bits over to the kept parts.
            let bits = Self::retire(i);
            for (part, j) in &keep {
                let bm = SLOTS[*j].bitmap.load(Ordering::Acquire);
                for p in part.pages() {
                    let oi = (p - old.start) / ps;
                    if bits[oi / 64].load(Ordering::Acquire) & (1u64 << (oi % 64)) != 0 {
                        let ni = (p - part.start) / ps;
                        // SAFETY: slot j is ACTIVE and ours; ni < its page count.
                        unsafe { (*bm.add(ni / 64)).fetch_or(1u64 << (ni % 64), Ordering::AcqRel) };
                    }
                }
            }
            self.slots.retain(|&s| s != i);
            self.slots.extend(keep.iter().map(|(_, j)| *j));
        }
        self.tracked.remove(range);
        Ok(())
    }

    fn tracked(&self) -> &[PageRange] {
        self.tracked.as_slice()
    }

    fn scan_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        Ok(self.scan_impl(out, true))
    }

    fn peek_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        Ok(self.scan_impl(out, false))
    }
}

impl Drop for MprotectTracker {
    fn drop(&mut self) {
        let ranges: Vec<PageRange> = self.tracked.as_slice().to_vec();
        for r in ranges {
            let _ = self.untrack(r);
        }
    }
}
