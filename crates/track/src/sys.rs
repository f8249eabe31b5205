//! Kernel UAPI the tracker needs that Debian 12's headers (Linux 6.1) and the `libc` crate do not
//! all carry: userfaultfd write-protect in async mode and the `PAGEMAP_SCAN` ioctl.
//!
//! Each item names the kernel release that introduced it. Layouts follow
//! `include/uapi/linux/userfaultfd.h` and `include/uapi/linux/fs.h`.

#![allow(missing_docs)]

// ---------------------------------------------------------------------------------------------
// ioctl number encoding (asm-generic/ioctl.h, as used on x86_64 and arm64).
// ---------------------------------------------------------------------------------------------

const IOC_NRBITS: u64 = 8;
const IOC_TYPEBITS: u64 = 8;
const IOC_SIZEBITS: u64 = 14;
const IOC_NRSHIFT: u64 = 0;
const IOC_TYPESHIFT: u64 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u64 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u64 = IOC_SIZESHIFT + IOC_SIZEBITS;
const IOC_NONE: u64 = 0;
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << IOC_DIRSHIFT)
        | ((ty as u64) << IOC_TYPESHIFT)
        | ((nr as u64) << IOC_NRSHIFT)
        | ((size as u64) << IOC_SIZESHIFT)
}

// ---------------------------------------------------------------------------------------------
// userfaultfd (include/uapi/linux/userfaultfd.h)
// ---------------------------------------------------------------------------------------------

/// The only userfaultfd API version (Linux 4.3).
pub const UFFD_API: u64 = 0xAA;
/// `userfaultfd(2)` flag: only handle faults from user mode; allowed without privilege even when
/// `vm.unprivileged_userfaultfd = 0` (Linux 5.11).
pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;

/// Linux 4.3 (the WP flag itself became usable with UFFDIO_REGISTER_MODE_WP in 5.7).
pub const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
/// Write-protect on shmem/hugetlbfs (Linux 5.19).
pub const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
/// Write-protecting never-populated anonymous pages installs markers (Linux 6.4).
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// Write-protect faults are resolved by the kernel itself, no fault message (Linux 6.7).
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
/// Kernel-internal bit shown in `/proc/PID/fdinfo` once `UFFDIO_API` has run (Linux 6.2 onwards
/// keeps it in `ctx->features`).
pub const UFFD_FEATURE_INITIALIZED: u64 = 1 << 31;

const UFFDIO: u8 = 0xAA;
const _UFFDIO_REGISTER: u8 = 0x00;
const _UFFDIO_UNREGISTER: u8 = 0x01;
const _UFFDIO_WRITEPROTECT: u8 = 0x06;
const _UFFDIO_API: u8 = 0x3F;

/// `struct uffdio_api` (Linux 4.3).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

/// `struct uffdio_range` (Linux 4.3).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

/// `struct uffdio_register` (Linux 4.3).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

/// `struct uffdio_writeprotect` (Linux 5.7).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// Linux 4.3.
pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
/// Linux 5.7.
pub const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
/// Linux 5.7.
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// Linux 5.7.
pub const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;

/// Linux 4.3.
pub const UFFDIO_API: u64 = ioc(
    IOC_READ | IOC_WRITE,
    UFFDIO,
    _UFFDIO_API,
    std::mem::size_of::<UffdioApi>(),
);
/// Linux 4.3.
pub const UFFDIO_REGISTER: u64 = ioc(
    IOC_READ | IOC_WRITE,
    UFFDIO,
    _UFFDIO_REGISTER,
    std::mem::size_of::<UffdioRegister>(),
);
/// Linux 4.3.
pub const UFFDIO_UNREGISTER: u64 = ioc(
    IOC_READ,
    UFFDIO,
    _UFFDIO_UNREGISTER,
    std::mem::size_of::<UffdioRange>(),
);
/// Linux 5.7.
pub const UFFDIO_WRITEPROTECT: u64 = ioc(
    IOC_READ | IOC_WRITE,
    UFFDIO,
    _UFFDIO_WRITEPROTECT,
    std::mem::size_of::<UffdioWriteprotect>(),
);
/// `/dev/userfaultfd` ioctl returning a new userfaultfd; its argument is the `userfaultfd(2)`
/// flags (Linux 6.1).
pub const USERFAULTFD_IOC_NEW: u64 = ioc(IOC_NONE, UFFDIO, 0x00, 0);

