//! The stash: where the journal keeps inodes whose last name the program removes (unlink, or
//! replaced by rename), hard-linked before the call runs so that a restore can link them back
//! and a deleted-but-open file can be reopened.
//!
//! A hard link needs the same mount, so there is one stash directory per mount: the pool's own
//! `<pool>.stash/` when the file is on that mount (the usual case: the program works below the
//! directory it was started in), else `<mount point>/.kioku-stash/<pool id>/` (created 0700).
//! Stash directories are listed in the journal's head, so a restore (another process) finds
//! them; entries are named after the inode number, which is unique on a mount while the link
//! keeps the inode alive. Where no stash directory can be made, or the file system refuses the
//! link, the recorder copies the file into the pool instead (`UnlinkedCopy`).

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::format::FileKey;

const STATX_MNT_ID: u32 = 0x1000;

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The mount id of `path` (not following a final symlink).
pub fn mount_id(path: &Path, follow: bool) -> io::Result<u64> {
    let c = cstr(path)?;
    // SAFETY: a zeroed statx is a valid output buffer.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statx for the call.
    let r = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), flags, STATX_MNT_ID, &mut st) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if st.stx_mask & STATX_MNT_ID == 0 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    Ok(st.stx_mnt_id)
}

/// The mount point of mount `id` (from this process's mountinfo).
fn mount_point(id: u64) -> io::Result<PathBuf> {
    crate::mountinfo::mounts()?
        .into_iter()
        .find(|m| m.id == id)
        .map(|m| m.point)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// One stash directory.
#[derive(Debug)]
pub struct StashDir {
    pub path: PathBuf,
    dir: File,
}

impl StashDir {
    fn open(path: &Path) -> io::Result<StashDir> {
        let dir = File::open(path)?;
        Ok(StashDir {
            path: path.to_path_buf(),
            dir,
        })
    }

    pub fn sync(&self) -> io::Result<()> {
        self.dir.sync_all()
    }
}

/// The journal's stash directories and what is in them.
#[derive(Debug)]
pub struct Stash {
    /// Preferred directory (next to the pool) and the stash-directory name under mount points.
    preferred: Option<PathBuf>,
    subdir: String,
    /// By mount id; `None`: no stash directory can be had on that mount.
    dirs: HashMap<u64, Option<StashDir>>,
    /// Inodes in the stash, and where.
    pub entries: HashMap<FileKey, PathBuf>,
    /// Copies of deleted files made at a capture: original -> (copy, epoch of the capture).
    pub copies: HashMap<FileKey, (PathBuf, u64)>,
    /// Stash files a checkpoint's descriptors name -> the last such checkpoint's epoch. The
    /// program may close such a file after the capture's stop and before the commit: no
    /// process holds it then and no record may name it any more, yet a restore reopens it.
    pub named: HashMap<PathBuf, u64>,
    counter: u64,
}

/// A new stash directory the caller must list in the journal's head before using it.
pub struct NewDir {
    pub mount: u64,
    pub path: PathBuf,
}

impl Stash {
    pub fn new(preferred: Option<PathBuf>, subdir: String) -> Stash {
        Stash {
            preferred,
            subdir,
            dirs: HashMap::new(),
            entries: HashMap::new(),
            copies: HashMap::new(),
            named: HashMap::new(),
            counter: 0,
        }
    }

    /// Reads back the stash directories a journal lists (at open): their entries.
    pub fn adopt_dirs(&mut self, dirs: &[PathBuf]) {
        for d in dirs {
            let Ok(sd) = StashDir::open(d) else { continue };
            let Ok(mnt) = mount_id(d, false) else {
                continue;
            };
            if let Ok(rd) = std::fs::read_dir(d) {
                for e in rd.flatten() {
                    if let Ok(m) = std::fs::symlink_metadata(e.path()) {
                        self.entries.insert(
                            FileKey {
                                dev: m.dev(),
                                ino: m.ino(),
                            },
                            e.path(),
                        );
                    }
                }
            }
            self.dirs.insert(mnt, Some(sd));
        }
    }

    /// The stash directory for files on the mount of `file`: known, or to be made (`Err`
    /// names the new directory, which the caller registers and then passes to `created`).
    pub fn dir_for(&mut self, file: &Path, follow: bool) -> io::Result<Result<&StashDir, NewDir>> {
        let mnt = mount_id(file, follow)?;
        if let Some(d) = self.dirs.get(&mnt) {
            return match d {
                Some(_) => Ok(Ok(self.dirs[&mnt].as_ref().expect("some"))),
                None => Err(io::Error::other("no stash directory on this mount")),
            };
        }
        // The preferred directory, if it is (or its parent is) on this mount.
        if let Some(p) = &self.preferred {
            let probe = if p.exists() {
                p.clone()
            } else {
                p.parent().map(Path::to_path_buf).unwrap_or_default()
            };
            if mount_id(&probe, true).ok() == Some(mnt) {
                return Ok(Err(NewDir {
                    mount: mnt,
                    path: p.clone(),
                }));
            }
        }
        match mount_point(mnt) {
            Ok(root) => Ok(Err(NewDir {
                mount: mnt,
                path: root.join(".kioku-stash").join(&self.subdir),
            })),
            Err(e) => {
                self.dirs.insert(mnt, None);
                Err(e)
            }
        }
    }

    /// Makes the directory `d` (registered by the caller) and uses it for its mount; durable
    /// when `durable`. On failure the mount is marked as having none.
    pub fn make_dir(&mut self, d: NewDir, durable: bool) -> io::Result<()> {
        let r = (|| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d.path)?;
            // Where a bind mount or a symlink put it on another mount, it is of no use.
            if mount_id(&d.path, true)? != d.mount {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            if durable {
                let mut p = d.path.as_path();
                while let Some(parent) = p.parent() {
                    File::open(p)?.sync_all()?;
                    if mount_id(parent, true).ok() != Some(d.mount) {
                        break;
                    }
                    p = parent;
                }
            }
            StashDir::open(&d.path)
        })();
        match r {
            Ok(sd) => {
                self.dirs.insert(d.mount, Some(sd));
                Ok(())
            }
            Err(e) => {
                self.dirs.insert(d.mount, None);
                Err(e)
            }
        }
    }

    /// Marks a mount as having no stash directory (its registration failed).
    pub fn refuse_mount(&mut self, mount: u64) {
        self.dirs.insert(mount, None);
    }

    /// Hard-links `path` (an inode `key` on the mount of `dir`) into the stash; made durable
    /// when `durable`. Returns the stash path.
    pub fn link(&mut self, path: &Path, key: FileKey, durable: bool) -> io::Result<PathBuf> {
        if let Some(p) = self.entries.get(&key) {
            if same_inode(p, key) {
                return Ok(p.clone());
            }
        }
        let dir = match self.dir_for(path, false)? {
            Ok(d) => d,
            Err(_) => return Err(io::Error::other("stash directory not made yet")),
        };
        let name = format!("{:020}", key.ino);
        let target = dir.path.join(&name);
        let src = cstr(path)?;
        let dst = cstr(Path::new(&name))?;
        for _ in 0..2 {
            // SAFETY: NUL-terminated paths and a directory descriptor we hold.
            let r = unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    src.as_ptr(),
                    dir.dir.as_raw_fd(),
                    dst.as_ptr(),
                    0,
                )
            };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
            if same_inode(&target, key) {
                break;
            }
            // An entry of an inode that is gone (its number reused): not ours any more.
            std::fs::remove_file(&target)?;
        }
        if durable {
            dir.sync()?;
        }
        self.entries.insert(key, target.clone());
        Ok(target)
    }

    /// Links an open, unnamed file (`/proc/TID/fd/FD` of an O_TMPFILE file) into the stash.
    pub fn link_open(
        &mut self,
        proc_fd: &Path,
        key: FileKey,
        durable: bool,
    ) -> io::Result<PathBuf> {
        let dir = match self.dir_for(proc_fd, true)? {
            Ok(d) => d,
            Err(_) => return Err(io::Error::other("stash directory not made yet")),
        };
        let name = format!("{:020}", key.ino);
        let target = dir.path.join(&name);
        let (src, dst) = (cstr(proc_fd)?, cstr(Path::new(&name))?);
        // SAFETY: NUL-terminated paths and a directory descriptor we hold.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                src.as_ptr(),
                dir.dir.as_raw_fd(),
                dst.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        if durable {
            dir.sync()?;
        }
        self.entries.insert(key, target.clone());
        Ok(target)
    }

    /// A copy of the open file `src` (an inode `orig` deleted before the journal saw it) as a
    /// new stash file, made durable. For the capture of `epoch`.
    pub fn copy_in(&mut self, proc_fd: &Path, orig: FileKey, epoch: u64) -> io::Result<PathBuf> {
        let dir = match self.dir_for(proc_fd, true)? {
            Ok(d) => d,
            Err(_) => return Err(io::Error::other("stash directory not made yet")),
        };
        let dirpath = dir.path.clone();
        let mut from = File::open(proc_fd)?;
        let c = cstr(&dirpath)?;
        // SAFETY: a NUL-terminated directory path; the result is a new descriptor we own.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let mut to = unsafe { File::from_raw_fd(fd) };
        let mode = from.metadata()?.mode();
        io::copy(&mut from, &mut to)?;
        to.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode & 0o7777))?;
        to.sync_all()?;
        self.counter += 1;
        let name = format!("copy-{epoch}-{}-{}", orig.ino, self.counter);
        let (src, dst) = (
            cstr(Path::new(&format!("/proc/self/fd/{}", to.as_raw_fd())))?,
            cstr(Path::new(&name))?,
        );
        let dirfd = self
            .dirs
            .values()
            .flatten()
            .find(|d| d.path == dirpath)
            .expect("dir");
        // SAFETY: NUL-terminated paths and a directory descriptor we hold.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                src.as_ptr(),
                dirfd.dir.as_raw_fd(),
                dst.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        dirfd.sync()?;
        let path = dirpath.join(name);
        let m = to.metadata()?;
        self.entries.insert(
            FileKey {
                dev: m.dev(),
                ino: m.ino(),
            },
            path.clone(),
        );
        self.copies.insert(orig, (path.clone(), epoch));
        Ok(path)
    }

    /// Every stash directory in use.
    pub fn dirs(&self) -> impl Iterator<Item = &StashDir> {
        self.dirs.values().flatten()
    }

    /// Removes stash entries no live record names, no copy or descriptor of a checkpoint of
    /// epoch `keep_from` or later needs, and no process holds open. Returns how many were
    /// removed.
    pub fn sweep(&mut self, referenced: &HashSet<PathBuf>, keep_from: u64) -> usize {
        self.copies.retain(|_, (_, e)| *e >= keep_from);
        self.named.retain(|_, e| *e >= keep_from);
        let keep: HashSet<PathBuf> = self
            .copies
            .values()
            .map(|(p, _)| p.clone())
            .chain(self.named.keys().cloned())
            .chain(referenced.iter().cloned())
            .collect();
        let mut removed = 0;
        let dirs: Vec<PathBuf> = self.dirs().map(|d| d.path.clone()).collect();
        for d in dirs {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if keep.contains(&p) || held_open(&p) {
                    continue;
                }
                if std::fs::remove_file(&p).is_ok() {
                    removed += 1;
                    self.entries.retain(|_, v| v != &p);
                }
            }
        }
        removed
    }
}

