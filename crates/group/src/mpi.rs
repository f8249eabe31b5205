//! The MPI operations kioku uses, over the private communicator `kioku_group_init` made
//! (`csrc/mpi_shim.c`). Safe wrappers: lengths and buffers are checked here.

use crate::error::{GroupError, Result};
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

extern "C" {
    fn kioku_mpi_rank(rank: *mut c_int) -> c_int;
    fn kioku_mpi_size(size: *mut c_int) -> c_int;
    fn kioku_mpi_send(dest: c_int, tag: c_int, buf: *const u8, len: usize) -> c_int;
    fn kioku_mpi_recv_len(src: c_int, tag: c_int, len: *mut usize) -> c_int;
    fn kioku_mpi_recv_body(src: c_int, tag: c_int, buf: *mut u8, len: usize) -> c_int;
    fn kioku_mpi_allreduce_u64(vals: *mut u64, n: c_int, op: c_int) -> c_int;
    fn kioku_mpi_allgather(mine: *const u8, len: usize, all: *mut u8) -> c_int;
    fn kioku_mpi_barrier() -> c_int;
    fn kioku_mpi_node(node: *mut c_int) -> c_int;
    fn kioku_mpi_error_string(code: c_int, buf: *mut u8, len: usize);
    fn kioku_mpi_thread_multiple(yes: *mut c_int) -> c_int;
    fn kioku_bg_isend(
        dest: c_int,
        tag: c_int,
        buf: *const u8,
        len: usize,
        req: *mut *mut c_void,
    ) -> c_int;
    fn kioku_bg_test(req: *mut c_void, done: *mut c_int) -> c_int;
    fn kioku_bg_improbe(
        src: c_int,
        tag: c_int,
        found: *mut c_int,
        len: *mut usize,
        msg: *mut *mut c_void,
    ) -> c_int;
    fn kioku_bg_mrecv(msg: *mut c_void, buf: *mut u8, len: usize) -> c_int;
    fn kioku_bg_iallreduce_max(vals: *mut u64, n: c_int, req: *mut *mut c_void) -> c_int;
    fn kioku_bg_iallgather(
        mine: *const u8,
        len: usize,
        all: *mut u8,
        req: *mut *mut c_void,
    ) -> c_int;
}

