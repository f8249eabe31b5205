//! The item store: a hash index over the slab allocator's items, expiry, LRU eviction within
//! the memory limit, cas uniques and the counters `stats` reports. One mutex guards it all; a
//! command takes it once and copies what it returns, so no reader ever sees an item while it
//! is written, moved or reused.

use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use crate::slab::{Header, ItemId, Restored, Slabs, ACTIVE, FETCHED, HEADER, LINKED, STALE, WON};

/// Seconds an item stays where it is in its LRU however often it is read (memcached's
/// `ITEM_UPDATE_INTERVAL`).
pub const BUMP_INTERVAL: i64 = 60;
/// Items read since they were last bumped that eviction moves back to the head before it
/// evicts the tail anyway.
const SECOND_CHANCES: usize = 5;

/// Why a value could not be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Key and value do not fit the largest slab class.
    #[error("object too large for cache; raise -I or store a smaller value")]
    TooLarge,
    /// Nothing can be evicted (`-M`, or every page is needed by items of other classes).
    #[error("out of memory storing object; raise -m, or allow evictions (drop -M)")]
    OutOfMemory,
}

/// Counters for `stats`, kept under the store's lock.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub cmd_get: u64,
    pub cmd_set: u64,
    pub cmd_flush: u64,
    pub cmd_touch: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    pub get_expired: u64,
    pub get_flushed: u64,
    pub delete_hits: u64,
    pub delete_misses: u64,
    pub incr_hits: u64,
    pub incr_misses: u64,
    pub decr_hits: u64,
    pub decr_misses: u64,
    pub cas_hits: u64,
    pub cas_misses: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    pub touch_misses: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    pub slabs_moved: u64,
    /// Items moved onto the hot area's huge pages.
    pub hot_items_moved: u64,
    /// Hot 4 KiB pages whose items were all moved away.
    pub hot_pages_vacated: u64,
}

/// A copy of an item's header with borrowed key and value.
#[derive(Debug)]
pub struct ItemView<'a> {
    /// The header.
    pub header: Header,
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
}

/// The store (guarded by the caller's mutex).
pub struct Store {
    slabs: Slabs,
    index: HashTable<ItemId>,
    hasher: hashbrown::DefaultHashBuilder,
    next_cas: u64,
    evictions_allowed: bool,
    /// `flush_all` with a delay: every item present at this time is dropped then.
    flush_at: Option<i64>,
    /// Bytes of items linked (header, key, value).
    bytes: u64,
    /// The counters.
    pub counters: Counters,
}

impl Store {
    /// A store over `slabs`. `evictions_allowed = false` is memcached's `-M`.
    pub fn new(slabs: Slabs, evictions_allowed: bool) -> Self {
        Store {
            slabs,
            index: HashTable::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            next_cas: 1,
            evictions_allowed,
            flush_at: None,
            bytes: 0,
            counters: Counters::default(),
        }
    }

    /// A store over a restored checkpoint's slabs ([`Slabs::restore`]): its linked items are
    /// indexed; the LRU lists are the checkpoint's when the slabs took them, else the items
    /// are linked in order of last access; expired items are freed; cas uniques continue
    /// above `next_cas` and every restored item's. With the checkpoint's lists nothing but the
    /// expired items' chunks is written, so restored memory stays clean.
    pub fn rebuild(restored: Restored, evictions_allowed: bool, next_cas: u64, now: i64) -> Self {
        let Restored {
            slabs,
            mut linked,
            lru_adopted: adopted,
        } = restored;
        let mut store = Store::new(slabs, evictions_allowed);
        store.next_cas = next_cas.max(1);
        if !adopted {
            let mut by_atime: Vec<(i64, ItemId)> = linked
                .iter()
                .map(|&id| (store.header(id).atime, id))
                .collect();
            by_atime.sort_unstable();
            linked = by_atime.into_iter().map(|(_, id)| id).collect();
        }
        {
            let (slabs, hasher) = (&store.slabs, &store.hasher);
            store.index.reserve(linked.len(), |&other| {
                hasher.hash_one(item_key(slabs, other))
            });
        }
        for id in linked {
            let h = store.header(id);
            store.next_cas = store.next_cas.max(h.cas + 1);
            let keep = h.exptime == 0 || h.exptime > now;
            let (slabs, hasher) = (&store.slabs, &store.hasher);
            let key = item_key(slabs, id);
            let hash = hasher.hash_one(key);
            // A key is linked once in a checkpoint; should memory say otherwise, keep the newer.
            let mut replaced = None;
            let kept = match store.index.entry(
                hash,
                |&other| item_key(slabs, other) == key,
                |&other| hasher.hash_one(item_key(slabs, other)),
            ) {
                Entry::Vacant(v) if keep => {
                    v.insert(id);
                    true
                }
                Entry::Vacant(_) => false,
                Entry::Occupied(mut o) => {
                    let old = *o.get();
                    // SAFETY: `old` is an indexed item; the store is ours alone here.
                    if keep && unsafe { (*slabs.header(old)).cas } < h.cas {
                        *o.get_mut() = id;
                        replaced = Some(old);
                        true
                    } else {
                        false
                    }
                }
            };
            if let Some(old) = replaced {
                store.bytes -= store.total_len(old);
                store.drop_restored(old, true);
            }
            if !kept {
                store.drop_restored(id, adopted);
                continue;
            }
            if !adopted {
                store.slabs.lru_push(id);
            }
            store.bytes += store.total_len(id);
        }
        store
    }

