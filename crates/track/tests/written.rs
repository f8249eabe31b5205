//! Exact written-page sets on the calling process, for every backend available.

mod common;

use std::collections::BTreeSet;

use common::*;
use kioku_track::{BackendKind, Event, PageRange, PageTracker, TrackError, Tracker};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn random_write_patterns_are_reported_exactly() {
    for kind in self_backends() {
        let m = Mapping::anon(512 * 4096, 1, false);
        // Populate half of the pages before tracking (the rest stays never-touched).
        for i in (0..m.pages()).step_by(2) {
            m.write(i, 1);
        }
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(0x6b696f6b75);
        let mut out = Vec::new();
        for round in 0..25 {
            let n = rng.gen_range(0..120);
            let mut truth = BTreeSet::new();
            for _ in 0..n {
                let i = rng.gen_range(0..m.pages());
                m.write(i, round as u8);
                truth.insert(m.page(i));
            }
            // Reads of other pages (populated or not) must not count as writes.
            for _ in 0..50 {
                let i = rng.gen_range(0..m.pages());
                std::hint::black_box(m.read(i));
            }
            t.scan_into(&mut out).unwrap();
            assert_eq!(page_set(&out), truth, "{kind:?} round {round}");
        }
    }
}

#[test]
fn page_written_twice_is_reported_once_and_next_scan_is_empty() {
    for kind in self_backends() {
        let m = Mapping::anon(64 * 4096, 1, false);
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        assert!(
            t.scan().unwrap().is_empty(),
            "{kind:?}: fresh range not clean"
        );
        m.write(5, 1);
        m.write(5, 2);
        m.write(6, 1);
        let d = t.scan().unwrap();
        assert_eq!(d, vec![PageRange::new(m.page(5), m.page(7))], "{kind:?}");
        assert!(
            t.scan().unwrap().is_empty(),
            "{kind:?}: second scan not empty"
        );
        m.write(5, 3);
        assert_eq!(
            t.scan().unwrap(),
            vec![PageRange::new(m.page(5), m.page(6))],
            "{kind:?}: re-armed page not reported"
        );
    }
}

#[test]
fn peek_does_not_clear() {
    for kind in self_backends() {
        let m = Mapping::anon(32 * 4096, 1, false);
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        m.write(3, 1);
        m.write(20, 1);
        let want = expect_set(&m, [3, 20]);
        assert_eq!(page_set(&t.peek().unwrap()), want, "{kind:?} peek");
        assert_eq!(page_set(&t.peek().unwrap()), want, "{kind:?} peek again");
        assert_eq!(page_set(&t.scan().unwrap()), want, "{kind:?} scan");
        assert!(t.peek().unwrap().is_empty(), "{kind:?}");
    }
}

#[test]
fn ranges_grow_and_shrink() {
    for kind in self_backends() {
        let m = Mapping::anon(100 * 4096, 1, false);
        let mut t = tracker(kind);
        let a = PageRange::new(m.page(0), m.page(40));
        let b = PageRange::new(m.page(60), m.page(80));
        t.track(a).unwrap();
        t.track(b).unwrap();
        assert_eq!(t.tracked(), &[a, b]);
        m.write(10, 1);
        m.write(50, 1); // untracked gap
        m.write(70, 1);
        assert_eq!(
            page_set(&t.scan().unwrap()),
            expect_set(&m, [10, 70]),
            "{kind:?}"
        );

        // Grow: cover the gap and beyond (overlapping the tracked parts keeps their state).
        m.write(30, 1);
        t.track(PageRange::new(m.page(20), m.page(90))).unwrap();
        assert_eq!(t.tracked(), &[PageRange::new(m.page(0), m.page(90))]);
        m.write(50, 2);
        m.write(85, 2);
        assert_eq!(
            page_set(&t.scan().unwrap()),
            expect_set(&m, [30, 50, 85]),
            "{kind:?} after grow"
        );

        // Shrink: drop the middle; writes there are no longer reported, pending ones outside
        // the removed part survive the split.
        m.write(5, 3);
        m.write(45, 3);
        m.write(88, 3);
        t.untrack(PageRange::new(m.page(40), m.page(60))).unwrap();
        assert_eq!(
            t.tracked(),
            &[
                PageRange::new(m.page(0), m.page(40)),
                PageRange::new(m.page(60), m.page(90))
            ]
        );
        m.write(50, 3);
        m.write(65, 3);
        assert_eq!(
            page_set(&t.scan().unwrap()),
            expect_set(&m, [5, 65, 88]),
            "{kind:?} after shrink"
        );
        t.untrack(m.range()).unwrap();
        assert!(t.tracked().is_empty());
        m.write(1, 4);
        assert!(t.scan().unwrap().is_empty(), "{kind:?}");
    }
}

