//! Real programs under `kioku run`, SIGKILLed and restored: programs nobody here wrote (sqlite3,
//! a JVM, sh with pipelines, `make -j2` and gcc, Python's multiprocessing, node.js) and three
//! of ours that gather what those use (an epoll event loop over timerfd, eventfd, signalfd,
//! POSIX and interval timers, a self-pipe and inotify; a TCP server; a process tree with pipes,
//! a socketpair, shared memory, process groups and a zombie).
//!
//! Each program first runs plainly (the reference), then under `kioku run --interval 15ms`
//! (50ms for the heavy ones) and is SIGKILLed at random moments — the program (every process
//! of it, found by walking `PPid` links down from the monitor) and, every other kill, the
//! monitor — restored with `kioku restore --pool P`, killed again, until it finishes. Then its
//! stdout and every file of its working directory must equal the reference's byte for byte,
//! the program's own invariants must hold (sqlite's integrity check, the built program's
//! output, the server's log against its sum), no process of the run may be left, and kioku
//! must not have stopped taking checkpoints nor logged an ERROR.
//!
//! KIOKU_PROC_KILLS: kill-and-restore cycles per program (default 2, one run: a kill of the
//! program, then one of the monitor; at most 3 per run from a fresh start, then the run is left
//! to finish; `make soak` takes 50); KIOKU_SEED replays the kill moments;
//! KIOKU_PROC_REFERENCES: how many reference runs are made and compared with each other
//! (default 1; `make soak` uses 3 to show the programs are deterministic).
//!
//! A test whose tool is missing skips, saying which Debian package to install.

#[path = "common/programs.rs"]
mod programs;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use programs::*;
use rand::Rng;

/// Kills of one run at most; after them the run is left to finish.
const KILLS_PER_RUN: usize = 3;
/// Kill-and-restore cycles per program without KIOKU_PROC_KILLS: kills alternate between the
/// program and the monitor, so two take each kind once unless a kill found no checkpoint yet
/// (`make soak` takes 50).
const DEFAULT_KILLS: usize = 2;
/// Fresh starts in a row (killed before a first checkpoint) before the test gives up.
const FRESH_STARTS: usize = 5;

fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A tag no other run of this test process has.
fn new_tag(name: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proc")
}

/// `name` from /usr/bin (the Debian package's) or else from PATH; `None` after saying loudly
/// that `test` is skipped and what to install.
fn tool(test: &str, name: &str, package: &str) -> Option<PathBuf> {
    let in_usr_bin = Path::new("/usr/bin").join(name);
    let found = if in_usr_bin.exists() {
        Some(in_usr_bin)
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.exists())
        })
    };
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: `{name}` is not installed; install it with `apt-get install -y {package}` \
             (or `make deps`)"
        );
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Where a run lives

/// One run of a program: `work/` is its working directory, every file in it compared with the
/// reference's; beside it kioku's pool and the program's (and kioku's) stdout and stderr.
struct Space {
    root: tempfile::TempDir,
    /// Where the pool is when not in `root` (/dev/shm, for programs that write much memory).
    pool_dir: Option<tempfile::TempDir>,
}

impl Space {
    fn new(name: &str) -> Space {
        let root = tempfile::Builder::new()
            .prefix(&format!("kioku-{name}-"))
            .tempdir()
            .expect("temp dir");
        std::fs::create_dir(root.path().join("work")).unwrap();
        Space {
            root,
            pool_dir: None,
        }
    }

    /// The space of `spec`'s runs.
    fn of(spec: &Spec) -> Space {
        let mut s = Space::new(spec.name);
        if spec.shm_pool && Path::new("/dev/shm").is_dir() {
            s.pool_dir = Some(
                tempfile::Builder::new()
                    .prefix(&format!("kioku-{}-", spec.name))
                    .tempdir_in("/dev/shm")
                    .expect("temp dir in /dev/shm"),
            );
        }
        s
    }
    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }
    fn pool(&self) -> PathBuf {
        self.pool_dir
            .as_ref()
            .unwrap_or(&self.root)
            .path()
            .join("p.pool")
    }
    fn stdout(&self) -> PathBuf {
        self.root.path().join("stdout.txt")
    }
    fn stderr(&self) -> PathBuf {
        self.root.path().join("stderr.txt")
    }
    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.stderr()).unwrap_or_default()).into_owned()
    }
    /// Everything but stderr (the record of earlier attempts) gone, as before a first start: a
    /// fresh `kioku run` must not find the killed run's files (a half-written object file would
    /// look up to date to make).
    fn reset(&self, spec: &Spec) {
        for p in [self.stdout(), self.pool()] {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_dir_all(self.work());
        std::fs::create_dir(self.work()).unwrap();
        (spec.setup)(&self.work());
    }
    /// A command that runs in `work/` with stdin from /dev/null, stdout and stderr appended to
    /// the run's files, and the run's tag in its environment.
    fn command(&self, program: &str, tag: &str) -> Command {
        let open = |p: PathBuf| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .unwrap()
        };
        let mut c = Command::new(program);
        c.current_dir(self.work())
            .stdin(Stdio::null())
            .stdout(open(self.stdout()))
            .stderr(open(self.stderr()))
            .env(TAG_VAR, tag)
            // An outer make's jobserver (`make soak`) is not the program's.
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("MAKELEVEL")
            // Default flags: nothing picked up from the environment.
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("_JAVA_OPTIONS");
        c
    }
}

// ---------------------------------------------------------------------------------------------
// What a program is

type Setup = Box<dyn Fn(&Path)>;
type Check = Box<dyn Fn(&Path, &[u8]) -> String>;

/// A program under test.
struct Spec {
    name: &'static str,
    /// Relative paths are relative to the work directory.
    cmd: Vec<String>,
    /// `kioku run --interval`.
    interval: &'static str,
    /// KIOKU_VERIFY_CAPTURE=1: kioku compares every capture with the program's memory (costly
    /// for the large ones).
    verify_capture: bool,
    /// Prepares the work directory before a fresh start.
    setup: Setup,
    /// The program's own invariants on its finished work directory and stdout (panics naming
    /// what is wrong); the summary it returns must equal the reference's.
    check: Check,
    /// Files of the work directory not compared (they differ from run to run by design).
    ignore: &'static [&'static str],
    /// The pool on /dev/shm (the `shm` medium: no device flushes), for programs that write
    /// hundreds of MiB between checkpoints (a JVM's collector).
    shm_pool: bool,
}

