//! System calls executed by a stopped thread of the tracee on the monitor's behalf.
//!
//! The thread's registers are saved, `rip` is pointed at a `syscall` instruction (found in the
//! vdso or another executable mapping; as a last resort `0f 05` is written over the word at
//! `rip` and put back afterwards), the call number and arguments are loaded with `orig_rax = -1`
//! (so the kernel does not restart whatever call the thread was stopped in), and the thread is
//! single-stepped over the instruction. The single-step trap leaves it in a signal-delivery-stop
//! where the saved registers are put back: when it is resumed, the kernel's restart logic sees
//! the original `orig_rax` and `-ERESTART*` value and restarts an interrupted call exactly as if
//! nothing had happened. Signals that arrive during the injection are held back and delivered
//! when the thread is resumed.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{ProcError, Result};
use crate::maps::{read_maps, MapKind};
use crate::mem;
use crate::regs::{self, Regs};
use crate::sys::{self, Req, Status};
use crate::tracee::{Inner, StopHow, TState, Tracee};

/// `syscall` is `0f 05`.
const SYSCALL: [u8; 2] = [0x0f, 0x05];
/// Bytes of executable file mappings searched for a `syscall` instruction.
const SEARCH_LIMIT: usize = 4 << 20;
/// x86-64 System V red zone below the stack pointer.
const RED_ZONE: u64 = 128;
/// An injected call interrupted by a signal is tried this often.
const MAX_RESTARTS: usize = 16;

/// `UFFD_USER_MODE_ONLY` (Linux 5.11).
pub const UFFD_USER_MODE_ONLY: i32 = 1;

/// Calls a checkpoint injects that cannot change the address space (it only reads state):
/// what was learned of the layout stays valid across them.
fn keeps_layout(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_getitimer
            | libc::SYS_timer_gettime
            | libc::SYS_sigaltstack
            | libc::SYS_prctl
            | libc::SYS_rt_sigaction
            | libc::SYS_sched_getaffinity
            | libc::SYS_getpriority
            | libc::SYS_fcntl
            | libc::SYS_getsockopt
            | libc::SYS_getsockname
            | libc::SYS_getpeername
    )
}

fn errno_of(ret: i64) -> Option<i32> {
    (-4095..0).contains(&ret).then_some(-ret as i32)
}

