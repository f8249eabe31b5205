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
use crate::recovery::{self, Report};
use crate::region::{Access, Region};
use crate::wire::{BarrierKind, Msg, ReplyTo};
use kioku_mcapi::{EndpointId, McapiError, Node, PeerLoss, PeerState, Topology};
use kioku_track::{BackendKind, PageRange, PageTracker, Tracker};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
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
/// The protocol's version (2: every message carries its recovery generation).
const VERSION: u64 = 2;
/// Checkpoint images travel in messages of this size: a quarter of MCAPI's default shared-
/// memory ring, so that the buddy drains one while the next is written.
const IMAGE_CHUNK: usize = (256 << 10) - 64;
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
    /// This process's MCAPI node id: 0..N-1 are the DSM's nodes, N..N+S-1 its standbys.
    pub node: u32,
    /// The job's MCAPI topology (its node count is N + S).
    pub topology: Topology,
    /// S, the number of standby nodes (started with the job, idle until one takes over a lost
    /// node). Without standbys a lost node is an error.
    pub standbys: u32,
    /// Take a checkpoint (with an empty private state) every this many barriers (0: only
    /// when `checkpoint` is called).
    pub checkpoint_every: u64,
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
            standbys: 0,
            checkpoint_every: 0,
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
        if let Some(s) = env_parse("KIOKU_DSM_STANDBYS", |v| v.parse::<u32>().ok())? {
            c.standbys = s;
        }
        if let Some(k) = env_parse("KIOKU_DSM_CHECKPOINT_EVERY", |v| v.parse::<u64>().ok())? {
            c.checkpoint_every = k;
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
    /// This node's DSM id; a standby's is `IDLE` until it takes over.
    me: AtomicU32,
    /// This process's MCAPI node id.
    id: u32,
    /// The number of DSM nodes (N).
    n: u32,
    standbys: u32,
    region: Region,
    mine: Ends,
    /// The endpoints of every MCAPI node (the DSM's and the standbys).
    peers: Vec<Ends>,
    /// The MCAPI node that owns each DSM id; changes when a standby takes over.
    owners: RwLock<Vec<u32>>,
    /// The recovery generation the receive thread works in (carried by its answers).
    gen: AtomicU64,
    /// The generation the application works in (carried by its requests): behind `gen`
    /// between the receive thread's taking a recovery plan and the application's carrying it
    /// out, so that nothing the application sends meanwhile reaches a restored node.
    app_gen: AtomicU64,
    /// Set by the receive or fault thread when this node must recover at its application's
    /// next DSM call.
    alarm: AtomicBool,
    /// What the receive thread got from the recovery's leader for the application.
    verdict: Mutex<Option<Verdict>>,
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
    /// The generation the application last completed a recovery in.
    gen: u64,
    /// What a recovery rolled back to, until the application takes it.
    resume: Option<(u64, Vec<u8>)>,
    /// Pages of allocations a standby rebuilt from an image that the application has not
    /// allocated (again) yet: its `alloc` calls replay them.
    replay: usize,
    /// Barriers since the last checkpoint (for `checkpoint_every`).
    since_ckpt: u64,
    /// The private state of the checkpoints taken every `checkpoint_every` barriers.
    private: Vec<u8>,
    /// Set once the job cannot go on (a failed recovery): every later call gives it.
    broken: Option<String>,
}

/// The recovery's outcome for one node, as its leader sent it.
#[derive(Clone, Debug)]
enum Verdict {
    Plan {
        gen: u64,
        checkpoint: u64,
        epoch: u64,
        handover: Vec<u32>,
    },
    Fail(String),
    Dismissed,
}

/// A standby's DSM id before it takes one over.
const IDLE: u32 = u32::MAX;