    /// Header, key and value bytes of `id`.
    fn total_len(&self, id: ItemId) -> u64 {
        let h = self.header(id);
        (HEADER + h.nkey as usize + h.nbytes as usize) as u64
    }

    /// Free a restored item that is not indexed (expired, or a duplicate key), taking it off
    /// its LRU list if it is on one.
    fn drop_restored(&mut self, id: ItemId, on_lru: bool) {
        if on_lru {
            self.slabs.lru_remove(id);
        }
        self.slabs.free(id);
    }

    /// Compaction: move the items on the hot 4 KiB pages at `pages` (addresses, as the huge-page
    /// manager reports them) onto the hot area's huge pages ([`Slabs::hot_alloc`]; `prepare`
    /// backs a new hot-area page with a huge page, or refuses). `moved[i]` is set for each page
    /// left without a linked item. Stops when `allowance_pages` pages' worth of items moved or
    /// the hot area is full. Runs under the store's lock, like every reader: no reader sees an
    /// item half-moved, and the index and LRU point at the copy before the lock is released.
    pub fn compact_hot(
        &mut self,
        pages: &[usize],
        allowance_pages: usize,
        moved: &mut [bool],
        prepare: &mut dyn FnMut(usize) -> bool,
    ) {
        const SMALL: usize = 4096;
        let base = self.slabs.memory().base.as_ptr() as usize;
        let ps = self.slabs.page_size();
        let mut budget = allowance_pages.saturating_mul(SMALL);
        for (i, &addr) in pages.iter().enumerate() {
            let Some(off) = addr.checked_sub(base) else {
                continue;
            };
            let page = (off / ps) as u32;
            if page >= self.slabs.pages_total()
                || self.slabs.is_hot_page(page)
                || self.slabs.class_of_page(page) == u8::MAX
            {
                continue;
            }
            let within = off % ps;
            let mut all = true;
            for id in self.slabs.slots_overlapping(page, within, within + SMALL) {
                let h = self.header(id);
                if h.state & LINKED == 0 {
                    continue;
                }
                let len = HEADER + h.nkey as usize + h.nbytes as usize;
                if budget < len || !self.move_to_hot(id, len, prepare) {
                    all = false;
                    break;
                }
                budget -= len;
            }
            if !all {
                return;
            }
            moved[i] = true;
            self.counters.hot_pages_vacated += 1;
        }
    }

    /// Move linked item `id` (`len` bytes) to a hot-area chunk of its class.
    fn move_to_hot(
        &mut self,
        id: ItemId,
        len: usize,
        prepare: &mut dyn FnMut(usize) -> bool,
    ) -> bool {
        let class = self.header(id).class;
        let Some(to) = self.slabs.hot_alloc(class, prepare) else {
            return false;
        };
        // SAFETY: two distinct chunks of the same class (`len` fits both); the lock is held.
        unsafe { std::ptr::copy_nonoverlapping(self.slabs.chunk(id), self.slabs.chunk(to), len) };
        self.slabs.lru_take_place(to);
        let hash = self.hash(item_key(&self.slabs, to));
        if let Some(slot) = self.index.find_mut(hash, |&x| x == id) {
            *slot = to;
        }
        self.slabs.free(id);
        self.counters.hot_items_moved += 1;
        true
    }

