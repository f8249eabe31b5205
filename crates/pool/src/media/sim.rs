//! `sim`: simulated persistent memory for crash-consistency tests.
//!
//! Working memory is a memfd mapped shared, so `map_range` can alias it at other addresses just
//! as real pool pages are aliased. Beside it the simulator keeps what a power cut would leave:
//!
//! * `persisted` — bytes that are durable for sure;
//! * pending lines — 64-byte cache lines that were flushed but not yet drained, each with its
//!   content *at the time of the flush* (a real clwb writes back what the line holds then; a
//!   later store to the line is unflushed again).
//!
//! A store reaches `persisted` only when its line is flushed and a later `drain` happens. Every
//! `flush` call and every `drain` call is one *ordering point*, numbered from 0. A test can cut
//! the power at ordering point n (`cut_power_at`): from that point on flushes and drains no
//! longer reach the durable side (the code under test runs on), and `crash` builds the images
//! that the cut could leave: `persisted` plus, for each pending line, its new or its old
//! content — optionally torn at 8-byte words, the failure-atomic unit, and optionally with
//! never-flushed lines that the cache might have evicted on its own.
//!
//! Simplification: when one line is flushed twice before a drain, only the second snapshot is
//! kept, so an image never shows the first flush's content on its own.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::mapping::{MappedFile, Mapping};
use super::{check_range, Medium, MediumError, MediumKind, Result};

/// The unit of flushing.
pub const LINE: usize = 64;
/// The failure-atomic unit: an aligned 8-byte store is all or nothing.
pub const WORD: usize = 8;
/// The most pending lines `crash_images` enumerates (2^16 images).
pub const EXHAUSTIVE_LIMIT: usize = 16;
/// The most pending lines `crash_image_sample` enumerates in full (2^10 images) unless
/// `KIOKU_EXHAUSTIVE_LINES` says otherwise (up to [`EXHAUSTIVE_LIMIT`]; `make soak` sets it).
pub const SAMPLE_EXHAUSTIVE_LINES: usize = 10;

/// `KIOKU_EXHAUSTIVE_LINES`, else [`SAMPLE_EXHAUSTIVE_LINES`]; at most [`EXHAUSTIVE_LIMIT`].
fn sample_exhaustive_lines() -> usize {
    static LINES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LINES.get_or_init(|| {
        std::env::var("KIOKU_EXHAUSTIVE_LINES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(SAMPLE_EXHAUSTIVE_LINES)
            .min(EXHAUSTIVE_LIMIT)
    })
}

/// Which image `SimControl::crash` builds from the state at the power cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every flushed-but-undrained line is lost: only drained data survives.
    DrainedOnly,
    /// Every flushed-but-undrained line made it to the media.
    AllFlushed,
    /// Image number `index` of `crash_images()`: bit i of `index` keeps the i-th pending line
    /// (in offset order), a clear bit loses it.
    Exhaustive { index: u64 },
    /// Each pending line is kept or lost at random, reproducibly for `seed`. With `tear_words`,
    /// each aligned 8-byte word of a pending line is kept or lost on its own. With
    /// `evict_unflushed`, each line whose content differs from what was flushed (stored but
    /// never flushed, or stored again after its flush) may also have reached the media, as
    /// caches evict lines spontaneously.
    Random {
        seed: u64,
        tear_words: bool,
        evict_unflushed: bool,
    },
}

/// The durable side and the power-cut bookkeeping, shared by the medium and its controls.
#[derive(Debug)]
struct SimState {
    /// What survives a power cut for sure; always as long as the medium (or as it was at the
    /// cut).
    persisted: Vec<u8>,
    /// For pending lines, their content at flush time; other bytes are meaningless.
    flushed: Vec<u8>,
    /// One bit per line: flushed but not drained.
    pending_bits: Vec<u64>,
    /// The same lines, each once, in first-flush order.
    pending: Vec<usize>,
    /// Ordering points so far.
    points: u64,
    /// Cut the power when ordering point `cut_at` (or a later one) is reached.
    cut_at: Option<u64>,
    /// Set once the power is cut.
    cut: Option<Cut>,
    /// After the cut, make flush and drain fail with `PowerCut` instead of silently doing
    /// nothing.
    strict: bool,
}

/// The moment the power was cut.
#[derive(Debug)]
struct Cut {
    point: u64,
    /// Working memory at the cut, for `evict_unflushed`.
    working: Vec<u8>,
}

