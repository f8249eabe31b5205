//! The huge-page manager's typed errors. Each message says what went wrong and what to do.

use std::io;

use kioku_track::TrackError;

/// Everything the manager, the promoter and the huge-memory allocator can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HugeError {
    /// The accessed-page tracker failed (bad range, no permission, process gone, ...).
    #[error(transparent)]
    Track(#[from] TrackError),

    /// A range handed to the manager is malformed.
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

    /// The range overlaps a registered arena.
    #[error(
        "range {start:#x}..{end:#x} overlaps an arena already registered; unregister it first"
    )]
    Overlap {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
    },

    /// No registered arena covers the range.
    #[error("range {start:#x}..{end:#x} is not part of a registered arena")]
    NotRegistered {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
    },

    /// hugetlb memory was asked for and the pool has too few free huge pages.
    #[error(
        "no hugetlb pages available for {bytes} bytes ({free} free of {total}); reserve some with \
         `sysctl vm.nr_hugepages=N` (as root) or use transparent huge pages (HugeKind::ThpAnon)"
    )]
    NoHugetlbPages {
        /// Bytes asked for.
        bytes: usize,
        /// Free hugetlb pages of the default size.
        free: u64,
        /// Configured hugetlb pages of the default size.
        total: u64,
    },

    /// The kernel would not back the memory with a huge page.
    #[error(
        "the kernel did not back {start:#x}..{end:#x} with huge pages ({why}); transparent huge \
         pages may be disabled (/sys/kernel/mm/transparent_hugepage/enabled = never) or memory \
         too fragmented"
    )]
    NotHuge {
        /// Start address.
        start: usize,
        /// End address (exclusive).
        end: usize,
        /// What was tried.
        why: String,
    },

    /// A parameter is out of its range.
    #[error("invalid setting: {0}")]
    InvalidSetting(String),

    /// The manager's thread is gone (it panicked); the manager cannot go on.
    #[error("the huge-page manager's thread stopped ({0}); drop the manager and create a new one")]
    ThreadGone(String),

    /// A system call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl HugeError {
    pub(crate) fn sys(what: &'static str) -> HugeError {
        HugeError::Sys {
            what,
            source: io::Error::last_os_error(),
        }
    }
}
