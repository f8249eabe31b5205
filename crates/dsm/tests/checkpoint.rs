//! Checkpoints into the buddy's memory, in two contexts: after each checkpoint, node k's own
//! images and the images its buddy (k + 1) holds for it are the same (epoch, size, CRC-32C),
//! the two newest checkpoints are kept, and an image holds exactly the node's home pages and
//! its private state.

mod common;
use common::{assert_ok, job_env, run_job, Via};
use std::time::Duration;

#[test]
fn child_entry() {
    common::child_main();
}

fn images(s: &str) -> Vec<(u32, u64, usize, String)> {
    s.split_whitespace()
        .map(|i| {
            let f: Vec<&str> = i.split(':').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_string(),
            )
        })
        .collect()
}

#[test]
fn every_node_s_image_is_held_whole_by_its_buddy_in_two_contexts() {
    for (via, nodes) in [(Via::Shm, 3), (Via::Tcp, 2), (Via::Shm, 4)] {
        let kib = 256;
        let rounds = 3;
        let runs = run_job(
            "checkpoint",
            &format!("{kib},{rounds}"),
            job_env(via, nodes),
            Duration::from_secs(120),
        );
        assert_ok(&runs);
        let n = nodes as usize;
        for k in 0..n {
            let own = images(&runs[k].value("OWN").unwrap());
            let held = images(&runs[(k + 1) % n].value("HELD").unwrap());
            assert_eq!(own.len(), 2, "two contexts: {own:?}");
            assert_eq!(own, held, "node {k}'s images and its buddy's copies");
            assert!(own[0].1 < own[1].1, "the two newest epochs: {own:?}");
            assert!(own.iter().all(|i| i.0 == k as u32));
            // Header, every page's home, page numbers, home pages (kib KiB, block-distributed),
            // private state.
            let private = format!("node {k} round {}", rounds - 1).len();
            let pages = kib * 1024 / 4096;
            let allocated = pages * n;
            assert_eq!(
                own[1].2,
                40 + 4 * allocated + pages * (4 + 4096) + private,
                "{via:?} node {k}"
            );
        }
    }
}

#[test]
fn a_rollback_brings_every_node_back_to_the_checkpoint() {
    for (via, nodes) in [(Via::Shm, 3), (Via::Tcp, 2)] {
        let runs = run_job(
            "rollback",
            "6",
            job_env(via, nodes),
            Duration::from_secs(120),
        );
        assert_ok(&runs);
        for r in &runs {
            assert!(r.value("ROLLED_BACK").is_some(), "{via:?} node {}", r.node);
        }
    }
}
