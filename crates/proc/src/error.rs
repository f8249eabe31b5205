//! Typed errors of the process monitor, each a one-line message saying what to do.

use std::io;

use crate::tracee::Exit;

/// Everything that can go wrong while tracing a process.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The program could not be found or started.
    #[error("cannot start '{program}': {source}; check the path and that it is executable")]
    Spawn {
        /// The program asked for.
        program: String,
        /// What fork/exec reported.
        #[source]
        source: io::Error,
    },

    /// The new process ended (killed by someone) before it reached exec.
    #[error("'{program}' was {exit} before it started")]
    DiedBeforeExec {
        /// The program asked for.
        program: String,
        /// How it ended.
        exit: crate::tracee::Exit,
    },

    /// A ptrace request failed.
    #[error("ptrace {op} on thread {tid} failed: {source}; check kernel.yama.ptrace_scope, that no other debugger is attached, and that the thread still exists")]
    Ptrace {
        /// The request, e.g. `SEIZE`.
        op: &'static str,
        /// The thread it was made on.
        tid: i32,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// waitpid on a traced thread failed.
    #[error("waiting for thread {tid} failed: {source}; the thread must be traced by this very thread of the monitor")]
    Wait {
        /// The thread waited for.
        tid: i32,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// The traced process is gone.
    #[error("process {pid} has exited ({exit}); start it again")]
    Exited {
        /// The process.
        pid: i32,
        /// How it ended.
        exit: Exit,
    },

    /// An operation needs the thread in a ptrace-stop.
    #[error("thread {tid} is not stopped; call stop_all() first")]
    NotStopped {
        /// The thread.
        tid: i32,
    },

    /// The thread is not one of the traced process's threads.
    #[error("thread {tid} is not a traced thread of process {pid}; list them with threads()")]
    NoSuchThread {
        /// The process.
        pid: i32,
        /// The thread asked for.
        tid: i32,
    },

    /// A system call injected into the tracee returned an error.
    #[error("{name} injected into process {pid} failed: {source}")]
    Syscall {
        /// The call, e.g. `mmap`.
        name: &'static str,
        /// The process.
        pid: i32,
        /// The errno the call returned.
        #[source]
        source: io::Error,
    },

    /// The tree cannot be stopped now; try again shortly.
    #[error("cannot stop the process tree now: {what}; try again shortly")]
    Busy {
        /// Why.
        what: &'static str,
    },

    /// A pid namespace for the process tree could not be made or used.
    #[error("pid namespace: {what}: {source}; run as root, or allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0)")]
    Namespace {
        /// What was being done.
        what: String,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },

    /// A process sent SIGKILL did not end within the bound: stuck in the kernel (an
    /// uninterruptible sleep, e.g. on a hung network or FUSE file system).
    #[error("process {pid} ({what}) did not end within {secs} s of SIGKILL and is left behind; look at /proc/{pid}/stack and /proc/{pid}/wchan for what it waits on")]
    NotEnding {
        /// The process (as the monitor sees it).
        pid: i32,
        /// What it is, e.g. `a traced process`.
        what: &'static str,
        /// How long it was waited for.
        secs: u64,
    },

    /// The tracee stopped in a way injection cannot continue from.
    #[error("thread {tid} stopped unexpectedly during {what} (wait status {status:#x}); report this as a bug")]
    Unexpected {
        /// The thread.
        tid: i32,
        /// What was being done.
        what: &'static str,
        /// The raw wait status.
        status: i32,
    },

    /// Reading or writing the tracee's memory failed.
    #[error(
        "{op} of {len} bytes at {addr:#x} in process {pid} failed: {source}; is the range mapped?"
    )]
    Memory {
        /// `read` or `write`.
        op: &'static str,
        /// The process.
        pid: i32,
        /// First byte.
        addr: usize,
        /// Bytes.
        len: usize,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// A file under /proc could not be read.
    #[error("reading {path} failed: {source}; is /proc mounted and the process alive?")]
    Proc {
        /// The file.
        path: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// A line of /proc/PID/maps did not parse.
    #[error("cannot parse maps line {line:?}; the kernel's format is not understood")]
    MapsFormat {
        /// The offending line.
        line: String,
    },

    /// Saved thread state bytes are not usable.
    #[error("thread state is invalid ({detail}); it was not written by this version of kioku-proc or is damaged")]
    BadThreadState {
        /// What is wrong.
        detail: String,
    },

    /// Register state of one kind cannot be set on this machine.
    #[error("the FP/SIMD state saved ({saved} bytes, {kind}) does not fit this CPU ({here} bytes); restore on a machine with the same CPU features")]
    FpMismatch {
        /// Kind of the saved state.
        kind: &'static str,
        /// Its size.
        saved: usize,
        /// The size this CPU uses.
        here: usize,
    },
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, ProcError>;

impl ProcError {
    pub(crate) fn ptrace(op: &'static str, tid: i32, source: io::Error) -> Self {
        ProcError::Ptrace { op, tid, source }
    }

    /// The errno behind this error, when it is one the kernel returned.
    pub fn errno(&self) -> Option<i32> {
        match self {
            ProcError::Syscall { source, .. }
            | ProcError::Ptrace { source, .. }
            | ProcError::Wait { source, .. }
            | ProcError::Memory { source, .. }
            | ProcError::Proc { source, .. }
            | ProcError::Spawn { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
