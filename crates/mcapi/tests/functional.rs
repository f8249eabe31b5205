//! The MCAPI semantics, each over both transports (nodes as threads of this process):
//! endpoints, messages of every size and priority, back-pressure, packet and scalar channels
//! of every width, wrong-type use, requests, wait_any, cancel, timeouts, and finalize with
//! traffic in flight. The C API over real processes is in `c_api.rs`.

mod common;
use common::*;
use kioku_mcapi::*;
use std::time::{Duration, Instant};

fn sync(n: &Node, me: EndpointId, peer: EndpointId) {
    n.msg_send(me, peer, b"sync", 0).unwrap();
    assert_eq!(n.msg_recv(me).unwrap(), b"sync");
}

both!(endpoints, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let other = 1 - n.id();
        let a = n.endpoint_create(5).unwrap();
        assert_eq!(a, EndpointId::new(n.id(), 5));
        assert!(matches!(
            n.endpoint_create(5),
            Err(McapiError::EndpointExists(_))
        ));
        assert!(matches!(
            n.endpoint_create(70000),
            Err(McapiError::PortInvalid { .. })
        ));
        let any1 = n.endpoint_create(PORT_ANY).unwrap();
        let any2 = n.endpoint_create(PORT_ANY).unwrap();
        assert_ne!(any1, any2);
        assert_ne!(any1.port, 5);
        // Getting a port the peer creates later waits for it.
        if n.id() == 0 {
            let t0 = Instant::now();
            let r = n.endpoint_get_i(0, other, 9).unwrap();
            assert_eq!(n.test(r).unwrap(), None);
            let peer9 = n.wait(r, T).unwrap().endpoint.unwrap();
            assert_eq!(peer9, EndpointId::new(other, 9));
            assert!(t0.elapsed() >= Duration::from_millis(50));
            // A port never created: the get times out, and the request is still there.
            let r = n.endpoint_get_i(0, other, 10).unwrap();
            assert!(matches!(
                n.wait(r, Some(Duration::from_millis(50))),
                Err(McapiError::Timeout)
            ));
            n.cancel(r).unwrap();
            assert!(matches!(n.wait(r, T), Err(McapiError::Cancelled)));
            assert!(matches!(n.wait(r, T), Err(McapiError::RequestInvalid)));
            assert!(matches!(
                n.endpoint_get(0, other, 11, Some(Duration::from_millis(30))),
                Err(McapiError::Timeout)
            ));
        } else {
            std::thread::sleep(Duration::from_millis(80));
            n.endpoint_create(9).unwrap();
        }
        assert!(matches!(
            n.endpoint_get(0, 7, 1, T),
            Err(McapiError::NodeInvalid { .. })
        ));
        assert!(matches!(
            n.endpoint_get(3, other, 1, T),
            Err(McapiError::DomainInvalid { .. })
        ));
        // Deleting: only local endpoints; then the value is invalid here and at the peer.
        let peer5 = n.endpoint_get(0, other, 5, T).unwrap();
        assert!(matches!(
            n.endpoint_delete(peer5),
            Err(McapiError::EndpointRemote(_))
        ));
        let gone = n.endpoint_create(6).unwrap();
        let peer6 = n.endpoint_get(0, other, 6, T).unwrap();
        sync(&n, a, peer5);
        n.endpoint_delete(gone).unwrap();
        assert!(matches!(
            n.endpoint_delete(gone),
            Err(McapiError::EndpointInvalid(_))
        ));
        assert!(matches!(
            n.msg_available(gone),
            Err(McapiError::EndpointInvalid(_))
        ));
        sync(&n, a, peer5);
        // A message to the deleted endpoint is refused by its node; later sends fail here.
        n.msg_send(a, peer6, b"to nobody", 0).unwrap();
        let t0 = Instant::now();
        loop {
            match n.msg_send(a, peer6, b"x", 0) {
                Err(McapiError::EndpointInvalid(e)) => {
                    assert_eq!(e, peer6);
                    break;
                }
                // The peer's refusal comes when its node gets to it: seconds on a loaded machine.
                Ok(()) => assert!(t0.elapsed() < Duration::from_secs(60), "never refused"),
                Err(e) => panic!("{e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        sync(&n, a, peer5);
    });
});

