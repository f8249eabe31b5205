//! One mmap'd range owned by Rust, and the few system calls every medium shares.
//!
//! `Mapping` is the only place that calls `mmap`/`munmap`/`mremap`; `MappedFile` (crate-private)
//! is a descriptor plus its shared mapping of `[0, len)`, which every medium is built on.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;

use super::{check_range, MediumError, Result};

// Offsets and lengths are u64 on the medium side and usize for pointers; the conversion is
// lossless only on 64-bit targets, which is all kioku supports.
const _: () = assert!(usize::BITS == 64, "kioku-pool needs a 64-bit target");

/// `mmap` sharing type that makes the kernel reject unknown flags instead of ignoring them;
/// required for `MAP_SYNC` (linux/mman.h, not in Debian 12's headers for every libc).
pub const MAP_SHARED_VALIDATE: i32 = 0x03;
/// `mmap` flag: a write fault on a DAX file completes only after the file's metadata for that
/// page is durable, so cache-line write-back alone makes stores durable.
pub const MAP_SYNC: i32 = 0x80000;
/// `statfs.f_type` of tmpfs (linux/magic.h).
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The system page size, asked once.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size)
            .ok()
            .filter(|s| s.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// An owned mmap'd range `[ptr, ptr+len)`, unmapped on drop.
///
/// An empty mapping (length 0) owns nothing and has a dangling, non-null pointer; it exists so
/// that a zero-length medium needs no special case.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping only hands out raw pointers; it owns an address range, not Rust values, and
// munmap may be called from any thread.
unsafe impl Send for Mapping {}
// SAFETY: shared access to a Mapping only reads its (ptr, len) fields.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A mapping of nothing.
    pub fn empty() -> Self {
        Mapping {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// Maps `len` bytes of `fd` from offset `off` (a multiple of the page size), readable and
    /// writable, with sharing flags `share` (`MAP_SHARED`, or `MAP_SHARED_VALIDATE | MAP_SYNC`).
    /// `hint` (an address, 0 for none) is only a hint: the kernel places the mapping where it
    /// likes if the address is taken. A zero `len` gives an empty mapping without a system call.
    pub fn map(
        fd: BorrowedFd<'_>,
        off: u64,
        len: usize,
        share: i32,
        hint: usize,
    ) -> io::Result<Self> {
        if share & libc::MAP_FIXED != 0 {
            // Replacing mappings is `map_fixed`'s job, which is unsafe for that reason.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: without MAP_FIXED (refused above) the kernel never replaces an existing
        // mapping, so no memory the program already uses can change under it.
        unsafe { Self::map_raw(fd, off, len, share, hint as *mut u8, 0) }
    }

    /// Like `map`, but at exactly `addr` (MAP_FIXED), replacing whatever was mapped there.
    ///
    /// # Safety
    /// `[addr, addr+len)` must be page-aligned address space that the caller owns and that no
    /// live Rust reference or other owner points into: its old contents are discarded.
    pub unsafe fn map_fixed(
        addr: *mut u8,
        fd: BorrowedFd<'_>,
        off: u64,
        len: usize,
        share: i32,
    ) -> io::Result<Self> {
        // SAFETY: the caller guarantees the range at `addr` may be replaced.
        unsafe { Self::map_raw(fd, off, len, share, addr, libc::MAP_FIXED) }
    }

    /// # Safety
    /// With `MAP_FIXED` in `extra`, the same as `map_fixed`.
    unsafe fn map_raw(
        fd: BorrowedFd<'_>,
        off: u64,
        len: usize,
        share: i32,
        addr: *mut u8,
        extra: i32,
    ) -> io::Result<Self> {
        if len == 0 {
            return Ok(Self::empty());
        }
        let off = libc::off_t::try_from(off)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: mmap only creates a new mapping; the caller vouches for MAP_FIXED.
        let ptr = unsafe {
            libc::mmap(
                addr.cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                share | extra,
                fd.as_raw_fd(),
                off,
            )
        };
        Self::owning(ptr, len)
    }

    /// Ownership of what mmap returned for `len` bytes (its error if it failed).
    fn owning(ptr: *mut libc::c_void, len: usize) -> io::Result<Self> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?,
            len,
        })
    }

    /// Start of the range.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the range in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a mapping of nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Resizes the mapping to `new_len` bytes with mremap; it may move. Both lengths must be
    /// non-zero (an empty mapping has no pages to resize).
    pub fn remap(&mut self, new_len: usize) -> io::Result<()> {
        if self.len == 0 || new_len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `ptr, len` is a live mapping owned by self; MREMAP_MAYMOVE without
        // MREMAP_FIXED never touches other mappings. Pointers into the old range become stale,
        // which the media document ("valid until the next grow").
        let ptr = unsafe {
            libc::mremap(
                self.ptr.as_ptr().cast(),
                self.len,
                new_len,
                libc::MREMAP_MAYMOVE,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.ptr =
            NonNull::new(ptr.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        self.len = new_len;
        Ok(())
    }

    /// Moves the mapping (contents and all, with mremap) to an address outside every range of
    /// `avoid`; a no-op when it already lies outside them. A process restoring memory at fixed
    /// addresses needs this when the kernel happened to place the pool where a region must go.
    /// Pointers into the old range become stale, as after `remap`.
    pub fn move_clear_of(&mut self, avoid: &[Range<usize>]) -> io::Result<()> {
        let overlaps = |start: usize, len: usize| {
            avoid
                .iter()
                .any(|r| start < r.end && r.start < start.saturating_add(len))
        };
        if self.len == 0 || !overlaps(self.ptr.as_ptr() as usize, self.len) {
            return Ok(());
        }
        // First right beside each range to avoid (free there or not, the kernel says at once);
        // a hole as large as a whole region is then crossed in one step, not in pool-sized ones.
        let page = page_size();
        let beside = avoid.iter().flat_map(|r| {
            let after = r.end.checked_add(page - 1).map(|e| e & !(page - 1));
            let before = (r.start & !(page - 1)).checked_sub(self.len);
            [after, before]
        });
        let mut found = beside
            .flatten()
            .filter(|&at| at != 0 && !overlaps(at, self.len))
            .find_map(|at| Self::reserve_at(at, self.len));
        // Else ask the kernel for free places until one lies clear of `avoid`; the rejected
        // ones stay reserved meanwhile so that it offers a different one each time.
        let mut rejected = Vec::new();
        for _ in 0..64 {
            if found.is_some() {
                break;
            }
            let spot = Self::reserve_anywhere(self.len)?;
            if overlaps(spot.as_ptr() as usize, spot.len) {
                rejected.push(spot);
            } else {
                found = Some(spot);
            }
        }
        drop(rejected);
        let spot = found.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let (to, len) = spot.into_raw();
        // SAFETY: `ptr, len` is a live mapping owned by self and `to, len` a PROT_NONE
        // reservation owned here (taken from `spot`); MREMAP_FIXED replaces only that
        // reservation. Pointers into the old range become stale, as the media document.
        let moved = unsafe {
            libc::mremap(
                self.ptr.as_ptr().cast(),
                self.len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                to.cast::<libc::c_void>(),
            )
        };
        if moved == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            // SAFETY: the reservation is still ours (mremap failed, so nothing replaced it).
            drop(unsafe { Self::from_raw(to, len) });
            return Err(err);
        }
        self.ptr =
            NonNull::new(moved.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        Ok(())
    }

    /// `len` bytes of inaccessible address space at exactly `at`, if nothing is mapped there.
    fn reserve_at(at: usize, len: usize) -> Option<Self> {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping: it fails instead.
        let ptr = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE
                    | libc::MAP_ANONYMOUS
                    | libc::MAP_NORESERVE
                    | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        let spot = Self::owning(ptr, len).ok()?;
        // A kernel older than 4.17 takes the flag as a hint and may place it elsewhere.
        (spot.as_ptr() as usize == at).then_some(spot)
    }

    /// `len` bytes of inaccessible address space wherever the kernel likes.
    fn reserve_anywhere(len: usize) -> io::Result<Self> {
        // SAFETY: without MAP_FIXED, mmap only creates a new mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        Self::owning(ptr, len)
    }

    /// Gives up ownership without unmapping: the range stays mapped for the rest of the process
    /// (or until the caller unmaps it).
    pub fn into_raw(self) -> (*mut u8, usize) {
        let parts = (self.ptr.as_ptr(), self.len);
        std::mem::forget(self);
        parts
    }

    /// Takes ownership of a range returned by `into_raw`.
    ///
    /// # Safety
    /// `(ptr, len)` must come from `into_raw` (or be a mapping nobody else will unmap), and must
    /// not be owned twice.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Self {
        match NonNull::new(ptr) {
            Some(ptr) if len > 0 => Mapping { ptr, len },
            _ => Self::empty(),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: self owns this range and nobody can use it after drop.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        if rc != 0 {
            tracing::warn!(error = %io::Error::last_os_error(), len = self.len, "munmap failed");
        }
    }
}

/// `statfs.f_type` of the filesystem holding `file`.
pub fn filesystem_magic(file: &File) -> io::Result<i64> {
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: fstatfs fills the struct it is given; we read it only on success.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded, so the struct is initialised.
    let stat = unsafe { stat.assume_init() };
    Ok(stat.f_type)
}

/// True when `file` lives on tmpfs (such as /dev/shm).
pub fn is_tmpfs(file: &File) -> io::Result<bool> {
    Ok(filesystem_magic(file)? == TMPFS_MAGIC)
}

/// Punches a hole over `[off, off+len)` of the file behind `fd` (its size stays): `Ok(false)`
/// when the file system cannot punch holes.
pub fn punch_hole(fd: std::os::fd::RawFd, off: u64, len: u64) -> io::Result<bool> {
    let start =
        libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let count =
        libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: fallocate only acts on the descriptor; no memory is passed.
        let rc = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                start,
                count,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return Ok(false),
            _ => return Err(err),
        }
    }
}

/// Copies `[src, src+len)` of `file` to `[dst, dst+len)` (ranges that do not
/// overlap) inside the kernel (`copy_file_range`), through the page cache: neither range is
/// mapped into this process. A hole at `dst` is allocated by the copy (a full file system
/// fails with `ENOSPC`). Where the kernel cannot copy in place it goes through a buffer
/// (`pread`/`pwrite`).
pub fn copy_range(file: &File, mut src: u64, mut dst: u64, mut len: u64) -> io::Result<()> {
    let fd = file.as_raw_fd();
    while len > 0 {
        let mut from =
            libc::loff_t::try_from(src).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut to =
            libc::loff_t::try_from(dst).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let want = usize::try_from(len).unwrap_or(usize::MAX).min(1 << 30);
        // SAFETY: copy_file_range acts on our descriptor; the offsets are our own locals.
        let n = unsafe { libc::copy_file_range(fd, &mut from, fd, &mut to, want, 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
                    return copy_through_buffer(file, src, dst, len);
                }
                _ => return Err(err),
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        src += n as u64;
        dst += n as u64;
        len -= n as u64;
    }
    Ok(())
}

fn copy_through_buffer(file: &File, src: u64, dst: u64, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; len.min(1 << 20) as usize];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], src + done)?;
        file.write_all_at(&buf[..n], dst + done)?;
        done += n as u64;
    }
    Ok(())
}

