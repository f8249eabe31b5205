//! Asking a running monitor for a checkpoint (`kioku checkpoint`): a Unix stream socket in the
//! abstract namespace (no file to clean up after a crash), named after the program's pid, the
//! monitor's pid, and the pool file (device and inode). One request per connection: the line
//! `checkpoint`; the answer, once the checkpoint is durable, is one line of JSON (`{"epoch":…}`)
//! or `error: …`.
//!
//! Abstract names have no file permissions, so both ends check who is on the other side by
//! SO_PEERCRED (docs/security.md): the monitor serves only its own uid and root; the client
//! believes an answer only from a process that is the monitor it meant (an ancestor of the pid
//! it asked about, or a holder of the pool it named) and runs as root, as itself, or as the
//! owner of that process or pool. A client never holds the monitor: reads are non-blocking,
//! a request line is at most [`MAX_LINE`] bytes and [`MAX_PENDING`] connections wait at most
//! [`REQUEST_TIMEOUT`] for theirs.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use kioku_pool::procstat::ProcStat;

use crate::error::{Result, RunError};

/// Longest request line the monitor reads.
const MAX_LINE: usize = 64;
/// Connections that may wait for their request line at once; more are refused.
const MAX_PENDING: usize = 16;
/// How long a connection may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How far up the process tree the client looks for the monitor of a pid (monitor → namespace
/// init → program → its children).
const MAX_ANCESTRY: usize = 16;

fn pid_name(pid: i32) -> String {
    format!("kioku/pid/{pid}")
}

fn pool_name(path: &Path) -> Result<String> {
    let md =
        std::fs::metadata(path).map_err(|e| RunError::io(format!("stat {}", path.display()), e))?;
    Ok(format!("kioku/pool/{}:{}", md.dev(), md.ino()))
}

fn bind(name: &str) -> std::io::Result<UnixListener> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let l = UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The process at the other end of a connected Unix socket (for a listener: the process that
/// called listen()).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
}

pub fn peer_of(s: &UnixStream) -> std::io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a live ucred of that size.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
    })
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The monitor's side.
pub struct Control {
    listeners: Vec<UnixListener>,
    /// Who may ask: this uid and root.
    owner: u32,
    pending: Vec<Pending>,
}

/// A connection that has not sent its whole request line yet.
struct Pending {
    stream: UnixStream,
    line: Vec<u8>,
    since: Instant,
}

/// A request waiting for its checkpoint.
pub struct Request {
    stream: UnixStream,
}

impl Request {
    /// Sends the answer (best effort and never blocking: the requester may have gone or may not
    /// read; one short line fits any socket buffer).
    pub fn answer(self, line: &str) {
        refuse(self.stream, line);
    }
}

fn refuse(mut s: UnixStream, line: &str) {
    let _ = s.set_nonblocking(true);
    let mut msg = Vec::with_capacity(line.len() + 1);
    msg.extend_from_slice(line.as_bytes());
    msg.push(b'\n');
    let _ = s.write_all(&msg);
}

impl Control {
    /// Listens under the names of the program, the monitor, the pool, and `more` pids (the
    /// tree's namespace init: a user may pick any of them from a process list). A name another
    /// process holds already is skipped with a warning (`kioku checkpoint` would refuse that
    /// process's answers); the monitor only fails when it can listen under no name at all.
    pub fn listen(program_pid: i32, pool: &Path, more: &[i32]) -> Result<Control> {
        let mut names = vec![pid_name(program_pid), pool_name(pool)?];
        let me = std::process::id() as i32;
        let mut pids = vec![me];
        pids.extend_from_slice(more);
        pids.retain(|&p| p != program_pid && p > 0);
        pids.dedup();
        names.extend(pids.into_iter().map(pid_name));
        let mut listeners = Vec::new();
        let mut last_err = None;
        for name in names {
            match bind(&name) {
                Ok(l) => listeners.push(l),
                Err(e) => {
                    tracing::warn!(
                        "cannot listen for checkpoint requests as @{name} ({e}); another process holds that name — ask this monitor by another pid or by --pool"
                    );
                    last_err = Some(RunError::io(format!("binding control socket @{name}"), e));
                }
            }
        }
        if listeners.is_empty() {
            return Err(last_err.expect("at least one name was tried"));
        }
        Ok(Control {
            listeners,
            owner: euid(),
            pending: Vec::new(),
        })
    }

    /// Checkpoint requests that arrived (never blocks).
    pub fn poll(&mut self) -> Vec<Request> {
        let mut arrived = Vec::new();
        for l in &self.listeners {
            while let Ok((stream, _)) = l.accept() {
                arrived.push(stream);
            }
        }
        for stream in arrived {
            self.admit(stream);
        }
        let mut out = Vec::new();
        let now = Instant::now();
        let mut still = Vec::with_capacity(self.pending.len());
        for mut p in std::mem::take(&mut self.pending) {
            match read_line(&mut p) {
                LineState::Complete => {
                    if p.line.trim_ascii() == b"checkpoint" {
                        out.push(Request { stream: p.stream });
                    } else {
                        refuse(p.stream, "error: unknown request");
                    }
                }
                LineState::Gone => {}
                LineState::TooLong => refuse(p.stream, "error: request too long"),
                LineState::Partial if now.duration_since(p.since) > REQUEST_TIMEOUT => {
                    refuse(p.stream, "error: no request within 2 s");
                }
                LineState::Partial => still.push(p),
            }
        }
        self.pending = still;
        out
    }

