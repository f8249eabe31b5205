//! The userfaultfd async write-protect + `PAGEMAP_SCAN` backend.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::query::{open_pagemap, scan_error, walk, INITIAL_REGIONS};
use crate::rangeset::RangeSet;
use crate::sys;
use crate::uffd;
use crate::{BackendKind, Event, PageRange, PageTracker, ScanStats, TrackError};

/// Tracks written pages with userfaultfd async write-protect and `PAGEMAP_SCAN`.
#[derive(Debug)]
pub struct UffdTracker {
    uffd: OwnedFd,
    pagemap: File,
    pid: i32,
    remote: bool,
    features: u64,
    tracked: RangeSet,
    buf: Vec<sys::PageRegion>,
}

impl UffdTracker {
    /// A tracker for the calling process with a userfaultfd of its own.
    pub fn new() -> Result<UffdTracker, TrackError> {
        let support = uffd::support()?;
        let (fd, _) = uffd::create()?;
        let want = uffd::REQUIRED_FEATURES | (uffd::OPTIONAL_FEATURES & support.features);
        uffd::handshake(fd.as_raw_fd(), want).map_err(|source| TrackError::Sys {
            what: "UFFDIO_API handshake",
            source,
        })?;
        let pagemap = File::open("/proc/self/pagemap").map_err(|source| TrackError::Sys {
            what: "opening /proc/self/pagemap",
            source,
        })?;
        Ok(UffdTracker {
            uffd: fd,
            pagemap,
            pid: std::process::id() as i32,
            remote: false,
            features: want,
            tracked: RangeSet::default(),
            buf: vec![sys::PageRegion::default(); INITIAL_REGIONS],
        })
    }

    /// A tracker for process `pid` through `uffd`, a userfaultfd created in that process.
    pub fn for_process(pid: i32, uffd: OwnedFd) -> Result<UffdTracker, TrackError> {
        uffd::pagemap_scan_supported()?;
        let features = uffd::ensure_wp_async(uffd.as_raw_fd())?;
        let pagemap = open_pagemap(pid)?;
        Ok(UffdTracker {
            uffd,
            pagemap,
            pid,
            remote: pid != std::process::id() as i32,
            features,
            tracked: RangeSet::default(),
            buf: vec![sys::PageRegion::default(); INITIAL_REGIONS],
        })
    }