both!(endpoint_limit, |via| {
    let mut topo = topology(via, 1);
    topo.max_endpoints = 8;
    run(&topo, |n| {
        for p in 0..8 {
            n.endpoint_create(p).unwrap();
        }
        assert!(matches!(
            n.endpoint_create(8),
            Err(McapiError::EndpointLimit { max: 8 })
        ));
        n.endpoint_delete(EndpointId::new(0, 3)).unwrap();
        n.endpoint_create(PORT_ANY).unwrap();
    });
});

both!(messages_of_every_size, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let me = n.endpoint_create(1).unwrap();
        let peer = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        let mut sizes: Vec<usize> = vec![0, 1, 2, 3, 7, 23, 24, 25, 63, 64, 65, 4095, 4096, 4097];
        sizes.extend((1..20).map(|i| i * 52_429));
        sizes.push(MAX_PAYLOAD - 1);
        sizes.push(MAX_PAYLOAD);
        if n.id() == 0 {
            for (k, &s) in sizes.iter().enumerate() {
                let data: Vec<u8> = (0..s).map(|i| (i * 31 + k) as u8).collect();
                n.msg_send(me, peer, &data, 3).unwrap();
            }
            assert!(matches!(
                n.msg_send(me, peer, &vec![0u8; MAX_PAYLOAD + 1], 0),
                Err(McapiError::MsgLimit { .. })
            ));
            assert_eq!(n.msg_recv(me).unwrap(), b"all");
        } else {
            for (k, &s) in sizes.iter().enumerate() {
                let m = n.msg_recv(me).unwrap();
                assert_eq!(m.len(), s, "message {k}");
                assert!(
                    m.iter().enumerate().all(|(i, &b)| b == (i * 31 + k) as u8),
                    "message {k}"
                );
            }
            n.msg_send(me, peer, b"all", 0).unwrap();
        }
    });
});

both!(priorities_and_order, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let me = n.endpoint_create(1).unwrap();
        let sync_ep = n.endpoint_create(2).unwrap();
        if n.id() == 0 {
            let peer = n.endpoint_get(0, 1, 1, T).unwrap();
            // (Only node 0 looks node 1's up: node 0 may have finalized before node 1 would.)
            let peer_sync = n.endpoint_get(0, 1, 2, T).unwrap();
            // Lowest priority first, three of each.
            for p in (0..=MIN_PRIORITY as u32).rev() {
                for k in 0..3u8 {
                    n.msg_send(me, peer, &[p as u8, k], p).unwrap();
                }
            }
            assert!(matches!(
                n.msg_send(me, peer, b"x", 8),
                Err(McapiError::Priority(8))
            ));
            n.msg_send(sync_ep, peer_sync, b"sent", 0).unwrap();
        } else {
            assert_eq!(n.msg_recv(sync_ep).unwrap(), b"sent");
            assert_eq!(n.msg_available(me).unwrap(), 24);
            for p in 0..=MIN_PRIORITY {
                for k in 0..3u8 {
                    assert_eq!(n.msg_recv(me).unwrap(), [p, k]);
                }
            }
            assert_eq!(n.msg_available(me).unwrap(), 0);
        }
    });
});

both!(back_pressure, |via| {
    let mut topo = topology(via, 2);
    topo.queue_depth = 4;
    run(&topo, |n| {
        let me = n.endpoint_create(1).unwrap();
        let peer = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        let ctl = n.endpoint_create(2).unwrap();
        let peer_ctl = n.endpoint_get(0, 1 - n.id(), 2, T).unwrap();
        if n.id() == 0 {
            let mut reqs = Vec::new();
            for i in 0..4u8 {
                let r = n.msg_send_i(me, peer, &[i], 0).unwrap();
                assert!(!n.is_pending(r).unwrap(), "send {i} fits the queue");
                reqs.push(r);
            }
            for r in reqs {
                n.wait(r, T).unwrap();
            }
            // The fifth waits for room; a blocking send with a timeout times out.
            let fifth = n.msg_send_i(me, peer, &[4], 0).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            assert!(n.is_pending(fifth).unwrap());
            n.set_endpoint_timeout(me, Some(Duration::from_millis(40)))
                .unwrap();
            let t0 = Instant::now();
            assert!(matches!(
                n.msg_send(me, peer, &[99], 0),
                Err(McapiError::Timeout)
            ));
            assert!(t0.elapsed() >= Duration::from_millis(40));
            n.set_endpoint_timeout(me, None).unwrap();
            // Other endpoints of the same node are not held up.
            n.msg_send(ctl, peer_ctl, b"full", 0).unwrap();
            n.wait(fifth, T).unwrap();
            for i in 5..40u8 {
                n.msg_send(me, peer, &[i], 0).unwrap();
            }
            assert_eq!(n.msg_recv(ctl).unwrap(), b"done");
        } else {
            assert_eq!(n.msg_recv(ctl).unwrap(), b"full");
            assert_eq!(n.msg_available(me).unwrap(), 4);
            for i in 0..40u8 {
                assert_eq!(
                    n.msg_recv(me).unwrap(),
                    [i],
                    "the timed-out send left nothing"
                );
            }
            n.msg_send(ctl, peer_ctl, b"done", 0).unwrap();
        }
    });
});

