//! Warm restart: with `--pool PATH` the item memory is a kioku checkpoint region ("items") and
//! the slab page table travels in the checkpoint's metadata. A checkpoint is taken with the
//! store's lock held — every write to item memory happens under that lock, so the memory is
//! quiescent — at an interval, on SIGUSR1 and on request. After SIGKILL or a power cut the
//! server recovers the last checkpoint and rebuilds its index from the items themselves.
//! Expiry times are absolute Unix times, so they stay relative to the wall clock.
//!
//! The engine lives on its own thread (it owns the pool and the write tracker); the server
//! talks to it through a channel.

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use kioku_ckpt::{CheckpointStats, Engine, EngineOptions, RegionOptions};
use kioku_run::control::Control;

use crate::exec::Cache;
use crate::slab::{ItemId, LruEnds, Memory, Slabs};
use crate::store::Store;

const MAGIC: &[u8; 12] = b"kioku-cache\0";
/// Format 2 adds the LRU lists' ends; format 1 (without them) is still read.
const FORMAT: u32 = 2;
const REGION: &str = "items";

/// Why the pool could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// The checkpoint engine failed (pool missing, damaged, busy, no write tracking...).
    #[error("checkpoint pool {path}: {source}")]
    Ckpt {
        /// The pool.
        path: PathBuf,
        /// The cause.
        #[source]
        source: kioku_ckpt::CkptError,
    },
    /// The pool was made with other settings.
    #[error("checkpoint pool {path} holds a cache made with {found}; start with the same -m/-I/-f or give a new --pool")]
    Mismatch {
        /// The pool.
        path: PathBuf,
        /// Its settings.
        found: String,
    },
    /// The pool's cache metadata does not decode.
    #[error("checkpoint pool {path}: the cache metadata is damaged ({reason}); restore the pool from a copy or give a new --pool")]
    Damaged {
        /// The pool.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// The checkpoint thread is gone.
    #[error("the checkpoint thread stopped; see the log")]
    Stopped,
}

/// What a checkpoint's metadata holds besides the item memory.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheMeta {
    /// Slab page size.
    pub page_size: u64,
    /// Item memory length.
    pub mem_len: u64,
    /// Growth factor.
    pub factor: f64,
    /// Next page to hand out.
    pub next_page: u32,
    /// Next cas unique.
    pub next_cas: u64,
    /// Class of each page.
    pub page_class: Vec<u8>,
    /// Each class's LRU ends (`None` in format 1: relink by last access).
    pub lru: Option<Vec<LruEnds>>,
}

impl CacheMeta {
    /// The bytes stored with a checkpoint.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + self.page_class.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&FORMAT.to_le_bytes());
        b.extend_from_slice(&self.page_size.to_le_bytes());
        b.extend_from_slice(&self.mem_len.to_le_bytes());
        b.extend_from_slice(&self.factor.to_bits().to_le_bytes());
        b.extend_from_slice(&self.next_page.to_le_bytes());
        b.extend_from_slice(&self.next_cas.to_le_bytes());
        b.extend_from_slice(&(self.page_class.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.page_class);
        let lru = self.lru.as_deref().unwrap_or(&[]);
        b.extend_from_slice(&(lru.len() as u32).to_le_bytes());
        for e in lru {
            b.extend_from_slice(&e.head.0.to_le_bytes());
            b.extend_from_slice(&e.tail.0.to_le_bytes());
            b.extend_from_slice(&e.items.to_le_bytes());
        }
        b
    }

    /// What a checkpoint of `store` (made with growth factor `factor`) keeps besides memory.
    pub fn of(store: &Store, factor: f64) -> Self {
        let (page_class, next_page) = store.slabs().page_classes();
        CacheMeta {
            page_size: store.slabs().page_size() as u64,
            mem_len: store.slabs().memory().len as u64,
            factor,
            next_page,
            next_cas: store.next_cas(),
            page_class: page_class.to_vec(),
            lru: Some(store.slabs().lru_ends()),
        }
    }

