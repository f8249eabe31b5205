//! The protection probe: make a sampled page inaccessible and catch the first access.
//!
//! `mprotect(PROT_NONE)` on a run of sampled pages; the first read or write of one of them
//! raises SIGSEGV, whose handler (the one the write tracker installs, which passes faults it
//! does not own to [`handle_fault`]) gives the page its protection back and records it in a
//! lock-free bitmap. Works on any memory of the calling process, private or shared — the NUMA
//! balancer's hinting faults, done from user space. A fault costs about 10 µs (signal delivery
//! and one `mprotect`), arming a run about 5 µs; every armed run splits a mapping, bounded by
//! `vm.max_map_count`.
//!
//! All probes of a process share one table of [`MAX_SAMPLED_RANGES`] slots read by the handler
//! with atomics only (slot life cycle and fault search: [`crate::segv`]).
//!
//! Ordering that makes every access of an armed page visible to the next collect:
//! * handler: for a page whose *armed* bit is set: restore its protection, set its *touched*
//!   bit, then clear the armed bit; for a page not armed (any more) whose range allows the
//!   access: retry (its disarm restored the protection while the signal was on its way);
//!   otherwise the fault is the program's own and is passed on;
//! * disarm: restore the protection of the pages still armed, then clear their armed bits;
//!   collect then swaps the touched bits to zero.
//!
//! A fault that sets its touched bit after the collect read the touched word is counted by the
//! next collect (its page was observed, the access falls into the next period).

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::maps;
use crate::segv::{
    self, now_ns, protect, SlotRange, ACTIVE, FREE, RESERVED, RETIRED, TOMBSTONE_NS,
};
use crate::{PageRange, TrackError};

/// Ranges the protection probe can track in one process (all probes together).
pub const MAX_SAMPLED_RANGES: usize = 256;
struct Slot {
    range: SlotRange,
    /// The protection of the range (restored on fault and disarm).
    prot: AtomicUsize,
    /// Two bitmaps of `words` words each: armed, then touched.
    bits: AtomicPtr<AtomicU64>,
    words: AtomicUsize,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            range: SlotRange::new(),
            prot: AtomicUsize::new(0),
            bits: AtomicPtr::new(std::ptr::null_mut()),
            words: AtomicUsize::new(0),
        }
    }
}

impl AsRef<SlotRange> for Slot {
    fn as_ref(&self) -> &SlotRange {
        &self.range
    }
}

static SLOTS: [Slot; MAX_SAMPLED_RANGES] = [const { Slot::new() }; MAX_SAMPLED_RANGES];
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// Nanoseconds spent in the handler on sampled faults, all probes together: most of what a
/// fault costs the program under load (its `mprotect` waits for the mm's lock and for the
/// TLB shootdown of the other CPUs, which a busy host delays).
static HANDLER_NS: AtomicU64 = AtomicU64::new(0);
/// Serialises changes of the table (never taken in the handler).
static TABLE_LOCK: Mutex<()> = Mutex::new(());

/// Word `w` of bitmap `which` (0 armed, 1 touched) of a slot's bits.
///
/// # Safety
/// `bits` is the slot's live bitmap pair of `words` words each, and `w < words`.
unsafe fn word<'a>(bits: *mut AtomicU64, words: usize, which: usize, w: usize) -> &'a AtomicU64 {
    // SAFETY: by the caller's contract the index is inside the allocation.
    unsafe { &*bits.add(which * words + w) }
}

/// The kind of access that faulted, from the x86 page-fault error code in the signal context.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
    Fetch,
}

fn access_kind(ctx: *mut libc::c_void) -> Access {
    if ctx.is_null() {
        return Access::Read;
    }
    // SAFETY: for SA_SIGINFO handlers the third argument is the interrupted ucontext.
    let err =
        unsafe { (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize] };
    // Bit 1: write access; bit 4: instruction fetch.
    if err & 2 != 0 {
        Access::Write
    } else if err & 16 != 0 {
        Access::Fetch
    } else {
        Access::Read
    }
}

