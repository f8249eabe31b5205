//! `TracedSpace`: the checkpoint engine's `AddressSpace` for a stopped tracee. Every operation
//! is a system call injected into the tracee's control thread, so the process must be stopped
//! (`Tracee::stop_all`) whenever the engine is called.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use kioku_ckpt::{AddressSpace, CkptError};
use kioku_pool::{Medium, MediumKind};
use kioku_track::{take_uffd_from, PageTracker, Tracker};

use crate::error::ProcError;
use crate::inject::UFFD_USER_MODE_ONLY;
use crate::tracee::Tracee;

const RESERVE_FLAGS: i32 = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;

/// The pool file as opened in the tracee.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RemoteFd {
    fd: i32,
    dev: u64,
    ino: u64,
}

/// A traced process as the engine's address space.
#[derive(Debug)]
pub struct TracedSpace {
    tracee: Tracee,
    pool_path: Option<PathBuf>,
    pool_fd: Option<RemoteFd>,
}

/// A `ProcError` as the engine's error type (`CkptError::Os`, keeping the errno's kind and the
/// full message).
fn ckpt(what: &'static str, e: ProcError) -> CkptError {
    let kind = e
        .errno()
        .map(|n| io::Error::from_raw_os_error(n).kind())
        .unwrap_or(io::ErrorKind::Other);
    CkptError::Os {
        what,
        source: io::Error::new(kind, e),
    }
}

impl TracedSpace {
    /// The address space of `tracee` (a handle to the same process).
    ///
    /// The pool file is opened in the tracee through `/proc/<monitor pid>/fd/<medium fd>`,
    /// which names exactly the file the monitor has open (it works for unlinked files and
    /// memfds too); use [`TracedSpace::with_pool_path`] where the tracee cannot open that.
    pub fn new(tracee: &Tracee) -> TracedSpace {
        TracedSpace {
            tracee: tracee.clone(),
            pool_path: None,
            pool_fd: None,
        }
    }

    /// Opens the pool in the tracee by this path instead.
    pub fn with_pool_path(mut self, path: impl Into<PathBuf>) -> TracedSpace {
        self.pool_path = Some(path.into());
        self
    }

    /// The traced process.
    pub fn tracee(&self) -> &Tracee {
        &self.tracee
    }

    /// The descriptor of the pool file in the tracee, once opened.
    pub fn pool_fd(&self) -> Option<i32> {
        self.pool_fd.map(|r| r.fd)
    }

    fn tid(&self, what: &'static str) -> Result<i32, CkptError> {
        self.tracee.control_thread().map_err(|e| ckpt(what, e))
    }

    /// Whether descriptor `fd` of the tracee still refers to file (dev, ino).
    fn remote_fd_is(&self, fd: i32, dev: u64, ino: u64) -> bool {
        std::fs::metadata(format!("/proc/{}/fd/{fd}", self.tracee.pid()))
            .map(|m| m.dev() == dev && m.ino() == ino)
            .unwrap_or(false)
    }

    /// The pool file's descriptor in the tracee, opening it when needed.
    fn pool_fd_for(&mut self, tid: i32, medium: &dyn Medium) -> Result<i32, CkptError> {
        let what = "open the pool file in the traced process";
        let fd = medium.fd();
        let me = std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .map_err(|source| CkptError::Os { what, source })?;
        let (dev, ino) = (me.dev(), me.ino());
        if let Some(r) = self.pool_fd {
            if r.dev == dev && r.ino == ino && self.remote_fd_is(r.fd, dev, ino) {
                return Ok(r.fd);
            }
        }
        let path = self
            .pool_path
            .clone()
            .unwrap_or_else(|| format!("/proc/{}/fd/{fd}", std::process::id()).into());
        let remote = self
            .tracee
            .openat(
                tid,
                libc::AT_FDCWD,
                &path,
                libc::O_RDWR | libc::O_CLOEXEC,
                0,
            )
            .map_err(|e| ckpt(what, e))?;
        if !self.remote_fd_is(remote, dev, ino) {
            let _ = self.tracee.close(tid, remote);
            return Err(CkptError::Os {
                what,
                source: io::Error::other(format!(
                    "{} is not the pool file the monitor has open; pass the pool's path with TracedSpace::with_pool_path",
                    path.display()
                )),
            });
        }
        if let Some(old) = self.pool_fd.take() {
            // The old number may be the one just reused for the new descriptor.
            if old.fd != remote && self.remote_fd_is(old.fd, old.dev, old.ino) {
                let _ = self.tracee.close(tid, old.fd);
            }
        }
        tracing::debug!(pid = self.tracee.pid(), fd = remote, path = %path.display(), "pool file opened in the traced process");
        self.pool_fd = Some(RemoteFd {
            fd: remote,
            dev,
            ino,
        });
        Ok(remote)
    }
}