    /// Decode [`CacheMeta::encode`]'s bytes, checking every length.
    pub fn decode(b: &[u8]) -> Result<Self, &'static str> {
        let mut at = 0;
        let mut take = |n: usize| -> Result<&[u8], &'static str> {
            let s = b.get(at..at + n).ok_or("truncated")?;
            at += n;
            Ok(s)
        };
        if take(12)? != MAGIC {
            return Err("not a kioku-cache checkpoint");
        }
        let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
        let u64_ = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
        let format = u32_(take(4)?);
        if format != 1 && format != FORMAT {
            return Err("unknown format version");
        }
        let page_size = u64_(take(8)?);
        let mem_len = u64_(take(8)?);
        let factor = f64::from_bits(u64_(take(8)?));
        let next_page = u32_(take(4)?);
        let next_cas = u64_(take(8)?);
        let n = u32_(take(4)?) as usize;
        let page_class = take(n)?.to_vec();
        let lru = if format == 1 {
            None
        } else {
            let classes = u32_(take(4)?) as usize;
            if classes > 64 {
                return Err("too many size classes");
            }
            let mut lru = Vec::with_capacity(classes);
            for _ in 0..classes {
                lru.push(LruEnds {
                    head: ItemId(u32_(take(4)?)),
                    tail: ItemId(u32_(take(4)?)),
                    items: u64_(take(8)?),
                });
            }
            Some(lru)
        };
        if at != b.len() {
            return Err("trailing bytes");
        }
        Ok(CacheMeta {
            page_size,
            mem_len,
            factor,
            next_page,
            next_cas,
            page_class,
            lru,
        })
    }
}

/// The store a pool's checkpoint holds: the slab pages of `memory` (the restored region)
/// under `meta`, checked against this server's settings, its items indexed ([`Slabs::restore`],
/// [`Store::rebuild`]). `path` names the pool in errors.
pub fn restore_store(
    path: &Path,
    memory: Memory,
    meta: &CacheMeta,
    page_size: usize,
    factor: f64,
    evictions_allowed: bool,
    now: i64,
) -> Result<Store, PersistError> {
    if meta.page_size != page_size as u64
        || meta.mem_len != memory.len as u64
        || meta.factor != factor
    {
        return Err(PersistError::Mismatch {
            path: path.to_path_buf(),
            found: format!(
                "{} MiB slab pages, {} MiB of memory and -f {}",
                meta.page_size >> 20,
                meta.mem_len >> 20,
                meta.factor
            ),
        });
    }
    let restored = Slabs::restore(
        memory,
        page_size,
        factor,
        &meta.page_class,
        meta.next_page,
        meta.lru.as_deref(),
    )
    .map_err(|reason| PersistError::Damaged {
        path: path.to_path_buf(),
        reason,
    })?;
    if meta.lru.is_some() && !restored.lru_adopted {
        tracing::warn!(
            "{}: the checkpoint's LRU lists do not match its items; relinking them by last access",
            path.display()
        );
    }
    Ok(Store::rebuild(
        restored,
        evictions_allowed,
        meta.next_cas,
        now,
    ))
}

/// Checkpoint counters shown by `stats`.
#[derive(Debug, Default)]
pub struct PersistStats {
    /// Epoch of the last checkpoint (0: none yet).
    pub epoch: AtomicU64,
    /// Checkpoints that failed.
    pub failures: AtomicU64,
    /// Duration of the last checkpoint (µs).
    pub last_us: AtomicU64,
    /// Items restored at start.
    pub restored_items: AtomicU64,
    /// Duration of the restore at start (µs).
    pub restore_us: AtomicU64,
}

enum Request {
    Attach(Arc<Cache>),
    Checkpoint(Option<mpsc::Sender<Result<u64, String>>>),
    Stop,
}

/// The pool's item memory and what was restored, handed to the server at start.
pub struct Opened {
    /// The item memory (the region).
    pub memory: Memory,
    /// The last checkpoint's cache metadata, if the pool held one.
    pub restored: Option<CacheMeta>,
    /// The checkpointer.
    pub checkpointer: Checkpointer,
}

