//! Turning a 2 MiB range into a huge page and back: `MADV_HUGEPAGE` + `MADV_COLLAPSE`
//! (synchronous, Linux ≥ 6.1), checked with `PAGEMAP_SCAN`.
//!
//! Measured on Linux 6.18 (THP `madvise`, shmem THP `never`): `MADV_COLLAPSE` collapses
//! anonymous memory with or without `MADV_HUGEPAGE`, and memfd/tmpfs memory even with shmem THP
//! `never`; ranges registered with a userfaultfd are refused (`EINVAL`). A collapse of a range
//! that is only partly populated fills the rest with zeroes: it costs memory, which the policy
//! bounds (`Policy::max_fill`).

use std::io;
use std::time::{Duration, Instant};

use kioku_track::{sys, PageRange, PagemapQuery, Query};

use crate::HugeError;

/// Why a collapse did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollapseFailure {
    /// No huge page could be allocated now (fragmentation, or the pool of another process took
    /// them): `EAGAIN`/`ENOMEM`. Worth retrying later.
    NoHugePage,
    /// The range cannot be collapsed at all (not aligned, not one mapping, registered with a
    /// userfaultfd, locked): `EINVAL`/`EPERM`.
    NotEligible,
    /// The collapse reported success but the range is not mapped by a huge page (the page
    /// tables could not be replaced while the program faulted in the range); retried once.
    NotMapped,
    /// Any other error number.
    Other(i32),
}

impl CollapseFailure {
    fn from_errno(e: i32) -> CollapseFailure {
        match e {
            libc::EAGAIN | libc::ENOMEM => CollapseFailure::NoHugePage,
            libc::EINVAL | libc::EPERM => CollapseFailure::NotEligible,
            other => CollapseFailure::Other(other),
        }
    }
}

/// The size of a PMD huge page (2 MiB on x86_64).
pub fn huge_page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(2 << 20)
    })
}

/// The huge-page-aligned ranges entirely inside `r`.
pub fn huge_ranges(r: PageRange) -> impl Iterator<Item = PageRange> {
    let h = huge_page_size();
    let first = r.start.div_ceil(h) * h;
    let last = r.end / h * h;
    (first..last)
        .step_by(h)
        .map(move |a| PageRange::new(a, a + h))
}

/// Advises `r` (huge-page aligned) for huge pages and collapses it now, then checks that a huge
/// page maps it (one more collapse when not: for shmem the page tables are replaced only when
/// they can be locked). Returns how long the collapses took.
pub fn collapse(r: PageRange) -> Result<Duration, CollapseFailure> {
    // SAFETY: advice on a range of this process; MADV_HUGEPAGE only sets a VMA flag.
    unsafe { libc::madvise(r.start as *mut libc::c_void, r.len(), libc::MADV_HUGEPAGE) };
    let t = Instant::now();
    for _ in 0..2 {
        // SAFETY: MADV_COLLAPSE copies the range's pages into a huge page and maps it in their
        // place, contents unchanged; it does not invalidate Rust references.
        let rc =
            unsafe { libc::madvise(r.start as *mut libc::c_void, r.len(), sys::MADV_COLLAPSE) };
        if rc != 0 {
            let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(CollapseFailure::from_errno(e));
        }
        if huge_mapped_bytes(r).map_or(true, |b| b == r.len()) {
            return Ok(t.elapsed());
        }
    }
    Err(CollapseFailure::NotMapped)
}

/// Stops advising `r` for huge pages (khugepaged will not collapse it again). The huge page
/// itself stays until the kernel splits it (memory pressure, or a partial change of the range).
pub fn stop_advising(r: PageRange) {
    // SAFETY: advice on a range of this process; MADV_NOHUGEPAGE only sets a VMA flag.
    unsafe { libc::madvise(r.start as *mut libc::c_void, r.len(), libc::MADV_NOHUGEPAGE) };
}

/// Bytes of `r` mapped by huge pages (PMD-mapped THP or hugetlb) in the calling process.
pub fn huge_mapped_bytes(r: PageRange) -> Result<usize, HugeError> {
    huge_mapped_bytes_of(std::process::id() as i32, r)
}

/// Bytes of `r` mapped by huge pages in process `pid`.
pub fn huge_mapped_bytes_of(pid: i32, r: PageRange) -> Result<usize, HugeError> {
    let mut q = PagemapQuery::open(pid)?;
    let mut out = Vec::new();
    q.scan(
        r,
        Query {
            all: sys::PAGE_IS_HUGE,
            ..Default::default()
        },
        &mut out,
    )?;
    Ok(out.iter().map(|r| r.len()).sum())
}

/// Pages of `r` (calling process) that hold memory already: resident anonymous pages, or pages
/// of a shared mapping's file that are in the page cache — mapped or not (the refault probe
/// unmaps sampled pages; a collapse reuses them all the same). What a collapse would allocate
/// anew is the rest.
pub fn resident_pages(r: PageRange) -> Result<usize, HugeError> {
    let mut vec = vec![0u8; r.len_pages()];
    // SAFETY: `vec` holds one byte per page of `r`; mincore only writes it.
    let rc = unsafe { libc::mincore(r.start as *mut libc::c_void, r.len(), vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(HugeError::sys("mincore"));
    }
    Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_ranges_are_the_aligned_ones_inside() {
        let h = huge_page_size();
        let v: Vec<PageRange> = huge_ranges(PageRange::new(h - 4096, 3 * h + 4096)).collect();
        assert_eq!(
            v,
            vec![PageRange::new(h, 2 * h), PageRange::new(2 * h, 3 * h)]
        );
        assert_eq!(huge_ranges(PageRange::new(h + 4096, 2 * h)).count(), 0);
    }
}
