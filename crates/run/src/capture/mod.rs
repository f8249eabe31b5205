//! Checkpointing a stopped process tree: every process's memory (its private memory into
//! regions of its own, shared memory into the regions of the shared-memory objects), registers,
//! signals and descriptors, and its place in the tree (parent, process group, session; ended
//! children its parent has not reaped), as one [`TreeImage`] committed by one engine
//! checkpoint. See `process` for one process and `shared` for shared memory.

mod process;
pub(crate) mod shared;
pub(crate) mod staging;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kioku_ckpt::{CheckpointStats, Engine};
use kioku_pool::Pool;
use kioku_proc::{Tracee, Tree};

use crate::error::{Result, RunError};
use crate::fds::{FdTable, ProcRef};
use crate::image::{EpochStat, ExitImage, FileId, ProcessImage, TreeImage, IMAGE_VERSION};
use crate::journal::{Journal, JournalOptions, Verdict};
use crate::remote::TracedRemote;
use crate::shadow::{Marks, ShadowSpace};

pub(crate) use process::{vdso_crc, verify_enabled, AreaState, ProcessCapture};
use process::{Precopy, Store};
use shared::SharedObjects;

pub use process::PRECOPY_MIN;

/// What happened while the tree was stopped.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CaptureStats {
    /// Pages copied out of the tree.
    pub pages: u64,
    /// Pages found written by the write-protect scans.
    pub written: u64,
    /// Pages taken again because their mapping was replaced or they were dropped.
    pub retaken: u64,
    /// Bytes of new memory copied while the tree ran, before this capture's stop.
    pub precopied: u64,
    /// Bytes of captured memory.
    pub captured_bytes: u64,
    pub areas: usize,
    pub threads: usize,
    pub processes: usize,
    /// The whole stop as the program sees it: from the stop request to the resume request.
    #[serde(serialize_with = "ser_dur")]
    pub stop: Duration,
    #[serde(serialize_with = "ser_dur")]
    pub copy: Duration,
}

pub(crate) fn ser_dur<S: serde::Serializer>(
    d: &Duration,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// Memory to copy while the tree runs ([`Capturer::prepare`]).
pub struct Precopies(Vec<Precopy>);

impl Precopies {
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|p| p.bytes()).sum()
    }
}

/// A captured state waiting to be made durable ([`Capturer::commit`]).
pub struct Captured {
    image: TreeImage,
    pub stats: CaptureStats,
}

/// One durable checkpoint.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckpointReport {
    pub epoch: u64,
    pub capture: CaptureStats,
    pub engine: CheckpointStats,
}

/// Checkpoints whose cost the image keeps.
const RECENT: usize = 16;

/// The pool section noting why checkpoints stopped (`[len u64][text]`).
pub const NOTE_SECTION: &str = "run.note";

/// The checkpointing state for one process tree.
pub struct Capturer {
    engine: Engine<ShadowSpace>,
    marks: Marks,
    /// By pid as the monitor sees it.
    procs: BTreeMap<i32, ProcessCapture>,
    shared: SharedObjects,
    file_ids: HashMap<(PathBuf, u64, i64), FileId>,
    /// Ids are the tree's pid namespace's.
    namespace: bool,
    /// Image pid of the root.
    root: i32,
    /// The surveys of this stop are current (no resume since).
    surveyed: bool,
    /// The descriptors found by this stop's survey.
    fd_table: Option<FdTable>,
    /// The last survey's descriptor table, kept while no call that makes, closes or changes a
    /// descriptor ran in the tree (dropped at the trap of one), with the processes it was
    /// taken from (monitor's pid, exec count). Only while `state_watched`.
    fd_cache: Option<(Vec<(i32, u64)>, crate::fds::Cached)>,
    /// What the tree changes in files, to undo at a restore; `None`: files are not journaled.
    journal: Option<Journal>,
    /// Processes (monitor's pids) whose filters include the journal's escalation.
    escalated: std::collections::HashSet<i32>,
    /// [`Tree::ended_count`] at the last completed capture.
    ended_seen: u64,
    /// The tree runs the journal's filter, which also traps the calls that change the kernel
    /// state a capture reads by injected calls: a process's state is read again only after
    /// one of them (or when it changes by itself).
    state_watched: bool,
    last: Option<TreeImage>,
    recent: Vec<EpochStat>,
    /// A restore by mapping still filling (or serving events): the next checkpoint waits for
    /// it first ([`Capturer::finish_restore`]).
    lazy: Option<crate::restore::lazy::LazyFill>,
    /// Differences the verification of the capture in progress found ([`Capturer::verified`]).
    mismatches: Vec<String>,
    /// Pages copied out of the stopped tree for a pool on a disk file, written into the pool
    /// file after the tree resumes (`None`: copied straight into the running context).
    staging: Option<staging::Staging>,
}