/// The handle of the checkpoint thread.
pub struct Checkpointer {
    tx: mpsc::Sender<Request>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Open (recover) or create the pool at `path` with an item region of `len` bytes, on a
    /// new thread that then checkpoints every `interval` (if any) once attached.
    pub fn open(
        path: &Path,
        len: usize,
        interval: Option<Duration>,
    ) -> Result<Opened, PersistError> {
        let (tx, rx) = mpsc::channel::<Request>();
        let (init_tx, init_rx) = mpsc::channel();
        let path_buf = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("kioku-cache-ckpt".into())
            .spawn(move || {
                let opened = open_engine(&path_buf, len);
                let (mut engine, addr, meta) = match opened {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = init_tx.send(Err(e));
                        return;
                    }
                };
                let _ = init_tx.send(Ok((addr, meta)));
                // `kioku checkpoint PID` / `kioku checkpoint --pool PATH` ask through this.
                let control = match Control::listen(std::process::id() as i32, &path_buf, &[]) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!("no `kioku checkpoint` requests: {e}");
                        None
                    }
                };
                run(&mut engine, &rx, interval, control);
            })
            .map_err(|_| PersistError::Stopped)?;
        let (addr, meta) = init_rx.recv().map_err(|_| PersistError::Stopped)??;
        let restored = match meta {
            Some(bytes) => {
                Some(
                    CacheMeta::decode(&bytes).map_err(|reason| PersistError::Damaged {
                        path: path.to_path_buf(),
                        reason,
                    })?,
                )
            }
            None => None,
        };
        let memory = Memory {
            base: NonNull::new(addr as *mut u8).expect("a region is never at address 0"),
            len,
        };
        Ok(Opened {
            memory,
            restored,
            checkpointer: Checkpointer {
                tx,
                thread: Some(thread),
            },
        })
    }

    /// Start checkpointing `cache` (whose store lives in the region).
    pub fn attach(&self, cache: Arc<Cache>) {
        let _ = self.tx.send(Request::Attach(cache));
    }

    /// Take a checkpoint now; returns its epoch once durable.
    pub fn checkpoint(&self) -> Result<u64, String> {
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Request::Checkpoint(Some(tx)))
            .map_err(|_| PersistError::Stopped.to_string())?;
        rx.recv().map_err(|_| PersistError::Stopped.to_string())?
    }

    /// Ask for a checkpoint without waiting (a signal handler's thread).
    pub fn request(&self) {
        let _ = self.tx.send(Request::Checkpoint(None));
    }

    /// A sender that asks for checkpoints (for the signal thread).
    pub fn requester(&self) -> impl Fn() + Send + 'static {
        let tx = self.tx.clone();
        move || {
            let _ = tx.send(Request::Checkpoint(None));
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let _ = self.tx.send(Request::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type EngineInit = (Engine, usize, Option<Vec<u8>>);

fn open_engine(path: &Path, len: usize) -> Result<EngineInit, PersistError> {
    let ckpt = |source| PersistError::Ckpt {
        path: path.to_path_buf(),
        source,
    };
    let opts = EngineOptions::default();
    if path.exists() {
        let (mut engine, rec) = Engine::recover(path, &opts).map_err(ckpt)?;
        let region = match engine.region(REGION) {
            Some(r) => r,
            // Killed before its first checkpoint: the pool holds nothing yet.
            None if rec.epoch == 0 => engine
                .create_region(REGION, len, RegionOptions::default())
                .map_err(ckpt)?,
            None => {
                return Err(PersistError::Damaged {
                    path: path.to_path_buf(),
                    reason: "no item region",
                })
            }
        };
        if region.len != len {
            return Err(PersistError::Mismatch {
                path: path.to_path_buf(),
                found: format!("-m {} MiB of item memory", region.len >> 20),
            });
        }
        let meta = (rec.epoch > 0 && !rec.metadata.is_empty()).then_some(rec.metadata);
        Ok((engine, region.addr, meta))
    } else {
        let mut engine = Engine::create(path, &opts).map_err(ckpt)?;
        let region = engine
            .create_region(REGION, len, RegionOptions::default())
            .map_err(ckpt)?;
        Ok((engine, region.addr, None))
    }
}

/// How often the checkpoint thread looks for `kioku checkpoint` requests.
const CONTROL_POLL: Duration = Duration::from_millis(50);

fn run(
    engine: &mut Engine,
    rx: &mpsc::Receiver<Request>,
    interval: Option<Duration>,
    mut control: Option<Control>,
) {
    let mut cache: Option<Arc<Cache>> = None;
    let mut next = interval.map(|i| Instant::now() + i);
    loop {
        let wait = match (next, &control) {
            (Some(at), Some(_)) => Some(
                at.saturating_duration_since(Instant::now())
                    .min(CONTROL_POLL),
            ),
            (Some(at), None) => Some(at.saturating_duration_since(Instant::now())),
            (None, Some(_)) => Some(CONTROL_POLL),
            (None, None) => None,
        };
        let req = match wait {
            Some(w) => match rx.recv_timeout(w) {
                Ok(r) => Some(r),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(r) => Some(r),
                Err(_) => return,
            },
        };
        let asked = control.as_mut().map(Control::poll).unwrap_or_default();
        let due = next.is_some_and(|at| Instant::now() >= at);
        let reply = match req {
            Some(Request::Attach(c)) => {
                cache = Some(c);
                if asked.is_empty() {
                    continue;
                }
                None
            }
            Some(Request::Stop) => return,
            Some(Request::Checkpoint(reply)) => reply,
            None if due || !asked.is_empty() => None,
            None => continue,
        };
        if let Some(i) = interval {
            next = Some(Instant::now() + i);
        }
        let result = match &cache {
            Some(c) => checkpoint(engine, c),
            None => Err("the cache is not running yet".to_string()),
        };
        if let Err(e) = &result {
            tracing::error!("checkpoint failed: {e}");
        }
        let answer = match &result {
            Ok(s) => serde_json::to_string(s).unwrap_or_default(),
            Err(e) => format!("error: {e}"),
        };
        for q in asked {
            q.answer(&answer);
        }
        if let Some(tx) = reply {
            let _ = tx.send(result.map(|s| s.epoch));
        }
    }
}

fn checkpoint(engine: &mut Engine, cache: &Cache) -> Result<CheckpointStats, String> {
    let t0 = Instant::now();
    let stats = &cache.persist;
    // Every write to item memory happens under this lock: holding it, the region is quiescent.
    let store = cache.lock();
    let meta = CacheMeta::of(&store, cache.settings.growth_factor);
    let result = engine.checkpoint(&meta.encode());
    drop(store);
    match result {
        Ok(s) => {
            stats.epoch.store(s.epoch, Ordering::Relaxed);
            stats
                .last_us
                .store(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
            tracing::info!(epoch = s.epoch, dirty_pages = s.dirty_pages, "checkpoint");
            Ok(s)
        }
        Err(e) => {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            Err(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_refuses_damage() {
        let m = CacheMeta {
            page_size: 2 << 20,
            mem_len: 64 << 20,
            factor: 1.25,
            next_page: 3,
            next_cas: 99,
            page_class: vec![1, 2, 3, 255],
            lru: Some(vec![LruEnds {
                head: ItemId(7),
                tail: ItemId::NONE,
                items: 1,
            }]),
        };
        let b = m.encode();
        assert_eq!(CacheMeta::decode(&b), Ok(m));
        for cut in 0..b.len() {
            assert!(CacheMeta::decode(&b[..cut]).is_err());
        }
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert_eq!(CacheMeta::decode(&bad), Err("not a kioku-cache checkpoint"));
        let mut long = b;
        long.push(0);
        assert_eq!(CacheMeta::decode(&long), Err("trailing bytes"));
    }
}
