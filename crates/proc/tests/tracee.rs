//! Real processes under the monitor: stop/resume, injection, registers, signals, blocking
//! calls, threads, exit status.

mod common;

use std::time::{Duration, Instant};

use common::{blocked_in, spawn, thread_state, untraced, Child, Rng, CHILD};
use kioku_proc::{
    list_threads, Exit, FpKind, MapKind, ProcError, Regs, ThreadState, Tracee, TraceeCommand,
};

const PAGE: usize = 4096;

/// Same general registers exactly, same FP/SIMD values (the XSAVE header's in-use bits may
/// change when a thread merely runs).
#[track_caller]
fn assert_same(now: &ThreadState, before: &ThreadState) {
    assert_eq!(now.regs, before.regs, "general registers restored exactly");
    assert!(
        now.fp.same_values(&before.fp),
        "FP/SIMD registers unchanged"
    );
}

fn assert_all_stopped(t: &Tracee) {
    assert!(t.is_stopped());
    let pid = t.pid();
    let mut listed = list_threads(pid).unwrap();
    let mut ours = t.threads();
    listed.sort_unstable();
    ours.sort_unstable();
    assert_eq!(listed, ours, "every thread of the process is traced");
    for tid in ours {
        assert_eq!(
            thread_state(pid, tid),
            't',
            "thread {tid} in a tracing stop"
        );
    }
}

/// Stops the tracee; its exit when it ended first (a race every stop loop must expect).
fn stop_or_exit(t: &Tracee) -> Option<Exit> {
    match t.stop_all() {
        Ok(()) => None,
        Err(ProcError::Exited { exit, .. }) => Some(exit),
        Err(e) => panic!("stop_all: {e}"),
    }
}

