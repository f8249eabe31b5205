//! The engine: regions of memory that live in a pool, in NDCKPT's two contexts.
//!
//! Contexts `ctx[0]` and `ctx[1]` each hold a full image of every region (pool sections
//! `ckpt.r<id>.<ctx>`) and its metadata (`ckpt.meta.<ctx>`: region table, page checksums, the
//! caller's metadata). The program runs directly on the pages of the *running* context, mapped
//! shared at the region's address. The pool's commit roots say which context is *valid*
//! (restorable) — NDCKPT's `valid_ctx_idx`, flipped with one 8-byte store.
//!
//! A checkpoint (program quiescent): (1) scan the pages written since the last checkpoint,
//! write them back and update their checksums; (2) write the metadata into the running context;
//! (3) commit `valid = running` — the checkpoint is durable from here on; (4) sync the other
//! context (its sections follow region creation, growth, shrinking and deletion; then only the
//! pages written in the epoch are copied) and commit `valid = other`; the program continues on
//! the running context.
//!
//! Departure from the paper, on purpose: NDCKPT continues on the *other* context after (4),
//! switching page tables. From user space, switching contexts means remapping every region,
//! after which every page the program touches faults again and write tracking must be
//! re-armed — a cost per touched page per epoch. Keeping the running context fixed and making
//! the other context the valid copy (a second commit, two more fences) keeps the program's
//! mappings and tracking untouched across checkpoints. The invariant is the paper's: at every
//! instant one context is a complete, durable checkpoint, and the index says which.

use crate::error::{CkptError, Result};
use crate::meta::{encode_parts, ContextMeta, RegionRecord, MAX_NAME};
use crate::space::{AddressSpace, SelfSpace};
use kioku_pool::{CreateOptions, Medium, MediumChoice, OpenOptions, Pool, SECTION_SPARSE};
use kioku_track::{PageRange, PageTracker};
use std::path::Path;
use std::time::{Duration, Instant};

/// The pool kind tag of checkpoint pools.
pub const POOL_KIND: &str = "kioku.ckpt";

/// Indexes of the pool's commit roots.
pub(crate) mod root {
    pub const VALID: usize = 0;
    pub const RUNNING: usize = 1;
    pub const EPOCH: usize = 2;
    pub const META_LEN: usize = 3;
    pub const META_CRC: usize = 4;
    pub const TIME: usize = 5;
    /// Length and checksum of the other context's metadata while a checkpoint is prepared
    /// (`VALID == RUNNING`), so that it can be rolled back; zero otherwise.
    pub const PREV_META_LEN: usize = 6;
    pub const PREV_META_CRC: usize = 7;
    pub const COUNT: usize = 8;
    /// Roots written before two-phase checkpoints existed.
    pub const COUNT_V1: usize = 6;
}

/// How to create or open a checkpoint pool.
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    pub medium: MediumChoice,
    /// Use the pool's previous commit when its live commit slot is damaged.
    pub allow_rollback: bool,
    /// When the pool's last checkpoint is prepared but not finished ([`Engine::prepare`]),
    /// recover the checkpoint before it instead (a group that did not commit the epoch).
    pub rollback_prepared: bool,
    /// A page of the checkpoint that fails its checksum in both contexts does not fail the
    /// recovery: it is left as found and listed in [`Recovered::damaged`], for a caller that
    /// can rebuild it from elsewhere (the group library, from its parity). Without this,
    /// recovery fails with [`CkptError::ContextDamaged`] naming the page.
    pub keep_damaged_pages: bool,
    /// Recover without reading the pages: the regions are mapped on the other context (not
    /// yet equal to the valid one) and [`Engine::committed`] gives the valid context's bytes,
    /// unverified — the caller verifies each page it uses against [`Engine::page_checksums`].
    /// Verifying every page, making the other context equal and committing happen in
    /// [`Engine::finish_recovery`], which must run before the regions are read or written
    /// through their mapping (the next checkpoint runs it first). Until then the pool is as it
    /// was: a crash recovers the same checkpoint again. Holes (of sparse sections, or never
    /// written on tmpfs) are found with [`Engine::committed_data`] and [`Engine::running_data`]
    /// instead of read: reading a hole through a mapping fills it.
    pub lazy_recovery: bool,
}

/// A pool's last commit, read without changing the pool ([`commit_state`]).
#[derive(Clone, Debug)]
pub struct CommitState {
    /// Epoch of the last (possibly only prepared) checkpoint.
    pub epoch: u64,
    /// Whether that checkpoint is prepared but not finished: the checkpoint before it (epoch
    /// `epoch - 1`, `previous_metadata`) is still intact and can be recovered instead.
    pub prepared: bool,
    /// The caller's metadata of that checkpoint.
    pub metadata: Vec<u8>,
    /// When prepared: the caller's metadata of the checkpoint before it, unless an interrupted
    /// [`Engine::finish`] had begun to overwrite it.
    pub previous_metadata: Option<Vec<u8>>,
}

/// What a pool written by this engine holds as its last commit. Opens the pool (taking its
/// lock for the moment) and changes nothing.
pub fn commit_state(path: &Path, opts: &EngineOptions) -> Result<CommitState> {
    let o = OpenOptions {
        medium: opts.medium,
        kind: Some(POOL_KIND.into()),
        allow_rollback: opts.allow_rollback,
        fixed_time_ns: None,
    };
    let pool = Pool::open(path, &o)?;
    commit_state_of(&pool)
}

/// [`commit_state`] of a pool already open (read only: the pool is not changed).
pub fn commit_state_of(pool: &Pool) -> Result<CommitState> {
    let r = pool.roots().to_vec();
    if r.is_empty() {
        return Ok(CommitState {
            epoch: 0,
            prepared: false,
            metadata: vec![],
            previous_metadata: None,
        });
    }
    let (valid, epoch, prepared) = check_roots(&r)?;
    let user = |ctx: usize, len: u64, crc: u64, epoch: u64| -> Result<Vec<u8>> {
        let b = read_meta(pool, ctx, len, crc).ok_or(CkptError::MetaDamaged { epoch })?;
        Ok(ContextMeta::decode(&b)
            .map_err(|detail| CkptError::NotACheckpoint { detail })?
            .user)
    };
    let metadata = match user(valid, r[root::META_LEN], r[root::META_CRC], epoch) {
        Ok(m) => m,
        // The valid context's copy is damaged; the other holds the same block after a sync.
        Err(_) if !prepared => user(1 - valid, r[root::META_LEN], r[root::META_CRC], epoch)?,
        Err(e) => return Err(e),
    };
    // A finish that a crash interrupted may already have overwritten the other context's
    // metadata with the prepared checkpoint's: the checkpoint before is gone then (finish
    // only runs once the prepared one is agreed on), and there is none to report.
    let previous_metadata = if prepared {
        user(
            1 - valid,
            r[root::PREV_META_LEN],
            r[root::PREV_META_CRC],
            epoch - 1,
        )
        .ok()
    } else {
        None
    };
    Ok(CommitState {
        epoch,
        prepared,
        metadata,
        previous_metadata,
    })
}

/// What a read-only check of every page of a pool's checkpoint found ([`scan_pages`]).
#[derive(Clone, Debug, Default)]
pub struct PageScan {
    /// Epoch of the checkpoint checked.
    pub epoch: u64,
    /// Pages recovery would repair from the other context (it holds them intact).
    pub repairable: u64,
    /// Pages that verify in neither context: `(region, page)`, at most the cap asked for.
    pub damaged: Vec<(String, u64)>,
    /// More damaged pages exist than the cap let through.
    pub truncated: bool,
}

/// Checks every page of the checkpoint a recovery would restore (the last one, or with
/// `rollback_prepared` the one before a prepared checkpoint) against its checksum, exactly as
/// recovery does, without changing the pool. Lists at most `cap` damaged pages.
pub fn scan_pages(pool: &Pool, rollback_prepared: bool, cap: usize) -> Result<PageScan> {
    let mut r = pool.roots().to_vec();
    if r.is_empty() {
        return Ok(PageScan::default());
    }
    let (_, _, prepared) = check_roots(&r)?;
    if prepared && rollback_prepared {
        r[root::VALID] = 1 - r[root::RUNNING];
        r[root::EPOCH] -= 1;
        r[root::META_LEN] = r[root::PREV_META_LEN];
        r[root::META_CRC] = r[root::PREV_META_CRC];
    }
    let valid = r[root::VALID] as usize;
    let epoch = r[root::EPOCH];
    let bytes = [valid, 1 - valid]
        .into_iter()
        .find_map(|ctx| read_meta(pool, ctx, r[root::META_LEN], r[root::META_CRC]))
        .ok_or(CkptError::MetaDamaged { epoch })?;
    let meta =
        ContextMeta::decode(&bytes).map_err(|detail| CkptError::NotACheckpoint { detail })?;
    let mut out = PageScan {
        epoch,
        ..Default::default()
    };
    for bad in bad_pages(pool, &meta, valid, usize::MAX) {
        if bad.copy_ok {
            // A hole the other context fills is a sparse engine's single copy, not damage.
            out.repairable += u64::from(!bad.hole);
        } else if out.damaged.len() < cap {
            out.damaged
                .push((meta.regions[bad.region].name.clone(), bad.page));
        } else {
            out.truncated = true;
        }
    }
    Ok(out)
}

/// Checks the shape of the engine's commit roots; (valid context, epoch, prepared).
fn check_roots(r: &[u64]) -> Result<(usize, u64, bool)> {
    if (r.len() != root::COUNT && r.len() != root::COUNT_V1)
        || r[root::VALID] > 1
        || r[root::RUNNING] > 1
    {
        return Err(CkptError::NotACheckpoint {
            detail: format!("commit roots {r:?}"),
        });
    }
    let prepared = r.len() == root::COUNT
        && r[root::VALID] == r[root::RUNNING]
        && r[root::PREV_META_LEN] > 0
        && r[root::EPOCH] > 0;
    Ok((r[root::VALID] as usize, r[root::EPOCH], prepared))
}

/// A checkpoint made durable by [`Engine::prepare`] and not yet finished.
struct Prepared {
    runs: Vec<(usize, usize, usize)>,
    /// Per run (sparse engines): `(first page, pages)` of it that are zero now, holes in the
    /// running context, to be made holes in the other context too instead of copied.
    holes: Vec<Vec<(usize, usize)>>,
    meta: Vec<u8>,
    meta_crc: u32,
    dirty: Vec<PageRange>,
    t_scan: Duration,
    t_durable: Duration,
    t0: Instant,
    dirty_pages: u64,
}

/// Where a region is and how large.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    pub name: String,
    /// First byte (page-aligned); valid until the region is deleted or the engine dropped.
    pub addr: usize,
    pub len: usize,
    /// Address space reserved for growth in place.
    pub reserve: usize,
}

impl RegionInfo {
    /// The region as a pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
}

/// How to place a new region.
#[derive(Clone, Copy, Debug, Default)]
pub struct RegionOptions {
    /// Exact address (page-aligned); the kernel chooses when `None`.
    pub addr: Option<usize>,
    /// Address space to reserve for growth; default: the larger of 2 × len and 1 GiB.
    pub reserve: Option<usize>,
}

