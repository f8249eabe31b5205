//! Persistence media: how bytes written through a mapping become durable.
//!
//! Every medium is a file descriptor (a file on a DAX filesystem, an ordinary file, a file in
//! /dev/shm, or a memfd for the simulator) plus one shared mapping of it. Callers address the
//! medium by *offset*: `flush` writes back a range, `drain` orders everything flushed before it,
//! `persist` is both. Offsets rather than pointers keep durability independent of where a range
//! happens to be mapped (the checkpoint engine maps pool pages at application addresses).
//!
//! Ordering points — every `flush` and every `drain` — are what the `sim` medium counts so that
//! tests can cut the power at each of them.

use std::fmt;
use std::fs::File;
use std::os::fd::RawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub mod dax;
pub mod file;
pub mod mapping;
pub mod shm;
pub mod sim;

pub use mapping::Mapping;

/// The four kinds of medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediumKind {
    /// Persistent memory on a DAX filesystem, mapped with MAP_SYNC; durable by cache-line
    /// write-back (clwb / clflushopt) and sfence from user space.
    Dax,
    /// An ordinary file; durable by write-back and fdatasync (and fsync when its size changes).
    File,
    /// A file on tmpfs (/dev/shm): survives the death of processes, not of the machine.
    Shm,
    /// Simulated persistent memory for tests: keeps only what a power cut would keep.
    Sim,
}

impl MediumKind {
    /// The number stored in the pool header.
    pub fn code(self) -> u32 {
        match self {
            MediumKind::Dax => 1,
            MediumKind::File => 2,
            MediumKind::Shm => 3,
            MediumKind::Sim => 4,
        }
    }

    /// The kind for a header code, if known.
    pub fn from_code(code: u32) -> Option<Self> {
        Some(match code {
            1 => MediumKind::Dax,
            2 => MediumKind::File,
            3 => MediumKind::Shm,
            4 => MediumKind::Sim,
            _ => return None,
        })
    }

    /// Lower-case name, as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MediumKind::Dax => "dax",
            MediumKind::File => "file",
            MediumKind::Shm => "shm",
            MediumKind::Sim => "sim",
        }
    }

    /// What survives on this medium, for messages shown when it is selected.
    pub fn durability(self) -> &'static str {
        match self {
            MediumKind::Dax => "survives power loss (persistent memory)",
            MediumKind::File => "survives power loss (written back with fdatasync)",
            MediumKind::Shm => "survives process death, NOT power loss or reboot (tmpfs)",
            MediumKind::Sim => "simulated: survives only what a power cut would keep",
        }
    }
}

impl fmt::Display for MediumKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MediumKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "dax" => Ok(MediumKind::Dax),
            "file" => Ok(MediumKind::File),
            "shm" => Ok(MediumKind::Shm),
            "sim" => Ok(MediumKind::Sim),
            other => Err(format!(
                "unknown medium '{other}' (choose dax, file, shm or sim)"
            )),
        }
    }
}

/// How the caller asks for a medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MediumChoice {
    /// dax when the file's filesystem supports MAP_SYNC, shm when it is on tmpfs, else file.
    #[default]
    Auto,
    /// Exactly this kind, or a `MediumError` saying why it cannot be used here.
    Exactly(MediumKind),
}

/// Errors of the media layer.
#[derive(Debug, thiserror::Error)]
pub enum MediumError {
    #[error("{path}: the filesystem does not support MAP_SYNC (not DAX); put the pool on a DAX-mounted pmem filesystem or choose --medium file")]
    DaxUnsupported { path: String },
    #[error("{path}: medium shm needs a file on tmpfs (e.g. /dev/shm); choose --medium file for a disk file")]
    NotTmpfs { path: String },
    #[error("{path}: is on tmpfs, which does not survive power loss; choose --medium shm to accept that")]
    TmpfsNotDurable { path: String },
    #[error("{op} failed on {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("range {off}+{len} is outside the medium (length {size})")]
    OutOfRange { off: u64, len: u64, size: u64 },
    #[error(
        "the simulated medium lost power at ordering point {point}; reopen it from a crash image"
    )]
    PowerCut { point: u64 },
    #[error("{path}: cannot shrink the medium from {len} to {new_len} bytes; media only grow")]
    Shrink {
        path: String,
        len: u64,
        new_len: u64,
    },
    #[error("offset {off} is not a multiple of {align} (the page size); ranges are mapped by whole pages")]
    Misaligned { off: u64, align: u64 },
    #[error("{path}: medium sim cannot hold a pool file; tests build a kioku_pool::media::sim::SimMedium directly")]
    SimNotOpenable { path: String },
    #[error("{pending} cache lines are flushed but not drained; exhaustive crash images need at most {limit} (use a random crash mode instead)")]
    TooManyPendingLines { pending: usize, limit: usize },
    #[error("crash image {index} does not exist; there are {count}")]
    NoSuchCrashImage { index: u64, count: u64 },
}

