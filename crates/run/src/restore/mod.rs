//! Rebuilding a process tree from its last checkpoint.
//!
//! 1. The image is read and checked *without changing the pool*: a restore that refuses (no
//!    checkpoint, finished, files changed, …) leaves the pool byte for byte as it was.
//! 2. The engine recovers the checkpoint (verifying every page) and maps the regions.
//! 3. A new pid namespace (when the tree had one) gets the processes and threads back with
//!    their ids: its init sets `ns_last_pid` before each is created.
//! 4. Processes are created parents first — a process whose parent is not in the tree is a
//!    child of the namespace's init (the executable itself, stopped at its entry); any other is
//!    forked from its parent's placeholder by an injected clone and, when it ran another
//!    program, made to exec it — so every process has its real parent, process group and
//!    session. Ended processes their parents had not reaped come back as zombies.
//! 5. Shared-memory objects are recreated in the monitor from their regions and passed to
//!    every process mapping them through a descriptor channel (a Unix socket the processes
//!    inherit while they are placeholders).
//! 6. Each process is rebuilt (`process`): memory and signal dispositions first; then the
//!    tree's descriptors all at once (`fds`); then threads (with their ids), registers and the
//!    process-wide kernel state.
//!
//! Before any of it, when the tree's file changes were journaled, the journal returns the files
//! to the checkpoint (and refuses, changing nothing, when it cannot).

pub mod lazy;
mod process;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use kioku_ckpt::Engine;
use kioku_pool::Pool;
use kioku_proc::{Namespace, Notice, Tracee, TraceeCommand, Tree};

use crate::capture::shared::{ObjectKey, SharedObjects};
use crate::capture::{AreaState, Capturer, ProcessCapture};
use crate::error::{Result, RunError};
use crate::fds::{ObjectImage, RestoreRef};
use crate::image::{ExitImage, FileId, ProcessImage, SharedKind, TreeImage};
use crate::journal::Journal;
use crate::remote::Remote;
use crate::shadow::{Marks, ShadowSpace};
use process::Rebuild;

/// A restored tree, stopped, and the checkpointing state to carry on with.
pub struct Restored {
    pub tree: Tree,
    pub capturer: Capturer,
    pub image: TreeImage,
    /// Epoch of the checkpoint restored.
    pub epoch: u64,
    /// Bytes written into the processes.
    pub bytes_written: u64,
    /// Bytes mapped to be filled on first touch and in the background (restore by mapping).
    pub bytes_lazy: u64,
}

/// Reads the image of the pool's last checkpoint and decides whether it can be restored —
/// files included: the journal must be able to return them to the checkpoint — changing
/// nothing in the pool.
pub fn read_image(pool: &mut Pool) -> Result<(TreeImage, u64, Option<Journal>)> {
    let kind = pool.header().kind.clone();
    if kind != kioku_ckpt::POOL_KIND {
        return Err(RunError::NotAProcessCheckpoint {
            detail: format!("pool kind is '{kind}'"),
        });
    }
    let state = kioku_ckpt::commit_state_of(pool)?;
    if state.epoch == 0 {
        return Err(RunError::NoCheckpoint);
    }
    let image = TreeImage::decode(&state.metadata)?;
    if let Some(how) = &image.finished {
        return Err(RunError::Finished { how: how.clone() });
    }
    let live = image
        .processes
        .iter()
        .filter(|p| p.zombie.is_none())
        .count();
    if !image.pid_namespace && image.processes.len() > 1 {
        return Err(RunError::Unsupported {
            what: format!(
                "the checkpoint holds {} processes but was taken without a pid namespace, so their ids cannot be given back",
                image.processes.len()
            ),
        });
    }
    if live == 0 {
        return Err(RunError::NotAProcessCheckpoint {
            detail: "the checkpoint holds no live process".into(),
        });
    }
    // The journal first: it may be about to put back the very files checked below.
    let journal = if image.journal {
        let mut j = Journal::open(pool)?;
        j.check(pool, state.epoch)?;
        Some(j)
    } else {
        None
    };
    check_files(&image, journal.is_some())?;
    Ok((image, state.epoch, journal))
}

