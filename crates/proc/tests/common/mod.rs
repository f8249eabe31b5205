//! Shared helpers: the test child under a Tracee with its stdio on pipes.

#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use kioku_proc::{Exit, Tracee, TraceeCommand};

pub const CHILD: &str = env!("CARGO_BIN_EXE_proc-test-child");

pub fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// The child's output, read without blocking.
pub struct Output {
    file: File,
    buf: Vec<u8>,
    pub all: String,
}

impl Output {
    fn new(fd: OwnedFd) -> Output {
        // SAFETY: setting O_NONBLOCK on our own descriptor.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        Output {
            file: File::from(fd),
            buf: vec![],
            all: String::new(),
        }
    }

    /// Reads what is there; false at EOF.
    pub fn pump(&mut self) -> bool {
        let mut b = [0u8; 65536];
        loop {
            match self.file.read(&mut b) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&b[..n]);
                    self.all.push_str(&String::from_utf8_lossy(&b[..n]));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) => panic!("reading child output: {e}"),
            }
        }
    }

    pub fn line(&mut self) -> Option<String> {
        self.pump();
        let i = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=i).collect();
        Some(String::from_utf8_lossy(&line[..i]).into_owned())
    }
}

pub struct Child {
    pub t: Tracee,
    pub out: Output,
    pub stdin: Option<File>,
}

pub fn spawn(args: &[&str]) -> Child {
    let (out_r, out_w) = pipe();
    let (in_r, in_w) = pipe();
    let t = Tracee::spawn(
        TraceeCommand::new(CHILD)
            .args(args.iter().copied())
            .stdout(out_w)
            .stdin(in_r),
    )
    .expect("spawn the test child under ptrace");
    assert!(t.is_stopped(), "a spawned tracee starts stopped");
    Child {
        t,
        out: Output::new(out_r),
        stdin: Some(File::from(in_w)),
    }
}

/// Output of an untraced run.
pub fn untraced(args: &[&str]) -> String {
    let o = std::process::Command::new(CHILD)
        .args(args)
        .output()
        .expect("run the test child");
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap()
}

impl Child {
    /// Runs the child until it prints a line.
    pub fn line(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(l) = self.out.line() {
                return l;
            }
            assert!(Instant::now() < deadline, "no output from the child");
            if let Some(e) = self.t.run_for(Duration::from_millis(1)).unwrap() {
                if let Some(l) = self.out.line() {
                    return l;
                }
                panic!("child exited ({e}) without printing a line");
            }
        }
    }

    pub fn send(&mut self, s: &str) {
        let f = self.stdin.as_mut().unwrap();
        f.write_all(s.as_bytes()).unwrap();
        f.flush().unwrap();
    }

    /// Runs the child to its end; returns its exit and everything it printed.
    pub fn finish(&mut self) -> (Exit, String) {
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.out.pump();
            if let Some(e) = self.t.run_for(Duration::from_millis(2)).unwrap() {
                while self.out.pump() {}
                return (e, self.out.all.clone());
            }
            assert!(Instant::now() < deadline, "child did not finish");
        }
    }

    /// Runs until `cond` holds (checked between slices of running).
    pub fn run_until(&mut self, what: &str, mut cond: impl FnMut(&mut Child) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            self.out.pump();
            assert!(
                self.t.run_for(Duration::from_millis(1)).unwrap().is_none(),
                "child exited while waiting for {what}"
            );
        }
    }
}

/// State letter of a thread (`t` = tracing stop).
pub fn thread_state(pid: i32, tid: i32) -> char {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap();
    s[s.rfind(')').unwrap() + 2..].chars().next().unwrap()
}

/// The system call a thread is blocked in (first field of /proc/PID/syscall), if any.
pub fn blocked_in(pid: i32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Tiny deterministic PRNG for timings.
pub struct Rng(pub u64);
impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
