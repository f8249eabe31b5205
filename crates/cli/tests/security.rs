//! Other local users against `kioku run`'s control socket and pools (docs/security.md): they
//! cannot ask for checkpoints, cannot stall the monitor, cannot answer in its place, and a
//! symbolic link planted at a pool's path in a shared directory is not followed.
//!
//! The other user is `nobody` (uid 65534), reached with setpriv; those parts need root and skip
//! loudly without it.

#[path = "common/programs.rs"]
mod programs;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use programs::*;

const NOBODY: &str = "65534";

/// A helper process, killed when the test ends (also when it fails: a left-over impostor would
/// hold the test's output open).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this machine can run commands as `nobody`; says why not when it cannot.
fn can_switch_to_nobody(test: &str) -> bool {
    if !is_root() {
        eprintln!("SKIPPED {test}: needs root to run a second user (nobody) through setpriv");
        return false;
    }
    let ok = Command::new("setpriv")
        .args(nobody_args())
        .arg("true")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED {test}: `setpriv` (util-linux) cannot switch to uid {NOBODY} here");
    }
    ok
}

fn nobody_args() -> [&'static str; 3] {
    ["--reuid=65534", "--regid=65534", "--clear-groups"]
}

/// A command run as nobody. Python is Debian's (/usr/bin/python3): nobody cannot reach a
/// user's own interpreter under a private home.
fn as_nobody(program: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(nobody_args()).arg(program);
    c
}

/// The kioku binary where nobody can run it (the build tree may be private).
fn kioku_for_nobody() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("kioku-nobody")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("kioku");
    std::fs::copy(kioku(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, exe)
}

/// Starts a Python script as nobody and waits until it prints `ready`.
fn nobody_python(script: &str) -> Killed {
    let mut c = as_nobody("/usr/bin/python3")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 as nobody");
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the script as nobody did not start");
    Killed(c)
}

