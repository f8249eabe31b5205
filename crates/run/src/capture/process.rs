//! Checkpointing one stopped process of the tree: which of its memory to capture, which pages
//! changed, copying them into the engine's running context, and everything else a restore
//! needs (layout, registers, signals, descriptors, its place in the tree) as a
//! [`ProcessImage`].
//!
//! The program's memory stays its own private memory, exactly as without kioku: `fork`,
//! `MADV_DONTNEED`, `mremap`, `brk` behave as the kernel defines them, with nothing to intercept.
//! The pool holds the two contexts: the monitor copies the pages written since the last
//! checkpoint into the running context (the only work while the program is stopped), resumes
//! the program, and lets the engine make them durable and sync the other context meanwhile.
//!
//! Which pages: userfaultfd async write-protect on every captured mapping (a userfaultfd made
//! in the process, held by the monitor) and `PAGEMAP_SCAN` from outside, plus two corrections
//! the write-protect bits alone would miss:
//! * a page that was populated at the last checkpoint and is not now was dropped
//!   (`MADV_DONTNEED`, `MADV_FREE` reclaimed): it reads as zero (or as the file) again;
//! * a mapping that is not write-tracked any more was replaced (`munmap` + `mmap`, `mremap`,
//!   which drop the registration): all of it is taken again.
//!
//! Shared mappings (MAP_SHARED memory, memfds, files mapped shared) are tracked the same way
//! but their pages go to the region of their shared-memory object ([`super::shared`]), which
//! every process mapping the object writes into; dropped pages there keep their contents (the
//! object holds them), so only the first correction is skipped.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kioku_ckpt::{Engine, RegionOptions};
use kioku_proc::{MapEntry, MapKind, Tracee};
use kioku_track::{PageRange, PageTracker, PagemapQuery, Query, Tracker};

use super::shared::SharedObjects;
use crate::error::{Result, RunError};
use crate::image::{
    hex, Area, Backing, FileId, MmFields, ProcessImage, SigAction, ThreadImage, Vma,
};
use crate::remote::TracedRemote;
use crate::shadow::{Marks, ShadowSpace};
use crate::sys::{self, intersect, normalize, subtract};

/// One captured area and the region holding it.
#[derive(Clone, Debug)]
pub(crate) struct AreaState {
    pub start: usize,
    pub end: usize,
    pub region: String,
}

/// What the engine side of a capture needs: the engine (regions) and the marks of the pages
/// copied into them.
pub(crate) struct Store<'a> {
    pub engine: &'a mut Engine<ShadowSpace>,
    pub marks: &'a Marks,
    pub shared: &'a mut SharedObjects,
    /// Identities by (path, inode, mtime): a build-id is read once per file.
    pub file_ids: &'a mut HashMap<(PathBuf, u64, i64), FileId>,
    /// Where a stop's copies go first for a pool on a disk file (see `super::staging`).
    pub staging: &'a mut Option<super::staging::Staging>,
}

/// Pages to copy while the program runs ([`ProcessCapture::prepare`]): (program, shadow,
/// length).
pub(crate) struct Precopy {
    pub pid: i32,
    chunks: Vec<(usize, usize, usize)>,
}

impl Precopy {
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.2 as u64).sum()
    }
}

/// Anonymous memory is captured in aligned pieces of this size around the pages it holds.
const AREA_GRANULE: usize = 2 << 20;
/// Untouched stretches up to this long between captured pieces are captured too (holes in the
/// pool, 4 bytes of checksum a page) rather than splitting the area.
const AREA_GAP: usize = 64 << 20;

/// Below this much to copy for new mappings, the capture copies them while the program is
/// stopped (a second stop would cost more).
pub const PRECOPY_MIN: usize = 8 << 20;

/// What one capture of a process copied.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProcessStats {
    pub copied: u64,
    pub written_pages: u64,
    pub captured_bytes: u64,
    pub areas: usize,
    pub threads: usize,
    /// Pages found different from the program's memory (`KIOKU_VERIFY_CAPTURE=1`), each
    /// described; reported once the capture knows whether a process died meanwhile.
    pub mismatches: Vec<String>,
}

/// A shared mapping of the process: its range and where it lies in its object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SharedVma {
    range: PageRange,
    object: u32,
    offset: u64,
}

/// The mappings as derived from one maps text.
struct Layout {
    maps_text: String,
    vmas: Vec<Vma>,
    files: Vec<FileId>,
    shared: Vec<SharedVma>,
}

/// The layout a survey found, for the copy in the same stop.
struct Survey {
    maps_text: String,
    vmas: Vec<Vma>,
    files: Vec<FileId>,
    /// [`ProcessCapture::wanted_areas`] of this stop, once computed: (areas wanted, pages
    /// populated in the captured mappings). The tree has not run since, so the capture
    /// reuses them (one `PAGEMAP_SCAN` per area less, twice).
    want: Option<(Vec<PageRange>, Vec<PageRange>)>,
}

/// The checkpointing state of one process of the tree.
pub(crate) struct ProcessCapture {
    tracker: Tracker,
    query: PagemapQuery,
    /// Process id as the monitor sees it.
    pub pid: i32,
    /// Process id in the tree's namespace (names regions; what the image records).
    pub image_pid: i32,
    page: usize,
    pub areas: Vec<AreaState>,
    /// Populated pages of the captured areas at the last capture.
    populated: Vec<PageRange>,
    /// The maps text and what was derived from it, reused while it does not change.
    layout: Option<Layout>,
    shared_vmas: Vec<SharedVma>,
    program: Option<FileId>,
    argv: Vec<String>,
    auxv: Vec<u64>,
    /// `clear_child_tid` per thread (set once by the C library when a thread starts).
    tid_addrs: HashMap<i32, u64>,
    /// brk at the last query, and the maps text then: asked again whenever the mappings
    /// changed (a brk that moves by whole pages changes them; glibc and the common allocators
    /// move it by whole pages only).
    brk: Option<(String, u64)>,
    /// CRC-32C of the process's vdso (the kernel's code it calls into).
    vdso_crc: Option<u32>,
    /// The process's exec count when the tracker was made.
    execs: u64,
    /// Program ranges a precopy could not copy (unmapped meanwhile): taken at the capture.
    precopy_failed: Vec<PageRange>,
    survey: Option<Survey>,
    /// By area start: consecutive captures that found at least `HOT_FRACTION` of the area
    /// written.
    hot: HashMap<usize, u32>,
    /// By area start: areas not write-tracked because nearly all of them is written between
    /// checkpoints; each capture copies their populated pages. Value: captures left before
    /// tracking them again. See [`HOT_FRACTION`].
    whole: HashMap<usize, u32>,
    /// The process runs the filter that traps the calls changing its kernel state (set by the
    /// capturer): `kernel` may stand in for injected calls while `state_dirty` is false.
    pub state_watched: bool,
    /// A trapped call may have changed the kernel state since the last capture.
    state_dirty: bool,
    /// The kernel state the last capture read.
    kernel: Option<KernelCache>,
    /// The parent's pid (as the monitor sees it) and its id in the tree's namespace.
    parent: Option<(i32, i32)>,
    /// `/proc/PID/maps` and `/proc/PID/stat`, kept open (opened again after an exec).
    maps_file: Option<sys::ProcFile>,
    stat_file: Option<sys::ProcFile>,
    /// `/proc/PID/task/TID/status` by thread, kept open while the thread lives.
    status_files: HashMap<i32, sys::ProcFile>,
    /// A capture failed after it may have consumed write-protect bits it did not copy the
    /// pages of: the next capture copies the captured areas whole ([`ProcessCapture::retake_all`]).
    retake: bool,
}

