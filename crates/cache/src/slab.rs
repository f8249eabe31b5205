//! memcached's slab allocator over one contiguous item memory: the memory is cut into slab pages,
//! each page belongs to one size class and is cut into equal chunks; one chunk holds one item
//! (header, key, value). Each class keeps a free list and an LRU list of its items. The links
//! are 32-bit item ids (page, slot) stored in the items themselves, not pointers, so the item
//! memory means the same wherever it is mapped (a checkpoint region restored at another time,
//! an item moved onto a huge page).
//!
//! Everything here runs under the store's lock; nothing is shared without it.

use std::ptr::NonNull;

/// An item's place: slab page in the high 16 bits, chunk slot in the low 16 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ItemId(pub u32);

impl ItemId {
    /// No item (end of a list).
    pub const NONE: ItemId = ItemId(u32::MAX);

    fn new(page: u32, slot: u32) -> Self {
        ItemId(page << 16 | slot)
    }

    /// The slab page.
    pub fn page(self) -> u32 {
        self.0 >> 16
    }

    /// The chunk within the page.
    pub fn slot(self) -> u32 {
        self.0 & 0xffff
    }
}

/// The header every item starts with (48 bytes; key then value follow).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Header {
    /// LRU neighbour towards the head (more recent).
    pub prev: ItemId,
    /// LRU neighbour towards the tail (older).
    pub next: ItemId,
    /// The cas unique.
    pub cas: u64,
    /// Absolute expiry (Unix seconds), 0 = never.
    pub exptime: i64,
    /// Last access (Unix seconds).
    pub atime: i64,
    /// The client's flags.
    pub flags: u32,
    /// Value length.
    pub nbytes: u32,
    /// Key length.
    pub nkey: u8,
    /// Size class.
    pub class: u8,
    /// [`LINKED`], [`FETCHED`], [`STALE`], [`WON`], [`ACTIVE`].
    pub state: u8,
    /// Zero.
    pub pad: u8,
    /// Zero.
    pub pad2: u32,
}

/// The item is in the index and its class's LRU.
pub const LINKED: u8 = 1;
/// The item was read since it was stored.
pub const FETCHED: u8 = 2;
/// The item was invalidated (meta `I`): served with `X`, replaceable by the first `W` winner.
pub const STALE: u8 = 4;
/// A client was handed the right to recache it (meta `W`).
pub const WON: u8 = 8;
/// The item was read since it was last put at the head of its LRU: eviction gives it a second
/// chance (memcached's `ITEM_ACTIVE`).
pub const ACTIVE: u8 = 16;

/// Bytes of [`Header`].
pub const HEADER: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER == 48);

/// Smallest chunk (header plus 48 bytes of key and value, as memcached's `-n 48`).
const MIN_CHUNK: usize = HEADER + 48;
const CHUNK_ALIGN: usize = 8;

/// One class's LRU list as a checkpoint keeps it: its ends and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LruEnds {
    /// Most recently used item.
    pub head: ItemId,
    /// Least recently used item.
    pub tail: ItemId,
    /// Items on the list.
    pub items: u64,
}

/// What [`Slabs::restore`] gives back.
#[derive(Debug)]
pub struct Restored {
    /// The allocator.
    pub slabs: Slabs,
    /// The linked items, in memory order.
    pub linked: Vec<ItemId>,
    /// Whether the LRU lists are the checkpoint's (else the caller links the items).
    pub lru_adopted: bool,
}

/// A chunk's links in [`Slabs::restore`]'s table when it holds no linked item (page 0xffff
/// never exists: at most 0xffff pages).
const NOT_LINKED: ItemId = ItemId(u32::MAX - 1);

/// Fault in `len` bytes of `mem` in one call (`MADV_POPULATE_READ`, Linux 5.14) rather than
/// page by page; where the kernel lacks it the scan faults them in as it goes.
fn populate_read(mem: Memory, len: usize) {
    const MADV_POPULATE_READ: libc::c_int = 22;
    if len == 0 {
        return;
    }
    // SAFETY: advice on memory we own; POPULATE_READ only faults pages in, changing no byte.
    let r = unsafe {
        libc::madvise(
            mem.base.as_ptr().cast(),
            len.min(mem.len),
            MADV_POPULATE_READ,
        )
    };
    if r != 0 {
        tracing::debug!("MADV_POPULATE_READ: {}", std::io::Error::last_os_error());
    }
}

