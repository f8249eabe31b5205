//! One rank's side of a group checkpoint: its pool (the checkpoint engine, two contexts), the
//! regions the program protects, the journals that keep each remote level's base, the parity
//! it holds for others, and the collective checkpoint and recovery.

use crate::config::Config;
use crate::error::{GroupError, Result};
use crate::layout::{Groups, Scheme};
use crate::meta::{GroupMeta, Table, MAGIC, VERSION};
use crate::mpi::{Comm, Op};
use crate::pages::{Mem, Sparse};
use kioku_ckpt::{CkptError, MovableSelfSpace, RegionOptions};

/// The engine of a rank's pool; regions are found by name, so recovery may place them anywhere.
pub type Engine = kioku_ckpt::Engine<MovableSelfSpace>;
use kioku_ec::Codec;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Checkpoint levels.
pub const LOCAL: u8 = 1;
pub const PARTNER: u8 = 2;
pub const RS: u8 = 3;

const TAG_ENCODE: u32 = 11;
const TAG_DECODE: u32 = 12;
/// Address space kept for growth of the library's own regions (journals, parity).
const AUX_RESERVE: usize = 64 << 30;

/// A remote level as this job keeps it.
struct Level {
    id: u8,
    scheme: Scheme,
    codec: Arc<Codec>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
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
    /// Pages whose delta went into the encoding.
    pub encoded_pages: u64,
    /// Bytes this rank sent to others.
    pub bytes_sent: u64,
    pub encode: Duration,
    pub persist: Duration,
    pub total: Duration,
}

/// What a recovery did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryReport {
    /// The group epoch whose state the program now has.
    pub epoch: u64,
    /// Ranks whose pools were missing or damaged and were rebuilt.
    pub lost: Vec<usize>,
    /// The level they were rebuilt from (0: none lost).
    pub level: u8,
    /// Ranks that rolled a prepared, unagreed checkpoint back.
    pub rolled_back: usize,
    pub bytes_received: u64,
    /// Decoding the lost ranks' shards (receiving included).
    pub decode: Duration,
    pub total: Duration,
}

/// One rank's view of the job's group checkpoints.
pub struct Group {
    comm: Comm,
    cfg: Config,
    groups: Groups,
    gi: usize,
    pos: usize,
    members: Vec<usize>,
    page: usize,
    state: State,
    engine: Option<Engine>,
    table: Table,
    levels: Vec<Level>,
    /// The last committed checkpoint's metadata.
    meta: Option<GroupMeta>,
    /// Buffers of the program's own registered with `protect`: (region id, address, bytes).
    protected: Vec<(u32, *mut u8, usize)>,
    pub last: CheckpointReport,
    pub recovered: Option<RecoveryReport>,
}

fn user_name(id: u32) -> String {
    format!("u{id}")
}
fn journal_name(level: u8) -> String {
    format!("j{level}")
}
fn bitmap_name(level: u8) -> String {
    format!("b{level}")
}
fn parity_name(level: u8, stripe: usize) -> String {
    format!("x{level}.{stripe}")
}
fn aux() -> RegionOptions {
    RegionOptions {
        addr: None,
        reserve: Some(AUX_RESERVE),
    }
}

/// Fault injection for the crash tests: `KIOKU_FAULT=<point>:<rank>:<epoch>` makes that rank
/// kill itself with SIGKILL at that point of that checkpoint (points: `encode`, half-way through
/// its part of the pipeline; `prepared`, after its prepare and before the agreement).
fn fault(point: &str, rank: usize, epoch: u64) {
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
/// (every rank returns the same error, so the program sees one collective outcome).
fn agree(comm: &Comm, mine: std::result::Result<(), String>) -> Result<()> {
    let text = match &mine {
        Ok(()) => Vec::new(),
        Err(e) => e.clone().into_bytes(),
    };
    let all = comm.allgather_var(&text)?;
    match all.iter().position(|e| !e.is_empty()) {
        None => Ok(()),
        Some(rank) => Err(GroupError::Remote {
            rank,
            detail: String::from_utf8_lossy(&all[rank]).into_owned(),
        }),
    }
}

fn xor_into(dst: &mut [u8], a: &[u8], b: &[u8]) {
    for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
        *d = x ^ y;
    }
}

/// Where each data page is, live and as last committed. Valid while no region is created,
/// resized or deleted and the engine is not closed (one pass of a collective operation).
pub(crate) struct DataView {
    page: usize,
    regions: Vec<ViewedRegion>,
}

