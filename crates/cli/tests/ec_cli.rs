//! Round trips through `kioku ec` with deleted, corrupted and mismatched shard files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kioku(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kioku"))
        .args(args)
        .env("KIOKU_LOG", "warn")
        .output()
        .expect("run kioku")
}

fn ok(args: &[&str]) -> Output {
    let o = kioku(args);
    assert!(
        o.status.success(),
        "kioku {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn encode(dir: &Path, data: &[u8], k: usize, m: usize, unit: Option<usize>) -> Vec<PathBuf> {
    let file = dir.join("input.bin");
    fs::write(&file, data).unwrap();
    let (ks, ms) = (k.to_string(), m.to_string());
    let us = unit.map(|u| u.to_string());
    let mut args = vec![
        "ec",
        "encode",
        "--k",
        &ks,
        "--m",
        &ms,
        file.to_str().unwrap(),
    ];
    if let Some(u) = &us {
        args.extend(["--stripe-unit", u]);
    }
    let o = ok(&args);
    let paths: Vec<PathBuf> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect();
    assert_eq!(paths.len(), k + m);
    for p in &paths {
        assert!(p.exists(), "{}", p.display());
    }
    paths
}

fn decode(paths: &[&PathBuf], out: &Path) -> Output {
    let mut args = vec!["ec", "decode", "--force", "-o", out.to_str().unwrap()];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    kioku(&args)
}

fn verify_json(paths: &[&PathBuf]) -> (bool, serde_json::Value) {
    let mut args = vec!["ec", "verify", "--json"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    let o = kioku(&args);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json report");
    (o.status.success(), v)
}

fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    fs::write(path, b).unwrap();
}

#[test]
fn round_trip_with_every_loss_of_m_shards() {
    let dir = tempfile::tempdir().unwrap();
    // Several full stripes and a partial one (unit 4096, k = 4: 16 KiB per stripe).
    let data = bytes(16384 * 5 + 1234, 1);
    let paths = encode(dir.path(), &data, 4, 2, Some(4096));
    let out = dir.path().join("out.bin");
    for a in 0..6 {
        for b in a + 1..6 {
            let keep: Vec<&PathBuf> = (0..6)
                .filter(|i| *i != a && *i != b)
                .map(|i| &paths[i])
                .collect();
            let o = decode(&keep, &out);
            assert!(
                o.status.success(),
                "lost {a},{b}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(fs::read(&out).unwrap(), data, "lost {a},{b}");
        }
    }
    // Shards given in any order.
    let rev: Vec<&PathBuf> = paths.iter().rev().collect();
    assert!(decode(&rev, &out).status.success());
    assert_eq!(fs::read(&out).unwrap(), data);
}

#[test]
fn too_few_shards_is_refused_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(50_000, 2);
    let paths = encode(dir.path(), &data, 3, 2, None);
    let out = dir.path().join("out.bin");
    let keep: Vec<&PathBuf> = paths[..2].iter().collect();
    let o = decode(&keep, &out);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("only 2 intact shards of the 3 needed"),
        "{err}"
    );
    assert!(!out.exists());
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        6,
        "no temp file left behind"
    );
}

#[test]
fn corrupted_payload_is_detected_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(100_003, 3);
    let paths = encode(dir.path(), &data, 4, 2, Some(4096));
    let out = dir.path().join("out.bin");
    // Damage data shard 1's payload and delete parity shard 4: shards 0,2,3,5 remain sound.
    flip(&paths[1], 64 + 777);
    fs::remove_file(&paths[4]).unwrap();
    let given: Vec<&PathBuf> = [0, 1, 2, 3, 5].iter().map(|&i| &paths[i]).collect();
    let o = decode(&given, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("damaged"));
    assert_eq!(fs::read(&out).unwrap(), data);

    let (status, v) = verify_json(&given);
    assert!(!status, "verify must fail when a shard is damaged");
    assert_eq!(v["damaged"], 1);
    assert_eq!(v["recoverable"], true);
    assert_eq!(v["file_checksum_ok"], true);
    assert_eq!(v["missing"], serde_json::json!([1, 4]));
    let bad: Vec<&serde_json::Value> = v["shards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["ok"] == false)
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(bad[0]["path"].as_str().unwrap().ends_with(".001.kec"));
    assert!(bad[0]["error"].as_str().unwrap().contains("checksum"));

    // One more damaged shard leaves only 3 sound of the 4 needed.
    flip(&paths[5], 64 + 5);
    let o = decode(&given, &out);
    assert!(!o.status.success());
    let (_, v) = verify_json(&given);
    assert_eq!(v["damaged"], 2);
    assert_eq!(v["recoverable"], false);
}

