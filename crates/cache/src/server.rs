//! The TCP server: one thread accepts, `-t` worker threads each run an event loop (epoll, by
//! mio) over their share of the connections. A connection's state is bounded: its input buffer
//! holds at most one request line and one value (`-I`), and when a client does not read its
//! replies the worker stops reading its requests until the replies drain.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::exec::{After, Cache};
use crate::protocol::{self, Limits, MAX_LINE};

/// Reply bytes pending on a connection above which its requests wait.
const MAX_PENDING_REPLY: usize = 4 << 20;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;
const WAKER: Token = Token(usize::MAX);
const LISTENER: Token = Token(usize::MAX - 1);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}; choose another -p/-l or stop what holds it")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// The event loop failed.
    #[error("event loop failed: {0}")]
    Poll(#[from] io::Error),
}

/// A bound, not yet running, server.
pub struct Server {
    cache: Arc<Cache>,
    listener: TcpListener,
    /// The listen queue's length (`-b`).
    backlog: i32,
    /// When running out of descriptors was last logged.
    warned: Option<std::time::Instant>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Bind `addr` for `cache`, with a listen queue of `backlog` connections.
    pub fn bind(cache: Arc<Cache>, addr: SocketAddr, backlog: i32) -> Result<Self, ServerError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| ServerError::Bind { addr, source })?;
        // std binds with a backlog of 128; under a burst of connections on a loaded machine the
        // queue overflows and clients wait a second for a SYN retry. memcached's default is 1024
        // (`-b`), and Linux lets `listen` raise the backlog of a listening socket.
        // SAFETY: listen(2) on a socket we own; no memory is passed.
        if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
            let source = io::Error::last_os_error();
            return Err(ServerError::Bind { addr, source });
        }
        Ok(Server {
            cache,
            listener,
            backlog,
            warned: None,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The address listened on (with the port the kernel chose for `-p 0`).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A flag that stops [`Server::run`] within 100 ms when set.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Accept and serve until the stop flag is set.
    pub fn run(mut self) -> Result<(), ServerError> {
        let threads = self.cache.settings.threads.max(1);
        let mut workers = Vec::new();
        let mut handles = Vec::new();
        for i in 0..threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, rx) = mpsc::channel::<TcpStream>();
            let cache = self.cache.clone();
            let stop = self.stop.clone();
            let handle = std::thread::Builder::new()
                .name(format!("kioku-cache-{i}"))
                .spawn(move || worker(poll, rx, cache, stop))?;
            workers.push((tx, waker));
            handles.push(handle);
        }
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(64);
        let mut next = 0usize;
        let mut paused: Option<Paused> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let timeout = if paused.is_some() {
                RESUME_CHECK
            } else {
                Duration::from_millis(100)
            };
            match poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            if let Some(p) = &paused {
                if !p.may_resume(&self.cache.conns) {
                    continue;
                }
                let p = paused.take().expect("paused");
                self.resume_listening(&poll, p)?;
            }
            // Edge-triggered: accept until the queue is empty (or descriptors run out).
            loop {
                let mut stream = match self.listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if out_of_descriptors(&e) => {
                        paused = Some(self.pause_listening(&poll, &e)?);
                        break;
                    }
                    Err(e) => {
                        // A connection that failed before it was accepted (ECONNABORTED...):
                        // the next one may be fine.
                        tracing::debug!("accept failed: {e}");
                        continue;
                    }
                };
                let conns = &self.cache.conns;
                if conns.current.load(Ordering::Relaxed) as usize
                    >= self.cache.settings.max_connections
                {
                    conns.rejected.fetch_add(1, Ordering::Relaxed);
                    let _ = stream.write(b"ERROR Too many open connections\r\n");
                    continue;
                }
                conns.current.fetch_add(1, Ordering::Relaxed);
                conns.total.fetch_add(1, Ordering::Relaxed);
                let _ = stream.set_nodelay(true);
                let (tx, waker) = &workers[next % workers.len()];
                next += 1;
                if tx.send(stream).is_ok() {
                    let _ = waker.wake();
                }
            }
        }
        for (_, waker) in &workers {
            let _ = waker.wake();
        }
        drop(workers);
        for h in handles {
            let _ = h.join();
        }
        Ok(())
    }
}

