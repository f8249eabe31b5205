//! `tests/c/api_check.c`: every function of kioku.h called from C, linked statically against
//! `libkioku.a` and dynamically against `libkioku.so`; and the C layout of the header's structs
//! compared with the Rust definitions.

mod common;

use kioku::{CheckpointStats, Recovery};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn check_output(exe: &Path, dir: &Path) -> String {
    let o = common::run(Command::new(exe).arg(dir));
    let (out, err) = common::text(&o);
    assert!(
        o.status.success() && out.ends_with("ok\n"),
        "{} failed ({:?}):\n{err}\n{out}",
        exe.display(),
        o.status
    );
    out
}

#[test]
fn every_function_behaves_as_the_header_says_from_c() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("api_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api_check.c");
    common::build_c(&[&src], &exe);
    let pools = tempfile::tempdir().unwrap();
    let out = check_output(&exe, pools.path());

    // Struct layouts: C's offsetof/sizeof against Rust's.
    let mut c: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["layout", ty, field, off, size] => {
                c.insert(
                    format!("{ty}.{field}"),
                    (off.parse().unwrap(), size.parse().unwrap()),
                );
            }
            ["size", ty, size] => {
                c.insert(ty.to_string(), (0, size.parse().unwrap()));
            }
            _ => {}
        }
    }
    macro_rules! rust_layout {
        ($cname:literal, $ty:ty, [$($f:ident: $fty:ty),*]) => {{
            let mut m = BTreeMap::new();
            m.insert($cname.to_string(), (0, std::mem::size_of::<$ty>()));
            $(m.insert(
                format!("{}.{}", $cname, stringify!($f)),
                (std::mem::offset_of!($ty, $f), std::mem::size_of::<$fty>()),
            );)*
            m
        }};
    }
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
    let o = Command::new(common::cc())
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(common::repo_root().join("include"))
        .arg(&src)
        .arg(format!("-L{}", lib.display()))
        // DT_RPATH, not RUNPATH: it wins over the LD_LIBRARY_PATH cargo sets (which can hold a
        // stale copy of the library in target/debug).
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .arg("-Wl,--disable-new-dtags") // RPATH: searched before LD_LIBRARY_PATH
        .args(["-lkioku", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // It really is the library just built that runs (cargo's LD_LIBRARY_PATH may also list
    // a directory with an older libkioku.so).
    let ldd = Command::new("ldd").arg(&exe).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let want = format!("libkioku.so => {}", lib.join("libkioku.so").display());
    assert!(ldd.contains(&want), "wanted {want:?} in\n{ldd}");
    let pools = tempfile::tempdir().unwrap();
    check_output(&exe, pools.path());
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
    let o = Command::new("c++")
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(common::repo_root().join("include"))
        .arg(&tu)
        .output()
        .expect("run c++");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
