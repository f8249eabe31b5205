//! TCP and UDP sockets (IPv4, IPv6).
//!
//! * A listening TCP socket comes back listening on the same address and port with the same
//!   backlog (bound with `SO_REUSEADDR`, then the program's own options). Connections waiting
//!   in its accept queue died with the old process (their peers saw a reset).
//! * Bound and connected UDP sockets are bound (and connected) again; datagrams queued for
//!   them are lost, as UDP allows.
//! * An established TCP connection cannot come back: the process that held it died by SIGKILL
//!   (or with the machine), so the kernel already ended it and its peer saw the reset (CRIU's
//!   TCP repair needs the connection frozen before the crash, which SIGKILL or a power loss
//!   does not give). It comes back as a socket that reports exactly that: connected to a
//!   throw-away local listener that aborts it (`SO_LINGER` 0), so the program's next read
//!   fails with `ECONNRESET`, a write with `ECONNRESET` then `EPIPE`, as after a peer's reset.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use serde::{Deserialize, Serialize};

use super::scan::Desc;
pub use super::sockopt::SockOpt;
use super::sockopt::{self};
use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

const TCP_LISTEN: u8 = 10;
const TCP_CLOSE: u8 = 7;

/// A TCP or UDP socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InetImage {
    /// `AF_INET` or `AF_INET6`.
    pub family: i32,
    /// `SOCK_STREAM` (TCP) or `SOCK_DGRAM` (UDP).
    pub kind: i32,
    pub protocol: i32,
    pub flags: i32,
    pub local: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    pub state: InetState,
    pub options: Vec<SockOpt>,
}

/// What comes back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum InetState {
    /// Not bound yet.
    Fresh,
    Bound,
    Listening {
        backlog: u32,
    },
    /// A UDP socket connected to `peer`.
    Connected,
    /// A TCP connection the crash ended: reports a reset.
    Reset,
}

pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    let fd = d.dup.as_fd();
    let io = |what: &'static str| {
        let name = c.name(d);
        move |e| RunError::io(format!("{what} of {name}"), e)
    };
    let family = sys::get_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN).map_err(io("SO_DOMAIN"))?;
    let kind = sys::get_int(fd, libc::SOL_SOCKET, libc::SO_TYPE).map_err(io("SO_TYPE"))?;
    let protocol =
        sys::get_int(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL).map_err(io("SO_PROTOCOL"))?;
    let tcp = kind == libc::SOCK_STREAM && protocol == libc::IPPROTO_TCP;
    let udp = kind == libc::SOCK_DGRAM && protocol == libc::IPPROTO_UDP;
    if !tcp && !udp {
        return c.external(
            d,
            &format!("an internet socket of type {kind}, protocol {protocol} (only TCP and UDP can be checkpointed)"),
        );
    }
    let local = sys::sock_addr(fd, false)
        .ok()
        .and_then(|b| parse(&b))
        .filter(|a| a.port() != 0);
    let peer = sys::sock_addr(fd, true).ok().and_then(|b| parse(&b));
    let state = if tcp {
        let info =
            sys::get_bytes(fd, libc::IPPROTO_TCP, libc::TCP_INFO, 8).map_err(io("TCP_INFO"))?;
        match info.first().copied().unwrap_or(TCP_CLOSE) {
            TCP_LISTEN => {
                let ino = d.ino as u32;
                let backlog = c
                    .inet_diag()?
                    .get(&ino)
                    .copied()
                    .unwrap_or(libc::SOMAXCONN as u32);
                InetState::Listening { backlog }
            }
            TCP_CLOSE if peer.is_none() => {
                if local.is_some() {
                    InetState::Bound
                } else {
                    InetState::Fresh
                }
            }
            // A connection (or an attempt at one): it led outside the tree and ended with the
            // process. On a standard stream it is the restoring command's own.
            _ if d.stdio().is_some() => return c.external(d, ""),
            _ => InetState::Reset,
        }
    } else if peer.is_some() {
        InetState::Connected
    } else if local.is_some() {
        InetState::Bound
    } else {
        InetState::Fresh
    };
    let mut lists: Vec<&[(i32, i32, usize)]> = vec![
        &[(libc::SOL_SOCKET, libc::SO_REUSEADDR, 4)],
        sockopt::COMMON,
        sockopt::INET,
    ];
    lists.push(if family == libc::AF_INET6 {
        &[(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 4)]
    } else {
        &[]
    });
    lists.push(if family == libc::AF_INET6 {
        sockopt::IPV6
    } else {
        sockopt::IPV4
    });
    if tcp {
        lists.push(sockopt::TCP);
    }
    let options = sockopt::capture(fd, &lists);
    if udp {
        let mut queued: i32 = 0;
        if sys::ioctl_ptr(fd, libc::FIONREAD, &mut queued).is_ok() && queued > 0 {
            tracing::warn!(
                "{}: datagrams queued for it are not kept (UDP may lose datagrams)",
                c.name(d)
            );
        }
    }
    Ok(ObjectImage::Inet(InetImage {
        family,
        kind,
        protocol,
        flags: d.flags(),
        local,
        peer,
        state,
        options,
    }))
}