impl Spec {
    fn new(name: &'static str, cmd: Vec<String>) -> Spec {
        Spec {
            name,
            cmd,
            interval: "15ms",
            verify_capture: true,
            setup: Box::new(|_| {}),
            check: Box::new(|_, _| String::new()),
            ignore: &[],
            shm_pool: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing runs

/// Every file under `dir` (relative path → contents; directories as empty entries ending in
/// `/`, symlinks as `-> target`), except `ignore`.
fn tree(dir: &Path, ignore: &[&str]) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, ignore: &[&str], out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if ignore.contains(&rel.as_str()) {
                continue;
            }
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                let t = std::fs::read_link(&p).unwrap_or_default();
                out.insert(rel, format!("-> {}", t.display()).into_bytes());
            } else if ft.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &p, ignore, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, ignore, &mut out);
    out
}

/// Where `got` departs from `want`, in words; `None` when they are equal.
fn difference(what: &str, want: &[u8], got: &[u8]) -> Option<String> {
    if want == got {
        return None;
    }
    let text = |b: &[u8]| {
        b.iter()
            .take(4096)
            .all(|&c| c == b'\n' || c == b'\t' || (32..127).contains(&c))
    };
    if text(want) && text(got) {
        let (w, g): (Vec<&[u8]>, Vec<&[u8]>) = (
            want.split(|&c| c == b'\n').collect(),
            got.split(|&c| c == b'\n').collect(),
        );
        let i = w.iter().zip(&g).take_while(|(a, b)| a == b).count();
        let line = |v: &Vec<&[u8]>| match v.get(i) {
            Some(l) => format!("{:?}", String::from_utf8_lossy(l)),
            None => "(end of file)".into(),
        };
        return Some(format!(
            "{what} differs from the uninterrupted run's at line {}: expected {}, got {} \
             ({} lines expected, {} got)",
            i + 1,
            line(&w),
            line(&g),
            w.len() - 1,
            g.len() - 1
        ));
    }
    let i = want.iter().zip(got).take_while(|(a, b)| a == b).count();
    Some(format!(
        "{what} differs from the uninterrupted run's at byte {i} ({} bytes expected, {} got)",
        want.len(),
        got.len()
    ))
}

/// The differences between two finished runs: stdout, then every file of the work directory.
fn differences(want: &Space, got: &Space, ignore: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let read = |p: PathBuf| std::fs::read(p).unwrap_or_default();
    out.extend(difference(
        "stdout",
        &read(want.stdout()),
        &read(got.stdout()),
    ));
    let (w, g) = (tree(&want.work(), ignore), tree(&got.work(), ignore));
    for (name, content) in &w {
        match g.get(name) {
            None => out.push(format!("{name} is missing (the uninterrupted run has it)")),
            Some(c) => out.extend(difference(name, content, c)),
        }
    }
    for name in g.keys().filter(|n| !w.contains_key(*n)) {
        out.push(format!(
            "{name} exists (the uninterrupted run has no such file)"
        ));
    }
    out
}

/// Kills whatever still runs with its tag when dropped (a failed test leaves nothing behind).
struct Reaper(String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in tagged(&self.0) {
            sigkill(p.pid);
        }
    }
}

