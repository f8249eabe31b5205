//! Exclusive use of a pool file: flock(2), and who holds it when it is busy.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// Outcome of trying to lock.
pub enum LockOutcome {
    Locked,
    /// Held by someone else; the pid when /proc/locks names it.
    Busy(Option<u32>),
}

/// How long a lock whose taker is gone is waited for: a process that inherited the pool's
/// descriptor by fork (the taker's own child between fork and exec, or one being killed with
/// it) lets it go within moments.
const ORPHANED_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes an exclusive (or shared) flock without waiting for a live holder. A lock whose taker
/// has exited is held through a descriptor some other process inherited: that one is waited
/// for a little (see [`ORPHANED_LOCK_WAIT`]).
pub fn try_lock(file: &File, exclusive: bool) -> std::io::Result<LockOutcome> {
    let deadline = std::time::Instant::now() + ORPHANED_LOCK_WAIT;
    loop {
        match try_lock_once(file, exclusive)? {
            LockOutcome::Busy(pid)
                if !pid.is_some_and(alive) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            LockOutcome::Busy(pid) => return Ok(LockOutcome::Busy(pid.filter(|&p| alive(p)))),
            LockOutcome::Locked => return Ok(LockOutcome::Locked),
        }
    }
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    crate::procstat::pid_is_running(pid.into())
}

/// One attempt at the flock.
fn try_lock_once(file: &File, exclusive: bool) -> std::io::Result<LockOutcome> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | libc::LOCK_NB;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
    if rc == 0 {
        return Ok(LockOutcome::Locked);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(LockOutcome::Busy(holder_pid(file)));
    }
    Err(err)
}

/// The pid holding a flock on `file`, from /proc/locks (other than ourselves).
pub fn holder_pid(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let text = std::fs::read_to_string("/proc/locks").ok()?;
    find_holder(&text, meta.dev(), meta.ino(), std::process::id())
}

/// Parses /proc/locks lines such as `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`.
fn find_holder(text: &str, dev: u64, ino: u64, me: u32) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Blocked waiters are shown as "1: ->"; skip them.
        if f.len() < 6 || f[1] != "FLOCK" {
            return None;
        }
        let pid: u32 = f[4].parse().ok()?;
        (f[5] == want && pid != me).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_locks() {
        let dev = libc::makedev(0xfd, 1);
        let text = "1: POSIX  ADVISORY  WRITE 99 fd:01:42 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 1234 fd:01:42 0 EOF\n";
        assert_eq!(find_holder(text, dev, 42, 1), Some(1234));
        assert_eq!(find_holder(text, dev, 43, 1), None);
        assert_eq!(find_holder(text, dev, 42, 1234), None);
    }
}
