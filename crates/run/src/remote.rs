//! A process the monitor acts in: system calls run inside one of its stopped threads, its memory
//! read and written from outside, descriptors moved between it and the monitor.
//!
//! Capture and restore code for each kind of kernel object (descriptors, timers, …) is written
//! against [`Remote`], so the same code runs in a traced program ([`TracedRemote`]) and, in unit
//! tests, in the test process itself ([`LocalRemote`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use kioku_proc::Tracee;

use crate::error::{Result, RunError};

/// A process to act in.
pub trait Remote {
    /// Its process id, as the monitor sees it.
    fn pid(&self) -> i32;

    /// Runs system call `nr` in the process; the raw result (`-errno` on failure).
    fn syscall_raw(&self, nr: i64, args: &[u64]) -> Result<i64>;

    /// Places `data` in the process's memory while `f` runs (it gets the address, and may read
    /// back what a call wrote there with [`Remote::read_mem`]).
    fn with_bytes(&self, data: &[u8], f: &mut dyn FnMut(usize) -> Result<()>) -> Result<()>;

    /// Reads the process's memory.
    fn read_mem(&self, addr: usize, buf: &mut [u8]) -> Result<()>;

    /// Makes the monitor's descriptor `fd` the process's descriptor `at` (replacing what is
    /// there), sharing its open file description: the process sees the same pipe, socket,
    /// file offset and status flags.
    fn install_fd(&self, fd: BorrowedFd<'_>, at: i32, cloexec: bool) -> Result<()>;

    /// A descriptor in the monitor sharing the open file description of the process's `fd`.
    fn take_fd(&self, fd: i32) -> Result<OwnedFd> {
        take_fd(self.pid(), fd)
    }

    /// Runs system call `nr`; a `-errno` result becomes an error naming `what`.
    fn syscall(&self, what: &str, nr: i64, args: &[u64]) -> Result<u64> {
        let r = self.syscall_raw(nr, args)?;
        if (-4095..0).contains(&r) {
            return Err(RunError::io(
                format!("{what} in process {}", self.pid()),
                io::Error::from_raw_os_error(-r as i32),
            ));
        }
        Ok(r as u64)
    }
}

/// `pidfd_getfd(2)`: a duplicate of descriptor `fd` of process `pid` (needs ptrace access).
pub fn take_fd(pid: i32, fd: i32) -> Result<OwnedFd> {
    // SAFETY: plain system calls with integer arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(RunError::io(
            format!("pidfd_open({pid})"),
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: pidfd_open returned a new descriptor that we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: plain system call with integer arguments.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if got < 0 {
        return Err(RunError::io(
            format!("pidfd_getfd({pid}, {fd})"),
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: pidfd_getfd returned a new descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(got as RawFd) })
}

/// The calling process itself: calls run directly. For unit tests of capture and restore code.
#[derive(Debug, Default)]
pub struct LocalRemote;

impl Remote for LocalRemote {
    fn pid(&self) -> i32 {
        std::process::id() as i32
    }

    fn syscall_raw(&self, nr: i64, args: &[u64]) -> Result<i64> {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        // SAFETY: the caller passes a system call and arguments valid for this process, as it
        // would for the program the monitor acts in.
        let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
        Ok(if r < 0 {
            -(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO) as i64)
        } else {
            r
        })
    }

    fn with_bytes(&self, data: &[u8], f: &mut dyn FnMut(usize) -> Result<()>) -> Result<()> {
        let mut buf = data.to_vec();
        f(buf.as_mut_ptr() as usize)
    }

    fn read_mem(&self, addr: usize, buf: &mut [u8]) -> Result<()> {
        // SAFETY: local test code passes addresses of live buffers of at least `buf.len()`.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn install_fd(&self, fd: BorrowedFd<'_>, at: i32, cloexec: bool) -> Result<()> {
        let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
        // SAFETY: dup3 of a descriptor we hold onto a number the test chose.
        if unsafe { libc::dup3(fd.as_raw_fd(), at, flags) } < 0 {
            return Err(RunError::io("dup3", io::Error::last_os_error()));
        }
        Ok(())
    }

    fn take_fd(&self, fd: i32) -> Result<OwnedFd> {
        // SAFETY: F_DUPFD_CLOEXEC of a descriptor of this process.
        let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if d < 0 {
            return Err(RunError::io("dup", io::Error::last_os_error()));
        }
        // SAFETY: a new descriptor that we own.
        Ok(unsafe { OwnedFd::from_raw_fd(d) })
    }
}

/// A traced process, acting through thread `tid` (stopped).
pub struct TracedRemote<'a> {
    pub tracee: &'a Tracee,
    pub tid: i32,
    /// Descriptor number, in the process, of its end of the monitor's descriptor channel (a
    /// Unix socket the monitor sends descriptors over); `None` when not set up.
    pub channel: Option<(i32, BorrowedFd<'a>)>,
}

impl Remote for TracedRemote<'_> {
    fn pid(&self) -> i32 {
        self.tracee.pid()
    }

