//! The group library's own sections of a rank's pool, beside the engine's regions (which hold
//! the protected data, in two contexts). Each has one copy; what makes a change to them safe
//! against a crash is said with each.
//!
//! | section | holds |
//! |---|---|
//! | `g.rec` | the record: the epoch whose data each kept level's parity encodes, and the state of the level's flight (two versions, two copies each) |
//! | `g.p<L>.<h>`, `g.c<L>.<h>` | the parity pages of the `h`-th stripe this rank holds at level `L`, and their checksums |
//! | `g.j<L>`, `g.ji<L>` | level `L`'s journal: the value, as of the level's last commit, of every data page written since; index `{page, checksum}` |
//! | `g.l<L>`, `g.li<L>` | the redo log of level `L`'s flight: new parity pages; index `{stripe, page, checksum}` |
//!
//! Checksums are CRC-32C. A parity checksum is stored XOR the checksum of a zero page, so that
//! the zeros of a new or grown section describe zero pages.

use crate::error::{GroupError, Result};
use kioku_pool::Pool;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The record's section.
pub const RECORD: &str = "g.rec";
const SLOT: usize = 2048;
const RECORD_MAGIC: &[u8; 8] = b"KGREC\0\0\x01";

fn crc(b: &[u8]) -> u32 {
    crc32c::crc32c(b)
}

fn io(path: &str, what: &str, e: kioku_pool::PoolError) -> GroupError {
    GroupError::Pool {
        path: path.to_string(),
        detail: format!("{what}: {e}"),
    }
}

/// A flight of a level that has begun to leave traces in the pool: its redo log is complete
/// (`logged`), and once every rank's was, committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlightMark {
    /// The group epoch whose data the new parity encodes.
    pub epoch: u64,
    /// Stripe pages of that encoding.
    pub stripe_pages: u64,
    /// Entries of the redo log and the checksum of its index.
    pub entries: u64,
    pub index_crc: u32,
    /// Every rank's log was complete, and this rank applies (or applied) its log.
    pub committed: bool,
}

/// One kept level, as this rank's pool holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelState {
    pub id: u8,
    /// The group epoch whose data the parity encodes (0: never encoded).
    pub epoch: u64,
    /// Stripe pages of that encoding.
    pub stripe_pages: u64,
    pub flight: Option<FlightMark>,
}

/// Which epoch each kept level's parity encodes. Written in place of the older of two
/// versions, two copies each: a crash while writing leaves the previous version whole, and a
/// damaged copy leaves the other.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub levels: Vec<LevelState>,
}

impl Record {
    pub fn level(&self, id: u8) -> Option<&LevelState> {
        self.levels.iter().find(|l| l.id == id)
    }

    pub fn level_mut(&mut self, id: u8) -> Option<&mut LevelState> {
        self.levels.iter_mut().find(|l| l.id == id)
    }

    /// The epoch level `id` encodes (0: none).
    pub fn epoch(&self, id: u8) -> u64 {
        self.level(id).map_or(0, |l| l.epoch)
    }

    /// Reads the newest intact copy (`None`: no intact copy, or no record section).
    pub fn read(pool: &Pool) -> Option<Record> {
        let s = pool.section(RECORD)?;
        if s.len < 4 * SLOT as u64 {
            return None;
        }
        let all = pool.bytes(s.offset, 4 * SLOT as u64);
        all.chunks(SLOT)
            .filter_map(|b| {
                if &b[..8] != RECORD_MAGIC {
                    return None;
                }
                let len = u32::from_le_bytes(b[16..20].try_into().ok()?) as usize;
                let want = u32::from_le_bytes(b[20..24].try_into().ok()?);
                let body = b.get(24..24 + len)?;
                let mut c = crc32c::crc32c(&b[8..20]);
                c = crc32c::crc32c_append(c, body);
                (c == want).then(|| serde_json::from_slice::<Record>(body).ok())?
            })
            .max_by_key(|r| r.seq)
    }

