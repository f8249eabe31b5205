//! A traced process: spawned stopped before its first instruction, or seized while running;
//! all its threads stopped and resumed together; signals passed through; exit reported.
//!
//! State machine per thread: `Running` (resumed; a stop may be pending in waitpid),
//! `Listening` (in a job-control group-stop, resumed with PTRACE_LISTEN so that SIGCONT works)
//! or `Stopped` (in a ptrace-stop we have collected, with the signal to deliver on resume).
//! Threads are waited for one by one by tid (never `waitpid(-1)`), so a Tracee coexists with
//! other children of the monitor.

use std::cell::RefCell;
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use kioku_pool::procstat::ProcStat;

use crate::error::{ProcError, Result};
use crate::maps::{read_maps, MapEntry};
use crate::mem;
use crate::regs::{self, FpState, Regs, ThreadState};
use crate::sys::{self, Req, Status};

/// How long a process sent SIGKILL may take to end before [`Tracee::kill`] gives up on it
/// (`ProcError::NotEnding`): a SIGKILL ends any sleep but an uninterruptible one.
pub(crate) const KILL_BOUND: Duration = Duration::from_secs(10);

/// How a traced process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// exit(code).
    Code(i32),
    /// Terminated by a signal.
    Signal {
        /// The signal.
        sig: i32,
        /// A core dump was written.
        core: bool,
    },
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal { sig, core } => {
                write!(f, "killed by signal {sig}")?;
                if *core {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// How a thread came to be stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopHow {
    /// PTRACE_EVENT_STOP from PTRACE_INTERRUPT (or a new thread's first stop).
    Interrupt,
    /// PTRACE_EVENT_STOP of a job-control group-stop by this signal.
    GroupStop(i32),
    /// Signal-delivery-stop (our own single-step trap after an injection).
    Signal,
    /// PTRACE_EVENT_SECCOMP: at the entry of a system call the seccomp filter traps, before it
    /// runs; the call runs when the thread is resumed.
    Seccomp,
    /// A vfork event while stopping: the thread is inside vfork (registers not final) and
    /// would wait for its child once resumed; the owner resumes the tree instead of using it.
    Vfork,
}

/// Something a traced process did that its owner must act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// It started a child process (fork, vfork, or clone without CLONE_THREAD); the child is
    /// traced already (PTRACE_O_TRACEFORK…) and starts with a stop of its own.
    Child {
        /// The new process.
        pid: i32,
        /// Started with vfork (or CLONE_VFORK): it shares the parent's memory until it
        /// execs or exits.
        vfork: bool,
    },
    /// Thread `tid` is stopped at a seccomp trap (PTRACE_O_TRACESECCOMP): the system call has
    /// not run yet; it runs when the thread is resumed.
    Trap {
        /// The thread.
        tid: i32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TState {
    Running,
    Listening,
    Stopped {
        how: StopHow,
        /// Signal to deliver on resume (only in a signal-delivery-stop).
        deliver: i32,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Thread {
    pub tid: i32,
    pub state: TState,
}

/// Whether the stop loops want threads to end up stopped, or running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Stopping,
    Running,
}

pub(crate) struct Inner {
    pub pid: i32,
    pub threads: Vec<Thread>,
    pub exit: Option<Exit>,
    spawned: bool,
    detached: bool,
    /// Address of a `syscall` instruction in the tracee (in the vdso), once found.
    pub syscall_insn: Option<usize>,
    /// The [`sys::ran_generation`] at which `syscall_insn` was last seen holding `syscall`.
    pub syscall_checked: Option<u64>,
    /// Always write `syscall` over the word at `rip` instead of searching for one.
    pub patch_syscall: bool,
    /// execve calls completed since the spawn (the first exec of a spawn not counted).
    pub execs: u64,
    /// Events for the owner ([`Tracee::take_notices`]).
    pub notices: Vec<Notice>,
    /// The writable mapping a stopped thread's stack pointer was last found in, and the
    /// [`sys::ran_generation`] then: valid while no tracee has run since (injected calls
    /// find their scratch space without reading /proc/PID/maps each time).
    pub stack_seen: Option<(u64, usize, usize)>,
}

/// Handle on a traced process. Clones share the process; the last handle to go kills a process
/// it spawned and detaches from one it seized.
///
/// ptrace binds a tracee to the *thread* that attached it, so a `Tracee` is neither `Send` nor
/// `Sync`: create it and use it on one thread.
#[derive(Clone)]
pub struct Tracee {
    pub(crate) inner: Rc<RefCell<Inner>>,
}

impl fmt::Debug for Tracee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.inner.borrow();
        f.debug_struct("Tracee")
            .field("pid", &i.pid)
            .field("threads", &i.threads)
            .field("exit", &i.exit)
            .finish()
    }
}

/// What to start under the monitor.
pub struct TraceeCommand {
    program: PathBuf,
    args: Vec<String>,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    exit_kill: bool,
    inherit_fds: bool,
    trace_children: bool,
    seccomp: Option<Vec<libc::sock_filter>>,
    no_new_privs: bool,
    env: Option<Vec<(std::ffi::OsString, std::ffi::OsString)>>,
}

impl fmt::Debug for TraceeCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceeCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("trace_children", &self.trace_children)
            .field(
                "seccomp_instructions",
                &self.seccomp.as_ref().map_or(0, |v| v.len()),
            )
            .finish_non_exhaustive()
    }
}

impl TraceeCommand {
    /// `program` (searched in PATH when it has no `/`), with no arguments, inheriting stdio;
    /// killed if the monitor dies (PTRACE_O_EXITKILL).
    pub fn new(program: impl AsRef<Path>) -> Self {
        TraceeCommand {
            program: program.as_ref().to_path_buf(),
            args: vec![],
            stdin: None,
            stdout: None,
            stderr: None,
            exit_kill: true,
            inherit_fds: true,
            trace_children: false,
            seccomp: None,
            no_new_privs: false,
            env: None,
        }
    }

    /// Whether the processes the program starts (fork, vfork, clone) are traced too, each
    /// reported as a [`Notice::Child`] (default: no).
    pub fn trace_children(mut self, yes: bool) -> Self {
        self.trace_children = yes;
        self
    }

