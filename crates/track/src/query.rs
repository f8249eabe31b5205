//! Read-only page-category queries with `PAGEMAP_SCAN`: which pages of a range are populated,
//! anonymous, or sit in a mapping that is not write-tracked — what a process monitor needs
//! besides "written since the last scan". Nothing is write-protected or re-armed here.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use crate::{push_coalesced, sys, PageRange, TrackError};

/// Which pages a query returns: every category of `all` must hold (those in `not` must *not*
/// hold), and at least one of `any` (when not empty).
#[derive(Clone, Copy, Debug, Default)]
pub struct Query {
    /// Categories that must all be present.
    pub all: u64,
    /// Categories that must all be absent.
    pub not: u64,
    /// At least one of these (ignored when 0).
    pub any: u64,
}

impl Query {
    /// Pages present in memory or swapped out: pages that hold something other than what a
    /// fresh mapping would show.
    pub fn populated() -> Query {
        Query {
            any: sys::PAGE_IS_PRESENT | sys::PAGE_IS_SWAPPED,
            ..Default::default()
        }
    }

    /// Populated pages that are anonymous (in a private file mapping: copied on write).
    pub fn anonymous() -> Query {
        Query {
            not: sys::PAGE_IS_FILE,
            any: sys::PAGE_IS_PRESENT | sys::PAGE_IS_SWAPPED,
            ..Default::default()
        }
    }

    /// Pages of mappings that are *not* registered for async write-protect (a mapping made
    /// after registration, or moved with mremap, which drops the registration).
    pub fn not_write_tracked() -> Query {
        Query {
            not: sys::PAGE_IS_WPALLOWED,
            ..Default::default()
        }
    }
}

/// `PAGEMAP_SCAN` queries on one process's `/proc/PID/pagemap` (Linux ≥ 6.7).
#[derive(Debug)]
pub struct PagemapQuery {
    pid: i32,
    pagemap: File,
    buf: Vec<sys::PageRegion>,
}

impl PagemapQuery {
    /// Opens `/proc/PID/pagemap` (ptrace-read permission on `pid` needed).
    pub fn open(pid: i32) -> Result<PagemapQuery, TrackError> {
        crate::uffd::probe_pagemap_scan()?;
        let pagemap = open_pagemap(pid)?;
        Ok(PagemapQuery {
            pid,
            pagemap,
            buf: vec![sys::PageRegion::default(); INITIAL_REGIONS],
        })
    }

    /// Appends to `out` the pages of `range` matching `q`, coalesced. Holes (no mapping) match
    /// nothing.
    pub fn scan(
        &mut self,
        range: PageRange,
        q: Query,
        out: &mut Vec<PageRange>,
    ) -> Result<(), TrackError> {
        range.check()?;
        let masks = sys::PmScanArg {
            category_inverted: q.not,
            category_mask: q.all | q.not,
            category_anyof_mask: q.any,
            return_mask: q.all | q.not | q.any,
            ..Default::default()
        };
        walk(&self.pagemap, &mut self.buf, range, masks, out)
            .map(|_| ())
            .map_err(|e| scan_error(e, self.pid, range))
    }
}

/// `/proc/PID/pagemap`, for `PAGEMAP_SCAN`.
pub(crate) fn open_pagemap(pid: i32) -> Result<File, TrackError> {
    File::open(format!("/proc/{pid}/pagemap")).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            TrackError::ProcessGone { pid }
        } else if matches!(
            source.raw_os_error(),
            Some(libc::EACCES) | Some(libc::EPERM)
        ) {
            TrackError::PermissionDenied {
                pid,
                need: "ptrace-read access to read /proc/PID/pagemap (its owner, or root)",
            }
        } else {
            TrackError::Sys {
                what: "opening /proc/PID/pagemap (needs ptrace-read permission)",
                source,
            }
        }
    })
}

/// Output buffer entries at first; the buffer grows ×4 when a walk fills it, up to
/// `MAX_REGIONS`.
pub(crate) const INITIAL_REGIONS: usize = 256;
const MAX_REGIONS: usize = 1 << 16;

/// A failed walk: the errno, or none when the walk made no progress.
pub(crate) struct WalkError(Option<io::Error>, bool);

/// One `PAGEMAP_SCAN` walk of `range` with the flags and category masks of `masks` (other
/// fields are filled in), resuming from `walk_end` while the output buffer fills up and
/// growing it; matching ranges appended to `out`, coalesced. Returns the ioctls made.
pub(crate) fn walk(
    pagemap: &File,
    buf: &mut Vec<sys::PageRegion>,
    range: PageRange,
    masks: sys::PmScanArg,
    out: &mut Vec<PageRange>,
) -> Result<usize, WalkError> {
    let mut start = range.start as u64;
    let end = range.end as u64;
    let mut calls = 0;
    while start < end {
        let mut arg = sys::PmScanArg {
            size: std::mem::size_of::<sys::PmScanArg>() as u64,
            start,
            end,
            vec: buf.as_mut_ptr() as u64,
            vec_len: buf.len() as u64,
            ..masks
        };
        // SAFETY: `arg` is valid; `vec` points at `vec_len` writable PageRegions owned by
        // `buf`, which is not touched until the call returns.
        let rc = unsafe {
            libc::ioctl(
                pagemap.as_raw_fd(),
                sys::PAGEMAP_SCAN as _,
                &mut arg as *mut sys::PmScanArg,
            )
        };
        calls += 1;
        if rc < 0 {
            return Err(WalkError(Some(io::Error::last_os_error()), false));
        }
        let n = rc as usize;
        for reg in &buf[..n.min(buf.len())] {
            push_coalesced(out, PageRange::new(reg.start as usize, reg.end as usize));
        }
        if arg.walk_end >= end {
            break;
        }
        if arg.walk_end <= start {
            // No progress: nothing returned means the address space is gone.
            return Err(WalkError(None, n == 0));
        }
        if n >= buf.len() && buf.len() < MAX_REGIONS {
            let len = (buf.len() * 4).min(MAX_REGIONS);
            buf.resize(len, sys::PageRegion::default());
        }
        start = arg.walk_end;
    }
    Ok(calls)
}

/// A failed walk as a `TrackError` (EPERM: a mapping of `range` is not registered for async
/// write-protect, with `PM_SCAN_CHECK_WPASYNC`).
pub(crate) fn scan_error(e: WalkError, pid: i32, range: PageRange) -> TrackError {
    match e {
        WalkError(Some(e), _) => match e.raw_os_error() {
            Some(libc::EPERM) => TrackError::NotRegistered {
                start: range.start,
                end: range.end,
            },
            Some(libc::ESRCH) => TrackError::ProcessGone { pid },
            _ => TrackError::Sys {
                what: "PAGEMAP_SCAN",
                source: e,
            },
        },
        WalkError(None, true) => TrackError::ProcessGone { pid },
        WalkError(None, false) => TrackError::Sys {
            what: "PAGEMAP_SCAN (walk made no progress)",
            source: io::Error::from_raw_os_error(libc::EIO),
        },
    }
}
