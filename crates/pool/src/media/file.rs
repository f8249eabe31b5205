//! `file`: an ordinary file on a disk filesystem, mapped MAP_SHARED and made durable by
//! write-back and fdatasync.
//!
//! `flush` starts write-back of the file pages covering a large range (`sync_file_range` with
//! SYNC_FILE_RANGE_WRITE; small ranges wait for the drain) and does not wait; `drain` is `fdatasync`, which waits for every
//! page under write-back, writes whatever is still dirty, and flushes the device's cache.
//! Dirty state lives on the page-cache page, not on the mapping (a write through a shared
//! mapping marks the page dirty at its write fault, and write-back write-protects it again),
//! so pages dirtied through any shared mapping of the file — such as one made by `map_range`
//! — are covered. Splitting the two lets one `drain` (one device cache flush) cover many
//! flushed ranges, as a commit does.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use super::mapping::{is_tmpfs, MappedFile, Mapping};
use super::{Medium, MediumError, MediumKind, Result};

/// Ranges at least this long start their write-back at `flush`; shorter ones wait for `drain`.
const EARLY_WRITEBACK_MIN: u64 = 256 << 10;

/// An ordinary file, durable through write-back and fdatasync.
#[derive(Debug)]
pub struct FileMedium {
    mem: MappedFile,
    /// Holes were punched since the last drain: that drain makes the file's block map durable
    /// too (`fsync`, not `fdatasync`), so a zeroed range stays zero after a crash.
    punched: std::sync::atomic::AtomicBool,
}

impl FileMedium {
    /// Maps all of `file` (found at `path`), which must not be on tmpfs: a tmpfs file would
    /// look durable here but vanish with the machine (`MediumError::TmpfsNotDurable`).
    pub fn open(file: File, path: &Path) -> Result<Self> {
        if is_tmpfs(&file).map_err(|e| MediumError::io("fstatfs", path, e))? {
            return Err(MediumError::TmpfsNotDurable {
                path: path.display().to_string(),
            });
        }
        Ok(FileMedium {
            mem: MappedFile::open(file, path, libc::MAP_SHARED)?,
            punched: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Where the file was opened.
    pub fn path(&self) -> &Path {
        self.mem.path()
    }
}

impl Medium for FileMedium {
    fn kind(&self) -> MediumKind {
        MediumKind::File
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
        // `drain` (fdatasync) writes every dirty page of the file anyway; starting write-back
        // early only pays for large ranges. For many small scattered ranges (a checkpoint's
        // dirty pages) one system call each would cost more than it overlaps.
        if len < EARLY_WRITEBACK_MIN {
            return Ok(());
        }
        // SAFETY: sync_file_range on our own descriptor; no memory is passed.
        let rc = unsafe {
            libc::sync_file_range(
                self.mem.file().as_raw_fd(),
                off as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if rc != 0 {
            return Err(MediumError::io(
                "sync_file_range",
                self.mem.path(),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    fn drain(&self) -> Result<()> {
        let fd = self.mem.file().as_raw_fd();
        if self
            .punched
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            // SAFETY: fsync on our own descriptor; no memory is passed.
            if unsafe { libc::fsync(fd) } != 0 {
                return Err(MediumError::io(
                    "fsync",
                    self.mem.path(),
                    std::io::Error::last_os_error(),
                ));
            }
            return Ok(());
        }
        // SAFETY: fdatasync on our own descriptor; no memory is passed.
        if unsafe { libc::fdatasync(fd) } != 0 {
            return Err(MediumError::io(
                "fdatasync",
                self.mem.path(),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    fn grow(&mut self, new_len: u64) -> Result<()> {
        self.mem.grow(new_len, true, false, false)
    }

    fn grow_sparse(&mut self, new_len: u64) -> Result<()> {
        self.mem.grow(new_len, true, false, true)
    }

    fn zero(&self, off: u64, len: u64) -> Result<()> {
        self.mem.checked_ptr(off, len)?;
        if len == 0 {
            return Ok(());
        }
        match super::mapping::punch_hole(self.fd(), off, len) {
            Ok(true) => {
                self.punched
                    .store(true, std::sync::atomic::Ordering::Release);
                Ok(())
            }
            Ok(false) => {
                // SAFETY: the range was checked against the live mapping above; the caller owns
                // these bytes while it zeroes them.
                unsafe { std::ptr::write_bytes(self.as_ptr().add(off as usize), 0, len as usize) };
                self.flush(off, len)
            }
            Err(e) => Err(MediumError::io("fallocate(PUNCH_HOLE)", self.mem.path(), e)),
        }
    }

    fn move_clear_of(&mut self, avoid: &[std::ops::Range<usize>]) -> Result<()> {
        self.mem.move_clear_of(avoid)
    }

    fn map_range(&self, addr: *mut u8, off: u64, len: u64, fixed: bool) -> Result<Mapping> {
        self.mem.map_range(addr, off, len, fixed)
    }
}
