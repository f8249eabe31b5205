//! Sparse engines (`Engine::set_sparse`): space only for pages that hold data, in both
//! contexts; a page that becomes zero again is a hole again; recovery reads no hole (on tmpfs,
//! reading fills it) — and power cuts at every ordering point of sparse checkpoints (pages
//! zeroed, regions grown, shrunk, moved and deleted) still recover exactly.

mod common;

use common::*;
use kioku_ckpt::{Engine, EngineOptions, RegionOptions};
use kioku_pool::media::sim::{SimControl, SimMedium};
use kioku_pool::media::{MediumChoice, MediumKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::os::unix::fs::MetadataExt;

const MIB: usize = 1 << 20;

fn allocated(path: &std::path::Path) -> usize {
    std::fs::metadata(path).unwrap().blocks() as usize * 512
}

/// Pages of `name` written in one epoch: some filled with zeros (they become holes again).
fn zero_fills(seed: u64, epoch: u64, model: &Model) -> Vec<Op> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5a5a ^ epoch.wrapping_mul(77));
    let names: Vec<&String> = model.keys().collect();
    if names.is_empty() {
        return vec![];
    }
    (0..rng.gen_range(0..4))
        .map(|_| {
            let name = names[rng.gen_range(0..names.len())].clone();
            let page = rng.gen_range(0..model[&name].len() / PAGE);
            Op::Fill {
                name,
                page,
                byte: 0,
            }
        })
        .collect()
}

/// Applies the epoch's `ops` as a sparse engine's owner does: the regions' shapes changed, then
/// every page the epoch touched stored whole, as it is now in `model`, after reserving its
/// space (the running context holds only the epoch's pages, so a store of a few bytes would
/// lose the rest of the page).
fn apply_sparse(engine: &mut Engine, base: usize, model: &Model, ops: &[Op]) {
    let mut touched = std::collections::BTreeSet::new();
    for op in ops {
        match op {
            Op::Write { name, at, .. } => {
                touched.insert((name.clone(), at / PAGE));
            }
            Op::Fill { name, page, .. } => {
                touched.insert((name.clone(), *page));
            }
            _ => apply_to_engine(engine, base, std::slice::from_ref(op)),
        }
    }
    for (name, p) in touched {
        let Some(bytes) = model.get(&name) else {
            continue;
        };
        if (p + 1) * PAGE > bytes.len() {
            continue;
        }
        let r = engine.region(&name).unwrap();
        let page = &bytes[p * PAGE..(p + 1) * PAGE];
        if p % 2 == 1 {
            // As the process monitor's staging does: stored by the engine, which keeps the
            // page's checksum (the checkpoint does not read it back); marked written by hand
            // (the store does not go through the region's tracked mapping).
            engine.store_running(r.addr + p * PAGE, page).unwrap();
            engine.mark_written(&name, p, 1).unwrap();
            continue;
        }
        engine
            .allocate_running(&[(r.addr + p * PAGE, PAGE)])
            .unwrap();
        region_mem(engine, &name)[p * PAGE..(p + 1) * PAGE].copy_from_slice(page);
    }
}

/// Asserts that the engine's last checkpoint (the valid context) holds exactly `model`.
fn assert_committed(engine: &Engine, model: &Model, what: &str) {
    let names: std::collections::BTreeSet<String> =
        engine.regions().into_iter().map(|r| r.name).collect();
    assert_eq!(names, model.keys().cloned().collect(), "{what}: regions");
    for (name, bytes) in model {
        let got = engine
            .committed(name)
            .unwrap_or_else(|| panic!("{what}: {name} uncommitted"));
        if got != bytes.as_slice() {
            let first = got.iter().zip(bytes).position(|(a, b)| a != b);
            panic!(
                "{what}: region {name} differs (len {} vs {}, first difference at {first:?})",
                got.len(),
                bytes.len()
            );
        }
    }
}

