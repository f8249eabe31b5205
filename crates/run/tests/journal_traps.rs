//! The journal under real seccomp traps: a program (C, and a real `sqlite3`) runs under
//! `Journal::filter()` and a small ptrace loop; checkpoints are taken at random traps (the
//! program stopped there, as at a capture stop); the program is SIGKILLed at random moments;
//! the journal is reopened from the pool and applied: the directory tree must equal, byte for
//! byte (contents, sizes, names, modes, mtimes of regular files), its snapshot at the
//! checkpoint the pool's commit names.

mod journal_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use journal_common::trapper::{self, End, Next, Spawn};
use journal_common::*;
use kioku_pool::media::sim::SimMedium;
use kioku_pool::{CreateOptions, Pool};
use kioku_run::journal::{Journal, JournalOptions, Verdict};
use rand::{Rng, SeedableRng};

fn opts(dir: &Path) -> JournalOptions {
    JournalOptions {
        segment_len: 256 << 10,
        spare_segments: 2,
        stash_dir: Some(dir.join(".kioku-stash")),
    }
}

type Expect = (Snapshot, Vec<(PathBuf, Vec<u8>)>);

/// One run: checkpoints at traps `captures`, SIGKILL `kill` = (trap, µs after it) if given.
/// Returns what each committed epoch must restore, the pool, and how the program ended.
fn run_once(
    root: &Path,
    program: &Path,
    args: Vec<String>,
    stdio: [Option<i32>; 3],
    filters: Vec<Vec<libc::sock_filter>>,
    captures: &[u64],
    kill: Option<(u64, u64)>,
) -> (BTreeMap<u64, Expect>, Pool, End, Vec<Verdict>) {
    let sim = SimMedium::new(0).unwrap();
    let mut pool = Pool::create_on(Box::new(sim), &CreateOptions::new("kioku.test")).unwrap();
    pool.commit(&[0]).unwrap();
    let mut j = Journal::create(&mut pool, opts(root)).unwrap();
    let child = trapper::spawn(&Spawn {
        program,
        args,
        cwd: root,
        filters,
        stdio,
        traced: true,
    });
    let mut expect = BTreeMap::new();
    let mut verdicts = Vec::new();
    let mut n = 0u64;
    let mut epoch = 0;
    let end = child.run(|pid, regs| {
        n += 1;
        if captures.contains(&n) {
            // The capture stop of the next checkpoint: the program is stopped here.
            epoch += 1;
            j.begin_epoch(epoch);
            expect.insert(epoch, capture(root, pid, &j));
        }
        let v = j.on_trap(&mut pool, pid, pid, regs).expect("journal");
        if v != Verdict::Run {
            verdicts.push(v.clone());
        }
        if captures.contains(&n) {
            j.sync_files().unwrap();
            pool.commit(&[epoch]).unwrap();
            j.committed(&mut pool, epoch).unwrap();
        }
        match kill {
            Some((k, us)) if k == n => Next::KillAfter(us),
            _ => Next::Continue,
        }
    });
    drop(j);
    (expect, pool, end, verdicts)
}

/// The restore: reopen the journal from the pool, undo to the committed epoch, compare.
fn restore(root: &Path, pool: &mut Pool, expect: &BTreeMap<u64, Expect>, what: &str) -> u64 {
    let epoch = pool.roots()[0];
    if epoch == 0 {
        return 0;
    }
    let mut j = Journal::open_with(pool, opts(root)).unwrap();
    j.check(pool, epoch)
        .unwrap_or_else(|e| panic!("{what}: check: {e}"));
    let st = j
        .apply(pool, epoch)
        .unwrap_or_else(|e| panic!("{what}: apply: {e}"));
    j.reset(pool, epoch).unwrap();
    let (tree, held) = &expect[&epoch];
    let got = snapshot(root);
    assert!(
        &got == tree,
        "{what}: files differ after undoing {st:?}: {}",
        diff(tree, &got)
    );
    for (p, data) in held {
        assert_eq!(
            &std::fs::read(p).unwrap(),
            data,
            "{what}: deleted file {}",
            p.display()
        );
    }
    epoch
}

