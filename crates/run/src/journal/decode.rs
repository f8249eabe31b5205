//! The trap decoder: from a thread stopped at a seccomp trap (its registers, its memory, its
//! `/proc` entries) to the [`Change`] the call is about to make, with paths made absolute and
//! physical (directories resolved through symlinks) as they are at this moment.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use kioku_proc::Regs;

use super::filter::{nr, FICLONE, FICLONERANGE, X32_BIT};
use super::format::Created;

/// What a change acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Descriptor `fd` of thread `tid` (its `/proc/TID/fd/FD`).
    Fd { tid: i32, fd: i32 },
    /// A path (absolute; final symlinks already followed where the call follows them).
    Path(PathBuf),
}

/// Where a write lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteAt {
    Offset(u64),
    /// At the descriptor's position (or at the end when it is O_APPEND).
    Position,
    /// At the end (RWF_APPEND).
    Append,
}

/// A file change a trapped call is about to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `len` bytes written at `at`.
    Write {
        target: Target,
        at: WriteAt,
        len: u64,
    },
    /// Size set to `len`.
    Truncate { target: Target, len: u64 },
    /// Bytes `[offset, offset+len)` replaced (hole punched, zeroed, reflinked; `len` None:
    /// to the end).
    Overwrite {
        target: Target,
        offset: u64,
        len: Option<u64>,
    },
    /// Bytes from `offset` on move (fallocate COLLAPSE_RANGE / INSERT_RANGE).
    Shift { target: Target, offset: u64 },
    /// Size or attributes may change, bytes do not (fallocate, chmod, chown, utimes).
    Attrs { target: Target },
    /// open with O_CREAT and/or O_TRUNC of `path` (final symlink followed when the open
    /// follows it).
    Open { path: PathBuf, flags: i32 },
    /// unlink (`dir`: rmdir).
    Remove { path: PathBuf, dir: bool },
    /// A name made by mkdir, mknod, symlink or link.
    Create { path: PathBuf, kind: Created },
    /// rename with renameat2 `flags`.
    Rename {
        from: PathBuf,
        to: PathBuf,
        flags: u32,
    },
    /// lseek on a standard stream.
    StdSeek {
        tid: i32,
        fd: i32,
        offset: i64,
        whence: i32,
    },
    /// close or close_range reaching a standard stream.
    StdClose,
    /// dup, F_DUPFD, dup2, dup3 with a standard stream as `old` or `new`.
    StdDup {
        tid: i32,
        old: i32,
        new: Option<i32>,
    },
    /// A call the journal cannot undo (named).
    Unsupported(String),
    /// Nothing to record (the call will fail, or changes no file).
    Nothing,
}

const AT_FDCWD: i32 = libc::AT_FDCWD;
const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const RWF_APPEND: u64 = 0x10;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_COLLAPSE_RANGE: i32 = 0x08;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;
const FALLOC_FL_INSERT_RANGE: i32 = 0x20;
/// Most iovecs a writev takes.
const IOV_MAX: u64 = 1024;

/// Decodes the call thread `tid` of process `pid` is stopped in.
pub fn decode(pid: i32, tid: i32, regs: &Regs) -> Change {
    let n = regs.orig_rax as u32;
    let a = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
    if n & X32_BIT != 0 {
        return Change::Unsupported(format!(
            "x32 system call {} (the journal reads x86-64 calls only)",
            n & !X32_BIT
        ));
    }
    let d = Decoder { pid, tid };
    match d.call(n, a) {
        Ok(c) => c,
        // Unreadable memory or /proc entries: the call itself will fail (EFAULT, EBADF), or
        // the process is gone.
        Err(e) => {
            tracing::trace!(pid, tid, nr = n, error = %e, "trap not decoded: nothing to record");
            Change::Nothing
        }
    }
}

struct Decoder {
    pid: i32,
    tid: i32,
}

fn fd(v: u64) -> i32 {
    v as u32 as i32
}

