//! `tests/c/hot_check.c`: the hot-page and huge-page functions of kioku.h called from C (codes,
//! callbacks, a whole placement run), linked statically against `libkioku.a`; and the C layout
//! of their structs compared with the Rust definitions.

mod common;

use kioku::{HotNotice, HotPage, HotPolicy, HotReport, HotStatus};
use std::path::Path;
use std::process::Command;

#[test]
fn hot_pages_from_c_behave_as_the_header_says() {
    // Its placement run needs huge pages the kernel gives on request (MADV_HUGEPAGE).
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("SKIP: transparent huge pages are off (transparent_hugepage/enabled: {thp:?})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("hot_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/hot_check.c");
    common::build_c(&[&src], &exe);
    let out = common::run_check(&mut Command::new(&exe));
    let c = common::c_layout(&out);
    let mut rust = rust_layout!(
        "kioku_hot_page",
        HotPage,
        [addr: u64, count: u32, hits: u32, seen: u32, pad: u32]
    );
    rust.extend(rust_layout!(
        "kioku_hot_notice",
        HotNotice,
        [generation: u64, hot_pages: u64, new_hot: u64, promoted: u64, compacted: u64,
         settled: u32, pad: u32]
    ));
    rust.extend(rust_layout!(
        "kioku_hot_policy",
        HotPolicy,
        [promote_fraction: f64, max_fill: f64, min_observed: u64, budget: u64, revisit_ms: u64,
         demote_fraction: f64]
    ));
    rust.extend(rust_layout!(
        "kioku_hot_state",
        HotStatus,
        [enabled: u32, settled: u32, hot_pages: u64, promoted_ranges: u64,
         huge_pages_used: u64, tracked_pages: u64, sample_pages: u64, last_scan_ns: u64,
         totals: HotReport]
    ));
    rust.extend(rust_layout!("kioku_hot_report", HotReport, []));
    assert_eq!(c, rust, "C layout (left) differs from Rust's (right)");
}
