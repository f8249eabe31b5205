//! Staging for a pool on a disk file system (medium `file`): while the tree is stopped, its
//! written pages are copied into anonymous memory of the monitor, not into the running
//! context's shared file mapping. Storing into a shared mapping of an ext4 file costs a page
//! fault, a page-cache allocation and a dirtying per 4 KiB page (1.5 s for 512 MiB here,
//! against ~0.1 s into anonymous memory); the tree would wait for all of it. After the tree
//! resumes, [`Staging::write_out`] hands the staged pages to the engine
//! ([`Engine::store_running`]), which writes them into the pool file with large `pwrite`s
//! (coherent with the mapping: the same page cache) and keeps their checksums, computed from
//! the staged bytes: the checkpoint that commits them does not read them back from the pool.
//!
//! The staging memory is kept between checkpoints, its pages beyond [`RETAIN`] given back
//! lazily (`MADV_FREE`): the kernel takes them only under memory pressure, and until then the
//! next stop writes into them without a fault. Unmapping it after each write-out (as first
//! done) made every stop of a program rewriting 512 MiB fault and zero 512 MiB of fresh
//! memory before copying into it — most of a 1.7 s stop where the copy alone takes ~0.1 s.
//! A mapping much larger than recent checkpoints need is unmapped ([`SHRINK_AFTER`]).
//!
//! A pool on tmpfs (medium `shm`) stages too: there a sparse running context is emptied after
//! each checkpoint, and storing into its mapping would allocate a page and fault it in per
//! page inside the stop (and unmap it after the checkpoint); staged pages are written by the
//! engine after the resume. `KIOKU_STAGE_ALL=0` limits it to [`RETAIN`] per checkpoint there.
//!
//! Invariant: staged pages are written out before anything reads or writes the running
//! context again (the next checkpoint's commit, survey or copy); until then the marks already
//! name them, so a checkpoint never commits a page without its staged contents.

use kioku_ckpt::Engine;

use crate::error::{Result, RunError};
use crate::shadow::ShadowSpace;

/// Staging memory kept resident between checkpoints; beyond it, pages are freed lazily.
pub(crate) const RETAIN: usize = 64 << 20;

/// Write-outs in a row that used under a quarter of the staging mapping before it is unmapped.
const SHRINK_AFTER: u32 = 8;

/// `MADV_POPULATE_WRITE` (Linux 5.14; not in every libc's headers).
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Pages copied out of the stopped tree, waiting to be written into the pool file.
pub(crate) struct Staging {
    /// Most bytes staged per checkpoint; more go straight into the pool's mapping. `None`:
    /// no limit (a disk, where storing into the mapping costs far more than a second copy).
    limit: Option<usize>,
    buf: *mut u8,
    cap: usize,
    used: usize,
    /// (running-context address, offset in `buf`, length).
    pending: Vec<(usize, usize, usize)>,
    /// Write-outs in a row that used under a quarter of `cap`.
    small_in_a_row: u32,
    /// What the last write-out had staged: about what the next stop will stage.
    expect: usize,
    /// `expect` bytes made resident since the last write-out.
    ready: bool,
}

impl Staging {
    /// Staging of at most `limit` bytes per checkpoint.
    pub fn new(limit: Option<usize>) -> Staging {
        Staging {
            limit,
            buf: std::ptr::null_mut(),
            cap: 0,
            used: 0,
            pending: Vec::new(),
            small_in_a_row: 0,
            expect: 0,
            ready: false,
        }
    }

    /// Whether every copy is to be staged (a disk).
    pub fn unlimited(&self) -> bool {
        self.limit.is_none()
    }

    /// Whether `more` bytes are to be staged (within the limit, with what is staged already).
    pub fn takes(&self, more: usize) -> bool {
        self.limit.is_none_or(|l| self.used + more <= l)
    }

    /// Before a stop, the tree running: makes as much staging memory resident as the last
    /// checkpoint staged (pages the kernel took back meanwhile are faulted in here, not in the
    /// stop). Once per write-out.
    pub fn ready_for_stop(&mut self) {
        if !self.ready {
            self.prefault(self.expect);
        }
    }

