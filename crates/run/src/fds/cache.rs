//! A descriptor table kept from one stop to the next. A stop checks it against the tree
//! instead of surveying every descriptor again (`readlink`, `statx`, `fdinfo`, `pidfd_getfd`,
//! `kcmp` between holders, each): it lists each process's descriptor numbers and compares each
//! descriptor with the monitor's duplicate of the description it held (`kcmp(KCMP_FILE)`; the
//! duplicate keeps that description alive, so a new one cannot take its identity). What these
//! checks cannot see is trapped by the journal's filter (`journal::fd_call`: a number given
//! back the description it held with another close-on-exec flag, a close-on-exec flag set, a
//! lock), and a trapped call drops the kept table. What moves without any call to trap is read
//! again through the duplicates ([`Cached::refresh`]):
//!
//! * a file's offset (`read`, `write`, `lseek`), size (anyone's writes) and status flags
//!   (`fcntl(F_SETFL)`, `ioctl(FIONBIO)`, or a process outside the tree sharing it);
//! * whether its path still names it (a rename or unlink, by anyone): if not, the caller
//!   surveys again, which decides what the file became (stashed by the journal, refused).
//!
//! Only tables of such descriptions are kept: the restoring command's own streams
//! ([`ObjectImage::Inherited`], which keep nothing), stateless devices and named files and
//! directories, without locks. A socket (whose queues change with every `send`), a pipe, an
//! eventfd, an epoll set, a timer, a terminal of the tree, a memfd, a stashed file or a lock
//! (a `close` of any descriptor of the file releases a POSIX lock) makes every stop survey.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::scan::Desc;
use super::{FdTable, ObjectImage, ProcRef};

/// A captured table and the duplicates that check it and bring it up to date. Holding it keeps
/// the descriptions open in the monitor: a file the program closed stays open until the next
/// stop (its space, if deleted, is freed then).
pub struct Cached {
    table: FdTable,
    /// The monitor's duplicate of each description (the table's objects, in order).
    dups: Vec<OwnedFd>,
    /// Descriptions whose state moves by itself.
    live: Vec<Live>,
    /// Each process's `/proc/PID/fd`, kept open and listed again from its start.
    dirs: std::collections::HashMap<i32, std::fs::File>,
}

/// A description whose state moves by itself.
struct Live {
    object: usize,
    dev: u64,
    ino: u64,
    /// The path a restore opens it by (must still name it).
    path: PathBuf,
}

impl Cached {
    /// What to keep of `table` (captured from `descs`), or `None` when it holds a description
    /// whose state changes without a trapped call.
    pub(super) fn of(table: &FdTable, descs: Vec<Desc>) -> Option<Cached> {
        if !table.locks.is_empty() || descs.len() != table.objects.len() {
            return None;
        }
        let mut live = Vec::new();
        let mut dups = Vec::with_capacity(descs.len());
        for (i, d) in descs.into_iter().enumerate() {
            if d.file_type() == libc::S_IFSOCK {
                return None;
            }
            let path = match &table.objects[i] {
                ObjectImage::Inherited { .. } => None,
                ObjectImage::Device { path, .. } => Some(path.clone()),
                ObjectImage::File(f) if f.source == super::FileSource::Named => {
                    Some(f.path.clone())
                }
                _ => return None,
            };
            if let Some(path) = path {
                live.push(Live {
                    object: i,
                    dev: d.dev,
                    ino: d.ino,
                    path,
                });
            }
            dups.push(d.dup);
        }
        Some(Cached {
            table: table.clone(),
            dups,
            live,
            dirs: Default::default(),
        })
    }

