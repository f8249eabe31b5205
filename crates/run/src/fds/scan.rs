//! Which descriptors the processes of a tree hold, and which of them share an open file
//! description (a dup, a fork, SCM_RIGHTS): the unit a checkpoint captures and a restore
//! recreates once.
//!
//! Descriptors are bucketed by what every holder of one description must see alike (the
//! file's device and inode, the `/proc/PID/fd` link, position and status flags, and for
//! eventfds their id); only inside a bucket does `kcmp(KCMP_FILE)` decide, so the work stays
//! linear in the number of descriptors for ordinary programs.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use super::{describe, sys, ProcRef};
use crate::error::{Result, RunError};

/// `/proc/PID/fdinfo/FD`, parsed into its `key: value` lines.
#[derive(Clone, Debug, Default)]
pub struct FdInfo {
    pub text: String,
}

impl FdInfo {
    pub fn parse(text: String) -> FdInfo {
        FdInfo { text }
    }

    /// The value of the first line `key:…`, trimmed.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(str::trim)
    }

    pub fn num(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    /// `flags:` (octal), with the per-descriptor `O_CLOEXEC` bit.
    pub fn flags(&self) -> i32 {
        self.get("flags")
            .and_then(|v| i32::from_str_radix(v, 8).ok())
            .unwrap_or(0)
    }

    pub fn pos(&self) -> u64 {
        self.num("pos").unwrap_or(0)
    }

    /// Lines starting with `prefix` (e.g. `tfd:` of an epoll, `lock:`), without it.
    pub fn lines_with<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.text
            .lines()
            .filter_map(move |l| l.strip_prefix(prefix))
            .map(str::trim)
    }
}

/// One descriptor of one process.
#[derive(Debug)]
pub struct Held {
    /// Index into the processes passed to capture.
    pub proc: usize,
    pub fd: i32,
    /// The descriptor's close-on-exec flag (per descriptor, not per description).
    pub cloexec: bool,
    /// Its fdinfo `lock:` lines: locks of its description, and POSIX locks its process holds
    /// on the file.
    pub locks: Vec<String>,
}

/// One open file description and everything known about it.
pub struct Desc {
    /// Every descriptor naming it, in process then descriptor order.
    pub holders: Vec<Held>,
    /// `readlink /proc/PID/fd/N`.
    pub link: String,
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub rdev: u64,
    pub size: u64,
    pub info: FdInfo,
    /// The monitor's duplicate (same description), taken with `pidfd_getfd`.
    pub dup: OwnedFd,
}

impl Desc {
    /// Access mode and status flags, without `O_CLOEXEC`.
    pub fn flags(&self) -> i32 {
        self.info.flags() & !libc::O_CLOEXEC
    }

    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    pub fn readable(&self) -> bool {
        self.flags() & libc::O_ACCMODE != libc::O_WRONLY
    }

    pub fn writable(&self) -> bool {
        self.flags() & libc::O_ACCMODE != libc::O_RDONLY
    }

    /// The smallest standard-stream number a holder has it at, if any.
    pub fn stdio(&self) -> Option<i32> {
        self.holders
            .iter()
            .map(|h| h.fd)
            .filter(|&fd| fd <= 2)
            .min()
    }
}

/// What every holder of one description sees alike: device, inode, link, status flags,
/// position, eventfd id.
type Bucket = (u64, u64, String, i32, u64, String);

/// Every descriptor of `procs` (but their `own_fds`), grouped into descriptions.
pub fn scan(procs: &[ProcRef]) -> Result<Vec<Desc>> {
    let mut descs: Vec<Desc> = Vec::new();
    let mut buckets: HashMap<Bucket, Vec<usize>> = HashMap::new();
    for (pi, p) in procs.iter().enumerate() {
        let mut pidfd: Option<OwnedFd> = None;
        for fd in list_fds(p.pid)? {
            if p.own_fds.contains(&fd) {
                continue;
            }
            let path = format!("/proc/{}/fd/{fd}", p.pid);
            let link = std::fs::read_link(&path)
                .map_err(|e| RunError::io(format!("reading {path}"), e))?
                .to_string_lossy()
                .into_owned();
            let md =
                std::fs::metadata(&path).map_err(|e| RunError::io(format!("stat {path}"), e))?;
            let info = FdInfo::parse(crate::sys::read_proc_record(format!(
                "/proc/{}/fdinfo/{fd}",
                p.pid
            ))?);
            let cloexec = info.flags() & libc::O_CLOEXEC != 0;
            let held = Held {
                proc: pi,
                fd,
                cloexec,
                locks: info.lines_with("lock:").map(str::to_string).collect(),
            };
            let key = (
                md.dev(),
                md.ino(),
                link.clone(),
                info.flags() & !libc::O_CLOEXEC,
                info.pos(),
                info.get("eventfd-id").unwrap_or("").to_string(),
            );
            let bucket = buckets.entry(key).or_default();
            let mut found = None;
            for &di in bucket.iter() {
                let h = &descs[di].holders[0];
                let same = sys::same_file(procs[h.proc].pid, h.fd, p.pid, fd)
                    .map_err(|e| RunError::io(format!("kcmp on {}", describe(p, fd, &link)), e))?;
                if same {
                    found = Some(di);
                    break;
                }
            }
            match found {
                Some(di) => descs[di].holders.push(held),
                None => {
                    let dup = take(p.pid, &mut pidfd, fd)?;
                    bucket.push(descs.len());
                    descs.push(Desc {
                        holders: vec![held],
                        link,
                        dev: md.dev(),
                        ino: md.ino(),
                        mode: md.mode(),
                        rdev: md.rdev(),
                        size: md.size(),
                        info,
                        dup,
                    });
                }
            }
        }
    }
    Ok(descs)
}

/// `pidfd_getfd`: the monitor's duplicate of descriptor `fd` of `pid` (one pidfd per process).
fn take(pid: i32, pidfd: &mut Option<OwnedFd>, fd: i32) -> Result<OwnedFd> {
    if pidfd.is_none() {
        // SAFETY: plain system call.
        let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        *pidfd = Some(sys::owned(r).map_err(|e| RunError::io(format!("pidfd_open({pid})"), e))?);
    }
    let p = pidfd.as_ref().expect("just opened");
    // SAFETY: plain system call.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_getfd, p.as_raw_fd(), fd, 0) };
    sys::owned(r).map_err(|e| RunError::io(format!("pidfd_getfd({pid}, {fd})"), e))
}

/// The descriptor numbers process `pid` has open, ascending.
pub fn list_fds(pid: i32) -> Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/fd");
    let mut fds: Vec<i32> = std::fs::read_dir(&dir)
        .map_err(|e| RunError::io(format!("listing {dir}"), e))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_fields_parse() {
        let i = FdInfo::parse(
            "pos:\t12\nflags:\t02004002\nmnt_id:\t17\nino:\t1038\ntfd:        3 events:       19 data:                3  pos:0 ino:40e sdev:10\nlock:\t1: FLOCK  ADVISORY  WRITE 13827 fe:00:9978321 0 EOF\n"
                .into(),
        );
        assert_eq!(i.pos(), 12);
        assert_eq!(i.flags(), 0o2004002);
        assert_eq!(i.num("ino"), Some(1038));
        assert_eq!(i.lines_with("tfd:").count(), 1);
        assert_eq!(
            i.lines_with("lock:").next(),
            Some("1: FLOCK  ADVISORY  WRITE 13827 fe:00:9978321 0 EOF")
        );
        assert_eq!(i.get("missing"), None);
    }
}
