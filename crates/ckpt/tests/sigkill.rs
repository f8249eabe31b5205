//! Crash tests with real processes: a child runs the workload (regions mutated in a
//! reproducible pattern, checkpoint after every epoch, acknowledging each on stdout) and the
//! parent SIGKILLs it at random moments. After each kill the parent recovers the pool and
//! requires exactly the state of the last checkpoint whose flip completed — the last one the
//! child acknowledged, or the one it was finishing — compared byte for byte with a model
//! replayed from the same pattern. The next child recovers and continues from there.
//!
//! `KIOKU_CRASH_KILLS` sets the number of kills per medium (default 150, so 300 in `make
//! test`; the full suite runs 2,000: `KIOKU_CRASH_KILLS=1000 cargo test -p kioku-ckpt --test sigkill`).

mod common;

use common::*;
use kioku_ckpt::{Engine, EngineOptions};
use kioku_pool::media::{MediumChoice, MediumKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KIOKU_TEST_CKPT_CHILD";

fn opts(kind: MediumKind) -> EngineOptions {
    EngineOptions {
        medium: MediumChoice::Exactly(kind),
        ..Default::default()
    }
}

fn medium_of(s: &str) -> MediumKind {
    s.parse().unwrap()
}

/// The child: recover (or create) and run epochs forever, acknowledging each checkpoint.
#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut it = spec.split(',');
    let (path, medium, seed, base) = (
        it.next().unwrap().to_string(),
        medium_of(it.next().unwrap()),
        it.next().unwrap().parse::<u64>().unwrap(),
        usize::from_str_radix(it.next().unwrap(), 16).unwrap(),
    );
    let path = Path::new(&path);
    let mut engine = if path.exists() {
        Engine::recover(path, &opts(medium)).unwrap().0
    } else {
        Engine::create(path, &opts(medium)).unwrap()
    };
    let out = std::io::stdout();
    loop {
        let e = run_epoch(&mut engine, base, seed);
        let mut o = out.lock();
        writeln!(o, "ACK {e}").unwrap();
        o.flush().unwrap();
    }
}

fn kills() -> u32 {
    std::env::var("KIOKU_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150)
}

fn crash_loop(dir: &Path, medium: MediumKind, base: usize, seed: u64) {
    let path = dir.join("crash.pool");
    let exe = std::env::current_exe().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut model, mut at) = (Model::new(), 0u64);
    let mut last_recovered = 0u64;
    let n = kills();
    let started = Instant::now();
    for k in 0..n {
        let mut child = Command::new(&exe)
            .args([
                "child_process_entry",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                CHILD_ENV,
                format!("{},{},{seed},{base:x}", path.display(), medium),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Let it run for a random while: sometimes before its first checkpoint, mostly after
        // a few; the kill lands anywhere in an epoch, a checkpoint or a recovery.
        let run_for = Duration::from_micros(rng.gen_range(0..30_000));
        std::thread::sleep(run_for);
        // SAFETY: kill(2) on our own child; no memory involved.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let status = child.wait().unwrap();
        let mut acked = last_recovered;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            // The test harness may print its "test … " prefix on the same line as the first ack.
            let line = line.unwrap();
            if let Some(at) = line.find("ACK ") {
                acked = line[at + 4..].trim().parse().unwrap();
            }
        }
        if status.code().is_some() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("kill {k}: child exited on its own ({status}): {err}");
        }
        if !path.exists() {
            assert_eq!(acked, 0, "acknowledged a checkpoint without a pool");
            continue; // killed while creating: the pool appears only complete
        }
        let (engine, rec) = Engine::recover(&path, &opts(medium))
            .unwrap_or_else(|e| panic!("kill {k} ({medium}): recovery failed: {e}"));
        assert!(
            rec.epoch == acked || rec.epoch == acked + 1,
            "kill {k} ({medium}): recovered epoch {}, last acknowledged {acked}",
            rec.epoch
        );
        assert!(rec.epoch >= last_recovered, "kill {k}: went back in time");
        if rec.epoch > 0 {
            assert_eq!(rec.metadata, rec.epoch.to_le_bytes());
        }
        advance_model(&mut model, &mut at, rec.epoch, seed);
        assert_matches(
            &engine,
            &model,
            &format!("kill {k} ({medium}), epoch {}", rec.epoch),
        );
        last_recovered = rec.epoch;
    }
    eprintln!(
        "{medium}: {n} SIGKILLs, reached epoch {last_recovered}, every recovery exact ({:?})",
        started.elapsed()
    );
    assert!(
        last_recovered > 10,
        "the workload made too little progress to mean anything"
    );
}

#[test]
fn sigkill_at_random_moments_on_file() {
    let dir = tempfile::tempdir().unwrap();
    crash_loop(dir.path(), MediumKind::File, 0x2400_0000_0000, 5);
}

#[test]
fn sigkill_at_random_moments_on_shm() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    crash_loop(dir.path(), MediumKind::Shm, 0x2500_0000_0000, 6);
}
