//! The seccomp filters: which system calls stop in a `PTRACE_EVENT_SECCOMP` stop before they
//! run, so that the journal can record how to undo them.
//!
//! One trap costs about 10 µs, so the filter traps only what can change a file (and, for the
//! standard streams, what can make a later untrapped `write` overwrite data). `docs/journal.md`
//! lists the calls and conditions; `decode.rs` reads each of them.

/// System call numbers (x86-64), defined here: Debian 12's headers lack the newest ones.
pub mod nr {
    pub const WRITE: u32 = 1;
    pub const OPEN: u32 = 2;
    pub const CLOSE: u32 = 3;
    pub const LSEEK: u32 = 8;
    pub const IOCTL: u32 = 16;
    pub const PWRITE64: u32 = 18;
    pub const WRITEV: u32 = 20;
    pub const DUP: u32 = 32;
    pub const DUP2: u32 = 33;
    pub const SENDFILE: u32 = 40;
    pub const FCNTL: u32 = 72;
    pub const TRUNCATE: u32 = 76;
    pub const FTRUNCATE: u32 = 77;
    pub const RENAME: u32 = 82;
    pub const MKDIR: u32 = 83;
    pub const RMDIR: u32 = 84;
    pub const CREAT: u32 = 85;
    pub const LINK: u32 = 86;
    pub const UNLINK: u32 = 87;
    pub const SYMLINK: u32 = 88;
    pub const CHMOD: u32 = 90;
    pub const FCHMOD: u32 = 91;
    pub const CHOWN: u32 = 92;
    pub const FCHOWN: u32 = 93;
    pub const LCHOWN: u32 = 94;
    pub const UTIME: u32 = 132;
    pub const MKNOD: u32 = 133;
    pub const IO_SETUP: u32 = 206;
    pub const UTIMES: u32 = 235;
    pub const OPENAT: u32 = 257;
    pub const MKDIRAT: u32 = 258;
    pub const MKNODAT: u32 = 259;
    pub const FCHOWNAT: u32 = 260;
    pub const FUTIMESAT: u32 = 261;
    pub const UNLINKAT: u32 = 263;
    pub const RENAMEAT: u32 = 264;
    pub const LINKAT: u32 = 265;
    pub const SYMLINKAT: u32 = 266;
    pub const FCHMODAT: u32 = 268;
    pub const SPLICE: u32 = 275;
    pub const UTIMENSAT: u32 = 280;
    pub const FALLOCATE: u32 = 285;
    pub const DUP3: u32 = 292;
    pub const PWRITEV: u32 = 296;
    pub const OPEN_BY_HANDLE_AT: u32 = 304;
    pub const RENAMEAT2: u32 = 316;
    pub const COPY_FILE_RANGE: u32 = 326;
    pub const PWRITEV2: u32 = 328;
    pub const IO_URING_SETUP: u32 = 425;
    pub const CLOSE_RANGE: u32 = 436;
    pub const OPENAT2: u32 = 437;
    pub const FCHMODAT2: u32 = 452;
    // Calls that change the kernel state a checkpoint keeps (`STATE`).
    pub const RT_SIGACTION: u32 = 13;
    pub const ALARM: u32 = 37;
    pub const SETITIMER: u32 = 38;
    pub const SETUID: u32 = 105;
    pub const SETGID: u32 = 106;
    pub const SETREUID: u32 = 113;
    pub const SETREGID: u32 = 114;
    pub const SETRESUID: u32 = 117;
    pub const SETRESGID: u32 = 119;
    pub const SETFSUID: u32 = 122;
    pub const SETFSGID: u32 = 123;
    pub const CAPSET: u32 = 126;
    pub const SIGALTSTACK: u32 = 131;
    pub const PERSONALITY: u32 = 135;
    pub const PRCTL: u32 = 157;
    pub const SETRLIMIT: u32 = 160;
    pub const TIMER_CREATE: u32 = 222;
    pub const TIMER_SETTIME: u32 = 223;
    pub const TIMER_DELETE: u32 = 226;
    pub const PRLIMIT64: u32 = 302;
    pub const SCHED_SETSCHEDULER: u32 = 144;
    pub const SCHED_SETATTR: u32 = 314;
    pub const SET_ROBUST_LIST: u32 = 273;
    pub const RSEQ: u32 = 334;
    // Descriptor calls a kept table cannot see (`FDS`).
    pub const SOCKET: u32 = 41;
    pub const ACCEPT: u32 = 43;
    pub const SOCKETPAIR: u32 = 53;
    pub const FLOCK: u32 = 73;
    pub const ACCEPT4: u32 = 288;
    pub const PIDFD_GETFD: u32 = 438;
}