/// How often a server that stopped accepting for want of descriptors looks whether it may
/// resume (memcached checks every 10 ms too).
const RESUME_CHECK: Duration = Duration::from_millis(10);
/// A server that stopped accepting tries again after this long even if no connection closed:
/// a descriptor may have been freed elsewhere (the checkpoint thread, another limit raised).
const RESUME_ANYWAY: Duration = Duration::from_secs(1);

/// Whether an `accept` error means the process or the system is out of descriptors (or of the
/// memory for a socket): accepting again at once would fail the same way.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The listener is paused: out of descriptors, the server accepts nothing until a connection
/// closes (or `RESUME_ANYWAY` passed).
struct Paused {
    since: std::time::Instant,
    /// Open connections when it paused; fewer means a descriptor was freed.
    open: u64,
}

impl Paused {
    fn may_resume(&self, conns: &crate::exec::ConnCounters) -> bool {
        conns.current.load(Ordering::Relaxed) < self.open || self.since.elapsed() >= RESUME_ANYWAY
    }
}

impl Server {
    /// Stops accepting, as memcached does when `accept` fails with EMFILE: with an
    /// edge-triggered listener, retrying at once would spin and waiting for its next event
    /// would strand the connections already queued. The listener leaves the poll and its queue
    /// shrinks to the minimum (`listen(fd, 0)`), so new clients wait in the kernel's SYN
    /// retries rather than pile up; `stats` shows `accepting_conns 0` and counts
    /// `listen_disabled_num`.
    fn pause_listening(&mut self, poll: &Poll, e: &io::Error) -> Result<Paused, ServerError> {
        let conns = &self.cache.conns;
        let open = conns.current.load(Ordering::Relaxed);
        // Once a minute at most: a server out of descriptors retries every second.
        if self
            .warned
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            self.warned = Some(std::time::Instant::now());
            tracing::warn!(
                open,
                "accept failed: {e}; not accepting until a connection closes (raise the descriptor limit, ulimit -n, or lower -c)"
            );
        }
        conns.listen_disabled.fetch_add(1, Ordering::Relaxed);
        conns.listen_paused.store(true, Ordering::Relaxed);
        poll.registry().deregister(&mut self.listener)?;
        // SAFETY: listen(2) on a socket we own; no memory is passed.
        if unsafe { libc::listen(self.listener.as_raw_fd(), 0) } != 0 {
            tracing::debug!("listen(0): {}", io::Error::last_os_error());
        }
        Ok(Paused {
            since: std::time::Instant::now(),
            open,
        })
    }

    /// Accepts again after [`Server::pause_listening`]: the queue gets its length back and the
    /// listener rejoins the poll; the caller then accepts what is queued (no new event would
    /// announce it).
    fn resume_listening(&mut self, poll: &Poll, p: Paused) -> Result<(), ServerError> {
        let conns = &self.cache.conns;
        conns
            .listen_disabled_us
            .fetch_add(p.since.elapsed().as_micros() as u64, Ordering::Relaxed);
        // SAFETY: listen(2) on a socket we own; no memory is passed.
        if unsafe { libc::listen(self.listener.as_raw_fd(), self.backlog) } != 0 {
            tracing::debug!("listen: {}", io::Error::last_os_error());
        }
        poll.registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        conns.listen_paused.store(false, Ordering::Relaxed);
        tracing::debug!("accepting connections again");
        Ok(())
    }
}

struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes of `output` already sent.
    sent: usize,
    /// Bytes still to discard (the value of a refused store).
    swallow: usize,
    /// Close once `output` is sent.
    closing: bool,
}