    /// Creates the record's section holding `self` (a new pool; committed with the pool's
    /// next commit).
    pub fn create(&mut self, pool: &mut Pool) -> Result<()> {
        let path = pool.path().display().to_string();
        pool.create_section(RECORD, 4 * SLOT as u64, 0)
            .map_err(|e| io(&path, "cannot create the group record", e))?;
        self.write(pool)
    }

    /// Writes `self` as the next version (its `seq` is advanced), durably.
    pub fn write(&mut self, pool: &mut Pool) -> Result<()> {
        self.seq += 1;
        let body = serde_json::to_vec(self).expect("record serialises");
        assert!(body.len() + 24 <= SLOT, "group record too large");
        let mut slot = vec![0u8; SLOT];
        slot[..8].copy_from_slice(RECORD_MAGIC);
        slot[8..16].copy_from_slice(&self.seq.to_le_bytes());
        slot[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
        let c = crc32c::crc32c_append(crc32c::crc32c(&slot[8..20]), &body);
        slot[20..24].copy_from_slice(&c.to_le_bytes());
        slot[24..24 + body.len()].copy_from_slice(&body);
        let path = pool.path().display().to_string();
        let off = pool
            .section(RECORD)
            .ok_or_else(|| GroupError::Pool {
                path: path.clone(),
                detail: "the group record section is missing".into(),
            })?
            .offset;
        let first = 2 * (self.seq % 2);
        for copy in first..first + 2 {
            let at = off + copy * SLOT as u64;
            pool.bytes_mut(at, SLOT as u64).copy_from_slice(&slot);
            pool.persist(at, SLOT as u64)
                .map_err(|e| io(&path, "cannot write the group record", e))?;
        }
        Ok(())
    }
}

/// Level `L`'s journal as a local checkpoint records it: `count` entries valid, written since
/// the level's commit of epoch `base`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalMark {
    pub level: u8,
    pub base: u64,
    pub count: u64,
}

fn journal_name(level: u8) -> String {
    format!("g.j{level}")
}
fn journal_index_name(level: u8) -> String {
    format!("g.ji{level}")
}
const JOURNAL_ENTRY: usize = 16;

/// Level `L`'s journal: for each data page written since the level's last commit (epoch
/// `base`), its value as of that commit. Entries are appended (page, then index entry, both
/// flushed) before the local checkpoint that records their count commits; entries past the
/// count are ignored, so a crash while appending loses nothing.
#[derive(Clone, Debug)]
pub struct Journal {
    pub level: u8,
    pub base: u64,
    slots: HashMap<u64, u32>,
    order: Vec<u64>,
}

impl Journal {
    pub fn new(level: u8, base: u64) -> Journal {
        Journal {
            level,
            base,
            slots: HashMap::new(),
            order: Vec::new(),
        }
    }

    pub fn mark(&self) -> JournalMark {
        JournalMark {
            level: self.level,
            base: self.base,
            count: self.order.len() as u64,
        }
    }

    pub fn count(&self) -> u64 {
        self.order.len() as u64
    }

    pub fn contains(&self, p: u64) -> bool {
        self.slots.contains_key(&p)
    }

    /// The journaled pages, ascending.
    pub fn pages(&self) -> Vec<u64> {
        let mut v = self.order.clone();
        v.sort_unstable();
        v
    }

