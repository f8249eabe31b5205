//! The mprotect backend's process-wide range table (own test binary: it fills the table).

mod common;

use common::*;
use kioku_track::{BackendKind, PageTracker, TrackError, MAX_MPROTECT_RANGES};

#[test]
fn range_table_limit_is_a_typed_error_and_slots_are_recycled() {
    let m = Mapping::anon((2 * MAX_MPROTECT_RANGES + 2) * 4096, 1, false);
    let mut t = tracker(BackendKind::Mprotect);
    // Separate one-page ranges (every other page) each take one slot.
    for k in 0..MAX_MPROTECT_RANGES {
        let p = m.page(2 * k);
        t.track(kioku_track::PageRange::new(p, p + 4096)).unwrap();
    }
    let p = m.page(2 * MAX_MPROTECT_RANGES);
    let err = t
        .track(kioku_track::PageRange::new(p, p + 4096))
        .unwrap_err();
    assert!(matches!(err, TrackError::TooManyRanges { .. }), "{err}");
    // Writes into every tracked range are still recorded.
    for k in 0..MAX_MPROTECT_RANGES {
        m.write(2 * k, 1);
    }
    assert_eq!(t.scan().unwrap().len(), MAX_MPROTECT_RANGES);
    // Untracking frees slots for reuse (after the short tombstone period).
    t.untrack(m.range()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    for round in 0..3 {
        for k in 0..MAX_MPROTECT_RANGES {
            let p = m.page(2 * k);
            t.track(kioku_track::PageRange::new(p, p + 4096)).unwrap();
        }
        m.write(4, round);
        assert_eq!(page_set(&t.scan().unwrap()), expect_set(&m, [4]));
        t.untrack(m.range()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
