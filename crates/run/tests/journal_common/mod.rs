//! Shared by the journal's tests: snapshots of a directory tree (names, contents, sizes,
//! modes, mtimes of regular files, symlink targets) and an in-process workload that tells the
//! journal about each change before making it, as the monitor does at a trap.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use kioku_run::journal::{Change, Journal, JournalError, SectionStore, Target, Verdict, WriteAt};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    File {
        data: Vec<u8>,
        mode: u32,
        mtime: (i64, i64),
    },
    Dir {
        mode: u32,
    },
    Link(PathBuf),
    Other(u32),
}

pub type Snapshot = BTreeMap<PathBuf, Entry>;

/// Whether a name belongs to kioku (stash directories), not to the program.
pub fn ours(name: &std::ffi::OsStr) -> bool {
    let n = name.to_string_lossy();
    n.starts_with(".kioku") || n.ends_with(".stash")
}

pub fn snapshot(root: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Snapshot) {
    let mut names: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    names.sort_by_key(|e| e.file_name());
    for e in names {
        if ours(&e.file_name()) {
            continue;
        }
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_path_buf();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let entry = if ft.is_file() {
            Entry::File {
                data: std::fs::read(&p).unwrap(),
                mode: m.mode() & 0o7777,
                mtime: (m.mtime(), m.mtime_nsec()),
            }
        } else if ft.is_dir() {
            walk(root, &p, out);
            Entry::Dir {
                mode: m.mode() & 0o7777,
            }
        } else if ft.is_symlink() {
            Entry::Link(std::fs::read_link(&p).unwrap())
        } else {
            Entry::Other(m.mode())
        };
        out.insert(rel, entry);
    }
}

/// The first few differences, for assertion messages.
pub fn diff(want: &Snapshot, got: &Snapshot) -> String {
    let mut s = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => s.push(format!("missing {}", k.display())),
            Some(g) if g != v => s.push(format!("differs {}: {}", k.display(), brief(v, g))),
            _ => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            s.push(format!("extra {}", k.display()));
        }
    }
    s.truncate(8);
    s.join("; ")
}

fn brief(want: &Entry, got: &Entry) -> String {
    match (want, got) {
        (
            Entry::File {
                data: a,
                mode: ma,
                mtime: ta,
            },
            Entry::File {
                data: b,
                mode: mb,
                mtime: tb,
            },
        ) => {
            let first = a.iter().zip(b.iter()).position(|(x, y)| x != y);
            format!(
                "len {} vs {}, first differing byte {first:?}, mode {ma:o} vs {mb:o}, mtime {ta:?} vs {tb:?}",
                a.len(),
                b.len()
            )
        }
        _ => format!("{want:?} vs {got:?}"),
    }
}

/// Why a workload stopped.
#[derive(Debug)]
pub enum Stop {
    /// The journal could not write the pool (a power cut): the call did not run.
    Journal(JournalError),
    Incomplete(String),
}

/// A program's file work, done in this process: each change is first described to the
/// journal (as a trap would), then made.
pub struct Work {
    pub dir: PathBuf,
    rng: ChaCha8Rng,
    /// Descriptors kept open across steps (some of their files get unlinked).
    held: Vec<File>,
    created: u32,
    pid: i32,
}

const NAMES: &[&str] = &["f0", "f1", "f2", "f3", "d/g0", "d/g1", "d/g2"];

impl Work {
    /// A tree to work on: a few files with contents, a subdirectory.
    pub fn new(dir: &Path, seed: u64) -> Work {
        let dir = std::fs::canonicalize(dir).unwrap();
        std::fs::create_dir_all(dir.join("d")).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for n in NAMES {
            let len = rng.gen_range(0..20_000);
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            std::fs::write(dir.join(n), data).unwrap();
        }
        Work {
            dir,
            rng,
            held: Vec::new(),
            created: 0,
            pid: std::process::id() as i32,
        }
    }

