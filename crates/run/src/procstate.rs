//! Per-process and per-thread kernel state a restore must set again: resource limits, interval
//! timers, POSIX timers (same ids), umask, child-subreaper, personality, dumpable; per thread:
//! its name, signal alternate stack, parent-death signal, CPU affinity, nice value, timer slack
//! and no-new-privileges.
//!
//! Captured from a stopped process (what `/proc` shows, the rest by calls injected through a
//! [`Remote`] acting in it or in the thread concerned), restored into the rebuilt process the
//! same way. When to call what, from the lead's restore:
//! * [`restore_thread`] for each thread *before* its registers are set (the kernel refuses to
//!   change the alternate stack of a thread whose stack pointer is on it);
//! * [`restore_process`] after every thread exists (timers may signal a given thread) and after
//!   the descriptors (a lower `RLIMIT_NOFILE` would refuse descriptor numbers above it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Result, RunError};
use crate::remote::Remote;

/// `PR_TIMER_CREATE_RESTORE_IDS` (Linux 6.14+): `timer_create` takes the id it is given.
const PR_TIMER_CREATE_RESTORE_IDS: u64 = 77;
const SIGEV_SIGNAL: i32 = 0;
const SIGEV_NONE: i32 = 1;
const SIGEV_THREAD_ID: i32 = 4;
const SS_DISABLE: i32 = 2;
const SS_AUTODISARM: i32 = 1 << 31;
const RLIM_NLIMITS: i32 = 16;

/// Process-wide state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    /// `(resource, soft, hard)` for every resource.
    pub rlimits: Vec<(i32, u64, u64)>,
    /// `ITIMER_REAL`, `ITIMER_VIRTUAL`, `ITIMER_PROF`: (interval, value) in µs.
    pub itimers: Vec<(i32, u64, u64)>,
    pub posix_timers: Vec<PosixTimer>,
    pub umask: u32,
    pub child_subreaper: bool,
    pub personality: u64,
    /// `PR_GET_DUMPABLE`.
    pub dumpable: i32,
}

/// A POSIX timer (`timer_create`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PosixTimer {
    pub id: i32,
    pub clock: i32,
    /// `SIGEV_SIGNAL`, `SIGEV_NONE`, or `SIGEV_SIGNAL | SIGEV_THREAD_ID`.
    pub notify: i32,
    pub signal: i32,
    /// `sigev_value`.
    pub value: u64,
    /// The thread signalled (`SIGEV_THREAD_ID`), as the program sees its id.
    pub thread: Option<i32>,
    /// Time left until it fires, and its period, ns (0: disarmed).
    pub remaining_ns: u64,
    pub interval_ns: u64,
}

/// One thread's state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadState {
    /// `comm`.
    pub name: String,
    /// `sigaltstack`: (stack, flags, size); `None` when disabled.
    pub altstack: Option<(u64, i32, u64)>,
    pub pdeathsig: i32,
    /// CPU affinity mask, 64 CPUs a word.
    pub affinity: Vec<u64>,
    pub nice: i32,
    pub timerslack_ns: u64,
    pub no_new_privs: bool,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |e| RunError::io(what.to_string(), e)
}

fn read(path: String) -> Result<String> {
    crate::sys::read_proc(path)
}

/// A `Key:\tvalue` line of a /proc status file.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// The thread's name (`comm`) as its status file shows it, when that is the name itself: the
/// kernel escapes a backslash and a newline there (a name holding either is read from `comm`
/// instead).
fn name_in_status(status: &str) -> Option<&str> {
    let name = status.split('\n').next()?.strip_prefix("Name:\t")?;
    (!name.contains('\\')).then_some(name)
}

/// An injected call that reads a value of `len` bytes the kernel writes through its pointer
/// argument (given as `u64::MAX` in `args`).
fn call_out(r: &dyn Remote, what: &str, nr: i64, args: &[u64], len: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; len];
    r.with_bytes(&vec![0u8; len], &mut |addr| {
        let a: Vec<u64> = args
            .iter()
            .map(|&x| if x == u64::MAX { addr as u64 } else { x })
            .collect();
        r.syscall(what, nr, &a)?;
        r.read_mem(addr, &mut out)
    })?;
    Ok(out)
}