/// Connect (by `connector`), open both sides, and return this node's handle.
fn channel(
    n: &Node,
    kind: ChanKind,
    connector: u32,
    sender: u32,
    receiver: u32,
) -> Option<ChannelHandle> {
    let me = n.id();
    let ep = if me == sender || me == receiver {
        Some(n.endpoint_create(20).unwrap())
    } else {
        None
    };
    if me == connector {
        let s = n.endpoint_get(0, sender, 20, T).unwrap();
        let r = n.endpoint_get(0, receiver, 20, T).unwrap();
        let c = n.connect_i(s, r, kind).unwrap();
        n.wait(c, T).unwrap();
    }
    let dir = if me == sender {
        Direction::Send
    } else if me == receiver {
        Direction::Receive
    } else {
        return None;
    };
    Some(n.open(ep.unwrap(), kind, dir, T).unwrap())
}

both!(packet_channels, |via| {
    let topo = topology(via, 3);
    run(&topo, |n| {
        // Node 2 connects node 0's sender to node 1's receiver.
        let h = channel(&n, ChanKind::Packet, 2, 0, 1);
        let ctl = n.endpoint_create(1).unwrap();
        match n.id() {
            0 => {
                let h = h.unwrap();
                for i in 0..300u32 {
                    let len = (i as usize * 37) % 9000;
                    let mut p = vec![(i % 251) as u8; len];
                    p.extend_from_slice(&i.to_le_bytes());
                    n.pktchan_send(h, &p).unwrap();
                }
                assert!(matches!(
                    n.pktchan_send(h, &vec![0; MAX_PAYLOAD + 1]),
                    Err(McapiError::PktLimit { .. })
                ));
                let r = n.pktchan_send_i(h, b"last").unwrap();
                n.wait(r, T).unwrap();
                let c = n.close_i(h).unwrap();
                n.wait(c, T).unwrap();
                assert!(matches!(
                    n.pktchan_send(h, b"x"),
                    Err(McapiError::ChanInvalid(_))
                ));
            }
            1 => {
                let h = h.unwrap();
                for i in 0..300u32 {
                    let p = n.pktchan_recv(h).unwrap();
                    let len = (i as usize * 37) % 9000;
                    assert_eq!(p.len(), len + 4);
                    assert_eq!(u32::from_le_bytes(p[len..].try_into().unwrap()), i);
                    assert!(p[..len].iter().all(|&b| b == (i % 251) as u8));
                }
                assert_eq!(n.pktchan_recv(h).unwrap(), b"last");
                // The sender closed: after what it sent, receives fail.
                let t0 = Instant::now();
                let after_close = n.pktchan_recv_i(h).and_then(|r| n.wait(r, T));
                assert!(
                    matches!(after_close, Err(McapiError::ChanNotOpen)),
                    "{after_close:?}"
                );
                assert!(t0.elapsed() < Duration::from_secs(10));
                assert_eq!(n.chan_available(h).unwrap(), 0);
                let c = n.close_i(h).unwrap();
                n.wait(c, T).unwrap();
                let peer_ctl = n.endpoint_get(0, 2, 1, T).unwrap();
                n.msg_send(ctl, peer_ctl, b"ok", 0).unwrap();
            }
            _ => assert_eq!(n.msg_recv(ctl).unwrap(), b"ok"),
        }
    });
});