/// A running DSM node. One per process.
pub struct Dsm {
    inner: Arc<Inner>,
    ctl: Mutex<Ctl>,
    checkpoint_every: u64,
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
        keep_message_memory();
        let all = cfg.topology.nodes;
        if cfg.standbys >= all {
            return Err(DsmError::Invalid(format!(
                "{} standbys in a topology of {all} nodes: at least one must be a DSM node",
                cfg.standbys
            )));
        }
        let n = all - cfg.standbys;
        let id = cfg.node;
        let me = if id < n { id } else { IDLE };
        let job = cfg.topology.job.clone();
        let mcapi = Node::initialize(cfg.topology.domain, id, cfg.topology.clone())
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
        let mut peers = Vec::with_capacity(all as usize);
        let domain = cfg.topology.domain;
        let wait = Some(cfg.start_timeout);
        let secs = cfg.start_timeout.as_secs();
        for peer in 0..all {
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
            me: AtomicU32::new(me),
            id,
            n,
            standbys: cfg.standbys,
            region,
            mine,
            peers,
            owners: RwLock::new((0..n).collect()),
            gen: AtomicU64::new(0),
            app_gen: AtomicU64::new(0),
            alarm: AtomicBool::new(false),
            verdict: Mutex::new(None),
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
                            node = id,
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
            .name(format!("dsm-fault{id}"))
            .spawn(move || fault_thread(fi, pipe_r))
            .map_err(|e| DsmError::Io {
                what: "spawn the fault thread",
                source: e,
            })?;
        let ri = inner.clone();
        let recv = std::thread::Builder::new()
            .name(format!("dsm-recv{id}"))
            .spawn(move || receive_thread(ri))
            .map_err(|e| DsmError::Io {
                what: "spawn the receive thread",
                source: e,
            })?;
        fault::install(cfg.base, cfg.range, inner.region.page, id, pipe_w).map_err(|e| {
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
                gen: 0,
                resume: None,
                private: Vec::new(),
                replay: 0,
                since_ckpt: 0,
                broken: None,
            }),
            checkpoint_every: cfg.checkpoint_every,
            recv: Some(recv),
            fault: Some(fault),
            pipe_w,
        };
        if me == IDLE {
            dsm.stand_by()?;
            return Ok(dsm);
        }
        let check = digest(&[
            VERSION,
            dsm.inner.region.page as u64,
            cfg.base as u64,
            cfg.range as u64,
            n as u64,
            cfg.standbys as u64,
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

    /// This node's DSM id (for a standby, the id it took over).
    pub fn node(&self) -> u32 {
        self.inner.me()
    }

    /// After a recovery (a DSM call that returned `DsmError::RolledBack`, or `init` of a
    /// standby that took over a lost node): the checkpoint's epoch and this node's private
    /// state of then, once. The application goes on from that state.
    pub fn take_resume(&self) -> Option<(u64, Vec<u8>)> {
        self.ctl.lock().unwrap().resume.take()
    }

    /// The length of the private state `take_resume` would give.
    pub fn resume_len(&self) -> Option<usize> {
        self.ctl.lock().unwrap().resume.as_ref().map(|r| r.1.len())
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
        self.call(|ctl| {
        if ctl.replay > 0 {
            // A standby that took over: the job made this allocation before the checkpoint.
            let homes = self.inner.homes.read().unwrap();
            let first = homes.len() - ctl.replay;
            if count > ctl.replay || homes[first..first + count] != homes_of[..] {
                return Err(DsmError::Mismatch(format!(
                    "node {} took over after a failure and allocates {count} pages where the job allocated {} before its checkpoint: the nodes must allocate the same way",
                    self.inner.me(),
                    ctl.replay
                )));
            }
            ctl.replay -= count;
            ctl.allocs = digest(&[ctl.allocs, count as u64, digest32(&homes_of)]);
            return Ok((self.inner.region.base + first * page) as *mut u8);
        }
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
                .filter(|&p| homes[p] == self.inner.me())
                .map(|p| p as u32)
                .collect();
            self.inner.track_homes(&mut local, &mine)?;
            fault::TOP.store((first + count) as u32, Ordering::Release);
        }
        ctl.allocs = digest(&[ctl.allocs, count as u64, digest32(&homes_of)]);
        let check = ctl.allocs;
        self.barrier_locked(ctl, BarrierKind::Barrier, check)
            .map_err(|e| match e {
                DsmError::Mismatch(m) => DsmError::Mismatch(format!(
                    "{m} (the nodes allocated different shared memory: alloc is collective)"
                )),
                e => e,
            })?;
        Ok((self.inner.region.base + first * page) as *mut u8)
        })
    }

    /// Waits for every node; afterwards each node sees every write made before the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.call(|ctl| {
            let check = ctl.allocs;
            self.barrier_locked(ctl, BarrierKind::Barrier, check)?;
            if self.checkpoint_every > 0 {
                ctl.since_ckpt += 1;
                if ctl.since_ckpt >= self.checkpoint_every {
                    let private = ctl.private.clone();
                    self.checkpoint_locked(ctl, &private)?;
                }
            }
            Ok(())
        })
    }

    /// The private state the checkpoints taken every `checkpoint_every` barriers carry (the
    /// application's loop counters and the like; empty until set).
    pub fn set_private(&self, private: &[u8]) -> Result<()> {
        if private.len() > MAX_PRIVATE {
            return Err(DsmError::Invalid(format!(
                "a private state of {} bytes is larger than the {MAX_PRIVATE} a checkpoint takes",
                private.len()
            )));
        }
        let mut ctl = self.ctl.lock().unwrap();
        ctl.private.clear();
        ctl.private.extend_from_slice(private);
        Ok(())
    }

    /// Takes lock `lock` (any number; its manager is node `lock mod N`). Afterwards this node
    /// sees every write made under the lock by its previous holders.
    pub fn lock(&self, lock: u32) -> Result<()> {
        self.call(|ctl| self.lock_locked(ctl, lock))
    }

    fn lock_locked(&self, ctl: &mut Ctl, lock: u32) -> Result<()> {
        failpoint("lock");
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
        self.call(|ctl| self.unlock_locked(ctl, lock))
    }

    fn unlock_locked(&self, ctl: &mut Ctl, lock: u32) -> Result<()> {
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
        self.call(|ctl| self.checkpoint_locked(ctl, private))
    }

    fn checkpoint_locked(&self, ctl: &mut Ctl, private: &[u8]) -> Result<u64> {
        ctl.since_ckpt = 0;
        let check = ctl.allocs;
        let t0 = std::time::Instant::now();
        self.barrier_locked(ctl, BarrierKind::Checkpoint, check)?;
        let t1 = t0.elapsed();
        let epoch = ctl.epoch;
        let inner = &self.inner;
        let mut img = inner.own.lock().unwrap().take_spare();
        {
            let homes = inner.homes.read().unwrap();
            let mine: Vec<u32> = (0..homes.len() as u32)
                .filter(|&p| homes[p as usize] == inner.me())
                .collect();
            image::encode_into(
                &mut img,
                inner.me(),
                epoch,
                &homes,
                &mine,
                inner.region.page,
                |p, dst| inner.region.copy_page_into(p, dst),
                private,
            );
        }
        let t2 = t0.elapsed();
        let mut t3 = t2;
        let crc = crc32c::crc32c(&img);
        if inner.n > 1 {
            let buddy = (inner.me() + 1) % inner.n;
            inner
                .send_image(inner.mine.ctl, buddy, false, epoch, &img, crc)
                .map_err(|e| DsmError::mcapi("checkpoint transfer", e))?;
            t3 = t0.elapsed();
            failpoint("checkpoint-sent");
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
            .put_with_crc(epoch, img, crc)
            .map_err(DsmError::Invalid)?;
        let t4 = t0.elapsed();
        failpoint("checkpoint-stored");
        self.barrier_locked(ctl, BarrierKind::Checkpoint, check)?;
        tracing::debug!(
            node = inner.me(),
            epoch,
            barrier = ?t1,
            image = ?t2,
            sent = ?t3,
            held = ?t4,
            committed = ?t0.elapsed(),
            "checkpoint committed"
        );
        Ok(epoch)
    }

    /// Collective: every node returns to the newest checkpoint — home pages as they were then,
    /// cached copies dropped, writes since discarded — and gets back its private state of then
    /// and the checkpoint's epoch. Allocations made since keep their addresses; their pages
    /// are zero again. Locks must not be held.
    pub fn rollback(&self) -> Result<(u64, Vec<u8>)> {
        self.call(|ctl| self.rollback_locked(ctl))
    }

    fn rollback_locked(&self, ctl: &mut Ctl) -> Result<(u64, Vec<u8>)> {
        let inner = &self.inner;
        let newest = inner.own.lock().unwrap().held().last().map(|h| h.0);
        let Some(epoch) = newest else {
            return Err(DsmError::Invalid(
                "there is no checkpoint to roll back to: call checkpoint first".into(),
            ));
        };
        inner.discard_dirty()?;
        let check = digest(&[ctl.allocs, epoch]);
        self.barrier_locked(ctl, BarrierKind::Rollback, check)
            .map_err(|e| match e {
                DsmError::Mismatch(m) => {
                    DsmError::Mismatch(format!("{m} (the nodes' newest checkpoints differ)"))
                }
                e => e,
            })?;
        let private = inner.restore(epoch)?;
        // Nobody fetches a page before its home has restored it.
        self.barrier_locked(ctl, BarrierKind::Rollback, check)?;
        tracing::info!(
            node = inner.me(),
            epoch,
            "rolled back to checkpoint {epoch}"
        );
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
        let me = self.inner.me();
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

    /// Runs one DSM call of the application. With standbys, a lost node (seen before or
    /// during the call) starts a recovery, and the call returns `RolledBack` once every node
    /// is back at the same checkpoint.
    fn call<T>(&self, f: impl FnOnce(&mut Ctl) -> Result<T>) -> Result<T> {
        let mut ctl = self.ctl.lock().unwrap();
        if let Some(b) = &ctl.broken {
            return Err(DsmError::Unrecoverable(b.clone()));
        }
        let inner = &self.inner;
        if inner.standbys == 0 {
            return f(&mut ctl);
        }
        if inner.alarm.load(Ordering::SeqCst) || inner.gen() != ctl.gen {
            return self.recover(&mut ctl);
        }
        match f(&mut ctl) {
            Err(e) if e.starts_recovery() => {
                tracing::warn!(node = inner.me(), "recovering: {e}");
                self.recover(&mut ctl)
            }
            r => r,
        }
    }

    /// Recovers (as often as failures during the recovery need): returns `RolledBack` or why
    /// the job cannot go on (and then every later call says so).
    fn recover<T>(&self, ctl: &mut Ctl) -> Result<T> {
        let started = std::time::Instant::now();
        loop {
            let verdict = match self.join_recovery(ctl) {
                Ok(Some(v)) => v,
                Ok(None) => continue,
                Err(e) => return Err(self.broken(ctl, e)),
            };
            match self.apply_verdict(ctl, verdict) {
                Ok(Some(epoch)) => {
                    tracing::info!(
                        node = self.inner.me(),
                        epoch,
                        ms = started.elapsed().as_millis() as u64,
                        "recovered: rolled back to checkpoint {epoch}"
                    );
                    return Err(DsmError::RolledBack { epoch });
                }
                Ok(None) => continue,
                Err(e) => return Err(self.broken(ctl, e)),
            }
        }
    }

    fn broken(&self, ctl: &mut Ctl, e: DsmError) -> DsmError {
        let text = match e {
            DsmError::Unrecoverable(t) => t,
            e => e.to_string(),
        };
        tracing::error!(node = self.inner.me(), "the job cannot recover: {text}");
        ctl.broken = Some(text.clone());
        DsmError::Unrecoverable(text)
    }

    /// Reports to the recovery's leader (the lowest DSM id whose owner lives) and waits for its
    /// verdict; `None` when the leader was lost meanwhile (join the next one).
    fn join_recovery(&self, ctl: &mut Ctl) -> Result<Option<Verdict>> {
        let inner = &self.inner;
        inner.alarm.store(false, Ordering::SeqCst);
        let owners = inner.owners.read().unwrap().clone();
        let lost: Vec<u32> = owners
            .iter()
            .copied()
            .filter(|&m| matches!(inner.mcapi.peer_state(m), Ok(PeerState::Lost(_))))
            .collect();
        let Some(leader) = (0..inner.n).find(|&d| !lost.contains(&owners[d as usize])) else {
            return Err(DsmError::Unrecoverable("every node was lost".into()));
        };
        let join = Msg::Join {
            id: inner.id,
            epoch: ctl.epoch,
            owners: owners.clone(),
            lost: lost.clone(),
            own: inner
                .own
                .lock()
                .unwrap()
                .held()
                .iter()
                .map(|h| h.0)
                .collect(),
            held: inner
                .held
                .lock()
                .unwrap()
                .held()
                .iter()
                .map(|h| h.0)
                .collect(),
        };
        tracing::info!(node = inner.me(), leader, ?lost, "joining the recovery");
        let bytes = join.encode(inner.me(), inner.gen());
        let leader_id = owners[leader as usize];
        if inner
            .send_bytes(
                inner.mine.ctl,
                leader_id,
                inner.peers[leader_id as usize].req,
                &bytes,
            )
            .is_err()
        {
            return Ok(None);
        }
        failpoint("recovery-joined");
        self.await_verdict(ctl, Some(leader_id))
    }

    /// Waits for a verdict newer than the application's generation; `None` when `leader` (an
    /// MCAPI node) is lost meanwhile.
    fn await_verdict(&self, ctl: &mut Ctl, leader: Option<u32>) -> Result<Option<Verdict>> {
        let inner = &self.inner;
        loop {
            {
                let mut v = inner.verdict.lock().unwrap();
                match v.take() {
                    Some(Verdict::Plan { gen, .. }) if gen <= ctl.gen => {}
                    Some(x) => return Ok(Some(x)),
                    None => {}
                }
            }
            match inner.mcapi.msg_recv(inner.mine.ctl) {
                Ok(_) | Err(McapiError::Timeout) => {}
                Err(e) => return Err(DsmError::mcapi("recovery", e)),
            }
            match leader {
                Some(l) => {
                    if matches!(inner.mcapi.peer_state(l), Ok(PeerState::Lost(_))) {
                        return Ok(None);
                    }
                }
                None => {
                    // An idle standby: the job is over when every DSM node of the start is.
                    let gone = (0..inner.n)
                        .all(|m| matches!(inner.mcapi.peer_state(m), Ok(PeerState::Lost(_))));
                    if gone {
                        return Ok(Some(Verdict::Dismissed));
                    }
                }
            }
        }
    }

    /// Carries out the leader's verdict: gets the image from the buddy if this node needs it,
    /// restores the checkpoint, and meets the others at a barrier of the new generation.
    /// `Some(epoch)` when done, `None` when a failure during it needs another round.
    fn apply_verdict(&self, ctl: &mut Ctl, v: Verdict) -> Result<Option<u64>> {
        let inner = &self.inner;
        let (gen, checkpoint, epoch, handover) = match v {
            Verdict::Plan {
                gen,
                checkpoint,
                epoch,
                handover,
            } => (gen, checkpoint, epoch, handover),
            Verdict::Fail(text) => return Err(DsmError::Unrecoverable(text)),
            Verdict::Dismissed => return Err(DsmError::Dismissed),
        };
        // The receive thread has switched to the plan's owners and generation.
        ctl.gen = gen;
        inner.app_gen.store(gen, Ordering::SeqCst);
        ctl.held.clear();
        ctl.epoch = epoch;
        inner.alarm.store(false, Ordering::SeqCst);
        let me = inner.me();
        if handover.contains(&me) {
            let buddy = (me + 1) % inner.n;
            let buddy_id = inner.owner(buddy);
            loop {
                if inner.own.lock().unwrap().get(checkpoint).is_some() {
                    break;
                }
                if let Some(Verdict::Fail(t)) = inner.verdict.lock().unwrap().clone() {
                    return Err(DsmError::Unrecoverable(t));
                }
                if matches!(inner.mcapi.peer_state(buddy_id), Ok(PeerState::Lost(_)))
                    || inner.gen() != gen
                {
                    return Ok(None);
                }
                match inner.mcapi.msg_recv(inner.mine.ctl) {
                    Ok(_) | Err(McapiError::Timeout) => {}
                    Err(e) => return Err(DsmError::mcapi("recovery", e)),
                }
            }
        }
        let private = match inner.restore_after_failure(checkpoint, &mut ctl.replay) {
            Ok(p) => p,
            Err(e) => return Err(DsmError::Unrecoverable(e.to_string())),
        };
        failpoint("recovery-restored");
        let check = digest(&[checkpoint, digest32(&inner.homes.read().unwrap())]);
        match self.barrier_locked(ctl, BarrierKind::Rollback, check) {
            Ok(()) => {}
            Err(e) if e.starts_recovery() => return Ok(None),
            Err(DsmError::Mismatch(m)) => {
                return Err(DsmError::Unrecoverable(format!(
                    "{m} (after rolling back to checkpoint {checkpoint})"
                )))
            }
            Err(e) => return Err(e),
        }
        ctl.since_ckpt = 0;
        ctl.resume = Some((checkpoint, private));
        Ok(Some(checkpoint))
    }

    /// A standby's start: idle until the recovery's leader gives it a lost node's DSM id (then
    /// it rolls back with the others and `init` returns, `take_resume` giving the state), or
    /// the job ends (`Dismissed`).
    fn stand_by(&self) -> Result<()> {
        let mut ctl = self.ctl.lock().unwrap();
        tracing::info!(id = self.inner.id, "standing by");
        let v = self
            .await_verdict(&mut ctl, None)?
            .unwrap_or(Verdict::Dismissed);
        if let Verdict::Fail(_) = v {
            return Err(DsmError::Dismissed);
        }
        match self.apply_verdict(&mut ctl, v) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => match self.recover::<()>(&mut ctl) {
                Err(DsmError::RolledBack { .. }) => Ok(()),
                Err(e) => Err(e),
                Ok(()) => unreachable!("recover returns RolledBack or an error"),
            },
            Err(e) => Err(e),
        }
    }

    fn meet(&self, kind: BarrierKind, check: u64) -> Result<()> {
        let mut ctl = self.ctl.lock().unwrap();
        self.barrier_locked(&mut ctl, kind, check)
    }

    fn barrier_locked(&self, ctl: &mut Ctl, kind: BarrierKind, check: u64) -> Result<()> {
        failpoint("barrier");
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
        let watch: Vec<u32> = if inner.me() == 0 {
            (0..inner.n).collect()
        } else {
            vec![0]
        };
        match inner.reply(inner.mine.ctl, &watch, "barrier")? {
            Msg::Depart { epoch, notices } if epoch == ctl.epoch => {
                tracing::debug!(node = inner.me(), ?kind, epoch, "barrier departure");
                ctl.epoch += 1;
                let me = inner.me();
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
            if home == inner.me() {
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
                tracing::debug!(node = inner.me(), home, bytes = body.len(), "flush");
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
            &Msg::Stop.encode(inner.me(), inner.gen()),
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
    fn me(&self) -> u32 {
        self.me.load(Ordering::SeqCst)
    }

    fn gen(&self) -> u64 {
        self.gen.load(Ordering::SeqCst)
    }

    fn app_gen(&self) -> u64 {
        self.app_gen.load(Ordering::SeqCst)
    }

    /// The MCAPI node that owns DSM id `d`.
    fn owner(&self, d: u32) -> u32 {
        self.owners.read().unwrap()[d as usize]
    }

    /// The endpoints of DSM node `d`.
    fn ends(&self, d: u32) -> Ends {
        self.peers[self.owner(d) as usize]
    }

    /// A request of the application (or the fault thread), in the application's generation.
    fn send(&self, to: u32, m: Msg, what: &'static str) -> Result<()> {
        let bytes = m.encode(self.me(), self.app_gen());
        self.send_bytes(self.mine.ctl, self.owner(to), self.ends(to).req, &bytes)
            .map_err(|e| self.named(DsmError::mcapi(what, e)))
    }

    /// Sends image `img` of `epoch` to DSM node `to`'s receive thread in chunks, then its end:
    /// to the buddy's held contexts, or (`handover`) into the own contexts of a node taking
    /// over.
    fn send_image(
        &self,
        from: EndpointId,
        to: u32,
        handover: bool,
        epoch: u64,
        img: &[u8],
        crc: u32,
    ) -> std::result::Result<(), McapiError> {
        let me = self.me();
        let gen = if handover { self.gen() } else { self.app_gen() };
        let (node, ep) = (self.owner(to), self.ends(to).req);
        let chunks = img.len().div_ceil(IMAGE_CHUNK);
        let mut head = Vec::with_capacity(64);
        for (i, chunk) in img.chunks(IMAGE_CHUNK).enumerate() {
            if i == chunks / 2 {
                failpoint(if handover {
                    "handover-half"
                } else {
                    "checkpoint-half"
                });
            }
            crate::wire::encode_image_chunk_head(
                &mut head,
                me,
                gen,
                handover,
                epoch,
                (i * IMAGE_CHUNK) as u64,
                chunk.len(),
            );
            // Gathered by MCAPI straight from the image into the buddy's ring or the socket.
            self.send_slices(from, node, ep, &[&head, chunk])?;
        }
        let end = Msg::ImageEnd {
            handover,
            epoch,
            len: img.len() as u64,
            crc,
        };
        self.send_bytes(from, node, ep, &end.encode(me, gen))
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
        self.send_slices(from, node, ep, &[bytes])
    }

    /// `send_bytes` of the concatenation of `slices`, as one message.
    fn send_slices(
        &self,
        from: EndpointId,
        node: u32,
        ep: EndpointId,
        slices: &[&[u8]],
    ) -> std::result::Result<(), McapiError> {
        loop {
            match self.mcapi.msg_send_vectored(from, ep, slices, 0) {
                Err(McapiError::Timeout) => {
                    tracing::debug!(
                        node = self.me(),
                        to = node,
                        bytes = slices.iter().map(|s| s.len()).sum::<usize>(),
                        "a send timed out on a full queue"
                    );
                    if let Ok(PeerState::Lost(why)) = self.mcapi.peer_state(node) {
                        return Err(McapiError::Transmission { node, why });
                    }
                }
                r => return r,
            }
        }
    }

    /// A `NodeLost` error names the DSM id of the lost MCAPI node.
    fn named(&self, e: DsmError) -> DsmError {
        match e {
            DsmError::NodeLost { node, why, what } => {
                let owners = self.owners.read().unwrap();
                let node = owners
                    .iter()
                    .position(|&m| m == node)
                    .map_or(node, |d| d as u32);
                DsmError::NodeLost { node, why, what }
            }
            e => e,
        }
    }

    /// The next message on `ep` (from one of `watch`, which are checked for loss meanwhile).
    fn reply(&self, ep: EndpointId, watch: &[u32], what: &'static str) -> Result<Msg> {
        self.reply_from(ep, watch, what).map(|(_, m)| m)
    }

    /// The next message of this generation on `ep` and its sender. Meanwhile the DSM nodes
    /// `watch` are checked for loss (with standbys, every node is, since any loss starts a
    /// recovery, and a recovery under way interrupts the wait with `Recovering`).
    fn reply_from(&self, ep: EndpointId, watch: &[u32], what: &'static str) -> Result<(u32, Msg)> {
        let gen = self.app_gen();
        let recovers = self.standbys > 0;
        // A loss seen after a receive timed out; reported only if the next receive times out
        // too, since what the node sent before it went (or what the manager sent us before
        // the node could leave) is delivered first.
        let mut lost: Option<(u32, PeerLoss)> = None;
        loop {
            match self.mcapi.msg_recv(ep) {
                Ok(b) => {
                    let (from, g, m) = Msg::decode(&b).map_err(|e| DsmError::Protocol {
                        from: u32::MAX,
                        what: e,
                    })?;
                    if g < gen {
                        continue;
                    }
                    if g > gen || m == Msg::Wake {
                        if recovers && (g > gen || self.alarm.load(Ordering::SeqCst)) {
                            return Err(DsmError::Recovering);
                        }
                        continue;
                    }
                    return Ok((from, m));
                }
                Err(McapiError::Timeout) => {
                    if recovers && (self.alarm.load(Ordering::SeqCst) || self.gen() != gen) {
                        return Err(DsmError::Recovering);
                    }
                    if let Some((node, why)) = lost {
                        return Err(DsmError::NodeLost { node, why, what });
                    }
                    let owners = self.owners.read().unwrap().clone();
                    lost = (0..self.n).find_map(|d| {
                        let counts = watch.contains(&d);
                        if !counts && !recovers {
                            return None;
                        }
                        match self.mcapi.peer_state(owners[d as usize]) {
                            Ok(PeerState::Lost(PeerLoss::Finalized)) if !counts => None,
                            Ok(PeerState::Lost(why)) => Some((d, why)),
                            _ => None,
                        }
                    });
                }
                Err(e) => return Err(self.named(DsmError::mcapi(what, e))),
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

    /// After a failure: `restore`, and a node that took over rebuilds the job's allocations
    /// from the image first (`replay` is then how many pages its application's `alloc` calls
    /// will replay).
    fn restore_after_failure(&self, epoch: u64, replay: &mut usize) -> Result<Vec<u8>> {
        let fresh = self.homes.read().unwrap().is_empty();
        let allocated = {
            let own = self.own.lock().unwrap();
            let bytes = own.get(epoch).ok_or_else(|| {
                DsmError::Invalid(format!(
                    "checkpoint {epoch} is not held by node {}",
                    self.me()
                ))
            })?;
            image::Image::decode(bytes)
                .map_err(DsmError::Invalid)?
                .homes
        };
        if fresh {
            let count = allocated.len();
            let mut homes = self.homes.write().unwrap();
            *homes = allocated;
            self.local.lock().unwrap().state = vec![State::Clean; count];
            fault::TOP.store(count as u32, Ordering::Release);
            *replay = count;
        } else if self.homes.read().unwrap().len() != allocated.len() {
            return Err(DsmError::Mismatch(format!(
                "the job allocated shared memory after checkpoint {epoch}, which a node that takes over cannot know: allocate before the first checkpoint"
            )));
        }
        self.restore(epoch)
    }

    /// Puts this node back as it was at checkpoint `epoch`: home pages from its own image
    /// (zero for pages allocated since), every cached page dropped. Returns the private state.
    fn restore(&self, epoch: u64) -> Result<Vec<u8>> {
        let own = self.own.lock().unwrap();
        let bytes = own.get(epoch).ok_or_else(|| {
            DsmError::Invalid(format!(
                "checkpoint {epoch} is not held by node {}",
                self.me()
            ))
        })?;
        let img = image::Image::decode(bytes).map_err(DsmError::Invalid)?;
        if img.node != self.me() || img.epoch != epoch {
            return Err(DsmError::Invalid(format!(
                "the image held as node {}'s checkpoint {epoch} is node {}'s of {}",
                self.me(),
                img.node,
                img.epoch
            )));
        }
        let homes = self.homes.read().unwrap();
        if img.homes.len() > homes.len() || homes[..img.homes.len()] != img.homes[..] {
            return Err(DsmError::Mismatch(format!(
                "checkpoint {epoch} of node {} has other allocations than the job now",
                self.me()
            )));
        }
        let mut local = self.local.lock().unwrap();
        for (i, &p) in img.pages.iter().enumerate() {
            // SAFETY: between the rollback's barriers no other thread writes pages: the
            // receive thread applies no diffs (nobody flushes) and the application waits.
            unsafe { self.region.page_mut(p) }.copy_from_slice(img.page(i));
        }
        for p in img.homes.len()..homes.len() {
            if homes[p] == self.me() {
                // SAFETY: as above.
                unsafe { self.region.page_mut(p as u32) }.fill(0);
            }
        }
        let mut invalid = Vec::new();
        for p in 0..homes.len() {
            if homes[p] == self.me() {
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
            .filter(|&p| homes[p as usize] == self.me())
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
            .filter(|&p| (p as usize) < homes.len() && homes[p as usize] != self.me())
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

    /// A fault that cannot be served because a node was lost: the application's work since
    /// the last checkpoint is lost anyway, so the page is made usable as it is and the next
    /// DSM call of the application recovers (and rolls back what it computed meanwhile).
    fn doom(&self, page: u32, why: &DsmError) -> Result<()> {
        tracing::warn!(
            node = self.me(),
            page,
            "a fault during a failure ({why}): recovering at the next DSM call"
        );
        self.alarm.store(true, Ordering::SeqCst);
        self.region.protect(page, 1, Access::Write)
    }

    /// Makes `page` usable for a read (or a write): fetches it from its home if needed, keeps a
    /// twin before the first write of a cached page.
    fn serve_fault(&self, page: u32, write: bool) -> Result<()> {
        failpoint("fault");
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
            if home != self.me() {
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
        let r = match inner.serve_fault(f.page, f.write) {
            Err(e) if inner.standbys > 0 && e.starts_recovery() => inner.doom(f.page, &e),
            r => r,
        };
        if let Err(e) = &r {
            tracing::error!(
                node = inner.me(),
                page = f.page,
                "a shared page cannot be made usable: {e}"
            );
            eprintln!("kioku-dsm: node {}: page {}: {e}", inner.me(), f.page);
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

/// The recovery leader's state: what the survivors reported.
#[derive(Default)]
struct Leading {
    reports: BTreeMap<u32, (u32, Report)>,
    lost: BTreeSet<u32>,
    called: BTreeSet<u32>,
}

/// The receive thread's state.
struct Serving {
    bar: Barrier,
    locks: HashMap<u32, Lock>,
    /// What went wrong with an image being received, per sender, reported at its end.
    image_trouble: HashMap<u32, String>,
    /// Set while this node leads a recovery.
    leading: Option<Leading>,
    /// Messages of a generation this node has not reached yet (their plan is still on its
    /// way), handled once it has.
    future: Vec<Vec<u8>>,
    backlog: VecDeque<Vec<u8>>,
}

fn receive_thread(inner: Arc<Inner>) {
    let mut st = Serving {
        bar: Barrier {
            epoch: 0,
            arrived: vec![None; inner.n as usize],
        },
        locks: HashMap::new(),
        image_trouble: HashMap::new(),
        leading: None,
        future: Vec::new(),
        backlog: VecDeque::new(),
    };
    loop {
        let b = match st.backlog.pop_front() {
            Some(b) => b,
            None => match inner.mcapi.msg_recv(inner.mine.req) {
                Ok(b) => b,
                Err(McapiError::Timeout) => {
                    inner.heartbeat(&mut st);
                    continue;
                }
                Err(e) => {
                    tracing::error!(node = inner.me(), "the receive thread stops: {e}");
                    return;
                }
            },
        };
        if !inner.serve(&mut st, b) {
            return;
        }
    }
}

impl Inner {
    /// Between messages: with standbys, a lost node raises the alarm (the application
    /// recovers at its next DSM call), and a leader looks at its recovery.
    fn heartbeat(&self, st: &mut Serving) {
        if self.standbys == 0 || self.me() == IDLE {
            return;
        }
        if st.leading.is_some() {
            self.lead(st);
        }
        if !self.alarm.load(Ordering::SeqCst) {
            let owners = self.owners.read().unwrap().clone();
            let lost = owners.iter().any(|&m| {
                matches!(
                    self.mcapi.peer_state(m),
                    Ok(PeerState::Lost(ref why)) if *why != PeerLoss::Finalized
                )
            });
            if lost {
                tracing::warn!(
                    node = self.me(),
                    "a node was lost: recovering at the next DSM call"
                );
                self.alarm.store(true, Ordering::SeqCst);
                self.wake();
            }
        }
    }

    /// Tells this node's application to look at the recovery state.
    fn wake(&self) {
        self.answer(self.mine.ctl, Msg::Wake);
    }

    /// Handles one message; false when the thread is to stop.
    fn serve(&self, st: &mut Serving, b: Vec<u8>) -> bool {
        let inner = self;
        let gen = inner.gen();
        // Checkpoint images are the bulk: written into their context without a copy.
        if let Some(c) = crate::wire::decode_image_chunk(&b) {
            if c.gen > gen {
                st.future.push(b);
            } else if c.gen == gen && c.from < inner.n {
                if c.handover {
                    inner.handover_chunk(&mut st.image_trouble, c.from, c.epoch, c.offset, c.data);
                } else {
                    inner.image_chunk(&mut st.image_trouble, c.from, c.epoch, c.offset, c.data);
                }
                // Its bytes are in the context now: MCAPI reads a later chunk into this buffer
                // (no fresh, page-faulted allocation per chunk).
                inner.mcapi.recycle(b);
            }
            return true;
        }
        let (from, g, m) = match Msg::decode(&b) {
            Ok((from, _, Msg::Stop)) if from == inner.me() => return false,
            Ok((from, g, m)) if from < inner.n => (from, g, m),
            Ok((from, _, _)) => {
                tracing::warn!(
                    "a DSM message claims to come from node {from}, which does not exist"
                );
                return true;
            }
            Err(e) => {
                tracing::warn!("a malformed DSM message was dropped: {e}");
                return true;
            }
        };
        match m {
            Msg::Join {
                id,
                epoch,
                owners,
                lost,
                own,
                held,
            } => {
                if owners.len() != inner.n as usize {
                    tracing::warn!("node {from} joined a recovery with a bad owner table");
                    return true;
                }
                let l = st.leading.get_or_insert_with(Leading::default);
                l.lost.extend(lost);
                l.reports.insert(
                    from,
                    (
                        id,
                        Report {
                            gen: g,
                            epoch,
                            owners,
                            own,
                            held,
                        },
                    ),
                );
                inner.lead(st);
            }
            Msg::Plan {
                checkpoint,
                epoch,
                owners,
                handover,
            } => {
                if g > gen && owners.len() == inner.n as usize {
                    inner.take_plan(st, g, checkpoint, epoch, owners, handover);
                }
            }
            Msg::RecoverFail { text } => {
                *inner.verdict.lock().unwrap() = Some(Verdict::Fail(text));
                inner.alarm.store(true, Ordering::SeqCst);
                inner.wake();
            }
            Msg::RecoverCall { .. } => {
                if g >= gen && inner.me() != IDLE {
                    inner.alarm.store(true, Ordering::SeqCst);
                    inner.wake();
                }
            }
            Msg::Dismiss => {
                if inner.me() == IDLE {
                    *inner.verdict.lock().unwrap() = Some(Verdict::Dismissed);
                    inner.wake();
                }
            }
            _ if g < gen => {}
            _ if g > gen => st.future.push(b),
            m => inner.serve_current(st, from, m),
        }
        true
    }

    /// Switches to a recovery's plan: the new owners and generation, the managers' state
    /// afresh, images newer than the checkpoint dropped; sends the images this node holds to
    /// the nodes that need them; then tells the application.
    fn take_plan(
        &self,
        st: &mut Serving,
        gen: u64,
        checkpoint: u64,
        epoch: u64,
        owners: Vec<u32>,
        handover: Vec<u32>,
    ) {
        let me = owners
            .iter()
            .position(|&m| m == self.id)
            .map_or(IDLE, |d| d as u32);
        tracing::info!(
            id = self.id,
            node = me,
            gen,
            checkpoint,
            ?owners,
            "recovery plan"
        );
        *self.owners.write().unwrap() = owners;
        self.me.store(me, Ordering::SeqCst);
        self.gen.store(gen, Ordering::SeqCst);
        st.bar = Barrier {
            epoch,
            arrived: vec![None; self.n as usize],
        };
        st.locks.clear();
        st.image_trouble.clear();
        self.own.lock().unwrap().discard_after(checkpoint);
        self.held.lock().unwrap().discard_after(checkpoint);
        *self.verdict.lock().unwrap() = Some(Verdict::Plan {
            gen,
            checkpoint,
            epoch,
            handover: handover.clone(),
        });
        self.alarm.store(true, Ordering::SeqCst);
        self.wake();
        if me != IDLE {
            for d in handover.into_iter().filter(|&d| (d + 1) % self.n == me) {
                let held = self.held.lock().unwrap();
                let Some(img) = held.get(checkpoint) else {
                    tracing::error!(node = me, "node {d}'s image of {checkpoint} is not here");
                    continue;
                };
                tracing::info!(
                    node = me,
                    to = d,
                    bytes = img.len(),
                    "handing an image over"
                );
                let crc = crc32c::crc32c(img);
                if let Err(e) = self.send_image(self.mine.req, d, true, checkpoint, img, crc) {
                    tracing::warn!(node = me, "the image for node {d} was not delivered: {e}");
                }
            }
        }
        st.backlog.extend(st.future.drain(..));
    }

    /// The recovery's leader: once every survivor has reported, decides and sends the plan (or
    /// why the job cannot go on); meanwhile calls the survivors that have not reported.
    fn lead(&self, st: &mut Serving) {
        let Some(l) = st.leading.as_mut() else {
            return;
        };
        let reports: BTreeMap<u32, Report> = l
            .reports
            .iter()
            .map(|(&d, (_, r))| (d, r.clone()))
            .collect();
        let current = self.owners.read().unwrap().clone();
        let owners = recovery::newest_owners(&reports, &current);
        for &m in &owners {
            if matches!(self.mcapi.peer_state(m), Ok(PeerState::Lost(_))) {
                l.lost.insert(m);
            }
        }
        let survivors = recovery::survivors(&owners, &l.lost);
        let missing: Vec<u32> = survivors
            .iter()
            .copied()
            .filter(|&d| l.reports.get(&d).map(|r| r.0) != Some(owners[d as usize]))
            .collect();
        if !missing.is_empty() {
            let lost: Vec<u32> = l.lost.iter().copied().collect();
            for d in missing {
                if l.called.insert(d) {
                    let m = owners[d as usize];
                    let call = Msg::RecoverCall { lost: lost.clone() };
                    let _ = self.send_bytes(
                        self.mine.req,
                        m,
                        self.peers[m as usize].req,
                        &call.encode(self.me(), self.gen()),
                    );
                }
            }
            return;
        }
        let idle: Vec<u32> = (self.n..self.n + self.standbys)
            .filter(|m| !owners.contains(m) && !l.lost.contains(m))
            .filter(|&m| !matches!(self.mcapi.peer_state(m), Ok(PeerState::Lost(_))))
            .collect();
        let lost = l.lost.clone();
        st.leading = None;
        let me = self.me();
        match recovery::decide(&owners, &lost, &reports, &idle) {
            Ok(d) => {
                tracing::info!(node = me, ?d, ?lost, "recovery decided");
                let plan = Msg::Plan {
                    checkpoint: d.checkpoint,
                    epoch: d.epoch,
                    owners: d.owners.clone(),
                    handover: d.handover.clone(),
                }
                .encode(me, d.gen);
                for &m in &d.owners {
                    let _ = self.send_bytes(self.mine.req, m, self.peers[m as usize].req, &plan);
                }
            }
            Err(text) => {
                tracing::error!(node = me, "the job cannot recover: {text}");
                let fail = Msg::RecoverFail { text }.encode(me, self.gen());
                for d in survivors {
                    let m = owners[d as usize];
                    let _ = self.send_bytes(self.mine.req, m, self.peers[m as usize].req, &fail);
                }
                self.dismiss_standbys(&owners);
            }
        }
    }

    /// Tells the standbys that own no DSM id that they are not needed.
    fn dismiss_standbys(&self, owners: &[u32]) {
        for m in (self.n..self.n + self.standbys).filter(|m| !owners.contains(m)) {
            if !matches!(self.mcapi.peer_state(m), Ok(PeerState::Lost(_))) {
                let b = Msg::Dismiss.encode(self.me(), self.gen());
                let _ = self.send_bytes(self.mine.req, m, self.peers[m as usize].req, &b);
            }
        }
    }

    /// A message of the current generation.
    fn serve_current(&self, st: &mut Serving, from: u32, m: Msg) {
        let inner = self;
        let bar = &mut st.bar;
        let locks = &mut st.locks;
        let image_trouble = &mut st.image_trouble;
        match m {
            Msg::PageGet { page, reply } => {
                let to = match reply {
                    ReplyTo::Compute => inner.ends(from).ctl,
                    ReplyTo::Fault => inner.ends(from).flt,
                };
                let homed = inner.homes.read().unwrap().get(page as usize) == Some(&inner.me());
                let m = if homed {
                    Msg::Page {
                        page,
                        data: inner.region.page_copy(page),
                    }
                } else {
                    Msg::Refuse {
                        text: format!(
                            "node {from} asked node {} for page {page}, which is not homed there",
                            inner.me()
                        ),
                    }
                };
                inner.answer(to, m);
            }
            Msg::Diffs { body } => {
                tracing::debug!(node = inner.me(), from, bytes = body.len(), "diffs");
                let m = {
                    let homes = inner.homes.read().unwrap();
                    let ps = inner.region.page;
                    match diff::apply(
                        &body,
                        ps,
                        |p| homes.get(p as usize) == Some(&inner.me()),
                        |p, off, bytes| {
                            // SAFETY: only the receive thread writes home pages through the
                            // library's view.
                            let page = unsafe { inner.region.page_mut(p) };
                            page[off..off + bytes.len()].copy_from_slice(bytes)
                        },
                    ) {
                        Ok(_) => Msg::DiffAck,
                        Err(e) => Msg::Refuse {
                            text: format!(
                                "node {} refused diffs from node {from}: {e}",
                                inner.me()
                            ),
                        },
                    }
                };
                inner.answer(inner.ends(from).ctl, m);
            }
            Msg::Arrive {
                kind,
                epoch,
                check,
                notices,
            } => inner.arrive(bar, from, kind, epoch, check, notices),
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
                    return;
                }
                l.notices.extend(notices.into_iter().map(|p| (epoch, p)));
                l.holder = None;
                if let Some((next, e)) = l.waiting.pop_front() {
                    l.holder = Some(next);
                    inner.grant(l, lock, next, e);
                }
            }
            Msg::ImageChunk { .. } => {}
            Msg::ImageEnd {
                handover: true,
                epoch,
                len,
                crc,
            } => {
                let r = match image_trouble.remove(&from) {
                    Some(e) => Err(e),
                    None => inner.own.lock().unwrap().end(epoch, len, crc),
                };
                if let Err(e) = r {
                    let text = format!(
                        "node {} could not take over node {from}'s copy of its checkpoint {epoch}: {e}",
                        inner.me()
                    );
                    *inner.verdict.lock().unwrap() = Some(Verdict::Fail(text));
                }
                inner.wake();
            }
            Msg::ImageEnd {
                handover: false,
                epoch,
                len,
                crc,
            } => {
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
                            inner.me()
                        ),
                    },
                };
                inner.answer(inner.ends(from).ctl, m);
            }
            m => tracing::warn!("node {from} sent {m:?} to the request endpoint; dropped"),
        }
    }
}

impl Inner {
    /// Stores bytes of this node's own image, handed over by its buddy `from` in a recovery.
    fn handover_chunk(
        &self,
        trouble: &mut HashMap<u32, String>,
        from: u32,
        epoch: u64,
        offset: u64,
        data: &[u8],
    ) {
        let r = if (self.me() + 1) % self.n == from {
            let mut own = self.own.lock().unwrap();
            let r = if offset == 0 {
                own.begin(epoch)
            } else {
                Ok(())
            };
            r.and_then(|()| own.write(epoch, offset, data, self.max_image()))
        } else {
            Err(format!("node {from} is not node {}'s buddy", self.me()))
        };
        if let Err(e) = r {
            trouble.insert(from, e);
        }
    }

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
        if (from + 1) % self.n == self.me() {
            Ok(())
        } else {
            Err(format!("node {} is not node {from}'s buddy", self.me()))
        }
    }

    /// The largest image a node can send: every page of the range and the largest private
    /// state.
    fn max_image(&self) -> usize {
        let pages = self.region.pages() as usize;
        64 + pages * (4 + self.region.page) + MAX_PRIVATE
    }

    fn answer(&self, to: EndpointId, m: Msg) {
        if let Err(e) = self.send_bytes(
            self.mine.req,
            u32::from(to.node),
            to,
            &m.encode(self.me(), self.gen()),
        ) {
            tracing::warn!(node = self.me(), "an answer to {to} was not delivered: {e}");
        }
    }

    fn grant(&self, l: &mut Lock, lock: u32, to: u32, epoch: u64) {
        // Notices older than the acquirer's barrier epoch were covered by that barrier, and no
        // node can still be before it.
        l.notices.retain(|&(e, _)| e >= epoch);
        let mut notices: Vec<u32> = l.notices.iter().map(|&(_, p)| p).collect();
        notices.sort_unstable();
        notices.dedup();
        self.answer(self.ends(to).ctl, Msg::Grant { lock, notices });
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
        if self.me() != 0 {
            tracing::warn!(
                "node {from} sent a barrier arrival to node {}, not the manager",
                self.me()
            );
            return;
        }
        if epoch != bar.epoch || bar.arrived[from as usize].is_some() {
            let text = format!(
                "node {from} arrived at barrier {epoch} while the job is at barrier {}: the nodes call barrier a different number of times",
                bar.epoch
            );
            self.answer(self.ends(from).ctl, Msg::Refuse { text });
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
        if k0 == BarrierKind::Finalize && matches!(m, Msg::Depart { .. }) {
            // The job ends: the standbys it did not need go too.
            let owners = self.owners.read().unwrap().clone();
            self.dismiss_standbys(&owners);
        }
        // The others first: this node's application may exit as soon as it has its answer.
        for p in (0..self.n).filter(|&p| p != self.me()).chain([self.me()]) {
            self.answer(self.ends(p).ctl, m.clone());
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

/// Checkpoint images arrive as a stream of 256 KiB messages, each in a buffer MCAPI allocates:
/// with glibc's defaults every one is a fresh mapping (or the heap is trimmed after it), so
/// every page of every image is faulted in and zeroed again (a third of a checkpoint's time).
/// Raising the mmap and trim thresholds makes the buffers reuse memory. Left alone when the
/// user tunes malloc (`GLIBC_TUNABLES`, `MALLOC_*_`) or sets `KIOKU_DSM_KEEP_MALLOC=1`.
fn keep_message_memory() {
    let tuned = std::env::var("GLIBC_TUNABLES").is_ok_and(|v| v.contains("malloc"))
        || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some()
        || std::env::var("KIOKU_DSM_KEEP_MALLOC").is_ok_and(|v| v == "1");
    if tuned {
        return;
    }
    // SAFETY: mallopt only sets glibc allocator parameters; any value is valid for these two.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

/// Fault injection for the failure tests: `KIOKU_DSM_FAILPOINT=<name>:<count>` kills this
/// process (SIGKILL, as a crash would) the count-th time it passes the point `name`.
fn failpoint(name: &str) {
    static SPEC: std::sync::OnceLock<Option<(String, u64)>> = std::sync::OnceLock::new();
    static PASSED: AtomicU64 = AtomicU64::new(0);
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var("KIOKU_DSM_FAILPOINT").ok()?;
        let (n, c) = v.rsplit_once(':')?;
        Some((n.to_string(), c.parse().ok()?))
    });
    if let Some((n, c)) = spec {
        if n == name && PASSED.fetch_add(1, Ordering::SeqCst) + 1 == *c {
            tracing::warn!("failpoint {name}: killing this process");
            // SAFETY: sends a signal to this process; no memory is involved.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
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
