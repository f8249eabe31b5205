//! userfaultfd plumbing: creation, the `UFFDIO_API` handshake, registration, write-protect, and
//! taking another process's userfaultfd with `pidfd_getfd`.
//!
//! `UFFDIO_REGISTER`, `UFFDIO_UNREGISTER` and `UFFDIO_WRITEPROTECT` act on the address space the
//! userfaultfd was *created* in, whichever process issues them (verified on Linux 6.18 by the
//! cross-process tests): a monitor holding a target's userfaultfd can register the target's
//! ranges itself.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use crate::sys;
use crate::{PageRange, TrackError};

/// Features the tracker requires (async write-protect, markers for unpopulated pages).
pub const REQUIRED_FEATURES: u64 = sys::UFFD_FEATURE_WP_ASYNC | sys::UFFD_FEATURE_WP_UNPOPULATED;
/// Features requested when offered (write-protect of shmem/memfd/hugetlbfs).
pub const OPTIONAL_FEATURES: u64 = sys::UFFD_FEATURE_WP_HUGETLBFS_SHMEM;

/// What the userfaultfd probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UffdSupport {
    /// Every feature bit the kernel offers.
    pub features: u64,
    /// Whether the fd was created with `UFFD_USER_MODE_ONLY`.
    pub user_mode_only: bool,
}

/// Creates a userfaultfd (close-on-exec, non-blocking), preferring `UFFD_USER_MODE_ONLY` (which
/// needs no privilege), then plain `userfaultfd(2)`, then `/dev/userfaultfd`.
pub fn create() -> Result<(OwnedFd, bool), TrackError> {
    let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let mut last = io::Error::from_raw_os_error(libc::ENOSYS);
    for (flags, umo) in [(base | sys::UFFD_USER_MODE_ONLY, true), (base, false)] {
        // SAFETY: userfaultfd takes an int of flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(sys::SYS_USERFAULTFD, flags) };
        if fd >= 0 {
            // SAFETY: the kernel just returned this fd; we own it.
            return Ok((unsafe { OwnedFd::from_raw_fd(fd as RawFd) }, umo));
        }
        last = io::Error::last_os_error();
    }
    match File::options()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
    {
        Ok(dev) => {
            // SAFETY: USERFAULTFD_IOC_NEW takes the flags as the argument and returns a new fd.
            let fd = unsafe {
                libc::ioctl(
                    dev.as_raw_fd(),
                    sys::USERFAULTFD_IOC_NEW as _,
                    base as libc::c_long,
                )
            };
            if fd >= 0 {
                // SAFETY: a new fd from the kernel; we own it.
                return Ok((unsafe { OwnedFd::from_raw_fd(fd) }, false));
            }
            last = io::Error::last_os_error();
        }
        Err(e) if e.kind() != io::ErrorKind::NotFound => last = e,
        Err(_) => {}
    }
    Err(TrackError::UffdUnavailable { source: last })
}

