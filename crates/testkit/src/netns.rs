//! Two hosts on one machine: two network namespaces joined by a veth pair, each end named after
//! its namespace and holding address `<subnet>.1` or `<subnet>.2` (the addresses exist only
//! inside the namespaces). Making them needs iproute2 and root (CAP_SYS_ADMIN, CAP_NET_ADMIN);
//! where that is missing, [`Hosts::new`] says so on stderr (`SKIP: ...`) and the test passes
//! without running.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Two network namespaces joined by a veth pair; removed on drop.
pub struct Hosts {
    ns: [String; 2],
    subnet: String,
}

/// Runs `ip ARGS`; the error says which command failed and what `ip` printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Hosts {
    /// Two hosts at `<subnet>.1` and `<subnet>.2` (`subnet`: the first three octets, e.g.
    /// `"10.77.0"`), their namespaces named `<tag><pid><n>a` and `…b`. `None` (after saying
    /// why on stderr) where namespaces cannot be made here; panics when the namespaces can be
    /// made but not joined (a real failure, not a skip).
    pub fn new(tag: &str, subnet: &str) -> Option<Hosts> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{tag}{}{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let h = Hosts {
            ns: [format!("{tag}a"), format!("{tag}b")],
            subnet: subnet.to_string(),
        };
        if let Err(e) = ip(&["netns", "add", &h.ns[0]]) {
            eprintln!(
                "SKIP: cannot create a network namespace ({e}); this test needs iproute2 and \
                 root (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
            );
            return None;
        }
        let setup = || -> Result<(), String> {
            ip(&["netns", "add", &h.ns[1]])?;
            ip(&[
                "link", "add", &h.ns[0], "netns", &h.ns[0], "type", "veth", "peer", "name",
                &h.ns[1], "netns", &h.ns[1],
            ])?;
            for i in 0..2 {
                let addr = format!("{}/24", h.addr(i));
                ip(&["-n", &h.ns[i], "addr", "add", &addr, "dev", &h.ns[i]])?;
                ip(&["-n", &h.ns[i], "link", "set", &h.ns[i], "up"])?;
                ip(&["-n", &h.ns[i], "link", "set", "lo", "up"])?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            drop(h);
            panic!("setting up two hosts: {e}");
        }
        Some(h)
    }

    /// The address of host `host` (0 or 1).
    pub fn addr(&self, host: usize) -> String {
        format!("{}.{}", self.subnet, host + 1)
    }

    /// The command prefix that runs a program on host `host`.
    pub fn on(&self, host: usize) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.ns[host].clone(),
        ]
    }

    /// Takes host `host`'s end of the link down: a network partition, no process dies.
    pub fn cut(&self, host: usize) -> Result<(), String> {
        ip(&["-n", &self.ns[host], "link", "set", &self.ns[host], "down"])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
