//! Pools on real files: round trips, sections, locking and every bad-input case.

use kioku_pool::media::{MediumChoice, MediumKind};
use kioku_pool::{CreateOptions, OpenOptions, Pool, PoolError};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

fn opts() -> CreateOptions {
    let mut o = CreateOptions::new("kioku.test");
    o.medium = MediumChoice::Exactly(MediumKind::File);
    o
}

fn open_opts() -> OpenOptions {
    OpenOptions {
        medium: MediumChoice::Exactly(MediumKind::File),
        ..Default::default()
    }
}

fn new_pool(dir: &Path) -> (PathBuf, Pool) {
    let path = dir.join("p.pool");
    let pool = Pool::create(&path, &opts()).expect("create");
    (path, pool)
}

/// Inverts one byte, so the file surely changes whatever it held.
fn flip(path: &Path, off: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, off).unwrap();
    f.write_all_at(&[!b[0]], off).unwrap();
}

fn patch(path: &Path, off: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, off).unwrap();
}

#[test]
fn round_trip_sections_and_roots() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    assert_eq!(pool.epoch(), 0);
    let a = pool.create_section("alpha", 10_000, 7).unwrap();
    assert_eq!(a.len, 12288);
    pool.bytes_mut(a.offset, 5).copy_from_slice(b"hello");
    pool.persist(a.offset, 5).unwrap();
    let b = pool.create_section("beta", 4096, 0).unwrap();
    assert!(b.offset >= a.end());
    assert_eq!(pool.commit(&[11, 22, 33]).unwrap(), 1);
    drop(pool);

    let pool = Pool::open(&path, &open_opts()).unwrap();
    assert_eq!(pool.epoch(), 1);
    assert_eq!(pool.roots(), &[11, 22, 33]);
    let a2 = pool.section("alpha").unwrap().clone();
    assert_eq!(a2, a);
    assert_eq!(pool.bytes(a2.offset, 5), b"hello");
    assert_eq!(pool.sections().len(), 2);
}

#[test]
fn uncommitted_changes_vanish_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    pool.create_section("kept", 4096, 0).unwrap();
    pool.commit(&[1]).unwrap();
    pool.create_section("lost", 4096, 0).unwrap();
    pool.delete_section("kept").unwrap();
    drop(pool);
    let pool = Pool::open(&path, &open_opts()).unwrap();
    assert!(pool.section("kept").is_some());
    assert!(pool.section("lost").is_none());
    assert_eq!(pool.roots(), &[1]);
}

#[test]
fn deleted_space_is_reused_only_after_commit_and_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let (_path, mut pool) = new_pool(dir.path());
    let a = pool.create_section("a", 8192, 0).unwrap();
    pool.bytes_mut(a.offset, 8192).fill(0xAB);
    pool.persist(a.offset, 8192).unwrap();
    pool.commit(&[]).unwrap();
    pool.delete_section("a").unwrap();
    let b = pool.create_section("b", 8192, 0).unwrap();
    assert!(
        b.offset >= a.end(),
        "space of the live commit reused before the next commit"
    );
    pool.commit(&[]).unwrap();
    let c = pool.create_section("c", 8192, 0).unwrap();
    assert_eq!(c.offset, a.offset, "freed space is reused after the commit");
    assert!(
        pool.bytes(c.offset, 8192).iter().all(|&x| x == 0),
        "reused space not zeroed"
    );
}

