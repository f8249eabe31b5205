//! Checkpointing a stopped program: which of its memory to capture, which pages changed, copying
//! them into the engine's running context, and everything else a restore needs (layout,
//! registers, signals, descriptors) as a [`ProcessImage`].
//!
//! The program's memory stays its own private memory, exactly as without kioku: `fork`,
//! `MADV_DONTNEED`, `mremap`, `brk` behave as the kernel defines them, with nothing to intercept.
//! The pool holds the two contexts: the monitor copies the pages written since the last
//! checkpoint into the running context (the only work while the program is stopped), resumes
//! the program, and lets the engine make them durable and sync the other context meanwhile.
//!
//! Which pages: userfaultfd async write-protect on every captured mapping (a userfaultfd made
//! in the program, held by the monitor) and `PAGEMAP_SCAN` from outside, plus two corrections
//! the write-protect bits alone would miss:
//! * a page that was populated at the last checkpoint and is not now was dropped
//!   (`MADV_DONTNEED`, `MADV_FREE` reclaimed): it reads as zero (or as the file) again;
//! * a mapping that is not write-tracked any more was replaced (`munmap` + `mmap`, `mremap`,
//!   which drop the registration): all of it is taken again.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kioku_ckpt::{CheckpointStats, Engine, RegionOptions};
use kioku_pool::Pool;
use kioku_proc::{MapEntry, MapKind, Tracee};
use kioku_track::{PageRange, PageTracker, PagemapQuery, Query, Tracker};

use crate::error::{Result, RunError};
use crate::image::{
    hex, Area, Backing, FdImage, FdKind, FileId, MmFields, PipeImage, ProcessImage, SigAction,
    ThreadImage, Vma, IMAGE_VERSION,
};
use crate::shadow::{Marks, ShadowSpace};
use crate::sys::{self, intersect, normalize, subtract};

/// Character devices that hold no state of the program: reopened by path.
const STATELESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// One captured area and the region holding it.
#[derive(Clone, Debug)]
pub(crate) struct AreaState {
    pub start: usize,
    pub end: usize,
    pub region: String,
}

/// What happened while the program was stopped.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CaptureStats {
    /// Pages copied out of the program.
    pub pages: u64,
    /// Pages found written by the write-protect scan.
    pub written: u64,
    /// Pages taken again because their mapping was replaced or they were dropped.
    pub retaken: u64,
    /// Bytes of new memory copied while the program ran, before this capture's stop.
    pub precopied: u64,
    /// Bytes of captured memory.
    pub captured_bytes: u64,
    pub areas: usize,
    pub threads: usize,
    /// The whole stop as the program sees it: from the stop request to the resume request.
    #[serde(serialize_with = "ser_dur")]
    pub stop: Duration,
    #[serde(serialize_with = "ser_dur")]
    pub copy: Duration,
}

pub(crate) fn ser_dur<S: serde::Serializer>(
    d: &Duration,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// Pages to copy while the program runs ([`Capturer::prepare`]): (program, shadow, length).
pub struct Precopy {
    chunks: Vec<(usize, usize, usize)>,
}

impl Precopy {
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.2 as u64).sum()
    }
}

/// Below this much to copy for new mappings, the capture copies them while the program is
/// stopped (a second stop would cost more).
pub const PRECOPY_MIN: usize = 8 << 20;

/// A captured state waiting to be made durable ([`Capturer::commit`]).
pub struct Captured {
    image: ProcessImage,
    pub stats: CaptureStats,
}

/// One durable checkpoint.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckpointReport {
    pub epoch: u64,
    pub capture: CaptureStats,
    pub engine: CheckpointStats,
}

/// The checkpointing state for one program.
pub struct Capturer {
    engine: Engine<ShadowSpace>,
    marks: Marks,
    tracker: Tracker,
    query: PagemapQuery,
    pid: i32,
    page: usize,
    areas: Vec<AreaState>,
    /// Populated pages of the captured areas at the last capture.
    populated: Vec<PageRange>,
    /// Identities by (path, inode, mtime): a build-id is read once per file.
    file_ids: HashMap<(PathBuf, u64, i64), FileId>,
    /// The maps text and what was derived from it, reused while it does not change.
    layout: Option<(String, Vec<Vma>, Vec<FileId>)>,
    program: Option<FileId>,
    argv: Vec<String>,
    auxv: Vec<u64>,
    /// `clear_child_tid` per thread (set once by the C library when a thread starts).
    tid_addrs: HashMap<i32, u64>,
    /// brk at the last query, and the maps text then: asked again whenever the mappings
    /// changed (a brk that moves by whole pages changes them; glibc and the common allocators
    /// move it by whole pages only).
    brk: Option<(String, u64)>,
    children_seen: HashSet<i32>,
    last: Option<ProcessImage>,
    /// CRC-32C of the program's vdso (the kernel's code it calls into).
    vdso_crc: Option<u32>,
    recent: Vec<crate::image::EpochStat>,
    /// The program's exec count when the tracker was made.
    execs: u64,
    /// Program ranges a precopy could not copy (unmapped meanwhile): taken at the capture.
    precopy_failed: Vec<PageRange>,
    /// The maps `prepare` read, for the capture in the same stop.
    stopped_maps: Option<String>,
}

