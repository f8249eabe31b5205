//! The node's state and its progress engine: endpoints and their queues, channels, requests,
//! per-peer links, and the credit scheme that gives back-pressure. Everything here runs under
//! the node's one lock (`Node` in `node.rs`); progress is made by whichever thread calls in.
//!
//! Back-pressure: a receive queue holds, per sending node, at most `queue_depth` entries and
//! `queue_bytes` bytes not yet consumed. The sender counts what it sent and the receiver gives
//! credit back as the application consumes, so a sender blocks (or its `_i` call stays
//! pending) exactly when its share of the receiver's queue is full, without ever stalling the
//! link for other endpoints. The receiver checks the same counts and drops a peer that sends
//! beyond them.

use crate::clock;
use crate::error::{McapiError, PeerLoss, Result};
use crate::frame::{Header, Kind, MAX_PAYLOAD, MAX_SLICES, MIN_PRIORITY};
use crate::ids::{ChanKind, ChannelHandle, Direction, EndpointId, RequestId, MAX_PORT};
use crate::link::{Io, Link, LinkState};
use crate::pool::BufPool;
use crate::shm::{Pidfd, Segment};
use crate::tcp::{self, Handshake, HsContext, Outcome};
use crate::topology::Topology;
use rustix::event::epoll;
use std::collections::VecDeque;

/// Maps keyed by port, node, endpoint or token, on every call's path: foldhash instead of the
/// standard SipHash, which showed as 8 % of a TCP round trip's user time (keys come from
/// authenticated peers only; the seed is still random per process).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// TCP: how long calls that need not look at the network (a send, the start of a receive) may
/// go without asking epoll what arrived, in milliseconds of the coarse clock. That clock moves
/// once per kernel tick, so in effect they ask once per tick (4 ms with HZ=250). Such calls
/// only need the network when a window is full, and then they wait (which asks at once); a
/// system call for each of them would cost as much as the send itself. Requests, `test` and
/// the other calls ask every time.
const LAZY_POLL_MS: u64 = 1;

/// How often a progress pass looks for dead shared-memory peers (pidfds).
const LIVENESS_EVERY_MS: u64 = 20;

/// epoll tokens: the node's eventfd, the listener, a handshake, and link `TOKEN_LINK | node`.
pub const TOKEN_WAKE: u64 = 0;
const TOKEN_LISTENER: u64 = 1;
const TOKEN_HANDSHAKE: u64 = 2;
const TOKEN_LINK: u64 = 1 << 32;

/// Events one epoll_wait takes (more stay ready for the next: epoll is level-triggered here).
pub const EVENTS_PER_WAIT: usize = 32;

/// TCP: the receive timeout of link sockets, how long a waiting thread blocks in a read of
/// its one connection (`Engine::sleep_plan`) before it sleeps in epoll_wait instead. Other
/// events (a new connection, another thread's wakeup) wait at most this long meanwhile.
pub const DIRECT_READ: Duration = Duration::from_millis(1);

/// What a completed request yields.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Bytes sent or received.
    pub size: usize,
    /// A received message or packet.
    pub data: Option<Vec<u8>>,
    /// A received scalar.
    pub scalar: Option<u64>,
    /// The endpoint of `endpoint_get_i`.
    pub endpoint: Option<EndpointId>,
    /// The handle of an open.
    pub handle: Option<ChannelHandle>,
}

enum Payload {
    Bytes(Vec<u8>),
    Scalar { width: u8, value: u64 },
}

impl Payload {
    fn len(&self) -> u64 {
        match self {
            Payload::Bytes(b) => b.len() as u64,
            Payload::Scalar { width, .. } => u64::from(*width),
        }
    }
}

struct Item {
    from: u32,
    payload: Payload,
}

struct Chan {
    kind: ChanKind,
    dir: Direction,
    peer: EndpointId,
    open: bool,
    peer_open: bool,
    closed: bool,
    peer_closed: bool,
    generation: u16,
}

/// What a receive request waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RecvKind {
    Msg,
    Pkt,
    Scl(u8),
}

#[derive(Default)]
struct Window {
    entries: u32,
    bytes: u64,
}

struct Endpoint {
    queues: [VecDeque<Item>; MIN_PRIORITY as usize + 1],
    count: usize,
    waiters: VecDeque<RequestId>,
    inflight: HashMap<u32, Window>,
    unreported: HashMap<u32, Window>,
    chan: Option<Chan>,
    open_req: Option<(RequestId, ChanKind, Direction)>,
    early_opened: Option<EndpointId>,
    timeout: Option<Duration>,
    getters: HashSet<u32>,
    generation: u16,
}

impl Endpoint {
    fn new() -> Endpoint {
        Endpoint {
            queues: Default::default(),
            count: 0,
            waiters: VecDeque::new(),
            inflight: HashMap::default(),
            unreported: HashMap::default(),
            chan: None,
            open_req: None,
            early_opened: None,
            timeout: None,
            getters: HashSet::default(),
            generation: 0,
        }
    }

    fn front(&self) -> Option<&Item> {
        self.queues.iter().find_map(|q| q.front())
    }

    fn pop(&mut self) -> Option<Item> {
        let it = self.queues.iter_mut().find_map(|q| q.pop_front());
        if it.is_some() {
            self.count -= 1;
        }
        it
    }
}

/// What a sender knows of a destination endpoint.
#[derive(Default)]
struct SendState {
    out: Window,
    blocked: VecDeque<RequestId>,
    invalid: bool,
}

enum ReqKind {
    Done,
    /// A send waiting for credit (holds its frame).
    Send {
        dest: EndpointId,
        header: Header,
        payload: Vec<u8>,
    },
    Recv {
        port: u16,
        kind: RecvKind,
    },
    Get {
        node: u32,
        port: u16,
        token: u64,
    },
    Connect {
        token: u64,
        pair: (EndpointId, EndpointId),
        waiting: Vec<EndpointId>,
        ok: Vec<EndpointId>,
        err: Option<McapiError>,
    },
    Open {
        port: u16,
    },
}

struct Req {
    kind: ReqKind,
    done: Option<Result<Completion>>,
    cancelled: bool,
}

struct Slot {
    generation: u32,
    req: Option<Req>,
}

pub enum Transport {
    Shm {
        own: Arc<Segment>,
    },
    /// One epoll set holds the node's eventfd, the listener, handshakes and links. Sockets
    /// are read only when epoll reported them (no read that would only say EAGAIN), and a
    /// waiting thread sleeps in epoll_wait and hands what it saw to the engine.
    Tcp {
        listener: TcpListener,
        handshakes: Vec<Handshake>,
        epoll: Arc<OwnedFd>,
        /// epoll reported connections waiting on the listener.
        accept_ready: bool,
        /// When epoll was last asked (by a progress pass or a sleeper), `clock::coarse_ms`.
        polled_at: u64,
    },
}

impl Transport {
    /// The TCP transport over `listener`; `wake` (the node's eventfd) joins its epoll set.
    pub fn tcp(listener: TcpListener, wake: &OwnedFd) -> std::io::Result<Transport> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let level_in = epoll::EventFlags::IN;
        epoll::add(&ep, wake, epoll::EventData::new_u64(TOKEN_WAKE), level_in)?;
        epoll::add(
            &ep,
            &listener,
            epoll::EventData::new_u64(TOKEN_LISTENER),
            level_in,
        )?;
        Ok(Transport::Tcp {
            listener,
            handshakes: Vec::new(),
            epoll: Arc::new(ep),
            accept_ready: true,
            polled_at: clock::coarse_ms(),
        })
    }
}

/// How a waiting thread should sleep (built under the lock, used outside it).
pub enum SleepPlan {
    Shm {
        own: Arc<Segment>,
        seq: u32,
    },
    Tcp {
        epoll: Arc<OwnedFd>,
    },
    /// TCP: block in recv(2) on the one connection, into the link's input buffer (the
    /// thread holds it until `direct_read_done`).
    Read {
        node: u32,
        stream: Arc<std::net::TcpStream>,
        buf: Vec<u8>,
        conn: u64,
    },
}

pub struct Engine {
    pub me: u32,
    pub incarnation: u64,
    pub topo: Arc<Topology>,
    fingerprint: [u8; 32],
    endpoints: HashMap<u16, Endpoint>,
    any_cursor: u32,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    live: usize,
    links: Vec<Link>,
    sends: HashMap<EndpointId, SendState>,
    next_token: u64,
    tokens: HashMap<u64, RequestId>,
    remote_gets: HashMap<u16, Vec<(u32, u64)>>,
    local_gets: HashMap<u16, Vec<RequestId>>,
    pub transport: Transport,
    /// Something completed since the last look: waiting threads must re-check.
    pub completed: bool,
    /// Some link holds deferred control frames (`send_credit`).
    deferred_any: bool,
    /// A link socket could not be given a receive timeout: waiting threads use epoll only.
    no_direct_read: bool,
    /// `clock::coarse_ms` of the last look for dead peers.
    last_liveness: u64,
    pub finalized: bool,
    /// Reused payload buffers (received frames are read into them; receivers give them back).
    pool: BufPool,
}

fn bad_payload_len(len: usize) -> u32 {
    len.min(u32::MAX as usize) as u32
}

/// The length of a gathered payload; at most `MAX_SLICES` slices.
fn gathered_len(data: &[&[u8]]) -> Result<usize> {
    if data.len() > MAX_SLICES {
        return Err(McapiError::Parameter(
            "a vectored send gathers at most MAX_SLICES (16) slices",
        ));
    }
    Ok(data.iter().map(|d| d.len()).sum())
}

impl Engine {
    pub fn new(me: u32, incarnation: u64, topo: Arc<Topology>, transport: Transport) -> Engine {
        let n = topo.nodes as usize;
        Engine {
            me,
            incarnation,
            fingerprint: topo.fingerprint(),
            topo,
            endpoints: HashMap::default(),
            any_cursor: MAX_PORT,
            slots: Vec::new(),
            free_slots: Vec::new(),
            live: 0,
            links: (0..n).map(|_| Link::new()).collect(),
            sends: HashMap::default(),
            next_token: 1,
            tokens: HashMap::default(),
            remote_gets: HashMap::default(),
            local_gets: HashMap::default(),
            transport,
            completed: false,
            deferred_any: false,
            no_direct_read: false,
            last_liveness: clock::coarse_ms(),
            finalized: false,
            pool: BufPool::default(),
        }
    }