fn worker(mut poll: Poll, rx: mpsc::Receiver<TcpStream>, cache: Arc<Cache>, stop: Arc<AtomicBool>) {
    let mut conns: HashMap<usize, Conn> = HashMap::new();
    let mut next_token = 0usize;
    let mut events = Events::with_capacity(256);
    let mut scratch = vec![0u8; READ_CHUNK];
    let limits = Limits {
        max_value: cache.max_value(),
    };
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100))) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!("worker event loop failed: {e}");
                return;
            }
        }
        for ev in events.iter() {
            if ev.token() == WAKER {
                continue;
            }
            let t = ev.token().0;
            let done = match conns.get_mut(&t) {
                Some(c) => drive(c, &cache, &limits, &mut scratch).is_err(),
                None => false,
            };
            if done {
                if let Some(mut c) = conns.remove(&t) {
                    let _ = poll.registry().deregister(&mut c.stream);
                    cache.conns.current.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        while let Ok(mut stream) = rx.try_recv() {
            let token = next_token;
            next_token = next_token.wrapping_add(1) % (usize::MAX - 2);
            if poll
                .registry()
                .register(
                    &mut stream,
                    Token(token),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                cache.conns.current.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let mut c = Conn {
                stream,
                input: Vec::new(),
                output: Vec::new(),
                sent: 0,
                swallow: 0,
                closing: false,
            };
            if drive(&mut c, &cache, &limits, &mut scratch).is_ok() {
                conns.insert(token, c);
            } else {
                cache.conns.current.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    cache
        .conns
        .current
        .fetch_sub(conns.len() as u64, Ordering::Relaxed);
}

/// Advance a connection as far as it can go without blocking. `Err`: close it.
fn drive(c: &mut Conn, cache: &Cache, limits: &Limits, scratch: &mut [u8]) -> Result<(), ()> {
    let cap = MAX_LINE + limits.max_value + 2;
    loop {
        flush(c)?;
        if c.output.len() - c.sent > MAX_PENDING_REPLY {
            return Ok(()); // wait for WRITABLE
        }
        if c.closing {
            return if c.sent == c.output.len() {
                Err(())
            } else {
                Ok(())
            };
        }
        process(c, cache, limits);
        if c.closing || c.output.len() > c.sent {
            flush(c)?;
            if c.closing && c.sent == c.output.len() {
                return Err(());
            }
            if c.output.len() - c.sent > MAX_PENDING_REPLY {
                return Ok(());
            }
        }
        // Read more, through the worker's scratch buffer: an idle connection keeps no buffer.
        let room = cap.saturating_sub(c.input.len()).min(scratch.len());
        if room == 0 {
            // Cannot happen: the parser errs on a line over MAX_LINE and a value over the limit.
            return Err(());
        }
        match c.stream.read(&mut scratch[..room]) {
            Ok(0) => return Err(()), // the client closed (perhaps mid-value: nothing is stored)
            Ok(n) => c.input.extend_from_slice(&scratch[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if c.input.is_empty() && c.input.capacity() > 0 {
                    c.input = Vec::new();
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
}

/// Execute every complete request in the input buffer.
fn process(c: &mut Conn, cache: &Cache, limits: &Limits) {
    let mut used = 0;
    if c.swallow > 0 {
        let n = c.swallow.min(c.input.len());
        c.swallow -= n;
        used = n;
    }
    while used < c.input.len() && !c.closing && c.output.len() - c.sent <= MAX_PENDING_REPLY {
        match protocol::parse(&c.input[used..], limits) {
            Ok(None) => break,
            Ok(Some((cmd, n))) => {
                used += n;
                if cache.execute(&cmd, &mut c.output) == After::Close {
                    c.closing = true;
                }
            }
            Err(e) => {
                if let Some((at, len)) = e.stale_key {
                    cache.drop_key(&c.input[used + at..used + at + len]);
                }
                c.output.extend_from_slice(e.kind.reply());
                c.closing |= e.close;
                let n = e.consumed.min(c.input.len() - used);
                used += n;
                let left = c.input.len() - used;
                let swallow_now = e.swallow.min(left);
                used += swallow_now;
                c.swallow = e.swallow - swallow_now;
            }
        }
    }
    c.input.drain(..used);
}

fn flush(c: &mut Conn) -> Result<(), ()> {
    while c.sent < c.output.len() {
        match c.stream.write(&c.output[c.sent..]) {
            Ok(0) => return Err(()),
            Ok(n) => c.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    c.output.clear();
    c.sent = 0;
    if c.output.capacity() > 1 << 20 {
        c.output = Vec::new();
    }
    Ok(())
}
