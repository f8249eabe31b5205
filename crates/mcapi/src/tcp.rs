//! The TCP transport's sockets: a listener, non-blocking connects, and the authenticated
//! handshake of [`crate::auth`] run as a small state machine so that a slow or silent peer
//! never blocks the node (each handshake has a deadline; their number is capped).

use crate::auth::{self, Challenge, Hello};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

/// How long a handshake may take.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Handshakes in progress at once (beyond it, the oldest one still waiting for a hello is
/// dropped to make room; if there is none, the new connection is refused).
pub const MAX_HANDSHAKES: usize = 64;

pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

fn setsockopt_int(fd: i32, level: i32, name: i32, value: i32) {
    // SAFETY: setsockopt with a pointer to an int of the right size; failures only lose a tuning.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
}

/// Latency and failure detection settings of a link socket.
pub fn tune(stream: &TcpStream, dead_after: Duration) {
    let fd = stream.as_raw_fd();
    let _ = stream.set_nodelay(true);
    let secs = dead_after.as_secs().clamp(1, 3600) as i32;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 2).max(1));
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        (secs / 4).max(1),
    );
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 2);
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        dead_after.as_millis().min(i32::MAX as u128) as i32,
    );
}

/// Starts a non-blocking connect.
pub fn connect_start(addr: SocketAddr) -> io::Result<TcpStream> {
    let (family, storage, len) = sockaddr(addr);
    // SAFETY: creating a socket; the result is checked.
    let fd = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket we own from here on.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: storage holds a sockaddr of `len` bytes for `family`.
    let r = unsafe { libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(stream)
}

/// Whether a started connect finished: Ok(true) connected, Ok(false) still going.
pub fn connect_done(stream: &TcpStream) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n <= 0 {
        return Ok(false);
    }
    match stream.take_error()? {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

fn sockaddr(addr: SocketAddr) -> (i32, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            (
                libc::AF_INET,
                storage,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            (
                libc::AF_INET6,
                storage,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// Where a handshake stands.
enum Step {
    /// Connector: TCP connect in progress.
    Connecting,
    /// Connector: hello sent (or being sent), waiting for the challenge.
    WaitChallenge,
    /// Connector: proof sent, waiting for the verdict.
    WaitVerdict,
    /// Acceptor: waiting for the hello.
    WaitHello,
    /// Acceptor: challenge sent, waiting for the proof.
    WaitProof,
    /// Acceptor: verdict being sent; then established (accept) or closed.
    SendVerdict(u32),
}

/// What a handshake step produced.
pub enum Outcome {
    /// Nothing new.
    Pending,
    /// The link is up: the caller takes the stream with [`Handshake::into_stream`].
    Established { peer: u32, incarnation: u64 },
    /// The handshake failed (the reason is logged and, for a connector, reported).
    Failed {
        peer: Option<u32>,
        why: String,
        refused: Option<u32>,
    },
}

pub struct Handshake {
    stream: TcpStream,
    step: Step,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_off: usize,
    deadline: Instant,
    hello: Option<Hello>,
    challenge: Option<Challenge>,
    /// Connector: the peer we dialled.
    pub target: Option<u32>,
    pub from_addr: Option<SocketAddr>,
}

pub struct HsContext<'a> {
    pub me: u32,
    pub incarnation: u64,
    pub nodes: u32,
    pub fingerprint: &'a [u8; 32],
    pub secret: &'a [u8],
    /// Acceptor, once the peer proved it holds the secret: whether to refuse a connection
    /// from (node, incarnation) because the two already share one or one is being dialled
    /// the other way (`auth::code::CROSSING`).
    pub crossing: &'a dyn Fn(u32, u64) -> bool,
}

impl Handshake {
    pub fn connector(stream: TcpStream, target: u32) -> Handshake {
        Handshake {
            stream,
            step: Step::Connecting,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_off: 0,
            deadline: Instant::now() + HANDSHAKE_DEADLINE,
            hello: None,
            challenge: None,
            target: Some(target),
            from_addr: None,
        }
    }

    pub fn acceptor(stream: TcpStream, from: SocketAddr) -> Handshake {
        Handshake {
            stream,
            step: Step::WaitHello,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_off: 0,
            deadline: Instant::now() + HANDSHAKE_DEADLINE,
            hello: None,
            challenge: None,
            target: None,
            from_addr: Some(from),
        }
    }

    /// An accepted connection whose peer has not yet said hello: when the table of
    /// handshakes is full, the oldest of these makes room, so a flood of silent clients
    /// delays a real peer by at most one round trip instead of locking it out.
    pub fn awaits_hello(&self) -> bool {
        matches!(self.step, Step::WaitHello)
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The established connection (the same socket: no duplicate descriptor, so epoll's
    /// registration of it stays the only one).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// The acceptor's verdict.
    fn set_verdict(&mut self, code: u32) {
        self.out = auth::encode_verdict(code).to_vec();
        self.out_off = 0;
        self.step = Step::SendVerdict(code);
    }

    fn queue(&mut self, bytes: &[u8]) {
        self.out.clear();
        self.out.extend_from_slice(bytes);
        self.out_off = 0;
    }

    fn flush(&mut self) -> io::Result<bool> {
        while self.out_off < self.out.len() {
            match self.stream.write(&self.out[self.out_off..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads until `want` bytes are buffered; Ok(true) when they are.
    fn fill(&mut self, want: usize) -> io::Result<bool> {
        let mut buf = [0u8; 256];
        while self.inbuf.len() < want {
            let room = (want - self.inbuf.len()).min(buf.len());
            match self.stream.read(&mut buf[..room]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn fail(&self, why: impl Into<String>, refused: Option<u32>) -> Outcome {
        Outcome::Failed {
            peer: self.target.or(self.hello.map(|h| h.from)),
            why: why.into(),
            refused,
        }
    }

    /// Advances the handshake as far as the socket allows.
    pub fn advance(&mut self, cx: &HsContext<'_>) -> Outcome {
        if Instant::now() > self.deadline {
            return self.fail("the handshake took too long", None);
        }
        match self.step_once(cx) {
            Ok(o) => o,
            Err(e) => self.fail(format!("{e}"), None),
        }
    }

    fn step_once(&mut self, cx: &HsContext<'_>) -> io::Result<Outcome> {
        loop {
            match self.step {
                Step::Connecting => {
                    if !connect_done(&self.stream)? {
                        return Ok(Outcome::Pending);
                    }
                    let hello = Hello {
                        fingerprint: *cx.fingerprint,
                        from: cx.me,
                        to: self.target.expect("a connector has a target"),
                        incarnation: cx.incarnation,
                        nonce: auth::random_bytes(),
                    };
                    self.hello = Some(hello);
                    self.queue(&hello.encode());
                    self.step = Step::WaitChallenge;
                }
                Step::WaitChallenge => {
                    if !self.flush()? || !self.fill(auth::CHALLENGE_LEN)? {
                        return Ok(Outcome::Pending);
                    }
                    let hello = self.hello.expect("sent");
                    let Some(ch) = Challenge::decode(&self.inbuf) else {
                        return Ok(self.fail("the peer's challenge is malformed", None));
                    };
                    if ch.code != auth::code::OK {
                        return Ok(self.fail("the peer refused the hello", Some(ch.code)));
                    }
                    if !ch.verify(cx.secret, &hello) {
                        return Ok(self.fail(
                            "the peer does not hold the job's secret (its challenge does not verify)",
                            None,
                        ));
                    }
                    self.inbuf.clear();
                    self.queue(&auth::encode_proof(&ch.proof(cx.secret, &hello)));
                    self.challenge = Some(ch);
                    self.step = Step::WaitVerdict;
                }
                Step::WaitVerdict => {
                    if !self.flush()? || !self.fill(auth::VERDICT_LEN)? {
                        return Ok(Outcome::Pending);
                    }
                    let Some(code) = auth::decode_verdict(&self.inbuf) else {
                        return Ok(self.fail("the peer's verdict is malformed", None));
                    };
                    if code != auth::code::OK {
                        return Ok(self.fail("the peer refused the connection", Some(code)));
                    }
                    return Ok(Outcome::Established {
                        peer: self.target.expect("connector"),
                        incarnation: self.challenge.expect("received").incarnation,
                    });
                }
                Step::WaitHello => {
                    if !self.fill(auth::HELLO_LEN)? {
                        return Ok(Outcome::Pending);
                    }
                    let Some(hello) = Hello::decode(&self.inbuf) else {
                        return Ok(
                            self.fail("not a kioku MCAPI hello (garbage on the port?)", None)
                        );
                    };
                    self.inbuf.clear();
                    let code = if hello.fingerprint != *cx.fingerprint
                        || hello.to != cx.me
                        || hello.from >= cx.nodes
                        || hello.from == cx.me
                    {
                        auth::code::WRONG_TOPOLOGY
                    } else {
                        auth::code::OK
                    };
                    let ch = Challenge::new(cx.secret, &hello, cx.incarnation, code);
                    self.hello = Some(hello);
                    self.queue(&ch.encode());
                    self.challenge = Some(ch);
                    if code != auth::code::OK {
                        let _ = self.flush();
                        return Ok(self.fail(
                            format!(
                                "a node that calls itself {} (to {}) has another topology or node id",
                                hello.from, hello.to
                            ),
                            Some(code),
                        ));
                    }
                    self.step = Step::WaitProof;
                }
                Step::WaitProof => {
                    if !self.flush()? || !self.fill(auth::PROOF_LEN)? {
                        return Ok(Outcome::Pending);
                    }
                    let hello = self.hello.expect("received");
                    let ok = auth::decode_proof(&self.inbuf).is_some_and(|p| {
                        self.challenge
                            .expect("sent")
                            .verify_proof(cx.secret, &hello, &p)
                    });
                    if !ok {
                        return Ok(
                            self.fail("the connecting peer does not hold the job's secret", None)
                        );
                    }
                    self.inbuf.clear();
                    let code = if (cx.crossing)(hello.from, hello.incarnation) {
                        auth::code::CROSSING
                    } else {
                        auth::code::OK
                    };
                    self.set_verdict(code);
                }
                Step::SendVerdict(code) => {
                    if !self.flush()? {
                        return Ok(Outcome::Pending);
                    }
                    let hello = self.hello.expect("received");
                    if code != auth::code::OK {
                        return Ok(self.fail("refused by us", Some(code)));
                    }
                    return Ok(Outcome::Established {
                        peer: hello.from,
                        incarnation: hello.incarnation,
                    });
                }
            }
        }
    }
}
