//! Recovery when a region's address is taken. Alone in its test binary: other tests' threads
//! would otherwise race for the address this test frees and takes.

use kioku_ckpt::{CkptError, Engine, EngineOptions, RegionOptions};
use kioku_pool::media::{MediumChoice, MediumKind};

fn opts() -> EngineOptions {
    EngineOptions {
        medium: MediumChoice::Exactly(MediumKind::File),
        ..Default::default()
    }
}

#[test]
fn address_taken_at_recovery_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pool");
    let mut e = Engine::create(&path, &opts()).unwrap();
    let r = e
        .create_region(
            "r",
            4096,
            RegionOptions {
                reserve: Some(4096),
                addr: None,
            },
        )
        .unwrap();
    e.checkpoint(&[]).unwrap();
    drop(e);
    // Something else now lives at the region's address.
    // SAFETY: an anonymous mapping at an address this test just freed.
    let p = unsafe {
        libc::mmap(
            r.addr as *mut _,
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(p as usize, r.addr);
    let err = Engine::recover(&path, &opts()).unwrap_err();
    assert!(matches!(err, CkptError::AddressTaken { .. }), "{err}");
    assert!(err.to_string().contains(&format!("{:#x}", r.addr)));
    // SAFETY: unmapping the test's own mapping.
    unsafe { libc::munmap(p, 4096) };
    let (e, _) = Engine::recover(&path, &opts()).unwrap();
    assert_eq!(e.region("r").unwrap().addr, r.addr);
}