/// Reserves the file system's space for `[off, off+len)` of the file behind `fd` (its size
/// stays), so that stores through a mapping there cannot fail for want of space: a full file
/// system fails here, with `ENOSPC`. A file system that cannot (`EOPNOTSUPP`) is left as it is.
pub fn allocate(fd: std::os::fd::RawFd, off: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let start =
        libc::off_t::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let count =
        libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: fallocate only acts on the descriptor; no memory is passed.
        let rc = unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, start, count) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return Ok(()),
            _ => return Err(err),
        }
    }
}

/// The parts of `[off, off+len)` of the file behind `fd` that hold data (`SEEK_DATA` /
/// `SEEK_HOLE`), as `(start, end)` offsets; the rest are holes, which read as zeros. A file
/// system without hole reporting reports all of it as data.
pub fn data_extents(fd: std::os::fd::RawFd, off: u64, len: u64) -> io::Result<Vec<(u64, u64)>> {
    let end = off + len;
    let mut out = Vec::new();
    let mut at = off;
    while at < end {
        // SAFETY: lseek only acts on the descriptor.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                // No data at or after `at`.
                Some(libc::ENXIO) => Ok(out),
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) if out.is_empty() && at == off => {
                    Ok(vec![(off, end)])
                }
                _ => Err(err),
            };
        }
        let data = data as u64;
        if data >= end {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data as libc::off_t, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(io::Error::last_os_error());
        }
        let hole = (hole as u64).min(end);
        out.push((data, hole));
        at = hole;
    }
    Ok(out)
}

