//! The address space the engine maps regions into: the seam between the engine and whoever
//! owns the memory — the calling process now (`SelfSpace`), a traced process later (the process
//! monitor implements the same trait by injecting the same system calls into its tracee).

use crate::error::{os, CkptError, Result};
use kioku_pool::Medium;
use kioku_track::{PageTracker, Tracker};

/// Map, remap and track memory of one process.
pub trait AddressSpace {
    /// Process id (for messages and for trackers of other processes).
    fn pid(&self) -> i32;
    /// Reserves `len` bytes of address space (no access), at `addr` exactly when given (failing
    /// with `AddressTaken` when any of it is in use), else where the kernel chooses.
    fn reserve(&mut self, name: &str, addr: Option<usize>, len: usize) -> Result<usize>;
    /// Maps pool bytes `[off, off+len)` of `medium` shared and writable at `addr`, replacing the
    /// reservation (or an earlier pool mapping) there.
    fn map_pool(&mut self, addr: usize, len: usize, medium: &dyn Medium, off: u64) -> Result<()>;
    /// Turns `[addr, addr+len)` back into a reservation (its pool mapping goes away).
    fn unmap_to_reserved(&mut self, addr: usize, len: usize) -> Result<()>;
    /// Releases a reservation entirely.
    fn release(&mut self, addr: usize, len: usize) -> Result<()>;
    /// A written-page tracker for this space.
    fn tracker(&mut self) -> Result<Box<dyn PageTracker>>;
    /// Whether recovery may map regions wherever `reserve` places them (the space's user finds
    /// them by name) instead of at the addresses they had. Default: no.
    fn relocatable(&self) -> bool {
        false
    }
    /// Drops the page mappings of `[addr, addr+len)` (pool pages mapped by `map_pool`; their
    /// bytes stay in the pool), so that pages the engine touched there stop counting as the
    /// space's resident memory. For a space whose regions only the engine's owner reads (a
    /// monitor's shadow of another process); the default does nothing.
    fn release_pages(&mut self, addr: usize, len: usize) -> Result<()> {
        let _ = (addr, len);
        Ok(())
    }
}

/// The calling process.
#[derive(Debug, Default)]
pub struct SelfSpace;

/// mmap(2) failing with MAP_FAILED → `Err`.
fn mmap(addr: usize, len: usize, prot: i32, flags: i32) -> std::io::Result<usize> {
    // SAFETY: anonymous mapping; with MAP_FIXED callers own the range (see each call site).
    let p = unsafe { libc::mmap(addr as *mut libc::c_void, len, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(p as usize)
    }
}

const RESERVE_FLAGS: i32 = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;

impl AddressSpace for SelfSpace {
    fn pid(&self) -> i32 {
        std::process::id() as i32
    }

    fn reserve(&mut self, name: &str, addr: Option<usize>, len: usize) -> Result<usize> {
        match addr {
            None => mmap(0, len, libc::PROT_NONE, RESERVE_FLAGS).map_err(|source| CkptError::Os {
                what: "reserve address space",
                source,
            }),
            Some(a) => match mmap(
                a,
                len,
                libc::PROT_NONE,
                RESERVE_FLAGS | libc::MAP_FIXED_NOREPLACE,
            ) {
                Ok(got) if got == a => Ok(a),
                Ok(got) => {
                    // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat it as a hint.
                    // SAFETY: `got` is the mapping just made, owned by nobody else.
                    unsafe { libc::munmap(got as *mut libc::c_void, len) };
                    Err(CkptError::AddressTaken {
                        name: name.into(),
                        addr: a,
                        len,
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Err(CkptError::AddressTaken {
                    name: name.into(),
                    addr: a,
                    len,
                }),
                Err(source) => Err(CkptError::Os {
                    what: "reserve address space",
                    source,
                }),
            },
        }
    }

    fn map_pool(&mut self, addr: usize, len: usize, medium: &dyn Medium, off: u64) -> Result<()> {
        // The engine only passes ranges inside reservations it made and owns (`fixed` replaces).
        let m = medium.map_range(addr as *mut u8, off, len as u64, true)?;
        // The region's lifetime is managed by the engine (unmap_to_reserved / release), not by
        // the RAII guard.
        let _ = m.into_raw();
        Ok(())
    }

    fn unmap_to_reserved(&mut self, addr: usize, len: usize) -> Result<()> {
        // MAP_FIXED over our own reservation: atomically replaces the pool pages with an
        // inaccessible reservation, so nothing else can be mapped into the hole.
        mmap(addr, len, libc::PROT_NONE, RESERVE_FLAGS | libc::MAP_FIXED)
            .map(|_| ())
            .map_err(|source| CkptError::Os {
                what: "unmap region",
                source,
            })
    }

    fn release(&mut self, addr: usize, len: usize) -> Result<()> {
        // SAFETY: the engine releases only reservations it made and no longer uses.
        if unsafe { libc::munmap(addr as *mut libc::c_void, len) } != 0 {
            return Err(os("munmap"));
        }
        Ok(())
    }

    fn tracker(&mut self) -> Result<Box<dyn PageTracker>> {
        Ok(Box::new(Tracker::new()?))
    }
}

/// The calling process, with regions that recovery may place anywhere (the caller finds
/// them by name): for libraries whose users get region pointers after recovery, where the
/// old addresses may since have been taken (address-space randomisation, other libraries'
/// mappings made earlier in the new process).
#[derive(Debug, Default)]
pub struct MovableSelfSpace(SelfSpace);

impl AddressSpace for MovableSelfSpace {
    fn pid(&self) -> i32 {
        self.0.pid()
    }
    fn reserve(&mut self, name: &str, addr: Option<usize>, len: usize) -> Result<usize> {
        self.0.reserve(name, addr, len)
    }
    fn map_pool(&mut self, addr: usize, len: usize, medium: &dyn Medium, off: u64) -> Result<()> {
        self.0.map_pool(addr, len, medium, off)
    }
    fn unmap_to_reserved(&mut self, addr: usize, len: usize) -> Result<()> {
        self.0.unmap_to_reserved(addr, len)
    }
    fn release(&mut self, addr: usize, len: usize) -> Result<()> {
        self.0.release(addr, len)
    }
    fn tracker(&mut self) -> Result<Box<dyn PageTracker>> {
        self.0.tracker()
    }
    fn relocatable(&self) -> bool {
        true
    }
}
