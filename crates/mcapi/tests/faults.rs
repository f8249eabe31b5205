//! Faults, over both transports: a peer SIGKILLed in the middle of a transfer (its frames up
//! to the kill are delivered once and in order, then the channel reports the loss, never a
//! hang), a sender blocked on a full queue of a node that dies, and hostile bytes on the TCP
//! port (garbage, a wrong topology, a wrong secret, a silent client, a connection flood, and
//! an authenticated peer sending a malformed frame) while real traffic goes on.
//!
//! Child nodes are this test binary run again with `KIOKU_TEST_MCAPI_CHILD` set.

mod common;
use common::*;
use kioku_mcapi::*;
use std::io::{Read, Write};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD: &str = "KIOKU_TEST_MCAPI_CHILD";

/// Runs the child role named in the environment, if any (then exits the process).
fn child_role() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    // Die with the test that spawned us, even if it panics before killing us.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let topo = Topology::load(None).expect("child topology");
    let n = Node::initialize(0, 1, topo).expect("child initialize");
    match role.as_str() {
        "sender" => {
            // Sends numbered packets and messages as fast as it can until killed.
            let s = n.endpoint_create(20).unwrap();
            let peer = n.endpoint_get(0, 0, 20, T).unwrap();
            let c = n.connect_i(s, peer, ChanKind::Packet).unwrap();
            n.wait(c, T).unwrap();
            let h = n.open(s, ChanKind::Packet, Direction::Send, T).unwrap();
            for i in 0u64.. {
                let mut p = vec![(i % 256) as u8; 100 + (i % 3000) as usize];
                p[..8].copy_from_slice(&i.to_le_bytes());
                n.pktchan_send(h, &p).unwrap();
            }
        }
        "sink" => {
            // Creates an endpoint and never receives from it, while the node stays responsive
            // (progress is made by calling threads: this one waits on another endpoint).
            n.endpoint_create(30).unwrap();
            let other = n.endpoint_create(31).unwrap();
            let _ = n.msg_recv(other);
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// A child node, SIGKILLed when dropped (so a failing test leaves no process behind). A killed
/// node cannot remove its shared-memory segment (the next node of its id in the job would
/// replace it): the test removes it.
struct ChildNode(Child, Option<std::path::PathBuf>);

impl Drop for ChildNode {
    fn drop(&mut self) {
        kill(&mut self.0);
        if let Some(segment) = &self.1 {
            let _ = std::fs::remove_file(segment);
        }
    }
}

fn spawn_child(role: &str, topo: &Topology, via: Via) -> ChildNode {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(CHILD, role)
    .env("KIOKU_MCAPI_JOB", &topo.job)
    .env("KIOKU_MCAPI_NODES", topo.nodes.to_string())
    .env("KIOKU_MCAPI_QUEUE_DEPTH", topo.queue_depth.to_string());
    match via {
        Via::Shm => {
            c.env("KIOKU_MCAPI_TRANSPORT", "shm");
        }
        Via::Tcp => {
            let addrs: Vec<String> = topo
                .addresses
                .iter()
                .enumerate()
                .map(|(i, a)| format!("{i}={a}"))
                .collect();
            let hex: String = topo.secret.iter().map(|b| format!("{b:02x}")).collect();
            c.env("KIOKU_MCAPI_TRANSPORT", "tcp")
                .env("KIOKU_MCAPI_ADDRESSES", addrs.join(","))
                .env("KIOKU_MCAPI_SECRET", hex);
        }
    }
    let segment =
        (via == Via::Shm).then(|| topo.shm_dir.join(format!("kioku-mcapi.{}.1", topo.job)));
    ChildNode(c.spawn().unwrap(), segment)
}

#[test]
fn child_entry() {
    child_role();
}

fn kill(child: &mut Child) {
    // SAFETY: kill(2) of our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

both!(sender_killed_mid_transfer, |via| {
    let topo = topology(via, 2);
    let n = Node::initialize(0, 0, topo.clone()).unwrap();
    let r = n.endpoint_create(20).unwrap();
    let mut child = spawn_child("sender", &topo, via);
    let h = n.open(r, ChanKind::Packet, Direction::Receive, T).unwrap();
    let next = std::cell::Cell::new(0u64);
    let check = |p: Vec<u8>| {
        let i = u64::from_le_bytes(p[..8].try_into().unwrap());
        let due = next.get();
        assert_eq!(
            i, due,
            "packet {i} where {due} was due: lost, doubled or reordered"
        );
        assert_eq!(p.len(), 100 + (i % 3000) as usize);
        assert!(
            p[8..].iter().all(|&b| b == (i % 256) as u8),
            "packet {i} is damaged"
        );
        next.set(due + 1);
    };
    while next.get() < 2000 {
        check(n.pktchan_recv(h).unwrap());
    }
    kill(&mut child.0);
    let killed = Instant::now();
    // What it sent before dying comes out in order; then the loss, well within seconds.
    let err = loop {
        match n.pktchan_recv(h) {
            Ok(p) => check(p),
            Err(e) => break e,
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no error after the kill"
        );
    };
    assert!(
        matches!(
            err,
            McapiError::Transmission {
                node: 1,
                why: PeerLoss::Died
            }
        ),
        "{err:?}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(n.peer_state(1).unwrap(), PeerState::Lost(PeerLoss::Died));
    // Later calls fail at once too.
    let peer = EndpointId::new(1, 20);
    assert!(matches!(
        n.msg_send(r, peer, b"x", 0),
        Err(McapiError::Transmission { node: 1, .. })
    ));
    assert!(matches!(
        n.endpoint_get(0, 1, 20, T),
        Err(McapiError::Transmission { node: 1, .. })
    ));
    n.finalize(Duration::from_secs(1)).unwrap();
});

both!(blocked_sender_sees_the_receiver_die, |via| {
    let mut topo = topology(via, 2);
    topo.queue_depth = 8;
    let n = Node::initialize(0, 0, topo.clone()).unwrap();
    let me = n.endpoint_create(1).unwrap();
    let mut child = spawn_child("sink", &topo, via);
    let sink = n.endpoint_get(0, 1, 30, T).unwrap();
    for _ in 0..8 {
        n.msg_send(me, sink, b"fill", 0).unwrap();
    }
    let blocked = n.msg_send_i(me, sink, b"one too many", 0).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(n.is_pending(blocked).unwrap(), "the queue is full");
    // A blocking send on another thread waits too, then fails when the receiver dies.
    let n2 = n.clone();
    let t = std::thread::spawn(move || n2.msg_send(me, sink, b"blocking", 0));
    std::thread::sleep(Duration::from_millis(100));
    kill(&mut child.0);
    let t0 = Instant::now();
    assert!(matches!(
        n.wait(blocked, T),
        Err(McapiError::Transmission { node: 1, .. })
    ));
    assert!(matches!(
        t.join().unwrap(),
        Err(McapiError::Transmission { node: 1, .. })
    ));
    assert!(t0.elapsed() < Duration::from_secs(10));
    n.finalize(Duration::from_secs(1)).unwrap();
});

/// A client that speaks the handshake with `secret`, claiming to be node `from`.
fn authenticate(
    addr: std::net::SocketAddr,
    topo: &Topology,
    secret: &[u8],
    from: u32,
) -> Option<std::net::TcpStream> {
    use kioku_mcapi::wire::*;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = Hello {
        fingerprint: topo.fingerprint(),
        from,
        to: 0,
        incarnation: 77,
        nonce: random_bytes(),
    };
    s.write_all(&hello.encode()).unwrap();
    let mut ch = [0u8; CHALLENGE_LEN];
    s.read_exact(&mut ch).ok()?;
    let ch = Challenge::decode(&ch)?;
    if ch.code != 0 {
        return None;
    }
    s.write_all(&encode_proof(&ch.proof(secret, &hello))).ok()?;
    let mut v = [0u8; VERDICT_LEN];
    s.read_exact(&mut v).ok()?;
    (decode_verdict(&v) == Some(0)).then_some(s)
}

#[test]
fn hostile_bytes_on_the_tcp_port() {
    let topo = topology(Via::Tcp, 3);
    let addr = topo.addresses[0];
    let t1 = topo.clone();
    // Real traffic between nodes 0 and 1 throughout.
    let peer = std::thread::spawn(move || {
        let n = Node::initialize(0, 1, t1).unwrap();
        let me = n.endpoint_create(1).unwrap();
        let zero = n.endpoint_get(0, 0, 1, T).unwrap();
        for i in 0..3000u32 {
            n.msg_send(me, zero, &i.to_le_bytes(), 0).unwrap();
            if i % 100 == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert_eq!(n.msg_recv(me).unwrap(), b"all received");
        n.finalize(Duration::from_secs(2)).unwrap();
    });
    let n = Node::initialize(0, 0, topo.clone()).unwrap();
    let me = n.endpoint_create(1).unwrap();
    let attacker = std::thread::spawn({
        let topo = topo.clone();
        move || {
            // (1) Garbage, then (2) a silent client and (3) a flood of them.
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let junk: Vec<u8> = (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect();
            let _ = s.write_all(&junk);
            let mut sink = Vec::new();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.read_to_end(&mut sink); // the node closes it
            let silent = std::net::TcpStream::connect(addr).unwrap();
            let flood: Vec<_> = (0..100)
                .filter_map(|_| std::net::TcpStream::connect(addr).ok())
                .collect();
            // (4) Another topology: refused in the challenge.
            let mut other = topo.clone();
            other.job = "another-job".into();
            assert!(authenticate(addr, &other, &topo.secret, 2).is_none());
            // (5) The right topology but a wrong secret: refused.
            assert!(authenticate(addr, &topo, b"not the secret of this job", 2).is_none());
            // (6) A peer that holds the secret but sends a malformed frame is dropped.
            let mut s =
                authenticate(addr, &topo, &topo.secret, 2).expect("a real peer is accepted");
            let mut bad = kioku_mcapi::wire::Header {
                kind: kioku_mcapi::wire::Kind::Credit,
                flags: 0,
                src: 1,
                dst: 1,
                aux: 0,
                len: 0,
                a: 0,
                b: 0,
            }
            .encode();
            bad[0] = 200;
            s.write_all(&bad).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop((silent, flood));
        }
    });
    let mut next = 0u32;
    while next < 3000 {
        let m = n.msg_recv(me).unwrap();
        assert_eq!(m, next.to_le_bytes(), "out of order or doubled");
        next += 1;
    }
    attacker.join().unwrap();
    let t0 = Instant::now();
    while !matches!(
        n.peer_state(2).unwrap(),
        PeerState::Lost(PeerLoss::Protocol(_))
    ) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{:?}",
            n.peer_state(2)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        n.msg_available(me).unwrap(),
        0,
        "nothing extra was delivered"
    );
    let one = n.endpoint_get(0, 1, 1, T).unwrap();
    n.msg_send(me, one, b"all received", 0).unwrap();
    peer.join().unwrap();
    n.finalize(Duration::from_secs(1)).unwrap();
}
