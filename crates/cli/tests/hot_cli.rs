//! `kioku hot` as a user runs it: `--self` with each backend (text, JSON, heat map), another
//! process's shared memory (root), and the errors for a missing process or one with nothing to
//! sample.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

fn kioku(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kioku"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn self_sampling_finds_the_skewed_third_with_each_backend() {
    for backend in ["refault", "protnone"] {
        let (code, out, err) = kioku(&[
            "hot",
            "--self",
            "--backend",
            backend,
            "--pattern",
            "skewed",
            "--size-mib",
            "8",
            "--duration",
            "1500ms",
            "--period",
            "50ms",
            "--json",
        ]);
        assert_eq!(code, 0, "{backend}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["backend"],
            if backend == "refault" {
                "Refault"
            } else {
                "ProtNone"
            }
        );
        let pages = v["pages"].as_array().unwrap();
        let hot = pages.iter().filter(|p| p["hot"] == true).count();
        // 8 MiB = 2048 pages; the pattern touches a third of them (682), nothing else.
        assert!(
            (550..=683).contains(&hot),
            "{backend}: {hot} hot pages, expected about 682"
        );
        assert!(
            pages.len() <= 683,
            "{backend}: {} pages reported accessed",
            pages.len()
        );
        assert!(v["scans"].as_u64().unwrap() >= 10);
    }
}

#[test]
fn text_output_and_heat_map() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("heat.png");
    let (code, out, err) = kioku(&[
        "hot",
        "--self",
        "--pattern",
        "seq",
        "--size-mib",
        "4",
        "--duration",
        "1s",
        "--period",
        "50ms",
        "--png",
        png.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("# pid "), "{out}");
    assert!(out.contains("(arena)"), "{out}");
    // Runs of pages: "start-end : hits/seen count *".
    assert!(
        out.lines().any(|l| l.contains(" : ") && l.ends_with(" *")),
        "{out}"
    );
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(width, 1024, "one column per page, at most 1024");
    assert!(height >= 120, "{height}");
}

#[test]
fn a_missing_process_or_one_without_shared_memory_is_a_clear_error() {
    let (code, _, err) = kioku(&["hot", "999999999", "--duration", "200ms"]);
    assert_eq!(code, 1);
    assert!(err.contains("process 999999999 does not exist"), "{err}");
    if !is_root() {
        eprintln!("!!!!! SKIPPING the other-process half: needs root !!!!!");
        return;
    }
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let (code, _, err) = kioku(&["hot", &pid, "--duration", "200ms"]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(code, 1);
    assert!(err.contains("no shmem-backed shared mapping"), "{err}");
}

#[test]
fn another_process_shared_memory_is_sampled_from_outside() {
    if !is_root() {
        eprintln!("!!!!! SKIPPING another_process_shared_memory_is_sampled_from_outside: needs root !!!!!");
        return;
    }
    // A Python process with 4 MiB of shared anonymous memory (shmem) reading its first 128
    // pages over and over.
    let script = r#"
import ctypes, mmap, sys, time
m = mmap.mmap(-1, 4 << 20)
for i in range(0, 4 << 20, 4096):
    m[i] = 1
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
print("READY", addr, flush=True)
while True:
    for i in range(0, 128 * 4096, 4096):
        m[i]
    time.sleep(0.001)
"#;
    let mut child = match Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("!!!!! SKIPPING: no python3 ({e}) !!!!!");
            return;
        }
    };
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let pid = child.id().to_string();
    let (code, out, err) = kioku(&[
        "hot",
        &pid,
        "--duration",
        "2s",
        "--period",
        "50ms",
        "--json",
    ]);
    let _ = child.stdin.take().unwrap().write_all(b"");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["backend"], "Refault");
    let pages: Vec<usize> = v["pages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["hot"] == true)
        .map(|p| {
            usize::from_str_radix(p["addr"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
        })
        .collect();
    let inside = pages
        .iter()
        .filter(|&&a| a >= addr && a < addr + 128 * 4096)
        .count();
    assert!(inside >= 100, "{inside} of the 128 hot pages found: {out}");
    // Hot pages elsewhere belong to other shared mappings of the interpreter, never to the
    // cold rest of the arena.
    let cold = pages
        .iter()
        .filter(|&&a| a >= addr + 128 * 4096 && a < addr + (4 << 20))
        .count();
    assert_eq!(cold, 0, "cold pages of the arena reported hot: {out}");
}
