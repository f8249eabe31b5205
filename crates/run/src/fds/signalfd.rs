//! signalfd: its signal mask and flags. The signals themselves are pending in the process
//! (restored with its signal state), where a read of the signalfd finds them.

use std::os::fd::OwnedFd;

use super::scan::Desc;
use super::{sys, Capture, ObjectImage};
use crate::error::{Result, RunError};

pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    let mask = d
        .info
        .get("sigmask")
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .ok_or_else(|| c.unsupported(d, "its fdinfo shows no sigmask"))?;
    Ok(ObjectImage::SignalFd {
        mask,
        flags: d.flags(),
    })
}

pub fn restore(mask: u64, flags: i32) -> Result<OwnedFd> {
    let sfd_flags = libc::SFD_CLOEXEC | (flags & libc::O_NONBLOCK);
    // SAFETY: the kernel reads an 8-byte signal set from `mask`.
    let r = unsafe { libc::syscall(libc::SYS_signalfd4, -1, &mask as *const u64, 8, sfd_flags) };
    sys::owned(r).map_err(|e| RunError::io("signalfd", e))
}
