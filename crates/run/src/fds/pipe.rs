//! Pipes and FIFOs within the tree: its capacity and the unread bytes in it (copied with `tee`
//! at the checkpoint, so nothing is taken out), recreated once; every description of either end
//! comes back with its own status flags (`O_NONBLOCK` is per description).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

/// A pipe within the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipeImage {
    /// Its inode at the checkpoint (informational).
    pub ino: u64,
    pub capacity: u64,
    /// A FIFO's path; `None` for a pipe (or a FIFO whose name was removed).
    pub path: Option<PathBuf>,
    /// Unread bytes.
    #[serde(with = "super::hexbytes")]
    pub data: Vec<u8>,
}

pub fn capture(c: &mut Capture<'_>, i: usize) -> Result<ObjectImage> {
    let d = &c.descs[i];
    let same: Vec<usize> = c.find(Some(d.dev), d.ino).collect();
    let reader = same.iter().copied().find(|&j| c.descs[j].readable());
    let writer = same.iter().any(|&j| c.descs[j].writable());
    // One side missing from the tree: closed (a pipeline's writer that exited), or held by a
    // process outside it.
    if (reader.is_none() || !writer) && held_outside(c, &d.link) {
        return c.external(
            d,
            "a pipe whose other end is outside the tree (its other end is not checkpointed)",
        );
    }
    let flags = d.flags();
    // One image per pipe: made at its first description.
    if let Some(pipe) = c.table.pipes.iter().position(|p| p.ino == d.ino) {
        return Ok(ObjectImage::Pipe { pipe, flags });
    }
    // Unread bytes matter only to a reader; a pipe nobody reads any more keeps none.
    let (data, capacity) = match reader {
        Some(r) => contents(c.descs[r].dup.as_fd()),
        None => contents_capacity(d.dup.as_fd()),
    }
    .map_err(|e| RunError::io(format!("copying the unread bytes of {}", c.name(d)), e))?;
    let path = if d.link.starts_with("pipe:[") || d.link.ends_with(" (deleted)") {
        None
    } else {
        Some(PathBuf::from(&d.link))
    };
    c.table.pipes.push(PipeImage {
        ino: d.ino,
        capacity,
        path,
        data,
    });
    Ok(ObjectImage::Pipe {
        pipe: c.table.pipes.len() - 1,
        flags,
    })
}

/// Whether a process outside the tree (not the monitor, which holds a duplicate of every
/// descriptor it captures) holds pipe `link` (`pipe:[ino]`).
fn held_outside(c: &Capture<'_>, link: &str) -> bool {
    let me = std::process::id() as i32;
    // The monitor's duplicates of what it captures are not other holders.
    let dups: Vec<i32> = c.descs.iter().map(|d| d.dup.as_raw_fd()).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if c.procs.iter().any(|p| p.pid == pid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for f in fds.flatten() {
            let fd = f.file_name().to_str().and_then(|s| s.parse::<i32>().ok());
            if pid == me && fd.is_some_and(|fd| dups.contains(&fd)) {
                continue;
            }
            if std::fs::read_link(f.path()).is_ok_and(|l| l.to_string_lossy() == link) {
                return true;
            }
        }
    }
    false
}

/// A pipe's capacity (for a pipe no one reads: no bytes to keep).
fn contents_capacity(fd: BorrowedFd<'_>) -> io::Result<(Vec<u8>, u64)> {
    // SAFETY: fcntl on a live descriptor.
    let cap = sys::cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) } as i64)?;
    Ok((Vec::new(), cap as u64))
}

