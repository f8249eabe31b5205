//! One rank's side of a group checkpoint: its pool (the checkpoint engine's two contexts for
//! the protected data, and the library's own sections: each kept level's parity, journal and
//! redo log, and the record of what the parity encodes), and the collective checkpoint.
//!
//! A checkpoint of a remote level makes the local level durable everywhere (prepare, agree,
//! finish), then encodes the level: in the background when MPI allows threads
//! (`MPI_THREAD_MULTIPLE`), so that the program computes while the deltas are encoded and the
//! level commits ([`crate::flight`]); otherwise inline, before the local checkpoint commits.

use crate::config::{AsyncMode, Config};
use crate::error::{GroupError, Result};
use crate::flight::{Flight, FlightReport, Mode, Sink, Source};
use crate::layout::{Groups, Scheme};
use crate::meta::{GroupMeta, Table, MAGIC, VERSION};
use crate::mpi::{Bg, Comm, Op};
use crate::pages::{DataView, Mem};
use crate::store::{Journal, LevelState, Parity, Record};
use kioku_ckpt::{CkptError, MovableSelfSpace, RegionOptions};
use kioku_ec::Codec;
use serde::Serialize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The engine of a rank's pool; regions are found by name, so recovery may place them anywhere.
pub type Engine = kioku_ckpt::Engine<MovableSelfSpace>;

/// Checkpoint levels.
pub const LOCAL: u8 = 1;
pub const PARTNER: u8 = 2;
pub const RS: u8 = 3;

pub(crate) const TAG_DECODE: u32 = 12;

/// A remote level as this job keeps it.
pub(crate) struct Level {
    pub id: u8,
    pub scheme: Scheme,
    pub codec: Arc<Codec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// No pool of an earlier run exists: regions may be allocated, checkpoints taken.
    Running,
    /// Pools of an earlier run exist: `recover` first.
    MustRecover,
    /// A collective operation failed half-way; the job must restart and recover.
    Broken(String),
}

/// What the last checkpoint did (on this rank).
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckpointReport {
    pub epoch: u64,
    pub level: u8,
    /// Data pages written since the previous checkpoint.
    pub dirty_pages: u64,
    /// Pages whose delta went into an inline encoding.
    pub encoded_pages: u64,
    /// Bytes this rank sent to others during the call.
    pub bytes_sent: u64,
    /// Pages whose base was journaled.
    pub journaled_pages: u64,
    /// Waiting for the previous checkpoint's background flight.
    pub waited: Duration,
    /// Encoding inline (the call's own flights).
    pub encode: Duration,
    /// The local checkpoint: prepare, agreement, finish.
    pub persist: Duration,
    /// The whole call: the time the program waited.
    pub total: Duration,
    /// The level's encoding went on in the background after the call returned.
    pub background: bool,
}

/// What the last flight (encoding of a remote level) did, once it ended.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlightStatus {
    pub level: u8,
    pub epoch: u64,
    /// The level now encodes `epoch` (else `failure` says why it kept its previous parity).
    pub committed: bool,
    pub failure: Option<String>,
    pub encoded_pages: u64,
    pub bytes_sent: u64,
    /// From the start of the checkpoint call to the level's commit on this rank.
    pub durable: Duration,
    pub background: bool,
    /// Bytes this rank's pool took once the flight's redo log was complete: its peak (the
    /// log is freed when the flight is applied).
    pub pool_peak: u64,
}

/// What a recovery did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryReport {
    /// The group epoch whose state the program now has.
    pub epoch: u64,
    /// Ranks whose pools were missing or damaged and were rebuilt.
    pub lost: Vec<usize>,
    /// The level they (or damaged pages) were rebuilt from (0: none).
    pub level: u8,
    /// Ranks that rolled a prepared, unagreed checkpoint back.
    pub rolled_back: usize,
    pub bytes_received: u64,
    /// Pages of surviving pools that failed their checksums and were rebuilt from parity
    /// (this rank's), with the first few named.
    pub healed_pages: u64,
    pub healed: Vec<String>,
    /// Decoding the lost ranks' shards (receiving included).
    pub decode: Duration,
    pub total: Duration,
}

/// What a scrub (`kioku_group_verify`) found and did, over the job.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScrubReport {
    /// Pages that failed their checksum (data, parity and journal pages of every rank).
    pub damaged: u64,
    /// Of those, pages rebuilt (from the other context or the group's parity).
    pub healed: u64,
    /// Parity pages that differ from a fresh encoding of the data, per level checked.
    pub mismatched: Vec<(u8, u64)>,
}

/// The pool's contents shared between the program's thread and a background flight: each
/// touches them only under the lock.
pub(crate) struct Inner {
    pub engine: Engine,
    pub record: Record,
}

