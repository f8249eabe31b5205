//! Descriptors of a checkpointed process tree: what each open file description is, captured
//! from the stopped processes from outside, and recreated once at restore and installed into
//! every process that held it, at the same numbers.
//!
//! * [`capture`] lists every descriptor of every process ([`ProcRef`]), groups them into open
//!   file descriptions with `kcmp(KCMP_FILE)` (a dup, a fork or SCM_RIGHTS share one: its file
//!   offset, `O_NONBLOCK`, a socket's queue are seen by all), and captures each description as
//!   one [`ObjectImage`]. Anything that cannot be brought back is refused here, with
//!   [`RunError::Unsupported`] naming the descriptor, its process and why, so a checkpoint
//!   stops before anything is written and the program runs on.
//! * [`restore`] makes every object in the monitor (or, for what lives in a process's own
//!   descriptor table — epoll registrations, POSIX locks — by system calls injected into it),
//!   installs each into every holder with [`Remote::install_fd`], then registers epoll items
//!   and takes the file locks again.
//!
//! One file per kind of object; `docs/fds.md` says how each comes back and what is lost.

mod cache;
mod diag;
mod epoll;
mod eventfd;
mod file;
mod inet;
mod inotify;
mod locks;
mod pidfd;
mod pipe;
mod pty;
mod scan;
mod signalfd;
mod sockopt;
pub(crate) mod sys;
mod timerfd;
mod unix;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, RunError};
use crate::remote::Remote;

pub use cache::Cached;
pub use epoll::{EpollImage, EpollItem};
pub use file::{own_stdio_of, FileImage, FileSource};
pub use inet::{InetImage, InetState};
pub use inotify::{InotifyImage, Watch};
pub use locks::{LockImage, LockKind};
pub use pipe::PipeImage;
pub use pty::{ControllingTty, PtyImage, Termios};
pub use sockopt::SockOpt;
pub use timerfd::TimerFdImage;
pub use unix::{UnixImage, UnixName, UnixQueue, UnixRole};

/// A stopped process whose descriptors are captured.
#[derive(Clone, Debug)]
pub struct ProcRef {
    /// Its pid as the program sees it (in the tree's pid namespace): the key in
    /// [`FdTable::procs`].
    pub image_pid: i32,
    /// Its pid as the monitor sees it.
    pub pid: i32,
    /// Descriptors that are kioku's, not the program's (the monitor's userfaultfd, its
    /// descriptor channel): skipped.
    pub own_fds: Vec<i32>,
}

/// A freshly built process the restore acts in.
pub struct RestoreRef<'a> {
    pub image_pid: i32,
    /// Runs system calls in it and installs descriptors into it.
    pub remote: &'a dyn Remote,
}

/// What the capture asks of the rest of kioku.
pub trait CaptureCtx {
    /// The path, in the file journal's stash, of an unlinked file `(dev, ino)` the journal
    /// kept hard-linked; `None` when it has none.
    fn stash_path_of(&mut self, _dev: u64, _ino: u64) -> Option<PathBuf> {
        None
    }

    /// Copies the deleted file open as `fd` in process `pid` (monitor's pid) into the stash and
    /// returns its path; `None` when there is no journal.
    fn adopt_deleted(&mut self, _pid: i32, _fd: i32) -> Result<Option<PathBuf>> {
        Ok(None)
    }

    /// The id of the shared-memory object (memfd, POSIX or SysV shared memory) with inode
    /// `(dev, ino)` whose contents the checkpoint holds as memory, if it does.
    fn shared_object_of(&mut self, _dev: u64, _ino: u64) -> Option<u32> {
        None
    }

    /// Takes memfd `(dev, ino)` named `name`, of `size` bytes, which the tree holds through a
    /// descriptor (`dup` is the monitor's duplicate) but no process maps, as a shared-memory
    /// object whose contents the checkpoint reads through the descriptor; its id, or `None`
    /// when the checkpoint cannot hold it.
    fn memfd_by_descriptor(
        &mut self,
        _dev: u64,
        _ino: u64,
        _name: &str,
        _size: u64,
        _dup: &OwnedFd,
    ) -> Result<Option<u32>> {
        Ok(None)
    }
}

