//! Test processes for descriptor and process-state checkpoints: a program stopped before its
//! first instruction, with the monitor's descriptor channel at its fd 0, that objects are put
//! into (installed from the test, or made by system calls injected into it), captured from
//! outside, killed, and restored into a fresh one.

#![allow(dead_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use kioku_proc::{Tracee, TraceeCommand};
use kioku_run::fds::{self, FdTable, NoCtx, ProcRef, RestoreRef};
use kioku_run::remote::{take_fd, Remote, TracedRemote};

/// A stopped process to put descriptors into.
pub struct Child {
    pub tracee: Tracee,
    chan: OwnedFd,
}

impl Child {
    pub fn spawn() -> Child {
        let (mon, prog) = UnixStream::pair().unwrap();
        let tracee = Tracee::spawn(
            TraceeCommand::new("/bin/sleep")
                .arg("1000")
                .stdin(OwnedFd::from(prog))
                // Not the test's own streams: what they are (a terminal, a pipe, a log file)
                // would change what the tests capture.
                .stdout(OwnedFd::from(std::fs::File::create("/dev/null").unwrap()))
                .stderr(OwnedFd::from(std::fs::File::create("/dev/null").unwrap()))
                .inherit_fds(false),
        )
        .unwrap();
        Child {
            tracee,
            chan: OwnedFd::from(mon),
        }
    }

    pub fn pid(&self) -> i32 {
        self.tracee.pid()
    }

    pub fn remote(&self) -> TracedRemote<'_> {
        TracedRemote {
            tracee: &self.tracee,
            tid: self.tracee.pid(),
            channel: Some((0, self.chan.as_fd())),
        }
    }

    /// Puts `fd` at number `at` in the child (the test's copy is closed).
    pub fn give(&self, fd: impl Into<OwnedFd>, at: i32) {
        let fd: OwnedFd = fd.into();
        self.remote().install_fd(fd.as_fd(), at, false).unwrap();
    }

    /// Shares `fd` with the child at `at` (the test keeps its copy).
    pub fn share(&self, fd: BorrowedFd<'_>, at: i32) {
        self.remote().install_fd(fd, at, false).unwrap();
    }

    /// Runs a system call in the child: its raw result.
    pub fn sys(&self, nr: i64, args: &[u64]) -> i64 {
        self.remote().syscall_raw(nr, args).unwrap()
    }

    /// A system call with `data` placed in the child's memory at the argument given as
    /// `usize::MAX`; returns the result and the bytes there afterwards.
    pub fn sys_mem(&self, nr: i64, args: &[u64], data: &[u8]) -> (i64, Vec<u8>) {
        let r = self.remote();
        let mut out = (0, vec![0u8; data.len()]);
        r.with_bytes(data, &mut |addr| {
            let a: Vec<u64> = args
                .iter()
                .map(|&x| if x == u64::MAX { addr as u64 } else { x })
                .collect();
            out.0 = r.syscall_raw(nr, &a)?;
            r.read_mem(addr, &mut out.1)?;
            Ok(())
        })
        .unwrap();
        out
    }

    /// The test's own descriptor of the child's `fd` (same open file description).
    pub fn take(&self, fd: i32) -> OwnedFd {
        take_fd(self.pid(), fd).unwrap()
    }
}

/// The procs of a capture: each child as image pid 100, 101, … (its fd 0 is kioku's).
pub fn refs(children: &[&Child]) -> Vec<ProcRef> {
    children
        .iter()
        .enumerate()
        .map(|(i, c)| ProcRef {
            image_pid: 100 + i as i32,
            pid: c.pid(),
            own_fds: vec![0],
        })
        .collect()
}

pub fn capture(children: &[&Child]) -> FdTable {
    let t = fds::capture(&refs(children), &mut NoCtx).unwrap();
    // The image is JSON: what a restore reads is what was written.
    let json = serde_json::to_string(&t).unwrap();
    let back: FdTable = serde_json::from_str(&json).unwrap();
    assert_eq!(back, t);
    back
}

/// Restores `t` into fresh children (one per captured process, in image-pid order).
pub fn restore(t: &FdTable, n: usize) -> Vec<Child> {
    let kids: Vec<Child> = (0..n).map(|_| Child::spawn()).collect();
    {
        let remotes: Vec<TracedRemote<'_>> = kids.iter().map(|k| k.remote()).collect();
        let refs: Vec<RestoreRef<'_>> = remotes
            .iter()
            .enumerate()
            .map(|(i, r)| RestoreRef {
                image_pid: 100 + i as i32,
                remote: r,
            })
            .collect();
        for r in &refs {
            fds::close_unlisted(t, r.image_pid, r.remote, &[0]).unwrap();
        }
        fds::restore(t, &refs, &mut NoCtx).unwrap();
    }
    kids
}

pub fn read_some(fd: BorrowedFd<'_>, max: usize) -> std::io::Result<Vec<u8>> {
    let mut b = vec![0u8; max];
    // SAFETY: reads into `b`.
    let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), b.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    b.truncate(n as usize);
    Ok(b)
}

pub fn write_all(fd: BorrowedFd<'_>, b: &[u8]) {
    // SAFETY: writes from `b`.
    let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), b.len()) };
    assert_eq!(n, b.len() as isize);
}

pub fn getfl(fd: BorrowedFd<'_>) -> i32 {
    // SAFETY: fcntl on a live descriptor.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) }
}

pub fn cloexec(child: &Child, fd: i32) -> bool {
    child.sys(libc::SYS_fcntl, &[fd as u64, libc::F_GETFD as u64]) & 1 != 0
}

pub fn same(pid1: i32, fd1: i32, pid2: i32, fd2: i32) -> bool {
    // SAFETY: kcmp with integer arguments.
    unsafe { libc::syscall(libc::SYS_kcmp, pid1, pid2, 0, fd1, fd2) == 0 }
}

pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors we own.
    unsafe {
        use std::os::fd::FromRawFd;
        (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1]))
    }
}

pub fn owned(fd: i32) -> OwnedFd {
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor the caller created.
    unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }
}
