//! Accuracy of the accessed-page tracker against a known truth: a toucher (a thread, or another
//! process for the remote backend) reads a chosen hot set — a contiguous third in order
//! (`sequential`), a random third in random order (`random`), or a random third plus rare reads
//! anywhere (`skewed`: six random pages every eighth pass) — while the tracker samples. After six rotations a page counts as found
//! hot when it was observed at least twice and accessed in at least half of its observations.
//!
//! Bounds asserted, for every backend and pattern: precision ≥ 0.95 and recall ≥ 0.90.
//! `KIOKU_HOT_SOAK=1` (`make soak-hugepage`) runs 65,536 pages and five hot sets per pattern. The
//! backends observe accesses exactly (a fault per sampled page), so misses come only from a
//! toucher that was not scheduled during a whole sampling period on a loaded machine.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Mapping;
use kioku_track::{
    page_size, AccessOptions, AccessTracker, BackendKind, PageCount, PageRange, PageTracker,
    TrackError,
};

/// Pages of the arena: 6,144 (24 MiB); `KIOKU_HOT_SOAK=1` (`make soak-hugepage`): 65,536.
fn pages() -> usize {
    if soak() {
        65536
    } else {
        6144
    }
}

fn soak() -> bool {
    std::env::var_os("KIOKU_HOT_SOAK").is_some()
}

/// Hot sets per pattern: one, or five seeds in the soak.
fn seeds() -> Vec<u64> {
    if soak() {
        vec![7, 11, 13, 17, 19]
    } else {
        vec![7]
    }
}

const PERIOD: Duration = Duration::from_millis(20);
const ROTATIONS: u64 = 6;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn hot_set(pattern: &str, seed: u64) -> Vec<usize> {
    match pattern {
        "sequential" => (pages() / 3..2 * pages() / 3).collect(),
        _ => {
            let mut rng = Rng(seed | 1);
            let mut all: Vec<usize> = (0..pages()).collect();
            for i in (1..all.len()).rev() {
                all.swap(i, rng.next() as usize % (i + 1));
            }
            all.truncate(pages() / 3);
            all.sort_unstable();
            all
        }
    }
}

