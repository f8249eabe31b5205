//! The simulated medium: what survives a power cut, ordering points, crash images.

use std::collections::HashSet;

use kioku_pool::media::mapping::page_size;
use kioku_pool::media::sim::{
    load_image, save_image, CrashMode, SimMedium, EXHAUSTIVE_LIMIT, LINE, WORD,
};
use kioku_pool::media::{Medium, MediumError, MediumKind};

fn store(medium: &dyn Medium, off: u64, bytes: &[u8]) {
    assert!(off + bytes.len() as u64 <= medium.len());
    // SAFETY: the range lies inside the medium's mapping (asserted) and only this thread uses it.
    unsafe {
        std::ptr::copy_nonoverlapping(
            bytes.as_ptr(),
            medium.as_ptr().add(off as usize),
            bytes.len(),
        )
    };
}

fn load(medium: &dyn Medium, off: u64, len: usize) -> Vec<u8> {
    assert!(off + len as u64 <= medium.len());
    // SAFETY: as in `store`.
    unsafe { std::slice::from_raw_parts(medium.as_ptr().add(off as usize), len) }.to_vec()
}

fn line(image: &[u8], index: usize) -> &[u8] {
    &image[index * LINE..(index + 1) * LINE]
}

fn random(seed: u64) -> CrashMode {
    CrashMode::Random {
        seed,
        tear_words: false,
        evict_unflushed: false,
    }
}

#[test]
fn unflushed_store_is_lost() {
    let sim = SimMedium::new(4096).unwrap();
    assert_eq!(sim.kind(), MediumKind::Sim);
    store(&sim, 10, &[1; 20]);
    assert_eq!(load(&sim, 10, 20), vec![1; 20]);
    for mode in [
        CrashMode::DrainedOnly,
        CrashMode::AllFlushed,
        random(1),
        random(2),
    ] {
        assert_eq!(sim.crash(mode).unwrap(), vec![0; 4096], "{mode:?}");
    }
    let images: Vec<_> = sim.crash_images().unwrap().collect();
    assert_eq!(images, vec![vec![0; 4096]]);
    // A drain without a flush does not help either.
    sim.drain().unwrap();
    assert_eq!(sim.control().persisted(), vec![0; 4096]);
}

#[test]
fn flushed_not_drained_lines_give_every_subset() {
    let sim = SimMedium::new(4096).unwrap();
    // Lines 1, 2, 3 via one flush of a range straddling them, line 9 via another.
    store(&sim, LINE as u64 + 5, &[0xaa; 2 * LINE + 10]);
    store(&sim, 9 * LINE as u64, &[0xbb; LINE]);
    sim.flush(LINE as u64 + 5, 2 * LINE as u64 + 10).unwrap();
    sim.flush(9 * LINE as u64 + 63, 1).unwrap();
    let ctl = sim.control();
    assert_eq!(ctl.pending_lines(), 4);

    let images: Vec<_> = sim.crash_images().unwrap().collect();
    assert_eq!(images.len(), 1 << 4);
    assert_eq!(
        images.iter().collect::<HashSet<_>>().len(),
        16,
        "all subsets distinct"
    );
    let pending = [1, 2, 3, 9];
    for (index, image) in images.iter().enumerate() {
        for (bit, &l) in pending.iter().enumerate() {
            let kept = index & (1 << bit) != 0;
            let expected = if kept {
                sim_line(&sim, l)
            } else {
                vec![0; LINE]
            };
            assert_eq!(line(image, l), &expected[..], "image {index} line {l}");
        }
        // Nothing outside the pending lines ever appears.
        for l in (0..64).filter(|l| !pending.contains(l)) {
            assert!(line(image, l).iter().all(|&b| b == 0));
        }
        assert_eq!(
            sim.crash(CrashMode::Exhaustive {
                index: index as u64
            })
            .unwrap(),
            *image
        );
    }
    assert!(matches!(
        sim.crash(CrashMode::Exhaustive { index: 16 }),
        Err(MediumError::NoSuchCrashImage {
            index: 16,
            count: 16
        })
    ));
    assert_eq!(sim.crash(CrashMode::DrainedOnly).unwrap(), images[0]);
    assert_eq!(sim.crash(CrashMode::AllFlushed).unwrap(), images[15]);
}