/// Called by the process's SIGSEGV handler for faults the write tracker does not own. Returns
/// true when the fault was in a sampled range (resolved, or to be retried).
pub(crate) fn handle_fault(info: *mut libc::siginfo_t, ctx: *mut libc::c_void) -> bool {
    let Some(addr) = segv::fault_addr(info) else {
        return false;
    };
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    let t0 = now_ns();
    let r = handle(addr, access_kind(ctx));
    if r {
        HANDLER_NS.fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
    }
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Nanoseconds the program spent so far in the handler on sampled faults (all probes).
pub(crate) fn handler_ns() -> u64 {
    HANDLER_NS.load(Ordering::Relaxed)
}

fn handle(addr: usize, access: Access) -> bool {
    let ps = crate::mprotect::page_size_for_handler();
    let high = HIGH_WATER.load(Ordering::SeqCst).min(MAX_SAMPLED_RANGES);
    segv::resolve(&SLOTS[..high], addr, |slot, start, _end| {
        let bits = slot.bits.load(Ordering::Acquire);
        let words = slot.words.load(Ordering::Acquire);
        if bits.is_null() {
            return None;
        }
        let page = addr & !(ps - 1);
        let idx = (page - start) / ps;
        let bit = 1u64 << (idx % 64);
        // SAFETY: idx < pages of the slot, so idx / 64 < words; the bitmap lives while the slot
        // is ACTIVE or IN_HANDLER > 0.
        let (armed, touched) = unsafe {
            (
                word(bits, words, 0, idx / 64),
                word(bits, words, 1, idx / 64),
            )
        };
        let prot = slot.prot.load(Ordering::Acquire) as libc::c_int;
        if armed.load(Ordering::Acquire) & bit == 0 {
            // Not armed (any more): a disarm restores the protection before it clears the bit,
            // so a fault raised while the page was armed and handled only now succeeds when
            // retried — if the range's own protection allows the access. Otherwise it is the
            // program's own fault, passed on.
            let needed = match access {
                Access::Read => libc::PROT_READ,
                Access::Write => libc::PROT_WRITE,
                Access::Fetch => libc::PROT_EXEC,
            };
            return Some(prot & needed != 0);
        }
        if !protect(page, ps, prot) {
            crate::mprotect::write_stderr(
                b"kioku-track: cannot give a sampled page its protection back; aborting\n",
            );
            // SAFETY: abort is async-signal-safe.
            unsafe { libc::abort() };
        }
        touched.fetch_or(bit, Ordering::AcqRel);
        armed.fetch_and(!bit, Ordering::AcqRel);
        Some(true)
    })
}

/// Whether `r` overlaps a range of any protection probe of this process.
pub(crate) fn overlaps_active(r: PageRange) -> bool {
    segv::overlaps_active(&SLOTS, r)
}

/// The sampling probe based on `mprotect(PROT_NONE)`; calling process only.
#[derive(Debug, Default)]
pub(crate) struct ProtNoneProbe {
    /// Slot indices owned by this probe.
    slots: Vec<usize>,
}

impl ProtNoneProbe {
    pub(crate) fn new() -> Result<ProtNoneProbe, TrackError> {
        crate::mprotect::install_handler()?;
        Ok(ProtNoneProbe::default())
    }

    fn lock() -> std::sync::MutexGuard<'static, ()> {
        TABLE_LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Our slot holding `addr`.
    fn slot_of(&self, addr: usize) -> Option<usize> {
        self.slots.iter().copied().find(|&i| {
            let s = &SLOTS[i];
            s.range.start.load(Ordering::Acquire) <= addr
                && addr < s.range.end.load(Ordering::Acquire)
        })
    }

    /// Starts sampling in `r` (parts already covered by our slots are accepted as they are).
    pub(crate) fn track(&mut self, r: PageRange) -> Result<(), TrackError> {
        let _g = Self::lock();
        let pid = std::process::id() as i32;
        let ps = crate::page_size();
        // Parts not covered by a slot of ours need one.
        let mut cur = r.start;
        let mut parts = Vec::new();
        while cur < r.end {
            if let Some(i) = self.slot_of(cur) {
                cur = SLOTS[i].range.end.load(Ordering::Acquire).min(r.end);
                continue;
            }
            let mut next = r.end;
            for &i in &self.slots {
                let s = SLOTS[i].range.start.load(Ordering::Acquire);
                if s > cur && s < next {
                    next = s;
                }
            }
            parts.push(PageRange::new(cur, next));
            cur = next;
        }
        for part in parts {
            if crate::mprotect::overlaps_active(part) || overlaps_active(part) {
                return Err(TrackError::Overlap {
                    start: part.start,
                    end: part.end,
                });
            }
            let vmas = match maps::vmas(pid, part) {
                Ok(Some(v)) => v,
                Ok(None) => {
                    return Err(TrackError::NotMapped {
                        start: part.start,
                        end: part.end,
                        pid,
                    })
                }
                Err(source) => {
                    return Err(TrackError::Sys {
                        what: "reading /proc/self/maps",
                        source,
                    })
                }
            };
            let prot = vmas[0].prot();
            if prot & libc::PROT_READ == 0 || vmas.iter().any(|v| v.prot() != prot) {
                return Err(TrackError::MixedProtection {
                    start: part.start,
                    end: part.end,
                });
            }
            let i = claim(part, prot, ps)?;
            self.slots.push(i);
        }
        Ok(())
    }

    /// Disarms the armed pages of `r`; frees the slots `r` covers entirely.
    pub(crate) fn untrack(&mut self, r: PageRange) {
        let _g = Self::lock();
        let ps = crate::page_size();
        let mut freed = Vec::new();
        for &i in &self.slots {
            let s = &SLOTS[i];
            let (start, end) = (
                s.range.start.load(Ordering::Acquire),
                s.range.end.load(Ordering::Acquire),
            );
            let (a, b) = (start.max(r.start), end.min(r.end));
            if a >= b {
                continue;
            }
            disarm_slot(i, PageRange::new(a, b), ps);
            if a == start && b == end {
                freed.push(i);
            }
        }
        for i in freed {
            retire(i);
            self.slots.retain(|&s| s != i);
        }
    }

    /// Makes the pages of `runs` inaccessible; appends the runs armed to `armed`.
    pub(crate) fn arm(&mut self, runs: &[PageRange], armed: &mut Vec<PageRange>) -> usize {
        let ps = crate::page_size();
        let mut calls = 0;
        for r in runs {
            let Some(i) = self.slot_of(r.start) else {
                continue;
            };
            let s = &SLOTS[i];
            let start = s.range.start.load(Ordering::Acquire);
            let end = s.range.end.load(Ordering::Acquire);
            let r = PageRange::new(r.start, r.end.min(end));
            let bits = s.bits.load(Ordering::Acquire);
            let words = s.words.load(Ordering::Acquire);
            for p in r.pages() {
                let idx = (p - start) / ps;
                // SAFETY: the slot is ACTIVE and ours; idx / 64 < words.
                unsafe { word(bits, words, 0, idx / 64) }
                    .fetch_or(1u64 << (idx % 64), Ordering::AcqRel);
            }
            calls += 1;
            if !protect(r.start, r.len(), libc::PROT_NONE) {
                let err = std::io::Error::last_os_error();
                // Typically ENOMEM: vm.max_map_count reached. This run is not sampled.
                disarm_slot(i, r, ps);
                tracing::debug!(run = ?r, "kioku-track: mprotect(PROT_NONE) failed: {err}");
                continue;
            }
            armed.push(r);
        }
        calls
    }

    /// Appends the pages of `runs` accessed since `arm`; with `disarm`, restores the rest.
    pub(crate) fn collect(
        &mut self,
        runs: &[PageRange],
        accessed: &mut Vec<usize>,
        disarm: bool,
    ) -> usize {
        let ps = crate::page_size();
        let mut calls = 0;
        for r in runs {
            let Some(i) = self.slot_of(r.start) else {
                continue;
            };
            if disarm {
                calls += disarm_slot(i, *r, ps);
            }
            let s = &SLOTS[i];
            let start = s.range.start.load(Ordering::Acquire);
            let bits = s.bits.load(Ordering::Acquire);
            let words = s.words.load(Ordering::Acquire);
            for p in r.pages() {
                let idx = (p - start) / ps;
                let bit = 1u64 << (idx % 64);
                // SAFETY: the slot is ACTIVE and ours; idx / 64 < words.
                let touched_w = unsafe { word(bits, words, 1, idx / 64) };
                let touched = if disarm {
                    touched_w.fetch_and(!bit, Ordering::AcqRel) & bit != 0
                } else {
                    touched_w.load(Ordering::Acquire) & bit != 0
                };
                if touched {
                    accessed.push(p);
                }
            }
        }
        calls
    }
}

impl Drop for ProtNoneProbe {
    fn drop(&mut self) {
        let _g = Self::lock();
        let ps = crate::page_size();
        for &i in &self.slots {
            let s = &SLOTS[i];
            let r = PageRange::new(
                s.range.start.load(Ordering::Acquire),
                s.range.end.load(Ordering::Acquire),
            );
            disarm_slot(i, r, ps);
            retire(i);
        }
    }
}

/// Claims a slot for `r` and publishes it ACTIVE (table lock held).
fn claim(r: PageRange, prot: libc::c_int, ps: usize) -> Result<usize, TrackError> {
    let now = now_ns();
    let pick = (0..MAX_SAMPLED_RANGES)
        .find(|&i| SLOTS[i].range.state.load(Ordering::SeqCst) == FREE)
        .or_else(|| {
            (0..MAX_SAMPLED_RANGES).find(|&i| {
                SLOTS[i].range.state.load(Ordering::SeqCst) == RETIRED
                    && now.saturating_sub(SLOTS[i].range.retired_at.load(Ordering::Acquire))
                        >= TOMBSTONE_NS
            })
        });
    let Some(i) = pick else {
        return Err(TrackError::TooManyRanges {
            max: MAX_SAMPLED_RANGES,
        });
    };
    let slot = &SLOTS[i];
    slot.range.state.store(RESERVED, Ordering::SeqCst);
    let words = (r.len() / ps).div_ceil(64);
    let bits: Box<[AtomicU64]> = (0..2 * words).map(|_| AtomicU64::new(0)).collect();
    slot.range.start.store(r.start, Ordering::Release);
    slot.range.end.store(r.end, Ordering::Release);
    slot.prot.store(prot as usize, Ordering::Release);
    slot.words.store(words, Ordering::Release);
    slot.bits
        .store(Box::into_raw(bits) as *mut AtomicU64, Ordering::Release);
    HIGH_WATER.fetch_max(i + 1, Ordering::SeqCst);
    slot.range.state.store(ACTIVE, Ordering::SeqCst);
    Ok(i)
}

/// Restores the protection of the armed pages of `r` in slot `i`, then clears their armed bits
/// (in this order, so that a fault in between still finds its page armed). Returns the
/// `mprotect` calls made.
fn disarm_slot(i: usize, r: PageRange, ps: usize) -> usize {
    let s = &SLOTS[i];
    let start = s.range.start.load(Ordering::Acquire);
    let bits = s.bits.load(Ordering::Acquire);
    let words = s.words.load(Ordering::Acquire);
    let prot = s.prot.load(Ordering::Acquire) as libc::c_int;
    let armed = |p: usize| {
        let idx = (p - start) / ps;
        // SAFETY: the slot is live and ours; idx / 64 < words.
        let w = unsafe { word(bits, words, 0, idx / 64) };
        (w, 1u64 << (idx % 64))
    };
    let mut calls = 0;
    let mut run: Option<PageRange> = None;
    let mut flush = |run: &mut Option<PageRange>| {
        if let Some(c) = run.take() {
            calls += 1;
            protect(c.start, c.len(), prot);
        }
    };
    for p in r.pages() {
        let (w, bit) = armed(p);
        if w.load(Ordering::Acquire) & bit != 0 {
            match &mut run {
                Some(c) if c.end == p => c.end = p + ps,
                _ => {
                    flush(&mut run);
                    run = Some(PageRange::new(p, p + ps));
                }
            }
        }
    }
    flush(&mut run);
    for p in r.pages() {
        let (w, bit) = armed(p);
        w.fetch_and(!bit, Ordering::AcqRel);
    }
    calls
}

/// Retires slot `i`, waits for running handlers and frees its bitmaps (table lock held).
fn retire(i: usize) {
    let slot = &SLOTS[i];
    slot.range.retired_at.store(now_ns(), Ordering::Release);
    slot.range.state.store(RETIRED, Ordering::SeqCst);
    while IN_HANDLER.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
    let ptr = slot.bits.swap(std::ptr::null_mut(), Ordering::AcqRel);
    let words = slot.words.load(Ordering::Acquire);
    if !ptr.is_null() {
        // SAFETY: `ptr` came from Box::into_raw of a boxed slice of 2 * words words in `claim`;
        // no handler can reach it any more (slot RETIRED, none running).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, 2 * words)) });
    }
}
