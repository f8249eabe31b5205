//! A DSM node: the application's calls (allocation, barrier, locks), the receive thread that
//! serves other nodes (pages, diffs, the barrier and lock managers), and the fault thread that
//! makes pages usable when the application touches them.
//!
//! Consistency is home-based lazy release consistency in SCASH's scope form: every page has a
//! home node that keeps its master copy. A node that writes a cached page keeps a twin; at a
//! release (unlock, barrier) it sends the byte-exact diff to the home and announces the page
//! (a write notice). At an acquire (lock) a node invalidates the pages announced under that
//! lock; at a barrier, every page another node announced. The next access fetches the page
//! from its home.

use crate::diff;
use crate::error::{DsmError, Result};
use crate::fault::{self, Fault};
use crate::image::{self, Contexts};
use crate::region::{Access, Region};
use crate::wire::{BarrierKind, Msg, ReplyTo};
use kioku_mcapi::{EndpointId, McapiError, Node, PeerLoss, PeerState, Topology};
use kioku_track::{BackendKind, PageRange, PageTracker, Tracker};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

const PORT_REQ: u32 = 1;
const PORT_CTL: u32 = 2;
const PORT_FLT: u32 = 3;
/// How often a waiting call looks at whether the node it waits for is still there.
const LOOK: Duration = Duration::from_millis(200);
/// Diff messages carry at most this many bytes, and at most this many wait for an ack, so that
/// a home's acknowledgements never fill the sender's queue.
const DIFF_BATCH: usize = 128 << 10;
const DIFF_WINDOW: usize = 8;
const VERSION: u64 = 1;
/// Checkpoint images travel in messages of this size.
const IMAGE_CHUNK: usize = (1 << 20) - 64;
/// The largest private state a checkpoint takes.
pub const MAX_PRIVATE: usize = 1 << 30;

/// The default address of the shared range, the same on every node.
pub const DEFAULT_BASE: usize = 0x5e00_0000_0000;
/// The default size of the shared range (virtual; memory is used only as pages are touched).
pub const DEFAULT_RANGE: usize = 16 << 30;

static RUNNING: AtomicBool = AtomicBool::new(false);

/// How the pages of an allocation get their home nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Contiguous blocks: the first 1/N of the pages on node 0, the next on node 1, …
    Block,
    /// Page i on node i mod N.
    Cyclic,
    /// Every page on one node.
    OnNode(u32),
    /// Page i on `homes[i]` (one entry per page).
    Explicit(Vec<u32>),
}

/// How to start a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node's id, 0..N-1.
    pub node: u32,
    /// The job's MCAPI topology (its node count is the DSM's).
    pub topology: Topology,
    /// Where the shared range starts (the same on every node).
    pub base: usize,
    /// Its size in bytes.
    pub range: usize,
    /// How long `init` waits for the other nodes to appear.
    pub start_timeout: Duration,
    /// Find the written home pages with userfaultfd's asynchronous write-protection
    /// (`crates/track`) instead of a protection fault per page and interval. Used when the
    /// kernel offers it (Linux ≥ 6.7); `KIOKU_DSM_TRACK_HOMES=0` turns it off.
    pub track_homes: bool,
}

impl Config {
    /// Node `node` of `topology`, with the default shared range.
    pub fn new(node: u32, topology: Topology) -> Config {
        Config {
            node,
            topology,
            base: DEFAULT_BASE,
            range: DEFAULT_RANGE,
            start_timeout: Duration::from_secs(60),
            track_homes: true,
        }
    }

    /// From the environment: `KIOKU_DSM_NODE` (the node id), the MCAPI topology
    /// (`KIOKU_MCAPI_TOPOLOGY`, `KIOKU_MCAPI_*`), and optionally `KIOKU_DSM_BASE` (hex) and
    /// `KIOKU_DSM_RANGE_MIB` and `KIOKU_DSM_START_TIMEOUT_S`.
    pub fn from_env() -> Result<Config> {
        let node = env_parse("KIOKU_DSM_NODE", |v| v.parse::<u32>().ok())?.ok_or_else(|| {
            DsmError::Invalid("KIOKU_DSM_NODE is not set: set it to this node's id".into())
        })?;
        let topology = Topology::load(None)?;
        let mut c = Config::new(node, topology);
        if let Some(b) = env_parse("KIOKU_DSM_BASE", |v| {
            usize::from_str_radix(v.trim_start_matches("0x"), 16).ok()
        })? {
            c.base = b;
        }
        if let Some(m) = env_parse("KIOKU_DSM_RANGE_MIB", |v| v.parse::<usize>().ok())? {
            c.range = m << 20;
        }
        if let Some(t) = env_parse("KIOKU_DSM_START_TIMEOUT_S", |v| v.parse::<u64>().ok())? {
            c.start_timeout = Duration::from_secs(t);
        }
        if let Some(t) = env_parse("KIOKU_DSM_TRACK_HOMES", |v| match v {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        })? {
            c.track_homes = t;
        }
        Ok(c)
    }
}

fn env_parse<T>(key: &str, f: impl Fn(&str) -> Option<T>) -> Result<Option<T>> {
    match std::env::var(key) {
        Err(_) => Ok(None),
        Ok(v) => f(&v)
            .map(Some)
            .ok_or_else(|| DsmError::Invalid(format!("{key}={v} is not a valid value"))),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Invalid,
    Clean,
    Dirty,
    /// A home page, writable, its writes found by the home tracker.
    Tracked,
}

/// What the application's threads and the fault thread share.
struct Local {
    state: Vec<State>,
    twins: HashMap<u32, Vec<u8>>,
    dirty: BTreeSet<u32>,
    since_barrier: BTreeSet<u32>,
    since_acquire: BTreeSet<u32>,
}

/// The endpoints of one node.
#[derive(Clone, Copy)]
struct Ends {
    req: EndpointId,
    ctl: EndpointId,
    flt: EndpointId,
}

struct Inner {
    mcapi: Node,
    me: u32,
    n: u32,
    region: Region,
    mine: Ends,
    peers: Vec<Ends>,
    /// The home of every allocated page.
    homes: RwLock<Vec<u32>>,
    local: Mutex<Local>,
    /// The checkpoint images this node holds for the node it is the buddy of.
    held: Mutex<Contexts>,
    /// This node's own images (to roll back without a transfer).
    own: Mutex<Contexts>,
    /// Finds written home pages without faults, when the kernel allows.
    homes_written: Option<Mutex<Tracker>>,
}

/// A checkpoint image held in memory (for tools and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldImage {
    /// Whose image it is.
    pub node: u32,
    /// The barrier epoch of the checkpoint.
    pub epoch: u64,
    pub bytes: usize,
    /// CRC-32C of the image.
    pub crc: u32,
}

