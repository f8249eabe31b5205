//! Building C programs against `include/kioku.h` and the library cargo built for these tests,
//! and comparing the C layout of the header's structs with the Rust definitions.

#![allow(dead_code)] // Each test binary uses its own part.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kioku_testkit::cprog::{self, Link};

/// The static library the C programs link against.
const ARCHIVE: &str = "libkioku.a";

/// The directory holding the `libkioku.a` (and `libkioku.so`) built for these tests.
pub fn lib_dir() -> PathBuf {
    cprog::lib_dir(ARCHIVE)
}

/// Compiles the C sources into `out` (C99, pedantic), linked statically against `libkioku.a`,
/// with warnings as errors. Panics with the compiler's output if it fails.
pub fn build_c(sources: &[&Path], out: &Path) {
    cprog::build(
        &["-std=c99", "-pedantic", "-O1"],
        sources,
        Link::Static(ARCHIVE),
        out,
    );
}

/// Runs a command to completion and returns its output.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run the C program")
}

/// Runs a C check program to completion and returns its standard output; panics with both
/// outputs unless it succeeded and its last line is `ok`.
pub fn run_check(cmd: &mut Command) -> String {
    let o = run(cmd);
    let (out, err) = text(&o);
    assert!(
        o.status.success() && out.ends_with("ok\n"),
        "{} failed ({:?}):\n{err}\n{out}",
        cmd.get_program().to_string_lossy(),
        o.status
    );
    out
}

/// Standard output and error as text, for messages.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Offset and size of each struct field (`"type.field"`) and size of each struct (`"type"`,
/// offset 0), from the lines `layout TYPE FIELD OFFSET SIZE` and `size TYPE SIZE` a C check
/// program prints.
pub type Layout = BTreeMap<String, (usize, usize)>;

/// The layout the C program printed in `out` (other lines are ignored).
pub fn c_layout(out: &str) -> Layout {
    let mut c = Layout::new();
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
    c
}

/// The Rust layout of `$ty` under the C name `$cname`, in the shape of [`c_layout`]:
/// `rust_layout!("kioku_recovery", Recovery, [epoch: u64, time_ns: u64])`.
#[macro_export]
macro_rules! rust_layout {
    ($cname:literal, $ty:ty, [$($f:ident: $fty:ty),*]) => {{
        let mut m = $crate::common::Layout::new();
        m.insert($cname.to_string(), (0, std::mem::size_of::<$ty>()));
        $(m.insert(
            format!("{}.{}", $cname, stringify!($f)),
            (std::mem::offset_of!($ty, $f), std::mem::size_of::<$fty>()),
        );)*
        m
    }};
}
