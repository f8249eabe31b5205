//! What can go wrong in the DSM, as one type; each message says what to do.

use kioku_mcapi::{McapiError, PeerLoss, TopologyError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DsmError {
    #[error("the DSM topology is unusable: {0}")]
    Topology(#[from] TopologyError),
    #[error("MCAPI failed during {what}: {source}")]
    Mcapi {
        what: &'static str,
        #[source]
        source: McapiError,
    },
    #[error(
        "node {node} was lost ({why}) during {what}: the job cannot continue without recovery"
    )]
    NodeLost {
        node: u32,
        why: PeerLoss,
        what: &'static str,
    },
    #[error("node {node} did not answer within {secs} s during {what}: is it running and calling the DSM?")]
    NoAnswer {
        node: u32,
        secs: u64,
        what: &'static str,
    },
    #[error("cannot reserve the shared range at {base:#x} ({bytes} bytes): {source}; set KIOKU_DSM_BASE to a free address")]
    Reserve {
        base: usize,
        bytes: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("the shared range is full: {want} more bytes asked, {left} left of {total}; raise KIOKU_DSM_RANGE_MIB")]
    OutOfSharedMemory {
        want: usize,
        left: usize,
        total: usize,
    },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("the nodes disagree: {0}")]
    Mismatch(String),
    #[error("a DSM node already runs in this process: call finalize first (one node per process)")]
    AlreadyRunning,
    #[error("malformed DSM message from node {from}: {what}; the peer runs another version or is hostile")]
    Protocol { from: u32, what: String },
    /// Not an error: a node was lost, a standby took over, and every node went back to
    /// checkpoint `epoch`. `Dsm::take_resume` gives this node's private state of then; go on
    /// from it.
    #[error("a node was lost and the job rolled back to checkpoint {epoch}: resume from the private state (take_resume)")]
    RolledBack { epoch: u64 },
    #[error("the job cannot recover from a node failure: {0}")]
    Unrecoverable(String),
    #[error("this standby was not needed: the job ended without taking it")]
    Dismissed,
    /// Inside the library only: a recovery interrupted the call.
    #[doc(hidden)]
    #[error("a recovery is under way")]
    Recovering,
}

impl DsmError {
    /// Whether a job with standbys recovers from this error (a node was lost, not left).
    pub(crate) fn starts_recovery(&self) -> bool {
        match self {
            DsmError::NodeLost { why, .. } => *why != PeerLoss::Finalized,
            DsmError::Recovering => true,
            _ => false,
        }
    }

    pub(crate) fn mcapi(what: &'static str, source: McapiError) -> DsmError {
        match source {
            McapiError::Transmission { node, why } => DsmError::NodeLost { node, why, what },
            source => DsmError::Mcapi { what, source },
        }
    }
}

pub type Result<T> = std::result::Result<T, DsmError>;