/// `keep`: the engine keeps its running pages (`Engine::set_keep_running`).
fn run(
    base: usize,
    seed: u64,
    epochs: u64,
    cut: Option<u64>,
    keep: bool,
) -> (SimControl, Vec<Model>, u64) {
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let mut engine = Engine::create_on(Box::new(sim)).unwrap();
    engine.set_sparse(true).unwrap();
    engine.set_keep_running(keep);
    let start = ctl.ordering_points();
    if let Some(c) = cut {
        ctl.cut_power_at(start + c);
    }
    let mut models = vec![Model::new()];
    let mut model = Model::new();
    for epoch in 1..=epochs {
        let mut ops = plan(seed, epoch, &shape_of(&model));
        apply_to_model(&mut model, &ops);
        let zeros = zero_fills(seed, epoch, &model);
        apply_to_model(&mut model, &zeros);
        ops.extend(zeros);
        apply_sparse(&mut engine, base, &model, &ops);
        if engine.checkpoint(&epoch.to_le_bytes()).is_err() {
            // The power is off from here on: nothing more becomes durable.
            break;
        }
        assert_committed(&engine, &model, "running engine");
        models.push(model.clone());
    }
    // Models of the epochs not reached, so every index exists.
    while models.len() <= epochs as usize {
        let epoch = models.len() as u64;
        let mut m = models.last().unwrap().clone();
        let ops = plan(seed, epoch, &shape_of(&m));
        apply_to_model(&mut m, &ops);
        let zeros = zero_fills(seed, epoch, &m);
        apply_to_model(&mut m, &zeros);
        models.push(m);
    }
    drop(engine);
    (ctl, models, start)
}

#[test]
fn crash_at_every_ordering_point_of_sparse_checkpoints() {
    crash_at_every_ordering_point(0x2600_0000_0000, 21, false);
}

/// The same with the running context's pages kept between checkpoints.
#[test]
fn crash_at_every_ordering_point_of_sparse_checkpoints_keeping_running_pages() {
    crash_at_every_ordering_point(0x2800_0000_0000, 22, true);
}

fn crash_at_every_ordering_point(base: usize, seed: u64, keep: bool) {
    let epochs = 5;
    let (ctl, _, start) = run(base, seed, epochs, None, keep);
    let total = ctl.ordering_points() - start;
    let mut checked = 0;
    let mut seen = std::collections::BTreeSet::new();
    for p in 0..=total {
        let (ctl, models, _) = run(base, seed, epochs, Some(p), keep);
        for img in ctl.crash_image_sample(4).unwrap() {
            let (engine, rec) = Engine::recover_on(Box::new(SimMedium::from_image(img).unwrap()))
                .unwrap_or_else(|e| panic!("cut at {p}: recovery failed: {e}"));
            let e = rec.epoch;
            if e > 0 {
                assert_eq!(rec.metadata, e.to_le_bytes(), "cut at {p}: metadata");
            }
            assert_committed(&engine, &models[e as usize], &format!("cut at {p}"));
            seen.insert(e);
            checked += 1;
        }
    }
    assert_eq!(seen.len() as u64, epochs + 1, "every epoch reachable");
    eprintln!(
        "{} ordering points, {checked} crash images recovered",
        total + 1
    );
}

#[test]
fn a_sparse_engine_on_tmpfs_takes_space_for_data_only_and_recovery_keeps_holes() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) to put a pool on");
        return;
    };
    let path = dir.path().join("s.pool");
    let opts = EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::Shm),
        ..Default::default()
    };
    let mut engine = Engine::create(&path, &opts).unwrap();
    engine.set_sparse(true).unwrap();
    let base = allocated(&path);
    // 256 MiB region, 4 MiB of it written.
    let r = engine
        .create_region(
            "big",
            256 * MIB,
            RegionOptions {
                addr: None,
                reserve: Some(256 * MIB),
            },
        )
        .unwrap();
    let written = 4 * MIB;
    engine.allocate_running(&[(r.addr, written)]).unwrap();
    // SAFETY: the region is mapped for its length while the engine lives.
    let mem = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), r.len) };
    for (i, b) in mem[..written].iter_mut().enumerate() {
        *b = (i % 251) as u8 + 1;
    }
    engine.checkpoint(b"one").unwrap();
    let used = allocated(&path) - base;
    // One copy of the 4 MiB (the running context is emptied once the other one is valid),
    // the page checksums (4 bytes a page, in two metadata blocks) and the metadata.
    assert!(
        used <= written + MIB,
        "256 MiB region with 4 MiB written: {used} bytes allocated"
    );
    // Half of it zero again: holes again, in both contexts.
    mem[..written / 2].fill(0);
    engine.checkpoint(b"two").unwrap();
    let after = allocated(&path) - base;
    assert!(
        after + written / 2 <= used + MIB / 4,
        "zeroed pages were given back: {used} then {after} bytes"
    );
    assert!(engine.contexts_differ().is_empty());
    drop(engine);
    // Recovery verifies every page and syncs the contexts without filling a hole.
    let (engine, rec) = Engine::recover(&path, &opts).unwrap();
    assert_eq!(rec.metadata, b"two");
    let again = allocated(&path) - base;
    assert!(
        again <= after + MIB / 2,
        "recovery filled holes: {after} then {again} bytes"
    );
    // The checkpoint is the valid context's (the running one starts empty).
    let mem = engine.committed("big").unwrap();
    assert!(mem[..written / 2].iter().all(|&b| b == 0));
    assert!(mem[written / 2..written]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i + written / 2) % 251) as u8 + 1));
}

