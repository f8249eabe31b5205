//! The shared test vectors in `tests/vectors/` (repository root): sample pool files and, in
//! `vectors.json`, what a reader must make of each. A second implementation (the Java side)
//! reads the same files and must reach the same verdicts.
//!
//! This test regenerates every vector and requires the committed bytes to be identical, then
//! opens each committed file and checks the manifest. `KIOKU_REGEN_VECTORS=1` rewrites them.

use kioku_pool::media::{MediumChoice, MediumKind};
use kioku_pool::{CreateOptions, OpenOptions, Pool, PoolError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

fn create(path: &Path) -> Pool {
    let mut o = CreateOptions::new("kioku.vectors");
    o.medium = MediumChoice::Exactly(MediumKind::File);
    o.uuid = Some(*b"kioku-vector-v1\0");
    o.fixed_time_ns = Some(1_700_000_000_000_000_000);
    Pool::create(path, &o).unwrap()
}

fn fill(pool: &mut Pool, name: &str, byte: u8) {
    let s = pool.section(name).unwrap().clone();
    pool.bytes_mut(s.offset, s.len).fill(byte);
    pool.persist(s.offset, s.len).unwrap();
}

fn patch(bytes: &mut [u8], at: usize, with: &[u8]) {
    bytes[at..at + with.len()].copy_from_slice(with);
}

/// Writes every vector into `dir`; returns the manifest.
fn generate(dir: &Path) -> Value {
    let fresh = dir.join("fresh.pool");
    drop(create(&fresh));

    let valid = dir.join("valid.pool");
    let mut p = create(&valid);
    p.create_section("alpha", 4096, 1).unwrap();
    p.create_section("beta", 8192, 0).unwrap();
    fill(&mut p, "alpha", b'a');
    fill(&mut p, "beta", b'b');
    p.commit(&[1, 2, 3]).unwrap();
    p.create_section("gamma", 4096, 0x8000_0000).unwrap();
    fill(&mut p, "gamma", b'g');
    p.resize_section("beta", 12288).unwrap();
    p.commit(&[0xDEAD_BEEF, 42]).unwrap();
    drop(p);
    let good = std::fs::read(&valid).unwrap();

    let variant = |name: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        std::fs::write(dir.join(name), b).unwrap();
    };
    variant("bad-magic.pool", &|b| patch(b, 0, b"KIOKUPOX"));
    variant("bad-version.pool", &|b| patch(b, 8, &2u32.to_le_bytes()));
    variant("truncated-header.pool", &|b| b.truncate(100));
    variant("truncated-data.pool", &|b| b.truncate(73728 + 4096));
    variant("header-checksum.pool", &|b| b[17] ^= 0x01);
    variant("torn-live-slot.pool", &|b| {
        patch(b, 4352 + 8, &[0, 0, 0, 0])
    });
    variant("bad-live-table.pool", &|b| b[8192 + 33] ^= 0x10);
    variant("bad-index.pool", &|b| patch(b, 4096, &2u64.to_le_bytes()));
    variant("both-slots-damaged.pool", &|b| {
        b[4352] ^= 1;
        b[4608] ^= 1;
    });
    variant("page-size-64k.pool", &|b| {
        patch(b, 32, &65536u32.to_le_bytes());
        patch(b, 112, &131072u64.to_le_bytes());
        let c = crc32c::crc32c(&b[..252]);
        patch(b, 252, &c.to_le_bytes());
    });

    let sections = json!([
        {"name": "alpha", "offset": 73728, "len": 4096, "flags": 1, "byte": "a"},
        {"name": "beta", "offset": 90112, "len": 12288, "flags": 0, "byte": "b"},
        {"name": "gamma", "offset": 86016, "len": 4096, "flags": 2147483648u64, "byte": "g"}
    ]);
    json!({
        "format_version": 1,
        "note": "Each entry: the file, and what opening it must give. 'byte': every byte of the section's first 4096 bytes (beta: its first 8192; the rest is zero).",
        "vectors": [
            {"file": "fresh.pool", "expect": "ok", "epoch": 0, "live_slot": 0, "roots": [], "sections": [],
             "uuid": "6b696f6b-752d-7665-6374-6f722d763100", "kind": "kioku.vectors", "page_size": 4096},
            {"file": "valid.pool", "expect": "ok", "epoch": 2, "live_slot": 0, "roots": [3735928559u64, 42],
             "sections": sections, "previous_slot": {"slot": 1, "epoch": 1, "roots": [1, 2, 3]}},
            {"file": "bad-magic.pool", "expect": "not_a_pool"},
            {"file": "bad-version.pool", "expect": "unsupported_version", "found": 2},
            {"file": "truncated-header.pool", "expect": "truncated"},
            {"file": "truncated-data.pool", "expect": "truncated"},
            {"file": "header-checksum.pool", "expect": "header_checksum"},
            {"file": "torn-live-slot.pool", "expect": "live_slot_damaged", "previous_epoch": 1,
             "with_rollback": {"epoch": 1, "roots": [1, 2, 3]}},
            {"file": "bad-live-table.pool", "expect": "live_slot_damaged", "previous_epoch": 1},
            {"file": "bad-index.pool", "expect": "commit_damaged"},
            {"file": "both-slots-damaged.pool", "expect": "commit_damaged"},
            {"file": "page-size-64k.pool", "expect": "page_size_mismatch"}
        ]
    })
}

