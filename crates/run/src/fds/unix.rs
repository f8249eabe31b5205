//! Unix sockets within the tree: connected pairs (stream, datagram, seqpacket) with the data
//! queued for each end, read with `MSG_PEEK` at an advancing `SO_PEEK_OFF` (so nothing is
//! taken out; one message at a time for datagrams), shutdown state and options; listening
//! sockets bound to a path or an abstract name (rebound and listening with the same backlog);
//! bound datagram sockets and datagram sockets connected to a named socket.
//!
//! Refused: descriptors in flight (SCM_RIGHTS in a queue), a stream connected to a process
//! outside the tree. Not yet settled (a later checkpoint may succeed): connections a listener
//! has not accepted, unread datagrams that came from outside the tree.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::sockopt::{self, SockOpt};
use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

const TCP_ESTABLISHED: u8 = 1;
const TCP_LISTEN: u8 = 10;
const SEND_SHUTDOWN: u8 = 2;
const RCV_SHUTDOWN: u8 = 1;
/// Largest datagram the capture reads.
const MAX_DATAGRAM: usize = 4 << 20;

/// A Unix socket address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnixName {
    Path(PathBuf),
    /// An abstract-namespace name (without the leading NUL).
    Abstract(#[serde(with = "super::hexbytes")] Vec<u8>),
}

impl UnixName {
    /// `struct sockaddr_un` bytes.
    pub fn sockaddr(&self) -> Vec<u8> {
        let mut b = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        match self {
            UnixName::Path(p) => {
                b.extend_from_slice(p.as_os_str().as_bytes());
                b.push(0);
            }
            UnixName::Abstract(a) => {
                b.push(0);
                b.extend_from_slice(a);
            }
        }
        b
    }

    fn show(&self) -> String {
        match self {
            UnixName::Path(p) => p.display().to_string(),
            UnixName::Abstract(a) => format!("@{}", String::from_utf8_lossy(a)),
        }
    }
}

/// A Unix socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixImage {
    /// `SOCK_STREAM`, `SOCK_DGRAM` or `SOCK_SEQPACKET`.
    pub kind: i32,
    pub flags: i32,
    /// Bound name (a connected pair's names are not kept).
    pub name: Option<UnixName>,
    /// Mode, owner and group of the socket file of a path name.
    pub file: Option<(u32, u32, u32)>,
    pub role: UnixRole,
    /// Received, not read yet.
    pub queue: UnixQueue,
    /// `RCV_SHUTDOWN` (1) | `SEND_SHUTDOWN` (2).
    pub shutdown: u8,
    pub options: Vec<SockOpt>,
}

/// How it is connected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnixRole {
    Listening {
        backlog: u32,
    },
    /// Connected to object `peer`, which is connected back.
    Pair {
        peer: usize,
    },
    /// A datagram socket connected to object `peer` (a bound socket of the tree).
    ConnectedTo {
        peer: usize,
    },
    /// A datagram socket connected to a named socket outside the tree.
    ConnectedOut {
        name: UnixName,
    },
    /// A stream or seqpacket socket whose peer has closed.
    PeerClosed,
    Unconnected,
}

