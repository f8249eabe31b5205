//! kioku-ec: systematic Reed–Solomon erasure coding over GF(2^8) for checkpoints.
//!
//! * [`Codec`] encodes `k` data shards into `m` parity shards with a Cauchy matrix (MDS
//!   for every `k + m <= 256`) and decodes any `k` survivors back to all `k + m`.
//! * Delta updates ([`Codec::update`], [`Codec::update_delta`]) patch parity in place from
//!   the XOR of old and new data, for a byte range only: RS is linear, so
//!   `parity_j ^= C[j][i] * (new_i ^ old_i)`.
//! * Pipelined accumulation ([`Codec::accumulate`], [`Codec::accumulate_row`]) adds one
//!   node's contribution to running parity buffers.
//! * [`stream`] encodes and decodes files of any size with bounded memory into
//!   self-describing shard files ([`shard`]).
//!
//! The arithmetic runs on the fastest [`Engine`] available: Intel ISA-L when linked (the
//! `isal` feature, on by default), else kioku's AVX2 kernels, else portable scalar code.
//! All engines produce identical bytes.
//!
//! ```
//! use kioku_ec::Codec;
//! let codec = Codec::new(4, 2).unwrap();
//! let data: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 1000]).collect();
//! let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
//! let parity = codec.encode_to_vec(&refs).unwrap();
//! let mut shards: Vec<Option<Vec<u8>>> =
//!     data.iter().chain(&parity).cloned().map(Some).collect();
//! shards[0] = None;
//! shards[5] = None;
//! codec.reconstruct_vecs(&mut shards).unwrap();
//! assert_eq!(shards[0].as_deref(), Some(&data[0][..]));
//! ```

mod codec;
mod engine;
mod error;
pub mod gf;
#[cfg(kioku_isal)]
mod isal;
mod portable;
pub mod shard;
pub mod stream;

pub use codec::{Codec, DEFAULT_DECODE_CACHE, MAX_SHARDS};
pub use engine::Engine;
pub use error::{EcError, Result};

/// Direct access to ISA-L for comparisons (tests and benchmarks): its own Cauchy matrix,
/// table expansion, encoder and inverter. Present only when ISA-L is linked.
#[cfg(kioku_isal)]
pub mod isal_raw {
    pub use crate::isal::{encode, gen_cauchy1_matrix, init_tables, invert_matrix, update};
}