/// [`Inner`] behind its lock.
pub(crate) struct Shared(Mutex<Option<Inner>>);

// SAFETY: `Inner` is only reached through the mutex, one thread at a time. What it owns — a
// pool mapping, the page tracker's state (userfaultfd or write-protection, process-wide),
// region mappings — is not tied to the thread that created it; a flight's thread only reads
// and writes pool sections through it and never maps, tracks or unmaps.
unsafe impl Send for Shared {}
// SAFETY: as above: every access goes through the mutex.
unsafe impl Sync for Shared {}

impl Shared {
    pub(crate) fn new() -> Shared {
        Shared(Mutex::new(None))
    }
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Inner>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A flight running on its own thread.
struct Running {
    handle: std::thread::JoinHandle<(Bg, Result<FlightReport>, Instant)>,
    started: Instant,
}

/// One rank's view of the job's group checkpoints.
pub struct Group {
    pub(crate) comm: Comm,
    /// The flights' communicator (away while a flight runs in the background).
    pub(crate) bg: Option<Bg>,
    pub(crate) cfg: Config,
    pub(crate) groups: Groups,
    pub(crate) gi: usize,
    pub(crate) pos: usize,
    pub(crate) members: Vec<usize>,
    pub(crate) page: usize,
    pub(crate) state: State,
    pub(crate) shared: Arc<Shared>,
    pub(crate) table: Table,
    pub(crate) levels: Vec<Level>,
    /// The last committed checkpoint's metadata.
    pub(crate) meta: Option<GroupMeta>,
    /// Journals of the levels whose parity exists.
    pub(crate) journals: Vec<Journal>,
    /// Buffers of the program's own registered with `protect`: (region id, address, bytes).
    protected: Vec<(u32, *mut u8, usize)>,
    /// Flights run on a thread of their own.
    background: bool,
    flight: Option<Running>,
    pub last: CheckpointReport,
    pub last_flight: Option<FlightStatus>,
    pub recovered: Option<RecoveryReport>,
    pub scrubbed: Option<ScrubReport>,
}

pub(crate) fn user_region_name(id: u32) -> String {
    format!("u{id}")
}

/// Fault injection for the crash tests: `KIOKU_FAULT=<point>:<rank>:<epoch>` makes that rank
/// kill itself with SIGKILL at that point of that epoch's checkpoint (points: `prepared`, after
/// its prepare and before the agreement; the flight's steps, see [`crate::flight`]).
pub(crate) fn fault(point: &str, rank: usize, epoch: u64) {
    let Ok(spec) = std::env::var("KIOKU_FAULT") else {
        return;
    };
    let mut it = spec.split(':');
    let (Some(p), Some(r), Some(e)) = (it.next(), it.next(), it.next()) else {
        return;
    };
    if p == point && r.parse() == Ok(rank) && e.parse() == Ok(epoch) {
        tracing::warn!(point, rank, epoch, "KIOKU_FAULT: killing this rank");
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
}

/// Errors of all ranks, gathered: `Ok` when every rank succeeded, else the first failure
/// (every rank returns the same error, so the program sees one collective outcome; the rank
/// that failed gets its own typed error back).
pub(crate) fn agree(comm: &Comm, mine: Result<()>) -> Result<()> {
    let text = match &mine {
        Ok(()) => Vec::new(),
        Err(e) => e.to_string().into_bytes(),
    };
    let all = comm.allgather_var(&text)?;
    match all.iter().position(|e| !e.is_empty()) {
        None => Ok(()),
        Some(rank) if rank == comm.rank() => mine,
        Some(rank) => Err(GroupError::Remote {
            rank,
            detail: String::from_utf8_lossy(&all[rank]).into_owned(),
        }),
    }
}

/// The remote levels `cfg` keeps, for a group of `g` members.
pub(crate) fn make_levels(cfg: &Config, g: usize) -> Result<Vec<Level>> {
    let mut levels = Vec::new();
    if cfg.partner {
        levels.push(Level {
            id: PARTNER,
            scheme: Scheme::new(1, 1, g),
            codec: Arc::new(Codec::new(1, 1)?),
        });
    }
    if cfg.rs {
        levels.push(Level {
            id: RS,
            scheme: Scheme::new(g - cfg.parity, cfg.parity, g),
            codec: Arc::new(Codec::new(g - cfg.parity, cfg.parity)?),
        });
    }
    Ok(levels)
}

impl Group {
    /// Sets up this rank: reads the configuration, forms the groups, and either creates the
    /// pools (no earlier run left any) or notes that `recover` must come first.
    pub fn start(comm: Comm, cfg: Config) -> Result<Group> {
        let node = comm.node()?;
        let nodes: Vec<usize> = comm
            .allgather(&(node as u64).to_le_bytes())?
            .into_iter()
            .map(|b| u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize)
            .collect();
        let min = if cfg.rs { cfg.parity + 1 } else { 2 };
        let groups = Groups::new(&nodes, cfg.group_size, min)?;
        let (gi, pos) = groups.place(comm.rank());
        let members = groups.groups[gi].clone();
        let levels = make_levels(&cfg, members.len())?;
        let threads = comm.thread_multiple()?;
        let background = match cfg.async_mode {
            AsyncMode::Off => false,
            AsyncMode::Auto => threads,
            AsyncMode::On if threads => true,
            AsyncMode::On => {
                return Err(GroupError::Config(
                    "KIOKU_ASYNC=1 needs MPI initialised with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...); use it, or KIOKU_ASYNC=auto".into(),
                ))
            }
        };
        tracing::info!(
            background,
            "remote levels encoded {}",
            if background {
                "in the background"
            } else {
                "inline"
            }
        );
        let path = cfg.pool_path(comm.rank());
        let mut exists = [u64::from(path.exists())];
        comm.allreduce(&mut exists, Op::Max)?;
        let bg = Bg::attach(&comm);
        let mut me = Group {
            page: kioku_pool::system_page_size() as usize,
            comm,
            bg: Some(bg),
            cfg,
            groups,
            gi,
            pos,
            members,
            state: State::MustRecover,
            shared: Arc::new(Shared::new()),
            table: Table::default(),
            levels,
            meta: None,
            journals: Vec::new(),
            protected: Vec::new(),
            background,
            flight: None,
            last: CheckpointReport::default(),
            last_flight: None,
            recovered: None,
            scrubbed: None,
        };
        if exists[0] == 0 {
            let made = me.create_pool();
            agree(&me.comm, made)?;
            me.state = State::Running;
        } else {
            // What this rank's pool holds, for the status before recovery (read only).
            me.meta = crate::plan::look_at(&path, me.cfg.medium, false).meta;
        }
        Ok(me)
    }

    /// A new pool for this rank: the engine's, plus the record of the kept levels.
    pub(crate) fn create_pool(&mut self) -> Result<()> {
        let path = self.cfg.pool_path(self.comm.rank());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| GroupError::Pool {
                path: dir.display().to_string(),
                detail: format!("cannot create the pool directory: {e}"),
            })?;
        }
        let mut c = kioku_pool::CreateOptions::new(kioku_ckpt::POOL_KIND);
        c.medium = self.cfg.medium;
        let mut pool = kioku_pool::Pool::create(&path, &c).map_err(CkptError::from)?;
        let mut record = Record {
            seq: 0,
            levels: self
                .levels
                .iter()
                .map(|l| LevelState {
                    id: l.id,
                    epoch: 0,
                    stripe_pages: 0,
                    flight: None,
                })
                .collect(),
        };
        record.create(&mut pool)?;
        let mut engine = Engine::init(pool, MovableSelfSpace::default())?;
        // Exact written pages, never whole regions: a page reported written costs a delta
        // computation and a zero check here, more than its write-protect fault.
        engine.set_adaptive(false)?;
        *self.shared.lock() = Some(Inner { engine, record });
        self.journals.clear();
        Ok(())
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }
    pub fn size(&self) -> usize {
        self.comm.size()
    }
    pub fn group(&self) -> (usize, usize, usize) {
        (self.gi, self.pos, self.members.len())
    }
    /// The members of every group (world ranks, position order).
    pub fn groups(&self) -> &[Vec<usize>] {
        &self.groups.groups
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Whether pools of an earlier run wait to be recovered.
    pub fn must_recover(&self) -> bool {
        self.state == State::MustRecover
    }
    /// Whether remote levels are encoded in the background.
    pub fn background(&self) -> bool {
        self.background
    }
    /// The last committed group epoch (0: none); before recovery, what this rank's pool holds.
    pub fn epoch(&self) -> u64 {
        self.meta.as_ref().map_or(0, |m| m.epoch)
    }
    pub fn last_level(&self) -> u8 {
        self.meta.as_ref().map_or(0, |m| m.level)
    }
    /// The epoch whose data level `id`'s parity encodes (0: none yet), as committed on this
    /// rank.
    pub fn level_epoch(&self, id: u8) -> u64 {
        self.shared
            .lock()
            .as_ref()
            .map_or(0, |i| i.record.epoch(id))
    }
    /// Whether a background flight is running.
    pub fn in_flight(&mut self) -> bool {
        self.flight
            .as_ref()
            .is_some_and(|f| !f.handle.is_finished())
    }
    /// The (k, m) of the rs level.
    pub fn rs_code(&self) -> Option<(usize, usize)> {
        self.levels
            .iter()
            .find(|l| l.id == RS)
            .map(|l| (l.scheme.k, l.scheme.m))
    }
    /// Bytes this rank's pool takes: what the file system holds for it (the memory on
    /// /dev/shm), not counting the holes where freed redo logs were.
    pub fn pool_bytes(&self) -> u64 {
        crate::flight::allocated(&self.cfg.pool_path(self.rank()))
    }

    pub(crate) fn running(&self) -> Result<()> {
        match &self.state {
            State::Running => Ok(()),
            State::MustRecover => Err(GroupError::State(format!(
                "pools of an earlier run exist under {}: call kioku_group_recover() to resume from them, or remove them to start afresh",
                self.cfg.dir.display()
            ))),
            State::Broken(why) => Err(GroupError::State(format!(
                "an earlier group operation failed ({why}); restart the job and call kioku_group_recover()"
            ))),
        }
    }

    pub(crate) fn level(&self, id: u8) -> &Level {
        self.levels.iter().find(|l| l.id == id).expect("level kept")
    }

    /// Runs `f` on the open pool's contents under the lock.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.shared.lock();
        f(g.as_mut().expect("the pool is open"))
    }

