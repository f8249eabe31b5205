//! Rebuilding one process of the tree from its image, from outside: its placeholder (the same
//! executable, stopped before its first instruction, or a fork of its parent's placeholder)
//! is emptied, the vdso moved to where the checkpoint expects it, every mapping recreated at
//! its address (shared-memory objects mapped from descriptors the monitor passes in), the
//! captured pages written in (only those that differ from what the fresh mapping shows), then
//! mm fields, descriptors, signal dispositions, threads (with their ids) and their registers —
//! all by system calls injected into it.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use kioku_ckpt::Engine;
use kioku_proc::{MapKind, Namespace, ThreadState, Tracee};
use kioku_track::PageRange;

use crate::capture::vdso_crc;
use crate::error::{Result, RunError};
use crate::fds::FdTable;
use crate::image::{unhex, Backing, ProcessImage, Vma};
use crate::remote::{Remote, TracedRemote};
use crate::shadow::ShadowSpace;
use crate::sys;

use super::lazy::{self, LazyFill, ProcSetup, Source};

const ERESTARTSYS: i64 = 512;
const ERESTARTNOINTR: i64 = 513;
const ERESTARTNOHAND: i64 = 514;
const ERESTART_RESTARTBLOCK: i64 = 516;

/// What rebuilding one process needs.
pub(crate) struct Rebuild<'a> {
    pub t: &'a Tracee,
    pub tid: i32,
    pub image: &'a ProcessImage,
    /// The monitor's descriptors of the shared-memory objects (index = object id).
    pub shared_fds: &'a HashMap<u32, OwnedFd>,
    /// The descriptor channel: its number in the process and the monitor's end.
    pub channel: Option<(i32, &'a OwnedFd)>,
    pub ns: Option<&'a Namespace>,
    /// The tree's descriptors (which numbers this process uses).
    pub fds: &'a FdTable,
    /// The threads as created (monitor's ids, in image order).
    pub tids: Vec<i32>,
    /// Restore private anonymous memory by mapping (filled on first touch and in the
    /// background by this fill) rather than writing it in.
    pub lazy: Option<&'a LazyFill>,
    /// Once handed to the fill: a duplicate of the process's userfaultfd and its lazy ranges.
    pub lazy_ranges: Option<(OwnedFd, Vec<PageRange>)>,
    /// The whole mappings registered with that userfaultfd for missing-page faults.
    pub lazy_registered: Vec<PageRange>,
}

/// Rebuilds the process's memory and what comes before its descriptors (left stopped, its
/// inherited descriptors closed); the bytes written into it and the bytes left to the lazy
/// fill.
pub(crate) fn rebuild_memory(
    r: &mut Rebuild<'_>,
    engine: &Engine<ShadowSpace>,
) -> Result<(u64, u64)> {
    let t0 = std::time::Instant::now();
    r.move_channel()?;
    r.specials()?;
    r.mappings()?;
    if let Some(fill) = r.lazy {
        if let Some(setup) = r.setup_lazy(engine)? {
            // Handed over at once: from here on the monitor's own accesses (an injected call's
            // bytes on the stack) may touch memory not filled yet.
            let fd = setup
                .uffd
                .try_clone()
                .map_err(|e| RunError::io("duplicating a userfaultfd", e))?;
            let ranges = setup.ranges.iter().map(|(r, _)| *r).collect();
            let registered = setup.registered.clone();
            fill.add(setup);
            r.lazy_ranges = Some((fd, ranges));
            r.lazy_registered = registered;
        }
    }
    let t_map = t0.elapsed();
    let written = r.contents(engine)?;
    let lazy: u64 = r
        .lazy_ranges
        .iter()
        .flat_map(|(_, v)| v)
        .map(|range| range.len() as u64)
        .sum();
    tracing::debug!(
        pid = r.image.pid,
        layout_ms = t_map.as_secs_f64() * 1e3,
        contents_ms = (t0.elapsed() - t_map).as_secs_f64() * 1e3,
        written,
        lazy,
        "memory rebuilt"
    );
    r.protections()?;
    r.mm()?;
    r.cwd()?;
    let keep: Vec<i32> = r.channel.map(|(c, _)| c).into_iter().collect();
    crate::fds::close_unlisted(r.fds, r.image.pid, &r.remote(), &keep)?;
    r.sigactions()?;
    Ok((written, lazy))
}

