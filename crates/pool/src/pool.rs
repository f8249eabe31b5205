//! An open pool: the mapped file, its sections and the crash-atomic commit.

use crate::error::{PoolError, Result};
use crate::examine::{examine, Examination, SlotState, Verdict};
use crate::format::{self, Header, HeaderProblem, Section, Slot};
use crate::lock::{try_lock, LockOutcome};
use crate::media::{open_medium, Medium, MediumChoice, MediumKind};
use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Parameters of a new pool.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// What the pool holds, e.g. "kioku.ckpt"; `OpenOptions::kind` can insist on it.
    pub kind: String,
    pub medium: MediumChoice,
    /// Bytes to reserve for the data area at creation (rounded up to pages); the pool grows
    /// on demand anyway.
    pub data_len: u64,
    /// Fixed UUID and clock, for reproducible files (test vectors); random and real otherwise.
    pub uuid: Option<[u8; 16]>,
    pub fixed_time_ns: Option<u64>,
}

impl CreateOptions {
    pub fn new(kind: &str) -> Self {
        CreateOptions {
            kind: kind.to_string(),
            medium: MediumChoice::Auto,
            data_len: 0,
            uuid: None,
            fixed_time_ns: None,
        }
    }
}

/// How to open an existing pool.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    pub medium: MediumChoice,
    /// Refuse a pool whose kind tag differs.
    pub kind: Option<String>,
    /// Use the previous commit when the live slot is damaged (never done silently).
    pub allow_rollback: bool,
    pub fixed_time_ns: Option<u64>,
}

/// An open pool, exclusively held.
#[derive(Debug)]
pub struct Pool {
    path: PathBuf,
    medium: Box<dyn Medium>,
    header: Header,
    live: usize,
    committed: Slot,
    committed_sections: Vec<Section>,
    sections: Vec<Section>,
    rolled_back_from: Option<usize>,
    fixed_time_ns: Option<u64>,
}

/// The system page size.
pub fn system_page_size() -> u32 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    n as u32
}

fn now_ns(fixed: Option<u64>) -> u64 {
    fixed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    })
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PoolError + 'a {
    move |source| PoolError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Translates a header problem into the error a user sees.
pub(crate) fn header_error(path: &Path, p: HeaderProblem, file_len: u64) -> PoolError {
    let path = path.to_path_buf();
    match p {
        HeaderProblem::Short { .. } => PoolError::Truncated {
            path,
            what: "the header",
            needed: format::HEADER_LEN as u64,
            found: file_len,
        },
        HeaderProblem::NotAPool => PoolError::NotAPool { path },
        HeaderProblem::Version(found) => PoolError::UnsupportedVersion {
            path,
            found,
            supported: format::FORMAT_VERSION,
        },
        HeaderProblem::Checksum { stored, computed } => PoolError::HeaderChecksum {
            path,
            stored,
            computed,
        },
        HeaderProblem::Invalid(field) => PoolError::HeaderInvalid { path, field },
    }
}

/// The commit an open will use.
struct Chosen {
    header: Header,
    live: usize,
    slot: Slot,
    sections: Vec<Section>,
    rolled_back_from: Option<usize>,
}

/// Turns an examination into the commit to use, or the error to report.
fn choose_commit(path: &Path, ex: Examination, opts: &OpenOptions) -> Result<Chosen> {
    let header = ex.header.map_err(|p| header_error(path, p, ex.file_len))?;
    let sys = system_page_size();
    if header.page_size != sys {
        return Err(PoolError::PageSizeMismatch {
            path: path.into(),
            pool: header.page_size,
            system: sys,
        });
    }
    if let Some(kind) = &opts.kind {
        if &header.kind != kind {
            return Err(PoolError::KindMismatch {
                path: path.into(),
                expected: kind.clone(),
                found: header.kind,
            });
        }
    }
    let (live, rolled_back_from) = match ex.verdict {
        Verdict::Healthy { live } => (live, None),
        Verdict::RollbackAvailable {
            damaged,
            detail,
            previous,
            previous_epoch,
        } => {
            if !opts.allow_rollback {
                return Err(PoolError::LiveSlotDamaged {
                    path: path.into(),
                    slot: damaged,
                    detail,
                    previous_epoch,
                });
            }
            tracing::warn!(path = %path.display(), %detail, previous_epoch, "rolling back to the previous commit");
            (previous, Some(damaged))
        }
        Verdict::Truncated { needed, found } => {
            return Err(PoolError::Truncated {
                path: path.into(),
                what: "the live commit",
                needed,
                found,
            })
        }
        Verdict::CommitDamaged { detail } => {
            return Err(PoolError::CommitDamaged {
                path: path.into(),
                detail,
            })
        }
        Verdict::BadHeader => unreachable!("header already checked"),
    };
    let SlotState::Intact { slot, sections } = ex.slots[live].clone() else {
        unreachable!("verdict names an intact slot")
    };
    Ok(Chosen {
        header,
        live,
        slot,
        sections,
        rolled_back_from,
    })
}

