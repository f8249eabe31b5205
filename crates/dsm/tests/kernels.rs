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
    let runs = run_job(kernel, args, job_env(via, nodes), LIMIT);
    assert_ok(&runs);
    runs[0].value("RESULT").expect("node 0 prints the result")
}

#[test]
fn several_writers_of_one_page_merge() {
    for (via, nodes) in [(Via::Shm, 2), (Via::Shm, 4), (Via::Tcp, 3)] {
        let runs = run_job("multi_writer", "3,4", job_env(via, nodes), LIMIT);
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