/// Checkpoints whose cost the image keeps.
const RECENT: usize = 16;

fn page_size() -> usize {
    kioku_track::page_size()
}

impl Capturer {
    /// A new checkpoint pool for the stopped program `tracee` (nothing captured yet).
    pub fn new(pool: Pool, tracee: &Tracee) -> Result<Capturer> {
        let marks = Marks::default();
        let mut engine = Engine::init(pool, ShadowSpace::new(marks.clone()))?;
        engine.set_adaptive(false)?;
        Capturer::assemble(engine, marks, tracee, vec![])
    }

    pub(crate) fn assemble(
        engine: Engine<ShadowSpace>,
        marks: Marks,
        tracee: &Tracee,
        areas: Vec<AreaState>,
    ) -> Result<Capturer> {
        let pid = tracee.pid();
        let tracker = kioku_proc::tracker_for(tracee)?;
        if tracker.backend() != kioku_track::BackendKind::UffdPagemapScan {
            return Err(RunError::Unsupported {
                what: "the kernel lacks userfaultfd async write-protect or PAGEMAP_SCAN (Linux ≥ 6.7); no way to find the pages another process wrote".into(),
            });
        }
        let query = PagemapQuery::open(pid)?;
        Ok(Capturer {
            engine,
            marks,
            tracker,
            query,
            pid,
            page: page_size(),
            areas,
            populated: vec![],
            file_ids: HashMap::new(),
            layout: None,
            program: None,
            argv: vec![],
            auxv: vec![],
            tid_addrs: HashMap::new(),
            brk: None,
            children_seen: HashSet::new(),
            last: None,
            vdso_crc: None,
            recent: vec![],
            execs: tracee.execs(),
            precopy_failed: vec![],
            stopped_maps: None,
        })
    }

    /// After a restore: the areas are in place in the program and equal to the running
    /// context; start tracking them afresh.
    pub(crate) fn track_restored(&mut self, image: &ProcessImage) -> Result<()> {
        self.recent = image.recent.clone();
        self.last = Some(image.clone());
        for a in self.areas.clone() {
            self.tracker.track(PageRange::new(a.start, a.end))?;
        }
        let mut pop = Vec::new();
        for a in &self.areas {
            self.query
                .scan(PageRange::new(a.start, a.end), Query::populated(), &mut pop)?;
        }
        normalize(&mut pop);
        self.populated = pop;
        Ok(())
    }

    pub fn engine(&self) -> &Engine<ShadowSpace> {
        &self.engine
    }

    pub fn pool_path(&self) -> &Path {
        self.engine.pool().path()
    }

    /// Bytes of the program's memory the pool holds.
    pub fn captured_bytes(&self) -> u64 {
        self.areas.iter().map(|a| (a.end - a.start) as u64).sum()
    }

    /// While the program is stopped, before [`Capturer::capture`]: when mappings that are not
    /// write-tracked yet (new, replaced, moved) hold at least `PRECOPY_MIN` bytes, registers
    /// them and returns their pages, to be copied by [`Capturer::precopy`] while the program
    /// runs; pages it writes meanwhile are found written at the capture and copied again. So a
    /// program's first checkpoint (or one after it mapped much new memory) does not stop it for
    /// the whole copy. `None`: nothing worth it, nothing changed.
    pub fn prepare(&mut self, tracee: &Tracee) -> Result<Option<Precopy>> {
        if tracee.execs() != self.execs {
            self.after_exec(tracee)?;
        }
        let maps_text = sys::read_proc(format!("/proc/{}/maps", self.pid))?;
        let (vmas, _) = self.layout(&maps_text)?;
        let want = area_ranges(&vmas);
        let mut estimate = Vec::new();
        for a in &want {
            self.query
                .scan(*a, Query::not_write_tracked(), &mut estimate)?;
        }
        normalize(&mut estimate);
        // Mostly nothing new: decided without reading more than the maps (which the capture,
        // in the same stop, reuses).
        if pages_in(&estimate) * self.page < PRECOPY_MIN || precopy_disabled() {
            self.stopped_maps = Some(maps_text);
            return Ok(None);
        }
        let mut pop = Vec::new();
        for r in &estimate {
            self.query.scan(*r, Query::populated(), &mut pop)?;
        }
        if pages_in(&pop) * self.page < PRECOPY_MIN {
            self.stopped_maps = Some(maps_text);
            return Ok(None);
        }
        // Refuse before changing anything, as the capture would.
        self.descriptors()?;
        let fresh = self.reconcile_areas(&want)?;
        let untracked = self.register_untracked(&want)?;
        let mut pre_pop = Vec::new();
        for r in &untracked {
            self.query.scan(*r, Query::populated(), &mut pre_pop)?;
        }
        normalize(&mut pre_pop);
        let (retake, zero) = self.whole_parts(&vmas, &untracked, &pre_pop, &fresh);
        // What is populated there now is what a later drop is measured against.
        let mut populated = subtract(&self.populated, &untracked);
        populated.extend_from_slice(&pre_pop);
        normalize(&mut populated);
        self.populated = populated;
        self.zero_shadow(&zero);
        let mut chunks = Vec::new();
        for r in &retake {
            self.shadow_chunks(*r, &mut chunks);
        }
        Ok(Some(Precopy { chunks }))
    }

