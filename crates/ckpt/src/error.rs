//! Typed errors of the checkpoint engine, each a one-line message saying what to do.

use kioku_pool::{MediumError, PoolError};

#[derive(Debug, thiserror::Error)]
pub enum CkptError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Medium(#[from] MediumError),
    #[error(transparent)]
    Track(#[from] kioku_track::TrackError),
    #[error("region name '{name}' is invalid (1 to 63 bytes of UTF-8, no NUL)")]
    BadName { name: String },
    #[error("region '{name}' already exists")]
    RegionExists { name: String },
    #[error("no region named '{name}'")]
    NoSuchRegion { name: String },
    #[error("region '{name}': {len} bytes do not fit its address reservation of {reserve} bytes; create it with a larger reservation")]
    BeyondReservation {
        name: String,
        len: u64,
        reserve: u64,
    },
    #[error("region '{name}': address {addr:#x}+{len:#x} is taken in this process; free that range (or recover in a fresh process) and retry")]
    AddressTaken {
        name: String,
        addr: usize,
        len: usize,
    },
    #[error("{len} bytes is too large for a region (at most 2^56)")]
    TooLarge { len: u64 },
    #[error("{addr:#x}+{len:#x} is not whole pages inside the regions; store only into a region's pages")]
    NotInRegion { addr: usize, len: usize },
    #[error("address {addr:#x} is not page-aligned")]
    Misaligned { addr: usize },
    #[error("{what} failed: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("pool holds no checkpoint state of this engine ({detail}); was it written by another program?")]
    NotACheckpoint { detail: String },
    #[error("checkpoint metadata of epoch {epoch} is damaged in both contexts (checksum mismatch); restore the pool from a copy")]
    MetaDamaged { epoch: u64 },
    #[error("checkpoint of epoch {epoch} is damaged: region '{region}' page {page} fails its checksum in the valid context and the other context is not a complete copy; restore the pool from a copy")]
    ContextDamaged {
        epoch: u64,
        region: String,
        page: u64,
    },
    #[error("{detail}: call prepare, then finish, once each per checkpoint")]
    OutOfOrder { detail: &'static str },
}

pub type Result<T> = std::result::Result<T, CkptError>;

/// The last OS error as a `CkptError`.
pub(crate) fn os(what: &'static str) -> CkptError {
    CkptError::Os {
        what,
        source: std::io::Error::last_os_error(),
    }
}