    fn syscall_raw(&self, nr: i64, args: &[u64]) -> Result<i64> {
        match self.tracee.syscall(self.tid, nr, args) {
            Ok(v) => Ok(v as i64),
            Err(kioku_proc::ProcError::Syscall { source, .. }) => {
                Ok(-(source.raw_os_error().unwrap_or(libc::EIO) as i64))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn with_bytes(&self, data: &[u8], f: &mut dyn FnMut(usize) -> Result<()>) -> Result<()> {
        let mut inner: Option<RunError> = None;
        let r = self.tracee.with_remote_bytes(self.tid, data, |at| {
            if let Err(e) = f(at) {
                inner = Some(e);
            }
            Ok(())
        });
        if let Some(e) = inner {
            return Err(e);
        }
        r.map_err(Into::into)
    }

    fn read_mem(&self, addr: usize, buf: &mut [u8]) -> Result<()> {
        self.tracee.read_mem(addr, buf).map_err(Into::into)
    }

    fn install_fd(&self, fd: BorrowedFd<'_>, at: i32, cloexec: bool) -> Result<()> {
        let Some((remote_end, monitor_end)) = self.channel else {
            return Err(RunError::Unsupported {
                what: "no descriptor channel into the restored process".into(),
            });
        };
        send_fd(monitor_end, fd)?;
        let got = recv_fd_remote(self, remote_end)?;
        let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
        if got != at {
            self.syscall(
                "dup3",
                libc::SYS_dup3,
                &[got as u64, at as u64, flags as u64],
            )?;
            self.syscall("close", libc::SYS_close, &[got as u64])?;
        } else if !cloexec {
            self.syscall(
                "fcntl(F_SETFD)",
                libc::SYS_fcntl,
                &[at as u64, libc::F_SETFD as u64, 0],
            )?;
        }
        Ok(())
    }
}

/// Sends one descriptor over a connected Unix socket (SCM_RIGHTS) with a one-byte message.
pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u8; space];
    // SAFETY: a zeroed msghdr is valid; every pointer set below refers to live locals.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: the control buffer holds one cmsg of CMSG_SPACE(sizeof fd) bytes.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd.as_raw_fd());
    }
    // SAFETY: msg and everything it points to stay alive for the call.
    if unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) } != 1 {
        return Err(RunError::io(
            "sending a descriptor to the restored process",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// `recvmsg` injected into the process on its end `sock` of the channel: the descriptor
/// number it received.
fn recv_fd_remote(r: &dyn Remote, sock: i32) -> Result<i32> {
    // Layout in the process: msghdr (56) | iovec (16) | 1 data byte (8) | cmsg buffer (24).
    const MSG: usize = 0;
    const IOV: usize = 56;
    const DATA: usize = 72;
    const CTL: usize = 80;
    const CTL_LEN: usize = 24;
    let mut got = -1;
    r.with_bytes(&[0u8; CTL + CTL_LEN], &mut |at| {
        let mut b = vec![0u8; CTL + CTL_LEN];
        let put = |b: &mut Vec<u8>, off: usize, v: u64| {
            b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        };
        // struct msghdr { name, namelen(+pad), iov, iovlen, control, controllen, flags }
        put(&mut b, MSG + 16, (at + IOV) as u64);
        put(&mut b, MSG + 24, 1);
        put(&mut b, MSG + 32, (at + CTL) as u64);
        put(&mut b, MSG + 40, CTL_LEN as u64);
        put(&mut b, IOV, (at + DATA) as u64);
        put(&mut b, IOV + 8, 1);
        write_remote(r, at, &b)?;
        let n = r.syscall(
            "recvmsg (descriptor channel)",
            libc::SYS_recvmsg,
            &[
                sock as u64,
                (at + MSG) as u64,
                libc::MSG_CMSG_CLOEXEC as u64,
            ],
        )?;
        if n != 1 {
            return Err(RunError::Unsupported {
                what: "the descriptor channel delivered no message".into(),
            });
        }
        let mut ctl = [0u8; CTL_LEN];
        r.read_mem(at + CTL, &mut ctl)?;
        // struct cmsghdr { len: usize, level: i32, type: i32 } then the descriptor.
        let level = i32::from_le_bytes(ctl[8..12].try_into().expect("4"));
        let kind = i32::from_le_bytes(ctl[12..16].try_into().expect("4"));
        if level != libc::SOL_SOCKET || kind != libc::SCM_RIGHTS {
            return Err(RunError::Unsupported {
                what: "the descriptor channel delivered no descriptor".into(),
            });
        }
        got = i32::from_le_bytes(ctl[16..20].try_into().expect("4"));
        Ok(())
    })?;
    Ok(got)
}

/// Writes `data` at `addr` in the process (through `/proc/PID/mem`).
fn write_remote(r: &dyn Remote, addr: usize, data: &[u8]) -> Result<()> {
    kioku_proc::write_mem(r.pid(), addr, data).map_err(Into::into)
}
