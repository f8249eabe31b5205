//! What one write-protect fault costs a program on this machine, measured once.
//!
//! After a checkpoint's resume the program takes a fault on the first write to each
//! write-tracked page (userfaultfd async write-protect, resolved in the kernel): time the
//! stop itself does not show. The monitor measures the cost of such a fault on its own memory
//! (the same kernel path) so that the stop it reports can include what the program pays after
//! the resume ([`crate::Summary::stop_ms`]).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kioku_track::{BackendKind, PageRange, PageTracker, Tracker};

/// Pages written per measurement.
const PAGES: usize = 512;
/// Measurements; the median is kept.
const ROUNDS: usize = 5;

/// The cost of one write-protect fault, measured on first use (about a millisecond); `None`
/// when the kernel lacks async write-protect (no faults are taken then either).
pub fn wp_fault_cost() -> Option<Duration> {
    static COST: OnceLock<Option<Duration>> = OnceLock::new();
    *COST.get_or_init(|| match measure() {
        Ok(d) => {
            tracing::debug!(
                ns = d.as_nanos() as u64,
                "write-protect fault cost measured"
            );
            Some(d)
        }
        Err(e) => {
            tracing::debug!("write-protect fault cost not measured: {e}");
            None
        }
    })
}

fn measure() -> std::io::Result<Duration> {
    let ps = kioku_track::page_size();
    let len = PAGES * ps;
    // SAFETY: a fresh private anonymous mapping, unmapped below; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let r = (|| {
        let mem = base as *mut u8;
        let touch = |v: u8| {
            for i in 0..PAGES {
                // SAFETY: inside the mapping made above; volatile so the write is not elided.
                unsafe { std::ptr::write_volatile(mem.add(i * ps), v) };
            }
        };
        touch(1);
        let mut tracker = Tracker::builder()
            .backend(BackendKind::UffdPagemapScan)
            .build()
            .map_err(std::io::Error::other)?;
        tracker
            .track(PageRange::new(base as usize, base as usize + len))
            .map_err(std::io::Error::other)?;
        let mut out = Vec::new();
        let mut costs = Vec::with_capacity(ROUNDS);
        for round in 0..ROUNDS {
            // Write-protects every page again (they were all written).
            out.clear();
            tracker.scan_into(&mut out).map_err(std::io::Error::other)?;
            let t = Instant::now();
            touch(round as u8 + 2);
            costs.push(t.elapsed() / PAGES as u32);
        }
        costs.sort();
        Ok(costs[ROUNDS / 2])
    })();
    // SAFETY: the mapping made above, no longer used (the tracker is dropped).
    unsafe { libc::munmap(base, len) };
    r
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_fault_costs_something_but_not_much() {
        let Some(d) = super::wp_fault_cost() else {
            eprintln!("SKIPPED: the kernel lacks userfaultfd async write-protect");
            return;
        };
        // A page write without a fault is a few ns; a fault, a microsecond or two here (a
        // loaded machine may stretch it, never to a millisecond).
        assert!(d > Duration::from_nanos(50), "{d:?}");
        assert!(d < Duration::from_millis(1), "{d:?}");
    }
}