/// What the capture of descriptors asks of the rest: the journal's stash, shared memory.
struct FdContext<'a> {
    journal: Option<&'a mut Journal>,
    engine: &'a mut Engine<ShadowSpace>,
    shared: &'a mut SharedObjects,
}

impl crate::fds::CaptureCtx for FdContext<'_> {
    fn stash_path_of(&mut self, dev: u64, ino: u64) -> Option<PathBuf> {
        self.journal.as_mut()?.stash_path_for_checkpoint(dev, ino)
    }

    fn adopt_deleted(&mut self, pid: i32, fd: i32) -> Result<Option<PathBuf>> {
        match self.journal.as_mut() {
            Some(j) => Ok(Some(j.adopt_deleted(&mut *self.engine, pid, fd)?)),
            None => Ok(None),
        }
    }

    fn shared_object_of(&mut self, dev: u64, ino: u64) -> Option<u32> {
        self.shared.id_of((libc::major(dev), libc::minor(dev), ino))
    }

    fn memfd_by_descriptor(
        &mut self,
        dev: u64,
        ino: u64,
        name: &str,
        size: u64,
        dup: &std::os::fd::OwnedFd,
    ) -> Result<Option<u32>> {
        let dup = dup
            .try_clone()
            .map_err(|e| RunError::io("duplicating a memfd's descriptor", e))?;
        let kind = crate::image::SharedKind::Memfd {
            name: name.to_string(),
        };
        let key = (libc::major(dev), libc::minor(dev), ino);
        Ok(Some(
            self.shared.object_for_descriptor(key, kind, size, dup),
        ))
    }
}

impl Capturer {
    /// A new checkpoint pool for the stopped tree `tree` (nothing captured yet). `journal`:
    /// keep what the tree changes in files (its processes run [`Journal::filter`]).
    pub fn new(pool: Pool, tree: &Tree, journal: bool) -> Result<Capturer> {
        let marks = Marks::default();
        let mut engine = Engine::init(pool, ShadowSpace::new(marks.clone()))?;
        engine.set_adaptive(false)?;
        // The monitor alone writes the regions (by copying): pool space only for pages that
        // hold data, and its own mapped pool pages let go of after each checkpoint.
        // (On memory only: on a disk the dense two contexts are kept — see docs/run.md.)
        if sparse_on(engine.pool().medium().kind()) {
            engine.set_sparse(true)?;
        }
        let journal = if journal {
            Some(Journal::create(&mut engine, JournalOptions::default())?)
        } else {
            None
        };
        let namespace = tree.namespace().is_some();
        let root = image_pid(tree.root_pid(), namespace);
        let mut c = Capturer {
            engine,
            marks,
            procs: BTreeMap::new(),
            shared: SharedObjects::default(),
            file_ids: HashMap::new(),
            namespace,
            root,
            surveyed: false,
            fd_table: None,
            fd_cache: None,
            state_watched: journal.is_some(),
            journal,
            escalated: Default::default(),
            ended_seen: 0,
            last: None,
            recent: vec![],
            lazy: None,
            staging: None,
            mismatches: Vec::new(),
        };
        c.staging = c.new_staging();
        c.sync_processes(tree)?;
        Ok(c)
    }

