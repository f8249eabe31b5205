//! Undoing the journal at a restore: one algorithm over two file systems — [`DryFs`], a model
//! of the namespace as the undo would leave it (for `check`, which changes nothing), and
//! [`RealFs`] (for `apply`). So what `check` accepts is exactly what `apply` does.
//!
//! Records are undone newest first. Each step checks the state before acting, so a step done
//! already is skipped; name steps are marked in the head before they run (after everything
//! before them is made durable), so a restore killed part-way resumes at the step it was in —
//! content steps (pre-images, sizes) between two name steps are simply redone.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::error::{JournalError, Result};
use super::format::{Attrs, Created, FileKey, Kind, Record};
use super::log::{Log, RecRef};
use super::SectionStore;

/// What a restore's undo did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Records undone.
    pub records: u64,
    /// Bytes written back into files.
    pub bytes: u64,
    /// Names removed, linked back, recreated or renamed back.
    pub names: u64,
    /// Whether an interrupted restore was resumed.
    pub resumed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    File,
    Dir,
    Other,
}

#[derive(Clone, Copy, Debug)]
struct Meta {
    key: FileKey,
    ty: Type,
}

fn meta_of(m: &std::fs::Metadata) -> Meta {
    let ft = m.file_type();
    Meta {
        key: FileKey {
            dev: m.dev(),
            ino: m.ino(),
        },
        ty: if ft.is_file() {
            Type::File
        } else if ft.is_dir() {
            Type::Dir
        } else {
            Type::Other
        },
    }
}

fn lstat(p: &Path) -> Result<Option<Meta>> {
    match std::fs::symlink_metadata(p) {
        Ok(m) => Ok(Some(meta_of(&m))),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(JournalError::io(format!("stat {}", p.display()), e)),
    }
}

/// The operations an undo step performs.
trait Fs {
    fn lookup(&self, p: &Path) -> Result<Option<Meta>>;
    fn write_at(&mut self, p: &Path, key: Option<FileKey>, off: u64, data: &[u8]) -> Result<()>;
    fn set_base(&mut self, p: &Path, key: Option<FileKey>, a: &Attrs) -> Result<()>;
    fn remove(&mut self, p: &Path, dir: bool) -> Result<()>;
    fn link(&mut self, from: &Path, to: &Path) -> Result<()>;
    fn mkdir(&mut self, p: &Path, a: &Attrs) -> Result<()>;
    /// Renames `from` to `to` (exchanges them).
    fn rename(&mut self, from: &Path, to: &Path, exchange: bool) -> Result<()>;
    fn copy_data(&mut self, owner: u64, path: &Path, off: u64, data: &[u8]) -> Result<()>;
    fn copy_finish(&mut self, owner: u64, rec: &Record) -> Result<()>;
    /// A name step with sequence number `seq` is about to run.
    fn progress(&mut self, log: &mut Log, store: &mut dyn SectionStore, seq: u64) -> Result<()>;
}