/// Waits up to `d` for the processes tagged `tag` to end; those left are killed and described.
fn leftovers(tag: &str, d: Duration) -> Option<String> {
    let t0 = Instant::now();
    loop {
        let left = tagged(tag);
        if left.is_empty() {
            return None;
        }
        if t0.elapsed() >= d {
            let list: Vec<String> = left.iter().map(|p| format!("  {p}")).collect();
            for p in &left {
                sigkill(p.pid);
            }
            return Some(list.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (_, Some(s)) => format!("signal {s}"),
        _ => format!("{st}"),
    }
}

fn killed(st: ExitStatus) -> bool {
    st.signal() == Some(libc::SIGKILL) || st.code() == Some(128 + libc::SIGKILL)
}

/// The end of a log, for panic messages.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    let mut out = String::new();
    if from > 0 {
        let _ = writeln!(out, "  … ({from} earlier lines)");
    }
    for l in &all[from..] {
        let _ = writeln!(out, "  {l}");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The reference

struct Reference {
    space: Space,
    elapsed: Duration,
    summary: String,
}

/// Runs the program plainly (KIOKU_PROC_REFERENCES times, each compared with the first).
fn reference(spec: &Spec) -> Reference {
    let mut first: Option<Reference> = None;
    for i in 0..env_count("KIOKU_PROC_REFERENCES", 1).max(1) {
        let space = Space::new(spec.name);
        (spec.setup)(&space.work());
        let tag = new_tag(spec.name);
        let _reaper = Reaper(tag.clone());
        let t0 = Instant::now();
        let mut child = space
            .command(&spec.cmd[0], &tag)
            .args(&spec.cmd[1..])
            .spawn()
            .unwrap_or_else(|e| panic!("{}: starting {:?}: {e}", spec.name, spec.cmd));
        let st = wait_until(&mut child, Instant::now() + Duration::from_secs(300));
        let elapsed = t0.elapsed();
        let Some(st) = st else {
            let left = leftovers(&tag, Duration::ZERO).unwrap_or_default();
            panic!(
                "{}: the reference run did not end in 300 s:\n{left}",
                spec.name
            );
        };
        assert!(
            st.success(),
            "{}: the reference run of {:?} failed ({}):\n{}",
            spec.name,
            spec.cmd,
            describe(st),
            tail(&space.stderr_text(), 40)
        );
        if let Some(left) = leftovers(&tag, Duration::from_secs(5)) {
            panic!(
                "{}: processes of the reference run left after it ended:\n{left}",
                spec.name
            );
        }
        let stdout = std::fs::read(space.stdout()).unwrap();
        let summary = (spec.check)(&space.work(), &stdout);
        eprintln!(
            "{}: reference run {i}: {:.2} s",
            spec.name,
            elapsed.as_secs_f64()
        );
        match &first {
            None => {
                first = Some(Reference {
                    space,
                    elapsed,
                    summary,
                })
            }
            Some(r) => {
                let mut diffs = differences(&r.space, &space, spec.ignore);
                if summary != r.summary {
                    diffs.push(format!(
                        "its own check says {summary:?}, the first said {:?}",
                        r.summary
                    ));
                }
                assert!(
                    diffs.is_empty(),
                    "{}: the program is not deterministic: reference run {i} differs from run 0:\n  {}",
                    spec.name,
                    diffs.join("\n  ")
                );
            }
        }
    }
    first.unwrap()
}

/// `child`'s status once it exits, or `None` at `deadline`.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

// ---------------------------------------------------------------------------------------------
// A run under kioku

/// One run under kioku, from a fresh `kioku run` through kills and restores to its end.
struct Session<'a> {
    spec: &'a Spec,
    space: Space,
    tag: String,
    run: usize,
    monitor: Option<Child>,
    started: Instant,
    /// What happened so far, for panic messages.
    history: Vec<String>,
    /// Kills after which the program was restored from a checkpoint.
    kills: usize,
    restores: usize,
    fresh_starts: usize,
    learned: Learned,
    /// Whether the monitor is a `kioku restore`.
    restoring: bool,
    /// The moment of the last kill after its monitor's start.
    last_kill: Duration,
    /// How long the run may take after its last (re)start.
    patience: Duration,
    /// Kills come at most this long (ms) after the earliest sensible moment.
    window: u64,
}

/// What runs teach the next ones about the program under kioku.
#[derive(Clone, Copy, Default)]
struct Learned {
    /// A kill of a fresh `kioku run` before this moment (ms) left no checkpoint: its first
    /// checkpoint takes at least this long (much longer than the interval for a large program),
    /// so later first kills come after it.
    first_checkpoint: u64,
    /// Fresh starts since a restore last found a checkpoint.
    fresh_in_row: usize,
}

impl Drop for Session<'_> {
    /// A failed test leaves no process behind: the monitor and everything tagged are killed.
    fn drop(&mut self) {
        if let Some(m) = self.monitor.as_mut() {
            if m.try_wait().ok().flatten().is_none() {
                sigkill(m.id() as i32);
                let _ = m.wait();
            }
        }
        drop(Reaper(self.tag.clone()));
    }
}

impl<'a> Session<'a> {
    fn start(spec: &'a Spec, run: usize, reference: &Reference, learned: Learned) -> Session<'a> {
        let mut s = Session {
            spec,
            space: Space::of(spec),
            tag: new_tag(spec.name),
            run,
            monitor: None,
            started: Instant::now(),
            history: Vec::new(),
            kills: 0,
            restores: 0,
            fresh_starts: 0,
            learned,
            restoring: false,
            last_kill: Duration::ZERO,
            // How long a run may take after its last (re)start before it counts as hung.
            patience: Duration::from_secs(60) + reference.elapsed * 20,
            window: (reference.elapsed.as_millis() as u64 / 2).clamp(100, 5000),
        };
        s.fresh_start();
        s
    }

    fn spawn(&mut self, args: &[String]) {
        let mut c = self.space.command(kioku(), &self.tag);
        c.args(args);
        if self.spec.verify_capture {
            c.env("KIOKU_VERIFY_CAPTURE", "1");
        }
        self.monitor = Some(c.spawn().expect("spawning kioku"));
        self.started = Instant::now();
    }

    /// `kioku run` on a clean work directory.
    fn fresh_start(&mut self) {
        self.space.reset(self.spec);
        let pool = self.space.pool().to_str().unwrap().to_string();
        let mut args = s(&[
            "run",
            "--pool",
            &pool,
            "--interval",
            self.spec.interval,
            "--",
        ]);
        args.extend(self.spec.cmd.iter().cloned());
        self.history.push("kioku run".into());
        self.restoring = false;
        self.spawn(&args);
    }

    fn restore(&mut self) {
        let pool = self.space.pool().to_str().unwrap().to_string();
        self.restores += 1;
        self.history.push("kioku restore".into());
        self.restoring = true;
        self.spawn(&s(&[
            "restore",
            "--pool",
            &pool,
            "--interval",
            self.spec.interval,
        ]));
    }

    fn monitor_mut(&mut self) -> &mut Child {
        self.monitor.as_mut().expect("a monitor runs")
    }

    /// Panics with everything known: the run, what happened, kioku's (and the program's)
    /// stderr, and the processes still around (which are then killed).
    fn fail(&mut self, what: impl std::fmt::Display) -> ! {
        let mut procs = String::new();
        if let Some(m) = self.monitor.as_mut() {
            if m.try_wait().ok().flatten().is_none() {
                for p in descendants(m.id() as i32) {
                    let _ = writeln!(procs, "  {p}");
                }
                kill_program(m, Some(&self.tag));
                sigkill(m.id() as i32);
                let _ = m.wait();
            }
        }
        if let Some(left) = leftovers(&self.tag, Duration::ZERO) {
            let _ = writeln!(procs, "{left}");
        }
        let stdout = std::fs::read(self.space.stdout()).unwrap_or_default();
        panic!(
            "{} run {}: {what}\n--- what happened: {}\n--- processes of the run then:\n{}\
             --- stderr (kioku's and the program's):\n{}--- stdout (the program's):\n{}",
            self.spec.name,
            self.run,
            self.history.join(", "),
            if procs.is_empty() {
                "  (none)\n".to_string()
            } else {
                procs
            },
            tail(&self.space.stderr_text(), 60),
            tail(&String::from_utf8_lossy(&stdout), 15)
        );
    }

    /// Kioku's log must not say it stopped taking checkpoints, nor log an error.
    fn check_log(&mut self) {
        let log = self.space.stderr_text();
        if let Some(l) = log
            .lines()
            .find(|l| l.contains("no more checkpoints") || l.contains("kioku: no checkpoints"))
        {
            let l = l.to_string();
            self.fail(format_args!("kioku stopped taking checkpoints: {l}"));
        }
        // (KIOKU_VERIFY_CAPTURE=1 logs every difference between a capture and the program's
        // memory as an ERROR.)
        if let Some(l) = log.lines().find(|l| l.trim_start().starts_with("ERROR")) {
            let l = l.to_string();
            self.fail(format_args!("kioku logged an error: {l}"));
        }
    }

    /// After the monitor ended: nothing of the run may be left.
    fn check_gone(&mut self, after: &str) {
        // Every process of the program dies with it (a SIGKILL in uninterruptible sleep may
        // take a moment): one still running would race with the restored program.
        if let Some(left) = leftovers(&self.tag, Duration::from_secs(3)) {
            self.fail(format_args!(
                "processes of the run still alive 3 s after {after} (killed now):\n{left}"
            ));
        }
    }

    /// Whether the monitor that just ended with `st` was a restore that found no checkpoint
    /// (the program was killed before its first): then the run starts afresh, as a user would.
    fn starts_afresh(&mut self, st: ExitStatus) -> bool {
        let log = self.space.stderr_text();
        let last = log.lines().last().unwrap_or("");
        let none = st.code() == Some(1)
            && (last.contains("no checkpoint yet") || last.contains("no such pool"));
        if !none {
            return false;
        }
        self.fresh_starts += 1;
        self.learned.fresh_in_row += 1;
        let before = self.last_kill.as_millis() as u64;
        // Later next time; twice as late when it keeps happening (a loaded machine, a JVM
        // whose first checkpoint is large).
        let later = if self.learned.fresh_in_row > 1 {
            2 * before
        } else {
            before + 1
        };
        self.learned.first_checkpoint = self.learned.first_checkpoint.max(later);
        // The kill before did not count: nothing was restored.
        self.kills = self.kills.saturating_sub(1);
        if self.learned.fresh_in_row > FRESH_STARTS {
            self.fail(format_args!(
                "no checkpoint was taken in {FRESH_STARTS} starts in a row (the last killed \
                 after {before} ms)"
            ));
        }
        self.history
            .push("no checkpoint yet: started afresh".into());
        self.fresh_start();
        true
    }

    /// When to kill next, after the last (re)start: a restore at any moment (even while it
    /// restores), a fresh run not before its first checkpoint can be ready, as far as known.
    fn next_kill(&self, rng: &mut impl Rng) -> Duration {
        let from = if self.restoring {
            5
        } else {
            self.learned.first_checkpoint.max(5)
        };
        Duration::from_millis(rng.gen_range(from..=from + self.window))
    }

    /// Waits up to `d` for the monitor to end.
    fn wait_for(&mut self, d: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + d;
        wait_until(self.monitor_mut(), deadline)
    }

    /// SIGKILLs the program (every process of it) or the monitor; returns how the monitor
    /// ended.
    fn kill(&mut self, of_monitor: bool) -> ExitStatus {
        self.last_kill = self.started.elapsed();
        let ms = self.last_kill.as_millis();
        let tag = self.tag.clone();
        let m = self.monitor_mut();
        let what = if of_monitor {
            sigkill(m.id() as i32);
            format!("SIGKILL of the monitor at {ms} ms")
        } else {
            let pids = kill_program(m, Some(&tag));
            format!("SIGKILL of the program at {ms} ms (pids {pids:?})")
        };
        let st = match wait_until(self.monitor_mut(), Instant::now() + Duration::from_secs(20)) {
            Some(st) => st,
            None => self.fail(format_args!("kioku still runs 20 s after the {what}")),
        };
        self.history
            .push(format!("{what} → kioku {}", describe(st)));
        self.check_gone(&what);
        self.check_log();
        if killed(st) {
            self.kills += 1;
            if self.restoring {
                // A restore that ran until killed had a checkpoint to restore.
                self.learned.fresh_in_row = 0;
            }
        }
        st
    }

    /// Waits for the monitor to end on its own; fails after `patience`.
    fn wait_end(&mut self) -> ExitStatus {
        let deadline = self.started + self.patience;
        match wait_until(self.monitor_mut(), deadline) {
            Some(st) => st,
            None => {
                let secs = self.patience.as_secs();
                self.fail(format_args!(
                    "still running {secs} s after its last (re)start: hung?"
                ))
            }
        }
    }

    /// The run ended with `st`: it must have ended well, left nothing, and match `reference`.
    fn finish(&mut self, st: ExitStatus, reference: &Reference) {
        self.history.push(format!("kioku ended: {}", describe(st)));
        self.check_log();
        if !st.success() {
            let (kills, restores) = (self.kills, self.restores);
            let log = self.space.stderr_text();
            let last = log
                .lines()
                .last()
                .unwrap_or("(nothing on stderr)")
                .trim()
                .to_string();
            self.fail(format_args!(
                "kioku ended with {} after {kills} kills and {restores} restores: {last}",
                describe(st)
            ));
        }
        self.check_gone("the program's end");
        let mut diffs = differences(&reference.space, &self.space, self.spec.ignore);
        let stdout = std::fs::read(self.space.stdout()).unwrap_or_default();
        let work = self.space.work();
        let check = self.spec.check.as_ref();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&work, &stdout))) {
            Ok(summary) if summary != reference.summary => diffs.push(format!(
                "the program's own check says {summary:?}, after the uninterrupted run {:?}",
                reference.summary
            )),
            Ok(_) => {}
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                diffs.push(format!("the program's own check failed: {msg}"));
            }
        }
        if !diffs.is_empty() {
            let n = self.kills;
            self.fail(format_args!(
                "after {n} kills the result is not the uninterrupted run's:\n  {}",
                diffs.join("\n  ")
            ));
        }
        eprintln!(
            "{} run {}: {} kills, {} restores, {} fresh starts: identical to the uninterrupted run",
            self.spec.name, self.run, self.kills, self.restores, self.fresh_starts
        );
    }
}

