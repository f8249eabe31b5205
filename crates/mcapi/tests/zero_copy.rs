//! The calls that save copies, over both transports: vectored sends (several slices as one
//! message or packet), receives into the caller's buffer, and reused payload buffers — with
//! order, priorities, back-pressure, and truncation that loses nothing.

mod common;
use common::*;
use kioku_mcapi::*;
use std::time::{Duration, Instant};

/// The bytes of item `k` of length `len`.
fn pattern(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + k * 13) as u8).collect()
}

/// `data` cut into `parts` slices of uneven lengths (some empty).
fn cut(data: &[u8], parts: usize) -> Vec<&[u8]> {
    let mut v = Vec::new();
    let mut at = 0;
    for p in 0..parts {
        let end = if p + 1 == parts {
            data.len()
        } else {
            (at + (data.len() / parts) * (p % 3)).min(data.len())
        };
        v.push(&data[at..end]);
        at = end;
    }
    v
}

both!(vectored_messages_keep_order_and_priorities, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let me = n.endpoint_create(1).unwrap();
        let ctl = n.endpoint_create(2).unwrap();
        let peer = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        let peer_ctl = n.endpoint_get(0, 1 - n.id(), 2, T).unwrap();
        // Small enough that all of them fit the receiver's queue at once.
        let sizes = [0usize, 1, 24, 4096, 20_000];
        let large = [100_000usize, MAX_PAYLOAD - 1, MAX_PAYLOAD];
        if n.id() == 0 {
            // Every size, gathered from 1 to MAX_SLICES slices, lowest priority first.
            for (k, &s) in sizes.iter().enumerate() {
                let data = pattern(k, s);
                for parts in [1, 2, 5, MAX_SLICES] {
                    let prio = (MIN_PRIORITY as usize - k % 4) as u32;
                    n.msg_send_vectored(me, peer, &cut(&data, parts), prio)
                        .unwrap();
                }
            }
            let too_many = vec![&b"x"[..]; MAX_SLICES + 1];
            assert!(matches!(
                n.msg_send_vectored(me, peer, &too_many, 0),
                Err(McapiError::Parameter(_))
            ));
            let half = vec![0u8; MAX_PAYLOAD / 2 + 1];
            assert!(matches!(
                n.msg_send_vectored(me, peer, &[&half, &half], 0),
                Err(McapiError::MsgLimit { .. })
            ));
            n.msg_send(ctl, peer_ctl, b"sent", 0).unwrap();
            // Large ones, at the lowest priority (after the small ones of that priority),
            // as the receiver takes them.
            for (k, &s) in large.iter().enumerate() {
                let data = pattern(k, s);
                let lowest = u32::from(MIN_PRIORITY);
                n.msg_send_vectored(me, peer, &cut(&data, 7), lowest)
                    .unwrap();
            }
            assert_eq!(n.msg_recv(ctl).unwrap(), b"done");
        } else {
            assert_eq!(n.msg_recv(ctl).unwrap(), b"sent");
            // (The large ones may be arriving already.)
            assert!(n.msg_available(me).unwrap() >= sizes.len() * 4);
            // Highest priority first, and in sending order within a priority.
            let mut want: Vec<(u32, usize)> = Vec::new();
            for k in 0..sizes.len() {
                for _ in 0..4 {
                    want.push(((MIN_PRIORITY as usize - k % 4) as u32, k));
                }
            }
            want.sort_by_key(|&(p, _)| p);
            let mut buf = vec![0u8; MAX_PAYLOAD];
            for (i, &(_, k)) in want.iter().enumerate() {
                let got = n.msg_recv_into(me, &mut buf).unwrap();
                assert_eq!(got, sizes[k], "message {i}");
                assert!(buf[..got] == pattern(k, sizes[k])[..], "message {i}");
            }
            for (k, &s) in large.iter().enumerate() {
                let got = n.msg_recv_into(me, &mut buf).unwrap();
                assert!(buf[..got] == pattern(k, s)[..], "large message {k}");
            }
            assert_eq!(n.msg_available(me).unwrap(), 0);
            n.msg_send(ctl, peer_ctl, b"done", 0).unwrap();
        }
    });
});

