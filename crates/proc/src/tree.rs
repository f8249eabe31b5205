//! A traced process *tree*: a program and everything it starts (fork, vfork, clone), each
//! process a [`Tracee`], stopped and resumed together, its events handled in one loop.
//!
//! Children are attached by the kernel (PTRACE_O_TRACEFORK…) before they run an instruction,
//! so nothing the tree does escapes the monitor. A process that exits is reaped by the monitor
//! as its tracer (the kernel then reports it to its real parent, which reaps it with wait() as
//! usual); until its parent has done so it is a zombie, whose exit the tree remembers.
//! Seccomp traps ([`Notice::Trap`]) are handed to the caller before the trapped call runs.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::error::{ProcError, Result};
use crate::ns::Namespace;
use crate::sys;
use crate::tracee::{Exit, Notice, Tracee};

/// What the owner does at a seccomp trap: (every process, the trapped process, the thread).
pub type TrapHandler<'a, E> = dyn FnMut(&[Tracee], &Tracee, i32) -> std::result::Result<(), E> + 'a;

/// A program and its descendants under one monitor.
#[derive(Debug)]
pub struct Tree {
    procs: Vec<Tracee>,
    root: i32,
    root_exit: Option<Exit>,
    /// Processes that ended (the monitor reaped them as tracer) and may still be zombies
    /// waiting for their parent.
    ended: HashMap<i32, Exit>,
    /// Children started by vfork that have not exec'd or exited: they share their parent's
    /// memory, so no checkpoint may be taken meanwhile.
    vforked: HashSet<i32>,
    ns: Option<Namespace>,
    /// Processes that ended, in all.
    ended_total: u64,
}

/// Longest sleep between looks at the tree when SIGCHLD may not reach this thread (another
/// thread of the monitor may take it).
const NAP_MAX: Duration = Duration::from_millis(2);

impl Tree {
    /// A tree whose first process is `root` (stopped or running), in namespace `ns`.
    pub fn new(root: Tracee, ns: Option<Namespace>) -> Tree {
        Tree {
            root: root.pid(),
            procs: vec![root],
            root_exit: None,
            ended: HashMap::new(),
            vforked: HashSet::new(),
            ns,
            ended_total: 0,
        }
    }

    /// Sets the first process (after a restore: `pid` of the process whose exit is passed on,
    /// or none alive when `exit` says how it already ended).
    pub fn set_root(&mut self, pid: i32, exit: Option<Exit>) {
        self.root = pid;
        self.root_exit = exit;
    }

    /// Gives the tree its pid namespace (ended with it).
    pub fn set_namespace(&mut self, ns: Namespace) {
        self.ns = Some(ns);
    }

    /// Adds a process (a restore creates them one by one).
    pub fn add(&mut self, t: Tracee) {
        if !self.procs.iter().any(|p| p.pid() == t.pid()) {
            self.procs.push(t);
        }
    }

    /// The first process.
    pub fn root_pid(&self) -> i32 {
        self.root
    }

    /// The live processes (the root first while it lives).
    pub fn processes(&self) -> &[Tracee] {
        &self.procs
    }

    /// Process `pid`, if alive in the tree.
    pub fn process(&self, pid: i32) -> Option<&Tracee> {
        self.procs.iter().find(|p| p.pid() == pid)
    }

    /// The pid namespace, when the tree has one.
    pub fn namespace(&self) -> Option<&Namespace> {
        self.ns.as_ref()
    }

    /// How the root ended, once it has.
    pub fn root_exit(&self) -> Option<Exit> {
        self.root_exit
    }

    /// How process `pid` of the tree ended, if it has and may still be a zombie.
    pub fn ended(&self, pid: i32) -> Option<Exit> {
        self.ended.get(&pid).copied()
    }

    /// The ended processes that may still be zombies.
    pub fn ended_pids(&self) -> Vec<i32> {
        self.ended.keys().copied().collect()
    }

