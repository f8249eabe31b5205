//! The undo log in the pool: a head section and segments of records, written in place with
//! the pool's flush and drain; new segments published by a pool commit that keeps the owner's
//! roots (`SectionStore::commit_sections`). Ordering points are numbered as in
//! `docs/journal.md` ("(A1)" … in comments).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use kioku_pool::{Pool, PoolError};

use super::error::{JournalError, Result};
use super::format::{self, FormatProblem, HeadInfo, Record, RecordHeader, SegmentHeader};
use super::SectionStore;

pub const HEAD_SECTION: &str = "run.journal";
const SEGMENT_PREFIX: &str = "run.journal.";

/// A record's place in the pool.
#[derive(Clone, Copy, Debug)]
pub struct RecRef {
    pub seq: u64,
    pub tag: u64,
    pub kind: format::Kind,
    /// Pool offset of the record and its length there.
    pub off: u64,
    pub len: u32,
}

#[derive(Clone, Debug)]
struct Segment {
    index: u32,
    off: u64,
    len: u64,
    /// First and last sequence numbers it holds (`None`: not in use since its last recycling).
    first_seq: Option<u64>,
    last_seq: Option<u64>,
}

/// Why an append could not be made durable.
#[derive(Debug)]
pub enum AppendError {
    /// The pool could not grow for a new segment (the medium is full, or the pool's section
    /// table is).
    NoSpace(PoolError),
    Other(JournalError),
}

impl From<PoolError> for AppendError {
    fn from(e: PoolError) -> Self {
        AppendError::Other(e.into())
    }
}

/// Whether a pool error means "no room" (ENOSPC, EDQUOT, EFBIG, a full section table).
pub fn is_no_space(e: &PoolError) -> bool {
    if matches!(e, PoolError::TooManySections { .. }) {
        return true;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(
                io.raw_os_error(),
                Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG)
            ) {
                return true;
            }
        }
        src = s.source();
    }
    false
}

/// The log as this process knows it.
#[derive(Debug)]
pub struct Log {
    head_off: u64,
    segment_len: u64,
    segments: Vec<Segment>,
    /// Index into `segments` of the one records are appended to.
    active: Option<usize>,
    /// Where in the active segment (offset from its start) the next record goes.
    write_at: u64,
    next_seq: u64,
    live_from_seq: u64,
    dead_below_tag: u64,
    incomplete: Option<(u64, String)>,
    /// Live records (sequence >= live_from_seq), in order.
    records: VecDeque<RecRef>,
    stash_dirs: Vec<PathBuf>,
    /// A restore in progress: (epoch, next sequence number to undo; 0 when all are undone).
    apply: Option<(u64, u64)>,
    spares: usize,
}

fn seg_name(i: u32) -> String {
    format!("{SEGMENT_PREFIX}{i}")
}

fn damaged(detail: impl Into<String>) -> JournalError {
    JournalError::Damaged {
        detail: detail.into(),
    }
}

/// One aligned 8-byte store into the pool (failure-atomic on every medium).
fn store_word(pool: &mut Pool, off: u64, v: u64) {
    let b = pool.bytes_mut(off, 8);
    assert!((b.as_ptr() as usize).is_multiple_of(8), "word aligned");
    // SAFETY: the 8 bytes are inside the pool's mapping (checked by bytes_mut), aligned
    // (checked above), and `&mut Pool` makes this the only access to them.
    let w = unsafe { AtomicU64::from_ptr(b.as_mut_ptr().cast()) };
    w.store(v.to_le(), Ordering::Release);
}

fn load_word(pool: &Pool, off: u64) -> u64 {
    u64::from_le_bytes(pool.bytes(off, 8).try_into().expect("8"))
}

impl Log {
    /// Creates the head and `spares` empty segments, and commits them.
    pub fn create(store: &mut dyn SectionStore, segment_len: u64, spares: usize) -> Result<Log> {
        let pool = store.pool();
        if pool.section(HEAD_SECTION).is_some() {
            return Err(JournalError::Exists);
        }
        let head = pool.create_section(HEAD_SECTION, format::HEAD_LEN, 0)?;
        let info = HeadInfo {
            segment_len,
            created_ns: now_ns(),
        };
        pool.bytes_mut(head.offset, 64)
            .copy_from_slice(&info.encode());
        store_word(pool, head.offset + format::W_LIVE_FROM_SEQ, 1);
        pool.flush(head.offset, format::HEAD_LEN)?;
        let mut log = Log {
            head_off: head.offset,
            segment_len,
            segments: Vec::new(),
            active: None,
            write_at: 0,
            next_seq: 1,
            live_from_seq: 1,
            dead_below_tag: 0,
            incomplete: None,
            records: VecDeque::new(),
            stash_dirs: Vec::new(),
            apply: None,
            spares,
        };
        for _ in 0..spares.max(1) {
            log.new_segment(store.pool())?;
        }
        // The pool commit's drain orders the head's bytes with the new table.
        store.commit_sections()?;
        Ok(log)
    }

