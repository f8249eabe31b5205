//! MCAPI against the raw transports it runs on, between two processes, in one run: round trips
//! of a 24-byte message and of a 4 KiB packet (the seed's two figures), and one-way packet
//! throughput from 64 B to 1 MiB; each over shared memory and over TCP on loopback.
//!
//! The baselines are written the simplest way: raw TCP is a blocking socket with TCP_NODELAY
//! and a 4-byte length before each buffer; the raw shared-memory ring is a pair of single-
//! producer single-consumer byte rings in one shared file mapping, polled (spin, then
//! `sched_yield`). Each case runs `--rounds` times, raw and MCAPI alternating, and the median
//! of the rounds is kept. Output: one JSON object per line (read by `bench/mcapi/bench.py`).
//!
//! Usage: cargo bench -p kioku-mcapi --bench mcapi -- [--rounds N] [--iters N] [--mib N]
//!        [--cases raw-shm,mcapi-shm,raw-tcp,mcapi-tcp]
//!
//! The peer process is this program run again with `MCAPI_BENCH_ROLE` set.

use kioku_mcapi::{ChanKind, ChannelHandle, Direction, EndpointId, Node, Topology};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ROLE: &str = "MCAPI_BENCH_ROLE";
const T: Option<Duration> = Some(Duration::from_secs(60));
const SIZES: [usize; 8] = [
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];

#[derive(Clone, Copy)]
struct Plan {
    iters: usize,
    total_bytes: usize,
}

impl Plan {
    /// How many buffers of `size` the throughput run sends.
    fn count(&self, size: usize) -> usize {
        (self.total_bytes / size).clamp(16, 20_000)
    }

    fn to_env(self) -> String {
        format!("{},{}", self.iters, self.total_bytes)
    }

    fn from_env(s: &str) -> Plan {
        let (a, b) = s.split_once(',').expect("plan");
        Plan {
            iters: a.parse().unwrap(),
            total_bytes: b.parse().unwrap(),
        }
    }
}

/// One side of a two-process conversation: messages (connectionless) and packets (a channel).
/// Raw transports have one kind of buffer and use it for both.
trait Pipe {
    fn send_msg(&mut self, b: &[u8]);
    fn recv_msg(&mut self) -> Vec<u8>;
    fn send_pkt(&mut self, b: &[u8]);
    fn recv_pkt(&mut self) -> Vec<u8>;
    /// A packet's length, its bytes received where the transport lets the caller choose.
    fn recv_pkt_len(&mut self) -> usize {
        self.recv_pkt().len()
    }
}

// ------------------------------------------------------------------------------ MCAPI

struct Mcapi {
    node: Node,
    msg: EndpointId,
    peer_msg: EndpointId,
    tx: ChannelHandle,
    rx: ChannelHandle,
    scratch: Vec<u8>,
}

impl Mcapi {
    fn start(mut topo: Topology, me: u32) -> Mcapi {
        if let Some(us) = std::env::var("KIOKU_MCAPI_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            topo.spin = Duration::from_micros(us);
        }
        let other = 1 - me;
        let node = Node::initialize(0, me, topo).expect("mcapi_initialize");
        let msg = node.endpoint_create(1).unwrap();
        let tx_ep = node.endpoint_create(2).unwrap();
        let rx_ep = node.endpoint_create(3).unwrap();
        let peer_msg = node.endpoint_get(0, other, 1, T).unwrap();
        let peer_rx = node.endpoint_get(0, other, 3, T).unwrap();
        let c = node.connect_i(tx_ep, peer_rx, ChanKind::Packet).unwrap();
        let o_rx = node
            .open_i(rx_ep, ChanKind::Packet, Direction::Receive)
            .unwrap();
        node.wait(c, T).unwrap();
        let tx = node
            .open(tx_ep, ChanKind::Packet, Direction::Send, T)
            .unwrap();
        let rx = node.wait(o_rx, T).unwrap().handle.unwrap();
        Mcapi {
            node,
            msg,
            peer_msg,
            tx,
            rx,
            scratch: Vec::new(),
        }
    }
}