#[test]
fn bad_ranges_are_refused() {
    for kind in self_backends() {
        let mut t = tracker(kind);
        let m = Mapping::anon(4 * 4096, 1, false);
        assert!(matches!(
            t.track(PageRange::new(m.addr + 1, m.addr + 4096)),
            Err(TrackError::BadRange { .. })
        ));
        assert!(matches!(
            t.track(PageRange::new(m.addr, m.addr)),
            Err(TrackError::BadRange { .. })
        ));
        // Not mapped at all: a guard page we unmap.
        let hole = m.page(3);
        // SAFETY: unmapping the last page of our own mapping.
        unsafe { libc::munmap(hole as *mut libc::c_void, 4096) };
        let err = t.track(PageRange::new(m.page(2), hole + 4096)).unwrap_err();
        assert!(
            matches!(err, TrackError::NotMapped { .. }),
            "{kind:?}: {err}"
        );
        assert!(t.tracked().is_empty());
    }
}

#[test]
fn backends_of_the_other_event_are_refused_clearly() {
    let t = Tracker::builder().event(Event::Accessed).build().unwrap();
    assert_eq!(t.event(), Event::Accessed);
    assert!(t.access().is_some());
    let err = Tracker::builder()
        .event(Event::Accessed)
        .backend(BackendKind::Mprotect)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            TrackError::WrongEvent {
                event: Event::Accessed,
                ..
            }
        ),
        "{err}"
    );
    let err = Tracker::builder()
        .backend(BackendKind::Refault)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            TrackError::WrongEvent {
                event: Event::Written,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("UffdPagemapScan"), "{err}");
}

#[test]
fn syscall_writes_are_reported_by_uffd() {
    if !uffd_available("syscall_writes_are_reported_by_uffd") {
        return;
    }
    let m = Mapping::anon(16 * 4096, 1, false);
    let mut t = tracker(BackendKind::UffdPagemapScan);
    t.track(m.range()).unwrap();
    let mut fds = [0; 2];
    // SAFETY: creating a pipe into a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: writing 8 bytes from a static buffer, then reading them into tracked page 9.
    unsafe {
        assert_eq!(libc::write(fds[1], b"kiokukio".as_ptr().cast(), 8), 8);
        assert_eq!(libc::read(fds[0], m.page(9) as *mut libc::c_void, 8), 8);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert_eq!(page_set(&t.scan().unwrap()), expect_set(&m, [9]));
}

#[test]
fn remapped_range_is_reported_as_not_registered() {
    if !uffd_available("remapped_range_is_reported_as_not_registered") {
        return;
    }
    let m = Mapping::anon(16 * 4096, 1, false);
    let mut t = tracker(BackendKind::UffdPagemapScan);
    t.track(m.range()).unwrap();
    // Map fresh memory over part of the range: it is not registered with the tracker's uffd.
    // SAFETY: replacing pages of our own mapping.
    let p = unsafe {
        libc::mmap(
            m.page(4) as *mut libc::c_void,
            4 * 4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(p as usize, m.page(4));
    let err = t.scan().unwrap_err();
    assert!(matches!(err, TrackError::NotRegistered { .. }), "{err}");
    // Re-tracking repairs it.
    t.untrack(m.range()).unwrap();
    t.track(m.range()).unwrap();
    m.write(5, 1);
    assert_eq!(page_set(&t.scan().unwrap()), expect_set(&m, [5]));
}

#[test]
fn two_trackers_cannot_share_a_range() {
    for kind in self_backends() {
        let m = Mapping::anon(8 * 4096, 1, false);
        let mut a = tracker(kind);
        let mut b = tracker(kind);
        a.track(m.range()).unwrap();
        let err = b.track(m.range()).unwrap_err();
        assert!(
            matches!(err, TrackError::Busy { .. } | TrackError::Overlap { .. }),
            "{kind:?}: {err}"
        );
        drop(a);
        b.track(m.range()).unwrap();
        m.write(2, 1);
        assert_eq!(
            page_set(&b.scan().unwrap()),
            expect_set(&m, [2]),
            "{kind:?}"
        );
    }
}

#[test]
fn thousands_of_separate_regions_survive_output_buffer_refills() {
    // Every other page written: one region per page, far more than the scan's first output
    // buffer holds, so the scan must resume from where the kernel's walk stopped.
    for kind in self_backends() {
        let m = Mapping::anon(6000 * 4096, 1, false);
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        for round in 0..3 {
            let idx: Vec<usize> = (round % 2..m.pages()).step_by(2).collect();
            for &i in &idx {
                m.write(i, 1);
            }
            let out = t.scan().unwrap();
            assert_eq!(out.len(), idx.len(), "{kind:?} round {round}");
            assert_eq!(
                page_set(&out),
                expect_set(&m, idx),
                "{kind:?} round {round}"
            );
        }
    }
}

#[test]
fn trackers_are_send() {
    fn is_send<T: Send>() {}
    is_send::<Tracker>();
    is_send::<kioku_track::UffdTracker>();
    is_send::<kioku_track::MprotectTracker>();
}
