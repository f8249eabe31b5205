//! The shared range: one memfd mapped twice. The application's view sits at the same address
//! on every node (so pointers into shared memory mean the same everywhere) and carries the
//! page protections that detect accesses; the library's own view is always writable, so the
//! receive thread can apply diffs and serve pages without touching the protections.

use crate::error::{DsmError, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// What the application may do with a page of its view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    None,
    Read,
    Write,
}

pub struct Region {
    pub base: usize,
    pub bytes: usize,
    pub page: usize,
    lib: usize,
    _fd: OwnedFd,
}

// SAFETY: the region is two mappings owned by this value; the raw addresses are shared with
// threads that only use them through the methods below, which synchronise by the callers' locks.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `bytes` of shared range at `base` (no access yet) and the library's view anywhere.
    pub fn new(base: usize, bytes: usize, job: &str) -> Result<Region> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        if !base.is_multiple_of(page) || !bytes.is_multiple_of(page) || bytes == 0 {
            return Err(DsmError::Invalid(format!(
                "the shared range {base:#x}+{bytes} is not page-aligned"
            )));
        }
        let name = std::ffi::CString::new(format!("kioku-dsm.{job}")).unwrap_or_default();
        // SAFETY: a valid C string and flags; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io("memfd_create", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor that we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own descriptor; the result is checked.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0 {
            return Err(io("ftruncate", std::io::Error::last_os_error()));
        }
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the result is checked.
        let app = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                bytes,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            )
        };
        if app == libc::MAP_FAILED || app as usize != base {
            let e = std::io::Error::last_os_error();
            if app != libc::MAP_FAILED {
                // SAFETY: the kernel gave us another address (old kernels); undo it.
                unsafe { libc::munmap(app, bytes) };
            }
            return Err(DsmError::Reserve {
                base,
                bytes,
                source: e,
            });
        }
        // SAFETY: a fresh mapping of our own memfd at an address the kernel chooses.
        let lib = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            )
        };
        if lib == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // SAFETY: undoing the application view mapped above.
            unsafe { libc::munmap(base as *mut libc::c_void, bytes) };
            return Err(io("mmap", e));
        }
        // The range is large and mostly unused: keep it out of core dumps.
        // SAFETY: advice on our own two mappings; failure only means bigger dumps.
        unsafe {
            libc::madvise(base as *mut libc::c_void, bytes, libc::MADV_DONTDUMP);
            libc::madvise(lib, bytes, libc::MADV_DONTDUMP);
        }
        Ok(Region {
            base,
            bytes,
            page,
            lib: lib as usize,
            _fd: fd,
        })
    }

    pub fn pages(&self) -> u32 {
        (self.bytes / self.page) as u32
    }

    /// Sets the application's access to pages `first..first + count`.
    pub fn protect(&self, first: u32, count: u32, access: Access) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        assert!(first as u64 + count as u64 <= self.pages() as u64);
        let prot = match access {
            Access::None => libc::PROT_NONE,
            Access::Read => libc::PROT_READ,
            Access::Write => libc::PROT_READ | libc::PROT_WRITE,
        };
        let addr = self.base + first as usize * self.page;
        // SAFETY: the range lies inside the application view, which this value owns.
        if unsafe { libc::mprotect(addr as *mut libc::c_void, count as usize * self.page, prot) }
            != 0
        {
            return Err(io("mprotect", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The library's view of page `p`.
    ///
    /// # Safety
    /// The caller must make sure no other thread writes the page through the library's view
    /// at the same time (the application may, which is the DSM's own data race to resolve).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn page_mut(&self, p: u32) -> &mut [u8] {
        assert!(p < self.pages());
        std::slice::from_raw_parts_mut((self.lib + p as usize * self.page) as *mut u8, self.page)
    }

    /// Copies page `p` (through the library's view) into `dst` (one page long).
    pub fn copy_page_into(&self, p: u32, dst: &mut [u8]) {
        assert!(p < self.pages() && dst.len() == self.page);
        // SAFETY: as in `page_copy`: a raw bytewise copy out of our own mapping.
        unsafe {
            let src = (self.lib + p as usize * self.page) as *const u8;
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), self.page);
        }
    }

    /// The library's view of page `p`, read-only.
    pub fn page_copy(&self, p: u32) -> Vec<u8> {
        assert!(p < self.pages());
        // SAFETY: the page lies inside the library's view; a concurrent application write is
        // a data race of the program, which the consistency model leaves undefined anyway, so
        // the copy is read bytewise through a raw pointer.
        unsafe {
            let src = (self.lib + p as usize * self.page) as *const u8;
            let mut v = Vec::with_capacity(self.page);
            std::ptr::copy_nonoverlapping(src, v.as_mut_ptr(), self.page);
            v.set_len(self.page);
            v
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: both mappings are owned by this value and unused from here on.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.bytes);
            libc::munmap(self.lib as *mut libc::c_void, self.bytes);
        }
    }
}

fn io(what: &'static str, source: std::io::Error) -> DsmError {
    DsmError::Io { what, source }
}
