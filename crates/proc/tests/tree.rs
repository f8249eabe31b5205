//! Process trees: a shell and everything it starts, traced as one tree — stopped and resumed
//! together, in a pid namespace of its own, with seccomp traps handed to the monitor.

use std::path::Path;
use std::time::{Duration, Instant};

use kioku_proc::{Exit, Namespace, ProcError, Tracee, TraceeCommand, Tree};

fn sh(script: &str) -> TraceeCommand {
    TraceeCommand::new("/bin/sh")
        .args(["-c", script])
        .trace_children(true)
}

/// Runs the tree to its end, stopping and resuming it every few milliseconds; returns the
/// root's exit, the number of stops, and the most processes seen stopped at once.
fn run_with_stops(tree: &mut Tree, every: Duration) -> (Exit, usize, usize) {
    let t0 = Instant::now();
    let (mut stops, mut most) = (0, 0);
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the tree never ended"
        );
        let mut none = |_: &[Tracee], _: &Tracee, _: i32| -> Result<(), ProcError> { Ok(()) };
        if let Some(e) = tree.run_for(every, &mut none).unwrap() {
            return (e, stops, most);
        }
        match tree.stop_all() {
            Ok(()) => {
                stops += 1;
                most = most.max(tree.processes().len());
                for p in tree.processes() {
                    assert!(p.is_stopped(), "process {} is stopped", p.pid());
                }
            }
            Err(ProcError::Busy { .. }) => {}
            Err(e) => panic!("stop_all: {e}"),
        }
    }
}

#[test]
fn a_shell_pipeline_runs_as_one_tree_through_many_stops() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = format!(
        "for i in 1 2 3 4 5 6 7 8; do seq 1 $((i*2000)) | md5sum >> {0}; done; echo done >> {0}",
        out.display()
    );
    let root = Tracee::spawn(sh(&script)).unwrap();
    let mut tree = Tree::new(root, None);
    let (exit, stops, most) = run_with_stops(&mut tree, Duration::from_millis(3));
    assert_eq!(exit, Exit::Code(0));
    let want = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            &script.replace(&out.display().to_string(), "/dev/stdout"),
        ])
        .output()
        .unwrap()
        .stdout;
    assert_eq!(
        std::fs::read(&out).unwrap(),
        want,
        "output of the traced tree"
    );
    assert!(stops >= 3, "only {stops} stops");
    assert!(
        most >= 2,
        "never saw the shell's children (at most {most} processes)"
    );
}

#[test]
fn a_tree_in_its_own_pid_namespace_sees_its_own_pids() {
    let ns = match Namespace::create() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("SKIPPED: no pid namespace here: {e}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = format!(
        "echo $$ > {0}; readlink /proc/self >> {0}; sh -c 'echo $$' >> {0}; ls /proc | grep -c '^[0-9]' >> {0}",
        out.display()
    );
    let root = Tracee::spawn_in(&ns, sh(&script), Some(2)).unwrap();
    assert_ne!(root.pid(), 2, "the monitor sees the host pid");
    let mut tree = Tree::new(root, Some(ns));
    let (exit, _, _) = run_with_stops(&mut tree, Duration::from_millis(5));
    assert_eq!(exit, Exit::Code(0));
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "2",
        "the program is pid 2 in its namespace: {text}"
    );
    let own: i32 = lines[1].parse().unwrap();
    assert!(
        own > 2 && own < 100,
        "/proc/self names the namespace's pid: {text}"
    );
    let child: i32 = lines[2].parse().unwrap();
    assert!(
        child > 2 && child < 100,
        "its children get small pids: {text}"
    );
    let count: i32 = lines[3].parse().unwrap();
    assert!(
        count < 10,
        "its /proc shows only the namespace's processes: {text}"
    );
}

#[test]
fn chosen_pids_in_a_namespace() {
    let Ok(ns) = Namespace::create() else {
        eprintln!("SKIPPED: no pid namespace here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let root =
        Tracee::spawn_in(&ns, sh(&format!("echo $$ > {}", out.display())), Some(4242)).unwrap();
    let mut tree = Tree::new(root, Some(ns));
    let (exit, _, _) = run_with_stops(&mut tree, Duration::from_millis(50));
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "4242");
}

/// A filter that traps write(2) (x86-64 only; everything else allowed).
fn trap_writes() -> Vec<libc::sock_filter> {
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
    vec![
        // A = seccomp_data.nr
        stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
        jeq(libc::SYS_write as u32, 0, 1),
        stmt((libc::BPF_RET | libc::BPF_K) as u16, SECCOMP_RET_TRACE),
        stmt((libc::BPF_RET | libc::BPF_K) as u16, SECCOMP_RET_ALLOW),
    ]
}

#[test]
fn seccomp_traps_reach_the_monitor_before_the_call_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let script = format!(
        "for i in 1 2 3 4 5 6; do echo line $i >> {0}; done; seq 1 3 | cat >> {0}",
        out.display()
    );
    let root = Tracee::spawn(sh(&script).seccomp(trap_writes(), false)).unwrap();
    let mut tree = Tree::new(root, None);
    let mut traps = 0;
    let mut stops = 0;
    let t0 = Instant::now();
    let exit = loop {
        assert!(t0.elapsed() < Duration::from_secs(60));
        let r = tree
            .run_for(
                Duration::from_millis(2),
                &mut |_: &[Tracee], p: &Tracee, tid| -> Result<(), ProcError> {
                    let regs = p.regs(tid)?;
                    assert_eq!(regs.orig_rax, libc::SYS_write as u64, "a trapped write");
                    // Before the call: the file does not hold this write's bytes yet.
                    traps += 1;
                    Ok(())
                },
            )
            .unwrap();
        if let Some(e) = r {
            break e;
        }
        if tree.stop_all().is_ok() {
            stops += 1;
        }
    };
    assert_eq!(exit, Exit::Code(0));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text,
        "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n1\n2\n3\n"
    );
    assert!(traps >= 8, "only {traps} writes trapped");
    assert!(stops > 0);
    assert!(Path::new(&out).exists());
}

