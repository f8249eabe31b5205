//! A pid namespace for a process tree, with kioku's own init as its pid 1.
//!
//! Programs remember their process and thread ids (glibc keeps every thread's tid; the JVM
//! asks the kernel about its threads by tid), so a restored tree must get the same ids back.
//! Ids can only be chosen inside a pid namespace, by a process that may write its
//! `ns_last_pid`: so `kioku run` starts the program in a new pid namespace whose pid 1 is a
//! small init of ours, and a restore builds a new namespace and asks its init to set
//! `ns_last_pid` before each process or thread is created.
//!
//! The init is forked from the monitor and never execs (it keeps the capabilities it has in
//! the namespace's user namespace even when the user is not root). It only runs system calls
//! and touches memory prepared before the fork — the monitor may be multi-threaded, and a
//! forked copy of it must not take locks (malloc's among them) another thread might have held.
//! It also gets a mount namespace of its own with a fresh /proc, so that /proc/self and the
//! pids the program sees agree; other mounts stay slaves of the outer ones.
//!
//! Requests (monitor → init), each answered by one i64 (a result or `-errno`):
//! * `LAST_PID n`: writes `n` to /proc/sys/kernel/ns_last_pid (the next new task gets n+1);
//! * `SPAWN pid flags filter path argv env`: forks a child (with pid `pid` when non-zero) that
//!   waits for `GO`, then installs the seccomp filter and execs; answers its pid in the
//!   namespace;
//! * `GO pid`: lets that child exec.
//!
//! When the monitor goes away (its end of the request pipe closes, or PR_SET_PDEATHSIG), the
//! init exits, and the kernel kills every process of the namespace.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::{ProcError, Result};

const OP_LAST_PID: u32 = 1;
const OP_SPAWN: u32 = 2;
const OP_GO: u32 = 3;
/// SPAWN flags.
const SPAWN_INHERIT_FDS: u32 = 1;
const SPAWN_NO_NEW_PRIVS: u32 = 2;
/// Largest SPAWN request (filter, path, arguments and environment).
const REQUEST_MAX: usize = 4 << 20;
/// Most pointers (arguments + environment) a SPAWN request may carry.
const PTRS_MAX: usize = 64 * 1024;
/// Children waiting for GO at once.
const PENDING_MAX: usize = 256;

/// Which namespaces a tree gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceKind {
    /// pid and mount namespaces (needs CAP_SYS_ADMIN: root).
    Pid,
    /// A user namespace mapping the caller's uid and gid to themselves, with pid and mount
    /// namespaces in it (for users who are not root).
    UserPid,
}

/// A pid namespace with kioku's init as pid 1; dropping it ends the init and with it every
/// process of the namespace.
#[derive(Debug)]
pub struct Namespace {
    init: i32,
    kind: NamespaceKind,
    cmd: OwnedFd,
    reply: OwnedFd,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn ns_err(what: &str, source: io::Error) -> ProcError {
    ProcError::Namespace {
        what: what.to_string(),
        source,
    }
}

impl Namespace {
    /// A new namespace: pid + mount as root, inside a user namespace otherwise; falls back
    /// from the first to the second when the first is refused.
    pub fn create() -> Result<Namespace> {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            match Namespace::create_kind(NamespaceKind::Pid) {
                Ok(n) => return Ok(n),
                Err(e) => {
                    tracing::debug!("pid namespace as root refused ({e}); trying a user namespace")
                }
            }
        }
        Namespace::create_kind(NamespaceKind::UserPid)
    }

