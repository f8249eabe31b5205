//! Per-process and per-thread kernel state captured from a stopped process and set again in a
//! fresh one: limits, timers (POSIX timers keep their ids and fire), umask, personality,
//! thread name, alternate signal stack, affinity, nice.

mod common;

use std::collections::BTreeMap;

use common::Child;
use kioku_run::procstate::{self, PosixTimer};
use kioku_run::remote::Remote;

fn timer(c: &Child, clock: i32, notify: i32, signal: i32, value: u64, tid: i32) -> i32 {
    let mut sev = vec![0u8; 64];
    sev[..8].copy_from_slice(&value.to_ne_bytes());
    sev[8..12].copy_from_slice(&signal.to_ne_bytes());
    sev[12..16].copy_from_slice(&notify.to_ne_bytes());
    sev[16..20].copy_from_slice(&tid.to_ne_bytes());
    sev.extend_from_slice(&[0u8; 4]);
    let r = c.remote();
    let mut id = -1;
    r.with_bytes(&sev, &mut |addr| {
        r.syscall(
            "timer_create",
            libc::SYS_timer_create,
            &[clock as u64, addr as u64, (addr + 64) as u64],
        )?;
        let mut b = [0u8; 4];
        r.read_mem(addr + 64, &mut b)?;
        id = i32::from_ne_bytes(b);
        Ok(())
    })
    .unwrap();
    id
}

fn arm(c: &Child, id: i32, value_ns: u64, interval_ns: u64) {
    let ts = |ns: u64| [ns / 1_000_000_000, ns % 1_000_000_000];
    let b: Vec<u8> = [ts(interval_ns), ts(value_ns)]
        .concat()
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let (r, _) = c.sys_mem(libc::SYS_timer_settime, &[id as u64, 0, u64::MAX, 0], &b);
    assert_eq!(r, 0);
}