impl Pipe for Mcapi {
    fn send_msg(&mut self, b: &[u8]) {
        self.node.msg_send(self.msg, self.peer_msg, b, 1).unwrap();
    }
    fn recv_msg(&mut self) -> Vec<u8> {
        self.node.msg_recv(self.msg).unwrap()
    }
    fn send_pkt(&mut self, b: &[u8]) {
        self.node.pktchan_send(self.tx, b).unwrap();
    }
    fn recv_pkt(&mut self) -> Vec<u8> {
        self.node.pktchan_recv(self.rx).unwrap()
    }
    fn recv_pkt_len(&mut self) -> usize {
        // Into the caller's buffer: no allocation per packet.
        self.scratch.resize(kioku_mcapi::MAX_PAYLOAD, 0);
        self.node
            .pktchan_recv_into(self.rx, &mut self.scratch)
            .unwrap()
    }
}

impl Drop for Mcapi {
    fn drop(&mut self) {
        let _ = self.node.finalize(Duration::from_secs(5));
    }
}

// ------------------------------------------------------------------------------ raw TCP

struct RawTcp(TcpStream);

impl RawTcp {
    fn send(&mut self, b: &[u8]) {
        let mut frame = Vec::with_capacity(4 + b.len());
        frame.extend_from_slice(&(b.len() as u32).to_le_bytes());
        frame.extend_from_slice(b);
        self.0.write_all(&frame).unwrap();
    }
    fn recv(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.0.read_exact(&mut len).unwrap();
        let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
        self.0.read_exact(&mut b).unwrap();
        b
    }
}

impl Pipe for RawTcp {
    fn send_msg(&mut self, b: &[u8]) {
        self.send(b)
    }
    fn recv_msg(&mut self) -> Vec<u8> {
        self.recv()
    }
    fn send_pkt(&mut self, b: &[u8]) {
        self.send(b)
    }
    fn recv_pkt(&mut self) -> Vec<u8> {
        self.recv()
    }
}

// ------------------------------------------------------------------------------ raw shm ring

const RING_BYTES: usize = 1 << 20;
const RING_HEADER: usize = 128;
const MAP_BYTES: usize = 2 * (RING_HEADER + RING_BYTES);

/// A shared file mapping holding two SPSC byte rings (0 → 1 and 1 → 0).
struct RawShm {
    base: *mut u8,
    me: usize,
}

impl RawShm {
    fn open(path: &str, create: bool, me: usize) -> RawShm {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .unwrap();
        if create {
            f.set_len(MAP_BYTES as u64).unwrap();
        }
        use std::os::fd::AsRawFd;
        // SAFETY: mapping a file we opened read-write, of MAP_BYTES bytes, shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAP_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap");
        RawShm { base: p.cast(), me }
    }

    /// Ring `i`'s head (bytes written, producer's) and tail (bytes read, consumer's) counters,
    /// on separate cache lines, and its data.
    fn ring(&self, i: usize) -> (&AtomicU64, &AtomicU64, *mut u8) {
        // SAFETY: ring i lies inside the mapping; the counters are 8-byte aligned (the mapping
        // is page-aligned, offsets are multiples of 64) and only accessed atomically.
        unsafe {
            let r = self.base.add(i * (RING_HEADER + RING_BYTES));
            (
                &*(r as *const AtomicU64),
                &*(r.add(64) as *const AtomicU64),
                r.add(RING_HEADER),
            )
        }
    }

    fn wait(spins: &mut u32) {
        *spins += 1;
        if *spins < 200 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }

    fn write_all(&mut self, mut b: &[u8]) {
        let (head, tail, data) = self.ring(self.me);
        let mut spins = 0;
        while !b.is_empty() {
            let h = head.load(Ordering::Relaxed);
            let free = RING_BYTES - (h - tail.load(Ordering::Acquire)) as usize;
            if free == 0 {
                Self::wait(&mut spins);
                continue;
            }
            let at = h as usize % RING_BYTES;
            let n = b.len().min(free).min(RING_BYTES - at);
            // SAFETY: [at, at+n) is inside the ring and free (the consumer is past it).
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), data.add(at), n) };
            head.store(h + n as u64, Ordering::Release);
            b = &b[n..];
            spins = 0;
        }
    }

    fn read_exact(&mut self, mut b: &mut [u8]) {
        let (head, tail, data) = self.ring(1 - self.me);
        let mut spins = 0;
        while !b.is_empty() {
            let t = tail.load(Ordering::Relaxed);
            let avail = (head.load(Ordering::Acquire) - t) as usize;
            if avail == 0 {
                Self::wait(&mut spins);
                continue;
            }
            let at = t as usize % RING_BYTES;
            let n = b.len().min(avail).min(RING_BYTES - at);
            // SAFETY: [at, at+n) is inside the ring and written (the producer published it).
            unsafe { std::ptr::copy_nonoverlapping(data.add(at), b.as_mut_ptr(), n) };
            tail.store(t + n as u64, Ordering::Release);
            b = &mut b[n..];
            spins = 0;
        }
    }

    fn send(&mut self, b: &[u8]) {
        self.write_all(&(b.len() as u32).to_le_bytes());
        self.write_all(b);
    }

    fn recv(&mut self) -> Vec<u8> {
        let mut len = [0u8; 4];
        self.read_exact(&mut len);
        let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
        self.read_exact(&mut b);
        b
    }
}

impl Pipe for RawShm {
    fn send_msg(&mut self, b: &[u8]) {
        self.send(b)
    }
    fn recv_msg(&mut self) -> Vec<u8> {
        self.recv()
    }
    fn send_pkt(&mut self, b: &[u8]) {
        self.send(b)
    }
    fn recv_pkt(&mut self) -> Vec<u8> {
        self.recv()
    }
}

impl Drop for RawShm {
    fn drop(&mut self) {
        // SAFETY: unmapping what `open` mapped; no reference into it outlives self.
        unsafe { libc::munmap(self.base.cast(), MAP_BYTES) };
    }
}

// ------------------------------------------------------------------------------ the script

/// Both sides run the same script; side 0 measures.
fn script(p: &mut dyn Pipe, me: usize, plan: Plan) -> Vec<String> {
    let mut out = Vec::new();
    let warm = plan.iters / 10 + 10;
    // Round trips: 24-byte messages, then 4 KiB packets.
    for (what, size, pkt) in [("msg24", 24usize, false), ("pkt4k", 4096, true)] {
        let buf = vec![0x5au8; size];
        let mut times = Vec::with_capacity(plan.iters);
        for i in 0..warm + plan.iters {
            let t0 = Instant::now();
            if me == 0 {
                if pkt {
                    p.send_pkt(&buf);
                    assert_eq!(p.recv_pkt().len(), size);
                } else {
                    p.send_msg(&buf);
                    assert_eq!(p.recv_msg().len(), size);
                }
            } else if pkt {
                let b = p.recv_pkt();
                p.send_pkt(&b);
            } else {
                let b = p.recv_msg();
                p.send_msg(&b);
            }
            if i >= warm {
                times.push(t0.elapsed().as_nanos() as f64 / 1e3);
            }
        }
        times.sort_by(f64::total_cmp);
        let q = |f: f64| times[((times.len() - 1) as f64 * f) as usize];
        out.push(format!(
            "\"kind\":\"rtt\",\"what\":\"{what}\",\"size\":{size},\"median_us\":{:.2},\"p99_us\":{:.2}",
            q(0.5),
            q(0.99)
        ));
    }
    // Throughput: `count` packets one way, then a one-byte acknowledgement.
    for size in SIZES {
        let count = plan.count(size);
        let buf = vec![0xa5u8; size];
        let t0 = Instant::now();
        if me == 0 {
            for _ in 0..count {
                p.send_pkt(&buf);
            }
            assert_eq!(p.recv_msg(), [1]);
        } else {
            for _ in 0..count {
                assert_eq!(p.recv_pkt_len(), size);
            }
            p.send_msg(&[1]);
        }
        let secs = t0.elapsed().as_secs_f64();
        out.push(format!(
            "\"kind\":\"tput\",\"size\":{size},\"count\":{count},\"mib_s\":{:.1}",
            (count * size) as f64 / secs / (1 << 20) as f64
        ));
    }
    out
}