/// Bytes the file system holds for `path` (a hole holds none).
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_discarded_section_gives_its_memory_back_at_once() {
    for kind in [MediumKind::File, MediumKind::Shm] {
        let dir = if kind == MediumKind::Shm {
            match tempfile::tempdir_in("/dev/shm") {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("SKIPPED medium shm: no /dev/shm ({e})");
                    continue;
                }
            }
        } else {
            tempfile::tempdir().unwrap()
        };
        let path = dir.path().join("p.pool");
        let mut o = opts();
        o.medium = MediumChoice::Exactly(kind);
        let mut pool = Pool::create(&path, &o).unwrap();
        let len = 64 << 12;
        let keep = pool.create_section("keep", 8192, 0).unwrap();
        pool.bytes_mut(keep.offset, 8192).fill(0x5A);
        let a = pool.create_section("a", len, 0).unwrap();
        pool.bytes_mut(a.offset, len).fill(0xAB);
        pool.persist(0, pool.len()).unwrap();
        pool.commit(&[]).unwrap();
        let (file_len, before) = (pool.len(), allocated(&path));
        pool.discard_section("a").unwrap();
        assert!(pool.section("a").is_none());
        assert_eq!(pool.len(), file_len, "the file keeps its length");
        let after = allocated(&path);
        assert!(
            before - after >= len,
            "{kind:?}: {before} bytes allocated before, {after} after discarding {len}"
        );
        assert!(pool.bytes(a.offset, len).iter().all(|&x| x == 0));
        assert!(pool.bytes(keep.offset, 8192).iter().all(|&x| x == 0x5A));
        // Busy until the next commit stops naming it, then reused.
        let b = pool.create_section("b", len, 0).unwrap();
        assert!(b.offset >= a.end());
        pool.delete_section("b").unwrap();
        pool.commit(&[]).unwrap();
        let c = pool.create_section("c", len, 0).unwrap();
        assert_eq!(c.offset, a.offset);
        assert!(matches!(
            pool.discard_section("nope"),
            Err(PoolError::NoSuchSection { .. })
        ));
        drop(pool);
        // The other sections are intact after a reopen.
        let mut oo = open_opts();
        oo.medium = MediumChoice::Exactly(kind);
        let pool = Pool::open(&path, &oo).unwrap();
        let k = pool.section("keep").unwrap();
        assert!(pool.bytes(k.offset, 8192).iter().all(|&x| x == 0x5A));
    }
}

#[test]
fn resize_in_place_and_by_moving() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    let a = pool.create_section("a", 4096, 0).unwrap();
    pool.bytes_mut(a.offset, 4).copy_from_slice(b"abcd");
    pool.persist(a.offset, 4).unwrap();
    let a = pool.resize_section("a", 3 * 4096).unwrap();
    let b = pool.create_section("b", 4096, 0).unwrap();
    assert_eq!(b.offset, a.end());
    let moved = pool.resize_section("a", 5 * 4096).unwrap();
    assert_ne!(moved.offset, a.offset, "blocked by b: must move");
    assert_eq!(pool.bytes(moved.offset, 4), b"abcd");
    assert!(pool
        .bytes(moved.offset + 4096, 4 * 4096)
        .iter()
        .all(|&x| x == 0));
    let shrunk = pool.resize_section("a", 4096).unwrap();
    assert_eq!(shrunk.len, 4096);
    pool.commit(&[]).unwrap();
    drop(pool);
    let pool = Pool::open(&path, &open_opts()).unwrap();
    assert_eq!(pool.section("a").unwrap().len, 4096);
    assert_eq!(pool.bytes(pool.section("a").unwrap().offset, 4), b"abcd");
}

#[test]
fn section_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_path, mut pool) = new_pool(dir.path());
    pool.create_section("x", 1, 0).unwrap();
    assert!(matches!(
        pool.create_section("x", 1, 0),
        Err(PoolError::SectionExists { .. })
    ));
    assert!(matches!(
        pool.create_section("", 1, 0),
        Err(PoolError::BadName { .. })
    ));
    let long = "n".repeat(33);
    assert!(matches!(
        pool.create_section(&long, 1, 0),
        Err(PoolError::BadName { .. })
    ));
    assert!(matches!(
        pool.delete_section("nope"),
        Err(PoolError::NoSuchSection { .. })
    ));
    assert!(matches!(
        pool.commit(&[0; 17]),
        Err(PoolError::TooManyRoots { .. })
    ));
    for i in 1..512 {
        pool.create_section(&format!("s{i}"), 1, 0).unwrap();
    }
    assert!(matches!(
        pool.create_section("one-more", 1, 0),
        Err(PoolError::TooManySections { .. })
    ));
    pool.commit(&[]).unwrap();
}

#[test]
fn create_refuses_existing_file_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precious");
    std::fs::write(&path, b"user data").unwrap();
    let err = Pool::create(&path, &opts()).unwrap_err();
    assert!(matches!(err, PoolError::Exists { .. }), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), b"user data");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "temporary file left behind");
}

#[test]
fn open_missing_pool() {
    let dir = tempfile::tempdir().unwrap();
    let err = Pool::open(&dir.path().join("none"), &open_opts()).unwrap_err();
    assert!(matches!(err, PoolError::NotFound { .. }));
    assert!(err.to_string().contains("create"), "{err}");
}

