//! `tests/c/api_check.c`: every function of kioku.h called from C, linked statically against
//! `libkioku.a` and dynamically against `libkioku.so`; and the C layout of the header's structs
//! compared with the Rust definitions.

mod common;

use kioku::{CheckpointStats, Recovery};
use kioku_testkit::cprog::{self, Link};
use std::path::Path;
use std::process::Command;

#[test]
fn every_function_behaves_as_the_header_says_from_c() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("api_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api_check.c");
    common::build_c(&[&src], &exe);
    let pools = tempfile::tempdir().unwrap();
    let out = common::run_check(Command::new(&exe).arg(pools.path()));

    // Struct layouts: C's offsetof/sizeof against Rust's.
    let c = common::c_layout(&out);
    let mut rust = rust_layout!(
        "kioku_checkpoint_stats",
        CheckpointStats,
        [epoch: u64, dirty_pages: u64, dirty_bytes: u64, scan_ns: u64, persist_ns: u64,
         sync_ns: u64, total_ns: u64]
    );
    rust.extend(rust_layout!(
        "kioku_recovery",
        Recovery,
        [epoch: u64, time_ns: u64, meta_len: u64, pages_synced: u64, source_ctx: u32,
         used_copy: u32]
    ));
    assert_eq!(c, rust, "C layout (left) differs from Rust's (right)");
}

#[test]
fn the_shared_library_exports_the_same_api() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("api_check_so");
    let lib = common::lib_dir();
    assert!(
        lib.join("libkioku.so").exists(),
        "no libkioku.so in {}",
        lib.display()
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api_check.c");
    cprog::build(&["-std=c99"], &[&src], Link::Shared("kioku"), &exe);
    // It really is the library just built that runs (cargo's LD_LIBRARY_PATH may also list
    // a directory with an older libkioku.so).
    let ldd = Command::new("ldd").arg(&exe).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let want = format!("libkioku.so => {}", lib.join("libkioku.so").display());
    assert!(ldd.contains(&want), "wanted {want:?} in\n{ldd}");
    let pools = tempfile::tempdir().unwrap();
    common::run_check(Command::new(&exe).arg(pools.path()));
}

#[test]
fn the_header_compiles_as_cxx_and_alone() {
    // C++ (extern "C" guard) and C89-style inclusion twice (include guard), no other headers.
    let dir = tempfile::tempdir().unwrap();
    let tu = dir.path().join("t.cc");
    std::fs::write(
        &tu,
        "#include <kioku.h>\n#include <kioku.h>\nint main() { kioku_engine *e = 0; \
         kioku_close(e); return kioku_api_version() == KIOKU_API_VERSION ? 0 : 1; }\n",
    )
    .unwrap();
    cprog::assert_compiles("c++", &["-x", "c++", "-std=c++11"], &tu);
}