/// Side `me` of `case`; side 0 of raw TCP accepts on `listener` (bound before the peer starts).
fn pipe_for(case: &str, me: usize, endpoint: &str, listener: Option<TcpListener>) -> Box<dyn Pipe> {
    match case {
        "raw-tcp" => {
            let s = if me == 0 {
                listener.expect("side 0 listens").accept().unwrap().0
            } else {
                TcpStream::connect(endpoint).unwrap()
            };
            s.set_nodelay(true).unwrap();
            Box::new(RawTcp(s))
        }
        "raw-shm" => Box::new(RawShm::open(endpoint, me == 0, me)),
        "mcapi-shm" => Box::new(Mcapi::start(Topology::shm(endpoint, 2), me as u32)),
        "mcapi-tcp" => {
            let (job, ports) = endpoint.split_once(':').unwrap();
            let addrs = ports
                .split(',')
                .map(|p| format!("127.0.0.1:{p}").parse().unwrap())
                .collect();
            let topo = Topology::tcp(job, addrs, b"kioku-mcapi-bench-secret-0123456");
            Box::new(Mcapi::start(topo, me as u32))
        }
        other => panic!("unknown case {other}"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_case(case: &str, round: usize, plan: Plan) -> Vec<String> {
    let listener = (case == "raw-tcp").then(|| TcpListener::bind("127.0.0.1:0").unwrap());
    let endpoint = match case {
        "raw-tcp" => listener.as_ref().unwrap().local_addr().unwrap().to_string(),
        "raw-shm" => format!("/dev/shm/kioku-mcapi-bench-{}-{round}", std::process::id()),
        "mcapi-shm" => format!("bench{}-{round}", std::process::id()),
        _ => format!(
            "bench{}-{round}:{},{}",
            std::process::id(),
            free_port(),
            free_port()
        ),
    };
    if case == "raw-shm" {
        // Side 0 creates the file; create it here so the peer can open it at once.
        drop(RawShm::open(&endpoint, true, 0));
    }
    let mut peer = Peer(
        Command::new(std::env::current_exe().unwrap())
            .env(ROLE, format!("{case}|{endpoint}|{}", plan.to_env()))
            .spawn()
            .unwrap(),
    );
    let rows = {
        let mut p = pipe_for(case, 0, &endpoint, listener);
        script(p.as_mut(), 0, plan)
    };
    let st = peer.0.wait().unwrap();
    assert!(st.success(), "{case} peer: {st}");
    if case == "raw-shm" {
        let _ = std::fs::remove_file(&endpoint);
    }
    let (transport, imp) = match case {
        "raw-tcp" => ("tcp", "raw"),
        "raw-shm" => ("shm", "raw"),
        "mcapi-tcp" => ("tcp", "mcapi"),
        _ => ("shm", "mcapi"),
    };
    rows.into_iter()
        .map(|r| {
            format!("{{\"transport\":\"{transport}\",\"impl\":\"{imp}\",\"round\":{round},{r}}}")
        })
        .collect()
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        let mut it = role.splitn(3, '|');
        let (case, endpoint, plan) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let mut p = pipe_for(case, 1, endpoint, None);
        script(p.as_mut(), 1, Plan::from_env(plan));
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse().expect(name))
            .unwrap_or(default)
    };
    let rounds = arg("--rounds", 3);
    let plan = Plan {
        iters: arg("--iters", 2000),
        total_bytes: arg("--mib", 64) << 20,
    };
    let cases: Vec<String> = args
        .iter()
        .position(|a| a == "--cases")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').map(String::from).collect())
        .unwrap_or_else(|| {
            ["raw-shm", "mcapi-shm", "raw-tcp", "mcapi-tcp"]
                .map(String::from)
                .to_vec()
        });
    for round in 0..rounds {
        for case in &cases {
            for row in run_case(case, round, plan) {
                println!("{row}");
            }
            eprintln!("round {round}: {case} done");
        }
    }
}