    /// Reads the index of the `mark.count` entries `mark` records. `Err` says which entry is
    /// damaged (the journal cannot be used then: which page it was is unknown).
    pub fn load(
        pool: &Pool,
        page: usize,
        mark: &JournalMark,
    ) -> std::result::Result<Journal, String> {
        let mut j = Journal::new(mark.level, mark.base);
        if mark.count == 0 {
            return Ok(j);
        }
        let (Some(ix), Some(data)) = (
            pool.section(&journal_index_name(mark.level)),
            pool.section(&journal_name(mark.level)),
        ) else {
            return Err(format!("journal of level {} is missing", mark.level));
        };
        if ix.len < mark.count * JOURNAL_ENTRY as u64 || data.len < mark.count * page as u64 {
            return Err(format!("journal of level {} is truncated", mark.level));
        }
        let b = pool.bytes(ix.offset, mark.count * JOURNAL_ENTRY as u64);
        for (slot, e) in b.chunks(JOURNAL_ENTRY).enumerate() {
            let p = u64::from_le_bytes(e[..8].try_into().expect("8"));
            let ecrc = u32::from_le_bytes(e[12..16].try_into().expect("4"));
            if crc(&e[..12]) != ecrc || j.slots.insert(p, slot as u32).is_some() {
                return Err(format!(
                    "journal of level {} entry {slot} is damaged",
                    mark.level
                ));
            }
            j.order.push(p);
        }
        Ok(j)
    }

    /// The journaled value of page `p` and its checksum.
    pub fn page<'a>(&self, pool: &'a Pool, page: usize, p: u64) -> Option<(&'a [u8], u32)> {
        let slot = *self.slots.get(&p)? as u64;
        let ix = pool.section(&journal_index_name(self.level))?;
        let data = pool.section(&journal_name(self.level))?;
        let e = pool.bytes(
            ix.offset + slot * JOURNAL_ENTRY as u64,
            JOURNAL_ENTRY as u64,
        );
        let want = u32::from_le_bytes(e[8..12].try_into().expect("4"));
        Some((
            pool.bytes(data.offset + slot * page as u64, page as u64),
            want,
        ))
    }

    /// The journaled value of page `p`, if it verifies.
    pub fn intact<'a>(&self, pool: &'a Pool, page: usize, p: u64) -> Option<&'a [u8]> {
        self.page(pool, page, p)
            .filter(|(b, want)| crc(b) == *want)
            .map(|(b, _)| b)
    }

    /// Journaled pages whose value fails its checksum.
    pub fn damaged(&self, pool: &Pool, page: usize) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .order
            .iter()
            .copied()
            .filter(|&p| self.intact(pool, page, p).is_none())
            .collect();
        v.sort_unstable();
        v
    }

    /// Gives level `level`'s journal space back to the file system: the level committed the
    /// epoch its pages were written in, so no recovery reads them any more (a local
    /// checkpoint that still records them records an older base, which recovery ignores).
    /// `Ok(true)` when there was one to free.
    pub fn discard(pool: &mut Pool, level: u8) -> Result<bool> {
        let path = pool.path().display().to_string();
        let mut freed = false;
        for name in [journal_name(level), journal_index_name(level)] {
            if pool.section(&name).is_some() {
                pool.discard_section(&name)
                    .map_err(|e| io(&path, "cannot free a journal", e))?;
                freed = true;
            }
        }
        Ok(freed)
    }

    /// Makes room for `n` more entries (so that appending them does not grow the pool, which
    /// may move its mapping under views taken before).
    pub fn reserve(&self, pool: &mut Pool, page: usize, n: u64) -> Result<()> {
        let slots = self.order.len() as u64 + n;
        let path = pool.path().display().to_string();
        for (name, need) in [
            (journal_name(self.level), slots * page as u64),
            (journal_index_name(self.level), slots * JOURNAL_ENTRY as u64),
        ] {
            match pool.section(&name) {
                Some(s) if s.len >= need => {}
                // Exactly what this checkpoint journals: the journal is freed at the level's
                // next commit, so it never has to outgrow one interval's pages.
                Some(_) => {
                    pool.resize_section(&name, need)
                        .map_err(|e| io(&path, "cannot grow a journal", e))?;
                }
                None => {
                    pool.create_section(&name, need, 0)
                        .map_err(|e| io(&path, "cannot create a journal", e))?;
                }
            }
        }
        Ok(())
    }

    /// Appends page `p`'s value `bytes` whose checksum is `want` (the data's own checksum as of
    /// the level's commit: a value read damaged is journaled as damaged, never as fact).
    pub fn append(
        &mut self,
        pool: &mut Pool,
        page: usize,
        p: u64,
        bytes: &[u8],
        want: u32,
    ) -> Result<()> {
        debug_assert!(!self.contains(p));
        let slot = self.order.len() as u64;
        let path = pool.path().display().to_string();
        let grow = |pool: &mut Pool, name: &str, need: u64| -> Result<u64> {
            match pool.section(name) {
                Some(s) if s.len >= need => Ok(s.offset),
                Some(s) => {
                    let len = need.max(2 * s.len);
                    Ok(pool
                        .resize_section(name, len)
                        .map_err(|e| io(&path, "cannot grow a journal", e))?
                        .offset)
                }
                None => Ok(pool
                    .create_section(name, need.max(64 * page as u64), 0)
                    .map_err(|e| io(&path, "cannot create a journal", e))?
                    .offset),
            }
        };
        let data = grow(pool, &journal_name(self.level), (slot + 1) * page as u64)?;
        let ix = grow(
            pool,
            &journal_index_name(self.level),
            (slot + 1) * JOURNAL_ENTRY as u64,
        )?;
        let at = data + slot * page as u64;
        pool.bytes_mut(at, page as u64).copy_from_slice(bytes);
        let mut e = [0u8; JOURNAL_ENTRY];
        e[..8].copy_from_slice(&p.to_le_bytes());
        e[8..12].copy_from_slice(&want.to_le_bytes());
        let ecrc = crc(&e[..12]);
        e[12..].copy_from_slice(&ecrc.to_le_bytes());
        let eat = ix + slot * JOURNAL_ENTRY as u64;
        pool.bytes_mut(eat, JOURNAL_ENTRY as u64)
            .copy_from_slice(&e);
        pool.flush(at, page as u64)
            .and_then(|_| pool.flush(eat, JOURNAL_ENTRY as u64))
            .map_err(|e| io(&path, "cannot write a journal", e))?;
        self.slots.insert(p, slot as u32);
        self.order.push(p);
        Ok(())
    }

    /// Rewrites the value of journaled page `p` (repairing it; its checksum stays).
    pub fn rewrite(&self, pool: &mut Pool, page: usize, p: u64, bytes: &[u8]) -> Result<()> {
        let Some(&slot) = self.slots.get(&p) else {
            return Ok(());
        };
        let path = pool.path().display().to_string();
        let data = pool
            .section(&journal_name(self.level))
            .expect("journal with entries")
            .offset;
        let at = data + slot as u64 * page as u64;
        pool.bytes_mut(at, page as u64).copy_from_slice(bytes);
        pool.persist(at, page as u64)
            .map_err(|e| io(&path, "cannot repair a journal page", e))
    }
}

