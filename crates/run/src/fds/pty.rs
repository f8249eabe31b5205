//! Pseudo-terminals whose both ends are in the tree: a new pair with the same termios, window
//! size, packet mode and lock state; the slave reopened by its new `/dev/pts` path (its number
//! changes). A session leader's controlling terminal is set again (`TIOCSCTTY` injected into
//! it) with its foreground process group. Bytes in flight in either direction cannot be read
//! without taking them: a checkpoint that finds some is refused as not settled.
//! A terminal whose other side is outside the tree is the restoring command's own at fds 0–2.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

const TIOCGPTN: u64 = 0x8004_5430;
const TIOCSPTLCK: u64 = 0x4004_5431;
const TIOCGPKT: u64 = 0x8004_5438;
const TIOCGPTLCK: u64 = 0x8004_5439;

/// A pseudo-terminal pair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtyImage {
    /// Its number at the checkpoint (`/dev/pts/N`).
    pub index: u32,
    pub termios: Termios,
    /// rows, columns, x pixels, y pixels.
    pub winsize: [u16; 4],
    pub packet: bool,
    pub locked: bool,
}

/// `struct termios` as the C library shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Termios {
    pub iflag: u32,
    pub oflag: u32,
    pub cflag: u32,
    pub lflag: u32,
    pub line: u8,
    pub cc: Vec<u8>,
    pub ispeed: u32,
    pub ospeed: u32,
}

/// A session leader of the tree whose controlling terminal is one of its pseudo-terminals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllingTty {
    /// Image pid of the session leader.
    pub session: i32,
    /// Index into `FdTable::ptys`.
    pub pty: usize,
    /// Image pid of the foreground process group, when it is in the tree.
    pub foreground: Option<i32>,
}

fn is_master(link: &str) -> bool {
    link == "/dev/ptmx" || link == "/dev/pts/ptmx"
}

fn slave_index(link: &str) -> Option<u32> {
    link.strip_prefix("/dev/pts/")?.parse().ok()
}

/// A pseudo-terminal end, or `None` when `i` is another character device.
pub fn capture(c: &mut Capture<'_>, i: usize) -> Result<Option<ObjectImage>> {
    let descs = c.descs;
    let d = &descs[i];
    let index = if is_master(&d.link) {
        d.info.num("tty-index").map(|v| v as u32)
    } else {
        slave_index(&d.link)
    };
    let Some(index) = index else { return Ok(None) };
    let master = descs
        .iter()
        .position(|x| is_master(&x.link) && x.info.num("tty-index") == Some(index as u64));
    let slave = descs
        .iter()
        .position(|x| slave_index(&x.link) == Some(index));
    let (Some(m), Some(s)) = (master, slave) else {
        return c
            .external(
                d,
                "a terminal whose other side is outside the tree (only at descriptors 0-2 does it come back, as the restoring command's own)",
            )
            .map(Some);
    };
    let flags = d.flags();
    let pty = match c.table.ptys.iter().position(|p| p.index == index) {
        Some(p) => p,
        None => {
            let img = describe_pair(c, m, s, index)?;
            c.table.ptys.push(img);
            c.table.ptys.len() - 1
        }
    };
    Ok(Some(if is_master(&d.link) {
        ObjectImage::PtyMaster { pty, flags }
    } else {
        ObjectImage::PtySlave { pty, flags }
    }))
}