/// What only the application's calls touch (one at a time).
struct Ctl {
    epoch: u64,
    allocs: u64,
    held: BTreeSet<u32>,
}

/// A running DSM node. One per process.
pub struct Dsm {
    inner: Arc<Inner>,
    ctl: Mutex<Ctl>,
    recv: Option<JoinHandle<()>>,
    fault: Option<JoinHandle<()>>,
    pipe_w: i32,
}

impl Dsm {
    /// Starts this node and meets the others (waiting for them up to MCAPI's timeouts); every
    /// node must be started with the same topology and shared range.
    pub fn init(cfg: Config) -> Result<Dsm> {
        if RUNNING.swap(true, Ordering::SeqCst) {
            return Err(DsmError::AlreadyRunning);
        }
        match Dsm::start(cfg) {
            Ok(d) => Ok(d),
            Err(e) => {
                RUNNING.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn start(cfg: Config) -> Result<Dsm> {
        kioku_mcapi::init_logging();
        let n = cfg.topology.nodes;
        let me = cfg.node;
        let job = cfg.topology.job.clone();
        let mcapi = Node::initialize(cfg.topology.domain, me, cfg.topology.clone())
            .map_err(|e| DsmError::mcapi("initialize", e))?;
        let create = |port| {
            mcapi
                .endpoint_create(port)
                .map_err(|e| DsmError::mcapi("endpoint create", e))
        };
        let mine = Ends {
            req: create(PORT_REQ)?,
            ctl: create(PORT_CTL)?,
            flt: create(PORT_FLT)?,
        };
        for ep in [mine.ctl, mine.flt] {
            mcapi
                .set_endpoint_timeout(ep, Some(LOOK))
                .map_err(|e| DsmError::mcapi("endpoint timeout", e))?;
        }
        mcapi
            .set_endpoint_timeout(mine.req, Some(LOOK))
            .map_err(|e| DsmError::mcapi("endpoint timeout", e))?;
        let region = Region::new(cfg.base, cfg.range, &job)?;
        let mut peers = Vec::with_capacity(n as usize);
        let domain = cfg.topology.domain;
        let wait = Some(cfg.start_timeout);
        let secs = cfg.start_timeout.as_secs();
        for peer in 0..n {
            let get = |port| {
                mcapi
                    .endpoint_get(domain, peer, port, wait)
                    .map_err(|e| match e {
                        McapiError::Timeout => DsmError::NoAnswer {
                            node: peer,
                            secs,
                            what: "start-up (is it started, with the same topology?)",
                        },
                        e => DsmError::mcapi("start-up", e),
                    })
            };
            peers.push(Ends {
                req: get(PORT_REQ)?,
                ctl: get(PORT_CTL)?,
                flt: get(PORT_FLT)?,
            });
        }
        let inner = Arc::new(Inner {
            mcapi,
            me,
            n,
            region,
            mine,
            peers,
            homes: RwLock::new(Vec::new()),
            local: Mutex::new(Local {
                state: Vec::new(),
                twins: HashMap::new(),
                dirty: BTreeSet::new(),
                since_barrier: BTreeSet::new(),
                since_acquire: BTreeSet::new(),
            }),
            held: Mutex::new(Contexts::default()),
            own: Mutex::new(Contexts::default()),
            homes_written: if cfg.track_homes {
                match Tracker::builder()
                    .backend(BackendKind::UffdPagemapScan)
                    .build()
                {
                    Ok(t) => Some(Mutex::new(t)),
                    Err(e) => {
                        tracing::info!(
                            node = me,
                            "home pages are write-protected instead of tracked: {e}"
                        );
                        None
                    }
                }
            } else {
                None
            },
        });
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the array; the result is checked.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(DsmError::Io {
                what: "pipe2",
                source: std::io::Error::last_os_error(),
            });
        }
        let (pipe_r, pipe_w) = (fds[0], fds[1]);
        let fi = inner.clone();
        let fault = std::thread::Builder::new()
            .name(format!("dsm-fault{me}"))
            .spawn(move || fault_thread(fi, pipe_r))
            .map_err(|e| DsmError::Io {
                what: "spawn the fault thread",
                source: e,
            })?;
        let ri = inner.clone();
        let recv = std::thread::Builder::new()
            .name(format!("dsm-recv{me}"))
            .spawn(move || receive_thread(ri))
            .map_err(|e| DsmError::Io {
                what: "spawn the receive thread",
                source: e,
            })?;
        fault::install(cfg.base, cfg.range, inner.region.page, me, pipe_w).map_err(|e| {
            DsmError::Io {
                what: "install the SIGSEGV handler",
                source: e,
            }
        })?;
        let dsm = Dsm {
            inner,
            ctl: Mutex::new(Ctl {
                epoch: 0,
                allocs: 0,
                held: BTreeSet::new(),
            }),
            recv: Some(recv),
            fault: Some(fault),
            pipe_w,
        };
        let check = digest(&[
            VERSION,
            dsm.inner.region.page as u64,
            cfg.base as u64,
            cfg.range as u64,
            n as u64,
        ]);
        dsm.meet(BarrierKind::Init, check).map_err(|e| match e {
            DsmError::Mismatch(m) => DsmError::Mismatch(format!(
                "{m} (the nodes were started with different shared ranges or page sizes)"
            )),
            e => e,
        })?;
        tracing::info!(node = me, nodes = n, "DSM node {me} of {n} is up");
        Ok(dsm)
    }

    /// This node's id.
    pub fn node(&self) -> u32 {
        self.inner.me
    }

    /// The number of nodes.
    pub fn nodes(&self) -> u32 {
        self.inner.n
    }

    /// The page size of the shared range.
    pub fn page_size(&self) -> usize {
        self.inner.region.page
    }

    /// Allocates `bytes` of shared memory (page-aligned, zero-filled) whose pages have their
    /// homes as `dist` says. Collective: every node calls it with the same arguments in the same
    /// order; it ends with a barrier that checks this.
    pub fn alloc(&self, bytes: usize, dist: Distribution) -> Result<*mut u8> {
        let page = self.inner.region.page;
        let count = bytes.div_ceil(page).max(1);
        let n = self.inner.n;
        let homes_of: Vec<u32> = match &dist {
            Distribution::Block => (0..count)
                .map(|i| (i as u64 * n as u64 / count as u64) as u32)
                .collect(),
            Distribution::Cyclic => (0..count).map(|i| i as u32 % n).collect(),
            Distribution::OnNode(k) => {
                if *k >= n {
                    return Err(DsmError::Invalid(format!(
                        "node {k} does not exist ({n} nodes)"
                    )));
                }
                vec![*k; count]
            }
            Distribution::Explicit(v) => {
                if v.len() != count {
                    return Err(DsmError::Invalid(format!(
                        "{} homes given for {count} pages",
                        v.len()
                    )));
                }
                if let Some(k) = v.iter().find(|&&k| k >= n) {
                    return Err(DsmError::Invalid(format!(
                        "node {k} does not exist ({n} nodes)"
                    )));
                }
                v.clone()
            }
        };
        let mut ctl = self.ctl.lock().unwrap();
        let first;
        {
            let mut homes = self.inner.homes.write().unwrap();
            first = homes.len();
            let total = self.inner.region.pages() as usize;
            if first + count > total {
                return Err(DsmError::OutOfSharedMemory {
                    want: count * page,
                    left: (total - first) * page,
                    total: total * page,
                });
            }
            homes.extend_from_slice(&homes_of);
            let mut local = self.inner.local.lock().unwrap();
            local.state.resize(first + count, State::Clean);
            self.inner
                .region
                .protect(first as u32, count as u32, Access::Read)?;
            let mine: Vec<u32> = (first..first + count)
                .filter(|&p| homes[p] == self.inner.me)
                .map(|p| p as u32)
                .collect();
            self.inner.track_homes(&mut local, &mine)?;
            fault::TOP.store((first + count) as u32, Ordering::Release);
        }
        ctl.allocs = digest(&[ctl.allocs, count as u64, digest32(&homes_of)]);
        let check = ctl.allocs;
        self.barrier_locked(&mut ctl, BarrierKind::Barrier, check)
            .map_err(|e| match e {
                DsmError::Mismatch(m) => DsmError::Mismatch(format!(
                    "{m} (the nodes allocated different shared memory: alloc is collective)"
                )),
                e => e,
            })?;
        Ok((self.inner.region.base + first * page) as *mut u8)
    }

    /// Waits for every node; afterwards each node sees every write made before the barrier.
    pub fn barrier(&self) -> Result<()> {
        let mut ctl = self.ctl.lock().unwrap();
        let check = ctl.allocs;
        self.barrier_locked(&mut ctl, BarrierKind::Barrier, check)
    }

    /// Takes lock `lock` (any number; its manager is node `lock mod N`). Afterwards this node
    /// sees every write made under the lock by its previous holders.
    pub fn lock(&self, lock: u32) -> Result<()> {
        let mut ctl = self.ctl.lock().unwrap();
        if ctl.held.contains(&lock) {
            return Err(DsmError::Invalid(format!(
                "lock {lock} is already held by this node"
            )));
        }
        self.flush()?;
        let inner = &self.inner;
        let mgr = lock % inner.n;
        inner.send(
            mgr,
            Msg::Acquire {
                lock,
                epoch: ctl.epoch,
            },
            "lock",
        )?;
        match inner.reply(inner.mine.ctl, &[mgr], "lock")? {
            Msg::Grant { lock: l, notices } if l == lock => {
                inner.invalidate(notices.iter().copied())?;
                inner.local.lock().unwrap().since_acquire.clear();
                ctl.held.insert(lock);
                Ok(())
            }
            Msg::Refuse { text } => Err(DsmError::Mismatch(text)),
            m => Err(unexpected(mgr, &m, "a lock grant")),
        }
    }

    /// Releases lock `lock`: the writes made under it go to their homes first.
    pub fn unlock(&self, lock: u32) -> Result<()> {
        let mut ctl = self.ctl.lock().unwrap();
        if !ctl.held.remove(&lock) {
            return Err(DsmError::Invalid(format!(
                "lock {lock} is not held by this node"
            )));
        }
        self.flush()?;
        let notices: Vec<u32> = std::mem::take(&mut self.inner.local.lock().unwrap().since_acquire)
            .into_iter()
            .collect();
        self.inner.send(
            lock % self.inner.n,
            Msg::Release {
                lock,
                epoch: ctl.epoch,
                notices,
            },
            "unlock",
        )
    }

    /// Collective checkpoint (SCASH-FT): at a barrier, every node's image — its home pages and
    /// `private`, its own state — goes into its buddy's memory (node `(i + 1) mod N`) and is
    /// kept locally, both in two contexts; a second barrier commits it. A failure at any moment
    /// leaves the previous checkpoint whole. Returns the checkpoint's epoch.
    pub fn checkpoint(&self, private: &[u8]) -> Result<u64> {
        if private.len() > MAX_PRIVATE {
            return Err(DsmError::Invalid(format!(
                "a private state of {} bytes is larger than the {MAX_PRIVATE} a checkpoint takes",
                private.len()
            )));
        }
        let mut ctl = self.ctl.lock().unwrap();
        let check = ctl.allocs;
        self.barrier_locked(&mut ctl, BarrierKind::Checkpoint, check)?;
        let epoch = ctl.epoch;
        let inner = &self.inner;
        let img = {
            let homes = inner.homes.read().unwrap();
            let mine: Vec<u32> = (0..homes.len() as u32)
                .filter(|&p| homes[p as usize] == inner.me)
                .collect();
            image::encode(
                inner.me,
                epoch,
                &homes,
                &mine,
                inner.region.page,
                |p, dst| inner.region.copy_page_into(p, dst),
                private,
            )
        };
        if inner.n > 1 {
            let buddy = (inner.me + 1) % inner.n;
            for (i, chunk) in img.chunks(IMAGE_CHUNK).enumerate() {
                let m = crate::wire::encode_image_chunk(
                    inner.me,
                    epoch,
                    (i * IMAGE_CHUNK) as u64,
                    chunk,
                );
                let to = inner.peers[buddy as usize].req;
                inner
                    .send_bytes(inner.mine.ctl, buddy, to, &m)
                    .map_err(|e| DsmError::mcapi("checkpoint transfer", e))?;
            }
            let end = Msg::ImageEnd {
                epoch,
                len: img.len() as u64,
                crc: crc32c::crc32c(&img),
            };
            inner.send(buddy, end, "checkpoint transfer")?;
            match inner.reply(inner.mine.ctl, &[buddy], "checkpoint transfer")? {
                Msg::ImageHeld { epoch: e } if e == epoch => {}
                Msg::Refuse { text } => return Err(DsmError::Mismatch(text)),
                m => return Err(unexpected(buddy, &m, "a checkpoint acknowledgement")),
            }
        }
        inner
            .own
            .lock()
            .unwrap()
            .put(epoch, img)
            .map_err(DsmError::Invalid)?;
        self.barrier_locked(&mut ctl, BarrierKind::Checkpoint, check)?;
        tracing::debug!(node = inner.me, epoch, "checkpoint committed");
        Ok(epoch)
    }

    /// Collective: every node returns to the newest checkpoint — home pages as they were then,
    /// cached copies dropped, writes since discarded — and gets back its private state of then
    /// and the checkpoint's epoch. Allocations made since keep their addresses; their pages
    /// are zero again. Locks must not be held.
    pub fn rollback(&self) -> Result<(u64, Vec<u8>)> {
        let mut ctl = self.ctl.lock().unwrap();
        let inner = &self.inner;
        let newest = inner.own.lock().unwrap().held().last().map(|h| h.0);
        let Some(epoch) = newest else {
            return Err(DsmError::Invalid(
                "there is no checkpoint to roll back to: call checkpoint first".into(),
            ));
        };
        inner.discard_dirty()?;
        let check = digest(&[ctl.allocs, epoch]);
        self.barrier_locked(&mut ctl, BarrierKind::Rollback, check)
            .map_err(|e| match e {
                DsmError::Mismatch(m) => {
                    DsmError::Mismatch(format!("{m} (the nodes' newest checkpoints differ)"))
                }
                e => e,
            })?;
        let private = inner.restore(epoch)?;
        // Nobody fetches a page before its home has restored it.
        self.barrier_locked(&mut ctl, BarrierKind::Rollback, check)?;
        tracing::info!(node = inner.me, epoch, "rolled back to checkpoint {epoch}");
        Ok((epoch, private))
    }

    /// The length of this node's private state in its newest checkpoint (what `rollback`
    /// returns), if there is one.
    pub fn checkpoint_private_len(&self) -> Option<usize> {
        let own = self.inner.own.lock().unwrap();
        let epoch = own.held().last()?.0;
        image::Image::decode(own.get(epoch)?)
            .ok()
            .map(|i| i.private.len())
    }

    /// The complete checkpoint images in this node's memory: its own, then those it holds as
    /// the buddy of node `(i - 1) mod N` (oldest first).
    pub fn images(&self) -> (Vec<HeldImage>, Vec<HeldImage>) {
        let n = self.inner.n;
        let of = |c: &Contexts, node| {
            c.held()
                .into_iter()
                .map(|(epoch, bytes, crc)| HeldImage {
                    node,
                    epoch,
                    bytes,
                    crc,
                })
                .collect()
        };
        let me = self.inner.me;
        (
            of(&self.inner.own.lock().unwrap(), me),
            of(&self.inner.held.lock().unwrap(), (me + n - 1) % n),
        )
    }

    /// Leaves the job: a last barrier (so nobody still needs this node's pages), then the
    /// threads stop and the shared range goes away.
    pub fn finalize(mut self) -> Result<()> {
        let r = {
            let mut ctl = self.ctl.lock().unwrap();
            let check = ctl.allocs;
            self.barrier_locked(&mut ctl, BarrierKind::Finalize, check)
        };
        self.stop();
        r
    }

    fn meet(&self, kind: BarrierKind, check: u64) -> Result<()> {
        let mut ctl = self.ctl.lock().unwrap();
        self.barrier_locked(&mut ctl, kind, check)
    }

    fn barrier_locked(&self, ctl: &mut Ctl, kind: BarrierKind, check: u64) -> Result<()> {
        if let Some(l) = ctl.held.iter().next() {
            return Err(DsmError::Invalid(format!(
                "a barrier while holding lock {l}: unlock it first"
            )));
        }
        self.flush()?;
        let inner = &self.inner;
        let notices: Vec<u32> = std::mem::take(&mut inner.local.lock().unwrap().since_barrier)
            .into_iter()
            .collect();
        inner.send(
            0,
            Msg::Arrive {
                kind,
                epoch: ctl.epoch,
                check,
                notices,
            },
            "barrier",
        )?;
        // The manager watches every node; the others watch the manager.
        let watch: Vec<u32> = if inner.me == 0 {
            (0..inner.n).collect()
        } else {
            vec![0]
        };
        match inner.reply(inner.mine.ctl, &watch, "barrier")? {
            Msg::Depart { epoch, notices } if epoch == ctl.epoch => {
                tracing::debug!(node = inner.me, ?kind, epoch, "barrier departure");
                ctl.epoch += 1;
                let me = inner.me;
                let others = notices
                    .into_iter()
                    .filter(|(node, _)| *node != me)
                    .flat_map(|(_, pages)| pages);
                inner.invalidate(others)?;
                inner.local.lock().unwrap().since_acquire.clear();
                Ok(())
            }
            Msg::Refuse { text } => Err(DsmError::Mismatch(text)),
            m => Err(unexpected(0, &m, "a barrier departure")),
        }
    }

    /// Sends the diffs of every dirty page to its home and waits until all are applied; the
    /// pages become clean (read-only) again.
    fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        let mut local = inner.local.lock().unwrap();
        for p in inner.written_homes()? {
            local.since_barrier.insert(p);
            local.since_acquire.insert(p);
        }
        if local.dirty.is_empty() {
            return Ok(());
        }
        let dirty: Vec<u32> = std::mem::take(&mut local.dirty).into_iter().collect();
        for run in runs(&dirty) {
            inner.region.protect(run.0, run.1, Access::Read)?;
        }
        let homes = inner.homes.read().unwrap();
        let mut bodies: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
        for &p in &dirty {
            local.state[p as usize] = State::Clean;
            local.since_barrier.insert(p);
            local.since_acquire.insert(p);
            let home = homes[p as usize];
            if home == inner.me {
                continue;
            }
            let twin = local
                .twins
                .remove(&p)
                .expect("a dirty cached page has a twin");
            let now = inner.region.page_copy(p);
            let list = bodies.entry(home).or_default();
            if list
                .last()
                .is_none_or(|b| b.len() + 2 * inner.region.page > DIFF_BATCH)
            {
                list.push(Vec::new());
            }
            diff::encode(p, &twin, &now, list.last_mut().unwrap());
        }
        drop(homes);
        drop(local);
        let mut outstanding: Vec<u32> = Vec::new();
        for (home, list) in bodies {
            for body in list.into_iter().filter(|b| !b.is_empty()) {
                if outstanding.len() >= DIFF_WINDOW {
                    self.diff_ack(&mut outstanding)?;
                }
                tracing::debug!(node = inner.me, home, bytes = body.len(), "flush");
                inner.send(home, Msg::Diffs { body }, "diff flush")?;
                outstanding.push(home);
            }
        }
        while !outstanding.is_empty() {
            self.diff_ack(&mut outstanding)?;
        }
        Ok(())
    }

    fn diff_ack(&self, outstanding: &mut Vec<u32>) -> Result<()> {
        let inner = &self.inner;
        let from = inner.reply_from(inner.mine.ctl, outstanding, "diff flush")?;
        match from {
            (node, Msg::DiffAck) => {
                let i = outstanding.iter().position(|&h| h == node).ok_or_else(|| {
                    DsmError::Protocol {
                        from: node,
                        what: "an unexpected diff acknowledgement".into(),
                    }
                })?;
                outstanding.swap_remove(i);
                Ok(())
            }
            (_, Msg::Refuse { text }) => Err(DsmError::Mismatch(text)),
            (node, m) => Err(unexpected(node, &m, "a diff acknowledgement")),
        }
    }

    fn stop(&mut self) {
        fault::uninstall();
        let inner = &self.inner;
        let _ = inner.mcapi.msg_send(
            inner.mine.ctl,
            inner.mine.req,
            &Msg::Stop.encode(inner.me),
            0,
        );
        if let Some(h) = self.recv.take() {
            let _ = h.join();
        }
        let zero = 0usize;
        // SAFETY: writing 8 bytes of a local to our own pipe; a null fault stops the thread.
        unsafe { libc::write(self.pipe_w, &zero as *const usize as *const libc::c_void, 8) };
        if let Some(h) = self.fault.take() {
            let _ = h.join();
        }
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.pipe_w) };
        let _ = inner.mcapi.finalize(Duration::from_secs(2));
        RUNNING.store(false, Ordering::SeqCst);
    }
}