    pub(crate) fn journal(&self, id: u8) -> Option<&Journal> {
        self.journals.iter().find(|j| j.level == id)
    }

    /// Memory for protected region `id` of `size` bytes: a new zeroed region, or after
    /// recovery the recovered one (same size required).
    pub fn alloc(&mut self, id: u32, size: usize) -> Result<*mut u8> {
        self.running()?;
        if size == 0 {
            return Err(GroupError::Invalid("kioku_group_alloc: size 0".into()));
        }
        let pages = size.div_ceil(self.page) as u64;
        if let Some(e) = self.table.get(id) {
            if e.bytes != size as u64 {
                return Err(GroupError::Invalid(format!(
                    "kioku_group_alloc: region {id} exists with {} bytes, asked for {size}; ids name one region for the whole job",
                    e.bytes
                )));
            }
            return Ok(self.with(|i| {
                i.engine
                    .region(&user_region_name(id))
                    .expect("table and engine agree")
                    .as_ptr()
            }));
        }
        let ptr = self.create_user_region(id, size)?;
        self.table.add(id, size as u64, pages);
        Ok(ptr)
    }

    /// Creates the engine region of protected region `id` (`size` bytes, reserving no room to
    /// grow: protected regions keep their size).
    pub(crate) fn create_user_region(&mut self, id: u32, size: usize) -> Result<*mut u8> {
        let reserve = size.div_ceil(self.page) * self.page;
        let r = self.with(|i| {
            i.engine.create_region(
                &user_region_name(id),
                size,
                RegionOptions {
                    addr: None,
                    reserve: Some(reserve),
                },
            )
        })?;
        Ok(r.as_ptr())
    }