/// Whether `p` is the inode `key`.
pub fn same_inode(p: &Path, key: FileKey) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.dev() == key.dev && m.ino() == key.ino)
}

/// Whether some process holds the regular file `p` open: a write lease is granted only when
/// nobody else has it open. Errors count as held (keep the file).
fn held_open(p: &Path) -> bool {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_file() => {}
        Ok(_) => return false,
        Err(_) => return true,
    }
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_nonblock()
        .open(p)
    else {
        return true;
    };
    // SAFETY: fcntl on a descriptor we own.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    if r != 0 {
        return true;
    }
    // SAFETY: as above; releases the lease before the descriptor is closed.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    false
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_tells_whether_a_file_is_held() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        assert!(!held_open(&p));
        let f = File::open(&p).unwrap();
        assert!(held_open(&p));
        drop(f);
        assert!(!held_open(&p));
    }

    /// Links a new file "f" of `dir` into `s` (whose directory is `dir`/p.stash) and removes
    /// it; returns the stash path and the key.
    fn stash_a_removed_file(s: &mut Stash, dir: &Path) -> (PathBuf, FileKey) {
        let f = dir.join("f");
        std::fs::write(&f, b"data").unwrap();
        let m = std::fs::metadata(&f).unwrap();
        let key = FileKey {
            dev: m.dev(),
            ino: m.ino(),
        };
        let nd = match s.dir_for(&f, false).unwrap() {
            Err(nd) => nd,
            Ok(_) => panic!("no dir yet"),
        };
        assert_eq!(nd.path, dir.join("p.stash"));
        s.make_dir(nd, true).unwrap();
        let at = s.link(&f, key, true).unwrap();
        std::fs::remove_file(&f).unwrap();
        (at, key)
    }

    #[test]
    fn links_into_a_stash_next_to_the_pool() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Stash::new(Some(d.path().join("p.stash")), "x".into());
        let (at, key) = stash_a_removed_file(&mut s, d.path());
        assert_eq!(std::fs::read(&at).unwrap(), b"data");
        assert_eq!(
            s.link(&at, key, false).unwrap(),
            at,
            "linking again reuses the entry"
        );
        assert_eq!(s.sweep(&HashSet::new(), 0), 1);
        assert!(!at.exists());
    }

    #[test]
    fn a_file_the_committed_checkpoints_descriptors_name_outlives_its_last_holder() {
        let d = tempfile::tempdir().unwrap();
        let mut s = Stash::new(Some(d.path().join("p.stash")), "x".into());
        let (at, _) = stash_a_removed_file(&mut s, d.path());
        // Checkpoint 3's descriptors name it; nobody holds it when 3 commits.
        s.named.insert(at.clone(), 3);
        assert_eq!(s.sweep(&HashSet::new(), 3), 0, "checkpoint 3 reopens it");
        assert_eq!(std::fs::read(&at).unwrap(), b"data");
        // Checkpoint 4 no longer names it.
        assert_eq!(s.sweep(&HashSet::new(), 4), 1);
        assert!(!at.exists());
    }
}