/// One region of a [`DataView`].
struct ViewedRegion {
    /// First data page and pages.
    offset: u64,
    pages: u64,
    live: Mem,
    /// The committed bytes, if the region existed at the last checkpoint.
    committed: Option<(*const u8, usize)>,
}

impl DataView {
    fn find(&self, p: u64) -> Option<&ViewedRegion> {
        let i = self.regions.partition_point(|r| r.offset + r.pages <= p);
        self.regions.get(i).filter(|r| r.offset <= p)
    }

    /// Live bytes of data page `p` (`None` past the data space).
    pub(crate) fn live(&self, p: u64) -> Option<&[u8]> {
        let r = self.find(p)?;
        r.live.page(p - r.offset).map(|s| {
            // SAFETY: the page lies in a region the engine keeps mapped for this view's use
            // (see the type's contract); `Mem::page` already checked the bounds.
            unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) }
        })
    }

    /// Data page `p` as of the last checkpoint (`None`: it did not exist then — zero).
    pub(crate) fn committed(&self, p: u64) -> Option<&[u8]> {
        let r = self.find(p)?;
        let (ptr, len) = r.committed?;
        let at = (p - r.offset) as usize * self.page;
        (at + self.page <= len).then(|| {
            // SAFETY: `[ptr, ptr+len)` is the valid context's section in the pool mapping,
            // unchanged during the view's use (no checkpoint runs meanwhile); `at + page <=
            // len` was checked.
            unsafe { std::slice::from_raw_parts(ptr.add(at), self.page) }
        })
    }
}

/// How pages enter an encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Deltas against each page's base; zero deltas are skipped.
    Delta,
    /// Whole pages against zeroed parity, zero pages skipped (rebuilding after recovery,
    /// verifying).
    Rebuild,
    /// Whole pages, every one of them, against zeroed parity (the baseline: full checkpoints
    /// with full encoding).
    Full,
}

/// Where a holder puts what it receives.
enum Target<'a> {
    /// XOR into the parity regions.
    Regions,
    /// Into zeroed scratch stripes (verification), by held stripe.
    Scratch(&'a mut Vec<Vec<u8>>),
}