both!(a_buffer_too_small_loses_nothing, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let h = channel(&n);
        let me = n.endpoint_create(1).unwrap();
        let peer = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        if n.id() == 0 {
            n.msg_send(me, peer, &pattern(1, 10_000), 0).unwrap();
            n.msg_send(me, peer, b"second", 0).unwrap();
            n.pktchan_send_vectored(h, &[b"pa", b"cket"]).unwrap();
            n.pktchan_send(h, &pattern(2, 300_000)).unwrap();
            assert_eq!(n.msg_recv(me).unwrap(), b"done");
        } else {
            while n.msg_available(me).unwrap() < 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut small = [0u8; 100];
            match n.msg_recv_into(me, &mut small) {
                Err(
                    e @ McapiError::Truncated {
                        size: 10_000,
                        capacity: 100,
                    },
                ) => assert_eq!(e.status(), Status::ErrMsgTruncated),
                other => panic!("{other:?}"),
            }
            assert_eq!(n.msg_available(me).unwrap(), 2, "nothing was taken");
            let mut big = vec![0u8; 10_000];
            assert_eq!(n.msg_recv_into(me, &mut big).unwrap(), 10_000);
            assert_eq!(big, pattern(1, 10_000));
            assert_eq!(n.msg_recv(me).unwrap(), b"second");

            let mut six = [0u8; 6];
            assert_eq!(n.pktchan_recv_into(h, &mut six).unwrap(), 6);
            assert_eq!(&six, b"packet");
            assert!(matches!(
                n.pktchan_recv_into(h, &mut six),
                Err(McapiError::Truncated {
                    size: 300_000,
                    capacity: 6
                })
            ));
            assert_eq!(n.chan_available(h).unwrap(), 1);
            let p = n.pktchan_recv(h).unwrap();
            assert_eq!(p, pattern(2, 300_000));
            n.recycle(p);
            // Nothing queued: the endpoint's timeout ends the wait.
            n.set_endpoint_timeout(me, Some(Duration::from_millis(30)))
                .unwrap();
            let t0 = Instant::now();
            assert!(matches!(
                n.msg_recv_into(me, &mut big),
                Err(McapiError::Timeout)
            ));
            assert!(t0.elapsed() >= Duration::from_millis(30));
            n.msg_send(me, peer, b"done", 0).unwrap();
        }
    });
});

/// A packet channel from node 0 to node 1 (ports 20).
fn channel(n: &Node) -> ChannelHandle {
    let ep = n.endpoint_create(20).unwrap();
    if n.id() == 0 {
        let r = n.endpoint_get(0, 1, 20, T).unwrap();
        let c = n.connect_i(ep, r, ChanKind::Packet).unwrap();
        n.wait(c, T).unwrap();
    }
    let dir = if n.id() == 0 {
        Direction::Send
    } else {
        Direction::Receive
    };
    n.open(ep, ChanKind::Packet, dir, T).unwrap()
}

both!(large_packets_under_back_pressure, |via| {
    let mut topo = topology(via, 2);
    // A small ring and window: packets are cut at the ring's fill level, and sends wait.
    topo.shm_ring_bytes = 256 << 10;
    topo.queue_depth = 3;
    run(&topo, |n| {
        let h = channel(&n);
        let sizes = |i: usize| [MAX_PAYLOAD, 300_000, 17, 65_536, 1][i % 5];
        if n.id() == 0 {
            let mut pending = Vec::new();
            for i in 0..40 {
                let data = pattern(i, sizes(i));
                let (a, b) = data.split_at(data.len() / 3);
                let r = n.pktchan_send_vectored_i(h, &[a, b]).unwrap();
                // The bytes were taken: the caller's buffer may change at once.
                drop(data);
                pending.push(r);
                if pending.len() > 6 {
                    n.wait(pending.remove(0), T).unwrap();
                }
            }
            for r in pending {
                n.wait(r, T).unwrap();
            }
            let c = n.close_i(h).unwrap();
            n.wait(c, T).unwrap();
        } else {
            let mut buf = vec![0u8; MAX_PAYLOAD];
            for i in 0..40 {
                if i % 2 == 0 {
                    let got = n.pktchan_recv_into(h, &mut buf).unwrap();
                    assert!(buf[..got] == pattern(i, sizes(i))[..], "packet {i}");
                } else {
                    let p = n.pktchan_recv(h).unwrap();
                    assert!(p == pattern(i, sizes(i)), "packet {i}");
                    n.recycle(p);
                }
            }
            assert!(matches!(
                n.pktchan_recv_into(h, &mut buf),
                Err(McapiError::ChanNotOpen)
            ));
            let c = n.close_i(h).unwrap();
            n.wait(c, T).unwrap();
        }
    });
});