impl Decoder {
    fn call(&self, n: u32, a: [u64; 6]) -> io::Result<Change> {
        let fdt = |v: u64| Target::Fd {
            tid: self.tid,
            fd: fd(v),
        };
        Ok(match n {
            nr::WRITE => Change::Write {
                target: fdt(a[0]),
                at: WriteAt::Position,
                len: a[2],
            },
            nr::WRITEV => Change::Write {
                target: fdt(a[0]),
                at: WriteAt::Position,
                len: self.iov_len(a[1], a[2])?,
            },
            nr::PWRITE64 => Change::Write {
                target: fdt(a[0]),
                at: WriteAt::Offset(a[3]),
                len: a[2],
            },
            nr::PWRITEV => Change::Write {
                target: fdt(a[0]),
                at: WriteAt::Offset(a[3]),
                len: self.iov_len(a[1], a[2])?,
            },
            nr::PWRITEV2 => Change::Write {
                target: fdt(a[0]),
                at: if a[5] & RWF_APPEND != 0 {
                    WriteAt::Append
                } else if a[3] as i64 == -1 {
                    WriteAt::Position
                } else {
                    WriteAt::Offset(a[3])
                },
                len: self.iov_len(a[1], a[2])?,
            },
            nr::SENDFILE => Change::Write {
                target: fdt(a[0]),
                at: WriteAt::Position,
                len: a[3],
            },
            nr::SPLICE | nr::COPY_FILE_RANGE => Change::Write {
                target: fdt(a[2]),
                at: match a[3] {
                    0 => WriteAt::Position,
                    p => WriteAt::Offset(self.read_u64(p)?),
                },
                len: a[4],
            },
            nr::FTRUNCATE => Change::Truncate {
                target: fdt(a[0]),
                len: a[1],
            },
            nr::TRUNCATE => Change::Truncate {
                target: Target::Path(self.path(AT_FDCWD, a[0], true)?),
                len: a[1],
            },
            nr::FALLOCATE => {
                let (mode, off, len) = (a[1] as i32, a[2], a[3]);
                let target = fdt(a[0]);
                if mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE) != 0 {
                    Change::Shift {
                        target,
                        offset: off,
                    }
                } else if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
                    Change::Overwrite {
                        target,
                        offset: off,
                        len: Some(len),
                    }
                } else {
                    Change::Attrs { target }
                }
            }
            nr::IOCTL => match a[1] as u32 {
                FICLONE => Change::Overwrite {
                    target: fdt(a[0]),
                    offset: 0,
                    len: None,
                },
                FICLONERANGE => {
                    // struct file_clone_range { s64 src_fd; u64 src_offset, src_length, dest_offset; }
                    let mut b = [0u8; 32];
                    self.read(a[2], &mut b)?;
                    let len = u64::from_le_bytes(b[16..24].try_into().expect("8"));
                    Change::Overwrite {
                        target: fdt(a[0]),
                        offset: u64::from_le_bytes(b[24..32].try_into().expect("8")),
                        len: (len != 0).then_some(len),
                    }
                }
                _ => Change::Nothing,
            },
            nr::OPEN => self.open(AT_FDCWD, a[0], a[1] as i32)?,
            nr::OPENAT => self.open(fd(a[0]), a[1], a[2] as i32)?,
            nr::CREAT => self.open(
                AT_FDCWD,
                a[0],
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            )?,
            nr::OPENAT2 => {
                // struct open_how { u64 flags; u64 mode; u64 resolve; }
                let flags = self.read_u64(a[2])? as i32;
                if flags & (libc::O_CREAT | libc::O_TRUNC) == 0 {
                    Change::Nothing
                } else {
                    self.open(fd(a[0]), a[1], flags)?
                }
            }
            nr::OPEN_BY_HANDLE_AT => Change::Unsupported(
                "open_by_handle_at with O_TRUNC (a file named by handle, not path)".into(),
            ),
            nr::UNLINK => Change::Remove {
                path: self.path(AT_FDCWD, a[0], false)?,
                dir: false,
            },
            nr::RMDIR => Change::Remove {
                path: self.path(AT_FDCWD, a[0], false)?,
                dir: true,
            },
            nr::UNLINKAT => Change::Remove {
                path: self.path(fd(a[0]), a[1], false)?,
                dir: a[2] as i32 & libc::AT_REMOVEDIR != 0,
            },
            nr::MKDIR => self.create(AT_FDCWD, a[0], Created::Dir)?,
            nr::MKDIRAT => self.create(fd(a[0]), a[1], Created::Dir)?,
            nr::MKNOD => self.create(AT_FDCWD, a[0], Created::NonDir)?,
            nr::MKNODAT => self.create(fd(a[0]), a[1], Created::NonDir)?,
            nr::SYMLINK => self.create(AT_FDCWD, a[1], Created::NonDir)?,
            nr::SYMLINKAT => self.create(fd(a[1]), a[2], Created::NonDir)?,
            nr::LINK => self.create(AT_FDCWD, a[1], Created::NonDir)?,
            nr::LINKAT => self.create(fd(a[2]), a[3], Created::NonDir)?,
            nr::RENAME => Change::Rename {
                from: self.path(AT_FDCWD, a[0], false)?,
                to: self.path(AT_FDCWD, a[1], false)?,
                flags: 0,
            },
            nr::RENAMEAT => Change::Rename {
                from: self.path(fd(a[0]), a[1], false)?,
                to: self.path(fd(a[2]), a[3], false)?,
                flags: 0,
            },
            nr::RENAMEAT2 => Change::Rename {
                from: self.path(fd(a[0]), a[1], false)?,
                to: self.path(fd(a[2]), a[3], false)?,
                flags: a[4] as u32,
            },
            nr::CHMOD | nr::CHOWN | nr::UTIME | nr::UTIMES => Change::Attrs {
                target: Target::Path(self.path(AT_FDCWD, a[0], true)?),
            },
            nr::LCHOWN => Change::Attrs {
                target: Target::Path(self.path(AT_FDCWD, a[0], false)?),
            },
            nr::FCHMOD | nr::FCHOWN => Change::Attrs { target: fdt(a[0]) },
            nr::FUTIMESAT => Change::Attrs {
                target: self.at_target(fd(a[0]), a[1], 0)?,
            },
            nr::FCHMODAT => Change::Attrs {
                target: self.at_target(fd(a[0]), a[1], 0)?,
            },
            nr::FCHMODAT2 => Change::Attrs {
                target: self.at_target(fd(a[0]), a[1], a[3] as i32)?,
            },
            nr::FCHOWNAT => Change::Attrs {
                target: self.at_target(fd(a[0]), a[1], a[4] as i32)?,
            },
            nr::UTIMENSAT => Change::Attrs {
                target: self.at_target(fd(a[0]), a[1], a[3] as i32)?,
            },
            nr::LSEEK => Change::StdSeek {
                tid: self.tid,
                fd: fd(a[0]),
                offset: a[1] as i64,
                whence: a[2] as i32,
            },
            nr::CLOSE | nr::CLOSE_RANGE => Change::StdClose,
            nr::DUP | nr::FCNTL => Change::StdDup {
                tid: self.tid,
                old: fd(a[0]),
                new: None,
            },
            nr::DUP2 | nr::DUP3 => Change::StdDup {
                tid: self.tid,
                old: fd(a[0]),
                new: Some(fd(a[1])),
            },
            other => Change::Unsupported(format!(
                "system call {other} trapped but not known to the journal"
            )),
        })
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        kioku_proc::read_mem(self.pid, addr as usize, buf)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn read_u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Total length of an iovec array (saturating: a too-long one fails the call anyway).
    fn iov_len(&self, iov: u64, cnt: u64) -> io::Result<u64> {
        if cnt == 0 || cnt > IOV_MAX {
            return Ok(0);
        }
        let mut b = vec![0u8; cnt as usize * 16];
        self.read(iov, &mut b)?;
        Ok(b.chunks_exact(16)
            .map(|c| u64::from_le_bytes(c[8..16].try_into().expect("8")))
            .fold(0u64, u64::saturating_add))
    }

    /// A NUL-terminated string of at most PATH_MAX bytes, read page by page (it may end just
    /// before an unmapped page).
    fn cstr(&self, addr: u64) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < libc::PATH_MAX as usize {
            let chunk = (4096 - (at % 4096)) as usize;
            let mut b = vec![0u8; chunk];
            self.read(at, &mut b)?;
            if let Some(z) = b.iter().position(|&c| c == 0) {
                out.extend_from_slice(&b[..z]);
                return Ok(out);
            }
            out.extend_from_slice(&b);
            at += chunk as u64;
        }
        Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
    }

    /// The absolute, physical path a call with (`dirfd`, path at `addr`) names.
    fn path(&self, dirfd: i32, addr: u64, follow: bool) -> io::Result<PathBuf> {
        let raw = self.cstr(addr)?;
        if raw.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        resolve(self.tid, dirfd, &raw, follow)
    }

    /// The target of an `*at` call that may name its descriptor itself (empty or NULL path).
    fn at_target(&self, dirfd: i32, addr: u64, flags: i32) -> io::Result<Target> {
        if addr == 0 {
            return Ok(Target::Fd {
                tid: self.tid,
                fd: dirfd,
            });
        }
        let raw = self.cstr(addr)?;
        if raw.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
            return Ok(Target::Fd {
                tid: self.tid,
                fd: dirfd,
            });
        }
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        Ok(Target::Path(resolve(self.tid, dirfd, &raw, follow)?))
    }

    fn open(&self, dirfd: i32, addr: u64, flags: i32) -> io::Result<Change> {
        const O_TMPFILE_BIT: i32 = 0o20000000;
        if flags & O_TMPFILE_BIT != 0 || flags & (libc::O_CREAT | libc::O_TRUNC) == 0 {
            // An unnamed file, or nothing created or cut.
            return Ok(Change::Nothing);
        }
        let excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
        let follow = flags & libc::O_NOFOLLOW == 0 && !excl;
        Ok(Change::Open {
            path: self.path(dirfd, addr, follow)?,
            flags,
        })
    }

    fn create(&self, dirfd: i32, addr: u64, kind: Created) -> io::Result<Change> {
        Ok(Change::Create {
            path: self.path(dirfd, addr, false)?,
            kind,
        })
    }
}