/// After the tree's descriptors are in place: the threads (with their ids), their kernel state
/// and registers, the process-wide kernel state; the channel closed.
pub(crate) fn rebuild_threads(r: &mut Rebuild<'_>) -> Result<()> {
    r.threads()?;
    if let Some(state) = &r.image.state {
        crate::procstate::restore_process(&r.remote(), state, &Default::default())?;
    }
    r.close_channel()?;
    r.pending_signals()?;
    if crate::capture::verify_enabled() {
        // (Contents are compared at the next capture; the kernel may already have written
        // some, e.g. the rseq area's cpu number.)
        // A mapping may be split where only part of it was registered with the lazy fill's
        // userfaultfd (an area covers the parts of anonymous memory that hold pages): adjacent
        // maps with the same rights together must cover it.
        let now = kioku_proc::read_maps(r.t.pid())?;
        for v in &r.image.vmas {
            let mut at = v.start;
            for m in &now {
                let same =
                    m.perms.read == v.read && m.perms.write == v.write && m.perms.exec == v.exec;
                if same && m.start <= at && at < m.end {
                    at = m.end;
                }
            }
            let ok = at >= v.end;
            if !ok {
                tracing::error!(?v, "restored layout lacks this mapping");
            }
        }
    }
    Ok(())
}

fn is_special(v: &Vma) -> bool {
    matches!(v.backing, Backing::Special { .. })
}

