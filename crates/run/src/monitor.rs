//! The monitor loop: let the tree run, checkpoint it every interval and on request, hand its
//! seccomp traps to the file journal, pass the root's exit through.

use std::time::{Duration, Instant};

use kioku_proc::{Exit, ProcError, Tracee, Tree};

use crate::journal::Verdict;

use crate::capture::{Capturer, CheckpointReport};
use crate::control::{Control, Request};
use crate::error::{Result, RunError};

/// How the monitor behaves.
#[derive(Clone, Debug)]
pub struct MonitorOptions {
    /// Time between checkpoints; `None`: only on request.
    pub interval: Option<Duration>,
    /// Listen for `kioku checkpoint` requests.
    pub control: bool,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions {
            interval: Some(Duration::from_secs(1)),
            control: true,
        }
    }
}

/// What a monitored run did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    pub checkpoints: u64,
    pub last_epoch: u64,
    /// What each checkpoint cost the program (ms): its stop ([`Summary::stop_capture_ms`])
    /// plus the write-protect faults it took after the resume, until the next checkpoint
    /// ([`Summary::wp_faults`] of the next one × [`Summary::wp_fault_us`]). The last
    /// checkpoint's faults are not known (no later scan): its figure is its stop alone.
    pub stop_ms: Vec<f64>,
    /// Stop times (ms) of every checkpoint: from the stop request until the capture is done
    /// (the resume follows); what the program pays after it resumes is left out.
    pub stop_capture_ms: Vec<f64>,
    /// For every checkpoint, the pages found written in write-tracked memory since the one
    /// before: each cost the program a write-protect fault after that checkpoint's resume
    /// (an upper bound: a page first touched since then is counted too, whose fault the
    /// program would take anyway). Memory rewritten whole is taken whole instead, without
    /// faults (docs/run.md).
    pub wp_faults: Vec<u64>,
    /// The cost of one write-protect fault (µs), measured by the monitor on its own memory at
    /// the first checkpoint (`kioku_run::wpcost`); 0 when it could not be measured.
    pub wp_fault_us: f64,
    /// Times (ms) from the end of the stop until each checkpoint was durable (the engine's
    /// write-back and commit), overlapping the program's run.
    pub durable_ms: Vec<f64>,
    /// Times (ms) the monitor then spent syncing the other context (after answering a
    /// `kioku checkpoint`), overlapping the program's run.
    pub sync_ms: Vec<f64>,
    pub copied_bytes: u64,
    pub captured_bytes: u64,
    /// Most processes in one checkpoint.
    pub processes: usize,
    /// Why checkpoints stopped, if they did.
    pub stopped_because: Option<String>,
    /// Checkpoints that were due (or asked for) but skipped: a capture that failed in a way a
    /// later one need not (docs/run.md, "A checkpoint that fails"), or a process of the tree
    /// killed during it. The checkpoint before each stayed the restorable one.
    pub skipped: u64,
    /// Why, for the last [`SKIP_REASONS`] skipped checkpoints (oldest first).
    pub skipped_because: Vec<String>,
}

/// Reasons of skipped checkpoints the summary keeps.
pub const SKIP_REASONS: usize = 16;

/// Failed captures in a row after which checkpoints stop: a cause that fails this many in a
/// row is not passing (a transient cause — a process dying, an interrupted read — does not
/// repeat at every checkpoint), and a checkpoint that can never be taken must not cost the
/// program a stop at every interval.
pub const FAILED_IN_ROW_LIMIT: u32 = 8;

/// Why a checkpoint was skipped.
enum Skip {
    /// A process of the tree (this pid, when known) was killed during the checkpoint.
    Died(Option<i32>),
    /// The capture failed with a transient error.
    Failed(RunError),
}

/// What happened to a checkpoint request.
enum Outcome {
    Taken(Box<CheckpointReport>),
    /// Not now (the tree is in a vfork, or data is in flight); try again after this long.
    Postponed(Duration),
    /// The tree ended, or checkpoints stopped.
    None,
}

