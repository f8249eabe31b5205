//! The application's side of compaction: a callback that moves hot objects onto huge pages.
//!
//! The manager cannot move objects itself — only the application knows where its objects are
//! and who points at them (HPS: "the library cannot know the application's data structures").
//! It hands the callback the hot pages of one arena whose ranges are not worth promoting; the
//! callback moves what it wants (onto a [`crate::HugeMemory`] of its own, say), making sure no
//! reader can see a torn object, and marks the pages it vacated. The manager then forgets their
//! counts and charges the moved pages to its budget of huge pages.

use kioku_track::PageCount;

use crate::ArenaId;

/// What the callback is asked to move.
#[derive(Debug, Clone, Copy)]
pub struct CompactRequest<'a> {
    /// The arena the pages belong to (as registered).
    pub arena: ArenaId,
    /// The hot pages, in address order, with their counts.
    pub pages: &'a [PageCount],
    /// How many 4 KiB pages' worth of objects the budget of huge pages still allows to move
    /// (`usize::MAX` without a budget).
    pub allowance_pages: usize,
}

/// An error the callback reports; the manager logs it, counts it and goes on.
pub type CompactError = Box<dyn std::error::Error + Send + Sync>;

/// A compaction callback. `moved[i]` starts false; set it for each `req.pages[i]` whose hot
/// objects were moved away.
pub trait Compactor: Send {
    /// Moves hot objects of `req.pages` and marks the pages vacated.
    fn compact(&mut self, req: &CompactRequest<'_>, moved: &mut [bool])
        -> Result<(), CompactError>;
}

impl<F> Compactor for F
where
    F: FnMut(&CompactRequest<'_>, &mut [bool]) -> Result<(), CompactError> + Send,
{
    fn compact(
        &mut self,
        req: &CompactRequest<'_>,
        moved: &mut [bool],
    ) -> Result<(), CompactError> {
        self(req, moved)
    }
}
