//! The refault probe: drop a sampled page's mapping and see whether it comes back.
//!
//! In a shared mapping (memfd, tmpfs, `/dev/shm`, a shared file) a page whose page-table entry
//! is dropped stays in the page cache with its contents; the next read or write maps it again
//! with a minor fault that the kernel resolves by itself (about 1–3 µs here). After the sampling
//! period `/proc/PID/pagemap` tells which sampled pages are present again: exactly those that
//! were accessed.
//!
//! * Calling process: `MADV_DONTNEED` drops the entries (several runs per `process_madvise`
//!   call when the kernel allows it on the calling process, Linux ≥ 6.13). The tracked ranges
//!   are registered with a userfaultfd in write-protect mode, with nothing ever protected: the
//!   registration only turns the kernel's *fault-around* off for them, which would otherwise map
//!   all cached pages of a 64 KiB window on a read fault and make unread pages look accessed.
//!   A range already registered with another userfaultfd (a checkpoint engine tracking writes)
//!   has fault-around off already.
//! * Another process (root, or `CAP_SYS_NICE` plus ptrace-read access): `process_madvise` with
//!   `MADV_PAGEOUT`, which on shmem without swap unmaps the page and keeps it cached (measured
//!   on Linux 6.18). Only shmem-backed ranges are accepted (on a disk file `MADV_PAGEOUT` would
//!   write the page back and evict it). Fault-around cannot be turned off from outside, so the
//!   schedule samples one page per fully-mapped 64 KiB window.
//!
//! Without fault-around, pages sampled and not accessed stay unmapped until the program touches
//! them (a minor fault); they are not counted in RSS meanwhile but stay in memory, in the shmem
//! object. With fault-around they are mapped again right after the check (a one-byte read,
//! through `process_vm_readv` for another process), so that every window holds at most the one
//! sampled page unmapped.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::maps::{self, Vma};
use crate::rangeset::RangeSet;
use crate::{push_coalesced, sys, uffd, PageRange, TrackError};

/// At most this many iovecs per `process_madvise` call (the kernel's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;
/// `statfs.f_type` of tmpfs and of the kernel's internal shmem mount (memfd, shared anonymous).
const TMPFS_MAGIC: i64 = 0x0102_1994;

#[derive(Debug)]
pub(crate) struct RefaultProbe {
    pid: i32,
    remote: bool,
    pagemap: File,
    pidfd: Option<OwnedFd>,
    /// Our userfaultfd, registering the tracked ranges to turn fault-around off (calling
    /// process only).
    uffd: Option<OwnedFd>,
    registered: RangeSet,
    /// Some tracked range may be faulted around: sample one page per window.
    pub(crate) fault_around: bool,
    /// `process_madvise` on the calling process works (tried once).
    self_batch: Option<bool>,
    entries: Vec<u64>,
}

fn pidfd_open(pid: i32) -> Result<OwnedFd, TrackError> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(sys::SYS_PIDFD_OPEN, pid, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ESRCH) => TrackError::ProcessGone { pid },
            _ => TrackError::Sys {
                what: "pidfd_open",
                source: e,
            },
        });
    }
    // SAFETY: a new descriptor from the kernel, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `process_madvise(pidfd, iov, advice)` over `runs`; returns the calls made, or the error and
/// the run it happened in.
fn process_madvise(
    pidfd: RawFd,
    runs: &[PageRange],
    advice: libc::c_int,
) -> Result<usize, (io::Error, PageRange)> {
    let mut calls = 0;
    for chunk in runs.chunks(IOV_MAX) {
        let mut iov: Vec<libc::iovec> = chunk
            .iter()
            .map(|r| libc::iovec {
                iov_base: r.start as *mut libc::c_void,
                iov_len: r.len(),
            })
            .collect();
        let mut first = 0usize;
        // The call may stop early (it returns the bytes advised): resume where it stopped.
        while first < iov.len() {
            // SAFETY: `iov[first..]` holds valid iovec structs describing address ranges (of
            // the target process); the kernel only reads the array.
            let rc = unsafe {
                libc::syscall(
                    sys::SYS_PROCESS_MADVISE,
                    pidfd,
                    iov[first..].as_ptr(),
                    iov.len() - first,
                    advice,
                    0,
                )
            };
            calls += 1;
            if rc <= 0 {
                let e = if rc < 0 {
                    io::Error::last_os_error()
                } else {
                    io::Error::from_raw_os_error(libc::EIO)
                };
                return Err((e, chunk[first]));
            }
            let mut n = rc as usize;
            while first < iov.len() && n >= iov[first].iov_len {
                n -= iov[first].iov_len;
                first += 1;
            }
            if n > 0 {
                iov[first].iov_base = (iov[first].iov_base as usize + n) as *mut libc::c_void;
                iov[first].iov_len -= n;
            }
        }
    }
    Ok(calls)
}