    /// The next cas unique (for a checkpoint's metadata).
    pub fn next_cas(&self) -> u64 {
        self.next_cas
    }

    /// The allocator (for `stats slabs`).
    pub fn slabs(&self) -> &Slabs {
        &self.slabs
    }

    /// Items linked.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// No item linked.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of the items linked.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The largest value a key of `nkey` bytes can have.
    pub fn max_value(&self, nkey: usize) -> usize {
        self.slabs.largest_chunk() - HEADER - nkey
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The item of `key`, if present and live at `now` (expired items are dropped here).
    pub fn lookup(&mut self, key: &[u8], now: i64) -> Option<ItemId> {
        self.run_pending_flush(now);
        let hash = self.hash(key);
        let slabs = &self.slabs;
        let id = *self.index.find(hash, |&id| item_key(slabs, id) == key)?;
        let h = self.header(id);
        if h.exptime != 0 && h.exptime <= now {
            self.counters.get_expired += 1;
            if h.state & FETCHED == 0 {
                self.counters.expired_unfetched += 1;
            }
            self.unlink(id);
            return None;
        }
        Some(id)
    }

    /// A copy of `id`'s header.
    pub fn header(&self, id: ItemId) -> Header {
        // SAFETY: `id` is an allocated chunk (from the index or `alloc`); we hold `&self`, and
        // the store's mutex, so nothing writes it meanwhile.
        unsafe { *self.slabs.header(id) }
    }

    fn header_mut(&mut self, id: ItemId) -> &mut Header {
        // SAFETY: as in `header`, with `&mut self`: this is the only reference to the header.
        unsafe { &mut *self.slabs.header(id) }
    }

    /// The item's header, key and value.
    pub fn view(&self, id: ItemId) -> ItemView<'_> {
        let header = self.header(id);
        let (nkey, nbytes) = (header.nkey as usize, header.nbytes as usize);
        // SAFETY: the chunk holds header, key and value (`store` checked they fit its class);
        // the borrow of `self` keeps the store (and its lock) from changing them.
        let data =
            unsafe { std::slice::from_raw_parts(self.slabs.chunk(id).add(HEADER), nkey + nbytes) };
        ItemView {
            header,
            key: &data[..nkey],
            value: &data[nkey..],
        }
    }

    /// Mark `id` read and (unless `bump` is false) recently used: as memcached does, an item
    /// moves to the head of its LRU at most once per [`BUMP_INTERVAL`]; a read in between only
    /// marks it [`ACTIVE`], which spares it once when it reaches the tail ([`Store::alloc`]).
    /// Moving an item on every read costs writes to it and its neighbours (cache misses, and
    /// pages made dirty for the next checkpoint) on the hottest path; reading an item that is
    /// marked already writes nothing.
    pub fn fetched(&mut self, id: ItemId, now: i64, bump: bool) {
        let h = self.header_mut(id);
        if !bump {
            if h.state & FETCHED == 0 {
                h.state |= FETCHED;
            }
            return;
        }
        if now - h.atime < BUMP_INTERVAL {
            if h.state & (FETCHED | ACTIVE) != FETCHED | ACTIVE {
                h.state |= FETCHED | ACTIVE;
            }
            return;
        }
        h.state = (h.state | FETCHED) & !ACTIVE;
        h.atime = now;
        self.slabs.lru_remove(id);
        self.slabs.lru_push(id);
    }

    /// Set `id`'s absolute expiry.
    pub fn set_exptime(&mut self, id: ItemId, exptime: i64) {
        self.header_mut(id).exptime = exptime;
    }

    /// Set or clear state bits ([`STALE`], [`WON`]).
    pub fn set_state(&mut self, id: ItemId, set: u8, clear: u8) {
        let h = self.header_mut(id);
        h.state = (h.state | set) & !clear;
    }

