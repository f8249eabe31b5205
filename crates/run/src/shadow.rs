//! The monitor's own address space as the checkpoint engine sees it: each captured area of the
//! program has a region here (the running context, mapped in the monitor), into which the
//! monitor copies the pages the program wrote. The engine learns which pages those were from
//! the monitor (`Marks`), not from a tracker of its own.

use std::cell::RefCell;
use std::rc::Rc;

use kioku_ckpt::{AddressSpace, Result, SelfSpace};
use kioku_pool::Medium;

use kioku_track::{BackendKind, Event, PageRange, PageTracker, ScanStats, TrackError};

/// Pages the monitor wrote into the engine's regions since the last checkpoint.
#[derive(Clone, Debug, Default)]
pub struct Marks(Rc<RefCell<Vec<PageRange>>>);

impl Marks {
    /// Records `r` as written.
    pub fn add(&self, r: PageRange) {
        if !r.is_empty() {
            self.0.borrow_mut().push(r);
        }
    }

    /// The pages marked so far, sorted and merged.
    pub fn snapshot(&self) -> Vec<PageRange> {
        let mut v = self.0.borrow().clone();
        crate::sys::normalize(&mut v);
        v
    }
}

/// The engine's tracker: reports what the monitor marked.
#[derive(Debug)]
struct MarkTracker {
    marks: Marks,
    tracked: Vec<PageRange>,
}

impl PageTracker for MarkTracker {
    fn backend(&self) -> BackendKind {
        // The pages were found by the monitor's PAGEMAP_SCAN of the program.
        BackendKind::UffdPagemapScan
    }
    fn event(&self) -> Event {
        Event::Written
    }
    fn pid(&self) -> i32 {
        std::process::id() as i32
    }
    fn track(&mut self, range: PageRange) -> std::result::Result<(), TrackError> {
        self.tracked.push(range);
        Ok(())
    }
    fn untrack(&mut self, range: PageRange) -> std::result::Result<(), TrackError> {
        self.tracked
            .retain(|r| r.end <= range.start || r.start >= range.end);
        Ok(())
    }
    fn tracked(&self) -> &[PageRange] {
        &self.tracked
    }
    fn scan_into(
        &mut self,
        out: &mut Vec<PageRange>,
    ) -> std::result::Result<ScanStats, TrackError> {
        out.clear();
        out.append(&mut self.marks.0.borrow_mut());
        out.sort_unstable();
        let ps = kioku_track::page_size();
        Ok(ScanStats {
            ranges: out.len(),
            pages: out.iter().map(|r| r.len() / ps).sum(),
            syscalls: 0,
        })
    }
    fn peek_into(
        &mut self,
        out: &mut Vec<PageRange>,
    ) -> std::result::Result<ScanStats, TrackError> {
        out.clear();
        out.extend_from_slice(&self.marks.0.borrow());
        out.sort_unstable();
        Ok(ScanStats::default())
    }
}

/// The monitor process, with regions placed wherever the kernel likes (found by name).
#[derive(Debug, Default)]
pub struct ShadowSpace {
    marks: Marks,
}

impl ShadowSpace {
    pub fn new(marks: Marks) -> ShadowSpace {
        ShadowSpace { marks }
    }
}

impl AddressSpace for ShadowSpace {
    fn pid(&self) -> i32 {
        SelfSpace.pid()
    }
    fn reserve(&mut self, name: &str, addr: Option<usize>, len: usize) -> Result<usize> {
        SelfSpace.reserve(name, addr, len)
    }
    fn map_pool(&mut self, addr: usize, len: usize, medium: &dyn Medium, off: u64) -> Result<()> {
        SelfSpace.map_pool(addr, len, medium, off)
    }
    fn unmap_to_reserved(&mut self, addr: usize, len: usize) -> Result<()> {
        SelfSpace.unmap_to_reserved(addr, len)
    }
    fn release(&mut self, addr: usize, len: usize) -> Result<()> {
        SelfSpace.release(addr, len)
    }
    fn tracker(&mut self) -> Result<Box<dyn PageTracker>> {
        Ok(Box::new(MarkTracker {
            marks: self.marks.clone(),
            tracked: vec![],
        }))
    }
    fn relocatable(&self) -> bool {
        true
    }
    fn release_pages(&mut self, addr: usize, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: `[addr, addr+len)` is a shared mapping of the pool made by `map_pool` (the
        // engine passes its regions' ranges); dropping its page mappings keeps the bytes in the
        // pool file, and the next access maps them again.
        let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        if rc != 0 {
            return Err(kioku_ckpt::CkptError::Os {
                what: "madvise(MADV_DONTNEED) of the shadow",
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}