impl RefaultProbe {
    pub(crate) fn new(pid: i32) -> Result<RefaultProbe, TrackError> {
        let remote = pid != std::process::id() as i32;
        let pagemap = crate::query::open_pagemap(pid)?;
        let pidfd = if remote { Some(pidfd_open(pid)?) } else { None };
        let uffd = if remote {
            None
        } else {
            match uffd::create() {
                Ok((fd, _)) => match uffd::handshake(fd.as_raw_fd(), uffd::REQUIRED_FEATURES) {
                    Ok(_) => Some(fd),
                    Err(e) => {
                        tracing::info!(
                            "kioku-track: refault probe without userfaultfd ({e}); sampling one \
                             page per 64 KiB window"
                        );
                        None
                    }
                },
                Err(e) => {
                    tracing::info!(
                        "kioku-track: refault probe without userfaultfd ({e}); sampling one page \
                         per 64 KiB window"
                    );
                    None
                }
            }
        };
        Ok(RefaultProbe {
            pid,
            remote,
            pagemap,
            pidfd,
            fault_around: remote,
            uffd,
            registered: RangeSet::default(),
            self_batch: None,
            entries: Vec::new(),
        })
    }

    /// Checks that `r` can be sampled (shared, and shmem for another process) and turns
    /// fault-around off for it where possible.
    pub(crate) fn track(&mut self, r: PageRange) -> Result<(), TrackError> {
        let vmas = self.vmas(r)?;
        for v in &vmas {
            if !v.shared() {
                return Err(TrackError::NotShared {
                    start: v.start.max(r.start),
                    end: v.end.min(r.end),
                    pid: self.pid,
                    why: "a private mapping (its pages would be lost, not just unmapped)",
                });
            }
            if v.prot() & libc::PROT_READ == 0 {
                return Err(TrackError::NotShared {
                    start: v.start.max(r.start),
                    end: v.end.min(r.end),
                    pid: self.pid,
                    why: "not readable",
                });
            }
            if self.remote && !self.is_shmem(v)? {
                return Err(TrackError::NotShared {
                    start: v.start.max(r.start),
                    end: v.end.min(r.end),
                    pid: self.pid,
                    why: "not shmem (tmpfs, memfd, /dev/shm): sampling it from outside would \
                          write it back and evict it",
                });
            }
        }
        if let Some(fd) = &self.uffd {
            match uffd::register_wp(fd.as_raw_fd(), r) {
                Ok(()) => self.registered.insert(r),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    // Registered by someone else: fault-around is off if that registration is
                    // for write-protect or minor faults (VmFlags "uw"/"um").
                    if !uffd_registered(self.pid, r) {
                        self.fault_around = true;
                    }
                }
                Err(e) => {
                    tracing::info!(
                        range = ?r,
                        "kioku-track: cannot register the range with userfaultfd ({e}); \
                         sampling one page per 64 KiB window"
                    );
                    self.fault_around = true;
                }
            }
        } else {
            self.fault_around = true;
        }
        Ok(())
    }

    pub(crate) fn untrack(&mut self, r: PageRange) {
        if let Some(fd) = &self.uffd {
            for part in self.registered.present(r) {
                if let Err(e) = uffd::unregister(fd.as_raw_fd(), part) {
                    tracing::debug!(?part, "kioku-track: UFFDIO_UNREGISTER failed: {e}");
                }
            }
        }
        self.registered.remove(r);
    }

    fn vmas(&self, r: PageRange) -> Result<Vec<Vma>, TrackError> {
        match maps::vmas(self.pid, r) {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(TrackError::NotMapped {
                start: r.start,
                end: r.end,
                pid: self.pid,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(TrackError::ProcessGone { pid: self.pid })
            }
            Err(source) => Err(TrackError::Sys {
                what: "reading /proc/PID/maps",
                source,
            }),
        }
    }

    fn is_shmem(&self, v: &Vma) -> Result<bool, TrackError> {
        let path = format!("/proc/{}/map_files/{:x}-{:x}", self.pid, v.start, v.end);
        let f = File::open(&path).map_err(|source| match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => TrackError::PermissionDenied {
                pid: self.pid,
                need: "root (CAP_SYS_ADMIN) to open /proc/PID/map_files",
            },
            Some(libc::ENOENT) => TrackError::ProcessGone { pid: self.pid },
            _ => TrackError::Sys {
                what: "opening /proc/PID/map_files",
                source,
            },
        })?;
        // SAFETY: a zeroed statfs is a valid buffer for fstatfs to fill.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `f` is an open descriptor and `st` a writable statfs.
        if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
            return Err(TrackError::Sys {
                what: "fstatfs on a mapped file",
                source: io::Error::last_os_error(),
            });
        }
        Ok(st.f_type == TMPFS_MAGIC)
    }

    /// Drops the mappings of `runs`; appends to `armed` the runs whose pages are now unmapped.
    pub(crate) fn arm(
        &mut self,
        runs: &[PageRange],
        armed: &mut Vec<PageRange>,
    ) -> Result<usize, TrackError> {
        if runs.is_empty() {
            return Ok(0);
        }
        if self.remote {
            let pidfd = self
                .pidfd
                .as_ref()
                .expect("remote probes hold a pidfd")
                .as_raw_fd();
            // A page the kernel did not unmap (mapped by another process too, not on an LRU
            // list yet) would look accessed: keep only the pages unmapped now. A page the
            // program touched right after the call looks the same, so those are advised again
            // (twice at most) before they are left out of this sample.
            let mut calls = 0;
            let mut todo: Vec<PageRange> = runs.to_vec();
            for attempt in 0..3 {
                calls += process_madvise(pidfd, &todo, sys::MADV_PAGEOUT)
                    .map_err(|(e, r)| self.madvise_error(e, r))?;
                let mut again = Vec::new();
                for r in &todo {
                    calls += 1;
                    let present = self.read_present(*r)?;
                    for (p, present) in r.pages().zip(present) {
                        let page = PageRange::new(p, p + crate::page_size());
                        if present {
                            again.push(page);
                        } else {
                            push_coalesced(armed, page);
                        }
                    }
                }
                if again.is_empty() || attempt == 2 {
                    break;
                }
                todo = again;
            }
            armed.sort_unstable();
            return Ok(calls);
        }
        if self.self_batch != Some(false) {
            let pidfd = match &self.pidfd {
                Some(fd) => fd.as_raw_fd(),
                None => {
                    self.pidfd = Some(pidfd_open(self.pid)?);
                    self.pidfd.as_ref().expect("just set").as_raw_fd()
                }
            };
            match process_madvise(pidfd, runs, libc::MADV_DONTNEED) {
                Ok(calls) => {
                    self.self_batch = Some(true);
                    armed.extend_from_slice(runs);
                    return Ok(calls);
                }
                Err((e, _))
                    if self.self_batch.is_none() && e.raw_os_error() == Some(libc::EINVAL) =>
                {
                    // Before Linux 6.13 process_madvise refuses MADV_DONTNEED.
                    self.self_batch = Some(false);
                }
                Err((e, r)) => return Err(self.madvise_error(e, r)),
            }
        }
        for r in runs {
            // SAFETY: `r` lies in a shared mapping of this process that the caller tracks;
            // MADV_DONTNEED there only drops page-table entries, the pages stay in the page
            // cache with their contents.
            if unsafe { libc::madvise(r.start as *mut libc::c_void, r.len(), libc::MADV_DONTNEED) }
                != 0
            {
                return Err(self.madvise_error(io::Error::last_os_error(), *r));
            }
        }
        armed.extend_from_slice(runs);
        Ok(runs.len())
    }

    fn madvise_error(&self, e: io::Error, r: PageRange) -> TrackError {
        match e.raw_os_error() {
            Some(libc::ESRCH) => TrackError::ProcessGone { pid: self.pid },
            Some(libc::EPERM) => TrackError::PermissionDenied {
                pid: self.pid,
                need: "CAP_SYS_NICE and ptrace-read access (root) to advise another process",
            },
            Some(libc::ENOMEM) => TrackError::NotMapped {
                start: r.start,
                end: r.end,
                pid: self.pid,
            },
            _ => TrackError::Sys {
                what: "process_madvise/madvise",
                source: e,
            },
        }
    }

    /// Presence of the pages of `r` from `/proc/PID/pagemap` (one read per run).
    fn read_present(&mut self, r: PageRange) -> Result<Vec<bool>, TrackError> {
        let ps = crate::page_size();
        let n = r.len() / ps;
        self.entries.clear();
        self.entries.resize(n, 0);
        let bytes = n * 8;
        // SAFETY: `entries` holds n u64s = `bytes` writable bytes.
        let got = unsafe {
            libc::pread(
                self.pagemap.as_raw_fd(),
                self.entries.as_mut_ptr().cast(),
                bytes,
                ((r.start / ps) * 8) as libc::off_t,
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => TrackError::ProcessGone { pid: self.pid },
                _ => TrackError::Sys {
                    what: "reading /proc/PID/pagemap",
                    source: e,
                },
            });
        }
        if got == 0 {
            // The address space has no users any more.
            return Err(TrackError::ProcessGone { pid: self.pid });
        }
        let got = got as usize / 8;
        Ok((0..n)
            .map(|i| i < got && self.entries[i] & (sys::PM_PRESENT | sys::PM_SWAPPED) != 0)
            .collect())
    }

    /// Appends the pages of `runs` that are mapped again (accessed since `arm`). With
    /// `disarm` and fault-around on, maps the pages not accessed again, so that no page of
    /// their window is left unmapped (a read of it would fault the window around, next sample
    /// included). Without fault-around they stay unmapped until the program touches them.
    pub(crate) fn collect(
        &mut self,
        runs: &[PageRange],
        accessed: &mut Vec<usize>,
        disarm: bool,
    ) -> Result<usize, TrackError> {
        let mut calls = 0;
        let mut idle = Vec::new();
        for r in runs {
            let present = self.read_present(*r)?;
            calls += 1;
            for (p, present) in r.pages().zip(present) {
                if present {
                    accessed.push(p);
                } else if disarm && self.fault_around {
                    idle.push(p);
                }
            }
        }
        if !idle.is_empty() {
            calls += self.map_again(&idle)?;
        }
        Ok(calls)
    }

    /// Faults `pages` back in by reading one byte of each: through `process_vm_readv` for
    /// another process (a read in its address space, nothing written), directly otherwise.
    fn map_again(&mut self, pages: &[usize]) -> Result<usize, TrackError> {
        if !self.remote {
            for &p in pages {
                // SAFETY: `p` is a page of a tracked, readable shared mapping of this process
                // (checked at `track`); a volatile one-byte read has no effect but mapping it.
                unsafe { std::ptr::read_volatile(p as *const u8) };
            }
            return Ok(0);
        }
        let mut sink = vec![0u8; pages.len().min(IOV_MAX)];
        let mut calls = 0;
        for chunk in pages.chunks(IOV_MAX) {
            let local = libc::iovec {
                iov_base: sink.as_mut_ptr().cast(),
                iov_len: chunk.len(),
            };
            let remote: Vec<libc::iovec> = chunk
                .iter()
                .map(|&p| libc::iovec {
                    iov_base: p as *mut libc::c_void,
                    iov_len: 1,
                })
                .collect();
            // SAFETY: `local` describes `chunk.len()` writable bytes of `sink`; the remote
            // iovecs are addresses in the target, only read by the kernel.
            let n = unsafe {
                libc::process_vm_readv(
                    self.pid,
                    &local,
                    1,
                    remote.as_ptr(),
                    remote.len() as libc::c_ulong,
                    0,
                )
            };
            calls += 1;
            if n < 0 {
                let e = io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::ESRCH) => TrackError::ProcessGone { pid: self.pid },
                    Some(libc::EPERM) => TrackError::PermissionDenied {
                        pid: self.pid,
                        need: "ptrace-attach access (root) to read another process's memory",
                    },
                    _ => TrackError::Sys {
                        what: "process_vm_readv",
                        source: e,
                    },
                });
            }
        }
        Ok(calls)
    }
}

impl Drop for RefaultProbe {
    fn drop(&mut self) {
        if let Some(fd) = &self.uffd {
            for r in self.registered.as_slice() {
                let _ = uffd::unregister(fd.as_raw_fd(), *r);
            }
        }
    }
}

/// Whether every mapping of `r` in process `pid` is registered with a userfaultfd for
/// write-protect or minor faults (`VmFlags` `uw` or `um` in smaps), which turns fault-around off.
fn uffd_registered(pid: i32, r: PageRange) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else {
        return false;
    };
    let mut inside = false;
    let mut all = true;
    let mut any = false;
    for line in text.lines() {
        if let Some((span, _)) = line.split_once(' ') {
            if let Some((a, b)) = span.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a < r.end && r.start < b;
                    continue;
                }
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                any = true;
                all &= flags.split_whitespace().any(|f| f == "uw" || f == "um");
            }
        }
    }
    any && all
}
