//! What only the kernel's socket diagnostics (`NETLINK_SOCK_DIAG`, as `ss` uses) tell: a Unix
//! socket's peer, name, shutdown state and pending connections, and a listening socket's
//! backlog. One dump per capture, in the monitor's network namespace (the tree's).

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_packet_sock_diag::unix::nlas::{Nla, UnixDiagName as DiagName};
use netlink_packet_sock_diag::unix::{self, ShowFlags, UnixRequest};
use netlink_packet_sock_diag::SockDiagMessage;

use super::sys;
use super::unix::UnixName;
use crate::error::{Result, RunError};

const NETLINK_SOCK_DIAG: i32 = 4;

/// What the diagnostics say about one Unix socket.
#[derive(Clone, Debug, Default)]
pub struct UnixInfo {
    pub kind: u8,
    pub state: u8,
    /// The peer's inode (0: none, or the peer is closed).
    pub peer: u32,
    pub name: Option<UnixName>,
    /// Connections not accepted yet (listening sockets).
    pub pending: Vec<u32>,
    /// Listening: (pending, backlog); else (queued bytes, memory of sent data).
    pub rqlen: (u32, u32),
    /// `RCV_SHUTDOWN` (1) | `SEND_SHUTDOWN` (2).
    pub shutdown: u8,
}

/// Every Unix socket of the network namespace, by inode.
pub type UnixTable = HashMap<u32, UnixInfo>;
/// The backlog of every listening TCP socket, by inode.
pub type InetTable = HashMap<u32, u32>;

pub fn unix_sockets() -> Result<UnixTable> {
    let req = SockDiagMessage::UnixRequest(UnixRequest {
        state_flags: unix::StateFlags::from_bits_retain(u32::MAX),
        inode: 0,
        show_flags: ShowFlags::NAME | ShowFlags::PEER | ShowFlags::ICONS | ShowFlags::RQLEN,
        cookie: [0xff; 8],
    });
    let mut out = UnixTable::new();
    dump(req, &mut |m| {
        if let SockDiagMessage::UnixResponse(r) = m {
            let mut info = UnixInfo {
                kind: r.header.kind,
                state: r.header.state,
                ..Default::default()
            };
            for nla in &r.nlas {
                match nla {
                    Nla::Name(DiagName::Pathname(p)) => {
                        info.name = Some(UnixName::Path(p.clone().into()))
                    }
                    Nla::Name(DiagName::Abstract(a)) => {
                        info.name = Some(UnixName::Abstract(a.clone()))
                    }
                    Nla::Peer(p) => info.peer = *p,
                    Nla::PendingConnections(v) => info.pending = v.clone(),
                    Nla::ReceiveQueueLength(a, b) => info.rqlen = (*a, *b),
                    Nla::Shutdown(s) => info.shutdown = *s,
                    _ => {}
                }
            }
            out.insert(r.header.inode, info);
        }
    })?;
    Ok(out)
}

pub fn inet_listeners() -> Result<InetTable> {
    let mut out = InetTable::new();
    for (family, id) in [
        (libc::AF_INET as u8, SocketId::new_v4()),
        (libc::AF_INET6 as u8, SocketId::new_v6()),
    ] {
        let req = SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: libc::IPPROTO_TCP as u8,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::LISTEN,
            socket_id: id,
        });
        dump(req, &mut |m| {
            if let SockDiagMessage::InetResponse(r) = m {
                // For a listening socket: idiag_wqueue is the backlog (sk_max_ack_backlog).
                out.insert(r.header.inode, r.header.send_queue);
            }
        })?;
    }
    Ok(out)
}

fn dump(req: SockDiagMessage, each: &mut dyn FnMut(SockDiagMessage)) -> Result<()> {
    let err = |e: io::Error| RunError::io("querying socket diagnostics (NETLINK_SOCK_DIAG)", e);
    let sock = open().map_err(err)?;
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut msg = NetlinkMessage::new(hdr, req.into());
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    // SAFETY: sends `buf.len()` bytes from `buf` to the kernel (a zeroed sockaddr_nl).
    let n = unsafe {
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as u16;
        libc::sendto(
            sock.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    sys::cvt(n as i64).map_err(err)?;
    let mut rx = vec![0u8; 1 << 16];
    loop {
        // SAFETY: the kernel writes at most `rx.len()` bytes.
        let n = unsafe { libc::recv(sock.as_raw_fd(), rx.as_mut_ptr().cast(), rx.len(), 0) };
        let n = sys::cvt(n as i64).map_err(err)? as usize;
        let mut off = 0;
        while off < n {
            let m = NetlinkMessage::<SockDiagMessage>::deserialize(&rx[off..n])
                .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())))?;
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::Done(_) => return Ok(()),
                NetlinkPayload::Error(e) => {
                    let code = e.code.map(|c| -c.get()).unwrap_or(0);
                    if code != 0 {
                        return Err(err(io::Error::from_raw_os_error(code)));
                    }
                }
                NetlinkPayload::InnerMessage(inner) => each(inner),
                _ => {}
            }
            if len == 0 {
                break;
            }
            off += (len + 3) & !3;
        }
        if n == 0 {
            return Ok(());
        }
    }
}

fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain system call.
    sys::owned(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    } as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn unix_pairs_and_listeners_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let l = UnixListener::bind(dir.path().join("s")).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        b.shutdown(std::net::Shutdown::Write).unwrap();
        let ino = |fd: i32| {
            std::fs::metadata(format!("/proc/self/fd/{fd}"))
                .unwrap()
                .ino() as u32
        };
        let t = unix_sockets().unwrap();
        let ia = &t[&ino(a.as_raw_fd())];
        let ib = &t[&ino(b.as_raw_fd())];
        assert_eq!(ia.peer, ino(b.as_raw_fd()));
        assert_eq!(ib.peer, ino(a.as_raw_fd()));
        assert_eq!((ia.shutdown, ib.shutdown), (1, 2));
        let il = &t[&ino(l.as_raw_fd())];
        assert_eq!(il.state, 10);
        assert_eq!(il.name, Some(UnixName::Path(dir.path().join("s"))));
    }

    #[test]
    fn tcp_backlog_is_seen() {
        let s = sys::socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        let addr = super::super::inet::sockaddr(&"127.0.0.1:0".parse().unwrap());
        sys::bind(std::os::fd::AsFd::as_fd(&s), &addr).unwrap();
        sys::listen(std::os::fd::AsFd::as_fd(&s), 37).unwrap();
        let ino = std::fs::metadata(format!("/proc/self/fd/{}", s.as_raw_fd()))
            .unwrap()
            .ino() as u32;
        assert_eq!(inet_listeners().unwrap().get(&ino), Some(&37));
    }
}
