//! Shared-memory objects of the tree: what MAP_SHARED mappings show — anonymous shared memory
//! (shared with forks), memfds, files mapped shared — each held in an engine region of its own
//! (`s<id>`) covering the object offsets the tree maps. Every process mapping an object writes
//! into the same region: pages it wrote (its own write-tracking) are copied from its mapping.
//! A region that is new, grown or moved is taken whole from every mapping of the object.
//!
//! A memfd that no process maps but one holds through a descriptor (made and not mapped yet,
//! or used as an in-memory file with `write(2)`/`read(2)`) is an object too: its region covers
//! the whole file, which is read through the monitor's duplicate of the descriptor, whole, at
//! each checkpoint ([`SharedObjects::copy_descriptor_held`]), and the image keeps its exact
//! length.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use kioku_ckpt::{Engine, RegionOptions};
use kioku_proc::MapEntry;
use kioku_track::PageRange;

use crate::error::{Result, RunError};
use crate::image::{SharedImage, SharedKind};
use crate::shadow::ShadowSpace;

/// An object as the kernel names it: device (major, minor) and inode.
pub(crate) type ObjectKey = (u32, u32, u64);

#[derive(Clone, Debug)]
struct Object {
    id: u32,
    kind: SharedKind,
    key: ObjectKey,
    /// Object offsets the region holds.
    lo: u64,
    hi: u64,
    region: Option<String>,
    /// Offsets mapped in this capture.
    used: Option<(u64, u64)>,
    /// The object's size (bytes) as last seen.
    size: u64,
    /// Copy every mapping of it whole in this capture (its region is new).
    whole: bool,
    /// Held through a descriptor and mapped by no process in this capture: the monitor's
    /// duplicate of the descriptor, its contents read whole at the capture.
    held: Option<Arc<OwnedFd>>,
}

/// The tree's shared-memory objects.
#[derive(Debug, Default)]
pub(crate) struct SharedObjects {
    objs: Vec<Object>,
    next: u32,
    /// Every object is taken whole until a capture completes ([`SharedObjects::captured`]):
    /// a process that wrote shared memory went away, with the only record of its writes (its
    /// own page tables' write-protect state).
    all_whole: bool,
}

impl SharedObjects {
    /// The objects of a restored image; `keys[i]` identifies `shared[i]` as restored.
    pub fn restored(shared: &[SharedImage], keys: &[ObjectKey], sizes: &[u64]) -> SharedObjects {
        let objs = shared
            .iter()
            .zip(keys)
            .zip(sizes)
            .map(|((s, k), size)| Object {
                id: s.id,
                kind: s.kind.clone(),
                key: *k,
                lo: s.lo,
                hi: s.hi,
                region: Some(s.region.clone()),
                used: None,
                size: *size,
                whole: false,
                held: None,
            })
            .collect();
        SharedObjects {
            objs,
            next: shared.iter().map(|s| s.id + 1).max().unwrap_or(0),
            all_whole: false,
        }
    }

    /// The object with kernel identity `key`, if the tree maps it (a mapping of this capture's
    /// surveys shows it) or holds it through a descriptor already seen in this capture.
    pub fn id_of(&self, key: ObjectKey) -> Option<u32> {
        self.objs
            .iter()
            .find(|o| o.key == key && o.used.is_some())
            .map(|o| o.id)
    }

    /// Before the surveys of a capture.
    pub fn begin(&mut self) {
        for o in &mut self.objs {
            o.used = None;
            o.whole = self.all_whole;
            o.held = None;
        }
    }

    /// Takes every object whole from now until a capture completes: a process of the tree
    /// ended or replaced itself (execve) since the last capture. Writes to shared memory are
    /// found in the page tables of the process that made them, so the writes of a process that
    /// is gone — a child that wrote its results and exited, possibly never seen by a capture —
    /// are in no other process's record.
    pub fn writers_gone(&mut self) {
        self.all_whole = true;
        for o in &mut self.objs {
            o.whole = true;
        }
    }

    /// A capture completed: objects are taken by their written pages again.
    pub fn captured(&mut self) {
        self.all_whole = false;
    }

    /// The object mapping `m` shows (registering it, and the offsets `m` maps).
    pub fn object_for(&mut self, m: &MapEntry, kind: SharedKind) -> Result<u32> {
        let id = self.known_or_new((m.dev.0, m.dev.1, m.inode), kind, 0);
        self.note_use(id, m.offset, m.len() as u64);
        Ok(id)
    }

