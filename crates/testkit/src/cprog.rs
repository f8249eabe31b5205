//! C programs built against the repository's `include/` and linked against the library cargo
//! built for the running test (never an older copy elsewhere), and the checks that a header
//! and its library agree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (holds `include/` and `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The C compiler: `$CC`, else `cc`.
pub fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// The directory nearest above the running test executable that holds `file` (a library):
/// `cargo test` builds a package's cdylib and staticlib next to its tests
/// (`<target>/<profile>/deps/`); `<target>/<profile>/` (where `cargo build` puts them) is
/// the fallback.
pub fn lib_dir(file: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .skip(1)
        .find(|d| d.join(file).exists())
        .unwrap_or_else(|| {
            panic!(
                "no {file} above {}; build its crate first (`cargo build -p <crate>`)",
                exe.display()
            )
        })
        .to_path_buf()
}

/// How a C program is linked against a kioku library.
#[derive(Clone, Copy, Debug)]
pub enum Link<'a> {
    /// Statically, against the archive of that file name (`"libkioku.a"`), with the system
    /// libraries Rust's standard library needs.
    Static(&'a str),
    /// Dynamically, against `lib<name>.so` (`"kioku_dsm"`), found at run time through a
    /// DT_RPATH to the directory it was built in. DT_RPATH, not RUNPATH: it wins over the
    /// `LD_LIBRARY_PATH` cargo sets, which can list a directory with an older build.
    Shared(&'a str),
}

/// Compiles `sources` into `out` with `flags` (language standard, optimisation, defines),
/// warnings as errors, `include/` on the include path, linked as `link` says. Panics with the
/// compiler's output if it fails.
pub fn build(flags: &[&str], sources: &[&Path], link: Link<'_>, out: &Path) {
    let cc = cc();
    let mut cmd = Command::new(&cc);
    cmd.args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-I"])
        .arg(repo_root().join("include"))
        .args(sources);
    match link {
        Link::Static(archive) => {
            cmd.arg(lib_dir(archive).join(archive));
            cmd.args(["-lpthread", "-ldl", "-lm", "-lrt", "-lgcc_s", "-lutil"]);
        }
        Link::Shared(name) => {
            let dir = lib_dir(&format!("lib{name}.so"));
            cmd.arg(format!("-L{}", dir.display()))
                .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", dir.display()))
                .arg(format!("-l{name}"));
        }
    }
    let o = cmd
        .arg("-o")
        .arg(out)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}` (is gcc installed?): {e}"));
    assert!(
        o.status.success(),
        "compiling {sources:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Checks that `src` (which includes a header of `include/`) compiles with `compiler` and
/// `flags` (the standard, `-x c++` for C++ whatever the file's name, defines), pedantic,
/// warnings as errors. Panics with the compiler's output if it does not; skips loudly where
/// the compiler is missing.
pub fn assert_compiles(compiler: &str, flags: &[&str], src: &Path) {
    let o = Command::new(compiler)
        .args(flags)
        .args([
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(repo_root().join("include"))
        .arg(src)
        .output();
    match o {
        Ok(o) => assert!(
            o.status.success(),
            "{compiler} {flags:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("SKIP: {compiler} is missing ({e})"),
    }
}

/// A header's text without its `/* */` comments (kioku's headers use no `//` comments).
pub fn strip_comments(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find("*/").expect("unterminated comment") + i + 2;
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Asserts that the declaration of `name` at line `at` of a header's `lines` has a comment
/// right above it, and that the comment says how the function fails (`Errors:`) or that it
/// cannot (`Never fails`).
pub fn assert_says_how_it_fails(lines: &[&str], at: usize, name: &str) {
    assert!(
        at > 0 && lines[at - 1].trim_end().ends_with("*/"),
        "{name}: no comment right above its declaration"
    );
    let start = lines[..at]
        .iter()
        .rposition(|l| l.trim_start().starts_with("/*"))
        .expect("the comment's start");
    let doc = lines[start..at].join(" ");
    assert!(
        doc.contains("Errors:") || doc.contains("Never fails"),
        "{name}: its comment does not say how it fails"
    );
}

/// The functions a Rust source file exports to C (`extern "C" fn`), each checked to carry
/// `#[no_mangle]` on the line right above.
pub fn extern_c_fns(rust_src: &str) -> BTreeSet<String> {
    const MARK: &str = "extern \"C\" fn ";
    let mut names = BTreeSet::new();
    let mut rest = rust_src;
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        let name = &after[..after.find('(').expect("( after an extern \"C\" fn")];
        assert!(
            rest[..i]
                .trim_end()
                .rsplit('\n')
                .nth(1)
                .is_some_and(|l| l.trim() == "#[no_mangle]"),
            "{name} lacks #[no_mangle]"
        );
        names.insert(name.to_string());
        rest = after;
    }
    names
}

/// Asserts that the shared library `lib` exports (defines, dynamically) every one of `names`.
pub fn assert_exports(lib: &Path, names: &BTreeSet<String>) {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("run nm (binutils)");
    let syms = String::from_utf8_lossy(&o.stdout);
    for f in names {
        assert!(
            syms.lines().any(|l| l.ends_with(&format!(" {f}"))),
            "{f} is not exported by {}",
            lib.display()
        );
    }
}
