//! Restore by mapping: a restored process's private anonymous memory is not written in before
//! it runs. Each such mapping is registered with a userfaultfd of the process (MISSING and
//! write-protect modes — the same descriptor then tracks its writes for the next checkpoint),
//! and a thread of the monitor fills pages from the pool's valid context: on first touch (the
//! page and its neighbours, one `UFFDIO_COPY`) and in the background until every page is in,
//! each page checked against its checkpoint checksum first. Pages that are zero in the
//! checkpoint (holes) are never copied: the kernel gives zeros.
//!
//! What the program sees does not change: the memory stays anonymous. A page it drops
//! (`MADV_DONTNEED`) or unmaps is marked done (`UFFD_EVENT_REMOVE`/`UNMAP`: the kernel waits
//! until the event is read), so touching it again gives zeros, not the checkpoint's bytes; a
//! range it moves (`mremap`, `UFFD_EVENT_REMAP`) keeps its pages' sources; a child it forks
//! (`UFFD_EVENT_FORK`, delivered before the child runs) gets a userfaultfd of its own, filled
//! the same way from the pages its parent had not filled yet.
//!
//! A page that fails its checksum in both contexts kills the tree (the program never runs on
//! wrong data) and fails the restore's completion with a message naming the page. The next
//! checkpoint waits for every page (`LazyFill::wait_filled`). The thread lives as long as the
//! monitor: the events above keep coming (and their callers keep waiting for them to be read)
//! for as long as the descriptors exist.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use kioku_track::sys as uffd_sys;
use kioku_track::PageRange;

use crate::error::{Result, RunError};
use crate::sys::{intersect, normalize, subtract};

// include/uapi/linux/userfaultfd.h (Debian 12's headers and the libc crate lack most of these).
const UFFD_FEATURE_EVENT_FORK: u64 = 1 << 1;
const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_EVENT_FORK: u8 = 0x13;
const UFFD_EVENT_REMAP: u8 = 0x14;
const UFFD_EVENT_REMOVE: u8 = 0x15;
const UFFD_EVENT_UNMAP: u8 = 0x16;
const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const UFFDIO_WAKE: u64 = ior(0x02, 16);
const UFFDIO_COPY: u64 = iowr(0x03, std::mem::size_of::<UffdioCopy>());

#[repr(C)]
#[derive(Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// The features a lazily restored process's userfaultfd runs with.
pub(crate) const FEATURES: u64 = uffd_sys::UFFD_FEATURE_WP_ASYNC
    | uffd_sys::UFFD_FEATURE_WP_UNPOPULATED
    | UFFD_FEATURE_EVENT_FORK
    | UFFD_FEATURE_EVENT_REMAP
    | UFFD_FEATURE_EVENT_REMOVE
    | UFFD_FEATURE_EVENT_UNMAP;

/// Pages filled around a faulting one (one `UFFDIO_COPY`).
const READAHEAD: usize = 16;
/// Pages the background filler copies between looks at the descriptors.
const BATCH: usize = 256;

const UNFILLED: u8 = 0;
const FILLED: u8 = 1;
/// Zero in the checkpoint, never copied.
const HOLE: u8 = 2;
/// Dropped (or unmapped, or moved away) by the program: zero from now on, unlike the
/// checkpoint (so a zero page put there must count as written).
const DROPPED: u8 = 3;

/// Whether restores map memory lazily (the default) or write every page in first
/// (`KIOKU_EAGER_RESTORE=1`, the earlier way, kept as a baseline).
pub(crate) fn enabled() -> bool {
    std::env::var_os("KIOKU_EAGER_RESTORE").is_none_or(|v| v.is_empty() || v == "0")
}