fn describe_pair(c: &Capture<'_>, m: usize, s: usize, index: u32) -> Result<PtyImage> {
    let (md, sd) = (&c.descs[m], &c.descs[s]);
    let io = |what: &'static str| {
        let name = c.name(md);
        move |e| RunError::io(format!("{what} on {name}"), e)
    };
    for x in [md, sd] {
        let n = sys::ioctl_int(x.dup.as_fd(), libc::FIONREAD).map_err(io("FIONREAD"))?;
        if n > 0 {
            return Err(RunError::Unsettled {
                what: format!(
                    "{} has {n} bytes in flight that its reader has not read yet",
                    c.name(x)
                ),
            });
        }
    }
    // SAFETY: a zeroed termios is a valid buffer; tcgetattr on the master reports the slave's
    // settings (the pair's terminal).
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: the C library writes one termios.
    sys::cvt(unsafe { libc::tcgetattr(md.dup.as_raw_fd(), &mut t) } as i64)
        .map_err(io("tcgetattr"))?;
    let mut ws: libc::winsize = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    sys::ioctl_ptr(md.dup.as_fd(), libc::TIOCGWINSZ, &mut ws).map_err(io("TIOCGWINSZ"))?;
    let packet = sys::ioctl_int(md.dup.as_fd(), TIOCGPKT).map_err(io("TIOCGPKT"))? != 0;
    let locked = sys::ioctl_int(md.dup.as_fd(), TIOCGPTLCK).map_err(io("TIOCGPTLCK"))? != 0;
    Ok(PtyImage {
        index,
        termios: Termios {
            iflag: t.c_iflag,
            oflag: t.c_oflag,
            cflag: t.c_cflag,
            lflag: t.c_lflag,
            line: t.c_line,
            cc: t.c_cc.to_vec(),
            ispeed: t.c_ispeed,
            ospeed: t.c_ospeed,
        },
        winsize: [ws.ws_row, ws.ws_col, ws.ws_xpixel, ws.ws_ypixel],
        packet,
        locked,
    })
}

/// Session leaders of the tree whose controlling terminal is a pseudo-terminal of the tree.
pub fn controlling(c: &Capture<'_>) -> Result<Vec<ControllingTty>> {
    let mut out = Vec::new();
    if c.table.ptys.is_empty() {
        return Ok(out);
    }
    for p in c.procs {
        let stat = crate::sys::read_proc(format!("/proc/{}/stat", p.pid))?;
        let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let f: Vec<i64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        // Fields 6 (session), 7 (tty_nr), 8 (tpgid); `f[0]` is field 3.
        let (session, tty, tpgid) = (f.get(3), f.get(4), f.get(5));
        let (Some(&session), Some(&tty), Some(&tpgid)) = (session, tty, tpgid) else {
            continue;
        };
        if session != p.pid as i64 || tty == 0 {
            continue;
        }
        let pty = c.descs.iter().enumerate().find_map(|(j, d)| {
            if d.file_type() == libc::S_IFCHR && d.rdev == tty as u64 {
                match c.table.objects.get(j) {
                    Some(ObjectImage::PtySlave { pty, .. }) => Some(*pty),
                    _ => None,
                }
            } else {
                None
            }
        });
        if let Some(pty) = pty {
            let foreground = c
                .procs
                .iter()
                .find(|q| q.pid as i64 == tpgid)
                .map(|q| q.image_pid);
            out.push(ControllingTty {
                session: p.image_pid,
                pty,
                foreground,
            });
        }
    }
    Ok(out)
}

/// A pair made at restore: the master until its description is installed, and the new slave
/// path.
pub struct Made {
    master: Option<OwnedFd>,
    anchor: OwnedFd,
    slave: PathBuf,
}

fn make(p: &PtyImage) -> Result<Made> {
    let err = |what: &'static str| {
        move |e: std::io::Error| RunError::CannotRecreate {
            what: format!("a pseudo-terminal ({what}): {e}"),
        }
    };
    let m = sys::open(
        std::path::Path::new("/dev/ptmx"),
        libc::O_RDWR | libc::O_NOCTTY,
    )
    .map_err(err("opening /dev/ptmx"))?;
    sys::ioctl_ptr(m.as_fd(), TIOCSPTLCK, &mut 0i32).map_err(err("unlocking"))?;
    let n = sys::ioctl_int(m.as_fd(), TIOCGPTN).map_err(err("its number"))?;
    let t = &p.termios;
    // SAFETY: a zeroed termios is valid; every field is set from the image.
    let mut tio: libc::termios = unsafe { std::mem::zeroed() };
    tio.c_iflag = t.iflag;
    tio.c_oflag = t.oflag;
    tio.c_cflag = t.cflag;
    tio.c_lflag = t.lflag;
    tio.c_line = t.line;
    let k = t.cc.len().min(tio.c_cc.len());
    tio.c_cc[..k].copy_from_slice(&t.cc[..k]);
    tio.c_ispeed = t.ispeed;
    tio.c_ospeed = t.ospeed;
    // SAFETY: the C library reads one termios.
    sys::cvt(unsafe { libc::tcsetattr(m.as_raw_fd(), libc::TCSANOW, &tio) } as i64)
        .map_err(err("termios"))?;
    let mut ws = libc::winsize {
        ws_row: p.winsize[0],
        ws_col: p.winsize[1],
        ws_xpixel: p.winsize[2],
        ws_ypixel: p.winsize[3],
    };
    sys::ioctl_ptr(m.as_fd(), libc::TIOCSWINSZ, &mut ws).map_err(err("window size"))?;
    let mut packet = p.packet as i32;
    sys::ioctl_ptr(m.as_fd(), libc::TIOCPKT, &mut packet).map_err(err("packet mode"))?;
    let anchor = m.try_clone().map_err(err("dup"))?;
    Ok(Made {
        master: Some(m),
        anchor,
        slave: PathBuf::from(format!("/dev/pts/{n}")),
    })
}

