//! TCP ports for tests that must name a port before the server binds it.
//!
//! Binding port 0 and letting it go hands out a port from the kernel's ephemeral range, which
//! every outgoing connection on the machine also draws from: a test running beside this one
//! may take the port as the source of a `connect` before the server under test binds it
//! ("Address already in use", seen under load). These ports come from below that range, where
//! only listeners live; each is checked free by binding it, and a process-wide counter from a
//! pid-derived start keeps concurrent tests and test processes apart.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Lowest port handed out: above the well-known and most registered service ports.
const FIRST: u32 = 10_000;

/// First port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|&p: &u32| p > FIRST + 1_000)
        .unwrap_or(32_768)
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `n` distinct ports on 127.0.0.1 that were free a moment ago and that no outgoing
/// connection will take.
///
/// # Panics
/// If no free port is found in the whole range.
pub fn free_ports(n: usize) -> Vec<u16> {
    let span = ephemeral_start() - FIRST;
    // Spread processes over the range by pid; within one, a counter.
    let base = std::process::id().wrapping_mul(7_919) % span;
    let mut ports = Vec::with_capacity(n);
    let mut tried = 0;
    while ports.len() < n {
        assert!(tried < span, "no free TCP port below the ephemeral range");
        tried += 1;
        let port = (FIRST + (base + NEXT.fetch_add(1, Ordering::Relaxed)) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            ports.push(port);
        }
    }
    ports
}