/// The whole test of a batch program: reference, then runs with kills until KIOKU_PROC_KILLS
/// kills are done.
fn kill_and_restore(spec: Spec) {
    let reference = reference(&spec);
    let mut rng = rng(spec.name);
    let total = env_count("KIOKU_PROC_KILLS", DEFAULT_KILLS);
    let (mut done, mut kill_no, mut run) = (0, 0, 0);
    let mut learned = Learned::default();
    loop {
        let want = KILLS_PER_RUN.min(total - done);
        let mut s = Session::start(&spec, run, &reference, learned);
        let st = loop {
            if s.kills >= want {
                let st = s.wait_end();
                if s.starts_afresh(st) {
                    continue;
                }
                break st;
            }
            let after = s.next_kill(&mut rng);
            if let Some(st) = s.wait_for(after) {
                if s.starts_afresh(st) {
                    continue;
                }
                break st;
            }
            let st = s.kill(kill_no % 2 == 1);
            kill_no += 1;
            if killed(st) {
                s.restore();
            } else if !s.starts_afresh(st) {
                break st;
            }
        };
        s.finish(st, &reference);
        learned = s.learned;
        done += s.kills;
        run += 1;
        if enough(spec.name, done, total, run) {
            break;
        }
    }
}

/// Whether the test has done its kills; fails when runs keep ending before them.
fn enough(name: &str, done: usize, total: usize, runs: usize) -> bool {
    if done >= total {
        return true;
    }
    assert!(
        runs < 2 * total + 2,
        "{name}: only {done} of {total} kills were followed by a restore from a checkpoint in \
         {runs} runs: the program finished before the kills came, or the restores found no \
         checkpoint"
    );
    false
}