/// Undoes the live records of tags >= `epoch` from `start` (a sequence number, inclusive)
/// down, on `fs`.
fn run(
    fs: &mut dyn Fs,
    log: &mut Log,
    store: &mut dyn SectionStore,
    epoch: u64,
    start: u64,
) -> Result<ApplyStats> {
    let todo: Vec<RecRef> = log
        .records()
        .iter()
        .rev()
        .filter(|r| r.tag >= epoch && r.seq <= start)
        .copied()
        .collect();
    // Files the undo recreates from copies get new inodes: older records of theirs are
    // checked by path only. Copies' paths, by the owning record.
    let mut copied: HashSet<FileKey> = HashSet::new();
    let mut owners: HashMap<u64, PathBuf> = HashMap::new();
    for r in log
        .records()
        .iter()
        .filter(|r| r.kind == Kind::UnlinkedCopy)
    {
        if let Record::UnlinkedCopy { key, path, .. } = log.read(store.pool(), r)? {
            copied.insert(key);
            owners.insert(r.seq, path);
        }
    }
    let is = |m: Option<Meta>, key: FileKey| {
        m.is_some_and(|m| m.key == key || (copied.contains(&key) && m.ty != Type::Dir))
    };
    let want = |k: FileKey| (!copied.contains(&k)).then_some(k);
    let mut st = ApplyStats::default();
    for r in todo {
        let rec = log.read(store.pool(), &r)?;
        if r.kind.is_name() {
            fs.progress(log, store, r.seq)?;
        }
        st.records += 1;
        match &rec {
            Record::PreImage {
                key,
                path,
                offset,
                data,
            } => {
                if !is(fs.lookup(path)?, *key) {
                    return Err(JournalError::changed(
                        path,
                        "it is not the file the program wrote (missing, or another inode)",
                    ));
                }
                fs.write_at(path, want(*key), *offset, data)?;
                st.bytes += data.len() as u64;
            }
            Record::FileBase { key, path, attrs } => {
                if !is(fs.lookup(path)?, *key) {
                    return Err(JournalError::changed(
                        path,
                        "it is not the file the program wrote (missing, or another inode)",
                    ));
                }
                fs.set_base(path, want(*key), attrs)?;
            }
            Record::Created { kind, path } => {
                let dir = *kind == Created::Dir;
                match fs.lookup(path)? {
                    None => {}
                    Some(m) if (m.ty == Type::Dir) == dir => {
                        fs.remove(path, dir)?;
                        st.names += 1;
                    }
                    Some(_) => {
                        return Err(JournalError::changed(
                            path,
                            if dir {
                                "the program created a directory there, now it is something else"
                            } else {
                                "the program created a file there, now it is a directory"
                            },
                        ))
                    }
                }
            }
            Record::Unlinked { key, path, stash } => match fs.lookup(path)? {
                Some(m) if m.key == *key => {}
                Some(_) => {
                    return Err(JournalError::changed(
                        path,
                        "another file has taken the name the program removed",
                    ))
                }
                None => {
                    if !is(fs.lookup(stash)?, *key) {
                        return Err(JournalError::changed(
                            path,
                            format!("the copy kept in the stash ({}) is gone", stash.display()),
                        ));
                    }
                    fs.link(stash, path)?;
                    st.names += 1;
                }
            },
            Record::UnlinkedCopy { path, .. } => {
                if fs.lookup(path)?.is_none() {
                    fs.copy_finish(r.seq, &rec)?;
                    st.names += 1;
                }
            }
            Record::CopyData {
                owner,
                offset,
                data,
            } => {
                let Some(path) = owners.get(owner) else {
                    return Err(JournalError::Damaged {
                        detail: format!("record {} belongs to a missing record {owner}", r.seq),
                    });
                };
                fs.copy_data(*owner, path, *offset, data)?;
                st.bytes += data.len() as u64;
            }
            Record::Rmdir { path, attrs } => match fs.lookup(path)? {
                Some(m) if m.ty == Type::Dir => {}
                Some(_) => {
                    return Err(JournalError::changed(
                        path,
                        "the program removed a directory there, now it is a file",
                    ))
                }
                None => {
                    fs.mkdir(path, attrs)?;
                    st.names += 1;
                }
            },
            Record::Renamed {
                from,
                to,
                from_key,
                to_key,
                exchange,
            } => {
                let (a, b) = (fs.lookup(from)?, fs.lookup(to)?);
                if !exchange {
                    if is(a, *from_key) {
                        continue;
                    }
                    if a.is_none() && is(b, *from_key) {
                        fs.rename(to, from, false)?;
                        st.names += 1;
                        continue;
                    }
                } else {
                    let tk = to_key.unwrap_or(FileKey { dev: 0, ino: 0 });
                    if is(a, *from_key) && is(b, tk) {
                        continue;
                    }
                    if is(a, tk) && is(b, *from_key) {
                        fs.rename(from, to, true)?;
                        st.names += 1;
                        continue;
                    }
                }
                return Err(JournalError::changed(
                    from,
                    format!(
                        "the program renamed it to {}, and neither name holds that file now",
                        to.display()
                    ),
                ));
            }
        }
    }
    Ok(st)
}

