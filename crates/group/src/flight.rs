//! A flight: one encoding of a level's parity for one group epoch, and how it becomes the
//! level's committed parity.
//!
//! **What crosses the network.** Every stripe's `k` contributors send the XOR deltas of their
//! changed pages (zero deltas skipped) straight to the stripe's `m` parity holders, so a changed
//! page crosses the network `m` times, whatever `k`. Each holder multiplies the deltas by its
//! row of the code and adds them into the new value of its parity pages (the codec's kernel),
//! and appends those pages to a redo log in its pool. Stripes are walked in the same order by
//! every rank, in segments of stripe pages; sends are nonblocking within a byte budget.
//!
//! **How it commits** (each step an ordering point; `KIOKU_FAULT` names in brackets):
//!
//! | step | what | a crash after it leaves |
//! |---|---|---|
//! | 1 | deltas sent, logs appended [`encode`: a contributor half-way; `recv`: a holder half-way] | the previous parity; logs are ignored |
//! | 2 | the log is durable; the record says `logged` [`logged`] | the previous parity, unless every survivor logged and the data is at the flight's epoch: then recovery applies every log |
//! | 3 | every rank agrees that every log is complete [`agreed`] | as 2 (every survivor logged) |
//! | 4 | the record says `committed` [`committed`] | recovery applies every log |
//! | 5 | the log applied to the parity, each page with its checksum [`applying`: half-way] | as 4 (applying again gives the same bytes) |
//! | 6 | the record says the level encodes the flight's epoch [`applied`] | the new parity |
//!
//! A flight that fails on one rank without a crash (a page read damaged, a full pool) still
//! completes the exchange — the rank sends its holders empty messages flagged as failed — so
//! that nobody waits forever; at step 3 every rank learns of it and the level keeps its
//! previous parity.

use crate::error::{GroupError, Result};
use crate::group::{fault, Inner, Shared};
use crate::layout::Scheme;
use crate::meta::Table;
use crate::mpi::{Bg, Req};
use crate::pages::DataView;
use crate::store::{FlightMark, Journal, Log, Parity};
use kioku_ec::Codec;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const TAG_FLIGHT: u32 = 21;
/// Page lists that size the holders' redo logs before the deltas travel.
const TAG_PAGES: u32 = 22;
const HEAD: usize = 8;
const FAILED: u8 = 1;

/// How pages enter an encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Deltas against each page's base (zero deltas skipped), added to the parity held.
    Delta,
    /// Whole pages (zero pages skipped) into parity computed afresh.
    Fresh,
    /// Whole pages, every one of them, into parity computed afresh (the benchmarks' baseline:
    /// full checkpoints with full encoding).
    Full,
}

/// Where a page's new value and base are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The local checkpoint of the flight's epoch is finished: new values are the committed
    /// ones, bases the journal's (a background flight).
    Committed,
    /// Before the local checkpoint's finish: new values are live, bases the journal's or else
    /// the committed ones (an inline flight).
    Live,
}

/// What holders do with the new parity pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sink {
    /// Append them to the redo log.
    Log,
    /// Write them in place, every page of every held stripe (zero ones too): only for a level
    /// whose parity encodes nothing yet (the record says epoch 0), so that there is no older
    /// parity for a log to protect — the first encoding costs no log space. The commit steps
    /// are the same with an empty log.
    InPlace,
    /// Compare them with the parity held, counting differences (verification).
    Compare,
}

/// One rank's part of a flight.
pub(crate) struct Flight {
    pub level: u8,
    pub scheme: Scheme,
    pub codec: Arc<Codec>,
    /// The group epoch whose data the new parity encodes.
    pub epoch: u64,
    /// Stripe pages of the encoding.
    pub q_total: u64,
    pub pos: usize,
    pub rank: usize,
    pub members: Vec<usize>,
    pub page: usize,
    /// Stripe pages per message when deltas are dense.
    pub segment: u64,
    /// Bytes of messages this rank may have in flight at once.
    pub budget: usize,
    pub mode: Mode,
    pub source: Source,
    pub sink: Sink,
    /// This rank's data pages to feed in, ascending (changed pages, or all of them).
    pub pages: Vec<u64>,
    /// This rank's data space.
    pub table: Table,
    /// The level's journal (bases of `Mode::Delta`).
    pub journal: Option<Journal>,
}