    /// Reads the log from the pool: the head, every segment, the live records.
    pub fn open(store: &mut dyn SectionStore, spares: usize) -> Result<Log> {
        let pool = store.pool();
        let head = pool
            .section(HEAD_SECTION)
            .cloned()
            .ok_or(JournalError::Missing)?;
        if head.len < format::HEAD_LEN {
            return Err(damaged("head section too short"));
        }
        let info = HeadInfo::decode(pool.bytes(head.offset, 64))
            .map_err(|p| damaged(format!("head: {p}")))?;
        let word = |w: u64| load_word(pool, head.offset + w);
        let live_from_seq = word(format::W_LIVE_FROM_SEQ);
        let dead_below_tag = word(format::W_DEAD_BELOW_TAG);
        let incomplete = match word(format::W_INCOMPLETE) {
            0 => None,
            t => {
                let n = (word(format::W_REASON_LEN) as usize).min(format::REASON_MAX);
                let r = pool.bytes(head.offset + format::REASON_OFF, n as u64);
                Some((t - 1, String::from_utf8_lossy(r).into_owned()))
            }
        };
        let apply = match word(format::W_APPLY_EPOCH) {
            0 => None,
            e => Some((e - 1, word(format::W_APPLY_NEXT))),
        };
        let n_dirs = word(format::W_STASH_DIRS) as usize;
        if n_dirs > format::STASH_MAX {
            return Err(damaged("stash directory count"));
        }
        let mut stash_dirs = Vec::new();
        for i in 0..n_dirs {
            let off = head.offset + format::STASH_OFF + (i * format::STASH_ENTRY_LEN) as u64;
            let b = pool.bytes(off, format::STASH_ENTRY_LEN as u64);
            stash_dirs.push(
                format::decode_stash_entry(b)
                    .map_err(|p| damaged(format!("stash directory {i}: {p}")))?,
            );
        }

        // Segments, by first sequence number; records of each up to its first invalid one.
        let mut segments = Vec::new();
        let mut all: Vec<(RecRef, usize)> = Vec::new();
        let mut tails = Vec::new();
        for s in pool.sections() {
            let Some(n) = s.name.strip_prefix(SEGMENT_PREFIX) else {
                continue;
            };
            let index: u32 = n
                .parse()
                .map_err(|_| damaged(format!("section {}", s.name)))?;
            let hdr = SegmentHeader::decode(pool.bytes(s.offset, format::SEGMENT_HEADER_LEN))
                .ok()
                .filter(|h| h.index == index && h.len == s.len);
            segments.push(Segment {
                index,
                off: s.offset,
                len: s.len,
                first_seq: hdr.map(|h| h.first_seq),
                last_seq: None,
            });
        }
        segments.sort_by_key(|s| (s.first_seq.is_none(), s.first_seq, s.index));
        for (i, seg) in segments.iter_mut().enumerate() {
            let Some(first) = seg.first_seq else {
                tails.push(0);
                continue;
            };
            let body_off = seg.off + format::SEGMENT_HEADER_LEN;
            let body = pool.bytes(body_off, seg.len - format::SEGMENT_HEADER_LEN);
            let (found, end) = format::scan_segment(body, first);
            for (h, at) in &found {
                all.push((rec_ref(h, body_off + *at as u64), i));
            }
            seg.last_seq = found.last().map(|(h, _)| h.seq);
            tails.push(format::SEGMENT_HEADER_LEN + end as u64);
        }
        let max_seq = all.iter().map(|(r, _)| r.seq).max().unwrap_or(0);
        let active = segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.first_seq.is_some())
            .max_by_key(|(_, s)| s.first_seq)
            .map(|(i, _)| i);
        let next_seq = [
            max_seq + 1,
            live_from_seq,
            active.and_then(|a| segments[a].first_seq).unwrap_or(1),
            1,
        ]
        .into_iter()
        .max()
        .expect("non-empty");
        all.sort_by_key(|(r, _)| r.seq);
        let records: VecDeque<RecRef> = all
            .iter()
            .filter(|(r, _)| r.seq >= live_from_seq)
            .map(|(r, _)| *r)
            .collect();
        // Live records are contiguous from live_from_seq: a record is made durable before the
        // next one is written, so a gap means damage, not a power cut.
        for (i, r) in records.iter().enumerate() {
            if r.seq != live_from_seq + i as u64 {
                return Err(damaged(format!(
                    "record {} missing (found {} after it)",
                    live_from_seq + i as u64,
                    r.seq
                )));
            }
        }
        let write_at = active.map(|a| tails[a]).unwrap_or(0);
        let mut log = Log {
            head_off: head.offset,
            segment_len: info.segment_len,
            segments,
            active,
            write_at,
            next_seq,
            live_from_seq,
            dead_below_tag,
            incomplete,
            records,
            stash_dirs,
            apply,
            spares,
        };
        log.free_dead_segments();
        Ok(log)
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    pub fn dead_below_tag(&self) -> u64 {
        self.dead_below_tag
    }
    pub fn incomplete(&self) -> Option<&(u64, String)> {
        self.incomplete.as_ref()
    }
    pub fn records(&self) -> &VecDeque<RecRef> {
        &self.records
    }
    pub fn stash_dirs(&self) -> &[PathBuf] {
        &self.stash_dirs
    }
    pub fn apply_state(&self) -> Option<(u64, u64)> {
        self.apply
    }
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The most payload bytes one record can carry (it must fit an empty segment).
    pub fn max_payload(&self) -> usize {
        (self.segment_len - format::SEGMENT_HEADER_LEN) as usize - format::RECORD_HEADER_LEN
    }

