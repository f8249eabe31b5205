//! Bad input gives a clear error and no hang: an access outside any allocation, nodes that
//! call barrier a different number of times or allocate differently, a node of another job.

mod common;
use common::{job_env, run_job, Via};
use std::time::Duration;

#[test]
fn child_entry() {
    common::child_main();
}

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn an_access_outside_any_allocation_stops_the_node_naming_the_address() {
    let runs = run_job("outside", "", job_env(Via::Shm, 2), LIMIT);
    let bad = &runs[1];
    assert!(!bad.output.status.success());
    assert!(!bad.stdout().contains("NOT STOPPED"));
    let err = bad.stderr();
    assert!(
        err.contains("node 1: access to shared address 0x00005e0000001000, outside any allocation"),
        "stderr: {err}"
    );
    // The other node learns that node 1 is gone instead of hanging at the barrier.
    let other = &runs[0];
    assert!(!other.output.status.success());
    assert!(
        other.stderr().contains("node 1 was lost"),
        "{}",
        other.stderr()
    );
}

#[test]
fn a_node_calling_barrier_more_often_gets_a_clear_error_everywhere() {
    for via in [Via::Shm, Via::Tcp] {
        let runs = run_job("extra_barrier", "", job_env(via, 3), LIMIT);
        for r in &runs {
            let e = r.value("ERROR").unwrap_or_default();
            assert!(
                e.contains("different number of times"),
                "node {} over {via:?}: {e}\n{}",
                r.node,
                r.stderr()
            );
        }
    }
}

#[test]
fn nodes_allocating_differently_get_a_clear_error() {
    let runs = run_job("alloc_mismatch", "", job_env(Via::Shm, 2), LIMIT);
    for r in &runs {
        let e = r.value("ERROR").unwrap_or_default();
        assert!(e.contains("alloc is collective"), "node {}: {e}", r.node);
    }
}

#[test]
fn a_node_of_another_topology_is_refused_at_start() {
    let mut envs = job_env(Via::Tcp, 2);
    // Node 1 believes in another secret: MCAPI refuses it in the handshake.
    for (k, v) in envs[1].iter_mut() {
        if k == "KIOKU_MCAPI_SECRET" {
            *v = "ab".repeat(16);
        }
        if k == "KIOKU_DSM_START_TIMEOUT_S" {
            *v = "3".into();
        }
    }
    for (k, v) in envs[0].iter_mut() {
        if k == "KIOKU_DSM_START_TIMEOUT_S" {
            *v = "3".into();
        }
    }
    let runs = run_job("start_only", "", envs, LIMIT);
    for r in &runs {
        assert!(!r.output.status.success(), "node {} started", r.node);
        let err = r.stderr();
        assert!(
            err.contains("did not answer") || err.contains("was lost"),
            "node {}: {err}",
            r.node
        );
    }
}
