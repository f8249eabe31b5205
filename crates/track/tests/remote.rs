//! Tracking another process through a userfaultfd created in it, and the mprotect backend's
//! handling of foreign processes and foreign faults.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::*;
use kioku_track::{
    page_size, take_uffd_from, BackendKind, PageRange, PageTracker, TrackError, Tracker,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CHILD: &str = env!("CARGO_BIN_EXE_track-test-child");

struct Tracee {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: i32,
    uffd: i32,
    addr: usize,
    len: usize,
}

impl Tracee {
    fn spawn(pages: usize, extra: &[&str]) -> Tracee {
        let mut child = Command::new(CHILD)
            .arg("serve")
            .arg(pages.to_string())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn track-test-child");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.first(), Some(&"READY"), "child said {line:?}");
        Tracee {
            pid: f[1].parse().unwrap(),
            uffd: f[2].parse().unwrap(),
            addr: f[3].parse().unwrap(),
            len: f[4].parse().unwrap(),
            child,
            stdin,
            stdout,
        }
    }

    fn cmd(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut ack = String::new();
        self.stdout.read_line(&mut ack).unwrap();
        assert_eq!(ack.trim(), "OK", "child answered {ack:?} to {line:?}");
    }

    fn write_pages(&mut self, idx: &[usize]) {
        let list: Vec<String> = idx.iter().map(|i| i.to_string()).collect();
        self.cmd(&format!("W {}", list.join(" ")));
    }

    fn range(&self) -> PageRange {
        PageRange::new(self.addr, self.addr + self.len)
    }

    fn page(&self, i: usize) -> usize {
        self.addr + i * page_size()
    }

    fn finish(mut self) {
        let _ = writeln!(self.stdin, "EXIT");
        drop(self.stdin);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "child: {st:?}");
    }
}

fn remote_tracker(t: &Tracee) -> Tracker {
    let fd = take_uffd_from(t.pid, t.uffd).expect("pidfd_getfd of the child's userfaultfd");
    Tracker::builder()
        .process(t.pid, fd)
        .build()
        .expect("tracker for the child")
}

fn random_rounds(tracee: &mut Tracee, tracker: &mut Tracker, seed: u64) {
    let pages = tracee.len / page_size();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    for round in 0..10 {
        let idx: Vec<usize> = (0..rng.gen_range(1..60))
            .map(|_| rng.gen_range(0..pages))
            .collect();
        tracee.write_pages(&idx);
        let reads: Vec<String> = (0..20)
            .map(|_| rng.gen_range(0..pages).to_string())
            .collect();
        tracee.cmd(&format!("R {}", reads.join(" ")));
        let truth: BTreeSet<usize> = idx.iter().map(|&i| tracee.page(i)).collect();
        tracker.scan_into(&mut out).unwrap();
        assert_eq!(page_set(&out), truth, "round {round}");
    }
    tracker.scan_into(&mut out).unwrap();
    assert!(out.is_empty(), "no writes, yet {out:x?}");
}

#[test]
fn monitor_registers_the_targets_range_through_its_uffd() {
    if !uffd_available("monitor_registers_the_targets_range_through_its_uffd") {
        return;
    }
    // The child only creates the userfaultfd; the handshake, UFFDIO_REGISTER and
    // UFFDIO_WRITEPROTECT are issued by this process on the taken fd and act on the child's mm.
    let mut tracee = Tracee::spawn(300, &[]);
    let mut tracker = remote_tracker(&tracee);
    assert_eq!(tracker.backend(), BackendKind::UffdPagemapScan);
    assert_eq!(tracker.pid(), tracee.pid);
    tracker.track(tracee.range()).unwrap();
    assert!(tracker.scan().unwrap().is_empty(), "fresh range not clean");
    random_rounds(&mut tracee, &mut tracker, 11);
    drop(tracker);
    tracee.finish();
}

#[test]
fn target_registered_range_is_scanned_from_the_monitor() {
    if !uffd_available("target_registered_range_is_scanned_from_the_monitor") {
        return;
    }
    let mut tracee = Tracee::spawn(300, &["--self-register"]);
    let mut tracker = remote_tracker(&tracee);
    tracker.track(tracee.range()).unwrap();
    random_rounds(&mut tracee, &mut tracker, 12);
    // The child closes its copy: ours keeps the registration alive.
    tracee.cmd("CLOSE");
    tracee.write_pages(&[3, 4]);
    assert_eq!(
        page_set(&tracker.scan().unwrap()),
        [3, 4].iter().map(|&i| tracee.page(i)).collect()
    );
    drop(tracker);
    tracee.finish();
}

#[test]
fn thp_range_in_another_process() {
    if !uffd_available("thp_range_in_another_process") {
        return;
    }
    let mut tracee = Tracee::spawn(1024, &["--thp"]);
    let mut tracker = remote_tracker(&tracee);
    tracker.track(tracee.range()).unwrap();
    tracee.write_pages(&[0, 511, 512, 1023]);
    let got = page_set(&tracker.scan().unwrap());
    let truth: BTreeSet<usize> = [0, 511, 512, 1023]
        .iter()
        .map(|&i| tracee.page(i))
        .collect();
    assert!(truth.is_subset(&got), "missed pages");
    eprintln!(
        "remote THP: {} written, {} reported",
        truth.len(),
        got.len()
    );
    drop(tracker);
    tracee.finish();
}