/// `struct sockaddr_in` / `sockaddr_in6` bytes of `a`.
pub fn sockaddr(a: &SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: a zeroed sockaddr_in is valid.
            let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            s.sin_family = libc::AF_INET as u16;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            as_bytes(&s)
        }
        SocketAddr::V6(v6) => {
            // SAFETY: a zeroed sockaddr_in6 is valid.
            let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            s.sin6_family = libc::AF_INET6 as u16;
            s.sin6_port = v6.port().to_be();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
            as_bytes(&s)
        }
    }
}

fn as_bytes<T>(v: &T) -> Vec<u8> {
    // SAFETY: `T` is a plain C struct; reading its bytes is sound.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

/// The address in `sockaddr` bytes, if it is an internet one.
pub fn parse(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(..2)?.try_into().ok()?) as i32;
    match family {
        libc::AF_INET if b.len() >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: long enough for a sockaddr_in; read unaligned.
            let s: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 if b.len() >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: long enough for a sockaddr_in6; read unaligned.
            let s: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

pub fn restore(r: &mut Restore<'_>, s: &InetImage) -> Result<OwnedFd> {
    let what = match (&s.local, &s.state) {
        (Some(a), _) => format!("the socket on {a}"),
        (None, _) => "an unbound internet socket".to_string(),
    };
    let fd = if s.state == InetState::Reset {
        r.reset
            .get_or_insert_with(ResetListener::default)
            .reset_socket(s.family)?
    } else {
        let fd =
            sys::socket(s.family, s.kind, s.protocol).map_err(|e| RunError::CannotRecreate {
                what: format!("{what}: socket(): {e}"),
            })?;
        if let Some(local) = &s.local {
            bind(fd.as_fd(), s, local, &what)?;
        }
        fd
    };
    // IPV6_V6ONLY is fixed once a socket is bound or connected (`bind` set it already).
    let fixed = s.local.is_some() || s.state == InetState::Reset;
    let opts: Vec<SockOpt> = s
        .options
        .iter()
        .filter(|o| !(fixed && o.level == libc::IPPROTO_IPV6 && o.name == libc::IPV6_V6ONLY))
        .cloned()
        .collect();
    if s.state == InetState::Reset {
        // A closed socket accepts most options; none of them matters any more.
        let _ = sockopt::restore(fd.as_fd(), &opts, &what);
    } else {
        sockopt::restore(fd.as_fd(), &opts, &what)?;
    }
    match (&s.state, &s.peer) {
        (InetState::Listening { backlog }, _) => {
            sys::listen(fd.as_fd(), *backlog as i32).map_err(|e| RunError::CannotRecreate {
                what: format!("{what}: listen(): {e}"),
            })?
        }
        (InetState::Connected, Some(peer)) => {
            sys::connect(fd.as_fd(), &sockaddr(peer)).map_err(|e| RunError::CannotRecreate {
                what: format!("{what}: connecting to {peer}: {e}"),
            })?
        }
        _ => {}
    }
    sys::set_fl(fd.as_fd(), sys::settable(s.flags))
        .map_err(|e| RunError::io("F_SETFL on a socket", e))?;
    Ok(fd)
}

/// Binds `fd` to `local` with `SO_REUSEADDR` (its old connections may linger in TIME_WAIT);
/// `IPV6_V6ONLY` first, as binding fixes it.
fn bind(fd: BorrowedFd<'_>, s: &InetImage, local: &SocketAddr, what: &str) -> Result<()> {
    if let Some(v6only) = sockopt::int_of(&s.options, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) {
        sys::set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, v6only).map_err(|e| {
            RunError::CannotRecreate {
                what: format!("{what}: IPV6_V6ONLY: {e}"),
            }
        })?;
    }
    if let Some(reuseport) = sockopt::int_of(&s.options, libc::SOL_SOCKET, libc::SO_REUSEPORT) {
        let _ = sys::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, reuseport);
    }
    sys::set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
        .map_err(|e| RunError::io("SO_REUSEADDR", e))?;
    sys::bind(fd, &sockaddr(local)).map_err(|e| RunError::CannotRecreate {
        what: if e.raw_os_error() == Some(libc::EADDRINUSE) {
            format!("{what}: the address is in use by another program")
        } else {
            format!("{what}: bind(): {e}")
        },
    })
}