/// The remote levels `cfg` keeps, for a group of `g` members.
fn make_levels(cfg: &Config, g: usize) -> Result<Vec<Level>> {
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
        let g = members.len();
        let levels = make_levels(&cfg, g)?;
        let path = cfg.pool_path(comm.rank());
        let mut exists = [u64::from(path.exists())];
        comm.allreduce(&mut exists, Op::Max)?;
        let mut me = Group {
            page: kioku_pool::system_page_size() as usize,
            comm,
            cfg,
            groups,
            gi,
            pos,
            members,
            state: State::MustRecover,
            engine: None,
            table: Table::default(),
            levels,
            meta: None,
            protected: Vec::new(),
            last: CheckpointReport::default(),
            recovered: None,
        };
        if exists[0] == 0 {
            let made = me.create_pool();
            agree(&me.comm, made.map_err(|e| e.to_string()))?;
            me.state = State::Running;
        }
        Ok(me)
    }

    fn create_pool(&mut self) -> Result<()> {
        let path = self.cfg.pool_path(self.comm.rank());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| GroupError::Pool {
                path: dir.display().to_string(),
                detail: format!("cannot create the pool directory: {e}"),
            })?;
        }
        let mut c = kioku_pool::CreateOptions::new(kioku_ckpt::POOL_KIND);
        c.medium = self.cfg.medium;
        let pool = kioku_pool::Pool::create(&path, &c).map_err(CkptError::from)?;
        let mut engine = Engine::init(pool, MovableSelfSpace::default())?;
        // Exact written pages, never whole regions: a page reported written costs a delta
        // computation and a zero check here, more than its write-protect fault.
        engine.set_adaptive(false)?;
        self.engine = Some(engine);
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
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// Whether pools of an earlier run wait to be recovered.
    pub fn must_recover(&self) -> bool {
        self.state == State::MustRecover
    }
    /// The last committed group epoch (0: none).
    pub fn epoch(&self) -> u64 {
        self.meta.as_ref().map_or(0, |m| m.epoch)
    }
    pub fn last_level(&self) -> u8 {
        self.meta.as_ref().map_or(0, |m| m.level)
    }
    /// The (k, m) of the rs level.
    pub fn rs_code(&self) -> Option<(usize, usize)> {
        self.levels
            .iter()
            .find(|l| l.id == RS)
            .map(|l| (l.scheme.k, l.scheme.m))
    }

    fn running(&self) -> Result<()> {
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

    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("engine open while running")
    }

    fn engine_mut(&mut self) -> &mut Engine {
        self.engine.as_mut().expect("engine open while running")
    }

    fn mem(&self, name: &str) -> Option<Mem> {
        Mem::of(self.engine(), name, self.page)
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
            return Ok(self
                .engine()
                .region(&user_name(id))
                .expect("table and engine agree")
                .as_ptr());
        }
        let ptr = self.create_user_region(id, size)?;
        self.table.add(id, size as u64, pages);
        Ok(ptr)
    }

    /// Creates the engine region of protected region `id` (`size` bytes, reserving no room to
    /// grow: protected regions keep their size).
    fn create_user_region(&mut self, id: u32, size: usize) -> Result<*mut u8> {
        let reserve = size.div_ceil(self.page) * self.page;
        let r = self.engine_mut().create_region(
            &user_name(id),
            size,
            RegionOptions {
                addr: None,
                reserve: Some(reserve),
            },
        )?;
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
        for &(id, ptr, size) in &self.protected {
            let mem = self.mem(&user_name(id)).expect("protected region");
            let region = &mut mem.bytes_mut()[..size];
            // SAFETY: `ptr` is valid for `size` bytes per `protect`'s contract, and the
            // program does not write it during the collective call.
            let buf = unsafe { std::slice::from_raw_parts(ptr, size) };
            for (dst, src) in region.chunks_mut(self.page).zip(buf.chunks(self.page)) {
                if dst != src {
                    dst.copy_from_slice(src);
                }
            }
        }
    }

    /// Makes `len` pages of region `name` exist (creating or growing it, never shrinking).
    fn ensure_region(&mut self, name: &str, len: usize) -> Result<()> {
        let len = len.max(self.page).div_ceil(self.page) * self.page;
        match self.engine().region(name) {
            Some(r) if r.len >= len => Ok(()),
            Some(_) => self.engine_mut().resize_region(name, len).map(|_| ()),
            None => self
                .engine_mut()
                .create_region(name, len, aux())
                .map(|_| ()),
        }
        .map_err(GroupError::from)
    }

    /// The tables of this rank's group members (position order), from every rank's.
    fn group_tables(&self) -> Result<Vec<Table>> {
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
        let runs = self.engine_mut().written()?;
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

    /// The data space's pages, live and as last committed, located once for a pass over
    /// many pages.
    fn data_view(&self) -> DataView {
        let engine = self.engine();
        let regions = self
            .table
            .regions
            .iter()
            .map(|e| {
                let name = user_name(e.id);
                let live = Mem::of(engine, &name, self.page).expect("region of the table");
                let committed = engine.committed(&name).map(|b| (b.as_ptr(), b.len()));
                ViewedRegion {
                    offset: e.offset,
                    pages: e.pages,
                    live,
                    committed,
                }
            })
            .collect();
        DataView {
            page: self.page,
            regions,
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
            if !matches!(e, GroupError::Invalid(_)) {
                self.state = State::Broken(e.to_string());
            }
        }
        r
    }

    /// A checkpoint at `level`; with `rebuild` (after a recovery that rebuilt lost ranks
    /// from level `decoded`, whose parity is current again), every other kept level is
    /// encoded afresh.
    fn checkpoint_inner(
        &mut self,
        level: u8,
        rebuild_from: Option<u8>,
    ) -> Result<CheckpointReport> {
        let rebuild = rebuild_from.is_some();
        let t0 = Instant::now();
        let epoch = self.epoch() + 1;
        let rank = self.rank();
        let tables = self.group_tables()?;
        let max_pages = tables.iter().map(Table::pages).max().unwrap_or(0);
        let my_pages = self.table.pages();
        if self.cfg.full && !rebuild {
            // The baseline: a full checkpoint writes every page, written or not.
            for id in self.table.regions.iter().map(|r| r.id).collect::<Vec<_>>() {
                self.engine_mut().take_whole_next(&user_name(id))?;
            }
        }
        self.sync_protected();
        let dirty = self.written_data_pages()?;
        let prev = self.meta.clone();

        // Journals, bitmaps and parity regions sized for the data (a local failure here is
        // agreed on before anyone starts sending).
        let prepared = (|| -> Result<()> {
            let ids: Vec<(u8, Scheme)> = self.levels.iter().map(|l| (l.id, l.scheme)).collect();
            for (id, scheme) in ids {
                // A level's journal exists from the first other checkpoint after the level's
                // own first one (before that its base is all zeros: nothing to keep).
                let encoded_before = prev.as_ref().is_some_and(|m| m.last(id) > 0);
                let journaled = self.engine().region(&journal_name(id)).is_some();
                if journaled || (encoded_before && id != level && !rebuild) {
                    self.ensure_region(&journal_name(id), my_pages as usize * self.page)?;
                    self.ensure_region(&bitmap_name(id), (my_pages as usize).div_ceil(8))?;
                }
                if id == level || rebuild {
                    let q = scheme.stripe_pages(max_pages) as usize;
                    for (j, _) in scheme.held(self.pos) {
                        self.ensure_region(&parity_name(id, j), q * self.page)?;
                    }
                }
            }
            Ok(())
        })();
        agree(&self.comm, prepared.map_err(|e| e.to_string()))?;

        // Journals: the first write since a level's last checkpoint saves the page's base.
        let view = self.data_view();
        for l in &self.levels {
            if l.id == level || rebuild {
                continue;
            }
            let (Some(j), Some(b)) = (self.mem(&journal_name(l.id)), self.mem(&bitmap_name(l.id)))
            else {
                continue; // Never encoded yet: its first encoding takes everything.
            };
            for &p in &dirty {
                if !b.bit(p) {
                    let dst = j.page_mut(p).expect("journal covers the data");
                    match view.committed(p) {
                        Some(old) => dst.copy_from_slice(old),
                        None => dst.fill(0),
                    }
                    b.set_bit(p);
                }
            }
        }

        let te = Instant::now();
        let mut encoded = 0;
        self.comm.take_sent();
        let mut encode_levels: Vec<u8> = Vec::new();
        if let Some(decoded) = rebuild_from {
            encode_levels.extend(self.levels.iter().map(|l| l.id).filter(|&id| id != decoded));
        } else if level != LOCAL {
            encode_levels.push(level);
        }
        for id in &encode_levels {
            let mode = if rebuild || prev.as_ref().is_none_or(|m| m.last(*id) == 0) {
                Mode::Rebuild
            } else if self.cfg.full {
                Mode::Full
            } else {
                Mode::Delta
            };
            if mode != Mode::Delta {
                let l = self.levels.iter().find(|l| l.id == *id).expect("level");
                for (j, _) in l.scheme.held(self.pos) {
                    self.mem(&parity_name(*id, j))
                        .expect("parity")
                        .bytes_mut()
                        .fill(0);
                }
            }
            encoded += self.encode(*id, &tables, &dirty, mode, Target::Regions)?;
            if let Some(b) = self.mem(&bitmap_name(*id)) {
                b.clear_bits();
            }
        }
        if let Some(decoded) = rebuild_from {
            if let Some(b) = self.mem(&bitmap_name(decoded)) {
                b.clear_bits();
            }
        }
        let bytes_sent = self.comm.take_sent();
        let t_encode = te.elapsed();

        // The checkpoint itself: prepared everywhere, agreed, finished.
        let q_of = |id: u8| {
            self.levels
                .iter()
                .find(|l| l.id == id)
                .map_or(0, |l| l.scheme.stripe_pages(max_pages))
        };
        let encoded_now = |id: u8| encode_levels.contains(&id) || rebuild_from == Some(id);
        let meta = GroupMeta {
            magic: MAGIC.into(),
            version: VERSION,
            ranks: self.size(),
            rank,
            epoch,
            level,
            last_partner: if encoded_now(PARTNER) {
                epoch
            } else {
                prev.as_ref().map_or(0, |m| m.last_partner)
            },
            last_rs: if encoded_now(RS) {
                epoch
            } else {
                prev.as_ref().map_or(0, |m| m.last_rs)
            },
            stripe_pages_partner: if encoded_now(PARTNER) {
                q_of(PARTNER)
            } else {
                prev.as_ref().map_or(0, |m| m.stripe_pages_partner)
            },
            stripe_pages_rs: if encoded_now(RS) {
                q_of(RS)
            } else {
                prev.as_ref().map_or(0, |m| m.stripe_pages_rs)
            },
            members: self.members.clone(),
            tables,
            group_size: self.cfg.group_size,
            parity: self.cfg.parity,
            partner: self.cfg.partner,
            rs: self.cfg.rs,
        };
        let tp = Instant::now();
        let prepared = self.engine_mut().prepare(&meta.encode());
        fault("prepared", rank, epoch);
        agree(&self.comm, prepared.map_err(|e| e.to_string()))?;
        self.engine_mut().finish()?;
        let t_persist = tp.elapsed();
        self.meta = Some(meta);
        self.last = CheckpointReport {
            epoch,
            level,
            dirty_pages: dirty.len() as u64,
            encoded_pages: encoded,
            bytes_sent,
            encode: t_encode,
            persist: t_persist,
            total: t0.elapsed(),
        };
        Ok(self.last.clone())
    }

    /// This rank's part of encoding level `id` over its group: the pipeline of the thesis.
    /// Stripe by stripe (every member walks them in the same order), the stripe's pages go in
    /// segments along its contributors; each adds `C[t][i] · delta` of its own pages to the
    /// running partial sums (sparse: only pages someone changed) and passes them on; the last
    /// hands parity `t` to holder `t`, who XORs it into its parity. Segments keep every link
    /// of the chain busy at once. Returns the pages this rank contributed.
    fn encode(
        &mut self,
        id: u8,
        tables: &[Table],
        dirty: &[u64],
        mode: Mode,
        mut target: Target,
    ) -> Result<u64> {
        let l = self.levels.iter().find(|l| l.id == id).expect("level");
        let (scheme, codec) = (l.scheme, l.codec.clone());
        let (k, m) = (scheme.k, scheme.m);
        let page = self.page;
        let max_pages = tables.iter().map(Table::pages).max().unwrap_or(0);
        let q_total = scheme.stripe_pages(max_pages);
        let seg = self.cfg.segment_pages as u64;
        let nseg = q_total.div_ceil(seg);
        let my_pages = self.table.pages();

        // The pages this rank feeds in, by chunk: q = p / k of pages p with p % k == chunk.
        let pages: Vec<u64> = match mode {
            Mode::Delta => {
                let mut e = self
                    .mem(&bitmap_name(id))
                    .map(|b| b.set_bits())
                    .unwrap_or_default();
                e.retain(|&p| p < my_pages);
                e.extend_from_slice(dirty);
                e.sort_unstable();
                e.dedup();
                e
            }
            Mode::Rebuild | Mode::Full => (0..my_pages).collect(),
        };
        let mut by_chunk: Vec<Vec<u64>> = vec![Vec::new(); k];
        for &p in &pages {
            by_chunk[(p % k as u64) as usize].push(p / k as u64);
        }
        let journaled = self.mem(&bitmap_name(id)).zip(self.mem(&journal_name(id)));
        let zero = vec![0u8; page];
        let mut delta = vec![0u8; page];
        let view = self.data_view();
        let mut contributed = 0u64;
        let mut wire = Vec::new();
        let mut inbox = Vec::new();
        let mut in_qs: Vec<u32> = Vec::new();
        let mut out = Sparse::new(m * page);
        let members = self.members.clone();
        let peer = |pos: usize| members[pos];

        for j in 0..scheme.g {
            if j == scheme.g / 2 && matches!(target, Target::Regions) {
                // Half-way through this rank's part of a checkpoint's pipeline.
                fault("encode", self.comm.rank(), self.epoch() + 1);
            }
            let contributors = scheme.contributors(j);
            let holders = scheme.holders(j);
            if let Some(i) = contributors.iter().position(|&p| p == self.pos) {
                let mine = &by_chunk[i];
                let mut at = 0usize;
                for s in 0..nseg {
                    let (lo, hi) = (s * seg, ((s + 1) * seg).min(q_total));
                    let incoming: &[u8] = if i > 0 {
                        let from = peer(contributors[i - 1]);
                        self.comm.recv_into(from, TAG_ENCODE, &mut inbox)?;
                        Sparse::parse(&inbox, m * page, &mut in_qs).ok_or_else(|| {
                            GroupError::Remote {
                                rank: from,
                                detail: "malformed encoding message".into(),
                            }
                        })?
                    } else {
                        in_qs.clear();
                        &[]
                    };
                    let entry_in = |a: usize| &incoming[a * m * page..(a + 1) * m * page];
                    // Merge: incoming partial sums plus this rank's contributions.
                    out.clear();
                    let mut a = 0usize;
                    while at < mine.len() && mine[at] < hi {
                        let q = mine[at];
                        at += 1;
                        if q < lo {
                            continue;
                        }
                        let p = q * k as u64 + i as u64;
                        let new = view.live(p).unwrap_or(&zero);
                        let base: &[u8] = match mode {
                            Mode::Delta if journaled.as_ref().is_some_and(|(b, _)| b.bit(p)) => {
                                journaled
                                    .as_ref()
                                    .and_then(|(_, j)| j.page(p))
                                    .unwrap_or(&zero)
                            }
                            Mode::Delta => view.committed(p).unwrap_or(&zero),
                            Mode::Rebuild | Mode::Full => &zero,
                        };
                        xor_into(&mut delta, new, base);
                        if mode != Mode::Full && delta.iter().all(|&b| b == 0) {
                            continue;
                        }
                        contributed += 1;
                        while a < in_qs.len() && (in_qs[a] as u64) < q {
                            out.push(in_qs[a], entry_in(a));
                            a += 1;
                        }
                        let entry = if a < in_qs.len() && in_qs[a] as u64 == q {
                            out.push(in_qs[a], entry_in(a));
                            a += 1;
                            let n = out.len();
                            &mut out.data[(n - 1) * m * page..n * m * page]
                        } else {
                            out.push_zero(q as u32)
                        };
                        let mut parts: Vec<&mut [u8]> = entry.chunks_mut(page).collect();
                        codec.update_delta(i, 0, &delta, &mut parts)?;
                    }
                    while a < in_qs.len() {
                        out.push(in_qs[a], entry_in(a));
                        a += 1;
                    }
                    if i + 1 < k {
                        out.encode_into(&mut wire);
                        self.comm
                            .send(peer(contributors[i + 1]), TAG_ENCODE, &wire)?;
                    } else {
                        for (t, &h) in holders.iter().enumerate() {
                            out.encode_part_into(t, page, &mut wire);
                            self.comm.send(peer(h), TAG_ENCODE, &wire)?;
                        }
                    }
                }
            } else if holders.contains(&self.pos) {
                let from = peer(contributors[k - 1]);
                let held = scheme
                    .held(self.pos)
                    .iter()
                    .position(|&(hj, _)| hj == j)
                    .expect("held stripe");
                for _ in 0..nseg {
                    self.comm.recv_into(from, TAG_ENCODE, &mut inbox)?;
                    let got = Sparse::parse(&inbox, page, &mut in_qs).ok_or_else(|| {
                        GroupError::Remote {
                            rank: from,
                            detail: "malformed parity message".into(),
                        }
                    })?;
                    let region;
                    let dst: &mut [u8] = match &mut target {
                        Target::Regions => {
                            region = self.mem(&parity_name(id, j)).expect("parity");
                            region.bytes_mut()
                        }
                        Target::Scratch(bufs) => &mut bufs[held][..],
                    };
                    for (e, &q) in in_qs.iter().enumerate() {
                        let at = q as usize * page;
                        let d = dst
                            .get_mut(at..at + page)
                            .ok_or_else(|| GroupError::Remote {
                                rank: from,
                                detail: format!("parity page {q} beyond the stripe"),
                            })?;
                        for (x, y) in d.iter_mut().zip(&got[e * page..(e + 1) * page]) {
                            *x ^= y;
                        }
                    }
                }
            }
        }
        Ok(contributed)
    }

    /// Checks that the parity this group holds for every level kept equals the encoding of
    /// the data as of that level's last checkpoint (computed afresh, through the same
    /// pipeline, into scratch buffers). Collective; call it right after a checkpoint (the
    /// program's data must be what that checkpoint holds). Returns the parity pages that
    /// differ, summed over the job, per level checked.
    pub fn verify(&mut self) -> Result<Vec<(u8, u64)>> {
        self.running()?;
        let tables = self.group_tables()?;
        let Some(meta) = self.meta.clone() else {
            return Ok(vec![]);
        };
        let mut out = Vec::new();
        let ids: Vec<(u8, Scheme)> = self.levels.iter().map(|l| (l.id, l.scheme)).collect();
        for (id, scheme) in ids {
            if meta.last(id) != meta.epoch {
                continue; // Parity of an earlier epoch: the data moved on since.
            }
            let q = meta.stripe_pages(id) as usize;
            let held = scheme.held(self.pos);
            let mut scratch: Vec<Vec<u8>> = vec![vec![0u8; q * self.page]; held.len()];
            self.encode(
                id,
                &tables,
                &[],
                Mode::Rebuild,
                Target::Scratch(&mut scratch),
            )?;
            let mut bad = 0u64;
            for (h, (j, _)) in held.iter().enumerate() {
                let have = self.mem(&parity_name(id, *j)).expect("parity");
                let have = &have.bytes()[..q * self.page];
                bad += have
                    .chunks(self.page)
                    .zip(scratch[h].chunks(self.page))
                    .filter(|(a, b)| a != b)
                    .count() as u64;
            }
            let mut sum = [bad];
            self.comm.allreduce(&mut sum, Op::Sum)?;
            out.push((id, sum[0]));
        }
        Ok(out)
    }

    /// Collective recovery after a restart: agrees on the epoch every rank can return to,
    /// rolls back checkpoints that were prepared but not agreed, rebuilds lost ranks (missing
    /// or damaged pools) from the others' data and parity, and takes a checkpoint at every
    /// level kept so that the group is protected again before the program goes on.
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

    /// Drops the engine: the pool keeps the last checkpoint.
    pub fn close(&mut self) {
        self.engine = None;
    }
}