fn sim_line(sim: &SimMedium, l: usize) -> Vec<u8> {
    load(sim, (l * LINE) as u64, LINE)
}

#[test]
fn flushed_and_drained_store_is_always_kept() {
    let sim = SimMedium::new(1024).unwrap();
    store(&sim, 0, &[0x11; LINE]);
    sim.persist(0, LINE as u64).unwrap();
    store(&sim, LINE as u64, &[0x22; LINE]);
    sim.flush(LINE as u64, LINE as u64).unwrap();
    let images: Vec<_> = sim.crash_images().unwrap().collect();
    assert_eq!(images.len(), 2);
    for image in &images {
        assert_eq!(line(image, 0), &[0x11; LINE]);
    }
    assert_ne!(line(&images[0], 1), line(&images[1], 1));
    for seed in 0..20 {
        let image = sim
            .crash(CrashMode::Random {
                seed,
                tear_words: true,
                evict_unflushed: true,
            })
            .unwrap();
        assert_eq!(line(&image, 0), &[0x11; LINE]);
    }
}

#[test]
fn store_after_flush_is_not_written_back() {
    let sim = SimMedium::new(1024).unwrap();
    store(&sim, 0, &[1; 8]);
    sim.flush(0, 8).unwrap();
    store(&sim, 0, &[2; 8]);
    let firsts: HashSet<Vec<u8>> = sim
        .crash_images()
        .unwrap()
        .map(|i| i[..8].to_vec())
        .collect();
    assert_eq!(firsts, HashSet::from([vec![0; 8], vec![1; 8]]));
    sim.drain().unwrap();
    assert_eq!(&sim.control().persisted()[..8], &[1; 8]);
    assert_eq!(
        load(&sim, 0, 8),
        vec![2; 8],
        "working memory keeps the newer store"
    );
    // Flushing again (and draining) makes the newer store durable.
    sim.persist(0, 8).unwrap();
    assert_eq!(&sim.control().persisted()[..8], &[2; 8]);
}

/// Persists record k (one line each) for k in 0..5: flush is point 2k, drain point 2k+1.
/// Returns whether each flush and drain returned Ok.
fn persist_records(sim: &SimMedium) -> Vec<(bool, bool)> {
    (0..5u8)
        .map(|k| {
            store(sim, u64::from(k) * LINE as u64, &[k + 1; LINE]);
            let flushed = sim.flush(u64::from(k) * LINE as u64, LINE as u64);
            let drained = sim.drain();
            (flushed.is_ok(), drained.is_ok())
        })
        .collect()
}

#[test]
fn ordering_points_are_counted() {
    let sim = SimMedium::new(1024).unwrap();
    assert_eq!(sim.ordering_points(), 0);
    persist_records(&sim);
    assert_eq!(sim.ordering_points(), 10);
    sim.write_persist(700, &[9; 3]).unwrap();
    assert_eq!(sim.ordering_points(), 12);
    // An out-of-range flush is refused before it counts.
    assert!(sim.flush(1000, 100).is_err());
    assert_eq!(sim.ordering_points(), 12);
}

#[test]
fn cut_at_a_flush_loses_that_flush() {
    let sim = SimMedium::new(1024).unwrap();
    sim.cut_power_at(6); // the flush of record 3
    let results = persist_records(&sim);
    assert!(
        results.iter().all(|&(f, d)| f && d),
        "non-strict cut keeps returning Ok"
    );
    assert_eq!(
        sim.ordering_points(),
        10,
        "points are still counted after the cut"
    );
    let ctl = sim.control();
    assert_eq!(ctl.power_cut_point(), Some(6));
    assert_eq!(ctl.pending_lines(), 0);
    let images: Vec<_> = sim.crash_images().unwrap().collect();
    assert_eq!(images.len(), 1);
    for k in 0..3 {
        assert_eq!(line(&images[0], k), &[k as u8 + 1; LINE]);
    }
    for k in 3..5 {
        assert_eq!(line(&images[0], k), &[0; LINE], "record {k} after the cut");
    }
    // The code under test ran on: working memory has every record.
    assert_eq!(load(&sim, 4 * LINE as u64, LINE), vec![5; LINE]);
}