/// Touches `hot` (page indices of the region at `addr`) as `pattern` says until `stop`.
fn toucher(addr: usize, hot: Vec<usize>, pattern: &'static str, stop: Arc<AtomicBool>) {
    let ps = page_size();
    let mut rng = Rng(99);
    let mut order = hot;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        if pattern != "sequential" {
            for i in (1..order.len()).rev() {
                order.swap(i, rng.next() as usize % (i + 1));
            }
        }
        for &i in &order {
            // SAFETY: page i lies inside the test's mapping, which outlives the toucher.
            unsafe { std::ptr::read_volatile((addr + i * ps) as *const u8) };
        }
        if pattern == "skewed" && round.is_multiple_of(8) {
            for _ in 0..pages() / 1000 {
                let i = rng.next() as usize % pages();
                // SAFETY: as above.
                unsafe { std::ptr::read_volatile((addr + i * ps) as *const u8) };
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn options() -> AccessOptions {
    AccessOptions {
        sample_pages: pages() / 4,
        cpu_budget: 0.0,
        ..AccessOptions::default()
    }
}

/// Scans until `ROTATIONS` rotations are done; returns the pages found hot.
fn sample(t: &mut AccessTracker, range: PageRange) -> BTreeSet<usize> {
    let mut out = Vec::new();
    let mut scans = 0;
    while t.last_scan().rotations < ROTATIONS {
        std::thread::sleep(PERIOD);
        t.scan_into(&mut out).expect("scan");
        if std::env::var_os("ACCESS_DEBUG").is_some() {
            eprintln!("{:?}", t.last_scan());
        }
        scans += 1;
        assert!(
            scans < 400,
            "rotations do not complete: {:?}",
            t.last_scan()
        );
    }
    let mut counts: Vec<PageCount> = Vec::new();
    t.counts(range, &mut counts);
    let ps = page_size();
    counts
        .iter()
        .filter(|c| c.seen >= 2 && 2 * c.hits >= c.seen)
        .map(|c| (c.addr - range.start) / ps)
        .collect()
}

fn check(what: &str, found: &BTreeSet<usize>, truth: &[usize]) {
    let truth: BTreeSet<usize> = truth.iter().copied().collect();
    let tp = found.intersection(&truth).count() as f64;
    let precision = tp / found.len().max(1) as f64;
    let recall = tp / truth.len() as f64;
    eprintln!(
        "{what}: {} found, {} hot: precision {precision:.3}, recall {recall:.3}",
        found.len(),
        truth.len()
    );
    assert!(precision >= 0.95, "{what}: precision {precision:.3} < 0.95");
    assert!(recall >= 0.90, "{what}: recall {recall:.3} < 0.90");
}

fn memfd(len: usize) -> std::fs::File {
    // SAFETY: memfd_create with a static name; the fd is owned by the File.
    let fd = unsafe { libc::memfd_create(c"accessed-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a new descriptor owned from here on.
    let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    f.set_len(len as u64).unwrap();
    f
}

fn in_process(kind: BackendKind, pattern: &'static str) {
    for seed in seeds() {
        in_process_seed(kind, pattern, seed);
    }
}

fn in_process_seed(kind: BackendKind, pattern: &'static str, seed: u64) {
    let ps = page_size();
    let len = pages() * ps;
    let file = memfd(len);
    let m = match kind {
        BackendKind::Refault => Mapping::shared(&file, len),
        _ => Mapping::anon(len, 1, false),
    };
    for i in 0..pages() {
        // SAFETY: page i lies inside the mapping.
        unsafe { std::ptr::write_volatile((m.addr + i * ps) as *mut u8, 1) };
    }
    let range = PageRange::new(m.addr, m.addr + len);
    let mut t = AccessTracker::builder()
        .backend(kind)
        .options(options())
        .build()
        .expect("tracker");
    t.track(range).expect("track");
    let hot = hot_set(pattern, seed);
    let stop = Arc::new(AtomicBool::new(false));
    let th = {
        let (hot, stop) = (hot.clone(), stop.clone());
        let addr = m.addr;
        std::thread::spawn(move || toucher(addr, hot, pattern, stop))
    };
    let found = sample(&mut t, range);
    stop.store(true, Ordering::Relaxed);
    th.join().unwrap();
    check(&format!("{kind:?}/{pattern}"), &found, &hot);
    // Untracking restores every armed page: the whole range reads and writes normally.
    t.untrack(range).unwrap();
    for i in 0..pages() {
        // SAFETY: page i lies inside the mapping.
        unsafe { std::ptr::write_volatile((m.addr + i * ps) as *mut u8, 2) };
    }
    drop(file);
}

#[test]
fn refault_finds_a_sequential_hot_set() {
    in_process(BackendKind::Refault, "sequential");
}

#[test]
fn refault_finds_a_random_hot_set() {
    in_process(BackendKind::Refault, "random");
}

#[test]
fn refault_finds_a_skewed_hot_set() {
    in_process(BackendKind::Refault, "skewed");
}

#[test]
fn protnone_finds_a_sequential_hot_set() {
    in_process(BackendKind::ProtNone, "sequential");
}

#[test]
fn protnone_finds_a_random_hot_set() {
    in_process(BackendKind::ProtNone, "random");
}

#[test]
fn protnone_finds_a_skewed_hot_set() {
    in_process(BackendKind::ProtNone, "skewed");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn remote(pattern: &str) {
    if !is_root() {
        eprintln!("!!!!! SKIPPING remote refault/{pattern}: needs root (process_madvise on another process) !!!!!");
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_track-test-child"))
        .args(["hot", &pages().to_string(), pattern, "11"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn track-test-child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    let w: Vec<usize> = ready
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (pid, addr, len) = (w[0] as i32, w[1], w[2]);
    let hot: Vec<usize> = lines
        .next()
        .unwrap()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let range = PageRange::new(addr, addr + len);
    let mut t = AccessTracker::builder()
        .process(pid)
        .options(options())
        .build()
        .expect("remote tracker");
    assert_eq!(t.backend(), BackendKind::Refault);
    t.track(range).expect("track the child's memfd");
    let found = sample(&mut t, range);
    check(&format!("remote Refault/{pattern}"), &found, &hot);
    drop(t);
    child.stdin.take().unwrap().write_all(b"stop\n").unwrap();
    assert!(child.wait().unwrap().success());
}

#[test]
fn remote_refault_finds_a_random_hot_set() {
    remote("random");
}

#[test]
fn remote_refault_finds_a_sequential_hot_set() {
    remote("sequential");
}

#[test]
fn remote_refault_finds_a_skewed_hot_set() {
    remote("skewed");
}

#[test]
fn refault_refuses_private_memory_and_holes() {
    let ps = page_size();
    let m = Mapping::anon(16 * ps, 1, false);
    let mut t = AccessTracker::builder()
        .backend(BackendKind::Refault)
        .build()
        .unwrap();
    let err = t
        .track(PageRange::new(m.addr, m.addr + 16 * ps))
        .unwrap_err();
    assert!(matches!(err, TrackError::NotShared { .. }), "{err}");
    assert!(err.to_string().contains("ProtNone"), "{err}");
    // A range with an unmapped hole.
    let file = memfd(4 * ps);
    let s = Mapping::shared(&file, 4 * ps);
    // SAFETY: unmapping the second page of our own mapping.
    unsafe { libc::munmap((s.addr + ps) as *mut libc::c_void, ps) };
    let err = t
        .track(PageRange::new(s.addr, s.addr + 4 * ps))
        .unwrap_err();
    assert!(matches!(err, TrackError::NotMapped { .. }), "{err}");
    assert!(t.tracked().is_empty());
    let _ = file.as_raw_fd();
}

#[test]
fn protnone_refuses_unmapped_ranges_and_overlaps_with_the_write_tracker() {
    let ps = page_size();
    let m = Mapping::anon(8 * ps, 1, false);
    // SAFETY: unmapping a page of our own mapping.
    unsafe { libc::munmap((m.addr + 2 * ps) as *mut libc::c_void, ps) };
    let mut t = AccessTracker::builder()
        .backend(BackendKind::ProtNone)
        .build()
        .unwrap();
    let err = t
        .track(PageRange::new(m.addr, m.addr + 8 * ps))
        .unwrap_err();
    assert!(matches!(err, TrackError::NotMapped { .. }), "{err}");
    let w = Mapping::anon(8 * ps, 1, false);
    let r = PageRange::new(w.addr, w.addr + 8 * ps);
    let mut writes = kioku_track::Tracker::builder()
        .backend(BackendKind::Mprotect)
        .build()
        .unwrap();
    writes.track(r).unwrap();
    let err = t.track(r).unwrap_err();
    assert!(matches!(err, TrackError::Overlap { .. }), "{err}");
    writes.untrack(r).unwrap();
    t.track(r).unwrap();
    let err = writes.track(r).unwrap_err();
    assert!(matches!(err, TrackError::Overlap { .. }), "{err}");
}

#[test]
fn remote_tracking_of_a_missing_or_forbidden_process_fails_clearly() {
    // A pid that does not exist (pid_max is far below this).
    let err = AccessTracker::builder()
        .process(i32::MAX - 1)
        .build()
        .unwrap_err();
    assert!(matches!(err, TrackError::ProcessGone { .. }), "{err}");
    if !is_root() {
        eprintln!("!!!!! SKIPPING the unprivileged half: the test is not root, cannot drop to nobody !!!!!");
        return;
    }
    // A process of another user, tracked by nobody: the child drops its uid and tries.
    let out = Command::new(env!("CARGO_BIN_EXE_track-test-child"))
        .args(["try-remote", "1"])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ERROR"), "{text}");
    assert!(
        text.contains("not permitted") || text.contains("root"),
        "{text}"
    );
}

use std::os::unix::process::CommandExt;

#[test]
fn another_process_with_private_memory_is_refused_with_a_reason() {
    if !is_root() {
        eprintln!("!!!!! SKIPPING: needs root to open another process's map_files !!!!!");
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_track-test-child"))
        .args(["serve", "16"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let w: Vec<String> = lines
        .next()
        .unwrap()
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect();
    let (pid, addr, len): (i32, usize, usize) = (
        w[1].parse().unwrap(),
        w[3].parse().unwrap(),
        w[4].parse().unwrap(),
    );
    let mut t = AccessTracker::builder().process(pid).build().unwrap();
    let err = t.track(PageRange::new(addr, addr + len)).unwrap_err();
    assert!(matches!(err, TrackError::NotShared { .. }), "{err}");
    child.stdin.take().unwrap().write_all(b"EXIT\n").unwrap();
    child.wait().unwrap();
}
