//! Building C programs against `include/kioku.h` and the library cargo built for these tests.

#![allow(dead_code)] // Each test binary uses its own part.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (holds `include/` and `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The directory holding `libkioku.a` nearest above this test executable: `cargo test` builds
/// the package's staticlib next to the test (`<target>/<profile>/deps/`) before running its
/// integration tests; `<target>/<profile>/` (where `cargo build` puts it) is the fallback.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .ancestors()
        .skip(1)
        .find(|d| d.join("libkioku.a").exists())
        .unwrap_or_else(|| {
            panic!(
                "no libkioku.a above {}; run `cargo build -p kioku-capi` first",
                exe.display()
            )
        });
    dir.to_path_buf()
}

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compiles the C sources into `out`, linked statically against `libkioku.a`, with warnings
/// as errors. Panics with the compiler's output if it fails.
pub fn build_c(sources: &[&Path], out: &Path) {
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-O1",
        "-I",
    ])
    .arg(repo_root().join("include"));
    cmd.args(sources);
    cmd.arg(lib_dir().join("libkioku.a"));
    // The system libraries Rust's standard library needs in a static link.
    cmd.args([
        "-lpthread",
        "-ldl",
        "-lm",
        "-lrt",
        "-lgcc_s",
        "-lutil",
        "-o",
    ])
    .arg(out);
    let o = cmd
        .output()
        .expect("run the C compiler (cc) — is gcc installed?");
    assert!(
        o.status.success(),
        "compiling {sources:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs a command to completion and returns its output.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run the C program")
}

/// Standard output and error as text, for messages.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