    /// How many processes of the tree have ended so far (a count that only grows: a caller
    /// comparing it with an earlier value learns that some process ended meanwhile).
    pub fn ended_count(&self) -> u64 {
        self.ended_total
    }

    /// Forgets ended processes whose parents reaped them.
    pub fn forget_reaped(&mut self) {
        self.ended
            .retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    /// Whether a vfork child still shares its parent's memory.
    pub fn in_vfork(&self) -> bool {
        !self.vforked.is_empty()
    }

    /// Whether every process has ended.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Stops every thread of every process, including processes started meanwhile. Refuses
    /// with [`ProcError::Busy`] (leaving the tree running) while a vfork child shares its
    /// parent's memory: the parent cannot stop until the child execs or exits.
    pub fn stop_all(&mut self) -> Result<()> {
        let mut none = |_: &[Tracee], _: &Tracee, _: i32| -> Result<()> { Ok(()) };
        if self.in_vfork() {
            return Err(ProcError::Busy {
                what: "a process is in vfork (its child shares its memory until it execs)",
            });
        }
        loop {
            let procs = self.procs.clone();
            for p in &procs {
                match p.interrupt_all() {
                    Ok(()) | Err(ProcError::Exited { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            for p in &procs {
                match p.stop_all() {
                    Ok(()) | Err(ProcError::Exited { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            let added = self.take_notices(&mut none)?;
            let adopted = self.drop_ended();
            if self.in_vfork() {
                // Caught in the middle of a vfork: let it finish.
                self.resume_all()?;
                return Err(ProcError::Busy {
                    what: "a process is in vfork (its child shares its memory until it execs)",
                });
            }
            if !added && !adopted {
                return Ok(());
            }
        }
    }

    /// Resumes every thread of every process.
    pub fn resume_all(&mut self) -> Result<()> {
        for p in self.procs.clone() {
            match p.resume_all() {
                Ok(()) | Err(ProcError::Exited { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // (A process adopted here runs once its first stop is seen, as a new child does.)
        self.drop_ended();
        Ok(())
    }

    /// Lets the tree run for `d` (resuming it), handling its events: new processes join the
    /// tree; `on_trap(processes, process, tid)` runs for each seccomp trap before the trapped
    /// call is let run (an error from it ends the loop, the call not run). Returns the root's
    /// exit once every process of the tree has ended.
    pub fn run_for<E: From<ProcError>>(
        &mut self,
        d: Duration,
        on_trap: &mut TrapHandler<'_, E>,
    ) -> std::result::Result<Option<Exit>, E> {
        let deadline = Instant::now() + d;
        self.resume_all()?;
        let _blocked = sys::SigchldBlocked::new();
        let mut nap = Duration::from_micros(50);
        loop {
            let mut progressed = false;
            for p in self.procs.clone() {
                match p.poll() {
                    Ok(x) => progressed |= x,
                    Err(ProcError::Exited { .. }) => progressed = true,
                    Err(e) => return Err(e.into()),
                }
            }
            progressed |= self.take_notices(on_trap)?;
            self.drop_ended();
            if self.procs.is_empty() {
                return Ok(Some(self.root_exit.unwrap_or(Exit::Code(0))));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            if progressed {
                nap = Duration::from_micros(50);
                continue;
            }
            sys::wait_sigchld(nap.min(deadline - now));
            nap = (nap * 2).min(NAP_MAX);
        }
    }

    /// Handles the notices of every process; whether any process was added or resumed.
    fn take_notices<E: From<ProcError>>(
        &mut self,
        on_trap: &mut TrapHandler<'_, E>,
    ) -> std::result::Result<bool, E> {
        let mut any = false;
        let mut i = 0;
        while i < self.procs.len() {
            let p = self.procs[i].clone();
            for n in p.take_notices() {
                any = true;
                match n {
                    Notice::Child { pid, vfork } => {
                        if vfork {
                            self.vforked.insert(pid);
                        }
                        // Adopted already when its fork's report came late (after another
                        // process ended: `adopt_unreported`); a second handle would kill it
                        // when dropped.
                        if self.process(pid).is_none() {
                            self.add(Tracee::adopt(pid));
                        }
                    }
                    Notice::Trap { tid } => {
                        let procs = self.procs.clone();
                        on_trap(&procs, &p, tid)?;
                        match p.resume_trapped(tid) {
                            Ok(()) | Err(ProcError::Exited { .. }) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            i += 1;
        }
        // A vfork child that exec'd (or ended) no longer shares its parent's memory.
        let procs = &self.procs;
        self.vforked.retain(|pid| {
            procs
                .iter()
                .find(|p| p.pid() == *pid)
                .is_some_and(|p| p.execs() == 0 && p.exit().is_none())
        });
        Ok(any)
    }

    /// Moves processes that ended out of the live list; whether processes were adopted then
    /// ([`Tree::adopt_unreported`]).
    fn drop_ended(&mut self) -> bool {
        let root = self.root;
        let mut ended = Vec::new();
        self.procs.retain(|p| match p.exit() {
            Some(e) => {
                ended.push((p.pid(), e));
                false
            }
            None => true,
        });
        let any = !ended.is_empty();
        for (pid, e) in ended {
            tracing::debug!(pid, exit = %e, "process of the tree ended");
            if pid == root {
                self.root_exit = Some(e);
            }
            self.ended.insert(pid, e);
            self.ended_total += 1;
        }
        any && self.adopt_unreported()
    }

    /// Adopts every process of the namespace that this thread traces but the tree does not
    /// know; whether there was one. A process forked as its parent was being killed (or as
    /// another thread of its parent ended the process) is attached by the kernel
    /// (`PTRACE_O_TRACEFORK`) though its fork's event never comes: it would wait in its first
    /// stop, never run, until the tree ended (issue 18). Adopted, it runs on as the orphan it
    /// is, in the tree (checkpointed, its exit reaped). Looked for when a process of the tree
    /// ends — such a fork is never reported, but its parent's end is — among the namespace's
    /// processes (its init's descendants, where orphans go).
    fn adopt_unreported(&mut self) -> bool {
        let Some(init) = self.ns.as_ref().map(|n| n.init_pid()) else {
            return false;
        };
        // SAFETY: asking our own thread id.
        let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        let mut found = Vec::new();
        let mut todo = vec![init];
        let mut seen = HashSet::new();
        while let Some(pid) = todo.pop() {
            if !seen.insert(pid) {
                continue;
            }
            if pid != init
                && self.process(pid).is_none()
                && !self.ended.contains_key(&pid)
                && tracer_of(pid) == Some(me)
            {
                found.push(pid);
            }
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for tid in tasks.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
                if let Ok(text) =
                    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children"))
                {
                    todo.extend(
                        text.split_whitespace()
                            .filter_map(|c| c.parse::<i32>().ok()),
                    );
                }
            }
        }
        for &pid in &found {
            tracing::debug!(pid, "adopting a process whose fork was never reported");
            self.add(Tracee::adopt(pid));
        }
        !found.is_empty()
    }

    /// Kills every process (and the namespace's init) and reaps them.
    pub fn kill(&mut self) {
        for p in &self.procs {
            let _ = crate::sys::kill(p.pid(), libc::SIGKILL);
        }
        for p in std::mem::take(&mut self.procs) {
            if let Ok(e) = p.kill() {
                if p.pid() == self.root {
                    self.root_exit.get_or_insert(e);
                }
            }
        }
        self.ns = None;
    }
}

/// The thread tracing process `pid` (`TracerPid` of its status; `None`: untraced or gone).
fn tracer_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tracer: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()?;
    (tracer != 0).then_some(tracer)
}

impl Drop for Tree {
    fn drop(&mut self) {
        // Processes are killed by their own handles (spawned or adopted ones); the
        // namespace's init goes last, ending whatever is left in it.
        self.procs.clear();
    }
}
