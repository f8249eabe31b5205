//! `kioku run / restore / checkpoint / inspect`: requests, reports and every kind of bad input —
//! each refused with a clear message, nothing lost.

#[path = "common/programs.rs"]
mod programs;

use std::process::{Command, Stdio};
use std::time::Duration;

use programs::*;

/// Waits (up to 30 s) until `monitor`'s program runs a process named `name`.
fn wait_for_process(monitor: u32, name: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !program_processes(monitor as i32)
        .iter()
        .any(|p| p.name == name)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no process {name} under {monitor} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts pi under kioku with checkpoints only on request, killed after the first request.
fn pi_with_one_requested_checkpoint(dir: &RunDir, by_pid: bool) -> String {
    let p = program("pi", false);
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    let child = spawn_kioku(&run_args(pool, "0", &[p.to_str().unwrap(), "9000"]), dir);
    let prog = program_of(child.id()).expect("the program starts");
    wait_for_control_socket(prog);
    let pid = prog.to_string();
    let args: Vec<&str> = if by_pid {
        vec!["checkpoint", &pid]
    } else {
        vec!["checkpoint", "--pool", pool]
    };
    let o = kioku_in(dir, &args);
    assert!(o.status.success(), "kioku checkpoint: {}", stderr(&o));
    let answer = String::from_utf8_lossy(&o.stdout).into_owned();
    // Durable when it returned: the pool's committed epoch says so, read without the monitor.
    let (v, _) = inspect_json(dir, pool);
    assert_eq!(v["epoch"], 1, "{v}");
    assert_eq!(v["holder_pid"], child.id(), "{v}");
    assert!(kill_after(child, Duration::ZERO, false) == Outcome::Killed);
    answer
}

#[test]
fn checkpoint_on_request_by_pid_and_by_pool_then_restore() {
    for by_pid in [true, false] {
        let dir = RunDir::new();
        let plain = RunDir::new();
        reference(
            &[
                program("pi", false).to_str().unwrap().to_string(),
                "9000".into(),
            ],
            &plain,
        );
        let answer = pi_with_one_requested_checkpoint(&dir, by_pid);
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(v["epoch"], 1, "{answer}");
        assert!(v["capture"]["stop"].as_f64().unwrap() > 0.0, "{answer}");
        // inspect: human text names the program and says it can be restored.
        let pool = dir.pool();
        let i = kioku_in(&dir, &["inspect", "--pool", pool.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&i.stdout);
        assert!(i.status.success(), "{}", stderr(&i));
        assert!(
            text.contains("/pi") && text.contains("restorable"),
            "{text}"
        );
        let o = kioku_in(&dir, &["restore", "--pool", pool.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(plain.read("stdout.txt") == dir.read("stdout.txt"));
        // Finished: a second restore refuses and says why, changing nothing in the pool.
        let before = std::fs::read(&pool).unwrap();
        let o = kioku_in(&dir, &["restore", "--pool", pool.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1));
        assert!(
            std::fs::read(&pool).unwrap() == before,
            "a refused restore changed the pool"
        );
        assert!(
            stderr(&o).contains("finished (exit code 0)"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn restore_without_pool_takes_the_most_recent_and_lists_when_it_cannot() {
    let dir = RunDir::new();
    let o = kioku_in(&dir, &["restore"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no pool under ./.kioku/"),
        "{}",
        stderr(&o)
    );
    // A run with the default pool, killed after its first checkpoint.
    let p = program("pi", false);
    let child = spawn_kioku(
        &[
            "run",
            "--interval",
            "20ms",
            "--",
            p.to_str().unwrap(),
            "9000",
        ],
        &dir,
    );
    wait_for_epoch(&dir, ".kioku/pi.pool", 1);
    assert!(kill_after(child, Duration::ZERO, false) == Outcome::Killed);
    let o = kioku_in(&dir, &["restore"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Now finished: nothing restorable, and the listing says why.
    let o = kioku_in(&dir, &["restore"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("no restorable pool") && e.contains("finished"),
        "{e}"
    );
}

#[test]
fn exit_status_and_signals_pass_through() {
    let dir = RunDir::new();
    let o = kioku_in(
        &dir,
        &["run", "--pool", "a.pool", "--", "sh", "-c", "exit 7"],
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let o = kioku_in(
        &dir,
        &["run", "--pool", "b.pool", "--", "sh", "-c", "kill -TERM $$"],
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{}", stderr(&o));
}

#[test]
fn bad_input_is_refused_clearly() {
    let dir = RunDir::new();
    // Program not found: an error, and no pool left behind.
    let o = kioku_in(&dir, &["run", "--pool", "x.pool", "--", "/no/such/program"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/no/such/program"), "{}", stderr(&o));
    assert!(!dir.path("x.pool").exists());
    // Missing pool.
    let o = kioku_in(&dir, &["restore", "--pool", "missing.pool"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("missing.pool"), "{}", stderr(&o));
    // A pool of another kind: refused by restore and inspect, untouched.
    let o = kioku_in(
        &dir,
        &["pool", "create", "other.pool", "--kind", "someone.else"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let before = dir.read("other.pool");
    let o = kioku_in(&dir, &["restore", "--pool", "other.pool"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("someone.else"), "{}", stderr(&o));
    let o = kioku_in(&dir, &["inspect", "--pool", "other.pool"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no process checkpoint"),
        "{}",
        stderr(&o)
    );
    assert!(
        dir.read("other.pool") == before,
        "a refused pool was changed"
    );
    // kioku run never overwrites a pool of another kind, nor an unfinished checkpoint.
    let o = kioku_in(&dir, &["run", "--pool", "other.pool", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("refusing to overwrite"),
        "{}",
        stderr(&o)
    );
    // Nobody to ask for a checkpoint.
    let o = kioku_in(&dir, &["checkpoint", "999999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no kioku monitor"), "{}", stderr(&o));
}

#[test]
fn a_changed_executable_is_refused_and_the_checkpoint_kept() {
    let dir = RunDir::new();
    let exe = dir.path("pi-copy");
    std::fs::copy(program("pi", false), &exe).unwrap();
    let child = spawn_kioku(
        &run_args("p.pool", "20ms", &[exe.to_str().unwrap(), "9000"]),
        &dir,
    );
    wait_for_epoch(&dir, "p.pool", 1);
    assert!(kill_after(child, Duration::ZERO, false) == Outcome::Killed);
    // Rebuild the program differently (another build-id and size).
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/proc/pi.c");
    let st = Command::new(cc)
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(src)
        .status()
        .unwrap();
    assert!(st.success());
    let before = dir.read("p.pool");
    let o = kioku_in(&dir, &["restore", "--pool", "p.pool"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("pi-copy changed since the checkpoint"), "{e}");
    // Nothing was thrown away: the pool is byte for byte as before, still restorable.
    assert!(!before.is_empty());
    assert!(
        dir.read("p.pool") == before,
        "a refused restore changed the pool"
    );
    let o = kioku_in(&dir, &["inspect", "--pool", "p.pool"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("restorable"));
}

#[test]
fn a_pool_in_use_is_refused() {
    let dir = RunDir::new();
    let p = program("pi", false);
    let child = spawn_kioku(
        &run_args("p.pool", "20ms", &[p.to_str().unwrap(), "12000"]),
        &dir,
    );
    wait_for_epoch(&dir, "p.pool", 1);
    let o = kioku_in(&dir, &["restore", "--pool", "p.pool"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("in use by process"), "{}", stderr(&o));
    let o = kioku_in(&dir, &["run", "--pool", "p.pool", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    assert!(kill_after(child, Duration::ZERO, true) == Outcome::Killed);
}

#[test]
fn an_unsupported_descriptor_stops_checkpoints_and_the_program_runs_on() {
    let dir = RunDir::new();
    let p = program("pi", false);
    // The read end of a pipe on descriptor 3, passed on with --inherit-fds; the write end
    // stays with this test only, so the program holds a pipe to another process. Both
    // inherited numbers are closed first: holding both ends would make a self-pipe, which
    // is checkpointed.
    let (r, w) = {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) into a local array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        (fds[0], fds[1])
    };
    let move_read_end = if r == 3 {
        String::new()
    } else {
        format!("exec 3<&{r} {r}<&-;")
    };
    let o = Command::new(kioku())
        .args([
            "run",
            "--pool",
            "p.pool",
            "--interval",
            "10ms",
            "--summary-json",
            "s.json",
            "--inherit-fds",
            "--",
            "sh",
            "-c",
            &format!("{move_read_end} exec {w}>&-; exec {} 4000", p.display()),
        ])
        .current_dir(dir.dir.path())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    // SAFETY: closing our pipe ends.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
    let e = stderr(&o);
    assert!(
        (e.contains("no more checkpoints: descriptor") || e.contains("no checkpoints: descriptor"))
            && e.contains("pipe:"),
        "{e}"
    );
    let s: serde_json::Value = serde_json::from_slice(&dir.read("s.json")).unwrap();
    assert!(
        s["summary"]["stopped_because"]
            .as_str()
            .unwrap()
            .contains("pipe:"),
        "{s}"
    );
    // The pool says so too, where a restore does not erase it.
    let (v, _) = inspect_json(&dir, "p.pool");
    assert!(
        v["checkpoints_stopped"]
            .as_str()
            .unwrap_or("")
            .contains("pipe:"),
        "{v}"
    );
}

#[test]
fn a_kernel_without_remote_write_tracking_is_refused_clearly() {
    // The mprotect tracker cannot watch another process: forcing it stands in for a kernel
    // without userfaultfd async write-protect and PAGEMAP_SCAN.
    let dir = RunDir::new();
    let o = Command::new(kioku())
        .args(["run", "--pool", "p.pool", "--", "true"])
        .env("KIOKU_TRACKER", "mprotect")
        .current_dir(dir.dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o).to_lowercase();
    assert!(
        e.contains("mprotect") && e.contains("another process"),
        "{e}"
    );
}

#[test]
fn the_processes_a_program_starts_are_checkpointed_with_it() {
    let dir = RunDir::new();
    let pool = dir.pool();
    let pool = pool.to_str().unwrap();
    // A shell that waits for its child: the child's sleep is what the checkpoint interrupts.
    let child = spawn_kioku(
        &run_args(
            pool,
            "0",
            &["sh", "-c", "sleep 2; echo done; echo $$ > pid.txt"],
        ),
        &dir,
    );
    wait_for_process(child.id(), "sleep");
    let o = kioku_in(&dir, &["checkpoint", "--pool", pool]);
    assert!(o.status.success(), "kioku checkpoint: {}", stderr(&o));
    let (v, _) = inspect_json(&dir, pool);
    let procs = v["image"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "the shell and its sleep: {v}");
    assert!(v["image"]["pid_namespace"].as_bool().unwrap(), "{v}");
    let sh = &procs[0];
    let sleep = &procs[1];
    assert_eq!(
        sleep["ppid"], sh["pid"],
        "the sleep is the shell's child: {v}"
    );
    // Killed: the whole tree goes (nothing runs on to print "done" at once).
    assert!(kill_after(child, Duration::ZERO, false) == Outcome::Killed);
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(
        dir.read("stdout.txt"),
        b"",
        "nothing of the tree ran on after the kill"
    );
    // Restored, the tree finishes: the shell still waits for its child, with its own pid.
    let o = kioku_in(&dir, &["restore", "--pool", pool]);
    assert!(o.status.success(), "{}", stderr(&o));
    // (Its stdout was the file it had at the checkpoint.)
    assert_eq!(String::from_utf8_lossy(&dir.read("stdout.txt")), "done\n");
    assert_eq!(
        dir.read("pid.txt"),
        format!("{}\n", sh["pid"]).into_bytes(),
        "the shell kept its pid"
    );
}

#[test]
fn a_full_pool_medium_stops_checkpoints_and_the_program_runs_on() {
    let dir = RunDir::new();
    // A small tmpfs of our own for the pool: it fills while the program runs.
    let mnt = dir.path("small");
    std::fs::create_dir(&mnt).unwrap();
    let st = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=6m",
            "kioku-test",
            mnt.to_str().unwrap(),
        ])
        .status();
    if !st.is_ok_and(|s| s.success()) {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root): the full-medium test did not run"
        );
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let pool = mnt.join("p.pool");
    let p = program("heap", false);
    let o = Command::new(kioku())
        .args([
            "run",
            "--pool",
            pool.to_str().unwrap(),
            "--interval",
            "10ms",
            "--summary-json",
            "s.json",
            "--",
            p.to_str().unwrap(),
            "30",
        ])
        .current_dir(dir.dir.path())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert!(
        o.status.success(),
        "the program ran to its end: {:?} {e}",
        o.status
    );
    assert!(
        e.contains("no more checkpoints") || e.contains("no checkpoints"),
        "{e}"
    );
    assert!(e.contains("No space left on device"), "{e}");
    let s: serde_json::Value = serde_json::from_slice(&dir.read("s.json")).unwrap();
    let why = s["summary"]["stopped_because"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(!why.is_empty(), "{s}");
    let i = kioku_in(
        &dir,
        &["inspect", "--pool", pool.to_str().unwrap(), "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&i.stdout).unwrap();
    if v["checkpoints_stopped"].is_string() {
        assert_eq!(v["checkpoints_stopped"].as_str().unwrap(), why);
    }
    // No wrong restore: it ran to its end, so there is nothing to restore, or the last
    // checkpoint comes back whole (its output is what an uninterrupted run prints).
    let before = std::fs::read(&pool).unwrap();
    let o = kioku_in(&dir, &["restore", "--pool", pool.to_str().unwrap()]);
    if !o.status.success() {
        assert!(
            std::fs::read(&pool).unwrap() == before,
            "a refused restore changed the pool"
        );
    }
}
