//! `kioku group inspect` on real group pools (written here with the checkpoint engine and
//! the group library's metadata, as the library writes them): what a restart would recover
//! in each state, and that inspecting changes nothing.

use kioku_ckpt::{Engine, EngineOptions, RegionOptions};
use kioku_group::meta::{GroupMeta, RegionEntry, Table, MAGIC, VERSION};
use kioku_group::store::{LevelState, Parity, Record};
use kioku_pool::media::{MediumChoice, MediumKind};
use std::path::Path;
use std::process::Command;

fn meta(rank: usize, epoch: u64) -> GroupMeta {
    let table = Table {
        regions: vec![RegionEntry {
            id: 1,
            offset: 0,
            pages: 2,
            bytes: 8192,
        }],
    };
    GroupMeta {
        magic: MAGIC.into(),
        version: VERSION,
        ranks: 6,
        rank,
        epoch,
        level: 3,
        members: (0..6).collect(),
        tables: vec![table; 6],
        group_size: 6,
        parity: 2,
        partner: false,
        rs: true,
        journals: vec![],
    }
}

/// Six pools at group epoch 3 (each with three checkpoints of a two-page region `u1`, the rs
/// level encoding epoch 3: its parity sections exist, their pages verify).
fn job(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let opts = EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::File),
        ..Default::default()
    };
    for r in 0..6 {
        let mut e = Engine::create(&dir.join(format!("job.{r}.pool")), &opts).unwrap();
        let region = e
            .create_region(
                "u1",
                8192,
                RegionOptions {
                    addr: None,
                    reserve: Some(8192),
                },
            )
            .unwrap();
        // SAFETY: the region is mapped for 8192 bytes while the engine lives.
        unsafe { region.as_ptr().write_bytes(r as u8 + 1, 8192) };
        let mut rec = Record {
            seq: 0,
            levels: vec![LevelState {
                id: 3,
                epoch: 3,
                stripe_pages: 1,
                flight: None,
            }],
        };
        rec.create(e.pool_mut()).unwrap();
        Parity::ensure(e.pool_mut(), 4096, 3, 2, 1).unwrap();
        for epoch in 1..=3 {
            e.checkpoint(&meta(r, epoch).encode()).unwrap();
        }
    }
}

/// Flips a bit of data page `page` of region `u1` in both contexts of `pool`.
fn damage(pool: &Path, page: u64) {
    for ctx in 0..2 {
        flip(pool, &format!("ckpt.r1.{ctx}"), page * 4096 + 5);
    }
}

/// Flips a bit of byte `at` of section `name` of `pool`.
fn flip(pool: &Path, name: &str, at: u64) {
    use std::os::unix::fs::FileExt;
    let r = kioku_pool::inspect::inspect(pool).unwrap();
    let slot = r.slots.iter().find(|s| s.role == "live").unwrap();
    let kioku_pool::examine::SlotState::Intact { sections, .. } = &slot.state else {
        panic!()
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(pool)
        .unwrap();
    let s = sections.iter().find(|s| s.name == name).unwrap();
    let at = s.offset + at;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 1], at).unwrap();
}

fn inspect(dir: &Path, json: bool) -> (i32, String) {
    inspect_with(dir, if json { &["--json"] } else { &[] })
}

fn inspect_with(dir: &Path, flags: &[&str]) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kioku"));
    c.args(["group", "inspect", "--dir"]).arg(dir).args(flags);
    let o = c.output().unwrap();
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (
        o.status.code().unwrap(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn inspect_says_what_a_restart_recovers_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    job(&dir);
    let (code, out) = inspect(&dir, false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("6 ranks in 1 group(s) [0, 1, 2, 3, 4, 5]")
            && out.contains("levels kept: local, rs = RS(4, 2) per group"),
        "{out}"
    );
    assert!(
        out.contains("rs encodes epoch 3") && !out.contains("partner"),
        "{out}"
    );
    assert!(
        out.contains("a restart recovers epoch 3 on every rank"),
        "{out}"
    );

    std::fs::remove_file(dir.join("job.1.pool")).unwrap();
    std::fs::write(dir.join("job.4.pool"), b"junk").unwrap();
    let before: Vec<Vec<u8>> = [0, 2, 3, 4, 5]
        .iter()
        .map(|r| std::fs::read(dir.join(format!("job.{r}.pool"))).unwrap())
        .collect();
    let (code, out) = inspect(&dir, false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("1     missing") && out.contains("4     damaged"),
        "{out}"
    );
    assert!(
        out.contains("rebuilds ranks [1, 4] from the rs level and resumes every rank at epoch 3"),
        "{out}"
    );
    let after: Vec<Vec<u8>> = [0, 2, 3, 4, 5]
        .iter()
        .map(|r| std::fs::read(dir.join(format!("job.{r}.pool"))).unwrap())
        .collect();
    assert!(before == after, "inspect changed a pool");

    std::fs::remove_file(dir.join("job.2.pool")).unwrap();
    let (code, out) = inspect(&dir, false);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("a restart cannot recover: 3 ranks of group 0 are lost"),
        "{out}"
    );
    let (code, out) = inspect(&dir, true);
    assert_eq!(code, 2);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ranks"], 6);
    assert_eq!(v["restart"]["recovers"], false);
    assert!(v["pools"][4]["damaged"].is_string());

    let (code, _) = {
        let o = Command::new(env!("CARGO_BIN_EXE_kioku"))
            .args(["group", "inspect", "--dir"])
            .arg(tmp.path().join("nowhere"))
            .output()
            .unwrap();
        (o.status.code().unwrap(), ())
    };
    assert_eq!(code, 1);
}

#[test]
fn inspect_deep_reads_every_page_checksum_and_says_what_a_restart_rebuilds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("g");
    job(&dir);
    let (code, out) = inspect_with(&dir, &["--deep"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("every page checksum verified"), "{out}");
    damage(&dir.join("job.2.pool"), 1);
    let before = std::fs::read(dir.join("job.2.pool")).unwrap();
    let (_, _) = inspect_with(&dir, &["--deep"]);
    assert!(
        std::fs::read(dir.join("job.2.pool")).unwrap() == before,
        "inspect --deep changed a pool"
    );
    // Without --deep the damage is not seen (the pages are not read).
    let (_, out) = inspect(&dir, false);
    assert!(
        out.contains("a restart recovers epoch 3 on every rank"),
        "{out}"
    );
    let (code, out) = inspect_with(&dir, &["--deep"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("region 'u1' page 1 damaged in both contexts"),
        "{out}"
    );
    assert!(
        out.contains("a restart rebuilds the damaged pages from the rs level and resumes every rank at epoch 3"),
        "{out}"
    );
    // Three shards of one stripe page damaged (stripe 0, page 0: data chunks 0 and 1 are pages
    // 0 and 1 of positions 2 and 3; its first parity is at position 0): beyond m = 2.
    damage(&dir.join("job.2.pool"), 0);
    damage(&dir.join("job.3.pool"), 1);
    flip(&dir.join("job.0.pool"), "g.p3.0", 9);
    let (code, out) = inspect_with(&dir, &["--deep", "--json"]);
    assert_eq!(code, 2, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let err = v["restart"]["error"].as_str().unwrap();
    assert!(
        err.contains("rank 2: region 'u1' page 0") && err.contains("rank 3"),
        "{err}"
    );
    assert_eq!(v["pools"][3]["deep"]["data"][0]["page"], 1);
    assert_eq!(
        v["pools"][0]["deep"]["parity"][0],
        serde_json::json!([3, 0, 0])
    );
    assert!(std::fs::read(dir.join("job.2.pool")).unwrap() != before);
}