    /// A new namespace of this kind.
    pub fn create_kind(kind: NamespaceKind) -> Result<Namespace> {
        let (cmd_r, cmd_w) = pipe().map_err(|e| ns_err("pipe", e))?;
        let (rep_r, rep_w) = pipe().map_err(|e| ns_err("pipe", e))?;
        let (sync_r, sync_w) = pipe().map_err(|e| ns_err("pipe", e))?;
        // Everything the init uses, allocated before the fork.
        let mut req = vec![0u8; REQUEST_MAX];
        let mut ptrs: Vec<*const libc::c_char> = vec![std::ptr::null(); PTRS_MAX];
        let mut flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::SIGCHLD;
        if kind == NamespaceKind::UserPid {
            flags |= libc::CLONE_NEWUSER;
        }
        let fds = InitFds {
            cmd: cmd_r.as_raw_fd(),
            reply: rep_w.as_raw_fd(),
            sync: sync_r.as_raw_fd(),
            monitor_ends: [cmd_w.as_raw_fd(), rep_r.as_raw_fd(), sync_w.as_raw_fd()],
        };
        // SAFETY: a raw clone creating a child process (not a thread: no CLONE_VM); the child
        // only runs `init_main`, which uses system calls and the memory prepared above.
        let pid = unsafe { libc::syscall(libc::SYS_clone, flags as u64, 0u64, 0u64, 0u64, 0u64) };
        if pid < 0 {
            return Err(ns_err(
                "creating the namespace (clone)",
                io::Error::last_os_error(),
            ));
        }
        if pid == 0 {
            // SAFETY: we are the new child; see `init_main`.
            unsafe { init_main(&fds, kind, &mut req, &mut ptrs) }
        }
        let pid = pid as i32;
        drop((cmd_r, rep_w, sync_r));
        let mut ns = Namespace {
            init: pid,
            kind,
            cmd: cmd_w,
            reply: rep_r,
        };
        if kind == NamespaceKind::UserPid {
            // SAFETY: getuid/getgid have no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            let maps = [
                ("setgroups", "deny".to_string()),
                ("uid_map", format!("{uid} {uid} 1")),
                ("gid_map", format!("{gid} {gid} 1")),
            ];
            for (file, text) in maps {
                if let Err(e) = std::fs::write(format!("/proc/{pid}/{file}"), text) {
                    ns.kill();
                    return Err(ns_err(&format!("writing /proc/PID/{file}"), e));
                }
            }
        }
        // SAFETY: writing one byte from a local to our pipe.
        unsafe { libc::write(sync_w.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        drop(sync_w);
        match ns.answer(Duration::from_secs(10)) {
            Ok(0) => {}
            Ok(r) => {
                ns.kill();
                return Err(ns_err(
                    "setting up the namespace's init (mounting /proc)",
                    io::Error::from_raw_os_error((-r) as i32),
                ));
            }
            Err(e) => {
                // The init went away while starting (its end of the pipe closed): killed by
                // someone (a SIGKILL for the monitor's children), or failed. Reap it to tell.
                let mut st = 0;
                let eof = matches!(&e, ProcError::Namespace { source, .. } if source.kind() == io::ErrorKind::UnexpectedEof);
                let reaped = if eof {
                    // SAFETY: reaping our own (exiting) child into a local.
                    unsafe { libc::waitpid(pid, &mut st, libc::__WALL) }
                } else {
                    0
                };
                ns.init = 0;
                if reaped == pid && libc::WIFSIGNALED(st) {
                    return Err(ProcError::DiedBeforeExec {
                        program: "the pid namespace's init".into(),
                        exit: crate::tracee::Exit::Signal {
                            sig: libc::WTERMSIG(st),
                            core: false,
                        },
                    });
                }
                if reaped != pid {
                    ns.init = pid;
                    ns.kill();
                }
                return Err(e);
            }
        }
        ns.kind = kind;
        tracing::debug!(init = pid, ?kind, "pid namespace created");
        Ok(ns)
    }

    /// The init's process id (as the monitor sees it).
    pub fn init_pid(&self) -> i32 {
        self.init
    }

    /// Whether the init still runs (killing it ends every process of the namespace).
    pub fn alive(&self) -> bool {
        kioku_pool::procstat::pid_is_running(self.init.into())
    }

    /// Which namespaces.
    pub fn kind(&self) -> NamespaceKind {
        self.kind
    }

    /// Makes the next process or thread created in the namespace get id `next`.
    pub fn next_pid(&self, next: i32) -> Result<()> {
        let r = self.request(OP_LAST_PID, &(next - 1).to_le_bytes())?;
        if r < 0 {
            return Err(ns_err(
                &format!("setting ns_last_pid for pid {next}"),
                io::Error::from_raw_os_error((-r) as i32),
            ));
        }
        Ok(())
    }

    /// A child of the init (with id `pid` in the namespace when given) that waits for
    /// [`Namespace::go`] and then execs `path`. Returns (its pid as the monitor sees it, its pid
    /// in the namespace).
    pub(crate) fn spawn(&self, s: &SpawnRequest<'_>) -> Result<(i32, i32)> {
        let mut b = Vec::new();
        b.extend_from_slice(&s.pid.unwrap_or(0).to_le_bytes());
        let mut flags = 0;
        if s.inherit_fds {
            flags |= SPAWN_INHERIT_FDS;
        }
        if s.no_new_privs {
            flags |= SPAWN_NO_NEW_PRIVS;
        }
        b.extend_from_slice(&flags.to_le_bytes());
        let filter = filter_bytes(s.filter);
        b.extend_from_slice(&(filter.len() as u32).to_le_bytes());
        b.extend_from_slice(&filter);
        for part in [std::slice::from_ref(s.path), s.argv, s.env] {
            for c in part {
                b.extend_from_slice(c.as_bytes_with_nul());
            }
            b.push(0);
        }
        if b.len() > REQUEST_MAX || s.argv.len() + s.env.len() + 2 > PTRS_MAX {
            return Err(ns_err(
                "spawning in the namespace",
                io::Error::from_raw_os_error(libc::E2BIG),
            ));
        }
        let r = self.request(OP_SPAWN, &b)?;
        if r < 0 {
            return Err(ns_err(
                &format!("starting {} in the namespace", s.path.to_string_lossy()),
                io::Error::from_raw_os_error((-r) as i32),
            ));
        }
        let ns_pid = r as i32;
        let host = self.host_pid_of_child(ns_pid).ok_or_else(|| {
            ns_err(
                "finding the new process",
                io::Error::from_raw_os_error(libc::ESRCH),
            )
        })?;
        Ok((host, ns_pid))
    }

    /// Lets the child `ns_pid` made by [`Namespace::spawn`] exec.
    pub(crate) fn go(&self, ns_pid: i32) -> Result<()> {
        let r = self.request(OP_GO, &ns_pid.to_le_bytes())?;
        if r < 0 {
            return Err(ns_err(
                "starting the new process",
                io::Error::from_raw_os_error((-r) as i32),
            ));
        }
        Ok(())
    }

    /// The host pid of the init's child with pid `ns_pid` in the namespace.
    fn host_pid_of_child(&self, ns_pid: i32) -> Option<i32> {
        let text =
            std::fs::read_to_string(format!("/proc/{}/task/{}/children", self.init, self.init))
                .ok()?;
        text.split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
            .find(|&h| ns_pid_of(h) == Some(ns_pid))
    }

    fn request(&self, op: u32, payload: &[u8]) -> Result<i64> {
        let mut b = Vec::with_capacity(8 + payload.len());
        b.extend_from_slice(&op.to_le_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(payload);
        let mut off = 0;
        while off < b.len() {
            // SAFETY: writing from a live buffer to our pipe.
            let n = unsafe {
                libc::write(
                    self.cmd.as_raw_fd(),
                    b[off..].as_ptr().cast(),
                    b.len() - off,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ns_err("talking to the namespace's init", e));
            }
            off += n as usize;
        }
        self.answer(Duration::from_secs(30))
    }

    /// Reads one answer of the init.
    fn answer(&self, timeout: Duration) -> Result<i64> {
        let deadline = Instant::now() + timeout;
        let mut got = [0u8; 8];
        let mut off = 0;
        while off < 8 {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd: self.reply.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd we own.
            let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
            if r == 0 {
                return Err(ns_err(
                    "waiting for the namespace's init",
                    io::Error::from(io::ErrorKind::TimedOut),
                ));
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ns_err("waiting for the namespace's init", e));
            }
            // SAFETY: reading into the unfilled part of a local buffer.
            let n = unsafe {
                libc::read(
                    self.reply.as_raw_fd(),
                    got[off..].as_mut_ptr().cast(),
                    8 - off,
                )
            };
            if n == 0 {
                return Err(ns_err(
                    "the namespace's init ended",
                    io::Error::from(io::ErrorKind::UnexpectedEof),
                ));
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(ns_err("reading from the namespace's init", e));
            }
            off += n as usize;
        }
        Ok(i64::from_le_bytes(got))
    }

    /// Ends the init (and so every process of the namespace) and reaps it, waiting at most
    /// [`END_BOUND`] (then the init is left behind, said in the log).
    fn kill(&mut self) {
        if self.init <= 0 {
            return;
        }
        if let Err(e) = end_init(self.init, END_BOUND) {
            tracing::warn!("kioku: {e}");
        }
        self.init = 0;
    }
}

/// How long the init may take to end, with every process of its namespace, after SIGKILL.
const END_BOUND: Duration = Duration::from_secs(10);

/// SIGKILLs init `init` (the monitor's child) and reaps it.
///
/// The kernel then kills every process of the namespace, and the dying init waits, in the
/// kernel, until each of its children is reaped (and every task of the namespace is gone). A
/// task the monitor traces is reaped by the monitor alone — a zombie tracee is visible to its
/// tracer only — so a blocking wait for the init would wait for itself whenever such a task
/// has no live `Tracee` to reap it: a process forked (or a thread created) as its parent was
/// being killed is attached by `PTRACE_O_TRACEFORK`/`TRACECLONE` though its event never came.
/// So while the init is not reaped, every ended task of the namespace is reaped here if it is
/// ours (`waitpid` answers `ECHILD` for the others).
fn end_init(init: i32, bound: Duration) -> Result<()> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(init, libc::SIGKILL) };
    let deadline = Instant::now() + bound;
    let mut nap = Duration::from_micros(100);
    loop {
        let mut st = 0;
        // SAFETY: reaping our own child into a local, without blocking.
        let r = unsafe { libc::waitpid(init, &mut st, libc::WNOHANG | libc::__WALL) };
        if r == init {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // ECHILD: reaped already (nothing else can fail here).
            return Ok(());
        }
        reap_traced_zombies(init);
        if Instant::now() >= deadline {
            return Err(ProcError::NotEnding {
                pid: init,
                what: "the pid namespace's init",
                secs: bound.as_secs(),
            });
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

/// Reaps, without blocking, every ended task under `init` (its descendants by the kernel's
/// `children` lists, each task of each) that this process traces.
fn reap_traced_zombies(init: i32) {
    let mut todo = vec![init];
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = todo.pop() {
        if !seen.insert(pid) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for tid in tasks.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
            if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
                todo.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<i32>().ok()),
                );
            }
            if pid == init {
                continue;
            }
            let ended = crate::sys::read_small(&format!("/proc/{pid}/task/{tid}/stat"))
                .is_ok_and(|s| kioku_pool::procstat::ProcStat::parse(&s).has_exited());
            if ended {
                // Not ours (a child of a process of the namespace, untraced): ECHILD at once.
                let _ = crate::sys::wait(tid, true);
            }
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What [`Namespace::spawn`] starts.
pub(crate) struct SpawnRequest<'a> {
    pub pid: Option<i32>,
    pub path: &'a CString,
    pub argv: &'a [CString],
    pub env: &'a [CString],
    pub filter: Option<&'a [libc::sock_filter]>,
    pub inherit_fds: bool,
    pub no_new_privs: bool,
}