#[test]
fn process_and_thread_state_come_back() {
    let a = Child::spawn();
    let pid = a.pid();
    // Limits (set from outside), an interval timer, three POSIX timers with a gap in the ids.
    let lim = libc::rlimit64 {
        rlim_cur: 1000,
        rlim_max: 2000,
    };
    // SAFETY: the kernel reads one rlimit64.
    assert_eq!(
        unsafe { libc::prlimit64(pid, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) },
        0
    );
    let itv: Vec<u8> = [1u64, 0, 50, 0]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let (r, _) = a.sys_mem(
        libc::SYS_setitimer,
        &[libc::ITIMER_REAL as u64, u64::MAX, 0],
        &itv,
    );
    assert_eq!(r, 0);
    assert_eq!(
        timer(&a, libc::CLOCK_MONOTONIC, 0, libc::SIGUSR1, 0x1234, 0),
        0
    );
    assert_eq!(
        timer(&a, libc::CLOCK_REALTIME, 4, libc::SIGUSR2, 0x55, pid),
        1
    );
    assert_eq!(
        timer(&a, libc::CLOCK_MONOTONIC, 0, libc::SIGUSR1, 0x99, 0),
        2
    );
    assert_eq!(
        timer(&a, libc::CLOCK_MONOTONIC, 0, libc::SIGUSR1, 0xabc, 0),
        3
    );
    a.sys(libc::SYS_timer_delete, &[2]);
    arm(&a, 0, 20_000_000_000, 1_000_000_000);
    arm(&a, 3, 100_000_000, 0);
    a.sys(libc::SYS_umask, &[0o027]);
    a.sys(libc::SYS_prctl, &[libc::PR_SET_CHILD_SUBREAPER as u64, 1]);
    a.sys(libc::SYS_personality, &[0x0040000]); // ADDR_NO_RANDOMIZE
    a.sys_mem(
        libc::SYS_prctl,
        &[libc::PR_SET_NAME as u64, u64::MAX],
        b"worker-x\0",
    );
    let ss: Vec<u8> = [0x7000_0000u64, 0, 65536]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let (r, _) = a.sys_mem(libc::SYS_sigaltstack, &[u64::MAX, 0], &ss);
    assert_eq!(r, 0);
    a.sys(
        libc::SYS_prctl,
        &[libc::PR_SET_PDEATHSIG as u64, libc::SIGTERM as u64],
    );
    a.sys(libc::SYS_prctl, &[libc::PR_SET_TIMERSLACK as u64, 123_000]);
    let one_cpu = 1u64;
    // SAFETY: the kernel reads 8 bytes of CPU mask.
    unsafe { libc::syscall(libc::SYS_sched_setaffinity, pid, 8, &one_cpu as *const u64) };
    // SAFETY: plain system call.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as u32, 5) };

    let r = a.remote();
    let ps = procstate::capture_process(&r).unwrap();
    let ts = procstate::capture_thread(&r, pid).unwrap();
    assert_eq!(
        ps.posix_timers.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    assert_eq!(ts.name, "worker-x");
    assert_eq!(ts.altstack.map(|s| (s.0, s.2)), Some((0x7000_0000, 65536)));
    assert_eq!(
        (ts.nice, ts.pdeathsig, ts.timerslack_ns),
        (5, libc::SIGTERM, 123_000)
    );
    let json = serde_json::to_string(&(&ps, &ts)).unwrap();
    drop(a);

    let b = Child::spawn();
    let r = b.remote();
    // The program blocks SIGUSR1 and reads it from a signalfd (its mask is restored with its
    // threads, before the timers).
    let mask = (1u64 << (libc::SIGUSR1 - 1)).to_ne_bytes();
    b.sys_mem(
        libc::SYS_rt_sigprocmask,
        &[libc::SIG_BLOCK as u64, u64::MAX, 0, 8],
        &mask,
    );
    let (ps, ts): (procstate::ProcessState, procstate::ThreadState) =
        serde_json::from_str(&json).unwrap();
    let tids = BTreeMap::from([(pid, b.pid())]);
    procstate::restore_thread(&r, b.pid(), &ts).unwrap();
    procstate::restore_process(&r, &ps, &tids).unwrap();

    let ps2 = procstate::capture_process(&r).unwrap();
    let ts2 = procstate::capture_thread(&r, b.pid()).unwrap();
    assert_eq!(ps2.rlimits, ps.rlimits);
    assert_eq!(
        (ps2.umask, ps2.child_subreaper, ps2.personality),
        (0o027, true, 0x0040000)
    );
    assert_eq!(ps2.itimers.len(), 1);
    assert!(ps2.itimers[0].2 <= 50_000_000 && ps2.itimers[0].2 > 40_000_000);
    let shape = |t: &PosixTimer| (t.id, t.clock, t.notify, t.signal, t.value, t.interval_ns);
    assert_eq!(
        ps2.posix_timers.iter().map(shape).collect::<Vec<_>>(),
        ps.posix_timers.iter().map(shape).collect::<Vec<_>>()
    );
    assert_eq!(
        ps2.posix_timers[1].thread,
        Some(b.pid()),
        "the thread timer signals the new thread"
    );
    assert!(ps2.posix_timers[0].remaining_ns > 15_000_000_000);
    assert_eq!(ts2, ts);

    // Timer 3 fires (100 ms after the restore) with its id and value.
    // (A signalfd reads the signals of the process that reads it.)
    let m = u64::from_ne_bytes(mask);
    // SAFETY: the kernel reads 8 bytes of signal set.
    let sfd = unsafe {
        libc::syscall(
            libc::SYS_signalfd4,
            -1,
            &m as *const u64,
            8,
            libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
        )
    };
    b.give(common::owned(sfd as i32), 7);
    let sfd = 7;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (n, info) = b.sys_mem(libc::SYS_read, &[sfd as u64, u64::MAX, 128], &[0u8; 128]);
    assert_eq!(n, 128);
    let u32_at = |o: usize| u32::from_ne_bytes(info[o..o + 4].try_into().unwrap());
    assert_eq!(u32_at(0), libc::SIGUSR1 as u32);
    assert_eq!(u32_at(8) as i32, -2, "SI_TIMER");
    assert_eq!(u32_at(24), 3, "the timer's id");
    assert_eq!(u64::from_ne_bytes(info[48..56].try_into().unwrap()), 0xabc);
}

#[test]
fn posix_timers_keep_their_ids_on_kernels_without_restore_ids() {
    // A test process of its own: the variable is read by this restore only.
    if std::env::var_os("KIOKU_TIMER_IDS_IN_ORDER").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "posix_timers_keep_their_ids_on_kernels_without_restore_ids",
                "--nocapture",
            ])
            .env("KIOKU_TIMER_IDS_IN_ORDER", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let a = Child::spawn();
    for want in 0..5 {
        assert_eq!(
            timer(&a, libc::CLOCK_MONOTONIC, 0, libc::SIGUSR1, want as u64, 0),
            want
        );
    }
    a.sys(libc::SYS_timer_delete, &[0]);
    a.sys(libc::SYS_timer_delete, &[2]);
    arm(&a, 4, 10_000_000_000, 0);
    let ps = procstate::capture_process(&a.remote()).unwrap();
    let b = Child::spawn();
    procstate::restore_process(&b.remote(), &ps, &BTreeMap::new()).unwrap();
    let ps2 = procstate::capture_process(&b.remote()).unwrap();
    let ids = |p: &procstate::ProcessState| {
        p.posix_timers
            .iter()
            .map(|t| (t.id, t.value))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&ps2), vec![(1, 1), (3, 3), (4, 4)]);
    assert!(ps2.posix_timers[2].remaining_ns > 9_000_000_000);
}
