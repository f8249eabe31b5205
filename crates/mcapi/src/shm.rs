//! The shared-memory transport. Each node creates one segment (`<shm_dir>/kioku-mcapi.<job>.<node>`,
//! mode 0600, created in place with O_EXCL and O_NOFOLLOW) holding one single-producer
//! single-consumer byte ring per other node: node p writes its frames to node r into ring p of
//! r's segment. Writing and reading are plain loads, stores and copies (no system call); a
//! futex "doorbell" in each segment wakes a node that went to sleep, and only then is a system
//! call made.
//!
//! Layout: a 4 KiB header page, then per producer node a 256-byte ring header and the ring.
//! A producer announces itself (its incarnation) before its first byte, and the consumer
//! resets the ring and accepts it: a node that took over a dead node's id never finds the
//! dead one's half-written frame in front of its own.

use crate::error::{McapiError, Result};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

const MAGIC: u64 = u64::from_le_bytes(*b"KMCAPISH");
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 4096;
const RING_HEADER_BYTES: usize = 256;

#[repr(C)]
struct SegHeader {
    magic: u64,
    version: u32,
    nodes: u32,
    ring_bytes: u64,
    node: u32,
    pid: i32,
    incarnation: u64,
    tag: [u8; 32],
    ready: AtomicU32,
    _pad0: [u8; 52],
    doorbell: AtomicU32,
    _pad1: [u8; 60],
    sleepers: AtomicU32,
    _pad2: [u8; 60],
}

#[repr(C)]
struct RingHeader {
    tail: AtomicU64,
    _pad0: [u8; 56],
    head: AtomicU64,
    _pad1: [u8; 56],
    producer_inc: AtomicU64,
    accepted_inc: AtomicU64,
    _pad2: [u8; 48],
    producer_waiting: AtomicU32,
    _pad3: [u8; 60],
}

const _: () = assert!(std::mem::size_of::<SegHeader>() == 256);
const _: () = assert!(std::mem::size_of::<RingHeader>() == RING_HEADER_BYTES);

/// A mapped segment: our own (we consume its rings) or a peer's (we produce into one ring).
pub struct Segment {
    base: *mut u8,
    len: usize,
    nodes: u32,
    ring_bytes: u64,
    path: PathBuf,
    owned: bool,
}

// SAFETY: the mapping is shared memory accessed only through atomics (headers) and through
// the ring protocol (one producer, one consumer per ring, ordered by the head/tail atomics);
// nothing in it is tied to a thread.
unsafe impl Send for Segment {}
// SAFETY: as above: concurrent access is by atomics or by the single producer/consumer that
// the engine's lock designates.
unsafe impl Sync for Segment {}

pub fn segment_path(dir: &Path, job: &str, node: u32) -> PathBuf {
    dir.join(format!("kioku-mcapi.{job}.{node}"))
}

fn segment_len(nodes: u32, ring_bytes: u64) -> usize {
    HEADER_BYTES + nodes as usize * (RING_HEADER_BYTES + ring_bytes as usize)
}

/// Whether a process is alive (a pidfd could be opened and has not signalled exit).
pub fn pid_alive(pid: i32) -> bool {
    match Pidfd::open(pid) {
        Some(p) => !p.exited(),
        None => false,
    }
}

/// A pidfd: tells whether a peer process exited, immune to pid reuse.
pub struct Pidfd(OwnedFd);

