//! The monitor loop: let the program run, checkpoint it every interval and on request, pass its
//! exit through.

use std::time::{Duration, Instant};

use kioku_proc::{Exit, ProcError, Tracee};

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
    /// Stop times (ms) of every checkpoint.
    pub stop_ms: Vec<f64>,
    /// Durable (engine) times (ms), overlapping the program's run.
    pub durable_ms: Vec<f64>,
    pub copied_bytes: u64,
    pub captured_bytes: u64,
    /// Why checkpoints stopped, if they did.
    pub stopped_because: Option<String>,
}

/// A program under the monitor.
pub struct Monitor {
    tracee: Tracee,
    capturer: Option<Capturer>,
    control: Option<Control>,
    opts: MonitorOptions,
    summary: Summary,
}

/// The slice the program runs between looks at the control socket.
const POLL: Duration = Duration::from_millis(20);

impl Monitor {
    pub fn new(tracee: Tracee, capturer: Capturer, opts: MonitorOptions) -> Result<Monitor> {
        let control = if opts.control {
            Some(Control::listen(tracee.pid(), capturer.pool_path())?)
        } else {
            None
        };
        Ok(Monitor {
            tracee,
            capturer: Some(capturer),
            control,
            opts,
            summary: Summary::default(),
        })
    }

    pub fn pid(&self) -> i32 {
        self.tracee.pid()
    }

    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Takes a checkpoint now (the program must be running or stopped under the monitor).
    /// `None` when none was taken: the program died meanwhile, or checkpoints stopped.
    pub fn checkpoint(&mut self) -> Result<Option<CheckpointReport>> {
        match self.try_checkpoint() {
            Err(RunError::Proc(ProcError::Exited { .. })) => Ok(None),
            Err(e @ RunError::Unsupported { .. }) => Err(e),
            Err(e) if program_gone(self.tracee.pid()) => {
                tracing::debug!("program died during a checkpoint: {e}");
                Ok(None)
            }
            r => r,
        }
    }

    fn try_checkpoint(&mut self) -> Result<Option<CheckpointReport>> {
        let Some(cap) = self.capturer.as_mut() else {
            return Ok(None);
        };
        let mut t0 = Instant::now();
        match self.tracee.stop_all() {
            Ok(()) => {}
            Err(ProcError::Exited { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        // Much new memory: register it, copy it while the program runs, then stop again for
        // what it wrote meanwhile.
        let (mut prestop, mut precopied) = (Duration::ZERO, 0);
        let captured = match cap.prepare(&self.tracee) {
            Ok(Some(pre)) => {
                prestop = t0.elapsed();
                self.tracee.resume_all()?;
                precopied = cap.precopy(pre);
                tracing::debug!(
                    mib = precopied >> 20,
                    "copied new memory while the program ran"
                );
                t0 = Instant::now();
                self.tracee.stop_all()?;
                cap.capture(&self.tracee, t0)
            }
            Ok(None) => cap.capture(&self.tracee, t0),
            Err(e) => Err(e),
        }
        .map(|mut c| {
            c.stats.stop += prestop;
            c.stats.precopied = precopied;
            c
        });
        // Resume whatever happened: the program must not stay stopped because of us.
        let resumed = self.tracee.resume_all();
        let pid = self.tracee.pid();
        let refused = matches!(captured, Err(RunError::Unsupported { .. }));
        if !refused && (captured.is_err() || resumed.is_err()) && program_gone(pid) {
            // Killed while stopped (SIGKILL cannot wait for us): no checkpoint; the loop
            // collects the exit.
            tracing::debug!(pid, "program died during a checkpoint");
            return Ok(None);
        }
        match resumed {
            Ok(()) | Err(ProcError::Exited { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let captured = match captured {
            Ok(c) => c,
            Err(RunError::Unsupported { what }) => {
                tracing::warn!(
                    "kioku: no more checkpoints: {what}; the program runs on, and the last checkpoint (epoch {}) stays restorable",
                    cap.engine().epoch()
                );
                self.summary.stopped_because = Some(what);
                self.capturer = None;
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let report = cap.commit(captured)?;
        let s = &mut self.summary;
        s.checkpoints += 1;
        s.last_epoch = report.epoch;
        s.stop_ms.push(report.capture.stop.as_secs_f64() * 1e3);
        s.durable_ms.push(report.engine.total.as_secs_f64() * 1e3);
        s.copied_bytes +=
            report.capture.pages * kioku_track::page_size() as u64 + report.capture.precopied;
        s.captured_bytes = report.capture.captured_bytes;
        tracing::debug!(
            epoch = report.epoch,
            stop_ms = report.capture.stop.as_secs_f64() * 1e3,
            pages = report.capture.pages,
            "checkpoint"
        );
        Ok(Some(report))
    }

    /// Lets the program run for `d` without checkpoints; its exit if it ended.
    pub fn run_for(&mut self, d: Duration) -> Result<Option<Exit>> {
        match self.tracee.run_for(d)? {
            Some(exit) => self.ended(exit).map(Some),
            None => Ok(None),
        }
    }

    /// Runs the program to its end, checkpointing; returns how it ended.
    pub fn run(&mut self) -> Result<Exit> {
        let mut next = self.opts.interval.map(|i| Instant::now() + i);
        loop {
            let slice = match next {
                Some(n) => n.saturating_duration_since(Instant::now()).min(POLL),
                None => POLL,
            };
            match self.tracee.run_for(slice) {
                Ok(Some(exit)) | Err(ProcError::Exited { exit, .. }) => return self.ended(exit),
                Ok(None) => {}
                Err(e) => return Err(e.into()),
            }
            let requests: Vec<Request> =
                self.control.as_ref().map(|c| c.poll()).unwrap_or_default();
            let due = next.is_some_and(|n| Instant::now() >= n);
            if due || !requests.is_empty() {
                let r = self.checkpoint();
                let answer = match &r {
                    Ok(Some(rep)) => serde_json::to_string(rep).unwrap_or_default(),
                    Ok(None) => match &self.summary.stopped_because {
                        Some(w) => format!("error: checkpoints stopped: {w}"),
                        None => "error: the program ended".into(),
                    },
                    Err(e) => format!("error: {e}"),
                };
                for q in requests {
                    q.answer(&answer);
                }
                r?;
                if let (Some(i), true) = (self.opts.interval, due) {
                    next = Some(Instant::now() + i);
                }
            }
        }
    }

    /// A program that exited is finished; one killed by a signal crashed, and its last
    /// checkpoint is what a restore resumes.
    fn ended(&mut self, exit: Exit) -> Result<Exit> {
        if let Some(cap) = self.capturer.as_mut() {
            match exit {
                Exit::Code(_) => cap.finish(exit.to_string())?,
                Exit::Signal { .. } => tracing::warn!(
                    "kioku: the program was {exit}; `kioku restore --pool {}` resumes it from its last checkpoint (epoch {})",
                    cap.pool_path().display(),
                    cap.engine().epoch()
                ),
            }
        }
        Ok(exit)
    }
}

/// Whether process `pid` is dead or dying (gone, or a zombie waiting to be reaped). Asked
/// after a failure: a process killed while stopped makes ptrace fail before it shows as a
/// zombie, so this waits up to half a second for it to get there.
pub fn program_gone(pid: i32) -> bool {
    let dead = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => matches!(
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z') | Some('X') | None
        ),
    };
    for _ in 0..500 {
        if dead() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}
