//! Runs DSM jobs as real processes: the test binary starts itself once per node (one DSM node
//! per process, as in production) with the node's environment, and collects what each printed.
#![allow(dead_code)]

pub mod kernels;

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Shm,
    Tcp,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// One node's outcome.
pub struct NodeRun {
    pub node: u32,
    pub output: Output,
}

impl NodeRun {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    /// The value of the line `KEY=value` this node printed.
    pub fn value(&self, key: &str) -> Option<String> {
        self.stdout().lines().find_map(|l| {
            let k = format!("{key}=");
            l.find(&k).map(|i| l[i + k.len()..].to_string())
        })
    }
}

/// The environment of node `i` of a fresh job.
pub fn job_env(via: Via, nodes: u32) -> Vec<Vec<(String, String)>> {
    let job = format!(
        "dsm{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut common = vec![
        ("KIOKU_MCAPI_JOB".to_string(), job),
        ("KIOKU_MCAPI_NODES".to_string(), nodes.to_string()),
    ];
    match via {
        Via::Shm => common.push(("KIOKU_MCAPI_TRANSPORT".into(), "shm".into())),
        Via::Tcp => {
            let addrs: Vec<String> = kioku_testkit::ports::free_ports(nodes as usize)
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{i}=127.0.0.1:{p}"))
                .collect();
            common.push(("KIOKU_MCAPI_TRANSPORT".into(), "tcp".into()));
            common.push(("KIOKU_MCAPI_ADDRESSES".into(), addrs.join(",")));
            let secret: String = (0..32)
                .map(|i| format!("{:02x}", (i * 37 + 11) as u8))
                .collect();
            common.push(("KIOKU_MCAPI_SECRET".into(), secret));
        }
    }
    (0..nodes)
        .map(|i| {
            let mut e = common.clone();
            e.push(("KIOKU_DSM_NODE".into(), i.to_string()));
            e.push(("KIOKU_DSM_START_TIMEOUT_S".into(), "20".into()));
            e
        })
        .collect()
}

/// Runs `kernel` (a name known to `kernels::run`) with `args` on every node; waits for all, up
/// to `limit`, killing the job if it hangs.
pub fn run_job(
    kernel: &str,
    args: &str,
    envs: Vec<Vec<(String, String)>>,
    limit: Duration,
) -> Vec<NodeRun> {
    let n = envs.len();
    run_job_on(kernel, args, envs, vec![Vec::new(); n], limit)
}

/// Like `run_job`, node i's process started through the command prefix `on[i]` (e.g.
/// `ip netns exec <ns>`; empty: directly).
pub fn run_job_on(
    kernel: &str,
    args: &str,
    envs: Vec<Vec<(String, String)>>,
    on: Vec<Vec<String>>,
    limit: Duration,
) -> Vec<NodeRun> {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = envs
        .into_iter()
        .zip(on)
        .map(|(env, on)| {
            let mut c = match on.split_first() {
                Some((prog, rest)) => {
                    let mut c = Command::new(prog);
                    c.args(rest).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
                // Symbolising a backtrace of this big binary takes tens of seconds on a loaded
                // machine; the panic message is what the tests look at.
                .env("RUST_BACKTRACE", "0")
                .env("KIOKU_DSM_TEST_KERNEL", kernel)
                .env("KIOKU_DSM_TEST_ARGS", args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    let start = Instant::now();
    loop {
        let done = children.iter_mut().all(|c| c.try_wait().unwrap().is_some());
        if done {
            break;
        }
        if start.elapsed() > limit {
            for c in &mut children {
                let _ = c.kill();
            }
            let outs: Vec<String> = children
                .into_iter()
                .map(|c| {
                    let o = c.wait_with_output().unwrap();
                    format!(
                        "--- stdout\n{}--- stderr\n{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .collect();
            panic!("the job hung past {limit:?}:\n{}", outs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .into_iter()
        .enumerate()
        .map(|(i, c)| NodeRun {
            node: i as u32,
            output: c.wait_with_output().unwrap(),
        })
        .collect()
}

/// Asserts every node exited 0, showing their output if not.
pub fn assert_ok(runs: &[NodeRun]) {
    let bad: Vec<String> = runs
        .iter()
        .filter(|r| !r.output.status.success())
        .map(|r| {
            format!(
                "node {} failed ({}):\n--- stdout\n{}--- stderr\n{}",
                r.node,
                r.output.status,
                r.stdout(),
                r.stderr()
            )
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The child side: runs the kernel named in the environment, if any.
pub fn child_main() {
    let Ok(kernel) = std::env::var("KIOKU_DSM_TEST_KERNEL") else {
        return;
    };
    let args = std::env::var("KIOKU_DSM_TEST_ARGS").unwrap_or_default();
    let args: Vec<u64> = args
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    kernels::run(&kernel, &args);
}

/// FNV-1a of bytes (results are compared bit for bit through it).
pub fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