    /// After a restore: the engine recovered, the processes rebuilt and stopped.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn restored(
        engine: Engine<ShadowSpace>,
        marks: Marks,
        procs: BTreeMap<i32, ProcessCapture>,
        shared: SharedObjects,
        journal: Option<Journal>,
        escalated: std::collections::HashSet<i32>,
        image: &TreeImage,
        lazy: Option<crate::restore::lazy::LazyFill>,
    ) -> Capturer {
        Capturer {
            engine,
            marks,
            procs,
            shared,
            file_ids: HashMap::new(),
            namespace: image.pid_namespace,
            root: image.root,
            surveyed: false,
            fd_table: None,
            fd_cache: None,
            state_watched: journal.is_some(),
            journal,
            escalated,
            ended_seen: 0,
            last: Some(image.clone()),
            recent: image.recent.clone(),
            lazy,
            staging: None,
            mismatches: Vec::new(),
        }
        .with_staging()
    }

    fn with_staging(mut self) -> Capturer {
        self.staging = self.new_staging();
        self
    }

    /// Staging when the pool is a file on a disk file system or on tmpfs (and not turned off
    /// with `KIOKU_NO_STAGING=1`). On tmpfs the pool is sparse: the running context's pages
    /// are allocated anew for each checkpoint, and copying into its mapping in the stop paid
    /// that allocation and a page fault per page (and an unmap after the checkpoint); staged
    /// pages are written by the engine after the resume, with `pwrite`s, their checksums taken
    /// from the staging. Everything is staged: stopping a program rewriting 160 MiB took
    /// 141 ms instead of 523 ms with the same CPU (docs/perf.md); the monitor holds about one
    /// checkpoint's bytes of staging memory, beyond 64 MiB freed lazily. `KIOKU_STAGE_ALL=0`
    /// stages at most 64 MiB per checkpoint on tmpfs, the rest copied into the mapping.
    fn new_staging(&self) -> Option<staging::Staging> {
        if std::env::var_os("KIOKU_NO_STAGING").is_some_and(|v| v == "1") {
            return None;
        }
        let medium = self.engine.pool().medium();
        match medium.kind() {
            kioku_pool::MediumKind::File => Some(staging::Staging::new(None)),
            kioku_pool::MediumKind::Shm => Some(staging::Staging::new(
                std::env::var_os("KIOKU_STAGE_ALL")
                    .is_some_and(|v| v == "0")
                    .then_some(staging::RETAIN),
            )),
            _ => None,
        }
    }

    /// Writes staged pages into the pool file (after the tree resumed; before anything reads
    /// or changes the running context). Returns the bytes written.
    pub fn write_staged(&mut self) -> Result<u64> {
        match self.staging.as_mut() {
            // Pool space is reserved by the writes (a sparse section: a full medium fails
            // here, with a typed error, never a SIGBUS).
            Some(s) if !s.is_empty() => s.write_out(&mut self.engine),
            _ => Ok(0),
        }
    }

    /// After a restore by mapping: waits until every page is in, tells each process's capture
    /// what the program dropped meanwhile, and completes the engine's recovery (verifying the
    /// pool, syncing its other context). Call while the tree runs, before a checkpoint stops
    /// it; checkpoints call it too. Fails when a damaged page killed the tree.
    pub fn finish_restore(&mut self) -> Result<()> {
        if let Some(lazy) = self.lazy.as_mut().filter(|l| !l.filled()) {
            for (pid, dropped) in lazy.wait_filled()? {
                if let Some(pc) = self.procs.get_mut(&pid) {
                    pc.restored_populated(&dropped)?;
                }
            }
        }
        self.engine.finish_recovery()?;
        Ok(())
    }

    /// Whether the tree's file changes are journaled.
    pub fn journals_files(&self) -> bool {
        self.journal.is_some()
    }

    /// A seccomp trap of thread `tid` of `t`: records, durably, what the trapped call changes
    /// in files before it runs. Escalations are done here (the trapped process, or every
    /// process of `tree`).
    pub fn on_trap(&mut self, tree: &[Tracee], t: &Tracee, tid: i32) -> Result<Verdict> {
        let Some(j) = self.journal.as_mut() else {
            return Ok(Verdict::Run);
        };
        let regs = t.regs(tid)?;
        let args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
        if crate::journal::fd_call(regs.orig_rax, args) {
            // The next survey lists the descriptors again. Dropped now, before the call runs:
            // the monitor's duplicates must not keep open what the call closes.
            self.fd_cache = None;
        }
        if crate::journal::state_call(regs.orig_rax, args) {
            // A change of kernel state the next capture reads again (the call runs once the
            // thread is resumed, and has run before any later stop takes effect: a stop
            // request is acted on when the thread returns from its call).
            let any = regs.orig_rax == u64::from(crate::journal::PRLIMIT64) && args[0] != 0;
            for (pid, pc) in self.procs.iter_mut() {
                if any || *pid == t.pid() {
                    pc.state_changed();
                }
            }
            return Ok(Verdict::Run);
        }
        if !crate::journal::journal_call(regs.orig_rax, args) {
            return Ok(Verdict::Run);
        }
        let v = j.on_trap(&mut self.engine, t.pid(), tid, &regs)?;
        match &v {
            Verdict::Escalate => self.escalate(t, Some(tid))?,
            Verdict::EscalateAll => {
                for p in tree {
                    if p.pid() == t.pid() {
                        self.escalate(t, Some(tid))?;
                    } else if !self.escalated.contains(&p.pid()) {
                        // Stopped for the injection, and let go again.
                        match p.stop_all() {
                            Ok(()) => {}
                            Err(kioku_proc::ProcError::Exited { .. }) => continue,
                            Err(e) => return Err(e.into()),
                        }
                        let r = self.escalate(p, None);
                        p.resume_all()?;
                        r?;
                    }
                }
            }
            _ => {}
        }
        Ok(v)
    }

    /// Stacks the journal's escalation filter in process `t` (acting in thread `tid`, or its
    /// control thread), once.
    fn escalate(&mut self, t: &Tracee, tid: Option<i32>) -> Result<()> {
        if !self.escalated.insert(t.pid()) {
            return Ok(());
        }
        let tid = match tid {
            Some(t) => t,
            None => t.control_thread()?,
        };
        install_filter(
            &TracedRemote {
                tracee: t,
                tid,
                channel: None,
            },
            &Journal::escalation_filter(),
        )?;
        tracing::debug!(pid = t.pid(), "journal escalation filter stacked");
        Ok(())
    }

    /// Notes, durably, why checkpoints stopped (a pool section `kioku inspect` shows; best
    /// effort on a failing medium).
    pub fn note(&mut self, why: &str) -> Result<()> {
        let text = why.as_bytes();
        let len = (8 + text.len()) as u64;
        let pool = self.engine.pool_mut();
        let sec = match pool.section(NOTE_SECTION).cloned() {
            Some(s) if s.len >= len => s,
            Some(_) => pool.resize_section(NOTE_SECTION, len)?,
            None => pool.create_section(NOTE_SECTION, len, 0)?,
        };
        let b = pool.bytes_mut(sec.offset, len);
        b[..8].copy_from_slice(&(text.len() as u64).to_le_bytes());
        b[8..].copy_from_slice(text);
        pool.persist(sec.offset, len)?;
        self.engine.commit_sections()?;
        Ok(())
    }

    /// Why the journal stopped recording, if it did: no checkpoint after that is exact.
    pub fn journal_incomplete(&self) -> Option<String> {
        self.journal
            .as_ref()
            .and_then(|j| j.incomplete().map(|(_, why)| why))
    }

    pub fn engine(&self) -> &Engine<ShadowSpace> {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine<ShadowSpace> {
        &mut self.engine
    }

    pub fn pool_path(&self) -> &Path {
        self.engine.pool().path()
    }

    /// Bytes of the tree's private memory the pool holds.
    pub fn captured_bytes(&self) -> u64 {
        self.procs.values().map(|p| p.captured_bytes()).sum()
    }

    /// Follows the tree: a capture state for each new process, none for those gone.
    fn sync_processes(&mut self, tree: &Tree) -> Result<()> {
        let live: Vec<&Tracee> = tree.processes().iter().collect();
        for (pid, pc) in std::mem::take(&mut self.procs) {
            if live.iter().any(|t| t.pid() == pid) {
                self.procs.insert(pid, pc);
            } else {
                for r in pc.regions() {
                    self.engine.delete_region(&r)?;
                }
            }
        }
        for t in live {
            if !self.procs.contains_key(&t.pid()) {
                let pc = ProcessCapture::new(t, image_pid(t.pid(), self.namespace), vec![])?;
                self.procs.insert(t.pid(), pc);
                // Filters are inherited: a child of an escalated process is escalated.
                let parent = ppid_of(t.pid());
                if parent.is_some_and(|p| self.escalated.contains(&p)) {
                    self.escalated.insert(t.pid());
                } else if let Some(j) = &self.journal {
                    if j.escalation_needed(t.pid())? {
                        self.escalate(t, None)?;
                    }
                }
            }
        }
        self.escalated.retain(|p| live_pids(tree).contains(p));
        Ok(())
    }

    /// Looks at every stopped process (mappings, descriptors) and gives the shared-memory
    /// objects their regions. Refuses with `Unsupported`, changing nothing durable, when the
    /// tree holds something a checkpoint cannot bring back.
    fn survey(&mut self, tree: &Tree) -> Result<()> {
        let t0 = Instant::now();
        self.sync_processes(tree)?;
        self.shared.begin();
        if tree.ended_count() != self.ended_seen {
            self.shared.writers_gone();
        }
        let mut st = Store {
            engine: &mut self.engine,
            marks: &self.marks,
            shared: &mut self.shared,
            file_ids: &mut self.file_ids,
            staging: &mut self.staging,
        };
        for (pid, pc) in self.procs.iter_mut() {
            let t = tree.process(*pid).expect("synced with the tree");
            pc.survey(t, &mut st)?;
        }
        let t_maps = t0.elapsed();
        let refs: Vec<ProcRef> = self
            .procs
            .values()
            .map(|pc| ProcRef {
                image_pid: pc.image_pid,
                pid: pc.pid,
                own_fds: vec![],
            })
            .collect();
        // Descriptors before the regions of shared objects: a memfd held through a descriptor
        // only becomes an object here.
        let mut ctx = FdContext {
            journal: self.journal.as_mut(),
            engine: &mut self.engine,
            shared: &mut self.shared,
        };
        let key: Vec<(i32, u64)> = self
            .procs
            .keys()
            .map(|&pid| (pid, tree.process(pid).map_or(u64::MAX, |t| t.execs())))
            .collect();
        let kept = match self.fd_cache.as_mut() {
            Some((k, cached)) if *k == key => cached.refresh(&refs, &mut ctx),
            _ => None,
        };
        let table = match kept {
            Some(t) if verify_enabled() => {
                // A debugging aid: the kept table must equal a fresh survey's.
                let fresh = crate::fds::capture(&refs, &mut ctx)?;
                if fresh != t {
                    tracing::error!(kept = ?t, ?fresh, "kept descriptor table differs from the tree's");
                }
                fresh
            }
            Some(t) => t,
            None if self.state_watched => {
                self.fd_cache = None;
                let (t, cached) = crate::fds::capture_cached(&refs, &mut ctx)?;
                self.fd_cache = cached.map(|c| (key, c));
                t
            }
            None => crate::fds::capture(&refs, &mut ctx)?,
        };
        self.shared.reconcile(&mut self.engine)?;
        for o in &table.objects {
            if let crate::fds::ObjectImage::SharedMemory { id, flags, .. } = o {
                if flags & libc::O_ACCMODE != libc::O_RDONLY {
                    self.shared.force_whole(*id);
                }
            }
        }
        self.fd_table = Some(table);
        self.surveyed = true;
        tracing::debug!(
            maps_ms = t_maps.as_secs_f64() * 1e3,
            fds_ms = (t0.elapsed() - t_maps).as_secs_f64() * 1e3,
            "tree surveyed"
        );
        Ok(())
    }

    /// While the tree is stopped, before [`Capturer::capture`]: when processes have much
    /// memory that is not tracked yet (new processes, new mappings), registers it and returns
    /// it to be copied by [`Capturer::precopy`] while the tree runs (pages written meanwhile
    /// are found written at the capture). `None`: nothing worth it.
    pub fn prepare(&mut self, tree: &Tree) -> Result<Option<Precopies>> {
        // A restore by mapping completes, and the running context is never copied into while
        // it is the valid checkpoint (the monitor does both before it stops the tree; this is
        // the safety net).
        let t0 = Instant::now();
        self.finish_restore()?;
        self.sync()?;
        let t_sync = t0.elapsed();
        self.survey(tree)?;
        let t_survey = t0.elapsed();
        let mut st = Store {
            engine: &mut self.engine,
            marks: &self.marks,
            shared: &mut self.shared,
            file_ids: &mut self.file_ids,
            staging: &mut self.staging,
        };
        let mut all = Vec::new();
        for pc in self.procs.values_mut() {
            if let Some(p) = pc.prepare(&mut st)? {
                all.push(p);
            }
        }
        tracing::debug!(
            sync_ms = t_sync.as_secs_f64() * 1e3,
            survey_ms = (t_survey - t_sync).as_secs_f64() * 1e3,
            estimate_ms = (t0.elapsed() - t_survey).as_secs_f64() * 1e3,
            "tree prepared"
        );
        if all.is_empty() {
            return Ok(None);
        }
        // The tree runs before the capture: its surveys will be stale.
        self.surveyed = false;
        Ok(Some(Precopies(all)))
    }

    /// Copies what [`Capturer::prepare`] returned, while the tree runs.
    pub fn precopy(&mut self, p: Precopies) -> u64 {
        let mut copied = 0;
        for pre in p.0 {
            if let Some(pc) = self.procs.get_mut(&pre.pid) {
                // While the tree runs, staging (in pieces) where every copy is staged: the
                // engine then writes the pages with `pwrite`s and keeps their checksums.
                let staging = self
                    .staging
                    .as_mut()
                    .filter(|s| s.unlimited())
                    .map(|s| (s, &mut self.engine));
                copied += pc.precopy(pre, &self.marks, staging);
            }
        }
        // The capture that follows copies again what the tree wrote meanwhile: up to as much.
        if let Some(s) = self.staging.as_mut() {
            s.prefault(copied as usize);
        }
        copied
    }

    /// Captures the stopped tree. Fails with `Unsupported` (changing nothing durable) when it
    /// holds something a checkpoint cannot bring back.
    pub fn capture(&mut self, tree: &mut Tree, stop_began: Instant) -> Result<Captured> {
        // A tree whose first process crashed (was killed by a signal) is not checkpointed any
        // more: a restore resumes the last checkpoint before the crash. One without any process
        // left has nothing to checkpoint.
        let crashed = matches!(tree.root_exit(), Some(kioku_proc::Exit::Signal { .. }));
        if crashed || tree.is_empty() {
            return Err(RunError::Proc(kioku_proc::ProcError::Exited {
                pid: tree.root_pid(),
                exit: tree.root_exit().unwrap_or(kioku_proc::Exit::Code(0)),
            }));
        }
        let t_enter = Instant::now();
        self.mismatches.clear();
        self.sync()?;
        if !self.surveyed {
            self.survey(tree)?;
        }
        self.surveyed = false;
        let t_copy = Instant::now();
        tracing::debug!(
            stop_to_capture_ms = (t_enter - stop_began).as_secs_f64() * 1e3,
            sync_survey_ms = (t_copy - t_enter).as_secs_f64() * 1e3,
            "capture begins"
        );
        let mut st = Store {
            engine: &mut self.engine,
            marks: &self.marks,
            shared: &mut self.shared,
            file_ids: &mut self.file_ids,
            staging: &mut self.staging,
        };
        let mut stats = CaptureStats::default();
        let mut processes = Vec::with_capacity(self.procs.len());
        for (pid, pc) in self.procs.iter_mut() {
            let t = tree.process(*pid).expect("synced with the tree");
            pc.state_watched = self.state_watched;
            let (mut image, mut ps) = pc.capture(t, &mut st)?;
            self.mismatches.append(&mut ps.mismatches);
            image.escalated = self.escalated.contains(pid);
            stats.pages += ps.copied / kioku_track::page_size() as u64;
            stats.written += ps.written_pages;
            stats.captured_bytes += ps.captured_bytes;
            stats.areas += ps.areas;
            stats.threads += ps.threads;
            processes.push(image);
        }
        if verify_enabled() {
            for pc in self.procs.values() {
                self.mismatches.extend(pc.verify_shared(&st));
            }
        }
        let held = self
            .shared
            .copy_descriptor_held(&self.engine, &self.marks)?;
        stats.pages += held / kioku_track::page_size() as u64;
        stats.copy = t_copy.elapsed();
        stats.retaken = stats.pages.saturating_sub(stats.written);
        processes.extend(self.zombies(tree, &processes)?);
        let root_exit = tree.root_exit().map(ExitImage::of);
        if processes.iter().all(|p| p.pid != self.root) && root_exit.is_none() {
            return Err(RunError::Unsupported {
                what: "internal: the tree's first process is missing from its checkpoint".into(),
            });
        }
        let processes = parents_first(processes);
        stats.processes = processes.len();
        stats.stop = stop_began.elapsed();
        let mut image = TreeImage {
            version: IMAGE_VERSION,
            pid_namespace: self.namespace,
            root: self.root,
            root_exit,
            processes,
            shared: self.shared.images(),
            fds: self.fd_table.take().unwrap_or_default(),
            journal: self.journal.is_some(),
            finished: None,
            recent: vec![],
        };
        self.recent.push(EpochStat {
            epoch: self.engine.epoch() + 1,
            unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            copied_bytes: stats.pages * kioku_track::page_size() as u64,
            stop_us: stats.stop.as_micros() as u64,
        });
        if self.recent.len() > RECENT {
            self.recent.remove(0);
        }
        image.recent = self.recent.clone();
        self.shared.captured();
        self.ended_seen = tree.ended_count();
        Ok(Captured { image, stats })
    }

    /// Call once a capture is to be committed, while the tree is still stopped after it: from
    /// here, what the tree changes in files undoes back to this checkpoint. A capture not
    /// committed must not have called it: the file journal's records from that moment on
    /// would be tagged with the next checkpoint, and a restore of that checkpoint, taken
    /// later, would undo changes made before it.
    pub fn begin_epoch(&mut self) {
        if let Some(j) = self.journal.as_mut() {
            j.begin_epoch(self.engine.epoch() + 1);
        }
    }

    /// After a capture that failed (the checkpoint is skipped, the tree runs on): the next
    /// capture must not rely on what the failed one consumed — write-protect bits of pages it
    /// may not have copied, the surveys of its stop — so it copies the captured memory and
    /// the shared objects whole, once.
    pub fn capture_failed(&mut self) {
        for pc in self.procs.values_mut() {
            pc.retake_all();
        }
        self.shared.writers_gone();
        self.surveyed = false;
        self.fd_cache = None;
    }

    /// Asked after a capture while the tree is still stopped: a process of the tree that was
    /// killed (or is exiting) since it was stopped, if any — the capture may have read part of
    /// the tree before that death and part after it (a zombie reaped, a pipe closed), so it
    /// must not be committed. Exact (see [`ProcessCapture::still_stopped`]): a process
    /// killed before or during the capture is always found; one killed after this look died
    /// after everything the capture read.
    pub fn killed_in_stop(&mut self, tree: &Tree) -> Option<i32> {
        for t in tree.processes() {
            let intact = match self.procs.get_mut(&t.pid()) {
                Some(pc) => pc.still_stopped(t),
                // A process the capture did not see: not in this checkpoint either.
                None => false,
            };
            if !intact {
                return Some(t.pid());
            }
        }
        None
    }

    /// Reports what the verification of the last capture (`KIOKU_VERIFY_CAPTURE=1`) found,
    /// once it is known whether process `killed` of the tree was killed during it: then a
    /// difference is the dying process's exit writing into memory (or another process's
    /// shared memory) after the copy — each thread's `clear_child_tid` word zeroed, robust
    /// futexes marked `FUTEX_OWNER_DIED` — and the capture is not committed, so it is said at
    /// debug level; otherwise each difference is an error of the capture.
    pub fn verified(&mut self, killed: Option<i32>) {
        let found = std::mem::take(&mut self.mismatches);
        if found.is_empty() {
            return;
        }
        match killed {
            Some(pid) => tracing::debug!(
                pid,
                differences = found.len(),
                first = %found[0],
                "the capture differs from the program's memory, but process {pid} was killed during it: its exit wrote into memory after the copy (clear_child_tid, robust futexes); the capture is not committed"
            ),
            None => {
                for m in &found {
                    tracing::error!("{m}");
                }
            }
        }
    }

    /// Ended processes of the tree that their parents (in the tree) have not reaped.
    fn zombies(&self, tree: &mut Tree, live: &[ProcessImage]) -> Result<Vec<ProcessImage>> {
        tree.forget_reaped();
        let mut out = Vec::new();
        let candidates: Vec<i32> = tree_ended(tree);
        for host in candidates {
            let Some(exit) = tree.ended(host) else {
                continue;
            };
            let image_pid = image_pid(host, self.namespace);
            let Ok(id) = process::identity(host, image_pid) else {
                continue; // reaped meanwhile
            };
            // A zombie whose parent is not in the tree (the namespace's init) is reaped there.
            if !live.iter().any(|p| p.pid == id.ppid) {
                continue;
            }
            let program = match live.iter().find(|p| p.pid == id.ppid) {
                Some(p) => p.program.clone(),
                None => continue,
            };
            out.push(ProcessImage {
                pid: image_pid,
                ppid: id.ppid,
                pgid: id.pgid,
                sid: id.sid,
                exit_signal: id.exit_signal,
                zombie: Some(ExitImage::of(exit)),
                program,
                argv: vec![],
                cwd: PathBuf::from("/"),
                vmas: vec![],
                areas: vec![],
                mm: Default::default(),
                auxv: vec![],
                threads: vec![],
                sigactions: vec![],
                shared_pending: 0,
                shared_queued: vec![],
                vdso_crc: None,
                files: vec![],
                state: None,
                escalated: false,
            });
        }
        Ok(out)
    }

    /// Makes a capture durable (the tree may run meanwhile: the copy is the monitor's) and
    /// returns as soon as it is: the engine's first half (`prepare`). The other context is
    /// synced by [`Capturer::sync`], which must run before the next capture copies anything
    /// (until then the running context is the valid checkpoint); the next checkpoint, the end
    /// of the run and [`Capturer::finish`] call it when it was not.
    pub fn commit(&mut self, c: Captured) -> Result<CheckpointReport> {
        self.sync()?;
        if let Some(j) = self.journal.as_mut() {
            // Files as they were at the capture must survive a power cut with it.
            j.sync_files()?;
        }
        self.engine.prepare(&c.image.encode())?;
        let engine = self
            .engine
            .prepared_stats()
            .expect("a checkpoint was just prepared");
        self.last = Some(c.image);
        Ok(CheckpointReport {
            epoch: engine.epoch,
            capture: c.stats,
            engine,
        })
    }

    /// Syncs the other context with a checkpoint [`Capturer::commit`] made durable, if one
    /// waits: the checkpoint before it is gone from here on. Returns how long that took.
    pub fn sync(&mut self) -> Result<Option<std::time::Duration>> {
        let staged = self.write_staged()?;
        if !self.engine.is_prepared() {
            if staged == 0 {
                // Nothing pending: the next stop comes (this is called before the tree is
                // stopped, and again inside the stop, where it does nothing).
                if let Some(s) = self.staging.as_mut() {
                    s.ready_for_stop();
                }
            }
            return Ok(None);
        }
        let stats = self.engine.finish()?;
        if let Some(j) = self.journal.as_mut() {
            j.committed(&mut self.engine, stats.epoch)?;
        }
        if verify_enabled() {
            for (region, page) in self.engine.contexts_differ() {
                tracing::error!(region, page, "the two contexts differ after a checkpoint");
            }
        }
        Ok(Some(stats.sync))
    }

    /// Records that the tree ended: `kioku restore` then refuses, saying so.
    pub fn finish(&mut self, how: String) -> Result<()> {
        self.sync()?;
        let Some(mut image) = self.last.clone() else {
            return Ok(());
        };
        image.finished = Some(how);
        self.finish_restore()?;
        self.engine.checkpoint(&image.encode())?;
        Ok(())
    }
}