/// A lazy recovery (`EngineOptions::lazy_recovery`, what a restore by mapping uses) of a sparse
/// pool cut at every ordering point of its checkpoints: before anything is verified or synced,
/// each page taken as a lazy restore takes it — the valid context's when it matches its
/// checksum (a hole, never read, when that checksum is zero's), else the other context's —
/// is the recovered checkpoint's; `finish_recovery` then leaves exactly that checkpoint with
/// the running context empty, and a power cut at every ordering point of it recovers the same
/// epoch again.
#[test]
fn a_lazy_recovery_of_sparse_checkpoints_cut_anywhere_gives_each_page_and_finishes_crash_safe() {
    use kioku_pool::{OpenOptions, Pool};
    let base = 0x2700_0000_0000;
    let (seed, epochs) = (23, 4);
    let (ctl, _, start) = run(base, seed, epochs, None, true);
    let total = ctl.ordering_points() - start;
    let lazily = |img: &[u8]| {
        let sim = SimMedium::from_image(img.to_vec()).unwrap();
        let c = sim.control();
        let o = OpenOptions {
            kind: Some(kioku_ckpt::POOL_KIND.into()),
            ..Default::default()
        };
        let pool = Pool::open_on(Box::new(sim), &o).unwrap();
        let opts = EngineOptions {
            lazy_recovery: true,
            ..Default::default()
        };
        let (mut eng, rec) = Engine::recover_in_opts(pool, kioku_ckpt::SelfSpace, &opts)
            .unwrap_or_else(|e| panic!("lazy recovery failed: {e}"));
        eng.set_sparse(true).unwrap();
        (eng, rec, c)
    };
    let zero_crc = crc32c::crc32c(&[0u8; PAGE]);
    let (mut checked, mut cut_finishes, mut from_other) = (0, 0, 0);
    let mut seen = std::collections::BTreeSet::new();
    for p in 0..=total {
        let (ctl, models, _) = run(base, seed, epochs, Some(p), true);
        for img in ctl.crash_image_sample(2).unwrap() {
            let (mut eng, rec, c) = lazily(&img);
            let model = &models[rec.epoch as usize];
            let what = format!("cut at {p}, epoch {}", rec.epoch);
            if rec.epoch == 0 {
                continue;
            }
            assert!(eng.recovery_pending(), "{what}: recovery pending");
            for (name, bytes) in model {
                let valid = eng.committed(name).expect("committed bytes");
                let valid_data = eng.committed_data(name).unwrap();
                let other = region_mem(&eng, name);
                let other_data = eng.running_data(name).unwrap();
                let crcs = eng.page_checksums(name).unwrap();
                for (k, want) in bytes.chunks(PAGE).enumerate() {
                    let take = |b: &[u8], held: bool| -> Option<Vec<u8>> {
                        if !held {
                            return (crcs[k] == zero_crc).then(|| vec![0u8; PAGE]);
                        }
                        let b = b.get(k * PAGE..(k + 1) * PAGE)?;
                        (crc32c::crc32c(b) == crcs[k]).then(|| b.to_vec())
                    };
                    let got = match take(valid, valid_data[k]) {
                        Some(b) => b,
                        None => {
                            from_other += 1;
                            take(other, other_data[k]).unwrap_or_else(|| {
                                panic!("{what}: page {k} of {name} in neither context")
                            })
                        }
                    };
                    assert!(got == want, "{what}: page {k} of {name} differs");
                }
            }
            let at = c.ordering_points();
            eng.finish_recovery().unwrap();
            assert!(!eng.recovery_pending());
            assert_committed(&eng, model, &format!("{what}: finished"));
            // Emptied (the sim medium models a discard as zeros, not as a hole).
            for name in model.keys() {
                assert!(
                    region_mem(&eng, name).iter().all(|&b| b == 0),
                    "{what}: the running context of {name} holds pages after the recovery"
                );
            }
            let points = c.ordering_points() - at;
            drop(eng);
            seen.insert(rec.epoch);
            checked += 1;
            // Cutting every finish is slow: every 7th crash image's.
            if checked % 7 != 0 {
                continue;
            }
            for q in 0..=points {
                let (mut eng, _, c) = lazily(&img);
                c.cut_power_at(c.ordering_points() + q);
                let _ = eng.finish_recovery();
                drop(eng);
                for img2 in c.crash_image_sample(2).unwrap() {
                    let (e, r) = Engine::recover_on(Box::new(SimMedium::from_image(img2).unwrap()))
                        .unwrap_or_else(|e| panic!("{what}, finish cut at {q}: {e}"));
                    assert_eq!(r.epoch, rec.epoch, "{what}: a cut finish changed the epoch");
                    assert_committed(&e, model, &format!("{what}, finish cut at {q}"));
                    cut_finishes += 1;
                }
            }
        }
    }
    assert_eq!(seen.len() as u64, epochs, "every epoch after 0 reached");
    // (Not asserted: in this workload no crash image's valid context lacked a page — how
    // often one does depends on how much of the regions each epoch rewrites; the count is
    // reported. proc_lazy's sparse test and the engine's own recovery tests cover that case.)
    eprintln!(
        "{checked} lazy recoveries checked ({from_other} pages from the other context), {cut_finishes} crash images of cut finishes"
    );
}

