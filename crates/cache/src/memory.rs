//! Item memory: one anonymous mapping, aligned to 2 MiB so that each slab page of 2 MiB can be
//! backed by one huge page.

use std::io;
use std::ptr::NonNull;

use crate::slab::Memory;

const HUGE: usize = 2 << 20;

/// An anonymous mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    mem: Memory,
    map_base: *mut libc::c_void,
    map_len: usize,
}

// SAFETY: the mapping is plain memory; access to its contents is synchronised by its users.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself is never mutated after creation.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Reserve `len` bytes (populated lazily, as the slabs are used).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        let map_len = len + HUGE;
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choice.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let aligned = (p as usize).next_multiple_of(HUGE);
        let base = NonNull::new(aligned as *mut u8).expect("mmap never returns null on success");
        Ok(Mapping {
            mem: Memory { base, len },
            map_base: p,
            map_len,
        })
    }

    /// The memory.
    pub fn memory(&self) -> Memory {
        self.mem
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping we created; the slabs using it were dropped before (the owner keeps
        // the mapping alive as long as the store).
        unsafe { libc::munmap(self.map_base, self.map_len) };
    }
}
