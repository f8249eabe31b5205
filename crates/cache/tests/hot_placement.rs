//! Hot items end on huge pages (issue 16, step 3): a cache whose hot items are scattered over
//! its slab pages is read by two threads that check every value they read, while a writer
//! keeps replacing other items (new chunks, evictions) and, for a while, the hot items
//! themselves. With placement on, every hot item ends on memory the kernel maps by huge pages
//! — moved onto the hot area by the compaction callback, or on a slab page promoted whole — and
//! no reader ever sees a torn or wrong value.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kioku_cache::{Cache, HotPlacement, Mapping, PlacementOptions, Settings, Slabs, Store};
use kioku_hugepage::{huge_mapped_bytes, huge_page_size, PageRange};

const PAGE: usize = 2 << 20;
const PAGES: usize = 24;
const HOT_AREA: u32 = 4;
const ITEMS: u32 = 6000;
const VALUE: usize = 3000;
const NOW: i64 = 1_800_000_000;

/// The value of `key` at `version`: the version, then a byte that depends on both.
fn value(key: u32, version: u64) -> Vec<u8> {
    let mut v = version.to_le_bytes().to_vec();
    v.resize(VALUE, ((key as u64 * 31 + version) % 251) as u8);
    v
}

fn check(key: u32, v: &[u8]) -> u64 {
    assert_eq!(v.len(), VALUE, "key {key}: length");
    let version = u64::from_le_bytes(v[..8].try_into().unwrap());
    assert_eq!(v, &value(key, version)[..], "key {key}: torn value");
    version
}

fn settings() -> Settings {
    Settings {
        memory_limit: PAGES * PAGE,
        item_size_max: 1 << 20,
        max_connections: 16,
        threads: 1,
        port: 0,
        interface: "127.0.0.1".into(),
        growth_factor: 1.25,
        evictions: true,
        cas_enabled: true,
        flush_enabled: true,
    }
}

#[test]
fn hot_items_end_on_huge_pages_and_no_reader_sees_a_torn_value() {
    if huge_page_size() != PAGE {
        eprintln!("SKIP: the huge page is not 2 MiB");
        return;
    }
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("SKIP: transparent huge pages are off (transparent_hugepage/enabled: {thp:?})");
        return;
    }
    let map = Mapping::anonymous(PAGES * PAGE).unwrap();
    let mem = map.memory();
    let mut slabs = Slabs::new(mem, PAGE, 1.25);
    slabs.reserve_hot(HOT_AREA).unwrap();
    let cache = Arc::new(Cache::new(Store::new(slabs, true), settings()));
    {
        let mut s = cache.lock();
        for k in 0..ITEMS {
            s.store(format!("k{k}").as_bytes(), k, 0, &[&value(k, 0)], None, NOW)
                .unwrap();
        }
    }
    // 48 hot keys scattered over every slab page: far below a quarter of any range.
    let hot: Vec<u32> = (0..ITEMS).step_by(125).collect();
    let opts = PlacementOptions {
        period: Duration::from_millis(20),
        cpu_budget: 0.0,
        sample_pages: Some(1024),
        threshold: 2,
        resample_after: Duration::from_millis(200),
    };
    let placement = match HotPlacement::start(cache.clone(), opts) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("SKIP: hot-item placement unavailable here: {e}");
            return;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let rewrite_hot = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (cache, stop, hot, reads) =
                (cache.clone(), stop.clone(), hot.clone(), reads.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for &k in &hot {
                        let mut s = cache.lock();
                        let id = s
                            .lookup(format!("k{k}").as_bytes(), NOW)
                            .unwrap_or_else(|| panic!("hot key {k} lost"));
                        let v = s.view(id);
                        assert_eq!(v.key, format!("k{k}").as_bytes());
                        assert_eq!(v.header.flags, k);
                        check(k, v.value);
                        s.fetched(id, NOW, true);
                        drop(s);
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();
    let writer = {
        let (cache, stop, hot, rewrite_hot) = (
            cache.clone(),
            stop.clone(),
            hot.clone(),
            rewrite_hot.clone(),
        );
        std::thread::spawn(move || {
            let mut version = 1u64;
            while !stop.load(Ordering::Relaxed) {
                version += 1;
                let mut s = cache.lock();
                // Churn among the cold keys.
                let k = (version as u32 * 7919) % ITEMS;
                if !hot.contains(&k) {
                    s.store(
                        format!("k{k}").as_bytes(),
                        k,
                        0,
                        &[&value(k, version)],
                        None,
                        NOW,
                    )
                    .unwrap();
                }
                if rewrite_hot.load(Ordering::Relaxed) {
                    let k = hot[version as usize % hot.len()];
                    s.store(
                        format!("k{k}").as_bytes(),
                        k,
                        0,
                        &[&value(k, version)],
                        None,
                        NOW,
                    )
                    .unwrap();
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    // From now on the hot items stay where placement puts them.
    rewrite_hot.store(false, Ordering::Relaxed);
    let on_huge = |cache: &Cache| -> (usize, Vec<u32>) {
        let mut s = cache.lock();
        let mut missing = Vec::new();
        for &k in &hot {
            let id = s.lookup(format!("k{k}").as_bytes(), NOW).unwrap();
            let at = mem.base.as_ptr() as usize + id.page() as usize * PAGE;
            if huge_mapped_bytes(PageRange::new(at, at + PAGE)).unwrap_or(0) != PAGE {
                missing.push(k);
            }
        }
        (hot.len() - missing.len(), missing)
    };
    let t0 = Instant::now();
    let mut last = on_huge(&cache);
    while !last.1.is_empty() && t0.elapsed() < Duration::from_secs(90) {
        std::thread::sleep(Duration::from_millis(200));
        last = on_huge(&cache);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader saw a wrong value");
    }
    writer.join().unwrap();
    let st = placement.status();
    let s = cache.lock();
    eprintln!(
        "{} of {} hot items on huge pages after {:.1} s; {} reads; moved {} items, vacated {} pages, hot area pages used {:?}; manager: {:?}",
        last.0,
        hot.len(),
        t0.elapsed().as_secs_f64(),
        reads.load(Ordering::Relaxed),
        s.counters.hot_items_moved,
        s.counters.hot_pages_vacated,
        s.slabs().hot_pages(),
        st
    );
    assert!(
        last.1.is_empty(),
        "hot keys not on huge pages: {:?}",
        last.1
    );
    assert!(s.counters.hot_items_moved > 0, "nothing was compacted");
    // Every item, hot or cold, still reads back whole.
    drop(s);
    let mut s = cache.lock();
    for k in 0..ITEMS {
        if let Some(id) = s.lookup(format!("k{k}").as_bytes(), NOW) {
            check(k, s.view(id).value);
        }
    }
    assert_eq!(
        s.len(),
        ITEMS as usize,
        "no item lost (memory never ran out)"
    );
    drop(s);
    drop(placement);
}
