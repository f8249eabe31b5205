//! The file journal: rolls the files a checkpointed program writes back to the checkpoint.
//!
//! A seccomp filter ([`Journal::filter`]) makes file-changing system calls stop before they
//! run; the monitor hands each stop to [`Journal::on_trap`], which records durably, in the
//! pool, what is needed to undo the call (pre-images of overwritten bytes, a file's size and
//! mtime at the checkpoint, names created, removed names kept in a stash) and then lets the
//! call run. At a restore, [`Journal::check`] and [`Journal::apply`] undo, newest first, every
//! change made after the checkpoint being restored, so the program gets memory *and* files of
//! one moment — or a typed refusal naming what cannot be brought back. See `docs/journal.md`.
//!
//! Order of calls for the monitor:
//! ```text
//! run:      Journal::create(store) · install filter() in the root process
//!           loop: trap → on_trap(store, pid, tid, regs) → Verdict → resume
//!           capture stop of checkpoint E: begin_epoch(E) · descriptors (stash_path_of,
//!             adopt_deleted) · resume · sync_files() · engine commit of E · committed(store, E)
//! restore:  Journal::open(store) · check(store, E) · apply(store, E) · reset(store, E)
//!           · (the process is rebuilt and resumed, with the filter again)
//! ```

mod apply;
mod decode;
mod error;
mod filter;
pub mod format;
mod intervals;
mod log;
mod record;
mod stash;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kioku_ckpt::AddressSpace;
use kioku_pool::{MediumKind, Pool};

pub use apply::ApplyStats;
pub use decode::{decode, Change, Target, WriteAt};
pub use error::{JournalError, Result};
pub use filter::nr::PRLIMIT64;
pub use filter::{
    evaluate as evaluate_filter, fd_call, install as install_filter, journal_call, state_call,
    to_bytes as filter_bytes, Action,
};
pub use format::FileKey;

use format::Record;
use intervals::Intervals;
use log::Log;
use stash::Stash;

/// Where the journal keeps its sections: the pool of the checkpoint engine (through
/// [`kioku_ckpt::Engine::pool_mut`]) or, in tests, a bare pool.
pub trait SectionStore {
    fn pool(&mut self) -> &mut Pool;
    /// Commits the pool's section table, keeping the owner's roots (new segments become
    /// durable without a checkpoint).
    fn commit_sections(&mut self) -> Result<()>;
}

impl<S: AddressSpace> SectionStore for kioku_ckpt::Engine<S> {
    fn pool(&mut self) -> &mut Pool {
        self.pool_mut()
    }
    fn commit_sections(&mut self) -> Result<()> {
        kioku_ckpt::Engine::commit_sections(self).map_err(|e| match e {
            kioku_ckpt::CkptError::Pool(p) => JournalError::Pool(p),
            other => JournalError::io(
                "committing the journal's sections",
                std::io::Error::other(other.to_string()),
            ),
        })
    }
}

impl SectionStore for Pool {
    fn pool(&mut self) -> &mut Pool {
        self
    }
    fn commit_sections(&mut self) -> Result<()> {
        let roots = self.roots().to_vec();
        self.commit(&roots)?;
        Ok(())
    }
}

/// How a journal is made.
#[derive(Clone, Debug)]
pub struct JournalOptions {
    /// Length of a log segment (a pool section); a record never spans two, so pre-images
    /// larger than this are split. Default 1 MiB.
    pub segment_len: u64,
    /// Free segments kept ready (made at `committed`, not while a trapped call waits).
    pub spare_segments: usize,
    /// The stash directory for files on its mount (default: `<pool path>.stash`; pools with
    /// no path use `<mount point>/.kioku-stash/<pool id>/` only).
    pub stash_dir: Option<PathBuf>,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            segment_len: 1 << 20,
            spare_segments: 2,
            stash_dir: None,
        }
    }
}

/// What the monitor does with a trapped call after `on_trap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let it run.
    Run,
    /// Let it run, after stacking [`Journal::escalation_filter`] in this process (with
    /// SECCOMP_FILTER_FLAG_TSYNC): its standard streams may overwrite file data. Nothing to do
    /// for a process escalated already.
    Escalate,
    /// The same for every process of the tree: a standard stream's open file description,
    /// which other processes may share, is being copied or moved back.
    EscalateAll,
    /// The journal could not record this call (named): take no more checkpoints; the call
    /// still runs. A restore will refuse with this reason.
    Incomplete { why: String },
}