/// Runs `UFFDIO_API` asking for `features`; returns the features the kernel offers.
pub fn handshake(fd: RawFd, features: u64) -> io::Result<u64> {
    let mut api = sys::UffdioApi {
        api: sys::UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: `api` is a valid, writable uffdio_api for the duration of the call.
    let rc = unsafe { libc::ioctl(fd, sys::UFFDIO_API as _, &mut api as *mut sys::UffdioApi) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(api.features)
}

/// Probes whether this kernel can run the userfaultfd + `PAGEMAP_SCAN` backend.
pub fn probe_support() -> Result<UffdSupport, TrackError> {
    let (fd, user_mode_only) = create()?;
    let features = handshake(fd.as_raw_fd(), 0).map_err(|source| TrackError::Sys {
        what: "UFFDIO_API handshake",
        source,
    })?;
    check_features(features)?;
    probe_pagemap_scan()?;
    Ok(UffdSupport {
        features,
        user_mode_only,
    })
}

/// [`probe_support`], asked of the kernel once per process: its answer cannot change while the
/// process runs, and each probe costs a userfaultfd and two opens of `/proc/self/pagemap`
/// (trackers are made per checkpoint engine, and recoveries make engines by the thousand). A
/// failure is not kept: the next call probes again.
pub fn support() -> Result<UffdSupport, TrackError> {
    static SUPPORT: OnceLock<UffdSupport> = OnceLock::new();
    if let Some(s) = SUPPORT.get() {
        return Ok(*s);
    }
    let s = probe_support()?;
    Ok(*SUPPORT.get_or_init(|| s))
}

/// [`probe_pagemap_scan`] once per process, as [`support`].
pub fn pagemap_scan_supported() -> Result<(), TrackError> {
    static SUPPORTED: OnceLock<()> = OnceLock::new();
    if SUPPORTED.get().is_none() {
        probe_pagemap_scan()?;
        let _ = SUPPORTED.set(());
    }
    Ok(())
}

fn check_features(features: u64) -> Result<(), TrackError> {
    if features & sys::UFFD_FEATURE_WP_UNPOPULATED == 0 {
        return Err(TrackError::MissingKernelFeature {
            feature: "UFFD_FEATURE_WP_UNPOPULATED",
            since: "6.4",
        });
    }
    if features & sys::UFFD_FEATURE_WP_ASYNC == 0 {
        return Err(TrackError::MissingKernelFeature {
            feature: "UFFD_FEATURE_WP_ASYNC",
            since: "6.7",
        });
    }
    Ok(())
}

/// Checks that `/proc/self/pagemap` answers `PAGEMAP_SCAN`.
pub fn probe_pagemap_scan() -> Result<(), TrackError> {
    let pagemap = File::open("/proc/self/pagemap").map_err(|source| TrackError::Sys {
        what: "opening /proc/self/pagemap",
        source,
    })?;
    let probe_byte = 0u8;
    let ps = crate::page_size();
    let start = (&probe_byte as *const u8 as usize) & !(ps - 1);
    let mut out = [sys::PageRegion::default(); 1];
    let mut arg = sys::PmScanArg {
        size: std::mem::size_of::<sys::PmScanArg>() as u64,
        start: start as u64,
        end: (start + ps) as u64,
        vec: out.as_mut_ptr() as u64,
        vec_len: 1,
        return_mask: sys::PAGE_IS_PRESENT,
        ..Default::default()
    };
    // SAFETY: `arg` and `out` are valid for the call; the scan only reads page tables.
    let rc = unsafe {
        libc::ioctl(
            pagemap.as_raw_fd(),
            sys::PAGEMAP_SCAN as _,
            &mut arg as *mut sys::PmScanArg,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOTTY) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                TrackError::MissingKernelFeature {
                    feature: "the PAGEMAP_SCAN ioctl",
                    since: "6.7",
                }
            }
            _ => TrackError::Sys {
                what: "PAGEMAP_SCAN probe",
                source: e,
            },
        });
    }
    Ok(())
}

/// State of a userfaultfd as shown in `/proc/self/fdinfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdInfo {
    /// Whether `UFFDIO_API` has run on it.
    pub initialized: bool,
    /// Features enabled (without the internal "initialised" bit).
    pub features: u64,
}

/// Reads the state of userfaultfd `fd` (a descriptor of the calling process).
pub fn fdinfo(fd: RawFd) -> Result<FdInfo, TrackError> {
    let link =
        std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(|source| TrackError::Sys {
            what: "reading /proc/self/fd link",
            source,
        })?;
    let link = link.to_string_lossy().into_owned();
    if link != "anon_inode:[userfaultfd]" {
        return Err(TrackError::NotUffd { fd, what: link });
    }
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).map_err(|source| {
        TrackError::Sys {
            what: "reading /proc/self/fdinfo",
            source,
        }
    })?;
    let api = text
        .lines()
        .find_map(|l| l.strip_prefix("API:"))
        .ok_or_else(|| TrackError::NotUffd {
            fd,
            what: "fdinfo without an API line".into(),
        })?;
    let features = api
        .trim()
        .split(':')
        .nth(1)
        .and_then(|f| u64::from_str_radix(f, 16).ok())
        .ok_or_else(|| TrackError::NotUffd {
            fd,
            what: format!("unreadable fdinfo API line {api:?}"),
        })?;
    Ok(FdInfo {
        initialized: features & sys::UFFD_FEATURE_INITIALIZED != 0,
        features: features & !sys::UFFD_FEATURE_INITIALIZED,
    })
}