    fn tell(&self, j: &mut Journal, store: &mut dyn SectionStore, c: Change) -> Result<(), Stop> {
        match j.record(store, &c) {
            Ok(Verdict::Incomplete { why }) => Err(Stop::Incomplete(why)),
            Ok(_) => Ok(()),
            Err(e) => Err(Stop::Journal(e)),
        }
    }

    fn fd(&self, f: &File) -> Target {
        Target::Fd {
            tid: self.pid,
            fd: f.as_raw_fd(),
        }
    }

    fn pick(&mut self) -> PathBuf {
        let n = NAMES[self.rng.gen_range(0..NAMES.len())];
        self.dir.join(n)
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.rng.gen_range(1..max);
        (0..n).map(|_| self.rng.gen()).collect()
    }

    fn open_rw(p: &Path) -> Option<File> {
        OpenOptions::new().read(true).write(true).open(p).ok()
    }

    /// One step of work; `Err` when the journal said stop (the change was not made).
    pub fn step(&mut self, j: &mut Journal, store: &mut dyn SectionStore) -> Result<(), Stop> {
        let op = self.rng.gen_range(0..16);
        let p = self.pick();
        match op {
            0 | 1 => {
                // pwrite over and past the end
                let Some(f) = Work::open_rw(&p) else {
                    return Ok(());
                };
                let size = f.metadata().unwrap().size();
                let off = self.rng.gen_range(0..size + 4000);
                let data = self.bytes(9000);
                self.tell(
                    j,
                    store,
                    Change::Write {
                        target: self.fd(&f),
                        at: WriteAt::Offset(off),
                        len: data.len() as u64,
                    },
                )?;
                f.write_all_at(&data, off).unwrap();
            }
            2 => {
                // write at the position
                let Some(mut f) = Work::open_rw(&p) else {
                    return Ok(());
                };
                let size = f.metadata().unwrap().size();
                f.seek(SeekFrom::Start(self.rng.gen_range(0..=size)))
                    .unwrap();
                let data = self.bytes(5000);
                self.tell(
                    j,
                    store,
                    Change::Write {
                        target: self.fd(&f),
                        at: WriteAt::Position,
                        len: data.len() as u64,
                    },
                )?;
                f.write_all(&data).unwrap();
            }
            3 => {
                // append (O_APPEND)
                let Ok(mut f) = OpenOptions::new().append(true).open(&p) else {
                    return Ok(());
                };
                let data = self.bytes(3000);
                self.tell(
                    j,
                    store,
                    Change::Write {
                        target: self.fd(&f),
                        at: WriteAt::Position,
                        len: data.len() as u64,
                    },
                )?;
                f.write_all(&data).unwrap();
            }
            4 => {
                // ftruncate shorter or longer
                let Some(f) = Work::open_rw(&p) else {
                    return Ok(());
                };
                let size = f.metadata().unwrap().size();
                let len = self.rng.gen_range(0..size + 3000);
                self.tell(
                    j,
                    store,
                    Change::Truncate {
                        target: self.fd(&f),
                        len,
                    },
                )?;
                f.set_len(len).unwrap();
            }
            5 => {
                // open O_TRUNC (creating when missing), then write
                let flags = libc::O_WRONLY | libc::O_TRUNC | libc::O_CREAT;
                self.tell(
                    j,
                    store,
                    Change::Open {
                        path: p.clone(),
                        flags,
                    },
                )?;
                let Ok(mut f) = OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .create(true)
                    .open(&p)
                else {
                    return Ok(());
                };
                let data = self.bytes(4000);
                self.tell(
                    j,
                    store,
                    Change::Write {
                        target: self.fd(&f),
                        at: WriteAt::Position,
                        len: data.len() as u64,
                    },
                )?;
                f.write_all(&data).unwrap();
            }
            6 => {
                // unlink (a held descriptor may keep it open)
                if std::fs::symlink_metadata(&p).is_err() {
                    return Ok(());
                }
                self.tell(
                    j,
                    store,
                    Change::Remove {
                        path: p.clone(),
                        dir: false,
                    },
                )?;
                std::fs::remove_file(&p).unwrap();
            }
            7 => {
                // rename over another name, or to a new one
                let to = if self.rng.gen_bool(0.5) {
                    self.pick()
                } else {
                    self.dir.join(format!("r{}", self.rng.gen_range(0..3)))
                };
                if std::fs::symlink_metadata(&p).is_err() || to == p {
                    return Ok(());
                }
                self.tell(
                    j,
                    store,
                    Change::Rename {
                        from: p.clone(),
                        to: to.clone(),
                        flags: 0,
                    },
                )?;
                std::fs::rename(&p, &to).unwrap();
                // Names come back into use.
                if !NAMES.iter().any(|n| self.dir.join(n) == to) {
                    self.tell(
                        j,
                        store,
                        Change::Rename {
                            from: to.clone(),
                            to: p.clone(),
                            flags: 0,
                        },
                    )?;
                    std::fs::rename(&to, &p).unwrap();
                }
            }
            8 => {
                // mkdir / rmdir
                let e = self.dir.join("e");
                if e.exists() {
                    let inner = e.join("x");
                    if inner.exists() {
                        self.tell(
                            j,
                            store,
                            Change::Remove {
                                path: inner.clone(),
                                dir: false,
                            },
                        )?;
                        std::fs::remove_file(&inner).unwrap();
                    }
                    self.tell(
                        j,
                        store,
                        Change::Remove {
                            path: e.clone(),
                            dir: true,
                        },
                    )?;
                    std::fs::remove_dir(&e).unwrap();
                } else {
                    self.tell(
                        j,
                        store,
                        Change::Create {
                            path: e.clone(),
                            kind: kioku_run::journal::format::Created::Dir,
                        },
                    )?;
                    std::fs::create_dir(&e).unwrap();
                    let inner = e.join("x");
                    self.tell(
                        j,
                        store,
                        Change::Open {
                            path: inner.clone(),
                            flags: libc::O_CREAT | libc::O_WRONLY,
                        },
                    )?;
                    std::fs::write(&inner, b"inner").unwrap();
                }
            }
            9 => {
                // punch a hole
                let Some(f) = Work::open_rw(&p) else {
                    return Ok(());
                };
                let size = f.metadata().unwrap().size();
                if size == 0 {
                    return Ok(());
                }
                let off = self.rng.gen_range(0..size);
                let len = self.rng.gen_range(1..8192);
                self.tell(
                    j,
                    store,
                    Change::Overwrite {
                        target: self.fd(&f),
                        offset: off,
                        len: Some(len),
                    },
                )?;
                // SAFETY: fallocate on a descriptor we own.
                let r = unsafe {
                    libc::fallocate(
                        f.as_raw_fd(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        off as i64,
                        len as i64,
                    )
                };
                assert_eq!(r, 0, "punch hole: {}", std::io::Error::last_os_error());
            }
            10 => {
                // a symlink or a hard link under a new name
                self.created += 1;
                let to = self.dir.join(format!("l{}", self.created % 4));
                if std::fs::symlink_metadata(&to).is_ok() || std::fs::symlink_metadata(&p).is_err()
                {
                    return Ok(());
                }
                self.tell(
                    j,
                    store,
                    Change::Create {
                        path: to.clone(),
                        kind: kioku_run::journal::format::Created::NonDir,
                    },
                )?;
                if self.rng.gen_bool(0.5) {
                    std::os::unix::fs::symlink(&p, &to).unwrap();
                } else {
                    std::fs::hard_link(&p, &to).unwrap();
                }
            }
            11 => {
                // chmod, or an explicit mtime (as touch -d does)
                if !p.is_file() {
                    return Ok(());
                }
                self.tell(
                    j,
                    store,
                    Change::Attrs {
                        target: Target::Path(p.clone()),
                    },
                )?;
                if self.rng.gen_bool(0.5) {
                    let mode = [0o600, 0o644, 0o400][self.rng.gen_range(0..3)];
                    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
                } else {
                    let t = std::time::UNIX_EPOCH
                        + std::time::Duration::from_secs(self.rng.gen_range(1..2_000_000_000));
                    File::options()
                        .write(true)
                        .open(&p)
                        .ok()
                        .map(|f| f.set_modified(t));
                }
            }
            12 => {
                // sqlite-like: create a journal file, write it, remove it
                let jp = self.dir.join("f0-journal");
                self.tell(
                    j,
                    store,
                    Change::Open {
                        path: jp.clone(),
                        flags: libc::O_CREAT | libc::O_RDWR | libc::O_EXCL,
                    },
                )?;
                let Ok(f) = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&jp)
                else {
                    return Ok(());
                };
                for k in 0..3u64 {
                    let data = self.bytes(4096);
                    self.tell(
                        j,
                        store,
                        Change::Write {
                            target: self.fd(&f),
                            at: WriteAt::Offset(k * 4096),
                            len: data.len() as u64,
                        },
                    )?;
                    f.write_all_at(&data, k * 4096).unwrap();
                }
                drop(f);
                self.tell(
                    j,
                    store,
                    Change::Remove {
                        path: jp.clone(),
                        dir: false,
                    },
                )?;
                std::fs::remove_file(&jp).unwrap();
            }
            13 => {
                // keep a descriptor open (its file may be unlinked later: deleted-but-open)
                if self.held.len() < 3 {
                    if let Some(f) = Work::open_rw(&p) {
                        self.held.push(f);
                    }
                }
            }
            _ => {
                // write through a held descriptor (its file may be deleted by now)
                if self.held.is_empty() {
                    return Ok(());
                }
                let i = self.rng.gen_range(0..self.held.len());
                let size = self.held[i].metadata().unwrap().size();
                let off = self.rng.gen_range(0..size + 100);
                let data = self.bytes(3000);
                let t = self.fd(&self.held[i]);
                self.tell(
                    j,
                    store,
                    Change::Write {
                        target: t,
                        at: WriteAt::Offset(off),
                        len: data.len() as u64,
                    },
                )?;
                self.held[i].write_all_at(&data, off).unwrap();
            }
        }
        Ok(())
    }

