//! pidfds of processes of the tree: opened again on the restored process with the same pid in
//! the tree.

use std::os::fd::OwnedFd;

use super::scan::Desc;
use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    let pid: i32 = d
        .info
        .get("Pid")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| c.unsupported(d, "its fdinfo shows no Pid"))?;
    // PIDFD_THREAD (= O_EXCL) pidfds name a thread: its id is not kept by a restore.
    if d.flags() & libc::O_EXCL != 0 {
        return Err(c.unsupported(d, "a pidfd of a thread cannot be checkpointed"));
    }
    match c.procs.iter().find(|p| p.pid == pid) {
        Some(p) => Ok(ObjectImage::PidFd {
            image_pid: p.image_pid,
            flags: d.flags(),
        }),
        None => Err(c.unsupported(
            d,
            &format!(
                "a pidfd of process {pid}, which is not in the checkpointed tree (or has exited)"
            ),
        )),
    }
}

pub fn restore(r: &mut Restore<'_>, image_pid: i32, flags: i32) -> Result<OwnedFd> {
    let pid = r.proc(image_pid)?.remote.pid();
    // SAFETY: plain system call.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags & libc::O_NONBLOCK) };
    let fd = sys::owned(fd).map_err(|e| RunError::io(format!("pidfd_open({pid})"), e))?;
    // pidfd_open sets close-on-exec itself.
    Ok(fd)
}