    /// Makes `bytes` of staging memory resident now (the tree running), so that a stop about
    /// to copy about that much faults no page in. Only speed depends on it.
    pub fn prefault(&mut self, bytes: usize) {
        if bytes == 0 || self.reserve(bytes.saturating_sub(self.used)).is_err() {
            return;
        }
        // SAFETY: advice on our own mapping (`buf..buf + cap`); populating writes nothing
        // visible (fresh pages are zero, present ones are left as they are).
        unsafe { libc::madvise(self.buf.cast(), self.cap, MADV_POPULATE_WRITE) };
        self.ready = true;
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Turns `chunks` (program address, running-context address, length) into chunks whose
    /// destinations are fresh staging memory, remembering where each belongs.
    pub fn stage(
        &mut self,
        chunks: &[(usize, usize, usize)],
    ) -> Result<Vec<(usize, usize, usize)>> {
        let total: usize = chunks.iter().map(|c| c.2).sum();
        self.reserve(total)?;
        let mut out = Vec::with_capacity(chunks.len());
        for &(remote, local, len) in chunks {
            out.push((remote, self.buf as usize + self.used, len));
            self.pending.push((local, self.used, len));
            self.used += len;
        }
        Ok(out)
    }

    /// Forgets what the last [`Staging::stage`] of `chunks` staged (its copy failed: the
    /// staged bytes are not the program's).
    pub fn unstage(&mut self, chunks: usize) {
        let keep = self.pending.len().saturating_sub(chunks);
        self.used = self.pending.get(keep).map_or(self.used, |p| p.1);
        self.pending.truncate(keep);
    }

    /// Room for `more` bytes after what is staged (contents kept).
    fn reserve(&mut self, more: usize) -> Result<()> {
        let need = self.used + more;
        if need <= self.cap {
            return Ok(());
        }
        let page = kioku_track::page_size();
        let cap = need.max(self.cap * 2).next_multiple_of(2 << 20).max(page);
        let p = if self.buf.is_null() {
            // SAFETY: a new private anonymous mapping; no memory of ours is affected.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    cap,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            }
        } else {
            // SAFETY: `buf..buf + cap` is our own mapping; nothing keeps pointers into it
            // across this call (chunks are made after it).
            unsafe { libc::mremap(self.buf.cast(), self.cap, cap, libc::MREMAP_MAYMOVE) }
        };
        if p == libc::MAP_FAILED {
            return Err(RunError::io(
                "mapping staging memory for the pool file",
                std::io::Error::last_os_error(),
            ));
        }
        // No MADV_HUGEPAGE: with the usual `defrag=madvise` a huge-page fault may compact
        // memory first, and did here for seconds (3.7 s for 512 MiB on a machine whose memory
        // was mostly page cache, against 0.4 s of 4 KiB faults) — inside a stop.
        self.buf = p.cast();
        self.cap = cap;
        Ok(())
    }

    /// Stores every staged page into the running context where it belongs
    /// ([`Engine::store_running`]: large `pwrite`s, space reserved by them — a full medium
    /// fails here with `ENOSPC` — and the pages' checksums kept from the staged bytes). Then
    /// the staging memory is empty (its pages beyond `RETAIN` freed lazily).
    pub fn write_out(&mut self, engine: &mut Engine<ShadowSpace>) -> Result<u64> {
        let mut written = 0u64;
        let pending = std::mem::take(&mut self.pending);
        for &(local, at, len) in &pending {
            // SAFETY: `at..at + len` lies inside the staging mapping, filled by `stage` and the
            // copy after it; nothing writes the staging memory while this slice lives.
            let bytes = unsafe { std::slice::from_raw_parts(self.buf.add(at), len) };
            engine.store_running(local, bytes)?;
            written += len as u64;
        }
        let used = std::mem::take(&mut self.used);
        self.expect = used;
        self.ready = false;
        self.small_in_a_row = if used < self.cap / 4 {
            self.small_in_a_row + 1
        } else {
            0
        };
        if self.cap > RETAIN && self.small_in_a_row >= SHRINK_AFTER {
            // SAFETY: our own mapping, nothing staged any more.
            unsafe { libc::munmap(self.buf.cast(), self.cap) };
            self.buf = std::ptr::null_mut();
            self.cap = 0;
            self.small_in_a_row = 0;
        } else if self.cap > RETAIN {
            // SAFETY: advice on our own mapping beyond `RETAIN` (page-aligned: `cap` and
            // `RETAIN` are multiples of 2 MiB); nothing staged any more, so losing the
            // contents is harmless.
            unsafe {
                libc::madvise(
                    self.buf.add(RETAIN).cast(),
                    self.cap - RETAIN,
                    libc::MADV_FREE,
                )
            };
        }
        Ok(written)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.buf.is_null() {
            // SAFETY: our own mapping; nothing refers to it after this.
            unsafe { libc::munmap(self.buf.cast(), self.cap) };
        }
    }
}