/// `__X32_SYSCALL_BIT`: system calls of the x32 ABI carry it.
pub const X32_BIT: u32 = 0x4000_0000;
pub const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// ioctls that overwrite a file's data with another's (reflinks).
pub const FICLONE: u32 = 0x4004_9409;
pub const FICLONERANGE: u32 = 0x4020_940d;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

/// Calls that always trap.
const ALWAYS: &[u32] = &[
    nr::PWRITE64,
    nr::PWRITEV,
    nr::PWRITEV2,
    nr::FTRUNCATE,
    nr::TRUNCATE,
    nr::FALLOCATE,
    nr::COPY_FILE_RANGE,
    nr::SENDFILE,
    nr::SPLICE,
    nr::CREAT,
    nr::OPENAT2,
    nr::RENAME,
    nr::RENAMEAT,
    nr::RENAMEAT2,
    nr::UNLINK,
    nr::UNLINKAT,
    nr::RMDIR,
    nr::MKDIR,
    nr::MKDIRAT,
    nr::LINK,
    nr::LINKAT,
    nr::SYMLINK,
    nr::SYMLINKAT,
    nr::MKNOD,
    nr::MKNODAT,
    // Attributes a restore puts back (mtime: `make` compares them).
    nr::CHMOD,
    nr::FCHMOD,
    nr::FCHMODAT,
    nr::FCHMODAT2,
    nr::CHOWN,
    nr::FCHOWN,
    nr::LCHOWN,
    nr::FCHOWNAT,
    nr::UTIME,
    nr::UTIMES,
    nr::FUTIMESAT,
    nr::UTIMENSAT,
];

/// Calls that change kernel state a checkpoint takes by injected calls (interval and POSIX
/// timers, resource limits, personality, the dumpable flag and parent-death signal, which a
/// change of credentials resets), trapped so that the monitor reads that state again only
/// after one ran ([`state_call`]). Conditional ones: `STATE_SET_ARG` and `prctl`.
const STATE: &[u32] = &[
    nr::ALARM,
    nr::SETITIMER,
    nr::TIMER_CREATE,
    nr::TIMER_SETTIME,
    nr::TIMER_DELETE,
    nr::SETRLIMIT,
    nr::PERSONALITY,
    nr::SETUID,
    nr::SETGID,
    nr::SETREUID,
    nr::SETREGID,
    nr::SETRESUID,
    nr::SETRESGID,
    nr::SETFSUID,
    nr::SETFSGID,
    nr::CAPSET,
    // A real-time policy sets the timer slack to 0 (and leaving one sets it back).
    nr::SCHED_SETSCHEDULER,
    nr::SCHED_SETATTR,
    // A thread's robust list and rseq area (set once as it starts, by the C library).
    nr::SET_ROBUST_LIST,
    nr::RSEQ,
];

/// State calls trapped only when they set something (their argument `.1` is not NULL):
/// `sigaction(sig, NULL, &old)`, `sigaltstack(NULL, &old)` and `getrlimit` (glibc's is
/// `prlimit64(0, res, NULL, &old)`) only read.
const STATE_SET_ARG: &[(u32, u32)] = &[
    (nr::RT_SIGACTION, 1),
    (nr::SIGALTSTACK, 0),
    (nr::PRLIMIT64, 2),
];

/// `prctl` options that change state a checkpoint keeps by injected calls.
pub const PRCTL_STATE: &[u32] = &[
    libc::PR_SET_PDEATHSIG as u32,
    libc::PR_SET_DUMPABLE as u32,
    libc::PR_SET_TIMERSLACK as u32,
    libc::PR_SET_CHILD_SUBREAPER as u32,
];

/// Descriptor calls the capture's kept descriptor table cannot see from outside, trapped so
/// that the monitor lists the tree's descriptors again only after one ran ([`fd_call`];
/// `fds::Cached`). A stop compares each kept descriptor with the process's own
/// (`kcmp(KCMP_FILE)` against the monitor's duplicate of the description, which it holds, so
/// a closed description's identity cannot be reused) and lists the numbers: a descriptor
/// opened, closed or replaced by a new description (`open`, `close`, `pipe`, `memfd_create`…)
/// is found without a trap. What those checks cannot see, and is trapped: a number given back
/// the description it held before with another close-on-exec flag (`dup*`, `fcntl(F_DUPFD*)`,
/// `pidfd_getfd`, a descriptor received over a socket made since — `socket`, `socketpair`,
/// `accept*`: a socket in the table makes every stop survey anyway), a close-on-exec flag set
/// (`fcntl(F_SETFD)`, `ioctl(FIOCLEX)`, `close_range(CLOSE_RANGE_CLOEXEC)`), and locks
/// (`flock`, `fcntl` locks and leases: a table holding a lock is not kept, since a `close`
/// of any descriptor of the file releases a POSIX lock). Conditional ones: `FCNTL_FDS`,
/// `IOCTL_FDS`.
const FDS: &[u32] = &[
    nr::DUP,
    nr::DUP2,
    nr::DUP3,
    nr::CLOSE_RANGE,
    nr::FLOCK,
    nr::SOCKET,
    nr::SOCKETPAIR,
    nr::ACCEPT,
    nr::ACCEPT4,
    nr::PIDFD_GETFD,
];