/// What recovery needs of the group's internals.
pub(crate) mod internals {
    use super::*;

    impl Group {
        pub(crate) fn comm_mut(&mut self) -> &mut Comm {
            &mut self.comm
        }
        pub(crate) fn page_size(&self) -> usize {
            self.page
        }
        pub(crate) fn group_members(&self) -> &[usize] {
            &self.members
        }
        /// Takes the groups a checkpoint recorded (a restart may place ranks differently).
        pub(crate) fn set_groups(&mut self, groups: Groups) -> Result<()> {
            let (gi, pos) = groups.place(self.comm.rank());
            self.members = groups.groups[gi].clone();
            self.levels = make_levels(&self.cfg, self.members.len())?;
            self.groups = groups;
            self.gi = gi;
            self.pos = pos;
            Ok(())
        }
        pub(crate) fn set_engine(&mut self, e: Engine, table: Table, meta: Option<GroupMeta>) {
            self.engine = Some(e);
            self.table = table;
            self.meta = meta;
        }
        pub(crate) fn set_table_meta(&mut self, table: Table, meta: GroupMeta) {
            self.table = table;
            self.meta = Some(meta);
        }
        pub(crate) fn create_fresh_pool(&mut self) -> Result<()> {
            self.create_pool()
        }
        pub(crate) fn level_scheme(&self, id: u8) -> (Scheme, Arc<Codec>) {
            let l = self.levels.iter().find(|l| l.id == id).expect("level kept");
            (l.scheme, l.codec.clone())
        }
        pub(crate) fn memory(&self, name: &str) -> Option<Mem> {
            self.mem(name)
        }
        pub(crate) fn table(&self) -> &Table {
            &self.table
        }
        pub(crate) fn view(&self) -> DataView {
            self.data_view()
        }
        /// The checkpoint that ends a recovery which rebuilt lost ranks from level `decoded`.
        pub(crate) fn rebuild_checkpoint(&mut self, decoded: u8) -> Result<CheckpointReport> {
            let level = self.levels.iter().map(|l| l.id).max().unwrap_or(LOCAL);
            self.checkpoint_inner(level, Some(decoded))
        }
        pub(crate) fn ensure(&mut self, name: &str, len: usize) -> Result<()> {
            self.ensure_region(name, len)
        }
        /// Recreates a lost rank's protected region (its table entry comes with the group's
        /// record, not from an allocation).
        pub(crate) fn recreate_user_region(&mut self, id: u32, bytes: u64) -> Result<()> {
            self.create_user_region(id, bytes as usize).map(|_| ())
        }
    }

    pub(crate) fn user_region(id: u32) -> String {
        user_name(id)
    }
    pub(crate) fn journal(level: u8) -> String {
        journal_name(level)
    }
    pub(crate) fn bitmap(level: u8) -> String {
        bitmap_name(level)
    }
    pub(crate) fn parity(level: u8, stripe: usize) -> String {
        parity_name(level, stripe)
    }

    pub(crate) const DECODE_TAG: u32 = TAG_DECODE;

    pub(crate) fn agree_all(comm: &Comm, r: std::result::Result<(), String>) -> Result<()> {
        agree(comm, r)
    }
}
