//! eventfd: its counter, semaphore mode and flags.

use std::os::fd::{AsFd, OwnedFd};

use super::scan::Desc;
use super::{sys, Capture, ObjectImage};
use crate::error::{Result, RunError};

pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    // `eventfd-count: %16llx`, `eventfd-semaphore: %d` (older kernels lack the second).
    let count = d
        .info
        .get("eventfd-count")
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .ok_or_else(|| c.unsupported(d, "its fdinfo shows no eventfd-count"))?;
    let semaphore = match d.info.get("eventfd-semaphore") {
        Some(v) => v == "1",
        None => {
            return Err(c.unsupported(
                d,
                "this kernel does not show whether an eventfd is a semaphore (eventfd-semaphore in fdinfo, shown by newer kernels)",
            ))
        }
    };
    Ok(ObjectImage::EventFd {
        count,
        semaphore,
        flags: d.flags(),
    })
}

pub fn restore(count: u64, semaphore: bool, flags: i32) -> Result<OwnedFd> {
    let efd_flags = libc::EFD_CLOEXEC
        | (flags & libc::O_NONBLOCK)
        | if semaphore { libc::EFD_SEMAPHORE } else { 0 };
    // SAFETY: plain system call.
    let fd = sys::owned(unsafe { libc::eventfd(0, efd_flags) } as i64)
        .map_err(|e| RunError::io("eventfd", e))?;
    if count > 0 {
        // The counter can hold up to 2^64-2, more than eventfd()'s initial value: write it.
        sys::write_all(fd.as_fd(), &count.to_ne_bytes())
            .map_err(|e| RunError::io("setting an eventfd's counter", e))?;
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn counter_and_mode_come_back() {
        let fd = restore(5, true, libc::O_RDWR | libc::O_NONBLOCK).unwrap();
        let mut v = 0u64;
        for want in [1u64, 1, 1, 1, 1] {
            // SAFETY: reads 8 bytes into `v`.
            let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            assert_eq!(n, 8);
            assert_eq!(v, want);
        }
        // SAFETY: as above.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        assert_eq!(
            n, -1,
            "a sixth read of a semaphore counted 5 must find it empty"
        );
        let fd = restore(u64::MAX - 1, false, libc::O_RDWR).unwrap();
        // SAFETY: as above.
        unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        assert_eq!(v, u64::MAX - 1);
    }
}