/// `fcntl` commands that make a descriptor, set its close-on-exec flag or take a lock (`F_GET*`
/// and `F_SETFL` pass: a stop reads status flags through its duplicate).
pub const FCNTL_FDS: &[u32] = &[
    libc::F_DUPFD as u32,
    libc::F_DUPFD_CLOEXEC as u32,
    libc::F_SETFD as u32,
    libc::F_SETLK as u32,
    libc::F_SETLKW as u32,
    libc::F_OFD_SETLK as u32,
    libc::F_OFD_SETLKW as u32,
    libc::F_SETLEASE as u32,
];

/// `ioctl`s that set or clear a descriptor's close-on-exec flag.
pub const IOCTL_FDS: &[u32] = &[0x5451 /* FIOCLEX */, 0x5450 /* FIONCLEX */];

/// Whether system call `nr` with arguments `args`, stopped by the filter, may make, close or
/// change a descriptor (see [`FDS`]). Independent of [`state_call`] and [`journal_call`]: an
/// `open` with `O_TRUNC` is both a file change and a new descriptor.
pub fn fd_call(nr: u64, args: [u64; 6]) -> bool {
    let Ok(n) = u32::try_from(nr) else {
        return false;
    };
    FDS.contains(&n)
        || (n == nr::FCNTL
            && FCNTL_FDS
                .iter()
                .any(|&c| u64::from(c) == args[1] & 0xffff_ffff))
        || (n == nr::IOCTL
            && IOCTL_FDS
                .iter()
                .any(|&c| u64::from(c) == args[1] & 0xffff_ffff))
}

/// Whether system call `nr` with arguments `args`, stopped by the filters, is one the file
/// journal records: what the filter would trap without the capture's own traps, or what the
/// escalation filter traps (writes to the standard streams; only an escalated process has it,
/// so in another such a call never stops).
pub fn journal_call(nr: u64, args: [u64; 6]) -> bool {
    static JOURNAL_ONLY: std::sync::OnceLock<Vec<libc::sock_filter>> = std::sync::OnceLock::new();
    static ESCALATION: std::sync::OnceLock<Vec<libc::sock_filter>> = std::sync::OnceLock::new();
    let Ok(n) = u32::try_from(nr) else {
        return false;
    };
    let traps =
        |prog: &[libc::sock_filter]| evaluate(prog, AUDIT_ARCH_X86_64, n, args) == Action::Trace;
    traps(JOURNAL_ONLY.get_or_init(|| build(false)))
        || traps(ESCALATION.get_or_init(escalation_filter))
}

/// Whether system call `nr` with arguments `args`, stopped by the filter, is one of the calls
/// that change kernel state the checkpoint keeps (not a file change for the journal).
pub fn state_call(nr: u64, args: [u64; 6]) -> bool {
    let Ok(n) = u32::try_from(nr) else {
        return false;
    };
    STATE.contains(&n)
        || STATE_SET_ARG
            .iter()
            .any(|&(c, i)| c == n && args[i as usize] != 0)
        || (n == nr::PRCTL && PRCTL_STATE.iter().any(|&o| u64::from(o) == args[0]))
}

/// Emits the test of one conditional call: jump to the first label (trap) or the second
/// (allow).
type Block = fn(&mut Asm, Label, Label);

/// A classic BPF program under construction, with forward jumps to labels.
struct Asm {
    code: Vec<libc::sock_filter>,
    /// (instruction, label, is_true_branch)
    fixups: Vec<(usize, usize, bool)>,
    labels: Vec<Option<usize>>,
}

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

#[derive(Clone, Copy)]
struct Label(usize);