impl Rebuild<'_> {
    /// Highest descriptor number the process uses (or an epoll registration of it names).
    fn max_fd(&self) -> i32 {
        self.fds.highest_number(self.image.pid).unwrap_or(2).max(2)
    }

    /// Puts the channel above every descriptor the image uses, so that placing them cannot
    /// close it.
    fn move_channel(&mut self) -> Result<()> {
        let Some((at, mon)) = self.channel else {
            return Ok(());
        };
        let want = self.max_fd() + 1;
        if at > self.max_fd() {
            return Ok(());
        }
        let moved = self.t.syscall(
            self.tid,
            libc::SYS_fcntl,
            &[at as u64, libc::F_DUPFD as u64, want as u64],
        )? as i32;
        self.t.close(self.tid, at)?;
        self.channel = Some((moved, mon));
        Ok(())
    }

    fn close_channel(&mut self) -> Result<()> {
        if let Some((at, _)) = self.channel.take() {
            self.t.close(self.tid, at)?;
        }
        Ok(())
    }

    pub(crate) fn remote(&self) -> TracedRemote<'_> {
        TracedRemote {
            tracee: self.t,
            tid: self.tid,
            channel: self.channel.map(|(at, mon)| (at, mon.as_fd())),
        }
    }

    /// Empties the placeholder and puts the vdso and vvar pages where the image had them.
    fn specials(&mut self) -> Result<()> {
        let (t, tid) = (self.t, self.tid);
        let now = t.maps()?;
        let want: Vec<&Vma> = self.image.vmas.iter().filter(|v| is_special(v)).collect();
        let have: Vec<_> = now
            .iter()
            .filter(|m| matches!(m.kind, MapKind::Vdso | MapKind::Vvar))
            .collect();
        let same_shape = want.len() == have.len()
            && want.iter().zip(&have).all(|(w, h)| {
                let kind_ok = match &w.backing {
                    Backing::Special { name } if name == "[vdso]" => h.kind == MapKind::Vdso,
                    _ => h.kind == MapKind::Vvar,
                };
                kind_ok && w.end - w.start == h.end - h.start
            });
        if !same_shape {
            return Err(RunError::KernelChanged {
                what: "the vdso/vvar mappings differ in number or size".into(),
            });
        }
        if vdso_crc(t)? != self.image.vdso_crc {
            return Err(RunError::KernelChanged {
                what: "the vdso's code differs".into(),
            });
        }
        for m in now
            .iter()
            .filter(|m| !matches!(m.kind, MapKind::Vdso | MapKind::Vvar | MapKind::Vsyscall))
        {
            t.munmap(tid, m.start, m.end - m.start)?;
        }
        if want.iter().zip(&have).all(|(w, h)| w.start == h.start) {
            return Ok(());
        }
        // Reserve the targets that are free, park the specials in one fresh reservation (which
        // cannot overlap a target), then move each to its target.
        let mut reserved = Vec::new();
        for w in &want {
            let len = w.end - w.start;
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
            if let Ok(a) = t.mmap(tid, w.start, len, libc::PROT_NONE, flags, -1, 0) {
                if a == w.start {
                    reserved.push((a, len));
                } else {
                    t.munmap(tid, a, len)?;
                }
            }
        }
        let total: usize = have.iter().map(|h| h.end - h.start).sum();
        let park = t.mmap(
            tid,
            0,
            total,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        let mut at = park;
        let mut parked = Vec::new();
        for h in &have {
            let len = h.end - h.start;
            t.mremap(
                tid,
                h.start,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                at,
            )?;
            parked.push(at);
            at += len;
        }
        for (w, p) in want.iter().zip(parked) {
            let len = w.end - w.start;
            t.mremap(
                tid,
                p,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                w.start,
            )?;
        }
        Ok(())
    }

    /// Every mapping of the image at its address (captured ones writable for now).
    fn mappings(&mut self) -> Result<()> {
        let (t, tid) = (self.t, self.tid);
        let mut by_file: HashMap<usize, Vec<&Vma>> = HashMap::new();
        let mut by_object: HashMap<u32, Vec<&Vma>> = HashMap::new();
        for v in self.image.vmas.iter().filter(|v| !is_special(v)) {
            match v.backing {
                Backing::File { index, .. } => by_file.entry(index).or_default().push(v),
                Backing::Shared { object, .. } => by_object.entry(object).or_default().push(v),
                _ => {
                    let prot = v.prot() | if v.captured { libc::PROT_WRITE } else { 0 };
                    let flags = libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | libc::MAP_FIXED
                        | if v.grows_down { libc::MAP_GROWSDOWN } else { 0 };
                    t.mmap(tid, v.start, v.end - v.start, prot, flags, -1, 0)?;
                }
            }
        }
        let mut files: Vec<_> = by_file.into_iter().collect();
        files.sort_by_key(|(i, _)| *i);
        for (index, vmas) in files {
            let path = &self.image.files[index].path;
            let rw = vmas.iter().any(|v| v.shared && v.write);
            let fd = t.openat(
                tid,
                libc::AT_FDCWD,
                path,
                (if rw { libc::O_RDWR } else { libc::O_RDONLY }) | libc::O_CLOEXEC,
                0,
            )?;
            let mut result = Ok(());
            for v in vmas {
                let Backing::File { offset, .. } = v.backing else {
                    unreachable!("grouped by file")
                };
                let prot = v.prot() | if v.captured { libc::PROT_WRITE } else { 0 };
                let flags = libc::MAP_FIXED
                    | if v.shared {
                        libc::MAP_SHARED
                    } else {
                        libc::MAP_PRIVATE
                    };
                if let Err(e) = t.mmap(tid, v.start, v.end - v.start, prot, flags, fd, offset) {
                    result = Err(e);
                    break;
                }
            }
            t.close(tid, fd)?;
            result?;
        }
        let mut objects: Vec<_> = by_object.into_iter().collect();
        objects.sort_by_key(|(i, _)| *i);
        for (object, vmas) in objects {
            let mon =
                self.shared_fds
                    .get(&object)
                    .ok_or_else(|| RunError::NotAProcessCheckpoint {
                        detail: format!(
                            "image maps shared object {object}, which it does not hold"
                        ),
                    })?;
            // A descriptor number above every one the image uses, closed again below.
            let at = self
                .channel
                .map(|(c, _)| c + 1)
                .unwrap_or(self.max_fd() + 1)
                .max(self.max_fd() + 1);
            self.remote().install_fd(mon.as_fd(), at, true)?;
            let mut result = Ok(());
            for v in vmas {
                let Backing::Shared { offset, .. } = v.backing else {
                    unreachable!("grouped by object")
                };
                let flags = libc::MAP_FIXED | libc::MAP_SHARED;
                if let Err(e) = t.mmap(tid, v.start, v.end - v.start, v.prot(), flags, at, offset) {
                    result = Err(e);
                    break;
                }
            }
            t.close(tid, at)?;
            result?;
        }
        Ok(())
    }

    /// Registers the captured private anonymous mappings with a userfaultfd of the process for
    /// the lazy fill (`None`: the kernel or the process's rights do not allow it — such as a
    /// userfaultfd that handles faults in the kernel's own accesses — so pages are written in).
    fn setup_lazy(&mut self, engine: &Engine<ShadowSpace>) -> Result<Option<ProcSetup>> {
        let (t, tid) = (self.t, self.tid);
        let ps = kioku_track::page_size();
        let remote = match t.userfaultfd(tid, libc::O_CLOEXEC | libc::O_NONBLOCK) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::info!(
                    "restoring by writing pages in: no userfaultfd for process {} ({e})",
                    self.image.pid
                );
                return Ok(None);
            }
        };
        let taken = kioku_track::take_uffd_from(t.pid(), remote);
        t.close(tid, remote)?;
        let uffd = match taken {
            Ok(f) => f,
            Err(e) => {
                tracing::info!("restoring by writing pages in: {e}");
                return Ok(None);
            }
        };
        if let Err(e) = lazy::handshake(uffd.as_raw_fd()) {
            tracing::info!("restoring by writing pages in: userfaultfd features refused ({e})");
            return Ok(None);
        }
        let mut ranges = Vec::new();
        let mut registered: Vec<PageRange> = Vec::new();
        for a in &self.image.areas {
            let (Some(crcs), Some((valid_off, other_off))) = (
                engine.page_checksums(&a.region),
                engine.context_offsets(&a.region),
            ) else {
                continue;
            };
            let len = (crcs.len() * ps) as u64;
            if len == 0 {
                continue;
            }
            let medium = engine.pool().medium();
            let map = |off| {
                medium
                    .map_range(std::ptr::null_mut(), off, len, false)
                    .map_err(kioku_pool::PoolError::from)
            };
            let keep = std::sync::Arc::new([map(valid_off)?, map(other_off)?]);
            let crcs: std::sync::Arc<[u32]> = crcs.into();
            let data: [std::sync::Arc<[bool]>; 2] = [
                engine.committed_data(&a.region).unwrap_or_default().into(),
                engine.running_data(&a.region).unwrap_or_default().into(),
            ];
            for v in self.image.vmas.iter().filter(|v| {
                v.captured
                    && matches!(v.backing, Backing::Anonymous)
                    && v.start < a.end
                    && a.start < v.end
            }) {
                let lo = v.start.max(a.start);
                let hi = v.end.min(a.end).min(a.start + crcs.len() * ps);
                if lo >= hi {
                    continue;
                }
                let range = PageRange::new(lo, hi);
                // The whole mapping is registered, not only the area's part of it: a partial
                // registration would split it (`whole_mappings`). Its pages outside the area
                // were not populated at the checkpoint: a fault there gets a zero page.
                let whole = PageRange::new(v.start, v.end);
                if !registered.contains(&whole) {
                    if let Err(e) = lazy::register(uffd.as_raw_fd(), whole, range) {
                        // (Dropping the descriptor unregisters what was registered.)
                        tracing::info!(range = ?whole, "restoring by writing pages in: registering for missing-page faults failed ({e})");
                        return Ok(None);
                    }
                    registered.push(whole);
                } else if let Err(e) = lazy::write_protect(uffd.as_raw_fd(), range) {
                    tracing::info!(
                        ?range,
                        "restoring by writing pages in: write-protecting failed ({e})"
                    );
                    return Ok(None);
                }
                let first = (lo - a.start) / ps;
                ranges.push((
                    range,
                    Source {
                        region: a.region.clone(),
                        first_page: first,
                        valid: keep[0].as_ptr() as usize + first * ps,
                        other: keep[1].as_ptr() as usize + first * ps,
                        crcs: crcs[first..].into(),
                        data: [0, 1].map(|c| data[c].get(first..).unwrap_or(&[]).into()),
                        _maps: keep.clone(),
                    },
                ));
            }
        }
        registered.sort_by_key(|r| r.start);
        Ok(Some(ProcSetup {
            pid: t.pid(),
            uffd,
            ranges,
            registered,
        }))
    }

    /// Whether `page` is left to the lazy fill.
    fn is_lazy(&self, page: usize) -> bool {
        self.lazy_ranges
            .as_ref()
            .is_some_and(|(_, v)| v.iter().any(|r| r.start <= page && page < r.end))
    }
}