/// The namespace as the undo would leave it: the real file system seen through the name
/// operations done so far (newest last).
#[derive(Default)]
pub(super) struct DryFs {
    ops: Vec<DryOp>,
}

enum DryOp {
    /// A name made to hold `meta` (link back, recreated copy, mkdir).
    Made {
        path: PathBuf,
        meta: Meta,
    },
    Removed {
        path: PathBuf,
    },
    /// `from` renamed to `to`.
    Renamed {
        from: PathBuf,
        to: PathBuf,
    },
    Exchanged {
        a: PathBuf,
        b: PathBuf,
    },
}

fn under(q: &Path, p: &Path) -> Option<PathBuf> {
    q.strip_prefix(p).ok().map(Path::to_path_buf)
}

impl Fs for DryFs {
    fn lookup(&self, q: &Path) -> Result<Option<Meta>> {
        let mut q = q.to_path_buf();
        for op in self.ops.iter().rev() {
            match op {
                DryOp::Made { path, meta } => {
                    if q == *path {
                        return Ok(Some(*meta));
                    }
                    if q.starts_with(path) {
                        // Inside a directory made empty by the undo.
                        return Ok(None);
                    }
                }
                DryOp::Removed { path } => {
                    if q.starts_with(path) {
                        return Ok(None);
                    }
                }
                DryOp::Renamed { from, to } => {
                    if let Some(rest) = under(&q, to) {
                        q = join(from, &rest);
                    } else if q.starts_with(from) {
                        return Ok(None);
                    }
                }
                DryOp::Exchanged { a, b } => {
                    if let Some(rest) = under(&q, a) {
                        q = join(b, &rest);
                    } else if let Some(rest) = under(&q, b) {
                        q = join(a, &rest);
                    }
                }
            }
        }
        lstat(&q)
    }
    fn write_at(&mut self, _: &Path, _: Option<FileKey>, _: u64, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn set_base(&mut self, _: &Path, _: Option<FileKey>, _: &Attrs) -> Result<()> {
        Ok(())
    }
    fn remove(&mut self, p: &Path, _: bool) -> Result<()> {
        self.ops.push(DryOp::Removed {
            path: p.to_path_buf(),
        });
        Ok(())
    }
    fn link(&mut self, from: &Path, to: &Path) -> Result<()> {
        let meta = self
            .lookup(from)?
            .ok_or_else(|| JournalError::changed(from, "missing"))?;
        self.need_parent(to)?;
        self.ops.push(DryOp::Made {
            path: to.to_path_buf(),
            meta,
        });
        Ok(())
    }
    fn mkdir(&mut self, p: &Path, _: &Attrs) -> Result<()> {
        self.need_parent(p)?;
        self.ops.push(DryOp::Made {
            path: p.to_path_buf(),
            meta: Meta {
                key: FileKey { dev: 0, ino: 0 },
                ty: Type::Dir,
            },
        });
        Ok(())
    }
    fn rename(&mut self, from: &Path, to: &Path, exchange: bool) -> Result<()> {
        self.need_parent(to)?;
        self.ops.push(if exchange {
            DryOp::Exchanged {
                a: from.to_path_buf(),
                b: to.to_path_buf(),
            }
        } else {
            DryOp::Renamed {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
            }
        });
        Ok(())
    }
    fn copy_data(&mut self, _: u64, path: &Path, _: u64, _: &[u8]) -> Result<()> {
        self.need_parent(path)
    }
    fn copy_finish(&mut self, _: u64, rec: &Record) -> Result<()> {
        if let Record::UnlinkedCopy {
            key, path, attrs, ..
        } = rec
        {
            self.need_parent(path)?;
            let ty = match attrs.mode & libc::S_IFMT {
                libc::S_IFREG => Type::File,
                _ => Type::Other,
            };
            self.ops.push(DryOp::Made {
                path: path.clone(),
                meta: Meta { key: *key, ty },
            });
        }
        Ok(())
    }
    fn progress(&mut self, _: &mut Log, _: &mut dyn SectionStore, _: u64) -> Result<()> {
        Ok(())
    }
}

impl DryFs {
    fn need_parent(&self, p: &Path) -> Result<()> {
        let parent = p.parent().unwrap_or(Path::new("/"));
        match self.lookup(parent)? {
            Some(m) if m.ty == Type::Dir => Ok(()),
            _ => Err(JournalError::changed(
                p,
                format!("its directory {} is missing", parent.display()),
            )),
        }
    }
}

fn join(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    }
}