/// One size class.
#[derive(Debug)]
pub struct Class {
    /// Chunk size in bytes.
    pub size: usize,
    /// Chunks per slab page.
    pub per_page: u32,
    /// Pages given to this class.
    pub pages: Vec<u32>,
    /// Free chunks.
    pub free: Vec<ItemId>,
    /// Most recently used item.
    pub head: ItemId,
    /// Least recently used item.
    pub tail: ItemId,
    /// Items linked.
    pub items: u64,
    /// Items evicted to make room.
    pub evictions: u64,
    /// Pages taken from this class to give to another.
    pub pages_moved_out: u64,
    /// Free chunks on hot-area pages (for hot items only, see [`Slabs::hot_alloc`]).
    pub hot_free: Vec<ItemId>,
}

/// The item memory: `len` bytes at `base`, owned elsewhere (an anonymous mapping or a
/// checkpoint region) and alive as long as the allocator.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// Start (slab-page aligned offsets are relative to it).
    pub base: NonNull<u8>,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: the memory is only touched through `Slabs`, which the store keeps behind its mutex.
unsafe impl Send for Memory {}

/// The slab allocator.
#[derive(Debug)]
pub struct Slabs {
    mem: Memory,
    page_size: usize,
    pages_total: u32,
    next_page: u32,
    /// Pages `[hot_first, pages_total)` are the hot area: huge pages that only hot items
    /// moved there by [`Slabs::hot_alloc`] fill (none unless [`Slabs::reserve_hot`]).
    hot_first: u32,
    next_hot: u32,
    /// The class of each page handed out (`u8::MAX`: none).
    page_class: Vec<u8>,
    /// The classes, smallest first.
    pub classes: Vec<Class>,
}

/// The slab page size for an item size limit: 1 MiB as memcached, or the next power of two
/// that holds the largest item (2 MiB for the default `-I 1m`, which is a huge page).
pub fn page_size_for(item_max: usize) -> usize {
    (item_max + HEADER + 256).next_power_of_two().max(1 << 20)
}

impl Slabs {
    /// An allocator over `mem`, with classes growing by `factor` from 96 bytes up to a whole
    /// page. `mem.len` should be a multiple of `page_size` (the rest is unused).
    pub fn new(mem: Memory, page_size: usize, factor: f64) -> Self {
        let mut sizes = Vec::new();
        let mut size = MIN_CHUNK;
        while size <= page_size / 2 && sizes.len() < 62 {
            sizes.push(size);
            let next = ((size as f64 * factor) as usize).div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN;
            size = next.max(size + CHUNK_ALIGN);
        }
        sizes.push(page_size);
        let classes = sizes
            .into_iter()
            .map(|size| Class {
                size,
                per_page: u32::try_from((page_size / size).min(0xffff)).expect("bounded"),
                pages: Vec::new(),
                free: Vec::new(),
                head: ItemId::NONE,
                tail: ItemId::NONE,
                items: 0,
                evictions: 0,
                pages_moved_out: 0,
                hot_free: Vec::new(),
            })
            .collect();
        let pages_total = u32::try_from((mem.len / page_size).min(0xffff)).expect("bounded");
        Slabs {
            mem,
            page_size,
            pages_total,
            next_page: 0,
            hot_first: pages_total,
            next_hot: pages_total,
            page_class: vec![u8::MAX; pages_total as usize],
            classes,
        }
    }