/// `kioku run --interval 0 -- sleep 60` in `dir`; returns the monitor and the sleep's pid.
// The child is returned, or handed to kill_after, which waits for it.
#[allow(clippy::zombie_processes)]
fn run_sleep(dir: &RunDir) -> (Child, i32) {
    let child = spawn_kioku(
        &[
            "run",
            "--pool",
            "p.pool",
            "--interval",
            "0",
            "--",
            "sleep",
            "60",
        ],
        dir,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = program_processes(child.id() as i32)
            .iter()
            .find(|p| p.name == "sleep")
        {
            let pid = p.pid;
            wait_for_control_socket(pid);
            return (child, pid);
        }
        if Instant::now() > deadline {
            kill_after(child, Duration::ZERO, true);
            panic!("no sleep under kioku after 30 s: {}", stderr_of(dir));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn epoch_of(dir: &RunDir) -> u64 {
    let i = kioku_in(dir, &["inspect", "--pool", "p.pool", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&i.stdout).unwrap_or_default();
    v["epoch"].as_u64().unwrap_or(0)
}

#[test]
fn another_user_can_neither_ask_for_a_checkpoint_nor_stall_the_monitor() {
    if !can_switch_to_nobody("another_user_can_neither_ask_for_a_checkpoint_nor_stall_the_monitor")
    {
        return;
    }
    let dir = RunDir::new();
    let (monitor, sleep) = run_sleep(&dir);
    let (_keep, exe) = kioku_for_nobody();

    // nobody asks: refused by the monitor, and no checkpoint is taken.
    let o = as_nobody(exe.to_str().unwrap())
        .args(["checkpoint", &sleep.to_string()])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("permission denied"), "{}", stderr(&o));
    assert_eq!(epoch_of(&dir), 0, "nobody's request took a checkpoint");

    // nobody holds 100 silent connections open; the owner's request is answered at once (with
    // a 200 ms read per connection, the monitor would be held for 20 s).
    let name = format!("kioku/pid/{sleep}");
    let holder = nobody_python(&format!(
        "import socket,sys,time\n\
         socks=[]\n\
         for i in range(100):\n\
         \x20   s=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM); s.connect('\\0{name}'); socks.append(s)\n\
         print('ready',flush=True)\n\
         time.sleep(60)\n"
    ));
    let t0 = Instant::now();
    let o = kioku_in(&dir, &["checkpoint", &sleep.to_string()]);
    let took = t0.elapsed();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        took < Duration::from_secs(10),
        "the owner's checkpoint waited {took:?} behind nobody's silent connections"
    );
    assert_eq!(epoch_of(&dir), 1);
    drop(holder);

    // The owner's own silent connection is dropped after its 2 s, and requests go on.
    let name_c = std::ffi::CString::new(name.clone()).unwrap();
    let silent = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name_c.as_bytes()).unwrap();
        std::os::unix::net::UnixStream::connect_addr(&addr).unwrap()
    };
    let o = kioku_in(&dir, &["checkpoint", &sleep.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut line = String::new();
    BufReader::new(&silent).read_line(&mut line).unwrap();
    assert!(line.contains("no request within"), "{line:?}");
    assert!(kill_after(monitor, Duration::ZERO, false) == Outcome::Killed);
}

/// A script that listens under `name` (an abstract socket) and answers every connection with
/// a made-up durable checkpoint.
fn impostor_script(name: &str) -> String {
    format!(
        "import socket\n\
         l=socket.socket(socket.AF_UNIX,socket.SOCK_STREAM); l.bind('\\0{name}'); l.listen(8)\n\
         print('ready',flush=True)\n\
         while True:\n\
         \x20   c,_=l.accept()\n\
         \x20   try: c.sendall(b'{{\"epoch\":7}}\\n')\n\
         \x20   except OSError: pass\n\
         \x20   c.close()\n"
    )
}

fn impostor_as_self(name: &str) -> Killed {
    let mut c = Command::new("/usr/bin/python3")
        .args(["-c", &impostor_script(name)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    Killed(c)
}

fn refused_as_impostor(o: &Output, why: &str) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(
        stderr(o).contains("answers for that monitor but is not it") && stderr(o).contains(why),
        "{}",
        stderr(o)
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("epoch"),
        "a made-up answer was passed on"
    );
}

#[test]
fn a_process_that_is_not_the_monitor_cannot_answer_for_it() {
    let dir = RunDir::new();
    // A process of our own that is not under any monitor, and a pool no monitor holds.
    let target = Killed(Command::new("sleep").arg("60").spawn().unwrap());
    let target_pid = target.0.id().to_string();
    let pool = dir.path("x.pool");
    std::fs::write(&pool, b"not held").unwrap();
    let md = std::fs::metadata(&pool).unwrap();

    // Same user, but neither the process's ancestor nor a holder of the pool.
    let fake = impostor_as_self(&format!("kioku/pid/{}", target_pid));
    let o = kioku_in(&dir, &["checkpoint", &target_pid]);
    refused_as_impostor(&o, "nor one of its ancestors");
    drop(fake);
    let fake = impostor_as_self(&format!("kioku/pool/{}:{}", md.dev(), md.ino()));
    let o = kioku_in(&dir, &["checkpoint", "--pool", "x.pool"]);
    refused_as_impostor(&o, "does not hold");
    drop(fake);

    // Another user squatting the names.
    if can_switch_to_nobody("a_process_that_is_not_the_monitor_cannot_answer_for_it (as nobody)") {
        let fake = nobody_python(&impostor_script(&format!("kioku/pid/{}", target_pid)));
        let o = kioku_in(&dir, &["checkpoint", &target_pid]);
        refused_as_impostor(&o, "runs as uid 65534");
        drop(fake);
        let fake = nobody_python(&impostor_script(&format!(
            "kioku/pool/{}:{}",
            md.dev(),
            md.ino()
        )));
        let o = kioku_in(&dir, &["checkpoint", "--pool", "x.pool"]);
        refused_as_impostor(&o, "runs as uid 65534");
        drop(fake);
    }
    drop(target);
}

/// A fresh name in /dev/shm (world-writable and sticky, like /tmp).
fn shm_name(tag: &str) -> PathBuf {
    Path::new("/dev/shm").join(format!("kioku-test-{tag}-{}", std::process::id()))
}

#[test]
fn a_symlink_planted_at_a_pool_path_in_a_shared_directory_is_not_followed() {
    let md = std::fs::metadata("/dev/shm");
    if !md.is_ok_and(|m| m.permissions().mode() & 0o1002 != 0) {
        eprintln!("SKIPPED a_symlink_planted…: /dev/shm is missing or not a shared directory");
        return;
    }
    let dir = RunDir::new();
    // The victim's pool, and a link to it planted in /dev/shm.
    let o = kioku_in(
        &dir,
        &["pool", "create", "victim.pool", "--size", "1048576"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let victim = dir.path("victim.pool");
    let before = std::fs::read(&victim).unwrap();
    let link = shm_name("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for args in [
        vec!["run", "--pool", link.to_str().unwrap(), "--", "true"],
        vec!["restore", "--pool", link.to_str().unwrap()],
        vec![
            "pool",
            "create",
            link.to_str().unwrap(),
            "--size",
            "1048576",
        ],
    ] {
        let o = kioku_in(&dir, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("symbolic link"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        before,
        "the victim's pool changed"
    );
    // A dangling link: nothing is created where it points.
    let target = dir.path("made-by-kioku.pool");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = kioku_in(
        &dir,
        &["run", "--pool", link.to_str().unwrap(), "--", "true"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        !target.exists(),
        "kioku created a pool through a planted link"
    );
    std::fs::remove_file(&link).unwrap();

    // Pools and their temporaries are created 0600, also in a shared directory.
    let pool = shm_name("mode");
    let _ = std::fs::remove_file(&pool);
    let o = kioku_in(
        &dir,
        &[
            "pool",
            "create",
            pool.to_str().unwrap(),
            "--size",
            "1048576",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mode = std::fs::metadata(&pool).unwrap().permissions().mode() & 0o777;
    std::fs::remove_file(&pool).unwrap();
    assert_eq!(mode, 0o600, "pool mode {mode:o}");
}
