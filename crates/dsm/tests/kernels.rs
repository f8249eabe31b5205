//! SPMD programs on the DSM, as processes over shared memory and TCP, against serial runs: the
//! results must be equal bit for bit. Several writers of one page are merged at its home.

mod common;
use common::{assert_ok, job_env, kernels, run_job, Via};
use std::time::Duration;

/// The entry point of the node processes (does nothing in the parent run).
#[test]
fn child_entry() {
    common::child_main();
}

const LIMIT: Duration = Duration::from_secs(120);

fn result(kernel: &str, args: &str, via: Via, nodes: u32) -> String {
    result_with(kernel, args, job_env(via, nodes))
}

/// The same job with home pages write-protected instead of tracked (the fallback for kernels
/// without userfaultfd's asynchronous write-protection).
fn without_home_tracking(mut envs: Vec<Vec<(String, String)>>) -> Vec<Vec<(String, String)>> {
    for e in &mut envs {
        e.push(("KIOKU_DSM_TRACK_HOMES".into(), "0".into()));
    }
    envs
}

fn result_with(kernel: &str, args: &str, envs: Vec<Vec<(String, String)>>) -> String {
    let runs = run_job(kernel, args, envs, LIMIT);
    assert_ok(&runs);
    runs[0].value("RESULT").expect("node 0 prints the result")
}

#[test]
fn several_writers_of_one_page_merge() {
    for (via, nodes, tracked) in [
        (Via::Shm, 2, true),
        (Via::Shm, 4, true),
        (Via::Tcp, 3, true),
        (Via::Shm, 3, false),
    ] {
        let mut envs = job_env(via, nodes);
        if !tracked {
            envs = without_home_tracking(envs);
        }
        let runs = run_job("multi_writer", "3,4", envs, LIMIT);
        assert_ok(&runs);
        for r in &runs {
            assert!(r.value("CHECKED").is_some(), "node {} checked", r.node);
        }
    }
}

#[test]
fn laplace_equals_the_serial_run() {
    // The seed's grid.
    let (size, iters) = (1024, 30);
    let want = format!("{:016x}", kernels::laplace_serial(size, iters));
    for (via, nodes) in [(Via::Shm, 2), (Via::Shm, 4), (Via::Shm, 8), (Via::Tcp, 4)] {
        let got = result("laplace", &format!("{size},{iters}"), via, nodes);
        assert_eq!(got, want, "{nodes} nodes over {via:?}");
    }
    let envs = without_home_tracking(job_env(Via::Shm, 4));
    let got = result_with("laplace", &format!("{size},{iters}"), envs);
    assert_eq!(got, want, "4 nodes, home pages write-protected");
}

#[test]
fn matmul_with_every_node_writing_every_page_equals_the_serial_run() {
    let m = 96;
    let want = format!("{:016x}", kernels::matmul_serial(m));
    for (via, nodes) in [(Via::Shm, 2), (Via::Shm, 4), (Via::Tcp, 3)] {
        assert_eq!(
            result("matmul", &m.to_string(), via, nodes),
            want,
            "{nodes} over {via:?}"
        );
    }
}

#[test]
fn histogram_under_locks_equals_the_serial_run() {
    let samples = 60_000;
    let want = format!("{:016x}", kernels::histogram_serial(samples));
    for (via, nodes) in [(Via::Shm, 4), (Via::Tcp, 2)] {
        let got = result("histogram", &format!("{samples},4"), via, nodes);
        assert_eq!(got, want, "{nodes} over {via:?}");
    }
}
