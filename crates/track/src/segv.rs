//! What the two users of the process's SIGSEGV handler share: the mprotect write tracker
//! (`mprotect`: read-only pages, a write faults) and the access sampler's protection probe
//! (`access::protnone`: inaccessible pages, any access faults).
//!
//! Each keeps a table of ranges whose slots the handler reads with atomics only. Slot life
//! cycle: FREE → RESERVED (being filled) → ACTIVE (the handler resolves faults in it) →
//! RETIRED (a tombstone: a fault that raced with `untrack` is retried for [`TOMBSTONE_NS`]) →
//! FREE. [`SlotRange`] is the part of a slot the handler finds a fault by, [`resolve`] the
//! search; what a fault does to the page and its bits is each user's own.
//!
//! Everything here may run in the signal handler: atomics, `clock_gettime`, `mprotect`.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::PageRange;

pub(crate) const FREE: u8 = 0;
pub(crate) const RESERVED: u8 = 1;
pub(crate) const ACTIVE: u8 = 2;
pub(crate) const RETIRED: u8 = 3;

/// How long a fault in a just-retired range is retried instead of passed on.
pub(crate) const TOMBSTONE_NS: u64 = 1_000_000_000;

/// `si_code` of a fault on a mapped page without the needed permission (asm-generic/siginfo.h).
const SEGV_ACCERR: libc::c_int = 2;

/// The state and range of a slot, and when it retired.
pub(crate) struct SlotRange {
    pub(crate) state: AtomicU8,
    pub(crate) start: AtomicUsize,
    pub(crate) end: AtomicUsize,
    pub(crate) retired_at: AtomicU64,
}

impl SlotRange {
    pub(crate) const fn new() -> SlotRange {
        SlotRange {
            state: AtomicU8::new(FREE),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            retired_at: AtomicU64::new(0),
        }
    }

    /// Whether the slot is ACTIVE and its range overlaps `r`.
    fn active_overlap(&self, r: PageRange) -> bool {
        self.state.load(Ordering::SeqCst) == ACTIVE
            && self.start.load(Ordering::Acquire) < r.end
            && r.start < self.end.load(Ordering::Acquire)
    }
}

/// The address of a fault the handler may own: a fault on a mapped page without the needed
/// permission (`SEGV_ACCERR`); `None` for any other (or a missing siginfo).
pub(crate) fn fault_addr(info: *mut libc::siginfo_t) -> Option<usize> {
    if info.is_null() {
        return None;
    }
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    (code == SEGV_ACCERR).then_some(addr)
}

/// Offers the fault at `addr` to each ACTIVE slot of `slots` whose range holds it:
/// `on_active(slot, start, end)` answers `Some(handled)` to decide, or `None` to look on.
/// Undecided, the fault is retried (true) if a slot holding it retired less than
/// [`TOMBSTONE_NS`] ago — it raced with an `untrack` — and passed on (false) otherwise.
pub(crate) fn resolve<S: AsRef<SlotRange>>(
    slots: &[S],
    addr: usize,
    mut on_active: impl FnMut(&S, usize, usize) -> Option<bool>,
) -> bool {
    let mut tombstone = false;
    for slot in slots {
        let r = slot.as_ref();
        let state = r.state.load(Ordering::SeqCst);
        if state != ACTIVE && state != RETIRED {
            continue;
        }
        let start = r.start.load(Ordering::Acquire);
        let end = r.end.load(Ordering::Acquire);
        if addr < start || addr >= end {
            continue;
        }
        if state == RETIRED {
            let at = r.retired_at.load(Ordering::Acquire);
            tombstone |= now_ns().saturating_sub(at) < TOMBSTONE_NS;
            continue;
        }
        if let Some(handled) = on_active(slot, start, end) {
            return handled;
        }
    }
    tombstone
}

/// Whether `r` overlaps the range of an ACTIVE slot of `slots`.
pub(crate) fn overlaps_active<S: AsRef<SlotRange>>(slots: &[S], r: PageRange) -> bool {
    slots.iter().any(|s| s.as_ref().active_overlap(r))
}

/// Monotonic nanoseconds (async-signal-safe).
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into `ts`; it is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `mprotect` of pages a tracker or probe holds; whether it succeeded.
pub(crate) fn protect(start: usize, len: usize, prot: libc::c_int) -> bool {
    // SAFETY: changes the protection of pages the caller tracks; no Rust reference points into
    // them (the program's own accesses fault and are resolved by the handler).
    unsafe { libc::mprotect(start as *mut libc::c_void, len, prot) == 0 }
}
