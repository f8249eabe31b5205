//! Group checkpoints for MPI programs (seed 001, digest §2): each rank's protected memory
//! lives in its own pool in NDCKPT's two contexts; what crosses the network is the XOR delta
//! of the pages written in the epoch, encoded by a pipeline along the ranks of a group into
//! Reed–Solomon parity held by the other members (or copied to a partner); a checkpoint is
//! committed only when every rank has prepared it; after a restart, up to `m` lost ranks per
//! group are rebuilt from the survivors.
//!
//! The C API (`include/kioku_group.h`) is in [`capi`]; MPI is reached through the small C shim
//! in `csrc/mpi_shim.c`. See `docs/group.md`.

pub mod capi;
pub mod config;
pub mod error;
pub mod group;
pub mod layout;
pub mod meta;
pub mod mpi;
pub mod pages;
pub mod plan;
mod recovery;

pub use config::Config;
pub use error::{GroupError, Result};
pub use group::{CheckpointReport, Group, RecoveryReport, LOCAL, PARTNER, RS};
