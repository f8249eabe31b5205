//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use kioku_track::{page_size, BackendKind, PageRange, Tracker};

/// The backends that can track the calling process here. The userfaultfd backend is skipped
/// LOUDLY when the kernel or permissions lack it.
pub fn self_backends() -> Vec<BackendKind> {
    let mut v = Vec::new();
    match kioku_track::probe().uffd {
        Ok(_) => v.push(BackendKind::UffdPagemapScan),
        Err(e) => eprintln!("!!!!! SKIPPING the UffdPagemapScan backend in this test: {e} !!!!!"),
    }
    v.push(BackendKind::Mprotect);
    v
}

/// Whether the userfaultfd backend works here; prints a loud skip notice when not.
pub fn uffd_available(test: &str) -> bool {
    match kioku_track::probe().uffd {
        Ok(_) => true,
        Err(e) => {
            eprintln!("!!!!! SKIPPING {test}: userfaultfd backend unavailable: {e} !!!!!");
            false
        }
    }
}

pub fn tracker(kind: BackendKind) -> Tracker {
    let t = Tracker::builder()
        .backend(kind)
        .build()
        .expect("build tracker");
    assert_eq!(kioku_track::PageTracker::backend(&t), kind);
    t
}

/// An mmap'd region unmapped on drop.
pub struct Mapping {
    pub addr: usize,
    pub len: usize,
    raw: (usize, usize),
}

impl Mapping {
    /// Anonymous private read-write memory, `align`-aligned (1 for none).
    pub fn anon(len: usize, align: usize, noreserve: bool) -> Mapping {
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | if noreserve { libc::MAP_NORESERVE } else { 0 };
        Self::map(len, align, flags, -1)
    }

    /// A shared mapping of `fd` (length `len`, offset 0).
    pub fn shared(fd: &impl AsRawFd, len: usize) -> Mapping {
        Self::map(len, 1, libc::MAP_SHARED, fd.as_raw_fd())
    }

    fn map(len: usize, align: usize, flags: libc::c_int, fd: i32) -> Mapping {
        let extra = if align > 1 { align } else { 0 };
        let total = if fd >= 0 { len } else { len + extra };
        // SAFETY: a fresh mapping; only addresses are used.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let raw = p as usize;
        let addr = if align > 1 && fd < 0 {
            (raw + align - 1) & !(align - 1)
        } else {
            raw
        };
        Mapping {
            addr,
            len,
            raw: (raw, total),
        }
    }

    pub fn range(&self) -> PageRange {
        PageRange::new(self.addr, self.addr + self.len)
    }

    pub fn page(&self, i: usize) -> usize {
        assert!(i * page_size() < self.len);
        self.addr + i * page_size()
    }

    pub fn pages(&self) -> usize {
        self.len / page_size()
    }

    pub fn write(&self, i: usize, v: u8) {
        // SAFETY: page i lies inside the mapping.
        unsafe { std::ptr::write_volatile((self.page(i) + 17) as *mut u8, v) };
    }

    pub fn read(&self, i: usize) -> u8 {
        // SAFETY: page i lies inside the mapping.
        unsafe { std::ptr::read_volatile((self.page(i) + 17) as *const u8) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.raw.0 as *mut libc::c_void, self.raw.1) };
    }
}

/// A memfd of `len` bytes.
pub fn memfd(len: usize) -> OwnedFd {
    // SAFETY: memfd_create with a static name.
    let fd = unsafe { libc::memfd_create(c"kioku-track-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fd, owned.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing our own memfd.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len as i64) }, 0);
    fd
}

/// Expands ranges to the set of page addresses, checking sortedness and coalescing.
pub fn page_set(ranges: &[PageRange]) -> BTreeSet<usize> {
    for w in ranges.windows(2) {
        assert!(
            w[0].end < w[1].start,
            "output not sorted and coalesced: {:x?}",
            ranges
        );
    }
    ranges.iter().flat_map(|r| r.pages()).collect()
}

/// Page addresses of indices in `m`.
pub fn expect_set(m: &Mapping, idx: impl IntoIterator<Item = usize>) -> BTreeSet<usize> {
    idx.into_iter().map(|i| m.page(i)).collect()
}
