//! inotify: its watches, added again by path with the same masks so the watch descriptors keep
//! their numbers (added in wd order; gaps are filled with throw-away watches removed after,
//! whose `IN_IGNORED` events are read away before the program gets the descriptor).
//!
//! The path of a watched inode comes from the file handle fdinfo shows, opened with
//! `open_by_handle_at` (which needs `CAP_DAC_READ_SEARCH`); a watch whose file cannot be found
//! again (deleted, or no privilege) refuses the checkpoint. Events queued and not read yet would
//! be lost: a checkpoint that finds some is refused as not settled, and a later one retried.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::scan::Desc;
use super::{sys, Capture, ObjectImage};
use crate::error::{Result, RunError};

/// An inotify instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InotifyImage {
    pub flags: i32,
    /// By watch descriptor, ascending.
    pub watches: Vec<Watch>,
}

/// One watch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watch {
    pub wd: i32,
    pub path: PathBuf,
    pub mask: u32,
}

/// One `inotify wd:… ino:… sdev:… mask:… … fhandle-bytes:… fhandle-type:… f_handle:…` line.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    wd: i32,
    ino: u64,
    sdev: u64,
    mask: u32,
    handle_type: i32,
    handle: Vec<u8>,
}

fn parse(line: &str) -> Option<Line> {
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(k)?.strip_prefix(':'))
    };
    let hex = |k: &str| u64::from_str_radix(field(k)?, 16).ok();
    Some(Line {
        wd: field("wd")?.parse().ok()?,
        ino: hex("ino")?,
        sdev: hex("sdev")?,
        mask: hex("mask")? as u32,
        handle_type: hex("fhandle-type")? as i32,
        handle: crate::image::unhex(field("f_handle")?)?,
    })
}

pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    let mut queued: i32 = 0;
    sys::ioctl_ptr(d.dup.as_fd(), libc::FIONREAD, &mut queued)
        .map_err(|e| RunError::io(format!("FIONREAD on {}", c.name(d)), e))?;
    if queued > 0 {
        return Err(RunError::Unsettled {
            what: format!("{} holds {queued} bytes of events not read yet", c.name(d)),
        });
    }
    let mut watches = Vec::new();
    for text in d.info.lines_with("inotify") {
        let l = parse(text).ok_or_else(|| {
            c.unsupported(
                d,
                &format!("its fdinfo line 'inotify {text}' does not parse"),
            )
        })?;
        let path = resolve(&l).map_err(|why| {
            c.unsupported(
                d,
                &format!(
                    "the file of its watch {} (inode {}) cannot be found again: {why}",
                    l.wd, l.ino
                ),
            )
        })?;
        watches.push(Watch {
            wd: l.wd,
            path,
            mask: l.mask,
        });
    }
    watches.sort_by_key(|w| w.wd);
    Ok(ObjectImage::Inotify(InotifyImage {
        flags: d.flags(),
        watches,
    }))
}

/// The path of a watched inode, from its file handle.
fn resolve(l: &Line) -> std::result::Result<PathBuf, String> {
    let dev = sys::kernel_dev_to_user(l.sdev);
    let mount = mount_of(dev).ok_or("no mount of its file system is visible to kioku")?;
    let mfd = sys::open(&mount, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| e.to_string())?;
    // struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[]; }
    let mut fh = Vec::with_capacity(8 + l.handle.len());
    fh.extend_from_slice(&(l.handle.len() as u32).to_ne_bytes());
    fh.extend_from_slice(&l.handle_type.to_ne_bytes());
    fh.extend_from_slice(&l.handle);
    // SAFETY: the kernel reads a file_handle of `handle_bytes` bytes from `fh`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mfd.as_raw_fd(),
            fh.as_mut_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    let fd = sys::owned(r).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            "open_by_handle_at needs CAP_DAC_READ_SEARCH (run kioku as root)".to_string()
        } else {
            format!("open_by_handle_at: {e}")
        }
    })?;
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let path = std::fs::read_link(&link).map_err(|e| e.to_string())?;
    if path.to_string_lossy().ends_with(" (deleted)") {
        return Err("it was deleted".into());
    }
    // The name must lead to that very inode.
    match std::fs::metadata(&path) {
        Ok(m) if m.ino() == l.ino && m.dev() == dev => Ok(path),
        _ => Err(format!("{} is not the watched file", path.display())),
    }
}

