//! The capture side of `kioku run`: `kioku checkpoint` answers once the checkpoint is durable
//! (before the other context is synced) and a SIGKILL right after the answer loses nothing;
//! memory rewritten whole between checkpoints is taken whole (not write-tracked) and comes back
//! exactly after kills at random moments; a fresh run is restorable at once.

#[path = "common/programs.rs"]
mod programs;

use std::process::Child;
use std::time::Duration;

use programs::*;
use rand::Rng;

/// `kioku ARGS` as [`spawn_kioku`] runs it (captures verified), with the capture's debug lines
/// in its stderr.
fn spawn_kioku_debug(args: &[&str], dir: &RunDir) -> Child {
    spawn_kioku_env(args, dir, &[("KIOKU_LOG", "warn,kioku_run::capture=debug")])
}

/// The answer comes when the checkpoint is durable, before the other context is synced: the
/// monitor SIGKILLed right after it (possibly mid-sync) leaves a pool that restores that
/// checkpoint, and the restored program finds every word it wrote.
#[test]
fn checkpoint_answers_when_durable_and_a_kill_after_the_answer_loses_nothing() {
    let p = program("rewrite", false);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    // 64 MiB: syncing the other context takes long enough to be cut by the kill.
    let child = spawn_kioku_debug(
        &run_args(pool, "0", &[p.to_str().unwrap(), "64", "1000000", "1"]),
        &dir,
    );
    let prog = program_of(child.id()).expect("the program starts");
    wait_for_control_socket(prog);
    // Let it write its memory a few rounds first.
    std::thread::sleep(Duration::from_millis(300));
    let o = kioku_in(&dir, &["checkpoint", "--pool", pool]);
    sigkill(child.id() as i32);
    assert!(o.status.success(), "kioku checkpoint: {}", stderr(&o));
    let mut child = child;
    child.wait().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["epoch"], 1, "{v}");
    // Answered before the sync: the report's engine times end at the commit.
    let secs =
        |d: &serde_json::Value| d["secs"].as_f64().unwrap() + d["nanos"].as_f64().unwrap() / 1e9;
    assert_eq!(secs(&v["engine"]["sync"]), 0.0, "{v}");
    assert!(secs(&v["engine"]["total"]) > 0.0, "{v}");
    assert_eq!(epoch_of(&dir, pool), 1);
    // The restored program checks all 64 MiB every round; it runs a while, then is killed.
    let rounds_before = dir.read("stdout.txt").len();
    let r = spawn_kioku_debug(&["restore", "--pool", pool, "--interval", "0"], &dir);
    assert_eq!(
        kill_after(r, Duration::from_millis(1500), false),
        Outcome::Killed
    );
    let log = stderr_of(&dir);
    assert!(
        !log.contains("ERROR") && !log.contains("rewrite: round"),
        "the restored program found wrong memory:\n{log}"
    );
    assert!(
        dir.read("stdout.txt").len() > rounds_before,
        "the restored program made no round:\n{log}"
    );
}