both!(receiver_close_fails_the_sender, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let h = channel(&n, ChanKind::Packet, 0, 0, 1).unwrap();
        let ctl = n.endpoint_create(1).unwrap();
        let peer_ctl = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        if n.id() == 1 {
            assert_eq!(n.pktchan_recv(h).unwrap(), b"one");
            let c = n.close_i(h).unwrap();
            n.wait(c, T).unwrap();
            n.msg_send(ctl, peer_ctl, b"closed", 0).unwrap();
        } else {
            n.pktchan_send(h, b"one").unwrap();
            assert_eq!(n.msg_recv(ctl).unwrap(), b"closed");
            let t0 = Instant::now();
            loop {
                match n.pktchan_send(h, b"more") {
                    Err(McapiError::ChanNotOpen) => break,
                    // Until the peer's close arrives (seconds on a loaded machine).
                    Ok(()) => assert!(t0.elapsed() < Duration::from_secs(60), "never closed"),
                    Err(e) => panic!("{e}"),
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let c = n.close_i(h).unwrap();
            n.wait(c, T).unwrap();
            // Both sides closed: the endpoint can be deleted, or connected again.
            let ep = EndpointId::new(n.id(), 20);
            assert_eq!(n.endpoint_facts(ep).unwrap().1, 0);
            n.endpoint_delete(ep).unwrap();
        }
    });
});

both!(scalar_channels_of_every_width, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let h = channel(&n, ChanKind::Scalar, 1, 0, 1).unwrap();
        let widths = [1u8, 2, 4, 8];
        if n.id() == 0 {
            for round in 0..50u64 {
                for &w in &widths {
                    let v = (round * 0x0101_0101_0101_0101).wrapping_mul(w as u64 + 3);
                    n.sclchan_send(h, w, v & mask(w)).unwrap();
                }
            }
            n.sclchan_send(h, 8, 7).unwrap();
        } else {
            for round in 0..50u64 {
                for &w in &widths {
                    let v = (round * 0x0101_0101_0101_0101).wrapping_mul(w as u64 + 3);
                    assert_eq!(n.sclchan_recv(h, w).unwrap(), v & mask(w));
                }
            }
            // A width mismatch is an error and the scalar stays.
            let t0 = Instant::now();
            while n.chan_available(h).unwrap() == 0 {
                assert!(t0.elapsed() < Duration::from_secs(10));
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(matches!(
                n.sclchan_recv(h, 4),
                Err(McapiError::SclSize { sent: 8, asked: 4 })
            ));
            assert_eq!(n.sclchan_recv(h, 8).unwrap(), 7);
        }
    });
});

fn mask(w: u8) -> u64 {
    if w == 8 {
        u64::MAX
    } else {
        (1u64 << (w * 8)) - 1
    }
}

both!(wrong_type_channel_use, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let other = 1 - n.id();
        let e = n.endpoint_create(20).unwrap();
        let f = n.endpoint_create(21).unwrap();
        let ctl = n.endpoint_create(1).unwrap();
        let peer_ctl = n.endpoint_get(0, other, 1, T).unwrap();
        if n.id() == 0 {
            let pe = n.endpoint_get(0, other, 20, T).unwrap();
            let c = n.connect_i(e, pe, ChanKind::Scalar).unwrap();
            n.wait(c, T).unwrap();
            // Already connected, at either end.
            let c = n.connect_i(e, f, ChanKind::Packet).unwrap_err();
            assert!(matches!(c, McapiError::ChanConnected(_)));
            let pf = n.endpoint_get(0, other, 21, T).unwrap();
            let c = n.connect_i(f, pe, ChanKind::Packet).unwrap();
            assert!(matches!(n.wait(c, T), Err(McapiError::ChanConnected(_))));
            // The failed connect left f free: it connects elsewhere.
            let c = n.connect_i(f, pf, ChanKind::Packet).unwrap();
            n.wait(c, T).unwrap();
            // Opening with the wrong kind or direction.
            assert!(matches!(
                n.open_i(e, ChanKind::Packet, Direction::Send),
                Err(McapiError::ChanType(_))
            ));
            assert!(matches!(
                n.open_i(e, ChanKind::Scalar, Direction::Receive),
                Err(McapiError::ChanDirection(_))
            ));
            // An open before any connect waits; a second open of it is refused.
            let g = n.endpoint_create(22).unwrap();
            let pending = n.open_i(g, ChanKind::Packet, Direction::Send).unwrap();
            assert!(matches!(
                n.open_i(g, ChanKind::Packet, Direction::Send),
                Err(McapiError::ChanOpenPending(_))
            ));
            assert_eq!(n.test(pending).unwrap(), None);
            n.cancel(pending).unwrap();
            assert!(matches!(n.wait(pending, T), Err(McapiError::Cancelled)));
            let r = n.open_i(e, ChanKind::Scalar, Direction::Send).unwrap();
            let h = n.wait(r, T).unwrap().handle.unwrap();
            assert!(matches!(
                n.open_i(e, ChanKind::Scalar, Direction::Send),
                Err(McapiError::ChanOpen(_))
            ));
            // A scalar handle in packet calls, and the other way round.
            assert!(matches!(
                n.pktchan_send(as_packet(h), b"x"),
                Err(McapiError::ChanInvalid(_))
            ));
            assert!(matches!(
                n.sclchan_recv(as_recv(h), 8),
                Err(McapiError::ChanInvalid(_))
            ));
            n.sclchan_send(h, 2, 513).unwrap();
            let r = n.open_i(f, ChanKind::Packet, Direction::Send).unwrap();
            let hp = n.wait(r, T).unwrap().handle.unwrap();
            n.pktchan_send(hp, b"pkt").unwrap();
            assert_eq!(n.msg_recv(ctl).unwrap(), b"done");
        } else {
            let hs = n.open(e, ChanKind::Scalar, Direction::Receive, T).unwrap();
            assert_eq!(n.sclchan_recv(hs, 2).unwrap(), 513);
            let hp = n.open(f, ChanKind::Packet, Direction::Receive, T).unwrap();
            assert_eq!(n.pktchan_recv(hp).unwrap(), b"pkt");
            // A connected endpoint cannot be deleted.
            assert!(matches!(
                n.endpoint_delete(e),
                Err(McapiError::EndpointConnected(_))
            ));
            n.msg_send(ctl, peer_ctl, b"done", 0).unwrap();
        }
    });
});