impl Pidfd {
    pub fn open(pid: i32) -> Option<Pidfd> {
        if pid <= 0 {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh descriptor we own.
        Some(Pidfd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// The process exited (its pidfd is readable).
    pub fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents != 0
    }
}

impl Segment {
    /// Creates this node's segment. A segment left by a dead process of the same node id is
    /// replaced; one whose process lives is refused.
    pub fn create(
        dir: &Path,
        job: &str,
        node: u32,
        nodes: u32,
        ring_bytes: u64,
        incarnation: u64,
        tag: [u8; 32],
    ) -> Result<Segment> {
        let path = segment_path(dir, job, node);
        let len = segment_len(nodes, ring_bytes);
        let fail = |reason: String| McapiError::InitFailed { node, reason };
        let file = loop {
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
            {
                Ok(f) => break f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if let Some(pid) = Segment::owner_pid(&path) {
                        if pid_alive(pid) && pid != std::process::id() as i32 {
                            return Err(fail(format!(
                                "{} belongs to live process {pid} (node {node} of job {job} is already running)",
                                path.display()
                            )));
                        }
                    }
                    // Left by a dead run (or not a segment at all): remove it, never follow it.
                    std::fs::remove_file(&path)
                        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
                }
                Err(e) => return Err(fail(format!("{}: {e}", path.display()))),
            }
        };
        file.set_len(len as u64)
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        let seg = Segment::map(&file, len, nodes, ring_bytes, path.clone(), true)
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        let h = seg.header_mut_raw();
        // SAFETY: we created the file and nobody reads it before `ready` is set (Release);
        // the header is within the mapping.
        unsafe {
            (*h).magic = MAGIC;
            (*h).version = VERSION;
            (*h).nodes = nodes;
            (*h).ring_bytes = ring_bytes;
            (*h).node = node;
            (*h).pid = std::process::id() as i32;
            (*h).incarnation = incarnation;
            (*h).tag = tag;
        }
        seg.header().ready.store(1, Ordering::Release);
        Ok(seg)
    }

    fn owner_pid(path: &Path) -> Option<i32> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .ok()?;
        let mut buf = [0u8; 32];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut buf, 0).ok()?;
        if u64::from_le_bytes(buf[0..8].try_into().ok()?) != MAGIC {
            return None;
        }
        Some(i32::from_le_bytes(buf[28..32].try_into().ok()?))
    }

    /// Maps a peer's segment if it exists, is ready, has our layout and was made by a process
    /// of this job (its tag). `Ok(None)`: not there yet (or left by a dead process).
    pub fn open_peer(
        dir: &Path,
        job: &str,
        node: u32,
        nodes: u32,
        ring_bytes: u64,
        tag: &[u8; 32],
    ) -> Result<Option<(Segment, i32, u64)>> {
        let path = segment_path(dir, job, node);
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(McapiError::io("opening a peer's shared-memory segment", e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| McapiError::io("stat of a peer's segment", e))?;
        let len = segment_len(nodes, ring_bytes);
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me || meta.mode() & 0o077 != 0 || meta.len() != len as u64 {
            if meta.len() < len as u64 {
                return Ok(None); // still being created
            }
            return Err(McapiError::Transmission {
                node,
                why: crate::error::PeerLoss::Protocol(format!(
                    "{} is not a segment of this job (owner {}, mode {:o}, {} bytes)",
                    path.display(),
                    meta.uid(),
                    meta.mode() & 0o777,
                    meta.len()
                )),
            });
        }
        let seg = Segment::map(&file, len, nodes, ring_bytes, path.clone(), false)
            .map_err(|e| McapiError::io("mapping a peer's segment", e))?;
        let h = seg.header();
        if h.ready.load(Ordering::Acquire) != 1 {
            return Ok(None);
        }
        if h.magic != MAGIC
            || h.version != VERSION
            || h.nodes != nodes
            || h.ring_bytes != ring_bytes
            || h.node != node
        {
            return Err(McapiError::Transmission {
                node,
                why: crate::error::PeerLoss::Protocol(format!(
                    "{} was made for another topology (nodes, ring size or version differ)",
                    path.display()
                )),
            });
        }
        if &h.tag != tag {
            return Err(McapiError::Transmission {
                node,
                why: crate::error::PeerLoss::Protocol(format!(
                    "{} belongs to another job or secret",
                    path.display()
                )),
            });
        }
        let (pid, inc) = (h.pid, h.incarnation);
        Ok(Some((seg, pid, inc)))
    }

    fn map(
        file: &File,
        len: usize,
        nodes: u32,
        ring_bytes: u64,
        path: PathBuf,
        owned: bool,
    ) -> std::io::Result<Segment> {
        // SAFETY: a shared mapping of a file we hold open, of its full length; the result is
        // checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Segment {
            base: p.cast(),
            len,
            nodes,
            ring_bytes,
            path,
            owned,
        })
    }

    fn header_mut_raw(&self) -> *mut SegHeader {
        self.base.cast()
    }

    fn header(&self) -> &SegHeader {
        // SAFETY: the mapping starts with a SegHeader (page aligned) and lives as long as self;
        // its mutable fields are atomics.
        unsafe { &*self.base.cast::<SegHeader>() }
    }

    pub fn incarnation(&self) -> u64 {
        self.header().incarnation
    }

    fn ring_base(&self, producer: u32) -> *mut u8 {
        assert!(producer < self.nodes);
        let off = HEADER_BYTES + producer as usize * (RING_HEADER_BYTES + self.ring_bytes as usize);
        // SAFETY: off + RING_HEADER_BYTES + ring_bytes <= len by construction.
        unsafe { self.base.add(off) }
    }

    fn ring(&self, producer: u32) -> &RingHeader {
        // SAFETY: ring_base points at a RingHeader (64-byte aligned) inside the mapping; its
        // fields are atomics.
        unsafe { &*self.ring_base(producer).cast::<RingHeader>() }
    }

    fn ring_data(&self, producer: u32) -> *mut u8 {
        // SAFETY: the data follows the ring header inside the mapping.
        unsafe { self.ring_base(producer).add(RING_HEADER_BYTES) }
    }

    // ---- producer side (on a peer's segment, our ring `me`) ----

    /// Announces a new producer incarnation on ring `me`; the consumer resets and accepts it.
    pub fn announce(&self, me: u32, incarnation: u64) {
        self.ring(me)
            .producer_inc
            .store(incarnation, Ordering::Release);
    }

    pub fn accepted(&self, me: u32, incarnation: u64) -> bool {
        self.ring(me).accepted_inc.load(Ordering::Acquire) == incarnation
    }

    /// Copies as much of `bufs` as fits into ring `me`; returns the bytes written.
    pub fn write(&self, me: u32, bufs: &[&[u8]]) -> usize {
        let ring = self.ring(me);
        let size = self.ring_bytes;
        let tail = ring.tail.load(Ordering::Relaxed);
        let head = ring.head.load(Ordering::Acquire);
        let mut free = size - (tail - head);
        let data = self.ring_data(me);
        let mut pos = tail;
        for b in bufs {
            if free == 0 {
                break;
            }
            let n = (b.len() as u64).min(free) as usize;
            copy_in(data, size, pos, &b[..n]);
            pos += n as u64;
            free -= n as u64;
        }
        if pos != tail {
            ring.tail.store(pos, Ordering::Release);
        }
        (pos - tail) as usize
    }

    /// Free bytes of ring `me`.
    pub fn free(&self, me: u32) -> u64 {
        let ring = self.ring(me);
        self.ring_bytes - (ring.tail.load(Ordering::Relaxed) - ring.head.load(Ordering::Acquire))
    }

    /// We wait for space in ring `me`: ask its consumer to ring our doorbell when it frees some.
    pub fn want_space(&self, me: u32) {
        self.ring(me).producer_waiting.store(1, Ordering::SeqCst);
    }

    // ---- consumer side (our own segment) ----

    /// A new producer incarnation asks to be accepted on ring `p`.
    pub fn announced(&self, p: u32) -> Option<u64> {
        let r = self.ring(p);
        let want = r.producer_inc.load(Ordering::Acquire);
        (want != 0 && want != r.accepted_inc.load(Ordering::Relaxed)).then_some(want)
    }

    /// Empties ring `p` and accepts producer incarnation `inc` (its old producer is gone).
    pub fn accept(&self, p: u32, inc: u64) {
        let r = self.ring(p);
        let tail = r.tail.load(Ordering::Acquire);
        r.head.store(tail, Ordering::Release);
        r.accepted_inc.store(inc, Ordering::Release);
    }

    /// Appends up to `max` bytes of what ring `p` holds to `v` (within its spare capacity, which
    /// is not zeroed first); returns the bytes read and whether the producer waits for space.
    pub fn read_into_vec(&self, p: u32, v: &mut Vec<u8>, max: usize) -> (usize, bool) {
        let ring = self.ring(p);
        let size = self.ring_bytes;
        let head = ring.head.load(Ordering::Relaxed);
        let tail = ring.tail.load(Ordering::Acquire);
        let n = ((tail - head) as usize)
            .min(max)
            .min(v.capacity() - v.len());
        if n == 0 {
            return (0, false);
        }
        let dst = v.spare_capacity_mut()[..n].as_mut_ptr().cast::<u8>();
        copy_out_raw(self.ring_data(p), size, head, dst, n);
        // SAFETY: the n bytes after len were just written.
        unsafe { v.set_len(v.len() + n) };
        ring.head.store(head + n as u64, Ordering::Release);
        fence(Ordering::SeqCst);
        let waiting = ring.producer_waiting.load(Ordering::Relaxed) != 0;
        if waiting {
            ring.producer_waiting.store(0, Ordering::Relaxed);
        }
        (n, waiting)
    }

    /// Bytes waiting in ring `p`.
    pub fn pending(&self, p: u32) -> u64 {
        let ring = self.ring(p);
        // Head first: another thread of this node may consume between the two loads, and
        // head ≤ tail holds at every instant, so an earlier head never exceeds a later tail.
        let head = ring.head.load(Ordering::Acquire);
        ring.tail.load(Ordering::Acquire) - head
    }

    /// Anything for us in any ring (data or a producer asking to attach)? Lock-free.
    pub fn has_input(&self, me: u32) -> bool {
        (0..self.nodes).any(|p| p != me && (self.pending(p) > 0 || self.announced(p).is_some()))
    }

    // ---- doorbell ----

    /// Wakes this segment's node if it sleeps (called after writing to it or freeing space).
    pub fn ring_doorbell(&self) {
        fence(Ordering::SeqCst);
        let h = self.header();
        if h.sleepers.load(Ordering::Relaxed) > 0 {
            h.doorbell.fetch_add(1, Ordering::SeqCst);
            futex_wake(&h.doorbell);
        }
    }

    /// Registers a sleeper and returns the doorbell value to sleep on.
    pub fn prepare_sleep(&self) -> u32 {
        let h = self.header();
        h.sleepers.fetch_add(1, Ordering::SeqCst);
        h.doorbell.load(Ordering::SeqCst)
    }

    /// Sleeps until the doorbell moves from `seq` or `timeout` passes, then unregisters.
    pub fn sleep(&self, seq: u32, timeout: Duration) {
        let h = self.header();
        futex_wait(&h.doorbell, seq, timeout);
        h.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; nothing refers to it after drop.
        unsafe { libc::munmap(self.base.cast(), self.len) };
        if self.owned {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn copy_in(data: *mut u8, size: u64, pos: u64, src: &[u8]) {
    let off = (pos & (size - 1)) as usize;
    let first = src.len().min(size as usize - off);
    // SAFETY: off + first <= size and the rest wraps to the start; the producer owns
    // [tail, head + size) by the ring protocol, so the consumer does not read these bytes now.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), data.add(off), first);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(first), data, src.len() - first);
    }
}

/// Copies `n` bytes from the ring at `pos` into `dst` (writable, possibly uninitialized).
fn copy_out_raw(data: *const u8, size: u64, pos: u64, dst: *mut u8, n: usize) {
    let off = (pos & (size - 1)) as usize;
    let first = n.min(size as usize - off);
    // SAFETY: as in copy_in: the consumer owns [head, tail), published by the producer's
    // Release store of tail that our Acquire load saw; the callers pass `dst` writable for
    // `n` bytes, and `n` is at most what the ring holds (at most its size).
    unsafe {
        std::ptr::copy_nonoverlapping(data.add(off), dst, first);
        std::ptr::copy_nonoverlapping(data, dst.add(first), n - first);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned 32-bit word of a shared mapping (not PRIVATE:
    // other processes wait on it).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

fn futex_wait(word: &AtomicU32, seq: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid word with a relative timeout; returns on wake, value
    // change, timeout or signal, all of which the caller handles by re-checking.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seq,
            &ts as *const libc::timespec,
        )
    };
}

impl Segment {
    /// Wakes this segment's node unconditionally (it asked to be told about ring space).
    pub fn ring_doorbell_force(&self) {
        let h = self.header();
        h.doorbell.fetch_add(1, Ordering::SeqCst);
        futex_wake(&h.doorbell);
    }
}

impl Segment {
    /// Unregisters a sleeper registered by `prepare_sleep` that decided not to sleep.
    pub fn cancel_sleep(&self) {
        self.header().sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_carries_bytes_across_wrap_and_refuses_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let tag = [7u8; 32];
        let own = Segment::create(dir.path(), "t", 0, 2, 4096, 11, tag).unwrap();
        let (peer, pid, inc) = Segment::open_peer(dir.path(), "t", 0, 2, 4096, &tag)
            .unwrap()
            .unwrap();
        assert_eq!((pid, inc), (std::process::id() as i32, 11));
        peer.announce(1, 5);
        assert_eq!(own.announced(1), Some(5));
        own.accept(1, 5);
        assert!(peer.accepted(1, 5));
        let mut got = Vec::new();
        let mut buf = Vec::with_capacity(3000);
        let mut next = 0u8;
        for _ in 0..10 {
            let chunk: Vec<u8> = (0..2500)
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect();
            assert_eq!(peer.write(1, &[&chunk[..1000], &chunk[1000..]]), 2500);
            assert!(own.has_input(0));
            buf.clear();
            let (n, _) = own.read_into_vec(1, &mut buf, 2000);
            assert_eq!(n, 2000, "at most what was asked");
            let (m, _) = own.read_into_vec(1, &mut buf, usize::MAX);
            assert_eq!(m, 500);
            got.extend_from_slice(&buf);
        }
        let want: Vec<u8> = (1..=25000u32).map(|i| (i % 256) as u8).collect();
        assert_eq!(got, want);
        assert_eq!(peer.write(1, &[&[0u8; 5000]]), 4096);
        assert_eq!(peer.write(1, &[&[0u8; 1]]), 0);
        // A segment of another job is refused.
        assert!(Segment::open_peer(dir.path(), "t", 0, 2, 4096, &[8u8; 32]).is_err());
        // Our own live segment cannot be created twice by another owner... but our pid may.
        drop(peer);
        drop(own);
        assert!(!segment_path(dir.path(), "t", 0).exists());
    }
}