/// Data received and not read yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnixQueue {
    Stream(#[serde(with = "super::hexbytes")] Vec<u8>),
    Messages(#[serde(with = "super::hexlist")] Vec<Vec<u8>>),
}

impl UnixQueue {
    fn is_empty(&self) -> bool {
        match self {
            UnixQueue::Stream(b) => b.is_empty(),
            UnixQueue::Messages(m) => m.is_empty(),
        }
    }
}

/// Made in the restore's first pass: others connect to these.
pub fn is_endpoint(o: &ObjectImage) -> bool {
    match o {
        ObjectImage::Unix(u) => match u.role {
            UnixRole::Listening { .. } => true,
            UnixRole::Unconnected => u.name.is_some(),
            _ => false,
        },
        _ => false,
    }
}

pub fn capture(c: &mut Capture<'_>, i: usize) -> Result<ObjectImage> {
    let d = &c.descs[i];
    let ino = d.ino as u32;
    let Some(info) = c.unix_diag()?.get(&ino).cloned() else {
        return Err(c.unsupported(
            d,
            "the kernel's socket diagnostics do not know it (is the tree in another network namespace?)",
        ));
    };
    let kind = info.kind as i32;
    if d.info.num("scm_fds").unwrap_or(0) > 0 {
        return Err(c.unsupported(
            d,
            &format!(
                "{} descriptors are in flight in its queue (SCM_RIGHTS); descriptors in flight cannot be checkpointed",
                d.info.num("scm_fds").unwrap_or(0)
            ),
        ));
    }
    let pid = c.procs[d.holders[0].proc].pid;
    let name = match info.name.clone() {
        Some(UnixName::Path(p)) if p.is_relative() => {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map_err(|e| RunError::io("reading the working directory", e))?;
            Some(UnixName::Path(cwd.join(p)))
        }
        n => n,
    };
    let file = match &name {
        Some(UnixName::Path(p)) => std::fs::symlink_metadata(p)
            .ok()
            .filter(|m| m.file_type().is_socket())
            .map(|m| (m.mode() & 0o7777, m.uid(), m.gid())),
        _ => None,
    };
    let Some(role) = role(c, i, &info)? else {
        return c.external(d, "a Unix socket connected to a process outside the tree");
    };
    let options = sockopt::capture(d.dup.as_fd(), &[sockopt::COMMON, sockopt::UNIX]);
    let queue = if matches!(role, UnixRole::Listening { .. }) {
        UnixQueue::Stream(vec![])
    } else {
        peek(d.dup.as_fd(), kind).map_err(|e| match e {
            Peeked::Rights => c.unsupported(
                d,
                "descriptors are in flight in its queue (SCM_RIGHTS); they cannot be checkpointed",
            ),
            Peeked::TooLarge => c.unsupported(d, "a queued datagram is larger than 4 MiB"),
            Peeked::Io(e) => RunError::io(format!("reading the queue of {}", c.name(d)), e),
        })?
    };
    if !queue.is_empty() {
        match &role {
            UnixRole::ConnectedOut { .. } => {
                return Err(RunError::Unsettled {
                    what: format!("{} holds unread datagrams from outside the tree", c.name(d)),
                })
            }
            UnixRole::ConnectedTo { .. } | UnixRole::Unconnected if name.is_none() => {
                return Err(RunError::Unsettled {
                    what: format!(
                        "{} holds unread datagrams and has no name they could be sent to again",
                        c.name(d)
                    ),
                })
            }
            _ => {}
        }
    }
    Ok(ObjectImage::Unix(UnixImage {
        kind,
        flags: d.flags(),
        name,
        file,
        role,
        queue,
        shutdown: info.shutdown,
        options,
    }))
}

/// How it is connected; `None`: to a process outside the tree.
fn role(c: &mut Capture<'_>, i: usize, info: &super::diag::UnixInfo) -> Result<Option<UnixRole>> {
    let d = &c.descs[i];
    let kind = info.kind as i32;
    if info.state == TCP_LISTEN {
        if !info.pending.is_empty() {
            return Err(RunError::Unsettled {
                what: format!(
                    "{} has {} connections it has not accepted yet",
                    c.name(d),
                    info.pending.len()
                ),
            });
        }
        return Ok(Some(UnixRole::Listening {
            backlog: info.rqlen.1,
        }));
    }
    if info.peer == 0 {
        return Ok(Some(
            if kind != libc::SOCK_DGRAM && info.state == TCP_ESTABLISHED {
                UnixRole::PeerClosed
            } else {
                UnixRole::Unconnected
            },
        ));
    }
    let table = c.unix_diag()?.clone();
    let peer_info = table.get(&info.peer).cloned().unwrap_or_default();
    let peer = c
        .descs
        .iter()
        .position(|x| x.file_type() == libc::S_IFSOCK && x.ino == info.peer as u64);
    match peer {
        Some(j) if peer_info.peer == d.ino as u32 => Ok(Some(UnixRole::Pair { peer: j })),
        Some(j) if kind == libc::SOCK_DGRAM => {
            if peer_info.name.is_none() {
                return Err(c.unsupported(d, "connected to a socket of the tree that has no name"));
            }
            Ok(Some(UnixRole::ConnectedTo { peer: j }))
        }
        Some(_) => Err(c.unsupported(d, "its peer is connected elsewhere")),
        None => {
            let embryo = table.values().any(|l| l.pending.contains(&info.peer));
            if embryo {
                return Err(RunError::Unsettled {
                    what: format!(
                        "{} is connected to a listening socket that has not accepted it yet",
                        c.name(d)
                    ),
                });
            }
            match peer_info.name {
                Some(name) if kind == libc::SOCK_DGRAM => Ok(Some(UnixRole::ConnectedOut { name })),
                _ => Ok(None),
            }
        }
    }
}

enum Peeked {
    Rights,
    TooLarge,
    Io(io::Error),
}

/// Everything queued for `fd`, without taking it out: `MSG_PEEK` at an advancing
/// `SO_PEEK_OFF`, which is put back afterwards.
fn peek(fd: BorrowedFd<'_>, kind: i32) -> std::result::Result<UnixQueue, Peeked> {
    let old = sys::get_int(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF).map_err(Peeked::Io)?;
    sys::set_int(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF, 0).map_err(Peeked::Io)?;
    let r = peek_all(fd, kind);
    let back = sys::set_int(fd, libc::SOL_SOCKET, libc::SO_PEEK_OFF, old);
    let q = r?;
    back.map_err(Peeked::Io)?;
    Ok(q)
}

fn peek_all(fd: BorrowedFd<'_>, kind: i32) -> std::result::Result<UnixQueue, Peeked> {
    let mut buf = vec![
        0u8;
        if kind == libc::SOCK_STREAM {
            1 << 16
        } else {
            MAX_DATAGRAM
        }
    ];
    let mut ctl = vec![0u8; 4096];
    let mut stream = Vec::new();
    let mut messages = Vec::new();
    loop {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: a zeroed msghdr is valid; the pointers set refer to live buffers.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.as_mut_ptr().cast();
        msg.msg_controllen = ctl.len();
        // SAFETY: msg and its buffers live across the call.
        let n = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                break;
            }
            // A stream socket never connected (the C library's name-service lookup leaves one
            // when no daemon listens) cannot be read: EINVAL. Empty if nothing is queued.
            if e.raw_os_error() == Some(libc::EINVAL)
                && kind == libc::SOCK_STREAM
                && stream.is_empty()
                && queued_bytes(fd) == Some(0)
            {
                break;
            }
            return Err(Peeked::Io(e));
        }
        if rights(&msg) {
            return Err(Peeked::Rights);
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            return Err(Peeked::TooLarge);
        }
        let n = n as usize;
        if kind == libc::SOCK_STREAM {
            if n == 0 {
                break; // end of stream (peer shut down)
            }
            stream.extend_from_slice(&buf[..n]);
        } else {
            if n == 0 && kind == libc::SOCK_SEQPACKET {
                break;
            }
            messages.push(buf[..n].to_vec());
            if messages.len() > 1 << 20 {
                return Err(Peeked::Io(io::Error::other("endless datagram queue")));
            }
        }
    }
    Ok(if kind == libc::SOCK_STREAM {
        UnixQueue::Stream(stream)
    } else {
        UnixQueue::Messages(messages)
    })
}