/// The checkpoint's pages of one region, as a restore reads them: the valid context's after a
/// full recovery; after a lazy one the valid context's checked against their checksums (the
/// other context's when intact instead). Holes — pages a sparse section, or tmpfs, does not
/// hold — are never read (reading one through a mapping fills it): they are zero pages.
pub(crate) struct CheckpointPages<'e> {
    name: &'e str,
    valid: &'e [u8],
    valid_data: Vec<bool>,
    /// After a lazy recovery: the other context's bytes (the region's mapping), which pages
    /// of it hold data, and the checkpoint's checksums.
    check: Option<(&'e [u8], Vec<bool>, &'e [u32])>,
    zero_crc: u32,
}

impl<'e> CheckpointPages<'e> {
    /// Region `name` of `engine`, whose pages are `len` bytes at least.
    pub fn of(engine: &'e Engine<ShadowSpace>, name: &'e str, len: usize) -> Result<Self> {
        let short = || RunError::NotAProcessCheckpoint {
            detail: format!("region {name} is shorter than its memory"),
        };
        let region = engine
            .region(name)
            .ok_or_else(|| RunError::NotAProcessCheckpoint {
                detail: format!("image names region {name} which the pool lacks"),
            })?;
        let valid = engine.committed(name).unwrap_or(&[]);
        if valid.len() < len || region.len < len {
            return Err(short());
        }
        let ps = kioku_track::page_size();
        let check = if engine.recovery_pending() {
            // SAFETY: the region's mapping (its running context) is `region.len` readable
            // bytes, alive with the engine; its holes are not read (`running_data`).
            let other = unsafe { std::slice::from_raw_parts(region.addr as *const u8, region.len) };
            let data = engine.running_data(name).unwrap_or_default();
            let crcs = engine.page_checksums(name).unwrap_or(&[]);
            if crcs.len() * ps < len {
                return Err(short());
            }
            Some((other, data, crcs))
        } else {
            None
        };
        Ok(CheckpointPages {
            name,
            valid,
            valid_data: engine.committed_data(name).unwrap_or_default(),
            check,
            zero_crc: crc32c::crc32c(&vec![0u8; ps]),
        })
    }