impl Asm {
    fn new() -> Asm {
        Asm {
            code: Vec::new(),
            fixups: Vec::new(),
            labels: Vec::new(),
        }
    }
    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }
    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.code.len());
    }
    fn load(&mut self, off: u32) {
        self.code.push(libc::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: off,
        });
    }
    fn ret(&mut self, k: u32) {
        self.code.push(libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k,
        });
    }
    /// A conditional jump: to `t` when true, else to `f` (None: the next instruction).
    fn jump(&mut self, code: u16, k: u32, t: Option<Label>, f: Option<Label>) {
        let at = self.code.len();
        self.code.push(libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
        if let Some(t) = t {
            self.fixups.push((at, t.0, true));
        }
        if let Some(f) = f {
            self.fixups.push((at, f.0, false));
        }
    }
    fn finish(mut self) -> Vec<libc::sock_filter> {
        for (at, label, t) in self.fixups {
            let target = self.labels[label].expect("label bound");
            let off = target - at - 1;
            let off = u8::try_from(off).expect("BPF jump within 255 instructions");
            if t {
                self.code[at].jt = off;
            } else {
                self.code[at].jf = off;
            }
        }
        self.code
    }
}

/// The filter the root process installs before it runs (inherited by every descendant across
/// fork and exec).
pub fn filter() -> Vec<libc::sock_filter> {
    build(true)
}

/// The filter: the journal's traps, and with `watch` the capture's (kernel state,
/// descriptors).
fn build(watch: bool) -> Vec<libc::sock_filter> {
    let mut a = Asm::new();
    let (allow, trace, enosys) = (a.label(), a.label(), a.label());
    let not_x86_64 = a.label();
    a.load(OFF_ARCH);
    a.jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, None, Some(not_x86_64));
    a.load(OFF_NR);
    a.jump(BPF_JSET_K, X32_BIT, Some(trace), None);
    a.jump(BPF_JEQ_K, nr::IO_URING_SETUP, Some(enosys), None);
    a.jump(BPF_JEQ_K, nr::IO_SETUP, Some(enosys), None);
    for &n in ALWAYS {
        a.jump(BPF_JEQ_K, n, Some(trace), None);
    }
    if watch {
        for &n in FDS {
            a.jump(BPF_JEQ_K, n, Some(trace), None);
        }
        // fcntl and ioctl by their command (A holds the number after each).
        for (n, cmds) in [(nr::FCNTL, FCNTL_FDS), (nr::IOCTL, IOCTL_FDS)] {
            let (here, next) = (a.label(), a.label());
            a.jump(BPF_JEQ_K, n, Some(here), Some(next));
            a.bind(here);
            a.load(arg_lo(1));
            for &c in cmds {
                a.jump(BPF_JEQ_K, c, Some(trace), None);
            }
            a.bind(next);
            a.load(OFF_NR);
        }
    }
    // Conditional calls: each block reloads the number it may fall back to (A holds the
    // number on entry to every block).
    let blocks: [(u32, Block); 11] = [
        (nr::WRITE, fd_at_least_3),
        (nr::WRITEV, fd_at_least_3),
        (nr::OPEN, |a, t, f| flags_create_or_trunc(a, 1, t, f)),
        (nr::OPENAT, |a, t, f| flags_create_or_trunc(a, 2, t, f)),
        (nr::OPEN_BY_HANDLE_AT, |a, t, f| {
            a.load(arg_lo(2));
            a.jump(BPF_JSET_K, libc::O_TRUNC as u32, Some(t), Some(f));
        }),
        (nr::LSEEK, |a, t, f| arg_at_most_2(a, 0, t, f)),
        (nr::CLOSE, |a, t, f| arg_at_most_2(a, 0, t, f)),
        (nr::CLOSE_RANGE, |a, t, f| arg_at_most_2(a, 0, t, f)),
        (nr::DUP, |a, t, f| arg_at_most_2(a, 0, t, f)),
        (nr::FCNTL, |a, t, f| {
            // fcntl(fd <= 2, F_DUPFD or F_DUPFD_CLOEXEC)
            let check_cmd = a.label();
            a.load(arg_lo(0));
            a.jump(BPF_JGE_K, 3, Some(f), Some(check_cmd));
            a.bind(check_cmd);
            a.load(arg_lo(1));
            a.jump(BPF_JEQ_K, libc::F_DUPFD as u32, Some(t), None);
            a.jump(BPF_JEQ_K, libc::F_DUPFD_CLOEXEC as u32, Some(t), Some(f));
        }),
        (nr::IOCTL, |a, t, f| {
            a.load(arg_lo(1));
            a.jump(BPF_JEQ_K, FICLONE, Some(t), None);
            a.jump(BPF_JEQ_K, FICLONERANGE, Some(t), Some(f));
        }),
    ];
    for (n, block) in blocks {
        let (here, next) = (a.label(), a.label());
        a.jump(BPF_JEQ_K, n, Some(here), Some(next));
        a.bind(here);
        block(&mut a, trace, allow);
        a.bind(next);
        a.load(OFF_NR);
    }
    // dup2/dup3: either descriptor <= 2.
    for n in [nr::DUP2, nr::DUP3] {
        let (here, next) = (a.label(), a.label());
        a.jump(BPF_JEQ_K, n, Some(here), Some(next));
        a.bind(here);
        let second = a.label();
        a.load(arg_lo(0));
        a.jump(BPF_JGE_K, 3, Some(second), Some(trace));
        a.bind(second);
        arg_at_most_2(&mut a, 1, trace, allow);
        a.bind(next);
        a.load(OFF_NR);
    }
    if !watch {
        a.ret(SECCOMP_RET_ALLOW);
    }
    // Kernel state (A holds the number).
    for &n in STATE {
        a.jump(BPF_JEQ_K, n, Some(trace), None);
    }
    for &(n, i) in STATE_SET_ARG {
        let (here, next) = (a.label(), a.label());
        a.jump(BPF_JEQ_K, n, Some(here), Some(next));
        a.bind(here);
        let high = a.label();
        a.load(arg_lo(i));
        a.jump(BPF_JEQ_K, 0, Some(high), Some(trace));
        a.bind(high);
        a.load(arg_lo(i) + 4);
        a.jump(BPF_JEQ_K, 0, Some(allow), Some(trace));
        a.bind(next);
        a.load(OFF_NR);
    }
    let not_prctl = a.label();
    a.jump(BPF_JEQ_K, nr::PRCTL, None, Some(not_prctl));
    a.load(arg_lo(0));
    for &o in PRCTL_STATE {
        a.jump(BPF_JEQ_K, o, Some(trace), None);
    }
    a.bind(not_prctl);
    a.ret(SECCOMP_RET_ALLOW);
    a.bind(allow);
    a.ret(SECCOMP_RET_ALLOW);
    a.bind(trace);
    a.ret(SECCOMP_RET_TRACE);
    a.bind(enosys);
    a.ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    // Another ABI (i386 through int 0x80): its numbers differ, so none of the above would
    // catch its file calls. Refused rather than let through unjournaled.
    a.bind(not_x86_64);
    a.ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    a.finish()
}