    /// Copies what [`Capturer::prepare`] returned, while the program runs. A range the program
    /// unmaps meanwhile fails to copy; the capture then sees the change.
    pub fn precopy(&mut self, p: Precopy) -> u64 {
        let mut copied = 0;
        for c in p.chunks {
            // Whatever reached the running context is marked, even from a copy that failed
            // part-way; a failed chunk is copied again at the capture (where still mapped).
            self.marks.add(PageRange::new(c.1, c.1 + c.2));
            match sys::copy_pages(self.pid, &[c], true) {
                Ok(n) => copied += n,
                Err(_) => self.precopy_failed.push(PageRange::new(c.0, c.0 + c.2)),
            }
        }
        copied
    }

    /// Registers the parts of `want` that are not write-tracked; returns them.
    fn register_untracked(&mut self, want: &[PageRange]) -> Result<Vec<PageRange>> {
        let mut untracked = Vec::new();
        for a in want {
            self.query
                .scan(*a, Query::not_write_tracked(), &mut untracked)?;
        }
        normalize(&mut untracked);
        for r in &untracked {
            self.tracker.untrack(*r)?;
            self.tracker.track(*r)?;
        }
        Ok(untracked)
    }

    /// Of `untracked`: what to copy whole (populated, or file-backed) and what to zero in the
    /// running context (unpopulated anonymous pages whose region space is not fresh).
    fn whole_parts(
        &self,
        vmas: &[Vma],
        untracked: &[PageRange],
        populated: &[PageRange],
        fresh: &[PageRange],
    ) -> (Vec<PageRange>, Vec<PageRange>) {
        let mut whole_src: Vec<PageRange> = vmas
            .iter()
            .filter(|v| v.captured && matches!(v.backing, Backing::File { .. }))
            .map(|v| PageRange::new(v.start, v.end))
            .collect();
        whole_src.extend_from_slice(populated);
        normalize(&mut whole_src);
        let retake = intersect(untracked, &whole_src);
        let zero = subtract(&subtract(untracked, &whole_src), fresh);
        (retake, zero)
    }

    fn zero_shadow(&self, zero: &[PageRange]) {
        let mut zchunks = Vec::new();
        for r in zero {
            self.shadow_chunks(*r, &mut zchunks);
        }
        for &(_, local, len) in &zchunks {
            // SAFETY: `local..local+len` lies inside a region of the engine (mapped shared and
            // writable in this process, see `shadow_chunks`); nothing else refers to it now.
            unsafe { std::ptr::write_bytes(local as *mut u8, 0, len) };
            self.marks.add(PageRange::new(local, local + len));
        }
    }