    // ---------------------------------------------------------------- requests

    fn alloc(&mut self, kind: ReqKind) -> Result<RequestId> {
        if self.live >= self.topo.max_requests {
            return Err(McapiError::RequestLimit {
                max: self.topo.max_requests,
            });
        }
        let req = Req {
            kind,
            done: None,
            cancelled: false,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    req: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.generation = (s.generation + 1) & 0x00FF_FFFF;
        s.req = Some(req);
        self.live += 1;
        Ok(RequestId {
            slot,
            generation: s.generation,
        })
    }

    fn req(&mut self, id: RequestId) -> Option<&mut Req> {
        let s = self.slots.get_mut(id.slot as usize)?;
        if s.generation != id.generation {
            return None;
        }
        s.req.as_mut()
    }

    fn complete(&mut self, id: RequestId, r: Result<Completion>) {
        if let Some(req) = self.req(id) {
            if req.done.is_none() {
                req.done = Some(r);
                req.kind = ReqKind::Done;
                self.completed = true;
            }
        }
    }

    fn done_now(&mut self, c: Completion) -> Result<RequestId> {
        let id = self.alloc(ReqKind::Done)?;
        self.complete(id, Ok(c));
        Ok(id)
    }

    /// A finished request's result (the request is then gone), `None` while pending.
    pub fn take(&mut self, id: RequestId) -> Result<Option<Result<Completion>>> {
        let req = self.req(id).ok_or(McapiError::RequestInvalid)?;
        if req.done.is_none() {
            return Ok(None);
        }
        let r = req.done.take();
        let s = &mut self.slots[id.slot as usize];
        s.req = None;
        self.free_slots.push(id.slot);
        self.live -= 1;
        Ok(r)
    }

    pub fn is_pending(&mut self, id: RequestId) -> Result<bool> {
        Ok(self
            .req(id)
            .ok_or(McapiError::RequestInvalid)?
            .done
            .is_none())
    }

    /// Cancels a pending request: it completes with `Cancelled` and nothing of it happens later.
    pub fn cancel(&mut self, id: RequestId) -> Result<()> {
        let req = self.req(id).ok_or(McapiError::RequestInvalid)?;
        if req.done.is_some() {
            return Err(McapiError::RequestInvalid);
        }
        req.cancelled = true;
        let kind = std::mem::replace(&mut req.kind, ReqKind::Done);
        match kind {
            ReqKind::Send { dest, .. } => {
                if let Some(s) = self.sends.get_mut(&dest) {
                    s.blocked.retain(|r| *r != id);
                }
            }
            ReqKind::Recv { port, .. } => {
                if let Some(ep) = self.endpoints.get_mut(&port) {
                    ep.waiters.retain(|r| *r != id);
                }
            }
            ReqKind::Get { port, token, .. } => {
                self.tokens.remove(&token);
                if let Some(v) = self.local_gets.get_mut(&port) {
                    v.retain(|r| *r != id);
                }
            }
            ReqKind::Connect {
                token, ok, pair, ..
            } => {
                self.tokens.remove(&token);
                for ep in ok {
                    self.unreserve(ep, other(pair, ep));
                }
            }
            ReqKind::Open { port } => {
                if let Some(ep) = self.endpoints.get_mut(&port) {
                    if ep.open_req.is_some_and(|(r, _, _)| r == id) {
                        ep.open_req = None;
                        if let Some(ch) = &mut ep.chan {
                            if !ch.peer_open {
                                ch.open = false;
                            }
                        }
                    }
                }
            }
            ReqKind::Done => {}
        }
        self.complete(id, Err(McapiError::Cancelled));
        Ok(())
    }

    // ---------------------------------------------------------------- endpoints

    pub fn create_endpoint(&mut self, port: u32) -> Result<EndpointId> {
        if self.endpoints.len() >= self.topo.max_endpoints {
            return Err(McapiError::EndpointLimit {
                max: self.topo.max_endpoints,
            });
        }
        let port = if port == crate::ids::PORT_ANY {
            let mut p = self.any_cursor;
            let mut tries = 0;
            while self.endpoints.contains_key(&(p as u16)) {
                p = if p == 0 { MAX_PORT } else { p - 1 };
                tries += 1;
                if tries > MAX_PORT {
                    return Err(McapiError::NoPorts);
                }
            }
            self.any_cursor = if p == 0 { MAX_PORT } else { p - 1 };
            p
        } else if port > MAX_PORT {
            return Err(McapiError::PortInvalid { port });
        } else {
            port
        };
        let id = EndpointId::new(self.me, port);
        if self.endpoints.contains_key(&(port as u16)) {
            return Err(McapiError::EndpointExists(id));
        }
        self.endpoints.insert(port as u16, Endpoint::new());
        // Gets that waited for this port.
        for (node, token) in self.remote_gets.remove(&(port as u16)).unwrap_or_default() {
            self.endpoints
                .get_mut(&(port as u16))
                .expect("just made")
                .getters
                .insert(node);
            let mut h = Header::control(Kind::GetReply, port as u16, port as u16);
            h.b = token;
            h.aux = crate::status::Status::Success.code() as u16;
            self.send_control(node, h);
        }
        for r in self.local_gets.remove(&(port as u16)).unwrap_or_default() {
            self.complete(
                r,
                Ok(Completion {
                    endpoint: Some(id),
                    ..Default::default()
                }),
            );
        }
        Ok(id)
    }

    fn check_node(&self, node: u32) -> Result<()> {
        if node >= self.topo.nodes {
            return Err(McapiError::NodeInvalid {
                node,
                nodes: self.topo.nodes,
            });
        }
        Ok(())
    }

    pub fn get_endpoint_i(&mut self, node: u32, port: u32) -> Result<RequestId> {
        self.check_node(node)?;
        if port > MAX_PORT {
            return Err(McapiError::PortInvalid { port });
        }
        let id = EndpointId::new(node, port);
        if node == self.me {
            if self.endpoints.contains_key(&(port as u16)) {
                return self.done_now(Completion {
                    endpoint: Some(id),
                    ..Default::default()
                });
            }
            let r = self.alloc(ReqKind::Get {
                node,
                port: port as u16,
                token: 0,
            })?;
            self.local_gets.entry(port as u16).or_default().push(r);
            return Ok(r);
        }
        self.peer_usable(node)?;
        let token = self.token();
        let r = self.alloc(ReqKind::Get {
            node,
            port: port as u16,
            token,
        })?;
        self.tokens.insert(token, r);
        let mut h = Header::control(Kind::Get, 0, port as u16);
        h.b = token;
        self.send_control(node, h);
        Ok(r)
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    pub fn check_local(&self, ep: EndpointId) -> Result<()> {
        self.local(ep).map(|_| ())
    }

    fn local(&self, ep: EndpointId) -> Result<&Endpoint> {
        if u32::from(ep.node) != self.me {
            return Err(McapiError::EndpointRemote(ep));
        }
        self.endpoints
            .get(&ep.port)
            .ok_or(McapiError::EndpointInvalid(ep))
    }

    fn local_mut(&mut self, ep: EndpointId) -> Result<&mut Endpoint> {
        if u32::from(ep.node) != self.me {
            return Err(McapiError::EndpointRemote(ep));
        }
        self.endpoints
            .get_mut(&ep.port)
            .ok_or(McapiError::EndpointInvalid(ep))
    }

    /// A remote or local endpoint value that may be used as a destination.
    fn check_endpoint(&self, ep: EndpointId) -> Result<()> {
        self.check_node(u32::from(ep.node))?;
        if u32::from(ep.node) == self.me {
            self.local(ep)?;
        } else if self.sends.get(&ep).is_some_and(|s| s.invalid) {
            return Err(McapiError::EndpointInvalid(ep));
        }
        Ok(())
    }

    pub fn delete_endpoint(&mut self, ep: EndpointId) -> Result<()> {
        if u32::from(ep.node) != self.me {
            self.check_node(u32::from(ep.node))?;
            return Err(McapiError::EndpointRemote(ep));
        }
        let e = self.local(ep)?;
        if e.chan.is_some() || e.open_req.is_some() {
            return Err(McapiError::EndpointConnected(ep));
        }
        let mut e = self.endpoints.remove(&ep.port).expect("checked");
        // Pending messages are discarded; their senders get their credit back.
        while let Some(item) = e.pop() {
            let len = item.payload.len();
            self.credit_back(ep.port, item.from, 1, len, &mut e, true);
        }
        for (node, w) in std::mem::take(&mut e.unreported) {
            self.send_credit(node, ep.port, w.entries, w.bytes, true);
        }
        for r in e.waiters.drain(..) {
            self.complete(r, Err(McapiError::EndpointInvalid(ep)));
        }
        Ok(())
    }

    pub fn msg_available(&self, ep: EndpointId) -> Result<usize> {
        Ok(self.local(ep)?.count)
    }

    // ---------------------------------------------------------------- attributes

    pub fn endpoint_timeout(&self, ep: EndpointId) -> Option<Duration> {
        self.local(ep).ok().and_then(|e| e.timeout)
    }

    pub fn set_endpoint_timeout(&mut self, ep: EndpointId, t: Option<Duration>) -> Result<()> {
        self.local_mut(ep)?.timeout = t;
        Ok(())
    }

    /// (type bits, status bits, getters, queued) of a local endpoint, for its attributes.
    pub fn endpoint_facts(&self, ep: EndpointId) -> Result<(u32, u32, u32, usize)> {
        let e = self.local(ep)?;
        let (ty, st) = match &e.chan {
            None => (1, if e.open_req.is_some() { 0x4 } else { 0 }),
            Some(c) => {
                let ty = if c.kind == ChanKind::Packet { 2 } else { 4 };
                let mut st = 0x1;
                if c.open && c.peer_open {
                    st |= 0x2;
                }
                if e.open_req.is_some() {
                    st |= 0x4;
                }
                (ty, st)
            }
        };
        Ok((ty, st, e.getters.len() as u32, e.count))
    }

    // ---------------------------------------------------------------- sending

    fn can_send(&self, dest: EndpointId, len: u64) -> bool {
        let w = self.sends.get(&dest).map(|s| &s.out);
        match w {
            None => true,
            Some(w) => {
                w.entries < self.topo.queue_depth
                    && (w.entries == 0 || w.bytes + len <= self.topo.queue_bytes)
            }
        }
    }

    /// Sends a data frame to `dest` now if its window allows, or parks the request.
    fn send_data(
        &mut self,
        dest: EndpointId,
        header: Header,
        payload: &[&[u8]],
        len: u64,
    ) -> Result<RequestId> {
        let size = len as usize;
        let blocked = self.sends.get(&dest).is_some_and(|s| !s.blocked.is_empty());
        if !blocked && self.can_send(dest, len) {
            self.transmit(dest, header, payload, len);
            return self.done_now(Completion {
                size,
                ..Default::default()
            });
        }
        // The one copy of a send: its bytes wait with the request until the receiver has room.
        let r = self.alloc(ReqKind::Send {
            dest,
            header,
            payload: payload.concat(),
        })?;
        self.sends.entry(dest).or_default().blocked.push_back(r);
        Ok(r)
    }

    fn transmit(&mut self, dest: EndpointId, header: Header, payload: &[&[u8]], len: u64) {
        let s = self.sends.entry(dest).or_default();
        s.out.entries += 1;
        s.out.bytes += len;
        let node = u32::from(dest.node);
        if node == self.me {
            let payload = match header.kind {
                Kind::Scl => Payload::Scalar {
                    width: header.flags,
                    value: header.b,
                },
                _ => Payload::Bytes(payload.concat()),
            };
            self.deliver(self.me, header, payload);
        } else {
            self.write_frame(node, Some(&header), payload);
        }
    }

    /// Credit for `dest` came back: send what waited.
    fn release_blocked(&mut self, dest: EndpointId) {
        loop {
            let Some(s) = self.sends.get(&dest) else {
                return;
            };
            let Some(&r) = s.blocked.front() else { return };
            let len = match self.slots[r.slot as usize].req.as_ref().map(|q| &q.kind) {
                Some(ReqKind::Send {
                    header, payload, ..
                }) => {
                    if header.kind == Kind::Scl {
                        u64::from(header.flags)
                    } else {
                        payload.len() as u64
                    }
                }
                _ => {
                    self.sends
                        .get_mut(&dest)
                        .expect("exists")
                        .blocked
                        .pop_front();
                    continue;
                }
            };
            if !self.can_send(dest, len) {
                return;
            }
            self.sends
                .get_mut(&dest)
                .expect("exists")
                .blocked
                .pop_front();
            let kind = std::mem::replace(&mut self.req(r).expect("live").kind, ReqKind::Done);
            if let ReqKind::Send {
                header, payload, ..
            } = kind
            {
                // A channel closed or a peer lost meanwhile fails the send instead.
                if let Err(e) = self.still_sendable(&header, dest) {
                    self.complete(r, Err(e));
                    continue;
                }
                self.transmit(dest, header, &[&payload], len);
                self.complete(
                    r,
                    Ok(Completion {
                        size: len as usize,
                        ..Default::default()
                    }),
                );
            }
        }
    }

    fn still_sendable(&self, header: &Header, dest: EndpointId) -> Result<()> {
        if matches!(header.kind, Kind::Pkt | Kind::Scl) {
            let e = self
                .endpoints
                .get(&header.src)
                .ok_or(McapiError::ChanNotOpen)?;
            match &e.chan {
                Some(c) if c.peer == dest && !c.peer_closed && !c.closed => {}
                _ => return Err(McapiError::ChanNotOpen),
            }
        }
        if u32::from(dest.node) != self.me {
            if let LinkState::Lost(why) = &self.links[dest.node as usize].state {
                return Err(McapiError::Transmission {
                    node: u32::from(dest.node),
                    why: why.clone(),
                });
            }
        }
        Ok(())
    }

    /// Sends the concatenation of `data`'s slices as one message (gathered by the transport:
    /// one write to a ring, one sendmsg on a socket; no copy into one buffer first).
    pub fn msg_send_i(
        &mut self,
        from: EndpointId,
        to: EndpointId,
        data: &[&[u8]],
        priority: u32,
    ) -> Result<RequestId> {
        if priority > u32::from(MIN_PRIORITY) {
            return Err(McapiError::Priority(priority));
        }
        self.local(from)?;
        self.check_endpoint(to)?;
        let size = gathered_len(data)?;
        if size > MAX_PAYLOAD {
            return Err(McapiError::MsgLimit {
                size,
                max: MAX_PAYLOAD,
            });
        }
        if u32::from(to.node) != self.me {
            self.peer_usable(u32::from(to.node))?;
        }
        let h = Header {
            kind: Kind::Msg,
            flags: priority as u8,
            src: from.port,
            dst: to.port,
            aux: 0,
            len: bad_payload_len(size),
            a: 0,
            b: 0,
        };
        self.send_data(to, h, data, size as u64)
    }

    fn chan_of(&self, h: ChannelHandle) -> Result<&Chan> {
        let e = self
            .endpoints
            .get(&h.port)
            .ok_or(McapiError::ChanInvalid(h.to_raw()))?;
        match &e.chan {
            Some(c)
                if c.kind == h.kind
                    && c.dir == h.dir
                    && c.open
                    && !c.closed
                    && c.generation == h.generation =>
            {
                Ok(c)
            }
            _ => Err(McapiError::ChanInvalid(h.to_raw())),
        }
    }

    /// The local endpoint behind an open handle.
    pub fn handle_endpoint(&self, h: ChannelHandle) -> Result<EndpointId> {
        self.chan_of(h)?;
        Ok(EndpointId::new(self.me, u32::from(h.port)))
    }

    fn chan_send(
        &mut self,
        h: ChannelHandle,
        header: Header,
        data: &[&[u8]],
        len: u64,
    ) -> Result<RequestId> {
        let c = self.chan_of(h)?;
        if c.peer_closed {
            return Err(McapiError::ChanNotOpen);
        }
        let peer = c.peer;
        if u32::from(peer.node) != self.me {
            self.peer_usable(u32::from(peer.node))?;
        }
        let mut header = header;
        header.src = h.port;
        header.dst = peer.port;
        self.send_data(peer, header, data, len)
    }

    /// Sends the concatenation of `data`'s slices as one packet (see `msg_send_i`).
    pub fn pkt_send_i(&mut self, h: ChannelHandle, data: &[&[u8]]) -> Result<RequestId> {
        let size = gathered_len(data)?;
        if size > MAX_PAYLOAD {
            self.chan_of(h)?;
            return Err(McapiError::PktLimit {
                size,
                max: MAX_PAYLOAD,
            });
        }
        let mut header = Header::control(Kind::Pkt, 0, 0);
        header.len = bad_payload_len(size);
        self.chan_send(h, header, data, size as u64)
    }

    pub fn scl_send_i(&mut self, h: ChannelHandle, width: u8, value: u64) -> Result<RequestId> {
        let mut header = Header::control(Kind::Scl, 0, 0);
        header.flags = width;
        header.b = value;
        self.chan_send(h, header, &[], u64::from(width))
    }

    // ---------------------------------------------------------------- receiving

    pub fn msg_recv_i(&mut self, ep: EndpointId) -> Result<RequestId> {
        self.local(ep)?;
        self.recv_i(ep.port, RecvKind::Msg)
    }

    pub fn chan_recv_i(&mut self, h: ChannelHandle, width: Option<u8>) -> Result<RequestId> {
        self.chan_of(h)?;
        let kind = match (h.kind, width) {
            (ChanKind::Packet, _) => RecvKind::Pkt,
            (ChanKind::Scalar, Some(w)) => RecvKind::Scl(w),
            (ChanKind::Scalar, None) => RecvKind::Scl(8),
        };
        self.recv_i(h.port, kind)
    }

    pub fn chan_available(&self, h: ChannelHandle) -> Result<usize> {
        self.chan_of(h)?;
        Ok(self.endpoints[&h.port].count)
    }

    fn recv_i(&mut self, port: u16, kind: RecvKind) -> Result<RequestId> {
        let r = self.alloc(ReqKind::Recv { port, kind })?;
        let e = self.endpoints.get_mut(&port).expect("checked");
        e.waiters.push_back(r);
        self.match_waiters(port);
        Ok(r)
    }

    /// Hands queued items to waiting receive requests, in order.
    fn match_waiters(&mut self, port: u16) {
        loop {
            let Some(e) = self.endpoints.get_mut(&port) else {
                return;
            };
            let Some(&r) = e.waiters.front() else { return };
            let kind = match self.slots[r.slot as usize].req.as_ref().map(|q| &q.kind) {
                Some(ReqKind::Recv { kind, .. }) => *kind,
                _ => {
                    self.endpoints
                        .get_mut(&port)
                        .expect("exists")
                        .waiters
                        .pop_front();
                    continue;
                }
            };
            let e = self.endpoints.get_mut(&port).expect("exists");
            if let (
                RecvKind::Scl(w),
                Some(Item {
                    payload: Payload::Scalar { width, .. },
                    ..
                }),
            ) = (kind, e.front())
            {
                if *width != w {
                    let sent = *width;
                    e.waiters.pop_front();
                    self.complete(r, Err(McapiError::SclSize { sent, asked: w }));
                    continue;
                }
            }
            let Some(item) = e.pop() else {
                // Nothing queued: a closed or lost channel ends the wait.
                if let Some(c) = &e.chan {
                    let peer = c.peer;
                    let err = if c.peer_closed {
                        Some(McapiError::ChanNotOpen)
                    } else if let LinkState::Lost(why) = &self.links[peer.node as usize].state {
                        (u32::from(peer.node) != self.me).then(|| McapiError::Transmission {
                            node: u32::from(peer.node),
                            why: why.clone(),
                        })
                    } else {
                        None
                    };
                    if let Some(err) = err {
                        self.endpoints
                            .get_mut(&port)
                            .expect("exists")
                            .waiters
                            .pop_front();
                        self.complete(r, Err(err));
                        continue;
                    }
                }
                return;
            };
            e.waiters.pop_front();
            let len = item.payload.len();
            let from = item.from;
            let c = match item.payload {
                Payload::Bytes(b) => Completion {
                    size: b.len(),
                    data: Some(b),
                    ..Default::default()
                },
                Payload::Scalar { width, value } => Completion {
                    size: usize::from(width),
                    scalar: Some(value),
                    ..Default::default()
                },
            };
            let mut e = self.endpoints.remove(&port).expect("exists");
            self.credit_back(port, from, 1, len, &mut e, false);
            self.endpoints.insert(port, e);
            self.complete(r, Ok(c));
        }
    }

    /// Receive into the caller's buffer: the next message or packet queued at local `port`
    /// (highest priority first) is copied into `buf`, and its buffer kept for reuse. `None`:
    /// nothing to take yet (the caller waits); receive requests made earlier are served first.
    /// A `buf` too small is `Truncated` and leaves the item queued, whole.
    pub fn recv_into(&mut self, port: u16, buf: &mut [u8]) -> Option<Result<usize>> {
        let Some(e) = self.endpoints.get_mut(&port) else {
            return Some(Err(McapiError::EndpointInvalid(EndpointId::new(
                self.me,
                u32::from(port),
            ))));
        };
        if !e.waiters.is_empty() {
            return None;
        }
        match e.front() {
            Some(Item {
                payload: Payload::Bytes(b),
                ..
            }) => {
                if b.len() > buf.len() {
                    return Some(Err(McapiError::Truncated {
                        size: b.len(),
                        capacity: buf.len(),
                    }));
                }
            }
            Some(_) => return Some(Err(McapiError::Parameter("a scalar is queued here"))),
            None => {
                // Nothing queued: a closed or lost channel ends the wait.
                let c = e.chan.as_ref()?;
                let peer = c.peer;
                if c.peer_closed {
                    return Some(Err(McapiError::ChanNotOpen));
                }
                if let LinkState::Lost(why) = &self.links[peer.node as usize].state {
                    if u32::from(peer.node) != self.me {
                        return Some(Err(McapiError::Transmission {
                            node: u32::from(peer.node),
                            why: why.clone(),
                        }));
                    }
                }
                return None;
            }
        }
        let mut e = self.endpoints.remove(&port).expect("exists");
        let item = e.pop().expect("seen at the front");
        let Payload::Bytes(b) = item.payload else {
            unreachable!("seen as bytes")
        };
        let n = b.len();
        buf[..n].copy_from_slice(&b);
        self.credit_back(port, item.from, 1, n as u64, &mut e, false);
        self.endpoints.insert(port, e);
        self.pool.give(b);
        Some(Ok(n))
    }

    /// Takes back a buffer that a receive handed out, to read a later payload into.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.give(buf);
    }

    /// The application consumed (or dropped) `entries`/`bytes` that `from` sent to `port`.
    fn credit_back(
        &mut self,
        port: u16,
        from: u32,
        entries: u32,
        bytes: u64,
        e: &mut Endpoint,
        now: bool,
    ) {
        let w = e.inflight.entry(from).or_default();
        w.entries = w.entries.saturating_sub(entries);
        w.bytes = w.bytes.saturating_sub(bytes);
        let inflight = (w.entries, w.bytes);
        if from == self.me {
            let dest = EndpointId::new(self.me, u32::from(port));
            if let Some(s) = self.sends.get_mut(&dest) {
                s.out.entries = s.out.entries.saturating_sub(entries);
                s.out.bytes = s.out.bytes.saturating_sub(bytes);
            }
            self.release_blocked(dest);
            return;
        }
        let u = e.unreported.entry(from).or_default();
        // Credit goes back in batches (one frame per quarter window), which halves the frames
        // of a ping-pong. The sender may be blocked if what it has outstanding (as far as we
        // know, all of it once its last frame is consumed) leaves no room for one more entry
        // or for a message of the largest size: then credit goes back as soon as a batch is
        // ready or nothing of the sender's is left here to consume, whichever comes first.
        // (Not at each consumption: a sender that always fills its window would then send one
        // entry per credit, a frame and two wakeups for each.)
        let out_entries = u.entries + inflight.0 + entries;
        let out_bytes = u.bytes + inflight.1 + bytes;
        let was_full = out_entries >= self.topo.queue_depth
            || out_bytes >= self.topo.queue_bytes / 2
            || out_bytes + MAX_PAYLOAD as u64 > self.topo.queue_bytes;
        u.entries += entries;
        u.bytes += bytes;
        let batch =
            u.entries >= (self.topo.queue_depth / 4).max(1) || u.bytes >= self.topo.queue_bytes / 4;
        let drained = inflight.0 == 0;
        if now || batch || (was_full && drained) {
            let (ue, ub) = (u.entries, u.bytes);
            e.unreported.remove(&from);
            self.send_credit(from, port, ue, ub, now || was_full);
        }
    }

    /// Gives `node` credit for `entries`/`bytes` of our `port`. Over TCP a credit that is not
    /// `urgent` (the sender still has room) rides with the next frame to that node, in the
    /// same write and TCP segment (or goes at the next epoll look or sleep, whichever comes
    /// first): a credit frame of its own costs a system call, a segment and a wakeup of the
    /// sender, measured at about one extra segment per eight in a ping-pong.
    fn send_credit(&mut self, node: u32, port: u16, entries: u32, bytes: u64, urgent: bool) {
        if (entries == 0 && bytes == 0) || node == self.me {
            return;
        }
        let mut h = Header::control(Kind::Credit, port, 0);
        h.a = entries;
        h.b = bytes;
        let link = &mut self.links[node as usize];
        if !urgent && link.state == LinkState::Up && matches!(link.io, Io::Tcp(_)) {
            link.deferred.extend_from_slice(&h.encode());
            self.deferred_any = true;
            return;
        }
        self.send_control(node, h);
    }

    /// Writes the control frames that wait to ride with a later frame (see `send_credit`).
    fn flush_deferred(&mut self) {
        if !std::mem::take(&mut self.deferred_any) {
            return;
        }
        for node in 0..self.links.len() {
            if !self.links[node].deferred.is_empty() {
                self.write_frame(node as u32, None, &[]);
            }
        }
    }

    /// An arriving data item for local `port`.
    fn deliver(&mut self, from: u32, h: Header, payload: Payload) {
        let port = h.dst;
        let src = EndpointId::new(from, u32::from(h.src));
        let len = payload.len();
        let Some(e) = self.endpoints.get_mut(&port) else {
            if from == self.me {
                // A local sender: undo its window, fail nothing (the send already completed).
                if let Some(s) = self.sends.get_mut(&EndpointId::new(from, u32::from(port))) {
                    s.out.entries = s.out.entries.saturating_sub(1);
                    s.out.bytes = s.out.bytes.saturating_sub(len);
                }
            } else {
                self.send_control(from, Header::control(Kind::NoEndpoint, port, h.src));
            }
            return;
        };
        if matches!(h.kind, Kind::Pkt | Kind::Scl) {
            let kind = if h.kind == Kind::Pkt {
                ChanKind::Packet
            } else {
                ChanKind::Scalar
            };
            let ok = e.chan.as_ref().is_some_and(|c| {
                c.kind == kind && c.dir == Direction::Receive && c.peer == src && !c.closed
            });
            if !ok {
                // After our close (or for a stale channel): dropped, but credited back.
                if from != self.me {
                    self.send_credit(from, port, 1, len, true);
                } else if let Some(s) = self.sends.get_mut(&EndpointId::new(from, u32::from(port)))
                {
                    s.out.entries = s.out.entries.saturating_sub(1);
                    s.out.bytes = s.out.bytes.saturating_sub(len);
                }
                return;
            }
        }
        if from != self.me {
            let w = e.inflight.entry(from).or_default();
            let u = e
                .unreported
                .get(&from)
                .map(|u| (u.entries, u.bytes))
                .unwrap_or((0, 0));
            let entries = w.entries + u.0;
            if entries + 1 > self.topo.queue_depth
                || (entries > 0 && w.bytes + u.1 + len > self.topo.queue_bytes)
            {
                self.lose(
                    from,
                    PeerLoss::Protocol(format!(
                        "it sent beyond its window of endpoint {port} ({entries} entries unconsumed)"
                    )),
                );
                return;
            }
        }
        let w = e.inflight.entry(from).or_default();
        w.entries += 1;
        w.bytes += len;
        let prio = if h.kind == Kind::Msg {
            h.flags as usize
        } else {
            0
        };
        e.queues[prio].push_back(Item { from, payload });
        e.count += 1;
        self.match_waiters(port);
    }

    // ---------------------------------------------------------------- channels

    pub fn connect_i(
        &mut self,
        send: EndpointId,
        recv: EndpointId,
        kind: ChanKind,
    ) -> Result<RequestId> {
        self.check_endpoint(send)?;
        self.check_endpoint(recv)?;
        if send == recv {
            return Err(McapiError::ChanConnected(send));
        }
        // Local legs are checked now so that the caller sees the error at once.
        for (ep, dir) in [(send, Direction::Send), (recv, Direction::Receive)] {
            if u32::from(ep.node) == self.me {
                let e = self.local(ep)?;
                if e.chan.is_some() {
                    return Err(McapiError::ChanConnected(ep));
                }
                let _ = dir;
            } else {
                self.peer_usable(u32::from(ep.node))?;
            }
        }
        let token = self.token();
        let r = self.alloc(ReqKind::Connect {
            token,
            pair: (send, recv),
            waiting: vec![send, recv],
            ok: Vec::new(),
            err: None,
        })?;
        self.tokens.insert(token, r);
        for (ep, peer, dir) in [
            (send, recv, Direction::Send),
            (recv, send, Direction::Receive),
        ] {
            if u32::from(ep.node) == self.me {
                let res = self.reserve(ep.port, peer, kind, dir);
                self.connect_leg(token, ep, res);
            } else {
                let mut h = Header::control(Kind::Connect, 0, ep.port);
                h.a = peer.to_raw();
                h.flags = chan_flags(kind, dir);
                h.b = token;
                self.send_control(u32::from(ep.node), h);
            }
        }
        Ok(r)
    }

    fn connect_leg(&mut self, token: u64, ep: EndpointId, res: Result<()>) {
        let Some(&r) = self.tokens.get(&token) else {
            return;
        };
        let Some(req) = self.req(r) else { return };
        let ReqKind::Connect {
            pair,
            waiting,
            ok,
            err,
            ..
        } = &mut req.kind
        else {
            return;
        };
        let Some(at) = waiting.iter().position(|w| *w == ep) else {
            return;
        };
        waiting.remove(at);
        match res {
            Ok(()) => ok.push(ep),
            Err(e) => {
                if err.is_none() {
                    *err = Some(e);
                }
            }
        }
        if !waiting.is_empty() {
            return;
        }
        let pair = *pair;
        let ok = std::mem::take(ok);
        let err = err.take();
        self.tokens.remove(&token);
        match err {
            None => self.complete(r, Ok(Completion::default())),
            Some(e) => {
                for ep in ok {
                    self.unreserve(ep, other(pair, ep));
                }
                self.complete(r, Err(e));
            }
        }
    }

    fn unreserve(&mut self, ep: EndpointId, peer: EndpointId) {
        if u32::from(ep.node) == self.me {
            if let Some(e) = self.endpoints.get_mut(&ep.port) {
                if e.chan.as_ref().is_some_and(|c| c.peer == peer && !c.open) {
                    e.chan = None;
                }
            }
        } else {
            let mut h = Header::control(Kind::Disconnect, 0, ep.port);
            h.a = peer.to_raw();
            self.send_control(u32::from(ep.node), h);
        }
    }

    /// Connects local endpoint `port` as one side of a channel with `peer`.
    fn reserve(
        &mut self,
        port: u16,
        peer: EndpointId,
        kind: ChanKind,
        dir: Direction,
    ) -> Result<()> {
        let id = EndpointId::new(self.me, u32::from(port));
        let e = self
            .endpoints
            .get_mut(&port)
            .ok_or(McapiError::EndpointInvalid(id))?;
        if e.chan.is_some() {
            return Err(McapiError::ChanConnected(id));
        }
        e.generation = e.generation.wrapping_add(1) & 0x0FFF;
        e.chan = Some(Chan {
            kind,
            dir,
            peer,
            open: false,
            peer_open: false,
            closed: false,
            peer_closed: false,
            generation: e.generation,
        });
        if e.early_opened.take() == Some(peer) {
            e.chan.as_mut().expect("set").peer_open = true;
        }
        if let Some((r, k, d)) = e.open_req {
            if k != kind || d != dir {
                e.open_req = None;
                let err = if k != kind {
                    McapiError::ChanType(id)
                } else {
                    McapiError::ChanDirection(id)
                };
                self.complete(r, Err(err));
            } else {
                self.announce_open(port);
            }
        }
        Ok(())
    }

    pub fn open_i(&mut self, ep: EndpointId, kind: ChanKind, dir: Direction) -> Result<RequestId> {
        let e = self.local(ep)?;
        if e.open_req.is_some() {
            return Err(McapiError::ChanOpenPending(ep));
        }
        if let Some(c) = &e.chan {
            if c.kind != kind {
                return Err(McapiError::ChanType(ep));
            }
            if c.dir != dir {
                return Err(McapiError::ChanDirection(ep));
            }
            if c.open {
                return Err(McapiError::ChanOpen(ep));
            }
        }
        let r = self.alloc(ReqKind::Open { port: ep.port })?;
        let e = self.endpoints.get_mut(&ep.port).expect("checked");
        e.open_req = Some((r, kind, dir));
        if e.chan.is_some() {
            self.announce_open(ep.port);
        }
        Ok(r)
    }

    /// Our side of `port`'s channel is open: tell the peer, complete if the peer is open too.
    fn announce_open(&mut self, port: u16) {
        let e = self.endpoints.get_mut(&port).expect("exists");
        let c = e.chan.as_mut().expect("connected");
        c.open = true;
        let peer = c.peer;
        if u32::from(peer.node) == self.me {
            if let Some(pe) = self.endpoints.get_mut(&peer.port) {
                let me = EndpointId::new(self.me, u32::from(port));
                match &mut pe.chan {
                    Some(pc) if pc.peer == me => pc.peer_open = true,
                    _ => pe.early_opened = Some(me),
                }
            }
            self.try_finish_open(peer.port);
        } else {
            self.send_control(
                u32::from(peer.node),
                Header::control(Kind::Opened, port, peer.port),
            );
        }
        self.try_finish_open(port);
    }

    fn try_finish_open(&mut self, port: u16) {
        let me = self.me;
        let Some(e) = self.endpoints.get_mut(&port) else {
            return;
        };
        let Some(c) = &e.chan else { return };
        if !(c.open && c.peer_open) {
            return;
        }
        let Some((r, kind, dir)) = e.open_req.take() else {
            return;
        };
        let h = ChannelHandle {
            kind,
            dir,
            port,
            generation: c.generation,
        };
        let _ = me;
        self.complete(
            r,
            Ok(Completion {
                handle: Some(h),
                ..Default::default()
            }),
        );
    }

    pub fn close_i(&mut self, h: ChannelHandle) -> Result<RequestId> {
        self.chan_of(h)?;
        let e = self.endpoints.get_mut(&h.port).expect("checked");
        let c = e.chan.as_mut().expect("checked");
        c.closed = true;
        let peer = c.peer;
        let both = c.peer_closed;
        let dir = c.dir;
        if dir == Direction::Receive {
            // Pending packets are discarded (credited back to the sender).
            let mut e = self.endpoints.remove(&h.port).expect("exists");
            while let Some(item) = e.pop() {
                let len = item.payload.len();
                self.credit_back(h.port, item.from, 1, len, &mut e, true);
            }
            let waiters: Vec<RequestId> = e.waiters.drain(..).collect();
            self.endpoints.insert(h.port, e);
            for r in waiters {
                self.complete(r, Err(McapiError::ChanNotOpen));
            }
        }
        if both {
            self.endpoints.get_mut(&h.port).expect("exists").chan = None;
        }
        if u32::from(peer.node) == self.me {
            self.peer_closed(peer.port, EndpointId::new(self.me, u32::from(h.port)));
        } else {
            self.send_control(
                u32::from(peer.node),
                Header::control(Kind::Closed, h.port, peer.port),
            );
        }
        self.done_now(Completion::default())
    }

    fn peer_closed(&mut self, port: u16, from: EndpointId) {
        let Some(e) = self.endpoints.get_mut(&port) else {
            return;
        };
        let Some(c) = &mut e.chan else { return };
        if c.peer != from {
            return;
        }
        c.peer_closed = true;
        if c.closed {
            e.chan = None;
        }
        // Sends waiting on the closed receiver fail.
        let dest = from;
        let blocked: Vec<RequestId> = self
            .sends
            .get_mut(&dest)
            .map(|s| s.blocked.drain(..).collect())
            .unwrap_or_default();
        for r in blocked {
            self.complete(r, Err(McapiError::ChanNotOpen));
        }
        self.match_waiters(port);
    }

    // ---------------------------------------------------------------- frames in

    fn dispatch(&mut self, from: u32, h: Header, payload: Vec<u8>) {
        match h.kind {
            Kind::Msg | Kind::Pkt => self.deliver(from, h, Payload::Bytes(payload)),
            Kind::Scl => self.deliver(
                from,
                h,
                Payload::Scalar {
                    width: h.flags,
                    value: h.b,
                },
            ),
            Kind::Credit => {
                let dest = EndpointId::new(from, u32::from(h.src));
                if let Some(s) = self.sends.get_mut(&dest) {
                    s.out.entries = s.out.entries.saturating_sub(h.a);
                    s.out.bytes = s.out.bytes.saturating_sub(h.b);
                }
                self.release_blocked(dest);
            }
            Kind::Get => {
                if let Some(e) = self.endpoints.get_mut(&h.dst) {
                    e.getters.insert(from);
                    let mut r = Header::control(Kind::GetReply, h.dst, h.dst);
                    r.b = h.b;
                    r.aux = crate::status::Status::Success.code() as u16;
                    self.send_control(from, r);
                } else {
                    let v = self.remote_gets.entry(h.dst).or_default();
                    if v.len() < 1024 {
                        v.push((from, h.b));
                    }
                }
            }
            Kind::GetReply => {
                if let Some(r) = self.tokens.remove(&h.b) {
                    let ep = EndpointId::new(from, u32::from(h.dst));
                    if let Some(s) = self.sends.get_mut(&ep) {
                        s.invalid = false;
                    }
                    self.complete(
                        r,
                        Ok(Completion {
                            endpoint: Some(ep),
                            ..Default::default()
                        }),
                    );
                }
            }
            Kind::NoEndpoint => {
                let dest = EndpointId::new(from, u32::from(h.src));
                let s = self.sends.entry(dest).or_default();
                s.invalid = true;
                s.out = Window::default();
                let blocked: Vec<RequestId> = s.blocked.drain(..).collect();
                for r in blocked {
                    self.complete(r, Err(McapiError::EndpointInvalid(dest)));
                }
            }
            Kind::Connect => {
                let peer = EndpointId::from_raw(h.a);
                let res = match (peer, flags_chan(h.flags)) {
                    (Some(peer), Some((kind, dir))) => self.reserve(h.dst, peer, kind, dir),
                    _ => Err(McapiError::Parameter("connect frame")),
                };
                let mut r = Header::control(Kind::ConnectReply, h.dst, 0);
                r.b = h.b;
                r.aux = match &res {
                    Ok(()) => crate::status::Status::Success,
                    Err(e) => e.status(),
                }
                .code() as u16;
                self.send_control(from, r);
            }
            Kind::ConnectReply => {
                let ep = EndpointId::new(from, u32::from(h.src));
                let res = if u32::from(h.aux) == crate::status::Status::Success.code() {
                    Ok(())
                } else if u32::from(h.aux) == crate::status::Status::ErrChanConnected.code() {
                    Err(McapiError::ChanConnected(ep))
                } else {
                    Err(McapiError::EndpointInvalid(ep))
                };
                self.connect_leg(h.b, ep, res);
            }
            Kind::Disconnect => {
                if let Some(peer) = EndpointId::from_raw(h.a) {
                    self.unreserve(EndpointId::new(self.me, u32::from(h.dst)), peer);
                }
            }
            Kind::Opened => {
                let me = EndpointId::new(from, u32::from(h.src));
                if let Some(e) = self.endpoints.get_mut(&h.dst) {
                    match &mut e.chan {
                        Some(c) if c.peer == me => c.peer_open = true,
                        _ => e.early_opened = Some(me),
                    }
                    self.try_finish_open(h.dst);
                }
            }
            Kind::Closed => self.peer_closed(h.dst, EndpointId::new(from, u32::from(h.src))),
            Kind::Bye => self.lose(from, PeerLoss::Finalized),
        }
    }

    // ---------------------------------------------------------------- links

    /// Fails at once if `node` is lost and no new incarnation can be reached; starts contact.
    fn peer_usable(&mut self, node: u32) -> Result<()> {
        let link = &mut self.links[node as usize];
        match &link.state {
            LinkState::Lost(why) => {
                if link.after_loss {
                    return Err(McapiError::Transmission {
                        node,
                        why: why.clone(),
                    });
                }
                // A replacement may have taken the id: try once.
                let why = why.clone();
                link.after_loss = true;
                link.retry_at = Instant::now();
                self.try_connect(node);
                match &self.links[node as usize].state {
                    LinkState::Lost(_) => Err(McapiError::Transmission { node, why }),
                    _ => Ok(()),
                }
            }
            LinkState::Idle => {
                self.try_connect(node);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn send_control(&mut self, node: u32, h: Header) {
        if node == self.me {
            return;
        }
        self.write_frame(node, Some(&h), &[]);
    }

    /// Writes a frame to `node` (after the control frames deferred for it; `None`: only
    /// those), at once if nothing is queued before it, else queued.
    fn write_frame(&mut self, node: u32, h: Option<&Header>, payload: &[&[u8]]) {
        let me = self.me;
        let link = &mut self.links[node as usize];
        if matches!(link.state, LinkState::Lost(_)) {
            return;
        }
        let hb = h.map(Header::encode);
        let hb: &[u8] = hb.as_ref().map_or(&[], |b| b);
        let deferred = std::mem::take(&mut link.deferred);
        let mut slots: [&[u8]; MAX_SLICES + 2] = [&[]; MAX_SLICES + 2];
        slots[0] = &deferred[..];
        slots[1] = hb;
        slots[2..2 + payload.len()].copy_from_slice(payload);
        let bufs = &slots[..2 + payload.len()];
        if link.state == LinkState::Up && !link.has_out() {
            match link.write_now(me, bufs) {
                Ok(n) => link.enqueue_after(bufs, n),
                Err(e) => {
                    let why = PeerLoss::Died;
                    tracing::warn!(node, "write to node {node} failed: {e}");
                    self.lose(node, why);
                }
            }
        } else {
            link.enqueue_after(bufs, 0);
            if link.state == LinkState::Idle {
                self.try_connect(node);
            }
        }
        // The buffer's capacity is kept for the next deferral.
        let link = &mut self.links[node as usize];
        if link.deferred.is_empty() {
            let mut d = deferred;
            d.clear();
            link.deferred = d;
        }
    }

    /// Starts or continues contact with `node`.
    fn try_connect(&mut self, node: u32) {
        let now = Instant::now();
        let me = self.me;
        let link = &mut self.links[node as usize];
        if link.state == LinkState::Up || now < link.retry_at {
            return;
        }
        match &mut self.transport {
            Transport::Shm { .. } => {
                let tag = crate::auth::segment_tag(&self.topo.secret, &self.fingerprint, node);
                if matches!(link.io, Io::None) {
                    match Segment::open_peer(
                        &self.topo.shm_dir,
                        &self.topo.job,
                        node,
                        self.topo.nodes,
                        self.topo.shm_ring_bytes,
                        &tag,
                    ) {
                        Ok(Some((seg, pid, inc))) => {
                            let pidfd = Pidfd::open(pid);
                            let dead = pidfd.as_ref().is_none_or(|p| p.exited());
                            let stale =
                                matches!(link.state, LinkState::Lost(_)) && inc == link.lost_inc;
                            if dead || stale {
                                self.retry_later(node);
                                return;
                            }
                            seg.announce(me, self.incarnation);
                            seg.ring_doorbell_force();
                            link.io = Io::Shm { peer: seg, pidfd };
                            link.peer_inc = inc;
                            link.state = LinkState::Connecting;
                        }
                        Ok(None) => {
                            self.retry_later(node);
                            return;
                        }
                        Err(e) => {
                            tracing::error!("node {node}: {e}");
                            self.retry_later(node);
                            return;
                        }
                    }
                }
                let link = &mut self.links[node as usize];
                if let Io::Shm { peer, .. } = &link.io {
                    if peer.accepted(me, self.incarnation) {
                        link.accepted = true;
                        link.state = LinkState::Up;
                        link.after_loss = false;
                        link.backoff_ms = 1;
                        let _ = link.flush(me);
                    }
                }
            }
            Transport::Tcp {
                handshakes, epoll, ..
            } => {
                let connected = matches!(&link.io, Io::Tcp(_));
                if connected || handshakes.iter().any(|h| h.target == Some(node)) {
                    return;
                }
                match tcp::connect_start(self.topo.addresses[node as usize]) {
                    Ok(s) => {
                        watch_handshake(epoll, &s);
                        handshakes.push(Handshake::connector(s, node));
                        if link.state == LinkState::Idle {
                            link.state = LinkState::Connecting;
                        }
                    }
                    Err(_) => self.retry_later(node),
                }
            }
        }
    }

    fn retry_later(&mut self, node: u32) {
        let link = &mut self.links[node as usize];
        if link.after_loss {
            // A replacement is not reachable: the operations waiting on it fail.
            link.after_loss = false;
            let why = match &link.state {
                LinkState::Lost(w) => w.clone(),
                _ => PeerLoss::Died,
            };
            link.state = LinkState::Lost(why.clone());
            self.fail_peer_ops(node, &why);
            return;
        }
        link.backoff_ms = (link.backoff_ms * 2).min(50);
        link.retry_at = Instant::now() + Duration::from_millis(link.backoff_ms);
        if link.state == LinkState::Idle {
            link.state = LinkState::Connecting;
        }
    }

    /// A TCP connection to or from `node` (incarnation `inc`) passed the handshake: it carries
    /// frames both ways from now on.
    fn tcp_established(
        &mut self,
        node: u32,
        inc: u64,
        stream: std::net::TcpStream,
        outgoing: bool,
    ) {
        tcp::tune(&stream, self.topo.tcp_dead_after);
        // Blocking, for a direct read by a waiting thread (every other call says MSG_DONTWAIT);
        // the timeout bounds that read.
        if stream.set_nonblocking(false).is_err()
            || stream.set_read_timeout(Some(DIRECT_READ)).is_err()
        {
            let _ = stream.set_nonblocking(true);
            // Without the timeout a direct read could block for good: never do one.
            self.no_direct_read = true;
        }
        let link = &mut self.links[node as usize];
        if link.peer_inc != 0 && link.peer_inc != inc {
            // A new incarnation: the old one is gone (fail what waited on it, drop its state).
            if !matches!(link.state, LinkState::Lost(_)) {
                self.lose(node, PeerLoss::Died);
            }
            let link = &mut self.links[node as usize];
            let queued = std::mem::take(&mut link.out);
            link.reset();
            link.out = queued;
        } else if matches!(link.state, LinkState::Lost(_)) && link.lost_inc == inc {
            return; // the dead incarnation itself: stale
        }
        let Transport::Tcp {
            handshakes, epoll, ..
        } = &mut self.transport
        else {
            return;
        };
        if !outgoing {
            // The peer's dial won (it is the lower id, or ours was refused): ours is moot.
            handshakes.retain(|h| h.target != Some(node));
        }
        // The handshake registered this socket; from now on it is the link's.
        if let Err(e) = epoll::modify(
            &**epoll,
            &stream,
            epoll::EventData::new_u64(TOKEN_LINK | u64::from(node)),
            epoll::EventFlags::IN,
        ) {
            tracing::error!("epoll: cannot watch the connection to node {node}: {e}");
            return;
        }
        let link = &mut self.links[node as usize];
        link.peer_inc = inc;
        // A connection of the same incarnation is replaced only when the link was down, so
        // nothing half-written or half-read of the old one remains.
        link.inbuf.clear();
        link.in_start = 0;
        link.io = Io::Tcp(Arc::new(stream));
        link.conn += 1;
        link.reader_busy = false;
        link.state = LinkState::Up;
        link.after_loss = false;
        link.backoff_ms = 1;
        // Bytes may have come before the socket was the link's.
        link.readable = true;
        link.watch_out = false;
        let me = self.me;
        let _ = link.flush(me);
        tracing::debug!(me = self.me, node, outgoing, "connection up");
    }

    /// Declares `node` lost: every operation waiting on it fails with `Transmission`.
    pub fn lose(&mut self, node: u32, why: PeerLoss) {
        let link = &mut self.links[node as usize];
        if matches!(link.state, LinkState::Lost(_)) && link.lost_inc == link.peer_inc {
            return;
        }
        match &why {
            PeerLoss::Finalized => tracing::info!(me = self.me, node, "node {node} finalized"),
            _ => tracing::warn!(me = self.me, node, "node {node} lost: {why}"),
        }
        link.lost_inc = link.peer_inc;
        link.state = LinkState::Lost(why.clone());
        link.reset();
        link.after_loss = false;
        self.fail_peer_ops(node, &why);
    }

    fn fail_peer_ops(&mut self, node: u32, why: &PeerLoss) {
        let err = McapiError::Transmission {
            node,
            why: why.clone(),
        };
        // Sends to its endpoints.
        let dests: Vec<EndpointId> = self
            .sends
            .keys()
            .filter(|d| u32::from(d.node) == node)
            .copied()
            .collect();
        for d in dests {
            let s = self.sends.remove(&d).expect("listed");
            for r in s.blocked {
                self.complete(r, Err(err.clone()));
            }
        }
        // Gets and connects addressed to it.
        let mut fail = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(req) = &s.req {
                let hit = match &req.kind {
                    ReqKind::Get { node: n, token, .. } if *n == node => Some(*token),
                    _ => None,
                };
                if let Some(t) = hit {
                    fail.push((
                        RequestId {
                            slot: i as u32,
                            generation: s.generation,
                        },
                        t,
                    ));
                }
            }
        }
        for (r, t) in fail {
            self.tokens.remove(&t);
            self.complete(r, Err(err.clone()));
        }
        let legs: Vec<(u64, EndpointId)> = self
            .slots
            .iter()
            .filter_map(|s| match s.req.as_ref().map(|r| &r.kind) {
                Some(ReqKind::Connect { token, waiting, .. }) => Some((*token, waiting.clone())),
                _ => None,
            })
            .flat_map(|(t, w)| w.into_iter().map(move |ep| (t, ep)))
            .filter(|(_, ep)| u32::from(ep.node) == node)
            .collect();
        for (t, ep) in legs {
            self.connect_leg(t, ep, Err(err.clone()));
        }
        // Remote gets that waited here are forgotten; its credits in our queues are dropped
        // (what it sent and we hold stays deliverable).
        for v in self.remote_gets.values_mut() {
            v.retain(|(n, _)| *n != node);
        }
        let ports: Vec<u16> = self.endpoints.keys().copied().collect();
        for p in ports {
            let e = self.endpoints.get_mut(&p).expect("listed");
            e.unreported.remove(&node);
            e.getters.remove(&node);
            let peer_here = e
                .chan
                .as_ref()
                .is_some_and(|c| u32::from(c.peer.node) == node);
            if peer_here {
                // A pending open with a dead peer fails; a receiver drains then fails.
                if let Some((r, _, _)) = e.open_req.take() {
                    self.complete(r, Err(err.clone()));
                }
                let e = self.endpoints.get_mut(&p).expect("listed");
                if let Some(c) = &mut e.chan {
                    if c.dir == Direction::Send {
                        c.peer_closed = true;
                    }
                }
                self.match_waiters(p);
            }
        }
        self.completed = true;
    }

    // ---------------------------------------------------------------- progress

    /// Moves bytes: accepts and advances connections, writes what is queued, reads and
    /// dispatches what arrived. Never blocks. Over TCP it asks epoll what arrived when
    /// `eager`, or when it was last asked more than `LAZY_POLL` ago.
    pub fn progress(&mut self, eager: bool) {
        match &self.transport {
            Transport::Shm { .. } => self.progress_shm_links(),
            Transport::Tcp { .. } => {
                self.poll_events(eager);
                self.progress_tcp_links();
            }
        }
        let me = self.me;
        let own = match &self.transport {
            Transport::Shm { own, .. } => Some(own.clone()),
            _ => None,
        };
        for node in 0..self.topo.nodes {
            if node == me {
                continue;
            }
            let link = &mut self.links[node as usize];
            if link.state == LinkState::Up && link.has_out() {
                if let Err(e) = link.flush(me) {
                    tracing::warn!("write to node {node}: {e}");
                    self.lose(node, loss_of(&e));
                    continue;
                }
            }
            let link = &mut self.links[node as usize];
            let readable = match &link.io {
                Io::Tcp(_) => link.readable && !link.reader_busy,
                _ => link.inbound,
            };
            if !readable {
                continue;
            }
            match link.fill(me, own.as_deref(), node, &mut self.pool) {
                Ok(true) => {}
                Ok(false) => {
                    self.drain_frames(node);
                    if !matches!(self.links[node as usize].state, LinkState::Lost(_)) {
                        self.lose(node, PeerLoss::Died);
                    }
                    continue;
                }
                Err(e) => {
                    tracing::debug!("read from node {node}: {e}");
                    self.drain_frames(node);
                    self.lose(node, loss_of(&e));
                    continue;
                }
            }
            self.drain_frames(node);
        }
        if matches!(self.transport, Transport::Shm { .. })
            && clock::coarse_ms().saturating_sub(self.last_liveness) > LIVENESS_EVERY_MS
        {
            self.check_liveness();
        }
    }

    fn drain_frames(&mut self, node: u32) {
        loop {
            match self.links[node as usize].next_frame(&mut self.pool) {
                Ok(Some((h, payload))) => self.dispatch(node, h, payload),
                Ok(None) => return,
                Err(e) => {
                    self.lose(node, PeerLoss::Protocol(e.to_string()));
                    return;
                }
            }
            if matches!(self.links[node as usize].state, LinkState::Lost(_)) {
                return;
            }
        }
    }

    fn progress_shm_links(&mut self) {
        let Transport::Shm { own, .. } = &self.transport else {
            return;
        };
        let own = own.clone();
        // Producers asking to attach to our rings.
        for p in 0..self.topo.nodes {
            if p == self.me {
                continue;
            }
            if let Some(inc) = own.announced(p) {
                self.accept_producer(&own, p, inc);
            }
        }
        // Our pending attachments.
        for node in 0..self.topo.nodes {
            if node == self.me {
                continue;
            }
            let link = &self.links[node as usize];
            if (link.state == LinkState::Connecting
                || (link.has_out()
                    && link.state != LinkState::Up
                    && !matches!(link.state, LinkState::Lost(_))))
                || (matches!(link.state, LinkState::Lost(_)) && link.after_loss)
            {
                self.try_connect(node);
            }
        }
    }

    fn accept_producer(&mut self, own: &Segment, p: u32, inc: u64) {
        let tag = crate::auth::segment_tag(&self.topo.secret, &self.fingerprint, p);
        let link = &mut self.links[p as usize];
        if link.inbound && link.peer_inc != inc && link.peer_inc != 0 {
            // The old producer of this id is gone: drain what it completed, then fail it.
            self.drain_frames(p);
            self.lose(p, PeerLoss::Died);
        }
        let link = &mut self.links[p as usize];
        // Map the producer's segment (for its pid and doorbell) if we have not.
        let need_map = match &link.io {
            Io::Shm { peer, .. } => peer.incarnation() != inc,
            _ => true,
        };
        if need_map {
            match Segment::open_peer(
                &self.topo.shm_dir,
                &self.topo.job,
                p,
                self.topo.nodes,
                self.topo.shm_ring_bytes,
                &tag,
            ) {
                Ok(Some((seg, pid, seg_inc))) if seg_inc == inc => {
                    let pidfd = Pidfd::open(pid);
                    let queued = std::mem::take(&mut link.out);
                    link.reset();
                    link.out = queued;
                    seg.announce(self.me, self.incarnation);
                    seg.ring_doorbell_force();
                    link.io = Io::Shm { peer: seg, pidfd };
                    link.peer_inc = inc;
                    link.state = LinkState::Connecting;
                }
                Ok(_) => return, // not ready yet, or a stale announcement
                Err(e) => {
                    tracing::error!("node {p} announced itself but: {e}");
                    return;
                }
            }
        }
        own.accept(p, inc);
        let link = &mut self.links[p as usize];
        link.inbuf.clear();
        link.in_start = 0;
        link.inbound = true;
        link.peer_inc = inc;
        if link.state != LinkState::Up {
            link.state = LinkState::Connecting;
        }
        self.try_connect(p);
        let _ = own;
    }

    /// TCP: asks epoll (without waiting) what happened, if `eager` or not asked for a while.
    fn poll_events(&mut self, eager: bool) {
        let Transport::Tcp { polled_at, .. } = &mut self.transport else {
            return;
        };
        let now = clock::coarse_ms();
        if !eager && now.saturating_sub(*polled_at) < LAZY_POLL_MS {
            return;
        }
        *polled_at = now;
        self.flush_deferred();
        let Transport::Tcp { epoll, .. } = &self.transport else {
            return;
        };
        let set = epoll.clone();
        let mut buf = [std::mem::MaybeUninit::<epoll::Event>::uninit(); EVENTS_PER_WAIT];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match epoll::wait(&*set, &mut buf, Some(&zero)) {
            Ok((events, _)) => {
                for ev in events.iter() {
                    self.note_event(ev.data.u64());
                }
            }
            Err(e) => tracing::warn!("epoll_wait: {e}"),
        }
    }

    /// TCP: what a sleeper's epoll_wait reported (token of each event), noted for the next
    /// progress pass, which then reads those sockets and no others.
    pub fn note_events(&mut self, tokens: &[u64]) {
        if let Transport::Tcp { polled_at, .. } = &mut self.transport {
            *polled_at = clock::coarse_ms();
        }
        for &t in tokens {
            self.note_event(t);
        }
    }

    fn note_event(&mut self, token: u64) {
        match token {
            TOKEN_LISTENER => {
                if let Transport::Tcp { accept_ready, .. } = &mut self.transport {
                    *accept_ready = true;
                }
            }
            t if t & TOKEN_LINK != 0 => {
                if let Some(l) = self.links.get_mut((t & 0xffff_ffff) as usize) {
                    l.readable = true;
                }
            }
            // The eventfd (drained by the sleeper) and handshakes (advanced on every pass).
            _ => {}
        }
    }

    fn progress_tcp_links(&mut self) {
        let me = self.me;
        let nodes = self.topo.nodes;
        let incarnation = self.incarnation;
        let fingerprint = self.fingerprint;
        let topo = self.topo.clone();
        let mut established = Vec::new();
        let mut failed = Vec::new();
        let idle = match &self.transport {
            Transport::Tcp {
                handshakes,
                accept_ready,
                ..
            } => handshakes.is_empty() && !accept_ready,
            Transport::Shm { .. } => return,
        };
        // Connections we hold (incarnation of the peer, 0 if none): for `crossing`.
        let connected: Vec<u64> = if idle {
            Vec::new() // the common case once a job is up: no handshake to advance
        } else {
            self.links
                .iter()
                .map(|l| match (&l.state, &l.io) {
                    (LinkState::Up, Io::Tcp(_)) => l.peer_inc,
                    _ => 0,
                })
                .collect()
        };
        if !idle {
            let Transport::Tcp {
                listener,
                handshakes,
                epoll,
                accept_ready,
                ..
            } = &mut self.transport
            else {
                return;
            };
            if std::mem::take(accept_ready) {
                accept_all(listener, handshakes, epoll);
            }
            let dialling: Vec<u32> = handshakes.iter().filter_map(|h| h.target).collect();
            let crossing = |from: u32, inc: u64| {
                let shared = connected
                    .get(from as usize)
                    .is_some_and(|&i| i != 0 && i == inc);
                shared || (me < from && dialling.contains(&from))
            };
            let cx = HsContext {
                me,
                incarnation,
                nodes,
                fingerprint: &fingerprint,
                secret: &topo.secret,
                crossing: &crossing,
            };
            let mut i = 0;
            while i < handshakes.len() {
                match handshakes[i].advance(&cx) {
                    Outcome::Pending => i += 1,
                    Outcome::Established { peer, incarnation } => {
                        let h = handshakes.remove(i);
                        let outgoing = h.target.is_some();
                        established.push((peer, incarnation, h.into_stream(), outgoing));
                    }
                    Outcome::Failed { peer, why, refused } => {
                        let h = handshakes.remove(i);
                        if let Some(t) = h.target {
                            failed.push((t, why, refused));
                        } else if refused == Some(crate::auth::code::CROSSING) {
                            tracing::debug!(
                                "node {peer:?} dialled while we dial it: ours is used instead"
                            );
                        } else {
                            tracing::warn!(
                                "refused a connection from {:?} (node {:?}): {why}",
                                h.from_addr,
                                peer
                            );
                        }
                    }
                }
            }
        }
        for (peer, inc, stream, outgoing) in established {
            self.tcp_established(peer, inc, stream, outgoing);
        }
        for (node, why, refused) in failed {
            if refused == Some(crate::auth::code::WRONG_TOPOLOGY) {
                tracing::error!("node {node} runs another topology: {why}");
            } else if refused == Some(crate::auth::code::CROSSING) {
                tracing::debug!("node {node} dials us at the same time: we use its connection");
            } else {
                tracing::debug!("connect to node {node}: {why}");
            }
            let link = &mut self.links[node as usize];
            if link.state != LinkState::Up {
                self.retry_later(node);
            }
        }
        // Links with queued frames and no connection: dial.
        for node in 0..nodes {
            if node == me {
                continue;
            }
            let link = &self.links[node as usize];
            let wants = link.has_out()
                && link.state != LinkState::Up
                && !matches!(link.state, LinkState::Lost(_));
            if wants
                || link.state == LinkState::Connecting
                || (matches!(link.state, LinkState::Lost(_)) && link.after_loss)
            {
                self.try_connect(node);
            }
        }
    }

    /// Shared memory: peers whose process exited are lost (after draining what they wrote).
    pub fn check_liveness(&mut self) {
        if !matches!(self.transport, Transport::Shm { .. }) {
            return; // TCP: the connection's end tells, when read
        }
        self.last_liveness = clock::coarse_ms();
        for node in 0..self.topo.nodes {
            if node == self.me {
                continue;
            }
            let link = &self.links[node as usize];
            let dead = match &link.io {
                Io::Shm { pidfd: Some(p), .. } => p.exited(),
                // TCP: the connection's end (after the frames before it) tells, when read.
                _ => false,
            };
            if dead && !matches!(self.links[node as usize].state, LinkState::Lost(_)) {
                let own = match &self.transport {
                    Transport::Shm { own, .. } => Some(own.clone()),
                    _ => None,
                };
                let link = &mut self.links[node as usize];
                if link.inbound {
                    let _ = link.fill(self.me, own.as_deref(), node, &mut self.pool);
                }
                self.drain_frames(node);
                self.lose(node, PeerLoss::Died);
            }
        }
    }

    /// How to sleep until something may have happened. Over TCP, a thread that waits alone
    /// (`alone`: no other thread of the node waits, and this wait did not already spend a
    /// direct read) on a node with one connection, nothing to write, no handshake and no
    /// connection waiting to be accepted, blocks in recv(2) on that connection: the peer's
    /// next frame wakes it straight, where epoll_wait and a read cost a second system call
    /// and the epoll wakeup path (together about 1.5 µs of a 15 µs loopback round trip).
    pub fn sleep_plan(&mut self, alone: bool) -> SleepPlan {
        self.flush_deferred();
        if alone && !self.no_direct_read {
            if let Some(node) = self.direct_read_link() {
                let link = &mut self.links[node as usize];
                let stream = link.stream().expect("a connected link").clone();
                link.prepare_inbuf();
                link.reader_busy = true;
                return SleepPlan::Read {
                    node,
                    stream,
                    buf: std::mem::take(&mut link.inbuf),
                    conn: link.conn,
                };
            }
        }
        match &self.transport {
            Transport::Shm { own, .. } => SleepPlan::Shm {
                own: own.clone(),
                seq: own.prepare_sleep(),
            },
            Transport::Tcp { epoll, .. } => {
                let epoll = epoll.clone();
                // Writability matters only for links with frames waiting to go out.
                for (node, l) in self.links.iter_mut().enumerate() {
                    let want = l.has_out();
                    let Some(s) = l.stream().filter(|_| want != l.watch_out) else {
                        continue;
                    };
                    let flags = if want {
                        epoll::EventFlags::IN | epoll::EventFlags::OUT
                    } else {
                        epoll::EventFlags::IN
                    };
                    let data = epoll::EventData::new_u64(TOKEN_LINK | node as u64);
                    match epoll::modify(&*epoll, s, data, flags) {
                        Ok(()) => l.watch_out = want,
                        Err(e) => tracing::warn!("epoll: {e}"),
                    }
                }
                SleepPlan::Tcp { epoll }
            }
        }
    }

    /// The one link a waiting thread may read directly, if the node is in that state.
    fn direct_read_link(&self) -> Option<u32> {
        let Transport::Tcp {
            handshakes,
            accept_ready,
            ..
        } = &self.transport
        else {
            return None;
        };
        if !handshakes.is_empty() || *accept_ready {
            return None;
        }
        let mut found = None;
        for (node, l) in self.links.iter().enumerate() {
            if l.stream().is_none() {
                continue;
            }
            if found.is_some()
                || l.state != LinkState::Up
                || l.has_out()
                || !l.deferred.is_empty()
                || l.readable
                || l.reader_busy
            {
                return None;
            }
            found = Some(node as u32);
        }
        found
    }

    /// A direct read (`SleepPlan::Read`) came back with `result`: its bytes join the link's
    /// input (unless the link changed meanwhile: they go with the old connection) and the
    /// frames in them are dispatched.
    pub fn direct_read_done(
        &mut self,
        node: u32,
        mut buf: Vec<u8>,
        conn: u64,
        result: std::io::Result<usize>,
    ) {
        let link = &mut self.links[node as usize];
        if link.conn != conn {
            return;
        }
        link.reader_busy = false;
        let spare = buf.capacity() - buf.len();
        let end = match result {
            Ok(0) => Some(PeerLoss::Died),
            Ok(n) => {
                // SAFETY: recv(2) initialized the first n bytes of the spare capacity.
                unsafe { buf.set_len(buf.len() + n) };
                // A full buffer may have left bytes behind: look again at the next pass.
                link.readable = n == spare;
                None
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                None
            }
            Err(e) => {
                tracing::debug!("read from node {node}: {e}");
                Some(loss_of(&e))
            }
        };
        link.inbuf = buf;
        link.in_start = 0;
        self.drain_frames(node);
        if let Some(why) = end {
            if !matches!(self.links[node as usize].state, LinkState::Lost(_)) {
                self.lose(node, why);
            }
        }
    }

    /// Finalize: flush what is queued (the caller keeps making progress until this is true).
    pub fn flushed(&self) -> bool {
        self.links
            .iter()
            .all(|l| !l.has_out() || l.state != LinkState::Up)
    }

    pub fn say_bye(&mut self) {
        for node in 0..self.topo.nodes {
            if node != self.me && self.links[node as usize].state == LinkState::Up {
                self.write_frame(node, Some(&Header::control(Kind::Bye, 0, 0)), &[]);
                let me = self.me;
                let _ = self.links[node as usize].flush(me);
            }
        }
    }

    pub fn link_state(&self, node: u32) -> Option<&LinkState> {
        self.links.get(node as usize).map(|l| &l.state)
    }
}

fn other(pair: (EndpointId, EndpointId), ep: EndpointId) -> EndpointId {
    if pair.0 == ep {
        pair.1
    } else {
        pair.0
    }
}

fn chan_flags(kind: ChanKind, dir: Direction) -> u8 {
    (if kind == ChanKind::Packet { 1 } else { 2 }) | (if dir == Direction::Send { 4 } else { 8 })
}

fn flags_chan(f: u8) -> Option<(ChanKind, Direction)> {
    let kind = match f & 3 {
        1 => ChanKind::Packet,
        2 => ChanKind::Scalar,
        _ => return None,
    };
    let dir = match f & 12 {
        4 => Direction::Send,
        8 => Direction::Receive,
        _ => return None,
    };
    Some((kind, dir))
}

/// Why a link whose socket failed with `e` is gone: a timeout (keepalive or
/// `TCP_USER_TIMEOUT`) or an unreachable network says nothing of the peer's process.
fn loss_of(e: &std::io::Error) -> PeerLoss {
    match e.raw_os_error() {
        Some(libc::ETIMEDOUT | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN) => {
            PeerLoss::Unreachable
        }
        _ => PeerLoss::Died,
    }
}

/// Accepts every waiting connection as a handshake. When the table is full, the oldest
/// connection still waiting for a hello makes room (so a flood of silent clients delays a
/// real peer by one round trip instead of locking it out); if there is none, it is refused.
fn accept_all(listener: &TcpListener, handshakes: &mut Vec<Handshake>, epoll: &OwnedFd) {
    loop {
        match listener.accept() {
            Ok((s, addr)) => {
                if handshakes.len() >= tcp::MAX_HANDSHAKES {
                    let oldest_silent = handshakes
                        .iter()
                        .enumerate()
                        .filter(|(_, h)| h.awaits_hello())
                        .min_by_key(|(_, h)| h.deadline())
                        .map(|(i, _)| i);
                    match oldest_silent {
                        Some(i) => {
                            let h = handshakes.swap_remove(i);
                            tracing::warn!(
                                "dropping the silent connection from {:?}: {} handshakes already",
                                h.from_addr,
                                tcp::MAX_HANDSHAKES
                            );
                        }
                        None => {
                            tracing::warn!(
                                "refusing {addr}: {} handshakes already",
                                handshakes.len()
                            );
                            continue;
                        }
                    }
                }
                let _ = s.set_nonblocking(true);
                watch_handshake(epoll, &s);
                handshakes.push(Handshake::acceptor(s, addr));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => {
                tracing::warn!("accept: {e}");
                break;
            }
        }
    }
}

/// Adds a handshake's socket to the epoll set, edge-triggered both ways: every pass advances
/// all handshakes, so an edge only has to wake a sleeper. (A socket that is dropped leaves
/// the set by itself: it has no duplicate descriptor.)
fn watch_handshake(epoll: &OwnedFd, s: &std::net::TcpStream) {
    let flags = epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::ET;
    if let Err(e) = epoll::add(epoll, s, epoll::EventData::new_u64(TOKEN_HANDSHAKE), flags) {
        tracing::warn!("epoll: cannot watch a handshake: {e}");
    }
}