/// What one checkpoint did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CheckpointStats {
    pub epoch: u64,
    pub dirty_pages: u64,
    pub dirty_bytes: u64,
    /// Finding written pages.
    pub scan: Duration,
    /// From the end of the scan until the checkpoint was durable (write-back, metadata, commit).
    pub persist: Duration,
    /// Syncing the other context.
    pub sync: Duration,
    pub total: Duration,
}

/// What `recover` found.
#[derive(Clone, Debug)]
pub struct Recovered {
    /// Epoch of the checkpoint restored (0: no checkpoint was ever taken).
    pub epoch: u64,
    pub time_ns: u64,
    /// The metadata passed to that checkpoint.
    pub metadata: Vec<u8>,
    /// Context the state came from.
    pub source_ctx: usize,
    /// Whether pages of the valid context failed their checksums and were repaired from the
    /// other context, which held the same page intact (`repaired_pages` of them).
    pub used_copy: bool,
    pub repaired_pages: u64,
    /// Pages that verify in neither context (only with
    /// [`EngineOptions::keep_damaged_pages`]): `(region, page)`, left as found in both
    /// contexts; their checksums in the engine stay the checkpoint's.
    pub damaged: Vec<(String, u64)>,
    /// Pages copied to make the other context equal.
    pub pages_synced: u64,
}

struct Region {
    rec: RegionRecord,
    crcs: Vec<u32>,
}

/// The checkpoint engine over an address space `S` (the calling process by default).
pub struct Engine<S: AddressSpace = SelfSpace> {
    pool: Pool,
    space: S,
    tracker: Box<dyn PageTracker>,
    running: usize,
    epoch: u64,
    /// Sorted by address.
    regions: Vec<Region>,
    next_id: u64,
    page: u64,
    zero_page_crc: u32,
    /// Pages to treat as written at the next checkpoint besides what the tracker reports
    /// (a region moved in the pool, or grown back over space it had shrunk away from).
    carried: Vec<PageRange>,
    scratch: Vec<PageRange>,
    /// Regions (by id) that are not write-tracked because nearly all their pages were written
    /// in every recent epoch: each checkpoint takes them whole, which costs less than a
    /// write-protect fault per page per epoch. Value: checkpoints left before tracking them
    /// again to see whether that still holds.
    whole: std::collections::HashMap<u64, u32>,
    /// Consecutive checkpoints in which at least half of a tracked region was written.
    hot: std::collections::HashMap<u64, u32>,
    /// Whether hot regions may be switched to being taken whole.
    adaptive: bool,
    /// Length and checksum of the valid context's metadata (kept in the roots of a prepared
    /// checkpoint, so that it can be rolled back).
    committed_meta: (u64, u32),
    prepared: Option<Prepared>,
    /// A recovery whose verification, sync of the other context and commit wait for
    /// [`Engine::finish_recovery`] (`EngineOptions::lazy_recovery`).
    lazy: Option<LazyRecovery>,
    /// Region sections are sparse: space only for pages that hold data; a page that becomes
    /// zero is punched (in both contexts); the running context holds only the pages written
    /// in the current epoch. See [`Engine::set_sparse`].
    sparse: bool,
    /// The running context still holds pages of before (a full copy made by recovery): empty
    /// it at the next checkpoint's end.
    empty_running: bool,
    /// A sparse engine keeps the running context's pages that the last two checkpoints both
    /// wrote (copies of the valid context's) instead of punching them, so that pages written
    /// again in the next epoch are stored into pages the file already has (see
    /// [`Engine::set_keep_running`]).
    keep_running: bool,
    /// The last checkpoint's written pages, `(first page, pages)` by region id (sparse engines
    /// keeping their running pages).
    last_runs: std::collections::HashMap<u64, Vec<(usize, usize)>>,
    /// Bytes of pool pages this engine read or wrote through the pool's mapping (checksums,
    /// copies into the other context) since it last let go of them (dense engines; see
    /// [`release_pool_mapping`]).
    pool_touched: u64,
    /// Reused buffer the checksums of a checkpoint's pages are computed from (read with
    /// `pread` where the medium can: see [`Engine::run_crcs`]).
    read_buf: Vec<u8>,
    /// Checksums of running-context pages stored by [`Engine::store_running`] in this epoch,
    /// by (region id, page): the next checkpoint takes them instead of reading the pages.
    /// (A fast hasher: SipHash over one key per page stored was a few % of a process
    /// monitor's CPU on xz.)
    known_crcs: std::collections::HashMap<(u64, usize), u32, foldhash::fast::RandomState>,
}

/// What [`Engine::finish_recovery`] needs of a lazy recovery.
struct LazyRecovery {
    meta_bytes: Vec<u8>,
    meta_crc: u32,
    meta_damaged: [bool; 2],
    keep_damaged_pages: bool,
}

/// A sparse engine moves a checkpoint's pages into the other context in batches of this much:
/// each batch is made durable there, then punched from the running context.
const MOVE_BATCH: u64 = 64 << 20;

/// An engine lets go of the pool pages it has mapped (its own reads and writes; a sparse
/// engine's regions too) after a checkpoint once they exceed this much, so that its resident
/// memory stays small.
const MAPPED_BUDGET: u64 = 32 << 20;

/// A checkpoint's pages are read for their checksums this much at a time.
const READ_CHUNK: usize = 256 << 10;

/// A region written at least this fraction in `HOT_STREAK` consecutive epochs is taken whole.
const HOT_FRACTION: f64 = 0.5;
const HOT_STREAK: u32 = 3;
/// Checkpoints a region is taken whole before tracking is tried again.
const WHOLE_FOR: u32 = 64;

impl<S: AddressSpace> std::fmt::Debug for Engine<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pool", &self.pool.path())
            .field("epoch", &self.epoch)
            .field("running", &self.running)
            .field("regions", &self.regions.len())
            .finish()
    }
}

pub(crate) fn section_name(id: u64, ctx: usize) -> String {
    format!("ckpt.r{id}.{ctx}")
}

