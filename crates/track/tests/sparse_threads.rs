//! Sparse ranges of 1 GiB and more, and several threads writing while the main thread scans.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use common::*;
use kioku_track::{page_size, PageTracker};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn sparse_gigabyte_ranges() {
    for kind in self_backends() {
        let len = (1usize << 30) + (64 << 20); // 1 GiB + 64 MiB, mostly never touched
        let m = Mapping::anon(len, 1, true);
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        let mut out = Vec::new();
        let started = Instant::now();
        t.scan_into(&mut out).unwrap();
        let clean = started.elapsed();
        assert!(
            out.is_empty(),
            "{kind:?}: untouched range reported {out:x?}"
        );
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut truth = BTreeSet::new();
        for _ in 0..40 {
            let i = rng.gen_range(0..m.pages());
            m.write(i, 9);
            truth.insert(m.page(i));
        }
        m.write(m.pages() - 1, 1);
        truth.insert(m.page(m.pages() - 1));
        m.write(0, 1);
        truth.insert(m.page(0));
        t.scan_into(&mut out).unwrap();
        assert_eq!(page_set(&out), truth, "{kind:?}");
        t.scan_into(&mut out).unwrap();
        assert!(out.is_empty(), "{kind:?}");
        eprintln!(
            "{kind:?}: clean scan of {} MiB sparse took {clean:?} (debug build)",
            len >> 20
        );
    }
}

#[test]
fn threads_writing_during_scans_lose_nothing() {
    for kind in self_backends() {
        let threads = 4;
        let per_thread = 256;
        let m = Arc::new(Mapping::anon(threads * per_thread * page_size(), 1, false));
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        let mut handles = Vec::new();
        for th in 0..threads {
            let m = Arc::clone(&m);
            handles.push(std::thread::spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(th as u64);
                let mut written = BTreeSet::new();
                for k in 0..3000 {
                    // Each thread owns a slice of pages but also writes into its neighbour's.
                    let base = ((th + (k % 5 == 0) as usize) % threads) * per_thread;
                    let i = base + rng.gen_range(0..per_thread);
                    m.write(i, k as u8);
                    written.insert(m.page(i));
                }
                written
            }));
        }
        let mut reported = BTreeSet::new();
        let mut out = Vec::new();
        let mut scans = 0;
        while handles.iter().any(|h| !h.is_finished()) {
            t.scan_into(&mut out).unwrap();
            reported.extend(page_set(&out));
            scans += 1;
        }
        let mut truth = BTreeSet::new();
        for h in handles {
            truth.extend(h.join().unwrap());
        }
        t.scan_into(&mut out).unwrap();
        reported.extend(page_set(&out));
        assert_eq!(reported, truth, "{kind:?} after {scans} concurrent scans");
        eprintln!(
            "{kind:?}: {} pages written by {threads} threads, {scans} scans",
            truth.len()
        );
    }
}

#[test]
fn every_write_between_scans_is_seen_by_a_later_scan() {
    // The guarantee per scan interval: a page written after scan N returns is in scan N+1.
    for kind in self_backends() {
        let m = Arc::new(Mapping::anon(64 * page_size(), 1, false));
        let mut t = tracker(kind);
        t.track(m.range()).unwrap();
        let writer = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                for k in 0..20000usize {
                    m.write(k % 64, k as u8);
                }
            })
        };
        let mut out = Vec::new();
        while !writer.is_finished() {
            t.scan_into(&mut out).unwrap();
        }
        writer.join().unwrap();
        t.scan_into(&mut out).unwrap();
        // After the last scan, one more write per page must each be reported.
        for i in 0..64 {
            m.write(i, 0xEE);
        }
        t.scan_into(&mut out).unwrap();
        assert_eq!(page_set(&out), expect_set(&m, 0..64), "{kind:?}");
    }
}