/// The pool's bytes of one lazily restored range: where the valid context holds them, the
/// other context's copy (a repair source) and their checksums.
#[derive(Clone)]
pub(crate) struct Source {
    /// The region's name (for messages).
    pub region: String,
    /// Page index of `start` within the region.
    pub first_page: usize,
    /// Address (in the monitor) of the valid context's bytes of `start`.
    pub valid: usize,
    /// Address of the other context's bytes of `start`.
    pub other: usize,
    /// Checksums of the pages from `start` on.
    pub crcs: Arc<[u32]>,
    /// Which pages from `start` on hold data in the valid and in the other context (`false`:
    /// a hole — of a sparse section, or never written on tmpfs — which reads as zeros and is
    /// not read: reading it through the mapping would fill it).
    pub data: [Arc<[bool]>; 2],
    /// The filler's own mappings of the two contexts' sections (the pool's mapping of itself
    /// may move when the pool grows; these do not).
    pub _maps: Arc<[kioku_pool::media::Mapping; 2]>,
}

/// A range of one process filled lazily.
#[derive(Clone)]
struct Segment {
    start: usize,
    end: usize,
    src: Source,
    state: Vec<u8>,
}

impl Segment {
    fn page(&self, addr: usize) -> usize {
        (addr - self.start) / page()
    }

    /// Splits at `at` (inside), keeping the low part; returns the high one.
    fn split(&mut self, at: usize) -> Segment {
        let k = self.page(at);
        let mut src = self.src.clone();
        src.first_page += k;
        src.valid += k * page();
        src.other += k * page();
        src.crcs = self.src.crcs[k..].into();
        src.data = [0, 1].map(|c| self.src.data[c].get(k..).unwrap_or(&[]).into());
        let high = Segment {
            start: at,
            end: self.end,
            src,
            state: self.state.split_off(k),
        };
        self.end = at;
        high
    }
}

impl Proc {
    fn new(p: ProcSetup) -> Proc {
        let mut segments: Vec<Segment> = p
            .ranges
            .into_iter()
            .map(|(r, src)| {
                // A hole in the valid context whose checksum is zero's is a zero page: never
                // copied (a hole with another checksum is taken from the other context).
                let state = (0..r.len() / page())
                    .map(|p| {
                        let hole = !src.data[0].get(p).copied().unwrap_or(true);
                        if hole && src.crcs[p] == zero_page_crc() {
                            HOLE
                        } else {
                            UNFILLED
                        }
                    })
                    .collect();
                Segment {
                    start: r.start,
                    end: r.end,
                    src,
                    state,
                }
            })
            .collect();
        segments.sort_by_key(|s| s.start);
        Proc {
            uffd: p.uffd,
            segments,
            registered: p.registered,
            dropped: vec![],
            pid: Some(p.pid),
            done: false,
        }
    }
}

struct Proc {
    uffd: OwnedFd,
    segments: Vec<Segment>,
    /// The mappings registered for missing-page faults, whole (kept up to date through
    /// `UNMAP` and `REMAP` events), to drop that mode from whole mappings at the end.
    registered: Vec<PageRange>,
    /// Ranges the program dropped or unmapped before they were filled (for the capture: they
    /// were populated at the checkpoint and read as zero now).
    dropped: Vec<PageRange>,
    /// A process of the restore (its monitor pid), or a child forked meanwhile (`None`).
    pid: Option<i32>,
    /// Every page filled or zero, MISSING mode dropped.
    done: bool,
}

#[derive(Default)]
struct Shared {
    /// Pids whose fill is complete, with their dropped ranges.
    finished: Vec<(i32, Vec<PageRange>)>,
    all_done: bool,
    failure: Option<String>,
    /// Requests the thread to end (the monitor is done).
    stop: bool,
    /// Sequence of passes over the descriptors (to wait for one).
    passes: u64,
    /// Processes handed over, not yet taken by the thread.
    added: Vec<ProcSetup>,
}

/// The monitor's side of a lazy restore: the filling thread and what it reports.
pub struct LazyFill {
    shared: Arc<(Mutex<Shared>, Condvar)>,
    wake: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
    waited: bool,
}