impl SimState {
    fn new(image: Vec<u8>) -> Self {
        let lines = image.len().div_ceil(LINE);
        SimState {
            flushed: vec![0; image.len()],
            persisted: image,
            pending_bits: vec![0; lines.div_ceil(64)],
            pending: Vec::new(),
            points: 0,
            cut_at: None,
            cut: None,
            strict: false,
        }
    }

    fn is_pending(&self, line: usize) -> bool {
        self.pending_bits[line / 64] & (1 << (line % 64)) != 0
    }

    /// Counts one ordering point, cutting the power if it is due. Returns an error when the
    /// power is (now) cut and the state is strict, `Ok(true)` when the point may act.
    fn ordering_point(&mut self, working: impl FnOnce() -> Vec<u8>) -> Result<bool> {
        let point = self.points;
        self.points += 1;
        if self.cut.is_none() && self.cut_at.is_some_and(|n| point >= n) {
            tracing::debug!(point, "simulated power cut");
            self.cut = Some(Cut {
                point,
                working: working(),
            });
        }
        match &self.cut {
            None => Ok(true),
            Some(cut) if self.strict => Err(MediumError::PowerCut { point: cut.point }),
            Some(_) => Ok(false),
        }
    }

    /// Pending lines in offset order, with the byte range each covers.
    fn pending_spans(&self) -> Vec<std::ops::Range<usize>> {
        let mut lines = self.pending.clone();
        lines.sort_unstable();
        lines
            .into_iter()
            .map(|l| line_span(l, self.persisted.len()))
            .collect()
    }
}

/// Bytes of line `line` inside a medium of `size` bytes (the last line may be short).
fn line_span(line: usize, size: usize) -> std::ops::Range<usize> {
    let start = line * LINE;
    start..(start + LINE).min(size)
}

/// What the medium and every `SimControl` share.
#[derive(Debug)]
struct Shared {
    /// A second descriptor of the working memfd, read with pread by controls.
    memfd: File,
    state: Mutex<SimState>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock (a failed assertion in a test) leaves consistent state:
        // every update is a plain copy.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read_working(&self, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        if let Err(e) = self.memfd.read_exact_at(&mut buf, 0) {
            // A memfd read can only fail if memory is exhausted; a crash image without the
            // unflushed lines is still a legal image.
            tracing::warn!(error = %e, "reading simulated working memory failed");
        }
        buf
    }
}

/// Simulated persistent memory. See the module documentation.
#[derive(Debug)]
pub struct SimMedium {
    mem: MappedFile,
    shared: Arc<Shared>,
}

impl SimMedium {
    /// A zero-filled medium of `len` bytes (working and durable sides equal).
    pub fn new(len: u64) -> Result<Self> {
        Self::from_image(vec![0; len as usize])
    }