    /// Protects `size` bytes of the program's own memory at `ptr` as region `id`: when the
    /// region exists (after a recovery) its contents are copied into the buffer now; from then
    /// on every checkpoint copies the buffer's changed pages into the region (found by
    /// comparing page by page — the buffer is not write-tracked), so deltas and parity work as
    /// for `alloc`. Calling it again for a protected `id` moves the registration to a new
    /// buffer of the same size, whose contents are the program's.
    ///
    /// # Safety
    /// `ptr` must stay valid for reads and writes of `size` bytes until it is protected anew
    /// or the group is finalised.
    pub unsafe fn protect(&mut self, id: u32, ptr: *mut u8, size: usize) -> Result<()> {
        if ptr.is_null() {
            return Err(GroupError::Invalid(
                "kioku_group_protect: NULL buffer".into(),
            ));
        }
        if let Some(p) = self.protected.iter_mut().find(|p| p.0 == id) {
            // Moved (say, reallocated): the buffer holds the program's data; the next
            // checkpoint compares it with the region as always.
            if p.2 != size {
                return Err(GroupError::Invalid(format!(
                    "kioku_group_protect: region {id} is {} bytes, the new buffer {size}",
                    p.2
                )));
            }
            p.1 = ptr;
            return Ok(());
        }
        let existed = self.table.get(id).is_some();
        let region = self.alloc(id, size)?;
        if existed {
            // SAFETY: `region` is a mapped region of at least `size` bytes; `ptr` is valid for
            // `size` bytes per this function's contract; the region is ours, so they do not
            // overlap.
            unsafe { std::ptr::copy_nonoverlapping(region, ptr, size) };
        }
        self.protected.push((id, ptr, size));
        Ok(())
    }

