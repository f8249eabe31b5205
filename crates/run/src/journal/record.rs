//! The recorder: what a change needs in the journal before it may run — a file's base record
//! at its first change in an epoch, pre-images of checkpoint bytes about to be overwritten
//! (once per range per epoch), names created, removed names kept in the stash.

use std::fs::{File, Metadata};
use std::io;
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::decode::{self, Change, Target, WriteAt};
use super::error::{JournalError, Result};
use super::format::{Attrs, Created, FileKey, Record, Time};
use super::intervals::Intervals;
use super::log::AppendError;
use super::{FileState, Journal, SectionStore, Verdict};

/// Why a change could not be journaled.
enum Fail {
    /// The journal cannot record it (named): incomplete from here on; the call still runs.
    Incomplete(String),
    /// The pool could not be written.
    Journal(JournalError),
}

impl From<JournalError> for Fail {
    fn from(e: JournalError) -> Self {
        Fail::Journal(e)
    }
}

type R<T> = std::result::Result<T, Fail>;

/// File systems whose "files" are kernel interfaces: not journaled.
const PSEUDO_FS: &[i64] = &[
    0x9fa0,      // proc
    0x6265_6572, // sysfs
    0x0027_e0eb, // cgroup
    0x6367_7270, // cgroup2
    0x6462_6720, // debugfs
    0x7472_6163, // tracefs
    0x7363_6673, // securityfs
    0xcafe_4a11, // bpf
    0x6265_6570, // configfs
    0x6165_676c, // pstore
    0xde5e_81e4, // efivarfs
    0x6573_5543, // fusectl
    0x1cd1,      // devpts
];

fn attrs_of(m: &Metadata) -> Attrs {
    Attrs {
        size: m.size(),
        mtime: Time {
            sec: m.mtime(),
            nsec: m.mtime_nsec() as u32,
        },
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
    }
}

fn key_of(m: &Metadata) -> FileKey {
    FileKey {
        dev: m.dev(),
        ino: m.ino(),
    }
}

fn parent(p: &Path) -> PathBuf {
    p.parent().unwrap_or(Path::new("/")).to_path_buf()
}

fn not_there(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::EBADF) | Some(libc::ESRCH)
    )
}

impl Journal {
    pub(super) fn record_change(
        &mut self,
        store: &mut dyn SectionStore,
        change: &Change,
    ) -> Result<Verdict> {
        if self.log.incomplete().is_some() {
            return Ok(Verdict::Run);
        }
        let r = match change {
            Change::Nothing => Ok(Verdict::Run),
            Change::Unsupported(why) => Err(Fail::Incomplete(why.clone())),
            Change::Write { target, at, len } => self.on_write(store, target, *at, *len),
            Change::Truncate { target, len } => self.on_truncate(store, target, *len),
            Change::Overwrite {
                target,
                offset,
                len,
            } => {
                let end = len.map_or(u64::MAX, |l| offset.saturating_add(l));
                self.on_range(store, target, *offset..end)
            }
            Change::Shift { target, offset } => self.on_range(store, target, *offset..u64::MAX),
            Change::Attrs { target } => self.prepare(store, target).map(|_| Verdict::Run),
            Change::Open { path, flags } => self.on_open(store, path, *flags),
            Change::Remove { path, dir } => self.on_remove(store, path, *dir),
            Change::Create { path, kind } => self.on_create(store, path, *kind),
            Change::Rename { from, to, flags } => self.on_rename(store, from, to, *flags),
            Change::StdSeek { .. } | Change::StdClose | Change::StdDup { .. } => {
                return Ok(std_stream(change))
            }
        };
        match r {
            Ok(v) => Ok(v),
            Err(Fail::Incomplete(why)) => self.give_up(store, why),
            Err(Fail::Journal(e)) => {
                let why = format!("the journal could not be written: {e}");
                self.give_up(store, why).map_err(|_| e)
            }
        }
    }