/// The unread bytes of the pipe `fd` reads (without taking them out: `tee` into a pipe of our
/// own), and its capacity.
pub fn contents(fd: BorrowedFd<'_>) -> io::Result<(Vec<u8>, u64)> {
    // SAFETY: fcntl on a live descriptor.
    let cap = sys::cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) } as i64)?;
    let (r, w) = pipe2(libc::O_NONBLOCK)?;
    // Ours must hold all the program's can; a smaller one would make tee copy less.
    // SAFETY: fcntl on our own descriptor.
    sys::cvt(unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, cap as i32) } as i64)?;
    // SAFETY: tee between two pipe descriptors; nothing is consumed from `fd`.
    let n = unsafe {
        libc::tee(
            fd.as_raw_fd(),
            w.as_raw_fd(),
            cap as usize,
            libc::SPLICE_F_NONBLOCK,
        )
    };
    let mut data = Vec::new();
    match sys::cvt(n as i64) {
        Ok(0) => {}
        Ok(n) => {
            data.resize(n as usize, 0);
            let mut got = 0;
            while got < data.len() {
                // SAFETY: reads into the unfilled tail of `data`.
                let k = unsafe {
                    libc::read(
                        r.as_raw_fd(),
                        data[got..].as_mut_ptr().cast(),
                        data.len() - got,
                    )
                };
                got += sys::cvt(k as i64)? as usize;
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
        Err(e) => return Err(e),
    }
    Ok((data, cap as u64))
}

pub fn pipe2(flags: i32) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    sys::cvt(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | flags) } as i64)?;
    Ok((sys::owned(ends[0] as i64)?, sys::owned(ends[1] as i64)?))
}

/// A pipe made at restore: its first read and write descriptions (handed to the first
/// description of each end), and what further descriptions are opened from.
pub struct Made {
    read: Option<OwnedFd>,
    write: Option<OwnedFd>,
    anchor: OwnedFd,
}

pub fn restore(r: &mut Restore<'_>, pipe: usize, flags: i32) -> Result<OwnedFd> {
    let p = r
        .table
        .pipes
        .get(pipe)
        .ok_or_else(|| super::bad("pipe index out of range"))?;
    if r.pipes[pipe].is_none() {
        r.pipes[pipe] = Some(make(p)?);
    }
    let m = r.pipes[pipe].as_mut().expect("just made");
    let first = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => m.read.take(),
        libc::O_WRONLY => m.write.take(),
        _ => None,
    };
    let fd = match first {
        Some(fd) => fd,
        None => sys::reopen(
            m.anchor.as_fd(),
            flags & !libc::O_NONBLOCK | libc::O_NONBLOCK,
        )
        .map_err(|e| RunError::io("opening another end of a restored pipe", e))?,
    };
    sys::set_fl(fd.as_fd(), sys::settable(flags))
        .map_err(|e| RunError::io("F_SETFL on a restored pipe", e))?;
    Ok(fd)
}

fn make(p: &PipeImage) -> Result<Made> {
    let err = |what: &str, e: io::Error| RunError::CannotRecreate {
        what: format!("a pipe ({what}): {e}"),
    };
    let (read, write, anchor) = match &p.path {
        None => {
            let (rd, wr) = pipe2(0).map_err(|e| err("pipe2", e))?;
            let anchor = rd.try_clone().map_err(|e| err("dup", e))?;
            (Some(rd), Some(wr), anchor)
        }
        Some(path) => {
            let md = std::fs::metadata(path).map_err(|e| RunError::CannotRecreate {
                what: format!("the FIFO {}: {e}", path.display()),
            })?;
            if !std::os::unix::fs::FileTypeExt::is_fifo(&md.file_type()) {
                return Err(RunError::CannotRecreate {
                    what: format!("the FIFO {}: it is not a FIFO any more", path.display()),
                });
            }
            // Open for reading and writing: neither end waits for the other.
            let anchor = sys::open(path, libc::O_RDWR | libc::O_NONBLOCK)
                .map_err(|e| err(&path.display().to_string(), e))?;
            (None, None, anchor)
        }
    };
    let w = write.as_ref().map(|w| w.as_fd()).unwrap_or(anchor.as_fd());
    // SAFETY: fcntl on our own descriptor.
    let r = unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETPIPE_SZ, p.capacity as i32) };
    sys::cvt(r as i64).map_err(|e| err("setting its capacity", e))?;
    sys::write_all(w, &p.data).map_err(|e| err("refilling it", e))?;
    Ok(Made {
        read,
        write,
        anchor,
    })
}
