#![allow(dead_code)] // each test binary uses a different part
//! The example programs of `examples/proc/`, compiled once per test binary with the system C
//! compiler (static and dynamic builds), and helpers to run them under `kioku`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
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

/// `kioku ARGS` run to the end in `dir`, its output captured.
pub fn kioku_in(dir: &RunDir, args: &[&str]) -> Output {
    Command::new(kioku())
        .args(args)
        .current_dir(dir.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// What a command printed to stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The arguments of `kioku run --pool POOL --interval INTERVAL -- CMD...`.
pub fn run_args<'a>(pool: &'a str, interval: &'a str, cmd: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--pool", pool, "--interval", interval, "--"];
    args.extend_from_slice(cmd);
    args
}

/// `kioku ARGS` with stdout appended to `dir/stdout.txt` and stderr to `dir/stderr.txt`.
pub fn spawn_kioku(args: &[&str], dir: &RunDir) -> Child {
    spawn_kioku_env(args, dir, &[])
}

/// [`spawn_kioku`] with the environment variables `env` set too.
pub fn spawn_kioku_env(args: &[&str], dir: &RunDir, env: &[(&str, &str)]) -> Child {
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
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(open("stdout.txt"))
        .stderr(open("stderr.txt"))
        .spawn()
        .expect("spawning kioku")
}

/// What `kioku inspect --json` says of the pool at `pool` (relative to `dir`), read without
/// the monitor (`null` where it says nothing), and the command's output.
pub fn inspect_json(dir: &RunDir, pool: &str) -> (serde_json::Value, Output) {
    let o = kioku_in(dir, &["inspect", "--pool", pool, "--json"]);
    (serde_json::from_slice(&o.stdout).unwrap_or_default(), o)
}

/// The epoch of the last checkpoint the pool at `pool` committed (0 if none, or no pool yet).
pub fn epoch_of(dir: &RunDir, pool: &str) -> u64 {
    inspect_json(dir, pool).0["epoch"].as_u64().unwrap_or(0)
}

/// Waits (up to 30 s: a loaded machine starts slowly) until the pool at `pool` (relative to the
/// run directory) has committed a checkpoint of epoch `epoch` or later.
pub fn wait_for_epoch(dir: &RunDir, pool: &str, epoch: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (v, o) = inspect_json(dir, pool);
        if v["epoch"].as_u64().is_some_and(|e| e >= epoch) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of epoch {epoch} in {pool} after 30 s: {}\nkioku's log:\n{}",
            stderr(&o),
            stderr_of(dir)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The traced program of monitor `pid` (its only child), waiting up to 60 s for it (a loaded
/// machine may take seconds to start kioku and its program); `None` once the monitor is gone.
pub fn program_of(monitor: u32) -> Option<i32> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
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

/// Lets monitor `child` run for `after`, then SIGKILLs its program — every process of it, see
/// [`kill_program`] — (or the monitor itself when `kill_monitor`), unless it finished first.
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
    } else {
        kill_program(&mut child, None);
    }
    let st = child.wait().unwrap();
    match st.code() {
        Some(c) if c != 137 => Outcome::Finished(c),
        _ => Outcome::Killed,
    }
}

/// Whether a `kioku restore` refused because the program had ended (exit 0) after the last
/// checkpoint: a kill that came, on a loaded machine, between the program's end and the
/// monitor's. Its output is complete; the caller compares it.
pub fn ended_before_the_kill(stderr: &str) -> bool {
    let last = stderr.lines().last().unwrap_or("");
    last.contains("finished (exit code 0) after its last checkpoint; there is nothing to restore")
}

/// One process as `/proc/PID/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub pid: i32,
    pub ppid: i32,
    pub name: String,
    /// `R (running)`, `S (sleeping)`, `Z (zombie)`, …
    pub state: String,
}

impl std::fmt::Display for ProcEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.pid))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let wchan =
            std::fs::read_to_string(format!("/proc/{}/wchan", self.pid)).unwrap_or_default();
        write!(
            f,
            "pid {} ({}) {}, parent {}, waiting in {:?}: {}",
            self.pid,
            self.name,
            self.state,
            self.ppid,
            wchan,
            cmdline.trim_end()
        )
    }
}