pub(crate) fn meta_name(ctx: usize) -> String {
    format!("ckpt.meta.{ctx}")
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Engine<SelfSpace> {
    /// Creates a new checkpoint pool at `path` for regions of the calling process.
    pub fn create(path: &Path, opts: &EngineOptions) -> Result<Self> {
        let mut c = CreateOptions::new(POOL_KIND);
        c.medium = opts.medium;
        Engine::init(Pool::create(path, &c)?, SelfSpace)
    }

    /// Formats `medium` (e.g. the `sim` medium in tests) as a new checkpoint pool.
    pub fn create_on(medium: Box<dyn Medium>) -> Result<Self> {
        Engine::init(
            Pool::create_on(medium, &CreateOptions::new(POOL_KIND))?,
            SelfSpace,
        )
    }

    /// Reopens the pool at `path` after a crash (or a clean exit) and restores the last
    /// checkpoint into the calling process.
    pub fn recover(path: &Path, opts: &EngineOptions) -> Result<(Self, Recovered)> {
        let o = OpenOptions {
            medium: opts.medium,
            kind: Some(POOL_KIND.into()),
            allow_rollback: opts.allow_rollback,
            fixed_time_ns: None,
        };
        Engine::recover_in_opts(Pool::open(path, &o)?, SelfSpace, opts)
    }

    /// `recover` from a medium built by the caller (a `sim` crash image).
    pub fn recover_on(medium: Box<dyn Medium>) -> Result<(Self, Recovered)> {
        Engine::recover_on_with(medium, false)
    }

    /// `recover_on`, rolling a prepared checkpoint back when `rollback_prepared`.
    pub fn recover_on_with(
        medium: Box<dyn Medium>,
        rollback_prepared: bool,
    ) -> Result<(Self, Recovered)> {
        let o = OpenOptions {
            kind: Some(POOL_KIND.into()),
            ..Default::default()
        };
        Engine::recover_in_with(Pool::open_on(medium, &o)?, SelfSpace, rollback_prepared)
    }
}

impl<S: AddressSpace> Engine<S> {
    /// Makes a fresh pool a checkpoint pool with no regions (epoch 0) acting on `space`.
    pub fn init(mut pool: Pool, space: S) -> Result<Self> {
        let page = pool.header().page_size as u64;
        let meta = ContextMeta {
            epoch: 0,
            time_ns: now_ns(),
            page_size: page as u32,
            regions: vec![],
            crcs: vec![],
            user: vec![],
        }
        .encode();
        write_meta(&mut pool, 0, &meta)?;
        write_meta(&mut pool, 1, &meta)?;
        let roots = roots(1, 0, 0, &meta, crc32c::crc32c(&meta));
        pool.commit(&roots)?;
        let mut engine = Engine::assemble(pool, space, 0, 0, 1)?;
        engine.committed_meta = (meta.len() as u64, crc32c::crc32c(&meta));
        Ok(engine)
    }

    /// An engine with no regions mapped yet, running on context `running`.
    fn assemble(
        pool: Pool,
        mut space: S,
        running: usize,
        epoch: u64,
        next_id: u64,
    ) -> Result<Self> {
        let page = pool.header().page_size as u64;
        let tracker = space.tracker()?;
        Ok(Engine {
            pool,
            space,
            tracker,
            running,
            epoch,
            regions: vec![],
            next_id,
            page,
            zero_page_crc: crc32c::crc32c(&vec![0u8; page as usize]),
            carried: vec![],
            scratch: vec![],
            whole: Default::default(),
            hot: Default::default(),
            adaptive: true,
            committed_meta: (0, 0),
            prepared: None,
            lazy: None,
            sparse: false,
            empty_running: false,
            // `KIOKU_KEEP_RUNNING=1` turns it on (see `Engine::set_keep_running`).
            keep_running: std::env::var_os("KIOKU_KEEP_RUNNING").is_some_and(|v| v == "1"),
            last_runs: Default::default(),
            pool_touched: 0,
            read_buf: Vec::new(),
            known_crcs: Default::default(),
        })
    }

    /// Restores the last checkpoint of `pool` into `space`: verifies the valid context (or, if
    /// it is damaged, the other one when it is a complete copy), makes the other context equal
    /// to it, maps every region at its address and returns the checkpoint's metadata. A crash
    /// at any point of this leaves a pool that recovers again.
    pub fn recover_in(pool: Pool, space: S) -> Result<(Self, Recovered)> {
        Engine::recover_in_with(pool, space, false)
    }

    /// [`Engine::recover_in`]; with `rollback_prepared`, a checkpoint that was prepared but
    /// not finished is dropped and the one before it recovered.
    pub fn recover_in_with(
        pool: Pool,
        space: S,
        rollback_prepared: bool,
    ) -> Result<(Self, Recovered)> {
        let opts = EngineOptions {
            rollback_prepared,
            ..Default::default()
        };
        Engine::recover_in_opts(pool, space, &opts)
    }

    /// [`Engine::recover_in`] with the choices of `opts` (`rollback_prepared`,
    /// `keep_damaged_pages`; the medium and commit-slot choices were made opening `pool`).
    pub fn recover_in_opts(
        mut pool: Pool,
        space: S,
        opts: &EngineOptions,
    ) -> Result<(Self, Recovered)> {
        let rollback_prepared = opts.rollback_prepared;
        if pool.epoch() == 0 && pool.roots().is_empty() && pool.sections().is_empty() {
            // Created, but the engine's first commit never happened (a crash right after the
            // pool file appeared): no checkpoint exists, so there is nothing to lose.
            let engine = Engine::init(pool, space)?;
            let recovered = Recovered {
                epoch: 0,
                time_ns: 0,
                metadata: vec![],
                source_ctx: 1,
                used_copy: false,
                repaired_pages: 0,
                damaged: vec![],
                pages_synced: 0,
            };
            return Ok((engine, recovered));
        }
        let mut r = pool.roots().to_vec();
        let (_, _, prepared) = check_roots(&r)?;
        if prepared && rollback_prepared {
            // The other context still holds the checkpoint before: its metadata's length and
            // checksum were kept in the roots for this.
            let running = r[root::RUNNING];
            r[root::VALID] = 1 - running;
            r[root::EPOCH] -= 1;
            r[root::META_LEN] = r[root::PREV_META_LEN];
            r[root::META_CRC] = r[root::PREV_META_CRC];
            tracing::info!(
                epoch = r[root::EPOCH],
                "rolling back a prepared, unfinished checkpoint"
            );
        }
        let valid = r[root::VALID] as usize;
        let epoch = r[root::EPOCH];
        let page = pool.header().page_size as u64;
        // The metadata: the valid context's copy, or the other's when it has the same checksum.
        let mut meta_bytes = None;
        let mut meta_damaged = [false; 2];
        for ctx in [valid, 1 - valid] {
            match read_meta(&pool, ctx, r[root::META_LEN], r[root::META_CRC]) {
                Some(b) => {
                    meta_bytes = Some(b);
                    break;
                }
                None => meta_damaged[ctx] = true,
            }
        }
        let meta_bytes = meta_bytes.ok_or(CkptError::MetaDamaged { epoch })?;
        let meta = ContextMeta::decode(&meta_bytes)
            .map_err(|detail| CkptError::NotACheckpoint { detail })?;
        if meta.epoch != epoch || meta.page_size as u64 != page {
            return Err(CkptError::NotACheckpoint {
                detail: format!(
                    "metadata of epoch {} under roots of epoch {epoch}",
                    meta.epoch
                ),
            });
        }
        let source = valid;
        let target = 1 - source;
        let meta_crc = r[root::META_CRC] as u32;
        let (repaired_pages, damaged, pages_synced) = if opts.lazy_recovery {
            // The other context gets its sections (copying nothing) so that it can be mapped;
            // verifying, syncing and committing wait for `finish_recovery`. Until then the pool
            // holds what it held: a crash recovers the same checkpoint again.
            sync_context(
                &mut pool,
                &meta.regions,
                page,
                source,
                target,
                Some((&[], &[])),
                true,
            )?;
            (0, vec![], 0)
        } else {
            let (repaired, damaged) = settle_valid_context(&mut pool, &meta, source, epoch, opts)?;
            let synced = sync_and_commit(
                &mut pool,
                &meta,
                &meta_bytes,
                (source, target),
                epoch,
                meta_crc,
                meta_damaged,
            )?;
            // Verifying and syncing read both contexts through the pool's mapping: let go of
            // those pages, or the process keeps them all as resident memory (twice the regions,
            // besides the regions' own mappings of the running context).
            release_pool_mapping_or_log(&pool);
            (repaired, damaged, synced)
        };
        let used_copy = repaired_pages > 0;

        let next_id = meta.regions.iter().map(|r| r.id + 1).max().unwrap_or(1);
        if !space.relocatable() {
            // Opening the pool mapped it where the kernel chose, which may be where a region
            // lived before (freed by an engine closed in this process): move it out of the way.
            let fixed: Vec<_> = meta
                .regions
                .iter()
                .map(|r| r.addr..r.addr.saturating_add(r.reserve as usize))
                .collect();
            pool.move_mapping_clear_of(&fixed)?;
        }
        let mut engine = Engine::assemble(pool, space, target, epoch, next_id)?;
        engine.committed_meta = (meta_bytes.len() as u64, r[root::META_CRC] as u32);
        if opts.lazy_recovery {
            engine.lazy = Some(LazyRecovery {
                meta_bytes: meta_bytes.clone(),
                meta_crc,
                meta_damaged,
                keep_damaged_pages: opts.keep_damaged_pages,
            });
        }
        for (mut rec, crcs) in meta.regions.into_iter().zip(meta.crcs) {
            let want = (!engine.space.relocatable()).then_some(rec.addr);
            rec.addr = engine
                .space
                .reserve(&rec.name, want, rec.reserve as usize)?;
            engine.attach(&rec, 0, rec.len as usize)?;
            engine.insert(Region { rec, crcs });
        }
        let recovered = Recovered {
            epoch,
            time_ns: meta.time_ns,
            metadata: meta.user,
            source_ctx: source,
            used_copy,
            repaired_pages,
            damaged,
            pages_synced,
        };
        Ok((engine, recovered))
    }

    /// Completes a recovery made with `EngineOptions::lazy_recovery`: verifies every page of
    /// the valid context (repairing from the other one as a full recovery does, holes of a
    /// sparse section included), makes the other context — the regions' mapping — equal to it
    /// (sparse sections: empties it, as a full recovery does), and commits. Nothing to do after
    /// a full recovery. Returns the pages copied into the other context.
    pub fn finish_recovery(&mut self) -> Result<u64> {
        let Some(lazy) = self.lazy.take() else {
            return Ok(0);
        };
        let meta = ContextMeta::decode(&lazy.meta_bytes)
            .map_err(|detail| CkptError::NotACheckpoint { detail })?;
        let target = self.running;
        let source = 1 - target;
        let opts = EngineOptions {
            keep_damaged_pages: lazy.keep_damaged_pages,
            ..Default::default()
        };
        let (repaired, _) = settle_valid_context(&mut self.pool, &meta, source, self.epoch, &opts)?;
        let synced = sync_and_commit(
            &mut self.pool,
            &meta,
            &lazy.meta_bytes,
            (source, target),
            self.epoch,
            lazy.meta_crc,
            lazy.meta_damaged,
        )?;
        release_pool_mapping_or_log(&self.pool);
        tracing::debug!(repaired, synced, "lazy recovery finished");
        Ok(synced)
    }

    /// Where region `name`'s pages lie in the pool: the offsets of its section in the valid
    /// context and in the other (running) one — for a caller that maps them itself (a lazy
    /// restore's filler). `None` for an unknown region, or while a checkpoint is prepared.
    pub fn context_offsets(&self, name: &str) -> Option<(u64, u64)> {
        let i = self.regions.iter().position(|r| r.rec.name == name)?;
        if self.prepared.is_some() {
            return None;
        }
        let id = self.regions[i].rec.id;
        let valid = self.pool.section(&section_name(id, 1 - self.running))?;
        let other = self.pool.section(&section_name(id, self.running))?;
        Some((valid.offset, other.offset))
    }

    /// Whether a lazy recovery awaits [`Engine::finish_recovery`].
    pub fn recovery_pending(&self) -> bool {
        self.lazy.is_some()
    }

    /// Allows (default) or forbids switching regions written nearly whole in every epoch to
    /// being taken whole untracked. A caller whose tracker reports exactly what it copied (a
    /// process monitor) turns it off: taking a region whole would only add work.
    pub fn set_adaptive(&mut self, on: bool) -> Result<()> {
        self.adaptive = on;
        if !on {
            for (id, _) in std::mem::take(&mut self.whole) {
                if let Some(r) = self.regions.iter().find(|r| r.rec.id == id) {
                    let range = PageRange::new(r.rec.addr, r.rec.addr + r.rec.len as usize);
                    // Tracking again from here: pages written since the last checkpoint were
                    // untracked, so take them all once more.
                    self.carried.push(range);
                    self.tracker.track(range)?;
                }
            }
        }
        Ok(())
    }

    /// Makes the pool hold one copy of the regions instead of two, in pool space only for
    /// the pages that hold data (off by default). For an engine whose regions only its owner
    /// writes, by copying into them between [`Engine::allocate_running`] and the checkpoint
    /// (the process monitor), not for regions a program writes directly:
    /// * region sections are sparse: a page never written takes no space, and a page that is
    ///   zero at a checkpoint becomes a hole again, in both contexts;
    /// * the running context holds only the pages written in the current epoch: once a
    ///   checkpoint has synced them into the other context (now the valid one, complete),
    ///   they are punched from the running context (unless [`Engine::set_keep_running`]). A
    ///   checkpoint whose second commit a crash prevented is then the running context's pages
    ///   over the other context's: recovery takes every page that is not in the running
    ///   context, or that fails its checksum there, from the other context, which holds it
    ///   intact — the repair it always made, now by design. So the pool holds the memory once
    ///   plus one epoch's written pages;
    /// * after each checkpoint the engine lets go of the pool pages it mapped once they exceed
    ///   a few tens of MiB (`MADV_DONTNEED`; the bytes stay in the pool): its own resident
    ///   memory stays small.
    ///
    /// The owner's stores into the running context must be preceded by
    /// [`Engine::allocate_running`] (a full medium fails there with `ENOSPC`, not as SIGBUS).
    /// [`Engine::committed`] gives a region's checkpointed bytes; the running context's own
    /// bytes are only those written in the epoch. Turned on after a recovery, the running
    /// context (a full copy) is emptied at the next checkpoint.
    pub fn set_sparse(&mut self, on: bool) -> Result<()> {
        self.sparse = on;
        self.empty_running = on;
        if on {
            self.release_mapped_pages(true)?;
        }
        Ok(())
    }

    /// A sparse engine keeps, after each checkpoint, the running context's pages that this
    /// checkpoint and the one before both wrote (copies of the valid context's), and punches
    /// only the others — instead of punching every page and allocating it again when the next
    /// epoch stores there: a page written again and again (a program's hot tables) is stored
    /// into a page the file already has. Punching and re-allocating was about a fifth of the
    /// process monitor's CPU on xz (docs/perf.md, run-xz). The cost is space: the pool holds
    /// the kept pages besides the memory (at rest, and at a checkpoint those of them the epoch
    /// did not write again besides its own). Off by default; `KIOKU_KEEP_RUNNING=1` turns it on
    /// for every engine made in the process. Recovery is unchanged: a kept page is either the
    /// valid context's copy or a page the checkpoint wrote, and every page is checked against
    /// its checksum.
    pub fn set_keep_running(&mut self, on: bool) {
        self.keep_running = on;
        self.last_runs.clear();
    }

    /// Whether [`Engine::set_sparse`] is on.
    pub fn is_sparse(&self) -> bool {
        self.sparse
    }

    fn section_flags(&self) -> u32 {
        if self.sparse {
            SECTION_SPARSE
        } else {
            0
        }
    }

    /// Reserves pool space for the running context's pages under `ranges` (`(address, length)`
    /// in the regions) before the caller stores there (sparse engines; nothing otherwise).
    /// Fails with the medium's `ENOSPC` when the medium is full, having changed nothing a
    /// checkpoint needs.
    pub fn allocate_running(&self, ranges: &[(usize, usize)]) -> Result<()> {
        if !self.sparse {
            return Ok(());
        }
        let page = self.page as usize;
        // The running context holds only this epoch's pages: everything stored is reserved
        // (adjacent ranges in one call).
        let mut pending: Option<(u64, u64)> = None;
        let mut sections: std::collections::HashMap<usize, u64> = Default::default();
        for (i, p0, p1) in self.pages_under(ranges) {
            let off = *sections
                .entry(i)
                .or_insert_with(|| self.section_off(i, self.running));
            let (a, b) = (off + (p0 * page) as u64, off + (p1 * page) as u64);
            pending = match pending {
                Some((x, y)) if y == a => Some((x, b)),
                Some((x, y)) => {
                    self.pool.allocate(x, y - x)?;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((x, y)) = pending {
            self.pool.allocate(x, y - x)?;
        }
        Ok(())
    }

    /// Makes the running context's pages under `ranges` zero — holes in a sparse engine — as
    /// a store would (the caller counts them written, as for any store).
    pub fn zero_running(&mut self, ranges: &[(usize, usize)]) -> Result<()> {
        let page = self.page as usize;
        for (i, p0, p1) in self.pages_under(ranges) {
            let off = self.section_off(i, self.running) + (p0 * page) as u64;
            let len = ((p1 - p0) * page) as u64;
            let id = self.regions[i].rec.id;
            for p in p0..p1 {
                self.known_crcs.remove(&(id, p));
            }
            if self.sparse {
                self.pool.zero(off, len)?;
            } else {
                self.pool.bytes_mut(off, len).fill(0);
                self.pool.flush(off, len)?;
            }
        }
        Ok(())
    }

    /// Stores `bytes` (whole pages) into the running context at region address `addr`
    /// (page-aligned; one region or adjacent ones) with the medium's `write_at` — a `pwrite`
    /// on `shm` and `file`: no pool page is mapped into this process, and a hole gets its
    /// space from the write (a full medium fails with `ENOSPC`) — and keeps the pages'
    /// checksums, computed from `bytes`, for the next checkpoint, which then does not read
    /// these pages back. For an owner that copies pages in from elsewhere (the process
    /// monitor's staging). The owner still reports the pages written (its tracker), and must
    /// not store into them otherwise before the next checkpoint: a later store through a
    /// mapping would not match the kept checksum (a later `store_running` or `zero_running`
    /// replaces it).
    pub fn store_running(&mut self, addr: usize, bytes: &[u8]) -> Result<()> {
        let page = self.page as usize;
        let len = bytes.len();
        if !addr.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(CkptError::NotInRegion { addr, len });
        }
        let under = self.pages_under(&[(addr, len)]);
        if under.iter().map(|&(_, p0, p1)| p1 - p0).sum::<usize>() * page != len {
            return Err(CkptError::NotInRegion { addr, len });
        }
        let mut at = 0;
        for (i, p0, p1) in under {
            let off = self.section_off(i, self.running) + (p0 * page) as u64;
            let part = &bytes[at..at + (p1 - p0) * page];
            let id = self.regions[i].rec.id;
            let mut crcs = Vec::with_capacity(p1 - p0);
            for (k, p) in part.chunks_exact(page).enumerate() {
                let c = crc32c::crc32c(p);
                crcs.push(c);
                self.known_crcs.insert((id, p0 + k), c);
            }
            if self.sparse {
                // Zero pages become holes here, not pages written and then read back, found
                // zero and punched at the checkpoint (a program clearing its tables — xz
                // between blocks — stores many); the rest is written in runs.
                let zero = |k: usize| {
                    crcs[k] == self.zero_page_crc && is_zero(&part[k * page..(k + 1) * page])
                };
                let mut k = 0;
                while k < crcs.len() {
                    let z = zero(k);
                    let m = (k..crcs.len()).take_while(|&j| zero(j) == z).count();
                    let (a, b) = (k * page, (k + m) * page);
                    if z {
                        self.pool.zero(off + a as u64, (b - a) as u64)?;
                    } else {
                        self.pool.write_at(off + a as u64, &part[a..b])?;
                        self.pool.flush(off + a as u64, (b - a) as u64)?;
                    }
                    k += m;
                }
            } else {
                self.pool.write_at(off, part)?;
                self.pool.flush(off, part.len() as u64)?;
            }
            at += part.len();
        }
        Ok(())
    }

    /// Which pages of region `name` hold data in the running context (`false`: a hole, which
    /// reads as zeros; reading it through a mapping would fill it on tmpfs).
    pub fn running_data(&self, name: &str) -> Option<Vec<bool>> {
        let i = self.regions.iter().position(|r| r.rec.name == name)?;
        let off = self.section_off(i, self.running);
        let n = self.regions[i].crcs.len();
        Some(data_map(&self.pool, off, n, self.page as usize))
    }

    /// Which pages of [`Engine::committed`]`(name)` hold data (`false`: a hole, zero).
    pub fn committed_data(&self, name: &str) -> Option<Vec<bool>> {
        let c = self.committed(name)?;
        let base = self.pool.medium().as_ptr() as usize;
        let off = (c.as_ptr() as usize - base) as u64;
        let page = self.page as usize;
        Some(data_map(&self.pool, off, c.len() / page, page))
    }

    /// `(region index, first page, end page)` of the regions under `(address, length)` ranges.
    fn pages_under(&self, ranges: &[(usize, usize)]) -> Vec<(usize, usize, usize)> {
        let page = self.page as usize;
        let mut out = Vec::new();
        for &(addr, len) in ranges {
            let end = addr + len;
            let mut start = addr;
            while start < end {
                let i = self
                    .regions
                    .partition_point(|r| r.rec.addr + r.rec.len as usize <= start);
                let Some(r) = self.regions.get(i).filter(|r| r.rec.addr < end) else {
                    break;
                };
                let lo = start.max(r.rec.addr);
                let hi = end.min(r.rec.addr + r.rec.len as usize);
                out.push((
                    i,
                    (lo - r.rec.addr) / page,
                    (hi - r.rec.addr).div_ceil(page),
                ));
                start = hi;
            }
        }
        out
    }

    /// A sparse engine after a checkpoint: the other context is valid and complete, so all of
    /// the running context is given back (the epoch's pages were moved already; whatever else
    /// it holds — a copy made by a recovery, pages stored there outside any checkpoint — is
    /// not needed). Unordered: a page a crash brings back is one a recovery checks against its
    /// checksum like any other.
    fn empty_running_context(&mut self) -> Result<()> {
        self.empty_running = false;
        let run = self.running;
        for i in 0..self.regions.len() {
            let off = self.section_off(i, run);
            // Only where it holds data: a punch costs a file system transaction on a disk.
            for (a, b) in self.pool.data_extents(off, self.regions[i].rec.len)? {
                self.pool.discard(a, b - a)?;
            }
        }
        Ok(())
    }

    /// The pages of this checkpoint's `runs` that the checkpoint before wrote too (by region
    /// id, `last_runs`): the ones likely to be written again in the next epoch (a program's
    /// hot tables), not memory written once (a buffer being filled), whose kept copy would
    /// only take space.
    fn rewritten_runs(&self, runs: &[(usize, usize, usize)]) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        let mut at: Option<(u64, usize)> = None;
        for &(i, first, n) in runs {
            let id = self.regions[i].rec.id;
            let Some(last) = self.last_runs.get(&id) else {
                continue;
            };
            // `runs` and `last` are sorted by first page; walk `last` from where the previous
            // run of this region left it.
            let mut j = match at {
                Some((aid, j)) if aid == id => j,
                _ => 0,
            };
            let (a, b) = (first, first + n);
            while j < last.len() && last[j].0 + last[j].1 <= a {
                j += 1;
            }
            let mut k = j;
            while k < last.len() && last[k].0 < b {
                let (la, lb) = (last[k].0, last[k].0 + last[k].1);
                let (x, y) = (a.max(la), b.min(lb));
                if x < y {
                    out.push((i, x, y - x));
                }
                if lb > b {
                    break;
                }
                k += 1;
            }
            at = Some((id, j));
        }
        out
    }

    /// A sparse engine keeping its running pages, after a checkpoint: the running context keeps
    /// the pages of `runs` (pages of this checkpoint, now copies of the valid context's) and
    /// gives back every other page it holds (kept from the checkpoint before and not written
    /// again, or written for the first time). So it holds at most one checkpoint's pages at
    /// rest, and a page written in epochs in a row is stored into the page the file already
    /// has: no punch and no allocation.
    /// Unordered, as [`Engine::empty_running_context`]: every page it holds equals the valid
    /// context's (the sync copied it), and a recovery checks each page anyway.
    fn trim_running_context(&mut self, runs: &[(usize, usize, usize)]) -> Result<()> {
        let page = self.page;
        let run = self.running;
        let mut k = 0;
        for i in 0..self.regions.len() {
            let off = self.section_off(i, run);
            let mut keep: Vec<(u64, u64)> = Vec::new();
            while k < runs.len() && runs[k].0 < i {
                k += 1;
            }
            while k < runs.len() && runs[k].0 == i {
                let (_, first, n) = runs[k];
                keep.push((off + first as u64 * page, off + (first + n) as u64 * page));
                k += 1;
            }
            let mut kk = 0;
            for (a, b) in self.pool.data_extents(off, self.regions[i].rec.len)? {
                // The parts of `a..b` outside every kept run.
                let mut at = a;
                while kk < keep.len() && keep[kk].1 <= at {
                    kk += 1;
                }
                let mut j = kk;
                while at < b {
                    match keep.get(j) {
                        Some(&(ka, kb)) if ka < b => {
                            if ka > at {
                                self.pool.discard(at, ka - at)?;
                            }
                            at = at.max(kb);
                            j += 1;
                        }
                        _ => {
                            self.pool.discard(at, b - at)?;
                            at = b;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Lets go of the pool pages this process has mapped (the pool's mapping and the regions'),
    /// when they exceed `MAPPED_BUDGET` or `always`: their bytes stay in the pool.
    fn release_mapped_pages(&mut self, always: bool) -> Result<()> {
        if !always && mapped_shared_bytes() <= MAPPED_BUDGET {
            return Ok(());
        }
        release_pool_mapping(&self.pool)?;
        for r in &self.regions {
            self.space.release_pages(r.rec.addr, r.rec.len as usize)?;
        }
        Ok(())
    }

    /// Regions whose two contexts differ, with the first differing page (a debugging aid: after
    /// a checkpoint they must be equal). For a sparse engine, whose running context is scratch:
    /// regions whose valid context fails the checkpoint's checksums, with the first such page.
    pub fn contexts_differ(&self) -> Vec<(String, u64)> {
        let page = self.page;
        let mut out = Vec::new();
        if self.sparse {
            // The running context is scratch here: check that the valid one holds every page
            // with the checkpoint's checksum instead.
            for (i, r) in self.regions.iter().enumerate() {
                let off = self.section_off(i, 1 - self.running);
                let n = r.crcs.len();
                let data = data_map(&self.pool, off, n, page as usize);
                for (p, want) in r.crcs.iter().enumerate() {
                    let got = if data[p] {
                        crc32c::crc32c(self.pool.bytes(off + p as u64 * page, page))
                    } else {
                        self.zero_page_crc
                    };
                    if got != *want {
                        out.push((r.rec.name.clone(), p as u64));
                        break;
                    }
                }
            }
            return out;
        }
        for (i, r) in self.regions.iter().enumerate() {
            let (a, b) = (self.section_off(i, 0), self.section_off(i, 1));
            let n = r.crcs.len();
            let (da, db) = (
                data_map(&self.pool, a, n, page as usize),
                data_map(&self.pool, b, n, page as usize),
            );
            for p in 0..n as u64 {
                let (ha, hb) = (!da[p as usize], !db[p as usize]);
                // A sparse engine's running context holds only the epoch's pages: its holes
                // are the other context's pages.
                if self.sparse && [ha, hb][self.running] {
                    continue;
                }
                let differ = match (ha, hb) {
                    (true, true) => false,
                    (true, false) => !is_zero(self.pool.bytes(b + p * page, page)),
                    (false, true) => !is_zero(self.pool.bytes(a + p * page, page)),
                    (false, false) => {
                        self.pool.bytes(a + p * page, page) != self.pool.bytes(b + p * page, page)
                    }
                };
                if differ {
                    out.push((r.rec.name.clone(), p));
                    break;
                }
            }
        }
        out
    }

    /// Epoch of the last checkpoint (0 before the first).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The pool underneath (for inspection).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The pool underneath, for sections of the caller's own beside the engine's: the caller
    /// may create, resize, delete and write sections whose names do not start with `ckpt.`,
    /// and must not touch the engine's. Its sections join the pool's next commit (the engine's
    /// next checkpoint, or [`Engine::commit_sections`]); recovery keeps them.
    pub fn pool_mut(&mut self) -> &mut Pool {
        &mut self.pool
    }

    /// Commits the caller's own sections (those not starting with `ckpt.`) as they are now,
    /// with the engine's roots and sections as of its last commit: sections the caller created
    /// or resized become durable without a checkpoint, while regions created, moved or deleted
    /// since the engine's last checkpoint stay unpublished (the valid checkpoint still needs
    /// the old ones). The caller's contents must be flushed first (as for [`Pool::commit`]).
    pub fn commit_sections(&mut self) -> Result<()> {
        let roots = self.pool.roots().to_vec();
        let mut table: Vec<kioku_pool::Section> = self
            .pool
            .committed_sections()
            .iter()
            .filter(|s| s.name.starts_with("ckpt."))
            .cloned()
            .collect();
        table.extend(
            self.pool
                .sections()
                .iter()
                .filter(|s| !s.name.starts_with("ckpt."))
                .cloned(),
        );
        self.pool.commit_table(&roots, table)?;
        Ok(())
    }

    /// Which written-page tracker is in use.
    pub fn tracker_backend(&self) -> kioku_track::BackendKind {
        self.tracker.backend()
    }

    /// All regions, by address.
    pub fn regions(&self) -> Vec<RegionInfo> {
        self.regions.iter().map(|r| info(&r.rec)).collect()
    }

    /// The region called `name`.
    pub fn region(&self, name: &str) -> Option<RegionInfo> {
        self.regions
            .iter()
            .find(|r| r.rec.name == name)
            .map(|r| info(&r.rec))
    }

    fn index(&self, name: &str) -> Result<usize> {
        self.regions
            .iter()
            .position(|r| r.rec.name == name)
            .ok_or_else(|| CkptError::NoSuchRegion { name: name.into() })
    }

    fn insert(&mut self, r: Region) {
        let at = self.regions.partition_point(|x| x.rec.addr < r.rec.addr);
        self.regions.insert(at, r);
    }

    /// `len` rounded up to whole pages (at least one), refusing absurd sizes before any
    /// arithmetic can overflow.
    fn round(&self, len: usize) -> Result<usize> {
        const MAX: u64 = 1 << 56;
        if len as u64 > MAX {
            return Err(CkptError::TooLarge { len: len as u64 });
        }
        Ok((len.max(1) as u64).div_ceil(self.page) as usize * self.page as usize)
    }

    /// Maps `[from, to)` bytes of region `rec` onto its running-context section and tracks it.
    fn attach(&mut self, rec: &RegionRecord, from: usize, to: usize) -> Result<()> {
        let sec = self
            .pool
            .section(&section_name(rec.id, self.running))
            .expect("region section exists")
            .clone();
        self.space.map_pool(
            rec.addr + from,
            to - from,
            self.pool.medium(),
            sec.offset + from as u64,
        )?;
        self.track_range(rec.id, PageRange::new(rec.addr + from, rec.addr + to))?;
        Ok(())
    }

    /// Creates a zero-filled region of `len` bytes (rounded up to pages). It becomes part of
    /// the next checkpoint.
    pub fn create_region(
        &mut self,
        name: &str,
        len: usize,
        opts: RegionOptions,
    ) -> Result<RegionInfo> {
        if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
            return Err(CkptError::BadName { name: name.into() });
        }
        if self.regions.iter().any(|r| r.rec.name == name) {
            return Err(CkptError::RegionExists { name: name.into() });
        }
        if let Some(a) = opts.addr {
            if !(a as u64).is_multiple_of(self.page) {
                return Err(CkptError::Misaligned { addr: a });
            }
        }
        let len = self.round(len)?;
        let reserve = self.round(opts.reserve.unwrap_or((2 * len).max(1 << 30)).max(len))?;
        let id = self.next_id;
        let flags = self.section_flags();
        self.pool
            .create_section(&section_name(id, self.running), len as u64, flags)?;
        let addr = match self.space.reserve(name, opts.addr, reserve) {
            Ok(a) => a,
            Err(e) => {
                self.pool.delete_section(&section_name(id, self.running))?;
                return Err(e);
            }
        };
        self.next_id += 1;
        let rec = RegionRecord {
            name: name.into(),
            id,
            addr,
            len: len as u64,
            reserve: reserve as u64,
            flags: 0,
        };
        self.attach(&rec, 0, len)?;
        let crcs = vec![self.zero_page_crc; len / self.page as usize];
        self.insert(Region {
            rec: rec.clone(),
            crcs,
        });
        Ok(info(&rec))
    }

    /// Grows or shrinks a region in place (within its reservation). New bytes read as zero.
    pub fn resize_region(&mut self, name: &str, new_len: usize) -> Result<RegionInfo> {
        let i = self.index(name)?;
        let new_len = self.round(new_len)?;
        let rec = self.regions[i].rec.clone();
        let old_len = rec.len as usize;
        if new_len as u64 > rec.reserve {
            return Err(CkptError::BeyondReservation {
                name: name.into(),
                len: new_len as u64,
                reserve: rec.reserve,
            });
        }
        let sname = section_name(rec.id, self.running);
        // Pages stored before may be cut off, or moved with the section: read them back.
        self.known_crcs.retain(|&(id, _), _| id != rec.id);
        if new_len < old_len {
            self.untrack_range(
                rec.id,
                PageRange::new(rec.addr + new_len, rec.addr + old_len),
            )?;
            self.space
                .unmap_to_reserved(rec.addr + new_len, old_len - new_len)?;
            self.pool.resize_section(&sname, new_len as u64)?;
        } else if new_len > old_len {
            let before = self.pool.section(&sname).expect("region section").offset;
            let after = self.pool.resize_section(&sname, new_len as u64)?.offset;
            let mut grown = rec.clone();
            grown.len = new_len as u64;
            if after == before {
                self.attach(&grown, old_len, new_len)?;
                // The other context may still hold bytes there from before a shrink.
                self.carried
                    .push(PageRange::new(rec.addr + old_len, rec.addr + new_len));
            } else {
                // Moved in the pool: remap all of it; tracking restarts, so count it all written
                // — except in a sparse engine, whose tracker is its owner's marks (they survive
                // the remap) and whose running context holds only the epoch's pages: taking the
                // rest as written would take holes for the region's contents.
                self.untrack_range(rec.id, PageRange::new(rec.addr, rec.addr + old_len))?;
                self.attach(&grown, 0, new_len)?;
                if self.sparse {
                    self.carried
                        .push(PageRange::new(rec.addr + old_len, rec.addr + new_len));
                } else {
                    self.carried
                        .push(PageRange::new(rec.addr, rec.addr + new_len));
                }
            }
        }
        let zero = self.zero_page_crc;
        let r = &mut self.regions[i];
        r.rec.len = new_len as u64;
        r.crcs.resize(new_len / self.page as usize, zero);
        Ok(info(&r.rec))
    }

    /// Deletes a region: unmaps it now; its pool space is reclaimed once no checkpoint needs it.
    pub fn delete_region(&mut self, name: &str) -> Result<()> {
        let i = self.index(name)?;
        let r = self.regions.remove(i);
        let (addr, len) = (r.rec.addr, r.rec.len as usize);
        self.untrack_range(r.rec.id, PageRange::new(addr, addr + len))?;
        self.whole.remove(&r.rec.id);
        self.hot.remove(&r.rec.id);
        self.known_crcs.retain(|&(id, _), _| id != r.rec.id);
        self.carried
            .retain(|c| c.end <= addr || c.start >= addr + len);
        self.space.release(addr, r.rec.reserve as usize)?;
        self.pool
            .delete_section(&section_name(r.rec.id, self.running))?;
        Ok(())
    }

    /// Takes a checkpoint: the regions as they are now plus `metadata` become durable, and the
    /// call returns once they are. The program must not write its regions during the call
    /// (stop other threads first). Only pages written since the last checkpoint are written
    /// back and copied.
    pub fn checkpoint(&mut self, metadata: &[u8]) -> Result<CheckpointStats> {
        self.prepare(metadata)?;
        self.finish()
    }

    /// Pages written since the last checkpoint, as `(region name, first page, pages)` runs
    /// (regions taken whole: all their pages). Scanning here does not lose them: the next
    /// checkpoint includes them. Lets a caller act on what changed (send its delta) before
    /// the checkpoint.
    pub fn written(&mut self) -> Result<Vec<(String, usize, usize)>> {
        let mut dirty = Vec::new();
        self.tracker.scan_into(&mut dirty)?;
        self.carried.extend_from_slice(&dirty);
        let mut all = self.carried.clone();
        all.sort_unstable();
        Ok(self
            .runs_of(&all)
            .into_iter()
            .map(|(i, first, n)| (self.regions[i].rec.name.clone(), first, n))
            .collect())
    }

    /// Makes the next checkpoint take pages `first..first + n` of region `name` as written (a
    /// caller that changed them through another mapping, e.g. repairing them).
    pub fn mark_written(&mut self, name: &str, first: usize, n: usize) -> Result<()> {
        let i = self.index(name)?;
        let r = &self.regions[i].rec;
        let page = self.page as usize;
        let end = (first + n).min(r.len as usize / page);
        if first < end {
            self.carried
                .push(PageRange::new(r.addr + first * page, r.addr + end * page));
        }
        Ok(())
    }

    /// Rewrites page `page` of region `name` in the valid checkpoint (the other context) with
    /// `bytes`, which must have the checksum the checkpoint recorded for that page: repairing a
    /// page found damaged there, with its value rebuilt elsewhere. Durable on return.
    pub fn repair_committed(&mut self, name: &str, page: usize, bytes: &[u8]) -> Result<bool> {
        let Some(want) = self.page_checksums(name).and_then(|c| c.get(page).copied()) else {
            return Ok(false);
        };
        if bytes.len() != self.page as usize || crc32c::crc32c(bytes) != want {
            return Ok(false);
        }
        let i = self.index(name)?;
        let sec = self
            .pool
            .section(&section_name(self.regions[i].rec.id, 1 - self.running))
            .expect("committed region")
            .offset;
        let at = sec + page as u64 * self.page;
        self.pool.allocate(at, self.page)?;
        self.pool.bytes_mut(at, self.page).copy_from_slice(bytes);
        self.pool.persist(at, self.page)?;
        Ok(true)
    }

    /// The checksum of each page of region `name` as of the last checkpoint (`None` while a
    /// checkpoint is prepared, and for a region created since); as long as
    /// [`Engine::committed`]'s bytes.
    pub fn page_checksums(&self, name: &str) -> Option<&[u32]> {
        let committed = self.committed(name)?;
        let i = self.regions.iter().position(|r| r.rec.name == name)?;
        let n = committed.len() / self.page as usize;
        self.regions[i].crcs.get(..n)
    }

    /// Makes the next checkpoint take every page of region `name`, written or not (a full
    /// checkpoint, as a baseline to compare incremental ones with).
    pub fn take_whole_next(&mut self, name: &str) -> Result<()> {
        let i = self.index(name)?;
        let r = &self.regions[i].rec;
        self.carried
            .push(PageRange::new(r.addr, r.addr + r.len as usize));
        Ok(())
    }

    /// The bytes of region `name` as of the last checkpoint (the valid context), while the
    /// program writes the running one: `None` for a region created since, shorter than the
    /// region when it grew since (pages beyond were zero).
    pub fn committed(&self, name: &str) -> Option<&[u8]> {
        let i = self.regions.iter().position(|r| r.rec.name == name)?;
        if self.prepared.is_some() {
            return None;
        }
        // A region created (or grown) in this epoch is missing (or shorter) there.
        let sec = self
            .pool
            .section(&section_name(self.regions[i].rec.id, 1 - self.running))?;
        Some(
            self.pool
                .bytes(sec.offset, sec.len.min(self.regions[i].rec.len)),
        )
    }

    /// `(region index, first page, pages)` runs of the regions covered by sorted `dirty`
    /// ranges, plus every page of regions taken whole; sorted, without duplicates.
    fn runs_of(&self, dirty: &[PageRange]) -> Vec<(usize, usize, usize)> {
        let page = self.page as usize;
        // Overlapping ranges (a range carried and scanned again) become one.
        let mut merged: Vec<PageRange> = Vec::with_capacity(dirty.len());
        for d in dirty {
            match merged.last_mut() {
                Some(last) if d.start <= last.end => last.end = last.end.max(d.end),
                _ => merged.push(*d),
            }
        }
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        for d in &merged {
            let mut start = d.start;
            while start < d.end {
                let i = self
                    .regions
                    .partition_point(|r| r.rec.addr + r.rec.len as usize <= start);
                let Some(r) = self.regions.get(i).filter(|r| r.rec.addr < d.end) else {
                    break;
                };
                let lo = start.max(r.rec.addr);
                let hi = d.end.min(r.rec.addr + r.rec.len as usize);
                if lo < hi {
                    runs.push((i, (lo - r.rec.addr) / page, (hi - lo) / page));
                }
                start = hi.max(lo);
            }
        }
        // Regions taken whole (not tracked): every page, once.
        runs.retain(|&(i, _, _)| !self.whole.contains_key(&self.regions[i].rec.id));
        for (i, r) in self.regions.iter().enumerate() {
            if self.whole.contains_key(&r.rec.id) {
                runs.push((i, 0, r.crcs.len()));
            }
        }
        runs.sort_unstable();
        runs.dedup();
        runs
    }

    /// The first half of [`Engine::checkpoint`]: writes back the pages written in this epoch
    /// and the metadata, and commits — the checkpoint is durable when this returns, and until
    /// [`Engine::finish`] the checkpoint before it stays intact in the other context, so a
    /// recovery with [`EngineOptions::rollback_prepared`] can still return to it. A group of
    /// processes prepares everywhere, agrees, then finishes.
    pub fn prepare(&mut self, metadata: &[u8]) -> Result<()> {
        // A lazy recovery's other context becomes the running one's copy first (pages stored
        // before it are read back, not taken on trust).
        if self.recovery_pending() {
            self.known_crcs.clear();
        }
        self.finish_recovery()?;
        if self.prepared.is_some() {
            return Err(CkptError::OutOfOrder {
                detail: "a prepared checkpoint is not finished",
            });
        }
        let t0 = Instant::now();
        let run = self.running;
        let page = self.page as usize;

        // (1) pages written in this epoch: write them back, update their checksums.
        let mut dirty = std::mem::take(&mut self.scratch);
        dirty.clear();
        self.tracker.scan_into(&mut dirty)?;
        dirty.append(&mut self.carried);
        dirty.sort_unstable();
        let t_scan = t0.elapsed();
        let runs = self.runs_of(&dirty);
        let mut dirty_pages = 0u64;
        let offsets: Vec<u64> = (0..self.regions.len())
            .map(|i| self.section_off(i, run))
            .collect();
        let mut holes = Vec::with_capacity(if self.sparse { runs.len() } else { 0 });
        if self.sparse {
            // The owner's stores mapped the pages at the regions' addresses; they are read
            // from here on through the pool's mapping: map them once, not twice.
            for &(i, first, n) in &runs {
                let addr = self.regions[i].rec.addr + first * page;
                self.space.release_pages(addr, n * page)?;
            }
        }
        for &(i, first, n) in &runs {
            let off = offsets[i] + (first * page) as u64;
            if self.sparse {
                holes.push(self.sparse_run_crcs(i, first, n, off)?);
            } else {
                self.run_crcs(i, first, n, off, None)?;
            }
            self.pool.flush(off, (n * page) as u64)?;
            dirty_pages += n as u64;
        }
        // Kept checksums are for this checkpoint only.
        self.known_crcs.clear();

        // (2) metadata into the running context; (3) flip: durable from here on.
        let epoch = self.epoch + 1;
        let entries: Vec<(&RegionRecord, &[u32])> = self
            .regions
            .iter()
            .map(|r| (&r.rec, r.crcs.as_slice()))
            .collect();
        let meta = encode_parts(epoch, now_ns(), page as u32, &entries, metadata);
        let meta_crc = crc32c::crc32c(&meta);
        write_meta(&mut self.pool, run, &meta)?;
        let mut r = roots(run, run, epoch, &meta, meta_crc);
        r[root::PREV_META_LEN] = self.committed_meta.0;
        r[root::PREV_META_CRC] = self.committed_meta.1 as u64;
        self.pool.commit(&r)?;
        self.epoch = epoch;
        let t_durable = t0.elapsed();
        self.prepared = Some(Prepared {
            runs,
            holes,
            meta,
            meta_crc,
            dirty,
            t_scan,
            t_durable,
            t0,
            dirty_pages,
        });
        Ok(())
    }

    /// What the prepared (durable, not yet finished) checkpoint cost so far: `sync` is zero and
    /// `total` is the time until it was durable. `None` when no checkpoint is prepared.
    pub fn prepared_stats(&self) -> Option<CheckpointStats> {
        let p = self.prepared.as_ref()?;
        Some(CheckpointStats {
            epoch: self.epoch,
            dirty_pages: p.dirty_pages,
            dirty_bytes: p.dirty_pages * self.page,
            scan: p.t_scan,
            persist: p.t_durable - p.t_scan,
            sync: Duration::ZERO,
            total: p.t_durable,
        })
    }

    /// Whether a checkpoint is prepared and not finished.
    pub fn is_prepared(&self) -> bool {
        self.prepared.is_some()
    }

    /// The second half of [`Engine::checkpoint`]: syncs the other context with the prepared
    /// checkpoint and makes it the valid one; the checkpoint before is gone from here on.
    pub fn finish(&mut self) -> Result<CheckpointStats> {
        let Some(p) = self.prepared.take() else {
            return Err(CkptError::OutOfOrder {
                detail: "no checkpoint is prepared",
            });
        };
        let (run, other) = (self.running, 1 - self.running);
        let epoch = self.epoch;
        // (4) sync the other context, then make it the valid one; continue on `run`.
        let records: Vec<RegionRecord> = self.regions.iter().map(|r| r.rec.clone()).collect();
        sync_context(
            &mut self.pool,
            &records,
            self.page,
            run,
            other,
            Some((&p.runs, &p.holes)),
            !self.keep_running,
        )?;
        write_meta(&mut self.pool, other, &p.meta)?;
        self.pool
            .commit(&roots(other, run, epoch, &p.meta, p.meta_crc))?;
        self.committed_meta = (p.meta.len() as u64, p.meta_crc);
        self.adapt_tracking(&p.runs)?;
        if self.sparse {
            if self.keep_running && !self.empty_running {
                let keep = self.rewritten_runs(&p.runs);
                self.trim_running_context(&keep)?;
            } else {
                self.empty_running_context()?;
            }
            if self.keep_running {
                self.last_runs.clear();
                for &(i, first, n) in &p.runs {
                    let id = self.regions[i].rec.id;
                    self.last_runs.entry(id).or_default().push((first, n));
                }
            }
            self.release_mapped_pages(false)?;
        } else {
            // The checkpoint read its pages of the running context and wrote them into the
            // other one through the pool's mapping; past the budget, let go of those mappings
            // (the regions' own mappings are the program's memory and stay).
            self.pool_touched += 2 * p.dirty_pages * self.page;
            if self.pool_touched > MAPPED_BUDGET {
                release_pool_mapping_or_log(&self.pool);
                self.pool_touched = 0;
            }
        }

        self.scratch = p.dirty;
        let total = p.t0.elapsed();
        Ok(CheckpointStats {
            epoch,
            dirty_pages: p.dirty_pages,
            dirty_bytes: p.dirty_pages * self.page,
            scan: p.t_scan,
            persist: p.t_durable - p.t_scan,
            sync: total - p.t_durable,
            total,
        })
    }

    /// The checksums of run `first..first+n` of region `i` (at pool offset `off`) in a sparse
    /// engine: holes are not read (zero's checksum), data pages that are all zero are punched
    /// (holes from now on). Returns the run's zero pages as `(first page, pages)`.
    fn sparse_run_crcs(
        &mut self,
        i: usize,
        first: usize,
        n: usize,
        off: u64,
    ) -> Result<Vec<(usize, usize)>> {
        let page = self.page as usize;
        let data = data_map(&self.pool, off, n, page);
        let mut zeros: Vec<(usize, usize)> = Vec::new();
        let mut punch: Vec<(usize, usize)> = Vec::new();
        let mut k = 0;
        while k < n {
            let m = data[k..].iter().take_while(|&&d| d == data[k]).count();
            if data[k] {
                let at = off + (k * page) as u64;
                self.run_crcs(i, first + k, m, at, Some(&mut zeros))?;
            } else {
                self.regions[i].crcs[first + k..first + k + m].fill(self.zero_page_crc);
                for p in first + k..first + k + m {
                    push_page(&mut zeros, p);
                }
            }
            k += m;
        }
        // Data pages found zero: punched (the running context's holes are zero already).
        for &(z, m) in &zeros {
            for p in z..z + m {
                if data[p - first] {
                    push_page(&mut punch, p - first);
                }
            }
        }
        for (k, m) in punch {
            self.pool.zero(off + (k * page) as u64, (m * page) as u64)?;
        }
        Ok(zeros)
    }

    /// Sets the checksums of pages `first..first+n` of region `i` (at pool offset `off`, all
    /// data): those [`Engine::store_running`] kept, the others from their bytes, read into
    /// `read_buf` a chunk at a time with the medium's `read_at` — on `shm` and `file` a
    /// `pread`, so the pages (written by the program through its own mapping, or by the owner)
    /// are neither faulted into the pool's mapping here nor unmapped again later. With
    /// `zeros`, the pages that are all zero are appended to it (a kept checksum equal to the
    /// zero page's is checked against the bytes: only zeros may become a hole).
    fn run_crcs(
        &mut self,
        i: usize,
        first: usize,
        n: usize,
        off: u64,
        mut zeros: Option<&mut Vec<(usize, usize)>>,
    ) -> Result<()> {
        let page = self.page as usize;
        let chunk = (READ_CHUNK / page).max(1);
        if self.read_buf.len() < chunk * page {
            self.read_buf.resize(chunk * page, 0);
        }
        let id = self.regions[i].rec.id;
        let zero_crc = self.zero_page_crc;
        let known = |k: usize| {
            self.known_crcs
                .get(&(id, first + k))
                .copied()
                .filter(|&c| zeros.is_none() || c != zero_crc)
        };
        // Pages to read: runs of at most `chunk` pages without a kept checksum.
        let mut reads: Vec<(usize, usize)> = Vec::new();
        let mut k = 0;
        while k < n {
            if let Some(c) = known(k) {
                self.regions[i].crcs[first + k] = c;
                k += 1;
                continue;
            }
            let m = (k..n.min(k + chunk))
                .take_while(|&j| known(j).is_none())
                .count();
            reads.push((k, m));
            k += m;
        }
        for (k, m) in reads {
            let buf = &mut self.read_buf[..m * page];
            self.pool.read_at(off + (k * page) as u64, buf)?;
            for (j, p) in buf.chunks_exact(page).enumerate() {
                let c = crc32c::crc32c(p);
                self.regions[i].crcs[first + k + j] = c;
                if let Some(z) = zeros.as_deref_mut() {
                    if c == zero_crc && is_zero(p) {
                        push_page(z, first + k + j);
                    }
                }
            }
        }
        Ok(())
    }

    /// Switches regions written (nearly) whole in every recent epoch to being taken whole, and
    /// regions taken whole long enough back to tracking. Runs after a checkpoint, so tracking
    /// restarted here catches every later write.
    fn adapt_tracking(&mut self, runs: &[(usize, usize, usize)]) -> Result<()> {
        if !self.adaptive {
            return Ok(());
        }
        let mut written = vec![0usize; self.regions.len()];
        for &(i, _, n) in runs {
            written[i] += n;
        }
        for (i, &written) in written.iter().enumerate() {
            let (id, addr, len, pages) = {
                let r = &self.regions[i].rec;
                (r.id, r.addr, r.len as usize, self.regions[i].crcs.len())
            };
            let range = PageRange::new(addr, addr + len);
            if let Some(left) = self.whole.get_mut(&id) {
                *left -= 1;
                if *left == 0 {
                    self.whole.remove(&id);
                    self.hot.insert(id, 0);
                    self.tracker.track(range)?;
                }
                continue;
            }
            let streak = self.hot.entry(id).or_insert(0);
            *streak = if pages > 0 && written as f64 >= HOT_FRACTION * pages as f64 {
                *streak + 1
            } else {
                0
            };
            if *streak >= HOT_STREAK {
                self.tracker.untrack(range)?;
                self.whole.insert(id, WHOLE_FOR);
                tracing::debug!(region = %self.regions[i].rec.name, "written whole in every epoch: taking it whole instead of tracking");
            }
        }
        Ok(())
    }

    fn track_range(&mut self, id: u64, range: PageRange) -> Result<()> {
        if !self.whole.contains_key(&id) {
            self.tracker.track(range)?;
        }
        Ok(())
    }

    fn untrack_range(&mut self, id: u64, range: PageRange) -> Result<()> {
        if !self.whole.contains_key(&id) {
            self.tracker.untrack(range)?;
        }
        Ok(())
    }

    fn section_off(&self, i: usize, ctx: usize) -> u64 {
        self.pool
            .section(&section_name(self.regions[i].rec.id, ctx))
            .expect("region section exists")
            .offset
    }

    /// Unmaps every region and closes the pool (the last checkpoint stays durable).
    pub fn close(self) {}

    /// Closes the pool but leaves the regions mapped where they are — for a monitor that lets
    /// go of a traced process without pulling its memory away. Later writes reach the pool file
    /// but belong to no checkpoint.
    pub fn close_leaving_mapped(mut self) {
        self.regions.clear();
    }

    /// The address space the engine acts on.
    pub fn space(&self) -> &S {
        &self.space
    }

    /// The address space, mutably (e.g. to stop or resume a traced process).
    pub fn space_mut(&mut self) -> &mut S {
        &mut self.space
    }
}

impl<S: AddressSpace> Drop for Engine<S> {
    fn drop(&mut self) {
        for r in &self.regions {
            let _ = self
                .tracker
                .untrack(PageRange::new(r.rec.addr, r.rec.addr + r.rec.len as usize));
            let _ = self.space.release(r.rec.addr, r.rec.reserve as usize);
        }
    }
}

fn info(r: &RegionRecord) -> RegionInfo {
    RegionInfo {
        name: r.name.clone(),
        addr: r.addr,
        len: r.len as usize,
        reserve: r.reserve as usize,
    }
}

fn roots(
    valid: usize,
    running: usize,
    epoch: u64,
    meta: &[u8],
    meta_crc: u32,
) -> [u64; root::COUNT] {
    let mut r = [0u64; root::COUNT];
    r[root::VALID] = valid as u64;
    r[root::RUNNING] = running as u64;
    r[root::EPOCH] = epoch;
    r[root::META_LEN] = meta.len() as u64;
    r[root::META_CRC] = meta_crc as u64;
    r[root::TIME] = now_ns();
    r
}

/// Writes a metadata block into context `ctx` (growing its section) and flushes it; the next
/// commit's fence makes it durable.
fn write_meta(pool: &mut Pool, ctx: usize, meta: &[u8]) -> Result<()> {
    let name = meta_name(ctx);
    let sec = match pool.section(&name) {
        Some(s) if s.len >= meta.len() as u64 => s.clone(),
        Some(_) => pool.resize_section(&name, meta.len() as u64)?,
        None => pool.create_section(&name, meta.len() as u64, 0)?,
    };
    pool.bytes_mut(sec.offset, meta.len() as u64)
        .copy_from_slice(meta);
    pool.flush(sec.offset, meta.len() as u64)?;
    Ok(())
}

/// Context `ctx`'s metadata block, if it has the committed length and checksum.
fn read_meta(pool: &Pool, ctx: usize, len: u64, crc: u64) -> Option<Vec<u8>> {
    let sec = pool.section(&meta_name(ctx))?;
    if sec.len < len {
        return None;
    }
    let b = pool.bytes(sec.offset, len);
    (crc32c::crc32c(b) as u64 == crc).then(|| b.to_vec())
}

/// Verifies every page of the valid context `valid` against the metadata's checksums, repairing
/// each that fails from the other context when that holds the same page intact (right after a
/// checkpoint it is a complete copy; later, every page the program did not write since). A
/// sparse engine's valid context may lack the pages a checkpoint did not write (a crash between
/// its two commits): those holes are filled from the other context, space allocated first, and
/// not counted as repairs. Returns the pages repaired and (with `keep_damaged_pages`) those left
/// damaged.
fn settle_valid_context(
    pool: &mut Pool,
    meta: &ContextMeta,
    valid: usize,
    epoch: u64,
    opts: &EngineOptions,
) -> Result<(u64, Vec<(String, u64)>)> {
    let page = meta.page_size as u64;
    let mut repaired_pages = 0u64;
    let mut damaged = Vec::new();
    for bad in bad_pages(pool, meta, valid, usize::MAX) {
        let name = meta.regions[bad.region].name.clone();
        if !bad.copy_ok {
            if !opts.keep_damaged_pages {
                return Err(CkptError::ContextDamaged {
                    epoch,
                    region: name,
                    page: bad.page,
                });
            }
            damaged.push((name, bad.page));
            continue;
        }
        let id = meta.regions[bad.region].id;
        let (Some(src), Some(dst)) = (
            pool.section(&section_name(id, 1 - valid)).map(|s| s.offset),
            pool.section(&section_name(id, valid)).map(|s| s.offset),
        ) else {
            return Err(CkptError::ContextDamaged {
                epoch,
                region: name,
                page: bad.page,
            });
        };
        let at = bad.page * page;
        let copy = pool.bytes(src + at, page).to_vec();
        // The page may be a hole of a sparse section: reserve it before storing.
        pool.allocate(dst + at, page)?;
        pool.bytes_mut(dst + at, page).copy_from_slice(&copy);
        pool.flush(dst + at, page)?;
        // A hole filled from the other context is a sparse engine's single copy at work.
        repaired_pages += u64::from(!bad.hole);
    }
    if repaired_pages > 0 {
        tracing::warn!(
            epoch,
            pages = repaired_pages,
            "valid context damaged; pages repaired from the other context"
        );
    }
    Ok((repaired_pages, damaged))
}

/// The end of a recovery: the other context made equal to the valid one (`ctxs`: valid,
/// other) — or, for sparse sections, emptied (a sparse engine's running context holds only an
/// epoch's pages) —, the metadata written where it is missing or damaged, stale sections
/// dropped, and the roots committed. Returns the pages copied.
fn sync_and_commit(
    pool: &mut Pool,
    meta: &ContextMeta,
    meta_bytes: &[u8],
    (source, target): (usize, usize),
    epoch: u64,
    meta_crc: u32,
    meta_damaged: [bool; 2],
) -> Result<u64> {
    let page = meta.page_size as u64;
    let pages_synced = sync_context(pool, &meta.regions, page, source, target, None, true)?;
    for ctx in [source, target] {
        if ctx == target || meta_damaged[ctx] {
            write_meta(pool, ctx, meta_bytes)?;
        }
    }
    drop_foreign_sections(pool, meta)?;
    pool.commit(&roots(source, target, epoch, meta_bytes, meta_crc))?;
    Ok(pages_synced)
}

/// A page of the valid context that fails its checksum.
pub(crate) struct BadPage {
    /// Index into the metadata's regions.
    pub region: usize,
    pub page: u64,
    /// Whether the other context holds the page intact (same checksum).
    pub copy_ok: bool,
    /// The page is a hole in the context checked: with a sparse engine's single copy, a page
    /// the checkpoint did not write, which the other context holds — not damage.
    pub hole: bool,
}

/// Every page of context `ctx` that fails the metadata's checksum (at most `cap`), each with
/// whether the other context's page has the checksum. A region whose section is missing or
/// short counts as all its pages failing.
pub(crate) fn bad_pages(pool: &Pool, meta: &ContextMeta, ctx: usize, cap: usize) -> Vec<BadPage> {
    let page = meta.page_size as usize;
    let zero_crc = crc32c::crc32c(&vec![0u8; page]);
    let mut out = Vec::new();
    // A context's bytes of the region and which of its pages hold data (holes read as zeros
    // and are not read: on tmpfs, reading fills them).
    let bytes_of = |id: u64, c: usize, len: u64| {
        pool.section(&section_name(id, c))
            .filter(|s| s.len >= len)
            .map(|s| {
                let n = (len / page as u64) as usize;
                (s.offset, data_map(pool, s.offset, n, page))
            })
    };
    for (i, (r, crcs)) in meta.regions.iter().zip(&meta.crcs).enumerate() {
        let here = bytes_of(r.id, ctx, r.len);
        let there = bytes_of(r.id, 1 - ctx, r.len);
        for (p, want) in crcs.iter().enumerate() {
            let at = p * page;
            let ok = |b: &Option<(u64, Vec<bool>)>| {
                b.as_ref().is_some_and(|(off, data)| {
                    if data[p] {
                        crc32c::crc32c(pool.bytes(off + at as u64, page as u64)) == *want
                    } else {
                        zero_crc == *want
                    }
                })
            };
            if ok(&here) {
                continue;
            }
            out.push(BadPage {
                region: i,
                page: p as u64,
                copy_ok: ok(&there),
                hole: here.as_ref().is_some_and(|(_, data)| !data[p]),
            });
            if out.len() >= cap {
                return out;
            }
        }
    }
    out
}

/// A checkpoint's `(region index, first page, pages)` runs and, per run, its zero pages.
type RunsAndHoles<'a> = (&'a [(usize, usize, usize)], &'a [Vec<(usize, usize)>]);

/// Makes context `to` equal to context `from` for the regions of `meta`: sections created,
/// resized or deleted to match, then pages copied — only `runs` (region index, first page,
/// pages) when given, else every page that differs. Returns the pages copied; all flushed.
/// `move_pages`: a sparse `from`'s copied pages are punched from it once durable in `to`.
fn sync_context(
    pool: &mut Pool,
    regions: &[RegionRecord],
    page: u64,
    from: usize,
    to: usize,
    runs: Option<RunsAndHoles<'_>>,
    move_pages: bool,
) -> Result<u64> {
    // Sections of `to` for regions that no longer exist.
    let wanted: std::collections::HashSet<String> =
        regions.iter().map(|r| section_name(r.id, to)).collect();
    let suffix = format!(".{to}");
    let stale: Vec<String> = pool
        .sections()
        .iter()
        .filter(|s| {
            s.name.starts_with("ckpt.r") && s.name.ends_with(&suffix) && !wanted.contains(&s.name)
        })
        .map(|s| s.name.clone())
        .collect();
    for name in stale {
        pool.delete_section(&name)?;
    }
    let mut offsets = Vec::with_capacity(regions.len());
    let mut sparse = Vec::with_capacity(regions.len());
    let mut movable = Vec::with_capacity(regions.len());
    for r in regions {
        let name = section_name(r.id, to);
        let src = pool
            .section(&section_name(r.id, from))
            .expect("source section")
            .clone();
        let dst = match pool.section(&name) {
            Some(s) if s.len == r.len => s.clone(),
            Some(_) => pool.resize_section(&name, r.len)?,
            // Sparse like its source.
            None => pool.create_section(&name, r.len, src.flags & SECTION_SPARSE)?,
        };
        offsets.push((src.offset, dst.offset));
        sparse.push(dst.is_sparse());
        // Pages may be moved out of `from` only where a recovery finds them in `to`: a section
        // the last commit names as it is now.
        movable.push(
            move_pages
                && dst.is_sparse()
                && pool
                    .committed_sections()
                    .iter()
                    .any(|c| c.name == dst.name && c.offset == dst.offset && c.len == dst.len),
        );
    }
    let mut copied = 0u64;
    // `src` and `dst` lie in two distinct sections (the section table keeps them apart). On
    // `shm` and `file` the kernel copies (`copy_file_range`): neither context's pages are
    // faulted into this process, nor unmapped again afterwards — that was most of a process
    // monitor's CPU on a program rewriting much of its memory. A hole at `dst` (a sparse
    // section) gets its space from the copy: a full medium fails there with `ENOSPC`.
    let copy = |pool: &Pool, src: u64, dst: u64, len: u64| -> Result<()> {
        pool.copy_range(src, dst, len)?;
        pool.flush(dst, len)?;
        Ok(())
    };
    match runs {
        Some((runs, holes)) => {
            // Sparse sections: the pages are moved, not copied — once a batch of them is
            // durable in `to`, it is punched from `from`, so the pool never holds more than
            // the memory once plus one batch besides the checkpoint's new pages. Safe because
            // `from` is the valid context here: recovery takes each page from whichever
            // context holds it with the checkpoint's checksum.
            // (This process's mappings of the moved pages go too: the punch unmaps the source,
            // `release_pages` the destination.)
            let mut moved: Vec<(u64, u64, u64)> = Vec::new();
            let mut batch = 0u64;
            let mut take = |pool: &Pool, src: u64, dst: u64, len: u64, i: usize| -> Result<()> {
                copy(pool, src, dst, len)?;
                if movable[i] {
                    moved.push((src, dst, len));
                    batch += len;
                    if batch >= MOVE_BATCH {
                        pool.drain()?;
                        for (s, d, l) in moved.drain(..) {
                            pool.discard(s, l)?;
                            pool.release_pages(d, l)?;
                        }
                        batch = 0;
                    }
                }
                Ok(())
            };
            for (ri, &(i, first, n)) in runs.iter().enumerate() {
                let (src, dst) = offsets[i];
                // Zero pages of the run (sparse engines) become holes here too; the rest is
                // copied.
                let mut k = first;
                for &(h, m) in holes.get(ri).map(|v| v.as_slice()).unwrap_or(&[]) {
                    if h > k {
                        let at = k as u64 * page;
                        take(pool, src + at, dst + at, (h - k) as u64 * page, i)?;
                    }
                    // Only where it holds data (a punch costs a transaction, and on a disk an
                    // fsync at the next drain).
                    for (a, b) in pool.data_extents(dst + h as u64 * page, m as u64 * page)? {
                        pool.zero(a, b - a)?;
                    }
                    k = h + m;
                }
                if k < first + n {
                    let at = k as u64 * page;
                    take(pool, src + at, dst + at, (first + n - k) as u64 * page, i)?;
                }
                copied += n as u64;
            }
            if !moved.is_empty() {
                pool.drain()?;
                for (s, d, l) in moved.drain(..) {
                    pool.discard(s, l)?;
                    pool.release_pages(d, l)?;
                }
            }
        }
        None => {
            for (i, (r, &(src, dst))) in regions.iter().zip(&offsets).enumerate() {
                let n = (r.len / page) as usize;
                if sparse[i] {
                    // A sparse engine's running context holds only an epoch's pages: it starts
                    // empty (nothing of it is needed, the source is complete).
                    pool.discard(dst, r.len)?;
                    continue;
                }
                let (sd, dd) = (
                    data_map(pool, src, n, page as usize),
                    data_map(pool, dst, n, page as usize),
                );
                for p in 0..n {
                    let at = p as u64 * page;
                    // Holes are not read (on tmpfs, reading fills them).
                    match (sd[p], dd[p]) {
                        (false, false) => {}
                        (false, true) => {
                            if !is_zero(pool.bytes(dst + at, page)) {
                                zero_range(pool, dst + at, page, sparse[i])?;
                                copied += 1;
                            }
                        }
                        (true, false) => {
                            if !is_zero(pool.bytes(src + at, page)) {
                                copy(pool, src + at, dst + at, page)?;
                                copied += 1;
                            }
                        }
                        (true, true) => {
                            if pool.bytes(src + at, page) != pool.bytes(dst + at, page) {
                                copy(pool, src + at, dst + at, page)?;
                                copied += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(copied)
}

/// Deletes region sections of either context that the metadata does not name (left over from
/// regions created or deleted in an epoch that a crash ended).
fn drop_foreign_sections(pool: &mut Pool, meta: &ContextMeta) -> Result<()> {
    let keep: std::collections::HashSet<String> = meta
        .regions
        .iter()
        .flat_map(|r| [section_name(r.id, 0), section_name(r.id, 1)])
        .collect();
    let stale: Vec<String> = pool
        .sections()
        .iter()
        .filter(|s| s.name.starts_with("ckpt.r") && !keep.contains(&s.name))
        .map(|s| s.name.clone())
        .collect();
    for name in stale {
        pool.delete_section(&name)?;
    }
    Ok(())
}

/// Which of the `pages` pages at pool offset `off` hold data (`false`: a hole, reading as
/// zeros). A medium that cannot tell reports all of them as data.
fn data_map(pool: &Pool, off: u64, pages: usize, page: usize) -> Vec<bool> {
    let len = (pages * page) as u64;
    let Ok(extents) = pool.data_extents(off, len) else {
        return vec![true; pages];
    };
    let mut v = vec![false; pages];
    for (a, b) in extents {
        let p0 = ((a - off) / page as u64) as usize;
        let p1 = ((b - off).div_ceil(page as u64) as usize).min(pages);
        for x in &mut v[p0..p1] {
            *x = true;
        }
    }
    v
}

fn is_zero(b: &[u8]) -> bool {
    // Eight bytes at a time (a byte loop with an early exit does not vectorise: it was 6 % of
    // a process monitor's CPU on xz).
    let mut words = b.chunks_exact(8);
    words.all(|w| u64::from_ne_bytes(w.try_into().expect("eight bytes")) == 0)
        && words.remainder().iter().all(|&x| x == 0)
}

/// Appends page `p` to sorted `(first, pages)` runs.
fn push_page(runs: &mut Vec<(usize, usize)>, p: usize) {
    match runs.last_mut() {
        Some((f, n)) if *f + *n == p => *n += 1,
        _ => runs.push((p, 1)),
    }
}

/// Makes `[off, off+len)` zero: a hole in a sparse section, stored zeros otherwise (a dense
/// section stays allocated: a program may write it through its own mapping). Flushed.
fn zero_range(pool: &mut Pool, off: u64, len: u64, sparse: bool) -> Result<()> {
    if sparse {
        pool.zero(off, len)?;
    } else {
        pool.bytes_mut(off, len).fill(0);
        pool.flush(off, len)?;
    }
    Ok(())
}

/// Drops this process's page mappings of the pool's data area through the pool's own mapping
/// (`MADV_DONTNEED`; the bytes stay in the pool, the regions' mappings are untouched): pages the
/// engine read or wrote there — verifying a recovery, syncing the other context — stop counting
/// as resident memory. They are file pages of the page cache either way; without this a process
/// that recovered a region of N bytes showed about 3 N of resident memory.
fn release_pool_mapping(pool: &Pool) -> Result<()> {
    let data_off = pool.header().data_off;
    let len = pool.len();
    if len > data_off {
        pool.release_pages(data_off, len - data_off)?;
    }
    Ok(())
}

/// [`release_pool_mapping`] where it only saves memory (a dense engine's): a medium whose
/// mapping refuses `MADV_DONTNEED` keeps its pages mapped, and nothing fails for it.
fn release_pool_mapping_or_log(pool: &Pool) {
    if let Err(e) = release_pool_mapping(pool) {
        tracing::debug!("pool pages stay mapped: {e}");
    }
}

/// Bytes of pool pages (any shared file pages) this process has mapped (`/proc/self/statm`).
fn mapped_shared_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let shared: u64 = s
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    shared * kioku_track::page_size() as u64
}