/// A test build's hook (`KIOKU_TEST_FAIL_CAPTURE`, read once; none in a release build): whether
/// this capture, which found written pages after checkpoint `epoch`, is made to fail as a
/// transient error would. `N`: the first N such captures after the first checkpoint fail;
/// `all`: every one does.
pub(crate) fn injected_failure(epoch: u64) -> bool {
    #[cfg(debug_assertions)]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::OnceLock;
        static LEFT: OnceLock<AtomicU64> = OnceLock::new();
        let left = LEFT.get_or_init(|| {
            AtomicU64::new(
                match std::env::var("KIOKU_TEST_FAIL_CAPTURE").ok().as_deref() {
                    Some("all") => u64::MAX,
                    Some(n) => n.parse().unwrap_or(0),
                    None => 0,
                },
            )
        });
        epoch >= 1
            && left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                    0 => None,
                    u64::MAX => Some(n),
                    n => Some(n - 1),
                })
                .is_ok()
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = epoch;
        false
    }
}

/// A test build's hook (`KIOKU_TEST_DROP_CAPTURE=alternate`, read once; none in a release
/// build): whether this whole capture, after checkpoint `epoch`, is dropped as one during
/// which a process was killed would be — every other capture after the first checkpoint.
pub(crate) fn injected_drop(epoch: u64) -> bool {
    #[cfg(debug_assertions)]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::OnceLock;
        static ON: OnceLock<bool> = OnceLock::new();
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let on = *ON.get_or_init(|| {
            std::env::var("KIOKU_TEST_DROP_CAPTURE").is_ok_and(|v| v == "alternate")
        });
        on && epoch >= 1 && COUNT.fetch_add(1, Ordering::Relaxed).is_multiple_of(2)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = epoch;
        false
    }
}

