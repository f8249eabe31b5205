//! `include/kioku.h` against the Rust side, read from the source text: every `#define` value
//! equals the library's constant, the error codes are exactly the library's (each with its own
//! `kioku_strerror` text), and every `#[no_mangle] extern "C"` function of `src/lib.rs` is
//! declared in the header with the same parameter names and corresponding C types — and the
//! header declares nothing else. Every declaration is preceded by a comment.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::path::Path;

use kioku_testkit::cprog::strip_comments;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn header() -> String {
    read("../../include/kioku.h")
}

/// `#define NAME VALUE` with integer values: `1`, `1u`, `(-3)`.
fn defines(h: &str) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for line in strip_comments(h).lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 3 && w[0] == "#define" {
            let v = w[2].trim_start_matches('(').trim_end_matches(')');
            let v = v.trim_end_matches('u');
            let v: i64 = v
                .parse()
                .unwrap_or_else(|_| panic!("#define {} has a non-integer value {}", w[1], w[2]));
            assert!(
                m.insert(w[1].to_string(), v).is_none(),
                "{} defined twice",
                w[1]
            );
        }
    }
    m
}

#[test]
fn constants_and_error_codes_match_the_library() {
    let d = defines(&header());
    assert_eq!(d["KIOKU_API_VERSION"], kioku::KIOKU_API_VERSION as i64);
    assert_eq!(
        d["KIOKU_REGION_NAME_MAX"],
        kioku::KIOKU_REGION_NAME_MAX as i64
    );
    assert_eq!(
        d["KIOKU_RECOVER_ALLOW_ROLLBACK"],
        kioku::KIOKU_RECOVER_ALLOW_ROLLBACK as i64
    );
    let in_header: BTreeMap<&str, i64> = d
        .iter()
        .filter(|(k, _)| *k == "KIOKU_OK" || k.starts_with("KIOKU_E_"))
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    let in_rust: BTreeMap<&str, i64> = kioku::CODES
        .iter()
        .map(|&(v, name, _)| (name, v as i64))
        .collect();
    assert_eq!(
        in_header, in_rust,
        "header (left) and library (right) codes differ"
    );
    // Codes: 0 then -1, -2, ... without gaps or repeats, so that they can only be appended to.
    let mut values: Vec<i64> = in_rust.values().copied().collect();
    values.sort_unstable_by(|a, b| b.cmp(a));
    let want: Vec<i64> = (0..values.len() as i64).map(|i| -i).collect();
    assert_eq!(values, want);
    // kioku_strerror: one distinct static text per code, another for non-codes.
    let mut texts = std::collections::BTreeSet::new();
    for &(v, name, _) in kioku::CODES {
        // SAFETY: kioku_strerror returns a static NUL-terminated string.
        let t = unsafe { CStr::from_ptr(kioku::kioku_strerror(v)) }
            .to_str()
            .unwrap();
        assert!(!t.is_empty() && t != "unknown error code", "{name}: {t:?}");
        assert!(texts.insert(t), "{name} shares its text {t:?}");
    }
    // SAFETY: as above.
    let unknown = unsafe { CStr::from_ptr(kioku::kioku_strerror(-1000)) };
    assert_eq!(unknown.to_str().unwrap(), "unknown error code");
}

/// A function: name, return type and parameters (name, type) in a normal form: C spelling,
/// no spaces around `*`.
type Sig = (String, Vec<(String, String)>);

fn norm_c_type(t: &str) -> String {
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    t.replace(" *", "*").replace("* ", "*")
}

/// Prototypes `RET kioku_NAME(PARAMS);` of the header.
fn header_functions(h: &str) -> BTreeMap<String, Sig> {
    let code = strip_comments(h);
    let mut m = BTreeMap::new();
    for decl in code.split(';') {
        let decl = decl.trim();
        let Some(open) = decl.find("kioku_").and_then(|i| {
            decl[i..]
                .find('(')
                .map(|j| (i, i + j))
                .filter(|_| decl.ends_with(')'))
        }) else {
            continue;
        };
        let (start, paren) = open;
        // Skip typedefs and the like: a prototype's line starts with its return type.
        let before = decl[..start].trim();
        let last_line = before.rsplit('\n').next().unwrap_or("");
        if before.contains("typedef") || before.contains('{') || last_line.starts_with('#') {
            continue;
        }
        let ret = norm_c_type(before.rsplit('\n').next().unwrap());
        let name = decl[start..paren].trim().to_string();
        let params = &decl[paren + 1..decl.len() - 1];
        let params: Vec<(String, String)> = if params.trim() == "void" {
            vec![]
        } else {
            params
                .split(',')
                .map(|p| {
                    let p = p.trim();
                    let cut = p
                        .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .expect("parameter has a type and a name");
                    (p[cut + 1..].to_string(), norm_c_type(&p[..=cut]))
                })
                .collect()
        };
        assert!(
            m.insert(name.clone(), (ret, params)).is_none(),
            "{name} declared twice"
        );
    }
    m
}