impl Drop for Dsm {
    fn drop(&mut self) {
        if self.recv.is_some() {
            self.stop();
        }
    }
}

impl Inner {
    fn send(&self, to: u32, m: Msg, what: &'static str) -> Result<()> {
        let bytes = m.encode(self.me);
        self.send_bytes(self.mine.ctl, to, self.peers[to as usize].req, &bytes)
            .map_err(|e| DsmError::mcapi(what, e))
    }

    /// Sends, waiting as long as `node` (the owner of `ep`) is alive: a full queue only means
    /// the peer is busy (a timed-out send was cancelled, so nothing goes twice).
    fn send_bytes(
        &self,
        from: EndpointId,
        node: u32,
        ep: EndpointId,
        bytes: &[u8],
    ) -> std::result::Result<(), McapiError> {
        loop {
            match self.mcapi.msg_send(from, ep, bytes, 0) {
                Err(McapiError::Timeout) => {
                    if let Ok(PeerState::Lost(why)) = self.mcapi.peer_state(node) {
                        return Err(McapiError::Transmission { node, why });
                    }
                }
                r => return r,
            }
        }
    }

    /// The next message on `ep` (from one of `watch`, which are checked for loss meanwhile).
    fn reply(&self, ep: EndpointId, watch: &[u32], what: &'static str) -> Result<Msg> {
        self.reply_from(ep, watch, what).map(|(_, m)| m)
    }

