#![allow(dead_code)] // each test binary uses a different part
//! The example programs of `examples/proc/`, compiled once per test binary with the system C
//! compiler (static and dynamic builds), and helpers to run them under `kioku`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn kioku() -> &'static str {
    env!("CARGO_BIN_EXE_kioku")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proc")
}

/// A compiled example; `static_build` links it statically.
pub fn program(name: &str, static_build: bool) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let out = dir.path().join(format!(
        "{name}{}",
        if static_build { "-static" } else { "" }
    ));
    if out.exists() {
        return out;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(examples().join(format!("{name}.c")));
    if static_build {
        cmd.arg("-static");
    }
    let st = cmd.status().unwrap_or_else(|e| {
        panic!("running the C compiler `{cc}` (install gcc: `make deps`): {e}")
    });
    assert!(st.success(), "compiling examples/proc/{name}.c failed");
    out
}

/// Output files of one run, in a directory of their own.
pub struct RunDir {
    pub dir: tempfile::TempDir,
}

impl RunDir {
    pub fn new() -> RunDir {
        RunDir {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn pool(&self) -> PathBuf {
        self.path("p.pool")
    }
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap_or_default()
    }
}

/// Runs `cmd` plainly with stdout into `dir/stdout.txt`; the reference output.
pub fn reference(cmd: &[String], dir: &RunDir) {
    let out = std::fs::File::create(dir.path("stdout.txt")).unwrap();
    let st = Command::new(&cmd[0])
        .args(&cmd[1..])
        .current_dir(dir.dir.path())
        .stdout(out)
        .status()
        .unwrap();
    assert!(st.success(), "reference run of {cmd:?} failed");
}

/// `kioku ARGS` with stdout appended to `dir/stdout.txt` and stderr to `dir/stderr.txt`.
pub fn spawn_kioku(args: &[&str], dir: &RunDir) -> Child {
    let open = |n: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path(n))
            .unwrap()
    };
    Command::new(kioku())
        .args(args)
        .current_dir(dir.dir.path())
        // Every capture compared with the program's memory, both contexts compared after
        // every checkpoint: a difference is logged as an ERROR, which the tests look for.
        .env("KIOKU_VERIFY_CAPTURE", "1")
        .stdin(Stdio::null())
        .stdout(open("stdout.txt"))
        .stderr(open("stderr.txt"))
        .spawn()
        .expect("spawning kioku")
}

/// The traced program of monitor `pid` (its only child), waiting up to 5 s for it.
pub fn program_of(monitor: u32) -> Option<i32> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let text =
            std::fs::read_to_string(format!("/proc/{monitor}/task/{monitor}/children")).ok()?;
        if let Some(p) = text.split_whitespace().next() {
            return p.parse().ok();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

pub fn sigkill(pid: i32) {
    // SAFETY: sending a signal.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// What became of one monitor.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished(i32),
    Killed,
}

/// Lets monitor `child` run for `after`, then SIGKILLs its program (or the monitor itself when
/// `kill_monitor`), unless it finished first.
pub fn kill_after(mut child: Child, after: Duration, kill_monitor: bool) -> Outcome {
    let t0 = Instant::now();
    while t0.elapsed() < after {
        if let Some(st) = child.try_wait().unwrap() {
            return Outcome::Finished(st.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if kill_monitor {
        sigkill(child.id() as i32);
    } else if let Some(p) = program_of(child.id()) {
        sigkill(p);
    }
    let st = child.wait().unwrap();
    match st.code() {
        Some(c) if c != 137 => Outcome::Finished(c),
        _ => Outcome::Killed,
    }
}

pub fn stderr_of(dir: &RunDir) -> String {
    String::from_utf8_lossy(&dir.read("stderr.txt")).into_owned()
}