    /// Captures the stopped program. Fails with `Unsupported` (changing nothing) when it holds
    /// something a checkpoint cannot bring back.
    pub fn capture(&mut self, tracee: &Tracee, stop_began: Instant) -> Result<Captured> {
        if tracee.execs() != self.execs {
            self.after_exec(tracee)?;
        }
        let pid = self.pid;
        let maps_text = match self.stopped_maps.take() {
            Some(t) => t,
            None => sys::read_proc(format!("/proc/{pid}/maps"))?,
        };
        // Descriptors and mappings first: refusing must leave the pool untouched.
        let t_start = Instant::now();
        let (fds, pipes) = self.descriptors()?;
        let t_fds = t_start.elapsed();
        let (vmas, files) = self.layout(&maps_text)?;
        self.note_children(tracee);

        // (1) Areas: runs of captured mappings; regions follow them.
        let want = area_ranges(&vmas);
        let t_layout = t_start.elapsed();
        let fresh = self.reconcile_areas(&want)?;

        // (2) Parts not write-tracked (new, replaced or moved mappings): register them and take
        // them whole.
        let untracked = self.register_untracked(&want)?;

        let t_tracked = t_start.elapsed();
        // (3) Written pages, and pages dropped since the last capture.
        let t_scan = Instant::now();
        let mut written = Vec::new();
        self.tracker.scan_into(&mut written)?;
        let scan_us = t_scan.elapsed().as_micros() as u64;
        let mut populated = Vec::new();
        for a in &want {
            self.query.scan(*a, Query::populated(), &mut populated)?;
        }
        normalize(&mut populated);
        let populated_us = t_scan.elapsed().as_micros() as u64 - scan_us;
        let dropped = intersect(&subtract(&self.populated, &populated), &want);
        self.populated = populated;

        // (4) What to copy: written ∪ dropped ∪ (untracked ∩ (populated ∪ file-backed)); what
        // to zero: untracked, unpopulated anonymous pages that are not fresh (fresh region
        // space is zero already).
        let (retake, zero) = self.whole_parts(&vmas, &untracked, &self.populated, &fresh);
        let mut copy = written.clone();
        copy.extend_from_slice(&dropped);
        copy.extend_from_slice(&retake);
        let mut failed = std::mem::take(&mut self.precopy_failed);
        normalize(&mut failed);
        copy.extend(intersect(&failed, &want));
        normalize(&mut copy);
        tracing::trace!(
            written = pages_in(&written),
            dropped = pages_in(&dropped),
            untracked = pages_in(&untracked),
            retake = pages_in(&retake),
            zero = pages_in(&zero),
            scan_us,
            populated_us,
            "pages"
        );

        let t_copy = Instant::now();
        let mut chunks = Vec::new();
        for r in &copy {
            self.shadow_chunks(*r, &mut chunks);
        }
        let copied = sys::copy_pages(pid, &chunks, true)?;
        for &(_, local, len) in &chunks {
            self.marks.add(PageRange::new(local, local + len));
        }
        self.zero_shadow(&zero);
        let copy_time = t_copy.elapsed();
        if verify_enabled() {
            self.verify(&vmas)?;
        }

        let t_copied = t_start.elapsed();
        // (5) Everything else.
        let threads = self.threads(tracee)?;
        let status = sys::read_proc(format!("/proc/{pid}/status"))?;
        let sigactions = self.sigactions(tracee, &status)?;
        let mm = self.mm_fields(tracee, &maps_text)?;
        if self.program.is_none() {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map_err(|e| RunError::io("reading /proc/PID/exe", e))?;
            self.program = Some(FileId::of(&exe)?);
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map_err(|e| RunError::io("reading /proc/PID/cmdline", e))?;
            self.argv = cmdline
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            let auxv = std::fs::read(format!("/proc/{pid}/auxv"))
                .map_err(|e| RunError::io("reading /proc/PID/auxv", e))?;
            self.auxv = auxv
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
        }
        if self.vdso_crc.is_none() {
            self.vdso_crc = vdso_crc(tracee)?;
        }
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .map_err(|e| RunError::io("reading /proc/PID/cwd", e))?;
        tracing::trace!(
            since_stop_us = (t_start - stop_began).as_micros() as u64,
            fds_us = t_fds.as_micros() as u64,
            layout_us = t_layout.as_micros() as u64,
            tracking_us = t_tracked.as_micros() as u64,
            copied_us = t_copied.as_micros() as u64,
            rest_us = t_start.elapsed().as_micros() as u64,
            "capture timing (cumulative from the capture's start)"
        );
        let image = ProcessImage {
            version: IMAGE_VERSION,
            program: self.program.clone().expect("set above"),
            argv: self.argv.clone(),
            cwd,
            pid,
            vmas,
            areas: self
                .areas
                .iter()
                .map(|a| Area {
                    start: a.start,
                    end: a.end,
                    region: a.region.clone(),
                })
                .collect(),
            mm,
            auxv: self.auxv.clone(),
            threads,
            sigactions,
            shared_pending: sys::status_mask(&status, "ShdPnd"),
            vdso_crc: self.vdso_crc,
            fds,
            pipes,
            files,
            finished: None,
            recent: vec![],
        };
        let written_pages: u64 = written.iter().map(|r| (r.len() / self.page) as u64).sum();
        let stats = CaptureStats {
            pages: copied / self.page as u64,
            written: written_pages,
            retaken: (copied / self.page as u64).saturating_sub(written_pages),
            precopied: 0,
            captured_bytes: self.captured_bytes(),
            areas: self.areas.len(),
            threads: image.threads.len(),
            stop: stop_began.elapsed(),
            copy: copy_time,
        };
        let mut image = image;
        self.recent.push(crate::image::EpochStat {
            epoch: self.engine.epoch() + 1,
            unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            copied_bytes: copied,
            stop_us: stats.stop.as_micros() as u64,
        });
        if self.recent.len() > RECENT {
            self.recent.remove(0);
        }
        image.recent = self.recent.clone();
        Ok(Captured { image, stats })
    }

    /// The program replaced itself (execve): a new address space, a new image. The old areas
    /// go at the next reconciliation; tracking starts over on the new memory.
    fn after_exec(&mut self, tracee: &Tracee) -> Result<()> {
        tracing::debug!(
            pid = self.pid,
            "program called execve: capturing the new image"
        );
        self.tracker = kioku_proc::tracker_for(tracee)?;
        self.query = PagemapQuery::open(self.pid)?;
        for a in std::mem::take(&mut self.areas) {
            self.engine.delete_region(&a.region)?;
        }
        self.populated.clear();
        self.layout = None;
        self.program = None;
        self.tid_addrs.clear();
        self.brk = None;
        self.vdso_crc = None;
        self.execs = tracee.execs();
        Ok(())
    }