fn made<'a>(r: &'a mut Restore<'_>, pty: usize) -> Result<&'a mut Made> {
    let p = r
        .table
        .ptys
        .get(pty)
        .ok_or_else(|| super::bad("pty index out of range"))?;
    if r.ptys[pty].is_none() {
        r.ptys[pty] = Some(make(p)?);
    }
    Ok(r.ptys[pty].as_mut().expect("just made"))
}

pub fn restore_master(r: &mut Restore<'_>, pty: usize, flags: i32) -> Result<OwnedFd> {
    let m = made(r, pty)?
        .master
        .take()
        .ok_or_else(|| super::bad("a pseudo-terminal with two master descriptions"))?;
    sys::set_fl(m.as_fd(), sys::settable(flags))
        .map_err(|e| RunError::io("F_SETFL on a pseudo-terminal", e))?;
    Ok(m)
}

pub fn restore_slave(r: &mut Restore<'_>, pty: usize, flags: i32) -> Result<OwnedFd> {
    let path = made(r, pty)?.slave.clone();
    // Never the monitor's controlling terminal.
    sys::open(&path, (flags & !libc::O_CREAT) | libc::O_NOCTTY).map_err(|e| {
        RunError::CannotRecreate {
            what: format!("the pseudo-terminal {}: {e}", path.display()),
        }
    })
}

/// After every descriptor is in place: the lock state, and the controlling terminals.
pub fn finish(r: &mut Restore<'_>) -> Result<()> {
    for (i, p) in r.table.ptys.iter().enumerate() {
        if let (true, Some(m)) = (p.locked, &r.ptys[i]) {
            sys::ioctl_ptr(m.anchor.as_fd(), TIOCSPTLCK, &mut 1i32)
                .map_err(|e| RunError::io("locking a pseudo-terminal", e))?;
        }
    }
    let table = r.table;
    for ct in &table.controlling {
        let foreground = ct.foreground.map(|pid| r.ctx.pid_in_tree(pid));
        let Some(m) = &r.ptys.get(ct.pty).and_then(|m| m.as_ref()) else {
            continue;
        };
        let p = r.proc(ct.session)?;
        let slave = sys::open(&m.slave, libc::O_RDWR | libc::O_NOCTTY).map_err(|e| {
            RunError::CannotRecreate {
                what: format!("the controlling terminal {}: {e}", m.slave.display()),
            }
        })?;
        let used: Vec<i32> = r
            .table
            .procs
            .get(&ct.session)
            .into_iter()
            .flatten()
            .map(|f| f.fd)
            .collect();
        let at = used.iter().copied().max().unwrap_or(2) + 1;
        super::with_fd_at(p.remote, slave.as_fd(), at, &used, &mut || {
            p.remote
                .syscall(
                    "ioctl(TIOCSCTTY)",
                    libc::SYS_ioctl,
                    &[at as u64, libc::TIOCSCTTY, 0],
                )
                .map_err(|e| RunError::CannotRecreate {
                    what: format!("the controlling terminal of session {}: {e}", ct.session),
                })?;
            if let Some(fg) = foreground {
                p.remote.with_bytes(&fg.to_ne_bytes(), &mut |addr| {
                    p.remote
                        .syscall(
                            "ioctl(TIOCSPGRP)",
                            libc::SYS_ioctl,
                            &[at as u64, libc::TIOCSPGRP, addr as u64],
                        )
                        .map(|_| ())
                })?;
            }
            Ok(())
        })?;
    }
    Ok(())
}
