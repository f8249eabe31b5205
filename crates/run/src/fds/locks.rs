//! File locks held by the tree (`flock`, POSIX `fcntl` locks, open-file-description locks),
//! read from the `lock:` lines of each descriptor's fdinfo and taken again at restore by their
//! owner on the restored descriptor: `flock` and OFD locks belong to the open file description
//! (taken by the monitor on its own descriptor of it), POSIX locks to the process (taken by
//! `fcntl(F_SETLK)` injected into it). A lock someone else took meanwhile makes the restore
//! fail, naming the file.

use std::os::fd::AsRawFd;

use serde::{Deserialize, Serialize};

use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

/// Who owns a lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockKind {
    /// `flock(2)`: the open file description.
    Flock,
    /// `F_OFD_SETLK`: the open file description.
    Ofd,
    /// `F_SETLK`: process `pid` (image pid).
    Posix { pid: i32 },
}

/// One lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockImage {
    pub kind: LockKind,
    /// The description it was taken through (for POSIX locks: one the owner holds on the file).
    pub object: usize,
    pub write: bool,
    pub start: u64,
    /// 0: to the end of the file, however long.
    pub len: u64,
}

/// A `lock:` line: `1: POSIX  ADVISORY  WRITE 13827 fe:00:9978338 5 14`.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    class: String,
    mode: String,
    write: bool,
    start: u64,
    len: u64,
}

fn parse(line: &str) -> Option<Line> {
    let t: Vec<&str> = line.split_whitespace().collect();
    // Leases show a "BREAKING"/"ACTIVE" word more; only the classes we handle parse fully.
    let (class, mode, kind) = (t.get(1)?, t.get(2)?, t.get(3)?);
    let start: u64 = t.get(6)?.parse().ok()?;
    let len = match *t.get(7)? {
        "EOF" => 0,
        end => end.parse::<u64>().ok()? - start + 1,
    };
    Some(Line {
        class: class.to_string(),
        mode: mode.to_string(),
        write: *kind == "WRITE",
        start,
        len,
    })
}

pub fn capture(c: &Capture<'_>) -> Result<Vec<LockImage>> {
    let mut out: Vec<LockImage> = Vec::new();
    for (i, d) in c.descs.iter().enumerate() {
        for h in &d.holders {
            for text in &h.locks {
                let l = parse(text).filter(|l| l.mode == "ADVISORY").ok_or_else(|| {
                    c.unsupported(
                        d,
                        &format!("it holds a lock kioku cannot take again ({text}): only advisory flock, POSIX and OFD locks can"),
                    )
                })?;
                let kind = match l.class.as_str() {
                    "FLOCK" => LockKind::Flock,
                    "OFDLCK" => LockKind::Ofd,
                    "POSIX" => LockKind::Posix {
                        pid: c.procs[h.proc].image_pid,
                    },
                    other => {
                        return Err(c.unsupported(
                            d,
                            &format!("it holds a {other} lock, which cannot be checkpointed"),
                        ))
                    }
                };
                if matches!(c.table.objects.get(i), Some(ObjectImage::Inherited { .. })) {
                    // Taken through a descriptor from outside: not the tree's to give back.
                    continue;
                }
                let lock = LockImage {
                    kind,
                    object: i,
                    write: l.write,
                    start: l.start,
                    len: l.len,
                };
                // Every holder's fdinfo shows the description's locks; a process's POSIX locks
                // show on each of its descriptors of the file.
                let dup = out.iter().any(|x| {
                    x.kind == lock.kind
                        && x.write == lock.write
                        && x.start == lock.start
                        && x.len == lock.len
                        && (x.object == i
                            || (matches!(x.kind, LockKind::Posix { .. })
                                && same_inode(c, x.object, i)))
                });
                if !dup {
                    out.push(lock);
                }
            }
        }
    }
    Ok(out)
}

fn same_inode(c: &Capture<'_>, a: usize, b: usize) -> bool {
    c.descs[a].dev == c.descs[b].dev && c.descs[a].ino == c.descs[b].ino
}

/// `struct flock` (x86-64) for a lock.
fn flock_bytes(l: &LockImage) -> Vec<u8> {
    let kind = if l.write {
        libc::F_WRLCK
    } else {
        libc::F_RDLCK
    } as i16;
    let mut b = Vec::with_capacity(32);
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&(libc::SEEK_SET as i16).to_ne_bytes());
    b.extend_from_slice(&[0u8; 4]);
    b.extend_from_slice(&(l.start as i64).to_ne_bytes());
    b.extend_from_slice(&(l.len as i64).to_ne_bytes());
    b.extend_from_slice(&0i32.to_ne_bytes());
    b.extend_from_slice(&[0u8; 4]);
    b
}

pub fn restore(r: &Restore<'_>) -> Result<()> {
    for l in &r.table.locks {
        let fd = r.made(l.object)?;
        let what = || format!("a lock of descriptor object {} ({:?})", l.object, l.kind);
        let refused = |e: std::io::Error| RunError::CannotRecreate {
            what: if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                format!(
                    "{}: another program holds a conflicting lock on the file now",
                    what()
                )
            } else {
                format!("{}: {e}", what())
            },
        };
        match &l.kind {
            LockKind::Flock => {
                let op = if l.write {
                    libc::LOCK_EX
                } else {
                    libc::LOCK_SH
                } | libc::LOCK_NB;
                // SAFETY: flock on a descriptor the restore holds.
                sys::cvt(unsafe { libc::flock(fd.as_raw_fd(), op) } as i64).map_err(refused)?;
            }
            LockKind::Ofd => {
                let mut b = flock_bytes(l);
                // SAFETY: the kernel reads a `struct flock` from `b` (32 bytes, its layout).
                let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, b.as_mut_ptr()) };
                sys::cvt(rc as i64).map_err(refused)?;
            }
            LockKind::Posix { pid } => {
                let (p, at) = r
                    .holders(l.object)
                    .find(|(p, _)| p.image_pid == *pid)
                    .ok_or_else(|| super::bad("POSIX lock owner does not hold its file"))?;
                let b = flock_bytes(l);
                p.remote.with_bytes(&b, &mut |addr| {
                    let rc = p.remote.syscall_raw(
                        libc::SYS_fcntl,
                        &[at as u64, libc::F_SETLK as u64, addr as u64],
                    )?;
                    if rc < 0 {
                        return Err(refused(std::io::Error::from_raw_os_error(-rc as i32)));
                    }
                    Ok(())
                })?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_lines_parse() {
        let l = parse("1: POSIX  ADVISORY  WRITE 13827 fe:00:9978338 5 14").unwrap();
        assert_eq!(
            l,
            Line {
                class: "POSIX".into(),
                mode: "ADVISORY".into(),
                write: true,
                start: 5,
                len: 10
            }
        );
        let l = parse("2: FLOCK  ADVISORY  READ 13827 fe:00:9978321 0 EOF").unwrap();
        assert_eq!((l.write, l.start, l.len), (false, 0, 0));
        assert!(parse("garbage").is_none());
    }
}