/// Makes sure `fd` runs with async write-protect: performs the handshake on a fresh fd, or checks
/// the features of one already initialised. Returns the enabled features.
pub fn ensure_wp_async(fd: RawFd) -> Result<u64, TrackError> {
    let info = fdinfo(fd)?;
    if info.initialized {
        if info.features & REQUIRED_FEATURES != REQUIRED_FEATURES {
            return Err(TrackError::UffdNotWpAsync {
                features: info.features,
            });
        }
        return Ok(info.features);
    }
    let support = support()?;
    let want = REQUIRED_FEATURES | (OPTIONAL_FEATURES & support.features);
    handshake(fd, want).map_err(|source| TrackError::Sys {
        what: "UFFDIO_API handshake",
        source,
    })?;
    Ok(want)
}

/// Registers `r` for write-protect tracking on `fd`.
pub fn register_wp(fd: RawFd, r: PageRange) -> io::Result<()> {
    let mut reg = sys::UffdioRegister {
        range: sys::UffdioRange {
            start: r.start as u64,
            len: r.len() as u64,
        },
        mode: sys::UFFDIO_REGISTER_MODE_WP,
        ioctls: 0,
    };
    // SAFETY: `reg` is a valid uffdio_register for the call.
    let rc = unsafe {
        libc::ioctl(
            fd,
            sys::UFFDIO_REGISTER as _,
            &mut reg as *mut sys::UffdioRegister,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Unregisters `r` from `fd` (clears its write-protection).
pub fn unregister(fd: RawFd, r: PageRange) -> io::Result<()> {
    let mut range = sys::UffdioRange {
        start: r.start as u64,
        len: r.len() as u64,
    };
    // SAFETY: `range` is a valid uffdio_range for the call.
    let rc = unsafe {
        libc::ioctl(
            fd,
            sys::UFFDIO_UNREGISTER as _,
            &mut range as *mut sys::UffdioRange,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Write-protects (`protect`) or unprotects `r`, which must be registered on `fd`.
pub fn write_protect(fd: RawFd, r: PageRange, protect: bool) -> io::Result<()> {
    let mut wp = sys::UffdioWriteprotect {
        range: sys::UffdioRange {
            start: r.start as u64,
            len: r.len() as u64,
        },
        mode: if protect {
            sys::UFFDIO_WRITEPROTECT_MODE_WP
        } else {
            0
        },
    };
    // SAFETY: `wp` is a valid uffdio_writeprotect for the call.
    let rc = unsafe {
        libc::ioctl(
            fd,
            sys::UFFDIO_WRITEPROTECT as _,
            &mut wp as *mut sys::UffdioWriteprotect,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes a duplicate of descriptor `target_fd` of process `pid` (`pidfd_open` + `pidfd_getfd`,
/// Linux ≥ 5.6; needs ptrace-attach permission on `pid`) and checks it is a userfaultfd.
pub fn take_uffd_from(pid: i32, target_fd: RawFd) -> Result<OwnedFd, TrackError> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let pidfd = unsafe { libc::syscall(sys::SYS_PIDFD_OPEN, pid, 0) };
    if pidfd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Err(TrackError::ProcessGone { pid });
        }
        return Err(TrackError::Sys {
            what: "pidfd_open",
            source: e,
        });
    }
    // SAFETY: the kernel just returned this fd; we own it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number in that process and flags.
    let fd = unsafe { libc::syscall(sys::SYS_PIDFD_GETFD, pidfd.as_raw_fd(), target_fd, 0) };
    if fd < 0 {
        return Err(TrackError::Sys {
            what: "pidfd_getfd (needs ptrace permission on the target)",
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: a new fd in our table, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    fdinfo(fd.as_raw_fd())?;
    Ok(fd)
}
