//! Thin, typed wrappers over ptrace(2) and waitpid(2), and the constants kioku-proc needs
//! (defined here so that older kernel headers do not matter).

use std::io;

use crate::regs::Regs;

/// PTRACE_O_* options.
pub const O_TRACEFORK: u32 = 0x0000_0002;
pub const O_TRACEVFORK: u32 = 0x0000_0004;
pub const O_TRACECLONE: u32 = 0x0000_0008;
pub const O_TRACEEXEC: u32 = 0x0000_0010;
pub const O_TRACESECCOMP: u32 = 0x0000_0080;
pub const O_EXITKILL: u32 = 0x0010_0000;

/// PTRACE_EVENT_* codes (`status >> 16` of a ptrace-stop).
pub const EVENT_FORK: u32 = 1;
pub const EVENT_VFORK: u32 = 2;
pub const EVENT_CLONE: u32 = 3;
pub const EVENT_EXEC: u32 = 4;
pub const EVENT_SECCOMP: u32 = 7;
pub const EVENT_STOP: u32 = 128;

/// Register set notes for PTRACE_GETREGSET.
pub const NT_PRFPREG: usize = 2;
pub const NT_X86_XSTATE: usize = 0x202;

/// Linux `-ERESTART*` codes: only visible to a tracer, never to the program.
pub const ERESTARTSYS: i64 = 512;
pub const ERESTARTNOINTR: i64 = 513;
pub const ERESTARTNOHAND: i64 = 514;
pub const ERESTART_RESTARTBLOCK: i64 = 516;

/// `si_code` of signals sent by kill(2) and tkill(2).
pub const SI_USER: i32 = 0;
pub const SI_TKILL: i32 = -6;

/// Requests that pass no pointer to memory of the monitor.
#[derive(Clone, Copy, Debug)]
pub enum Req {
    Seize(u32),
    Interrupt,
    Cont(i32),
    Listen,
    Detach(i32),
    SingleStep(i32),
    PeekData(usize),
    PokeData(usize, u64),
}

fn check(r: libc::c_long) -> io::Result<libc::c_long> {
    if r == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(0) {
            return Err(e);
        }
    }
    Ok(r)
}

/// Bumped whenever a traced thread may run program code (a resume, a detach, an injected
/// call that may change an address space): what was learned of a tracee's memory layout
/// while every thread stayed stopped holds as long as this is unchanged.
static RAN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The current [`RAN`] generation.
pub(crate) fn ran_generation() -> u64 {
    RAN.load(std::sync::atomic::Ordering::Acquire)
}

/// Notes that a tracee may have run or changed its address space.
pub(crate) fn note_ran() {
    RAN.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

/// Issues a request that passes only scalars (and addresses in the tracee).
pub fn ptrace(req: Req, tid: i32) -> io::Result<libc::c_long> {
    if matches!(
        req,
        Req::Cont(_) | Req::Listen | Req::Detach(_) | Req::Seize(_)
    ) {
        note_ran();
    }
    let (op, addr, data): (libc::c_uint, usize, usize) = match req {
        Req::Seize(opts) => (libc::PTRACE_SEIZE, 0, opts as usize),
        Req::Interrupt => (libc::PTRACE_INTERRUPT, 0, 0),
        Req::Cont(sig) => (libc::PTRACE_CONT, 0, sig as usize),
        Req::Listen => (libc::PTRACE_LISTEN, 0, 0),
        Req::Detach(sig) => (libc::PTRACE_DETACH, 0, sig as usize),
        Req::SingleStep(sig) => (libc::PTRACE_SINGLESTEP, 0, sig as usize),
        Req::PeekData(a) => (libc::PTRACE_PEEKDATA, a, 0),
        Req::PokeData(a, w) => (libc::PTRACE_POKEDATA, a, w as usize),
    };
    // PEEKDATA returns the word; -1 is a valid word, so errno decides.
    errno_clear();
    // SAFETY: every request here takes scalars or addresses in the tracee (not in our memory),
    // so the kernel never writes into the monitor's memory for them.
    let r = unsafe {
        libc::ptrace(
            op,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    check(r)
}

fn errno_clear() {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = 0 };
}

/// PTRACE_GETREGS.
pub fn get_regs(tid: i32) -> io::Result<Regs> {
    let mut r = Regs::default();
    // SAFETY: `Regs` has the layout of `struct user_regs_struct`, which the kernel fills.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut r as *mut Regs as *mut libc::c_void,
        )
    };
    check(rc).map(|_| r)
}

/// PTRACE_SETREGS.
pub fn set_regs(tid: i32, r: &Regs) -> io::Result<()> {
    // SAFETY: `Regs` has the layout of `struct user_regs_struct`, which the kernel only reads.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            r as *const Regs as *mut libc::c_void,
        )
    };
    check(rc).map(|_| ())
}

