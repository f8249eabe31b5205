//! The engine in one process: regions, checkpoints, recovery, region changes, bad input.

use kioku_ckpt::{CkptError, Engine, EngineOptions, RegionOptions};
use kioku_pool::media::{MediumChoice, MediumKind};
use std::path::Path;

fn opts() -> EngineOptions {
    EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::File),
        ..Default::default()
    }
}

/// Each test places its regions at its own fixed addresses, far from where the kernel puts
/// mappings: tests run as threads of one process, and a region's address freed by one test
/// could otherwise be taken by another's mapping before it recovers.
fn at(test: usize, n: usize) -> RegionOptions {
    RegionOptions {
        addr: Some(0x2000_0000_0000 + (test << 40) + (n << 32)),
        reserve: None,
    }
}

fn mem(e: &Engine, name: &str) -> &'static mut [u8] {
    let r = e.region(name).unwrap();
    // SAFETY: the region is mapped for `len` bytes while the engine lives; tests use the slice
    // only before the engine is dropped.
    unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), r.len) }
}

#[test]
fn checkpoint_then_recover_restores_exactly_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    let r = e.create_region("data", 3 * 4096 + 5, at(1, 1)).unwrap();
    assert_eq!(r.len, 4 * 4096);
    let m = mem(&e, "data");
    assert!(m.iter().all(|&b| b == 0));
    m[0] = 1;
    m[3 * 4096 + 7] = 2;
    let s = e.checkpoint(b"first").unwrap();
    assert_eq!(s.epoch, 1);
    assert_eq!(s.dirty_pages, 2);
    m[0] = 9; // after the checkpoint: must not survive
    m[4096] = 9;
    let s = e.checkpoint(b"second").unwrap();
    assert_eq!(s.dirty_pages, 2);
    m[5] = 77;
    let addr = r.addr;
    drop(e);

    let (e, rec) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!(rec.epoch, 2);
    assert_eq!(rec.metadata, b"second");
    let r2 = e.region("data").unwrap();
    assert_eq!(r2.addr, addr, "regions come back at their address");
    let m = mem(&e, "data");
    assert_eq!((m[0], m[4096], m[3 * 4096 + 7], m[5]), (9, 9, 2, 0));
}

#[test]
fn region_changes_become_part_of_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    e.create_region("a", 4096, at(2, 1)).unwrap();
    e.create_region("b", 8192, at(2, 2)).unwrap();
    mem(&e, "a")[10] = 1;
    mem(&e, "b")[8191] = 2;
    e.checkpoint(&[]).unwrap();
    // Grow a (in place), shrink b, create c, then delete b entirely.
    e.resize_region("a", 5 * 4096).unwrap();
    mem(&e, "a")[4 * 4096] = 3;
    e.resize_region("b", 4096).unwrap();
    e.create_region("c", 4096, at(2, 3)).unwrap();
    mem(&e, "c")[0] = 4;
    e.checkpoint(&[]).unwrap();
    e.delete_region("b").unwrap();
    e.checkpoint(&[]).unwrap();
    // Shrink and grow back: the regrown part reads as zero, also after recovery.
    e.resize_region("a", 4096).unwrap();
    e.resize_region("a", 5 * 4096).unwrap();
    assert_eq!(mem(&e, "a")[4 * 4096], 0);
    e.checkpoint(&[]).unwrap();
    drop(e);
    let (e, rec) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!(rec.epoch, 4);
    let names: Vec<String> = e.regions().into_iter().map(|r| r.name).collect();
    assert_eq!(names.len(), 2);
    assert!(e.region("b").is_none());
    assert_eq!(mem(&e, "a")[10], 1);
    assert_eq!(mem(&e, "a")[4 * 4096], 0);
    assert_eq!(mem(&e, "c")[0], 4);
    // Space of b is reclaimed: no section of region b remains in the pool.
    let sections: Vec<&str> = e
        .pool()
        .sections()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        sections.iter().filter(|n| n.starts_with("ckpt.r")).count(),
        4,
        "{sections:?}"
    );
}