/// `slot`'s file, opened at `path` first if need be, read from its start.
fn read_kept(
    slot: &mut Option<sys::ProcFile>,
    path: impl FnOnce() -> String,
    record: bool,
) -> Result<String> {
    match slot {
        Some(f) => f.read(),
        None => slot.insert(sys::ProcFile::open(path(), record)?).read(),
    }
}

/// Kernel state as the last capture read it, reused while no call that changes it ran (see
/// `procstate::capture_process_since`); what changes by itself is read again every time.
struct KernelCache {
    process: crate::procstate::ProcessState,
    threads: HashMap<i32, crate::procstate::ThreadState>,
    /// `SigCgt | SigIgn` when `sigactions` was read: a handler the kernel resets on delivery
    /// (SA_RESETHAND) changes them.
    handled: u64,
    sigactions: Vec<SigAction>,
    /// Each thread's robust list and rseq area (set only by calls the filter traps).
    fixed: HashMap<i32, ThreadFixed>,
}

/// A thread's robust list and rseq registration, as [`ThreadImage`] holds them.
type ThreadFixed = ((u64, u64), (u64, u32, u32));

/// An area of which at least this share was written in `HOT_STREAK` consecutive captures is
/// no longer write-tracked: each capture copies its populated pages instead. The program
/// then takes no write-protect fault there after it resumes (≈ 1–2 µs per page and epoch,
/// paid by the program and invisible in the stop), while copying a page costs ≈ 0.3 µs in the
/// stop — but every page copied also costs the monitor its write into the pool, its copy into
/// the other context and its checksum after the resume (≈ 4–5 µs a page in all, measured on
/// xz): taken whole, the unwritten pages cost that too. At a quarter (the share used before),
/// xz -T2, writing about half of its memory each second, was taken whole: 249 MiB copied per
/// checkpoint instead of 135, 1.5× the monitor's CPU and a longer stop with its faults
/// counted (docs/perf.md, run-xz). Past about three quarters, copying all costs less.
const HOT_FRACTION: f64 = 0.75;
const HOT_STREAK: u32 = 3;
/// Captures an area is taken whole before it is tracked again, to see whether its writes
/// became sparse.
const WHOLE_FOR: u32 = 64;

fn page_size() -> usize {
    kioku_track::page_size()
}

impl ProcessCapture {
    /// Starts checkpointing stopped process `tracee` (`image_pid`: its id in the namespace),
    /// whose captured areas are `areas` (empty for a process new to the pool).
    pub fn new(tracee: &Tracee, image_pid: i32, areas: Vec<AreaState>) -> Result<ProcessCapture> {
        let tracker = kioku_proc::tracker_for(tracee)?;
        Self::with_tracker(tracee, image_pid, areas, tracker)
    }

    /// [`ProcessCapture::new`] tracking through `uffd`, a userfaultfd of the process set up
    /// already (a restore by mapping's, which must be the one tracking writes: a range is
    /// registered with one userfaultfd only).
    pub(crate) fn with_uffd(
        tracee: &Tracee,
        image_pid: i32,
        areas: Vec<AreaState>,
        uffd: std::os::fd::OwnedFd,
    ) -> Result<ProcessCapture> {
        let tracker = kioku_track::Tracker::builder()
            .process(tracee.pid(), uffd)
            .build()?;
        Self::with_tracker(tracee, image_pid, areas, tracker)
    }

    fn with_tracker(
        tracee: &Tracee,
        image_pid: i32,
        areas: Vec<AreaState>,
        tracker: kioku_track::Tracker,
    ) -> Result<ProcessCapture> {
        let pid = tracee.pid();
        if tracker.backend() != kioku_track::BackendKind::UffdPagemapScan {
            return Err(RunError::Unsupported {
                what: "the kernel lacks userfaultfd async write-protect or PAGEMAP_SCAN (Linux ≥ 6.7); no way to find the pages another process wrote".into(),
            });
        }
        let query = PagemapQuery::open(pid)?;
        Ok(ProcessCapture {
            tracker,
            query,
            pid,
            image_pid,
            page: page_size(),
            areas,
            populated: vec![],
            layout: None,
            shared_vmas: vec![],
            program: None,
            argv: vec![],
            auxv: vec![],
            tid_addrs: HashMap::new(),
            brk: None,
            vdso_crc: None,
            execs: tracee.execs(),
            precopy_failed: vec![],
            survey: None,
            hot: HashMap::new(),
            whole: HashMap::new(),
            state_watched: false,
            state_dirty: false,
            kernel: None,
            parent: None,
            maps_file: None,
            stat_file: None,
            status_files: HashMap::new(),
            retake: false,
        })
    }

    /// A trapped call may change the process's kernel state: the next capture reads it all.
    pub fn state_changed(&mut self) {
        self.state_dirty = true;
    }

    /// After a restore: the areas are in place in the process and equal to the running
    /// context, and its shared mappings equal their objects; start tracking them afresh.
    pub fn track_restored(&mut self, image: &ProcessImage) -> Result<()> {
        let areas: Vec<PageRange> = self
            .areas
            .iter()
            .map(|a| PageRange::new(a.start, a.end))
            .collect();
        // Registered as whole mappings (as the lazy restore did: no mapping split), tracked in
        // the areas.
        let mut mappings = whole_mappings(&areas, &image.vmas);
        mappings = subtract(&mappings, &areas);
        self.register_whole(&mappings)?;
        for r in areas {
            self.tracker.track(r)?;
        }
        let mut shared = Vec::new();
        for v in &image.vmas {
            if let Backing::Shared { object, offset } = v.backing {
                let range = PageRange::new(v.start, v.end);
                self.tracker.track(range)?;
                shared.push(SharedVma {
                    range,
                    object,
                    offset,
                });
            }
        }
        self.shared_vmas = shared;
        let mut pop = Vec::new();
        for a in &self.areas {
            self.query
                .scan(PageRange::new(a.start, a.end), Query::populated(), &mut pop)?;
        }
        normalize(&mut pop);
        self.populated = pop;
        Ok(())
    }

    /// After a restore by mapping filled every page: the pages populated as of the checkpoint
    /// are those present now plus `dropped`, which the program dropped before they were filled
    /// (so the next capture finds those zero, as the program reads them).
    pub fn restored_populated(&mut self, dropped: &[PageRange]) -> Result<()> {
        let mut pop = dropped.to_vec();
        for a in &self.areas {
            self.query
                .scan(PageRange::new(a.start, a.end), Query::populated(), &mut pop)?;
        }
        normalize(&mut pop);
        self.populated = pop;
        Ok(())
    }

    /// Bytes of the process's memory the pool holds.
    pub fn captured_bytes(&self) -> u64 {
        self.areas.iter().map(|a| (a.end - a.start) as u64).sum()
    }

    /// Every engine region of this process (to delete them when it is gone).
    pub fn regions(&self) -> Vec<String> {
        self.areas.iter().map(|a| a.region.clone()).collect()
    }

    /// First look at the stopped process in a checkpoint's stop: its mappings (registering the
    /// shared-memory objects it maps). Fails with `Unsupported`, changing nothing durable, when
    /// it maps something a checkpoint cannot bring back.
    pub fn survey(&mut self, tracee: &Tracee, st: &mut Store<'_>) -> Result<()> {
        if tracee.execs() != self.execs {
            self.after_exec(tracee, st)?;
        }
        let pid = self.pid;
        let maps_text = read_kept(&mut self.maps_file, || format!("/proc/{pid}/maps"), false)?;
        let (vmas, files) = self.layout(&maps_text, st)?;
        self.survey = Some(Survey {
            maps_text,
            vmas,
            files,
            want: None,
        });
        Ok(())
    }