impl Inner {
    /// Finds the address of a `syscall` instruction; `None`: poke one at `rip`.
    fn syscall_site(&mut self) -> Result<Option<usize>> {
        let pid = self.pid;
        if self.patch_syscall {
            return Ok(None);
        }
        if let Some(a) = self.syscall_insn {
            // Checked again only when the tracee may have run since (several calls of one
            // checkpoint's stop use it).
            let gen = sys::ran_generation();
            if self.syscall_checked == Some(gen) {
                return Ok(Some(a));
            }
            let mut b = [0u8; 2];
            if mem::read_mem(pid, a, &mut b).is_ok() && b == SYSCALL {
                self.syscall_checked = Some(gen);
                return Ok(Some(a));
            }
            self.syscall_insn = None;
        }
        let maps = read_maps(pid)?;
        let mut candidates: Vec<_> = maps
            .iter()
            .filter(|m| m.perms.exec && m.perms.read)
            .filter(|m| matches!(m.kind, MapKind::Vdso | MapKind::File { .. }))
            .collect();
        // The vdso first: it never goes away while the program runs.
        candidates.sort_by_key(|m| m.kind != MapKind::Vdso);
        for m in candidates {
            let len = m.len().min(SEARCH_LIMIT);
            let mut buf = vec![0u8; len];
            if mem::read_mem(pid, m.start, &mut buf).is_err() {
                continue;
            }
            if let Some(i) = buf.windows(2).position(|w| w == SYSCALL) {
                let at = m.start + i;
                tracing::trace!(pid, addr = at, "syscall instruction found");
                self.syscall_insn = Some(at);
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// Executes system call `nr` with `args` in stopped thread `tid`; returns the raw result.
    pub(crate) fn inject(&mut self, tid: i32, nr: i64, args: &[u64; 6]) -> Result<i64> {
        self.check_stopped(tid)?;
        let TState::Stopped { how, deliver } = self
            .thread_mut(tid)
            .map(|t| t.state)
            .expect("checked above")
        else {
            unreachable!("checked above");
        };
        if how == StopHow::Seccomp {
            // At a trapped call's entry: skip it for now; it is issued (and trapped) again
            // when the thread resumes after the injection.
            self.rewind_syscall(tid)?;
        }
        let saved = regs::get_regs(tid)?;
        // Signals to deliver once the thread is resumed, with their siginfo.
        let mut held: Vec<libc::siginfo_t> = Vec::new();
        if how == StopHow::Signal && deliver != 0 {
            let si = sys::get_siginfo(tid).map_err(|e| ProcError::ptrace("GETSIGINFO", tid, e))?;
            held.push(si);
        }
        let (site, poked) = match self.syscall_site()? {
            Some(a) => (a, None),
            None => {
                // Other threads could run the patched bytes: all must be stopped.
                if let Some(t) = self
                    .threads
                    .iter()
                    .find(|t| !matches!(t.state, TState::Stopped { .. }))
                {
                    return Err(ProcError::NotStopped { tid: t.tid });
                }
                let at = saved.rip as usize;
                let word = sys::ptrace(Req::PeekData(at), tid)
                    .map_err(|e| ProcError::ptrace("PEEKDATA", tid, e))?
                    as u64;
                let patched = (word & !0xffff) | 0x050f;
                sys::ptrace(Req::PokeData(at, patched), tid)
                    .map_err(|e| ProcError::ptrace("POKEDATA", tid, e))?;
                (at, Some(word))
            }
        };
        if !keeps_layout(nr) {
            sys::note_ran();
        }
        let mut call = saved;
        call.rip = site as u64;
        call.rax = nr as u64;
        call.orig_rax = u64::MAX;
        call.rdi = args[0];
        call.rsi = args[1];
        call.rdx = args[2];
        call.r10 = args[3];
        call.r8 = args[4];
        call.r9 = args[5];
        let result = self.step_call(tid, site, &call, &mut held);
        // Put everything back, whatever happened (unless the thread is gone).
        if self.exit.is_none() && self.threads.iter().any(|t| t.tid == tid) {
            regs::set_regs(tid, &saved)?;
            if let Some(word) = poked {
                sys::ptrace(Req::PokeData(site, word), tid)
                    .map_err(|e| ProcError::ptrace("POKEDATA", tid, e))?;
            }
            // The thread now sits in the signal-delivery-stop of our single-step trap.
            let mut deliver = 0;
            if let Some((first, rest)) = held.split_first() {
                sys::set_siginfo(tid, first)
                    .map_err(|e| ProcError::ptrace("SETSIGINFO", tid, e))?;
                deliver = first.si_signo;
                for si in rest {
                    self.requeue(tid, si)?;
                }
            } else if let StopHow::GroupStop(_) = how {
                // It was in a job-control stop: enter it again on resume.
                deliver = libc::SIGSTOP;
            }
            if let Some(t) = self.thread_mut(tid) {
                t.state = TState::Stopped {
                    how: StopHow::Signal,
                    deliver,
                };
            }
        }
        result
    }

    /// execve in single-threaded stopped process's thread `tid`, then stop at the new program's
    /// first instruction. The strings live in a scratch mapping the new image replaces.
    pub(crate) fn exec(
        &mut self,
        tid: i32,
        path: &[u8],
        argv: &[Vec<u8>],
        env: &[Vec<u8>],
    ) -> Result<()> {
        self.check_stopped(tid)?;
        if self.threads.len() != 1 {
            return Err(ProcError::NotStopped { tid: self.pid });
        }
        // Strings, then the two pointer arrays.
        let mut strings = Vec::new();
        let mut offs = Vec::new();
        for s in std::iter::once(path)
            .chain(argv.iter().map(|a| a.as_slice()))
            .chain(env.iter().map(|e| e.as_slice()))
        {
            offs.push(strings.len());
            strings.extend_from_slice(s);
            strings.push(0);
        }
        let ptrs_at = strings.len().next_multiple_of(8);
        let total = ptrs_at + 8 * (argv.len() + env.len() + 2);
        let len = total.next_multiple_of(4096);
        let mut args = [0u64; 6];
        args[1] = len as u64;
        args[2] = (libc::PROT_READ | libc::PROT_WRITE) as u64;
        args[3] = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        args[4] = u64::MAX;
        let base = self.inject(tid, libc::SYS_mmap, &args)?;
        if errno_of(base).is_some() {
            return Err(ProcError::Syscall {
                name: "mmap",
                pid: self.pid,
                source: std::io::Error::from_raw_os_error(-base as i32),
            });
        }
        let base = base as usize;
        let mut block = strings;
        block.resize(ptrs_at, 0);
        let ptr = |i: usize| ((base + offs[i]) as u64).to_le_bytes();
        for i in 0..argv.len() {
            block.extend_from_slice(&ptr(1 + i));
        }
        block.extend_from_slice(&0u64.to_le_bytes());
        for i in 0..env.len() {
            block.extend_from_slice(&ptr(1 + argv.len() + i));
        }
        block.extend_from_slice(&0u64.to_le_bytes());
        mem::write_mem(self.pid, base, &block)?;
        let site = match self.syscall_site()? {
            Some(a) => a,
            None => {
                return Err(ProcError::Unexpected {
                    tid,
                    what: "exec: no syscall instruction",
                    status: 0,
                })
            }
        };
        let mut call = regs::get_regs(tid)?;
        call.rip = site as u64;
        call.rax = libc::SYS_execve as u64;
        call.orig_rax = u64::MAX;
        call.rdi = base as u64;
        call.rsi = (base + ptrs_at) as u64;
        call.rdx = (base + ptrs_at + 8 * (argv.len() + 1)) as u64;
        regs::set_regs(tid, &call)?;
        sys::ptrace(Req::SingleStep(0), tid)
            .map_err(|e| ProcError::ptrace("SINGLESTEP", tid, e))?;
        loop {
            let (st, raw) = self.wait_one(tid)?;
            match st {
                Status::Stopped {
                    event: sys::EVENT_EXEC,
                    ..
                } => {
                    self.after_exec_event();
                    // Let the exec finish and stop before the first instruction.
                    sys::ptrace(Req::Interrupt, tid)
                        .map_err(|e| ProcError::ptrace("INTERRUPT", tid, e))?;
                    sys::ptrace(Req::Cont(0), tid)
                        .map_err(|e| ProcError::ptrace("CONT", tid, e))?;
                }
                Status::Stopped {
                    event: sys::EVENT_STOP,
                    ..
                } => {
                    if let Some(t) = self.thread_mut(tid) {
                        t.state = TState::Stopped {
                            how: StopHow::Interrupt,
                            deliver: 0,
                        };
                    }
                    return Ok(());
                }
                Status::Stopped {
                    sig: libc::SIGTRAP,
                    event: 0,
                } => {
                    // The single step ended without an exec: it failed.
                    let r = regs::get_regs(tid)?;
                    if let Some(t) = self.thread_mut(tid) {
                        t.state = TState::Stopped {
                            how: StopHow::Signal,
                            deliver: 0,
                        };
                    }
                    return Err(ProcError::Syscall {
                        name: "execve",
                        pid: self.pid,
                        source: std::io::Error::from_raw_os_error(
                            errno_of(r.rax as i64).unwrap_or(libc::EIO),
                        ),
                    });
                }
                Status::Stopped { .. } => {
                    sys::ptrace(Req::SingleStep(0), tid)
                        .map_err(|e| ProcError::ptrace("SINGLESTEP", tid, e))?;
                }
                Status::Exited(_) | Status::Killed { .. } => {
                    self.thread_gone(tid, st);
                    return Err(self.exited_err());
                }
                Status::Other => {
                    return Err(ProcError::Unexpected {
                        tid,
                        what: "exec",
                        status: raw,
                    })
                }
            }
        }
    }

    /// Queues a held-back signal again: with its siginfo when the kernel allows it (codes of
    /// sigqueue, timers, message queues, AIO and SIGIO), else as tgkill with the same number.
    fn requeue(&mut self, tid: i32, si: &libc::siginfo_t) -> Result<()> {
        let pid = self.pid;
        let with_info = si.si_code < 0 && si.si_code != sys::SI_TKILL;
        let r = if with_info {
            sys::tgsigqueueinfo(pid, tid, si)
        } else {
            sys::tgkill(pid, tid, si.si_signo)
        };
        r.map_err(|e| ProcError::ptrace("re-queue held-back signal", tid, e))?;
        if !with_info && si.si_code != sys::SI_USER {
            tracing::debug!(
                pid,
                tid,
                sig = si.si_signo,
                code = si.si_code,
                "held-back signal re-sent without its original siginfo"
            );
        }
        Ok(())
    }

    fn step_call(
        &mut self,
        tid: i32,
        site: usize,
        call: &Regs,
        held: &mut Vec<libc::siginfo_t>,
    ) -> Result<i64> {
        for _ in 0..MAX_RESTARTS {
            regs::set_regs(tid, call)?;
            let ret = loop {
                sys::ptrace(Req::SingleStep(0), tid)
                    .map_err(|e| ProcError::ptrace("SINGLESTEP", tid, e))?;
                let (st, raw) = self.wait_one(tid)?;
                match st {
                    Status::Exited(_) | Status::Killed { .. } => {
                        self.thread_gone(tid, st);
                        return Err(if self.exit.is_some() {
                            self.exited_err()
                        } else {
                            ProcError::NoSuchThread { pid: self.pid, tid }
                        });
                    }
                    Status::Stopped { sig, event: 0 } => {
                        let si = sys::get_siginfo(tid)
                            .map_err(|e| ProcError::ptrace("GETSIGINFO", tid, e))?;
                        if sig == libc::SIGTRAP && si.si_code > 0 {
                            let now = regs::get_regs(tid)?;
                            if now.rip == site as u64 + 2 {
                                break now.rax as i64;
                            }
                            if now.rip == site as u64 {
                                // Trapped on the way out of the call the thread was stopped
                                // in, before ours ran: load ours again.
                                regs::set_regs(tid, call)?;
                                continue;
                            }
                            return Err(ProcError::Unexpected {
                                tid,
                                what: "a system call injection",
                                status: raw,
                            });
                        }
                        // A signal for the program: hold it back until the thread resumes.
                        held.push(si);
                    }
                    // An injected clone or fork: the new thread or process is traced
                    // (TRACECLONE, TRACEFORK) and starts with a stop of its own, collected by
                    // the next `stop_all` (a new process by its owner, from the notice).
                    Status::Stopped {
                        event: event @ (sys::EVENT_CLONE | sys::EVENT_FORK | sys::EVENT_VFORK),
                        ..
                    } => self.on_new_task(tid, event)?,
                    // Leftover interrupt or other event stops: keep stepping.
                    Status::Stopped { .. } => {}
                    Status::Other => {
                        return Err(ProcError::Unexpected {
                            tid,
                            what: "a system call injection",
                            status: raw,
                        })
                    }
                }
            };
            if matches!(
                -ret,
                sys::ERESTARTSYS
                    | sys::ERESTARTNOINTR
                    | sys::ERESTARTNOHAND
                    | sys::ERESTART_RESTARTBLOCK
            ) {
                // Interrupted by a signal (now held back): run it again.
                continue;
            }
            return Ok(ret);
        }
        Err(ProcError::Syscall {
            name: "syscall",
            pid: self.pid,
            source: std::io::Error::from_raw_os_error(libc::EINTR),
        })
    }
}

impl Tracee {
    /// Replaces the stopped, single-threaded process's program: `execve(path, argv, env)` run in
    /// thread `tid`; returns with the new program stopped before its first instruction.
    pub fn exec(
        &self,
        tid: i32,
        path: &Path,
        argv: &[String],
        env: &[(std::ffi::OsString, std::ffi::OsString)],
    ) -> Result<()> {
        let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
        let env: Vec<Vec<u8>> = env
            .iter()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                b
            })
            .collect();
        self.inner
            .borrow_mut()
            .exec(tid, path.as_os_str().as_bytes(), &argv, &env)
    }

    /// Executes system call `nr` with up to six arguments in stopped thread `tid` and returns
    /// its result; a `-errno` result becomes `ProcError::Syscall`. The thread's registers and
    /// memory are restored exactly; a call it was blocked in restarts when it is resumed.
    pub fn syscall(&self, tid: i32, nr: i64, args: &[u64]) -> Result<u64> {
        self.call("syscall", tid, nr, args)
    }

    fn call(&self, name: &'static str, tid: i32, nr: i64, args: &[u64]) -> Result<u64> {
        assert!(args.len() <= 6, "a system call takes at most six arguments");
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        let mut i = self.inner.borrow_mut();
        let ret = i.inject(tid, nr, &a)?;
        tracing::trace!(pid = i.pid, tid, name, ret, "injected");
        match errno_of(ret) {
            Some(errno) => Err(ProcError::Syscall {
                name,
                pid: i.pid,
                source: std::io::Error::from_raw_os_error(errno),
            }),
            None => Ok(ret as u64),
        }
    }

    /// Places `data` in the tracee's memory for the duration of `f`, which gets its address
    /// (on the thread's stack below the red zone, restored afterwards; in a temporary page
    /// when that fails). `f` may read back what an injected call wrote there.
    pub fn with_remote_bytes<T>(
        &self,
        tid: i32,
        data: &[u8],
        f: impl FnOnce(usize) -> Result<T>,
    ) -> Result<T> {
        let rsp = self.regs(tid)?.rsp;
        let need = (data.len() as u64 + 15) & !15;
        // Only inside the mapping the stack pointer is in (the thread's stack, or its signal
        // stack): below it, by the ABI, nothing of the program lives. The mapping found last
        // serves while no tracee ran since (a checkpoint injects several calls in one stop).
        let within = |a: usize, (start, end): (usize, usize)| start <= a && a < end;
        let gen = sys::ran_generation();
        let seen = self
            .inner
            .borrow()
            .stack_seen
            .filter(|&(g, s, e)| g == gen && within(rsp as usize, (s, e)))
            .map(|(_, s, e)| (s, e));
        let stack = match seen {
            Some(r) => Some(r),
            None => {
                let found = self
                    .maps()?
                    .into_iter()
                    .find(|m| m.contains(rsp as usize) && m.perms.write)
                    .map(|m| (m.start, m.end));
                if let Some((s, e)) = found {
                    self.inner.borrow_mut().stack_seen = Some((gen, s, e));
                }
                found
            }
        };
        let below = rsp
            .checked_sub(RED_ZONE + need + 64)
            .map(|a| (a & !15) as usize)
            .filter(|&a| stack.is_some_and(|r| within(a, r)));
        if let Some(at) = below {
            let mut old = vec![0u8; data.len()];
            if self.read_mem(at, &mut old).is_ok() && self.write_mem(at, data).is_ok() {
                let r = f(at);
                self.write_mem(at, &old)?;
                return r;
            }
        }
        let len = (data.len() + 4095) & !4095;
        let page = self.mmap(
            tid,
            0,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        let r = self.write_mem(page, data).and_then(|_| f(page));
        self.munmap(tid, page, len)?;
        r
    }

    /// mmap(2) in the tracee; returns the address.
    #[allow(clippy::too_many_arguments)]
    pub fn mmap(
        &self,
        tid: i32,
        addr: usize,
        len: usize,
        prot: i32,
        flags: i32,
        fd: i32,
        off: u64,
    ) -> Result<usize> {
        self.call(
            "mmap",
            tid,
            libc::SYS_mmap,
            &[
                addr as u64,
                len as u64,
                prot as u64,
                flags as u64,
                fd as i64 as u64,
                off,
            ],
        )
        .map(|a| a as usize)
    }

    /// munmap(2) in the tracee.
    pub fn munmap(&self, tid: i32, addr: usize, len: usize) -> Result<()> {
        self.call("munmap", tid, libc::SYS_munmap, &[addr as u64, len as u64])
            .map(|_| ())
    }

    /// mprotect(2) in the tracee.
    pub fn mprotect(&self, tid: i32, addr: usize, len: usize, prot: i32) -> Result<()> {
        self.call(
            "mprotect",
            tid,
            libc::SYS_mprotect,
            &[addr as u64, len as u64, prot as u64],
        )
        .map(|_| ())
    }

    /// mremap(2) in the tracee; returns the new address.
    pub fn mremap(
        &self,
        tid: i32,
        old: usize,
        old_len: usize,
        new_len: usize,
        flags: i32,
        new_addr: usize,
    ) -> Result<usize> {
        self.call(
            "mremap",
            tid,
            libc::SYS_mremap,
            &[
                old as u64,
                old_len as u64,
                new_len as u64,
                flags as u64,
                new_addr as u64,
            ],
        )
        .map(|a| a as usize)
    }

    /// madvise(2) in the tracee.
    pub fn madvise(&self, tid: i32, addr: usize, len: usize, advice: i32) -> Result<()> {
        self.call(
            "madvise",
            tid,
            libc::SYS_madvise,
            &[addr as u64, len as u64, advice as u64],
        )
        .map(|_| ())
    }

    /// openat(2) in the tracee, with `path` placed in its memory for the call; returns the
    /// descriptor (in the tracee).
    pub fn openat(&self, tid: i32, dirfd: i32, path: &Path, flags: i32, mode: u32) -> Result<i32> {
        let mut bytes = path.as_os_str().as_bytes().to_vec();
        if bytes.contains(&0) {
            return Err(ProcError::Syscall {
                name: "openat",
                pid: self.pid(),
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        bytes.push(0);
        self.with_remote_bytes(tid, &bytes, |at| {
            self.call(
                "openat",
                tid,
                libc::SYS_openat,
                &[dirfd as i64 as u64, at as u64, flags as u64, mode as u64],
            )
        })
        .map(|fd| fd as i32)
    }

    /// close(2) in the tracee.
    pub fn close(&self, tid: i32, fd: i32) -> Result<()> {
        self.call("close", tid, libc::SYS_close, &[fd as u64])
            .map(|_| ())
    }

    /// userfaultfd(2) in the tracee; returns the descriptor (in the tracee).
    pub fn userfaultfd(&self, tid: i32, flags: i32) -> Result<i32> {
        self.call("userfaultfd", tid, libc::SYS_userfaultfd, &[flags as u64])
            .map(|fd| fd as i32)
    }

    /// prctl(2) in the tracee.
    pub fn prctl(&self, tid: i32, option: i32, args: [u64; 4]) -> Result<u64> {
        self.call(
            "prctl",
            tid,
            libc::SYS_prctl,
            &[option as u64, args[0], args[1], args[2], args[3]],
        )
    }
}