    /// Give `id` a new cas unique (`explicit`, or the next one).
    pub fn new_cas(&mut self, id: ItemId, explicit: Option<u64>) -> u64 {
        let cas = explicit.unwrap_or_else(|| self.take_cas());
        self.header_mut(id).cas = cas;
        cas
    }

    fn take_cas(&mut self) -> u64 {
        let cas = self.next_cas;
        self.next_cas += 1;
        cas
    }

    /// Store a new version of `key` whose value is the concatenation of `parts`, replacing the
    /// current one. `cas`: the unique to give it (`None`: the next one). `key` and `parts` must
    /// not point into item memory (an append copies the old value first): making room may
    /// evict and reuse any chunk.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        key: &[u8],
        flags: u32,
        exptime: i64,
        parts: &[&[u8]],
        cas: Option<u64>,
        now: i64,
    ) -> Result<ItemId, StoreError> {
        let nbytes: usize = parts.iter().map(|p| p.len()).sum();
        let total = HEADER + key.len() + nbytes;
        let class = self.slabs.class_for(total).ok_or(StoreError::TooLarge)?;
        let id = self.alloc(class, now)?;
        let cas = cas.unwrap_or_else(|| self.take_cas());
        let header = Header {
            prev: ItemId::NONE,
            next: ItemId::NONE,
            cas,
            exptime,
            atime: now,
            flags,
            nbytes: u32::try_from(nbytes).map_err(|_| StoreError::TooLarge)?,
            nkey: u8::try_from(key.len()).map_err(|_| StoreError::TooLarge)?,
            class,
            state: LINKED,
            pad: 0,
            pad2: 0,
        };
        let chunk = self.slabs.chunk(id);
        // SAFETY: `id` is a free chunk of a class of at least `total` bytes; no one else can
        // reach it (not linked) and we hold the lock. `key` and `parts` lie outside item memory
        // (the contract above), so the copies do not overlap.
        unsafe {
            chunk.cast::<Header>().write(header);
            let mut at = chunk.add(HEADER);
            std::ptr::copy_nonoverlapping(key.as_ptr(), at, key.len());
            at = at.add(key.len());
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
        }
        if let Some(old) = self.lookup_raw(key) {
            self.unlink(old);
        }
        let hash = self.hash(key);
        let slabs = &self.slabs;
        let hasher = &self.hasher;
        self.index
            .insert_unique(hash, id, |&other| hasher.hash_one(item_key(slabs, other)));
        self.slabs.lru_push(id);
        self.bytes += total as u64;
        self.counters.total_items += 1;
        Ok(id)
    }

    fn lookup_raw(&self, key: &[u8]) -> Option<ItemId> {
        let slabs = &self.slabs;
        self.index
            .find(self.hash(key), |&id| item_key(slabs, id) == key)
            .copied()
    }

    /// Drop `id` from the index and its LRU and free its chunk.
    pub fn unlink(&mut self, id: ItemId) {
        let view = self.view(id);
        let total = HEADER + view.key.len() + view.value.len();
        let hash = self.hash(view.key);
        if let Ok(entry) = self.index.find_entry(hash, |&x| x == id) {
            entry.remove();
        }
        self.slabs.lru_remove(id);
        self.header_mut(id).state &= !(LINKED | STALE | WON);
        self.slabs.free(id);
        self.bytes -= total as u64;
    }

    /// A free chunk of `class`: free list, a new page, an expired or least recently used item
    /// of the class, or a page taken from the class with the most pages.
    fn alloc(&mut self, class: u8, now: i64) -> Result<ItemId, StoreError> {
        self.run_pending_flush(now);
        if let Some(id) = self.slabs.alloc(class) {
            return Ok(id);
        }
        // Expired items near the tail first (memcached looks at 5).
        let mut at = self.slabs.classes[class as usize].tail;
        for _ in 0..5 {
            if at == ItemId::NONE {
                break;
            }
            let h = self.header(at);
            if h.exptime != 0 && h.exptime <= now {
                self.counters.reclaimed += 1;
                self.unlink(at);
                return Ok(self.slabs.alloc(class).expect("a chunk was just freed"));
            }
            at = h.prev;
        }
        if !self.evictions_allowed {
            return Err(StoreError::OutOfMemory);
        }
        // The least recently used item, unless it was read since it was put at the head: then
        // it goes back to the head (once; memcached looks at 5 such items too).
        let mut tail = self.slabs.classes[class as usize].tail;
        for _ in 0..SECOND_CHANCES {
            if tail == ItemId::NONE || self.header(tail).state & ACTIVE == 0 {
                break;
            }
            let h = self.header_mut(tail);
            h.state &= !ACTIVE;
            h.atime = now;
            self.slabs.lru_remove(tail);
            self.slabs.lru_push(tail);
            tail = self.slabs.classes[class as usize].tail;
        }
        if tail != ItemId::NONE {
            self.evict(tail);
            return Ok(self.slabs.alloc(class).expect("a chunk was just freed"));
        }
        // The class has no item to evict: take the oldest page of the class with most pages.
        let from = self
            .slabs
            .richest_class(class)
            .ok_or(StoreError::OutOfMemory)?;
        let page = self
            .slabs
            .page_to_move(from)
            .ok_or(StoreError::OutOfMemory)?;
        for id in self.slabs.linked_on(page) {
            self.evict(id);
        }
        self.slabs.move_page(page, class);
        self.counters.slabs_moved += 1;
        self.slabs.alloc(class).ok_or(StoreError::OutOfMemory)
    }

    fn evict(&mut self, id: ItemId) {
        let h = self.header(id);
        self.counters.evictions += 1;
        self.slabs.classes[h.class as usize].evictions += 1;
        if h.state & FETCHED == 0 {
            self.counters.evicted_unfetched += 1;
        }
        self.unlink(id);
    }

    /// `flush_all`: drop every item now (`at <= now`) or at `at`.
    pub fn flush(&mut self, at: i64, now: i64) {
        self.flush_at = Some(at);
        self.run_pending_flush(now);
    }

    fn run_pending_flush(&mut self, now: i64) {
        match self.flush_at {
            Some(at) if at <= now => {}
            _ => return,
        }
        self.flush_at = None;
        let all: Vec<ItemId> = self.index.iter().copied().collect();
        self.counters.get_flushed += all.len() as u64;
        for id in all {
            self.unlink(id);
        }
    }
}