/// Traps the workload makes when run to its end.
fn count_traps(program: &Path, args: &[String]) -> u64 {
    let d = scratch("count");
    let child = trapper::spawn(&Spawn {
        program,
        args: args.to_vec(),
        cwd: d.path(),
        filters: vec![Journal::filter()],
        stdio: [None; 3],
        traced: true,
    });
    let mut n = 0;
    assert_eq!(
        child.run(|_, _| {
            n += 1;
            Next::Continue
        }),
        End::Exited(0)
    );
    n
}

#[test]
fn workload_killed_at_random_moments_restores_exactly() {
    let bin = tempfile::tempdir().unwrap();
    let prog = trapper::compile("workload", bin.path());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2024);
    let rounds = 16;
    let mut restored = 0;
    for round in 0..rounds {
        let args = vec![format!("{}", 40 + round), "300".to_string()];
        let traps = count_traps(&prog, &args);
        assert!(traps > 150, "the workload traps: {traps}");
        let c1 = rng.gen_range(5..traps / 2);
        let c2 = rng.gen_range(c1 + 1..traps - 2);
        let k = rng.gen_range(c2..traps);
        let us = rng.gen_range(0..300);
        let d = scratch("kill");
        let (expect, mut pool, end, verdicts) = run_once(
            d.path(),
            &prog,
            args,
            [None; 3],
            vec![Journal::filter()],
            &[c1, c2],
            Some((k, us)),
        );
        assert!(verdicts.is_empty(), "round {round}: verdicts {verdicts:?}");
        let what = format!("round {round} (checkpoints at traps {c1}, {c2}; killed {us} µs after trap {k}, {end:?})");
        if restore(d.path(), &mut pool, &expect, &what) > 0 {
            restored += 1;
        }
    }
    assert_eq!(restored, rounds, "every round restored a checkpoint");
}