    /// The id of object `key`, registered (taken whole at first) if it is new.
    fn known_or_new(&mut self, key: ObjectKey, kind: SharedKind, size: u64) -> u32 {
        if let Some(o) = self.objs.iter().find(|o| o.key == key) {
            return o.id;
        }
        let id = self.next;
        self.next += 1;
        self.objs.push(Object {
            id,
            kind,
            key,
            lo: 0,
            hi: 0,
            region: None,
            used: None,
            size,
            whole: true,
            held: None,
        });
        id
    }

    /// Memfd `key` of `size` bytes, held through a descriptor (`dup`, the monitor's duplicate)
    /// and mapped by no process: after the surveys of the mappings, so an object any process
    /// maps is known already and taken through its mappings. Its region covers the whole file
    /// (at least a page), taken whole.
    pub fn object_for_descriptor(
        &mut self,
        key: ObjectKey,
        kind: SharedKind,
        size: u64,
        dup: OwnedFd,
    ) -> u32 {
        let id = self.known_or_new(key, kind, size);
        let page = kioku_track::page_size() as u64;
        if let Some(o) = self.objs.iter_mut().find(|o| o.id == id) {
            o.size = size;
            o.whole = true;
            o.held = Some(Arc::new(dup));
        }
        self.note_use(id, 0, size.div_ceil(page).max(1) * page);
        id
    }

    /// Copies every object held through a descriptor only into its region (the bytes past the
    /// file's end zero), marking the pages written; returns the bytes copied. Call in the stop,
    /// after [`SharedObjects::reconcile`].
    pub fn copy_descriptor_held(
        &self,
        engine: &Engine<ShadowSpace>,
        marks: &crate::shadow::Marks,
    ) -> Result<u64> {
        let mut copied = 0;
        for o in &self.objs {
            let (Some(fd), Some(name)) = (&o.held, &o.region) else {
                continue;
            };
            let Some(region) = engine.region(name) else {
                continue;
            };
            let len = (o.hi - o.lo) as usize;
            engine.allocate_running(&[(region.addr, len)])?;
            // SAFETY: `[addr, addr + len)` lies in the region's mapping (the region covers the
            // object offsets [lo, hi)), which the engine keeps mapped read-write in the
            // monitor; nothing else uses it during the stop.
            let buf = unsafe { std::slice::from_raw_parts_mut(region.addr as *mut u8, len) };
            read_whole(fd, o.lo, buf)
                .map_err(|e| RunError::io("reading a memfd the tree holds", e))?;
            marks.add(PageRange::new(region.addr, region.addr + len));
            copied += len as u64;
        }
        Ok(copied)
    }

    /// Records that a mapping shows offsets `[offset, offset+len)` of object `id`.
    pub fn note_use(&mut self, id: u32, offset: u64, len: u64) {
        if let Some(o) = self.objs.iter_mut().find(|o| o.id == id) {
            let (lo, hi) = o.used.unwrap_or((offset, offset + len));
            o.used = Some((lo.min(offset), hi.max(offset + len)));
        }
    }

    /// Records an object's size (from a mapping's `/proc/PID/map_files` entry).
    pub fn note_size(&mut self, id: u32, size: u64) {
        if let Some(o) = self.objs.iter_mut().find(|o| o.id == id) {
            o.size = size;
        }
    }

    /// After every survey: regions for the objects mapped now (created, grown, or moved —
    /// then taken whole), none for the objects nobody maps any more.
    pub fn reconcile(&mut self, engine: &mut Engine<ShadowSpace>) -> Result<()> {
        let mut keep = Vec::with_capacity(self.objs.len());
        for mut o in std::mem::take(&mut self.objs) {
            let Some((lo, hi)) = o.used else {
                if let Some(r) = &o.region {
                    engine.delete_region(r)?;
                }
                continue;
            };
            match &o.region {
                Some(r) if lo >= o.lo && hi <= o.hi => {
                    let _ = r;
                }
                Some(r) if lo >= o.lo => {
                    match engine.resize_region(r, (hi - o.lo) as usize) {
                        Ok(_) => {}
                        Err(kioku_ckpt::CkptError::BeyondReservation { .. }) => {
                            engine.delete_region(r)?;
                            Self::create(engine, &mut o, lo, hi)?;
                        }
                        Err(e) => return Err(e.into()),
                    }
                    o.hi = hi;
                    o.whole = true;
                }
                Some(r) => {
                    let r = r.clone();
                    engine.delete_region(&r)?;
                    let (lo, hi) = (lo.min(o.lo), hi.max(o.hi));
                    Self::create(engine, &mut o, lo, hi)?;
                }
                None => Self::create(engine, &mut o, lo, hi)?,
            }
            keep.push(o);
        }
        self.objs = keep;
        Ok(())
    }

