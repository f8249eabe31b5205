//! epoll: the registered set, read from fdinfo (`tfd: N events: E data: D …`). Each item is
//! keyed by the kernel on (file, descriptor number), so a later `EPOLL_CTL_MOD`/`DEL` by the
//! program must find it under the number it used: the items are added again by `epoll_ctl`
//! injected into a process that holds the epoll, with that process's own descriptor numbers,
//! after every plain descriptor exists. An item whose number was since closed or reused (the
//! file is still open elsewhere) is recreated as the kernel holds it: the file is put at that
//! number for the call and the number given back afterwards.
//!
//! Which file an item names is decided with `kcmp(KCMP_EPOLL_TFD)`, never by number alone.

use std::os::fd::{AsFd, OwnedFd};

use serde::{Deserialize, Serialize};

use super::{sys, with_fd_at, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

/// An epoll instance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpollImage {
    pub flags: i32,
    pub items: Vec<EpollItem>,
}

/// One registration: `object` added under descriptor number `fd`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpollItem {
    pub object: usize,
    pub fd: i32,
    pub events: u32,
    pub data: u64,
}

/// One `tfd:` line of an epoll's fdinfo.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    tfd: i32,
    events: u32,
    data: u64,
    ino: u64,
    sdev: u64,
}

fn parse(line: &str) -> Option<Line> {
    let t: Vec<&str> = line.split_whitespace().collect();
    let after = |k: &str| {
        let at = t.iter().position(|x| *x == k)?;
        t.get(at + 1).copied()
    };
    let prefixed = |k: &str| t.iter().find_map(|x| x.strip_prefix(k));
    Some(Line {
        tfd: t.first()?.parse().ok()?,
        events: u32::from_str_radix(after("events:")?, 16).ok()?,
        data: u64::from_str_radix(after("data:")?, 16).ok()?,
        ino: u64::from_str_radix(prefixed("ino:")?, 16).ok()?,
        sdev: u64::from_str_radix(prefixed("sdev:")?, 16).ok()?,
    })
}

pub fn capture(c: &mut Capture<'_>, i: usize) -> Result<ObjectImage> {
    let d = &c.descs[i];
    let h = &d.holders[0];
    let (epid, efd) = (c.procs[h.proc].pid, h.fd);
    let mut items = Vec::new();
    let mut seen: Vec<i32> = Vec::new();
    for text in d.info.lines_with("tfd:") {
        let l = parse(text).ok_or_else(|| {
            c.unsupported(d, &format!("its fdinfo line 'tfd: {text}' does not parse"))
        })?;
        // The how-manieth registration under this number (the kernel's `toff`).
        let toff = seen.iter().filter(|&&n| n == l.tfd).count() as u32;
        seen.push(l.tfd);
        let object = target(c, i, epid, efd, &l, toff)?.ok_or_else(|| {
            c.unsupported(
                d,
                &format!(
                    "its registration under descriptor number {} names a file no process of the tree holds",
                    l.tfd
                ),
            )
        })?;
        items.push(EpollItem {
            object,
            fd: l.tfd,
            events: l.events,
            data: l.data,
        });
    }
    Ok(ObjectImage::Epoll(EpollImage {
        flags: d.flags(),
        items,
    }))
}

/// The description registered as `l` in epoll `efd` of `epid`.
fn target(
    c: &Capture<'_>,
    i: usize,
    epid: i32,
    efd: i32,
    l: &Line,
    toff: u32,
) -> Result<Option<usize>> {
    let err = |e| {
        RunError::io(
            format!("kcmp(KCMP_EPOLL_TFD) on {}", c.name(&c.descs[i])),
            e,
        )
    };
    // Mostly the number still names the file in a process that holds the epoll.
    for h in &c.descs[i].holders {
        let pid = c.procs[h.proc].pid;
        if let Some(j) = c
            .descs
            .iter()
            .position(|d| d.holders.iter().any(|x| x.proc == h.proc && x.fd == l.tfd))
        {
            if sys::is_epoll_target(pid, l.tfd, epid, efd, l.tfd, toff).map_err(err)? {
                return Ok(Some(j));
            }
        }
    }
    // Else any description of that inode.
    let dev = sys::kernel_dev_to_user(l.sdev);
    for j in c.find(Some(dev), l.ino) {
        let x = &c.descs[j].holders[0];
        if sys::is_epoll_target(c.procs[x.proc].pid, x.fd, epid, efd, l.tfd, toff).map_err(err)? {
            return Ok(Some(j));
        }
    }
    Ok(None)
}

pub fn create(e: &EpollImage) -> Result<OwnedFd> {
    // SAFETY: plain system call.
    let fd = sys::owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) } as i64)
        .map_err(|err| RunError::io("epoll_create1", err))?;
    sys::set_fl(fd.as_fd(), sys::settable(e.flags))
        .map_err(|err| RunError::io("F_SETFL on an epoll", err))?;
    Ok(fd)
}

/// Adds the items of epoll object `i` by `epoll_ctl` in a process holding it.
pub fn register(r: &Restore<'_>, i: usize, e: &EpollImage) -> Result<()> {
    let holders: Vec<_> = r.holders(i).collect();
    let Some(&(first, first_efd)) = holders.first() else {
        return Ok(());
    };
    for item in &e.items {
        // A holder where the number names the file already; else the first, with the file put
        // at that number for the call.
        let at = holders
            .iter()
            .find(|(p, _)| r.object_at(p.image_pid, item.fd) == Some(item.object));
        let add = |p: &super::RestoreRef<'_>, efd: i32| -> Result<()> {
            let mut ev = Vec::with_capacity(12);
            ev.extend_from_slice(&item.events.to_ne_bytes());
            ev.extend_from_slice(&item.data.to_ne_bytes());
            p.remote.with_bytes(&ev, &mut |addr| {
                p.remote
                    .syscall(
                        "epoll_ctl(EPOLL_CTL_ADD)",
                        libc::SYS_epoll_ctl,
                        &[
                            efd as u64,
                            libc::EPOLL_CTL_ADD as u64,
                            item.fd as u64,
                            addr as u64,
                        ],
                    )
                    .map(|_| ())
            })
        };
        match at {
            Some(&(p, efd)) => add(p, efd)?,
            None => {
                let used: Vec<i32> = r
                    .table
                    .procs
                    .get(&first.image_pid)
                    .into_iter()
                    .flatten()
                    .map(|f| f.fd)
                    .collect();
                let file = r.made(item.object)?;
                with_fd_at(first.remote, file, item.fd, &used, &mut || {
                    add(first, first_efd)
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
    fn fdinfo_lines_parse() {
        let l = parse("       7 events: 80000019 data:                7  pos:0 ino:2527e sdev:f")
            .unwrap();
        assert_eq!(
            l,
            Line {
                tfd: 7,
                events: 0x8000_0019,
                data: 7,
                ino: 0x2527e,
                sdev: 0xf
            }
        );
        assert!(parse("x events: 1").is_none());
    }
}
