//! The TCP transport's links: one connection per pair of nodes carrying frames both ways, even
//! when both dial at once; and a waiting thread that blocks reading its node's one connection
//! (instead of sleeping in epoll) still lets everything else through: another thread's local
//! message, another thread's traffic, and a third node that connects meanwhile.

mod common;
use common::*;
use kioku_mcapi::*;
use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Established TCP connections of this network namespace with an end at one of `addrs`'
/// ports (each connection shows twice: both of its ends are here).
fn connection_ends(addrs: &[SocketAddr]) -> usize {
    let ports: Vec<u16> = addrs.iter().map(|a| a.port()).collect();
    let port_of = |field: &str| u16::from_str_radix(field.rsplit(':').next().unwrap(), 16).unwrap();
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f[3] == "01" && (ports.contains(&port_of(f[1])) || ports.contains(&port_of(f[2])))
        })
        .count()
}

#[test]
fn nodes_dialling_each_other_at_once_share_one_connection() {
    for round in 0..8 {
        let topo = topology(Via::Tcp, 2);
        let addrs = topo.addresses.clone();
        let start = Arc::new(Barrier::new(2));
        let done = Arc::new(Barrier::new(2));
        let (s, d) = (start.clone(), done.clone());
        let counts = run(&topo, move |n| {
            let other = 1 - n.id();
            let me = n.endpoint_create(1).unwrap();
            // Both get (and so dial) the other at the same moment.
            s.wait();
            let peer = n.endpoint_get(0, other, 1, T).unwrap();
            for i in 0..200u32 {
                n.msg_send(me, peer, &i.to_le_bytes(), 0).unwrap();
                let m = n.msg_recv(me).unwrap();
                assert_eq!(m, i.to_le_bytes(), "round {round}: out of order or lost");
            }
            assert_eq!(n.peer_state(other).unwrap(), PeerState::Up);
            let ends = connection_ends(&addrs);
            d.wait(); // nobody finalizes before both counted
            ends
        });
        assert_eq!(
            counts,
            [2, 2],
            "round {round}: one connection, seen from both ends"
        );
    }
}

#[test]
fn a_thread_reading_its_connection_lets_other_threads_through() {
    let topo = topology(Via::Tcp, 2);
    run(&topo, move |n| {
        let e1 = n.endpoint_create(1).unwrap();
        let e2 = n.endpoint_create(2).unwrap();
        if n.id() == 1 {
            let p1 = n.endpoint_get(0, 0, 1, T).unwrap();
            let p2 = n.endpoint_get(0, 0, 2, T).unwrap();
            // (A node answers gets only from inside a call: a barrier would leave node 0
            // deaf to them.)
            n.msg_send(e2, p2, b"ready", 0).unwrap();
            // Node 0's first thread waits on e1 while its second gets a local message; then
            // traffic from here to both endpoints reaches the right threads.
            assert_eq!(n.msg_recv(e1).unwrap(), b"go");
            n.msg_send(e2, p2, b"to e2", 0).unwrap();
            n.msg_send(e1, p1, b"to e1", 0).unwrap();
            assert_eq!(n.msg_recv(e1).unwrap(), b"done");
            return;
        }
        let peer1 = n.endpoint_get(0, 1, 1, T).unwrap();
        assert_eq!(n.msg_recv(e2).unwrap(), b"ready");
        let reader = {
            let n = n.clone();
            std::thread::spawn(move || {
                let local = n.msg_recv(e1).unwrap();
                let t = Instant::now();
                let remote = n.msg_recv(e1).unwrap();
                (local, remote, t)
            })
        };
        // The reader is alone and blocked on the one connection by now.
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        n.msg_send(e2, e1, b"local", 0).unwrap();
        let (local, remote, _) = {
            // Another thread of the node, receiving from the peer meanwhile.
            let m = {
                n.msg_send(e2, peer1, b"go", 0).unwrap();
                n.msg_recv(e2).unwrap()
            };
            assert_eq!(m, b"to e2");
            reader.join().unwrap()
        };
        assert_eq!(local, b"local");
        assert_eq!(remote, b"to e1");
        // The local message did not wait for the peer: it was sent before "go".
        assert!(t0.elapsed() < Duration::from_secs(5));
        n.msg_send(e1, peer1, b"done", 0).unwrap();
    });
}

#[test]
fn a_third_node_connects_while_a_thread_reads_the_one_connection() {
    let topo = topology(Via::Tcp, 3);
    let t2 = topo.clone();
    let up = Arc::new(Barrier::new(2));
    let u = up.clone();
    // Node 2 starts only once nodes 0 and 1 are connected and node 0 waits.
    let third = std::thread::spawn(move || {
        u.wait();
        std::thread::sleep(Duration::from_millis(100));
        let n = Node::initialize(0, 2, t2).unwrap();
        let me = n.endpoint_create(1).unwrap();
        let zero = n.endpoint_get(0, 0, 1, T).unwrap();
        n.msg_send(me, zero, b"from 2", 0).unwrap();
        assert_eq!(n.msg_recv(me).unwrap(), b"bye");
        n.finalize(Duration::from_secs(2)).unwrap();
    });
    let a = Node::initialize(0, 0, topo.clone()).unwrap();
    let b = Node::initialize(0, 1, topo).unwrap();
    let one = std::thread::spawn(move || {
        let me = b.endpoint_create(1).unwrap();
        let zero = b.endpoint_get(0, 0, 1, T).unwrap();
        b.msg_send(me, zero, b"from 1", 0).unwrap();
        assert_eq!(b.msg_recv(me).unwrap(), b"bye");
        b.finalize(Duration::from_secs(2)).unwrap();
    });
    let me = a.endpoint_create(1).unwrap();
    assert_eq!(a.msg_recv(me).unwrap(), b"from 1");
    up.wait();
    // Blocks reading the connection to node 1, which stays silent, while node 2 dials in.
    let t0 = Instant::now();
    assert_eq!(a.msg_recv(me).unwrap(), b"from 2");
    assert!(t0.elapsed() < Duration::from_secs(10));
    for node in [1, 2] {
        let ep = a.endpoint_get(0, node, 1, T).unwrap();
        a.msg_send(me, ep, b"bye", 0).unwrap();
    }
    one.join().unwrap();
    third.join().unwrap();
    a.finalize(Duration::from_secs(2)).unwrap();
}