#[test]
fn corrupted_header_and_foreign_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(9_999, 4);
    let paths = encode(dir.path(), &data, 2, 2, None);
    flip(&paths[0], 13); // the k field: header CRC no longer matches
    let junk = dir.path().join("junk.kec");
    fs::write(&junk, b"definitely not a shard").unwrap();
    let given: Vec<&PathBuf> = vec![&paths[0], &paths[1], &paths[2], &paths[3], &junk];
    let (status, v) = verify_json(&given);
    assert!(!status);
    assert_eq!(v["damaged"], 2);
    assert_eq!(v["shards"][0]["ok"], false);
    assert!(v["shards"][0]["error"]
        .as_str()
        .unwrap()
        .contains("header checksum"));
    assert!(v["shards"][4]["error"]
        .as_str()
        .unwrap()
        .contains("bad magic"));
    assert_eq!(v["recoverable"], true);
    let out = dir.path().join("out.bin");
    let o = decode(&given, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(fs::read(&out).unwrap(), data);
}

#[test]
fn shards_of_another_file_are_inconsistent() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    let pa = encode(&a, &bytes(5000, 5), 2, 1, None);
    let pb = encode(&b, &bytes(5000, 6), 2, 1, None);
    let given: Vec<&PathBuf> = vec![&pa[0], &pa[1], &pb[2]];
    let (status, v) = verify_json(&given);
    assert!(!status);
    assert_eq!(v["shards"][2]["ok"], false);
    assert!(v["shards"][2]["error"]
        .as_str()
        .unwrap()
        .contains("disagrees"));
    let out = dir.path().join("out.bin");
    assert!(decode(&given, &out).status.success());
    assert_eq!(fs::read(&out).unwrap(), bytes(5000, 5));
}

#[test]
fn verify_clean_set_succeeds_and_text_report_names_shards() {
    let dir = tempfile::tempdir().unwrap();
    let paths = encode(dir.path(), &bytes(70_000, 7), 5, 3, Some(4096));
    let all: Vec<&PathBuf> = paths.iter().collect();
    let (status, v) = verify_json(&all);
    assert!(status);
    assert_eq!(v["damaged"], 0);
    assert_eq!(v["k"], 5);
    assert_eq!(v["m"], 3);
    assert_eq!(v["original_len"], 70_000);
    let mut args = vec!["ec", "verify"];
    args.extend(all.iter().map(|p| p.to_str().unwrap()));
    let o = ok(&args);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("8 of 8 shards sound"), "{text}");
}

#[test]
fn empty_file_and_exact_stripe_multiple() {
    let dir = tempfile::tempdir().unwrap();
    for (n, unit) in [(0usize, 4096usize), (3 * 4096 * 2, 4096), (1, 4096)] {
        let data = bytes(n, 8);
        let paths = encode(dir.path(), &data, 3, 1, Some(unit));
        let out = dir.path().join("out.bin");
        let keep: Vec<&PathBuf> = paths[1..].iter().collect();
        let o = decode(&keep, &out);
        assert!(
            o.status.success(),
            "n={n}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(fs::read(&out).unwrap(), data, "n={n}");
        for p in &paths {
            fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn bad_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x");
    fs::write(&f, b"hello").unwrap();
    let fs_ = f.to_str().unwrap();
    for (k, m) in [("0", "1"), ("200", "57"), ("3", "0")] {
        let o = kioku(&["ec", "encode", "--k", k, "--m", m, fs_]);
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("k + m <= 256"));
    }
    // Existing shard files are not overwritten without --force.
    ok(&["ec", "encode", "--k", "2", "--m", "1", fs_]);
    let o = kioku(&["ec", "encode", "--k", "2", "--m", "1", fs_]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    ok(&["ec", "encode", "--k", "2", "--m", "1", "--force", fs_]);
}

#[test]
fn larger_file_with_default_stripe_unit() {
    let dir = tempfile::tempdir().unwrap();
    // More than one default stripe for 10+4 (64 MiB / 14 -> 4 MiB... capped at 1 MiB units).
    let data = bytes(10 * (1 << 20) * 2 + 12345, 9);
    let paths = encode(dir.path(), &data, 10, 4, None);
    let keep: Vec<&PathBuf> = paths
        .iter()
        .enumerate()
        .filter(|(i, _)| ![0, 3, 9, 12].contains(i))
        .map(|(_, p)| p)
        .collect();
    let out = dir.path().join("out.bin");
    let o = decode(&keep, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::read(&out).unwrap() == data);
}

#[test]
fn shards_and_the_rebuilt_file_are_no_more_readable_than_the_input() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(100_000, 11);
    let file = dir.path().join("secret.bin");
    fs::write(&file, &data).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    let o = ok(&[
        "ec",
        "encode",
        "--k",
        "2",
        "--m",
        "1",
        file.to_str().unwrap(),
    ]);
    let paths: Vec<PathBuf> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for p in &paths {
        assert_eq!(mode(p), 0o600, "{}", p.display());
    }
    let out = dir.path().join("rebuilt.bin");
    let o = decode(&[&paths[0], &paths[2]], &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(fs::read(&out).unwrap(), data);
    assert_eq!(mode(&out), 0o600);
}