fn filter_bytes(f: Option<&[libc::sock_filter]>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in f.unwrap_or(&[]) {
        out.extend_from_slice(&i.code.to_le_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_le_bytes());
    }
    out
}

/// The pid of process `host` (as the monitor sees it) in its own, innermost pid namespace.
pub fn ns_pid_of(host: i32) -> Option<i32> {
    ns_ids_of(host, "NSpid:")
}

/// The thread id of thread `host_tid` of process `host_pid` in its innermost pid namespace.
pub fn ns_tid_of(host_pid: i32, host_tid: i32) -> Option<i32> {
    let s = crate::sys::read_small(&format!("/proc/{host_pid}/task/{host_tid}/status")).ok()?;
    last_id(&s, "NSpid:")
}

/// Process group and session of `host` as its namespace sees them (0: outside it).
pub fn ns_pgid_sid_of(host: i32) -> Option<(i32, i32)> {
    let s = crate::sys::read_small(&format!("/proc/{host}/status")).ok()?;
    Some((last_id(&s, "NSpgid:")?, last_id(&s, "NSsid:")?))
}

fn ns_ids_of(host: i32, key: &str) -> Option<i32> {
    let s = crate::sys::read_small(&format!("/proc/{host}/status")).ok()?;
    last_id(&s, key)
}

