//! The MPI operations kioku uses, over the private communicator `kioku_group_init` made
//! (`csrc/mpi_shim.c`). Safe wrappers: lengths and buffers are checked here.

use crate::error::{GroupError, Result};
use std::ffi::c_int;

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

    /// A number naming this rank's node (the lowest rank sharing its memory).
    pub fn node(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: out-parameter is a valid int.
        check("Comm_split_type", unsafe { kioku_mpi_node(&mut n) })?;
        Ok(n as usize)
    }
}
