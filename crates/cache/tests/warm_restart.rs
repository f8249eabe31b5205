//! Warm restart: a kioku-cache with --pool is SIGKILLed during a write load; restarted on the
//! same pool it serves every item of its last checkpoint — value, flags, expiry kept against
//! the wall clock, cas uniques that keep working — and nothing written after it.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, Server};

fn stat(c: &mut Client, name: &str) -> u64 {
    c.send(b"stats\r\n");
    let mut v = None;
    loop {
        let l = c.line();
        if l == "END" {
            break;
        }
        if let Some(x) = l.strip_prefix(&format!("STAT {name} ")) {
            v = x.parse().ok();
        }
    }
    v.unwrap_or_else(|| panic!("no stat {name}"))
}

fn start(pool: &Path) -> Server {
    Server::start(&[
        "-m",
        "64",
        "-t",
        "2",
        "--checkpoint-interval",
        "0",
        "--pool",
        pool.to_str().unwrap(),
    ])
}

fn signal(server: &Server, sig: i32) {
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(server.child.id() as i32, sig) }, 0);
}

/// Per key: every version sent, with whether and when it was acknowledged.
#[derive(Default)]
struct Log {
    sent: Vec<(u32, Instant)>,
    acked: Vec<(u32, Instant)>,
}

fn value_of(key: u32, version: u32) -> Vec<u8> {
    let len = 50 + (key as usize * 131 + version as usize * 17) % 3000;
    let mut v = format!("{key}:{version}:").into_bytes();
    v.resize(len, b'a' + (version % 26) as u8);
    v
}

