//! Group checkpoints for MPI programs (seed 001, digest §2): each rank's protected memory
//! lives in its own pool in NDCKPT's two contexts; what crosses the network is the XOR delta
//! of the pages written since a level's last commit, sent to the stripe's parity holders, who
//! fold it into Reed–Solomon parity (or a partner's copy) — in the background while the
//! program computes when MPI allows threads; a checkpoint is committed only when every rank
//! has prepared it; after a restart, up to `m` lost ranks per group, and any page that fails
//! its checksum, are rebuilt from the survivors.
//!
//! The C API (`include/kioku_group.h`) is in [`capi`]; MPI is reached through the small C shim
//! in `csrc/mpi_shim.c`. See `docs/group.md`.

pub mod capi;
pub mod config;
pub mod error;
mod flight;
pub mod group;
pub mod layout;
pub mod meta;
pub mod mpi;
pub mod pages;
pub mod plan;
mod recovery;
mod repair;
pub mod store;

pub use config::{AsyncMode, Config};
pub use error::{GroupError, Result};
pub use group::{
    CheckpointReport, FlightStatus, Group, RecoveryReport, ScrubReport, LOCAL, PARTNER, RS,
};