/// A mount point of the file system with device number `dev` (its root mount preferred).
fn mount_of(dev: u64) -> Option<PathBuf> {
    let mounts = crate::mountinfo::mounts().ok()?;
    let mut on_dev = mounts.into_iter().filter(|m| m.dev == dev);
    let first = on_dev.next()?;
    if first.whole {
        return Some(first.point);
    }
    Some(on_dev.find(|m| m.whole).unwrap_or(first).point)
}

fn add_watch(fd: BorrowedFd<'_>, path: &Path, mask: u32) -> io::Result<i32> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    Ok(
        sys::cvt(unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) } as i64)?
            as i32,
    )
}

pub fn restore(n: &InotifyImage) -> Result<OwnedFd> {
    let err = |what: String| {
        move |e: io::Error| RunError::CannotRecreate {
            what: format!("{what}: {e}"),
        }
    };
    // SAFETY: plain system call.
    let fd =
        sys::owned(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) } as i64)
            .map_err(err("an inotify instance".into()))?;
    // Throw-away watches for the numbers in between, each on an inode of its own (a memfd).
    let mut fillers: Vec<(i32, OwnedFd)> = Vec::new();
    let mut next = 1;
    for w in &n.watches {
        while next < w.wd {
            // SAFETY: memfd_create with a static NUL-terminated name.
            let m = sys::owned(unsafe {
                libc::memfd_create(c"kioku-inotify-gap".as_ptr(), libc::MFD_CLOEXEC)
            } as i64)
            .map_err(err("a placeholder for an inotify watch".into()))?;
            let p = PathBuf::from(format!("/proc/self/fd/{}", m.as_raw_fd()));
            let wd = add_watch(fd.as_fd(), &p, libc::IN_ATTRIB)
                .map_err(err("a placeholder inotify watch".into()))?;
            fillers.push((wd, m));
            next = wd + 1;
        }
        let wd = add_watch(fd.as_fd(), &w.path, w.mask)
            .map_err(err(format!("the inotify watch of {}", w.path.display())))?;
        if wd != w.wd {
            return Err(RunError::CannotRecreate {
                what: format!(
                    "the inotify watch of {}: it got number {wd}, the program had {}",
                    w.path.display(),
                    w.wd
                ),
            });
        }
        next = wd + 1;
    }
    for (wd, _) in &fillers {
        // SAFETY: removes a watch of our own instance.
        unsafe { libc::inotify_rm_watch(fd.as_raw_fd(), *wd) };
    }
    drop(fillers);
    // The removals queued IN_IGNORED events: read them away.
    let mut buf = vec![0u8; 4096];
    // SAFETY: reads into `buf` from our non-blocking instance until it is empty.
    while unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    sys::set_fl(fd.as_fd(), sys::settable(n.flags))
        .map_err(err("F_SETFL on an inotify instance".into()))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_lines_parse() {
        let l = parse(" wd:2 ino:13 sdev:fe00000 mask:84000100 ignored_mask:0 fhandle-bytes:8 fhandle-type:1 f_handle:1300000000000000").unwrap();
        assert_eq!(l.wd, 2);
        assert_eq!(l.ino, 0x13);
        assert_eq!(l.sdev, 0xfe00000);
        assert_eq!(l.mask, 0x8400_0100);
        assert_eq!(l.handle_type, 1);
        assert_eq!(l.handle, vec![0x13, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn watches_keep_their_numbers_across_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, b"").unwrap();
        let img = InotifyImage {
            flags: libc::O_RDONLY | libc::O_NONBLOCK,
            watches: vec![
                Watch {
                    wd: 3,
                    path: a.clone(),
                    mask: libc::IN_MODIFY,
                },
                Watch {
                    wd: 6,
                    path: b.clone(),
                    mask: libc::IN_MODIFY,
                },
            ],
        };
        let fd = restore(&img).unwrap();
        let mut buf = [0u8; 256];
        // SAFETY: reads into `buf`; nothing may be queued.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(n, -1, "no placeholder event is left over");
        std::fs::write(&b, b"x").unwrap();
        // SAFETY: as above.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        assert!(n >= 16);
        let wd = i32::from_ne_bytes(buf[..4].try_into().unwrap());
        assert_eq!(wd, 6);
    }
}
