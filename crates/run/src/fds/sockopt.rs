//! Socket options that change how a program's socket behaves, captured as the bytes
//! `getsockopt` returns and set again on the new socket where they differ from its defaults.
//! Buffer sizes are left out: setting them pins a size the kernel would otherwise tune.

use std::os::fd::BorrowedFd;

use serde::{Deserialize, Serialize};

use super::sys;
use crate::error::{Result, RunError};

/// One socket option's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SockOpt {
    pub level: i32,
    pub name: i32,
    #[serde(with = "super::hexbytes")]
    pub value: Vec<u8>,
}

/// `(level, name, size)` of the options kept, per kind of socket.
pub const COMMON: &[(i32, i32, usize)] = &[
    (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 4),
    (libc::SOL_SOCKET, libc::SO_RCVTIMEO, 16),
    (libc::SOL_SOCKET, libc::SO_SNDTIMEO, 16),
    (libc::SOL_SOCKET, libc::SO_LINGER, 8),
    (libc::SOL_SOCKET, libc::SO_RCVLOWAT, 4),
];
pub const UNIX: &[(i32, i32, usize)] = &[
    (libc::SOL_SOCKET, libc::SO_PASSCRED, 4),
    (libc::SOL_SOCKET, libc::SO_PASSSEC, 4),
    (libc::SOL_SOCKET, libc::SO_PEEK_OFF, 4),
];
pub const INET: &[(i32, i32, usize)] = &[
    (libc::SOL_SOCKET, libc::SO_REUSEPORT, 4),
    (libc::SOL_SOCKET, libc::SO_BROADCAST, 4),
    (libc::SOL_SOCKET, libc::SO_OOBINLINE, 4),
    (libc::SOL_SOCKET, libc::SO_PRIORITY, 4),
    (libc::SOL_SOCKET, libc::SO_PEEK_OFF, 4),
];
pub const IPV4: &[(i32, i32, usize)] = &[
    (libc::IPPROTO_IP, libc::IP_TOS, 4),
    (libc::IPPROTO_IP, libc::IP_TTL, 4),
    (libc::IPPROTO_IP, libc::IP_RECVERR, 4),
    (libc::IPPROTO_IP, libc::IP_PKTINFO, 4),
];
pub const IPV6: &[(i32, i32, usize)] = &[
    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, 4),
    (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, 4),
    (libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 4),
    (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 4),
];
pub const TCP: &[(i32, i32, usize)] = &[
    (libc::IPPROTO_TCP, libc::TCP_NODELAY, 4),
    (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 4),
    (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 4),
    (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4),
    (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, 4),
    (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, 4),
    (libc::IPPROTO_TCP, libc::TCP_MAXSEG, 4),
];

/// The options of `lists` that `fd` answers.
pub fn capture(fd: BorrowedFd<'_>, lists: &[&[(i32, i32, usize)]]) -> Vec<SockOpt> {
    let mut out = Vec::new();
    for &(level, name, size) in lists.iter().copied().flatten() {
        // An option this kernel or socket does not have is simply not kept.
        if let Ok(value) = sys::get_bytes(fd, level, name, size) {
            out.push(SockOpt { level, name, value });
        }
    }
    out
}

/// Sets every option of `opts` that differs on `fd`.
pub fn restore(fd: BorrowedFd<'_>, opts: &[SockOpt], what: &str) -> Result<()> {
    for o in opts {
        let now = sys::get_bytes(fd, o.level, o.name, o.value.len()).unwrap_or_default();
        if now == o.value {
            continue;
        }
        // TCP_MAXSEG reads back the path's MSS; only a value the program set can be set.
        if o.level == libc::IPPROTO_TCP && o.name == libc::TCP_MAXSEG {
            continue;
        }
        sys::set_bytes(fd, o.level, o.name, &o.value).map_err(|e| RunError::CannotRecreate {
            what: format!("socket option {}/{} of {what}: {e}", o.level, o.name),
        })?;
    }
    Ok(())
}

/// The value of option `(level, name)` in `opts` as an int.
pub fn int_of(opts: &[SockOpt], level: i32, name: i32) -> Option<i32> {
    let o = opts.iter().find(|o| o.level == level && o.name == name)?;
    Some(i32::from_ne_bytes(o.value.get(..4)?.try_into().ok()?))
}
