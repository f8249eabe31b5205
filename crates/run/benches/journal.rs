//! What the file journal costs (bench/run/journal.sh): per trapped call and for sqlite3, with
//! the pool on shm and on file media, against the same program run plainly. The program times
//! its own calls; the trap loop is the tests' small ptrace loop.

#[path = "../tests/journal_common/trapper.rs"]
mod trapper;

use std::path::{Path, PathBuf};
use std::time::Instant;

use kioku_pool::{CreateOptions, Pool};
use kioku_run::journal::{Journal, JournalOptions, Verdict};
use trapper::{End, Next, Spawn};

#[derive(Clone, Copy, PartialEq)]
enum How {
    Plain,
    /// Filter and ptrace loop, the journal not called: the cost of a trap alone.
    TrapOnly,
    /// With the journal, its pool in this directory.
    Journal(&'static str),
}

fn pool_dir(kind: &str) -> PathBuf {
    match kind {
        "shm" => PathBuf::from("/dev/shm"),
        _ => PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
    }
}

/// Runs `program args` in a fresh directory the way `how` says; returns what it printed and
/// the wall time.
fn run(program: &Path, args: &[String], stdin: Option<&Path>, how: How) -> (String, f64) {
    let work = tempfile::tempdir_in("/dev/shm").unwrap();
    let out = work.path().join(".out");
    let out_f = std::fs::File::create(&out).unwrap();
    let in_f = stdin.map(|p| std::fs::File::open(p).unwrap());
    let raw = |f: &std::fs::File| std::os::fd::AsRawFd::as_raw_fd(f);
    let spawn = Spawn {
        program,
        args: args.to_vec(),
        cwd: work.path(),
        filters: if how == How::Plain {
            vec![]
        } else {
            vec![Journal::filter()]
        },
        stdio: [in_f.as_ref().map(raw), Some(raw(&out_f)), None],
        traced: how != How::Plain,
    };
    let t0 = Instant::now();
    let end = match how {
        How::Plain | How::TrapOnly => trapper::spawn(&spawn).run(|_, _| Next::Continue),
        How::Journal(kind) => {
            let dir = tempfile::tempdir_in(pool_dir(kind)).unwrap();
            let mut pool = Pool::create(
                &dir.path().join("b.pool"),
                &CreateOptions::new("kioku.bench"),
            )
            .unwrap();
            pool.commit(&[0]).unwrap();
            let mut j = Journal::create(
                &mut pool,
                JournalOptions {
                    stash_dir: Some(work.path().join(".kioku-stash")),
                    ..Default::default()
                },
            )
            .unwrap();
            let mut epoch = 0;
            let end = trapper::spawn(&spawn).run(|pid, regs| {
                let marker = regs.orig_rax == libc::SYS_mkdir as u64;
                // A checkpoint at the end of the setup (the benchmark program's mkdir), and
                // for sqlite3, at its start.
                if epoch == 0 && (marker || stdin.is_some()) {
                    epoch = 1;
                    j.begin_epoch(1);
                    j.sync_files().unwrap();
                    pool.commit(&[1]).unwrap();
                    j.committed(&mut pool, 1).unwrap();
                }
                let v = j.on_trap(&mut pool, pid, pid, regs).unwrap();
                assert_eq!(v, Verdict::Run);
                Next::Continue
            });
            drop(j);
            end
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(end, End::Exited(0));
    (std::fs::read_to_string(&out).unwrap(), secs)
}

fn per_call(program: &Path, mode: &str, n: u64, how: How) -> f64 {
    // Median of three.
    let mut v: Vec<f64> = (0..3)
        .map(|_| {
            let (out, _) = run(program, &[mode.into(), n.to_string()], None, how);
            out.trim().parse::<f64>().unwrap() / 1000.0
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[1]
}

fn main() {
    let bin = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/run/journal_work.c");
    let prog = bin.path().join("journal_work");
    let st = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());

    println!("| call (µs per call) | plain | trap only | journal, shm pool | journal, file pool | shm / plain | file / plain |");
    println!("|---|---|---|---|---|---|---|");
    for (mode, n, n_file, what) in [
        (
            "pwrite",
            20_000u64,
            2_000u64,
            "pwrite 4 KiB over existing data",
        ),
        ("append", 20_000, 20_000, "append 4 KiB (O_APPEND)"),
        ("pipe", 50_000, 50_000, "write 64 B to a pipe at fd >= 3"),
    ] {
        let plain = per_call(&prog, mode, n, How::Plain);
        let trap = per_call(&prog, mode, n, How::TrapOnly);
        let shm = per_call(&prog, mode, n, How::Journal("shm"));
        let file = per_call(&prog, mode, n_file, How::Journal("file"));
        println!(
            "| {what} | {plain:.2} | {trap:.2} | {shm:.2} | {file:.2} | {:.1}× | {:.1}× |",
            shm / plain,
            file / plain
        );
    }

    let sqlite = Path::new("/usr/bin/sqlite3");
    if !sqlite.exists() {
        eprintln!("sqlite3 missing: its rows are skipped");
        return;
    }
    let script = bin.path().join("s.sql");
    let mut s = String::from("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);\n");
    for i in 0..300 {
        s.push_str("BEGIN;\n");
        for r in 0..20 {
            s.push_str(&format!(
                "INSERT INTO t(v) VALUES ('row {i} {r} {}');\n",
                "x".repeat(100)
            ));
        }
        s.push_str("COMMIT;\n");
    }
    std::fs::write(&script, s).unwrap();
    let args = ["db".to_string()];
    let time = |how| {
        let mut v: Vec<f64> = (0..3)
            .map(|_| run(sqlite, &args, Some(&script), how).1)
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[1]
    };
    let plain = time(How::Plain);
    let trap = time(How::TrapOnly);
    let shm = time(How::Journal("shm"));
    let file = time(How::Journal("file"));
    println!();
    println!("| sqlite3, 300 transactions of 20 inserts (s) | plain | trap only | journal, shm pool | journal, file pool | shm / plain | file / plain |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| database on /dev/shm | {plain:.3} | {trap:.3} | {shm:.3} | {file:.3} | {:.2}× | {:.2}× |",
        shm / plain,
        file / plain
    );
}