/// Memory rewritten whole every interval is taken whole (no write-protect faults for the
/// program); kills at random moments, program or monitor, restore it exactly.
#[test]
fn memory_rewritten_whole_is_taken_whole_and_restored_exactly() {
    let p = program("rewrite", false);
    let cmd = [p.to_str().unwrap(), "24", "150", "2"];
    let plain = RunDir::new();
    reference(&cmd.map(String::from), &plain);
    // Uninterrupted: the area goes whole after three checkpoints, every capture verified.
    {
        let dir = RunDir::new();
        let pool = dir.pool();
        let pool = pool.to_str().unwrap();
        let args = run_args(pool, "15ms", &cmd);
        let mut child = spawn_kioku_debug(&args, &dir);
        assert!(child.wait().unwrap().success(), "{}", stderr_of(&dir));
        let log = stderr_of(&dir);
        assert!(!log.contains("ERROR"), "inconsistent capture:\n{log}");
        assert!(
            log.contains("taken whole, not write-tracked"),
            "the rewritten area was never taken whole:\n{log}"
        );
        assert!(plain.read("stdout.txt") == dir.read("stdout.txt"));
    }
    let mut rng = rng("rewrite");
    // KIOKU_PROC_KILLS: kill-and-restore cycles (1 in `make test`; `make soak-capture` more).
    let cycles: usize = std::env::var("KIOKU_PROC_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for cycle in 0..cycles {
        let dir = RunDir::new();
        let pool = dir.pool();
        let pool = pool.to_str().unwrap();
        let args = run_args(pool, "15ms", &cmd);
        let mut child = spawn_kioku_debug(&args, &dir);
        let mut kills = 0;
        loop {
            let after = Duration::from_millis(rng.gen_range(300..1500));
            match kill_after(child, after, kills % 2 == 1) {
                Outcome::Finished(0) => break,
                // Killed before the first checkpoint (a slow start on a loaded machine): start
                // again, as a user would.
                Outcome::Finished(1) if stderr_of(&dir).contains("no checkpoint yet") => {
                    std::fs::write(dir.path("stderr.txt"), b"").unwrap();
                    std::fs::write(dir.path("stdout.txt"), b"").unwrap();
                    child = spawn_kioku_debug(&args, &dir);
                    continue;
                }
                // The last kill came after the program had ended (a loaded machine): kioku
                // recorded its end, so there is nothing left to restore; the output is checked.
                Outcome::Finished(1) if kills > 0 && ended_before_the_kill(&stderr_of(&dir)) => {
                    break
                }
                Outcome::Finished(c) => panic!(
                    "cycle {cycle}: kioku exited with {c} after {kills} kills: {}",
                    stderr_of(&dir)
                ),
                Outcome::Killed => kills += 1,
            }
            assert!(kills < 100, "never finishes");
            child = spawn_kioku_debug(&["restore", "--pool", pool, "--interval", "15ms"], &dir);
        }
        let log = stderr_of(&dir);
        assert!(
            !log.contains("ERROR"),
            "cycle {cycle}: the capture or the checkpoint was inconsistent:\n{log}"
        );
        assert!(
            plain.read("stdout.txt") == dir.read("stdout.txt"),
            "cycle {cycle} ({kills} kills): output differs from the uninterrupted run\n{log}"
        );
        eprintln!("rewrite cycle {cycle}: {kills} kills, output identical");
    }
}