    /// Reads a record back.
    pub fn read(&self, pool: &Pool, r: &RecRef) -> Result<Record> {
        let b = pool.bytes(r.off, r.len as u64);
        let (h, p) = format::decode_record(b, r.seq)
            .map_err(|e| damaged(format!("record {}: {e}", r.seq)))?;
        Record::decode_payload(h.kind, p)
            .map_err(|e: FormatProblem| damaged(format!("record {}: {e}", r.seq)))
    }

    /// Appends a record and makes it durable (A1–A2; a new segment first when the active one
    /// is full: S1–S3). Returns its sequence number.
    pub fn append(
        &mut self,
        store: &mut dyn SectionStore,
        tag: u64,
        rec: &Record,
    ) -> std::result::Result<u64, AppendError> {
        let seq = self.next_seq;
        let bytes = format::encode_record(seq, tag, rec);
        assert!(
            bytes.len() <= self.max_payload() + format::RECORD_HEADER_LEN,
            "record larger than a segment ({} bytes): callers split data",
            bytes.len()
        );
        let fits = |log: &Log| {
            log.active
                .is_some_and(|a| log.write_at + bytes.len() as u64 <= log.segments[a].len)
        };
        if !fits(self) {
            self.switch_segment(store)?;
        }
        let a = self.active.expect("an active segment");
        let off = self.segments[a].off + self.write_at;
        let pool = store.pool();
        pool.bytes_mut(off, bytes.len() as u64)
            .copy_from_slice(&bytes);
        // (A1) flush the record; (A2) drain: durable before the trapped call may run.
        pool.flush(off, bytes.len() as u64)?;
        pool.drain()?;
        self.write_at += bytes.len() as u64;
        self.next_seq += 1;
        let seg = &mut self.segments[a];
        seg.last_seq = Some(seq);
        self.records.push_back(RecRef {
            seq,
            tag,
            kind: rec.kind(),
            off,
            len: bytes.len() as u32,
        });
        Ok(seq)
    }

