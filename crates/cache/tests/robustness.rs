//! Many clients at once, hostile input, memory limits: the server answers with memcached's
//! errors, stays up, and loses nothing it acknowledged.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::{Client, Server};

#[test]
fn concurrent_writers_never_tear_values_and_counters_are_exact() {
    let server = Arc::new(Server::start(&["-t", "4"]));
    let mut c = server.client();
    assert_eq!(c.set("counter", 0, 0, b"0"), "STORED");
    let (threads, rounds) = (8u64, 400u64);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let server = server.clone();
            std::thread::spawn(move || {
                let mut c = server.client();
                for i in 0..rounds {
                    // Each value is one byte repeated: a torn value would mix bytes.
                    let byte = b'a' + ((t + i) % 26) as u8;
                    let len = 100 + ((t * 7919 + i * 104_729) % 20_000) as usize;
                    assert_eq!(c.set("shared", t as u32, 0, &vec![byte; len]), "STORED");
                    if let Some((v, flags)) = c.get("shared") {
                        assert!(v.iter().all(|&b| b == v[0]), "torn value");
                        assert!(u64::from(flags) < threads);
                    }
                    let r = c.cmd("incr counter 1");
                    assert!(r.parse::<u64>().is_ok(), "{r}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (v, _) = c.get("counter").unwrap();
    assert_eq!(
        String::from_utf8(v).unwrap(),
        (threads * rounds).to_string()
    );
}

#[test]
fn cas_conflicts_let_exactly_one_writer_win() {
    let server = Arc::new(Server::start(&[]));
    let mut c = server.client();
    assert_eq!(c.set("cas", 0, 0, b"0"), "STORED");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let server = server.clone();
            std::thread::spawn(move || {
                let mut c = server.client();
                let mut wins = 0;
                while wins < 50 {
                    c.send(b"gets cas\r\n");
                    let head = c.line();
                    let parts: Vec<&str> = head.split(' ').collect();
                    let n: usize = parts[3].parse().unwrap();
                    let unique = parts[4].to_string();
                    let v: u64 = String::from_utf8(c.bytes(n + 2)[..n].to_vec())
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert_eq!(c.line(), "END");
                    let next = (v + 1).to_string();
                    c.send(format!("cas cas 0 0 {} {unique}\r\n{next}\r\n", next.len()).as_bytes());
                    match c.line().as_str() {
                        "STORED" => wins += 1,
                        "EXISTS" => {}
                        other => panic!("{other}"),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        c.get("cas").unwrap().0,
        b"200",
        "every successful cas counted once"
    );
}

#[test]
fn bad_input_gets_errors_and_the_server_stays_up() {
    let server = Server::start(&["-I", "64k"]);
    let mut c = server.client();
    assert_eq!(c.set("keep", 1, 0, b"safe"), "STORED");
    assert_eq!(c.cmd("bogus command"), "ERROR");
    assert_eq!(
        c.cmd("set k 0 0 notanumber"),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(
        c.cmd(&format!("get {}", "x".repeat(251))),
        "CLIENT_ERROR bad command line format"
    );
    // A value over -I: refused, its bytes discarded, the connection still in step.
    let big = vec![b'z'; 70_000];
    c.send(format!("set k 0 0 {}\r\n", big.len()).as_bytes());
    c.send(&big);
    c.send(b"\r\n");
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache");
    assert_eq!(c.cmd("version").split(' ').next(), Some("VERSION"));
    // A value not followed by \r\n.
    c.send(b"set k 0 0 3\r\nabcde\r\n");
    assert_eq!(c.line(), "CLIENT_ERROR bad data chunk");
    assert_eq!(
        c.line(),
        "ERROR",
        "the rest of the line is a (empty) command, as in memcached"
    );
    // Binary garbage (no newline for more than the line limit): the connection is closed.
    let mut g = server.client();
    let garbage: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
        .filter(|&b| b != b'\n')
        .collect();
    let _ = g.stream.write_all(&garbage);
    assert!(g.closed(), "a line over the limit closes the connection");
    // A client that disconnects in the middle of a value stores nothing.
    {
        let mut d = TcpStream::connect(server.addr).unwrap();
        d.write_all(b"set half 0 0 1000\r\nonly part of it")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.get("half"), None);
    assert_eq!(c.get("keep"), Some((b"safe".to_vec(), 1)), "nothing lost");
}

#[test]
fn memory_limit_evicts_least_recently_used_and_m_refuses() {
    let server = Server::start(&["-m", "8"]);
    let mut c = server.client();
    let value = vec![b'v'; 4000];
    assert_eq!(c.set("hot", 0, 0, &value), "STORED");
    for i in 0..10_000 {
        assert_eq!(c.set(&format!("k{i}"), 0, 0, &value), "STORED");
        if i % 100 == 0 {
            assert!(
                c.get("hot").is_some(),
                "a recently read item is not evicted"
            );
        }
    }
    assert!(c.get("k0").is_none(), "the oldest went");
    assert!(c.get("k9999").is_some());
    c.send(b"stats\r\n");
    let mut evictions = 0u64;
    let mut bytes = 0u64;
    loop {
        let l = c.line();
        if l == "END" {
            break;
        }
        if let Some(n) = l.strip_prefix("STAT evictions ") {
            evictions = n.parse().unwrap();
        }
        if let Some(n) = l.strip_prefix("STAT bytes ") {
            bytes = n.parse().unwrap();
        }
    }
    assert!(evictions > 7000, "evictions {evictions}");
    assert!(bytes <= 8 << 20, "bytes {bytes} within -m");

    let server = Server::start(&["-m", "4", "-M"]);
    let mut c = server.client();
    let mut refused = false;
    for i in 0..2000 {
        let r = c.set(&format!("k{i}"), 0, 0, &value);
        if r != "STORED" {
            assert_eq!(r, "SERVER_ERROR out of memory storing object");
            refused = true;
            break;
        }
    }
    assert!(refused, "-M refuses when full");
    assert_eq!(
        c.get("k0").map(|v| v.0.len()),
        Some(4000),
        "nothing evicted under -M"
    );
}

#[test]
fn out_of_descriptors_the_server_pauses_accepting_and_resumes() {
    // 24 descriptors: what the server needs itself (about 10 with -t 1) and a dozen clients.
    let server = Server::start_with(&["-t", "1"], Some(24));
    let mut admin = server.client();
    assert_eq!(admin.stat("accepting_conns"), 1);
    // Connect until a client is not served: the server took every descriptor it has and left
    // that one in the listen queue. (Clients after it may not even complete their handshake:
    // the paused listener's queue is shrunk, as memcached does.)
    let mut served = Vec::new();
    let waiting = loop {
        assert!(
            served.len() < 30,
            "a server limited to 24 descriptors served 30 clients"
        );
        let s = TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).unwrap();
        let mut c = Client::from_stream(s);
        c.send(b"version\r\n");
        c.stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut reply = [0u8; 64];
        let mut n = c.stream.read(&mut reply).unwrap_or(0);
        if n == 0 && admin.stat("accepting_conns") == 1 {
            // Accepted, only slow (a loaded machine).
            c.stream
                .set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            n = c.stream.read(&mut reply).unwrap_or(0);
        }
        if n == 0 {
            break c;
        }
        assert!(reply.starts_with(b"VERSION "));
        served.push(c);
    };
    assert!(served.len() >= 3, "served only {} clients", served.len());
    assert_eq!(admin.stat("accepting_conns"), 0);
    assert!(admin.stat("listen_disabled_num") >= 1);
    // Paused, it neither spins nor stops serving the connections it has.
    let cpu0 = cpu_seconds(server.child.id());
    std::thread::sleep(Duration::from_secs(1));
    let cpu = cpu_seconds(server.child.id()) - cpu0;
    assert!(cpu < 0.3, "a paused server used {cpu} s of CPU in 1 s");
    assert_eq!(served[0].set("k", 0, 0, b"v"), "STORED");
    // A client leaves: the waiting one is accepted and gets its reply.
    drop(served.pop());
    drop(served.pop());
    let mut waiting = waiting;
    waiting
        .stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(waiting.line().starts_with("VERSION "));
    assert_eq!(waiting.get("k"), Some((b"v".to_vec(), 0)));
    assert!(admin.stat("time_in_listen_disabled_us") > 0);
}

/// User + system CPU seconds of process `pid` so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / tick
}

// 10,000 idle connections cost the server little, and one over `-c` is refused in words.
// (This test was once ignored as failing only in `cargo test --workspace`: it dropped 59 of its
// 60 extra connections before the server had accepted them all, so the server could see them
// close and count the last one under the limit. The build only changed the odds of that race.)
#[test]
fn ten_thousand_idle_connections_and_the_connection_limit() {
    // The test process needs the descriptors too.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid rlimit struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if lim.rlim_max < 10_300 {
        eprintln!(
            "SKIP ten_thousand_idle_connections: RLIMIT_NOFILE hard limit {} < 10300",
            lim.rlim_max
        );
        return;
    }
    lim.rlim_cur = lim.rlim_max.min(20_000);
    // SAFETY: as above.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    let server = Server::start(&["-c", "10050"]);
    let idle: Vec<TcpStream> = (0..10_000)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    let mut c = server.client();
    assert_eq!(c.set("k", 0, 0, b"v"), "STORED");
    assert_eq!(c.get("k"), Some((b"v".to_vec(), 0)));
    // Wait until the server has accepted them all: 10,000 connections made at once overflow
    // the listen backlog on a loaded machine, and a connection whose handshake the server
    // dropped is accepted only after the kernel's SYN-ACK retries (seconds, doubling).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let current = c.stat("curr_connections");
        if current >= 10_001 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server accepted only {current} of 10,001 connections in 120 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Over the limit: an error line, then closed. Every extra connection stays open until the
    // last one has its answer, so that the server counts them all.
    let mut extra: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(server.addr).unwrap())
        .collect();
    let last = extra.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut reply = String::new();
    let read = last.read_to_string(&mut reply);
    assert_eq!(
        reply,
        "ERROR Too many open connections\r\n",
        "read {read:?}; server: curr {} total {} rejected {} listen_disabled {}",
        c.stat("curr_connections"),
        c.stat("total_connections"),
        c.stat("rejected_connections"),
        c.stat("listen_disabled_num")
    );
    // 10,001 + 49 fill `-c 10050`: the other 11 extra connections were refused.
    assert_eq!(c.stat("rejected_connections"), 11);
    drop(extra);
    drop(idle);
    let mut again = Client::connect(server.addr);
    assert_eq!(again.get("k"), Some((b"v".to_vec(), 0)));
}
