//! Hot items on huge pages (issue 16, step 3; memory not in a checkpoint pool).
//!
//! The item memory's ordinary slab pages are registered with kioku-hugepage's manager, which
//! samples which 4 KiB pages are accessed. A slab page of 2 MiB that is hot as a whole is
//! promoted by the manager itself (`MADV_COLLAPSE`: one huge page, same bytes, same item ids).
//! The hot pages of the other slab pages are handed to the compaction callback, which moves
//! their items onto the *hot area* — the last slab pages of the memory, kept for this, each
//! backed by a huge page when first used and never sampled — under the store's lock, so that no
//! reader sees an item half-moved (see [`Store::compact_hot`]). Cold pages stay on 4 KiB pages,
//! so memory grows only by what is hot (THP `always` backs everything touched by huge pages).
//!
//! Not with `--pool`: the checkpoint engine write-protects the region with a userfaultfd, and
//! the kernel refuses `MADV_COLLAPSE` on such ranges (docs/hugepage.md).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kioku_hugepage::{
    huge_mapped_bytes, huge_page_size, AccessOptions, ArenaId, BackendKind, CompactRequest,
    HugeError, Manager, PageRange, Policy,
};

use crate::exec::Cache;

/// Settings of [`HotPlacement`].
#[derive(Debug, Clone, Copy)]
pub struct PlacementOptions {
    /// The manager's sampling period.
    pub period: Duration,
    /// The sampler's CPU budget (fraction of one CPU; 0: a fixed sample of `sample_pages`).
    pub cpu_budget: f64,
    /// Pages sampled per period (`None`: the tracker's default).
    pub sample_pages: Option<usize>,
    /// Observations in a row that make a page hot.
    pub threshold: u8,
    /// Once placement has settled (sampling stops by itself when nothing changes), sampling
    /// starts again after this long: a cache's hot set drifts.
    pub resample_after: Duration,
}

impl Default for PlacementOptions {
    fn default() -> Self {
        PlacementOptions {
            period: Duration::from_millis(100),
            cpu_budget: 0.01,
            sample_pages: None,
            threshold: 2,
            resample_after: Duration::from_secs(10),
        }
    }
}

/// What placement did, for `stats`.
#[derive(Debug, Default)]
pub struct PlacementStats {
    /// Placement runs.
    pub enabled: AtomicU64,
}

/// Why placement could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlacementError {
    /// Slab pages are not whole huge pages.
    #[error("hot-item placement needs slab pages of whole huge pages ({huge} bytes); the slab page is {page} bytes: use -I 1m or larger")]
    PageSize {
        /// The slab page size.
        page: usize,
        /// The huge page size.
        huge: usize,
    },
    /// No hot area was reserved.
    #[error("hot-item placement needs a hot area; give --hot-mb at least one slab page and less than -m")]
    NoHotArea,
    /// The manager refused.
    #[error("huge-page manager: {0}")]
    Manager(#[from] HugeError),
}

/// The running placement: the manager, its callback and the thread that restarts sampling
/// after it settles (dropping it stops them).
pub struct HotPlacement {
    manager: Arc<Manager>,
    stop: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl Drop for HotPlacement {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.watcher.take() {
            let _ = t.join();
        }
    }
}

/// Restarts sampling `resample_after` once the manager has settled, until `stop`.
fn watch(manager: &Manager, stop: &AtomicBool, resample_after: Duration) {
    const TICK: Duration = Duration::from_millis(50);
    let mut settled_at: Option<std::time::Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        // Notices are only a wake-up here; the status says whether sampling stopped.
        let _ = manager.wait(Some(TICK));
        let st = manager.status();
        if st.error.is_some() {
            tracing::warn!("hot-item placement stopped: {:?}", st.error);
            return;
        }
        match (st.settled, settled_at) {
            (true, None) => settled_at = Some(std::time::Instant::now()),
            (true, Some(at)) if at.elapsed() >= resample_after => {
                settled_at = None;
                if let Err(e) = manager.enable() {
                    tracing::warn!("hot-item placement: sampling does not restart: {e}");
                    return;
                }
            }
            (false, _) => settled_at = None,
            _ => {}
        }
    }
}

impl HotPlacement {
    /// Start sampling `cache`'s ordinary slab pages and placing hot items. The store's hot
    /// area must have been reserved ([`crate::Slabs::reserve_hot`]).
    pub fn start(cache: Arc<Cache>, opts: PlacementOptions) -> Result<Self, PlacementError> {
        let huge = huge_page_size();
        let (mem, page, hot_first) = {
            let s = cache.lock();
            let slabs = s.slabs();
            let (_, hot_total) = slabs.hot_pages();
            if hot_total == 0 {
                return Err(PlacementError::NoHotArea);
            }
            (
                slabs.memory(),
                slabs.page_size(),
                slabs.pages_total() - hot_total,
            )
        };
        if !page.is_multiple_of(huge) || !(mem.base.as_ptr() as usize).is_multiple_of(huge) {
            return Err(PlacementError::PageSize { page, huge });
        }
        let base = mem.base.as_ptr() as usize;
        let manager = Manager::builder()
            .backend(BackendKind::ProtNone)
            .period(opts.period)
            .threshold(opts.threshold)
            .access_options(AccessOptions {
                cpu_budget: opts.cpu_budget,
                sample_pages: opts
                    .sample_pages
                    .unwrap_or(AccessOptions::default().sample_pages),
                ..AccessOptions::default()
            })
            .policy(Policy::default())
            .build()?;
        // Only the ordinary pages are sampled: the hot area stays mapped by huge pages.
        manager.register(base as *const u8, hot_first as usize * page, ArenaId(1))?;
        let compactor_cache = cache.clone();
        manager.set_compactor(Box::new(
            move |req: &CompactRequest<'_>, moved: &mut [bool]| {
                let addrs: Vec<usize> = req.pages.iter().map(|p| p.addr).collect();
                let mut prepare = |offset: usize| back_with_huge_page(base + offset, page);
                compactor_cache.lock().compact_hot(
                    &addrs,
                    req.allowance_pages,
                    moved,
                    &mut prepare,
                );
                Ok(())
            },
        ));
        manager.enable()?;
        cache.placement.enabled.store(1, Ordering::Relaxed);
        let manager = Arc::new(manager);
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (m, stop) = (manager.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kioku-cache-hot".into())
                .spawn(move || watch(&m, &stop, opts.resample_after))
                .ok()
        };
        tracing::info!(
            hot_area_pages = mem.len / page - hot_first as usize,
            "hot-item placement on"
        );
        Ok(HotPlacement {
            manager,
            stop,
            watcher,
        })
    }

    /// The manager's status.
    pub fn status(&self) -> kioku_hugepage::Status {
        self.manager.status()
    }
}

/// Back the slab page at `addr` (`len` bytes, huge-page aligned, not yet used) by huge pages:
/// advise it, touch each huge page (the fault then allocates a huge page), and check. A page
/// the kernel could not back (no free huge page) is given back and refused.
fn back_with_huge_page(addr: usize, len: usize) -> bool {
    let r = PageRange::new(addr, addr + len);
    // SAFETY: advice on a range of the item memory that no item uses yet.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    for at in (addr..addr + len).step_by(huge_page_size()) {
        // SAFETY: the byte lies in the unused slab page; the store's lock is held.
        unsafe { std::ptr::write_volatile(at as *mut u8, 0) };
    }
    if huge_mapped_bytes(r).is_ok_and(|b| b == len) || kioku_hugepage::collapse(r).is_ok() {
        return true;
    }
    tracing::debug!(addr, "no huge page for the hot area");
    false
}