/// Per epoch, per file: what the journal knows of it.
struct FileState {
    /// Its size at the checkpoint (when first changed in the epoch).
    ckpt_size: u64,
    /// Ranges below `ckpt_size` whose checkpoint bytes are in the journal.
    saved: Intervals,
    /// A descriptor of it (to read pre-images from, and to fsync before the next commit).
    handle: Option<File>,
    /// Whether its base record (size, mtime) is in the journal for this epoch.
    based: bool,
    /// The path records name it by (cleared when names change).
    path: Option<PathBuf>,
}

/// The file journal of one checkpointed program.
pub struct Journal {
    log: Log,
    stash: Stash,
    /// The epoch whose checkpoint records undo back to; `None` before the first capture.
    tag: Option<u64>,
    files: HashMap<FileKey, FileState>,
    /// Files and directories changed before the last capture: durable before its commit.
    sync_files: Vec<File>,
    sync_dirs: BTreeSet<PathBuf>,
    /// Directories whose names changed since the last capture.
    dirs_now: BTreeSet<PathBuf>,
    /// Per device: whether its files are journaled (not /proc, /sys, cgroup, …).
    fs_journaled: HashMap<u64, bool>,
    /// Inodes that are deleted and cannot be linked (memfd, files deleted before kioku):
    /// their bytes are copied at captures instead (`adopt_deleted`).
    unlinkable: HashSet<FileKey>,
    /// Whether the pool survives power loss (not shm): then file changes and stash links are
    /// made durable too.
    durable: bool,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("tag", &self.tag)
            .field("next_seq", &self.log.next_seq())
            .field("files", &self.files.len())
            .finish()
    }
}

fn preferred_stash(pool: &Pool, opts_dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = opts_dir {
        return Some(d.to_path_buf());
    }
    let p = std::fs::canonicalize(pool.path()).ok()?;
    let mut s = p.into_os_string();
    s.push(".stash");
    Some(PathBuf::from(s))
}