#[test]
fn a_descriptor_that_is_not_a_uffd_is_refused() {
    let tracee = Tracee::spawn(4, &[]);
    // The child's fd 0 is the pipe we write commands into.
    let err = take_uffd_from(tracee.pid, 0).unwrap_err();
    assert!(
        matches!(err, TrackError::NotUffd { fd: _, ref what } if what.starts_with("pipe:")),
        "{err}"
    );
    tracee.finish();
}

#[test]
fn exec_in_the_target_is_reported() {
    if !uffd_available("exec_in_the_target_is_reported") {
        return;
    }
    // A process that replaces its image keeps its pid but not its address space.
    let mut tracee = Tracee::spawn(16, &["--self-register"]);
    let mut tracker = remote_tracker(&tracee);
    tracker.track(tracee.range()).unwrap();
    tracee.write_pages(&[2]);
    assert_eq!(tracker.scan().unwrap().len(), 1);
    tracee.cmd("EXEC");
    let comm = format!("/proc/{}/comm", tracee.pid);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(std::time::Instant::now() < deadline, "child did not exec");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let err = tracker.scan().unwrap_err();
    assert!(matches!(err, TrackError::ProcessGone { .. }), "{err}");
    let _ = tracee.child.kill();
    let _ = tracee.child.wait();
}

#[test]
fn uffd_of_another_mm_is_refused() {
    if !uffd_available("uffd_of_another_mm_is_refused") {
        return;
    }
    let tracee = Tracee::spawn(16, &[]);
    // Map the same addresses here, so that registering on *our* uffd succeeds in our mm.
    // SAFETY: MAP_FIXED_NOREPLACE never clobbers existing mappings.
    let p = unsafe {
        libc::mmap(
            tracee.addr as *mut libc::c_void,
            tracee.len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p as usize != tracee.addr {
        eprintln!(
            "!!!!! SKIPPING uffd_of_another_mm_is_refused: child's addresses busy here !!!!!"
        );
        tracee.finish();
        return;
    }
    let (own, _) = kioku_track::uffd::create().unwrap();
    let mut tracker = Tracker::builder().process(tracee.pid, own).build().unwrap();
    let err = tracker.track(tracee.range()).unwrap_err();
    assert!(matches!(err, TrackError::WrongMm { .. }), "{err}");
    drop(tracker);
    // SAFETY: unmapping what we mapped above.
    unsafe { libc::munmap(p, tracee.len) };
    tracee.finish();
}

#[test]
fn exited_process_is_reported() {
    if !uffd_available("exited_process_is_reported") {
        return;
    }
    let tracee = Tracee::spawn(16, &["--self-register"]);
    let mut tracker = remote_tracker(&tracee);
    tracker.track(tracee.range()).unwrap();
    tracee.finish();
    let err = tracker.scan().unwrap_err();
    assert!(matches!(err, TrackError::ProcessGone { .. }), "{err}");
}

#[test]
fn mprotect_backend_refuses_another_process() {
    let tracee = Tracee::spawn(4, &[]);
    let fd = take_uffd_from(tracee.pid, tracee.uffd).expect("pidfd_getfd");
    let err = Tracker::builder()
        .process(tracee.pid, fd)
        .backend(BackendKind::Mprotect)
        .build()
        .unwrap_err();
    assert!(
        matches!(err, TrackError::RemoteUnsupported { backend: BackendKind::Mprotect, pid } if pid == tracee.pid),
        "{err}"
    );
    assert!(err.to_string().contains("UffdPagemapScan"), "{err}");
    tracee.finish();
}

#[test]
fn mprotect_handler_passes_foreign_faults_to_the_default_action() {
    let out = Command::new(CHILD).arg("segv-default").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("TRACKED-WRITE-OK"), "{stdout}");
    assert!(!stdout.contains("NOT-REACHED"), "{stdout}");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}", out.status);
}

#[test]
fn mprotect_handler_chains_to_the_previous_handler() {
    let out = Command::new(CHILD).arg("segv-chain").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("TRACKED-WRITE-OK"), "{stdout}");
    assert_eq!(out.status.code(), Some(42), "{:?}", out.status);
}

#[test]
fn kioku_tracker_env_selects_the_backend() {
    let run = |value: Option<&str>| {
        let mut c = Command::new(CHILD);
        c.arg("backend");
        match value {
            Some(v) => c.env("KIOKU_TRACKER", v),
            None => c.env_remove("KIOKU_TRACKER"),
        };
        let out = c.output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(run(Some("mprotect")), "BACKEND Mprotect");
    let bogus = run(Some("soft-dirty"));
    assert!(
        bogus.starts_with("ERROR KIOKU_TRACKER=\"soft-dirty\""),
        "{bogus}"
    );
    if uffd_available("kioku_tracker_env_selects_the_backend (uffd part)") {
        assert_eq!(run(Some("uffd")), "BACKEND UffdPagemapScan");
        assert_eq!(run(None), "BACKEND UffdPagemapScan");
        assert_eq!(run(Some("auto")), "BACKEND UffdPagemapScan");
    } else {
        assert_eq!(run(None), "BACKEND Mprotect");
        assert!(run(Some("uffd")).starts_with("ERROR"));
    }
}