    /// A seccomp filter (classic BPF) installed in the program before it execs, inherited by
    /// everything it starts; its `SECCOMP_RET_TRACE` verdicts stop the thread with a
    /// [`Notice::Trap`]. `no_new_privs` sets PR_SET_NO_NEW_PRIVS first (needed without
    /// CAP_SYS_ADMIN; setuid programs the program runs then gain no privileges).
    pub fn seccomp(mut self, filter: Vec<libc::sock_filter>, no_new_privs: bool) -> Self {
        self.seccomp = Some(filter);
        self.no_new_privs = no_new_privs;
        self
    }

    /// The program's environment (default: the monitor's).
    pub fn env(mut self, vars: Vec<(std::ffi::OsString, std::ffi::OsString)>) -> Self {
        self.env = Some(vars);
        self
    }

    fn ptrace_options(&self) -> u32 {
        let mut opts = sys::O_TRACEEXEC | sys::O_TRACECLONE;
        if self.exit_kill {
            opts |= sys::O_EXITKILL;
        }
        if self.trace_children {
            opts |= sys::O_TRACEFORK | sys::O_TRACEVFORK;
        }
        if self.seccomp.is_some() {
            opts |= sys::O_TRACESECCOMP;
        }
        opts
    }

    fn argv_strings(&self) -> std::result::Result<Vec<CString>, std::ffi::NulError> {
        std::iter::once(CString::new(self.program.as_os_str().as_bytes()))
            .chain(self.args.iter().map(|a| CString::new(a.as_bytes())))
            .collect()
    }

    fn env_strings(&self) -> std::result::Result<Vec<CString>, std::ffi::NulError> {
        let vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = match &self.env {
            Some(v) => v.clone(),
            None => std::env::vars_os().collect(),
        };
        vars.into_iter()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                CString::new(b)
            })
            .collect()
    }

    /// Whether the program inherits the monitor's descriptors other than 0, 1 and 2 that are
    /// not close-on-exec (default: yes). `false` closes them at exec.
    pub fn inherit_fds(mut self, yes: bool) -> Self {
        self.inherit_fds = yes;
        self
    }

    /// Appends an argument.
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Appends arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, a: I) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    /// The program's standard input.
    pub fn stdin(mut self, fd: OwnedFd) -> Self {
        self.stdin = Some(fd);
        self
    }

    /// The program's standard output.
    pub fn stdout(mut self, fd: OwnedFd) -> Self {
        self.stdout = Some(fd);
        self
    }

    /// The program's standard error.
    pub fn stderr(mut self, fd: OwnedFd) -> Self {
        self.stderr = Some(fd);
        self
    }

    /// Whether the program is killed when the monitor exits (default true).
    pub fn exit_kill(mut self, yes: bool) -> Self {
        self.exit_kill = yes;
        self
    }
}

fn resolve(program: &Path) -> std::io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let c = dir.join(program);
        if let Ok(m) = std::fs::metadata(&c) {
            use std::os::unix::fs::PermissionsExt;
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(c);
            }
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::ENOENT))
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What the child does between fork and exec, prepared before the fork.
struct ChildSetup<'a> {
    go: RawFd,
    go_w: RawFd,
    err: RawFd,
    stdio: [Option<RawFd>; 3],
    inherit_fds: bool,
    filter: Option<&'a libc::sock_fprog>,
    no_new_privs: bool,
    prog: &'a CString,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
}

/// The child between fork and exec: only async-signal-safe calls.
fn child_after_fork(c: &ChildSetup<'_>) -> ! {
    // SAFETY: we are the single thread of a freshly forked child; dup2, read, execve, write,
    // prctl, seccomp and _exit are async-signal-safe, and every pointer refers to memory
    // prepared before fork.
    unsafe {
        // Our copy of the write end would keep the pipe open if the parent died.
        libc::close(c.go_w);
        // The Rust runtime ignores SIGPIPE in the monitor; the program starts with the default,
        // as std::process::Command gives its children. The monitor may block SIGCHLD while it
        // waits for its tracees: the program starts with nothing blocked.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for (target, fd) in c.stdio.iter().enumerate() {
            if let Some(fd) = fd {
                // dup2 onto itself keeps close-on-exec: clear it instead.
                let r = if *fd == target as i32 {
                    libc::fcntl(*fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(*fd, target as i32)
                };
                if r < 0 {
                    let e = *libc::__errno_location();
                    libc::write(c.err, (&e as *const i32).cast(), 4);
                    libc::_exit(127);
                }
            }
        }
        if !c.inherit_fds {
            // Everything above the standard streams closes at exec (our pipes included, as
            // they should); kernels before 5.11 lack the flag and keep them.
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC);
        }
        let mut b = 0u8;
        loop {
            let n = libc::read(c.go, (&mut b as *mut u8).cast(), 1);
            if n == 1 {
                break;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            libc::_exit(126);
        }
        if let Some(prog) = c.filter {
            if c.no_new_privs {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0);
            }
            const SECCOMP_SET_MODE_FILTER: u64 = 1;
            if libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                0u64,
                prog as *const libc::sock_fprog,
            ) != 0
            {
                let e = *libc::__errno_location();
                libc::write(c.err, (&e as *const i32).cast(), 4);
                libc::_exit(125);
            }
        }
        libc::execve(c.prog.as_ptr(), c.argv.as_ptr(), c.envp.as_ptr());
        let e = *libc::__errno_location();
        libc::write(c.err, (&e as *const i32).cast(), 4);
        libc::_exit(127);
    }
}

fn is_stop_signal(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

/// The thread ids of process `pid` (/proc/PID/task).
pub fn list_threads(pid: i32) -> Result<Vec<i32>> {
    let path = format!("/proc/{pid}/task");
    let err = |source| ProcError::Proc {
        path: path.clone(),
        source,
    };
    let mut tids = Vec::new();
    for e in std::fs::read_dir(&path).map_err(err)? {
        let e = e.map_err(err)?;
        if let Some(t) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
            tids.push(t);
        }
    }
    tids.sort_unstable();
    Ok(tids)
}

