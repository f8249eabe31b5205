//! Huge pages that follow the application (HPS, on a stock kernel).
//!
//! Transparent huge pages promote whatever is mapped, hugetlbfs must be reserved up front, and
//! "enough of the 2 MiB range is used" never gives a huge page to one hot 4 KiB page in a cold
//! range. kioku tracks which pages are actually *accessed* (sampled by `kioku-track`'s
//! accessed-page tracker), tells the application, and lets it decide: promote a range that is
//! hot enough, or move its hot objects together onto a huge page.
//!
//! ```no_run
//! use kioku_hugepage::{ArenaId, HugeKind, HugeMemory, Manager};
//! # let (arena, len) = (std::ptr::null::<u8>(), 0usize);
//! let m = Manager::builder().build()?;
//! m.register(arena, len, ArenaId(0))?;          // memory to watch
//! let huge = HugeMemory::map(HugeKind::ThpAnon, 64 << 20)?; // where hot objects may go
//! m.set_compactor(Box::new(move |req: &kioku_hugepage::CompactRequest<'_>, moved: &mut [bool]| {
//!     // move the objects of req.pages onto `huge`, set moved[i] for each page vacated
//!     Ok(())
//! }));
//! m.enable()?;                                   // sample, notify, place; stops when settled
//! while let Some(n) = m.wait(None) {
//!     if n.settled { break; }
//! }
//! # Ok::<(), kioku_hugepage::HugeError>(())
//! ```
//!
//! See `docs/hugepage.md` for the guarantees, the policy and how it fails.

#![warn(missing_docs)]

mod compact;
mod error;
mod huge_memory;
mod manager;
mod notify;
mod pace;
mod policy;
mod promote;
mod smaps;

pub use compact::{CompactError, CompactRequest, Compactor};
pub use error::HugeError;
pub use huge_memory::{hugetlb_pages, HugeKind, HugeMemory};
pub use manager::{ArenaId, HotPage, Manager, ManagerBuilder, PlaceReport, Status};
pub use notify::Notice;
pub use policy::{Decision, Policy, RangeFacts, Why};
pub use promote::{
    collapse, huge_mapped_bytes, huge_mapped_bytes_of, huge_page_size, huge_ranges, stop_advising,
    CollapseFailure,
};
pub use smaps::{smaps_huge, SmapsHuge};

pub use kioku_track::{AccessOptions, AccessScan, BackendKind, PageCount, PageRange};