/// The real file system.
pub(super) struct RealFs {
    epoch: u64,
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
}

fn c(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| JournalError::changed(p, "NUL in path"))
}

fn last_err(what: &str, p: &Path) -> JournalError {
    JournalError::io(
        format!("{what} {}", p.display()),
        io::Error::last_os_error(),
    )
}

impl RealFs {
    pub fn new(epoch: u64) -> RealFs {
        RealFs {
            epoch,
            files: BTreeSet::new(),
            dirs: BTreeSet::new(),
        }
    }

    /// Opens `p` for writing, without following a symlink, checking it is inode `key`. A file
    /// the program made read-only is made writable for the undo (its base record, undone
    /// later, puts its mode back).
    fn open_write(&mut self, p: &Path, key: Option<FileKey>) -> Result<File> {
        let open = || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
                .open(p)
        };
        let f = match open() {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                let m = std::fs::symlink_metadata(p)
                    .map_err(|e| JournalError::io(format!("stat {}", p.display()), e))?;
                std::fs::set_permissions(
                    p,
                    std::os::unix::fs::PermissionsExt::from_mode((m.mode() & 0o7777) | 0o200),
                )
                .map_err(|e| JournalError::io(format!("chmod {}", p.display()), e))?;
                open().map_err(|e| JournalError::io(format!("open {}", p.display()), e))?
            }
            Err(e) => return Err(JournalError::io(format!("open {}", p.display()), e)),
        };
        if let Some(k) = key {
            let m = f
                .metadata()
                .map_err(|e| JournalError::io(format!("stat {}", p.display()), e))?;
            if m.dev() != k.dev || m.ino() != k.ino {
                return Err(JournalError::changed(p, "another inode is at its name"));
            }
        }
        self.files.insert(p.to_path_buf());
        Ok(f)
    }

    fn touch_dir(&mut self, p: &Path) {
        self.dirs
            .insert(p.parent().unwrap_or(Path::new("/")).to_path_buf());
    }

    fn temp_of(owner: u64, path: &Path) -> PathBuf {
        path.parent()
            .unwrap_or(Path::new("/"))
            .join(format!(".kioku-undo-{owner}"))
    }

    /// Makes everything done so far durable.
    fn sync(&mut self) -> Result<()> {
        for p in std::mem::take(&mut self.files) {
            match File::open(&p) {
                Ok(f) => f
                    .sync_all()
                    .map_err(|e| JournalError::io(format!("fsync {}", p.display()), e))?,
                // Renamed or removed by a later step: its own directory sync covers it.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(JournalError::io(format!("open {}", p.display()), e)),
            }
        }
        for d in std::mem::take(&mut self.dirs) {
            if let Ok(f) = File::open(&d) {
                f.sync_all()
                    .map_err(|e| JournalError::io(format!("fsync {}", d.display()), e))?;
            }
        }
        Ok(())
    }
}

