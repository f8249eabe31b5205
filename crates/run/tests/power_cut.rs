//! Power cuts on the `sim` medium at every ordering point (flush and fence) of a checkpoint of
//! a process *tree*, and of a restore and the checkpoint after it: every crash image must
//! restore to a tree that finishes with exactly the output of an uninterrupted run — its
//! standard output, and a file it rewrites in place through the file journal.
//!
//! The tree: a shell in a pid namespace of its own running `pi | tee digits.txt | md5sum`,
//! so four processes, pipes between them, and a file written by `tee` (descriptor 3:
//! journaled). Without a pid namespace (not permitted here) the test skips, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kioku_pool::media::sim::{SimControl, SimMedium};
use kioku_pool::{CreateOptions, OpenOptions, Pool};
use kioku_proc::{Exit, Namespace, Tracee, TraceeCommand, Tree};
use kioku_run::{Capturer, Monitor, MonitorOptions};

const DIGITS: &str = "3500";

fn pi(dir: &Path) -> PathBuf {
    let out = dir.join("pi");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proc/pi.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| {
            panic!("running the C compiler `{cc}` (install gcc: `make deps`): {e}")
        });
    assert!(st.success());
    out
}

fn opts() -> MonitorOptions {
    MonitorOptions {
        interval: None,
        control: false,
    }
}

/// Random crash images (torn words, evicted lines) restored per cut point besides the
/// drained-only and all-flushed ones: KIOKU_POWER_CUT_IMAGES, default 0 (`make soak` takes
/// more).
fn images_per_cut() -> u64 {
    std::env::var("KIOKU_POWER_CUT_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The tree's shell script: output into `dir`. Its standard streams are not the test's: the
/// crash images are restored after the run went on, and a file outside the simulated medium
/// that the tree holds (e.g. a deleted log make gives the test as stdout, which the journal
/// copies into the stash at each checkpoint) has moved on with it.
fn script(prog: &Path, dir: &Path) -> String {
    format!(
        "exec </dev/null >/dev/null 2>&1; cd {d} && {p} {DIGITS} | tee digits.txt | md5sum > sum.txt",
        d = dir.display(),
        p = prog.display()
    )
}

/// Starts the tree on a fresh sim pool; the monitor and the sim's control. `None`: no pid
/// namespace here.
fn start(prog: &Path, dir: &Path) -> Option<(Monitor, SimControl)> {
    let ns = match Namespace::create() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("SKIPPED: the tree power-cut test needs a pid namespace: {e}");
            return None;
        }
    };
    let cmd = TraceeCommand::new("/bin/sh")
        .args(["-c", &script(prog, dir)])
        .inherit_fds(false)
        .trace_children(true)
        .seccomp(
            kioku_run::journal::Journal::filter(),
            kioku_run::restore::needs_no_new_privs(),
        );
    let root = Tracee::spawn_in(&ns, cmd, None).unwrap();
    let tree = Tree::new(root, Some(ns));
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let pool = Pool::create_on(Box::new(sim), &CreateOptions::new(kioku_ckpt::POOL_KIND)).unwrap();
    let cap = Capturer::new(pool, &tree, true).unwrap();
    let mut m = Monitor::new(tree, cap, opts()).unwrap();
    // Until the pipeline runs: the checkpoints under test hold the whole tree.
    for _ in 0..2000 {
        if m.tree().processes().len() >= 4 {
            break;
        }
        assert!(m.run_for(Duration::from_millis(1)).unwrap().is_none());
    }
    Some((m, ctl))
}

/// Runs a bit and checkpoints, `n` times; false if the tree ended first.
fn epochs(m: &mut Monitor, n: usize) -> bool {
    for _ in 0..n {
        if let Some(e) = m.run_for(Duration::from_millis(6)).unwrap() {
            eprintln!("the tree ended: {e}");
            return false;
        }
        if m.checkpoint().unwrap().is_none() {
            panic!("no checkpoint: {:?}", m.summary().stopped_because);
        }
    }
    true
}