    /// Starts a segment for records from `next_seq` on: a free one (recycled: its old records
    /// are all dead) or a new section.
    fn switch_segment(
        &mut self,
        store: &mut dyn SectionStore,
    ) -> std::result::Result<(), AppendError> {
        let free = (0..self.segments.len())
            .find(|&i| Some(i) != self.active && self.segments[i].first_seq.is_none());
        let (i, created) = match free {
            Some(i) => (i, false),
            None => match self.new_segment(store.pool()) {
                Ok(i) => (i, true),
                Err(JournalError::Pool(e)) if is_no_space(&e) => {
                    return Err(AppendError::NoSpace(e))
                }
                Err(e) => return Err(AppendError::Other(e)),
            },
        };
        let seg = &mut self.segments[i];
        let hdr = SegmentHeader {
            index: seg.index,
            first_seq: self.next_seq,
            len: seg.len,
        };
        let pool = store.pool();
        pool.bytes_mut(seg.off, format::SEGMENT_HEADER_LEN)
            .copy_from_slice(&hdr.encode());
        // (S1) flush the header; (S2) a new section: the pool commit publishes it (its drain
        // covers the header); a recycled one: drain.
        pool.flush(seg.off, format::SEGMENT_HEADER_LEN)?;
        if created {
            if let Err(e) = store.commit_sections() {
                return Err(match e {
                    JournalError::Pool(p) if is_no_space(&p) => AppendError::NoSpace(p),
                    e => AppendError::Other(e),
                });
            }
        } else {
            pool.drain()?;
        }
        seg.first_seq = Some(self.next_seq);
        seg.last_seq = None;
        self.active = Some(i);
        self.write_at = format::SEGMENT_HEADER_LEN;
        Ok(())
    }

    /// A new (zeroed, unpublished) segment section.
    fn new_segment(&mut self, pool: &mut Pool) -> Result<usize> {
        let index = self.segments.iter().map(|s| s.index + 1).max().unwrap_or(0);
        let s = pool.create_section(&seg_name(index), self.segment_len, 0)?;
        self.segments.push(Segment {
            index,
            off: s.offset,
            len: s.len,
            first_seq: None,
            last_seq: None,
        });
        Ok(self.segments.len() - 1)
    }

    /// Segments (other than the active one) whose records are all dead become free.
    fn free_dead_segments(&mut self) {
        for i in 0..self.segments.len() {
            if Some(i) == self.active {
                continue;
            }
            let s = &mut self.segments[i];
            if s.last_seq.is_none_or(|l| l < self.live_from_seq) {
                s.first_seq = None;
                s.last_seq = None;
            }
        }
    }

    /// Durably marks the journal incomplete from `tag` on (I1–I4). Needs no allocation: the
    /// head was reserved at creation.
    pub fn mark_incomplete(
        &mut self,
        store: &mut dyn SectionStore,
        tag: u64,
        reason: &str,
    ) -> Result<()> {
        if self.incomplete.is_some() {
            return Ok(());
        }
        let mut r = reason.as_bytes();
        if r.len() > format::REASON_MAX {
            r = &r[..format::REASON_MAX];
        }
        let pool = store.pool();
        let h = self.head_off;
        pool.bytes_mut(h + format::REASON_OFF, r.len() as u64)
            .copy_from_slice(r);
        store_word(pool, h + format::W_REASON_LEN, r.len() as u64);
        // (I1) flush the reason; (I2) drain; (I3) the incomplete word; (I4) flush + drain.
        pool.flush(h + format::W_REASON_LEN, 8)?;
        pool.flush(h + format::REASON_OFF, r.len().max(1) as u64)?;
        pool.drain()?;
        store_word(pool, h + format::W_INCOMPLETE, tag + 1);
        pool.persist(h + format::W_INCOMPLETE, 8)?;
        self.incomplete = Some((tag, String::from_utf8_lossy(r).into_owned()));
        Ok(())
    }

    /// The checkpoint of `epoch` is committed: records tagged below it are dead (C1–C2), their
    /// segments reusable; spare segments are topped up and surplus ones given back to the
    /// pool (C3, a pool commit).
    pub fn committed(&mut self, store: &mut dyn SectionStore, epoch: u64) -> Result<()> {
        let first_live = self
            .records
            .iter()
            .find(|r| r.tag >= epoch)
            .map(|r| r.seq)
            .unwrap_or(self.next_seq);
        let h = self.head_off;
        let pool = store.pool();
        store_word(pool, h + format::W_DEAD_BELOW_TAG, epoch);
        store_word(pool, h + format::W_LIVE_FROM_SEQ, first_live);
        // (C1) flush both words (one line); (C2) drain. Either word alone is a consistent
        // state: restores filter by tag as well.
        pool.flush(h + format::W_LIVE_FROM_SEQ, 16)?;
        pool.drain()?;
        self.dead_below_tag = epoch;
        self.live_from_seq = first_live;
        while self.records.front().is_some_and(|r| r.seq < first_live) {
            self.records.pop_front();
        }
        self.free_dead_segments();
        self.resize_spares(store)
    }