/// The innermost id on line `key` (`NSpid:`, `NSpgid:`, `NSsid:`) of a /proc status text
/// the caller read already.
pub fn ns_id_in_status(status: &str, key: &str) -> Option<i32> {
    last_id(status, key)
}

fn last_id(status: &str, key: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The init's descriptors.
struct InitFds {
    cmd: RawFd,
    reply: RawFd,
    sync: RawFd,
    /// The monitor's ends, closed in the init.
    monitor_ends: [RawFd; 3],
}

/// Writes one answer (best effort: a monitor that went away ends the init through EOF).
///
/// # Safety
/// `fd` must be the init's reply pipe.
unsafe fn answer(fd: RawFd, v: i64) {
    let b = v.to_le_bytes();
    libc::write(fd, b.as_ptr().cast(), 8);
}

fn neg_errno() -> i64 {
    // SAFETY: reading this thread's errno.
    -(unsafe { *libc::__errno_location() } as i64)
}

/// Reads exactly `buf.len()` bytes; false at EOF or error.
///
/// # Safety
/// `fd` must be open; only system calls are made.
unsafe fn read_exact(fd: RawFd, buf: &mut [u8]) -> bool {
    let mut off = 0;
    while off < buf.len() {
        let n = libc::read(fd, buf[off..].as_mut_ptr().cast(), buf.len() - off);
        if n == 0 {
            return false;
        }
        if n < 0 {
            if *libc::__errno_location() == libc::EINTR {
                continue;
            }
            return false;
        }
        off += n as usize;
    }
    true
}

/// Writes `n` to the namespace's ns_last_pid; 0 or -errno.
///
/// # Safety
/// Only system calls; call in the init.
unsafe fn write_last_pid(n: i32) -> i64 {
    let fd = libc::open(
        c"/proc/sys/kernel/ns_last_pid".as_ptr(),
        libc::O_RDWR | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return neg_errno();
    }
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut v = n.max(0) as u32;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let r = libc::write(fd, digits[i..].as_ptr().cast(), digits.len() - i);
    let e = neg_errno();
    libc::close(fd);
    if r < 0 {
        e
    } else {
        0
    }
}

/// The init: pid 1 of the new namespace.
///
/// # Safety
/// Must run in the freshly cloned child only. It uses nothing but system calls and the
/// buffers passed in (allocated before the clone), never returns, and never unwinds.
unsafe fn init_main(
    fds: &InitFds,
    kind: NamespaceKind,
    req: &mut [u8],
    ptrs: &mut [*const libc::c_char],
) -> ! {
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    for fd in fds.monitor_ends {
        libc::close(fd);
    }
    // Descriptors of the monitor that are close-on-exec would not reach the program anyway;
    // holding them here would keep, e.g., the pool's lock alive. Inheritable ones stay (they
    // are what `--inherit-fds` passes on).
    close_cloexec_except(&[fds.cmd, fds.reply, fds.sync]);
    // Wait until the monitor has written the uid/gid maps (user namespace), or at all set up.
    let mut b = [0u8; 1];
    if !read_exact(fds.sync, &mut b) && kind == NamespaceKind::UserPid {
        libc::_exit(1);
    }
    libc::close(fds.sync);
    // Our own /proc; the other mounts follow the outer ones (slave), ours do not leak out.
    let mut status = 0i64;
    if libc::mount(
        std::ptr::null(),
        c"/".as_ptr(),
        std::ptr::null(),
        libc::MS_REC | libc::MS_SLAVE,
        std::ptr::null(),
    ) != 0
        || libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ) != 0
    {
        status = neg_errno();
    }
    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    let mut none: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut none);
    libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    answer(fds.reply, status);
    if status != 0 {
        libc::_exit(1);
    }
    // Children waiting for GO: (pid in the namespace, write end of its go pipe).
    let mut pending = [(0i32, -1i32); PENDING_MAX];
    loop {
        let mut p = libc::pollfd {
            fd: fds.cmd,
            events: libc::POLLIN,
            revents: 0,
        };
        let r = libc::poll(&mut p, 1, 50);
        // Orphans of the tree are ours to reap.
        let mut st = 0;
        while libc::waitpid(-1, &mut st, libc::WNOHANG | libc::__WALL) > 0 {}
        if r <= 0 {
            continue;
        }
        let mut head = [0u8; 8];
        if !read_exact(fds.cmd, &mut head) {
            // The monitor is gone: so is the namespace.
            libc::_exit(0);
        }
        let op = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if len > req.len() || !read_exact(fds.cmd, &mut req[..len]) {
            libc::_exit(2);
        }
        let body = &req[..len];
        let result = match op {
            OP_LAST_PID if len == 4 => {
                write_last_pid(i32::from_le_bytes([body[0], body[1], body[2], body[3]]))
            }
            OP_SPAWN => spawn_child(fds, body, ptrs, &mut pending),
            OP_GO if len == 4 => {
                let pid = i32::from_le_bytes([body[0], body[1], body[2], body[3]]);
                match pending.iter_mut().find(|(p, fd)| *p == pid && *fd >= 0) {
                    Some(slot) => {
                        libc::write(slot.1, [1u8].as_ptr().cast(), 1);
                        libc::close(slot.1);
                        *slot = (0, -1);
                        0
                    }
                    None => -(libc::ESRCH as i64),
                }
            }
            _ => -(libc::EINVAL as i64),
        };
        answer(fds.reply, result);
    }
}