/// Extends `file` from `old_len` to `new_len` bytes of zeros. Blocks are reserved with
/// fallocate where the filesystem can, so a full disk fails here rather than as SIGBUS on a
/// later store through the mapping.
pub fn extend_file(file: &File, old_len: u64, new_len: u64) -> io::Result<()> {
    if new_len <= old_len {
        return Ok(());
    }
    let start =
        libc::off_t::try_from(old_len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let count = libc::off_t::try_from(new_len - old_len)
        .map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: fallocate only acts on the descriptor.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, start, count) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return file.set_len(new_len),
            _ => return Err(err),
        }
    }
}

/// fsyncs the directory holding `path`, so that a newly created file's name survives a crash.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// A descriptor and its shared mapping of `[0, len)`: the common body of every medium.
#[derive(Debug)]
pub(crate) struct MappedFile {
    file: File,
    path: PathBuf,
    map: Mapping,
    len: u64,
    /// Sharing flags used for every mapping of this file.
    share: i32,
    /// Whether the parent directory has been fsynced since open (done once, on first growth).
    dir_synced: bool,
}

impl MappedFile {
    /// Maps all of `file` (its current length) with `share`.
    pub(crate) fn open(file: File, path: &Path, share: i32) -> Result<Self> {
        let len = file
            .metadata()
            .map_err(|e| MediumError::io("stat", path, e))?
            .len();
        let map = Mapping::map(file.as_fd(), 0, len as usize, share, 0)
            .map_err(|e| MediumError::io("mmap", path, e))?;
        Ok(MappedFile {
            file,
            path: path.to_path_buf(),
            map,
            len,
            share,
            dir_synced: false,
        })
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Moves the main mapping clear of `avoid` (see `Mapping::move_clear_of`).
    pub(crate) fn move_clear_of(&mut self, avoid: &[Range<usize>]) -> Result<()> {
        self.map
            .move_clear_of(avoid)
            .map_err(|e| MediumError::io("mremap", &self.path, e))
    }

    /// Pointer to offset `off` of the main mapping after checking `[off, off+len)`.
    pub(crate) fn checked_ptr(&self, off: u64, len: u64) -> Result<*mut u8> {
        check_range(off, len, self.len)?;
        // SAFETY: off <= self.len == map.len(), so the result is inside or one past the mapping.
        Ok(unsafe { self.map.as_ptr().add(off as usize) })
    }

    /// Extends the file to `new_len` and remaps it. With `durable`, the new size is fsynced
    /// (and, the first time, the directory entry, in case the file was just created).
    /// `fresh_mapping` maps anew instead of mremap (for MAP_SYNC, whose guarantee we want the
    /// kernel to establish from scratch).
    /// With `sparse`, the new bytes get no space reserved (a hole: stores into it need
    /// [`allocate`] first, else a full file system shows as SIGBUS).
    pub(crate) fn grow(
        &mut self,
        new_len: u64,
        durable: bool,
        fresh_mapping: bool,
        sparse: bool,
    ) -> Result<()> {
        if new_len < self.len {
            return Err(MediumError::Shrink {
                path: self.path.display().to_string(),
                len: self.len,
                new_len,
            });
        }
        if new_len == self.len {
            return Ok(());
        }
        if sparse {
            self.file
                .set_len(new_len)
                .map_err(|e| MediumError::io("ftruncate", &self.path, e))?;
        } else {
            extend_file(&self.file, self.len, new_len)
                .map_err(|e| MediumError::io("fallocate", &self.path, e))?;
        }
        if durable {
            self.file
                .sync_all()
                .map_err(|e| MediumError::io("fsync", &self.path, e))?;
            if !self.dir_synced {
                sync_parent_dir(&self.path)
                    .map_err(|e| MediumError::io("fsync of directory", &self.path, e))?;
                self.dir_synced = true;
            }
        }
        if fresh_mapping || self.map.is_empty() {
            let map = Mapping::map(self.file.as_fd(), 0, new_len as usize, self.share, 0)
                .map_err(|e| MediumError::io("mmap", &self.path, e))?;
            self.map = map;
        } else {
            self.map
                .remap(new_len as usize)
                .map_err(|e| MediumError::io("mremap", &self.path, e))?;
        }
        tracing::debug!(path = %self.path.display(), from = self.len, to = new_len, "medium grown");
        self.len = new_len;
        Ok(())
    }

    /// Maps `[off, off+len)` again, at `addr` (exactly, when `fixed`), with this file's flags.
    pub(crate) fn map_range(
        &self,
        addr: *mut u8,
        off: u64,
        len: u64,
        fixed: bool,
    ) -> Result<Mapping> {
        check_range(off, len, self.len)?;
        let page = page_size() as u64;
        if off & (page - 1) != 0 {
            return Err(MediumError::Misaligned { off, align: page });
        }
        let result = if fixed {
            // SAFETY: the `Medium::map_range` contract makes a caller passing `fixed` promise
            // that it owns `[addr, addr+len)` and that nothing else refers into it.
            unsafe { Mapping::map_fixed(addr, self.file.as_fd(), off, len as usize, self.share) }
        } else {
            Mapping::map(
                self.file.as_fd(),
                off,
                len as usize,
                self.share,
                addr as usize,
            )
        };
        result.map_err(|e| MediumError::io("mmap", &self.path, e))
    }
}