    fn give_up(&mut self, store: &mut dyn SectionStore, why: String) -> Result<Verdict> {
        let tag = self.tag.unwrap_or(0);
        self.log.mark_incomplete(store, tag, &why)?;
        tracing::warn!(epoch = tag, %why, "file journal incomplete: no more checkpoints");
        Ok(Verdict::Incomplete { why })
    }

    fn append(&mut self, store: &mut dyn SectionStore, rec: &Record) -> R<()> {
        let tag = self.tag.expect("records only within an epoch");
        match self.log.append(store, tag, rec) {
            Ok(_) => Ok(()),
            Err(AppendError::NoSpace(e)) => {
                Err(Fail::Incomplete(format!("the pool's medium is full ({e})")))
            }
            Err(AppendError::Other(e)) => Err(Fail::Journal(e)),
        }
    }

    /// Whether files on device `dev` (seen through `p`) are journaled.
    fn journaled_fs(&mut self, dev: u64, p: &Path) -> bool {
        if let Some(&j) = self.fs_journaled.get(&dev) {
            return j;
        }
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            return true;
        };
        // SAFETY: a zeroed statfs is a valid output buffer.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path, `st` writable.
        let ok = unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0;
        let j = !(ok && PSEUDO_FS.contains(&(st.f_type as i64)));
        self.fs_journaled.insert(dev, j);
        j
    }

    /// The regular file a change acts on, if it is one the journal keeps.
    fn stat_target(&mut self, t: &Target) -> R<Option<Metadata>> {
        let (p, m) = match t {
            Target::Fd { tid, fd } => {
                let p = PathBuf::from(format!("/proc/{tid}/fd/{fd}"));
                let m = std::fs::metadata(&p);
                (p, m)
            }
            Target::Path(p) => (p.clone(), std::fs::symlink_metadata(p)),
        };
        // A descriptor gone from /proc here or in the steps after (`path_of`, `open_handle`)
        // means its process is being killed (SIGKILL ends it at this trap: the call never
        // runs) or another thread closed it (the call fails): nothing to record. Seen under
        // load: a SIGKILL between the stat and the naming made the journal give up.
        let m = match m {
            Ok(m) => m,
            Err(e) if not_there(&e) => return Ok(None),
            Err(e) => {
                return Err(Fail::Incomplete(format!(
                    "cannot examine {}: {e}",
                    p.display()
                )))
            }
        };
        if !m.is_file() || !self.journaled_fs(m.dev(), &p) {
            return Ok(None);
        }
        Ok(Some(m))
    }

    /// The path records name file `key` by: where it is now, or its place in the stash.
    /// `None`: a deleted file the journal cannot name (its bytes are copied at captures).
    fn path_of(
        &mut self,
        store: &mut dyn SectionStore,
        t: &Target,
        key: FileKey,
    ) -> R<Option<PathBuf>> {
        if let Some(p) = self.files.get(&key).and_then(|f| f.path.clone()) {
            return Ok(Some(p));
        }
        let p = match t {
            Target::Path(p) => Some(p.clone()),
            Target::Fd { tid, fd } => {
                let proc_fd = PathBuf::from(format!("/proc/{tid}/fd/{fd}"));
                let link = match std::fs::read_link(&proc_fd) {
                    Ok(link) => link,
                    Err(e) if not_there(&e) => return Ok(None),
                    Err(e) => {
                        return Err(Fail::Incomplete(format!(
                            "cannot name {}: {e}",
                            proc_fd.display()
                        )))
                    }
                };
                if super::stash::same_inode(&link, key) {
                    Some(link)
                } else if let Some(s) = self.stash_path_of(key.dev, key.ino) {
                    Some(s)
                } else if self.unlinkable.contains(&key) {
                    None
                } else {
                    // Deleted and not ours (O_TMPFILE, or deleted before kioku saw it): link it
                    // into the stash if the file system allows; else it is copied at captures.
                    let linked = self.stash_ready(store, &proc_fd, true)?
                        && self.stash.link_open(&proc_fd, key, self.durable).is_ok();
                    if linked {
                        self.stash_path_of(key.dev, key.ino)
                    } else {
                        self.unlinkable.insert(key);
                        None
                    }
                }
            }
        };
        if let (Some(p), Some(f)) = (&p, self.files.get_mut(&key)) {
            f.path = Some(p.clone());
        }
        Ok(p)
    }

    /// A read handle on the file of `t`; `None` if its descriptor is gone (see `stat_target`).
    fn open_handle(t: &Target, key: FileKey) -> R<Option<File>> {
        let p = match t {
            Target::Fd { tid, fd } => PathBuf::from(format!("/proc/{tid}/fd/{fd}")),
            Target::Path(p) => p.clone(),
        };
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK)
            .open(&p)
        {
            Ok(f) => f,
            Err(e) if matches!(t, Target::Fd { .. }) && not_there(&e) => return Ok(None),
            Err(e) => {
                return Err(Fail::Incomplete(format!(
                    "cannot read {}: {e}",
                    p.display()
                )))
            }
        };
        let m = f
            .metadata()
            .map_err(|e| Fail::Incomplete(format!("cannot read {}: {e}", p.display())))?;
        if key_of(&m) != key {
            return Err(Fail::Incomplete(format!(
                "{} changed while being journaled",
                p.display()
            )));
        }
        Ok(Some(f))
    }

    /// The journal's state of the file `t` names (made at its first change in the epoch, with
    /// its base record): its key, or `None` when it is not journaled.
    fn prepare(&mut self, store: &mut dyn SectionStore, t: &Target) -> R<Option<FileKey>> {
        let Some(m) = self.stat_target(t)? else {
            return Ok(None);
        };
        let key = key_of(&m);
        if !self.files.contains_key(&key) {
            let Some(path) = self.path_of(store, t, key)? else {
                return Ok(None);
            };
            let Some(handle) = Journal::open_handle(t, key)? else {
                return Ok(None);
            };
            self.files.insert(
                key,
                FileState {
                    ckpt_size: m.size(),
                    saved: Intervals::default(),
                    handle: Some(handle),
                    based: false,
                    path: Some(path),
                },
            );
        }
        if self.tag.is_some() && !self.files[&key].based {
            let Some(path) = self.path_of(store, t, key)? else {
                return Ok(None);
            };
            // The size at the checkpoint is the size at the first change: every change since
            // was trapped (this is the first).
            let attrs = attrs_of(&m);
            self.append(store, &Record::FileBase { key, path, attrs })?;
            let f = self.files.get_mut(&key).expect("present");
            f.ckpt_size = m.size();
            f.based = true;
        }
        Ok(Some(key))
    }

    /// Saves the checkpoint bytes of `r` (clipped to the checkpoint size) not saved yet.
    fn save(
        &mut self,
        store: &mut dyn SectionStore,
        t: &Target,
        key: FileKey,
        r: Range<u64>,
    ) -> R<()> {
        if self.tag.is_none() {
            return Ok(());
        }
        let (missing, path) = {
            let f = &self.files[&key];
            let end = r.end.min(f.ckpt_size);
            if r.start >= end {
                return Ok(());
            }
            (f.saved.missing(r.start..end), f.path.clone())
        };
        if missing.is_empty() {
            return Ok(());
        }
        let path = match path {
            Some(p) => p,
            None => match self.path_of(store, t, key)? {
                Some(p) => p,
                None => return Ok(()),
            },
        };
        let chunk = (self.log.max_payload() - 64 - path.as_os_str().len()).max(4096) as u64;
        for m in missing {
            let mut at = m.start;
            while at < m.end {
                let n = (m.end - at).min(chunk) as usize;
                let mut data = vec![0u8; n];
                let f = self.files[&key].handle.as_ref().expect("handle");
                let got = read_full(f, &mut data, at).map_err(|e| {
                    Fail::Incomplete(format!("cannot read {}: {e}", path.display()))
                })?;
                if got < n {
                    // Bytes below the checkpoint size that are neither in the file nor saved:
                    // something outside the program cut it.
                    return Err(Fail::Incomplete(format!(
                        "{} is shorter than the journal knows (changed outside the program?)",
                        path.display()
                    )));
                }
                self.append(
                    store,
                    &Record::PreImage {
                        key,
                        path: path.clone(),
                        offset: at,
                        data,
                    },
                )?;
                at += n as u64;
            }
            self.files.get_mut(&key).expect("present").saved.insert(m);
        }
        Ok(())
    }

    fn on_write(
        &mut self,
        store: &mut dyn SectionStore,
        t: &Target,
        at: WriteAt,
        len: u64,
    ) -> R<Verdict> {
        let Some(key) = self.prepare(store, t)? else {
            return Ok(Verdict::Run);
        };
        let start = match at {
            WriteAt::Offset(o) => o,
            // Appends land at the end: bytes there (below the checkpoint size) were saved
            // when the file was cut.
            WriteAt::Append => return Ok(Verdict::Run),
            WriteAt::Position => {
                let Target::Fd { tid, fd } = t else {
                    return Ok(Verdict::Run);
                };
                let (pos, flags) = match decode::fdinfo(*tid, *fd) {
                    Ok(v) => v,
                    Err(e) if not_there(&e) => return Ok(Verdict::Run),
                    Err(e) => {
                        return Err(Fail::Incomplete(format!(
                            "cannot read the position of descriptor {fd}: {e}"
                        )))
                    }
                };
                if flags & libc::O_APPEND != 0 {
                    return Ok(Verdict::Run);
                }
                pos
            }
        };
        self.save(store, t, key, start..start.saturating_add(len))?;
        Ok(Verdict::Run)
    }

    fn on_truncate(&mut self, store: &mut dyn SectionStore, t: &Target, len: u64) -> R<Verdict> {
        let Some(key) = self.prepare(store, t)? else {
            return Ok(Verdict::Run);
        };
        self.save(store, t, key, len..u64::MAX)?;
        Ok(Verdict::Run)
    }

    fn on_range(&mut self, store: &mut dyn SectionStore, t: &Target, r: Range<u64>) -> R<Verdict> {
        let Some(key) = self.prepare(store, t)? else {
            return Ok(Verdict::Run);
        };
        self.save(store, t, key, r)?;
        Ok(Verdict::Run)
    }

    fn on_open(&mut self, store: &mut dyn SectionStore, path: &Path, flags: i32) -> R<Verdict> {
        match std::fs::symlink_metadata(path) {
            Ok(m) => {
                let excl = flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0;
                if !excl && flags & libc::O_TRUNC != 0 && m.is_file() {
                    return self.on_truncate(store, &Target::Path(path.to_path_buf()), 0);
                }
                Ok(Verdict::Run)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && flags & libc::O_CREAT != 0 => {
                self.created(store, path, Created::NonDir)
            }
            Err(_) => Ok(Verdict::Run),
        }
    }

    fn created(&mut self, store: &mut dyn SectionStore, path: &Path, kind: Created) -> R<Verdict> {
        self.dirs_now.insert(parent(path));
        if self.tag.is_some() {
            self.append(
                store,
                &Record::Created {
                    kind,
                    path: path.to_path_buf(),
                },
            )?;
        }
        Ok(Verdict::Run)
    }

    fn on_create(
        &mut self,
        store: &mut dyn SectionStore,
        path: &Path,
        kind: Created,
    ) -> R<Verdict> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => self.created(store, path, kind),
            _ => Ok(Verdict::Run),
        }
    }

    fn names_changed(&mut self) {
        for f in self.files.values_mut() {
            f.path = None;
        }
    }

    fn on_remove(&mut self, store: &mut dyn SectionStore, path: &Path, dir: bool) -> R<Verdict> {
        let Ok(m) = std::fs::symlink_metadata(path) else {
            return Ok(Verdict::Run);
        };
        if dir != m.is_dir() {
            return Ok(Verdict::Run);
        }
        if dir {
            if self.tag.is_some() {
                self.append(
                    store,
                    &Record::Rmdir {
                        path: path.to_path_buf(),
                        attrs: attrs_of(&m),
                    },
                )?;
            }
        } else {
            self.keep_name(store, path, &m)?;
        }
        self.dirs_now.insert(parent(path));
        self.names_changed();
        Ok(Verdict::Run)
    }

    /// A name about to go (unlink, or replaced by rename): its inode hard-linked into the
    /// stash (durably, before the record), or, where that is impossible, copied into the pool.
    fn keep_name(&mut self, store: &mut dyn SectionStore, path: &Path, m: &Metadata) -> R<()> {
        let key = key_of(m);
        let stash = if self.stash_ready(store, path, false)? {
            match self.stash.link(path, key, self.durable) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "not linked into the stash: copied into the pool");
                    None
                }
            }
        } else {
            None
        };
        if let Some(s) = stash {
            self.dirs_now.insert(parent(&s));
            if self.tag.is_some() {
                self.append(
                    store,
                    &Record::Unlinked {
                        key,
                        path: path.to_path_buf(),
                        stash: s,
                    },
                )?;
            }
            return Ok(());
        }
        if self.tag.is_none() {
            return Ok(());
        }
        self.copy_into_pool(store, path, m)
    }

    fn copy_into_pool(&mut self, store: &mut dyn SectionStore, path: &Path, m: &Metadata) -> R<()> {
        let ft = m.file_type();
        let link_target =
            if ft.is_symlink() {
                Some(std::fs::read_link(path).map_err(|e| {
                    Fail::Incomplete(format!("cannot keep {}: {e}", path.display()))
                })?)
            } else {
                None
            };
        let owner = self.log.next_seq();
        self.append(
            store,
            &Record::UnlinkedCopy {
                key: key_of(m),
                path: path.to_path_buf(),
                attrs: attrs_of(m),
                rdev: m.rdev(),
                link_target,
            },
        )?;
        if !ft.is_file() {
            return Ok(());
        }
        let f = File::open(path)
            .map_err(|e| Fail::Incomplete(format!("cannot keep {}: {e}", path.display())))?;
        let chunk = (self.log.max_payload() - 64) as u64;
        let mut at = 0u64;
        while at < m.size() {
            let n = (m.size() - at).min(chunk) as usize;
            let mut data = vec![0u8; n];
            let got = read_full(&f, &mut data, at)
                .map_err(|e| Fail::Incomplete(format!("cannot keep {}: {e}", path.display())))?;
            data.truncate(got);
            if data.is_empty() {
                break;
            }
            let len = data.len() as u64;
            self.append(
                store,
                &Record::CopyData {
                    owner,
                    offset: at,
                    data,
                },
            )?;
            at += len;
        }
        Ok(())
    }

    fn on_rename(
        &mut self,
        store: &mut dyn SectionStore,
        from: &Path,
        to: &Path,
        flags: u32,
    ) -> R<Verdict> {
        let Ok(a) = std::fs::symlink_metadata(from) else {
            return Ok(Verdict::Run);
        };
        let (noreplace, exchange) = decode::rename_flags(flags);
        let b = std::fs::symlink_metadata(to).ok();
        let mut to_key = None;
        if exchange {
            let Some(b) = &b else {
                return Ok(Verdict::Run);
            };
            to_key = Some(key_of(b));
        } else if let Some(b) = &b {
            if key_of(b) == key_of(&a) || noreplace {
                return Ok(Verdict::Run);
            }
            if b.is_dir() {
                if !a.is_dir() {
                    return Ok(Verdict::Run);
                }
                if self.tag.is_some() {
                    self.append(
                        store,
                        &Record::Rmdir {
                            path: to.to_path_buf(),
                            attrs: attrs_of(b),
                        },
                    )?;
                }
            } else {
                if a.is_dir() {
                    return Ok(Verdict::Run);
                }
                self.keep_name(store, to, b)?;
            }
        }
        if self.tag.is_some() {
            self.append(
                store,
                &Record::Renamed {
                    from: from.to_path_buf(),
                    to: to.to_path_buf(),
                    from_key: key_of(&a),
                    to_key,
                    exchange,
                },
            )?;
        }
        self.dirs_now.insert(parent(from));
        self.dirs_now.insert(parent(to));
        self.names_changed();
        Ok(Verdict::Run)
    }

    /// Makes sure a stash directory exists for the mount of `file` (registered in the head
    /// first, then made). False: none can be had there.
    pub(super) fn stash_ready(
        &mut self,
        store: &mut dyn SectionStore,
        file: &Path,
        follow: bool,
    ) -> Result<bool> {
        let nd = match self.stash.dir_for(file, follow) {
            Ok(Ok(_)) => return Ok(true),
            Ok(Err(nd)) => nd,
            Err(_) => return Ok(false),
        };
        if !self.log.add_stash_dir(store, nd.path.clone())? {
            self.stash.refuse_mount(nd.mount);
            return Ok(false);
        }
        let path = nd.path.clone();
        match self.stash.make_dir(nd, self.durable) {
            Ok(()) => Ok(true),
            Err(e) => {
                tracing::info!(dir = %path.display(), error = %e, "no stash directory on this mount: removed files are copied into the pool");
                Ok(false)
            }
        }
    }
}