/// A process tree under the monitor.
pub struct Monitor {
    tree: Tree,
    capturer: Option<Capturer>,
    control: Option<Control>,
    opts: MonitorOptions,
    summary: Summary,
    /// The checkpoint being taken is the early first one of a fresh run: what it cannot take
    /// does not stop checkpoints (the regular first checkpoint, one interval in, decides).
    tentative: bool,
    /// Captures that failed since the last checkpoint taken ([`FAILED_IN_ROW_LIMIT`]).
    failed_in_row: u32,
}

/// The slice the tree runs between looks at the control socket.
const POLL: Duration = Duration::from_millis(20);
/// When a fresh run's first checkpoint is due (or after one interval, when shorter).
const FIRST_CHECKPOINT: Duration = Duration::from_millis(5);
/// Retry delay of a checkpoint postponed because the tree could not be stopped.
const RETRY: Duration = Duration::from_millis(2);
/// Retry delay of a checkpoint postponed because data was in flight (unread inotify events…).
const UNSETTLED_RETRY: Duration = Duration::from_millis(50);

impl Monitor {
    pub fn new(tree: Tree, capturer: Capturer, opts: MonitorOptions) -> Result<Monitor> {
        let control = if opts.control {
            let init: Vec<i32> = tree.namespace().map(|n| n.init_pid()).into_iter().collect();
            Some(Control::listen(
                tree.root_pid(),
                capturer.pool_path(),
                &init,
            )?)
        } else {
            None
        };
        Ok(Monitor {
            tree,
            capturer: Some(capturer),
            control,
            opts,
            summary: Summary::default(),
            tentative: false,
            failed_in_row: 0,
        })
    }

    /// The root process (as the monitor sees it).
    pub fn pid(&self) -> i32 {
        self.tree.root_pid()
    }

    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Takes a checkpoint now (waiting while the tree cannot be stopped), durable and with the
    /// other context synced when this returns. `None` when none was taken: the tree ended
    /// meanwhile, or checkpoints stopped.
    pub fn checkpoint(&mut self) -> Result<Option<CheckpointReport>> {
        let r = self.checkpoint_durable();
        self.sync_pending()?;
        r
    }

