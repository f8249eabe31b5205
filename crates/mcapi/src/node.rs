//! The safe Rust API: an MCAPI node of this process. Every call locks the node's engine,
//! makes progress (moves bytes in and out) and returns; blocking calls spin briefly, then one
//! waiting thread sleeps in the kernel (a futex on the node's shared-memory doorbell, or
//! poll(2) on its sockets) while the others wait on a condition variable it signals.

use crate::engine::{
    Completion, Engine, SleepPlan, Transport, DIRECT_READ, EVENTS_PER_WAIT, TOKEN_WAKE,
};
use crate::error::{McapiError, PeerLoss, Result};
use crate::ids::{ChanKind, ChannelHandle, Direction, EndpointId, RequestId};
use crate::link::LinkState;
use crate::shm::Segment;
use crate::topology::{Topology, TransportKind};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct Shared {
    id: u32,
    topo: Arc<Topology>,
    engine: Mutex<Engine>,
    cv: Condvar,
    poller: AtomicBool,
    cv_waiters: AtomicUsize,
    eventfd: Option<OwnedFd>,
    own: Option<Arc<Segment>>,
    finalized: AtomicBool,
}

/// What a sleeping thread saw, handed to the engine once it holds the lock again.
enum Woke {
    /// epoll_wait reported this many events (their tokens are in the waiter's buffer).
    Events(usize),
    /// A direct read of link `node` (see `SleepPlan::Read`).
    Read {
        node: u32,
        buf: Vec<u8>,
        conn: u64,
        result: std::io::Result<usize>,
    },
}

/// An initialized MCAPI node (cheap to clone; all clones are the same node).
#[derive(Clone)]
pub struct Node {
    shared: Arc<Shared>,
}

/// What this node knows about another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerState {
    /// Not contacted yet.
    Unknown,
    /// Being contacted.
    Connecting,
    Up,
    /// Gone: operations on it fail with `MCAPI_ERR_TRANSMISSION`.
    Lost(PeerLoss),
}