/// What this rank's part of a flight did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Exchanged {
    /// Pages whose delta this rank sent.
    pub encoded_pages: u64,
    pub bytes_sent: u64,
    /// Parity pages that differ from the ones held (`Sink::Compare`).
    pub mismatches: u64,
    /// This rank's own failure, reported to every rank at the agreement.
    pub failure: Option<String>,
    /// Entries of the redo log and its index checksum (`Sink::Log`).
    pub log: (u64, u32),
    /// Bytes this rank's pool took once its log was complete (the flight's peak).
    pub pool_peak: u64,
    pub time: Duration,
}

/// How a whole flight ended on this rank.
#[derive(Clone, Debug, Default)]
pub(crate) struct FlightReport {
    pub level: u8,
    pub epoch: u64,
    pub encoded_pages: u64,
    pub bytes_sent: u64,
    /// The level now encodes `epoch`; otherwise `failure` says why it keeps its previous
    /// parity.
    pub committed: bool,
    pub failure: Option<String>,
    /// Bytes this rank's pool took once its log was complete (the flight's peak).
    pub pool_peak: u64,
    pub total: Duration,
}

/// Bytes the file system holds for the pool at `path` (holes take none).
pub(crate) fn allocated(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

fn inner(g: &mut Option<Inner>) -> &mut Inner {
    g.as_mut().expect("the pool is open while a flight runs")
}

impl Flight {
    /// The whole flight: exchange, log, agree, commit and apply (or discard).
    pub(crate) fn run(&self, shared: &Shared, bg: &mut Bg) -> Result<FlightReport> {
        let t0 = Instant::now();
        let mut ex = self.exchange(shared, bg)?;
        if ex.failure.is_none() {
            if let Err(e) = self.mark_logged(shared, ex.log) {
                ex.failure = Some(e.to_string());
            }
        }
        fault("logged", self.rank, self.epoch);
        let agreed = agree(bg, ex.failure.clone())?;
        fault("agreed", self.rank, self.epoch);
        let mut report = FlightReport {
            level: self.level,
            epoch: self.epoch,
            encoded_pages: ex.encoded_pages,
            bytes_sent: ex.bytes_sent,
            committed: false,
            failure: None,
            pool_peak: ex.pool_peak,
            total: Duration::ZERO,
        };
        match agreed {
            Ok(()) => {
                self.commit_and_apply(shared)?;
                report.committed = true;
            }
            Err(why) => {
                tracing::warn!(level = self.level, epoch = self.epoch, %why, "flight failed; the level keeps its previous parity");
                self.discard(shared)?;
                report.failure = Some(why);
            }
        }
        report.total = t0.elapsed();
        Ok(report)
    }

    /// Step 1: sends this rank's deltas, turns what it holds into new parity pages.
    pub(crate) fn exchange(&self, shared: &Shared, bg: &mut Bg) -> Result<Exchanged> {
        let t0 = Instant::now();
        let Scheme { k, m, g } = self.scheme;
        let mut out = Exchanged::default();
        bg.take_sent();
        // Sparse deltas travel a stripe at a time; dense ones in segments.
        let mut feed = [self.pages.len() as u64];
        bg.allreduce_max(&mut feed)?;
        let seg_q = if feed[0] <= self.segment {
            self.q_total.max(1)
        } else {
            self.segment
        };
        let nseg = self.q_total.div_ceil(seg_q);
        let mut by_chunk: Vec<Vec<u64>> = vec![Vec::new(); k];
        for &p in &self.pages {
            by_chunk[(p % k as u64) as usize].push(p / k as u64);
        }
        let window = (self.budget / (HEAD + (self.segment as usize) * (self.page + 4))).max(1) * m;
        let mut pending: VecDeque<Req> = VecDeque::new();
        let mut inbox: Vec<Vec<u8>> = vec![Vec::new(); k];
        let held = self.scheme.held(self.pos);
        // The log is sized before anything is logged: a delta flight's holders learn from
        // the contributors' page lists which stripe pages can change.
        let capacity = match (self.sink, self.mode) {
            (Sink::Log, Mode::Delta) => self.announce(bg, &by_chunk)?,
            (Sink::Log, _) => held.len() as u64 * self.q_total,
            _ => 0,
        };
        let mut log = Log::none(self.level);
        if self.sink == Sink::Log {
            let mut g = shared.lock();
            match Log::create(
                inner(&mut g).engine.pool_mut(),
                self.page,
                self.level,
                capacity,
            ) {
                Ok(l) => log = l,
                Err(e) => out.failure = Some(e.to_string()),
            }
        }
        let mut recv_fault = true;
        for j in 0..g {
            if j == g / 2 && self.sink != Sink::Compare {
                fault("encode", self.rank, self.epoch);
            }
            let contributors = self.scheme.contributors(j);
            let holders = self.scheme.holders(j);
            if let Some(i) = contributors.iter().position(|&p| p == self.pos) {
                let mine = &by_chunk[i];
                let mut at = 0usize;
                for s in 0..nseg {
                    let (lo, hi) = (s * seg_q, ((s + 1) * seg_q).min(self.q_total));
                    let msg = Arc::new(self.message(shared, mine, &mut at, (lo, hi), i, &mut out));
                    for &h in &holders {
                        pending.push_back(bg.isend(self.members[h], TAG_FLIGHT, &msg)?);
                    }
                    while pending.len() > window {
                        pending.pop_front().expect("nonempty").wait()?;
                    }
                }
            } else if let Some(t) = holders.iter().position(|&p| p == self.pos) {
                let h = held
                    .iter()
                    .position(|&(hj, _)| hj == j)
                    .expect("a holder holds the stripe");
                for s in 0..nseg {
                    if recv_fault && s == nseg / 2 && self.sink != Sink::Compare {
                        recv_fault = false;
                        fault("recv", self.rank, self.epoch);
                    }
                    let (lo, hi) = (s * seg_q, ((s + 1) * seg_q).min(self.q_total));
                    let from: Vec<usize> = contributors.iter().map(|&c| self.members[c]).collect();
                    for (buf, &src) in inbox.iter_mut().zip(&from) {
                        bg.recv(src, TAG_FLIGHT, buf)?;
                    }
                    self.absorb(shared, &inbox, &from, (t, h), (lo, hi), &mut log, &mut out)?;
                }
            }
        }
        for r in pending {
            r.wait()?;
        }
        if self.sink != Sink::Compare && out.failure.is_none() {
            let mut g = shared.lock();
            let inner = inner(&mut g);
            // The log's sections are committed with it, so that a crash after the record
            // says `logged` finds them.
            let finished = log.finish(inner.engine.pool()).and_then(|l| {
                inner.engine.commit_sections()?;
                Ok(l)
            });
            match finished {
                Ok(l) => out.log = l,
                Err(e) => out.failure = Some(e.to_string()),
            }
            out.pool_peak = allocated(inner.engine.pool().path());
        }
        out.bytes_sent = bg.take_sent();
        out.time = t0.elapsed();
        Ok(out)
    }

    /// Tells each holder of every stripe this rank contributes to which of its stripe pages
    /// can change (its page list), and returns how many pages of the stripes this rank holds
    /// can change: the exact size of its redo log (zero deltas, skipped later, make it an
    /// upper bound). Costs 4 bytes a page a holder.
    fn announce(&self, bg: &mut Bg, by_chunk: &[Vec<u64>]) -> Result<u64> {
        let mut pending: Vec<Req> = Vec::new();
        let mut total = 0u64;
        let mut buf = Vec::new();
        // Every list is sent before any is awaited: one round of latency, not one a stripe.
        for j in 0..self.scheme.g {
            let contributors = self.scheme.contributors(j);
            if let Some(i) = contributors.iter().position(|&p| p == self.pos) {
                let list: Vec<u8> = by_chunk[i]
                    .iter()
                    .flat_map(|&q| (q as u32).to_le_bytes())
                    .collect();
                let list = Arc::new(list);
                for &h in &self.scheme.holders(j) {
                    pending.push(bg.isend(self.members[h], TAG_PAGES, &list)?);
                }
            }
        }
        for j in 0..self.scheme.g {
            let contributors = self.scheme.contributors(j);
            let holders = self.scheme.holders(j);
            if holders.contains(&self.pos) {
                let mut union: Vec<u32> = Vec::new();
                for &c in &contributors {
                    let src = self.members[c];
                    bg.recv(src, TAG_PAGES, &mut buf)?;
                    if buf.len() % 4 != 0 {
                        return Err(GroupError::Remote {
                            rank: src,
                            detail: "malformed page list".into(),
                        });
                    }
                    union.extend(
                        buf.chunks_exact(4)
                            .map(|b| u32::from_le_bytes(b.try_into().expect("4"))),
                    );
                }
                union.sort_unstable();
                union.dedup();
                if union.last().is_some_and(|&q| q as u64 >= self.q_total) {
                    return Err(GroupError::Remote {
                        rank: self.rank,
                        detail: "a page list names a page past the stripe".into(),
                    });
                }
                total += union.len() as u64;
            }
        }
        for r in pending {
            r.wait()?;
        }
        Ok(total)
    }

    /// The message of this rank's chunk `i` for stripe pages `lo..hi`: the nonzero deltas of
    /// its pages there. `at` walks `mine` (stripe pages of the chunk, ascending).
    fn message(
        &self,
        shared: &Shared,
        mine: &[u64],
        at: &mut usize,
        (lo, hi): (u64, u64),
        i: usize,
        out: &mut Exchanged,
    ) -> Vec<u8> {
        let page = self.page;
        let k = self.scheme.k as u64;
        let mut qs: Vec<u32> = Vec::new();
        let mut data: Vec<u8> = Vec::new();
        let mut failed = out.failure.is_some();
        let first = *at;
        while *at < mine.len() && mine[*at] < hi {
            *at += 1;
        }
        let todo = &mine[first..*at];
        if !failed && !todo.is_empty() {
            let mut g = shared.lock();
            let inner = inner(&mut g);
            let view = DataView::of(&inner.engine, &self.table, page);
            let pool = inner.engine.pool();
            let zero = vec![0u8; page];
            let mut delta = vec![0u8; page];
            for &q in todo {
                if q < lo {
                    continue;
                }
                let p = q * k + i as u64;
                match self.delta(&view, pool, p, &zero, &mut delta) {
                    Ok(false) => continue,
                    Ok(true) => {}
                    Err(why) => {
                        out.failure = Some(why);
                        failed = true;
                        break;
                    }
                }
                qs.push(q as u32);
                data.extend_from_slice(&delta);
            }
        }
        if failed {
            qs.clear();
            data.clear();
        } else {
            out.encoded_pages += qs.len() as u64;
        }
        let mut msg = Vec::with_capacity(HEAD + 4 * qs.len() + data.len());
        msg.push(if failed { FAILED } else { 0 });
        msg.extend_from_slice(&[0; 3]);
        msg.extend_from_slice(&(qs.len() as u32).to_le_bytes());
        for q in &qs {
            msg.extend_from_slice(&q.to_le_bytes());
        }
        msg.extend_from_slice(&data);
        msg
    }

    /// Data page `p`'s delta into `delta`; `Ok(false)` when there is nothing to send.
    fn delta(
        &self,
        view: &DataView,
        pool: &kioku_pool::Pool,
        p: u64,
        zero: &[u8],
        delta: &mut [u8],
    ) -> std::result::Result<bool, String> {
        let damaged = |what: &str| {
            let (region, i) = view.locate(p).unwrap_or(("?", p));
            format!(
                "{what} of region '{region}' page {i} fails its checksum; kioku_group_verify() rebuilds it"
            )
        };
        let new: &[u8] = match self.source {
            Source::Committed => match view.committed_intact(p) {
                Ok(b) => b.unwrap_or(zero),
                Err(()) => return Err(damaged("the checkpoint's copy")),
            },
            Source::Live => view.live(p).unwrap_or(zero),
        };
        let base: &[u8] = match self.mode {
            Mode::Fresh | Mode::Full => zero,
            Mode::Delta => match self.journal.as_ref().filter(|j| j.contains(p)) {
                Some(j) => j
                    .intact(pool, self.page, p)
                    .ok_or_else(|| damaged("the journaled value"))?,
                None if self.source == Source::Live => match view.committed_intact(p) {
                    Ok(b) => b.unwrap_or(zero),
                    Err(()) => return Err(damaged("the checkpoint's copy")),
                },
                // Not written since the level's last commit: no delta.
                None => return Ok(false),
            },
        };
        let mut any = 0u8;
        for ((d, x), y) in delta.iter_mut().zip(new).zip(base) {
            *d = x ^ y;
            any |= *d;
        }
        Ok(any != 0 || self.mode == Mode::Full)
    }

    /// A holder's part for stripe pages `lo..hi` of held stripe `h` (parity row `t`): the `k`
    /// contributors' messages multiplied and added into new parity pages, which go to the sink.
    #[allow(clippy::too_many_arguments)]
    fn absorb(
        &self,
        shared: &Shared,
        inbox: &[Vec<u8>],
        from: &[usize],
        (t, h): (usize, usize),
        (lo, hi): (u64, u64),
        log: &mut Log,
        out: &mut Exchanged,
    ) -> Result<()> {
        let page = self.page;
        // (q, contributor, offset of its delta) of every delta received, by stripe page.
        let mut entries: Vec<(u32, usize, usize)> = Vec::new();
        for (i, msg) in inbox.iter().enumerate() {
            let bad = || GroupError::Remote {
                rank: from[i],
                detail: "malformed flight message".into(),
            };
            if msg.len() < HEAD {
                return Err(bad());
            }
            if msg[0] & FAILED != 0 {
                continue; // Its sender reports its own failure at the agreement.
            }
            let n = u32::from_le_bytes(msg[4..8].try_into().expect("4")) as usize;
            if msg.len() != HEAD + n * (4 + page) {
                return Err(bad());
            }
            for e in 0..n {
                let q =
                    u32::from_le_bytes(msg[HEAD + 4 * e..HEAD + 4 * e + 4].try_into().expect("4"));
                if (q as u64) < lo || q as u64 >= hi {
                    return Err(bad());
                }
                entries.push((q, i, HEAD + 4 * n + e * page));
            }
        }
        entries.sort_unstable();
        if out.failure.is_some() {
            return Ok(());
        }
        let fresh = self.mode != Mode::Delta;
        let mut g = shared.lock();
        let inner = inner(&mut g);
        let pool = inner.engine.pool_mut();
        let mut sum = vec![0u8; page];
        let mut next = 0usize;
        let qs: Box<dyn Iterator<Item = u64>> = if fresh {
            Box::new(lo..hi)
        } else {
            let mut touched: Vec<u64> = entries.iter().map(|e| e.0 as u64).collect();
            touched.dedup();
            Box::new(touched.into_iter())
        };
        for q in qs {
            sum.fill(0);
            while next < entries.len() && entries[next].0 as u64 == q {
                let (_, i, off) = entries[next];
                self.codec
                    .accumulate_row(t, i, &inbox[i][off..off + page], &mut sum)?;
                next += 1;
            }
            if !fresh {
                match Parity::intact(pool, page, self.level, h, q) {
                    Some(old) => {
                        for (s, o) in sum.iter_mut().zip(old) {
                            *s ^= o;
                        }
                    }
                    None => {
                        out.failure = Some(format!(
                            "parity page {q} of held stripe {h} at level {} fails its checksum; kioku_group_verify() rebuilds it",
                            self.level
                        ));
                        return Ok(());
                    }
                }
            }
            match self.sink {
                Sink::Log => {
                    if let Err(e) = log.append(pool, page, h as u32, q as u32, &sum) {
                        out.failure = Some(e.to_string());
                        return Ok(());
                    }
                }
                Sink::InPlace => {
                    if let Err(e) =
                        Parity::write(pool, page, self.level, h, q, &sum, crc32c::crc32c(&sum))
                    {
                        out.failure = Some(e.to_string());
                        return Ok(());
                    }
                }
                Sink::Compare => {
                    if Parity::intact(pool, page, self.level, h, q) != Some(&sum[..]) {
                        out.mismatches += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Step 2: the record says the log is complete.
    pub(crate) fn mark_logged(
        &self,
        shared: &Shared,
        (entries, index_crc): (u64, u32),
    ) -> Result<()> {
        let mut g = shared.lock();
        let inner = inner(&mut g);
        let l = inner
            .record
            .level_mut(self.level)
            .expect("record of a kept level");
        l.flight = Some(FlightMark {
            epoch: self.epoch,
            stripe_pages: self.q_total,
            entries,
            index_crc,
            committed: false,
        });
        inner.record.write(inner.engine.pool_mut())
    }

    /// Steps 4–6: commit, apply the log, and say the level encodes the flight's epoch.
    pub(crate) fn commit_and_apply(&self, shared: &Shared) -> Result<()> {
        let mut g = shared.lock();
        let inner = inner(&mut g);
        let pool = inner.engine.pool_mut();
        let l = inner
            .record
            .level_mut(self.level)
            .expect("record of a kept level");
        let mut mark = l.flight.clone().expect("a logged flight");
        mark.committed = true;
        l.flight = Some(mark.clone());
        inner.record.write(pool)?;
        fault("committed", self.rank, self.epoch);
        apply(pool, self.page, self.level, &mark, self.rank)?;
        let l = inner.record.level_mut(self.level).expect("kept level");
        l.epoch = mark.epoch;
        l.stripe_pages = mark.stripe_pages;
        l.flight = None;
        inner.record.write(pool)?;
        fault("applied", self.rank, self.epoch);
        // The record no longer names the log: its space goes back at once, and the commit
        // makes it reusable by the next flight.
        Log::discard(pool, self.level)?;
        inner.engine.commit_sections()?;
        Ok(())
    }

    /// The flight failed somewhere: its log is forgotten.
    pub(crate) fn discard(&self, shared: &Shared) -> Result<()> {
        let mut g = shared.lock();
        let inner = inner(&mut g);
        let l = inner
            .record
            .level_mut(self.level)
            .expect("record of a kept level");
        if l.flight.take().is_some() {
            inner.record.write(inner.engine.pool_mut())?;
        }
        Log::discard(inner.engine.pool_mut(), self.level)?;
        Ok(())
    }
}

/// Applies the log `mark` describes (step 5; also recovery's roll-forward).
pub(crate) fn apply(
    pool: &mut kioku_pool::Pool,
    page: usize,
    level: u8,
    mark: &FlightMark,
    rank: usize,
) -> Result<()> {
    let entries = Log::load(pool, level, mark).map_err(|detail| GroupError::Pool {
        path: pool.path().display().to_string(),
        detail,
    })?;
    let half = entries.len() / 2;
    Parity::ensure(
        pool,
        page,
        level,
        entries.iter().map(|e| e.h as usize + 1).max().unwrap_or(0),
        mark.stripe_pages,
    )?;
    Log::apply(pool, page, level, &entries, |n| {
        if n == half {
            fault("applying", rank, mark.epoch);
        }
    })
}

/// Step 3: every rank's outcome, gathered: `Ok(Err(why))` names the first rank that failed.
pub(crate) fn agree(bg: &Bg, mine: Option<String>) -> Result<std::result::Result<(), String>> {
    let text = mine.unwrap_or_default().into_bytes();
    let all = bg.allgather_var(&text)?;
    Ok(match all.iter().position(|e| !e.is_empty()) {
        None => Ok(()),
        Some(rank) => Err(format!(
            "rank {rank}: {}",
            String::from_utf8_lossy(&all[rank])
        )),
    })
}