    /// Makes a capture durable (the program may run meanwhile: the copy is the monitor's).
    pub fn commit(&mut self, c: Captured) -> Result<CheckpointReport> {
        let engine = self.engine.checkpoint(&c.image.encode())?;
        if verify_enabled() {
            for (region, page) in self.engine.contexts_differ() {
                tracing::error!(region, page, "the two contexts differ after a checkpoint");
            }
        }
        self.last = Some(c.image);
        Ok(CheckpointReport {
            epoch: engine.epoch,
            capture: c.stats,
            engine,
        })
    }

    /// Records that the program ended: `kioku restore` then refuses, saying so.
    pub fn finish(&mut self, how: String) -> Result<()> {
        let Some(mut image) = self.last.clone() else {
            return Ok(());
        };
        image.finished = Some(how);
        self.engine.checkpoint(&image.encode())?;
        Ok(())
    }

    /// Compares every captured page of the stopped program with the running context (a debugging
    /// aid, `KIOKU_VERIFY_CAPTURE=1`): a difference is a bug of the capture.
    pub(crate) fn verify(&self, vmas: &[Vma]) -> Result<()> {
        let ps = self.page;
        let mut buf = vec![0u8; ps];
        for a in &self.areas {
            let base = self.engine.region(&a.region).expect("region").addr;
            for page in (a.start..a.end).step_by(ps) {
                if sys::copy_pages(self.pid, &[(page, buf.as_mut_ptr() as usize, ps)], true)
                    .is_err()
                {
                    continue;
                }
                // SAFETY: a page inside the region's mapping.
                let shadow =
                    unsafe { std::slice::from_raw_parts((base + page - a.start) as *const u8, ps) };
                if shadow != &buf[..] {
                    let diff = shadow.iter().zip(&buf).filter(|(a, b)| a != b).count();
                    let zs = shadow.iter().all(|&x| x == 0);
                    let zb = buf.iter().all(|&x| x == 0);
                    tracing::error!(diff, shadow_zero = zs, program_zero = zb, "page difference");
                    let v = vmas.iter().find(|v| v.start <= page && page < v.end);
                    tracing::error!(page = format_args!("{page:#x}"), area = %a.region, vma = ?v, "capture differs from the program's memory");
                }
            }
        }
        Ok(())
    }

    /// Splits program range `r` (inside the areas) into (remote, shadow, len) chunks.
    fn shadow_chunks(&self, r: PageRange, out: &mut Vec<(usize, usize, usize)>) {
        let mut start = r.start;
        let mut i = self.areas.partition_point(|a| a.end <= start);
        while start < r.end && i < self.areas.len() {
            let a = &self.areas[i];
            if a.start >= r.end {
                break;
            }
            let lo = start.max(a.start);
            let hi = r.end.min(a.end);
            if lo < hi {
                let base = self
                    .engine
                    .region(&a.region)
                    .expect("every area has its region")
                    .addr;
                out.push((lo, base + (lo - a.start), hi - lo));
            }
            start = hi;
            i += 1;
        }
    }

    /// Makes the areas (and their regions) match `want`; returns the program ranges whose
    /// region space is new (zero) in this capture.
    fn reconcile_areas(&mut self, want: &[PageRange]) -> Result<Vec<PageRange>> {
        let mut fresh = Vec::new();
        let keep: HashSet<usize> = want.iter().map(|w| w.start).collect();
        for a in std::mem::take(&mut self.areas) {
            if keep.contains(&a.start) {
                self.areas.push(a);
            } else {
                self.tracker.untrack(PageRange::new(a.start, a.end))?;
                self.engine.delete_region(&a.region)?;
            }
        }
        let mut next = Vec::with_capacity(want.len());
        for w in want {
            match self.areas.iter().position(|a| a.start == w.start) {
                Some(i) => {
                    let mut a = self.areas[i].clone();
                    if a.end != w.end {
                        if w.end < a.end {
                            self.tracker.untrack(PageRange::new(w.end, a.end))?;
                        }
                        match self.engine.resize_region(&a.region, w.end - w.start) {
                            Ok(_) => {
                                if w.end > a.end {
                                    fresh.push(PageRange::new(a.end, w.end));
                                }
                            }
                            Err(kioku_ckpt::CkptError::BeyondReservation { .. }) => {
                                // A new region: nothing of the old one carries over, so the
                                // whole range must be taken again (untracked → retaken).
                                self.tracker.untrack(PageRange::new(a.start, a.end))?;
                                self.engine.delete_region(&a.region)?;
                                self.create_region(w)?;
                                fresh.push(*w);
                            }
                            Err(e) => return Err(e.into()),
                        }
                        a.end = w.end;
                    }
                    next.push(a);
                }
                None => {
                    self.create_region(w)?;
                    fresh.push(*w);
                    next.push(AreaState {
                        start: w.start,
                        end: w.end,
                        region: region_name(w.start),
                    });
                }
            }
        }
        self.areas = next;
        normalize(&mut fresh);
        Ok(fresh)
    }

