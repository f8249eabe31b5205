//! The checkpoint engine acting on a traced process: a region created in the tracee, filled by
//! it, checkpointed while it is stopped; the tracee is SIGKILLed; a fresh tracee recovers the
//! region at the same address and reads back exactly the checkpointed bytes.

mod common;

use common::spawn;
use kioku_ckpt::{AddressSpace, CkptError, Engine, RegionOptions, POOL_KIND};
use kioku_pool::{CreateOptions, OpenOptions, Pool};
use kioku_proc::{Exit, MapKind, TracedSpace};

const LEN: usize = 64 * 4096;
/// Far from where the kernel places the test child's own mappings.
const ADDR: usize = 0x5a5a_0000_0000;

fn fill_expected(seed: u64) -> Vec<u8> {
    // Same generator as the child's FILL.
    let mut s = seed | 1;
    let mut v = vec![0u8; LEN];
    for chunk in v.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        chunk.copy_from_slice(&s.to_le_bytes()[..chunk.len()]);
    }
    v
}

#[test]
fn checkpoint_in_one_tracee_recover_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proc.pool");

    // First life.
    let mut a = spawn(&["serve"]);
    let pool = Pool::create(&path, &CreateOptions::new(POOL_KIND)).unwrap();
    let space = TracedSpace::new(&a.t);
    assert_eq!(space.pid(), a.t.pid());
    let mut engine = Engine::init(pool, space).unwrap();
    let r = engine
        .create_region(
            "heap",
            LEN,
            RegionOptions {
                addr: Some(ADDR),
                reserve: Some(4 * LEN),
            },
        )
        .unwrap();
    assert_eq!(r.addr, ADDR);
    let maps = a.t.maps().unwrap();
    let m = maps
        .iter()
        .find(|m| m.contains(ADDR))
        .expect("region mapped");
    assert!(m.perms.shared && m.perms.write);
    assert!(matches!(m.kind, MapKind::File { .. }));
    assert_eq!(m.end, ADDR + LEN);
    let rest = maps
        .iter()
        .find(|m| m.contains(ADDR + LEN))
        .expect("reserve");
    assert!(!rest.perms.read && !rest.perms.write);
    assert_eq!(rest.end, ADDR + 4 * LEN);

    // The same address again is taken.
    let err = engine
        .create_region(
            "again",
            4096,
            RegionOptions {
                addr: Some(ADDR),
                reserve: Some(4096),
            },
        )
        .unwrap_err();
    assert!(matches!(err, CkptError::AddressTaken { .. }), "{err}");

    // The program closes the pool descriptor the monitor opened in it: the next mapping
    // opens it again.
    let pool_path = std::fs::canonicalize(&path).unwrap();
    let pool_fds = |pid: i32| -> Vec<i32> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                (std::fs::read_link(e.path()).ok()? == pool_path)
                    .then(|| e.file_name().to_str().unwrap().parse().unwrap())
            })
            .collect()
    };
    let fds = pool_fds(a.t.pid());
    assert_eq!(fds.len(), 1, "the pool is open once in the tracee");
    let tid = a.t.control_thread().unwrap();
    a.t.close(tid, fds[0]).unwrap();
    assert!(pool_fds(a.t.pid()).is_empty());
    engine.resize_region("heap", 2 * LEN).unwrap();
    assert_eq!(pool_fds(a.t.pid()).len(), 1, "reopened");
    let maps = a.t.maps().unwrap();
    let m = maps.iter().find(|m| m.contains(ADDR + LEN)).unwrap();
    assert!(m.perms.shared && m.perms.write, "grown part mapped");
    engine.resize_region("heap", LEN).unwrap();
    let maps = a.t.maps().unwrap();
    let m = maps.iter().find(|m| m.contains(ADDR + LEN)).unwrap();
    assert!(!m.perms.read, "shrunk part back to a reservation");

    assert_eq!(a.line(), "READY");
    a.send(&format!("FILL {ADDR} {LEN} 42\n"));
    let want = fill_expected(42);
    let line = a.line();
    assert!(line.starts_with("OK "), "{line}");
    a.t.stop_all().unwrap();
    let stats = engine.checkpoint(b"first life").unwrap();
    assert_eq!(stats.epoch, 1);
    assert_eq!(
        stats.dirty_pages,
        (LEN / 4096) as u64,
        "the tracker saw the tracee's writes"
    );
    let mut seen = vec![0u8; LEN];
    a.t.read_mem(ADDR, &mut seen).unwrap();
    assert!(seen == want);

    // A second epoch.
    a.send(&format!("FILL {ADDR} {LEN} 99\n"));
    assert!(a.line().starts_with("OK "));
    a.t.stop_all().unwrap();
    let again = engine.checkpoint(b"second").map(|s| s.dirty_pages);
    assert_eq!(again.unwrap(), (LEN / 4096) as u64);
    // Written after the last checkpoint: must not come back.
    a.send(&format!("FILL {ADDR} {LEN} 7\n"));
    assert!(a.line().starts_with("OK "));
    let kill = a.t.kill().unwrap();
    assert_eq!(
        kill,
        Exit::Signal {
            sig: libc::SIGKILL,
            core: false
        }
    );
    drop(engine);
    let want = fill_expected(99);

    // Second life, in a fresh process.
    let mut b = spawn(&["serve"]);
    let pool = Pool::open(
        &path,
        &OpenOptions {
            kind: Some(POOL_KIND.into()),
            ..Default::default()
        },
    )
    .unwrap();
    let (engine, rec) = Engine::recover_in(pool, TracedSpace::new(&b.t)).unwrap();
    assert_eq!(rec.epoch, 2);
    assert_eq!(rec.metadata, b"second");
    assert_eq!(engine.region("heap").unwrap().addr, ADDR);
    let mut seen = vec![0u8; LEN];
    b.t.read_mem(ADDR, &mut seen).unwrap();
    assert!(seen == want, "monitor reads the checkpointed bytes");
    assert_eq!(b.line(), "READY");
    b.send(&format!("CHECK {ADDR} {LEN}\n"));
    let line = b.line();
    assert_eq!(
        line,
        format!("CRC {:016x}", fnv(&want)),
        "tracee reads them"
    );
    b.t.stop_all().unwrap();
    drop(engine); // unmaps the region in the stopped tracee
    assert!(!b.t.maps().unwrap().iter().any(|m| m.contains(ADDR)));
    b.send("EXIT\n");
    let (exit, _) = b.finish();
    assert_eq!(exit, Exit::Code(0));
}

fn fnv(buf: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in buf {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}
