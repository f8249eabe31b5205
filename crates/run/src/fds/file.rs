//! Regular files, directories, stateless character devices, and memfd / shared-memory files:
//! reopened by path (a deleted file by the path the file journal keeps it at) with their access
//! mode and status flags, at their offset.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::scan::Desc;
use super::{sys, Capture, ObjectImage, Restore};
use crate::error::{Result, RunError};

/// Character devices that hold no state of the program: reopened by path.
pub const STATELESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// A regular file or directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileImage {
    /// Where to open it again.
    pub path: PathBuf,
    pub flags: i32,
    pub pos: u64,
    /// Its size at the checkpoint (a restore refuses a file that is shorter now).
    pub size: u64,
    pub directory: bool,
    pub source: FileSource,
}

/// Where [`FileImage::path`] comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileSource {
    /// The file's own name.
    Named,
    /// The file had been deleted; the file journal keeps it at `path`. `original` is the name
    /// it had.
    Stashed { original: PathBuf },
}

/// A regular file or directory (or a memfd / shared-memory file).
pub fn capture(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    let flags = d.flags();
    let shared = |id: u32| {
        // SAFETY: fcntl(F_GET_SEALS) on our duplicate; files without seal support say EINVAL.
        let seals = unsafe { libc::fcntl(d.dup.as_raw_fd(), libc::F_GET_SEALS) }.max(0);
        ObjectImage::SharedMemory {
            id,
            flags,
            pos: d.info.pos(),
            seals,
        }
    };
    if let Some(id) = c.ctx.shared_object_of(d.dev, d.ino) {
        return Ok(shared(id));
    }
    if let Some(name) = memfd_name(&d.link) {
        // Held through a descriptor only (made and not mapped yet, or an in-memory file).
        if let Some(id) = c
            .ctx
            .memfd_by_descriptor(d.dev, d.ino, name, d.size, &d.dup)?
        {
            return Ok(shared(id));
        }
        return Err(c.unsupported(
            d,
            "a memfd whose contents the checkpoint does not hold (it is not mapped shared by the tree)",
        ));
    }
    if in_proc_of_a_process(&d.link) {
        return Err(c.unsupported(
            d,
            "a file of a process's /proc directory cannot be opened again (process ids change with a restore)",
        ));
    }
    let directory = d.file_type() == libc::S_IFDIR;
    let (path, source) = match d.link.strip_suffix(" (deleted)") {
        None => (PathBuf::from(&d.link), FileSource::Named),
        Some(original) => {
            let h = &d.holders[0];
            let stashed = match c.ctx.stash_path_of(d.dev, d.ino) {
                Some(p) => Some(p),
                None if !directory => c.ctx.adopt_deleted(c.procs[h.proc].pid, h.fd)?,
                None => None,
            };
            match stashed {
                Some(p) => (
                    p,
                    FileSource::Stashed {
                        original: PathBuf::from(original),
                    },
                ),
                None => {
                    return Err(c.unsupported(
                        d,
                        "the file was deleted and no file journal keeps it, so it cannot be opened again",
                    ))
                }
            }
        }
    };
    Ok(ObjectImage::File(FileImage {
        path,
        flags,
        pos: d.info.pos(),
        size: d.size,
        directory,
        source,
    }))
}

/// The name a memfd was made with, from its descriptor's link (`/memfd:NAME (deleted)`).
fn memfd_name(link: &str) -> Option<&str> {
    let rest = link.strip_prefix("/memfd:")?;
    Some(rest.strip_suffix(" (deleted)").unwrap_or(rest))
}

/// `/proc/<pid>/…` (or `/proc/<pid>` itself).
fn in_proc_of_a_process(link: &str) -> bool {
    link.strip_prefix("/proc/")
        .map(|rest| rest.split('/').next().unwrap_or(""))
        .is_some_and(|first| !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()))
}

/// A character device that is not a pseudo-terminal of the tree.
pub fn capture_device(c: &mut Capture<'_>, d: &Desc) -> Result<ObjectImage> {
    if STATELESS_DEVICES.contains(&d.link.as_str()) {
        return Ok(ObjectImage::Device {
            path: PathBuf::from(&d.link),
            flags: d.flags(),
        });
    }
    c.external(
        d,
        "a device (or a terminal whose other side is outside the tree) cannot be checkpointed",
    )
}