    fn create_region(&mut self, w: &PageRange) -> Result<()> {
        let len = w.end - w.start;
        self.engine.create_region(
            &region_name(w.start),
            len,
            RegionOptions {
                addr: None,
                reserve: Some((2 * len).max(64 << 20)),
            },
        )?;
        Ok(())
    }

    /// The mappings, which of them are captured, and the files they map.
    fn layout(&mut self, maps_text: &str) -> Result<(Vec<Vma>, Vec<FileId>)> {
        if let Some((text, vmas, files)) = &self.layout {
            if text == maps_text {
                // Same mappings: a private file mapping captured because it had copied pages
                // stays captured; nothing else can have changed.
                return Ok((vmas.clone(), files.clone()));
            }
        }
        let maps = kioku_proc::parse_maps(maps_text)?;
        let mut vmas = Vec::with_capacity(maps.len());
        let mut files: Vec<FileId> = Vec::new();
        let mut file_index: HashMap<PathBuf, usize> = HashMap::new();
        for m in &maps {
            let Some((backing, captured)) = self.classify(m)? else {
                continue;
            };
            let backing = match backing {
                Some(path) => {
                    let index = match file_index.get(&path) {
                        Some(&i) => i,
                        None => {
                            let id = self.file_id(&path)?;
                            files.push(id);
                            file_index.insert(path.clone(), files.len() - 1);
                            files.len() - 1
                        }
                    };
                    Backing::File {
                        index,
                        offset: m.offset,
                    }
                }
                None => match &m.kind {
                    MapKind::Vdso => Backing::Special {
                        name: "[vdso]".into(),
                    },
                    MapKind::Vvar => Backing::Special {
                        name: "[vvar]".into(),
                    },
                    _ => Backing::Anonymous,
                },
            };
            vmas.push(Vma {
                start: m.start,
                end: m.end,
                read: m.perms.read,
                write: m.perms.write,
                exec: m.perms.exec,
                shared: m.perms.shared,
                grows_down: m.kind == MapKind::Stack,
                backing,
                captured,
            });
        }
        self.layout = Some((maps_text.to_string(), vmas.clone(), files.clone()));
        Ok((vmas, files))
    }

    /// `None`: not part of the image (vsyscall, uprobes). Else (file path, captured).
    #[allow(clippy::type_complexity)]
    fn classify(&mut self, m: &MapEntry) -> Result<Option<(Option<PathBuf>, bool)>> {
        let any = m.perms.read || m.perms.write || m.perms.exec;
        let unsupported = |what: String| Err(RunError::Unsupported { what });
        match &m.kind {
            MapKind::Vsyscall => Ok(None),
            MapKind::Vdso | MapKind::Vvar => Ok(Some((None, false))),
            MapKind::Special(name) if !name.starts_with("[anon:") => {
                if name == "[uprobes]" {
                    Ok(None)
                } else {
                    unsupported(format!(
                        "mapping {:#x}-{:#x} is the kernel's {name}",
                        m.start, m.end
                    ))
                }
            }
            MapKind::Anonymous | MapKind::Heap | MapKind::Stack | MapKind::Special(_) => {
                if m.perms.shared {
                    return unsupported(format!(
                        "mapping {:#x}-{:#x} is shared anonymous memory (its other users are not checkpointed)",
                        m.start, m.end
                    ));
                }
                // PROT_NONE memory (guard pages, reservations) comes back empty.
                Ok(Some((None, any)))
            }
            MapKind::File { path, deleted } => {
                let name = path.to_string_lossy();
                if *deleted || name.starts_with("/memfd:") || name.starts_with("/SYSV") {
                    return unsupported(format!(
                        "mapping {:#x}-{:#x} maps {} which cannot be opened again",
                        m.start,
                        m.end,
                        path.display()
                    ));
                }
                if m.perms.shared {
                    // Its contents live in the file; it is mapped again at restore.
                    return Ok(Some((Some(path.clone()), false)));
                }
                let captured = if m.perms.write {
                    true
                } else if !any {
                    false
                } else if self
                    .areas
                    .iter()
                    .any(|a| a.start <= m.start && m.end <= a.end)
                {
                    true
                } else {
                    // Read-only private file memory the program (or its loader) wrote before
                    // protecting it — relocations (RELRO), patched code — has copied pages.
                    let mut anon = Vec::new();
                    self.query.scan(
                        PageRange::new(m.start, m.end),
                        Query::anonymous(),
                        &mut anon,
                    )?;
                    !anon.is_empty()
                };
                Ok(Some((Some(path.clone()), captured)))
            }
        }
    }