    fn reply_from(&self, ep: EndpointId, watch: &[u32], what: &'static str) -> Result<(u32, Msg)> {
        // A loss seen after a receive timed out; reported only if the next receive times out
        // too, since what the node sent before it went (or what the manager sent us before
        // the node could leave) is delivered first.
        let mut lost: Option<(u32, PeerLoss)> = None;
        loop {
            match self.mcapi.msg_recv(ep) {
                Ok(b) => {
                    return Msg::decode(&b).map_err(|e| DsmError::Protocol {
                        from: u32::MAX,
                        what: e,
                    })
                }
                Err(McapiError::Timeout) => {
                    if let Some((node, why)) = lost {
                        return Err(DsmError::NodeLost { node, why, what });
                    }
                    lost = watch
                        .iter()
                        .find_map(|&node| match self.mcapi.peer_state(node) {
                            Ok(PeerState::Lost(why)) => Some((node, why)),
                            _ => None,
                        });
                }
                Err(e) => return Err(DsmError::mcapi(what, e)),
            }
        }
    }

    /// Forgets this node's writes since the last release: twins dropped, pages read-only.
    fn discard_dirty(&self) -> Result<()> {
        let mut local = self.local.lock().unwrap();
        let dirty: Vec<u32> = std::mem::take(&mut local.dirty).into_iter().collect();
        for &p in &dirty {
            local.state[p as usize] = State::Clean;
            local.twins.remove(&p);
        }
        for run in runs(&dirty) {
            self.region.protect(run.0, run.1, Access::Read)?;
        }
        Ok(())
    }

