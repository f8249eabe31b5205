//! Helpers of the MCAPI tests: topologies for both transports, nodes run as threads.
#![allow(dead_code)]

use kioku_mcapi::{Node, Topology};
pub mod cprog;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub const T: Option<Duration> = Some(Duration::from_secs(20));

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Shm,
    Tcp,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh job of `nodes` nodes over `via` (unique name, free ports, random secret).
pub fn topology(via: Via, nodes: u32) -> Topology {
    let job = format!(
        "t{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    match via {
        Via::Shm => Topology::shm(&job, nodes),
        Via::Tcp => {
            let addrs = kioku_testkit::ports::free_ports(nodes as usize)
                .into_iter()
                .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
                .collect();
            let secret: Vec<u8> = (0..32).map(|i| i as u8 ^ 0x5a).collect();
            Topology::tcp(&job, addrs, &secret)
        }
    }
}

/// Runs `f(node)` for every node of `topo` in its own thread; returns their results in order.
pub fn run<R: Send + 'static>(
    topo: &Topology,
    f: impl Fn(Node) -> R + Send + Sync + 'static,
) -> Vec<R> {
    kioku_mcapi::init_logging();
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = (0..topo.nodes)
        .map(|i| {
            let t = topo.clone();
            let f = f.clone();
            std::thread::Builder::new()
                .name(format!("node{i}"))
                .spawn(move || {
                    let node = Node::initialize(0, i, t).expect("initialize");
                    let r = f(node.clone());
                    // A linger long enough for a loaded machine: finalize returns as soon
                    // as every peer has taken what this node sent, and what is still unsent
                    // at the deadline is lost (the peer sees the node die, not finalize).
                    node.finalize(Duration::from_secs(30)).expect("finalize");
                    r
                })
                .unwrap()
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("node thread panicked"))
        .collect()
}

/// Both transports, as test names.
#[macro_export]
macro_rules! both {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn shm() {
                ($body)(common::Via::Shm)
            }
            #[test]
            fn tcp() {
                ($body)(common::Via::Tcp)
            }
        }
    };
}