/// The filter stacked on a process whose standard streams may overwrite data: it also traps
/// write and writev on descriptors 0–2. Other calls are left to the first filter.
pub fn escalation_filter() -> Vec<libc::sock_filter> {
    let mut a = Asm::new();
    let (allow, trace) = (a.label(), a.label());
    a.load(OFF_ARCH);
    a.jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, None, Some(allow));
    a.load(OFF_NR);
    let check = a.label();
    a.jump(BPF_JEQ_K, nr::WRITE, Some(check), None);
    a.jump(BPF_JEQ_K, nr::WRITEV, Some(check), Some(allow));
    a.bind(check);
    arg_at_most_2(&mut a, 0, trace, allow);
    a.bind(allow);
    a.ret(SECCOMP_RET_ALLOW);
    a.bind(trace);
    a.ret(SECCOMP_RET_TRACE);
    a.finish()
}

fn fd_at_least_3(a: &mut Asm, t: Label, f: Label) {
    a.load(arg_lo(0));
    a.jump(BPF_JGE_K, 3, Some(t), Some(f));
}

fn arg_at_most_2(a: &mut Asm, i: u32, t: Label, f: Label) {
    a.load(arg_lo(i));
    a.jump(BPF_JGE_K, 3, Some(f), Some(t));
}

fn flags_create_or_trunc(a: &mut Asm, i: u32, t: Label, f: Label) {
    a.load(arg_lo(i));
    a.jump(
        BPF_JSET_K,
        (libc::O_CREAT | libc::O_TRUNC) as u32,
        Some(t),
        Some(f),
    );
}

/// What a filter decides, as an enum (for tests and for the interpreter below).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Allow,
    Trace,
    Errno(u32),
    Other(u32),
}

