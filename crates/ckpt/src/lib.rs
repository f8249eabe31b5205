//! kioku's checkpoint engine: NDCKPT's two contexts for memory regions that live in a pool.
//!
//! A program asks for named regions; it reads and writes them as ordinary memory — they are
//! pool pages mapped at the region's address, no copy on the hot path. `checkpoint(metadata)`
//! makes the regions and the metadata durable, writing back only pages written since the last
//! checkpoint; `recover` restores the last checkpoint after SIGKILL or power loss.
//!
//! ```no_run
//! use kioku_ckpt::{Engine, EngineOptions, RegionOptions};
//! # fn main() -> Result<(), kioku_ckpt::CkptError> {
//! let path = std::path::Path::new(".kioku/counter.pool");
//! let (mut engine, n) = if path.exists() {
//!     let (e, rec) = Engine::recover(path, &EngineOptions::default())?;
//!     (e, u64::from_le_bytes(rec.metadata.try_into().unwrap_or([0; 8])))
//! } else {
//!     let mut e = Engine::create(path, &EngineOptions::default())?;
//!     e.create_region("data", 1 << 20, RegionOptions::default())?;
//!     (e, 0)
//! };
//! let data = engine.region("data").unwrap();
//! // SAFETY: the region is mapped, 1 MiB long, and only this thread uses it.
//! let mem = unsafe { std::slice::from_raw_parts_mut(data.as_ptr(), data.len) };
//! for i in n..n + 10 {
//!     mem[(i % 1024) as usize] = i as u8;       // ordinary stores
//!     engine.checkpoint(&(i + 1).to_le_bytes())?; // durable when it returns
//! }
//! # Ok(()) }
//! ```

pub mod engine;
pub mod error;
pub mod inspect;
pub mod meta;
pub mod space;

pub use engine::{
    commit_state, commit_state_of, scan_pages, CheckpointStats, CommitState, Engine, EngineOptions,
    PageScan, Recovered, RegionInfo, RegionOptions, POOL_KIND,
};
pub use error::{CkptError, Result};
pub use space::{AddressSpace, MovableSelfSpace, SelfSpace};