/// What the restore asks of the rest of kioku.
pub trait RestoreCtx {
    /// A descriptor of shared-memory object `id` (see [`CaptureCtx::shared_object_of`]), its
    /// contents already in place.
    fn open_shared_object(&mut self, id: u32) -> Result<OwnedFd> {
        Err(RunError::CannotRecreate {
            what: format!("shared-memory object {id}: this restore holds no shared memory"),
        })
    }

    /// The pid the process with image pid `image_pid` has as the restored tree sees it: the
    /// same when the tree keeps its pids (in its own pid namespace).
    fn pid_in_tree(&mut self, image_pid: i32) -> i32 {
        image_pid
    }

    /// What the restored tree gets where the checkpointed one held standard stream `n` that
    /// led outside it (a terminal, a pipe or socket to another program): the restoring
    /// command's own, by default.
    fn inherited(&mut self, n: i32) -> Result<OwnedFd> {
        // SAFETY: the monitor's standard streams stay open while it runs.
        let fd = unsafe { BorrowedFd::borrow_raw(n) };
        fd.try_clone_to_owned()
            .map_err(|e| RunError::io(format!("duplicating kioku's own descriptor {n}"), e))
    }
}

/// A context with nothing to offer: no journal, no shared memory, the monitor's own stdio.
#[derive(Debug, Default)]
pub struct NoCtx;
impl CaptureCtx for NoCtx {}
impl RestoreCtx for NoCtx {}

/// Every descriptor of a process tree.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FdTable {
    /// One per open file description in the tree.
    pub objects: Vec<ObjectImage>,
    /// Each process's descriptors, by image pid.
    pub procs: BTreeMap<i32, Vec<FdImage>>,
    /// Pipes and FIFOs within the tree (their ends are objects).
    pub pipes: Vec<PipeImage>,
    /// Pseudo-terminals whose both ends are in the tree.
    pub ptys: Vec<PtyImage>,
    /// File locks held by the tree.
    pub locks: Vec<LockImage>,
    /// Pseudo-terminals of the tree that are some session's controlling terminal.
    pub controlling: Vec<ControllingTty>,
}

impl FdTable {
    /// The highest descriptor number process `image_pid` uses or an epoll registration of it
    /// names: numbers above it are free for kioku's own use while restoring (its descriptor
    /// channel) — restore needs every number at or below it.
    pub fn highest_number(&self, image_pid: i32) -> Option<i32> {
        let fds = self.procs.get(&image_pid)?;
        let items = fds.iter().flat_map(|f| match self.objects.get(f.object) {
            Some(ObjectImage::Epoll(e)) => e.items.iter().map(|i| i.fd).collect(),
            _ => vec![],
        });
        fds.iter().map(|f| f.fd).chain(items).max()
    }