/// Runs a filter on one `seccomp_data` (a plain interpreter of the instructions the filters
/// above use), so tests can check the decision for every system call number without a kernel.
pub fn evaluate(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> Action {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&nr.to_le_bytes());
    data[4..8].copy_from_slice(&arch.to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let ins = prog[pc];
        match ins.code {
            BPF_LD_W_ABS => {
                let k = ins.k as usize;
                acc = u32::from_le_bytes(data[k..k + 4].try_into().expect("4"));
                pc += 1;
            }
            BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                let taken = match ins.code {
                    BPF_JEQ_K => acc == ins.k,
                    BPF_JGE_K => acc >= ins.k,
                    _ => acc & ins.k != 0,
                };
                pc += 1 + if taken { ins.jt } else { ins.jf } as usize;
            }
            BPF_RET_K => {
                return match ins.k & 0xffff_0000 {
                    SECCOMP_RET_ALLOW => Action::Allow,
                    SECCOMP_RET_TRACE => Action::Trace,
                    SECCOMP_RET_ERRNO => Action::Errno(ins.k & 0xffff),
                    _ => Action::Other(ins.k),
                }
            }
            c => panic!("instruction {c:#x} not interpreted"),
        }
    }
}

/// Installs `prog` in the calling thread (`SECCOMP_SET_MODE_FILTER`; `tsync`: in all its
/// threads). The caller must have set `PR_SET_NO_NEW_PRIVS` or hold CAP_SYS_ADMIN. For tests
/// and for code that runs in the program (a forked child before exec).
pub fn install(prog: &[libc::sock_filter], tsync: bool) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    const SECCOMP_SET_MODE_FILTER: u64 = 1;
    const SECCOMP_FILTER_FLAG_TSYNC: u64 = 1;
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            if tsync { SECCOMP_FILTER_FLAG_TSYNC } else { 0 },
            &fprog as *const libc::sock_fprog,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The filter as bytes (`struct sock_filter` array), e.g. to place in the program's memory