/// `store_running` on tmpfs (a `pwrite`, checksums kept from the stored bytes): the checkpoint
/// holds exactly what was stored, a page made zero after its store (`zero_running`) is zero
/// in the checkpoint (its kept checksum forgotten), a store outside the regions or not of whole
/// pages is refused, and recovery verifies every page against the checksums kept.
#[test]
fn pages_stored_by_the_engine_are_checkpointed_with_checksums_of_what_was_stored() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) to put a pool on");
        return;
    };
    let path = dir.path().join("s.pool");
    let opts = EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::Shm),
        ..Default::default()
    };
    let mut engine = Engine::create(&path, &opts).unwrap();
    engine.set_sparse(true).unwrap();
    let r = engine
        .create_region(
            "r",
            MIB,
            RegionOptions {
                addr: None,
                reserve: Some(MIB),
            },
        )
        .unwrap();
    let pages = 16;
    let bytes: Vec<u8> = (0..pages * PAGE).map(|i| (i % 241) as u8 + 1).collect();
    engine.store_running(r.addr, &bytes).unwrap();
    engine.mark_written("r", 0, pages).unwrap();
    // Page 3 zeroed after its store: a hole in the checkpoint, not the stored bytes.
    engine.zero_running(&[(r.addr + 3 * PAGE, PAGE)]).unwrap();
    assert!(engine.store_running(r.addr + 1, &bytes[..PAGE]).is_err());
    assert!(engine.store_running(r.addr, &bytes[..PAGE - 8]).is_err());
    assert!(engine
        .store_running(r.addr + r.len - PAGE, &bytes[..2 * PAGE])
        .is_err());
    engine.checkpoint(b"one").unwrap();
    let mut want = bytes.clone();
    want[3 * PAGE..4 * PAGE].fill(0);
    assert_eq!(&engine.committed("r").unwrap()[..pages * PAGE], &want[..]);
    // A second epoch rewrites some pages: stored again, their new checksums kept.
    let again: Vec<u8> = (0..4 * PAGE).map(|i| (i % 13) as u8 + 7).collect();
    engine.store_running(r.addr + 8 * PAGE, &again).unwrap();
    engine.mark_written("r", 8, 4).unwrap();
    engine.checkpoint(b"two").unwrap();
    want[8 * PAGE..12 * PAGE].copy_from_slice(&again);
    assert!(engine.contexts_differ().is_empty());
    drop(engine);
    // Recovery checks every page against the kept checksums (a wrong one: ContextDamaged).
    let (engine, rec) = Engine::recover(&path, &opts).unwrap();
    assert_eq!(rec.metadata, b"two");
    assert_eq!(&engine.committed("r").unwrap()[..pages * PAGE], &want[..]);
}

