//! kioku's pool: one container file format for all persistent state, with a crash-atomic
//! commit record, on one of four persistence media.
//!
//! A pool is a header, a table of named sections (page-aligned extents of the file) and a
//! commit record: two checksummed slots holding an epoch, the section table and up to 16
//! *roots* (u64 values the owner of the pool gives meaning to), plus one 8-byte index naming
//! the live slot, changed with a single store. `docs/pool-format.md` gives every byte.
//!
//! ```no_run
//! use kioku_pool::{CreateOptions, OpenOptions, Pool};
//! # fn main() -> Result<(), kioku_pool::PoolError> {
//! let path = std::path::Path::new("/tmp/example.pool");
//! let mut pool = Pool::create(path, &CreateOptions::new("example"))?;
//! let s = pool.create_section("counter", 4096, 0)?;
//! pool.bytes_mut(s.offset, 8).copy_from_slice(&42u64.to_le_bytes());
//! pool.persist(s.offset, 8)?;          // data first ...
//! pool.commit(&[1])?;                  // ... then the commit makes it the live state
//! drop(pool);
//! let pool = Pool::open(path, &OpenOptions::default())?;
//! assert_eq!(pool.roots(), &[1]);
//! # Ok(()) }
//! ```

pub mod error;
pub mod examine;
pub mod format;
pub mod inspect;
mod lock;
pub mod media;
mod pool;
pub mod procstat;

pub use error::{PoolError, Result};
pub use format::{Section, SECTION_SPARSE};
pub use media::{Medium, MediumChoice, MediumError, MediumKind};
pub use pool::{refuse_planted_link, system_page_size, CreateOptions, OpenOptions, Pool};
