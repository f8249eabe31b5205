//! Conformance: libmemcached's memcapable against kioku-cache, and the same request scripts
//! sent to kioku-cache and to the real memcached (Debian's) must get the same replies.
//! (kioku-cache also takes the meta flags newer memcached versions added — `ms E`, `md x` —
//! which Debian 12's 1.6.18 refuses; the scripts use what both speak.)

mod common;

use std::process::Command;

use common::{Client, Server};

#[test]
fn memcapable_ascii_passes() {
    if Command::new("memccapable").arg("-?").output().is_err() {
        eprintln!(
            "SKIP memcapable_ascii_passes: memccapable missing (Debian package libmemcached-tools)"
        );
        return;
    }
    let server = Server::start(&["-t", "2"]);
    let out = Command::new("memccapable")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.addr.port().to_string(),
            "-a",
            "-t",
            "10",
        ])
        .output()
        .expect("run memccapable");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("All tests passed"),
        "memcapable:\n{text}"
    );
    assert!(text.matches("[pass]").count() >= 27, "{text}");
}

/// Requests whose replies are compared byte for byte (after masking cas values).
const SCRIPTS: &[&str] = &[
    // storage and retrieval
    "set a 5 0 3\r\nabc\r\nget a\r\ngets a\r\nadd a 0 0 1\r\nx\r\nadd b 0 0 1\r\ny\r\nget a b c\r\n",
    "replace zz 0 0 1\r\nx\r\nappend zz 0 0 1\r\nx\r\nprepend zz 0 0 1\r\nx\r\n",
    "set k 9 0 2\r\nmm\r\nappend k 0 0 2\r\nzz\r\nprepend k 0 0 2\r\naa\r\nget k\r\n",
    "cas nokey 0 0 1 5\r\nx\r\nset c 0 0 1\r\nx\r\ncas c 0 0 1 999999\r\ny\r\nget c\r\n",
    "set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr n 18446744073709551615\r\nincr nope 1\r\nset t 0 0 2\r\nab\r\nincr t 1\r\nincr n x\r\n",
    "set n 0 0 20\r\n18446744073709551615\r\nincr n 1\r\ndecr n 0\r\n",
    "delete nope\r\nset d 0 0 1\r\nx\r\ndelete d\r\ndelete d 0\r\ndelete d 5\r\ndelete d noreply\r\n",
    "touch nope 10\r\nset t 0 0 1\r\nx\r\ntouch t 100\r\ngat 100 t\r\ngats 0 t nope\r\ntouch t abc\r\n",
    "set e 0 -1 1\r\nx\r\nget e\r\nset f 0 1000 1\r\nx\r\nget f\r\n",
    "set q 0 0 1 noreply\r\nx\r\nadd q 0 0 1 noreply\r\ny\r\nincr q 1 noreply\r\nget q\r\n",
    "flush_all\r\nget a\r\nflush_all noreply\r\nflush_all 0\r\n",
    // errors
    "bogus\r\n\r\nget\r\nset x\r\nset x 0 0 -1\r\nset x abc 0 1\r\nset x 0 0 1\r\nxyz\r\nget x\r\n",
    "set k 0 0 3\r\nabcde\r\nget k\r\nms k 2\r\nabcd\r\n",
    "incr\r\nverbosity\r\nverbosity 1\r\nverbosity x\r\nversion_\r\ngets\r\ntouch\r\n",
    // meta
    "ms m 3 T0 F7\r\nabc\r\nmg m v f s t k Oxyz\r\nmg m\r\nmg none v\r\nmg none v q\r\nmn\r\n",
    "ms m 2 MS\r\nhi\r\nms m 2 ME\r\nho\r\nms m 1 MA\r\n!\r\nms m 1 MP\r\n<\r\nmg m v\r\nms new 1 MR\r\nx\r\n",
    "ms m 1 q\r\nx\r\nmd m q\r\nmd m\r\nmd m q\r\nmg m v\r\n",
    "ma cnt\r\nma cnt N0 J10\r\nma cnt v\r\nma cnt MD D3 v\r\nma cnt q\r\nmg cnt v\r\n",
    "ms b64 2 b\r\nhi\r\nmg YjY0 b v k\r\nms YjY0 2 b\r\nhi\r\nmg YjY0 b v k\r\n",
    "mg k Z\r\nms k abc\r\nms k 2 MZ\r\nhi\r\n",
    "ms x 1 T100\r\na\r\nmg x t v\r\nmg x T5 t\r\nmg x h\r\nmg x h\r\n",
    // meta cas, stale-while-revalidate and vivify-on-miss
    "ms w 1\r\na\r\nms w 1 C999999\r\nb\r\nmd w C999999\r\nmg w v\r\nms nw 1 C5\r\nb\r\n",
    "ms s 1\r\na\r\nmd s I T30\r\nmg s v c\r\nmg s v\r\nms s 1 I\r\nb\r\nmg s v\r\n",
    "mg v N30 v\r\nmg v N30 v\r\nms v 1\r\nz\r\nmg v v\r\nmg v v s\r\n",
    "ma m N0 J5 MI v\r\nma m MX\r\nma m D7 C1\r\n",
    // recache below a remaining TTL (R): the first client under it wins, the next sees Z
    "ms r 1 T10\r\na\r\nmg r R5 v\r\nmg r R30 v t\r\nmg r R30 v\r\nms r 1 T0\r\nb\r\nmg r R30\r\nmg r Rx\r\n",
    "ms o 1 T100\r\na\r\nmg o T5 R30 t\r\nms p 1 T100\r\na\r\nmg p R30 T5 t\r\nmg p R30 t\r\nmg nope R30\r\n",
];

fn exchange(c: &mut Client, script: &str) -> String {
    c.send(script.as_bytes());
    c.send(b"mn\r\n");
    let mut out = String::new();
    loop {
        let line = c.line();
        if line == "MN" {
            break;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Mask what legitimately differs: cas uniques and the version string.
fn mask(reply: &str) -> String {
    reply
        .lines()
        .map(|l| {
            let words: Vec<String> = l
                .split(' ')
                .enumerate()
                .map(|(i, w)| {
                    if l.starts_with("VALUE") && i == 4 {
                        "CAS".into()
                    } else if !l.starts_with("VALUE")
                        && i > 0
                        && w.starts_with('c')
                        && w[1..].parse::<u64>().is_ok()
                    {
                        "cCAS".into()
                    } else {
                        w.into()
                    }
                })
                .collect();
            let l = words.join(" ");
            if l.starts_with("VERSION") {
                "VERSION".into()
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn replies_match_memcached() {
    let Some(memcached) = Server::memcached(&[]) else {
        eprintln!("SKIP replies_match_memcached: memcached missing (Debian package memcached)");
        return;
    };
    let kioku = Server::start(&[]);
    let mut failures = Vec::new();
    for (i, script) in SCRIPTS.iter().enumerate() {
        // A fresh key space per script.
        let mut m = memcached.client();
        let mut k = kioku.client();
        exchange(&mut m, "flush_all\r\n");
        exchange(&mut k, "flush_all\r\n");
        let want = mask(&exchange(&mut m, script));
        let got = mask(&exchange(&mut k, script));
        if want != got {
            failures.push(format!(
                "script {i}: {script:?}\n--- memcached:\n{want}\n--- kioku:\n{got}\n"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