// ---------------------------------------------------------------------------------------------
// PAGEMAP_SCAN (include/uapi/linux/fs.h, all Linux 6.7 unless noted)
// ---------------------------------------------------------------------------------------------

/// Linux 6.7.
pub const PAGE_IS_WPALLOWED: u64 = 1 << 0;
/// Linux 6.7.
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// Linux 6.7.
pub const PAGE_IS_FILE: u64 = 1 << 2;
/// Linux 6.7.
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
/// Linux 6.7.
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;
/// Linux 6.7.
pub const PAGE_IS_PFNZERO: u64 = 1 << 5;
/// Linux 6.7.
pub const PAGE_IS_HUGE: u64 = 1 << 6;
/// Linux 6.7.
pub const PAGE_IS_SOFT_DIRTY: u64 = 1 << 7;

/// Write-protect the matched pages (Linux 6.7).
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// Abort with EPERM when a page without async write-protect is met (Linux 6.7).
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

/// `struct page_region` (Linux 6.7).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

/// `struct pm_scan_arg` (Linux 6.7).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PmScanArg {
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub walk_end: u64,
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}

/// `PAGEMAP_SCAN` on `/proc/PID/pagemap` (Linux 6.7).
pub const PAGEMAP_SCAN: u64 = ioc(
    IOC_READ | IOC_WRITE,
    b'f',
    16,
    std::mem::size_of::<PmScanArg>(),
);

// ---------------------------------------------------------------------------------------------
// syscalls the libc crate may lack on older versions
// ---------------------------------------------------------------------------------------------

/// `pidfd_open(2)` (Linux 5.3).
pub const SYS_PIDFD_OPEN: libc::c_long = libc::SYS_pidfd_open;
/// `pidfd_getfd(2)` (Linux 5.6).
pub const SYS_PIDFD_GETFD: libc::c_long = libc::SYS_pidfd_getfd;
/// `userfaultfd(2)` (Linux 4.3).
pub const SYS_USERFAULTFD: libc::c_long = libc::SYS_userfaultfd;

// ---------------------------------------------------------------------------------------------
// /proc/PID/pagemap entries and madvise advice (include/uapi/asm-generic/mman-common.h)
// ---------------------------------------------------------------------------------------------

/// Pagemap entry bit: the page is present in RAM (Linux 2.6.25).
pub const PM_PRESENT: u64 = 1 << 63;
/// Pagemap entry bit: the page is swapped out (Linux 2.6.25).
pub const PM_SWAPPED: u64 = 1 << 62;
/// Pagemap entry bits 0-54: the page frame number (zero without CAP_SYS_ADMIN).
pub const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// Deactivate the pages (Linux 5.4).
pub const MADV_COLD: libc::c_int = 20;
/// Reclaim the pages; on shmem without swap this unmaps them and keeps them cached (Linux 5.4).
pub const MADV_PAGEOUT: libc::c_int = 21;
/// Map the pages readable, faulting them in (Linux 5.14).
pub const MADV_POPULATE_READ: libc::c_int = 22;
/// Collapse the range into transparent huge pages, synchronously (Linux 6.1).
pub const MADV_COLLAPSE: libc::c_int = 25;

/// `process_madvise(2)` (Linux 5.10; any advice on the calling process since 6.13).
pub const SYS_PROCESS_MADVISE: libc::c_long = libc::SYS_process_madvise;

/// CPU time the calling thread has used. A budget that is a share of one CPU is charged with
/// this, not with wall time: on a loaded machine wall time also counts the time the thread
/// waited for a CPU, and would shrink the work the budget allows.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given; CLOCK_THREAD_CPUTIME_ID
    // exists on every Linux kioku supports, so it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        // Values as computed by the C preprocessor from the 6.7+ headers.
        assert_eq!(UFFDIO_API, 0xC018_AA3F);
        assert_eq!(UFFDIO_REGISTER, 0xC020_AA00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_AA01);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xC018_AA06);
        assert_eq!(USERFAULTFD_IOC_NEW, 0xAA00);
        assert_eq!(PAGEMAP_SCAN, 0xC060_6610);
        assert_eq!(std::mem::size_of::<PmScanArg>(), 96);
        assert_eq!(std::mem::size_of::<PageRegion>(), 24);
    }
}
