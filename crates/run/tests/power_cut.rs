//! Power cuts on the `sim` medium at every ordering point (flush and fence) of a process
//! checkpoint, and of a restore and the checkpoint after it: every crash image must restore
//! to a program that finishes with exactly the output of an uninterrupted run.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kioku_pool::media::sim::{SimControl, SimMedium};
use kioku_pool::{CreateOptions, OpenOptions, Pool};
use kioku_proc::{Exit, Tracee, TraceeCommand, Tree};
use kioku_run::{Capturer, Monitor, MonitorOptions};

const DIGITS: &str = "2500";

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

/// Starts pi on a fresh sim pool with stdout into `out`; the monitor and the sim's control.
fn start(prog: &Path, out: &Path) -> (Monitor, SimControl) {
    let file: OwnedFd = std::fs::File::create(out).unwrap().into();
    let cmd = TraceeCommand::new(prog)
        .arg(DIGITS)
        .stdout(file)
        .inherit_fds(false)
        .trace_children(true)
        .seccomp(kioku_run::journal::Journal::filter(), false);
    let t = Tree::new(Tracee::spawn(cmd).unwrap(), None);
    let sim = SimMedium::new(0).unwrap();
    let ctl = sim.control();
    let pool = Pool::create_on(Box::new(sim), &CreateOptions::new(kioku_ckpt::POOL_KIND)).unwrap();
    let cap = Capturer::new(pool, &t, true).unwrap();
    (Monitor::new(t, cap, opts()).unwrap(), ctl)
}

/// Runs a bit and checkpoints, `n` times; false if the program ended first.
fn epochs(m: &mut Monitor, n: usize) -> bool {
    for _ in 0..n {
        if m.run_for(Duration::from_millis(8)).unwrap().is_some() {
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

/// Restores every crash image `ctl` holds and runs each program to its end: each must restore
/// epoch 2 or 3 and write exactly `want` to `out`. Returns the images checked.
fn check_crash_images(ctl: &SimControl, what: &str, out: &Path, want: &[u8]) -> usize {
    let mut n = 0;
    for image in ctl.crash_image_sample(2).unwrap() {
        let epoch = restore_and_finish(image, what);
        assert!((2..=3).contains(&epoch), "{what}: restored epoch {epoch}");
        assert!(
            std::fs::read(out).unwrap() == want,
            "{what}: output differs"
        );
        n += 1;
    }
    n
}

/// Restores `image` and runs the program to its end; the epoch restored.
fn restore_and_finish(image: Vec<u8>, what: &str) -> u64 {
    let pool = open(SimMedium::from_image(image).unwrap(), what);
    let r = kioku_run::restore::restore(pool).unwrap_or_else(|e| panic!("{what}: restore: {e}"));
    let epoch = r.epoch;
    let mut m = Monitor::new(r.tree, r.capturer, opts()).unwrap();
    assert_eq!(m.run().unwrap(), Exit::Code(0), "{what}: exit");
    epoch
}

fn reference(prog: &Path) -> Vec<u8> {
    let o = Command::new(prog).arg(DIGITS).output().unwrap();
    assert!(o.status.success());
    o.stdout
}

#[test]
fn crash_at_every_ordering_point_of_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prog = pi(dir.path());
    let want = reference(&prog);
    let out = dir.path().join("out.txt");
    let (mut images, mut points) = (0, 0);
    for k in 0.. {
        let (mut m, ctl) = start(&prog, &out);
        assert!(epochs(&mut m, 2), "pi ended too early for the test");
        let p0 = ctl.ordering_points();
        ctl.cut_power_at(p0 + k);
        assert!(epochs(&mut m, 1), "pi ended too early for the test");
        drop(m); // kills the program
        if ctl.power_cut_point().is_none() {
            points = k;
            break; // the checkpoint had fewer ordering points than k
        }
        let what = format!("cut at point {k} of the third checkpoint");
        images += check_crash_images(&ctl, &what, &out, &want);
    }
    assert!(
        points >= 4,
        "a checkpoint has at least four ordering points, saw {points}"
    );
    eprintln!("{points} ordering points, {images} crash images restored, output identical");
}

#[test]
fn crash_at_every_ordering_point_of_a_restore() {
    let dir = tempfile::tempdir().unwrap();
    let prog = pi(dir.path());
    let want = reference(&prog);
    let out = dir.path().join("out.txt");
    let (mut m, ctl) = start(&prog, &out);
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
        assert!(epochs(&mut m, 1), "pi ended too early for the test");
        drop(m);
        if c2.power_cut_point().is_none() {
            points = k;
            break;
        }
        let what = format!("cut at point {k} of a restore and its first checkpoint");
        images += check_crash_images(&c2, &what, &out, &want);
    }
    eprintln!("{points} ordering points, {images} crash images restored, output identical");
}