/// Bytes waiting to be read on `fd` (`FIONREAD`); `None` if the kernel will not say.
fn queued_bytes(fd: BorrowedFd<'_>) -> Option<i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `n`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    (r == 0).then_some(n)
}

/// Whether a peeked message carried descriptors (closed here: peeking installs copies).
fn rights(msg: &libc::msghdr) -> bool {
    let mut found = false;
    // SAFETY: walks the control buffer the kernel filled, within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                found = true;
                let data = libc::CMSG_DATA(c).cast::<i32>();
                let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                for k in 0..n {
                    libc::close(std::ptr::read_unaligned(data.add(k)));
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    found || msg.msg_flags & libc::MSG_CTRUNC != 0
}

fn cannot(what: String) -> impl FnOnce(io::Error) -> RunError {
    move |e| RunError::CannotRecreate {
        what: format!("{what}: {e}"),
    }
}

pub fn restore(r: &mut Restore<'_>, i: usize, u: &UnixImage) -> Result<OwnedFd> {
    let fd = match &u.role {
        UnixRole::Pair { peer } => match r.unix_peers.remove(&i) {
            Some(fd) => fd,
            None => pair(r, i, *peer, u)?,
        },
        UnixRole::PeerClosed => {
            let (a, b) = socketpair(u.kind)?;
            fill(b.as_fd(), &u.queue, None)?;
            drop(b);
            a
        }
        UnixRole::Listening { backlog } => {
            let s = bound(u)?;
            sys::listen(s.as_fd(), *backlog as i32)
                .map_err(cannot(format!("listening on {}", show(&u.name))))?;
            s
        }
        UnixRole::Unconnected => {
            let s = bound(u)?;
            if let (false, Some(name)) = (u.queue.is_empty(), &u.name) {
                let tmp = sys::socket(libc::AF_UNIX, u.kind, 0)
                    .map_err(cannot("a socket to refill a queue".into()))?;
                fill(tmp.as_fd(), &u.queue, Some(name))?;
            }
            s
        }
        UnixRole::ConnectedTo { peer } => {
            let s = bound(u)?;
            let target = match &r.table.objects.get(*peer) {
                Some(ObjectImage::Unix(p)) => p.name.clone(),
                _ => None,
            }
            .ok_or_else(|| super::bad("unix peer without a name"))?;
            sys::connect(s.as_fd(), &target.sockaddr())
                .map_err(cannot(format!("connecting to {}", target.show())))?;
            if let (false, Some(name)) = (u.queue.is_empty(), &u.name) {
                fill(r.made(*peer)?, &u.queue, Some(name))?;
            }
            s
        }
        UnixRole::ConnectedOut { name } => {
            let s = bound(u)?;
            sys::connect(s.as_fd(), &name.sockaddr()).map_err(cannot(format!(
                "connecting to {} (outside the tree)",
                name.show()
            )))?;
            s
        }
    };
    finish(fd.as_fd(), u)?;
    Ok(fd)
}

/// A socket pair for object `i` and its peer `j`, each end's queue refilled through the other;
/// the peer's end is kept for when `j` is made.
fn pair(r: &mut Restore<'_>, i: usize, j: usize, u: &UnixImage) -> Result<OwnedFd> {
    let Some(ObjectImage::Unix(p)) = r.table.objects.get(j) else {
        return Err(super::bad("unix pair peer is not a unix socket"));
    };
    if p.role != (UnixRole::Pair { peer: i }) {
        return Err(super::bad("unix pair peers do not name each other"));
    }
    let (a, b) = socketpair(u.kind)?;
    fill(b.as_fd(), &u.queue, None)?;
    fill(a.as_fd(), &p.queue, None)?;
    // Shutdown after the refill (a shut-down end cannot send).
    shut(a.as_fd(), u)?;
    shut(b.as_fd(), p)?;
    finish(b.as_fd(), p)?;
    r.unix_peers.insert(j, b);
    Ok(a)
}

fn shut(fd: BorrowedFd<'_>, u: &UnixImage) -> Result<()> {
    // On a connected stream the peer's side mirrors: SEND here is RCV there.
    let bits = if u.kind == libc::SOCK_DGRAM {
        u.shutdown
    } else {
        u.shutdown & SEND_SHUTDOWN
    };
    let how = match bits & (SEND_SHUTDOWN | RCV_SHUTDOWN) {
        0 => return Ok(()),
        RCV_SHUTDOWN => libc::SHUT_RD,
        SEND_SHUTDOWN => libc::SHUT_WR,
        _ => libc::SHUT_RDWR,
    };
    sys::shutdown(fd, how).map_err(cannot("shutting down a unix socket".into()))
}

fn socketpair(kind: i32) -> Result<(OwnedFd, OwnedFd)> {
    let mut sv = [0i32; 2];
    // SAFETY: socketpair writes two descriptors into `sv`.
    let r =
        unsafe { libc::socketpair(libc::AF_UNIX, kind | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr()) };
    sys::cvt(r as i64).map_err(cannot("a unix socket pair".into()))?;
    Ok((
        sys::owned(sv[0] as i64).map_err(cannot("socketpair".into()))?,
        sys::owned(sv[1] as i64).map_err(cannot("socketpair".into()))?,
    ))
}

/// A socket of `u`'s kind, bound to its name if it has one (a stale socket file at the path
/// is removed first).
fn bound(u: &UnixImage) -> Result<OwnedFd> {
    let s = sys::socket(libc::AF_UNIX, u.kind, 0).map_err(cannot("a unix socket".into()))?;
    if let Some(name) = &u.name {
        if let UnixName::Path(p) = name {
            if let Ok(m) = std::fs::symlink_metadata(p) {
                if !m.file_type().is_socket() {
                    return Err(RunError::CannotRecreate {
                        what: format!(
                            "the unix socket {}: something else than a socket is there now",
                            p.display()
                        ),
                    });
                }
                std::fs::remove_file(p).map_err(cannot(format!(
                    "the unix socket {} (removing the stale socket file)",
                    p.display()
                )))?;
            }
        }
        sys::bind(s.as_fd(), &name.sockaddr())
            .map_err(cannot(format!("binding a unix socket to {}", name.show())))?;
        if let (UnixName::Path(p), Some((mode, uid, gid))) = (name, u.file) {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
                .map_err(cannot(format!("the mode of {}", p.display())))?;
            std::os::unix::fs::lchown(p, Some(uid), Some(gid))
                .map_err(cannot(format!("the owner of {}", p.display())))?;
        }
    }
    Ok(s)
}

/// Sends `queue` through `from` (to `to` when given), so it lands in the receiving socket's
/// queue as it was.
fn fill(from: BorrowedFd<'_>, queue: &UnixQueue, to: Option<&UnixName>) -> Result<()> {
    let total: usize = match queue {
        UnixQueue::Stream(b) => b.len(),
        UnixQueue::Messages(m) => m.iter().map(|x| x.len() + 512).sum(),
    };
    if total == 0 {
        return Ok(());
    }
    // Room for all of it in flight at once (the program's sender may have had more room).
    let want = (total + (64 << 10)) as i32;
    if sys::get_int(from, libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap_or(0) < want {
        let _ = sys::set_int(from, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, want)
            .or_else(|_| sys::set_int(from, libc::SOL_SOCKET, libc::SO_SNDBUF, want));
    }
    let addr = to.map(|n| n.sockaddr());
    let send = |b: &[u8]| -> io::Result<usize> {
        // SAFETY: sends from `b`; the address, if any, is a sockaddr_un of its length.
        let n = unsafe {
            match &addr {
                Some(a) => libc::sendto(
                    from.as_raw_fd(),
                    b.as_ptr().cast(),
                    b.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    a.as_ptr().cast(),
                    a.len() as u32,
                ),
                None => libc::send(
                    from.as_raw_fd(),
                    b.as_ptr().cast(),
                    b.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                ),
            }
        };
        Ok(sys::cvt(n as i64)? as usize)
    };
    let err = cannot("the queued data of a unix socket".into());
    match queue {
        UnixQueue::Stream(b) => {
            let mut b: &[u8] = b;
            while !b.is_empty() {
                let n = send(b).map_err(cannot("the queued data of a unix socket".into()))?;
                b = &b[n..];
            }
        }
        UnixQueue::Messages(m) => {
            for x in m {
                let n = send(x).map_err(cannot("a queued datagram of a unix socket".into()))?;
                if n != x.len() {
                    return Err(err(io::Error::other("datagram sent in part")));
                }
            }
        }
    }
    Ok(())
}

/// Options and status flags, on a socket made.
fn finish(fd: BorrowedFd<'_>, u: &UnixImage) -> Result<()> {
    sockopt::restore(
        fd,
        &u.options,
        &format!("the unix socket {}", show(&u.name)),
    )?;
    sys::set_fl(fd, sys::settable(u.flags)).map_err(cannot("F_SETFL on a unix socket".into()))
}

fn show(n: &Option<UnixName>) -> String {
    n.as_ref()
        .map(|n| n.show())
        .unwrap_or_else(|| "(unnamed)".into())
}