    /// Every index the table holds points into it (a damaged image is refused, not obeyed).
    fn validate(&self) -> Result<()> {
        let n = self.objects.len();
        let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(bad(what)) };
        for fds in self.procs.values() {
            for f in fds {
                check(f.object < n && f.fd >= 0, "descriptor names no object")?;
            }
        }
        for o in &self.objects {
            match o {
                ObjectImage::Pipe { pipe, .. } => check(*pipe < self.pipes.len(), "pipe index")?,
                ObjectImage::PtyMaster { pty, .. } | ObjectImage::PtySlave { pty, .. } => {
                    check(*pty < self.ptys.len(), "pty index")?
                }
                ObjectImage::Epoll(e) => {
                    for i in &e.items {
                        check(i.object < n && i.fd >= 0, "epoll item names no object")?;
                    }
                }
                ObjectImage::Unix(u) => match u.role {
                    UnixRole::Pair { peer } | UnixRole::ConnectedTo { peer } => {
                        check(peer < n, "unix peer index")?
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        for l in &self.locks {
            check(l.object < n, "lock names no object")?;
        }
        for c in &self.controlling {
            check(c.pty < self.ptys.len(), "controlling terminal index")?;
        }
        Ok(())
    }
}

/// One descriptor: its number, the description it names, its close-on-exec flag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdImage {
    pub fd: i32,
    pub object: usize,
    pub cloexec: bool,
}

/// One open file description. `flags` are its access mode and status flags (`O_APPEND`,
/// `O_NONBLOCK`, …), as `fcntl(F_GETFL)` shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ObjectImage {
    /// Led outside the tree at standard stream `stdio` (a terminal, a pipe or socket to
    /// another program): the restoring command's own stream `stdio`.
    Inherited {
        stdio: i32,
    },
    /// A regular file or directory.
    File(FileImage),
    /// A character device that holds no state (`/dev/null`, `/dev/zero`, `/dev/urandom`…).
    Device {
        path: PathBuf,
        flags: i32,
    },
    /// A memfd or shared-memory file whose contents the checkpoint holds as memory.
    SharedMemory {
        id: u32,
        flags: i32,
        pos: u64,
        /// `F_GET_SEALS`.
        seals: i32,
    },
    /// An end of `FdTable::pipes[pipe]`.
    Pipe {
        pipe: usize,
        flags: i32,
    },
    Unix(UnixImage),
    Inet(InetImage),
    Epoll(EpollImage),
    EventFd {
        count: u64,
        semaphore: bool,
        flags: i32,
    },
    TimerFd(TimerFdImage),
    SignalFd {
        mask: u64,
        flags: i32,
    },
    Inotify(InotifyImage),
    /// The master side of `FdTable::ptys[pty]`.
    PtyMaster {
        pty: usize,
        flags: i32,
    },
    /// The slave side of `FdTable::ptys[pty]` (reopened by its new `/dev/pts` path).
    PtySlave {
        pty: usize,
        flags: i32,
    },
    /// A pidfd of a process of the tree.
    PidFd {
        image_pid: i32,
        flags: i32,
    },
}

impl ObjectImage {
    /// One line saying what the descriptor is, for `kioku inspect`.
    pub fn describe(&self) -> String {
        match self {
            ObjectImage::Inherited { stdio } => {
                format!("standard stream {stdio} of the restoring command")
            }
            ObjectImage::File(f) => format!(
                "{}{} at offset {} (size {})",
                f.path.display(),
                match &f.source {
                    FileSource::Named => String::new(),
                    FileSource::Stashed { original } =>
                        format!(" (deleted {}, kept by the journal)", original.display()),
                },
                f.pos,
                f.size
            ),
            ObjectImage::Device { path, .. } => path.display().to_string(),
            ObjectImage::SharedMemory { id, .. } => format!("shared-memory object {id}"),
            ObjectImage::Pipe { pipe, flags } => format!(
                "{} end of pipe {pipe} within the tree",
                if flags & libc::O_ACCMODE == libc::O_WRONLY {
                    "write"
                } else {
                    "read"
                }
            ),
            ObjectImage::Unix(_) => "a Unix socket".into(),
            ObjectImage::Inet(_) => "a TCP/UDP socket".into(),
            ObjectImage::Epoll(e) => format!("an epoll set of {} descriptors", e.items.len()),
            ObjectImage::EventFd { count, .. } => format!("an eventfd (count {count})"),
            ObjectImage::TimerFd(_) => "a timerfd".into(),
            ObjectImage::SignalFd { mask, .. } => format!("a signalfd (mask {mask:#x})"),
            ObjectImage::Inotify(i) => format!("an inotify instance ({} watches)", i.watches.len()),
            ObjectImage::PtyMaster { pty, .. } => format!("the master of pseudo-terminal {pty}"),
            ObjectImage::PtySlave { pty, .. } => format!("the slave of pseudo-terminal {pty}"),
            other => format!("{other:?}")
                .split(['(', '{', ' '])
                .next()
                .unwrap_or("")
                .to_string(),
        }
    }
}

/// Captures the descriptors of the stopped processes `procs`.
pub fn capture(procs: &[ProcRef], ctx: &mut dyn CaptureCtx) -> Result<FdTable> {
    let descs = scan::scan(procs)?;
    capture_descs(procs, &descs, ctx)
}

/// [`capture`], and what a later stop needs to take the same table again without listing the
/// descriptors ([`Cached::refresh`]) — `None` when the table holds a description whose state
/// changes by calls the capture does not trap (see [`Cached`]).
pub fn capture_cached(
    procs: &[ProcRef],
    ctx: &mut dyn CaptureCtx,
) -> Result<(FdTable, Option<Cached>)> {
    let descs = scan::scan(procs)?;
    let table = capture_descs(procs, &descs, ctx)?;
    let cached = cache::Cached::of(&table, descs);
    Ok((table, cached))
}

fn capture_descs(
    procs: &[ProcRef],
    descs: &[scan::Desc],
    ctx: &mut dyn CaptureCtx,
) -> Result<FdTable> {
    let mut c = Capture {
        procs,
        descs,
        ctx,
        table: FdTable::default(),
        unix_diag: None,
        inet_diag: None,
    };
    for i in 0..descs.len() {
        let o = c.object(i)?;
        c.table.objects.push(o);
    }
    c.table.locks = locks::capture(&c)?;
    c.table.controlling = pty::controlling(&c)?;
    for p in procs {
        c.table.procs.entry(p.image_pid).or_default();
    }
    for (i, d) in descs.iter().enumerate() {
        for h in &d.holders {
            c.table
                .procs
                .entry(procs[h.proc].image_pid)
                .or_default()
                .push(FdImage {
                    fd: h.fd,
                    object: i,
                    cloexec: h.cloexec,
                });
        }
    }
    for v in c.table.procs.values_mut() {
        v.sort_by_key(|f| f.fd);
    }
    Ok(c.table)
}

/// The state of one capture: the descriptions found and what was made of them so far.
pub(crate) struct Capture<'a> {
    pub procs: &'a [ProcRef],
    pub descs: &'a [scan::Desc],
    pub ctx: &'a mut dyn CaptureCtx,
    pub table: FdTable,
    unix_diag: Option<diag::UnixTable>,
    inet_diag: Option<diag::InetTable>,
}