/// A checkpoint pool on `medium`.
fn open(medium: SimMedium, what: &str) -> Pool {
    Pool::open_on(
        Box::new(medium),
        &OpenOptions {
            kind: Some(kioku_ckpt::POOL_KIND.into()),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{what}: the pool does not open: {e}"))
}

/// What an uninterrupted run leaves: (digits.txt, sum.txt).
fn reference(prog: &Path) -> (Vec<u8>, Vec<u8>) {
    let d = tempfile::tempdir().unwrap();
    let st = Command::new("/bin/sh")
        .args(["-c", &script(prog, d.path())])
        .status()
        .unwrap();
    assert!(st.success());
    (
        std::fs::read(d.path().join("digits.txt")).unwrap(),
        std::fs::read(d.path().join("sum.txt")).unwrap(),
    )
}

/// Restores every crash image `ctl` holds and runs each tree to its end: each must restore
/// one of `epochs` and leave exactly `want` in `dir`. Returns the images checked.
fn check_crash_images(
    ctl: &SimControl,
    what: &str,
    dir: &Path,
    want: &(Vec<u8>, Vec<u8>),
    epochs: std::ops::RangeInclusive<u64>,
) -> usize {
    let mut n = 0;
    for image in ctl.crash_image_sample(images_per_cut()).unwrap() {
        let epoch = restore_and_finish(image, what);
        assert!(epochs.contains(&epoch), "{what}: restored epoch {epoch}");
        let got = (
            std::fs::read(dir.join("digits.txt")).unwrap_or_default(),
            std::fs::read(dir.join("sum.txt")).unwrap_or_default(),
        );
        assert!(got.0 == want.0, "{what}: digits.txt differs");
        assert!(got.1 == want.1, "{what}: sum.txt differs");
        n += 1;
    }
    n
}

/// Restores `image` and runs the tree to its end; the epoch restored.
fn restore_and_finish(image: Vec<u8>, what: &str) -> u64 {
    let pool = open(SimMedium::from_image(image).unwrap(), what);
    let r = kioku_run::restore::restore(pool).unwrap_or_else(|e| panic!("{what}: restore: {e}"));
    assert!(
        r.tree.processes().len() >= 3,
        "{what}: the shell and its pipeline"
    );
    let epoch = r.epoch;
    let mut m = Monitor::new(r.tree, r.capturer, opts()).unwrap();
    assert_eq!(m.run().unwrap(), Exit::Code(0), "{what}: exit");
    epoch
}

#[test]
fn crash_at_every_ordering_point_of_a_tree_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prog = pi(dir.path());
    let want = reference(&prog);
    let (mut images, mut early) = (0, 0);
    let mut k = 0;
    let points = loop {
        let Some((mut m, ctl)) = start(&prog, dir.path()) else {
            return;
        };
        // The tree runs on while checkpoints commit: on a slow (loaded) machine it may end
        // before the third; then that cut point is tried again.
        if !epochs(&mut m, 2) {
            early += 1;
            assert!(
                early < 20,
                "the tree keeps ending before its third checkpoint"
            );
            continue;
        }
        assert!(
            m.tree().processes().len() >= 3,
            "the shell and its pipeline"
        );
        let p0 = ctl.ordering_points();
        ctl.cut_power_at(p0 + k);
        if !epochs(&mut m, 1) {
            early += 1;
            assert!(
                early < 20,
                "the tree keeps ending before its third checkpoint"
            );
            continue;
        }
        drop(m); // kills the tree
        if ctl.power_cut_point().is_none() {
            break k; // the checkpoint had fewer ordering points than k
        }
        let what = format!("cut at point {k} of the third checkpoint");
        images += check_crash_images(&ctl, &what, dir.path(), &want, 2..=3);
        k += 1;
    };
    assert!(
        points >= 4,
        "a checkpoint has at least four ordering points, saw {points}"
    );
    eprintln!("{points} ordering points, {images} crash images restored, output identical");
}

#[test]
fn crash_at_every_ordering_point_of_a_tree_restore() {
    let dir = tempfile::tempdir().unwrap();
    let prog = pi(dir.path());
    let want = reference(&prog);
    let Some((mut m, ctl)) = start(&prog, dir.path()) else {
        return;
    };
    assert!(epochs(&mut m, 2));
    drop(m);
    let base = ctl
        .crash(kioku_pool::media::sim::CrashMode::DrainedOnly)
        .unwrap();
    let (mut images, mut points) = (0, 0);
    for k in 0.. {
        let medium = SimMedium::from_image(base.clone()).unwrap();
        let c2 = medium.control();
        c2.cut_power_at(c2.ordering_points() + k);
        let r = kioku_run::restore::restore(open(medium, "restore under test")).unwrap();
        assert_eq!(r.epoch, 2);
        let mut m = Monitor::new(r.tree, r.capturer, opts()).unwrap();
        assert!(epochs(&mut m, 1), "the tree ended too early for the test");
        drop(m);
        if c2.power_cut_point().is_none() {
            points = k;
            break;
        }
        let what = format!("cut at point {k} of a restore and its first checkpoint");
        images += check_crash_images(&c2, &what, dir.path(), &want, 2..=3);
    }
    eprintln!("{points} ordering points, {images} crash images restored, output identical");
}