impl Tracee {
    /// Starts `cmd` and stops it before its first instruction (at the entry point of the
    /// dynamic loader or of a static program), all set for injections and register access.
    pub fn spawn(cmd: TraceeCommand) -> Result<Tracee> {
        let name = cmd.program.display().to_string();
        let spawn_err = |source| ProcError::Spawn {
            program: name.clone(),
            source,
        };
        let einval = || spawn_err(std::io::Error::from_raw_os_error(libc::EINVAL));
        let prog = resolve(&cmd.program).map_err(spawn_err)?;
        let cprog = CString::new(prog.as_os_str().as_bytes()).map_err(|_| einval())?;
        let cargs = cmd.argv_strings().map_err(|_| einval())?;
        let cenv = cmd.env_strings().map_err(|_| einval())?;
        let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = cenv.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let filter = cmd.seccomp.as_ref().map(|f| libc::sock_fprog {
            len: f.len() as u16,
            filter: f.as_ptr() as *mut libc::sock_filter,
        });
        let (go_r, go_w) = pipe().map_err(spawn_err)?;
        let (err_r, err_w) = pipe().map_err(spawn_err)?;
        // Never block on it: a child that died without writing its errno says nothing, and
        // other children forked meanwhile may hold the write end until they exec.
        // SAFETY: fcntl on our own descriptor.
        unsafe { libc::fcntl(err_r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        let stdio = [
            cmd.stdin.as_ref().map(|f| f.as_raw_fd()),
            cmd.stdout.as_ref().map(|f| f.as_raw_fd()),
            cmd.stderr.as_ref().map(|f| f.as_raw_fd()),
        ];
        let child = ChildSetup {
            go: go_r.as_raw_fd(),
            go_w: go_w.as_raw_fd(),
            err: err_w.as_raw_fd(),
            stdio,
            inherit_fds: cmd.inherit_fds,
            filter: filter.as_ref(),
            no_new_privs: cmd.no_new_privs,
            prog: &cprog,
            argv: &argv,
            envp: &envp,
        };
        // SAFETY: fork has no memory-safety preconditions; the child only runs
        // `child_after_fork`, which restricts itself to async-signal-safe calls.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(spawn_err(std::io::Error::last_os_error()));
        }
        if pid == 0 {
            child_after_fork(&child);
        }
        let opts = cmd.ptrace_options();
        drop((go_r, err_w, cmd.stdin, cmd.stdout, cmd.stderr));
        let tracee = Tracee::attach_spawned(pid, opts, &name)?;
        // SAFETY: writing one byte from a local to our pipe.
        if unsafe { libc::write(go_w.as_raw_fd(), [1u8].as_ptr().cast(), 1) } != 1 {
            return Err(spawn_err(std::io::Error::last_os_error()));
        }
        drop(go_w);
        tracee.await_exec(&name, Some(err_r.as_raw_fd()))?;
        tracing::debug!(pid, program = %prog.display(), "spawned under ptrace, stopped at entry");
        Ok(tracee)
    }

    /// Starts `cmd` in pid namespace `ns` as a child of its init — with process id `pid` there
    /// when given — and stops it before its first instruction. The program's standard streams
    /// are the init's (the monitor's when the namespace was made); `cmd`'s stdio settings
    /// must be unset.
    pub fn spawn_in(
        ns: &crate::ns::Namespace,
        cmd: TraceeCommand,
        pid: Option<i32>,
    ) -> Result<Tracee> {
        let name = cmd.program.display().to_string();
        let spawn_err = |source| ProcError::Spawn {
            program: name.clone(),
            source,
        };
        let einval = || spawn_err(std::io::Error::from_raw_os_error(libc::EINVAL));
        if cmd.stdin.is_some() || cmd.stdout.is_some() || cmd.stderr.is_some() {
            return Err(einval());
        }
        let prog = resolve(&cmd.program).map_err(spawn_err)?;
        let cprog = CString::new(prog.as_os_str().as_bytes()).map_err(|_| einval())?;
        let cargs = cmd.argv_strings().map_err(|_| einval())?;
        let cenv = cmd.env_strings().map_err(|_| einval())?;
        let (host, ns_pid) = ns.spawn(&crate::ns::SpawnRequest {
            pid,
            path: &cprog,
            argv: &cargs,
            env: &cenv,
            filter: cmd.seccomp.as_deref(),
            inherit_fds: cmd.inherit_fds,
            no_new_privs: cmd.no_new_privs,
        })?;
        let tracee = Tracee::attach_spawned(host, cmd.ptrace_options(), &name)?;
        ns.go(ns_pid)?;
        tracee.await_exec(&name, None)?;
        tracing::debug!(pid = host, ns_pid, program = %prog.display(), "spawned in the namespace under ptrace, stopped at entry");
        Ok(tracee)
    }

    /// A process that the tracer's PTRACE_O_TRACEFORK (or an injected clone) attached
    /// already ([`Notice::Child`]); it starts with a stop of its own, waited for like any.
    pub fn adopt(pid: i32) -> Tracee {
        let inner = Inner::new(pid, true);
        Tracee {
            inner: Rc::new(RefCell::new(inner)),
        }
    }

    /// Seizes our new child `pid`, still waiting to exec.
    fn attach_spawned(pid: i32, opts: u32, name: &str) -> Result<Tracee> {
        // From here on, dropping `tracee` kills and reaps the child.
        let tracee = Tracee {
            inner: Rc::new(RefCell::new(Inner::new(pid, true))),
        };
        if let Err(e) = sys::ptrace(Req::Seize(opts), pid) {
            // Not traced: kill and reap it here (Drop would wait as a tracer). A child killed
            // by someone else before we attached cannot be seized either: say so.
            let mut killed_first = None;
            for _ in 0..50 {
                killed_first = sys::wait(pid, true).ok().flatten();
                if killed_first.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = sys::kill(pid, libc::SIGKILL);
            let mut status = 0;
            if killed_first.is_none() {
                // SAFETY: reaping a child into a local (ours, or the namespace init's, which
                // reaps it otherwise: then this returns ECHILD at once).
                unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
            }
            let exit = Exit::Signal {
                sig: libc::SIGKILL,
                core: false,
            };
            tracee.inner.borrow_mut().exit = Some(exit);
            if let Some((Status::Killed { sig, core }, _)) = killed_first {
                return Err(ProcError::DiedBeforeExec {
                    program: name.to_string(),
                    exit: Exit::Signal { sig, core },
                });
            }
            return Err(ProcError::ptrace("SEIZE", pid, e));
        }
        Ok(tracee)
    }

    /// Waits for the seized child's exec and stops it at its first instruction. `err`: a pipe
    /// the child writes its errno to when exec fails.
    fn await_exec(&self, name: &str, err: Option<RawFd>) -> Result<()> {
        let mut i = self.inner.borrow_mut();
        let pid = i.pid;
        loop {
            let (st, raw) = i.wait_one(pid)?;
            match st {
                Status::Stopped {
                    event: sys::EVENT_EXEC,
                    ..
                } => {
                    // Registers at the exec stop are not final yet (the call's return value is
                    // stored after it): let the exec return and stop the thread on its way to
                    // the first instruction instead.
                    sys::ptrace(Req::Interrupt, pid)
                        .map_err(|e| ProcError::ptrace("INTERRUPT", pid, e))?;
                    sys::ptrace(Req::Cont(0), pid)
                        .map_err(|e| ProcError::ptrace("CONT", pid, e))?;
                    break;
                }
                Status::Stopped { event: 0, sig } => {
                    sys::ptrace(Req::Cont(sig), pid)
                        .map_err(|e| ProcError::ptrace("CONT", pid, e))?;
                }
                Status::Stopped { .. } => {
                    sys::ptrace(Req::Cont(0), pid)
                        .map_err(|e| ProcError::ptrace("CONT", pid, e))?;
                }
                Status::Exited(code) | Status::Killed { sig: code, .. } => {
                    i.thread_gone(pid, st);
                    let mut errno = [0u8; 4];
                    let n = match err {
                        // SAFETY: reading up to 4 bytes into a local buffer.
                        Some(fd) => unsafe { libc::read(fd, errno.as_mut_ptr().cast(), 4) },
                        None => 0,
                    };
                    if n == 4 {
                        let source = std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
                        return Err(ProcError::Spawn {
                            program: name.to_string(),
                            source,
                        });
                    }
                    if err.is_none() && matches!(st, Status::Exited(_)) && code >= 125 {
                        // The namespace's child reports a failed exec by its exit code.
                        return Err(ProcError::Spawn {
                            program: name.to_string(),
                            source: std::io::Error::other(format!(
                                "it could not be started (exit code {code}: {})",
                                match code {
                                    125 => "the seccomp filter was refused",
                                    126 => "the namespace's init went away",
                                    _ => "exec failed",
                                }
                            )),
                        });
                    }
                    return Err(ProcError::DiedBeforeExec {
                        program: name.to_string(),
                        exit: i.exit.expect("set by thread_gone"),
                    });
                }
                Status::Other => {
                    return Err(ProcError::Unexpected {
                        tid: pid,
                        what: "spawn",
                        status: raw,
                    })
                }
            }
        }
        i.threads[0].state = TState::Running;
        i.collect_stops()
    }

    /// Seizes running process `pid` (every thread) and stops it. Needs ptrace permission
    /// (same user and `kernel.yama.ptrace_scope` ≤ 1 with CAP_SYS_PTRACE, or ≤ 0 otherwise).
    pub fn seize(pid: i32) -> Result<Tracee> {
        let inner = Inner {
            pid,
            threads: vec![],
            exit: None,
            spawned: false,
            detached: false,
            syscall_insn: None,
            syscall_checked: None,
            patch_syscall: false,
            execs: 0,
            notices: vec![],
            stack_seen: None,
        };
        let tracee = Tracee {
            inner: Rc::new(RefCell::new(inner)),
        };
        {
            let mut i = tracee.inner.borrow_mut();
            // Threads created by not-yet-seized threads are not auto-attached: list again
            // until the list is stable.
            loop {
                let mut added = false;
                for tid in list_threads(pid)? {
                    if i.threads.iter().any(|t| t.tid == tid) {
                        continue;
                    }
                    match sys::ptrace(Req::Seize(sys::O_TRACEEXEC | sys::O_TRACECLONE), tid) {
                        Ok(_) => {
                            i.threads.push(Thread {
                                tid,
                                state: TState::Running,
                            });
                            added = true;
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => {
                            if i.threads.is_empty() {
                                i.detached = true;
                            }
                            return Err(ProcError::ptrace("SEIZE", tid, e));
                        }
                    }
                }
                if !added {
                    break;
                }
            }
            if i.threads.is_empty() {
                i.detached = true;
                return Err(ProcError::ptrace(
                    "SEIZE",
                    pid,
                    std::io::Error::from_raw_os_error(libc::ESRCH),
                ));
            }
            i.stop_all()?;
        }
        Ok(tracee)
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.inner.borrow().pid
    }

    /// The traced threads (the leader first).
    pub fn threads(&self) -> Vec<i32> {
        self.inner.borrow().threads.iter().map(|t| t.tid).collect()
    }

    /// Whether every thread is in a ptrace-stop collected by the monitor.
    pub fn is_stopped(&self) -> bool {
        let i = self.inner.borrow();
        !i.threads.is_empty()
            && i.threads
                .iter()
                .all(|t| matches!(t.state, TState::Stopped { .. }))
    }

    /// How many times the program replaced itself with execve since it was spawned or seized
    /// (its memory is then all new).
    pub fn execs(&self) -> u64 {
        self.inner.borrow().execs
    }

    /// How the process ended, once it has.
    pub fn exit(&self) -> Option<Exit> {
        self.inner.borrow().exit
    }

    /// Stops every thread (PTRACE_INTERRUPT, then waits for each). Signals that arrive meanwhile
    /// are delivered, not lost; threads created meanwhile are stopped too.
    pub fn stop_all(&self) -> Result<()> {
        self.inner.borrow_mut().stop_all()
    }

    /// Asks every thread to stop without waiting for it ([`Tracee::stop_all`] waits).
    pub fn interrupt_all(&self) -> Result<()> {
        self.inner.borrow_mut().interrupt_all()
    }

    /// Resumes every thread, delivering any signal held back by an injection; threads in a
    /// job-control stop stay stopped until SIGCONT.
    pub fn resume_all(&self) -> Result<()> {
        self.inner.borrow_mut().resume_all()
    }

    /// Lets the process run for `d` (resuming it if stopped) while passing its signals through
    /// and attaching its new threads; returns its exit if it ended meanwhile.
    pub fn run_for(&self, d: Duration) -> Result<Option<Exit>> {
        let mut i = self.inner.borrow_mut();
        if i.exit.is_some() {
            return Ok(i.exit);
        }
        i.resume_all()?;
        i.pump(Some(Instant::now() + d))?;
        Ok(i.exit)
    }

    /// Lets the process run until it exits; returns how it ended.
    pub fn wait_exit(&self) -> Result<Exit> {
        let mut i = self.inner.borrow_mut();
        if let Some(e) = i.exit {
            return Ok(e);
        }
        i.resume_all()?;
        i.pump(None)?;
        Ok(i.exit.expect("pump(None) returns at exit"))
    }

    /// Handles, without blocking, whatever its running threads did; whether anything happened.
    /// Events for the owner are kept for [`Tracee::take_notices`].
    pub fn poll(&self) -> Result<bool> {
        let mut i = self.inner.borrow_mut();
        if i.exit.is_some() {
            return Ok(false);
        }
        i.poll_once()
    }

    /// The events since the last call ([`Notice`]).
    pub fn take_notices(&self) -> Vec<Notice> {
        std::mem::take(&mut self.inner.borrow_mut().notices)
    }

    /// Resumes thread `tid`, stopped at a seccomp trap ([`Notice::Trap`]): its system call runs.
    pub fn resume_trapped(&self, tid: i32) -> Result<()> {
        let mut i = self.inner.borrow_mut();
        match i.threads.iter().find(|t| t.tid == tid).map(|t| t.state) {
            Some(TState::Stopped {
                how: StopHow::Seccomp,
                ..
            }) => i.cont(tid, 0),
            // Injected into meanwhile: its call is issued (and trapped) again on resume.
            Some(TState::Stopped { how, deliver }) => {
                let sig = if how == StopHow::Signal { deliver } else { 0 };
                i.cont(tid, sig)
            }
            _ => Ok(()),
        }
    }

    /// Sends SIGKILL and reaps every thread (also threads whose creation was never reported);
    /// returns how it ended, or `ProcError::NotEnding` when it has not ended within 10 s.
    pub fn kill(&self) -> Result<Exit> {
        self.inner.borrow_mut().kill()
    }

    /// Detaches from every thread (stopping them first), delivering held-back signals. The
    /// process continues untraced.
    pub fn detach(&self) -> Result<()> {
        self.inner.borrow_mut().detach()
    }

    pub(crate) fn check_stopped(&self, tid: i32) -> Result<()> {
        self.inner.borrow().check_stopped(tid)
    }

    /// Makes injections write a `syscall` instruction over the word at the thread's `rip` (and
    /// put it back afterwards) instead of using one found in the vdso or another executable
    /// mapping. That is the automatic fallback when none is found; it needs every thread
    /// stopped and leaves the patched page a private copy in the tracee.
    pub fn set_patch_syscall(&self, yes: bool) {
        self.inner.borrow_mut().patch_syscall = yes;
    }

    /// The thread injections and address-space changes use: the leader if alive, else the
    /// first thread. Fails unless the whole process is stopped.
    pub fn control_thread(&self) -> Result<i32> {
        let i = self.inner.borrow();
        if let Some(e) = i.exit {
            return Err(ProcError::Exited {
                pid: i.pid,
                exit: e,
            });
        }
        for t in &i.threads {
            if !matches!(t.state, TState::Stopped { .. }) {
                return Err(ProcError::NotStopped { tid: t.tid });
            }
        }
        i.threads
            .iter()
            .find(|t| t.tid == i.pid)
            .or(i.threads.first())
            .map(|t| t.tid)
            .ok_or(ProcError::Exited {
                pid: i.pid,
                exit: Exit::Code(0),
            })
    }

    /// General registers of stopped thread `tid`.
    pub fn regs(&self, tid: i32) -> Result<Regs> {
        self.check_stopped(tid)?;
        regs::get_regs(tid)
    }

    /// Sets the general registers of stopped thread `tid`.
    pub fn set_regs(&self, tid: i32, r: &Regs) -> Result<()> {
        self.check_stopped(tid)?;
        regs::set_regs(tid, r)
    }

    /// FP/SIMD state of stopped thread `tid`.
    pub fn fp(&self, tid: i32) -> Result<FpState> {
        self.check_stopped(tid)?;
        regs::get_fp(tid)
    }

    /// Sets the FP/SIMD state of stopped thread `tid`.
    pub fn set_fp(&self, tid: i32, fp: &FpState) -> Result<()> {
        self.check_stopped(tid)?;
        regs::set_fp(tid, fp)
    }

    /// All registers of stopped thread `tid`.
    pub fn thread_state(&self, tid: i32) -> Result<ThreadState> {
        self.check_stopped(tid)?;
        ThreadState::read(tid)
    }

    /// Sets all registers of stopped thread `tid` (FP/SIMD first, then the general ones).
    pub fn set_thread_state(&self, tid: i32, s: &ThreadState) -> Result<()> {
        self.check_stopped(tid)?;
        s.write(tid)
    }

    /// Reads the process's memory (stopped or not).
    pub fn read_mem(&self, addr: usize, buf: &mut [u8]) -> Result<()> {
        mem::read_mem(self.pid(), addr, buf)
    }

    /// Writes the process's memory (stopped or not; read-only pages too).
    pub fn write_mem(&self, addr: usize, data: &[u8]) -> Result<()> {
        mem::write_mem(self.pid(), addr, data)
    }

    /// The process's mappings.
    pub fn maps(&self) -> Result<Vec<MapEntry>> {
        read_maps(self.pid())
    }
}

impl Inner {
    /// A process with one (running) thread, `pid`.
    fn new(pid: i32, spawned: bool) -> Inner {
        Inner {
            pid,
            threads: vec![Thread {
                tid: pid,
                state: TState::Running,
            }],
            exit: None,
            spawned,
            detached: false,
            syscall_insn: None,
            syscall_checked: None,
            patch_syscall: false,
            execs: 0,
            notices: vec![],
            stack_seen: None,
        }
    }

    pub(crate) fn check_stopped(&self, tid: i32) -> Result<()> {
        if let Some(e) = self.exit {
            return Err(ProcError::Exited {
                pid: self.pid,
                exit: e,
            });
        }
        match self.threads.iter().find(|t| t.tid == tid) {
            None => Err(ProcError::NoSuchThread { pid: self.pid, tid }),
            Some(t) if matches!(t.state, TState::Stopped { .. }) => Ok(()),
            Some(_) => Err(ProcError::NotStopped { tid }),
        }
    }

    pub(crate) fn thread_mut(&mut self, tid: i32) -> Option<&mut Thread> {
        self.threads.iter_mut().find(|t| t.tid == tid)
    }

    pub(crate) fn exited_err(&self) -> ProcError {
        ProcError::Exited {
            pid: self.pid,
            exit: self.exit.unwrap_or(Exit::Code(0)),
        }
    }

    /// Waits for one thread's next status; ECHILD means it is gone without a status for us.
    ///
    /// Never blocks on a dead leader: a killed process reports its leader's exit only after
    /// every other thread's exit was collected, so while waiting, exited (zombie) threads are
    /// reaped.
    pub(crate) fn wait_one(&mut self, tid: i32) -> Result<(Status, i32)> {
        self.wait_reaping(tid, None)
            .map_err(|source| ProcError::Wait { tid, source })
    }

    /// `wait_one` with the OS error (ECHILD: gone without a status for us; `TimedOut` once
    /// `deadline` passed).
    fn wait_reaping(
        &mut self,
        tid: i32,
        deadline: Option<Instant>,
    ) -> std::io::Result<(Status, i32)> {
        // Most statuses come within a few yields. Past them, sleep until a SIGCHLD (blocked
        // meanwhile, so that one sent between a look and the sleep is not lost; the timeout
        // covers a signal another thread of the monitor took), looking for a dead leader
        // before each sleep rather than at every turn: reading /proc at every spin was a
        // fifth of the monitor's CPU at a 10 ms interval.
        const YIELDS: u32 = 16;
        const NAP_MAX: Duration = Duration::from_millis(1);
        let mut blocked = None;
        let mut nap = Duration::from_micros(20);
        let mut spins = 0u32;
        loop {
            if spins >= YIELDS && blocked.is_none() {
                blocked = Some(sys::SigchldBlocked::new());
            }
            if let Some(s) = sys::wait(tid, true)? {
                return Ok(s);
            }
            spins += 1;
            if spins <= YIELDS {
                std::thread::yield_now();
                continue;
            }
            if tid == self.pid && is_zombie(self.pid, tid) {
                // Every exited thread: the ones we know, and any whose clone we never saw.
                let mut others: Vec<i32> = self.threads.iter().map(|t| t.tid).collect();
                others.extend(list_threads(self.pid).unwrap_or_default());
                others.sort_unstable();
                others.dedup();
                others.retain(|&t| t != tid && is_zombie(self.pid, t));
                for t in others {
                    if let Ok(Some((Status::Exited(_) | Status::Killed { .. }, _))) =
                        sys::wait(t, false)
                    {
                        self.threads.retain(|x| x.tid != t);
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            sys::wait_sigchld(nap);
            nap = (nap * 2).min(NAP_MAX);
        }
    }

    /// A thread reported its end.
    pub(crate) fn thread_gone(&mut self, tid: i32, st: Status) {
        self.threads.retain(|t| t.tid != tid);
        if tid == self.pid {
            let exit = match st {
                Status::Exited(c) => Exit::Code(c),
                Status::Killed { sig, core } => Exit::Signal { sig, core },
                _ => Exit::Code(0),
            };
            tracing::debug!(pid = self.pid, %exit, "traced process ended");
            self.exit = Some(exit);
            // Every other thread has been reaped before the leader's status is reported; drop
            // whatever bookkeeping is left.
            for t in std::mem::take(&mut self.threads) {
                let _ = sys::wait(t.tid, true);
            }
        }
    }

    fn cont(&mut self, tid: i32, sig: i32) -> Result<()> {
        match sys::ptrace(Req::Cont(sig), tid) {
            Ok(_) => {}
            // Killed while stopped: its exit will be reported.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(ProcError::ptrace("CONT", tid, e)),
        }
        if let Some(t) = self.thread_mut(tid) {
            t.state = TState::Running;
        }
        Ok(())
    }

    /// Handles one wait status of thread `tid`.
    fn on_status(&mut self, tid: i32, st: Status, raw: i32, mode: Mode) -> Result<()> {
        match st {
            Status::Exited(_) | Status::Killed { .. } => self.thread_gone(tid, st),
            Status::Stopped {
                sig,
                event: sys::EVENT_STOP,
            } => {
                let group = is_stop_signal(sig);
                match mode {
                    Mode::Stopping => {
                        let how = if group {
                            StopHow::GroupStop(sig)
                        } else {
                            StopHow::Interrupt
                        };
                        if let Some(t) = self.thread_mut(tid) {
                            t.state = TState::Stopped { how, deliver: 0 };
                        }
                    }
                    Mode::Running if group => {
                        match sys::ptrace(Req::Listen, tid) {
                            Ok(_) => {}
                            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                            Err(e) => return Err(ProcError::ptrace("LISTEN", tid, e)),
                        }
                        if let Some(t) = self.thread_mut(tid) {
                            t.state = TState::Listening;
                        }
                    }
                    Mode::Running => self.cont(tid, 0)?,
                }
            }
            Status::Stopped { sig, event: 0 } => {
                // Signal-delivery-stop: deliver it now. When stopping, the pending interrupt
                // then stops the thread right after (before any instruction of the program).
                tracing::trace!(pid = self.pid, tid, sig, "passing signal through");
                self.cont(tid, sig)?;
            }
            Status::Stopped {
                event: sys::EVENT_SECCOMP,
                ..
            } => {
                if mode == Mode::Running {
                    // The owner decides before the call runs (and resumes the thread).
                    if let Some(t) = self.thread_mut(tid) {
                        t.state = TState::Stopped {
                            how: StopHow::Seccomp,
                            deliver: 0,
                        };
                    }
                    self.notices.push(Notice::Trap { tid });
                    return Ok(());
                }
                // Stopping: the call has not run; undo its entry so that the thread stops in a
                // clean state and issues the call again (and traps again) when resumed.
                self.rewind_syscall(tid)?;
                match sys::ptrace(Req::Interrupt, tid) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(ProcError::ptrace("INTERRUPT", tid, e)),
                }
                self.cont(tid, 0)?;
            }
            Status::Stopped {
                event: sys::EVENT_VFORK,
                ..
            } if mode == Mode::Stopping => {
                // Resumed now, the parent would wait for its child (in a sleep an interrupt
                // does not end) while we keep the child stopped: leave it in the event stop.
                self.on_new_task(tid, sys::EVENT_VFORK)?;
                if let Some(t) = self.thread_mut(tid) {
                    t.state = TState::Stopped {
                        how: StopHow::Vfork,
                        deliver: 0,
                    };
                }
            }
            Status::Stopped { event, .. } => {
                match event {
                    sys::EVENT_CLONE | sys::EVENT_FORK | sys::EVENT_VFORK => {
                        self.on_new_task(tid, event)?
                    }
                    sys::EVENT_EXEC => self.after_exec(),
                    _ => {
                        return Err(ProcError::Unexpected {
                            tid,
                            what: "waiting for the process",
                            status: raw,
                        })
                    }
                }
                // Event stops sit inside a system call whose registers are not final: never
                // treat them as "stopped"; when stopping, make sure an interrupt is pending so
                // the thread stops on its way back to the program.
                if mode == Mode::Stopping {
                    match sys::ptrace(Req::Interrupt, tid) {
                        Ok(_) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => return Err(ProcError::ptrace("INTERRUPT", tid, e)),
                    }
                }
                self.cont(tid, 0)?;
            }
            Status::Other => {
                return Err(ProcError::Unexpected {
                    tid,
                    what: "waiting for the process",
                    status: raw,
                })
            }
        }
        Ok(())
    }

    /// A clone, fork or vfork event of thread `tid`: a new thread of this process, or a new
    /// process for the owner.
    pub(crate) fn on_new_task(&mut self, tid: i32, event: u32) -> Result<()> {
        let new =
            sys::get_event_msg(tid).map_err(|e| ProcError::ptrace("GETEVENTMSG", tid, e))? as i32;
        let thread = event == sys::EVENT_CLONE && tgid_of(new) == Some(self.pid);
        if thread {
            if !self.threads.iter().any(|t| t.tid == new) {
                tracing::debug!(pid = self.pid, tid = new, "new thread traced");
                self.threads.push(Thread {
                    tid: new,
                    state: TState::Running,
                });
            }
        } else {
            tracing::debug!(
                pid = self.pid,
                child = new,
                event,
                "new child process traced"
            );
            self.notices.push(Notice::Child {
                pid: new,
                vfork: event == sys::EVENT_VFORK,
            });
        }
        Ok(())
    }

    /// Thread `tid` is stopped at a system call's entry (a seccomp stop) before the call ran:
    /// skip the call now and put the thread back on its `syscall` instruction with the call
    /// number in `rax`, so that resuming it issues the same call again.
    pub(crate) fn rewind_syscall(&mut self, tid: i32) -> Result<()> {
        let mut r = regs::get_regs(tid)?;
        let nr = r.orig_rax;
        r.orig_rax = u64::MAX; // skip the call
        r.rax = nr;
        r.rip -= 2; // `syscall` (0f 05) and `int 0x80` (cd 80) are two bytes
        regs::set_regs(tid, &r)
    }

    /// An exec event seen outside the wait loops (an injected exec).
    pub(crate) fn after_exec_event(&mut self) {
        self.after_exec()
    }

    /// After execve: one thread remains (with the process id); the others are gone.
    fn after_exec(&mut self) {
        let pid = self.pid;
        for t in self.threads.iter().filter(|t| t.tid != pid) {
            let _ = sys::wait(t.tid, true);
        }
        let state = self
            .threads
            .iter()
            .find(|t| t.tid == pid)
            .map(|t| t.state)
            .unwrap_or(TState::Running);
        self.threads = vec![Thread { tid: pid, state }];
        self.syscall_insn = None;
        self.execs += 1;
        tracing::debug!(pid, "traced process called execve");
    }

    pub(crate) fn stop_all(&mut self) -> Result<()> {
        self.interrupt_all()?;
        self.collect_stops()
    }

    /// Asks every thread that is not stopped to stop (PTRACE_INTERRUPT), without waiting.
    pub(crate) fn interrupt_all(&mut self) -> Result<()> {
        if self.exit.is_some() {
            return Err(self.exited_err());
        }
        for t in &self.threads {
            if !matches!(t.state, TState::Stopped { .. }) {
                match sys::ptrace(Req::Interrupt, t.tid) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(ProcError::ptrace("INTERRUPT", t.tid, e)),
                }
            }
        }
        Ok(())
    }

    /// Waits until every thread is in a ptrace-stop (an interrupt is pending for each running
    /// one).
    fn collect_stops(&mut self) -> Result<()> {
        loop {
            if self.exit.is_some() {
                return Err(self.exited_err());
            }
            // Non-leaders first: a traced leader's exit is reported only after the other
            // threads have been reaped.
            let pid = self.pid;
            let Some(tid) = self
                .threads
                .iter()
                .filter(|t| !matches!(t.state, TState::Stopped { .. }))
                .map(|t| t.tid)
                .min_by_key(|&t| (t == pid, t))
            else {
                break;
            };
            // The leader of a killed process reports only once its other threads are reaped,
            // even those we had seen stopped: wait for it reaping them.
            let got = if tid == pid {
                self.wait_reaping(tid, None).map(Some)
            } else {
                sys::wait(tid, false)
            };
            match got {
                Ok(Some((st, raw))) => self.on_status(tid, st, raw, Mode::Stopping)?,
                Ok(None) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    self.thread_gone(tid, Status::Exited(0));
                }
                Err(source) => return Err(ProcError::Wait { tid, source }),
            }
            // A thread added by a clone event is waited for like the others: it starts with
            // an interrupt-stop of its own.
        }
        tracing::trace!(
            pid = self.pid,
            threads = self.threads.len(),
            "all threads stopped"
        );
        Ok(())
    }

    pub(crate) fn resume_all(&mut self) -> Result<()> {
        if self.exit.is_some() {
            return Err(self.exited_err());
        }
        for i in 0..self.threads.len() {
            let Thread { tid, state } = self.threads[i];
            let TState::Stopped { how, deliver } = state else {
                continue;
            };
            match how {
                StopHow::GroupStop(_) => {
                    match sys::ptrace(Req::Listen, tid) {
                        Ok(_) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => return Err(ProcError::ptrace("LISTEN", tid, e)),
                    }
                    self.threads[i].state = TState::Listening;
                }
                StopHow::Signal => self.cont(tid, deliver)?,
                StopHow::Interrupt | StopHow::Seccomp | StopHow::Vfork => self.cont(tid, 0)?,
            }
        }
        Ok(())
    }

    /// Handles events of running threads until `deadline` (or the exit, without one).
    fn pump(&mut self, deadline: Option<Instant>) -> Result<()> {
        let mut nap = Duration::from_micros(50);
        while self.exit.is_none() {
            let waiting: Vec<i32> = self
                .threads
                .iter()
                .filter(|t| !matches!(t.state, TState::Stopped { .. }))
                .map(|t| t.tid)
                .collect();
            if waiting.is_empty() {
                // Every thread is in a ptrace-stop we collected: nothing can happen until
                // the monitor resumes them.
                if let Some(d) = deadline {
                    std::thread::sleep(d.saturating_duration_since(Instant::now()));
                }
                return Ok(());
            }
            let block = deadline.is_none() && waiting.len() == 1;
            let mut progressed = false;
            for tid in waiting {
                match sys::wait(tid, !block) {
                    Ok(Some((st, raw))) => {
                        self.on_status(tid, st, raw, Mode::Running)?;
                        progressed = true;
                    }
                    Ok(None) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                        self.thread_gone(tid, Status::Exited(0));
                        progressed = true;
                    }
                    Err(source) => return Err(ProcError::Wait { tid, source }),
                }
                if self.exit.is_some() {
                    return Ok(());
                }
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Ok(());
                }
            }
            if progressed {
                nap = Duration::from_micros(50);
            } else if !block {
                let mut sleep = nap;
                if let Some(d) = deadline {
                    sleep = sleep.min(d.saturating_duration_since(Instant::now()));
                }
                std::thread::sleep(sleep);
                nap = (nap * 2).min(Duration::from_millis(2));
            }
        }
        Ok(())
    }

    /// One look, without blocking, at every thread that is not stopped; whether anything
    /// happened.
    pub(crate) fn poll_once(&mut self) -> Result<bool> {
        let waiting: Vec<i32> = self
            .threads
            .iter()
            .filter(|t| !matches!(t.state, TState::Stopped { .. }))
            .map(|t| t.tid)
            .collect();
        let mut progressed = false;
        for tid in waiting {
            match sys::wait(tid, true) {
                Ok(Some((st, raw))) => {
                    self.on_status(tid, st, raw, Mode::Running)?;
                    progressed = true;
                }
                Ok(None) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    self.thread_gone(tid, Status::Exited(0));
                    progressed = true;
                }
                Err(source) => return Err(ProcError::Wait { tid, source }),
            }
            if self.exit.is_some() {
                return Ok(true);
            }
        }
        Ok(progressed)
    }