/// Closes every close-on-exec descriptor above 2 but `keep`.
///
/// # Safety
/// Only system calls; call in the init.
unsafe fn close_cloexec_except(keep: &[RawFd]) {
    let dir = libc::open(
        c"/proc/self/fd".as_ptr(),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
    );
    if dir < 0 {
        return;
    }
    let mut close = [-1i32; 1024];
    let mut n = 0;
    let mut buf = [0u8; 4096];
    loop {
        let got = libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len()) as isize;
        if got <= 0 {
            break;
        }
        let mut off = 0usize;
        while off < got as usize {
            // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let name = &buf[off + 19..off + reclen];
            let mut fd: i32 = 0;
            let mut digits = false;
            for &c in name.iter().take_while(|&&c| c != 0) {
                if c.is_ascii_digit() {
                    fd = fd * 10 + (c - b'0') as i32;
                    digits = true;
                } else {
                    digits = false;
                    break;
                }
            }
            if digits && fd > 2 && fd != dir && !keep.contains(&fd) && n < close.len() {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 && flags & libc::FD_CLOEXEC != 0 {
                    close[n] = fd;
                    n += 1;
                }
            }
            off += reclen;
        }
    }
    libc::close(dir);
    for &fd in &close[..n] {
        libc::close(fd);
    }
}

