//! The monitor's reading of a request on its control socket: whatever a client sends, the
//! monitor answers or drops it without blocking, and takes a checkpoint only for the exact
//! request line.

use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use kioku_run::control::Control;

struct Monitor {
    control: Control,
    name: String,
}

fn monitor() -> &'static Mutex<Monitor> {
    static M: OnceLock<Mutex<Monitor>> = OnceLock::new();
    M.get_or_init(|| {
        // The pool name is taken from a file that outlives the process (a static is never
        // dropped, so a temporary file would be left behind); the pid name from a pid no
        // process has, so that it stays this process's own.
        let exe = std::env::current_exe().expect("this executable");
        let fake_pid = -(std::process::id() as i32);
        let control = Control::listen(fake_pid, &exe, &[]).expect("listening");
        Mutex::new(Monitor {
            control,
            name: format!("kioku/pid/{fake_pid}"),
        })
    })
}

/// Input: the bytes a client sends before closing its side.
pub fn control_request(data: &[u8]) {
    let mut m = monitor().lock().unwrap_or_else(|e| e.into_inner());
    let addr = SocketAddr::from_abstract_name(m.name.as_bytes()).expect("name");
    let mut client = UnixStream::connect_addr(&addr).expect("connect");
    client.set_nonblocking(true).expect("nonblocking");
    let sent = match client.write(data) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => panic!("write: {e}"),
    };
    let _ = client.shutdown(std::net::Shutdown::Write);
    let t0 = Instant::now();
    let mut requests = Vec::new();
    let mut answer = Vec::new();
    loop {
        requests.extend(m.control.poll());
        for r in requests.drain(..) {
            let line = data[..sent]
                .split(|&b| b == b'\n')
                .next()
                .expect("one line at least");
            assert_eq!(
                line.trim_ascii(),
                b"checkpoint",
                "a request that is not `checkpoint` was accepted"
            );
            r.answer("{\"epoch\":1}");
        }
        let mut buf = [0u8; 256];
        match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the monitor neither answered nor dropped a client that closed its side"
        );
        std::thread::sleep(Duration::from_micros(50));
    }
    assert!(answer.len() <= 256, "an answer longer than one line");
}