impl Node {
    /// Starts node `node` of `topo`'s job in domain `domain`.
    pub fn initialize(domain: u32, node: u32, topo: Topology) -> Result<Node> {
        if domain != topo.domain {
            return Err(McapiError::DomainInvalid {
                domain,
                expected: topo.domain,
            });
        }
        if node >= topo.nodes {
            return Err(McapiError::NodeInvalid {
                node,
                nodes: topo.nodes,
            });
        }
        let topo = Arc::new(topo);
        let incarnation = crate::auth::random_u64();
        let fp = topo.fingerprint();
        let (transport, eventfd, own) = match topo.transport {
            TransportKind::Shm => {
                let tag = crate::auth::segment_tag(&topo.secret, &fp, node);
                let seg = Arc::new(Segment::create(
                    &topo.shm_dir,
                    &topo.job,
                    node,
                    topo.nodes,
                    topo.shm_ring_bytes,
                    incarnation,
                    tag,
                )?);
                (Transport::Shm { own: seg.clone() }, None, Some(seg))
            }
            TransportKind::Tcp => {
                let addr = topo.addresses[node as usize];
                let listener = crate::tcp::listen(addr).map_err(|e| McapiError::InitFailed {
                    node,
                    reason: format!("cannot listen at {addr}: {e}"),
                })?;
                tracing::info!(node, job = %topo.job, "MCAPI node {node} listens at {addr}");
                // SAFETY: eventfd with valid flags; the result is checked.
                let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return Err(McapiError::io("eventfd", std::io::Error::last_os_error()));
                }
                // SAFETY: fd is a fresh descriptor we own.
                let wake = unsafe { OwnedFd::from_raw_fd(fd) };
                let transport =
                    Transport::tcp(listener, &wake).map_err(|e| McapiError::io("epoll", e))?;
                (transport, Some(wake), None)
            }
        };
        let engine = Engine::new(node, incarnation, topo.clone(), transport);
        Ok(Node {
            shared: Arc::new(Shared {
                id: node,
                topo,
                engine: Mutex::new(engine),
                cv: Condvar::new(),
                poller: AtomicBool::new(false),
                cv_waiters: AtomicUsize::new(0),
                eventfd,
                own,
                finalized: AtomicBool::new(false),
            }),
        })
    }

    pub fn id(&self) -> u32 {
        self.shared.id
    }

    pub fn domain(&self) -> u32 {
        self.shared.topo.domain
    }

    pub fn topology(&self) -> &Topology {
        &self.shared.topo
    }

    fn lock(&self) -> Result<MutexGuard<'_, Engine>> {
        if self.shared.finalized.load(Ordering::Acquire) {
            return Err(McapiError::NotInitialized);
        }
        let g = self.shared.engine.lock().unwrap_or_else(|p| p.into_inner());
        if g.finalized {
            return Err(McapiError::NotInitialized);
        }
        Ok(g)
    }

    /// Runs `f` on the engine after making progress, then wakes waiters if anything completed.
    fn with<T>(&self, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
        self.with_progress(true, f)
    }

    /// `with` for the calls of the data path (sends, the start of a receive): over TCP their
    /// progress pass asks epoll only if nobody did for a while (see `LAZY_POLL`); a call that
    /// then has to wait asks at once.
    fn with_lazy<T>(&self, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
        self.with_progress(false, f)
    }

    fn with_progress<T>(&self, eager: bool, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
        let mut g = self.lock()?;
        g.progress(eager);
        let r = f(&mut g);
        self.notify(&mut g);
        r
    }

    fn notify(&self, g: &mut Engine) {
        if !g.completed {
            return;
        }
        g.completed = false;
        if self.shared.cv_waiters.load(Ordering::Acquire) > 0 {
            self.shared.cv.notify_all();
        }
        if self.shared.poller.load(Ordering::Acquire) {
            self.wake_poller();
        }
    }

    fn wake_poller(&self) {
        if let Some(own) = &self.shared.own {
            own.ring_doorbell_force();
        } else if let Some(fd) = &self.shared.eventfd {
            let one: u64 = 1;
            // SAFETY: writing 8 bytes to our eventfd.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Waits until `check` yields (up to `timeout`), making progress, spinning, then sleeping.
    fn wait_until<T>(
        &self,
        timeout: Option<Duration>,
        mut check: impl FnMut(&mut Engine) -> Option<Result<T>>,
    ) -> Result<T> {
        // Spinning pays over shared memory (the ring is read without a system call); over TCP
        // every look is a system call, and a loop of them was measured slower than sleeping
        // in the kernel at once.
        let spin = if self.shared.own.is_some() {
            self.shared.topo.spin
        } else {
            Duration::ZERO
        };
        // The deadline and the end of the spin count from the first time the call finds it
        // must wait (a few hundred nanoseconds after the call began): a call that completes
        // at its first look reads no clock, which costs about 80 ns on a virtual machine.
        let mut started: Option<Instant> = None;
        let mut g = self.lock()?;
        // The calls that wait made progress just before (`with`); a first look without another
        // pass saves a system call per operation. Nothing is missed: what arrived meanwhile
        // makes the sleep return at once (epoll is level-triggered for links; a shared-memory
        // sleeper looks at its rings first).
        // (A wait whose deadline has passed gets its pass: it would not sleep.)
        // After its own epoll_wait a sleeper hands the engine what it saw: no second look.
        let mut first = true;
        let mut woke: Option<Woke> = None;
        let mut tokens = [0u64; EVENTS_PER_WAIT];
        // One direct read per wait: if it times out, the rest of the wait sleeps in epoll.
        let mut direct_read_spent = false;
        loop {
            if let Some(w) = woke.take() {
                match w {
                    Woke::Events(n) => g.note_events(&tokens[..n]),
                    Woke::Read {
                        node,
                        buf,
                        conn,
                        result,
                    } => g.direct_read_done(node, buf, conn, result),
                }
                g.progress(false);
            } else if !first || timeout == Some(Duration::ZERO) {
                g.progress(true);
            }
            first = false;
            let r = check(&mut g);
            self.notify(&mut g);
            if let Some(r) = r {
                return r;
            }
            if g.finalized {
                return Err(McapiError::NotInitialized);
            }
            // A wait without a deadline that does not spin needs no clock at all.
            let now = (timeout.is_some() || !spin.is_zero()).then(Instant::now);
            let since = match (now, started) {
                (Some(now), Some(t0)) => now.saturating_duration_since(t0),
                (Some(now), None) => {
                    started = Some(now);
                    Duration::ZERO
                }
                (None, _) => Duration::ZERO,
            };
            if timeout.is_some_and(|t| since >= t) {
                return Err(McapiError::Timeout);
            }
            if since < spin {
                drop(g);
                let own = self.shared.own.as_deref();
                let mut input = false;
                for _ in 0..200 {
                    std::hint::spin_loop();
                    if own.is_some_and(|s| s.has_input(self.shared.id)) {
                        input = true;
                        break;
                    }
                }
                // The peer may be waiting for this very CPU (more runnable threads than cores):
                // without a yield the spin only delays its reply. With input there, the yield
                // (a system call) would only delay taking it.
                if !input {
                    std::thread::yield_now();
                }
                g = self.lock()?;
                continue;
            }
            let slice = timeout
                .map(|t| t.saturating_sub(since))
                .unwrap_or(Duration::MAX)
                .min(Duration::from_millis(10));
            if !self.shared.poller.swap(true, Ordering::AcqRel) {
                let alone = !direct_read_spent
                    && slice >= DIRECT_READ
                    && self.shared.cv_waiters.load(Ordering::Acquire) == 0;
                let plan = g.sleep_plan(alone);
                direct_read_spent |= matches!(plan, SleepPlan::Read { .. });
                drop(g);
                woke = self.sleep(plan, slice, &mut tokens);
                self.shared.poller.store(false, Ordering::Release);
                g = self.lock()?;
                g.check_liveness();
            } else {
                self.shared.cv_waiters.fetch_add(1, Ordering::AcqRel);
                g = self
                    .shared
                    .cv
                    .wait_timeout(g, slice.min(Duration::from_millis(2)))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                self.shared.cv_waiters.fetch_sub(1, Ordering::AcqRel);
                if g.finalized {
                    return Err(McapiError::NotInitialized);
                }
            }
        }
    }

    /// Sleeps up to `slice`; over TCP, returns what it saw (epoll's tokens in `tokens`).
    fn sleep(
        &self,
        plan: SleepPlan,
        slice: Duration,
        tokens: &mut [u64; EVENTS_PER_WAIT],
    ) -> Option<Woke> {
        match plan {
            SleepPlan::Shm { own, seq } => {
                if own.has_input(self.shared.id) {
                    own.cancel_sleep();
                } else {
                    own.sleep(seq, slice);
                }
                None
            }
            SleepPlan::Tcp { epoll } => {
                use rustix::event::{epoll as ep, Timespec};
                let timeout = Timespec {
                    tv_sec: slice.as_secs().min(i64::MAX as u64) as i64,
                    tv_nsec: i64::from(slice.subsec_nanos()),
                };
                let mut buf = [std::mem::MaybeUninit::<ep::Event>::uninit(); EVENTS_PER_WAIT];
                let mut n = 0;
                if let Ok((events, _)) = ep::wait(&*epoll, &mut buf, Some(&timeout)) {
                    for ev in events.iter() {
                        let t = ev.data.u64();
                        if t == TOKEN_WAKE {
                            if let Some(fd) = &self.shared.eventfd {
                                let mut v: u64 = 0;
                                // SAFETY: reading 8 bytes from our non-blocking eventfd.
                                unsafe {
                                    libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8)
                                };
                            }
                        } else {
                            tokens[n] = t;
                            n += 1;
                        }
                    }
                }
                Some(Woke::Events(n))
            }
            SleepPlan::Read {
                node,
                stream,
                mut buf,
                conn,
            } => {
                let spare = buf.spare_capacity_mut();
                // SAFETY: recv(2) into `spare`, writable for its whole length; the socket is
                // blocking with a receive timeout of DIRECT_READ (the slice is at least that).
                let n = unsafe {
                    libc::recv(
                        stream.as_raw_fd(),
                        spare.as_mut_ptr().cast(),
                        spare.len(),
                        0,
                    )
                };
                let result = if n >= 0 {
                    Ok(n as usize)
                } else {
                    Err(std::io::Error::last_os_error())
                };
                Some(Woke::Read {
                    node,
                    buf,
                    conn,
                    result,
                })
            }
        }
    }

    // ------------------------------------------------------------ endpoints

    pub fn endpoint_create(&self, port: u32) -> Result<EndpointId> {
        self.with(|e| e.create_endpoint(port))
    }

    pub fn endpoint_get_i(&self, domain: u32, node: u32, port: u32) -> Result<RequestId> {
        self.check_domain(domain)?;
        self.with(|e| e.get_endpoint_i(node, port))
    }

    /// Blocks until `<domain, node, port>` exists (or `timeout`).
    pub fn endpoint_get(
        &self,
        domain: u32,
        node: u32,
        port: u32,
        timeout: Option<Duration>,
    ) -> Result<EndpointId> {
        let r = self.endpoint_get_i(domain, node, port)?;
        let c = self.wait_or_cancel(r, timeout)?;
        Ok(c.endpoint.expect("a get yields an endpoint"))
    }

    fn check_domain(&self, domain: u32) -> Result<()> {
        if domain != self.shared.topo.domain {
            return Err(McapiError::DomainInvalid {
                domain,
                expected: self.shared.topo.domain,
            });
        }
        Ok(())
    }

    pub fn endpoint_delete(&self, ep: EndpointId) -> Result<()> {
        self.with(|e| e.delete_endpoint(ep))
    }

    pub fn endpoint_timeout(&self, ep: EndpointId) -> Result<Option<Duration>> {
        self.with(|e| {
            e.check_local(ep)?;
            Ok(e.endpoint_timeout(ep))
        })
    }

    pub fn set_endpoint_timeout(&self, ep: EndpointId, t: Option<Duration>) -> Result<()> {
        self.with(|e| e.set_endpoint_timeout(ep, t))
    }

    /// (endpoint type bits, status bits, nodes that got it, queued entries).
    pub fn endpoint_facts(&self, ep: EndpointId) -> Result<(u32, u32, u32, usize)> {
        self.with(|e| e.endpoint_facts(ep))
    }

    // ------------------------------------------------------------ messages

    pub fn msg_send_i(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[u8],
        priority: u32,
    ) -> Result<RequestId> {
        self.with_lazy(|e| e.msg_send_i(from, to, &[data], priority))
    }

    /// `msg_send_i` of the concatenation of `data`'s slices (at most [`crate::MAX_SLICES`]),
    /// sent as one message without gathering them into one buffer first: one write into the
    /// peer's ring, one `sendmsg` on a socket. The slices are copied only if the send has to
    /// wait for the receiver's queue.
    pub fn msg_send_vectored_i(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[&[u8]],
        priority: u32,
    ) -> Result<RequestId> {
        self.with_lazy(|e| e.msg_send_i(from, to, data, priority))
    }

    /// `msg_send` of the concatenation of `data`'s slices (see `msg_send_vectored_i`).
    pub fn msg_send_vectored(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[&[u8]],
        priority: u32,
    ) -> Result<()> {
        let (r, t) = self.with_lazy(|e| {
            let t = e.endpoint_timeout(from);
            Ok((e.msg_send_i(from, to, data, priority)?, t))
        })?;
        self.wait_or_cancel(r, t).map(|_| ())
    }

    /// Sends a message; waits while the receiver's queue is full (up to `from`'s timeout).
    pub fn msg_send(
        &self,
        from: EndpointId,
        to: EndpointId,
        data: &[u8],
        priority: u32,
    ) -> Result<()> {
        let (r, t) = self.with_lazy(|e| {
            let t = e.endpoint_timeout(from);
            Ok((e.msg_send_i(from, to, &[data], priority)?, t))
        })?;
        self.wait_or_cancel(r, t).map(|_| ())
    }

    pub fn msg_recv_i(&self, ep: EndpointId) -> Result<RequestId> {
        self.with_lazy(|e| e.msg_recv_i(ep))
    }

    /// Receives the next message (highest priority first), waiting up to `ep`'s timeout.
    pub fn msg_recv(&self, ep: EndpointId) -> Result<Vec<u8>> {
        let (r, t) = self.with_lazy(|e| {
            let t = e.endpoint_timeout(ep);
            Ok((e.msg_recv_i(ep)?, t))
        })?;
        Ok(self.wait_or_cancel(r, t)?.data.unwrap_or_default())
    }

    /// Receives the next message (highest priority first) into `buf`, waiting up to `ep`'s
    /// timeout; returns its length. A message longer than `buf` is `Truncated` (status
    /// `MCAPI_ERR_MSG_TRUNCATED`) and stays queued, whole, for a receive with a larger
    /// buffer. Receive requests made before (`msg_recv_i`) are served first.
    pub fn msg_recv_into(&self, ep: EndpointId, buf: &mut [u8]) -> Result<usize> {
        let t = self.with_lazy(|e| {
            e.check_local(ep)?;
            Ok(e.endpoint_timeout(ep))
        })?;
        let port = ep.port;
        self.wait_until(t, |e| e.recv_into(port, buf))
    }

    /// Gives back a buffer that `msg_recv`, `pktchan_recv` or a completed receive request
    /// handed out, once its bytes are used: later large messages and packets are read into it
    /// instead of into freshly allocated (and page-faulted) memory.
    pub fn recycle(&self, buf: Vec<u8>) {
        if let Ok(mut g) = self.lock() {
            g.recycle(buf);
        }
    }

    pub fn msg_available(&self, ep: EndpointId) -> Result<usize> {
        self.with(|e| e.msg_available(ep))
    }

    // ------------------------------------------------------------ channels

    pub fn connect_i(
        &self,
        send: EndpointId,
        recv: EndpointId,
        kind: ChanKind,
    ) -> Result<RequestId> {
        self.with(|e| e.connect_i(send, recv, kind))
    }

    pub fn open_i(&self, ep: EndpointId, kind: ChanKind, dir: Direction) -> Result<RequestId> {
        self.with(|e| e.open_i(ep, kind, dir))
    }

    /// Connects and opens in one go is the application's business; this waits for an open.
    pub fn open(
        &self,
        ep: EndpointId,
        kind: ChanKind,
        dir: Direction,
        timeout: Option<Duration>,
    ) -> Result<ChannelHandle> {
        let r = self.open_i(ep, kind, dir)?;
        Ok(self
            .wait_or_cancel(r, timeout)?
            .handle
            .expect("an open yields a handle"))
    }

    pub fn pktchan_send_i(&self, h: ChannelHandle, data: &[u8]) -> Result<RequestId> {
        self.with_lazy(|e| e.pkt_send_i(h, &[data]))
    }

    /// `pktchan_send_i` of the concatenation of `data`'s slices as one packet (see
    /// `msg_send_vectored_i`).
    pub fn pktchan_send_vectored_i(&self, h: ChannelHandle, data: &[&[u8]]) -> Result<RequestId> {
        self.with_lazy(|e| e.pkt_send_i(h, data))
    }

    /// `pktchan_send` of the concatenation of `data`'s slices as one packet.
    pub fn pktchan_send_vectored(&self, h: ChannelHandle, data: &[&[u8]]) -> Result<()> {
        let (r, t) = self.with_lazy(|e| {
            let t = e
                .handle_endpoint(h)
                .ok()
                .and_then(|ep| e.endpoint_timeout(ep));
            Ok((e.pkt_send_i(h, data)?, t))
        })?;
        self.wait_or_cancel(r, t).map(|_| ())
    }

    pub fn pktchan_send(&self, h: ChannelHandle, data: &[u8]) -> Result<()> {
        let (r, t) = self.with_lazy(|e| {
            let t = e
                .handle_endpoint(h)
                .ok()
                .and_then(|ep| e.endpoint_timeout(ep));
            Ok((e.pkt_send_i(h, &[data])?, t))
        })?;
        self.wait_or_cancel(r, t).map(|_| ())
    }

    pub fn pktchan_recv_i(&self, h: ChannelHandle) -> Result<RequestId> {
        self.with_lazy(|e| e.chan_recv_i(h, None))
    }

    pub fn pktchan_recv(&self, h: ChannelHandle) -> Result<Vec<u8>> {
        let (r, t) = self.with_lazy(|e| {
            let t = e
                .handle_endpoint(h)
                .ok()
                .and_then(|ep| e.endpoint_timeout(ep));
            Ok((e.chan_recv_i(h, None)?, t))
        })?;
        Ok(self.wait_or_cancel(r, t)?.data.unwrap_or_default())
    }

    /// Receives the next packet into `buf`, waiting up to the endpoint's timeout; returns its
    /// length. A packet longer than `buf` is `Truncated` and stays queued, whole.
    pub fn pktchan_recv_into(&self, h: ChannelHandle, buf: &mut [u8]) -> Result<usize> {
        let (port, t) = self.with_lazy(|e| {
            let ep = e.handle_endpoint(h)?;
            if h.kind != ChanKind::Packet {
                return Err(McapiError::ChanType(ep));
            }
            Ok((ep.port, e.endpoint_timeout(ep)))
        })?;
        self.wait_until(t, |e| match e.handle_endpoint(h) {
            Err(err) => Some(Err(err)),
            Ok(_) => e.recv_into(port, buf),
        })
    }

    pub fn chan_available(&self, h: ChannelHandle) -> Result<usize> {
        self.with(|e| e.chan_available(h))
    }

    /// Sends a scalar of `width` bytes (1, 2, 4 or 8).
    pub fn sclchan_send(&self, h: ChannelHandle, width: u8, value: u64) -> Result<()> {
        let (r, t) = self.with_lazy(|e| {
            let t = e
                .handle_endpoint(h)
                .ok()
                .and_then(|ep| e.endpoint_timeout(ep));
            Ok((e.scl_send_i(h, width, value)?, t))
        })?;
        self.wait_or_cancel(r, t).map(|_| ())
    }

    /// Receives a scalar that was sent with the same `width`.
    pub fn sclchan_recv(&self, h: ChannelHandle, width: u8) -> Result<u64> {
        let (r, t) = self.with_lazy(|e| {
            let t = e
                .handle_endpoint(h)
                .ok()
                .and_then(|ep| e.endpoint_timeout(ep));
            Ok((e.chan_recv_i(h, Some(width))?, t))
        })?;
        Ok(self.wait_or_cancel(r, t)?.scalar.unwrap_or_default())
    }

    pub fn close_i(&self, h: ChannelHandle) -> Result<RequestId> {
        self.with(|e| e.close_i(h))
    }

    // ------------------------------------------------------------ requests

    /// `Ok(None)` while pending; the result (the request is then gone) once complete.
    pub fn test(&self, r: RequestId) -> Result<Option<Completion>> {
        self.with(|e| match e.take(r)? {
            None => Ok(None),
            Some(res) => res.map(Some),
        })
    }

    /// Waits for `r` (`None`: forever). A timeout leaves the request pending.
    pub fn wait(&self, r: RequestId, timeout: Option<Duration>) -> Result<Completion> {
        self.wait_until(timeout, |e| match e.take(r) {
            Err(err) => Some(Err(err)),
            Ok(None) => None,
            Ok(Some(res)) => Some(res),
        })
    }

    fn wait_or_cancel(&self, r: RequestId, timeout: Option<Duration>) -> Result<Completion> {
        match self.wait(r, timeout) {
            Err(McapiError::Timeout) => {
                let mut g = self.lock()?;
                if g.cancel(r).is_ok() {
                    let _ = g.take(r);
                    Err(McapiError::Timeout)
                } else {
                    // It completed just now.
                    match g.take(r) {
                        Ok(Some(res)) => res,
                        _ => Err(McapiError::Timeout),
                    }
                }
            }
            other => other,
        }
    }

    /// Waits for the first of `rs` to complete: its index and its result (an operation's
    /// failure is reported with the index of the request that failed).
    pub fn wait_any(
        &self,
        rs: &[RequestId],
        timeout: Option<Duration>,
    ) -> Result<(usize, Result<Completion>)> {
        if rs.is_empty() {
            return Err(McapiError::Parameter("wait_any needs at least one request"));
        }
        self.wait_until(timeout, |e| {
            for (i, &r) in rs.iter().enumerate() {
                match e.is_pending(r) {
                    Err(err) => return Some(Err(err)),
                    Ok(true) => {}
                    Ok(false) => {
                        let res = e.take(r).expect("valid").expect("done");
                        return Some(Ok((i, res)));
                    }
                }
            }
            None
        })
    }

    /// Whether `r` is still pending (without consuming it).
    pub fn is_pending(&self, r: RequestId) -> Result<bool> {
        self.with(|e| e.is_pending(r))
    }

    pub fn cancel(&self, r: RequestId) -> Result<()> {
        self.with(|e| e.cancel(r))
    }

    // ------------------------------------------------------------ node

    /// What this node knows of `node`.
    pub fn peer_state(&self, node: u32) -> Result<PeerState> {
        self.with(|e| {
            Ok(match e.link_state(node) {
                None => {
                    return Err(McapiError::NodeInvalid {
                        node,
                        nodes: e.topo.nodes,
                    })
                }
                Some(LinkState::Idle) => PeerState::Unknown,
                Some(LinkState::Connecting) => PeerState::Connecting,
                Some(LinkState::Up) => PeerState::Up,
                Some(LinkState::Lost(w)) => PeerState::Lost(w.clone()),
            })
        })
    }

    /// Flushes what is queued (up to `linger`), tells the peers, and closes. Other clones of
    /// this node see `MCAPI_ERR_NODE_NOTINIT` from then on.
    pub fn finalize(&self, linger: Duration) -> Result<()> {
        let deadline = Instant::now() + linger;
        let mut g = self.lock()?;
        loop {
            g.progress(true);
            if g.flushed() || Instant::now() >= deadline {
                break;
            }
            drop(g);
            std::thread::sleep(Duration::from_micros(200));
            g = self.lock()?;
        }
        g.say_bye();
        g.finalized = true;
        self.shared.finalized.store(true, Ordering::Release);
        g.completed = true;
        self.shared.cv.notify_all();
        self.wake_poller();
        Ok(())
    }
}