#[test]
fn growth_beyond_reservation_and_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::create(&dir.path().join("c.pool"), &opts()).unwrap();
    e.create_region(
        "r",
        4096,
        RegionOptions {
            reserve: Some(8192),
            ..at(3, 9)
        },
    )
    .unwrap();
    assert!(matches!(
        e.resize_region("r", 3 * 4096),
        Err(CkptError::BeyondReservation { .. })
    ));
    assert!(matches!(
        e.create_region("r", 1, at(3, 1)),
        Err(CkptError::RegionExists { .. })
    ));
    assert!(matches!(
        e.create_region("", 1, at(3, 2)),
        Err(CkptError::BadName { .. })
    ));
    assert!(matches!(
        e.delete_region("x"),
        Err(CkptError::NoSuchRegion { .. })
    ));
}

#[test]
fn pool_of_another_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.pool");
    let mut o = kioku_pool::CreateOptions::new("some.other.kind");
    o.medium = MediumChoice::Exactly(MediumKind::File);
    drop(kioku_pool::Pool::create(&path, &o).unwrap());
    let err = Engine::recover(&path, &opts()).unwrap_err();
    assert!(
        matches!(
            err,
            CkptError::Pool(kioku_pool::PoolError::KindMismatch { .. })
        ),
        "{err}"
    );
}

fn flip_in_section(path: &Path, section: &str, at: u64) {
    use std::os::unix::fs::FileExt;
    let r = kioku_pool::inspect::inspect(path).unwrap();
    let slot = r.slots.iter().find(|s| s.role == "live").unwrap();
    let kioku_pool::examine::SlotState::Intact { sections, .. } = &slot.state else {
        panic!()
    };
    let s = sections.iter().find(|s| s.name == section).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, s.offset + at).unwrap();
    f.write_all_at(&[!b[0]], s.offset + at).unwrap();
}

#[test]
fn damaged_valid_context_falls_back_to_a_complete_copy_or_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    e.create_region("r", 8192, at(5, 1)).unwrap();
    mem(&e, "r")[100] = 42;
    e.checkpoint(b"m").unwrap();
    drop(e); // nothing written after the checkpoint: both contexts hold it
             // After a checkpoint the valid context is 1 (the engine runs on 0).
    flip_in_section(&path, "ckpt.r1.1", 100);
    let (e, rec) = Engine::recover(&path, &opts()).unwrap();
    assert!(rec.used_copy);
    assert_eq!(rec.repaired_pages, 1);
    assert_eq!(mem(&e, "r")[100], 42);
    drop(e);
    // Now make the running context differ from the checkpoint in page 0, then damage the
    // valid context's page 1 (which the running context still holds intact): repaired page
    // by page.
    let (e, _) = Engine::recover(&path, &opts()).unwrap();
    let running_is = 1 - e.pool().roots()[0] as usize;
    mem(&e, "r")[200] = 1; // not checkpointed
    drop(e);
    let valid = format!("ckpt.r1.{}", 1 - running_is);
    flip_in_section(&path, &valid, 4096 + 3);
    let (e, rec) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!(rec.repaired_pages, 1);
    assert_eq!((mem(&e, "r")[100], mem(&e, "r")[200]), (42, 0));
    drop(e);
    // Damage in a page the running context no longer holds as checkpointed: refused, naming
    // the page — or, with keep_damaged_pages, listed and left for the caller to rebuild.
    let (e, _) = Engine::recover(&path, &opts()).unwrap();
    let running_is = 1 - e.pool().roots()[0] as usize;
    mem(&e, "r")[200] = 1;
    drop(e);
    flip_in_section(&path, &format!("ckpt.r1.{}", 1 - running_is), 7);
    let scan = {
        let o = kioku_pool::OpenOptions::default();
        let pool = kioku_pool::Pool::open(&path, &o).unwrap();
        kioku_ckpt::scan_pages(&pool, false, 10).unwrap()
    };
    assert_eq!(scan.damaged, vec![("r".to_string(), 0)]);
    let before = std::fs::read(&path).unwrap();
    let err = Engine::recover(&path, &opts()).unwrap_err();
    assert!(
        matches!(err, CkptError::ContextDamaged { page: 0, .. }),
        "{err}"
    );
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a refused recovery changes nothing"
    );
    let keep = EngineOptions {
        keep_damaged_pages: true,
        ..opts()
    };
    let (mut e, rec) = Engine::recover(&path, &keep).unwrap();
    assert_eq!(rec.damaged, vec![("r".to_string(), 0)]);
    // The caller rebuilds the page and has the next checkpoint take it.
    mem(&e, "r")[7] = 0;
    e.mark_written("r", 0, 1).unwrap();
    // A page changed behind the tracker's back (here: not at all) is taken when marked.
    e.mark_written("r", 1, 1).unwrap();
    assert_eq!(e.checkpoint(b"m2").unwrap().dirty_pages, 2);
    let sums = e.page_checksums("r").unwrap().to_vec();
    assert_eq!(sums.len(), 2);
    assert_eq!(sums[0], crc32c::crc32c(&mem(&e, "r")[..4096]));
    drop(e);
    let (mut e, rec) = Engine::recover(&path, &opts()).unwrap();
    assert!(rec.damaged.is_empty() && !rec.used_copy);
    assert_eq!((mem(&e, "r")[7], mem(&e, "r")[100]), (0, 42));
    // A running engine repairs a damaged page of its valid checkpoint with bytes that have
    // the recorded checksum, and with no others.
    let valid = format!("ckpt.r1.{}", e.pool().roots()[0]);
    let good = mem(&e, "r")[..4096].to_vec();
    let off = e.pool().section(&valid).unwrap().offset + 100;
    e.pool_mut().bytes_mut(off, 1)[0] ^= 1;
    assert_ne!(e.committed("r").unwrap()[100], 42);
    let mut bad = good.clone();
    bad[1] ^= 1;
    assert!(!e.repair_committed("r", 0, &bad).unwrap());
    assert!(e.repair_committed("r", 0, &good).unwrap());
    assert_eq!(e.committed("r").unwrap()[100], 42);
}