/// Process `pid` now, if it exists.
pub fn proc_entry(pid: i32) -> Option<ProcEntry> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
    };
    Some(ProcEntry {
        pid,
        ppid: field("PPid:")?.parse().ok()?,
        name: field("Name:")?,
        state: field("State:")?,
    })
}

/// Every process of the machine (as this pid namespace sees them).
pub fn processes() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(proc_entry)
        .collect()
}

/// The descendants of `root` by their `PPid` links, parents before children; `root` excluded.
pub fn descendants(root: i32) -> Vec<ProcEntry> {
    let all = processes();
    let mut out: Vec<ProcEntry> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for p in all.iter().filter(|p| p.ppid == parent && p.pid != root) {
            if !out.iter().any(|o| o.pid == p.pid) {
                out.push(p.clone());
                frontier.push(p.pid);
            }
        }
    }
    out
}

/// Whether `pid` runs the kioku binary (a monitor, or a process kioku forked for itself such as
/// the init of a pid namespace), not the program.
pub fn is_kioku(pid: i32) -> bool {
    static KIOKU: OnceLock<Option<PathBuf>> = OnceLock::new();
    let kioku = KIOKU.get_or_init(|| std::fs::canonicalize(kioku()).ok());
    match std::fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(exe) => kioku.as_ref() == Some(&exe),
        Err(_) => false,
    }
}

/// The program's processes under monitor `monitor`: its descendants that do not run kioku,
/// parents first. The program may run right under the monitor or under an init process kioku
/// made for a pid namespace; either way it is found by walking `PPid` links.
pub fn program_processes(monitor: i32) -> Vec<ProcEntry> {
    descendants(monitor)
        .into_iter()
        .filter(|p| !is_kioku(p.pid))
        .collect()
}

/// The environment variable that marks every process of one test run (inherited across fork
/// and exec, and kept by a restore, which brings back the program's environment): how
/// processes that left the monitor's tree are still found.
pub const TAG_VAR: &str = "KIOKU_TEST_TAG";

/// Live processes whose environment holds `TAG_VAR=tag` (zombies have none and are not listed).
pub fn tagged(tag: &str) -> Vec<ProcEntry> {
    let needle = format!("{TAG_VAR}={tag}");
    processes()
        .into_iter()
        .filter(|p| p.pid != std::process::id() as i32)
        .filter(|p| {
            std::fs::read(format!("/proc/{}/environ", p.pid))
                .map(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// SIGKILLs every process of the program under `monitor` (and, with `tag`, every process of
/// the run that left its tree), parents first, again and again until the monitor exits (a
/// process forked meanwhile is killed in the next sweep); gives up after 10 s. Returns the
/// pids killed.
pub fn kill_program(monitor: &mut Child, tag: Option<&str>) -> Vec<i32> {
    let mpid = monitor.id() as i32;
    let mut killed = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let mut victims = program_processes(mpid);
        if let Some(tag) = tag {
            victims.extend(
                tagged(tag)
                    .into_iter()
                    .filter(|p| p.pid != mpid && !is_kioku(p.pid)),
            );
        }
        for p in &victims {
            sigkill(p.pid);
            if !killed.contains(&p.pid) {
                killed.push(p.pid);
            }
        }
        if monitor.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(if victims.is_empty() {
            5
        } else {
            1
        }));
    }
    killed
}

pub fn stderr_of(dir: &RunDir) -> String {
    String::from_utf8_lossy(&dir.read("stderr.txt")).into_owned()
}

/// A random number generator for test `name`, seeded from `KIOKU_SEED` when set (to replay a
/// failure), else from the clock; the seed is printed either way.
pub fn rng(name: &str) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let seed = std::env::var("KIOKU_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{name}: KIOKU_SEED={seed}");
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Waits (up to 30 s) until a monitor listens for requests about `pid`.
pub fn wait_for_control_socket(pid: i32) {
    let name = format!("@kioku/pid/{pid}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some(name.as_str()))
    {
        assert!(
            Instant::now() < deadline,
            "nobody listens as {name} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
