//! `examples/c/regions.c`, compiled with the system C compiler against `include/kioku.h` and
//! `libkioku.a`, run as a user would: twice on one pool (the second run continues the
//! counters), killed with SIGKILL while it checkpoints in a loop (the next run resumes from the
//! last checkpoint it reported), and pointed at a file that is not a pool.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn example(dir: &Path) -> PathBuf {
    let exe = dir.join("regions");
    common::build_c(
        &[&kioku_testkit::cprog::repo_root().join("examples/c/regions.c")],
        &exe,
    );
    exe
}

/// The `key=value` number in a line of the example's output.
fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .parse()
        .unwrap()
}

/// Runs the example to completion; returns its stdout lines.
fn run_ok(exe: &Path, pool: &Path, steps: &str) -> Vec<String> {
    let o = common::run(Command::new(exe).arg(pool).arg(steps));
    let (out, err) = common::text(&o);
    assert!(
        o.status.success(),
        "regions failed: {:?}\n{out}\n{err}",
        o.status
    );
    out.lines().map(str::to_owned).collect()
}

#[test]
fn second_run_recovers_and_continues_the_counters() {
    let dir = tempfile::tempdir().unwrap();
    let exe = example(dir.path());
    let pool = dir.path().join("counters.pool");

    let first = run_ok(&exe, &pool, "3");
    assert_eq!(first[0], format!("created {}", pool.display()));
    assert_eq!(first.len(), 5, "{first:?}");
    assert_eq!(field(&first[3], "epoch"), 3);
    // counters[2047] gets 2048 per step.
    assert_eq!(first[4], "done epoch=3 steps=3 counters[2047]=6144");

    let second = run_ok(&exe, &pool, "4");
    assert_eq!(second[0], "recovered epoch=3 steps=3 runs=1");
    assert_eq!(second[1], "checkpoint epoch=4 steps=4");
    assert_eq!(
        second.last().unwrap(),
        "done epoch=7 steps=7 counters[2047]=14336"
    );

    let third = run_ok(&exe, &pool, "0");
    assert_eq!(third[0], "recovered epoch=7 steps=7 runs=2");
}

#[test]
fn kioku_log_turns_on_logging_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let exe = example(dir.path());
    let pool = dir.path().join("log.pool");
    let quiet = common::run(Command::new(&exe).arg(&pool).arg("1"));
    let (_, err) = common::text(&quiet);
    assert!(
        quiet.status.success() && err.is_empty(),
        "no KIOKU_LOG, no log: {err}"
    );
    let loud = common::run(
        Command::new(&exe)
            .arg(&pool)
            .arg("1")
            .env("KIOKU_LOG", "info"),
    );
    let (out, err) = common::text(&loud);
    assert!(loud.status.success(), "{out}\n{err}");
    assert!(
        err.contains("INFO") && err.contains("pool medium selected") && !err.contains('\x1b'),
        "{err}"
    );
}

#[test]
fn sigkill_while_checkpointing_resumes_from_the_last_reported_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let exe = example(dir.path());
    let pool = dir.path().join("loop.pool");
    let mut resumed_from = 0;
    for (round, wait_for) in [5usize, 23, 2, 40].into_iter().enumerate() {
        let mut child = Command::new(&exe)
            .arg(&pool)
            .arg("forever")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let head = lines.next().unwrap().unwrap();
        if round == 0 {
            assert!(head.starts_with("created "), "{head}");
        } else {
            assert_eq!(field(&head, "steps"), resumed_from, "{head}");
        }
        let mut seen = 0;
        for l in lines.by_ref() {
            let l = l.unwrap();
            assert!(l.starts_with("checkpoint "), "{l}");
            seen += 1;
            if seen == wait_for {
                break;
            }
        }
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        // Everything it printed before it died, the last line being its last report.
        let mut last = None;
        for l in lines {
            let l = l.unwrap();
            if l.starts_with("checkpoint ") {
                last = Some(l);
            }
        }
        let last =
            last.unwrap_or_else(|| format!("checkpoint steps={}", resumed_from + seen as u64));
        let reported = field(&last, "steps");

        // The next run checks every counter against the recovered metadata (exit 3 if not)
        // and prints where it resumed.
        let after = run_ok(&exe, &pool, "0");
        let steps = field(&after[0], "steps");
        assert_eq!(field(&after[0], "epoch"), steps, "{after:?}");
        // The checkpoint it reported is durable; one more may have completed before the kill
        // landed but not been printed yet.
        assert!(
            steps == reported || steps == reported + 1,
            "round {round}: reported steps={reported}, recovered {after:?}"
        );
        resumed_from = steps;
    }
}

#[test]
fn a_file_that_is_not_a_pool_is_refused_with_its_code_and_detail() {
    let dir = tempfile::tempdir().unwrap();
    let exe = example(dir.path());
    let junk = dir.path().join("notes.txt");
    std::fs::write(&junk, "not a pool\n".repeat(10_000)).unwrap();
    let o = common::run(Command::new(&exe).arg(&junk));
    let (out, err) = common::text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains("recover: not a kioku pool (-5): "),
        "strerror and code of KIOKU_E_NOT_A_POOL: {err}"
    );
    assert!(
        err.contains(&junk.display().to_string()) && err.contains("bad magic"),
        "kioku_last_error names the file and the cause: {err}"
    );
    // The file is left as it was.
    assert_eq!(
        std::fs::read_to_string(&junk).unwrap(),
        "not a pool\n".repeat(10_000)
    );
}

#[test]
fn the_mprotect_tracker_works_in_a_c_program() {
    // The fallback tracker catches writes with a SIGSEGV handler inside the C process.
    let dir = tempfile::tempdir().unwrap();
    let exe = example(dir.path());
    let pool = dir.path().join("mprotect.pool");
    for (steps, first) in [
        ("2", format!("created {}", pool.display())),
        ("3", "recovered epoch=2 steps=2 runs=1".to_string()),
        ("0", "recovered epoch=5 steps=5 runs=2".to_string()),
    ] {
        let o = common::run(
            Command::new(&exe)
                .arg(&pool)
                .arg(steps)
                .env("KIOKU_TRACKER", "mprotect")
                .env("KIOKU_LOG", "kioku_track=info"),
        );
        let (out, err) = common::text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert_eq!(out.lines().next().unwrap(), first, "{out}");
        assert!(
            err.contains("Mprotect"),
            "the mprotect backend was used: {err}"
        );
    }
}
