//! What can go wrong in a group checkpoint, as one type; each message says what to do.

use kioku_ckpt::CkptError;

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error(transparent)]
    Ckpt(#[from] CkptError),
    #[error(transparent)]
    Ec(#[from] kioku_ec::EcError),
    #[error("MPI {what} failed: {detail}")]
    Mpi { what: &'static str, detail: String },
    #[error("configuration: {0}")]
    Config(String),
    #[error("{0}")]
    State(String),
    #[error("{0}")]
    Invalid(String),
    #[error("rank {rank}: {detail}")]
    Remote { rank: usize, detail: String },
    #[error("{lost} ranks of group {group} are lost ({ranks:?}), more than its {m} parity shards can rebuild; the checkpoint cannot be recovered (restore the pools of at least {need} of them, or start afresh by removing the pools)")]
    TooManyLost {
        group: usize,
        lost: usize,
        ranks: Vec<usize>,
        m: usize,
        need: usize,
    },
    #[error("ranks {ranks:?} are lost and no checkpoint at a level that rebuilds them exists (only local checkpoints were taken); start afresh by removing the pools")]
    NoRedundancy { ranks: Vec<usize> },
    #[error("the pools under {dir} belong to a job of {was} ranks; this job has {now}: restart with {was} ranks, or use another pool directory")]
    SizeChanged { dir: String, was: usize, now: usize },
    #[error("{path}: {detail}")]
    Pool { path: String, detail: String },
    #[error("pages fail their checksums and cannot be rebuilt ({}): {detail}; restore those pools from a copy, or remove all pools to start afresh", list_pages(.pages))]
    Unrecoverable {
        /// `(rank, what)` of the damaged pages (the first few).
        pages: Vec<(usize, String)>,
        detail: String,
    },
    #[error("the encoding of level {level} failed, so this checkpoint was not taken ({why}); the previous one stands")]
    FlightFailed { level: u8, why: String },
}

fn list_pages(pages: &[(usize, String)]) -> String {
    let mut v: Vec<String> = pages
        .iter()
        .take(4)
        .map(|(r, w)| format!("rank {r}: {w}"))
        .collect();
    if pages.len() > 4 {
        v.push(format!("and {} more", pages.len() - 4));
    }
    v.join("; ")
}

pub type Result<T> = std::result::Result<T, GroupError>;
