//! Power cuts during a cache's checkpoints, on the `sim` medium (simulated persistent memory):
//! the power is cut at every ordering point (flush and fence) of a run of cache operations and
//! checkpoints, and every crash image the cut could leave (every subset of in-flight cache
//! lines where few, else both extremes and random images with torn 8-byte words and evicted
//! unflushed lines) is recovered and restored as `kioku-cache --pool` does. The cache must hold
//! exactly the items — key, value, flags, expiry — of the last checkpoint whose commit was
//! durable (or of the one being taken, if its commit may have reached the media), with the
//! checkpoint's own LRU lists, and keep working.

use std::collections::BTreeMap;
use std::ptr::NonNull;

use kioku_cache::{CacheMeta, Memory, Slabs, Store};
use kioku_ckpt::{Engine, RegionOptions};
use kioku_pool::media::sim::{SimControl, SimMedium};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Slab page size (what `-I 64k` gives) and item memory (`-m 3`).
const PAGE: usize = 1 << 20;
const MEM: usize = 3 * PAGE;
const FACTOR: f64 = 1.25;
/// The wall clock of the run; restores happen 50 s later.
const NOW: i64 = 1_800_000_000;
const LATER: i64 = NOW + 50;

/// Key -> (flags, absolute expiry, value) of the live items.
type Model = BTreeMap<Vec<u8>, (u32, i64, Vec<u8>)>;

fn memory(engine: &Engine) -> Memory {
    let r = engine.region("items").expect("the item region");
    assert_eq!(r.len, MEM);
    Memory {
        base: NonNull::new(r.as_ptr()).expect("a region is never at address 0"),
        len: r.len,
    }
}

/// One epoch of cache traffic: stores (new keys and overwrites, three size classes, some
/// expiring before the restore), deletes, reads that reorder the LRU lists.
fn traffic(store: &mut Store, model: &mut Model, rng: &mut ChaCha8Rng) {
    for _ in 0..40 {
        let key = format!("key{}", rng.gen_range(0..60)).into_bytes();
        match rng.gen_range(0..10) {
            0..=5 => {
                let len = [20, 300, 3000][rng.gen_range(0..3)];
                let byte = rng.gen::<u8>();
                let value = vec![byte; len];
                let flags = rng.gen::<u32>();
                let exptime = if rng.gen_range(0..8) == 0 {
                    NOW + 10
                } else {
                    0
                };
                store
                    .store(&key, flags, exptime, &[&value], None, NOW)
                    .expect("room for every item");
                model.insert(key, (flags, exptime, value));
            }
            6..=7 => {
                if let Some(id) = store.lookup(&key, NOW) {
                    store.unlink(id);
                }
                model.remove(&key);
            }
            _ => {
                if let Some(id) = store.lookup(&key, NOW) {
                    store.fetched(id, NOW, true);
                }
            }
        }
    }
}

/// What a run left: the sim medium's control, the model after each checkpoint (index =
/// epoch), each checkpoint's span of ordering points, and the first ordering point counted.
struct Run {
    ctl: SimControl,
    models: Vec<Model>,
    spans: Vec<(u64, u64)>,
    start: u64,
}

/// `epochs` epochs of traffic, each ended by a checkpoint, with the power cut at ordering point
/// `cut` (counted from the first epoch's start) if given.
fn run(base: usize, seed: u64, epochs: u64, cut: Option<u64>) -> Run {
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let mut engine = Engine::create_on(Box::new(sim)).unwrap();
    let opts = RegionOptions {
        addr: Some(base),
        reserve: Some(MEM),
    };
    engine.create_region("items", MEM, opts).unwrap();
    let mut store = Store::new(Slabs::new(memory(&engine), PAGE, FACTOR), true);
    let start = ctl.ordering_points();
    if let Some(c) = cut {
        ctl.cut_power_at(start + c);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut model, mut models, mut spans) = (Model::new(), vec![Model::new()], vec![(0, 0)]);
    for _ in 0..epochs {
        traffic(&mut store, &mut model, &mut rng);
        let before = ctl.ordering_points();
        engine
            .checkpoint(&CacheMeta::of(&store, FACTOR).encode())
            .unwrap();
        spans.push((before, ctl.ordering_points()));
        models.push(model.clone());
    }
    drop(store);
    drop(engine);
    Run {
        ctl,
        models,
        spans,
        start,
    }
}