/// What `/proc/TID/fd/FD` (or `/proc/TID/cwd` for AT_FDCWD) points at.
pub fn dir_of(tid: i32, dirfd: i32) -> io::Result<PathBuf> {
    let link = if dirfd == AT_FDCWD {
        format!("/proc/{tid}/cwd")
    } else {
        format!("/proc/{tid}/fd/{dirfd}")
    };
    std::fs::read_link(link)
}

/// Resolves `raw` as the kernel would for thread `tid` relative to `dirfd`: the directory part
/// through symlinks (physically), the final component as is — or followed, if `follow`.
pub fn resolve(tid: i32, dirfd: i32, raw: &[u8], follow: bool) -> io::Result<PathBuf> {
    let p = Path::new(OsStr::from_bytes(raw));
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir_of(tid, dirfd)?.join(p)
    };
    let mut path = physical(&abs);
    if follow {
        for _ in 0..40 {
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    let target = std::fs::read_link(&path)?;
                    let parent = path.parent().unwrap_or(Path::new("/")).to_path_buf();
                    path = physical(&parent.join(target));
                }
                _ => return Ok(path),
            }
        }
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(path)
}

/// `p` with its directory part resolved through symlinks (or, where it does not exist,
/// normalised lexically: the call will fail there anyway) and its last component kept.
pub fn physical(p: &Path) -> PathBuf {
    let last = p.components().next_back();
    match last {
        Some(Component::Normal(name)) => {
            let parent = p.parent().unwrap_or(Path::new("/"));
            let dir = std::fs::canonicalize(parent).unwrap_or_else(|_| lexical(parent));
            dir.join(name)
        }
        // "/", "." or ".." at the end: the whole path is a directory.
        _ => std::fs::canonicalize(p).unwrap_or_else(|_| lexical(p)),
    }
}

fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Position and status flags of descriptor `fd` of thread `tid` (`/proc/TID/fdinfo/FD`).
pub fn fdinfo(tid: i32, fd: i32) -> io::Result<(u64, i32)> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}"))?;
    let mut pos = None;
    let mut flags = None;
    for line in s.lines() {
        if let Some(v) = line.strip_prefix("pos:") {
            pos = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("flags:") {
            flags = i32::from_str_radix(v.trim(), 8).ok();
        }
    }
    match (pos, flags) {
        (Some(p), Some(f)) => Ok((p, f)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected /proc/{tid}/fdinfo/{fd}"),
        )),
    }
}

/// renameat2 flags.
pub fn rename_flags(flags: u32) -> (bool, bool) {
    (flags & RENAME_NOREPLACE != 0, flags & RENAME_EXCHANGE != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_physically() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        std::fs::write(real.join("f"), b"x").unwrap();
        std::os::unix::fs::symlink("f", real.join("fl")).unwrap();
        let real = std::fs::canonicalize(&real).unwrap();
        let me = std::process::id() as i32;
        let p = d.path().join("link/fl");
        let raw = p.as_os_str().as_bytes();
        assert_eq!(resolve(me, AT_FDCWD, raw, false).unwrap(), real.join("fl"));
        assert_eq!(resolve(me, AT_FDCWD, raw, true).unwrap(), real.join("f"));
        let q = d.path().join("link/../link/new");
        assert_eq!(
            resolve(me, AT_FDCWD, q.as_os_str().as_bytes(), true).unwrap(),
            real.join("new")
        );
        assert_eq!(lexical(Path::new("/a/b/../c/./d")), Path::new("/a/c/d"));
    }

    #[test]
    fn fdinfo_reads_position_and_flags() {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::fd::AsRawFd;
        let d = tempfile::tempdir().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.path().join("a"))
            .unwrap();
        f.write_all(b"hello").unwrap();
        f.seek(SeekFrom::Start(2)).unwrap();
        let (pos, flags) = fdinfo(std::process::id() as i32, f.as_raw_fd()).unwrap();
        assert_eq!(pos, 2);
        assert!(flags & libc::O_APPEND != 0);
    }
}