#[test]
fn cut_at_a_drain_leaves_the_flushed_line_pending() {
    let sim = SimMedium::new(1024).unwrap();
    sim.cut_power_at(7); // the drain of record 3
    persist_records(&sim);
    let images: Vec<_> = sim.crash_images().unwrap().collect();
    assert_eq!(images.len(), 2);
    let record3: HashSet<Vec<u8>> = images.iter().map(|i| line(i, 3).to_vec()).collect();
    assert_eq!(record3, HashSet::from([vec![0; LINE], vec![4; LINE]]));
    for image in &images {
        assert_eq!(line(image, 2), &[3; LINE]);
        assert_eq!(line(image, 4), &[0; LINE]);
    }
}

#[test]
fn strict_cut_reports_power_cut() {
    let sim = SimMedium::new(1024).unwrap();
    let ctl = sim.control();
    ctl.set_strict(true);
    sim.cut_power_at(3);
    persist_records(&sim);
    assert!(matches!(
        sim.flush(0, 1),
        Err(MediumError::PowerCut { point: 3 })
    ));
    assert!(matches!(
        sim.drain(),
        Err(MediumError::PowerCut { point: 3 })
    ));
    // The flush at point 2 was pending when the drain at point 3 was cut.
    let image = sim.crash(CrashMode::AllFlushed).unwrap();
    assert_eq!(line(&image, 0), &[1; LINE]);
    assert_eq!(line(&image, 1), &[2; LINE]);
    assert_eq!(line(&image, 2), &[0; LINE]);
    let image = sim.crash(CrashMode::DrainedOnly).unwrap();
    assert_eq!(line(&image, 1), &[0; LINE]);
    let with_pending: Vec<_> = sim.crash_images().unwrap().collect();
    assert_eq!(with_pending.len(), 2);
}

#[test]
fn cut_now_freezes_between_points() {
    let sim = SimMedium::new(1024).unwrap();
    store(&sim, 0, &[1; LINE]);
    sim.persist(0, LINE as u64).unwrap();
    let ctl = sim.control();
    ctl.cut_power_now();
    assert_eq!(ctl.power_cut_point(), Some(2));
    store(&sim, LINE as u64, &[2; LINE]);
    sim.persist(LINE as u64, LINE as u64).unwrap();
    let image = sim.crash(CrashMode::AllFlushed).unwrap();
    assert_eq!(line(&image, 0), &[1; LINE]);
    assert_eq!(line(&image, 1), &[0; LINE]);
    // Stores after the cut are not even candidates for eviction.
    for seed in 0..16 {
        let image = sim
            .crash(CrashMode::Random {
                seed,
                tear_words: false,
                evict_unflushed: true,
            })
            .unwrap();
        assert_eq!(line(&image, 1), &[0; LINE]);
    }
}

fn many_pending(lines: usize) -> SimMedium {
    let sim = SimMedium::new((lines * LINE) as u64).unwrap();
    sim.persist(0, sim.len()).unwrap();
    let new: Vec<u8> = (0..lines * LINE).map(|i| (i % 250) as u8 + 1).collect();
    store(&sim, 0, &new);
    sim.flush(0, sim.len()).unwrap();
    sim
}

#[test]
fn random_mode_is_reproducible_and_keeps_whole_lines() {
    let sim = many_pending(12);
    let new = load(&sim, 0, 12 * LINE);
    let a = sim.crash(random(42)).unwrap();
    assert_eq!(a, sim.crash(random(42)).unwrap());
    let distinct: HashSet<Vec<u8>> = (0..8).map(|s| sim.crash(random(s)).unwrap()).collect();
    assert!(distinct.len() > 1, "different seeds give different images");
    for seed in 0..8 {
        let image = sim.crash(random(seed)).unwrap();
        for l in 0..12 {
            let got = line(&image, l);
            assert!(
                got == &new[l * LINE..(l + 1) * LINE] || got.iter().all(|&b| b == 0),
                "line {l} torn"
            );
        }
    }
}