/// PTRACE_GETREGSET of note `nt` into `buf`; returns the bytes the kernel filled.
pub fn get_regset(tid: i32, nt: usize, buf: &mut [u8]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the iovec describes `buf`, which outlives the call; the kernel writes at most
    // `iov_len` bytes and updates `iov_len`.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            nt as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    check(rc).map(|_| iov.iov_len)
}

/// PTRACE_SETREGSET of note `nt` from `buf`.
pub fn set_regset(tid: i32, nt: usize, buf: &[u8]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: the iovec describes `buf`; the kernel only reads from it for SETREGSET.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGSET,
            tid,
            nt as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    check(rc).map(|_| ())
}

/// PTRACE_GETSIGINFO.
pub fn get_siginfo(tid: i32) -> io::Result<libc::siginfo_t> {
    // SAFETY: siginfo_t is plain data; all-zero is a valid value.
    let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel fills the siginfo_t we point at.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETSIGINFO,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut si as *mut libc::siginfo_t as *mut libc::c_void,
        )
    };
    check(rc).map(|_| si)
}

/// PTRACE_SETSIGINFO.
pub fn set_siginfo(tid: i32, si: &libc::siginfo_t) -> io::Result<()> {
    // SAFETY: the kernel reads the siginfo_t we point at.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_SETSIGINFO,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            si as *const libc::siginfo_t as *mut libc::c_void,
        )
    };
    check(rc).map(|_| ())
}

/// PTRACE_GETEVENTMSG.
pub fn get_event_msg(tid: i32) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: the kernel writes one unsigned long where we point.
    let rc = unsafe {
        libc::ptrace(
            libc::PTRACE_GETEVENTMSG,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut msg as *mut libc::c_ulong as *mut libc::c_void,
        )
    };
    check(rc).map(|_| msg as u64)
}

/// A decoded wait status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Exited(i32),
    Killed {
        sig: i32,
        core: bool,
    },
    /// A ptrace-stop: the signal in WSTOPSIG and the event in `status >> 16`.
    Stopped {
        sig: i32,
        event: u32,
    },
    /// Resumed by SIGCONT (only with WCONTINUED, which is not used).
    Other,
}

impl Status {
    pub fn decode(st: i32) -> Status {
        if libc::WIFEXITED(st) {
            Status::Exited(libc::WEXITSTATUS(st))
        } else if libc::WIFSIGNALED(st) {
            Status::Killed {
                sig: libc::WTERMSIG(st),
                core: libc::WCOREDUMP(st),
            }
        } else if libc::WIFSTOPPED(st) {
            Status::Stopped {
                sig: libc::WSTOPSIG(st),
                event: (st as u32) >> 16,
            }
        } else {
            Status::Other
        }
    }
}

/// waitpid(tid, __WALL [| WNOHANG]); `None` when nothing is pending (WNOHANG).
pub fn wait(tid: i32, nohang: bool) -> io::Result<Option<(Status, i32)>> {
    let flags = libc::__WALL | if nohang { libc::WNOHANG } else { 0 };
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes the status into `st`.
        let r = unsafe { libc::waitpid(tid, &mut st, flags) };
        if r > 0 {
            return Ok(Some((Status::decode(st), st)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// tgkill(2).
pub fn tgkill(pid: i32, tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: tgkill takes scalars.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, sig) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// rt_tgsigqueueinfo(2): queues a signal with a full siginfo (refused by the kernel for
/// si_code >= 0 and SI_TKILL unless sent to oneself).
pub fn tgsigqueueinfo(pid: i32, tid: i32, si: &libc::siginfo_t) -> io::Result<()> {
    // SAFETY: the kernel reads the siginfo_t we point at.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            pid,
            tid,
            si.si_signo,
            si as *const libc::siginfo_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// kill(2).
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes scalars.
    if unsafe { libc::kill(pid, sig) } != 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// SIGCHLD blocked in this thread while it waits for its tracees, so that a stop or exit
/// between two looks is not lost: it stays pending for `sigtimedwait`.
pub(crate) struct SigchldBlocked {
    old: libc::sigset_t,
}

impl SigchldBlocked {
    pub(crate) fn new() -> SigchldBlocked {
        // SAFETY: sigset manipulation on locals and the calling thread's own mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SigchldBlocked { old }
        }
    }
}

impl Drop for SigchldBlocked {
    fn drop(&mut self) {
        // SAFETY: restoring the calling thread's mask saved in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Sleeps until a SIGCHLD (a tracee stopped or ended) or `timeout`.
pub(crate) fn wait_sigchld(timeout: std::time::Duration) {
    // SAFETY: sigset manipulation on locals; sigtimedwait only reads and writes them.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
    }
}

/// A small /proc file (`status`, `stat`, `maps` of a small process) read whole: /proc files
/// say size 0, so `std::fs::read_to_string` reads them in doubling steps from 32 bytes (eight
/// `read`s and a `statx` for a `status`); this reads into a 4 KiB buffer first (one `read`
/// and the end-of-file `read`), growing it only for larger files. Checkpoint stops read
/// several of them per process.
pub fn read_small(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}