/// for an injected `seccomp` call.
pub fn to_bytes(prog: &[libc::sock_filter]) -> Vec<u8> {
    let mut b = Vec::with_capacity(prog.len() * 8);
    for i in prog {
        b.extend_from_slice(&i.code.to_le_bytes());
        b.push(i.jt);
        b.push(i.jf);
        b.extend_from_slice(&i.k.to_le_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(nr: u32, args: [u64; 6]) -> Action {
        evaluate(&filter(), AUDIT_ARCH_X86_64, nr, args)
    }

    /// The journal's own decisions (the filter without the capture's traps).
    fn journal_eval(nr: u32, args: [u64; 6]) -> Action {
        evaluate(&build(false), AUDIT_ARCH_X86_64, nr, args)
    }

    #[test]
    fn always_trapped_calls_trap_whatever_their_arguments() {
        for &n in ALWAYS {
            assert_eq!(eval(n, [0; 6]), Action::Trace, "nr {n}");
            assert_eq!(eval(n, [u64::MAX; 6]), Action::Trace, "nr {n}");
        }
    }

    #[test]
    fn everything_else_is_allowed() {
        let conditional = [
            nr::WRITE,
            nr::WRITEV,
            nr::OPEN,
            nr::OPENAT,
            nr::OPEN_BY_HANDLE_AT,
            nr::LSEEK,
            nr::CLOSE,
            nr::CLOSE_RANGE,
            nr::DUP,
            nr::DUP2,
            nr::DUP3,
            nr::FCNTL,
            nr::IOCTL,
            nr::IO_SETUP,
            nr::IO_URING_SETUP,
        ];
        for n in 0..600u32 {
            if ALWAYS.contains(&n)
                || conditional.contains(&n)
                || FDS.contains(&n)
                || STATE.contains(&n)
                || n == nr::PRLIMIT64
            {
                continue;
            }
            // Arguments that would make a conditional call trap must not matter here.
            assert_eq!(eval(n, [0, 0, 0o1100, 0, 0, 0]), Action::Allow, "nr {n}");
        }
    }

    #[test]
    fn conditions() {
        use Action::*;
        assert_eq!(journal_eval(nr::WRITE, [1, 0, 5, 0, 0, 0]), Allow);
        assert_eq!(journal_eval(nr::WRITE, [3, 0, 5, 0, 0, 0]), Trace);
        assert_eq!(journal_eval(nr::WRITEV, [2, 0, 1, 0, 0, 0]), Allow);
        assert_eq!(journal_eval(nr::WRITEV, [7, 0, 1, 0, 0, 0]), Trace);
        let (c, t) = (libc::O_CREAT as u64, libc::O_TRUNC as u64);
        assert_eq!(
            journal_eval(nr::OPEN, [0, libc::O_RDWR as u64, 0, 0, 0, 0]),
            Allow
        );
        assert_eq!(journal_eval(nr::OPEN, [0, c, 0, 0, 0, 0]), Trace);
        assert_eq!(journal_eval(nr::OPEN, [0, t, 0, 0, 0, 0]), Trace);
        assert_eq!(
            journal_eval(nr::OPENAT, [0, c | t, libc::O_RDONLY as u64, 0, 0, 0]),
            Allow
        );
        assert_eq!(journal_eval(nr::OPENAT, [0, 0, c, 0, 0, 0]), Trace);
        assert_eq!(
            journal_eval(nr::OPENAT, [0, 0, t | libc::O_WRONLY as u64, 0, 0, 0]),
            Trace
        );
        assert_eq!(
            journal_eval(nr::OPEN_BY_HANDLE_AT, [0, 0, t, 0, 0, 0]),
            Trace
        );
        assert_eq!(
            journal_eval(nr::OPEN_BY_HANDLE_AT, [0, 0, 0, 0, 0, 0]),
            Allow
        );
        for n in [nr::LSEEK, nr::CLOSE, nr::CLOSE_RANGE, nr::DUP] {
            assert_eq!(journal_eval(n, [2, 0, 0, 0, 0, 0]), Trace, "nr {n}");
            assert_eq!(journal_eval(n, [3, 0, 0, 0, 0, 0]), Allow, "nr {n}");
        }
        for n in [nr::DUP2, nr::DUP3] {
            assert_eq!(journal_eval(n, [5, 1, 0, 0, 0, 0]), Trace);
            assert_eq!(journal_eval(n, [1, 5, 0, 0, 0, 0]), Trace);
            assert_eq!(journal_eval(n, [5, 6, 0, 0, 0, 0]), Allow);
        }
        let dupfd = libc::F_DUPFD as u64;
        assert_eq!(journal_eval(nr::FCNTL, [1, dupfd, 0, 0, 0, 0]), Trace);
        assert_eq!(
            journal_eval(nr::FCNTL, [1, libc::F_DUPFD_CLOEXEC as u64, 0, 0, 0, 0]),
            Trace
        );
        assert_eq!(
            journal_eval(nr::FCNTL, [1, libc::F_GETFL as u64, 0, 0, 0, 0]),
            Allow
        );
        assert_eq!(journal_eval(nr::FCNTL, [4, dupfd, 0, 0, 0, 0]), Allow);
        assert_eq!(
            journal_eval(nr::IOCTL, [4, FICLONE as u64, 0, 0, 0, 0]),
            Trace
        );
        assert_eq!(
            journal_eval(nr::IOCTL, [4, FICLONERANGE as u64, 0, 0, 0, 0]),
            Trace
        );
        assert_eq!(
            journal_eval(nr::IOCTL, [1, libc::TCGETS, 0, 0, 0, 0]),
            Allow
        );
        assert_eq!(
            journal_eval(nr::IO_URING_SETUP, [0; 6]),
            Errno(libc::ENOSYS as u32)
        );
        assert_eq!(
            journal_eval(nr::IO_SETUP, [0; 6]),
            Errno(libc::ENOSYS as u32)
        );
        // x32: every call traps; another architecture: refused.
        assert_eq!(journal_eval(X32_BIT | 39, [0; 6]), Trace);
        assert_eq!(
            evaluate(&build(false), 0x4000_0003, nr::WRITE, [1, 0, 0, 0, 0, 0]),
            Errno(libc::ENOSYS as u32)
        );
    }

    #[test]
    fn state_changes_trap_and_state_reads_do_not() {
        use Action::*;
        for &n in STATE {
            assert_eq!(eval(n, [0; 6]), Trace, "nr {n}");
            assert!(state_call(n as u64, [0; 6]), "nr {n}");
        }
        for &(n, i) in STATE_SET_ARG {
            let mut set = [0u64; 6];
            set[i as usize] = 0x7fff_0000_1000;
            assert_eq!(eval(n, set), Trace, "nr {n} setting");
            assert!(state_call(n as u64, set));
            set[i as usize] = 1 << 40;
            assert_eq!(eval(n, set), Trace, "nr {n}: a pointer above 4 GiB");
            assert_eq!(eval(n, [0, 0, 0, 0x1000, 0, 0]), Allow, "nr {n} reading");
            assert!(!state_call(n as u64, [0, 0, 0, 0x1000, 0, 0]));
        }
        for &o in PRCTL_STATE {
            assert_eq!(eval(nr::PRCTL, [o as u64, 1, 0, 0, 0, 0]), Trace);
            assert!(state_call(nr::PRCTL as u64, [o as u64, 1, 0, 0, 0, 0]));
        }
        for o in [
            libc::PR_GET_PDEATHSIG,
            libc::PR_GET_DUMPABLE,
            libc::PR_SET_NAME,
            libc::PR_GET_TIMERSLACK,
        ] {
            assert_eq!(
                eval(nr::PRCTL, [o as u64, 0, 0, 0, 0, 0]),
                Allow,
                "prctl {o}"
            );
            assert!(!state_call(nr::PRCTL as u64, [o as u64, 0, 0, 0, 0, 0]));
        }
        // File calls are the journal's, not state calls.
        assert!(!state_call(nr::PWRITE64 as u64, [3, 0, 0, 0, 0, 0]));
        // A read-only call of the same family passes.
        assert_eq!(eval(39 /* getpid */, [0; 6]), Allow);
    }

    #[test]
    fn descriptor_changes_trap_and_reads_do_not() {
        use Action::*;
        for &n in FDS {
            assert_eq!(eval(n, [7, 0, 0, 0, 0, 0]), Trace, "nr {n}");
            assert!(fd_call(n as u64, [7, 0, 0, 0, 0, 0]), "nr {n}");
        }
        for &c in FCNTL_FDS {
            assert_eq!(
                eval(nr::FCNTL, [7, c as u64, 0, 0, 0, 0]),
                Trace,
                "fcntl {c}"
            );
            assert!(fd_call(nr::FCNTL as u64, [7, c as u64, 0, 0, 0, 0]));
        }
        for &c in IOCTL_FDS {
            assert_eq!(
                eval(nr::IOCTL, [7, c as u64, 0, 0, 0, 0]),
                Trace,
                "ioctl {c:#x}"
            );
            assert!(fd_call(nr::IOCTL as u64, [7, c as u64, 0, 0, 0, 0]));
        }
        for c in [libc::F_GETFL, libc::F_GETFD, libc::F_GETLK] {
            assert_eq!(
                eval(nr::FCNTL, [7, c as u64, 0, 0, 0, 0]),
                Allow,
                "fcntl {c}"
            );
            assert!(!fd_call(nr::FCNTL as u64, [7, c as u64, 0, 0, 0, 0]));
        }
        assert_eq!(eval(nr::IOCTL, [1, libc::TCGETS, 0, 0, 0, 0]), Allow);
        assert_eq!(
            eval(nr::IOCTL, [7, 0x5421 /* FIONBIO */, 0, 0, 0, 0]),
            Allow
        );
        assert_eq!(
            eval(nr::FCNTL, [7, libc::F_SETFL as u64, 0, 0, 0, 0]),
            Allow
        );
        // Calls a stop sees from outside (offsets, status flags, a number opened or closed, a
        // new description at a number): not trapped.
        for n in [
            0, /* read */
            nr::LSEEK,
            45, /* recvfrom */
            47, /* recvmsg */
            nr::OPENAT,
            nr::CLOSE,
            22,  /* pipe */
            319, /* memfd_create */
        ] {
            assert_eq!(eval(n, [7, 0, 0, 0, 0, 0]), Allow, "nr {n}");
            assert!(!fd_call(n as u64, [7, 0, 0, 0, 0, 0]), "nr {n}");
        }
        // The journal still sees only its own calls: a plain open or close is not one.
        assert!(!journal_call(nr::OPENAT as u64, [0, 0, 0, 0, 0, 0]));
        assert!(!journal_call(nr::CLOSE as u64, [7, 0, 0, 0, 0, 0]));
        assert!(journal_call(nr::CLOSE as u64, [1, 0, 0, 0, 0, 0]));
        assert_eq!(eval(nr::CLOSE, [1, 0, 0, 0, 0, 0]), Trace);
        assert!(journal_call(
            nr::OPENAT as u64,
            [0, 0, libc::O_TRUNC as u64, 0, 0, 0]
        ));
        assert!(!journal_call(nr::SETITIMER as u64, [0; 6]));
        // Standard-stream writes stop only an escalated process, for the journal.
        assert!(journal_call(nr::WRITE as u64, [1, 0, 5, 0, 0, 0]));
        assert!(journal_call(nr::WRITEV as u64, [7, 0, 1, 0, 0, 0]));
    }

    #[test]
    fn escalation_traps_standard_stream_writes_only() {
        let e = escalation_filter();
        let ev = |n, fd| evaluate(&e, AUDIT_ARCH_X86_64, n, [fd, 0, 0, 0, 0, 0]);
        for fd in 0..3 {
            assert_eq!(ev(nr::WRITE, fd), Action::Trace);
            assert_eq!(ev(nr::WRITEV, fd), Action::Trace);
        }
        assert_eq!(ev(nr::WRITE, 3), Action::Allow);
        assert_eq!(ev(nr::PWRITE64, 1), Action::Allow);
        assert_eq!(ev(nr::OPEN, 1), Action::Allow);
    }
}