#[test]
fn busy_pool_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = new_pool(dir.path());
    // flock conflicts between open file descriptions, even in one process.
    let err = Pool::open(&path, &open_opts()).unwrap_err();
    match &err {
        PoolError::Busy { pid, .. } => {
            // Our own pid is filtered out of /proc/locks lookups, so a same-process holder is
            // reported without a pid; a child process holding it is tested in the CLI tests.
            assert!(pid.is_none() || *pid != Some(std::process::id()));
        }
        other => panic!("expected Busy, got {other}"),
    }
    drop(pool);
    Pool::open(&path, &open_opts()).expect("free again after close");
}

#[test]
fn bad_inputs_are_typed_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    pool.create_section("s", 4096, 0).unwrap();
    pool.commit(&[5]).unwrap();
    drop(pool);
    let good = std::fs::read(&path).unwrap();
    let case = |name: &str, f: &dyn Fn(&Path)| -> (PoolError, Vec<u8>) {
        let p = dir.path().join(name);
        std::fs::write(&p, &good).unwrap();
        f(&p);
        let before = std::fs::read(&p).unwrap();
        let err = Pool::open(&p, &open_opts()).unwrap_err();
        let after = std::fs::read(&p).unwrap();
        assert_eq!(before, after, "{name}: open changed the file");
        (err, after)
    };

    let mut msgs = Vec::new();
    let (e, _) = case("magic", &|p| patch(p, 0, b"NOTAPOOL"));
    assert!(matches!(e, PoolError::NotAPool { .. }), "{e}");
    msgs.push(e.to_string());
    let (e, _) = case("version", &|p| patch(p, 8, &9u32.to_le_bytes()));
    assert!(
        matches!(e, PoolError::UnsupportedVersion { found: 9, .. }),
        "{e}"
    );
    msgs.push(e.to_string());
    let (e, _) = case("hdrcrc", &|p| flip(p, 20));
    assert!(matches!(e, PoolError::HeaderChecksum { .. }), "{e}");
    msgs.push(e.to_string());
    let (e, _) = case("short", &|p| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(100)
            .unwrap()
    });
    assert!(matches!(e, PoolError::Truncated { .. }), "{e}");
    msgs.push(e.to_string());
    let (e, _) = case("datatrunc", &|p| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(73728)
            .unwrap()
    });
    assert!(
        matches!(
            e,
            PoolError::Truncated {
                what: "the live commit",
                ..
            }
        ),
        "{e}"
    );
    msgs.push(e.to_string());
    let (e, _) = case("index", &|p| patch(p, 4096, &7u64.to_le_bytes()));
    assert!(matches!(e, PoolError::CommitDamaged { .. }), "{e}");
    msgs.push(e.to_string());
    // Live slot is 1 after one commit; damage it: the previous commit is offered, not used.
    let (e, _) = case("slot", &|p| flip(p, 4608 + 9));
    assert!(
        matches!(
            e,
            PoolError::LiveSlotDamaged {
                previous_epoch: 0,
                slot: 1,
                ..
            }
        ),
        "{e}"
    );
    msgs.push(e.to_string());
    let (e, _) = case("table", &|p| flip(p, 40960 + 40));
    assert!(matches!(e, PoolError::LiveSlotDamaged { .. }), "{e}");
    msgs.push(e.to_string());
    let (e, _) = case("both", &|p| {
        flip(p, 4608 + 9);
        flip(p, 4352 + 9);
    });
    assert!(matches!(e, PoolError::CommitDamaged { .. }), "{e}");
    msgs.push(e.to_string());
    // Page size 64 KiB recorded (with a valid checksum): mismatch with this system.
    let (e, _) = case("pagesize", &|p| {
        let mut h = std::fs::read(p).unwrap()[..256].to_vec();
        h[32..36].copy_from_slice(&65536u32.to_le_bytes());
        h[112..120].copy_from_slice(&131072u64.to_le_bytes());
        let c = crc32c::crc32c(&h[..252]);
        h[252..256].copy_from_slice(&c.to_le_bytes());
        patch(p, 0, &h);
    });
    assert!(
        matches!(e, PoolError::PageSizeMismatch { pool: 65536, .. }),
        "{e}"
    );
    msgs.push(e.to_string());
    assert_eq!(msgs.len(), 10);
    for m in msgs {
        assert!(
            !m.contains('\n') && m.contains(';') || m.contains("use a matching"),
            "one line saying what to do: {m}"
        );
    }
}

