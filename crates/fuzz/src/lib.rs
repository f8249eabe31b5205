//! Fuzz harnesses of every parser kioku runs on bytes others can write: pool files (header,
//! commit slots, section tables, checkpoint metadata), process images, the file journal's
//! records, `kioku ec`'s shard files, the control socket's request line, MCAPI's handshake
//! messages and frame headers, and kioku-cache's memcached protocol (text and meta commands).
//! Each harness takes arbitrary bytes, must never panic, hang or allocate without bound, and
//! checks what it can of the result.
//!
//! The same functions run under libFuzzer (`fuzz/`, `make fuzz`) and replay the committed
//! corpora and regressions in `make test` (tests/corpus.rs). Where a format carries checksums,
//! the harness can set them right after mutating (structure-aware), so the fuzzer gets past
//! them to the parsing behind them.

mod cache;
mod control;
mod ec;
mod journal;
mod mcapi;
mod pool;

pub use cache::cache_protocol;
pub use control::control_request;
pub use ec::ec_shards;
pub use journal::journal;
pub use mcapi::mcapi_wire;
pub use pool::{ckpt_meta, pool_image, process_image};

/// A harness: takes any bytes, panics only on a fault of kioku's.
pub type Harness = fn(&[u8]);

/// The harnesses by name (the fuzz/ binaries and the corpus directories use these names).
pub const TARGETS: &[(&str, Harness)] = &[
    ("pool_image", pool_image),
    ("ckpt_meta", ckpt_meta),
    ("process_image", process_image),
    ("journal", journal),
    ("control_request", control_request),
    ("mcapi_wire", mcapi_wire),
    ("ec_shards", ec_shards),
    ("cache_protocol", cache_protocol),
];