    /// Syncs the other context with the last checkpoint if that is still to do (it is durable
    /// already). A failing medium stops checkpoints; the tree runs on.
    fn sync_pending(&mut self) -> Result<()> {
        let Some(cap) = self.capturer.as_mut() else {
            return Ok(());
        };
        match cap.sync() {
            Ok(Some(d)) => {
                self.summary.sync_ms.push(d.as_secs_f64() * 1e3);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) if medium_failure(&e) => {
                self.stop_checkpoints(format!("the pool's medium failed: {e}"));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// [`Monitor::checkpoint`] returning once the checkpoint is durable, before the other
    /// context is synced (the caller syncs with [`Monitor::sync_pending`]).
    fn checkpoint_durable(&mut self) -> Result<Option<CheckpointReport>> {
        let t0 = Instant::now();
        loop {
            match self.checkpoint_once()? {
                Outcome::Taken(r) => return Ok(Some(*r)),
                Outcome::None => return Ok(None),
                Outcome::Postponed(after) if t0.elapsed() < Duration::from_secs(10) => {
                    if let Some(exit) = self.run_slice(after)? {
                        self.ended(exit)?;
                        return Ok(None);
                    }
                }
                Outcome::Postponed(_) => {
                    self.skipped(Skip::Failed(RunError::Unsettled {
                        what: "no checkpoint could be taken for 10 s (a process stays in vfork, or data stays in flight)".into(),
                    }));
                    return Ok(None);
                }
            }
        }
    }

    fn checkpoint_once(&mut self) -> Result<Outcome> {
        match self.try_checkpoint() {
            Err(RunError::Proc(ProcError::Busy { what })) => {
                tracing::debug!("checkpoint postponed: busy: {what}");
                let _ = self.tree.resume_all();
                Ok(Outcome::Postponed(RETRY))
            }
            Err(RunError::Proc(ProcError::Exited { .. })) => Ok(Outcome::None),
            Err(RunError::Unsettled { what }) => {
                // Data in flight at this instant: the next checkpoint may well succeed.
                tracing::debug!("checkpoint postponed: {what}");
                let _ = self.tree.resume_all();
                Ok(Outcome::Postponed(UNSETTLED_RETRY))
            }
            // The tree was killed rather than run on a damaged checkpoint: nothing runs on.
            Err(e @ RunError::DamagedCheckpoint { .. }) => Err(e),
            Err(RunError::Unsupported { what }) if self.tentative => {
                tracing::debug!("early first checkpoint not taken: {what}");
                let _ = self.tree.resume_all();
                Ok(Outcome::None)
            }
            Err(RunError::Unsupported { what }) => {
                let _ = self.tree.resume_all();
                self.stop_checkpoints(what);
                Ok(Outcome::None)
            }
            Err(e) if self.tree_changed_under_us() => {
                tracing::debug!("a process died during a checkpoint: {e}");
                let _ = self.tree.resume_all();
                if let Some(cap) = self.capturer.as_mut() {
                    cap.capture_failed();
                }
                self.skipped(Skip::Died(None));
                Ok(Outcome::None)
            }
            // Whatever else failed before or around the capture (stopping the tree, a
            // restore's fill, syncing) is transient as a failed capture is: the tree runs on.
            Err(e) => {
                let _ = self.tree.resume_all();
                if let Some(cap) = self.capturer.as_mut() {
                    cap.capture_failed();
                }
                self.skipped(Skip::Failed(e));
                Ok(Outcome::None)
            }
            Ok(o) => Ok(o),
        }
    }

    /// Records a checkpoint not taken (`why`): said, counted in the summary; the last
    /// checkpoint stays the restorable one. [`FAILED_IN_ROW_LIMIT`] failed captures in a row
    /// stop checkpoints (the tree runs on).
    fn skipped(&mut self, why: Skip) {
        let epoch = self.capturer.as_ref().map_or(0, |c| c.engine().epoch());
        let kept = match epoch {
            0 => "the pool holds no checkpoint yet".to_string(),
            e => format!("checkpoint {e} stays the one a restore resumes"),
        };
        let reason = match why {
            Skip::Died(pid) => {
                let which = pid.map(|p| format!(" ({p})")).unwrap_or_default();
                let r = format!("a process of the program{which} was killed during it");
                // The program's own doing (or its killer's), not a failure of kioku's.
                tracing::info!("kioku: checkpoint skipped: {r}; {kept}");
                r
            }
            Skip::Failed(e) => {
                self.failed_in_row += 1;
                let r = e.to_string();
                if self.failed_in_row >= FAILED_IN_ROW_LIMIT {
                    self.stop_checkpoints(format!(
                        "{FAILED_IN_ROW_LIMIT} checkpoints failed in a row, the last with: {r}"
                    ));
                } else {
                    tracing::warn!(
                        "kioku: checkpoint skipped: {r}; {kept}, the program runs on and the next checkpoint is tried at the next interval"
                    );
                }
                r
            }
        };
        let s = &mut self.summary;
        s.skipped += 1;
        s.skipped_because.push(reason);
        if s.skipped_because.len() > SKIP_REASONS {
            s.skipped_because.remove(0);
        }
    }

    /// After a failure: whether a process of the tree died meanwhile (killed while stopped: a
    /// SIGKILL does not wait for us), which is not an error of ours.
    fn tree_changed_under_us(&self) -> bool {
        let pids: Vec<i32> = self.tree.processes().iter().map(|p| p.pid()).collect();
        any_gone(&pids)
    }

    fn try_checkpoint(&mut self) -> Result<Outcome> {
        if self.summary.stopped_because.is_some() {
            return Ok(Outcome::None);
        }
        // The last checkpoint's other context is synced before the tree stops, not during.
        self.sync_pending()?;
        if self.summary.stopped_because.is_some() {
            return Ok(Outcome::None);
        }
        let Some(cap) = self.capturer.as_mut() else {
            return Ok(Outcome::None);
        };
        // A restore by mapping completes while the tree runs, not in its stop.
        cap.finish_restore()?;
        let mut t0 = Instant::now();
        self.tree.stop_all()?;
        tracing::debug!(
            ms = t0.elapsed().as_secs_f64() * 1e3,
            "tree stopped for a checkpoint"
        );
        let pids: Vec<i32> = self.tree.processes().iter().map(|p| p.pid()).collect();
        if self.tree.is_empty() {
            return Ok(Outcome::None);
        }
        // Much new memory: register it, copy it while the tree runs, then stop again for
        // what it wrote meanwhile.
        let (mut prestop, mut precopied) = (Duration::ZERO, 0);
        let captured = match cap.prepare(&self.tree) {
            Ok(Some(pre)) => {
                prestop = t0.elapsed();
                self.tree.resume_all()?;
                precopied = cap.precopy(pre);
                tracing::debug!(
                    mib = precopied >> 20,
                    "copied new memory while the tree ran"
                );
                t0 = Instant::now();
                match self.tree.stop_all() {
                    Ok(()) => cap.capture(&mut self.tree, t0),
                    Err(e) => Err(e.into()),
                }
            }
            Ok(None) => cap.capture(&mut self.tree, t0),
            Err(e) => Err(e),
        }
        .map(|mut c| {
            c.stats.stop += prestop;
            c.stats.precopied = precopied;
            c
        });
        if matches!(captured, Err(RunError::Proc(ProcError::Busy { .. }))) {
            return captured.map(|_| Outcome::None);
        }
        // A SIGKILL does not wait for the stop: a process killed while the tree was stopped
        // ends during the capture, and what the capture read after that — its zombie
        // children reaped by the namespace's init, its pipes closed — no longer goes with the
        // state it read of it before. Such a capture is not committed (issue 18: a restored
        // tree whose parent had not reaped its zombie yet, while the zombie was gone). Asked
        // while the tree is still stopped, which makes the answer exact: a process killed
        // after this look died after everything the capture read (and one that dies after the
        // resume costs no checkpoint).
        // After a failed capture the same look tells a death (the failure's likely cause)
        // from an error of its own, without waiting.
        let killed = match &captured {
            Ok(_) => cap.killed_in_stop(&self.tree).or_else(|| {
                crate::capture::injected_drop(cap.engine().epoch()).then(|| self.tree.root_pid())
            }),
            Err(_) => cap.killed_in_stop(&self.tree).filter(|&p| dying(p)),
        };
        cap.verified(killed);
        if captured.is_ok() && killed.is_none() {
            // To be committed: the file journal's records undo back to it from here (the
            // tree still stopped). (A capture dropped here used to begin its epoch too, and
            // a later checkpoint of the same number then undid changes made before it.)
            cap.begin_epoch();
        }
        // Resume whatever happened: the program must not stay stopped because of us.
        let resumed = self.tree.resume_all();
        // A process killed during the capture makes whatever the capture concluded unsure (a
        // refusal too: it may have read the dying process half gone): skipped, not a verdict.
        // A state that really cannot be checkpointed is found again at the next checkpoint.
        if captured.is_err() && killed.is_some() {
            cap.capture_failed();
            self.skipped(Skip::Died(killed));
            return Ok(Outcome::None);
        }
        if captured.is_err() && resumed.is_err() && any_gone(&pids) {
            cap.capture_failed();
            self.skipped(Skip::Died(pids.iter().copied().find(|&p| dying(p))));
            return Ok(Outcome::None);
        }
        match resumed {
            Ok(()) | Err(ProcError::Exited { .. }) => {}
            // The capture was whole and exact before the resume (and its epoch begun): it is
            // committed; the tree's next run meets the failure again if it lasts.
            Err(e) if captured.is_ok() && killed.is_none() => {
                tracing::debug!("resuming the tree after a capture failed: {e}")
            }
            Err(e) => return Err(e.into()),
        }
        if let Some(pid) = killed {
            self.skipped(Skip::Died(Some(pid)));
            return Ok(Outcome::None);
        }
        let captured = match captured {
            Ok(c) => c,
            Err(e @ RunError::Unsettled { .. }) => return Err(e),
            Err(RunError::Unsupported { what }) if self.tentative => {
                // The early first checkpoint met something it cannot take (a program setting
                // itself up): not a verdict yet, the regular first checkpoint decides.
                tracing::debug!("early first checkpoint not taken: {what}");
                return Ok(Outcome::None);
            }
            Err(RunError::Unsupported { what }) => {
                self.stop_checkpoints(what);
                return Ok(Outcome::None);
            }
            Err(e) if medium_failure(&e) => {
                self.stop_checkpoints(format!("the pool's medium failed: {e}"));
                return Ok(Outcome::None);
            }
            Err(e) => {
                // Transient (docs/run.md, "A checkpoint that fails"): skipped, the last
                // checkpoint stays the pool's, the tree runs on.
                cap.capture_failed();
                self.skipped(Skip::Failed(e));
                return Ok(Outcome::None);
            }
        };
        let report = match cap.commit(captured) {
            Ok(r) => r,
            // The commit did not happen: the checkpoint before stays the pool's.
            Err(e) if medium_failure(&e) => {
                self.stop_checkpoints(format!("the pool's medium failed: {e}"));
                return Ok(Outcome::None);
            }
            Err(e) => return Err(e),
        };
        self.failed_in_row = 0;
        let s = &mut self.summary;
        s.checkpoints += 1;
        s.last_epoch = report.epoch;
        // The faults found now were taken after the previous checkpoint's resume: its cost.
        if s.wp_fault_us == 0.0 {
            s.wp_fault_us = crate::wpcost::wp_fault_cost().map_or(0.0, |d| d.as_secs_f64() * 1e6);
        }
        if let Some(last) = s.stop_ms.last_mut() {
            *last += report.capture.written as f64 * s.wp_fault_us / 1e3;
        }
        let stop = report.capture.stop.as_secs_f64() * 1e3;
        s.stop_ms.push(stop);
        s.stop_capture_ms.push(stop);
        s.wp_faults.push(report.capture.written);
        s.durable_ms.push(report.engine.total.as_secs_f64() * 1e3);
        s.copied_bytes +=
            report.capture.pages * kioku_track::page_size() as u64 + report.capture.precopied;
        s.captured_bytes = report.capture.captured_bytes;
        s.processes = s.processes.max(report.capture.processes);
        tracing::debug!(
            epoch = report.epoch,
            stop_ms = report.capture.stop.as_secs_f64() * 1e3,
            pages = report.capture.pages,
            processes = report.capture.processes,
            "checkpoint"
        );
        Ok(Outcome::Taken(Box::new(report)))
    }

    /// Lets the tree run for `d` without checkpoints; the root's exit if the tree ended.
    pub fn run_for(&mut self, d: Duration) -> Result<Option<Exit>> {
        match self.run_slice(d)? {
            Some(exit) => self.ended(exit).map(Some),
            None => Ok(None),
        }
    }

    /// One slice of running, traps handled.
    fn run_slice(&mut self, d: Duration) -> Result<Option<Exit>> {
        run_tree(
            &mut self.tree,
            &mut self.capturer,
            &mut self.summary.stopped_because,
            d,
        )
    }

    /// Runs the tree to its end, checkpointing; returns how its root ended.
    pub fn run(&mut self) -> Result<Exit> {
        // A fresh run's first checkpoint is taken at once (after the program's first
        // instructions), while its memory is small: the pool is restorable from the start,
        // whatever the program grows to, and later checkpoints copy only what it adds.
        let fresh = self
            .capturer
            .as_ref()
            .is_some_and(|c| c.engine().epoch() == 0);
        let started = Instant::now();
        let mut early = fresh && self.opts.interval.is_some_and(|i| i > FIRST_CHECKPOINT);
        let mut next = self
            .opts
            .interval
            .map(|i| started + if early { FIRST_CHECKPOINT } else { i });
        loop {
            let slice = match next {
                Some(n) => n.saturating_duration_since(Instant::now()).min(POLL),
                None => POLL,
            };
            if let Some(exit) = self.run_slice(slice)? {
                return self.ended(exit);
            }
            if let Some(Exit::Signal { sig, core }) = self.tree.root_exit() {
                // The program crashed (or was killed): end what it started too, so that nothing
                // runs on past the crash; the last checkpoint is what a restore resumes.
                tracing::debug!(sig, "the tree's first process was killed; ending the tree");
                self.tree.kill();
                return self.ended(Exit::Signal { sig, core });
            }
            let requests: Vec<Request> =
                self.control.as_mut().map(|c| c.poll()).unwrap_or_default();
            let due = next.is_some_and(|n| Instant::now() >= n);
            if due || !requests.is_empty() {
                let skipped_before = self.summary.skipped;
                let r = if requests.is_empty() && early {
                    // The early first checkpoint: taken if it can be now, else the regular
                    // first one (one interval after the start) is.
                    self.tentative = true;
                    let r = self.checkpoint_once();
                    self.tentative = false;
                    tracing::debug!(
                        ms = started.elapsed().as_secs_f64() * 1e3,
                        outcome = match &r {
                            Ok(Outcome::Taken(_)) => "taken",
                            Ok(Outcome::Postponed(_)) => "postponed",
                            Ok(Outcome::None) => "not taken",
                            Err(_) => "failed",
                        },
                        "early first checkpoint"
                    );
                    let regular = self.opts.interval.map(|i| started + i);
                    match r {
                        Ok(Outcome::Taken(r)) => {
                            early = false;
                            Ok(Some(*r))
                        }
                        // Not now (a process still starting up, data in flight): soon again,
                        // while the memory is still small, until the regular first one.
                        Ok(Outcome::Postponed(after))
                            if regular.is_some_and(|t| Instant::now() + after < t) =>
                        {
                            next = Some(Instant::now() + after.max(FIRST_CHECKPOINT));
                            continue;
                        }
                        Ok(_) => {
                            early = false;
                            next = regular;
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                } else if requests.is_empty() {
                    // An interval checkpoint that cannot be taken now is retried shortly.
                    match self.checkpoint_once() {
                        Ok(Outcome::Postponed(after)) => {
                            next = Some(Instant::now() + after);
                            continue;
                        }
                        Ok(Outcome::Taken(r)) => Ok(Some(*r)),
                        Ok(Outcome::None) => {
                            tracing::debug!("no checkpoint taken");
                            Ok(None)
                        }
                        Err(e) => Err(e),
                    }
                } else {
                    self.checkpoint_durable()
                };
                let answer = match &r {
                    Ok(Some(rep)) => serde_json::to_string(rep).unwrap_or_default(),
                    Ok(None) => match (&self.summary.stopped_because, self.summary.skipped_because.last()) {
                        (Some(w), _) => format!("error: checkpoints stopped: {w}"),
                        (None, Some(w)) if self.summary.skipped > skipped_before => format!(
                            "error: the checkpoint was skipped ({w}); the last checkpoint stays the restorable one — ask again"
                        ),
                        (None, _) => "error: the program ended".into(),
                    },
                    Err(e) => format!("error: {e}"),
                };
                // Answered once durable; the other context is synced afterwards.
                for q in requests {
                    q.answer(&answer);
                }
                r?;
                self.sync_pending()?;
                if let (Some(i), true) = (self.opts.interval, due) {
                    next = Some(Instant::now() + i);
                }
                if self.tree.is_empty() {
                    let exit = self.tree.root_exit().unwrap_or(Exit::Code(0));
                    return self.ended(exit);
                }
            }
        }
    }

    /// Takes no more checkpoints (`why`, said once, and noted in the pool where `kioku
    /// inspect` shows it); the tree runs on, its file journal too, so the last checkpoint stays
    /// restorable.
    fn stop_checkpoints(&mut self, why: String) {
        stop_checkpoints(&mut self.capturer, &mut self.summary.stopped_because, why);
    }

    /// A tree whose root exited is finished; one whose root was killed by a signal crashed,
    /// and its last checkpoint is what a restore resumes.
    fn ended(&mut self, exit: Exit) -> Result<Exit> {
        if let Some(cap) = self.capturer.as_mut() {
            match exit {
                Exit::Code(_) => {
                    if let Err(e) = cap.finish(exit.to_string()) {
                        // The pool's medium failed: said, not the program's failure.
                        tracing::warn!("kioku: the pool could not record that the program ended: {e}");
                    }
                }
                Exit::Signal { .. } => tracing::warn!(
                    "kioku: the program was {exit}; `kioku restore --pool {}` resumes it from its last checkpoint (epoch {})",
                    cap.pool_path().display(),
                    cap.engine().epoch()
                ),
            }
            self.capturer = None;
        }
        Ok(exit)
    }
}

/// Lets `tree` run for `d`, handing its seccomp traps to the journal of `capturer`; when the
/// journal cannot go on (a full medium), checkpoints stop (`stopped`) and the tree runs on.
fn run_tree(
    tree: &mut Tree,
    capturer: &mut Option<Capturer>,
    stopped: &mut Option<String>,
    d: Duration,
) -> Result<Option<Exit>> {
    let mut stop_checkpoints = None;
    let r = tree.run_for(d, &mut |procs: &[Tracee],
                                  t: &Tracee,
                                  tid: i32|
     -> Result<()> {
        let Some(cap) = capturer.as_mut() else {
            return Ok(());
        };
        match cap.on_trap(procs, t, tid) {
            Ok(Verdict::Incomplete { why }) => {
                stop_checkpoints = Some(why);
                Ok(())
            }
            Ok(_) => Ok(()),
            // Killed meanwhile: its call will never run.
            Err(_) if program_gone(t.pid()) => Ok(()),
            // Nothing could be recorded, so the call must not run: end the tree as a crash
            // of the monitor would (the last checkpoint stays exact).
            Err(e) => Err(e),
        }
    });
    if let Some(why) = stop_checkpoints {
        self::stop_checkpoints(
            capturer,
            stopped,
            format!("the file journal cannot record any more ({why}); a restore refuses: files changed since the last checkpoint could not be kept"),
        );
    }
    r
}

/// See [`Monitor::stop_checkpoints`].
fn stop_checkpoints(capturer: &mut Option<Capturer>, stopped: &mut Option<String>, why: String) {
    if stopped.is_some() {
        return;
    }
    if let Some(cap) = capturer.as_mut() {
        match cap.engine().epoch() {
            0 => tracing::warn!(
                "kioku: no checkpoints: {why}; the program runs on without them"
            ),
            e => tracing::warn!(
                "kioku: no more checkpoints: {why}; the program runs on, and the last checkpoint (epoch {e}) is what a restore resumes"
            ),
        }
        if let Err(e) = cap.note(&why) {
            tracing::warn!("kioku: could not note that in the pool: {e}");
        }
    }
    *stopped = Some(why);
}

/// Whether `e` is a failure of the pool's medium (full, I/O error) rather than of the program
/// or of kioku's control of it: such a failure stops checkpoints, it never ends the program.
fn medium_failure(e: &RunError) -> bool {
    matches!(
        e,
        RunError::Pool(_) | RunError::Ckpt(_) | RunError::Journal(_)
    )
}

/// Whether process `pid` is dead or on its way there, without waiting: gone, a zombie, exiting
/// (`PF_EXITING`), or with a SIGKILL pending (sent, not yet acted on).
fn dying(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    let st = kioku_pool::procstat::ProcStat::parse(&stat);
    if st.has_exited() || st.number::<u64>(9).is_some_and(|f| f & PF_EXITING != 0) {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    status.lines().any(|l| {
        l.strip_prefix("ShdPnd:")
            .or_else(|| l.strip_prefix("SigPnd:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|m| m & SIGKILL_BIT != 0)
    })
}

/// Whether process `pid` is dead or dying (gone, or a zombie waiting to be reaped). Asked
/// after a failure: a process killed while stopped makes ptrace fail before it shows as a
/// zombie, so this waits up to half a second for it to get there.
pub fn program_gone(pid: i32) -> bool {
    any_gone(&[pid])
}

/// Whether any of `pids` is dead or dying, waiting up to half a second in all.
pub fn any_gone(pids: &[i32]) -> bool {
    let dead = |pid: i32| !kioku_pool::procstat::pid_is_running(pid.into());
    for _ in 0..500 {
        if pids.iter().any(|&p| dead(p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}