fn set_attrs(f: &File, p: &Path, a: &Attrs) -> Result<()> {
    let m = f
        .metadata()
        .map_err(|e| JournalError::io(format!("stat {}", p.display()), e))?;
    if m.uid() != a.uid || m.gid() != a.gid {
        // SAFETY: fchown on a descriptor we own.
        if unsafe { libc::fchown(f.as_raw_fd(), a.uid, a.gid) } != 0 {
            return Err(last_err("chown", p));
        }
    }
    if m.mode() & 0o7777 != a.mode & 0o7777 {
        // SAFETY: fchmod on a descriptor we own.
        if unsafe { libc::fchmod(f.as_raw_fd(), a.mode & 0o7777) } != 0 {
            return Err(last_err("chmod", p));
        }
    }
    let ts = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: a.mtime.sec,
            tv_nsec: a.mtime.nsec as i64,
        },
    ];
    // SAFETY: futimens with two valid timespecs on a descriptor we own.
    if unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) } != 0 {
        return Err(last_err("set times of", p));
    }
    Ok(())
}

impl Fs for RealFs {
    fn lookup(&self, p: &Path) -> Result<Option<Meta>> {
        lstat(p)
    }
    fn write_at(&mut self, p: &Path, key: Option<FileKey>, off: u64, data: &[u8]) -> Result<()> {
        let f = self.open_write(p, key)?;
        f.write_all_at(data, off)
            .map_err(|e| JournalError::io(format!("write {}", p.display()), e))
    }
    fn set_base(&mut self, p: &Path, key: Option<FileKey>, a: &Attrs) -> Result<()> {
        let f = self.open_write(p, key)?;
        f.set_len(a.size)
            .map_err(|e| JournalError::io(format!("truncate {}", p.display()), e))?;
        set_attrs(&f, p, a)
    }
    fn remove(&mut self, p: &Path, dir: bool) -> Result<()> {
        let r = if dir {
            std::fs::remove_dir(p)
        } else {
            std::fs::remove_file(p)
        };
        match r {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(JournalError::io(format!("remove {}", p.display()), e)),
        }
        self.touch_dir(p);
        Ok(())
    }
    fn link(&mut self, from: &Path, to: &Path) -> Result<()> {
        std::fs::hard_link(from, to).map_err(|e| {
            JournalError::io(format!("link {} to {}", from.display(), to.display()), e)
        })?;
        self.touch_dir(to);
        Ok(())
    }
    fn mkdir(&mut self, p: &Path, a: &Attrs) -> Result<()> {
        match std::fs::create_dir(p) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(JournalError::io(format!("mkdir {}", p.display()), e)),
        }
        let f = File::open(p).map_err(|e| JournalError::io(format!("open {}", p.display()), e))?;
        let mut dir_attrs = *a;
        dir_attrs.mtime = {
            let m = f
                .metadata()
                .map_err(|e| JournalError::io(format!("stat {}", p.display()), e))?;
            super::format::Time {
                sec: m.mtime(),
                nsec: m.mtime_nsec() as u32,
            }
        };
        set_attrs(&f, p, &dir_attrs)?;
        self.touch_dir(p);
        Ok(())
    }
    fn rename(&mut self, from: &Path, to: &Path, exchange: bool) -> Result<()> {
        let (src, dst) = (c(from)?, c(to)?);
        let flags = if exchange { 2u32 } else { 0 };
        // SAFETY: two NUL-terminated paths.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                src.as_ptr(),
                libc::AT_FDCWD,
                dst.as_ptr(),
                flags,
            )
        };
        if r != 0 {
            return Err(last_err("rename back", from));
        }
        self.touch_dir(from);
        self.touch_dir(to);
        Ok(())
    }
    fn copy_data(&mut self, owner: u64, path: &Path, off: u64, data: &[u8]) -> Result<()> {
        let t = RealFs::temp_of(owner, path);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&t)
            .map_err(|e| JournalError::io(format!("create {}", t.display()), e))?;
        f.write_all_at(data, off)
            .map_err(|e| JournalError::io(format!("write {}", t.display()), e))?;
        self.files.insert(t);
        Ok(())
    }
    fn copy_finish(&mut self, owner: u64, rec: &Record) -> Result<()> {
        let Record::UnlinkedCopy {
            path,
            attrs,
            rdev,
            link_target,
            ..
        } = rec
        else {
            return Ok(());
        };
        let t = RealFs::temp_of(owner, path);
        match attrs.mode & libc::S_IFMT {
            libc::S_IFREG => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&t)
                    .map_err(|e| JournalError::io(format!("create {}", t.display()), e))?;
                f.set_len(attrs.size)
                    .map_err(|e| JournalError::io(format!("truncate {}", t.display()), e))?;
                set_attrs(&f, &t, attrs)?;
                f.sync_all()
                    .map_err(|e| JournalError::io(format!("fsync {}", t.display()), e))?;
            }
            libc::S_IFLNK => {
                let _ = std::fs::remove_file(&t);
                let target = link_target.clone().unwrap_or_default();
                std::os::unix::fs::symlink(&target, &t)
                    .map_err(|e| JournalError::io(format!("symlink {}", t.display()), e))?;
            }
            _ => {
                let _ = std::fs::remove_file(&t);
                let ct = c(&t)?;
                // SAFETY: a NUL-terminated path; mode and device from the record.
                if unsafe { libc::mknod(ct.as_ptr(), attrs.mode, *rdev) } != 0 {
                    return Err(last_err("mknod", &t));
                }
            }
        }
        std::fs::rename(&t, path).map_err(|e| {
            JournalError::io(format!("rename {} to {}", t.display(), path.display()), e)
        })?;
        self.touch_dir(path);
        Ok(())
    }
    fn progress(&mut self, log: &mut Log, store: &mut dyn SectionStore, seq: u64) -> Result<()> {
        // (P3) what the steps before did is durable before the marker moves past them.
        self.sync()?;
        log.set_apply(store, self.epoch, seq)
    }
}