/// What the restore collects per process before the thread starts.
pub(crate) struct ProcSetup {
    pub pid: i32,
    pub uffd: OwnedFd,
    pub ranges: Vec<(PageRange, Source)>,
    /// The whole mappings registered (they hold `ranges`; registering only a part of a mapping
    /// would split it).
    pub registered: Vec<PageRange>,
}

fn page() -> usize {
    kioku_track::page_size()
}

/// The checksum of a zero page.
fn zero_page_crc() -> u32 {
    static CRC: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *CRC.get_or_init(|| crc32c::crc32c(&vec![0u8; page()]))
}

fn ioctl<T>(fd: RawFd, req: u64, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: `arg` is the argument structure `req` expects, alive for the call.
    let rc = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `UFFDIO_API` on a fresh userfaultfd with the lazy restore's features.
pub(crate) fn handshake(fd: RawFd) -> std::io::Result<()> {
    let mut api = uffd_sys::UffdioApi {
        api: uffd_sys::UFFD_API,
        features: FEATURES,
        ioctls: 0,
    };
    ioctl(fd, uffd_sys::UFFDIO_API, &mut api)
}

/// Registers mapping `whole` for missing-page faults and write-protect tracking, and
/// write-protects its part `r` (write-protecting untouched memory would fill its page tables
/// with markers).
pub(crate) fn register(fd: RawFd, whole: PageRange, r: PageRange) -> std::io::Result<()> {
    register_mode(
        fd,
        whole,
        uffd_sys::UFFDIO_REGISTER_MODE_MISSING | uffd_sys::UFFDIO_REGISTER_MODE_WP,
    )?;
    write_protect(fd, r)
}

/// Write-protects registered range `r`.
pub(crate) fn write_protect(fd: RawFd, r: PageRange) -> std::io::Result<()> {
    let mut wp = uffd_sys::UffdioWriteprotect {
        range: uffd_sys::UffdioRange {
            start: r.start as u64,
            len: r.len() as u64,
        },
        mode: uffd_sys::UFFDIO_WRITEPROTECT_MODE_WP,
    };
    ioctl(fd, uffd_sys::UFFDIO_WRITEPROTECT, &mut wp)
}

/// Registers `r` again for missing-page faults besides write-protect (after the tracker's own
/// registration, which asks for write-protect only).
pub(crate) fn register_missing(fd: RawFd, r: PageRange) -> std::io::Result<()> {
    register_mode(
        fd,
        r,
        uffd_sys::UFFDIO_REGISTER_MODE_MISSING | uffd_sys::UFFDIO_REGISTER_MODE_WP,
    )
}

fn register_mode(fd: RawFd, r: PageRange, mode: u64) -> std::io::Result<()> {
    let mut reg = uffd_sys::UffdioRegister {
        range: uffd_sys::UffdioRange {
            start: r.start as u64,
            len: r.len() as u64,
        },
        mode,
        ioctls: 0,
    };
    ioctl(fd, uffd_sys::UFFDIO_REGISTER, &mut reg)
}

impl LazyFill {
    /// Starts the filling thread, with no process yet ([`LazyFill::add`]). `kill`: pids to
    /// SIGKILL when a page is damaged (the tree's processes and its namespace's init).
    pub(crate) fn start(kill: Vec<i32>) -> Result<LazyFill> {
        // SAFETY: eventfd with valid flags; we own the descriptor it returns.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(RunError::io("eventfd", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        let wake_thread = wake
            .try_clone()
            .map_err(|e| RunError::io("duplicating an eventfd", e))?;
        let procs = Vec::new();
        let shared = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
        let mut filler = Filler {
            procs,
            shared: shared.clone(),
            wake: wake_thread,
            kill,
            zero: vec![0u8; page()],
            zero_crc: crc32c::crc32c(&vec![0u8; page()]),
            failed: AtomicBool::new(false),
            retry: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("kioku-lazy-fill".into())
            .spawn(move || filler.run())
            .map_err(|e| RunError::io("starting the lazy restore's thread", e))?;
        Ok(LazyFill {
            shared,
            wake,
            thread: Some(thread),
            waited: false,
        })
    }

    /// Hands process `p` (registered already) to the thread, which serves its faults from now
    /// on.
    pub(crate) fn add(&self, p: ProcSetup) {
        let (m, _) = &*self.shared;
        m.lock().unwrap_or_else(|e| e.into_inner()).added.push(p);
        self.poke();
        // Until the thread has taken it, its faults would wait unread: wait for that.
        let (m, cv) = &*self.shared;
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        while !s.added.is_empty() && !s.stop {
            s = cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits until every page of every restored process is in (or zero), and for one more pass
    /// over the descriptors (events read, forked children's descriptors closed). Returns each
    /// restored process's ranges dropped before they were filled. Fails when a damaged page
    /// killed the tree.
    pub fn wait_filled(&mut self) -> Result<Vec<(i32, Vec<PageRange>)>> {
        let (m, cv) = &*self.shared;
        let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
        while !s.all_done && s.failure.is_none() {
            s = cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(f) = &s.failure {
            return Err(RunError::DamagedCheckpoint { what: f.clone() });
        }
        // Two passes begun after this point: the second started after a poke, whatever the
        // first was doing. (Poked again while waiting: an idle pass sleeps in poll otherwise.)
        let want = s.passes + 2;
        while s.passes < want && s.failure.is_none() {
            drop(s);
            self.poke();
            s = m.lock().unwrap_or_else(|e| e.into_inner());
            if s.passes < want {
                s = cv
                    .wait_timeout(s, std::time::Duration::from_millis(5))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        self.waited = true;
        Ok(std::mem::take(&mut s.finished))
    }

    /// Whether [`LazyFill::wait_filled`] has returned (the checkpoint may use the memory).
    pub fn filled(&self) -> bool {
        self.waited
    }

    fn poke(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a local to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }
}

impl Drop for LazyFill {
    fn drop(&mut self) {
        {
            let (m, _) = &*self.shared;
            m.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        }
        self.poke();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Filler {
    procs: Vec<Proc>,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    wake: OwnedFd,
    kill: Vec<i32>,
    zero: Vec<u8>,
    zero_crc: u32,
    failed: AtomicBool,
    /// Faults to serve again once the events before them are read: (process, address).
    retry: Vec<(usize, usize)>,
}

/// What a page's source turned out to be.
enum Checked {
    /// Copy from this address.
    Bytes(usize),
    /// Zero in the checkpoint.
    Hole,
}

impl Filler {
    fn run(&mut self) {
        let mut all_reported = false;
        loop {
            {
                let (m, cv) = &*self.shared;
                let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
                if s.stop {
                    return;
                }
                if !s.added.is_empty() {
                    for p in s.added.drain(..) {
                        self.procs.push(Proc::new(p));
                    }
                    all_reported = false;
                    s.all_done = false;
                    cv.notify_all();
                }
            }
            let work = !self.failed.load(Ordering::Relaxed)
                && (self.procs.iter().any(|p| !p.done) || !self.retry.is_empty());
            let mut fds: Vec<libc::pollfd> = self
                .procs
                .iter()
                .map(|p| libc::pollfd {
                    fd: p.uffd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            fds.push(libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            // SAFETY: `fds` is a valid array of pollfd for the call.
            let n = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as _,
                    if work { 0 } else { 1000 },
                )
            };
            if n > 0 {
                let mut buf = [0u8; 8];
                // SAFETY: draining our eventfd into a local buffer.
                unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr() as *mut _, 8) };
                let ready: Vec<usize> = fds[..fds.len() - 1]
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.revents != 0)
                    .map(|(i, _)| i)
                    .collect();
                for i in ready {
                    self.drain(i);
                }
            }
            for (i, addr) in std::mem::take(&mut self.retry) {
                self.fault(i, addr);
            }
            if work {
                self.fill_some();
            }
            if self.retry.is_empty() {
                // (Indices in `retry` name processes: none may move meanwhile.)
                self.close_finished();
            }
            let done = self.procs.iter().all(|p| p.done);
            let (m, cv) = &*self.shared;
            let mut s = m.lock().unwrap_or_else(|e| e.into_inner());
            s.passes += 1;
            if done && !all_reported {
                all_reported = true;
                s.all_done = true;
                for p in &mut self.procs {
                    if let Some(pid) = p.pid {
                        s.finished.push((pid, std::mem::take(&mut p.dropped)));
                    }
                }
            }
            cv.notify_all();
        }
    }

    /// Reads every message waiting on process `i`'s descriptor.
    fn drain(&mut self, i: usize) {
        loop {
            let mut msg = [0u8; 32];
            let fd = self.procs[i].uffd.as_raw_fd();
            // SAFETY: reading one uffd_msg (32 bytes) into a local buffer.
            let n = unsafe { libc::read(fd, msg.as_mut_ptr() as *mut _, msg.len()) };
            if n != msg.len() as isize {
                return;
            }
            let word = |at: usize| u64::from_le_bytes(msg[at..at + 8].try_into().expect("8"));
            tracing::trace!(
                event = msg[0],
                a = word(8),
                b = word(16),
                c = word(24),
                "lazy restore: event"
            );
            match msg[0] {
                UFFD_EVENT_PAGEFAULT => self.fault(i, word(16) as usize),
                UFFD_EVENT_REMOVE | UFFD_EVENT_UNMAP => {
                    let (start, end) = (word(8) as usize, word(16) as usize);
                    self.zero_range(i, start, end, true);
                    if msg[0] == UFFD_EVENT_UNMAP {
                        let p = &mut self.procs[i];
                        p.registered = subtract(&p.registered, &[PageRange::new(start, end)]);
                    }
                }
                UFFD_EVENT_REMAP => {
                    let (from, to, len) = (word(8) as usize, word(16) as usize, word(24) as usize);
                    self.remap(i, from, to, len);
                }
                UFFD_EVENT_FORK => {
                    let ufd = u32::from_le_bytes(msg[8..12].try_into().expect("4")) as RawFd;
                    // SAFETY: the kernel installed this new descriptor for us with the event.
                    let child = unsafe { OwnedFd::from_raw_fd(ufd) };
                    self.forked(i, child);
                }
                _ => {}
            }
        }
    }

    /// A child of process `i` appeared with its own userfaultfd: it holds what its parent held,
    /// so it must get from the pool every page its parent had not dropped (those its parent had
    /// filled it holds already: copying them fails with EEXIST, harmlessly).
    fn forked(&mut self, i: usize, child: OwnedFd) {
        let parent = &self.procs[i];
        if parent.done {
            // Nothing lazy is left: let the child go untracked, as any child does.
            drop(child);
            return;
        }
        let segments = parent
            .segments
            .iter()
            .map(|s| Segment {
                state: s
                    .state
                    .iter()
                    .map(|&x| if x == FILLED { UNFILLED } else { x })
                    .collect(),
                ..s.clone()
            })
            .collect();
        let registered = parent.registered.clone();
        self.procs.push(Proc {
            uffd: child,
            segments,
            registered,
            dropped: vec![],
            pid: None,
            done: false,
        });
    }

    /// Pages `[start, end)` of process `i` read as zero from now on (dropped, unmapped, or
    /// moved away).
    fn zero_range(&mut self, i: usize, start: usize, end: usize, note: bool) {
        let p = &mut self.procs[i];
        for s in &mut p.segments {
            let lo = start.max(s.start);
            let hi = end.min(s.end);
            if lo >= hi {
                continue;
            }
            let (a, b) = (s.page(lo), s.page(hi));
            if note && s.state[a..b].contains(&UNFILLED) {
                p.dropped.push(PageRange::new(lo, hi));
            }
            s.state[a..b].fill(DROPPED);
        }
    }

    /// `mremap` moved `[from, from+len)` of process `i` to `to`: its pages keep their sources.
    fn remap(&mut self, i: usize, from: usize, to: usize, len: usize) {
        let p = &mut self.procs[i];
        let end = from + len;
        let mut moved = Vec::new();
        let mut kept = Vec::new();
        for mut s in std::mem::take(&mut p.segments) {
            if s.end <= from || end <= s.start {
                kept.push(s);
                continue;
            }
            if s.start < from {
                let high = s.split(from);
                kept.push(s);
                s = high;
            }
            if end < s.end {
                let high = s.split(end);
                kept.push(high);
            }
            let mut m = s.clone();
            m.start = s.start - from + to;
            m.end = s.end - from + to;
            s.state.fill(DROPPED);
            kept.push(s);
            moved.push(m);
        }
        // (The destination was unmapped by the move: anything there is gone.)
        for s in &mut kept {
            let lo = to.max(s.start);
            let hi = (to + len).min(s.end);
            if lo < hi {
                let (a, b) = (s.page(lo), s.page(hi));
                s.state[a..b].fill(DROPPED);
            }
        }
        kept.extend(moved);
        kept.sort_by_key(|s| s.start);
        p.segments = kept;
        // The registration moves with the mapping.
        let range = [PageRange::new(from, end)];
        let mut registered = intersect(&p.registered, &range)
            .into_iter()
            .map(|r| PageRange::new(r.start - from + to, r.end - from + to))
            .collect::<Vec<_>>();
        registered.extend(subtract(
            &subtract(&p.registered, &range),
            &[PageRange::new(to, to + len)],
        ));
        normalize(&mut registered);
        p.registered = registered;
    }

    /// A missing-page fault of process `i` at `addr`: fill the page and its unfilled
    /// neighbours, or give a zero page, and wake the faulting thread.
    fn fault(&mut self, i: usize, addr: usize) {
        let ps = page();
        let addr = addr & !(ps - 1);
        let fd = self.procs[i].uffd.as_raw_fd();
        let found = self.procs[i]
            .segments
            .iter()
            .position(|s| s.start <= addr && addr < s.end);
        if let Some(k) = found {
            let s = &self.procs[i].segments[k];
            if s.state[s.page(addr)] == UNFILLED {
                let lo = (addr - READAHEAD / 2 * ps).max(s.start).min(addr);
                let hi = (lo + READAHEAD * ps).min(s.end);
                self.fill_range(i, k, lo, hi, Some(addr));
                return;
            }
        }
        // A hole (zeros, unwritten as the checkpoint's), dropped or unmapped (zeros that count
        // as written), or filled meanwhile (present already: just wake).
        let hole = found.is_some_and(|k| {
            let s = &self.procs[i].segments[k];
            s.state[s.page(addr)] == HOLE
        });
        let mode = if hole { UFFDIO_COPY_MODE_WP } else { 0 };
        if copy_mode(fd, addr, self.zero.as_ptr() as usize, ps, mode).is_err() {
            wake(fd, addr, ps);
        }
    }

    /// Fills the unfilled pages of `[lo, hi)` of segment `k` of process `i` (each checked
    /// first); `faulting`: a page a thread waits for, which must be present afterwards.
    fn fill_range(&mut self, i: usize, k: usize, lo: usize, hi: usize, faulting: Option<usize>) {
        let ps = page();
        let fd = self.procs[i].uffd.as_raw_fd();
        let mut at = lo;
        while at < hi {
            let s = &self.procs[i].segments[k];
            let pg = s.page(at);
            if s.state[pg] != UNFILLED {
                at += ps;
                continue;
            }
            // A run of consecutive pages whose checked bytes are consecutive in the pool.
            let first = match self.check(i, k, pg) {
                Some(c) => c,
                None => return,
            };
            let mut run_end = at + ps;
            if let Checked::Bytes(src) = first {
                while run_end < hi {
                    let s = &self.procs[i].segments[k];
                    let q = s.page(run_end);
                    if s.state[q] != UNFILLED {
                        break;
                    }
                    match self.check(i, k, q) {
                        Some(Checked::Bytes(b)) if b == src + (run_end - at) => run_end += ps,
                        Some(_) => break,
                        None => return,
                    }
                }
            }
            let src = match first {
                Checked::Bytes(src) => src,
                Checked::Hole if faulting == Some(at) => self.zero.as_ptr() as usize,
                Checked::Hole => {
                    // Never copied: zeros when it is touched.
                    self.procs[i].segments[k].state[pg] = HOLE;
                    at += ps;
                    continue;
                }
            };
            let result = copy(fd, at, src, run_end - at);
            if let Err(e) = &result {
                tracing::trace!(at, len = run_end - at, "lazy restore: UFFDIO_COPY: {e}");
            }
            let s = &mut self.procs[i].segments[k];
            let (a, b) = (s.page(at), s.page(run_end));
            match result {
                Ok(()) => s.state[a..b].fill(FILLED),
                Err(e) => match e.raw_os_error() {
                    // Partly present (copied before, or by the kernel): one page at a time.
                    Some(libc::EEXIST) if b - a > 1 => {
                        for p in a..b {
                            let addr = s.start + p * ps;
                            let bytes = src + (p - a) * ps;
                            match copy(fd, addr, bytes, ps) {
                                Ok(()) => s.state[p] = FILLED,
                                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                                Err(_) => s.state[p] = FILLED,
                            }
                        }
                    }
                    Some(libc::EEXIST) => s.state[a..b].fill(FILLED),
                    // The mappings are changing (an event is on its way, and must be read
                    // first): the faulting thread keeps waiting, the fault is retried after it.
                    Some(libc::EAGAIN) => {
                        if let Some(f) = faulting {
                            self.retry.push((i, f));
                        }
                        return;
                    }
                    // Not registered there any more (unmapped or replaced): nothing to fill.
                    Some(libc::ENOENT) | Some(libc::EINVAL) => s.state[a..b].fill(DROPPED),
                    // The process is gone.
                    _ => {
                        for s in &mut self.procs[i].segments {
                            s.state.fill(DROPPED);
                        }
                        return;
                    }
                },
            }
            at = run_end;
        }
        if let Some(f) = faulting {
            // (A copy wakes the faulting thread itself; a page that was present already
            // needs an explicit wake.)
            wake(fd, f, ps);
        }
    }

    /// Checks page `pg` of segment `k` of process `i` against its checksum: the valid context's
    /// bytes, else the other context's when they are intact. A page intact in neither kills the
    /// tree (`None`).
    fn check(&mut self, i: usize, k: usize, pg: usize) -> Option<Checked> {
        let ps = page();
        let src = &self.procs[i].segments[k].src;
        let want = src.crcs[pg];
        for (c, base) in [src.valid, src.other].into_iter().enumerate() {
            if !src.data[c].get(pg).copied().unwrap_or(true) {
                // A hole: zeros, not read.
                if want == self.zero_crc {
                    return Some(Checked::Hole);
                }
                continue;
            }
            let at = base + pg * ps;
            // SAFETY: `at` is a page of the pool's mapping of this region (valid or other
            // context), which the engine keeps mapped and unchanged until the restore's
            // completion (`LazyFill::wait_filled` runs before the engine's `finish_recovery`).
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, ps) };
            let crc = crc32c::crc32c(bytes);
            if crc == want {
                if crc == self.zero_crc && bytes.iter().all(|&b| b == 0) {
                    return Some(Checked::Hole);
                }
                return Some(Checked::Bytes(at));
            }
        }
        let what = format!(
            "page {} of region {} fails its checksum in both contexts of the pool",
            src.first_page + pg,
            src.region
        );
        self.fail(what);
        None
    }

    fn fail(&mut self, what: String) {
        tracing::error!(
            "kioku: the checkpoint is damaged ({what}); the restored program was killed rather than run on wrong data"
        );
        for &pid in &self.kill {
            // SAFETY: signalling processes of the restored tree.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.failed.store(true, Ordering::Relaxed);
        for p in &mut self.procs {
            p.done = true;
            for s in &mut p.segments {
                s.state.fill(DROPPED);
            }
        }
        let (m, cv) = &*self.shared;
        m.lock().unwrap_or_else(|e| e.into_inner()).failure = Some(what);
        cv.notify_all();
    }

    /// The background part: a batch of the first process with unfilled pages.
    fn fill_some(&mut self) {
        let ps = page();
        let Some(i) = self.procs.iter().position(|p| !p.done) else {
            return;
        };
        let mut left = BATCH;
        let mut k = 0;
        while k < self.procs[i].segments.len() && left > 0 {
            let s = &self.procs[i].segments[k];
            if let Some(pg) = s.state.iter().position(|&x| x == UNFILLED) {
                let lo = s.start + pg * ps;
                let hi = (lo + left * ps).min(s.end);
                left -= (hi - lo) / ps;
                self.fill_range(i, k, lo, hi, None);
                if self.failed.load(Ordering::Relaxed) {
                    return;
                }
                continue;
            }
            k += 1;
        }
        let p = &self.procs[i];
        if p.segments.iter().all(|s| !s.state.contains(&UNFILLED)) {
            self.complete(i);
        }
    }

    /// Every page of process `i` is in: missing-page faults are the kernel's again (zeros),
    /// write-protect tracking stays.
    fn complete(&mut self, i: usize) {
        let p = &mut self.procs[i];
        p.done = true;
        if p.pid.is_none() {
            return;
        }
        let fd = p.uffd.as_raw_fd();
        // Whole mappings (a mode changed on a part would split it), then any segment moved
        // outside them.
        let mut ranges = p.registered.clone();
        ranges.extend(subtract(
            &p.segments
                .iter()
                .map(|s| PageRange::new(s.start, s.end))
                .collect::<Vec<_>>(),
            &p.registered,
        ));
        for r in ranges {
            if let Err(e) = register_mode(fd, r, uffd_sys::UFFDIO_REGISTER_MODE_WP) {
                // (Harmless: faults there keep coming here and get zero pages.)
                tracing::debug!(?r, "lazy restore: dropping MISSING mode failed: {e}");
            }
        }
    }

    /// A forked child's descriptor, once its pages are in, is closed: the kernel then drops
    /// its registrations, and the capture takes the child as a new process.
    fn close_finished(&mut self) {
        self.procs.retain(|p| !(p.done && p.pid.is_none()));
    }
}

/// `UFFDIO_COPY` of `len` bytes from `src` (ours) to `dst` (the process's), write-protected
/// (the page is the checkpoint's: not written yet), waking threads waiting there.
fn copy(fd: RawFd, dst: usize, src: usize, len: usize) -> std::io::Result<()> {
    copy_mode(fd, dst, src, len, UFFDIO_COPY_MODE_WP)
}

/// `UFFDIO_COPY` with `mode` (write-protected or not).
fn copy_mode(fd: RawFd, dst: usize, src: usize, len: usize, mode: u64) -> std::io::Result<()> {
    let mut c = UffdioCopy {
        dst: dst as u64,
        src: src as u64,
        len: len as u64,
        mode,
        copy: 0,
    };
    let mut done = 0usize;
    loop {
        match ioctl(fd, UFFDIO_COPY, &mut c) {
            Ok(()) => return Ok(()),
            Err(e) => {
                // A partial copy reports how far it got; go on from there.
                if c.copy > 0 {
                    done += c.copy as usize;
                    if done >= len {
                        return Ok(());
                    }
                    c = UffdioCopy {
                        dst: (dst + done) as u64,
                        src: (src + done) as u64,
                        len: (len - done) as u64,
                        mode,
                        copy: 0,
                    };
                    continue;
                }
                return Err(e);
            }
        }
    }
}

fn wake(fd: RawFd, addr: usize, len: usize) {
    let mut r = uffd_sys::UffdioRange {
        start: addr as u64,
        len: len as u64,
    };
    let _ = ioctl(fd, UFFDIO_WAKE, &mut r);
}
