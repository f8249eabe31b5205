//! kioku-cache: a memcached-compatible cache server. It speaks memcached's text protocol and
//! the meta commands of memcached 1.6, keeps items in a slab allocator with size classes and
//! LRU eviction within the memory limit (`-m`), and serves them from a multi-threaded event
//! loop. With a checkpoint pool (`--pool`) it restarts warm after a crash. See docs/cache.md.

mod exec;
mod memory;
mod persist;
mod placement;
pub mod protocol;
mod server;
mod slab;
mod store;

pub use exec::{now, After, Cache, ConnCounters, Settings, VERSION};
pub use memory::Mapping;
pub use persist::{restore_store, CacheMeta, Checkpointer, Opened, PersistError, PersistStats};
pub use placement::{HotPlacement, PlacementError, PlacementOptions, PlacementStats};
pub use server::{Server, ServerError};
pub use slab::{page_size_for, ItemId, LruEnds, Memory, Restored, Slabs};
pub use store::{absolute_exptime, Counters, ItemView, Store, StoreError};
