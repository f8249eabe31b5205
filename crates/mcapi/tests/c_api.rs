//! The C API through real processes: `tests/c/fts.c` (every function of
//! `include/kioku_mcapi.h` and the status codes it documents) compiled against the shared
//! library and run as two nodes over shared memory and over TCP; and the header itself:
//! it compiles as C and C++, declares exactly what the library exports, documents every
//! declaration, and its constants match the library's.

mod common;
use common::cprog::{header, run_fts_pair, LIB};
use kioku_testkit::cprog::{self, strip_comments};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn job(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

#[test]
fn fts_over_shared_memory() {
    run_fts_pair(
        &[],
        &[
            ("KIOKU_MCAPI_JOB", job("fts-shm")),
            ("KIOKU_MCAPI_TRANSPORT", "shm".into()),
            ("KIOKU_MCAPI_NODES", "2".into()),
        ],
    );
}

#[test]
fn fts_over_tcp() {
    let ports = kioku_testkit::ports::free_ports(2);
    run_fts_pair(
        &[],
        &[
            ("KIOKU_MCAPI_JOB", job("fts-tcp")),
            ("KIOKU_MCAPI_TRANSPORT", "tcp".into()),
            ("KIOKU_MCAPI_NODES", "2".into()),
            (
                "KIOKU_MCAPI_ADDRESSES",
                format!("0=127.0.0.1:{},1=127.0.0.1:{}", ports[0], ports[1]),
            ),
            (
                "KIOKU_MCAPI_SECRET",
                "00112233445566778899aabbccddeeff0011".into(),
            ),
        ],
    );
}

/// Names of the functions the header declares (a prototype ends with `);`).
fn declared(h: &str) -> BTreeSet<String> {
    let code = strip_comments(h);
    code.split(';')
        .map(|d| {
            // Drop preprocessor lines and anything up to the last closing brace.
            let d: String = d
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n");
            let d = d.rsplit('}').next().unwrap_or("").trim().to_string();
            d
        })
        .filter(|d| d.ends_with(')') && !d.contains("typedef"))
        .filter_map(|d| {
            let open = d.find('(')?;
            let name = d[..open].split_whitespace().last()?.trim_start_matches('*');
            (name.starts_with("mcapi_") || name.starts_with("kioku_mcapi_"))
                .then(|| name.to_string())
        })
        .collect()
}

#[test]
fn the_header_declares_exactly_the_exports_and_documents_them() {
    let h = header();
    let decl = declared(&h);
    assert!(decl.len() >= 50, "{decl:?}");
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/capi.rs")).unwrap();
    let exported = cprog::extern_c_fns(&src);
    assert_eq!(decl, exported, "header (left) and library (right) differ");
    // The shared library exports each of them.
    cprog::assert_exports(&cprog::lib_dir(LIB).join(LIB), &decl);
    // Every prototype has a comment right above it that says how it fails.
    let lines: Vec<&str> = h.lines().collect();
    for name in &decl {
        let at = lines
            .iter()
            .position(|l| !l.starts_with(' ') && l.contains(&format!("{name}(")))
            .unwrap_or_else(|| panic!("{name} not found at the start of a line"));
        cprog::assert_says_how_it_fails(&lines, at, name);
    }
}

#[test]
fn the_header_constants_match_the_library() {
    let h = strip_comments(&header());
    // The status enum, in order, is the library's.
    let body = &h[h.find("enum mcapi_status_codes {").unwrap()..];
    let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
    let names: Vec<&str> = body
        .split(',')
        .map(|s| s.trim().split('=').next().unwrap().trim())
        .filter(|s| !s.is_empty())
        .collect();
    let lib: Vec<&str> = kioku_mcapi::STATUS_CODES.iter().map(|(_, n)| *n).collect();
    assert_eq!(names, lib);
    assert!(body.contains("MCAPI_SUCCESS = 1"));
    let define = |name: &str| -> i64 {
        let line = h
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name) && l.starts_with("#define"))
            .unwrap_or_else(|| panic!("#define {name} missing"));
        let v = line
            .split_whitespace()
            .nth(2)
            .unwrap()
            .trim_end_matches('u');
        if let Some(hex) = v.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).unwrap()
        } else {
            v.parse().unwrap()
        }
    };
    use kioku_mcapi::capi as c;
    assert_eq!(define("MCAPI_VERSION"), c::MCAPI_VERSION as i64);
    assert_eq!(define("KIOKU_MCAPI_ORG_ID"), c::KIOKU_MCAPI_ORG_ID as i64);
    assert_eq!(
        define("KIOKU_MCAPI_IMPL_VERSION"),
        c::KIOKU_MCAPI_IMPL_VERSION as i64
    );
    assert_eq!(
        define("MCAPI_MAX_MSG_SIZE"),
        kioku_mcapi::MAX_PAYLOAD as i64
    );
    assert_eq!(
        define("MCAPI_MAX_PKT_SIZE"),
        kioku_mcapi::MAX_PAYLOAD as i64
    );
    assert_eq!(
        define("MCAPI_MIN_PRIORITY"),
        kioku_mcapi::MIN_PRIORITY as i64
    );
    assert_eq!(define("MCAPI_MAX_PORT"), kioku_mcapi::MAX_PORT as i64);
    assert_eq!(define("MCAPI_MAX_NODE"), kioku_mcapi::MAX_NODE as i64);
    assert_eq!(
        define("MCAPI_ENDP_ATTR_TIMEOUT"),
        c::MCAPI_ENDP_ATTR_TIMEOUT as i64
    );
    assert_eq!(define("MCAPI_ENDP_ATTR_END"), c::MCAPI_ENDP_ATTR_END as i64);
    assert_eq!(
        define("KIOKU_MCAPI_NODE_ATTR_STATE"),
        c::KIOKU_MCAPI_NODE_ATTR_STATE as i64
    );
    assert_eq!(
        define("KIOKU_MCAPI_NODE_FINALIZED"),
        c::KIOKU_MCAPI_NODE_FINALIZED as i64
    );
    assert_eq!(
        define("MCAPI_MAX_STATUS_SIZE"),
        c::MCAPI_MAX_STATUS_SIZE as i64
    );
}

#[test]
fn the_header_compiles_as_c_and_cxx_with_the_librarys_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("h.c");
    std::fs::write(
        &src,
        "#include \"kioku_mcapi.h\"\n#include <stdio.h>\n#include <stddef.h>\n\
         int main(void) { printf(\"%zu %zu %zu %zu %zu\", sizeof(mcapi_info_t), \
         sizeof(mcapi_param_t), sizeof(mcapi_node_attributes_t), sizeof(mcapi_request_t), \
         sizeof(mcapi_endpoint_t)); return 0; }\n",
    )
    .unwrap();
    cprog::assert_compiles("cc", &["-std=c99"], &src);
    cprog::assert_compiles("c++", &["-x", "c++", "-std=c++17"], &src);
    let exe = dir.path().join("h");
    let o = Command::new(cprog::cc())
        .arg("-I")
        .arg(cprog::repo_root().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = Command::new(&exe).output().unwrap();
    use kioku_mcapi::capi as c;
    let want = format!(
        "{} {} {} {} {}",
        std::mem::size_of::<c::McapiInfo>(),
        std::mem::size_of::<c::McapiParam>(),
        std::mem::size_of::<c::McapiNodeAttributes>(),
        std::mem::size_of::<c::McapiRequest>(),
        std::mem::size_of::<c::McapiEndpoint>()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}
