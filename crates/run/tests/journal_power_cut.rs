//! Power cuts on the `sim` medium at every ordering point of the file journal — appending
//! records, publishing new segments, `committed`, and, at a restore, `apply` and `reset` —
//! with every image a cut there can leave (or torn and evicted random ones when there are too
//! many): each must open and return the files to exactly the snapshot of the checkpoint the
//! pool's commit names.

mod journal_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use journal_common::*;
use kioku_pool::media::sim::{CrashMode, SimControl, SimMedium};
use kioku_pool::{CreateOptions, OpenOptions, Pool};
use kioku_run::journal::{Journal, JournalOptions};

const EPOCHS: u64 = 3;
const STEPS: usize = 14;

fn opts(dir: &Path) -> JournalOptions {
    JournalOptions {
        // Small segments: the workload fills several, so switching and recycling are cut too.
        segment_len: 64 << 10,
        spare_segments: 1,
        stash_dir: Some(dir.join(".kioku-stash")),
    }
}

/// What a checkpoint must bring back: the tree, and deleted files held open (in the stash).
#[derive(Clone)]
struct Expect {
    tree: Snapshot,
    held: Vec<(PathBuf, Vec<u8>)>,
}

/// Runs the program (the workload) with checkpoints on a fresh sim pool, the power cut at
/// ordering point `cut` (counted from the journal's creation) if given; returns the control
/// and what each epoch must restore. Stops where the journal or the pool fails (strict
/// medium), as a program whose monitor died.
fn run_program(
    root: &Path,
    seed: u64,
    cut: Option<u64>,
) -> (SimControl, BTreeMap<u64, Expect>, u64) {
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let mut pool = Pool::create_on(Box::new(sim), &CreateOptions::new("kioku.test")).unwrap();
    pool.commit(&[0]).unwrap();
    let start = ctl.ordering_points();
    if let Some(c) = cut {
        ctl.cut_power_at(start + c);
        ctl.set_strict(true);
    }
    let mut expect = BTreeMap::new();
    let mut work = Work::new(root, seed);
    let Ok(mut j) = Journal::create(&mut pool, opts(root)) else {
        return (ctl, expect, start);
    };
    'run: for e in 1..=EPOCHS + 1 {
        for _ in 0..STEPS {
            if work.step(&mut j, &mut pool).is_err() {
                break 'run;
            }
        }
        // The capture stop of checkpoint e.
        j.begin_epoch(e);
        expect.insert(
            e,
            Expect {
                tree: snapshot(root),
                held: work.deleted_held(&j),
            },
        );
        // The program runs on before the commit.
        for _ in 0..STEPS / 3 {
            if work.step(&mut j, &mut pool).is_err() {
                break 'run;
            }
        }
        if e == EPOCHS + 1 {
            break; // killed before this checkpoint commits
        }
        j.sync_files().unwrap();
        if pool.commit(&[e]).is_err() {
            break;
        }
        if j.committed(&mut pool, e).is_err() {
            break;
        }
    }
    drop(work); // the program dies
    (ctl, expect, start)
}