fn as_packet(h: ChannelHandle) -> ChannelHandle {
    ChannelHandle {
        kind: ChanKind::Packet,
        ..h
    }
}

fn as_recv(h: ChannelHandle) -> ChannelHandle {
    ChannelHandle {
        dir: Direction::Receive,
        ..h
    }
}

both!(requests_wait_any_and_cancel, |via| {
    let mut topo = topology(via, 2);
    topo.max_requests = 64;
    run(&topo, |n| {
        let other = 1 - n.id();
        let h = channel(&n, ChanKind::Packet, 0, 1, 0).unwrap();
        let me = n.endpoint_create(1).unwrap();
        let peer = n.endpoint_get(0, other, 1, T).unwrap();
        if n.id() == 0 {
            // Mixed requests: a message receive, a packet receive, a get of a later port.
            let rm = n.msg_recv_i(me).unwrap();
            let rp = n.pktchan_recv_i(h).unwrap();
            let rg = n.endpoint_get_i(0, other, 30).unwrap();
            assert!(matches!(
                n.wait_any(&[rm, rp, rg], Some(Duration::from_millis(20))),
                Err(McapiError::Timeout)
            ));
            n.msg_send(me, peer, b"go", 0).unwrap();
            let mut seen = vec![];
            let mut left = vec![rm, rp, rg];
            while !left.is_empty() {
                let (i, c) = n.wait_any(&left, T).unwrap();
                let c = c.unwrap();
                seen.push((left[i] == rm, left[i] == rp, left[i] == rg, c));
                left.remove(i);
            }
            for (m, p, g, c) in seen {
                if m {
                    assert_eq!(c.data.unwrap(), b"msg");
                } else if p {
                    assert_eq!(c.data.unwrap(), b"pkt");
                } else if g {
                    assert_eq!(c.endpoint.unwrap(), EndpointId::new(other, 30));
                }
            }
            // A cancelled receive takes nothing: the next one gets the message.
            let r = n.msg_recv_i(me).unwrap();
            n.cancel(r).unwrap();
            assert!(matches!(n.cancel(r), Err(McapiError::RequestInvalid)));
            assert!(matches!(n.wait(r, T), Err(McapiError::Cancelled)));
            n.msg_send(me, peer, b"again", 0).unwrap();
            assert_eq!(n.msg_recv(me).unwrap(), b"after cancel");
            // A completed request reported once is gone.
            let r = n.msg_send_i(me, peer, b"x", 0).unwrap();
            assert!(n.test(r).unwrap().is_some());
            assert!(matches!(n.test(r), Err(McapiError::RequestInvalid)));
            // The request limit.
            let mut many = vec![];
            loop {
                match n.msg_recv_i(me) {
                    Ok(r) => many.push(r),
                    Err(McapiError::RequestLimit { max: 64 }) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(many.len(), 64);
            for r in many {
                n.cancel(r).unwrap();
                let _ = n.wait(r, T);
            }
            n.msg_send(me, peer, b"end", 0).unwrap();
        } else {
            assert_eq!(n.msg_recv(me).unwrap(), b"go");
            n.endpoint_create(30).unwrap();
            n.pktchan_send(h, b"pkt").unwrap();
            n.msg_send(me, peer, b"msg", 0).unwrap();
            assert_eq!(n.msg_recv(me).unwrap(), b"again");
            n.msg_send(me, peer, b"after cancel", 0).unwrap();
            assert_eq!(n.msg_recv(me).unwrap(), b"x");
            assert_eq!(n.msg_recv(me).unwrap(), b"end");
        }
    });
});

both!(receive_timeout_loses_nothing, |via| {
    let topo = topology(via, 2);
    run(&topo, |n| {
        let me = n.endpoint_create(1).unwrap();
        let peer = n.endpoint_get(0, 1 - n.id(), 1, T).unwrap();
        if n.id() == 1 {
            n.set_endpoint_timeout(me, Some(Duration::from_millis(30)))
                .unwrap();
            assert!(matches!(n.msg_recv(me), Err(McapiError::Timeout)));
            n.set_endpoint_timeout(me, None).unwrap();
            n.msg_send(me, peer, b"ready", 0).unwrap();
            assert_eq!(n.msg_recv(me).unwrap(), b"late");
        } else {
            assert_eq!(n.msg_recv(me).unwrap(), b"ready");
            n.msg_send(me, peer, b"late", 0).unwrap();
        }
    });
});

both!(finalize_with_traffic_in_flight, |via| {
    let topo = topology(via, 2);
    let t2 = topo.clone();
    let recv = std::thread::spawn(move || {
        let n = Node::initialize(0, 1, t2).unwrap();
        let me = n.endpoint_create(1).unwrap();
        let h = n
            .open(
                n.endpoint_create(20).unwrap(),
                ChanKind::Packet,
                Direction::Receive,
                T,
            )
            .unwrap();
        for i in 0..500u32 {
            assert_eq!(n.msg_recv(me).unwrap(), i.to_le_bytes());
        }
        for i in 0..200u32 {
            assert_eq!(n.pktchan_recv(h).unwrap(), i.to_le_bytes().repeat(1000));
        }
        // The sender is gone: the channel reports it (sender finalized), never a hang.
        match n.pktchan_recv(h) {
            Err(McapiError::Transmission { node: 0, .. }) | Err(McapiError::ChanNotOpen) => {}
            other => panic!("{other:?}"),
        }
        let peer = EndpointId::new(0, 1);
        assert!(matches!(
            n.msg_send(me, peer, b"x", 0),
            Err(McapiError::Transmission { node: 0, .. })
        ));
        assert_eq!(
            n.peer_state(0).unwrap(),
            PeerState::Lost(PeerLoss::Finalized)
        );
        n.finalize(Duration::from_secs(1)).unwrap();
    });
    let n = Node::initialize(0, 0, topo).unwrap();
    let me = n.endpoint_create(1).unwrap();
    let peer = n.endpoint_get(0, 1, 1, T).unwrap();
    let s = n.endpoint_create(20).unwrap();
    let pr = n.endpoint_get(0, 1, 20, T).unwrap();
    let c = n.connect_i(s, pr, ChanKind::Packet).unwrap();
    n.wait(c, T).unwrap();
    let h = n.open(s, ChanKind::Packet, Direction::Send, T).unwrap();
    let mut reqs = vec![];
    for i in 0..500u32 {
        reqs.push(n.msg_send_i(me, peer, &i.to_le_bytes(), 0).unwrap());
    }
    for i in 0..200u32 {
        reqs.push(n.pktchan_send_i(h, &i.to_le_bytes().repeat(1000)).unwrap());
    }
    // Finalize at once: what was accepted is delivered (pending sends still wait for credit,
    // so finalize gets what it can out; we wait for them first as an application must).
    for r in reqs {
        n.wait(r, T).unwrap();
    }
    n.finalize(Duration::from_secs(5)).unwrap();
    assert!(matches!(
        n.endpoint_create(5),
        Err(McapiError::NotInitialized)
    ));
    recv.join().unwrap();
});
