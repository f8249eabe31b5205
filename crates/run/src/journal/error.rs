//! Typed errors of the file journal, each a one-line message saying what to do.

use std::path::PathBuf;

use kioku_pool::PoolError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the pool already holds a file journal; open it instead of creating one")]
    Exists,
    #[error("the pool holds no file journal (it was made without one); restore cannot roll files back — run the program afresh")]
    Missing,
    #[error("the file journal in the pool is damaged ({detail}); the files the program wrote cannot be rolled back — restore them from a copy or run the program afresh")]
    Damaged { detail: String },
    #[error("files changed after checkpoint {since} were not all journaled ({reason}); a restore would mix memory of one moment with files of a later one — run the program afresh")]
    Incomplete { since: u64, reason: String },
    #[error("the file journal no longer holds what is needed to return the files to checkpoint {epoch} (checkpoint {committed} is newer); restore the newest checkpoint")]
    Discarded { epoch: u64, committed: u64 },
    #[error("cannot roll {path} back: {detail}; something outside the program changed it since the checkpoint — put the file back as it was, or run the program afresh")]
    FileChanged { path: PathBuf, detail: String },
    #[error("a restore of checkpoint {in_progress} was interrupted; finish it (restore that checkpoint) before restoring checkpoint {epoch}")]
    OtherRestoreInProgress { in_progress: u64, epoch: u64 },
}

impl JournalError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> JournalError {
        JournalError::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn changed(path: &std::path::Path, detail: impl Into<String>) -> JournalError {
        JournalError::FileChanged {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }
}

pub type Result<T> = std::result::Result<T, JournalError>;
