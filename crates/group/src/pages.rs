//! Page-granular views of a rank's data: its regions' live memory (the engine's running
//! context, which the program writes) and their committed bytes (the valid checkpoint), with
//! the checksums the checkpoint recorded.

use crate::group::Engine;
use crate::meta::Table;

/// A region's memory: valid while the engine keeps the region mapped and the region is not
/// resized (callers take a new view after `resize_region`).
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    ptr: *mut u8,
    len: usize,
    page: usize,
}

impl Mem {
    pub fn of(engine: &Engine, name: &str, page: usize) -> Option<Mem> {
        let r = engine.region(name)?;
        Some(Mem {
            ptr: r.as_ptr(),
            len: r.len,
            page,
        })
    }

    pub fn pages(&self) -> u64 {
        (self.len / self.page) as u64
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the engine maps `len` bytes at `ptr` for as long as this view is used (see
        // the type's contract); no `&mut` to them is alive while this slice is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: as `bytes`; the group library is the only writer of its own regions during
        // a collective call (the program is inside it), and uses one slice at a time.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn page(&self, i: u64) -> Option<&[u8]> {
        let at = i as usize * self.page;
        self.bytes().get(at..at + self.page)
    }

    #[allow(clippy::mut_from_ref)]
    pub fn page_mut(&self, i: u64) -> Option<&mut [u8]> {
        let at = i as usize * self.page;
        self.bytes_mut().get_mut(at..at + self.page)
    }

    /// Bit `i` of the region read as a bitmap.
    pub fn bit(&self, i: u64) -> bool {
        self.bytes()
            .get(i as usize / 8)
            .is_some_and(|b| b & (1 << (i % 8)) != 0)
    }

    pub fn set_bit(&self, i: u64) {
        if let Some(b) = self.bytes_mut().get_mut(i as usize / 8) {
            *b |= 1 << (i % 8);
        }
    }

    /// Indexes of the set bits, ascending.
    pub fn set_bits(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for (w, chunk) in self.bytes().chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            let mut v = u64::from_le_bytes(word);
            while v != 0 {
                out.push(w as u64 * 64 + v.trailing_zeros() as u64);
                v &= v - 1;
            }
        }
        out
    }

    /// Clears every bit, writing only the words that have one set (so untouched pages stay
    /// clean for the page tracker).
    pub fn clear_bits(&self) {
        for chunk in self.bytes_mut().chunks_mut(8) {
            if chunk.iter().any(|&b| b != 0) {
                chunk.fill(0);
            }
        }
    }
}

/// Where each data page is, live and as last committed, with its committed checksum. Valid
/// while no region is created, resized or deleted, no checkpoint runs and the pool does not
/// grow (taken under the engine's lock, used before it is released).
pub(crate) struct DataView {
    page: usize,
    regions: Vec<ViewedRegion>,
}

/// One region of a [`DataView`].
struct ViewedRegion {
    name: String,
    /// First data page and pages.
    offset: u64,
    pages: u64,
    live: Mem,
    /// The committed bytes and checksums, if the region existed at the last checkpoint.
    committed: Option<(*const u8, usize)>,
    crcs: (*const u32, usize),
}

impl DataView {
    pub(crate) fn of(engine: &Engine, table: &Table, page: usize) -> DataView {
        let regions = table
            .regions
            .iter()
            .map(|e| {
                let name = crate::group::user_region_name(e.id);
                let live = Mem::of(engine, &name, page).expect("region of the table");
                let committed = engine.committed(&name).map(|b| (b.as_ptr(), b.len()));
                let crcs = engine
                    .page_checksums(&name)
                    .map_or((std::ptr::null(), 0), |c| (c.as_ptr(), c.len()));
                ViewedRegion {
                    name,
                    offset: e.offset,
                    pages: e.pages,
                    live,
                    committed,
                    crcs,
                }
            })
            .collect();
        DataView { page, regions }
    }

    fn find(&self, p: u64) -> Option<&ViewedRegion> {
        let i = self.regions.partition_point(|r| r.offset + r.pages <= p);
        self.regions.get(i).filter(|r| r.offset <= p)
    }

    /// The region and page index of data page `p`.
    pub(crate) fn locate(&self, p: u64) -> Option<(&str, u64)> {
        self.find(p).map(|r| (r.name.as_str(), p - r.offset))
    }

    /// Live bytes of data page `p` (`None` past the data space).
    pub(crate) fn live(&self, p: u64) -> Option<&[u8]> {
        let r = self.find(p)?;
        r.live.page(p - r.offset).map(|s| {
            // SAFETY: the page lies in a region the engine keeps mapped for this view's use
            // (see the type's contract); `Mem::page` already checked the bounds.
            unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) }
        })
    }

    /// Live bytes of data page `p`, writable (repair; the program is inside a collective call).
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn live_mut(&self, p: u64) -> Option<&mut [u8]> {
        let r = self.find(p)?;
        r.live.page_mut(p - r.offset)
    }

    /// Data page `p` as of the last checkpoint and its checksum (`None`: it did not exist
    /// then, so it was zero).
    pub(crate) fn committed(&self, p: u64) -> Option<(&[u8], u32)> {
        let r = self.find(p)?;
        let (ptr, len) = r.committed?;
        let i = (p - r.offset) as usize;
        let at = i * self.page;
        if i >= r.crcs.1 {
            return None;
        }
        // SAFETY: the engine's checksum table of the region, alive and unchanged during the
        // view's use (see the type's contract); `i` is in bounds.
        let crc = unsafe { *r.crcs.0.add(i) };
        (at + self.page <= len).then(|| {
            // SAFETY: `[ptr, ptr+len)` is the valid context's section in the pool mapping,
            // unchanged during the view's use (see the type's contract); `at + page <= len`
            // was checked.
            (
                unsafe { std::slice::from_raw_parts(ptr.add(at), self.page) },
                crc,
            )
        })
    }

    /// Data page `p` as of the last checkpoint: `Ok(None)` zero (it did not exist then),
    /// `Err(())` when it fails its checksum.
    pub(crate) fn committed_intact(&self, p: u64) -> std::result::Result<Option<&[u8]>, ()> {
        match self.committed(p) {
            None => Ok(None),
            Some((b, want)) if crc32c::crc32c(b) == want => Ok(Some(b)),
            Some(_) => Err(()),
        }
    }
}
