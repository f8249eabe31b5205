//! Sparse sections: space only for the pages written into them, on tmpfs (shm) and on a disk
//! file; holes stay holes when a section moves; freed space goes back to the file system.

use kioku_pool::media::{MediumChoice, MediumKind};
use kioku_pool::{CreateOptions, OpenOptions, Pool, SECTION_SPARSE};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const MIB: u64 = 1 << 20;

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

fn pool_in(dir: &Path, kind: MediumKind) -> (std::path::PathBuf, Pool) {
    let path = dir.join("p.pool");
    let mut o = CreateOptions::new("kioku.test");
    o.medium = MediumChoice::Exactly(kind);
    (path.clone(), Pool::create(&path, &o).unwrap())
}

fn write_page(pool: &mut Pool, off: u64, byte: u8) {
    pool.allocate(off, 4096).unwrap();
    pool.bytes_mut(off, 4096).fill(byte);
    pool.flush(off, 4096).unwrap();
}

fn exercise(dir: &Path, kind: MediumKind) {
    let (path, mut pool) = pool_in(dir, kind);
    let base = allocated(&path);
    // 256 MiB of section, one page written: about one page of space.
    let s = pool
        .create_section("big", 256 * MIB, SECTION_SPARSE)
        .unwrap();
    assert!(s.is_sparse());
    write_page(&mut pool, s.offset + 100 * MIB, 7);
    pool.commit(&[1]).unwrap();
    let used = allocated(&path) - base;
    assert!(
        used < MIB,
        "{kind:?}: a 256 MiB sparse section with one page written takes {used} bytes"
    );
    let holes = pool.data_extents(s.offset, s.len).unwrap();
    assert_eq!(
        holes,
        vec![(s.offset + 100 * MIB, s.offset + 100 * MIB + 4096)]
    );

    // A dense section after it blocks growth in place: the sparse one moves, holes stay holes,
    // the written page keeps its bytes, and the old place is given back after the commit.
    pool.create_section("dense", 4096, 0).unwrap();
    let moved = pool.resize_section("big", 512 * MIB).unwrap();
    assert_ne!(moved.offset, s.offset, "the section moved");
    assert!(pool
        .bytes(moved.offset + 100 * MIB, 4096)
        .iter()
        .all(|&b| b == 7));
    pool.commit(&[2]).unwrap();
    let used = allocated(&path) - base;
    assert!(
        used < 2 * MIB,
        "{kind:?}: after moving, {used} bytes are allocated"
    );

    // Zeroing a written page makes it a hole again.
    pool.zero(moved.offset + 100 * MIB, 4096).unwrap();
    pool.drain().unwrap();
    assert!(pool
        .data_extents(moved.offset, moved.len)
        .unwrap()
        .is_empty());
    assert!(pool
        .bytes(moved.offset + 100 * MIB, 4096)
        .iter()
        .all(|&b| b == 0));

    // Deleted and committed away: nothing of it is left.
    write_page(&mut pool, moved.offset, 9);
    pool.delete_section("big").unwrap();
    pool.commit(&[3]).unwrap();
    let used = allocated(&path) - base;
    assert!(
        used < MIB,
        "{kind:?}: after deleting, {used} bytes are allocated"
    );
    drop(pool);
    let o = OpenOptions {
        medium: MediumChoice::Exactly(kind),
        ..Default::default()
    };
    let pool = Pool::open(&path, &o).unwrap();
    assert_eq!(pool.roots(), &[3]);
}

#[test]
fn sparse_sections_on_shm_take_space_only_for_written_pages() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) to put a pool on");
        return;
    };
    exercise(dir.path(), MediumKind::Shm);
}

#[test]
fn sparse_sections_on_a_disk_file_take_space_only_for_written_pages() {
    let dir = tempfile::tempdir().unwrap();
    exercise(dir.path(), MediumKind::File);
}

#[test]
fn a_full_medium_fails_allocation_with_enospc_not_sigbus() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "kioku-test"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: cannot mount a small tmpfs here (needs root)");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let (_path, mut pool) = pool_in(&mnt, MediumKind::Shm);
    // Far larger than the medium: creating it costs nothing ...
    let s = pool
        .create_section("big", 64 * MIB, SECTION_SPARSE)
        .unwrap();
    // ... and writing into it fails with a reason once the medium is full.
    let e = pool.allocate(s.offset, 8 * MIB).unwrap_err().to_string();
    assert!(e.contains("No space left on device"), "{e}");
    // So does a copy into its holes (the kernel's copy allocates as it goes).
    let e = pool
        .copy_range(s.offset, s.offset + 32 * MIB, 8 * MIB)
        .unwrap_err()
        .to_string();
    assert!(e.contains("No space left on device"), "{e}");
}

/// `copy_range` and `read_at` (the checkpoint engine's sync and checksums): bytes copied into
/// a hole of a sparse section and read back, holes read as zeros and stay holes, ranges that
/// overlap refused.
fn copy_and_read(dir: &Path, kind: MediumKind) {
    let (_path, mut pool) = pool_in(dir, kind);
    let s = pool.create_section("s", 8 * MIB, SECTION_SPARSE).unwrap();
    for (k, byte) in [(0u64, 1u8), (1, 2), (2, 3)] {
        write_page(&mut pool, s.offset + k * 4096, byte);
    }
    let dst = s.offset + 4 * MIB;
    pool.copy_range(s.offset, dst, 3 * 4096).unwrap();
    pool.flush(dst, 3 * 4096).unwrap();
    pool.drain().unwrap();
    let mut buf = vec![0u8; 3 * 4096];
    pool.read_at(dst, &mut buf).unwrap();
    for (k, p) in buf.chunks_exact(4096).enumerate() {
        assert!(p.iter().all(|&b| b == k as u8 + 1), "{kind:?}: page {k}");
    }
    assert_eq!(
        pool.bytes(dst, 3 * 4096),
        &buf[..],
        "{kind:?}: the mapping sees it"
    );
    assert_eq!(
        pool.data_extents(s.offset + 2 * MIB, 6 * MIB).unwrap(),
        vec![(dst, dst + 3 * 4096)],
        "{kind:?}: only the copied pages hold data"
    );
    let hole = s.offset + 6 * MIB;
    let mut z = vec![9u8; 4096];
    pool.read_at(hole, &mut z).unwrap();
    assert!(z.iter().all(|&b| b == 0), "{kind:?}: a hole reads as zeros");
    assert!(
        pool.data_extents(hole, 4096).unwrap().is_empty(),
        "{kind:?}: reading a hole leaves it a hole"
    );
    assert!(pool
        .copy_range(s.offset, s.offset + 4096, 2 * 4096)
        .is_err());
}

#[test]
fn copy_range_and_read_at_on_shm() {
    let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("SKIPPED: no /dev/shm (tmpfs) to put a pool on");
        return;
    };
    copy_and_read(dir.path(), MediumKind::Shm);
}

#[test]
fn copy_range_and_read_at_on_a_disk_file() {
    let dir = tempfile::tempdir().unwrap();
    copy_and_read(dir.path(), MediumKind::File);
}
