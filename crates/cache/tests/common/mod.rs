//! Starting a `kioku-cache` (or a real memcached) for a test, and a small blocking client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// `kioku-cache -p 0 ARGS`.
    pub fn start(args: &[&str]) -> Server {
        Server::start_with(args, None)
    }

    /// `kioku-cache -p 0 ARGS`, with at most `nofile` descriptors (soft and hard
    /// `RLIMIT_NOFILE`: the server cannot raise it) when given.
    pub fn start_with(args: &[&str], nofile: Option<u64>) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kioku-cache"));
        cmd.args(["-p", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and touches only the child's limits; the
            // closure allocates nothing.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                })
            };
        }
        let mut child = cmd.spawn().expect("start kioku-cache");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let mut addr = None;
        while addr.is_none() {
            line.clear();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("kioku-cache {args:?} exited before listening");
            }
            if line.contains("listening on") {
                addr = line.split_whitespace().find_map(|w| w.parse().ok());
            }
        }
        // Keep reading what it prints, so that it never writes into a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let addr = addr.unwrap();
        Server { child, addr }
    }

    /// The real memcached on a free port; None if it is not installed.
    ///
    /// The port comes from below the ephemeral range (`kioku_testkit::ports`), where no
    /// outgoing connection nor `kioku-cache -p 0` takes it; a listener of another program may
    /// still bind it first, so the server that answers must be this memcached (alive, and its
    /// `version` is not kioku's); otherwise another port is tried.
    pub fn memcached(args: &[&str]) -> Option<Server> {
        for port in kioku_testkit::ports::free_ports(5) {
            let mut child = match Command::new("memcached")
                .args([
                    "-U",
                    "0",
                    "-l",
                    "127.0.0.1",
                    "-u",
                    "root",
                    "-p",
                    &port.to_string(),
                ])
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(c) => c,
                Err(_) => return None,
            };
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let start = Instant::now();
            let ours = loop {
                if child.try_wait().ok().flatten().is_some() {
                    break false;
                }
                if let Ok(mut stream) = TcpStream::connect(addr) {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    let mut reply = [0u8; 128];
                    let n = stream
                        .write_all(b"version\r\n")
                        .and_then(|_| stream.read(&mut reply))
                        .unwrap_or(0);
                    let v = String::from_utf8_lossy(&reply[..n]);
                    break v.starts_with("VERSION ")
                        && !v.contains("kioku")
                        && child.try_wait().ok().flatten().is_none();
                }
                // memcached starts in milliseconds; a loaded machine may take seconds.
                if start.elapsed() > Duration::from_secs(30) {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            if ours {
                return Some(Server { child, addr });
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("memcached is installed but did not start on any of 5 free ports");
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking text-protocol client.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        Client::from_stream(TcpStream::connect(addr).expect("connect"))
    }

    /// A client on a connected stream (20 s read timeout).
    pub fn from_stream(stream: TcpStream) -> Client {
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// The numeric statistic `name` of `stats`.
    pub fn stat(&mut self, name: &str) -> u64 {
        self.send(b"stats\r\n");
        let mut v = None;
        loop {
            let l = self.line();
            if l == "END" {
                break;
            }
            if let Some(x) = l.strip_prefix(&format!("STAT {name} ")) {
                v = x.trim().parse().ok();
            }
        }
        v.unwrap_or_else(|| panic!("no stat {name}"))
    }

    /// One line, without its `\r\n`.
    pub fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return line;
            }
            self.fill();
        }
    }

    /// Exactly `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            self.fill();
        }
        self.buf.drain(..n).collect()
    }

    fn fill(&mut self) {
        let mut chunk = [0u8; 65536];
        let n = self.stream.read(&mut chunk).expect("read a reply");
        assert!(
            n > 0,
            "server closed the connection; had {:?}",
            String::from_utf8_lossy(&self.buf)
        );
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// Send a request line (with `\r\n` added) and return the first reply line.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes());
        self.line()
    }

    pub fn set(&mut self, key: &str, flags: u32, exp: i64, value: &[u8]) -> String {
        self.send(format!("set {key} {flags} {exp} {}\r\n", value.len()).as_bytes());
        self.send(value);
        self.send(b"\r\n");
        self.line()
    }

    /// `set`, or None when the connection is gone (a server that was killed).
    pub fn try_set(&mut self, key: &str, flags: u32, exp: i64, value: &[u8]) -> Option<String> {
        let mut req = format!("set {key} {flags} {exp} {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.stream.write_all(&req).ok()?;
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..i + 2);
                return Some(line);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(n) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// `get key`: the value and flags, or None.
    pub fn get(&mut self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.send(format!("get {key}\r\n").as_bytes());
        let head = self.line();
        if head == "END" {
            return None;
        }
        let parts: Vec<&str> = head.split(' ').collect();
        assert_eq!(parts[0], "VALUE", "{head}");
        let flags = parts[2].parse().unwrap();
        let n: usize = parts[3].parse().unwrap();
        let v = self.bytes(n + 2);
        assert_eq!(&v[n..], b"\r\n");
        assert_eq!(self.line(), "END");
        Some((v[..n].to_vec(), flags))
    }

    /// Read until the peer closes; true if it did within the timeout.
    pub fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                // The server closed with our request bytes unread: the kernel resets.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}
