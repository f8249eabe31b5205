//! The C API's test program `tests/c/fts.c`: built once against the shared library, run as
//! a pair of node processes.

use std::path::{Path, PathBuf};
use std::process::Command;

use kioku_testkit::cprog::{self, Link};
use std::sync::OnceLock;
use std::time::Duration;

/// The shared library the C programs link against.
pub const LIB: &str = "libkioku_mcapi.so";

pub fn header() -> String {
    std::fs::read_to_string(cprog::repo_root().join("include/kioku_mcapi.h")).unwrap()
}

/// `tests/c/fts.c`, built once.
pub fn fts() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let exe = dir.path().join("fts");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fts.c");
            cprog::build(
                &["-std=c11", "-D_DEFAULT_SOURCE", "-O1"],
                &[&src],
                Link::Shared("kioku_mcapi"),
                &exe,
            );
            (dir, exe)
        })
        .1
}

/// Runs `fts 0` and `fts 1` with `env`, node i under the command prefix `wrap[i]` (if any),
/// and asserts both pass.
pub fn run_fts_pair(wrap: &[Vec<String>], env: &[(&str, String)]) {
    let children: Vec<_> = (0..2)
        .map(|i| {
            let mut c = match wrap.get(i) {
                Some(prefix) => {
                    let mut c = Command::new(&prefix[0]);
                    c.args(&prefix[1..]).arg(fts());
                    c
                }
                None => Command::new(fts()),
            };
            c.arg(i.to_string());
            for (k, v) in env {
                c.env(k, v);
            }
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut outs = Vec::new();
    for mut c in children {
        loop {
            if c.try_wait().unwrap().is_some() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = c.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        outs.push(c.wait_with_output().unwrap());
    }
    for (i, o) in outs.iter().enumerate() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "node {i} failed:\n{text}");
        assert!(text.contains("checks passed"), "node {i}:\n{text}");
        eprint!("{text}");
    }
}