fn item_key(slabs: &Slabs, id: ItemId) -> &[u8] {
    // SAFETY: `id` is in the index, so its chunk holds a header and its key; the caller holds
    // the store (and its lock) borrowed, so nothing changes them.
    unsafe {
        let h = slabs.header(id);
        std::slice::from_raw_parts(h.cast::<u8>().add(HEADER), (*h).nkey as usize)
    }
}

/// memcached's expiry rule: 0 never; negative already expired; up to 30 days relative to `now`;
/// beyond, an absolute Unix time.
pub fn absolute_exptime(exptime: i64, now: i64) -> i64 {
    use crate::protocol::REALTIME_MAXDELTA;
    match exptime {
        0 => 0,
        e if e < 0 => now - 1,
        e if e > REALTIME_MAXDELTA => {
            if e <= now {
                now - 1
            } else {
                e
            }
        }
        e => now + e,
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;

    use super::*;
    use crate::slab::Memory;

    fn store(pages: usize, backing: &mut Vec<u64>) -> Store {
        backing.resize(pages * (1 << 20) / 8, 0);
        let mem = Memory {
            base: NonNull::new(backing.as_mut_ptr().cast()).unwrap(),
            len: backing.len() * 8,
        };
        Store::new(Slabs::new(mem, 1 << 20, 1.25), true)
    }

    #[test]
    fn store_lookup_replace_expire() {
        let mut b = Vec::new();
        let mut s = store(2, &mut b);
        let a = s.store(b"k", 3, 0, &[b"hello"], None, 100).unwrap();
        assert_eq!(s.lookup(b"k", 100), Some(a));
        assert_eq!(s.view(a).value, b"hello");
        let b2 = s.store(b"k", 4, 105, &[b"he", b"llo!"], None, 100).unwrap();
        assert_eq!(s.len(), 1);
        let v = s.view(b2);
        assert_eq!((v.value, v.header.flags), (&b"hello!"[..], 4));
        assert!(v.header.cas > 1);
        assert_eq!(s.lookup(b"k", 104), Some(b2));
        assert_eq!(s.lookup(b"k", 105), None, "expired at its time");
        assert!(s.is_empty() && s.bytes() == 0);
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut b = Vec::new();
        let mut s = store(1, &mut b);
        let value = vec![7u8; 500];
        let mut n = 0;
        // Fill the only page, then keep going: the oldest go first.
        while s.counters.evictions == 0 {
            let key = format!("key{n}");
            s.store(key.as_bytes(), 0, 0, &[&value], None, 1).unwrap();
            if n == 0 {
                let id = s.lookup(b"key0", 1).unwrap();
                s.fetched(id, 1, true);
            }
            n += 1;
            // Keep key0 hot.
            if let Some(id) = s.lookup(b"key0", 1) {
                s.fetched(id, 1, true);
            }
        }
        assert!(s.lookup(b"key0", 1).is_some(), "the hot item stays");
        assert!(s.lookup(b"key1", 1).is_none(), "the coldest went first");
        assert!(s.lookup(format!("key{}", n - 1).as_bytes(), 1).is_some());
    }

    #[test]
    fn reads_move_an_item_at_most_once_a_minute_and_spare_it_from_eviction_once() {
        let mut b = Vec::new();
        let mut s = store(1, &mut b);
        let value = vec![7u8; 500];
        for k in ["a", "b", "c"] {
            s.store(k.as_bytes(), 0, 0, &[&value], None, 100).unwrap();
        }
        let a = s.lookup(b"a", 100).unwrap();
        let class = s.header(a).class;
        let order = |s: &Store| lru_keys(s, class);
        // Read within the interval: marked, not moved, nothing else written.
        let a = s.lookup(b"a", 130).unwrap();
        s.fetched(a, 130, true);
        assert_eq!(order(&s), [b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]);
        assert_eq!(s.header(a).state & (FETCHED | ACTIVE), FETCHED | ACTIVE);
        assert_eq!(s.header(a).atime, 100);
        // Read once the interval passed: moved to the head, the mark spent.
        let b_ = s.lookup(b"b", 160).unwrap();
        s.fetched(b_, 160, true);
        assert_eq!(order(&s), [b"b".to_vec(), b"c".to_vec(), b"a".to_vec()]);
        assert_eq!(s.header(b_).state & ACTIVE, 0);
        assert_eq!(s.header(b_).atime, 160);
        // Fill the page: "a" (read, at the tail) is spared once, "c" goes first.
        let mut n = 0;
        while s.counters.evictions == 0 {
            s.store(format!("f{n}").as_bytes(), 0, 0, &[&value], None, 170)
                .unwrap();
            n += 1;
        }
        assert!(s.lookup(b"c", 170).is_none(), "the unread tail went");
        let a = s.lookup(b"a", 170).expect("the read item was spared");
        assert_eq!(s.header(a).state & ACTIVE, 0, "its second chance is spent");
        assert_eq!(order(&s)[0], format!("f{}", n - 1).into_bytes());
    }

    #[test]
    fn a_class_without_pages_takes_one_from_another() {
        let mut b = Vec::new();
        let mut s = store(2, &mut b);
        for i in 0..25_000 {
            s.store(format!("small{i}").as_bytes(), 0, 0, &[b"v"], None, 1)
                .unwrap();
        }
        let big = vec![1u8; 300_000];
        s.store(b"big", 0, 0, &[&big], None, 1).unwrap();
        let id = s.lookup(b"big", 1).unwrap();
        assert_eq!(s.view(id).value, &big[..]);
        assert!(s.counters.slabs_moved >= 1);
        // Every item still indexed is intact.
        for i in 0..25_000 {
            if let Some(id) = s.lookup(format!("small{i}").as_bytes(), 1) {
                assert_eq!(s.view(id).value, b"v");
            }
        }
    }

    /// The keys of `class`'s LRU list, most recent first.
    fn lru_keys(s: &Store, class: u8) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = s.slabs.classes[class as usize].head;
        while at != ItemId::NONE {
            out.push(s.view(at).key.to_vec());
            at = s.header(at).next;
        }
        out
    }

    /// A store with items of two classes, some read (LRU order differs from store order),
    /// one deleted, one expiring at 150; and its memory.
    fn filled(b: &mut Vec<u64>) -> Store {
        let mut s = store(4, b);
        for i in 0..300 {
            let v = vec![b'a' + (i % 26) as u8; if i % 3 == 0 { 900 } else { 40 }];
            let exp = if i == 7 { 150 } else { 0 };
            s.store(format!("k{i}").as_bytes(), i, exp, &[&v], None, 100)
                .unwrap();
        }
        for i in (0..300).step_by(7) {
            let id = s.lookup(format!("k{i}").as_bytes(), 101).unwrap();
            // Later than the bump interval: each read moves its item to the head.
            s.fetched(id, 100 + BUMP_INTERVAL + i as i64, true);
        }
        let id = s.lookup(b"k5", 101).unwrap();
        s.unlink(id);
        s
    }

    fn restore_copy(s: &Store, lru: bool) -> Restored {
        let (page_class, next_page) = s.slabs.page_classes();
        let ends = s.slabs.lru_ends();
        Slabs::restore(
            s.slabs.memory(),
            1 << 20,
            1.25,
            page_class,
            next_page,
            lru.then_some(&ends[..]),
        )
        .unwrap()
    }

    #[test]
    fn restore_takes_the_checkpoints_lru_lists_without_writing_memory() {
        let mut b = Vec::new();
        let s = filled(&mut b);
        let classes: Vec<u8> = (0..s.slabs.classes.len() as u8)
            .filter(|&c| s.slabs.classes[c as usize].items > 0)
            .collect();
        assert_eq!(classes.len(), 2);
        let want: Vec<_> = classes.iter().map(|&c| lru_keys(&s, c)).collect();
        let bytes = s.bytes();
        let image = b.clone();
        let restored = restore_copy(&s, true);
        assert!(restored.lru_adopted);
        assert_eq!(restored.linked.len(), 299);
        assert_eq!(b, image, "restoring wrote item memory");
        let r = Store::rebuild(restored, true, s.next_cas(), 120);
        assert_eq!(b, image, "indexing wrote item memory");
        assert_eq!((r.len(), r.bytes()), (299, bytes));
        let got: Vec<_> = classes.iter().map(|&c| lru_keys(&r, c)).collect();
        assert_eq!(got, want);
        assert!(r.next_cas() >= s.next_cas());
    }

    #[test]
    fn restore_relinks_by_last_access_when_the_lists_do_not_check_out() {
        let mut b = Vec::new();
        let s = filled(&mut b);
        let n = s.len();
        // Break one back link.
        let head = s.slabs.classes[0].head;
        let second = s.header(head).next;
        // SAFETY: `second` is a linked item of the test's store.
        unsafe { (*s.slabs.header(second)).prev = ItemId(12345) };
        let restored = restore_copy(&s, true);
        assert!(!restored.lru_adopted);
        let mut r = Store::rebuild(restored, true, s.next_cas(), 120);
        assert_eq!(r.len(), n);
        // Relinked oldest access last: the most recently read item heads its list.
        let hot = r.lookup(b"k294", 120).unwrap();
        let class = r.header(hot).class;
        assert_eq!(lru_keys(&r, class)[0], b"k294");
        // Without the checkpoint's lists (format 1): the same.
        let restored = restore_copy(&s, false);
        assert!(!restored.lru_adopted);
        // Expired by now: k7 (expiry 150) goes, and its chunk is free again.
        let mut r = Store::rebuild(restored, true, s.next_cas(), 200);
        assert_eq!(r.len(), n - 1);
        assert!(r.lookup(b"k7", 200).is_none());
        for i in (0..300).filter(|&i| i != 5 && i != 7) {
            let id = r.lookup(format!("k{i}").as_bytes(), 200).unwrap();
            let v = r.view(id);
            assert_eq!(v.header.flags, i);
            assert!(v.value.iter().all(|&c| c == b'a' + (i % 26) as u8));
        }
    }

    #[test]
    fn expiry_rules() {
        assert_eq!(absolute_exptime(0, 1000), 0);
        assert_eq!(absolute_exptime(-1, 1000), 999);
        assert_eq!(absolute_exptime(10, 1000), 1010);
        let abs = REALTIME + 5;
        assert_eq!(absolute_exptime(abs, REALTIME), abs);
        assert_eq!(absolute_exptime(REALTIME - 5, REALTIME), REALTIME - 1);
    }
    const REALTIME: i64 = 1_800_000_000;
}
