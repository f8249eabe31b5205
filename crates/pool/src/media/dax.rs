//! `dax`: persistent memory on a DAX filesystem, mapped with `MAP_SYNC`.
//!
//! With MAP_SYNC the kernel makes the file's metadata for a page durable before a write fault
//! on it completes, so user space makes data durable on its own: write back the dirty cache
//! lines (clwb, else clflushopt, else clflush) and fence (sfence). Caches are physically
//! tagged, so writing back a line through the main mapping also covers stores made through any
//! other mapping of the same page (`map_range`).
//!
//! The cache-line routines work on any memory; they are public so that tests and benchmarks can
//! run them without persistent memory.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::OnceLock;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the dax medium's cache-line write-back is implemented for x86_64 only");

use std::arch::x86_64::{
    __cpuid, __cpuid_count, __m128i, _mm_clflush, _mm_loadu_si128, _mm_sfence, _mm_stream_si128,
    _mm_stream_si64,
};

use super::mapping::{page_size, MappedFile, Mapping, MAP_SHARED_VALIDATE, MAP_SYNC};
use super::{Medium, MediumError, MediumKind, Result};

/// Size of a cache line on every x86_64 CPU kioku runs on.
pub const CACHE_LINE: usize = 64;

/// Sharing flags of every dax mapping.
const DAX_SHARE: i32 = MAP_SHARED_VALIDATE | MAP_SYNC;

/// The instruction used to write a cache line back to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstruction {
    /// Writes the line back and may keep it cached (fastest to re-read).
    Clwb,
    /// Writes back and evicts; weakly ordered, so many can be in flight.
    Clflushopt,
    /// Writes back and evicts, one at a time (ordered with other stores).
    Clflush,
}

impl FlushInstruction {
    /// The best instruction this CPU has, detected once with cpuid (leaf 7, subleaf 0, EBX bit 24
    /// clwb, bit 23 clflushopt; clflush is part of every x86_64 CPU).
    pub fn detect() -> Self {
        static DETECTED: OnceLock<FlushInstruction> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let chosen = Self::from_cpuid();
            tracing::debug!(
                instruction = chosen.name(),
                "cache-line write-back instruction detected"
            );
            chosen
        })
    }

    fn from_cpuid() -> Self {
        // cpuid is always available on x86_64; leaf 7 only when the maximum basic leaf allows.
        let max_leaf = __cpuid(0).eax;
        if max_leaf < 7 {
            return FlushInstruction::Clflush;
        }
        let ebx = __cpuid_count(7, 0).ebx;
        if ebx & (1 << 24) != 0 {
            FlushInstruction::Clwb
        } else if ebx & (1 << 23) != 0 {
            FlushInstruction::Clflushopt
        } else {
            FlushInstruction::Clflush
        }
    }

    /// The mnemonic, as /proc/cpuinfo spells the feature.
    pub fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
        }
    }
}

/// Name of the detected cache-line write-back instruction ("clwb", "clflushopt" or "clflush").
pub fn flush_instruction() -> &'static str {
    FlushInstruction::detect().name()
}

/// Writes back the one cache line holding `line`.
///
/// # Safety
/// `line` must point into mapped memory.
#[inline]
unsafe fn write_back_line(instr: FlushInstruction, line: *const u8) {
    // No `nomem`/`readonly` option: the compiler must treat these as touching memory, so that it
    // emits every earlier store to the line before the write-back.
    match instr {
        // SAFETY: clwb only writes the line back; the caller guarantees the address is mapped.
        FlushInstruction::Clwb => unsafe {
            std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
        },
        // SAFETY: as above; clflushopt also evicts, which does not change contents.
        FlushInstruction::Clflushopt => unsafe {
            std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
        },
        // SAFETY: as above.
        FlushInstruction::Clflush => unsafe { _mm_clflush(line) },
    }
}

/// Writes back every cache line overlapping `[ptr, ptr+len)` with `instr`; unordered until
/// `store_fence`.
///
/// # Safety
/// The range must be mapped memory.
pub unsafe fn write_back_range(instr: FlushInstruction, ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = ptr as usize & !(CACHE_LINE - 1);
    let end = ptr as usize + len;
    let mut line = start;
    while line < end {
        // SAFETY: every line address overlaps the caller's mapped range, and mappings are whole
        // pages, so the full line is mapped.
        unsafe { write_back_line(instr, line as *const u8) };
        line += CACHE_LINE;
    }
}

/// Writes back every cache line of `bytes` (safe on any memory; contents do not change).
pub fn write_back(instr: FlushInstruction, bytes: &[u8]) {
    // SAFETY: a slice is mapped memory.
    unsafe { write_back_range(instr, bytes.as_ptr(), bytes.len()) }
}

/// Waits until every earlier write-back and non-temporal store is globally visible (durable on
/// persistent memory).
pub fn store_fence() {
    compiler_fence(Ordering::SeqCst);
    // SAFETY: sfence has no memory-safety preconditions; SSE is part of x86_64.
    #[allow(unused_unsafe)]
    unsafe {
        _mm_sfence()
    };
    compiler_fence(Ordering::SeqCst);
}