    /// The valid context's bytes of the region (holes included: not to be read blindly).
    pub fn valid(&self) -> &'e [u8] {
        self.valid
    }

    /// Page `index`: its bytes, or `None` for a zero page (a hole, not read). Fails when a
    /// lazily recovered page fails its checksum in both contexts.
    pub fn page(&self, index: usize) -> Result<Option<&'e [u8]>> {
        let ps = kioku_track::page_size();
        let at = index * ps;
        // A medium that cannot tell holes reports data everywhere (`data_map`).
        let held = |data: &[bool]| data.get(index).copied().unwrap_or(true);
        let Some((other, other_data, crcs)) = &self.check else {
            return Ok(held(&self.valid_data).then(|| &self.valid[at..at + ps]));
        };
        let want = crcs[index];
        for (bytes, data) in [(self.valid, &self.valid_data), (*other, other_data)] {
            if !held(data) {
                if want == self.zero_crc {
                    return Ok(None);
                }
                continue;
            }
            let Some(b) = bytes.get(at..at + ps) else {
                continue;
            };
            if crc32c::crc32c(b) == want {
                return Ok(Some(b));
            }
        }
        Err(RunError::DamagedCheckpoint {
            what: format!(
                "page {index} of region {} fails its checksum in both contexts of the pool",
                self.name
            ),
        })
    }
}