/// The C spelling of a Rust FFI type of `src/lib.rs`.
fn c_of_rust(t: &str) -> String {
    let t = t.trim();
    if let Some(inner) = t.strip_prefix("*mut ") {
        return format!("{}*", c_of_rust(inner));
    }
    if let Some(inner) = t.strip_prefix("*const ") {
        let c = c_of_rust(inner);
        return if c.ends_with('*') {
            format!("{c}const*")
        } else {
            format!("const {c}*")
        };
    }
    match t {
        "c_char" => "char",
        "c_void" => "void",
        "c_int" => "int",
        "usize" => "size_t",
        "u64" => "uint64_t",
        "u32" => "uint32_t",
        "EngineHandle" => "kioku_engine",
        "CheckpointStats" => "kioku_checkpoint_stats",
        "Recovery" => "kioku_recovery",
        "i32" => "int32_t",
        "HotHandle" => "kioku_hot",
        "HotPage" => "kioku_hot_page",
        "HotNotice" => "kioku_hot_notice",
        "HotPolicy" => "kioku_hot_policy",
        "HotReport" => "kioku_hot_report",
        "HotStatus" => "kioku_hot_state",
        "Option<HotNotifyFn>" => "kioku_hot_notify_fn",
        "Option<HotCompactFn>" => "kioku_hot_compact_fn",
        "" => "void",
        other => panic!("no C spelling for the Rust type {other:?}; extend c_of_rust"),
    }
    .to_string()
}

/// `#[no_mangle] pub (unsafe) extern "C" fn kioku_NAME(PARAMS) -> RET` of the Rust source.
fn rust_functions(src: &str) -> BTreeMap<String, Sig> {
    let mut m = BTreeMap::new();
    let mut rest = src;
    let mut exported = 0;
    while let Some(i) = rest.find("extern \"C\" fn ") {
        let head = &rest[..i];
        let after = &rest[i + "extern \"C\" fn ".len()..];
        let open = after.find('(').unwrap();
        let name = after[..open].trim().to_string();
        // The matching ')' (parameters hold no parentheses).
        let close = after.find(')').unwrap();
        let params = &after[open + 1..close];
        let tail = &after[close + 1..];
        let body = tail.find('{').unwrap();
        let ret = tail[..body].trim().trim_start_matches("->").trim();
        let attr_line = head.trim_end().rsplit('\n').nth(1).unwrap_or("");
        assert!(
            attr_line.trim() == "#[no_mangle]",
            "extern \"C\" fn {name} lacks #[no_mangle] on the line before it"
        );
        exported += 1;
        let params: Vec<(String, String)> = params
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (n, t) = p.split_once(':').unwrap();
                (n.trim().to_string(), c_of_rust(t))
            })
            .collect();
        m.insert(name, (c_of_rust(ret), params));
        rest = &tail[body..];
    }
    assert_eq!(exported, src.matches("#[no_mangle]").count());
    m
}

/// The exported functions of every source file of the library.
fn library_functions() -> BTreeMap<String, Sig> {
    let mut all = rust_functions(&read("src/lib.rs"));
    all.extend(rust_functions(&read("src/hot.rs")));
    all
}

#[test]
fn every_exported_function_is_declared_with_its_signature() {
    let h = header();
    let c = header_functions(&h);
    let r = library_functions();
    assert_eq!(c.len(), 34, "functions found in the header: {:?}", c.keys());
    let names_c: Vec<&String> = c.keys().collect();
    let names_r: Vec<&String> = r.keys().collect();
    assert_eq!(
        names_c, names_r,
        "header (left) and library (right) functions differ"
    );
    for (name, sig) in &c {
        assert_eq!(
            sig, &r[name],
            "{name}: header (left) and library (right) differ"
        );
    }
}

#[test]
fn every_declaration_is_documented() {
    let h = header();
    let lines: Vec<&str> = h.lines().collect();
    let decls = header_functions(&h);
    for name in decls.keys() {
        let at = lines
            .iter()
            .position(|l| {
                // The declaration starts in column 0 with its return type.
                l.starts_with(|c: char| c.is_ascii_alphabetic())
                    && !l.starts_with("typedef")
                    && l.contains(&format!("{name}("))
            })
            .unwrap();
        kioku_testkit::cprog::assert_says_how_it_fails(&lines, at, name);
    }
    // Every error code has its own comment too (all but KIOKU_OK).
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("#define KIOKU_E_") {
            assert!(lines[i - 1].trim_end().ends_with("*/"), "{l}: undocumented");
        }
    }
}

#[test]
fn the_parsers_see_a_changed_signature() {
    // The checks above can fail: a header with one parameter type changed is caught.
    let h = header().replace(
        "int kioku_region_resize(kioku_engine *e, const char *name, size_t new_len);",
        "int kioku_region_resize(kioku_engine *e, const char *name, uint64_t new_len);",
    );
    let c = header_functions(&h);
    let r = library_functions();
    assert_ne!(c["kioku_region_resize"], r["kioku_region_resize"]);
    assert_eq!(c["kioku_region_delete"], r["kioku_region_delete"]);
}