#[test]
fn sigkill_under_load_restarts_with_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("cache.pool");
    let server = start(&pool);
    let mut c = server.client();
    assert_eq!(c.set("short", 7, 2, b"expires soon"), "STORED");
    assert_eq!(c.set("long", 8, 100, b"expires later"), "STORED");

    let logs: Arc<Mutex<HashMap<u32, Log>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u32)
        .map(|w| {
            let (logs, stop, addr) = (logs.clone(), stop.clone(), server.addr);
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut version = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    version += 1;
                    for k in 0..200u32 {
                        let key = w * 1000 + k;
                        let v = value_of(key, version);
                        logs.lock()
                            .unwrap()
                            .entry(key)
                            .or_default()
                            .sent
                            .push((version, Instant::now()));
                        // A connection cut by the SIGKILL ends the writer.
                        match c.try_set(&format!("k{key}"), key, 0, &v) {
                            Some(r) if r == "STORED" => {
                                logs.lock()
                                    .unwrap()
                                    .get_mut(&key)
                                    .unwrap()
                                    .acked
                                    .push((version, Instant::now()));
                            }
                            _ => return,
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let epoch = stat(&mut c, "checkpoint_epoch");
    signal(&server, libc::SIGUSR1);
    while stat(&mut c, "checkpoint_epoch") == epoch {
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = Instant::now();
    assert_eq!(
        stat(&mut c, "evictions"),
        0,
        "the load fits in -m: every item must survive"
    );
    // Keep writing after the checkpoint, then crash.
    std::thread::sleep(Duration::from_millis(300));
    signal(&server, libc::SIGKILL);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.join();
    }
    let crashed_at = Instant::now();
    drop(c);
    drop(server);

    let server = start(&pool);
    let mut c = server.client();
    let logs = logs.lock().unwrap();
    assert!(logs.len() >= 3, "the writers wrote");
    let mut checked = 0;
    for (key, log) in logs.iter() {
        // The checkpoint holds a version acknowledged before the signal or a later one sent
        // before the checkpoint completed — never an older one, never one sent after it.
        let floor = log
            .acked
            .iter()
            .filter(|(_, t)| *t < t0)
            .map(|(v, _)| *v)
            .max();
        let ceiling = log
            .sent
            .iter()
            .filter(|(_, t)| *t < t1)
            .map(|(v, _)| *v)
            .max();
        let got = c.get(&format!("k{key}"));
        match (floor, got) {
            (None, None) => {}
            (Some(f), None) => {
                panic!("k{key}: version {f} was acknowledged before the checkpoint and is gone")
            }
            (_, Some((value, flags))) => {
                assert_eq!(flags, *key, "k{key}: flags");
                let text = String::from_utf8_lossy(
                    &value[..value
                        .iter()
                        .take(24)
                        .position(|&b| b.is_ascii_alphabetic())
                        .unwrap_or(0)],
                )
                .into_owned();
                let version: u32 = text.split(':').nth(1).unwrap().parse().unwrap();
                assert_eq!(
                    value,
                    value_of(*key, version),
                    "k{key}: a torn or foreign value"
                );
                assert!(
                    floor.is_none_or(|f| version >= f),
                    "k{key}: version {version} older than acknowledged {floor:?}"
                );
                assert!(
                    ceiling.is_some_and(|c| version <= c),
                    "k{key}: version {version} written after the checkpoint"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "checked {checked} items");
    // Expiry is kept against the wall clock: "short" (2 s) is gone once 2 s have passed since
    // it was set, whatever the downtime; "long" keeps its remaining time.
    let since_crash = crashed_at.elapsed();
    std::thread::sleep(Duration::from_secs(3).saturating_sub(since_crash));
    assert_eq!(c.get("short"), None);
    assert_eq!(c.get("long"), Some((b"expires later".to_vec(), 8)));
    let ttl: i64 = c
        .cmd("mg long t")
        .trim_start_matches("HD t")
        .parse()
        .unwrap();
    assert!((90..=98).contains(&ttl), "remaining ttl {ttl}");
    // cas keeps working, and new uniques do not reuse old ones.
    c.send(b"gets long\r\n");
    let head = c.line();
    let unique: u64 = head.split(' ').nth(4).unwrap().parse().unwrap();
    let _ = c.bytes("expires later".len() + 2);
    assert_eq!(c.line(), "END");
    c.send(format!("cas long 8 100 3 {unique}\r\nnew\r\n").as_bytes());
    assert_eq!(c.line(), "STORED");
    c.send(format!("cas long 8 100 3 {unique}\r\nold\r\n").as_bytes());
    assert_eq!(c.line(), "EXISTS");
    assert!(stat(&mut c, "restored_items") as usize >= checked);
}

#[test]
fn a_pool_made_with_other_settings_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("cache.pool");
    {
        let server = start(&pool);
        let mut c = server.client();
        assert_eq!(c.set("k", 0, 0, b"v"), "STORED");
        signal(&server, libc::SIGTERM); // a last checkpoint, then exit
        let mut child = server;
        let status = child.child.wait().unwrap();
        assert!(status.success());
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kioku-cache"))
        .args(["-p", "0", "-m", "128", "--pool", pool.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-m"), "{err}");
    // With the right settings the item is there (the clean exit checkpointed it).
    let server = start(&pool);
    assert_eq!(server.client().get("k"), Some((b"v".to_vec(), 0)));
}

#[test]
fn killed_before_its_first_checkpoint_restarts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("cache.pool");
    {
        let server = start(&pool);
        let mut c = server.client();
        assert_eq!(c.set("k", 0, 0, b"v"), "STORED");
        signal(&server, libc::SIGKILL);
        let mut child = server;
        child.child.wait().unwrap();
    }
    // No checkpoint was taken: the pool holds nothing, and the server starts on it empty
    // (not refusing it as damaged).
    let server = start(&pool);
    let mut c = server.client();
    assert_eq!(c.get("k"), None);
    assert_eq!(c.set("k2", 0, 0, b"v2"), "STORED");
    assert_eq!(c.get("k2"), Some((b"v2".to_vec(), 0)));
}

#[test]
fn hot_placement_with_a_pool_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("cache.pool");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kioku-cache"))
        .args(["-p", "0", "--hot-mb", "4", "--pool", pool.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--hot-mb with --pool"), "{err}");
    assert!(!pool.exists(), "nothing was created");
}

#[test]
fn kioku_checkpoint_requests_by_pool_and_by_pid_are_answered_once_durable() {
    use kioku_run::control::{request_checkpoint, Target};
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("cache.pool");
    let server = start(&pool);
    let mut c = server.client();
    assert_eq!(c.set("k", 5, 0, b"asked for"), "STORED");
    let answer = request_checkpoint(Target::Pool(&pool), Duration::from_secs(30))
        .expect("a checkpoint by --pool");
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(v["epoch"], 1, "{answer}");
    assert_eq!(stat(&mut c, "checkpoint_epoch"), 1);
    assert_eq!(c.set("k2", 0, 0, b"later"), "STORED");
    let answer = request_checkpoint(
        Target::Pid(server.child.id() as i32),
        Duration::from_secs(30),
    )
    .expect("a checkpoint by pid");
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(v["epoch"], 2, "{answer}");
    // Both are durable: after SIGKILL, the restart has them.
    signal(&server, libc::SIGKILL);
    let mut child = server;
    child.child.wait().unwrap();
    let server = start(&pool);
    let mut c = server.client();
    assert_eq!(c.get("k"), Some((b"asked for".to_vec(), 5)));
    assert_eq!(c.get("k2"), Some((b"later".to_vec(), 0)));
}