/// An injected call that passes `data` through its pointer argument (`u64::MAX` in `args`).
fn call_in(r: &dyn Remote, what: &str, nr: i64, args: &[u64], data: &[u8]) -> Result<u64> {
    let mut ret = 0;
    r.with_bytes(data, &mut |addr| {
        let a: Vec<u64> = args
            .iter()
            .map(|&x| if x == u64::MAX { addr as u64 } else { x })
            .collect();
        ret = r.syscall(what, nr, &a)?;
        Ok(())
    })?;
    Ok(ret)
}

fn word(b: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// Captures the process-wide state of the stopped process `r` acts in.
pub fn capture_process(r: &dyn Remote) -> Result<ProcessState> {
    capture_process_with(r, None)
}

/// [`capture_process`] given the text of the process's `/proc/PID/status` when the caller
/// read it in the same stop (one read less per checkpoint).
pub fn capture_process_with(r: &dyn Remote, status: Option<&str>) -> Result<ProcessState> {
    capture_process_since(r, status, None)
}

/// [`capture_process_with`] knowing the state `prev` captured at an earlier stop, when no call
/// that changes it ran since (the tree's seccomp filter traps those calls: see
/// `docs/run.md`, "The stop path"). Only what changes by itself is read again: the armed
/// interval and POSIX timers (their countdown), the resource limits while a CPU-time soft
/// limit below its hard limit is set (the kernel raises it by a second each time it sends
/// SIGXCPU), and the umask (from `status`, free). `None`: everything is read.
pub fn capture_process_since(
    r: &dyn Remote,
    status: Option<&str>,
    prev: Option<&ProcessState>,
) -> Result<ProcessState> {
    let Some(prev) = prev else {
        return capture_all(r, status);
    };
    let mut s = prev.clone();
    if cpu_limit_moves(&prev.rlimits) {
        s.rlimits = rlimits(r.pid())?;
    }
    s.itimers.clear();
    for &(which, _, _) in &prev.itimers {
        if let Some(t) = itimer(r, which)? {
            s.itimers.push(t);
        }
    }
    for t in s.posix_timers.iter_mut() {
        if t.remaining_ns > 0 || t.interval_ns > 0 {
            timer_value(r, t)?;
        }
    }
    s.umask = umask_of(r.pid(), status)?;
    Ok(s)
}

/// `RLIMIT_CPU`'s soft limit is set below its hard limit: the kernel raises the soft limit
/// itself when it is reached.
fn cpu_limit_moves(rlimits: &[(i32, u64, u64)]) -> bool {
    rlimits
        .iter()
        .any(|&(res, cur, max)| res == libc::RLIMIT_CPU as i32 && cur != u64::MAX && cur < max)
}

fn rlimits(pid: i32) -> Result<Vec<(i32, u64, u64)>> {
    let mut out = Vec::with_capacity(RLIM_NLIMITS as usize);
    for res in 0..RLIM_NLIMITS {
        let mut old = libc::rlimit64 {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: the kernel writes one rlimit64.
        let rc = unsafe { libc::prlimit64(pid, res as _, std::ptr::null(), &mut old) };
        if rc != 0 {
            return Err(RunError::io("prlimit", std::io::Error::last_os_error()));
        }
        out.push((res, old.rlim_cur, old.rlim_max));
    }
    Ok(out)
}

/// Interval timer `which`: `(which, interval, value)` in µs, `None` when disarmed.
fn itimer(r: &dyn Remote, which: i32) -> Result<Option<(i32, u64, u64)>> {
    let b = call_out(
        r,
        "getitimer",
        libc::SYS_getitimer,
        &[which as u64, u64::MAX],
        32,
    )?;
    let us = |i: usize| word(&b, i) * 1_000_000 + word(&b, i + 1);
    let (interval, value) = (us(0), us(2));
    Ok((value != 0 || interval != 0).then_some((which, interval, value)))
}

fn umask_of(pid: i32, status: Option<&str>) -> Result<u32> {
    let read_status;
    let status = match status {
        Some(s) => s,
        None => {
            read_status = read(format!("/proc/{pid}/status"))?;
            &read_status
        }
    };
    Ok(status_field(status, "Umask")
        .and_then(|v| u32::from_str_radix(v, 8).ok())
        .unwrap_or(0o022))
}

fn capture_all(r: &dyn Remote, status: Option<&str>) -> Result<ProcessState> {
    let pid = r.pid();
    let mut s = ProcessState {
        rlimits: rlimits(pid)?,
        ..Default::default()
    };
    for which in [libc::ITIMER_REAL, libc::ITIMER_VIRTUAL, libc::ITIMER_PROF] {
        s.itimers.extend(itimer(r, which)?);
    }
    s.posix_timers = posix_timers(r)?;
    s.umask = umask_of(pid, status)?;
    let b = call_out(
        r,
        "prctl(PR_GET_CHILD_SUBREAPER)",
        libc::SYS_prctl,
        &[libc::PR_GET_CHILD_SUBREAPER as u64, u64::MAX],
        4,
    )?;
    s.child_subreaper = b != [0, 0, 0, 0];
    s.personality = u64::from_str_radix(read(format!("/proc/{pid}/personality"))?.trim(), 16)
        .map_err(|_| {
            RunError::io(
                "parsing /proc/PID/personality",
                std::io::ErrorKind::InvalidData.into(),
            )
        })?;
    s.dumpable = r.syscall(
        "prctl(PR_GET_DUMPABLE)",
        libc::SYS_prctl,
        &[libc::PR_GET_DUMPABLE as u64],
    )? as i32;
    Ok(s)
}

/// `/proc/PID/timers`, with each timer's value read by `timer_gettime` in the process.
fn posix_timers(r: &dyn Remote) -> Result<Vec<PosixTimer>> {
    let pid = r.pid();
    let text = read(format!("/proc/{pid}/timers"))?;
    let mut out = Vec::new();
    let mut cur: Option<PosixTimer> = None;
    let bad = |l: &str| {
        RunError::io(
            format!("parsing /proc/{pid}/timers line '{l}'"),
            std::io::ErrorKind::InvalidData.into(),
        )
    };
    for line in text.lines() {
        let (k, v) = line.split_once(':').ok_or_else(|| bad(line))?;
        let v = v.trim();
        match k {
            "ID" => {
                out.extend(cur.take());
                cur = Some(PosixTimer {
                    id: v.parse().map_err(|_| bad(line))?,
                    clock: 0,
                    notify: SIGEV_SIGNAL,
                    signal: 0,
                    value: 0,
                    thread: None,
                    remaining_ns: 0,
                    interval_ns: 0,
                });
            }
            "signal" => {
                let t = cur.as_mut().ok_or_else(|| bad(line))?;
                let (sig, val) = v.split_once('/').ok_or_else(|| bad(line))?;
                t.signal = sig.parse().map_err(|_| bad(line))?;
                t.value = u64::from_str_radix(val, 16).map_err(|_| bad(line))?;
            }
            "notify" => {
                let t = cur.as_mut().ok_or_else(|| bad(line))?;
                let (how, target) = v.split_once('/').ok_or_else(|| bad(line))?;
                t.notify = match how {
                    "none" => SIGEV_NONE,
                    _ => SIGEV_SIGNAL,
                };
                if let Some(tid) = target.strip_prefix("tid.") {
                    let tid: i32 = tid.parse().map_err(|_| bad(line))?;
                    t.notify |= SIGEV_THREAD_ID;
                    t.thread = Some(ns_tid(pid, tid)?);
                }
            }
            "ClockID" => {
                cur.as_mut().ok_or_else(|| bad(line))?.clock = v.parse().map_err(|_| bad(line))?;
            }
            _ => {}
        }
    }
    out.extend(cur);
    for t in &mut out {
        timer_value(r, t)?;
    }
    out.sort_by_key(|t| t.id);
    Ok(out)
}

/// Reads the time left and the period of POSIX timer `t` (`timer_gettime` in the process).
fn timer_value(r: &dyn Remote, t: &mut PosixTimer) -> Result<()> {
    let b = call_out(
        r,
        "timer_gettime",
        libc::SYS_timer_gettime,
        &[t.id as u64, u64::MAX],
        32,
    )?;
    t.interval_ns = word(&b, 0) * 1_000_000_000 + word(&b, 1);
    t.remaining_ns = word(&b, 2) * 1_000_000_000 + word(&b, 3);
    Ok(())
}

/// The id thread `tid` (as the monitor sees it) has in the process's own pid namespace.
fn ns_tid(pid: i32, tid: i32) -> Result<i32> {
    let status = read(format!("/proc/{pid}/task/{tid}/status"))?;
    Ok(status_field(&status, "NSpid")
        .and_then(|v| v.split_whitespace().last()?.parse().ok())
        .unwrap_or(tid))
}

/// Sets the process-wide state in the rebuilt process `r` acts in. `tids` maps a thread id of
/// the image to the id it has now, where they differ (empty when the tree keeps its ids).
pub fn restore_process(r: &dyn Remote, s: &ProcessState, tids: &BTreeMap<i32, i32>) -> Result<()> {
    let pid = r.pid();
    r.syscall("umask", libc::SYS_umask, &[s.umask as u64])?;
    r.syscall("personality", libc::SYS_personality, &[s.personality])?;
    if s.child_subreaper {
        r.syscall(
            "prctl(PR_SET_CHILD_SUBREAPER)",
            libc::SYS_prctl,
            &[libc::PR_SET_CHILD_SUBREAPER as u64, 1],
        )?;
    }
    if s.dumpable == 0 || s.dumpable == 1 {
        r.syscall(
            "prctl(PR_SET_DUMPABLE)",
            libc::SYS_prctl,
            &[libc::PR_SET_DUMPABLE as u64, s.dumpable as u64],
        )?;
    }
    for &(which, interval, value) in &s.itimers {
        // A periodic timer whose signal is still pending shows no time left (the kernel
        // re-arms it when the signal is taken): armed again for its next period.
        let value = if value == 0 { interval } else { value };
        let tv = |us: u64| [us / 1_000_000, us % 1_000_000];
        let b = words(&[tv(interval), tv(value)].concat());
        call_in(
            r,
            "setitimer",
            libc::SYS_setitimer,
            &[which as u64, u64::MAX, 0],
            &b,
        )?;
    }
    restore_timers(r, &s.posix_timers, tids)?;
    for &(res, cur, max) in &s.rlimits {
        let new = libc::rlimit64 {
            rlim_cur: cur,
            rlim_max: max,
        };
        // SAFETY: the kernel reads one rlimit64.
        let rc = unsafe { libc::prlimit64(pid, res as _, &new, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(RunError::CannotRecreate {
                what: format!(
                    "resource limit {res} ({cur}/{max}) of process {pid}: {}",
                    std::io::Error::last_os_error()
                ),
            });
        }
    }
    Ok(())
}

/// `struct sigevent` (64 bytes) of a timer.
fn sigevent(t: &PosixTimer, tids: &BTreeMap<i32, i32>) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..8].copy_from_slice(&t.value.to_ne_bytes());
    b[8..12].copy_from_slice(&t.signal.to_ne_bytes());
    b[12..16].copy_from_slice(&t.notify.to_ne_bytes());
    if let Some(tid) = t.thread {
        let now = tids.get(&tid).copied().unwrap_or(tid);
        b[16..20].copy_from_slice(&now.to_ne_bytes());
    }
    b
}

fn restore_timers(r: &dyn Remote, timers: &[PosixTimer], tids: &BTreeMap<i32, i32>) -> Result<()> {
    if timers.is_empty() {
        return Ok(());
    }
    // With PR_TIMER_CREATE_RESTORE_IDS, timer_create takes the id found at its third argument.
    // (`KIOKU_TIMER_IDS_IN_ORDER=1` takes the way of older kernels, for tests.)
    let in_order = std::env::var_os("KIOKU_TIMER_IDS_IN_ORDER").is_some_and(|v| v == "1");
    let by_id = !in_order
        && r.syscall_raw(libc::SYS_prctl, &[PR_TIMER_CREATE_RESTORE_IDS, 1, 0, 0, 0])? == 0;
    let mut fillers = Vec::new();
    let mut made = Ok(());
    for t in timers {
        let mut buf = sigevent(t, tids);
        buf.extend_from_slice(&t.id.to_ne_bytes());
        let mut got = -1;
        made = r.with_bytes(&buf, &mut |addr| {
            let mut id = [0u8; 4];
            loop {
                // Without ids on request, a new process hands them out from 0 up: make
                // throw-away timers up to the one wanted.
                r.syscall(
                    "timer_create",
                    libc::SYS_timer_create,
                    &[t.clock as u64, addr as u64, (addr + 64) as u64],
                )?;
                r.read_mem(addr + 64, &mut id)?;
                got = i32::from_ne_bytes(id);
                if by_id || got >= t.id {
                    return Ok(());
                }
                fillers.push(got);
            }
        });
        if made.is_err() {
            break;
        }
        if got != t.id {
            made = Err(RunError::CannotRecreate {
                what: format!(
                    "POSIX timer {} of process {}: it got id {got}",
                    t.id,
                    r.pid()
                ),
            });
            break;
        }
    }
    if by_id {
        r.syscall_raw(libc::SYS_prctl, &[PR_TIMER_CREATE_RESTORE_IDS, 0, 0, 0, 0])?;
    }
    for id in fillers {
        r.syscall("timer_delete", libc::SYS_timer_delete, &[id as u64])?;
    }
    made?;
    for t in timers
        .iter()
        .filter(|t| t.remaining_ns > 0 || t.interval_ns > 0)
    {
        // (As for interval timers: periodic and waiting for its signal to be taken.)
        let remaining = if t.remaining_ns > 0 {
            t.remaining_ns
        } else {
            t.interval_ns
        };
        let ts = |ns: u64| [ns / 1_000_000_000, ns % 1_000_000_000];
        let b = words(&[ts(t.interval_ns), ts(remaining)].concat());
        call_in(
            r,
            "timer_settime",
            libc::SYS_timer_settime,
            &[t.id as u64, 0, u64::MAX, 0],
            &b,
        )?;
    }
    Ok(())
}

/// Captures thread `tid` (monitor's id) of the stopped process; `r` must act in that thread.
pub fn capture_thread(r: &dyn Remote, tid: i32) -> Result<ThreadState> {
    capture_thread_with(r, tid, None)
}

/// [`capture_thread`] given the text of the thread's `/proc/PID/task/TID/status` when the
/// caller read it in the same stop.
pub fn capture_thread_with(r: &dyn Remote, tid: i32, status: Option<&str>) -> Result<ThreadState> {
    capture_thread_since(r, tid, status, None)
}

/// [`capture_thread_with`] knowing the state `prev` captured at an earlier stop, when no call
/// that changes what is read by injected calls ran since (as for
/// [`capture_process_since`]): the signal stack (read again while it is `SS_AUTODISARM`,
/// which the kernel disarms and rearms around each handler), the parent-death signal and the
/// timer slack are taken from `prev`. The rest is read by the monitor itself every time (its
/// name, CPU affinity and nice value may be changed from outside the thread). `None`:
/// everything is read.
pub fn capture_thread_since(
    r: &dyn Remote,
    tid: i32,
    status: Option<&str>,
    prev: Option<&ThreadState>,
) -> Result<ThreadState> {
    let pid = r.pid();
    let dir = format!("/proc/{pid}/task/{tid}");
    let name = match status.and_then(name_in_status) {
        Some(n) => n.to_string(),
        None => read(format!("{dir}/comm"))?
            .trim_end_matches('\n')
            .to_string(),
    };
    let altstack = match prev {
        Some(p)
            if p.altstack
                .is_none_or(|(_, flags, _)| flags & SS_AUTODISARM == 0) =>
        {
            p.altstack
        }
        _ => {
            let b = call_out(r, "sigaltstack", libc::SYS_sigaltstack, &[0, u64::MAX], 24)?;
            let flags = i32::from_ne_bytes(b[8..12].try_into().expect("4"));
            (flags & SS_DISABLE == 0).then(|| (word(&b, 0), flags, word(&b, 2)))
        }
    };
    let (pdeathsig, timerslack_ns) = match prev {
        Some(p) => (p.pdeathsig, p.timerslack_ns),
        None => {
            let b = call_out(
                r,
                "prctl(PR_GET_PDEATHSIG)",
                libc::SYS_prctl,
                &[libc::PR_GET_PDEATHSIG as u64, u64::MAX],
                4,
            )?;
            let pdeathsig = i32::from_ne_bytes(b[..4].try_into().expect("4"));
            let timerslack_ns = r.syscall(
                "prctl(PR_GET_TIMERSLACK)",
                libc::SYS_prctl,
                &[libc::PR_GET_TIMERSLACK as u64],
            )?;
            (pdeathsig, timerslack_ns)
        }
    };
    let mut set = vec![0u64; 16];
    // SAFETY: the kernel writes at most `set`'s size in bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            tid,
            set.len() * 8,
            set.as_mut_ptr(),
        )
    };
    if n < 0 {
        return Err(io("sched_getaffinity")(std::io::Error::last_os_error()));
    }
    set.truncate((n as usize).div_ceil(8));
    // The thread's nice value (one call rather than reading its /proc stat).
    // SAFETY: getpriority takes scalars; errno tells a failure from a nice value of -1.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(io("getpriority")(std::io::Error::last_os_error()));
        }
        n
    };
    let read_status;
    let status = match status {
        Some(s) => s,
        None => {
            read_status = read(format!("{dir}/status"))?;
            &read_status
        }
    };
    let no_new_privs = status_field(status, "NoNewPrivs") == Some("1");
    Ok(ThreadState {
        name,
        altstack,
        pdeathsig,
        affinity: set,
        nice,
        timerslack_ns,
        no_new_privs,
    })
}

