//! A tiny ptrace loop for the journal's tests and bench (the monitor's own loop is elsewhere):
//! fork, let the parent seize the child with PTRACE_O_TRACESECCOMP, install seccomp filters
//! in the child, exec the program; then hand every seccomp stop to a callback.

#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use kioku_proc::Regs;

const PTRACE_EVENT_SECCOMP: i32 = 7;
const PTRACE_O_TRACESECCOMP: i32 = 0x80;
const PTRACE_O_EXITKILL: i32 = 0x0010_0000;

/// A started program.
pub struct Child {
    pub pid: i32,
}

/// How to start it.
pub struct Spawn<'a> {
    pub program: &'a Path,
    pub args: Vec<String>,
    pub cwd: &'a Path,
    /// Filters to install (in order) before exec; none: run untrapped.
    pub filters: Vec<Vec<libc::sock_filter>>,
    /// Descriptors for 0, 1, 2 (None: /dev/null).
    pub stdio: [Option<i32>; 3],
    /// Whether to trace it (seize) at all.
    pub traced: bool,
}

/// Forks and execs. Everything the child does between fork and exec is a raw system call on
/// values prepared before the fork (the test process has other threads).
pub fn spawn(s: &Spawn) -> Child {
    let prog = CString::new(s.program.as_os_str().as_bytes()).unwrap();
    let mut argv_c: Vec<CString> = vec![prog.clone()];
    argv_c.extend(s.args.iter().map(|a| CString::new(a.as_str()).unwrap()));
    let mut argv: Vec<*const libc::c_char> = argv_c.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: [*const libc::c_char; 2] = [c"PATH=/usr/bin:/bin".as_ptr(), std::ptr::null()];
    let cwd = CString::new(s.cwd.as_os_str().as_bytes()).unwrap();
    let progs: Vec<libc::sock_fprog> = s
        .filters
        .iter()
        .map(|f| libc::sock_fprog {
            len: f.len() as u16,
            filter: f.as_ptr() as *mut libc::sock_filter,
        })
        .collect();
    let devnull = c"/dev/null";
    let mut pipe = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors.
    assert_eq!(
        unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    // SAFETY: fork; the child below only makes raw system calls on prepared values.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: async-signal-safe calls only, on memory prepared before the fork.
        unsafe {
            let mut b = 0u8;
            libc::read(pipe[0], (&mut b as *mut u8).cast(), 1);
            for (i, fd) in s.stdio.iter().enumerate() {
                let src = match fd {
                    Some(fd) => *fd,
                    None => libc::open(devnull.as_ptr(), libc::O_RDWR),
                };
                libc::dup2(src, i as i32);
            }
            if libc::chdir(cwd.as_ptr()) != 0 {
                libc::_exit(126);
            }
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            for p in &progs {
                if libc::syscall(libc::SYS_seccomp, 1, 0, p as *const libc::sock_fprog) != 0 {
                    libc::_exit(125);
                }
            }
            libc::execve(prog.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copy of the read end.
    unsafe { libc::close(pipe[0]) };
    if s.traced {
        let opts = (PTRACE_O_TRACESECCOMP | PTRACE_O_EXITKILL) as usize;
        // SAFETY: seizing our own child.
        let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0usize, opts) };
        assert_eq!(r, 0, "PTRACE_SEIZE: {}", std::io::Error::last_os_error());
    }
    // SAFETY: one byte releases the child; then our end closes.
    unsafe {
        libc::write(pipe[1], b"g".as_ptr().cast(), 1);
        libc::close(pipe[1]);
    }
    Child { pid }
}

/// What the loop does after a seccomp stop.
pub enum Next {
    /// Let the call run and continue.
    Continue,
    /// Let the call run, wait `micros`, then SIGKILL the program.
    KillAfter(u64),
    /// SIGKILL now (the call does not run).
    KillNow,
}

/// How the program ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Exited(i32),
    Signaled(i32),
}

impl Child {
    /// Runs the program to its end, calling `on_trap(pid, regs)` at every seccomp stop.
    pub fn run(&self, mut on_trap: impl FnMut(i32, &Regs) -> Next) -> End {
        let mut killing = false;
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
            assert_eq!(r, self.pid, "waitpid: {}", std::io::Error::last_os_error());
            if libc::WIFEXITED(status) {
                return End::Exited(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                return End::Signaled(libc::WTERMSIG(status));
            }
            let sig = libc::WSTOPSIG(status);
            let event = (status >> 16) & 0xff;
            let mut inject = 0;
            if sig == libc::SIGTRAP && event == PTRACE_EVENT_SECCOMP {
                if !killing {
                    let regs = kioku_proc::regs::get_regs(self.pid).unwrap();
                    match on_trap(self.pid, &regs) {
                        Next::Continue => {}
                        Next::KillNow => {
                            self.kill();
                            killing = true;
                        }
                        Next::KillAfter(us) => {
                            self.cont(0);
                            std::thread::sleep(std::time::Duration::from_micros(us));
                            self.kill();
                            killing = true;
                            continue;
                        }
                    }
                }
            } else if event == 0 && sig != libc::SIGTRAP && sig != libc::SIGSTOP {
                inject = sig; // a signal for the program
            }
            self.cont(inject);
        }
    }

    fn cont(&self, sig: i32) {
        // SAFETY: resuming our tracee (it may be gone already: ESRCH is fine).
        unsafe { libc::ptrace(libc::PTRACE_CONT, self.pid, 0usize, sig as usize) };
    }

    pub fn kill(&self) {
        // SAFETY: signalling our child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }
}

/// Compiles a C file from crates/run/tests/journal/ into `dir`.
pub fn compile(name: &str, dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/journal")
        .join(format!("{name}.c"));
    let out = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = std::process::Command::new(&cc)
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| {
            panic!("running the C compiler `{cc}` (install gcc: `make deps`): {e}")
        });
    assert!(st.success(), "compiling {}", src.display());
    out
}
