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

const MAX_REGIONS: usize = 1 << 16;

impl PagemapQuery {
    /// Opens `/proc/PID/pagemap` (ptrace-read permission on `pid` needed).
    pub fn open(pid: i32) -> Result<PagemapQuery, TrackError> {
        crate::uffd::probe_pagemap_scan()?;
        let pagemap = File::open(format!("/proc/{pid}/pagemap")).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                TrackError::ProcessGone { pid }
            } else {
                TrackError::Sys {
                    what: "opening /proc/PID/pagemap (needs ptrace-read permission)",
                    source,
                }
            }
        })?;
        Ok(PagemapQuery {
            pid,
            pagemap,
            buf: vec![sys::PageRegion::default(); 256],
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
        let mut start = range.start as u64;
        let end = range.end as u64;
        while start < end {
            let mut arg = sys::PmScanArg {
                size: std::mem::size_of::<sys::PmScanArg>() as u64,
                flags: 0,
                start,
                end,
                vec: self.buf.as_mut_ptr() as u64,
                vec_len: self.buf.len() as u64,
                category_inverted: q.not,
                category_mask: q.all | q.not,
                category_anyof_mask: q.any,
                return_mask: q.all | q.not | q.any,
                ..Default::default()
            };
            // SAFETY: `arg` is valid; `vec` points at `vec_len` writable PageRegions owned by
            // `self.buf`, which is not touched until the call returns.
            let rc = unsafe {
                libc::ioctl(
                    self.pagemap.as_raw_fd(),
                    sys::PAGEMAP_SCAN as _,
                    &mut arg as *mut sys::PmScanArg,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::ESRCH) => TrackError::ProcessGone { pid: self.pid },
                    _ => TrackError::Sys {
                        what: "PAGEMAP_SCAN",
                        source: e,
                    },
                });
            }
            let n = rc as usize;
            for reg in &self.buf[..n.min(self.buf.len())] {
                push_coalesced(out, PageRange::new(reg.start as usize, reg.end as usize));
            }
            // Done, or no progress (nothing more to walk).
            if arg.walk_end >= end || arg.walk_end <= start {
                break;
            }
            if n >= self.buf.len() && self.buf.len() < MAX_REGIONS {
                let len = (self.buf.len() * 4).min(MAX_REGIONS);
                self.buf.resize(len, sys::PageRegion::default());
            }
            start = arg.walk_end;
        }
        Ok(())
    }
}