fn check(what: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let mut buf = [0u8; 256];
    // SAFETY: the shim writes at most `len` bytes, NUL-terminated, into `buf`.
    unsafe { kioku_mpi_error_string(rc, buf.as_mut_ptr(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Err(GroupError::Mpi {
        what,
        detail: String::from_utf8_lossy(&buf[..end]).into_owned(),
    })
}

/// Reduction of [`Comm::allreduce`].
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Min = 0,
    Max = 1,
    Sum = 2,
}

/// The communicator of the group library (a duplicate of the user's).
#[derive(Debug)]
pub struct Comm {
    rank: usize,
    size: usize,
    /// Bytes this rank sent since the counter was last taken.
    sent: u64,
}

impl Comm {
    /// The communicator set up by `kioku_group_init`.
    pub(crate) fn attach() -> Result<Comm> {
        let (mut r, mut n) = (0, 0);
        // SAFETY: out-parameters are valid ints.
        check("Comm_rank", unsafe { kioku_mpi_rank(&mut r) })?;
        // SAFETY: as above.
        check("Comm_size", unsafe { kioku_mpi_size(&mut n) })?;
        Ok(Comm {
            rank: r as usize,
            size: n as usize,
            sent: 0,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes sent point-to-point since the last call.
    pub fn take_sent(&mut self) -> u64 {
        std::mem::take(&mut self.sent)
    }

    pub fn send(&mut self, dest: usize, tag: u32, buf: &[u8]) -> Result<()> {
        self.sent += buf.len() as u64;
        // SAFETY: `buf` is valid for `len` bytes.
        check("Send", unsafe {
            kioku_mpi_send(dest as c_int, tag as c_int, buf.as_ptr(), buf.len())
        })
    }

    /// The next message from `src` with `tag`, into `buf` (resized to its length).
    pub fn recv_into(&mut self, src: usize, tag: u32, buf: &mut Vec<u8>) -> Result<()> {
        let mut len = 0usize;
        // SAFETY: out-parameter is a valid usize.
        check("Recv", unsafe {
            kioku_mpi_recv_len(src as c_int, tag as c_int, &mut len)
        })?;
        buf.clear();
        buf.resize(len, 0);
        // SAFETY: `buf` holds exactly `len` bytes.
        check("Recv", unsafe {
            kioku_mpi_recv_body(src as c_int, tag as c_int, buf.as_mut_ptr(), len)
        })
    }

    pub fn allreduce(&self, vals: &mut [u64], op: Op) -> Result<()> {
        // SAFETY: `vals` is valid for `len` u64s, reduced in place.
        check("Allreduce", unsafe {
            kioku_mpi_allreduce_u64(vals.as_mut_ptr(), vals.len() as c_int, op as c_int)
        })
    }

    /// Every rank's `mine` (all of the same length), in rank order.
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut all = vec![0u8; mine.len() * self.size];
        // SAFETY: `all` has room for `size` blocks of `mine.len()` bytes.
        check("Allgather", unsafe {
            kioku_mpi_allgather(mine.as_ptr(), mine.len(), all.as_mut_ptr())
        })?;
        Ok(all
            .chunks(mine.len().max(1))
            .take(self.size)
            .map(|c| c.to_vec())
            .collect())
    }

    /// Every rank's `mine`, of any length, in rank order.
    pub fn allgather_var(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut len = [mine.len() as u64];
        self.allreduce(&mut len, Op::Max)?;
        let width = 8 + len[0] as usize;
        let mut block = vec![0u8; width];
        block[..8].copy_from_slice(&(mine.len() as u64).to_le_bytes());
        block[8..8 + mine.len()].copy_from_slice(mine);
        let all = self.allgather(&block)?;
        Ok(all
            .into_iter()
            .map(|b| {
                let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize;
                b[8..8 + n].to_vec()
            })
            .collect())
    }

    pub fn barrier(&self) -> Result<()> {
        // SAFETY: no arguments.
        check("Barrier", unsafe { kioku_mpi_barrier() })
    }

    /// Whether the program initialised MPI with `MPI_THREAD_MULTIPLE`.
    pub fn thread_multiple(&self) -> Result<bool> {
        let mut yes = 0;
        // SAFETY: out-parameter is a valid int.
        check("Query_thread", unsafe {
            kioku_mpi_thread_multiple(&mut yes)
        })?;
        Ok(yes != 0)
    }

    /// A number naming this rank's node (the lowest rank sharing its memory).
    pub fn node(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: out-parameter is a valid int.
        check("Comm_split_type", unsafe { kioku_mpi_node(&mut n) })?;
        Ok(n as usize)
    }
}

/// Waits until `done` says so, polling with growing pauses: a flight's thread must not spin on
/// a core the program computes on (MPI's own blocking calls busy-wait).
fn poll(mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let mut pause = 0u64;
    loop {
        if done()? {
            return Ok(());
        }
        if pause < 4 {
            std::thread::yield_now();
            pause += 1;
        } else {
            std::thread::sleep(Duration::from_micros(pause.min(400)));
            pause = (pause * 3 / 2).min(400);
        }
    }
}

/// The flights' communicator (a second duplicate of the program's): nonblocking operations,
/// completed by polling, usable from a background thread when MPI was initialised with
/// `MPI_THREAD_MULTIPLE`.
#[derive(Debug)]
pub struct Bg {
    rank: usize,
    size: usize,
    /// Bytes this rank sent since the counter was last taken.
    sent: u64,
}

/// A send in progress; it keeps its buffer alive until MPI is done with it.
pub struct Req {
    raw: *mut c_void,
    _buf: Arc<Vec<u8>>,
}

// SAFETY: the request handle is owned by this value alone; MPI (initialised with
// MPI_THREAD_MULTIPLE whenever a flight runs on another thread) lets any thread test it.
unsafe impl Send for Req {}

impl Req {
    /// Whether the send completed (the request is then consumed).
    fn test(&mut self) -> Result<bool> {
        if self.raw.is_null() {
            return Ok(true);
        }
        let mut done = 0;
        // SAFETY: `raw` is a live request from kioku_bg_isend; the shim frees it when done.
        check("Test", unsafe { kioku_bg_test(self.raw, &mut done) })?;
        if done != 0 {
            self.raw = std::ptr::null_mut();
        }
        Ok(done != 0)
    }

    /// Waits for the send to complete.
    pub fn wait(mut self) -> Result<()> {
        poll(|| self.test())
    }
}

impl Drop for Req {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // Never completed (an error ended the flight): MPI may still read the buffer, so
            // it is leaked rather than freed under it.
            std::mem::forget(self._buf.clone());
        }
    }
}

impl Bg {
    pub(crate) fn attach(comm: &Comm) -> Bg {
        Bg {
            rank: comm.rank,
            size: comm.size,
            sent: 0,
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes sent point-to-point since the last call.
    pub fn take_sent(&mut self) -> u64 {
        std::mem::take(&mut self.sent)
    }

    /// Starts sending `buf` (shared by several sends of the same bytes) to `dest`.
    pub fn isend(&mut self, dest: usize, tag: u32, buf: &Arc<Vec<u8>>) -> Result<Req> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `buf` stays alive (held by the returned request) until MPI completes.
        check("Isend", unsafe {
            kioku_bg_isend(
                dest as c_int,
                tag as c_int,
                buf.as_ptr(),
                buf.len(),
                &mut raw,
            )
        })?;
        self.sent += buf.len() as u64;
        Ok(Req {
            raw,
            _buf: buf.clone(),
        })
    }

    /// The next message from `src` with `tag`, into `buf` (resized to its length).
    pub fn recv(&mut self, src: usize, tag: u32, buf: &mut Vec<u8>) -> Result<()> {
        let mut msg = std::ptr::null_mut();
        let mut len = 0usize;
        poll(|| {
            let mut found = 0;
            // SAFETY: out-parameters are valid.
            check("Improbe", unsafe {
                kioku_bg_improbe(src as c_int, tag as c_int, &mut found, &mut len, &mut msg)
            })?;
            Ok(found != 0)
        })?;
        buf.clear();
        buf.resize(len, 0);
        // SAFETY: `msg` is the matched message of `len` bytes; `buf` holds exactly `len`.
        check("Mrecv", unsafe {
            kioku_bg_mrecv(msg, buf.as_mut_ptr(), len)
        })
    }

    /// Element-wise maximum of `vals` over every rank, in place.
    pub fn allreduce_max(&self, vals: &mut [u64]) -> Result<()> {
        let mut buf: Vec<u64> = vals.to_vec();
        let mut raw = std::ptr::null_mut();
        // SAFETY: `buf` is kept alive and unmoved until the request completes (or leaked by
        // `complete` if it fails).
        check("Iallreduce", unsafe {
            kioku_bg_iallreduce_max(buf.as_mut_ptr(), buf.len() as c_int, &mut raw)
        })?;
        let buf = self.complete(raw, buf)?;
        vals.copy_from_slice(&buf);
        Ok(())
    }

    /// Every rank's `mine`, of any length, in rank order.
    pub fn allgather_var(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut len = [mine.len() as u64];
        self.allreduce_max(&mut len)?;
        let width = 8 + len[0] as usize;
        let mut block = vec![0u8; width];
        block[..8].copy_from_slice(&(mine.len() as u64).to_le_bytes());
        block[8..8 + mine.len()].copy_from_slice(mine);
        let mut all = vec![0u8; width * self.size];
        let mut raw = std::ptr::null_mut();
        // SAFETY: `block` and `all` (room for `size` blocks) are kept alive and unmoved until
        // the request completes (or leaked by `complete` if it fails).
        check("Iallgather", unsafe {
            kioku_bg_iallgather(block.as_ptr(), width, all.as_mut_ptr(), &mut raw)
        })?;
        let (_, all) = self.complete(raw, (block, all))?;
        Ok(all
            .chunks(width)
            .map(|b| {
                let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes")) as usize;
                b[8..8 + n].to_vec()
            })
            .collect())
    }

    /// Waits for request `raw`, then hands `bufs` (the memory it uses) back; if it fails they
    /// are leaked, since MPI may still hold them.
    fn complete<T>(&self, raw: *mut c_void, bufs: T) -> Result<T> {
        let mut req = Req {
            raw,
            _buf: Arc::new(Vec::new()),
        };
        match poll(|| req.test()) {
            Ok(()) => Ok(bufs),
            Err(e) => {
                std::mem::forget(bufs);
                Err(e)
            }
        }
    }
}