    /// Copies the changed pages of protected buffers into their regions.
    fn sync_protected(&mut self) {
        let page = self.page;
        let protected = self.protected.clone();
        self.with(|i| {
            for &(id, ptr, size) in &protected {
                let mem =
                    Mem::of(&i.engine, &user_region_name(id), page).expect("protected region");
                let region = &mut mem.bytes_mut()[..size];
                // SAFETY: `ptr` is valid for `size` bytes per `protect`'s contract, and the
                // program does not write it during the collective call.
                let buf = unsafe { std::slice::from_raw_parts(ptr, size) };
                for (dst, src) in region.chunks_mut(page).zip(buf.chunks(page)) {
                    if dst != src {
                        dst.copy_from_slice(src);
                    }
                }
            }
        })
    }

    /// The tables of this rank's group members (position order), from every rank's.
    pub(crate) fn group_tables(&self) -> Result<Vec<Table>> {
        let mine = serde_json::to_vec(&self.table).expect("table serialises");
        let all = self.comm.allgather_var(&mine)?;
        self.members
            .iter()
            .map(|&r| {
                serde_json::from_slice(&all[r]).map_err(|e| GroupError::Remote {
                    rank: r,
                    detail: format!("bad table: {e}"),
                })
            })
            .collect()
    }

    /// Data pages written since the last checkpoint, ascending.
    fn written_data_pages(&mut self) -> Result<Vec<u64>> {
        let runs = self.with(|i| i.engine.written())?;
        let mut out = Vec::new();
        for (name, first, n) in runs {
            let Some(id) = name.strip_prefix('u').and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let e = self.table.get(id).expect("region in table");
            out.extend((first as u64..(first + n) as u64).map(|p| e.offset + p));
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Waits for the background flight, if one runs, and takes in its outcome: `Ok` with the
    /// time waited; an error only when the flight could not finish its protocol (MPI, the
    /// pool), which breaks the group.
    pub fn wait(&mut self) -> Result<Duration> {
        let Some(run) = self.flight.take() else {
            return Ok(Duration::ZERO);
        };
        let t = Instant::now();
        let (bg, result, ended) = run.handle.join().unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            (
                Bg::attach(&self.comm),
                Err(GroupError::State(format!(
                    "the background encoding failed (a bug in kioku): {msg}"
                ))),
                Instant::now(),
            )
        });
        self.bg = Some(bg);
        let waited = t.elapsed();
        match result {
            Ok(rep) => {
                self.took(&rep, ended.duration_since(run.started), true);
                Ok(waited)
            }
            Err(e) => {
                self.state = State::Broken(e.to_string());
                Err(e)
            }
        }
    }

    /// Takes in a flight's outcome: a committed level starts a new journal.
    fn took(&mut self, rep: &FlightReport, durable: Duration, background: bool) {
        if rep.committed {
            self.new_journal(rep.level, rep.epoch);
        }
        self.last_flight = Some(FlightStatus {
            level: rep.level,
            epoch: rep.epoch,
            committed: rep.committed,
            failure: rep.failure.clone(),
            encoded_pages: rep.encoded_pages,
            bytes_sent: rep.bytes_sent,
            durable,
            background,
            pool_peak: rep.pool_peak,
        });
    }

    /// Level `level` committed `epoch`: its journal starts afresh, and the old one's space
    /// goes back to the file system (nothing reads it any more). Freeing is best effort: a
    /// failure leaves the space taken, nothing else.
    pub(crate) fn new_journal(&mut self, level: u8, epoch: u64) {
        self.journals.retain(|j| j.level != level);
        self.journals.push(Journal::new(level, epoch));
        // The commit makes the space reusable, and a reopened pool no longer names it.
        let freed = self.with(|i| -> Result<()> {
            if Journal::discard(i.engine.pool_mut(), level)? {
                i.engine.commit_sections()?;
            }
            Ok(())
        });
        if let Err(e) = freed {
            tracing::warn!(level, %e, "cannot free a journal");
        }
    }

    /// A collective checkpoint at `level` (1 local, 2 partner, 3 rs).
    pub fn checkpoint(&mut self, level: u8) -> Result<CheckpointReport> {
        self.running()?;
        if !(LOCAL..=RS).contains(&level) {
            return Err(GroupError::Invalid(format!(
                "checkpoint level {level}: 1 (local), 2 (partner) or 3 (rs)"
            )));
        }
        if level != LOCAL && !self.levels.iter().any(|l| l.id == level) {
            return Err(GroupError::Invalid(format!(
                "checkpoint level {level} is not kept by this job; add it to KIOKU_LEVELS (partner, rs)"
            )));
        }
        let r = self.checkpoint_inner(level, None);
        if let Err(e) = &r {
            if !matches!(e, GroupError::Invalid(_) | GroupError::FlightFailed { .. }) {
                self.state = State::Broken(e.to_string());
            }
        }
        r
    }