/// A fresh run is restorable at once: its first checkpoint does not wait for the interval.
#[test]
fn a_fresh_run_is_checkpointed_at_once() {
    let p = program("pi", false);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let child = spawn_kioku(&run_args(pool, "1h", &[p.to_str().unwrap(), "9000"]), &dir);
    // Within 30 s, though the interval is an hour.
    wait_for_epoch(&dir, pool, 1);
    assert_eq!(kill_after(child, Duration::ZERO, false), Outcome::Killed);
    let plain = RunDir::new();
    reference(&[p.to_str().unwrap().into(), "9000".into()], &plain);
    let o = kioku_in(&dir, &["restore", "--pool", pool, "--interval", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(plain.read("stdout.txt") == dir.read("stdout.txt"));
}

/// Kernel state the program changes between two checkpoints — signal dispositions (one reset by
/// the kernel on delivery, with no system call), a resource limit, an interval timer, the
/// descriptor table (a file's offset moved by `read` alone, `O_NONBLOCK` set by an ioctl, a
/// `dup2` over an open descriptor, a descriptor received over a Unix socket), the mappings (an
/// `munmap` and `mmap` with no other call), the signal stack, the timer slack — comes back as
/// the last checkpoint found it, though the monitor reads some of it again only after a call
/// that changes it (the program checks its whole state every 5 ms and reports anything lost).
/// Two checkpoints per phase: the second may take what the first read; with
/// KIOKU_VERIFY_CAPTURE (set by `spawn_kioku`) a kept descriptor table is compared with a
/// fresh survey's, and a difference is logged as an error.
#[test]
fn kernel_state_changed_between_checkpoints_is_restored_exactly() {
    let p = program("statechange", false);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let count = |s: &str| count_lines(&dir, |l| l == s);
    let wait_for = |s: &str, n: usize| wait_until(&dir, &format!("lines '{s}'"), n, || count(s));
    let checkpoint = |epoch: u64| {
        let o = kioku_in(&dir, &["checkpoint", "--pool", pool]);
        assert!(o.status.success(), "kioku checkpoint: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["epoch"].as_u64().unwrap() >= epoch, "{v}");
    };
    let mut child = spawn_kioku(&run_args(pool, "0", &[p.to_str().unwrap()]), &dir);
    let prog = program_of(child.id()).expect("the program starts");
    wait_for_control_socket(prog);
    wait_for("ok 1", 1);
    // Two checkpoints per phase: the second may take the state from the first.
    checkpoint(1);
    checkpoint(2);
    for phase in 2..=4u64 {
        std::fs::write(dir.path(&format!("go{phase}")), b"").unwrap();
        wait_for(&format!("ok {phase}"), 1);
        checkpoint(2 * phase - 1);
        wait_for(&format!("ok {phase}"), 2);
        checkpoint(2 * phase);
    }
    sigkill(child.id() as i32);
    child.wait().unwrap();
    let before = count("ok 4");
    // The restored program checks its state every round: a few rounds in phase 4, then killed.
    let (outcome, log) = restore_until(&dir, pool, "0", before + 3, || count("ok 4"));
    assert!(
        !log.contains("statechange:") && !log.contains("ERROR"),
        "the restored program lost state:\n{log}"
    );
    assert_eq!(outcome, Outcome::Killed, "{log}");
    assert!(
        count("ok 4") >= before + 3,
        "the restored program made no round:\n{log}"
    );
}

/// A memfd the program holds through a descriptor and never maps (an in-memory file written
/// with write(2), read with pread(2), cut with ftruncate(2); also what any program holds between
/// memfd_create and mmap) is checkpointed through the descriptor: checkpoints go on (they used
/// to stop: "a memfd whose contents the checkpoint does not hold"), and the restored program
/// finds its exact length, bytes and file offset (it checks them every round).
#[test]
fn a_memfd_held_only_through_a_descriptor_is_checkpointed_and_restored() {
    let p = program("memfdfile", false);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let oks = || count_lines(&dir, |l| l.starts_with("ok "));
    let wait_oks = |n: usize| wait_until(&dir, "rounds", n, oks);
    let mut child = spawn_kioku(&run_args(pool, "0", &[p.to_str().unwrap(), "100000"]), &dir);
    let prog = program_of(child.id()).expect("the program starts");
    wait_for_control_socket(prog);
    for n in [10, 25] {
        wait_oks(n);
        let o = kioku_in(&dir, &["checkpoint", "--pool", pool]);
        assert!(
            o.status.success(),
            "kioku checkpoint: {}{}",
            stderr(&o),
            String::from_utf8_lossy(&o.stdout)
        );
    }
    sigkill(child.id() as i32);
    child.wait().unwrap();
    let before = oks();
    let (outcome, log) = restore_until(&dir, pool, "20ms", before + 30, oks);
    assert!(
        !log.contains("memfdfile:") && !log.contains("ERROR") && !log.contains("checkpoints"),
        "the restored program lost its memfd's contents, or checkpoints stopped:\n{log}"
    );
    assert_eq!(outcome, Outcome::Killed, "{log}");
    assert!(
        oks() >= before + 30,
        "the restored program made no round:\n{log}"
    );
}

/// Shared memory written by a process that then ends — a child storing its result and
/// exiting, never seen by a capture — is in the checkpoint: each write is recorded only in the
/// page tables of the process that made it, so once a process of the tree has ended, every
/// shared object is taken whole at the next checkpoint. Captures are verified (a lost write is
/// logged as an ERROR), and the restored program checks the shared word every round.
#[test]
fn shared_memory_written_by_children_that_exit_is_checkpointed() {
    let p = program("sharedexit", false);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let oks = || count_lines(&dir, |l| l.starts_with("ok "));
    let wait_oks = |n: usize| wait_until(&dir, "rounds", n, oks);
    let mut child = spawn_kioku(
        &run_args(pool, "10ms", &[p.to_str().unwrap(), "100000"]),
        &dir,
    );
    wait_oks(60);
    sigkill(child.id() as i32);
    child.wait().unwrap();
    let before = oks();
    let (outcome, log) = restore_until(&dir, pool, "10ms", before + 60, oks);
    assert!(
        !log.contains("sharedexit:") && !log.contains("ERROR"),
        "a child's write to shared memory was lost:\n{log}"
    );
    assert_eq!(outcome, Outcome::Killed, "{log}");
    assert!(
        oks() >= before + 60,
        "the restored program made no round:\n{log}"
    );
}

/// A process group that outlived its leader — a member lives on in it after the leader ended
/// and was reaped, as in a pipeline whose first command ended first — comes back: a restore
/// makes the group with a short-lived holder of the leader's id (joining it refused with
/// `EPERM` before: the group did not exist). The program checks every round, in the member
/// and in the parent, that the member is still in the group.
#[test]
fn a_process_group_whose_leader_ended_is_restored() {
    let p = program("pgroup", false);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let oks = || count_lines(&dir, |l| l.starts_with("ok "));
    let mut child = spawn_kioku(&run_args(pool, "0", &[p.to_str().unwrap(), "100000"]), &dir);
    let prog = program_of(child.id()).expect("the program starts");
    wait_for_control_socket(prog);
    wait_until(&dir, "rounds", 10, oks);
    let o = kioku_in(&dir, &["checkpoint", "--pool", pool]);
    assert!(
        o.status.success(),
        "kioku checkpoint: {}{}",
        stderr(&o),
        String::from_utf8_lossy(&o.stdout)
    );
    sigkill(child.id() as i32);
    child.wait().unwrap();
    let before = oks();
    let (outcome, log) = restore_until(&dir, pool, "20ms", before + 30, oks);
    assert!(
        !log.contains("pgroup[")
            && !log.contains("ERROR")
            && !log.contains("not permitted")
            && !log.contains("cannot bring back"),
        "the group was not restored:\n{log}"
    );
    assert_eq!(outcome, Outcome::Killed, "{log}");
    assert!(
        oks() >= before + 30,
        "the restored program made no round:\n{log}"
    );
}

/// A checkpoint whose capture fails with a transient error (here a test build's hook,
/// `KIOKU_TEST_FAIL_CAPTURE`, failing two captures right after their scans took the written
/// pages' write-protect bits) is skipped with a warning naming why; the program runs on, later
/// checkpoints are taken — exact, though the failed scans consumed what they found (captures
/// are verified: a page lost would be logged as an ERROR) — and the run's summary counts them.
/// The program, killed after the skips and restored, ends with the uninterrupted run's output
/// (it checks every word of its memory each round).
#[test]
fn a_failed_capture_skips_that_checkpoint_and_the_run_goes_on() {
    let p = program("rewrite", false);
    // 4 MiB rewritten one word a page every 200 ms: a capture after each round finds them.
    let cmd = [p.to_str().unwrap(), "4", "16", "200"];
    let plain = RunDir::new();
    reference(&cmd.map(String::from), &plain);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let mut args = vec![
        "run",
        "--pool",
        pool,
        "--interval",
        "15ms",
        "--summary-json",
        "s.json",
        "--",
    ];
    args.extend_from_slice(&cmd);
    let child = spawn_kioku_env(
        &args,
        &dir,
        &[("KIOKU_TEST_FAIL_CAPTURE", "2"), ("KIOKU_NO_ADAPTIVE", "1")],
    );
    let skips = || stderr_of(&dir).matches("checkpoint skipped").count();
    wait_until(&dir, "skipped checkpoints", 2, skips);
    // Checkpoints after the skips, with rounds written between them.
    let rounds = count_lines(&dir, |l| l.starts_with("round "));
    wait_until(&dir, "rounds", rounds + 2, || {
        count_lines(&dir, |l| l.starts_with("round "))
    });
    assert_eq!(kill_after(child, Duration::ZERO, false), Outcome::Killed);
    let log = stderr_of(&dir);
    assert!(
        log.contains("KIOKU_TEST_FAIL_CAPTURE") && !log.contains("ERROR"),
        "the skip does not say why, or a later capture was not exact:\n{log}"
    );
    assert!(
        !log.contains("no more checkpoints"),
        "checkpoints stopped:\n{log}"
    );
    let s: serde_json::Value = serde_json::from_slice(&dir.read("s.json")).unwrap();
    // Two failed; the kill may have landed in a stop too ("killed during it").
    let failed = s["summary"]["skipped_because"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| {
            w.as_str()
                .is_some_and(|w| w.contains("KIOKU_TEST_FAIL_CAPTURE"))
        })
        .count();
    assert_eq!(failed, 2, "{s}");
    assert!(s["summary"]["skipped"].as_u64().unwrap() >= 2, "{s}");
    assert!(
        s["summary"]["checkpoints"].as_u64().unwrap() >= 2,
        "no checkpoint after the skips: {s}"
    );
    let o = kioku_in(&dir, &["restore", "--pool", pool, "--interval", "15ms"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        plain.read("stdout.txt") == dir.read("stdout.txt"),
        "output differs from the uninterrupted run's:\n{}",
        stderr_of(&dir)
    );
}

/// A capture that is not committed (here every other one, dropped by a test build's hook,
/// `KIOKU_TEST_DROP_CAPTURE`, as one during which a process was killed is) leaves the file
/// journal as it was: what the program writes to its files after it is not undone by a
/// restore of the checkpoint taken next (a dropped capture used to begin the journal's next
/// epoch, so that a restore of the next checkpoint cut the files back to before the dropped
/// one). The program (writing two files of its own, one `O_APPEND`) is killed at random
/// moments and restored until it ends; its files must equal the uninterrupted run's.
#[test]
fn a_dropped_capture_leaves_the_file_journal_exact() {
    let p = program("writer", false);
    let cmd = [p.to_str().unwrap(), ".", "400"];
    let plain = RunDir::new();
    reference(&cmd.map(String::from), &plain);
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let env = [("KIOKU_TEST_DROP_CAPTURE", "alternate")];
    let mut child = spawn_kioku_env(&run_args(pool, "15ms", &cmd), &dir, &env);
    let mut rng = rng("dropped-capture");
    let mut kills = 0;
    loop {
        let after = Duration::from_millis(rng.gen_range(300..900));
        match kill_after(child, after, false) {
            Outcome::Finished(0) => break,
            Outcome::Finished(1) if kills > 0 && ended_before_the_kill(&stderr_of(&dir)) => break,
            // Killed before the first checkpoint (a slow start on a loaded machine): afresh.
            Outcome::Finished(1) if stderr_of(&dir).contains("no checkpoint yet") => {
                std::fs::write(dir.path("stderr.txt"), b"").unwrap();
                std::fs::write(dir.path("stdout.txt"), b"").unwrap();
                child = spawn_kioku_env(&run_args(pool, "15ms", &cmd), &dir, &env);
                continue;
            }
            Outcome::Finished(c) => panic!("kioku exited with {c}: {}", stderr_of(&dir)),
            Outcome::Killed => kills += 1,
        }
        assert!(kills < 20, "never finishes");
        child = spawn_kioku_env(
            &["restore", "--pool", pool, "--interval", "15ms"],
            &dir,
            &env,
        );
    }
    for f in ["stdout.txt", "data.txt", "log.txt"] {
        assert!(
            plain.read(f) == dir.read(f),
            "{f} differs from the uninterrupted run's after {kills} kills:\n{}",
            stderr_of(&dir)
        );
    }
}

/// Captures that fail at every checkpoint are not passing: after a few in a row checkpoints
/// stop, saying so (and noting it in the pool), and the program runs on to its end, its exit
/// status passed on — it is never killed for kioku's failure.
#[test]
fn captures_failing_in_a_row_stop_checkpoints_and_the_program_runs_on() {
    let p = program("rewrite", false);
    // Written without a pause: every capture finds written pages, and fails.
    let cmd = [p.to_str().unwrap(), "2", "1500", "0"];
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let mut args = vec![
        "run",
        "--pool",
        pool,
        "--interval",
        "10ms",
        "--summary-json",
        "s.json",
        "--",
    ];
    args.extend_from_slice(&cmd);
    let mut child = spawn_kioku_env(&args, &dir, &[("KIOKU_TEST_FAIL_CAPTURE", "all")]);
    let st = child.wait().unwrap();
    let log = stderr_of(&dir);
    assert!(st.success(), "{st:?}:\n{log}");
    assert!(
        log.contains("no more checkpoints: 8 checkpoints failed in a row")
            && log.contains("KIOKU_TEST_FAIL_CAPTURE"),
        "{log}"
    );
    assert_eq!(
        count_lines(&dir, |l| l.starts_with("round ")),
        1500,
        "the program did not run to its end:\n{log}"
    );
    let s: serde_json::Value = serde_json::from_slice(&dir.read("s.json")).unwrap();
    // (A capture that finds nothing written succeeds and starts the count again.)
    assert!(s["summary"]["skipped"].as_u64().unwrap() >= 8, "{s}");
    assert!(
        s["summary"]["stopped_because"]
            .as_str()
            .is_some_and(|w| w.contains("failed in a row")),
        "{s}"
    );
}

/// Lines of the program's standard output (stdout.txt) for which `want` holds.
fn count_lines(dir: &RunDir, want: impl Fn(&str) -> bool) -> usize {
    String::from_utf8_lossy(&dir.read("stdout.txt"))
        .lines()
        .filter(|l| want(l))
        .count()
}

/// Waits until `count()` reaches `n`; fails after 30 s naming `what`, with the log.
fn wait_until(dir: &RunDir, what: &str, n: usize, count: impl Fn() -> usize) {
    let t0 = std::time::Instant::now();
    while count() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no {n} {what} after 30 s:\n{}",
            stderr_of(dir)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Restores the tree of `pool` checkpointing every `interval`, lets it run until `count()`
/// reaches `n` (at most 30 s) and kills it: how it ended, and the log.
fn restore_until(
    dir: &RunDir,
    pool: &str,
    interval: &str,
    n: usize,
    count: impl Fn() -> usize,
) -> (Outcome, String) {
    let r = spawn_kioku(&["restore", "--pool", pool, "--interval", interval], dir);
    let t0 = std::time::Instant::now();
    while count() < n && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let outcome = kill_after(r, Duration::ZERO, false);
    (outcome, stderr_of(dir))
}