pub fn restore(f: &FileImage) -> Result<OwnedFd> {
    let md = std::fs::metadata(&f.path).map_err(|e| RunError::CannotRecreate {
        what: format!("the file {}: {e}", f.path.display()),
    })?;
    if !f.directory && md.is_file() && md.len() < f.size {
        return Err(RunError::FileChanged {
            path: f.path.clone(),
            what: format!(
                "{} bytes at the checkpoint, {} now (cut by someone else)",
                f.size,
                md.len()
            ),
        });
    }
    let fd = match sys::open(&f.path, open_flags(f.flags)) {
        Ok(fd) => fd,
        // The tree may have inherited it (a shell's redirection of kioku's own stdio, opened
        // with rights the restoring user lacks): the restoring command's own, when it is the
        // same file.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => own_stdio_of(&md)
            .ok_or_else(|| RunError::CannotRecreate {
                what: format!("the file {}: opening it failed: {e}", f.path.display()),
            })?,
        Err(e) => {
            return Err(RunError::CannotRecreate {
                what: format!("the file {}: opening it failed: {e}", f.path.display()),
            })
        }
    };
    seek(&fd, f.flags, f.pos, &f.path)?;
    Ok(fd)
}

/// A duplicate of the monitor's own standard stream that is the file `md` describes, if any.
pub fn own_stdio_of(md: &std::fs::Metadata) -> Option<OwnedFd> {
    use std::os::unix::fs::MetadataExt;
    (0..=2).find_map(|n| {
        let own = std::fs::metadata(format!("/proc/self/fd/{n}")).ok()?;
        if own.dev() != md.dev() || own.ino() != md.ino() {
            return None;
        }
        // SAFETY: the monitor's standard streams stay open while it runs.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(n) }
            .try_clone_to_owned()
            .ok()
    })
}

fn seek(fd: &OwnedFd, flags: i32, pos: u64, what: &Path) -> Result<()> {
    if pos == 0 || flags & libc::O_PATH != 0 {
        return Ok(());
    }
    // SAFETY: lseek on a descriptor we own.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), pos as i64, libc::SEEK_SET) };
    sys::cvt(r).map_err(|e| RunError::io(format!("seeking {} to {pos}", what.display()), e))?;
    Ok(())
}

/// Flags for opening a file again: never create or truncate.
fn open_flags(flags: i32) -> i32 {
    flags & !(libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL | libc::O_NOCTTY)
}

pub fn restore_device(path: &Path, flags: i32) -> Result<OwnedFd> {
    sys::open(path, open_flags(flags)).map_err(|e| RunError::CannotRecreate {
        what: format!("the device {}: {e}", path.display()),
    })
}

pub fn restore_shared(
    r: &mut Restore<'_>,
    id: u32,
    flags: i32,
    pos: u64,
    seals: i32,
) -> Result<OwnedFd> {
    let obj = r.ctx.open_shared_object(id)?;
    let what = PathBuf::from(format!("shared-memory object {id}"));
    // A description of its own, with the program's access mode.
    let fd = sys::reopen(obj.as_fd(), flags)
        .map_err(|e| RunError::io(format!("opening {} again", what.display()), e))?;
    sys::set_fl(fd.as_fd(), sys::settable(flags))
        .map_err(|e| RunError::io("F_SETFL on shared memory", e))?;
    seek(&fd, flags, pos, &what)?;
    // SAFETY: fcntl(F_GET_SEALS) on a descriptor we own.
    let have = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) }.max(0);
    let missing = seals & !have;
    if missing != 0 {
        // SAFETY: fcntl(F_ADD_SEALS) on a descriptor we own.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, missing) };
        sys::cvt(r as i64).map_err(|e| RunError::CannotRecreate {
            what: format!("the seals {seals:#x} of {}: {e}", what.display()),
        })?;
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_processes_in_proc_are_told_apart() {
        assert!(in_proc_of_a_process("/proc/1234/status"));
        assert!(in_proc_of_a_process("/proc/1234"));
        assert!(!in_proc_of_a_process("/proc/meminfo"));
        assert!(!in_proc_of_a_process("/proc"));
        assert!(!in_proc_of_a_process("/home/proc/12/x"));
    }
}