    /// Puts this node back as it was at checkpoint `epoch`: home pages from its own image
    /// (zero for pages allocated since), every cached page dropped. Returns the private state.
    fn restore(&self, epoch: u64) -> Result<Vec<u8>> {
        let own = self.own.lock().unwrap();
        let bytes = own.get(epoch).ok_or_else(|| {
            DsmError::Invalid(format!(
                "checkpoint {epoch} is not held by node {}",
                self.me
            ))
        })?;
        let img = image::Image::decode(bytes).map_err(DsmError::Invalid)?;
        let homes = self.homes.read().unwrap();
        if img.homes.len() > homes.len() || homes[..img.homes.len()] != img.homes[..] {
            return Err(DsmError::Mismatch(format!(
                "checkpoint {epoch} of node {} has other allocations than the job now",
                self.me
            )));
        }
        let mut local = self.local.lock().unwrap();
        for (i, &p) in img.pages.iter().enumerate() {
            // SAFETY: between the rollback's barriers no other thread writes pages: the
            // receive thread applies no diffs (nobody flushes) and the application waits.
            unsafe { self.region.page_mut(p) }.copy_from_slice(img.page(i));
        }
        for p in img.homes.len()..homes.len() {
            if homes[p] == self.me {
                // SAFETY: as above.
                unsafe { self.region.page_mut(p as u32) }.fill(0);
            }
        }
        let mut invalid = Vec::new();
        for p in 0..homes.len() {
            if homes[p] == self.me {
                local.state[p] = State::Clean;
            } else {
                local.state[p] = State::Invalid;
                invalid.push(p as u32);
            }
        }
        local.twins.clear();
        local.dirty.clear();
        local.since_barrier.clear();
        local.since_acquire.clear();
        let home: Vec<u32> = (0..homes.len() as u32)
            .filter(|&p| homes[p as usize] == self.me)
            .collect();
        for run in runs(&invalid) {
            self.region.protect(run.0, run.1, Access::None)?;
        }
        for run in runs(&home) {
            self.region.protect(run.0, run.1, Access::Read)?;
        }
        self.track_homes(&mut local, &home)?;
        // What the application wrote before the rollback is gone: so are its notices.
        self.written_homes()?;
        Ok(img.private.to_vec())
    }

