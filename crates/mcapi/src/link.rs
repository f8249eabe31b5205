//! A link to one peer node: its state, the bytes waiting to go out, the bytes read but not yet
//! parsed, and the transport underneath (a peer's shared-memory segment, or a TCP stream).

use crate::error::PeerLoss;
use crate::frame::{FrameError, Header, HEADER_LEN, MAX_SLICES};
use crate::pool::BufPool;
use crate::shm::{Pidfd, Segment};
use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Never contacted.
    Idle,
    /// Being set up (segment not there yet, producer not yet accepted, TCP handshake).
    Connecting,
    Up,
    /// The peer is gone; operations on it fail until a new incarnation shows up.
    Lost(PeerLoss),
}

pub enum Io {
    None,
    Shm {
        peer: Segment,
        pidfd: Option<Pidfd>,
    },
    /// One connection carries frames both ways (whichever side dialled it; see
    /// `Engine::crossing` for two nodes dialling each other at once). One connection, not a
    /// pair of one-way ones: a reply then carries the TCP acknowledgement of the frame it
    /// answers, where a one-way connection costs a bare ACK segment per frame (measured: +4 µs
    /// on a 15 µs loopback round trip).
    ///
    /// The socket is blocking, with a receive timeout, for a waiting thread that reads it
    /// directly (`Engine::sleep_plan`); every other read and write passes `MSG_DONTWAIT`. It
    /// is shared so that it stays open while that thread reads, even if the link drops it.
    Tcp(Arc<TcpStream>),
}

pub struct Link {
    pub state: LinkState,
    pub peer_inc: u64,
    /// The incarnation we lost (a reappearance with it is stale).
    pub lost_inc: u64,
    pub io: Io,
    /// Bytes waiting to be written, in order.
    pub out: VecDeque<Vec<u8>>,
    pub out_off: usize,
    /// TCP: bytes read and not yet parsed. Shared memory: the first bytes of a frame header
    /// that was cut at the ring's fill level.
    pub inbuf: Vec<u8>,
    pub in_start: usize,
    /// Shared memory: frames taken whole out of the ring, in order.
    pub frames: VecDeque<(Header, Vec<u8>)>,
    /// Shared memory: the frame whose payload is being read out of the ring.
    pub partial: Option<(Header, Vec<u8>)>,
    /// Shared memory: the ring held a header that does not decode (reported after `frames`).
    pub bad: Option<FrameError>,
    /// Shared memory: our producer incarnation is accepted by the peer.
    pub accepted: bool,
    /// Shared memory: the peer's producer into our segment is accepted.
    pub inbound: bool,
    pub retry_at: Instant,
    pub backoff_ms: u64,
    /// A connect attempt after a loss: failing it fails the waiting operations.
    pub after_loss: bool,
    /// TCP: epoll said the socket has bytes (or its end) that were not read yet.
    pub readable: bool,
    /// TCP: the socket is registered for writability too (frames wait in `out`).
    pub watch_out: bool,
    /// Encoded control frames (credit) that go with the next frame written to this peer.
    pub deferred: Vec<u8>,
    /// TCP: a waiting thread reads the socket outside the lock (into `inbuf`, which it holds
    /// meanwhile); nobody else reads it.
    pub reader_busy: bool,
    /// Changes whenever the transport is replaced or dropped: a direct read that comes back
    /// to another connection than it started on drops its bytes with the old connection.
    pub conn: u64,
}

impl Link {
    pub fn new() -> Link {
        Link {
            state: LinkState::Idle,
            peer_inc: 0,
            lost_inc: 0,
            io: Io::None,
            out: VecDeque::new(),
            out_off: 0,
            inbuf: Vec::new(),
            in_start: 0,
            frames: VecDeque::new(),
            partial: None,
            bad: None,
            accepted: false,
            inbound: false,
            retry_at: Instant::now(),
            backoff_ms: 1,
            after_loss: false,
            readable: false,
            watch_out: false,
            deferred: Vec::new(),
            reader_busy: false,
            conn: 0,
        }
    }

    pub fn has_out(&self) -> bool {
        !self.out.is_empty()
    }