impl Capture<'_> {
    /// "descriptor 5 (socket:[123]) of process 4321 (pid 7 in the tree)".
    pub fn name(&self, d: &scan::Desc) -> String {
        let h = &d.holders[0];
        describe(&self.procs[h.proc], h.fd, &d.link)
    }

    pub fn unsupported(&self, d: &scan::Desc, why: &str) -> RunError {
        RunError::Unsupported {
            what: format!("{}: {why}", self.name(d)),
        }
    }

    /// A description that leads outside the tree: the restoring command's own standard
    /// stream where the tree held it as one, else refused.
    pub fn external(&self, d: &scan::Desc, why: &str) -> Result<ObjectImage> {
        match d.stdio() {
            Some(stdio) => Ok(ObjectImage::Inherited { stdio }),
            None => Err(self.unsupported(d, why)),
        }
    }

    /// Indexes of the descriptions of inode `ino` (on device `dev`, when given).
    pub fn find(&self, dev: Option<u64>, ino: u64) -> impl Iterator<Item = usize> + '_ {
        self.descs
            .iter()
            .enumerate()
            .filter(move |(_, d)| d.ino == ino && dev.is_none_or(|v| v == d.dev))
            .map(|(i, _)| i)
    }

    pub fn unix_diag(&mut self) -> Result<&diag::UnixTable> {
        if self.unix_diag.is_none() {
            self.unix_diag = Some(diag::unix_sockets()?);
        }
        Ok(self.unix_diag.as_ref().expect("just set"))
    }

    pub fn inet_diag(&mut self) -> Result<&diag::InetTable> {
        if self.inet_diag.is_none() {
            self.inet_diag = Some(diag::inet_listeners()?);
        }
        Ok(self.inet_diag.as_ref().expect("just set"))
    }

    fn object(&mut self, i: usize) -> Result<ObjectImage> {
        let descs = self.descs;
        let d = &descs[i];
        if let Some(kind) = d.link.strip_prefix("anon_inode:") {
            let kind = kind.trim_start_matches('[').trim_end_matches(']');
            return match kind {
                "eventpoll" => epoll::capture(self, i),
                "eventfd" => eventfd::capture(self, d),
                "timerfd" => timerfd::capture(self, d),
                "signalfd" => signalfd::capture(self, d),
                "inotify" => inotify::capture(self, d),
                "pidfd" => pidfd::capture(self, d),
                "fanotify" => Err(self.unsupported(
                    d,
                    "fanotify marks and permission events cannot be checkpointed",
                )),
                "userfaultfd" => Err(self.unsupported(
                    d,
                    "the program's own userfaultfd (its registrations and pending faults) cannot be checkpointed",
                )),
                other => Err(self.unsupported(
                    d,
                    &format!("a kernel object of kind '{other}' cannot be checkpointed"),
                )),
            };
        }
        match d.file_type() {
            libc::S_IFREG | libc::S_IFDIR => file::capture(self, d),
            libc::S_IFCHR => {
                if let Some(o) = pty::capture(self, i)? {
                    return Ok(o);
                }
                file::capture_device(self, d)
            }
            libc::S_IFIFO => pipe::capture(self, i),
            libc::S_IFSOCK => {
                let domain = sys::get_int(d.dup.as_fd(), libc::SOL_SOCKET, libc::SO_DOMAIN)
                    .map_err(|e| RunError::io(format!("SO_DOMAIN of {}", self.name(d)), e))?;
                match domain {
                    libc::AF_UNIX => unix::capture(self, i),
                    libc::AF_INET | libc::AF_INET6 => inet::capture(self, d),
                    _ => self.external(
                        d,
                        &format!("a socket of address family {domain} cannot be checkpointed"),
                    ),
                }
            }
            libc::S_IFBLK => Err(self.unsupported(d, "block devices cannot be checkpointed")),
            _ => Err(self.unsupported(d, "this kind of file cannot be checkpointed")),
        }
    }
}