    /// Makes home `pages` writable with their writes tracked (when the tracker is there).
    fn track_homes(&self, local: &mut Local, pages: &[u32]) -> Result<()> {
        let Some(t) = &self.homes_written else {
            return Ok(());
        };
        let mut t = t.lock().unwrap();
        let ps = self.region.page;
        for run in runs(pages) {
            self.region.protect(run.0, run.1, Access::Write)?;
            let start = self.region.base + run.0 as usize * ps;
            t.track(PageRange::from_ptr(start as *const u8, run.1 as usize * ps))
                .map_err(|e| DsmError::Io {
                    what: "track home pages",
                    source: std::io::Error::other(e.to_string()),
                })?;
            for p in run.0..run.0 + run.1 {
                local.state[p as usize] = State::Tracked;
            }
        }
        Ok(())
    }

    /// The home pages the application wrote since the last call (none without a tracker).
    fn written_homes(&self) -> Result<Vec<u32>> {
        let Some(t) = &self.homes_written else {
            return Ok(Vec::new());
        };
        let ranges = t.lock().unwrap().scan().map_err(|e| DsmError::Io {
            what: "scan the written home pages",
            source: std::io::Error::other(e.to_string()),
        })?;
        let (base, ps) = (self.region.base, self.region.page);
        Ok(ranges
            .iter()
            .flat_map(|r| ((r.start - base) / ps) as u32..((r.end - base) / ps) as u32)
            .collect())
    }

    /// Drops this node's copies of `pages` (those homed elsewhere).
    fn invalidate(&self, pages: impl Iterator<Item = u32>) -> Result<()> {
        let homes = self.homes.read().unwrap();
        let mut local = self.local.lock().unwrap();
        let mut drop: Vec<u32> = pages
            .filter(|&p| (p as usize) < homes.len() && homes[p as usize] != self.me)
            .filter(|&p| local.state[p as usize] != State::Invalid)
            .collect();
        drop.sort_unstable();
        drop.dedup();
        for &p in &drop {
            // Cannot be dirty: every caller flushed first and holds the application's lock.
            debug_assert_ne!(local.state[p as usize], State::Dirty);
            local.state[p as usize] = State::Invalid;
        }
        for run in runs(&drop) {
            self.region.protect(run.0, run.1, Access::None)?;
        }
        Ok(())
    }

