//! kioku's software distributed shared memory: SCASH-FT (seed 004) over kioku's MCAPI.
//!
//! Nodes of an SPMD job share a range of addresses. Pages move between nodes on access
//! (detected by page protection), and consistency is kept at synchronisation points (barriers
//! and locks) by home-based lazy release consistency with twins and diffs. See `docs/dsm.md`.

pub mod capi;
mod diff;
mod error;
mod fault;
mod image;
mod node;
mod recovery;
mod region;
mod wire;

pub use error::{DsmError, Result};
pub use node::{Config, Distribution, Dsm, HeldImage, DEFAULT_BASE, DEFAULT_RANGE, MAX_PRIVATE};