impl MediumError {
    /// An `Io` error of system call `op` on the file at `path`.
    pub fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        MediumError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, MediumError>;

/// One persistence medium holding one pool file.
///
/// Contract for implementations: `as_ptr()` maps `[0, len())` shared and writable; after
/// `flush(off, len)` and a later `drain()`, every byte stored to that range before the flush is
/// durable (for `shm`: visible to a later process). A single aligned 8-byte store is
/// failure-atomic on every medium.
pub trait Medium: Send + Sync + fmt::Debug {
    /// Which kind this is.
    fn kind(&self) -> MediumKind;
    /// Current length in bytes.
    fn len(&self) -> u64;
    /// True when the medium holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Start of the shared mapping of `[0, len())`. Valid until the next `grow`.
    fn as_ptr(&self) -> *mut u8;
    /// The descriptor behind the mapping, for mapping ranges elsewhere (see `map_range`).
    fn fd(&self) -> RawFd;
    /// Start writing back `[off, off+len)`; unordered until `drain`.
    fn flush(&self, off: u64, len: u64) -> Result<()>;
    /// Wait until everything flushed so far is durable (sfence / fdatasync).
    fn drain(&self) -> Result<()>;
    /// `flush` then `drain`.
    fn persist(&self, off: u64, len: u64) -> Result<()> {
        self.flush(off, len)?;
        self.drain()
    }
    /// Copy `src` to `off` and make it durable, with non-temporal stores where the medium
    /// benefits (dax); the default is memcpy + persist.
    fn write_persist(&self, off: u64, src: &[u8]) -> Result<()> {
        check_range(off, src.len() as u64, self.len())?;
        // SAFETY: the range was checked against the mapping length above; `src` cannot overlap
        // the mapping mutably because callers hold `&[u8]` borrowed elsewhere.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(off as usize), src.len())
        };
        self.persist(off, src.len() as u64)
    }
    /// Gives `[off, off+len)` back to the file system (a hole, where it can punch one): the
    /// range reads as zeros at once and takes no memory or disk. Nothing orders it: after a
    /// crash the range may read as zeros or as before, so it is only for bytes no reader needs
    /// any more. `off` and `len` must be multiples of the page size.
    fn discard(&self, off: u64, len: u64) -> Result<()> {
        if hole_or_zeros(self, off, len)? {
            self.persist(off, len)?;
        }
        Ok(())
    }
    /// Extend to `new_len` bytes (zero-filled), durably; the mapping may move.
    fn grow(&mut self, new_len: u64) -> Result<()>;
    /// `grow` without reserving space for the new bytes where the file system allows (a
    /// sparse file): they take memory or disk only once written, and a store into them must
    /// be preceded by [`Medium::allocate`] (else a full medium shows as SIGBUS). The default
    /// grows as `grow` does.
    fn grow_sparse(&mut self, new_len: u64) -> Result<()> {
        self.grow(new_len)
    }
    /// Reserves the space of `[off, off+len)` (where the file system keeps holes), so that
    /// stores there cannot fail for want of it: a full medium fails here, with `ENOSPC`.
    fn allocate(&self, off: u64, len: u64) -> Result<()> {
        check_range(off, len, self.len())?;
        mapping::allocate(self.fd(), off, len).map_err(|e| pool_file_error("fallocate", e))
    }
    /// Makes `[off, off+len)` read as zeros, as a hole where the file system keeps holes (it
    /// then takes no memory or disk). Ordered like a store and `flush`: durable after the next
    /// `drain`. `off` and `len` must be multiples of the page size.
    fn zero(&self, off: u64, len: u64) -> Result<()> {
        if hole_or_zeros(self, off, len)? {
            self.flush(off, len)?;
        }
        Ok(())
    }
    /// The file whose page cache *is* this medium's bytes (`shm`, `file`: a store through the
    /// shared mapping is the file's content at once), or `None` (the default: `dax` and `sim`,
    /// whose bytes are reached through the mapping). With a file, `read_at`, `write_at` and
    /// `copy_range` go through it (`pread`, `pwrite`, `copy_file_range`): the pages are not
    /// mapped into this process (no page fault, nothing to unmap afterwards), and a hole a
    /// write lands in gets its space from the write itself.
    fn page_cache_file(&self) -> Option<&File> {
        None
    }
    /// Reads `[off, off+buf.len())` into `buf`: through the page-cache file where there is one
    /// (see [`Medium::page_cache_file`]), else through the mapping.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        check_range(off, buf.len() as u64, self.len())?;
        if let Some(file) = self.page_cache_file() {
            return file
                .read_exact_at(buf, off)
                .map_err(|e| pool_file_error("pread", e));
        }
        // SAFETY: the range was checked against the mapping length above; `buf` is our own
        // memory, outside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(off as usize),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }
    /// Stores `src` at `off`, ordered like stores (durable after `flush` and `drain`). A hole
    /// there gets its space first (a full medium fails with `ENOSPC`, never as SIGBUS).
    /// Through the page-cache file where there is one (`pwrite`, see
    /// [`Medium::page_cache_file`]), else allocated, then copied through the mapping.
    fn write_at(&self, off: u64, src: &[u8]) -> Result<()> {
        check_range(off, src.len() as u64, self.len())?;
        if let Some(file) = self.page_cache_file() {
            return file
                .write_all_at(src, off)
                .map_err(|e| pool_file_error("pwrite", e));
        }
        self.allocate(off, src.len() as u64)?;
        // SAFETY: the range was checked against the mapping length above; `src` is borrowed
        // elsewhere, so it does not overlap the range stored into.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(off as usize), src.len())
        };
        Ok(())
    }
    /// Copies `[src, src+len)` to `[dst, dst+len)` (ranges that do not overlap), ordered like
    /// stores to `dst`: durable after `flush(dst, len)` and `drain`. A hole at `dst` gets its
    /// space first (a full medium fails with `ENOSPC`, never as SIGBUS). Inside the kernel
    /// where there is a page-cache file (`copy_file_range`, see [`Medium::page_cache_file`]):
    /// neither range is mapped into this process; else allocated, then copied through the
    /// mapping.
    fn copy_range(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        check_range(src, len, self.len())?;
        check_range(dst, len, self.len())?;
        if let Some(file) = self.page_cache_file() {
            if src < dst + len && dst < src + len {
                let overlap = std::io::Error::from_raw_os_error(libc::EINVAL);
                return Err(pool_file_error("copy_file_range", overlap));
            }
            return mapping::copy_range(file, src, dst, len)
                .map_err(|e| pool_file_error("copy_file_range", e));
        }
        self.allocate(dst, len)?;
        // SAFETY: both ranges were checked against the mapping length; the caller guarantees
        // they do not overlap and that no slice of either is alive.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(src as usize),
                self.as_ptr().add(dst as usize),
                len as usize,
            )
        };
        Ok(())
    }
    /// The parts of `[off, off+len)` that hold data, as `(start, end)` offsets; the rest are
    /// holes, which read as zeros (reading them through the mapping would fill them).
    fn data_extents(&self, off: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        check_range(off, len, self.len())?;
        mapping::data_extents(self.fd(), off, len)
            .map_err(|e| pool_file_error("lseek(SEEK_DATA)", e))
    }
    /// Drops this process's page mappings of `[off, off+len)` of the main mapping
    /// (`MADV_DONTNEED`; the bytes stay in the file): pages read or written through it stop
    /// counting as this process's resident memory. Nothing else changes.
    fn release_pages(&self, off: u64, len: u64) -> Result<()> {
        check_range(off, len, self.len())?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside the live shared mapping (checked above); dropping the
        // page mappings of a shared file mapping leaves its contents in the file.
        let rc = unsafe {
            libc::madvise(
                self.as_ptr().add(off as usize).cast(),
                len as usize,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            return Err(pool_file_error(
                "madvise(MADV_DONTNEED)",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
    /// Moves the mapping of `[0, len())` to addresses outside every range of `avoid` (no-op if
    /// it is already clear of them); pointers from `as_ptr` become stale, as after `grow`.
    fn move_clear_of(&mut self, avoid: &[std::ops::Range<usize>]) -> Result<()>;
    /// Map `[off, off+len)` of the medium at `addr` (MAP_FIXED when `fixed`), with the flags
    /// this medium needs (MAP_SYNC for dax). Stores through the returned mapping are made
    /// durable by `flush`/`drain` with the same offsets. `off` must be a multiple of the page
    /// size. Without `fixed`, `addr` is only a hint. With `fixed`, the caller must own the
    /// page-aligned range at `addr` with nothing else referring into it: whatever was mapped
    /// there is replaced.
    fn map_range(&self, addr: *mut u8, off: u64, len: u64, fixed: bool) -> Result<Mapping>;
}

/// Makes `[off, off+len)` of `m` read as zeros: a punched hole where the file system keeps
/// holes, else zeros stored through the mapping. True when zeros were stored, which the caller
/// still has to order (`discard` persists them, `zero` flushes them).
fn hole_or_zeros<M: Medium + ?Sized>(m: &M, off: u64, len: u64) -> Result<bool> {
    check_range(off, len, m.len())?;
    if len == 0
        || mapping::punch_hole(m.fd(), off, len)
            .map_err(|e| pool_file_error("fallocate(PUNCH_HOLE)", e))?
    {
        return Ok(false);
    }
    // No holes on this file system: zeros take the bytes' place.
    // SAFETY: the range was checked against the mapping length above, and the caller owns
    // these bytes (nothing borrows them while they are zeroed).
    unsafe { std::ptr::write_bytes(m.as_ptr().add(off as usize), 0, len as usize) };
    Ok(true)
}

/// An I/O error of the pool file behind a medium.
fn pool_file_error(op: &'static str, source: std::io::Error) -> MediumError {
    MediumError::Io {
        op,
        path: "the pool file".into(),
        source,
    }
}

/// Fails unless `[off, off+len)` lies inside a medium of `size` bytes.
pub fn check_range(off: u64, len: u64, size: u64) -> Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(MediumError::OutOfRange { off, len, size }),
    }
}

/// Maps the already opened (and locked) pool file `file`, found at `path`, on the chosen medium.
/// Its length is the file's current length. `Auto` picks dax when MAP_SYNC works, shm on tmpfs,
/// else file, and logs the choice once (tracing, info). `Exactly(Sim)` is refused here: the
/// simulator is built with `sim::SimMedium` directly.
///
/// A zero-length file is accepted: the medium then maps nothing (`len() == 0`) until `grow`.
pub fn open_medium(file: File, path: &Path, choice: MediumChoice) -> Result<Box<dyn Medium>> {
    let (medium, reason): (Box<dyn Medium>, &str) = match choice {
        MediumChoice::Auto => {
            if dax::map_sync_supported(&file, path)? {
                (
                    Box::new(dax::DaxMedium::open(file, path)?),
                    "auto: the filesystem accepts MAP_SYNC",
                )
            } else if mapping::is_tmpfs(&file).map_err(|e| MediumError::io("fstatfs", path, e))? {
                (
                    Box::new(shm::ShmMedium::open(file, path)?),
                    "auto: no MAP_SYNC, file is on tmpfs",
                )
            } else {
                (
                    Box::new(self::file::FileMedium::open(file, path)?),
                    "auto: no MAP_SYNC, not tmpfs",
                )
            }
        }
        MediumChoice::Exactly(MediumKind::Dax) => {
            (Box::new(dax::DaxMedium::open(file, path)?), "requested")
        }
        MediumChoice::Exactly(MediumKind::File) => (
            Box::new(self::file::FileMedium::open(file, path)?),
            "requested",
        ),
        MediumChoice::Exactly(MediumKind::Shm) => {
            (Box::new(shm::ShmMedium::open(file, path)?), "requested")
        }
        MediumChoice::Exactly(MediumKind::Sim) => {
            return Err(MediumError::SimNotOpenable {
                path: path.display().to_string(),
            })
        }
    };
    let kind = medium.kind();
    if kind == MediumKind::Dax {
        tracing::info!(
            path = %path.display(),
            medium = kind.name(),
            durability = kind.durability(),
            flush_instruction = dax::flush_instruction(),
            reason,
            "pool medium selected"
        );
    } else {
        tracing::info!(
            path = %path.display(),
            medium = kind.name(),
            durability = kind.durability(),
            reason,
            "pool medium selected"
        );
    }
    Ok(medium)
}