    fn file_id(&mut self, path: &Path) -> Result<FileId> {
        let md = std::fs::metadata(path)
            .map_err(|e| RunError::io(format!("stat {}", path.display()), e))?;
        let key = (
            path.to_path_buf(),
            md.ino(),
            md.mtime_nsec() + md.mtime() * 1_000_000_000,
        );
        if let Some(id) = self.file_ids.get(&key) {
            return Ok(id.clone());
        }
        let id = FileId::of(path)?;
        self.file_ids.insert(key, id.clone());
        Ok(id)
    }

    /// Children of the program run on their own private memory, untraced: say so once each.
    fn note_children(&mut self, tracee: &Tracee) {
        for tid in tracee.threads() {
            let Ok(text) =
                std::fs::read_to_string(format!("/proc/{}/task/{tid}/children", self.pid))
            else {
                continue;
            };
            for child in text
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                if self.children_seen.insert(child) {
                    tracing::warn!(
                        pid = self.pid,
                        child,
                        "the program started child process {child}; it runs outside kioku and is not checkpointed (a restore brings back the parent only)"
                    );
                }
            }
        }
    }

    fn descriptors(&self) -> Result<(Vec<FdImage>, Vec<PipeImage>)> {
        let pid = self.pid;
        let dir = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map_err(|e| RunError::io("listing /proc/PID/fd", e))?;
        let mut fds: Vec<i32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        fds.sort_unstable();
        let mut out = Vec::with_capacity(fds.len());
        // Pipes by inode: (read ends, write ends).
        let mut pipes: HashMap<u64, (Vec<i32>, Vec<i32>)> = HashMap::new();
        for fd in fds {
            let link = format!("/proc/{pid}/fd/{fd}");
            let Ok(target) = std::fs::read_link(&link) else {
                continue; // closed meanwhile
            };
            let info = sys::read_proc(format!("/proc/{pid}/fdinfo/{fd}"))?;
            let field = |k: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
                    .map(|v| v.trim().to_string())
            };
            let pos: u64 = field("pos").and_then(|v| v.parse().ok()).unwrap_or(0);
            let flags = field("flags")
                .and_then(|v| i32::from_str_radix(&v, 8).ok())
                .unwrap_or(0);
            let md = std::fs::metadata(&link);
            let ft = md.as_ref().map(|m| m.file_type());
            let name = target.to_string_lossy().into_owned();
            let pipe_ino = name
                .strip_prefix("pipe:[")
                .and_then(|x| x.strip_suffix(']'))
                .and_then(|x| x.parse::<u64>().ok());
            let kind = match ft {
                Ok(t) if (t.is_file() || t.is_dir()) && !name.ends_with(" (deleted)") => {
                    FdKind::File {
                        path: target.clone(),
                        size: md.as_ref().map(|m| m.len()).unwrap_or(0),
                    }
                }
                _ if fd <= 2 && !name.ends_with(" (deleted)") => FdKind::Inherited,
                Ok(t) if std::os::unix::fs::FileTypeExt::is_char_device(&t)
                    && STATELESS_DEVICES.contains(&name.as_str()) =>
                {
                    FdKind::Device { path: target }
                }
                _ if pipe_ino.is_some() => {
                    let id = pipe_ino.expect("checked");
                    let ends = pipes.entry(id).or_default();
                    let write = flags & libc::O_ACCMODE == libc::O_WRONLY;
                    if write {
                        ends.1.push(fd);
                    } else {
                        ends.0.push(fd);
                    }
                    FdKind::Pipe { id, write }
                }
                _ => {
                    return Err(RunError::Unsupported {
                        what: format!(
                            "descriptor {fd} is {name}; only regular files, directories, stateless devices, pipes within the program and the standard streams can be checkpointed"
                        ),
                    })
                }
            };
            out.push(FdImage {
                fd,
                flags,
                pos,
                kind,
            });
        }
        // A pipe comes back only when the program holds both its ends (a self-pipe): the
        // other end of any other pipe is a process kioku does not checkpoint.
        let mut images = Vec::new();
        let mut ids: Vec<_> = pipes.into_iter().collect();
        ids.sort_unstable_by_key(|x| x.0);
        for (id, (readers, writers)) in ids {
            if readers.is_empty() || writers.is_empty() {
                let fd = readers.first().or(writers.first()).expect("one end");
                return Err(RunError::Unsupported {
                    what: format!(
                        "descriptor {fd} is pipe:[{id}] whose other end is in another process"
                    ),
                });
            }
            let (data, size) = sys::pipe_contents(pid, readers[0])?;
            images.push(PipeImage {
                id,
                capacity: size,
                data: hex(&data),
            });
        }
        Ok((out, images))
    }

    fn threads(&mut self, tracee: &Tracee) -> Result<Vec<ThreadImage>> {
        let pid = self.pid;
        let mut tids = tracee.threads();
        // The leader first.
        tids.sort_by_key(|&t| (t != pid, t));
        self.tid_addrs.retain(|t, _| tids.contains(t));
        let mut out = Vec::with_capacity(tids.len());
        for tid in tids {
            let state = tracee.thread_state(tid)?;
            let status = sys::read_proc(format!("/proc/{pid}/task/{tid}/status"))?;
            let tid_address = match self.tid_addrs.get(&tid) {
                Some(&a) => a,
                None => {
                    let a = tid_address(tracee, tid)?;
                    self.tid_addrs.insert(tid, a);
                    a
                }
            };
            out.push(ThreadImage {
                tid,
                state: hex(&state.to_bytes()),
                sigmask: sys::get_sigmask(tid)?,
                pending: sys::status_mask(&status, "SigPnd"),
                tid_address,
                robust_list: sys::robust_list(tid)?,
                rseq: sys::rseq_config(tid)?,
            });
        }
        Ok(out)
    }

    fn sigactions(&self, tracee: &Tracee, status: &str) -> Result<Vec<SigAction>> {
        let set = sys::status_mask(status, "SigCgt") | sys::status_mask(status, "SigIgn");
        let mut out = Vec::new();
        if set == 0 {
            return Ok(out);
        }
        let tid = tracee.control_thread()?;
        for sig in 1..=64 {
            if set & (1u64 << (sig - 1)) == 0 {
                continue;
            }
            let mut act = [0u8; 32];
            tracee.with_remote_bytes(tid, &act.clone(), |at| {
                tracee.syscall(tid, libc::SYS_rt_sigaction, &[sig as u64, 0, at as u64, 8])?;
                tracee.read_mem(at, &mut act)
            })?;
            let w = |i: usize| u64::from_le_bytes(act[i * 8..i * 8 + 8].try_into().expect("8"));
            out.push(SigAction {
                sig,
                handler: w(0),
                flags: w(1),
                restorer: w(2),
                mask: w(3),
            });
        }
        Ok(out)
    }

    fn mm_fields(&mut self, tracee: &Tracee, maps_text: &str) -> Result<MmFields> {
        let stat = sys::read_proc(format!("/proc/{}/stat", self.pid))?;
        // Fields after the command name (which may hold spaces): field 3 is the first.
        let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse::<i64>().unwrap_or(0) as u64)
            .collect();
        let at = |n: usize| f.get(n - 3).copied().unwrap_or(0);
        let start_brk = at(47);
        let brk = match &self.brk {
            Some((text, brk)) if text == maps_text => *brk,
            _ => {
                let tid = tracee.control_thread()?;
                let b = tracee.syscall(tid, libc::SYS_brk, &[0])?;
                self.brk = Some((maps_text.to_string(), b));
                b
            }
        };
        Ok(MmFields {
            start_code: at(26),
            end_code: at(27),
            start_stack: at(28),
            start_data: at(45),
            end_data: at(46),
            start_brk,
            brk,
            arg_start: at(48),
            arg_end: at(49),
            env_start: at(50),
            env_end: at(51),
        })
    }
}