#[test]
fn stop_resume_many_times_keeps_output() {
    let reference = untraced(&["work", "60"]);
    let mut c = spawn(&["work", "60"]);
    let mut rng = Rng(0x9e37_79b9);
    let mut stops = 0;
    let exit = loop {
        if let Some(e) =
            c.t.run_for(Duration::from_micros(200 + rng.below(1500)))
                .unwrap()
        {
            break e;
        }
        c.out.pump();
        if let Some(e) = stop_or_exit(&c.t) {
            break e;
        }
        assert_all_stopped(&c.t);
        stops += 1;
    };
    let (e2, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(e2, Exit::Code(0));
    assert!(stops >= 20, "only {stops} stops");
    assert_eq!(out, reference);
}

#[test]
fn injected_calls_change_maps_and_nothing_else() {
    let reference = untraced(&["work", "30"]);
    let mut c = spawn(&["work", "30"]);
    c.run_until("first output", |c| c.out.all.lines().count() >= 3);
    c.t.stop_all().unwrap();
    let t = &c.t;
    let tid = t.control_thread().unwrap();
    let before = t.thread_state(tid).unwrap();

    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let addr = t.mmap(tid, 0, 3 * PAGE, rw, anon, -1, 0).unwrap();
    let maps = t.maps().unwrap();
    let e = maps.iter().find(|m| m.contains(addr)).expect("new mapping");
    assert!(e.contains(addr + 3 * PAGE - 1));
    assert!(e.perms.read && e.perms.write && !e.perms.shared);
    assert_eq!(e.kind, MapKind::Anonymous);

    t.write_mem(addr + 100, b"kioku").unwrap();
    let mut b = [0u8; 5];
    t.read_mem(addr + 100, &mut b).unwrap();
    assert_eq!(&b, b"kioku");

    t.mprotect(tid, addr, PAGE, libc::PROT_READ).unwrap();
    let maps = t.maps().unwrap();
    let e = maps.iter().find(|m| m.contains(addr)).unwrap();
    assert!(e.perms.read && !e.perms.write);
    // A read-only page is still writable for the monitor (through /proc/PID/mem).
    t.write_mem(addr + 200, b"ro-ok").unwrap();
    t.read_mem(addr + 200, &mut b).unwrap();
    assert_eq!(&b, b"ro-ok");

    // Growing in place or moving: either way the bytes follow (one VMA again first).
    t.mprotect(tid, addr, PAGE, rw).unwrap();
    let grown = t
        .mremap(tid, addr, 3 * PAGE, 6 * PAGE, libc::MREMAP_MAYMOVE, 0)
        .unwrap();
    t.read_mem(grown + 100, &mut b).unwrap();
    assert_eq!(&b, b"kioku");
    t.madvise(tid, grown, PAGE, libc::MADV_DONTNEED).unwrap();
    t.read_mem(grown + 100, &mut b).unwrap();
    assert_eq!(b, [0u8; 5], "MADV_DONTNEED dropped the private page");

    // MAP_FIXED_NOREPLACE over it: EEXIST comes back as a typed error.
    let err = t
        .mmap(
            tid,
            grown,
            PAGE,
            rw,
            anon | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
        .unwrap_err();
    assert!(matches!(err, ProcError::Syscall { name: "mmap", .. }));
    assert_eq!(err.errno(), Some(libc::EEXIST));

    t.munmap(tid, grown, 6 * PAGE).unwrap();
    assert!(!t.maps().unwrap().iter().any(|m| m.contains(grown)));

    // openat with the path placed in the tracee, then close.
    let fd = t
        .openat(
            tid,
            libc::AT_FDCWD,
            std::path::Path::new(CHILD),
            libc::O_RDONLY | libc::O_CLOEXEC,
            0,
        )
        .unwrap();
    let link = std::fs::read_link(format!("/proc/{}/fd/{fd}", t.pid())).unwrap();
    assert_eq!(link, std::fs::canonicalize(CHILD).unwrap());
    t.close(tid, fd).unwrap();
    assert!(std::fs::read_link(format!("/proc/{}/fd/{fd}", t.pid())).is_err());
    let err = t
        .openat(
            tid,
            libc::AT_FDCWD,
            std::path::Path::new("/nonexistent/kioku"),
            libc::O_RDONLY,
            0,
        )
        .unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));

    assert_eq!(
        t.prctl(tid, libc::PR_GET_DUMPABLE, [0; 4]).unwrap(),
        1,
        "prctl runs in the tracee"
    );
    assert_eq!(
        t.syscall(tid, libc::SYS_getpid, &[]).unwrap(),
        t.pid() as u64
    );

    // Registers (general and FP/SIMD) are exactly as before the injections.
    assert_same(&t.thread_state(tid).unwrap(), &before);
    let (exit, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(out, reference);
}

#[test]
fn registers_saved_clobbered_restored_keep_fp_results() {
    let reference = untraced(&["fp", "25"]);
    let mut c = spawn(&["fp", "25"]);
    let tid0 = c.t.control_thread().unwrap();
    let fp0 = c.t.fp(tid0).unwrap();
    assert_eq!(fp0.kind, FpKind::Xstate, "XSAVE state available on x86-64");
    assert!(fp0.bytes.len() >= 512 + 64, "legacy area plus XSAVE header");
    let mut rng = Rng(12345);
    let mut rounds = 0;
    let exit = loop {
        if let Some(e) =
            c.t.run_for(Duration::from_micros(300 + rng.below(3000)))
                .unwrap()
        {
            break e;
        }
        if let Some(e) = stop_or_exit(&c.t) {
            break e;
        }
        let tid = c.t.control_thread().unwrap();
        let saved = c.t.thread_state(tid).unwrap();
        // Bytes round trip.
        assert_eq!(ThreadState::from_bytes(&saved.to_bytes()).unwrap(), saved);
        // Inject, then check nothing moved.
        let p =
            c.t.mmap(
                tid,
                0,
                PAGE,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
            .unwrap();
        c.t.munmap(tid, p, PAGE).unwrap();
        assert_same(&c.t.thread_state(tid).unwrap(), &saved);
        // Clobber every XMM register and the general registers, then restore.
        let mut junk = saved.clone();
        for b in &mut junk.fp.bytes[160..416] {
            *b ^= 0x5a;
        }
        let mut w = junk.regs.to_words();
        for (i, x) in w.iter_mut().enumerate() {
            if !matches!(i, 16..=26) {
                *x ^= 0xdead_beef;
            }
        }
        junk.regs = Regs::from_words(&w);
        // Mark SSE in use in the XSAVE header, else the kernel keeps its initial (zero) values.
        junk.fp.bytes[512] |= 2;
        c.t.set_thread_state(tid, &junk).unwrap();
        let seen = c.t.thread_state(tid).unwrap();
        assert_eq!(seen.fp.bytes[160..416], junk.fp.bytes[160..416]);
        assert_eq!(seen.regs.rax, junk.regs.rax);
        c.t.set_thread_state(tid, &saved).unwrap();
        assert_eq!(c.t.thread_state(tid).unwrap(), saved);
        rounds += 1;
    };
    let (_, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert!(rounds >= 10, "only {rounds} rounds");
    assert_eq!(out, reference);
}

fn read_u64(t: &Tracee, addr: usize) -> u64 {
    let mut b = [0u8; 8];
    t.read_mem(addr, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// sigqueue(2) with a value, from the test process.
fn sigqueue(pid: i32, sig: i32, value: u64) {
    #[repr(C)]
    struct QueueInfo {
        signo: i32,
        errno: i32,
        code: i32,
        pad: i32,
        pid: i32,
        uid: u32,
        value: u64,
        rest: [u64; 12],
    }
    let si = QueueInfo {
        signo: sig,
        errno: 0,
        code: -1, // SI_QUEUE
        pad: 0,
        pid: std::process::id() as i32,
        // SAFETY: getuid has no preconditions.
        uid: unsafe { libc::getuid() },
        value,
        rest: [0; 12],
    };
    // SAFETY: rt_sigqueueinfo reads a 128-byte siginfo.
    let r = unsafe { libc::syscall(libc::SYS_rt_sigqueueinfo, pid, sig, &si) };
    assert_eq!(r, 0, "rt_sigqueueinfo: {}", std::io::Error::last_os_error());
}

#[test]
fn signals_reach_the_tracee_through_stops_and_injections() {
    let mut c = spawn(&["signals", "12", "5"]);
    let ready = c.line();
    let w: Vec<usize> = ready
        .split_whitespace()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    let (usr1, rt_n) = (w[0], w[1]);
    let pid = c.t.pid();
    for i in 0..12u64 {
        match i % 3 {
            // While running.
            0 => kioku_kill(pid, libc::SIGUSR1),
            // While stopped: delivered after resume.
            1 => {
                c.t.stop_all().unwrap();
                kioku_kill(pid, libc::SIGUSR1);
                c.t.resume_all().unwrap();
            }
            // While stopped and during an injection: held back, then delivered.
            _ => {
                c.t.stop_all().unwrap();
                kioku_kill(pid, libc::SIGUSR1);
                let tid = c.t.control_thread().unwrap();
                assert_eq!(c.t.syscall(tid, libc::SYS_getpid, &[]).unwrap(), pid as u64);
                assert_eq!(read_u64(&c.t, usr1), i, "not delivered during injection");
                c.t.resume_all().unwrap();
            }
        }
        c.run_until("SIGUSR1 handled", |c| read_u64(&c.t, usr1) == i + 1);
    }
    // Five queued real-time signals with values, all arriving during one injection: each is
    // delivered once, with its value.
    c.t.stop_all().unwrap();
    for v in 1..=5 {
        sigqueue(pid, libc::SIGRTMIN(), v);
    }
    let tid = c.t.control_thread().unwrap();
    c.t.syscall(tid, libc::SYS_getpid, &[]).unwrap();
    assert_eq!(read_u64(&c.t, rt_n), 0);
    c.t.resume_all().unwrap();
    // The child exits once it has seen everything; it prints the counts and the sum.
    let (exit, out) = c.finish();
    assert_eq!(exit, Exit::Code(7), "exit status passes through");
    assert!(
        out.contains("DONE 12 5 15"),
        "each signal delivered once, RT values intact: {out}"
    );
}

fn kioku_kill(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[test]
fn blocked_read_restarts_after_injection() {
    let mut c = spawn(&["echo"]);
    assert_eq!(c.line(), "READY");
    for round in 0..6 {
        c.run_until("the child blocked in read", |c| {
            blocked_in(c.t.pid()) == Some(libc::SYS_read)
        });
        c.t.stop_all().unwrap();
        let tid = c.t.control_thread().unwrap();
        let r = c.t.regs(tid).unwrap();
        assert_eq!(r.orig_rax, libc::SYS_read as u64, "stopped inside read");
        assert_eq!(r.rax as i64, -512, "read interrupted with -ERESTARTSYS");
        if round % 2 == 0 {
            let p =
                c.t.mmap(
                    tid,
                    0,
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
                .unwrap();
            c.t.munmap(tid, p, PAGE).unwrap();
            assert_eq!(c.t.regs(tid).unwrap(), r);
        }
        c.run_until("read restarted", |c| {
            blocked_in(c.t.pid()) == Some(libc::SYS_read)
        });
        assert!(!c.out.all.contains("ERR"), "{}", c.out.all);
        c.send(&format!("hello{round}\n"));
        assert_eq!(c.line(), format!("ECHO hello{round}"));
    }
    let (exit, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert!(!out.contains("ERR"), "{out}");
    assert!(out.ends_with("EOF\n"));
}

#[test]
fn interrupted_nanosleep_resumes_with_its_remaining_time() {
    let mut c = spawn(&["sleep", "300", "3"]);
    assert_eq!(c.line(), "READY");
    for _ in 0..3 {
        c.run_until("the child asleep", |c| {
            blocked_in(c.t.pid()) == Some(libc::SYS_nanosleep)
        });
        c.t.run_for(Duration::from_millis(50)).unwrap();
        c.t.stop_all().unwrap();
        let tid = c.t.control_thread().unwrap();
        let r = c.t.regs(tid).unwrap();
        assert_eq!(r.orig_rax, libc::SYS_nanosleep as u64);
        assert_eq!(r.rax as i64, -516, "-ERESTART_RESTARTBLOCK");
        c.t.syscall(tid, libc::SYS_getpid, &[]).unwrap();
        c.t.prctl(tid, libc::PR_GET_DUMPABLE, [0; 4]).unwrap();
        assert_eq!(c.t.regs(tid).unwrap(), r);
        let line = c.line();
        let ms: u64 = line
            .strip_prefix("SLEPT ")
            .unwrap_or_else(|| panic!("unexpected: {line}"))
            .parse()
            .unwrap();
        assert!((300..1500).contains(&ms), "slept {ms} ms");
    }
    let (exit, _) = c.finish();
    assert_eq!(exit, Exit::Code(0));
}

#[test]
fn all_threads_stop_and_resume() {
    let reference = untraced(&["threads", "4", "150"]);
    let mut c = spawn(&["threads", "4", "150"]);
    let mut rng = Rng(777);
    let mut most = 0;
    let mut injected_into_others = 0;
    let exit = loop {
        if let Some(e) =
            c.t.run_for(Duration::from_micros(300 + rng.below(2000)))
                .unwrap()
        {
            break e;
        }
        if let Some(e) = stop_or_exit(&c.t) {
            break e;
        }
        assert_all_stopped(&c.t);
        let threads = c.t.threads();
        most = most.max(threads.len());
        if let Some(&other) = threads.iter().find(|&&t| t != c.t.pid()) {
            let before = c.t.thread_state(other).unwrap();
            assert_eq!(
                c.t.syscall(other, libc::SYS_gettid, &[]).unwrap(),
                other as u64,
                "injected into that very thread"
            );
            assert_same(&c.t.thread_state(other).unwrap(), &before);
            injected_into_others += 1;
        }
    };
    let (_, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(most, 5, "main thread and four workers seen");
    assert!(injected_into_others > 0);
    assert_eq!(out, reference);
}

#[test]
fn termination_by_signal_passes_through() {
    let mut c = spawn(&["raise", &libc::SIGTERM.to_string()]);
    let (exit, _) = c.finish();
    assert_eq!(
        exit,
        Exit::Signal {
            sig: libc::SIGTERM,
            core: false
        }
    );
}

#[test]
fn spawn_failures_are_typed() {
    let err = Tracee::spawn(TraceeCommand::new("/nonexistent/program")).unwrap_err();
    assert!(matches!(err, ProcError::Spawn { .. }), "{err}");
    assert_eq!(err.errno(), Some(libc::ENOENT));
    let err = Tracee::spawn(TraceeCommand::new("no-such-program-kioku")).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOENT));
}

#[test]
fn operations_on_a_running_or_dead_tracee_fail_cleanly() {
    let c: Child = spawn(&["work", "1000"]);
    c.t.run_for(Duration::from_millis(5)).unwrap();
    let pid = c.t.pid();
    assert!(matches!(c.t.regs(pid), Err(ProcError::NotStopped { .. })));
    assert!(matches!(
        c.t.control_thread(),
        Err(ProcError::NotStopped { .. })
    ));
    c.t.stop_all().unwrap();
    assert!(matches!(
        c.t.regs(pid + 100_000),
        Err(ProcError::NoSuchThread { .. })
    ));
    let exit = c.t.kill().unwrap();
    assert_eq!(
        exit,
        Exit::Signal {
            sig: libc::SIGKILL,
            core: false
        }
    );
    assert!(matches!(c.t.stop_all(), Err(ProcError::Exited { .. })));
    assert!(matches!(
        c.t.syscall(pid, libc::SYS_getpid, &[]),
        Err(ProcError::Exited { .. })
    ));
    // Reaped: no zombie left behind.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn seize_inject_detach_a_running_process() {
    // Long enough to outlive the stops below on a loaded machine.
    let reference = untraced(&["work", "400"]);
    let child = std::process::Command::new(CHILD)
        .args(["work", "400"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(20));
    let t = Tracee::seize(pid).unwrap();
    assert_all_stopped(&t);
    let tid = t.control_thread().unwrap();
    let before = t.thread_state(tid).unwrap();
    let p = t
        .mmap(
            tid,
            0,
            PAGE,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
        .unwrap();
    t.munmap(tid, p, PAGE).unwrap();
    assert_same(&t.thread_state(tid).unwrap(), &before);
    for _ in 0..20 {
        t.run_for(Duration::from_millis(1)).unwrap();
        t.stop_all().unwrap();
    }
    t.detach().unwrap();
    drop(t);
    let t0 = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), reference);
}

#[test]
fn patched_syscall_instruction_is_put_back() {
    let mut c = spawn(&["echo"]);
    assert_eq!(c.line(), "READY");
    c.run_until("the child blocked in read", |c| {
        blocked_in(c.t.pid()) == Some(libc::SYS_read)
    });
    c.t.stop_all().unwrap();
    c.t.set_patch_syscall(true);
    let tid = c.t.control_thread().unwrap();
    let before = c.t.thread_state(tid).unwrap();
    let rip = before.regs.rip as usize;
    let mut text = [0u8; 16];
    c.t.read_mem(rip, &mut text).unwrap();
    for _ in 0..3 {
        assert_eq!(
            c.t.syscall(tid, libc::SYS_getpid, &[]).unwrap(),
            c.t.pid() as u64
        );
    }
    let mut after = [0u8; 16];
    c.t.read_mem(rip, &mut after).unwrap();
    assert_eq!(after, text, "program text restored");
    assert_same(&c.t.thread_state(tid).unwrap(), &before);
    c.t.set_patch_syscall(false);
    c.send("patched\n");
    assert_eq!(c.line(), "ECHO patched");
    let (exit, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert!(!out.contains("ERR"), "{out}");
}

#[test]
fn job_control_stop_is_kept_and_sigcont_resumes() {
    let reference = untraced(&["work", "40"]);
    let mut c = spawn(&["work", "40"]);
    c.run_until("first output", |c| c.out.all.lines().count() >= 2);
    let pid = c.t.pid();
    kioku_kill(pid, libc::SIGSTOP);
    // The group-stop is reported and kept (PTRACE_LISTEN): no progress while stopped.
    let mut lines = usize::MAX;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(c.t.run_for(Duration::from_millis(50)).unwrap().is_none());
        c.out.pump();
        let now = c.out.all.lines().count();
        if now == lines {
            break;
        }
        lines = now;
        assert!(Instant::now() < deadline, "SIGSTOP did not stop the child");
    }
    assert!(lines < 41, "stopped before the end");
    c.t.run_for(Duration::from_millis(150)).unwrap();
    c.out.pump();
    assert_eq!(c.out.all.lines().count(), lines, "stopped by SIGSTOP");
    // Stop, inject and resume in the middle of it: still stopped afterwards.
    c.t.stop_all().unwrap();
    let tid = c.t.control_thread().unwrap();
    c.t.syscall(tid, libc::SYS_getpid, &[]).unwrap();
    c.t.resume_all().unwrap();
    c.t.run_for(Duration::from_millis(100)).unwrap();
    c.out.pump();
    assert_eq!(c.out.all.lines().count(), lines, "still stopped");
    kioku_kill(pid, libc::SIGCONT);
    let (exit, out) = c.finish();
    assert_eq!(exit, Exit::Code(0));
    assert_eq!(out, reference);
}

#[test]
fn seize_a_multithreaded_process() {
    let reference = untraced(&["threads", "3", "400"]);
    let child = std::process::Command::new(CHILD)
        .args(["threads", "3", "400"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Wait until the workers exist.
    let deadline = Instant::now() + Duration::from_secs(10);
    while list_threads(pid).unwrap().len() < 4 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Tracee::seize(pid).unwrap();
    assert_eq!(t.threads().len(), 4);
    assert_all_stopped(&t);
    for tid in t.threads() {
        let s = t.thread_state(tid).unwrap();
        assert_eq!(t.syscall(tid, libc::SYS_gettid, &[]).unwrap(), tid as u64);
        assert_same(&t.thread_state(tid).unwrap(), &s);
    }
    for _ in 0..10 {
        t.run_for(Duration::from_millis(1)).unwrap();
        t.stop_all().unwrap();
        assert_all_stopped(&t);
    }
    t.detach().unwrap();
    drop(t);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), reference);
}

#[test]
fn many_injections_in_a_row() {
    let mut c = spawn(&["echo"]);
    assert_eq!(c.line(), "READY");
    c.run_until("the child blocked in read", |c| {
        blocked_in(c.t.pid()) == Some(libc::SYS_read)
    });
    c.t.stop_all().unwrap();
    let tid = c.t.control_thread().unwrap();
    let before = c.t.thread_state(tid).unwrap();
    let n = 500;
    let t0 = Instant::now();
    for _ in 0..n {
        assert_eq!(
            c.t.syscall(tid, libc::SYS_getpid, &[]).unwrap(),
            c.t.pid() as u64
        );
    }
    let per = t0.elapsed() / n;
    eprintln!("one injected getpid: {per:?}");
    assert_same(&c.t.thread_state(tid).unwrap(), &before);
    c.send("after\n");
    assert_eq!(c.line(), "ECHO after");
}

#[test]
fn kill_reaps_threads_whose_creation_was_never_seen() {
    // A thread created as its process is killed is traced (PTRACE_O_TRACECLONE) though its
    // clone event never reaches the monitor, and its zombie, which only the tracer can reap,
    // holds back the leader's exit: kill must reap it rather than wait for the leader forever.
    // Here the clone events are left unread on purpose.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let t =
            Tracee::spawn(TraceeCommand::new(CHILD).args(["threads", "4", "100000000"])).unwrap();
        t.resume_all().unwrap();
        // The first thread's clone event stops the main thread; the new thread is attached.
        let t0 = Instant::now();
        while list_threads(t.pid()).unwrap_or_default().len() < 2
            && t0.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let listed = list_threads(t.pid()).unwrap_or_default().len();
        let known = t.threads().len();
        let t0 = Instant::now();
        let exit = t.kill();
        let _ = tx.send((listed, known, exit.map_err(|e| e.to_string()), t0.elapsed()));
    });
    let (listed, known, exit, took) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("kill did not return within 30 s: hung");
    assert!(
        listed >= 2 && known == 1,
        "{listed} threads listed, {known} known"
    );
    assert_eq!(
        exit,
        Ok(Exit::Signal {
            sig: libc::SIGKILL,
            core: false
        })
    );
    assert!(took < Duration::from_secs(10), "kill took {took:?}");
}