    /// The flight of level `id` for epoch `epoch`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn flight_for(
        &self,
        id: u8,
        epoch: u64,
        q_total: u64,
        mode: Mode,
        source: Source,
        sink: Sink,
        pages: Vec<u64>,
    ) -> Flight {
        let l = self.level(id);
        Flight {
            level: id,
            scheme: l.scheme,
            codec: l.codec.clone(),
            epoch,
            q_total,
            pos: self.pos,
            rank: self.rank(),
            members: self.members.clone(),
            page: self.page,
            segment: self.cfg.segment_pages as u64,
            budget: self.cfg.flight_mib << 20,
            mode,
            source,
            sink,
            pages,
            table: self.table.clone(),
            journal: self.journal(id).cloned(),
        }
    }

    /// A checkpoint at `level`; with `rebuild_from` (the end of a recovery that rebuilt lost
    /// ranks or pages from level `decoded`, whose parity matches the data again), every other
    /// kept level is encoded afresh, and `decoded` is relabelled to this epoch.
    pub(crate) fn checkpoint_inner(
        &mut self,
        level: u8,
        rebuild_from: Option<u8>,
    ) -> Result<CheckpointReport> {
        let t0 = Instant::now();
        let waited = self.wait()?;
        let rebuild = rebuild_from.is_some();
        let epoch = self.epoch() + 1;
        let rank = self.rank();
        let tables = self.group_tables()?;
        let max_pages = tables.iter().map(Table::pages).max().unwrap_or(0);
        let my_pages = self.table.pages();
        if self.cfg.full && !rebuild {
            // The baseline: a full checkpoint writes every page, written or not.
            for id in self.table.regions.iter().map(|r| r.id).collect::<Vec<_>>() {
                self.with(|i| i.engine.take_whole_next(&user_region_name(id)))?;
            }
        }
        self.sync_protected();
        let dirty = self.written_data_pages()?;
        let page = self.page;

        // Which levels are encoded by this call, how, and where.
        let level_epochs: Vec<(u8, u64)> = self
            .levels
            .iter()
            .map(|l| (l.id, self.level_epoch(l.id)))
            .collect();
        let mut inline: Vec<(u8, Mode)> = Vec::new();
        let mut background: Option<(u8, Mode)> = None;
        for &(id, at) in &level_epochs {
            let fresh = rebuild || at == 0;
            let mode = if fresh {
                Mode::Fresh
            } else if self.cfg.full {
                Mode::Full
            } else {
                Mode::Delta
            };
            if rebuild {
                if Some(id) != rebuild_from {
                    inline.push((id, Mode::Fresh));
                }
            } else if id == level {
                if self.background && !self.cfg.full {
                    background = Some((id, mode));
                } else {
                    inline.push((id, mode));
                }
            }
        }

        // (1) Parity sized for the data, journals for the levels whose base moves on: a local
        // failure here is agreed on before anyone sends.
        let mut journaled = 0u64;
        let prepared = (|| -> Result<()> {
            let encoded: Vec<u8> = inline
                .iter()
                .map(|x| x.0)
                .chain(background.map(|x| x.0))
                .collect();
            for &id in &encoded {
                let scheme = self.level(id).scheme;
                let q = scheme.stripe_pages(max_pages);
                self.with(|i| Parity::ensure(i.engine.pool_mut(), page, id, scheme.m, q))?;
            }
            if rebuild {
                return Ok(());
            }
            // The first write since a level's commit saves the page's value as of then (the
            // valid checkpoint's) — except for a level encoded inline now, whose deltas are
            // taken before this checkpoint's finish.
            for &(id, at) in &level_epochs {
                if at == 0 || inline.iter().any(|x| x.0 == id) {
                    continue;
                }
                if self.journal(id).is_none_or(|j| j.base != at) {
                    self.journals.retain(|j| j.level != id);
                    self.journals.push(Journal::new(id, at));
                }
                let mut j = self.journal(id).cloned().expect("just made");
                let table = self.table.clone();
                journaled += self.with(|i| -> Result<u64> {
                    let new = dirty.iter().filter(|&&p| !j.contains(p)).count() as u64;
                    j.reserve(i.engine.pool_mut(), page, new)?;
                    let view = DataView::of(&i.engine, &table, page);
                    let zero = vec![0u8; page];
                    let zero_crc = crate::store::zero_crc(page);
                    let mut n = 0;
                    for &p in &dirty {
                        if j.contains(p) {
                            continue;
                        }
                        let (bytes, want) = view.committed(p).unwrap_or((&zero, zero_crc));
                        let bytes = bytes.to_vec();
                        j.append(i.engine.pool_mut(), page, p, &bytes, want)?;
                        n += 1;
                    }
                    Ok(n)
                })?;
                self.journals.retain(|x| x.level != id);
                self.journals.push(j);
            }
            if journaled > 0 {
                self.with(|i| i.engine.pool().drain())
                    .map_err(CkptError::from)?;
            }
            let _ = my_pages;
            Ok(())
        })();
        agree(&self.comm, prepared)?;

        // A level whose parity encodes nothing yet is written in place (no older parity to
        // keep); any other through a redo log.
        let sink_for = |id: u8| {
            if level_epochs.iter().any(|&(l, at)| l == id && at == 0) {
                Sink::InPlace
            } else {
                Sink::Log
            }
        };

        // (2) Inline flights: sent, logged, agreed — before the local checkpoint commits.
        let te = Instant::now();
        let mut flights: Vec<Flight> = Vec::new();
        let mut encoded_pages = 0;
        let mut bytes_sent = 0;
        let mut pool_peak = 0;
        for &(id, mode) in &inline {
            let pages: Vec<u64> = match mode {
                Mode::Delta => {
                    let mut v = self.journal(id).map(Journal::pages).unwrap_or_default();
                    v.extend_from_slice(&dirty);
                    v.sort_unstable();
                    v.dedup();
                    v.retain(|&p| p < my_pages);
                    v
                }
                Mode::Fresh | Mode::Full => (0..my_pages).collect(),
            };
            let q = self.level(id).scheme.stripe_pages(max_pages);
            let f = self.flight_for(id, epoch, q, mode, Source::Live, sink_for(id), pages);
            let mut bg = self.bg.take().expect("no flight runs");
            let ex = f.exchange(&self.shared, &mut bg);
            let ex = match ex {
                Ok(ex) => ex,
                Err(e) => {
                    self.bg = Some(bg);
                    return Err(e);
                }
            };
            let mut failure = ex.failure.clone();
            if failure.is_none() {
                if let Err(e) = f.mark_logged(&self.shared, ex.log) {
                    failure = Some(e.to_string());
                }
            }
            let agreed = crate::flight::agree(&bg, failure);
            self.bg = Some(bg);
            match agreed? {
                Ok(()) => {}
                Err(why) => {
                    for f in flights.iter().chain(std::iter::once(&f)) {
                        f.discard(&self.shared)?;
                    }
                    return Err(GroupError::FlightFailed { level: id, why });
                }
            }
            encoded_pages += ex.encoded_pages;
            bytes_sent += ex.bytes_sent;
            pool_peak = pool_peak.max(ex.pool_peak);
            flights.push(f);
        }
        let t_encode = te.elapsed();

        // (3) The local checkpoint: prepared everywhere, agreed, finished.
        let journals = self.journals.iter().map(Journal::mark).collect();
        let meta = GroupMeta {
            magic: MAGIC.into(),
            version: VERSION,
            ranks: self.size(),
            rank,
            epoch,
            level,
            members: self.members.clone(),
            tables,
            group_size: self.cfg.group_size,
            parity: self.cfg.parity,
            partner: self.cfg.partner,
            rs: self.cfg.rs,
            journals,
        };
        let tp = Instant::now();
        let prepared = self
            .with(|i| i.engine.prepare(&meta.encode()))
            .map_err(GroupError::from);
        fault("prepared", rank, epoch);
        agree(&self.comm, prepared)?;
        self.with(|i| i.engine.finish())?;
        let t_persist = tp.elapsed();
        self.meta = Some(meta);

        // (4) The inline flights commit; a rebuilt level now encodes this epoch's data.
        for f in &flights {
            f.commit_and_apply(&self.shared)?;
            self.new_journal(f.level, epoch);
        }
        if let Some(decoded) = rebuild_from {
            self.with(|i| -> Result<()> {
                let l = i.record.level_mut(decoded).expect("kept level");
                l.epoch = epoch;
                i.record.write(i.engine.pool_mut())
            })?;
            self.journals.clear();
            for &(id, _) in &level_epochs {
                self.journals.push(Journal::new(id, epoch));
            }
        }
        if !flights.is_empty() {
            let f = flights.last().expect("nonempty");
            self.last_flight = Some(FlightStatus {
                level: f.level,
                epoch,
                committed: true,
                failure: None,
                encoded_pages,
                bytes_sent,
                durable: t0.elapsed(),
                background: false,
                pool_peak,
            });
        }

        self.damage_for_tests(epoch);

        // (5) The level's flight in the background: the program goes on meanwhile.
        if let Some((id, mode)) = background {
            let pages: Vec<u64> = match mode {
                Mode::Delta => self.journal(id).map(Journal::pages).unwrap_or_default(),
                Mode::Fresh | Mode::Full => (0..my_pages).collect(),
            };
            let q = self.level(id).scheme.stripe_pages(max_pages);
            let f = self.flight_for(id, epoch, q, mode, Source::Committed, sink_for(id), pages);
            let shared = self.shared.clone();
            let mut bg = self.bg.take().expect("no flight runs");
            let handle = std::thread::Builder::new()
                .name("kioku-flight".into())
                .spawn(move || {
                    let r = f.run(&shared, &mut bg);
                    (bg, r, Instant::now())
                })
                .map_err(|e| {
                    GroupError::State(format!("cannot start the background encoding: {e}"))
                })?;
            self.flight = Some(Running {
                handle,
                started: t0,
            });
        }
        self.last = CheckpointReport {
            epoch,
            level,
            dirty_pages: dirty.len() as u64,
            encoded_pages,
            bytes_sent,
            journaled_pages: journaled,
            waited,
            encode: t_encode,
            persist: t_persist,
            total: t0.elapsed(),
            background: background.is_some(),
        };
        Ok(self.last.clone())
    }

    /// Fault injection for the scrub test: `KIOKU_FAULT=damage:<rank>:<epoch>` flips a bit of
    /// the first data page of the valid checkpoint and of the first parity page this rank
    /// holds, once that checkpoint is finished (a bit flip on the medium).
    fn damage_for_tests(&mut self, epoch: u64) {
        let want = format!("damage:{}:{epoch}", self.rank());
        if std::env::var("KIOKU_FAULT").ok().as_deref() != Some(want.as_str()) {
            return;
        }
        tracing::warn!(epoch, "KIOKU_FAULT: damaging this rank's pool");
        self.with(|i| {
            let pool = i.engine.pool_mut();
            let valid = pool.roots()[0];
            for name in [format!("ckpt.r1.{valid}"), format!("g.p{RS}.0")] {
                if let Some(off) = pool.section(&name).map(|s| s.offset) {
                    pool.bytes_mut(off + 33, 1)[0] ^= 0x20;
                }
            }
        });
    }

    /// Collective scrub: checks every page checksum of every pool (data, parity, journals),
    /// rebuilds what fails from the other context or the group's parity, then recomputes
    /// every kept level's parity afresh and compares it with the parity held. Call it between
    /// checkpoints (it waits for a background encoding first).
    pub fn verify(&mut self) -> Result<ScrubReport> {
        self.running()?;
        self.wait()?;
        let mut report = crate::repair::scrub(self)?;
        let tables = self.group_tables()?;
        let max_pages = tables.iter().map(Table::pages).max().unwrap_or(0);
        let my_pages = self.table.pages();
        let epoch = self.epoch();
        let ids: Vec<u8> = self.levels.iter().map(|l| l.id).collect();
        for id in ids {
            if self.level_epoch(id) != epoch || epoch == 0 {
                continue; // Parity of an earlier epoch: the data moved on since.
            }
            let q = self.level(id).scheme.stripe_pages(max_pages);
            let f = self.flight_for(
                id,
                epoch,
                q,
                Mode::Fresh,
                Source::Committed,
                Sink::Compare,
                (0..my_pages).collect(),
            );
            let mut bg = self.bg.take().expect("no flight runs");
            let ex = f.exchange(&self.shared, &mut bg);
            self.bg = Some(bg);
            let ex = ex?;
            let mut sum = [ex.mismatches];
            self.comm.allreduce(&mut sum, Op::Sum)?;
            report.mismatched.push((id, sum[0]));
        }
        self.scrubbed = Some(report.clone());
        Ok(report)
    }

    /// Collective recovery after a restart: agrees on the epoch every rank can return to,
    /// rolls back checkpoints that were prepared but not agreed, finishes or forgets flights,
    /// rebuilds lost ranks (missing or damaged pools) and damaged pages from the others' data
    /// and the parity, and protects the group again before the program goes on.
    pub fn recover(&mut self) -> Result<RecoveryReport> {
        if self.state != State::MustRecover {
            return Err(GroupError::State(
                "kioku_group_recover: nothing to recover (no pools of an earlier run); allocate and run"
                    .into(),
            ));
        }
        let r = crate::recovery::recover(self);
        match &r {
            Ok(rep) => {
                self.state = State::Running;
                self.recovered = Some(rep.clone());
            }
            Err(e) => self.state = State::Broken(e.to_string()),
        }
        r
    }

    /// Waits for a background flight, then drops the engine: the pool keeps the last
    /// checkpoint.
    pub fn close(&mut self) -> Result<()> {
        let r = self.wait().map(|_| ());
        *self.shared.lock() = None;
        r
    }
}
