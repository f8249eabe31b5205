//! The DSM between real hosts: two network namespaces joined by a veth pair (10.78.0.1 and
//! 10.78.0.2), two nodes on each, over MCAPI's TCP transport. The seed's Laplace (1024²)
//! equals the serial run, bit for bit.
//!
//! Where network namespaces cannot be made (no root, no iproute2), the test says so on stderr
//! and passes without running (`SKIP: ...`).

mod common;
use common::{assert_ok, kernels, run_job_on};
use kioku_testkit::netns::Hosts;
use std::time::Duration;

#[test]
fn child_entry() {
    common::child_main();
}

#[test]
fn laplace_across_two_hosts_equals_the_serial_run() {
    let Some(hosts) = Hosts::new("kdsm", "10.78.0") else {
        return;
    };
    // Nodes 0 and 1 on host a, 2 and 3 on host b.
    let nodes = 4;
    let host_of = |i: usize| i / 2;
    let addresses: Vec<String> = (0..nodes)
        .map(|i| format!("{i}={}:{}", hosts.addr(host_of(i)), 47_300 + i))
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