fn sqlite3() -> Option<PathBuf> {
    ["/usr/bin/sqlite3", "/bin/sqlite3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A script of many small transactions (inserts, updates, deletes).
fn sql_script(mode: &str, transactions: u32, seed: u64) -> String {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut s = format!(
        "PRAGMA journal_mode={mode};\nCREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT, n INTEGER);\n"
    );
    for i in 0..transactions {
        s.push_str("BEGIN;\n");
        for _ in 0..rng.gen_range(1..6) {
            let len = rng.gen_range(10..600);
            s.push_str(&format!(
                "INSERT INTO t(v, n) VALUES (hex(randomblob({len})), {});\n",
                rng.gen::<u32>()
            ));
        }
        if i % 3 == 0 {
            s.push_str(&format!(
                "UPDATE t SET v = hex(randomblob(50)) WHERE n % 5 = {};\n",
                rng.gen_range(0..5)
            ));
        }
        if i % 7 == 0 {
            s.push_str("DELETE FROM t WHERE k % 11 = 0;\n");
        }
        s.push_str("COMMIT;\n");
    }
    s
}

#[test]
fn sqlite3_under_the_filter_restores_an_intact_database() {
    let Some(sqlite) = sqlite3() else {
        eprintln!("SKIPPED: sqlite3 is not installed (apt-get install sqlite3; scripts/apt-packages.txt lists it)");
        return;
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for (round, mode) in ["DELETE", "TRUNCATE", "DELETE", "PERSIST"]
        .into_iter()
        .enumerate()
    {
        let script_dir = tempfile::tempdir().unwrap();
        let script = script_dir.path().join("s.sql");
        std::fs::write(&script, sql_script(mode, 250, round as u64)).unwrap();
        let open_script = || {
            let f = std::fs::File::open(&script).unwrap();
            std::os::fd::IntoRawFd::into_raw_fd(f)
        };
        // Traps of a whole run (on its own database).
        let traps = {
            let d = scratch("sqlcount");
            let fd = open_script();
            let child = trapper::spawn(&Spawn {
                program: &sqlite,
                args: vec!["db".into()],
                cwd: d.path(),
                filters: vec![Journal::filter()],
                stdio: [Some(fd), None, None],
                traced: true,
            });
            let mut n = 0;
            assert_eq!(
                child.run(|_, _| {
                    n += 1;
                    Next::Continue
                }),
                End::Exited(0)
            );
            // SAFETY: closing our copy of the script descriptor.
            unsafe { libc::close(fd) };
            n
        };
        assert!(traps > 1000, "sqlite3 trapped {traps} times");
        let c = rng.gen_range(traps / 5..traps / 2);
        let kill = (rng.gen_range(c + 1..traps), rng.gen_range(0..200));
        let d = scratch("sql");
        let fd = open_script();
        let (expect, mut pool, end, verdicts) = run_once(
            d.path(),
            &sqlite,
            vec!["db".into()],
            [Some(fd), None, None],
            vec![Journal::filter()],
            &[c],
            Some(kill),
        );
        // SAFETY: closing our copy of the script descriptor.
        unsafe { libc::close(fd) };
        assert!(verdicts.is_empty(), "{mode}: verdicts {verdicts:?}");
        let what = format!(
            "sqlite3 {mode}: checkpoint at trap {c} of {traps}, killed after trap {} ({end:?})",
            kill.0
        );
        assert_eq!(restore(d.path(), &mut pool, &expect, &what), 1, "{what}");
        // The restored files are a state sqlite can open: integrity_check on a copy (opening
        // may roll a hot journal back).
        let copy = scratch("sqlcopy");
        for e in std::fs::read_dir(d.path()).unwrap().flatten() {
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
            }
        }
        let out = std::process::Command::new(&sqlite)
            .arg(copy.path().join("db"))
            .arg("PRAGMA integrity_check; SELECT count(*) FROM t;")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.starts_with("ok\n"),
            "{what}: integrity_check: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn standard_streams_escalate_and_their_overwrites_are_undone() {
    let bin = tempfile::tempdir().unwrap();
    let prog = trapper::compile("stdout_writer", bin.path());
    let d = scratch("stdout");
    let out = d.path().join("out");
    let original: Vec<u8> = (0..30_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&out, &original).unwrap();
    // A regular file opened read-write at offset 0 as standard output: escalation is needed
    // before the program runs; an O_APPEND one does not need it.
    let rw = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&out)
        .unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&rw);
    {
        let sleeper = trapper::spawn(&Spawn {
            program: Path::new("/bin/sleep"),
            args: vec!["5".into()],
            cwd: d.path(),
            filters: vec![],
            stdio: [None, Some(fd), None],
            traced: false,
        });
        wait_for_exec(sleeper.pid, "sleep");
        let j = journal_for_checks(d.path());
        assert!(j.escalation_needed(sleeper.pid).unwrap());
        sleeper.kill();
        reap(sleeper.pid);
        let app = std::fs::OpenOptions::new().append(true).open(&out).unwrap();
        let sleeper = trapper::spawn(&Spawn {
            program: Path::new("/bin/sleep"),
            args: vec!["5".into()],
            cwd: d.path(),
            filters: vec![],
            stdio: [None, Some(std::os::fd::AsRawFd::as_raw_fd(&app)), None],
            traced: false,
        });
        wait_for_exec(sleeper.pid, "sleep");
        assert!(!j.escalation_needed(sleeper.pid).unwrap());
        sleeper.kill();
        reap(sleeper.pid);
    }
    // The escalated program (both filters, as the monitor leaves it): a checkpoint after its
    // first writes; after it ends, its overwrites of standard output since are undone.
    let (expect, mut pool, end, verdicts) = run_once(
        d.path(),
        &prog,
        vec![],
        [None, Some(fd), None],
        vec![Journal::filter(), Journal::escalation_filter()],
        &[5],
        None,
    );
    assert_eq!(
        verdicts,
        vec![
            Verdict::EscalateAll,
            Verdict::EscalateAll,
            Verdict::Escalate
        ],
        "lseek back, dup, close(0)"
    );
    assert_eq!(end, End::Exited(0));
    assert_ne!(
        std::fs::read(&out).unwrap()[..1000],
        original[..1000],
        "the program wrote"
    );
    assert_eq!(restore(d.path(), &mut pool, &expect, "stdout"), 1);
}

fn journal_for_checks(dir: &Path) -> Journal {
    let sim = SimMedium::new(0).unwrap();
    let mut pool = Pool::create_on(Box::new(sim), &CreateOptions::new("kioku.test")).unwrap();
    Journal::create(&mut pool, opts(dir)).unwrap()
}

fn wait_for_exec(pid: i32, comm: &str) {
    for _ in 0..500 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("process {pid} did not exec {comm}");
}

fn reap(pid: i32) {
    let mut st = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
}