/// Copies `src` to `dst` with non-temporal stores and makes it durable: an unaligned head and
/// tail are stored normally and written back with `instr`, the 16-byte-aligned body is streamed
/// past the cache, and an sfence ends it all.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes of writes and must not overlap `src`.
pub unsafe fn copy_nontemporal_raw(instr: FlushInstruction, dst: *mut u8, src: &[u8]) {
    let len = src.len();
    let s = src.as_ptr();
    let head = ((16 - (dst as usize % 16)) % 16).min(len);
    // SAFETY: head <= len, both ranges valid and disjoint (caller).
    unsafe {
        std::ptr::copy_nonoverlapping(s, dst, head);
        write_back_range(instr, dst, head);
    }
    let mut done = head;
    while len - done >= 16 {
        // SAFETY: dst+done is 16-aligned (after the head) and 16 bytes lie in range; the source
        // load is unaligned-tolerant.
        unsafe {
            let value = _mm_loadu_si128(s.add(done).cast::<__m128i>());
            _mm_stream_si128(dst.add(done).cast::<__m128i>(), value);
        }
        done += 16;
    }
    if len - done >= 8 {
        // SAFETY: dst+done is still 16-aligned (so 8-aligned) and 8 bytes lie in range.
        unsafe {
            let value = std::ptr::read_unaligned(s.add(done).cast::<i64>());
            _mm_stream_si64(dst.add(done).cast::<i64>(), value);
        }
        done += 8;
    }
    let tail = len - done;
    // SAFETY: the remaining `tail` bytes lie in both ranges.
    unsafe {
        std::ptr::copy_nonoverlapping(s.add(done), dst.add(done), tail);
        write_back_range(instr, dst.add(done), tail);
    }
    store_fence();
}

/// Safe form of `copy_nontemporal_raw` for memory the caller holds as a slice.
///
/// # Panics
/// When the lengths differ.
pub fn copy_nontemporal(instr: FlushInstruction, dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_nontemporal needs equal lengths");
    // SAFETY: `dst` is an exclusive slice of the right length, so valid and disjoint from `src`.
    unsafe { copy_nontemporal_raw(instr, dst.as_mut_ptr(), src) }
}

/// True when `file`'s filesystem accepts a `MAP_SYNC` mapping (it is DAX); false when the kernel
/// refuses with EOPNOTSUPP or EINVAL. Works on empty files (a page past the end is mapped and
/// unmapped without being touched).
pub fn map_sync_supported(file: &File, path: &Path) -> Result<bool> {
    match Mapping::map(file.as_fd(), 0, page_size(), DAX_SHARE, 0) {
        Ok(_probe) => Ok(true),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(MediumError::io("mmap MAP_SYNC", path, e)),
    }
}

/// A file on a DAX filesystem: durable by cache-line write-back and sfence.
#[derive(Debug)]
pub struct DaxMedium {
    mem: MappedFile,
    instr: FlushInstruction,
}

impl DaxMedium {
    /// Maps all of `file` (found at `path`) with MAP_SYNC, or fails with
    /// `MediumError::DaxUnsupported` when its filesystem is not DAX.
    pub fn open(file: File, path: &Path) -> Result<Self> {
        if !map_sync_supported(&file, path)? {
            return Err(MediumError::DaxUnsupported {
                path: path.display().to_string(),
            });
        }
        Ok(DaxMedium {
            mem: MappedFile::open(file, path, DAX_SHARE)?,
            instr: FlushInstruction::detect(),
        })
    }

    /// The write-back instruction this medium uses.
    pub fn flush_instruction(&self) -> FlushInstruction {
        self.instr
    }

    /// Where the file was opened.
    pub fn path(&self) -> &Path {
        self.mem.path()
    }
}

impl Medium for DaxMedium {
    fn kind(&self) -> MediumKind {
        MediumKind::Dax
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
        let ptr = self.mem.checked_ptr(off, len)?;
        // SAFETY: the range was checked against the live main mapping.
        unsafe { write_back_range(self.instr, ptr, len as usize) };
        Ok(())
    }

    fn drain(&self) -> Result<()> {
        store_fence();
        Ok(())
    }

    fn write_persist(&self, off: u64, src: &[u8]) -> Result<()> {
        let dst = self.mem.checked_ptr(off, src.len() as u64)?;
        // SAFETY: the destination lies inside the main mapping (checked); `src` is a borrowed
        // slice that cannot be the mapping's exclusive alias.
        unsafe { copy_nontemporal_raw(self.instr, dst, src) };
        Ok(())
    }

    fn grow(&mut self, new_len: u64) -> Result<()> {
        // fsync makes the new size durable; a fresh MAP_SYNC mapping keeps the per-fault
        // metadata guarantee for the new pages.
        self.mem.grow(new_len, true, true, false)
    }

    fn zero(&self, off: u64, len: u64) -> Result<()> {
        // A punched hole is file system metadata, which no store fence orders: write zeros.
        let ptr = self.mem.checked_ptr(off, len)?;
        // SAFETY: the range was checked against the live main mapping; the caller owns it.
        unsafe { std::ptr::write_bytes(ptr, 0, len as usize) };
        self.flush(off, len)
    }

    fn grow_sparse(&mut self, new_len: u64) -> Result<()> {
        self.mem.grow(new_len, true, true, true)
    }

    fn move_clear_of(&mut self, avoid: &[std::ops::Range<usize>]) -> Result<()> {
        self.mem.move_clear_of(avoid)
    }

    fn map_range(&self, addr: *mut u8, off: u64, len: u64, fixed: bool) -> Result<Mapping> {
        self.mem.map_range(addr, off, len, fixed)
    }
}