#[test]
fn rollback_only_when_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    pool.commit(&[1]).unwrap();
    pool.commit(&[2]).unwrap(); // live slot 0 (epoch 2), previous slot 1 (epoch 1)
    drop(pool);
    flip(&path, 4352 + 3);
    assert!(matches!(
        Pool::open(&path, &open_opts()),
        Err(PoolError::LiveSlotDamaged {
            previous_epoch: 1,
            ..
        })
    ));
    let mut o = open_opts();
    o.allow_rollback = true;
    let mut pool = Pool::open(&path, &o).unwrap();
    assert_eq!(pool.roots(), &[1]);
    assert_eq!(pool.rolled_back_from(), Some(0));
    // The next commit overwrites the damaged slot and the pool is healthy again.
    pool.commit(&[3]).unwrap();
    drop(pool);
    assert_eq!(Pool::open(&path, &open_opts()).unwrap().roots(), &[3]);
}

#[test]
fn kind_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = new_pool(dir.path());
    drop(pool);
    let mut o = open_opts();
    o.kind = Some("kioku.ckpt".into());
    let e = Pool::open(&path, &o).unwrap_err();
    assert!(matches!(e, PoolError::KindMismatch { .. }), "{e}");
}

#[test]
fn grows_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    let s = pool.create_section("big", 64 << 20, 0).unwrap();
    let last = s.end() - 8;
    pool.bytes_mut(last, 8)
        .copy_from_slice(&u64::MAX.to_le_bytes());
    pool.persist(last, 8).unwrap();
    pool.commit(&[]).unwrap();
    drop(pool);
    let pool = Pool::open(&path, &open_opts()).unwrap();
    assert!(pool.len() >= s.end());
    assert_eq!(pool.bytes(last, 8), &u64::MAX.to_le_bytes());
}

#[test]
fn inspect_reports_damage_precisely() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut pool) = new_pool(dir.path());
    pool.create_section("s", 4096, 0).unwrap();
    pool.commit(&[9]).unwrap();
    let r = kioku_pool::inspect::inspect(&path).unwrap();
    assert_eq!(r.summary, "healthy");
    assert_eq!(r.live_index, Some(1));
    drop(pool);
    flip(&path, 4608 + 9);
    let r = kioku_pool::inspect::inspect(&path).unwrap();
    assert!(
        r.summary.contains("live slot 1: slot checksum mismatch"),
        "{}",
        r.summary
    );
    assert!(r.summary.contains("epoch 0"), "{}", r.summary);
    let text = r.to_string();
    assert!(text.contains("slot 0    previous: epoch 0"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["slots"][1]["state"], "damaged");
}

#[test]
fn busy_pool_held_by_another_process_names_its_pid() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = new_pool(dir.path());
    drop(pool);
    // flock(1) takes the same kind of lock kioku takes (flock(2)), from another process.
    let mut holder = match std::process::Command::new("flock")
        .arg("-x")
        .arg(&path)
        .args(["sleep", "30"])
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("flock(1) from util-linux is needed for this test: {e}"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let err = loop {
        match Pool::open(&path, &open_opts()) {
            Err(e @ PoolError::Busy { .. }) => break e,
            Ok(p) if std::time::Instant::now() < deadline => {
                drop(p);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => panic!("expected Busy, got {other:?}"),
        }
    };
    // flock(1) runs `sleep` as its child, which inherits the locked descriptor: end both.
    // SAFETY: kill(2) of the process group we just created; no memory is involved.
    unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) };
    holder.wait().unwrap();
    match &err {
        PoolError::Busy { pid, .. } => assert_eq!(*pid, Some(holder.id())),
        _ => unreachable!(),
    }
    assert!(
        err.to_string()
            .contains(&format!("process {}", holder.id())),
        "{err}"
    );
    // The killed `sleep` releases the lock when it has exited, shortly after the signal.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while let Err(PoolError::Busy { .. }) = Pool::open(&path, &open_opts()) {
        assert!(
            std::time::Instant::now() < deadline,
            "lock not released after the holder died"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Pool::open(&path, &open_opts()).expect("free once the holder died");
}
