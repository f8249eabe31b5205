//! Typed errors of the pool, each with a one-line message that says what to do.

use crate::media::MediumError;
use std::path::PathBuf;

/// Everything that can go wrong opening, creating or changing a pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{path}: no such pool; create it first (e.g. `kioku pool create {path}`)")]
    NotFound { path: PathBuf },
    #[error("{path}: a file already exists there; kioku never overwrites it — pick another path or remove it yourself")]
    Exists { path: PathBuf },
    #[error("{path}: a symbolic link in a directory other users can write; kioku does not follow it there (someone else may have planted it) — give the pool's real path")]
    Symlink { path: PathBuf },
    #[error("{path}: pool is in use by {}; stop that process or use another pool", holder_text(.pid))]
    Busy { path: PathBuf, pid: Option<u32> },
    #[error("{path}: not a kioku pool (bad magic); check the path")]
    NotAPool { path: PathBuf },
    #[error("{path}: pool format version {found} is not supported (this kioku reads version {supported}); use a matching kioku release")]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("{path}: truncated: {what} needs {needed} bytes but the file has {found}; restore the file from a copy")]
    Truncated {
        path: PathBuf,
        what: &'static str,
        needed: u64,
        found: u64,
    },
    #[error("{path}: header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}); the header is damaged — restore the file from a copy")]
    HeaderChecksum {
        path: PathBuf,
        stored: u32,
        computed: u32,
    },
    #[error(
        "{path}: header field '{field}' is invalid; the file is damaged or not written by kioku"
    )]
    HeaderInvalid { path: PathBuf, field: &'static str },
    #[error("{path}: pool page size is {pool} bytes but this system's is {system}; open it on a machine with {pool}-byte pages")]
    PageSizeMismatch {
        path: PathBuf,
        pool: u32,
        system: u32,
    },
    #[error("{path}: pool holds '{found}' state, not '{expected}'; point this command at a '{expected}' pool")]
    KindMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{path}: live commit slot {slot} is damaged ({detail}); the previous commit (epoch {previous_epoch}) is intact — reopen allowing rollback (OpenOptions::allow_rollback, KIOKU_RECOVER_ALLOW_ROLLBACK) to use it, losing the damaged commit")]
    LiveSlotDamaged {
        path: PathBuf,
        slot: usize,
        detail: String,
        previous_epoch: u64,
    },
    #[error("{path}: commit record damaged ({detail}); no intact commit is left — restore the file from a copy")]
    CommitDamaged { path: PathBuf, detail: String },
    #[error("section name '{name}' is invalid (1 to 32 bytes of UTF-8, no NUL)")]
    BadName { name: String },
    #[error("section '{name}' already exists")]
    SectionExists { name: String },
    #[error("no section named '{name}'")]
    NoSuchSection { name: String },
    #[error("the pool holds at most {max} sections; delete one first")]
    TooManySections { max: usize },
    #[error("a commit carries at most {max} roots, {given} given")]
    TooManyRoots { max: usize, given: usize },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Medium(#[from] MediumError),
}

fn holder_text(pid: &Option<u32>) -> String {
    match pid {
        Some(p) => format!("process {p}"),
        None => "another process (pid unknown)".to_string(),
    }
}

pub type Result<T> = std::result::Result<T, PoolError>;