/// Sets thread `tid` (monitor's id) of the rebuilt process, before its registers; `r` must
/// act in that thread.
pub fn restore_thread(r: &dyn Remote, tid: i32, s: &ThreadState) -> Result<()> {
    let mut name = s.name.as_bytes()[..s.name.len().min(15)].to_vec();
    name.push(0);
    call_in(
        r,
        "prctl(PR_SET_NAME)",
        libc::SYS_prctl,
        &[libc::PR_SET_NAME as u64, u64::MAX],
        &name,
    )?;
    if let Some((sp, flags, size)) = s.altstack {
        let mut b = sp.to_ne_bytes().to_vec();
        b.extend_from_slice(&(flags & SS_AUTODISARM).to_ne_bytes());
        b.extend_from_slice(&[0u8; 4]);
        b.extend_from_slice(&size.to_ne_bytes());
        call_in(r, "sigaltstack", libc::SYS_sigaltstack, &[u64::MAX, 0], &b)?;
    }
    r.syscall(
        "prctl(PR_SET_PDEATHSIG)",
        libc::SYS_prctl,
        &[libc::PR_SET_PDEATHSIG as u64, s.pdeathsig as u64],
    )?;
    r.syscall(
        "prctl(PR_SET_TIMERSLACK)",
        libc::SYS_prctl,
        &[libc::PR_SET_TIMERSLACK as u64, s.timerslack_ns],
    )?;
    if s.no_new_privs {
        r.syscall(
            "prctl(PR_SET_NO_NEW_PRIVS)",
            libc::SYS_prctl,
            &[libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0],
        )?;
    }
    set_affinity(tid, &s.affinity)?;
    // SAFETY: plain system call.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as u32, s.nice) } != 0 {
        return Err(RunError::CannotRecreate {
            what: format!(
                "the nice value {} of thread {tid}: {}",
                s.nice,
                std::io::Error::last_os_error()
            ),
        });
    }
    Ok(())
}