fn error_name(e: &PoolError) -> &'static str {
    match e {
        PoolError::NotAPool { .. } => "not_a_pool",
        PoolError::UnsupportedVersion { .. } => "unsupported_version",
        PoolError::Truncated { .. } => "truncated",
        PoolError::HeaderChecksum { .. } => "header_checksum",
        PoolError::LiveSlotDamaged { .. } => "live_slot_damaged",
        PoolError::CommitDamaged { .. } => "commit_damaged",
        PoolError::PageSizeMismatch { .. } => "page_size_mismatch",
        _ => "other",
    }
}

#[test]
fn vectors_are_reproducible_and_read_as_specified() {
    let out = vectors_dir();
    let tmp = tempfile::tempdir().unwrap();
    let manifest = generate(tmp.path());
    if std::env::var_os("KIOKU_REGEN_VECTORS").is_some() {
        std::fs::create_dir_all(&out).unwrap();
        for entry in std::fs::read_dir(tmp.path()).unwrap() {
            let e = entry.unwrap();
            std::fs::copy(e.path(), out.join(e.file_name())).unwrap();
        }
        let text = serde_json::to_string_pretty(&manifest).unwrap() + "\n";
        std::fs::write(out.join("vectors.json"), text).unwrap();
    }
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("vectors.json")).unwrap()).unwrap();
    assert_eq!(
        committed, manifest,
        "vectors.json differs from the generator"
    );

    for v in committed["vectors"].as_array().unwrap() {
        let file = v["file"].as_str().unwrap();
        let path = out.join(file);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            bytes,
            std::fs::read(tmp.path().join(file)).unwrap(),
            "{file}: bytes differ"
        );
        // Open a copy: opening needs write access and must not change the shared file anyway.
        let copy = tmp.path().join(format!("open-{file}"));
        std::fs::write(&copy, &bytes).unwrap();
        let opts = OpenOptions {
            medium: MediumChoice::Exactly(MediumKind::File),
            ..Default::default()
        };
        let expect = v["expect"].as_str().unwrap();
        match Pool::open(&copy, &opts) {
            Ok(pool) => {
                assert_eq!(expect, "ok", "{file}");
                assert_eq!(pool.epoch(), v["epoch"].as_u64().unwrap(), "{file}");
                assert_eq!(
                    pool.live_slot() as u64,
                    v["live_slot"].as_u64().unwrap(),
                    "{file}"
                );
                let roots: Vec<u64> = v["roots"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r.as_u64().unwrap())
                    .collect();
                assert_eq!(pool.roots(), roots.as_slice(), "{file}");
                let want = v["sections"].as_array().unwrap();
                assert_eq!(pool.sections().len(), want.len(), "{file}");
                for w in want {
                    let s = pool.section(w["name"].as_str().unwrap()).unwrap();
                    assert_eq!(s.offset, w["offset"].as_u64().unwrap());
                    assert_eq!(s.len, w["len"].as_u64().unwrap());
                    assert_eq!(s.flags as u64, w["flags"].as_u64().unwrap());
                    let b = w["byte"].as_str().unwrap().as_bytes()[0];
                    let filled = if s.name == "beta" { 8192 } else { 4096 };
                    let data = pool.bytes(s.offset, s.len);
                    assert!(data[..filled].iter().all(|&x| x == b), "{file}: {}", s.name);
                    assert!(data[filled..].iter().all(|&x| x == 0), "{file}: {}", s.name);
                }
                if let Some(h) = v.get("uuid") {
                    assert_eq!(pool.header().uuid_string(), h.as_str().unwrap());
                }
            }
            Err(e) => {
                assert_eq!(error_name(&e), expect, "{file}: {e}");
                if let Some(rb) = v.get("with_rollback") {
                    let o = OpenOptions {
                        allow_rollback: true,
                        ..opts.clone()
                    };
                    let pool = Pool::open(&copy, &o).unwrap();
                    assert_eq!(pool.epoch(), rb["epoch"].as_u64().unwrap());
                }
            }
        }
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            bytes,
            "{file}: opening changed the file"
        );
    }
}
