//! `kioku group inspect` on real group pools (written here with the checkpoint engine and
//! the group library's metadata, as the library writes them): what a restart would recover
//! in each state, and that inspecting changes nothing.

use kioku_ckpt::{Engine, EngineOptions};
use kioku_group::meta::{GroupMeta, Table, MAGIC, VERSION};
use kioku_pool::media::{MediumChoice, MediumKind};
use std::path::Path;
use std::process::Command;

fn meta(rank: usize, epoch: u64) -> GroupMeta {
    GroupMeta {
        magic: MAGIC.into(),
        version: VERSION,
        ranks: 6,
        rank,
        epoch,
        level: 3,
        last_partner: 0,
        last_rs: epoch,
        stripe_pages_partner: 0,
        stripe_pages_rs: 1,
        members: (0..6).collect(),
        tables: vec![Table::default(); 6],
        group_size: 6,
        parity: 2,
        partner: false,
        rs: true,
    }
}

/// Six pools at group epoch 3 (each with three checkpoints).
fn job(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let opts = EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::File),
        ..Default::default()
    };
    for r in 0..6 {
        let mut e = Engine::create(&dir.join(format!("job.{r}.pool")), &opts).unwrap();
        for epoch in 1..=3 {
            e.checkpoint(&meta(r, epoch).encode()).unwrap();
        }
    }
}

fn inspect(dir: &Path, json: bool) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kioku"));
    c.args(["group", "inspect", "--dir"]).arg(dir);
    if json {
        c.arg("--json");
    }
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
    assert!(out.contains("6 ranks") && out.contains("parity 2"), "{out}");
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