/// `prctl(PR_GET_TID_ADDRESS)` in thread `tid`.
fn tid_address(tracee: &Tracee, tid: i32) -> Result<u64> {
    const PR_GET_TID_ADDRESS: u64 = 40;
    let mut b = [0u8; 8];
    tracee.with_remote_bytes(tid, &b.clone(), |at| {
        tracee.syscall(tid, libc::SYS_prctl, &[PR_GET_TID_ADDRESS, at as u64])?;
        tracee.read_mem(at, &mut b)
    })?;
    Ok(u64::from_le_bytes(b))
}

/// Runs of adjacent captured mappings.
fn area_ranges(vmas: &[Vma]) -> Vec<PageRange> {
    let mut want: Vec<PageRange> = Vec::new();
    for v in vmas.iter().filter(|v| v.captured) {
        match want.last_mut() {
            Some(l) if l.end == v.start => l.end = v.end,
            _ => want.push(PageRange::new(v.start, v.end)),
        }
    }
    want
}

fn pages_in(v: &[PageRange]) -> usize {
    v.iter().map(|r| r.len()).sum::<usize>() / page_size()
}

pub(crate) fn region_name(start: usize) -> String {
    format!("a{start:x}")
}

/// CRC-32C of the vdso of `tracee`, if it has one.
pub(crate) fn vdso_crc(tracee: &Tracee) -> Result<Option<u32>> {
    let Some(v) = tracee.maps()?.into_iter().find(|m| m.kind == MapKind::Vdso) else {
        return Ok(None);
    };
    let mut b = vec![0u8; v.end - v.start];
    tracee.read_mem(v.start, &mut b)?;
    Ok(Some(crc32c::crc32c(&b)))
}

/// `KIOKU_NO_PRECOPY=1`: copy new memory while the program is stopped (for comparisons).
fn precopy_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("KIOKU_NO_PRECOPY").is_some_and(|v| v == "1"))
}

pub(crate) fn verify_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KIOKU_VERIFY_CAPTURE").is_some_and(|v| v == "1"))
}
