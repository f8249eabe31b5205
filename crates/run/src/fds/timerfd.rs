//! timerfd: clock, flags, remaining time and interval (from fdinfo), and the expirations not
//! read yet (put back with `TFD_IOC_SET_TICKS`).
//!
//! A timer set with an absolute time on a settable clock (`CLOCK_REALTIME`, its alarm form)
//! comes back at that same wall-clock time: if it passed while the program was down, it fires
//! at once, and counts the periods missed, as it would have. Other timers come back with the
//! time they had left at the checkpoint (their clocks do not survive a reboot).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

use super::scan::Desc;
use super::{sys, Capture, ObjectImage};
use crate::error::{Result, RunError};

/// `TFD_IOC_SET_TICKS` = `_IOW('T', 0, u64)`.
const TFD_IOC_SET_TICKS: u64 = 0x4008_5400;
const TFD_TIMER_ABSTIME: i32 = 1;

/// A timerfd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerFdImage {
    pub clock: i32,
    pub flags: i32,
    /// `timerfd_settime` flags (`TFD_TIMER_ABSTIME`, `TFD_TIMER_CANCEL_ON_SET`).
    pub settime_flags: i32,
    /// Time left until the next expiration, ns (0: disarmed).
    pub remaining_ns: u64,
    pub interval_ns: u64,
    /// For absolute timers on a settable clock: the clock's time of the next expiration, ns.
    pub deadline_ns: Option<i128>,
    /// Expirations not read yet.
    pub ticks: u64,
}

fn pair(v: &str) -> Option<u64> {
    let (s, ns) = v
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?
        .split_once(',')?;
    Some(s.trim().parse::<u64>().ok()? * 1_000_000_000 + ns.trim().parse::<u64>().ok()?)
}

fn settable_clock(clock: i32) -> bool {
    clock == libc::CLOCK_REALTIME || clock == libc::CLOCK_REALTIME_ALARM
}

fn now_ns(clock: i32) -> std::io::Result<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the kernel writes one timespec.
    sys::cvt(unsafe { libc::clock_gettime(clock, &mut ts) } as i64)?;
    Ok(ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128)
}

pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    let i = &d.info;
    let parse = || -> Option<TimerFdImage> {
        Some(TimerFdImage {
            clock: i.get("clockid")?.parse().ok()?,
            flags: d.flags(),
            settime_flags: i32::from_str_radix(i.get("settime flags")?, 8).ok()?,
            remaining_ns: pair(i.get("it_value")?)?,
            interval_ns: pair(i.get("it_interval")?)?,
            deadline_ns: None,
            ticks: i.num("ticks")?,
        })
    };
    let mut t = parse().ok_or_else(|| c.unsupported(d, "its fdinfo does not parse"))?;
    if t.settime_flags & TFD_TIMER_ABSTIME != 0 && settable_clock(t.clock) && t.remaining_ns > 0 {
        let now = now_ns(t.clock).map_err(|e| RunError::io("clock_gettime", e))?;
        t.deadline_ns = Some(now + t.remaining_ns as i128);
    }
    Ok(ObjectImage::TimerFd(t))
}

fn ts(ns: i128) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

pub fn restore(t: &TimerFdImage) -> Result<OwnedFd> {
    let create = libc::TFD_CLOEXEC | (t.flags & libc::O_NONBLOCK);
    // SAFETY: plain system call.
    let fd = sys::owned(unsafe { libc::timerfd_create(t.clock, create) } as i64).map_err(|e| {
        RunError::CannotRecreate {
            what: format!("a timerfd on clock {}: {e}", t.clock),
        }
    })?;
    // A periodic timer with unread expirations shows no time left: the kernel re-arms it only
    // when they are read. It is armed again for its next period.
    if t.remaining_ns > 0 || t.interval_ns > 0 {
        let (flags, value) = match t.deadline_ns {
            Some(deadline) if t.remaining_ns > 0 => (t.settime_flags, deadline),
            _ => (
                t.settime_flags & !TFD_TIMER_ABSTIME & !2,
                if t.remaining_ns > 0 {
                    t.remaining_ns
                } else {
                    t.interval_ns
                } as i128,
            ),
        };
        let spec = libc::itimerspec {
            it_interval: ts(t.interval_ns as i128),
            it_value: ts(value),
        };
        // SAFETY: the kernel reads one itimerspec.
        let r =
            unsafe { libc::timerfd_settime(fd.as_raw_fd(), flags, &spec, std::ptr::null_mut()) };
        sys::cvt(r as i64).map_err(|e| RunError::io("timerfd_settime", e))?;
    }
    if t.ticks > 0 {
        let mut ticks = t.ticks;
        sys::ioctl_ptr(fd.as_fd(), TFD_IOC_SET_TICKS, &mut ticks).map_err(|e| {
            RunError::CannotRecreate {
                what: format!(
                    "the {} unread expirations of a timerfd (TFD_IOC_SET_TICKS needs a kernel with CONFIG_CHECKPOINT_RESTORE): {e}",
                    t.ticks
                ),
            }
        })?;
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_pairs_parse() {
        assert_eq!(pair("(99, 999958113)"), Some(99_999_958_113));
        assert_eq!(pair("(0, 0)"), Some(0));
        assert_eq!(pair("99, 1"), None);
    }

    #[test]
    fn a_periodic_timer_with_unread_expirations_stays_periodic() {
        // What fdinfo shows of a periodic timer whose expirations were not read yet.
        let t = TimerFdImage {
            clock: libc::CLOCK_MONOTONIC,
            flags: libc::O_RDWR,
            settime_flags: 0,
            remaining_ns: 0,
            interval_ns: 1_000_000,
            deadline_ns: None,
            ticks: 2,
        };
        let fd = restore(&t).unwrap();
        let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
        // SAFETY: timerfd_gettime into a local.
        unsafe { libc::timerfd_gettime(fd.as_raw_fd(), &mut cur) };
        assert_eq!(cur.it_interval.tv_nsec, 1_000_000, "still periodic");
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into a local.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        assert_eq!(n, 8);
        assert!(v >= 2, "the unread expirations first: {v}");
        // And it fires again.
        // SAFETY: as above.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        assert_eq!(n, 8);
        assert!(v >= 1);
    }

    #[test]
    fn pending_ticks_and_remaining_time_come_back() {
        let t = TimerFdImage {
            clock: libc::CLOCK_MONOTONIC,
            flags: libc::O_RDWR | libc::O_NONBLOCK,
            settime_flags: 0,
            remaining_ns: 200_000_000,
            interval_ns: 0,
            deadline_ns: None,
            ticks: 3,
        };
        let fd = restore(&t).unwrap();
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        assert_eq!((n, v), (8, 3), "the unread expirations are reported first");
        let mut cur: libc::itimerspec = unsafe { std::mem::zeroed() };
        // SAFETY: the kernel writes one itimerspec.
        unsafe { libc::timerfd_gettime(fd.as_raw_fd(), &mut cur) };
        let left = cur.it_value.tv_sec as u64 * 1_000_000_000 + cur.it_value.tv_nsec as u64;
        assert!(left > 0 && left <= 200_000_000, "{left} ns left");
    }
}
