//! The engine's own reads and copies of pool pages do not stay resident: a dense engine that
//! recovered or checkpointed a region holds, besides the region's own mapping, at most a little
//! of its pool mapped. (Its own test binary: it measures the whole process's resident file
//! pages, which other tests running beside it would change.)

use kioku_ckpt::{Engine, EngineOptions, RegionOptions};

const MIB: usize = 1 << 20;
const REGION: usize = 64 * MIB;

/// Resident file-backed (and shmem) bytes of this process: `/proc/self/statm`'s shared pages.
fn resident_shared() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(2).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize
}

#[test]
fn recovery_and_checkpoints_leave_only_the_region_resident() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resident.pool");
    let opts = EngineOptions::default();
    {
        let mut e = Engine::create(&path, &opts).unwrap();
        let r = e
            .create_region("data", REGION, RegionOptions::default())
            .unwrap();
        // SAFETY: the region is REGION bytes of this engine's memory, nothing else uses it.
        let mem = unsafe { std::slice::from_raw_parts_mut(r.addr as *mut u8, REGION) };
        for (i, b) in mem.iter_mut().enumerate().step_by(512) {
            *b = (i / 4096) as u8 | 1;
        }
        let before = resident_shared();
        // Every page written: the checkpoint reads the running context and writes the other
        // through the pool's mapping (128 MiB touched), then lets go of it.
        e.checkpoint(b"one").unwrap();
        let grown = resident_shared().saturating_sub(before);
        assert!(
            grown < 16 * MIB,
            "a checkpoint of {} MiB left {} MiB more resident",
            REGION / MIB,
            grown / MIB
        );
    }
    let before = resident_shared();
    let (e, rec) = Engine::recover(&path, &opts).unwrap();
    assert_eq!(rec.metadata, b"one");
    // Recovery checked the valid context and compared the other with it: 128 MiB read.
    let grown = resident_shared().saturating_sub(before);
    assert!(
        grown < 16 * MIB,
        "recovering {} MiB left {} MiB resident",
        REGION / MIB,
        grown / MIB
    );
    let r = e.region("data").unwrap();
    // SAFETY: as above; the recovered region is mapped at `r.addr`.
    let mem = unsafe { std::slice::from_raw_parts(r.addr as *const u8, REGION) };
    for (i, &b) in mem.iter().enumerate().step_by(512) {
        assert_eq!(b, (i / 4096) as u8 | 1, "byte {i}");
    }
}