    fn kill(&mut self) -> Result<Exit> {
        if let Some(e) = self.exit {
            return Ok(e);
        }
        match sys::kill(self.pid, libc::SIGKILL) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(ProcError::ptrace("kill(SIGKILL)", self.pid, e)),
        }
        // Bounded, and never blocked on the leader: a thread the process created as it was
        // killed is traced (PTRACE_O_TRACECLONE) though its clone event never came, and its
        // zombie, which only we may reap, holds back the leader's exit status.
        let deadline = Instant::now() + KILL_BOUND;
        while self.exit.is_none() {
            let pid = self.pid;
            let Some(tid) = self
                .threads
                .iter()
                .map(|t| t.tid)
                .min_by_key(|&t| (t == pid, t))
            else {
                break;
            };
            match self.wait_reaping(tid, Some(deadline)) {
                Ok((st @ (Status::Exited(_) | Status::Killed { .. }), _)) => {
                    self.thread_gone(tid, st)
                }
                // A stop reported before the SIGKILL took effect: its exit follows.
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Err(ProcError::NotEnding {
                        pid,
                        what: "a traced process",
                        secs: KILL_BOUND.as_secs(),
                    });
                }
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    self.thread_gone(
                        tid,
                        Status::Killed {
                            sig: libc::SIGKILL,
                            core: false,
                        },
                    );
                }
                Err(source) => return Err(ProcError::Wait { tid, source }),
            }
        }
        Ok(self.exit.unwrap_or(Exit::Signal {
            sig: libc::SIGKILL,
            core: false,
        }))
    }

    fn detach(&mut self) -> Result<()> {
        if self.exit.is_some() || self.detached {
            return Ok(());
        }
        self.stop_all()?;
        for t in std::mem::take(&mut self.threads) {
            let sig = match t.state {
                TState::Stopped {
                    how: StopHow::Signal,
                    deliver,
                } => deliver,
                _ => 0,
            };
            match sys::ptrace(Req::Detach(sig), t.tid) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(ProcError::ptrace("DETACH", t.tid, e)),
            }
        }
        self.detached = true;
        tracing::debug!(pid = self.pid, "detached");
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.exit.is_some() || self.detached {
            return;
        }
        let r = if self.spawned {
            self.kill().map(|_| ())
        } else {
            self.detach()
        };
        if let Err(e) = r {
            tracing::warn!(pid = self.pid, "releasing the traced process failed: {e}");
        }
    }
}

/// The thread group (process) of task `tid`, from /proc.
fn tgid_of(tid: i32) -> Option<i32> {
    let s = sys::read_small(&format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether thread `tid` of `pid` has exited (a zombie, or gone).
fn is_zombie(pid: i32, tid: i32) -> bool {
    sys::read_small(&format!("/proc/{pid}/task/{tid}/stat"))
        .map_or(true, |s| ProcStat::parse(&s).has_exited())
}
