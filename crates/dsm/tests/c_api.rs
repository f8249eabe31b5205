//! The C side: `include/kioku_dsm.h` declares exactly the library's exports, each with a
//! comment; its constants are the library's; it compiles as C and C++; and the C Laplace
//! example (`examples/dsm/laplace.c`) built against `libkioku_dsm.so` gives a serial run's
//! grid, bit for bit, as 3 node processes, with a checkpoint and a rollback in the middle.

mod common;
use common::{job_env, Via};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kioku_testkit::cprog::{self, Link};

/// The shared library the C programs link against.
const LIB: &str = "libkioku_dsm.so";

fn header() -> String {
    std::fs::read_to_string(cprog::repo_root().join("include/kioku_dsm.h")).unwrap()
}

fn capi_src() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/capi.rs")).unwrap()
}

#[test]
fn child_entry() {
    common::child_main();
}

#[test]
fn the_header_declares_exactly_the_exports_each_with_a_comment() {
    let h = header();
    let mut decl = BTreeSet::new();
    let lines: Vec<&str> = h.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if let Some(at) = l.find("kioku_dsm_") {
            if l.trim_end().ends_with(");") && l[at..].contains('(') && !l.starts_with('#') {
                let name = &l[at..at + l[at..].find('(').unwrap()];
                assert!(
                    lines[i - 1].trim_end().ends_with("*/"),
                    "{name}: no comment right above it"
                );
                decl.insert(name.to_string());
            }
        }
    }
    let exported = cprog::extern_c_fns(&capi_src());
    assert_eq!(decl, exported, "header (left) and library (right) differ");
    assert_eq!(decl.len(), 15);
    cprog::assert_exports(&cprog::lib_dir(LIB).join(LIB), &decl);
}

#[test]
fn the_header_constants_are_the_librarys() {
    let mut h = BTreeMap::new();
    for l in header().lines() {
        if let Some(rest) = l.strip_prefix("#define KIOKU_DSM_") {
            let mut it = rest.split_whitespace();
            let (name, value) = (it.next().unwrap(), it.next().unwrap_or(""));
            if let Ok(v) = value.trim_matches(|c| c == '(' || c == ')').parse::<i32>() {
                h.insert(format!("KIOKU_DSM_{name}"), v);
            }
        }
    }
    let mut lib = BTreeMap::new();
    for l in capi_src().lines() {
        if let Some(rest) = l.strip_prefix("pub const KIOKU_DSM_") {
            let (name, value) = rest.split_once(": c_int = ").unwrap();
            lib.insert(
                format!("KIOKU_DSM_{name}"),
                value.trim_end_matches(';').parse::<i32>().unwrap(),
            );
        }
    }
    assert_eq!(h, lib);
    assert_eq!(lib.len(), 13);
}

#[test]
fn the_header_compiles_as_c99_and_cxx17() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t.c");
    std::fs::write(
        &src,
        "#include \"kioku_dsm.h\"\nint main(void) { return kioku_dsm_nodes() < 0; }\n",
    )
    .unwrap();
    cprog::assert_compiles("cc", &["-std=c99"], &src);
    cprog::assert_compiles("c++", &["-x", "c++", "-std=c++17"], &src);
}

/// `examples/dsm/laplace.c` built against `libkioku_dsm.so`, in `dir`.
fn build_laplace(dir: &Path) -> PathBuf {
    let exe = dir.join("laplace");
    let src = cprog::repo_root().join("examples/dsm/laplace.c");
    cprog::build(
        &["-std=c11", "-O2"],
        &[&src],
        Link::Shared("kioku_dsm"),
        &exe,
    );
    exe
}

#[test]
fn the_c_laplace_example_equals_its_serial_run() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_laplace(dir.path());
    let children: Vec<_> = job_env(Via::Shm, 3)
        .into_iter()
        .map(|env| {
            Command::new(&exe)
                .args(["512", "20", "--check", "--rollback"])
                .envs(env)
                // cargo's LD_LIBRARY_PATH would win over the rpath and may hold an older build.
                .env_remove("LD_LIBRARY_PATH")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (i, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "node {i}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let out0 = String::from_utf8_lossy(&outs[0].stdout);
    assert!(out0.contains(" equal"), "{out0}");
}

#[test]
fn the_c_laplace_survives_a_killed_node_with_a_standby() {
    let dir = tempfile::tempdir().unwrap();
    let exe = build_laplace(dir.path());
    // 3 nodes and a standby; node 1 is SIGKILLed at its 12th barrier.
    let children: Vec<_> = job_env(Via::Shm, 4)
        .into_iter()
        .enumerate()
        .map(|(i, env)| {
            let mut c = Command::new(&exe);
            c.args(["256", "30", "--check", "--ft", "5"])
                .envs(env)
                .env("KIOKU_DSM_STANDBYS", "1")
                .env_remove("LD_LIBRARY_PATH")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if i == 1 {
                c.env("KIOKU_DSM_FAILPOINT", "barrier:12");
            }
            c.spawn().unwrap()
        })
        .collect();
    let outs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let show = || {
        outs.iter()
            .enumerate()
            .map(|(i, o)| {
                format!(
                    "process {i} ({}): {}\n{}",
                    o.status,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(outs[1].status.signal(), Some(libc::SIGKILL), "{}", show());
    for i in [0, 2, 3] {
        assert!(outs[i].status.success(), "{}", show());
        assert!(
            String::from_utf8_lossy(&outs[i].stdout).contains("RECOVERIES=1"),
            "{}",
            show()
        );
    }
    assert!(
        String::from_utf8_lossy(&outs[0].stdout).contains(" equal"),
        "{}",
        show()
    );
}
