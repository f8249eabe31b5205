//! How the application learns that pages turned hot, that placement acted, or that it settled:
//! a notice kept
//! for blocking waiters, an eventfd for `poll`/`epoll`, and (in the manager) a callback.
//!
//! HPS used a signal carrying the number of hot pages and a system call to fetch them; a signal
//! interrupts whatever the program is doing, so kioku offers the three ways a program usually
//! waits for events instead.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::HugeError;

/// What a notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Notice {
    /// Pages hot now (count at the threshold or above), over all arenas.
    pub hot_pages: usize,
    /// Pages that turned hot since the previous notice.
    pub new_hot: usize,
    /// Ranges promoted by automatic placement since the previous notice.
    pub promoted: usize,
    /// Pages compacted by automatic placement since the previous notice.
    pub compacted: usize,
    /// Placement has settled and tracking stopped (restart it with `enable`).
    pub settled: bool,
    /// Notices posted so far, this one included.
    pub generation: u64,
}

#[derive(Debug)]
pub(crate) struct Notifier {
    eventfd: OwnedFd,
    pending: Mutex<(u64, Option<Notice>)>,
    cond: Condvar,
}

impl Notifier {
    pub(crate) fn new() -> Result<Notifier, HugeError> {
        // SAFETY: eventfd with flags only; returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(HugeError::sys("eventfd"));
        }
        Ok(Notifier {
            // SAFETY: a new descriptor, owned from here on.
            eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
            pending: Mutex::new((0, None)),
            cond: Condvar::new(),
        })
    }

    /// Posts `n` (its generation is assigned here); merges with a notice nobody waited for yet.
    pub(crate) fn post(&self, mut n: Notice) -> Notice {
        let mut g = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        g.0 += 1;
        n.generation = g.0;
        if let Some(old) = g.1 {
            n.new_hot += old.new_hot;
            n.promoted += old.promoted;
            n.compacted += old.compacted;
        }
        g.1 = Some(n);
        drop(g);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a local to our eventfd (non-blocking; a full counter
        // only means the reader is far behind).
        unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        self.cond.notify_all();
        n
    }

    /// Takes the pending notice, waiting up to `timeout` (forever with `None`) for one.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> Option<Notice> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(n) = g.1.take() {
                return Some(n);
            }
            match deadline {
                None => g = self.cond.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return None;
                    }
                    g = self
                        .cond
                        .wait_timeout(g, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }
}