/// "descriptor 5 (socket:[123]) of process 4321 (pid 7 in the tree)".
pub(crate) fn describe(p: &ProcRef, fd: i32, link: &str) -> String {
    if p.pid == p.image_pid {
        format!("descriptor {fd} ({link}) of process {}", p.pid)
    } else {
        format!(
            "descriptor {fd} ({link}) of process {} (pid {} in the tree)",
            p.pid, p.image_pid
        )
    }
}

/// Recreates the descriptors of `table` in the freshly built processes `procs` (one per image
/// pid of the table): every object once, installed into each holder at its number, then the
/// epoll registrations and file locks. Call it after the processes exist (and their threads,
/// for POSIX locks' owners) and before they run.
pub fn restore(table: &FdTable, procs: &[RestoreRef<'_>], ctx: &mut dyn RestoreCtx) -> Result<()> {
    table.validate()?;
    for pid in table.procs.keys() {
        if !procs.iter().any(|p| p.image_pid == *pid) {
            return Err(RunError::CannotRecreate {
                what: format!("the descriptors of process {pid}: no such process was rebuilt"),
            });
        }
    }
    let mut r = Restore {
        table,
        procs,
        ctx,
        made: (0..table.objects.len()).map(|_| None).collect(),
        pipes: (0..table.pipes.len()).map(|_| None).collect(),
        ptys: (0..table.ptys.len()).map(|_| None).collect(),
        unix_peers: BTreeMap::new(),
        reset: None,
    };
    // (1) Objects others connect to (listening and bound sockets) first, then the rest.
    let (first, rest): (Vec<usize>, Vec<usize>) =
        (0..table.objects.len()).partition(|&i| unix::is_endpoint(&table.objects[i]));
    for i in first.into_iter().chain(rest) {
        if r.made[i].is_none() {
            let fd = r.make(i)?;
            r.made[i] = Some(fd);
        }
    }
    // (2) Every descriptor at its number.
    for p in procs {
        for f in table.procs.get(&p.image_pid).into_iter().flatten() {
            let fd = r.made[f.object]
                .as_ref()
                .ok_or_else(|| bad("object never made"))?;
            p.remote.install_fd(fd.as_fd(), f.fd, f.cloexec)?;
        }
    }
    // (3) Registrations that are keyed by descriptor numbers, and locks owned by processes.
    for (i, o) in table.objects.iter().enumerate() {
        if let ObjectImage::Epoll(e) = o {
            epoll::register(&r, i, e)?;
        }
    }
    locks::restore(&r)?;
    pty::finish(&mut r)?;
    Ok(())
}

/// Closes every descriptor of the rebuilt process `r` (image pid `image_pid`) that `table` does
/// not give it, but `keep` (kioku's own: its descriptor channel): what a placeholder process
/// inherited must not leak into the restored program. Call it before [`restore`].
pub fn close_unlisted(table: &FdTable, image_pid: i32, r: &dyn Remote, keep: &[i32]) -> Result<()> {
    let listed: Vec<i32> = table
        .procs
        .get(&image_pid)
        .into_iter()
        .flatten()
        .map(|f| f.fd)
        .collect();
    for fd in scan::list_fds(r.pid())? {
        if !listed.contains(&fd) && !keep.contains(&fd) {
            r.syscall("close", libc::SYS_close, &[fd as u64])?;
        }
    }
    Ok(())
}

/// The state of one restore.
pub(crate) struct Restore<'a> {
    pub table: &'a FdTable,
    pub procs: &'a [RestoreRef<'a>],
    pub ctx: &'a mut dyn RestoreCtx,
    /// The monitor's descriptor of each object once made.
    pub made: Vec<Option<OwnedFd>>,
    /// Per pipe: the monitor's read and write ends (and, for a FIFO, an anchor open O_RDWR).
    pub pipes: Vec<Option<pipe::Made>>,
    /// Per pseudo-terminal: its master and the path of its slave.
    pub ptys: Vec<Option<pty::Made>>,
    /// The other end of a socket pair made for an object not yet reached.
    pub unix_peers: BTreeMap<usize, OwnedFd>,
    /// A local listener that connections to be reset are made to.
    pub reset: Option<inet::ResetListener>,
}

