//! Transparent process checkpoints end to end: unmodified programs (examples/proc/) run under
//! `kioku run`, are SIGKILLed at random moments — the program, or the monitor — and brought
//! back with `kioku restore` (killed again, restored again…) until they finish; their output
//! and the files they write must equal an uninterrupted run's, byte for byte.
//!
//! KIOKU_PROC_KILLS sets the kill-and-restore cycles per program (default 2, and 1 for the heap
//! program, whose one cycle takes about a hundred kills; `make soak-rust`: 50).

#[path = "common/programs.rs"]
mod programs;

use std::time::Duration;

use programs::*;
use rand::Rng;

fn cycles(default: usize) -> usize {
    std::env::var("KIOKU_PROC_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `cmd` under kioku, killing it after a random time up to `max_ms`, restoring and killing
/// again until it finishes; compares `files` with a plain run's.
fn kill_and_restore(
    name: &str,
    cmd: &[String],
    files: &[&str],
    max_ms: u64,
    kill_monitor: bool,
    cycles: usize,
) {
    let mut rng = rng(name);
    let plain = RunDir::new();
    reference(cmd, &plain);
    for cycle in 0..cycles {
        let dir = RunDir::new();
        let pool = dir.pool();
        let pool = pool.to_str().unwrap();
        let mut args = vec!["run", "--pool", pool, "--interval", "15ms", "--"];
        args.extend(cmd.iter().map(String::as_str));
        let mut child = spawn_kioku(&args, &dir);
        let mut kills = 0;
        loop {
            // The window doubles every 25 kills (up to 16×): on a loaded machine a restore may
            // need longer than `max_ms` to reach its next checkpoint, and kills that always come
            // first would never let the program finish.
            let window = max_ms << (kills / 25).min(4);
            let after = Duration::from_millis(rng.gen_range(5..window));
            match kill_after(child, after, kill_monitor && kills % 2 == 1) {
                Outcome::Finished(0) => break,
                // Killed before the first checkpoint (or before the pool existed): start
                // again, as a user would.
                Outcome::Finished(1) if never_checkpointed(&stderr_of(&dir)) => {
                    std::fs::write(dir.path("stderr.txt"), b"").unwrap();
                    std::fs::write(dir.path("stdout.txt"), b"").unwrap();
                    child = spawn_kioku(&args, &dir);
                    continue;
                }
                // The last kill came after the program had ended (a loaded machine): there is
                // nothing left to restore; the output is checked below.
                Outcome::Finished(1) if kills > 0 && ended_before_the_kill(&stderr_of(&dir)) => {
                    break
                }
                Outcome::Finished(c) => panic!(
                    "{name} cycle {cycle}: kioku exited with {c} after {kills} kills: {}",
                    stderr_of(&dir)
                ),
                Outcome::Killed => kills += 1,
            }
            assert!(kills < 200, "{name}: never finishes");
            child = spawn_kioku(&["restore", "--pool", pool, "--interval", "15ms"], &dir);
        }
        let log = stderr_of(&dir);
        assert!(
            !log.contains("ERROR"),
            "{name} cycle {cycle}: the capture or the checkpoint was inconsistent:\n{log}"
        );
        for f in files {
            assert!(
                plain.read(f) == dir.read(f),
                "{name} cycle {cycle} ({kills} kills): {f} differs from the uninterrupted run\n--- stderr:\n{}",
                stderr_of(&dir)
            );
        }
        eprintln!("{name} cycle {cycle}: {kills} kills, output identical");
    }
}

fn never_checkpointed(stderr: &str) -> bool {
    let last = stderr.lines().last().unwrap_or("");
    last.ends_with("no checkpoint yet (the program was killed before its first checkpoint); run it again with `kioku run`")
        || (last.contains("no such pool") && !stderr.contains("restored"))
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn pi_dynamic_survives_sigkill() {
    let p = program("pi", false);
    kill_and_restore(
        "pi",
        &s(&[p.to_str().unwrap(), "6000"]),
        &["stdout.txt"],
        400,
        false,
        cycles(2),
    );
}

#[test]
fn pi_static_survives_sigkill() {
    let p = program("pi", true);
    kill_and_restore(
        "pi-static",
        &s(&[p.to_str().unwrap(), "6000"]),
        &["stdout.txt"],
        400,
        false,
        cycles(2),
    );
}

#[test]
fn threads_survive_sigkill() {
    let p = program("threads", false);
    kill_and_restore(
        "threads",
        &s(&[p.to_str().unwrap(), "4", "30", "1500000"]),
        &["stdout.txt"],
        400,
        false,
        cycles(2),
    );
}

#[test]
fn heap_growing_and_shrinking_survives_sigkill() {
    let p = program("heap", false);
    kill_and_restore(
        "heap",
        &s(&[p.to_str().unwrap(), "30"]),
        &["stdout.txt"],
        500,
        false,
        cycles(1),
    );
}

#[test]
fn file_writer_survives_sigkill() {
    let p = program("writer", false);
    kill_and_restore(
        "writer",
        &s(&[p.to_str().unwrap(), ".", "200"]),
        &["stdout.txt", "data.txt", "log.txt"],
        500,
        false,
        cycles(2),
    );
}

#[test]
fn signal_dispositions_masks_and_the_vdso_survive_sigkill() {
    let p = program("signals", false);
    kill_and_restore(
        "signals",
        &s(&[p.to_str().unwrap(), "200"]),
        &["stdout.txt"],
        400,
        false,
        cycles(2),
    );
}

#[test]
fn a_killed_monitor_loses_nothing() {
    let p = program("pi", false);
    kill_and_restore(
        "pi-monitor",
        &s(&[p.to_str().unwrap(), "6000"]),
        &["stdout.txt"],
        400,
        true,
        cycles(2),
    );
}
