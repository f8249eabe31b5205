//! TCP between real hosts: each node in its own network namespace with its own address, joined
//! by a veth pair (`ip netns`, needs root). The C functional suite runs across them, and a
//! network partition (the veth taken down, no process dies) is reported to the node that
//! waits on its peer as an error status within the topology's `tcp_dead_after`, never a hang.
//!
//! Where network namespaces cannot be made, the tests say so on stderr and pass without
//! running (`SKIP: ...`).

mod common;
use common::cprog::run_fts_pair;
use common::T;
use kioku_mcapi::{McapiError, Node, PeerLoss, PeerState, Topology};
use kioku_testkit::netns::Hosts;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "KIOKU_TEST_MCAPI_NETNS_ROLE";
const PORT: u16 = 47_000;
/// Node 0 runs on host 0 at `10.77.0.1`, node 1 on host 1 at `10.77.0.2`.
const SUBNET: &str = "10.77.0";

fn topology_env(job: &str, hosts: &Hosts) -> Vec<(&'static str, String)> {
    vec![
        ("KIOKU_MCAPI_JOB", format!("{job}-{}", std::process::id())),
        ("KIOKU_MCAPI_TRANSPORT", "tcp".into()),
        ("KIOKU_MCAPI_NODES", "2".into()),
        (
            "KIOKU_MCAPI_ADDRESSES",
            format!("0={}:{PORT},1={}:{PORT}", hosts.addr(0), hosts.addr(1)),
        ),
        (
            "KIOKU_MCAPI_SECRET",
            "7e57ab1e7e57ab1e7e57ab1e7e57ab1e".into(),
        ),
        ("KIOKU_MCAPI_TCP_DEAD_AFTER_MS", "1500".into()),
    ]
}

#[test]
fn functional_suite_between_two_hosts() {
    let Some(hosts) = Hosts::new("kmc", SUBNET) else {
        return;
    };
    run_fts_pair(
        &[hosts.on(0), hosts.on(1)],
        &topology_env("fts-netns", &hosts),
    );
}

/// The roles of `partition_is_reported_not_hung`, run in the namespaces by re-running this
/// test binary with `ROLE` set.
fn role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let topo = Topology::load(None).expect("topology from the environment");
    match role.as_str() {
        "sink" => {
            // Node 1: an endpoint nobody drains, while the node stays responsive.
            let n = Node::initialize(0, 1, topo).unwrap();
            n.endpoint_create(30).unwrap();
            let other = n.endpoint_create(31).unwrap();
            let _ = n.msg_recv(other);
        }
        "observer" => {
            // Node 0: fills the sink's queue, leaves a send pending, says READY; after the
            // partition, the pending send must fail with a transmission error, in time.
            let n = Node::initialize(0, 0, topo.clone()).unwrap();
            let me = n.endpoint_create(1).unwrap();
            let sink = n.endpoint_get(0, 1, 30, T).unwrap();
            for _ in 0..topo.queue_depth {
                n.msg_send(me, sink, b"fill", 0).unwrap();
            }
            let pending = n.msg_send_i(me, sink, b"one too many", 0).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            assert!(n.is_pending(pending).unwrap(), "the sink's queue is full");
            println!("READY");
            let t0 = Instant::now();
            let r = n.wait(pending, Some(Duration::from_secs(60)));
            let took = t0.elapsed();
            println!("after the partition: {r:?} in {took:?}");
            // A partition is not a death: the peer's process may be alive.
            assert!(
                matches!(
                    r,
                    Err(McapiError::Transmission {
                        node: 1,
                        why: PeerLoss::Unreachable
                    })
                ),
                "{r:?}"
            );
            assert!(
                took < topo.tcp_dead_after * 4 + Duration::from_secs(5),
                "{took:?}"
            );
            assert!(matches!(n.peer_state(1).unwrap(), PeerState::Lost(_)));
            println!("PASS");
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

#[test]
fn role_entry() {
    role();
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn partition_is_reported_not_hung() {
    let Some(hosts) = Hosts::new("kmc", SUBNET) else {
        return;
    };
    let env = topology_env("partition", &hosts);
    let spawn = |node: usize, role: &str| {
        let prefix = hosts.on(node);
        let mut c = Command::new(&prefix[0]);
        c.args(&prefix[1..])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "role_entry",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(ROLE, role)
            .stdout(Stdio::piped());
        for (k, v) in &env {
            c.env(k, v);
        }
        Proc(c.spawn().unwrap())
    };
    let _sink = spawn(1, "sink");
    let mut observer = spawn(0, "observer");
    let mut lines = BufReader::new(observer.0.stdout.take().unwrap()).lines();
    let mut out = Vec::new();
    loop {
        let line = lines
            .next()
            .expect("the observer ended before READY")
            .unwrap();
        out.push(line.clone());
        if line.ends_with("READY") {
            break;
        }
    }
    hosts.cut(1).unwrap();
    // The observer's own assertions decide; its output says what it saw.
    out.extend(lines.map_while(Result::ok));
    let status = observer.0.wait().unwrap();
    let text = out.join("\n");
    eprintln!("{text}");
    assert!(
        status.success() && text.contains("PASS"),
        "observer: {status}\n{text}"
    );
}