impl<'a> Restore<'a> {
    fn make(&mut self, i: usize) -> Result<OwnedFd> {
        let o = &self.table.objects[i];
        let fd = match o {
            ObjectImage::Inherited { stdio } => self.ctx.inherited(*stdio)?,
            ObjectImage::File(f) => file::restore(f)?,
            ObjectImage::Device { path, flags } => file::restore_device(path, *flags)?,
            ObjectImage::SharedMemory {
                id,
                flags,
                pos,
                seals,
            } => file::restore_shared(self, *id, *flags, *pos, *seals)?,
            ObjectImage::Pipe { pipe, flags } => pipe::restore(self, *pipe, *flags)?,
            ObjectImage::Unix(u) => unix::restore(self, i, u)?,
            ObjectImage::Inet(s) => inet::restore(self, s)?,
            ObjectImage::Epoll(e) => epoll::create(e)?,
            ObjectImage::EventFd {
                count,
                semaphore,
                flags,
            } => eventfd::restore(*count, *semaphore, *flags)?,
            ObjectImage::TimerFd(t) => timerfd::restore(t)?,
            ObjectImage::SignalFd { mask, flags } => signalfd::restore(*mask, *flags)?,
            ObjectImage::Inotify(n) => inotify::restore(n)?,
            ObjectImage::PtyMaster { pty, flags } => pty::restore_master(self, *pty, *flags)?,
            ObjectImage::PtySlave { pty, flags } => pty::restore_slave(self, *pty, *flags)?,
            ObjectImage::PidFd { image_pid, flags } => pidfd::restore(self, *image_pid, *flags)?,
        };
        Ok(fd)
    }

    /// The process with image pid `pid`.
    pub fn proc(&self, pid: i32) -> Result<&'a RestoreRef<'a>> {
        self.procs
            .iter()
            .find(|p| p.image_pid == pid)
            .ok_or_else(|| bad(&format!("process {pid} was not rebuilt")))
    }