fn parity_name(level: u8, h: usize) -> String {
    format!("g.p{level}.{h}")
}
fn parity_crc_name(level: u8, h: usize) -> String {
    format!("g.c{level}.{h}")
}

/// The checksum of a zero page of `page` bytes.
pub fn zero_crc(page: usize) -> u32 {
    thread_local! {
        static Z: std::cell::RefCell<(usize, u32)> = const { std::cell::RefCell::new((0, 0)) };
    }
    Z.with(|z| {
        let mut z = z.borrow_mut();
        if z.0 != page {
            *z = (page, crc(&vec![0u8; page]));
        }
        z.1
    })
}

/// The parity a rank holds at one level: `held` stripes of `q` pages each, one copy. Pages
/// change only by applying a committed flight's redo log (each page and its checksum are
/// copied from the log: applying again after a crash gives the same bytes) or by repair.
pub struct Parity;

impl Parity {
    /// Makes the `held` stripes of level `level` at least `q` pages long (new pages zero).
    pub fn ensure(pool: &mut Pool, page: usize, level: u8, held: usize, q: u64) -> Result<()> {
        let path = pool.path().display().to_string();
        for h in 0..held {
            for (name, len) in [
                (parity_name(level, h), q.max(1) * page as u64),
                (parity_crc_name(level, h), q.max(1) * 4),
            ] {
                match pool.section(&name) {
                    Some(s) if s.len >= len => {}
                    Some(_) => {
                        pool.resize_section(&name, len)
                            .map_err(|e| io(&path, "cannot grow the parity", e))?;
                    }
                    None => {
                        pool.create_section(&name, len, 0)
                            .map_err(|e| io(&path, "cannot create the parity", e))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Page `q` of held stripe `h` and its checksum (`None` past the stripe).
    pub fn page(pool: &Pool, page: usize, level: u8, h: usize, q: u64) -> Option<(&[u8], u32)> {
        let s = pool.section(&parity_name(level, h))?;
        let c = pool.section(&parity_crc_name(level, h))?;
        if (q + 1) * page as u64 > s.len || (q + 1) * 4 > c.len {
            return None;
        }
        let stored = u32::from_le_bytes(pool.bytes(c.offset + q * 4, 4).try_into().expect("4"));
        Some((
            pool.bytes(s.offset + q * page as u64, page as u64),
            stored ^ zero_crc(page),
        ))
    }

    /// Page `q` of held stripe `h` if it verifies.
    pub fn intact(pool: &Pool, page: usize, level: u8, h: usize, q: u64) -> Option<&[u8]> {
        Self::page(pool, page, level, h, q)
            .filter(|(b, want)| crc(b) == *want)
            .map(|(b, _)| b)
    }

    /// Writes page `q` of held stripe `h` with checksum `sum` (flushed, not yet ordered).
    pub fn write(
        pool: &mut Pool,
        page: usize,
        level: u8,
        h: usize,
        q: u64,
        bytes: &[u8],
        sum: u32,
    ) -> Result<()> {
        let path = pool.path().display().to_string();
        let s = pool
            .section(&parity_name(level, h))
            .expect("parity sized before use")
            .offset;
        let c = pool
            .section(&parity_crc_name(level, h))
            .expect("parity sized before use")
            .offset;
        let at = s + q * page as u64;
        pool.bytes_mut(at, page as u64).copy_from_slice(bytes);
        pool.bytes_mut(c + q * 4, 4)
            .copy_from_slice(&(sum ^ zero_crc(page)).to_le_bytes());
        pool.flush(at, page as u64)
            .and_then(|_| pool.flush(c + q * 4, 4))
            .map_err(|e| io(&path, "cannot write parity", e))
    }

    /// Pages `(h, q)` of the first `q_total` of each held stripe that fail their checksum.
    pub fn damaged(
        pool: &Pool,
        page: usize,
        level: u8,
        held: usize,
        q_total: u64,
    ) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        for h in 0..held {
            for q in 0..q_total {
                match Self::page(pool, page, level, h, q) {
                    Some((b, want)) if crc(b) == want => {}
                    _ => out.push((h, q)),
                }
            }
        }
        out
    }
}

fn log_name(level: u8) -> String {
    format!("g.l{level}")
}
fn log_index_name(level: u8) -> String {
    format!("g.li{level}")
}
const LOG_ENTRY: usize = 16;

/// One entry of a redo log: the new value of page `q` of held stripe `h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub h: u32,
    pub q: u32,
    pub crc: u32,
    pub slot: u64,
}

/// The redo log of one flight of level `level`: new parity pages, appended while the flight
/// runs, applied once every rank's is complete and the flight committed, then discarded (its
/// space goes back to the file system).
///
/// It is made exactly as large as the flight can fill (`capacity` entries: the holder learns
/// from its contributors' page lists which stripe pages will change before any delta
/// arrives), so that it never takes more than the parity it replaces, and never grows while
/// the flight runs (growing may move the pool's mapping under views taken before).
pub struct Log {
    pub level: u8,
    pub entries: u64,
    pub capacity: u64,
}

impl Log {
    /// A log that takes nothing (a flight that failed before it could make one).
    pub fn none(level: u8) -> Log {
        Log {
            level,
            entries: 0,
            capacity: 0,
        }
    }

    /// Makes the log of a new flight of `level` with room for exactly `capacity` entries,
    /// discarding whatever an earlier flight left (a new flight starts only once the previous
    /// one's log was applied or forgotten). The sections join the pool's next commit, which
    /// must come before the record says the log is complete.
    pub fn create(pool: &mut Pool, page: usize, level: u8, capacity: u64) -> Result<Log> {
        Self::discard(pool, level)?;
        let path = pool.path().display().to_string();
        if capacity > 0 {
            for (name, len) in [
                (log_name(level), capacity * page as u64),
                (log_index_name(level), capacity * LOG_ENTRY as u64),
            ] {
                pool.create_section(&name, len, 0)
                    .map_err(|e| io(&path, "cannot create a parity log", e))?;
            }
        }
        Ok(Log {
            level,
            entries: 0,
            capacity,
        })
    }

    /// Gives level `level`'s log space back to the file system (its flight was applied or
    /// forgotten, and the record says so).
    pub fn discard(pool: &mut Pool, level: u8) -> Result<()> {
        let path = pool.path().display().to_string();
        for name in [log_name(level), log_index_name(level)] {
            if pool.section(&name).is_some() {
                pool.discard_section(&name)
                    .map_err(|e| io(&path, "cannot free a parity log", e))?;
            }
        }
        Ok(())
    }

    /// Appends the new value of page `q` of held stripe `h` (flushed, ordered by `finish`).
    pub fn append(
        &mut self,
        pool: &mut Pool,
        page: usize,
        h: u32,
        q: u32,
        bytes: &[u8],
    ) -> Result<()> {
        let slot = self.entries;
        let path = pool.path().display().to_string();
        if slot >= self.capacity {
            return Err(GroupError::Pool {
                path,
                detail: format!(
                    "the parity log of level {} is full ({} entries): more pages changed than the contributors announced (a bug in kioku)",
                    self.level, self.capacity
                ),
            });
        }
        let (Some(data), Some(ix)) = (
            pool.section(&log_name(self.level)).map(|s| s.offset),
            pool.section(&log_index_name(self.level)).map(|s| s.offset),
        ) else {
            return Err(GroupError::Pool {
                path,
                detail: format!("the parity log of level {} is missing", self.level),
            });
        };
        let at = data + slot * page as u64;
        pool.bytes_mut(at, page as u64).copy_from_slice(bytes);
        let mut e = [0u8; LOG_ENTRY];
        e[..4].copy_from_slice(&h.to_le_bytes());
        e[4..8].copy_from_slice(&q.to_le_bytes());
        e[8..12].copy_from_slice(&crc(bytes).to_le_bytes());
        let ecrc = crc(&e[..12]);
        e[12..].copy_from_slice(&ecrc.to_le_bytes());
        let eat = ix + slot * LOG_ENTRY as u64;
        pool.bytes_mut(eat, LOG_ENTRY as u64).copy_from_slice(&e);
        pool.flush(at, page as u64)
            .and_then(|_| pool.flush(eat, LOG_ENTRY as u64))
            .map_err(|e| io(&path, "cannot write a parity log", e))?;
        self.entries += 1;
        Ok(())
    }

    /// Orders everything appended and returns `(entries, index checksum)` for the record.
    pub fn finish(&self, pool: &Pool) -> Result<(u64, u32)> {
        let path = pool.path().display().to_string();
        pool.drain()
            .map_err(|e| io(&path, "cannot write a parity log", e))?;
        Ok((self.entries, index_crc(pool, self.level, self.entries)))
    }

    /// The entries of the log `mark` describes; `Err` when the index does not match it.
    pub fn load(
        pool: &Pool,
        level: u8,
        mark: &FlightMark,
    ) -> std::result::Result<Vec<LogEntry>, String> {
        if mark.entries == 0 {
            return Ok(vec![]);
        }
        let Some(ix) = pool.section(&log_index_name(level)) else {
            return Err(format!("the parity log of level {level} is missing"));
        };
        if ix.len < mark.entries * LOG_ENTRY as u64
            || pool.section(&log_name(level)).is_none()
            || index_crc(pool, level, mark.entries) != mark.index_crc
        {
            return Err(format!("the parity log of level {level} is damaged"));
        }
        Ok(pool
            .bytes(ix.offset, mark.entries * LOG_ENTRY as u64)
            .chunks(LOG_ENTRY)
            .enumerate()
            .map(|(slot, e)| LogEntry {
                h: u32::from_le_bytes(e[..4].try_into().expect("4")),
                q: u32::from_le_bytes(e[4..8].try_into().expect("4")),
                crc: u32::from_le_bytes(e[8..12].try_into().expect("4")),
                slot: slot as u64,
            })
            .collect())
    }

    /// The new value of an entry.
    pub fn page<'a>(pool: &'a Pool, page: usize, level: u8, e: &LogEntry) -> &'a [u8] {
        let s = pool.section(&log_name(level)).expect("log with entries");
        pool.bytes(s.offset + e.slot * page as u64, page as u64)
    }

    /// Copies every entry into the parity (with its checksum), durably; idempotent, so a
    /// crash part-way is repaired by applying again. `each` runs after every entry (fault
    /// injection).
    pub fn apply(
        pool: &mut Pool,
        page: usize,
        level: u8,
        entries: &[LogEntry],
        mut each: impl FnMut(usize),
    ) -> Result<()> {
        let mut buf = vec![0u8; page];
        for (n, e) in entries.iter().enumerate() {
            buf.copy_from_slice(Self::page(pool, page, level, e));
            Parity::write(pool, page, level, e.h as usize, e.q as u64, &buf, e.crc)?;
            each(n);
        }
        let path = pool.path().display().to_string();
        pool.drain()
            .map_err(|e| io(&path, "cannot apply a parity log", e))
    }
}

fn index_crc(pool: &Pool, level: u8, entries: u64) -> u32 {
    match pool.section(&log_index_name(level)) {
        Some(ix) if ix.len >= entries * LOG_ENTRY as u64 => {
            crc(pool.bytes(ix.offset, entries * LOG_ENTRY as u64))
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(dir: &std::path::Path) -> Pool {
        let mut c = kioku_pool::CreateOptions::new("kioku.test");
        c.medium = kioku_pool::MediumChoice::Exactly(kioku_pool::MediumKind::File);
        Pool::create(&dir.join("p.pool"), &c).unwrap()
    }

    fn flip(pool: &mut Pool, name: &str, at: u64) {
        let off = pool.section(name).unwrap().offset + at;
        pool.bytes_mut(off, 1)[0] ^= 0x10;
    }

    #[test]
    fn the_record_survives_a_damaged_copy_and_a_torn_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path());
        let mut r = Record {
            seq: 0,
            levels: vec![LevelState {
                id: 3,
                epoch: 0,
                stripe_pages: 0,
                flight: None,
            }],
        };
        r.create(&mut p).unwrap();
        r.levels[0].epoch = 5;
        r.write(&mut p).unwrap();
        assert_eq!(Record::read(&p).unwrap(), r);
        // The first copy of the newest version damaged: the second is read.
        flip(&mut p, RECORD, 2 * (r.seq % 2) * SLOT as u64 + 30);
        assert_eq!(Record::read(&p).unwrap().levels[0].epoch, 5);
        // Both copies damaged (a torn write of the next version): the previous version.
        flip(&mut p, RECORD, (2 * (r.seq % 2) + 1) * SLOT as u64 + 30);
        assert_eq!(Record::read(&p).unwrap().levels[0].epoch, 0);
    }

    #[test]
    fn journal_entries_load_check_and_repair() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path());
        let page = 4096;
        let mut j = Journal::new(3, 7);
        for (i, pg) in [9u64, 2, 40].iter().enumerate() {
            let b = vec![i as u8 + 1; page];
            j.append(&mut p, page, *pg, &b, crc(&b)).unwrap();
        }
        let mark = j.mark();
        let back = Journal::load(&p, page, &mark).unwrap();
        assert_eq!(back.pages(), vec![2, 9, 40]);
        assert_eq!(back.intact(&p, page, 40).unwrap()[0], 3);
        assert!(back.damaged(&p, page).is_empty());
        // A damaged value is found, and repaired.
        flip(&mut p, "g.j3", page as u64 + 5);
        assert_eq!(back.damaged(&p, page), vec![2]);
        back.rewrite(&mut p, page, 2, &vec![2u8; page]).unwrap();
        assert!(back.damaged(&p, page).is_empty());
        // A damaged index entry makes the journal unusable (which page it was is unknown).
        flip(&mut p, "g.ji3", 16 + 1);
        assert!(Journal::load(&p, page, &mark)
            .unwrap_err()
            .contains("entry 1"));
        // Entries past the count are not read.
        let short = JournalMark { count: 1, ..mark };
        assert_eq!(Journal::load(&p, page, &short).unwrap().pages(), vec![9]);
    }

    #[test]
    fn a_log_is_sized_exactly_refuses_more_and_is_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path());
        let page = 4096;
        let mut log = Log::create(&mut p, page, 3, 100).unwrap();
        for q in 0..100 {
            log.append(&mut p, page, 0, q, &vec![q as u8; page])
                .unwrap();
        }
        assert_eq!(p.section("g.l3").unwrap().len, 100 * page as u64);
        assert_eq!(
            p.section("g.li3").unwrap().len,
            page as u64,
            "sections are whole pages"
        );
        let full = log.append(&mut p, page, 0, 100, &vec![1u8; page]);
        assert!(full.unwrap_err().to_string().contains("is full"));
        // The next flight's log replaces it, at its own size; an empty one takes nothing.
        let mut small = Log::create(&mut p, page, 3, 3).unwrap();
        small.append(&mut p, page, 0, 0, &vec![1u8; page]).unwrap();
        assert_eq!(p.section("g.l3").unwrap().len, 3 * page as u64);
        Log::create(&mut p, page, 3, 0).unwrap();
        assert!(p.section("g.l3").is_none() && p.section("g.li3").is_none());
        let mut none = Log::none(3);
        assert!(none.append(&mut p, page, 0, 0, &vec![1u8; page]).is_err());
        Log::discard(&mut p, 3).unwrap();
    }

    #[test]
    fn a_log_applies_idempotently_and_checks_its_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = pool(dir.path());
        let page = 4096;
        Parity::ensure(&mut p, page, 3, 2, 4).unwrap();
        assert_eq!(Parity::damaged(&p, page, 3, 2, 4), vec![], "zeros verify");
        let mut log = Log::create(&mut p, page, 3, 2).unwrap();
        log.append(&mut p, page, 1, 3, &vec![7u8; page]).unwrap();
        log.append(&mut p, page, 0, 0, &vec![9u8; page]).unwrap();
        let (entries, index_crc) = log.finish(&p).unwrap();
        let mark = FlightMark {
            epoch: 2,
            stripe_pages: 4,
            entries,
            index_crc,
            committed: true,
        };
        let es = Log::load(&p, 3, &mark).unwrap();
        for _ in 0..2 {
            Log::apply(&mut p, page, 3, &es, |_| {}).unwrap();
            assert_eq!(Parity::intact(&p, page, 3, 1, 3).unwrap()[0], 7);
            assert_eq!(Parity::intact(&p, page, 3, 0, 0).unwrap()[0], 9);
        }
        flip(&mut p, "g.p3.1", 3 * page as u64 + 1);
        assert_eq!(Parity::damaged(&p, page, 3, 2, 4), vec![(1, 3)]);
        flip(&mut p, "g.li3", 4);
        assert!(Log::load(&p, 3, &mark).is_err());
    }
}
