//! Typed errors of process checkpoints, each a one-line message saying what to do.

use std::path::PathBuf;

use kioku_ckpt::CkptError;
use kioku_pool::PoolError;
use kioku_proc::ProcError;
use kioku_track::TrackError;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Ckpt(#[from] CkptError),
    #[error(transparent)]
    Proc(#[from] ProcError),
    #[error(transparent)]
    Track(#[from] TrackError),
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pool holds no process checkpoint ({detail}); it was written by another kind of kioku program — pass the pool `kioku run` made")]
    NotAProcessCheckpoint { detail: String },
    #[error("pool holds no checkpoint yet (the program was killed before its first checkpoint); run it again with `kioku run`")]
    NoCheckpoint,
    #[error("the program of this pool finished ({how}) after its last checkpoint; there is nothing to restore — remove the pool or run the program again")]
    Finished { how: String },
    #[error("{path} changed since the checkpoint ({what}); restoring would run different code — put the original file back or run the program afresh")]
    FileChanged { path: PathBuf, what: String },
    #[error("the kernel changed since the checkpoint ({what}); restore on the kernel that took it, or run the program afresh")]
    KernelChanged { what: String },
    #[error("cannot checkpoint this process: {what}")]
    Unsupported { what: String },
    /// A state that passes (data in flight no checkpoint can hold exactly): a later checkpoint
    /// may succeed.
    #[error(
        "cannot checkpoint this process at this instant: {what}; a later checkpoint may succeed"
    )]
    Unsettled { what: String },
    /// Something the restore had to recreate could not be (an address in use, a file gone).
    #[error("cannot bring back {what}; the checkpoint is untouched — remove the cause and restore again")]
    CannotRecreate { what: String },
    #[error(
        "the program was {how} while being restored; its checkpoint is untouched — restore again"
    )]
    DiedDuringRestore { how: String },
    /// A page of the checkpoint, checked as a lazy restore filled it in, is damaged in both
    /// contexts: the restored tree was killed rather than run on it.
    #[error("the checkpoint is damaged ({what}); the restored program was killed rather than run on wrong data — restore the pool from a copy")]
    DamagedCheckpoint { what: String },
    /// The process answering under a monitor's name is not that monitor.
    #[error("process {pid} (uid {uid}) answers for that monitor but is not it ({why}); its answer is refused — ask by another pid or by --pool, and find who holds the name (`ss -xlp`)")]
    Impostor { pid: i32, uid: u32, why: String },
    #[error("checkpoint image format version {found} is not supported by this kioku (it reads version {supported}); use the kioku that wrote it")]
    Version { found: u32, supported: u32 },
}

impl RunError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> RunError {
        RunError::Io {
            what: what.into(),
            source,
        }
    }
}

pub type Result<T> = std::result::Result<T, RunError>;
