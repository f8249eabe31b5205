//! `kioku pool create / inspect` as a user runs them.

use std::path::Path;
use std::process::Command;

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

fn vector(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn create_then_inspect_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.pool");
    let ps = p.to_str().unwrap();
    let (code, out, err) = kioku(&[
        "pool",
        "create",
        ps,
        "--kind",
        "kioku.cli-test",
        "--medium",
        "file",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("on file"), "{out}");
    let (code, out, _) = kioku(&["pool", "inspect", ps, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"], "healthy");
    assert_eq!(v["header"]["kind"], "kioku.cli-test");
    assert_eq!(v["slots"][0]["role"], "live");
    assert_eq!(v["slots"][1]["state"], "empty");
    // Creating again refuses and keeps the pool.
    let before = std::fs::read(&p).unwrap();
    let (code, _, err) = kioku(&["pool", "create", ps]);
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&p).unwrap(), before);
}

#[test]
fn inspect_reports_each_broken_vector_with_a_failing_status() {
    let (code, out, _) = kioku(&["pool", "inspect", &vector("valid.pool")]);
    assert_eq!(code, 0);
    assert!(out.contains("section gamma"), "{out}");
    for (file, words) in [
        ("bad-magic.pool", "not a kioku pool"),
        ("bad-version.pool", "version 2 is not supported"),
        ("truncated-header.pool", "truncated"),
        ("truncated-data.pool", "TRUNCATED"),
        ("header-checksum.pool", "header checksum mismatch"),
        ("torn-live-slot.pool", "allowing rollback"),
        ("bad-live-table.pool", "section table checksum mismatch"),
        ("bad-index.pool", "live index holds 2"),
        ("both-slots-damaged.pool", "no intact commit"),
    ] {
        let (code, out, err) = kioku(&["pool", "inspect", &vector(file)]);
        assert_eq!(code, 1, "{file}");
        assert!(err.lines().count() == 1, "{file}: one-line error: {err}");
        assert!(
            out.contains(words) || err.contains(words),
            "{file}: {out}{err}"
        );
    }
}

#[test]
fn inspect_of_a_missing_file() {
    let (code, _, err) = kioku(&["pool", "inspect", "/nonexistent/x.pool"]);
    assert_eq!(code, 1);
    assert!(err.contains("No such file"), "{err}");
}

/// `--deep` reads every page of a checkpoint pool: a page damaged in both contexts is named
/// and the exit status says so; without `--deep` the pages are not read.
#[test]
fn inspect_deep_names_pages_that_fail_their_checksums() {
    use kioku_ckpt::{Engine, EngineOptions, RegionOptions};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.pool");
    let opts = EngineOptions {
        medium: kioku_pool::MediumChoice::Exactly(kioku_pool::MediumKind::File),
        ..Default::default()
    };
    let mut e = Engine::create(&p, &opts).unwrap();
    e.create_region("data", 3 * 4096, RegionOptions::default())
        .unwrap();
    e.checkpoint(b"m").unwrap();
    drop(e);
    let ps = p.to_str().unwrap();
    let (code, out, err) = kioku(&["pool", "inspect", ps, "--deep"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("every page of epoch 1 verifies"), "{out}");
    let r = kioku_pool::inspect::inspect(&p).unwrap();
    let slot = r.slots.iter().find(|s| s.role == "live").unwrap();
    let kioku_pool::examine::SlotState::Intact { sections, .. } = &slot.state else {
        panic!()
    };
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    for ctx in 0..2 {
        let s = sections
            .iter()
            .find(|s| s.name == format!("ckpt.r1.{ctx}"))
            .unwrap();
        f.write_all_at(&[0xff], s.offset + 2 * 4096 + 1).unwrap();
    }
    let (code, _, _) = kioku(&["pool", "inspect", ps]);
    assert_eq!(code, 0);
    let (code, out, err) = kioku(&["pool", "inspect", ps, "--deep"]);
    assert_ne!(code, 0);
    assert!(
        out.contains("region 'data' page 2 fails its checksum in both contexts"),
        "{out}"
    );
    assert!(err.contains("1 page(s) of the checkpoint fail"), "{err}");
}