    /// TCP: the socket of the link.
    pub fn stream(&self) -> Option<&Arc<TcpStream>> {
        match &self.io {
            Io::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// TCP: makes `inbuf` ready for a read of at least 64 KiB into its spare capacity, with
    /// no consumed bytes left before the unparsed ones.
    pub fn prepare_inbuf(&mut self) {
        if self.in_start > 0 {
            self.inbuf.drain(..self.in_start);
            self.in_start = 0;
        }
        if self.inbuf.capacity() - self.inbuf.len() < 64 << 10 {
            self.inbuf.reserve(256 << 10);
        }
    }

    /// Writes `bufs` now as far as possible (nothing queued before them); returns bytes written.
    pub fn write_now(&mut self, me: u32, bufs: &[&[u8]]) -> io::Result<usize> {
        match &mut self.io {
            Io::Shm { peer, .. } => {
                let n = peer.write(me, bufs);
                if n > 0 {
                    peer.ring_doorbell();
                }
                Ok(n)
            }
            Io::Tcp(s) => send_vectored(s.as_raw_fd(), bufs),
            _ => Ok(0),
        }
    }

    /// Writes what is queued; Ok(true) when the queue is empty.
    pub fn flush(&mut self, me: u32) -> io::Result<bool> {
        while let Some(front) = self.out.front() {
            let rest = &front[self.out_off..];
            let n = match &mut self.io {
                Io::Shm { peer, .. } => {
                    let n = peer.write(me, &[rest]);
                    if n > 0 {
                        peer.ring_doorbell();
                    } else {
                        peer.want_space(me);
                        // Re-check after announcing: the consumer may have freed space just now.
                        if peer.free(me) == 0 {
                            return Ok(false);
                        }
                        continue;
                    }
                    n
                }
                Io::Tcp(s) => send_vectored(s.as_raw_fd(), &[rest])?,
                _ => return Ok(false),
            };
            if n == 0 {
                return Ok(false);
            }
            self.out_off += n;
            if self.out_off == front.len() {
                self.out.pop_front();
                self.out_off = 0;
            }
        }
        Ok(true)
    }

    /// Queues what follows the first `written` bytes of `bufs` (after what is queued already).
    pub fn enqueue_after(&mut self, bufs: &[&[u8]], written: usize) {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if written >= total {
            return;
        }
        let mut v = Vec::with_capacity(total - written);
        let mut skip = written;
        for b in bufs {
            let k = skip.min(b.len());
            skip -= k;
            v.extend_from_slice(&b[k..]);
        }
        self.out.push_back(v);
    }

    /// Reads what the transport has for us into `inbuf`. Ok(false): end of stream.
    pub fn fill(
        &mut self,
        me: u32,
        own: Option<&Segment>,
        from: u32,
        pool: &mut BufPool,
    ) -> io::Result<bool> {
        let _ = me;
        match &mut self.io {
            Io::Tcp(s) => {
                let fd = s.as_raw_fd();
                let mut budget = 8 << 20;
                loop {
                    self.prepare_inbuf();
                    let len = self.inbuf.len();
                    // Read into the spare capacity: zeroing it first would cost a memset of
                    // 256 KiB on every poll of the socket.
                    let spare = self.inbuf.spare_capacity_mut();
                    // SAFETY: recv(2) into `spare`, writable for its whole length.
                    let n = unsafe {
                        libc::recv(
                            fd,
                            spare.as_mut_ptr().cast(),
                            spare.len(),
                            libc::MSG_DONTWAIT,
                        )
                    };
                    match n {
                        0 => return Ok(false),
                        n if n > 0 => {
                            let n = n as usize;
                            let short = n < spare.len();
                            // SAFETY: read(2) initialized the first n bytes of the spare capacity.
                            unsafe { self.inbuf.set_len(len + n) };
                            budget -= n.min(budget);
                            // A short read took all there was: another would only say EAGAIN
                            // (epoll reports the socket again when more comes).
                            if short {
                                self.readable = false;
                                return Ok(true);
                            }
                            if budget == 0 {
                                return Ok(true);
                            }
                        }
                        _ => {
                            let e = io::Error::last_os_error();
                            match e.kind() {
                                io::ErrorKind::WouldBlock => {
                                    self.readable = false;
                                    return Ok(true);
                                }
                                io::ErrorKind::Interrupted => {}
                                _ => return Err(e),
                            }
                        }
                    }
                }
            }
            _ => {
                let Some(own) = own else { return Ok(true) };
                let producer_waits = self.take_ring_frames(own, from, pool);
                if producer_waits {
                    if let Io::Shm { peer, .. } = &self.io {
                        peer.ring_doorbell_force();
                    }
                }
                Ok(true)
            }
        }
    }

    /// Shared memory: moves the frames in `from`'s ring of our segment into `frames`, each
    /// payload copied once, straight into its own (pooled) buffer; a frame cut at the ring's
    /// fill level stays in `partial` (header bytes in `inbuf`) until the rest comes. Returns
    /// whether the producer waits for space.
    fn take_ring_frames(&mut self, own: &Segment, from: u32, pool: &mut BufPool) -> bool {
        let mut producer_waits = false;
        while self.bad.is_none() {
            if let Some((h, v)) = &mut self.partial {
                let need = h.len as usize - v.len();
                let (_, waits) = own.read_into_vec(from, v, need);
                producer_waits |= waits;
                if v.len() < h.len as usize {
                    break;
                }
                let frame = self.partial.take().expect("just seen");
                self.frames.push_back(frame);
                continue;
            }
            if own.pending(from) == 0 {
                break;
            }
            if self.inbuf.capacity() < HEADER_LEN {
                self.inbuf.reserve(HEADER_LEN);
            }
            let need = HEADER_LEN - self.inbuf.len();
            let (_, waits) = own.read_into_vec(from, &mut self.inbuf, need);
            producer_waits |= waits;
            if self.inbuf.len() < HEADER_LEN {
                break;
            }
            let raw: &[u8; HEADER_LEN] = self.inbuf[..HEADER_LEN].try_into().expect("a header");
            let decoded = Header::decode(raw);
            self.inbuf.clear();
            match decoded {
                Ok(h) => self.partial = Some((h, pool.take(h.len as usize))),
                Err(e) => self.bad = Some(e),
            }
        }
        producer_waits
    }

    /// The next complete frame in `inbuf`, if any.
    pub fn next_frame(
        &mut self,
        pool: &mut BufPool,
    ) -> Result<Option<(Header, Vec<u8>)>, FrameError> {
        if let Some(f) = self.frames.pop_front() {
            return Ok(Some(f));
        }
        if let Some(e) = self.bad.take() {
            return Err(e);
        }
        if !matches!(self.io, Io::Tcp(_)) {
            return Ok(None);
        }
        let avail = self.inbuf.len() - self.in_start;
        if avail < HEADER_LEN {
            return Ok(None);
        }
        let raw: &[u8; HEADER_LEN] = self.inbuf[self.in_start..self.in_start + HEADER_LEN]
            .try_into()
            .expect("HEADER_LEN bytes");
        let h = Header::decode(raw)?;
        let total = HEADER_LEN + h.len as usize;
        if avail < total {
            return Ok(None);
        }
        let p0 = self.in_start + HEADER_LEN;
        let mut payload = pool.take(h.len as usize);
        payload.extend_from_slice(&self.inbuf[p0..p0 + h.len as usize]);
        self.in_start += total;
        if self.in_start == self.inbuf.len() {
            self.inbuf.clear();
            self.in_start = 0;
        }
        Ok(Some((h, payload)))
    }

    /// Forgets the transport and what was buffered (the peer is gone).
    pub fn reset(&mut self) {
        self.io = Io::None;
        self.conn += 1;
        self.reader_busy = false;
        self.out.clear();
        self.out_off = 0;
        self.inbuf.clear();
        self.in_start = 0;
        self.frames.clear();
        self.partial = None;
        self.bad = None;
        self.accepted = false;
        self.inbound = false;
        self.readable = false;
        self.watch_out = false;
        self.deferred.clear();
    }
}

/// Writes a frame's header and payload in one system call (no copy into one buffer first).
fn send_vectored(fd: i32, bufs: &[&[u8]]) -> io::Result<usize> {
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = [empty; MAX_SLICES + 2];
    let mut n_iov = 0;
    for b in bufs.iter().filter(|b| !b.is_empty()) {
        assert!(
            n_iov < iov.len(),
            "deferred control frames, a header and at most MAX_SLICES payload slices"
        );
        iov[n_iov] = libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        n_iov += 1;
    }
    if n_iov == 0 {
        return Ok(0);
    }
    // SAFETY: msghdr is plain data; zeroed is valid, then we set the iovec array which
    // outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n_iov;
    loop {
        // SAFETY: fd is a socket we own; msg points to valid iovecs. MSG_NOSIGNAL: a broken
        // connection is an error, not a SIGPIPE.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}
