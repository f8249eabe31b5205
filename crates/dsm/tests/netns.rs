//! The DSM between real hosts: two network namespaces joined by a veth pair (10.78.0.1 and
//! 10.78.0.2), two nodes on each, over MCAPI's TCP transport. The seed's Laplace (1024²)
//! equals the serial run, bit for bit.
//!
//! Where network namespaces cannot be made (no root, no iproute2), the test says so on stderr
//! and passes without running (`SKIP: ...`).

mod common;
use common::{assert_ok, kernels, run_job_on};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

#[test]
fn child_entry() {
    common::child_main();
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Hosts {
    ns: [String; 2],
}

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
    fn new() -> Option<Hosts> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "kdsm{}{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let h = Hosts {
            ns: [format!("{tag}a"), format!("{tag}b")],
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
                let addr = format!("{}/24", Hosts::addr(i));
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

    fn addr(host: usize) -> String {
        format!("10.78.0.{}", host + 1)
    }

    fn on(&self, host: usize) -> Vec<String> {
        ["ip", "netns", "exec", &self.ns[host]]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[test]
fn laplace_across_two_hosts_equals_the_serial_run() {
    let Some(hosts) = Hosts::new() else { return };
    // Nodes 0 and 1 on host a, 2 and 3 on host b.
    let nodes = 4;
    let host_of = |i: usize| i / 2;
    let addresses: Vec<String> = (0..nodes)
        .map(|i| format!("{i}={}:{}", Hosts::addr(host_of(i)), 47_300 + i))
        .collect();
    let job = format!("dsm-netns-{}", std::process::id());
    let env = |i: usize| -> Vec<(String, String)> {
        vec![
            ("KIOKU_MCAPI_JOB".into(), job.clone()),
            ("KIOKU_MCAPI_TRANSPORT".into(), "tcp".into()),
            ("KIOKU_MCAPI_NODES".into(), nodes.to_string()),
            ("KIOKU_MCAPI_ADDRESSES".into(), addresses.join(",")),
            (
                "KIOKU_MCAPI_SECRET".into(),
                "5eed5eed5eed5eed5eed5eed5eed5eed".into(),
            ),
            ("KIOKU_DSM_NODE".into(), i.to_string()),
            ("KIOKU_DSM_START_TIMEOUT_S".into(), "20".into()),
        ]
    };
    let (size, iters) = (1024, 20);
    let runs = run_job_on(
        "laplace",
        &format!("{size},{iters}"),
        (0..nodes).map(env).collect(),
        (0..nodes).map(|i| hosts.on(host_of(i))).collect(),
        Duration::from_secs(120),
    );
    assert_ok(&runs);
    let want = format!("{:016x}", kernels::laplace_serial(size, iters));
    assert_eq!(runs[0].value("RESULT").unwrap(), want);
}