    /// The userfaultfd features enabled.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// The userfaultfd the tracker registers with (to register whole mappings around the
    /// tracked ranges: registering part of a mapping splits it).
    pub fn userfaultfd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.uffd.as_fd()
    }

    fn register_part(&mut self, r: PageRange) -> Result<(), TrackError> {
        let fd = self.uffd.as_raw_fd();
        // UFFDIO_REGISTER accepts ranges with holes; refuse them here so that every tracked page
        // really is write-tracked.
        match crate::maps::covered(self.pid, r, crate::maps::Need::Mapped) {
            Ok(true) => {}
            Ok(false) => {
                return Err(TrackError::NotMapped {
                    start: r.start,
                    end: r.end,
                    pid: self.pid,
                })
            }
            Err(_) if !std::path::Path::new(&format!("/proc/{}", self.pid)).exists() => {
                return Err(TrackError::ProcessGone { pid: self.pid })
            }
            Err(source) => {
                return Err(TrackError::Sys {
                    what: "reading /proc/PID/maps",
                    source,
                })
            }
        }
        if let Err(e) = uffd::register_wp(fd, r) {
            return Err(self.register_error(r, e));
        }
        if let Err(source) = uffd::write_protect(fd, r, true) {
            let _ = uffd::unregister(fd, r);
            return Err(TrackError::Sys {
                what: "UFFDIO_WRITEPROTECT",
                source,
            });
        }
        if self.remote {
            // The registration acted on the mm the uffd was created in. If that is not the
            // target's, the target's pages are not async-WP and a checking peek fails.
            let mut tmp = Vec::new();
            match self.scan_range(r, sys::PM_SCAN_CHECK_WPASYNC, &mut tmp, &mut 0) {
                Ok(()) => {}
                Err(TrackError::NotRegistered { .. }) => {
                    let _ = uffd::unregister(fd, r);
                    return Err(TrackError::WrongMm { pid: self.pid });
                }
                Err(e) => {
                    let _ = uffd::unregister(fd, r);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn register_error(&self, r: PageRange, e: io::Error) -> TrackError {
        match e.raw_os_error() {
            Some(libc::EBUSY) => TrackError::Busy {
                start: r.start,
                end: r.end,
            },
            Some(libc::ESRCH) => TrackError::ProcessGone { pid: self.pid },
            Some(libc::EINVAL) | Some(libc::ENOMEM) | Some(libc::EFAULT) => {
                match crate::maps::covered(self.pid, r, crate::maps::Need::Mapped) {
                    Ok(false) => TrackError::NotMapped {
                        start: r.start,
                        end: r.end,
                        pid: self.pid,
                    },
                    Err(_) if !std::path::Path::new(&format!("/proc/{}", self.pid)).exists() => {
                        TrackError::ProcessGone { pid: self.pid }
                    }
                    _ => TrackError::Sys {
                        what: "UFFDIO_REGISTER (mapping type not supported by uffd-wp?)",
                        source: e,
                    },
                }
            }
            _ => TrackError::Sys {
                what: "UFFDIO_REGISTER",
                source: e,
            },
        }
    }

    /// One tracked range: written pages (re-armed with `PM_SCAN_WP_MATCHING` in `flags`).
    fn scan_range(
        &mut self,
        r: PageRange,
        flags: u64,
        out: &mut Vec<PageRange>,
        syscalls: &mut usize,
    ) -> Result<(), TrackError> {
        let masks = sys::PmScanArg {
            flags,
            category_mask: sys::PAGE_IS_WRITTEN,
            return_mask: sys::PAGE_IS_WRITTEN,
            ..Default::default()
        };
        *syscalls += walk(&self.pagemap, &mut self.buf, r, masks, out)
            .map_err(|e| scan_error(e, self.pid, r))?;
        Ok(())
    }

    /// A scan of a dead address space (process exited, or exec'd a new image) silently finds
    /// nothing, so after each scan of another process read one pagemap entry: reading returns 0
    /// bytes once the mm has no users.
    fn check_alive(&self, page_index: usize) -> Result<(), TrackError> {
        let mut entry = [0u8; 8];
        // SAFETY: reading 8 bytes into a local buffer.
        let n = unsafe {
            libc::pread(
                self.pagemap.as_raw_fd(),
                entry.as_mut_ptr().cast(),
                entry.len(),
                (page_index * 8) as libc::off_t,
            )
        };
        if n == 0 {
            return Err(TrackError::ProcessGone { pid: self.pid });
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => TrackError::ProcessGone { pid: self.pid },
                _ => TrackError::Sys {
                    what: "reading /proc/PID/pagemap",
                    source: e,
                },
            });
        }
        Ok(())
    }

    fn scan_all(&mut self, flags: u64, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        out.clear();
        let mut syscalls = 0;
        let mut i = 0;
        while i < self.tracked.as_slice().len() {
            let r = self.tracked.as_slice()[i];
            self.scan_range(r, flags, out, &mut syscalls)?;
            i += 1;
        }
        let ps = crate::page_size();
        if self.remote {
            if let Some(first) = self.tracked.as_slice().first() {
                syscalls += 1;
                self.check_alive(first.start / ps)?;
            }
        }
        Ok(ScanStats {
            ranges: out.len(),
            pages: out.iter().map(|r| r.len() / ps).sum(),
            syscalls,
        })
    }
}

impl PageTracker for UffdTracker {
    fn backend(&self) -> BackendKind {
        BackendKind::UffdPagemapScan
    }

    fn event(&self) -> Event {
        Event::Written
    }

    fn pid(&self) -> i32 {
        self.pid
    }

    fn track(&mut self, range: PageRange) -> Result<(), TrackError> {
        range.check()?;
        for part in self.tracked.missing(range) {
            self.register_part(part)?;
            self.tracked.insert(part);
        }
        Ok(())
    }

    fn untrack(&mut self, range: PageRange) -> Result<(), TrackError> {
        range.check()?;
        for part in self.tracked.present(range) {
            if let Err(e) = uffd::unregister(self.uffd.as_raw_fd(), part) {
                // The mapping may already be gone; it is untracked either way.
                tracing::debug!(?part, "kioku-track: UFFDIO_UNREGISTER failed: {e}");
            }
            self.tracked.remove(part);
        }
        Ok(())
    }

    fn tracked(&self) -> &[PageRange] {
        self.tracked.as_slice()
    }

    fn scan_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        self.scan_all(sys::PM_SCAN_WP_MATCHING | sys::PM_SCAN_CHECK_WPASYNC, out)
    }

    fn peek_into(&mut self, out: &mut Vec<PageRange>) -> Result<ScanStats, TrackError> {
        self.scan_all(sys::PM_SCAN_CHECK_WPASYNC, out)
    }
}

impl Drop for UffdTracker {
    fn drop(&mut self) {
        // For the calling process closing the fd would be enough; for another process the
        // target may hold the same userfaultfd, so undo our registrations explicitly.
        for r in self.tracked.as_slice() {
            let _ = uffd::unregister(self.uffd.as_raw_fd(), *r);
        }
    }
}