fn read_full(f: &File, buf: &mut [u8], mut off: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], off) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A standard stream that could overwrite data: a regular file open for writing without
/// O_APPEND. Its position and size.
fn writable_stream(tid: i32, fd: i32) -> Option<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{tid}/fd/{fd}")).ok()?;
    if !m.is_file() {
        return None;
    }
    let (pos, flags) = decode::fdinfo(tid, fd).ok()?;
    if flags & libc::O_ACCMODE == libc::O_RDONLY || flags & libc::O_APPEND != 0 {
        return None;
    }
    Some((pos, m.size()))
}

/// The escalation rule at calls on descriptors 0–2 (see `docs/journal.md`).
fn std_stream(change: &Change) -> Verdict {
    match *change {
        Change::StdSeek {
            tid,
            fd,
            offset,
            whence,
        } => {
            let Some((pos, size)) = writable_stream(tid, fd) else {
                return Verdict::Run;
            };
            let new = match whence {
                libc::SEEK_SET => offset as i128,
                libc::SEEK_CUR => pos as i128 + offset as i128,
                libc::SEEK_END => size as i128 + offset as i128,
                // SEEK_DATA, SEEK_HOLE: somewhere from `offset` to the end.
                _ => offset as i128,
            };
            if new < size as i128 {
                Verdict::EscalateAll
            } else {
                Verdict::Run
            }
        }
        // Any later open, dup or pipe may land on the freed number, untrapped.
        Change::StdClose => Verdict::Escalate,
        Change::StdDup { tid, old, new } => match new {
            // A copy of a standard stream at >= 3 could move its position untrapped.
            None => {
                if old <= 2 && writable_stream(tid, old).is_some() {
                    Verdict::EscalateAll
                } else {
                    Verdict::Run
                }
            }
            Some(new) if new <= 2 => match writable_stream(tid, old) {
                Some((pos, size)) if pos < size => Verdict::Escalate,
                _ => Verdict::Run,
            },
            Some(_) => {
                if old <= 2 && writable_stream(tid, old).is_some() {
                    Verdict::EscalateAll
                } else {
                    Verdict::Run
                }
            }
        },
        _ => Verdict::Run,
    }
}

/// `Journal::escalation_needed`.
pub(super) fn escalation_needed(pid: i32) -> Result<bool> {
    const KCMP_FILE: i32 = 0;
    let mut others: Option<Vec<i32>> = None;
    for fd in 0..=2 {
        let Some((pos, size)) = writable_stream(pid, fd) else {
            continue;
        };
        if pos < size {
            return Ok(true);
        }
        if others.is_none() {
            let dir = format!("/proc/{pid}/fd");
            let list = std::fs::read_dir(&dir)
                .map_err(|e| JournalError::io(format!("listing {dir}"), e))?;
            others = Some(
                list.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .filter(|&n: &i32| n > 2)
                    .collect(),
            );
        }
        for &o in others.as_deref().unwrap_or(&[]) {
            // SAFETY: kcmp with integer arguments compares two descriptors of `pid`.
            let r = unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_FILE, fd, o) };
            if r == 0 {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