#[test]
fn torn_words_are_whole_8_byte_words() {
    let sim = SimMedium::new(16 * LINE as u64).unwrap();
    store(&sim, 0, &[0x0f; 16 * LINE]);
    sim.persist(0, 16 * LINE as u64).unwrap();
    store(&sim, 0, &[0xf0; 16 * LINE]);
    sim.flush(0, 16 * LINE as u64).unwrap();
    let mut mixed_lines = 0;
    for seed in 0..10 {
        let mode = CrashMode::Random {
            seed,
            tear_words: true,
            evict_unflushed: false,
        };
        let image = sim.crash(mode).unwrap();
        assert_eq!(image, sim.crash(mode).unwrap(), "reproducible");
        for word in image.chunks(WORD) {
            assert!(
                word == [0x0f; WORD] || word == [0xf0; WORD],
                "a word is old or new, never mixed"
            );
        }
        for l in 0..16 {
            let words: HashSet<&[u8]> = line(&image, l).chunks(WORD).collect();
            if words.len() == 2 {
                mixed_lines += 1;
            }
        }
    }
    assert!(mixed_lines > 0, "tearing happens within lines");
}

#[test]
fn evicted_unflushed_lines_may_reach_media() {
    let sim = SimMedium::new(8 * LINE as u64).unwrap();
    store(&sim, 3 * LINE as u64, &[0x33; LINE]);
    // Line 5: flushed with one content, then stored again without flushing.
    store(&sim, 5 * LINE as u64, &[0x55; LINE]);
    sim.flush(5 * LINE as u64, LINE as u64).unwrap();
    store(&sim, 5 * LINE as u64, &[0x56; LINE]);

    let mut line3 = HashSet::new();
    let mut line5 = HashSet::new();
    for seed in 0..40 {
        let without = sim.crash(random(seed)).unwrap();
        assert_eq!(line(&without, 3), &[0; LINE], "no eviction unless asked");
        assert_ne!(line(&without, 5), &[0x56; LINE]);
        let with = sim
            .crash(CrashMode::Random {
                seed,
                tear_words: false,
                evict_unflushed: true,
            })
            .unwrap();
        line3.insert(line(&with, 3).to_vec());
        line5.insert(line(&with, 5).to_vec());
        for l in [0, 1, 2, 4, 6, 7] {
            assert_eq!(line(&with, l), &[0; LINE], "clean lines never change");
        }
    }
    assert_eq!(line3, HashSet::from([vec![0; LINE], vec![0x33; LINE]]));
    assert_eq!(
        line5,
        HashSet::from([vec![0; LINE], vec![0x55; LINE], vec![0x56; LINE]])
    );
}

#[test]
fn exhaustive_enumeration_has_a_limit() {
    let sim = many_pending(EXHAUSTIVE_LIMIT);
    assert_eq!(sim.crash_images().unwrap().len(), 1 << EXHAUSTIVE_LIMIT);
    let sim = many_pending(EXHAUSTIVE_LIMIT + 1);
    assert!(matches!(
        sim.crash_images(),
        Err(MediumError::TooManyPendingLines {
            pending: 17,
            limit: 16
        })
    ));
    assert!(matches!(
        sim.crash(CrashMode::Exhaustive { index: 0 }),
        Err(MediumError::TooManyPendingLines { .. })
    ));
    // Random images work at any size.
    sim.crash(random(0)).unwrap();
}

