//! The tracker's typed errors. Each message says what went wrong and what to do about it.

use std::io;

use crate::{BackendKind, Event};

/// Everything that can go wrong while creating a tracker, tracking a range or scanning.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    /// `userfaultfd(2)` could not be created at all.
    #[error(
        "cannot create a userfaultfd ({source}); set sysctl vm.unprivileged_userfaultfd=1, grant \
         CAP_SYS_PTRACE or read-write access to /dev/userfaultfd, or use KIOKU_TRACKER=mprotect"
    )]
    UffdUnavailable {
        /// The error of the last attempt (syscall or /dev/userfaultfd).
        source: io::Error,
    },

    /// The running kernel lacks a feature the backend needs.
    #[error(
        "the kernel lacks {feature} (needs Linux >= {since}); upgrade the kernel or use \
         KIOKU_TRACKER=mprotect for the calling process"
    )]
    MissingKernelFeature {
        /// Name of the missing facility, e.g. `UFFD_FEATURE_WP_ASYNC`.
        feature: &'static str,
        /// First Linux release that has it.
        since: &'static str,
    },

    /// Another process can only be tracked with the userfaultfd backend.
    #[error(
        "the {backend:?} backend cannot track another process (pid {pid}); use the \
         UffdPagemapScan backend (Linux >= 6.7 with userfaultfd WP_ASYNC)"
    )]
    RemoteUnsupported {
        /// The backend that was asked for.
        backend: BackendKind,
        /// The process that was to be tracked.
        pid: i32,
    },

    /// No backend can work here; `reason` says why the preferred one failed.
    #[error("no page-tracking backend works for process {pid}: {reason}")]
    NoBackend {
        /// The process that was to be tracked.
        pid: i32,
        /// Why the userfaultfd backend failed.
        reason: Box<TrackError>,
    },

    /// The backend asked for does not report this event.
    #[error(
        "the {backend:?} backend does not report {event:?} pages; written pages: UffdPagemapScan \
         or Mprotect, accessed pages: Refault or ProtNone"
    )]
    WrongEvent {
        /// The backend asked for.
        backend: BackendKind,
        /// The event asked for.
        event: Event,
    },

    /// The range cannot be sampled by the refault backend.
    #[error(
        "range {start:#x}..{end:#x} of process {pid} cannot be sampled by unmapping its pages: \
         {why}; use the ProtNone backend (calling process), or map the memory MAP_SHARED from a \
         memfd or tmpfs file"
    )]
    NotShared {
        /// Start of the offending part.
        start: usize,
        /// End of the offending part (exclusive).
        end: usize,
        /// The tracked process.
        pid: i32,
        /// What is wrong with it.
        why: &'static str,
    },

    /// The caller lacks the privilege to act on another process.
    #[error("not permitted to track process {pid}: needs {need}; run as root or as its owner with that capability")]
    PermissionDenied {
        /// The process.
        pid: i32,
        /// What is needed.
        need: &'static str,
    },

    /// The range is not uniformly readable (the protection probe restores one protection).
    #[error(
        "range {start:#x}..{end:#x} mixes protections or is not readable; track each part of one \
         protection separately"
    )]
    MixedProtection {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
    },

    /// `KIOKU_TRACKER` or `KIOKU_HOT_TRACKER` holds something unknown.
    #[error("{var}={value:?} is not understood; set it to {expected}")]
    InvalidEnv {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// The values understood.
        expected: &'static str,
    },

    /// The range handed to `track`/`untrack` is malformed.
    #[error(
        "range {start:#x}..{end:#x} is invalid ({reason}); pass a non-empty, page-aligned range"
    )]
    BadRange {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The range is not (entirely) mapped readable and writable in the tracked process.
    #[error(
        "range {start:#x}..{end:#x} is not entirely mapped in process {pid} (read-write, for the \
         mprotect backend); map it before tracking it"
    )]
    NotMapped {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
        /// The tracked process.
        pid: i32,
    },

    /// The range is already registered with another userfaultfd.
    #[error(
        "range {start:#x}..{end:#x} is already registered with another userfaultfd; untrack it \
         in the other tracker first"
    )]
    Busy {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
    },

    /// The range overlaps a range another mprotect tracker in this process tracks.
    #[error(
        "range {start:#x}..{end:#x} overlaps a range tracked by another mprotect tracker in this \
         process; untrack it there first"
    )]
    Overlap {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
    },

    /// The mprotect backend's fixed table of ranges is full.
    #[error(
        "the mprotect backend tracks at most {max} ranges per process; track fewer, larger \
         ranges or use the userfaultfd backend"
    )]
    TooManyRanges {
        /// The limit.
        max: usize,
    },

    /// Part of a tracked range lost its write-protect registration (it was unmapped and mapped
    /// again, or the userfaultfd holding it was closed).
    #[error(
        "pages in {start:#x}..{end:#x} are no longer write-tracked (remapped, or the userfaultfd \
         was closed); treat the range as entirely written, then untrack and track it again"
    )]
    NotRegistered {
        /// Start of the affected tracked range.
        start: usize,
        /// End of the affected tracked range.
        end: usize,
    },

    /// The userfaultfd does not act on the tracked process's address space.
    #[error(
        "the userfaultfd does not belong to process {pid}'s address space; take the target's own \
         userfaultfd with take_uffd_from(pid, fd)"
    )]
    WrongMm {
        /// The tracked process.
        pid: i32,
    },

    /// The descriptor handed in is not a userfaultfd.
    #[error("descriptor {fd} is not a userfaultfd ({what}); pass the target's userfaultfd")]
    NotUffd {
        /// The descriptor number, in the calling process.
        fd: i32,
        /// What it is instead.
        what: String,
    },

    /// The userfaultfd was already initialised without async write-protect.
    #[error(
        "the userfaultfd was initialised with features {features:#x}, without \
         UFFD_FEATURE_WP_ASYNC|UFFD_FEATURE_WP_UNPOPULATED; create it without calling UFFDIO_API \
         (the tracker does the handshake) or request both features"
    )]
    UffdNotWpAsync {
        /// The features it was initialised with.
        features: u64,
    },

    /// The tracked process has exited.
    #[error("process {pid} has exited; build a new tracker for the new process")]
    ProcessGone {
        /// The process.
        pid: i32,
    },

    /// A system call failed in a way not covered above.
    #[error("{what} failed: {source}; check permissions and that the kernel is Linux >= 6.7")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
}
