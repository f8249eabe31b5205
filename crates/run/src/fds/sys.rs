//! Small system-call wrappers the descriptor code runs in the monitor on its own duplicates
//! of the program's descriptors (taken with `pidfd_getfd`, sharing the open file description).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// `kcmp` types (linux/kcmp.h).
pub const KCMP_FILE: i32 = 0;
pub const KCMP_EPOLL_TFD: i32 = 7;

/// `-1` → the errno as an `io::Error`.
pub fn cvt(r: i64) -> io::Result<i64> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Takes ownership of a descriptor a call just returned.
pub fn owned(r: i64) -> io::Result<OwnedFd> {
    let fd = cvt(r)? as RawFd;
    // SAFETY: the call that returned `fd` created it for us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `kcmp(pid1, pid2, KCMP_FILE, fd1, fd2) == 0`: both descriptors name one open file
/// description.
pub fn same_file(pid1: i32, fd1: i32, pid2: i32, fd2: i32) -> io::Result<bool> {
    // SAFETY: kcmp takes integers only for KCMP_FILE.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid1, pid2, KCMP_FILE, fd1, fd2) };
    Ok(cvt(r)? == 0)
}

/// `KCMP_EPOLL_TFD`: whether descriptor `fd` of `pid` is the file registered in epoll `efd` of
/// `epid` under descriptor number `tfd` (the `toff`-th registration with that number).
pub fn is_epoll_target(
    pid: i32,
    fd: i32,
    epid: i32,
    efd: i32,
    tfd: i32,
    toff: u32,
) -> io::Result<bool> {
    #[repr(C)]
    struct Slot {
        efd: u32,
        tfd: u32,
        toff: u32,
    }
    let slot = Slot {
        efd: efd as u32,
        tfd: tfd as u32,
        toff,
    };
    // SAFETY: the kernel reads a `struct kcmp_epoll_slot` from `slot`, which lives across the
    // call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid,
            epid,
            KCMP_EPOLL_TFD,
            fd,
            &slot as *const Slot,
        )
    };
    match cvt(r) {
        Ok(v) => Ok(v == 0),
        // No registration (efd, tfd, toff) at all.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets the status flags a description can change (`F_SETFL` ignores the access mode and
/// creation flags).
pub fn set_fl(fd: BorrowedFd<'_>, flags: i32) -> io::Result<()> {
    // SAFETY: fcntl(F_SETFL) on a live descriptor.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) } as i64)?;
    Ok(())
}

/// Status flags `F_SETFL` restores: what `fcntl(F_SETFL)` lets a program change.
pub fn settable(flags: i32) -> i32 {
    flags & (libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME)
}

pub fn get_int(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<i32> {
    let mut v: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut i32).cast(),
            &mut len,
        )
    };
    cvt(r as i64)?;
    Ok(v)
}

pub fn set_int(fd: BorrowedFd<'_>, level: i32, name: i32, v: i32) -> io::Result<()> {
    set_bytes(fd, level, name, &v.to_ne_bytes())
}

pub fn get_bytes(fd: BorrowedFd<'_>, level: i32, name: i32, max: usize) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; max];
    let mut len = max as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`.
    let r =
        unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, v.as_mut_ptr().cast(), &mut len) };
    cvt(r as i64)?;
    v.truncate(len as usize);
    Ok(v)
}

pub fn set_bytes(fd: BorrowedFd<'_>, level: i32, name: i32, v: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads `v.len()` bytes from `v`.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            v.as_ptr().cast(),
            v.len() as libc::socklen_t,
        )
    };
    cvt(r as i64)?;
    Ok(())
}

/// `getsockname` (`peer` false) or `getpeername`: the raw address bytes.
pub fn sock_addr(fd: BorrowedFd<'_>, peer: bool) -> io::Result<Vec<u8>> {
    // SAFETY: a zeroed sockaddr_storage is a valid buffer.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast();
    // SAFETY: the kernel writes at most `len` bytes into `ss`.
    let r = unsafe {
        if peer {
            libc::getpeername(fd.as_raw_fd(), p, &mut len)
        } else {
            libc::getsockname(fd.as_raw_fd(), p, &mut len)
        }
    };
    cvt(r as i64)?;
    // SAFETY: `ss` is plain bytes; `len` is at most its size.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&ss as *const libc::sockaddr_storage).cast::<u8>(),
            (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>()),
        )
    };
    Ok(bytes.to_vec())
}

pub fn socket(family: i32, kind: i32, protocol: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain system call.
    owned(unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, protocol) } as i64)
}

pub fn bind(fd: BorrowedFd<'_>, addr: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads `addr.len()` bytes of a sockaddr.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            addr.as_ptr().cast(),
            addr.len() as libc::socklen_t,
        )
    };
    cvt(r as i64)?;
    Ok(())
}

pub fn connect(fd: BorrowedFd<'_>, addr: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads `addr.len()` bytes of a sockaddr.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            addr.as_ptr().cast(),
            addr.len() as libc::socklen_t,
        )
    };
    cvt(r as i64)?;
    Ok(())
}

pub fn listen(fd: BorrowedFd<'_>, backlog: i32) -> io::Result<()> {
    // SAFETY: plain system call.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), backlog) } as i64)?;
    Ok(())
}

pub fn shutdown(fd: BorrowedFd<'_>, how: i32) -> io::Result<()> {
    // SAFETY: plain system call.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), how) } as i64)?;
    Ok(())
}

/// Writes all of `data` (a descriptor that does not block on this amount).
pub fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: the kernel reads at most `data.len()` bytes.
        let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
        match cvt(n as i64) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
            Ok(n) => data = &data[n as usize..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `ioctl` with a pointer argument.
pub fn ioctl_ptr<T>(fd: BorrowedFd<'_>, req: u64, arg: *mut T) -> io::Result<i32> {
    // SAFETY: the caller passes a request whose argument is a `T` at `arg`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    Ok(cvt(r as i64)? as i32)
}

/// An `ioctl` that reads or writes one `int`.
pub fn ioctl_int(fd: BorrowedFd<'_>, req: u64) -> io::Result<i32> {
    let mut v: i32 = 0;
    ioctl_ptr(fd, req, &mut v)?;
    Ok(v)
}

/// Opens `path` in the monitor (close-on-exec).
pub fn open(path: &Path, flags: i32) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    owned(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0) } as i64)
}

/// A new open file description of what `fd` refers to (`/proc/self/fd/N` opened again with
/// `flags`): another description of the same pipe, terminal or file.
pub fn reopen(fd: BorrowedFd<'_>, flags: i32) -> io::Result<OwnedFd> {
    open(
        Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())),
        flags & !(libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL),
    )
}

/// Converts a kernel-internal device number (as `/proc/…/fdinfo` prints `sdev`) to the
/// userspace encoding `stat` reports.
pub fn kernel_dev_to_user(sdev: u64) -> u64 {
    libc::makedev((sdev >> 20) as u32, (sdev & 0xfffff) as u32)
}