#[test]
fn regions_written_whole_every_epoch_are_taken_whole_then_tracked_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    e.create_region("hot", 4 * 4096, at(6, 1)).unwrap();
    let m = mem(&e, "hot");
    for epoch in 1..=3u8 {
        m.fill(epoch);
        assert_eq!(e.checkpoint(&[]).unwrap().dirty_pages, 4);
    }
    // Now taken whole: one written page still checkpoints all four — and every write counts.
    for k in 0..64u64 {
        m[4096 * (k as usize % 4)] = 100 + k as u8;
        assert_eq!(
            e.checkpoint(&[]).unwrap().dirty_pages,
            4,
            "checkpoint {k} while whole"
        );
    }
    // Tracked again: one written page is one dirty page.
    m[2 * 4096 + 1] = 7;
    assert_eq!(e.checkpoint(&[]).unwrap().dirty_pages, 1);
    let expect = m.to_vec();
    m[3] = 0xEE; // not checkpointed
    drop(e);
    let (e, _) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!(mem(&e, "hot"), expect.as_slice());
}

#[test]
fn absurd_lengths_are_refused_not_overflowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Engine::create(&dir.path().join("c.pool"), &opts()).unwrap();
    let err = e.create_region("huge", usize::MAX, at(7, 1)).unwrap_err();
    assert!(matches!(err, CkptError::TooLarge { .. }), "{err}");
    e.create_region("r", 4096, at(7, 2)).unwrap();
    assert!(matches!(
        e.resize_region("r", usize::MAX - 5),
        Err(CkptError::TooLarge { .. })
    ));
}

#[test]
fn close_leaving_mapped_keeps_the_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    let r = e.create_region("r", 4096, at(8, 1)).unwrap();
    mem(&e, "r")[1] = 5;
    e.checkpoint(&[]).unwrap();
    e.close_leaving_mapped();
    // SAFETY: the region stays mapped by design; this test owns it and unmaps it below.
    let still = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), 4096) };
    assert_eq!(still[1], 5);
    still[2] = 6; // writable, no fault
                  // SAFETY: releasing the reservation this test took over.
    unsafe { libc::munmap(r.as_ptr().cast(), r.reserve) };
    // The pool is free again and holds the checkpoint, not the later write.
    let (e, _) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!((mem(&e, "r")[1], mem(&e, "r")[2]), (5, 0));
}