#[test]
fn grow_extends_both_sides_with_zeros() {
    let mut sim = SimMedium::new(100).unwrap();
    store(&sim, 90, &[7; 10]);
    sim.persist(64, 36).unwrap(); // the short last line
    sim.grow(5000).unwrap();
    assert_eq!(sim.len(), 5000);
    assert_eq!(load(&sim, 90, 10), vec![7; 10]);
    assert!(load(&sim, 100, 4900).iter().all(|&b| b == 0));
    let image = sim.crash(CrashMode::DrainedOnly).unwrap();
    assert_eq!(image.len(), 5000, "growth is durable at once");
    assert_eq!(&image[90..100], &[7; 10]);
    store(&sim, 4990, &[8; 10]);
    sim.persist(4990, 10).unwrap();
    assert_eq!(&sim.control().persisted()[4990..], &[8; 10]);
    assert!(matches!(sim.grow(10), Err(MediumError::Shrink { .. })));

    // Growth after a cut is not part of the image.
    sim.control().cut_power_now();
    sim.grow(9000).unwrap();
    assert_eq!(sim.len(), 9000);
    assert_eq!(sim.crash(CrashMode::AllFlushed).unwrap().len(), 5000);
}

#[test]
fn alias_stores_are_flushed_by_offset() {
    let page = page_size() as u64;
    let sim = SimMedium::new(4 * page).unwrap();
    let alias = sim
        .map_range(std::ptr::null_mut(), 2 * page, page, false)
        .unwrap();
    // SAFETY: 10 + 20 bytes lie inside the one-page alias.
    unsafe { std::ptr::write_bytes(alias.as_ptr().add(10), 0x77, 20) };
    assert_eq!(
        load(&sim, 2 * page + 10, 20),
        vec![0x77; 20],
        "same memfd pages"
    );
    sim.persist(2 * page + 10, 20).unwrap();
    assert_eq!(
        &sim.control().persisted()[(2 * page + 10) as usize..][..20],
        &[0x77; 20]
    );
    assert_ne!(sim.fd(), -1);
}

#[test]
fn images_round_trip_through_files_and_from_image() {
    let sim = many_pending(4);
    let image = sim.crash(CrashMode::AllFlushed).unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("crash.img");
    save_image(&path, &image).unwrap();
    assert_eq!(load_image(&path).unwrap(), image);

    let reopened = SimMedium::load(&path).unwrap();
    assert_eq!(reopened.len(), image.len() as u64);
    assert_eq!(load(&reopened, 0, image.len()), image);
    assert_eq!(reopened.control().persisted(), image);
    assert_eq!(reopened.ordering_points(), 0);
    assert_eq!(reopened.control().working(), image);
    assert!(matches!(
        load_image(&dir.path().join("missing")),
        Err(MediumError::Io { .. })
    ));
}

#[test]
fn flushing_a_mebibyte_is_quick() {
    let sim = SimMedium::new(1 << 20).unwrap();
    store(&sim, 0, &vec![0x5a; 1 << 20]);
    let start = std::time::Instant::now();
    sim.flush(0, 1 << 20).unwrap();
    sim.drain().unwrap();
    let took = start.elapsed();
    assert_eq!(sim.control().persisted(), vec![0x5a; 1 << 20]);
    // Generous bound (opt-level 1, 2 shared cores); a per-line allocation design takes far longer.
    assert!(
        took < std::time::Duration::from_millis(500),
        "flush+drain of 1 MiB took {took:?}"
    );
}

#[test]
fn control_outlives_handing_the_medium_over() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SimMedium>();
    assert_send_sync::<kioku_pool::media::sim::SimControl>();

    let sim = SimMedium::new(4096).unwrap();
    let ctl = sim.control();
    let boxed: Box<dyn Medium> = Box::new(sim);
    let worker = std::thread::spawn(move || {
        boxed.write_persist(128, &[3; 64]).unwrap();
        boxed
    });
    let boxed = worker.join().unwrap();
    assert_eq!(ctl.ordering_points(), 2);
    assert_eq!(&ctl.persisted()[128..192], &[3; 64]);
    drop(boxed);
    // The durable side is still readable after the medium is gone.
    assert_eq!(
        &ctl.crash(CrashMode::DrainedOnly).unwrap()[128..192],
        &[3; 64]
    );
}