/// Restores the files from `image` and checks them against the checkpoint its commit names.
/// Returns the epoch.
fn restore_and_check(
    root: &Path,
    image: Vec<u8>,
    expect: &BTreeMap<u64, Expect>,
    what: &str,
) -> u64 {
    let mut pool = Pool::open_on(
        Box::new(SimMedium::from_image(image).unwrap()),
        &OpenOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{what}: pool: {e}"));
    let epoch = pool.roots()[0];
    if epoch == 0 {
        return 0; // no checkpoint: nothing to restore
    }
    let mut j =
        Journal::open_with(&mut pool, opts(root)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    j.check(&mut pool, epoch)
        .unwrap_or_else(|e| panic!("{what}: check: {e}"));
    j.apply(&mut pool, epoch)
        .unwrap_or_else(|e| panic!("{what}: apply: {e}"));
    j.reset(&mut pool, epoch)
        .unwrap_or_else(|e| panic!("{what}: reset: {e}"));
    verify(root, &expect[&epoch], &format!("{what}, epoch {epoch}"));
    epoch
}

fn verify(root: &Path, want: &Expect, what: &str) {
    let got = snapshot(root);
    assert!(
        got == want.tree,
        "{what}: files differ: {}",
        diff(&want.tree, &got)
    );
    for (p, data) in &want.held {
        let now = std::fs::read(p).unwrap_or_else(|e| panic!("{what}: stash {}: {e}", p.display()));
        assert!(
            &now == data,
            "{what}: deleted-but-open file {} differs",
            p.display()
        );
    }
}

fn modes() -> Vec<CrashMode> {
    vec![
        CrashMode::DrainedOnly,
        CrashMode::AllFlushed,
        CrashMode::Random {
            seed: 1,
            tear_words: true,
            evict_unflushed: true,
        },
    ]
}

#[test]
fn cut_at_every_ordering_point_of_journaling() {
    let seed = 5;
    let total = {
        let d = scratch("count");
        let (ctl, expect, start) = run_program(d.path(), seed, None);
        assert_eq!(
            expect.len() as u64,
            EPOCHS + 1,
            "the workload ran to its end"
        );
        ctl.ordering_points() - start
    };
    assert!(
        total > 100,
        "a workload worth cutting: {total} ordering points"
    );
    let mut seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    for p in 0..=total {
        for mode in modes() {
            let d = scratch("cut");
            let (ctl, expect, _) = run_program(d.path(), seed, Some(p));
            let image = ctl.crash(mode).unwrap();
            seen.insert(restore_and_check(
                d.path(),
                image,
                &expect,
                &format!("cut at {p}, {mode:?}"),
            ));
            checked += 1;
        }
    }
    assert!(
        seen.len() as u64 >= EPOCHS,
        "every committed checkpoint was restored: {seen:?}"
    );
    eprintln!(
        "{} ordering points, {checked} crash images restored exactly",
        total + 1
    );
}

#[test]
fn cut_at_every_ordering_point_of_a_restore() {
    let seed = 9;
    // Count a restore's ordering points once.
    let total = {
        let d = scratch("rcount");
        let (ctl, expect, _) = run_program(d.path(), seed, None);
        let image = ctl.crash(CrashMode::AllFlushed).unwrap();
        let sim = SimMedium::from_image(image).unwrap();
        let c = sim.control();
        let mut pool = Pool::open_on(Box::new(sim), &OpenOptions::default()).unwrap();
        let epoch = pool.roots()[0];
        let before = c.ordering_points();
        let mut j = Journal::open_with(&mut pool, opts(d.path())).unwrap();
        let st = j.apply(&mut pool, epoch).unwrap();
        j.reset(&mut pool, epoch).unwrap();
        verify(d.path(), &expect[&epoch], "uninterrupted restore");
        assert!(st.names > 0 && st.bytes > 0, "the restore had work: {st:?}");
        c.ordering_points() - before
    };
    for q in 0..=total {
        for mode in [CrashMode::DrainedOnly, CrashMode::AllFlushed] {
            let d = scratch("rcut");
            let (ctl, expect, _) = run_program(d.path(), seed, None);
            let image = ctl.crash(CrashMode::AllFlushed).unwrap();
            // The restore, cut at q: it stops at the failing flush.
            let sim = SimMedium::from_image(image).unwrap();
            let c = sim.control();
            let mut pool = Pool::open_on(Box::new(sim), &OpenOptions::default()).unwrap();
            let epoch = pool.roots()[0];
            c.cut_power_at(c.ordering_points() + q);
            c.set_strict(true);
            let mut j = Journal::open_with(&mut pool, opts(d.path())).unwrap();
            if j.apply(&mut pool, epoch).is_ok() {
                let _ = j.reset(&mut pool, epoch);
            }
            drop(j);
            drop(pool);
            // The next restore, from what the cut left.
            let what = format!("restore cut at {q}, {mode:?}");
            let e = restore_and_check(d.path(), c.crash(mode).unwrap(), &expect, &what);
            assert_eq!(e, epoch, "{what}");
        }
    }
    eprintln!("{} ordering points of a restore cut", total + 1);
}

#[test]
fn random_cuts_and_random_images() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(77);
    for round in 0..40 {
        let seed = 100 + round;
        let d = scratch("rand");
        let (ctl, _, start) = run_program(d.path(), seed, None);
        let total = ctl.ordering_points() - start;
        drop(d);
        let p = rng.gen_range(0..=total);
        let d = scratch("rand");
        let (ctl, expect, _) = run_program(d.path(), seed, Some(p));
        let mode = CrashMode::Random {
            seed: rng.gen(),
            tear_words: true,
            evict_unflushed: true,
        };
        let image = ctl.crash(mode).unwrap();
        restore_and_check(
            d.path(),
            image,
            &expect,
            &format!("round {round}, cut at {p}"),
        );
    }
}