#[test]
fn a_prepared_checkpoint_rolls_forward_or_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    e.create_region("data", 4 * 4096, at(9, 1)).unwrap();
    let m = mem(&e, "data");
    m[0] = 1;
    e.checkpoint(b"one").unwrap();
    // What changed since the checkpoint, and the committed bytes beside the running ones.
    m[4096] = 2;
    m[3 * 4096] = 3;
    assert_eq!(
        e.written().unwrap(),
        vec![("data".to_string(), 1, 1), ("data".to_string(), 3, 1)]
    );
    assert_eq!(e.committed("data").unwrap()[4096], 0);
    m[4096 + 1] = 4; // written again after the scan: still one page
    e.prepare(b"two").unwrap();
    assert!(
        matches!(e.prepare(b"x"), Err(CkptError::OutOfOrder { .. })),
        "prepare twice"
    );
    // A crash between prepare and finish.
    drop(e);
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&path, &copy).unwrap();

    let st = kioku_ckpt::commit_state(&path, &opts()).unwrap();
    assert!(st.prepared);
    assert_eq!(st.epoch, 2);
    assert_eq!(st.metadata, b"two");
    assert_eq!(st.previous_metadata.as_deref(), Some(&b"one"[..]));

    let back = EngineOptions {
        rollback_prepared: true,
        ..opts()
    };
    let (mut e, rec) = Engine::recover(&path, &back).unwrap();
    assert_eq!((rec.epoch, rec.metadata.as_slice()), (1, &b"one"[..]));
    let m = mem(&e, "data");
    assert_eq!((m[0], m[4096], m[4097], m[3 * 4096]), (1, 0, 0, 0));
    // The rolled-back pool goes on: the next checkpoint is epoch 2 again.
    m[2 * 4096] = 5;
    let s = e.checkpoint(b"two again").unwrap();
    assert_eq!((s.epoch, s.dirty_pages), (2, 1));
    drop(e);
    let st = kioku_ckpt::commit_state(&path, &opts()).unwrap();
    assert!(!st.prepared && st.epoch == 2 && st.metadata == b"two again");

    // Without rollback, the prepared checkpoint is the one recovered (it is durable).
    let (e, rec) = Engine::recover(&copy, &opts()).unwrap();
    assert_eq!((rec.epoch, rec.metadata.as_slice()), (2, &b"two"[..]));
    let m = mem(&e, "data");
    assert_eq!((m[0], m[4096], m[4097], m[3 * 4096]), (1, 2, 4, 3));
    // The finished checkpoint is no longer prepared.
    drop(e);
    assert!(!kioku_ckpt::commit_state(&copy, &opts()).unwrap().prepared);
}

/// A caller's own sections published mid-epoch (`commit_sections`) do not publish the engine's
/// region changes of that epoch: a crash then recovers the checkpoint with the regions it had.
#[test]
fn caller_sections_committed_mid_epoch_keep_the_valid_checkpoint_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    {
        let mut e = Engine::create(&path, &opts()).unwrap();
        e.create_region("kept", 4 * 4096, at(20, 1)).unwrap();
        e.create_region("gone", 4 * 4096, at(20, 2)).unwrap();
        mem(&e, "kept")[7] = 7;
        mem(&e, "gone")[9] = 9;
        e.checkpoint(b"one").unwrap();
        // An epoch that changes regions (deletes one, creates another, grows one) …
        e.delete_region("gone").unwrap();
        e.create_region("new", 8 * 4096, at(20, 3)).unwrap();
        e.resize_region("kept", 64 * 4096).unwrap();
        // … while the caller publishes a section of its own, which takes pool space.
        let pool = e.pool_mut();
        let s = pool.create_section("caller.log", 64 * 4096, 0).unwrap();
        pool.bytes_mut(s.offset, 4).copy_from_slice(b"note");
        pool.persist(s.offset, 4).unwrap();
        e.commit_sections().unwrap();
        // Crash: no checkpoint of that epoch (dropping checkpoints nothing).
        drop(e);
    }
    let (e, rec) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!(rec.metadata, b"one");
    assert_eq!(mem(&e, "kept")[7], 7);
    assert_eq!(
        mem(&e, "gone")[9],
        9,
        "the deleted region is the checkpoint's still"
    );
    assert_eq!(e.region("kept").unwrap().len, 4 * 4096);
    assert!(e.region("new").is_none());
    let s = e
        .pool()
        .section("caller.log")
        .expect("the caller's section is durable");
    assert_eq!(e.pool().bytes(s.offset, 4), b"note");
}