    /// Contents of held files that are deleted now (in the stash), by their stash path: what a
    /// restore of this moment must find there.
    pub fn deleted_held(&self, j: &Journal) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for f in &self.held {
            let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
            if !link.to_string_lossy().ends_with(" (deleted)") {
                continue;
            }
            let m = f.metadata().unwrap();
            let at = j.stash_path_of(m.dev(), m.ino()).unwrap_or_else(|| {
                panic!(
                    "deleted file {} held open is not in the stash",
                    link.display()
                )
            });
            let mut data = vec![0u8; m.size() as usize];
            f.read_exact_at(&mut data, 0).unwrap();
            out.push((at, data));
        }
        out
    }
}

/// A scratch directory on tmpfs (fsync is free there), under /dev/shm when it exists.
pub fn scratch(tag: &str) -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix(&format!("kioku-journal-{tag}-"))
        .rand_bytes(6)
        .tempdir_in(base)
        .unwrap()
}

pub mod trapper;

/// What a checkpoint taken now must bring back for the stopped program `pid` working in
/// `root`: the tree, and the deleted files it holds open (found in the stash, as the
/// descriptor capture finds them with `stash_path_of`).
pub fn capture(root: &Path, pid: i32, j: &Journal) -> (Snapshot, Vec<(PathBuf, Vec<u8>)>) {
    let mut held = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !link.to_string_lossy().ends_with(" (deleted)") {
            continue;
        }
        let Ok(m) = std::fs::metadata(e.path()) else {
            continue;
        };
        if !m.is_file() {
            continue;
        }
        let at = j.stash_path_of(m.dev(), m.ino()).unwrap_or_else(|| {
            panic!(
                "deleted file {} held open is not in the stash",
                link.display()
            )
        });
        held.push((at, std::fs::read(e.path()).unwrap()));
    }
    (snapshot(root), held)
}
