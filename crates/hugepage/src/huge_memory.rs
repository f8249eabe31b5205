//! Memory backed by huge pages, where a compaction callback moves hot objects.
//!
//! * [`HugeKind::Hugetlb`]: a hugetlbfs memfd (`MFD_HUGETLB`); its pages come from the pool
//!   reserved with `vm.nr_hugepages` and are taken when mapped — or refused at once.
//! * [`HugeKind::ThpShmem`]: a memfd collapsed into transparent huge pages; shareable and
//!   usable as a tmpfs-like object (`fd`).
//! * [`HugeKind::ThpAnon`]: anonymous memory advised `MADV_HUGEPAGE` and faulted in (THP
//!   `madvise` mode gives a huge page at the first touch), collapsed if it was not.
//!
//! Every kind is checked after mapping: memory the kernel did not back by huge pages is refused
//! with [`HugeError::NotHuge`] instead of silently being 4 KiB pages.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use kioku_track::{sys, PageRange};

use crate::promote::{huge_mapped_bytes, huge_page_size};
use crate::HugeError;

/// `MFD_HUGE_2MB`: log2(2 MiB) << MFD_HUGE_SHIFT (include/uapi/linux/memfd.h).
const MFD_HUGE_2MB: libc::c_uint = 21 << 26;
/// `MADV_POPULATE_WRITE` (Linux 5.14).
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Which kind of huge pages back a [`HugeMemory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HugeKind {
    /// hugetlbfs pages from the reserved pool (`vm.nr_hugepages`).
    Hugetlb,
    /// A memfd in transparent huge pages.
    ThpShmem,
    /// Anonymous transparent huge pages.
    ThpAnon,
}

impl std::str::FromStr for HugeKind {
    type Err = HugeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hugetlb" => Ok(HugeKind::Hugetlb),
            "thp-shmem" | "shmem" => Ok(HugeKind::ThpShmem),
            "thp" | "thp-anon" | "anon" => Ok(HugeKind::ThpAnon),
            other => Err(HugeError::InvalidSetting(format!(
                "huge memory kind {other:?}; choose hugetlb, thp-shmem or thp-anon"
            ))),
        }
    }
}

/// A mapping backed by huge pages; unmapped on drop.
#[derive(Debug)]
pub struct HugeMemory {
    addr: usize,
    len: usize,
    kind: HugeKind,
    fd: Option<OwnedFd>,
}

// SAFETY: HugeMemory owns its mapping and its descriptor; nothing in it is tied to a thread.
unsafe impl Send for HugeMemory {}
// SAFETY: shared access only hands out the address; writes go through raw pointers the caller
// synchronises.
unsafe impl Sync for HugeMemory {}

/// Free and total hugetlb pages of the default size (`/proc/meminfo`).
pub fn hugetlb_pages() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("HugePages_Free:"), field("HugePages_Total:"))
}

/// Reserves `len` bytes of address space aligned to `align` (anonymous, inaccessible).
fn reserve_aligned(len: usize, align: usize) -> Result<usize, HugeError> {
    // SAFETY: a fresh private reservation; only its address is used.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + align,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(HugeError::sys("reserving address space"));
    }
    let start = p as usize;
    let aligned = start.div_ceil(align) * align;
    // SAFETY: trimming the parts of our own reservation outside [aligned, aligned + len).
    unsafe {
        if aligned > start {
            libc::munmap(p, aligned - start);
        }
        let tail = start + len + align - (aligned + len);
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    Ok(aligned)
}

impl HugeMemory {
    /// Maps `len` bytes (rounded up to huge pages) of `kind`, populated and checked to be
    /// backed by huge pages.
    pub fn map(kind: HugeKind, len: usize) -> Result<HugeMemory, HugeError> {
        let h = huge_page_size();
        if len == 0 {
            return Err(HugeError::InvalidSetting("huge memory of 0 bytes".into()));
        }
        let len = len.div_ceil(h) * h;
        let mem = match kind {
            HugeKind::Hugetlb => Self::map_hugetlb(len)?,
            HugeKind::ThpShmem => Self::map_shmem(len)?,
            HugeKind::ThpAnon => Self::map_anon(len)?,
        };
        let huge = huge_mapped_bytes(mem.range())?;
        if huge < len {
            return Err(HugeError::NotHuge {
                start: mem.addr,
                end: mem.addr + len,
                why: format!("{kind:?}: {} of {len} bytes huge after population", huge),
            });
        }
        Ok(mem)
    }

    fn memfd(name: &std::ffi::CStr, flags: libc::c_uint) -> Result<OwnedFd, HugeError> {
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | flags) };
        if fd < 0 {
            return Err(HugeError::sys("memfd_create"));
        }
        // SAFETY: a new descriptor, owned from here on.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn map_hugetlb(len: usize) -> Result<HugeMemory, HugeError> {
        let h = huge_page_size();
        let (free, total) = hugetlb_pages();
        if (free as usize) < len / h {
            return Err(HugeError::NoHugetlbPages {
                bytes: len,
                free,
                total,
            });
        }
        let fd = Self::memfd(c"kioku-huge", libc::MFD_HUGETLB | MFD_HUGE_2MB)?;
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(HugeError::sys("ftruncate of a hugetlb memfd"));
        }
        // SAFETY: a fresh shared mapping of our memfd; hugetlb reserves the pages here.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOMEM) {
                // Another process took the pages between the check and the mapping.
                let (free, total) = hugetlb_pages();
                return Err(HugeError::NoHugetlbPages {
                    bytes: len,
                    free,
                    total,
                });
            }
            return Err(HugeError::Sys {
                what: "mmap of a hugetlb memfd",
                source: e,
            });
        }
        Ok(HugeMemory {
            addr: p as usize,
            len,
            kind: HugeKind::Hugetlb,
            fd: Some(fd),
        })
    }

    fn map_shmem(len: usize) -> Result<HugeMemory, HugeError> {
        let h = huge_page_size();
        let fd = Self::memfd(c"kioku-huge", 0)?;
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(HugeError::sys("ftruncate of a memfd"));
        }
        let at = reserve_aligned(len, h)?;
        // SAFETY: replaces our own reservation at `at` with a shared mapping of our memfd.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = HugeError::sys("mmap of a memfd");
            // SAFETY: releasing our own reservation.
            unsafe { libc::munmap(at as *mut libc::c_void, len) };
            return Err(e);
        }
        let mem = HugeMemory {
            addr: at,
            len,
            kind: HugeKind::ThpShmem,
            fd: Some(fd),
        };
        mem.populate_and_collapse()?;
        Ok(mem)
    }

    fn map_anon(len: usize) -> Result<HugeMemory, HugeError> {
        let h = huge_page_size();
        let at = reserve_aligned(len, h)?;
        // SAFETY: replaces our own reservation with private anonymous memory.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = HugeError::sys("mmap of anonymous memory");
            // SAFETY: releasing our own reservation.
            unsafe { libc::munmap(at as *mut libc::c_void, len) };
            return Err(e);
        }
        let mem = HugeMemory {
            addr: at,
            len,
            kind: HugeKind::ThpAnon,
            fd: None,
        };
        mem.populate_and_collapse()?;
        Ok(mem)
    }

    fn populate_and_collapse(&self) -> Result<(), HugeError> {
        let r = self.range();
        // SAFETY: advice and population of our own fresh mapping.
        unsafe {
            libc::madvise(r.start as *mut libc::c_void, r.len(), libc::MADV_HUGEPAGE);
            if libc::madvise(r.start as *mut libc::c_void, r.len(), MADV_POPULATE_WRITE) != 0 {
                return Err(HugeError::sys("populating huge memory"));
            }
        }
        if huge_mapped_bytes(r)? < r.len() {
            // SAFETY: collapsing our own populated mapping; contents are zero either way.
            unsafe { libc::madvise(r.start as *mut libc::c_void, r.len(), sys::MADV_COLLAPSE) };
        }
        Ok(())
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// Length in bytes (a multiple of the huge page size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a mapping is at least one huge page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped range.
    pub fn range(&self) -> PageRange {
        PageRange::new(self.addr, self.addr + self.len)
    }

    /// The kind of huge pages.
    pub fn kind(&self) -> HugeKind {
        self.kind
    }

    /// The memfd behind the mapping (hugetlb and shmem kinds).
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.fd.as_ref().map(|f| f.as_fd())
    }
}

impl Drop for HugeMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives `self`.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}