/// Handles SPAWN in the init; the new pid, or -errno.
///
/// # Safety
/// Only system calls and the passed buffers; call in the init.
unsafe fn spawn_child(
    fds: &InitFds,
    body: &[u8],
    ptrs: &mut [*const libc::c_char],
    pending: &mut [(i32, i32); PENDING_MAX],
) -> i64 {
    if body.len() < 12 {
        return -(libc::EINVAL as i64);
    }
    let want = i32::from_le_bytes([body[0], body[1], body[2], body[3]]);
    let flags = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
    let flen = u32::from_le_bytes([body[8], body[9], body[10], body[11]]) as usize;
    if body.len() < 12 + flen || !flen.is_multiple_of(8) {
        return -(libc::EINVAL as i64);
    }
    let filter = &body[12..12 + flen];
    let strings = &body[12 + flen..];
    // path \0 \0 argv… \0 env… \0: three NUL-terminated lists of NUL-terminated strings.
    let mut lists = [0usize; 3]; // index in `ptrs` where each list starts
    let mut np = 0;
    let mut at = 0;
    for list in lists.iter_mut() {
        *list = np;
        loop {
            if at >= strings.len() {
                return -(libc::EINVAL as i64);
            }
            if strings[at] == 0 {
                at += 1;
                break;
            }
            if np + 1 >= ptrs.len() {
                return -(libc::E2BIG as i64);
            }
            ptrs[np] = strings[at..].as_ptr().cast();
            np += 1;
            while at < strings.len() && strings[at] != 0 {
                at += 1;
            }
            at += 1;
        }
        ptrs[np] = std::ptr::null();
        np += 1;
    }
    let Some(slot) = pending.iter().position(|(_, fd)| *fd < 0) else {
        return -(libc::EAGAIN as i64);
    };
    let mut go = [0i32; 2];
    if libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
        return neg_errno();
    }
    if want > 0 {
        let r = write_last_pid(want - 1);
        if r < 0 {
            libc::close(go[0]);
            libc::close(go[1]);
            return r;
        }
    }
    // A raw clone: fork() would run the C library's fork handlers, whose locks this forked
    // copy of the monitor may hold from another thread.
    let pid = libc::syscall(
        libc::SYS_clone,
        libc::SIGCHLD as u64,
        0u64,
        0u64,
        0u64,
        0u64,
    );
    if pid < 0 {
        let e = neg_errno();
        libc::close(go[0]);
        libc::close(go[1]);
        return e;
    }
    if pid == 0 {
        libc::close(go[1]);
        libc::close(fds.cmd);
        libc::close(fds.reply);
        for (_, fd) in pending.iter() {
            if *fd >= 0 {
                libc::close(*fd);
            }
        }
        for sig in 1..65 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, 0 as libc::c_ulong);
        let mut b = [0u8; 1];
        if !read_exact(go[0], &mut b) {
            libc::_exit(126);
        }
        libc::close(go[0]);
        if flags & SPAWN_INHERIT_FDS == 0 {
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
        }
        if flen > 0 {
            if flags & SPAWN_NO_NEW_PRIVS != 0 {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0);
            }
            let prog = libc::sock_fprog {
                len: (flen / 8) as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            const SECCOMP_SET_MODE_FILTER: u64 = 1;
            if libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                0u64,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                libc::_exit(125);
            }
        }
        libc::execve(
            ptrs[lists[0]],
            ptrs[lists[1]..].as_ptr(),
            ptrs[lists[2]..].as_ptr(),
        );
        libc::_exit(127);
    }
    libc::close(go[0]);
    let pid = pid as i32;
    if want > 0 && pid != want {
        libc::kill(pid, libc::SIGKILL);
        libc::close(go[1]);
        return -(libc::EEXIST as i64);
    }
    pending[slot] = (pid, go[1]);
    pid as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_id_reads_the_innermost() {
        let s = "Name:\tx\nNSpid:\t4321\t2\nNSpgid:\t4300\t0\nNSsid:\t100\t0\n";
        assert_eq!(last_id(s, "NSpid:"), Some(2));
        assert_eq!(last_id(s, "NSpgid:"), Some(0));
        assert_eq!(last_id(s, "Missing:"), None);
    }
}