/// Refuses a symbolic link at `path` in a directory other users can write: there it may be a
/// trap someone else set (to make kioku write through it). Links in one's own directories are
/// followed as usual.
pub fn refuse_planted_link(path: &Path) -> Result<()> {
    if in_shared_dir(path) && path.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
        return Err(PoolError::Symlink { path: path.into() });
    }
    Ok(())
}

/// Whether `path` is in a directory other users can write (sticky or world-writable, like /tmp
/// and /dev/shm), where a symbolic link at the pool's name may be someone else's trap.
fn in_shared_dir(path: &Path) -> bool {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::metadata(dir)
        .is_ok_and(|m| m.permissions().mode() & (libc::S_ISVTX | libc::S_IWOTH) != 0)
}

/// Renames `from` to `to` unless `to` exists (renameat2 RENAME_NOREPLACE).
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL in path");
    let (f, t) = (c(from), c(to));
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn fsync_dir(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

impl Pool {
    /// Creates a new pool file at `path`. Refuses to touch an existing file. The file appears
    /// under its name only complete (written to a temporary name, then renamed), so a crash
    /// during creation never leaves a half-made pool at `path`.
    pub fn create(path: &Path, opts: &CreateOptions) -> Result<Pool> {
        refuse_planted_link(path)?;
        if path.exists() {
            return Err(PoolError::Exists { path: path.into() });
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.creating-{}", std::process::id()));
        let file = FsOpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(io_err("create", &tmp))?;
        let result = (|| {
            if let LockOutcome::Busy(pid) = try_lock(&file, true).map_err(io_err("lock", &tmp))? {
                return Err(PoolError::Busy {
                    path: tmp.clone(),
                    pid,
                });
            }
            let page = system_page_size() as u64;
            let data_off = round_up(format::METADATA_END, page);
            file.set_len(data_off + round_up(opts.data_len, page))
                .map_err(io_err("size", &tmp))?;
            let medium = open_medium(file, path, opts.medium)?;
            let pool = Pool::format(medium, path, opts)?;
            rename_noreplace(&tmp, path).map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    PoolError::Exists { path: path.into() }
                } else {
                    io_err("rename", path)(e)
                }
            })?;
            fsync_dir(path).map_err(io_err("sync directory of", path))?;
            Ok(pool)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Formats an (empty) medium as a new pool — how tests make pools on `sim`.
    pub fn create_on(mut medium: Box<dyn Medium>, opts: &CreateOptions) -> Result<Pool> {
        let page = system_page_size() as u64;
        let want = round_up(format::METADATA_END, page) + round_up(opts.data_len, page);
        if medium.len() < want {
            medium.grow(want)?;
        }
        Pool::format(medium, Path::new("(in memory)"), opts)
    }

    fn format(medium: Box<dyn Medium>, path: &Path, opts: &CreateOptions) -> Result<Pool> {
        if !format::valid_name(&opts.kind, format::MAX_KIND_LEN) {
            return Err(PoolError::BadName {
                name: opts.kind.clone(),
            });
        }
        let page = system_page_size();
        let uuid = opts.uuid.unwrap_or_else(|| {
            let mut u: [u8; 16] = rand::random();
            u[6] = (u[6] & 0x0f) | 0x40; // version 4
            u[8] = (u[8] & 0x3f) | 0x80; // RFC 4122 variant
            u
        });
        let header = Header {
            version: format::FORMAT_VERSION,
            uuid,
            page_size: page,
            created_medium: medium.kind().code(),
            created_unix_ns: now_ns(opts.fixed_time_ns),
            kind: opts.kind.clone(),
            data_off: round_up(format::METADATA_END, page as u64),
        };
        let slot = Slot {
            epoch: 0,
            committed_unix_ns: header.created_unix_ns,
            pool_len: medium.len(),
            table_entries: 0,
            table_crc: format::crc(&[]),
            roots: vec![],
        };
        let mut pool = Pool {
            path: path.into(),
            medium,
            header,
            live: 0,
            committed: slot.clone(),
            committed_sections: vec![],
            sections: vec![],
            rolled_back_from: None,
            fixed_time_ns: opts.fixed_time_ns,
        };
        pool.write_bytes(0, &pool.header.encode());
        pool.write_bytes(format::slot_off(0), &slot.encode());
        pool.write_u64_atomic(format::INDEX_OFF, 0);
        pool.medium.persist(0, format::METADATA_END)?;
        tracing::debug!(path = %path.display(), medium = %pool.medium.kind(), "created pool");
        Ok(pool)
    }

    /// Opens an existing pool for exclusive use.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Pool> {
        let nofollow = if in_shared_dir(path) {
            libc::O_NOFOLLOW
        } else {
            0
        };
        let file = FsOpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | nofollow)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => PoolError::NotFound { path: path.into() },
                _ if e.raw_os_error() == Some(libc::ELOOP) && nofollow != 0 => {
                    PoolError::Symlink { path: path.into() }
                }
                _ => io_err("open", path)(e),
            })?;
        if let LockOutcome::Busy(pid) = try_lock(&file, true).map_err(io_err("lock", path))? {
            return Err(PoolError::Busy {
                path: path.into(),
                pid,
            });
        }
        let file_len = file.metadata().map_err(io_err("stat", path))?.len();
        // Read through pread before mapping: a damaged or truncated file is diagnosed without
        // touching a mapping (no SIGBUS).
        let ex = examine(file_len, &mut |off, len| read_at(&file, off, len));
        let chosen = choose_commit(path, ex, opts)?;
        let medium = open_medium(file, path, opts.medium)?;
        Ok(Pool::assemble(path, medium, chosen, opts))
    }

    /// Opens a pool on a medium built by the caller (the simulator, crash images).
    pub fn open_on(medium: Box<dyn Medium>, opts: &OpenOptions) -> Result<Pool> {
        let path = Path::new("(in memory)");
        let len = medium.len();
        let base = medium.as_ptr();
        let ex = examine(len, &mut |off, want| {
            let end = (off + want as u64).min(len);
            if off >= end {
                return vec![];
            }
            // SAFETY: [off, end) lies inside the medium's mapping of `len` bytes.
            unsafe { std::slice::from_raw_parts(base.add(off as usize), (end - off) as usize) }
                .to_vec()
        });
        let chosen = choose_commit(path, ex, opts)?;
        Ok(Pool::assemble(path, medium, chosen, opts))
    }

    fn assemble(path: &Path, medium: Box<dyn Medium>, chosen: Chosen, opts: &OpenOptions) -> Pool {
        let Chosen {
            header,
            live,
            slot: committed,
            sections,
            rolled_back_from,
        } = chosen;
        if MediumKind::from_code(header.created_medium) != Some(medium.kind()) {
            tracing::info!(
                created = ?MediumKind::from_code(header.created_medium),
                now = %medium.kind(),
                "pool opened on a different medium than it was created on"
            );
        }
        Pool {
            path: path.into(),
            medium,
            header,
            live,
            committed,
            committed_sections: sections.clone(),
            sections,
            rolled_back_from,
            fixed_time_ns: opts.fixed_time_ns,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn header(&self) -> &Header {
        &self.header
    }
    pub fn medium(&self) -> &dyn Medium {
        self.medium.as_ref()
    }
    /// Moves the pool's mapping clear of the address ranges `avoid` (a no-op if it is clear
    /// already): a recovery that must put memory back at fixed addresses calls this first, since
    /// the kernel may have mapped the pool itself where that memory belongs.
    pub fn move_mapping_clear_of(&mut self, avoid: &[std::ops::Range<usize>]) -> Result<()> {
        Ok(self.medium.move_clear_of(avoid)?)
    }
    /// Epoch of the last commit (0 for a new pool).
    pub fn epoch(&self) -> u64 {
        self.committed.epoch
    }
    /// Roots of the last commit.
    pub fn roots(&self) -> &[u64] {
        &self.committed.roots
    }
    /// Which slot holds the last commit.
    pub fn live_slot(&self) -> usize {
        self.live
    }
    /// The damaged slot this open rolled back from, when `allow_rollback` was used.
    pub fn rolled_back_from(&self) -> Option<usize> {
        self.rolled_back_from
    }
    /// Sections as they will be at the next commit.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }
    /// Sections of the last commit.
    pub fn committed_sections(&self) -> &[Section] {
        &self.committed_sections
    }
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }
    pub fn len(&self) -> u64 {
        self.medium.len()
    }
    pub fn is_empty(&self) -> bool {
        self.medium.is_empty()
    }

    fn check_range(&self, off: u64, len: u64) {
        assert!(
            off >= self.header.data_off && off.checked_add(len).is_some_and(|e| e <= self.len()),
            "range {off}+{len} is outside the data area"
        );
    }

    /// The bytes at `[off, off+len)` of the data area.
    pub fn bytes(&self, off: u64, len: u64) -> &[u8] {
        self.check_range(off, len);
        // SAFETY: the range is inside the mapping (checked); the mapping lives as long as
        // `self`, and `grow` (which may move it) needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.medium.as_ptr().add(off as usize), len as usize) }
    }

    /// The bytes at `[off, off+len)` of the data area, writable. Make them durable with
    /// `persist` before the commit that must include them.
    pub fn bytes_mut(&mut self, off: u64, len: u64) -> &mut [u8] {
        self.check_range(off, len);
        // SAFETY: as in `bytes`; `&mut self` makes this the only slice handed out.
        unsafe {
            std::slice::from_raw_parts_mut(self.medium.as_ptr().add(off as usize), len as usize)
        }
    }

    /// Writes back `[off, off+len)` (unordered until `drain`).
    pub fn flush(&self, off: u64, len: u64) -> Result<()> {
        Ok(self.medium.flush(off, len)?)
    }
    /// Orders everything flushed so far.
    pub fn drain(&self) -> Result<()> {
        Ok(self.medium.drain()?)
    }
    /// Makes `[off, off+len)` durable.
    pub fn persist(&self, off: u64, len: u64) -> Result<()> {
        Ok(self.medium.persist(off, len)?)
    }

    fn write_bytes(&mut self, off: u64, src: &[u8]) {
        assert!(off + src.len() as u64 <= self.len());
        // SAFETY: bounds checked above; metadata ranges never alias a slice handed out by
        // `bytes_mut`, which only covers the data area.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.medium.as_ptr().add(off as usize),
                src.len(),
            )
        }
    }

    /// One aligned 8-byte store: failure-atomic on every medium.
    fn write_u64_atomic(&mut self, off: u64, v: u64) {
        assert!(off.is_multiple_of(8) && off + 8 <= self.len());
        // SAFETY: in bounds and 8-byte aligned (the mapping is page-aligned); no other
        // reference to these bytes exists while we hold `&mut self`.
        let word = unsafe { AtomicU64::from_ptr(self.medium.as_ptr().add(off as usize).cast()) };
        word.store(v.to_le(), Ordering::Release);
    }

    /// Extends the file to at least `new_len` bytes (never shrinks). Durable at once; the
    /// next commit records the length.
    pub fn grow(&mut self, new_len: u64) -> Result<()> {
        let new_len = round_up(new_len, self.header.page_size as u64);
        if new_len > self.len() {
            self.medium.grow(new_len)?;
        }
        Ok(())
    }

    /// Extents in use now or by the last commit (whose data a crash must find intact).
    fn busy_extents(&self, except: Option<&str>) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .sections
            .iter()
            .filter(|s| Some(s.name.as_str()) != except)
            .chain(self.committed_sections.iter())
            .map(|s| (s.offset, s.end()))
            .collect();
        v.sort_unstable();
        v
    }

    /// First free extent of `len` bytes, growing the file when no gap fits. The extent is
    /// zero-filled durably (space freed earlier, or written before a crash, is not zero); a
    /// `sparse` one is left (or made) a hole, taking no space.
    fn place(&mut self, len: u64, except: Option<&str>, sparse: bool) -> Result<u64> {
        let mut at = self.header.data_off;
        for (start, end) in self.busy_extents(except) {
            if start >= at + len {
                break;
            }
            at = at.max(end);
        }
        if sparse {
            self.grow_holes(at, len)?;
        } else {
            self.grow_zeroed(at, len)?;
        }
        Ok(at)
    }

    /// Makes `[off, off+len)` exist and read as zeros, durably. Bytes past the current end of
    /// the file are zero once it grows; only the part below it may need clearing.
    fn grow_zeroed(&mut self, off: u64, len: u64) -> Result<()> {
        let old_len = self.len();
        self.grow(off + len)?;
        let end = (off + len).min(old_len);
        if end > off {
            // Space below the old end may be a hole (freed, or a sparse section's): reserve it.
            self.medium.allocate(off, end - off)?;
        }
        if end > off && self.bytes(off, end - off).iter().any(|&b| b != 0) {
            self.bytes_mut(off, end - off).fill(0);
            self.persist(off, end - off)?;
        }
        Ok(())
    }

    /// Makes `[off, off+len)` exist and read as zeros, durably, as holes where the file system
    /// keeps them: growing the file sparsely, zeroing (punching) only what holds data below
    /// the old end.
    fn grow_holes(&mut self, off: u64, len: u64) -> Result<()> {
        let old_len = self.len();
        let new_len = round_up(off + len, self.header.page_size as u64);
        if new_len > old_len {
            self.medium.grow_sparse(new_len)?;
        }
        let end = (off + len).min(old_len);
        if end > off {
            let data = self.medium.data_extents(off, end - off)?;
            for &(a, b) in &data {
                self.medium.zero(a, b - a)?;
            }
            if !data.is_empty() {
                self.medium.drain()?;
            }
        }
        Ok(())
    }

    /// Reads `[off, off+buf.len())` of the data area into `buf` — on `shm` and `file` with
    /// `pread`, so that the pages are not mapped into this process (see [`Medium::read_at`]).
    pub fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(off, buf.len() as u64);
        Ok(self.medium.read_at(off, buf)?)
    }

    /// Stores `src` at `off` of the data area, space there reserved by the store; ordered like
    /// stores (durable after `flush` and `drain`). On `shm` and `file` with `pwrite`, the pages
    /// not mapped into this process (see [`Medium::write_at`]).
    pub fn write_at(&self, off: u64, src: &[u8]) -> Result<()> {
        self.check_range(off, src.len() as u64);
        Ok(self.medium.write_at(off, src)?)
    }

    /// Copies `[src, src+len)` of the data area to `[dst, dst+len)` (not overlapping), space
    /// at `dst` reserved by the copy; ordered like stores to `dst` (durable after `flush` and
    /// `drain`). On `shm` and `file` inside the kernel, neither range mapped into this process
    /// (see [`Medium::copy_range`]).
    pub fn copy_range(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        self.check_range(src, len);
        self.check_range(dst, len);
        Ok(self.medium.copy_range(src, dst, len)?)
    }

    /// Reserves space for `[off, off+len)` of a sparse section before storing there (a full
    /// medium fails here with `ENOSPC` instead of as SIGBUS on the store).
    pub fn allocate(&self, off: u64, len: u64) -> Result<()> {
        self.check_range(off, len);
        Ok(self.medium.allocate(off, len)?)
    }

    /// Makes `[off, off+len)` read as zeros, as a hole where the medium keeps holes; ordered
    /// like a store and `flush` (durable after the next `drain` or commit). Page-aligned.
    pub fn zero(&self, off: u64, len: u64) -> Result<()> {
        self.check_range(off, len);
        Ok(self.medium.zero(off, len)?)
    }

    /// The parts of `[off, off+len)` holding data, as `(start, end)` offsets; the rest read as
    /// zeros without being read (reading a hole through the mapping would fill it on tmpfs).
    pub fn data_extents(&self, off: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        self.check_range(off, len);
        Ok(self.medium.data_extents(off, len)?)
    }

    /// Gives `[off, off+len)` back to the file system (a hole where it can punch one, else
    /// zeros), unordered: after a crash the range may read as zeros or as before. Only for
    /// bytes no committed state needs. Page-aligned.
    pub fn discard(&self, off: u64, len: u64) -> Result<()> {
        self.check_range(off, len);
        Ok(self.medium.discard(off, len)?)
    }

    /// Drops this process's page mappings of `[off, off+len)` (the bytes stay in the pool):
    /// pages it read or wrote there stop counting as its resident memory.
    pub fn release_pages(&self, off: u64, len: u64) -> Result<()> {
        self.check_range(off, len);
        Ok(self.medium.release_pages(off, len)?)
    }

    /// Gives the parts of `extents` (freed space of sparse sections) that no section uses now
    /// and the last commit does not name back to the file system (holes): freed space takes
    /// no memory or disk.
    fn release_unused(&self, extents: &[(u64, u64)]) -> Result<()> {
        let page = self.header.page_size as u64;
        let busy = self.busy_extents(None);
        for &(start, end) in extents {
            let mut at = start;
            for &(b0, b1) in &busy {
                if b1 <= at || b0 >= end {
                    continue;
                }
                if b0 > at {
                    self.discard_free(at, b0.min(end), page)?;
                }
                at = at.max(b1);
                if at >= end {
                    break;
                }
            }
            if at < end {
                self.discard_free(at, end, page)?;
            }
        }
        Ok(())
    }

    fn discard_free(&self, start: u64, end: u64, page: u64) -> Result<()> {
        let (a, b) = (round_up(start, page), end / page * page);
        if b > a && b <= self.len() {
            self.medium.discard(a, b - a)?;
        }
        Ok(())
    }

    fn check_name(name: &str) -> Result<()> {
        if format::valid_name(name, format::MAX_NAME_LEN) {
            Ok(())
        } else {
            Err(PoolError::BadName { name: name.into() })
        }
    }

    /// Adds a zero-filled section of `len` bytes (rounded up to pages); part of the next commit.
    pub fn create_section(&mut self, name: &str, len: u64, flags: u32) -> Result<Section> {
        Self::check_name(name)?;
        if self.section(name).is_some() {
            return Err(PoolError::SectionExists { name: name.into() });
        }
        if self.sections.len() >= format::MAX_SECTIONS {
            return Err(PoolError::TooManySections {
                max: format::MAX_SECTIONS,
            });
        }
        let len = round_up(len.max(1), self.header.page_size as u64);
        let offset = self.place(len, None, flags & format::SECTION_SPARSE != 0)?;
        let s = Section {
            name: name.into(),
            offset,
            len,
            flags,
        };
        self.sections.push(s.clone());
        Ok(s)
    }

    /// Changes a section's length (rounded up to pages). Grows in place when the space after it
    /// is free, else moves it (copying its bytes durably): the returned offset may differ.
    /// Space the last commit still uses is never reused before the next commit.
    pub fn resize_section(&mut self, name: &str, new_len: u64) -> Result<Section> {
        let idx = self
            .sections
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| PoolError::NoSuchSection { name: name.into() })?;
        let old = self.sections[idx].clone();
        let new_len = round_up(new_len.max(1), self.header.page_size as u64);
        let sparse = old.is_sparse();
        if new_len <= old.len {
            self.sections[idx].len = new_len;
            if sparse {
                self.release_unused(&[(old.offset + new_len, old.end())])?;
            }
            return Ok(self.sections[idx].clone());
        }
        let new_end = old.offset + new_len;
        let blocked = self
            .busy_extents(Some(name))
            .into_iter()
            // Its own committed extent (same start) may be reused: it is this section's data.
            .any(|(s, e)| s < new_end && old.end() < e && s != old.offset);
        let offset = if blocked {
            let at = self.place(new_len, None, sparse)?;
            // Only what holds data is copied: holes stay holes (and are not read, which would
            // fill them on tmpfs).
            for (a, b) in self.medium.data_extents(old.offset, old.len)? {
                let dst = at + (a - old.offset);
                if sparse {
                    self.medium.allocate(dst, b - a)?;
                }
                // SAFETY: both extents are inside the mapping and disjoint (the new one was
                // allocated outside every busy extent, including the old one).
                unsafe {
                    let base = self.medium.as_ptr();
                    std::ptr::copy_nonoverlapping(
                        base.add(a as usize),
                        base.add(dst as usize),
                        (b - a) as usize,
                    );
                }
                self.flush(dst, b - a)?;
            }
            self.drain()?;
            at
        } else {
            if sparse {
                self.grow_holes(old.end(), new_len - old.len)?;
            } else {
                self.grow_zeroed(old.end(), new_len - old.len)?;
            }
            old.offset
        };
        self.sections[idx].offset = offset;
        self.sections[idx].len = new_len;
        if blocked && sparse {
            self.release_unused(&[(old.offset, old.end())])?;
        }
        Ok(self.sections[idx].clone())
    }

    /// Removes a section and gives its space back to the file system at once (a hole: the
    /// pool takes that much less memory or disk; the file keeps its length). Unlike
    /// [`Pool::delete_section`], the bytes are gone now, even though the last commit may still
    /// name the section: only for a section whose contents no committed state needs any more
    /// (the caller's own records say so). Its space is reusable once the next commit no longer
    /// names it.
    pub fn discard_section(&mut self, name: &str) -> Result<()> {
        let s = self
            .section(name)
            .cloned()
            .ok_or_else(|| PoolError::NoSuchSection { name: name.into() })?;
        self.delete_section(name)?;
        // A section's extent is its own: allocation and resizing keep it clear of every other
        // section, current or committed (see `busy_extents`).
        self.medium.discard(s.offset, s.len)?;
        Ok(())
    }

    /// Removes a section; its space is reusable once the next commit no longer names it.
    pub fn delete_section(&mut self, name: &str) -> Result<()> {
        let idx = self
            .sections
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| PoolError::NoSuchSection { name: name.into() })?;
        let s = self.sections.remove(idx);
        if s.is_sparse() {
            // Space the last commit does not name either is free now.
            self.release_unused(&[(s.offset, s.end())])?;
        }
        Ok(())
    }

    /// Commits the current section table and `roots` atomically; returns the new epoch.
    ///
    /// Section data the commit must include has to be flushed before the call (`flush`, or
    /// `persist`): the commit's first drain orders it together with the commit record, so one
    /// fence (one device cache flush on `file`) covers both. Ordering points: flush table,
    /// flush slot, drain; then the 8-byte index store, flush, drain.
    /// A crash before the index store's drain leaves the previous commit live; after it, this one.
    pub fn commit(&mut self, roots: &[u64]) -> Result<u64> {
        let table = self.sections.clone();
        self.commit_table(roots, table)
    }

    /// Commits `roots` with section table `table` instead of the current one: for an owner
    /// that publishes its own new sections while another owner's changes since the last commit
    /// (whose data the live commit still needs) must not be published yet. The current
    /// sections stay as they are; space either table names stays reserved.
    pub fn commit_table(&mut self, roots: &[u64], table: Vec<Section>) -> Result<u64> {
        if roots.len() > format::MAX_ROOTS {
            return Err(PoolError::TooManyRoots {
                max: format::MAX_ROOTS,
                given: roots.len(),
            });
        }
        let next = 1 - self.live;
        let sections = table;
        let table = format::encode_table(&sections);
        let slot = Slot {
            epoch: self.committed.epoch + 1,
            committed_unix_ns: now_ns(self.fixed_time_ns),
            pool_len: self.len(),
            table_entries: sections.len() as u32,
            table_crc: format::crc(&table),
            roots: roots.to_vec(),
        };
        if !table.is_empty() {
            self.write_bytes(format::TABLE_OFF[next], &table);
            self.medium
                .flush(format::TABLE_OFF[next], table.len() as u64)?;
        }
        self.write_bytes(format::slot_off(next), &slot.encode());
        self.medium
            .flush(format::slot_off(next), format::SLOT_LEN as u64)?;
        self.medium.drain()?;
        self.write_u64_atomic(format::INDEX_OFF, next as u64);
        self.medium.persist(format::INDEX_OFF, 8)?;
        self.live = next;
        self.committed = slot;
        let before = std::mem::replace(&mut self.committed_sections, sections);
        self.rolled_back_from = None;
        // Space of sparse sections only the commit before named is free now: give it back
        // (holes). (Dense sections' free space keeps its bytes until reused.)
        let freed: Vec<(u64, u64)> = before
            .iter()
            .filter(|s| s.is_sparse())
            .map(|s| (s.offset, s.end()))
            .collect();
        self.release_unused(&freed)?;
        Ok(self.committed.epoch)
    }

    /// Closes the pool, releasing the lock. (Dropping does the same; this reads better.)
    pub fn close(self) {}
}

/// `pread` of up to `len` bytes at `off` (fewer at the end of the file).
pub(crate) fn read_at(file: &File, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    buf.truncate(got);
    buf
}