/// A sparse engine keeps the running context's pages that its last two checkpoints both wrote
/// (copies of the valid context's), so a page written again and again is stored into a page
/// the file already has — and gives back, at each checkpoint, every other page: pages the
/// epoch did not write, and pages written for the first time (memory being filled, which
/// would only take space). Each checkpoint and a recovery give exactly the stored bytes.
#[test]
fn a_sparse_engine_keeps_only_the_last_checkpoints_running_pages() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) to put a pool on");
        return;
    };
    let path = dir.path().join("k.pool");
    let opts = EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::Shm),
        ..Default::default()
    };
    let mut engine = Engine::create(&path, &opts).unwrap();
    engine.set_sparse(true).unwrap();
    engine.set_keep_running(true);
    let r = engine
        .create_region(
            "m",
            16 * MIB,
            RegionOptions {
                addr: None,
                reserve: Some(16 * MIB),
            },
        )
        .unwrap();
    let pages = 16 * MIB / PAGE;
    let mut model = vec![0u8; 16 * MIB];
    let store = |engine: &mut Engine, model: &mut [u8], from: usize, to: usize, v: u8| {
        for p in from..to {
            model[p * PAGE..(p + 1) * PAGE].fill(v ^ p as u8 | 1);
        }
        engine
            .store_running(r.addr + from * PAGE, &model[from * PAGE..to * PAGE])
            .unwrap();
        engine.mark_written("m", from, to - from).unwrap();
    };
    let running = |engine: &Engine| -> Vec<usize> {
        let d = engine.running_data("m").unwrap();
        (0..pages).filter(|&p| d[p]).collect()
    };
    // The first checkpoint after `set_sparse` empties the running context.
    store(&mut engine, &mut model, 0, 1024, 1);
    engine.checkpoint(b"1").unwrap();
    assert_eq!(engine.committed("m").unwrap(), &model[..]);
    assert!(running(&engine).is_empty());
    // Pages 0..512 written again: kept after the checkpoint.
    store(&mut engine, &mut model, 0, 512, 2);
    engine.checkpoint(b"2").unwrap();
    assert_eq!(engine.committed("m").unwrap(), &model[..]);
    assert_eq!(running(&engine), (0..512).collect::<Vec<_>>());
    // 256..768 written (half of them kept pages, rewritten in place): 256..512 kept, 0..256
    // (not written) and 512..768 (written for the first time since) given back.
    store(&mut engine, &mut model, 256, 768, 3);
    engine.checkpoint(b"3").unwrap();
    assert_eq!(engine.committed("m").unwrap(), &model[..]);
    assert_eq!(running(&engine), (256..512).collect::<Vec<_>>());
    // Zeros stored over kept pages: holes in both contexts.
    model[300 * PAGE..310 * PAGE].fill(0);
    engine
        .store_running(r.addr + 300 * PAGE, &model[300 * PAGE..310 * PAGE])
        .unwrap();
    engine.mark_written("m", 300, 10).unwrap();
    engine.checkpoint(b"4").unwrap();
    assert!(running(&engine).is_empty());
    // (Before reading the valid context through its mapping, which fills holes on tmpfs.)
    assert!(engine.committed_data("m").unwrap()[300..310]
        .iter()
        .all(|&d| !d));
    assert_eq!(engine.committed("m").unwrap(), &model[..]);
    // Written for the first time in a while: not kept; written again: kept.
    store(&mut engine, &mut model, 600, 700, 5);
    engine.checkpoint(b"5").unwrap();
    assert!(running(&engine).is_empty());
    store(&mut engine, &mut model, 590, 650, 6);
    engine.checkpoint(b"6").unwrap();
    assert_eq!(running(&engine), (600..650).collect::<Vec<_>>());
    assert_eq!(engine.committed("m").unwrap(), &model[..]);
    // Rewritten pages after a crash before the checkpoint's second commit are covered by the
    // power-cut tests above; here, a recovery of the last checkpoint.
    drop(engine);
    let (engine, rec) = Engine::recover(&path, &opts).unwrap();
    assert_eq!(rec.metadata, b"6");
    assert_eq!(engine.committed("m").unwrap(), &model[..]);
}
