//! MCAPI 2.0, the Multicore Association's Multicore Communications API, between the processes
//! of a job: over lock-free rings in shared memory on one machine, and over authenticated TCP
//! between machines, with the same semantics on both (per-channel order, message priorities,
//! back-pressure, timeouts, and a peer's death reported as `MCAPI_ERR_TRANSMISSION` on the
//! calls and requests that involve it).
//!
//! The C API (`include/kioku_mcapi.h`, the standard's names) is in [`capi`]; Rust programs use
//! [`Node`]. A job's nodes share a [`Topology`]. See `docs/mcapi.md`.

pub(crate) mod auth;
pub mod capi;
mod clock;
mod engine;
mod error;
mod frame;
mod ids;
mod link;
mod node;
mod pool;
mod shm;
mod status;
mod tcp;
mod topology;

pub use engine::Completion;
pub use error::{McapiError, PeerLoss, Result};
pub use frame::{MAX_PAYLOAD, MAX_SLICES, MIN_PRIORITY};
pub use ids::{
    ChanKind, ChannelHandle, Direction, EndpointId, RequestId, MAX_NODE, MAX_PORT, PORT_ANY,
};
pub use node::{Node, PeerState};
pub use status::Status;
pub use topology::{Topology, TopologyError, TransportKind};

/// Every status code with its C name (for tests and tools).
pub use status::ALL as STATUS_CODES;

/// Sends `tracing` output to stderr when `KIOKU_LOG` is set (e.g. `KIOKU_LOG=debug`).
pub fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Some(filter) = std::env::var_os("KIOKU_LOG").filter(|v| !v.is_empty()) {
            let filter = tracing_subscriber::EnvFilter::new(filter.to_string_lossy());
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// The wire format (TCP handshake messages and frame headers), for tools, tests and fuzzers.
#[doc(hidden)]
pub mod wire {
    pub use crate::auth::{
        decode_verdict, encode_proof, random_bytes, Challenge, Hello, CHALLENGE_LEN, HELLO_LEN,
        VERDICT_LEN,
    };
    pub use crate::frame::{FrameError, Header, Kind, HEADER_LEN, MAX_PAYLOAD};
}