// ---------------------------------------------------------------------------------------------
// Our programs

#[test]
fn pi_control_takes_the_same_kills_and_checks() {
    // The control: a program kioku handles today, through the same kills and checks.
    let pi = program("pi", false);
    kill_and_restore(Spec::new("pi", s(&[pi.to_str().unwrap(), "6000"])));
}

#[test]
fn evloop_epoll_timers_signals_inotify_survive_sigkill() {
    let p = program("evloop", false);
    let mut spec = Spec::new("evloop", s(&[p.to_str().unwrap(), ".", "1000"]));
    spec.check = Box::new(|_, out| last_line(out, "done: "));
    kill_and_restore(spec);
}

#[test]
fn process_tree_with_pipes_shared_memory_and_a_zombie_survives_sigkill() {
    let p = program("tree", false);
    let mut spec = Spec::new("tree", s(&[p.to_str().unwrap(), "200", "2000000"]));
    spec.check = Box::new(|_, out| {
        let text = String::from_utf8_lossy(out);
        for w in 0..3 {
            let want = format!("worker {w} exited with code {}", 10 + w);
            assert!(text.contains(&want), "stdout lacks {want:?}");
        }
        assert!(
            text.contains("zombie reaped, exit 42"),
            "the zombie's exit code was lost"
        );
        last_line(out, "done: ")
    });
    kill_and_restore(spec);
}

#[test]
fn this_harness_finds_and_kills_every_process_of_a_run() {
    // No kioku here: `sh` plays the monitor. Its child sh has two sleeping children; when that
    // child dies they leave the monitor's tree, and only their tag still finds them.
    let space = Space::new("harness");
    let tag = new_tag("harness");
    let mut monitor = space
        .command("sh", &tag)
        .args(["-c", "sh -c 'sleep 60 & sleep 60 & wait' & wait"])
        .spawn()
        .unwrap();
    let pid = monitor.id() as i32;
    let t0 = Instant::now();
    let mut program = program_processes(pid);
    while program.len() < 3 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
        program = program_processes(pid);
    }
    let names: Vec<&str> = program.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["sh", "sleep", "sleep"],
        "parents first: {program:?}"
    );
    assert!(program.iter().all(|p| !is_kioku(p.pid)));
    sigkill(program[0].pid);
    assert!(wait_until(&mut monitor, Instant::now() + Duration::from_secs(10)).is_some());
    let left: Vec<i32> = tagged(&tag).iter().map(|p| p.pid).collect();
    assert_eq!(
        left,
        [program[1].pid, program[2].pid],
        "the orphans, found by their tag"
    );
    let report = leftovers(&tag, Duration::ZERO).expect("the orphans are reported");
    assert!(report.contains("sleep 60"), "{report}");
    assert!(
        leftovers(&tag, Duration::from_secs(3)).is_none(),
        "and killed"
    );
}

/// The last line of `out`, which must start with `prefix` (the program finished its work).
fn last_line(out: &[u8], prefix: &str) -> String {
    let text = String::from_utf8_lossy(out);
    let last = text.lines().last().unwrap_or("").to_string();
    assert!(
        last.starts_with(prefix),
        "the last line of stdout is {last:?}, not the program's final {prefix:?} line"
    );
    last
}

// ---------------------------------------------------------------------------------------------
// The TCP server, with the test as its client

/// The numbers the client sends: the i-th (from 0).
fn number(i: usize) -> i64 {
    (i as i64 * 7919) % 1000 + 1
}

const NUMBERS: usize = 80_000;
/// Numbers per connection: clients come one after another.
const PER_CLIENT: usize = 37;

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(port: u16) -> std::io::Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }
    fn ask(&mut self, line: &str) -> std::io::Result<String> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(answer.trim_end().to_string())
    }
}

/// "count sum" → the pair.
fn parse_state(s: &str) -> Option<(usize, i64)> {
    let (c, x) = s.split_once(' ')?;
    Some((c.parse().ok()?, x.parse().ok()?))
}