    /// While the process is stopped, after [`ProcessCapture::survey`] and before
    /// [`ProcessCapture::capture`]: when mappings that are not write-tracked yet (new, replaced,
    /// moved) hold at least `PRECOPY_MIN` bytes, registers them and returns their pages, to be
    /// copied by [`ProcessCapture::precopy`] while the process runs; pages it writes meanwhile
    /// are found written at the capture and copied again. So a process's first checkpoint (or
    /// one after it mapped much new memory) does not stop it for the whole copy. `None`:
    /// nothing worth it.
    pub fn prepare(&mut self, st: &mut Store<'_>) -> Result<Option<Precopy>> {
        let vmas = match &self.survey {
            Some(s) => s.vmas.clone(),
            None => return Ok(None),
        };
        let (want, pop) = self.wanted_areas(&vmas)?;
        if let Some(s) = self.survey.as_mut() {
            s.want = Some((want.clone(), pop));
        }
        let mut estimate = Vec::new();
        let tracked = self.tracked_part(&want);
        scan_ranges(
            &mut self.query,
            &tracked,
            Query::not_write_tracked(),
            &vmas,
            &mut estimate,
        )?;
        normalize(&mut estimate);
        if pages_in(&estimate) * self.page < PRECOPY_MIN || precopy_disabled() {
            return Ok(None);
        }
        let mut pop = Vec::new();
        for r in &estimate {
            self.query.scan(*r, Query::populated(), &mut pop)?;
        }
        if pages_in(&pop) * self.page < PRECOPY_MIN {
            return Ok(None);
        }
        let fresh = self.reconcile_areas(&want, st)?;
        let untracked = self.register_untracked(&self.tracked_part(&want), &vmas)?;
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
        self.zero_shadow(&zero, st)?;
        let mut chunks = Vec::new();
        for r in &retake {
            self.shadow_chunks(*r, st, &mut chunks);
        }
        allocate_shadow(&chunks, st)?;
        Ok(Some(Precopy {
            pid: self.pid,
            chunks,
        }))
    }

    /// Copies what [`ProcessCapture::prepare`] returned, while the process runs. A range the
    /// process unmaps meanwhile fails to copy; the capture then sees the change.
    pub fn precopy(
        &mut self,
        p: Precopy,
        marks: &Marks,
        mut staging: Option<(
            &mut super::staging::Staging,
            &mut kioku_ckpt::Engine<crate::shadow::ShadowSpace>,
        )>,
    ) -> u64 {
        let mut copied = 0;
        // Staged in pieces: the staging memory stays small while the tree runs.
        const PIECE: usize = 32 << 20;
        let pieces: Vec<(usize, usize, usize)> = if staging.is_some() {
            p.chunks
                .iter()
                .flat_map(|&(r, l, n)| {
                    (0..n)
                        .step_by(PIECE)
                        .map(move |o| (r + o, l + o, PIECE.min(n - o)))
                })
                .collect()
        } else {
            p.chunks
        };
        for c in pieces {
            // Whatever reached the running context is marked, even from a copy that failed
            // part-way; a failed chunk is copied again at the capture (where still mapped).
            marks.add(PageRange::new(c.1, c.1 + c.2));
            let r = match staging.as_mut() {
                // A pool on a disk file: through staging memory and large writes, as in the
                // stop (much faster than storing into the shared file mapping).
                Some((s, engine)) => s.stage(&[c]).and_then(|staged| {
                    let r = sys::copy_pages(self.pid, &staged, true);
                    if r.is_err() {
                        s.unstage(1);
                    }
                    let n = r?;
                    s.write_out(engine)?;
                    Ok(n)
                }),
                None => sys::copy_pages(self.pid, &[c], true),
            };
            match r {
                Ok(n) => copied += n,
                Err(_) => self.precopy_failed.push(PageRange::new(c.0, c.0 + c.2)),
            }
        }
        copied
    }

    /// The ranges of the areas taken whole (not write-tracked on purpose).
    fn whole_ranges(&self) -> Vec<PageRange> {
        self.areas
            .iter()
            .filter(|a| self.whole.contains_key(&a.start))
            .map(|a| PageRange::new(a.start, a.end))
            .collect()
    }

    /// `want` without the areas taken whole.
    fn tracked_part(&self, want: &[PageRange]) -> Vec<PageRange> {
        subtract(want, &self.whole_ranges())
    }

    /// At each capture: forgets areas gone, and tracks again the areas taken whole long
    /// enough (this capture then registers them and takes their populated pages).
    fn whole_tick(&mut self) {
        let areas = &self.areas;
        self.whole
            .retain(|start, _| areas.iter().any(|a| a.start == *start));
        self.hot
            .retain(|start, _| areas.iter().any(|a| a.start == *start));
        self.whole.retain(|_, left| {
            *left = left.saturating_sub(1);
            *left > 0
        });
    }

    /// After a capture's copy: an area of which at least `HOT_FRACTION` of the populated pages
    /// were written in `HOT_STREAK` consecutive captures stops being write-tracked (its
    /// registration and write-protection are dropped, so the program takes no fault there).
    fn adapt_tracking(&mut self, written: &[PageRange], vmas: &[Vma]) -> Result<()> {
        if adaptive_disabled() {
            return Ok(());
        }
        let mut to_whole = Vec::new();
        for a in &self.areas {
            if self.whole.contains_key(&a.start) {
                continue;
            }
            let range = [PageRange::new(a.start, a.end)];
            let pop = pages_in(&intersect(&self.populated, &range));
            let wrote = pages_in(&intersect(written, &range));
            // Small areas cost little either way; keep them exact.
            let hot = pop >= 256 && wrote as f64 >= HOT_FRACTION * pop as f64;
            let streak = self.hot.entry(a.start).or_insert(0);
            *streak = if hot { *streak + 1 } else { 0 };
            if *streak >= HOT_STREAK {
                to_whole.push(range[0]);
            }
        }
        for r in to_whole {
            // Unregistered as whole mappings (no split); not when they hold another area,
            // which must stay tracked.
            let mappings = whole_mappings(&[r], vmas);
            let others: Vec<PageRange> = self
                .areas
                .iter()
                .filter(|a| a.start != r.start)
                .map(|a| PageRange::new(a.start, a.end))
                .collect();
            if !intersect(&mappings, &others).is_empty() {
                self.hot.remove(&r.start);
                continue;
            }
            for m in mappings {
                self.tracker.untrack(m)?;
                if let Some(fd) = self.tracker.userfaultfd() {
                    // (The parts around the area, registered whole: already gone is fine.)
                    let _ = kioku_track::uffd::unregister(fd.as_raw_fd(), m);
                }
            }
            self.hot.remove(&r.start);
            self.whole.insert(r.start, WHOLE_FOR);
            tracing::debug!(
                pid = self.pid,
                start = format_args!("{:#x}", r.start),
                mib = r.len() >> 20,
                "area written nearly whole in every epoch: taken whole, not write-tracked"
            );
        }
        Ok(())
    }

    /// Registers the parts of `want` that are not write-tracked; returns them. The mappings
    /// around them are registered whole ([`whole_mappings`]: no mapping of the program is
    /// split), but only `want` is write-protected and tracked (write-protecting untouched
    /// memory would fill its page tables with markers).
    fn register_untracked(&mut self, want: &[PageRange], vmas: &[Vma]) -> Result<Vec<PageRange>> {
        let mappings = whole_mappings(want, vmas);
        let mut unregistered = Vec::new();
        scan_ranges(
            &mut self.query,
            &mappings,
            Query::not_write_tracked(),
            vmas,
            &mut unregistered,
        )?;
        normalize(&mut unregistered);
        // Registered with a whole mapping but not tracked: untouched until now.
        let mut untracked = subtract(want, self.tracker.tracked());
        untracked.extend(intersect(&unregistered, want));
        normalize(&mut untracked);
        for r in &untracked {
            self.tracker.untrack(*r)?;
        }
        self.register_whole(&unregistered)?;
        for r in &untracked {
            self.tracker.track(*r)?;
        }
        Ok(untracked)
    }