impl AddressSpace for TracedSpace {
    fn pid(&self) -> i32 {
        self.tracee.pid()
    }

    fn reserve(&mut self, name: &str, addr: Option<usize>, len: usize) -> Result<usize, CkptError> {
        let what = "reserve address space in the traced process";
        let tid = self.tid(what)?;
        let taken = || CkptError::AddressTaken {
            name: name.into(),
            addr: addr.unwrap_or(0),
            len,
        };
        let (hint, flags) = match addr {
            Some(a) => (a, RESERVE_FLAGS | libc::MAP_FIXED_NOREPLACE),
            None => (0, RESERVE_FLAGS),
        };
        match self
            .tracee
            .mmap(tid, hint, len, libc::PROT_NONE, flags, -1, 0)
        {
            Ok(got) if addr.is_none() || got == hint => Ok(got),
            Ok(got) => {
                // A kernel that ignores MAP_FIXED_NOREPLACE placed it elsewhere.
                self.tracee
                    .munmap(tid, got, len)
                    .map_err(|e| ckpt(what, e))?;
                Err(taken())
            }
            Err(e) if e.errno() == Some(libc::EEXIST) => Err(taken()),
            Err(e) => Err(ckpt(what, e)),
        }
    }

    fn map_pool(
        &mut self,
        addr: usize,
        len: usize,
        medium: &dyn Medium,
        off: u64,
    ) -> Result<(), CkptError> {
        let what = "map pool pages into the traced process";
        let tid = self.tid(what)?;
        let fd = self.pool_fd_for(tid, medium)?;
        let flags = libc::MAP_FIXED
            | if medium.kind() == MediumKind::Dax {
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC
            } else {
                libc::MAP_SHARED
            };
        let got = self
            .tracee
            .mmap(
                tid,
                addr,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off,
            )
            .map_err(|e| ckpt(what, e))?;
        if got != addr {
            return Err(CkptError::Os {
                what,
                source: io::Error::other(format!(
                    "MAP_FIXED mapping landed at {got:#x} instead of {addr:#x}"
                )),
            });
        }
        Ok(())
    }

    fn unmap_to_reserved(&mut self, addr: usize, len: usize) -> Result<(), CkptError> {
        let what = "unmap a region in the traced process";
        let tid = self.tid(what)?;
        self.tracee
            .mmap(
                tid,
                addr,
                len,
                libc::PROT_NONE,
                RESERVE_FLAGS | libc::MAP_FIXED,
                -1,
                0,
            )
            .map(|_| ())
            .map_err(|e| ckpt(what, e))
    }

    fn release(&mut self, addr: usize, len: usize) -> Result<(), CkptError> {
        let what = "release a reservation in the traced process";
        let tid = self.tid(what)?;
        self.tracee
            .munmap(tid, addr, len)
            .map_err(|e| ckpt(what, e))
    }

    fn tracker(&mut self) -> Result<Box<dyn PageTracker>, CkptError> {
        Ok(Box::new(tracker_for(&self.tracee)?))
    }
}

/// A written-page tracker for the whole of `tracee` (stopped): a userfaultfd created in it by
/// injection, taken into the monitor with `pidfd_getfd` and closed in the tracee again, so its
/// descriptor table stays as it was.
pub fn tracker_for(tracee: &Tracee) -> Result<Tracker, CkptError> {
    let what = "create a userfaultfd in the traced process";
    let tid = tracee.control_thread().map_err(|e| ckpt(what, e))?;
    let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let remote = match tracee.userfaultfd(tid, base | UFFD_USER_MODE_ONLY) {
        Ok(fd) => fd,
        // Kernels before 5.11 do not know UFFD_USER_MODE_ONLY.
        Err(e) if e.errno() == Some(libc::EINVAL) => {
            tracee.userfaultfd(tid, base).map_err(|e| ckpt(what, e))?
        }
        Err(e) => return Err(ckpt(what, e)),
    };
    let taken = take_uffd_from(tracee.pid(), remote);
    let closed = tracee.close(tid, remote);
    let fd = taken?;
    closed.map_err(|e| ckpt("close the userfaultfd in the traced process", e))?;
    Ok(Tracker::builder().process(tracee.pid(), fd).build()?)
}