    /// Makes `page` usable for a read (or a write): fetches it from its home if needed, keeps a
    /// twin before the first write of a cached page.
    fn serve_fault(&self, page: u32, write: bool) -> Result<()> {
        let home = self.homes.read().unwrap()[page as usize];
        let mut local = self.local.lock().unwrap();
        if local.state[page as usize] == State::Invalid {
            self.send(
                home,
                Msg::PageGet {
                    page,
                    reply: ReplyTo::Fault,
                },
                "page fetch",
            )?;
            match self.reply(self.mine.flt, &[home], "page fetch")? {
                Msg::Page { page: p, data } if p == page && data.len() == self.region.page => {
                    // SAFETY: only this thread writes cached (non-home) pages through the
                    // library's view, and it holds the local lock.
                    unsafe { self.region.page_mut(page) }.copy_from_slice(&data);
                }
                Msg::Refuse { text } => return Err(DsmError::Mismatch(text)),
                m => return Err(unexpected(home, &m, "a page")),
            }
            local.state[page as usize] = State::Clean;
            if !write {
                self.region.protect(page, 1, Access::Read)?;
                return Ok(());
            }
        }
        if write && local.state[page as usize] == State::Clean {
            if home != self.me {
                let twin = self.region.page_copy(page);
                local.twins.insert(page, twin);
            }
            local.state[page as usize] = State::Dirty;
            local.dirty.insert(page);
            self.region.protect(page, 1, Access::Write)?;
        }
        Ok(())
    }
}

fn fault_thread(inner: Arc<Inner>, pipe: i32) {
    loop {
        let mut p = 0usize;
        // SAFETY: reading 8 bytes into a local from our own pipe.
        let n = unsafe { libc::read(pipe, &mut p as *mut usize as *mut libc::c_void, 8) };
        if n != 8 || p == 0 {
            break;
        }
        // SAFETY: the handler wrote the address of a Fault on its stack and sleeps until we
        // complete it, so the value is live until `complete`.
        let f = unsafe { &*(p as *const Fault) };
        let r = inner.serve_fault(f.page, f.write);
        if let Err(e) = &r {
            tracing::error!(
                node = inner.me,
                page = f.page,
                "a shared page cannot be made usable: {e}"
            );
            eprintln!("kioku-dsm: node {}: page {}: {e}", inner.me, f.page);
        }
        fault::complete(f, r.is_ok());
    }
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(pipe) };
}

/// The barrier manager's state (node 0).
struct Barrier {
    epoch: u64,
    arrived: Vec<Option<(BarrierKind, u64, Vec<u32>)>>,
}

/// A lock manager's state of one lock.
#[derive(Default)]
struct Lock {
    holder: Option<u32>,
    waiting: VecDeque<(u32, u64)>,
    notices: Vec<(u64, u32)>,
}

fn receive_thread(inner: Arc<Inner>) {
    let mut bar = Barrier {
        epoch: 0,
        arrived: vec![None; inner.n as usize],
    };
    let mut locks: HashMap<u32, Lock> = HashMap::new();
    // What went wrong with an image being received, per sender, reported at its end.
    let mut image_trouble: HashMap<u32, String> = HashMap::new();
    loop {
        let b = match inner.mcapi.msg_recv(inner.mine.req) {
            Ok(b) => b,
            Err(McapiError::Timeout) => continue,
            Err(e) => {
                tracing::error!(node = inner.me, "the receive thread stops: {e}");
                return;
            }
        };
        // Checkpoint images are the bulk: written into their context without a copy.
        if let Some((from, epoch, offset, data)) = crate::wire::decode_image_chunk(&b) {
            if from < inner.n {
                inner.image_chunk(&mut image_trouble, from, epoch, offset, data);
            }
            continue;
        }
        let (from, m) = match Msg::decode(&b) {
            Ok((from, m)) if from < inner.n => (from, m),
            Ok((from, _)) => {
                tracing::warn!(
                    "a DSM message claims to come from node {from}, which does not exist"
                );
                continue;
            }
            Err(e) => {
                tracing::warn!("a malformed DSM message was dropped: {e}");
                continue;
            }
        };
        match m {
            Msg::Stop if from == inner.me => return,
            Msg::PageGet { page, reply } => {
                let to = match reply {
                    ReplyTo::Compute => inner.peers[from as usize].ctl,
                    ReplyTo::Fault => inner.peers[from as usize].flt,
                };
                let homed = inner.homes.read().unwrap().get(page as usize) == Some(&inner.me);
                let m = if homed {
                    Msg::Page {
                        page,
                        data: inner.region.page_copy(page),
                    }
                } else {
                    Msg::Refuse {
                        text: format!(
                            "node {from} asked node {} for page {page}, which is not homed there",
                            inner.me
                        ),
                    }
                };
                inner.answer(to, m);
            }
            Msg::Diffs { body } => {
                tracing::debug!(node = inner.me, from, bytes = body.len(), "diffs");
                let m = {
                    let homes = inner.homes.read().unwrap();
                    let ps = inner.region.page;
                    match diff::apply(
                        &body,
                        ps,
                        |p| homes.get(p as usize) == Some(&inner.me),
                        |p, off, bytes| {
                            // SAFETY: only the receive thread writes home pages through the
                            // library's view.
                            let page = unsafe { inner.region.page_mut(p) };
                            page[off..off + bytes.len()].copy_from_slice(bytes)
                        },
                    ) {
                        Ok(_) => Msg::DiffAck,
                        Err(e) => Msg::Refuse {
                            text: format!("node {} refused diffs from node {from}: {e}", inner.me),
                        },
                    }
                };
                inner.answer(inner.peers[from as usize].ctl, m);
            }
            Msg::Arrive {
                kind,
                epoch,
                check,
                notices,
            } => inner.arrive(&mut bar, from, kind, epoch, check, notices),
            Msg::Acquire { lock, epoch } => {
                let l = locks.entry(lock).or_default();
                if l.holder.is_none() {
                    l.holder = Some(from);
                    inner.grant(l, lock, from, epoch);
                } else {
                    l.waiting.push_back((from, epoch));
                }
            }
            Msg::Release {
                lock,
                epoch,
                notices,
            } => {
                let l = locks.entry(lock).or_default();
                if l.holder != Some(from) {
                    tracing::warn!("node {from} released lock {lock}, which it does not hold");
                    continue;
                }
                l.notices.extend(notices.into_iter().map(|p| (epoch, p)));
                l.holder = None;
                if let Some((next, e)) = l.waiting.pop_front() {
                    l.holder = Some(next);
                    inner.grant(l, lock, next, e);
                }
            }
            Msg::ImageChunk {
                epoch,
                offset,
                data,
            } => inner.image_chunk(&mut image_trouble, from, epoch, offset, &data),
            Msg::ImageEnd { epoch, len, crc } => {
                let r = match image_trouble.remove(&from) {
                    Some(e) => Err(e),
                    None => inner
                        .buddy_of(from)
                        .and_then(|()| inner.held.lock().unwrap().end(epoch, len, crc)),
                };
                let m = match r {
                    Ok(()) => Msg::ImageHeld { epoch },
                    Err(e) => Msg::Refuse {
                        text: format!(
                            "node {} could not keep node {from}'s checkpoint: {e}",
                            inner.me
                        ),
                    },
                };
                inner.answer(inner.peers[from as usize].ctl, m);
            }
            m => tracing::warn!("node {from} sent {m:?} to the request endpoint; dropped"),
        }
    }
}

