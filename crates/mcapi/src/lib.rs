//! MCAPI 2.0, the Multicore Association's Multicore Communications API, between the processes
//! of a job: over lock-free rings in shared memory on one machine, and over authenticated TCP
//! between machines, with the same semantics on both (per-channel order, message priorities,
//! back-pressure, timeouts, and a peer's death reported as `MCAPI_ERR_TRANSMISSION` on the
//! calls and requests that involve it).
//!
//! The C API (`include/kioku_mcapi.h`, the standard's names) is in [`capi`]; Rust programs use
//! [`Node`]. A job's nodes share a [`Topology`]. See `docs/mcapi.md`.

mod auth;
pub mod capi;
mod engine;
mod error;
mod frame;
mod ids;
mod link;
mod node;
mod shm;
mod status;
mod tcp;
mod topology;

pub use engine::Completion;
pub use error::{McapiError, PeerLoss, Result};
pub use frame::{MAX_PAYLOAD, MIN_PRIORITY};
pub use ids::{ChanKind, ChannelHandle, Direction, EndpointId, RequestId, MAX_NODE, MAX_PORT, PORT_ANY};
pub use node::{Node, PeerState};
pub use status::Status;
pub use topology::{Topology, TopologyError, TransportKind};

/// Every status code with its C name (for tests and tools).
pub use status::ALL as STATUS_CODES;