/// Runs `f` on a thread of its own (ptrace binds tracees to it) and waits for it at most
/// `bound`: a hang fails the test instead of hanging it.
fn within<T: Send + 'static>(
    bound: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(bound) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not return within {} s: hung", bound.as_secs()),
    }
}

#[test]
fn ending_a_namespace_reaps_traced_children_nobody_adopted() {
    // Children forked while their parent is being killed are attached by the kernel
    // (PTRACE_O_TRACEFORK) though the monitor never sees the fork: no Tracee reaps them. When
    // the init is killed, the kernel kills them and the dying init waits until they are
    // reaped, which only their tracer (the monitor) can do: dropping the namespace must do
    // it, not wait for the init forever. Here the children are left unadopted on purpose.
    if Namespace::create().is_err() {
        eprintln!("SKIPPED: no pid namespace here");
        return;
    }
    let (children, took) = within(Duration::from_secs(30), "ending the namespace", || {
        let ns = Namespace::create().unwrap();
        let root = Tracee::spawn_in(&ns, sh("sleep 30 & sleep 30 & wait"), None).unwrap();
        let mut children = Vec::new();
        let t0 = Instant::now();
        while children.len() < 2 && t0.elapsed() < Duration::from_secs(20) {
            assert!(root.run_for(Duration::from_millis(20)).unwrap().is_none());
            for n in root.take_notices() {
                if let kioku_proc::Notice::Child { pid, .. } = n {
                    children.push(pid);
                }
            }
        }
        assert_eq!(children.len(), 2, "the shell forked its two sleeps");
        let t0 = Instant::now();
        drop(root);
        drop(ns);
        (children, t0.elapsed())
    });
    assert!(took < Duration::from_secs(10), "ending took {took:?}");
    for pid in children {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "child {pid} of the namespace is left behind"
        );
    }
}

#[test]
fn a_child_whose_fork_was_never_reported_runs_once_a_process_ends() {
    // A process forked as its parent is being killed is attached by the kernel
    // (PTRACE_O_TRACEFORK) though its fork's event never comes: it waits in its first stop.
    // The tree looks for such processes when one of its processes ends, and adopts them: they
    // run on. Here the event of one child is dropped on purpose (taken before the tree exists),
    // and the end of another child is what the tree notices.
    if Namespace::create().is_err() {
        eprintln!("SKIPPED: no pid namespace here");
        return;
    }
    let ns = Namespace::create().unwrap();
    let root = Tracee::spawn_in(&ns, sh("sleep 30 & sleep 0.3 & wait"), None).unwrap();
    let mut children = Vec::new();
    let t0 = Instant::now();
    while children.len() < 2 && t0.elapsed() < Duration::from_secs(20) {
        assert!(root.run_for(Duration::from_millis(20)).unwrap().is_none());
        for n in root.take_notices() {
            if let kioku_proc::Notice::Child { pid, .. } = n {
                children.push(pid);
            }
        }
    }
    assert_eq!(children.len(), 2, "the shell forked its two sleeps");
    let (lost, short) = (children[0], children[1]);
    let mut tree = Tree::new(root, Some(ns));
    tree.add(Tracee::adopt(short));
    let state = |pid: i32| {
        kioku_pool::procstat::ProcStat::of(pid.into())
            .ok()
            .and_then(|s| s.state())
    };
    assert_eq!(
        state(lost),
        Some('t'),
        "the unreported child waits, stopped"
    );
    let mut none = |_: &[Tracee], _: &Tracee, _: i32| -> Result<(), ProcError> { Ok(()) };
    let t0 = Instant::now();
    while tree.process(lost).is_none() && t0.elapsed() < Duration::from_secs(20) {
        assert!(tree
            .run_for(Duration::from_millis(20), &mut none)
            .unwrap()
            .is_none());
    }
    assert!(
        tree.process(lost).is_some(),
        "the unreported child was not adopted when its sibling ended"
    );
    // Let it run: it sleeps (state S), no longer in its first stop.
    let t0 = Instant::now();
    while state(lost) != Some('S') && t0.elapsed() < Duration::from_secs(10) {
        assert!(tree
            .run_for(Duration::from_millis(20), &mut none)
            .unwrap()
            .is_none());
    }
    assert_eq!(state(lost), Some('S'), "the adopted child does not run");
    tree.kill();
}
