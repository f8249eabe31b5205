//! Power cuts on the `sim` medium at every ordering point (flush and fence) of checkpoints and
//! of recovery, and ≥ 10,000 random crash states: recovery must restore exactly the last
//! checkpoint whose flip was durable (or the one being taken, if its flip may have reached
//! media) — every region, every byte, and the metadata.

mod common;

use common::*;
use kioku_ckpt::Engine;
use kioku_pool::media::sim::{CrashMode, SimControl, SimMedium};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Runs `epochs` checkpoints of the workload on a fresh sim pool, with the power cut at
/// ordering point `cut` (counted from the first checkpoint's start) if given. Returns the
/// control, the model of every epoch and each checkpoint's span of ordering points.
fn run(
    base: usize,
    seed: u64,
    epochs: u64,
    cut: Option<u64>,
) -> (SimControl, Vec<Model>, Vec<(u64, u64)>, u64) {
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let mut engine = Engine::create_on(Box::new(sim)).unwrap();
    let start = ctl.ordering_points();
    if let Some(c) = cut {
        ctl.cut_power_at(start + c);
    }
    let mut models = vec![Model::new()];
    let mut spans = vec![(0, 0)];
    let (mut model, mut at) = (Model::new(), 0);
    for _ in 0..epochs {
        let before = ctl.ordering_points();
        let e = run_epoch(&mut engine, base, seed);
        spans.push((before, ctl.ordering_points()));
        advance_model(&mut model, &mut at, e, seed);
        assert_matches(&engine, &model, "running engine");
        models.push(model.clone());
    }
    drop(engine);
    (ctl, models, spans, start)
}

/// The epochs a cut at absolute ordering point `p` may leave.
fn allowed(p: u64, spans: &[(u64, u64)]) -> (u64, u64) {
    let done = spans
        .iter()
        .skip(1)
        .filter(|&&(_, after)| after <= p)
        .count() as u64;
    let inside = spans.iter().skip(1).any(|&(b, a)| b <= p && p < a);
    (done, done + inside as u64)
}

fn images(ctl: &SimControl, randoms: u64) -> Vec<Vec<u8>> {
    ctl.crash_image_sample(randoms).unwrap()
}

fn recover_and_check(image: Vec<u8>, models: &[Model], lo: u64, hi: u64, what: &str) -> u64 {
    let (engine, rec) = Engine::recover_on(Box::new(SimMedium::from_image(image).unwrap()))
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let e = rec.epoch;
    assert!(
        lo <= e && e <= hi,
        "{what}: recovered epoch {e}, allowed {lo}..={hi}"
    );
    if e > 0 {
        assert_eq!(rec.metadata, e.to_le_bytes(), "{what}: metadata");
    }
    assert_matches(&engine, &models[e as usize], what);
    e
}