/// The epochs a cut at absolute ordering point `p` may leave.
fn allowed(p: u64, spans: &[(u64, u64)]) -> (u64, u64) {
    let done = spans.iter().skip(1).filter(|&&(_, a)| a <= p).count() as u64;
    let inside = spans.iter().skip(1).any(|&(b, a)| b <= p && p < a);
    (done, done + inside as u64)
}

/// Recover `image`, restore the cache from it as the server does, and check it against the
/// model of the epoch recovered (which must lie in `lo..=hi`). Returns that epoch.
fn restore_and_check(image: Vec<u8>, models: &[Model], lo: u64, hi: u64, what: &str) -> u64 {
    let sim = SimMedium::from_image(image).unwrap();
    let (engine, rec) = Engine::recover_on(Box::new(sim))
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let epoch = rec.epoch;
    assert!(
        (lo..=hi).contains(&epoch),
        "{what}: recovered epoch {epoch}, allowed {lo}..={hi}"
    );
    let mut want = models[epoch as usize].clone();
    want.retain(|_, (_, exptime, _)| *exptime == 0 || *exptime > LATER);
    let mut engine = engine;
    let mut store = if epoch == 0 {
        // No checkpoint was durable: the server makes its region again and starts empty.
        if engine.region("items").is_none() {
            let opts = RegionOptions {
                addr: Some(0x2500_0000_0000),
                reserve: Some(MEM),
            };
            engine.create_region("items", MEM, opts).unwrap();
        }
        Store::new(Slabs::new(memory(&engine), PAGE, FACTOR), true)
    } else {
        let mem = memory(&engine);
        let meta = CacheMeta::decode(&rec.metadata)
            .unwrap_or_else(|e| panic!("{what}: metadata of epoch {epoch}: {e}"));
        let (page_class, next_page) = (&meta.page_class, meta.next_page);
        let restored = Slabs::restore(
            mem,
            PAGE,
            FACTOR,
            page_class,
            next_page,
            meta.lru.as_deref(),
        )
        .unwrap_or_else(|e| panic!("{what}: slab table refused: {e}"));
        assert!(
            restored.lru_adopted,
            "{what}: a checkpoint's LRU lists must check out"
        );
        Store::rebuild(restored, true, meta.next_cas, LATER)
    };
    assert_eq!(store.len(), want.len(), "{what}: items of epoch {epoch}");
    for (key, (flags, exptime, value)) in &want {
        let id = store
            .lookup(key, LATER)
            .unwrap_or_else(|| panic!("{what}: {} missing", String::from_utf8_lossy(key)));
        let v = store.view(id);
        assert_eq!(
            (v.header.flags, v.header.exptime, v.value),
            (*flags, *exptime, &value[..]),
            "{what}: {}",
            String::from_utf8_lossy(key)
        );
    }
    // It keeps working: a store evicting nothing, and the new item reads back.
    store
        .store(b"after", 1, 0, &[b"restart"], None, LATER)
        .unwrap();
    let id = store.lookup(b"after", LATER).unwrap();
    assert_eq!(store.view(id).value, b"restart");
    drop(store);
    drop(engine);
    epoch
}

#[test]
fn power_cut_at_every_ordering_point_of_cache_checkpoints() {
    // `make soak-cache` runs more traffic seeds.
    let seeds: u64 = std::env::var("KIOKU_CACHE_POWER_CUT_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in 16..16 + seeds {
        power_cuts_of_one_run(seed);
    }
}

fn power_cuts_of_one_run(seed: u64) {
    let base = 0x2400_0000_0000;
    let epochs = 4;
    let full = run(base, seed, epochs, None);
    let total = full.ctl.ordering_points() - full.start;
    drop(full);
    let mut seen = std::collections::BTreeSet::new();
    let mut images = 0;
    for p in 0..=total {
        let r = run(base, seed, epochs, Some(p));
        let (lo, hi) = allowed(r.start + p, &r.spans);
        for img in r.ctl.crash_image_sample(4).unwrap() {
            seen.insert(restore_and_check(
                img,
                &r.models,
                lo,
                hi,
                &format!("seed {seed}, cut at {p}"),
            ));
            images += 1;
        }
    }
    assert_eq!(seen.len() as u64, epochs + 1, "every epoch reachable");
    eprintln!(
        "seed {seed}: {} ordering points, {images} crash images restored",
        total + 1
    );
}