fn pool_id(pool: &Pool) -> String {
    pool.header()
        .uuid
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Journal {
    /// Creates the journal's sections in the pool (head and spare segments) and commits them.
    /// Call after the engine's first commit.
    pub fn create(store: &mut dyn SectionStore, opts: JournalOptions) -> Result<Journal> {
        let seg = opts.segment_len.max(64 << 10).next_multiple_of(4096);
        let log = Log::create(store, seg, opts.spare_segments)?;
        Ok(Journal::assemble(
            store.pool(),
            log,
            opts.stash_dir.as_deref(),
        ))
    }

    /// Opens the journal of a pool (at a restore).
    pub fn open(store: &mut dyn SectionStore) -> Result<Journal> {
        Journal::open_with(store, JournalOptions::default())
    }

    /// `open`, with options (the spare segments to keep and the preferred stash directory).
    pub fn open_with(store: &mut dyn SectionStore, opts: JournalOptions) -> Result<Journal> {
        let log = Log::open(store, opts.spare_segments)?;
        let mut j = Journal::assemble(store.pool(), log, opts.stash_dir.as_deref());
        let dirs = j.log.stash_dirs().to_vec();
        j.stash.adopt_dirs(&dirs);
        if let Some((e, _)) = j.log.apply_state() {
            j.tag = Some(e);
        }
        Ok(j)
    }

    fn assemble(pool: &Pool, log: Log, stash_dir: Option<&Path>) -> Journal {
        Journal {
            log,
            stash: Stash::new(preferred_stash(pool, stash_dir), pool_id(pool)),
            tag: None,
            files: HashMap::new(),
            sync_files: Vec::new(),
            sync_dirs: BTreeSet::new(),
            dirs_now: BTreeSet::new(),
            fs_journaled: HashMap::new(),
            unlinkable: HashSet::new(),
            durable: pool.medium().kind() != MediumKind::Shm,
        }
    }

    /// The filter the root process installs before it runs.
    pub fn filter() -> Vec<libc::sock_filter> {
        filter::filter()
    }

    /// The filter stacked on a process whose standard streams may overwrite data.
    pub fn escalation_filter() -> Vec<libc::sock_filter> {
        filter::escalation_filter()
    }

    /// Thread `tid` of process `pid` is stopped at a seccomp trap with registers `regs`:
    /// records durably what undoes the call. An `Err` means nothing could be recorded, not
    /// even that the journal is incomplete (the pool cannot be written): do not let the call
    /// run — stop the program as if the monitor had died; the last checkpoint stays exact.
    pub fn on_trap(
        &mut self,
        store: &mut dyn SectionStore,
        pid: i32,
        tid: i32,
        regs: &kioku_proc::Regs,
    ) -> Result<Verdict> {
        let args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
        if !filter::journal_call(regs.orig_rax, args) {
            // Trapped for the capture (kernel state, descriptors), not a file change: nothing
            // to undo.
            return Ok(Verdict::Run);
        }
        let change = decode::decode(pid, tid, regs);
        self.record(store, &change)
    }

    /// Records what undoes `change` (what `on_trap` does after decoding; for callers and tests
    /// that describe changes themselves).
    pub fn record(&mut self, store: &mut dyn SectionStore, change: &Change) -> Result<Verdict> {
        self.record_change(store, change)
    }

    /// The capture stop of checkpoint `epoch`: records from now on undo back to it. Call at
    /// the start of the stop, before capturing descriptors.
    pub fn begin_epoch(&mut self, epoch: u64) {
        self.tag = Some(epoch);
        for (_, f) in self.files.drain() {
            if let Some(h) = f.handle {
                self.sync_files.push(h);
            }
        }
        self.sync_dirs.append(&mut self.dirs_now);
    }

    /// Makes every file and directory changed before the last capture durable: call before
    /// the engine commits that checkpoint (no-op when the pool is on shm).
    pub fn sync_files(&mut self) -> Result<()> {
        let files = std::mem::take(&mut self.sync_files);
        let dirs = std::mem::take(&mut self.sync_dirs);
        if !self.durable {
            return Ok(());
        }
        // Many files on one file system: one syncfs costs less than an fsync each.
        let mut by_dev: HashMap<u64, Vec<File>> = HashMap::new();
        for f in files {
            let dev = f.metadata().map(|m| m.dev()).unwrap_or(0);
            by_dev.entry(dev).or_default().push(f);
        }
        for (_, fs) in by_dev {
            if fs.len() > 32 {
                use std::os::fd::AsRawFd;
                // SAFETY: syncfs on a descriptor we own.
                if unsafe { libc::syncfs(fs[0].as_raw_fd()) } != 0 {
                    return Err(JournalError::io("syncfs", std::io::Error::last_os_error()));
                }
            } else {
                for f in fs {
                    f.sync_all().map_err(|e| JournalError::io("fsync", e))?;
                }
            }
        }
        for d in dirs {
            if let Ok(f) = File::open(&d) {
                f.sync_all()
                    .map_err(|e| JournalError::io(format!("fsync {}", d.display()), e))?;
            }
        }
        Ok(())
    }

    /// The checkpoint of `epoch` is committed: records it does not need die, their space and
    /// stash files no process holds are reused or removed.
    pub fn committed(&mut self, store: &mut dyn SectionStore, epoch: u64) -> Result<()> {
        if self.log.incomplete().is_some() {
            return Ok(());
        }
        self.log.committed(store, epoch)?;
        let mut referenced = HashSet::new();
        let refs: Vec<_> = self
            .log
            .records()
            .iter()
            .filter(|r| r.kind == format::Kind::Unlinked)
            .copied()
            .collect();
        for r in refs {
            if let Record::Unlinked { stash, .. } = self.log.read(store.pool(), &r)? {
                referenced.insert(stash);
            }
        }
        let removed = self.stash.sweep(&referenced, epoch);
        if removed > 0 {
            tracing::debug!(removed, "stash files no longer needed removed");
        }
        Ok(())
    }

    /// Decides, changing nothing, whether the files can be returned to checkpoint `epoch`;
    /// the refusal names the file or the reason.
    pub fn check(&mut self, store: &mut dyn SectionStore, epoch: u64) -> Result<ApplyStats> {
        apply::check(&mut self.log, store, epoch)
    }

    /// Returns the files to checkpoint `epoch` (checking first), durably. Idempotent: a
    /// restore killed part-way resumes where it was.
    pub fn apply(&mut self, store: &mut dyn SectionStore, epoch: u64) -> Result<ApplyStats> {
        apply::apply(&mut self.log, store, epoch)
    }

    /// Marks the applied records spent (before the restored program runs): records from now
    /// on undo back to checkpoint `epoch`.
    pub fn reset(&mut self, store: &mut dyn SectionStore, epoch: u64) -> Result<()> {
        self.log.reset(store)?;
        self.tag = Some(epoch);
        self.files.clear();
        Ok(())
    }

    /// Where the stash keeps the inode `(dev, ino)` (a file the program removed and may still
    /// hold open), for the descriptor capture; a copy made by `adopt_deleted` at this capture
    /// counts.
    pub fn stash_path_of(&self, dev: u64, ino: u64) -> Option<PathBuf> {
        let key = FileKey { dev, ino };
        if let Some((p, e)) = self.stash.copies.get(&key) {
            if Some(*e) == self.tag {
                return Some(p.clone());
            }
        }
        self.stash
            .entries
            .get(&key)
            .filter(|p| stash::same_inode(p, key))
            .cloned()
    }

    /// [`Journal::stash_path_of`] for the descriptor capture of the checkpoint being taken:
    /// the stash keeps the file while that checkpoint may be restored, even once the program
    /// closes it after the stop.
    pub fn stash_path_for_checkpoint(&mut self, dev: u64, ino: u64) -> Option<PathBuf> {
        let p = self.stash_path_of(dev, ino)?;
        if let Some(epoch) = self.tag {
            self.stash.named.insert(p.clone(), epoch);
        }
        Some(p)
    }

    /// A deleted file descriptor `fd` of process `pid` holds, which the stash does not have
    /// (deleted before kioku saw it, or made with O_TMPFILE): linked into the stash when the
    /// file system allows (then journaled like any file), otherwise copied into a new stash
    /// file that holds its bytes as of this capture. Returns the path to reopen at a restore.
    /// The stash keeps it while this checkpoint may be restored, as
    /// [`Journal::stash_path_for_checkpoint`].
    pub fn adopt_deleted(
        &mut self,
        store: &mut dyn SectionStore,
        pid: i32,
        fd: i32,
    ) -> Result<PathBuf> {
        let p = self.adopt_deleted_unnamed(store, pid, fd)?;
        if let Some(epoch) = self.tag {
            self.stash.named.insert(p.clone(), epoch);
        }
        Ok(p)
    }

    fn adopt_deleted_unnamed(
        &mut self,
        store: &mut dyn SectionStore,
        pid: i32,
        fd: i32,
    ) -> Result<PathBuf> {
        let proc_fd = PathBuf::from(format!("/proc/{pid}/fd/{fd}"));
        let m = std::fs::metadata(&proc_fd)
            .map_err(|e| JournalError::io(format!("stat {}", proc_fd.display()), e))?;
        let key = FileKey {
            dev: m.dev(),
            ino: m.ino(),
        };
        if let Some(p) = self.stash_path_of(key.dev, key.ino) {
            return Ok(p);
        }
        if !self.stash_ready(store, &proc_fd, true)? {
            return Err(JournalError::io(
                format!("no stash directory for {}", proc_fd.display()),
                std::io::Error::from_raw_os_error(libc::EXDEV),
            ));
        }
        if let Ok(p) = self.stash.link_open(&proc_fd, key, self.durable) {
            self.unlinkable.remove(&key);
            return Ok(p);
        }
        let epoch = self.tag.unwrap_or(0);
        let p = self.stash.copy_in(&proc_fd, key, epoch).map_err(|e| {
            JournalError::io(format!("copying {} into the stash", proc_fd.display()), e)
        })?;
        self.unlinkable.insert(key);
        Ok(p)
    }

    /// Whether process `pid` needs [`Journal::escalation_filter`] when the monitor first sees
    /// it (the root before it runs, a restored process): one of its standard streams is a
    /// regular file open for writing, not O_APPEND, and positioned below its end, or shares
    /// its open file description with a descriptor >= 3 (which could reposition it untrapped).
    pub fn escalation_needed(&self, pid: i32) -> Result<bool> {
        record::escalation_needed(pid)
    }

    /// How many undo records are live (for tests and summaries).
    pub fn live_records(&self) -> usize {
        self.log.records().len()
    }

    /// Segments (pool sections) the journal holds.
    pub fn segments(&self) -> usize {
        self.log.segment_count()
    }

    /// Why the journal is incomplete, if it is: (epoch, reason).
    pub fn incomplete(&self) -> Option<(u64, String)> {
        self.log.incomplete().cloned()
    }
}