    /// Registers `ranges` (parts of whole mappings) with the tracker's userfaultfd for
    /// write-protect mode, without protecting them: the tracker's registration of parts of
    /// them then changes nothing and splits nothing.
    fn register_whole(&self, ranges: &[PageRange]) -> Result<()> {
        let Some(fd) = self.tracker.userfaultfd() else {
            return Ok(());
        };
        for r in ranges {
            kioku_track::uffd::register_wp(fd.as_raw_fd(), *r).map_err(|e| {
                RunError::io(
                    format!("registering {:#x}-{:#x} for write-protect", r.start, r.end),
                    e,
                )
            })?;
        }
        Ok(())
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

    /// Makes the running context zero under program ranges `zero` (holes: no pool space).
    fn zero_shadow(&self, zero: &[PageRange], st: &mut Store<'_>) -> Result<()> {
        let mut zchunks = Vec::new();
        for r in zero {
            self.shadow_chunks(*r, st, &mut zchunks);
        }
        let ranges: Vec<(usize, usize)> = zchunks.iter().map(|c| (c.1, c.2)).collect();
        st.engine.zero_running(&ranges)?;
        for &(_, local, len) in &zchunks {
            st.marks.add(PageRange::new(local, local + len));
        }
        Ok(())
    }

    /// Copies the stopped process's changed memory into the running context (after
    /// [`ProcessCapture::survey`] and the reconciliation of shared objects) and describes the
    /// rest of it. Returns its image and what was copied.
    pub fn capture(
        &mut self,
        tracee: &Tracee,
        st: &mut Store<'_>,
    ) -> Result<(ProcessImage, ProcessStats)> {
        let pid = self.pid;
        let Survey {
            maps_text,
            vmas,
            files,
            want,
        } = self.survey.take().ok_or_else(|| RunError::Unsupported {
            what: "internal: capture without a survey".into(),
        })?;

        let t0 = std::time::Instant::now();
        // (1) Areas: runs of captured mappings that hold data; regions follow them.
        let (want, full_populated) = match want {
            Some(w) => w,
            None => self.wanted_areas(&vmas)?,
        };
        let fresh = self.reconcile_areas(&want, st)?;

        // (2) Parts not write-tracked (new, replaced or moved mappings): register them and take
        // them whole. Areas taken whole on purpose stay unregistered.
        self.whole_tick();
        let whole = self.whole_ranges();
        let untracked = self.register_untracked(&subtract(&want, &whole), &vmas)?;
        let shared_untracked = self.register_untracked_shared()?;

        // (3) Written pages, and pages dropped since the last capture.
        let mut written = Vec::new();
        self.tracker.scan_into(&mut written)?;
        if !written.is_empty() && super::injected_failure(st.engine.epoch()) {
            // (A test build's hook: fails here, after the scan took the pages' write-protect
            // bits, the worst moment for the next capture.)
            return Err(RunError::io(
                format!("reading process {pid}'s memory (KIOKU_TEST_FAIL_CAPTURE)"),
                std::io::Error::from_raw_os_error(libc::EINTR),
            ));
        }
        // Populated pages of the areas: what `wanted_areas` found in the stopped process.
        let mut populated = intersect(&full_populated, &want);
        normalize(&mut populated);
        let dropped = intersect(&subtract(&self.populated, &populated), &want);
        self.populated = populated;

        // (4) What to copy: written ∪ dropped ∪ (untracked ∩ (populated ∪ file-backed)); what
        // to zero: untracked, unpopulated anonymous pages that are not fresh (fresh region
        // space is zero already).
        let (retake, zero) = self.whole_parts(&vmas, &untracked, &self.populated, &fresh);
        let mut copy = intersect(&written, &want);
        copy.extend_from_slice(&dropped);
        copy.extend_from_slice(&retake);
        let mut failed = std::mem::take(&mut self.precopy_failed);
        normalize(&mut failed);
        copy.extend(intersect(&failed, &want));
        copy.extend(intersect(&self.populated, &whole));
        if self.retake {
            // The capture before this one failed after its scan: pages it found written (and
            // write-protected again) may not have been copied. All of the areas is.
            copy.extend_from_slice(&want);
        }
        normalize(&mut copy);

        let mut chunks = Vec::new();
        for r in &copy {
            self.shadow_chunks(*r, st, &mut chunks);
        }
        // Shared objects: pages written here, and whole mappings new to the tracking or whose
        // object's region is new.
        let shared_copy = self.shared_copy(&written, &shared_untracked, st);
        for (r, object, offset) in &shared_copy {
            st.shared
                .chunks(*object, *offset, r.start, r.len(), st.engine, &mut chunks);
        }
        // Pool space is reserved before anything is copied into the pool's mapping (a sparse
        // section: a full medium fails here, not with SIGBUS). Staged pages get theirs when
        // they are written out, after the tree resumed ([`Capturer::write_staged`]): the
        // reservation (allocating and zeroing the pages) is not the stop's to pay.
        let t_scan = t0.elapsed();
        let bytes: usize = chunks.iter().map(|c| c.2).sum();
        let stage = st.staging.as_ref().is_some_and(|s| s.takes(bytes));
        if !stage {
            allocate_shadow(&chunks, st)?;
        }
        let t_alloc = t0.elapsed();
        let copied = match st.staging.as_mut().filter(|_| stage) {
            Some(s) => {
                let staged = s.stage(&chunks)?;
                sys::copy_pages(pid, &staged, true).inspect_err(|_| s.unstage(chunks.len()))?
            }
            None => sys::copy_pages(pid, &chunks, true)?,
        };
        for &(_, local, len) in &chunks {
            st.marks.add(PageRange::new(local, local + len));
        }
        let t_copied = t0.elapsed();
        self.zero_shadow(&zero, st)?;
        let mut mismatches = Vec::new();
        if verify_enabled() {
            // Staged pages are written out first (inside the stop: a debugging aid), so that
            // the comparison also checks where the staging put them.
            if let Some(s) = st.staging.as_mut() {
                s.write_out(st.engine)?;
            }
            mismatches = self.verify(&vmas, st);
        }
        self.adapt_tracking(&written, &vmas)?;
        let t_adapted = t0.elapsed();

        // (5) Everything else. Kernel state read by injected calls (a single-step of the
        // program each) is taken from the last capture while no call that changes it ran.
        let cache = match self.state_watched && !self.state_dirty {
            true => self.kernel.take(),
            false => None,
        };
        self.state_dirty = false;
        let (threads, leader_status) = self.threads(
            tracee,
            cache.as_ref().map(|c| &c.threads),
            cache.as_ref().map(|c| &c.fixed),
        )?;
        // The process's status file is its leader thread's.
        let status = match leader_status {
            Some(s) => s,
            None => read_kept(&mut None, || format!("/proc/{pid}/status"), true)?,
        };
        let handled = sys::status_mask(&status, "SigCgt") | sys::status_mask(&status, "SigIgn");
        let sigactions = match &cache {
            Some(c) if c.handled == handled => c.sigactions.clone(),
            _ => self.sigactions(tracee, handled)?,
        };
        let state = crate::procstate::capture_process_since(
            &TracedRemote {
                tracee,
                tid: tracee.control_thread()?,
                channel: None,
            },
            Some(&status),
            cache.as_ref().map(|c| &c.process),
        )?;
        self.kernel = Some(KernelCache {
            process: state.clone(),
            threads: threads
                .iter()
                .zip(tracee_tids(tracee, pid))
                .map(|(t, tid)| (tid, t.kernel.clone()))
                .collect(),
            handled,
            sigactions: sigactions.clone(),
            fixed: threads
                .iter()
                .zip(tracee_tids(tracee, pid))
                .map(|(t, tid)| (tid, (t.robust_list, t.rseq)))
                .collect(),
        });
        let stat = read_kept(&mut self.stat_file, || format!("/proc/{pid}/stat"), true)?;
        let mm = self.mm_fields(tracee, &maps_text, &stat)?;
        if self.program.is_none() {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                .map_err(|e| RunError::io("reading /proc/PID/exe", e))?;
            self.program = Some(file_id(&exe, st.file_ids)?);
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
        let id = identity_of(&stat, Some(&status), pid, self.image_pid, &mut self.parent);
        let image = ProcessImage {
            pid: self.image_pid,
            ppid: id.ppid,
            pgid: id.pgid,
            sid: id.sid,
            exit_signal: id.exit_signal,
            zombie: None,
            program: self.program.clone().expect("set above"),
            argv: self.argv.clone(),
            cwd,
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
            shared_queued: match sys::status_mask(&status, "ShdPnd") {
                0 => vec![],
                _ => sys::queued_signals(tracee.control_thread()?, true)?
                    .iter()
                    .map(|b| hex(b))
                    .collect(),
            },
            vdso_crc: self.vdso_crc,
            files,
            state: Some(state),
            escalated: false,
        };
        self.retake = false;
        let written_pages = pages_in(&written) as u64;
        tracing::debug!(
            pid,
            scan_ms = t_scan.as_secs_f64() * 1e3,
            allocate_ms = (t_alloc - t_scan).as_secs_f64() * 1e3,
            copy_ms = (t_copied - t_alloc).as_secs_f64() * 1e3,
            zero_adapt_ms = (t_adapted - t_copied).as_secs_f64() * 1e3,
            rest_ms = (t0.elapsed() - t_adapted).as_secs_f64() * 1e3,
            copied_mib = copied >> 20,
            "process captured"
        );
        let stats = ProcessStats {
            copied,
            written_pages,
            captured_bytes: self.captured_bytes(),
            areas: self.areas.len(),
            threads: image.threads.len(),
            mismatches,
        };
        Ok((image, stats))
    }

    /// After a capture that failed (a checkpoint skipped): its scans may have taken
    /// write-protect bits of pages it then did not copy, so the next capture copies every
    /// captured area whole (once), and is exact whatever the failed one had done.
    pub fn retake_all(&mut self) {
        self.retake = true;
        self.survey = None;
    }

    /// Whether the process is still as the capture read it, asked while the tree is still
    /// stopped after the capture: every thread in its ptrace-stop and the process not exiting.
    /// Exact: a SIGKILL wakes every thread of the process out of its ptrace-stop at once (its
    /// state is no longer `t`), and the monitor, its tracer, has not reaped it (a reaped
    /// process shows in [`Tracee::exit`]), so its pid names it still. A kill that comes after
    /// this look came after everything the capture read.
    pub fn still_stopped(&mut self, tracee: &Tracee) -> bool {
        const PF_EXITING: u64 = 0x4;
        if tracee.exit().is_some() {
            return false;
        }
        let pid = self.pid;
        let Ok(stat) = read_kept(&mut self.stat_file, || format!("/proc/{pid}/stat"), true) else {
            return false;
        };
        let st = kioku_pool::procstat::ProcStat::parse(&stat);
        if st.number::<u64>(9).is_some_and(|f| f & PF_EXITING != 0) {
            return false;
        }
        match st.state() {
            Some('t') => true,
            // The leader thread ended (pthread_exit) while the others run on: the process
            // lives in its other threads, each of which must still be stopped.
            Some('Z') => {
                let others: Vec<i32> = tracee.threads().into_iter().filter(|&t| t != pid).collect();
                !others.is_empty()
                    && others.iter().all(|tid| {
                        kioku_pool::procstat::ProcStat::read(format!("/proc/{pid}/task/{tid}/stat"))
                            .is_ok_and(|s| {
                                s.state() == Some('t')
                                    && s.number::<u64>(9).is_some_and(|f| f & PF_EXITING == 0)
                            })
                    })
            }
            _ => false,
        }
    }

    /// Registers the shared mappings that are not write-tracked (new, replaced); returns them.
    fn register_untracked_shared(&mut self) -> Result<Vec<PageRange>> {
        let mut untracked = Vec::new();
        for v in &self.shared_vmas {
            self.query
                .scan(v.range, Query::not_write_tracked(), &mut untracked)?;
        }
        normalize(&mut untracked);
        for r in &untracked {
            self.tracker.untrack(*r)?;
            self.tracker.track(*r)?;
        }
        Ok(untracked)
    }

    /// The shared-object pages to copy from this process: (program range, object, offset of
    /// the range's start in the object).
    fn shared_copy(
        &self,
        written: &[PageRange],
        untracked: &[PageRange],
        st: &Store<'_>,
    ) -> Vec<(PageRange, u32, u64)> {
        let mut out = Vec::new();
        for v in &self.shared_vmas {
            let mut take: Vec<PageRange> = if st.shared.take_whole(v.object) {
                vec![v.range]
            } else {
                let mut t = intersect(written, std::slice::from_ref(&v.range));
                t.extend(intersect(untracked, std::slice::from_ref(&v.range)));
                t
            };
            normalize(&mut take);
            for r in take {
                out.push((r, v.object, v.offset + (r.start - v.range.start) as u64));
            }
        }
        out
    }

    /// The process replaced itself (execve): a new address space, a new image. The old areas
    /// go; tracking starts over on the new memory.
    fn after_exec(&mut self, tracee: &Tracee, st: &mut Store<'_>) -> Result<()> {
        tracing::debug!(
            pid = self.pid,
            "process called execve: capturing the new image"
        );
        // The old image's writes to shared memory were recorded in its page tables alone.
        st.shared.writers_gone();
        self.tracker = kioku_proc::tracker_for(tracee)?;
        self.query = PagemapQuery::open(self.pid)?;
        for a in std::mem::take(&mut self.areas) {
            st.engine.delete_region(&a.region)?;
        }
        self.populated.clear();
        self.layout = None;
        self.shared_vmas.clear();
        self.program = None;
        self.tid_addrs.clear();
        self.brk = None;
        self.vdso_crc = None;
        self.hot.clear();
        self.whole.clear();
        self.kernel = None;
        self.maps_file = None;
        self.stat_file = None;
        self.status_files.clear();
        self.execs = tracee.execs();
        Ok(())
    }

    /// Compares every captured page of the stopped process with the running context (a
    /// debugging aid, `KIOKU_VERIFY_CAPTURE=1`); returns the differences. One is a bug of the
    /// capture unless a process of the tree was killed meanwhile: a dying process's exit
    /// writes into its memory after the copy (each thread's `clear_child_tid` word is zeroed,
    /// its robust futexes get `FUTEX_OWNER_DIED`), so the caller decides
    /// ([`super::Capturer::verified`]).
    fn verify(&self, vmas: &[Vma], st: &Store<'_>) -> Vec<String> {
        let mut out = Vec::new();
        let ps = self.page;
        let mut buf = vec![0u8; ps];
        let zero = vec![0u8; ps];
        // What the checkpoint will hold: the running context's page where this epoch marked
        // it (copied or zeroed), else the last checkpoint's (zero for a page it lacks).
        let marked = st.marks.snapshot();
        for a in &self.areas {
            let base = st.engine.region(&a.region).expect("region").addr;
            let data = st.engine.running_data(&a.region).unwrap_or_default();
            let committed = st.engine.committed(&a.region).unwrap_or(&[]);
            // The last checkpoint's holes read as zeros and are not read (on tmpfs, reading one
            // through the mapping fills it: verifying would grow the pool).
            let committed_data = st.engine.committed_data(&a.region).unwrap_or_default();
            let committed_page = |k: usize| -> Option<&[u8]> {
                let c = committed.get(k..k + ps)?;
                Some(match committed_data.get(k / ps) {
                    Some(false) => &zero[..],
                    _ => c,
                })
            };
            for page in (a.start..a.end).step_by(ps) {
                if sys::copy_pages(self.pid, &[(page, buf.as_mut_ptr() as usize, ps)], true)
                    .is_err()
                {
                    continue;
                }
                let k = page - a.start;
                let local = base + k;
                let is_marked = {
                    let i = marked.partition_point(|r| r.end <= local);
                    marked.get(i).is_some_and(|r| r.start <= local)
                };
                let differs = if !is_marked {
                    match committed_page(k) {
                        Some(c) => c != &buf[..],
                        None => buf != zero,
                    }
                } else if data.get(k / ps) == Some(&false) {
                    buf != zero
                } else {
                    // SAFETY: a page inside the region's mapping.
                    let shadow = unsafe { std::slice::from_raw_parts(local as *const u8, ps) };
                    shadow != &buf[..]
                };
                if differs {
                    let v = vmas.iter().find(|v| v.start <= page && page < v.end);
                    let hole = data.get(k / ps) == Some(&false);
                    let in_committed = committed_page(k).map(|c| c == &buf[..]);
                    let stored = st
                        .engine
                        .page_checksums(&a.region)
                        .and_then(|c| c.get(k / ps).copied());
                    let prog_crc = crc32c::crc32c(&buf);
                    let com_crc = committed_page(k).map(crc32c::crc32c);
                    out.push(format!(
                        "capture differs from the program's memory: pid {} page {page:#x} area {} vma {v:?} hole {hole} in_committed {in_committed:?} program_zero {} is_marked {is_marked} stored {stored:?} prog_crc {prog_crc} com_crc {com_crc:?}",
                        self.image_pid,
                        a.region,
                        buf == zero
                    ));
                }
            }
        }
        out
    }

    /// Compares the process's shared mappings with their objects' regions (after every process
    /// of the tree copied its part: a page another process wrote is copied from that one).
    pub fn verify_shared(&self, st: &Store<'_>) -> Vec<String> {
        let mut out = Vec::new();
        let ps = self.page;
        let mut buf = vec![0u8; ps];
        for v in &self.shared_vmas {
            for page in (v.range.start..v.range.end).step_by(ps) {
                if sys::copy_pages(self.pid, &[(page, buf.as_mut_ptr() as usize, ps)], true)
                    .is_err()
                {
                    continue;
                }
                let off = v.offset + (page - v.range.start) as u64;
                if let Some(may) = st.shared.page_candidates(v.object, off, st.engine) {
                    if may.iter().all(|m| *m != &buf[..]) {
                        out.push(format!(
                            "capture differs from the program's shared memory: pid {} page {page:#x} object {}",
                            self.image_pid, v.object
                        ));
                    }
                }
            }
        }
        out
    }

    /// Splits program range `r` (inside the areas) into (remote, shadow, len) chunks.
    fn shadow_chunks(&self, r: PageRange, st: &Store<'_>, out: &mut Vec<(usize, usize, usize)>) {
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
                let base = st
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
    fn reconcile_areas(
        &mut self,
        want: &[PageRange],
        st: &mut Store<'_>,
    ) -> Result<Vec<PageRange>> {
        let mut fresh = Vec::new();
        let keep: std::collections::HashSet<usize> = want.iter().map(|w| w.start).collect();
        for a in std::mem::take(&mut self.areas) {
            if keep.contains(&a.start) {
                self.areas.push(a);
            } else {
                self.tracker.untrack(PageRange::new(a.start, a.end))?;
                st.engine.delete_region(&a.region)?;
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
                        match st.engine.resize_region(&a.region, w.end - w.start) {
                            Ok(_) => {
                                if w.end > a.end {
                                    fresh.push(PageRange::new(a.end, w.end));
                                }
                            }
                            Err(kioku_ckpt::CkptError::BeyondReservation { .. }) => {
                                // A new region: nothing of the old one carries over, so the
                                // whole range must be taken again (untracked → retaken).
                                self.tracker.untrack(PageRange::new(a.start, a.end))?;
                                st.engine.delete_region(&a.region)?;
                                self.create_region(w, st)?;
                                fresh.push(*w);
                            }
                            Err(e) => return Err(region_error(e)),
                        }
                        a.end = w.end;
                    }
                    next.push(a);
                }
                None => {
                    self.create_region(w, st)?;
                    fresh.push(*w);
                    next.push(AreaState {
                        start: w.start,
                        end: w.end,
                        region: region_name(self.image_pid, w.start),
                    });
                }
            }
        }
        self.areas = next;
        normalize(&mut fresh);
        Ok(fresh)
    }

    /// The areas to capture: the runs of captured mappings, but of anonymous memory only the
    /// parts that hold pages (rounded out to `AREA_GRANULE`, gaps up to `AREA_GAP` bridged) or
    /// were captured before. Reserved but untouched memory (a runtime's heap reservation, the
    /// unused bulk of thread stacks) takes nothing; once the program touches it, its pages are
    /// not write-tracked yet and are taken at that capture. Private file mappings are taken
    /// whole (their untouched pages read the file, not zeros).
    /// The areas wanted (see the module's notes), and the populated pages of every captured
    /// mapping (sorted, merged).
    fn wanted_areas(&mut self, vmas: &[Vma]) -> Result<(Vec<PageRange>, Vec<PageRange>)> {
        let full = area_ranges(vmas);
        let mut pop = Vec::new();
        scan_ranges(&mut self.query, &full, Query::populated(), vmas, &mut pop)?;
        normalize(&mut pop);
        let g = AREA_GRANULE;
        let mut keep: Vec<PageRange> = pop
            .iter()
            .map(|r| PageRange::new(r.start & !(g - 1), (r.end + g - 1) & !(g - 1)))
            .collect();
        keep.extend(self.areas.iter().map(|a| PageRange::new(a.start, a.end)));
        keep.extend(
            vmas.iter()
                .filter(|v| v.captured && matches!(v.backing, Backing::File { .. }))
                .map(|v| PageRange::new(v.start, v.end)),
        );
        normalize(&mut keep);
        // Bridge short gaps: fewer regions, for 4 bytes of checksums per page bridged.
        let mut bridged: Vec<PageRange> = Vec::with_capacity(keep.len());
        for r in keep {
            match bridged.last_mut() {
                Some(l) if r.start <= l.end + AREA_GAP => l.end = l.end.max(r.end),
                _ => bridged.push(r),
            }
        }
        Ok((intersect(&full, &bridged), pop))
    }

    fn create_region(&mut self, w: &PageRange, st: &mut Store<'_>) -> Result<()> {
        let len = w.end - w.start;
        st.engine
            .create_region(
                &region_name(self.image_pid, w.start),
                len,
                RegionOptions {
                    addr: None,
                    reserve: Some((2 * len).max(64 << 20)),
                },
            )
            .map_err(region_error)?;
        Ok(())
    }

    /// The mappings, which of them are captured, and the files they map; registers the
    /// shared-memory objects the process maps.
    fn layout(&mut self, maps_text: &str, st: &mut Store<'_>) -> Result<(Vec<Vma>, Vec<FileId>)> {
        if let Some(l) = &self.layout {
            if l.maps_text == maps_text {
                // Same mappings: a private file mapping captured because it had copied pages
                // stays captured; nothing else can have changed.
                for v in &l.shared {
                    st.shared.note_use(v.object, v.offset, v.range.len() as u64);
                }
                return Ok((l.vmas.clone(), l.files.clone()));
            }
        }
        let maps = kioku_proc::parse_maps(maps_text)?;
        let mut vmas = Vec::with_capacity(maps.len());
        let mut files: Vec<FileId> = Vec::new();
        let mut file_index: HashMap<PathBuf, usize> = HashMap::new();
        let mut shared = Vec::new();
        for m in &maps {
            let backing = match self.classify(m)? {
                Class::Skip => continue,
                Class::Shared(kind) => {
                    let object = st.shared.object_for(m, kind)?;
                    let entry = format!("/proc/{}/map_files/{:x}-{:x}", self.pid, m.start, m.end);
                    if let Ok(md) = std::fs::metadata(entry) {
                        st.shared.note_size(object, md.len());
                    }
                    let range = PageRange::new(m.start, m.end);
                    shared.push(SharedVma {
                        range,
                        object,
                        offset: m.offset,
                    });
                    vmas.push(vma(
                        m,
                        Backing::Shared {
                            object,
                            offset: m.offset,
                        },
                        false,
                    ));
                    continue;
                }
                Class::Mapped { path, captured } => (path, captured),
            };
            let (path, captured) = backing;
            let backing = match path {
                Some(path) => {
                    let index = match file_index.get(&path) {
                        Some(&i) => i,
                        None => {
                            let id = file_id(&path, st.file_ids)?;
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
            vmas.push(vma(m, backing, captured));
        }
        self.shared_vmas = shared.clone();
        self.layout = Some(Layout {
            maps_text: maps_text.to_string(),
            vmas: vmas.clone(),
            files: files.clone(),
            shared,
        });
        Ok((vmas, files))
    }

    /// Whether mapping `m` could ever be made writable (VM_MAYWRITE: `mw` in its smaps
    /// VmFlags), e.g. a shared file mapping of a file opened for writing.
    fn may_write(&self, m: &MapEntry) -> Result<bool> {
        let smaps = sys::read_proc(format!("/proc/{}/smaps", self.pid))?;
        let head = format!("{:x}-{:x} ", m.start, m.end);
        let mut inside = false;
        for line in smaps.lines() {
            if line.starts_with(&head) {
                inside = true;
            } else if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Ok(flags.split_whitespace().any(|f| f == "mw"));
                }
            }
        }
        // Gone meanwhile, or no flags shown: assume it may be written (it is then captured).
        Ok(true)
    }

    /// How mapping `m` is checkpointed.
    fn classify(&mut self, m: &MapEntry) -> Result<Class> {
        let any = m.perms.read || m.perms.write || m.perms.exec;
        let unsupported = |what: String| Err(RunError::Unsupported { what });
        match &m.kind {
            MapKind::Vsyscall => Ok(Class::Skip),
            MapKind::Vdso | MapKind::Vvar => Ok(Class::Mapped {
                path: None,
                captured: false,
            }),
            MapKind::Special(name) if !name.starts_with("[anon:") => {
                if name == "[uprobes]" {
                    Ok(Class::Skip)
                } else {
                    unsupported(format!(
                        "mapping {:#x}-{:#x} is the kernel's {name}",
                        m.start, m.end
                    ))
                }
            }
            MapKind::Anonymous | MapKind::Heap | MapKind::Stack | MapKind::Special(_) => {
                if m.perms.shared {
                    // MAP_SHARED|MAP_ANONYMOUS shows as "/dev/zero (deleted)"; a shared
                    // mapping without a name is the same kind of object.
                    return Ok(Class::Shared(crate::image::SharedKind::Anonymous));
                }
                // PROT_NONE memory (guard pages, reservations) comes back empty.
                Ok(Class::Mapped {
                    path: None,
                    captured: any,
                })
            }
            MapKind::File { path, deleted } => {
                let name = path.to_string_lossy();
                if name.starts_with("/SYSV") {
                    return unsupported(format!(
                        "mapping {:#x}-{:#x} is System V shared memory ({})",
                        m.start,
                        m.end,
                        path.display()
                    ));
                }
                if m.perms.shared && !m.perms.write && !*deleted && !self.may_write(m)? {
                    // Opened read-only (no VM_MAYWRITE): nothing can write through it, and
                    // userfaultfd refuses to watch it; its contents are the file's, which the
                    // file journal takes care of. Mapped again at restore.
                    return Ok(Class::Mapped {
                        path: Some(path.clone()),
                        captured: false,
                    });
                }
                if m.perms.shared {
                    let kind = if let Some(rest) = name.strip_prefix("/memfd:") {
                        crate::image::SharedKind::Memfd {
                            name: rest.to_string(),
                        }
                    } else if *deleted && name == "/dev/zero" {
                        crate::image::SharedKind::Anonymous
                    } else {
                        crate::image::SharedKind::File {
                            path: path.clone(),
                            deleted: *deleted,
                            inode: m.inode,
                        }
                    };
                    return Ok(Class::Shared(kind));
                }
                if *deleted || name.starts_with("/memfd:") {
                    return unsupported(format!(
                        "mapping {:#x}-{:#x} maps {} privately, which cannot be opened again",
                        m.start,
                        m.end,
                        path.display()
                    ));
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
                Ok(Class::Mapped {
                    path: Some(path.clone()),
                    captured,
                })
            }
        }
    }

    /// The threads' images (the leader first, as [`tracee_tids`] orders them); `cache`: their
    /// kernel state at the last capture, by thread id, when nothing changed it since.
    fn threads(
        &mut self,
        tracee: &Tracee,
        cache: Option<&HashMap<i32, crate::procstate::ThreadState>>,
        fixed: Option<&HashMap<i32, ThreadFixed>>,
    ) -> Result<(Vec<ThreadImage>, Option<String>)> {
        let pid = self.pid;
        let tids = tracee_tids(tracee, pid);
        let mut leader_status = None;
        self.tid_addrs.retain(|t, _| tids.contains(t));
        self.status_files.retain(|t, _| tids.contains(t));
        let mut out = Vec::with_capacity(tids.len());
        for tid in tids {
            let state = tracee.thread_state(tid)?;
            let status = match self.status_files.entry(tid) {
                std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().read()?,
                std::collections::hash_map::Entry::Vacant(e) => e
                    .insert(sys::ProcFile::open(
                        format!("/proc/{pid}/task/{tid}/status"),
                        true,
                    )?)
                    .read()?,
            };
            let tid_address = match self.tid_addrs.get(&tid) {
                Some(&a) => a,
                None => {
                    let a = tid_address(tracee, tid)?;
                    self.tid_addrs.insert(tid, a);
                    a
                }
            };
            let (robust_list, rseq) = match fixed.and_then(|f| f.get(&tid)) {
                Some(&f) => f,
                None => (sys::robust_list(tid)?, sys::rseq_config(tid)?),
            };
            // The id the program knows: the namespace's.
            let image_tid = if self.image_pid == pid {
                tid
            } else {
                kioku_proc::ns::ns_id_in_status(&status, "NSpid:").unwrap_or(tid)
            };
            out.push(ThreadImage {
                tid: image_tid,
                state: hex(&state.to_bytes()),
                sigmask: sys::get_sigmask(tid)?,
                pending: sys::status_mask(&status, "SigPnd"),
                // A queued signal is pending: nothing to peek at without one.
                queued: match sys::status_mask(&status, "SigPnd") {
                    0 => vec![],
                    _ => sys::queued_signals(tid, false)?
                        .iter()
                        .map(|b| hex(b))
                        .collect(),
                },
                tid_address,
                robust_list,
                rseq,
                kernel: crate::procstate::capture_thread_since(
                    &TracedRemote {
                        tracee,
                        tid,
                        channel: None,
                    },
                    tid,
                    Some(&status),
                    cache.and_then(|c| c.get(&tid)),
                )?,
            });
            if tid == pid {
                leader_status = Some(status);
            }
        }
        Ok((out, leader_status))
    }

    /// The dispositions of the signals in `set` (caught or ignored), by injected
    /// `rt_sigaction` calls.
    fn sigactions(&self, tracee: &Tracee, set: u64) -> Result<Vec<SigAction>> {
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

    fn mm_fields(&mut self, tracee: &Tracee, maps_text: &str, stat: &str) -> Result<MmFields> {
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

/// The threads of `tracee` (process `pid`), the leader first.
fn tracee_tids(tracee: &Tracee, pid: i32) -> Vec<i32> {
    let mut tids = tracee.threads();
    tids.sort_by_key(|&t| (t != pid, t));
    tids
}

/// How a mapping is checkpointed.
enum Class {
    /// Not part of the image (vsyscall, uprobes).
    Skip,
    /// Mapped again at restore from `path` (or anonymous); its contents captured or not.
    Mapped {
        path: Option<PathBuf>,
        captured: bool,
    },
    /// A shared mapping of a shared-memory object.
    Shared(crate::image::SharedKind),
}

fn vma(m: &MapEntry, backing: Backing, captured: bool) -> Vma {
    Vma {
        start: m.start,
        end: m.end,
        read: m.perms.read,
        write: m.perms.write,
        exec: m.perms.exec,
        shared: m.perms.shared,
        grows_down: m.kind == MapKind::Stack,
        backing,
        captured,
    }
}

/// Region errors that mean "too much to checkpoint" become `Unsupported` (checkpoints stop,
/// the program runs on), the rest stay errors.
fn region_error(e: kioku_ckpt::CkptError) -> RunError {
    match e {
        kioku_ckpt::CkptError::Pool(kioku_pool::PoolError::TooManySections { max }) => {
            RunError::Unsupported {
                what: format!(
                    "the tree has more separate memory areas than a pool holds ({} regions)",
                    max / 2
                ),
            }
        }
        e => e.into(),
    }
}

/// The identity of `path` now (a build-id read once per file version).
pub(crate) fn file_id(
    path: &Path,
    cache: &mut HashMap<(PathBuf, u64, i64), FileId>,
) -> Result<FileId> {
    let md =
        std::fs::metadata(path).map_err(|e| RunError::io(format!("stat {}", path.display()), e))?;
    let key = (
        path.to_path_buf(),
        md.ino(),
        md.mtime_nsec() + md.mtime() * 1_000_000_000,
    );
    if let Some(id) = cache.get(&key) {
        return Ok(id.clone());
    }
    let id = FileId::of(path)?;
    cache.insert(key, id.clone());
    Ok(id)
}

/// A process's place in the tree, as the tree's namespace sees it.
pub(crate) struct Identity {
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    pub exit_signal: i32,
}

/// Reads the identity of process `pid` (`image_pid`: its id in the namespace; equal to `pid`
/// without one).
pub(crate) fn identity(pid: i32, image_pid: i32) -> Result<Identity> {
    let stat = sys::read_proc(format!("/proc/{pid}/stat"))?;
    Ok(identity_of(&stat, None, pid, image_pid, &mut None))
}

/// [`identity`] from the text of the process's `/proc/PID/stat` (and its status when the
/// caller read it in the same stop). `parent`: the parent's (pid, id in the namespace) found
/// before, kept while the parent is the same process (its namespace id does not change).
fn identity_of(
    stat: &str,
    status: Option<&str>,
    pid: i32,
    image_pid: i32,
    parent: &mut Option<(i32, i32)>,
) -> Identity {
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<i64> = rest
        .split_whitespace()
        .map(|x| x.parse::<i64>().unwrap_or(0))
        .collect();
    let at = |n: usize| f.get(n - 3).copied().unwrap_or(0);
    let exit_signal = at(38) as i32;
    if image_pid == pid {
        return Identity {
            ppid: at(4) as i32,
            pgid: at(5) as i32,
            sid: at(6) as i32,
            exit_signal,
        };
    }
    let in_status = status.and_then(|s| {
        Some((
            kioku_proc::ns::ns_id_in_status(s, "NSpgid:")?,
            kioku_proc::ns::ns_id_in_status(s, "NSsid:")?,
        ))
    });
    let (pgid, sid) = in_status
        .or_else(|| kioku_proc::ns::ns_pgid_sid_of(pid))
        .unwrap_or((0, 0));
    // The parent's id in the namespace (the init is 1; a parent outside it shows as 0).
    let host_ppid = at(4) as i32;
    let ppid = match *parent {
        Some((host, ns)) if host == host_ppid => ns,
        _ => {
            let ns = kioku_proc::ns::ns_pid_of(host_ppid);
            if let Some(ns) = ns {
                *parent = Some((host_ppid, ns));
            }
            ns.unwrap_or(0)
        }
    };
    Identity {
        ppid,
        pgid,
        sid,
        exit_signal,
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

/// Reserves pool space for the shadow ranges of `chunks` (program, shadow, length) before they
/// are copied into: the regions are sparse, and a full medium must fail here, with a reason,
/// not as SIGBUS (or a short copy) in the middle of the copy.
fn allocate_shadow(chunks: &[(usize, usize, usize)], st: &Store<'_>) -> Result<()> {
    let ranges: Vec<(usize, usize)> = chunks.iter().map(|c| (c.1, c.2)).collect();
    st.engine.allocate_running(&ranges)?;
    Ok(())
}

/// Mapped bytes between two ranges up to which one `PAGEMAP_SCAN` walk covers both: a walk
/// skips unmapped address space for free but reads the page tables of the mappings between
/// (a few µs for this much), while a walk of its own costs a system call (≈ 1–2 µs).
const SCAN_SPAN_GAP: usize = 4 << 20;

/// Appends to `out` the pages of `ranges` (sorted, disjoint) matching `q`: one walk over each
/// run of ranges whose gaps hold less than [`SCAN_SPAN_GAP`] of the mappings `vmas`, its
/// result clipped to `ranges` (a stop used to make one walk per area and query).
fn scan_ranges(
    query: &mut PagemapQuery,
    ranges: &[PageRange],
    q: Query,
    vmas: &[Vma],
    out: &mut Vec<PageRange>,
) -> Result<()> {
    let mut i = 0;
    let mut found = Vec::new();
    while i < ranges.len() {
        let mut j = i + 1;
        while j < ranges.len() {
            let (lo, hi) = (ranges[j - 1].end, ranges[j].start);
            let mapped: usize = vmas
                .iter()
                .map(|v| v.end.min(hi).saturating_sub(v.start.max(lo)))
                .sum();
            if mapped > SCAN_SPAN_GAP {
                break;
            }
            j += 1;
        }
        let span = PageRange::new(ranges[i].start, ranges[j - 1].end);
        found.clear();
        query.scan(span, q, &mut found)?;
        if j - i == 1 {
            out.append(&mut found);
        } else {
            out.extend(intersect(&found, &ranges[i..j]));
        }
        i = j;
    }
    Ok(())
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

/// `ranges` grown to the whole captured mappings they touch. A userfaultfd registration (or
/// its removal) over part of a mapping splits it in the kernel, which the program sees: an
/// `mremap` growing a range that spans the split fails with `EFAULT`, and every split counts
/// against `vm.max_map_count`. So write tracking is registered on whole mappings, while the
/// areas (the pool's regions) keep covering only the parts that hold pages.
pub(crate) fn whole_mappings(ranges: &[PageRange], vmas: &[Vma]) -> Vec<PageRange> {
    let mut out: Vec<PageRange> = vmas
        .iter()
        .filter(|v| v.captured && !v.shared)
        .filter(|v| ranges.iter().any(|r| r.start < v.end && v.start < r.end))
        .map(|v| PageRange::new(v.start, v.end))
        .collect();
    out.extend_from_slice(ranges);
    normalize(&mut out);
    out
}

fn pages_in(v: &[PageRange]) -> usize {
    v.iter().map(|r| r.len()).sum::<usize>() / page_size()
}

/// The region of the area at `start` of process `pid` (its id in the tree's namespace).
pub(crate) fn region_name(pid: i32, start: usize) -> String {
    format!("p{pid}.a{start:x}")
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

/// `KIOKU_NO_ADAPTIVE=1`: keep every area write-tracked (for comparisons).
fn adaptive_disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os("KIOKU_NO_ADAPTIVE").is_some_and(|v| v == "1"))
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