    /// Slabs over memory that already holds items (a restored checkpoint): `page_class` and
    /// `next_page` as [`Slabs::page_classes`] gave them, `lru` as [`Slabs::lru_ends`] gave
    /// them (none: relink by last access). Every chunk not holding a well-formed linked item
    /// goes on its class's free list; the linked items are returned in memory order, to be
    /// indexed by the store. The LRU lists are taken as the items' own links say when they
    /// check out (see [`Restored::lru_adopted`]). A page whose class is out of range is
    /// refused as damaged.
    ///
    /// Item memory is only read (a chunk that is neither linked nor cleared is cleared — never
    /// the case in a checkpoint's image), so that the restored pages stay clean for write
    /// tracking and the next checkpoint.
    pub fn restore(
        mem: Memory,
        page_size: usize,
        factor: f64,
        page_class: &[u8],
        next_page: u32,
        lru: Option<&[LruEnds]>,
    ) -> Result<Restored, &'static str> {
        let mut slabs = Slabs::new(mem, page_size, factor);
        if page_class.len() != slabs.page_class.len() || next_page > slabs.pages_total {
            return Err("the page table does not match the item memory");
        }
        populate_read(mem, next_page as usize * page_size);
        let mut linked = Vec::new();
        // Each linked item's LRU links, by chunk (`first_chunk[page] + slot`), so that the
        // lists are checked without walking item memory again.
        let mut links: Vec<(ItemId, ItemId)> = Vec::new();
        let mut first_chunk = Vec::with_capacity(next_page as usize);
        let mut free = Vec::new();
        for page in 0..next_page {
            let class = page_class[page as usize];
            if class as usize >= slabs.classes.len() {
                return Err("a slab page has no valid size class");
            }
            slabs.page_class[page as usize] = class;
            let per_page = slabs.classes[class as usize].per_page;
            slabs.classes[class as usize].pages.push(page);
            first_chunk.push(links.len());
            links.resize(links.len() + per_page as usize, (NOT_LINKED, NOT_LINKED));
            let first = links.len() - per_page as usize;
            free.clear();
            for slot in 0..per_page {
                let id = ItemId::new(page, slot);
                let h = slabs.header(id);
                if slabs.well_formed(id, class) {
                    linked.push(id);
                    // SAFETY: the chunk lies inside the page; nothing else runs yet.
                    links[first + slot as usize] = unsafe { ((*h).prev, (*h).next) };
                } else {
                    // SAFETY: as above.
                    unsafe {
                        if (*h).state != 0 {
                            (*h).state = 0;
                        }
                    }
                    free.push(id);
                }
            }
            // Reverse order: chunks are handed out from the page's start.
            slabs.classes[class as usize].free.extend(free.iter().rev());
        }
        slabs.next_page = next_page;
        let lru_adopted =
            lru.is_some_and(|ends| slabs.adopt_lru(ends, &linked, &links, &first_chunk));
        Ok(Restored {
            slabs,
            linked,
            lru_adopted,
        })
    }

    /// Whether `id`, a chunk of a page of `class`, holds a linked item whose header fits it.
    fn well_formed(&self, id: ItemId, class: u8) -> bool {
        let size = self.classes[class as usize].size;
        let h = self.header(id);
        // SAFETY: `id` lies inside a page handed out to `class`; the caller holds the lock (or
        // nothing else runs yet).
        unsafe {
            (*h).state & LINKED != 0
                && (*h).class == class
                && (*h).nkey > 0
                && HEADER + (*h).nkey as usize + (*h).nbytes as usize <= size
        }
    }

    /// Each class's LRU ends and length, for a checkpoint's metadata.
    pub fn lru_ends(&self) -> Vec<LruEnds> {
        self.classes
            .iter()
            .map(|c| LruEnds {
                head: c.head,
                tail: c.tail,
                items: c.items,
            })
            .collect()
    }

    /// Take the LRU lists of a restored checkpoint from its `ends` and the items' `links`
    /// (by chunk, [`Slabs::restore`]) — after checking them: each list walked from its head
    /// reaches its tail through linked items of its class with matching back links, and the
    /// lists hold exactly the `linked` items. Nothing is taken (false) if a check fails.
    fn adopt_lru(
        &mut self,
        ends: &[LruEnds],
        linked: &[ItemId],
        links: &[(ItemId, ItemId)],
        first_chunk: &[usize],
    ) -> bool {
        if ends.len() != self.classes.len() {
            return false;
        }
        let mut per_class = vec![0u64; self.classes.len()];
        for &id in linked {
            per_class[self.page_class[id.page() as usize] as usize] += 1;
        }
        for (class, e) in ends.iter().enumerate() {
            if e.items != per_class[class]
                || !self.lru_list_holds(class as u8, e, links, first_chunk)
            {
                return false;
            }
        }
        for (c, e) in self.classes.iter_mut().zip(ends) {
            (c.head, c.tail, c.items) = (e.head, e.tail, e.items);
        }
        true
    }

    /// Whether following `next` from `e.head` visits `e.items` distinct linked items of
    /// `class`, each pointing back at the one before, and ends at `e.tail`.
    fn lru_list_holds(
        &self,
        class: u8,
        e: &LruEnds,
        links: &[(ItemId, ItemId)],
        first_chunk: &[usize],
    ) -> bool {
        let (mut prev, mut at, mut n) = (ItemId::NONE, e.head, 0u64);
        while at != ItemId::NONE {
            n += 1;
            // More steps than items: a cycle.
            if n > e.items
                || at.page() >= self.next_page
                || self.page_class[at.page() as usize] != class
                || at.slot() >= self.classes[class as usize].per_page
            {
                return false;
            }
            let (back, next) = links[first_chunk[at.page() as usize] + at.slot() as usize];
            if back == NOT_LINKED || back != prev {
                return false;
            }
            (prev, at) = (at, next);
        }
        n == e.items && prev == e.tail
    }

    /// Each page's size class (`u8::MAX`: not handed out) and the next page to hand out: what
    /// [`Slabs::restore`] needs besides the memory.
    pub fn page_classes(&self) -> (&[u8], u32) {
        (&self.page_class, self.next_page)
    }

    /// The slab page size.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages the memory holds.
    pub fn pages_total(&self) -> u32 {
        self.pages_total
    }

    /// Pages handed out to classes so far.
    pub fn pages_used(&self) -> u32 {
        self.next_page + (self.next_hot - self.hot_first)
    }

    /// Keep the last `pages` slab pages as the hot area (before any page is handed out):
    /// chunks there are only handed out by [`Slabs::hot_alloc`]. Returns the area's first
    /// page; none is kept when that would leave no other page.
    pub fn reserve_hot(&mut self, pages: u32) -> Option<u32> {
        if self.next_page != 0 || pages == 0 || pages >= self.pages_total {
            return None;
        }
        self.hot_first = self.pages_total - pages;
        self.next_hot = self.hot_first;
        Some(self.hot_first)
    }

    /// Whether `page` lies in the hot area.
    pub fn is_hot_page(&self, page: u32) -> bool {
        page >= self.hot_first
    }

    /// Hot-area pages handed out, and the area's size in pages.
    pub fn hot_pages(&self) -> (u32, u32) {
        (
            self.next_hot - self.hot_first,
            self.pages_total - self.hot_first,
        )
    }

    /// The byte range of slab page `page` (relative to the memory's start).
    pub fn page_offset(&self, page: u32) -> usize {
        page as usize * self.page_size
    }

    /// A free chunk of `class` on a hot-area page: a free one, else a new page of the area
    /// (`prepare` is called with its offset first and may refuse it, say when the kernel has
    /// no huge page to back it). None when the area is used up.
    pub fn hot_alloc(&mut self, class: u8, prepare: impl FnOnce(usize) -> bool) -> Option<ItemId> {
        if let Some(id) = self.classes[class as usize].hot_free.pop() {
            return Some(id);
        }
        if self.next_hot == self.pages_total || !prepare(self.page_offset(self.next_hot)) {
            return None;
        }
        let page = self.next_hot;
        self.next_hot += 1;
        self.give_page(page, class);
        self.classes[class as usize].hot_free.pop()
    }

    /// The chunks of `page` that overlap bytes `[from, to)` of the page.
    pub fn slots_overlapping(&self, page: u32, from: usize, to: usize) -> Vec<ItemId> {
        let c = &self.classes[self.page_class[page as usize] as usize];
        let first = (from / c.size) as u32;
        let last = (to.saturating_sub(1) / c.size) as u32;
        (first..=last.min(c.per_page.saturating_sub(1)))
            .filter(|&slot| slot < c.per_page)
            .map(|slot| ItemId::new(page, slot))
            .collect()
    }

    /// The class of `page` (`u8::MAX`: not handed out).
    pub fn class_of_page(&self, page: u32) -> u8 {
        self.page_class[page as usize]
    }

    /// The memory.
    pub fn memory(&self) -> Memory {
        self.mem
    }

    /// The class whose chunks hold `total` bytes (header included), if any.
    pub fn class_for(&self, total: usize) -> Option<u8> {
        let i = self.classes.partition_point(|c| c.size < total);
        (i < self.classes.len()).then(|| u8::try_from(i).expect("at most 63 classes"))
    }

    /// The largest item (header, key and value) any class holds.
    pub fn largest_chunk(&self) -> usize {
        self.page_size
    }

    /// A free chunk of `class`, from its free list or a page not yet handed out — or, when
    /// there is none, a free chunk of the hot area (memory is full: better than failing).
    pub fn alloc(&mut self, class: u8) -> Option<ItemId> {
        if let Some(id) = self.classes[class as usize].free.pop() {
            return Some(id);
        }
        if self.next_page == self.hot_first {
            return self.classes[class as usize].hot_free.pop();
        }
        let page = self.next_page;
        self.next_page += 1;
        self.give_page(page, class);
        self.classes[class as usize].free.pop()
    }

    /// Put `page` (whose items are all unlinked) into `class`'s free lists.
    fn give_page(&mut self, page: u32, class: u8) {
        self.page_class[page as usize] = class;
        let hot = self.is_hot_page(page);
        let c = &mut self.classes[class as usize];
        c.pages.push(page);
        // Reverse order: chunks are handed out from the page's start.
        let chunks = (0..c.per_page).rev().map(|slot| ItemId::new(page, slot));
        if hot {
            c.hot_free.extend(chunks);
        } else {
            c.free.extend(chunks);
        }
    }

    /// Return an unlinked item's chunk to its class.
    pub fn free(&mut self, id: ItemId) {
        let class = self.page_class[id.page() as usize];
        // SAFETY: `id` came from `alloc`, so it addresses a chunk inside the memory; the store's
        // lock is held, so nobody else touches the header.
        unsafe { (*self.header(id)).state = 0 };
        if self.is_hot_page(id.page()) {
            self.classes[class as usize].hot_free.push(id);
        } else {
            self.classes[class as usize].free.push(id);
        }
    }

    /// The items linked on `page` (to be unlinked before [`Slabs::move_page`]).
    pub fn linked_on(&self, page: u32) -> Vec<ItemId> {
        let class = self.page_class[page as usize];
        let per_page = self.classes[class as usize].per_page;
        (0..per_page)
            .map(|slot| ItemId::new(page, slot))
            // SAFETY: the chunk lies inside the page, inside the memory; the lock is held.
            .filter(|&id| unsafe { (*self.header(id)).state } & LINKED != 0)
            .collect()
    }

    /// The class (other than `except`) with the most pages, if it has one to spare.
    pub fn richest_class(&self, except: u8) -> Option<u8> {
        (0..self.classes.len())
            .filter(|&c| c != except as usize && !self.classes[c].pages.is_empty())
            .max_by_key(|&c| self.classes[c].pages.len())
            .map(|c| u8::try_from(c).expect("at most 63 classes"))
    }

    /// The page of `from` to move: the one holding its LRU tail (its oldest items).
    pub fn page_to_move(&self, from: u8) -> Option<u32> {
        let c = &self.classes[from as usize];
        if c.tail != ItemId::NONE {
            return Some(c.tail.page());
        }
        c.pages.first().copied()
    }

    /// Move `page` (no item linked on it any more) from its class to `to`.
    pub fn move_page(&mut self, page: u32, to: u8) {
        let from = self.page_class[page as usize];
        let c = &mut self.classes[from as usize];
        c.pages.retain(|&p| p != page);
        c.free.retain(|id| id.page() != page);
        c.hot_free.retain(|id| id.page() != page);
        c.pages_moved_out += 1;
        self.give_page(page, to);
        // The new class's chunk boundaries fall elsewhere: clear each new header's state so that
        // no old value byte reads as LINKED.
        let per_page = self.classes[to as usize].per_page;
        for slot in 0..per_page {
            // SAFETY: the chunk lies inside the page; the lock is held.
            unsafe { (*self.header(ItemId::new(page, slot))).state = 0 };
        }
    }

    /// The header of `id`.
    pub fn header(&self, id: ItemId) -> *mut Header {
        self.chunk(id).cast()
    }

    /// The chunk of `id`.
    pub fn chunk(&self, id: ItemId) -> *mut u8 {
        let class = self.page_class[id.page() as usize] as usize;
        let offset =
            id.page() as usize * self.page_size + id.slot() as usize * self.classes[class].size;
        debug_assert!(offset + self.classes[class].size <= self.mem.len);
        // SAFETY: offset is inside the memory (page < pages_total, slot < per_page).
        unsafe { self.mem.base.as_ptr().add(offset) }
    }

    /// Link `id` at the head of its class's LRU.
    pub fn lru_push(&mut self, id: ItemId) {
        let h = self.header(id);
        // SAFETY: `id` is an allocated chunk; the lock is held, so these headers are ours.
        unsafe {
            let class = (*h).class as usize;
            let old_head = self.classes[class].head;
            (*h).prev = ItemId::NONE;
            (*h).next = old_head;
            if old_head != ItemId::NONE {
                (*self.header(old_head)).prev = id;
            } else {
                self.classes[class].tail = id;
            }
            self.classes[class].head = id;
            self.classes[class].items += 1;
        }
    }

    /// Put `to`, a copy of an item (links included), in the item's place on its LRU list.
    pub fn lru_take_place(&mut self, to: ItemId) {
        // SAFETY: both are chunks of the memory; the lock is held, so these headers are ours.
        unsafe {
            let h = *self.header(to);
            let class = h.class as usize;
            if h.prev != ItemId::NONE {
                (*self.header(h.prev)).next = to;
            } else {
                self.classes[class].head = to;
            }
            if h.next != ItemId::NONE {
                (*self.header(h.next)).prev = to;
            } else {
                self.classes[class].tail = to;
            }
        }
    }

    /// Unlink `id` from its class's LRU.
    pub fn lru_remove(&mut self, id: ItemId) {
        let h = self.header(id);
        // SAFETY: as in `lru_push`.
        unsafe {
            let class = (*h).class as usize;
            let (prev, next) = ((*h).prev, (*h).next);
            if prev != ItemId::NONE {
                (*self.header(prev)).next = next;
            } else {
                self.classes[class].head = next;
            }
            if next != ItemId::NONE {
                (*self.header(next)).prev = prev;
            } else {
                self.classes[class].tail = prev;
            }
            self.classes[class].items -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slabs(pages: usize) -> (Vec<u64>, Slabs) {
        let mut backing = vec![0u64; pages * (1 << 20) / 8];
        let mem = Memory {
            base: NonNull::new(backing.as_mut_ptr().cast()).unwrap(),
            len: backing.len() * 8,
        };
        (backing, Slabs::new(mem, 1 << 20, 1.25))
    }

    #[test]
    fn classes_grow_and_end_with_a_page() {
        let (_b, s) = slabs(2);
        assert_eq!(s.classes[0].size, 96);
        assert_eq!(s.classes.last().unwrap().size, 1 << 20);
        assert!(s.classes.windows(2).all(|w| w[0].size < w[1].size));
        assert_eq!(s.class_for(96), Some(0));
        assert_eq!(s.class_for(97), Some(1));
        assert_eq!(s.class_for((1 << 20) + 1), None);
    }

    #[test]
    fn pages_run_out_then_move() {
        let (_b, mut s) = slabs(2);
        let big = s.class_for(600_000).unwrap();
        let a = s.alloc(big).unwrap();
        let b = s.alloc(big).unwrap();
        assert_ne!(a.page(), b.page());
        assert_eq!(s.alloc(big), None);
        assert_eq!(s.alloc(0), None, "no page left for the small class");
        s.free(a);
        assert_eq!(s.richest_class(0), Some(big));
        s.move_page(a.page(), 0);
        assert_eq!(s.classes[0].free.len(), s.classes[0].per_page as usize);
        assert!(s.alloc(0).is_some());
    }
}