    /// Processes holding object `i`, with their descriptor number for it.
    pub fn holders(&self, i: usize) -> impl Iterator<Item = (&'a RestoreRef<'a>, i32)> + '_ {
        self.procs.iter().flat_map(move |p| {
            self.table
                .procs
                .get(&p.image_pid)
                .into_iter()
                .flatten()
                .filter(move |f| f.object == i)
                .map(move |f| (p, f.fd))
        })
    }

    /// The object process `pid` holds at `fd`, if any.
    pub fn object_at(&self, pid: i32, fd: i32) -> Option<usize> {
        self.table
            .procs
            .get(&pid)?
            .iter()
            .find(|f| f.fd == fd)
            .map(|f| f.object)
    }

    /// The monitor's descriptor of object `i` (made already).
    pub fn made(&self, i: usize) -> Result<BorrowedFd<'_>> {
        self.made[i]
            .as_ref()
            .map(|f| f.as_fd())
            .ok_or_else(|| bad(&format!("object {i} is used before it is made")))
    }
}

/// Puts `fd` at number `at` in process `r` for the duration of `f` (moving whatever is there
/// aside and back): for calls the kernel keys by descriptor number, made for a number the
/// process no longer uses for that file.
pub(crate) fn with_fd_at(
    r: &dyn Remote,
    fd: BorrowedFd<'_>,
    at: i32,
    used: &[i32],
    f: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let above = used.iter().copied().max().unwrap_or(2).max(at) + 1;
    let saved = if used.contains(&at) {
        Some(r.syscall(
            "fcntl(F_DUPFD_CLOEXEC)",
            libc::SYS_fcntl,
            &[at as u64, libc::F_DUPFD_CLOEXEC as u64, above as u64],
        )? as i32)
    } else {
        None
    };
    let cloexec_was = match saved {
        Some(_) => {
            r.syscall(
                "fcntl(F_GETFD)",
                libc::SYS_fcntl,
                &[at as u64, libc::F_GETFD as u64],
            )? & libc::FD_CLOEXEC as u64
                != 0
        }
        None => false,
    };
    r.install_fd(fd, at, true)?;
    let res = f();
    match saved {
        Some(s) => {
            let flags = if cloexec_was { libc::O_CLOEXEC } else { 0 };
            r.syscall("dup3", libc::SYS_dup3, &[s as u64, at as u64, flags as u64])?;
            r.syscall("close", libc::SYS_close, &[s as u64])?;
        }
        None => {
            r.syscall("close", libc::SYS_close, &[at as u64])?;
        }
    }
    res
}

pub(crate) fn bad(detail: &str) -> RunError {
    RunError::NotAProcessCheckpoint {
        detail: format!("descriptor table: {detail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_tables_are_refused() {
        let mut t = FdTable::default();
        t.objects.push(ObjectImage::Pipe { pipe: 0, flags: 0 });
        t.procs.insert(
            1,
            vec![FdImage {
                fd: 3,
                object: 0,
                cloexec: false,
            }],
        );
        assert!(t.validate().is_err(), "a pipe end without its pipe");
        t.pipes.push(PipeImage {
            ino: 1,
            capacity: 4096,
            path: None,
            data: vec![],
        });
        assert!(t.validate().is_ok());
        t.procs.get_mut(&1).unwrap()[0].object = 5;
        let e = restore(&t, &[], &mut NoCtx).unwrap_err();
        assert!(matches!(e, RunError::NotAProcessCheckpoint { .. }), "{e}");
    }

    #[test]
    fn the_highest_number_counts_epoll_registrations() {
        let mut t = FdTable::default();
        t.objects.push(ObjectImage::Epoll(EpollImage {
            flags: 0,
            items: vec![EpollItem {
                object: 0,
                fd: 40,
                events: 1,
                data: 0,
            }],
        }));
        t.procs.insert(
            7,
            vec![FdImage {
                fd: 5,
                object: 0,
                cloexec: true,
            }],
        );
        assert_eq!(t.highest_number(7), Some(40));
        assert_eq!(t.highest_number(8), None);
    }
}

/// Serde for byte strings as hex (queued data in the JSON image).
pub(crate) mod hexbytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::image::hex(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        crate::image::unhex(&s).ok_or_else(|| serde::de::Error::custom("bytes are not hex"))
    }
}

/// Serde for lists of byte strings as hex.
pub(crate) mod hexlist {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        v.iter()
            .map(|b| crate::image::hex(b))
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|s| {
                crate::image::unhex(s).ok_or_else(|| serde::de::Error::custom("bytes are not hex"))
            })
            .collect()
    }
}