#[test]
fn crash_at_every_ordering_point_of_checkpoints() {
    let base = 0x2100_0000_0000;
    let (seed, epochs) = (11, 6);
    let (ctl, _, _, start) = run(base, seed, epochs, None);
    let total = ctl.ordering_points() - start;
    let mut checked = 0;
    let mut seen = std::collections::BTreeSet::new();
    for p in 0..=total {
        let (ctl, models, spans, start) = run(base, seed, epochs, Some(p));
        let (lo, hi) = allowed(start + p, &spans);
        for img in images(&ctl, 8) {
            seen.insert(recover_and_check(
                img,
                &models,
                lo,
                hi,
                &format!("cut at {p}"),
            ));
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
fn crash_at_every_ordering_point_of_recovery() {
    let base = 0x2200_0000_0000;
    let (seed, epochs) = (12, 4);
    // A crash in the middle of the 4th checkpoint leaves work for recovery (sync of the other
    // context); cut recovery at each of its ordering points, then recover again.
    let (ctl, _, spans, _) = run(base, seed, epochs, None);
    let mid = (spans[4].0 + spans[4].1) / 2;
    let (ctl2, models, spans, _) = run(base, seed, epochs, Some(mid - spans[1].0));
    drop(ctl);
    let (lo, hi) = allowed(mid, &spans);
    let mut checked = 0;
    for img in images(&ctl2, 4) {
        // Count recovery's ordering points once.
        let sim = SimMedium::from_image(img.clone()).unwrap();
        let c = sim.control();
        let (eng, rec) = Engine::recover_on(Box::new(sim)).unwrap();
        let points = c.ordering_points();
        let expect = rec.epoch;
        drop(eng);
        for q in 0..=points {
            let sim = SimMedium::from_image(img.clone()).unwrap();
            let c = sim.control();
            c.cut_power_at(q);
            drop(Engine::recover_on(Box::new(sim)).unwrap());
            for img2 in images(&c, 4) {
                let e = recover_and_check(img2, &models, lo, hi, &format!("recovery cut at {q}"));
                assert_eq!(
                    e, expect,
                    "a crash during recovery changed the recovered epoch"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
    eprintln!("{checked} crash images of interrupted recoveries recovered");
}

#[test]
fn random_crash_states() {
    let base = 0x2300_0000_0000;
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let mut states = 0;
    while states < 10_000 {
        let seed = rng.gen();
        let epochs = rng.gen_range(1..=8);
        let (ctl, _, _, start) = run(base, seed, epochs, None);
        let p = rng.gen_range(0..=ctl.ordering_points() - start);
        let (ctl, models, spans, start) = run(base, seed, epochs, Some(p));
        let (lo, hi) = allowed(start + p, &spans);
        for i in 0..25u64 {
            let mode = CrashMode::Random {
                seed: seed ^ i,
                tear_words: i % 2 == 0,
                evict_unflushed: i % 3 != 0,
            };
            recover_and_check(
                ctl.crash(mode).unwrap(),
                &models,
                lo,
                hi,
                &format!("seed {seed} cut {p} image {i}"),
            );
            states += 1;
        }
    }
    eprintln!("{states} random crash states recovered");
}

/// Four checkpoints, then the fifth epoch's changes prepared but not finished (a group that
/// never agreed), with the power cut at ordering point `cut` of the prepare if given.
fn run_prepared(base: usize, seed: u64, cut: Option<u64>) -> (SimControl, Vec<Model>, u64) {
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let mut engine = Engine::create_on(Box::new(sim)).unwrap();
    let mut models = vec![Model::new()];
    let (mut model, mut at) = (Model::new(), 0);
    for _ in 0..4 {
        let e = run_epoch(&mut engine, base, seed);
        advance_model(&mut model, &mut at, e, seed);
        models.push(model.clone());
    }
    let shape = engine
        .regions()
        .into_iter()
        .map(|r| (r.name, r.len))
        .collect();
    apply_to_engine(&mut engine, base, &plan(seed, 5, &shape));
    advance_model(&mut model, &mut at, 5, seed);
    models.push(model);
    let start = ctl.ordering_points();
    if let Some(c) = cut {
        ctl.cut_power_at(start + c);
    }
    engine.prepare(&5u64.to_le_bytes()).unwrap();
    let points = ctl.ordering_points() - start;
    drop(engine);
    (ctl, models, points)
}

#[test]
fn crash_at_every_ordering_point_of_prepare_and_of_its_rollback() {
    let base = 0x2400_0000_0000;
    let seed = 14;
    let (_, _, points) = run_prepared(base, seed, None);
    let mut checked = 0;
    for p in 0..=points {
        let (ctl, models, _) = run_prepared(base, seed, Some(p));
        for img in images(&ctl, 6) {
            // Rolled back: always the fourth checkpoint.
            let sim = SimMedium::from_image(img.clone()).unwrap();
            let (e, rec) = Engine::recover_on_with(Box::new(sim), true)
                .unwrap_or_else(|e| panic!("cut at {p}: rollback failed: {e}"));
            assert_eq!(rec.epoch, 4, "cut at {p}: rollback");
            assert_eq!(rec.metadata, 4u64.to_le_bytes());
            assert_matches(&e, &models[4], &format!("cut at {p}, rolled back"));
            drop(e);
            // Rolled forward: the fourth, or the fifth once its commit reached media.
            let got = recover_and_check(img, &models, 4, 5, &format!("cut at {p}"));
            assert!(got == 5 || p < points, "an uncut prepare is durable");
            checked += 1;
        }
    }
    // A rollback cut at each of its own ordering points, then done again.
    let (ctl, models, _) = run_prepared(base, seed, None);
    let img = images(&ctl, 0).pop().unwrap();
    let sim = SimMedium::from_image(img.clone()).unwrap();
    let c = sim.control();
    drop(Engine::recover_on_with(Box::new(sim), true).unwrap());
    for q in 0..=c.ordering_points() {
        let sim = SimMedium::from_image(img.clone()).unwrap();
        let c = sim.control();
        c.cut_power_at(q);
        drop(Engine::recover_on_with(Box::new(sim), true).unwrap());
        for img2 in images(&c, 4) {
            let sim = SimMedium::from_image(img2).unwrap();
            let (e, rec) = Engine::recover_on_with(Box::new(sim), true).unwrap();
            assert_eq!(rec.epoch, 4, "rollback cut at {q}");
            assert_matches(&e, &models[4], &format!("rollback cut at {q}"));
            checked += 1;
        }
    }
    eprintln!("{checked} crash images of prepared checkpoints recovered");
}

/// `EngineOptions::lazy_recovery`: the valid context's bytes are the checkpoint's before anything
/// is verified or synced, a crash before `finish_recovery` recovers the same epoch, and so does a
/// power cut at every ordering point of the `finish_recovery` that completes it.
#[test]
fn a_lazy_recovery_changes_nothing_until_finished_and_its_finish_is_crash_safe() {
    use kioku_ckpt::{EngineOptions, SelfSpace};
    use kioku_pool::{OpenOptions, Pool};
    let base = 0x2400_0000_0000;
    let (seed, epochs) = (14, 4);
    // A crash in the middle of the 4th checkpoint leaves the other context to sync.
    let (ctl, _, spans, _) = run(base, seed, epochs, None);
    let mid = (spans[4].0 + spans[4].1) / 2;
    let (ctl2, models, spans, _) = run(base, seed, epochs, Some(mid - spans[1].0));
    drop(ctl);
    let (lo, hi) = allowed(mid, &spans);
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
        let (eng, rec) = Engine::recover_in_opts(pool, SelfSpace, &opts).unwrap();
        (eng, rec, c)
    };
    let mut checked = 0;
    for img in images(&ctl2, 2) {
        let (eng, rec, c) = lazily(&img);
        assert!(eng.recovery_pending());
        // The checkpoint's bytes, before anything was verified or synced.
        for (name, bytes) in &models[rec.epoch as usize] {
            let got = eng.committed(name).expect("committed bytes");
            assert!(
                got == &bytes[..got.len()] && bytes[got.len()..].iter().all(|&b| b == 0),
                "lazy recovery: region {name}'s valid context differs from epoch {}",
                rec.epoch
            );
        }
        // A crash now recovers the same epoch.
        let now = c.crash(CrashMode::DrainedOnly).unwrap();
        drop(eng);
        let e = recover_and_check(now, &models, lo, hi, "after a lazy recovery");
        assert_eq!(e, rec.epoch);
        let (mut eng, _, c) = lazily(&img);
        let at_recovery = c.ordering_points();
        eng.finish_recovery().unwrap();
        assert!(!eng.recovery_pending());
        assert_matches(&eng, &models[rec.epoch as usize], "finished lazy recovery");
        let points = c.ordering_points() - at_recovery;
        drop(eng);
        for q in 0..=points {
            let (mut eng, _, c) = lazily(&img);
            c.cut_power_at(c.ordering_points() + q);
            let _ = eng.finish_recovery();
            drop(eng);
            for img2 in images(&c, 4) {
                let e = recover_and_check(img2, &models, lo, hi, &format!("finish cut at {q}"));
                assert_eq!(e, rec.epoch, "a crash while finishing changed the epoch");
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
    eprintln!("{checked} crash images of interrupted lazy recoveries recovered");
}