/// Every file the image maps or has open must be the one it had (files the tree wrote are the
/// journal's, when it has one).
fn check_files(image: &TreeImage, journaled: bool) -> Result<()> {
    for p in image.processes.iter().filter(|p| p.zombie.is_none()) {
        for f in std::iter::once(&p.program).chain(&p.files) {
            let now = match FileId::of(&f.path) {
                Ok(n) => n,
                Err(_) => {
                    return Err(RunError::FileChanged {
                        path: f.path.clone(),
                        what: "it no longer exists".into(),
                    })
                }
            };
            if let Some(what) = f.differs(&now) {
                return Err(RunError::FileChanged {
                    path: f.path.clone(),
                    what,
                });
            }
        }
    }
    if !journaled {
        for o in &image.fds.objects {
            if let ObjectImage::File(f) = o {
                let Ok(md) = std::fs::metadata(&f.path) else {
                    return Err(RunError::FileChanged {
                        path: f.path.clone(),
                        what: "a descriptor refers to it and it no longer exists".into(),
                    });
                };
                if md.is_file() && md.len() < f.size {
                    return Err(RunError::FileChanged {
                        path: f.path.clone(),
                        what: format!(
                            "{} bytes at the checkpoint, {} now (cut by someone else)",
                            f.size,
                            md.len()
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Restores the last checkpoint of `pool` into a new process tree, left stopped.
pub fn restore(mut pool: Pool) -> Result<Restored> {
    let t0 = std::time::Instant::now();
    let (image, epoch, mut journal) = read_image(&mut pool)?;
    // From here on the pool changes (the recovery syncs its contexts), to the same checkpoint.
    // Restoring by mapping, the recovery reads no page: each is checked as it is filled, and
    // the contexts are synced before the next checkpoint.
    let marks = Marks::default();
    let opts = kioku_ckpt::EngineOptions {
        lazy_recovery: lazy::enabled(),
        ..Default::default()
    };
    let (mut engine, rec) = Engine::recover_in_opts(pool, ShadowSpace::new(marks.clone()), &opts)?;
    engine.set_adaptive(false)?;
    if crate::capture::sparse_on(engine.pool().medium().kind()) {
        engine.set_sparse(true)?;
    }
    if rec.epoch != epoch {
        return Err(RunError::NotAProcessCheckpoint {
            detail: format!(
                "the pool's checkpoint changed while it was read (epoch {epoch}, then {})",
                rec.epoch
            ),
        });
    }
    tracing::debug!(
        ms = t0.elapsed().as_secs_f64() * 1e3,
        "pool recovered (verified, contexts synced)"
    );
    // The files back to the checkpoint; records from now on undo back to it.
    if let Some(j) = journal.as_mut() {
        let st = j.apply(&mut engine, epoch)?;
        tracing::debug!(?st, "files returned to the checkpoint");
        j.reset(&mut engine, epoch)?;
    }
    cut_back_standard_streams(&image)?;
    match build(&image, engine, marks, journal) {
        Ok((tree, capturer, (written, lazy))) => Ok(Restored {
            tree,
            capturer,
            image,
            epoch,
            bytes_written: written,
            bytes_lazy: lazy,
        }),
        Err((e, true)) => {
            tracing::debug!("restore interrupted: {e}");
            Err(RunError::DiedDuringRestore {
                how: "killed by signal 9".into(),
            })
        }
        Err((e, false)) => Err(e),
    }
}

/// Regular files the tree writes through its standard streams (whose appends the journal does
/// not watch): what was written after the checkpoint is written again when the tree runs on,
/// so cut them back to their size at the checkpoint.
fn cut_back_standard_streams(image: &TreeImage) -> Result<()> {
    let mut done = std::collections::HashSet::new();
    for fds in image.fds.procs.values() {
        for f in fds.iter().filter(|f| f.fd <= 2) {
            let Some(ObjectImage::File(file)) = image.fds.objects.get(f.object) else {
                continue;
            };
            let writing = file.flags & libc::O_ACCMODE != libc::O_RDONLY;
            if !writing || file.directory || !done.insert(f.object) {
                continue;
            }
            let md = std::fs::metadata(&file.path)
                .map_err(|e| RunError::io(format!("stat {}", file.path.display()), e))?;
            if md.is_file() && md.len() > file.size {
                tracing::info!(path = %file.path.display(), from = md.len(), to = file.size, "cutting a file the program writes back to its size at the checkpoint");
                let cut = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&file.path)
                    .and_then(|h| h.set_len(file.size));
                // Not ours to open (a shell's redirection): through our own stream, if it is.
                let cut = match cut {
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        match crate::fds::own_stdio_of(&md) {
                            Some(fd) => std::fs::File::from(fd).set_len(file.size),
                            None => Err(e),
                        }
                    }
                    r => r,
                };
                cut.map_err(|e| RunError::io(format!("truncating {}", file.path.display()), e))?;
            }
        }
    }
    Ok(())
}

/// A rebuilt tree, its capturer, and the bytes written in and left to the lazy fill.
type Built = (Tree, Capturer, (u64, u64));

/// Everything after the engine recovered. On failure: the error, and whether a process of the
/// tree died meanwhile (killed while being rebuilt).
fn build(
    image: &TreeImage,
    engine: Engine<ShadowSpace>,
    marks: Marks,
    journal: Option<Journal>,
) -> std::result::Result<Built, (RunError, bool)> {
    // The channel first: its remote end, inheritable, reaches the namespace's init and from
    // there every placeholder.
    let (chan_mon, chan_remote) = socketpair().map_err(|e| (e, false))?;
    let chan_ino = socket_inode(&chan_remote).map_err(|e| (e, false))?;
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(chan_remote.as_raw_fd(), libc::F_SETFD, 0) };
    let ns = if image.pid_namespace {
        match Namespace::create() {
            Ok(n) => Some(n),
            Err(e @ kioku_proc::ProcError::DiedBeforeExec { .. }) => return Err((e.into(), true)),
            Err(e) => return Err((e.into(), false)),
        }
    } else {
        None
    };
    let mut made: BTreeMap<i32, Tracee> = BTreeMap::new();
    let filter = journal.as_ref().map(|_| Journal::filter());
    let result = (|| -> Result<Built> {
        let escalated = create_processes(image, ns.as_ref(), filter, &mut made)?;
        drop(chan_remote);
        let shared = shared_objects(image, &engine)?;
        let live: Vec<&ProcessImage> = image
            .processes
            .iter()
            .filter(|p| p.zombie.is_none())
            .collect();
        // (1) Memory and what comes before descriptors, process by process. Restoring by
        // mapping, the fill runs from the first registration on.
        let lazy_fill = if engine.recovery_pending() {
            let mut kill: Vec<i32> = made.values().map(|t| t.pid()).collect();
            kill.extend(ns.as_ref().map(|n| n.init_pid()));
            Some(lazy::LazyFill::start(kill)?)
        } else {
            None
        };
        let mut rebuilds = Vec::with_capacity(live.len());
        let (mut written, mut lazy_bytes) = (0, 0);
        for p in &live {
            let t = &made[&p.pid];
            let mut r = Rebuild {
                t,
                tid: t.control_thread()?,
                image: p,
                shared_fds: &shared.fds,
                channel: Some((channel_fd(t, chan_ino)?, &chan_mon)),
                ns: ns.as_ref(),
                fds: &image.fds,
                tids: vec![],
                lazy: lazy_fill.as_ref(),
                lazy_ranges: None,
                lazy_registered: Vec::new(),
            };
            let (w, l) = process::rebuild_memory(&mut r, &engine)?;
            written += w;
            lazy_bytes += l;
            rebuilds.push(r);
        }
        // (2) The tree's descriptors, all at once (shared descriptions, pipes between
        // processes, epoll sets naming descriptors of their own process).
        {
            let remotes: Vec<_> = rebuilds.iter().map(|r| r.remote()).collect();
            let refs: Vec<RestoreRef<'_>> = rebuilds
                .iter()
                .zip(&remotes)
                .map(|(r, remote)| RestoreRef {
                    image_pid: r.image.pid,
                    remote: remote as &dyn Remote,
                })
                .collect();
            let mut ctx = SharedCtx { fds: &shared.fds };
            crate::fds::restore(&image.fds, &refs, &mut ctx)?;
        }
        // (3) Threads, their state and registers; process-wide kernel state.
        let mut procs = BTreeMap::new();
        for mut r in rebuilds {
            process::rebuild_threads(&mut r)?;
            let (t, p) = (r.t, r.image);
            let areas = p
                .areas
                .iter()
                .map(|a| AreaState {
                    start: a.start,
                    end: a.end,
                    region: a.region.clone(),
                })
                .collect();
            let pc = match r.lazy_ranges.take() {
                Some((fd, _)) => {
                    // The same descriptor tracks its writes (one userfaultfd per range).
                    let tracking = fd
                        .try_clone()
                        .map_err(|e| RunError::io("duplicating a userfaultfd", e))?;
                    let mut pc = ProcessCapture::with_uffd(t, p.pid, areas, tracking)?;
                    pc.track_restored(p)?;
                    // (Tracking registered the ranges for write-protect only.)
                    for range in std::mem::take(&mut r.lazy_registered) {
                        lazy::register_missing(fd.as_raw_fd(), range).map_err(|e| {
                            RunError::io("registering memory for the lazy restore", e)
                        })?;
                    }
                    pc
                }
                None => {
                    let mut pc = ProcessCapture::new(t, p.pid, areas)?;
                    pc.track_restored(p)?;
                    pc
                }
            };
            procs.insert(t.pid(), pc);
        }
        let objects = SharedObjects::restored(&image.shared, &shared.keys, &shared.sizes);
        let root = image
            .root_process()
            .map(|p| made[&p.pid].clone())
            .or_else(|| live.first().map(|p| made[&p.pid].clone()))
            .expect("a live process (checked)");
        let mut tree = Tree::new(root, None);
        if image.root_process().is_none() {
            tree.set_root(-1, image.root_exit.map(ExitImage::exit));
        }
        for t in made.values() {
            tree.add(t.clone());
        }
        let capturer = Capturer::restored(
            engine, marks, procs, objects, journal, escalated, image, lazy_fill,
        );
        Ok((tree, capturer, (written, lazy_bytes)))
    })();
    match result {
        Ok((mut tree, capturer, written)) => {
            if let Some(ns) = ns {
                tree.set_namespace(ns);
            }
            Ok((tree, capturer, written))
        }
        Err(e) => {
            let pids: Vec<i32> = made.values().map(|t| t.pid()).collect();
            let died = ns.as_ref().is_some_and(|n| !n.alive()) || crate::monitor::any_gone(&pids);
            for t in made.values() {
                let _ = t.kill();
            }
            Err((e, died))
        }
    }
}

/// The restore's answers to the descriptor restore: shared-memory objects as recreated.
struct SharedCtx<'a> {
    fds: &'a HashMap<u32, OwnedFd>,
}

impl crate::fds::RestoreCtx for SharedCtx<'_> {
    fn open_shared_object(&mut self, id: u32) -> Result<OwnedFd> {
        let fd = self.fds.get(&id).ok_or_else(|| RunError::CannotRecreate {
            what: format!("shared-memory object {id} (the checkpoint does not hold it)"),
        })?;
        fd.try_clone()
            .map_err(|e| RunError::io("duplicating a shared-memory object", e))
    }
}

/// Creates every process of the image, stopped (parents first, with their ids, under the
/// journal's `filter` when files are journaled); returns the processes (monitor's pids) whose
/// filters include the escalation.
fn create_processes(
    image: &TreeImage,
    ns: Option<&Namespace>,
    filter: Option<Vec<libc::sock_filter>>,
    made: &mut BTreeMap<i32, Tracee>,
) -> Result<std::collections::HashSet<i32>> {
    let mut escalated = std::collections::HashSet::new();
    for p in &image.processes {
        let parent = image
            .process(p.ppid)
            .filter(|pp| pp.zombie.is_none() && made.contains_key(&pp.pid));
        let t = match parent {
            None => spawn_placeholder(p, ns, filter.clone())?,
            Some(pp) => fork_placeholder(&made[&pp.pid], pp, p, ns)?,
        };
        if ns.is_some() {
            let got = kioku_proc::ns::ns_pid_of(t.pid());
            if got != Some(p.pid) {
                return Err(RunError::Unsupported {
                    what: format!("process {} came back as {got:?}", p.pid),
                });
            }
        }
        start_session(&t, p, image)?;
        // Filters are inherited: an escalated parent's children are escalated already.
        let inherited = parent.is_some_and(|pp| pp.escalated);
        if p.escalated && p.zombie.is_none() {
            if !inherited {
                let tid = t.control_thread()?;
                crate::capture::install_filter(
                    &crate::remote::TracedRemote {
                        tracee: &t,
                        tid,
                        channel: None,
                    },
                    &Journal::escalation_filter(),
                )?;
            }
            escalated.insert(t.pid());
        }
        made.insert(p.pid, t);
    }
    join_groups(image, ns, made)?;
    // Zombies end once in their groups (a zombie may hold its group for live members).
    for p in &image.processes {
        if let Some(z) = p.zombie {
            end_as(&made[&p.pid], z)?;
        }
    }
    Ok(escalated)
}

/// A process whose parent is not in the tree: the executable, started (as a child of the
/// namespace's init, with its id) and stopped at its entry.
fn spawn_placeholder(
    p: &ProcessImage,
    ns: Option<&Namespace>,
    filter: Option<Vec<libc::sock_filter>>,
) -> Result<Tracee> {
    let mut cmd = TraceeCommand::new(&p.program.path)
        .args(p.argv.iter().skip(1).cloned())
        .inherit_fds(true)
        .trace_children(true);
    if let Some(f) = filter {
        cmd = cmd.seccomp(f, needs_no_new_privs());
    }
    let t = match ns {
        Some(ns) => Tracee::spawn_in(ns, cmd, Some(p.pid)),
        None => Tracee::spawn(cmd),
    };
    match t {
        Ok(t) => Ok(t),
        Err(
            kioku_proc::ProcError::DiedBeforeExec { exit, .. }
            | kioku_proc::ProcError::Exited { exit, .. },
        ) => Err(RunError::DiedDuringRestore {
            how: exit.to_string(),
        }),
        Err(e) => Err(e.into()),
    }
}

/// A child forked from its parent's placeholder by an injected clone (with its id), made to
/// exec its own program when that differs from its parent's.
fn fork_placeholder(
    parent: &Tracee,
    pp: &ProcessImage,
    p: &ProcessImage,
    ns: Option<&Namespace>,
) -> Result<Tracee> {
    if let Some(ns) = ns {
        ns.next_pid(p.pid)?;
    }
    let tid = parent.control_thread()?;
    let exit_signal = if p.exit_signal > 0 { p.exit_signal } else { 0 };
    parent.syscall(tid, libc::SYS_clone, &[exit_signal as u64, 0, 0, 0, 0])?;
    let child = parent
        .take_notices()
        .into_iter()
        .find_map(|n| match n {
            Notice::Child { pid, .. } => Some(pid),
            _ => None,
        })
        .ok_or_else(|| RunError::Unsupported {
            what: format!("process {} created for the restore did not appear", p.pid),
        })?;
    let t = Tracee::adopt(child);
    t.stop_all()?;
    if p.zombie.is_none() && p.program.path != pp.program.path {
        let tid = t.control_thread()?;
        t.exec(tid, &p.program.path, &p.argv, &[])?;
    }
    Ok(t)
}

/// Makes a new process the leader of its own session when it was one (before it forks: its
/// children inherit the session).
fn start_session(t: &Tracee, p: &ProcessImage, image: &TreeImage) -> Result<()> {
    if !image.pid_namespace {
        return Ok(());
    }
    let parent_sid = image.process(p.ppid).map(|x| x.sid).unwrap_or(0);
    if p.sid == p.pid && parent_sid != p.pid {
        let tid = t.control_thread()?;
        t.syscall(tid, libc::SYS_setsid, &[])?;
    }
    Ok(())
}

/// Puts every process into its process group, once all exist: leaders first (each makes its
/// group), then the members. A group's leader may come after a member in the parents-first
/// order (a parent that joined its child's group), or be gone: a group outlives its leader
/// while members remain (a pipeline whose first command ended). Such a group is made by a
/// short-lived holder with the leader's id ([`make_group`]). (Joining each process as it was
/// created refused those with `EPERM`: issue 18, "setpgid injected … failed: Operation not
/// permitted".)
fn join_groups(
    image: &TreeImage,
    ns: Option<&Namespace>,
    made: &BTreeMap<i32, Tracee>,
) -> Result<()> {
    let Some(ns) = ns.filter(|_| image.pid_namespace) else {
        return Ok(());
    };
    // A session leader is its group's leader already (setsid), and may not move; a group id
    // of 0 is a group outside the namespace, inherited from the init.
    let joining = |p: &&ProcessImage| p.pgid != 0 && p.sid != p.pid;
    let leaders = image
        .processes
        .iter()
        .filter(joining)
        .filter(|p| p.pgid == p.pid);
    let members = image
        .processes
        .iter()
        .filter(joining)
        .filter(|p| p.pgid != p.pid);
    let mut groups: std::collections::HashSet<i32> = std::collections::HashSet::new();
    for p in leaders.chain(members) {
        let t = &made[&p.pid];
        let tid = t.control_thread()?;
        if p.pgid != p.pid && image.process(p.pgid).is_none() && !groups.contains(&p.pgid) {
            make_group(t, p.pgid, ns)?;
        } else {
            let to = if p.pgid == p.pid { 0 } else { p.pgid };
            t.syscall(tid, libc::SYS_setpgid, &[0, to as u64])
                .map_err(|e| match e.errno() {
                    Some(libc::EPERM) => RunError::CannotRecreate {
                        what: format!(
                            "process group {} of process {} (setpgid: {e}; the group's leader is in another session)",
                            p.pgid, p.pid
                        ),
                    },
                    _ => e.into(),
                })?;
        }
        groups.insert(p.pgid);
    }
    Ok(())
}

/// Makes group `pgid`, whose leader is gone, for process `t` (one of its members): a holder
/// forked from `t` (so in its session) with the leader's id makes the group, `t` joins it, and
/// the holder ends, reaped by `t` at once (forked without an exit signal: `t` gets no
/// SIGCHLD). The group lives on in its members, as it did when its leader ended.
fn make_group(t: &Tracee, pgid: i32, ns: &Namespace) -> Result<()> {
    const WALL: u64 = 0x4000_0000;
    ns.next_pid(pgid)?;
    let tid = t.control_thread()?;
    t.syscall(tid, libc::SYS_clone, &[0, 0, 0, 0, 0])?;
    let holder = t
        .take_notices()
        .into_iter()
        .find_map(|n| match n {
            Notice::Child { pid, .. } => Some(pid),
            _ => None,
        })
        .ok_or_else(|| RunError::Unsupported {
            what: format!("the holder of process group {pgid} did not appear"),
        })?;
    let h = Tracee::adopt(holder);
    h.stop_all()?;
    if kioku_proc::ns::ns_pid_of(holder) != Some(pgid) {
        let _ = h.kill();
        return Err(RunError::CannotRecreate {
            what: format!("process group {pgid} (its id is taken)"),
        });
    }
    let htid = h.control_thread()?;
    h.syscall(htid, libc::SYS_setpgid, &[0, 0])?;
    t.syscall(tid, libc::SYS_setpgid, &[0, pgid as u64])?;
    match h.syscall(htid, libc::SYS_exit_group, &[0]) {
        Ok(_) | Err(kioku_proc::ProcError::Exited { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    // Collected by the injection (as the holder's tracer): reaped now by its parent.
    t.syscall(tid, libc::SYS_wait4, &[pgid as u64, 0, WALL, 0])?;
    tracing::debug!(
        pgid,
        "a process group whose leader had ended was made again"
    );
    Ok(())
}

/// Makes a new process end as a zombie with status `z` (its parent reaps it later).
fn end_as(t: &Tracee, z: ExitImage) -> Result<()> {
    match z {
        ExitImage::Code(c) => {
            let tid = t.control_thread()?;
            // Its exit is collected by the injection (as its tracer): the parent sees it.
            match t.syscall(tid, libc::SYS_exit_group, &[c as u64]) {
                Ok(_) | Err(kioku_proc::ProcError::Exited { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        ExitImage::Signal(sig) => {
            // SAFETY: signalling a process we created.
            unsafe { libc::kill(t.pid(), sig) };
            t.wait_exit()?;
        }
    }
    Ok(())
}

/// The shared-memory objects, recreated in the monitor with their contents.
struct SharedFds {
    fds: HashMap<u32, OwnedFd>,
    keys: Vec<ObjectKey>,
    sizes: Vec<u64>,
}

fn shared_objects(image: &TreeImage, engine: &Engine<ShadowSpace>) -> Result<SharedFds> {
    let mut out = SharedFds {
        fds: HashMap::new(),
        keys: vec![],
        sizes: vec![],
    };
    for s in &image.shared {
        let file = match &s.kind {
            SharedKind::Anonymous => memfd("kioku-shared")?,
            SharedKind::Memfd { name } => memfd(name)?,
            SharedKind::File {
                path,
                deleted,
                inode,
            } => {
                // (Gone, or replaced by someone else: the program keeps its own copy.)
                let same = std::fs::metadata(path).is_ok_and(|m| *inode == 0 || m.ino() == *inode);
                if !deleted && same {
                    std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .map_err(|e| RunError::io(format!("opening {}", path.display()), e))?
                } else {
                    if !deleted {
                        tracing::warn!(path = %path.display(), "a file the program maps shared was removed or replaced by someone else since the checkpoint; the program gets its own copy of what it mapped");
                    }
                    unnamed_file_near(path)?
                }
            }
        };
        if file.metadata().map(|m| m.len()).unwrap_or(0) < s.size {
            file.set_len(s.size)
                .map_err(|e| RunError::io("sizing a shared-memory object", e))?;
        }
        // The checkpoint's bytes: the valid context's (a sparse engine's running context is
        // empty after a recovery), each checked after a lazy recovery; holes are not read.
        // Runs of the valid context's pages are written at once.
        let len = (s.hi - s.lo) as usize;
        let pages = process::CheckpointPages::of(engine, &s.region, len)?;
        let ps = kioku_track::page_size();
        let zero = vec![0u8; ps];
        let write = |at: usize, b: &[u8]| {
            file.write_all_at(b, s.lo + at as u64)
                .map_err(|e| RunError::io("writing a shared-memory object", e))
        };
        // Start of the pending run of valid pages.
        let mut run: Option<usize> = None;
        for at in (0..len).step_by(ps) {
            let n = ps.min(len - at);
            let page = pages.page(at / ps)?;
            let in_valid =
                page.is_some_and(|b| std::ptr::eq(b.as_ptr(), pages.valid()[at..].as_ptr()));
            if in_valid {
                run.get_or_insert(at);
                continue;
            }
            if let Some(r) = run.take() {
                write(r, &pages.valid()[r..at])?;
            }
            write(at, &page.unwrap_or(&zero[..])[..n])?;
        }
        if let Some(r) = run {
            write(r, &pages.valid()[r..len])?;
        }
        if let Some(exact) = s.length {
            // Held through a descriptor only: its region covers whole pages of it.
            file.set_len(exact)
                .map_err(|e| RunError::io("sizing a shared-memory object", e))?;
        }
        let md = file
            .metadata()
            .map_err(|e| RunError::io("stat of a shared-memory object", e))?;
        let dev = md.dev();
        let key = (libc::major(dev), libc::minor(dev), md.ino());
        out.keys.push(key);
        out.sizes.push(md.len());
        out.fds.insert(s.id, OwnedFd::from(file));
    }
    Ok(out)
}

fn memfd(name: &str) -> Result<std::fs::File> {
    let c = std::ffi::CString::new(name.replace('\0', "")).unwrap_or_default();
    // SAFETY: memfd_create with a valid C string; we own the descriptor it returns.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(RunError::io(
            "memfd_create",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: a new descriptor that we own.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// A new file without a name in the directory of `path` (or in memory when that is gone): what
/// a mapping of a deleted file comes back as.
fn unnamed_file_near(path: &Path) -> Result<std::fs::File> {
    let dir = path.parent().unwrap_or(Path::new("/tmp"));
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(dir)
    {
        Ok(f) => Ok(f),
        Err(_) => memfd(
            &path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    }
}

fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(RunError::io(
            "socketpair (descriptor channel)",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: fresh descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The inode of a socket of ours (names it in other processes' /proc/PID/fd).
fn socket_inode(fd: &OwnedFd) -> Result<u64> {
    let md = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| RunError::io("stat of the descriptor channel", e))?;
    Ok(md.ino())
}

/// The number of the descriptor channel (the socket with inode `ino`) in placeholder `t`,
/// which inherited it.
fn channel_fd(t: &Tracee, ino: u64) -> Result<i32> {
    let want = format!("socket:[{ino}]");
    let dir = std::fs::read_dir(format!("/proc/{}/fd", t.pid()))
        .map_err(|e| RunError::io("listing /proc/PID/fd", e))?;
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want) {
            return Ok(fd);
        }
    }
    Err(RunError::Unsupported {
        what: "the restored process lacks the descriptor channel".into(),
    })
}

/// Whether processes under the journal's seccomp filter need PR_SET_NO_NEW_PRIVS: when they
/// lack CAP_SYS_ADMIN (not root), which also stacking the escalation filter later needs. (In
/// a user namespace of kioku's, setuid programs gain nothing anyway.)
pub fn needs_no_new_privs() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() != 0 }
}
