//! `shm`: a file on tmpfs (/dev/shm). Its pages *are* the file, so a store through a shared
//! mapping is the file's content as soon as the CPU performs it, and any later process that maps
//! the file sees it. That survives the death of every process using the pool — and nothing
//! more: tmpfs is gone after a power loss or reboot.
//!
//! Hence `flush` and `drain` only have to keep the compiler and CPU from reordering stores
//! across them; there is nothing to write back.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{fence, Ordering};

use super::mapping::{is_tmpfs, MappedFile, Mapping};
use super::{Medium, MediumError, MediumKind, Result};

/// A file on tmpfs: survives process death, not power loss.
#[derive(Debug)]
pub struct ShmMedium {
    mem: MappedFile,
}

impl ShmMedium {
    /// Maps all of `file` (found at `path`), which must be on tmpfs (`MediumError::NotTmpfs`
    /// otherwise: on a disk filesystem these no-op flushes would not make anything durable).
    pub fn open(file: File, path: &Path) -> Result<Self> {
        if !is_tmpfs(&file).map_err(|e| MediumError::io("fstatfs", path, e))? {
            return Err(MediumError::NotTmpfs {
                path: path.display().to_string(),
            });
        }
        Ok(ShmMedium {
            mem: MappedFile::open(file, path, libc::MAP_SHARED)?,
        })
    }

    /// Where the file was opened.
    pub fn path(&self) -> &Path {
        self.mem.path()
    }
}

impl Medium for ShmMedium {
    fn kind(&self) -> MediumKind {
        MediumKind::Shm
    }

    fn len(&self) -> u64 {
        self.mem.len()
    }

    fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    fn fd(&self) -> RawFd {
        self.mem.file().as_raw_fd()
    }

    fn page_cache_file(&self) -> Option<&File> {
        Some(self.mem.file())
    }

    fn flush(&self, off: u64, len: u64) -> Result<()> {
        self.mem.checked_ptr(off, len)?;
        // Stores before the flush must not be moved after it by the compiler or CPU.
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn drain(&self) -> Result<()> {
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn grow(&mut self, new_len: u64) -> Result<()> {
        // fsync on tmpfs does nothing: the size change is visible to other processes at once.
        self.mem.grow(new_len, false, false, false)
    }

    fn grow_sparse(&mut self, new_len: u64) -> Result<()> {
        self.mem.grow(new_len, false, false, true)
    }

    fn move_clear_of(&mut self, avoid: &[std::ops::Range<usize>]) -> Result<()> {
        self.mem.move_clear_of(avoid)
    }

    fn map_range(&self, addr: *mut u8, off: u64, len: u64, fixed: bool) -> Result<Mapping> {
        self.mem.map_range(addr, off, len, fixed)
    }
}
