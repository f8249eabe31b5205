//! The pymemcache suite (tests/py/pymemcache_suite.py) against kioku-cache. pymemcache comes
//! from PyPI into a venv under target/; without python3 or the package index the test skips,
//! saying what is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

fn venv_python() -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/cache-venv");
    let python = target.join("bin/python");
    let has = |p: &Path| {
        Command::new(p)
            .args(["-c", "import pymemcache"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has(&python) {
        return Some(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&target)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!(
            "SKIP pymemcache: cannot create a venv (python3 -m venv; Debian package python3-venv)"
        );
        return None;
    }
    let pip = Command::new(target.join("bin/pip"))
        .args(["install", "-q", "pymemcache"])
        .status();
    if !pip.is_ok_and(|s| s.success()) || !has(&python) {
        eprintln!("SKIP pymemcache: pip cannot install pymemcache (no package index?)");
        return None;
    }
    Some(python)
}

#[test]
fn pymemcache_suite_passes() {
    let Some(python) = venv_python() else { return };
    let (item_max, mem) = (512 * 1024, 8 << 20);
    let server = Server::start(&["-I", "512k", "-m", "8", "-t", "2"]);
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/pymemcache_suite.py");
    let out = Command::new(python)
        .arg(suite)
        .args([
            "127.0.0.1",
            &server.addr.port().to_string(),
            &item_max.to_string(),
            &mem.to_string(),
        ])
        .output()
        .expect("run the suite");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pymemcache suite failed:\n{text}");
    assert!(text.contains("all cases passed"), "{text}");
}