/// Local listeners that sockets to be reset connect to (one per family, made on first use).
#[derive(Default)]
pub struct ResetListener {
    v4: Option<(OwnedFd, SocketAddr)>,
    v6: Option<(OwnedFd, SocketAddr)>,
}

impl ResetListener {
    /// A TCP socket of `family` whose connection was reset by its peer.
    fn reset_socket(&mut self, family: i32) -> Result<OwnedFd> {
        let err = |e: io::Error| RunError::CannotRecreate {
            what: format!("a reset TCP connection (made through a local listener): {e}"),
        };
        let (listener, addr) = self.listener(family).map_err(err)?;
        let s = sys::socket(family, libc::SOCK_STREAM, 0).map_err(err)?;
        sys::connect(s.as_fd(), &sockaddr(&addr)).map_err(err)?;
        // SAFETY: accept4 on our listener; no address wanted.
        let a = sys::owned(unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        } as i64)
        .map_err(err)?;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        sys::set_bytes(
            a.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &as_bytes(&linger),
        )
        .map_err(err)?;
        drop(a); // sends the reset
                 // Loopback delivers it at once; wait until our end has seen it.
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        for _ in 0..100 {
            // SAFETY: polls one descriptor we own.
            unsafe { libc::poll(&mut p, 1, 50) };
            if p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                return Ok(s);
            }
        }
        Err(err(io::Error::other("the reset did not arrive")))
    }

    fn listener(&mut self, family: i32) -> io::Result<(BorrowedFd<'_>, SocketAddr)> {
        let slot = if family == libc::AF_INET6 {
            &mut self.v6
        } else {
            &mut self.v4
        };
        if slot.is_none() {
            let loopback: IpAddr = if family == libc::AF_INET6 {
                Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            let l = sys::socket(family, libc::SOCK_STREAM, 0)?;
            sys::bind(l.as_fd(), &sockaddr(&SocketAddr::new(loopback, 0)))?;
            sys::listen(l.as_fd(), 64)?;
            let at = parse(&sys::sock_addr(l.as_fd(), false)?)
                .ok_or_else(|| io::Error::other("listener address"))?;
            *slot = Some((l, at));
        }
        let (l, at) = slot.as_ref().expect("just made");
        Ok((l.as_fd(), *at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for a in ["127.0.0.1:8080", "[::1]:443", "[fe80::1%2]:22", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(parse(&sockaddr(&a)), Some(a));
        }
        assert_eq!(parse(&[1, 0, 0]), None);
    }

    #[test]
    fn a_reset_connection_reports_the_reset() {
        let mut l = ResetListener::default();
        let s = l.reset_socket(libc::AF_INET).unwrap();
        let mut b = [0u8; 4];
        // SAFETY: reads into `b`.
        let n = unsafe { libc::read(s.as_raw_fd(), b.as_mut_ptr().cast(), 4) };
        assert_eq!(n, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::ECONNRESET)
        );
        // SAFETY: sends from `b`.
        let n = unsafe { libc::send(s.as_raw_fd(), b.as_ptr().cast(), 4, libc::MSG_NOSIGNAL) };
        assert_eq!(n, -1);
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EPIPE));
    }
}