    /// A medium whose working and durable sides both start as `image` (for recovery from a crash
    /// image).
    pub fn from_image(image: Vec<u8>) -> Result<Self> {
        let path = PathBuf::from("memfd:kioku-sim");
        // SAFETY: the name is a NUL-terminated literal; memfd_create has no other preconditions.
        let fd = unsafe { libc::memfd_create(c"kioku-sim".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(MediumError::io(
                "memfd_create",
                &path,
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: memfd_create just returned this descriptor, owned by nobody else.
        let memfd = unsafe { File::from_raw_fd(fd) };
        memfd
            .set_len(image.len() as u64)
            .map_err(|e| MediumError::io("ftruncate", &path, e))?;
        memfd
            .write_all_at(&image, 0)
            .map_err(|e| MediumError::io("pwrite", &path, e))?;
        let reader = memfd
            .try_clone()
            .map_err(|e| MediumError::io("dup", &path, e))?;
        let mem = MappedFile::open(memfd, &path, libc::MAP_SHARED)?;
        Ok(SimMedium {
            mem,
            shared: Arc::new(Shared {
                memfd: reader,
                state: Mutex::new(SimState::new(image)),
            }),
        })
    }

    /// A medium started from an image file written by `save_image`.
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_image(load_image(path)?)
    }

    /// A handle on this medium's power switch and durable side that stays usable after the
    /// medium itself is handed over (boxed) to the code under test.
    pub fn control(&self) -> SimControl {
        SimControl {
            shared: Arc::clone(&self.shared),
        }
    }

    /// See `SimControl::ordering_points`.
    pub fn ordering_points(&self) -> u64 {
        self.control().ordering_points()
    }

    /// See `SimControl::cut_power_at`.
    pub fn cut_power_at(&self, point: u64) {
        self.control().cut_power_at(point)
    }

    /// See `SimControl::crash`.
    pub fn crash(&self, mode: CrashMode) -> Result<Vec<u8>> {
        self.control().crash(mode)
    }

    /// See `SimControl::crash_images`.
    pub fn crash_images(&self) -> Result<CrashImages> {
        self.control().crash_images()
    }

    /// Copies `[off, off+len)` of the medium's mapping, as a store made through it left it.
    fn copy_working(&self, off: usize, len: usize, into: &mut [u8]) {
        // SAFETY: callers pass a range inside the live main mapping (checked by `flush`), and
        // `into` is a distinct Vec. Concurrent stores to the range race with the copy exactly
        // as they would race with a hardware write-back: either content is legal.
        unsafe {
            std::ptr::copy_nonoverlapping(self.mem.as_ptr().add(off), into.as_mut_ptr(), len)
        };
    }

    fn working_copy_all(&self) -> Vec<u8> {
        let len = self.mem.len() as usize;
        let mut buf = vec![0; len];
        self.copy_working(0, len, &mut buf);
        buf
    }
}

impl Medium for SimMedium {
    fn kind(&self) -> MediumKind {
        MediumKind::Sim
    }

    fn len(&self) -> u64 {
        self.mem.len()
    }

    fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    fn fd(&self) -> RawFd {
        self.mem.file().as_raw_fd()
    }

    fn flush(&self, off: u64, len: u64) -> Result<()> {
        check_range(off, len, self.len())?;
        let mut state = self.shared.lock();
        if !state.ordering_point(|| self.working_copy_all())? || len == 0 {
            return Ok(());
        }
        let size = state.persisted.len();
        let first = off as usize / LINE;
        let last = (off + len - 1) as usize / LINE;
        let start = first * LINE;
        let end = line_span(last, size).end;
        self.copy_working(start, end - start, &mut state.flushed[start..end]);
        for line in first..=last {
            if !state.is_pending(line) {
                state.pending_bits[line / 64] |= 1 << (line % 64);
                state.pending.push(line);
            }
        }
        Ok(())
    }

    fn drain(&self) -> Result<()> {
        let mut state = self.shared.lock();
        if !state.ordering_point(|| self.working_copy_all())? {
            return Ok(());
        }
        let state = &mut *state;
        let size = state.persisted.len();
        for line in state.pending.drain(..) {
            let span = line_span(line, size);
            state.persisted[span.clone()].copy_from_slice(&state.flushed[span]);
            state.pending_bits[line / 64] &= !(1 << (line % 64));
        }
        Ok(())
    }

    fn discard(&self, off: u64, len: u64) -> Result<()> {
        check_range(off, len, self.len())?;
        // Modelled as zeros at once, on the working and the durable side: one of the two
        // outcomes the contract allows (the other, the bytes as before, needs no model).
        // SAFETY: the range was checked against the live mapping; the caller owns it.
        unsafe { std::ptr::write_bytes(self.mem.as_ptr().add(off as usize), 0, len as usize) };
        let mut state = self.shared.lock();
        if state.cut.is_none() {
            let (a, b) = (off as usize, (off + len) as usize);
            if b <= state.persisted.len() {
                state.persisted[a..b].fill(0);
                state.flushed[a..b].fill(0);
            }
        }
        Ok(())
    }

    fn zero(&self, off: u64, len: u64) -> Result<()> {
        check_range(off, len, self.len())?;
        // Modelled as stores of zeros and a flush, so crash images see it like any store.
        // SAFETY: the range was checked against the live mapping; the caller owns it.
        unsafe { std::ptr::write_bytes(self.mem.as_ptr().add(off as usize), 0, len as usize) };
        self.flush(off, len)
    }

    fn grow(&mut self, new_len: u64) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        let mut state = shared.lock();
        self.mem.grow(new_len, false, false, false)?;
        // A size change is durable at once (as a file's fsynced size would be) — unless the
        // power is already cut, in which case the image keeps the size it had.
        if state.cut.is_none() {
            let new_len = new_len as usize;
            state.persisted.resize(new_len, 0);
            state.flushed.resize(new_len, 0);
            let words = new_len.div_ceil(LINE).div_ceil(64);
            state.pending_bits.resize(words, 0);
        }
        Ok(())
    }

    fn move_clear_of(&mut self, avoid: &[std::ops::Range<usize>]) -> Result<()> {
        self.mem.move_clear_of(avoid)
    }

    fn map_range(&self, addr: *mut u8, off: u64, len: u64, fixed: bool) -> Result<Mapping> {
        self.mem.map_range(addr, off, len, fixed)
    }
}

/// A handle on a `SimMedium`'s ordering points, power switch and crash images. Cloning is cheap;
/// all clones and the medium share one state.
#[derive(Clone, Debug)]
pub struct SimControl {
    shared: Arc<Shared>,
}

impl SimControl {
    /// Ordering points (flush and drain calls) so far, including any after the power cut.
    pub fn ordering_points(&self) -> u64 {
        self.shared.lock().points
    }

    /// Cuts the power when ordering point `point` is reached: that point and every later flush
    /// or drain leave the durable side alone. If `point` has already passed, the next ordering
    /// point cuts. Has no effect once the power is cut.
    pub fn cut_power_at(&self, point: u64) {
        self.shared.lock().cut_at = Some(point);
    }

    /// Cuts the power now, between ordering points: the cut is numbered with the next point.
    pub fn cut_power_now(&self) {
        let mut state = self.shared.lock();
        if state.cut.is_none() {
            let working = self.shared.read_working(state.persisted.len());
            let point = state.points;
            state.cut = Some(Cut { point, working });
        }
    }

    /// The ordering point at which the power was cut, if it was.
    pub fn power_cut_point(&self) -> Option<u64> {
        self.shared.lock().cut.as_ref().map(|c| c.point)
    }

    /// With `strict`, flush and drain fail with `MediumError::PowerCut` from the cut on, so code
    /// under test stops at the cut instead of running on.
    pub fn set_strict(&self, strict: bool) {
        self.shared.lock().strict = strict;
    }

    /// Lines flushed but not drained (at the cut, if the power is cut).
    pub fn pending_lines(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// The bytes that survive for sure: drained data only.
    pub fn persisted(&self) -> Vec<u8> {
        self.shared.lock().persisted.clone()
    }

    /// The working memory as stores left it (now, not at the cut).
    pub fn working(&self) -> Vec<u8> {
        let state = self.shared.lock();
        let len = self
            .shared
            .memfd
            .metadata()
            .map(|m| m.len() as usize)
            .unwrap_or(state.persisted.len());
        self.shared.read_working(len)
    }

    /// One image the power cut (or a cut now, if there was none) could leave. Its length is the
    /// medium's length at the cut.
    pub fn crash(&self, mode: CrashMode) -> Result<Vec<u8>> {
        let state = self.shared.lock();
        match mode {
            CrashMode::DrainedOnly => Ok(state.persisted.clone()),
            CrashMode::AllFlushed => {
                let mut image = state.persisted.clone();
                for span in state.pending_spans() {
                    image[span.clone()].copy_from_slice(&state.flushed[span]);
                }
                Ok(image)
            }
            CrashMode::Exhaustive { index } => {
                let spans = state.pending_spans();
                let count = 1u64.checked_shl(spans.len() as u32).unwrap_or(0);
                if spans.len() > EXHAUSTIVE_LIMIT {
                    return Err(MediumError::TooManyPendingLines {
                        pending: spans.len(),
                        limit: EXHAUSTIVE_LIMIT,
                    });
                }
                if index >= count {
                    return Err(MediumError::NoSuchCrashImage { index, count });
                }
                let mut image = state.persisted.clone();
                for (bit, span) in spans.into_iter().enumerate() {
                    if index & (1 << bit) != 0 {
                        image[span.clone()].copy_from_slice(&state.flushed[span]);
                    }
                }
                Ok(image)
            }
            CrashMode::Random {
                seed,
                tear_words,
                evict_unflushed,
            } => {
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let mut image = state.persisted.clone();
                for span in state.pending_spans() {
                    take_some(
                        &mut rng,
                        tear_words,
                        &mut image[span.clone()],
                        &state.flushed[span],
                    );
                }
                if evict_unflushed {
                    let live;
                    let working: &[u8] = match &state.cut {
                        Some(cut) => &cut.working,
                        None => {
                            live = self.shared.read_working(state.persisted.len());
                            &live
                        }
                    };
                    let size = state.persisted.len();
                    for line in 0..size.div_ceil(LINE) {
                        let span = line_span(line, size);
                        let written = if state.is_pending(line) {
                            &state.flushed[span.clone()]
                        } else {
                            &state.persisted[span.clone()]
                        };
                        if working[span.clone()] != *written {
                            take_some(
                                &mut rng,
                                tear_words,
                                &mut image[span.clone()],
                                &working[span],
                            );
                        }
                    }
                }
                Ok(image)
            }
        }
    }

    /// The images a power-cut test should check: every image (`crash_images`) when there are
    /// at most `KIOKU_EXHAUSTIVE_LINES` pending lines (default [`SAMPLE_EXHAUSTIVE_LINES`]);
    /// with more, up to [`EXHAUSTIVE_LIMIT`], 2^`KIOKU_EXHAUSTIVE_LINES` of those images drawn
    /// reproducibly; beyond, none of them. Then both extremes (`DrainedOnly`, `AllFlushed`) and
    /// `randoms` random images with torn words and evicted unflushed lines.
    ///
    /// (A cut point with 16 pending lines has 65,536 images: enumerating them all made a few
    /// cut points most of a power-cut test's time.)
    pub fn crash_image_sample(&self, randoms: u64) -> Result<Vec<Vec<u8>>> {
        let pending = self.shared.lock().pending_spans().len();
        let full = sample_exhaustive_lines();
        if pending <= full {
            if let Ok(all) = self.crash_images() {
                return Ok(all.collect());
            }
        }
        let subsets: Vec<CrashMode> = if pending <= EXHAUSTIVE_LIMIT {
            let mut rng = ChaCha8Rng::seed_from_u64(pending as u64);
            rand::seq::index::sample(&mut rng, 1 << pending, 1 << full)
                .into_iter()
                .map(|index| CrashMode::Exhaustive {
                    index: index as u64,
                })
                .collect()
        } else {
            Vec::new()
        };
        [CrashMode::DrainedOnly, CrashMode::AllFlushed]
            .into_iter()
            .chain(subsets)
            .chain((0..randoms).map(|seed| CrashMode::Random {
                seed,
                tear_words: true,
                evict_unflushed: true,
            }))
            .map(|m| self.crash(m))
            .collect()
    }

    /// Every image the power cut (or a cut now) could leave, without tearing or eviction: one
    /// per subset of the pending lines, 2^P for P pending lines, in `CrashMode::Exhaustive`
    /// index order. Fails when P exceeds `EXHAUSTIVE_LIMIT`.
    pub fn crash_images(&self) -> Result<CrashImages> {
        let state = self.shared.lock();
        let spans = state.pending_spans();
        if spans.len() > EXHAUSTIVE_LIMIT {
            return Err(MediumError::TooManyPendingLines {
                pending: spans.len(),
                limit: EXHAUSTIVE_LIMIT,
            });
        }
        let lines = spans
            .into_iter()
            .map(|span| (span.start, state.flushed[span].to_vec()))
            .collect::<Vec<_>>();
        Ok(CrashImages {
            base: state.persisted.clone(),
            count: 1 << lines.len(),
            lines,
            next: 0,
        })
    }
}

/// Copies `new` over `old`: the whole unit (with probability 1/2) or, with `tear_words`, each
/// 8-byte word on its own.
fn take_some(rng: &mut ChaCha8Rng, tear_words: bool, old: &mut [u8], new: &[u8]) {
    if tear_words {
        for (old_word, new_word) in old.chunks_mut(WORD).zip(new.chunks(WORD)) {
            if rng.gen::<bool>() {
                old_word.copy_from_slice(new_word);
            }
        }
    } else if rng.gen::<bool>() {
        old.copy_from_slice(new);
    }
}

/// Iterator over all crash images of one power cut (see `SimControl::crash_images`).
#[derive(Debug)]
pub struct CrashImages {
    base: Vec<u8>,
    /// Offset and flushed content of each pending line, in offset order.
    lines: Vec<(usize, Vec<u8>)>,
    next: u64,
    count: u64,
}

impl Iterator for CrashImages {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        if self.next >= self.count {
            return None;
        }
        let mut image = self.base.clone();
        for (bit, (start, content)) in self.lines.iter().enumerate() {
            if self.next & (1 << bit) != 0 {
                image[*start..*start + content.len()].copy_from_slice(content);
            }
        }
        self.next += 1;
        Some(image)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.count - self.next) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for CrashImages {}

/// Writes a crash image to `path` (raw bytes, fsynced), for another process to `load_image`.
pub fn save_image(path: &Path, image: &[u8]) -> Result<()> {
    let mut file = File::create(path).map_err(|e| MediumError::io("create", path, e))?;
    file.write_all(image)
        .map_err(|e| MediumError::io("write", path, e))?;
    file.sync_all()
        .map_err(|e| MediumError::io("fsync", path, e))
}

/// Reads an image written by `save_image` (or any file: the image is its raw bytes).
pub fn load_image(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| MediumError::io("read", path, e))
}