/// Whether the monitor's engine is sparse (one copy of the memory) on a pool of this medium:
/// on memory (shm), and on a disk only when `KIOKU_SPARSE_DISK=1` (docs/run.md).
pub(crate) fn sparse_on(kind: kioku_pool::MediumKind) -> bool {
    kind == kioku_pool::MediumKind::Shm
        || (kind == kioku_pool::MediumKind::File
            && std::env::var_os("KIOKU_SPARSE_DISK").is_some_and(|v| v == "1"))
}

/// The pids (as the monitor sees them) of the tree's ended processes that may be zombies.
fn tree_ended(tree: &Tree) -> Vec<i32> {
    let mut v: Vec<i32> = tree.ended_pids();
    v.sort_unstable();
    v
}

/// The parent of process `pid` (as the monitor sees it).
fn ppid_of(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn live_pids(tree: &Tree) -> Vec<i32> {
    tree.processes().iter().map(|p| p.pid()).collect()
}

/// Stacks seccomp filter `prog` in the stopped process `r` acts in, for all its threads
/// (SECCOMP_FILTER_FLAG_TSYNC).
pub(crate) fn install_filter(
    r: &dyn crate::remote::Remote,
    prog: &[libc::sock_filter],
) -> Result<()> {
    let bytes = crate::journal::filter_bytes(prog);
    // struct sock_fprog { u16 len; (pad) ; sock_filter *filter } followed by the filter.
    let mut block = vec![0u8; 16];
    block[..2].copy_from_slice(&(prog.len() as u16).to_le_bytes());
    block.extend_from_slice(&bytes);
    const SECCOMP_SET_MODE_FILTER: u64 = 1;
    const SECCOMP_FILTER_FLAG_TSYNC: u64 = 1;
    r.with_bytes(&block, &mut |at| {
        let ptr = (at + 16) as u64;
        crate::sys::write_remote(r.pid(), at + 8, &ptr.to_le_bytes())?;
        r.syscall(
            "seccomp (the file journal's escalation)",
            libc::SYS_seccomp,
            &[
                SECCOMP_SET_MODE_FILTER,
                SECCOMP_FILTER_FLAG_TSYNC,
                at as u64,
            ],
        )
        .map(|_| ())
    })
}

/// A process's id in the image.
fn image_pid(host: i32, namespace: bool) -> i32 {
    if namespace {
        kioku_proc::ns::ns_pid_of(host).unwrap_or(host)
    } else {
        host
    }
}

/// Orders processes so that every parent comes before its children.
fn parents_first(mut procs: Vec<ProcessImage>) -> Vec<ProcessImage> {
    let mut out = Vec::with_capacity(procs.len());
    let mut placed: std::collections::HashSet<i32> = std::collections::HashSet::new();
    while !procs.is_empty() {
        let before = procs.len();
        let ids: std::collections::HashSet<i32> = procs.iter().map(|p| p.pid).collect();
        let (ready, rest): (Vec<_>, Vec<_>) = procs
            .into_iter()
            .partition(|p| placed.contains(&p.ppid) || !ids.contains(&p.ppid));
        for p in ready {
            placed.insert(p.pid);
            out.push(p);
        }
        procs = rest;
        if procs.len() == before {
            // A cycle cannot happen; keep whatever is left rather than loop.
            out.append(&mut procs);
        }
    }
    out
}