    fn create(engine: &mut Engine<ShadowSpace>, o: &mut Object, lo: u64, hi: u64) -> Result<()> {
        let name = format!("s{}", o.id);
        let len = (hi - lo) as usize;
        engine
            .create_region(
                &name,
                len,
                RegionOptions {
                    addr: None,
                    reserve: Some((2 * len).max(16 << 20)),
                },
            )
            .map_err(|e| match e {
                kioku_ckpt::CkptError::Pool(kioku_pool::PoolError::TooManySections { .. }) => {
                    RunError::Unsupported {
                        what: "the tree has more separate memory areas than a pool holds".into(),
                    }
                }
                e => e.into(),
            })?;
        o.region = Some(name);
        o.lo = lo;
        o.hi = hi;
        o.whole = true;
        Ok(())
    }

    /// Takes object `id` whole in this capture: something changes it besides its mappings'
    /// stores (a descriptor open for writing: write(2) leaves no trace in page tables).
    pub fn force_whole(&mut self, id: u32) {
        if let Some(o) = self.objs.iter_mut().find(|o| o.id == id) {
            o.whole = true;
        }
    }

    /// Whether every mapping of object `id` is taken whole in this capture.
    pub fn take_whole(&self, id: u32) -> bool {
        self.objs.iter().any(|o| o.id == id && o.whole)
    }

    /// (program address, shadow address, length) chunks to copy `len` bytes of object `id` at
    /// `offset`, mapped at `prog` in a process.
    pub fn chunks(
        &self,
        id: u32,
        offset: u64,
        prog: usize,
        len: usize,
        engine: &Engine<ShadowSpace>,
        out: &mut Vec<(usize, usize, usize)>,
    ) {
        let Some(o) = self.objs.iter().find(|o| o.id == id) else {
            return;
        };
        let Some(region) = o.region.as_ref().and_then(|r| engine.region(r)) else {
            return;
        };
        let lo = offset.max(o.lo);
        let hi = (offset + len as u64).min(o.hi);
        if lo >= hi {
            return;
        }
        let at = prog + (lo - offset) as usize;
        out.push((at, region.addr + (lo - o.lo) as usize, (hi - lo) as usize));
    }

    /// What the page at `offset` of object `id` may hold now: the region's copy when the
    /// running context has it (written in this epoch), else zero or the last checkpoint's
    /// (a sparse engine's running context holds only the epoch's pages).
    pub fn page_candidates<'e>(
        &self,
        id: u32,
        offset: u64,
        engine: &'e Engine<ShadowSpace>,
    ) -> Option<Vec<&'e [u8]>> {
        let o = self.objs.iter().find(|o| o.id == id)?;
        let name = o.region.as_ref()?;
        let region = engine.region(name)?;
        let ps = kioku_track::page_size() as u64;
        if offset < o.lo || offset + ps > o.hi {
            return None;
        }
        let k = (offset - o.lo) as usize;
        let data = engine.running_data(name).unwrap_or_default();
        if data.get(k / ps as usize) == Some(&false) {
            static ZERO: [u8; 4096] = [0; 4096];
            let mut v: Vec<&[u8]> = vec![&ZERO[..ps.min(4096) as usize]];
            if let Some(c) = engine
                .committed(name)
                .and_then(|c| c.get(k..k + ps as usize))
            {
                v.push(c);
            }
            return Some(v);
        }
        // SAFETY: the page lies inside the region's mapping, which lives as long as the engine
        // borrowed for 'e; the monitor is the only writer and is not writing now.
        Some(vec![unsafe {
            std::slice::from_raw_parts((region.addr + k) as *const u8, ps as usize)
        }])
    }

    /// The objects as the image records them.
    pub fn images(&self) -> Vec<SharedImage> {
        self.objs
            .iter()
            .filter_map(|o| {
                Some(SharedImage {
                    id: o.id,
                    kind: o.kind.clone(),
                    lo: o.lo,
                    hi: o.hi,
                    size: o.size.max(o.hi),
                    length: o.held.as_ref().map(|_| o.size),
                    region: o.region.clone()?,
                })
            })
            .collect()
    }
}

/// Fills `buf` with the file `fd` holds from offset `at`, zeros past its end. Reads through a
/// descriptor of its own (opened read-only through /proc/self/fd: the program's may be
/// write-only, and its file offset is the program's).
fn read_whole(fd: &OwnedFd, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    let mut off = 0;
    while off < buf.len() {
        match file.read_at(&mut buf[off..], at + off as u64) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[off..].fill(0);
    Ok(())
}