/// The server's port once its port file appears; `None` if `alive` says it ended first.
fn port_of(work: &Path, mut alive: impl FnMut() -> bool) -> Option<u16> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        if let Ok(t) = std::fs::read_to_string(work.join("port")) {
            if let Ok(p) = t.trim().parse() {
                return Some(p);
            }
        }
        if !alive() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn server_spec() -> Spec {
    let p = program("server", false);
    let mut spec = Spec::new("server", s(&[p.to_str().unwrap(), ".", "0"]));
    spec.ignore = &["port"];
    spec.check = Box::new(|work, out| {
        // The log and the sum change together: the log's numbers add up to the final sum.
        let log = std::fs::read_to_string(work.join("accepted.log")).unwrap_or_default();
        let (mut count, mut sum) = (0usize, 0i64);
        for (i, line) in log.lines().enumerate() {
            let (c, x) = parse_state(line)
                .unwrap_or_else(|| panic!("accepted.log line {} is {line:?}", i + 1));
            assert_eq!(c, i + 1, "accepted.log line {} counts {c}", i + 1);
            assert_eq!(
                x,
                number(i),
                "accepted.log line {}: {x} was never sent there",
                i + 1
            );
            count = c;
            sum += x;
        }
        let last = last_line(out, "quit: ");
        let want = format!("quit: count {count} sum {sum}");
        assert_eq!(last, want, "the server's final sum is not its log's");
        last
    });
    spec
}

/// Drives a plain server through all numbers: the reference.
fn server_reference(spec: &Spec) -> Reference {
    let space = Space::new(spec.name);
    let tag = new_tag(spec.name);
    let _reaper = Reaper(tag.clone());
    let t0 = Instant::now();
    let mut child = space
        .command(&spec.cmd[0], &tag)
        .args(&spec.cmd[1..])
        .spawn()
        .unwrap();
    let port = port_of(&space.work(), || child.try_wait().unwrap().is_none())
        .unwrap_or_else(|| panic!("server: no port file:\n{}", space.stderr_text()));
    let mut client = Client::connect(port).unwrap();
    for i in 0..NUMBERS {
        if i % PER_CLIENT == 0 && i > 0 {
            client = Client::connect(port).unwrap();
        }
        client.ask(&number(i).to_string()).unwrap();
    }
    let bye = client.ask("quit").unwrap();
    let st = wait_until(&mut child, Instant::now() + Duration::from_secs(30));
    assert!(
        st.is_some_and(|s| s.success()),
        "server reference run: {bye:?}, {st:?}"
    );
    let elapsed = t0.elapsed();
    eprintln!("server: reference run: {:.2} s", elapsed.as_secs_f64());
    if let Some(left) = leftovers(&tag, Duration::from_secs(5)) {
        panic!("server: processes left after the reference run:\n{left}");
    }
    let stdout = std::fs::read(space.stdout()).unwrap();
    let summary = (spec.check)(&space.work(), &stdout);
    Reference {
        space,
        elapsed,
        summary,
    }
}

enum Connected {
    /// A client, and the port it reached.
    To(Client, u16),
    /// The monitor ended without a checkpoint to restore: the run started afresh.
    Afresh,
}