    /// The table a survey of `procs` would capture now, provided no trapped descriptor call
    /// ran in the tree since this one was captured (the caller's to know) and `procs` are the
    /// processes it was captured from. `None`: a descriptor was opened, closed or replaced, or
    /// a file renamed or deleted — survey again.
    pub fn refresh(
        &mut self,
        procs: &[ProcRef],
        ctx: &mut dyn super::CaptureCtx,
    ) -> Option<FdTable> {
        let me = std::process::id() as i32;
        for p in procs {
            let held = self.table.procs.get(&p.image_pid)?;
            let dir = match self.dirs.entry(p.pid) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(std::fs::File::open(format!("/proc/{}/fd", p.pid)).ok()?)
                }
            };
            let mut numbers = list_again(dir).ok()?;
            numbers.retain(|fd| !p.own_fds.contains(fd));
            if numbers.len() != held.len() {
                return None;
            }
            for (fd, h) in numbers.iter().zip(held) {
                if *fd != h.fd {
                    return None;
                }
                let dup = self.dups.get(h.object)?.as_raw_fd();
                if !super::sys::same_file(p.pid, h.fd, me, dup).ok()? {
                    return None;
                }
            }
        }
        for l in &self.live {
            // A file the tree has mapped shared since is captured as memory (a survey's).
            ctx.shared_object_of(l.dev, l.ino).is_none().then_some(())?;
            let now = std::fs::metadata(&l.path).ok()?;
            if (now.dev(), now.ino()) != (l.dev, l.ino) {
                return None;
            }
            let dup = self.dups.get(l.object)?.as_raw_fd();
            // SAFETY: fcntl(F_GETFL) on a descriptor we own.
            let flags = unsafe { libc::fcntl(dup, libc::F_GETFL) };
            if flags < 0 {
                return None;
            }
            match self.table.objects.get_mut(l.object)? {
                ObjectImage::Device { flags: f, .. } => *f = flags,
                ObjectImage::File(f) => {
                    // SAFETY: lseek(SEEK_CUR, 0) on a descriptor we own: reads the
                    // description's offset, moves nothing.
                    let pos = unsafe { libc::lseek(dup, 0, libc::SEEK_CUR) };
                    if pos < 0 {
                        return None;
                    }
                    f.flags = flags;
                    f.pos = pos as u64;
                    f.size = now.size();
                }
                _ => return None,
            }
        }
        Some(self.table.clone())
    }
}

/// The descriptor numbers of an open `/proc/PID/fd`, ascending: rewound and read with
/// `getdents64` (no path lookup, `open` or `close`).
fn list_again(dir: &std::fs::File) -> std::io::Result<Vec<i32>> {
    let fd = dir.as_raw_fd();
    // SAFETY: lseek on a descriptor we own.
    if unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 32 << 10];
    let mut out = Vec::new();
    loop {
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = n as usize;
        // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
        let mut at = 0;
        while at + 19 < n {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 || at + reclen > n {
                return Err(std::io::ErrorKind::InvalidData.into());
            }
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if let Some(fd) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok()) {
                out.push(fd);
            }
            at += reclen;
        }
        // Room left for another record (at most 280 bytes): the listing is complete.
        if n == 0 || n + 512 < buf.len() {
            break;
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{capture, capture_cached, NoCtx, ProcRef};
    use std::io::{Seek, SeekFrom, Write};
    use std::os::fd::AsRawFd;

    /// A child holding a file, /dev/null and the test's streams: the refreshed table equals a
    /// fresh capture after the file's offset, size and flags moved, and a rename is noticed.
    #[test]
    fn refresh_equals_a_fresh_capture_and_notices_a_rename() {
        let dir = std::env::temp_dir().join(format!("kioku-fdcache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        f.write_all(b"0123456789").unwrap();
        f.seek(SeekFrom::Start(3)).unwrap();
        // The child inherits the file as descriptor 0 (a shared description: moving the
        // offset here moves the child's).
        let mut cmd = std::process::Command::new("sleep");
        // SAFETY: close_range is async-signal-safe; the child holds only its streams then.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                Ok(())
            });
        }
        let mut child = cmd
            .arg("30")
            .stdin(f.try_clone().unwrap())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let procs = [ProcRef {
            image_pid: 1,
            pid: child.id() as i32,
            own_fds: vec![],
        }];
        // Wait until the child runs `sleep` (its descriptors are final then).
        let t0 = std::time::Instant::now();
        while std::fs::read_link(format!("/proc/{}/exe", child.id()))
            .map(|p| !p.to_string_lossy().contains("sleep"))
            .unwrap_or(true)
        {
            assert!(t0.elapsed().as_secs() < 10, "the child never ran sleep");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (table, cached) = capture_cached(&procs, &mut NoCtx).unwrap();
        let mut cached = cached.expect("a file, a device and streams are kept");
        assert_eq!(cached.refresh(&procs, &mut NoCtx).as_ref(), Some(&table));
        let listing = std::fs::File::open(format!("/proc/{}/fd", child.id())).unwrap();
        assert_eq!(super::list_again(&listing).unwrap(), vec![0, 1, 2]);
        assert_eq!(
            super::list_again(&listing).unwrap(),
            vec![0, 1, 2],
            "listed again"
        );
        f.write_all(b"abcdefgh").unwrap();
        // SAFETY: fcntl on a descriptor of ours.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::O_APPEND) };
        let fresh = capture(&procs, &mut NoCtx).unwrap();
        assert_ne!(fresh, table, "the offset, size and flags moved");
        assert_eq!(cached.refresh(&procs, &mut NoCtx), Some(fresh));
        std::fs::rename(&path, dir.join("moved")).unwrap();
        assert_eq!(
            cached.refresh(&procs, &mut NoCtx),
            None,
            "a renamed file is surveyed again"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