/// `check`: what `apply` would do, changing nothing.
pub(super) fn check(log: &mut Log, store: &mut dyn SectionStore, epoch: u64) -> Result<ApplyStats> {
    let start = preflight(log, epoch)?;
    let Some(start) = start else {
        return Ok(ApplyStats {
            resumed: true,
            ..Default::default()
        });
    };
    let mut st = run(&mut DryFs::default(), log, store, epoch, start)?;
    st.resumed = log.apply_state().is_some();
    Ok(st)
}

/// `apply`: undoes the records, durably, resuming an interrupted restore of the same epoch.
pub(super) fn apply(log: &mut Log, store: &mut dyn SectionStore, epoch: u64) -> Result<ApplyStats> {
    check(log, store, epoch)?;
    let resumed = log.apply_state().is_some();
    let Some(start) = preflight(log, epoch)? else {
        return Ok(ApplyStats {
            resumed: true,
            ..Default::default()
        });
    };
    if !resumed {
        // (P1–P2) a restore of `epoch` is in progress, nothing undone yet.
        log.set_apply(store, epoch, start)?;
    }
    let mut fs = RealFs::new(epoch);
    let mut st = run(&mut fs, log, store, epoch, start)?;
    fs.sync()?;
    // (P4) all undone and durable.
    log.set_apply(store, epoch, 0)?;
    st.resumed = resumed;
    Ok(st)
}

/// The refusals that need no file system, and where to start: `None` when a restore of this
/// epoch already finished (all that is left is `reset`).
fn preflight(log: &Log, epoch: u64) -> Result<Option<u64>> {
    if let Some((since, reason)) = log.incomplete() {
        return Err(JournalError::Incomplete {
            since: *since,
            reason: reason.clone(),
        });
    }
    if epoch < log.dead_below_tag() {
        return Err(JournalError::Discarded {
            epoch,
            committed: log.dead_below_tag(),
        });
    }
    match log.apply_state() {
        Some((e, _)) if e != epoch => Err(JournalError::OtherRestoreInProgress {
            in_progress: e,
            epoch,
        }),
        Some((_, 0)) => Ok(None),
        Some((_, next)) => Ok(Some(next)),
        None => Ok(Some(log.next_seq())),
    }
}