impl Rebuild<'_> {
    /// Writes the captured pages that differ from what the fresh mapping shows (except those
    /// left to the lazy fill).
    fn contents(&mut self, engine: &Engine<ShadowSpace>) -> Result<u64> {
        let ps = kioku_track::page_size();
        let mut chunks: Vec<(usize, usize, usize)> = Vec::new();
        let mut open: HashMap<usize, std::fs::File> = HashMap::new();
        let mut filebuf = vec![0u8; ps];
        let zero_page = vec![0u8; ps];
        for a in &self.image.areas {
            // The checkpoint's bytes (the valid context's: a sparse engine's running context is
            // empty after a recovery), read only for pages not left to the lazy fill.
            let mut pages: Option<CheckpointPages<'_>> = None;
            for v in self
                .image
                .vmas
                .iter()
                .filter(|v| v.captured && v.start < a.end && a.start < v.end)
            {
                let lo = v.start.max(a.start);
                let hi = v.end.min(a.end);
                for page in (lo..hi).step_by(ps) {
                    if self.is_lazy(page) {
                        continue;
                    }
                    if pages.is_none() {
                        pages = Some(CheckpointPages::of(engine, &a.region, a.end - a.start)?);
                    }
                    let pages = pages.as_ref().expect("made just above");
                    let bytes: &[u8] = match pages.page((page - a.start) / ps)? {
                        Some(b) => b,
                        // A hole: zero, as the fresh anonymous mapping shows.
                        None if !matches!(v.backing, Backing::File { .. }) => continue,
                        None => &zero_page[..],
                    };
                    let local = bytes.as_ptr() as usize;
                    let differs = match v.backing {
                        Backing::File { index, offset } => {
                            let f = match open.get(&index) {
                                Some(f) => f,
                                None => {
                                    let p = &self.image.files[index].path;
                                    let f = std::fs::File::open(p).map_err(|e| {
                                        RunError::io(format!("opening {}", p.display()), e)
                                    })?;
                                    open.entry(index).or_insert(f)
                                }
                            };
                            filebuf.fill(0);
                            let at = offset + (page - v.start) as u64;
                            let mut got = 0;
                            while got < ps {
                                match f.read_at(&mut filebuf[got..], at + got as u64) {
                                    Ok(0) => break,
                                    Ok(n) => got += n,
                                    Err(e) => return Err(RunError::io("reading a mapped file", e)),
                                }
                            }
                            bytes != &filebuf[..]
                        }
                        _ => !is_zero(bytes),
                    };
                    if differs {
                        match chunks.last_mut() {
                            Some(c) if c.0 + c.2 == page && c.1 + c.2 == local => c.2 += ps,
                            _ => chunks.push((page, local, ps)),
                        }
                    }
                }
            }
        }
        sys::copy_pages(self.t.pid(), &chunks, false)
    }

    fn protections(&mut self) -> Result<()> {
        for v in self
            .image
            .vmas
            .iter()
            .filter(|v| v.captured && !v.write && !is_special(v))
        {
            self.t
                .mprotect(self.tid, v.start, v.end - v.start, v.prot())?;
        }
        Ok(())
    }

    /// brk, stack, argument and environment bounds, auxv: `prctl(PR_SET_MM, PR_SET_MM_MAP)`.
    fn mm(&mut self) -> Result<()> {
        const PR_SET_MM: u64 = 35;
        const PR_SET_MM_MAP: u64 = 14;
        let m = &self.image.mm;
        let auxv: Vec<u8> = self
            .image
            .auxv
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let (t, tid) = (self.t, self.tid);
        let page = t.mmap(
            tid,
            0,
            4096 + auxv.len().next_multiple_of(4096),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        let mut b = Vec::with_capacity(104);
        for w in [
            m.start_code,
            m.end_code,
            m.start_data,
            m.end_data,
            m.start_brk,
            m.brk,
            m.start_stack,
            m.arg_start,
            m.arg_end,
            m.env_start,
            m.env_end,
            (page + 128) as u64,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&(auxv.len() as u32).to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes()); // exe_fd: keep
        let r = t
            .write_mem(page, &b)
            .and_then(|_| t.write_mem(page + 128, &auxv))
            .and_then(|_| {
                t.syscall(
                    tid,
                    libc::SYS_prctl,
                    &[PR_SET_MM, PR_SET_MM_MAP, page as u64, b.len() as u64, 0],
                )
            });
        t.munmap(tid, page, 4096 + auxv.len().next_multiple_of(4096))?;
        r?;
        Ok(())
    }

    fn cwd(&mut self) -> Result<()> {
        let mut p = self.image.cwd.as_os_str().as_encoded_bytes().to_vec();
        p.push(0);
        let (t, tid) = (self.t, self.tid);
        t.with_remote_bytes(tid, &p, |at| {
            t.syscall(tid, libc::SYS_chdir, &[at as u64]).map(|_| ())
        })
        .map_err(|e| {
            RunError::io(
                format!("changing to directory {}", self.image.cwd.display()),
                std::io::Error::other(e),
            )
        })
    }

    fn sigactions(&mut self) -> Result<()> {
        let (t, tid) = (self.t, self.tid);
        for a in &self.image.sigactions {
            let mut b = Vec::with_capacity(32);
            for w in [a.handler, a.flags, a.restorer, a.mask] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            t.with_remote_bytes(tid, &b, |at| {
                t.syscall(
                    tid,
                    libc::SYS_rt_sigaction,
                    &[a.sig as u64, at as u64, 0, 8],
                )
                .map(|_| ())
            })?;
        }
        Ok(())
    }

    /// Recreates the other threads, then gives every thread its kernel-side state and its
    /// registers.
    fn threads(&mut self) -> Result<()> {
        let (t, leader) = (self.t, self.tid);
        let mut tids = vec![leader];
        for ti in self.image.threads.iter().skip(1) {
            if let Some(ns) = self.ns {
                ns.next_pid(ti.tid)?;
            }
            let before = t.threads();
            let flags = libc::CLONE_VM
                | libc::CLONE_FS
                | libc::CLONE_FILES
                | libc::CLONE_SIGHAND
                | libc::CLONE_THREAD
                | libc::CLONE_SYSVSEM;
            t.syscall(leader, libc::SYS_clone, &[flags as u64, 0, 0, 0, 0])?;
            t.stop_all()?;
            let new = t
                .threads()
                .into_iter()
                .find(|x| !before.contains(x))
                .ok_or_else(|| RunError::Unsupported {
                    what: "a thread created for the restore did not appear".into(),
                })?;
            if self.ns.is_some() {
                let got = kioku_proc::ns::ns_tid_of(t.pid(), new);
                if got != Some(ti.tid) {
                    return Err(RunError::Unsupported {
                        what: format!(
                            "thread {} of process {} came back as {got:?} (its id was taken)",
                            ti.tid, self.image.pid
                        ),
                    });
                }
            }
            tids.push(new);
        }
        for (ti, &tid) in self.image.threads.iter().zip(&tids) {
            t.syscall(tid, libc::SYS_set_tid_address, &[ti.tid_address])?;
            if ti.robust_list.0 != 0 {
                t.syscall(
                    tid,
                    libc::SYS_set_robust_list,
                    &[ti.robust_list.0, ti.robust_list.1],
                )?;
            }
            if ti.rseq.1 != 0 {
                t.syscall(
                    tid,
                    libc::SYS_rseq,
                    &[ti.rseq.0, ti.rseq.1 as u64, 0, ti.rseq.2 as u64],
                )?;
            }
            let bytes = unhex(&ti.state).ok_or_else(|| RunError::NotAProcessCheckpoint {
                detail: "thread state is not hex".into(),
            })?;
            let mut state = ThreadState::from_bytes(&bytes)?;
            restart_fixup(&mut state.regs);
            // The signal stack and the like first: the kernel refuses a sigaltstack change
            // while the stack pointer is on it.
            crate::procstate::restore_thread(
                &TracedRemote {
                    tracee: t,
                    tid,
                    channel: None,
                },
                tid,
                &ti.kernel,
            )?;
            t.set_thread_state(tid, &state)?;
            sys::set_sigmask(tid, ti.sigmask)?;
        }
        self.tids = tids;
        Ok(())
    }

    /// Signals queued at the checkpoint, queued again with their `siginfo_t` (a timer's id,
    /// a sender's pid…) by the process itself, per thread then process-wide; a checkpoint
    /// without them (older images) raises the pending set instead.
    fn pending_signals(&self) -> Result<()> {
        let t = self.t;
        // Ids as the process knows them (its namespace's).
        let pid = self.image.pid;
        for (ti, &tid) in self.image.threads.iter().zip(&self.tids) {
            if ti.queued.is_empty() {
                for sig in pending(ti.pending) {
                    // SAFETY: plain syscall with integer arguments.
                    unsafe { libc::syscall(libc::SYS_tgkill, t.pid(), tid, sig) };
                }
                continue;
            }
            // From the leader: the kernel lets a process queue any siginfo to itself only
            // when the caller's id is the process id.
            for q in &ti.queued {
                self.queue(
                    self.tid,
                    libc::SYS_rt_tgsigqueueinfo,
                    &[pid as u64, ti.tid as u64],
                    q,
                )?;
            }
        }
        if self.image.shared_queued.is_empty() {
            for sig in pending(self.image.shared_pending) {
                // SAFETY: plain syscall with integer arguments.
                unsafe { libc::kill(t.pid(), sig) };
            }
        }
        for q in &self.image.shared_queued {
            self.queue(self.tid, libc::SYS_rt_sigqueueinfo, &[pid as u64], q)?;
        }
        Ok(())
    }

    /// Queues one signal (`info`: its siginfo_t, hex) with `nr` injected in thread `tid`;
    /// `ids`: the call's pid (and tid) arguments.
    fn queue(&self, tid: i32, nr: i64, ids: &[u64], info: &str) -> Result<()> {
        let bytes = unhex(info).ok_or_else(|| RunError::NotAProcessCheckpoint {
            detail: "a queued signal is not hex".into(),
        })?;
        let sig = i32::from_le_bytes(bytes[..4].try_into().expect("siginfo"));
        let r = TracedRemote {
            tracee: self.t,
            tid,
            channel: None,
        };
        r.with_bytes(&bytes, &mut |at| {
            let mut args = ids.to_vec();
            args.push(sig as u64);
            args.push(at as u64);
            r.syscall("queueing a pending signal", nr, &args)
                .map(|_| ())
        })
    }
}

fn pending(mask: u64) -> impl Iterator<Item = i32> {
    (1..=64).filter(move |s| mask & (1u64 << (s - 1)) != 0)
}

/// A thread checkpointed inside an interrupted system call restarts it: with the call's own
/// number (a restart block of the old process does not exist here, so `nanosleep` and the
/// like start over with their original arguments).
fn restart_fixup(r: &mut kioku_proc::Regs) {
    if (r.orig_rax as i64) < 0 {
        return;
    }
    let rax = -(r.rax as i64);
    if matches!(
        rax,
        ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND | ERESTART_RESTARTBLOCK
    ) {
        r.rax = r.orig_rax;
        r.rip -= 2;
    }
    r.orig_rax = u64::MAX;
}

fn is_zero(b: &[u8]) -> bool {
    // Vectorised by the compiler; pages are 4 KiB.
    b.iter().fold(0u8, |acc, &x| acc | x) == 0
}