impl Inner {
    /// Stores bytes of `from`'s image; what goes wrong is reported at the image's end.
    fn image_chunk(
        &self,
        trouble: &mut HashMap<u32, String>,
        from: u32,
        epoch: u64,
        offset: u64,
        data: &[u8],
    ) {
        let r = self.buddy_of(from).and_then(|()| {
            let mut held = self.held.lock().unwrap();
            if offset == 0 {
                held.begin(epoch)?;
            }
            held.write(epoch, offset, data, self.max_image())
        });
        if let Err(e) = r {
            trouble.insert(from, e);
        }
    }

    /// Whether this node is `from`'s buddy (the holder of its checkpoints).
    fn buddy_of(&self, from: u32) -> std::result::Result<(), String> {
        if (from + 1) % self.n == self.me {
            Ok(())
        } else {
            Err(format!("node {} is not node {from}'s buddy", self.me))
        }
    }

    /// The largest image a node can send: every page of the range and the largest private
    /// state.
    fn max_image(&self) -> usize {
        let pages = self.region.pages() as usize;
        64 + pages * (4 + self.region.page) + MAX_PRIVATE
    }

    fn answer(&self, to: EndpointId, m: Msg) {
        if let Err(e) = self.send_bytes(self.mine.req, u32::from(to.node), to, &m.encode(self.me)) {
            tracing::warn!(node = self.me, "an answer to {to} was not delivered: {e}");
        }
    }

    fn grant(&self, l: &mut Lock, lock: u32, to: u32, epoch: u64) {
        // Notices older than the acquirer's barrier epoch were covered by that barrier, and no
        // node can still be before it.
        l.notices.retain(|&(e, _)| e >= epoch);
        let mut notices: Vec<u32> = l.notices.iter().map(|&(_, p)| p).collect();
        notices.sort_unstable();
        notices.dedup();
        self.answer(self.peers[to as usize].ctl, Msg::Grant { lock, notices });
    }

    fn arrive(
        &self,
        bar: &mut Barrier,
        from: u32,
        kind: BarrierKind,
        epoch: u64,
        check: u64,
        notices: Vec<u32>,
    ) {
        if self.me != 0 {
            tracing::warn!(
                "node {from} sent a barrier arrival to node {}, not the manager",
                self.me
            );
            return;
        }
        if epoch != bar.epoch || bar.arrived[from as usize].is_some() {
            let text = format!(
                "node {from} arrived at barrier {epoch} while the job is at barrier {}: the nodes call barrier a different number of times",
                bar.epoch
            );
            self.answer(self.peers[from as usize].ctl, Msg::Refuse { text });
            return;
        }
        tracing::debug!(from, ?kind, epoch, "barrier arrival");
        bar.arrived[from as usize] = Some((kind, check, notices));
        if bar.arrived.iter().any(|a| a.is_none()) {
            return;
        }
        let all: Vec<(BarrierKind, u64, Vec<u32>)> =
            bar.arrived.iter_mut().map(|a| a.take().unwrap()).collect();
        let (k0, c0) = (all[0].0, all[0].1);
        let mut problem = None;
        for (i, a) in all.iter().enumerate() {
            if a.0 != k0 {
                problem = Some(format!(
                    "at barrier {epoch} node 0 called {} but node {i} called {}: the nodes call barrier a different number of times",
                    kind_name(k0),
                    kind_name(a.0)
                ));
                break;
            }
            if a.1 != c0 {
                problem = Some(format!(
                    "at barrier {epoch} node {i}'s state differs from node 0's ({} against {})",
                    a.1, c0
                ));
                break;
            }
        }
        bar.epoch += 1;
        let m = match problem {
            Some(text) => Msg::Refuse { text },
            None => Msg::Depart {
                epoch,
                notices: all
                    .into_iter()
                    .enumerate()
                    .map(|(i, a)| (i as u32, a.2))
                    .collect(),
            },
        };
        // The others first: this node's application may exit as soon as it has its answer.
        for p in (0..self.n).filter(|&p| p != self.me).chain([self.me]) {
            self.answer(self.peers[p as usize].ctl, m.clone());
        }
    }
}

fn kind_name(k: BarrierKind) -> &'static str {
    match k {
        BarrierKind::Init => "init",
        BarrierKind::Barrier => "barrier",
        BarrierKind::Finalize => "finalize",
        BarrierKind::Checkpoint => "checkpoint",
        BarrierKind::Rollback => "rollback",
    }
}

fn unexpected(from: u32, m: &Msg, wanted: &str) -> DsmError {
    DsmError::Protocol {
        from,
        what: format!("{m:?} where {wanted} was expected"),
    }
}

/// Sorted pages as (first, count) runs of consecutive pages.
fn runs(pages: &[u32]) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((s, c)) if *s + *c == p => *c += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

fn digest(xs: &[u64]) -> u64 {
    // FNV-1a over the little-endian bytes: only needs to tell different inputs apart.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in xs {
        for b in x.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn digest32(xs: &[u32]) -> u64 {
    digest(&xs.iter().map(|&x| x as u64).collect::<Vec<_>>())
}