    fn admit(&mut self, stream: UnixStream) {
        let peer = match peer_of(&stream) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("refusing a checkpoint request: its sender is unknown ({e})");
                return;
            }
        };
        if peer.uid != self.owner && peer.uid != 0 {
            tracing::warn!(
                pid = peer.pid,
                uid = peer.uid,
                "refusing a checkpoint request from another user"
            );
            refuse(
                stream,
                &format!(
                    "error: permission denied: only uid {} or root may ask this monitor for checkpoints",
                    self.owner
                ),
            );
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            refuse(stream, "error: too many requests waiting; try again");
            return;
        }
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        self.pending.push(Pending {
            stream,
            line: Vec::new(),
            since: Instant::now(),
        });
    }
}

enum LineState {
    Complete,
    Partial,
    TooLong,
    Gone,
}

fn read_line(p: &mut Pending) -> LineState {
    let mut buf = [0u8; MAX_LINE];
    loop {
        match p.stream.read(&mut buf) {
            Ok(0) => return LineState::Gone,
            Ok(n) => {
                let chunk = &buf[..n];
                if let Some(end) = chunk.iter().position(|&b| b == b'\n') {
                    p.line.extend_from_slice(&chunk[..end]);
                    return if p.line.len() > MAX_LINE {
                        LineState::TooLong
                    } else {
                        LineState::Complete
                    };
                }
                p.line.extend_from_slice(chunk);
                if p.line.len() > MAX_LINE {
                    return LineState::TooLong;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return LineState::Partial,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return LineState::Gone,
        }
    }
}

/// Whom to ask.
pub enum Target<'a> {
    Pid(i32),
    Pool(&'a Path),
}

/// Asks the monitor of `target` for a checkpoint and waits until it is durable; returns the
/// monitor's JSON answer. Refuses (before sending anything) when the process answering under
/// the target's name is not its monitor.
pub fn request_checkpoint(target: Target<'_>, timeout: Duration) -> Result<String> {
    let name = match target {
        Target::Pid(p) => pid_name(p),
        Target::Pool(p) => pool_name(p)?,
    };
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| RunError::io("control socket name", e))?;
    let mut s = UnixStream::connect_addr(&addr).map_err(|e| {
        RunError::io(
            "no kioku monitor answers for that process or pool (is it running under `kioku run` or `kioku restore`?)",
            e,
        )
    })?;
    let peer =
        peer_of(&s).map_err(|e| RunError::io("asking who listens on the control socket", e))?;
    check_monitor(&target, peer)?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| RunError::io("control socket", e))?;
    s.write_all(b"checkpoint\n")
        .map_err(|e| RunError::io("sending the request", e))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| RunError::io("waiting for the checkpoint", e))?;
    let line = line.trim().to_string();
    if line.is_empty() {
        return Err(RunError::io(
            "the monitor closed the connection without answering (the program may have ended)",
            std::io::Error::from(ErrorKind::UnexpectedEof),
        ));
    }
    if let Some(e) = line.strip_prefix("error: ") {
        return Err(RunError::Unsupported {
            what: e.to_string(),
        });
    }
    Ok(line)
}

/// Whether `peer`, listening under the name of `target`, is the monitor of that target.
fn check_monitor(target: &Target<'_>, peer: Peer) -> Result<()> {
    let impostor = |why: String| RunError::Impostor {
        pid: peer.pid,
        uid: peer.uid,
        why,
    };
    let me = euid();
    match *target {
        Target::Pid(pid) => {
            let owner = proc_uid(pid)
                .map_err(|e| RunError::io(format!("reading the owner of process {pid}"), e))?;
            if ![0, me, owner].contains(&peer.uid) {
                return Err(impostor(format!(
                    "it runs as uid {}, and process {pid} belongs to uid {owner}",
                    peer.uid
                )));
            }
            if !is_ancestor_or_self(peer.pid, pid) {
                return Err(impostor(format!(
                    "it is neither process {pid} nor one of its ancestors"
                )));
            }
        }
        Target::Pool(path) => {
            let md = std::fs::metadata(path)
                .map_err(|e| RunError::io(format!("stat {}", path.display()), e))?;
            if ![0, me, md.uid()].contains(&peer.uid) {
                return Err(impostor(format!(
                    "it runs as uid {}, and {} belongs to uid {}",
                    peer.uid,
                    path.display(),
                    md.uid()
                )));
            }
            // A monitor holds its pool open. Another user's descriptors are readable only to
            // root; the uid check above is what a non-root caller can have then.
            match holds_file(peer.pid, md.dev(), md.ino()) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(impostor(format!(
                        "it does not hold {} open",
                        path.display()
                    )))
                }
                Err(e) if e.kind() == ErrorKind::PermissionDenied && peer.uid != me => {}
                Err(e) => {
                    return Err(RunError::io(
                        format!("reading the descriptors of process {}", peer.pid),
                        e,
                    ))
                }
            }
        }
    }
    Ok(())
}

fn proc_uid(pid: i32) -> std::io::Result<u32> {
    Ok(std::fs::metadata(format!("/proc/{pid}"))?.uid())
}

fn parent_of(pid: i32) -> Option<i32> {
    ProcStat::of(pid.into()).ok()?.number(4)
}

fn is_ancestor_or_self(ancestor: i32, mut pid: i32) -> bool {
    for _ in 0..MAX_ANCESTRY {
        if pid == ancestor {
            return true;
        }
        match parent_of(pid) {
            Some(p) if p > 0 => pid = p,
            _ => return false,
        }
    }
    false
}

fn holds_file(pid: i32, dev: u64, ino: u64) -> std::io::Result<bool> {
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(entry) = entry else { continue };
        if let Ok(md) = std::fs::metadata(entry.path()) {
            if md.dev() == dev && md.ino() == ino {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