    /// Keeps `spares` free segments (creating them now, at a quiet moment, rather than when a
    /// trapped call waits) and gives surplus ones back to the pool.
    fn resize_spares(&mut self, store: &mut dyn SectionStore) -> Result<()> {
        let free: Vec<usize> = (0..self.segments.len())
            .filter(|&i| Some(i) != self.active && self.segments[i].first_seq.is_none())
            .collect();
        let mut changed = false;
        if free.len() < self.spares {
            for _ in free.len()..self.spares {
                match self.new_segment(store.pool()) {
                    Ok(_) => changed = true,
                    // No room for a spare now: an append will try again, and say so then.
                    Err(JournalError::Pool(e)) if is_no_space(&e) => break,
                    Err(e) => return Err(e),
                }
            }
        } else if free.len() > self.spares + 2 {
            let mut drop: Vec<usize> = free[self.spares + 2..].to_vec();
            drop.sort_unstable_by(|a, b| b.cmp(a));
            for i in drop {
                let name = seg_name(self.segments[i].index);
                store.pool().delete_section(&name)?;
                self.segments.remove(i);
                if let Some(a) = self.active.as_mut() {
                    if *a > i {
                        *a -= 1;
                    }
                }
            }
            changed = true;
        }
        if changed {
            store.commit_sections()?;
        }
        Ok(())
    }

    /// Every record so far is spent: a restore applied them (R1–R2).
    pub fn reset(&mut self, store: &mut dyn SectionStore) -> Result<()> {
        let h = self.head_off;
        let pool = store.pool();
        store_word(pool, h + format::W_LIVE_FROM_SEQ, self.next_seq);
        // (R1) records spent; (R2) the restore is over.
        pool.persist(h + format::W_LIVE_FROM_SEQ, 8)?;
        store_word(pool, h + format::W_APPLY_EPOCH, 0);
        pool.persist(h + format::W_APPLY_EPOCH, 8)?;
        self.live_from_seq = self.next_seq;
        self.records.clear();
        self.apply = None;
        self.free_dead_segments();
        Ok(())
    }

    /// Records that a restore of `epoch` undoes records from sequence `next` down (P1–P2 at
    /// its start, P3 at each step).
    pub fn set_apply(&mut self, store: &mut dyn SectionStore, epoch: u64, next: u64) -> Result<()> {
        let h = self.head_off;
        let pool = store.pool();
        store_word(pool, h + format::W_APPLY_NEXT, next);
        pool.persist(h + format::W_APPLY_NEXT, 8)?;
        if self.apply.map(|a| a.0) != Some(epoch) {
            store_word(pool, h + format::W_APPLY_EPOCH, epoch + 1);
            pool.persist(h + format::W_APPLY_EPOCH, 8)?;
        }
        self.apply = Some((epoch, next));
        Ok(())
    }

    /// Adds a stash directory to the head (T1 entry, T2 count); false when the head is full
    /// or the path too long.
    pub fn add_stash_dir(&mut self, store: &mut dyn SectionStore, dir: PathBuf) -> Result<bool> {
        if self.stash_dirs.contains(&dir) {
            return Ok(true);
        }
        let i = self.stash_dirs.len();
        let Some(entry) = format::encode_stash_entry(&dir) else {
            return Ok(false);
        };
        if i >= format::STASH_MAX {
            return Ok(false);
        }
        let h = self.head_off;
        let off = h + format::STASH_OFF + (i * format::STASH_ENTRY_LEN) as u64;
        let pool = store.pool();
        pool.bytes_mut(off, entry.len() as u64)
            .copy_from_slice(&entry);
        pool.persist(off, entry.len() as u64)?;
        store_word(pool, h + format::W_STASH_DIRS, (i + 1) as u64);
        pool.persist(h + format::W_STASH_DIRS, 8)?;
        self.stash_dirs.push(dir);
        Ok(true)
    }
}

fn rec_ref(h: &RecordHeader, off: u64) -> RecRef {
    RecRef {
        seq: h.seq,
        tag: h.tag,
        kind: h.kind,
        off,
        len: h.len,
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