/// Connects to the server on `port`, retrying while it is being restored. A restore of a
/// checkpoint taken before the server listened runs its `bind` again: then the port file names
/// another port, which is taken (the caller checks that the server resumed from nothing).
fn connect(s: &mut Session, mut port: u16) -> Connected {
    let t0 = Instant::now();
    loop {
        let e = match Client::connect(port) {
            Ok(c) => return Connected::To(c, port),
            Err(e) => e,
        };
        if s.monitor_mut().try_wait().unwrap().is_some() {
            let st = s.wait_end();
            if s.starts_afresh(st) {
                return Connected::Afresh;
            }
            s.fail(format_args!(
                "kioku ended ({}) while the client could not connect to port {port}: {e}",
                describe(st)
            ));
        }
        if t0.elapsed() >= Duration::from_secs(60) {
            s.fail(format_args!(
                "nothing listens on port {port} again 60 s after the (re)start: {e}"
            ));
        }
        if let Some(p) = std::fs::read_to_string(s.space.work().join("port"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            port = p;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn tcp_server_keeps_its_port_and_a_consistent_sum_across_sigkill() {
    let spec = server_spec();
    let reference = server_reference(&spec);
    let mut rng = rng(spec.name);
    let mut prefix = vec![0i64; NUMBERS + 1];
    for i in 0..NUMBERS {
        prefix[i + 1] = prefix[i] + number(i);
    }
    let total = env_count("KIOKU_PROC_KILLS", DEFAULT_KILLS);
    let (mut done, mut kill_no, mut run) = (0, 0, 0);
    let mut learned = Learned::default();
    loop {
        let want = KILLS_PER_RUN.min(total - done);
        let mut s = Session::start(&spec, run, &reference, learned);
        let mut port = None;
        let mut client: Option<Client> = None;
        // What the server holds, as far as the client knows: numbers sent, the lowest count it
        // may have after a restore (the count of the last restore: checkpoints only move on).
        // Between restores a new connection must find exactly what the client sent.
        let (mut next, mut floor) = (0usize, 0usize);
        let mut restored = false;
        let mut kill_at = Instant::now() + s.next_kill(&mut rng);
        let st = loop {
            let alive = |s: &mut Session| s.monitor_mut().try_wait().unwrap().is_none();
            if client.is_none() {
                // (Re)connect: after a start, a restore, or a client's last number.
                let p = match port {
                    Some(p) => Some(p),
                    None => port_of(&s.space.work(), || alive(&mut s)),
                };
                let Some(p) = p else {
                    let st = s.wait_end();
                    if s.starts_afresh(st) {
                        (next, floor) = (0, 0);
                        kill_at = Instant::now() + s.next_kill(&mut rng);
                        continue;
                    }
                    s.fail(format_args!(
                        "the server ended ({}) before writing its port",
                        describe(st)
                    ));
                };
                let (p, moved) = match connect(&mut s, p) {
                    Connected::To(c, p2) => {
                        client = Some(c);
                        (p2, p2 != p)
                    }
                    Connected::Afresh => {
                        (next, floor, port) = (0, 0, None);
                        kill_at = Instant::now() + s.next_kill(&mut rng);
                        continue;
                    }
                };
                port = Some(p);
                let state = client.as_mut().unwrap().ask("state");
                let Some((count, sum)) = state.as_deref().ok().and_then(parse_state) else {
                    s.fail(format_args!("the server answered {state:?} to \"state\""));
                };
                if moved && count > 0 {
                    s.fail(format_args!(
                        "the restored server listens on another port ({p}), though it resumed \
                         with {count} numbers, after it had listened"
                    ));
                }
                if restored && (count > next || count < floor) {
                    s.fail(format_args!(
                        "the server resumed with {count} numbers, but the client had sent {next} \
                         and a previous restore had {floor}"
                    ));
                }
                if !restored && count != next {
                    s.fail(format_args!(
                        "a new connection found {count} numbers, without a restore since the \
                         client had sent {next}"
                    ));
                }
                if sum != prefix[count] {
                    s.fail(format_args!(
                        "the server resumed with {count} numbers summing to {sum}; those numbers \
                         sum to {}: its sum is not the one of any checkpoint",
                        prefix[count]
                    ));
                }
                if restored {
                    floor = count;
                }
                next = count;
                restored = false;
            }
            if s.kills < want && Instant::now() >= kill_at {
                let open = client.take().unwrap();
                let st = s.kill(kill_no % 2 == 1);
                kill_no += 1;
                // The connection open at the kill ends (reset or closed), it does not hang.
                let mut old = open;
                if let Ok(a) = old.ask("state") {
                    s.fail(format_args!(
                        "a connection open at the kill still answers: {a:?}"
                    ));
                }
                if killed(st) {
                    s.restore();
                    restored = true;
                } else if s.starts_afresh(st) {
                    (next, floor, port) = (0, 0, None);
                } else {
                    s.fail(format_args!(
                        "kioku ended with {} at the kill",
                        describe(st)
                    ));
                }
                kill_at = Instant::now() + s.next_kill(&mut rng);
                continue;
            }
            let c = client.as_mut().unwrap();
            if next == NUMBERS {
                match c.ask("quit") {
                    Ok(a) if a == format!("bye {NUMBERS} {}", prefix[NUMBERS]) => {}
                    a => s.fail(format_args!("the server answered {a:?} to \"quit\"")),
                }
                break s.wait_end();
            }
            match c.ask(&number(next).to_string()) {
                Ok(a) if a == format!("{} {}", next + 1, prefix[next + 1]) => {}
                a => s.fail(format_args!(
                    "the server answered {a:?} to number {next} ({}); expected \"{} {}\"",
                    number(next),
                    next + 1,
                    prefix[next + 1]
                )),
            }
            next += 1;
            if next % PER_CLIENT == 0 {
                client = None;
            }
        };
        s.finish(st, &reference);
        learned = s.learned;
        done += s.kills;
        run += 1;
        if enough(spec.name, done, total, run) {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Programs from Debian packages

#[test]
fn sqlite3_database_is_exact_after_sigkill() {
    let Some(sqlite) = tool(
        "sqlite3_database_is_exact_after_sigkill",
        "sqlite3",
        "sqlite3",
    ) else {
        return;
    };
    let sqlite = sqlite.to_str().unwrap().to_string();
    let mut spec = Spec::new(
        "sqlite3",
        s(&[
            &sqlite,
            "-batch",
            "-bail",
            "-init",
            "/dev/null",
            "db",
            ".read build.sql",
        ]),
    );
    spec.setup =
        Box::new(|work| std::fs::write(work.join("build.sql"), sqlite_script(200, 1000)).unwrap());
    spec.check = Box::new(move |work, _| {
        let o = Command::new(&sqlite)
            .current_dir(work)
            .args(["-batch", "-init", "/dev/null", "db"])
            .arg(
                "PRAGMA integrity_check; \
                 SELECT count(*), sum(k), sum(length(v)), sum(id * k % 1000003) FROM t;;",
            )
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success() && out.starts_with("ok\n"),
            "PRAGMA integrity_check: {out} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    });
    kill_and_restore(spec);
}

/// `transactions` transactions of `rows` new rows each, each also updating and deleting a few
/// rows written by earlier ones (pages rewritten in place); every 25th updates 1 % of all rows
/// (its statement journal spills into a deleted temporary file); a query every 10.
fn sqlite_script(transactions: usize, rows: usize) -> String {
    let mut sql = String::from(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT NOT NULL);\n\
         CREATE INDEX t_k ON t(k);\n",
    );
    for j in 0..transactions {
        let lo = (j * 7919) % (j * rows + 1);
        let _ = writeln!(
            sql,
            "BEGIN;\n\
             WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < {last})\n\
             INSERT INTO t(id, k, v) SELECT {j} * {rows} + x, ({j} * {rows} + x) * 3 + x % 7, \
             printf('row %d of transaction %d', x, {j}) FROM c;\n\
             UPDATE t SET k = k + {j}, v = v || '+' WHERE id BETWEEN {lo} AND {hi};\n\
             DELETE FROM t WHERE id BETWEEN {dlo} AND {dhi};",
            last = rows - 1,
            hi = lo + 400,
            dlo = lo + 500,
            dhi = lo + 520,
        );
        if j % 25 == 24 {
            let _ = writeln!(sql, "UPDATE t SET k = k + 1 WHERE id % 101 = {};", j % 101);
        }
        sql.push_str("COMMIT;\n");
        if j % 10 == 9 {
            let _ = writeln!(sql, "SELECT {j}, count(*), sum(k), sum(length(v)) FROM t;");
        }
    }
    sql
}

#[test]
fn jvm_threads_survive_sigkill() {
    let test = "jvm_threads_survive_sigkill";
    let (Some(java), Some(javac)) = (
        tool(test, "java", "openjdk-17-jdk-headless"),
        tool(test, "javac", "openjdk-17-jdk-headless"),
    ) else {
        return;
    };
    let classes = tempfile::tempdir().unwrap();
    let st = Command::new(&javac)
        .arg("-d")
        .arg(classes.path())
        .arg(examples().join("java/Workers.java"))
        .status()
        .unwrap();
    assert!(st.success(), "javac examples/proc/java/Workers.java failed");
    let mut spec = Spec::new(
        "jvm",
        s(&[
            java.to_str().unwrap(),
            "-cp",
            classes.path().to_str().unwrap(),
            "Workers",
            "4",
            "100",
            "60000",
        ]),
    );
    // A JVM's collector rewrites hundreds of MiB between checkpoints: a longer interval, and a
    // pool that costs no device flushes.
    spec.interval = "200ms";
    spec.shm_pool = true;
    spec.verify_capture = false;
    spec.check = Box::new(|_, out| last_line(out, "done: "));
    kill_and_restore(spec);
}

#[test]
fn shell_pipeline_survives_sigkill() {
    let Some(sh) = tool("shell_pipeline_survives_sigkill", "sh", "dash") else {
        return;
    };
    let mut spec = Spec::new(
        "shell",
        s(&[
            sh.to_str().unwrap(),
            "-c",
            "for i in $(seq 1 600); do seq 1 $((i*30)) | md5sum; done",
        ]),
    );
    spec.check = Box::new(|_, out| {
        let lines = String::from_utf8_lossy(out).lines().count();
        assert_eq!(lines, 600, "a line per pipeline");
        lines.to_string()
    });
    kill_and_restore(spec);
}

#[test]
fn make_j2_survives_sigkill() {
    let test = "make_j2_survives_sigkill";
    let (Some(make), Some(_)) = (tool(test, "make", "make"), tool(test, "cc", "gcc")) else {
        return;
    };
    let mut spec = Spec::new("make", s(&[make.to_str().unwrap(), "-s", "-j2"]));
    spec.interval = "50ms";
    spec.setup = Box::new(make_project);
    spec.check = Box::new(|work, _| {
        // The built program runs and prints what the uninterrupted build's prints.
        let o = Command::new(work.join("prog")).output().unwrap();
        assert!(
            o.status.success(),
            "the built ./prog failed: {:?}",
            o.status
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    });
    kill_and_restore(spec);
}

const MAKE_UNITS: usize = 20;

/// A C project of MAKE_UNITS units and a main, and its Makefile: `make` builds `prog` and runs
/// it. Objects are built without debug information, so an object's bytes depend only on its
/// source (not on the directory).
fn make_project(work: &Path) {
    let src = work.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut header = String::new();
    for u in 0..MAKE_UNITS {
        let _ = writeln!(header, "unsigned long unit{u:02}(unsigned long x);");
        let mut c = String::from("#include \"units.h\"\n");
        // Enough code that each unit takes gcc a while at -O2.
        for f in 0..20 {
            let _ = writeln!(
                c,
                "static unsigned long step{f}(unsigned long x) {{\n\
                 \x20   for (int i = 0; i < {n}; i++) {{\n\
                 \x20       switch ((x >> (i % 60)) & 7) {{\n\
                 \x20       case 0: x = x * 6364136223846793005UL + {f}; break;\n\
                 \x20       case 1: x ^= x >> {s1}; break;\n\
                 \x20       case 2: x += x << {s2}; break;\n\
                 \x20       case 3: x = (x << 7) | (x >> 57); break;\n\
                 \x20       case 4: x -= {u}UL * {f}; break;\n\
                 \x20       case 5: x ^= 0x9e3779b97f4a7c15UL; break;\n\
                 \x20       case 6: x *= {m}UL; break;\n\
                 \x20       default: x += i; break;\n\
                 \x20       }}\n\
                 \x20   }}\n\
                 \x20   return x;\n\
                 }}",
                n = 10 + f + u,
                s1 = 1 + (f + u) % 31,
                s2 = 1 + (f * 3 + u) % 29,
                m = 2 * (f + u) + 3,
            );
        }
        let _ = writeln!(c, "unsigned long unit{u:02}(unsigned long x) {{");
        for f in 0..20 {
            let _ = writeln!(c, "    x = step{f}(x);");
        }
        let _ = writeln!(c, "    return x;\n}}");
        std::fs::write(src.join(format!("unit{u:02}.c")), c).unwrap();
    }
    std::fs::write(src.join("units.h"), header).unwrap();
    let mut main = String::from(
        "#include <stdio.h>\n#include \"units.h\"\nint main(void) {\n    unsigned long x = 1;\n",
    );
    for u in 0..MAKE_UNITS {
        let _ = writeln!(
            main,
            "    x = unit{u:02}(x);\n    printf(\"unit{u:02} %016lx\\n\", x);"
        );
    }
    main.push_str("    return 0;\n}\n");
    std::fs::write(src.join("main.c"), main).unwrap();
    std::fs::write(
        work.join("Makefile"),
        "CC = cc\n\
         CFLAGS = -O2\n\
         OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))\n\
         all: prog\n\
         \t./prog\n\
         prog: $(OBJS)\n\
         \t$(CC) -o $@ $(OBJS)\n\
         src/%.o: src/%.c src/units.h\n\
         \t$(CC) $(CFLAGS) -c -o $@ $<\n",
    )
    .unwrap();
}

#[test]
fn python_multiprocessing_pool_survives_sigkill() {
    let Some(py) = tool(
        "python_multiprocessing_pool_survives_sigkill",
        "python3",
        "python3",
    ) else {
        return;
    };
    let script = examples().join("python/pool_map.py");
    let mut spec = Spec::new(
        "python",
        s(&[
            py.to_str().unwrap(),
            script.to_str().unwrap(),
            "40",
            "40",
            "4000",
        ]),
    );
    spec.interval = "50ms";
    spec.check = Box::new(|_, out| last_line(out, "done: "));
    kill_and_restore(spec);
}

#[test]
fn nodejs_event_loop_survives_sigkill() {
    let Some(node) = tool("nodejs_event_loop_survives_sigkill", "node", "nodejs") else {
        return;
    };
    let script = examples().join("node/timers.js");
    let mut spec = Spec::new(
        "node",
        s(&[node.to_str().unwrap(), script.to_str().unwrap(), "2000"]),
    );
    // A JVM's collector rewrites hundreds of MiB between checkpoints: a longer interval, and a
    // pool that costs no device flushes.
    spec.interval = "200ms";
    spec.shm_pool = true;
    spec.verify_capture = false;
    spec.check = Box::new(|_, out| last_line(out, "done: "));
    kill_and_restore(spec);
}