/// The checkpoint's CPUs that this machine has; all of them when it has none of those.
fn set_affinity(tid: i32, mask: &[u64]) -> Result<()> {
    let mut online = vec![0u64; mask.len().max(16)];
    // SAFETY: the kernel writes at most `online`'s size in bytes (our own allowed CPUs).
    let n = unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            0,
            online.len() * 8,
            online.as_mut_ptr(),
        )
    };
    if n < 0 {
        return Err(io("sched_getaffinity")(std::io::Error::last_os_error()));
    }
    let mut want: Vec<u64> = online
        .iter()
        .enumerate()
        .map(|(i, w)| w & mask.get(i).copied().unwrap_or(0))
        .collect();
    if want.iter().all(|&w| w == 0) {
        tracing::warn!(
            tid,
            "none of the checkpoint's CPUs is available here; the thread may run on any"
        );
        want = online;
    } else if want[..mask.len().min(want.len())] != mask[..mask.len().min(want.len())] {
        tracing::warn!(
            tid,
            "some of the checkpoint's CPUs are not available here; the thread runs on the others"
        );
    }
    // SAFETY: the kernel reads `want`'s size in bytes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid,
            want.len() * 8,
            want.as_ptr(),
        )
    };
    if rc < 0 {
        return Err(RunError::CannotRecreate {
            what: format!(
                "the CPU affinity of thread {tid}: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::name_in_status;

    #[test]
    fn a_name_is_taken_from_status_only_when_unescaped() {
        assert_eq!(name_in_status("Name:\tpi\nUmask:\t0022\n"), Some("pi"));
        assert_eq!(name_in_status("Name:\ta b \r\nState:\n"), Some("a b \r"));
        assert_eq!(name_in_status("Name:\ta\\nb\nState:\n"), None);
        assert_eq!(name_in_status("Umask:\t0022\n"), None);
    }
}
